/* Integration: a real qrsd on a temporary socket, driven through the real
   libqrs and through raw frames. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <criterion/criterion.h>

#include <qrs/client.h>

#include "harness.h"
#include "harness_client.h"
#include "timestamp.h"
#include "ustat.h"

static struct daemon D;

static void
stop_and_clean(void)
{
  daemon_cleanup(&D);
}

static void
start_default(void)
{
  daemon_run(&D, NULL);
}

/* ---- the draw path -------------------------------------------------- */

Test(daemon, draw_round_trip, .init = start_default, .fini = stop_and_clean)
{
  const struct qrs_server_info *info;
  struct qrs_client *c;
  struct qrs_draw d;

  c = connect_client(D.sock);
  info = qrs_client_server_info(c);
  cr_assert_eq(info->protocol_version, 1);
  cr_assert_str_eq(info->default_source, "system");
  cr_assert_eq(info->default_sample_count, 10000);
  cr_assert_eq(info->max_inflight, 64);

  cr_assert_eq(qrs_client_draw(c, NULL, &d), 0);
  cr_assert(d.u > 0 && d.u < 1, "u = %f", d.u);
  cr_assert_eq(d.sample_count, 10000);
  cr_assert_str_eq(d.source, "system");
  cr_assert_str_eq(d.served_by, "system");
  cr_assert_str_eq(d.amplifier, "zscore_mean");
  cr_assert_eq(d.fallback, 0);
  cr_assert_eq(d.nonce, 0);
  cr_assert_eq(d.echo, QRS_ECHO_NONE);
  /* z and u agree: u = Phi(z). */
  cr_assert(fabs(d.u - 0.5 * erfc(-d.z / sqrt(2.0))) < 1e-12);
  cr_assert(fabs(d.sample_mean - (127.5 + d.z * 73.90027063 / 100.0))
            < 1e-6);

  /* The commitment nonce of tests/vectors/nonce.json's first case (the
     reference's derive_commit_nonce()): empty salt, step 0, -1. */
  cr_assert_eq(draw_committed(c, NULL, 0, 0, 100, &d), 0);
  cr_assert_eq(d.nonce, 8681103821628823450ull);
  cr_assert_eq(d.sample_count, 100);
  qrs_client_free(c);
}

Test(daemon, system_draws_are_uniform, .init = start_default,
     .fini = stop_and_clean, .timeout = 60)
{
  struct qrs_client *c;
  struct qrs_draw d;
  double *u, p;
  int i;

  c = connect_client(D.sock);
  u = malloc(2000 * sizeof(*u));
  cr_assert_not_null(u);
  for (i = 0; i < 2000; i++) {
    cr_assert_eq(qrs_client_draw(c, NULL, &d), 0);
    u[i] = d.u;
  }
  p = ustat_ks_pvalue(ustat_ks(u, 2000), 2000);
  cr_log_info("KS p-value of 2000 system draws: %g", p);
  cr_assert_gt(p, 1e-4, "u not uniform: KS p = %g", p);
  free(u);
  qrs_client_free(c);
}

Test(daemon, timestamps_are_ordered, .init = start_default,
     .fini = stop_and_clean)
{
  struct qrs_draw_request rq;
  struct qrs_client *c;
  struct qrs_draw d;
  int64_t before, after;
  int i;

  c = connect_client(D.sock);
  memset(&rq, 0, sizeof(rq));
  for (i = 0; i < 200; i++) {
    /* Both paths: inline reads and worker-thread reads. */
    rq.sample_count = i % 10 == 0 ? 200000 : 10000;
    before = mono_now_ns();
    cr_assert_eq(qrs_client_draw(c, &rq, &d), 0);
    after = mono_now_ns();
    cr_assert_leq(before, d.received.monotonic_ns);
    cr_assert_leq(d.received.monotonic_ns, d.generated.monotonic_ns);
    cr_assert_leq(d.generated.monotonic_ns, d.sent.monotonic_ns);
    cr_assert_leq(d.sent.monotonic_ns, after);
    cr_assert_leq(d.received.realtime_ns, d.generated.realtime_ns);
    cr_assert_leq(d.generated.realtime_ns, d.sent.realtime_ns);
    cr_assert_gt(d.received.realtime_ns, 1600000000ll * 1000000000ll);
  }
  qrs_client_free(c);
}

