/* Noise mechanisms and the harvester, on this host's real hardware.

   Every mechanism is tried: the available ones must deliver raw samples
   with a min-entropy estimate and, through sha256 conditioning, bytes
   that pass a chi-square byte-frequency test; the unavailable ones must
   say why, and the test prints that they did not run.

   Sizes: 1 MiB of conditioned output for the fast mechanisms, as the
   issue asks; the slow ones (one sample per sleep, sensor read, page
   fault, 16 DRAM loads, or wait for a racing thread that a loaded machine
   may not run) get 16 KiB, enough for the chi-square test (64 expected
   per cell), and fsync_latency (130 to 400 samples/s on this VM's disk)
   gets 1,280 bytes (5 per cell, the usual minimum) and 1,024 raw samples
   for the estimate; under
   valgrind everything is at most 16 KiB. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>
#include <valgrind/valgrind.h>

#include "local/harvest.h"

#define FAST_BYTES (1u << 20)
#define SLOW_BYTES (16u << 10)
#define VALGRIND_BYTES (4u << 10)
#define FSYNC_BYTES 1280

/* chi-square, 255 degrees of freedom: the 1 - 1e-5 quantile. */
#define CHI2_255_LIMIT 363.0

static int
is_slow(const char *name)
{
  return !strcmp(name, "sleep_jitter") || !strcmp(name, "fsync_latency") ||
         !strcmp(name, "hwmon") || !strcmp(name, "page_fault") ||
         !strcmp(name, "timing") || !strcmp(name, "thread_race");
}

static double
chi_square(const uint8_t *b, size_t n)
{
  double count[256], e, chi;
  size_t i;

  memset(count, 0, sizeof(count));
  for (i = 0; i < n; i++)
    count[b[i]]++;
  e = (double)n / 256.0;
  chi = 0.0;
  for (i = 0; i < 256; i++)
    chi += (count[i] - e) * (count[i] - e) / e;
  return chi;
}

Test(noise, at_least_eight_mechanisms_with_names)
{
  size_t i, avail;
  char why[128];

  cr_assert_geq(noise_mech_count, 8);
  avail = 0;
  for (i = 0; i < noise_mech_count; i++) {
    cr_assert_not_null(noise_mech_find(noise_mechs[i].name));
    cr_assert_gt(noise_mechs[i].h, 0.0);
    if (noise_mechs[i].probe(why, sizeof(why))) {
      avail++;
    } else {
      cr_assert_gt(strlen(why), 0, "%s: unavailable without a reason",
                   noise_mechs[i].name);
      printf("noise: mechanism %s is unavailable here (%s)\n",
             noise_mechs[i].name, why);
    }
  }
  /* The timing mechanisms need nothing but an x86-64 Linux host. */
  cr_assert_geq(avail, 7, "only %zu mechanisms available", avail);
  cr_assert_null(noise_mech_find("no_such_mechanism"));
}

