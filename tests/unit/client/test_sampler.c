/* The sampler object and its configuration (client/sampling/sampler.c,
   client/sampling/sconfig.c): config.json (presets, config hash, per-request
   resolution, environment), pipeline.json (multi-token scenarios with
   scripted entropy), the commitment chain, and the per-token contract
   (no heap allocation, broken rows, bypass, one-hot). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <qrs/sampler.h>

#include "sampling/sampling.h"
#include "nonce.h"
#include "cfgtext.h"
#include "vectors.h"

/* ---- allocation counting (the binary links with --wrap=malloc etc., so
   libqrs's own calls come through here) ---- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t m);
void *__wrap_realloc(void *p, size_t n);

static int counting;
static long nalloc;
/* >= 0: that many more allocations succeed, then they fail (ENOMEM). */
static long fail_after = -1;

static int
inject_failure(void)
{
  if (fail_after < 0)
    return 0;
  if (fail_after == 0)
    return 1;
  fail_after--;
  return 0;
}

void *
__wrap_malloc(size_t n)
{
  if (counting)
    nalloc++;
  return inject_failure() ? NULL : __real_malloc(n);
}

void *
__wrap_calloc(size_t n, size_t m)
{
  if (counting)
    nalloc++;
  return inject_failure() ? NULL : __real_calloc(n, m);
}

void *
__wrap_realloc(void *p, size_t n)
{
  if (counting)
    nalloc++;
  return inject_failure() ? NULL : __real_realloc(p, n);
}

/* ---- helpers ---- */

/* The effective value of field equals the JSON value. */
static void
expect_field(const struct qrs_sampler_config *cfg, const char *field,
             struct json_object *want, const char *ctx)
{
  char buf[256], wbuf[256];
  double d;

  if (json_object_is_type(want, json_type_string)) {
    cr_assert_geq(qrs_sampler_config_get(cfg, field, buf, sizeof(buf)), 0);
    cr_expect_str_eq(buf, json_object_get_string(want), "%s: %s", ctx,
                     field);
    return;
  }
  if (json_object_is_type(want, json_type_object)) {
    /* entropy_source_instances: qrsd's business, not a sampler field */
    cr_expect_eq(qrs_sampler_config_get(cfg, field, buf, sizeof(buf)),
                 QRS_E_CONFIG_FIELD);
    return;
  }
  cr_assert_eq(qrs_sampler_config_get_double(cfg, field, &d), 0, "%s: %s",
               ctx, field);
  cfg_text(want, wbuf, sizeof(wbuf));
  cr_expect_float_eq(d, json_object_is_type(want, json_type_boolean)
                            ? (double)json_object_get_boolean(want)
                            : json_object_get_double(want),
                     0.0, "%s: %s = %g, want %s", ctx, field, d, wbuf);
}

/* ---- config.json ---- */

Test(sampler, presets_have_the_reference_values)
{
  struct json_object *v, *presets;
  struct json_object_iter p, f;
  struct qrs_sampler_config *cfg;
  size_t i, n;

  v = vec_load("config.json");
  presets = vec_get(v, "presets");
  n = 0;
  for (i = 0; qrs_sampler_preset_name(i); i++)
    n++;
  cr_expect_eq(n, 7);
  cr_expect_eq((size_t)json_object_object_length(presets), n);
  json_object_object_foreachC(presets, p) {
    cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
    cr_assert_eq(qrs_sampler_config_set_preset(cfg, p.key), 0, "%s", p.key);
    cr_expect_str_eq(qrs_sampler_config_preset(cfg), p.key);
    json_object_object_foreachC(p.val, f) {
      expect_field(cfg, f.key, f.val, p.key);
      cr_expect_eq(qrs_sampler_config_layer(cfg, f.key), QRS_LAYER_PRESET);
    }
    qrs_sampler_config_free(cfg);
  }
  json_object_put(v);
}

Test(sampler, config_hash_matches_the_reference)
{
  struct json_object *v, *pp, *res;
  struct json_object_iter it;
  struct qrs_sampler_config *cfg;
  char h[17];

  v = vec_load("config.json");
  pp = vec_get(v, "pydantic_part");
  cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
  cr_assert_eq(qrs_sampler_config_hash(cfg, h), 0);
  cr_expect_str_eq(h, json_object_get_string(
                          vec_get(pp, "default_config_hash")));
  cr_expect_str_eq(h, "a42d7a5feb80957d");
  qrs_sampler_config_free(cfg);
  res = vec_get(pp, "resolved_presets_over_defaults");
  json_object_object_foreachC(res, it) {
    cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
    cr_assert_eq(qrs_sampler_config_set_preset(cfg, it.key), 0);
    cr_assert_eq(qrs_sampler_config_hash(cfg, h), 0);
    cr_expect_str_eq(h, json_object_get_string(vec_get(it.val, "config_hash")),
                     "preset %s", it.key);
    qrs_sampler_config_free(cfg);
  }
  /* A qrs extension field at a non-default value changes the hash. */
  cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
  cr_assert_eq(qrs_sampler_config_set(cfg, "stage_order", "hf"), 0);
  cr_assert_eq(qrs_sampler_config_hash(cfg, h), 0);
  cr_expect_str_neq(h, "a42d7a5feb80957d");
  qrs_sampler_config_free(cfg);
  json_object_put(v);
}

Test(sampler, per_request_arguments_resolve_like_the_reference)
{
  struct json_object *v, *cases, *c, *args, *res, *err;
  struct json_object_iter it;
  struct qrs_sampler_config *cfg;
  char buf[256], h[17];
  size_t i, nerr, nok;
  int r, first;

  v = vec_load("config.json");
  cases = vec_get(vec_get(v, "pydantic_part"), "resolve_cases");
  nerr = nok = 0;
  for (i = 0; i < json_object_array_length(cases); i++) {
    c = json_object_array_get_idx(cases, i);
    args = vec_get(c, "extra_args");
    res = vec_get(c, "result");
    cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
    first = 0;
    json_object_object_foreachC(args, it) {
      cfg_text(it.val, buf, sizeof(buf));
      r = qrs_sampler_config_set_arg(cfg, it.key, buf);
      if (r < 0 && !first)
        first = r;
    }
    if (json_object_object_get_ex(res, "error", &err)) {
      /* ConfigValidationError: an unknown field, an infrastructure
         field, an unknown preset; pydantic: a wrong value. */
      if (!strcmp(json_object_get_string(err), "ConfigValidationError"))
        cr_expect_eq(first, QRS_E_CONFIG_FIELD, "case %zu: %d", i, first);
      else
        cr_expect_eq(first, QRS_E_CONFIG_VALUE, "case %zu: %d", i, first);
      cr_expect(qrs_sampler_config_error(cfg)[0], "case %zu: no message", i);
      nerr++;
    } else {
      cr_assert_eq(first, 0, "case %zu: %s", i,
                   qrs_sampler_config_error(cfg));
      cr_assert_eq(qrs_sampler_config_hash(cfg, h), 0);
      cr_expect_str_eq(h, json_object_get_string(vec_get(res, "config_hash")),
                       "case %zu", i);
      json_object_object_foreachC(vec_get(res, "changed_fields"), it)
          expect_field(cfg, it.key, it.val, "resolve");
      nok++;
    }
    qrs_sampler_config_free(cfg);
  }
  cr_expect_geq(nerr, 9);
  cr_expect_geq(nok, 12);
  json_object_put(v);
}

