/* Sources: mock determinism and bias, system reads. */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "amplify.h"
#include "sources/source.h"
#include "testreg.h"

Test(source, mock_is_deterministic_per_seed)
{
  struct source *a, *b, *c;
  uint8_t x[4099], y[4099], z[4099];

  a = testsrc_open(CONF_SOURCE_MOCK, "t", 42, 0.0);
  b = testsrc_open(CONF_SOURCE_MOCK, "t", 42, 0.0);
  c = testsrc_open(CONF_SOURCE_MOCK, "t", 43, 0.0);
  cr_assert_eq(a->ops->read(a, x, sizeof(x), NULL, 0), 0);
  cr_assert_eq(b->ops->read(b, y, sizeof(y), NULL, 0), 0);
  cr_assert_eq(c->ops->read(c, z, sizeof(z), NULL, 0), 0);
  cr_assert(memcmp(x, y, sizeof(x)) == 0, "same seed, same bytes");
  cr_assert(memcmp(x, z, sizeof(x)) != 0, "other seed, other bytes");
  /* The stream advances. */
  cr_assert_eq(b->ops->read(b, y, sizeof(y), NULL, 0), 0);
  cr_assert(memcmp(x, y, sizeof(x)) != 0);
  source_free(a);
  source_free(b);
  source_free(c);
}

static double
mock_mean(double shift)
{
  struct source *s;
  uint8_t *b;
  size_t n;
  double m;

  n = 4 * 1024 * 1024;
  b = malloc(n);
  cr_assert_not_null(b);
  s = testsrc_open(CONF_SOURCE_MOCK, "t", 7, shift);
  cr_assert_eq(s->ops->read(s, b, n, NULL, 0), 0);
  m = (double)amp_byte_sum(b, n) / (double)n;
  source_free(s);
  free(b);
  return m;
}

Test(source, mock_mean_shift_moves_the_byte_mean)
{
  double m;

  /* Over 4 Mi bytes the mean's standard error is 0.036. */
  m = mock_mean(0.0);
  cr_assert(m > 127.5 - 0.2 && m < 127.5 + 0.2, "unshifted mean %f", m);
  m = mock_mean(2.0);
  cr_assert(m > 129.5 - 0.2 && m < 129.5 + 0.2, "+2 shifted mean %f", m);
  m = mock_mean(-3.0);
  cr_assert(m > 124.5 - 0.2 && m < 124.5 + 0.2, "-3 shifted mean %f", m);
}

/* Near the limit the replacement probability rounds to 2^32, which must not
   wrap to "never replace". */
Test(source, mock_mean_shift_near_the_limit_does_not_wrap)
{
  double m;

  m = mock_mean(127.49999999999);
  cr_assert_gt(m, 254.9, "+127.49999999999 shifted mean %f", m);
  m = mock_mean(-127.49999999999);
  cr_assert_lt(m, 0.1, "-127.49999999999 shifted mean %f", m);
  m = mock_mean(127.5);
  cr_assert_eq(m, 255.0);
}

Test(source, mock_rejects_impossible_shift)
{
  struct source *s;
  char err[256];

  cr_assert_lt(testsrc_new(CONF_SOURCE_MOCK, "m", 0, 200.0, &s, err,
                           sizeof(err)), 0);
  cr_assert(strstr(err, "mean_shift") != NULL, "%s", err);
}

Test(source, system_fills_large_buffers)
{
  struct source *s;
  uint8_t *b;
  size_t n, zeros, i;

  n = 3 * 1024 * 1024;
  b = calloc(1, n);
  cr_assert_not_null(b);
  s = testsrc_open(CONF_SOURCE_SYSTEM, "t", 0, 0.0);
  cr_assert(s->ops->production);
  cr_assert_eq(s->ops->read(s, b, n, NULL, 0), 0);
  zeros = 0;
  for (i = 0; i < n; i++)
    zeros += b[i] == 0;
  /* Expect n/256 = 12288 zero bytes; all-zero would mean no fill. */
  cr_assert(zeros > 11000 && zeros < 13600, "%zu zero bytes", zeros);
  source_free(s);
  free(b);
}
