/* The row's entropy and varentropy from one float32 moment pass
   (moments.h; docs/sampling.md, "Row entropy").

   This file is compiled with -ffp-contract=off: the only fused
   multiply-adds are the ones written as MFMA, which the AVX2 variant
   computes with vfmadd and the SSE2 variant with fmaf() (exact in both),
   so the two variants give the same bits. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "moments.h"

/* Values per block: each block is read once from memory (its max), then
   its moments come from L1. */
#define MOM_BLOCK 1024
/* Values per float partial sum group: 16 vectors in two chains of 8
   terms per lane, added (every term sees at most 8 float roundings). */
#define MOM_GROUP 128

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint16_t v8h __attribute__((vector_size(16)));
typedef float v4f __attribute__((vector_size(16)));
typedef double v4d __attribute__((vector_size(32)));

/* x in every lane (a macro: clang rejects a call from the AVX2 variant
   to a function compiled without AVX that returns a v8f). */
#define SPLATF(x) ((v8f){ (x), (x), (x), (x), (x), (x), (x), (x) })

/* max(a, b) lane by lane (b where a is NaN). */
#define FMAX8(a, b) \
  ((v8f)((((a) > (b)) & (v8i)(a)) | (~((a) > (b)) & (v8i)(b))))

/* min(a, b) lane by lane (b where a is NaN). */
#define FMIN8(a, b) \
  ((v8f)((((a) < (b)) & (v8i)(a)) | (~((a) < (b)) & (v8i)(b))))

/* The exp's constants (memory operands, not rebuilt per use). */
#define K8(x) { x, x, x, x, x, x, x, x }
static const v8f c_log2e = K8(1.44269504f);
static const v8f c_shift = K8(12582912.0f);          /* 1.5 * 2^23 */
static const v8f c_mln2hi = K8(-0.693145751953125f);
static const v8f c_mln2lo = K8(-1.428606765330187e-06f);
static const v8f c_p6 = K8(1.0f / 720);
static const v8f c_p5 = K8(1.0f / 120);
static const v8f c_p4 = K8(1.0f / 24);
static const v8f c_p3 = K8(1.0f / 6);
static const v8f c_p2 = K8(0.5f);
static const v8f c_one = K8(1.0f);
static const v8f c_dmin = K8(-87.0f);

/* Zero accumulators from memory (a splat built in registers made GCC
   emit a register-form VEX vmovq that valgrind cannot decode). */
static const v4d c_zero4 = { 0.0, 0.0, 0.0, 0.0 };

/* Lanes 0-3 of s into a[0], lanes 4-7 into a[1] (as doubles; exact).
   MCVT_LO / MCVT_HI: the variant's conversion of each half. */
#define ADDHALVES(a, s) \
  do { \
    v8f s_ = (s); \
    (a)[0] = (a)[0] + MCVT_LO(s_); \
    (a)[1] = (a)[1] + MCVT_HI(s_); \
  } while (0)

static inline __attribute__((always_inline)) v4d
cvt_lo(v8f s)
{
  v4f h;

  memcpy(&h, &s, sizeof(h));
  return __builtin_convertvector(h, v4d);
}

static inline __attribute__((always_inline)) v4d
cvt_hi(v8f s)
{
  v4f h;

  memcpy(&h, (const char *)&s + sizeof(h), sizeof(h));
  return __builtin_convertvector(h, v4d);
}

/* Lanes 0 .. 7 in order. */
static inline __attribute__((always_inline)) double
hsum2(const v4d *a)
{
  double s;
  int l;

  s = a[0][0];
  for (l = 1; l < 4; l++)
    s += a[0][l];
  for (l = 0; l < 4; l++)
    s += a[1][l];
  return s;
}

static inline __attribute__((always_inline)) v8f
bf16_to_v8f(v8h h)
{
  return (v8f)(__builtin_convertvector(h, v8i) << 16);
}

/* IEEE half to float with integer operations (subnormal halves: their
   integer significand times 2^-24, exact and normal in float). */
static inline __attribute__((always_inline)) v8f
f16_to_v8f(v8h h)
{
  v8i u, em, sign, norm, inf, sub, isinf, isnorm;

  u = __builtin_convertvector(h, v8i);
  sign = (u & 0x8000) << 16;
  em = u & 0x7fff;
  norm = (em << 13) + (112 << 23);
  inf = (em << 13) + (224 << 23);
  sub = (v8i)(__builtin_convertvector(em, v8f) * 0x1p-24f);
  isinf = em >= 0x7c00;
  isnorm = (em >= 0x0400) & ~isinf;
  return (v8f)(sign | (inf & isinf) | (norm & isnorm) |
               (sub & ~(isinf | isnorm)));
}

/* The baseline variant: lane-wise fmaf() (exact; a libm call where the
   CPU has no FMA: this variant runs only on such CPUs, and in tests). */
static inline __attribute__((always_inline)) v8f
fma_soft(v8f a, v8f b, v8f c)
{
  v8f r;
  int l;

  for (l = 0; l < 8; l++)
    r[l] = fmaf(a[l], b[l], c[l]);
  return r;
}

#define MK(name) name##_sse2
#define MTARGET
#define MFMA(a, b, c) fma_soft(a, b, c)
#define MMAX8(a, b) FMAX8(a, b)
#define MMIN8(a, b) FMIN8(a, b)
#define MCVT_LO(s) cvt_lo(s)
#define MCVT_HI(s) cvt_hi(s)
#define MCVT_BF16(h) bf16_to_v8f(h)
#define MCVT_F16(h) f16_to_v8f(h)
#include "moments_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_MOM_AVX2 1
#define MK(name) name##_avx2
#define MTARGET __attribute__((target("avx2,fma,f16c")))
/* maxps / minps: a > b ? a : b (a < b ? a : b), b where a is NaN or
   both are zeros: FMAX8 / FMIN8 exactly, in one instruction. */
