/* Temperature strategies (client/sampling/temperature.c) against temperature.json,
   and the two strategies of qrs's own: entropy_throttle and
   mirostat_v2. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <qrs/sampler.h>

#include "sampling/sampling.h"
#include "cfgtext.h"
#include "vectors.h"

#define TOL 1e-12

#define TESTRNG_SEED 0x2545f4914f6cdd1dull
#include "testrng.h"

/* Resolved values: defaults plus the case's overrides.  An inner strategy
   name the config rejects (libqrs validates it; the reference does not)
   is written in afterwards, to exercise the strategy's own fallback. */
static void
config_of(struct json_object *ov, struct qrs__cfgvals *v)
{
  struct json_object_iter it;
  struct qrs_sampler_config *cfg;
  char buf[QRS_NAME_MAX], raw[QRS_NAME_MAX];
  int r;

  raw[0] = 0;
  cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
  json_object_object_foreachC(ov, it) {
    cfg_text(it.val, buf, sizeof(buf));
    r = qrs_sampler_config_set(cfg, it.key, buf);
    if (r == QRS_E_CONFIG_VALUE &&
        !strcmp(it.key, "coherence_inner_strategy")) {
      cr_expect(strstr(qrs_sampler_config_error(cfg),
                       "coherence_inner_strategy") != NULL);
      snprintf(raw, sizeof(raw), "%s", buf);
      continue;
    }
    cr_assert_eq(r, 0, "%s=%s: %s", it.key, buf,
                 qrs_sampler_config_error(cfg));
  }
  qrs__config_resolve(cfg, v);
  if (raw[0])
    snprintf(v->coherence_inner_strategy, sizeof(v->coherence_inner_strategy),
             "%s", raw);
  qrs_sampler_config_free(cfg);
}

static double *
logits_of(struct json_object *a, size_t *n)
{
  double *x;
  size_t i;

  *n = json_object_array_length(a);
  x = malloc(*n * sizeof(*x));
  for (i = 0; i < *n; i++)
    x[i] = vec_double(json_object_array_get_idx(a, i));
  return x;
}

static void
row_init(struct qrs__row *r, const double *x, size_t n)
{
  memset(r, 0, sizeof(*r));
  r->v.data = x;
  r->v.dtype = QRS_DTYPE_F64;
  r->v.n = n;
  qrs__kscan(&r->v, &r->scan);
}

static void
expect_close(double got, double want, double tol, const char *what,
             const char *name)
{
  if (isinf(want)) {
    cr_expect_eq(got, want, "%s %s: %g want %g", name, what, got, want);
    return;
  }
  cr_expect(fabs(got - want) <= tol * (fabs(want) > 1.0 ? fabs(want) : 1.0),
            "%s %s: %.17g want %.17g", name, what, got, want);
}

/* Compare one result with a vector's "expected" (temperature, H and the
   diagnostics libqrs reports). */
static void
check_result(const struct qrs__tresult *res, const struct qrs__strategy *st,
             struct json_object *exp, const char *name)
{
  struct json_object *d, *v;
  const double *tl;
  size_t i, n;