Test(sampler, environment_follows_the_reference_names)
{
  struct json_object *v, *cases, *c, *env, *res, *ch;
  struct json_object_iter it;
  struct qrs_sampler_config *cfg;
  char *envp[8], text[512];
  size_t i, k;
  int r;

  v = vec_load("config.json");
  cases = vec_get(vec_get(v, "pydantic_part"), "env_cases");
  for (i = 0; i < json_object_array_length(cases); i++) {
    c = json_object_array_get_idx(cases, i);
    env = vec_get(c, "env");
    res = vec_get(c, "result");
    k = 0;
    json_object_object_foreachC(env, it) {
      snprintf(text, sizeof(text), "%s=%s", it.key,
               json_object_get_string(it.val));
      envp[k++] = strdup(text);
    }
    envp[k] = NULL;
    cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
    r = qrs_sampler_config_load_env(cfg, envp);
    /* qrsd's fields (fallback_mode, entropy_source_instances) are not
       the sampler's: ignored, with or without a bad value. */
    cr_assert_geq(r, 0, "env case %zu: %s", i, qrs_sampler_config_error(cfg));
    if (json_object_object_get_ex(res, "changed_fields", &ch)) {
      json_object_object_foreachC(ch, it) {
        if (!strcmp(it.key, "preset")) {
          cr_expect_eq(qrs_sampler_config_preset(cfg), NULL, "QR_PRESET=''");
          continue;
        }
        expect_field(cfg, it.key, it.val, "env");
        if (!json_object_is_type(it.val, json_type_object))
          cr_expect_eq(qrs_sampler_config_layer(cfg, it.key), QRS_LAYER_ENV);
      }
    }
    while (k > 0)
      free(envp[--k]);
    qrs_sampler_config_free(cfg);
  }
  json_object_put(v);
}

Test(sampler, layers_resolve_explicit_then_preset_then_env_then_default)
{
  char *envp[] = { "QR_TOP_P=0.5", "qr_top_k=9", "QR_PRESET=qthought_think",
                   "QR_FIXED_TEMPERATURE=0.7", "QR_GRPC_TIMEOUT_MS=9", NULL };
  char *bad[] = { "QR_TOP_K=many", NULL };
  char *badpreset[] = { "QR_PRESET=warm", NULL };
  struct qrs_sampler_config *cfg;
  double d;
  char buf[64];

  cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
  cr_expect_eq(qrs_sampler_config_layer(cfg, "top_p"), QRS_LAYER_DEFAULT);
  cr_assert_eq(qrs_sampler_config_load_env(cfg, envp), 3);
  /* the env preset beats the env fields it names ... */
  cr_assert_eq(qrs_sampler_config_get_double(cfg, "top_p", &d), 0);
  cr_expect_float_eq(d, 0.9, 0.0);
  cr_expect_eq(qrs_sampler_config_layer(cfg, "top_p"), QRS_LAYER_PRESET);
  /* ... but not the others */
  cr_assert_eq(qrs_sampler_config_get_double(cfg, "fixed_temperature", &d),
               0);
  cr_expect_float_eq(d, 0.7, 0.0);
  cr_expect_eq(qrs_sampler_config_layer(cfg, "fixed_temperature"),
               QRS_LAYER_ENV);
  /* explicit beats everything; an explicit preset replaces QR_PRESET */
  cr_assert_eq(qrs_sampler_config_set(cfg, "top_p", "0.25"), 0);
  cr_assert_eq(qrs_sampler_config_get_double(cfg, "top_p", &d), 0);
  cr_expect_float_eq(d, 0.25, 0.0);
  cr_assert_eq(qrs_sampler_config_set_preset(cfg, "normal_t1"), 0);
  cr_assert_eq(qrs_sampler_config_get_double(cfg, "top_k", &d), 0);
  cr_expect_float_eq(d, 0.0, 0.0, "normal_t1 sets top_k 0 over QR_TOP_K");
  cr_assert_geq(qrs_sampler_config_get(cfg, "temperature_strategy", buf,
                                       sizeof(buf)),
                0);
  cr_expect_str_eq(buf, "fixed");
  cr_assert_eq(qrs_sampler_config_unset(cfg, "top_p"), 0);
  cr_assert_eq(qrs_sampler_config_get_double(cfg, "top_p", &d), 0);
  cr_expect_float_eq(d, 1.0, 0.0);
  /* a bad value names the variable and changes nothing */
  cr_expect_eq(qrs_sampler_config_load_env(cfg, bad), QRS_E_CONFIG_VALUE);
  cr_expect(strstr(qrs_sampler_config_error(cfg), "QR_TOP_K"));
  cr_expect_eq(qrs_sampler_config_load_env(cfg, badpreset),
               QRS_E_CONFIG_FIELD);
  cr_assert_eq(qrs_sampler_config_set_preset(cfg, NULL), 0);
  cr_expect_str_eq(qrs_sampler_config_preset(cfg), "qthought_think");
  cr_assert_eq(qrs_sampler_config_get_double(cfg, "fixed_temperature", &d),
               0);
  cr_expect_float_eq(d, 0.7, 0.0);
  qrs_sampler_config_free(cfg);
}

Test(sampler, validation_names_the_field)
{
  struct qrs_sampler_config *cfg;
  struct qrs_sampler *s;

  cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
  cr_expect_eq(qrs_sampler_config_set(cfg, "no_such", "1"),
               QRS_E_CONFIG_FIELD);
  cr_expect(strstr(qrs_sampler_config_error(cfg), "no_such"));
  cr_expect_eq(qrs_sampler_config_set(cfg, "grpc_server_address", "x:1"),
               QRS_E_CONFIG_FIELD);
  cr_expect(strstr(qrs_sampler_config_error(cfg), "qrsd"));
  cr_expect_eq(qrs_sampler_config_set(cfg, "gdt_sigma", "0"),
               QRS_E_CONFIG_VALUE);
  cr_expect(strstr(qrs_sampler_config_error(cfg), "gdt_sigma"));
  cr_expect_eq(qrs_sampler_config_set(cfg, "top_k", "1.5"),
               QRS_E_CONFIG_VALUE);
  cr_expect_eq(qrs_sampler_config_set(cfg, "bypass", "maybe"),
               QRS_E_CONFIG_VALUE);
  cr_expect_eq(qrs_sampler_config_set(cfg, "log_level", "loud"),
               QRS_E_CONFIG_VALUE);
  cr_expect_eq(qrs_sampler_config_set(cfg, "stage_order", "vllm"),
               QRS_E_CONFIG_VALUE);
  cr_expect_eq(qrs_sampler_config_set(cfg, "rba_buffer_n", "0"),
               QRS_E_CONFIG_VALUE);
  cr_expect_eq(qrs_sampler_config_set_preset(cfg, "warm"),
               QRS_E_CONFIG_FIELD);
  /* locale-independent floats */
  cr_expect_eq(qrs_sampler_config_set(cfg, "top_p", "9.5e-1"), 0);
  /* cross-field: truncate_first is the reference order's */
  cr_assert_eq(qrs_sampler_config_set(cfg, "truncate_first", "yes"), 0);
  cr_assert_eq(qrs_sampler_config_set(cfg, "stage_order", "llama"), 0);
  cr_expect_eq(qrs_sampler_config_validate(cfg), QRS_E_CONFIG_VALUE);
  cr_expect(strstr(qrs_sampler_config_error(cfg), "truncate_first"));
  cr_expect_eq(qrs_sampler_new(cfg, 100, &s), QRS_E_CONFIG_VALUE);
  cr_assert_eq(qrs_sampler_config_set(cfg, "stage_order", "reference"), 0);
  cr_expect_eq(qrs_sampler_config_validate(cfg), 0);
  /* strategies that normalise by ln V need V >= 2, as the reference */
  cr_assert_eq(qrs_sampler_config_set(cfg, "temperature_strategy", "edt"), 0);
  cr_expect_eq(qrs_sampler_new(cfg, 1, &s), QRS_E_CONFIG_VALUE);
  cr_expect_eq(qrs_sampler_new(cfg, 0, &s), -EINVAL);
  qrs_sampler_config_free(cfg);
}

