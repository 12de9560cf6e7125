/* qrs-bench select: microseconds per token of libqrs's selection on rows
   of a real vocabulary size, next to two floors timed in the same run.

   The floors: one vectorised float pass computing the max and
   sum(exp(x - max)) (degree-6 polynomial exp, the machine's float width:
   the least any softmax-based sampler must do), and one read-only pass
   (the max).  Each configuration runs the whole per-token step
   (qrs_sampler_select_u(): temperature strategy, selection, record) with
   log level none over a set of rows and u values; every repetition times
   both floors and then the case on the same rows, and the medians of the
   repetitions are reported.  --batch B runs qrs_sample_batch() on B rows
   with --threads N next to 1 thread and B single calls. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qrs/sampler.h>

#include <qrs/batch.h>

#include "bench.h"
#include "sampling/kernels/rowkern.h"
#include "sampling/select.h"

#define NROWS 4
#define NU 64

struct sel_opts {
  size_t vocab;
  int tokens;                     /* per repetition */
  int reps;
  int cpu;                        /* -1: stay where we are */
  double zipf;
  const char *only;               /* run only these cases */
  const char *shapes;             /* run only these shapes (initials) */
  int dtypes;                     /* 1 f32, 2 bf16, 3 both */
  int batch;                      /* 0: single rows */
  int threads;
};

struct bcase {
  const char *name;
  const char *desc;
  double target_lm;               /* x float floor, LM rows */
  double target_flat;             /* x float floor, the flat row */
  const char *const *settings;    /* field=value pairs, NULL-terminated */
  const char *preset;
};

static const char *const set_a[] = { "fixed_temperature=1.0", NULL };
static const char *const set_b[] = { "fixed_temperature=0.8",
                                     "min_p_base=0.05", "top_p=0.95", NULL };
static const char *const set_c[] = { "top_k=50", "top_p=0.9", NULL };
static const char *const set_d[] = { "temperature_strategy=edt",
                                     "top_p=0.95", NULL };
static const char *const set_e[] = { NULL };
static const char *const set_f[] = { "top_p=0.95", NULL };
static const char *const set_g[] = { "temperature_strategy=entropy_throttle",
                                     NULL };

static const struct bcase cases[] = {
  { "a", "fixed T=1, no truncation", 1.5, 4.0, set_a, NULL },
  { "b", "T 0.8 + min-p 0.05 + top-p 0.95", 0.6, 4.0, set_b, NULL },
  { "c", "top-k 50 + top-p 0.9", 0.6, 4.0, set_c, NULL },
  { "d", "edt + top-p 0.95", 2.0, 4.0, set_d, NULL },
  { "e", "creative_sampling (hvh_drift)", 1.5, 4.0, set_e,
    "creative_sampling" },
  { "f", "top-p 0.95", 2.0, 4.0, set_f, NULL },
  { "g", "entropy_throttle (exact, 2 bits)", 1.5, 4.0, set_g, NULL },
};

#define NCASES (sizeof(cases) / sizeof(cases[0]))

/* Single-row figures use the thread's CPU time (bench_cpu_us()): on a
   shared machine the time this thread spends descheduled is not the
   selection's.  The batch figures (several threads) use wall-clock time
   (bench_wall_us()). */

/* xorshift64*, for reproducible rows. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static double
rnd(void)
{
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (double)((rng_state * 2685821657736338717ull) >> 11) * 0x1p-53;
}

static double
gauss(void)
{
  double u1, u2;

  u1 = rnd();
  u2 = rnd();
  return sqrt(-2.0 * log(u1 + 1e-300)) * cos(2.0 * M_PI * u2);
}

/* Row shapes: Zipf rows a (ln(V/2) - ln r) + sigma N(0,1)
   over ranks r shuffled across token ids ("peaked", "mid", "broad"), the
   flat worst case 2 (ln(V/2 + 545) - ln(r + 545)) + 0.5 N(0,1), and an
   LM-like row of our own (12 - s ln r + 0.3 N(0,1), s from -s). */
struct shape {
  const char *name;
  double a, sigma, off;           /* off > 0: the flat form */
  int lm;                         /* LM row (targets) or the flat one */
};

static const struct shape shapes[] = {
  { "peaked", 3.0, 1.0, 0.0, 1 },
  { "mid", 1.7, 1.0, 0.0, 1 },
  { "broad", 1.35, 1.0, 0.0, 1 },
  { "flat", 2.0, 0.5, 545.0, 0 },
  { "lm", 0.0, 0.3, 0.0, 1 },
};

