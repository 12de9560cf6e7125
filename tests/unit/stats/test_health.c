/* SP 800-90B health tests and the MCV estimate. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <valgrind/valgrind.h>

#include "stats/health.h"

/* A deterministic stand-in for a good noise source (xorshift64*). */
static uint64_t
next64(uint64_t *x)
{
  *x ^= *x >> 12;
  *x ^= *x << 25;
  *x ^= *x >> 27;
  return *x * 2685821657736338717ULL;
}

static void
fill_good(uint8_t *b, size_t n, uint64_t seed)
{
  size_t i;

  for (i = 0; i < n; i++)
    b[i] = (uint8_t)(next64(&seed) >> 56);
}

Test(health, rct_cutoff_matches_the_standard)
{
  /* SP 800-90B 4.4.1 example: alpha = 2^-20, H = 2 bits -> C = 11. */
  cr_assert_eq(health_rct_cutoff(ldexp(1, -20), 2.0), 11);
  /* alpha = 2^-30, H = 1 -> C = 31 (also jitterentropy's RCT cutoff at
     osr 1). */
  cr_assert_eq(health_rct_cutoff(HEALTH_ALPHA_DEFAULT, 1.0), 31);
  cr_assert_eq(health_rct_cutoff(ldexp(1, -20), 0.5), 41);
  cr_assert_eq(health_rct_cutoff(ldexp(1, -30), 8.0), 5);
  cr_assert_eq(health_rct_cutoff(0.0, 1.0), 0);
  cr_assert_eq(health_rct_cutoff(0.5, 0.0), 0);
  cr_assert_eq(health_rct_cutoff(0.5, 9.0), 0);
}

Test(health, apt_cutoff_matches_table_2_of_sp800_90b)
{
  /* SP 800-90B (January 2018), section 4.4.2, Table 2: "Adaptive
     Proportion Test cutoff values", alpha = 2^-20. */
  static const struct {
    double h;
    unsigned w, c;
  } t2[] = {
    { 0.2, 1024, 941 }, { 0.4, 1024, 840 }, { 0.6, 1024, 748 },
    { 0.8, 1024, 664 }, { 1.0, 1024, 589 },
    { 0.5, 512, 410 }, { 1.0, 512, 311 }, { 2.0, 512, 177 },
    { 4.0, 512, 62 }, { 8.0, 512, 13 },
  };
  size_t i;

  for (i = 0; i < sizeof(t2) / sizeof(t2[0]); i++)
    cr_expect_eq(health_apt_cutoff(ldexp(1, -20), t2[i].h, t2[i].w), t2[i].c,
                 "H=%g W=%u: got %u, Table 2 says %u", t2[i].h, t2[i].w,
                 health_apt_cutoff(ldexp(1, -20), t2[i].h, t2[i].w), t2[i].c);
}

Test(health, apt_cutoff_at_the_default_alpha)
{
  /* alpha = 2^-30, W = 512: H = 1 and 1/2 give 325 and 422, the first two
     entries of jitterentropy's jent_apt_cutoff_lookup (whose corrected
     formula 2 + qbinom(1 - 2^-30, 511, p) agrees with the standard's at
     these points). */
  cr_assert_eq(health_apt_cutoff(HEALTH_ALPHA_DEFAULT, 1.0, 512), 325);
  cr_assert_eq(health_apt_cutoff(HEALTH_ALPHA_DEFAULT, 0.5, 512), 422);
  /* A smaller alpha never lowers a cutoff. */
  cr_assert_geq(health_apt_cutoff(ldexp(1, -40), 4.0, 512),
                health_apt_cutoff(ldexp(1, -30), 4.0, 512));
  /* No cap: when a whole window of one value is likelier than alpha
     (H = 0.02: 0.986^512 = 7e-4), the cutoff is W + 1 and the test
     cannot fail (it used to be capped at W: a healthy syscall_latency
     failed 'value 0x0a seen 512 times (cutoff 512, H=0.02)'). */
  cr_assert_eq(health_apt_cutoff(ldexp(1, -60), 0.01, 512), 513);
  cr_assert_eq(health_apt_cutoff(HEALTH_ALPHA_DEFAULT, 0.02, 512), 513);
  cr_assert_leq(health_apt_cutoff(HEALTH_ALPHA_DEFAULT, 0.1, 512), 512);
  cr_assert_eq(health_apt_cutoff(0.5, 1.0, 1), 0);
}

