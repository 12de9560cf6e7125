/* qrs-llama-bench: per-token costs of sampling a GGUF model in llama.cpp
   through libqrs and qrsd, against llama.cpp's own default chain on the
   same rows in the same run.  usage() says what it measures. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <qrs/llama.h>
#include <qrs/qrs.h>

#include "cliparse.h"
#include "llamatool.h"

#define PROG "qrs-llama-bench"

#ifndef QRS_TEST_MODEL_PATH
#define QRS_TEST_MODEL_PATH ""
#endif

enum { M_DECODE, M_WAIT_ON, M_WAIT_OFF, M_QRS_STEP, M_QRS_SELECT,
       M_LLAMA_CHAIN, M_LLAMA_FULL, M_COUNT };

static const char *const m_names[M_COUNT] = {
  "llama.cpp decode",
  "draw wait, prefetch on",
  "draw wait, prefetch off",
  "qrs sampling (step - wait)",
  "qrs select_u, same rows",
  "llama.cpp chain apply",
  "llama.cpp chain + cand. array",
};

struct bench {
  const char *model_path;
  const char *prompt;
  const char *socket;
  const char *source;
  uint64_t n, threads, sample_count;
  int cpu;
  struct llama_model *model;
  const struct llama_vocab *vocab;
  size_t n_vocab;
  struct qrs_client *client;
  double *v[M_COUNT];
  size_t nv[M_COUNT];
};

static void
usage(FILE *f)
{
  fputs(
"Usage: " PROG " [-m MODEL.gguf] [-p PROMPT] [-n N] [-t THREADS]\n"
"                       [--socket PATH] [--source NAME] [--samples N]\n"
"                       [-c CPU]\n"
"\n"
"Generates N tokens (default 64) twice with the model in llama.cpp,\n"
"sampling every token with libqrs from a qrsd draw: once with the next\n"
"draw prefetched while llama.cpp decodes (libqrs's default), once\n"
"without.  libqrs runs the b-like configuration: fixed temperature 0.8,\n"
"min-p 0.05, top-p 0.95, no top-k.  On every row of the first run it\n"
"also times, on the same logits:\n"
"  - libqrs's qrs_sampler_select_u() alone (same configuration, no draw)\n"
"  - llama.cpp's default chain, top-k 40 -> top-p 0.95 -> min-p 0.05 ->\n"
"    temperature 0.8 -> dist, applied to the candidate array, and with\n"
"    building that array from the row (as llama_sampler_sample() does)\n"
"Prints per-token mean, median and 90th percentile of each (ms), and\n"
"the two target ratios: draw wait with prefetch / decode (<= 5%) and\n"
"qrs sampling / llama.cpp chain (<= 1).\n"
"\n"
"Options:\n"
"  -m, --model FILE   the GGUF model (default: the test model of the\n"
"                     build tree, " QRS_TEST_MODEL_PATH ")\n"
"  -p, --prompt TEXT  the prompt (default 'Once upon a time')\n"
"  -n N               tokens per run (default 64)\n"
"  -t, --threads N    llama.cpp threads (default 2)\n"
"      --socket PATH  qrsd's socket (default: $QRS_SOCKET, else\n"
"                     " QRS_DEFAULT_SOCKET ")\n"
"      --source NAME  the qrsd source (default: qrsd's default)\n"
"      --samples N    bytes per draw (sample_count; default: qrsd's)\n"
"  -c, --cpu CPU      pin the process to this CPU (llama.cpp's threads\n"
"                     then share it: use -t 1)\n"
"  -h, --help         show this help\n"
"\n"
"A qrsd must be running, e.g. ./setup.sh run, or\n"
"  build/daemon/qrsd --socket /tmp/qrsd.sock &\n"
"  build/tools/" PROG " --socket /tmp/qrsd.sock\n", f);
}

static void
add(struct bench *b, int m, double ms)
{
  b->v[m][b->nv[m]++] = ms;
}

static double
mean(const struct bench *b, int m)
{
  double s;
  size_t i;

  s = 0;
  for (i = 0; i < b->nv[m]; i++)
    s += b->v[m][i];
  return b->nv[m] ? s / (double)b->nv[m] : NAN;
}

static double
median(const struct bench *b, int m)
{
  double *v, r;
  size_t n;

  n = b->nv[m];
  v = malloc((n ? n : 1) * sizeof(*v));
  if (!v || n == 0) {
    free(v);
    return NAN;
  }
  memcpy(v, b->v[m], n * sizeof(*v));
  qsort(v, n, sizeof(*v), lt_cmp_double);
  r = v[n / 2];
  free(v);
  return r;
}

static struct qrs_sampler_config *
b_like_config(const struct bench *b, int prefetch)
{
  struct qrs_sampler_config *cfg;
  char buf[32];

  if (qrs_sampler_config_new(&cfg) < 0)
    return NULL;
  qrs_sampler_config_set(cfg, "temperature_strategy", "fixed");
  qrs_sampler_config_set_double(cfg, "fixed_temperature", 0.8);
  qrs_sampler_config_set_double(cfg, "min_p_base", 0.05);
  qrs_sampler_config_set_double(cfg, "top_p", 0.95);
  qrs_sampler_config_set_int(cfg, "top_k", 0);
  qrs_sampler_config_set(cfg, "log_level", "none");
  qrs_sampler_config_set_int(cfg, "entropy_prefetch", prefetch);
  if (b->source)
    qrs_sampler_config_set(cfg, "entropy_source_type", b->source);
  if (b->sample_count) {
    snprintf(buf, sizeof(buf), "%llu", (unsigned long long)b->sample_count);
    qrs_sampler_config_set(cfg, "sample_count", buf);
  }
  if (qrs_sampler_config_validate(cfg) < 0) {
    fprintf(stderr, PROG ": %s\n", qrs_sampler_config_error(cfg));
    qrs_sampler_config_free(cfg);
    return NULL;
  }
  return cfg;
}

static struct llama_sampler *
llama_default_chain(void)
{
  struct llama_sampler *chain;

  chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
  llama_sampler_chain_add(chain, llama_sampler_init_top_k(40));
  llama_sampler_chain_add(chain, llama_sampler_init_top_p(0.95f, 1));
  llama_sampler_chain_add(chain, llama_sampler_init_min_p(0.05f, 1));
  llama_sampler_chain_add(chain, llama_sampler_init_temp(0.8f));
  llama_sampler_chain_add(chain, llama_sampler_init_dist(1234));
  return chain;
}

/* One generation of b->n tokens; with compare, also time select_u and
   llama.cpp's chain on every row.  Returns 0 or -1 (message printed). */
