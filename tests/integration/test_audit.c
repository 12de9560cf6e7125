/* Integration: qrs-audit --records against a real qrsd's draw journal. A
   libqrs sampler draws 100,000 tokens through qrsd with the journal on,
   writing full records; qrs-audit finds every record's draw in the journal and
   passes the run.  Then one edit of the records per check, each named precisely
   (check and line) with exit status 1: u outside its CDF interval, a u changed
   inside it, times out of order, a draw used by two records, a journal_seq
   past the journal, a record without journal_seq, an unjournalled draw, a
   source, fallback label or nonce changed, a time changed, a line that is not
   a record. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <criterion/criterion.h>
#include <json-c/json.h>
#include <qrs/client.h>
#include <qrs/sampler.h>

#include "harness.h"
#include "harness_client.h"

#define N_TOKENS 100000
#define N_TAMPER 2000                 /* records each tamper test keeps */
#define VOCAB 1000

static struct daemon D;
static char jdir[160], recs[160];
static char **lines;                  /* the first N_TAMPER record lines */

/* qrsd with the journal on, and a sampler drawing n tokens through it
   into full records (the file recs); the first N_TAMPER lines kept. */
static void
sample(int n_tokens)
{
  struct qrs_client *c;
  struct qrs_sampler *s;
  char yaml[512];
  float row[VOCAB];
  uint32_t tok;
  int t, r;

  cr_assert_geq(n_tokens, N_TAMPER);

  daemon_prepare(&D, NULL);
  snprintf(jdir, sizeof jdir, "%s/journal", D.dir);
  snprintf(recs, sizeof recs, "%s/records.jsonl", D.dir);
  cr_assert_eq(mkdir(jdir, 0700), 0);
  snprintf(yaml, sizeof yaml, "journal:\n  dir: \"%s\"\n  queue: 65536\n",
           jdir);
  daemon_write_conf(&D, yaml);
  daemon_start(&D, NULL);

  c = connect_client(D.sock);
  s = sampler_with(VOCAB, "log_level", "full", NULL);
  cr_assert_eq(qrs_sampler_set_log_path(s, recs), 0);
  for (t = 0; t < n_tokens; t++) {
    lm_row(row, VOCAB, (unsigned)t, -1.3);
    r = qrs_sampler_sample_token(s, c, row, QRS_DTYPE_F32, VOCAB, &tok,
                                 NULL);
    cr_assert_eq(r, 0, "token %d: %s", t, qrs_strerror(r));
  }
  qrs_sampler_free(s);          /* closes the records */
  qrs_client_free(c);
  cr_assert_eq(daemon_stop(&D), 0);   /* the journal is flushed */

  lines = calloc(N_TAMPER, sizeof *lines);
  cr_assert_not_null(lines);
  read_lines(recs, lines, N_TAMPER);
}

static void
teardown(void)
{
  int i;

  if (lines)
    for (i = 0; i < N_TAMPER; i++)
      free(lines[i]);
  free(lines);
  lines = NULL;
  daemon_cleanup(&D);
}

static void
big(void)
{
  sample(N_TOKENS);
}

static void
small(void)
{
  sample(N_TAMPER);
}

TestSuite(audit, .fini = teardown, .timeout = 280);

/* qrs-audit --json --records file --journal jdir: its exit status and
   parsed output. */
static struct json_object *
audit(const char *file, int *status)
{
  static char out[1 << 16];
  char errb[4096];
  char *argv[] = { getenv("QRS_AUDIT_BIN"), "--json", "--records",
                   (char *)file, "--journal", jdir, NULL };
  struct json_object *o;

  cr_assert_not_null(argv[0]);
  *status = run_capture(argv, out, sizeof out, errb, sizeof errb);
  o = json_tokener_parse(out);
  cr_assert_not_null(o, "qrs-audit printed: %s %s", out, errb);
  return o;
}

