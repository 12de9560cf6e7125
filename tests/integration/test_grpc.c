/* qrsd with gRPC upstreams, real processes over real sockets: qrsd <->
   qrs-entropy-server over unix and loopback TCP in all three modes with the
   echo verified on every draw; api key and TLS; an upstream killed and
   restarted under "fallback: system" (labelled fallback draws, breaker, status
   file, qrsctl health); fault flags seen through qrsd; quotas, and the daily
   count across a qrsd restart; the api key never shown.  The compat endpoint: C
   and Python clients, only its own source served, its socket's mode and group,
   a missing directory named. */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <criterion/criterion.h>
#include <json-c/json.h>

#include <qrs/client.h>
#include <qrs/error.h>

#include "harness.h"
#include "harness_client.h"
#include "upserver.h"

#define KEY "Sup3r-s3cret-QRNG-key"

static struct daemon D;

/* A temp dir for qrsd; the config is written once the upstreams run. */
static void
prepare(void)
{
  daemon_prepare(&D, NULL);
}

static void start_qrsd(const char *fmt, ...)
  __attribute__((format(printf, 1, 2)));

static void
start_qrsd(const char *fmt, ...)
{
  char yaml[8192], full[9000];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(yaml, sizeof(yaml), fmt, ap);
  va_end(ap);
  snprintf(full, sizeof(full), "state_dir: %s\nstatus_file: %s/status.json\n"
           "%s", D.dir, D.dir, yaml);
  daemon_write_conf(&D, full);
  daemon_start(&D, NULL);
}

/* One committed draw from source; returns the daemon's code. */
static int
draw(struct qrs_client *c, const char *source, uint64_t step,
     struct qrs_draw *d)
{
  struct qrs_commitment cm = { (const uint8_t *)"salt", 4, step, -1 };
  struct qrs_draw_request req;

  memset(&req, 0, sizeof(req));
  req.source = source;
  req.sample_count = 1000;
  req.commitment = &cm;
  return qrs_client_draw(c, &req, d);
}

static void
expect_upstream_draws(struct qrs_client *c, const char *source, int n)
{
  struct qrs_draw d;
  int i, r;

  for (i = 0; i < n; i++) {
    r = draw(c, source, (uint64_t)i, &d);
    cr_assert_eq(r, 0, "%s draw %d: %d", source, i, r);
    cr_assert_str_eq(d.served_by, source);
    cr_assert_eq(d.fallback, 0);
    cr_assert_neq(d.nonce, 0);
    cr_assert_eq(d.echo, QRS_ECHO_VERIFIED, "%s draw %d: echo %d", source,
                 i, (int)d.echo);
    cr_assert(d.u > 0 && d.u < 1);
    cr_assert_leq(d.received.monotonic_ns, d.generated.monotonic_ns);
  }
}

static int
qrsctl(char *out, size_t outlen, const char *a, const char *b)
{
  char *argv[8];
  char err[4096];
  int n = 0, r;

  argv[n++] = getenv("QRSCTL_BIN");
  argv[n++] = "-s";
  argv[n++] = D.sock;
  argv[n++] = (char *)a;
  if (b)
    argv[n++] = (char *)b;
  argv[n] = NULL;
  r = run_capture(argv, out, outlen, err, sizeof(err));
  cr_assert_null(strstr(err, KEY), "qrsctl printed the api key");
  return r;
}

static int health(char *out, size_t len);

static struct json_object *
status_file(void)
{
  char path[200];
  struct json_object *j;

  snprintf(path, sizeof(path), "%s/status.json", D.dir);
  j = json_object_from_file(path);
  cr_assert_not_null(j, "no status file %s", path);
  return j;
}

/* o[a][b][c][d], the keys after the first NULL ignored. */
static const char *
jstr4(struct json_object *o, const char *a, const char *b, const char *c,
      const char *d)
{
  const char *k[4] = { a, b, c, d };
  struct json_object *v = o;
  int i;

  for (i = 0; i < 4 && k[i]; i++)
    cr_assert(json_object_object_get_ex(v, k[i], &v), "no %s", k[i]);
  return json_object_get_string(v);
}

#define jstr(o, a, b, c) jstr4(o, a, b, c, NULL)

static void
finish(void)
{
  daemon_stop(&D);
  daemon_cleanup(&D);
}

/* A failed assertion skips the test's own cleanup: never leave a qrsd
   behind (it would hold the test runner's pipes open). */
static void
teardown(void)
{
  if (D.pid > 0) {
    kill(D.pid, SIGKILL);
    daemon_stop(&D);
  }
}

TestSuite(grpc, .init = prepare, .fini = teardown, .timeout = 120);