Test(health, init_rejects_bad_parameters)
{
  struct health hs;

  cr_assert_eq(health_init(&hs, 0.0, 1.0, 0), -EINVAL);
  cr_assert_eq(health_init(&hs, 1.0, 1.0, 0), -EINVAL);
  cr_assert_eq(health_init(&hs, HEALTH_ALPHA_DEFAULT, 0.0, 0), -EINVAL);
  cr_assert_eq(health_init(&hs, HEALTH_ALPHA_DEFAULT, 8.5, 0), -EINVAL);
  cr_assert_eq(health_init(&hs, HEALTH_ALPHA_DEFAULT, 2.0, 1), -EINVAL);
  cr_assert_eq(health_init(&hs, HEALTH_ALPHA_DEFAULT, 1.0, 1), 0);
  cr_assert_eq(hs.apt_window, 1024);
  cr_assert_eq(hs.state, HEALTH_STARTUP);
}

Test(health, startup_needs_1024_samples)
{
  struct health hs;
  uint8_t b[1024];

  fill_good(b, sizeof(b), 1);
  cr_assert_eq(health_init(&hs, HEALTH_ALPHA_DEFAULT, 4.0, 0), 0);
  cr_assert_eq(health_feed(&hs, b, 1023), 0);
  cr_assert_eq(hs.state, HEALTH_STARTUP);
  cr_assert_eq(health_feed(&hs, b + 1023, 1), 0);
  cr_assert_eq(hs.state, HEALTH_OK);
  cr_assert_str_eq(health_state_name(hs.state), "ok");
}

Test(health, good_source_passes_a_long_run)
{
  struct health hs;
  uint8_t *b;
  size_t n;

  n = RUNNING_ON_VALGRIND ? 1 << 16 : 1 << 20;
  b = malloc(n);
  cr_assert_not_null(b);
  fill_good(b, n, 99);
  cr_assert_eq(health_init(&hs, HEALTH_ALPHA_DEFAULT, 7.0, 0), 0);
  cr_assert_eq(health_feed(&hs, b, n), 0, "%s", hs.reason);
  cr_assert_eq(hs.state, HEALTH_OK);
  cr_assert_eq(hs.samples, n);
  free(b);
}

Test(health, stuck_source_trips_rct_at_its_cutoff)
{
  struct health hs;
  uint8_t b[2048], stuck;
  unsigned i;
  int r;

  fill_good(b, sizeof(b), 5);
  cr_assert_eq(health_init(&hs, HEALTH_ALPHA_DEFAULT, 2.0, 0), 0);
  cr_assert_eq(hs.rct_cutoff, 16);          /* 1 + 30 / 2 */
  cr_assert_eq(health_feed(&hs, b, sizeof(b)), 0);
  cr_assert_eq(hs.state, HEALTH_OK);

  /* A value different from the last good one, then stuck. */
  stuck = (uint8_t)(b[sizeof(b) - 1] + 1);
  for (i = 1; i <= hs.rct_cutoff; i++) {
    r = health_feed(&hs, &stuck, 1);
    if (i < hs.rct_cutoff)
      cr_assert_eq(r, 0, "tripped early at %u", i);
    else
      cr_assert_eq(r, -EIO, "did not trip at the cutoff");
  }
  cr_assert_eq(hs.state, HEALTH_FAILED);
  cr_assert_eq(hs.rct_failures, 1);
  cr_assert(strstr(hs.reason, "repetition count") != NULL, "%s", hs.reason);
}

/* A source that claims very little (H = 0.02, as syscall_latency) may
   give a whole APT window of one value without failing (the standard's
   cutoff is then W + 1), and a stuck one still trips the repetition count
   test at 1 + 30 / 0.02 = 1,501. */
Test(health, low_claim_passes_whole_windows_and_trips_rct_when_stuck)
{
  static uint8_t b[8192];
  struct health hs;
  unsigned i;

  cr_assert_eq(health_init(&hs, HEALTH_ALPHA_DEFAULT, 0.02, 0), 0);
  cr_assert_eq(hs.rct_cutoff, 1501);
  cr_assert_eq(hs.apt_cutoff, hs.apt_window + 1);
  /* Runs of 600 equal values (windows of one value), then a new value. */
  for (i = 0; i < sizeof(b); i++)
    b[i] = (uint8_t)(10 + (i / 600) % 3);
  cr_assert_eq(health_feed(&hs, b, sizeof(b)), 0, "%s", hs.reason);
  cr_assert_eq(hs.state, HEALTH_OK);
  memset(b, 0x0a, 1501);
  cr_assert_eq(health_feed(&hs, b, 1501), -EIO);
  cr_assert(strstr(hs.reason, "repetition count") != NULL, "%s", hs.reason);
}

