/* The local sources (device, timing, noise) through the registry, on a
   real libuv loop: a FIFO the test writes stands in for a device. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "sources/local.h"
#include "engine/registry.h"
#include "sources/source.h"
#include "testreg.h"
#include "testutil.h"

static uv_loop_t loop;
static struct test_fifo F;

static void
setup(void)
{
  test_fifo_init(&F, "qrs-local");
}

static void
teardown(void)
{
  test_fifo_done(&F);
}

TestSuite(local, .init = setup, .fini = teardown, .timeout = 60);

/* n bytes that pass the health tests (no long runs, no dominant value). */
static void
write_varied(int fd, size_t n)
{
  uint8_t b[4096];
  size_t i;

  cr_assert_leq(n, sizeof(b));
  for (i = 0; i < n; i++)
    b[i] = (uint8_t)(i * 167 + (i >> 8));
  cr_assert_eq(write(fd, b, n), (ssize_t)n);
}

/* The system source, the device "hw" on the FIFO (falling back to
   system), and the sources in extra. */
static struct registry *
new_registry(const char *extra)
{
  char text[1024];

  snprintf(text, sizeof(text), "sources:\n  system: { type: system }\n"
           "  hw: { type: device, path: %s, fallback: system }\n%s", F.path,
           extra);
  return testreg_new(&loop, text, 64 << 20);
}

struct got {
  int calls;
  int status;
  int fallback;
  char served_by[64];
  char why[256];
  uint8_t data[16];
};

static void
on_done(void *ctx, const struct reg_result *res)
{
  struct got *g = ctx;

  g->calls++;
  g->status = res->status;
  snprintf(g->why, sizeof(g->why), "%s", res->why ? res->why : "");
  if (res->status == 0) {
    g->fallback = res->fallback;
    snprintf(g->served_by, sizeof(g->served_by), "%s", res->served_by);
    memcpy(g->data, res->data, res->n < 16 ? res->n : 16);
  }
}

static void
fetch(struct registry *reg, const char *name, size_t n, int ms, struct got *g)
{
  memset(g, 0, sizeof(*g));
  cr_assert_eq(registry_fetch(reg, name, n, 0, mono_now_ns() + ms * 1000000LL,
                              on_done, g), 0);
  testreg_wait(&loop, &g->calls);
}

Test(local, device_serves_then_falls_back_labelled_when_the_writer_goes)
{
  struct registry *reg;
  struct reg_info info;
  struct got g;
  int w;

  reg = new_registry("");
  w = test_fifo_writer(&F);
  write_varied(w, 1024);        /* the start-up test's bytes */
  cr_assert_eq(write(w, "0123456789abcdef", 16), 16);
  fetch(reg, "hw", 16, 5000, &g);
  cr_assert_eq(g.status, 0, "%s", g.why);
  cr_assert_str_eq(g.served_by, "hw");
  cr_assert_eq(g.fallback, 0);
  cr_assert(memcmp(g.data, "0123456789abcdef", 16) == 0);

  /* The writer vanishes: EOF, a typed failure, the fallback serves. */
  close(w);
  fetch(reg, "hw", 16, 5000, &g);
  cr_assert_eq(g.status, 0, "%s", g.why);
  cr_assert_str_eq(g.served_by, "system");
  cr_assert_eq(g.fallback, 1);
  registry_info(reg, 1, &info);
  cr_assert_str_eq(info.name, "hw");
  cr_assert_eq(info.state, REG_DEGRADED);
  cr_assert(strstr(info.last_failure, "writer went away") != NULL, "%s",
            info.last_failure);
  testreg_free(&loop, reg);
}

struct dribble {
  int fd;
  atomic_int stop;
};

static void *
dribble_run(void *arg)
{
  struct dribble *d = arg;
  struct timespec ts = { 0, 20000000 };
  uint8_t c = 0;

  while (!atomic_load(&d->stop)) {
    c = (uint8_t)(c + 97);
    if (write(d->fd, &c, 1) < 0)
      break;
    nanosleep(&ts, NULL);
  }
  return NULL;
}

