/* llama.cpp with libqrs: qrs-generate and the qrs llama.cpp sampler on a real
   (tiny, random-weight) Qwen2 GGUF model decoded by the prebuilt llama.cpp,
   with draws from a real qrsd.

   $QRS_TEST_MODEL is the model tests/llama/make-test-model.py wrote,
   $QRS_GENERATE_BIN the qrs-generate program, $QRSD_BIN qrsd,
   $QRS_ENTROPY_SERVER_BIN the gRPC upstream for the fallback test. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <json-c/json.h>

#include <qrs/llama.h>
#include <qrs/qrs.h>

#include "harness.h"
#include "harness_client.h"
#include "upserver.h"

#define PROMPT "Once upon a time"
#define THREADS 2
#define N_GEN 10
#define MAX_GEN 64
#define SALT "000102030405060708090a0b0c0d0e0f"

#define MOCK_YAML(seed)                                                     \
  "allow_test_sources: true\n"                                              \
  "default_source: mock\n"                                                  \
  "sources:\n"                                                              \
  "  mock: { type: mock, seed: " #seed " }\n"                               \
  "  system: { type: system }\n"

static struct daemon D;

struct gen_record {
  uint32_t token;
  double u;
  double cdf_lo, cdf_hi;
  uint64_t step;
  int fallback;
  int production;
  char source[QRS_NAME_MAX];
  char type[QRS_NAME_MAX];
};

/* qrs-generate's stderr (its summary) from the last generate(). */
static char gen_err[16384];

static const char *
env(const char *name)
{
  const char *v;

  v = getenv(name);
  cr_assert(v && *v, "%s is not set (run through meson test)", name);
  return v;
}

static void
stop(void)
{
  if (D.pid > 0)
    daemon_stop(&D);
  daemon_cleanup(&D);
}

/* ------------------------------------------------------------------ */
/* qrs-generate                                                        */
/* ------------------------------------------------------------------ */

/* Run qrs-generate against D (extra args NULL-terminated) writing records
   to D.dir/records.jsonl; read the records into rec.  Returns the number
   of records; *ret_status gets the exit status. */
static size_t
generate(struct gen_record *rec, int *ret_status, char *out, size_t outlen,
         const char *const *extra)
{
  char records[128], line[65536];
  struct json_object *j, *v;
  const char *argv[32];
  size_t n;
  FILE *f;
  int a;

  snprintf(records, sizeof(records), "%s/records.jsonl", D.dir);
  a = 0;
  argv[a++] = env("QRS_GENERATE_BIN");
  argv[a++] = "-m";
  argv[a++] = env("QRS_TEST_MODEL");
  argv[a++] = "-p";
  argv[a++] = PROMPT;
  argv[a++] = "-n";
  argv[a++] = "10";
  argv[a++] = "-t";
  argv[a++] = "2";
  argv[a++] = "--socket";
  argv[a++] = D.sock;
  argv[a++] = "--salt";
  argv[a++] = SALT;
  argv[a++] = "--records";
  argv[a++] = records;
  argv[a++] = "-s";
  argv[a++] = "sample_count=256";
  while (extra && *extra && a < 31)
    argv[a++] = *extra++;
  argv[a] = NULL;
  *ret_status = run_capture((char *const *)argv, out, outlen, gen_err,
                            sizeof(gen_err));
  cr_log_info("qrs-generate: %s", gen_err);

  f = fopen(records, "r");
  cr_assert_not_null(f, "no records file");
  n = 0;
  while (fgets(line, sizeof(line), f)) {
    cr_assert_lt(n, MAX_GEN);
    j = json_tokener_parse(line);
    cr_assert_not_null(j, "bad JSON line: %s", line);
    cr_assert(json_object_object_get_ex(j, "token_id", &v));
    rec[n].token = (uint32_t)json_object_get_int64(v);
    cr_assert(json_object_object_get_ex(j, "u_value", &v));
    rec[n].u = json_object_get_double(v);
    cr_assert(json_object_object_get_ex(j, "cdf_lo", &v));
    rec[n].cdf_lo = json_object_get_double(v);
    cr_assert(json_object_object_get_ex(j, "cdf_hi", &v));
    rec[n].cdf_hi = json_object_get_double(v);
    cr_assert(json_object_object_get_ex(j, "step", &v));
    rec[n].step = (uint64_t)json_object_get_int64(v);
    cr_assert(json_object_object_get_ex(j, "entropy_is_fallback", &v));
    rec[n].fallback = json_object_get_boolean(v);
    cr_assert(json_object_object_get_ex(j, "entropy_source_used", &v));
    snprintf(rec[n].source, sizeof(rec[n].source), "%s",
             json_object_get_string(v));
    cr_assert(json_object_object_get_ex(j, "entropy_source_type", &v));
    snprintf(rec[n].type, sizeof(rec[n].type), "%s",
             json_object_get_string(v));
    cr_assert(json_object_object_get_ex(j, "entropy_production", &v));
    rec[n].production = json_object_get_boolean(v);
    cr_assert(json_object_object_get_ex(j, "entropy_nonce", &v));
    cr_assert(json_object_is_type(v, json_type_string) &&
              strlen(json_object_get_string(v)) == 16 &&
              strspn(json_object_get_string(v), "0123456789abcdef") == 16,
              "no commitment nonce: %s", line);
    json_object_put(j);
    n++;
  }
  fclose(f);
  return n;
}

