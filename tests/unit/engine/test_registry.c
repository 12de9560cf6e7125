/* The source registry (daemon/engine/registry.c): fallback selection and
   labelling, deadlines, admission, health states and statistics.

   qrsd has no source type yet that fails for real, so the failing sources
   here are test implementations of struct source_ops compiled into this
   test: one whose read() fails, one that never answers until cancelled,
   one that answers after its deadline, one that refuses admission, and
   one that completes from a thread of its own through a source_cq. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <qrs/error.h>

#include "engine/registry.h"
#include "sources/source.h"
#include "testreg.h"

/* The loop, and the registry under test on it (new_registry()). */
static uv_loop_t loop;
static struct registry *reg;

/* ---- test sources ------------------------------------------------------ */

struct tsrc {
  int fail;                     /* read fails with -EIO */
  int refuse;                   /* admit says -EAGAIN */
  int cancels;
  int outcomes;
  int last_outcome;
  struct source_fetch *held;    /* stall: the fetch not yet completed */
  uv_timer_t timer;
  struct source_cq cq;
  pthread_t thread;
};

static int
t_read(struct source *s, uint8_t *buf, size_t n, char *why, size_t whylen)
{
  struct tsrc *t;

  t = s->priv;
  if (t->fail) {
    snprintf(why, whylen, "device unplugged");
    return -EIO;
  }
  memset(buf, 0xab, n);
  return 0;
}

static int
t_admit(struct source *s, size_t n, char *why, size_t whylen)
{
  struct tsrc *t;

  (void)n;
  t = s->priv;
  if (!t->refuse)
    return 0;
  snprintf(why, whylen, "breaker open");
  return -EAGAIN;
}

static void
t_outcome(struct source *s, const struct source_fetch *f, int status,
          int64_t latency_ns)
{
  struct tsrc *t;

  (void)f;
  (void)latency_ns;
  t = s->priv;
  t->outcomes++;
  t->last_outcome = status;
}

static void
on_late(uv_timer_t *tm)
{
  struct tsrc *t;
  struct source_fetch *f;

  t = tm->data;
  f = t->held;
  t->held = NULL;
  memset(f->buf, 0x11, f->n);
  ts_now(&f->generated);
  source_fetch_complete(f, t->fail ? -EIO : 0);
}

/* Never answers by itself: completes after cancel() (stall) or when the
   test says so (late). */
static int
t_fetch_slow(struct source *s, struct source_fetch *f)
{
  struct tsrc *t;

  t = s->priv;
  cr_assert_null(t->held);
  t->held = f;
  return 0;
}

static void
t_cancel(struct source *s, struct source_fetch *f)
{
  struct tsrc *t;

  t = s->priv;
  cr_assert_eq(t->held, f);
  t->cancels++;
  uv_timer_start(&t->timer, on_late, 1, 0);
}

static void *
cq_thread(void *arg)
{
  struct source_fetch *f;

  f = arg;
  memset(f->buf, 0x5a, f->n);
  ts_now(&f->generated);
  f->echo = 1;
  source_cq_post(&((struct tsrc *)f->src->priv)->cq, f, 0);
  return NULL;
}

static int
t_fetch_thread(struct source *s, struct source_fetch *f)
{
  struct tsrc *t;

  t = s->priv;
  return -pthread_create(&t->thread, NULL, cq_thread, f);
}

static void
on_tsrc_closed(uv_handle_t *h)
{
  (void)h;
}

static void
t_stop(struct source *s)
{
  struct tsrc *t;

  t = s->priv;
  if (t->held) {
    uv_timer_stop(&t->timer);
    on_late(&t->timer);
  }
  if (s->ops->fetch == t_fetch_thread) {
    pthread_join(t->thread, NULL);
    source_cq_close(&t->cq, on_tsrc_closed);
  }
  uv_close((uv_handle_t *)&t->timer, on_tsrc_closed);
}

static void
t_close(struct source *s)
{
  free(s->priv);
}

static const struct source_ops ops_flaky = {
  .type = "flaky", .production = 1, .read = t_read, .admit = t_admit,
  .outcome = t_outcome, .stop = t_stop, .close = t_close,
};

static const struct source_ops ops_stall = {
  .type = "stall", .production = 1, .fetch = t_fetch_slow,
  .cancel = t_cancel, .outcome = t_outcome, .stop = t_stop,
  .close = t_close,
};

static const struct source_ops ops_late = {
  .type = "late", .production = 1, .fetch = t_fetch_slow,
  .outcome = t_outcome, .stop = t_stop, .close = t_close,
};

static const struct source_ops ops_thread = {
  .type = "thread", .production = 1, .fetch = t_fetch_thread,
  .stop = t_stop, .close = t_close,
};