Test(sampler, get_config_round_trips_every_field)
{
  struct qrs_sampler_config *cfg, *back;
  struct qrs_sampler *s;
  char a[17], b[17], va[128], vb[128];
  const char *f;
  size_t i;

  cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
  cr_assert_eq(qrs_sampler_config_set_preset(cfg, "qthought_think"), 0);
  cr_assert_eq(qrs_sampler_config_set(cfg, "hvh_alpha_h", "0.125"), 0);
  cr_assert_eq(qrs_sampler_new(cfg, 64, &s), 0);
  cr_assert_eq(qrs_sampler_get_config(s, &back), 0);
  for (i = 0; (f = qrs_sampler_field_name(i)); i++) {
    qrs_sampler_config_get(cfg, f, va, sizeof(va));
    qrs_sampler_config_get(back, f, vb, sizeof(vb));
    cr_expect_str_eq(va, vb, "%s", f);
  }
  cr_assert_geq(i, 80);
  qrs_sampler_config_hash(cfg, a);
  qrs_sampler_config_hash(back, b);
  cr_expect_str_eq(a, b);
  qrs_sampler_config_free(back);
  qrs_sampler_config_free(cfg);
  qrs_sampler_free(s);
}

/* ---- pipeline.json ---- */

/* The reference zscore_mean amplifier (third_party/qr-sampler
   .../amplification/zscore.py). */
static double
amplify(const uint8_t *b, size_t n, double *mean, double *z)
{
  double sum, u;
  size_t i;

  sum = 0.0;
  for (i = 0; i < n; i++)
    sum += b[i];
  *mean = sum / (double)n;
  *z = (*mean - 127.5) / (73.61215932167728 / sqrt((double)n));
  u = 0.5 * (1.0 + erf(*z / sqrt(2.0)));
  return u < 1e-10 ? 1e-10 : u > 1.0 - 1e-10 ? 1.0 - 1e-10 : u;
}

/* The commitment nonce, as qrsd derives it (the reference's
   derive_commit_nonce(), third_party/qr-sampler .../core/pipeline.py). */
static uint64_t
nonce_of(const struct qrs_commitment *c)
{
  return nonce_derive(c->salt, c->salt_len, c->step, c->prev_token_id);
}

static void
expect_num(double got, struct json_object *want, double tol, const char *what,
           const char *ctx)
{
  double w;

  if (json_object_is_type(want, json_type_null)) {
    cr_expect(isnan(got), "%s %s: %g, want null", ctx, what, got);
    return;
  }
  w = vec_double(want);
  if (isnan(w)) {
    cr_expect(isnan(got), "%s %s: %g, want NaN", ctx, what, got);
    return;
  }
  cr_expect(fabs(got - w) <= tol * (fabs(w) > 1.0 ? fabs(w) : 1.0),
            "%s %s: %.17g want %.17g", ctx, what, got, w);
}

