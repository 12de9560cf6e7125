/* Studies: assignment, labels, the study record and the counts by label
   (engine/study.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#include <openssl/crypto.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>

#include <qrs/error.h>

#include "base/log.h"
#include "jsonfield.h"
#include "engine/registry.h"
#include "engine/study.h"
#include "persist/journal.h"

struct study {
  char name[CONF_MAX_STUDY_NAME + 1];
  unsigned k;                               /* arms */
  char *arms[CONF_STUDY_MAX_ARMS];          /* source names, config order */
  char label[CONF_STUDY_MAX_ARMS];          /* of arm i */
  int unit_draw;                            /* unit: draw */
  struct conf_study plan;                   /* its scalars (no strings) */
  char unit[16], statistic[32];
  uint8_t seed[PRNG_SEED_LEN];
  EVP_MAC_CTX *hmac;                        /* keyed with seed once */
  uint8_t epoch[PRNG_EPOCH_LEN];
  char epoch_hex[2 * PRNG_EPOCH_LEN + 1];
  uint64_t ctr;
  int production;
  /* counts (by label index: 'A' + i) */
  uint64_t draws[CONF_STUDY_MAX_ARMS], units[CONF_STUDY_MAX_ARMS];
  uint64_t units_seen;
  int units_capped;                         /* STUDY_UNITS_TRACKED reached */
  uint64_t *seen;                           /* open addressing; 0: empty */
  size_t seen_cap, seen_n;
  unsigned refs;                            /* draws in flight */
  int retired;                              /* a reload removed it */
};

struct studies {
  struct study **v;
  size_t n;
};

static void
study_free(struct study *t)
{
  unsigned i;

  if (!t)
    return;
  for (i = 0; i < t->k; i++)
    free(t->arms[i]);
  free(t->seen);
  EVP_MAC_CTX_free(t->hmac);
  OPENSSL_cleanse(t->seed, sizeof(t->seed));
  free(t);
}

/* t->hmac: HMAC-SHA256 keyed with t->seed, set up once (a draw only
   resets it).  0 or -EIO. */
static int
hmac_key(struct study *t)
{
  OSSL_PARAM params[] = {
    OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
                                     (char *)"SHA256", 0),
    OSSL_PARAM_construct_end(),
  };
  EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);

  t->hmac = mac ? EVP_MAC_CTX_new(mac) : NULL;
  EVP_MAC_free(mac);            /* the context holds its own reference */
  if (!t->hmac || !EVP_MAC_init(t->hmac, t->seed, PRNG_SEED_LEN, params))
    return -EIO;
  return 0;
}

/* HMAC-SHA256(seed, domain "\0" name "\0" tail) into out. */
static int
study_hmac(const struct study *t, const char *domain, const char *tail,
           uint8_t out[32])
{
  uint8_t msg[16 + 1 + CONF_MAX_STUDY_NAME + 1 + STUDY_TAG_MAX + 1];
  size_t dl = strlen(domain), nl = strlen(t->name), tl = strlen(tail), n;
  size_t outl = 0;

  if (dl + nl + tl + 2 > sizeof(msg))
    return -EINVAL;
  memcpy(msg, domain, dl + 1);
  memcpy(msg + dl + 1, t->name, nl + 1);
  memcpy(msg + dl + nl + 2, tail, tl);
  n = dl + nl + 2 + tl;
  /* init with no key: the same key again, the state reset */
  return EVP_MAC_init(t->hmac, NULL, 0, NULL) &&
         EVP_MAC_update(t->hmac, msg, n) &&
         EVP_MAC_final(t->hmac, out, &outl, 32) && outl == 32 ? 0 : -EIO;
}

/* The labels: arms sorted by their label key. */
static int
draw_labels(struct study *t)
{
  uint8_t key[CONF_STUDY_MAX_ARMS][32];
  unsigned order[CONF_STUDY_MAX_ARMS], i, j, x;
  char dec[16];

  for (i = 0; i < t->k; i++) {
    snprintf(dec, sizeof(dec), "%u", i);
    if (study_hmac(t, "qrs-study-label", dec, key[i]) < 0)
      return -EIO;
    order[i] = i;
  }
  for (i = 1; i < t->k; i++)
    for (j = i; j > 0 && memcmp(key[order[j - 1]], key[order[j]], 32) > 0;
         j--) {
      x = order[j];
      order[j] = order[j - 1];
      order[j - 1] = x;
    }
  for (i = 0; i < t->k; i++)
    t->label[order[i]] = (char)('A' + i);
  return 0;
}

