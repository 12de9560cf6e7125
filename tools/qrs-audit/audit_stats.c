/* qrs-audit's statistics of a run: see audit_stats.h. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <json-c/json.h>

#include "audit_stats.h"
#include "plot.h"
#include "sortcmp.h"
#include "ustat.h"

#define Z975 1.959963984540054      /* Phi^-1(0.975) */
#define Z80 0.8416212335729143      /* Phi^-1(0.80) */
#define HIST_BINS 50
#define QQ_POINTS 1000
#define TIME_POINTS 20000           /* u over the run: at most this many */

static int
in_unit(double u)
{
  return u > 0 && u < 1;
}

/* ---- Anderson-Darling ------------------------------------------------ */

/* P(A^2 < z) of the limiting distribution (Marsaglia and Marsaglia,
   "Evaluating the Anderson-Darling distribution", JSS 9(2), 2004). */
static double
adinf(double z)
{
  if (z <= 0)
    return 0;
  if (z < 2)
    return exp(-1.2337141 / z) / sqrt(z) *
           (2.00012 + (.247105 - (.0649821 - (.0347962 - (.011672 -
           .00168691 * z) * z) * z) * z) * z);
  return exp(-exp(1.0776 - (2.30695 - (.43424 - (.082433 - (.008056 -
         .0003146 * z) * z) * z) * z) * z));
}

/* Their correction of adinf() for n samples, at x = adinf(z). */
static double
errfix(double n, double x)
{
  double c, t;

  if (x > .8)
    return (-130.2137 + (745.2337 - (1705.091 - (1950.646 - (1116.360 -
           255.7844 * x) * x) * x) * x) * x) / n;
  c = .01265 + .1757 / n;
  if (x < c) {
    t = x / c;
    t = sqrt(t) * (1 - t) * (49 * t - 102);
    return t * (.0037 / (n * n) + .00078 / n + .00006) / n;
  }
  t = (x - c) / (.8 - c);
  t = -.00022633 + (6.54034 - (14.6538 - (14.458 - (8.259 - 1.91864 * t) *
      t) * t) * t) * t;
  return t * (.04213 + .01365 / n) / n;
}

double
audit_ad_a2(const double *u, size_t n)
{
  double s = 0;
  size_t i;

  for (i = 0; i < n; i++)
    s += (2.0 * (double)i + 1) * (log(u[i]) + log1p(-u[n - 1 - i]));
  return -(double)n - s / (double)n;
}

double
audit_ad_pvalue(double a2, size_t n)
{
  double x = adinf(a2), e = errfix((double)n, x), p;

  /* The correction is fitted for x below 1: in the far tail (1 - x
     tiny) it would dominate what it corrects, so the limit stands. */
  p = fabs(e) > (1 - x) / 2 ? 1 - x : (1 - x) - e;
  return p < 0 ? 0 : p > 1 ? 1 : p;
}

/* ---- the pieces --------------------------------------------------- */

static double
two_sided(double z)
{
  return 2 * ustat_phi(-fabs(z));
}

/* Wald-Wolfowitz runs of u >= 1/2 and u < 1/2 in order. */
static void
runs_test(const struct audit_sample *s, size_t n, struct audit_stats *st)
{
  double n1 = 0, n2, m, v, N;
  uint64_t runs = 0;
  int prev = -1, hi;
  size_t i;

  for (i = 0; i < n; i++) {
    if (!in_unit(s[i].u))
      continue;
    hi = s[i].u >= 0.5;
    n1 += hi;
    if (hi != prev)
      runs++;
    prev = hi;
  }
  N = (double)st->n;
  n2 = N - n1;
  st->runs = runs;
  st->above = (uint64_t)n1;
  m = 2 * n1 * n2 / N + 1;
  v = 2 * n1 * n2 * (2 * n1 * n2 - N) / (N * N * (N - 1));
  st->runs_z = v > 0 ? ((double)runs - m) / sqrt(v) : 0;
  st->runs_p = v > 0 ? two_sided(st->runs_z) : 1;
}

static struct audit_source_stats *
source_of(struct audit_stats *st, const char *name)
{
  size_t i;

  for (i = 0; i < st->n_sources; i++)
    if (!strcmp(st->src[i].name, name))
      return &st->src[i];
  if (st->n_sources == AUDIT_SOURCES_MAX) {
    /* the last slot gathers the rest */
    i = AUDIT_SOURCES_MAX;
    if (!st->src[i].name[0])
      snprintf(st->src[i].name, sizeof(st->src[i].name), "(other)");
    return &st->src[i];
  }
  snprintf(st->src[st->n_sources].name, AUDIT_SOURCE_LEN, "%s", name);
  return &st->src[st->n_sources++];
}

