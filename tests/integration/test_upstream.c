/* qrsd's gRPC client core (daemon/grpc/upstream.c) against a real
   qrs-entropy-server over real sockets: the three modes over unix and
   loopback TCP, echo, draws, splitting, api key, TLS, every fault flag,
   and the circuit breaker across a server restart.  Then a real qrsd
   against a hostile upstream (upserver_hostile.c): repeated, extra and
   unsolicited replies, no echo, constant bytes. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <grpc/grpc.h>
#include <json-c/json.h>
#include <uv.h>

#include "grpc/gbridge.h"
#include "base/log.h"
#include "harness.h"
#include "upserver.h"
#include "grpc/upstream.h"

struct ctx {
  uv_loop_t loop;
  struct gbridge br;
  char dir[64];
  uv_timer_t watchdog;
  int expired;
};

struct got {
  int done;
  struct upstream_result r;
  uint8_t data[4096];
};

static struct ctx C;

static void
setup(void)
{
  strcpy(C.dir, "/tmp/qrs-upstream-XXXXXX");
  cr_assert_not_null(mkdtemp(C.dir));
  grpc_init();
  cr_assert_eq(uv_loop_init(&C.loop), 0);
  cr_assert_eq(gbridge_init(&C.br, &C.loop), 0);
  uv_timer_init(&C.loop, &C.watchdog);
}

static void
teardown(void)
{
  char cmd[128];

  uv_close((uv_handle_t *)&C.watchdog, NULL);
  gbridge_close(&C.br, NULL);
  uv_run(&C.loop, UV_RUN_DEFAULT);
  uv_loop_close(&C.loop);
  grpc_shutdown();
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", C.dir);
  cr_assert_eq(system(cmd), 0);
}

TestSuite(upstream, .init = setup, .fini = teardown, .timeout = 60);

static void
conf_init(struct upstream_conf *c, const char *target, enum upstream_mode m)
{
  memset(c, 0, sizeof(*c));
  c->name = "qrng";
  c->target = target;
  c->mode = m;
  c->insecure = 1;
  c->timeout_ms = 2000;
  c->retry_count = 1;
  c->check_echo = 1;
  c->preprobe = 1;                    /* as qrsd's default */
  breaker_params_default(&c->breaker);
  c->breaker.max_timeout_ms = 2000;
  quota_params_default(&c->quota);
  c->quota.max_requests_per_minute = 0;
  c->quota.max_bytes_per_day = 0;
}

static struct upstream *
open_up(const struct upstream_conf *c)
{
  struct upstream *u;
  char err[256];

  cr_assert_eq(upstream_new(&C.br, c, &u, err, sizeof(err)), 0, "%s", err);
  return u;
}

static void
close_up(struct upstream *u)
{
  upstream_free(u);
  uv_run(&C.loop, UV_RUN_NOWAIT);
}

static void
on_got(void *arg, const struct upstream_result *res)
{
  struct got *g = arg;

  g->r = *res;
  if (res->err == 0 && res->len > 0 && res->len <= sizeof(g->data))
    memcpy(g->data, res->data, res->len);
  g->r.data = NULL;
  g->done = 1;
}

static void
on_watchdog(uv_timer_t *t)
{
  C.expired = 1;
}

static void
wait_for(int *flag, int timeout_ms)
{
  C.expired = 0;
  uv_timer_start(&C.watchdog, on_watchdog, (uint64_t)timeout_ms, 0);
  while (!*flag && !C.expired)
    uv_run(&C.loop, UV_RUN_ONCE);
  uv_timer_stop(&C.watchdog);
  cr_assert(*flag, "no completion within %d ms", timeout_ms);
}

static struct got
fetch(struct upstream *u, size_t n, uint64_t nonce)
{
  struct got g;

  memset(&g, 0, sizeof(g));
  cr_assert_eq(upstream_fetch(u, n, nonce, 0, on_got, &g), 0);
  cr_assert_eq(g.done, 0, "callback ran inside upstream_fetch");
  wait_for(&g.done, 20000);
  return g;
}

static struct got
draw(struct upstream *u, uint64_t nonce, const char *sid, uint32_t block)
{
  struct got g;

  memset(&g, 0, sizeof(g));
  cr_assert_eq(upstream_draw(u, nonce, sid, block, 0, on_got, &g), 0);
  wait_for(&g.done, 20000);
  return g;
}

static void
sleep_loop(int ms)
{
  int flag = 0;

  C.expired = 0;
  uv_timer_start(&C.watchdog, on_watchdog, (uint64_t)ms, 0);
  while (!C.expired)
    uv_run(&C.loop, UV_RUN_ONCE);
  (void)flag;
}

/* Without a nonce there is nothing to verify or compare: served, with no
   echo. */
static void
assert_no_nonce_no_echo(struct upstream *u)
{
  struct got g;

  g = fetch(u, 16, 0);
  cr_assert_eq(g.r.err, 0, "%s", g.r.detail);
  cr_assert_eq(g.r.echo, UPSTREAM_ECHO_NONE);
}

static void
exercise(const char *listen, enum upstream_mode mode)
{
  struct upserver s;
  struct upstream_conf c;
  struct upstream *u;
  struct got g, prev;
  int i;

  upserver_start(&s, listen, NULL);
  conf_init(&c, s.addr, mode);
  /* Every call must succeed: the adaptive timeout's floor (5 ms by
     default, reached once the P99 of calls on a quiet socket is tiny) is
     raised so that a loaded machine's scheduling delay does not fail a
     call (CI: "Deadline Exceeded" with the TSan suites beside it). */
  c.breaker.min_timeout_ms = 500.0;
  u = open_up(&c);
  memset(&prev, 0, sizeof(prev));
  for (i = 0; i < 20; i++) {
    g = fetch(u, 1000, 1000 + (uint64_t)i);
    cr_assert_eq(g.r.err, 0, "%s: %s", upstream_mode_name(mode),
                 g.r.detail);
    cr_assert_eq(g.r.len, 1000);
    cr_assert_eq(g.r.echo, UPSTREAM_ECHO_VERIFIED, "fetch %d", i);
    cr_assert_gt(g.r.generation_ns, 0);
    cr_assert_neq(memcmp(g.data, prev.data, 1000), 0, "bytes repeat");
    prev = g;
    g = draw(u, 5000 + (uint64_t)i, "", 2000);
    cr_assert_eq(g.r.err, 0, "%s draw: %s", upstream_mode_name(mode),
                 g.r.detail);
    cr_assert(g.r.u > 0 && g.r.u < 1);
    cr_assert_eq(g.r.echo, UPSTREAM_ECHO_VERIFIED);
    cr_assert_eq(g.r.integrated_bytes, 2000);
    cr_assert_str_eq(g.r.integrator, "byte_mean_z");
    cr_assert_str_eq(g.r.source_id, "getrandom");
  }
  assert_no_nonce_no_echo(u);
  close_up(u);
  upserver_stop(&s, 0);
}