Test(daemon, pipelined_draws_return_by_ticket, .init = start_default,
     .fini = stop_and_clean)
{
  struct qrs_commitment cm[64];
  struct qrs_draw_request rq;
  struct qrs_client *c;
  uint32_t ticket[64], extra;
  struct qrs_draw d;
  int i, r;

  c = connect_client(D.sock);
  for (i = 0; i < 64; i++) {
    memset(&cm[i], 0, sizeof(cm[i]));
    cm[i].step = (uint64_t)i;
    cm[i].prev_token_id = -1;
    memset(&rq, 0, sizeof(rq));
    rq.commitment = &cm[i];
    rq.sample_count = i % 2 ? 100000 : 1000;
    r = qrs_client_draw_begin(c, &rq, &ticket[i]);
    cr_assert_eq(r, 0, "begin %d: %s", i, qrs_strerror(r));
  }
  /* A 65th is over the daemon's in-flight limit for this client. */
  cr_assert_eq(qrs_client_draw_begin(c, NULL, &extra), QRS_E_BUSY);
  /* Finish in reverse: every reply lands with its own ticket. */
  for (i = 63; i >= 0; i--) {
    r = qrs_client_draw_finish(c, ticket[i], &d);
    cr_assert_eq(r, 0, "finish %d: %s", i, qrs_strerror(r));
    cr_assert_eq(d.sample_count, i % 2 ? 100000u : 1000u);
    cr_assert_neq(d.nonce, 0);
  }
  cr_assert_eq(qrs_client_draw_finish(c, ticket[0], &d), QRS_E_NO_TICKET);
  qrs_client_free(c);
}

Test(daemon, raw_pipelined_replies_carry_their_seq, .init = start_default,
     .fini = stop_and_clean)
{
  QrsIpc__Draw m = QRS_IPC__DRAW__INIT;
  int fd, n;

  fd = raw_connect_hello(D.sock);
  m.sample_count = 5000;
  raw_send_many(fd, QRS_MSG_DRAW, 1000, 64, &m.base);   /* one write */
  /* Each seq 1000..1063 once, every one a DRAW_REPLY. */
  n = raw_recv_count(fd, 64, 1000, QRS_MSG_DRAW_REPLY, NULL);
  cr_assert_eq(n, 64, "%d of 64 replies were DRAW_REPLY", n);
  close(fd);
}

/* ---- bad input: the daemon keeps serving ---------------------------- */

Test(daemon, bad_magic_closes_only_that_connection, .init = start_default,
     .fini = stop_and_clean)
{
  uint8_t junk[20];
  int fd, other;

  other = raw_connect_hello(D.sock);
  fd = raw_connect(D.sock);
  memset(junk, 0x41, sizeof(junk));
  raw_send(fd, junk, sizeof(junk));
  raw_expect_error_eof(fd, QRS_E_PROTOCOL);
  assert_draw_works(D.sock);
  close(other);
  cr_assert(daemon_log_contains(&D, "malformed frame header"));
  cr_assert_eq(daemon_stop(&D), 0);
}

Test(daemon, oversized_frame_is_refused, .init = start_default,
     .fini = stop_and_clean)
{
  uint8_t b[QRS_FRAME_HDR_SIZE];
  int fd;

  fd = raw_connect_hello(D.sock);
  raw_frame_hdr(b, QRS_MSG_DRAW, 1048577, 5);
  raw_send(fd, b, sizeof(b));
  cr_assert_eq(raw_expect_error_eof(fd, QRS_E_TOO_LARGE), 5);
  assert_draw_works(D.sock);
  cr_assert(daemon_log_contains(&D, "exceeds the 1048576-byte limit"));
}

Test(daemon, undecodable_payload_closes_connection, .init = start_default,
     .fini = stop_and_clean)
{
  uint8_t b[QRS_FRAME_HDR_SIZE + 8];
  int fd;

  fd = raw_connect_hello(D.sock);
  raw_frame_hdr(b, QRS_MSG_DRAW, 8, 6);
  memset(b + QRS_FRAME_HDR_SIZE, 0xff, 8);   /* an unterminated varint */
  raw_send(fd, b, sizeof(b));
  cr_assert_eq(raw_expect_error_eof(fd, QRS_E_PROTOCOL), 6);
  assert_draw_works(D.sock);
  cr_assert(daemon_log_contains(&D, "does not decode"));
}

