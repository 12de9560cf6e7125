/* qrs-audit's statistics of a run: what the u values of a run's draws
   say, next to the checks that they were served honestly.

   One run: the Kolmogorov-Smirnov and Anderson-Darling tests of u
   against Uniform(0, 1), the Wald-Wolfowitz runs test of u above and
   below 1/2 in record order (serial dependence), Stouffer's Z of
   Phi^-1(u), and per source the draws, the fallbacks and the latency
   (received to sent).  With a control arm (another run, e.g. the same
   experiment on the system CSPRNG): the two-sample KS test, the
   difference of the mean of Phi^-1(u) with its z and p, and its power:
   the shift (in standard deviations of Phi^-1(u)) detected with 80 %
   power at two-sided alpha 0.05, and the power against a shift of 0.01.

   The plots (audit_stats_plots): the histogram of u with its +-2 s.e.
   band, the QQ plot in difference form with the KS 5 % band, u over the
   run, and each source's latency distribution, drawn by gnuplot as PNG
   and SVG. */
#ifndef QRS_AUDIT_STATS_H
#define QRS_AUDIT_STATS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define AUDIT_SOURCES_MAX 32        /* sources told apart; more: "other" */
#define AUDIT_SOURCE_LEN 64

/* One draw as the statistics see it.  t_recv and t_sent in seconds of
   any one clock; a latency is counted only when t_sent >= t_recv > 0. */
struct audit_sample {
  double u;
  double t_recv, t_sent;
  char source[AUDIT_SOURCE_LEN];    /* the source that served it */
  int fallback;
};

struct audit_source_stats {
  char name[AUDIT_SOURCE_LEN];
  uint64_t n, fallbacks, timed;     /* timed: draws with a latency */
  double lat_p50_ms, lat_p99_ms, lat_max_ms;
};

struct audit_stats {
  size_t n;                         /* draws with 0 < u < 1 */
  size_t excluded;                  /* u outside (0, 1): not tested */
  double mean_u;
  double ks_d, ks_p;
  double ad_a2, ad_p;
  uint64_t runs, above;             /* runs of u >= 1/2 or < 1/2 */
  double runs_z, runs_p;
  double stouffer_z, stouffer_p;
  size_t n_sources;
  struct audit_source_stats src[AUDIT_SOURCES_MAX + 1];
  /* the control arm */
  int has_control;
  size_t nc;
  double ks2_d, ks2_p;
  double diff, diff_se, diff_z, diff_p;   /* mean Phi^-1(u): run - control */
  double mde80;                     /* shift detected with 80 % power */
  double power_001;                 /* power against a shift of 0.01 */
};

/* The statistics of the n samples s and, when c is not NULL, of the
   control arm's nc samples against them.  0, or -ENOMEM; -EINVAL when
   fewer than 2 samples (or 2 in the control arm) lie in (0, 1). */
int audit_stats_compute(const struct audit_sample *s, size_t n,
                        const struct audit_sample *c, size_t nc,
                        struct audit_stats *out);

/* Anderson-Darling A^2 of the n sorted values u against Uniform(0, 1),
   and P(A^2 >= a2) for n samples (Marsaglia and Marsaglia 2004, finite-n
   correction included). */
double audit_ad_a2(const double *u, size_t n);
double audit_ad_pvalue(double a2, size_t n);

/* The two-sample KS distance of sorted a (n) and b (m). */
double audit_ks2(const double *a, size_t n, const double *b, size_t m);

/* The report in text on f. */
void audit_stats_print(FILE *f, const struct audit_stats *st);

/* The report as a json-c object (struct json_object *; the caller owns
   it), so that the header needs no json-c. */
void *audit_stats_json(const struct audit_stats *st);

/* The plots and their data in dir (created if missing): u_hist, u_qq,
   u_time and latency, each .png and .svg, and audit.gp.  0, or -errno
   (err says what failed). */
int audit_stats_plots(const char *dir, const struct audit_sample *s,
                      size_t n, const struct audit_stats *st, char *err,
                      size_t errlen);

#endif
