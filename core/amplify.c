/* Amplifiers, those of qr-sampler's amplification/ package.  zscore_mean
   reproduces the reference's u bit for bit: the byte sum is exact, the
   mean is one correctly rounded division, and Phi uses the C library erf
   like CPython's math.erf.  Calibrations use numpy's pairwise summation
   for the same reason. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amplify.h"

static const char *const amp_names[] = {
  [AMP_ZSCORE_MEAN] = "zscore_mean",
  [AMP_ZSCORE_THOUGHT] = "zscore_thought",
  [AMP_ECDF] = "ecdf",
  [AMP_EXACT] = "exact",
  [AMP_SERVER] = "server",
};

int
amp_find(const char *name)
{
  size_t i;

  for (i = 0; i < sizeof(amp_names) / sizeof(amp_names[0]); i++)
    if (!strcmp(name, amp_names[i]))
      return (int)i;
  return -1;
}

const char *
amp_name(enum amp_type t)
{
  return amp_names[t];
}

const char *
amp_known_names(void)
{
  return "zscore_mean, zscore_thought, ecdf, exact, server";
}

const char *
amp_strerror(enum amp_type t, int err)
{
  switch (err) {
  case AMP_E_EMPTY:
    return "Cannot amplify empty byte sequence";
  case AMP_E_UNCALIBRATED:
    return "ECDF amplifier has not been calibrated. Call calibrate() first.";
  case AMP_E_ZERO_VARIANCE:
    if (t == AMP_ECDF)
      return "ECDF calibration produced zero variance \u2014 all samples "
             "identical";
    return "z-score calibration produced zero block-mean variance \u2014 the "
           "source is stuck; cannot define an empirical baseline";
  case -ENOMEM:
    return "out of memory";
  default:
    return "amplifier error";
  }
}

uint64_t
amp_byte_sum(const uint8_t *b, size_t n)
{
  const uint64_t lo = 0x00ff00ff00ff00ffull;
  uint64_t total, acc, x;
  size_t i, words;

  /* Eight bytes at a time in four 16-bit lanes (portable, and fast at
     -O2 where the compiler does not vectorise): 128 words add at most
     128 * 2 * 255 = 65280 to a lane, so the lanes never carry. */
  total = 0;
  while (n >= 8) {
    words = n / 8 < 128 ? n / 8 : 128;
    acc = 0;
    for (i = 0; i < words; i++) {
      memcpy(&x, b + 8 * i, sizeof(x));
      acc += (x & lo) + ((x >> 8) & lo);
    }
    acc = (acc & 0x0000ffff0000ffffull) + ((acc >> 16) & 0x0000ffff0000ffffull);
    total += (acc & 0xffffffffull) + (acc >> 32);
    b += 8 * words;
    n -= 8 * words;
  }
  while (n--)
    total += *b++;
  return total;
}

double
amp_phi_clamped(double z, double eps)
{
  double u;

  u = 0.5 * (1.0 + erf(z / sqrt(2.0)));
  return fmax(eps, fmin(1.0 - eps, u));
}

int
amp_zscore_sum(const struct amp_params *p, uint64_t sum, size_t n,
               struct amp_result *ret)
{
  double mean, sem, z;

  if (n == 0)
    return AMP_E_EMPTY;
  mean = (double)sum / (double)n;
  sem = p->population_std / sqrt((double)n);
  z = (mean - p->population_mean) / sem;

  memset(ret, 0, sizeof(*ret));
  ret->u = amp_phi_clamped(z, p->epsilon);
  ret->z = z;
  ret->sample_mean = mean;
  ret->sem = sem;
  ret->byte_sum = sum;
  ret->sample_count = n;
  return 0;
}

int
amp_zscore_mean(const struct amp_params *p, const uint8_t *b, size_t n,
                struct amp_result *ret)
{
  if (n == 0)
    return AMP_E_EMPTY;
  return amp_zscore_sum(p, amp_byte_sum(b, n), n, ret);
}

void
amp_thought_begin(struct amp_thought *t)
{
  t->sum = 0;
  t->count = 0;
}

void
amp_thought_add(struct amp_thought *t, uint64_t byte_sum, uint64_t n)
{
  t->sum += byte_sum;
  t->count += n;
}

void
amp_thought_aggregate(const struct amp_thought *t, const struct amp_params *p,
                      struct amp_aggregate *ret)
{
  double mean, sem;

  if (t->count == 0) {
    ret->sample_mean = p->population_mean;
    ret->z = 0.0;
    ret->sem = 0.0;
    ret->sample_count = 0;
    ret->bias = 0.0;
    ret->u = 0.5;
    return;
  }
  mean = (double)t->sum / (double)t->count;
  sem = p->population_std / sqrt((double)t->count);
  ret->sample_mean = mean;
  ret->bias = mean - p->population_mean;
  ret->sem = sem;
  ret->z = ret->bias / sem;
  ret->sample_count = t->count;
  ret->u = amp_phi_clamped(ret->z, p->epsilon);
}

