/* qrs-audit's statistics of a run (tools/qrs-audit/audit_stats.c): the
   Anderson-Darling distribution against its published critical values,
   the runs test on sequences with known runs, KS/AD/runs on uniform and
   skewed samples, the control arm's comparison and power, the per-source
   counts and latencies, and the plots gnuplot draws. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <json-c/json.h>

#include "audit_stats.h"
#define TESTRNG_SEED 0x9e3779b97f4a7c15ull
#include "testrng.h"
#include "testutil.h"

#define N 20000

static struct audit_sample *
uniform(size_t n, uint64_t seed, double power)
{
  struct audit_sample *s = calloc(n, sizeof(*s));
  size_t i;

  cr_assert_not_null(s);
  rng = seed * 0x9e3779b97f4a7c15ull | 1;
  for (i = 0; i < n; i++) {
    s[i].u = pow(rnd() + 0x1p-54, power);
    snprintf(s[i].source, sizeof(s[i].source), "%s", i % 4 ? "qrng" : "system");
    s[i].fallback = i % 4 == 0;
    s[i].t_recv = 100.0 + (double)i;
    s[i].t_sent = s[i].t_recv + (i % 4 ? 0.002 : 0.0001) * (1 + i % 10);
  }
  return s;
}

Test(audit_stats, ad_pvalue_matches_the_published_critical_values)
{
  /* asymptotic upper-tail points of A^2 (Stephens 1974; Marsaglia 2004) */
  cr_assert_float_eq(audit_ad_pvalue(1.933, 100000), 0.10, 0.003);
  cr_assert_float_eq(audit_ad_pvalue(2.492, 100000), 0.05, 0.002);
  cr_assert_float_eq(audit_ad_pvalue(3.857, 100000), 0.01, 0.0007);
  /* monotone, in [0, 1] */
  cr_assert_gt(audit_ad_pvalue(0.5, 50), audit_ad_pvalue(1.0, 50));
  cr_assert_lt(audit_ad_pvalue(50, 50), 1e-15);
}

Test(audit_stats, ad_of_one_half_is_known)
{
  double u = 0.5;

  /* A^2 = -1 - (ln 0.5 + ln 0.5) */
  cr_assert_float_eq(audit_ad_a2(&u, 1), -1 + 2 * log(2.0), 1e-12);
}

Test(audit_stats, a_uniform_run_passes_and_a_skewed_one_does_not)
{
  struct audit_sample *s = uniform(N, 42, 1.0), *k = uniform(N, 43, 1.1);
  struct audit_stats st, sk;

  cr_assert_eq(audit_stats_compute(s, N, NULL, 0, &st), 0);
  cr_assert_eq(st.n, N);
  cr_assert_gt(st.ks_p, 1e-4, "KS p %g on a uniform sample", st.ks_p);
  cr_assert_gt(st.ad_p, 1e-4, "AD p %g on a uniform sample", st.ad_p);
  cr_assert_gt(st.runs_p, 1e-4, "runs p %g", st.runs_p);
  cr_assert_lt(fabs(st.stouffer_z), 4.5);
  cr_assert_float_eq(st.mean_u, 0.5, 0.01);
  cr_assert_eq(audit_stats_compute(k, N, NULL, 0, &sk), 0);
  cr_assert_lt(sk.ks_p, 1e-6, "KS p %g on u^1.1", sk.ks_p);
  cr_assert_lt(sk.ad_p, 1e-6, "AD p %g on u^1.1", sk.ad_p);
  cr_assert_gt(sk.ad_a2, 10);
  free(s);
  free(k);
}

Test(audit_stats, runs_test_counts_runs)
{
  struct audit_sample s[1000];
  struct audit_stats st;
  size_t i;

  memset(s, 0, sizeof(s));
  for (i = 0; i < 1000; i++) {
    s[i].u = i % 2 ? 0.75 : 0.25;       /* alternating: 1000 runs */
    strcpy(s[i].source, "a");
  }
  cr_assert_eq(audit_stats_compute(s, 1000, NULL, 0, &st), 0);
  cr_assert_eq(st.runs, 1000);
  cr_assert_eq(st.above, 500);
  cr_assert_gt(st.runs_z, 30);
  cr_assert_lt(st.runs_p, 1e-12);
  for (i = 0; i < 1000; i++)
    s[i].u = i < 500 ? 0.25 : 0.75;     /* two blocks: 2 runs */
  cr_assert_eq(audit_stats_compute(s, 1000, NULL, 0, &st), 0);
  cr_assert_eq(st.runs, 2);
  cr_assert_lt(st.runs_z, -30);
  /* u = 0 or 1 are not uniform draws: excluded, counted */
  s[0].u = 0;
  s[1].u = 1;
  cr_assert_eq(audit_stats_compute(s, 1000, NULL, 0, &st), 0);
  cr_assert_eq(st.n, 998);
  cr_assert_eq(st.excluded, 2);
  cr_assert_eq(audit_stats_compute(s, 2, NULL, 0, &st), -EINVAL);
}