static struct json_object *
get(struct json_object *o, const char *k)
{
  struct json_object *v = NULL;

  cr_assert(json_object_object_get_ex(o, k, &v), "no \"%s\"", k);
  return v;
}

/* The statistics of the 100,000 draws (--stats with the run itself as
   its control arm, and the plots): every draw counted under the source
   that served it, u uniform by KS and AD, and the two arms identical. */
static void
stats_of_the_run(void)
{
  static const char *const plots[] = { "u_hist.png", "u_qq.svg",
                                       "u_time.png", "latency.svg" };
  static char out[1 << 16];
  char errb[4096], rep[200], path[260];
  char *argv[] = { getenv("QRS_AUDIT_BIN"), "--json", "--records", recs,
                   "--control", recs, "--report", rep, NULL };
  struct json_object *o, *s, *src, *c;
  struct stat sb;
  size_t i;
  int st;

  snprintf(rep, sizeof rep, "%s/report", D.dir);
  st = run_capture(argv, out, sizeof out, errb, sizeof errb);
  cr_assert_eq(st, 0, "exit %d: %s %s", st, out, errb);
  o = json_tokener_parse(out);
  cr_assert_not_null(o, "qrs-audit printed: %s %s", out, errb);
  s = get(o, "statistics");
  cr_expect_eq(json_object_get_uint64(get(s, "draws")), N_TOKENS);
  cr_expect_gt(json_object_get_double(get(s, "ks_p")), 1e-6, "%s", out);
  cr_expect_gt(json_object_get_double(get(s, "ad_p")), 1e-6, "%s", out);
  cr_expect_gt(json_object_get_double(get(s, "runs_p")), 1e-6, "%s", out);
  src = json_object_array_get_idx(get(s, "sources"), 0);
  cr_assert_not_null(src);
  cr_expect_eq(json_object_get_uint64(get(src, "draws")), N_TOKENS);
  cr_expect_gt(json_object_get_double(get(src, "latency_p50_ms")), 0);
  c = get(s, "control");
  cr_expect_eq(json_object_get_double(get(c, "ks2_d")), 0);
  cr_expect_eq(json_object_get_double(get(c, "diff")), 0);
  cr_expect_gt(json_object_get_double(get(c, "mde80")), 0);
  for (i = 0; i < 4; i++) {
    snprintf(path, sizeof path, "%s/%s", rep, plots[i]);
    cr_expect_eq(stat(path, &sb), 0, "%s not drawn", path);
  }
  json_object_put(o);
}

Test(audit, hundred_thousand_tokens_pass_against_the_journal, .init = big)
{
  struct json_object *o;
  int st;

  o = audit(recs, &st);
  cr_assert_eq(st, 0, "%s", json_object_to_json_string(o));
  cr_expect_str_eq(json_object_get_string(get(o, "verdict")), "intact");
  cr_expect_eq(json_object_get_uint64(get(o, "records")), N_TOKENS);
  cr_expect_eq(json_object_get_uint64(get(o, "record_failures")), 0);
  /* every token drew once, and the prefetch of a next token (cancelled
     by qrs_sampler_free(), served all the same) made one entry more */
  cr_expect_eq(json_object_get_uint64(get(o, "entries")), N_TOKENS + 1);
  json_object_put(o);
  stats_of_the_run();
}

/* Write the first N_TAMPER records to a file, record `at` (1-based) set
   to key: value (JSON text; NULL: the line replaced by raw), and extra
   (when not NULL) appended as one more line. */