/* The study record's text fields (journal_submit_record()). */
static int
record_fields(const struct study *t, struct registry *reg, char *buf,
              size_t len)
{
  char assign[PRNG_HEX_LEN + 1], com[PRNG_HEX_LEN + 1];
  const char *type;
  int production, n;
  size_t at;
  unsigned i;

  prng_commitment(t->seed, assign);
  n = snprintf(buf, len, JOURNAL_STUDY_TAG "\t%s\t%s\t%s\t%" PRIu64 "\t%s\t"
               "%.17g\t%.17g\t%s\t", t->name, t->epoch_hex, t->unit,
               t->plan.planned_units, t->statistic, t->plan.alpha,
               t->plan.effect, assign);
  if (n < 0 || (size_t)n >= len)
    return -ENAMETOOLONG;
  at = (size_t)n;
  for (i = 0; i < t->k; i++) {
    if (registry_type(reg, t->arms[i], &type, &production) < 0)
      return -ENOENT;
    if (registry_commitment(reg, t->arms[i], com) < 0)
      strcpy(com, "-");
    n = snprintf(buf + at, len - at, "%s%s:%s:%s", i ? "," : "",
                 t->arms[i], type, com);
    if (n < 0 || (size_t)n >= len - at)
      return -ENAMETOOLONG;
    at += (size_t)n;
  }
  if (at + 2 > len)
    return -ENAMETOOLONG;
  buf[at++] = '\t';
  buf[at] = '\0';
  return 0;
}

/* Start the study cs: seed, epoch, labels, record.  0 and *ret, or a
   negative errno with err set. */
static int
study_start(const struct conf_study *cs, struct registry *reg,
            struct journal *j, struct study **ret, char *err, size_t errlen)
{
  char fields[JOURNAL_RECORD_MAX + 1], msg[512];
  const char *type;
  struct study *t;
  int production, r;
  unsigned i;

  snprintf(err, errlen, "study '%s': out of memory", cs->name);
  t = calloc(1, sizeof(*t));
  if (!t)
    return -ENOMEM;
  snprintf(t->name, sizeof(t->name), "%s", cs->name);
  t->plan.planned_units = cs->planned_units;
  t->plan.alpha = cs->alpha;
  t->plan.effect = cs->effect;
  snprintf(t->unit, sizeof(t->unit), "%s", cs->unit);
  snprintf(t->statistic, sizeof(t->statistic), "%s", cs->statistic);
  t->unit_draw = !strcmp(cs->unit, "draw");
  t->production = 1;
  r = 0;
  for (i = 0; i < cs->n_arms && r == 0; i++) {
    t->arms[i] = strdup(cs->arms[i]);
    t->k = i + 1;
    if (!t->arms[i]) {
      r = -ENOMEM;
    } else if (registry_type(reg, cs->arms[i], &type, &production) < 0) {
      snprintf(err, errlen, "study '%s': arm '%s' is not a source qrsd "
               "serves", cs->name, cs->arms[i]);
      r = -ENOENT;
    } else {
      t->production &= production;
    }
  }
  if (r == 0) {
    r = prng_seed_load(cs->assignment_seed_file, t->seed, msg, sizeof(msg));
    if (r < 0)
      snprintf(err, errlen, "study '%s': assignment_seed_file: %s",
               cs->name, msg);
  }
  if (r == 0 && prng_epoch_new(t->epoch) < 0) {
    snprintf(err, errlen, "study '%s': no random epoch (getrandom)",
             cs->name);
    r = -EIO;
  }
  if (r == 0) {
    journal_hex(t->epoch, PRNG_EPOCH_LEN, t->epoch_hex);
    r = hmac_key(t);
    if (r == 0)
      r = draw_labels(t);
    if (r < 0)
      snprintf(err, errlen, "study '%s': HMAC-SHA256 failed", cs->name);
  }
  if (r == 0) {
    r = record_fields(t, reg, fields, sizeof(fields));
    if (r < 0)
      snprintf(err, errlen, "study '%s': its record does not fit a "
               "journal line", cs->name);
  }
  if (r == 0) {
    r = journal_submit_record(j, fields);
    if (r < 0)
      snprintf(err, errlen, "study '%s': the journal cannot take its "
               "record (%s)", cs->name, qrs_strerror(r));
  }
  if (r < 0) {
    study_free(t);
    return r;
  }
  log_info("study '%s' started: %u arms, unit %s, %" PRIu64 " units "
           "planned, %s at alpha %g; epoch %s", t->name, t->k, t->unit,
           t->plan.planned_units, t->statistic, t->plan.alpha,
           t->epoch_hex);
  *ret = t;
  return 0;
}

