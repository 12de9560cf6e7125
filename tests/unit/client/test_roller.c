/* The roller against tests/vectors/qthought.json: every mapping case,
   the validation errors (before any entropy is drawn), and the end-to-end
   thought over a scripted byte source with the real zscore_thought
   arithmetic; plus the buffer's bound. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <qrs/roller.h>

#include "amplify.h"
#include "vectors.h"

static int64_t
expected_int(struct json_object *e)
{
  if (json_object_is_type(e, json_type_boolean))
    return json_object_get_boolean(e);
  return json_object_get_int64(e);
}

Test(roller, mapping_cases_match_the_reference)
{
  struct json_object *c, *args, *arr, *rg;
  struct qrs_int_range ranges[16];
  struct vec_iter it;
  const char *method;
  double u, w[16];
  int64_t got;
  size_t j, n;

  c = vec_first(&it, "qthought.json", "mapping_cases");
  cr_assert_geq(it.n, 200);
  for (; c; c = vec_next(&it)) {
    method = json_object_get_string(vec_get(c, "method"));
    args = vec_get(c, "args");
    u = vec_double(vec_get(c, "u"));
    if (!strcmp(method, "choose") || !strcmp(method, "draw_index")) {
      cr_assert_eq(qrs_map_choose(u, (uint32_t)json_object_get_int(
                                         vec_get(args, "k")), &got), 0);
    } else if (!strcmp(method, "choose_weighted")) {
      arr = vec_get(args, "weights");
      n = json_object_array_length(arr);
      cr_assert_leq(n, 16);
      for (j = 0; j < n; j++)
        w[j] = vec_double(json_object_array_get_idx(arr, j));
      cr_assert_eq(qrs_map_choose_weighted(u, w, n, &got), 0);
    } else if (!strcmp(method, "coin")) {
      cr_assert_eq(qrs_map_coin(u, vec_double(vec_get(args, "p")), &got), 0);
    } else if (!strcmp(method, "bind_int")) {
      arr = vec_get(args, "ranges");
      n = json_object_array_length(arr);
      cr_assert_leq(n, 16);
      for (j = 0; j < n; j++) {
        rg = json_object_array_get_idx(arr, j);
        ranges[j].low = json_object_get_int64(json_object_array_get_idx(rg,
                                                                        0));
        ranges[j].high = json_object_get_int64(json_object_array_get_idx(rg,
                                                                         1));
        ranges[j].weight = vec_double(json_object_array_get_idx(rg, 2));
      }
      cr_assert_eq(qrs_map_bind_int(u, ranges, n, &got), 0);
    } else {
      cr_assert_fail("unknown method %s", method);
    }
    cr_assert_eq(got, expected_int(vec_get(c, "expected")),
                 "case %zu: %s u=%.17g -> %lld", it.i, method, u,
                 (long long)got);
  }
}

Test(roller, spec_constructors_are_the_references)
{
  struct qrs_int_range r[4];

  cr_assert_eq(qrs_range_time(r), 4);
  cr_assert(r[0].low == 0 && r[0].high == 5 && r[0].weight == 0.5);
  cr_assert(r[3].low == 18 && r[3].high == 23 && r[3].weight == 1.0);
  cr_assert_eq(qrs_range_age(r), 3);
  cr_assert(r[1].low == 18 && r[1].high == 64 && r[1].weight == 3.0);
  cr_assert_eq(qrs_range_year(r, 1900, 2099), 2);
  cr_assert(r[0].low == 1900 && r[0].high == 1999 && r[0].weight == 1.0);
  cr_assert(r[1].low == 2000 && r[1].high == 2099 && r[1].weight == 2.0);
  cr_assert_eq(qrs_range_year(r, -5, 0), 2);
  cr_assert_eq(r[0].high, -3);                  /* floor(-5 / 2) */
  cr_assert_eq(qrs_range_year(r, 5, 5), -EINVAL);
}

/* A scripted source: block i of the vector for draw i, through the real
   zscore arithmetic with the reference's default constants. */
struct script {
  uint8_t *blocks[16];
  size_t len[16];
  size_t n, next;
  int calls;
};

static int
script_draw(void *ctx, const struct qrs_draw_request *req,
            struct qrs_draw *d)
{
  struct amp_params p = { 127.5, 73.61215932167728, 1e-10 };
  struct script *s = ctx;
  struct amp_result a;

  s->calls++;
  if (s->next >= s->n)
    return -ENODATA;
  cr_assert_eq(req->sample_count, s->len[s->next]);
  cr_assert_str_eq(req->amplifier, "zscore_thought");
  cr_assert_eq(amp_zscore_mean(&p, s->blocks[s->next], s->len[s->next], &a),
               0);
  s->next++;
  memset(d, 0, sizeof(*d));
  d->u = a.u;
  d->z = a.z;
  d->sample_mean = a.sample_mean;
  d->sample_count = (uint32_t)a.sample_count;
  d->byte_sum = a.byte_sum;
  d->population_mean = p.population_mean;
  d->population_std = p.population_std;
  strcpy(d->source, "fake");
  strcpy(d->served_by, "fake");
  strcpy(d->amplifier, "zscore_thought");
  return 0;
}

