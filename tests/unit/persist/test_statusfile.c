/* The status file: reference keys and order, atomic replacement, the
   once-a-second throttle, forced writes, carried-over gate keys, and
   what is at the path never read unless it is a regular file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <criterion/criterion.h>
#include <json-c/json.h>

#include "base/regfile.h"
#include "persist/atomicfile.h"
#include "persist/statusfile.h"
#include "testutil.h"

static char dir[64], path[128];

static void
mk(void)
{
  test_tmpdir(dir, sizeof(dir), "qrs-status");
  snprintf(path, sizeof(path), "%s/status.json", dir);
}

static void
rm(void)
{
  test_tmpdir_remove(dir);
}

/* A FIFO at the path would hold a blocking open for ever: the timeout
   turns that into a failure. */
TestSuite(statusfile, .init = mk, .fini = rm, .timeout = 10);

static const struct status_summary ok_sum = {
  "qrng", "system", "qrng", 0, 0,
};

static char *
slurp(void)
{
  char *t;

  cr_assert_eq(regfile_read(path, 0, 1 << 20, &t, NULL, NULL, 0), 0);
  return t;
}

/* Snapshot s (and extra) as the loop does and write it as the worker
   does; returns statusfile_write()'s result, err its message. */
static int
update(struct statusfile *sf, const struct status_summary *s,
       struct json_object *extra, double now, char *err, size_t errlen)
{
  char *text;
  size_t len;
  int r;

  cr_assert_eq(statusfile_snapshot(sf, s, extra, now, &text, &len), 0);
  r = statusfile_write(sf->path, text, len, err, errlen);
  free(text);
  return r;
}

static void
update_ok(struct statusfile *sf, const struct status_summary *s,
          struct json_object *extra, double now)
{
  char err[256];

  cr_assert_eq(update(sf, s, extra, now, err, sizeof(err)), 0, "%s", err);
}

/* The file as it is now contains text. */
static void
expect_file_has(const char *text)
{
  char *t;

  t = slurp();
  cr_assert_not_null(strstr(t, text), "%s", t);
  free(t);
}

Test(statusfile, writes_the_reference_keys_in_order_then_ours)
{
  struct statusfile sf;
  struct json_object *extra = json_object_new_object(), *j;
  char *t, *a, *b, *c, *d;

  json_object_object_add(extra, "sources", json_object_new_object());
  cr_assert_eq(statusfile_init(&sf, path), 0);
  update_ok(&sf, &ok_sum, extra, 10.0);
  t = slurp();
  a = strstr(t, "\"primary_name\":\"qrng\"");
  b = strstr(t, "\"currently_degraded\":false");
  c = strstr(t, "\"sources\":{}");
  d = strstr(t, "\"updated_at\":");
  cr_assert(a && b && c && d, "%s", t);
  cr_assert(a < b && b < c && c < d, "%s", t);
  j = json_tokener_parse(t);
  cr_assert_not_null(j);
  json_object_put(j);
  free(t);
  json_object_put(extra);
  statusfile_done(&sf);
}

Test(statusfile, throttles_to_once_a_second_unless_forced)
{
  struct statusfile sf;
  struct status_summary s = ok_sum;

  cr_assert_eq(statusfile_init(&sf, path), 0);
  cr_assert(statusfile_due(&sf, 0, 100.0));
  update_ok(&sf, &s, NULL, 100.0);
  s.fallback_count = 5;
  cr_assert_not(statusfile_due(&sf, 0, 100.5));
  expect_file_has("\"fallback_count\":0");
  cr_assert(statusfile_due(&sf, 0, 101.0));
  update_ok(&sf, &s, NULL, 101.0);
  expect_file_has("\"fallback_count\":5");
  s.currently_degraded = 1;
  cr_assert_not(statusfile_due(&sf, 0, 101.1));
  cr_assert(statusfile_due(&sf, 1, 101.1));
  update_ok(&sf, &s, NULL, 101.1);
  expect_file_has("\"currently_degraded\":true");
  cr_assert_eq(sf.snapshots, 3);
  statusfile_done(&sf);
}