Test(grpc, a_dead_upstream_at_start_delays_nothing_and_is_degraded)
{
  struct qrs_client *c;
  struct qrs_draw d;
  char out[8192];
  int i;

  start_qrsd("sources:\n"
             "  system: { type: system }\n"
             "  q: { type: grpc, target: \"unix:%s/none.sock\", "
             "fallback: system, retry_count: 0 }\n", D.dir);
  for (i = 0; i < 50 && !daemon_log_contains(&D, "warm-up fetch failed");
       i++)
    usleep(100000);
  cr_assert(daemon_log_contains(&D, "source 'q': warm-up fetch failed"));
  cr_assert_eq(health(out, sizeof(out)), 1, "%s", out);
  c = connect_client(D.sock);
  cr_assert_eq(draw(c, "q", 0, &d), 0);
  cr_assert_eq(d.fallback, 1);
  qrs_client_free(c);
  finish();
}

Test(grpc, every_mode_over_unix_and_tcp_verifies_the_echo)
{
  struct upserver su, st;
  struct qrs_client *c;
  char l[128];

  snprintf(l, sizeof(l), "unix:%s/q.sock", D.dir);
  upserver_start(&su, l, NULL);
  upserver_start(&st, "127.0.0.1:0", NULL);
  start_qrsd("sources:\n"
             "  system: { type: system }\n"
             "  u1: { type: grpc, target: \"%s\", mode: unary }\n"
             "  u2: { type: grpc, target: \"%s\", mode: server_streaming }\n"
             "  u3: { type: grpc, target: \"%s\", mode: bidi_streaming }\n"
             "  t1: { type: grpc, target: \"%s\", mode: unary, "
             "insecure: true }\n"
             "  t2: { type: grpc, target: \"%s\", mode: server_streaming, "
             "insecure: true }\n"
             "  t3: { type: grpc, target: \"%s\", mode: bidi_streaming, "
             "insecure: true }\n",
             su.addr, su.addr, su.addr, st.addr, st.addr, st.addr);
  c = connect_client(D.sock);
  expect_upstream_draws(c, "u1", 10);
  expect_upstream_draws(c, "u2", 10);
  expect_upstream_draws(c, "u3", 10);
  expect_upstream_draws(c, "t1", 10);
  expect_upstream_draws(c, "t2", 10);
  expect_upstream_draws(c, "t3", 10);
  qrs_client_free(c);
  finish();
  upserver_stop(&su, 0);
  upserver_stop(&st, 0);
}

/* The file at path has something in it, and not the api key. */
static void
assert_file_hides_the_key(const char *path)
{
  size_t n;
  char *text;

  text = read_text_file(path, 1 << 20, &n);
  cr_assert_gt(n, 0, "%s is empty", path);
  cr_assert_null(strstr(text, KEY), "the key is in %s", path);
  free(text);
}

Test(grpc, the_api_key_is_required_refused_when_wrong_and_never_shown)
{
  struct upserver s;
  struct qrs_client *c;
  struct qrs_draw d;
  char key[200], bad[200], out[16384], path[200];

  snprintf(key, sizeof(key), "%s/qrng.key", D.dir);
  snprintf(bad, sizeof(bad), "%s/bad.key", D.dir);
  write_key_file(key, KEY "\n");
  write_key_file(bad, "wrong-key\n");
  upserver_start(&s, "127.0.0.1:0", "--api-key-file", key, NULL);
  start_qrsd("sources:\n"
             "  system: { type: system }\n"
             "  good: { type: grpc, target: \"%s\", insecure: true, "
             "api_key_file: \"%s\", mode: bidi_streaming }\n"
             "  bad: { type: grpc, target: \"%s\", insecure: true, "
             "api_key_file: \"%s\" }\n"
             "  none: { type: grpc, target: \"%s\", insecure: true }\n",
             s.addr, key, s.addr, bad, s.addr);
  c = connect_client(D.sock);
  expect_upstream_draws(c, "good", 5);
  cr_assert_eq(draw(c, "bad", 0, &d), QRS_E_ENTROPY);
  cr_assert_eq(draw(c, "none", 0, &d), QRS_E_ENTROPY);

  /* Nowhere to be seen: qrsctl, the status file, the log. */
  qrsctl(out, sizeof(out), "sources", NULL);
  cr_assert_null(strstr(out, KEY));
  cr_assert_not_null(strstr(out, "api key"), "%s", out);
  qrsctl(out, sizeof(out), "--json", "sources");
  cr_assert_null(strstr(out, KEY));
  qrsctl(out, sizeof(out), "status", NULL);
  cr_assert_null(strstr(out, KEY));
  qrsctl(out, sizeof(out), "health", NULL);
  cr_assert_null(strstr(out, KEY));
  qrs_client_free(c);
  daemon_stop(&D);
  snprintf(path, sizeof(path), "%s/status.json", D.dir);
  assert_file_hides_the_key(path);      /* the status file */
  assert_file_hides_the_key(D.log);     /* qrsd's log */
  daemon_cleanup(&D);
  upserver_stop(&s, 0);
}

/* qrs-entropy-server reads its api key by qrsd's rule for secrets: a
   key file others may read is refused, naming the fix, before it
   listens. */
