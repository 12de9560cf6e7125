/* conf_keys_dump: every key of the config loader's tables (conf_keys.c),
   one line each, for tests/docs/doccheck.py, which checks qrsd.yaml(5)
   against it:

     SCOPE <tab> PATH <tab> KIND <tab> RANGE <tab> DEFAULT

   SCOPE is "-" for the top level, else the source type whose table the
   key is in (PATH is then sources.<name>.KEY).  KIND, RANGE and DEFAULT
   are written the way the page writes them: the page's line for the key
   is "KIND, RANGE; DEFAULT." ("KIND; DEFAULT." when RANGE is "").

   The top level's defaults are read from the built-in default
   (conf_load_default()), at each key's offset; a source type's from a
   config declaring one source of each type with only its required keys
   (a grpc source twice: a unix: and a host:port target, for the keys
   whose default depends on it). */
#define _GNU_SOURCE
#include <inttypes.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf_int.h"
#include "local/harvest.h"

/* The keys a source must have: the config below gives them, and the page
   says "required" instead of a default. */
static const struct {
  enum conf_source_type type;
  const char *key;
} required[] = {
  { CONF_SOURCE_DEVICE, "path" },
  { CONF_SOURCE_GRPC, "target" },
  { CONF_SOURCE_PRNG, "seed_file" },
};

static const char sources_yaml[] =
  "allow_test_sources: true\n"
  "default_source: s_system\n"
  "sources:\n"
  "  s_system: { type: system }\n"
  "  s_mock: { type: mock }\n"
  "  s_device: { type: device, path: /dev/null }\n"
  "  s_timing: { type: timing }\n"
  "  s_noise: { type: noise }\n"
  "  s_grpc: { type: grpc, target: \"unix:/run/qrng.sock\" }\n"
  "  s_grpc_tcp: { type: grpc, target: \"qrng.example:443\" }\n"
  "  s_prng: { type: prng, seed_file: /etc/qrsd/control.seed }\n";

static locale_t c_loc;

/* Whole numbers as integers ("20", not "2e+01"), else the shortest text
   that reads back as v. */
static void
fmt_double(double v, char *buf, size_t len)
{
  if (v == (double)(int64_t)v && v > -1e15 && v < 1e15)
    snprintf(buf, len, "%" PRId64, (int64_t)v);
  else
    conf__format_double(v, c_loc, buf, len);
}

/* names (ended by NULL) as "PREFIXone of a, b, c" into buf (len > 16). */
static void
fmt_choices(char *buf, size_t len, const char *prefix,
            const char *const *names)
{
  size_t n;

  n = (size_t)snprintf(buf, len, "%sone of ", prefix);
  conf__join_names(buf + n, len - n, names);
}

static void
fmt_kind_range(const struct key *k, const char **ret_kind, char *range,
               size_t len)
{
  const char *names[CONF_MAX_MECHANISMS + 1];
  char lo[32], hi[32];
  size_t i;

  range[0] = '\0';
  switch (k->kind) {
  case KEY_STRING:
    *ret_kind = "string";
    if (k->choices)
      fmt_choices(range, len, "", k->choices);
    else
      snprintf(range, len, "%" PRIu64 "..%" PRIu64 " bytes", k->umin,
               k->umax);
    break;
  case KEY_MODE:
    *ret_kind = "octal mode";
    snprintf(range, len, "%04" PRIo64 "..%04" PRIo64, k->umin, k->umax);
    break;
  case KEY_U32:
  case KEY_U64:
    *ret_kind = "integer";
    snprintf(range, len, "%" PRIu64 "..%" PRIu64, k->umin, k->umax);
    break;
  case KEY_BOOL:
    *ret_kind = "boolean";
    break;
  case KEY_DOUBLE:
    *ret_kind = "number";
    fmt_double(k->dmin, lo, sizeof(lo));
    fmt_double(k->dmax, hi, sizeof(hi));
    snprintf(range, len, "%c%s, %s%c", k->open & OPEN_MIN ? '(' : '[', lo,
             hi, k->open & OPEN_MAX ? ')' : ']');
    break;
  case KEY_SOURCE_TYPE:
    *ret_kind = "string";
    for (i = 0; i < CONF_MAX_MECHANISMS &&
                conf__source_type((enum conf_source_type)i); i++)
      names[i] = conf__source_type((enum conf_source_type)i)->name;
    names[i] = NULL;
    fmt_choices(range, len, "", names);
    break;
  case KEY_MECHANISMS:
    *ret_kind = "list of names";
    for (i = 0; i < noise_mech_count && i < CONF_MAX_MECHANISMS; i++)
      names[i] = noise_mechs[i].name;
    names[i] = NULL;
    fmt_choices(range, len, "each ", names);
    break;
  case KEY_SOURCES:
    *ret_kind = "mapping";
    snprintf(range, len, "1..%d sources", CONF_MAX_SOURCES);
    break;
  case KEY_STUDIES:
    *ret_kind = "mapping";
    snprintf(range, len, "0..%d studies", CONF_MAX_STUDIES);
    break;
  case KEY_ARMS:
    *ret_kind = "list of names";
    break;
  case KEY_SECTION:
    *ret_kind = "section";
    break;
  }
}