Test(daemon, bad_requests_get_errors_and_connection_stays,
     .init = start_default, .fini = stop_and_clean)
{
  QrsIpc__Status st = QRS_IPC__STATUS__INIT;
  int fd;

  fd = raw_connect(D.sock);
  /* Before HELLO. */
  raw_send_draw(fd, 2, "", 100);
  cr_assert_eq(raw_expect_error(fd, QRS_E_HELLO_REQUIRED), 2);
  raw_hello(fd);

  raw_send_draw(fd, 3, "", 0);
  cr_assert_eq(raw_expect_error(fd, QRS_E_SAMPLE_COUNT), 3);
  raw_send_draw(fd, 4, "", 1048577);
  cr_assert_eq(raw_expect_error(fd, QRS_E_SAMPLE_COUNT), 4);
  raw_send_draw(fd, 5, "no-such-source", 100);
  cr_assert_eq(raw_expect_error(fd, QRS_E_UNKNOWN_SOURCE), 5);
  /* A type this daemon does not serve: a reply type, and an unknown one. */
  raw_send_msg(fd, QRS_MSG_DRAW_REPLY, 6, &st.base);
  cr_assert_eq(raw_expect_error(fd, QRS_E_UNSUPPORTED), 6);
  raw_send_msg(fd, 4242, 7, &st.base);
  cr_assert_eq(raw_expect_error(fd, QRS_E_UNSUPPORTED), 7);

  /* Still the same connection, still serving. */
  raw_send_draw(fd, 8, "system", 1000);
  raw_expect_reply(fd, QRS_MSG_DRAW_REPLY, 8);
  close(fd);
  cr_assert(daemon_log_contains(&D, "unknown source 'no-such-source'"));
  cr_assert(daemon_log_contains(&D, "sample_count 0 refused"));
  cr_assert(daemon_log_contains(&D, "unsupported message type 4242"));
}

Test(daemon, bad_amplifier_and_salt_are_refused, .init = start_default,
     .fini = stop_and_clean)
{
  QrsIpc__Draw m = QRS_IPC__DRAW__INIT;
  QrsIpc__Commitment cm = QRS_IPC__COMMITMENT__INIT;
  uint8_t salt[257];
  int fd;

  fd = raw_connect_hello(D.sock);
  m.sample_count = 100;
  m.amplifier = "ecdf-not-here";
  raw_send_msg(fd, QRS_MSG_DRAW, 9, &m.base);
  cr_assert_eq(raw_expect_error(fd, QRS_E_UNKNOWN_AMPLIFIER), 9);
  m.amplifier = "";
  memset(salt, 1, sizeof(salt));
  cm.salt.data = salt;
  cm.salt.len = sizeof(salt);
  m.commitment = &cm;
  raw_send_msg(fd, QRS_MSG_DRAW, 10, &m.base);
  cr_assert_eq(raw_expect_error(fd, QRS_E_BAD_REQUEST), 10);
  cm.salt.len = 256;
  raw_send_msg(fd, QRS_MSG_DRAW, 11, &m.base);
  raw_expect_reply(fd, QRS_MSG_DRAW_REPLY, 11);
  close(fd);
}

Test(daemon, wrong_protocol_version_is_refused, .init = start_default,
     .fini = stop_and_clean)
{
  QrsIpc__Hello m = QRS_IPC__HELLO__INIT;
  int fd;

  fd = raw_connect(D.sock);
  m.protocol_version = 99;
  m.client_name = "from-the-future";
  raw_send_msg(fd, QRS_MSG_HELLO, 1, &m.base);
  raw_expect_error_eof(fd, QRS_E_VERSION);
  assert_draw_works(D.sock);
}

Test(daemon, client_vanishing_mid_request_is_cleaned_up,
     .init = start_default, .fini = stop_and_clean)
{
  QrsIpc__Draw m = QRS_IPC__DRAW__INIT;
  uint8_t buf[256];
  int fd, i, n;

  for (i = 0; i < 20; i++) {
    fd = raw_connect_hello(D.sock);
    if (i % 2) {
      /* Half a frame, then gone. */
      m.sample_count = 100;
      n = qrs__frame_pack(QRS_MSG_DRAW, 3, &m.base, buf, sizeof(buf));
      raw_send(fd, buf, (size_t)n / 2);
    } else {
      /* A large draw (worker thread), then gone before the reply. */
      raw_send_draw(fd, 3, "", 1048576);
    }
    close(fd);
  }
  assert_draw_works(D.sock);
  cr_assert_eq(daemon_stop(&D), 0);
  cr_assert(daemon_log_contains(&D, "disconnected with"));
}

Test(daemon, bytes_returns_raw_bytes, .init = start_default,
     .fini = stop_and_clean)
{
  struct qrs_bytes_info info;
  struct qrs_client *c;
  uint8_t *b;
  size_t n, i, zeros;

  c = connect_client(D.sock);
  n = qrs_client_server_info(c)->max_bytes_per_request;
  cr_assert_gt(n, 500000);
  b = calloc(1, n);
  cr_assert_not_null(b);
  cr_assert_eq(qrs_client_bytes(c, NULL, b, n, &info), 0);
  cr_assert_str_eq(info.served_by, "system");
  zeros = 0;
  for (i = 0; i < n; i++)
    zeros += b[i] == 0;
  cr_assert(zeros < n / 128, "%zu zero bytes of %zu", zeros, n);
  cr_assert_eq(qrs_client_bytes(c, NULL, b, n + 1, NULL), QRS_E_TOO_LARGE);
  free(b);
  qrs_client_free(c);
}

