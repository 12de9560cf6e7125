/* Shared by test_batch.c and batch_tsan.c. */
#ifndef QRS_TEST_BATCH_CHECK_H
#define QRS_TEST_BATCH_CHECK_H

#include <stddef.h>

#include <qrs/sampler.h>

double batch_rnd(void);
struct qrs_sampler *batch_sampler(int conf, size_t n);
/* 0 when a batch over a pool of threads equals single calls (tokens,
   records), else -1 with a message in err. */
int batch_check_same(unsigned threads, enum qrs_dtype dt, char *err,
                     size_t errlen);

#endif