Test(audit_stats, the_control_arm_comparison_and_its_power)
{
  struct audit_sample *a = uniform(N, 1, 1.0), *b = uniform(N, 2, 1.0),
                      *c = uniform(N, 3, 1.1);
  struct audit_stats st;
  double se = sqrt(2.0 / N);

  cr_assert_eq(audit_stats_compute(a, N, b, N, &st), 0);
  cr_assert(st.has_control);
  cr_assert_eq(st.nc, N);
  cr_assert_gt(st.ks2_p, 1e-4, "two-sample KS p %g, same law", st.ks2_p);
  cr_assert_gt(st.diff_p, 1e-4, "difference p %g, same law", st.diff_p);
  /* Phi^-1(u) has unit variance: s.e. sqrt(2/N), shift at 80 % power
     (1.96 + 0.84) s.e. */
  cr_assert_float_eq(st.diff_se, se, se * 0.05);
  cr_assert_float_eq(st.mde80, 2.8016 * se, 2.8016 * se * 0.05);
  cr_assert_float_eq(st.power_001, 0.5 * erfc(-(0.01 / se - 1.96) /
                     sqrt(2.0)), 0.02);
  cr_assert_eq(audit_stats_compute(a, N, c, N, &st), 0);
  cr_assert_lt(st.ks2_p, 1e-6, "two-sample KS p %g, u vs u^1.1", st.ks2_p);
  cr_assert_lt(st.diff_p, 1e-6);
  cr_assert_gt(st.diff_z, 0, "u^1.1 is smaller: the run's mean is above");
  free(a);
  free(b);
  free(c);
}

Test(audit_stats, per_source_counts_and_latency)
{
  struct audit_sample *s = uniform(1000, 5, 1.0);
  struct audit_stats st;
  struct json_object *o, *v;
  size_t i;

  cr_assert_eq(audit_stats_compute(s, 1000, NULL, 0, &st), 0);
  cr_assert_eq(st.n_sources, 2);
  for (i = 0; i < 2; i++) {
    if (!strcmp(st.src[i].name, "system")) {
      cr_assert_eq(st.src[i].n, 250);
      cr_assert_eq(st.src[i].fallbacks, 250);
      cr_assert_float_eq(st.src[i].lat_max_ms, 0.9, 1e-6);  /* i % 10 <= 8 */
    } else {
      cr_assert_str_eq(st.src[i].name, "qrng");
      cr_assert_eq(st.src[i].n, 750);
      cr_assert_eq(st.src[i].fallbacks, 0);
      cr_assert_float_eq(st.src[i].lat_p50_ms, 12.0, 2.0 + 1e-6);
      cr_assert_float_eq(st.src[i].lat_max_ms, 20.0, 1e-6);
    }
    cr_assert_eq(st.src[i].timed, st.src[i].n);
  }
  o = audit_stats_json(&st);
  cr_assert(json_object_object_get_ex(o, "ad_p", &v));
  cr_assert_float_eq(json_object_get_double(v), st.ad_p, 1e-12);
  cr_assert(json_object_object_get_ex(o, "sources", &v));
  cr_assert_eq(json_object_array_length(v), 2);
  cr_assert_not(json_object_object_get_ex(o, "control", &v));
  json_object_put(o);
  free(s);
}

Test(audit_stats, gnuplot_draws_every_plot)
{
  static const char *const names[] = { "u_hist", "u_qq", "u_time",
                                       "latency" };
  struct audit_sample *s = uniform(5000, 9, 1.0);
  struct audit_stats st;
  char dir[256], path[512], err[256];
  struct stat sb;
  size_t i, e;

  test_tmpdir(dir, sizeof(dir), "audit");
  strcat(dir, "/report");
  cr_assert_eq(audit_stats_compute(s, 5000, NULL, 0, &st), 0);
  cr_assert_eq(audit_stats_plots(dir, s, 5000, &st, err, sizeof(err)), 0,
               "%s", err);
  for (i = 0; i < 4; i++)
    for (e = 0; e < 2; e++) {
      snprintf(path, sizeof(path), "%s/%s.%s", dir, names[i],
               e ? "svg" : "png");
      cr_assert_eq(stat(path, &sb), 0, "%s not drawn", path);
      cr_assert_gt(sb.st_size, 1000, "%s is %lld bytes", path,
                   (long long)sb.st_size);
    }
  *strrchr(dir, '/') = '\0';
  test_tmpdir_remove(dir);
  free(s);
}
