/* The exact amplifier (amp_exact.h): the null CDF of a sum of N uniform
   bytes from its characteristic function, and the randomized PIT.

   P(S = s0 + j) = (1/M) sum_t conj(phi(theta_t))^N e^{i theta_t s0}
                   e^{2 pi i t j / M},   theta_t = 2 pi t / M,
   phi(theta) = e^{i 127.5 theta} sin(128 theta) / (256 sin(theta / 2)),

   one inverse real FFT of length M >= w.  Every angle is reduced with
   integer arithmetic before a sine or cosine is taken, and in the main lobe
   (128 theta < pi) |phi|^N = exp(N (lsinc(128 theta) - lsinc(theta / 2)))
   with lsinc(x) = log1p(sin(x)/x - 1) computed to full relative accuracy
   by its Taylor series for small x.  docs/statistics.md gives the error
   bound. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <fftw3.h>

#include "amp_exact.h"

/* sin(x)/x - 1 with a small relative error on [0, pi]. */
static double
sincm1(double x)
{
  double x2, term, sum;
  int k;

  if (x >= 1.5)
    return sin(x) / x - 1.0;
  /* sum_{k>=1} (-1)^k x^2k / (2k+1)!; at x = 1.5 the 13th term is below
     1e-23. */
  x2 = x * x;
  term = 1.0;
  sum = 0.0;
  for (k = 1; k <= 13; k++) {
    term *= -x2 / (double)((2 * k) * (2 * k + 1));
    sum += term;
  }
  return sum;
}

static double
lsinc(double x)
{
  return log1p(sincm1(x));
}

/* Smallest 2^a 3^b 5^c >= n (FFTW is fastest on those). */
static size_t
fft_size(size_t n)
{
  size_t best, p2, p3, p5;

  best = (size_t)-1;
  for (p5 = 1; p5 < 2 * n + 2; p5 *= 5)
    for (p3 = p5; p3 < 2 * n + 2; p3 *= 3)
      for (p2 = p3; p2 < 2 * n + 2; p2 *= 2)
        if (p2 >= n && p2 < best)
          best = p2;
  if (best & 1)
    best *= 2;                /* even, so that t = M/2 is the Nyquist bin */
  return best;
}

static void
window(uint32_t n, int64_t *ret_s0, size_t *ret_w)
{
  double mu, h;
  int64_t s0, s1;

  mu = 127.5 * n;
  h = AMP_EXACT_WINDOW_C * 255.0 * sqrt((double)n);
  s0 = (int64_t)floor(mu - h);
  s1 = (int64_t)ceil(mu + h);
  if (s0 < 0)
    s0 = 0;
  if (s1 > 255 * (int64_t)n)
    s1 = 255 * (int64_t)n;
  *ret_s0 = s0;
  *ret_w = (size_t)(s1 - s0 + 1);
}

size_t
amp_exact_table_bytes(uint32_t n)
{
  int64_t s0;
  size_t w;

  window(n, &s0, &w);
  return w * sizeof(double) + sizeof(struct amp_exact_table);
}

/* The FFTW planner is not thread-safe (fftw_execute is). */
static pthread_mutex_t plan_lock = PTHREAD_MUTEX_INITIALIZER;