static void
write_tampered(const char *path, int at, const char *key, const char *value,
               const char *raw, const char *extra)
{
  struct json_object *o;
  FILE *f;
  int i;

  f = fopen(path, "w");
  cr_assert_not_null(f);
  for (i = 0; i < N_TAMPER; i++) {
    if (i + 1 != at) {
      fprintf(f, "%s\n", lines[i]);
      continue;
    }
    if (key == NULL) {
      fprintf(f, "%s\n", raw);
      continue;
    }
    o = json_tokener_parse(lines[i]);
    cr_assert_not_null(o);
    json_object_object_add(o, key, json_tokener_parse(value));
    fprintf(f, "%s\n", json_object_to_json_string_ext(
            o, JSON_C_TO_STRING_PLAIN));
    json_object_put(o);
  }
  if (extra)
    fprintf(f, "%s\n", extra);
  fclose(f);
}

/* qrs-audit on a tampered copy: exit 1, the verdict is check, the first
   failure listed is check at line, check failed once, and count
   failures in all (an edit may fail a second check). */
static void
expect_named(const char *check, int line, unsigned count)
{
  char path[200];
  struct json_object *o, *f0, *fc;
  int st;

  snprintf(path, sizeof path, "%s/tampered.jsonl", D.dir);
  o = audit(path, &st);
  cr_assert_eq(st, 1, "exit %d: %s", st, json_object_to_json_string(o));
  cr_expect_str_eq(json_object_get_string(get(o, "verdict")), check, "%s",
                   json_object_to_json_string(o));
  f0 = json_object_array_get_idx(get(o, "failures"), 0);
  cr_assert_not_null(f0);
  cr_expect_str_eq(json_object_get_string(get(f0, "check")), check);
  cr_expect_eq(json_object_get_int(get(f0, "line")), line);
  cr_expect_neq(strlen(json_object_get_string(get(f0, "detail"))), 0);
  fc = get(get(o, "failure_counts"), check);
  cr_expect_eq(json_object_get_uint64(get(o, "record_failures")), count,
               "%s", json_object_to_json_string(o));
  cr_expect_eq(json_object_get_uint64(fc), 1);
  json_object_put(o);
}

static char path_t[200];

static const char *
tpath(void)
{
  snprintf(path_t, sizeof path_t, "%s/tampered.jsonl", D.dir);
  return path_t;
}

/* The first N_TAMPER records pass on their own (a part of a run). */
Test(audit, a_prefix_of_the_records_passes, .init = small)
{
  struct json_object *o;
  int st;

  write_tampered(tpath(), 0, NULL, NULL, NULL, NULL);
  o = audit(tpath(), &st);
  cr_assert_eq(st, 0, "%s", json_object_to_json_string(o));
  cr_expect_eq(json_object_get_uint64(get(o, "records")), N_TAMPER);
  json_object_put(o);
}

static double
field_d(int at, const char *k)
{
  struct json_object *o = json_tokener_parse(lines[at - 1]);
  double v = json_object_get_double(get(o, k));

  json_object_put(o);
  return v;
}

static const char *
field_s(int at, const char *k, char *buf, size_t len)
{
  struct json_object *o = json_tokener_parse(lines[at - 1]);

  snprintf(buf, len, "%s", json_object_to_json_string(get(o, k)));
  json_object_put(o);
  return buf;
}

Test(audit, u_outside_its_cdf_interval, .init = small)
{
  char v[64];

  /* above cdf_hi: outside the interval, and not the journal's u */
  snprintf(v, sizeof v, "%.17g", field_d(17, "cdf_hi") +
           (1.0 - field_d(17, "cdf_hi")) / 2);
  write_tampered(tpath(), 17, "u_value", v, NULL, NULL);
  expect_named("u-outside-cdf", 17, 2);
}

Test(audit, u_changed_inside_its_interval, .init = small)
{
  char v[64];
  double lo = field_d(40, "cdf_lo"), hi = field_d(40, "cdf_hi"),
         u = field_d(40, "u_value");

  snprintf(v, sizeof v, "%.17g", u == (lo + hi) / 2 ? (lo + 3 * hi) / 4 :
           (lo + hi) / 2);
  write_tampered(tpath(), 40, "u_value", v, NULL, NULL);
  expect_named("u-mismatch", 40, 1);
}

