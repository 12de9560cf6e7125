/* Token selection (client/sampling/select.c): the reference's select.json, edge
   cases, every stage order against a plain sort-everything
   implementation, and the frequencies of u-driven choices. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <qrs/sampler.h>

#include "sampling/select.h"
#include "vectors.h"

/* ---- helpers ---- */

#define TESTRNG_SEED 88172645463325252ull
#include "testrng.h"

static int
run(const double *x, size_t n, const struct qrs__sel_params *p,
    struct qrs__sel_out *o)
{
  struct qrs__sel_ws ws;
  struct qrs__view v = { x, QRS_DTYPE_F64, n };
  int r;

  cr_assert_eq(qrs__sel_ws_init(&ws, n), 0);
  r = qrs__select(&ws, &v, NULL, p, o);
  qrs__sel_ws_done(&ws);
  return r;
}

static struct qrs__sel_params
params(double T, long long top_k, double top_p, double min_p, double u)
{
  struct qrs__sel_params p;

  memset(&p, 0, sizeof(p));
  p.T = T;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.u = u;
  return p;
}

static int
has_key(struct json_object *o, const char *k)
{
  return json_object_object_get_ex(o, k, NULL);
}

static long long
jint(struct json_object *o, const char *k)
{
  return json_object_get_int64(vec_get(o, k));
}

/* ---- select.json ---- */

/* Cases where the reference picks a token from a broken row (NaN, +inf,
   all -inf) or raises TokenSelectionError for one: libqrs returns
   QRS_E_LOGITS for all of them (documented in qrs/sampler.h). */
static int
broken_row(struct json_object *logits)
{
  size_t i, n;
  double v;
  int finite;

  n = json_object_array_length(logits);
  finite = 0;
  for (i = 0; i < n; i++) {
    v = vec_double(json_object_array_get_idx(logits, i));
    if (isnan(v) || v == INFINITY)
      return 1;
    finite |= v > -INFINITY;
  }
  return !finite;
}

/* A case of select.json: its logits (a new array; *ret_n values) and its
   selection parameters. */
static double *
case_read(struct json_object *c, size_t *ret_n, struct qrs__sel_params *p)
{
  struct json_object *lg;
  double *x;
  size_t j, n;

  lg = vec_get(c, "logits");
  n = json_object_array_length(lg);
  x = malloc(n * sizeof(*x));
  cr_assert_not_null(x);
  for (j = 0; j < n; j++)
    x[j] = vec_double(json_object_array_get_idx(lg, j));
  *p = params(vec_double(vec_get(c, "temperature")), jint(c, "top_k"),
              vec_double(vec_get(c, "top_p")),
              vec_double(vec_get(c, "min_p")), vec_double(vec_get(c, "u")));
  p->order = json_object_get_boolean(vec_get(c, "truncate_first"))
               ? QRS__ORDER_TRUNCATE_FIRST
               : QRS__ORDER_REFERENCE;
  *ret_n = n;
  return x;
}

