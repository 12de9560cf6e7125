/* A reload's view of the configuration (conf.h, "Reload"): what differs
   between the configuration in use and a new one, key by key, walking
   the same tables as the loader and conf_print(); and applying the keys
   a reload may change (those flagged live in conf_keys.c) in place, so
   that every pointer into the configuration in use stays valid. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <locale.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf_int.h"

struct diff {
  struct conf_change *v;
  size_t n, cap;
  locale_t loc;
  int nomem;
};

/* v cut to fit out (with "..." when cut). */
static void
show(char *out, size_t len, const char *v)
{
  size_t n;

  n = strlen(v);
  if (n < len) {
    memcpy(out, v, n + 1);
    return;
  }
  memcpy(out, v, len - 4);
  memcpy(out + len - 4, "...", 4);
}

/* Scalar k of base as conf_print() writes it, into out. */
static void
show_scalar(struct diff *d, const struct key *k, const void *base, char *out,
            size_t len)
{
  char *buf;
  size_t n;
  FILE *f;

  buf = NULL;
  n = 0;
  f = open_memstream(&buf, &n);
  if (!f) {
    d->nomem = 1;
    show(out, len, "?");
    return;
  }
  conf__print_scalar(f, k, base, d->loc);
  if (fclose(f) != 0 || !buf) {
    d->nomem = 1;
    show(out, len, "?");
  } else {
    show(out, len, buf);
  }
  free(buf);
}

static struct conf_change *
add(struct diff *d, const char *path, const char *key)
{
  struct conf_change *c;
  size_t cap;

  if (d->n == d->cap) {
    cap = d->cap ? 2 * d->cap : 16;
    c = realloc(d->v, cap * sizeof(*c));
    if (!c) {
      d->nomem = 1;
      return NULL;
    }
    d->v = c;
    d->cap = cap;
  }
  c = &d->v[d->n++];
  memset(c, 0, sizeof(*c));
  conf__join_path(c->key, sizeof(c->key), path, key);
  return c;
}

/* Do scalar k's values in a and b differ? */
static int
scalar_differs(const struct key *k, const void *a, const void *b)
{
  const char *fa, *fb;

  fa = (const char *)a + k->offset;
  fb = (const char *)b + k->offset;
  switch (k->kind) {
  case KEY_STRING:
    return strcmp(*(char *const *)(const void *)fa,
                  *(char *const *)(const void *)fb) != 0;
  case KEY_MODE:
    return *(const unsigned *)(const void *)fa !=
           *(const unsigned *)(const void *)fb;
  case KEY_U32:
    return *(const uint32_t *)(const void *)fa !=
           *(const uint32_t *)(const void *)fb;
  case KEY_U64:
    return *(const uint64_t *)(const void *)fa !=
           *(const uint64_t *)(const void *)fb;
  case KEY_BOOL:
    return *(const int *)(const void *)fa != *(const int *)(const void *)fb;
  case KEY_DOUBLE:
    return *(const double *)(const void *)fa !=
           *(const double *)(const void *)fb;
  default:
    return 0;
  }
}

static void
scalar_change(struct diff *d, const char *path, const struct key *k,
              const void *a, const void *b, int live)
{
  struct conf_change *c;

  if (!scalar_differs(k, a, b))
    return;
  c = add(d, path, k->name);
  if (!c)
    return;
  show_scalar(d, k, a, c->old_value, sizeof(c->old_value));
  show_scalar(d, k, b, c->new_value, sizeof(c->new_value));
  c->live = live;
}

static void
mechanisms_text(const struct conf_source *s, char *out, size_t len)
{
  size_t i, n;

  n = (size_t)snprintf(out, len, "[");
  for (i = 0; i < s->n_mechanisms && n < len; i++)
    n += (size_t)snprintf(out + n, len - n, "%s%s", i ? ", " : "",
                          s->mechanisms[i]);
  if (n < len)
    snprintf(out + n, len - n, "]");
}

/* The keys of two sources of the same type.  A reload replaces a source
   whose keys (other than its fallback) changed, opens the ones added and
   retires the ones removed (registry_reload_open()), so every change is
   live. */
static void
diff_source_keys(struct diff *d, const char *path, const struct key *keys,
                 const struct conf_source *a, const struct conf_source *b)
{
  char sub[CONF_KEY_MAX], ta[CONF_SHOW_MAX], tb[CONF_SHOW_MAX];
  struct conf_change *c;
  const struct key *k;

  for (k = keys; k->name; k++) {
    switch (k->kind) {
    case KEY_SOURCE_TYPE:
      break;
    case KEY_SECTION:
      conf__join_path(sub, sizeof(sub), path, k->name);
      diff_source_keys(d, sub, k->sub, a, b);
      break;
    case KEY_MECHANISMS:
      mechanisms_text(a, ta, sizeof(ta));
      mechanisms_text(b, tb, sizeof(tb));
      if (strcmp(ta, tb)) {
        c = add(d, path, k->name);
        if (c) {
          c->live = 1;
          show(c->old_value, sizeof(c->old_value), ta);
          show(c->new_value, sizeof(c->new_value), tb);
        }
      }
      break;
    default:
      scalar_change(d, path, k, a, b, 1);
      break;
    }
  }
}