  expect_close(res->T, vec_double(vec_get(exp, "temperature")), TOL,
               "temperature", name);
  expect_close(res->H, vec_double(vec_get(exp, "shannon_entropy")), TOL,
               "entropy", name);
  if (!json_object_object_get_ex(exp, "diagnostics", &d))
    return;
#define DBL(key, field) \
  if (json_object_object_get_ex(d, key, &v) && \
      !json_object_is_type(v, json_type_null)) \
    expect_close(res->field, vec_double(v), 1e-11, key, name)
  DBL("min_p", min_p);
  DBL("varentropy", varentropy);
  DBL("h_ema", h_ema);
  DBL("vh_ema", vh_ema);
  DBL("d_h", d_h);
  DBL("d_vh", d_vh);
  DBL("pre_clamp_temp", pre_clamp_temp);
  DBL("pre_clamp_min_p", pre_clamp_min_p);
  DBL("h_norm", h_norm);
  DBL("h_kept", h_kept);
  DBL("entropy_removed", entropy_removed);
  DBL("alpha", alpha);
  DBL("t_mix", t_mix);
  DBL("bell", bell);
  DBL("vh_norm", vh_norm);
  DBL("vh_boost", vh_boost);
  DBL("gate_boost", gate_boost);
  DBL("coherence_z", coherence_z);
#undef DBL
#define INT(key, field) \
  if (json_object_object_get_ex(d, key, &v)) \
    cr_expect_eq((long long)res->field, json_object_get_int64(v), \
                 "%s %s: %lld", name, key, (long long)res->field)
  INT("n_kept", n_kept);
  INT("n_buffered", n_buffered);
  INT("n_penalized", n_penalized);
  INT("embeddings_attached", embeddings_attached);
  INT("gate_open", gate_open);
  INT("coherence_valid", coherence_valid);
#undef INT
  if (json_object_object_get_ex(d, "coherence_z", &v) &&
      json_object_is_type(v, json_type_null))
    cr_expect(isnan(res->coherence_z), "%s: coherence_z null", name);
  if (json_object_object_get_ex(d, "inner", &v))
    cr_expect_str_eq(res->inner, json_object_get_string(v), "%s: inner",
                     name);
  if (json_object_object_get_ex(d, "transformed_logits", &v)) {
    cr_assert(res->transformed, "%s: transformed logits expected", name);
    tl = st->inner ? st->inner->trow : st->trow;
    n = json_object_array_length(v);
    for (i = 0; i < n; i++)
      expect_close(tl[i], vec_double(json_object_array_get_idx(v, i)), TOL,
                   "transformed", name);
  } else {
    cr_expect(!res->transformed, "%s: no transformed logits expected", name);
  }
}

static int
has_neg_inf(const double *x, size_t n)
{
  size_t i;

  for (i = 0; i < n; i++)
    if (x[i] == -INFINITY)
      return 1;
  return 0;
}

/* Strategies whose reference entropy helper returns 0 for a row with a
   -inf logit (quirk Q1). */
static int
q1_strategy(const char *s)
{
  return !strcmp(s, "hvh_drift") || !strcmp(s, "evdt_tt") ||
         !strcmp(s, "gdt") || !strcmp(s, "belltemp") ||
         !strcmp(s, "mix_temperatures") || !strcmp(s, "ring_buffer_ar") ||
         !strcmp(s, "tt_exchange");
}

Test(temperature, entropy_helpers_mask_neg_inf_instead_of_zeroing)
{
  struct json_object *sets, *c, *want;
  struct qrs__row r;
  struct vec_iter it;
  double *x, h, vh, m, z, w, w2, p;
  const char *set;
  size_t j, n;

  c = vec_first(&it, "temperature.json", "entropy_cases");
  sets = vec_get(it.root, "logit_sets");
  cr_assert_geq(it.n, 8);
  for (; c; c = vec_next(&it)) {
    want = vec_get(c, "expected");
    set = json_object_get_string(vec_get(c, "logits_set"));
    x = logits_of(vec_get(sets, set), &n);
    row_init(&r, x, n);
    if (qrs__row_check(&r.scan, n) < 0) {
      /* all -inf / NaN rows: libqrs never computes their entropy (the
         step rejects them with QRS_E_LOGITS). */
      cr_expect(!strcmp(set, "all_masked3") || !strcmp(set, "nan3"));
      free(x);
      continue;
    }
    qrs__row_hvh(&r, &h, &vh);
    /* The H-only helper of the reference already masks: equal. */
    expect_close(h, vec_double(vec_get(want, "shannon_entropy")), TOL, "H",
                 set);
    if (!has_neg_inf(x, n)) {
      expect_close(h, vec_double(vec_get(want, "ev_entropy")), TOL, "ev H",
                   set);
      expect_close(vh, vec_double(vec_get(want, "ev_varentropy")), 1e-11,
                   "ev VH", set);
    } else {
      /* The reference's joint helper returns (0, 0) here (Q1): libqrs
         gives the masked distribution's varentropy, checked directly. */
      cr_expect_eq(vec_double(vec_get(want, "ev_varentropy")), 0.0);
      m = -INFINITY;
      for (j = 0; j < n; j++)
        m = x[j] > m ? x[j] : m;
      z = w = w2 = 0.0;
      for (j = 0; j < n; j++) {
        if (x[j] == -INFINITY)
          continue;
        z += exp(x[j] - m);
      }
      for (j = 0; j < n; j++) {
        if (x[j] == -INFINITY)
          continue;
        p = exp(x[j] - m) / z;
        w += p * -log(p);
        w2 += p * log(p) * log(p);
      }
      expect_close(h, w, TOL, "masked H", set);
      expect_close(vh, w2 - w * w, 1e-11, "masked VH", set);
      cr_expect_gt(vh, 0.1);
    }
    free(x);
  }
}