/* A test source called name of ops in reg, falling back to fb and read
   inline up to inline_max bytes (read() sources). */
static struct tsrc *
add_source(const struct source_ops *ops, const char *name, const char *fb,
           size_t inline_max)
{
  struct source *s;
  struct tsrc *t;

  s = calloc(1, sizeof(*s));
  t = calloc(1, sizeof(*t));
  cr_assert(s && t);
  s->ops = ops;
  s->name = strdup(name);
  s->loop = &loop;
  s->inline_max = inline_max;
  s->priv = t;
  uv_timer_init(&loop, &t->timer);
  t->timer.data = t;
  if (ops == &ops_thread)
    cr_assert_eq(source_cq_init(&t->cq, &loop), 0);
  cr_assert_eq(registry_add(reg, s, fb), 0);
  return t;
}

/* A read() source called name in reg that fails (-EIO, "device
   unplugged") and falls back to fb. */
static struct tsrc *
add_failing(const char *name, const char *fb)
{
  struct tsrc *t;

  t = add_source(&ops_flaky, name, fb, 1 << 20);
  t->fail = 1;
  return t;
}

/* ---- the registry under test ------------------------------------------- */

/* The system source alone; the test sources are added to it. */
static struct registry *
new_registry(size_t bytes_max)
{
  return testreg_new(&loop, "sources: { system: { type: system } }\n",
                     bytes_max);
}

/* What the done callback saw. */
struct got {
  int calls;
  int status;
  char source[64];
  char served_by[64];
  char served_type[32];
  int fallback;
  int echo;
  uint8_t first;
  int all_ab;                   /* every byte is 0xab (a tsrc's) */
  size_t n;
  char why[400];
};

/* What the done callback saw of the test's last fetch. */
static struct got g;

static void
on_done(void *ctx, const struct reg_result *res)
{
  struct got *out;

  out = ctx;
  out->calls++;
  out->status = res->status;
  out->n = res->n;
  snprintf(out->source, sizeof(out->source), "%s", res->source);
  snprintf(out->why, sizeof(out->why), "%s", res->why ? res->why : "");
  if (res->status == 0) {
    snprintf(out->served_by, sizeof(out->served_by), "%s", res->served_by);
    snprintf(out->served_type, sizeof(out->served_type), "%s",
             res->served_type);
    out->fallback = res->fallback;
    out->echo = res->echo;
    out->first = res->data[0];
    out->all_ab = 1;
    for (size_t i = 0; i < res->n; i++)
      out->all_ab &= res->data[i] == 0xab;
    cr_assert(res->generated.monotonic_ns > 0);
  }
}

/* Ask reg's source name for n bytes with timeout_ms, answered into g:
   registry_fetch()'s result. */
static int
fetch_begin(const char *name, size_t n, int timeout_ms)
{
  int64_t deadline;

  deadline = mono_now_ns() + (int64_t)timeout_ms * 1000000;
  return registry_fetch(reg, name, n, 0, deadline, on_done, &g);
}

/* Fetch n bytes from name with timeout_ms into g, run the loop until
   answered. */
static void
fetch(const char *name, size_t n, int timeout_ms)
{
  memset(&g, 0, sizeof(g));
  cr_assert_eq(fetch_begin(name, n, timeout_ms), 0);
  testreg_wait(&loop, &g.calls);
  cr_assert_eq(g.calls, 1);
}

/* reg's statistics of the source name. */
static void
info_of(const char *name, struct reg_info *ri)
{
  size_t i;

  for (i = 0; i < registry_count(reg); i++) {
    registry_info(reg, i, ri);
    if (!strcmp(ri->name, name))
      return;
  }
  cr_assert_fail("no source '%s'", name);
}

/* ---- tests ------------------------------------------------------------- */

Test(registry, primary_serves_and_is_counted)
{
  struct reg_info ri;
  char msg[256];

  reg = new_registry(1 << 20);
  fetch("", 100, 1000);
  cr_assert_eq(g.status, 0);
  cr_assert_str_eq(g.source, "system");
  cr_assert_str_eq(g.served_by, "system");
  cr_assert_str_eq(g.served_type, "system");
  cr_assert_not(g.fallback);
  info_of("system", &ri);
  cr_assert_eq(ri.draws, 1);
  cr_assert_eq(ri.bytes, 100);
  cr_assert_eq(ri.state, REG_OK);
  cr_assert(ri.is_default);
  cr_assert_eq(registry_health(reg, msg, sizeof(msg)), REG_OK);
  cr_assert_eq(registry_bytes(reg), 100);
  testreg_free(&loop, reg);
}

