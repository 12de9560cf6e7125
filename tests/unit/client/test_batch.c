/* qrs_sample_batch() (client/batch.c): a batch over a pool of 1 or 2
   threads gives the same tokens, records and sampler states as B single
   calls (batch_check.c; CI also runs it under TSan as batch_tsan);
   errors are per row. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <qrs/qrs.h>

#include "batch_check.h"

#define N 3000

static void
same(unsigned threads, enum qrs_dtype dt)
{
  char err[256];

  cr_assert_eq(batch_check_same(threads, dt, err, sizeof(err)), 0, "%s",
               err);
}

Test(batch, one_thread_equals_single_calls)
{
  same(1, QRS_DTYPE_F32);
}

Test(batch, two_threads_equal_single_calls)
{
  same(2, QRS_DTYPE_F32);
  same(2, QRS_DTYPE_BF16);
}

Test(batch, errors_are_per_row)
{
  static float f[4 * N];
  struct qrs_sampler *s[3];
  struct qrs_batch_row rows[4];
  struct qrs_pool *pool;
  struct qrs_draw d;
  int b;

  for (b = 0; b < 4 * N; b++)
    f[b] = (float)batch_rnd();
  f[N + 7] = NAN;                   /* row 1 is broken */
  cr_assert_eq(qrs_pool_new(2, &pool), 0);
  for (b = 0; b < 3; b++) {
    s[b] = batch_sampler(0, N);
    cr_assert(s[b]);
  }
  memset(rows, 0, sizeof(rows));
  memset(&d, 0, sizeof(d));
  d.u = 0.25;
  rows[0].sampler = s[0];
  rows[0].u = 0.5;
  rows[1].sampler = s[1];
  rows[1].u = 0.5;
  rows[2].sampler = s[2];
  rows[2].draw = &d;                /* qrs_sampler_step() with a draw */
  rows[3].sampler = NULL;
  cr_expect_eq(qrs_sample_batch(pool, f, QRS_DTYPE_F32, N, N, rows, 4), 2);
  cr_expect_eq(rows[0].status, 0);
  cr_expect_eq(rows[1].status, QRS_E_LOGITS);
  cr_expect_eq(rows[2].status, 0);
  cr_expect_eq(rows[3].status, -EINVAL);
  cr_expect_lt(rows[0].token, N);
  /* one sampler in two rows: both rows refused, nothing sampled */
  rows[1].sampler = s[0];
  rows[3].sampler = s[1];
  cr_expect_eq(qrs_sample_batch(pool, f, QRS_DTYPE_F32, N, N, rows, 2), 2);
  cr_expect_eq(rows[0].status, -EINVAL);
  cr_expect_eq(rows[1].status, -EINVAL);
  /* bad calls */
  cr_expect_eq(qrs_sample_batch(pool, f, QRS_DTYPE_F32, N, N - 1, rows, 2),
               -EINVAL);
  cr_expect_eq(qrs_sample_batch(NULL, f, QRS_DTYPE_F32, N, N, rows, 2),
               -EINVAL);
  cr_expect_eq(qrs_sample_batch(pool, f, (enum qrs_dtype)9, N, N, rows, 2),
               -EINVAL);
  cr_expect_eq(qrs_pool_new(QRS_POOL_MAX_THREADS + 1, &pool), -EINVAL);
  for (b = 0; b < 3; b++)
    qrs_sampler_free(s[b]);
  qrs_pool_free(pool);
}
