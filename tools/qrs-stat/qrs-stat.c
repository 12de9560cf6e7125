/* qrs-stat: the statistics of qrs's amplified draws.

     qrs-stat [OPTIONS] uniformity
     qrs-stat [OPTIONS] power

   uniformity takes M draws, through a running qrsd (--socket) or in this
   process over qrsd's own amplifier and source code (the default, for
   large M), and reports the Kolmogorov-Smirnov distance of u against
   Uniform(0, 1) with its p-value, the number of distinct u values, the
   mean of u and Stouffer's Z = sum(Phi^-1(u)) / sqrt(M).

   power measures how often a per-byte mean shift is detected: for each
   shift and sample_count, R experiments of D draws from the mock source
   with that mean_shift, each tested with Stouffer's Z at two-sided
   alpha = 0.05 and counted when it rejects in the direction of the
   shift (upward for shift 0: 0.025 under the null); beside it the normal
   approximation
   Phi(shift sqrt(N D) / sigma - 1.96).  Always in-process.  ecdf is
   calibrated on the unshifted stream (a drift after calibration).

   --report DIR also writes PNG plots drawn by gnuplot: the histogram and
   QQ plot of u against uniform, and the power curves beside theory. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <qrs/client.h>
#include <qrs/error.h>

#include "amp_exact.h"
#include "ipc/clientint.h"
#include "cliparse.h"
#include "engine/ampreq.h"
#include "frame.h"
#include "plot.h"
#include "sortcmp.h"
#include "sources/source.h"
#include "timestamp.h"
#include "ustat.h"

#define SIGMA_NULL 73.90027063      /* sqrt((256^2 - 1) / 12) */
#define WINDOW 64                   /* draws in flight through qrsd */
#define HIST_BINS 100
#define QQ_POINTS 2000

/* Longest --shifts or --sample-counts list, with its NUL. */
#define LIST_MAX 256

struct opts {
  const char *socket;
  const char *source;
  const char *amplifier;
  const char *report;
  uint64_t draws;
  uint32_t samples;
  double mean_shift;
  uint64_t seed;
  struct qrs_amp_params amp;
  uint32_t power_draws;
  uint32_t power_trials;
  char shifts[LIST_MAX];
  char counts[LIST_MAX];
};

static void
usage(FILE *f)
{
  fputs(
"Usage: qrs-stat [OPTIONS] uniformity | power\n"
"\n"
"  uniformity   M draws: KS distance and p-value of u against Uniform(0,1),\n"
"               distinct u values, mean u, Stouffer's Z\n"
"  power        detection power of a per-byte mean shift against sample\n"
"               count, beside the normal approximation (in-process)\n"
"\n"
"Options:\n"
"  -s, --socket PATH       draw through the qrsd listening at PATH\n"
"                          (default: in-process over qrsd's amplifier and\n"
"                          source code)\n"
"      --source S          qrsd: the source name; in-process: system or\n"
"                          mock (default system)\n"
"  -M, --draws M           draws (default 100000)\n"
"  -N, --samples N         bytes per draw (default 1000)\n"
"  -a, --amplifier A       zscore_mean, zscore_thought, ecdf or exact\n"
"                          (default exact)\n"
"      --population-mean X, --population-std X, --epsilon X\n"
"                          amplifier parameters (default 127.5, 73.90027063,\n"
"                          1e-10; the reference implementation's std is\n"
"                          73.61215932167728)\n"
"      --zscore-calibration N, --ecdf-calibration N\n"
"                          calibration blocks (default 0 and 2000)\n"
"      --mean-shift X      in-process mock source: shift of the byte mean\n"
"      --seed S            in-process mock source: seed (default 1)\n"
"      --power-draws D     power: draws per experiment (default 100)\n"
"      --power-trials R    power: experiments per cell (default 200)\n"
"      --shifts LIST       power: mean shifts (default\n"
"                          0,0.05,0.1,0.2,0.3,0.5)\n"
"      --sample-counts LIST\n"
"                          power: sample counts (default 100,1000,10000)\n"
"      --report DIR        write PNG plots (gnuplot) and their data to DIR\n"
"  -h, --help              this help\n"
"\n"
"Exit status: 0 done, 2 error.  The figures go to standard output.\n",
    f);
}

/* ---- the draws ---- */

