/* Per-token records (client/sampling/record.c): JSON lines through json-c, the
   sampler's log sinks, diagnostic mode and its summary. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <json-c/json.h>

#include <qrs/sampler.h>

static void
sample_record(struct qrs_token_record *r)
{
  memset(r, 0, sizeof(*r));
  r->timestamp_ns = 123456789;
  r->entropy_fetch_ms = 0.25;
  r->total_sampling_ms = 1.5;
  snprintf(r->entropy_source_used, sizeof(r->entropy_source_used),
           "qrng \"lab\"\n/2");
  r->entropy_is_fallback = 1;
  r->sample_mean = NAN;
  r->z_score = -0.5;
  r->u_value = 0.1;
  snprintf(r->temperature_strategy, sizeof(r->temperature_strategy),
           "hvh_drift");
  r->shannon_entropy = 2.5;
  r->temperature_used = 0.3;
  r->token_id = 151935;
  r->token_rank = 3;
  r->token_prob = 1e-7;
  r->num_candidates = 12;
  snprintf(r->config_hash, sizeof(r->config_hash), "a42d7a5feb80957d");
  r->varentropy = NAN;
  r->min_p_used = 0.05;
  r->h_ema = INFINITY;
  r->vh_ema = NAN;
  r->entropy_prefetch_hit = -1;
  r->entropy_nonce = 0x2f1d57deab4168e8ull;
  r->entropy_echo_verified = 1;
  r->gate_open = 0;
  r->gate_boost = 0.0;
  r->cdf_lo = 0.0999;
  r->cdf_hi = 0.1001;
  r->top_p_used = NAN;
  r->kept_entropy_bits = NAN;
  r->mirostat_mu = NAN;
}

/* One JSON line of rec at level. */
static struct json_object *
line_of(const struct qrs_token_record *rec, int level)
{
  struct json_object *o;
  char *buf;
  size_t len;
  FILE *f;

  f = open_memstream(&buf, &len);
  cr_assert_not_null(f);
  cr_assert_eq(qrs_token_record_write(rec, level, f), 0);
  fclose(f);
  cr_assert_gt(len, 2);
  cr_expect_eq(buf[len - 1], '\n', "one line");
  cr_expect_eq(strchr(buf, '\n'), buf + len - 1, "exactly one line");
  o = json_tokener_parse(buf);
  cr_assert_not_null(o, "valid JSON: %s", buf);
  free(buf);
  return o;
}

static struct json_object *
key(struct json_object *o, const char *k)
{
  struct json_object *v;

  cr_assert(json_object_object_get_ex(o, k, &v), "key %s", k);
  return v;
}

Test(record, full_line_has_every_field_in_order_and_nulls)
{
  static const char *const order[] = {
    "timestamp_ns", "entropy_fetch_ms", "total_sampling_ms",
    "entropy_source_used", "entropy_is_fallback", "sample_mean", "z_score",
    "u_value", "temperature_strategy", "shannon_entropy", "temperature_used",
    "token_id", "token_rank", "token_prob", "num_candidates", "config_hash",
    "varentropy", "min_p_used", "preset_active", "h_ema", "vh_ema",
    "entropy_prefetch_hit", "entropy_nonce", "entropy_echo_verified",
    "entropy_server_timestamp_ns", "temperature_ms", "amplify_ms",
    "select_ms", "draw_z", "draw_coherence_z", "draw_coherence_valid",
    "draw_coherence_r", "purity_label", "integrated_bytes", "integrator",
    "draw_source_id", "gate_open", "gate_boost", "step", "cdf_lo", "cdf_hi",
    "top_p_used", "kept_entropy_bits", "mirostat_mu", "greedy",
    "entropy_source_type", "entropy_production", "journal_seq",
    "entropy_unjournalled", "draw_received_ns", "draw_generated_ns",
    "draw_sent_ns", "device_selection",
  };
  struct qrs_token_record r;
  struct json_object_iter it;
  struct json_object *o;
  size_t i;

  sample_record(&r);
  o = line_of(&r, 2);
  i = 0;
  json_object_object_foreachC(o, it) {
    cr_assert_lt(i, sizeof(order) / sizeof(order[0]));
    cr_expect_str_eq(it.key, order[i], "field %zu", i);
    i++;
  }
  cr_expect_eq(i, sizeof(order) / sizeof(order[0]));
  /* the reference's 38 fields come first */
  cr_expect_str_eq(order[37], "gate_boost");
  cr_expect_str_eq(json_object_get_string(key(o, "entropy_source_used")),
                   "qrng \"lab\"\n/2", "escaped and read back");
  cr_expect(json_object_is_type(key(o, "sample_mean"), json_type_null),
            "NaN is null");
  cr_expect(json_object_is_type(key(o, "h_ema"), json_type_null),
            "inf is null");
  cr_expect(json_object_is_type(key(o, "preset_active"), json_type_null));
  cr_expect(json_object_is_type(key(o, "entropy_prefetch_hit"),
                                json_type_null));
  cr_expect(json_object_is_type(key(o, "draw_z"), json_type_null),
            "no draw meta");
  cr_expect_str_eq(json_object_get_string(key(o, "entropy_nonce")),
                   "2f1d57deab4168e8");
  cr_expect(json_object_get_boolean(key(o, "entropy_echo_verified")));
  cr_expect_eq(json_object_get_int64(key(o, "token_id")), 151935);
  cr_expect_float_eq(json_object_get_double(key(o, "token_prob")), 1e-7, 0.0);
  cr_expect_float_eq(json_object_get_double(key(o, "min_p_used")), 0.05, 0.0);
  json_object_put(o);
}