static size_t
generate_ok(struct gen_record *rec, const char *const *extra)
{
  char out[65536];
  size_t i, n;
  int status;

  n = generate(rec, &status, out, sizeof(out), extra);
  cr_assert_eq(status, 0, "qrs-generate exited with %d", status);
  cr_assert(strncmp(out, PROMPT, strlen(PROMPT)) == 0,
            "the text does not start with the prompt: %s", out);
  cr_assert_gt(n, 0);
  for (i = 0; i < n; i++) {
    cr_assert_eq(rec[i].step, i);
    cr_assert(rec[i].cdf_lo < rec[i].u && rec[i].u <= rec[i].cdf_hi,
              "token %zu: u %.17g outside its CDF interval [%.17g, %.17g]",
              i, rec[i].u, rec[i].cdf_lo, rec[i].cdf_hi);
  }
  return n;
}

static int
same_tokens(const struct gen_record *a, size_t na, const struct gen_record *b,
            size_t nb)
{
  size_t i;

  if (na != nb)
    return 0;
  for (i = 0; i < na; i++)
    if (a[i].token != b[i].token)
      return 0;
  return 1;
}

Test(generate, same_seed_same_tokens_other_seed_others, .fini = stop,
     .timeout = 300)
{
  struct gen_record a[MAX_GEN], b[MAX_GEN], c[MAX_GEN];
  size_t na, nb, nc, i;

  daemon_run(&D, MOCK_YAML(7));
  na = generate_ok(a, NULL);
  for (i = 0; i < na; i++) {
    cr_assert_str_eq(a[i].source, "mock");
    cr_assert_eq(a[i].fallback, 0);
  }
  /* A fresh daemon with the same seed replays the same bytes. */
  cr_assert_eq(daemon_stop(&D), 0);
  daemon_start(&D, NULL);
  nb = generate_ok(b, NULL);
  cr_assert(same_tokens(a, na, b, nb), "same seed, different tokens");
  for (i = 0; i < na; i++)
    cr_assert_eq(a[i].u, b[i].u);

  cr_assert_eq(daemon_stop(&D), 0);
  daemon_cleanup(&D);
  daemon_run(&D, MOCK_YAML(8));
  nc = generate_ok(c, NULL);
  cr_assert_not(same_tokens(a, na, c, nc), "another seed, same tokens");
}

Test(generate, system_source_in_every_record, .fini = stop, .timeout = 300)
{
  static const char *const extra[] = { "--source", "system", NULL };
  struct gen_record r[MAX_GEN];
  size_t n, i;

  daemon_run(&D, MOCK_YAML(7));
  n = generate_ok(r, extra);
  cr_assert_eq(n, N_GEN);
  for (i = 0; i < n; i++) {
    cr_assert_str_eq(r[i].source, "system", "token %zu from %s", i,
                     r[i].source);
    cr_assert_eq(r[i].fallback, 0);
  }
}

/* qrs-generate's summary line says "fallbacks N, source SOURCES". */
static void
expect_summary(size_t fallbacks, const char *sources)
{
  char want[256];

  snprintf(want, sizeof(want), "fallbacks %zu, source %s\n", fallbacks,
           sources);
  cr_assert(strstr(gen_err, want), "the summary does not say '%s':\n%s",
            want, gen_err);
}

