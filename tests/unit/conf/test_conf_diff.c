/* A reload's view of the configuration (conf_diff.c): the differences key by
   key with live or needs-restart; applying only the live keys in place
   (pointers into the configuration in use stay valid); the checks on the mix
   of new live values and kept ones; the SHA-256 of the text read. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "conf/conf.h"

static struct qrsd_conf *
load(const char *text)
{
  struct qrsd_conf *c;
  char err[512];
  int r;

  c = NULL;
  r = conf_load_string(text, strlen(text), "t.yaml", &c, err, sizeof(err));
  cr_assert_eq(r, 0, "%s\n--- text:\n%s", err, text);
  return c;
}

static const struct conf_change *
find(const struct conf_change *v, size_t n, const char *key)
{
  size_t i;

  for (i = 0; i < n; i++)
    if (!strcmp(v[i].key, key))
      return &v[i];
  return NULL;
}

/* key is among the n changes in v, live or not as live says, with these
   old and new values (NULL: either not checked). */
static void
assert_change(const struct conf_change *v, size_t n, const char *key,
              const char *old_value, const char *new_value, int live)
{
  const struct conf_change *c;

  c = find(v, n, key);
  cr_assert_not_null(c, "no change of %s", key);
  if (old_value)
    cr_assert_str_eq(c->old_value, old_value, "%s", key);
  if (new_value)
    cr_assert_str_eq(c->new_value, new_value, "%s", key);
  cr_assert_eq(c->live, live, "%s", key);
}

/* The changes from the configuration text ta to tb (*n of them; free
   them); the texts' hashes must be equal when same, else differ. */
static struct conf_change *
diff(const char *ta, const char *tb, int same, size_t *n)
{
  struct qrsd_conf *a, *b;
  struct conf_change *v;

  a = load(ta);
  b = load(tb);
  cr_assert_eq(conf_diff(a, b, &v, n), 0);
  if (same)
    cr_assert_str_eq(a->hash, b->hash);
  else
    cr_assert_str_neq(a->hash, b->hash);
  conf_free(a);
  conf_free(b);
  return v;
}

Test(conf_diff, equal_configs_have_no_differences)
{
  struct conf_change *v;
  size_t n;

  v = diff("limits: { max_inflight_per_connection: 8 }\n",
           "limits: { max_inflight_per_connection: 8 }\n", 1, &n);
  cr_assert_eq(n, 0);
  free(v);
}

Test(conf_diff, each_key_is_listed_live_or_needing_a_restart)
{
  struct conf_change *v;
  size_t n;

  v = diff("socket: { path: /tmp/a.sock }\n"
           "limits: { max_inflight_per_connection: 8 }\n"
           "monitor: { window: 100 }\n"
           "sources: { system: { type: system }, x: { type: system } }\n",
           "socket: { path: /tmp/b.sock }\n"
           "limits: { max_inflight_per_connection: 4 }\n"
           "monitor: { window: 200 }\nlog: { level: debug }\n"
           "access: { admin_group: root }\n"
           "sources: { system: { type: system }, y: { type: system } }\n",
           0, &n);
  assert_change(v, n, "limits.max_inflight_per_connection", "8", "4", 1);
  assert_change(v, n, "socket.path", "\"/tmp/a.sock\"", NULL, 0);
  assert_change(v, n, "monitor.window", NULL, NULL, 1);
  assert_change(v, n, "log.level", NULL, NULL, 1);
  assert_change(v, n, "access.admin_group", NULL, NULL, 1);
  assert_change(v, n, "sources.x", NULL, "(removed)", 1);
  assert_change(v, n, "sources.y", "(none)", NULL, 1);
  cr_assert_eq(n, 7);
  free(v);
}

Test(conf_diff, apply_takes_live_keys_and_sources_and_keeps_pointers)
{
  struct qrsd_conf *a, *b;
  const char *path, *src;
  char hash[sizeof(a->hash)];

  a = load("socket: { path: /tmp/a.sock }\n"
           "limits: { max_inflight_per_connection: 8 }\n"
           "access: { group: \"\" }\n");
  b = load("socket: { path: /tmp/b.sock }\n"
           "limits: { max_inflight_per_connection: 4 }\n"
           "access: { group: daemon }\n");
  path = a->socket_path;
  src = b->sources[0].name;
  memcpy(hash, b->hash, sizeof(hash));
  conf_apply_live(a, b);
  conf_free(b);           /* it holds a's old values now */
  cr_assert_eq(a->max_inflight, 4);
  cr_assert_str_eq(a->access_group, "daemon");
  cr_assert_eq(a->socket_path, path, "a restart key kept its pointer");
  cr_assert_str_eq(a->socket_path, "/tmp/a.sock");
  cr_assert_eq(a->sources[0].name, src, "the sources are next's");
  cr_assert_str_eq(a->hash, hash);
  conf_free(a);
}

Test(conf_diff, a_live_limit_below_a_kept_value_is_refused)
{
  struct qrsd_conf *a, *b;
  char err[512];

  a = load("amplifier: { sample_count: 10000 }\n");
  b = load("amplifier: { sample_count: 1000 }\n"
           "limits: { max_sample_count: 5000 }\n");
  cr_assert_eq(conf_check_live(a, b, err, sizeof(err)), -EINVAL);
  cr_assert(strstr(err, "t.yaml: limits.max_sample_count: value 5000"),
            "%s", err);
  conf_free(b);
  b = load("limits: { max_sample_count: 20000 }\n");
  cr_assert_eq(conf_check_live(a, b, err, sizeof(err)), 0);
  conf_free(a);
  conf_free(b);
}

Test(conf_diff, hash_is_the_sha256_of_the_text)
{
  struct qrsd_conf *a;

  /* sha256 of the 0 bytes of an empty file */
  a = load("");
  cr_assert_str_eq(a->hash, "e3b0c44298fc1c149afbf4c8996fb924"
                   "27ae41e4649b934ca495991b7852b855");
  conf_free(a);
}