Test(record, summary_line_is_short)
{
  struct qrs_token_record r;
  struct json_object *o;
  char *buf;
  size_t len;
  FILE *f;

  sample_record(&r);
  o = line_of(&r, 1);
  cr_expect_eq(json_object_object_length(o), 10);
  cr_expect_eq(json_object_get_int64(key(o, "token")), 151935);
  cr_expect_eq(json_object_get_int64(key(o, "rank")), 3);
  cr_expect(json_object_get_boolean(key(o, "fallback")));
  cr_expect_float_eq(json_object_get_double(key(o, "temp")), 0.3, 0.0);
  json_object_put(o);
  /* Shortest round-trip numbers, not %.17g noise. */
  f = open_memstream(&buf, &len);
  cr_assert_eq(qrs_token_record_write(&r, 1, f), 0);
  fclose(f);
  cr_expect(strstr(buf, "\"u\":0.1,"), "%s", buf);
  cr_expect(strstr(buf, "\"prob\":1e-07") || strstr(buf, "\"prob\":1e-7"),
            "%s", buf);
  free(buf);
  cr_expect_eq(qrs_token_record_write(&r, 3, stdout), -EINVAL);
  cr_expect_eq(qrs_token_record_write(NULL, 1, stdout), -EINVAL);
}

static struct qrs_sampler *
sampler(const char *level, int diag)
{
  struct qrs_sampler_config *cfg;
  struct qrs_sampler *s;

  cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
  cr_assert_eq(qrs_sampler_config_set(cfg, "log_level", level), 0);
  if (diag)
    cr_assert_eq(qrs_sampler_config_set(cfg, "diagnostic_mode", "on"), 0);
  cr_assert_eq(qrs_sampler_config_set_preset(cfg, "creative_sampling"), 0);
  cr_assert_eq(qrs_sampler_new(cfg, 6, &s), 0);
  qrs_sampler_config_free(cfg);
  return s;
}

Test(record, the_sampler_logs_one_line_per_token_at_its_level)
{
  static const float row[6] = { 1, 2, 3, 0, -1, -INFINITY };
  struct qrs_sampler *s;
  struct json_object *o;
  char *buf, *line, *save;
  size_t len;
  FILE *f;
  int t, lines;

  s = sampler("full", 0);
  f = open_memstream(&buf, &len);
  cr_assert_eq(qrs_sampler_set_log_file(s, f), 0);
  for (t = 0; t < 5; t++)
    cr_assert_eq(qrs_sampler_select_u(s, row, QRS_DTYPE_F32, 6,
                                      (t + 0.5) / 5, NULL, NULL),
                 0);
  qrs_sampler_free(s);
  fclose(f);
  lines = 0;
  for (line = strtok_r(buf, "\n", &save); line;
       line = strtok_r(NULL, "\n", &save)) {
    o = json_tokener_parse(line);
    cr_assert_not_null(o);
    cr_expect_eq(json_object_get_int64(key(o, "step")), lines);
    cr_expect_str_eq(json_object_get_string(key(o, "preset_active")),
                     "creative_sampling");
    cr_expect_str_eq(json_object_get_string(key(o, "temperature_strategy")),
                     "hvh_drift");
    cr_expect_gt(json_object_get_double(key(o, "shannon_entropy")), 0.0);
    cr_expect_eq(json_object_get_int64(key(o, "token_id")) == 5, 0,
                 "never the masked token");
    json_object_put(o);
    lines++;
  }
  cr_expect_eq(lines, 5);
  free(buf);
  /* level none: nothing, even with a sink */
  s = sampler("none", 0);
  f = open_memstream(&buf, &len);
  cr_assert_eq(qrs_sampler_set_log_file(s, f), 0);
  cr_assert_eq(qrs_sampler_select_u(s, row, QRS_DTYPE_F32, 6, 0.5, NULL, NULL),
               0);
  qrs_sampler_free(s);
  fclose(f);
  cr_expect_eq(len, 0);
  free(buf);
}