static void
expect_served(const struct gen_record *r, size_t i, const char *source,
              const char *type, int fallback)
{
  cr_assert_str_eq(r[i].source, source, "token %zu served by %s, not %s", i,
                   r[i].source, source);
  cr_assert_str_eq(r[i].type, type, "token %zu: type %s, not %s", i,
                   r[i].type, type);
  cr_assert_eq(r[i].fallback, fallback, "token %zu: fallback %d", i,
               r[i].fallback);
  cr_assert_eq(r[i].production, 1, "token %zu: not production", i);
}

/* Sources that really fail, with "fallback: system": each token the
   fallback served says so in its record (entropy_is_fallback, served by
   system, type system), the tokens the source served are its own, and
   qrs-generate's summary counts the same fallbacks.  A gRPC upstream (a
   real qrs-entropy-server) that goes away after a few answers, in the
   middle of the generation, and a device whose FIFO has no writer. */
Test(generate, fallback_draws_carry_the_fallback_label, .fini = stop,
     .timeout = 300)
{
  static const char *const extra_q[] = { "-n", "16", NULL };
  static const char *const extra_hw[] = { "--source", "hw", NULL };
  struct gen_record r[MAX_GEN];
  struct upserver up;
  char listen[128], fifo[128], want[64], yaml[1024];
  size_t n, i, k;
  FILE *f;

  daemon_prepare(&D, NULL);
  snprintf(listen, sizeof(listen), "unix:%s/q.sock", D.dir);
  snprintf(fifo, sizeof(fifo), "%s/hw.fifo", D.dir);
  cr_assert_eq(mkfifo(fifo, 0600), 0);
  /* qrsd's warm-up fetch is the first answer. */
  upserver_start(&up, listen, "--drop-after", "6", NULL);
  snprintf(yaml, sizeof(yaml),
           "default_source: q\n"
           "sources:\n"
           "  system: { type: system }\n"
           "  q: { type: grpc, target: \"%s\", fallback: system,\n"
           "       retry_count: 0, timeout_ms: 2000 }\n"
           "  hw: { type: device, path: %s, fallback: system }\n",
           listen, fifo);
  snprintf(D.conf, sizeof(D.conf), "%s/qrsd.yaml", D.dir);
  f = fopen(D.conf, "w");
  cr_assert_not_null(f);
  fputs(yaml, f);
  fclose(f);
  daemon_start(&D, NULL);

  /* The upstream serves the first tokens, then exits: the fallback
     serves every token after that, and generation goes on. */
  n = generate_ok(r, extra_q);
  cr_assert_eq(n, 16);
  cr_assert_eq(upserver_wait(&up, 10000), 0, "the upstream did not exit");
  for (k = 0; k < n && !r[k].fallback; k++)
    expect_served(r, k, "q", "grpc", 0);
  cr_assert_geq(k, 1, "the upstream served no token");
  cr_assert_lt(k, n, "no token was served by the fallback");
  for (i = k; i < n; i++)
    expect_served(r, i, "system", "system", 1);
  snprintf(want, sizeof(want), "q %zu, system %zu", k, n - k);
  expect_summary(n - k, want);

  /* A device with no writer: end of file at once, every token from the
     fallback. */
  n = generate_ok(r, extra_hw);
  cr_assert_eq(n, N_GEN);
  for (i = 0; i < n; i++)
    expect_served(r, i, "system", "system", 1);
  expect_summary(n, "system");
}

/* Ctrl-C in the middle of a generation: qrs-generate stops, prints the
   summary of the tokens made (each of which has its record), exits 130,
   and the decode it aborted leaves no llama.cpp error lines. */
