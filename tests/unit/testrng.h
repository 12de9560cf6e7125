/* The unit tests' random numbers: xorshift64 from a seed each test file
   picks (#define TESTRNG_SEED before including this), so every run sees
   the same rows. */
#ifndef QRS_TESTRNG_H
#define QRS_TESTRNG_H

#include <math.h>
#include <stdint.h>

static uint64_t rng = TESTRNG_SEED;

/* Uniform on [0, 1) with 53 random bits. */
static inline double
rnd(void)
{
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) * 0x1p-53;
}

/* Standard normal (Box-Muller, one of the pair). */
static inline double
gauss(void)
{
  return sqrt(-2.0 * log(rnd() + 1e-300)) * cos(6.283185307179586 * rnd());
}

#endif
