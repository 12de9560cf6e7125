/* qrs-llama-bench: per-token costs of sampling a GGUF model in llama.cpp
   through libqrs and qrsd, against llama.cpp's own default chain on the
   same rows in the same run.  usage() says what it measures. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <qrs/llama.h>
#include <qrs/qrs.h>

#include "cliparse.h"
#include "llamatool.h"
#include "sortcmp.h"

#define PROG "qrs-llama-bench"

#ifndef QRS_TEST_MODEL_PATH
#define QRS_TEST_MODEL_PATH ""
#endif

/* The two libqrs configurations: b (qrs-bench select's (b): fixed T 0.8,
   min-p 0.05, top-p 0.95, no top-k, the reference's stage order) and the
   same chain as llama.cpp's (stage_order llama: top-k 40, top-p 0.95,
   min-p 0.05 on the T = 1 distribution, then T 0.8). */
enum { CFG_B, CFG_LLAMA, CFG_COUNT };

enum { M_DECODE, M_WAIT_ON, M_WAIT_OFF,
       M_STEP_B, M_PROPER_B, M_REQ_B, M_SEL_B,
       M_STEP_L, M_PROPER_L, M_REQ_L, M_SEL_L,
       M_VIA_CHAIN, M_LLAMA_CHAIN, M_LLAMA_FULL, M_WAKE,
       M_CAND_B, M_CAND_L, M_CAND_LLAMA, M_ENTROPY, M_COUNT };

/* Rows of the table; counts and entropy are printed apart. */
#define M_TIMED M_CAND_B

static const char *const m_names[M_COUNT] = {
  "llama.cpp decode",
  "draw wait, prefetch on",
  "draw wait, prefetch off",
  "qrs b: sampling (step - wait)",
  "  selection (step proper)",
  "  next draw request",
  "qrs b: select_u, same rows",
  "qrs chain: sampling",
  "  selection (step proper)",
  "  next draw request",
  "qrs chain: select_u, same rows",
  "qrs b after llama.cpp top-k 40",
  "llama.cpp chain apply",
  "llama.cpp chain + cand. array",
  "floor: wake a sleeping reader",
  "qrs b: candidates kept",
  "qrs chain: candidates kept",
  "llama.cpp chain: candidates",  /* on the rows of qrs chain's */
  "row entropy at T = 1, nats",
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
  struct qrs_sampler *probe;    /* untimed: the rows' entropy (edt
                                   computes it) */
  int wake_fd;                  /* -1: no wake-up floor */
  pid_t wake_pid;
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
"Generates N tokens (default 64) four times with the model in llama.cpp,\n"
"sampling every token with libqrs from a qrsd draw:\n"
"  1. qrs_llama_sample_logits() with configuration b (qrs-bench select's\n"
"     (b): fixed temperature 0.8, min-p 0.05, top-p 0.95, no top-k, the\n"
"     reference's stage order), the next draw prefetched while llama.cpp\n"
"     decodes (libqrs's default)\n"
"  2. the same with llama.cpp's own chain in libqrs (top-k 40 -> top-p\n"
"     0.95 -> min-p 0.05 on the T = 1 distribution, then T 0.8:\n"
"     stage_order llama)\n"
"  3. configuration b without prefetch (the draw wait without it)\n"
"  4. a llama.cpp chain of top-k 40 and the qrs sampler (b)\n"
"In runs 1 and 2 every row also goes through qrs_sampler_select_u()\n"
"alone (no draw) and llama.cpp's default chain, top-k 40 -> top-p 0.95\n"
"-> min-p 0.05 -> temperature 0.8 -> dist (applied to the candidate\n"
"array, and with building that array from the row, as\n"
"llama_sampler_sample() does).  The three take turns going first after\n"
"the decode, and each is timed only on the rows where it goes first: the\n"
"state an engine samples in, on rows of the same runs.  The sampling\n"
"time (the call minus the draw wait) is split into the selection proper\n"
"(the record's timings) and the rest, which is sending the next token's\n"
"draw request to qrsd (the prefetch); its floor is a 64-byte send() to a\n"
"process asleep in read() on qrsd's CPUs (the kernel's cost of waking\n"
"it).  Also printed per row: the candidates each keeps and the row's\n"
"entropy.  Prints per-token mean, median and 90th percentile (ms), and\n"
"the target ratios: draw wait with prefetch / decode (<= 5%) and qrs\n"
"sampling / llama.cpp chain (<= 1).\n"
"\n"
"The test model's one-token decode (about 2.5 ms) can be shorter than\n"
"qrsd's wake-up on a loaded machine; `meson compile -C build\n"
"qrs-bench-model` writes a bigger model of the same kind (embedding 256,\n"
"4 layers; ~20 ms decodes): -m build/tests/llama/qrs-bench-qwen2.gguf.\n"
"\n", f);
  fputs(
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
"  build/tools/llama/" PROG " --socket /tmp/qrsd.sock\n", f);
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