/* exercise() on a unix socket in the test's directory. */
static void
exercise_unix(enum upstream_mode mode)
{
  char l[128];

  snprintf(l, sizeof(l), "unix:%s/s.sock", C.dir);
  exercise(l, mode);
}

Test(upstream, unary_over_unix)
{
  exercise_unix(UPSTREAM_UNARY);
}

Test(upstream, server_streaming_over_unix)
{
  exercise_unix(UPSTREAM_SERVER_STREAMING);
}

Test(upstream, bidi_over_unix)
{
  exercise_unix(UPSTREAM_BIDI_STREAMING);
}

Test(upstream, unary_over_tcp)
{
  exercise("127.0.0.1:0", UPSTREAM_UNARY);
}

Test(upstream, server_streaming_over_tcp)
{
  exercise("127.0.0.1:0", UPSTREAM_SERVER_STREAMING);
}

Test(upstream, bidi_over_tcp)
{
  exercise("127.0.0.1:0", UPSTREAM_BIDI_STREAMING);
}

Test(upstream, bidi_pipelines_many_requests_each_matched_by_echo)
{
  struct upserver s;
  struct upstream_conf c;
  struct upstream *u;
  struct got g[64];
  int i, all;

  upserver_start(&s, "127.0.0.1:0", "--jitter-ms", "3", NULL);
  conf_init(&c, s.addr, UPSTREAM_BIDI_STREAMING);
  u = open_up(&c);
  memset(g, 0, sizeof(g));
  for (i = 0; i < 64; i++)
    cr_assert_eq(upstream_fetch(u, 64, 77 + (uint64_t)i, 0, on_got, &g[i]), 0);
  for (i = 0; i < 64; i++) {
    wait_for(&g[i].done, 20000);
    cr_assert_eq(g[i].r.err, 0, "%d: %s", i, g[i].r.detail);
    cr_assert_eq(g[i].r.echo, UPSTREAM_ECHO_VERIFIED);
  }
  all = 1;
  for (i = 1; i < 64; i++)
    all &= memcmp(g[i].data, g[0].data, 64) != 0;
  cr_assert(all);
  close_up(u);
  upserver_stop(&s, 0);
}

Test(upstream, a_large_fetch_is_split_into_requests_of_the_maximum)
{
  struct upserver s;
  struct upstream_conf c;
  struct upstream *u;
  struct upstream_stats st;
  struct got g;

  upserver_start(&s, "127.0.0.1:0", "--max-bytes", "300", NULL);
  conf_init(&c, s.addr, UPSTREAM_UNARY);
  c.quota.max_bytes_per_request = 300;
  u = open_up(&c);
  g = fetch(u, 1000, 42);
  cr_assert_eq(g.r.err, 0, "%s", g.r.detail);
  cr_assert_eq(g.r.len, 1000);
  cr_assert_eq(g.r.echo, UPSTREAM_ECHO_VERIFIED);
  upstream_stats(u, &st);
  cr_assert_eq(st.calls, 4);          /* 300 + 300 + 300 + 100 */
  close_up(u);
  upserver_stop(&s, 0);
}

Test(upstream, the_api_key_is_required_and_a_wrong_one_refused)
{
  struct upserver s;
  struct upstream_conf c;
  struct upstream *u;
  struct got g;
  char key[128], bad[128];

  snprintf(key, sizeof(key), "%s/key", C.dir);
  snprintf(bad, sizeof(bad), "%s/bad", C.dir);
  write_key_file(key, "s3cr3t-KEY-value\n");
  write_key_file(bad, "not-the-key\n");
  upserver_start(&s, "127.0.0.1:0", "--api-key-file", key,
                 "--api-key-header", "x-qrng-key", NULL);
  conf_init(&c, s.addr, UPSTREAM_UNARY);
  c.api_key_file = key;
  c.api_key_header = "x-qrng-key";
  u = open_up(&c);
  g = fetch(u, 32, 1);
  cr_assert_eq(g.r.err, 0, "%s", g.r.detail);
  close_up(u);

  c.api_key_file = bad;
  u = open_up(&c);
  g = fetch(u, 32, 1);
  cr_assert_eq(g.r.err, -EACCES, "%d %s", g.r.err, g.r.detail);
  cr_assert_eq(g.r.attempts, 1, "a rejection is not retried");
  cr_assert_null(strstr(g.r.detail, "s3cr3t"));
  close_up(u);

  c.api_key_file = NULL;
  c.mode = UPSTREAM_BIDI_STREAMING;
  u = open_up(&c);
  g = fetch(u, 32, 1);
  cr_assert_eq(g.r.err, -EACCES, "%d %s", g.r.err, g.r.detail);
  close_up(u);
  upserver_stop(&s, 0);
}

Test(upstream, a_bad_header_name_or_missing_key_file_is_a_clear_error)
{
  struct upstream_conf c;
  struct upstream *u;
  char err[256];

  conf_init(&c, "127.0.0.1:1", UPSTREAM_UNARY);
  c.api_key_header = "Api-Key";
  cr_assert_eq(upstream_new(&C.br, &c, &u, err, sizeof(err)), -EINVAL);
  cr_assert_not_null(strstr(err, "api_key_header"), "%s", err);
  c.api_key_header = NULL;
  c.api_key_file = "/nonexistent/key";
  cr_assert_eq(upstream_new(&C.br, &c, &u, err, sizeof(err)), -EACCES);
  cr_assert_not_null(strstr(err, "/nonexistent/key"), "%s", err);
}

/* The api key is a secret: a file that others may read (or that group
   or others may change) is refused as a private key is, naming the file,
   its mode and the fix, never the key. */
Test(upstream, an_api_key_file_others_may_read_is_refused)
{
  struct upstream_conf c;
  struct upstream *u;
  char key[128], err[512], mode[32];
  static const mode_t bad[] = { 0644, 0604, 0620, 0666 };
  size_t i;

  snprintf(key, sizeof(key), "%s/key", C.dir);
  write_key_file(key, "s3cr3t-KEY-value\n");
  conf_init(&c, "127.0.0.1:1", UPSTREAM_UNARY);
  c.api_key_file = key;
  for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    cr_assert_eq(chmod(key, bad[i]), 0);
    cr_assert_eq(upstream_new(&C.br, &c, &u, err, sizeof(err)), -EACCES,
                 "mode %04o taken", (unsigned)bad[i]);
    snprintf(mode, sizeof(mode), "mode %04o", (unsigned)bad[i]);
    cr_assert_not_null(strstr(err, "api_key_file"), "%s", err);
    cr_assert_not_null(strstr(err, key), "%s", err);
    cr_assert_not_null(strstr(err, mode), "%s", err);
    cr_assert_not_null(strstr(err, "chmod 0"), "%s", err);
    cr_assert_null(strstr(err, "s3cr3t"), "%s", err);
  }
  /* 0600 and 0400, the file's owner's alone: taken */
  cr_assert_eq(chmod(key, 0400), 0);
  close_up(open_up(&c));
  cr_assert_eq(chmod(key, 0600), 0);
  close_up(open_up(&c));
}