static void
run_scenario(struct json_object *sc)
{
  struct json_object *ov, *steps, *st, *rec_j, *blocks, *draws, *dj, *x_j,
      *oh;
  struct json_object_iter it;
  struct qrs_sampler_config *cfg;
  struct qrs_sampler *s;
  struct qrs_token_record rec;
  struct qrs_commitment cm;
  struct qrs_draw draw;
  uint8_t *salt, *blk;
  char buf[256], ctx[128];
  const char *name;
  double *x, u, mean, z;
  float *row;
  FILE *sink;
  size_t i, j, n, len, blen, vocab, bi;
  uint32_t tok;
  int server, prefetch_cfg;

  name = json_object_get_string(vec_get(sc, "name"));
  ov = vec_get(sc, "config_overrides");
  cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
  server = 0;
  prefetch_cfg = 1;
  json_object_object_foreachC(ov, it) {
    cfg_text(it.val, buf, sizeof(buf));
    cr_assert_eq(qrs_sampler_config_set(cfg, it.key, buf), 0, "%s: %s", name,
                 it.key);
    if (!strcmp(it.key, "signal_amplifier_type") && !strcmp(buf, "server"))
      server = 1;
    if (!strcmp(it.key, "entropy_prefetch") && !strcmp(buf, "false"))
      prefetch_cfg = 0;
  }
  vocab = (size_t)json_object_get_int64(vec_get(sc, "vocab_size"));
  cr_assert_eq(qrs_sampler_new(cfg, vocab, &s), 0);
  salt = vec_hex(json_object_get_string(vec_get(sc, "salt_hex")), &len);
  cr_assert_eq(qrs_sampler_set_salt(s, salt, len), 0);
  /* Records need the entropy: a log sink makes the sampler compute it. */
  sink = fopen("/dev/null", "w");
  cr_assert_not_null(sink);
  cr_assert_eq(qrs_sampler_set_log_file(s, sink), 0);
  blocks = vec_get(sc, "byte_blocks_hex");
  draws = NULL;
  json_object_object_get_ex(sc, "draws", &draws);
  steps = vec_get(sc, "steps");
  bi = 0;
  for (i = 0; i < json_object_array_length(steps); i++) {
    snprintf(ctx, sizeof(ctx), "%s step %zu", name, i);
    st = json_object_array_get_idx(steps, i);
    rec_j = vec_get(st, "expected_record");
    x_j = vec_get(st, "logits");
    n = json_object_array_length(x_j);
    x = malloc(n * sizeof(*x));
    for (j = 0; j < n; j++)
      x[j] = vec_double(json_object_array_get_idx(x_j, j));
    /* The draw as qrsd would deliver it. */
    memset(&draw, 0, sizeof(draw));
    snprintf(draw.served_by, sizeof(draw.served_by), "scripted");
    dj = server ? json_object_array_get_idx(draws, i) : NULL;
    if (dj) {
      draw.u = vec_double(vec_get(dj, "u"));
      draw.z = vec_double(vec_get(dj, "z"));
      draw.sample_mean = NAN;
      draw.has_meta = 1;
      draw.meta.z = draw.z;
      draw.meta.coherence_z = vec_double(vec_get(dj, "coherence_z"));
      draw.meta.coherence_r = vec_double(vec_get(dj, "coherence_r"));
      draw.meta.coherence_valid =
          json_object_get_boolean(vec_get(dj, "coherence_valid"));
      draw.meta.integrated_bytes = 102400;
      snprintf(draw.meta.purity_label, QRS_NAME_MAX, "quantum/raw");
      snprintf(draw.meta.integrator, QRS_NAME_MAX, "bit_z");
      snprintf(draw.meta.source_id, QRS_NAME_MAX, "qrng-a");
    } else {
      /* Bytes: amplified as the reference's zscore_mean would; a failed
         server draw falls back to bytes. */
      blk = vec_hex(json_object_get_string(
                        json_object_array_get_idx(blocks, bi++)),
                    &blen);
      draw.u = amplify(blk, blen, &mean, &z);
      draw.sample_mean = mean;
      draw.z = z;
      draw.fallback = server;
      free(blk);
    }
    /* The commitment this token's draw carried: the nonce the reference
       shows must be the one our chain derives. */
    qrs_sampler_next_commitment(s, &cm);
    cr_expect_eq(cm.step, i);
    if (!json_object_is_type(vec_get(rec_j, "entropy_nonce"),
                             json_type_null)) {
      draw.nonce = nonce_of(&cm);
      snprintf(buf, sizeof(buf), "%016llx", (unsigned long long)draw.nonce);
      cr_expect_str_eq(buf,
                       json_object_get_string(vec_get(rec_j, "entropy_nonce")),
                       "%s: commitment", ctx);
      if (!json_object_is_type(vec_get(rec_j, "entropy_echo_verified"),
                               json_type_null))
        draw.echo = QRS_ECHO_VERIFIED;
      if (!json_object_is_type(
              vec_get(rec_j, "entropy_server_timestamp_ns"), json_type_null))
        draw.generated.realtime_ns = json_object_get_int64(
            vec_get(rec_j, "entropy_server_timestamp_ns"));
    }
    expect_num(draw.u, vec_get(rec_j, "u_value"), 1e-12, "u", ctx);
    cr_assert_eq(qrs_sampler_step(
                     s, x, QRS_DTYPE_F64, n, &draw,
                     json_object_get_boolean(vec_get(rec_j,
                                                     "entropy_prefetch_hit"))
                         ? QRS_STEP_PREFETCHED
                         : 0,
                     &tok, &rec),
                 0, "%s", ctx);
    cr_expect_eq(tok, json_object_get_int64(vec_get(rec_j, "token_id")),
                 "%s: token %u", ctx, tok);
    cr_expect_eq(rec.token_rank,
                 json_object_get_int64(vec_get(rec_j, "token_rank")), "%s",
                 ctx);
    cr_expect_eq(rec.num_candidates,
                 json_object_get_int64(vec_get(rec_j, "num_candidates")),
                 "%s: candidates %u", ctx, rec.num_candidates);
    expect_num(rec.token_prob, vec_get(rec_j, "token_prob"), 1e-12, "prob",
               ctx);
    expect_num(rec.z_score, vec_get(rec_j, "z_score"), 1e-12, "z", ctx);
    expect_num(rec.sample_mean, vec_get(rec_j, "sample_mean"), 1e-12, "mean",
               ctx);
    expect_num(rec.shannon_entropy, vec_get(rec_j, "shannon_entropy"), 1e-12,
               "H", ctx);
    expect_num(rec.temperature_used, vec_get(rec_j, "temperature_used"),
               1e-12, "T", ctx);
    expect_num(rec.varentropy, vec_get(rec_j, "varentropy"), 1e-11, "VH",
               ctx);
    expect_num(rec.min_p_used, vec_get(rec_j, "min_p_used"), 1e-12, "min_p",
               ctx);
    expect_num(rec.h_ema, vec_get(rec_j, "h_ema"), 1e-12, "h_ema", ctx);
    expect_num(rec.vh_ema, vec_get(rec_j, "vh_ema"), 1e-11, "vh_ema", ctx);
    expect_num(rec.gate_boost, vec_get(rec_j, "gate_boost"), 1e-12, "boost",
               ctx);
    cr_expect_str_eq(rec.temperature_strategy,
                     json_object_get_string(
                         vec_get(rec_j, "temperature_strategy")));
    cr_expect_str_eq(rec.entropy_source_used, "scripted");
    cr_expect_eq(rec.entropy_is_fallback,
                 json_object_get_boolean(vec_get(rec_j, "entropy_is_fallback")),
                 "%s: fallback", ctx);
    if (json_object_is_type(vec_get(rec_j, "gate_open"), json_type_null))
      cr_expect_eq(rec.gate_open, -1, "%s: gate_open null", ctx);
    else
      cr_expect_eq(rec.gate_open,
                   json_object_get_boolean(vec_get(rec_j, "gate_open")),
                   "%s: gate_open", ctx);
    cr_expect_eq(rec.has_draw_meta,
                 !json_object_is_type(vec_get(rec_j, "draw_z"),
                                      json_type_null));
    if (rec.has_draw_meta) {
      expect_num(rec.draw_coherence_z, vec_get(rec_j, "draw_coherence_z"),
                 1e-12, "coherence_z", ctx);
      cr_expect_str_eq(rec.purity_label,
                       json_object_get_string(vec_get(rec_j, "purity_label")));
    }
    cr_expect_eq(rec.has_preset, 0, "preset_active null");
    cr_expect_eq(rec.step, i);
    /* The next draw's commitment: the reference's next ticket nonce. */
    qrs_sampler_next_commitment(s, &cm);
    cr_expect_eq(cm.prev_token_id, (int64_t)tok);
    if (json_object_get_boolean(vec_get(sc, "prefetch")) && prefetch_cfg &&
        !json_object_is_type(vec_get(st, "expected_next_ticket_nonce"),
                             json_type_null))
      cr_expect_eq(nonce_of(&cm),
                   json_object_get_uint64(
                       vec_get(st, "expected_next_ticket_nonce")),
                   "%s: next nonce", ctx);
    if (json_object_object_get_ex(st, "expected_one_hot_nonzero", &oh)) {
      row = malloc(n * sizeof(*row));
      cr_assert_eq(qrs_force_one_hot(row, QRS_DTYPE_F32, n, tok), 0);
      for (j = 0; j < n; j++)
        cr_assert(j == (size_t)json_object_get_int64(vec_get(oh, "index"))
                      ? row[j] == 0.0f
                      : row[j] == -INFINITY);
      free(row);
    }
    free(x);
  }
  qrs_sampler_free(s);
  fclose(sink);
  qrs_sampler_config_free(cfg);
  free(salt);
  (void)u;
}

Test(sampler, pipeline_scenarios_match_the_reference)
{
  struct json_object *v, *sc;
  size_t i;

  v = vec_load("pipeline.json");
  sc = vec_get(v, "scenarios");
  cr_assert_geq(json_object_array_length(sc), 8);
  for (i = 0; i < json_object_array_length(sc); i++)
    run_scenario(json_object_array_get_idx(sc, i));
  json_object_put(v);
}

/* ---- the per-token contract ---- */

static void
zipf_row(float *row, size_t n)
{
  size_t i;

  for (i = 0; i < n; i++)
    row[i] = (float)(-1.2 * log(1.0 + (double)((i * 7919) % n)));
}

Test(sampler, no_heap_allocation_per_token)
{
  static const char *const configs[][2] = {
    { "temperature_strategy", "fixed" },
    { "temperature_strategy", "hvh_drift" },
    { "temperature_strategy", "edt" },
    { "temperature_strategy", "coherence_gate" },
    { "temperature_strategy", "mix_temperatures" },
    { "temperature_strategy", "ring_buffer_ar" },
    { "temperature_strategy", "entropy_throttle" },
    { "temperature_strategy", "mirostat_v2" },
    { "stage_order", "hf" },
    { "stage_order", "llama" },
    { "top_k", "3000" },
    { "top_p", "0.9" },
  };
  struct qrs_sampler_config *cfg;
  struct qrs_sampler *s;
  struct qrs_token_record rec;
  struct qrs_draw d;
  float *row;
  size_t n, c;
  uint32_t tok;
  int t;

  n = 20000;
  row = malloc(n * sizeof(*row));
  zipf_row(row, n);
  for (c = 0; c < sizeof(configs) / sizeof(configs[0]); c++) {
    cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
    cr_assert_eq(qrs_sampler_config_set(cfg, configs[c][0], configs[c][1]),
                 0);
    cr_assert_eq(qrs_sampler_new(cfg, n, &s), 0);
    memset(&d, 0, sizeof(d));
    d.has_meta = 1;
    d.meta.coherence_valid = 1;
    d.meta.coherence_z = 5.0;
    d.meta.coherence_r = 0.7;
    nalloc = 0;
    counting = 1;
    for (t = 0; t < 50; t++) {
      d.u = (t + 0.5) / 50.0;
      cr_assert_eq(qrs_sampler_step(s, row, QRS_DTYPE_F32, n, &d, 0, &tok,
                                    &rec),
                   0);
    }
    counting = 0;
    cr_expect_eq(nalloc, 0, "%s=%s: %ld allocations in 50 tokens",
                 configs[c][0], configs[c][1], nalloc);
    qrs_sampler_free(s);
    qrs_sampler_config_free(cfg);
  }
  /* the counter does count (a libqrs allocation) */
  counting = 1;
  cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
  counting = 0;
  qrs_sampler_config_free(cfg);
  cr_expect_eq(nalloc, 1);
  free(row);
}