Test(statusfile, keeps_an_engines_gate_keys)
{
  struct statusfile sf;
  char *t;

  cr_assert_eq(atomicfile_write(path, "{\"gate_open\":true,\"gate_boost\":"
                                "0.153,\"coherence_valid\":true,\"other\":1}",
                                70, 0), 0);
  cr_assert_eq(statusfile_init(&sf, path), 0);
  update_ok(&sf, &ok_sum, NULL, 1.0);
  t = slurp();
  cr_assert_eq(strncmp(t, "{\"gate_open\":true,\"gate_boost\":0.153,"
                       "\"coherence_valid\":true,\"primary_name\"", 70), 0,
               "%s", t);
  cr_assert_null(strstr(t, "other"));
  free(t);
  statusfile_done(&sf);
}

Test(statusfile, an_empty_path_disables_it)
{
  struct statusfile sf;
  struct stat st;

  cr_assert_eq(statusfile_init(&sf, ""), 0);
  cr_assert_not(statusfile_due(&sf, 1, 1.0));
  cr_assert_neq(stat(path, &st), 0);
  statusfile_done(&sf);
}

Test(statusfile, a_write_failure_is_reported_not_fatal)
{
  struct statusfile sf;
  char err[256];

  cr_assert_eq(statusfile_init(&sf, "/nonexistent/dir/status.json"), 0);
  cr_assert_eq(update(&sf, &ok_sum, NULL, 1.0, err, sizeof(err)), -ENOENT);
  cr_assert_str_eq(err, "/nonexistent/dir/status.json: No such file or "
                   "directory");
  statusfile_done(&sf);
}

/* What is at the path is replaced, never read through: a FIFO is not
   opened (a reader would block until a writer came), a link is not
   followed (its target keeps its content), and both are said. */
Test(statusfile, a_fifo_or_a_link_at_the_path_is_replaced_unread)
{
  struct statusfile sf;
  char err[256], target[160], *t;
  struct stat st;

  cr_assert_eq(mkfifo(path, 0644), 0);
  cr_assert_eq(statusfile_init(&sf, path), 0);
  cr_assert_eq(update(&sf, &ok_sum, NULL, 1.0, err, sizeof(err)), 1);
  cr_assert_not_null(strstr(err, ": a FIFO, not a regular file; replaced"),
                     "%s", err);
  cr_assert_eq(strncmp(err, path, strlen(path)), 0, "%s", err);
  cr_assert_eq(lstat(path, &st), 0);
  cr_assert(S_ISREG(st.st_mode));
  expect_file_has("\"primary_name\":\"qrng\"");

  snprintf(target, sizeof(target), "%s/target.json", dir);
  cr_assert_eq(atomicfile_write(target, "{\"gate_open\":true}", 18, 0), 0);
  cr_assert_eq(unlink(path), 0);
  cr_assert_eq(symlink(target, path), 0);
  cr_assert_eq(update(&sf, &ok_sum, NULL, 2.0, err, sizeof(err)), 1);
  cr_assert_not_null(strstr(err, "a symbolic link"), "%s", err);
  t = slurp();
  cr_assert_null(strstr(t, "gate_open"), "%s", t);
  free(t);
  cr_assert_eq(regfile_read(target, 0, 100, &t, NULL, NULL, 0), 0);
  cr_assert_str_eq(t, "{\"gate_open\":true}");
  free(t);
  statusfile_done(&sf);
}

/* A FIFO at the temp file's path (<path>.<pid>.tmp) is removed, not
   opened for writing (which would block until a reader came). */
Test(statusfile, a_fifo_at_the_temp_path_does_not_block_the_write)
{
  struct statusfile sf;
  char tmp[192];

  snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid());
  cr_assert_eq(mkfifo(tmp, 0644), 0);
  cr_assert_eq(statusfile_init(&sf, path), 0);
  update_ok(&sf, &ok_sum, NULL, 1.0);
  expect_file_has("\"primary_name\":\"qrng\"");
  cr_assert_neq(access(tmp, F_OK), 0);
  statusfile_done(&sf);
}
