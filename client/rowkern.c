/* Vectorised passes over one logits row.

   The loops are written once (rowkern_impl.h) with GCC vector extensions
   and compiled twice at the machine's native width: SSE2 (2 doubles, any
   x86-64 and the only variant elsewhere) and, on x86-64, AVX2 with FMA
   (4 doubles).  The variant is chosen once per process from the CPU, so a
   weight computed by one pass is the same number when another pass
   computes it.

   The exponential is exp(d) for d <= 0: d = k ln2 + r with |r| <= ln2/2,
   exp(r) by its Taylor polynomial of degree 13, times 2^k.  It agrees with
   glibc's exp() to 2-3 ulp.  Results that would be subnormal (d below
   about -708.4) are recomputed with libm's exp() so that exp(d) > 0 exactly
   when the C library says so; below QRS__D_UNDERFLOW the weight is 0. */
#include <float.h>
#include <math.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "rowkern.h"


#define INLINE static inline __attribute__((always_inline))

/* Below this, exp() is subnormal: those lanes go through libm. */
#define D_NORMAL (-708.3964185322641)
/* Clamp for the weighted sums, so that 0 * d stays 0 for masked logits. */
#define D_CLAMP (-746.0)
#define FLOOR_BLOCK 1024

typedef void (*mass_fn)(const struct qrs__view *, double, double,
                        const struct qrs__bound *, double, double,
                        struct qrs__mass *);
typedef size_t (*collect_fn)(const struct qrs__view *, double, double,
                             const struct qrs__bound *, double, double,
                             uint32_t *, double *, size_t, size_t *);
typedef void (*scan_fn)(const struct qrs__view *, struct qrs__scan *);
typedef size_t (*cbucket_fn)(const struct qrs__view *, double, double,
                             const struct qrs__bound *, int, uint32_t *,
                             double *, size_t *);
typedef size_t (*topk_fn)(const struct qrs__view *, size_t, uint32_t *,
                          double *);
typedef size_t (*topkscan_fn)(const struct qrs__view *, size_t, uint32_t *,
                              double *, int *);
typedef double (*floor_fn)(const struct qrs__view *, double *);
typedef int (*scanh_fn)(const struct qrs__view *, struct qrs__scan *,
                        struct qrs__mass *);
typedef void (*exp_fn)(double *, size_t, double, double);
typedef size_t (*fpass_fn)(const struct qrs__view *, float, float, double,
                           float, uint32_t *, float *, float *, int32_t *,
                           struct qrs__fpass *, const float *, float,
                           float *, float);
typedef size_t (*fband_fn)(const struct qrs__view *, float, float, float,
                           float, uint32_t *, float *, float *, int32_t *,
                           size_t, const float *, size_t, float, double *,
                           double *);
typedef size_t (*gmax_fn)(const struct qrs__view *, float *, float *, float *,
                          int *);
typedef void (*ftail_fn)(const struct qrs__view *, float, float, float,
                         double *, double *, double *);
typedef size_t (*fcscan_fn)(const struct qrs__view *, double, double,
                            uint32_t *, float *, float *, int *, int *);
typedef size_t (*fcollect_fn)(const struct qrs__view *, double, double,
                              double, float, uint32_t *, double *, size_t);

/* IEEE half to float with integer operations only: no arithmetic on a
   subnormal, so denormals-are-zero / flush-to-zero modes (set by
   torch.set_flush_denormal(True) or -ffast-math code in the same process)
   cannot change the value, and it equals what F16C's vcvtph2ps gives. */
INLINE float
half_to_float(uint16_t h)
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

INLINE float
bf16_to_float(uint16_t h)
{
  uint32_t bits;
  float f;

  bits = (uint32_t)h << 16;
  memcpy(&f, &bits, sizeof(f));
  return f;
}

INLINE double
load1(const void *data, size_t i, int dt)
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
    return half_to_float(h);
  case QRS_DTYPE_BF16:
    memcpy(&h, (const char *)data + i * 2, 2);
    return bf16_to_float(h);
  default:
    memcpy(&d, (const char *)data + i * 8, 8);
    return d;
  }
}

/* Subnormal weights (logit gaps above 708 T): rare, exact via libm. */
static void
mass_tiny(const struct qrs__view *v, double m, double invt,
          const struct qrs__bound *b, double pinv, double pmin,
          struct qrs__mass *ret, int fw, int fh)
{
  double xi, di, ei;
  size_t i;

