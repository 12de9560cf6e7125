/* The row-entropy kernel (client/sampling/kernels/moments.c): its exp within its bound,
   the same bits in both variants, H and VH within the certified bound of
   the double moment pass (the oracle), the scan equal to qrs__kscan();
   and at the sampler level, the strategies that derive the temperature
   from H (edt, hvh_drift, gdt, ...) and the entropy throttle give the
   same record with the float fast path on as with the double path only,
   on random (row, configuration, u) triples and on u at CDF boundaries
   (which must take the exact resolution).

   QRS_MOMENTS_TRIPLES=N sets the number of random sampler triples
   (default 1000000; 100000 under ASan, 5000 under valgrind). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <valgrind/valgrind.h>

#include <qrs/sampler.h>

#include "sampling/kernels/moments.h"
#include "sampling/kernels/rowkern.h"
#include "sampling/select.h"

#define TESTRNG_SEED 0x452821e638d01377ull
#include "testrng.h"
#include "testrows.h"

static const int levels[] = { 1, 2 };

#define NMAX 8192
#define NSHAPES TESTROWS_SHAPES

struct row {
  float f[NMAX];
  uint16_t h[NMAX];
  double d[NMAX];
  size_t n;
  enum qrs_dtype dt;
};

/* float to float16 (truncating the significand; halves below 2^-14
   become subnormal halves). */
static uint16_t
to_f16(float f)
{
  uint32_t b, sign;
  float a;
  int e;

  if (f != f)
    return 0x7e00u;
  memcpy(&b, &f, sizeof(b));
  sign = (b >> 16) & 0x8000u;
  a = fabsf(f);
  if (a >= 65520.0f)
    return (uint16_t)(sign | 0x7c00u);
  if (a < 0x1p-14f)
    return (uint16_t)(sign | (uint32_t)(a * 0x1p24f));
  e = (int)((b >> 23) & 0xff) - 127 + 15;
  return (uint16_t)(sign | ((uint32_t)e << 10) | ((b >> 13) & 0x3ffu));
}

static double
half_value(uint16_t h)
{
  int e = (h >> 10) & 0x1f;
  double m = h & 0x3ff, s = h & 0x8000 ? -1.0 : 1.0;

  if (e == 31)
    return m ? NAN : s * INFINITY;
  if (e == 0)
    return s * ldexp(m, -24);
  return s * ldexp(1024.0 + m, e - 25);
}

/* A row of shape (testrows.h) with its 16-bit and double forms. */
static void
make_row(struct row *r, int shape, size_t n, enum qrs_dtype dt)
{
  size_t i;

  r->n = n;
  r->dt = dt;
  testrows_fill(r->f, shape, n);
  for (i = 0; i < n; i++) {
    if (dt == QRS_DTYPE_BF16) {
      r->h[i] = testrows_bf16(r->f[i]);
      {
        uint32_t b = (uint32_t)r->h[i] << 16;
        float v;

        memcpy(&v, &b, sizeof(v));
        r->d[i] = v;
      }
    } else if (dt == QRS_DTYPE_F16) {
      r->h[i] = to_f16(r->f[i]);
      r->d[i] = half_value(r->h[i]);
    } else {
      r->d[i] = r->f[i];
    }
  }
}

static struct qrs__view
view(const struct row *r)
{
  return testrows_view(r->f, r->h, r->dt, r->n);
}

/* The same row as float64 (the double oracle's input). */
static struct qrs__view
view64(const struct row *r)
{
  struct qrs__view v;

  v.data = r->d;
  v.dtype = QRS_DTYPE_F64;
  v.n = r->n;
  return v;
}

static const enum qrs_dtype dts[3] = { QRS_DTYPE_F32, QRS_DTYPE_BF16,
                                       QRS_DTYPE_F16 };

TestSuite(moments, .timeout = 600);