Test(sampler, broken_rows_leave_the_chain_where_it_was)
{
  struct qrs_sampler *s;
  struct qrs_commitment cm;
  float row[4] = { 0.0f, 1.0f, NAN, 2.0f };
  float ok[4] = { 0.0f, 1.0f, -INFINITY, 2.0f };
  uint32_t tok;

  cr_assert_eq(qrs_sampler_new(NULL, 4, &s), 0);
  cr_expect_eq(qrs_sampler_select_u(s, row, QRS_DTYPE_F32, 4, 0.5, &tok, NULL),
               QRS_E_LOGITS);
  row[2] = INFINITY;
  cr_expect_eq(qrs_sampler_select_u(s, row, QRS_DTYPE_F32, 4, 0.5, &tok, NULL),
               QRS_E_LOGITS);
  qrs_sampler_next_commitment(s, &cm);
  cr_expect_eq(cm.step, 0);
  cr_expect_eq(cm.prev_token_id, -1);
  cr_assert_eq(qrs_sampler_select_u(s, ok, QRS_DTYPE_F32, 4, 0.01, &tok, NULL),
               0);
  cr_expect_eq(tok, 3);
  qrs_sampler_next_commitment(s, &cm);
  cr_expect_eq(cm.step, 1);
  cr_expect_eq(cm.prev_token_id, 3);
  cr_expect_eq(cm.salt_len, 16);
  /* a row longer than the sampler's capacity, until reserved */
  cr_expect_eq(qrs_sampler_select_u(s, ok, QRS_DTYPE_F32, 5, 0.5, &tok, NULL),
               -EINVAL);
  qrs_sampler_free(s);
}

Test(sampler, u_must_be_a_number_in_the_unit_interval)
{
  static const double bad[] = { NAN, INFINITY, -INFINITY, -0.5, 1.5,
                                -1e-300, 1.0000000000000002 };
  struct qrs_token_record rec;
  struct qrs_commitment cm;
  struct qrs_sampler *s;
  struct qrs_draw d;
  float row[4] = { 0.0f, 1.0f, 3.0f, 2.0f };
  uint32_t tok;
  size_t i;

  cr_assert_eq(qrs_sampler_new(NULL, 4, &s), 0);
  for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    tok = 77;
    cr_expect_eq(qrs_sampler_select_u(s, row, QRS_DTYPE_F32, 4, bad[i],
                                      &tok, NULL),
                 QRS_E_U_RANGE, "u %g", bad[i]);
    cr_expect_eq(tok, 77, "no token for u %g", bad[i]);
    memset(&d, 0, sizeof(d));
    d.u = bad[i];
    cr_expect_eq(qrs_sampler_step(s, row, QRS_DTYPE_F32, 4, &d, 0, &tok,
                                  &rec),
                 QRS_E_U_RANGE, "step, u %g", bad[i]);
  }
  qrs_sampler_next_commitment(s, &cm);
  cr_expect_eq(cm.step, 0, "refused u leave the chain where it was");
  cr_expect_str_eq(qrs_strerror_name(QRS_E_U_RANGE), "QRS_E_U_RANGE");
  /* the interval's ends select: u 0 the most probable, 1 the last
     survivor */
  cr_expect_eq(qrs_sampler_select_u(s, row, QRS_DTYPE_F32, 4, 0.0, &tok,
                                    NULL), 0);
  cr_expect_eq(tok, 2);
  cr_expect_eq(qrs_sampler_select_u(s, row, QRS_DTYPE_F32, 4, 1.0, &tok,
                                    NULL), 0);
  qrs_sampler_free(s);
}

Test(sampler, reserve_allows_padded_rows)
{
  struct qrs_sampler_config *cfg;
  struct qrs_sampler *s;
  float row[40];
  uint32_t tok;
  int i;

  for (i = 0; i < 40; i++)
    row[i] = i < 32 ? (float)(i % 5) : -INFINITY;
  cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
  cr_assert_eq(qrs_sampler_config_set(cfg, "temperature_strategy",
                                      "mix_temperatures"),
               0);
  cr_assert_eq(qrs_sampler_new(cfg, 32, &s), 0);
  cr_expect_eq(qrs_sampler_select_u(s, row, QRS_DTYPE_F32, 40, 0.5, &tok,
                                    NULL),
               -EINVAL);
  cr_assert_eq(qrs_sampler_reserve(s, 40), 0);
  cr_expect_eq(qrs_sampler_select_u(s, row, QRS_DTYPE_F32, 40, 0.5, &tok,
                                    NULL),
               0);
  cr_expect_lt(tok, 32, "padding is masked");
  qrs_sampler_free(s);
  qrs_sampler_config_free(cfg);
}

Test(sampler, bypass_selects_nothing)
{
  struct qrs_sampler_config *cfg;
  struct qrs_sampler *s;
  struct qrs_commitment cm;
  float row[3] = { 1.0f, 2.0f, 3.0f };
  uint32_t tok = 77;

  cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
  cr_assert_eq(qrs_sampler_config_set_arg(cfg, "qr_bypass", "true"), 0);
  cr_assert_eq(qrs_sampler_config_set_arg(cfg, "max_tokens", "5"), 0,
               "not a qr_ key: someone else's");
  cr_assert_eq(qrs_sampler_new(cfg, 3, &s), 0);
  cr_expect_eq(qrs_sampler_select_u(s, row, QRS_DTYPE_F32, 3, 0.5, &tok, NULL),
               1);
  cr_expect_eq(tok, 77);
  qrs_sampler_next_commitment(s, &cm);
  cr_expect_eq(cm.step, 0);
  qrs_sampler_free(s);
  qrs_sampler_config_free(cfg);
}