#define NSHAPES (sizeof(shapes) / sizeof(shapes[0]))

static void
make_row(const struct shape *sh, double zipf, float *row, size_t n)
{
  double r, hv;
  size_t i, j;
  float t;

  hv = (double)n / 2.0;
  for (i = 0; i < n; i++) {
    r = (double)(i + 1);
    if (sh->off > 0.0)
      row[i] = (float)(sh->a * (log(hv + sh->off) - log(r + sh->off)) +
                       sh->sigma * gauss());
    else if (sh->a > 0.0)
      row[i] = (float)(sh->a * (log(hv) - log(r)) + sh->sigma * gauss());
    else
      row[i] = (float)(12.0 - zipf * log(r) + sh->sigma * gauss());
  }
  for (i = n - 1; i > 0; i--) {
    j = (size_t)(rnd() * (double)(i + 1));
    t = row[i];
    row[i] = row[j];
    row[j] = t;
  }
}

/* float32 to bfloat16, round to nearest even (finite values). */
static uint16_t
to_bf16(float f)
{
  uint32_t b;

  memcpy(&b, &f, sizeof(b));
  b += 0x7fffu + ((b >> 16) & 1u);
  return (uint16_t)(b >> 16);
}

static double
row_entropy(const float *row, size_t n)
{
  double m, z, w, e;
  size_t i;

  m = -INFINITY;
  for (i = 0; i < n; i++)
    m = row[i] > m ? row[i] : m;
  z = w = 0.0;
  for (i = 0; i < n; i++) {
    e = exp(row[i] - m);
    z += e;
    w += e * (row[i] - m);
  }
  return log(z) - w / z;
}

/* The rows of one shape in one dtype. */
struct rowset {
  const void *rows[NROWS];
  enum qrs_dtype dtype;
};

/* Microseconds per token of a floor over the rows (kind 0: float exp
   pass, 1: read-only pass). */
static double
floor_once(const struct rowset *rs, const struct sel_opts *o, int kind)
{
  struct qrs__view v;
  double t0, sink, mx;
  int k;

  sink = 0.0;
  t0 = bench_cpu_us();
  for (k = 0; k < o->tokens; k++) {
    v.data = rs->rows[k % NROWS];
    v.dtype = rs->dtype;
    v.n = o->vocab;
    if (kind == 0)
      sink += qrs__kfloor_float(&v, &mx);
    else
      sink += qrs__kread(&v);
  }
  t0 = (bench_cpu_us() - t0) / o->tokens;
  if (!(sink > -INFINITY))
    fprintf(stderr, "floor: unexpected result\n");
  return t0;
}

static int
make_sampler(const struct bcase *bc, size_t vocab, struct qrs_sampler **ret)
{
  struct qrs_sampler_config *cfg;
  char field[64];
  const char *const *s, *eq;
  int r;

  r = qrs_sampler_config_new(&cfg);
  if (r < 0)
    return r;
  r = qrs_sampler_config_set(cfg, "log_level", "none");
  if (r == 0 && bc->preset)
    r = qrs_sampler_config_set_preset(cfg, bc->preset);
  for (s = bc->settings; r == 0 && *s; s++) {
    eq = strchr(*s, '=');
    snprintf(field, sizeof(field), "%.*s", (int)(eq - *s), *s);
    r = qrs_sampler_config_set(cfg, field, eq + 1);
  }
  if (r == 0)
    r = qrs_sampler_new(cfg, vocab, ret);
  if (r < 0)
    fprintf(stderr, "qrs-bench select: case %s: %s (%s)\n", bc->name,
            qrs_strerror(r), qrs_sampler_config_error(cfg));
  qrs_sampler_config_free(cfg);
  return r;
}

struct result {
  double us;                      /* median us per token */
  double floor_us;                /* median float exp pass */
  double read_us;                 /* median read-only pass */
  double ratio;                   /* median per-repetition us / floor */
  double resolved;                /* fraction of fast-path selections
                                     resolved by the double path */
  double fast;                    /* fraction decided by the fast path */
};

/* Each repetition times the two floors and then the case on the same
   rows, so that the ratio survives a machine whose speed drifts. */
