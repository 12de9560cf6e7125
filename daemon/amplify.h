/* Amplifiers: N raw bytes -> one uniform u in (0,1) (reference spec 8). */
#ifndef QRSD_AMPLIFY_H
#define QRSD_AMPLIFY_H

#include <stddef.h>
#include <stdint.h>

enum amp_type {
  AMP_ZSCORE_MEAN,
  AMP_SERVER,               /* the upstream's PurityService integrates */
};

struct amp_params {
  double population_mean;
  double population_std;
  double epsilon;           /* u is clamped to [epsilon, 1 - epsilon] */
};

struct amp_result {
  double u;
  double z;
  double sample_mean;
  double sem;
  uint64_t byte_sum;
  size_t sample_count;
};

/* The amplifier called name, or -1 if there is none. */
int amp_find(const char *name);
const char *amp_name(enum amp_type t);

/* Exact sum of n bytes. */
uint64_t amp_byte_sum(const uint8_t *b, size_t n);

/* zscore_mean: M = sum/n, z = (M - mean) / (std / sqrt(n)),
   u = clamp(Phi(z)).  Returns 0, or -EINVAL for n == 0. */
int amp_zscore_mean(const struct amp_params *p, const uint8_t *b, size_t n,
                    struct amp_result *ret);

#endif