/* A sorted copy of series m (the caller frees it), or NULL when the series
   is empty or there is no memory. */
static double *
sorted_copy(const struct bench *b, int m)
{
  double *v;
  size_t n;

  n = b->nv[m];
  if (n == 0)
    return NULL;
  v = malloc(n * sizeof(*v));
  if (!v)
    return NULL;
  memcpy(v, b->v[m], n * sizeof(*v));
  qsort(v, n, sizeof(*v), sort_cmp_double);
  return v;
}

static double
median(const struct bench *b, int m)
{
  double *v, r;

  v = sorted_copy(b, m);
  if (!v)
    return NAN;
  r = v[b->nv[m] / 2];
  free(v);
  return r;
}

static struct qrs_sampler_config *
qrs_config(const struct bench *b, int kind, int prefetch)
{
  struct qrs_sampler_config *cfg;
  char buf[32];

  if (qrs_sampler_config_new(&cfg) < 0)
    return NULL;
  qrs_sampler_config_set(cfg, "temperature_strategy", "fixed");
  qrs_sampler_config_set_double(cfg, "fixed_temperature", 0.8);
  qrs_sampler_config_set_double(cfg, "min_p_base", 0.05);
  qrs_sampler_config_set_double(cfg, "top_p", 0.95);
  if (kind == CFG_LLAMA) {
    qrs_sampler_config_set_int(cfg, "top_k", 40);
    qrs_sampler_config_set(cfg, "stage_order", "llama");
  } else {
    qrs_sampler_config_set_int(cfg, "top_k", 0);
  }
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

/* The floor of "hand a request to another process": a 64-byte send() on
   a Unix stream socket to a process that sleeps in read() on the CPUs
   qrsd may run on (from qrsd's peer credentials), timed at the point where
   the sampler sends the next draw request.  It is what the kernel charges
   the sender for waking a sleeping daemon on another CPU. */
static void
wake_floor_start(struct bench *b)
{
  struct sockaddr_un sa;
  struct ucred cred;
  socklen_t len;
  cpu_set_t set;
  char buf[256];
  int sv[2], fd, have_set;
  pid_t pid;

  b->wake_fd = -1;
  have_set = 0;
  fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s",
           qrs_client_socket_path(b->client));
  len = sizeof(cred);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
      getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 &&
      sched_getaffinity(cred.pid, sizeof(set), &set) == 0)
    have_set = 1;
  if (fd >= 0)
    close(fd);
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
    return;
  pid = fork();
  if (pid < 0) {
    close(sv[0]);
    close(sv[1]);
    return;
  }
  if (pid == 0) {
    close(sv[0]);
    if (have_set)
      (void)sched_setaffinity(0, sizeof(set), &set);
    while (read(sv[1], buf, sizeof(buf)) > 0)
      ;
    _exit(0);
  }
  close(sv[1]);
  b->wake_fd = sv[0];
  b->wake_pid = pid;
  if (!have_set)
    fprintf(stderr, PROG ": qrsd's CPUs unknown: the wake-up floor's "
            "reader runs on any CPU\n");
}