Test(sampler, reset_starts_a_new_request)
{
  struct qrs_sampler_config *cfg;
  struct qrs_sampler *s;
  struct qrs_commitment cm;
  struct qrs_token_record r1, r2;
  uint8_t salt1[16];
  float row[8] = { 0, 1, 2, 3, 2, 1, 0, -1 };
  int t;

  cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
  cr_assert_eq(qrs_sampler_config_set(cfg, "temperature_strategy",
                                      "hvh_drift"),
               0);
  cr_assert_eq(qrs_sampler_new(cfg, 8, &s), 0);
  qrs_sampler_next_commitment(s, &cm);
  memcpy(salt1, cm.salt, 16);
  cr_assert_eq(qrs_sampler_select_u(s, row, QRS_DTYPE_F32, 8, 0.3, NULL, &r1),
               0);
  for (t = 0; t < 5; t++) {
    row[t] += 1.0f;
    cr_assert_eq(
        qrs_sampler_select_u(s, row, QRS_DTYPE_F32, 8, 0.3, NULL, NULL), 0);
  }
  for (t = 0; t < 5; t++)
    row[t] -= 1.0f;
  cr_assert_eq(qrs_sampler_reset(s), 0);
  qrs_sampler_next_commitment(s, &cm);
  cr_expect_eq(cm.step, 0);
  cr_expect_eq(cm.prev_token_id, -1);
  cr_expect_neq(memcmp(salt1, cm.salt, 16), 0, "a fresh salt");
  cr_assert_eq(qrs_sampler_select_u(s, row, QRS_DTYPE_F32, 8, 0.3, NULL, &r2),
               0);
  /* hvh_drift's EMAs start again: the same first token. */
  cr_expect_float_eq(r1.h_ema, r2.h_ema, 0.0);
  cr_expect_eq(r1.token_id, r2.token_id);
  qrs_sampler_free(s);
  qrs_sampler_config_free(cfg);
}

Test(sampler, force_one_hot_in_every_dtype)
{
  float f[5];
  double d[5];
  uint16_t h[5], b[5];
  int i;

  cr_assert_eq(qrs_force_one_hot(f, QRS_DTYPE_F32, 5, 2), 0);
  cr_assert_eq(qrs_force_one_hot(d, QRS_DTYPE_F64, 5, 4), 0);
  cr_assert_eq(qrs_force_one_hot(h, QRS_DTYPE_F16, 5, 0), 0);
  cr_assert_eq(qrs_force_one_hot(b, QRS_DTYPE_BF16, 5, 1), 0);
  for (i = 0; i < 5; i++) {
    cr_expect(i == 2 ? f[i] == 0.0f : f[i] == -INFINITY);
    cr_expect(i == 4 ? d[i] == 0.0 : d[i] == -INFINITY);
    cr_expect_eq(h[i], i == 0 ? 0 : 0xfc00);
    cr_expect_eq(b[i], i == 1 ? 0 : 0xff80);
  }
  cr_expect_eq(qrs_force_one_hot(f, QRS_DTYPE_F32, 5, 5), -EINVAL);
}

Test(sampler, sample_token_checks_its_arguments_without_a_daemon)
{
  struct qrs_sampler *s;
  float row[3] = { 0, 1, 2 };

  cr_assert_eq(qrs_sampler_new(NULL, 3, &s), 0);
  cr_expect_eq(qrs_sampler_sample_token(s, NULL, row, QRS_DTYPE_F32, 3, NULL,
                                        NULL),
               -EINVAL);
  cr_expect_eq(qrs_sampler_prefetch(s, NULL), -EINVAL);
  qrs_sampler_cancel_prefetch(s);
  qrs_sampler_free(s);
  qrs_sampler_free(NULL);
}

/* Every strategy through the edge cases: greedy, no truncation, top-k
   beyond the vocabulary, min-p, u at the clamp limits, one-token and
   masked rows. */
Test(sampler, every_strategy_survives_the_edge_cases)
{
  static const char *const strategies[] = {
    "fixed", "edt", "hvh_drift", "coherence_gate", "tt_exchange", "evdt_tt",
    "gdt", "dynatemp", "belltemp", "mix_temperatures", "ring_buffer_ar",
    "entropy_throttle", "mirostat_v2",
  };
  static const char *const extra[][2] = {
    { "top_p", "1.0" },          { "top_k", "999" },
    { "min_p_base", "0.2" },     { "fixed_temperature", "0" },
    { "truncate_first", "true" }, { "stage_order", "llama" },
  };
  float row[9] = { 2, -INFINITY, 1, 0.5, -INFINITY, 3, 1, -1, -INFINITY };
  float one[1] = { -3.0f };
  struct qrs_sampler_config *cfg;
  struct qrs_token_record rec;
  struct qrs_sampler *s;
  uint32_t tok;
  size_t i, e;

  for (i = 0; i < sizeof(strategies) / sizeof(strategies[0]); i++) {
    for (e = 0; e < sizeof(extra) / sizeof(extra[0]); e++) {
      cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
      cr_assert_eq(qrs_sampler_config_set(cfg, "temperature_strategy",
                                          strategies[i]),
                   0);
      cr_assert_eq(qrs_sampler_config_set(cfg, extra[e][0], extra[e][1]), 0);
      if (!strcmp(extra[e][0], "stage_order") &&
          (!strcmp(strategies[i], "entropy_throttle") ||
           !strcmp(strategies[i], "mirostat_v2"))) {
        /* they cut the nucleus themselves: reference order only */
        cr_expect_eq(qrs_sampler_new(cfg, 9, &s), QRS_E_CONFIG_VALUE);
        qrs_sampler_config_free(cfg);
        continue;
      }
      cr_assert_eq(qrs_sampler_new(cfg, 9, &s), 0, "%s", strategies[i]);
      /* u at the clamp limits: the most probable, the last candidate */
      cr_assert_eq(qrs_sampler_select_u(s, row, QRS_DTYPE_F32, 9, 1e-10, &tok,
                                        &rec),
                   0, "%s %s", strategies[i], extra[e][0]);
      cr_expect_eq(rec.token_rank, 0);
      if (strcmp(strategies[i], "ring_buffer_ar") != 0)
        cr_expect_eq(tok, 5, "%s %s: the top token", strategies[i],
                     extra[e][0]);
      cr_assert_eq(qrs_sampler_select_u(s, row, QRS_DTYPE_F32, 9,
                                        1.0 - 1e-10, &tok, &rec),
                   0);
      cr_expect_eq(rec.token_rank, rec.num_candidates - 1, "%s %s",
                   strategies[i], extra[e][0]);
      cr_expect(row[tok] > -INFINITY, "%s %s: masked token %u",
                strategies[i], extra[e][0], tok);
      cr_expect_leq(rec.num_candidates, 6);
      /* a one-token row */
      cr_assert_eq(qrs_sampler_select_u(s, one, QRS_DTYPE_F32, 1, 0.7, &tok,
                                        &rec),
                   0, "%s %s: one token", strategies[i], extra[e][0]);
      cr_expect_eq(tok, 0);
      cr_expect_float_eq(rec.token_prob, 1.0, 1e-15);
      qrs_sampler_free(s);
      qrs_sampler_config_free(cfg);
    }
  }
}

Test(sampler, nucleus_strategies_need_the_reference_order)
{
  struct qrs_sampler_config *cfg;
  struct qrs_sampler *s;

  cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
  cr_assert_eq(qrs_sampler_config_set(cfg, "temperature_strategy",
                                      "mirostat_v2"),
               0);
  cr_assert_eq(qrs_sampler_config_set(cfg, "stage_order", "hf"), 0);
  cr_expect_eq(qrs_sampler_new(cfg, 10, &s), QRS_E_CONFIG_VALUE);
  cr_expect_eq(qrs_sampler_config_validate(cfg), QRS_E_CONFIG_VALUE);
  cr_expect(strstr(qrs_sampler_config_error(cfg), "mirostat_v2"));
  cr_assert_eq(qrs_sampler_config_set(cfg, "stage_order", "reference"), 0);
  cr_assert_eq(qrs_sampler_config_set(cfg, "fixed_temperature", "inf"), 0);
  cr_expect_eq(qrs_sampler_config_validate(cfg), QRS_E_CONFIG_VALUE);
  cr_assert_eq(qrs_sampler_config_set(cfg, "fixed_temperature", "0.5"), 0);
  cr_expect_eq(qrs_sampler_new(cfg, 10, &s), 0);
  qrs_sampler_free(s);
  qrs_sampler_config_free(cfg);
}