/* Run one stateless case; returns 0, or the compute error. */
static int
run_case(const char *strategy, const double *x, size_t n, size_t vocab,
         const struct qrs__cfgvals *cfg, struct qrs__strategy *st,
         struct qrs__tresult *res)
{
  struct qrs__row r;
  int k, rc;

  k = qrs__strategy_kind(strategy);
  cr_assert_geq(k, 0, "unknown strategy %s", strategy);
  rc = qrs__strategy_init(st, k, cfg, vocab, n > vocab ? n : vocab);
  if (rc < 0)
    return rc;
  row_init(&r, x, n);
  return qrs__strategy_compute(st, cfg, &r, 1, res);
}

Test(temperature, stateless_strategies_match_the_reference)
{
  struct json_object *sets, *c, *exp, *err;
  struct qrs__cfgvals cfg;
  struct qrs__strategy st, st2;
  struct qrs__tresult res, res2;
  struct vec_iter it;
  const char *strat, *set;
  char name[128];
  double *x, *y;
  size_t j, k, n, vocab, direct, quirk;
  int rc;

  c = vec_first(&it, "temperature.json", "stateless_cases");
  sets = vec_get(it.root, "logit_sets");
  direct = quirk = 0;
  for (; c; c = vec_next(&it)) {
    exp = vec_get(c, "expected");
    strat = json_object_get_string(vec_get(c, "strategy"));
    set = json_object_get_string(vec_get(c, "logits_set"));
    snprintf(name, sizeof(name), "%s/%s#%zu", strat, set, it.i);
    vocab = (size_t)json_object_get_int64(vec_get(c, "vocab_size"));
    config_of(vec_get(c, "config_overrides"), &cfg);
    x = logits_of(vec_get(sets, set), &n);
    rc = run_case(strat, x, n, vocab, &cfg, &st, &res);
    if (json_object_object_get_ex(exp, "error", &err)) {
      if (!strcmp(json_object_get_string(err), "ValueError"))
        cr_expect_eq(rc, QRS_E_CONFIG_VALUE, "%s: %d", name, rc);
      else
        cr_expect_eq(rc, -EDOM, "%s: %d", name, rc);
    } else if (!strcmp(set, "all_masked3") || !strcmp(set, "nan3")) {
      /* Broken rows: an error, never a temperature. */
      cr_expect_eq(rc, QRS_E_LOGITS, "%s", name);
    } else if (has_neg_inf(x, n) && q1_strategy(strat)) {
      /* The reference zeroes H and VH here (Q1); libqrs masks.  With the
         masked logits removed, the same strategy must give the same
         answer: that is the masked behaviour, checked exactly. */
      cr_assert_eq(rc, 0, "%s", name);
      y = malloc(n * sizeof(*y));
      for (j = k = 0; j < n; j++)
        if (x[j] > -INFINITY)
          y[k++] = x[j];
      cr_assert_eq(run_case(strat, y, k, vocab, &cfg, &st2, &res2), 0);
      expect_close(res.T, res2.T, TOL, "T vs unmasked", name);
      expect_close(res.H, res2.H, TOL, "H vs unmasked", name);
      expect_close(res.H, 1.1097670014926195, TOL, "masked H", name);
      if (!isnan(res2.min_p))
        expect_close(res.min_p, res2.min_p, TOL, "min_p vs unmasked", name);
      if (!isnan(res2.varentropy))
        expect_close(res.varentropy, res2.varentropy, 1e-11, "VH", name);
      if (res.transformed) {
        const double *a = st.trow, *b = st2.trow;

        for (j = k = 0; j < n; j++) {
          if (x[j] == -INFINITY) {
            cr_expect_eq(a[j], -INFINITY, "%s: masked stays masked", name);
            continue;
          }
          expect_close(a[j], b[k++], TOL, "transformed vs unmasked", name);
        }
      }
      qrs__strategy_done(&st2);
      free(y);
      quirk++;
    } else {
      cr_assert_eq(rc, 0, "%s: %d", name, rc);
      check_result(&res, &st, exp, name);
      direct++;
    }
    qrs__strategy_done(&st);
    free(x);
  }
  cr_expect_geq(direct, 70);
  cr_expect_geq(quirk, 5);
}