Test(health, biased_source_trips_apt_not_rct)
{
  struct health hs;
  uint8_t b[4096];
  size_t i;
  int r;

  /* Every other sample is 0x00, the rest cycle through 1..255: half the
     samples are one value, for a source that claims 4 bits per sample
     (p = 1/16), and no value ever repeats back to back. */
  for (i = 0; i < sizeof(b); i++)
    b[i] = (i % 2) ? (uint8_t)(1 + (i / 2) % 255) : 0;
  cr_assert_eq(health_init(&hs, HEALTH_ALPHA_DEFAULT, 4.0, 0), 0);
  r = health_feed(&hs, b, sizeof(b));
  cr_assert_eq(r, -EIO);
  cr_assert_eq(hs.apt_failures, 1);
  cr_assert_eq(hs.rct_failures, 0);
  cr_assert(strstr(hs.reason, "adaptive proportion") != NULL, "%s",
            hs.reason);
  /* It fails within the first window (512 samples). */
  cr_assert_leq(hs.samples, sizeof(b));
}

Test(health, binary_source_uses_a_1024_window)
{
  struct health hs;
  uint8_t b[1024];
  size_t i;

  /* 1, 0, 1, 1, 0, 1, 1, 0 ...: two thirds ones against a claim of full
     entropy per bit; no run is longer than two. */
  for (i = 0; i < sizeof(b); i++)
    b[i] = (i % 3) != 1;
  cr_assert_eq(health_init(&hs, HEALTH_ALPHA_DEFAULT, 1.0, 1), 0);
  cr_assert_eq(health_feed(&hs, b, sizeof(b)), -EIO);
  cr_assert_eq(hs.apt_failures, 1);
}

Test(health, failed_source_recovers_only_after_a_good_retest)
{
  struct health hs;
  uint8_t good[1024], stuck[64];

  fill_good(good, sizeof(good), 77);
  memset(stuck, 0x5a, sizeof(stuck));
  cr_assert_eq(health_init(&hs, HEALTH_ALPHA_DEFAULT, 4.0, 0), 0);
  cr_assert_eq(health_feed(&hs, good, sizeof(good)), 0);
  cr_assert_eq(health_feed(&hs, stuck, sizeof(stuck)), -EIO);

  /* Good samples alone do not clear a failure. */
  cr_assert_eq(health_feed(&hs, good, sizeof(good)), -EIO);
  cr_assert_eq(hs.state, HEALTH_FAILED);

  /* A re-test that fails again keeps it failed. */
  health_retest(&hs);
  cr_assert_eq(hs.state, HEALTH_STARTUP);
  cr_assert_eq(health_feed(&hs, stuck, sizeof(stuck)), -EIO);
  cr_assert_eq(hs.rct_failures, 2);

  /* A full good start-up test brings it back. */
  health_retest(&hs);
  cr_assert_eq(health_feed(&hs, good, 1000), 0);
  cr_assert_eq(hs.state, HEALTH_STARTUP);
  cr_assert_eq(health_feed(&hs, good + 1000, 24), 0);
  cr_assert_eq(hs.state, HEALTH_OK);
  cr_assert(strstr(hs.reason, "repetition count") != NULL,
            "the last reason is kept for status: %s", hs.reason);
}

Test(health, mcv_estimate)
{
  uint8_t *b;
  size_t n, i;
  double h;

  n = RUNNING_ON_VALGRIND ? 1 << 16 : 1 << 20;
  b = malloc(n);
  cr_assert_not_null(b);

  /* Every value equally often: p = 1/256, the bound p_u adds
     2.576 sqrt(p (1 - p) / (n - 1)). */
  for (i = 0; i < n; i++)
    b[i] = (uint8_t)i;
  h = mcv_min_entropy(b, n);
  cr_assert_float_eq(h, -log2(1.0 / 256 + 2.576 * sqrt((1.0 / 256) *
                     (255.0 / 256) / (double)(n - 1))), 1e-9);
  cr_assert(h > 7.7 && h < 8.0, "%f", h);

  /* Half the samples one value: about one bit. */
  for (i = 0; i < n; i += 2)
    b[i] = 0;
  h = mcv_min_entropy(b, n);
  cr_assert(h > 0.98 && h < 1.0, "%f", h);

  memset(b, 7, n);
  cr_assert_float_eq(mcv_min_entropy(b, n), 0.0, 1e-12);
  cr_assert_lt(mcv_min_entropy(b, 1), 0.0);
  free(b);
}
