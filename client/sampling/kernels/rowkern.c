/* Vectorised passes over one logits row: the entry points.

   The loops are written once (rowkern_isa.h and the templates it
   includes, rowkern_int.h lists the pieces) with GCC vector extensions
   and compiled twice at the machine's native width: SSE2 (2 doubles, any
   x86-64 and the only variant elsewhere) and, on x86-64, AVX2 with FMA
   (4 doubles).  The variant is chosen once per process from the CPU, so a
   weight computed by one pass is the same number when another pass
   computes it.  This file picks the variant and the dtype's entry point,
   runs it in the floating-point environment the kernels need
   (rowkern.h) and handles what needs no vector pass.

   The exponential is exp(d) for d <= 0: d = k ln2 + r with |r| <= ln2/2,
   exp(r) by its Taylor polynomial of degree 13, times 2^k.  It agrees with
   glibc's exp() to 2-3 ulp.  Results that would be subnormal (d below
   about -708.4) are recomputed with libm's exp() so that exp(d) > 0 exactly
   when the C library says so; below QRS__D_UNDERFLOW the weight is 0. */
#include <float.h>
#include <math.h>

#include "rowkern_int.h"

#ifdef QRS__HAVE_AVX2_VARIANT
#include <cpuid.h>
#endif

__thread struct qrs__khint qrs__khint;

/* 0: not decided yet, 1: SSE2, 2: AVX2. */
static int kernel_level;

#ifdef QRS__HAVE_AVX2_VARIANT
/* F16C, from CPUID leaf 1 (clang's __builtin_cpu_supports() does not
   know it; the "avx2" test has checked that the OS saves the YMM
   registers). */
static int
have_f16c(void)
{
  unsigned a, b, c, d;

  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

static int
level(void)
{
  int l;

  l = __atomic_load_n(&kernel_level, __ATOMIC_RELAXED);
  if (l)
    return l;
  l = 1;
#ifdef QRS__HAVE_AVX2_VARIANT
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      have_f16c() && __builtin_cpu_supports("bmi2") &&
      __builtin_cpu_supports("popcnt"))
    l = 2;
#endif
  __atomic_store_n(&kernel_level, l, __ATOMIC_RELAXED);
  return l;
}

int
qrs__kernel_level(int force)
{
  if (force == 1 || force == 2) {
#ifndef QRS__HAVE_AVX2_VARIANT
    force = 1;
#endif
    __atomic_store_n(&kernel_level, force, __ATOMIC_RELAXED);
  }
  return level();
}

/* The variant in use, and its entry points for the row's dtype. */
static const struct qrs__kisa *
isa(void)
{
#ifdef QRS__HAVE_AVX2_VARIANT
  if (level() == 2)
    return &qrs__kisa_avx2;
#endif
  return &qrs__kisa_sse2;
}

static const struct qrs__kdt *
kdt(const struct qrs__view *v)
{
  return isa()->dt[v->dtype & 3];
}

void
qrs__kmass(const struct qrs__view *v, double m, double invt,
           const struct qrs__bound *b, double pinv, double pmin,
           unsigned flags, struct qrs__mass *ret)
{
  unsigned fe;
  int k;

  /* The second moment comes with W: one multiply more. */
  k = (flags & QRS__M_W ? 2 : 0) | (flags & QRS__M_HIST ? 1 : 0);
  fe = qrs__fpenv_enter();
  kdt(v)->mass[k](v, m, invt, b, pinv, pmin, ret);
  qrs__fpenv_leave(fe);
}

size_t
qrs__kcollect(const struct qrs__view *v, double m, double invt,
              const struct qrs__bound *b, double dlo, double dhi,
              uint32_t *pos, double *x, size_t cap, size_t *ret_above)
{
  unsigned fe;
  double thr;
  size_t r;

  fe = qrs__fpenv_enter();
  if (v->dtype != QRS_DTYPE_F64 && b->x == -INFINITY && b->i == 0 &&
      dhi == INFINITY && invt > 0.0 && isfinite(dlo) && isfinite(m)) {
    /* A cut of float values: a float compare against a threshold below
       every member (the exact test follows), at float width. */
    thr = m + dlo / invt;
    thr -= 1e-5 * (fabs(m) + fabs(dlo / invt)) + 1e-30;
    if (thr > -FLT_MAX && thr < FLT_MAX) {
      if (ret_above)
        *ret_above = 0;
      r = kdt(v)->fcollect(v, m, invt, dlo,
                                           nextafterf((float)thr, -INFINITY),
                                           pos, x, cap);
      qrs__fpenv_leave(fe);
      return r;
    }
  }
  r = kdt(v)->collect(v, m, invt, b, dlo, dhi, pos, x, cap,
                                      ret_above);
  qrs__fpenv_leave(fe);
  return r;
}

