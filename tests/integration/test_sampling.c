/* Integration: qrs_sampler_sample_token() against a real qrsd: the draw
   for each token comes from the daemon with the sampler's commitment, and
   is prefetched right after the previous selection. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include <qrs/batch.h>
#include <qrs/client.h>
#include <qrs/sampler.h>

#include "harness.h"
#include "harness_client.h"

static struct daemon D;

static void
start(void)
{
  daemon_run(&D, NULL);
}

static void
stop(void)
{
  daemon_cleanup(&D);
}

/* The rows of these tests. */
#define ROW_SLOPE -1.3

Test(sampling, tokens_from_prefetched_committed_draws, .init = start,
     .fini = stop)
{
  struct qrs_client *c;
  struct qrs_sampler *s;
  struct qrs_token_record rec;
  struct qrs_commitment cm;
  struct qrs_draw_request rq;
  struct qrs_draw d;
  float row[1000];
  uint32_t tok, prev;
  int t, r;

  c = connect_client(D.sock);
  s = sampler_with(1000, NULL);
  /* The first draw overlaps the prefill. */
  cr_assert_eq(qrs_sampler_prefetch(s, c), 0);
  prev = UINT32_MAX;
  for (t = 0; t < 20; t++) {
    lm_row(row, 1000, (unsigned)t, ROW_SLOPE);
    qrs_sampler_next_commitment(s, &cm);
    cr_assert_eq(cm.step, (uint64_t)t);
    cr_assert_eq(cm.prev_token_id, t ? (int64_t)prev : -1);
    r = qrs_sampler_sample_token(s, c, row, QRS_DTYPE_F32, 1000, &tok, &rec);
    cr_assert_eq(r, 0, "token %d: %s", t, qrs_strerror(r));
    cr_assert_lt(tok, 1000);
    cr_expect(rec.u_value > 0.0 && rec.u_value < 1.0);
    cr_expect_eq(rec.entropy_prefetch_hit, 1, "token %d prefetched", t);
    cr_expect_neq(rec.entropy_nonce, 0);
    cr_expect(rec.entropy_source_used[0], "served_by reported");
    cr_expect(rec.cdf_lo < rec.u_value + 1e-12 &&
              rec.u_value <= rec.cdf_hi + 1e-12);
    cr_expect_eq(rec.step, (uint64_t)t);
    /* The daemon derives the same nonce from the same commitment. */
    memset(&rq, 0, sizeof(rq));
    rq.commitment = &cm;
    rq.sample_count = 64;
    cr_assert_eq(qrs_client_draw(c, &rq, &d), 0);
    cr_expect_eq(d.nonce, rec.entropy_nonce, "token %d: nonce", t);
    prev = tok;
  }
  /* Freeing the sampler cancels the draw it prefetched; the client goes
     on. */
  qrs_sampler_free(s);
  cr_assert_eq(qrs_client_draw(c, NULL, &d), 0);
  qrs_client_free(c);
}

Test(sampling, without_prefetch_every_draw_is_serial, .init = start,
     .fini = stop)
{
  struct qrs_client *c;
  struct qrs_sampler *s;
  struct qrs_token_record rec;
  float row[300];
  int t;

  c = connect_client(D.sock);
  s = sampler_with(300, "entropy_prefetch", "false", NULL);
  cr_assert_eq(qrs_sampler_prefetch(s, c), 0, "a no-op");
  for (t = 0; t < 5; t++) {
    lm_row(row, 300, (unsigned)t, ROW_SLOPE);
    cr_assert_eq(
        qrs_sampler_sample_token(s, c, row, QRS_DTYPE_F32, 300, NULL, &rec),
        0);
    cr_expect_eq(rec.entropy_prefetch_hit, -1);
    cr_expect_neq(rec.entropy_nonce, 0, "still committed");
    cr_expect_geq(rec.entropy_fetch_ms, 0.0);
  }
  qrs_sampler_free(s);
  qrs_client_free(c);
}

Test(sampling, unknown_source_is_the_daemons_error_and_no_token,
     .init = start, .fini = stop)
{
  struct qrs_client *c;
  struct qrs_sampler *s;
  struct qrs_commitment cm;
  float row[10] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 };
  int r;

  c = connect_client(D.sock);
  s = sampler_with(10, "entropy_source_type", "no-such-source", NULL);
  r = qrs_sampler_sample_token(s, c, row, QRS_DTYPE_F32, 10, NULL, NULL);
  cr_expect_eq(r, QRS_E_UNKNOWN_SOURCE, "%s", qrs_strerror(r));
  qrs_sampler_next_commitment(s, &cm);
  cr_expect_eq(cm.step, 0, "the step did not advance");
  qrs_sampler_free(s);
  qrs_client_free(c);
}