static double
quantile(const double *v, size_t n, double p)
{
  return v[(size_t)(p * (double)(n - 1) + 0.5)];
}

/* Per-source counts and latency quantiles. */
static int
per_source(const struct audit_sample *s, size_t n, struct audit_stats *st)
{
  double *lat;
  size_t i, k, m;

  for (i = 0; i < n; i++) {
    struct audit_source_stats *x = source_of(st, s[i].source);

    x->n++;
    x->fallbacks += s[i].fallback != 0;
  }
  if (st->src[AUDIT_SOURCES_MAX].n)
    st->n_sources = AUDIT_SOURCES_MAX + 1;
  lat = malloc((n ? n : 1) * sizeof(double));
  if (!lat)
    return -ENOMEM;
  for (k = 0; k < st->n_sources; k++) {
    struct audit_source_stats *x = &st->src[k];

    for (i = m = 0; i < n; i++)
      if (source_of(st, s[i].source) == x && s[i].t_recv > 0 &&
          s[i].t_sent >= s[i].t_recv)
        lat[m++] = (s[i].t_sent - s[i].t_recv) * 1e3;
    x->timed = m;
    if (m == 0)
      continue;
    qsort(lat, m, sizeof(double), sort_cmp_double);
    x->lat_p50_ms = quantile(lat, m, 0.5);
    x->lat_p99_ms = quantile(lat, m, 0.99);
    x->lat_max_ms = lat[m - 1];
  }
  free(lat);
  return 0;
}

/* The u in (0, 1) of s, sorted, in a new array; its length in *m. */
static double *
sorted_u(const struct audit_sample *s, size_t n, size_t *m)
{
  double *u = malloc((n ? n : 1) * sizeof(double));
  size_t i, k = 0;

  if (!u)
    return NULL;
  for (i = 0; i < n; i++)
    if (in_unit(s[i].u))
      u[k++] = s[i].u;
  qsort(u, k, sizeof(double), sort_cmp_double);
  *m = k;
  return u;
}

/* Mean and variance of Phi^-1(u) over the sorted u. */
static void
z_moments(const double *u, size_t n, double *mean, double *var)
{
  double s = 0, ss = 0, z;
  size_t i;

  for (i = 0; i < n; i++) {
    z = ustat_phi_inv(u[i]);
    s += z;
    ss += z * z;
  }
  *mean = s / (double)n;
  *var = n > 1 ? (ss - s * s / (double)n) / (double)(n - 1) : 0;
}

double
audit_ks2(const double *a, size_t n, const double *b, size_t m)
{
  size_t i = 0, j = 0;
  double d = 0, x, f;

  while (i < n && j < m) {
    x = a[i] <= b[j] ? a[i] : b[j];
    while (i < n && a[i] <= x)
      i++;
    while (j < m && b[j] <= x)
      j++;
    f = fabs((double)i / (double)n - (double)j / (double)m);
    if (f > d)
      d = f;
  }
  return d;
}

int
audit_stats_compute(const struct audit_sample *s, size_t n,
                    const struct audit_sample *c, size_t nc,
                    struct audit_stats *out)
{
  double *u, *uc, mean, var, cmean, cvar, ne;
  size_t m, mc, i;
  int r;