static void
check_mechanism(const struct noise_mech *m)
{
  struct noise *nz;
  struct noise_slot slot;
  uint8_t *raw, *out;
  char why[128], err[256], detail[256];
  size_t n, rawn;
  ssize_t got;
  double h, chi;
  int r, tries;

  if (!m->probe(why, sizeof(why))) {
    printf("noise: %s not tested: unavailable on this host (%s)\n", m->name,
           why);
    cr_assert_gt(strlen(why), 0);
    return;
  }
  if (RUNNING_ON_VALGRIND && !strcmp(m->name, "thread_race")) {
    /* valgrind runs one thread at a time: a few hundred samples a minute,
       and not the race the mechanism measures. */
    printf("noise: %s not tested under valgrind (it serialises threads, "
           "so there is no race to measure)\n", m->name);
    return;
  }
  n = is_slow(m->name) ? SLOW_BYTES : FAST_BYTES;
  rawn = 8192;
  if (RUNNING_ON_VALGRIND) {
    n = VALGRIND_BYTES;
    rawn = 2048;
  }
  if (!strcmp(m->name, "fsync_latency")) {
    n = FSYNC_BYTES;
    rawn = 1024;
  }

  /* Raw samples carry a min-entropy estimate. */
  raw = malloc(rawn);
  cr_assert_not_null(raw);
  got = noise_mech_raw(m, raw, rawn, noise_now_ns() + 60000000000ULL);
  h = got > 0 ? mcv_min_entropy(raw, (size_t)got) : -1.0;
  free(raw);
  cr_assert_eq(got, (ssize_t)rawn, "%s: %zd", m->name, got);
  cr_assert(h > 0.0 && h <= 8.0, "%s: MCV estimate %f", m->name, h);

  /* sha256-conditioned output passes a byte-frequency test. */
  out = malloc(n);
  cr_assert_not_null(out);
  /* A timing mechanism on a loaded shared machine can lose its entropy
     for a while, and its health tests then fail it, as they should: that
     is up to 3 tries, each on a fresh source, saying why on stdout. */
  for (tries = 0;; tries++) {
    r = noise_new(&m, 1, COND_SHA256, NOISE_XOR, 120000,
                  HEALTH_ALPHA_DEFAULT, &nz, err, sizeof(err));
    cr_assert_eq(r, 0, "%s: %s", m->name, err);
    r = noise_read(nz, out, n, 0, detail, sizeof(detail));
    if (r == 0 || tries == 2 || !strstr(detail, "health tests"))
      break;
    printf("noise: %s: try %d failed its health tests (%s); again\n",
           m->name, tries + 1, detail);
    noise_free(nz);
  }
  if (r != 0 && strstr(detail, "health tests")) {
    /* three fresh sources in a row refused: on this host the mechanism
       does not carry the min-entropy it claims (seen for sleep_jitter on
       a 2-CPU AMD EPYC VM).  Refusing is then the right answer; what must
       hold is that nothing was handed out and the source says why. */
    cr_assert_eq(noise_snapshot(nz, &slot, 1), 1);
    cr_assert_neq(slot.health.state, HEALTH_OK, "%s: refused (%s) but its "
                  "health state is ok", m->name, detail);
    printf("noise: %s: refused by its health tests on 3 fresh sources: this "
           "host's samples do not hold the %.1f bits/sample it claims (raw "
           "MCV %.3f); no bytes served (%s)\n", m->name, m->h, h, detail);
    free(out);
    noise_free(nz);
    return;
  }
  chi = chi_square(out, n);
  free(out);
  cr_assert_eq(r, 0, "%s: %s", m->name, detail);
  cr_assert_lt(chi, CHI2_255_LIMIT, "%s: chi-square %f over %zu bytes",
               m->name, chi, n);
  cr_assert_eq(noise_snapshot(nz, &slot, 1), 1);
  cr_assert_eq(slot.samples, 2 * n);
  cr_assert_eq(slot.health.state, HEALTH_OK);
  printf("noise: %s: raw MCV %.3f bits/sample; %zu sha256 bytes, "
         "chi-square %.1f\n", m->name, h, n, chi);
  noise_free(nz);
}