Test(moments, float_exp_is_within_its_bound_in_both_variants)
{
  double worst, e, ref;
  float d, a, b;
  int i, npts;

  /* valgrind: a coarser sweep (the suite must stay quick there) */
  npts = RUNNING_ON_VALGRIND ? 100000 : 2000000;
  worst = 0.0;
  for (i = 0; i <= npts; i++) {
    d = (float)(-87.0 * (double)i / (double)npts);
    if (i % 3 == 1)
      d = nextafterf(d, 0.0f);
    qrs__kernel_level(1);
    a = qrs__fmoments_expf(d);
    qrs__kernel_level(2);
    b = qrs__fmoments_expf(d);
    cr_expect(memcmp(&a, &b, sizeof(a)) == 0, "exp(%a): %a (SSE2) vs %a",
              (double)d, (double)a, (double)b);
    ref = exp((double)d);
    e = fabs((double)b - ref) / ref;
    worst = e > worst ? e : worst;
  }
  cr_expect_lt(worst, 16.0 * 0x1p-24, "worst %g", worst);
  cr_log_info("moment exp: worst relative error %.3g (%.2f x 2^-24)", worst,
              worst / 0x1p-24);
}

/* The kernel's H, VH, the bounds, and the double pass's H, VH. */
struct hres {
  struct qrs__scan sc, sd;
  struct qrs__fmom fm;
  double h, vh, eh, evh, hd, vhd;
};

static void
measure(const struct row *r, struct hres *o)
{
  struct qrs__view v = view(r), vd = view64(r);
  struct qrs__mass ms;
  double m1;

  qrs__fmoments(&v, &o->sc, &o->fm, NULL);
  qrs__fmoments_hvh(&o->fm, &o->h, &o->vh);
  qrs__fmoments_bound(&o->fm, &o->eh, &o->evh);
  qrs__kscan_entropy(&vd, &o->sd, &ms);
  m1 = ms.w / ms.z;
  o->hd = fmax(0.0, log(ms.z) - m1);
  o->vhd = fmax(0.0, ms.w2 / ms.z - m1 * m1);
}

Test(moments, both_variants_give_the_same_bits_and_the_double_scan)
{
  static struct row r;
  struct hres a, b;
  struct qrs__scan ks;
  struct qrs__view v;
  size_t n;
  int shape, d, k;

  for (shape = 0; shape < NSHAPES; shape++)
    for (d = 0; d < 3; d++)
      for (k = 0; k < (RUNNING_ON_VALGRIND ? 3 : 6); k++) {
        n = k == 0 ? NMAX : k == 1 ? 256 : 257 + (size_t)(rnd() * 5000.0);
        make_row(&r, shape, n, dts[d]);
        qrs__kernel_level(1);
        measure(&r, &a);
        qrs__kernel_level(2);
        measure(&r, &b);
        cr_expect(memcmp(&a.fm.z, &b.fm.z, sizeof(a.fm.z)) == 0 &&
                      memcmp(&a.fm.w, &b.fm.w, sizeof(a.fm.w)) == 0 &&
                      memcmp(&a.fm.w2, &b.fm.w2, sizeof(a.fm.w2)) == 0 &&
                      memcmp(&a.fm.min, &b.fm.min, sizeof(a.fm.min)) == 0 &&
                      a.fm.n == b.fm.n && a.fm.nrescale == b.fm.nrescale,
                  "shape %d dt %d n %zu: sums differ: %a %a %a / %a %a %a",
                  shape, dts[d], n, a.fm.z, a.fm.w, a.fm.w2, b.fm.z, b.fm.w,
                  b.fm.w2);
        v = view(&r);
        qrs__kscan(&v, &ks);
        cr_expect(a.sc.max == ks.max && b.sc.max == ks.max &&
                      a.sc.has_nan == ks.has_nan &&
                      a.sc.has_posinf == ks.has_posinf,
                  "shape %d dt %d: scan %g vs %g", shape, dts[d], a.sc.max,
                  ks.max);
      }
}