Test(daemon, status_health_sources, .init = start_default,
     .fini = stop_and_clean)
{
  struct qrs_sources *src;
  struct qrs_health *h;
  struct qrs_status *s;
  struct qrs_client *c;
  struct qrs_draw d;

  c = connect_client(D.sock);
  cr_assert_eq(qrs_client_draw(c, NULL, &d), 0);
  cr_assert_eq(qrs_client_status(c, &s), 0);
  cr_assert_str_eq(s->server_version, "0.1.0");
  cr_assert_eq(s->pid, (uint32_t)D.pid);
  cr_assert_str_eq(s->socket_path, D.sock);
  cr_assert_eq(s->connections, 1);
  cr_assert_geq(s->draws, 1);
  cr_assert_geq(s->bytes, 10000);
  cr_assert_eq(s->n_sources, 1);
  cr_assert_str_eq(s->sources[0].name, "system");
  cr_assert(s->sources[0].is_default && s->sources[0].healthy);
  cr_assert_eq(s->sources[0].draws, 1);
  qrs_status_free(s);

  cr_assert_eq(qrs_client_health(c, &h), 0);
  cr_assert_eq(h->state, QRS_HEALTH_HEALTHY);
  cr_assert_str_eq(qrs_health_state_name(h->state), "healthy");
  qrs_health_free(h);

  cr_assert_eq(qrs_client_sources(c, &src), 0);
  cr_assert_str_eq(src->default_source, "system");
  cr_assert_eq(src->n_sources, 1);
  cr_assert_str_eq(src->sources[0].type, "system");
  cr_assert(src->sources[0].production);
  qrs_sources_free(src);
  qrs_client_free(c);
}

Test(daemon, errors_carry_the_daemons_message, .init = start_default,
     .fini = stop_and_clean)
{
  struct qrs_client *c;
  struct qrs_draw d;

  c = connect_client(D.sock);
  cr_assert_eq(draw_from(c, "elsewhere", &d), QRS_E_UNKNOWN_SOURCE);
  cr_assert(strstr(qrs_client_errmsg(c), "elsewhere") != NULL, "%s",
            qrs_client_errmsg(c));
  cr_assert_eq(qrs_client_draw(c, NULL, &d), 0);
  cr_assert_str_eq(qrs_client_errmsg(c), "");
  qrs_client_free(c);
}

/* Each thread sees the message of its own call; a reply stashed for another
   ticket keeps its message for that ticket. */
struct errmsg_job {
  struct qrs_client *c;
  int r;
  char msg[256];
};

static void *
good_draw_thread(void *arg)
{
  struct errmsg_job *j = arg;
  struct qrs_draw d;

  j->r = qrs_client_draw(j->c, NULL, &d);
  snprintf(j->msg, sizeof(j->msg), "%s", qrs_client_errmsg(j->c));
  return NULL;
}

Test(daemon, errmsg_is_the_calling_threads, .init = start_default,
     .fini = stop_and_clean)
{
  struct errmsg_job j;
  struct qrs_client *c;
  struct qrs_draw d;
  pthread_t t;

  c = connect_client(D.sock);
  cr_assert_eq(draw_from(c, "elsewhere", &d), QRS_E_UNKNOWN_SOURCE);
  /* Another thread's successful call in between. */
  memset(&j, 0, sizeof(j));
  j.c = c;
  cr_assert_eq(pthread_create(&t, NULL, good_draw_thread, &j), 0);
  pthread_join(t, NULL);
  cr_assert_eq(j.r, 0);
  cr_expect_str_eq(j.msg, "", "the other thread's call succeeded");
  cr_expect(strstr(qrs_client_errmsg(c), "elsewhere") != NULL,
            "this thread's message survives: '%s'", qrs_client_errmsg(c));
  qrs_client_free(c);
}

struct query_job {
  struct qrs_client *c;
  int rounds, bad;
};

static void *
status_thread(void *arg)
{
  struct query_job *j = arg;
  struct qrs_status *st;
  struct qrs_health *h;
  int i;

  for (i = 0; i < j->rounds; i++) {
    if (qrs_client_status(j->c, &st) != 0 || st->n_sources < 1 ||
        strcmp(st->default_source, "system") != 0)
      j->bad++;
    else
      qrs_status_free(st);
    if (qrs_client_health(j->c, &h) != 0 || h->n_sources < 1)
      j->bad++;
    else
      qrs_health_free(h);
  }
  return NULL;
}