static int
add_study(struct studies *s, struct study *t)
{
  struct study **v;

  v = realloc(s->v, (s->n + 1) * sizeof(*v));
  if (!v)
    return -ENOMEM;
  s->v = v;
  s->v[s->n++] = t;
  return 0;
}

/* Start conf's studies that s does not run yet. */
static int
start_new(struct studies *s, const struct qrsd_conf *conf,
          struct registry *reg, struct journal *j, char *err, size_t errlen)
{
  struct study *t;
  size_t i;
  int r;

  for (i = 0; i < conf->n_studies; i++) {
    if (studies_find(s, conf->studies[i].name))
      continue;
    if (!j) {
      snprintf(err, errlen, "study '%s': the draw journal is off",
               conf->studies[i].name);
      return -EINVAL;
    }
    r = study_start(&conf->studies[i], reg, j, &t, err, errlen);
    if (r < 0)
      return r;
    if (add_study(s, t) < 0) {
      snprintf(err, errlen, "study '%s': out of memory", t->name);
      study_free(t);
      return -ENOMEM;
    }
  }
  return 0;
}

int
studies_new(const struct qrsd_conf *conf, struct registry *reg,
            struct journal *j, struct studies **ret, char *err,
            size_t errlen)
{
  struct studies *s;
  int r;

  *ret = NULL;
  s = calloc(1, sizeof(*s));
  if (!s)
    return -ENOMEM;
  r = start_new(s, conf, reg, j, err, errlen);
  if (r < 0) {
    studies_free(s);
    return r;
  }
  *ret = s;
  return 0;
}

int
studies_check(const struct qrsd_conf *cur, const struct qrsd_conf *next,
              char *err, size_t errlen)
{
  const struct conf_study *t;
  uint8_t seed[PRNG_SEED_LEN];
  char msg[512];
  size_t i;
  int r;

  for (i = 0; i < next->n_studies; i++) {
    t = &next->studies[i];
    if (conf_find_study(cur, t->name))
      continue;
    if (!cur->journal_dir || !cur->journal_dir[0]) {
      snprintf(err, errlen, "%s: studies.%s: the draw journal in use is off "
               "(journal.dir changes at a restart)", next->file, t->name);
      return -EINVAL;
    }
    r = prng_seed_load(t->assignment_seed_file, seed, msg, sizeof(msg));
    OPENSSL_cleanse(seed, sizeof(seed));
    if (r < 0) {
      snprintf(err, errlen, "%s: studies.%s: assignment_seed_file: %s",
               next->file, t->name, msg);
      return r;
    }
  }
  return 0;
}

int
studies_reload(struct studies **ps, const struct qrsd_conf *conf,
               struct registry *reg, struct journal *j, char *err,
               size_t errlen)
{
  struct studies *s = *ps;
  struct study *t;
  size_t i, kept;

  if (!s) {
    s = calloc(1, sizeof(*s));
    if (!s)
      return -ENOMEM;
    *ps = s;
  }
  kept = 0;
  for (i = 0; i < s->n; i++) {
    t = s->v[i];
    if (conf_find_study(conf, t->name)) {
      s->v[kept++] = t;
      continue;
    }
    log_info("study '%s' removed by a reload after %" PRIu64 " units",
             t->name, t->units_seen);
    t->retired = 1;
    if (t->refs == 0)
      study_free(t);
  }
  s->n = kept;
  return start_new(s, conf, reg, j, err, errlen);
}

