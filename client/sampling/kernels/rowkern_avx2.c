/* The AVX2 variant of the row kernels (x86-64; meson builds this file
   there only, with -mavx2 -mfma -mf16c -mbmi2 -mpopcnt): AVX2 + FMA,
   F16C for float16 rows, BMI2 for the compressed stores, 4 doubles / 8
   floats per vector.  rowkern.c takes it when the CPU has all of them.
   rowkern_isa.h is the template; this file only says how the variant's
   vectors load, compare and reduce. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <immintrin.h>

#include "rowkern_int.h"

typedef double v4df __attribute__((vector_size(32)));
typedef int64_t v4di __attribute__((vector_size(32)));
typedef int32_t v8si __attribute__((vector_size(32)));
typedef float v8sf __attribute__((vector_size(32)));

#define KS_ISA avx2
#define KS_VMAX(a, b) ((v8sf)_mm256_max_ps((__m256)(a), (__m256)(b)))
#define KS_VMIN(a, b) ((v8sf)_mm256_min_ps((__m256)(a), (__m256)(b)))
#define KS_LOHALF(f) \
  ((v4df)_mm256_cvtps_pd(_mm256_castps256_ps128((__m256)(f))))
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
#define KS_LOAD_F16(p) \
  ((v4df)_mm256_cvtps_pd(_mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)(p)))))
#define KS_LOAD_BF16(p) \
  ((v4df)_mm256_cvtps_pd(_mm_castsi128_ps(_mm_slli_epi32( \
      _mm_cvtepu16_epi32(_mm_loadl_epi64((const __m128i *)(p))), 16))))
#define VW 4
#define vd v4df
#define vi v4di
#include "rowkern_isa.h"
