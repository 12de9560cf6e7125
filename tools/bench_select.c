/* qrs-bench select: microseconds per token of libqrs's selection on rows
   of a real vocabulary size, next to a floor measured in the same run.

   The floor is one pass over the row computing its max and
   sum(exp(x - max)) with the library's own vectorised exponential: the
   least any softmax-based sampler must do.  Each configuration runs the
   whole per-token step (qrs_sampler_select_u(): temperature strategy,
   selection, record) with log level none, over a set of rows and uniform
   u values, and reports the median of several repetitions. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <qrs/sampler.h>

#include "bench.h"
#include "rowkern.h"

#define NROWS 8
#define NU 64

struct bench_opts {
  size_t vocab;
  int tokens;                     /* per repetition */
  int reps;
  int cpu;                        /* -1: stay where we are */
  double zipf;
  const char *only;               /* run only these cases */
};

struct bcase {
  const char *name;
  const char *desc;
  int flat;                       /* use the flat rows */
  double target;                  /* x floor */
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
  { "a", "fixed T=1, no truncation", 0, 3.0, set_a, NULL },
  { "b", "fixed T=0.8 + min-p 0.05 + top-p 0.95", 0, 1.5, set_b, NULL },
  { "c", "top-k 50 + top-p 0.9", 0, 1.5, set_c, NULL },
  { "d", "edt + top-p 0.95", 0, 3.0, set_d, NULL },
  { "e", "creative_sampling preset (hvh_drift)", 0, 3.0, set_e,
    "creative_sampling" },
  { "f", "flat row, top-p 0.95", 1, 15.0, set_f, NULL },
  { "g", "entropy_throttle (exact, 2 bits)", 0, 3.0, set_g, NULL },
};

#define NCASES (sizeof(cases) / sizeof(cases[0]))

static double
now_us(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

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

/* An LM-like row: the r-th most probable token has p ~ r^-s (Zipf), with
   log-normal jitter, the token ids shuffled. */
static void
make_zipf_row(float *row, size_t n, double s)
{
  size_t i, j;
  float t;

  for (i = 0; i < n; i++)
    row[i] = (float)(12.0 - s * log((double)(i + 1)) + 0.3 * gauss());
  for (i = n - 1; i > 0; i--) {
    j = (size_t)(rnd() * (double)(i + 1));
    t = row[i];
    row[i] = row[j];
    row[j] = t;
  }
}

/* The flat worst case: every logit uniform in [0, 1). */
static void
make_flat_row(float *row, size_t n)
{
  size_t i;

  for (i = 0; i < n; i++)
    row[i] = (float)rnd();
}

static int
cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;

  return x < y ? -1 : x > y;
}