Test(upstream, tls_with_a_test_ca_and_client_certificates)
{
  struct upserver s;
  struct upstream_conf c;
  struct upstream *u;
  struct got g;
  char ca[128], cert[128], key[128], scert[128], skey[128];

  upserver_make_certs(C.dir);
  snprintf(ca, sizeof(ca), "%s/ca.pem", C.dir);
  snprintf(cert, sizeof(cert), "%s/cli.pem", C.dir);
  snprintf(key, sizeof(key), "%s/cli.key", C.dir);
  snprintf(scert, sizeof(scert), "%s/srv.pem", C.dir);
  snprintf(skey, sizeof(skey), "%s/srv.key", C.dir);
  upserver_start(&s, "127.0.0.1:0", "--tls-cert", scert, "--tls-key", skey,
                 "--tls-client-ca", ca, NULL);
  conf_init(&c, s.addr, UPSTREAM_BIDI_STREAMING);
  c.insecure = 0;
  c.ca_file = ca;
  c.cert_file = cert;
  c.key_file = key;
  u = open_up(&c);
  g = fetch(u, 100, 9);
  cr_assert_eq(g.r.err, 0, "%s", g.r.detail);
  cr_assert_eq(g.r.echo, UPSTREAM_ECHO_VERIFIED);
  close_up(u);

  /* Without the client certificate the server refuses the handshake. */
  c.cert_file = c.key_file = NULL;
  c.mode = UPSTREAM_UNARY;
  c.timeout_ms = c.breaker.max_timeout_ms = 1000;
  u = open_up(&c);
  g = fetch(u, 100, 9);
  cr_assert_neq(g.r.err, 0);
  close_up(u);

  /* An insecure client against a TLS server fails too. */
  c.insecure = 1;
  u = open_up(&c);
  g = fetch(u, 100, 9);
  cr_assert_neq(g.r.err, 0);
  close_up(u);
  upserver_stop(&s, 0);
}

/* One fault flag: start the server with it, fetch (and draw), check. */
static void
fault(const char *flag, enum upstream_mode mode, int want_fetch,
      int want_draw, int want_echo)
{
  struct upserver s;
  struct upstream_conf c;
  struct upstream *u;
  struct got g;

  upserver_start(&s, "127.0.0.1:0", flag, NULL);
  conf_init(&c, s.addr, mode);
  c.timeout_ms = c.breaker.max_timeout_ms = 400;
  c.retry_count = 0;
  u = open_up(&c);
  g = fetch(u, 256, 11);
  cr_assert_eq(g.r.err, want_fetch, "%s fetch: %d (%s)", flag, g.r.err,
               g.r.detail);
  if (want_fetch == 0)
    cr_assert_eq(g.r.echo, want_echo, "%s", flag);
  g = draw(u, 12, "", 100);
  cr_assert_eq(g.r.err, want_draw, "%s draw: %d (%s)", flag, g.r.err,
               g.r.detail);
  close_up(u);
  upserver_stop(&s, 0);
}

/* A unary call carries one reply: no echo is served, unverified.  On a
   bidi stream a reply that echoes nothing cannot be told from another
   request's: with check_echo it fails the stream (and quarantines the
   upstream); check_echo false matches it to the oldest request, as the
   reference does. */
Test(upstream, fault_no_echo_serves_unverified)
{
  struct upserver s;
  struct upstream_conf c;
  struct upstream *u;
  struct got g;

  fault("--no-echo", UPSTREAM_UNARY, 0, 0, 0);
  fault("--no-echo", UPSTREAM_BIDI_STREAMING, -EPROTO, -EPROTO, 0);
  upserver_start(&s, "127.0.0.1:0", "--no-echo", NULL);
  conf_init(&c, s.addr, UPSTREAM_BIDI_STREAMING);
  c.check_echo = 0;
  u = open_up(&c);
  g = fetch(u, 256, 11);
  cr_assert_eq(g.r.err, 0, "%s", g.r.detail);
  cr_assert_eq(g.r.echo, UPSTREAM_ECHO_NONE);
  close_up(u);
  upserver_stop(&s, 0);
}

Test(upstream, fault_wrong_echo_fails_the_fetch)
{
  fault("--wrong-echo", UPSTREAM_UNARY, -EPROTO, -EPROTO, 0);
  fault("--wrong-echo", UPSTREAM_BIDI_STREAMING, -EPROTO, -EPROTO, 0);
}

/* One qrs-entropy-server started with flag and, for each mode, an
   upstream on it (retry_count 0, check_echo as given) for check. */
static void
each_mode(const char *flag, int check_echo,
          void (*check)(struct upstream *u, enum upstream_mode m))
{
  static const enum upstream_mode modes[] = {
    UPSTREAM_UNARY, UPSTREAM_SERVER_STREAMING, UPSTREAM_BIDI_STREAMING,
  };
  struct upserver s;
  struct upstream_conf c;
  struct upstream *u;
  size_t k;

  upserver_start(&s, "127.0.0.1:0", flag, NULL);
  for (k = 0; k < sizeof(modes) / sizeof(modes[0]); k++) {
    conf_init(&c, s.addr, modes[k]);
    c.retry_count = 0;
    c.check_echo = check_echo;
    u = open_up(&c);
    check(u, modes[k]);
    close_up(u);
  }
  upserver_stop(&s, 0);
}

static void
no_nonce_wrong_echo_fails(struct upstream *u, enum upstream_mode m)
{
  struct got g;

  g = fetch(u, 64, 0);
  cr_assert_eq(g.r.err, -EPROTO, "%s: %d %s", upstream_mode_name(m),
               g.r.err, g.r.detail);
}

/* A request without a nonce carries a fresh sequence id too, on every
   mode, and its reply must echo it (before, anything was taken). */
Test(upstream, a_request_without_a_nonce_carries_an_id_its_reply_must_echo)
{
  each_mode("--wrong-echo", 1, no_nonce_wrong_echo_fails);
}

static void
wrong_echo_is_a_mismatch(struct upstream *u, enum upstream_mode m)
{
  struct got g;

  g = fetch(u, 256, 11);
  cr_assert_eq(g.r.err, 0, "%s: %s", upstream_mode_name(m), g.r.detail);
  cr_assert_eq(g.r.echo, UPSTREAM_ECHO_MISMATCH, "%s: echo %d",
               upstream_mode_name(m), g.r.echo);
  if (m != UPSTREAM_SERVER_STREAMING) {
    g = draw(u, 12, "", 100);
    cr_assert_eq(g.r.err, 0, "%s draw: %s", upstream_mode_name(m),
                 g.r.detail);
    cr_assert_eq(g.r.echo, UPSTREAM_ECHO_MISMATCH);
  }
  assert_no_nonce_no_echo(u);
}

