/* Per-draw amplifier parameters (ampreq.h). */
#include <math.h>
#include <stdio.h>

#include <qrs/error.h>

#include "amp_exact.h"
#include "ampreq.h"

int
ampreq_resolve(const struct qrsd_conf *conf, const QrsIpc__Draw *m,
               uint32_t sample_count, struct amp_req *ret, char *msg,
               size_t len)
{
  const char *name;
  uint32_t blocks;
  double v;
  int t;

  name = m->amplifier && *m->amplifier ? m->amplifier : conf->amp_type;
  t = amp_find(name);
  if (t < 0) {
    snprintf(msg, len, "no amplifier named '%.64s' (known: %s)", name,
             amp_known_names());
    return QRS_E_UNKNOWN_AMPLIFIER;
  }
  ret->type = (enum amp_type)t;
  ret->sample_count = sample_count;
  ret->p.population_mean = conf->amp_population_mean;
  ret->p.population_std = conf->amp_population_std;
  ret->p.epsilon = conf->amp_epsilon;
  ret->zcal = conf->amp_zscore_calibration_samples;
  ret->ecal = conf->amp_ecdf_calibration_samples;

  if (m->population_mean) {
    v = m->population_mean->value;
    if (!isfinite(v) || v < 0.0 || v > 255.0) {
      snprintf(msg, len, "population_mean %g is outside 0..255", v);
      return QRS_E_AMP_PARAMS;
    }
    ret->p.population_mean = v;
  }
  if (m->population_std) {
    v = m->population_std->value;
    if (!isfinite(v) || v <= 0.0 || v > 127.5) {
      snprintf(msg, len, "population_std %g is outside (0, 127.5]", v);
      return QRS_E_AMP_PARAMS;
    }
    ret->p.population_std = v;
  }
  if (m->uniform_clamp_epsilon) {
    v = m->uniform_clamp_epsilon->value;
    if (!(v >= 0.0 && v < 0.5)) {
      snprintf(msg, len, "uniform_clamp_epsilon %g is outside [0, 0.5)", v);
      return QRS_E_AMP_PARAMS;
    }
    ret->p.epsilon = v;
  }
  if (m->zscore_calibration_samples)
    ret->zcal = m->zscore_calibration_samples->value;
  if (m->ecdf_calibration_samples) {
    ret->ecal = m->ecdf_calibration_samples->value;
    if (ret->ecal < 2) {
      snprintf(msg, len, "ecdf_calibration_samples %u is below 2",
               ret->ecal);
      return QRS_E_AMP_PARAMS;
    }
  }
  blocks = ampreq_calibration_blocks(ret);
  if (blocks > conf->max_calibration_samples) {
    snprintf(msg, len, "%s calibration of %u blocks is above "
             "limits.max_calibration_samples (%u)", amp_name(ret->type),
             blocks, conf->max_calibration_samples);
    return QRS_E_AMP_PARAMS;
  }
  if ((uint64_t)blocks * sample_count > conf->max_calibration_bytes) {
    snprintf(msg, len, "%s calibration of %u blocks of %u bytes is above "
             "limits.max_calibration_bytes (%llu)", amp_name(ret->type),
             blocks, sample_count,
             (unsigned long long)conf->max_calibration_bytes);
    return QRS_E_AMP_PARAMS;
  }
  if (ret->type == AMP_EXACT &&
      amp_exact_table_bytes(sample_count) > conf->exact_cache_bytes) {
    snprintf(msg, len, "the exact amplifier's table for sample_count %u "
             "needs %zu bytes, above limits.exact_cache_bytes (%llu)",
             sample_count, amp_exact_table_bytes(sample_count),
             (unsigned long long)conf->exact_cache_bytes);
    return QRS_E_AMP_PARAMS;
  }
  return 0;
}

size_t
ampreq_read_bytes(const struct amp_req *a)
{
  return a->sample_count + (a->type == AMP_EXACT ? AMP_EXACT_EXTRA : 0);
}

uint32_t
ampreq_calibration_blocks(const struct amp_req *a)
{
  switch (a->type) {
  case AMP_ZSCORE_MEAN:
  case AMP_ZSCORE_THOUGHT:
    return a->zcal;
  case AMP_ECDF:
    return a->ecal;
  default:
    return 0;
  }
}