/* SIGSTOP qrsd and wait until it is stopped. */
static void
stop_daemon_process(void)
{
  char path[64], buf[256], *p;
  int i, fd;
  ssize_t n;

  kill(D.pid, SIGSTOP);
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)D.pid);
  for (i = 0; i < 1000; i++) {
    fd = open(path, O_RDONLY | O_CLOEXEC);
    cr_assert_geq(fd, 0);
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    p = strrchr(buf, ')');
    if (p && p[1] == ' ' && p[2] == 'T')
      return;
    usleep(1000);
  }
  cr_assert_fail("qrsd did not stop");
}

/* A prefetch whose finish times out must give its ticket back.  The daemon is
   stopped (SIGSTOP) so that the prefetched draw and the serial retry both time
   out; its late reply then arrives while the next token waits for its own
   draw.  Before the fix the slot stayed DONE for ever, and after max_inflight
   such timeouts draw_begin answered BUSY for the client's life: prefetch never
   worked again. */
Test(sampling, timed_out_prefetch_gives_its_ticket_back, .fini = stop)
{
  struct qrs_client_options o;
  struct qrs_token_record rec;
  struct qrs_client *c;
  struct qrs_sampler *s;
  struct qrs_draw d;
  float row[100];
  uint32_t ticket;
  int i, pr, r;

  daemon_run(&D, "limits: { max_inflight_per_connection: 3 }\n");
  memset(&o, 0, sizeof(o));
  o.timeout_ms = 300;
  cr_assert_eq(qrs_client_new(D.sock, &o, &c), 0);
  s = sampler_with(100, NULL);
  lm_row(row, 100, 1, ROW_SLOPE);
  for (i = 0; i < 5; i++) {
    /* A good token, which leaves the next token's draw prefetched. */
    r = qrs_sampler_sample_token(s, c, row, QRS_DTYPE_F32, 100, NULL, &rec);
    cr_assert_eq(r, 0, "round %d: %s", i, qrs_strerror(r));
    /* Its reply may be in already: prefetch again on the stopped daemon. */
    qrs_sampler_cancel_prefetch(s);
    stop_daemon_process();
    pr = qrs_sampler_prefetch(s, c);
    r = qrs_sampler_sample_token(s, c, row, QRS_DTYPE_F32, 100, NULL, &rec);
    kill(D.pid, SIGCONT);
    cr_assert_eq(pr, 0, "round %d: prefetch: %s", i, qrs_strerror(pr));
    cr_assert_eq(r, -ETIMEDOUT, "round %d on a stopped daemon: %s", i,
                 qrs_strerror(r));
  }
  /* The late replies have come in; every ticket is free again. */
  r = qrs_sampler_sample_token(s, c, row, QRS_DTYPE_F32, 100, NULL, &rec);
  cr_assert_eq(r, 0, "%s", qrs_strerror(r));
  r = qrs_sampler_sample_token(s, c, row, QRS_DTYPE_F32, 100, NULL, &rec);
  cr_assert_eq(r, 0, "%s", qrs_strerror(r));
  cr_expect_eq(rec.entropy_prefetch_hit, 1, "the token's draw was prefetched");
  qrs_sampler_free(s);
  /* A blocking draw takes in the cancelled prefetch's reply. */
  cr_assert_eq(qrs_client_draw(c, NULL, &d), 0);
  for (i = 0; i < 3; i++) {
    r = qrs_client_draw_begin(c, NULL, &ticket);
    cr_assert_eq(r, 0, "ticket %d of 3: %s", i, qrs_strerror(r));
  }
  cr_assert_eq(qrs_client_draw_finish(c, ticket, &d), 0);
  qrs_client_free(c);
}

/* A new salt drops the draw prefetched under the old one, so the next token's
   draw is committed under the new salt. */
Test(sampling, set_salt_drops_the_prefetched_draw, .init = start,
     .fini = stop)
{
  static const uint8_t salt[] = "a salt the caller chose";
  struct qrs_token_record rec;
  struct qrs_client *c;
  struct qrs_sampler *s;
  struct qrs_draw d;
  float row[100];
  int r;

  c = connect_client(D.sock);
  s = sampler_with(100, NULL);
  lm_row(row, 100, 3, ROW_SLOPE);
  cr_assert_eq(qrs_sampler_prefetch(s, c), 0);
  cr_assert_eq(qrs_sampler_set_salt(s, salt, sizeof(salt)), 0);
  r = qrs_sampler_sample_token(s, c, row, QRS_DTYPE_F32, 100, NULL, &rec);
  cr_assert_eq(r, 0, "%s", qrs_strerror(r));
  /* The daemon's nonce for the new salt at step 0. */
  cr_assert_eq(draw_committed(c, salt, sizeof(salt), 0, 64, &d), 0);
  cr_expect_eq(rec.entropy_nonce, d.nonce,
               "the first token's draw is committed under the new salt");
  cr_expect_neq(rec.entropy_prefetch_hit, 1, "the old prefetch was dropped");
  qrs_sampler_free(s);
  qrs_client_free(c);
}