static void
check_select_json(int level, int as_f32)
{
  struct json_object *c, *lg, *exp, *ids;
  struct qrs__sel_params p;
  struct qrs__sel_out o;
  struct qrs__sel_ws ws;
  struct qrs__view view;
  struct vec_iter it;
  double *x, tol;
  float *xf;
  size_t j, n, checked;
  int r, ok;

  qrs__kernel_level(level);
  checked = 0;
  for (c = vec_first(&it, "select.json", "cases"); c; c = vec_next(&it)) {
    lg = vec_get(c, "logits");
    exp = vec_get(c, "expected");
    x = case_read(c, &n, &p);
    xf = malloc(n * sizeof(*xf));
    cr_assert_not_null(xf);
    for (j = 0; j < n; j++)
      xf[j] = (float)x[j];
    /* float32 rows go in as float32 (the reference's dtype); float64
       rows as float64, and as float32 too when every value is one. */
    view.dtype = QRS_DTYPE_F64;
    view.data = x;
    if (!strcmp(json_object_get_string(vec_get(c, "dtype")), "float32") ||
        as_f32) {
      for (j = 0; j < n; j++)
        if ((double)xf[j] != x[j] && !isnan(x[j]))
          break;
      if (j < n) {
        free(x);
        free(xf);
        continue;
      }
      view.dtype = QRS_DTYPE_F32;
      view.data = xf;
    }
    view.n = n;
    cr_assert_eq(qrs__sel_ws_init(&ws, n), 0);
    r = qrs__select(&ws, &view, NULL, &p, &o);
    qrs__sel_ws_done(&ws);
    if (broken_row(lg)) {
      cr_expect_eq(r, QRS_E_LOGITS, "%s: broken row gave %d",
                   json_object_get_string(vec_get(c, "name")), r);
    } else {
      cr_assert(json_object_get_boolean(vec_get(c, "robust")));
      cr_assert(!has_key(exp, "error"));
      cr_assert_eq(r, 0, "%s: %d", json_object_get_string(vec_get(c, "name")),
                   r);
      /* The tie rule (higher id first) reproduces the reference's pick on
         every tied vector; acceptable_token_ids lists the alternatives. */
      ids = vec_get(exp, "acceptable_token_ids");
      ok = 0;
      for (j = 0; j < json_object_array_length(ids); j++)
        ok |= (long long)o.token ==
              json_object_get_int64(json_object_array_get_idx(ids, j));
      cr_expect(ok, "%s: token %u not acceptable",
                json_object_get_string(vec_get(c, "name")), o.token);
      cr_expect_eq(o.token, jint(exp, "token_id"), "%s: token %u want %lld",
                   json_object_get_string(vec_get(c, "name")), o.token,
                   jint(exp, "token_id"));
      cr_expect_eq(o.rank, jint(exp, "token_rank"), "%s: rank",
                   json_object_get_string(vec_get(c, "name")));
      cr_expect_eq(o.num_candidates, jint(exp, "num_candidates"),
                   "%s: num_candidates %u",
                   json_object_get_string(vec_get(c, "name")),
                   o.num_candidates);
      tol = view.dtype == QRS_DTYPE_F32 ? 1e-6 : 1e-12;
      cr_expect_float_eq(o.prob, vec_double(vec_get(exp, "token_prob")),
                         tol * vec_double(vec_get(exp, "token_prob")),
                         "%s: prob %.17g",
                         json_object_get_string(vec_get(c, "name")), o.prob);
      if (has_key(exp, "greedy")) {
        cr_expect(o.greedy);
      } else {
        cr_expect_eq((long long)o.eff_top_k, jint(exp, "effective_top_k"),
                     "%s: eff k", json_object_get_string(vec_get(c, "name")));
        cr_expect_eq((long long)o.eff_top_p,
                     jint(exp, "effective_top_p_candidates"),
                     "%s: eff top-p %zu",
                     json_object_get_string(vec_get(c, "name")), o.eff_top_p);
        cr_expect_eq((long long)o.eff_min_p,
                     jint(exp, "effective_min_p_candidates"),
                     "%s: eff min-p %zu",
                     json_object_get_string(vec_get(c, "name")), o.eff_min_p);
        /* The audit interval holds u (u inside (0, 1)). */
        if (p.u > 0.0 && p.u < 1.0)
          cr_expect(o.cdf_lo <= p.u + 1e-12 && p.u <= o.cdf_hi + 1e-12,
                    "%s: u %g outside [%g, %g]",
                    json_object_get_string(vec_get(c, "name")), p.u,
                    o.cdf_lo, o.cdf_hi);
      }
    }
    checked++;
    free(x);
    free(xf);
  }
  cr_assert_geq(checked, 50);
}

Test(select, reference_vectors_avx2_or_best)
{
  check_select_json(2, 0);
}

Test(select, reference_vectors_sse2)
{
  check_select_json(1, 0);
}

Test(select, reference_vectors_as_float32_rows)
{
  check_select_json(2, 1);
}

