/* Logit rows for the tests of the float selection and moment kernels
   (test_fastsel.c, test_moments.c).  Header only, like testrng.h, which
   must be included first: the rows come from the including file's rnd()
   and gauss(), so each suite keeps its own seeded sequence. */
#ifndef QRS_TESTROWS_H
#define QRS_TESTROWS_H

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <valgrind/valgrind.h>

#include "sampling/kernels/rowkern.h"

/* Shapes: 0-2 Zipf rows a (ln(n/2) - ln r) + N(0,1) (peaked, mid,
   broad), 3 flat, 4 quantised (many exact ties), 5 LM rows with -inf
   masks, 6 ascending (the running max grows in every block), 7 -FLT_MAX
   masks, 8 large offset (logits near 3e4), 9 nearly equal logits, 10 tiny
   logits (float16 subnormals), 11 a few huge gaps (weights below the float
   range). */
#define TESTROWS_SHAPES 12

/* n logits of shape into f, shuffled (but the ascending shape 6); the
   masked shapes 5 and 7 get one finite maximum. */
static inline void
testrows_fill(float *f, int shape, size_t n)
{
  static const double a[3] = { 3.0, 1.7, 1.35 };
  size_t i, j;
  double rr;
  float t;

  for (i = 0; i < n; i++) {
    rr = (double)(i + 1);
    switch (shape) {
    case 0:
    case 1:
    case 2:
      f[i] = (float)(a[shape] * (log(n / 2.0) - log(rr)) + gauss());
      break;
    case 3:
      f[i] = (float)(2.0 * (log(n / 2.0 + 545.0) - log(rr + 545.0)) +
                     0.5 * gauss());
      break;
    case 4:
      f[i] = (float)floor(8.0 * rnd()) * 0.25f;
      break;
    case 5:
      f[i] = rnd() < 0.3 ? -INFINITY
                         : (float)(12.0 - 1.5 * log(rr) + 0.3 * gauss());
      break;
    case 6:
      f[i] = (float)(-20.0 + 30.0 * (double)i / (double)n + gauss());
      break;
    case 7:
      f[i] = rnd() < 0.5 ? -FLT_MAX : (float)(3.0 * gauss());
      break;
    case 8:
      f[i] = (float)(30000.0 + 4.0 * gauss());
      break;
    case 9:
      f[i] = (float)(1.0 + 1e-5 * gauss());
      break;
    case 10:
      f[i] = (float)(1e-6 * gauss());
      break;
    default:
      f[i] = rnd() < 0.01 ? (float)(40.0 * gauss())
                          : (float)(-200.0 + 60.0 * gauss());
      break;
    }
  }
  if (shape != 6) {
    for (i = n - 1; i > 0; i--) {
      j = (size_t)(rnd() * (double)(i + 1));
      t = f[i];
      f[i] = f[j];
      f[j] = t;
    }
  }
  if (shape == 5 || shape == 7)
    f[(size_t)(rnd() * (double)n)] = 11.0f;
}

/* float to bfloat16, rounding to nearest even (NaN stays a NaN). */
static inline uint16_t
testrows_bf16(float f)
{
  uint32_t b;

  memcpy(&b, &f, sizeof(b));
  if (f != f)
    return 0x7fc0u;
  b += 0x7fffu + ((b >> 16) & 1u);
  return (uint16_t)(b >> 16);
}

/* How many random triples a suite runs: $env if set, else 1000000
   (100000 under ASan, 5000 under valgrind). */
static inline unsigned long long
testrows_triples(const char *env)
{
  const char *e;

  e = getenv(env);
  if (e)
    return strtoull(e, NULL, 10);
  if (RUNNING_ON_VALGRIND)
    return 5000ull;
#ifdef __SANITIZE_ADDRESS__
  return 100000ull;
#else
  return 1000000ull;
#endif
}

/* The length of the row the random triples from number t on use (a new
   row every per_row triples): 256 to 955, and nmax for every 50th row. */
static inline size_t
testrows_random_len(unsigned long long t, unsigned long long per_row,
                    size_t nmax)
{
  size_t n;

  n = 256 + (size_t)(rnd() * 700.0);
  return t % (per_row * 50) == 0 ? nmax : n;
}

/* A row of n values of dtype dt: the floats f, or h for the 16-bit
   dtypes. */
static inline struct qrs__view
testrows_view(const float *f, const uint16_t *h, enum qrs_dtype dt,
              size_t n)
{
  struct qrs__view v;

  v.data = dt == QRS_DTYPE_F32 ? (const void *)f : (const void *)h;
  v.dtype = dt;
  v.n = n;
  return v;
}

#endif