/* coherence_gate's inner strategy is checked for the stage order like the
   outer one. */
Test(sampler, coherence_gate_inner_nucleus_strategy_needs_the_reference_order)
{
  struct qrs_sampler_config *cfg;
  struct qrs_sampler *s;
  const char *inner[] = { "mirostat_v2", "entropy_throttle" };
  size_t i;

  for (i = 0; i < 2; i++) {
    cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
    cr_assert_eq(qrs_sampler_config_set(cfg, "temperature_strategy",
                                        "coherence_gate"), 0);
    cr_assert_eq(qrs_sampler_config_set(cfg, "coherence_inner_strategy",
                                        inner[i]), 0);
    cr_assert_eq(qrs_sampler_config_set(cfg, "stage_order", "hf"), 0);
    cr_expect_eq(qrs_sampler_config_validate(cfg), QRS_E_CONFIG_VALUE,
                 "%s inside the gate with stage_order hf", inner[i]);
    cr_expect(strstr(qrs_sampler_config_error(cfg),
                     "coherence_inner_strategy"), "%s",
              qrs_sampler_config_error(cfg));
    s = NULL;
    cr_expect_eq(qrs_sampler_new(cfg, 10, &s), QRS_E_CONFIG_VALUE);
    qrs_sampler_free(s);
    cr_assert_eq(qrs_sampler_config_set(cfg, "stage_order", "reference"), 0);
    cr_expect_eq(qrs_sampler_config_validate(cfg), 0, "%s",
                 qrs_sampler_config_error(cfg));
    qrs_sampler_config_free(cfg);
  }
}

/* NaN, infinities and absurd magnitudes in any double field are
   QRS_E_CONFIG_VALUE naming the field, at validate and at qrs_sampler_new
   (they became greedy selection silently). */
Test(sampler, every_double_field_must_be_finite_and_sensible)
{
  static const char *const bad[] = { "nan", "inf", "-inf", "1e300" };
  struct qrs_sampler_config *cfg;
  struct qrs_sampler *s;
  const char *name;
  size_t i, k, checked;
  int r;

  checked = 0;
  for (i = 0; (name = qrs_sampler_field_name(i)); i++) {
    /* A double field takes "0.5" and refuses "abc"; others do not. */
    cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
    r = qrs_sampler_config_set(cfg, name, "abc") != 0 &&
        qrs_sampler_config_set(cfg, name, "0.5") == 0;
    qrs_sampler_config_free(cfg);
    if (!r)
      continue;
    for (k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
      cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
      r = qrs_sampler_config_set(cfg, name, bad[k]);
      if (r == 0) {
        /* Accepted as a value (as the reference does): the check of the
           whole configuration refuses it. */
        checked++;
        cr_expect_eq(qrs_sampler_config_validate(cfg), QRS_E_CONFIG_VALUE,
                     "%s = %s passes validation", name, bad[k]);
        cr_expect(!strncmp(qrs_sampler_config_error(cfg), name,
                           strlen(name)),
                  "%s = %s: message '%s'", name, bad[k],
                  qrs_sampler_config_error(cfg));
        s = NULL;
        cr_expect_eq(qrs_sampler_new(cfg, 10, &s), QRS_E_CONFIG_VALUE,
                     "%s = %s: a sampler", name, bad[k]);
        qrs_sampler_free(s);
      } else {
        cr_expect_eq(r, QRS_E_CONFIG_VALUE, "%s = %s: %d", name, bad[k], r);
      }
      qrs_sampler_config_free(cfg);
    }
  }
  cr_expect_geq(checked, 100, "only %zu bad values reached validation",
                checked);
}

Test(sampler, nan_temperatures_of_the_issue_are_refused)
{
  static const char *const cases[][2] = {
    { "hvh_drift", "hvh_t_base" }, { "ring_buffer_ar", "rba_t" },
    { "edt", "edt_base_temp" }, { "fixed", "fixed_temperature" },
  };
  struct qrs_sampler_config *cfg;
  struct qrs_sampler *s;
  size_t i;

  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
    cr_assert_eq(qrs_sampler_config_set(cfg, "temperature_strategy",
                                        cases[i][0]), 0);
    cr_assert_eq(qrs_sampler_config_set(cfg, cases[i][1], "nan"), 0);
    s = NULL;
    cr_expect_eq(qrs_sampler_new(cfg, 10, &s), QRS_E_CONFIG_VALUE,
                 "%s with %s = nan", cases[i][0], cases[i][1]);
    qrs_sampler_free(s);
    cr_expect(strstr(qrs_sampler_config_error(cfg), cases[i][1]) ||
                  qrs_sampler_config_validate(cfg) == QRS_E_CONFIG_VALUE,
              "%s", qrs_sampler_config_error(cfg));
    cr_expect(strstr(qrs_sampler_config_error(cfg), cases[i][1]), "%s",
              qrs_sampler_config_error(cfg));
    qrs_sampler_config_free(cfg);
  }
}

/* The config hash out of memory is -ENOMEM, never success with
   "0000000000000000"; qrs_sampler_new fails with it. */
Test(sampler, config_hash_out_of_memory_is_an_error)
{
  struct qrs_sampler_config *cfg;
  struct qrs_token_record rec;
  struct qrs_sampler *s;
  float row[4] = { 0.5f, 1.0f, 2.0f, 0.0f };
  char good[17], h[17];
  long k;
  int r, failed;

  cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
  cr_assert_eq(qrs_sampler_config_set(cfg, "temperature_strategy", "edt"),
               0);
  cr_assert_eq(qrs_sampler_config_hash(cfg, good), 0);
  failed = 0;
  for (k = 0; k < 64; k++) {
    memcpy(h, "untouched", 10);
    fail_after = k;
    r = qrs_sampler_config_hash(cfg, h);
    fail_after = -1;
    if (r == 0) {
      cr_expect_str_eq(h, good, "allocation %ld failed: a wrong hash", k);
    } else {
      failed++;
      cr_expect_eq(r, -ENOMEM, "allocation %ld: %d", k, r);
      cr_expect_str_eq(h, "untouched");
    }
  }
  cr_expect_gt(failed, 0, "no allocation of the hash was made to fail");
  for (k = 0; k < 64; k++) {
    s = NULL;
    fail_after = k;
    r = qrs_sampler_new(cfg, 4, &s);
    fail_after = -1;
    if (r == 0) {
      cr_assert_eq(qrs_sampler_select_u(s, row, QRS_DTYPE_F32, 4, 0.5, NULL,
                                        &rec), 0);
      cr_expect_str_eq(rec.config_hash, good,
                       "allocation %ld failed: the records' hash", k);
      qrs_sampler_free(s);
    } else {
      cr_expect_eq(r, -ENOMEM, "allocation %ld: %d", k, r);
    }
  }
  qrs_sampler_config_free(cfg);
}

/* Rows that differ per token, so that the strategies' state moves. */
static void
fill_row(float *row, size_t n, unsigned k)
{
  size_t i;

  for (i = 0; i < n; i++)
    row[i] = (float)((i * 7 + k * 3) % 11) * 0.4f - (float)(k % 3);
}