/* The same vectors through the public API: config fields to sampler. */
Test(select, reference_vectors_through_the_sampler)
{
  struct json_object *c, *exp;
  struct qrs_sampler_config *cfg;
  struct qrs_sampler *s;
  struct qrs_token_record rec;
  struct qrs__sel_params p;
  struct vec_iter it;
  uint32_t tok;
  double *x;
  size_t n, ok, refused;
  int r;

  ok = refused = 0;
  for (c = vec_first(&it, "select.json", "cases"); c; c = vec_next(&it)) {
    exp = vec_get(c, "expected");
    if (broken_row(vec_get(c, "logits")))
      continue;
    x = case_read(c, &n, &p);
    cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
    cr_assert_eq(qrs_sampler_config_set_double(cfg, "fixed_temperature",
                                               p.T), 0);
    cr_assert_eq(qrs_sampler_config_set_int(cfg, "top_k", p.top_k), 0);
    cr_assert_eq(qrs_sampler_config_set_double(cfg, "top_p", p.top_p), 0);
    cr_assert_eq(qrs_sampler_config_set_double(cfg, "min_p_base", p.min_p),
                 0);
    cr_assert_eq(qrs_sampler_config_set(cfg, "truncate_first",
                                        p.order == QRS__ORDER_TRUNCATE_FIRST
                                        ? "1" : "0"), 0);
    if (isnan(p.top_p)) {
      /* The reference keeps every token; libqrs refuses a NaN field. */
      cr_expect_eq(qrs_sampler_new(cfg, n, &s), QRS_E_CONFIG_VALUE);
      qrs_sampler_config_free(cfg);
      free(x);
      continue;
    }
    cr_assert_eq(qrs_sampler_new(cfg, n, &s), 0);
    r = qrs_sampler_select_u(s, x, QRS_DTYPE_F64, n, p.u, &tok, &rec);
    if (!(p.u >= 0.0 && p.u <= 1.0)) {
      /* The reference selects with any u (NaN: the last survivor); the
         selection above matches it, the sampler refuses such a u. */
      cr_expect_eq(r, QRS_E_U_RANGE, "%s",
                   json_object_get_string(vec_get(c, "name")));
      refused++;
      qrs_sampler_free(s);
      qrs_sampler_config_free(cfg);
      free(x);
      continue;
    }
    cr_assert_eq(r, 0, "%s", json_object_get_string(vec_get(c, "name")));
    cr_expect_eq(tok, jint(exp, "token_id"), "%s",
                 json_object_get_string(vec_get(c, "name")));
    cr_expect_eq(rec.token_rank, jint(exp, "token_rank"));
    cr_expect_eq(rec.num_candidates, jint(exp, "num_candidates"));
    if (has_key(exp, "greedy"))
      cr_expect(isnan(rec.min_p_used), "greedy: min_p_used is null");
    else
      cr_expect_float_eq(rec.min_p_used, p.min_p, 0.0);
    ok++;
    qrs_sampler_free(s);
    qrs_sampler_config_free(cfg);
    free(x);
  }
  cr_assert_geq(ok, 70);
  cr_expect_eq(refused, 3, "u above 1, negative and NaN");
}

/* ---- edge cases ---- */

Test(select, greedy_takes_the_lowest_id_among_maximal_logits)
{
  double x[] = { 1.0, 3.0, -INFINITY, 3.0, 2.0 };
  struct qrs__sel_params p;
  struct qrs__sel_out o;

  p = params(0.0, 0, 1.0, 0.0, 0.99);
  cr_assert_eq(run(x, 5, &p, &o), 0);
  cr_expect_eq(o.token, 1);
  cr_expect(o.greedy);
  cr_expect_eq(o.num_candidates, 1);
  cr_expect_float_eq(o.prob, 1.0, 0.0);
  p.T = -2.0;
  cr_assert_eq(run(x, 5, &p, &o), 0);
  cr_expect_eq(o.token, 1);
}

Test(select, top_k_at_or_above_the_vocabulary_keeps_everything)
{
  double x[] = { 0.1, 0.4, 0.2, 0.3 };
  struct qrs__sel_params p;
  struct qrs__sel_out o;
  long long k;

  for (k = 4; k <= 9; k += 5) {
    p = params(1.0, k, 1.0, 0.0, 0.999);
    cr_assert_eq(run(x, 4, &p, &o), 0);
    cr_expect_eq(o.eff_top_k, 4);
    cr_expect_eq(o.num_candidates, 4);
    cr_expect_eq(o.token, 0, "u near 1: the least probable");
    cr_expect_eq(o.rank, 3);
  }
}

Test(select, top_p_one_disables_and_min_p_cuts_in_logit_space)
{
  /* p ~ e^0, e^-1, e^-2, e^-3: min-p 0.2 keeps e^-d >= 0.2 (d <= 1.6). */
  double x[] = { -3.0, 0.0, -2.0, -1.0 };
  struct qrs__sel_params p;
  struct qrs__sel_out o;

  p = params(1.0, 0, 1.0, 0.0, 0.999999);
  cr_assert_eq(run(x, 4, &p, &o), 0);
  cr_expect_eq(o.num_candidates, 4);
  cr_expect_eq(o.token, 0);
  p.min_p = 0.2;
  cr_assert_eq(run(x, 4, &p, &o), 0);
  cr_expect_eq(o.num_candidates, 2);
  cr_expect_eq(o.eff_min_p, 2);
  cr_expect_eq(o.token, 3);
  cr_expect_float_eq(o.prob, exp(-1.0) / (1.0 + exp(-1.0)), 1e-15);
  /* At T = 1.5 the cut is at d <= 2.41: three tokens. */
  p.T = 1.5;
  cr_assert_eq(run(x, 4, &p, &o), 0);
  cr_expect_eq(o.num_candidates, 3);
}