Test(registry, failing_source_is_served_by_its_fallback_and_labelled)
{
  struct reg_info ri;
  struct tsrc *t;
  char msg[256];

  reg = new_registry(1 << 20);
  t = add_failing("flaky", "system");
  fetch("flaky", 64, 1000);
  cr_assert_eq(g.status, 0, "%s", g.why);
  cr_assert_str_eq(g.source, "flaky");
  cr_assert_str_eq(g.served_by, "system");
  cr_assert(g.fallback);
  /* (its first byte alone is 0xab once in 256 draws from the system) */
  cr_assert_not(g.all_ab, "the failing source's bytes");

  info_of("flaky", &ri);
  cr_assert_eq(ri.state, REG_DEGRADED);
  cr_assert_eq(ri.failures, 1);
  cr_assert_eq(ri.fallbacks, 1);
  cr_assert_eq(ri.draws, 0);
  cr_assert_str_eq(ri.fallback, "system");
  cr_assert_str_eq(ri.last_failure, "device unplugged");
  cr_assert(ri.last_failure_ns > 0);
  cr_assert_not_null(strstr(ri.detail, "device unplugged"));
  cr_assert_eq(t->outcomes, 1);
  cr_assert_eq(t->last_outcome, -EIO);
  info_of("system", &ri);
  cr_assert_eq(ri.draws, 1);
  cr_assert_eq(ri.state, REG_OK);
  cr_assert_eq(registry_health(reg, msg, sizeof(msg)), REG_DEGRADED);
  cr_assert_not_null(strstr(msg, "'flaky' degraded"), "%s", msg);

  /* It recovers with its next good fetch. */
  t->fail = 0;
  fetch("flaky", 64, 1000);
  cr_assert_eq(g.status, 0);
  cr_assert_str_eq(g.served_by, "flaky");
  cr_assert_not(g.fallback);
  cr_assert_eq(g.first, 0xab);
  info_of("flaky", &ri);
  cr_assert_eq(ri.state, REG_OK);
  cr_assert_eq(ri.draws, 1);
  cr_assert_eq(ri.fallbacks, 1);
  cr_assert_eq(registry_health(reg, msg, sizeof(msg)), REG_OK);
  testreg_free(&loop, reg);
}

Test(registry, failing_source_without_fallback_fails_the_request)
{
  struct reg_info ri;
  char msg[256];

  reg = new_registry(1 << 20);
  add_failing("flaky", "error");
  fetch("flaky", 64, 1000);
  cr_assert_eq(g.status, QRS_E_ENTROPY);
  cr_assert_not_null(strstr(g.why, "source 'flaky': device unplugged"),
                     "%s", g.why);
  info_of("flaky", &ri);
  cr_assert_eq(ri.state, REG_FAILED);
  cr_assert_eq(ri.fallbacks, 0);
  /* Not the default source: degraded, not failed. */
  cr_assert_eq(registry_health(reg, msg, sizeof(msg)), REG_DEGRADED);
  testreg_free(&loop, reg);
}

Test(registry, worker_reads_fall_back_too)
{
  struct tsrc *t;

  /* inline_max 0: every read goes to a libuv worker. */
  reg = new_registry(1 << 20);
  t = add_source(&ops_flaky, "flaky", "system", 0);
  fetch("flaky", 100000, 5000);
  cr_assert_eq(g.status, 0);
  cr_assert_str_eq(g.served_by, "flaky");
  cr_assert_eq(g.n, 100000);
  t->fail = 1;
  fetch("flaky", 100000, 5000);
  cr_assert_eq(g.status, 0);
  cr_assert_str_eq(g.served_by, "system");
  cr_assert(g.fallback);
  testreg_free(&loop, reg);
}

Test(registry, deadline_sends_the_request_to_the_fallback)
{
  struct reg_info ri;
  struct tsrc *t;

  reg = new_registry(1 << 20);
  t = add_source(&ops_stall, "stall", "system", 0);
  fetch("stall", 32, 200);
  cr_assert_eq(g.status, 0, "%s", g.why);
  cr_assert_str_eq(g.served_by, "system");
  cr_assert(g.fallback);
  cr_assert_eq(t->cancels, 1);
  cr_assert_eq(t->outcomes, 1);
  cr_assert_eq(t->last_outcome, -ETIMEDOUT);
  info_of("stall", &ri);
  cr_assert_eq(ri.timeouts, 1);
  cr_assert_eq(ri.failures, 1);
  cr_assert_eq(ri.state, REG_DEGRADED);
  cr_assert_not_null(strstr(ri.last_failure, "not delivered within"));
  testreg_free(&loop, reg);
}