Test(moments, entropy_is_within_its_bound_of_the_double_oracle)
{
  static struct row r;
  struct hres o;
  double worst_h, worst_vh, err_h, err_vh;
  size_t n, nonzero;
  int shape, d, k, l;

  for (l = 0; l < 2; l++) {
    qrs__kernel_level(levels[l]);
    worst_h = worst_vh = 0.0;
    nonzero = 0;
    for (shape = 0; shape < NSHAPES; shape++)
      for (d = 0; d < 3; d++)
        for (k = 0; k < (RUNNING_ON_VALGRIND ? 3 : 8); k++) {
          n = k == 0 ? NMAX : 256 + (size_t)(rnd() * 7000.0);
          make_row(&r, shape, n, dts[d]);
          measure(&r, &o);
          cr_assert(o.sc.max == o.sd.max);
          err_h = fabs(o.h - o.hd);
          err_vh = fabs(o.vh - o.vhd);
          /* the oracle's own rounding: well below 1e-12 */
          cr_expect(err_h <= o.eh + 1e-12 * fmax(1.0, o.hd),
                    "shape %d dt %d n %zu: H %.17g vs %.17g, bound %g",
                    shape, dts[d], n, o.h, o.hd, o.eh);
          cr_expect(err_vh <= o.evh + 1e-12 * fmax(1.0, o.vhd),
                    "shape %d dt %d n %zu: VH %.17g vs %.17g, bound %g",
                    shape, dts[d], n, o.vh, o.vhd, o.evh);
          /* the bound is a useful one: a few 1e-5 nats at most */
          cr_expect(o.eh < 1e-4 && o.evh < 1e-2 * fmax(1.0, o.vhd),
                    "shape %d: bound %g %g", shape, o.eh, o.evh);
          nonzero += err_h > 0.0;
          worst_h = fmax(worst_h, err_h / (o.eh + 1e-300));
          worst_vh = fmax(worst_vh, err_vh / (o.evh + 1e-300));
        }
    cr_log_info("level %d: worst |H - H*| / bound %.3g, VH %.3g", levels[l],
                worst_h, worst_vh);
    /* the float H really differs from the double one (the check is not
       vacuous) */
    cr_expect_gt(nonzero, RUNNING_ON_VALGRIND ? 30 : 100, "%zu", nonzero);
  }
}

Test(moments, broken_rows_scan_as_the_double_scan_does)
{
  static struct row r;
  struct qrs__scan a, ks;
  struct qrs__fmom fm;
  struct qrs__view v;
  size_t at;
  int d, k, l;

  for (l = 0; l < 2; l++) {
    qrs__kernel_level(levels[l]);
    for (d = 0; d < 3; d++)
      for (k = 0; k < 4; k++) {
        make_row(&r, 0, 1000 + (size_t)k, QRS_DTYPE_F32);
        at = (size_t)(rnd() * (double)r.n);
        if (k == 3)
          at = r.n - 1;                    /* in the padded tail */
        r.f[at] = k == 0 ? NAN : k == 1 ? INFINITY : k == 2 ? -INFINITY : NAN;
        if (k == 2)
          for (at = 0; at < r.n; at++)
            r.f[at] = -INFINITY;
        /* re-encode the 16-bit forms from the edited floats */
        {
          size_t i;

          for (i = 0; i < r.n; i++)
            r.h[i] = dts[d] == QRS_DTYPE_BF16 ? testrows_bf16(r.f[i])
                                              : to_f16(r.f[i]);
        }
        r.dt = dts[d];
        v = view(&r);
        qrs__fmoments(&v, &a, &fm, NULL);
        qrs__kscan(&v, &ks);
        cr_expect(a.has_nan == ks.has_nan && a.has_posinf == ks.has_posinf &&
                      (a.max == ks.max ||
                       (a.max != a.max && ks.max != ks.max)),
                  "dt %d case %d: %d %d %g vs %d %d %g", dts[d], k,
                  a.has_nan, a.has_posinf, a.max, ks.has_nan, ks.has_posinf,
                  ks.max);
        cr_expect(qrs__row_check(&a, r.n) < 0, "dt %d case %d accepted",
                  dts[d], k);
      }
  }
}

/* ---- the sampler: strategies on the float H, fast path vs oracle ---- */

struct cfgcase {
  const char *name;
  const char *const *set;
  const char *preset;
};

static const char *const set_edt[] = { "temperature_strategy", "edt",
                                       "top_p", "0.95", NULL };
static const char *const set_hvh[] = { NULL };
static const char *const set_thr[] = { "temperature_strategy",
                                       "entropy_throttle", NULL };
static const char *const set_gdt[] = { "temperature_strategy", "gdt",
                                       "top_p", "0.9", NULL };
static const char *const set_edt1[] = { "temperature_strategy", "edt",
                                        "top_p", "1.0", NULL };
static const char *const set_bell[] = { "temperature_strategy", "belltemp",
                                        NULL };