Test(select, u_at_the_clamp_limits)
{
  double x[] = { 2.0, 1.0, 0.0, -1.0, 0.5 };
  struct qrs__sel_params p;
  struct qrs__sel_out o;

  p = params(1.0, 0, 1.0, 0.0, 1e-10);
  cr_assert_eq(run(x, 5, &p, &o), 0);
  cr_expect_eq(o.token, 0);
  cr_expect_eq(o.rank, 0);
  p.u = 1.0 - 1e-10;
  cr_assert_eq(run(x, 5, &p, &o), 0);
  cr_expect_eq(o.token, 3);
  cr_expect_eq(o.rank, 4);
  cr_expect_float_eq(o.cdf_hi, 1.0, 1e-15);
}

Test(select, single_token_vocabulary)
{
  double x[] = { -7.5 };
  struct qrs__sel_params p;
  struct qrs__sel_out o;

  p = params(0.7, 1, 0.5, 0.3, 0.42);
  cr_assert_eq(run(x, 1, &p, &o), 0);
  cr_expect_eq(o.token, 0);
  cr_expect_float_eq(o.prob, 1.0, 0.0);
  cr_expect_eq(o.num_candidates, 1);
}

Test(select, masked_logits_never_win_and_do_not_count)
{
  double x[] = { -INFINITY, 1.0, -INFINITY, 1.0, -INFINITY, 0.0 };
  struct qrs__sel_params p;
  struct qrs__sel_out o;
  double u;

  for (u = 0.01; u < 1.0; u += 0.07) {
    p = params(0.9, 0, 1.0, 0.0, u);
    cr_assert_eq(run(x, 6, &p, &o), 0);
    cr_expect(o.token == 1 || o.token == 3 || o.token == 5);
    cr_expect_eq(o.num_candidates, 3);
    /* Equal logits: the higher id first. */
    if (o.rank == 0)
      cr_expect_eq(o.token, 3);
  }
  p = params(1.0, 2, 1.0, 0.0, 0.9);
  cr_assert_eq(run(x, 6, &p, &o), 0);
  cr_expect_eq(o.num_candidates, 2);
  cr_expect_eq(o.token, 1);
}

Test(select, broken_rows_are_an_error_never_a_token)
{
  double nan_row[] = { 0.0, NAN, 1.0 };
  double inf_row[] = { 0.0, INFINITY, 1.0 };
  double masked[] = { -INFINITY, -INFINITY };
  struct qrs__sel_params p;
  struct qrs__sel_out o;

  p = params(1.0, 0, 1.0, 0.0, 0.5);
  cr_expect_eq(run(nan_row, 3, &p, &o), QRS_E_LOGITS);
  cr_expect_eq(run(inf_row, 3, &p, &o), QRS_E_LOGITS);
  cr_expect_eq(run(masked, 2, &p, &o), QRS_E_LOGITS);
  p.T = 0.0;
  cr_expect_eq(run(nan_row, 3, &p, &o), QRS_E_LOGITS);
  cr_expect_eq(run(masked, 2, &p, &o), QRS_E_LOGITS);
}

Test(select, half_precision_rows_select_as_their_float_values)
{
  /* Values exact in binary16 and bfloat16. */
  static const uint16_t h[] = { 0x3c00, 0x4000, 0xbc00, 0x3800, 0xfc00 };
  static const uint16_t bf[] = { 0x3f80, 0x4000, 0xbf80, 0x3f00, 0xff80 };
  double x[] = { 1.0, 2.0, -1.0, 0.5, -INFINITY };
  struct qrs__sel_params p;
  struct qrs__sel_out a, b, c;
  struct qrs__sel_ws ws;
  struct qrs__view v;
  double u;

  cr_assert_eq(qrs__sel_ws_init(&ws, 5), 0);
  for (u = 0.05; u < 1.0; u += 0.1) {
    p = params(0.8, 0, 0.9, 0.0, u);
    v.data = x;
    v.dtype = QRS_DTYPE_F64;
    v.n = 5;
    cr_assert_eq(qrs__select(&ws, &v, NULL, &p, &a), 0);
    v.data = h;
    v.dtype = QRS_DTYPE_F16;
    cr_assert_eq(qrs__select(&ws, &v, NULL, &p, &b), 0);
    v.data = bf;
    v.dtype = QRS_DTYPE_BF16;
    cr_assert_eq(qrs__select(&ws, &v, NULL, &p, &c), 0);
    cr_expect_eq(a.token, b.token);
    cr_expect_eq(a.token, c.token);
    cr_expect_float_eq(a.prob, b.prob, 1e-15);
    cr_expect_float_eq(a.prob, c.prob, 1e-15);
  }
  qrs__sel_ws_done(&ws);
}

