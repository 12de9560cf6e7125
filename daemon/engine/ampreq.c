/* Per-draw amplifier parameters (ampreq.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qrs/error.h>

#include "amp_exact.h"
#include "engine/ampreq.h"

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

void
amp_state_init(struct amp_state *st)
{
  memset(st, 0, sizeof(*st));
}

void
amp_state_free(struct amp_state *st)
{
  int i;

  for (i = 0; i < AMP_ECDF_CACHE; i++)
    amp_ecdf_free(&st->ecdf[i].e);
}

static int
ecdf_slot(struct amp_state *st, uint32_t sample_count, uint32_t blocks)
{
  int i;

  for (i = 0; i < AMP_ECDF_CACHE; i++)
    if (st->ecdf[i].e.means && st->ecdf[i].sample_count == sample_count &&
        st->ecdf[i].blocks == blocks)
      return i;
  return -1;
}

uint32_t
amp_state_missing(struct amp_state *st, const struct amp_req *a)
{
  double m, s;

  switch (a->type) {
  case AMP_ZSCORE_MEAN:
  case AMP_ZSCORE_THOUGHT:
    if (!a->zcal || amp_calib_lookup(&st->z, a->sample_count, a->zcal, &m, &s))
      return 0;
    return a->zcal;
  case AMP_ECDF:
    return ecdf_slot(st, a->sample_count, a->ecal) < 0 ? a->ecal : 0;
  default:
    return 0;
  }
}

int
amp_state_calibrate(struct amp_state *st, const struct amp_req *a,
                    const uint8_t *buf, uint32_t blocks, char *msg,
                    size_t len)
{
  struct amp_calibration c;
  double *means;
  uint32_t i;
  int r;

  means = malloc((blocks ? blocks : 1) * sizeof(*means));
  if (!means)
    return -ENOMEM;
  for (i = 0; i < blocks; i++)
    means[i] = (double)amp_byte_sum(buf + (size_t)i * a->sample_count,
                                    a->sample_count) / (double)a->sample_count;
  r = amp_calibration_compute(a, means, blocks, &c, msg, len);
  free(means);
  if (r == 0)
    amp_calibration_store(st, a, &c);
  return r;
}

int
amp_calibration_compute(const struct amp_req *a, const double *means,
                        uint32_t blocks, struct amp_calibration *c,
                        char *msg, size_t len)
{
  int r;

  memset(c, 0, sizeof(*c));
  c->blocks = blocks;
  if (a->type == AMP_ECDF)
    r = amp_ecdf_calibrate(&c->ecdf, means, blocks);
  else
    r = amp_zscore_calibrate(means, blocks, a->sample_count, &c->mean,
                             &c->std);
  if (r == AMP_E_ZERO_VARIANCE) {
    snprintf(msg, len, "%s", amp_strerror(a->type, r));
    return QRS_E_CALIBRATION;
  }
  if (r < 0)
    snprintf(msg, len, "%s", amp_strerror(a->type, r));
  return r;
}

void
amp_calibration_store(struct amp_state *st, const struct amp_req *a,
                      struct amp_calibration *c)
{
  int i, slot;

  if (a->type != AMP_ECDF) {
    amp_calib_store(&st->z, a->sample_count, c->blocks, c->mean, c->std);
    return;
  }
  slot = ecdf_slot(st, a->sample_count, c->blocks);
  if (slot < 0) {
    slot = 0;
    for (i = 0; i < AMP_ECDF_CACHE; i++) {
      if (!st->ecdf[i].e.means) {
        slot = i;
        break;
      }
      if (st->ecdf[i].used < st->ecdf[slot].used)
        slot = i;
    }
  }
  amp_ecdf_free(&st->ecdf[slot].e);
  st->ecdf[slot].e = c->ecdf;
  st->ecdf[slot].sample_count = a->sample_count;
  st->ecdf[slot].blocks = c->blocks;
  st->ecdf[slot].used = ++st->clock;
  c->ecdf.means = NULL;
  c->ecdf.n = 0;
}

void
amp_calibration_free(struct amp_calibration *c)
{
  amp_ecdf_free(&c->ecdf);
}

int
amp_state_run(struct amp_state *st, const struct amp_req *a,
              const struct amp_exact_table *t, const uint8_t *buf,
              struct amp_result *ret, struct amp_params *ret_p)
{
  struct amp_params p;
  int slot;

  p = a->p;
  switch (a->type) {
  case AMP_ZSCORE_MEAN:
  case AMP_ZSCORE_THOUGHT:
    if (a->zcal && !amp_calib_lookup(&st->z, a->sample_count, a->zcal,
                                     &p.population_mean, &p.population_std))
      return QRS_E_CALIBRATION;
    *ret_p = p;
    return amp_zscore_mean(&p, buf, a->sample_count, ret);
  case AMP_ECDF:
    slot = ecdf_slot(st, a->sample_count, a->ecal);
    if (slot < 0)
      return QRS_E_CALIBRATION;
    st->ecdf[slot].used = ++st->clock;
    *ret_p = p;
    return amp_ecdf(&st->ecdf[slot].e, &p, buf, a->sample_count, ret);
  case AMP_EXACT:
    if (!t || t->n != a->sample_count)
      return -EINVAL;
    *ret_p = p;
    return amp_exact(t, &p, buf, a->sample_count, ret);
  default:
    return -EINVAL;
  }
}