Test(grpc, the_servers_api_key_file_others_may_read_is_refused)
{
  const char *bin = getenv("QRS_ENTROPY_SERVER_BIN");
  char dir[] = "/tmp/qrs-srvkey-XXXXXX", key[200], out[256], err[1024];
  char *argv[] = { (char *)bin, "--listen", "127.0.0.1:0", "--api-key-file",
                   key, NULL };
  int st;

  cr_assert_not_null(bin, "QRS_ENTROPY_SERVER_BIN is not set");
  cr_assert_not_null(mkdtemp(dir));
  snprintf(key, sizeof(key), "%s/qrng.key", dir);
  write_key_file(key, KEY "\n");
  cr_assert_eq(chmod(key, 0644), 0);
  st = run_capture(argv, out, sizeof(out), err, sizeof(err));
  cr_expect_neq(st, 0, "served with a world-readable key");
  cr_expect_not_null(strstr(err, "chmod"), "%s", err);
  cr_expect_null(strstr(err, KEY), "the key is in its error");
  cr_expect_null(strstr(out, KEY));
  unlink(key);
  rmdir(dir);
}

Test(grpc, tls_with_a_ca_made_at_test_time)
{
  struct upserver s;
  struct qrs_client *c;
  char ca[200], cert[200], key[200];

  upserver_make_certs(D.dir);
  snprintf(ca, sizeof(ca), "%s/ca.pem", D.dir);
  snprintf(cert, sizeof(cert), "%s/srv.pem", D.dir);
  snprintf(key, sizeof(key), "%s/srv.key", D.dir);
  upserver_start(&s, "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key,
                 NULL);
  start_qrsd("sources:\n"
             "  system: { type: system }\n"
             "  q: { type: grpc, target: \"%s\", mode: bidi_streaming, "
             "tls: { ca_file: \"%s\" } }\n", s.addr, ca);
  c = connect_client(D.sock);
  expect_upstream_draws(c, "q", 5);
  qrs_client_free(c);
  finish();
  upserver_stop(&s, 0);
}

static int
health(char *out, size_t len)
{
  return qrsctl(out, len, "health", NULL);
}

Test(grpc, an_upstream_outage_falls_back_labelled_and_recovers)
{
  struct upserver s;
  struct qrs_client *c;
  struct qrs_draw d;
  struct json_object *j;
  char l[128], out[16384];
  int i, r;

  snprintf(l, sizeof(l), "unix:%s/q.sock", D.dir);
  upserver_start(&s, l, NULL);
  start_qrsd("default_source: q\n"
             "sources:\n"
             "  system: { type: system }\n"
             "  q: { type: grpc, target: \"%s\", mode: bidi_streaming, "
             "fallback: system, retry_count: 0, timeout_ms: 500,\n"
             "       breaker: { max_consecutive_failures: 2, "
             "recovery_window_s: 1, recovery_window_max_s: 2 } }\n",
             l);
  c = connect_client(D.sock);
  expect_upstream_draws(c, "q", 3);
  cr_assert_eq(health(out, sizeof(out)), 0, "%s", out);
  j = status_file();
  cr_assert_str_eq(jstr(j, "currently_degraded", NULL, NULL), "false");
  json_object_put(j);

  upserver_stop(&s, 1);
  for (i = 0; i < 12; i++) {
    r = draw(c, "q", 100 + (uint64_t)i, &d);
    cr_assert_eq(r, 0, "no client draw may fail: %d", r);
    cr_assert_eq(d.fallback, 1, "draw %d not labelled", i);
    cr_assert_str_eq(d.served_by, "system");
    cr_assert_str_eq(d.source, "q");
  }
  cr_assert_eq(health(out, sizeof(out)), 1, "%s", out);
  cr_assert_not_null(strstr(out, "degraded"), "%s", out);
  cr_assert_not_null(strstr(out, "breaker open"), "%s", out);
  /* Forced at the transition; then at most once a second. */
  for (i = 0; i < 40; i++) {
    j = status_file();
    if (!strcmp(jstr(j, "currently_degraded", NULL, NULL), "true") &&
        !strcmp(jstr4(j, "sources", "q", "breaker", "state"), "open"))
      break;
    json_object_put(j);
    usleep(100000);
    (void)draw(c, "q", 200 + (uint64_t)i, &d);
  }
  cr_assert_lt(i, 40, "status file never said degraded + breaker open");
  cr_assert_str_eq(jstr(j, "last_source_used", NULL, NULL), "system");
  cr_assert_str_eq(jstr(j, "sources", "q", "state"), "degraded");
  cr_assert_gt(atoi(jstr(j, "fallback_count", NULL, NULL)), 10);
  cr_assert_str_eq(jstr4(j, "sources", "q", "breaker", "state"), "open");
  json_object_put(j);

  upserver_start(&s, l, NULL);
  usleep(2200000);                    /* past the (doubled) window */
  for (i = 0; i < 20; i++) {
    r = draw(c, "q", 300 + (uint64_t)i, &d);
    cr_assert_eq(r, 0);
    if (!d.fallback)
      break;
    usleep(200000);
  }
  cr_assert_eq(d.fallback, 0, "never recovered");
  cr_assert_str_eq(d.served_by, "q");
  cr_assert_eq(d.echo, QRS_ECHO_VERIFIED);
  cr_assert_eq(health(out, sizeof(out)), 0, "%s", out);
  for (i = 0; i < 40; i++) {
    j = status_file();
    if (!strcmp(jstr(j, "currently_degraded", NULL, NULL), "false"))
      break;
    json_object_put(j);
    usleep(100000);
    (void)draw(c, "q", 400 + (uint64_t)i, &d);
  }
  cr_assert_lt(i, 40, "status file never said recovered");
  cr_assert_str_eq(jstr(j, "sources", "q", "state"), "ok");
  cr_assert_str_eq(jstr4(j, "sources", "q", "breaker", "state"), "closed");
  json_object_put(j);
  cr_assert(daemon_log_contains(&D, "source 'q': warm-up fetch ok"));
  cr_assert(daemon_log_contains(&D, "circuit breaker open"));
  cr_assert(daemon_log_contains(&D, "source 'q' recovered"));
  qrs_client_free(c);
  finish();
  upserver_stop(&s, 0);
}