Test(local, slow_device_past_the_deadline_goes_to_the_fallback)
{
  struct registry *reg;
  struct dribble d;
  pthread_t th;
  struct got g;
  int64_t t0;

  reg = new_registry("");
  d.fd = test_fifo_writer(&F);
  atomic_init(&d.stop, 0);
  cr_assert_eq(pthread_create(&th, NULL, dribble_run, &d), 0);
  /* 1000 bytes at 50 B/s cannot arrive within 500 ms: the draw is served
     by the fallback, labelled, and does not stall past its deadline
     (generous margin on a loaded machine). */
  t0 = mono_now_ns();
  fetch(reg, "hw", 1000, 500, &g);
  cr_assert_eq(g.status, 0, "%s", g.why);
  cr_assert_str_eq(g.served_by, "system");
  cr_assert_eq(g.fallback, 1);
  cr_assert_lt(mono_now_ns() - t0, 3000000000LL);
  atomic_store(&d.stop, 1);
  pthread_join(th, NULL);
  close(d.fd);
  testreg_free(&loop, reg);
}

Test(local, four_clients_on_a_slow_device_all_progress)
{
  struct registry *reg;
  struct dribble d;
  pthread_t th;
  struct got g[4];
  int i, rounds, served[4];

  reg = new_registry("");
  d.fd = test_fifo_writer(&F);
  write_varied(d.fd, 1024);     /* the start-up test's bytes */
  atomic_init(&d.stop, 0);
  cr_assert_eq(pthread_create(&th, NULL, dribble_run, &d), 0);
  memset(served, 0, sizeof(served));
  /* Four requests of 2 bytes at a time, at about 50 B/s: each round every
     one of them is served by the device (first come, first served). */
  for (rounds = 0; rounds < 3; rounds++) {
    for (i = 0; i < 4; i++) {
      memset(&g[i], 0, sizeof(g[i]));
      cr_assert_eq(registry_fetch(reg, "hw", 2, 0,
                                  mono_now_ns() + 10000000000LL, on_done,
                                  &g[i]), 0);
    }
    while (g[0].calls + g[1].calls + g[2].calls + g[3].calls < 4)
      uv_run(&loop, UV_RUN_ONCE);
    for (i = 0; i < 4; i++)
      if (g[i].status == 0 && !g[i].fallback)
        served[i]++;
  }
  for (i = 0; i < 4; i++)
    cr_assert_eq(served[i], 3, "client %d: %d of 3 from the device (%s)", i,
                 served[i], g[i].why);
  atomic_store(&d.stop, 1);
  pthread_join(th, NULL);
  close(d.fd);
  testreg_free(&loop, reg);
}

/* The index of source name in reg. */
static size_t
source_index(struct registry *reg, const char *name)
{
  struct reg_info info;
  size_t i;

  for (i = 0; i < registry_count(reg); i++) {
    registry_info(reg, i, &info);
    if (strcmp(info.name, name) == 0)
      return i;
  }
  cr_assert_fail("no source '%s'", name);
  return 0;
}

/* Reads from the noise source until its first mechanism is "ok", with
   samples enough for an estimate of their min-entropy.  A read ends once
   the fastest mechanism has delivered: a slower one (on a loaded machine,
   starved of CPU) is stopped early and goes on with its start-up test at
   the next read, and a failed one is tested again before it contributes,
   so one read is not always enough.  Bounded: 30 s of reads. */
static void
until_first_mech_ok(struct registry *reg, struct local_stats *ls)
{
  const struct local_mech_stats *m;
  struct got g;
  int64_t end;
  size_t i;

  end = mono_now_ns() + 30000000000LL;
  i = source_index(reg, "noise");
  m = &ls->mech[0];
  for (;;) {
    cr_assert_eq(registry_local_stats(reg, i, ls), 0);
    if (strcmp(m->state, "ok") == 0 && m->samples >= 64)
      return;
    cr_assert_lt(mono_now_ns(), end, "%s still %s after %" PRIu64 " reads "
                 "in 30 s (%" PRIu64 " samples, %" PRIu64 " failures: %s)",
                 m->name, m->state, m->harvests, m->samples, m->failures,
                 m->last_error);
    fetch(reg, "noise", 4096, 40000, &g);
    cr_assert_eq(g.status, 0, "%s", g.why);
  }
}