Test(temperature, sequences_keep_per_request_state)
{
  struct json_object *s, *steps, *st_j, *oa, *ot, *emb;
  struct qrs__cfgvals cfg;
  struct qrs__strategy st;
  struct qrs__tresult res;
  struct qrs_draw_meta meta;
  struct qrs__row r;
  struct vec_iter it;
  char name[128];
  double *x, *table;
  size_t j, k, n, vocab, dim, steps_run;
  int kind;

  steps_run = 0;
  for (s = vec_first(&it, "temperature.json", "sequences"); s;
       s = vec_next(&it)) {
    config_of(vec_get(s, "config_overrides"), &cfg);
    vocab = (size_t)json_object_get_int64(vec_get(s, "vocab_size"));
    kind = qrs__strategy_kind(json_object_get_string(vec_get(s, "strategy")));
    cr_assert_geq(kind, 0);
    cr_assert_eq(qrs__strategy_init(&st, kind, &cfg, vocab, vocab), 0);
    table = NULL;
    if (json_object_object_get_ex(s, "embeddings", &emb)) {
      dim = json_object_array_length(json_object_array_get_idx(emb, 0));
      table = malloc(vocab * dim * sizeof(*table));
      for (j = 0; j < vocab; j++)
        for (k = 0; k < dim; k++)
          table[j * dim + k] = json_object_get_double(json_object_array_get_idx(
              json_object_array_get_idx(emb, j), k));
      cr_assert_eq(qrs__strategy_attach_embeddings(&st, table, QRS_DTYPE_F64,
                                                   vocab, dim),
                   0);
    }
    steps = vec_get(s, "steps");
    for (j = 0; j < json_object_array_length(steps); j++) {
      st_j = json_object_array_get_idx(steps, j);
      snprintf(name, sizeof(name), "%s step %zu",
               json_object_get_string(vec_get(s, "name")), j);
      x = logits_of(vec_get(st_j, "logits"), &n);
      row_init(&r, x, n);
      cr_assert_eq(qrs__strategy_compute(&st, &cfg, &r, 1, &res), 0, "%s",
                   name);
      check_result(&res, &st, vec_get(st_j, "expected"), name);
      if (json_object_object_get_ex(st_j, "observe_after", &oa) &&
          !json_object_is_type(oa, json_type_string)) {
        if (json_object_is_type(oa, json_type_null)) {
          qrs__strategy_observe_meta(&st, NULL);
        } else {
          memset(&meta, 0, sizeof(meta));
          meta.coherence_z = vec_double(vec_get(oa, "coherence_z"));
          meta.coherence_r = vec_double(vec_get(oa, "coherence_r"));
          meta.coherence_valid =
              json_object_get_boolean(vec_get(oa, "coherence_valid"));
          qrs__strategy_observe_meta(&st, &meta);
        }
      }
      if (json_object_object_get_ex(st_j, "observe_token_after", &ot))
        qrs__strategy_observe_token(&st, &cfg,
                                    (uint32_t)json_object_get_int64(ot), 0.5,
                                    NAN);
      free(x);
      steps_run++;
    }
    qrs__strategy_done(&st);
    free(table);
  }
  cr_expect_geq(steps_run, 100);
}

Test(temperature, config_rejects_what_the_reference_silently_replaces)
{
  struct qrs_sampler_config *cfg;

  cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
  cr_expect_eq(qrs_sampler_config_set(cfg, "coherence_inner_strategy",
                                      "no_such_strategy"),
               QRS_E_CONFIG_VALUE);
  cr_expect_eq(qrs_sampler_config_set(cfg, "coherence_inner_strategy",
                                      "coherence_gate"),
               QRS_E_CONFIG_VALUE);
  cr_expect_eq(qrs_sampler_config_set(cfg, "temperature_strategy", "hot"),
               QRS_E_CONFIG_VALUE);
  cr_expect(strstr(qrs_sampler_config_error(cfg), "temperature_strategy"));
  cr_expect_eq(qrs_sampler_config_set(cfg, "coherence_inner_strategy", "edt"),
               0);
  qrs_sampler_config_free(cfg);
}

/* ---- entropy_throttle ---- */