struct drawer {
  const struct opts *o;
  /* in-process */
  struct source *src;
  struct qrsd_conf conf;
  struct amp_req req;
  struct amp_state st;
  struct amp_exact_table *table;
  uint8_t *buf;
  size_t buf_draws, buf_next, buf_have;
  /* through qrsd */
  struct qrs_client *client;
  struct qrs_draw_request dreq;
};

/* n bytes from s (in-process: its synchronous read), or an error said. */
static int
read_source(struct source *s, uint8_t *buf, size_t n)
{
  char why[160];
  int r;

  why[0] = '\0';
  r = s->ops->read(s, buf, n, why, sizeof(why));
  if (r < 0)
    fprintf(stderr, "qrs-stat: source '%s': %s\n", s->name,
            why[0] ? why : qrs_strerror(r));
  return r;
}

static int
open_source(struct drawer *d, const char *type, double shift, uint64_t seed)
{
  struct conf_source cs;
  char err[256];
  int r;

  memset(&cs, 0, sizeof(cs));
  cs.name = (char *)type;
  if (!strcmp(type, "system")) {
    cs.type = CONF_SOURCE_SYSTEM;
  } else if (!strcmp(type, "mock")) {
    cs.type = CONF_SOURCE_MOCK;
    cs.mock_seed = seed;
    cs.mock_mean_shift = shift;
  } else {
    fprintf(stderr, "qrs-stat: in-process source must be system or mock, "
            "not '%s'\n", type);
    return -EINVAL;
  }
  r = source_new(&cs, NULL, &d->src, err, sizeof(err));
  if (r < 0)
    fprintf(stderr, "qrs-stat: %s\n", err);
  return r;
}

/* Calibrate (from cal, a source of the null when given) and load the exact
   table. */
static int
prepare(struct drawer *d, struct source *cal)
{
  uint32_t blocks;
  uint8_t *b;
  char msg[256];
  int r;

  blocks = amp_state_missing(&d->st, &d->req);
  if (blocks) {
    b = malloc((size_t)blocks * d->req.sample_count);
    if (!b)
      return -ENOMEM;
    r = read_source(cal ? cal : d->src, b,
                    (size_t)blocks * d->req.sample_count);
    if (r == 0)
      r = amp_state_calibrate(&d->st, &d->req, b, blocks, msg, sizeof(msg));
    free(b);
    if (r < 0) {
      fprintf(stderr, "qrs-stat: calibration failed: %s\n",
              r == QRS_E_CALIBRATION ? msg : qrs_strerror(r));
      return r;
    }
  }
  if (d->req.type == AMP_EXACT && !d->table) {
    r = amp_exact_get(d->req.sample_count, &d->table);
    if (r < 0) {
      fprintf(stderr, "qrs-stat: exact table: %s\n", qrs_strerror(r));
      return r;
    }
  }
  return 0;
}

static int
drawer_init(struct drawer *d, const struct opts *o, uint32_t samples,
            const char *srctype, double shift, uint64_t seed,
            struct source *cal)
{
  QrsIpc__Draw m = QRS_IPC__DRAW__INIT;
  struct qrs__amp_wire w;
  char msg[256];
  int r;

  memset(d, 0, sizeof(*d));
  d->o = o;
  if (o->socket) {
    r = qrs_client_new(o->socket, NULL, &d->client);
    if (r < 0) {
      fprintf(stderr, "qrs-stat: cannot connect to qrsd at %s: %s\n",
              o->socket, qrs_strerror(r));
      return r;
    }
    d->dreq.source = o->source;
    d->dreq.amplifier = o->amplifier;
    d->dreq.sample_count = samples;
    d->dreq.amp = o->amp.set ? &o->amp : NULL;
    return 0;
  }