  for (i = 0; i < v->n; i++) {
    xi = load1(v->data, i, v->dtype);
    if (!(xi > b->x || (xi == b->x && i >= b->i)))
      continue;
    if (pmin > -INFINITY && !((xi - m) * pinv >= pmin))
      continue;
    di = (xi - m) * invt;
    if (!(di < D_NORMAL && di >= QRS__D_UNDERFLOW))
      continue;
    ei = exp(di);
    ret->z += ei;
    ret->nz += ei > 0.0;
    /* Bucket QRS__NBUCKET - 1: in the tail unless fully resolved. */
    if (fh && ret->hsplit < QRS__NBUCKET) {
      ret->tz += ei;
      if (fw)
        ret->tw += ei * di;
    } else if (fh) {
      ret->hz[QRS__NBUCKET - 1] += ei;
      if (fw)
        ret->hw[QRS__NBUCKET - 1] += ei * di;
    }
    if (fw) {
      ret->w += ei * di;
      ret->w2 += ei * di * di;
    }
  }
}

/* Elements per histogram block: its head entries stay in L1. */
#define HBLOCK 512

/* One block's head entries (buckets below the split). */
struct hblock {
  size_t n;
  double e[HBLOCK], w[HBLOCK], x[HBLOCK];
  int32_t k[HBLOCK];
  uint32_t p[HBLOCK];
};

/* Add a block's head entries to the histograms (two interleaved copies,
   so that a run of equal buckets does not serialise) and to the head
   list while it has room. */
static void
head_block(struct qrs__mass *ret, const struct hblock *hb,
           double (*h)[QRS__NBUCKET + 1], double (*hw)[QRS__NBUCKET + 1])
{
  size_t k, o;

  for (k = 0; k + 2 <= hb->n; k += 2) {
    h[0][hb->k[k]] += hb->e[k];
    h[1][hb->k[k + 1]] += hb->e[k + 1];
  }
  if (k < hb->n)
    h[0][hb->k[k]] += hb->e[k];
  if (hw) {
    for (k = 0; k + 2 <= hb->n; k += 2) {
      hw[0][hb->k[k]] += hb->w[k];
      hw[1][hb->k[k + 1]] += hb->w[k + 1];
    }
    if (k < hb->n)
      hw[0][hb->k[k]] += hb->w[k];
  }
  if (ret->nhead > ret->hcap || ret->nhead + hb->n > ret->hcap) {
    ret->nhead = SIZE_MAX;   /* too many: searches collect instead */
    return;
  }
  o = ret->nhead;
  memcpy(ret->hpos + o, hb->p, hb->n * sizeof(*ret->hpos));
  memcpy(ret->hx + o, hb->x, hb->n * sizeof(*ret->hx));
  memcpy(ret->he + o, hb->e, hb->n * sizeof(*ret->he));
  memcpy(ret->hk + o, hb->k, hb->n * sizeof(*ret->hk));
  ret->nhead += hb->n;
}

/* Min-heap of (x, pos) in lexicographic order, for top-k. */
struct hitem {
  double x;
  uint32_t pos;
};

INLINE int
hless(const struct hitem *a, const struct hitem *b)
{
  return a->x < b->x || (a->x == b->x && a->pos < b->pos);
}

static void
hsift(struct hitem *h, size_t n, size_t i)
{
  struct hitem t;
  size_t c;

  t = h[i];
  for (;;) {
    c = 2 * i + 1;
    if (c >= n)
      break;
    if (c + 1 < n && hless(&h[c + 1], &h[c]))
      c++;
    if (!hless(&h[c], &t))
      break;
    h[i] = h[c];
    i = c;
  }
  h[i] = t;
}

/* The k-th largest (1 <= k <= n) of a[0..n) (no NaN): quickselect with
   Hoare's partition around the middle element (equal values split
   evenly; lo <= j < hi, so every round shrinks the range); reorders a. */
static float
kth_largest_f(float *a, size_t n, size_t k)
{
  ptrdiff_t lo = 0, hi = (ptrdiff_t)n - 1, i, j, want = (ptrdiff_t)k - 1;
  float p, t;

  while (lo < hi) {
    p = a[lo + (hi - lo) / 2];
    i = lo - 1;
    j = hi + 1;
    for (;;) {
      do
        i++;
      while (a[i] > p);
      do
        j--;
      while (a[j] < p);
      if (i >= j)
        break;
      t = a[i];
      a[i] = a[j];
      a[j] = t;
    }
    /* a[lo..j] >= p >= a[j+1..hi] */
    if (want <= j)
      hi = j;
    else
      lo = j + 1;
  }
  return a[want];
}

