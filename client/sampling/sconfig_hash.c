/* Sampler configuration: the reference-compatible config hash
   (sconfig_int.h lists the pieces): SHA-256 of the configuration as the
   reference's JSON, first 8 bytes in hex: its field order, its
   infrastructure defaults, our extensions only when not at their
   defaults. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#include <openssl/sha.h>

#include <qrs/sampler.h>

#include "sconfig_int.h"

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
  qrs__cfg_field_text(f, v, buf, sizeof(buf));
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
  first_ours = qrs__cfg_field_index("zscore_calibration_samples");
  last_ours = qrs__cfg_field_index("bypass");
  for (i = 0; i < qrs__cfg_nref; i++) {
    if (qrs__cfg_ref_order[i].json) {
      sb_add(&b, b.len > 1 ? ",\"" : "\"");
      sb_add(&b, qrs__cfg_ref_order[i].name);
      sb_add(&b, "\":");
      sb_add(&b, qrs__cfg_ref_order[i].json);
    } else if (!strcmp(qrs__cfg_ref_order[i].name, "*")) {
      for (k = first_ours; k <= last_ours; k++)
        sb_member(&b, &qrs__cfg_fields[k], v);
    } else if (!strcmp(qrs__cfg_ref_order[i].name, "preset")) {
      sb_add(&b, ",\"preset\":");
      if (cfg && cfg->has_env_preset)
        sb_json_string(&b, cfg->env_preset);
      else
        sb_add(&b, "null");
    } else {
      k = qrs__cfg_field_index(qrs__cfg_ref_order[i].name);
      sb_member(&b, &qrs__cfg_fields[k], v);
    }
  }
  /* qrs extensions, only when not at their defaults (study_unit never:
     it names a study's unit, not how tokens are sampled). */
  qrs__cfg_defaults(&def);
  for (j = 0; j < QRS__NFIELDS; j++) {
    if (qrs__cfg_fields[j].ext != 1)
      continue;
    qrs__cfg_field_text(&qrs__cfg_fields[j], v, t1, sizeof(t1));
    qrs__cfg_field_text(&qrs__cfg_fields[j], &def, t2, sizeof(t2));
    if (strcmp(t1, t2) != 0)
      sb_member(&b, &qrs__cfg_fields[j], v);
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