static int
run(struct bench *b, int prefetch, int compare)
{
  struct llama_context_params cp;
  struct qrs_sampler_config *cfg;
  struct llama_sampler *qs = NULL, *chain = NULL;
  struct llama_context *ctx = NULL;
  struct qrs_sampler *twin = NULL;
  struct qrs_token_record rec;
  llama_token_data_array cur;
  llama_token_data *cand = NULL;
  llama_token prompt[512], tok;
  const float *row;
  double t0, t1, dec_ms;
  uint32_t tw;
  int32_t n_prompt;
  size_t i, k;
  int r, rc;

  rc = -1;
  cfg = b_like_config(b, prefetch);
  if (!cfg)
    return -1;
  n_prompt = llama_tokenize(b->vocab, b->prompt, (int32_t)strlen(b->prompt),
                            prompt, 512, true, true);
  if (n_prompt <= 0) {
    fprintf(stderr, PROG ": the prompt gives no tokens, or over 512\n");
    goto out;
  }
  cp = llama_context_default_params();
  cp.n_ctx = (uint32_t)n_prompt + (uint32_t)b->n + 1;
  cp.n_batch = (uint32_t)n_prompt;
  cp.n_threads = (int32_t)b->threads;
  cp.n_threads_batch = (int32_t)b->threads;
  cp.no_perf = true;
  ctx = llama_init_from_model(b->model, cp);
  if (!ctx) {
    fprintf(stderr, PROG ": cannot create a llama.cpp context\n");
    goto out;
  }
  r = qrs_llama_sampler_new(b->vocab, cfg, b->client, &qs);
  if (r < 0 || (compare && qrs_sampler_new(cfg, b->n_vocab, &twin) < 0)) {
    fprintf(stderr, PROG ": sampler: %s\n", qrs_strerror(r));
    goto out;
  }
  if (compare) {
    chain = llama_default_chain();
    cand = malloc(b->n_vocab * sizeof(*cand));
    if (!cand)
      goto out;
  }
  qrs_sampler_prefetch(qrs_llama_sampler_get(qs), b->client);
  t0 = lt_now_ms();
  r = llama_decode(ctx, llama_batch_get_one(prompt, n_prompt));
  dec_ms = lt_now_ms() - t0;
  for (i = 0; r == 0 && i < b->n; i++) {
    if (i > 0)
      add(b, M_DECODE, dec_ms);   /* one-token decodes only */
    row = llama_get_logits_ith(ctx, -1);
    if (compare) {
      t0 = lt_now_ms();
      for (k = 0; k < b->n_vocab; k++) {
        cand[k].id = (llama_token)k;
        cand[k].logit = row[k];
        cand[k].p = 0.0f;
      }
      cur.data = cand;
      cur.size = b->n_vocab;
      cur.selected = -1;
      cur.sorted = false;
      t1 = lt_now_ms();
      llama_sampler_apply(chain, &cur);
      add(b, M_LLAMA_CHAIN, lt_now_ms() - t1);
      add(b, M_LLAMA_FULL, lt_now_ms() - t0);
      t0 = lt_now_ms();
      qrs_sampler_select_u(twin, row, QRS_DTYPE_F32, b->n_vocab, 0.5, &tw,
                           NULL);
      add(b, M_QRS_SELECT, lt_now_ms() - t0);
    }
    t0 = lt_now_ms();
    r = qrs_llama_sample_logits(qs, ctx, -1, &tok, &rec);
    t1 = lt_now_ms();
    if (r != 0) {
      fprintf(stderr, PROG ": sampling: %s%s%s\n", qrs_strerror(r),
              qrs_client_errmsg(b->client)[0] ? ": " : "",
              qrs_client_errmsg(b->client));
      goto out;
    }
    add(b, prefetch ? M_WAIT_ON : M_WAIT_OFF, rec.entropy_fetch_ms);
    if (prefetch)
      add(b, M_QRS_STEP, t1 - t0 - rec.entropy_fetch_ms);
    if (llama_vocab_is_eog(b->vocab, tok))
      tok = prompt[0];            /* keep going: timings, not text */
    t0 = lt_now_ms();
    r = llama_decode(ctx, llama_batch_get_one(&tok, 1));
    dec_ms = lt_now_ms() - t0;
  }
  if (r != 0) {
    fprintf(stderr, PROG ": llama_decode failed (%d)\n", r);
    goto out;
  }
  rc = 0;

out:
  llama_sampler_free(qs);
  llama_sampler_free(chain);
  qrs_sampler_free(twin);
  qrs_sampler_config_free(cfg);
  free(cand);
  llama_free(ctx);
  return rc;
}