/* The replies of status and health are read out of the client's arena,
   which a draw on another thread reuses: they must be read under the
   client's lock (they were not: a draw meanwhile overwrote them). */
static void *
draw_thread(void *arg)
{
  struct query_job *j = arg;
  struct qrs_draw d;
  int i;

  for (i = 0; i < j->rounds; i++)
    if (qrs_client_draw(j->c, NULL, &d) != 0 || !(d.u > 0.0 && d.u < 1.0))
      j->bad++;
  return NULL;
}

Test(daemon, queries_and_draws_share_a_client_across_threads,
     .init = start_default, .fini = stop_and_clean)
{
  struct query_job q = { 0 }, dj[3];
  struct qrs_client *c;
  pthread_t t, dt[3];
  int i;

  c = connect_client(D.sock);
  q.c = c;
  q.rounds = 1500;
  for (i = 0; i < 3; i++) {
    dj[i] = q;
    dj[i].rounds = 2000;
    cr_assert_eq(pthread_create(&dt[i], NULL, draw_thread, &dj[i]), 0);
  }
  cr_assert_eq(pthread_create(&t, NULL, status_thread, &q), 0);
  pthread_join(t, NULL);
  for (i = 0; i < 3; i++) {
    pthread_join(dt[i], NULL);
    cr_expect_eq(dj[i].bad, 0, "%d draws failed", dj[i].bad);
  }
  cr_expect_eq(q.bad, 0, "%d queries failed or read another reply", q.bad);
  qrs_client_free(c);
}

Test(daemon, a_stashed_error_keeps_its_message_for_its_ticket,
     .init = start_default, .fini = stop_and_clean)
{
  struct qrs_draw_request rq;
  struct qrs_client *c;
  struct qrs_draw d;
  uint32_t t;

  c = connect_client(D.sock);
  memset(&rq, 0, sizeof(rq));
  rq.source = "elsewhere";
  cr_assert_eq(qrs_client_draw_begin(c, &rq, &t), 0);
  usleep(100000);               /* its ERROR comes before the next reply */
  cr_assert_eq(qrs_client_draw(c, NULL, &d), 0);
  cr_expect_str_eq(qrs_client_errmsg(c), "",
                   "a successful call has no message");
  cr_assert_eq(qrs_client_draw_finish(c, t, &d), QRS_E_UNKNOWN_SOURCE);
  cr_expect(strstr(qrs_client_errmsg(c), "elsewhere") != NULL,
            "the ticket's message: '%s'", qrs_client_errmsg(c));
  qrs_client_free(c);
}

/* ---- lifecycle ------------------------------------------------------ */

Test(daemon, refuses_to_start_on_a_live_socket, .init = start_default,
     .fini = stop_and_clean)
{
  char out[4096], err[4096];
  char *argv[] = { (char *)getenv("QRSD_BIN"), (char *)"--socket", D.sock,
                   NULL };
  int st;

  st = run_capture(argv, out, sizeof(out), err, sizeof(err));
  cr_assert_eq(st, 1, "second qrsd exited %d", st);
  cr_assert(strstr(err, "already listening") != NULL, "%s", err);
  /* The first one is untouched. */
  assert_draw_works(D.sock);
}

Test(daemon, replaces_a_stale_socket_and_removes_it_on_exit,
     .fini = stop_and_clean)
{
  int fd;

  daemon_prepare(&D, NULL);
  /* A socket file nobody listens on, as a crashed daemon leaves it. */
  fd = unix_bind(D.sock);
  close(fd);
  cr_assert_eq(access(D.sock, F_OK), 0);

  daemon_start(&D, NULL);
  assert_draw_works(D.sock);
  cr_assert(daemon_log_contains(&D, "removing stale socket"));
  cr_assert_eq(daemon_stop(&D), 0);
  cr_assert_neq(access(D.sock, F_OK), 0, "socket left behind");
}

Test(daemon, sigterm_answers_in_flight_then_exits_zero,
     .init = start_default, .fini = stop_and_clean)
{
  struct qrs_draw_request rq;
  struct qrs_client *c;
  uint32_t t1, t2;
  struct qrs_draw d;

  c = connect_client(D.sock);
  memset(&rq, 0, sizeof(rq));
  rq.sample_count = 1048576;    /* worker thread: still running */
  cr_assert_eq(qrs_client_draw_begin(c, &rq, &t1), 0);
  cr_assert_eq(qrs_client_draw_begin(c, &rq, &t2), 0);
  usleep(1000);
  kill(D.pid, SIGTERM);
  cr_assert_eq(qrs_client_draw_finish(c, t1, &d), 0);
  cr_assert_eq(d.sample_count, 1048576);
  cr_assert_eq(qrs_client_draw_finish(c, t2, &d), 0);
  cr_assert(daemon_wait_notify(&D, "STOPPING=1", 5000));
  cr_assert_eq(daemon_stop(&D), 0);
  cr_assert(daemon_log_contains(&D, "stopping"));
  qrs_client_free(c);
}