  memset(out, 0, sizeof(*out));
  u = sorted_u(s, n, &m);
  if (!u)
    return -ENOMEM;
  if (m < 2) {
    free(u);
    return -EINVAL;
  }
  out->n = m;
  out->excluded = n - m;
  for (i = 0; i < m; i++)
    out->mean_u += u[i];
  out->mean_u /= (double)m;
  out->ad_a2 = audit_ad_a2(u, m);
  out->ad_p = audit_ad_pvalue(out->ad_a2, m);
  z_moments(u, m, &mean, &var);
  out->stouffer_z = mean * sqrt((double)m);
  out->stouffer_p = two_sided(out->stouffer_z);
  runs_test(s, n, out);
  r = per_source(s, n, out);
  if (r == 0 && c) {
    uc = sorted_u(c, nc, &mc);
    if (!uc)
      r = -ENOMEM;
    else if (mc < 2)
      r = -EINVAL;
    else {
      out->has_control = 1;
      out->nc = mc;
      out->ks2_d = audit_ks2(u, m, uc, mc);
      ne = (double)m * (double)mc / (double)(m + mc);
      out->ks2_p = ustat_ks_pvalue(out->ks2_d, (size_t)(ne + 0.5));
      z_moments(uc, mc, &cmean, &cvar);
      out->diff = mean - cmean;
      out->diff_se = sqrt(var / (double)m + cvar / (double)mc);
      out->diff_z = out->diff_se > 0 ? out->diff / out->diff_se : 0;
      out->diff_p = two_sided(out->diff_z);
      out->mde80 = (Z975 + Z80) * out->diff_se;
      out->power_001 = out->diff_se > 0 ?
        ustat_phi(0.01 / out->diff_se - Z975) +
        ustat_phi(-0.01 / out->diff_se - Z975) : 1;
    }
    free(uc);
  }
  /* KS last: ustat_ks() may reorder u, which is sorted already */
  out->ks_d = ustat_ks(u, m);
  out->ks_p = ustat_ks_pvalue(out->ks_d, m);
  free(u);
  return r;
}

/* ---- reports ------------------------------------------------------ */

void
audit_stats_print(FILE *f, const struct audit_stats *st)
{
  size_t i;

  fprintf(f, "statistics of u over %zu draws", st->n);
  if (st->excluded)
    fprintf(f, " (%zu outside (0, 1) not tested)", st->excluded);
  fprintf(f, ":\n");
  fprintf(f, "  mean u %.6f\n", st->mean_u);
  fprintf(f, "  Kolmogorov-Smirnov D = %.6g, p = %.4g\n", st->ks_d, st->ks_p);
  fprintf(f, "  Anderson-Darling A^2 = %.6g, p = %.4g\n", st->ad_a2,
          st->ad_p);
  fprintf(f, "  runs above/below 1/2: %llu runs, %llu above, z = %.3f, "
          "p = %.4g\n", (unsigned long long)st->runs,
          (unsigned long long)st->above, st->runs_z, st->runs_p);
  fprintf(f, "  Stouffer Z of Phi^-1(u) = %.3f, p = %.4g\n", st->stouffer_z,
          st->stouffer_p);
  fprintf(f, "  per source:\n");
  for (i = 0; i < st->n_sources; i++) {
    const struct audit_source_stats *x = &st->src[i];

    fprintf(f, "    %-16s %10llu draws, %llu fallback", x->name,
            (unsigned long long)x->n, (unsigned long long)x->fallbacks);
    if (x->timed)
      fprintf(f, ", latency p50 %.3f ms, p99 %.3f ms, max %.3f ms",
              x->lat_p50_ms, x->lat_p99_ms, x->lat_max_ms);
    fputc('\n', f);
  }
  if (!st->has_control)
    return;
  fprintf(f, "against the control arm (%zu draws):\n", st->nc);
  fprintf(f, "  two-sample Kolmogorov-Smirnov D = %.6g, p = %.4g\n",
          st->ks2_d, st->ks2_p);
  fprintf(f, "  mean Phi^-1(u), run - control = %.6g (s.e. %.3g), z = %.3f, "
          "p = %.4g\n", st->diff, st->diff_se, st->diff_z, st->diff_p);
  fprintf(f, "  power: a shift of %.4g s.d. is detected with 80 %% power "
          "(alpha 0.05, two-sided); power against 0.01 s.d. = %.3f\n",
          st->mde80, st->power_001);
}

static void
add_d(struct json_object *o, const char *k, double v)
{
  json_object_object_add(o, k, json_object_new_double(v));
}

static void
add_u(struct json_object *o, const char *k, uint64_t v)
{
  json_object_object_add(o, k, json_object_new_uint64(v));
}

