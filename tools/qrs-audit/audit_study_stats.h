/* The statistics of a study (audit_study.h), as plain functions on
   arrays: Welch's t with its p-value, effect size and confidence
   intervals; the two-sample Kolmogorov-Smirnov p-value; the power a
   study has for a stated effect.  Phi and Phi^-1 are ustat.h's.

   Welch's t: t = (mean_a - mean_b) / se, se = sqrt(v_a/n_a + v_b/n_b),
   p two-sided from Student's t with the Welch-Satterthwaite degrees of
   freedom df = se^4 / ((v_a/n_a)^2/(n_a-1) + (v_b/n_b)^2/(n_b-1)); the
   difference's 95 % CI diff +- t_{df,0.975} se; the effect size is
   Cohen's d = diff / s_pooled with the normal-theory CI
   d +- 1.96 sqrt((n_a+n_b)/(n_a n_b) + d^2/(2(n_a+n_b))).

   Two-sample KS: D = sup |F_a - F_b|, p = Q_KS((sqrt(n_e) + 0.12 +
   0.11/sqrt(n_e)) D) with n_e = n_a n_b / (n_a + n_b) (the asymptotic
   Kolmogorov distribution, Stephens' correction).

   Power of a two-sided level-alpha test of a shift of delta standard
   deviations between groups of n_a and n_b: Phi(delta/s - z) +
   Phi(-delta/s - z), s = sqrt(1/n_a + 1/n_b), z = Phi^-1(1 - alpha/2)
   (the normal approximation); for KS, by simulation (seeded: the same
   figure every run). */
#ifndef QRS_AUDIT_STUDY_STATS_H
#define QRS_AUDIT_STUDY_STATS_H

#include <stddef.h>
#include <stdint.h>

struct study_welch {
  size_t na, nb;
  double mean_a, mean_b, sd_a, sd_b;
  double diff, se, t, df, p;        /* diff = mean_a - mean_b */
  double diff_lo, diff_hi;          /* 95 % CI of diff */
  double d, d_lo, d_hi;             /* Cohen's d and its 95 % CI */
};

/* Welch's t of a[na] against b[nb] into *w: 0, or -EINVAL when either
   has fewer than 2 values or both have no variance. */
int study_welch(const double *a, size_t na, const double *b, size_t nb,
                struct study_welch *w);

/* P(|T_df| >= |t|), Student's t with df > 0 degrees of freedom (real). */
double study_t_pvalue(double t, double df);

/* The two-sample KS distance of a[na] and b[nb] (sorted here) and its
   asymptotic p-value. */
double study_ks2(double *a, size_t na, double *b, size_t nb);
double study_ks2_pvalue(double d, size_t na, size_t nb);

/* The power (normal approximation, above) of a two-sided test at alpha
   against a shift of effect standard deviations, groups na and nb. */
double study_power(double effect, size_t na, size_t nb, double alpha);

/* The power of the two-sample KS test at alpha against a shift of
   effect standard deviations of normal values, groups na and nb: the
   fraction of sims simulated studies (a PRNG seeded with seed) that it
   detects.  -ENOMEM as a negative value. */
double study_power_ks(double effect, size_t na, size_t nb, double alpha,
                      unsigned sims, uint64_t seed);

/* The simulations study_power_ks() is given for groups na and nb: about
   2e7 values in all, 200 to 1000 studies. */
unsigned study_power_ks_sims(size_t na, size_t nb);

#endif