Test(registry, deadline_without_fallback_is_a_timeout)
{

  reg = new_registry(1 << 20);
  add_source(&ops_stall, "stall", "error", 0);
  fetch("stall", 32, 100);
  cr_assert_eq(g.status, -ETIMEDOUT);
  cr_assert_not_null(strstr(g.why, "32 bytes not delivered within"), "%s",
                     g.why);
  testreg_free(&loop, reg);
}

Test(registry, a_late_completion_is_discarded_and_keeps_its_budget)
{
  struct reg_info ri;
  struct tsrc *t;

  /* Budget for one fetch of 1000 bytes at a time. */
  reg = new_registry(1500);
  t = add_source(&ops_late, "late", "error", 0);
  fetch("late", 1000, 50);
  cr_assert_eq(g.status, -ETIMEDOUT);
  /* Its buffer is still held by the late fetch: no room for another. */
  cr_assert_eq(fetch_begin("system", 1000, 1000), -EBUSY);
  /* After the late completion: discarded, budget back, no 2nd answer. */
  uv_timer_start(&t->timer, on_late, 1, 0);
  while (t->held)
    uv_run(&loop, UV_RUN_ONCE);
  cr_assert_eq(g.calls, 1);
  info_of("late", &ri);
  cr_assert_eq(ri.draws, 0, "late bytes are never served");
  fetch("system", 1000, 1000);
  cr_assert_eq(g.status, 0);
  testreg_free(&loop, reg);
}

Test(registry, admission_refusal_goes_to_the_fallback)
{
  struct reg_info ri;
  struct tsrc *t;

  reg = new_registry(1 << 20);
  t = add_source(&ops_flaky, "gated", "system", 1 << 20);
  t->refuse = 1;
  fetch("gated", 16, 1000);
  cr_assert_eq(g.status, 0);
  cr_assert_str_eq(g.served_by, "system");
  cr_assert(g.fallback);
  info_of("gated", &ri);
  cr_assert_eq(ri.refusals, 1);
  cr_assert_eq(ri.failures, 0);
  cr_assert_eq(ri.fallbacks, 1);
  cr_assert_str_eq(ri.last_failure, "breaker open");
  cr_assert_eq(t->outcomes, 0, "no fetch was made");
  testreg_free(&loop, reg);
}

Test(registry, chain_of_fallbacks_and_failure_at_the_end)
{
  struct reg_info ri;
  struct tsrc *b;

  reg = new_registry(1 << 20);
  b = add_failing("b", "system");
  add_failing("a", "b");
  fetch("a", 16, 1000);
  cr_assert_eq(g.status, 0);
  cr_assert_str_eq(g.source, "a");
  cr_assert_str_eq(g.served_by, "system");
  cr_assert(g.fallback);
  b->fail = 0;
  fetch("a", 16, 1000);
  cr_assert_str_eq(g.served_by, "b");
  cr_assert(g.fallback);
  info_of("a", &ri);
  cr_assert_eq(ri.fallbacks, 2);
  cr_assert_eq(ri.state, REG_DEGRADED);
  info_of("b", &ri);
  cr_assert_eq(ri.state, REG_OK);
  testreg_free(&loop, reg);
}

Test(registry, undeclared_fallback_is_a_builtin_not_askable_by_name)
{
  struct reg_info ri;

  reg = new_registry(1 << 20);
  add_failing("flaky", "mock");
  cr_assert_eq(registry_count(reg), 3);
  cr_assert_not(registry_has(reg, "mock"));
  cr_assert_eq(fetch_begin("mock", 8, 1000), -ENOENT);
  fetch("flaky", 8, 1000);
  cr_assert_str_eq(g.served_by, "mock");
  cr_assert_str_eq(g.served_type, "mock");
  info_of("mock", &ri);
  cr_assert(ri.builtin);
  cr_assert_not(ri.production);
  cr_assert_eq(ri.draws, 1);
  testreg_free(&loop, reg);
}

Test(registry, completion_from_another_thread)
{

  reg = new_registry(1 << 20);
  add_source(&ops_thread, "threaded", "error", 0);
  fetch("threaded", 4096, 2000);
  cr_assert_eq(g.status, 0, "%s", g.why);
  cr_assert_str_eq(g.served_by, "threaded");
  cr_assert_eq(g.first, 0x5a);
  cr_assert_eq(g.echo, 1);
  testreg_free(&loop, reg);
}

Test(registry, unknown_source_and_budget)
{

  reg = new_registry(4096);
  cr_assert_eq(fetch_begin("nosuch", 8, 1000), -ENOENT);
  cr_assert_eq(fetch_begin("", 4097, 1000), -EBUSY);
  cr_assert(registry_has(reg, ""));
  cr_assert(registry_has(reg, "system"));
  cr_assert_str_eq(registry_default(reg), "system");
  testreg_free(&loop, reg);
}