Test(generate, ctrl_c_stops_cleanly_with_the_summary, .fini = stop,
     .timeout = 300)
{
  char records[128], errpath[128], err[16384], line[65536], *l;
  size_t n_summary, n_records;
  struct stat st;
  ssize_t len;
  pid_t pid;
  int status, i, fd;
  FILE *f;

  daemon_run(&D, MOCK_YAML(7));
  snprintf(records, sizeof(records), "%s/records.jsonl", D.dir);
  snprintf(errpath, sizeof(errpath), "%s/stderr.txt", D.dir);
  pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || dup2(fd, 2) < 0)
      _exit(127);
    fd = open("/dev/null", O_WRONLY);
    if (fd < 0 || dup2(fd, 1) < 0)
      _exit(127);
    execl(env("QRS_GENERATE_BIN"), "qrs-generate", "-m",
          env("QRS_TEST_MODEL"), "-p", PROMPT, "-n", "100000", "-c", "4096",
          "-t", "2", "--socket", D.sock, "--salt", SALT, "--records",
          records, (char *)NULL);
    _exit(127);
  }
  /* The first records reach the file: the generation is under way. */
  for (i = 0; i < 1200 && (stat(records, &st) < 0 || st.st_size == 0);
       i++)
    usleep(50000);
  if (i == 1200) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    cr_assert_fail("no record after 60 s");
  }
  cr_assert_eq(kill(pid, SIGINT), 0);
  for (i = 0; i < 600 && waitpid(pid, &status, WNOHANG) == 0; i++)
    usleep(50000);
  if (i == 600) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    cr_assert_fail("qrs-generate still running 30 s after SIGINT");
  }
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 130,
            "status %#x, not exit 130", status);

  fd = open(errpath, O_RDONLY);
  cr_assert_geq(fd, 0);
  len = read(fd, err, sizeof(err) - 1);
  close(fd);
  cr_assert_gt(len, 0);
  err[len] = '\0';
  cr_log_info("qrs-generate: %s", err);
  cr_assert(strstr(err, "qrs-generate: interrupted\n"), "%s", err);
  cr_assert(strstr(err, "prefetch hits"), "no summary: %s", err);
  cr_assert_null(strstr(err, "failed"), "error lines: %s", err);
  n_summary = 0;
  for (l = err; l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
    if (sscanf(l, "qrs-generate: %zu token", &n_summary) == 1)
      break;
  cr_assert_gt(n_summary, 0, "%s", err);
  f = fopen(records, "r");
  cr_assert_not_null(f);
  for (n_records = 0; fgets(line, sizeof(line), f); n_records++)
    ;
  fclose(f);
  cr_assert_eq(n_records, n_summary, "%zu records, %zu tokens", n_records,
               n_summary);
}

Test(generate, bad_usage_and_unreachable_daemon, .timeout = 60)
{
  char out[4096], err[4096];
  char *argv[] = { (char *)env("QRS_GENERATE_BIN"), "-m",
                   (char *)env("QRS_TEST_MODEL"), "-p", "x", "--socket",
                   "/nonexistent/qrsd.sock", NULL };
  char *argv2[] = { (char *)env("QRS_GENERATE_BIN"), "-p", "x", NULL };
  char *argv3[] = { (char *)env("QRS_GENERATE_BIN"), "-m", "x", "-p", "x",
                    "--preset", "nope", NULL };
  char *argv4[] = { (char *)env("QRS_GENERATE_BIN"), "--help", NULL };

  cr_assert_eq(run_capture(argv, out, sizeof(out), err, sizeof(err)), 2);
  cr_assert(strstr(err, "cannot reach qrsd at /nonexistent/qrsd.sock"),
            "%s", err);
  cr_assert_eq(run_capture(argv2, out, sizeof(out), err, sizeof(err)), 2);
  cr_assert(strstr(err, "-m MODEL is required"), "%s", err);
  cr_assert_eq(run_capture(argv3, out, sizeof(out), err, sizeof(err)), 2);
  cr_assert(strstr(err, "no preset named 'nope'"), "%s", err);
  cr_assert_eq(run_capture(argv4, out, sizeof(out), err, sizeof(err)), 0);
  cr_assert(strstr(out, "--records FILE"), "%s", out);
}

/* ------------------------------------------------------------------ */
/* In-process llama.cpp                                                 */
/* ------------------------------------------------------------------ */

struct engine {
  struct llama_model *model;
  struct llama_context *ctx;
  const struct llama_vocab *vocab;
  size_t n_vocab;
};

static void
quiet_log(enum ggml_log_level level, const char *text, void *data)
{
  if (level == GGML_LOG_LEVEL_ERROR)
    fputs(text, stderr);
}

/* Load the test model and decode the prompt, with the batch layout and
   threads of qrs-generate (so the rows are the same). */