static int
time_case(const struct bcase *bc, const struct rowset *rs, const double *us,
          const struct sel_opts *o, struct result *res)
{
  struct qrs_sampler *s;
  uint32_t tok;
  double t0, *tc, *tf, *tr, *ra;
  int r, k, rc, ret;

  struct qrs__fast_stats f0, f1;
  double all;

  if (make_sampler(bc, o->vocab, &s) < 0)
    return -1;
  qrs__fast_stats_get(&f0);
  ret = -1;
  tc = calloc((size_t)o->reps, sizeof(*tc));
  tf = calloc((size_t)o->reps, sizeof(*tf));
  tr = calloc((size_t)o->reps, sizeof(*tr));
  ra = calloc((size_t)o->reps, sizeof(*ra));
  if (!tc || !tf || !tr || !ra)
    goto out;
  for (r = 0; r < o->reps; r++) {
    tf[r] = floor_once(rs, o, 0);
    tr[r] = floor_once(rs, o, 1);
    t0 = bench_cpu_us();
    for (k = 0; k < o->tokens; k++) {
      rc = qrs_sampler_select_u(s, rs->rows[k % NROWS], rs->dtype, o->vocab,
                                us[(k * 7 + r) % NU], &tok, NULL);
      if (rc < 0) {
        fprintf(stderr, "qrs-bench select: case %s: %s\n", bc->name,
                qrs_strerror(rc));
        goto out;
      }
    }
    tc[r] = (bench_cpu_us() - t0) / o->tokens;
    ra[r] = tc[r] / tf[r];
  }
  res->us = bench_median(tc, (size_t)o->reps);
  res->floor_us = bench_median(tf, (size_t)o->reps);
  res->read_us = bench_median(tr, (size_t)o->reps);
  res->ratio = bench_median(ra, (size_t)o->reps);
  qrs__fast_stats_get(&f1);
  all = (double)(f1.fast - f0.fast + f1.resolved - f0.resolved +
                 f1.ineligible - f0.ineligible);
  res->fast = all > 0 ? (double)(f1.fast - f0.fast) / all : 0.0;
  res->resolved = all > 0 ? (double)(f1.resolved - f0.resolved) / all : 0.0;
  ret = 0;
out:
  free(tc);
  free(tf);
  free(tr);
  free(ra);
  qrs_sampler_free(s);
  return ret;
}

/* The float floor over rows [from, to) of a batch buffer (one thread's
   share of the floor's own scaling). */
struct floor_job {
  const char *buf;
  size_t es, vocab, from, to;
  enum qrs_dtype dtype;
  double sink;
};

static void *
floor_rows(void *arg)
{
  struct floor_job *j = arg;
  struct qrs__view v;
  double mx;
  size_t b;

  for (b = j->from; b < j->to; b++) {
    v.data = j->buf + b * j->vocab * j->es;
    v.dtype = j->dtype;
    v.n = j->vocab;
    j->sink += qrs__kfloor_float(&v, &mx);
  }
  return NULL;
}

/* Wall-clock rows per second of the float floor over the B rows on
   `threads` threads (an even static split): what the machine's cores and
   memory allow the batch at best. */
static double
floor_batch(const char *buf, size_t es, const struct rowset *rs, size_t B,
            const struct sel_opts *o, int threads)
{
  struct floor_job jobs[QRS_POOL_MAX_THREADS];
  pthread_t tid[QRS_POOL_MAX_THREADS];
  double t0;
  int t, started;

  t0 = bench_wall_us();
  started = 0;
  for (t = 0; t < threads; t++) {
    jobs[t].buf = buf;
    jobs[t].es = es;
    jobs[t].vocab = o->vocab;
    jobs[t].dtype = rs->dtype;
    jobs[t].from = B * (size_t)t / (size_t)threads;
    jobs[t].to = B * (size_t)(t + 1) / (size_t)threads;
    jobs[t].sink = 0.0;
    if (t > 0 && pthread_create(&tid[t], NULL, floor_rows, &jobs[t]) == 0)
      started = t;
    else if (t > 0)
      floor_rows(&jobs[t]);
  }
  floor_rows(&jobs[0]);
  for (t = 1; t <= started; t++)
    pthread_join(tid[t], NULL);
  t0 = bench_wall_us() - t0;
  return (double)B / t0 * 1e6;
}

/* --batch: B rows (copies of the shape's rows) in one buffer; per
   repetition, B single calls, one batch on 1 thread and one batch on N
   threads (medians of rows per second).  The single calls and the
   1-thread batch run on this thread alone: timed by its CPU time (the
   per-row cost); the N-thread batch by the wall clock. */