/* The upstream has answered qrsd's warm-up fetch (or failed it): from
   then on the channel is connected, and the draws below measure the fault,
   not the first connection. */
static void
wait_warmed_up(const char *source)
{
  char ok[96], bad[96];
  int i;

  snprintf(ok, sizeof(ok), "source '%s': warm-up fetch ok", source);
  snprintf(bad, sizeof(bad), "source '%s': warm-up fetch failed", source);
  for (i = 0; i < 300; i++) {
    if (daemon_log_count(&D, ok) > 0 || daemon_log_count(&D, bad) > 0)
      return;
    usleep(100000);
  }
  cr_assert_fail("no warm-up of '%s' within 30 s", source);
}

/* A fault flag seen through qrsd: with fallback system every draw is
   served, labelled; with fallback error it is a typed error.  A call
   that should succeed gets a deadline no loaded machine or sanitized
   qrsd misses (2 s x the time scale); one that should fail does so by
   itself (bad reply, error status), and a stalled call by a short
   deadline: a late success could not pass for one there. */
static void
fault(const char *flag, int served_by_upstream, int echo, int check_echo)
{
  struct upserver s;
  struct qrs_client *c;
  struct qrs_draw d;
  int i, timeout_ms;

  timeout_ms = served_by_upstream ? 2000 * test_time_scale() : 300;
  upserver_start(&s, "127.0.0.1:0", flag, NULL);
  start_qrsd("sources:\n"
             "  system: { type: system }\n"
             "  fb: { type: grpc, target: \"%s\", insecure: true, "
             "fallback: system, timeout_ms: %d, retry_count: 0, "
             "check_echo: %s }\n"
             "  er: { type: grpc, target: \"%s\", insecure: true, "
             "timeout_ms: %d, retry_count: 0, check_echo: %s }\n",
             s.addr, timeout_ms, check_echo ? "true" : "false", s.addr,
             timeout_ms, check_echo ? "true" : "false");
  wait_warmed_up("fb");
  wait_warmed_up("er");
  c = connect_client(D.sock);
  for (i = 0; i < 3; i++) {
    cr_assert_eq(draw(c, "fb", (uint64_t)i, &d), 0, "%s", flag);
    cr_assert_eq(d.fallback, !served_by_upstream, "%s", flag);
    cr_assert_str_eq(d.served_by, served_by_upstream ? "fb" : "system",
                     "%s", flag);
    if (served_by_upstream)
      cr_assert_eq((int)d.echo, echo, "%s", flag);
    cr_assert_eq(draw(c, "er", (uint64_t)i, &d) == 0, served_by_upstream,
                 "%s", flag);
  }
  qrs_client_free(c);
  finish();
  upserver_stop(&s, 0);
}

Test(grpc, fault_flags_give_their_documented_outcome)
{
  fault("--no-echo", 1, QRS_ECHO_NONE, 1);
  prepare();
  fault("--wrong-echo", 0, 0, 1);
  prepare();
  /* check_echo: false serves it, labelled as the mismatch it is. */
  fault("--wrong-echo", 1, QRS_ECHO_MISMATCH, 0);
  prepare();
  fault("--short-data", 0, 0, 1);
  prepare();
  fault("--empty-data", 0, 0, 1);
  prepare();
  fault("--stall", 0, 0, 1);
  prepare();
  fault("--error-rate=1", 0, 0, 1);
  prepare();
  fault("--latency-ms=20", 1, QRS_ECHO_VERIFIED, 1);
  prepare();
  fault("--refuse-purity", 1, QRS_ECHO_VERIFIED, 1);
}