/* check_echo: false serves a reply that echoes another id (a server
   whose field 2 is not an echo), and says so: a mismatch, not "none". */
Test(upstream, wrong_echo_without_check_echo_is_served_as_a_mismatch)
{
  each_mode("--wrong-echo", 0, wrong_echo_is_a_mismatch);
}

Test(upstream, fault_short_and_empty_data_fail_validation)
{
  fault("--short-data", UPSTREAM_UNARY, -EPROTO, 0, 0);
  fault("--empty-data", UPSTREAM_SERVER_STREAMING, -EPROTO, -EPROTO, 0);
  fault("--empty-data", UPSTREAM_BIDI_STREAMING, -EPROTO, -EPROTO, 0);
}

Test(upstream, fault_bad_u_fails_the_draw)
{
  fault("--bad-u", UPSTREAM_UNARY, 0, -EPROTO, 1);
}

Test(upstream, fault_stall_times_out)
{
  fault("--stall", UPSTREAM_UNARY, -ETIMEDOUT, -ETIMEDOUT, 0);
  fault("--stall", UPSTREAM_BIDI_STREAMING, -ETIMEDOUT, -ETIMEDOUT, 0);
}

Test(upstream, fault_error_rate_one_fails_every_call)
{
  fault("--error-rate=1", UPSTREAM_UNARY, -EHOSTUNREACH, -EHOSTUNREACH, 0);
  fault("--error-rate=1", UPSTREAM_BIDI_STREAMING, -EHOSTUNREACH,
        -EHOSTUNREACH, 0);
}

Test(upstream, fault_refuse_purity_is_unimplemented_for_draws_only)
{
  fault("--refuse-purity", UPSTREAM_UNARY, 0, -ENOSYS, 1);
  {
    struct upserver s;
    struct upstream_conf c;
    struct upstream *u;
    struct got g;

    /* A missing PurityService is remembered and is no breaker failure. */
    upserver_start(&s, "127.0.0.1:0", "--refuse-purity", NULL);
    conf_init(&c, s.addr, UPSTREAM_UNARY);
    c.breaker.max_consecutive_failures = 1;
    u = open_up(&c);
    cr_assert_not(upstream_draws_unsupported(u));
    g = draw(u, 1, "", 0);
    cr_assert_eq(g.r.err, -ENOSYS);
    cr_assert(upstream_draws_unsupported(u));
    cr_assert_not(upstream_blocking(u));
    g = fetch(u, 10, 2);
    cr_assert_eq(g.r.err, 0);
    close_up(u);
    upserver_stop(&s, 0);
  }
  fault("--refuse-purity", UPSTREAM_BIDI_STREAMING, 0, -ENOSYS, 1);
}

Test(upstream, no_attempt_outlives_the_callers_deadline)
{
  struct upserver s;
  struct upstream_conf c;
  struct upstream *u;
  struct got g;
  uint64_t t0;

  upserver_start(&s, "127.0.0.1:0", "--stall", NULL);
  conf_init(&c, s.addr, UPSTREAM_UNARY);
  c.retry_count = 5;
  u = open_up(&c);
  memset(&g, 0, sizeof(g));
  t0 = uv_hrtime();
  cr_assert_eq(upstream_fetch(u, 64, 1, (int64_t)(t0 + 300000000), on_got,
                              &g), 0);
  wait_for(&g.done, 10000);
  cr_assert_eq(g.r.err, -ETIMEDOUT, "%d", g.r.err);
  cr_assert_lt((double)(uv_hrtime() - t0) / 1e6, 1500.0,
               "waited past the deadline plus the retries' budget");
  cr_assert_eq(g.r.attempts, 1);
  close_up(u);
  upserver_stop(&s, 0);
}

/* A loopback port that never completes a handshake: a listener with a
   backlog of 0 whose queue is filled by connections nobody accepts, so
   the kernel drops every further SYN (a black-holed host).  fds[0] is
   the listener; close all three. */
