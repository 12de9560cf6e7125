/* qrs-audit's study statistics (tools/qrs-audit/audit_study_stats.c):
   Student's t tail against its closed forms (1 and 2 degrees of
   freedom) and a table value, Welch's t, df and intervals on a small
   sample worked by hand, the two-sample KS p-value at its limits,
   Phi^-1, the power formula at its known points; then by simulation
   (seeded): the p-value of the primary statistic over 200 null studies
   of 2,000 units is uniform (one-sample KS), for Welch's t and for the
   two-sample KS of u, and with a shift injected the fraction of studies
   that detect it is the power predicted, within 3 binomial standard
   errors. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "audit_study_stats.h"
#include "ustat.h"
#define TESTRNG_SEED 0x2545f4914f6cdd1dull
#include "testrng.h"

#define STUDIES 200
#define UNITS 2000

Test(study_stats, t_tail_matches_closed_forms)
{
  double t;

  /* df 1: Cauchy, P(|T| >= t) = 1 - 2 atan(t) / pi */
  for (t = 0.25; t < 40; t *= 2)
    cr_assert_float_eq(study_t_pvalue(t, 1), 1 - 2 * atan(t) / M_PI, 1e-10,
                       "df 1, t %g: %g", t, study_t_pvalue(t, 1));
  /* df 2: P(|T| >= t) = 1 - t / sqrt(2 + t^2) */
  for (t = 0.25; t < 40; t *= 2)
    cr_assert_float_eq(study_t_pvalue(t, 2), 1 - t / sqrt(2 + t * t), 1e-10);
  /* the table: t_{10, 0.975} = 2.228139 */
  cr_assert_float_eq(study_t_pvalue(2.228139, 10), 0.05, 1e-6);
  cr_assert_float_eq(study_t_pvalue(-2.228139, 10), 0.05, 1e-6);
  /* a large df: the normal */
  cr_assert_float_eq(study_t_pvalue(1.959964, 1e7), 0.05, 1e-5);
  cr_assert_float_eq(study_t_pvalue(0, 5), 1, 1e-12);
}

Test(study_stats, welch_on_a_sample_worked_by_hand)
{
  const double a[] = { 1, 2, 3, 4, 5 }, b[] = { 2, 4, 6, 8, 10 };
  struct study_welch w;
  double df = 6.25 / (0.25 / 4 + 4.0 / 4), tq;

  cr_assert_eq(study_welch(a, 5, b, 5, &w), 0);
  /* means 3 and 6, variances 2.5 and 10: se = sqrt(0.5 + 2) */
  cr_assert_float_eq(w.diff, -3, 1e-12);
  cr_assert_float_eq(w.se, sqrt(2.5), 1e-12);
  cr_assert_float_eq(w.t, -3 / sqrt(2.5), 1e-12);
  /* df = (0.5 + 2)^2 / (0.5^2 / 4 + 2^2 / 4) */
  cr_assert_float_eq(w.df, df, 1e-9);
  cr_assert_float_eq(w.p, study_t_pvalue(w.t, df), 1e-12);
  cr_assert(w.p > 0.1 && w.p < 0.12, "p %g", w.p);
  /* the interval: diff +- t_{df, 0.975} se, where t's tail is 0.05 */
  tq = (w.diff_hi - w.diff) / w.se;
  cr_assert_float_eq(w.diff - w.diff_lo, w.diff_hi - w.diff, 1e-9);
  cr_assert_float_eq(study_t_pvalue(tq, df), 0.05, 1e-8);
  /* Cohen's d: -3 / sqrt((4 * 2.5 + 4 * 10) / 8) */
  cr_assert_float_eq(w.d, -3 / sqrt(6.25), 1e-12);
  cr_assert(w.d_lo < w.d && w.d < w.d_hi);
  /* too few values, no variance */
  cr_assert_eq(study_welch(a, 1, b, 5, &w), -EINVAL);
  cr_assert_eq(study_welch((double[]){ 1, 1 }, 2, (double[]){ 2, 2 }, 2, &w),
               -EINVAL);
}

Test(study_stats, ks2_at_its_limits)
{
  double a[4] = { 0.1, 0.2, 0.3, 0.4 }, b[4] = { 0.4, 0.3, 0.2, 0.1 };
  double c[100], d[100];
  int i;

  cr_assert_float_eq(study_ks2(a, 4, b, 4), 0, 1e-15);
  cr_assert_float_eq(study_ks2_pvalue(0, 4, 4), 1, 1e-15);
  for (i = 0; i < 100; i++) {
    c[i] = i;
    d[i] = 1000 + i;
  }
  cr_assert_float_eq(study_ks2(c, 100, d, 100), 1, 1e-15);
  cr_assert_lt(study_ks2_pvalue(1, 100, 100), 1e-20);
  /* the Kolmogorov 5 % point, 1.358 / sqrt(n_e), n_e large */
  cr_assert_float_eq(study_ks2_pvalue(1.358 / sqrt(50000), 100000, 100000),
                     0.05, 0.002);
}