static void
wake_floor_stop(struct bench *b)
{
  if (b->wake_fd < 0)
    return;
  close(b->wake_fd);
  waitpid(b->wake_pid, NULL, 0);
  b->wake_fd = -1;
}

static void
wake_floor_send(struct bench *b)
{
  static const uint8_t msg[64];
  double t0;

  if (b->wake_fd < 0)
    return;
  t0 = lt_now_ms();
  if (send(b->wake_fd, msg, sizeof(msg), MSG_NOSIGNAL) == (ssize_t)sizeof(msg))
    add(b, M_WAKE, lt_now_ms() - t0);
}

/* The candidate array llama_sampler_sample() builds from a row. */
static void
fill_candidates(const struct bench *b, const float *row,
                llama_token_data *cand, llama_token_data_array *cur)
{
  size_t k;

  for (k = 0; k < b->n_vocab; k++) {
    cand[k].id = (llama_token)k;
    cand[k].logit = row[k];
    cand[k].p = 0.0f;
  }
  cur->data = cand;
  cur->size = b->n_vocab;
  cur->selected = -1;
  cur->sorted = false;
}

/* Who goes first after a decode, by token: each contender is timed only
   on the tokens where it goes first, so that every figure is taken in the
   state an engine samples in (the row just written by llama.cpp, the rest
   of the cache holding the model's weights), on rows of the same run. */
enum { FIRST_CHAIN, FIRST_STEP, FIRST_SELECT, FIRST_COUNT };

/* llama.cpp's default chain on row (timed when rec); its candidates are
   counted on the rows of the run with the same chain in libqrs. */
static void
llama_chain_row(struct bench *b, int kind, const float *row,
                struct llama_sampler *chain, llama_token_data *cand, int rec)
{
  llama_token_data_array cur;
  double t0, t1, t2;

  t0 = lt_now_ms();
  fill_candidates(b, row, cand, &cur);
  t1 = lt_now_ms();
  llama_sampler_apply(chain, &cur);
  t2 = lt_now_ms();
  if (rec) {
    add(b, M_LLAMA_CHAIN, t2 - t1);
    add(b, M_LLAMA_FULL, t2 - t0);
  }
  if (kind == CFG_LLAMA)
    add(b, M_CAND_LLAMA, (double)cur.size);
}

/* The row's Shannon entropy at T = 1 (nats), as libqrs computes it. */
static void
entropy_row(struct bench *b, const float *row)
{
  struct qrs_token_record rec;
  uint32_t tok;

  if (b->probe && qrs_sampler_select_u(b->probe, row, QRS_DTYPE_F32,
                                       b->n_vocab, 0.5, &tok, &rec) == 0)
    add(b, M_ENTROPY, rec.shannon_entropy);
}

/* qrs_sampler_select_u() of the run's configuration on row (timed when
   rec), and the candidates it keeps. */
static void
select_row(struct bench *b, int kind, const float *row,
           struct qrs_sampler *twin, int rec)
{
  struct qrs_token_record trec;
  uint32_t tw;
  double t0;

  t0 = lt_now_ms();
  qrs_sampler_select_u(twin, row, QRS_DTYPE_F32, b->n_vocab, 0.5, &tw,
                       &trec);
  if (rec)
    add(b, kind == CFG_LLAMA ? M_SEL_L : M_SEL_B, lt_now_ms() - t0);
  add(b, kind == CFG_LLAMA ? M_CAND_L : M_CAND_B,
      (double)trec.num_candidates);
}

/* The step's time without the draw wait, split into the selection proper
   (the record's own timing of the step) and the rest (sending the next
   token's draw request: the prefetch). */