/* ---- against a plain implementation that sorts everything ---- */

struct plain {
  uint32_t token, rank, ncand;
  double prob;
  double margin;                  /* closest decision to its threshold */
};

static const double *sort_x;

static int
by_order(const void *a, const void *b)
{
  uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;

  if (sort_x[i] != sort_x[j])
    return sort_x[i] > sort_x[j] ? -1 : 1;
  return i > j ? -1 : 1;
}

static void
track(double *margin, double c, double t, double z)
{
  double d = fabs(c - t) / z;

  if (d < *margin)
    *margin = d;
}

/* Prefix of ord (len n) whose running sum of w first reaches t. */
static size_t
cut_at(const uint32_t *ord, const double *w, size_t n, double t, double z,
       double *margin, double *zcut)
{
  double c = 0.0;
  size_t j;

  for (j = 0; j < n; j++) {
    c += w[ord[j]];
    track(margin, c, t, z);
    if (c >= t) {
      *zcut = c;
      return j + 1;
    }
  }
  *zcut = c;
  return n;
}

/* How many of the first len tokens (in order ord; max logit m) min-p
   keeps at temperature tt: those with (x - m) / tt >= lnmp (log min_p),
   the margins of the kept ones and of the first one cut tracked. */
static size_t
min_p_cut(const double *x, const uint32_t *ord, size_t len, double m,
          double tt, double lnmp, double *margin)
{
  size_t j;

  for (j = 0; j < len && (x[ord[j]] - m) / tt >= lnmp; j++)
    track(margin, (x[ord[j]] - m) / tt, lnmp, 1.0);
  if (j < len)
    track(margin, (x[ord[j]] - m) / tt, lnmp, 1.0);
  return j;
}

static void
plain_select(const double *x, size_t n, const struct qrs__sel_params *p,
             struct plain *out)
{
  uint32_t *ord;
  double *w, m, z, zc, lnmp, c;
  size_t i, j, len, cand;
  int order;

  ord = malloc(n * sizeof(*ord));
  w = malloc(n * sizeof(*w));
  for (i = 0; i < n; i++)
    ord[i] = (uint32_t)i;
  sort_x = x;
  qsort(ord, n, sizeof(*ord), by_order);
  m = x[ord[0]];
  out->margin = INFINITY;
  order = p->order;
  len = n;
  if (p->top_k > 0 && (size_t)p->top_k < n) {
    len = (size_t)p->top_k;
    if (order == QRS__ORDER_HF)
      while (len < n && x[ord[len]] == x[ord[len - 1]])
        len++;
  }
  lnmp = p->min_p > 0.0 ? log(p->min_p) : -INFINITY;
  /* Truncations at their temperature; all keep prefixes. */
  if (order == QRS__ORDER_REFERENCE || order == QRS__ORDER_TRUNCATE_FIRST) {
    double tt = order == QRS__ORDER_REFERENCE ? p->T : 1.0;

    if (p->min_p > 0.0) {
      len = min_p_cut(x, ord, len, m, tt, lnmp, &out->margin);
    } else if (order == QRS__ORDER_TRUNCATE_FIRST) {
      for (j = 0; j < len && exp(x[ord[j]] - m) > 0.0; j++)
        ;
      len = j;
    }
    for (i = 0; i < len; i++)
      w[ord[i]] = exp((x[ord[i]] - m) / p->T);
    if (p->top_p < 1.0) {
      z = 0.0;
      for (i = 0; i < len; i++)
        z += w[ord[i]];
      len = cut_at(ord, w, len, p->top_p * z, z, &out->margin, &zc);
    }
  } else {
    double tt = order == QRS__ORDER_HF ? p->T : 1.0;
    size_t lp, lm;

    for (i = 0; i < len; i++)
      w[ord[i]] = exp((x[ord[i]] - m) / tt);
    lp = len;
    if (p->top_p < 1.0) {
      z = 0.0;
      for (i = 0; i < len; i++)
        z += w[ord[i]];
      lp = cut_at(ord, w, len, p->top_p * z, z, &out->margin, &zc);
    }
    lm = len;
    if (p->min_p > 0.0)
      lm = min_p_cut(x, ord, len, m, tt, lnmp, &out->margin);
    len = lp < lm ? lp : lm;
    for (i = 0; i < len; i++)
      w[ord[i]] = exp((x[ord[i]] - m) / p->T);
  }
  cand = 0;
  z = 0.0;
  for (i = 0; i < len; i++) {
    cand += w[ord[i]] > 0.0;
    z += w[ord[i]];
  }
  c = 0.0;
  for (i = 0; i < cand; i++) {
    c += w[ord[i]];
    track(&out->margin, c, p->u * z, z);
    if (c >= p->u * z)
      break;
  }
  if (i == cand)
    i = cand - 1;
  out->token = ord[i];
  out->rank = (uint32_t)i;
  out->ncand = (uint32_t)cand;
  out->prob = w[ord[i]] / z;
  free(ord);
  free(w);
}