#define MMAX8(a, b) ((v8f)_mm256_max_ps((__m256)(a), (__m256)(b)))
#define MMIN8(a, b) ((v8f)_mm256_min_ps((__m256)(a), (__m256)(b)))
#define MFMA(a, b, c) \
  ((v8f)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c)))
#define MCVT_LO(s) ((v4d)_mm256_cvtps_pd(_mm256_castps256_ps128((__m256)(s))))
#define MCVT_HI(s) \
  ((v4d)_mm256_cvtps_pd(_mm256_extractf128_ps((__m256)(s), 1)))
#define MCVT_BF16(h) \
  ((v8f)_mm256_slli_epi32(_mm256_cvtepu16_epi32((__m128i)(h)), 16))
#define MCVT_F16(h) ((v8f)_mm256_cvtph_ps((__m128i)(h)))
#include "moments_impl.h"
#endif

int
qrs__fmoments_applies(enum qrs_dtype dtype, size_t n)
{
  return n >= QRS__MOM_MIN_N &&
         (dtype == QRS_DTYPE_F32 || dtype == QRS_DTYPE_F16 ||
          dtype == QRS_DTYPE_BF16);
}

typedef void (*fmom_fn)(const struct qrs__view *, struct qrs__scan *,
                        struct qrs__fmom *, float *);

/* By variant (SSE2, AVX2) and dtype (enum qrs_dtype: F32 0, F16 1,
   BF16 2). */
static const fmom_fn fmom_fns[2][3] = {
  { fmom_f32_sse2, fmom_f16_sse2, fmom_bf16_sse2 },
#ifdef HAVE_MOM_AVX2
  { fmom_f32_avx2, fmom_f16_avx2, fmom_bf16_avx2 },
#else
  { fmom_f32_sse2, fmom_f16_sse2, fmom_bf16_sse2 },
#endif
};

/* The variant follows the row kernels' choice (qrs__kernel_level(): 2
   needs AVX2, FMA and F16C).  v: a float32 / float16 / bfloat16 row. */
void
qrs__fmoments(const struct qrs__view *v, struct qrs__scan *sc,
              struct qrs__fmom *ret, float *mb)
{
  unsigned fe = qrs__fpenv_enter();

  fmom_fns[qrs__kernel_level(0) == 2][v->dtype](v, sc, ret, mb);
  qrs__fpenv_leave(fe);
}

float
qrs__fmoments_expf(float d)
{
#ifdef HAVE_MOM_AVX2
  if (qrs__kernel_level(0) == 2)
    return expf1_avx2(d);
#endif
  return expf1_sse2(d);
}

void
qrs__fmoments_hvh(const struct qrs__fmom *m, double *h, double *vh)
{
  double m1;

  m1 = m->w / m->z;
  *h = log(m->z) - m1;
  *h = *h > 0.0 ? *h : 0.0;
  *vh = m->w2 / m->z - m1 * m1;
  *vh = *vh > 0.0 ? *vh : 0.0;
}

/* The bound (docs/sampling.md, "Row entropy"): u = 2^-24; each float
   weight is within A + 1.01 u |d| (relative) of exp(x - max), A = 16 u
   covering the polynomial and its rounding; e d and e d^2 carry one and
   two roundings more; every float partial sum has at most 8 terms (8 u);
   the double sums add (blocks + 64 + 4 rescales) 2^-53.  Weights below
   e^-87 are dropped (absolute terms per element), and |d| <= 87 bounds
   the third moment the W2 bound needs. */
#define MOM_U 0x1p-24
#define MOM_A (16.0 * MOM_U)
#define MOM_B (1.01 * MOM_U)

void
qrs__fmoments_bound(const struct qrs__fmom *m, double *eh, double *evh)
{
  double dd, dz, dw, dw2, rz, aw, m1, s2, dm1, a2, nn;

  nn = (double)m->n;
  dd = ((double)(m->n / MOM_BLOCK) + 64.0 + 4.0 * (double)m->nrescale) *
       0x1p-53;
  aw = fabs(m->w);
  dz = 1.001 * ((MOM_A + 8.0 * MOM_U + dd) * m->z + MOM_B * aw) +
       nn * 1.7e-38;
  dw = 1.001 * ((MOM_A + 10.0 * MOM_U + dd) * aw + MOM_B * m->w2) +
       nn * (1.5e-36 + 1e-44);
  dw2 = 1.001 * ((MOM_A + 12.0 * MOM_U + dd + 88.0 * MOM_U) * m->w2) +
        nn * (1.3e-34 + 1e-44);
  if (!(m->z >= 1.0) || !(dz < 0.5 * m->z)) {
    *eh = *evh = INFINITY;
    return;
  }
  rz = dz / m->z / (1.0 - dz / m->z);     /* relative, of Z* vs Z */
  m1 = aw / m->z;
  s2 = m->w2 / m->z;
  dm1 = dw / (m->z - dz) + m1 * rz;       /* error of W / Z */
  *eh = 1.01 * (rz + dm1) + 4.0 * 0x1p-53 * (fabs(log(m->z)) + m1);
  a2 = dw2 / (m->z - dz) + s2 * rz;       /* error of W2 / Z */
  *evh = 1.01 * (a2 + dm1 * (2.0 * m1 + dm1)) +
         4.0 * 0x1p-53 * (s2 + m1 * m1);
}