Test(record, log_path_appends)
{
  static const float row[6] = { 1, 2, 3, 0, -1, -2 };
  struct qrs_sampler *s;
  char path[] = "/tmp/qrs-record-XXXXXX", c;
  FILE *f;
  int fd, t, lines;

  fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  close(fd);
  for (t = 0; t < 2; t++) {
    s = sampler("summary", 0);
    cr_assert_eq(qrs_sampler_set_log_path(s, path), 0);
    cr_assert_eq(qrs_sampler_select_u(s, row, QRS_DTYPE_F32, 6, 0.5, NULL,
                                      NULL),
                 0);
    cr_assert_eq(qrs_sampler_select_u(s, row, QRS_DTYPE_F32, 6, 0.9, NULL,
                                      NULL),
                 0);
    qrs_sampler_free(s);
  }
  f = fopen(path, "r");
  cr_assert_not_null(f);
  lines = 0;
  while ((c = (char)fgetc(f)) != EOF)
    lines += c == '\n';
  fclose(f);
  unlink(path);
  cr_expect_eq(lines, 4);
  s = sampler("summary", 0);
  cr_expect_eq(qrs_sampler_set_log_path(s, "/nonexistent/dir/log"), -ENOENT);
  qrs_sampler_free(s);
}

Test(record, diagnostic_mode_keeps_records_and_summarises_them)
{
  static const float row[6] = { 1, 2, 3, 0, -1, -2 };
  struct qrs_sampler_stats st;
  struct qrs_token_record r, first;
  struct qrs_sampler *s;
  double mean_u;
  int t;

  s = sampler("none", 0);
  cr_expect_eq(qrs_sampler_diagnostic_count(s), 0);
  cr_expect_eq(qrs_sampler_summary_stats(s, &st), -ENODATA);
  qrs_sampler_free(s);
  s = sampler("none", 1);
  mean_u = 0.0;
  for (t = 0; t < 10; t++) {
    cr_assert_eq(qrs_sampler_select_u(s, row, QRS_DTYPE_F32, 6,
                                      (t + 0.5) / 10, NULL,
                                      t == 0 ? &first : NULL),
                 0);
    mean_u += (t + 0.5) / 10;
  }
  cr_expect_eq(qrs_sampler_diagnostic_count(s), 10);
  cr_assert_eq(qrs_sampler_diagnostic_record(s, 0, &r), 0);
  cr_expect_eq(r.step, 0);
  cr_expect_eq(r.token_id, first.token_id);
  cr_expect(!isnan(r.shannon_entropy), "diagnostic mode computes H");
  cr_expect_eq(qrs_sampler_diagnostic_record(s, 10, &r), -ERANGE);
  cr_assert_eq(qrs_sampler_summary_stats(s, &st), 0);
  cr_expect_eq(st.total_tokens, 10);
  cr_expect_float_eq(st.mean_u, mean_u / 10, 1e-12);
  cr_expect_float_eq(st.min_u, 0.05, 1e-12);
  cr_expect_float_eq(st.max_u, 0.95, 1e-12);
  cr_expect_eq(st.fallback_count, 0);
  cr_expect_gt(st.mean_prob, 0.0);
  qrs_sampler_free(s);
}

/* ---- one write per line across threads ---- */

#define REC_THREADS 4
#define REC_LINES_MAX 4000

/* Fewer lines under valgrind, which runs one thread at a time (slow, and
   no interleaving to find there anyway). */
static int
rec_lines(void)
{
  const char *p = getenv("LD_PRELOAD");

  return p && strstr(p, "vgpreload") ? 200 : REC_LINES_MAX;
}

struct rec_job {
  FILE *f;                      /* shared FILE* */
  const char *path;             /* or: a sampler logging to this path */
  int id;
};

static void *
rec_writer(void *arg)
{
  struct rec_job *j = arg;
  struct qrs_token_record rec;
  int i;

  sample_record(&rec);
  rec.token_id = (uint32_t)j->id;
  for (i = 0; i < rec_lines(); i++) {
    rec.step = (uint64_t)i;
    cr_assert_eq(qrs_token_record_write(&rec, 2, j->f), 0);
  }
  return NULL;
}

static void *
sampler_writer(void *arg)
{
  struct rec_job *j = arg;
  struct qrs_sampler_config *cfg;
  struct qrs_sampler *s;
  float row[8] = { 0, 1, 2, 3, 4, 5, 6, 7 };
  int i;

  cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
  cr_assert_eq(qrs_sampler_config_set(cfg, "log_level", "full"), 0);
  cr_assert_eq(qrs_sampler_new(cfg, 8, &s), 0);
  qrs_sampler_config_free(cfg);
  cr_assert_eq(qrs_sampler_set_log_path(s, j->path), 0);
  for (i = 0; i < rec_lines() / 4; i++)
    cr_assert_eq(
        qrs_sampler_select_u(s, row, QRS_DTYPE_F32, 8, 0.5, NULL, NULL), 0);
  qrs_sampler_free(s);
  return NULL;
}