void *
audit_stats_json(const struct audit_stats *st)
{
  struct json_object *o = json_object_new_object(), *a, *x, *c;
  size_t i;

  add_u(o, "draws", st->n);
  add_u(o, "excluded", st->excluded);
  add_d(o, "mean_u", st->mean_u);
  add_d(o, "ks_d", st->ks_d);
  add_d(o, "ks_p", st->ks_p);
  add_d(o, "ad_a2", st->ad_a2);
  add_d(o, "ad_p", st->ad_p);
  add_u(o, "runs", st->runs);
  add_u(o, "above_half", st->above);
  add_d(o, "runs_z", st->runs_z);
  add_d(o, "runs_p", st->runs_p);
  add_d(o, "stouffer_z", st->stouffer_z);
  add_d(o, "stouffer_p", st->stouffer_p);
  a = json_object_new_array();
  for (i = 0; i < st->n_sources; i++) {
    x = json_object_new_object();
    json_object_object_add(x, "source",
                           json_object_new_string(st->src[i].name));
    add_u(x, "draws", st->src[i].n);
    add_u(x, "fallbacks", st->src[i].fallbacks);
    if (st->src[i].timed) {
      add_d(x, "latency_p50_ms", st->src[i].lat_p50_ms);
      add_d(x, "latency_p99_ms", st->src[i].lat_p99_ms);
      add_d(x, "latency_max_ms", st->src[i].lat_max_ms);
    }
    json_object_array_add(a, x);
  }
  json_object_object_add(o, "sources", a);
  if (st->has_control) {
    c = json_object_new_object();
    add_u(c, "draws", st->nc);
    add_d(c, "ks2_d", st->ks2_d);
    add_d(c, "ks2_p", st->ks2_p);
    add_d(c, "diff", st->diff);
    add_d(c, "diff_se", st->diff_se);
    add_d(c, "diff_z", st->diff_z);
    add_d(c, "diff_p", st->diff_p);
    add_d(c, "mde80", st->mde80);
    add_d(c, "power_0_01", st->power_001);
    json_object_object_add(o, "control", c);
  }
  return o;
}

/* ---- plots -------------------------------------------------------- */

static int
write_data(const char *dir, const struct audit_sample *s, size_t n,
           const struct audit_stats *st)
{
  uint64_t hist[HIST_BINS] = { 0 };
  double *u;
  size_t m, i, k, step;
  FILE *f;
  int b;

  u = sorted_u(s, n, &m);
  if (!u)
    return -ENOMEM;
  for (i = 0; i < m; i++) {
    b = (int)(u[i] * HIST_BINS);
    hist[b >= HIST_BINS ? HIST_BINS - 1 : b]++;
  }
  f = plot_open("qrs-audit", dir, "u_hist.dat");
  if (!f)
    goto fail;
  for (b = 0; b < HIST_BINS; b++)
    fprintf(f, "%.6f %.8f\n", (b + 0.5) / HIST_BINS,
            (double)hist[b] * HIST_BINS / (double)m);
  fclose(f);
  f = plot_open("qrs-audit", dir, "u_qq.dat");
  if (!f)
    goto fail;
  for (i = 0; i < QQ_POINTS; i++) {
    k = (size_t)((i + 0.5) / QQ_POINTS * (double)m);
    fprintf(f, "%.9f %.9g\n", (k + 0.5) / (double)m,
            u[k] - (k + 0.5) / (double)m);
  }
  fclose(f);
  free(u);
  u = NULL;
  f = plot_open("qrs-audit", dir, "u_time.dat");
  if (!f)
    goto fail;
  step = n > TIME_POINTS ? n / TIME_POINTS : 1;
  for (i = 0; i < n; i += step)
    if (in_unit(s[i].u))
      fprintf(f, "%zu %.9f\n", i + 1, s[i].u);
  fclose(f);
  /* latency: one block per source (gnuplot's index), its sorted
     latencies against their rank (an ECDF) */
  f = plot_open("qrs-audit", dir, "latency.dat");
  if (!f)
    goto fail;
  for (k = 0; k < st->n_sources; k++) {
    double *lat = malloc((st->src[k].timed ? st->src[k].timed : 1) *
                         sizeof(double));
    size_t j = 0;

    if (!lat) {
      fclose(f);
      return -ENOMEM;
    }
    for (i = 0; i < n && st->src[k].timed; i++)
      if (!strcmp(s[i].source, st->src[k].name) && s[i].t_recv > 0 &&
          s[i].t_sent >= s[i].t_recv && j < st->src[k].timed)
        lat[j++] = (s[i].t_sent - s[i].t_recv) * 1e3;
    qsort(lat, j, sizeof(double), sort_cmp_double);
    fprintf(f, "# %s\n", st->src[k].name);
    step = j > QQ_POINTS ? j / QQ_POINTS : 1;
    for (i = 0; i < j; i += step)
      fprintf(f, "%.6g %.6f\n", lat[i] > 1e-6 ? lat[i] : 1e-6,
              (i + 0.5) / (double)j);
    if (j == 0)
      fprintf(f, "1e-6 0\n");
    fprintf(f, "\n\n");
    free(lat);
  }
  fclose(f);
  return 0;
fail:
  free(u);
  return -EIO;
}