static int
time_batch(const struct bcase *bc, const struct rowset *rs,
           const double *us, const struct sel_opts *o, char *buf)
{
  struct qrs_sampler **smp;
  struct qrs_batch_row *rows;
  struct qrs_pool *p1, *pn;
  size_t b, B, es;
  double t0, *ts, *t1, *tn, *f1, *fn, ms, m1, mn;
  uint32_t tok;
  int r, k, ret, bad;

  B = (size_t)o->batch;
  es = rs->dtype == QRS_DTYPE_F32 ? 4 : 2;
  ret = -1;
  p1 = pn = NULL;
  smp = calloc(B, sizeof(*smp));
  rows = calloc(B, sizeof(*rows));
  ts = calloc((size_t)o->reps, sizeof(double));
  t1 = calloc((size_t)o->reps, sizeof(double));
  tn = calloc((size_t)o->reps, sizeof(double));
  f1 = calloc((size_t)o->reps, sizeof(double));
  fn = calloc((size_t)o->reps, sizeof(double));
  if (!smp || !rows || !ts || !t1 || !tn || !f1 || !fn)
    goto out;
  for (b = 0; b < B; b++) {
    if (make_sampler(bc, o->vocab, &smp[b]) < 0)
      goto out;
    memcpy(buf + b * o->vocab * es, rs->rows[b % NROWS], o->vocab * es);
  }
  if (qrs_pool_new(1, &p1) < 0 || qrs_pool_new((unsigned)o->threads, &pn) < 0)
    goto out;
  for (r = 0; r < o->reps; r++) {
    f1[r] = floor_batch(buf, es, rs, B, o, 1);
    fn[r] = floor_batch(buf, es, rs, B, o, o->threads);
    for (k = 0; k < 3; k++) {
      for (b = 0; b < B; b++) {
        rows[b].sampler = smp[b];
        rows[b].u = us[(b * 7 + (size_t)r) % NU];
      }
      t0 = k < 2 ? bench_cpu_us() : bench_wall_us();
      if (k == 0) {
        for (b = 0; b < B; b++)
          if (qrs_sampler_select_u(smp[b], buf + b * o->vocab * es,
                                   rs->dtype, o->vocab, rows[b].u, &tok,
                                   NULL) < 0)
            goto out;
      } else {
        bad = qrs_sample_batch(k == 1 ? p1 : pn, buf, rs->dtype, o->vocab,
                               o->vocab, rows, B);
        if (bad != 0) {
          fprintf(stderr, "qrs-bench select: batch: %d rows failed\n", bad);
          goto out;
        }
      }
      t0 = (k < 2 ? bench_cpu_us() : bench_wall_us()) - t0;
      (k == 0 ? ts : k == 1 ? t1 : tn)[r] = (double)B / t0 * 1e6;
    }
  }
  for (r = 0; r < o->reps; r++)
    fn[r] /= f1[r];
  ms = bench_median(ts, (size_t)o->reps);
  m1 = bench_median(t1, (size_t)o->reps);
  mn = bench_median(tn, (size_t)o->reps);
  printf("(%s) %-32s B=%-4zu single %7.0f rows/s (cpu)  batch x1 %7.0f "
         "(%.2fx single cost)  batch x%d %7.0f rows/s (wall, %.2fx x1)  "
         "floor x%d/x1 %.2fx\n",
         bc->name, bc->desc, B, ms, m1, ms / m1, o->threads, mn, mn / m1,
         o->threads, bench_median(fn, (size_t)o->reps));
  ret = 0;
out:
  qrs_pool_free(p1);
  qrs_pool_free(pn);
  for (b = 0; smp && b < B; b++)
    qrs_sampler_free(smp[b]);
  free(smp);
  free(rows);
  free(ts);
  free(t1);
  free(tn);
  free(f1);
  free(fn);
  return ret;
}

