/* The row statistics of the temperature strategies (libqrs internal):
   one pass over a float32 / float16 / bfloat16 row computing the scan
   (max, NaN, +inf) and the moment sums of the T = 1 softmax weights

     z = sum e,  w = sum e d,  w2 = sum e d^2,  d = x - max, e = exp(d)

   in float32 at 8 lanes, from which H = ln z - w / z and
   VH = w2 / z - (w / z)^2.

   The float sums are the *definition* of the row's entropy for those
   rows (of at least QRS__MOM_MIN_N logits): every path that needs H or
   VH (the fast selection and the double-precision oracle alike) calls
   qrs__fmoments(), so a temperature derived from H is the same number on
   both paths.  The kernel is bit-reproducible across its SSE2 and AVX2
   variants: the same IEEE operations lane by lane (fused multiply-adds
   where written, computed exactly by fmaf() on SSE2; no other
   contraction), the same fixed accumulation order.  Its error against
   exact arithmetic is bounded by qrs__fmoments_bound() (docs/sampling.md,
   "Row entropy"); the double-precision moment pass qrs__kscan_entropy()
   is the oracle the tests check that bound against. */
#ifndef QRS_MOMENTS_H
#define QRS_MOMENTS_H

#include <stddef.h>

#include "rowkern.h"

/* Shorter rows (and float64 rows) keep the double moment pass. */
#define QRS__MOM_MIN_N 256

struct qrs__fmom {
  double z, w, w2;            /* the sums (meaningless for a rejected row) */
  size_t n;                   /* row length */
  size_t nrescale;            /* times the running max grew */
  float min;                  /* the row's smallest value (NaN ignored) */
};

/* Whether rows of this dtype and length get their entropy from
   qrs__fmoments(). */
int qrs__fmoments_applies(enum qrs_dtype dtype, size_t n);

/* Values per entry of the pass's sub-block maxima. */
#define QRS__MOM_SUB 64

/* The pass: sc gets the row's scan (as qrs__kscan()), ret the sums.
   The sums are meaningless when the scan finds a NaN, +inf or no finite
   value.  mb (may be NULL; room for 8 * ceil(n / QRS__MOM_SUB) floats):
   for each QRS__MOM_SUB values of the row, 8 floats whose max is theirs
   (NaN ignored; -inf when none), so that a later search for the values
   above a threshold reads only the sub-blocks that hold one. */
void qrs__fmoments(const struct qrs__view *v, struct qrs__scan *sc,
                   struct qrs__fmom *ret, float *mb);

/* The kernel's exp for one value (tests check its error bound). */
float qrs__fmoments_expf(float d);

/* H and VH (nats, nats^2; clamped at 0) from the sums. */
void qrs__fmoments_hvh(const struct qrs__fmom *m, double *h, double *vh);

/* Upper bounds of |H - H*| and |VH - VH*|, H* and VH* the exact entropy
   and varentropy of the row's softmax (docs/sampling.md). */
void qrs__fmoments_bound(const struct qrs__fmom *m, double *eh,
                         double *evh);

#endif