Test(daemon, client_reconnects_after_a_restart, .init = start_default,
     .fini = stop_and_clean)
{
  struct qrs_client *c;
  struct qrs_draw d;
  uint32_t pid1;
  struct qrs_status *s;

  c = connect_client(D.sock);
  cr_assert_eq(qrs_client_status(c, &s), 0);
  pid1 = s->pid;
  qrs_status_free(s);
  daemon_restart(&D);
  cr_assert_eq(qrs_client_draw(c, NULL, &d), 0);
  cr_assert_eq(qrs_client_status(c, &s), 0);
  cr_assert_neq(s->pid, pid1);
  qrs_status_free(s);
  qrs_client_free(c);
}

Test(daemon, socket_activation_uses_the_passed_socket,
     .fini = stop_and_clean)
{
  char pidstr[32];
  int fd;

  daemon_prepare(&D, NULL);
  fd = unix_bind(D.sock);
  cr_assert_eq(listen(fd, 16), 0);
  D.pid = fork();
  cr_assert_geq(D.pid, 0);
  if (D.pid == 0) {
    dup2(fd, 3);
    snprintf(pidstr, sizeof(pidstr), "%d", (int)getpid());
    setenv("LISTEN_PID", pidstr, 1);
    setenv("LISTEN_FDS", "1", 1);
    execl(getenv("QRSD_BIN"), "qrsd", "--socket", "/nonexistent/x.sock",
          (char *)NULL);
    _exit(127);
  }
  close(fd);
  /* qrsd never binds /nonexistent; it serves on what it was given. */
  assert_draw_works(D.sock);
  cr_assert_eq(daemon_stop(&D), 0);
  /* The socket belongs to the service manager: left in place. */
  cr_assert_eq(access(D.sock, F_OK), 0);
}

Test(daemon, help_and_version)
{
  char out[8192];
  char *help[] = { (char *)getenv("QRSD_BIN"), (char *)"--help", NULL };
  char *ver[] = { (char *)getenv("QRSD_BIN"), (char *)"--version", NULL };
  char *bad[] = { (char *)getenv("QRSD_BIN"), (char *)"--bogus", NULL };

  cr_assert_eq(run_capture(help, out, sizeof(out), NULL, 0), 0);
  cr_assert(strstr(out, "Usage: qrsd") && strstr(out, "--check"));
  cr_assert_eq(run_capture(ver, out, sizeof(out), NULL, 0), 0);
  cr_assert(strstr(out, "qrsd 0.1.0"));
  cr_assert_eq(run_capture(bad, out, sizeof(out), NULL, 0), 2);
}

/* --status-file overrides the configured path: the built-in default's
   /run/qrsd/status.json is not written, the given file is. */
Test(daemon, status_file_option_overrides_the_config, .fini = stop_and_clean)
{
  char path[160], *buf;
  int i;

  daemon_prepare(&D, NULL);
  snprintf(path, sizeof(path), "%s/status.json", D.dir);
  daemon_start(&D, "--status-file", path, NULL);
  assert_draw_works(D.sock);
  for (i = 0; i < 100 && access(path, F_OK) != 0; i++)
    usleep(50 * 1000);
  cr_assert_eq(access(path, F_OK), 0, "qrsd did not write %s", path);
  buf = read_text_file(path, 4096, NULL);
  cr_assert(strstr(buf, "\"primary_name\":\"system\""), "%s", buf);
  free(buf);
  cr_assert_eq(daemon_log_count(&D, "/run/qrsd/status.json"), 0);
}

/* ---- configured daemons --------------------------------------------- */

static const char mock_yaml[] =
  "allow_test_sources: true\n"
  "default_source: system\n"
  "sources:\n"
  "  system: { type: system }\n"
  "  biased: { type: mock, seed: 11, mean_shift: 2.0 }\n"
  "  fair: { type: mock, seed: 11, mean_shift: 0.0 }\n";

static double
mean_u(struct qrs_client *c, const char *source, int n, double *first)
{
  struct qrs_draw d;
  double sum;
  int i;

  sum = 0;
  for (i = 0; i < n; i++) {
    cr_assert_eq(draw_from(c, source, &d), 0);
    cr_assert_str_eq(d.served_by, source);
    if (i == 0 && first)
      *first = d.u;
    sum += d.u;
  }
  return sum / n;
}