/* The value of k in base, as the page writes it. */
static void
fmt_value(const struct key *k, const void *base, char *buf, size_t len)
{
  const struct qrsd_conf *conf;
  const struct conf_source *s;
  const char *field;
  size_t i, n;

  field = (const char *)base + k->offset;
  switch (k->kind) {
  case KEY_STRING:
    snprintf(buf, len, "\"%s\"", *(char *const *)(const void *)field);
    break;
  case KEY_MODE:
    snprintf(buf, len, "%04o", *(const unsigned *)(const void *)field);
    break;
  case KEY_U32:
    snprintf(buf, len, "%" PRIu32, *(const uint32_t *)(const void *)field);
    break;
  case KEY_U64:
    snprintf(buf, len, "%" PRIu64, *(const uint64_t *)(const void *)field);
    break;
  case KEY_BOOL:
    snprintf(buf, len, "%s",
             *(const int *)(const void *)field ? "true" : "false");
    break;
  case KEY_DOUBLE:
    fmt_double(*(const double *)(const void *)field, buf, len);
    break;
  case KEY_MECHANISMS:
    s = base;
    n = (size_t)snprintf(buf, len, "[");
    for (i = 0; i < s->n_mechanisms && n < len; i++)
      n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ", " : "",
                            s->mechanisms[i]);
    if (n < len)
      snprintf(buf + n, len - n, "]");
    break;
  case KEY_SOURCES:
    conf = base;
    n = (size_t)snprintf(buf, len, "{ ");
    for (i = 0; i < conf->n_sources && n < len; i++)
      n += (size_t)snprintf(buf + n, len - n, "%s%s: { type: %s }",
                            i ? ", " : "", conf->sources[i].name,
                            conf_source_type_name(conf->sources[i].type));
    if (n < len)
      snprintf(buf + n, len - n, " }");
    break;
  case KEY_STUDIES:
    snprintf(buf, len, "{}");
    break;
  case KEY_SECTION:
  case KEY_SOURCE_TYPE:
  case KEY_ARMS:
    buf[0] = '\0';
    break;
  }
}

static int
is_required(enum conf_source_type t, const struct key *k)
{
  size_t i;

  if (k->kind == KEY_SOURCE_TYPE)
    return 1;
  for (i = 0; i < sizeof(required) / sizeof(required[0]); i++)
    if (required[i].type == t && !strcmp(required[i].key, k->name))
      return 1;
  return 0;
}

/* The keys of one table, under prefix; alt (or NULL) is a second
   struct whose value, when it differs, is the host:port target's. */
static void
dump_keys(const char *scope, const char *prefix, const struct key *keys,
          const void *base, const void *alt, enum conf_source_type t)
{
  const struct key *k;
  const char *kind;
  char path[MAX_PATH], range[512], v[512], v2[512];

  for (k = keys; k->name; k++) {
    snprintf(path, sizeof(path), "%s%s", prefix, k->name);
    if (k->kind == KEY_SECTION) {
      strncat(path, ".", sizeof(path) - strlen(path) - 1);
      dump_keys(scope, path, k->sub, base, alt, t);
      continue;
    }
    kind = "";
    fmt_kind_range(k, &kind, range, sizeof(range));
    printf("%s\t%s\t%s\t%s\t", scope, path, kind, range);
    if (strcmp(scope, "-") && is_required(t, k)) {
      printf("required\n");
      continue;
    }
    fmt_value(k, base, v, sizeof(v));
    if (alt)
      fmt_value(k, alt, v2, sizeof(v2));
    if (alt && strcmp(v, v2))
      printf("default %s for unix: targets, else %s\n", v, v2);
    else
      printf("default %s\n", v);
  }
}

int
main(void)
{
  struct qrsd_conf *def, *src;
  const struct conf_source *s, *alt;
  const struct source_type *st;
  char err[512];
  int i;

  c_loc = newlocale(LC_ALL_MASK, "C", (locale_t)0);
  if (!c_loc)
    return 1;
  def = src = NULL;
  if (conf_load_default(&def, err, sizeof(err)) < 0 ||
      conf_load_string(sources_yaml, strlen(sources_yaml), "sources", &src,
                       err, sizeof(err)) < 0) {
    fprintf(stderr, "conf_keys_dump: %s\n", err);
    return 1;
  }
  dump_keys("-", "", conf__top_keys, def, NULL, CONF_SOURCE_SYSTEM);
  /* The types are numbered from 0 (conf.h). */
  for (i = 0;; i++) {
    st = conf__source_type((enum conf_source_type)i);
    if (!st)
      break;
    snprintf(err, sizeof(err), "s_%s", st->name);
    s = conf_find_source(src, err);
    alt = i == CONF_SOURCE_GRPC ? conf_find_source(src, "s_grpc_tcp") : NULL;
    if (!s) {
      fprintf(stderr, "conf_keys_dump: no source %s: add one of type %s to "
              "sources_yaml\n", err, st->name);
      return 1;
    }
    dump_keys(st->name, "sources.<name>.", st->keys, s, alt, st->type);
  }
  conf_free(def);
  conf_free(src);
  freelocale(c_loc);
  return fflush(stdout) == 0 ? 0 : 1;
}