int
audit_stats_plots(const char *dir, const struct audit_sample *s, size_t n,
                  const struct audit_stats *st, char *err, size_t errlen)
{
  static const char *const terms[2][2] = {
    { "pngcairo size 900,600 font 'DejaVu Sans,11' noenhanced", "png" },
    { "svg size 900,600 font 'DejaVu Sans,11' noenhanced", "svg" },
  };
  double band = 1.358 / sqrt((double)st->n), sd, yr;
  size_t k;
  FILE *f;
  int t, r;

  if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
    snprintf(err, errlen, "%s: %s", dir, strerror(errno));
    return -errno;
  }
  r = write_data(dir, s, n, st);
  if (r < 0) {
    snprintf(err, errlen, "%s: cannot write the plot data", dir);
    return r;
  }
  f = plot_open("qrs-audit", dir, "audit.gp");
  if (!f) {
    snprintf(err, errlen, "%s/audit.gp: cannot write", dir);
    return -EIO;
  }
  sd = 1.0 / sqrt((double)st->n / HIST_BINS);
  yr = fmax(3 * st->ks_d, 1.5 * band);
  for (t = 0; t < 2; t++) {
    const char *term = terms[t][0], *ext = terms[t][1];

    fprintf(f,
"set terminal %s\n"
"set output 'u_hist.%s'\n"
"set title \"u over %zu draws: KS p = %.3g, AD p = %.3g (%d bins)\"\n"
"set xrange [0:1]\nset autoscale y\nset xlabel 'u'\nset ylabel 'density'\n"
"set style fill solid 0.6\nset boxwidth 1.0/%d\nset key outside bottom\n"
"plot 'u_hist.dat' using 1:2 with boxes lc rgb '#4477aa' title 'u', \\\n"
"  1 with lines lw 2 lc rgb 'black' title 'uniform', \\\n"
"  1+2*%g with lines dt 2 lc rgb 'gray' title '+-2 s.e.', \\\n"
"  1-2*%g with lines dt 2 lc rgb 'gray' notitle\n",
            term, ext, st->n, st->ks_p, st->ad_p, HIST_BINS, HIST_BINS, sd,
            sd);
    fprintf(f,
"set output 'u_qq.%s'\n"
"set title 'QQ plot, difference form: quantile of u minus uniform quantile'\n"
"set xlabel 'uniform quantile'\nset ylabel 'difference'\n"
"set yrange [-%g:%g]\n"
"plot 'u_qq.dat' using 1:2 with lines lw 2 lc rgb '#cc3311' title 'u', \\\n"
"  0 with lines lc rgb 'black' title 'uniform', \\\n"
"  %g with lines dt 2 lc rgb 'gray' title 'KS 5%% band', \\\n"
"  -%g with lines dt 2 lc rgb 'gray' notitle\n"
"set autoscale y\n",
            ext, yr, yr, band, band);
    fprintf(f,
"set output 'u_time.%s'\n"
"set title \"u in record order (runs test z = %.2f, p = %.3g)\"\n"
"set xrange [*:*]\nset yrange [0:1]\nset xlabel 'draw'\nset ylabel 'u'\n"
"plot 'u_time.dat' using 1:2 with dots lc rgb '#4477aa' notitle\n"
"set autoscale y\n",
            ext, st->runs_z, st->runs_p);
    fprintf(f,
"set output 'latency.%s'\n"
"set title 'Latency per source (received to sent), ECDF'\n"
"set logscale x\nset xrange [*:*]\nset yrange [0:1]\n"
"set xlabel 'ms'\nset ylabel 'fraction of draws'\n"
"plot ", ext);
    for (k = 0; k < st->n_sources; k++)
      fprintf(f, "%s'latency.dat' index %zu using 1:2 with steps lw 2 "
              "title '%s'", k ? ", \\\n  " : "", k, st->src[k].name);
    fprintf(f, "\nunset logscale x\n");
  }
  fclose(f);
  r = plot_run("qrs-audit", dir, "audit.gp");
  if (r < 0)
    snprintf(err, errlen, "gnuplot could not draw the plots in %s", dir);
  return r;
}