Test(grpc, fault_drop_after_falls_back_when_the_server_goes_away)
{
  struct upserver s;
  struct qrs_client *c;
  struct qrs_draw d;
  int i, upstream = 0;

  upserver_start(&s, "127.0.0.1:0", "--drop-after", "4", NULL);
  start_qrsd("sources:\n"
             "  system: { type: system }\n"
             "  q: { type: grpc, target: \"%s\", insecure: true, "
             "mode: bidi_streaming, fallback: system, retry_count: 0 }\n",
             s.addr);
  c = connect_client(D.sock);
  for (i = 0; i < 10; i++) {
    cr_assert_eq(draw(c, "q", (uint64_t)i, &d), 0);
    upstream += !d.fallback;
    cr_assert_str_eq(d.served_by, d.fallback ? "system" : "q");
  }
  cr_assert_eq(upstream, 3, "4 calls: the warm-up and 3 draws");
  cr_assert_eq(upserver_wait(&s, 10000), 0);
  qrs_client_free(c);
  finish();
}

/* A number that qrsctl sources --json shows for source name: its key
   (sub NULL), or key under sub ("upstream"). */
static uint64_t
source_number(const char *name, const char *sub, const char *key)
{
  struct json_object *j, *a, *q;
  char out[16384];
  uint64_t v = 0;
  size_t k;
  int found = 0;

  cr_assert_eq(qrsctl(out, sizeof(out), "--json", "sources"), 0);
  j = json_tokener_parse(out);
  cr_assert_not_null(j, "%s", out);
  cr_assert(json_object_object_get_ex(j, "sources", &a));
  for (k = 0; k < json_object_array_length(a); k++) {
    q = json_object_array_get_idx(a, k);
    if (strcmp(jstr(q, "name", NULL, NULL), name))
      continue;
    v = (uint64_t)atoll(jstr(q, sub ? sub : key, sub ? key : NULL, NULL));
    found = 1;
  }
  json_object_put(j);
  cr_assert(found, "no source '%s' in qrsctl sources", name);
  return v;
}

/* Today's byte count of upstream source name, from qrsctl sources. */
static uint64_t
quota_day_bytes_of(const char *name)
{
  return source_number(name, "upstream", "quota_day_bytes");
}

Test(grpc, quotas_fall_back_and_the_daily_count_survives_a_restart)
{
  struct upserver s;
  struct qrs_client *c;
  struct qrs_draw d;
  char out[16384];
  int i, upstream = 0;
  uint64_t day;

  upserver_start(&s, "127.0.0.1:0", NULL);
  start_qrsd("sources:\n"
             "  system: { type: system }\n"
             "  q: { type: grpc, target: \"%s\", insecure: true, "
             "fallback: system,\n"
             "       quota: { max_requests_per_minute: 5, "
             "max_bytes_per_day: 1000000 } }\n", s.addr);
  c = connect_client(D.sock);
  /* The warm-up fetch took one request of the five. */
  for (i = 0; i < 8; i++) {
    cr_assert_eq(draw(c, "q", (uint64_t)i, &d), 0);
    upstream += !d.fallback;
    if (i >= 4)
      cr_assert_eq(d.fallback, 1, "draw %d above the per-minute quota", i);
  }
  cr_assert_eq(upstream, 4);
  qrsctl(out, sizeof(out), "sources", NULL);
  cr_assert_not_null(strstr(out, "5/5 requests this minute"), "%s", out);
  qrs_client_free(c);
  daemon_stop(&D);

  /* A restart keeps today's count and the minute's requests: the new
     qrsd's warm-up is over the per-minute quota (served by the fallback)
     and so is the next draw. */
  D.pid = -1;
  daemon_start(&D, NULL);
  wait_warmed_up("q");
  qrsctl(out, sizeof(out), "sources", NULL);
  cr_assert_not_null(strstr(out, "5/5 requests this minute"), "%s", out);
  c = connect_client(D.sock);
  cr_assert_eq(draw(c, "q", 100, &d), 0);
  cr_assert_eq(d.fallback, 1, "the restart granted a fresh minute");
  qrs_client_free(c);
  /* 4 draws of 1000 + the 8-byte warm-up; nothing since. */
  day = quota_day_bytes_of("q");
  cr_assert_eq(day, 4008, "day count after restart: %llu",
               (unsigned long long)day);

  /* A crash (no clean flush) resumes from the reservation written at
     start-up (written on a worker since): never below the count, at most
     one block (1 MiB) above. */
  kill(D.pid, SIGKILL);
  daemon_stop(&D);
  D.pid = -1;
  daemon_start(&D, NULL);
  wait_warmed_up("q");
  day = quota_day_bytes_of("q");
  cr_assert(day >= 4008 && day <= 4008 + (1u << 20),
            "day count after a crash: %llu", (unsigned long long)day);
  finish();
  upserver_stop(&s, 0);
}

/* qrsctl -s SOCK quota reset NAME: its exit status, output in out. */
static int
quota_reset(const char *name, char *out, size_t outlen)
{
  char *argv[8], err[4096];
  int r;

  argv[0] = getenv("QRSCTL_BIN");
  argv[1] = "-s";
  argv[2] = D.sock;
  argv[3] = "quota";
  argv[4] = "reset";
  argv[5] = (char *)name;
  argv[6] = NULL;
  r = run_capture(argv, out, outlen, err, sizeof(err));
  cr_assert_null(strstr(err, KEY), "qrsctl printed the api key");
  return r;
}