#define MECH_TEST(name)                                                   \
  Test(noise, name)                                                       \
  {                                                                       \
    const struct noise_mech *m = noise_mech_find(#name);                  \
    cr_assert_not_null(m);                                                \
    check_mechanism(m);                                                   \
  }

MECH_TEST(clock_jitter)
MECH_TEST(sleep_jitter)
MECH_TEST(thread_race)
MECH_TEST(dram_timing)
MECH_TEST(page_fault)
MECH_TEST(branch_timing)
MECH_TEST(syscall_latency)
MECH_TEST(fsync_latency)
MECH_TEST(rdrand)
MECH_TEST(rdseed)
MECH_TEST(hwmon)

Test(noise, timing_mechanism)
{
  check_mechanism(&noise_timing_mech);
}

Test(noise, unknown_or_repeated_names_are_refused)
{
  const char *bad[] = { "clock_jitter", "warp_core" };
  const char *twice[] = { "clock_jitter", "clock_jitter" };
  struct noise *nz;
  char err[256];

  cr_assert_eq(noise_new_named(bad, 2, COND_RAW, NOISE_XOR, 1000,
                               HEALTH_ALPHA_DEFAULT, &nz, err, sizeof(err)),
               -EINVAL);
  cr_assert(strstr(err, "warp_core") != NULL, "%s", err);
  cr_assert_eq(noise_new_named(twice, 2, COND_RAW, NOISE_XOR, 1000,
                               HEALTH_ALPHA_DEFAULT, &nz, err, sizeof(err)),
               -EINVAL);
  cr_assert(strstr(err, "twice") != NULL, "%s", err);
}

/* A noise source of the n named mechanisms, or the test fails. */
static struct noise *
open_named(const char *const *names, size_t n, enum condition_mode cond,
           enum noise_combine combine, unsigned timeout_ms)
{
  struct noise *nz;
  char err[256];

  cr_assert_eq(noise_new_named(names, n, cond, combine, timeout_ms,
                               HEALTH_ALPHA_DEFAULT, &nz, err, sizeof(err)),
               0, "%s", err);
  return nz;
}

/* A read of len bytes that succeeds. */
static void
read_ok(struct noise *nz, uint8_t *out, size_t len)
{
  char detail[256];

  cr_assert_eq(noise_read(nz, out, len, 0, detail, sizeof(detail)), 0, "%s",
               detail);
}

/* read_ok(), timed: the nanoseconds it took. */
static uint64_t
timed_read_ok(struct noise *nz, uint8_t *out, size_t len)
{
  uint64_t t0;

  t0 = noise_now_ns();
  read_ok(nz, out, len);
  return noise_now_ns() - t0;
}

/* 1, and the test says it did not run, under valgrind: for the tests that
   measure rates, which valgrind distorts. */
static int
skip_under_valgrind(void)
{
  if (!RUNNING_ON_VALGRIND)
    return 0;
  printf("noise: %s not run under valgrind (it measures rates; valgrind "
         "distorts them)\n", criterion_current_test->name);
  return 1;
}

Test(noise, all_available_mechanisms_xor_and_concat)
{
  const char *fast[] = { "clock_jitter", "branch_timing", "syscall_latency",
                         "dram_timing" };
  struct noise_slot slots[4], before[4];
  struct noise *nz;
  uint8_t out[4096];
  char detail[256];
  size_t i, k, full;

  /* xor, first read: nothing is measured yet, so the read ends when the
     first mechanism delivered every byte; the others were harvested (and
     so measured) and contributed what they had by then. */
  nz = open_named(fast, 4, COND_RAW, NOISE_XOR, 60000);
  read_ok(nz, out, sizeof(out));
  cr_assert_eq(noise_snapshot(nz, slots, 4), 4);
  full = 0;
  for (i = 0; i < 4; i++) {
    cr_assert_eq(slots[i].harvests, 1);
    cr_assert_gt(slots[i].raw_harvested, 0, "%s", slots[i].m->name);
    cr_assert_leq(slots[i].samples, sizeof(out));
    full += slots[i].samples == sizeof(out);
    cr_assert(slots[i].samples == sizeof(out) || slots[i].cut == 1,
              "%s: %" PRIu64 " samples, not cut", slots[i].m->name,
              slots[i].samples);
  }
  cr_assert_geq(full, 1);
  /* Once measured (over 64 samples), each can make a 60 s deadline, so
     the reads wait for all four and every one delivers every byte: within
     a few reads. */
  for (k = 0; k < 20; k++) {
    cr_assert_eq(noise_read(nz, out, sizeof(out), 0, detail,
                            sizeof(detail)), 0, "%s", detail);
    memcpy(before, slots, sizeof(slots));
    cr_assert_eq(noise_snapshot(nz, slots, 4), 4);
    full = 0;
    for (i = 0; i < 4; i++)
      full += slots[i].samples - before[i].samples == sizeof(out);
    if (full == 4)
      break;
  }
  printf("noise: xor of four fast mechanisms: all four delivered every "
         "byte from read %zu on\n", k + 2);
  for (i = 0; i < 4; i++) {
    cr_assert_eq(slots[i].samples - before[i].samples, sizeof(out),
                 "%s: %" PRIu64 " samples in the last read, state %s, "
                 "%" PRIu64 " raw, %" PRIu64 " ns, last error %s",
                 slots[i].m->name, slots[i].samples - before[i].samples,
                 health_state_name(slots[i].health.state),
                 slots[i].raw_harvested, slots[i].busy_ns,
                 slots[i].last_error);
    cr_assert_eq(slots[i].cut, before[i].cut, "%s", slots[i].m->name);
    cr_assert_gt(mcv_estimate(&slots[i].mcv), 0.0);
  }
  noise_free(nz);

  /* concat: together they deliver at least the request, no more than
     each one's share of pieces over. */
  nz = open_named(fast, 4, COND_RAW, NOISE_CONCAT, 60000);
  read_ok(nz, out, sizeof(out));
  cr_assert_eq(noise_snapshot(nz, slots, 4), 4);
  cr_assert_geq(slots[0].samples + slots[1].samples + slots[2].samples +
                slots[3].samples, sizeof(out));
  noise_free(nz);
}

/* xor with slow mechanisms: a read waits only for those whose measured
   rate can make the deadline; fsync_latency (an fsync a sample, far
   slower than the others) contributes what it harvested by then, and
   says so. */
Test(noise, xor_does_not_wait_for_a_slow_mechanism)
{
  const char *names[] = { "branch_timing", "fsync_latency", "dram_timing" };
  struct noise_slot slots[3], before[3];
  struct noise *nz;
  uint8_t *out;
  size_t n = 16384;
  uint64_t dt;
  int k;

  if (skip_under_valgrind())
    return;
  memset(slots, 0, sizeof(slots));
  out = malloc(n);
  cr_assert_not_null(out);
  nz = open_named(names, 3, COND_RAW, NOISE_XOR, 20000);
  /* 16,384 fsyncs take seconds, against a 20 s timeout: a read that
     waited for them would take that long (the behaviour before); one
     that does not takes milliseconds.  fsync_latency would be
     waited for only if it measured above 1,700 samples/s, and then it
     would finish in under 10 s. */
  for (k = 0; k < 6; k++) {
    memcpy(before, slots, sizeof(slots));
    dt = timed_read_ok(nz, out, n);
    cr_assert_lt(dt, 15000000000ULL, "read %d took %.1f s", k, dt / 1e9);
    cr_assert_eq(noise_snapshot(nz, slots, 3), 3);
  }
  cr_assert_eq(slots[0].samples - before[0].samples, n);
  cr_assert_eq(slots[2].samples - before[2].samples, n);
  cr_assert_eq(slots[1].failures, 0, "%s", slots[1].last_error);
  cr_assert_gt(slots[1].raw_harvested, 0);
  /* every fsync read is accounted for: delivered everything, or cut
     short (not a failure), never silently */
  cr_assert_eq(slots[1].harvests, 6);
  cr_assert_geq(slots[1].cut, 1, "fsync_latency was never cut short");
  printf("noise: xor with fsync_latency: 6 reads of %zu B, fsync "
         "contributed %" PRIu64 " samples (%" PRIu64 " raw incl. its "
         "start-up test, %.0f/s), cut short %" PRIu64 " times\n", n,
         slots[1].samples, slots[1].raw_harvested,
         slots[1].raw_harvested * 1e9 / (double)slots[1].busy_ns,
         slots[1].cut);
  noise_free(nz);
  free(out);
}

/* A test fixture mechanism: clock readings, fast until `slowing` is set,
   then one sample per millisecond (a device that slows down under load,
   as fsync_latency can). */
static volatile int slowing;

static int
slowing_probe(char *why, size_t len)
{
  (void)why;
  (void)len;
  return 1;
}

static ssize_t
slowing_harvest(uint8_t *out, size_t n, uint64_t deadline_ns)
{
  struct timespec ts, pause = { 0, 1000000 };
  size_t i;
  uint64_t t;

  for (i = 0; i < n; i++) {
    if (noise_now_ns() >= deadline_ns)
      break;
    if (slowing)
      nanosleep(&pause, NULL);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    t = (uint64_t)ts.tv_nsec * 2654435761u + i;
    out[i] = (uint8_t)(t ^ (t >> 8) ^ (t >> 16));
  }
  return (ssize_t)i;
}

static const struct noise_mech slowing_mech = {
  .name = "slowing", .what = "test fixture: clock readings that slow down",
  .h = 0.5, .probe = slowing_probe, .harvest = slowing_harvest,
};

/* The bytes of each read of a measured noise. */
#define MEASURED_LEN 16384

/* An xor noise of the nm mechanisms m with a timeout of ms, each
   mechanism's rate measured by three reads of MEASURED_LEN bytes into
   *ret_out, a new buffer of that size (free it). */
static struct noise *
open_measured(const struct noise_mech **m, size_t nm, unsigned ms,
              uint8_t **ret_out)
{
  struct noise *nz;
  uint8_t *out;
  char err[256];
  int k;

  out = malloc(MEASURED_LEN);
  cr_assert_not_null(out);
  cr_assert_eq(noise_new(m, nm, COND_RAW, NOISE_XOR, ms,
                         HEALTH_ALPHA_DEFAULT, &nz, err, sizeof(err)), 0,
               "%s", err);
  for (k = 0; k < 3; k++)
    read_ok(nz, out, MEASURED_LEN);
  *ret_out = out;
  return nz;
}

/* xor waits for a mechanism only while it can make the deadline: one whose
   rate was measured fast and then drops is no longer waited for in the
   middle of the read (it is cut, not failed), so the read ends with the
   others instead of at the timeout. */
Test(noise, xor_stops_waiting_for_a_mechanism_that_slows_down)
{
  const struct noise_mech *m[2];
  struct noise_slot slots[2], before[2];
  struct noise *nz;
  uint8_t *out;
  uint64_t dt;

  if (skip_under_valgrind())
    return;
  m[0] = noise_mech_find("branch_timing");
  m[1] = &slowing_mech;
  cr_assert_not_null(m[0]);
  slowing = 0;
  nz = open_measured(m, 2, 8000, &out);         /* both measured fast */
  cr_assert_eq(noise_snapshot(nz, before, 2), 2);
  slowing = 1;                  /* 16,384 samples now take 16 s > 8 s */
  dt = timed_read_ok(nz, out, MEASURED_LEN);
  cr_assert_eq(noise_snapshot(nz, slots, 2), 2);
  cr_assert_lt(dt, 4000000000ULL, "the read waited %.1f s for the slowed "
               "mechanism", dt / 1e9);
  cr_assert_eq(slots[1].cut, before[1].cut + 1,
               "the slowed mechanism was not cut short");
  cr_assert_lt(slots[1].samples - before[1].samples, MEASURED_LEN);
  cr_assert_eq(slots[1].timeouts, before[1].timeouts);
  cr_assert_eq(slots[1].failures, 0, "%s", slots[1].last_error);
  cr_assert_eq(slots[0].samples - before[0].samples, MEASURED_LEN);
  printf("noise: a mechanism that slowed down was cut after %.3f s\n",
         dt / 1e9);
  noise_free(nz);
  free(out);
}

/* A fixture that stalls once: fast clock readings, but the second call
   after `stall` is set sleeps a second first (a device held up by a
   busy machine, as the timing mechanisms can be under TSan). */
static volatile int stall;
static int stall_calls;

static ssize_t
stalling_harvest(uint8_t *out, size_t n, uint64_t deadline_ns)
{
  struct timespec pause = { 1, 0 };

  if (stall && ++stall_calls == 2) {
    nanosleep(&pause, NULL);
    stall = 0;
  }
  return slowing_harvest(out, n, deadline_ns);
}

static const struct noise_mech stalling_mech = {
  .name = "stalling", .what = "test fixture: clock readings that stall once",
  .h = 0.5, .probe = slowing_probe, .harvest = stalling_harvest,
};

/* xor, when every mechanism the read waits for falls behind: none of
   them counts as the read's end (none has delivered everything), so they
   go on, and the read succeeds when one catches up instead of ending at
   once with nothing (a CI failure: "0 of 20000 bytes harvested in time
   (0 mechanisms short, 0 failed health tests)"). */
Test(noise, xor_read_goes_on_when_every_waited_for_mechanism_fell_behind)
{
  const struct noise_mech *m[1];
  struct noise *nz;
  uint8_t *out;
  uint64_t dt;

  if (skip_under_valgrind())
    return;
  m[0] = &stalling_mech;
  nz = open_measured(m, 1, 3000, &out);    /* the read waits for it */
  stall_calls = 0;
  stall = 1;                    /* one piece, then a second's stall: at
                                   that rate 16,384 samples miss 3 s */
  dt = timed_read_ok(nz, out, MEASURED_LEN);
  cr_assert_eq(stall_calls, 2, "the fixture did not stall");
  cr_assert_geq(dt, 1000000000ULL);
  printf("noise: a mechanism that stalled and fell behind was still "
         "waited for, read done after %.3f s\n", dt / 1e9);
  noise_free(nz);
  free(out);
}

Test(noise, vonneumann_conditioning_delivers_whole_requests)
{
  const char *names[] = { "clock_jitter" };
  struct noise *nz;
  uint8_t out[4096];

  nz = open_named(names, 1, COND_VONNEUMANN, NOISE_XOR, 60000);
  read_ok(nz, out, sizeof(out));
  noise_free(nz);
}

Test(noise, a_deadline_that_cannot_be_met_is_a_timeout)
{
  const char *names[] = { "fsync_latency" };
  struct noise *nz;
  uint8_t *out;
  char err[256], detail[256];
  uint64_t t0;
  int r;

  /* One sample per fsync (a few thousand a second): a megabyte cannot
     arrive within 20 ms.  (Not sleep_jitter: on a host where its samples
     fail their health tests, as they do on some VMs, the read ends with
     that error before the deadline.) */
  out = malloc(1 << 20);
  cr_assert_not_null(out);
  cr_assert_eq(noise_new_named(names, 1, COND_RAW, NOISE_XOR, 20,
                               HEALTH_ALPHA_DEFAULT, &nz, err, sizeof(err)),
               0, "%s", err);
  t0 = noise_now_ns();
  r = noise_read(nz, out, 1 << 20, 0, detail, sizeof(detail));
  cr_assert_eq(r, -ETIMEDOUT, "%d", r);
  cr_assert_gt(strlen(detail), 0);
  /* It gave up at the deadline, not after the whole harvest (generous
     margin for a loaded machine). */
  cr_assert_lt(noise_now_ns() - t0, 10000000000ULL);
  noise_free(nz);
  free(out);
}