int
amp_exact_table_build(uint32_t n, struct amp_exact_table **ret)
{
  struct amp_exact_table *t;
  fftw_complex *in;
  fftw_plan plan;
  double *out, theta, mag, ang, sum, c, y, s, x, p;
  int64_t d2, k, m2, s0;
  size_t m, j, tt, half, w;
  int neg;

  if (n == 0 || n > 16777216)
    return -EINVAL;
  window(n, &s0, &w);
  m = fft_size(w);
  half = m / 2;
  t = calloc(1, sizeof(*t) + w * sizeof(t->cdf[0]));
  in = fftw_malloc((half + 1) * sizeof(fftw_complex));
  out = fftw_malloc(m * sizeof(double));
  if (!t || !in || !out)
    goto fail;
  t->n = n;
  t->s0 = s0;
  t->w = w;
  pthread_mutex_lock(&plan_lock);
  plan = fftw_plan_dft_c2r_1d((int)m, in, out, FFTW_ESTIMATE);
  pthread_mutex_unlock(&plan_lock);
  if (!plan)
    goto fail;

  /* C_t = conj(phi(theta_t))^N e^{i theta_t s0}
         = |r|^N sign^N e^{i pi t d2 / M},  d2 = 2 s0 - 255 N. */
  d2 = 2 * t->s0 - 255 * (int64_t)n;
  m2 = 2 * (int64_t)m;
  for (tt = 0; tt <= half; tt++) {
    if (tt == 0) {
      in[0][0] = 1.0;
      in[0][1] = 0.0;
      continue;
    }
    k = (int64_t)((128 * (uint64_t)tt) % m);   /* 128 theta = 2 pi k / M */
    if (128 * (uint64_t)tt < m / 2) {
      /* main lobe: 0 < 128 theta < pi */
      x = 2.0 * M_PI * (double)k / (double)m;
      theta = M_PI * (double)tt / (double)m;   /* theta / 2 */
      mag = exp((double)n * (lsinc(x) - lsinc(theta)));
      neg = 0;
    } else {
      /* sin(128 theta) with the angle reduced to [0, 2 pi) exactly */
      x = 2.0 * M_PI * (double)k / (double)m;
      s = sin(x);
      theta = M_PI * (double)tt / (double)m;
      p = fabs(s) / (256.0 * sin(theta));
      mag = pow(p, (double)n);
      neg = s < 0 && (n & 1);
    }
    if (mag == 0.0) {
      in[tt][0] = 0.0;
      in[tt][1] = 0.0;
      continue;
    }
    /* angle pi * (tt * d2 mod 2M) / M, reduced to (-pi, pi] */
    k = ((int64_t)tt * d2) % m2;   /* |tt d2| < 2^63 for N <= 2^24 */
    if (k < 0)
      k += m2;
    if (k > (int64_t)m)
      k -= m2;
    ang = M_PI * (double)k / (double)m;
    if (neg)
      mag = -mag;
    in[tt][0] = mag * cos(ang);
    in[tt][1] = mag * sin(ang);
  }
  /* The Nyquist bin of a real signal must be real: its imaginary part is
     ignored by c2r, as it should be (it is the alias of itself). */
  fftw_execute(plan);
  pthread_mutex_lock(&plan_lock);
  fftw_destroy_plan(plan);
  pthread_mutex_unlock(&plan_lock);

  /* Cumulate with Neumaier's compensated sum; FFT noise below 0 is
     dropped so that the CDF is nondecreasing. */
  sum = 0.0;
  c = 0.0;
  for (j = 0; j < t->w; j++) {
    p = out[j] / (double)m;
    if (p < 0.0)
      p = 0.0;
    y = sum + p;
    if (fabs(sum) >= fabs(p))
      c += (sum - y) + p;
    else
      c += (p - y) + sum;
    sum = y;
    s = sum + c;
    if (s > 1.0)
      s = 1.0;
    if (j > 0 && s < t->cdf[j - 1])
      s = t->cdf[j - 1];
    t->cdf[j] = s;
  }
  fftw_free(in);
  fftw_free(out);
  *ret = t;
  return 0;

fail:
  fftw_free(in);
  fftw_free(out);
  free(t);
  return -ENOMEM;
}

void
amp_exact_table_free(struct amp_exact_table *t)
{
  free(t);
}

double
amp_exact_cdf(const struct amp_exact_table *t, int64_t s)
{
  if (s < t->s0)
    return 0.0;
  if (s - t->s0 >= (int64_t)t->w)
    return 1.0;
  return t->cdf[s - t->s0];
}

int
amp_exact(const struct amp_exact_table *t, const struct amp_params *p,
          const uint8_t *b, size_t n, struct amp_result *ret)
{
  double lo, hi, v, u;
  uint64_t k;
  int64_t s;
  int i, r;

  if (n == 0)
    return AMP_E_EMPTY;
  r = amp_zscore_mean(p, b, n, ret);
  if (r < 0)
    return r;
  k = 0;
  for (i = AMP_EXACT_EXTRA - 1; i >= 0; i--)
    k = k << 8 | b[n + (size_t)i];
  k &= (1ull << 53) - 1;
  v = (double)k * 0x1p-53;
  s = (int64_t)ret->byte_sum;
  lo = amp_exact_cdf(t, s - 1);
  hi = amp_exact_cdf(t, s);
  u = lo + v * (hi - lo);
  ret->u = fmax(p->epsilon, fmin(1.0 - p->epsilon, u));
  return 0;
}

