/* Integration: the real qrsctl against a real qrsd. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <json-c/json.h>

#include "harness.h"

static struct daemon D;
static char out[1 << 16], err[1 << 14];

static void
start_default(void)
{
  daemon_run(&D, NULL);
}

static void
stop_and_clean(void)
{
  daemon_cleanup(&D);
}

/* Run qrsctl --socket <sock> args... ; returns the exit status. */
static int
qrsctl(const char *sock, ...)
{
  char *argv[32];
  va_list ap;
  char *a;
  int n;

  n = 0;
  argv[n++] = getenv("QRSCTL_BIN");
  cr_assert_not_null(argv[0], "QRSCTL_BIN is not set");
  if (sock) {
    argv[n++] = (char *)"--socket";
    argv[n++] = (char *)sock;
  }
  va_start(ap, sock);
  while ((a = va_arg(ap, char *)) && n < 30)
    argv[n++] = a;
  va_end(ap);
  argv[n] = NULL;
  return run_capture(argv, out, sizeof(out), err, sizeof(err));
}

static int64_t
jint(struct json_object *o, const char *key)
{
  struct json_object *v;

  cr_assert(json_object_object_get_ex(o, key, &v), "no '%s'", key);
  return json_object_get_int64(v);
}

Test(qrsctl, draw_prints_numbered_lines, .init = start_default,
     .fini = stop_and_clean)
{
  cr_assert_eq(qrsctl(D.sock, "draw", "-n", "3", NULL), 0, "%s", err);
  cr_assert(strstr(out, "1: u=") && strstr(out, "2: u=") &&
            strstr(out, "3: u="), "%s", out);
  cr_assert(strstr(out, "served_by=system"), "%s", out);
  cr_assert_null(strstr(out, "4: u="));
}