  /* in-process: the daemon's defaults, then the options */
  d->conf.amp_type = (char *)"exact";
  d->conf.amp_population_mean = 127.5;
  d->conf.amp_population_std = SIGMA_NULL;
  d->conf.amp_epsilon = 1e-10;
  d->conf.amp_ecdf_calibration_samples = 2000;
  d->conf.max_calibration_samples = 10000000;
  d->conf.max_calibration_bytes = UINT64_MAX;
  d->conf.exact_cache_bytes = 1ull << 31;
  m.amplifier = (char *)o->amplifier;
  qrs__amp_to_wire(&o->amp, &m, &w);
  r = ampreq_resolve(&d->conf, &m, samples, &d->req, msg, sizeof(msg));
  if (r < 0) {
    fprintf(stderr, "qrs-stat: %s\n", msg);
    return r;
  }
  amp_state_init(&d->st);
  r = open_source(d, srctype, shift, seed);
  if (r < 0)
    return r;
  d->buf_draws = (4u << 20) / ampreq_read_bytes(&d->req) + 1;
  d->buf = malloc(d->buf_draws * ampreq_read_bytes(&d->req));
  if (!d->buf)
    return -ENOMEM;
  return prepare(d, cal);
}

static void
drawer_free(struct drawer *d)
{
  qrs_client_free(d->client);
  if (d->src)
    source_free(d->src);
  amp_exact_release(d->table);
  amp_state_free(&d->st);
  free(d->buf);
}

/* One u (and z) in process. */
static int
draw_local(struct drawer *d, double *ret_u, double *ret_z)
{
  struct amp_result a;
  struct amp_params p;
  size_t rb;
  int r;

  rb = ampreq_read_bytes(&d->req);
  if (d->buf_next == d->buf_have) {
    r = read_source(d->src, d->buf, d->buf_draws * rb);
    if (r < 0)
      return r;
    d->buf_have = d->buf_draws;
    d->buf_next = 0;
  }
  r = amp_state_run(&d->st, &d->req, d->table, d->buf + d->buf_next * rb,
                    &a, &p);
  d->buf_next++;
  if (r < 0)
    return r;
  *ret_u = a.u;
  *ret_z = a.z;
  return 0;
}

/* m draws into u (z may be NULL). */
static int
draw_many(struct drawer *d, double *u, double *z, uint64_t m)
{
  struct qrs_draw dr;
  uint32_t tickets[WINDOW];
  uint64_t sent, done, i;
  double zz;
  int r;

  if (!d->client) {
    for (i = 0; i < m; i++) {
      r = draw_local(d, &u[i], &zz);
      if (r < 0)
        return r;
      if (z)
        z[i] = zz;
    }
    return 0;
  }
  sent = done = 0;
  while (done < m) {
    while (sent < m && sent - done < WINDOW) {
      r = qrs_client_draw_begin(d->client, &d->dreq, &tickets[sent % WINDOW]);
      if (r < 0)
        goto fail;
      sent++;
    }
    r = qrs_client_draw_finish(d->client, tickets[done % WINDOW], &dr);
    if (r < 0)
      goto fail;
    u[done] = dr.u;
    if (z)
      z[done] = dr.z;
    done++;
  }
  return 0;

fail:
  fprintf(stderr, "qrs-stat: draw %" PRIu64 ": %s%s%s\n", done,
          qrs_strerror(r), *qrs_client_errmsg(d->client) ? ": " : "",
          qrs_client_errmsg(d->client));
  return r;
}

/* ---- gnuplot ---- */

