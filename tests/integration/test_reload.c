/* Live reload of a real qrsd's configuration: qrsctl reload's RELOAD and
   SIGHUP re-read the file; a limit changed takes effect on a connection
   already open; an invalid file is refused, naming file, line and key, and the
   old configuration keeps serving; keys that need a restart keep their value
   and are reported so; draws in flight while reloads happen all complete; the
   status file and STATUS carry the hash of the text in use.  (A peer that is
   not an admin: reload.sh.) */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <openssl/evp.h>
#include <qrs/client.h>

#include "harness.h"
#include "harness_client.h"
#include "upserver.h"

static struct daemon D;

static void
teardown(void)
{
  if (D.pid > 0)
    daemon_stop(&D);
  daemon_cleanup(&D);
}

TestSuite(reload, .fini = teardown, .timeout = 120);

/* The config file's text: a status file in the test's directory, then
   extra. */
static void
write_conf(const char *extra)
{
  char text[2048];

  snprintf(text, sizeof(text), "status_file: %s/status.json\n%s", D.dir,
           extra);
  daemon_write_conf(&D, text);
}

static void
start(const char *extra)
{
  daemon_prepare(&D, NULL);
  write_conf(extra);
  daemon_start(&D, NULL);
}

/* The SHA-256 of the config file's bytes, in hex. */
static void
file_hash(char out[65])
{
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n, i;
  size_t len;
  char *text;

  text = read_text_file(D.conf, 1 << 20, &len);
  cr_assert(EVP_Digest(text, len, md, &n, EVP_sha256(), NULL));
  free(text);
  for (i = 0; i < n; i++)
    snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* STATUS and the status file both carry the hash of the file's text. */
static void
assert_hash_in_use(struct qrs_client *c)
{
  struct qrs_status *st;
  char want[65], path[128];
  char *status;
  int i, found;

  file_hash(want);
  cr_assert_eq(qrs_client_status(c, &st), 0);
  cr_assert_str_eq(st->config_hash, want);
  cr_assert_str_eq(st->config_file, D.conf);
  qrs_status_free(st);
  /* A worker writes the status file: give it a moment. */
  snprintf(path, sizeof(path), "%s/status.json", D.dir);
  found = 0;
  for (i = 0; i < 100 && !found; i++) {
    if (access(path, R_OK) == 0) {
      status = read_text_file(path, 1 << 20, NULL);
      found = strstr(status, want) != NULL;
      free(status);
    }
    if (!found)
      usleep(20000);
  }
  cr_assert(found, "the status file names config hash %s", want);
}

static int
draw_samples(struct qrs_client *c, uint32_t n, struct qrs_draw *d)
{
  struct qrs_draw_request rq;

  memset(&rq, 0, sizeof(rq));
  rq.sample_count = n;
  return qrs_client_draw(c, &rq, d);
}

static const struct qrs_config_change *
change_of(const struct qrs_reload *rl, const char *key)
{
  size_t i;

  for (i = 0; i < rl->n_changes; i++)
    if (!strcmp(rl->changes[i].key, key))
      return &rl->changes[i];
  return NULL;
}

/* Writes text as the config file and reloads it through c, which must
   succeed.  Returns the reload's answer: free it with qrs_reload_free(). */
static struct qrs_reload *
reload_to(struct qrs_client *c, const char *text)
{
  struct qrs_reload *rl;
  int r;

  write_conf(text);
  r = qrs_client_reload(c, &rl);
  cr_assert_eq(r, 0, "reload: %s (%s)", qrs_strerror(r),
               qrs_client_errmsg(c));
  return rl;
}

/* The reload changed key live (no restart needed); to want_new when that
   is not NULL. */
static void
assert_live(const struct qrs_reload *rl, const char *key,
            const char *want_new)
{
  const struct qrs_config_change *ch;

  ch = change_of(rl, key);
  cr_assert_not_null(ch, "the diff lists %s", key);
  cr_assert_eq(ch->needs_restart, 0, "%s needs a restart", key);
  if (want_new)
    cr_assert_str_eq(ch->new_value, want_new, "%s", key);
}

/* reload_to() text, which changes key live. */
static void
reload_live(struct qrs_client *c, const char *text, const char *key)
{
  struct qrs_reload *rl;

  rl = reload_to(c, text);
  assert_live(rl, key, NULL);
  qrs_reload_free(rl);
}

Test(reload, a_lower_limit_takes_effect_on_an_open_connection)
{
  const struct qrs_config_change *ch;
  struct qrs_reload *rl;
  struct qrs_client *c;
  struct qrs_draw d;
  int r;

  start("limits: { max_sample_count: 40000 }\n");
  c = connect_client(D.sock);
  cr_assert_eq(draw_samples(c, 30000, &d), 0);
  assert_hash_in_use(c);

  rl = reload_to(c, "limits: { max_sample_count: 20000 }\n");
  assert_live(rl, "limits.max_sample_count", "20000");
  ch = change_of(rl, "limits.max_sample_count");
  cr_assert_str_eq(ch->old_value, "40000");
  cr_assert_eq(rl->applied, 1);
  cr_assert_eq(rl->needs_restart, 0);
  qrs_reload_free(rl);

  /* The same connection: refused now above the new limit. */
  r = draw_samples(c, 30000, &d);
  cr_assert_eq(r, QRS_E_SAMPLE_COUNT, "draw of 30000: %s", qrs_strerror(r));
  cr_assert_eq(draw_samples(c, 20000, &d), 0);
  assert_hash_in_use(c);
  cr_assert(daemon_log_contains(&D, "reload: limits.max_sample_count: "
                                "40000 -> 20000"));
  qrs_client_free(c);
}

Test(reload, an_invalid_file_is_refused_and_the_old_one_keeps_serving)
{
  struct qrs_status *st;
  struct qrs_reload *rl;
  struct qrs_client *c;
  struct qrs_draw d;
  char before[65], want[256];
  int r;

  start("limits: { max_sample_count: 40000 }\n");
  c = connect_client(D.sock);
  cr_assert_eq(qrs_client_status(c, &st), 0);
  snprintf(before, sizeof(before), "%s", st->config_hash);
  qrs_status_free(st);

  write_conf("limits: { max_sample_count: 20000, max_connections: 0 }\n");
  rl = NULL;
  r = qrs_client_reload(c, &rl);
  cr_assert_eq(r, QRS_E_BAD_CONFIG, "reload: %s", qrs_strerror(r));
  cr_assert_null(rl);
  snprintf(want, sizeof(want), "%s:2: limits.max_connections: value 0",
           D.conf);
  cr_assert(strstr(qrs_client_errmsg(c), want), "errmsg '%s' lacks '%s'",
            qrs_client_errmsg(c), want);

  /* The old configuration serves, limit and hash included. */
  cr_assert_eq(draw_samples(c, 30000, &d), 0);
  cr_assert_eq(qrs_client_status(c, &st), 0);
  cr_assert_str_eq(st->config_hash, before);
  qrs_status_free(st);
  cr_assert(daemon_log_contains(&D, "reload refused: "));

  /* A limit below a value that needs a restart: refused too. */
  write_conf("limits: { max_sample_count: 5000 }\n");
  r = qrs_client_reload(c, &rl);
  cr_assert_eq(r, QRS_E_BAD_CONFIG);
  cr_assert(strstr(qrs_client_errmsg(c), "limits.max_sample_count"),
            "%s", qrs_client_errmsg(c));
  cr_assert_eq(draw_samples(c, 30000, &d), 0);
  qrs_client_free(c);
}

Test(reload, keys_that_need_a_restart_keep_their_value)
{
  const struct qrs_config_change *ch;
  struct qrs_reload *rl;
  struct qrs_client *c;
  struct qrs_draw d;

  start("amplifier: { sample_count: 10000 }\n");
  c = connect_client(D.sock);
  rl = reload_to(c, "amplifier: { sample_count: 5000 }\n"
                    "limits: { idle_timeout_ms: 123456 }\n");
  ch = change_of(rl, "amplifier.sample_count");
  cr_assert_not_null(ch);
  cr_assert_eq(ch->needs_restart, 1);
  cr_assert_eq(rl->needs_restart, 1);
  cr_assert_eq(rl->applied, 1);
  qrs_reload_free(rl);
  cr_assert_eq(qrs_client_draw(c, NULL, &d), 0);
  cr_assert_eq(d.sample_count, 10000, "the amplifier kept its samples");
  cr_assert(daemon_log_contains(&D, "amplifier.sample_count: 10000 -> 5000 "
                                "needs a restart"));
  qrs_client_free(c);
}

Test(reload, sighup_reloads_the_file)
{
  struct qrs_client *c;
  struct qrs_draw d;

  start("limits: { max_sample_count: 40000 }\n");
  c = connect_client(D.sock);
  write_conf("limits: { max_sample_count: 20000 }\n");
  cr_assert_eq(kill(D.pid, SIGHUP), 0);
  cr_assert(daemon_log_contains(&D, "requested by SIGHUP"));
  cr_assert(daemon_log_contains(&D, "reload: limits.max_sample_count: "
                                "40000 -> 20000"));
  cr_assert_eq(draw_samples(c, 30000, &d), QRS_E_SAMPLE_COUNT);
  assert_hash_in_use(c);

  /* An invalid file on SIGHUP: logged with file, line and key. */
  write_conf("limits: { max_sample_count: 20000, request_timeout_ms: 0 }\n");
  cr_assert_eq(kill(D.pid, SIGHUP), 0);
  cr_assert(daemon_log_contains(&D, "qrsd.yaml:2: "
                                "limits.request_timeout_ms"));
  cr_assert_eq(draw_samples(c, 20000, &d), 0);
  qrs_client_free(c);
}

static int64_t
mono_ns(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#define ROUNDS 20
#define WINDOW 16

Test(reload, draws_in_flight_during_reloads_all_complete)
{
  static const char *const confs[] = {
    "limits: { max_sample_count: 200000, max_inflight_per_connection: 64 }\n"
    "monitor: { window: 1000 }\n",
    "limits: { max_sample_count: 100000, max_inflight_per_connection: 32 }\n"
    "monitor: { window: 2000 }\n",
  };
  struct qrs_draw_request rq;
  struct qrs_client *a, *b;
  struct qrs_status *st;
  struct qrs_reload *rl;
  uint32_t t[WINDOW];
  struct qrs_draw d;
  int64_t r0, r1;
  int i, k, r, done, overlapped;

  start(confs[0]);
  a = connect_client(D.sock);
  b = connect_client(D.sock);
  memset(&rq, 0, sizeof(rq));
  rq.sample_count = 100000;
  done = 0;
  overlapped = 0;
  for (i = 0; i < ROUNDS; i++) {
    for (k = 0; k < WINDOW; k++)
      cr_assert_eq(qrs_client_draw_begin(a, &rq, &t[k]), 0);
    write_conf(confs[(i + 1) % 2]);
    r0 = mono_ns();
    r = qrs_client_reload(b, &rl);
    r1 = mono_ns();
    cr_assert_eq(r, 0, "reload %d: %s (%s)", i, qrs_strerror(r),
                 qrs_client_errmsg(b));
    cr_assert_geq(rl->applied, 2);
    qrs_reload_free(rl);
    for (k = 0; k < WINDOW; k++) {
      r = qrs_client_draw_finish(a, t[k], &d);
      cr_assert_eq(r, 0, "round %d draw %d: %s", i, k, qrs_strerror(r));
      cr_assert_eq(d.sample_count, 100000);
      /* In qrsd while the reload was asked for and answered. */
      overlapped += d.received.monotonic_ns < r1 &&
                    d.sent.monotonic_ns > r0;
      done++;
    }
  }
  cr_assert_eq(done, ROUNDS * WINDOW);
  cr_assert_gt(overlapped, 0, "no draw was in flight during a reload");
  cr_log_info("%d of %d draws were in flight during a reload", overlapped,
              done);
  /* Nobody was dropped: both connections are the ones we opened. */
  cr_assert_eq(qrs_client_status(a, &st), 0);
  cr_assert_eq(st->connections, 2);
  cr_assert_eq(st->draws, (uint64_t)ROUNDS * WINDOW);
  qrs_status_free(st);
  qrs_client_free(a);
  qrs_client_free(b);
}

/* The fallback of source name in SOURCES, into out. */
static void
fallback_of(struct qrs_client *c, const char *name, char *out, size_t len)
{
  struct qrs_sources *s;
  size_t i;

  cr_assert_eq(qrs_client_sources(c, &s), 0);
  out[0] = '\0';
  for (i = 0; i < s->n_sources; i++)
    if (!strcmp(s->sources[i].name, name))
      snprintf(out, len, "%s", s->sources[i].fallback);
  qrs_sources_free(s);
}

Test(reload, fallbacks_change_live_when_their_target_exists)
{
  struct qrs_reload *rl;
  struct qrs_client *c;
  char fb[64];
  int r;

  start("default_source: a\n"
        "sources: { a: { type: system }, b: { type: system } }\n");
  c = connect_client(D.sock);
  fallback_of(c, "b", fb, sizeof(fb));
  cr_assert_str_eq(fb, "error");

  /* b -> a: a is declared, so it changes live. */
  reload_live(c, "default_source: a\n"
              "sources: { a: { type: system }, "
              "b: { type: system, fallback: a } }\n", "sources.b.fallback");
  fallback_of(c, "b", fb, sizeof(fb));
  cr_assert_str_eq(fb, "a");

  /* a -> system (a built-in system source starts) and a new source c:
     both live. */
  rl = reload_to(c, "default_source: a\n"
                    "sources: { a: { type: system, fallback: system }, "
                    "b: { type: system, fallback: a }, "
                    "c: { type: system } }\n");
  assert_live(rl, "sources.a.fallback", NULL);
  assert_live(rl, "sources.c", "added (system)");
  qrs_reload_free(rl);
  fallback_of(c, "a", fb, sizeof(fb));
  cr_assert_str_eq(fb, "system");

  /* c removed while b still falls back to it: an invalid configuration,
     refused naming the key, and nothing changes. */
  write_conf("default_source: a\n"
             "sources: { a: { type: system, fallback: b }, "
             "b: { type: system, fallback: c } }\n");
  r = qrs_client_reload(c, &rl);
  cr_assert_eq(r, QRS_E_BAD_CONFIG, "reload: %s", qrs_strerror(r));
  cr_assert(strstr(qrs_client_errmsg(c), "sources.b.fallback"), "%s",
            qrs_client_errmsg(c));
  fallback_of(c, "a", fb, sizeof(fb));
  cr_assert_str_eq(fb, "system");
  fallback_of(c, "b", fb, sizeof(fb));
  cr_assert_str_eq(fb, "a");
  qrs_client_free(c);
}

static int
draw_src(struct qrs_client *c, const char *source, struct qrs_draw *d)
{
  struct qrs_draw_request rq;

  memset(&rq, 0, sizeof(rq));
  rq.sample_count = 64;
  rq.source = source;
  return qrs_client_draw(c, &rq, d);
}

static void
detail_of(struct qrs_client *c, const char *name, char *out, size_t len)
{
  struct qrs_sources *s;
  size_t i;

  out[0] = '\0';
  cr_assert_eq(qrs_client_sources(c, &s), 0);
  for (i = 0; i < s->n_sources; i++)
    if (!strcmp(s->sources[i].name, name))
      snprintf(out, len, "%s", s->sources[i].detail);
  qrs_sources_free(s);
}

/* A client drawing from two sources while the main thread removes one. */
struct drawer {
  const char *sock;
  volatile int stop;
  volatile int phase;           /* 0 before the reload is asked for, 1
                                   while it runs, 2 once its reply is in */
  int a_fail, m_ok_after, m_fail_before, m_fail_after, m_err;
  char m_why[256];
};

static void *
drawer_main(void *arg)
{
  struct drawer *w = arg;
  struct qrs_client *c;
  struct qrs_draw d;
  int r, before, after;

  c = connect_client(w->sock);
  while (!w->stop) {
    if (draw_src(c, "a", &d) != 0)
      w->a_fail++;
    after = w->phase == 2;
    r = draw_src(c, "m", &d);
    before = w->phase == 0;     /* still 0 after the reply: not asked yet */
    if (r == 0 && after)
      w->m_ok_after++;
    if (r != 0 && before)
      w->m_fail_before++;
    if (r != 0 && after) {
      w->m_fail_after++;
      w->m_err = r;
      snprintf(w->m_why, sizeof(w->m_why), "%s", qrs_client_errmsg(c));
    }
  }
  qrs_client_free(c);
  return NULL;
}

Test(reload, sources_added_changed_and_removed_live)
{
  struct qrs_reload *rl;
  struct qrs_client *c;
  struct qrs_draw d;
  struct drawer w;
  pthread_t t;
  char before[256], after[256], unknown[256];
  int r, unknown_err;

  start("allow_test_sources: true\ndefault_source: a\n"
        "sources: { a: { type: system } }\n");
  c = connect_client(D.sock);
  r = draw_src(c, "m", &d);
  cr_assert_neq(r, 0, "m is not declared yet");

  /* Added: opened and served. */
  rl = reload_to(c, "allow_test_sources: true\ndefault_source: a\n"
                    "sources: { a: { type: system }, "
                    "m: { type: mock, seed: 1 } }\n");
  assert_live(rl, "sources.m", NULL);
  cr_assert_eq(rl->needs_restart, 0);
  qrs_reload_free(rl);
  cr_assert_eq(draw_src(c, "m", &d), 0, "%s", qrs_client_errmsg(c));
  cr_assert_str_eq(d.served_by, "m");
  detail_of(c, "m", before, sizeof(before));

  /* Changed: replaced by a new instance with the new setting. */
  reload_live(c, "allow_test_sources: true\ndefault_source: a\n"
              "sources: { a: { type: system }, "
              "m: { type: mock, seed: 7, mean_shift: 0.25 } }\n",
              "sources.m.mean_shift");
  detail_of(c, "m", after, sizeof(after));
  cr_assert_str_neq(before, after, "the detail shows the new settings");
  cr_assert(strstr(after, "0.25"), "%s", after);
  cr_assert_eq(draw_src(c, "m", &d), 0, "%s", qrs_client_errmsg(c));

  /* A bad new source: refused naming file:line:key; the old set serves. */
  write_conf("allow_test_sources: true\ndefault_source: a\n"
             "sources: { a: { type: system }, "
             "m: { type: mock, seed: 7, mean_shift: 0.25 },\n"
             "  d: { type: device, path: /nonexistent/qrng0 } }\n");
  r = qrs_client_reload(c, &rl);
  cr_assert_eq(r, QRS_E_BAD_CONFIG, "reload: %s", qrs_strerror(r));
  cr_assert(strstr(qrs_client_errmsg(c), "qrsd.yaml:") &&
            strstr(qrs_client_errmsg(c), "sources.d.path"), "%s",
            qrs_client_errmsg(c));
  cr_assert_eq(draw_src(c, "m", &d), 0, "%s", qrs_client_errmsg(c));
  cr_assert_neq(draw_src(c, "d", &d), 0);

  /* Removed while a client draws from it and from a: a never fails; m
     fails, as an unknown source does, only once the reload is done. */
  unknown_err = draw_src(c, "nope", &d);
  snprintf(unknown, sizeof(unknown), "%s", qrs_client_errmsg(c));
  memset(&w, 0, sizeof(w));
  w.sock = D.sock;
  cr_assert_eq(pthread_create(&t, NULL, drawer_main, &w), 0);
  usleep(100000);
  write_conf("allow_test_sources: true\ndefault_source: a\n"
             "sources: { a: { type: system } }\n");
  w.phase = 1;
  cr_assert_eq(qrs_client_reload(c, &rl), 0, "%s", qrs_client_errmsg(c));
  w.phase = 2;
  assert_live(rl, "sources.m", "(removed)");
  qrs_reload_free(rl);
  usleep(200000);
  w.stop = 1;
  pthread_join(t, NULL);
  cr_assert_eq(w.a_fail, 0, "draws from a never fail");
  cr_assert_eq(w.m_fail_before, 0, "m served until the reload");
  cr_assert_eq(w.m_ok_after, 0, "m serves nothing after the reload");
  cr_assert_gt(w.m_fail_after, 0);
  cr_assert_eq(w.m_err, unknown_err, "%s / %s", w.m_why, unknown);
  cr_assert(strstr(w.m_why, "'m'") || strstr(w.m_why, "m"), "%s", w.m_why);
  detail_of(c, "m", after, sizeof(after));
  cr_assert_str_eq(after, "", "qrsctl sources no longer lists m");
  assert_hash_in_use(c);
  qrs_client_free(c);
}

static void
quota_of(struct qrs_client *c, const char *name, uint64_t *used,
         uint64_t *limit)
{
  struct qrs_sources *s;
  size_t i;

  *used = *limit = 0;
  cr_assert_eq(qrs_client_sources(c, &s), 0);
  for (i = 0; i < s->n_sources; i++)
    if (!strcmp(s->sources[i].name, name)) {
      *used = s->sources[i].quota_minute_requests;
      *limit = s->sources[i].quota_minute_limit;
    }
  qrs_sources_free(s);
}

/* Reloads to source a (system, the default) and a gRPC source q on addr
   with a quota of rpm requests a minute: key must change live. */
static void
reload_q(struct qrs_client *c, const char *addr, int rpm, const char *key)
{
  char text[1024];

  snprintf(text, sizeof(text), "default_source: a\nsources:\n"
           "  a: { type: system }\n"
           "  q: { type: grpc, target: \"%s\", mode: unary, insecure: true, "
           "quota: { max_requests_per_minute: %d } }\n", addr, rpm);
  reload_live(c, text, key);
}

Test(reload, a_grpc_source_added_then_its_quota_changed_keeps_its_use)
{
  struct upserver up;
  struct qrs_client *c;
  struct qrs_draw d;
  uint64_t used, limit, used2;
  int i, r;

  start("default_source: a\nsources: { a: { type: system } }\n");
  upserver_start(&up, "127.0.0.1:0", NULL);
  c = connect_client(D.sock);

  reload_q(c, up.addr, 100, "sources.q");
  for (i = 0; i < 5; i++)
    cr_assert_eq(draw_src(c, "q", &d), 0, "%s", qrs_client_errmsg(c));
  cr_assert_str_eq(d.served_by, "q");
  quota_of(c, "q", &used, &limit);
  cr_assert_eq(limit, 100);
  cr_assert_geq(used, 5);

  /* The limit below the use: kept running, its use counted, refused. */
  reload_q(c, up.addr, 3, "sources.q.quota.max_requests_per_minute");
  quota_of(c, "q", &used2, &limit);
  cr_assert_eq(limit, 3);
  cr_assert_geq(used2, 3, "the use counted before the reload stays");
  r = draw_src(c, "q", &d);
  cr_assert_neq(r, 0, "over the new quota");
  (void)used;
  qrs_client_free(c);
  upserver_stop(&up, 0);
}

static uint64_t
day_bytes_of(struct qrs_client *c, const char *name)
{
  struct qrs_sources *s;
  uint64_t b = 0;
  size_t i;

  cr_assert_eq(qrs_client_sources(c, &s), 0);
  for (i = 0; i < s->n_sources; i++)
    if (!strcmp(s->sources[i].name, name))
      b = s->sources[i].quota_day_bytes;
  qrs_sources_free(s);
  return b;
}

/* A gRPC source whose keys change is replaced by a new instance: the new
   one takes the old one's quota use (the minute's requests and the day's
   bytes), so that the reload does not give the provider's quota a fresh
   minute (it started from the state file, which holds the minute only as
   of its last write). */
Test(reload, a_replaced_grpc_source_takes_the_old_ones_quota_use)
{
  struct upserver up;
  struct qrs_reload *rl;
  struct qrs_client *c;
  struct qrs_draw d;
  char text[1024];
  uint64_t used, limit, day;
  int i;

  start("default_source: a\nsources: { a: { type: system } }\n");
  upserver_start(&up, "127.0.0.1:0", NULL);
  c = connect_client(D.sock);
  for (i = 0; i < 2; i++) {
    snprintf(text, sizeof(text), "default_source: a\nsources:\n"
             "  a: { type: system }\n"
             "  q: { type: grpc, target: \"%s\", mode: unary, "
             "insecure: true, timeout_ms: %d,\n"
             "       quota: { max_requests_per_minute: 3 } }\n", up.addr,
             2000 + i);
    rl = reload_to(c, text);
    qrs_reload_free(rl);
    if (i == 1)
      break;
    for (int k = 0; k < 3; k++) {
      cr_assert_eq(draw_src(c, "q", &d), 0, "draw %d: %s", k,
                   qrs_client_errmsg(c));
      cr_assert_str_eq(d.served_by, "q");
    }
    day = day_bytes_of(c, "q");
    cr_assert_gt(day, 0);
  }
  cr_assert(daemon_log_contains(&D, "source 'q' replaced by the reload"),
            "timeout_ms changed: the source is replaced");
  quota_of(c, "q", &used, &limit);
  cr_assert_eq(limit, 3);
  cr_assert_eq(used, 3, "the replaced source's minute: %llu of 3 requests",
               (unsigned long long)used);
  cr_assert_geq(day_bytes_of(c, "q"), day, "the day's bytes went back");
  cr_assert_neq(draw_src(c, "q", &d), 0, "the new instance let a 4th "
                "request of the minute through");
  cr_assert_eq(draw_src(c, "a", &d), 0, "%s", qrs_client_errmsg(c));
  qrs_client_free(c);
  upserver_stop(&up, 0);
}

struct one_draw {
  const char *sock;
  int r;
  struct qrs_draw d;
  char why[256];
};

static void *
one_draw_main(void *arg)
{
  struct one_draw *o = arg;
  struct qrs_client *c;

  c = connect_client(o->sock);
  o->r = draw_src(c, "s", &o->d);
  snprintf(o->why, sizeof(o->why), "%s", qrs_client_errmsg(c));
  qrs_client_free(c);
  return NULL;
}

Test(reload, a_draw_in_flight_on_a_removed_source_completes)
{
  struct upserver up;
  struct qrs_reload *rl;
  struct qrs_client *c;
  struct qrs_draw d;
  struct one_draw o;
  pthread_t t;
  char text[1024];

  upserver_start(&up, "127.0.0.1:0", "--latency-ms", "400", NULL);
  snprintf(text, sizeof(text), "default_source: a\nsources:\n"
           "  a: { type: system }\n"
           "  s: { type: grpc, target: \"%s\", mode: unary, insecure: true, "
           "timeout_ms: 3000 }\n", up.addr);
  start(text);
  c = connect_client(D.sock);
  cr_assert_eq(draw_src(c, "s", &d), 0, "%s", qrs_client_errmsg(c));
  cr_assert_eq(draw_src(c, "s", &d), 0, "%s", qrs_client_errmsg(c));

  memset(&o, 0, sizeof(o));
  o.sock = D.sock;
  cr_assert_eq(pthread_create(&t, NULL, one_draw_main, &o), 0);
  usleep(150000);               /* the draw is at the server now */
  rl = reload_to(c, "default_source: a\nsources: { a: { type: system } }\n");
  qrs_reload_free(rl);
  cr_assert_neq(draw_src(c, "s", &d), 0, "s takes no new draw");
  pthread_join(t, NULL);
  cr_assert_eq(o.r, 0, "the draw in flight completes: %s", o.why);
  cr_assert_str_eq(o.d.served_by, "s");
  /* It was retired with the draw on it, and closed after. */
  cr_assert(daemon_log_contains(&D, "closed when the draws in flight on it "
                                "are done"));
  cr_assert(daemon_log_contains(&D, "its last draw in flight is done"));
  cr_assert_eq(draw_src(c, "a", &d), 0, "%s", qrs_client_errmsg(c));
  qrs_client_free(c);
  daemon_stop(&D);
  upserver_stop(&up, 0);
}

/* Local sources (a device node and a timing source: each a reader thread
   and a completion queue on the loop) added, drawn from and removed by
   reloads; qrsd keeps serving, and under ASan nothing of the removed
   sources is touched after they are freed. */
Test(reload, local_sources_removed_are_closed_cleanly)
{
  struct qrs_reload *rl;
  struct qrs_client *c;
  struct qrs_draw d;
  int i, r;

  start("default_source: a\nsources: { a: { type: system } }\n");
  c = connect_client(D.sock);
  rl = reload_to(c, "default_source: a\n"
                    "sources: { a: { type: system },\n"
                    "  dev: { type: device, path: /dev/urandom },\n"
                    "  jit: { type: timing, conditioning: sha256, "
                    "timeout_ms: 20000 } }\n"
                    /* a new timing source's first harvest includes
                       its start-up test: slow under TSan on a loaded
                       machine */
                    "limits: { request_timeout_ms: 20000 }\n");
  qrs_reload_free(rl);
  for (i = 0; i < 3; i++) {
    r = draw_from(c, "dev", &d);
    cr_assert_eq(r, 0, "dev: %s", qrs_client_errmsg(c));
    cr_assert_str_eq(d.served_by, "dev");
    r = draw_from(c, "jit", &d);
    cr_assert_eq(r, 0, "jit: %s", qrs_client_errmsg(c));
    cr_assert_str_eq(d.served_by, "jit");
  }
  rl = reload_to(c, "default_source: a\nsources: { a: { type: system } }\n");
  qrs_reload_free(rl);
  cr_assert_eq(draw_from(c, "dev", &d), QRS_E_UNKNOWN_SOURCE);
  cr_assert_eq(draw_from(c, "jit", &d), QRS_E_UNKNOWN_SOURCE);
  /* the loop goes on past the closes: draws, and the same names again */
  for (i = 0; i < 20; i++)
    cr_assert_eq(draw_from(c, "a", &d), 0);
  rl = reload_to(c, "default_source: a\n"
                    "sources: { a: { type: system },\n"
                    "  dev: { type: device, path: /dev/urandom } }\n");
  qrs_reload_free(rl);
  cr_assert_eq(draw_from(c, "dev", &d), 0, "%s", qrs_client_errmsg(c));
  qrs_client_free(c);
  r = daemon_stop(&D);
  cr_assert_eq(r, 0, "qrsd exited %d", r);
}