enum rowkind { ZIPF, FLAT, TIES, MASKED, WIDE, KINDS };

static void
make_row(double *x, size_t n, int kind)
{
  size_t i;

  for (i = 0; i < n; i++) {
    switch (kind) {
    case ZIPF:
      x[i] = -1.4 * log(1.0 + floor(rnd() * (double)n)) + 0.2 * rnd();
      break;
    case FLAT:
      x[i] = rnd();
      break;
    case TIES:
      x[i] = floor(rnd() * 4.0) * 0.5;
      break;
    case MASKED:
      x[i] = rnd() < 0.4 ? -INFINITY : 3.0 * rnd();
      break;
    default:
      /* Gaps of hundreds to thousands: subnormal and zero weights. */
      x[i] = -1500.0 * rnd() * rnd();
      break;
    }
  }
  /* at least one finite logit */
  x[n / 2] = kind == WIDE ? 0.0 : 1.0;
}

static void
cross_check(int level, size_t n, int trials)
{
  static const double Ts[] = { 0.25, 0.7, 1.0, 1.6 };
  static const double tps[] = { 1.0, 0.95, 0.6, 0.0 };
  static const double mps[] = { 0.0, 0.0, 0.02, 0.3 };
  struct qrs__sel_ws ws;
  struct qrs__sel_params p;
  struct qrs__sel_out o;
  struct qrs__view v;
  struct plain e;
  double *x;
  long long ks[4];
  int t, kind, robust;

  qrs__kernel_level(level);
  x = malloc(n * sizeof(*x));
  cr_assert_eq(qrs__sel_ws_init(&ws, n), 0);
  ks[0] = 0;
  ks[1] = 3;
  ks[2] = (long long)(n / 3 + 1);
  ks[3] = (long long)n - 1;
  robust = 0;
  for (t = 0; t < trials; t++) {
    kind = t % KINDS;
    make_row(x, n, kind);
    p = params(Ts[(t / 5) % 4], ks[(t / 3) % 4], tps[(t / 7) % 4],
               mps[(t / 2) % 4], rnd());
    p.order = (enum qrs__order)((t / 11) % 4);
    v.data = x;
    v.dtype = QRS_DTYPE_F64;
    v.n = n;
    cr_assert_eq(qrs__select(&ws, &v, NULL, &p, &o), 0);
    plain_select(x, n, &p, &e);
    if (e.margin < 1e-9)
      continue;   /* a decision within rounding of its threshold */
    robust++;
    cr_assert_eq(o.token, e.token,
                 "n %zu trial %d kind %d order %d T %g k %lld top_p %g "
                 "min_p %g u %.17g: token %u want %u",
                 n, t, kind, p.order, p.T, p.top_k, p.top_p, p.min_p, p.u,
                 o.token, e.token);
    cr_assert_eq(o.rank, e.rank, "trial %d: rank %u want %u", t, o.rank,
                 e.rank);
    cr_assert_eq(o.num_candidates, e.ncand, "trial %d: cand %u want %u", t,
                 o.num_candidates, e.ncand);
    cr_assert_float_eq(o.prob, e.prob, 1e-10 * e.prob + 1e-300,
                       "trial %d: prob %.17g want %.17g", t, o.prob, e.prob);
  }
  cr_expect_gt(robust, trials / 2, "only %d of %d trials robust", robust,
               trials);
  qrs__sel_ws_done(&ws);
  free(x);
}

Test(select, every_order_matches_a_full_sort_small_rows)
{
  cross_check(2, 7, 400);
  cross_check(2, 60, 400);
}