static const char *const set_thr1[] = { "temperature_strategy",
                                        "entropy_throttle",
                                        "throttle_target_bits", "1.0",
                                        "throttle_p_max", "0.9",
                                        "fixed_temperature", "0.7", NULL };
static const char *const set_thr4[] = { "temperature_strategy",
                                        "entropy_throttle",
                                        "throttle_target_bits", "4.5",
                                        "throttle_p_min", "0.2",
                                        "fixed_temperature", "1.3", NULL };
static const char *const set_dyn[] = { "temperature_strategy", "dynatemp",
                                       "top_p", "0.8", NULL };

static const struct cfgcase cfgs[] = {
  { "edt+top-p", set_edt, NULL },
  { "creative", set_hvh, "creative_sampling" },
  { "throttle", set_thr, NULL },
  { "throttle 1 bit", set_thr1, NULL },
  { "throttle 4.5 bits", set_thr4, NULL },
  { "gdt", set_gdt, NULL },
  { "edt", set_edt1, NULL },
  { "belltemp", set_bell, NULL },
  { "dynatemp", set_dyn, NULL },
};

#define NCFG (sizeof(cfgs) / sizeof(cfgs[0]))

static struct qrs_sampler *
sampler(const struct cfgcase *c)
{
  struct qrs_sampler_config *cfg;
  struct qrs_sampler *s;
  int i;

  cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
  if (c->preset)
    cr_assert_eq(qrs_sampler_config_set_preset(cfg, c->preset), 0);
  for (i = 0; c->set[i]; i += 2)
    cr_assert_eq(qrs_sampler_config_set(cfg, c->set[i], c->set[i + 1]), 0);
  /* shannon_entropy in every record */
  cr_assert_eq(qrs_sampler_config_set(cfg, "diagnostic_mode", "true"), 0);
  cr_assert_eq(qrs_sampler_new(cfg, NMAX, &s), 0, "%s",
               qrs_sampler_config_error(cfg));
  qrs_sampler_config_free(cfg);
  return s;
}

static unsigned long long mismatches, inexact;

/* Both NaN, or within rel (relative, absolute below 1). */
static int
close_or_nan(double a, double b, double rel)
{
  if (a != a || b != b)
    return a != a && b != b;
  return fabs(a - b) <= rel * fmax(1.0, fabs(b));
}

static int
same(double a, double b)
{
  return memcmp(&a, &b, sizeof(a)) == 0 || (a != a && b != b);
}

/* One step of each sampler on the same row and u: fa with the fast path,
   fo with the double path only.  Token, rank, counts, temperature, H, VH,
   min-p, EMA state and the throttle's kept entropy identical; the
   probability and CDF interval within test_fastsel's tolerance (without
   truncation the fast selection's Z carries its float bound: select.c,
   docs/sampling.md), and counted when not bit-identical. */
