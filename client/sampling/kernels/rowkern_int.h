/* What the pieces of the row kernels share (libqrs internal, not for
   callers: they use rowkern.h).

   rowkern.c        the entry points: the variant in use, the
                    floating-point environment, the cases that need no
                    pass
   rowkern_scalar.c the scalar code both variants call (subnormal
                    weights through libm, the histogram's block merge,
                    the top-k heap and quickselect)
   rowkern_sse2.c,  the two variants, one translation unit each, built
   rowkern_avx2.c   from the template rowkern_isa.h (vector primitives
                    rowkern_vec.h, the double-precision passes
                    rowkern_exact.h, the float-width passes of the fast
                    selection rowkern_float.h, each dtype's entry points
                    rowkern_dtype.h)

   Each variant exports one struct qrs__kisa: per dtype (indexed by
   enum qrs_dtype) a struct qrs__kdt of entry points compiled for that
   dtype, so that every load in a pass is specialised. */
#ifndef QRS_ROWKERN_INT_H
#define QRS_ROWKERN_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rowkern.h"

#define QRS__KINLINE static inline __attribute__((always_inline))

/* Below this, exp() is subnormal: those lanes go through libm. */
#define QRS__D_NORMAL (-708.3964185322641)
/* Clamp for the weighted sums, so that 0 * d stays 0 for masked logits. */
#define QRS__D_CLAMP (-746.0)
/* Values per block of the floors and the fused scans (read from memory
   once, then from L1). */
#define QRS__FLOOR_BLOCK 1024

/* IEEE half to float with integer operations only: no arithmetic on a
   subnormal, so denormals-are-zero / flush-to-zero modes (set by
   torch.set_flush_denormal(True) or -ffast-math code in the same process)
   cannot change the value, and it equals what F16C's vcvtph2ps gives. */
QRS__KINLINE float
qrs__half_to_float(uint16_t h)
{
  uint32_t sign, em, mant, bits;
  int sh;
  float f;

  sign = (uint32_t)(h & 0x8000u) << 16;
  em = h & 0x7fffu;
  if (em >= 0x7c00u) {
    bits = sign | 0x7f800000u | ((em & 0x3ffu) << 13);
  } else if (em >= 0x0400u) {
    bits = sign | ((em + ((127u - 15u) << 10)) << 13);
  } else if (em == 0) {
    bits = sign;
  } else {
    /* Subnormal half m * 2^-24: normalise m (a float normal). */
    mant = em;
    sh = __builtin_clz(mant) - 21;      /* shifts that bring bit 10 up */
    mant = (mant << sh) & 0x3ffu;
    bits = sign | ((uint32_t)(127 - 15 + 1 - sh) << 23) | (mant << 13);
  }
  memcpy(&f, &bits, sizeof(f));
  return f;
}

QRS__KINLINE float
qrs__bf16_to_float(uint16_t h)
{
  uint32_t bits;
  float f;

  bits = (uint32_t)h << 16;
  memcpy(&f, &bits, sizeof(f));
  return f;
}

/* Element i of a row of dtype dt, exactly, in double. */
QRS__KINLINE double
qrs__kload1(const void *data, size_t i, int dt)
{
  float f;
  double d;
  uint16_t h;

  switch (dt) {
  case QRS_DTYPE_F32:
    memcpy(&f, (const char *)data + i * 4, 4);
    return f;
  case QRS_DTYPE_F16:
    memcpy(&h, (const char *)data + i * 2, 2);
    return qrs__half_to_float(h);
  case QRS_DTYPE_BF16:
    memcpy(&h, (const char *)data + i * 2, 2);
    return qrs__bf16_to_float(h);
  default:
    memcpy(&d, (const char *)data + i * 8, 8);
    return d;
  }
}

/* Elements per histogram block of the mass pass: its head entries stay
   in L1. */
#define QRS__HBLOCK 512