/* u is sorted. */
static int
report_uniformity(const struct opts *o, const double *u, uint64_t m,
                  double ks, double p)
{
  uint64_t hist[HIST_BINS], i;
  FILE *f;
  int b;

  memset(hist, 0, sizeof(hist));
  for (i = 0; i < m; i++) {
    b = (int)(u[i] * HIST_BINS);
    hist[b < 0 ? 0 : b >= HIST_BINS ? HIST_BINS - 1 : b]++;
  }
  f = plot_open("qrs-stat", o->report, "u_hist.dat");
  if (!f)
    return -EIO;
  for (b = 0; b < HIST_BINS; b++)
    fprintf(f, "%.6f %.8f\n", (b + 0.5) / HIST_BINS,
            (double)hist[b] * HIST_BINS / (double)m);
  fclose(f);
  f = plot_open("qrs-stat", o->report, "u_qq.dat");
  if (!f)
    return -EIO;
  for (i = 0; i < QQ_POINTS; i++) {
    uint64_t k = (uint64_t)((i + 0.5) / QQ_POINTS * (double)m);
    /* deviation from the diagonal, magnified: the plot shows both */
    fprintf(f, "%.9f %.9f %.9g\n", (k + 0.5) / (double)m, u[k],
            u[k] - (k + 0.5) / (double)m);
  }
  fclose(f);
  f = plot_open("qrs-stat", o->report, "uniformity.gp");
  if (!f)
    return -EIO;
  fprintf(f,
"set terminal pngcairo size 1200,500 font 'DejaVu Sans,11' noenhanced\n"
"set output 'uniformity.png'\n"
"set multiplot layout 1,2 title \"%s, sample_count %u, %" PRIu64
" draws: KS D = %.3g, p = %.3g\"\n"
"set title 'Histogram of u (density, %d bins)'\n"
"set xrange [0:1]\n"
"set autoscale y\n"
"set xlabel 'u'\n"
"set ylabel 'density'\n"
"set style fill solid 0.6\n"
"set boxwidth 1.0/%d\n"
"sd = 1.0/sqrt(%" PRIu64 "/%d.0)\n"
"plot 'u_hist.dat' using 1:2 with boxes lc rgb '#4477aa' title 'u', \\\n"
"     1 with lines lw 2 lc rgb 'black' title 'uniform', \\\n"
"     1+2*sd with lines dt 2 lc rgb 'gray' title '+-2 s.e.', \\\n"
"     1-2*sd with lines dt 2 lc rgb 'gray' notitle\n"
"set title 'QQ plot, difference form: quantile of u minus uniform quantile'\n"
"set xlabel 'uniform quantile'\n"
"set ylabel 'u quantile - uniform quantile'\n"
"set yrange [-%g:%g]\n"
"plot 'u_qq.dat' using 1:3 with lines lw 2 lc rgb '#cc3311' title 'u', \\\n"
"     0 with lines lc rgb 'black' title 'uniform', \\\n"
"     %g with lines dt 2 lc rgb 'gray' title 'KS 5%% band', \\\n"
"     -%g with lines dt 2 lc rgb 'gray' notitle\n"
"unset multiplot\n",
          o->amplifier, o->samples, m, ks, p, HIST_BINS, HIST_BINS, m,
          HIST_BINS, fmax(3 * ks, 1.5 * 1.358 / sqrt((double)m)),
          fmax(3 * ks, 1.5 * 1.358 / sqrt((double)m)),
          1.358 / sqrt((double)m), 1.358 / sqrt((double)m));
  fclose(f);
  return plot_run("qrs-stat", o->report, "uniformity.gp");
}

/* ---- commands ---- */

static int
cmd_uniformity(const struct opts *o)
{
  struct drawer d;
  double *u, ks, p, mean, stouffer, secs;
  int64_t t0;
  uint64_t i, distinct;
  int r;

  u = malloc(o->draws * sizeof(*u));
  if (!u) {
    fprintf(stderr, "qrs-stat: no memory for %" PRIu64 " draws\n", o->draws);
    return 2;
  }
  r = drawer_init(&d, o, o->samples, o->source ? o->source : "system",
                  o->mean_shift, o->seed, NULL);
  if (r < 0) {
    drawer_free(&d);
    free(u);
    return 2;
  }
  t0 = mono_now_ns();
  r = draw_many(&d, u, NULL, o->draws);
  secs = (double)(mono_now_ns() - t0) / 1e9;
  drawer_free(&d);
  if (r < 0) {
    free(u);
    return 2;
  }

  mean = stouffer = 0.0;
  for (i = 0; i < o->draws; i++) {
    mean += u[i];
    stouffer += ustat_phi_inv(u[i]);
  }
  mean /= (double)o->draws;
  stouffer /= sqrt((double)o->draws);
  qsort(u, o->draws, sizeof(*u), sort_cmp_double);
  distinct = o->draws ? 1 : 0;
  for (i = 1; i < o->draws; i++)
    distinct += u[i] != u[i - 1];
  ks = ustat_ks(u, o->draws);             /* sorted already: cheap */
  p = ustat_ks_pvalue(ks, o->draws);

  printf("amplifier        %s%s\n", o->amplifier,
         o->amp.set & QRS_AMP_POPULATION_STD ? " (population_std given)" :
         "");
  if (o->amp.set & QRS_AMP_POPULATION_STD)
    printf("population_std   %.17g\n", o->amp.population_std);
  printf("path             %s\n", o->socket ? o->socket :
         "in-process (qrsd's amplifier and source code)");
  printf("source           %s", o->source ? o->source : "system");
  if (!o->socket && o->source && !strcmp(o->source, "mock"))
    printf(" (seed %" PRIu64 ", mean_shift %+g)", o->seed, o->mean_shift);
  printf("\nsample_count     %u\n", o->samples);
  printf("draws            %" PRIu64 " in %.1f s\n", o->draws, secs);
  printf("KS D             %.6g  (sqrt(M) D = %.3f)\n", ks,
         ks * sqrt((double)o->draws));
  printf("KS p-value       %.4g%s\n", p, p < 1e-4 ?
         "  -> u is NOT uniform" : "");
  printf("distinct u       %" PRIu64 " (%.4f%% of draws)\n", distinct,
         100.0 * (double)distinct / (double)o->draws);
  printf("mean u           %.7f  (uniform: 0.5 +- %.7f)\n", mean,
         sqrt(1.0 / 12.0 / (double)o->draws));
  printf("Stouffer Z       %+.3f\n", stouffer);
  fflush(stdout);
  if (o->report) {
    r = report_uniformity(o, u, o->draws, ks, p);
    if (r == 0)
      printf("report           %s/uniformity.png\n", o->report);
  }
  free(u);
  return r < 0 ? 2 : 0;
}