static void
usage(FILE *f)
{
  fprintf(f,
          "Usage: qrs-bench select [-n VOCAB] [-t TOKENS] [-r REPS] "
          "[-c CPU] [-s ZIPF]\n"
          "                        [-k CASES] [-S SHAPES] [-d DTYPES] "
          "[-K KERNELS]\n"
          "                        [--batch B [--threads N]]\n"
          "\n"
          "  -n VOCAB     logits per row (default 151936, Qwen2.5)\n"
          "  -t TOKENS    tokens per repetition (default 40)\n"
          "  -r REPS      repetitions; medians are reported (default 7)\n"
          "  -c CPU       pin to this CPU (default: the current one; "
          "not with --threads > 1)\n"
          "  -s ZIPF      Zipf exponent of the lm row (default 1.5)\n"
          "  -k CASES     run only these cases (letters a-g, e.g. -k ad)\n"
          "  -S SHAPES    run only these row shapes (initials of peaked, "
          "mid, broad,\n"
          "               flat, lm; e.g. -S pf)\n"
          "  -d DTYPES    f32, bf16 or both (default both)\n"
          "  -K KERNELS   sse2 or avx2 (default: the best the CPU has)\n"
          "  --batch B    time qrs_sample_batch() on B rows instead\n"
          "  --threads N  the batch pool's threads (default 2)\n"
          "\n"
          "Prints microseconds per token for each configuration and row "
          "shape, the\nfloat exp floor (max and sum(exp(x - max)) in one "
          "vectorised float pass) and\nthe read-only floor timed in the "
          "same repetitions, the ratio to the float\nfloor and the "
          "target.\n");
}

/* -K: the kernels (a process-wide setting, no field). */
static int
set_kernels(const struct cli_opt *o, const char *opt, const char *arg)
{
  (void)o;
  (void)opt;
  if (!strcmp(arg, "sse2"))
    qrs__kernel_level(1);
  else if (!strcmp(arg, "avx2"))
    qrs__kernel_level(2);
  else {
    usage(stderr);
    return -1;
  }
  return 0;
}

/* -d: the dtypes (int *field: 1 f32, 2 bf16, 3 both). */
static int
set_dtypes(const struct cli_opt *o, const char *opt, const char *arg)
{
  int *dtypes = o->field;

  (void)opt;
  *dtypes = !strcmp(arg, "f32") ? 1 : !strcmp(arg, "bf16") ? 2
            : !strcmp(arg, "both") ? 3 : 0;
  if (!*dtypes) {
    usage(stderr);
    return -1;
  }
  return 0;
}