/* The baseline variant: SSE2 (or the platform's 128-bit vectors),
   2 lanes. */
typedef double v2df __attribute__((vector_size(16)));
typedef int64_t v2di __attribute__((vector_size(16)));
typedef float v2sf __attribute__((vector_size(8)));
typedef int32_t v4si __attribute__((vector_size(16)));
typedef float v4sf __attribute__((vector_size(16)));

INLINE v2df
load_f32_2(const float *p)
{
  v2sf f;

  memcpy(&f, p, sizeof(f));
  return __builtin_convertvector(f, v2df);
}

INLINE void
store_keys_2(int32_t *p, v2df t)
{
  p[0] = (int32_t)t[0];
  p[1] = (int32_t)t[1];
}

INLINE int
anyk_4(v4si m)
{
  return (m[0] | m[1] | m[2] | m[3]) != 0;
}

#define KS(name) name##_sse2
#define KS_TARGET
#define KS_VMAX(a, b) \
  ((v4sf)(((v4si)((a) > (b)) & (v4si)(a)) | (~(v4si)((a) > (b)) & (v4si)(b))))
#define KS_VMIN(a, b) \
  ((v4sf)(((v4si)((a) < (b)) & (v4si)(a)) | (~(v4si)((a) < (b)) & (v4si)(b))))
#define KS_LOHALF(f) \
  __builtin_convertvector(__builtin_shufflevector((f), (f), 0, 1), v2df)
#define KS_HIHALF(f) \
  __builtin_convertvector(__builtin_shufflevector((f), (f), 2, 3), v2df)
#define KS_LOAD_F32(p) load_f32_2(p)
#define KS_STORE_KEYS(p, t) store_keys_2(p, t)
#define KS_ANYK(m) anyk_4(m)
#define KW 4
#define vk v4si
#define vfl v4sf
#if defined(__x86_64__) && defined(__GNUC__)
#define KS_MOVEMASK(m) _mm_movemask_pd((__m128d)(m))
#define KS_MOVEMASKF(m) _mm_movemask_ps((__m128)(m))
#endif
#define VW 2
#define vd v2df
#define vi v2di
#include "rowkern_impl.h"
#undef KS
#undef KS_TARGET
#undef KS_VMAX
#undef KS_VMIN
#undef KS_LOHALF
#undef KS_HIHALF
#undef KS_LOAD_F32
#undef KS_STORE_KEYS
#undef KS_MOVEMASK
#undef KS_MOVEMASKF
#undef KS_LOADF_F16
#undef KS_LOADF_BF16
#undef KS_ANYK
#undef KW
#undef vk
#undef vfl
#undef VW
#undef vd
#undef vi

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_AVX2_VARIANT 1
/* AVX2 + FMA (+ F16C for float16 rows), 4 lanes. */
typedef double v4df __attribute__((vector_size(32)));
typedef int64_t v4di __attribute__((vector_size(32)));
typedef int32_t v8si __attribute__((vector_size(32)));
typedef float v8sf __attribute__((vector_size(32)));

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,bmi2,popcnt")
#define KS(name) name##_avx2
#define KS_TARGET
#define KS_VMAX(a, b) ((v8sf)_mm256_max_ps((__m256)(a), (__m256)(b)))
#define KS_VMIN(a, b) ((v8sf)_mm256_min_ps((__m256)(a), (__m256)(b)))
#define KS_LOHALF(f) ((v4df)_mm256_cvtps_pd(_mm256_castps256_ps128((__m256)(f))))
#define KS_HIHALF(f) \
  ((v4df)_mm256_cvtps_pd(_mm256_extractf128_ps((__m256)(f), 1)))
#define KS_LOAD_F32(p) ((v4df)_mm256_cvtps_pd(_mm_loadu_ps(p)))
#define KS_MOVEMASK(m) _mm256_movemask_pd((__m256d)(m))
#define KS_MOVEMASKF(m) _mm256_movemask_ps((__m256)(m))
#define KS_LOADF_F16(p) \
  ((v8sf)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p))))
#define KS_LOADF_BF16(p) \
  ((v8sf)_mm256_slli_epi32( \
      _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p))), 16))
#define KS_ANYK(m) (_mm256_movemask_epi8((__m256i)(m)) != 0)
/* The permutation that packs the lanes of an 8-bit mask to the front. */
#define KS_COMPRESS(mask) \
  ((v8si)_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)_pext_u64( \
      0x0706050403020100ull, \
      _pdep_u64((mask), 0x0101010101010101ull) * 0xffu))))