double
amp_pairwise_sum(const double *a, size_t n)
{
  double r[8], res;
  size_t i, n2;

  /* numpy/core/src/umath/loops_utils.h.src: pairwise_sum */
  if (n < 8) {
    res = 0.0;
    for (i = 0; i < n; i++)
      res += a[i];
    return res;
  }
  if (n <= 128) {
    for (i = 0; i < 8; i++)
      r[i] = a[i];
    for (i = 8; i < n - n % 8; i += 8) {
      r[0] += a[i + 0];
      r[1] += a[i + 1];
      r[2] += a[i + 2];
      r[3] += a[i + 3];
      r[4] += a[i + 4];
      r[5] += a[i + 5];
      r[6] += a[i + 6];
      r[7] += a[i + 7];
    }
    res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; i++)
      res += a[i];
    return res;
  }
  n2 = n / 2;
  n2 -= n2 % 8;
  return amp_pairwise_sum(a, n2) + amp_pairwise_sum(a + n2, n - n2);
}

int
amp_zscore_calibrate(const double *m, size_t count, uint32_t sample_count,
                     double *ret_mean, double *ret_std)
{
  double mean, s, *d;
  size_t i;

  if (count < 2)
    return AMP_E_ZERO_VARIANCE;         /* ddof=1 std of one value: 0 */
  d = malloc(count * sizeof(*d));
  if (!d)
    return -ENOMEM;
  mean = amp_pairwise_sum(m, count) / (double)count;
  for (i = 0; i < count; i++)
    d[i] = (m[i] - mean) * (m[i] - mean);
  s = sqrt(amp_pairwise_sum(d, count) / (double)(count - 1));
  free(d);
  if (s == 0.0)
    return AMP_E_ZERO_VARIANCE;
  *ret_mean = mean;
  *ret_std = s * sqrt((double)sample_count);
  return 0;
}

int
amp_calib_lookup(struct amp_calib_cache *c, uint32_t sample_count,
                 uint32_t blocks, double *ret_mean, double *ret_std)
{
  unsigned i;

  for (i = 0; i < c->n; i++) {
    if (c->e[i].sample_count == sample_count && c->e[i].blocks == blocks) {
      c->e[i].used = ++c->clock;
      *ret_mean = c->e[i].mean;
      *ret_std = c->e[i].std;
      return 1;
    }
  }
  return 0;
}

void
amp_calib_store(struct amp_calib_cache *c, uint32_t sample_count,
                uint32_t blocks, double mean, double std)
{
  unsigned i, slot;

  slot = c->n;
  for (i = 0; i < c->n; i++) {
    if (c->e[i].sample_count == sample_count && c->e[i].blocks == blocks) {
      slot = i;
      break;
    }
  }
  if (slot == AMP_CALIB_CACHE) {
    slot = 0;
    for (i = 1; i < c->n; i++)
      if (c->e[i].used < c->e[slot].used)
        slot = i;
  } else if (slot == c->n) {
    c->n++;
  }
  c->e[slot].sample_count = sample_count;
  c->e[slot].blocks = blocks;
  c->e[slot].mean = mean;
  c->e[slot].std = std;
  c->e[slot].used = ++c->clock;
}

static int
cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;

  return (x > y) - (x < y);
}

int
amp_ecdf_calibrate(struct amp_ecdf *e, const double *m, size_t count)
{
  double *s;
  size_t i;

  /* The population std is exactly 0 iff all means are equal (count 0
     and 1 included). */
  for (i = 1; i < count; i++)
    if (m[i] != m[0])
      break;
  if (i >= count)
    return AMP_E_ZERO_VARIANCE;
  s = malloc(count * sizeof(*s));
  if (!s)
    return -ENOMEM;
  memcpy(s, m, count * sizeof(*s));
  qsort(s, count, sizeof(*s), cmp_double);
  free(e->means);
  e->means = s;
  e->n = count;
  return 0;
}

void
amp_ecdf_free(struct amp_ecdf *e)
{
  free(e->means);
  e->means = NULL;
  e->n = 0;
}

int
amp_ecdf(const struct amp_ecdf *e, const struct amp_params *p,
         const uint8_t *b, size_t n, struct amp_result *ret)
{
  size_t lo, hi, mid;
  double m, u;
  int r;

  if (!e || !e->means)
    return AMP_E_UNCALIBRATED;
  r = amp_zscore_mean(p, b, n, ret);
  if (r < 0)
    return r;
  /* bisect_right: the number of calibration means <= M */
  m = ret->sample_mean;
  lo = 0;
  hi = e->n;
  while (lo < hi) {
    mid = lo + (hi - lo) / 2;
    if (m < e->means[mid])
      hi = mid;
    else
      lo = mid + 1;
  }
  u = (double)(lo + 1) / (double)(e->n + 1);
  ret->u = fmax(p->epsilon, fmin(1.0 - p->epsilon, u));
  ret->ecdf_rank = lo;
  return 0;
}