static void
black_hole(char *addr, size_t len, int fds[3])
{
  struct sockaddr_in sa;
  socklen_t sl = sizeof(sa);
  int i;

  fds[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  cr_assert_geq(fds[0], 0);
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  cr_assert_eq(bind(fds[0], (struct sockaddr *)&sa, sizeof(sa)), 0);
  cr_assert_eq(listen(fds[0], 0), 0);
  cr_assert_eq(getsockname(fds[0], (struct sockaddr *)&sa, &sl), 0);
  for (i = 1; i < 3; i++) {
    fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    cr_assert_geq(fds[i], 0);
    (void)connect(fds[i], (struct sockaddr *)&sa, sizeof(sa));
  }
  usleep(50000);                      /* the handshakes that can complete */
  snprintf(addr, len, "127.0.0.1:%u", (unsigned)ntohs(sa.sin_port));
}

/* A loopback port nothing listens on (connections are refused). */
static void
refused_port(char *addr, size_t len)
{
  int fds[3], i;

  black_hole(addr, len, fds);
  for (i = 0; i < 3; i++)
    close(fds[i]);
}

/* The TCP pre-probe (as the reference's, third_party/qr-sampler
   .../entropy/qgrpc/preprobe.py): a black-holed upstream fails the attempt
   after the 0.5 s connect probe, not after the call timeout, and for 5 s
   afterwards every attempt fails at once without a new probe.  Without the
   probe the same fetch runs into its call deadline. */
Test(upstream, preprobe_fails_a_black_holed_host_fast_then_backs_off)
{
  struct upstream_conf c;
  struct upstream_stats st;
  struct upstream *u;
  struct got g;
  char addr[64];
  int fds[3], i;

  black_hole(addr, sizeof(addr), fds);
  conf_init(&c, addr, UPSTREAM_UNARY);
  c.timeout_ms = c.breaker.max_timeout_ms = 4000;
  c.retry_count = 0;
  c.breaker.max_consecutive_failures = 100;   /* keep the circuit shut */
  u = open_up(&c);
  g = fetch(u, 64, 1);
  cr_assert_eq(g.r.err, -EHOSTUNREACH, "%d (%s)", g.r.err, g.r.detail);
  cr_assert_not_null(strstr(g.r.detail, "pre-probe"), "%s", g.r.detail);
  cr_assert_not_null(strstr(g.r.detail, "no connection within 500 ms"),
                     "%s", g.r.detail);
  /* Within the backoff: no new probe, no call. */
  for (i = 0; i < 3; i++) {
    g = fetch(u, 64, 2 + (uint64_t)i);
    cr_assert_eq(g.r.err, -EHOSTUNREACH);
    cr_assert_not_null(strstr(g.r.detail, "backoff in effect"), "%s",
                       g.r.detail);
  }
  upstream_stats(u, &st);
  cr_assert_eq(st.preprobes, 1);
  cr_assert_eq(st.preprobe_failures, 1);
  close_up(u);

  /* The same without the probe: the call itself runs into its deadline. */
  c.preprobe = 0;
  c.timeout_ms = c.breaker.max_timeout_ms = 1000;
  u = open_up(&c);
  g = fetch(u, 64, 9);
  cr_assert_eq(g.r.err, -ETIMEDOUT, "%d (%s)", g.r.err, g.r.detail);
  upstream_stats(u, &st);
  cr_assert_eq(st.preprobes, 0);
  close_up(u);
  for (i = 0; i < 3; i++)
    close(fds[i]);
}

/* Behind gRPC's HTTP proxy a direct connect says nothing about the path
   gRPC takes (a host may be reachable only through the proxy): TCP
   targets are not probed then; the call itself decides. */
Test(upstream, no_preprobe_when_grpc_goes_through_a_proxy)
{
  struct upstream_conf c;
  struct upstream_stats st;
  struct upstream *u;
  struct got g;
  char addr[64];

  refused_port(addr, sizeof(addr));   /* a probe would fail */
  cr_assert_eq(setenv("grpc_proxy", "http://127.0.0.1:9", 1), 0);
  conf_init(&c, addr, UPSTREAM_UNARY);
  c.timeout_ms = c.breaker.max_timeout_ms = 1000;
  c.retry_count = 0;
  u = open_up(&c);
  g = fetch(u, 64, 1);
  cr_assert_lt(g.r.err, 0);
  cr_assert_null(strstr(g.r.detail, "pre-probe"), "%s", g.r.detail);
  upstream_stats(u, &st);
  cr_assert_eq(st.preprobes, 0);
  close_up(u);
  unsetenv("grpc_proxy");
}

/* A refused port and a unix socket nobody listens on fail the probe with
   the reason; a reachable upstream is probed once, then not while its
   fetches succeed. */
Test(upstream, preprobe_reports_refusal_and_stays_quiet_while_healthy)
{
  struct upserver s;
  struct upstream_conf c;
  struct upstream_stats st;
  struct upstream *u;
  struct got g;
  char addr[300];
  int i;

  refused_port(addr, sizeof(addr));
  conf_init(&c, addr, UPSTREAM_BIDI_STREAMING);
  c.retry_count = 0;
  u = open_up(&c);
  g = fetch(u, 64, 1);
  cr_assert_eq(g.r.err, -EHOSTUNREACH);
  cr_assert_not_null(strstr(g.r.detail, "connection refused"), "%s",
                     g.r.detail);
  close_up(u);

  snprintf(addr, sizeof(addr), "unix:%s/nobody.sock", C.dir);
  conf_init(&c, addr, UPSTREAM_UNARY);
  c.retry_count = 0;
  u = open_up(&c);
  g = draw(u, 1, "", 100);
  cr_assert_eq(g.r.err, -EHOSTUNREACH);
  cr_assert_not_null(strstr(g.r.detail, "nobody.sock"), "%s", g.r.detail);
  cr_assert_not_null(strstr(g.r.detail, "pre-probe"), "%s", g.r.detail);
  close_up(u);

  snprintf(addr, sizeof(addr), "unix:%s/q.sock", C.dir);
  upserver_start(&s, addr, NULL);
  conf_init(&c, s.addr, UPSTREAM_BIDI_STREAMING);
  u = open_up(&c);
  for (i = 0; i < 5; i++) {
    g = fetch(u, 64, 10 + (uint64_t)i);
    cr_assert_eq(g.r.err, 0, "%s", g.r.detail);
  }
  upstream_stats(u, &st);
  cr_assert_eq(st.preprobes, 1, "probed %llu times",
               (unsigned long long)st.preprobes);
  cr_assert_eq(st.preprobe_failures, 0);
  close_up(u);
  upserver_stop(&s, 0);
}

/* A request queued behind an outstanding one on the bidi stream that
   times out before it was written leaves the FIFO (nothing was sent, no
   reply will come); the one that was sent leaves a tombstone that its
   late reply lands on, and the stream goes on.  (Deadlines of the jobs
   make the timeouts; a first failure makes the rate-limited channel
   reset happen before, so that the stream under test survives.) */
static struct got *
start_fetch(struct upstream *u, struct got *g, uint64_t nonce, int ms)
{
  memset(g, 0, sizeof(*g));
  cr_assert_eq(upstream_fetch(u, 32, nonce, (int64_t)(uv_hrtime() +
                              (uint64_t)ms * 1000000), on_got, g), 0);
  return g;
}

Test(upstream, bidi_requests_timing_out_before_and_after_the_write)
{
  struct upserver s;
  struct upstream_conf c;
  struct upstream_stats st;
  struct upstream *u;
  struct got a, b, x;

  upserver_start(&s, "127.0.0.1:0", "--latency-ms", "300", NULL);
  conf_init(&c, s.addr, UPSTREAM_BIDI_STREAMING);
  c.retry_count = 0;
  c.breaker.max_consecutive_failures = 100;
  u = open_up(&c);
  x = fetch(u, 32, 1);                /* connects; 300 ms */
  cr_assert_eq(x.r.err, 0, "%s", x.r.detail);
  wait_for(&start_fetch(u, &x, 2, 10)->done, 5000);
  cr_assert_eq(x.r.err, -ETIMEDOUT, "%s", x.r.detail);   /* + a reset */

  start_fetch(u, &a, 3, 150);         /* written at once */
  start_fetch(u, &b, 4, 50);          /* waits for a's batch */
  wait_for(&b.done, 5000);
  cr_assert_eq(b.r.err, -ETIMEDOUT, "%d %s", b.r.err, b.r.detail);
  wait_for(&a.done, 5000);
  cr_assert_eq(a.r.err, -ETIMEDOUT, "%d %s", a.r.err, a.r.detail);
  sleep_loop(500);                    /* a's late reply, then the pump */
  upstream_stats(u, &st);
  cr_assert_eq(st.timeouts, 3);
  cr_assert_eq(st.channel_resets, 1);
  close_up(u);
  upserver_stop(&s, 0);
}

Test(upstream, fault_latency_is_waited_for)
{
  struct upserver s;
  struct upstream_conf c;
  struct upstream *u;
  struct got g;

  upserver_start(&s, "127.0.0.1:0", "--latency-ms", "60", NULL);
  conf_init(&c, s.addr, UPSTREAM_UNARY);
  u = open_up(&c);
  g = fetch(u, 64, 3);
  cr_assert_eq(g.r.err, 0, "%s", g.r.detail);
  cr_assert_geq(g.r.elapsed_ms, 60.0);
  close_up(u);
  upserver_stop(&s, 0);
}

Test(upstream, fault_drop_after_ends_the_server)
{
  struct upserver s;
  struct upstream_conf c;
  struct upstream *u;
  struct got g;
  int i;

  upserver_start(&s, "127.0.0.1:0", "--drop-after", "3", NULL);
  conf_init(&c, s.addr, UPSTREAM_BIDI_STREAMING);
  c.retry_count = 0;
  u = open_up(&c);
  for (i = 0; i < 3; i++) {
    g = fetch(u, 64, 1 + (uint64_t)i);
    cr_assert_eq(g.r.err, 0, "%d: %s", i, g.r.detail);
  }
  g = fetch(u, 64, 9);
  cr_assert_neq(g.r.err, 0);
  cr_assert_eq(upserver_wait(&s, 10000), 0, "server did not exit");
  close_up(u);
}

Test(upstream, the_breaker_opens_then_recovers_after_a_restart)
{
  struct upserver s;
  struct upstream_conf c;
  struct upstream *u;
  struct upstream_stats st;
  struct got g;
  char l[128];
  int i;

  snprintf(l, sizeof(l), "unix:%s/s.sock", C.dir);
  upserver_start(&s, l, NULL);
  conf_init(&c, s.addr, UPSTREAM_BIDI_STREAMING);
  c.retry_count = 0;
  c.timeout_ms = c.breaker.max_timeout_ms = 500;
  c.breaker.max_consecutive_failures = 2;
  c.breaker.recovery_window_s = 0.5;
  c.breaker.recovery_window_max_s = 1.0;
  u = open_up(&c);
  g = fetch(u, 64, 1);
  cr_assert_eq(g.r.err, 0, "%s", g.r.detail);

  upserver_stop(&s, 1);
  for (i = 0; i < 2; i++) {
    g = fetch(u, 64, 2);
    cr_assert_neq(g.r.err, 0);
    cr_assert_neq(g.r.err, -EAGAIN);
  }
  upstream_stats(u, &st);
  cr_assert_str_eq(st.breaker_state, "open");
  cr_assert(upstream_blocking(u));
  g = fetch(u, 64, 3);
  cr_assert_eq(g.r.err, -EAGAIN, "%d", g.r.err);

  upserver_start(&s, l, NULL);
  sleep_loop(600);
  upstream_stats(u, &st);
  cr_assert_str_eq(st.breaker_state, "half-open");
  g = fetch(u, 64, 4);
  cr_assert_eq(g.r.err, 0, "half-open trial: %s", g.r.detail);
  cr_assert_eq(g.r.echo, UPSTREAM_ECHO_VERIFIED);
  upstream_stats(u, &st);
  cr_assert_str_eq(st.breaker_state, "closed");
  cr_assert_geq(st.channel_resets, 1);
  close_up(u);
  upserver_stop(&s, 0);
}

/* The same server answers Python grpc (python3-grpcio) on all four RPCs;
   the compat endpoint test runs this client against qrsd. */
Test(upstream, python_grpc_calls_all_four_rpcs)
{
  struct upserver s;
  char key[128], cmd[512];

  snprintf(key, sizeof(key), "%s/key", C.dir);
  write_key_file(key, "py-key-123\n");
  upserver_start(&s, "127.0.0.1:0", "--api-key-file", key, NULL);
  snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s/integration/grpc_client.py"
           " %s py-key-123", QRS_TEST_SOURCE_DIR, s.addr);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
  upserver_stop(&s, 0);
}

