/* zscore_mean against tests/vectors/amplify_zscore.json (reference spec
   8.1): u, z, sample mean and SEM bit for bit. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "amplify.h"
#include "vectors.h"

/* A case's population mean, population std and epsilon. */
static void
case_params(struct json_object *c, struct amp_params *p)
{
  p->population_mean = vec_double(vec_get(c, "population_mean"));
  p->population_std = vec_double(vec_get(c, "population_std"));
  p->epsilon = vec_double(vec_get(c, "epsilon"));
}

Test(amplify, zscore_mean_reproduces_reference_bit_for_bit)
{
  struct json_object *c, *exp, *err;
  struct amp_params p;
  struct amp_result r;
  struct vec_iter it;
  uint8_t *b;
  size_t n, checked;

  checked = 0;
  for (c = vec_first(&it, "amplify_zscore.json", "cases"); c;
       c = vec_next(&it)) {
    exp = vec_get(c, "expected");
    case_params(c, &p);
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
  cr_assert_eq(amp_find("ecdf"), AMP_ECDF);
  cr_assert_eq(amp_find("exact"), AMP_EXACT);
  cr_assert_eq(amp_find("zscore_thought"), AMP_ZSCORE_THOUGHT);
  cr_assert_eq(amp_find("server"), AMP_SERVER);
  cr_assert_eq(amp_find("serve"), -1);
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

static const char *
name_of(struct json_object *c)
{
  return json_object_get_string(vec_get(c, "name"));
}

/* The byte means of a JSON array of hex blocks (malloc'd). */
static double *
block_means(struct json_object *blocks, size_t *ret_n)
{
  double *m;
  uint8_t *b;
  size_t i, n, len;

  n = json_object_array_length(blocks);
  m = calloc(n ? n : 1, sizeof(*m));
  cr_assert_not_null(m);
  for (i = 0; i < n; i++) {
    b = vec_hex(json_object_get_string(json_object_array_get_idx(blocks, i)),
                &len);
    m[i] = (double)amp_byte_sum(b, len) / (double)len;
    free(b);
  }
  *ret_n = n;
  return m;
}

/* Calibrating case c failed as it expects (exp): zero variance, with the
   reference's message for amplifier amp. */
static void
expect_zero_variance(struct json_object *c, enum amp_type amp, int rc,
                     struct json_object *exp)
{
  cr_assert_eq(rc, AMP_E_ZERO_VARIANCE, "%s", name_of(c));
  cr_assert_str_eq(amp_strerror(amp, rc),
                   json_object_get_string(vec_get(exp, "message")));
}

Test(amplify, ecdf_matches_reference_vectors)
{
  struct json_object *c, *exp, *probes, *pr, *sorted, *err, *uncal;
  struct amp_ecdf e = { NULL, 0 };
  struct amp_params p;
  struct amp_result r;
  struct vec_iter it;
  double *m;
  uint8_t *b;
  size_t j, n, len, probed;
  int rc;

  c = vec_first(&it, "ecdf.json", "cases");
  /* Kept past the cases (the iteration releases the file). */
  uncal = json_object_get(vec_get(it.root, "uncalibrated_amplify"));
  probed = 0;
  for (; c; c = vec_next(&it)) {
    p.population_mean = 127.5;
    p.population_std = 73.9003;
    p.epsilon = vec_double(vec_get(c, "epsilon"));
    m = block_means(vec_get(c, "calibration_blocks_hex"), &n);
    cr_assert_eq(n, (size_t)json_object_get_int(vec_get(c,
                                       "ecdf_calibration_samples")));
    rc = amp_ecdf_calibrate(&e, m, n);
    free(m);
    if (json_object_object_get_ex(c, "expected", &exp)) {
      expect_zero_variance(c, AMP_ECDF, rc, exp);
      continue;
    }
    cr_assert_eq(rc, 0, "%s", name_of(c));
    sorted = vec_get(c, "expected_sorted_means");
    cr_assert_eq(e.n, json_object_array_length(sorted));
    for (j = 0; j < e.n; j++)
      cr_assert_eq(e.means[j],
                   vec_double(json_object_array_get_idx(sorted, j)));
    probes = vec_get(c, "probes");
    for (j = 0; j < json_object_array_length(probes); j++) {
      pr = json_object_array_get_idx(probes, j);
      exp = vec_get(pr, "expected");
      b = vec_hex(json_object_get_string(vec_get(pr, "bytes_hex")), &len);
      if (json_object_object_get_ex(exp, "error", &err)) {
        cr_assert_eq(amp_ecdf(&e, &p, b, len, &r), AMP_E_EMPTY);
        free(b);
        continue;
      }
      cr_assert_eq(amp_ecdf(&e, &p, b, len, &r), 0);
      cr_assert_eq(r.u, vec_double(vec_get(exp, "u")), "%s probe %zu: %.17g",
                   name_of(c), j, r.u);
      cr_assert_eq(r.ecdf_rank, (size_t)json_object_get_int64(
                                    vec_get(exp, "rank")));
      cr_assert_eq(e.n, (size_t)json_object_get_int64(
                        vec_get(exp, "calibration_size")));
      cr_assert_eq(r.sample_mean, vec_double(vec_get(exp, "sample_mean")));
      free(b);
      probed++;
    }
  }
  cr_assert_geq(probed, 20);
  amp_ecdf_free(&e);

  /* uncalibrated */
  b = (uint8_t *)"abc";
  cr_assert_eq(amp_ecdf(&e, &p, b, 3, &r), AMP_E_UNCALIBRATED);
  cr_assert_str_eq(amp_strerror(AMP_ECDF, AMP_E_UNCALIBRATED),
                   json_object_get_string(vec_get(uncal, "message")));
  json_object_put(uncal);
}

Test(amplify, ecdf_failed_recalibration_keeps_the_old_one)
{
  struct amp_ecdf e = { NULL, 0 };
  double good[] = { 3.0, 1.0, 2.0 }, flat[] = { 5.0, 5.0 };

  cr_assert_eq(amp_ecdf_calibrate(&e, good, 3), 0);
  cr_assert_eq(e.means[0], 1.0);
  cr_assert_eq(amp_ecdf_calibrate(&e, flat, 2), AMP_E_ZERO_VARIANCE);
  cr_assert_eq(e.n, 3);
  cr_assert_eq(amp_ecdf_calibrate(&e, good, 1), AMP_E_ZERO_VARIANCE);
  amp_ecdf_free(&e);
}

Test(amplify, zscore_thought_matches_reference_vectors)
{
  struct json_object *c, *bufs, *per, *agg;
  struct amp_thought t;
  struct amp_aggregate a;
  struct amp_params p;
  struct amp_result r;
  struct vec_iter it;
  uint8_t *b;
  size_t j, len;

  c = vec_first(&it, "amplify_zscore.json", "thought_cases");
  cr_assert_geq(it.n, 4);
  for (; c; c = vec_next(&it)) {
    case_params(c, &p);
    bufs = vec_get(c, "buffers_hex");
    per = vec_get(c, "expected_per_call");
    amp_thought_add(&t, 12345, 99);       /* begin must clear this */
    amp_thought_begin(&t);
    for (j = 0; j < json_object_array_length(bufs); j++) {
      b = vec_hex(json_object_get_string(json_object_array_get_idx(bufs, j)),
                  &len);
      cr_assert_eq(amp_zscore_mean(&p, b, len, &r), 0);
      cr_assert_eq(r.u, vec_double(vec_get(json_object_array_get_idx(per, j),
                                           "u")));
      cr_assert_eq(r.z, vec_double(vec_get(json_object_array_get_idx(per, j),
                                           "z")));
      amp_thought_add(&t, r.byte_sum, r.sample_count);
      free(b);
    }
    amp_thought_aggregate(&t, &p, &a);
    agg = vec_get(c, "expected_aggregate");
    cr_assert_eq(a.sample_mean, vec_double(vec_get(agg, "sample_mean")),
                 "%s", name_of(c));
    cr_assert_eq(a.z, vec_double(vec_get(agg, "z_score")), "%s %.17g",
                 name_of(c), a.z);
    cr_assert_eq(a.sem, vec_double(vec_get(agg, "sem")), "%s", name_of(c));
    cr_assert_eq(a.sample_count,
                 (uint64_t)json_object_get_int64(vec_get(agg,
                                                         "sample_count")));
    cr_assert_eq(a.bias, vec_double(vec_get(agg, "bias")), "%s", name_of(c));
    cr_assert_eq(a.u, vec_double(vec_get(agg, "u")), "%s %.17g", name_of(c),
                 a.u);
  }
}

Test(amplify, zscore_calibration_matches_reference_vectors)
{
  struct json_object *c, *exp, *err;
  struct amp_params p;
  struct amp_result r;
  struct vec_iter it;
  double *m, mean, std;
  uint8_t *b;
  size_t n, len, ok;
  int rc;

  ok = 0;
  for (c = vec_first(&it, "amplify_zscore.json", "calibration_cases"); c;
       c = vec_next(&it)) {
    exp = vec_get(c, "expected");
    m = block_means(vec_get(c, "blocks_hex"), &n);
    rc = amp_zscore_calibrate(m, n, (uint32_t)json_object_get_int(
                                vec_get(c, "sample_count")), &mean, &std);
    free(m);
    if (json_object_object_get_ex(exp, "error", &err)) {
      expect_zero_variance(c, AMP_ZSCORE_MEAN, rc, exp);
      continue;
    }
    cr_assert_eq(rc, 0);
    cr_assert_float_eq(mean, vec_double(vec_get(exp, "baseline_mean")),
                       1e-12 * 128, "%s", name_of(c));
    cr_assert_float_eq(std, vec_double(vec_get(exp, "byte_std")), 1e-12 * 80,
                       "%s", name_of(c));
    p.population_mean = mean;
    p.population_std = std;
    p.epsilon = 1e-10;
    b = vec_hex(json_object_get_string(vec_get(exp, "probe_bytes_hex")),
                &len);
    cr_assert_eq(amp_zscore_mean(&p, b, len, &r), 0);
    cr_assert_float_eq(r.u, vec_double(vec_get(exp, "probe_u")), 1e-12);
    cr_assert_float_eq(r.z, vec_double(vec_get(exp, "probe_z")), 1e-11);
    free(b);
    ok++;
  }
  cr_assert_eq(ok, 2);
}

Test(amplify, pairwise_sum_is_numpys)
{
  double a[1000], plain;
  size_t i;

  /* Values whose sum depends on the order: the pairwise tree differs from
     a left-to-right sum, and both are checked against known values. */
  for (i = 0; i < 1000; i++)
    a[i] = (i % 3 == 0) ? 1e16 : (i % 3 == 1) ? 1.0 : -1e16;
  plain = 0.0;
  for (i = 0; i < 7; i++)
    plain += a[i];
  cr_assert_eq(amp_pairwise_sum(a, 7), plain);        /* short: sequential */
  /* 8 lanes of 16 (n = 128): lane j sums a[j], a[j+8], ... */
  for (i = 0; i < 128; i++)
    a[i] = 1.0 + (double)i;
  cr_assert_eq(amp_pairwise_sum(a, 128), 128.0 * 129.0 / 2.0);
  cr_assert_eq(amp_pairwise_sum(a, 0), 0.0);
}

Test(amplify, calibration_cache_is_bounded_and_lru)
{
  struct amp_calib_cache c;
  double m, s;
  uint32_t i;

  memset(&c, 0, sizeof(c));
  cr_assert_eq(amp_calib_lookup(&c, 100, 200, &m, &s), 0);
  for (i = 0; i < AMP_CALIB_CACHE; i++)
    amp_calib_store(&c, 100 + i, 200, 127.0 + i, 70.0);
  cr_assert_eq(amp_calib_lookup(&c, 100, 200, &m, &s), 1);   /* touch 100 */
  cr_assert_eq(m, 127.0);
  amp_calib_store(&c, 999, 200, 1.0, 2.0);                 /* evicts 101 */
  cr_assert_eq(c.n, AMP_CALIB_CACHE);
  cr_assert_eq(amp_calib_lookup(&c, 101, 200, &m, &s), 0);
  cr_assert_eq(amp_calib_lookup(&c, 100, 200, &m, &s), 1);
  cr_assert_eq(amp_calib_lookup(&c, 999, 200, &m, &s), 1);
  cr_assert_eq(s, 2.0);
  cr_assert_eq(amp_calib_lookup(&c, 999, 201, &m, &s), 0);  /* key: both */
  amp_calib_store(&c, 999, 200, 3.0, 4.0);                 /* replaces */
  cr_assert_eq(amp_calib_lookup(&c, 999, 200, &m, &s), 1);
  cr_assert_eq(m, 3.0);
  cr_assert_eq(c.n, AMP_CALIB_CACHE);
}