Test(audit, times_out_of_order, .init = small)
{
  char v[64];

  /* generated after sent: out of order and not the journal's time */
  snprintf(v, sizeof v, "%.0f", field_d(5, "draw_sent_ns") + 1e6);
  write_tampered(tpath(), 5, "draw_generated_ns", v, NULL, NULL);
  expect_named("times-out-of-order", 5, 2);
}

Test(audit, a_draw_used_twice, .init = small)
{
  /* record 9 again at the end: its journal entry is named twice */
  write_tampered(tpath(), 0, NULL, NULL, NULL, lines[8]);
  expect_named("draw-reused", N_TAMPER + 1, 1);
}

Test(audit, journal_seq_past_the_journal, .init = small)
{
  write_tampered(tpath(), 3, "journal_seq", "900000000", NULL, NULL);
  expect_named("entry-missing", 3, 1);
}

Test(audit, a_draw_that_is_in_no_journal, .init = small)
{
  write_tampered(tpath(), 1234, "journal_seq", "null", NULL, NULL);
  expect_named("draw-not-journalled", 1234, 1);
}

Test(audit, an_unjournalled_draw, .init = small)
{
  char path[200];
  struct json_object *o;
  FILE *f;
  int st;

  /* journal_seq null and entropy_unjournalled true, as libqrs records a
     draw qrsd served under journal.on_error: label */
  snprintf(path, sizeof path, "%s/tampered.jsonl", D.dir);
  o = json_tokener_parse(lines[99]);
  json_object_object_add(o, "journal_seq", NULL);
  json_object_object_add(o, "entropy_unjournalled",
                         json_object_new_boolean(1));
  f = fopen(path, "w");
  cr_assert_not_null(f);
  fprintf(f, "%s\n%s\n", lines[0], json_object_to_json_string(o));
  fclose(f);
  json_object_put(o);
  o = audit(path, &st);
  cr_assert_eq(st, 1);
  cr_expect_str_eq(json_object_get_string(get(o, "verdict")),
                   "draw-unjournalled");
  json_object_put(o);
}

Test(audit, source_changed, .init = small)
{
  write_tampered(tpath(), 77, "entropy_source_used", "\"qrng-lab\"", NULL,
                 NULL);
  expect_named("source-mismatch", 77, 1);
}

Test(audit, fallback_label_changed, .init = small)
{
  char b[16];

  cr_assert_str_eq(field_s(8, "entropy_is_fallback", b, sizeof b), "false");
  write_tampered(tpath(), 8, "entropy_is_fallback", "true", NULL, NULL);
  expect_named("fallback-mismatch", 8, 1);
}

Test(audit, nonce_changed, .init = small)
{
  char b[64], v[64];

  field_s(11, "entropy_nonce", b, sizeof b);
  cr_assert_eq(strlen(b), 18, "a nonce: %s", b);
  snprintf(v, sizeof v, "\"%c%s", b[1] == '0' ? '1' : '0', b + 2);
  write_tampered(tpath(), 11, "entropy_nonce", v, NULL, NULL);
  expect_named("nonce-mismatch", 11, 1);
}

Test(audit, received_time_changed, .init = small)
{
  char v[64];

  /* 50 us earlier: still in order, not the journal's */
  snprintf(v, sizeof v, "%.0f", field_d(600, "draw_received_ns") - 5e4);
  write_tampered(tpath(), 600, "draw_received_ns", v, NULL, NULL);
  expect_named("times-mismatch", 600, 1);
}

Test(audit, a_line_that_is_not_a_record, .init = small)
{
  write_tampered(tpath(), 2, NULL, NULL, "{\"token\": 3, \"u\": 0.5}", NULL);
  expect_named("malformed-record", 2, 1);
  write_tampered(tpath(), 2, NULL, NULL, "{\"u_value\": 0.5,", NULL);
  expect_named("malformed-record", 2, 1);
}