/* "0,0.1,0.5" -> values; count or -1. */
static int
parse_list(const char *s, double *v, int cap)
{
  char *end;
  int n;

  n = 0;
  while (*s) {
    if (n == cap)
      return -1;
    errno = 0;
    v[n] = strtod(s, &end);
    if (end == s || errno || !isfinite(v[n]))
      return -1;
    n++;
    s = end;
    if (*s == ',')
      s++;
    else if (*s)
      return -1;
  }
  return n;
}

static int
cmd_power(const struct opts *o)
{
  double shifts[32], counts[16], *u, z, mu, theory, power;
  char words[256];
  size_t wl;
  struct drawer d;
  struct source *cal;
  struct conf_source cs;
  char err[256];
  int ns, nc, i, j, r;
  uint32_t t, k, hits;
  FILE *f;

  ns = parse_list(o->shifts, shifts, 32);
  nc = parse_list(o->counts, counts, 16);
  if (ns <= 0 || nc <= 0) {
    fprintf(stderr, "qrs-stat: bad --shifts or --sample-counts list\n");
    return 2;
  }
  if (o->socket)
    fprintf(stderr, "qrs-stat: power runs in-process (it needs mock "
            "sources with each shift); --socket ignored\n");
  u = malloc(o->power_draws * sizeof(*u));
  if (!u)
    return 2;
  /* the null stream ecdf and calibrated z-scores calibrate on */
  memset(&cs, 0, sizeof(cs));
  cs.name = (char *)"null";
  cs.type = CONF_SOURCE_MOCK;
  cs.mock_seed = o->seed + 1000003;
  if (source_new(&cs, NULL, &cal, err, sizeof(err)) < 0) {
    fprintf(stderr, "qrs-stat: %s\n", err);
    free(u);
    return 2;
  }
  f = NULL;
  if (o->report) {
    f = plot_open("qrs-stat", o->report, "power.dat");
    if (!f) {
      source_free(cal);
      free(u);
      return 2;
    }
  }
  printf("power of Stouffer's Z over D = %u draws (two-sided alpha 0.05, "
         "in the shift's direction), %u experiments per cell, amplifier "
         "%s\n", o->power_draws, o->power_trials, o->amplifier);
  printf("%10s %12s %10s %10s %10s\n", "shift", "sample_count", "z/draw",
         "power", "theory");
  for (j = 0; j < nc; j++) {
    for (i = 0; i < ns; i++) {
      r = drawer_init(&d, o, (uint32_t)counts[j], "mock", shifts[i],
                      o->seed + (uint64_t)(i * 131 + j), cal);
      hits = 0;
      for (t = 0; r == 0 && t < o->power_trials; t++) {
        r = draw_many(&d, u, NULL, o->power_draws);
        if (r < 0)
          break;
        z = 0.0;
        for (k = 0; k < o->power_draws; k++)
          z += ustat_phi_inv(u[k]);
        z /= sqrt((double)o->power_draws);
        if (shifts[i] >= 0 ? z > 1.959964 : z < -1.959964)
          hits++;
      }
      drawer_free(&d);
      if (r < 0) {
        source_free(cal);
        free(u);
        if (f)
          fclose(f);
        return 2;
      }
      power = (double)hits / o->power_trials;
      mu = fabs(shifts[i]) * sqrt(counts[j] * o->power_draws) / SIGMA_NULL;
      theory = ustat_phi(mu - 1.959964);
      printf("%10g %12g %10.4f %10.3f %10.3f\n", shifts[i], counts[j],
             shifts[i] * sqrt(counts[j]) / SIGMA_NULL, power, theory);
      fflush(stdout);
      if (f)
        fprintf(f, "%g %g %g %g\n", counts[j], shifts[i], power, theory);
    }
    if (f)
      fprintf(f, "\n\n");
  }
  source_free(cal);
  free(u);
  if (!f)
    return 0;
  fclose(f);
  wl = 0;
  words[0] = '\0';
  for (j = 0; j < nc && wl < sizeof(words) - 16; j++)
    wl += (size_t)snprintf(words + wl, sizeof(words) - wl, "%s%g",
                           j ? " " : "", counts[j]);
  f = plot_open("qrs-stat", o->report, "power.gp");
  if (!f)
    return 2;
  fprintf(f,
"set terminal pngcairo size 900,700 font 'DejaVu Sans,11' noenhanced\n"
"set output 'power.png'\n"
"set title \"Detection power of a byte-mean shift (%s, Stouffer Z over "
"%u draws, alpha 0.05, %u tests per point)\"\n"
"set xlabel 'per-byte mean shift'\n"
"set ylabel 'power (rejections in the direction of the shift)'\n"
"set yrange [0:1.05]\n"
"set xrange [0:*]\n"
"set samples 400\n"
"set key outside below\n"
"set grid\n"
"N = '%s'\n"
"D = %u.0\n"
"R = %u.0\n"
"sigma = %.10g\n"
"theory(x, n) = norm(x * sqrt(n * D) / sigma - 1.959964)\n"
"plot for [i=1:words(N)] theory(x, real(word(N, i))) with lines lw 2 "
"dt 2 lc i title sprintf('theory (normal approx.), N = %%s', word(N, i)), \\\n"
"     for [i=0:words(N)-1] 'power.dat' index i using 2:3:(sqrt($3*(1-$3)/R)) "
"with yerrorbars pt 7 ps 1.2 lc i+1 "
"title sprintf('measured, N = %%s', word(N, i+1))\n",
          o->amplifier, o->power_draws, o->power_trials, words,
          o->power_draws, o->power_trials, SIGMA_NULL);
  fclose(f);
  return 0;
}