Test(daemon, mock_byte_shift_is_detected, .fini = stop_and_clean)
{
  struct qrs_sources *s;
  struct qrs_client *c;
  double biased, fair;
  size_t i;

  daemon_run(&D, mock_yaml);
  c = connect_client(D.sock);
  /* +2.0 on the byte mean is z = 2 / (73.9 / 100) = +2.7 at 10 000
     bytes: u near 0.997. */
  biased = mean_u(c, "biased", 200, NULL);
  fair = mean_u(c, "fair", 200, NULL);
  cr_log_info("mean u: biased %f, fair %f", biased, fair);
  cr_assert_gt(biased, 0.9, "mean u of the biased mock: %f", biased);
  cr_assert(fair > 0.4 && fair < 0.6, "mean u of the fair mock: %f", fair);

  cr_assert_eq(qrs_client_sources(c, &s), 0);
  cr_assert_eq(s->n_sources, 3);
  for (i = 0; i < s->n_sources; i++)
    if (!strcmp(s->sources[i].name, "biased"))
      cr_assert_not(s->sources[i].production);
  qrs_sources_free(s);
  qrs_client_free(c);
  cr_assert(daemon_log_contains(&D, "not for production"));
}

Test(daemon, mock_is_deterministic_across_daemons, .fini = stop_and_clean)
{
  struct qrs_client *c;
  double a, b;

  daemon_run(&D, mock_yaml);
  c = connect_client(D.sock);
  mean_u(c, "fair", 1, &a);
  qrs_client_free(c);
  daemon_restart(&D);
  c = connect_client(D.sock);
  mean_u(c, "fair", 1, &b);
  qrs_client_free(c);
  cr_assert_eq(a, b, "seed 11 gave %.17g then %.17g", a, b);
}

Test(daemon, connection_limit_answers_busy, .fini = stop_and_clean)
{
  int a, b;

  daemon_run(&D, "limits: { max_connections: 2 }\n");
  a = raw_connect_hello(D.sock);
  b = raw_connect_hello(D.sock);
  /* The BUSY answers the HELLO, with its seq. */
  raw_expect_hello_busy(D.sock, 41);
  raw_send_draw(a, 2, "", 100);
  raw_expect_reply(a, QRS_MSG_DRAW_REPLY, 2);
  close(a);
  close(b);
  cr_assert(daemon_log_contains(&D, "connections is the limit"));
  /* Once the others left, a new client is served. */
  usleep(50000);
  assert_draw_works(D.sock);
}

Test(daemon, inflight_limit_answers_busy, .fini = stop_and_clean)
{
  QrsIpc__Draw m = QRS_IPC__DRAW__INIT;
  int fd, busy, draws;

  daemon_run(&D, "limits: { max_inflight_per_connection: 2 }\n");
  fd = raw_connect_hello(D.sock);
  /* Five worker-thread draws in one write: two fit, three do not. */
  m.sample_count = 1000000;
  raw_send_many(fd, QRS_MSG_DRAW, 10, 5, &m.base);
  draws = raw_recv_count(fd, 5, 10, QRS_MSG_DRAW_REPLY, &busy);
  cr_assert_eq(busy + draws, 5);
  cr_assert_geq(busy, 1, "no BUSY with 5 requests and a limit of 2");
  cr_assert_geq(draws, 2);
  close(fd);
}

Test(daemon, check_mode_validates_configs)
{
  /* qrsd -n -c tests/conf/<file>: its exit status, and what stdout (good)
     or stderr (bad) says. */
  static const struct {
    const char *file;
    int status;
    const char *says;
  } cases[] = {
    { "good_full.yaml", 0, "is valid" },
    { "bad_range.yaml", 1, "bad_range.yaml:7: limits.max_connections" },
    { "bad_fallback_cycle.yaml", 1, "bad_fallback_cycle.yaml:4: "
      "sources.a.fallback: fallback cycle: a -> b -> a" },
  };
  char out[4096], err[4096], path[128];
  char *argv[] = { (char *)getenv("QRSD_BIN"), (char *)"-n", (char *)"-c",
                   path, NULL };
  const char *text;
  size_t i;
  int st;

  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    snprintf(path, sizeof(path), "%s/conf/%s", QRS_TEST_SOURCE_DIR,
             cases[i].file);
    st = run_capture(argv, out, sizeof(out), err, sizeof(err));
    cr_assert_eq(st, cases[i].status, "%s: exit %d: %s", cases[i].file, st,
                 err);
    text = cases[i].status ? err : out;
    cr_assert(strstr(text, cases[i].says), "%s: %s", cases[i].file, text);
  }
}