/* The cache: at most CACHE_SLOTS tables and limit bytes; unused tables
   are evicted least recently used first. */
#define CACHE_SLOTS 64

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct amp_exact_table *cache[CACHE_SLOTS];
static size_t cache_total;
static size_t cache_max = 64u << 20;
static uint64_t cache_clock;

static size_t
table_bytes(const struct amp_exact_table *t)
{
  return t->w * sizeof(double) + sizeof(*t);
}

/* Drop unused tables until total + extra fits and a slot is free.  Locked. */
static void
evict(size_t extra)
{
  int i, victim, used;

  for (;;) {
    used = 0;
    for (i = 0; i < CACHE_SLOTS; i++)
      used += cache[i] != NULL;
    if (cache_total + extra <= cache_max && used < CACHE_SLOTS)
      return;
    victim = -1;
    for (i = 0; i < CACHE_SLOTS; i++)
      if (cache[i] && !cache[i]->refs &&
          (victim < 0 || cache[i]->used < cache[victim]->used))
        victim = i;
    if (victim < 0)
      return;
    cache_total -= table_bytes(cache[victim]);
    amp_exact_table_free(cache[victim]);
    cache[victim] = NULL;
  }
}

static struct amp_exact_table *
lookup(uint32_t n)
{
  int i;

  for (i = 0; i < CACHE_SLOTS; i++)
    if (cache[i] && cache[i]->n == n)
      return cache[i];
  return NULL;
}

int
amp_exact_get(uint32_t n, struct amp_exact_table **ret)
{
  struct amp_exact_table *t, *have;
  int i, r;

  if (amp_exact_try_get(n, ret) == 0)
    return 0;
  pthread_mutex_lock(&cache_lock);
  if (amp_exact_table_bytes(n) > cache_max) {
    pthread_mutex_unlock(&cache_lock);
    return -E2BIG;
  }
  pthread_mutex_unlock(&cache_lock);

  r = amp_exact_table_build(n, &t);    /* outside the lock: it is slow */
  if (r < 0)
    return r;

  pthread_mutex_lock(&cache_lock);
  have = lookup(n);                    /* built meanwhile by another thread */
  if (have) {
    amp_exact_table_free(t);
    t = have;
  } else {
    evict(table_bytes(t));
    for (i = 0; i < CACHE_SLOTS && cache[i]; i++)
      ;
    if (i < CACHE_SLOTS && cache_total + table_bytes(t) <= cache_max) {
      cache[i] = t;
      cache_total += table_bytes(t);
    } else {
      t->refs = 1u << 31;     /* every slot in use: a private table, */
    }                         /* freed by its release */
  }
  t->refs++;
  t->used = ++cache_clock;
  pthread_mutex_unlock(&cache_lock);
  *ret = t;
  return 0;
}

void
amp_exact_release(struct amp_exact_table *t)
{
  int priv;

  if (!t)
    return;
  pthread_mutex_lock(&cache_lock);
  priv = t->refs > (1u << 31);
  t->refs--;
  if (priv && t->refs == 1u << 31)
    amp_exact_table_free(t);
  else if (!priv)
    evict(0);
  pthread_mutex_unlock(&cache_lock);
}

int
amp_exact_try_get(uint32_t n, struct amp_exact_table **ret)
{
  struct amp_exact_table *t;

  pthread_mutex_lock(&cache_lock);
  t = lookup(n);
  if (t) {
    t->refs++;
    t->used = ++cache_clock;
  }
  pthread_mutex_unlock(&cache_lock);
  if (!t)
    return -ENOENT;
  *ret = t;
  return 0;
}

int
amp_exact_cached(uint32_t n)
{
  int r;

  pthread_mutex_lock(&cache_lock);
  r = lookup(n) != NULL;
  pthread_mutex_unlock(&cache_lock);
  return r;
}

void
amp_exact_cache_limit(size_t bytes)
{
  pthread_mutex_lock(&cache_lock);
  cache_max = bytes;
  evict(0);
  pthread_mutex_unlock(&cache_lock);
}

size_t
amp_exact_cache_bytes(void)
{
  size_t r;

  pthread_mutex_lock(&cache_lock);
  r = cache_total;
  pthread_mutex_unlock(&cache_lock);
  return r;
}