/* v within [lo, hi], else a message naming opt. */
static int
in_range(double v, double lo, double hi, const char *opt)
{
  if (v >= lo && v <= hi)
    return 1;
  fprintf(stderr, "qrs-stat: %s must be %.10g .. %.10g\n", opt, lo, hi);
  return 0;
}

/* A number option: strtod()'s syntax, in [min, max] unless max is 0. */
static int
stat_num(const struct cli_opt *o, const char *opt, const char *arg,
         double *ret)
{
  char *end;
  double v;

  errno = 0;
  v = strtod(arg, &end);
  if (end == arg || *end || errno || !isfinite(v)) {
    fprintf(stderr, "qrs-stat: '%s' is not a number\n", arg);
    return -1;
  }
  if (o->max && !in_range(v, (double)o->min, (double)o->max, opt))
    return -1;
  *ret = v;
  return 0;
}

/* --shifts and --sample-counts: the list, into a char[LIST_MAX]. */
static int
set_list(const struct cli_opt *o, const char *opt, const char *arg)
{
  (void)opt;
  snprintf(o->field, LIST_MAX, "%s", arg);
  return 0;
}

int
main(int argc, char **argv)
{
  struct opts o;
  const struct cli_opt opts[] = {
    { .name = "socket", .key = 's', .type = CLI_OPT_STRING,
      .field = &o.socket },
    { .name = "source", .type = CLI_OPT_STRING, .field = &o.source },
    { .name = "draws", .key = 'M', .type = CLI_OPT_NUM, .field = &o.draws,
      .val = CLI_NUM_U64, .num = stat_num, .min = 1, .max = 1000000000 },
    { .name = "samples", .key = 'N', .type = CLI_OPT_NUM,
      .field = &o.samples, .val = CLI_NUM_U32, .num = stat_num, .min = 1,
      .max = 16777216 },
    { .name = "amplifier", .key = 'a', .type = CLI_OPT_STRING,
      .field = &o.amplifier },
    { .name = "population-mean", .type = CLI_OPT_NUM,
      .field = &o.amp.population_mean, .num = stat_num,
      .seen = &o.amp.set, .bit = QRS_AMP_POPULATION_MEAN },
    { .name = "population-std", .type = CLI_OPT_NUM,
      .field = &o.amp.population_std, .num = stat_num,
      .seen = &o.amp.set, .bit = QRS_AMP_POPULATION_STD },
    { .name = "epsilon", .type = CLI_OPT_NUM,
      .field = &o.amp.uniform_clamp_epsilon, .num = stat_num,
      .seen = &o.amp.set, .bit = QRS_AMP_EPSILON },
    { .name = "zscore-calibration", .type = CLI_OPT_NUM,
      .field = &o.amp.zscore_calibration_samples, .val = CLI_NUM_U32,
      .num = stat_num, .max = UINT32_MAX, .label = "calibration blocks",
      .seen = &o.amp.set, .bit = QRS_AMP_ZSCORE_CALIBRATION },
    { .name = "ecdf-calibration", .type = CLI_OPT_NUM,
      .field = &o.amp.ecdf_calibration_samples, .val = CLI_NUM_U32,
      .num = stat_num, .max = UINT32_MAX, .label = "calibration blocks",
      .seen = &o.amp.set, .bit = QRS_AMP_ECDF_CALIBRATION },
    { .name = "mean-shift", .type = CLI_OPT_NUM, .field = &o.mean_shift,
      .num = stat_num },
    { .name = "seed", .type = CLI_OPT_NUM, .field = &o.seed,
      .val = CLI_NUM_U64, .num = stat_num },
    { .name = "power-draws", .type = CLI_OPT_NUM, .field = &o.power_draws,
      .val = CLI_NUM_U32, .num = stat_num, .min = 1, .max = 10000000 },
    { .name = "power-trials", .type = CLI_OPT_NUM,
      .field = &o.power_trials, .val = CLI_NUM_U32, .num = stat_num,
      .min = 1, .max = 10000000 },
    { .name = "shifts", .type = CLI_OPT_CALL, .field = o.shifts,
      .call = set_list },
    { .name = "sample-counts", .type = CLI_OPT_CALL, .field = o.counts,
      .call = set_list },
    { .name = "report", .key = 'r', .type = CLI_OPT_STRING,
      .field = &o.report },
    { .name = "help", .key = 'h', .type = CLI_OPT_HELP },
    { 0 },
  };
  const struct cli cli = {
    .prog = "qrs-stat", .opts = opts, .usage = usage,
  };
  int r;

  memset(&o, 0, sizeof(o));
  o.draws = 100000;
  o.samples = 1000;
  o.amplifier = "exact";
  o.seed = 1;
  o.power_draws = 100;
  o.power_trials = 200;
  snprintf(o.shifts, sizeof(o.shifts), "0,0.05,0.1,0.2,0.3,0.5");
  snprintf(o.counts, sizeof(o.counts), "100,1000,10000");
  r = cli_opts_parse(&cli, argc, argv);
  if (r >= 0)
    return r;
  if (optind != argc - 1) {
    usage(stderr);
    return 2;
  }
  if (o.report && mkdir(o.report, 0777) < 0 && errno != EEXIST) {
    fprintf(stderr, "qrs-stat: %s: %s\n", o.report, strerror(errno));
    return 2;
  }
  if (!strcmp(argv[optind], "uniformity"))
    return cmd_uniformity(&o);
  if (!strcmp(argv[optind], "power")) {
    if (cmd_power(&o))
      return 2;
    if (o.report) {
      if (plot_run("qrs-stat", o.report, "power.gp") < 0)
        return 2;
      printf("report           %s/power.png\n", o.report);
    }
    return 0;
  }
  fprintf(stderr, "qrs-stat: unknown command '%s'\n", argv[optind]);
  usage(stderr);
  return 2;
}
