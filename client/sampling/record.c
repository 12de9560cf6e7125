/* Per-token records as JSON lines (json-c builds and escapes them). */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include <qrs/sampler.h>

#include "sampling.h"

/* A double with its shortest round-trip text; NaN / inf as null. */
static struct json_object *
jdouble(double d)
{
  char buf[40];

  if (!isfinite(d))
    return NULL;
  qrs__fmt_double(d, buf, sizeof(buf));
  return json_object_new_double_s(d, buf);
}

/* A time in ns; 0 (not known) as null. */
static struct json_object *
jns(int64_t ns)
{
  return ns ? json_object_new_int64(ns) : NULL;
}

static struct json_object *
jtri(int v)
{
  return v < 0 ? NULL : json_object_new_boolean(v != 0);
}

static int
add(struct json_object *o, const char *key, struct json_object *v, int null_ok)
{
  /* A NULL value is JSON null; a failed allocation is not. */
  if (!v && !null_ok)
    return -ENOMEM;
  return json_object_object_add(o, key, v) < 0 ? -ENOMEM : 0;
}

/* Add key: v, or jump to out with r set; ADDN: v may be NULL (null). */
#define ADD_OR_OUT(key, v, null_ok) \
  do { \
    r = add(o, key, v, null_ok); \
    if (r < 0) \
      goto out; \
  } while (0)
#define ADD(key, v) ADD_OR_OUT(key, v, 0)
#define ADDN(key, v) ADD_OR_OUT(key, v, 1)

static int
summary(struct json_object *o, const struct qrs_token_record *rec)
{
  int r;

  ADD("token", json_object_new_int64(rec->token_id));
  ADD("rank", json_object_new_int64(rec->token_rank));
  ADDN("prob", jdouble(rec->token_prob));
  ADDN("u", jdouble(rec->u_value));
  ADDN("temp", jdouble(rec->temperature_used));
  ADDN("entropy", jdouble(rec->shannon_entropy));
  ADD("source", json_object_new_string(rec->entropy_source_used));
  ADD("fallback", json_object_new_boolean(rec->entropy_is_fallback));
  ADDN("fetch_ms", jdouble(rec->entropy_fetch_ms));
  ADDN("total_ms", jdouble(rec->total_sampling_ms));
out:
  return r;
}