static void
diff_sources(struct diff *d, const struct qrsd_conf *cur,
             const struct qrsd_conf *next)
{
  const struct conf_source *a, *b;
  const struct source_type *st;
  struct conf_change *c;
  char path[CONF_KEY_MAX];
  size_t i;

  for (i = 0; i < cur->n_sources; i++) {
    a = &cur->sources[i];
    b = conf_find_source(next, a->name);
    conf__join_path(path, sizeof(path), "sources", a->name);
    if (!b) {
      c = add(d, "sources", a->name);
      if (c) {
        show(c->old_value, sizeof(c->old_value),
             conf_source_type_name(a->type));
        c->live = 1;
        show(c->new_value, sizeof(c->new_value), "(removed)");
      }
    } else if (a->type != b->type) {
      c = add(d, path, "type");
      if (c) {
        c->live = 1;
        show(c->old_value, sizeof(c->old_value),
             conf_source_type_name(a->type));
        show(c->new_value, sizeof(c->new_value),
             conf_source_type_name(b->type));
      }
      /* The source stays as it is, but its fallback may change. */
      st = conf__source_type(a->type);
      if (st && strcmp(a->fallback, b->fallback))
        scalar_change(d, path, &st->keys[1], a, b, 1);
    } else {
      st = conf__source_type(a->type);
      if (st)
        diff_source_keys(d, path, st->keys, a, b);
    }
  }
  for (i = 0; i < next->n_sources; i++) {
    b = &next->sources[i];
    if (conf_find_source(cur, b->name))
      continue;
    c = add(d, "sources", b->name);
    if (c) {
      c->live = 1;
      show(c->old_value, sizeof(c->old_value), "(none)");
      snprintf(c->new_value, sizeof(c->new_value), "added (%s)",
               conf_source_type_name(b->type));
    }
  }
}

/* Studies added and removed (a changed plan is refused before this:
   conf_check_live()). */
static void
diff_studies(struct diff *d, const struct qrsd_conf *cur,
             const struct qrsd_conf *next)
{
  const struct conf_study *t;
  struct conf_change *c;
  size_t i;

  for (i = 0; i < cur->n_studies; i++) {
    t = &cur->studies[i];
    if (conf_find_study(next, t->name))
      continue;
    c = add(d, "studies", t->name);
    if (c) {
      c->live = 1;
      show(c->old_value, sizeof(c->old_value), t->unit);
      show(c->new_value, sizeof(c->new_value), "(removed)");
    }
  }
  for (i = 0; i < next->n_studies; i++) {
    t = &next->studies[i];
    if (conf_find_study(cur, t->name))
      continue;
    c = add(d, "studies", t->name);
    if (c) {
      c->live = 1;
      show(c->old_value, sizeof(c->old_value), "(none)");
      snprintf(c->new_value, sizeof(c->new_value), "added (%zu arms)",
               t->n_arms);
    }
  }
}

static void
diff_keys(struct diff *d, const char *path, const struct key *keys,
          const struct qrsd_conf *cur, const struct qrsd_conf *next)
{
  char sub[CONF_KEY_MAX];
  const struct key *k;

  for (k = keys; k->name; k++) {
    if (k->kind == KEY_SECTION) {
      conf__join_path(sub, sizeof(sub), path, k->name);
      diff_keys(d, sub, k->sub, cur, next);
    } else if (k->kind == KEY_SOURCES) {
      diff_sources(d, cur, next);
    } else if (k->kind == KEY_STUDIES) {
      diff_studies(d, cur, next);
    } else {
      scalar_change(d, path, k, cur, next, k->live);
    }
  }
}

int
conf_diff(const struct qrsd_conf *cur, const struct qrsd_conf *next,
          struct conf_change **ret, size_t *ret_n)
{
  struct diff d;

  memset(&d, 0, sizeof(d));
  d.loc = newlocale(LC_ALL_MASK, "C", (locale_t)0);
  if (!d.loc)
    return -ENOMEM;
  diff_keys(&d, "", conf__top_keys, cur, next);
  freelocale(d.loc);
  if (d.nomem) {
    free(d.v);
    return -ENOMEM;
  }
  *ret = d.v;
  *ret_n = d.n;
  return 0;
}

static int
ends_with(const char *s, const char *tail)
{
  size_t n = strlen(s), m = strlen(tail);

  return n >= m && !strcmp(s + n - m, tail);
}