Test(study_stats, phi_inv_and_power_at_known_points)
{
  cr_assert_float_eq(ustat_phi_inv(0.975), 1.959963984540054, 1e-12);
  cr_assert_float_eq(ustat_phi_inv(0.5), 0, 1e-15);
  cr_assert_float_eq(ustat_phi(ustat_phi_inv(1e-9)), 1e-9, 1e-20);
  /* no effect: power = alpha */
  cr_assert_float_eq(study_power(0, 100, 100, 0.05), 0.05, 1e-12);
  /* n per arm = 2 (z_0.975 + z_0.8)^2 / delta^2: 80 % */
  cr_assert_float_eq(study_power(0.2, 392, 392, 0.05), 0.80, 0.002);
  cr_assert_gt(study_power(0.2, 1000, 1000, 0.05), 0.99);
}

/* A study of n units (arm by a fair coin), the first arm's values
   shifted by delta: Welch's p (and into *ks_p the two-sample KS p of
   the uniform values behind them). */
static double
study(size_t n, double delta, double *a, double *b, double *ks_p,
      size_t *ret_na, size_t *ret_nb)
{
  struct study_welch w;
  size_t na = 0, nb = 0, i;
  double u;

  for (i = 0; i < n; i++) {
    u = rnd() + 0x1p-54;
    if (rnd() < 0.5)
      a[na++] = ustat_phi_inv(u) + delta;
    else
      b[nb++] = ustat_phi_inv(u);
  }
  cr_assert_eq(study_welch(a, na, b, nb, &w), 0);
  if (ks_p)
    *ks_p = study_ks2_pvalue(study_ks2(a, na, b, nb), na, nb);
  *ret_na = na;
  *ret_nb = nb;
  return w.p;
}

Test(study_stats, null_p_values_are_uniform)
{
  double *a = malloc(UNITS * sizeof(double)), *b = malloc(UNITS *
                                                          sizeof(double));
  double pw[STUDIES], pk[STUDIES], d;
  size_t na, nb;
  int k;

  cr_assert(a && b);
  for (k = 0; k < STUDIES; k++)
    pw[k] = study(UNITS, 0, a, b, &pk[k], &na, &nb);
  d = ustat_ks(pw, STUDIES);
  cr_assert_gt(ustat_ks_pvalue(d, STUDIES), 0.001, "Welch p over %d null "
               "studies: KS D %g", STUDIES, d);
  d = ustat_ks(pk, STUDIES);
  cr_assert_gt(ustat_ks_pvalue(d, STUDIES), 0.001, "KS2 p over %d null "
               "studies: KS D %g", STUDIES, d);
  free(a);
  free(b);
}

Test(study_stats, a_shift_is_detected_with_the_power_predicted)
{
  const int reps = 400;
  const double delta = 0.15, alpha = 0.05;
  double *a = malloc(1000 * sizeof(double)), *b = malloc(1000 *
                                                         sizeof(double));
  double predicted = 0, se, hit = 0;
  size_t na, nb;
  int k;

  cr_assert(a && b);
  for (k = 0; k < reps; k++) {
    hit += study(1000, delta, a, b, NULL, &na, &nb) <= alpha;
    predicted += study_power(delta, na, nb, alpha);
  }
  predicted /= reps;
  hit /= reps;
  se = sqrt(predicted * (1 - predicted) / reps);
  cr_assert(predicted > 0.5 && predicted < 0.8, "predicted %g", predicted);
  cr_assert_lt(fabs(hit - predicted), 3 * se, "detected %g, predicted %g "
               "(s.e. %g)", hit, predicted, se);
  free(a);
  free(b);
}

Test(study_stats, ks_power_by_simulation_matches_detections)
{
  const int reps = 400;
  const unsigned sims = 1000;
  const double delta = 0.25, alpha = 0.05;
  double a[300], b[300], p, se, hit = 0, ksp;
  size_t i;
  int k;

  p = study_power_ks(delta, 300, 300, alpha, sims, 7);
  cr_assert(p > 0.4 && p < 0.95, "KS power %g", p);
  for (k = 0; k < reps; k++) {
    for (i = 0; i < 300; i++) {
      a[i] = ustat_phi_inv(rnd() + 0x1p-54) + delta;
      b[i] = ustat_phi_inv(rnd() + 0x1p-54);
    }
    ksp = study_ks2_pvalue(study_ks2(a, 300, b, 300), 300, 300);
    hit += ksp <= alpha;
  }
  hit /= reps;
  se = sqrt(p * (1 - p) / reps + p * (1 - p) / sims);
  cr_assert_lt(fabs(hit - p), 3 * se, "detected %g, simulated power %g "
               "(s.e. %g)", hit, p, se);
  cr_assert_eq(study_power_ks_sims(1000, 1000), 1000);
  cr_assert_eq(study_power_ks_sims(1000000, 1000000), 200);
}
