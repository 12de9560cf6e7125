/* The two promises, in process over qrsd's own source and amplifier code:
   u is uniform under the null (KS over 20,000 draws from the system
   source, p > 1e-4) for zscore_mean with the correct sigma, calibrated
   ecdf and exact; and byte-mean shifts of +0.5 and -0.5 from the mock
   source are detected in their direction by every amplifier.

   ecdf's u is uniform only up to its calibration's own KS error, about
   0.87 / sqrt(K) for K blocks: with the default K = 2,000 that is ~0.02,
   which 20,000 draws detect (p ~ 1e-8).  The uniformity test therefore
   calibrates with K = 200,000 blocks of 100 bytes, and the test below
   shows that the default K is detected. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <qrs/error.h>

#include "amp_exact.h"
#include "engine/ampreq.h"
#include "sources/source.h"
#include "testreg.h"
#include "ustat.h"

#define DRAWS 20000

static uint32_t samples = 1000;
static uint32_t ecdf_blocks = 2000;

static struct qrsd_conf *
conf_of(const char *amp)
{
  static struct qrsd_conf c;

  memset(&c, 0, sizeof(c));
  c.amp_type = (char *)amp;
  c.amp_population_mean = 127.5;
  c.amp_population_std = 73.90027063;
  c.amp_epsilon = 1e-10;
  c.amp_ecdf_calibration_samples = ecdf_blocks;
  c.max_calibration_samples = 1000000;
  c.max_calibration_bytes = 1u << 30;
  c.exact_cache_bytes = 64u << 20;
  return &c;
}

/* A mock of shift and seed, or the system source. */
static struct source *
open_src(enum conf_source_type type, double shift, uint64_t seed)
{
  return testsrc_open(type, type == CONF_SOURCE_MOCK ? "mock" : "system",
                      seed, shift);
}

/* n draws of amplifier amp from src (calibrating from cal) into u. */
static void
draws(const char *amp, struct source *src, struct source *cal, double *u,
      size_t n)
{
  QrsIpc__Draw m = QRS_IPC__DRAW__INIT;
  struct amp_exact_table *t = NULL;
  struct amp_state st;
  struct amp_req a;
  struct amp_result r;
  struct amp_params p;
  uint32_t blocks;
  uint8_t *buf;
  size_t i, rb;
  char msg[256];

  m.amplifier = (char *)amp;
  cr_assert_eq(ampreq_resolve(conf_of(amp), &m, samples, &a, msg,
                              sizeof(msg)), 0, "%s", msg);
  amp_state_init(&st);
  blocks = amp_state_missing(&st, &a);
  if (blocks) {
    buf = malloc((size_t)blocks * samples);
    cr_assert_not_null(buf);
    cr_assert_eq(cal->ops->read(cal, buf, (size_t)blocks * samples, msg, sizeof(msg)), 0);
    cr_assert_eq(amp_state_calibrate(&st, &a, buf, blocks, msg,
                                     sizeof(msg)), 0, "%s", msg);
    free(buf);
    cr_assert_eq(amp_state_missing(&st, &a), 0);
  }
  if (a.type == AMP_EXACT)
    cr_assert_eq(amp_exact_get(samples, &t), 0);
  rb = ampreq_read_bytes(&a);
  buf = malloc(n * rb);
  cr_assert_not_null(buf);
  cr_assert_eq(src->ops->read(src, buf, n * rb, msg, sizeof(msg)), 0);
  for (i = 0; i < n; i++) {
    cr_assert_eq(amp_state_run(&st, &a, t, buf + i * rb, &r, &p), 0);
    u[i] = r.u;
  }
  free(buf);
  amp_exact_release(t);
  amp_state_free(&st);
}

static double
ks_p(const char *amp)
{
  struct source *sys;
  double *u, d, p;

  sys = open_src(CONF_SOURCE_SYSTEM, 0, 0);
  u = malloc(DRAWS * sizeof(*u));
  cr_assert_not_null(u);
  draws(amp, sys, sys, u, DRAWS);
  d = ustat_ks(u, DRAWS);
  p = ustat_ks_pvalue(d, DRAWS);
  cr_log_info("%s (N %u): KS D %.5f p %.4g", amp, samples, d, p);
  free(u);
  source_free(sys);
  return p;
}

Test(statistics, zscore_mean_is_uniform_with_the_correct_sigma)
{
  cr_assert_gt(ks_p("zscore_mean"), 1e-4);
}

Test(statistics, calibrated_ecdf_is_uniform)
{
  samples = 100;
  ecdf_blocks = 200000;
  cr_assert_gt(ks_p("ecdf"), 1e-4);
}

Test(statistics, ecdf_with_the_default_calibration_is_detectably_lumpy)
{
  double p, worst;
  int i;

  /* D_cal ~ 0.87/sqrt(2000) = 0.019 against the test's 0.0061 noise:
     over five calibrations at least one is far beyond p = 1e-3 (all
     five within it: probability ~1e-4). */
  worst = 1.0;
  for (i = 0; i < 5; i++) {
    p = ks_p("ecdf");
    worst = p < worst ? p : worst;
  }
  cr_assert_lt(worst, 1e-3, "best of five calibrations: p %g", worst);
}

Test(statistics, exact_is_uniform)
{
  cr_assert_gt(ks_p("exact"), 1e-4);
}

/* Stouffer's Z of 2,000 draws with the byte mean shifted by shift: the
   expected Z is shift sqrt(N * 2000) / 73.9 = +-9.6 for shift +-0.5. */
static double
stouffer(const char *amp, double shift)
{
  struct source *mock, *null;
  double *u, z;
  size_t i, n;

  n = 2000;
  mock = open_src(CONF_SOURCE_MOCK, shift, 11);
  null = open_src(CONF_SOURCE_MOCK, 0.0, 12);   /* calibration: the null */
  u = malloc(n * sizeof(*u));
  cr_assert_not_null(u);
  draws(amp, mock, null, u, n);
  z = 0.0;
  for (i = 0; i < n; i++)
    z += ustat_phi_inv(u[i]);
  free(u);
  source_free(mock);
  source_free(null);
  return z / sqrt((double)n);
}

Test(statistics, mean_shifts_are_detected_in_their_direction)
{
  static const char *const amps[] = { "zscore_mean", "zscore_thought",
                                      "ecdf", "exact" };
  double up, down, none;
  size_t i;

  for (i = 0; i < sizeof(amps) / sizeof(amps[0]); i++) {
    up = stouffer(amps[i], +0.5);
    down = stouffer(amps[i], -0.5);
    none = stouffer(amps[i], 0.0);
    cr_log_info("%s: Z %+.2f (+0.5) %+.2f (-0.5) %+.2f (0)", amps[i], up,
                down, none);
    cr_assert_gt(up, 4.0, "%s: +0.5 gave Z %g", amps[i], up);
    cr_assert_lt(down, -4.0, "%s: -0.5 gave Z %g", amps[i], down);
    cr_assert_lt(fabs(none), 4.5, "%s: no shift gave Z %g", amps[i], none);
  }
}