static void
check_record(const struct qrs_provenance *p, struct json_object *e)
{
  struct json_object *agg;

  cr_assert_str_eq(qrs_decision_kind_name(p->kind),
                   json_object_get_string(vec_get(e, "kind")));
  cr_assert_eq(p->value, expected_int(vec_get(e, "value")));
  cr_assert_float_eq(p->u, vec_double(vec_get(e, "u")), 1e-15);
  cr_assert_float_eq(p->z_score, vec_double(vec_get(e, "z_score")), 1e-15);
  cr_assert_float_eq(p->bias, vec_double(vec_get(e, "bias")), 1e-15);
  cr_assert_str_eq(p->source, json_object_get_string(vec_get(e, "source")));
  cr_assert_eq(p->is_fallback, json_object_get_boolean(vec_get(e,
                                                         "is_fallback")));
  cr_assert_gt(p->generation_timestamp_ns, 0);
  cr_assert_geq(p->latency_ms, 0.0);
  if (!json_object_object_get_ex(e, "thought_aggregate", &agg) ||
      json_object_is_type(agg, json_type_null)) {
    cr_assert_eq(p->has_thought, 0);
    return;
  }
  cr_assert_eq(p->has_thought, 1);
  cr_assert_float_eq(p->thought.sample_mean,
                     vec_double(vec_get(agg, "sample_mean")), 1e-13);
  cr_assert_float_eq(p->thought.z_score, vec_double(vec_get(agg, "z_score")),
                     1e-15);
  cr_assert_float_eq(p->thought.sem, vec_double(vec_get(agg, "sem")), 1e-15);
  cr_assert_eq(p->thought.sample_count,
               (uint64_t)json_object_get_int64(vec_get(agg,
                                                       "sample_count")));
  cr_assert_float_eq(p->thought.bias, vec_double(vec_get(agg, "bias")),
                     1e-13);
  cr_assert_float_eq(p->thought.u, vec_double(vec_get(agg, "u")), 1e-15);
}

Test(roller, end_to_end_thought_matches_the_reference)
{
  struct json_object *v, *e, *blocks, *drained, *vals;
  struct qrs_sampler_config *cfg;
  struct qrs_provenance p, out[8];
  struct qrs_int_range ranges[4];
  struct qrs_roller *r;
  struct script s;
  double w[] = { 1, 2, 3 };
  size_t i;
  int n;

  v = vec_load("qthought.json");
  e = vec_get(v, "end_to_end");
  memset(&s, 0, sizeof(s));
  blocks = vec_get(e, "blocks_hex");
  s.n = json_object_array_length(blocks);
  for (i = 0; i < s.n; i++)
    s.blocks[i] = vec_hex(json_object_get_string(
                            json_object_array_get_idx(blocks, i)), &s.len[i]);

  cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
  cr_assert_eq(qrs_sampler_config_set(cfg, "signal_amplifier_type",
                                      json_object_get_string(vec_get(e,
                                        "signal_amplifier_type"))), 0);
  cr_assert_eq(qrs_sampler_config_set_int(cfg, "sample_count",
                                          json_object_get_int(vec_get(e,
                                            "sample_count"))), 0);
  cr_assert_eq(qrs_roller_new_custom(script_draw, &s, cfg, &r), 0);
  qrs_sampler_config_free(cfg);

  /* the calls of the vector, in order */
  vals = vec_get(e, "expected_values");
  qrs_roller_begin_thought(r);
  cr_assert_eq(qrs_roller_choose(r, 5, &p), 0);
  cr_assert_eq(p.value, expected_int(json_object_array_get_idx(vals, 0)));
  cr_assert_eq(qrs_roller_coin(r, 0.5, &p), 0);
  cr_assert_eq(p.value, expected_int(json_object_array_get_idx(vals, 1)));
  cr_assert_eq(qrs_roller_bind_int(r, ranges, (size_t)qrs_range_age(ranges),
                                   &p), 0);
  cr_assert_eq(p.value, expected_int(json_object_array_get_idx(vals, 2)));
  cr_assert_eq(qrs_roller_choose_weighted(r, w, 3, &p), 0);
  cr_assert_eq(p.value, expected_int(json_object_array_get_idx(vals, 3)));
  cr_assert_eq(qrs_roller_draw_u(r, &p), 0);
  check_record(&p, vec_get(e, "expected_draw_u"));
  cr_assert_eq(qrs_roller_choose(r, 2, &p), 0);
  cr_assert_eq(p.value, expected_int(json_object_array_get_idx(vals, 4)));
  cr_assert_eq(qrs_roller_pending(r), 5);          /* draw_u not buffered */

  drained = vec_get(e, "expected_drained");
  n = qrs_roller_drain(r, out, 8);
  cr_assert_eq(n, (int)json_object_array_length(drained));
  for (i = 0; i < (size_t)n; i++)
    check_record(&out[i], json_object_array_get_idx(drained, i));
  cr_assert_eq(qrs_roller_pending(r), 0);

  /* the thought is closed: the next drain has no aggregate */
  s.next = 0;
  cr_assert_eq(qrs_roller_coin(r, 0.5, NULL), 0);
  cr_assert_eq(qrs_roller_drain(r, out, 8), 1);
  cr_assert_eq(out[0].has_thought, 0);

  /* a failing draw is returned as is and records nothing */
  s.next = s.n;
  cr_assert_eq(qrs_roller_choose(r, 3, &p), -ENODATA);
  cr_assert_eq(qrs_roller_pending(r), 0);

  qrs_roller_free(r);
  for (i = 0; i < s.n; i++)
    free(s.blocks[i]);
  json_object_put(v);
}