static void
step2(struct qrs_sampler *fa, struct qrs_sampler *fo, const struct row *r,
      double u, const char *what, struct qrs_token_record *ret_oracle)
{
  struct qrs_token_record a, o;
  const void *data;
  int ra, ro;

  data = r->dt == QRS_DTYPE_F32 ? (const void *)r->f : (const void *)r->h;
  qrs__fast_enable(0);
  ro = qrs_sampler_select_u(fo, data, r->dt, r->n, u, NULL, &o);
  qrs__fast_enable(1);
  ra = qrs_sampler_select_u(fa, data, r->dt, r->n, u, NULL, &a);
  if (ret_oracle)
    *ret_oracle = o;
  if (ra == 0 && ro == 0 &&
      (!same(a.token_prob, o.token_prob) || !same(a.cdf_lo, o.cdf_lo) ||
       !same(a.cdf_hi, o.cdf_hi) ||
       !same(a.kept_entropy_bits, o.kept_entropy_bits) ||
       !same(a.top_p_used, o.top_p_used)))
    inexact++;
  if (ra != ro ||
      (ra == 0 &&
       (a.token_id != o.token_id || a.token_rank != o.token_rank ||
        a.num_candidates != o.num_candidates ||
        !same(a.temperature_used, o.temperature_used) ||
        !same(a.shannon_entropy, o.shannon_entropy) ||
        !same(a.varentropy, o.varentropy) ||
        !same(a.min_p_used, o.min_p_used) || !same(a.h_ema, o.h_ema) ||
        !same(a.vh_ema, o.vh_ema) ||
        !close_or_nan(a.kept_entropy_bits, o.kept_entropy_bits, 1e-12) ||
        !close_or_nan(a.top_p_used, o.top_p_used, 1e-6) ||
        fabs(a.token_prob - o.token_prob) > 1e-5 * o.token_prob ||
        fabs(a.cdf_lo - o.cdf_lo) > 1e-5 || fabs(a.cdf_hi - o.cdf_hi) > 1e-5 ||
        !(a.cdf_lo <= u + 1e-12 && u <= a.cdf_hi + 1e-12)))) {
    if (mismatches++ < 10)
      cr_log_error("%s n %zu dt %d u %.17g: r %d/%d token %u/%u rank %u/%u "
                   "cand %u/%u T %.17g/%.17g H %.17g/%.17g prob "
                   "%.17g/%.17g cdf [%.17g %.17g]/[%.17g %.17g] kept "
                   "%.17g/%.17g top-p %.17g/%.17g",
                   what, r->n, r->dt, u, ra, ro, a.token_id, o.token_id,
                   a.token_rank, o.token_rank, a.num_candidates,
                   o.num_candidates, a.temperature_used, o.temperature_used,
                   a.shannon_entropy, o.shannon_entropy, a.token_prob,
                   o.token_prob, a.cdf_lo, a.cdf_hi, o.cdf_lo, o.cdf_hi,
                   a.kept_entropy_bits, o.kept_entropy_bits, a.top_p_used,
                   o.top_p_used);
  }
}

/* Since s0: no mismatch, and more than min_resolved selections resolved
   exactly (logged as what). */
static void
expect_resolved_since(const struct qrs__fast_stats *s0, const char *what,
                      unsigned long long min_resolved)
{
  struct qrs__fast_stats s1;

  qrs__fast_stats_get(&s1);
  cr_expect_eq(mismatches, 0, "%s: %llu mismatches", what, mismatches);
  cr_log_info("%s: fast %llu, resolved %llu", what, s1.fast - s0->fast,
              s1.resolved - s0->resolved);
  cr_expect_gt(s1.resolved - s0->resolved, min_resolved, "%s: resolved %llu",
               what, s1.resolved - s0->resolved);
}

Test(moments, the_sampler_uses_the_kernel_s_entropy)
{
  static struct row r;
  struct qrs_token_record rec;
  struct qrs__view v;
  struct qrs__scan sc;
  struct qrs__fmom fm;
  struct qrs_sampler *s;
  double h, vh;
  int d;

  s = sampler(&cfgs[1]);
  for (d = 0; d < 3; d++) {
    make_row(&r, 3, 3000, dts[d]);
    v = view(&r);
    cr_assert_eq(qrs_sampler_select_u(s, v.data, r.dt, r.n, 0.5, NULL, &rec),
                 0);
    qrs__fmoments(&v, &sc, &fm, NULL);
    qrs__fmoments_hvh(&fm, &h, &vh);
    cr_expect(same(rec.shannon_entropy, h) && same(rec.varentropy, vh),
              "dt %d: %.17g %.17g vs %.17g %.17g", r.dt, rec.shannon_entropy,
              rec.varentropy, h, vh);
  }
  qrs_sampler_free(s);
}

Test(moments, strategies_give_the_oracle_s_record_on_random_triples)
{
  static struct row r;
  struct qrs_sampler *fa[NCFG], *fo[NCFG];
  struct qrs__fast_stats s0, s1;
  unsigned long long total, t, per_row;
  size_t n, c;

  total = testrows_triples("QRS_MOMENTS_TRIPLES");
  for (c = 0; c < NCFG; c++) {
    fa[c] = sampler(&cfgs[c]);
    fo[c] = sampler(&cfgs[c]);
  }
  per_row = 100;
  qrs__fast_stats_get(&s0);
  for (t = 0; t < total; t++) {
    if (t % per_row == 0) {
      n = testrows_random_len(t, per_row, NMAX);
      make_row(&r, (int)(rnd() * NSHAPES), n, dts[(int)(rnd() * 3.0)]);
    }
    c = (size_t)(rnd() * (double)NCFG);
    step2(fa[c], fo[c], &r, rnd(), cfgs[c].name, NULL);
  }
  qrs__fast_stats_get(&s1);
  cr_log_info("random: %llu triples, fast %llu, resolved %llu, "
              "ineligible %llu; probability / CDF not bit-identical: %llu",
              total, s1.fast - s0.fast, s1.resolved - s0.resolved,
              s1.ineligible - s0.ineligible, inexact);
  cr_expect_eq(mismatches, 0, "%llu mismatches", mismatches);
  /* edt, gdt, dynatemp (top-p, no min-p) are fast-path configurations */
  cr_expect_gt((s1.fast - s0.fast) * 10, total * 2,
               "the fast path decided only %llu", s1.fast - s0.fast);
  for (c = 0; c < NCFG; c++) {
    qrs_sampler_free(fa[c]);
    qrs_sampler_free(fo[c]);
  }
}