static struct qrs_sampler *
sampler_with(const char *const *kv, size_t vocab)
{
  struct qrs_sampler_config *cfg;
  struct qrs_sampler *s;

  cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
  for (; *kv; kv += 2)
    cr_assert_eq(qrs_sampler_config_set(cfg, kv[0], kv[1]), 0, "%s: %s",
                 kv[0], qrs_sampler_config_error(cfg));
  cr_assert_eq(qrs_sampler_new(cfg, vocab, &s), 0);
  qrs_sampler_config_free(cfg);
  return s;
}

/* Entropies (bits) of every renormalised most-probable prefix, and their
   masses, by brute force. */
static void
prefix_entropies(const double *x, size_t n, double T, double *hbits,
                 double *mass)
{
  double *p, m, z, zk, wk, tot;
  size_t i, j, b;

  p = malloc(n * sizeof(*p));
  m = -INFINITY;
  for (i = 0; i < n; i++)
    m = x[i] > m ? x[i] : m;
  tot = 0.0;
  for (i = 0; i < n; i++) {
    p[i] = exp((x[i] - m) / T);
    tot += p[i];
  }
  /* selection sort of a copy (n is small here) */
  for (i = 0; i < n; i++) {
    b = i;
    for (j = i + 1; j < n; j++)
      if (p[j] > p[b])
        b = j;
    z = p[i];
    p[i] = p[b];
    p[b] = z;
  }
  zk = wk = 0.0;
  for (i = 0; i < n; i++) {
    zk += p[i];
    wk += p[i] * log(p[i]);
    hbits[i] = (log(zk) - wk / zk) / M_LN2;
    mass[i] = zk / tot;
  }
  free(p);
}

Test(temperature, entropy_throttle_hits_the_target_within_the_achievable_bound)
{
  static const char *const kv[] = { "temperature_strategy",
                                    "entropy_throttle", "throttle_p_min",
                                    "0.0", "throttle_p_max", "1.0",
                                    "throttle_target_bits", NULL, NULL };
  static const char *const targets[] = { "0.5", "1.0", "2.0", "3.3", "5.0" };
  const char *kvt[sizeof(kv) / sizeof(kv[0])];
  struct qrs_token_record rec;
  struct qrs_sampler *s;
  double x[400], hb[400], ms[400], best, tgt, d;
  size_t i, n, t;
  int trial;

  n = 400;
  memcpy(kvt, kv, sizeof(kv));
  for (trial = 0; trial < 6; trial++) {
    /* Rows of known entropy: a flat row (log2 k bits for k tokens) and
       Zipf-like rows of several slopes. */
    for (i = 0; i < n; i++)
      x[i] = trial == 0 ? 0.0
                        : -(0.5 + 0.4 * trial) * log(1.0 + (double)i) +
                              0.05 * rnd();
    prefix_entropies(x, n, 1.0, hb, ms);
    for (t = 0; t < sizeof(targets) / sizeof(targets[0]); t++) {
      kvt[7] = targets[t];
      s = sampler_with(kvt, n);
      cr_assert_eq(qrs_sampler_select_u(s, x, QRS_DTYPE_F64, n, rnd(), NULL,
                                        &rec),
                   0);
      tgt = atof(targets[t]);
      best = INFINITY;
      for (i = 0; i < n; i++) {
        d = fabs(hb[i] - tgt);
        best = d < best ? d : best;
      }
      /* The best any prefix can do, and no worse. */
      cr_expect(fabs(fabs(rec.kept_entropy_bits - tgt) - best) < 1e-9,
                "trial %d target %g: kept %.12g bits, best distance %.3g",
                trial, tgt, rec.kept_entropy_bits, best);
      if (trial == 0 && !strcmp(targets[t], "2.0")) {
        /* flat: exactly 4 tokens */
        cr_expect_float_eq(rec.kept_entropy_bits, 2.0, 1e-12);
        cr_expect_lt(rec.token_rank, 4);
        cr_expect_float_eq(rec.top_p_used, 4.0 / n, 1e-12);
      }
      qrs_sampler_free(s);
    }
  }
}

