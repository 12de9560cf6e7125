/* qrsd's configuration loader: YAML (libyaml) into struct qrsd_conf.

   The text is first read into a small tree of nodes that keep their line
   numbers (conf_tree.c), so that every error can name one, then the tree
   is walked against tables of keys (conf_keys.c).  A new setting is one
   line in a table there; conf_print() walks the same tables, so it
   prints every setting there is.

   This file: loading (the embedded default is applied first, then the
   file), the checks that involve more than one key, conf_print(), and
   the lookups of conf.h.  conf_int.h says what the pieces share. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <locale.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "base/regfile.h"
#include "conf/conf_int.h"

/* ---- Loading ----------------------------------------------------------- */

/* Apply text on top of conf; *ret_root gets its tree (for check()). */
static int
apply_text(struct parser *p, struct qrsd_conf *conf, const char *text,
           size_t len, struct node **ret_root)
{
  struct node *root;
  int r;

  r = conf__read_tree(p, text, len, &root);
  if (r < 0)
    return r;
  if (root && !conf__is_null(root)) {
    if (root->kind != NODE_MAPPING)
      r = conf__fail_type(p, root, NULL, "a mapping of keys at the top level");
    else
      r = conf__parse_mapping(p, root, "", conf__top_keys, conf);
  }
  if (r < 0) {
    conf__node_free(root);
    return r;
  }
  *ret_root = root;
  return 0;
}

/* "; did you mean 'NAME'?" into buf when name is a typo of a declared
   source (or, with builtins, of error, system or mock), else "". */
static void
source_hint(char *buf, size_t len, const struct qrsd_conf *conf,
            const char *name, int builtins)
{
  static const char *const builtin[] = { "error", "system", "mock" };
  const char *names[CONF_MAX_SOURCES + 4];
  size_t i, n;

  n = 0;
  for (i = 0; i < conf->n_sources && i < CONF_MAX_SOURCES; i++)
    names[n++] = conf->sources[i].name;
  for (i = 0; builtins && i < sizeof(builtin) / sizeof(builtin[0]); i++)
    names[n++] = builtin[i];
  names[n] = NULL;
  conf__hint(buf, len, name, names);
}

/* Every fallback names "error", "system", "mock" or a declared source,
   and no chain of fallbacks comes back to where it started. */
static int
check_fallbacks(struct parser *p, const struct qrsd_conf *conf)
{
  const struct conf_source *s, *t;
  char path[MAX_PATH], chain[512], hint[128];
  size_t i, steps, len;

  for (i = 0; i < conf->n_sources; i++) {
    s = &conf->sources[i];
    snprintf(path, sizeof(path), "sources.%s.fallback", s->name);
    if (strcmp(s->fallback, "error") && strcmp(s->fallback, "system") &&
        strcmp(s->fallback, "mock") && !conf_find_source(conf, s->fallback)) {
      source_hint(hint, sizeof(hint), conf, s->fallback, 1);
      return conf__fail(p, s->fallback_line, path, "'%s' is not a declared "
                        "source (use error, system, mock or a source under "
                        "sources)%s", s->fallback, hint);
    }
  }
  for (i = 0; i < conf->n_sources; i++) {
    s = &conf->sources[i];
    len = (size_t)snprintf(chain, sizeof(chain), "%s", s->name);
    for (t = s, steps = 0; steps <= conf->n_sources; steps++) {
      t = conf_find_source(conf, t->fallback);
      if (!t)
        break;
      if (len < sizeof(chain))
        len += (size_t)snprintf(chain + len, sizeof(chain) - len, " -> %s",
                                t->name);
      if (t == s) {
        snprintf(path, sizeof(path), "sources.%s.fallback", s->name);
        return conf__fail(p, s->fallback_line, path, "fallback cycle: %s",
                          chain);
      }
    }
  }
  return 0;
}

/* Test-only sources (and fallbacks to the built-in mock) need
   allow_test_sources: true, so that a mock cannot serve, under any name,
   by accident. */
static int
check_test_sources(struct parser *p, const struct qrsd_conf *conf)
{
  const struct conf_source *s;
  char path[MAX_PATH];
  size_t i;

  if (conf->allow_test_sources)
    return 0;
  for (i = 0; i < conf->n_sources; i++) {
    s = &conf->sources[i];
    if (conf_source_type_is_test(s->type)) {
      snprintf(path, sizeof(path), "sources.%s", s->name);
      return conf__fail(p, s->line, path, "a %s source is for tests only and "
                        "serves only with allow_test_sources: true",
                        conf_source_type_name(s->type));
    }
    if (!strcmp(s->fallback, "mock") && !conf_find_source(conf, "mock")) {
      snprintf(path, sizeof(path), "sources.%s.fallback", s->name);
      return conf__fail(p, s->fallback_line, path, "the built-in mock "
                        "source is for tests only and serves only with "
                        "allow_test_sources: true");
    }
  }
  return 0;
}