Test(select, every_order_matches_a_full_sort_large_rows)
{
  /* 5000: crowded buckets and a head list that overflows (flat rows);
     wide rows reach the tail of the histogram and subnormal weights. */
  cross_check(2, 5000, 220);
}

Test(select, every_order_matches_a_full_sort_sse2_kernels)
{
  cross_check(1, 700, 220);
}

Test(select, both_kernel_variants_pick_the_same_tokens)
{
  struct qrs__sel_params p;
  struct qrs__sel_out a, b;
  double *x;
  size_t n = 3000;
  int t;

  x = malloc(n * sizeof(*x));
  for (t = 0; t < 40; t++) {
    make_row(x, n, t % KINDS);
    p = params(0.9, 0, 0.97, 0.0, rnd());
    qrs__kernel_level(1);
    cr_assert_eq(run(x, n, &p, &a), 0);
    qrs__kernel_level(2);
    cr_assert_eq(run(x, n, &p, &b), 0);
    cr_expect_eq(a.token, b.token);
    cr_expect_float_eq(a.prob, b.prob, 1e-13 * a.prob);
  }
  free(x);
}

/* ---- statistics ---- */

/* Upper tail of the chi-square distribution (regularised Q(k/2, x/2)). */
static double
chi2_q(double x, int k)
{
  double a = k / 2.0, xx = x / 2.0, sum, term, b, c, d, h, an, del;
  int i;

  if (xx < a + 1.0) {
    sum = term = 1.0 / a;
    for (i = 1; i < 500; i++) {
      term *= xx / (a + i);
      sum += term;
    }
    return 1.0 - sum * exp(-xx + a * log(xx) - lgamma(a));
  }
  b = xx + 1.0 - a;
  c = 1e300;
  d = 1.0 / b;
  h = d;
  for (i = 1; i < 500; i++) {
    an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    d = fabs(d) < 1e-300 ? 1e-300 : d;
    c = b + an / c;
    c = fabs(c) < 1e-300 ? 1e-300 : c;
    d = 1.0 / d;
    del = d * c;
    h *= del;
    if (fabs(del - 1.0) < 1e-15)
      break;
  }
  return exp(-xx + a * log(xx) - lgamma(a)) * h;
}

Test(select, frequencies_of_uniform_u_match_the_distribution)
{
  enum { K = 20, N = 200000 };
  struct qrs__sel_ws ws;
  struct qrs__sel_params p;
  struct qrs__sel_out o;
  struct qrs__view v;
  double x[K], pr[K], z, chi, q;
  long cnt[K];
  int i;

  for (i = 0; i < K; i++)
    x[i] = -0.35 * i + 0.2 * sin(i);
  z = 0.0;
  for (i = 0; i < K; i++)
    z += exp(x[i] - x[0]);
  for (i = 0; i < K; i++)
    pr[i] = exp(x[i] - x[0]) / z;
  memset(cnt, 0, sizeof(cnt));
  cr_assert_eq(qrs__sel_ws_init(&ws, K), 0);
  v.data = x;
  v.dtype = QRS_DTYPE_F64;
  v.n = K;
  for (i = 0; i < N; i++) {
    p = params(1.0, 0, 1.0, 0.0, rnd());
    cr_assert_eq(qrs__select(&ws, &v, NULL, &p, &o), 0);
    cnt[o.token]++;
  }
  qrs__sel_ws_done(&ws);
  chi = 0.0;
  for (i = 0; i < K; i++)
    chi += (cnt[i] - N * pr[i]) * (cnt[i] - N * pr[i]) / (N * pr[i]);
  q = chi2_q(chi, K - 1);
  cr_expect_gt(q, 1e-4, "chi-square %g (df %d): p = %g", chi, K - 1, q);
  /* And the test itself rejects a wrong distribution. */
  cnt[0] += 2000;
  cnt[1] -= 2000;
  chi = 0.0;
  for (i = 0; i < K; i++)
    chi += (cnt[i] - N * pr[i]) * (cnt[i] - N * pr[i]) / (N * pr[i]);
  cr_expect_lt(chi2_q(chi, K - 1), 1e-4);
}

/* ---- denormals and non-finite values ---- */

#if defined(__x86_64__) || defined(__i386__)
#include <valgrind/valgrind.h>
#include <xmmintrin.h>

/* A float16 row of half subnormals under DAZ/FTZ: greedy (and every
   configuration) returns a token of the row, the same one as without
   the mode, never the row length. */
