/* zscore_mean against tests/vectors/amplify_zscore.json (reference spec
   8.1): u, z, sample mean and SEM bit for bit. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "amplify.h"
#include "vectors.h"

Test(amplify, zscore_mean_reproduces_reference_bit_for_bit)
{
  struct json_object *v, *cases, *c, *exp, *err;
  struct amp_params p;
  struct amp_result r;
  uint8_t *b;
  size_t i, n, checked;

  v = vec_load("amplify_zscore.json");
  cases = vec_get(v, "cases");
  checked = 0;
  for (i = 0; i < json_object_array_length(cases); i++) {
    c = json_object_array_get_idx(cases, i);
    exp = vec_get(c, "expected");
    p.population_mean = vec_double(vec_get(c, "population_mean"));
    p.population_std = vec_double(vec_get(c, "population_std"));
    p.epsilon = vec_double(vec_get(c, "epsilon"));
    b = vec_hex(json_object_get_string(vec_get(c, "bytes_hex")), &n);
    if (json_object_object_get_ex(exp, "error", &err)) {
      cr_assert_eq(amp_zscore_mean(&p, b, n, &r), -EINVAL, "%s",
                   json_object_get_string(vec_get(c, "name")));
    } else {
      cr_assert_eq(amp_zscore_mean(&p, b, n, &r), 0);
      cr_assert_eq(r.byte_sum, json_object_get_uint64(vec_get(exp,
                                                              "byte_sum")));
      cr_assert_eq(r.sample_count,
                   (size_t)json_object_get_int64(vec_get(exp,
                                                         "sample_count")));
      cr_assert_eq(r.sample_mean, vec_double(vec_get(exp, "sample_mean")),
                   "%s: mean", json_object_get_string(vec_get(c, "name")));
      cr_assert_eq(r.sem, vec_double(vec_get(exp, "sem")), "%s: sem",
                   json_object_get_string(vec_get(c, "name")));
      cr_assert_eq(r.z, vec_double(vec_get(exp, "z")), "%s: z %.17g",
                   json_object_get_string(vec_get(c, "name")), r.z);
      cr_assert_eq(r.u, vec_double(vec_get(exp, "u")), "%s: u %.17g",
                   json_object_get_string(vec_get(c, "name")), r.u);
      checked++;
    }
    free(b);
  }
  cr_assert_geq(checked, 40);
  json_object_put(v);
}

Test(amplify, readme_example)
{
  struct amp_params p = { 127.5, 73.61215932167728, 1e-10 };
  struct amp_result r;
  uint8_t *b;
  size_t i;

  /* 10 000 bytes summing to 1 275 600 (mean 127.56). */
  b = malloc(10000);
  cr_assert_not_null(b);
  for (i = 0; i < 10000; i++)
    b[i] = i < 5600 ? 128 : 127;
  cr_assert_eq(amp_zscore_mean(&p, b, 10000, &r), 0);
  cr_assert_eq(r.byte_sum, 1275600);
  cr_assert_eq(r.u, 0.5324811271835149);
  cr_assert_eq(r.z, 0.08150827329736202);
  free(b);
}

Test(amplify, byte_sum_is_exact_for_large_buffers)
{
  uint8_t *b;
  size_t n;

  n = (size_t)(1u << 24) + 4097;       /* crosses the 32-bit chunking */
  b = malloc(n);
  cr_assert_not_null(b);
  memset(b, 255, n);
  cr_assert_eq(amp_byte_sum(b, n), 255ull * n);
  free(b);
}

Test(amplify, names_resolve)
{
  cr_assert_eq(amp_find("zscore_mean"), AMP_ZSCORE_MEAN);
  cr_assert_eq(amp_find("ecdf"), -1);
  cr_assert_eq(amp_find(""), -1);
  cr_assert_str_eq(amp_name(AMP_ZSCORE_MEAN), "zscore_mean");
}

Test(amplify, byte_sum_matches_a_plain_loop_at_every_length)
{
  uint8_t b[3000];
  uint64_t want;
  size_t n, i, off;

  for (i = 0; i < sizeof(b); i++)
    b[i] = (uint8_t)(i * 2654435761u >> 13);
  for (off = 0; off < 8; off++) {
    for (n = 0; n + off <= sizeof(b); n += n < 40 ? 1 : 97) {
      want = 0;
      for (i = 0; i < n; i++)
        want += b[off + i];
      cr_assert_eq(amp_byte_sum(b + off, n), want, "n %zu offset %zu", n,
                   off);
    }
  }
}
