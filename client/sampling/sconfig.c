/* Sampler configuration: the configuration object (sconfig_int.h lists
   the pieces).

   Four layers, the first that sets a field wins: explicit values
   (qrs_sampler_config_set*, set_arg), the preset (explicit, else
   QR_PRESET), the QR_* environment (qrs_sampler_config_load_env), the
   defaults; resolved into a struct qrs__cfgvals and checked as a whole
   by validate. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <qrs/sampler.h>

#include "sconfig_int.h"

extern char **environ;

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
  size_t i, j;
  int k, pi;

  qrs__cfg_defaults(v);
  if (!cfg)
    return;
  for (i = 0; i < QRS__NFIELDS; i++)
    if (cfg->env_set[i])
      qrs__cfg_copy_field(&qrs__cfg_fields[i], v, &cfg->env_v);
  pn = qrs__config_preset(cfg);
  pi = pn ? qrs__cfg_preset_index(pn) : -1;
  for (j = 0; pi >= 0 && j < QRS__PRESET_PARTS &&
              qrs__cfg_presets[pi].parts[j]; j++) {
    for (pv = qrs__cfg_presets[pi].parts[j]; pv->field; pv++) {
      k = qrs__cfg_field_index(pv->field);
      if (k >= 0)
        qrs__cfg_parse(&qrs__cfg_fields[k], pv->value, v, NULL, 0);
    }
  }
  for (i = 0; i < QRS__NFIELDS; i++)
    if (cfg->exp_set[i])
      qrs__cfg_copy_field(&qrs__cfg_fields[i], v, &cfg->exp_v);
}

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

/* The index of the field named field: k >= 0, -EINVAL (cfg or field
   NULL) or QRS_E_CONFIG_FIELD. */
static int
find(const struct qrs_sampler_config *cfg, const char *field)
{
  int k;

  if (!cfg || !field)
    return -EINVAL;
  k = qrs__cfg_field_index(field);
  return k >= 0 ? k : QRS_E_CONFIG_FIELD;
}

/* find(), for a setter: an unknown field's reason goes in cfg->err. */
static int
lookup(struct qrs_sampler_config *cfg, const char *field)
{
  int k;

  k = find(cfg, field);
  if (k != QRS_E_CONFIG_FIELD)
    return k;
  if (qrs__cfg_is_infra(field))
    qrs__cfg_seterr(cfg->err, sizeof(cfg->err),
                    "%s: an infrastructure field of qr-sampler; set it in "
                    "qrsd's configuration", field);
  else
    qrs__cfg_seterr(cfg->err, sizeof(cfg->err), "%s: no such field", field);
  return k;
}

/* Parse value into explicit field k; cfg->exp_v changes only on
   success. */
static int
set_field(struct qrs_sampler_config *cfg, int k, const char *value)
{
  struct qrs__cfgvals tmp;
  int r;

  tmp = cfg->exp_v;
  r = qrs__cfg_parse(&qrs__cfg_fields[k], value, &tmp, cfg->err,
                     sizeof(cfg->err));
  if (r < 0)
    return r;
  qrs__cfg_copy_field(&qrs__cfg_fields[k], &cfg->exp_v, &tmp);
  cfg->exp_set[k] = 1;
  cfg->err[0] = 0;
  return 0;
}

/* An integer into field k: an integer, float or boolean field. */
static int
set_integer(struct qrs_sampler_config *cfg, int k, long long value)
{
  const struct field *f;
  char buf[32];

  f = &qrs__cfg_fields[k];
  if (f->type == F_STR) {
    qrs__cfg_seterr(cfg->err, sizeof(cfg->err), "%s: not a numeric field",
                    f->name);
    return QRS_E_CONFIG_VALUE;
  }
  if (f->type == F_BOOL && value != 0 && value != 1) {
    qrs__cfg_seterr(cfg->err, sizeof(cfg->err), "%s: not a boolean: %lld",
                    f->name, value);
    return QRS_E_CONFIG_VALUE;
  }
  snprintf(buf, sizeof(buf), "%lld", value);
  return set_field(cfg, k, buf);
}

int
qrs_sampler_config_set(struct qrs_sampler_config *cfg, const char *field,
                       const char *value)
{
  int k;

  if (!value)
    return -EINVAL;
  k = lookup(cfg, field);
  if (k < 0)
    return k;
  return set_field(cfg, k, value);
}

int
qrs_sampler_config_set_double(struct qrs_sampler_config *cfg,
                              const char *field, double value)
{
  char buf[40];
  int k;

  k = lookup(cfg, field);
  if (k < 0)
    return k;
  if (qrs__cfg_fields[k].type != F_DBL) {
    if (qrs__cfg_fields[k].type == F_INT && value == floor(value) &&
        fabs(value) < 9.2e18)
      return set_integer(cfg, k, (long long)value);
    qrs__cfg_seterr(cfg->err, sizeof(cfg->err), "%s: not a float field", field);
    return QRS_E_CONFIG_VALUE;
  }
  qrs__fmt_double(value, buf, sizeof(buf));
  return set_field(cfg, k, buf);
}

int
qrs_sampler_config_set_int(struct qrs_sampler_config *cfg, const char *field,
                           long long value)
{
  int k;

  k = lookup(cfg, field);
  if (k < 0)
    return k;
  return set_integer(cfg, k, value);
}

int
qrs_sampler_config_unset(struct qrs_sampler_config *cfg, const char *field)
{
  int k;

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
  if (qrs__cfg_preset_index(name) < 0) {
    o = (size_t)snprintf(cfg->err, sizeof(cfg->err),
                         "preset: unknown preset '%s'; known:", name);
    for (i = 0; i < QRS__NPRESETS && o < sizeof(cfg->err); i++)
      o += (size_t)snprintf(cfg->err + o, sizeof(cfg->err) - o, " %s",
                            qrs__cfg_presets[i].name);
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
  unsigned char set[QRS__NFIELDS];
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
      if (eq[1] && qrs__cfg_preset_index(eq + 1) < 0) {
        qrs__cfg_seterr(cfg->err, sizeof(cfg->err),
                        "QR_PRESET: unknown preset '%s'", eq + 1);
        return QRS_E_CONFIG_FIELD;
      }
      snprintf(preset, sizeof(preset), "%s", eq + 1);
      has_preset = 1;
      continue;
    }
    k = qrs__cfg_field_index(name);
    if (k < 0)
      continue;   /* unknown, or qrsd's: not ours */
    r = qrs__cfg_parse(&qrs__cfg_fields[k], eq + 1, &v, cfg->err,
                       sizeof(cfg->err));
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

  if (!buf && len)
    return -EINVAL;
  k = find(cfg, field);
  if (k < 0)
    return k;
  qrs__config_resolve(cfg, &v);
  qrs__cfg_field_text(&qrs__cfg_fields[k], &v, tmp, sizeof(tmp));
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

  if (!ret_value)
    return -EINVAL;
  k = find(cfg, field);
  if (k < 0)
    return k;
  qrs__config_resolve(cfg, &v);
  base = (const char *)&v + qrs__cfg_fields[k].off;
  switch (qrs__cfg_fields[k].type) {
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
  const char *pn;
  int k, pi;

  k = find(cfg, field);
  if (k < 0)
    return k;
  if (cfg->exp_set[k])
    return QRS_LAYER_EXPLICIT;
  pn = qrs__config_preset(cfg);
  pi = pn ? qrs__cfg_preset_index(pn) : -1;
  if (pi >= 0 && qrs__cfg_preset_value(pi, field))
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

