/* Sampler configuration: the data (sconfig_int.h lists the pieces).

   The field table (name, type, default, range, choices), the reference's
   field order with its infrastructure fields' defaults (the hash's
   input; a field there with a default is an infrastructure field), and
   the seven built-in presets, with the look-ups in them. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qrs/sampler.h>

#include "sconfig_int.h"

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

const struct field qrs__cfg_fields[] = {
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
  { "study_unit", F_STR, OFF(study_unit),
    sizeof(((struct qrs__cfgvals *)0)->study_unit), "", NAN, NAN, 0, 0, NULL,
    2 },
};

_Static_assert(sizeof(qrs__cfg_fields) / sizeof(qrs__cfg_fields[0]) ==
               QRS__NFIELDS, "QRS__NFIELDS: the table's length");

/* The reference's infrastructure fields (configure qrsd instead), with
   their default JSON text, in the reference's field order; NULL marks a
   field of ours (taken from the table above) and "preset". */
const struct ref_field qrs__cfg_ref_order[] = {
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

const size_t qrs__cfg_nref =
    sizeof(qrs__cfg_ref_order) / sizeof(qrs__cfg_ref_order[0]);

/* The seven built-in presets (reference config/presets.py). */

static const struct preset_value p_creative[] = {
  { "temperature_strategy", "hvh_drift" }, { "hvh_t_base", "1.35" },
  { "hvh_alpha_h", "0.3" }, { "hvh_alpha_vh", "-0.2" },
  { "hvh_gamma_dh", "1.0" }, { "hvh_delta_dvh", "0.5" },
  { "hvh_lambda_ema", "0.02" }, { "hvh_min_p_base", "0.025" },
  { "hvh_kappa_h", "0.03" }, { "hvh_nu_dh", "0.02" }, { "top_k", "0" },
  { "top_p", "1.0" }, { NULL, NULL },
};
static const struct preset_value p_fixed_t1[] = {
  { "temperature_strategy", "fixed" }, { "fixed_temperature", "1.0" },
  { NULL, NULL },
};
static const struct preset_value p_no_cut[] = {
  { "top_k", "0" }, { "top_p", "1.0" }, { NULL, NULL },
};
static const struct preset_value p_chat_light[] = {
  { "entropy_source_type", "quantum_grpc" },
  { "signal_amplifier_type", "zscore_mean" }, { NULL, NULL },
};
/* The qthought family: the server's amplifier on 100 KiB blocks of a
   quantum source, and the coherence gate. */
static const struct preset_value p_qserver[] = {
  { "entropy_source_type", "quantum_grpc" },
  { "signal_amplifier_type", "server" }, { "draw_block_bytes", "102400" },
  { NULL, NULL },
};
static const struct preset_value p_qthought[] = {
  { "sample_count", "10000" }, { "zscore_calibration_samples", "200" },
  { NULL, NULL },
};
static const struct preset_value p_gate[] = {
  { "temperature_strategy", "coherence_gate" },
  { "coherence_threshold", "3.5" }, { "coherence_t_boost_max", "0.5" },
  { "coherence_ema_alpha", "0.3" }, { NULL, NULL },
};
static const struct preset_value p_gate_edt[] = {
  { "coherence_inner_strategy", "edt" }, { "edt_base_temp", "0.8" },
  { NULL, NULL },
};
static const struct preset_value p_think[] = {
  { "top_k", "50" }, { "top_p", "0.9" }, { "sample_count", "6000" },
  { "zscore_calibration_samples", "200" }, { NULL, NULL },
};
static const struct preset_value p_purity[] = {
  { "coherence_inner_strategy", "fixed" }, { "fixed_temperature", "1.0" },
  { "top_k", "0" }, { "top_p", "1.0" }, { NULL, NULL },
};

const struct preset qrs__cfg_presets[] = {
  { "creative_sampling", { p_creative } },
  { "normal_t1", { p_fixed_t1, p_no_cut } },
  { "chat_light", { p_chat_light, p_fixed_t1, p_no_cut } },
  { "qthought", { p_qserver, p_qthought } },
  { "qthought_think", { p_gate, p_gate_edt, p_qserver, p_think } },
  { "qthought_voice",
    { p_gate, p_gate_edt, p_qserver, p_qthought, p_no_cut } },
  { "qthought_purity", { p_qserver, p_gate, p_purity } },
};
_Static_assert(sizeof(qrs__cfg_presets) / sizeof(qrs__cfg_presets[0]) ==
               QRS__NPRESETS, "QRS__NPRESETS: the presets' count");

int
qrs__name_index(const char *const *names, size_t count, size_t stride,
                const char *name)
{
  size_t i;

  for (i = 0; i < count; i++)
    if (!strcmp(*(const char *const *)((const char *)names + i * stride),
                name))
      return (int)i;
  return -1;
}

int
qrs__cfg_field_index(const char *name)
{
  if (!name)
    return -1;
  return qrs__name_index(&qrs__cfg_fields[0].name, QRS__NFIELDS,
                         sizeof(qrs__cfg_fields[0]), name);
}

int
qrs__cfg_is_infra(const char *name)
{
  size_t i;

  for (i = 0; i < qrs__cfg_nref; i++)
    if (qrs__cfg_ref_order[i].json &&
        !strcmp(qrs__cfg_ref_order[i].name, name))
      return 1;
  return 0;
}

int
qrs__cfg_preset_index(const char *name)
{
  return qrs__name_index(&qrs__cfg_presets[0].name, QRS__NPRESETS,
                         sizeof(qrs__cfg_presets[0]), name);
}

const char *
qrs_sampler_field_name(size_t i)
{
  return i < QRS__NFIELDS ? qrs__cfg_fields[i].name : NULL;
}

const char *
qrs_sampler_preset_name(size_t i)
{
  return i < QRS__NPRESETS ? qrs__cfg_presets[i].name : NULL;
}

const char *
qrs__cfg_preset_value(int pi, const char *field)
{
  const struct preset_value *pv;
  size_t j;

  for (j = 0; j < QRS__PRESET_PARTS && qrs__cfg_presets[pi].parts[j]; j++)
    for (pv = qrs__cfg_presets[pi].parts[j]; pv->field; pv++)
      if (!strcmp(pv->field, field))
        return pv->value;
  return NULL;
}