static void
report(struct bench *b)
{
  double *v, wait_pct, ratio;
  size_t n;
  int m;

  printf("%-31s %9s %9s %9s\n", "per token, ms", "mean", "median", "p90");
  for (m = 0; m < M_COUNT; m++) {
    n = b->nv[m];
    if (n == 0)
      continue;
    v = malloc(n * sizeof(*v));
    if (!v)
      return;
    memcpy(v, b->v[m], n * sizeof(*v));
    qsort(v, n, sizeof(*v), lt_cmp_double);
    printf("%-31s %9.4f %9.4f %9.4f\n", m_names[m], mean(b, m), v[n / 2],
           v[(n * 9) / 10]);
    free(v);
  }
  printf("\nratios (of means / of medians):\n");
  wait_pct = 100.0 * mean(b, M_WAIT_ON) / mean(b, M_DECODE);
  printf("  draw wait with prefetch / decode       %7.2f%% %7.2f%%  "
         "target <= 5%%: %s\n", wait_pct,
         100.0 * median(b, M_WAIT_ON) / median(b, M_DECODE),
         wait_pct <= 5.0 ? "met" : "MISSED");
  ratio = median(b, M_QRS_STEP) / median(b, M_LLAMA_CHAIN);
  printf("  qrs sampling / llama.cpp chain apply   %8.3f %8.3f  "
         "target <= 1 (medians): %s\n",
         mean(b, M_QRS_STEP) / mean(b, M_LLAMA_CHAIN), ratio,
         ratio <= 1.0 ? "met" : "MISSED");
  printf("  qrs select_u / llama.cpp chain apply   %8.3f %8.3f\n",
         mean(b, M_QRS_SELECT) / mean(b, M_LLAMA_CHAIN),
         median(b, M_QRS_SELECT) / median(b, M_LLAMA_CHAIN));
  printf("  qrs sampling / chain + cand. array     %8.3f %8.3f\n",
         mean(b, M_QRS_STEP) / mean(b, M_LLAMA_FULL),
         median(b, M_QRS_STEP) / median(b, M_LLAMA_FULL));
}