static double
median(double *v, int n)
{
  qsort(v, (size_t)n, sizeof(*v), cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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

/* Microseconds per token of the floor over tokens rows. */
static double
floor_once(float *const *rows, const struct bench_opts *o)
{
  struct qrs__view v;
  double t0, sink, mx;
  int k;

  sink = 0.0;
  t0 = now_us();
  for (k = 0; k < o->tokens; k++) {
    v.data = rows[k % NROWS];
    v.dtype = QRS_DTYPE_F32;
    v.n = o->vocab;
    sink += qrs__kfloor(&v, &mx);
  }
  t0 = (now_us() - t0) / o->tokens;
  if (!(sink > 0.0))
    fprintf(stderr, "floor: unexpected sum\n");
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
  double floor_us;                /* median of the interleaved floors */
  double ratio;                   /* median of the per-repetition ratios */
};

/* Each repetition times the floor and then the case on the same rows, so
   that the ratio survives a machine whose speed drifts (other tenants,
   frequency changes). */
static int
time_case(const struct bcase *bc, float *const *rows, const double *us,
          const struct bench_opts *o, struct result *res)
{
  struct qrs_sampler *s;
  uint32_t tok;
  double t0, *tc, *tf, *ra;
  int r, k, rc, ret;

  if (make_sampler(bc, o->vocab, &s) < 0)
    return -1;
  ret = -1;
  tc = calloc((size_t)o->reps, sizeof(*tc));
  tf = calloc((size_t)o->reps, sizeof(*tf));
  ra = calloc((size_t)o->reps, sizeof(*ra));
  if (!tc || !tf || !ra)
    goto out;
  for (r = 0; r < o->reps; r++) {
    tf[r] = floor_once(rows, o);
    t0 = now_us();
    for (k = 0; k < o->tokens; k++) {
      rc = qrs_sampler_select_u(s, rows[k % NROWS], QRS_DTYPE_F32, o->vocab,
                                us[(k * 7 + r) % NU], &tok, NULL);
      if (rc < 0) {
        fprintf(stderr, "qrs-bench select: case %s: %s\n", bc->name,
                qrs_strerror(rc));
        goto out;
      }
    }
    tc[r] = (now_us() - t0) / o->tokens;
    ra[r] = tc[r] / tf[r];
  }
  res->us = median(tc, o->reps);
  res->floor_us = median(tf, o->reps);
  res->ratio = median(ra, o->reps);
  ret = 0;
out:
  free(tc);
  free(tf);
  free(ra);
  qrs_sampler_free(s);
  return ret;
}

static void
usage(FILE *f)
{
  fprintf(f,
          "Usage: qrs-bench select [-n VOCAB] [-t TOKENS] [-r REPS] "
          "[-c CPU] [-s ZIPF] [-k CASES] [-K KERNELS]\n"
          "\n"
          "  -n VOCAB   logits per row (default 151936, Qwen2.5)\n"
          "  -t TOKENS  tokens per repetition (default 200)\n"
          "  -r REPS    repetitions; medians are reported (default 7)\n"
          "  -c CPU     pin to this CPU (default: the current one)\n"
          "  -s ZIPF    Zipf exponent of the LM-like rows (default 1.5)\n"
          "  -k CASES   run only these cases (letters, e.g. -k ad)\n"
          "  -K KERNELS sse2 or avx2 (default: the best the CPU has)\n"
          "\n"
          "Prints microseconds per token for each configuration, the floor\n"
          "(one pass: max and sum(exp(x - max))), their ratio and the "
          "target.\n");
}

int
bench_select(int argc, char **argv)
{
  static const struct option longopts[] = {
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  struct bench_opts o = { 151936, 200, 7, -1, 1.5, NULL };
  float *zrows[NROWS], *frows[NROWS];
  struct result res;
  double us[NU], h;
  cpu_set_t set;
  size_t i;
  int c, ret;

  optind = 1;
  while ((c = getopt_long(argc, argv, "n:t:r:c:s:k:K:h", longopts, NULL)) !=
         -1) {
    switch (c) {
    case 'K':
      if (!strcmp(optarg, "sse2"))
        qrs__kernel_level(1);
      else if (!strcmp(optarg, "avx2"))
        qrs__kernel_level(2);
      else {
        usage(stderr);
        return 2;
      }
      break;
    case 'k':
      o.only = optarg;
      break;
    case 'n':
      o.vocab = strtoul(optarg, NULL, 10);
      break;
    case 't':
      o.tokens = atoi(optarg);
      break;
    case 'r':
      o.reps = atoi(optarg);
      break;
    case 'c':
      o.cpu = atoi(optarg);
      break;
    case 's':
      o.zipf = atof(optarg);
      break;
    case 'h':
      usage(stdout);
      return 0;
    default:
      usage(stderr);
      return 2;
    }
  }
  if (o.vocab < 16 || o.vocab > UINT32_MAX || o.tokens < 1 || o.reps < 1) {
    usage(stderr);
    return 2;
  }
  if (o.cpu < 0)
    o.cpu = sched_getcpu();
  CPU_ZERO(&set);
  CPU_SET(o.cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) < 0)
    fprintf(stderr, "qrs-bench select: cannot pin to CPU %d: %s\n", o.cpu,
            strerror(errno));
  ret = 1;
  memset(zrows, 0, sizeof(zrows));
  memset(frows, 0, sizeof(frows));
  for (i = 0; i < NROWS; i++) {
    zrows[i] = malloc(o.vocab * sizeof(float));
    frows[i] = malloc(o.vocab * sizeof(float));
    if (!zrows[i] || !frows[i]) {
      fprintf(stderr, "qrs-bench select: out of memory\n");
      goto out;
    }
    make_zipf_row(zrows[i], o.vocab, o.zipf);
    make_flat_row(frows[i], o.vocab);
  }
  for (i = 0; i < NU; i++)
    us[i] = (i + 0.5) / NU;
  h = row_entropy(zrows[0], o.vocab);
  printf("qrs-bench select: %zu logits (float32) per row, %d rows, %d tokens "
         "x %d repetitions (median), CPU %d, kernels %s\n",
         o.vocab, NROWS, o.tokens, o.reps, o.cpu,
         qrs__kernel_level(0) == 2 ? "AVX2+FMA" : "SSE2");
  printf("LM-like rows: Zipf s=%.2f with log-normal jitter, entropy %.2f "
         "nats; flat rows: logits uniform in [0,1).\n"
         "Each token: qrs_sampler_select_u() (strategy, selection, record), "
         "log level none.\n\n",
         o.zipf, h);
  /* Warm up caches and the CPU clock. */
  floor_once(zrows, &o);
  printf("%-3s %-42s %9s %9s %8s %8s\n", "", "configuration", "us/token",
         "floor us", "x floor", "target");
  for (i = 0; i < NCASES; i++) {
    if (o.only && !strchr(o.only, cases[i].name[0]))
      continue;
    if (time_case(&cases[i], cases[i].flat ? frows : zrows, us, &o, &res) < 0)
      goto out;
    printf("(%s) %-42s %9.1f %9.1f %8.2f %7.1fx%s\n", cases[i].name,
           cases[i].desc, res.us, res.floor_us, res.ratio, cases[i].target,
           res.ratio <= cases[i].target ? "" : "  over");
  }
  printf("\nfloor: one pass computing max and sum(exp(x - max)) over the "
         "row with the\nlibrary's vectorised exp, timed before each "
         "repetition of each configuration;\nx floor is the median of the "
         "per-repetition ratios.\n");
  ret = 0;
out:
  for (i = 0; i < NROWS; i++) {
    free(zrows[i]);
    free(frows[i]);
  }
  return ret;
}
