/* Template: one variant of the row kernels, included by its translation
   unit (rowkern_sse2.c, rowkern_avx2.c) after it defines
     KS_ISA        the variant's suffix (sse2, avx2)
     VW, vd, vi    lanes (doubles per vector), VW doubles, VW int64
     KW, vk, vfl   lanes of the native int32 / float vectors
     KS_LOAD_F32(p)  VW floats at p as a vd
     KS_LOAD_F16(p), KS_LOAD_BF16(p)  the same for 16-bit types (optional)
     KS_LOADF_F16(p), KS_LOADF_BF16(p)  KW of them as a vfl (optional)
     KS_VMAX(a, b), KS_VMIN(a, b)  lane-wise max / min of two vfl (the
                   other operand where either is NaN: b)
     KS_LOHALF(f), KS_HIHALF(f)  the low / high KW / 2 floats of f as a vd
     KS_ANYK(m)    whether any lane of the vk mask m is set
     KS_MOVEMASK(m), KS_MOVEMASKF(m)  lane sign bits (optional)
     KS_COMPRESS(mask), KS_PERMSTORE(p, a, perm)  the permutation that
                   packs a mask's lanes to the front and its store
                   (optional: else lane by lane)
   and defines qrs__kisa_<KS_ISA> (rowkern_int.h): the templates below,
   each dtype's entry points from the one definition in rowkern_dtype.h,
   and the table of them. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "rowkern_int.h"

#define KS_CAT_(a, b) a##_##b
#define KS_CAT(a, b) KS_CAT_(a, b)
#define KS(name) KS_CAT(name, KS_ISA)

#include "rowkern_vec.h"
#include "rowkern_exact.h"
#include "rowkern_float.h"

#define KD_FLOAT 1
#define KD_DT QRS_DTYPE_F32
#define KD(name) KS(KS_CAT(name, f32))
#include "rowkern_dtype.h"
#undef KD
#undef KD_DT
#define KD_DT QRS_DTYPE_F16
#define KD(name) KS(KS_CAT(name, f16))
#include "rowkern_dtype.h"
#undef KD
#undef KD_DT
#define KD_DT QRS_DTYPE_BF16
#define KD(name) KS(KS_CAT(name, bf16))
#include "rowkern_dtype.h"
#undef KD
#undef KD_DT
#undef KD_FLOAT
#define KD_FLOAT 0
#define KD_DT QRS_DTYPE_F64
#define KD(name) KS(KS_CAT(name, f64))
#include "rowkern_dtype.h"

const struct qrs__kisa KS(qrs__kisa) = {
  .dt = {
    [QRS_DTYPE_F32] = &KS(kdt_f32),
    [QRS_DTYPE_F16] = &KS(kdt_f16),
    [QRS_DTYPE_BF16] = &KS(kdt_bf16),
    [QRS_DTYPE_F64] = &KS(kdt_f64),
  },
  .kexp = KS(kexp),
  .expf1 = KS(expf1),
};
