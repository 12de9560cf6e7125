/* Vectorised passes over one logits row (libqrs internal).

   A row is viewed as n values of one dtype.  Every pass converts float16 /
   bfloat16 / float32 to double on the fly (no converted copy of the row is
   ever made) and works in double precision.  The exponential used by every
   pass is the same polynomial (about 2 ulp), so a weight computed by one
   pass is bit-identical to the same weight computed by another. */
#ifndef QRS_ROWKERN_H
#define QRS_ROWKERN_H

#include <stddef.h>
#include <stdint.h>

#include <qrs/sampler.h>

struct qrs__view {
  const void *data;
  enum qrs_dtype dtype;
  size_t n;
};

/* A set of row positions: (x, i) is in the set iff (x, i) >= (bx, bi) in
   lexicographic order, i.e. x > bx, or x == bx and i >= bi.  Since the
   selection order is "larger logit first, equal logits: higher position
   first", every prefix of that order is such a set.  { -INFINITY, 0 } is
   the whole row. */
struct qrs__bound {
  double x;
  size_t i;
};

/* Band edges in units of d = (x - max) / T: the mass pass reports the mass
   of the elements with d >= edge[j]. */
#define QRS__NEDGE 6
extern const double qrs__edge[QRS__NEDGE];

/* exp(d) > 0 in binary64 iff d >= QRS__D_UNDERFLOW. */
#define QRS__D_UNDERFLOW (-745.1332191019411)

/* Largest k for qrs__ktopk(). */
#define QRS__TOPK_HEAP 1024

struct qrs__scan {
  double max;             /* largest non-NaN value (-inf if none) */
  int has_nan;
  int has_posinf;
};

struct qrs__mass {
  double z;                   /* sum of e = exp(d) over the set */
  double w;                   /* sum of e * d (QRS__M_W) */
  double w2;                  /* sum of e * d * d (QRS__M_W2) */
  double bz[QRS__NEDGE];      /* sum of e where d >= edge[j] (BANDS) */
  double bw[QRS__NEDGE];      /* sum of e * d there (BANDS and W) */
  size_t n_in;                /* elements in the set */
  size_t nz;                  /* elements in the set with e > 0 */
  double xmin;                /* smallest x in the set (+inf: empty) */
};

enum {
  QRS__M_W = 1,
  QRS__M_W2 = 2,
  QRS__M_BANDS = 4,
};

double qrs__kload(const struct qrs__view *v, size_t i);
void qrs__kscan(const struct qrs__view *v, struct qrs__scan *ret);
size_t qrs__kfind(const struct qrs__view *v, double x);

/* Mass of the set b intersected with { (x - m) * pinv >= pmin } (pmin
   -INFINITY: no predicate) at inverse temperature invt:
   d = (x - m) * invt, e = exp(d). */
void qrs__kmass(const struct qrs__view *v, double m, double invt,
                const struct qrs__bound *b, double pinv, double pmin,
                unsigned flags, struct qrs__mass *ret);

/* The positions (ascending) and values of the set b's elements with
   dlo <= d < dhi (dhi may be +INFINITY), d = (x - m) * invt, computed
   exactly as in qrs__kmass().  Stores at most cap of them and returns how
   many there are; *ret_above (may be NULL) gets the number of set elements
   with d >= dhi. */
size_t qrs__kcollect(const struct qrs__view *v, double m, double invt,
                     const struct qrs__bound *b, double dlo, double dhi,
                     uint32_t *pos, double *x, size_t cap,
                     size_t *ret_above);

/* In place: v[i] = exp((v[i] - m) * invt), bit-identical to the weights of
   qrs__kmass(). */
void qrs__kexp(double *v, size_t n, double m, double invt);

/* The k (1 <= k <= QRS__TOPK_HEAP, k <= n) largest elements in the
   selection order, unordered.  Returns k. */
size_t qrs__ktopk(const struct qrs__view *v, size_t k, uint32_t *pos,
                  double *x);

/* The benchmark floor: one pass computing max and sum(exp(x - max)).
   Returns the sum; *ret_max gets the max. */
double qrs__kfloor(const struct qrs__view *v, double *ret_max);

/* The kernel variant in use: 1 SSE2, 2 AVX2+FMA.  force 1 or 2 switches
   (tests run both; a variant the build lacks falls back to 1); any other
   value just reports. */
int qrs__kernel_level(int force);

#endif