static void
engine_open(struct engine *e)
{
  struct llama_context_params cp;
  struct llama_model_params mp;
  llama_token prompt[64];
  int32_t n;

  llama_log_set(quiet_log, NULL);
  llama_backend_init();
  cr_assert_eq(qrs_llama_load_backends(NULL), 0);
  mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  e->model = llama_model_load_from_file(env("QRS_TEST_MODEL"), mp);
  cr_assert_not_null(e->model);
  e->vocab = llama_model_get_vocab(e->model);
  e->n_vocab = (size_t)llama_vocab_n_tokens(e->vocab);
  cr_assert_eq(e->n_vocab, 151936);
  n = llama_tokenize(e->vocab, PROMPT, (int32_t)strlen(PROMPT), prompt, 64,
                     true, true);
  cr_assert_gt(n, 0);
  cp = llama_context_default_params();
  cp.n_ctx = (uint32_t)n + N_GEN + 1;
  cp.n_batch = (uint32_t)n;
  cp.n_threads = THREADS;
  cp.n_threads_batch = THREADS;
  e->ctx = llama_init_from_model(e->model, cp);
  cr_assert_not_null(e->ctx);
  cr_assert_eq(llama_decode(e->ctx, llama_batch_get_one(prompt, n)), 0);
}

static void
engine_next(struct engine *e, llama_token tok)
{
  cr_assert_eq(llama_decode(e->ctx, llama_batch_get_one(&tok, 1)), 0);
}

static void
engine_close(struct engine *e)
{
  llama_free(e->ctx);
  llama_model_free(e->model);
  llama_backend_free();
}

static struct qrs_sampler_config *
config(const char *preset)
{
  struct qrs_sampler_config *cfg;

  cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
  if (preset)
    cr_assert_eq(qrs_sampler_config_set_preset(cfg, preset), 0);
  /* The presets name the reference's gRPC source and server amplifier;
     here the draws come from the test daemon's default source. */
  cr_assert_eq(qrs_sampler_config_set(cfg, "entropy_source_type", "mock"),
               0);
  cr_assert_eq(qrs_sampler_config_set(cfg, "signal_amplifier_type",
                                      "zscore_mean"), 0);
  cr_assert_eq(qrs_sampler_config_set(cfg, "sample_count", "256"), 0);
  return cfg;
}

/* Replay: libqrs on the same logits rows, from llama_get_logits_ith(), with
   each record's u, chooses each token qrs-generate chose. */
Test(replay, select_u_on_the_same_rows_gives_the_same_tokens, .fini = stop,
     .timeout = 300)
{
  static const char *const extra[] = {
    "--preset", "qthought_think", "-s", "entropy_source_type=mock",
    "-s", "signal_amplifier_type=zscore_mean", NULL,
  };
  struct gen_record r[MAX_GEN];
  struct qrs_sampler_config *cfg;
  struct qrs_token_record rec;
  struct qrs_sampler *s;
  struct engine e;
  const float *row;
  uint8_t salt[16];
  uint32_t tok;
  size_t n, i;

  daemon_run(&D, MOCK_YAML(11));
  n = generate_ok(r, extra);
  cr_assert_eq(n, N_GEN);

  engine_open(&e);
  cfg = config("qthought_think");
  cr_assert_eq(qrs_sampler_new(cfg, e.n_vocab, &s), 0);
  qrs_sampler_config_free(cfg);
  for (i = 0; i < sizeof(salt); i++)
    salt[i] = (uint8_t)i;
  cr_assert_eq(qrs_sampler_set_salt(s, salt, sizeof(salt)), 0);
  for (i = 0; i < n; i++) {
    row = llama_get_logits_ith(e.ctx, -1);
    cr_assert_not_null(row);
    cr_assert_eq(qrs_sampler_select_u(s, row, QRS_DTYPE_F32, e.n_vocab,
                                      r[i].u, &tok, &rec), 0);
    cr_assert_eq(tok, r[i].token, "token %zu: replay %u, generated %u", i,
                 tok, r[i].token);
    cr_assert_eq(rec.cdf_lo, r[i].cdf_lo);
    cr_assert_eq(rec.cdf_hi, r[i].cdf_hi);
    if (i + 1 < n)
      engine_next(&e, (llama_token)tok);
  }
  qrs_sampler_free(s);
  engine_close(&e);
}

/* A test sampler that keeps a copy of the candidates it sees. */
struct spy {
  llama_token_data cand[256];
  size_t n;
  int overflow;
};