/* One block's head entries (buckets below the split). */
struct qrs__hblock {
  size_t n;
  double e[QRS__HBLOCK], w[QRS__HBLOCK], x[QRS__HBLOCK];
  int32_t k[QRS__HBLOCK];
  uint32_t p[QRS__HBLOCK];
};

/* Add a block's head entries to the histograms h (and hw, may be NULL)
   and to ret's head list while it has room. */
void qrs__khead_block(struct qrs__mass *ret, const struct qrs__hblock *hb,
                      double (*h)[QRS__NBUCKET + 1],
                      double (*hw)[QRS__NBUCKET + 1]);

/* The mass pass's subnormal weights (logit gaps above 708 T), added to
   ret exactly through libm; fw, fh: the pass's QRS__M_W and QRS__M_HIST. */
void qrs__kmass_tiny(const struct qrs__view *v, double m, double invt,
                     const struct qrs__bound *b, double pinv, double pmin,
                     struct qrs__mass *ret, int fw, int fh);

/* Min-heap of (x, pos) in lexicographic order, for top-k. */
struct qrs__hitem {
  double x;
  uint32_t pos;
};

/* Restore the heap property of h[0..n) below i. */
void qrs__khsift(struct qrs__hitem *h, size_t n, size_t i);

/* The k-th largest (1 <= k <= n) of a[0..n) (no NaN); reorders a. */
float qrs__kkth_largest(float *a, size_t n, size_t k);

/* One variant's entry points for one dtype (rowkern_dtype.h has each
   one's contract: they are the qrs__k* functions of rowkern.h without
   the checks and the floating-point environment).  The float-width
   passes are NULL for float64 rows. */
struct qrs__kdt {
  /* by (QRS__M_W ? 2 : 0) | (QRS__M_HIST ? 1 : 0) */
  void (*mass[4])(const struct qrs__view *, double, double,
                  const struct qrs__bound *, double, double,
                  struct qrs__mass *);
  size_t (*collect)(const struct qrs__view *, double, double,
                    const struct qrs__bound *, double, double, uint32_t *,
                    double *, size_t, size_t *);
  size_t (*cbucket)(const struct qrs__view *, double, double,
                    const struct qrs__bound *, int, uint32_t *, double *,
                    size_t *);
  void (*scan)(const struct qrs__view *, struct qrs__scan *);
  size_t (*topk)(const struct qrs__view *, size_t, uint32_t *, double *,
                 int *);
  double (*floor)(const struct qrs__view *, double *);
  int (*scanh)(const struct qrs__view *, struct qrs__scan *,
               struct qrs__mass *);
  size_t (*fcollect)(const struct qrs__view *, double, double, double,
                     float, uint32_t *, double *, size_t);
  double (*ffloor)(const struct qrs__view *, double *);
  double (*fread)(const struct qrs__view *);
  size_t (*fpass)(const struct qrs__view *, float, float, double, float,
                  uint32_t *, float *, float *, int32_t *,
                  struct qrs__fpass *, const float *, float, float *,
                  float);
  size_t (*fband)(const struct qrs__view *, float, float, float, float,
                  uint32_t *, float *, float *, int32_t *, size_t,
                  const float *, size_t, float, double *, double *);
  size_t (*gmax)(const struct qrs__view *, float *, float *, float *,
                 int *);
  void (*ftail)(const struct qrs__view *, float, float, float, double *,
                double *, double *);
  size_t (*fcscan)(const struct qrs__view *, double, double, uint32_t *,
                   float *, float *, int *, int *);
};

/* One variant: its dtypes' entry points and what needs no row. */
struct qrs__kisa {
  const struct qrs__kdt *dt[4];           /* by enum qrs_dtype */
  void (*kexp)(double *, size_t, double, double);
  float (*expf1)(float);
};

/* SSE2 (every build); AVX2 + FMA + F16C + BMI2 (x86-64). */
extern const struct qrs__kisa qrs__kisa_sse2;
#if defined(__x86_64__) && defined(__GNUC__)
#define QRS__HAVE_AVX2_VARIANT 1
extern const struct qrs__kisa qrs__kisa_avx2;
#endif

#endif