/* qrsctl quota reset on a real upstream with a quota: the source over its
   per-minute quota draws from its fallback; the reset gives it a fresh
   minute and day at once (upstream draws again), qrsctl sources shows the
   counts cleared, and the reset is persisted (a restart keeps it). */
Test(grpc, quota_reset_gives_a_real_upstream_a_fresh_quota)
{
  struct upserver s;
  struct qrs_client *c;
  struct qrs_draw d;
  char out[16384];
  int i, r;

  upserver_start(&s, "127.0.0.1:0", NULL);
  start_qrsd("sources:\n"
             "  system: { type: system }\n"
             "  q: { type: grpc, target: \"%s\", insecure: true, "
             "fallback: system,\n"
             "       quota: { max_requests_per_minute: 3, "
             "max_bytes_per_day: 1000000 } }\n", s.addr);
  wait_warmed_up("q");
  c = connect_client(D.sock);
  /* the warm-up took one request of the three */
  for (i = 0; i < 4; i++) {
    cr_assert_eq(draw(c, "q", (uint64_t)i, &d), 0);
    cr_assert_eq(d.fallback, i >= 2, "draw %d: fallback %d", i, d.fallback);
  }
  qrsctl(out, sizeof(out), "sources", NULL);
  cr_assert_not_null(strstr(out, "3/3 requests this minute"), "%s", out);
  cr_assert_gt(quota_day_bytes_of("q"), 0);

  r = quota_reset("q", out, sizeof(out));
  cr_assert_eq(r, 0, "quota reset: %d: %s", r, out);
  cr_assert_not_null(strstr(out, "q"), "the reply names the source: %s", out);
  cr_assert_eq(quota_day_bytes_of("q"), 0, "the day's bytes are not reset");
  qrsctl(out, sizeof(out), "sources", NULL);
  cr_assert_not_null(strstr(out, "0/3 requests this minute"), "%s", out);
  for (i = 0; i < 4; i++) {
    cr_assert_eq(draw(c, "q", (uint64_t)(10 + i), &d), 0);
    cr_assert_eq(d.fallback, i >= 3, "after the reset, draw %d: fallback %d",
                 i, d.fallback);
    if (!d.fallback)
      cr_assert_str_eq(d.served_by, "q");
  }
  cr_assert_eq(quota_day_bytes_of("q"), 3000, "3 draws of 1000 since the "
               "reset: %llu", (unsigned long long)quota_day_bytes_of("q"));
  qrs_client_free(c);
  daemon_stop(&D);

  /* the reset was persisted: the restart resumes from 3000 (and the
     minute's 3 requests), not from before the reset */
  D.pid = -1;
  daemon_start(&D, NULL);
  wait_warmed_up("q");
  cr_assert_eq(quota_day_bytes_of("q"), 3000, "after the restart: %llu",
               (unsigned long long)quota_day_bytes_of("q"));
  qrsctl(out, sizeof(out), "sources", NULL);
  cr_assert_not_null(strstr(out, "3/3 requests this minute"), "%s", out);
  finish();
  upserver_stop(&s, 0);
}

/* The compat endpoint answers a C gRPC client (qrsd's own grpc source,
   pointed at it: bytes in all three modes, server draws by GetDraw and
   StreamDraws) and Python grpc (all four RPCs). */
static int server_draw(struct qrs_client *c, const char *source,
                       uint64_t step, uint32_t block, const char *source_id,
                       struct qrs_draw *d);

Test(grpc, the_compat_endpoint_answers_c_and_python_grpc_clients)
{
  struct qrs_client *c;
  struct qrs_draw d;
  char cmd[512];
  int i;

  start_qrsd("grpc_compat: { listen: \"unix:%s/compat.sock\", "
             "source: system }\n"
             "sources:\n"
             "  system: { type: system }\n"
             "  c1: { type: grpc, target: \"unix:%s/compat.sock\", "
             "mode: unary }\n"
             "  c2: { type: grpc, target: \"unix:%s/compat.sock\", "
             "mode: server_streaming }\n"
             "  c3: { type: grpc, target: \"unix:%s/compat.sock\", "
             "mode: bidi_streaming }\n", D.dir, D.dir, D.dir, D.dir);
  c = connect_client(D.sock);
  expect_upstream_draws(c, "c1", 5);
  expect_upstream_draws(c, "c2", 5);
  expect_upstream_draws(c, "c3", 5);
  /* PurityService too: GetDraw (c1, unary) and StreamDraws (c3, bidi). */
  for (i = 0; i < 4; i++) {
    cr_assert_eq(server_draw(c, i % 2 ? "c3" : "c1", (uint64_t)i, 2048, "",
                             &d), 0);
    cr_assert_eq(d.fallback, 0, "draw %d", i);
    cr_assert_str_eq(d.amplifier, "server");
    cr_assert_eq(d.echo, QRS_ECHO_VERIFIED);
    cr_assert_eq(d.has_meta, 1);
    cr_assert_eq(d.meta.integrated_bytes, 2048);
    cr_assert(d.u > 0 && d.u < 1);
  }
  qrs_client_free(c);
  snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s/integration/grpc_client.py"
           " unix:%s/compat.sock", QRS_TEST_SOURCE_DIR, D.dir);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
  cr_assert(daemon_log_contains(&D, "gRPC compat endpoint on unix:"));
  finish();
}