Test(qrsctl, draw_json_has_the_documented_fields, .init = start_default,
     .fini = stop_and_clean)
{
  static const char *const fields[] = {
    "u", "z", "amplifier", "source", "served_by", "fallback", "sample_count",
    "nonce", "echo_verified", "t_received_ns", "t_generated_ns", "t_sent_ns",
  };
  struct json_object *o, *v;
  char *line, *save;
  size_t i;
  int lines;
  double u;

  cr_assert_eq(qrsctl(D.sock, "--json", "draw", "-n", "4", "--samples",
                      "2000", "--salt", "00112233445566778899aabbccddeeff",
                      NULL), 0, "%s", err);
  lines = 0;
  for (line = strtok_r(out, "\n", &save); line;
       line = strtok_r(NULL, "\n", &save)) {
    o = json_tokener_parse(line);
    cr_assert_not_null(o, "not JSON: %s", line);
    for (i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
      cr_assert(json_object_object_get_ex(o, fields[i], &v), "no '%s' in %s",
                fields[i], line);
    json_object_object_get_ex(o, "u", &v);
    u = json_object_get_double(v);
    cr_assert(u > 0 && u < 1);
    cr_assert_eq(jint(o, "sample_count"), 2000);
    cr_assert_leq(jint(o, "t_received_ns"), jint(o, "t_generated_ns"));
    cr_assert_leq(jint(o, "t_generated_ns"), jint(o, "t_sent_ns"));
    json_object_object_get_ex(o, "echo_verified", &v);
    cr_assert_null(v, "echo_verified must be null without an upstream");
    json_object_object_get_ex(o, "nonce", &v);
    cr_assert_eq(strlen(json_object_get_string(v)), 16);
    /* The reference's adapter chain, step 0 (nonce.json "chain"). */
    if (lines == 0)
      cr_assert_str_eq(json_object_get_string(v), "1246bfb5997300ec");
    json_object_put(o);
    lines++;
  }
  cr_assert_eq(lines, 4);
}

Test(qrsctl, status_sources_and_health, .init = start_default,
     .fini = stop_and_clean)
{
  struct json_object *o;

  cr_assert_eq(qrsctl(D.sock, "status", NULL), 0, "%s", err);
  cr_assert(strstr(out, "system"), "%s", out);
  cr_assert_eq(qrsctl(D.sock, "--json", "status", NULL), 0, "%s", err);
  o = json_tokener_parse(out);
  cr_assert_not_null(o, "%s", out);
  cr_assert_eq(jint(o, "pid"), D.pid);
  json_object_put(o);
  cr_assert_eq(qrsctl(D.sock, "sources", NULL), 0, "%s", err);
  cr_assert(strstr(out, "system"), "%s", out);
  cr_assert_eq(qrsctl(D.sock, "health", NULL), 0, "%s", err);
  cr_assert(strstr(out, "healthy"), "%s", out);
}

Test(qrsctl, unreachable_daemon_exits_2_naming_the_socket)
{
  cr_assert_eq(qrsctl("/tmp/qrs-no-such-dir/none.sock", "health", NULL), 2);
  cr_assert(strstr(err, "/tmp/qrs-no-such-dir/none.sock"), "%s", err);
  cr_assert_eq(qrsctl("/tmp/qrs-no-such-dir/none.sock", "draw", NULL), 2);
}

Test(qrsctl, daemon_errors_exit_2_with_the_daemons_words,
     .init = start_default, .fini = stop_and_clean)
{
  cr_assert_eq(qrsctl(D.sock, "draw", "--source", "nowhere", NULL), 2);
  cr_assert(strstr(err, "nowhere"), "%s", err);
  cr_assert_eq(qrsctl(D.sock, "draw", "--samples", "99999999", NULL), 2);
}

Test(qrsctl, usage_errors_exit_2)
{
  cr_assert_eq(qrsctl(NULL, "frobnicate", NULL), 2);
  cr_assert_eq(qrsctl(NULL, "draw", "-n", "zero", NULL), 2);
  cr_assert_eq(qrsctl(NULL, "bytes", "-n", "0", NULL), 2);
  cr_assert_eq(qrsctl(NULL, "--help", NULL), 0);
  cr_assert(strstr(out, "Usage: qrsctl"), "%s", out);
  cr_assert(strstr(out, "Exit status") || strstr(out, "EXIT STATUS"), "%s",
            out);
  cr_assert_eq(qrsctl(NULL, "--version", NULL), 0);
  cr_assert(strstr(out, "0.1.0"), "%s", out);
}

Test(qrsctl, bytes_writes_exactly_n_bytes, .init = start_default,
     .fini = stop_and_clean)
{
  char cmd[512];
  char *argv[] = { (char *)"/bin/sh", (char *)"-c", cmd, NULL };

  /* Over several chunks, through a pipe. */
  snprintf(cmd, sizeof(cmd), "'%s' --socket '%s' bytes -n 300k | wc -c",
           getenv("QRSCTL_BIN"), D.sock);
  cr_assert_eq(run_capture(argv, out, sizeof(out), err, sizeof(err)), 0,
               "%s", err);
  cr_assert_eq(atol(out), 300 * 1024, "%s", out);
  /* A reader that leaves early is not an error. */
  snprintf(cmd, sizeof(cmd), "'%s' --socket '%s' bytes -n 10M | head -c 10"
           " | wc -c; exit ${PIPESTATUS:-0}", getenv("QRSCTL_BIN"), D.sock);
  cr_assert_eq(run_capture(argv, out, sizeof(out), err, sizeof(err)), 0,
               "%s", err);
  cr_assert_eq(atol(out), 10, "%s", out);
}

Test(qrsctl, validate_runs_the_daemons_check)
{
  char good[256], bad[256];

  snprintf(good, sizeof(good), "%s/conf/good_full.yaml",
           QRS_TEST_SOURCE_DIR);
  snprintf(bad, sizeof(bad), "%s/conf/bad_type_string.yaml",
           QRS_TEST_SOURCE_DIR);
  setenv("QRSD", getenv("QRSD_BIN"), 1);
  cr_assert_eq(qrsctl(NULL, "validate", good, NULL), 0, "%s", err);
  cr_assert_eq(qrsctl(NULL, "validate", bad, NULL), 2);
  cr_assert(strstr(err, "bad_type_string.yaml:"), "%s", err);
  cr_assert_eq(qrsctl(NULL, "validate", "/nonexistent/qrsd.yaml", NULL), 2);
}