Test(temperature, entropy_throttle_respects_its_mass_bounds)
{
  static const char *const kv[] = { "temperature_strategy",
                                    "entropy_throttle", "throttle_p_min",
                                    "0.6", "throttle_p_max", "0.7",
                                    "throttle_target_bits", "0.01", NULL };
  struct qrs_token_record rec;
  struct qrs_sampler *s;
  double x[64];
  size_t i;

  for (i = 0; i < 64; i++)
    x[i] = -0.1 * (double)i;
  s = sampler_with(kv, 64);
  cr_assert_eq(
      qrs_sampler_select_u(s, x, QRS_DTYPE_F64, 64, 0.3, NULL, &rec), 0);
  /* The target wants one token; the kept mass may not go below 0.6. */
  cr_expect_geq(rec.top_p_used, 0.6);
  cr_expect_lt(rec.top_p_used, 0.7);
  cr_expect_gt(rec.num_candidates, 1);
  qrs_sampler_free(s);
}

Test(temperature, entropy_throttle_controller_moves_top_p_toward_the_target)
{
  static const char *const kv[] = { "temperature_strategy",
                                    "entropy_throttle", "throttle_mode",
                                    "controller", "throttle_target_bits",
                                    "2.0", "throttle_tolerance_bits", "0.1",
                                    "throttle_gain", "0.05", NULL };
  struct qrs_token_record rec;
  struct qrs_sampler *s;
  double x[500], first, last, dev0, dev;
  size_t i;
  int t;

  for (i = 0; i < 500; i++)
    x[i] = -0.8 * log(1.0 + (double)i);
  s = sampler_with(kv, 500);
  first = last = NAN;
  dev0 = dev = 0.0;
  for (t = 0; t < 200; t++) {
    cr_assert_eq(
        qrs_sampler_select_u(s, x, QRS_DTYPE_F64, 500, rnd(), NULL, &rec), 0);
    if (t == 0) {
      first = rec.top_p_used;
      dev0 = fabs(rec.kept_entropy_bits - 2.0);
    }
    last = rec.top_p_used;
    dev = fabs(rec.kept_entropy_bits - 2.0);
  }
  cr_expect_float_eq(first, 0.9, 1e-12, "starts at throttle_p_init");
  cr_expect_lt(last, first, "the row is too hot at 0.9: p comes down");
  cr_expect_lt(dev, dev0);
  cr_expect_leq(dev, 0.1 + 0.3, "settles near the tolerance band");
  qrs_sampler_free(s);
}

/* ---- mirostat_v2 ---- */

Test(temperature, mirostat_v2_mu_converges_toward_tau_on_a_zipf_row)
{
  static const char *const kv[] = { "temperature_strategy", "mirostat_v2",
                                    "mirostat_tau", "3.0", "mirostat_eta",
                                    "0.1", NULL };
  struct qrs_token_record rec;
  struct qrs_sampler *s;
  double *x, mu0, mu_end, sur, sum;
  size_t i, n;
  int t, cnt;

  n = 5000;
  x = malloc(n * sizeof(*x));
  for (i = 0; i < n; i++)
    x[i] = -1.1 * log(1.0 + (double)i);
  s = sampler_with(kv, n);
  sum = 0.0;
  cnt = 0;
  mu0 = mu_end = NAN;
  for (t = 0; t < 3000; t++) {
    cr_assert_eq(
        qrs_sampler_select_u(s, x, QRS_DTYPE_F64, n, rnd(), NULL, &rec), 0);
    if (t == 0)
      mu0 = rec.mirostat_mu;
    mu_end = rec.mirostat_mu;
    /* The surprise under the distribution before the cut:
       p = token_prob * kept mass. */
    sur = -log2(rec.token_prob * rec.top_p_used);
    if (t >= 1500) {
      sum += sur;
      cnt++;
    }
    /* Every kept token has surprise at most mu (or is the top token). */
    cr_assert(sur <= rec.mirostat_mu + 1e-9 || rec.token_rank == 0,
              "surprise %g above mu %g", sur, rec.mirostat_mu);
  }
  cr_expect_float_eq(mu0, 6.0, 1e-12, "mu starts at 2 tau");
  cr_expect_lt(fabs(mu_end - 3.0), fabs(mu0 - 3.0), "mu moves toward tau");
  cr_expect_lt(fabs(sum / cnt - 3.0), 0.15,
               "mean observed surprise %.3f bits, tau 3", sum / cnt);
  cr_expect_lt(mu_end, 5.0, "mu settles between tau and 2 tau");
  qrs_sampler_free(s);
  free(x);
}