static void
spy_apply(struct llama_sampler *smpl, llama_token_data_array *cur_p)
{
  struct spy *sp = smpl->ctx;

  sp->overflow = cur_p->size > 256;
  sp->n = sp->overflow ? 0 : cur_p->size;
  memcpy(sp->cand, cur_p->data, sp->n * sizeof(*sp->cand));
}

static struct llama_sampler_i spy_iface = { .apply = spy_apply };

static int
all_digits(const struct llama_vocab *vocab, llama_token tok)
{
  char buf[64];
  int32_t len, i;

  len = llama_token_to_piece(vocab, tok, buf, sizeof(buf), 0, true);
  if (len <= 0)
    return 0;
  for (i = 0; i < len; i++)
    if (buf[i] < '0' || buf[i] > '9')
      return 0;
  return 1;
}

/* The qrs sampler after llama.cpp's own grammar and top-k in a chain: every
   token obeys the grammar, and the selection is libqrs's on the
   candidates that survived. */
Test(chain, after_grammar_and_top_k, .fini = stop, .timeout = 300)
{
  struct qrs_sampler_config *cfg;
  struct qrs_token_record rec, rec2;
  struct llama_sampler *chain, *qs;
  struct qrs_sampler *twin;
  struct qrs_client *c;
  struct spy sp;
  struct engine e;
  uint32_t tok2;
  llama_token tok;
  float *row;
  size_t i, k;

  daemon_run(&D, MOCK_YAML(3));
  c = connect_client(D.sock);
  engine_open(&e);
  cfg = config(NULL);
  cr_assert_eq(qrs_sampler_config_set(cfg, "temperature_strategy", "edt"),
               0);
  cr_assert_eq(qrs_llama_sampler_new(e.vocab, cfg, c, &qs), 0);
  cr_assert_eq(qrs_sampler_new(cfg, e.n_vocab, &twin), 0);
  qrs_sampler_config_free(cfg);
  cr_assert_str_eq(llama_sampler_name(qs), "qrs");

  memset(&sp, 0, sizeof(sp));
  chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
  llama_sampler_chain_add(chain, llama_sampler_init_grammar(
                              e.vocab, "root ::= [0-9]{30}", "root"));
  llama_sampler_chain_add(chain, llama_sampler_init_top_k(5));
  llama_sampler_chain_add(chain, llama_sampler_init(&spy_iface, &sp));
  llama_sampler_chain_add(chain, qs);
  cr_assert_eq(qrs_llama_sampler_get(chain), qrs_llama_sampler_get(qs));

  row = malloc(e.n_vocab * sizeof(*row));
  cr_assert_not_null(row);
  for (i = 0; i < N_GEN; i++) {
    cr_assert_eq(qrs_llama_sample(chain, e.ctx, -1, &tok), 0);
    cr_assert(all_digits(e.vocab, tok), "token %zu (%d) is not digits", i,
              tok);
    cr_assert_eq(qrs_llama_sampler_status(chain), 0);
    cr_assert_eq(qrs_llama_sampler_record(chain, &rec), 0);
    cr_assert_eq(rec.step, i);
    cr_assert_eq(rec.token_id, (uint32_t)tok);
    cr_assert_str_eq(rec.entropy_source_used, "mock");
    cr_assert_eq(rec.entropy_prefetch_hit == 1, i > 0);
    /* What reached the qrs sampler: at most 5, all digits. */
    cr_assert_not(sp.overflow);
    cr_assert_gt(sp.n, 0);
    cr_assert_leq(sp.n, 5);
    for (k = 0; k < e.n_vocab; k++)
      row[k] = -INFINITY;
    for (k = 0; k < sp.n; k++) {
      if (isfinite(sp.cand[k].logit))
        cr_assert(all_digits(e.vocab, sp.cand[k].id));
      row[sp.cand[k].id] = sp.cand[k].logit;
    }
    cr_assert_eq(qrs_sampler_select_u(twin, row, QRS_DTYPE_F32, e.n_vocab,
                                      rec.u_value, &tok2, &rec2), 0);
    cr_assert_eq(tok2, (uint32_t)tok, "token %zu: libqrs %u, chain %d", i,
                 tok2, tok);
    cr_assert_eq(rec2.temperature_used, rec.temperature_used);
    engine_next(&e, tok);
  }
  free(row);
  qrs_sampler_free(twin);
  llama_sampler_free(chain);
  engine_close(&e);
  qrs_client_free(c);
}

