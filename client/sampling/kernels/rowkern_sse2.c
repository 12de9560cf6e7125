/* The baseline variant of the row kernels: SSE2 on x86-64 (or the
   platform's 128-bit vectors elsewhere, where it is the only one), 2
   doubles / 4 floats per vector.  rowkern_isa.h is the template; this
   file only says how the variant's vectors load, compare and reduce. */
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

typedef double v2df __attribute__((vector_size(16)));
typedef int64_t v2di __attribute__((vector_size(16)));
typedef float v2sf __attribute__((vector_size(8)));
typedef int32_t v4si __attribute__((vector_size(16)));
typedef float v4sf __attribute__((vector_size(16)));

static inline __attribute__((always_inline)) v2df
load_f32_2(const float *p)
{
  v2sf f;

  memcpy(&f, p, sizeof(f));
  return __builtin_convertvector(f, v2df);
}

static inline __attribute__((always_inline)) int
anyk_4(v4si m)
{
  return (m[0] | m[1] | m[2] | m[3]) != 0;
}

#define KS_ISA sse2
#define KS_VMAX(a, b) \
  ((v4sf)(((v4si)((a) > (b)) & (v4si)(a)) | (~(v4si)((a) > (b)) & (v4si)(b))))
#define KS_VMIN(a, b) \
  ((v4sf)(((v4si)((a) < (b)) & (v4si)(a)) | (~(v4si)((a) < (b)) & (v4si)(b))))
#define KS_LOHALF(f) \
  __builtin_convertvector(__builtin_shufflevector((f), (f), 0, 1), v2df)
#define KS_HIHALF(f) \
  __builtin_convertvector(__builtin_shufflevector((f), (f), 2, 3), v2df)
#define KS_LOAD_F32(p) load_f32_2(p)
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
#include "rowkern_isa.h"