/* One run of BATCH_STEPS batches of BATCH_ROWS rows through a fresh qrsd
   on a seeded mock source, on a pool of the given threads: every
   record. */
#define BATCH_ROWS 6
#define BATCH_STEPS 4
#define BATCH_VOCAB 1000

static void
batch_run(unsigned threads,
          struct qrs_token_record recs[BATCH_STEPS][BATCH_ROWS])
{
  static const char yaml[] =
      "allow_test_sources: true\n"
      "default_source: mock\n"
      "sources:\n"
      "  mock: { type: mock, seed: 11 }\n";
  static float rows[BATCH_ROWS][BATCH_VOCAB];
  struct qrs_sampler *s[BATCH_ROWS];
  struct qrs_batch_row br[BATCH_ROWS];
  struct qrs_pool *pool;
  struct qrs_client *c;
  uint8_t salt[4] = { 's', 'a', 'l', 0 };
  int t, b;

  daemon_run(&D, yaml);
  c = connect_client(D.sock);
  cr_assert_eq(qrs_pool_new(threads, &pool), 0);
  for (b = 0; b < BATCH_ROWS; b++) {
    s[b] = sampler_with(BATCH_VOCAB, NULL);
    salt[3] = (uint8_t)b;
    cr_assert_eq(qrs_sampler_set_salt(s[b], salt, sizeof(salt)), 0);
  }
  for (t = 0; t < BATCH_STEPS; t++) {
    memset(br, 0, sizeof(br));
    for (b = 0; b < BATCH_ROWS; b++) {
      lm_row(rows[b], BATCH_VOCAB, (unsigned)(t * BATCH_ROWS + b), ROW_SLOPE);
      br[b].sampler = s[b];
      br[b].client = c;
      br[b].record = &recs[t][b];
    }
    cr_assert_eq(qrs_sample_batch(pool, rows, QRS_DTYPE_F32, BATCH_VOCAB,
                                  BATCH_VOCAB, br, BATCH_ROWS), 0);
    for (b = 0; b < BATCH_ROWS; b++) {
      cr_assert_eq(br[b].status, 0);
      cr_assert_eq(br[b].token, recs[t][b].token_id);
    }
  }
  for (b = 0; b < BATCH_ROWS; b++)
    qrs_sampler_free(s[b]);
  qrs_pool_free(pool);
  qrs_client_free(c);
  daemon_cleanup(&D);
}

Test(sampling, batch_draws_in_row_order_on_any_pool)
{
  static struct qrs_token_record one[BATCH_STEPS][BATCH_ROWS];
  static struct qrs_token_record two[BATCH_STEPS][BATCH_ROWS];
  int t, b, differ = 0;

  batch_run(1, one);
  batch_run(2, two);
  for (t = 0; t < BATCH_STEPS; t++)
    for (b = 0; b < BATCH_ROWS; b++) {
      /* the same bytes reached the same row: the same u and token */
      cr_expect_eq(one[t][b].u_value, two[t][b].u_value, "step %d row %d",
                   t, b);
      cr_expect_eq(one[t][b].token_id, two[t][b].token_id);
      cr_expect_eq(one[t][b].entropy_nonce, two[t][b].entropy_nonce);
      /* the first step's draws were begun by the batch, after the
         logits; the later ones prefetched after the step before */
      cr_expect_eq(one[t][b].entropy_prefetch_hit, t ? 1 : -1,
                   "step %d row %d", t, b);
      cr_expect_eq(two[t][b].entropy_prefetch_hit, t ? 1 : -1);
      differ += b && one[t][b].u_value != one[t][0].u_value;
    }
  cr_expect_gt(differ, 0, "rows drew different bytes");
}

/* The step split for a selection made elsewhere: take_draw holds the
   prefetched draw; finish_pick with the token libqrs picks at its u, or
   finish_row with the row, leaves the chain where one sample_token
   would (a twin sampler with the same salt selects at the same u). */
