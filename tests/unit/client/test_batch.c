/* qrs_sample_batch() (client/sampling/batch.c): a batch over a pool of 1 or 2
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

/* qrs_sample_batch_one_hot(): the tokens of qrs_sample_batch() on the
   same rows, then each sampled row -inf but 0 at its token, in every
   dtype; a broken row (QRS_E_LOGITS) is left as it was. */
Test(batch, one_hot_writes_each_sampled_row_in_place)
{
  static const enum qrs_dtype dts[] = { QRS_DTYPE_F32, QRS_DTYPE_F16,
                                        QRS_DTYPE_BF16, QRS_DTYPE_F64 };
  static const size_t es[] = { 4, 2, 2, 8 };
  static double src[3 * N];
  struct qrs_sampler *s[3];
  struct qrs_batch_row rows[3], want[3];
  struct qrs_pool *pool;
  unsigned char *buf, *orig;
  size_t k, j, b, t;
  uint64_t v;

  for (b = 0; b < 3 * N; b++)
    src[b] = batch_rnd();
  cr_assert_eq(qrs_pool_new(2, &pool), 0);
  for (k = 0; k < 4; k++) {
    buf = malloc(3 * N * es[k]);
    orig = malloc(3 * N * es[k]);
    cr_assert(buf && orig);
    for (b = 0; b < 3 * N; b++) {
      float f = (float)src[b];
      uint32_t u32;

      memcpy(&u32, &f, 4);
      if (dts[k] == QRS_DTYPE_F32)
        memcpy(buf + 4 * b, &f, 4);
      else if (dts[k] == QRS_DTYPE_F64)
        memcpy(buf + 8 * b, &src[b], 8);
      else if (dts[k] == QRS_DTYPE_BF16) {
        uint16_t h = (uint16_t)(u32 >> 16);
        memcpy(buf + 2 * b, &h, 2);
      } else {                    /* f16 of [1, 8): exponents 15..17 */
        uint16_t h = (uint16_t)(0x3c00 + (u32 & 0x7ff));
        memcpy(buf + 2 * b, &h, 2);
      }
    }
    /* row 2 broken: a NaN */
    if (es[k] == 2)
      memcpy(buf + 2 * (2 * N + 5), &(uint16_t){ 0x7fc0 }, 2);
    else if (es[k] == 4)
      memcpy(buf + 4 * (2 * N + 5), &(float){ NAN }, 4);
    else
      memcpy(buf + 8 * (2 * N + 5), &(double){ NAN }, 8);
    memcpy(orig, buf, 3 * N * es[k]);
    for (j = 0; j < 2; j++) {
      memset(j ? rows : want, 0, sizeof(rows));
      for (b = 0; b < 3; b++) {
        s[b] = batch_sampler(0, N);
        cr_assert(s[b]);
        (j ? rows : want)[b].sampler = s[b];
        (j ? rows : want)[b].u = 0.2 + 0.3 * (double)b;
      }
      if (j)
        cr_expect_eq(qrs_sample_batch_one_hot(pool, buf, dts[k], N, N, rows,
                                              3), 1);
      else
        cr_expect_eq(qrs_sample_batch(pool, buf, dts[k], N, N, want, 3), 1);
      for (b = 0; b < 3; b++)
        qrs_sampler_free(s[b]);
    }
    for (b = 0; b < 2; b++) {
      cr_expect_eq(rows[b].status, 0);
      cr_expect_eq(rows[b].token, want[b].token, "dtype %zu row %zu", k, b);
      for (t = 0; t < N; t++) {
        v = 0;
        memcpy(&v, buf + (b * N + t) * es[k], es[k]);
        if (t == rows[b].token)
          cr_expect_eq(v, 0, "dtype %zu row %zu: the token is not 0", k, b);
        else
          cr_expect_eq(v, es[k] == 4 ? 0xff800000u : es[k] == 8 ?
                       0xfff0000000000000ull : dts[k] == QRS_DTYPE_F16 ?
                       0xfc00u : 0xff80u, "dtype %zu row %zu at %zu", k, b,
                       t);
      }
    }
    cr_expect_eq(rows[2].status, QRS_E_LOGITS);
    cr_expect_eq(memcmp(buf + 2 * N * es[k], orig + 2 * N * es[k],
                        N * es[k]), 0, "the broken row was written");
    free(buf);
    free(orig);
  }
  qrs_pool_free(pool);
}