#define KS_PERMSTORE(p, a, perm) \
  _mm256_storeu_si256((__m256i *)(void *)(p), \
                      _mm256_permutevar8x32_epi32((__m256i)(a), \
                                                  (__m256i)(perm)))
#define KW 8
#define vk v8si
#define vfl v8sf
#define KS_STORE_KEYS(p, t) \
  _mm_storeu_si128((__m128i *)(p), _mm256_cvttpd_epi32((__m256d)(t)))
#define KS_LOAD_F16(p) \
  ((v4df)_mm256_cvtps_pd(_mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)(p)))))
#define KS_LOAD_BF16(p) \
  ((v4df)_mm256_cvtps_pd(_mm_castsi128_ps(_mm_slli_epi32( \
      _mm_cvtepu16_epi32(_mm_loadl_epi64((const __m128i *)(p))), 16))))
#define VW 4
#define vd v4df
#define vi v4di
#include "rowkern_impl.h"
#undef KS
#undef KS_TARGET
#undef KS_VMAX
#undef KS_VMIN
#undef KS_LOHALF
#undef KS_HIHALF
#undef KS_LOAD_F32
#undef KS_LOAD_F16
#undef KS_LOAD_BF16
#undef KS_STORE_KEYS
#undef KS_MOVEMASK
#undef KS_MOVEMASKF
#undef KS_LOADF_F16
#undef KS_LOADF_BF16
#undef KS_ANYK
#undef KS_COMPRESS
#undef KS_PERMSTORE
#undef KW
#undef vk
#undef vfl
#undef VW
#undef vd
#undef vi
#pragma GCC pop_options
#endif

/* 0: not decided yet, 1: SSE2, 2: AVX2. */
static int kernel_level;

static int
level(void)
{
  int l;

  l = __atomic_load_n(&kernel_level, __ATOMIC_RELAXED);
  if (l)
    return l;
  l = 1;
#ifdef HAVE_AVX2_VARIANT
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2") &&
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
#ifndef HAVE_AVX2_VARIANT
    force = 1;
#endif
    __atomic_store_n(&kernel_level, force, __ATOMIC_RELAXED);
  }
  return level();
}

#ifdef HAVE_AVX2_VARIANT
#define PICK(table, i) (level() == 2 ? table##_avx2[i] : table##_sse2[i])
#define PICK1(fn) (level() == 2 ? fn##_avx2 : fn##_sse2)
#else
#define PICK(table, i) (table##_sse2[i])
#define PICK1(fn) (fn##_sse2)
#endif

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
#ifdef HAVE_AVX2_VARIANT
  if (level() == 2)
    mass_fns_avx2[v->dtype & 3][k](v, m, invt, b, pinv, pmin, ret);
  else
#endif
    mass_fns_sse2[v->dtype & 3][k](v, m, invt, b, pinv, pmin, ret);
  qrs__fpenv_leave(fe);
}

size_t
qrs__kcollect(const struct qrs__view *v, double m, double invt,
              const struct qrs__bound *b, double dlo, double dhi,
              uint32_t *pos, double *x, size_t cap, size_t *ret_above)
{
  unsigned fe = qrs__fpenv_enter();
  double thr;
  size_t r;

  if (v->dtype != QRS_DTYPE_F64 && b->x == -INFINITY && b->i == 0 &&
      dhi == INFINITY && invt > 0.0 && isfinite(dlo) && isfinite(m)) {
    /* A cut of float values: a float compare against a threshold below
       every member (the exact test follows), at float width. */
    thr = m + dlo / invt;
    thr -= 1e-5 * (fabs(m) + fabs(dlo / invt)) + 1e-30;
    if (thr > -FLT_MAX && thr < FLT_MAX) {
      if (ret_above)
        *ret_above = 0;
      r = PICK(fcollect_fns, v->dtype & 3)(v, m, invt, dlo,
                                           nextafterf((float)thr, -INFINITY),
                                           pos, x, cap);
      qrs__fpenv_leave(fe);
      return r;
    }
  }
  r = PICK(collect_fns, v->dtype & 3)(v, m, invt, b, dlo, dhi, pos, x, cap,
                                      ret_above);
  qrs__fpenv_leave(fe);
  return r;
}