void
studies_free(struct studies *s)
{
  if (!s)
    return;
  while (s->n > 0)
    study_free(s->v[--s->n]);
  free(s->v);
  free(s);
}

struct study *
studies_find(struct studies *s, const char *name)
{
  size_t i;

  if (!s || !name || !*name)
    return NULL;
  for (i = 0; i < s->n; i++)
    if (!strcmp(s->v[i]->name, name))
      return s->v[i];
  return NULL;
}

static uint64_t
be64(const uint8_t *b)
{
  uint64_t v = 0;
  int i;

  for (i = 0; i < 8; i++)
    v = v << 8 | b[i];
  return v;
}

int
study_begin(struct study *t, const char *tag, struct study_draw *d,
            char *msg, size_t msglen)
{
  uint8_t h[32];

  memset(d, 0, sizeof(*d));
  if (t->unit_draw) {
    snprintf(d->tag, sizeof(d->tag), "%s:%" PRIu64, t->epoch_hex, t->ctr);
  } else if (!tag || !*tag) {
    snprintf(msg, msglen, "study '%s' assigns arms by request: the draw "
             "needs a unit tag (the client's unit; libqrs: study_unit)",
             t->name);
    return QRS_E_BAD_REQUEST;
  } else if (!conf_name_ok(tag, STUDY_TAG_MAX, ":")) {
    snprintf(msg, msglen, "unit tag of %zu bytes refused: 1 to %d of "
             "A-Z a-z 0-9 . _ : -", strlen(tag), STUDY_TAG_MAX);
    return QRS_E_BAD_REQUEST;
  } else {
    snprintf(d->tag, sizeof(d->tag), "%s", tag);
  }
  if (study_hmac(t, "qrs-study-unit", d->tag, h) < 0) {
    snprintf(msg, msglen, "study '%s': HMAC-SHA256 failed", t->name);
    return QRS_E_INTERNAL;
  }
  d->study = t;
  d->arm = (unsigned)(be64(h) % t->k);
  d->label = t->label[d->arm];
  d->source = t->arms[d->arm];
  d->unit_key = be64(h + 8) | 1;            /* never 0: an empty slot */
  d->ctr = t->ctr++;
  prng_nonce(t->epoch, d->ctr, d->stream);
  snprintf(d->served_by, sizeof(d->served_by), "%s/%c", t->name, d->label);
  snprintf(d->params, sizeof(d->params), ",study=%s:%" PRIu64 ",unit=%s",
           t->epoch_hex, d->ctr, d->tag);
  t->refs++;
  return 0;
}

/* The distinct units t counts exactly. */
static uint64_t
units_tracked(const struct study *t)
{
  uint64_t twice = 2 * t->plan.planned_units;

  return twice < STUDY_UNITS_TRACKED ? twice : STUDY_UNITS_TRACKED;
}

/* Add key to t's set of units: 1 new, 0 seen, -1 no room (capped). */
static int
seen_add(struct study *t, uint64_t key)
{
  size_t i, cap, mask;
  uint64_t *v;

  if (t->seen_n * 2 >= t->seen_cap) {
    if (t->seen_n >= units_tracked(t))
      return -1;
    cap = t->seen_cap ? 2 * t->seen_cap : 1024;
    v = calloc(cap, sizeof(*v));
    if (!v)
      return -1;
    for (i = 0; i < t->seen_cap; i++) {
      size_t p;

      if (!t->seen[i])
        continue;
      for (p = t->seen[i] & (cap - 1); v[p]; p = (p + 1) & (cap - 1))
        ;
      v[p] = t->seen[i];
    }
    free(t->seen);
    t->seen = v;
    t->seen_cap = cap;
  }
  mask = t->seen_cap - 1;
  for (i = key & mask; t->seen[i]; i = (i + 1) & mask)
    if (t->seen[i] == key)
      return 0;
  t->seen[i] = key;
  t->seen_n++;
  return 1;
}