Test(sampling, split_step_equals_one_step, .init = start, .fini = stop)
{
  static const uint8_t salt[] = "split step";
  struct qrs_client *c;
  struct qrs_sampler *s, *twin;
  struct qrs_token_record rec, want;
  struct qrs_commitment a, b;
  struct qrs_pick p;
  float row[1000];
  char line[8192];
  uint32_t tok, wtok;
  double u, u2;
  FILE *log;
  int t;

  c = connect_client(D.sock);
  s = sampler_with(1000, "top_p", "0.9", "log_level", "full", NULL);
  twin = sampler_with(1000, "top_p", "0.9", NULL);
  log = tmpfile();
  cr_assert_not_null(log);
  cr_assert_eq(qrs_sampler_set_log_file(s, log), 0);
  cr_assert_eq(qrs_sampler_set_salt(s, salt, sizeof(salt)), 0);
  cr_assert_eq(qrs_sampler_set_salt(twin, salt, sizeof(salt)), 0);
  cr_assert_eq(qrs_sampler_finish_row(s, c, row, QRS_DTYPE_F32, 1000, &tok,
                                      &rec),
               -ENOENT, "no draw held");
  cr_assert_eq(qrs_sampler_prefetch(s, c), 0);
  for (t = 0; t < 8; t++) {
    lm_row(row, 1000, (unsigned)t, ROW_SLOPE);
    cr_assert_eq(qrs_sampler_take_draw(s, c, &u), 0, "token %d", t);
    cr_assert_eq(qrs_sampler_take_draw(s, c, &u2), 0);
    cr_assert_eq(u, u2, "the held draw again");
    cr_assert_eq(qrs_sampler_select_u(twin, row, QRS_DTYPE_F32, 1000, u,
                                      &wtok, &want),
                 0);
    if (t % 2) {
      rewind(log);
      cr_assert_eq(qrs_sampler_finish_row(s, c, row, QRS_DTYPE_F32, 1000,
                                          &tok, &rec),
                   0);
      cr_expect_eq(rec.device_selection, QRS_DEVICE_SELECTION_UNCERTIFIED);
      /* its log line says so too */
      fflush(log);
      rewind(log);
      cr_assert_not_null(fgets(line, sizeof(line), log));
      cr_expect_not_null(strstr(line, "\"device_selection\":\"uncertified\""),
                         "%s", line);
    } else {
      memset(&p, 0, sizeof(p));
      p.token = want.token_id;
      p.rank = want.token_rank;
      p.num_candidates = want.num_candidates;
      p.prob = want.token_prob;
      p.cdf_lo = want.cdf_lo;
      p.cdf_hi = want.cdf_hi;
      p.entropy = NAN;
      p.temperature = 2.0;
      cr_expect_eq(qrs_sampler_finish_pick(s, c, &p, &rec), -EINVAL,
                   "another temperature");
      p.temperature = want.temperature_used;
      p.cdf_lo = u + 0.5;
      cr_expect_eq(qrs_sampler_finish_pick(s, c, &p, &rec), -EINVAL,
                   "u outside the pick's interval");
      p.cdf_lo = want.cdf_lo;
      cr_assert_eq(qrs_sampler_finish_pick(s, c, &p, &rec), 0);
      cr_expect_eq(rec.device_selection, QRS_DEVICE_SELECTION_CERTIFIED);
      tok = rec.token_id;
    }
    cr_expect_eq(tok, wtok, "token %d", t);
    cr_expect_eq(rec.step, want.step);
    cr_expect_eq(rec.u_value, u);
    cr_expect_eq(rec.entropy_prefetch_hit, 1, "token %d prefetched", t);
    cr_expect_neq(rec.entropy_nonce, 0);
    qrs_sampler_next_commitment(s, &a);
    qrs_sampler_next_commitment(twin, &b);
    cr_expect_eq(a.step, b.step);
    cr_expect_eq(a.prev_token_id, b.prev_token_id);
  }
  /* sample_token after take_draw selects at the held draw's u */
  cr_assert_eq(qrs_sampler_take_draw(s, c, &u), 0);
  lm_row(row, 1000, 99, ROW_SLOPE);
  cr_assert_eq(qrs_sampler_sample_token(s, c, row, QRS_DTYPE_F32, 1000, &tok,
                                        &rec),
               0);
  cr_expect_eq(rec.u_value, u, "one draw for the step, not two");
  /* a reset drops the held draw */
  cr_assert_eq(qrs_sampler_take_draw(s, c, &u), 0);
  cr_assert_eq(qrs_sampler_reset(s), 0);
  cr_expect_eq(qrs_sampler_finish_row(s, c, row, QRS_DTYPE_F32, 1000, &tok,
                                      &rec),
               -ENOENT);
  qrs_sampler_free(twin);
  qrs_sampler_free(s);
  fclose(log);
  qrs_client_free(c);
}
