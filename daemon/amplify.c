/* Amplifiers (reference spec 8).  zscore_mean reproduces the reference's u
   bit for bit: the byte sum is exact, the mean is one correctly rounded
   division, and Phi uses the C library erf like CPython's math.erf. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "amplify.h"

static const char *const amp_names[] = {
  [AMP_ZSCORE_MEAN] = "zscore_mean",
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

int
amp_zscore_mean(const struct amp_params *p, const uint8_t *b, size_t n,
                struct amp_result *ret)
{
  double mean, sem, z, u, eps;
  uint64_t sum;

  if (n == 0)
    return -EINVAL;
  sum = amp_byte_sum(b, n);
  mean = (double)sum / (double)n;
  sem = p->population_std / sqrt((double)n);
  z = (mean - p->population_mean) / sem;
  u = 0.5 * (1.0 + erf(z / sqrt(2.0)));
  eps = p->epsilon;
  u = fmax(eps, fmin(1.0 - eps, u));

  ret->u = u;
  ret->z = z;
  ret->sample_mean = mean;
  ret->sem = sem;
  ret->byte_sum = sum;
  ret->sample_count = n;
  return 0;
}