void
study_served(struct study_draw *d)
{
  struct study *t = d->study;
  unsigned li = (unsigned)(d->label - 'A');
  int r;

  t->draws[li]++;
  r = t->unit_draw ? 1 : seen_add(t, d->unit_key);
  if (r < 0 && !t->units_capped) {
    t->units_capped = 1;
    log_warn("study '%s': more than %" PRIu64 " units; units are no longer "
             "counted (draws are)", t->name, units_tracked(t));
  }
  if (r == 1) {
    t->units[li]++;
    if (++t->units_seen == t->plan.planned_units)
      log_info("study '%s' complete: %" PRIu64 " units seen, as planned",
               t->name, t->units_seen);
  }
}

void
study_draw_end(struct study_draw *d)
{
  struct study *t = d->study;

  if (!t)
    return;
  d->study = NULL;
  if (--t->refs == 0 && t->retired)
    study_free(t);
}

int
study_production(const struct study *t)
{
  return t->production;
}

const char *
study_name(const struct study *t)
{
  return t->name;
}

size_t
studies_count(const struct studies *s)
{
  return s ? s->n : 0;
}

void
studies_view(const struct studies *s, size_t i, struct study_view *v)
{
  const struct study *t = s->v[i];

  memset(v, 0, sizeof(*v));
  v->name = t->name;
  v->unit = t->unit;
  v->statistic = t->statistic;
  v->epoch = t->epoch_hex;
  v->state = t->units_seen >= t->plan.planned_units ? "complete" : "running";
  v->planned_units = t->plan.planned_units;
  v->units_seen = t->units_seen;
  v->alpha = t->plan.alpha;
  v->units_exact = !t->units_capped;
  v->n_labels = t->k;
  memcpy(v->draws, t->draws, sizeof(v->draws));
  memcpy(v->units, t->units, sizeof(v->units));
}

/* The labels as {"A": {"draws": .., "units": ..}, ...}. */
static int
add_labels(struct json_object *o, const char *key, const void *base)
{
  const struct study_view *v = base;
  struct json_object *labels, *l;
  char name[2] = { 0, 0 };
  unsigned i;

  labels = json_object_new_object();
  if (!labels)
    return -ENOMEM;
  for (i = 0; i < v->n_labels; i++) {
    l = json_object_new_object();
    if (!l)
      break;
    json_object_object_add(l, "draws", json_object_new_uint64(v->draws[i]));
    json_object_object_add(l, "units", json_object_new_uint64(v->units[i]));
    name[0] = (char)('A' + i);
    json_object_object_add(labels, name, l);
  }
  json_object_object_add(o, key, labels);
  return i == v->n_labels ? 0 : -ENOMEM;
}

static const struct jsonfield study_view_rows[] = {
  JSONFIELD_ROW("name", CSTR, struct study_view, name),
  JSONFIELD_ROW("unit", CSTR, struct study_view, unit),
  JSONFIELD_ROW("planned_units", U64, struct study_view, planned_units),
  JSONFIELD_ROW("statistic", CSTR, struct study_view, statistic),
  JSONFIELD_ROW("alpha", DOUBLE, struct study_view, alpha),
  JSONFIELD_ROW("epoch", CSTR, struct study_view, epoch),
  JSONFIELD_ROW("units_seen", U64, struct study_view, units_seen),
  JSONFIELD_ROW("units_counted_exactly", BOOL, struct study_view,
                units_exact),
  JSONFIELD_ROW("state", CSTR, struct study_view, state),
  JSONFIELD_CUSTOM_ROW("labels", add_labels),
};

static const struct jsonfield_table study_view_table =
  JSONFIELD_TABLE(study_view_rows);

struct json_object *
studies_status_json(const struct studies *s)
{
  struct json_object *a, *o;
  struct study_view v;
  size_t i;

  a = json_object_new_array();
  if (!a || !s)
    return a;
  for (i = 0; i < s->n; i++) {
    studies_view(s, i, &v);
    if (jsonfield_object(&study_view_table, &v, &o) == 0)
      json_object_array_add(a, o);
  }
  return a;
}