/* ---- a real qrsd against a hostile upstream ---------------------------- */

/* These suites start the hostile server (a gRPC server in a child) before
   anything in this process touches gRPC: no grpc_init() in their init. */
static struct daemon D;
static struct upserver H;

/* Also after a failed assertion: no qrsd or server left behind. */
static void
hostile_teardown(void)
{
  if (D.pid > 0)
    daemon_stop(&D);
  upserver_stop(&H, 1);
  if (D.dir[0])
    daemon_cleanup(&D);
}

TestSuite(hostile, .fini = hostile_teardown, .timeout = 120);

/* The hostile server on a unix socket and a qrsd whose source q is a
   grpc source on it with fallback system; extra: more of q's keys. */
static void
hostile_qrsd(enum upserver_hostile mode, const char *extra)
{
  char yaml[2048], l[128];

  daemon_prepare(&D, NULL);
  snprintf(l, sizeof(l), "unix:%s/h.sock", D.dir);
  upserver_hostile_start(&H, l, mode);
  snprintf(yaml, sizeof(yaml),
           "state_dir: %s\n"
           "sources:\n"
           "  system: { type: system }\n"
           "  q: { type: grpc, target: \"%s\", fallback: system, "
           "retry_count: 0, timeout_ms: %d, %s }\n",
           D.dir, H.addr, 2000 * test_time_scale(), extra);
  daemon_write_conf(&D, yaml);
  daemon_start(&D, NULL);
}

struct hdraw {
  double u;
  int fallback;
  char served_by[64];
};

/* n draws from q with plain `qrsctl draw` (no commitment, nonce 0; up to
   16 in flight), into d[]. */
static void
qrsctl_draws(struct hdraw *d, int n)
{
  struct json_object *j, *o, *v;
  char out[65536], err[4096], num[16], *line, *save = NULL;
  int i = 0;

  snprintf(num, sizeof(num), "%d", n);
  cr_assert_eq(run_qrsctl(D.sock, out, sizeof(out), err, sizeof(err),
                          "--json", "draw", "-n", num, "--source", "q",
                          NULL), 0, "%s", err);
  for (line = strtok_r(out, "\n", &save); line && i < n;
       line = strtok_r(NULL, "\n", &save)) {
    j = json_tokener_parse(line);
    cr_assert_not_null(j, "%s", line);
    o = j;
    if (json_object_is_type(j, json_type_array))
      o = json_object_array_get_idx(j, 0);
    cr_assert(json_object_object_get_ex(o, "u", &v), "%s", line);
    d[i].u = json_object_get_double(v);
    cr_assert(json_object_object_get_ex(o, "fallback", &v), "%s", line);
    d[i].fallback = json_object_get_boolean(v);
    cr_assert(json_object_object_get_ex(o, "served_by", &v), "%s", line);
    snprintf(d[i].served_by, sizeof(d[i].served_by), "%s",
             json_object_get_string(v));
    json_object_put(j);
    i++;
  }
  cr_assert_eq(i, n, "%d draws in: %s", i, out);
}

/* Source q's entry of `qrsctl --json sources`: its state and last
   failure. */