/* grpc_compat's TLS files go together: a certificate with its key, a
   client CA only with them. */
static int
check_compat_tls(struct parser *p, const struct qrsd_conf *conf,
                 const struct node *root)
{
  if (!*conf->compat_tls_cert != !*conf->compat_tls_key)
    return conf__fail(p, conf__key_line(root, "grpc_compat",
                                        *conf->compat_tls_cert ? "tls_cert" :
                                        "tls_key"),
                      "grpc_compat.tls_cert", "tls_cert and tls_key go "
                      "together");
  if (*conf->compat_tls_client_ca && !*conf->compat_tls_cert)
    return conf__fail(p, conf__key_line(root, "grpc_compat", "tls_client_ca"),
                      "grpc_compat.tls_client_ca", "a client CA needs "
                      "tls_cert and tls_key");
  return 0;
}

/* The checks that involve more than one key. */
static int
check(struct parser *p, const struct qrsd_conf *conf, const struct node *root)
{
  char hint[128];
  int line;

  line = check_fallbacks(p, conf);
  if (line < 0)
    return line;

  if (conf->n_sources == 0)
    return conf__fail(p, conf__key_line(root, "sources", NULL), "sources",
                      "at least one source is required");
  if (!conf_find_source(conf, conf->default_source)) {
    line = conf__key_line(root, "default_source", NULL);
    if (!line)
      line = conf__key_line(root, "sources", NULL);
    source_hint(hint, sizeof(hint), conf, conf->default_source, 0);
    return conf__fail(p, line, "default_source", "source '%s' is not declared "
                      "under sources%s", conf->default_source, hint);
  }
  if (*conf->compat_listen) {
    const char *l = conf->compat_listen;

    int local = !strncmp(l, "unix:", 5) || !strncmp(l, "127.", 4) ||
                !strncmp(l, "localhost:", 10) || !strncmp(l, "[::1]:", 6);

    line = check_compat_tls(p, conf, root);
    if (line < 0)
      return line;
    if (!local && (!*conf->compat_tls_cert || !*conf->compat_api_keys))
      return conf__fail(p, conf__key_line(root, "grpc_compat", "listen"),
                        "grpc_compat.listen", "'%s' is neither unix:PATH nor a "
                        "loopback address (127.0.0.1:PORT, localhost:PORT, "
                        "[::1]:PORT): another host's address needs TLS "
                        "(tls_cert, tls_key) and api keys (api_keys)", l);
    if (!conf_find_source(conf, conf->compat_source)) {
      source_hint(hint, sizeof(hint), conf, conf->compat_source, 0);
      return conf__fail(p, conf__key_line(root, "grpc_compat", "source"),
                        "grpc_compat.source", "source '%s' is not declared "
                        "under sources%s", conf->compat_source, hint);
    }
  }
  if (conf->amp_sample_count > conf->max_sample_count) {
    line = conf__key_line(root, "amplifier", "sample_count");
    if (!line)
      line = conf__key_line(root, "limits", "max_sample_count");
    return conf__fail(p, line, "amplifier.sample_count", "value %" PRIu32
                      " is above limits.max_sample_count (%" PRIu32 ")",
                      conf->amp_sample_count, conf->max_sample_count);
  }
  if (conf->amp_zscore_calibration_samples > conf->max_calibration_samples ||
      conf->amp_ecdf_calibration_samples > conf->max_calibration_samples) {
    line = conf__key_line(root, "limits", "max_calibration_samples");
    return conf__fail(p, line, "amplifier", "calibration samples above "
                      "limits.max_calibration_samples (%" PRIu32 ")",
                      conf->max_calibration_samples);
  }
  line = conf__check_studies(p, conf, root);
  if (line < 0)
    return line;
  return check_test_sources(p, conf);
}

/* The embedded default's tree, read once per process (it is 14 KB of
   annotated YAML; every load starts from it).  Never freed: it lives as
   long as the process.  If it cannot be read, default_tree stays NULL and
   load() reads it again to report why. */
static struct node *default_tree;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

static void
read_default_tree(void)
{
  struct parser p;

  memset(&p, 0, sizeof(p));
  p.name = CONF_BUILTIN_NAME;
  p.builtin = 1;
  if (conf__read_tree(&p, conf_default_yaml, conf_default_yaml_len,
                      &default_tree) < 0)
    default_tree = NULL;
}