/* Run fn in REC_THREADS threads at once, each on a job of its own that
   writes to f or logs to path, and wait for them all. */
static void
run_writers(void *(*fn)(void *), FILE *f, const char *path)
{
  struct rec_job jobs[REC_THREADS];
  pthread_t t[REC_THREADS];
  int i;

  for (i = 0; i < REC_THREADS; i++) {
    jobs[i].f = f;
    jobs[i].path = path;
    jobs[i].id = i;
    cr_assert_eq(pthread_create(&t[i], NULL, fn, &jobs[i]), 0);
  }
  for (i = 0; i < REC_THREADS; i++)
    pthread_join(t[i], NULL);
}

/* f has want lines, and every one parses as a JSON object. */
static void
expect_good_lines(FILE *f, size_t want)
{
  struct json_object *o;
  char *line;
  size_t cap, n, bad;
  ssize_t len;

  rewind(f);
  line = NULL;
  cap = 0;
  n = bad = 0;
  while ((len = getline(&line, &cap, f)) > 0) {
    n++;
    o = json_tokener_parse(line);
    if (!o || !json_object_is_type(o, json_type_object))
      bad++;
    json_object_put(o);
  }
  free(line);
  cr_expect_eq(n, want);
  cr_expect_eq(bad, 0, "%zu of %zu lines malformed", bad, n);
}

Test(record, lines_from_threads_sharing_a_file_never_interleave)
{
  FILE *f;

  f = tmpfile();
  cr_assert_not_null(f);
  run_writers(rec_writer, f, NULL);
  fflush(f);
  expect_good_lines(f, (size_t)REC_THREADS * (size_t)rec_lines());
  fclose(f);
}

Test(record, samplers_logging_to_one_path_never_interleave)
{
  char path[] = "/tmp/qrs-records-XXXXXX";
  FILE *f;
  int fd;

  fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  close(fd);
  run_writers(sampler_writer, NULL, path);
  f = fopen(path, "r");
  cr_assert_not_null(f);
  expect_good_lines(f, (size_t)REC_THREADS * (size_t)(rec_lines() / 4));
  fclose(f);
  unlink(path);
}

/* The provenance fields qrs-audit --records reads: the journal entry and
   the draw's three times, null when not known. */
Test(record, full_line_carries_journal_seq_and_draw_times)
{
  struct qrs_token_record r;
  struct json_object *o;

  sample_record(&r);
  o = line_of(&r, 2);
  cr_expect(json_object_is_type(key(o, "journal_seq"), json_type_null));
  cr_expect(json_object_is_type(key(o, "draw_sent_ns"), json_type_null));
  cr_expect(!json_object_get_boolean(key(o, "entropy_unjournalled")));
  json_object_put(o);
  r.journal_seq = UINT64_C(18446744073709551000);
  r.entropy_unjournalled = 1;
  r.draw_received_ns = INT64_C(1796000000000000001);
  r.draw_generated_ns = INT64_C(1796000000000000002);
  r.draw_sent_ns = INT64_C(1796000000000000003);
  o = line_of(&r, 2);
  cr_expect_eq(json_object_get_uint64(key(o, "journal_seq")),
               UINT64_C(18446744073709551000));
  cr_expect(json_object_get_boolean(key(o, "entropy_unjournalled")));
  cr_expect_eq(json_object_get_int64(key(o, "draw_received_ns")),
               INT64_C(1796000000000000001));
  cr_expect_eq(json_object_get_int64(key(o, "draw_generated_ns")),
               INT64_C(1796000000000000002));
  cr_expect_eq(json_object_get_int64(key(o, "draw_sent_ns")),
               INT64_C(1796000000000000003));
  json_object_put(o);
}

/* Where the token was selected: null (libqrs alone), or the device's
   verdict. */
Test(record, device_selection_is_null_or_its_verdict)
{
  static const char *const want[] = { NULL, "certified", "uncertified" };
  struct qrs_token_record r;
  struct json_object *o;
  int i;

  sample_record(&r);
  for (i = 0; i < 3; i++) {
    r.device_selection = i;
    o = line_of(&r, 2);
    if (want[i])
      cr_expect_str_eq(json_object_get_string(key(o, "device_selection")),
                       want[i]);
    else
      cr_expect(json_object_is_type(key(o, "device_selection"),
                                    json_type_null));
    json_object_put(o);
  }
}