static void
source_q(char *state, size_t slen, char *last, size_t llen)
{
  struct json_object *j, *a, *q, *v;
  char out[65536], err[4096];
  size_t k;

  cr_assert_eq(run_qrsctl(D.sock, out, sizeof(out), err, sizeof(err),
                          "--json", "sources", NULL), 0, "%s", err);
  j = json_tokener_parse(out);
  cr_assert_not_null(j, "%s", out);
  cr_assert(json_object_object_get_ex(j, "sources", &a), "%s", out);
  for (k = 0; k < json_object_array_length(a); k++) {
    q = json_object_array_get_idx(a, k);
    cr_assert(json_object_object_get_ex(q, "name", &v));
    if (strcmp(json_object_get_string(v), "q"))
      continue;
    cr_assert(json_object_object_get_ex(q, "state", &v), "%s", out);
    snprintf(state, slen, "%s", json_object_get_string(v));
    cr_assert(json_object_object_get_ex(q, "last_failure", &v), "%s", out);
    snprintf(last, llen, "%s", json_object_get_string(v));
  }
  json_object_put(j);
}

/* q on the hostile server in mode (q's keys: extra), then n draws
   through qrsd from q: no u twice; at most max_upstream served by q (the
   upstream, before it broke the protocol), every other one labelled
   fallback, served by system; q degraded (qrsctl health says so), its
   last failure containing why. */
static void
expect_failover(enum upserver_hostile mode, const char *extra, int n,
                int max_upstream, const char *why)
{
  struct hdraw d[16];
  char st[64], last[256], out[8192], err[1024];
  int i, k, upstream = 0;

  cr_assert_leq(n, 16);
  hostile_qrsd(mode, extra);
  qrsctl_draws(d, n);
  for (i = 0; i < n; i++) {
    for (k = 0; k < i; k++)
      cr_assert_neq(d[i].u, d[k].u, "draw %d repeats the u of draw %d "
                    "(%.17g, served by %s and %s)", i, k, d[i].u,
                    d[i].served_by, d[k].served_by);
    upstream += !d[i].fallback;
    cr_assert_str_eq(d[i].served_by, d[i].fallback ? "system" : "q",
                     "draw %d", i);
  }
  cr_assert_leq(upstream, max_upstream, "%d of %d draws served by q",
                upstream, n);
  source_q(st, sizeof(st), last, sizeof(last));
  cr_assert_str_eq(st, "degraded");
  cr_assert_not_null(strstr(last, why), "q's last failure: %s", last);
  cr_assert_eq(run_qrsctl(D.sock, out, sizeof(out), err, sizeof(err),
                          "health", NULL), 1, "%s", out);
  cr_assert_not_null(strstr(out, why), "%s", out);
  cr_assert_eq(daemon_stop(&D), 0, "qrsd's exit (log %s)", D.log);
}

/* One hostile mode through qrsd (expect_failover()'s arguments). */
struct failover_case {
  enum upserver_hostile mode;
  char extra[64];
  int n, max_upstream;
  char why[64];
};

/* - The reviewer's case: plain draws (no nonce) from a bidi upstream
     that sends every reply twice gave three identical pairs of u, all
     served by q, not fallback, health healthy.  Now the second copy
     fails the stream and quarantines q: every draw after it is the
     fallback's.  An extra reply is the same to qrsd.
   - A server that answers the next id ahead of time (a counter's would
     be id + 1) answers a request never sent: the ids of plain draws are
     random.
   - A reply echoing 0 on a stream cannot be told from another's.
   - A dead QRNG (constant zero bytes) was served as quantum (u = 1e-10,
     not fallback).  Its bytes fail the repetition count test at once,
     on unary calls and on a stream. */
ParameterizedTestParameters(hostile, every_draw_after_a_bad_reply_fails_over)
{
  static struct failover_case cases[] = {
    { UPSERVER_DUPLICATE, "mode: bidi_streaming", 6, 1,
      "second reply to request" },
    { UPSERVER_EXTRA, "mode: bidi_streaming", 6, 1,
      "second reply to request" },
    { UPSERVER_UNSENT, "mode: bidi_streaming", 6, 1,
      "which no request on the stream carries" },
    { UPSERVER_ZERO_ECHO, "mode: bidi_streaming", 6, 0,
      "echoing no sequence_id" },
    { UPSERVER_CONSTANT, "mode: unary", 8, 0, "repetition count test" },
    { UPSERVER_CONSTANT, "mode: bidi_streaming", 8, 0,
      "repetition count test" },
  };

  return cr_make_param_array(struct failover_case, cases,
                             sizeof(cases) / sizeof(cases[0]));
}

ParameterizedTest(struct failover_case *fc, hostile,
                  every_draw_after_a_bad_reply_fails_over)
{
  expect_failover(fc->mode, fc->extra, fc->n, fc->max_upstream, fc->why);
}

/* min_entropy: 0 turns the tests off: the constant bytes are served
   (this is what the knob is for: an upstream known not to be full
   entropy, tested elsewhere). */
Test(hostile, min_entropy_zero_turns_the_health_tests_off)
{
  struct hdraw d[2];

  hostile_qrsd(UPSERVER_CONSTANT, "mode: unary, min_entropy: 0");
  qrsctl_draws(d, 2);
  cr_assert_eq(d[0].fallback, 0);
  cr_assert_str_eq(d[0].served_by, "q");
  cr_assert_lt(d[0].u, 1e-6);
  cr_assert_eq(daemon_stop(&D), 0, "qrsd's exit (log %s)", D.log);
}

/* ---- the upstream client against a hostile upstream ------------------- */

/* gRPC starts in this process after the hostile server's child. */
static char hostile_sock[64];
static struct upstream *hostile_u;    /* the test's, until close_up() */

static void
hostile_up_teardown(void)
{
  /* A failed assertion skipped close_up(): without this the loop would
     run forever in teardown(). */
  if (hostile_u)
    close_up(hostile_u);
  hostile_u = NULL;
  teardown();
  upserver_stop(&H, 1);
  unlink(hostile_sock);
}

TestSuite(hostile_up, .fini = hostile_up_teardown, .timeout = 60);

/* The hostile server, then gRPC here and an upstream client of mode m
   on it (c: conf_init()'s, adjust may change it first). */
static struct upstream *
hostile_up(enum upserver_hostile mode, enum upstream_mode m,
           struct upstream_conf *c, void (*adjust)(struct upstream_conf *))
{
  char l[128];

  snprintf(hostile_sock, sizeof(hostile_sock), "/tmp/qrs-hostile-%ld.sock",
           (long)getpid());
  unlink(hostile_sock);
  snprintf(l, sizeof(l), "unix:%s", hostile_sock);
  upserver_hostile_start(&H, l, mode);
  setup();
  conf_init(c, H.addr, m);
  c->retry_count = 0;
  if (adjust)
    adjust(c);
  hostile_u = open_up(c);
  return hostile_u;
}

static void
hostile_close(void)
{
  close_up(hostile_u);
  hostile_u = NULL;
}

static void
split_at_300(struct upstream_conf *c)
{
  c->quota.max_bytes_per_request = 300;
}

/* A fetch split into parts that all carried the nonce: the second copy
   of the first part's reply went to the second part (the same echo), so
   one fetch held the same 300 bytes twice.  The parts now carry ids of
   their own; the copy fails the stream. */