Test(select, daz_ftz_mode_never_changes_a_pick)
{
  struct qrs__sel_ws ws;
  struct qrs__sel_out a, b;
  struct qrs__sel_params p;
  struct qrs__view v;
  uint16_t h[53];
  size_t i, l, c;
  unsigned old;
  static const int levels[] = { 1, 2 };
  static const double Ts[] = { 0.0, 1.0, 1e-6 };

  if (RUNNING_ON_VALGRIND)
    cr_skip_test("valgrind does not model the MXCSR DAZ/FTZ bits (this "
                 "test runs in the normal and ASan suites)");
  for (i = 0; i < 53; i++)
    h[i] = (uint16_t)(1 + (i * 29) % 900);
  h[40] = 950;
  v = (struct qrs__view){ h, QRS_DTYPE_F16, 53 };
  cr_assert_eq(qrs__sel_ws_init(&ws, 53), 0);
  for (l = 0; l < 2; l++) {
    qrs__kernel_level(levels[l]);
    for (c = 0; c < 3; c++) {
      p = params(Ts[c], c == 2 ? 5 : 0, 0.9, 0.0, 0.4);
      cr_assert_eq(qrs__select(&ws, &v, NULL, &p, &a), 0);
      old = _mm_getcsr();
      _mm_setcsr(old | 0x8040u);
      i = (size_t)qrs__select(&ws, &v, NULL, &p, &b);
      cr_assert_eq(_mm_getcsr(), old | 0x8040u, "mode restored");
      _mm_setcsr(old);
      cr_assert_eq((int)i, 0);
      cr_expect_lt(b.token, 53);
      cr_expect_eq(a.token, b.token, "T %g level %d", Ts[c], levels[l]);
      cr_expect_eq(a.num_candidates, b.num_candidates);
    }
  }
  qrs__sel_ws_done(&ws);
}
#endif

/* T below 2^-1024: 1 / T overflows.  The selection stays exact (the
   max's ties share the mass, every other weight is 0) for float32 rows
   and is a typed error for float64 rows, never NaN probabilities,
   NO_CANDIDATES with min-p or wrong mirostat counts. */
Test(select, temperatures_below_the_reciprocal_range_stay_exact)
{
  static const float f[6] = { 1.0f, 3.0f, 3.0f, 0x1p-20f, 3.0f, -2.0f };
  double x[6];
  struct qrs__sel_ws ws;
  struct qrs__sel_out o;
  struct qrs__sel_params p;
  struct qrs__view v = { f, QRS_DTYPE_F32, 6 };
  size_t i, k;
  static const enum qrs__order ord[] = {
    QRS__ORDER_REFERENCE, QRS__ORDER_TRUNCATE_FIRST, QRS__ORDER_HF,
    QRS__ORDER_LLAMA };

  cr_assert_eq(qrs__sel_ws_init(&ws, 6), 0);
  for (k = 0; k < 4; k++) {
    for (i = 0; i < 3; i++) {
      p = params(0x1p-1060, 0, i == 1 ? 0.5 : 1.0, i == 2 ? 0.1 : 0.0,
                 0.5);
      p.order = ord[k];
      cr_assert_eq(qrs__select(&ws, &v, NULL, &p, &o), 0, "order %zu", k);
      cr_expect_eq(o.num_candidates, i == 1 ? 2u : 3u,
                   "order %zu case %zu: %u", k, i, o.num_candidates);
      cr_expect(o.token == 1 || o.token == 2 || o.token == 4);
      cr_expect(isfinite(o.prob) && o.prob > 0.3, "prob %g", o.prob);
    }
  }
  p = params(0x1p-1060, 0, 1.0, 0.0, 0.5);
  p.nucleus = QRS__NUCLEUS_MIROSTAT;
  p.mu = 10.0;
  cr_assert_eq(qrs__select(&ws, &v, NULL, &p, &o), 0);
  cr_expect_eq(o.num_candidates, 3u);
  for (i = 0; i < 6; i++)
    x[i] = f[i];
  v = (struct qrs__view){ x, QRS_DTYPE_F64, 6 };
  p = params(0x1p-1060, 0, 0.9, 0.1, 0.5);
  cr_expect_eq(qrs__select(&ws, &v, NULL, &p, &o), QRS_E_CONFIG_VALUE);
  p.T = 0x1p-1000;          /* 1 / T still finite: selected */
  cr_expect_eq(qrs__select(&ws, &v, NULL, &p, &o), 0);
  cr_expect(o.token == 1 || o.token == 2 || o.token == 4);
  qrs__sel_ws_done(&ws);
}