static void
add_step(struct bench *b, int kind, const struct qrs_token_record *rec,
         double call_ms)
{
  int m = kind == CFG_LLAMA ? M_STEP_L : M_STEP_B;

  add(b, m, call_ms - rec->entropy_fetch_ms);
  add(b, m + 1, rec->total_sampling_ms - rec->entropy_fetch_ms);
  add(b, m + 2, call_ms - rec->total_sampling_ms);
}

/* One generation of b->n tokens with configuration kind, sampled with
   qrs_llama_sample_logits(), or with via_chain by a chain of llama.cpp's
   top-k 40 and the qrs sampler.  With compare, select_u and llama.cpp's
   chain run on every row too (see FIRST_*).  Returns 0 or -1 (message
   printed). */
static int
run(struct bench *b, int kind, int prefetch, int compare, int via_chain)
{
  struct llama_context_params cp;
  struct qrs_sampler_config *cfg, *tcfg;
  struct llama_sampler *qs = NULL, *chain = NULL, *qchain = NULL;
  struct llama_context *ctx = NULL;
  llama_token_data_array cur;
  struct qrs_sampler *twin = NULL;
  struct qrs_token_record rec;
  llama_token_data *cand = NULL;
  llama_token prompt[512], tok;
  const float *row;
  double t0, t1, dec_ms;
  int32_t n_prompt;
  size_t i;
  int first, r, rc;

  rc = -1;
  cfg = qrs_config(b, kind, prefetch);
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
  if (r < 0) {
    fprintf(stderr, PROG ": sampler: %s\n", qrs_strerror(r));
    goto out;
  }
  if (via_chain) {
    /* llama.cpp's top-k 40, then the qrs sampler on its 40 candidates
       (the chain owns qs). */
    qchain = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(qchain, llama_sampler_init_top_k(40));
    llama_sampler_chain_add(qchain, qs);
    qs = NULL;
  }
  if (compare || via_chain) {
    cand = malloc(b->n_vocab * sizeof(*cand));
    if (!cand)
      goto out;
  }
  if (compare) {
    tcfg = qrs_config(b, kind, 0);
    r = tcfg ? qrs_sampler_new(tcfg, b->n_vocab, &twin) : -EINVAL;
    qrs_sampler_config_free(tcfg);
    if (r < 0) {
      fprintf(stderr, PROG ": sampler: %s\n", qrs_strerror(r));
      goto out;
    }
    chain = llama_default_chain();
  }
  qrs_sampler_prefetch(qrs_llama_sampler_get(qs ? qs : qchain), b->client);
  t0 = lt_now_ms();
  r = llama_decode(ctx, llama_batch_get_one(prompt, n_prompt));
  dec_ms = lt_now_ms() - t0;
  for (i = 0; r == 0 && i < b->n; i++) {
    if (i > 0)
      add(b, M_DECODE, dec_ms);   /* one-token decodes only */
    row = llama_get_logits_ith(ctx, -1);
    first = compare ? (int)(i % FIRST_COUNT) : FIRST_STEP;
    if (compare) {
      /* As the step's request: both processes asleep since the decode. */
      wake_floor_send(b);
      if (first == FIRST_CHAIN)
        llama_chain_row(b, kind, row, chain, cand, 1);
      else if (first == FIRST_SELECT)
        select_row(b, kind, row, twin, 1);
    }
    if (via_chain) {
      fill_candidates(b, row, cand, &cur);
      t0 = lt_now_ms();
      llama_sampler_apply(qchain, &cur);
      t1 = lt_now_ms();
      r = qrs_llama_sampler_status(qchain);
      if (r == 0 && cur.selected >= 0) {
        tok = cur.data[cur.selected].id;
        qrs_llama_sampler_record(qchain, &rec);
        add(b, M_VIA_CHAIN, t1 - t0 - rec.entropy_fetch_ms);
      } else if (r == 0) {
        r = QRS_E_NO_CANDIDATES;
      }
    } else {
      t0 = lt_now_ms();
      r = qrs_llama_sample_logits(qs, ctx, -1, &tok, &rec);
      t1 = lt_now_ms();
    }
    if (r != 0) {
      fprintf(stderr, PROG ": sampling: %s%s%s\n", qrs_strerror(r),
              qrs_client_errmsg(b->client)[0] ? ": " : "",
              qrs_client_errmsg(b->client));
      goto out;
    }
    if (!prefetch)
      add(b, M_WAIT_OFF, rec.entropy_fetch_ms);
    else if (first == FIRST_STEP && !via_chain) {
      add(b, M_WAIT_ON, rec.entropy_fetch_ms);
      add_step(b, kind, &rec, t1 - t0);
    }
    if (compare) {
      if (first != FIRST_CHAIN)
        llama_chain_row(b, kind, row, chain, cand, 0);
      if (first != FIRST_SELECT)
        select_row(b, kind, row, twin, 0);
      entropy_row(b, row);
    }
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
  llama_sampler_free(qchain);
  llama_sampler_free(chain);
  qrs_sampler_free(twin);
  qrs_sampler_config_free(cfg);
  free(cand);
  llama_free(ctx);
  return rc;
}

static double
ratio_line(struct bench *b, const char *what, int num, int den)
{
  double r = median(b, num) / median(b, den);

  printf("  %-42s %8.3f %8.3f\n", what, mean(b, num) / mean(b, den), r);
  return r;
}

static void
report(struct bench *b)
{
  double *v, wait_pct, rb, rl;
  size_t n;
  int m;

  printf("%-31s %9s %9s %9s\n", "per token, ms", "mean", "median", "p90");
  for (m = 0; m < M_COUNT; m++) {
    n = b->nv[m];
    if (n == 0)
      continue;
    if (m == M_TIMED)
      printf("\n%-31s %9s %9s %9s %9s\n", "per row", "mean", "median",
             "min", "max");
    v = sorted_copy(b, m);
    if (!v)
      return;
    if (m < M_TIMED)
      printf("%-31s %9.4f %9.4f %9.4f\n", m_names[m], mean(b, m), v[n / 2],
             v[(n * 9) / 10]);
    else
      printf("%-31s %9.2f %9.2f %9.2f %9.2f\n", m_names[m], mean(b, m),
             v[n / 2], v[0], v[n - 1]);
    free(v);
  }
  printf("\nratios (of means / of medians):\n");
  wait_pct = 100.0 * mean(b, M_WAIT_ON) / mean(b, M_DECODE);
  printf("  %-42s %7.2f%% %7.2f%%  target <= 5%% (means): %s\n",
         "draw wait with prefetch / decode", wait_pct,
         100.0 * median(b, M_WAIT_ON) / median(b, M_DECODE),
         wait_pct <= 5.0 ? "met" : "MISSED");
  rb = ratio_line(b, "qrs b: sampling / llama.cpp chain apply", M_STEP_B,
                  M_LLAMA_CHAIN);
  ratio_line(b, "qrs b: selection / llama.cpp chain apply", M_PROPER_B,
             M_LLAMA_CHAIN);
  ratio_line(b, "qrs b: select_u / llama.cpp chain apply", M_SEL_B,
             M_LLAMA_CHAIN);
  rl = ratio_line(b, "qrs chain: sampling / llama.cpp chain apply",
                  M_STEP_L, M_LLAMA_CHAIN);
  ratio_line(b, "qrs chain: selection / llama.cpp chain apply", M_PROPER_L,
             M_LLAMA_CHAIN);
  ratio_line(b, "qrs chain: select_u / llama.cpp chain apply", M_SEL_L,
             M_LLAMA_CHAIN);
  ratio_line(b, "qrs b: next draw request / wake-up floor", M_REQ_B,
             M_WAKE);
  ratio_line(b, "qrs b: sampling / chain + cand. array", M_STEP_B,
             M_LLAMA_FULL);
  ratio_line(b, "qrs chain: sampling / chain + cand. array", M_STEP_L,
             M_LLAMA_FULL);
  printf("  target qrs sampling <= llama.cpp chain apply (medians): "
         "b %s, same chain %s\n", rb <= 1.0 ? "met" : "MISSED",
         rl <= 1.0 ? "met" : "MISSED");
}

static void
bad_option(const struct cli *cli, int c, char **argv)
{
  (void)cli;
  (void)c;
  (void)argv;
  fputs("Run '" PROG " --help' for more.\n", stderr);
}

int
main(int argc, char **argv)
{
  struct bench b;
  uint64_t cpu;
  unsigned given;
  const struct cli_opt opts[] = {
    { .name = "model", .key = 'm', .type = CLI_OPT_STRING,
      .field = &b.model_path },
    { .name = "prompt", .key = 'p', .type = CLI_OPT_STRING,
      .field = &b.prompt },
    { .key = 'n', .type = CLI_OPT_U64, .field = &b.n, .min = 2,
      .max = 100000 },
    { .name = "threads", .key = 't', .type = CLI_OPT_U64,
      .field = &b.threads, .min = 1, .max = 512, .label = "-t" },
    { .name = "socket", .type = CLI_OPT_STRING, .field = &b.socket },
    { .name = "source", .type = CLI_OPT_STRING, .field = &b.source },
    { .name = "samples", .type = CLI_OPT_U64, .field = &b.sample_count,
      .min = 1, .max = UINT32_MAX },
    { .name = "cpu", .key = 'c', .type = CLI_OPT_U64, .field = &cpu,
      .max = CPU_SETSIZE - 1, .seen = &given, .bit = 1 },
    { .name = "help", .key = 'h', .type = CLI_OPT_HELP },
    { 0 },
  };
  const struct cli cli = {
    .prog = PROG, .opts = opts, .usage = usage, .bad = bad_option,
  };
  cpu_set_t set;
  int m, r, rc;

  memset(&b, 0, sizeof(b));
  b.model_path = QRS_TEST_MODEL_PATH;
  b.prompt = "Once upon a time";
  b.n = 64;
  b.threads = 2;
  b.cpu = -1;
  cpu = 0;
  given = 0;
  r = cli_opts_parse(&cli, argc, argv);
  if (r >= 0)
    return r;
  if (given)
    b.cpu = (int)cpu;
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
    b.v[m] = calloc(4 * b.n, sizeof(double));   /* decode: every run */
    if (!b.v[m])
      goto out;
  }
  printf("model %s: vocabulary %zu, %llu tokens per run, %llu threads%s\n",
         b.model_path, b.n_vocab, (unsigned long long)b.n,
         (unsigned long long)b.threads, b.cpu >= 0 ? ", pinned" : "");
  printf("qrsd %s, source %s\n\n", qrs_client_socket_path(b.client),
         b.source ? b.source
                  : qrs_client_server_info(b.client)->default_source);
  fflush(stdout);
  {
    struct qrs_sampler_config *pc;

    if (qrs_sampler_config_new(&pc) == 0) {
      qrs_sampler_config_set(pc, "temperature_strategy", "edt");
      if (qrs_sampler_new(pc, b.n_vocab, &b.probe) < 0)
        b.probe = NULL;
      qrs_sampler_config_free(pc);
    }
  }
  wake_floor_start(&b);
  r = run(&b, CFG_B, 1, 1, 0) < 0 || run(&b, CFG_LLAMA, 1, 1, 0) < 0 ||
      run(&b, CFG_B, 0, 0, 0) < 0 || run(&b, CFG_B, 1, 0, 1) < 0;
  wake_floor_stop(&b);
  qrs_sampler_free(b.probe);
  if (r)
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