Test(hostile_up, the_parts_of_a_split_fetch_never_take_each_others_reply)
{
  struct upstream_conf c;
  struct upstream *u;
  struct got g;
  int i, k;

  u = hostile_up(UPSERVER_DUPLICATE, UPSTREAM_BIDI_STREAMING, &c,
                 split_at_300);
  g = fetch(u, 1200, 42);
  if (g.r.err == 0) {
    for (i = 0; i < 4; i++)
      for (k = 0; k < i; k++)
        cr_assert_neq(memcmp(g.data + i * 300, g.data + k * 300, 300), 0,
                      "part %d holds the bytes of part %d", i, k);
  } else {
    cr_assert_eq(g.r.err, -EPROTO, "%d %s", g.r.err, g.r.detail);
  }
  hostile_close();
}

/* The violation is counted and quarantines the upstream: the next fetch
   fails at once, saying why, before anything goes upstream. */
Test(hostile_up, a_stream_violation_is_counted_and_quarantines)
{
  struct upstream_conf c;
  struct upstream_stats st;
  struct upstream *u;
  struct got g;
  char why[256];

  u = hostile_up(UPSERVER_EXTRA, UPSTREAM_BIDI_STREAMING, &c, NULL);
  g = fetch(u, 64, 0);
  cr_assert_eq(g.r.err, 0, "%s", g.r.detail);  /* the first reply is fine */
  /* The extra reply is read with the next request outstanding. */
  g = fetch(u, 64, 0);
  cr_assert_eq(g.r.err, -EPROTO, "%d %s", g.r.err, g.r.detail);
  cr_assert_not_null(strstr(g.r.detail, "second reply to request"), "%s",
                     g.r.detail);
  cr_assert(upstream_distrusted(u, why, sizeof(why)));
  cr_assert_not_null(strstr(why, "second reply to request"), "%s", why);
  upstream_stats(u, &st);
  cr_assert_eq(st.stream_violations, 1);
  cr_assert(st.quarantined);
  g = fetch(u, 64, 7);
  cr_assert_eq(g.r.err, -EPROTO, "%d %s", g.r.err, g.r.detail);
  cr_assert_not_null(strstr(g.r.detail, "quarantined"), "%s", g.r.detail);
  upstream_stats(u, &st);
  cr_assert_eq(st.calls, 2, "the quarantined fetch went upstream");
  hostile_close();
}

/* A unary or server-streaming call carries one reply: the copies,
   extras and unsolicited replies after it are never read; every fetch
   gets bytes of its own. */
static void
one_reply_per_call(enum upserver_hostile mode, enum upstream_mode m)
{
  struct upstream_conf c;
  struct upstream *u;
  struct got g[5];
  int i, k;

  u = hostile_up(mode, m, &c, NULL);
  for (i = 0; i < 5; i++) {
    g[i] = fetch(u, 64, i % 2 ? 0 : 100 + (uint64_t)i);
    cr_assert_eq(g[i].r.err, 0, "%d: %s", i, g[i].r.detail);
    for (k = 0; k < i; k++)
      cr_assert_neq(memcmp(g[i].data, g[k].data, 64), 0);
  }
  hostile_close();
}

Test(hostile_up, server_streaming_reads_one_reply_per_call)
{
  one_reply_per_call(UPSERVER_DUPLICATE, UPSTREAM_SERVER_STREAMING);
}

Test(hostile_up, unary_reads_one_reply_per_call)
{
  one_reply_per_call(UPSERVER_UNSENT, UPSTREAM_UNARY);
}

/* No echo on a unary call: served, unverified (the call has one reply). */
Test(hostile_up, zero_echo_on_a_unary_call_is_served_unverified)
{
  struct upstream_conf c;
  struct upstream *u;
  struct got g;

  u = hostile_up(UPSERVER_ZERO_ECHO, UPSTREAM_UNARY, &c, NULL);
  g = fetch(u, 64, 5);
  cr_assert_eq(g.r.err, 0, "%s", g.r.detail);
  cr_assert_eq(g.r.echo, UPSTREAM_ECHO_NONE);
  hostile_close();
}

/* ---- gRPC outlives every upstream's channel at shutdown ---------------- */

/* Work that holds a threadpool thread until gate is written to. */
static int gate[2];

static void
hold_thread(uv_work_t *w)
{
  char c;

  (void)w;
  while (read(gate[0], &c, 1) < 0 && errno == EINTR)
    ;
}

static void
held_done(uv_work_t *w, int status)
{
  (void)status;
  free(w);
}

/* qrsd's stop: the source frees its upstream, whose final quota write
   (on the threadpool) holds it, then puts the shared bridge, whose close
   ended gRPC (grpc_shutdown()) while the upstream's channel and
   credentials were still to be released, at times a crash at SIGTERM.
   gRPC must stay up until the upstream is gone. */
Test(upstream_stop, grpc_stays_up_until_a_freed_upstream_is_gone,
     .timeout = 30)
{
  struct upstream_conf c;
  struct upstream *u;
  struct gbridge *br;
  uv_loop_t loop;
  uv_work_t *w;
  char dir[64], cmd[128], err[256];
  const char *env;
  int i, nthreads;

  snprintf(dir, sizeof(dir), "/tmp/qrs-upstop-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  cr_assert_eq(uv_loop_init(&loop), 0);
  br = gbridge_shared_get(&loop);
  cr_assert_not_null(br);
  conf_init(&c, "127.0.0.1:1", UPSTREAM_BIDI_STREAMING);
  c.preprobe = 0;
  c.state_dir = dir;                  /* a final quota write at the free */
  cr_assert_eq(upstream_new(br, &c, &u, err, sizeof(err)), 0, "%s", err);
  /* Every threadpool thread busy: the final write waits. */
  cr_assert_eq(pipe(gate), 0);
  env = getenv("UV_THREADPOOL_SIZE");
  nthreads = env ? atoi(env) : 4;
  for (i = 0; i < nthreads; i++) {
    w = calloc(1, sizeof(*w));
    cr_assert_not_null(w);
    cr_assert_eq(uv_queue_work(&loop, w, hold_thread, held_done), 0);
  }
  upstream_free(u);
  gbridge_shared_put();
  /* The bridge closes within a few turns of the loop. */
  for (i = 0; i < 50; i++) {
    uv_run(&loop, UV_RUN_NOWAIT);
    cr_assert(grpc_is_initialized(), "gRPC was shut down while a freed "
              "upstream still held its channel and credentials");
    usleep(10000);
  }
  for (i = 0; i < nthreads; i++)
    cr_assert_eq(write(gate[1], "x", 1), 1);
  uv_run(&loop, UV_RUN_DEFAULT);
  cr_assert_not(grpc_is_initialized(), "the upstream kept gRPC up");
  close(gate[0]);
  close(gate[1]);
  cr_assert_eq(uv_loop_close(&loop), 0);
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  cr_assert_eq(system(cmd), 0);
}