/* The SHA-256 of text in hex into out (CONF_HASH_HEX + 1 bytes). */
static int
hash_text(const char *text, size_t len, char *out)
{
  static const char hex[] = "0123456789abcdef";
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n, i;

  if (!EVP_Digest(text, len, md, &n, EVP_sha256(), NULL) || n != 32)
    return -ENOMEM;
  for (i = 0; i < n; i++) {
    out[2 * i] = hex[md[i] >> 4];
    out[2 * i + 1] = hex[md[i] & 15];
  }
  out[2 * n] = '\0';
  return 0;
}

/* The embedded default, then text unless only_default. */
static int
load(const char *name, const char *text, size_t len, int only_default,
     struct qrsd_conf **ret_conf, char *err, size_t errlen)
{
  struct qrsd_conf *conf;
  struct node *root;
  struct parser p;
  int r;

  if (!ret_conf || (!text && len > 0))
    return -EINVAL;
  if (err && errlen > 0)
    err[0] = '\0';
  memset(&p, 0, sizeof(p));
  p.name = CONF_BUILTIN_NAME;
  p.builtin = 1;
  p.err = err;
  p.errlen = errlen;
  root = NULL;
  conf = NULL;

  p.c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
  if (!p.c_locale)
    return conf__fail_nomem(&p);

  conf = calloc(1, sizeof(*conf));
  if (!conf) {
    r = conf__fail_nomem(&p);
    goto out;
  }
  conf->file = strdup(name);
  if (!conf->file ||
      hash_text(only_default ? conf_default_yaml : (text ? text : ""),
                only_default ? conf_default_yaml_len : len, conf->hash) < 0) {
    r = conf__fail_nomem(&p);
    goto out;
  }

  pthread_once(&default_once, read_default_tree);
  if (default_tree && default_tree->kind == NODE_MAPPING)
    r = conf__parse_mapping(&p, default_tree, "", conf__top_keys, conf);
  else
    r = apply_text(&p, conf, conf_default_yaml, conf_default_yaml_len,
                   &root);
  if (r < 0)
    goto out;
  if (!only_default) {
    conf__node_free(root);
    root = NULL;
    p.name = name;
    p.builtin = 0;
    r = apply_text(&p, conf, text ? text : "", len, &root);
    if (r < 0)
      goto out;
  }
  r = check(&p, conf, root ? root : (only_default ? default_tree : NULL));
  if (r == 0) {
    size_t i;

    for (i = 0; i < conf->n_sources; i++)
      conf->sources[i].grpc.state_dir = conf->state_dir;
  }

out:
  conf__node_free(root);
  freelocale(p.c_locale);
  if (r < 0) {
    conf_free(conf);
    return r;
  }
  *ret_conf = conf;
  return 0;
}

int
conf_load_string(const char *text, size_t len, const char *name,
                 struct qrsd_conf **ret_conf, char *err, size_t errlen)
{
  return load(name ? name : "(string)", text, len, 0, ret_conf, err, errlen);
}

int
conf_load_default(struct qrsd_conf **ret_conf, char *err, size_t errlen)
{
  return load(CONF_BUILTIN_NAME, NULL, 0, 1, ret_conf, err, errlen);
}

int
conf_load_file(const char *path, struct qrsd_conf **ret_conf, char *err,
               size_t errlen)
{
  char *buf;
  size_t len;
  int r;

  if (!path || !ret_conf)
    return -EINVAL;
  /* A link is followed (config management and ConfigMaps link their
     files); a FIFO, a device or a directory is refused, never read. */
  r = regfile_read(path, REGFILE_FOLLOW, CONF_MAX_FILE_SIZE, &buf, &len,
                   err, errlen);
  if (r < 0)
    return r;
  r = conf_load_string(buf, len, path, ret_conf, err, errlen);
  free(buf);
  return r;
}

/* Free the strings that keys (and their sections) hold in base. */
static void
free_strings(const struct key *keys, void *base)
{
  const struct key *k;

  for (k = keys; k->name; k++) {
    if (k->kind == KEY_SECTION)
      free_strings(k->sub, base);
    else if (k->kind == KEY_STRING)
      free(*(char **)(void *)((char *)base + k->offset));
  }
}

void
conf_free(struct qrsd_conf *conf)
{
  if (!conf)
    return;
  free(conf->file);
  free_strings(conf__top_keys, conf);
  conf__free_sources(conf);
  conf__free_studies(conf);
  free(conf);
}