Test(local, timing_and_noise_serve_fresh_bytes)
{
  struct local_stats ls;
  struct registry *reg;
  struct reg_info info;
  struct got g;
  size_t i;

  /* Generous harvest timeouts: valgrind runs this too. */
  reg = new_registry("  jitter: { type: timing, conditioning: sha256,"
                     " timeout_ms: 30000 }\n"
                     "  noise: { type: noise, mechanisms: [clock_jitter,"
                     " branch_timing, hwmon], conditioning: vonneumann,"
                     " timeout_ms: 30000 }\n");
  fetch(reg, "jitter", 4096, 40000, &g);
  cr_assert_eq(g.status, 0, "%s", g.why);
  cr_assert_str_eq(g.served_by, "jitter");
  fetch(reg, "noise", 4096, 40000, &g);
  cr_assert_eq(g.status, 0, "%s", g.why);
  cr_assert_str_eq(g.served_by, "noise");
  until_first_mech_ok(reg, &ls);
  i = source_index(reg, "noise");
  registry_info(reg, i, &info);
  /* The describe line lists each mechanism and its state. */
  cr_assert(strstr(info.detail, "clock_jitter ok") != NULL, "%s",
            info.detail);
  cr_assert(strstr(info.detail, "hwmon") != NULL, "%s", info.detail);
  cr_assert(strstr(info.detail, "draws/s") != NULL, "%s", info.detail);
  /* ... and the structured statistics: the mechanisms in config order,
     hwmon with its reason where this host has none */
  cr_assert_eq(registry_local_stats(reg, i, &ls), 0);
  cr_assert_eq(ls.n_mech, 3);
  cr_assert_str_eq(ls.mech[0].name, "clock_jitter");
  cr_assert_str_eq(ls.mech[0].state, "ok");
  cr_assert_gt(ls.mech[0].samples, 0);
  cr_assert_gt(ls.mech[0].min_entropy, 0.0);
  cr_assert_str_eq(ls.mech[2].name, "hwmon");
  if (!ls.mech[2].available) {
    cr_assert_str_eq(ls.mech[2].state, "unavailable");
    cr_assert_gt(strlen(ls.mech[2].why), 0);
  }
  cr_assert_str_eq(ls.conditioning, "vonneumann");
  cr_assert_str_eq(ls.health_state, "ok");
  cr_assert_gt(ls.bytes_per_s, 0.0);
  testreg_free(&loop, reg);
}

Test(local, stuck_device_fails_its_health_tests_and_falls_back)
{
  struct local_stats ls;
  struct registry *reg;
  struct reg_info info;
  uint8_t zeros[2048];
  struct got g;
  int w;

  reg = new_registry("");
  w = test_fifo_writer(&F);
  write_varied(w, 1024);
  /* A stuck device: the same byte over and over. */
  memset(zeros, 0, sizeof(zeros));
  cr_assert_eq(write(w, zeros, sizeof(zeros)), (ssize_t)sizeof(zeros));
  fetch(reg, "hw", 64, 5000, &g);
  cr_assert_eq(g.status, 0, "%s", g.why);
  cr_assert_eq(g.fallback, 1, "a failed health test is not served");
  cr_assert_str_eq(g.served_by, "system");
  registry_info(reg, 1, &info);
  cr_assert(strstr(info.last_failure, "repetition count") != NULL, "%s",
            info.last_failure);
  /* While unhealthy, requests go straight to the fallback. */
  fetch(reg, "hw", 64, 5000, &g);
  cr_assert_eq(g.fallback, 1);
  registry_info(reg, 1, &info);
  cr_assert(strstr(info.last_failure, "unhealthy") != NULL, "%s",
            info.last_failure);
  /* The structured statistics say so too. */
  cr_assert_eq(registry_local_stats(reg, 1, &ls), 0);
  cr_assert_str_eq(ls.health_state, "failed");
  cr_assert(strstr(ls.health_reason, "repetition count") != NULL, "%s",
            ls.health_reason);
  cr_assert_eq(ls.draw_bytes, 10000);   /* the default sample_count */
  cr_assert_gt(ls.raw_samples, 1024);
  cr_assert_eq(registry_local_stats(reg, 0, &ls), -ENOSYS);   /* system */
  close(w);
  testreg_free(&loop, reg);
}
