/* Sampler configuration: the field table, presets, the QR_* environment,
   validation and the reference-compatible config hash. */
#define _GNU_SOURCE
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <json-c/json.h>

#include <qrs/sampler.h>

#include <openssl/sha.h>

#include "sampling.h"

extern char **environ;

enum ftype {
  F_DBL,
  F_INT,
  F_BOOL,
  F_STR,
};

struct field {
  const char *name;
  enum ftype type;
  size_t off;
  size_t size;                    /* F_STR: buffer size */
  const char *def;                /* default, as text */
  double lo, hi;                  /* range; NAN: unbounded */
  unsigned char lo_open, hi_open; /* > instead of >=, < instead of <= */
  const char *const *choices;     /* F_STR: allowed values, NULL: any */
  unsigned char ext;              /* qrs extension (not a reference field) */
};

static const char *const strategies[] = {
  "fixed", "edt", "hvh_drift", "coherence_gate", "tt_exchange", "evdt_tt",
  "gdt", "dynatemp", "belltemp", "mix_temperatures", "ring_buffer_ar",
  "entropy_throttle", "mirostat_v2", NULL,
};
static const char *const inner_strategies[] = {
  "", "fixed", "edt", "hvh_drift", "tt_exchange", "evdt_tt", "gdt",
  "dynatemp", "belltemp", "mix_temperatures", "ring_buffer_ar",
  "entropy_throttle", "mirostat_v2", NULL,
};
static const char *const log_levels[] = { "none", "summary", "full", NULL };
static const char *const orders[] = { "reference", "hf", "llama", NULL };
static const char *const throttle_modes[] = { "exact", "controller", NULL };