size_t
qrs__kcollect_bucket(const struct qrs__view *v, double m, double invt,
                     const struct qrs__bound *b, int key, uint32_t *pos,
                     double *x, size_t *ret_above)
{
  unsigned fe;
  size_t r;

  fe = qrs__fpenv_enter();
  r = kdt(v)->cbucket(v, m, invt, b, key, pos, x, ret_above);
  qrs__fpenv_leave(fe);
  return r;
}

void
qrs__kexp(double *v, size_t n, double m, double invt)
{
  unsigned fe;

  fe = qrs__fpenv_enter();
  isa()->kexp(v, n, m, invt);
  qrs__fpenv_leave(fe);
}

void
qrs__kscan(const struct qrs__view *v, struct qrs__scan *ret)
{
  unsigned fe;

  fe = qrs__fpenv_enter();
  kdt(v)->scan(v, ret);
  qrs__fpenv_leave(fe);
}

size_t
qrs__ktopk(const struct qrs__view *v, size_t k, uint32_t *pos, double *x)
{
  unsigned fe;
  size_t r;

  if (k == 0 || k > QRS__TOPK_HEAP || k > v->n)
    return 0;
  fe = qrs__fpenv_enter();
  r = kdt(v)->topk(v, k, pos, x, NULL);
  qrs__fpenv_leave(fe);
  return r;
}

size_t
qrs__ktopk_scan(const struct qrs__view *v, size_t k, uint32_t *pos,
                double *x, struct qrs__scan *sc)
{
  unsigned fe;
  size_t r, i;
  int odd;

  if (k == 0 || k > QRS__TOPK_HEAP || k > v->n)
    return 0;
  fe = qrs__fpenv_enter();
  odd = 1;
  r = kdt(v)->topk(v, k, pos, x, &odd);
  if (odd || v->dtype == QRS_DTYPE_F64) {
    kdt(v)->scan(v, sc);
  } else {
    /* No NaN, no +inf: the max is the largest of the top k. */
    sc->max = -INFINITY;
    for (i = 0; i < r; i++)
      sc->max = x[i] > sc->max ? x[i] : sc->max;
    sc->has_nan = sc->has_posinf = 0;
  }
  qrs__fpenv_leave(fe);
  return r;
}

double
qrs__kfloor(const struct qrs__view *v, double *ret_max)
{
  unsigned fe;
  double r;

  fe = qrs__fpenv_enter();
  r = kdt(v)->floor(v, ret_max);
  qrs__fpenv_leave(fe);
  return r;
}

void
qrs__kscan_entropy(const struct qrs__view *v, struct qrs__scan *sc,
                   struct qrs__mass *ms)
{
  struct qrs__bound all = { -INFINITY, 0 };
  unsigned fe;

  fe = qrs__fpenv_enter();
  if (kdt(v)->scanh(v, sc, ms) && !sc->has_nan &&
      !sc->has_posinf && sc->max > -INFINITY) {
    /* Subnormal weights: the sums again against the final max, exact. */
    qrs__kmass(v, sc->max, 1.0, &all, 1.0, -INFINITY, QRS__M_W, ms);
  }
  qrs__fpenv_leave(fe);
}

size_t
qrs__kfpass(const struct qrs__view *v, float m, float invt, double invtd,
            float dhead, uint32_t *hpos, float *hx, float *he, int32_t *hk,
            struct qrs__fpass *ret, const float *gm, float lo,
            float *gm_out, float dskip)
{
  unsigned fe;
  size_t r;

  fe = qrs__fpenv_enter();
  r = kdt(v)->fpass(v, m, invt, invtd, dhead, hpos, hx, he,
                                    hk, ret, m == m ? gm : NULL, lo, gm_out,
                                    dskip < QRS__FP_DMAXSKIP ? dskip
                                                    : QRS__FP_DMAXSKIP);
  qrs__fpenv_leave(fe);
  return r;
}