static int
full(struct json_object *o, const struct qrs_token_record *rec)
{
  char nonce[17];
  int r;
  int m;

  m = rec->has_draw_meta;
  ADD("timestamp_ns", json_object_new_int64(rec->timestamp_ns));
  ADDN("entropy_fetch_ms", jdouble(rec->entropy_fetch_ms));
  ADDN("total_sampling_ms", jdouble(rec->total_sampling_ms));
  ADD("entropy_source_used", json_object_new_string(rec->entropy_source_used));
  ADD("entropy_is_fallback", json_object_new_boolean(rec->entropy_is_fallback));
  ADDN("sample_mean", jdouble(rec->sample_mean));
  ADDN("z_score", jdouble(rec->z_score));
  ADDN("u_value", jdouble(rec->u_value));
  ADD("temperature_strategy",
      json_object_new_string(rec->temperature_strategy));
  ADDN("shannon_entropy", jdouble(rec->shannon_entropy));
  ADDN("temperature_used", jdouble(rec->temperature_used));
  ADD("token_id", json_object_new_int64(rec->token_id));
  ADD("token_rank", json_object_new_int64(rec->token_rank));
  ADDN("token_prob", jdouble(rec->token_prob));
  ADD("num_candidates", json_object_new_int64(rec->num_candidates));
  ADD("config_hash", json_object_new_string(rec->config_hash));
  ADDN("varentropy", jdouble(rec->varentropy));
  ADDN("min_p_used", jdouble(rec->min_p_used));
  ADDN("preset_active",
       rec->has_preset ? json_object_new_string(rec->preset_active) : NULL);
  ADDN("h_ema", jdouble(rec->h_ema));
  ADDN("vh_ema", jdouble(rec->vh_ema));
  ADDN("entropy_prefetch_hit", jtri(rec->entropy_prefetch_hit));
  snprintf(nonce, sizeof(nonce), "%016" PRIx64, rec->entropy_nonce);
  ADDN("entropy_nonce",
       rec->entropy_nonce ? json_object_new_string(nonce) : NULL);
  ADDN("entropy_echo_verified", jtri(rec->entropy_echo_verified));
  ADDN("entropy_server_timestamp_ns",
       rec->has_server_timestamp
           ? json_object_new_int64(rec->entropy_server_timestamp_ns)
           : NULL);
  ADDN("temperature_ms", jdouble(rec->temperature_ms));
  ADDN("amplify_ms", jdouble(rec->amplify_ms));
  ADDN("select_ms", jdouble(rec->select_ms));
  ADDN("draw_z", m ? jdouble(rec->draw_z) : NULL);
  ADDN("draw_coherence_z", m ? jdouble(rec->draw_coherence_z) : NULL);
  ADDN("draw_coherence_valid",
       m ? json_object_new_boolean(rec->draw_coherence_valid) : NULL);
  ADDN("draw_coherence_r", m ? jdouble(rec->draw_coherence_r) : NULL);
  ADDN("purity_label", m ? json_object_new_string(rec->purity_label) : NULL);
  ADDN("integrated_bytes",
       m ? json_object_new_int64(rec->integrated_bytes) : NULL);
  ADDN("integrator", m ? json_object_new_string(rec->integrator) : NULL);
  ADDN("draw_source_id",
       m ? json_object_new_string(rec->draw_source_id) : NULL);
  ADDN("gate_open", jtri(rec->gate_open));
  ADDN("gate_boost", jdouble(rec->gate_boost));
  ADD("step", json_object_new_int64((int64_t)rec->step));
  ADDN("cdf_lo", jdouble(rec->cdf_lo));
  ADDN("cdf_hi", jdouble(rec->cdf_hi));
  ADDN("top_p_used", jdouble(rec->top_p_used));
  ADDN("kept_entropy_bits", jdouble(rec->kept_entropy_bits));
  ADDN("mirostat_mu", jdouble(rec->mirostat_mu));
  ADD("greedy", json_object_new_boolean(rec->greedy));
  ADD("entropy_source_type",
      json_object_new_string(rec->entropy_source_type));
  ADD("entropy_production",
      json_object_new_boolean(rec->entropy_production));
  ADDN("journal_seq", rec->journal_seq
                          ? json_object_new_uint64(rec->journal_seq)
                          : NULL);
  ADD("entropy_unjournalled",
      json_object_new_boolean(rec->entropy_unjournalled));
  ADDN("draw_received_ns", jns(rec->draw_received_ns));
  ADDN("draw_generated_ns", jns(rec->draw_generated_ns));
  ADDN("draw_sent_ns", jns(rec->draw_sent_ns));
  ADDN("device_selection",
       rec->device_selection == QRS_DEVICE_SELECTION_CERTIFIED
           ? json_object_new_string("certified")
       : rec->device_selection == QRS_DEVICE_SELECTION_UNCERTIFIED
           ? json_object_new_string("uncertified")
           : NULL);
out:
  return r;
}

int
qrs__record_write(const struct qrs_token_record *rec, int level, FILE *f)
{
  struct json_object *o;
  const char *s;
  size_t len;
  int r;

  o = json_object_new_object();
  if (!o)
    return -ENOMEM;
  r = level >= 2 ? full(o, rec) : summary(o, rec);
  if (r < 0)
    goto out;
  s = json_object_to_json_string_length(
      o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
  if (!s) {
    r = -ENOMEM;
    goto out;
  }
  /* One stdio operation per line: threads sharing f never interleave
     their lines (each stdio call takes f's lock on its own). */
  flockfile(f);
  if (fwrite_unlocked(s, 1, len, f) != len || putc_unlocked('\n', f) == EOF)
    r = -EIO;
  funlockfile(f);
out:
  json_object_put(o);
  return r;
}

int
qrs_token_record_write(const struct qrs_token_record *rec, int level,
                       FILE *f)
{
  if (!rec || !f || level < 1 || level > 2)
    return -EINVAL;
  return qrs__record_write(rec, level, f);
}