const struct conf_source *
conf_find_source(const struct qrsd_conf *conf, const char *name)
{
  size_t i;

  if (!conf || !name)
    return NULL;
  for (i = 0; i < conf->n_sources; i++)
    if (!strcmp(conf->sources[i].name, name))
      return &conf->sources[i];
  return NULL;
}

/* ---- Printing ---------------------------------------------------------- */

/* s as a YAML double-quoted string. */
static void
print_string(FILE *f, const char *s)
{
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20 || *s == 0x7f)
      fprintf(f, "\\x%02x", (unsigned)(unsigned char)*s);
    else
      fputc(*s, f);
  }
  fputc('"', f);
}

void
conf__print_scalar(FILE *f, const struct key *k, const void *base,
                   locale_t loc)
{
  const char *field;
  char buf[32];

  field = (const char *)base + k->offset;
  switch (k->kind) {
  case KEY_STRING:
    print_string(f, *(char *const *)(const void *)field);
    break;
  case KEY_MODE:
    fprintf(f, "\"%04o\"", *(const unsigned *)(const void *)field);
    break;
  case KEY_U32:
    fprintf(f, "%" PRIu32, *(const uint32_t *)(const void *)field);
    break;
  case KEY_U64:
    fprintf(f, "%" PRIu64, *(const uint64_t *)(const void *)field);
    break;
  case KEY_DOUBLE:
    conf__format_double(*(const double *)(const void *)field, loc, buf,
                        sizeof(buf));
    fputs(buf, f);
    break;
  case KEY_BOOL:
    fputs(*(const int *)(const void *)field ? "true" : "false", f);
    break;
  case KEY_SECTION:
  case KEY_SOURCES:
  case KEY_SOURCE_TYPE:
  case KEY_MECHANISMS:
  case KEY_STUDIES:
  case KEY_ARMS:
    break;
  }
}

/* One source, on one line, in flow style. */
static void
print_source(FILE *f, const struct conf_source *s, int indent, locale_t loc)
{
  const struct source_type *st;
  const struct key *sk, *nk;
  size_t m;

  st = conf__source_type(s->type);
  if (!st)
    return;
  fprintf(f, "%*s", indent, "");
  print_string(f, s->name);
  fprintf(f, ": { type: %s", st->name);
  for (sk = st->keys; sk->name; sk++) {
    if (sk->kind == KEY_SOURCE_TYPE)
      continue;
    fprintf(f, ", %s: ", sk->name);
    if (sk->kind == KEY_MECHANISMS) {
      fputc('[', f);
      for (m = 0; m < s->n_mechanisms; m++)
        fprintf(f, "%s%s", m ? ", " : "", s->mechanisms[m]);
      fputc(']', f);
      continue;
    }
    if (sk->kind == KEY_SECTION) {
      fputs("{ ", f);
      for (nk = sk->sub; nk->name; nk++) {
        fprintf(f, "%s%s: ", nk == sk->sub ? "" : ", ", nk->name);
        conf__print_scalar(f, nk, s, loc);
      }
      fputs(" }", f);
      continue;
    }
    conf__print_scalar(f, sk, s, loc);
  }
  fputs(" }\n", f);
}

static void
print_keys(FILE *f, const struct qrsd_conf *conf, const struct key *keys,
           int indent, locale_t loc)
{
  const struct key *k;
  size_t i;

  for (k = keys; k->name; k++) {
    fprintf(f, "%*s%s:", indent, "", k->name);
    if (k->kind == KEY_SECTION) {
      fputc('\n', f);
      print_keys(f, conf, k->sub, indent + 2, loc);
      continue;
    }
    if (k->kind == KEY_STUDIES) {
      fputs(conf->n_studies ? "\n" : " {}\n", f);
      conf__print_studies(f, conf, indent + 2, loc);
      continue;
    }
    if (k->kind != KEY_SOURCES) {
      fputc(' ', f);
      conf__print_scalar(f, k, conf, loc);
      fputc('\n', f);
      continue;
    }
    fputc('\n', f);
    for (i = 0; i < conf->n_sources; i++)
      print_source(f, &conf->sources[i], indent + 2, loc);
  }
}

int
conf_print(const struct qrsd_conf *conf, FILE *f)
{
  locale_t loc;

  if (!conf || !f)
    return -EINVAL;
  loc = newlocale(LC_ALL_MASK, "C", (locale_t)0);
  if (!loc)
    return -ENOMEM;
  fputs("# qrsd: effective configuration, from ", f);
  print_string(f, conf->file ? conf->file : "");
  fputc('\n', f);
  print_keys(f, conf, conf__top_keys, 0, loc);
  freelocale(loc);
  if (ferror(f))
    return errno > 0 ? -errno : -EIO;
  return 0;
}