Test(sampler, restored_state_resumes_as_if_the_drafts_never_were)
{
  static const char *const strategies[] = {
    "fixed", "edt", "hvh_drift", "coherence_gate", "tt_exchange", "evdt_tt",
    "gdt", "dynatemp", "belltemp", "mix_temperatures", "ring_buffer_ar",
    "entropy_throttle", "mirostat_v2",
  };
  static const uint8_t salt[4] = { 1, 2, 3, 4 };
  static const double u[6] = { 0.31, 0.77, 0.05, 0.93, 0.5, 0.66 };
  struct qrs_sampler_config *cfg;
  struct qrs_sampler *a, *b;
  struct qrs_token_record ra, rb;
  struct qrs_commitment ca, cb;
  unsigned char *saved;
  size_t i, size;
  float row[12];
  unsigned k;

  for (i = 0; i < sizeof(strategies) / sizeof(strategies[0]); i++) {
    cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
    cr_assert_eq(qrs_sampler_config_set(cfg, "temperature_strategy",
                                        strategies[i]),
                 0);
    cr_assert_eq(qrs_sampler_new(cfg, 12, &a), 0, "%s", strategies[i]);
    cr_assert_eq(qrs_sampler_new(cfg, 12, &b), 0);
    cr_assert_eq(qrs_sampler_set_salt(a, salt, sizeof(salt)), 0);
    cr_assert_eq(qrs_sampler_set_salt(b, salt, sizeof(salt)), 0);
    size = qrs_sampler_state_size(a);
    cr_assert_eq(size, qrs_sampler_state_size(b));
    saved = malloc(size);
    cr_assert_not_null(saved);
    /* a: two tokens, its state saved, two drafts, the state restored */
    for (k = 0; k < 2; k++) {
      fill_row(row, 12, k);
      cr_assert_eq(qrs_sampler_select_u(a, row, QRS_DTYPE_F32, 12, u[k],
                                        NULL, NULL),
                   0);
      cr_assert_eq(qrs_sampler_select_u(b, row, QRS_DTYPE_F32, 12, u[k],
                                        NULL, NULL),
                   0);
    }
    cr_assert_eq(qrs_sampler_save_state(a, saved, size), 0);
    for (k = 10; k < 12; k++) {
      fill_row(row, 12, k);
      cr_assert_eq(qrs_sampler_select_u(a, row, QRS_DTYPE_F32, 12, u[k - 8],
                                        NULL, NULL),
                   0);
    }
    qrs_sampler_next_commitment(a, &ca);
    cr_expect_eq(ca.step, 4);
    cr_assert_eq(qrs_sampler_restore_state(a, saved, size), 0);
    /* then a and b take the same tokens: they agree on every field
       the state feeds */
    for (k = 2; k < 6; k++) {
      qrs_sampler_next_commitment(a, &ca);
      qrs_sampler_next_commitment(b, &cb);
      cr_expect_eq(ca.step, cb.step, "%s", strategies[i]);
      cr_expect_eq(ca.prev_token_id, cb.prev_token_id, "%s", strategies[i]);
      fill_row(row, 12, k);
      cr_assert_eq(qrs_sampler_select_u(a, row, QRS_DTYPE_F32, 12, u[k],
                                        NULL, &ra),
                   0);
      cr_assert_eq(qrs_sampler_select_u(b, row, QRS_DTYPE_F32, 12, u[k],
                                        NULL, &rb),
                   0);
      cr_expect_eq(ra.step, rb.step);
      cr_expect_eq(ra.token_id, rb.token_id, "%s step %u", strategies[i], k);
      cr_expect_eq(memcmp(&ra.temperature_used, &rb.temperature_used,
                          sizeof(double)),
                   0, "%s step %u: temperature %g vs %g", strategies[i], k,
                   ra.temperature_used, rb.temperature_used);
      cr_expect_eq(memcmp(&ra.h_ema, &rb.h_ema, sizeof(double)), 0);
      cr_expect_eq(memcmp(&ra.vh_ema, &rb.vh_ema, sizeof(double)), 0);
      cr_expect_eq(memcmp(&ra.top_p_used, &rb.top_p_used, sizeof(double)),
                   0);
    }
    free(saved);
    qrs_sampler_free(a);
    qrs_sampler_free(b);
    qrs_sampler_config_free(cfg);
  }
}

Test(sampler, restore_refuses_what_another_sampler_saved)
{
  struct qrs_sampler_config *cfg, *other;
  struct qrs_sampler *s, *t, *v, *v8;
  struct qrs_commitment cm;
  unsigned char *saved, *bad;
  size_t size, i;
  float row[8];
  int r, k;

  cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
  cr_assert_eq(qrs_sampler_config_set(cfg, "temperature_strategy",
                                      "ring_buffer_ar"),
               0);
  cr_assert_eq(qrs_sampler_config_new(&other), 0);
  cr_assert_eq(qrs_sampler_config_set(other, "top_k", "3"), 0);
  cr_assert_eq(qrs_sampler_new(cfg, 8, &s), 0);
  cr_assert_eq(qrs_sampler_new(other, 8, &t), 0);
  cr_assert_eq(qrs_sampler_new(cfg, 9, &v), 0);
  cr_assert_eq(qrs_sampler_new(cfg, 8, &v8), 0);
  /* step 0 has no previous token to replace */
  cr_expect_eq(qrs_sampler_set_previous_token(s, 1), -EINVAL);
  fill_row(row, 8, 1);
  cr_assert_eq(qrs_sampler_select_u(s, row, QRS_DTYPE_F32, 8, 0.4, NULL,
                                    NULL),
               0);
  size = qrs_sampler_state_size(s);
  saved = malloc(size);
  bad = malloc(size);
  cr_assert(saved && bad);
  cr_expect_eq(qrs_sampler_save_state(s, saved, size - 1), -ENOBUFS);
  cr_assert_eq(qrs_sampler_save_state(s, saved, size), 0);
  /* another configuration, another vocabulary, a short or edited copy */
  cr_expect_eq(qrs_sampler_restore_state(t, saved, size), -EINVAL);
  cr_expect_eq(qrs_sampler_restore_state(v, saved, size), -EINVAL);
  cr_expect_eq(qrs_sampler_restore_state(s, saved, size - 1), -EINVAL);
  memcpy(bad, saved, size);
  bad[0] ^= 1;
  cr_expect_eq(qrs_sampler_restore_state(s, bad, size), -EINVAL);
  /* any byte edited: refused, or restored into a sampler that still
     steps inside its memory (the ring's indices are checked) */
  for (i = 0; i < size; i++) {
    memcpy(bad, saved, size);
    bad[i] ^= 0xa5;
    r = qrs_sampler_restore_state(v8, bad, size);
    cr_expect(r == 0 || r == -EINVAL, "byte %zu: %d", i, r);
    for (k = 0; r == 0 && k < 3; k++)
      (void)qrs_sampler_select_u(v8, row, QRS_DTYPE_F32, 8, 0.4, NULL, NULL);
  }
  /* the previous token a forced token replaces */
  cr_assert_eq(qrs_sampler_set_previous_token(s, 6), 0);
  qrs_sampler_next_commitment(s, &cm);
  cr_expect_eq(cm.prev_token_id, 6);
  cr_expect_eq(cm.step, 1);
  cr_expect_eq(qrs_sampler_set_previous_token(s, 8), -EINVAL);
  cr_assert_eq(qrs_sampler_restore_state(s, saved, size), 0);
  qrs_sampler_next_commitment(s, &cm);
  cr_expect_neq(cm.prev_token_id, 6);
  free(saved);
  free(bad);
  qrs_sampler_free(s);
  qrs_sampler_free(t);
  qrs_sampler_free(v);
  qrs_sampler_free(v8);
  qrs_sampler_config_free(cfg);
  qrs_sampler_config_free(other);
}