int
main(int argc, char **argv)
{
  static const struct option longopts[] = {
    { "model", required_argument, NULL, 'm' },
    { "prompt", required_argument, NULL, 'p' },
    { "threads", required_argument, NULL, 't' },
    { "socket", required_argument, NULL, 'S' },
    { "source", required_argument, NULL, 's' },
    { "samples", required_argument, NULL, 'N' },
    { "cpu", required_argument, NULL, 'c' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  struct bench b;
  uint64_t cpu;
  cpu_set_t set;
  int c, m, r, rc;

  memset(&b, 0, sizeof(b));
  b.model_path = QRS_TEST_MODEL_PATH;
  b.prompt = "Once upon a time";
  b.n = 64;
  b.threads = 2;
  b.cpu = -1;
  while ((c = getopt_long(argc, argv, "m:p:n:t:c:h", longopts, NULL)) != -1) {
    switch (c) {
    case 'm':
      b.model_path = optarg;
      break;
    case 'p':
      b.prompt = optarg;
      break;
    case 'n':
      if (cli_parse_u64(PROG, "-n", optarg, 2, 100000, 0, &b.n) < 0)
        return 2;
      break;
    case 't':
      if (cli_parse_u64(PROG, "-t", optarg, 1, 512, 0, &b.threads) < 0)
        return 2;
      break;
    case 'S':
      b.socket = optarg;
      break;
    case 's':
      b.source = optarg;
      break;
    case 'N':
      if (cli_parse_u64(PROG, "--samples", optarg, 1, UINT32_MAX, 0,
                        &b.sample_count) < 0)
        return 2;
      break;
    case 'c':
      if (cli_parse_u64(PROG, "--cpu", optarg, 0, CPU_SETSIZE - 1, 0,
                        &cpu) < 0)
        return 2;
      b.cpu = (int)cpu;
      break;
    case 'h':
      usage(stdout);
      return 0;
    default:
      fputs("Run '" PROG " --help' for more.\n", stderr);
      return 2;
    }
  }
  if (!b.model_path[0]) {
    fprintf(stderr, PROG ": -m MODEL is required\n");
    return 2;
  }
  if (b.cpu >= 0) {
    CPU_ZERO(&set);
    CPU_SET(b.cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) < 0) {
      fprintf(stderr, PROG ": --cpu %d: %s\n", b.cpu, strerror(errno));
      return 2;
    }
  }
  r = qrs_client_new(b.socket, NULL, &b.client);
  if (r < 0) {
    fprintf(stderr, PROG ": cannot reach qrsd: %s (start one, see "
            "--help)\n", qrs_strerror(r));
    return 2;
  }
  rc = 2;
  b.model = lt_load_model(PROG, b.model_path, 0);
  if (!b.model)
    goto out;
  b.vocab = llama_model_get_vocab(b.model);
  b.n_vocab = (size_t)llama_vocab_n_tokens(b.vocab);
  for (m = 0; m < M_COUNT; m++) {
    b.v[m] = calloc(2 * b.n, sizeof(double));   /* decode: both runs */
    if (!b.v[m])
      goto out;
  }
  printf("model %s: vocabulary %zu, %llu tokens per run, %llu threads%s\n",
         b.model_path, b.n_vocab, (unsigned long long)b.n,
         (unsigned long long)b.threads, b.cpu >= 0 ? ", pinned" : "");
  printf("qrsd %s, source %s\n\n", qrs_client_socket_path(b.client),
         b.source ? b.source : qrs_client_server_info(b.client)->default_source);
  fflush(stdout);
  if (run(&b, 1, 1) < 0 || run(&b, 0, 0) < 0)
    goto out;
  report(&b);
  rc = 0;

out:
  for (m = 0; m < M_COUNT; m++)
    free(b.v[m]);
  llama_model_free(b.model);
  llama_backend_free();
  qrs_client_free(b.client);
  return rc;
}