/* No source type fails for real yet, so this checks the wiring only: the
   fallback is configured, reported, and the sources serve as themselves
   (fallback selection is tested in tests/unit/engine/test_registry.c). */
Test(daemon, fallback_is_configured_and_reported, .fini = stop_and_clean)
{
  struct qrs_sources *s;
  struct qrs_client *c;
  struct qrs_draw d;
  size_t i;

  daemon_run(&D, "allow_test_sources: true\n"
                 "default_source: fair\n"
                 "sources:\n"
                 "  fair: { type: mock, seed: 3, fallback: system }\n"
                 "  other: { type: mock, seed: 4, fallback: fair }\n");
  c = connect_client(D.sock);
  cr_assert_eq(draw_from(c, "other", &d), 0);
  cr_assert_str_eq(d.source, "other");
  cr_assert_str_eq(d.served_by, "other");
  cr_assert_not(d.fallback);
  cr_assert_eq(qrs_client_sources(c, &s), 0);
  /* The two declared sources and the built-in system fallback. */
  cr_assert_eq(s->n_sources, 3);
  for (i = 0; i < s->n_sources; i++) {
    if (!strcmp(s->sources[i].name, "fair"))
      cr_assert_str_eq(s->sources[i].fallback, "system");
    else if (!strcmp(s->sources[i].name, "other"))
      cr_assert_str_eq(s->sources[i].fallback, "fair");
    else
      cr_assert(strstr(s->sources[i].detail, "built-in fallback"), "%s",
                s->sources[i].detail);
    cr_assert(s->sources[i].healthy);
  }
  qrs_sources_free(s);
  /* A built-in fallback cannot be asked for by name. */
  cr_assert_eq(draw_from(c, "system", &d), QRS_E_UNKNOWN_SOURCE);
  qrs_client_free(c);
}

Test(daemon, broken_config_refuses_to_start)
{
  char out[4096], err[4096], path[128];
  char *argv[] = { (char *)getenv("QRSD_BIN"), (char *)"-c", path,
                   (char *)"--socket", (char *)"/tmp/qrs-never.sock", NULL };

  snprintf(path, sizeof(path), "%s/conf/bad_unknown_key.yaml",
           QRS_TEST_SOURCE_DIR);
  cr_assert_eq(run_capture(argv, out, sizeof(out), err, sizeof(err)), 1);
  cr_assert(strstr(err, "bad_unknown_key.yaml:"), "%s", err);
  cr_assert_neq(access("/tmp/qrs-never.sock", F_OK), 0);
}

/* ---- client timeouts ------------------------------------------------ */

Test(daemon, calls_time_out_and_the_stream_stays_in_step,
     .init = start_default, .fini = stop_and_clean)
{
  struct qrs_client_options o;
  struct qrs_client *c;
  struct qrs_draw d;
  int64_t t0, ms;
  int r;

  memset(&o, 0, sizeof(o));
  o.timeout_ms = 300;
  cr_assert_eq(qrs_client_new(D.sock, &o, &c), 0);
  kill(D.pid, SIGSTOP);
  t0 = mono_now_ns();
  r = qrs_client_draw(c, NULL, &d);
  ms = (mono_now_ns() - t0) / 1000000;
  kill(D.pid, SIGCONT);
  cr_assert_eq(r, -ETIMEDOUT, "draw on a stopped daemon: %s",
               qrs_strerror(r));
  cr_assert(ms >= 250 && ms < 3000, "timed out after %lld ms",
            (long long)ms);
  /* The late reply to the abandoned draw is skipped, not taken for the
     next call's. */
  cr_assert_eq(qrs_client_draw(c, NULL, &d), 0);
  cr_assert_eq(qrs_client_draw(c, NULL, &d), 0);
  qrs_client_free(c);
}

Test(daemon, connect_times_out_on_a_silent_listener)
{
  struct qrs_client_options o;
  struct qrs_client *c;
  char dir[64], path[96];
  int fd, r;

  snprintf(dir, sizeof(dir), "/tmp/qrs-silent-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  snprintf(path, sizeof(path), "%s/s.sock", dir);
  fd = unix_bind(path);
  cr_assert_eq(listen(fd, 4), 0);    /* accepts, never answers HELLO */
  memset(&o, 0, sizeof(o));
  o.timeout_ms = 200;
  r = qrs_client_new(path, &o, &c);
  cr_assert_eq(r, -ETIMEDOUT, "%s", qrs_strerror(r));
  close(fd);
  unlink(path);
  rmdir(dir);
  cr_assert_eq(qrs_client_new(path, &o, &c), -ENOENT);
}