size_t
qrs__kcollect_bucket(const struct qrs__view *v, double m, double invt,
                     const struct qrs__bound *b, int key, uint32_t *pos,
                     double *x, size_t *ret_above)
{
  unsigned fe = qrs__fpenv_enter();
  size_t r;

  r = PICK(cbucket_fns, v->dtype & 3)(v, m, invt, b, key, pos, x, ret_above);
  qrs__fpenv_leave(fe);
  return r;
}

void
qrs__kexp(double *v, size_t n, double m, double invt)
{
  unsigned fe = qrs__fpenv_enter();

  PICK1(kexp)(v, n, m, invt);
  qrs__fpenv_leave(fe);
}

void
qrs__kscan(const struct qrs__view *v, struct qrs__scan *ret)
{
  unsigned fe = qrs__fpenv_enter();

  PICK(scan_fns, v->dtype & 3)(v, ret);
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
  r = PICK(topk_fns, v->dtype & 3)(v, k, pos, x);
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
  r = PICK(topkscan_fns, v->dtype & 3)(v, k, pos, x, &odd);
  if (odd || v->dtype == QRS_DTYPE_F64) {
    PICK(scan_fns, v->dtype & 3)(v, sc);
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
  unsigned fe = qrs__fpenv_enter();
  double r;

  r = PICK(floor_fns, v->dtype & 3)(v, ret_max);
  qrs__fpenv_leave(fe);
  return r;
}

void
qrs__kscan_entropy(const struct qrs__view *v, struct qrs__scan *sc,
                   struct qrs__mass *ms)
{
  struct qrs__bound all = { -INFINITY, 0 };
  unsigned fe = qrs__fpenv_enter();

  if (PICK(scanh_fns, v->dtype & 3)(v, sc, ms) && !sc->has_nan &&
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
  unsigned fe = qrs__fpenv_enter();
  size_t r;

  r = PICK(fpass_fns, v->dtype & 3)(v, m, invt, invtd, dhead, hpos, hx, he,
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
  unsigned fe = qrs__fpenv_enter();
  size_t r;

  r = PICK(fband_fns, v->dtype & 3)(v, m, invt, dlo, dhi, hpos, hx, he, hk,
                                    nh, gm, ngm, dsh, ret_z, ret_zd);
  qrs__fpenv_leave(fe);
  return r;
}

size_t
qrs__kgmax(const struct qrs__view *v, float *gm, float *ret_max,
           float *ret_min, int *ret_nan)
{
  unsigned fe = qrs__fpenv_enter();
  size_t r;

  r = PICK(gmax_fns, v->dtype & 3)(v, gm, ret_max, ret_min, ret_nan);
  qrs__fpenv_leave(fe);
  return r;
}

void
qrs__kftail(const struct qrs__view *v, float m, float invt, float dlo,
            double *ret_z, double *ret_err, double *ret_w)
{
  unsigned fe = qrs__fpenv_enter();

  PICK(ftail_fns, v->dtype & 3)(v, m, invt, dlo, ret_z, ret_err, ret_w);
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
  nt = PICK(fcscan_fns, v->dtype & 3)(v, dlo, pinv, tpos, tx, &m, &odd,
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
  float r;

  r = level() == 2 ?
#ifdef HAVE_AVX2_VARIANT
                   expf1_avx2(d) :
#else
                   0.0f :
#endif
                   expf1_sse2(d);
  return r;
}

double
qrs__kfloor_float(const struct qrs__view *v, double *ret_max)
{
  unsigned fe = qrs__fpenv_enter();
  double r;

  if (v->dtype == QRS_DTYPE_F64)
    r = qrs__kfloor(v, ret_max);
  else
    r = PICK(ffloor_fns, v->dtype & 3)(v, ret_max);
  qrs__fpenv_leave(fe);
  return r;
}

double
qrs__kread(const struct qrs__view *v)
{
  struct qrs__scan sc;
  double m;

  if (v->dtype == QRS_DTYPE_F64) {
    qrs__kscan(v, &sc);
    return sc.max;
  }
  return PICK(fread_fns, v->dtype & 3)(v, &m);
}

double
qrs__kload(const struct qrs__view *v, size_t i)
{
  unsigned fe = qrs__fpenv_enter();
  double r;

  r = load1(v->data, i, v->dtype);
  qrs__fpenv_leave(fe);
  return r;
}

size_t
qrs__kfind(const struct qrs__view *v, double x)
{
  unsigned fe = qrs__fpenv_enter();
  size_t i;

  for (i = 0; i < v->n; i++)
    if (load1(v->data, i, v->dtype) == x)
      break;
  qrs__fpenv_leave(fe);
  return i;
}