/* u at, and 1e-13 on either side of, both ends of the oracle's CDF
   interval: the fast path must hand these to the double path, and the
   record is still the oracle's. */
Test(moments, u_at_cdf_boundaries_takes_the_exact_resolution)
{
  static struct row r;
  struct qrs_sampler *fa[NCFG], *fo[NCFG];
  struct qrs_token_record o;
  struct qrs__fast_stats s0;
  double u;
  size_t c;
  int shape, k, j;

  for (c = 0; c < NCFG; c++) {
    fa[c] = sampler(&cfgs[c]);
    fo[c] = sampler(&cfgs[c]);
  }
  qrs__fast_stats_get(&s0);
  for (shape = 0; shape < NSHAPES; shape++) {
    make_row(&r, shape, 2048, shape % 2 ? QRS_DTYPE_BF16 : QRS_DTYPE_F32);
    for (k = 0; k < (RUNNING_ON_VALGRIND ? 12 : 30); k++) {
      c = (size_t)k % NCFG;
      /* stateless strategies: both samplers restart (hvh_drift's EMA) */
      qrs_sampler_reset(fa[c]);
      qrs_sampler_reset(fo[c]);
      step2(fa[c], fo[c], &r, rnd(), cfgs[c].name, &o);
      for (j = 0; j < 6; j++) {
        u = (j < 3 ? o.cdf_hi : o.cdf_lo) + (double)(j % 3 - 1) * 1e-13;
        if (!(u > 0.0 && u < 1.0))
          continue;
        qrs_sampler_reset(fa[c]);
        qrs_sampler_reset(fo[c]);
        step2(fa[c], fo[c], &r, u, cfgs[c].name, NULL);
      }
    }
  }
  expect_resolved_since(&s0, "boundaries", 100);
  for (c = 0; c < NCFG; c++) {
    qrs_sampler_free(fa[c]);
    qrs_sampler_free(fo[c]);
  }
}

/* ---- the entropy throttle ---- */

static int
cmp_desc(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;

  return x > y ? -1 : x < y;
}

/* The entropy (bits) of the k most probable of the row's values at
   T = 1, directly: sorted, in double. */
static double
prefix_bits(const struct row *r, size_t k)
{
  static double s[NMAX];
  double z, w, e;
  size_t i;

  memcpy(s, r->d, r->n * sizeof(*s));
  qsort(s, r->n, sizeof(*s), cmp_desc);
  z = w = 0.0;
  for (i = 0; i < k; i++) {
    e = exp(s[i] - s[0]);
    z += e;
    w += e * (s[i] - s[0]);
  }
  return (log(z) - w / z) / M_LN2;
}

static struct qrs_sampler *
throttle_sampler(double target_bits, double pmin, double pmax)
{
  struct qrs_sampler_config *cfg;
  struct qrs_sampler *s;
  char buf[64];

  cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
  cr_assert_eq(qrs_sampler_config_set(cfg, "temperature_strategy",
                                      "entropy_throttle"), 0);
  snprintf(buf, sizeof(buf), "%.17g", target_bits);
  cr_assert_eq(qrs_sampler_config_set(cfg, "throttle_target_bits", buf), 0);
  snprintf(buf, sizeof(buf), "%.17g", pmin);
  cr_assert_eq(qrs_sampler_config_set(cfg, "throttle_p_min", buf), 0);
  snprintf(buf, sizeof(buf), "%.17g", pmax);
  cr_assert_eq(qrs_sampler_config_set(cfg, "throttle_p_max", buf), 0);
  cr_assert_eq(qrs_sampler_new(cfg, NMAX, &s), 0, "%s",
               qrs_sampler_config_error(cfg));
  qrs_sampler_config_free(cfg);
  return s;
}