int
conf_source_same(const struct conf_source *a, const struct conf_source *b,
                 int but_quota)
{
  const struct source_type *st;
  struct diff d;
  size_t i;
  int same;

  if (a->type != b->type)
    return 0;
  st = conf__source_type(a->type);
  if (!st)
    return 0;
  memset(&d, 0, sizeof(d));
  d.loc = newlocale(LC_ALL_MASK, "C", (locale_t)0);
  if (!d.loc)
    return -ENOMEM;
  diff_source_keys(&d, "s", st->keys, a, b);
  freelocale(d.loc);
  same = d.nomem ? -ENOMEM : 1;
  for (i = 0; i < d.n && same == 1; i++)
    if (!ends_with(d.v[i].key, ".fallback") &&
        !(but_quota && (ends_with(d.v[i].key, ".max_bytes_per_request") ||
                        ends_with(d.v[i].key, ".max_requests_per_minute") ||
                        ends_with(d.v[i].key, ".max_bytes_per_day"))))
      same = 0;
  free(d.v);
  return same;
}

int
conf_check_live(const struct qrsd_conf *cur, const struct qrsd_conf *next,
                char *err, size_t errlen)
{
  const struct conf_source *sa, *sb;
  const struct conf_study *t;
  size_t i, a;

  /* A running study's plan is fixed: it was committed to the journal,
     and so were its arms (a prng arm's seed). */
  for (i = 0; i < next->n_studies; i++) {
    t = conf_find_study(cur, next->studies[i].name);
    if (t && !conf_study_same(t, &next->studies[i])) {
      snprintf(err, errlen, "%s: studies.%s: the plan of a running study "
               "cannot change (remove it and add one under a new name)",
               next->file, t->name);
      return -EINVAL;
    }
    for (a = 0; t && a < t->n_arms; a++) {
      sa = conf_find_source(cur, t->arms[a]);
      sb = conf_find_source(next, t->arms[a]);
      if (sa && sb && conf_source_same(sa, sb, 0) != 1) {
        snprintf(err, errlen, "%s: sources.%s: an arm of running study "
                 "'%s' cannot change (remove the study first)", next->file,
                 sa->name, t->name);
        return -EINVAL;
      }
    }
  }

  /* The amplifier's keys need a restart: cur's stay, next's limits come. */
  if (cur->amp_sample_count > next->max_sample_count) {
    snprintf(err, errlen, "%s: limits.max_sample_count: value %" PRIu32
             " is below amplifier.sample_count in use (%" PRIu32 "), "
             "which changes only at a restart", next->file,
             next->max_sample_count, cur->amp_sample_count);
    return -EINVAL;
  }
  if (cur->amp_zscore_calibration_samples > next->max_calibration_samples ||
      cur->amp_ecdf_calibration_samples > next->max_calibration_samples) {
    snprintf(err, errlen, "%s: limits.max_calibration_samples: value %"
             PRIu32 " is below the amplifier's calibration samples in use, "
             "which change only at a restart", next->file,
             next->max_calibration_samples);
    return -EINVAL;
  }
  return 0;
}

static void
swap_bytes(void *a, void *b, size_t n)
{
  unsigned char t[sizeof(double) > sizeof(char *) ? sizeof(double) :
                  sizeof(char *)];

  memcpy(t, a, n);
  memcpy(a, b, n);
  memcpy(b, t, n);
}

static size_t
scalar_size(enum key_kind kind)
{
  switch (kind) {
  case KEY_STRING:
    return sizeof(char *);
  case KEY_MODE:
    return sizeof(unsigned);
  case KEY_U32:
    return sizeof(uint32_t);
  case KEY_U64:
    return sizeof(uint64_t);
  case KEY_BOOL:
    return sizeof(int);
  case KEY_DOUBLE:
    return sizeof(double);
  default:
    return 0;
  }
}

static void
apply_keys(const struct key *keys, struct qrsd_conf *cur,
           struct qrsd_conf *next)
{
  const struct key *k;

  for (k = keys; k->name; k++) {
    if (k->kind == KEY_SECTION)
      apply_keys(k->sub, cur, next);
    else if (k->live && scalar_size(k->kind))
      swap_bytes((char *)cur + k->offset, (char *)next + k->offset,
                 scalar_size(k->kind));
  }
}

void
conf_apply_live(struct qrsd_conf *cur, struct qrsd_conf *next)
{
  struct conf_study *sv;
  struct conf_source *v;
  size_t n;

  /* The sources (and studies) go over whole: the registry opened next's before this
     (registry_reload_open()) and copies what it keeps of them. */
  v = cur->sources;
  n = cur->n_sources;
  cur->sources = next->sources;
  cur->n_sources = next->n_sources;
  next->sources = v;
  next->n_sources = n;
  sv = cur->studies;
  n = cur->n_studies;
  cur->studies = next->studies;
  cur->n_studies = next->n_studies;
  next->studies = sv;
  next->n_studies = n;
  apply_keys(conf__top_keys, cur, next);
  memcpy(cur->hash, next->hash, sizeof(cur->hash));
}
