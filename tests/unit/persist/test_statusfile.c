/* The status file: reference keys and order, atomic replacement, the
   once-a-second throttle, forced writes, carried-over gate keys. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <criterion/criterion.h>
#include <json-c/json.h>

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

TestSuite(statusfile, .init = mk, .fini = rm);

static const struct status_summary ok_sum = {
  "qrng", "system", "qrng", 0, 0,
};

static char *
slurp(void)
{
  char *t;

  cr_assert_eq(atomicfile_read(path, 1 << 20, &t, NULL), 0);
  return t;
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
  cr_assert_eq(statusfile_update(&sf, &ok_sum, extra, 1, 10.0), 1);
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
  cr_assert_eq(statusfile_update(&sf, &s, NULL, 0, 100.0), 1);
  s.fallback_count = 5;
  cr_assert_eq(statusfile_update(&sf, &s, NULL, 0, 100.5), 0);
  expect_file_has("\"fallback_count\":0");
  cr_assert_eq(statusfile_update(&sf, &s, NULL, 0, 101.0), 1);
  s.currently_degraded = 1;
  cr_assert_eq(statusfile_update(&sf, &s, NULL, 1, 101.1), 1);
  expect_file_has("\"currently_degraded\":true");
  cr_assert_eq(sf.writes, 3);
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
  cr_assert_eq(statusfile_update(&sf, &ok_sum, NULL, 1, 1.0), 1);
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
  cr_assert_eq(statusfile_update(&sf, &ok_sum, NULL, 1, 1.0), 0);
  cr_assert_neq(stat(path, &st), 0);
  statusfile_done(&sf);
}

Test(statusfile, a_write_failure_is_reported_not_fatal)
{
  struct statusfile sf;

  cr_assert_eq(statusfile_init(&sf, "/nonexistent/dir/status.json"), 0);
  cr_assert_eq(statusfile_update(&sf, &ok_sum, NULL, 1, 1.0), -ENOENT);
  cr_assert_eq(sf.last_error, -ENOENT);
  statusfile_done(&sf);
}