/* The kept entropy in the record is the kept prefix's entropy, also when
   a mass bound (not the entropy target) made the cut: the double path
   used to leave the e*d sums of the buckets before a mass crossing out
   of it (reporting, e.g., 0.47 bits for a 1.94-bit prefix). */
Test(moments, throttle_kept_entropy_is_the_kept_prefix_s)
{
  static struct row r;
  struct qrs_sampler *s;
  struct qrs_token_record rec;
  unsigned long long cuts;
  double want;
  int shape, k, fast;

  cuts = 0;
  for (fast = 0; fast < 2; fast++) {
    qrs__fast_enable(fast);
    for (shape = 0; shape < NSHAPES; shape++)
      for (k = 0; k < 6; k++) {
        make_row(&r, shape, 300 + (size_t)(rnd() * 700.0), QRS_DTYPE_F32);
        s = throttle_sampler(0.5 + 3.0 * rnd(), k % 3 == 0 ? 0.3 : 0.01,
                             k % 3 == 1 ? 0.6 : 0.99);
        cr_assert_eq(qrs_sampler_select_u(s, r.f, r.dt, r.n, rnd(), NULL,
                                          &rec), 0);
        want = prefix_bits(&r, rec.num_candidates);
        cr_expect(fabs(rec.kept_entropy_bits - want) <= 1e-9,
                  "fast %d shape %d: kept %.17g bits, the prefix of %u has "
                  "%.17g (top-p %.17g)", fast, shape, rec.kept_entropy_bits,
                  rec.num_candidates, want, rec.top_p_used);
        cuts += fabs(rec.top_p_used - 0.3) < 1e-6 ||
                fabs(rec.top_p_used - 0.6) < 0.05 ||
                fabs(rec.top_p_used - 0.99) < 0.005 ||
                fabs(rec.top_p_used - 0.01) < 0.005;
        qrs_sampler_free(s);
      }
  }
  qrs__fast_enable(1);
  cr_log_info("throttle: %llu steps near a mass bound", cuts);
  cr_expect_gt(cuts, 10);
}

/* Targets exactly at a prefix's entropy, and mass bounds exactly at the
   kept mass: the fast throttle must hand these to the double path (and
   the record is the double path's). */
Test(moments, throttle_ties_take_the_exact_resolution)
{
  static struct row r;
  struct qrs_sampler *fa, *fo, *base;
  struct qrs_token_record o;
  struct qrs__fast_stats s0;
  int shape, k, j;

  qrs__fast_stats_get(&s0);
  base = throttle_sampler(2.0, 0.01, 0.99);
  for (shape = 0; shape < NSHAPES; shape++)
    for (k = 0; k < 8; k++) {
      make_row(&r, shape, 300 + (size_t)(rnd() * 700.0),
               k % 2 ? QRS_DTYPE_BF16 : QRS_DTYPE_F32);
      qrs__fast_enable(0);
      cr_assert_eq(qrs_sampler_select_u(base, r.dt == QRS_DTYPE_F32
                                                  ? (const void *)r.f
                                                  : (const void *)r.h,
                                        r.dt, r.n, rnd(), NULL, &o), 0);
      qrs__fast_enable(1);
      for (j = 0; j < 2; j++) {
        if (j == 0) {
          /* the target at the kept prefix's own entropy */
          fa = throttle_sampler(o.kept_entropy_bits, 0.0, 1.0);
          fo = throttle_sampler(o.kept_entropy_bits, 0.0, 1.0);
        } else {
          /* pmin at the kept mass */
          if (!(o.top_p_used > 0.0 && o.top_p_used < 1.0))
            continue;
          fa = throttle_sampler(2.0, o.top_p_used, 1.0);
          fo = throttle_sampler(2.0, o.top_p_used, 1.0);
        }
        step2(fa, fo, &r, rnd(), "throttle tie", NULL);
        qrs_sampler_free(fa);
        qrs_sampler_free(fo);
      }
    }
  qrs_sampler_free(base);
  expect_resolved_since(&s0, "throttle ties", 60);
}