static int
server_draw(struct qrs_client *c, const char *source, uint64_t step,
            uint32_t block, const char *source_id, struct qrs_draw *d)
{
  struct qrs_commitment cm = { (const uint8_t *)"s", 1, step, -1 };
  struct qrs_draw_request req;

  memset(&req, 0, sizeof(req));
  req.source = source;
  req.amplifier = "server";
  req.sample_count = 500;
  req.commitment = &cm;
  req.draw_block_bytes = block;
  req.draw_source_id = source_id;
  return qrs_client_draw(c, &req, d);
}

/* Amplifier "server": the upstream's PurityService integrates the draw
   (unary GetDraw, bidi StreamDraws); without it, or for a local source,
   sample_count bytes are amplified here and labelled as a fallback. */
Test(grpc, server_draws_carry_the_upstream_metadata_or_fall_back)
{
  struct upserver s, r;
  struct qrs_client *c;
  struct qrs_draw d;
  int i;

  upserver_start(&s, "127.0.0.1:0", "--device-id", "qrng-a", NULL);
  upserver_start(&r, "127.0.0.1:0", "--refuse-purity", NULL);
  start_qrsd("sources:\n"
             "  system: { type: system }\n"
             "  un: { type: grpc, target: \"%s\", insecure: true }\n"
             "  bi: { type: grpc, target: \"%s\", insecure: true, "
             "mode: bidi_streaming }\n"
             "  nop: { type: grpc, target: \"%s\", insecure: true, "
             "fallback: system }\n", s.addr, s.addr, r.addr);
  c = connect_client(D.sock);
  for (i = 0; i < 4; i++) {
    cr_assert_eq(server_draw(c, i % 2 ? "bi" : "un", (uint64_t)i, 4096,
                             "qrng-a", &d), 0);
    cr_assert_str_eq(d.amplifier, "server");
    cr_assert_eq(d.fallback, 0);
    cr_assert_str_eq(d.served_type, "grpc");
    cr_assert_eq(d.production, 1);
    cr_assert_eq(d.echo, QRS_ECHO_VERIFIED);
    cr_assert_eq(d.has_meta, 1);
    cr_assert_eq(d.meta.integrated_bytes, 4096, "block_bytes reached the "
                 "upstream");
    cr_assert_eq(d.sample_count, 4096);
    cr_assert_str_eq(d.meta.source_id, "qrng-a");
    cr_assert_str_eq(d.meta.integrator, "byte_mean_z");
    cr_assert_gt(d.meta.generation_timestamp_ns, 0);
    cr_assert(d.u > 0 && d.u < 1);
  }
  /* An unknown upstream source id: NOT_FOUND, the local fallback. */
  cr_assert_eq(server_draw(c, "un", 9, 4096, "nope", &d), 0);
  cr_assert_eq(d.fallback, 1);
  cr_assert_str_eq(d.amplifier, "zscore_mean");
  cr_assert_eq(d.sample_count, 500);
  /* No PurityService: local amplification of the upstream's bytes. */
  cr_assert_eq(server_draw(c, "nop", 10, 0, "", &d), 0);
  cr_assert_eq(d.fallback, 1);
  cr_assert_str_eq(d.amplifier, "zscore_mean");
  cr_assert_eq(d.has_meta, 0);
  /* A local source cannot make server draws. */
  cr_assert_eq(server_draw(c, "system", 11, 0, "", &d), 0);
  cr_assert_eq(d.fallback, 1);
  cr_assert_str_eq(d.served_by, "system");
  qrs_client_free(c);
  finish();
  upserver_stop(&s, 0);
  upserver_stop(&r, 0);
}

/* The compat endpoint serves only grpc_compat.source: a draw naming another
   source is refused with PERMISSION_DENIED naming it, by GetDraw (c1) and
   StreamDraws (c3), and not one byte is drawn from that source; "" and the
   configured name are served.  Its socket gets socket_mode's default, 0660. */