/* Every preset, temperature strategy and stage order through the llama.cpp
   interface (whole row in id order, and a truncated, reordered candidate
   list) selects what libqrs selects on the same row with the same u. */
Test(chain, every_preset_strategy_and_order, .fini = stop, .timeout = 300)
{
  static const char *const strategies[] = {
    "fixed", "edt", "hvh_drift", "coherence_gate", "tt_exchange", "evdt_tt",
    "gdt", "dynatemp", "belltemp", "mix_temperatures", "ring_buffer_ar",
    "entropy_throttle", "mirostat_v2",
  };
  static const char *const orders[] = { "hf", "llama" };
  struct qrs_sampler_config *cfg;
  struct qrs_token_record rec, rec2;
  struct llama_sampler *qs, *topk, *clone;
  llama_token_data *cand;
  llama_token_data_array cur;
  struct qrs_sampler *twin;
  struct qrs_client *c;
  struct engine e;
  const char *name;
  const float *rows[3];
  float *copy[3], *masked;
  uint32_t tok2;
  size_t i, j, t, k, n_cfg;

  daemon_run(&D, MOCK_YAML(5));
  c = connect_client(D.sock);
  engine_open(&e);
  for (t = 0; t < 3; t++) {
    rows[t] = llama_get_logits_ith(e.ctx, -1);
    copy[t] = malloc(e.n_vocab * sizeof(float));
    cr_assert_not_null(copy[t]);
    memcpy(copy[t], rows[t], e.n_vocab * sizeof(float));
    engine_next(&e, (llama_token)(100 + t));
  }
  cand = malloc(e.n_vocab * sizeof(*cand));
  masked = malloc(e.n_vocab * sizeof(*masked));
  cr_assert(cand && masked);
  topk = llama_sampler_init_top_k(40);

  n_cfg = 0;
  for (i = 0; i < 7 + 13 + 2; i++) {
    if (i < 7) {
      name = qrs_sampler_preset_name(i);
      cr_assert_not_null(name);
      cfg = config(name);
    } else if (i < 20) {
      name = strategies[i - 7];
      cfg = config(NULL);
      cr_assert_eq(qrs_sampler_config_set(cfg, "temperature_strategy", name),
                   0);
    } else {
      name = orders[i - 20];
      cfg = config(NULL);
      cr_assert_eq(qrs_sampler_config_set(cfg, "stage_order", name), 0);
      cr_assert_eq(qrs_sampler_config_set(cfg, "top_k", "20"), 0);
    }
    cr_assert_eq(qrs_llama_sampler_new(e.vocab, cfg, c, &qs), 0, "%s", name);
    cr_assert_eq(qrs_sampler_new(cfg, e.n_vocab, &twin), 0);
    qrs_sampler_config_free(cfg);
    for (t = 0; t < 3; t++) {
      for (j = 0; j < 2; j++) {
        for (k = 0; k < e.n_vocab; k++) {
          cand[k].id = (llama_token)k;
          cand[k].logit = copy[t][k];
          cand[k].p = 0;
        }
        cur.data = cand;
        cur.size = e.n_vocab;
        cur.selected = -1;
        cur.sorted = false;
        if (j == 1)             /* truncated and sorted by llama.cpp */
          llama_sampler_apply(topk, &cur);
        llama_sampler_apply(qs, &cur);
        cr_assert_eq(qrs_llama_sampler_status(qs), 0, "%s: %s", name,
                     qrs_strerror(qrs_llama_sampler_status(qs)));
        cr_assert_geq(cur.selected, 0);
        cr_assert_lt((size_t)cur.selected, cur.size);
        cr_assert_eq(qrs_llama_sampler_record(qs, &rec), 0);
        cr_assert_eq((uint32_t)cur.data[cur.selected].id, rec.token_id);
        for (k = 0; k < e.n_vocab; k++)
          masked[k] = j ? -INFINITY : copy[t][k];
        for (k = 0; j && k < cur.size; k++)
          masked[cur.data[k].id] = cur.data[k].logit;
        cr_assert_eq(qrs_sampler_select_u(twin, masked, QRS_DTYPE_F32,
                                          e.n_vocab, rec.u_value, &tok2,
                                          &rec2), 0);
        cr_assert_eq(tok2, rec.token_id, "%s, row %zu, %s: libqrs %u, "
                     "sampler %u", name, t, j ? "top-40" : "whole row",
                     tok2, rec.token_id);
        n_cfg++;
      }
    }
    /* A clone is a working sampler of the same configuration. */
    clone = llama_sampler_clone(qs);
    cr_assert_not_null(clone);
    cr_assert_str_eq(llama_sampler_name(clone), "qrs");
    llama_sampler_reset(clone);
    llama_sampler_free(clone);
    qrs_sampler_free(twin);
    llama_sampler_free(qs);
  }
  cr_assert_eq(n_cfg, 22 * 6);
  llama_sampler_free(topk);
  free(cand);
  free(masked);
  for (t = 0; t < 3; t++)
    free(copy[t]);
  engine_close(&e);
  qrs_client_free(c);
}