size_t
qrs__kfband(const struct qrs__view *v, float m, float invt, float dlo,
            float dhi, uint32_t *hpos, float *hx, float *he, int32_t *hk,
            size_t nh, const float *gm, size_t ngm, float dsh,
            double *ret_z, double *ret_zd)
{
  unsigned fe;
  size_t r;

  fe = qrs__fpenv_enter();
  r = kdt(v)->fband(v, m, invt, dlo, dhi, hpos, hx, he, hk,
                                    nh, gm, ngm, dsh, ret_z, ret_zd);
  qrs__fpenv_leave(fe);
  return r;
}

size_t
qrs__kgmax(const struct qrs__view *v, float *gm, float *ret_max,
           float *ret_min, int *ret_nan)
{
  unsigned fe;
  size_t r;

  fe = qrs__fpenv_enter();
  r = kdt(v)->gmax(v, gm, ret_max, ret_min, ret_nan);
  qrs__fpenv_leave(fe);
  return r;
}

void
qrs__kftail(const struct qrs__view *v, float m, float invt, float dlo,
            double *ret_z, double *ret_err, double *ret_w)
{
  unsigned fe;

  fe = qrs__fpenv_enter();
  kdt(v)->ftail(v, m, invt, dlo, ret_z, ret_err, ret_w);
  qrs__fpenv_leave(fe);
}

int
qrs__kcollect_scan(const struct qrs__view *v, double pinv, double dlo,
                   uint32_t *pos, double *x, size_t cap, uint32_t *tpos,
                   float *tx, struct qrs__scan *sc, size_t *ret_cnt)
{
  unsigned fe;
  size_t nt, i, cnt;
  float m;
  int odd, ok;

  if (v->dtype == QRS_DTYPE_F64 || !(pinv > 0.0) || !isfinite(dlo))
    return 0;
  fe = qrs__fpenv_enter();
  nt = kdt(v)->fcscan(v, dlo, pinv, tpos, tx, &m, &odd,
                                      &ok);
  if (!ok || odd || m == -INFINITY) {
    qrs__fpenv_leave(fe);
    return 0;
  }
  sc->max = m;
  sc->has_nan = sc->has_posinf = 0;
  /* The exact test against the final max, as qrs__kcollect() decides. */
  for (i = cnt = 0; i < nt; i++) {
    if (!(((double)tx[i] - sc->max) * pinv >= dlo))
      continue;
    if (cnt < cap) {
      pos[cnt] = tpos[i];
      x[cnt] = tx[i];
    }
    cnt++;
  }
  *ret_cnt = cnt;
  qrs__fpenv_leave(fe);
  return 1;
}

/* The float exp of the fast path for one value (tests check its error
   bound). */
float
qrs__kexpf(float d)
{
  return isa()->expf1(d);
}

double
qrs__kfloor_float(const struct qrs__view *v, double *ret_max)
{
  unsigned fe;
  double r;

  fe = qrs__fpenv_enter();
  if (v->dtype == QRS_DTYPE_F64)
    r = qrs__kfloor(v, ret_max);
  else
    r = kdt(v)->ffloor(v, ret_max);
  qrs__fpenv_leave(fe);
  return r;
}

double
qrs__kread(const struct qrs__view *v)
{
  struct qrs__scan sc;

  if (v->dtype == QRS_DTYPE_F64) {
    qrs__kscan(v, &sc);
    return sc.max;
  }
  return kdt(v)->fread(v);
}

double
qrs__kload(const struct qrs__view *v, size_t i)
{
  unsigned fe;
  double r;

  fe = qrs__fpenv_enter();
  r = qrs__kload1(v->data, i, v->dtype);
  qrs__fpenv_leave(fe);
  return r;
}

size_t
qrs__kfind(const struct qrs__view *v, double x)
{
  unsigned fe;
  size_t i;

  fe = qrs__fpenv_enter();
  for (i = 0; i < v->n; i++)
    if (qrs__kload1(v->data, i, v->dtype) == x)
      break;
  qrs__fpenv_leave(fe);
  return i;
}
