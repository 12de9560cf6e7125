/* libqrs: the element types of a logits row, shared by the sampler, the
   batch API and the row kernels under them. */
#ifndef QRS_DTYPE_H
#define QRS_DTYPE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Element type of a logits row. */
enum qrs_dtype {
  QRS_DTYPE_F32 = 0,
  QRS_DTYPE_F16 = 1,              /* IEEE binary16 */
  QRS_DTYPE_BF16 = 2,             /* bfloat16 */
  QRS_DTYPE_F64 = 3,
};

#ifdef __cplusplus
}
#endif

#endif