int
bench_select(int argc, char **argv)
{
  struct sel_opts o = { 151936, 40, 7, -1, 1.5, NULL, NULL, 3, 0, 2 };
  const struct cli_opt opts[] = {
    { .key = 'n', .type = CLI_OPT_SIZE, .field = &o.vocab },
    { .key = 't', .type = CLI_OPT_INT, .field = &o.tokens },
    { .key = 'r', .type = CLI_OPT_INT, .field = &o.reps },
    { .key = 'c', .type = CLI_OPT_INT, .field = &o.cpu },
    { .key = 's', .type = CLI_OPT_DOUBLE, .field = &o.zipf },
    { .key = 'k', .type = CLI_OPT_STRING, .field = &o.only },
    { .key = 'K', .type = CLI_OPT_CALL, .call = set_kernels },
    { .key = 'S', .type = CLI_OPT_STRING, .field = &o.shapes },
    { .key = 'd', .type = CLI_OPT_CALL, .field = &o.dtypes,
      .call = set_dtypes },
    { .name = "batch", .type = CLI_OPT_INT, .field = &o.batch },
    { .name = "threads", .type = CLI_OPT_INT, .field = &o.threads },
    BENCH_OPTS_END,
  };
  float *frows[NSHAPES][NROWS];
  uint16_t *hrows[NSHAPES][NROWS];
  struct rowset rs;
  struct result res;
  double us[NU], target;
  char *buf;
  size_t i, j, c2;
  int ret, dt;

  ret = bench_opts_parse(argc, argv, opts, usage);
  if (ret >= 0)
    return ret;
  if (o.vocab < 16 || o.vocab > UINT32_MAX || o.tokens < 1 || o.reps < 1 ||
      o.batch < 0 || o.batch > 4096 || o.threads < 1 ||
      o.threads > QRS_POOL_MAX_THREADS) {
    usage(stderr);
    return 2;
  }
  if (o.cpu >= 0 || (o.batch == 0 && o.cpu < 0)) {
    if (o.cpu < 0)
      o.cpu = sched_getcpu();
    if (bench_pin(o.cpu) < 0)
      fprintf(stderr, "qrs-bench select: cannot pin to CPU %d: %s\n",
              o.cpu, strerror(errno));
  }
  ret = 1;
  buf = NULL;
  memset(frows, 0, sizeof(frows));
  memset(hrows, 0, sizeof(hrows));
  for (i = 0; i < NSHAPES; i++) {
    for (j = 0; j < NROWS; j++) {
      frows[i][j] = malloc(o.vocab * sizeof(float));
      hrows[i][j] = malloc(o.vocab * sizeof(uint16_t));
      if (!frows[i][j] || !hrows[i][j]) {
        fprintf(stderr, "qrs-bench select: out of memory\n");
        goto out;
      }
      make_row(&shapes[i], o.zipf, frows[i][j], o.vocab);
      for (c2 = 0; c2 < o.vocab; c2++)
        hrows[i][j][c2] = to_bf16(frows[i][j][c2]);
    }
  }
  if (o.batch) {
    buf = malloc((size_t)o.batch * o.vocab * sizeof(float));
    if (!buf) {
      fprintf(stderr, "qrs-bench select: out of memory\n");
      goto out;
    }
  }
  for (i = 0; i < NU; i++)
    us[i] = (i + 0.5) / NU;
  printf("qrs-bench select: %zu logits per row, %d rows per shape, %d "
         "tokens x %d repetitions (median), %s, kernels %s\n",
         o.vocab, NROWS, o.tokens, o.reps,
         o.batch ? "batch mode" : "pinned", 
         qrs__kernel_level(0) == 2 ? "AVX2+FMA" : "SSE2");
  printf("row entropies (nats):");
  for (i = 0; i < NSHAPES; i++)
    printf(" %s %.2f", shapes[i].name, row_entropy(frows[i][0], o.vocab));
  printf("\nEach token: qrs_sampler_select_u() (strategy, selection, "
         "record), log level none.\n\n");
  if (!o.batch)
    printf("%-3s %-34s %-6s %-4s %9s %9s %8s %8s %7s %6s %6s\n", "",
           "configuration", "shape", "type", "us/token", "floor us",
           "x floor", "read us", "target", "fast%", "exact%");
  for (dt = 0; dt < 2; dt++) {
    if (!(o.dtypes & (1 << dt)))
      continue;
    for (c2 = 0; c2 < NCASES; c2++) {
      if (o.only && !strchr(o.only, cases[c2].name[0]))
        continue;
      for (i = 0; i < NSHAPES; i++) {
        if (o.shapes && !strchr(o.shapes, shapes[i].name[0]))
          continue;
        rs.dtype = dt ? QRS_DTYPE_BF16 : QRS_DTYPE_F32;
        for (j = 0; j < NROWS; j++)
          rs.rows[j] = dt ? (const void *)hrows[i][j]
                          : (const void *)frows[i][j];
        if (o.batch) {
          printf("%-6s %-4s ", shapes[i].name, dt ? "bf16" : "f32");
          if (time_batch(&cases[c2], &rs, us, &o, buf) < 0)
            goto out;
          continue;
        }
        /* Warm up caches and the CPU clock. */
        floor_once(&rs, &o, 0);
        if (time_case(&cases[c2], &rs, us, &o, &res) < 0)
          goto out;
        target = shapes[i].lm ? cases[c2].target_lm : cases[c2].target_flat;
        printf("(%s) %-34s %-6s %-4s %9.1f %9.1f %8.2f %8.1f %6.1fx %6.1f "
               "%6.1f%s\n",
               cases[c2].name, cases[c2].desc, shapes[i].name,
               dt ? "bf16" : "f32", res.us, res.floor_us, res.ratio,
               res.read_us, target, 100.0 * res.fast, 100.0 * res.resolved,
               res.ratio <= target ? "" : "  over");
        fflush(stdout);
      }
    }
  }
  if (!o.batch)
    printf("\nfloor: max and sum(exp(x - max)) in one vectorised float "
           "pass (degree-6\npolynomial exp); read: a read-only pass (the "
           "max); both timed in every\nrepetition of every line; x floor "
           "is the median of the per-repetition ratios.\nfast%%: "
           "selections the float fast path decided; exact%%: those it "
           "handed to\nthe double path because a decision fell within its "
           "error bound.\n");
  ret = 0;
out:
  for (i = 0; i < NSHAPES; i++)
    for (j = 0; j < NROWS; j++) {
      free(frows[i][j]);
      free(hrows[i][j]);
    }
  free(buf);
  return ret;
}