#define OFF(f) offsetof(struct qrs__cfgvals, f)
#define D(f, def) { #f, F_DBL, OFF(f), 0, def, NAN, NAN, 0, 0, NULL, 0 }
#define DR(f, def, lo, hi, lo_open, hi_open) \
  { #f, F_DBL, OFF(f), 0, def, lo, hi, lo_open, hi_open, NULL, 0 }
#define I(f, def, lo, hi) { #f, F_INT, OFF(f), 0, def, lo, hi, 0, 0, NULL, 0 }
#define B(f, def) { #f, F_BOOL, OFF(f), 0, def, NAN, NAN, 0, 0, NULL, 0 }
#define S(f, def, ch) \
  { #f, F_STR, OFF(f), sizeof(((struct qrs__cfgvals *)0)->f), def, NAN, NAN, \
    0, 0, ch, 0 }
#define XD(f, def, lo, hi, lo_open) \
  { #f, F_DBL, OFF(f), 0, def, lo, hi, lo_open, 0, NULL, 1 }
#define XS(f, def, ch) \
  { #f, F_STR, OFF(f), sizeof(((struct qrs__cfgvals *)0)->f), def, NAN, NAN, \
    0, 0, ch, 1 }

/* Reference fields in the reference's declaration order, then ours. */
static const struct field fields[] = {
  S(entropy_source_type, "system", NULL),
  B(entropy_prefetch, "true"),
  S(signal_amplifier_type, "zscore_mean", NULL),
  I(sample_count, "10000", NAN, NAN),
  D(population_mean, "127.5"),
  D(population_std, "73.61215932167728"),
  D(uniform_clamp_epsilon, "1e-10"),
  I(zscore_calibration_samples, "0", 0, NAN),
  S(draw_source_id, "", NULL),
  I(draw_block_bytes, "0", 0, NAN),
  S(temperature_strategy, "fixed", strategies),
  D(fixed_temperature, "1.0"),
  D(edt_base_temp, "0.8"),
  D(edt_exponent, "0.5"),
  D(edt_min_temp, "0.1"),
  D(edt_max_temp, "2.0"),
  D(hvh_t_base, "1.35"),
  D(hvh_alpha_h, "0.3"),
  D(hvh_alpha_vh, "-0.2"),
  D(hvh_gamma_dh, "1.0"),
  D(hvh_delta_dvh, "0.5"),
  D(hvh_lambda_ema, "0.02"),
  D(hvh_min_p_base, "0.025"),
  D(hvh_kappa_h, "0.03"),
  D(hvh_nu_dh, "0.02"),
  D(tt_t_base, "1.0"),
  D(tt_gamma, "0.6"),
  D(tt_min_p_base, "0.005"),
  D(tt_min_p_scale, "0.025"),
  D(evdt_t_base, "1.25"),
  D(evdt_alpha, "0.35"),
  D(evdt_beta, "-0.1"),
  D(evdt_min_p_base, "0.008"),
  D(evdt_min_p_scale, "0.015"),
  D(evdt_min_p_vh, "0.005"),
  D(gdt_t_base, "0.582"),
  DR(gdt_t_peak, "1.402", 0.0, 1.5, 0, 0),
  D(gdt_mu, "0.397"),
  DR(gdt_sigma, "0.283", 0.0, NAN, 1, 0),
  D(gdt_alpha, "0.952"),
  DR(gdt_lambda_vh, "10.0", 0.0, NAN, 1, 0),
  D(gdt_min_p_base, "0.01"),
  D(gdt_min_p_scale, "0.081"),
  D(dynatemp_t_center, "1.31"),
  DR(dynatemp_t_range, "0.38", 0.0, NAN, 0, 0),
  DR(dynatemp_exponent, "1.0", 0.0, NAN, 1, 0),
  DR(dynatemp_min_p, "0.026", 0.0, 0.15, 0, 0),
  D(belltemp_t_base, "0.7"),
  DR(belltemp_t_peak, "0.6", 0.0, 1.5, 0, 0),
  D(belltemp_mu, "0.35"),
  DR(belltemp_sigma, "0.15", 0.0, NAN, 1, 0),
  D(belltemp_vh_weight, "0.0"),
  DR(belltemp_lambda_vh, "10.0", 0.0, NAN, 1, 0),
  D(belltemp_min_p_base, "0.0"),
  D(belltemp_min_p_scale, "0.0"),
  DR(mix_t_cool, "0.7", 0.3, 2.2, 0, 0),
  DR(mix_t_hot, "1.3", 0.3, 2.2, 0, 0),
  D(mix_gate_a, "1.5"),
  D(mix_gate_b, "1.3"),
  D(mix_gate_c, "0.8"),
  D(mix_gate_d, "1.2"),
  DR(mix_min_p, "0.005", 0.0, 0.15, 0, 0),
  I(rba_buffer_n, "32", 1, 1048576),
  DR(rba_lam, "2.5", 0.0, NAN, 0, 0),
  D(rba_threshold, "0.65"),
  D(rba_t, "1.0"),
  DR(rba_min_p, "0.005", 0.0, 0.15, 0, 0),
  D(coherence_threshold, "3.5"),
  DR(coherence_t_boost_max, "0.5", 0.0, NAN, 0, 0),
  DR(coherence_ema_alpha, "0.3", 0.0, 1.0, 0, 0),
  S(coherence_inner_strategy, "fixed", inner_strategies),
  I(top_k, "0", NAN, NAN),
  D(top_p, "1.0"),
  D(min_p_base, "0.0"),
  B(truncate_first, "false"),
  B(bypass, "false"),
  S(log_level, "summary", log_levels),
  B(diagnostic_mode, "false"),
  XS(stage_order, "reference", orders),
  XS(throttle_mode, "exact", throttle_modes),
  XD(throttle_target_bits, "2.0", 0.0, NAN, 0),
  XD(throttle_p_min, "0.01", 0.0, 1.0, 0),
  XD(throttle_p_max, "0.99", 0.0, 1.0, 0),
  XD(throttle_p_init, "0.9", 0.0, 1.0, 0),
  XD(throttle_gain, "0.05", 0.0, NAN, 0),
  XD(throttle_tolerance_bits, "0.5", 0.0, NAN, 0),
  XD(mirostat_tau, "5.0", 0.0, NAN, 1),
  XD(mirostat_eta, "0.1", 0.0, NAN, 0),
};

#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

/* The reference's infrastructure fields (configure qrsd instead), with
   their default JSON text, in the reference's field order; NULL marks a
   field of ours (taken from the table above) and "preset". */
static const struct {
  const char *name;
  const char *json;
} ref_order[] = {
  { "grpc_server_address", "\"localhost:50051\"" },
  { "grpc_timeout_ms", "5000.0" },
  { "grpc_retry_count", "2" },
  { "grpc_mode", "\"unary\"" },
  { "grpc_method_path", "\"/qr_entropy.EntropyService/GetEntropy\"" },
  { "grpc_stream_method_path",
    "\"/qr_entropy.EntropyService/StreamEntropy\"" },
  { "grpc_draw_method_path", "\"/qr_purity.PurityService/GetDraw\"" },
  { "grpc_draw_stream_method_path",
    "\"/qr_purity.PurityService/StreamDraws\"" },
  { "grpc_api_key", "\"\"" },
  { "grpc_api_key_header", "\"api-key\"" },
  { "fallback_mode", "\"system\"" },
  { "entropy_source_instances", "{}" },
  { "entropy_source_type", NULL },
  { "entropy_prefetch", NULL },
  { "qrng_max_bytes_per_request", "35200" },
  { "qrng_max_requests_per_minute", "500" },
  { "qrng_max_bytes_per_day", "524288000" },
  { "cb_window_size", "100" },
  { "cb_min_timeout_ms", "5.0" },
  { "cb_timeout_multiplier", "1.5" },
  { "cb_recovery_window_s", "10.0" },
  { "cb_recovery_window_max_s", "60.0" },
  { "cb_max_consecutive_failures", "3" },
  { "signal_amplifier_type", NULL },
  { "sample_count", NULL },
  { "population_mean", NULL },
  { "population_std", NULL },
  { "uniform_clamp_epsilon", NULL },
  { "ecdf_calibration_samples", "2000" },
  /* zscore_calibration_samples .. bypass: ours, in table order */
  { "*", NULL },
  { "apply_parallel_rows", "0" },
  { "log_level", NULL },
  { "diagnostic_mode", NULL },
  { "preset", NULL },
  { "oe_conditioning", "\"raw\"" },
  { "oe_sources", "\"\"" },
  { "oe_parallel", "true" },
  { "oe_timeout", "5.0" },
};

#define NREF (sizeof(ref_order) / sizeof(ref_order[0]))

/* The seven built-in presets (reference config/presets.py). */
struct preset_value {
  const char *field;
  const char *value;
};

static const struct preset_value p_creative[] = {
  { "temperature_strategy", "hvh_drift" }, { "hvh_t_base", "1.35" },
  { "hvh_alpha_h", "0.3" }, { "hvh_alpha_vh", "-0.2" },
  { "hvh_gamma_dh", "1.0" }, { "hvh_delta_dvh", "0.5" },
  { "hvh_lambda_ema", "0.02" }, { "hvh_min_p_base", "0.025" },
  { "hvh_kappa_h", "0.03" }, { "hvh_nu_dh", "0.02" }, { "top_k", "0" },
  { "top_p", "1.0" }, { NULL, NULL },
};
static const struct preset_value p_normal_t1[] = {
  { "temperature_strategy", "fixed" }, { "fixed_temperature", "1.0" },
  { "top_k", "0" }, { "top_p", "1.0" }, { NULL, NULL },
};
static const struct preset_value p_chat_light[] = {
  { "entropy_source_type", "quantum_grpc" },
  { "signal_amplifier_type", "zscore_mean" },
  { "temperature_strategy", "fixed" }, { "fixed_temperature", "1.0" },
  { "top_k", "0" }, { "top_p", "1.0" }, { NULL, NULL },
};
static const struct preset_value p_qthought[] = {
  { "entropy_source_type", "quantum_grpc" },
  { "signal_amplifier_type", "server" }, { "draw_block_bytes", "102400" },
  { "sample_count", "10000" }, { "zscore_calibration_samples", "200" },
  { NULL, NULL },
};
static const struct preset_value p_qthought_think[] = {
  { "temperature_strategy", "coherence_gate" },
  { "coherence_inner_strategy", "edt" }, { "edt_base_temp", "0.8" },
  { "top_k", "50" }, { "top_p", "0.9" }, { "coherence_threshold", "3.5" },
  { "coherence_t_boost_max", "0.5" }, { "coherence_ema_alpha", "0.3" },
  { "entropy_source_type", "quantum_grpc" },
  { "signal_amplifier_type", "server" }, { "draw_block_bytes", "102400" },
  { "sample_count", "6000" }, { "zscore_calibration_samples", "200" },
  { NULL, NULL },
};
static const struct preset_value p_qthought_voice[] = {
  { "temperature_strategy", "coherence_gate" },
  { "coherence_inner_strategy", "edt" }, { "edt_base_temp", "0.8" },
  { "top_k", "0" }, { "top_p", "1.0" }, { "coherence_threshold", "3.5" },
  { "coherence_t_boost_max", "0.5" }, { "coherence_ema_alpha", "0.3" },
  { "entropy_source_type", "quantum_grpc" },
  { "signal_amplifier_type", "server" }, { "draw_block_bytes", "102400" },
  { "sample_count", "10000" }, { "zscore_calibration_samples", "200" },
  { NULL, NULL },
};
static const struct preset_value p_qthought_purity[] = {
  { "entropy_source_type", "quantum_grpc" },
  { "signal_amplifier_type", "server" },
  { "temperature_strategy", "coherence_gate" },
  { "coherence_inner_strategy", "fixed" }, { "fixed_temperature", "1.0" },
  { "coherence_threshold", "3.5" }, { "coherence_t_boost_max", "0.5" },
  { "coherence_ema_alpha", "0.3" }, { "draw_block_bytes", "102400" },
  { "top_k", "0" }, { "top_p", "1.0" }, { NULL, NULL },
};

static const struct {
  const char *name;
  const struct preset_value *values;
} presets[] = {
  { "creative_sampling", p_creative },
  { "normal_t1", p_normal_t1 },
  { "chat_light", p_chat_light },
  { "qthought", p_qthought },
  { "qthought_think", p_qthought_think },
  { "qthought_voice", p_qthought_voice },
  { "qthought_purity", p_qthought_purity },
};

#define NPRESETS (sizeof(presets) / sizeof(presets[0]))

/* The reference's infrastructure fields, for a helpful error. */
static const char *const infra[] = {
  "grpc_server_address", "grpc_timeout_ms", "grpc_retry_count", "grpc_mode",
  "grpc_method_path", "grpc_stream_method_path", "grpc_draw_method_path",
  "grpc_draw_stream_method_path", "grpc_api_key", "grpc_api_key_header",
  "fallback_mode", "entropy_source_instances", "qrng_max_bytes_per_request",
  "qrng_max_requests_per_minute", "qrng_max_bytes_per_day", "cb_window_size",
  "cb_min_timeout_ms", "cb_timeout_multiplier", "cb_recovery_window_s",
  "cb_recovery_window_max_s", "cb_max_consecutive_failures",
  "ecdf_calibration_samples", "apply_parallel_rows", "oe_conditioning",
  "oe_sources", "oe_parallel", "oe_timeout", NULL,
};

#define PRESET_MAX 32

struct qrs_sampler_config {
  struct qrs__cfgvals exp_v;      /* explicit layer values */
  struct qrs__cfgvals env_v;      /* environment layer values */
  unsigned char exp_set[NFIELDS];
  unsigned char env_set[NFIELDS];
  char preset[PRESET_MAX];        /* explicit preset, "" none */
  char env_preset[PRESET_MAX];    /* QR_PRESET, when has_env_preset */
  int has_env_preset;
  char err[256];
};

/* ---- locale-independent number text ---- */

static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;

static void
c_locale_init(void)
{
  c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
}

static locale_t
cloc(void)
{
  pthread_once(&c_locale_once, c_locale_init);
  return c_locale;
}

/* strtod in the C locale; 0 and *ret on a complete parse. */
static int
parse_double(const char *s, double *ret)
{
  char *end;
  double v;

  while (*s == ' ' || *s == '\t')
    s++;
  if (!*s)
    return -1;
  errno = 0;
  v = cloc() ? strtod_l(s, &end, cloc()) : strtod(s, &end);
  while (*end == ' ' || *end == '\t')
    end++;
  if (*end || end == s)
    return -1;
  *ret = v;
  return 0;
}

static int
parse_int(const char *s, long long *ret)
{
  char *end;
  long long v;
  double d;

  while (*s == ' ' || *s == '\t')
    s++;
  errno = 0;
  v = strtoll(s, &end, 10);
  while (*end == ' ' || *end == '\t')
    end++;
  if (!*end && end != s && errno == 0) {
    *ret = v;
    return 0;
  }
  /* An integral float ("2.0") is an integer too, as in the reference. */
  if (parse_double(s, &d) == 0 && isfinite(d) && d == floor(d) &&
      fabs(d) < 9.2e18) {
    *ret = (long long)d;
    return 0;
  }
  return -1;
}

static int
parse_bool(const char *s, int *ret)
{
  static const char *const t[] = { "1", "true", "yes", "on", "t", "y" };
  static const char *const f[] = { "0", "false", "no", "off", "f", "n" };
  size_t i;

  for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
    if (!strcasecmp(s, t[i])) {
      *ret = 1;
      return 0;
    }
    if (!strcasecmp(s, f[i])) {
      *ret = 0;
      return 0;
    }
  }
  return -1;
}

void
qrs__fmt_double(double x, char *buf, size_t len)
{
  char e[40], digits[24], *p;
  locale_t old;
  int prec, exp10, nd, i, k;
  double back;
  size_t o;

  if (isnan(x)) {
    snprintf(buf, len, "NaN");
    return;
  }
  if (isinf(x)) {
    snprintf(buf, len, x > 0 ? "inf" : "-inf");
    return;
  }
  if (x == 0.0) {
    snprintf(buf, len, signbit(x) ? "-0.0" : "0.0");
    return;
  }
  old = cloc() ? uselocale(cloc()) : (locale_t)0;
  /* The shortest digit string that reads back as x. */
  for (prec = 1; prec <= 17; prec++) {
    snprintf(e, sizeof(e), "%.*e", prec - 1, x);
    back = strtod(e, NULL);
    if (back == x)
      break;
  }
  if (old)
    uselocale(old);
  p = e;
  o = 0;
  if (*p == '-')
    p++;
  nd = 0;
  for (; *p && *p != 'e'; p++)
    if (*p != '.')
      digits[nd++] = *p;
  exp10 = atoi(p + 1);
  while (nd > 1 && digits[nd - 1] == '0')
    nd--;
  digits[nd] = 0;
  k = 0;
  if (x < 0)
    buf[o++] = '-';
#define PUT(c) \
  do { \
    if (o + 1 < len) \
      buf[o++] = (c); \
  } while (0)
  if (fabs(x) >= 1e-5 && fabs(x) < 1e16) {
    if (exp10 >= 0) {
      for (i = 0; i <= exp10; i++)
        PUT(i < nd ? digits[i] : '0');
      PUT('.');
      if (exp10 + 1 < nd)
        for (i = exp10 + 1; i < nd; i++)
          PUT(digits[i]);
      else
        PUT('0');
    } else {
      PUT('0');
      PUT('.');
      for (i = 0; i < -exp10 - 1; i++)
        PUT('0');
      for (i = 0; i < nd; i++)
        PUT(digits[i]);
    }
  } else {
    PUT(digits[0]);
    if (nd > 1) {
      PUT('.');
      for (i = 1; i < nd; i++)
        PUT(digits[i]);
    }
    PUT('e');
    PUT(exp10 < 0 ? '-' : '+');
    snprintf(e, sizeof(e), "%d", exp10 < 0 ? -exp10 : exp10);
    for (k = 0; e[k]; k++)
      PUT(e[k]);
  }
#undef PUT
  buf[o < len ? o : len - 1] = 0;
}

/* ---- the field table ---- */

static int
field_index(const char *name)
{
  size_t i;

  if (!name)
    return -1;
  for (i = 0; i < NFIELDS; i++)
    if (!strcmp(fields[i].name, name))
      return (int)i;
  return -1;
}

static int
is_infra(const char *name)
{
  size_t i;

  for (i = 0; infra[i]; i++)
    if (!strcmp(infra[i], name))
      return 1;
  return 0;
}

static int
preset_index(const char *name)
{
  size_t i;

  for (i = 0; i < NPRESETS; i++)
    if (!strcmp(presets[i].name, name))
      return (int)i;
  return -1;
}

const char *
qrs_sampler_field_name(size_t i)
{
  return i < NFIELDS ? fields[i].name : NULL;
}

const char *
qrs_sampler_preset_name(size_t i)
{
  return i < NPRESETS ? presets[i].name : NULL;
}

static void
seterr(char *err, size_t len, const char *fmt, ...)
{
  va_list ap;

  if (!err || !len)
    return;
  va_start(ap, fmt);
  vsnprintf(err, len, fmt, ap);
  va_end(ap);
}

static int
range_ok(const struct field *f, double v)
{
  if (!isnan(f->lo) && !(f->lo_open ? v > f->lo : v >= f->lo))
    return 0;
  if (!isnan(f->hi) && !(f->hi_open ? v < f->hi : v <= f->hi))
    return 0;
  return 1;
}

static void
range_text(const struct field *f, char *buf, size_t len)
{
  char lo[32], hi[32];

  qrs__fmt_double(f->lo, lo, sizeof(lo));
  qrs__fmt_double(f->hi, hi, sizeof(hi));
  if (!isnan(f->lo) && !isnan(f->hi))
    snprintf(buf, len, "%s %s, %s %s", f->lo_open ? ">" : ">=", lo,
             f->hi_open ? "<" : "<=", hi);
  else if (!isnan(f->lo))
    snprintf(buf, len, "%s %s", f->lo_open ? ">" : ">=", lo);
  else
    snprintf(buf, len, "%s %s", f->hi_open ? "<" : "<=", hi);
}

/* Parse text for field f into v.  0 or QRS_E_CONFIG_VALUE (err set). */
static int
parse_into(const struct field *f, const char *text, struct qrs__cfgvals *v,
           char *err, size_t errlen)
{
  char *base, rng[80];
  double d;
  long long ll;
  int b;
  size_t i, l;

  base = (char *)v + f->off;
  switch (f->type) {
  case F_DBL:
    if (parse_double(text, &d) < 0) {
      seterr(err, errlen, "%s: not a number: '%s'", f->name, text);
      return QRS_E_CONFIG_VALUE;
    }
    if (!range_ok(f, d)) {
      range_text(f, rng, sizeof(rng));
      seterr(err, errlen, "%s: %s is out of range (%s)", f->name, text,
             rng);
      return QRS_E_CONFIG_VALUE;
    }
    memcpy(base, &d, sizeof(d));
    return 0;
  case F_INT:
    if (parse_int(text, &ll) < 0) {
      seterr(err, errlen, "%s: not an integer: '%s'", f->name, text);
      return QRS_E_CONFIG_VALUE;
    }
    if (!range_ok(f, (double)ll)) {
      range_text(f, rng, sizeof(rng));
      seterr(err, errlen, "%s: %s is out of range (%s)", f->name, text,
             rng);
      return QRS_E_CONFIG_VALUE;
    }
    memcpy(base, &ll, sizeof(ll));
    return 0;
  case F_BOOL:
    if (parse_bool(text, &b) < 0) {
      seterr(err, errlen, "%s: not a boolean: '%s'", f->name, text);
      return QRS_E_CONFIG_VALUE;
    }
    memcpy(base, &b, sizeof(b));
    return 0;
  case F_STR:
    l = strlen(text);
    if (l >= f->size) {
      seterr(err, errlen, "%s: longer than %zu bytes", f->name,
             f->size - 1);
      return QRS_E_CONFIG_VALUE;
    }
    if (f->choices) {
      for (i = 0; f->choices[i]; i++)
        if (!strcmp(f->choices[i], text))
          break;
      if (!f->choices[i]) {
        seterr(err, errlen, "%s: unknown value '%s'", f->name, text);
        return QRS_E_CONFIG_VALUE;
      }
    }
    memcpy(base, text, l + 1);
    return 0;
  }
  return QRS_E_CONFIG_VALUE;
}

static void
copy_field(const struct field *f, struct qrs__cfgvals *dst,
           const struct qrs__cfgvals *src)
{
  size_t sz;

  switch (f->type) {
  case F_DBL:
    sz = sizeof(double);
    break;
  case F_INT:
    sz = sizeof(long long);
    break;
  case F_BOOL:
    sz = sizeof(int);
    break;
  default:
    sz = f->size;
    break;
  }
  memcpy((char *)dst + f->off, (const char *)src + f->off, sz);
}

/* The field's value as text (buf of len). */
static void
field_text(const struct field *f, const struct qrs__cfgvals *v, char *buf,
           size_t len)
{
  const char *base;
  double d;
  long long ll;
  int b;

  base = (const char *)v + f->off;
  switch (f->type) {
  case F_DBL:
    memcpy(&d, base, sizeof(d));
    qrs__fmt_double(d, buf, len);
    break;
  case F_INT:
    memcpy(&ll, base, sizeof(ll));
    snprintf(buf, len, "%lld", ll);
    break;
  case F_BOOL:
    memcpy(&b, base, sizeof(b));
    snprintf(buf, len, "%s", b ? "true" : "false");
    break;
  case F_STR:
    snprintf(buf, len, "%s", base);
    break;
  }
}

static void
defaults(struct qrs__cfgvals *v)
{
  size_t i;

  memset(v, 0, sizeof(*v));
  for (i = 0; i < NFIELDS; i++)
    parse_into(&fields[i], fields[i].def, v, NULL, 0);
}

const char *
qrs__config_preset(const struct qrs_sampler_config *cfg)
{
  if (cfg->preset[0])
    return cfg->preset;
  if (cfg->has_env_preset && cfg->env_preset[0])
    return cfg->env_preset;
  return NULL;
}

void
qrs__config_resolve(const struct qrs_sampler_config *cfg,
                    struct qrs__cfgvals *v)
{
  const struct preset_value *pv;
  const char *pn;
  size_t i;
  int k, pi;

  defaults(v);
  if (!cfg)
    return;
  for (i = 0; i < NFIELDS; i++)
    if (cfg->env_set[i])
      copy_field(&fields[i], v, &cfg->env_v);
  pn = qrs__config_preset(cfg);
  pi = pn ? preset_index(pn) : -1;
  if (pi >= 0) {
    for (pv = presets[pi].values; pv->field; pv++) {
      k = field_index(pv->field);
      if (k >= 0)
        parse_into(&fields[k], pv->value, v, NULL, 0);
    }
  }
  for (i = 0; i < NFIELDS; i++)
    if (cfg->exp_set[i])
      copy_field(&fields[i], v, &cfg->exp_v);
}

/* Every double field must be finite and at most this large in magnitude;
   the values set accept what the reference accepts (NaN, infinities),
   the check of the whole configuration refuses them. */
#define DBL_SANE_MAX 1e6

/* Tighter ranges, checked with the whole configuration, for double fields
   that the table above leaves open (probabilities, the amplifier's
   constants, EMA weights). */
static const struct {
  const char *name;
  double lo, hi;
  unsigned char lo_open, hi_open;
} sane_ranges[] = {
  { "population_mean", 0.0, 255.0, 0, 0 },
  { "population_std", 0.0, 127.5, 1, 0 },
  { "uniform_clamp_epsilon", 0.0, 0.5, 1, 1 },
  { "top_p", 0.0, 1.0, 0, 0 },
  { "hvh_min_p_base", 0.0, 1.0, 0, 0 },
  { "hvh_lambda_ema", 0.0, 1.0, 0, 0 },
  { "tt_min_p_base", 0.0, 1.0, 0, 0 },
  { "evdt_min_p_base", 0.0, 1.0, 0, 0 },
  { "gdt_min_p_base", 0.0, 1.0, 0, 0 },
  { "belltemp_min_p_base", 0.0, 1.0, 0, 0 },
};

/* Each double field finite, within DBL_SANE_MAX and its sane range. */
static int
check_doubles(const struct qrs__cfgvals *v, char *err, size_t errlen)
{
  char txt[32], rng[80];
  struct field f;
  size_t i, k;
  double d;

  for (i = 0; i < NFIELDS; i++) {
    if (fields[i].type != F_DBL)
      continue;
    memcpy(&d, (const char *)v + fields[i].off, sizeof(d));
    qrs__fmt_double(d, txt, sizeof(txt));
    if (!isfinite(d)) {
      seterr(err, errlen, "%s: %s is not a finite number", fields[i].name,
             txt);
      return QRS_E_CONFIG_VALUE;
    }
    if (fabs(d) > DBL_SANE_MAX) {
      seterr(err, errlen, "%s: %s is out of range (magnitude at most 1e6)",
             fields[i].name, txt);
      return QRS_E_CONFIG_VALUE;
    }
    for (k = 0; k < sizeof(sane_ranges) / sizeof(sane_ranges[0]); k++) {
      if (strcmp(sane_ranges[k].name, fields[i].name) != 0)
        continue;
      f = fields[i];
      f.lo = sane_ranges[k].lo;
      f.hi = sane_ranges[k].hi;
      f.lo_open = sane_ranges[k].lo_open;
      f.hi_open = sane_ranges[k].hi_open;
      if (!range_ok(&f, d)) {
        range_text(&f, rng, sizeof(rng));
        seterr(err, errlen, "%s: %s is out of range (%s)", f.name, txt, rng);
        return QRS_E_CONFIG_VALUE;
      }
    }
  }
  return 0;
}

/* entropy_throttle and mirostat_v2 cut the nucleus themselves. */
static int
cuts_nucleus(const char *strategy)
{
  return !strcmp(strategy, "entropy_throttle") ||
         !strcmp(strategy, "mirostat_v2");
}

int
qrs__config_check(const struct qrs__cfgvals *v, char *err, size_t errlen)
{
  int r;

  r = check_doubles(v, err, errlen);
  if (r < 0)
    return r;
  if (v->truncate_first && strcmp(v->stage_order, "reference") != 0) {
    seterr(err, errlen,
           "truncate_first: only with stage_order reference (not '%s')",
           v->stage_order);
    return QRS_E_CONFIG_VALUE;
  }
  if (v->throttle_p_min > v->throttle_p_max) {
    seterr(err, errlen, "throttle_p_min: above throttle_p_max");
    return QRS_E_CONFIG_VALUE;
  }
  if (cuts_nucleus(v->temperature_strategy) &&
      strcmp(v->stage_order, "reference") != 0) {
    seterr(err, errlen,
           "temperature_strategy: %s cuts the nucleus itself: only with "
           "stage_order reference",
           v->temperature_strategy);
    return QRS_E_CONFIG_VALUE;
  }
  if (!strcmp(v->temperature_strategy, "coherence_gate") &&
      cuts_nucleus(v->coherence_inner_strategy) &&
      strcmp(v->stage_order, "reference") != 0) {
    seterr(err, errlen,
           "coherence_inner_strategy: %s cuts the nucleus itself: only with "
           "stage_order reference",
           v->coherence_inner_strategy);
    return QRS_E_CONFIG_VALUE;
  }
  return 0;
}

int
qrs__cfgvals_text(const struct qrs__cfgvals *v, const char *field,
                  char *buf, size_t len)
{
  int k;

  k = field_index(field);
  if (k < 0)
    return QRS_E_CONFIG_FIELD;
  field_text(&fields[k], v, buf, len);
  return 0;
}

/* ---- public API ---- */

int
qrs_sampler_config_new(struct qrs_sampler_config **ret_cfg)
{
  struct qrs_sampler_config *cfg;

  if (!ret_cfg)
    return -EINVAL;
  cfg = calloc(1, sizeof(*cfg));
  if (!cfg)
    return -ENOMEM;
  *ret_cfg = cfg;
  return 0;
}

void
qrs_sampler_config_free(struct qrs_sampler_config *cfg)
{
  free(cfg);
}

int
qrs_sampler_config_copy(const struct qrs_sampler_config *cfg,
                        struct qrs_sampler_config **ret_cfg)
{
  struct qrs_sampler_config *c;

  if (!cfg || !ret_cfg)
    return -EINVAL;
  c = malloc(sizeof(*c));
  if (!c)
    return -ENOMEM;
  *c = *cfg;
  *ret_cfg = c;
  return 0;
}

static int
lookup(struct qrs_sampler_config *cfg, const char *field)
{
  int k;

  k = field_index(field);
  if (k >= 0)
    return k;
  if (is_infra(field))
    seterr(cfg->err, sizeof(cfg->err),
           "%s: an infrastructure field of qr-sampler; set it in qrsd's "
           "configuration",
           field);
  else
    seterr(cfg->err, sizeof(cfg->err), "%s: no such field", field);
  return QRS_E_CONFIG_FIELD;
}

int
qrs_sampler_config_set(struct qrs_sampler_config *cfg, const char *field,
                       const char *value)
{
  struct qrs__cfgvals tmp;
  int k, r;

  if (!cfg || !field || !value)
    return -EINVAL;
  k = lookup(cfg, field);
  if (k < 0)
    return k;
  tmp = cfg->exp_v;
  r = parse_into(&fields[k], value, &tmp, cfg->err, sizeof(cfg->err));
  if (r < 0)
    return r;
  copy_field(&fields[k], &cfg->exp_v, &tmp);
  cfg->exp_set[k] = 1;
  cfg->err[0] = 0;
  return 0;
}

int
qrs_sampler_config_set_double(struct qrs_sampler_config *cfg,
                              const char *field, double value)
{
  char buf[40];
  int k;

  if (!cfg || !field)
    return -EINVAL;
  k = lookup(cfg, field);
  if (k < 0)
    return k;
  if (fields[k].type != F_DBL) {
    if (fields[k].type == F_INT && value == floor(value) &&
        fabs(value) < 9.2e18)
      return qrs_sampler_config_set_int(cfg, field, (long long)value);
    seterr(cfg->err, sizeof(cfg->err), "%s: not a float field", field);
    return QRS_E_CONFIG_VALUE;
  }
  qrs__fmt_double(value, buf, sizeof(buf));
  return qrs_sampler_config_set(cfg, field, buf);
}

int
qrs_sampler_config_set_int(struct qrs_sampler_config *cfg, const char *field,
                           long long value)
{
  char buf[32];
  int k;

  if (!cfg || !field)
    return -EINVAL;
  k = lookup(cfg, field);
  if (k < 0)
    return k;
  if (fields[k].type == F_STR) {
    seterr(cfg->err, sizeof(cfg->err), "%s: not a numeric field", field);
    return QRS_E_CONFIG_VALUE;
  }
  if (fields[k].type == F_BOOL && value != 0 && value != 1) {
    seterr(cfg->err, sizeof(cfg->err), "%s: not a boolean: %lld", field,
           value);
    return QRS_E_CONFIG_VALUE;
  }
  snprintf(buf, sizeof(buf), "%lld", value);
  return qrs_sampler_config_set(cfg, field, buf);
}

int
qrs_sampler_config_unset(struct qrs_sampler_config *cfg, const char *field)
{
  int k;

  if (!cfg || !field)
    return -EINVAL;
  k = lookup(cfg, field);
  if (k < 0)
    return k;
  cfg->exp_set[k] = 0;
  return 0;
}

int
qrs_sampler_config_set_preset(struct qrs_sampler_config *cfg,
                              const char *name)
{
  size_t i, o;

  if (!cfg)
    return -EINVAL;
  if (!name || !*name) {
    cfg->preset[0] = 0;
    return 0;
  }
  if (preset_index(name) < 0) {
    o = (size_t)snprintf(cfg->err, sizeof(cfg->err),
                         "preset: unknown preset '%s'; known:", name);
    for (i = 0; i < NPRESETS && o < sizeof(cfg->err); i++)
      o += (size_t)snprintf(cfg->err + o, sizeof(cfg->err) - o, " %s",
                            presets[i].name);
    return QRS_E_CONFIG_FIELD;
  }
  snprintf(cfg->preset, sizeof(cfg->preset), "%s", name);
  cfg->err[0] = 0;
  return 0;
}

int
qrs_sampler_config_set_arg(struct qrs_sampler_config *cfg, const char *key,
                           const char *value)
{
  if (!cfg || !key || !value)
    return -EINVAL;
  if (strncmp(key, "qr_", 3) != 0)
    return 0;
  if (!strcmp(key, "qr_preset"))
    return qrs_sampler_config_set_preset(cfg, value);
  return qrs_sampler_config_set(cfg, key + 3, value);
}

int
qrs_sampler_config_load_env(struct qrs_sampler_config *cfg,
                            char *const *envp)
{
  struct qrs__cfgvals v;
  unsigned char set[NFIELDS];
  char name[64], preset[PRESET_MAX];
  const char *eq;
  size_t nl, i;
  int k, r, n, has_preset;

  if (!cfg)
    return -EINVAL;
  if (!envp)
    envp = environ;
  memset(&v, 0, sizeof(v));
  memset(set, 0, sizeof(set));
  has_preset = 0;
  preset[0] = 0;
  n = 0;
  for (; envp && *envp; envp++) {
    eq = strchr(*envp, '=');
    if (!eq || strncasecmp(*envp, "QR_", 3) != 0)
      continue;
    nl = (size_t)(eq - *envp) - 3;
    if (nl == 0 || nl >= sizeof(name))
      continue;
    for (i = 0; i < nl; i++) {
      char c = (*envp)[3 + i];

      name[i] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    }
    name[nl] = 0;
    if (!strcmp(name, "preset")) {
      if (eq[1] && preset_index(eq + 1) < 0) {
        seterr(cfg->err, sizeof(cfg->err),
               "QR_PRESET: unknown preset '%s'", eq + 1);
        return QRS_E_CONFIG_FIELD;
      }
      snprintf(preset, sizeof(preset), "%s", eq + 1);
      has_preset = 1;
      continue;
    }
    k = field_index(name);
    if (k < 0)
      continue;   /* unknown, or qrsd's: not ours */
    r = parse_into(&fields[k], eq + 1, &v, cfg->err, sizeof(cfg->err));
    if (r < 0) {
      /* Name the variable, not only the field. */
      char msg[sizeof(cfg->err)];

      snprintf(msg, sizeof(msg), "%s", cfg->err);
      snprintf(cfg->err, sizeof(cfg->err), "%.*s: %.180s", (int)(nl + 3),
               *envp, msg);
      return r;
    }
    if (!set[k])
      n++;
    set[k] = 1;
  }
  cfg->env_v = v;
  memcpy(cfg->env_set, set, sizeof(set));
  cfg->has_env_preset = has_preset;
  snprintf(cfg->env_preset, sizeof(cfg->env_preset), "%s", preset);
  cfg->err[0] = 0;
  return n;
}

int
qrs_sampler_config_get(const struct qrs_sampler_config *cfg,
                       const char *field, char *buf, size_t len)
{
  struct qrs__cfgvals v;
  char tmp[128];
  int k;

  if (!cfg || !field || (!buf && len))
    return -EINVAL;
  k = field_index(field);
  if (k < 0)
    return QRS_E_CONFIG_FIELD;
  qrs__config_resolve(cfg, &v);
  field_text(&fields[k], &v, tmp, sizeof(tmp));
  if (len)
    snprintf(buf, len, "%s", tmp);
  return (int)strlen(tmp);
}

int
qrs_sampler_config_get_double(const struct qrs_sampler_config *cfg,
                              const char *field, double *ret_value)
{
  struct qrs__cfgvals v;
  const char *base;
  double d;
  long long ll;
  int k, b;

  if (!cfg || !field || !ret_value)
    return -EINVAL;
  k = field_index(field);
  if (k < 0)
    return QRS_E_CONFIG_FIELD;
  qrs__config_resolve(cfg, &v);
  base = (const char *)&v + fields[k].off;
  switch (fields[k].type) {
  case F_DBL:
    memcpy(&d, base, sizeof(d));
    break;
  case F_INT:
    memcpy(&ll, base, sizeof(ll));
    d = (double)ll;
    break;
  case F_BOOL:
    memcpy(&b, base, sizeof(b));
    d = b;
    break;
  default:
    return QRS_E_CONFIG_VALUE;
  }
  *ret_value = d;
  return 0;
}

int
qrs_sampler_config_layer(const struct qrs_sampler_config *cfg,
                         const char *field)
{
  const struct preset_value *pv;
  const char *pn;
  int k, pi;

  if (!cfg || !field)
    return -EINVAL;
  k = field_index(field);
  if (k < 0)
    return QRS_E_CONFIG_FIELD;
  if (cfg->exp_set[k])
    return QRS_LAYER_EXPLICIT;
  pn = qrs__config_preset(cfg);
  pi = pn ? preset_index(pn) : -1;
  if (pi >= 0)
    for (pv = presets[pi].values; pv->field; pv++)
      if (!strcmp(pv->field, field))
        return QRS_LAYER_PRESET;
  if (cfg->env_set[k])
    return QRS_LAYER_ENV;
  return QRS_LAYER_DEFAULT;
}

const char *
qrs_sampler_config_preset(const struct qrs_sampler_config *cfg)
{
  return cfg ? qrs__config_preset(cfg) : NULL;
}

int
qrs_sampler_config_validate(struct qrs_sampler_config *cfg)
{
  struct qrs__cfgvals v;

  if (!cfg)
    return -EINVAL;
  qrs__config_resolve(cfg, &v);
  return qrs__config_check(&v, cfg->err, sizeof(cfg->err));
}

const char *
qrs_sampler_config_error(const struct qrs_sampler_config *cfg)
{
  return cfg ? cfg->err : "";
}

/* ---- the config hash ---- */

struct sbuf {
  char *p;
  size_t len, cap;
  int oom;
};

static void
sb_add(struct sbuf *b, const char *s)
{
  size_t l;
  char *np;

  l = strlen(s);
  if (b->len + l + 1 > b->cap) {
    np = realloc(b->p, (b->len + l + 1) * 2);
    if (!np) {
      b->oom = 1;
      return;
    }
    b->p = np;
    b->cap = (b->len + l + 1) * 2;
  }
  memcpy(b->p + b->len, s, l + 1);
  b->len += l;
}

/* A JSON string literal, escaped by json-c (no "\/" escapes). */
static void
sb_json_string(struct sbuf *b, const char *s)
{
  struct json_object *o;

  o = json_object_new_string(s);
  if (!o) {
    b->oom = 1;
    return;
  }
  sb_add(b, json_object_to_json_string_ext(
                o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
  json_object_put(o);
}

static void
sb_value(struct sbuf *b, const struct field *f, const struct qrs__cfgvals *v)
{
  char buf[128];
  double d;

  if (f->type == F_STR) {
    sb_json_string(b, (const char *)v + f->off);
    return;
  }
  if (f->type == F_DBL) {
    memcpy(&d, (const char *)v + f->off, sizeof(d));
    if (!isfinite(d)) {
      sb_add(b, "null");
      return;
    }
  }
  field_text(f, v, buf, sizeof(buf));
  sb_add(b, buf);
}

static void
sb_member(struct sbuf *b, const struct field *f, const struct qrs__cfgvals *v)
{
  sb_add(b, b->len > 1 ? ",\"" : "\"");
  sb_add(b, f->name);
  sb_add(b, "\":");
  sb_value(b, f, v);
}

int
qrs__config_hash(const struct qrs_sampler_config *cfg,
                 const struct qrs__cfgvals *v, char out[17])
{
  static const char hex[] = "0123456789abcdef";
  struct qrs__cfgvals def;
  struct sbuf b = { NULL, 0, 0, 0 };
  uint8_t dig[32];
  char t1[128], t2[128];
  size_t i, j;
  int k, first_ours, last_ours;

  sb_add(&b, "{");
  first_ours = field_index("zscore_calibration_samples");
  last_ours = field_index("bypass");
  for (i = 0; i < NREF; i++) {
    if (ref_order[i].json) {
      sb_add(&b, b.len > 1 ? ",\"" : "\"");
      sb_add(&b, ref_order[i].name);
      sb_add(&b, "\":");
      sb_add(&b, ref_order[i].json);
    } else if (!strcmp(ref_order[i].name, "*")) {
      for (k = first_ours; k <= last_ours; k++)
        sb_member(&b, &fields[k], v);
    } else if (!strcmp(ref_order[i].name, "preset")) {
      sb_add(&b, ",\"preset\":");
      if (cfg && cfg->has_env_preset)
        sb_json_string(&b, cfg->env_preset);
      else
        sb_add(&b, "null");
    } else {
      sb_member(&b, &fields[field_index(ref_order[i].name)], v);
    }
  }
  /* qrs extensions, only when not at their defaults. */
  defaults(&def);
  for (j = 0; j < NFIELDS; j++) {
    if (!fields[j].ext)
      continue;
    field_text(&fields[j], v, t1, sizeof(t1));
    field_text(&fields[j], &def, t2, sizeof(t2));
    if (strcmp(t1, t2) != 0)
      sb_member(&b, &fields[j], v);
  }
  sb_add(&b, "}");
  if (b.oom) {
    free(b.p);
    return -ENOMEM;
  }
  SHA256((const unsigned char *)b.p, b.len, dig);
  for (i = 0; i < 8; i++) {
    out[2 * i] = hex[dig[i] >> 4];
    out[2 * i + 1] = hex[dig[i] & 15];
  }
  out[16] = 0;
  free(b.p);
  return 0;
}

int
qrs_sampler_config_hash(const struct qrs_sampler_config *cfg, char buf[17])
{
  struct qrs__cfgvals v;

  if (!cfg || !buf)
    return -EINVAL;
  qrs__config_resolve(cfg, &v);
  return qrs__config_hash(cfg, &v, buf);
}