Test(grpc, the_compat_endpoint_serves_only_its_source)
{
  struct qrs_client *c;
  struct qrs_draw d;
  char path[128], denied[256];
  struct stat st;

  start_qrsd("grpc_compat: { listen: \"unix:%s/compat.sock\", "
             "source: system }\n"
             "sources:\n"
             "  system: { type: system }\n"
             "  other: { type: system }\n"
             "  c1: { type: grpc, target: \"unix:%s/compat.sock\", "
             "mode: unary }\n"
             "  c3: { type: grpc, target: \"unix:%s/compat.sock\", "
             "mode: bidi_streaming }\n", D.dir, D.dir, D.dir);
  snprintf(path, sizeof(path), "%s/compat.sock", D.dir);
  cr_assert_eq(stat(path, &st), 0, "%s: %s", path, strerror(errno));
  cr_assert_eq(st.st_mode & 0777, 0660, "mode %04o", st.st_mode & 0777);

  c = connect_client(D.sock);
  /* Refused upstream: each falls back to bytes amplified here, which the
     compat endpoint serves from its own source. */
  cr_assert_eq(server_draw(c, "c1", 0, 2048, "other", &d), 0);
  cr_assert_eq(d.fallback, 1);
  cr_assert_str_eq(d.amplifier, "zscore_mean");
  cr_assert_eq(server_draw(c, "c3", 1, 2048, "other", &d), 0);
  cr_assert_eq(d.fallback, 1);
  snprintf(denied, sizeof(denied), "gRPC status %d PERMISSION_DENIED: "
           "source 'other' is not "
           "served here (this endpoint serves only 'system')",
           7 /* PERMISSION_DENIED */);
  cr_assert(daemon_log_contains(&D, denied), "no '%s' in qrsd's log",
            denied);
  cr_assert_eq(source_number("other", NULL, "draws"), 0);
  cr_assert_eq(source_number("other", NULL, "bytes"), 0,
               "the compat endpoint drew from 'other'");

  /* Its own source, by name or by "". */
  cr_assert_eq(server_draw(c, "c1", 2, 2048, "system", &d), 0);
  cr_assert_eq(d.fallback, 0);
  cr_assert_str_eq(d.meta.source_id, "system");
  cr_assert_eq(d.meta.integrated_bytes, 2048);
  cr_assert_eq(server_draw(c, "c3", 3, 2048, "", &d), 0);
  cr_assert_eq(d.fallback, 0);
  cr_assert_str_eq(d.meta.source_id, "system");
  /* A name that merely starts with the configured one is not it. */
  cr_assert_eq(server_draw(c, "c1", 4, 2048, "systemx", &d), 0);
  cr_assert_eq(d.fallback, 1);
  qrs_client_free(c);
  cr_assert_eq(source_number("other", NULL, "bytes"), 0);
  finish();
}

/* A group for the compat socket that the socket would not get by
   itself: as root any group but our own, else one of our supplementary
   groups (else our own: the mode is still checked). */
static gid_t
other_group(char *name, size_t len)
{
  gid_t groups[64], gid;
  struct group *gr;
  int i, n;

  gid = getegid();
  if (geteuid() == 0) {
    setgrent();
    while ((gr = getgrent()) && gr->gr_gid == gid)
      ;
    if (gr)
      gid = gr->gr_gid;
    endgrent();
  } else {
    n = getgroups(64, groups);
    for (i = 0; i < n; i++)
      if (groups[i] != gid) {
        gid = groups[i];
        break;
      }
  }
  gr = getgrgid(gid);
  cr_assert_not_null(gr, "no name for group %u", (unsigned)gid);
  snprintf(name, len, "%s", gr->gr_name);
  return gid;
}

/* grpc_compat.socket_mode and socket_group give the compat socket its
   mode and group, as socket.mode and socket.group do the main socket's
   (it used to be created with the umask's). */
Test(grpc, the_compat_socket_gets_the_configured_mode_and_group)
{
  char path[128], group[64];
  struct stat st;
  gid_t gid;

  gid = other_group(group, sizeof(group));
  start_qrsd("grpc_compat: { listen: \"unix:%s/compat.sock\", "
             "source: system, socket_mode: \"0640\", "
             "socket_group: \"%s\" }\n"
             "sources:\n"
             "  system: { type: system }\n", D.dir, group);
  snprintf(path, sizeof(path), "%s/compat.sock", D.dir);
  cr_assert_eq(lstat(path, &st), 0, "%s: %s", path, strerror(errno));
  cr_assert(S_ISSOCK(st.st_mode));
  cr_assert_eq(st.st_mode & 0777, 0640, "mode %04o", st.st_mode & 0777);
  cr_assert_eq(st.st_gid, gid, "group %u, not %u (%s)",
               (unsigned)st.st_gid, (unsigned)gid, group);
  finish();
}

/* A compat socket whose directory is missing: qrsd refuses to start and
   says so, rather than gRPC's bare "cannot listen". */
Test(grpc, a_compat_socket_in_a_missing_directory_is_named)
{
  char yaml[512], want[256], err[4096];

  snprintf(yaml, sizeof(yaml), "state_dir: %s\nstatus_file: \"\"\n"
           "grpc_compat: { listen: \"unix:%s/nodir/compat.sock\", "
           "source: system }\n", D.dir, D.dir);
  cr_assert_neq(daemon_try_start(&D, yaml, err, sizeof(err)), 0,
                "qrsd started: %s", err);
  snprintf(want, sizeof(want), "grpc_compat: cannot bind %s/nodir/"
           "compat.sock: directory %s/nodir does not exist", D.dir, D.dir);
  cr_assert_not_null(strstr(err, want), "'%s' lacks '%s'", err, want);
  daemon_cleanup(&D);
}