Test(roller, validation_fails_before_any_draw)
{
  struct qrs_sampler_config *cfg;
  struct qrs_int_range ranges[2] = { { 0, 5, 1.0 }, { 6, 9, 1.0 } };
  struct qrs_roller *r;
  struct script s;
  double neg[] = { 1.0, -1.0 }, zero[] = { 0.0, 0.0 };
  int64_t v;

  memset(&s, 0, sizeof(s));
  cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
  cr_assert_eq(qrs_roller_new_custom(script_draw, &s, cfg, &r), 0);
  qrs_sampler_config_free(cfg);
  /* the nine reference ValueErrors */
  cr_assert_eq(qrs_roller_choose(r, 0, NULL), -EINVAL);
  cr_assert_eq(qrs_roller_choose_weighted(r, neg, 0, NULL), -EINVAL);
  cr_assert_eq(qrs_roller_choose_weighted(r, neg, 2, NULL), -EINVAL);
  cr_assert_eq(qrs_roller_choose_weighted(r, zero, 2, NULL), -EINVAL);
  cr_assert_eq(qrs_roller_coin(r, 1.5, NULL), -EINVAL);
  cr_assert_eq(qrs_roller_coin(r, NAN, NULL), -EINVAL);
  ranges[1].high = 5;
  cr_assert_eq(qrs_roller_bind_int(r, ranges, 2, NULL), -EINVAL);
  ranges[1].high = 9;
  ranges[1].weight = 0.0;
  cr_assert_eq(qrs_roller_bind_int(r, ranges, 2, NULL), -EINVAL);
  cr_assert_eq(qrs_roller_bind_int(r, ranges, 0, NULL), -EINVAL);
  cr_assert_eq(qrs_roller_draw_index(r, 0, NULL), -EINVAL);
  cr_assert_eq(s.calls, 0);
  cr_assert_eq(qrs_map_choose(0.5, 0, &v), -EINVAL);
  qrs_roller_free(r);
}

static int
const_draw(void *ctx, const struct qrs_draw_request *req, struct qrs_draw *d)
{
  (void)req;
  memset(d, 0, sizeof(*d));
  d->u = *(double *)ctx;
  d->sample_count = 10;
  d->byte_sum = 1275;
  return 0;
}

Test(roller, buffer_is_bounded_and_drains_in_order)
{
  struct qrs_provenance *out;
  struct qrs_roller *r;
  double u = 0.25;
  size_t i;
  int n;

  cr_assert_eq(qrs_roller_new_custom(const_draw, &u, NULL, &r), 0);
  for (i = 0; i < QRS_ROLLER_BUFFER + 10; i++) {
    u = (double)(i % 1000) / 1000.0;
    cr_assert_eq(qrs_roller_choose(r, 1000, NULL), 0);
  }
  cr_assert_eq(qrs_roller_pending(r), QRS_ROLLER_BUFFER);
  cr_assert_eq(qrs_roller_dropped(r), 10);
  out = calloc(QRS_ROLLER_BUFFER, sizeof(*out));
  cr_assert_not_null(out);
  n = qrs_roller_drain(r, out, 100);                 /* partial drain */
  cr_assert_eq(n, 100);
  cr_assert_eq(out[0].value, 10);                    /* oldest kept */
  cr_assert_eq(out[99].value, 109);
  n = qrs_roller_drain(r, out, QRS_ROLLER_BUFFER);
  cr_assert_eq(n, QRS_ROLLER_BUFFER - 100);
  cr_assert_eq(out[0].value, 110);
  cr_assert_eq(qrs_roller_drain(r, out, 4), 0);
  free(out);
  qrs_roller_free(r);
}