/* qrsd stops mid-generation: the sampler selects nothing and says why (no
   token is invented); qrsd back: generation resumes at the same step. */
Test(chain, daemon_stopped_then_restarted, .fini = stop, .timeout = 300)
{
  struct qrs_sampler_config *cfg;
  struct llama_sampler *chain, *qs;
  struct qrs_token_record rec;
  struct qrs_client *c;
  struct engine e;
  llama_token tok, before;
  size_t i;
  int r;

  daemon_run(&D, MOCK_YAML(9));
  c = connect_client(D.sock);
  engine_open(&e);
  cfg = config(NULL);
  cr_assert_eq(qrs_llama_sampler_new(e.vocab, cfg, c, &qs), 0);
  qrs_sampler_config_free(cfg);
  chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
  llama_sampler_chain_add(chain, llama_sampler_init_top_k(100));
  llama_sampler_chain_add(chain, qs);

  for (i = 0; i < 3; i++) {
    cr_assert_eq(qrs_llama_sample(chain, e.ctx, -1, &tok), 0);
    engine_next(&e, tok);
  }
  cr_assert_eq(daemon_stop(&D), 0);
  /* The draw prefetched for step 3 may have been answered before qrsd
     stopped: then step 3 has its draw and step 4 fails. */
  before = tok = -7;
  r = qrs_llama_sample(chain, e.ctx, -1, &tok);
  if (r == 0) {
    cr_assert_eq(qrs_llama_sampler_record(chain, &rec), 0);
    cr_assert_eq(rec.entropy_prefetch_hit, 1);
    engine_next(&e, tok);
    before = tok = -7;
    r = qrs_llama_sample(chain, e.ctx, -1, &tok);
  }
  cr_assert_lt(r, 0, "a token without a draw");
  cr_assert_eq(tok, before, "the token was written on error");
  cr_assert_eq(qrs_llama_sampler_status(chain), r);
  cr_assert_eq(qrs_llama_sampler_record(chain, &rec), 0);
  i = (size_t)rec.step + 1;     /* the step that failed */
  cr_log_info("qrsd stopped: %s", qrs_strerror(r));

  /* llama_sampler_apply() the way llama.cpp's own loop does: nothing is
     selected. */
  {
    llama_token_data cand[3] = { { 1, 0.5f, 0 }, { 2, 0.1f, 0 },
                                 { 3, 0.2f, 0 } };
    llama_token_data_array cur = { cand, 3, -1, false };

    llama_sampler_apply(qs, &cur);
    cr_assert_eq(cur.selected, -1);
    cr_assert_lt(qrs_llama_sampler_status(qs), 0);
  }

  daemon_start(&D, NULL);
  cr_assert_eq(qrs_llama_sample(chain, e.ctx, -1, &tok), 0);
  cr_assert_eq(qrs_llama_sampler_record(chain, &rec), 0);
  cr_assert_eq(rec.step, i, "resumed at step %llu, not %zu",
               (unsigned long long)rec.step, i);
  engine_next(&e, tok);
  cr_assert_eq(qrs_llama_sample(chain, e.ctx, -1, &tok), 0);
  cr_assert_eq(qrs_llama_sampler_record(chain, &rec), 0);
  cr_assert_eq(rec.step, i + 1);

  llama_sampler_free(chain);
  engine_close(&e);
  qrs_client_free(c);
}
