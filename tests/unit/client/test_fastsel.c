/* The float fast path of the selection (client/sampling/select.c) against the
   double path (the oracle): identical token, rank, candidate counts, and
   probability / CDF interval within the certified bound, on random
   (row, configuration, u) triples across row shapes, dtypes and stage
   orders, and on adversarial ones (u within 1e-12 of a CDF boundary,
   top-p exactly at a prefix mass) that must take the exact resolution.

   QRS_FASTSEL_TRIPLES=N sets the number of random triples (default
   1000000; 100000 under ASan, 5000 under valgrind; the long run:
   QRS_FASTSEL_TRIPLES=10000000 build/tests/unit/test_fastsel; within
   the suite's 600 s). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <valgrind/valgrind.h>

#include <qrs/sampler.h>

#include "sampling/kernels/moments.h"
#include "sampling/select.h"

#define TESTRNG_SEED 0x243f6a8885a308d3ull
#include "testrng.h"
#include "testrows.h"

#define NMAX 32768

struct row {
  float f[NMAX];
  uint16_t h[NMAX];
  size_t n;
  enum qrs_dtype dt;
};

static void make_row_dtype(struct row *r, enum qrs_dtype dt);

/* A row of shape 0-5 (testrows.h). */
static void
make_row(struct row *r, int shape, size_t n, enum qrs_dtype dt)
{
  r->n = n;
  testrows_fill(r->f, shape, n);
  make_row_dtype(r, dt);
}

/* r->h from r->f for 16-bit dtypes (float16: values cut to 10 mantissa
   bits first, so that they convert exactly). */
static void
make_row_dtype(struct row *r, enum qrs_dtype dt)
{
  size_t i;

  r->dt = dt;
  if (dt == QRS_DTYPE_BF16 || dt == QRS_DTYPE_F16) {
    for (i = 0; i < r->n; i++)
      r->h[i] = testrows_bf16(r->f[i]);
    if (dt == QRS_DTYPE_F16) {
      /* float16: exact conversions of values with few mantissa bits */
      for (i = 0; i < r->n; i++) {
        float v = r->f[i];
        uint32_t b;

        if (v == -INFINITY) {
          r->h[i] = 0xfc00u;
          continue;
        }
        v = v < -60000.0f ? -60000.0f : v;
        memcpy(&b, &v, sizeof(b));
        b &= 0xffffe000u;   /* 10 mantissa bits: exactly representable */
        memcpy(&v, &b, sizeof(v));
        if (fabsf(v) < 0x1p-14f) {
          r->h[i] = 0;
          continue;
        }
        {
          uint32_t sign = (b >> 16) & 0x8000u;
          int e = (int)((b >> 23) & 0xff) - 127 + 15;
          uint32_t m = (b >> 13) & 0x3ffu;

          r->h[i] = (uint16_t)(sign | ((uint32_t)e << 10) | m);
        }
      }
    }
  }
}

static struct qrs__view
view(const struct row *r)
{
  return testrows_view(r->f, r->h, r->dt, r->n);
}

static struct qrs__sel_ws ws;
static unsigned long long mismatches;
/* Set: every fast selection starts without its predecessor's history
   (the ladder from its first rung; tests that count band passes). */
static int fresh;

static void
select_fast(const struct qrs__view *v, const struct qrs__scan *sc,
            const struct qrs__sel_params *p, struct qrs__sel_out *out,
            int *rc)
{
  int k;

  if (fresh)
    for (k = 0; k < QRS__NFRAC; k++)
      ws.ffrac[k] = -1.0;
  *rc = qrs__select(&ws, v, sc, p, out);
}

/* The kernel variant before the test, which tests that switch variants
   get back in teardown(). */
static int kernel_level0;

static void
setup(void)
{
  cr_assert_eq(qrs__sel_ws_init(&ws, NMAX), 0);
  kernel_level0 = qrs__kernel_level(-1);
}

/* Undo what a test may have switched: the fast path, the kernel variant
   and fresh. */
static void
teardown(void)
{
  qrs__sel_ws_done(&ws);
  qrs__fast_enable(1);
  qrs__kernel_level(kernel_level0);
  fresh = 0;
}

/* The fast path's answer b (rb) against the oracle's a (ra). */
static void
compare(const struct row *r, const struct qrs__sel_params *p,
        const struct qrs__sel_out *a, int ra, const struct qrs__sel_out *b,
        int rb, const char *how)
{
  if (ra != rb || (ra == 0 &&
      (a->token != b->token || a->rank != b->rank ||
       a->num_candidates != b->num_candidates ||
       a->eff_top_k != b->eff_top_k || a->eff_top_p != b->eff_top_p ||
       a->eff_min_p != b->eff_min_p ||
       fabs(a->prob - b->prob) > 1e-5 * a->prob ||
       fabs(a->cdf_lo - b->cdf_lo) > 1e-5 ||
       fabs(a->cdf_hi - b->cdf_hi) > 1e-5 ||
       !(b->cdf_lo <= p->u + 1e-12 && p->u <= b->cdf_hi + 1e-12)))) {
    if (mismatches++ < 10)
      cr_log_error("%s: n %zu dt %d T %.17g top_p %.17g u %.17g order %d: "
                   "r %d/%d token %u/%u rank %u/%u cand %u/%u "
                   "prob %.17g/%.17g cdf [%.17g %.17g]/[%.17g %.17g]",
                   how, r->n, r->dt, p->T, p->top_p, p->u, p->order, ra,
                   rb, a->token, b->token, a->rank, b->rank,
                   a->num_candidates, b->num_candidates, a->prob, b->prob,
                   a->cdf_lo, a->cdf_hi, b->cdf_lo, b->cdf_hi);
  }
}

/* One triple: the oracle, then the fast path (which may resolve) three
   ways: finding the max itself (scan NULL), after the row's scan (the
   max known: groups below FAST_DSKIP go unread under a nucleus), and
   after the moment pass (its lane maxima instead of a first read, as a
   sampler with an entropy strategy runs it). */
static void
check(const struct row *r, const struct qrs__sel_params *p,
      struct qrs__sel_out *ret_oracle)
{
  struct qrs__sel_out a, b;
  struct qrs__view v = view(r);
  struct qrs__scan sc;
  struct qrs__fmom fm;
  int ra, rb;

  qrs__fast_enable(0);
  ra = qrs__select(&ws, &v, NULL, p, &a);
  qrs__fast_enable(1);
  select_fast(&v, NULL, p, &b, &rb);
  if (ret_oracle)
    *ret_oracle = a;
  compare(r, p, &a, ra, &b, rb, "fused");
  if (ra != 0)
    return;
  qrs__kscan(&v, &sc);
  select_fast(&v, &sc, p, &b, &rb);
  compare(r, p, &a, ra, &b, rb, "scanned");
  if (!qrs__fmoments_applies(v.dtype, v.n))
    return;
  qrs__fmoments(&v, &sc, &fm, ws.mb);
  ws.mb_ready = 1;
  ws.mb_data = v.data;
  ws.mb_min = fm.min;
  select_fast(&v, &sc, p, &b, &rb);
  ws.mb_ready = 0;
  compare(r, p, &a, ra, &b, rb, "moments");
}

static struct qrs__sel_params
params(double T, double top_p, double u, int order)
{
  struct qrs__sel_params p;

  memset(&p, 0, sizeof(p));
  p.T = T;
  p.top_p = top_p;
  p.u = u;
  p.order = (enum qrs__order)order;
  return p;
}

TestSuite(fastsel, .init = setup, .fini = teardown, .timeout = 600);

Test(fastsel, vector_like_cases_and_every_stage_order)
{
  static const enum qrs_dtype dts[3] = { QRS_DTYPE_F32, QRS_DTYPE_BF16,
                                         QRS_DTYPE_F16 };
  static struct row r;
  struct qrs__fast_stats s0, s1;
  struct qrs__sel_params p;
  int shape, d, o, k;

  qrs__fast_stats_get(&s0);
  for (shape = 0; shape < 6; shape++)
    for (d = 0; d < 3; d++) {
      make_row(&r, shape, 3000, dts[d]);
      for (o = 0; o < 4; o++)
        for (k = 0; k < 20; k++) {
          p = params(k % 3 ? 0.5 + rnd() : 1.0, k % 2 ? 0.9 : 1.0, rnd(),
                     o);
          check(&r, &p, NULL);
        }
    }
  qrs__fast_stats_get(&s1);
  cr_expect_eq(mismatches, 0);
  cr_expect_gt(s1.fast - s0.fast, 300, "fast %llu",
               s1.fast - s0.fast);
}

/* u within 1e-12 of a CDF boundary and top-p exactly at a prefix mass:
   the fast path must not decide these with float sums; it resolves them
   in double, and still gives the oracle's answer. */
Test(fastsel, adversarial_boundaries_take_the_exact_resolution)
{
  static struct row r;
  struct qrs__fast_stats s0, s1;
  struct qrs__sel_params p;
  struct qrs__sel_out o;
  double u0, tp;
  int shape, k, j;

  qrs__fast_stats_get(&s0);
  for (shape = 0; shape < 6; shape++) {
    make_row(&r, shape, 2048, shape % 2 ? QRS_DTYPE_BF16 : QRS_DTYPE_F32);
    for (k = 0; k < 40; k++) {
      tp = k % 2 ? 0.95 : 1.0;
      p = params(k % 4 < 2 ? 1.0 : 0.8, tp, rnd(), 0);
      check(&r, &p, &o);
      /* u just below, at and just above both ends of the interval */
      for (j = 0; j < 6; j++) {
        u0 = j < 3 ? o.cdf_hi : o.cdf_lo;
        p.u = u0 + (double)(j % 3 - 1) * 1e-13;
        if (p.u > 0.0 && p.u < 1.0)
          check(&r, &p, NULL);
      }
      /* top-p exactly at the chosen token's prefix mass (the oracle's
         probabilities are those of the full distribution here) */
      if (tp >= 1.0 && o.cdf_hi < 1.0) {
        p.top_p = o.cdf_hi;
        p.u = rnd();
        check(&r, &p, NULL);
      }
    }
  }
  qrs__fast_stats_get(&s1);
  cr_expect_eq(mismatches, 0);
  cr_log_info("adversarial: fast %llu, resolved %llu",
              s1.fast - s0.fast, s1.resolved - s0.resolved);
  cr_expect_gt(s1.resolved - s0.resolved, 200, "resolved %llu",
               s1.resolved - s0.resolved);
}

Test(fastsel, random_triples_match_the_double_path)
{
  static const enum qrs_dtype dts[3] = { QRS_DTYPE_F32, QRS_DTYPE_BF16,
                                         QRS_DTYPE_F16 };
  static struct row r;
  struct qrs__fast_stats s0, s1;
  struct qrs__sel_params p;
  unsigned long long total, t, per_row;
  size_t n;
  int o;

  total = testrows_triples("QRS_FASTSEL_TRIPLES");
  per_row = 200;
  qrs__fast_stats_get(&s0);
  for (t = 0; t < total; t++) {
    if (t % per_row == 0) {
      n = testrows_random_len(t, per_row, NMAX);
      make_row(&r, (int)(rnd() * 6.0), n, dts[(int)(rnd() * 3.0)]);
    }
    o = rnd() < 0.9 ? 0 : (int)(rnd() * 4.0);
    p = params(rnd() < 0.3 ? 1.0 : 0.3 + 2.0 * rnd(),
               rnd() < 0.4 ? 1.0 : 0.5 + 0.5 * rnd(), rnd(), o);
    check(&r, &p, NULL);
  }
  qrs__fast_stats_get(&s1);
  cr_log_info("random: %llu triples, fast %llu, resolved %llu, "
              "ineligible %llu, groups skipped %llu, retries %llu "
              "(recounts %llu, exact tails %llu), heads from -10 %llu",
              total, s1.fast - s0.fast, s1.resolved - s0.resolved,
              s1.ineligible - s0.ineligible, s1.skipped - s0.skipped,
              s1.rehead - s0.rehead, s1.recounts - s0.recounts,
              s1.exact_tails - s0.exact_tails,
              s1.deep_heads - s0.deep_heads);
  cr_expect_eq(mismatches, 0, "%llu mismatches", mismatches);
  /* 750k groups in 10^6 triples; 134 in valgrind's 5000 (small rows) */
  cr_expect_gt((s1.skipped - s0.skipped) * 100, total, "skipped %llu",
               s1.skipped - s0.skipped);
  cr_expect_gt((s1.fast - s0.fast) * 10, total * 7,
               "the fast path decided only %llu", s1.fast - s0.fast);
  /* both ladders ran, and the retry */
  cr_expect_gt((s1.deep_heads - s0.deep_heads) * 100, total,
               "heads from -10: %llu", s1.deep_heads - s0.deep_heads);
  cr_expect_gt(s1.rehead - s0.rehead, 0);
}

static int
cmp_desc(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;

  return (x < y) - (x > y);
}

/* A crossing between d = -24 and -16 (u near 1 over a row whose mass
   there is a small share of Z): the ladder's deepest band takes it, so the
   fast path decides it (it used to go to the double path), with the
   oracle's answer. */
Test(fastsel, a_crossing_below_minus_16_is_decided_by_the_deepest_band)
{
  static struct row r;
  struct qrs__fast_stats s0, s1;
  struct qrs__sel_params p;
  struct qrs__view v;
  double zt, tail;
  size_t n, i;
  int it, k;

  fresh = 1;
  qrs__fast_stats_get(&s0);
  for (it = 0; it < 24; it++) {
    qrs__kernel_level(it % 2 ? 2 : 1);
    n = NMAX - (size_t)(rnd() * 64.0);
    r.n = n;
    for (i = 0; i < n; i++)
      r.f[i] = (float)(-16.2 - 7.5 * rnd());    /* the band (-24, -16] */
    for (i = 0; i < 6; i++)
      r.f[(size_t)(rnd() * (double)n)] = (float)(-2.0 * rnd());
    r.f[(size_t)(rnd() * (double)n)] = 0.0f;
    make_row_dtype(&r, it % 3 == 2 ? QRS_DTYPE_BF16 : QRS_DTYPE_F32);
    v = view(&r);
    for (i = 0, zt = tail = 0.0; i < n; i++) {
      zt += exp(qrs__kload(&v, i));
      if (qrs__kload(&v, i) <= -16.0)
        tail += exp(qrs__kload(&v, i));
    }
    for (k = 0; k < 10; k++) {
      /* u inside the band's share of the mass, T = 1, no truncation */
      p = params(1.0, 1.0, 1.0 - tail / zt * (0.05 + 0.9 * rnd()), 0);
      check(&r, &p, NULL);
    }
  }
  qrs__fast_stats_get(&s1);
  cr_expect_eq(mismatches, 0);
  cr_log_info("deepest band: fast %llu, resolved %llu, bands %llu",
              s1.fast - s0.fast, s1.resolved - s0.resolved,
              s1.bands - s0.bands);
  /* every triple runs three fast variants; most are decided */
  cr_expect_gt(s1.fast - s0.fast, 24 * 10 * 2, "fast %llu",
               s1.fast - s0.fast);
  cr_expect_geq(s1.bands - s0.bands, 3 * (s1.fast - s0.fast),
                "bands %llu", s1.bands - s0.bands);
}

/* Broad rows with u (or top-p) near 1: the crossing lies deep in the
   ladder's bands, where one element weighs less than the bound the
   pass's partial sums left on the tail after the bands took most of it.
   The tail summed again (a recount) bounds only its own mass: most of
   these decisions are then the fast path's, every one the oracle's. */
Test(fastsel, a_deep_crossing_is_decided_after_the_tail_is_summed_again)
{
  static struct row r;
  struct qrs__fast_stats s0, s1;
  struct qrs__sel_params p;
  unsigned long long fast, resolved;
  int it, k;

  fresh = 1;
  qrs__fast_stats_get(&s0);
  for (it = 0; it < 16; it++) {
    qrs__kernel_level(it % 2 ? 2 : 1);
    make_row(&r, 2, NMAX - (size_t)(rnd() * 64.0),
             it % 4 == 3 ? QRS_DTYPE_BF16 : QRS_DTYPE_F32);
    for (k = 0; k < 12; k++) {
      if (k % 3 == 2)         /* a nucleus cut deep in the row */
        p = params(1.0, 0.995 + 0.0045 * rnd(), rnd(), 0);
      else
        p = params(k % 3 ? 1.0 : 0.9, 1.0, 0.99 + 0.0095 * rnd(), 0);
      check(&r, &p, NULL);
    }
  }
  qrs__fast_stats_get(&s1);
  fast = s1.fast - s0.fast;
  resolved = s1.resolved - s0.resolved;
  cr_log_info("deep crossings: fast %llu, resolved %llu, recounts %llu, "
              "exact tails %llu", fast, resolved, s1.recounts - s0.recounts,
              s1.exact_tails - s0.exact_tails);
  cr_expect_eq(mismatches, 0);
  /* the retries: the tail summed again in float, or (at most half the
     row) given exact weights */
  cr_expect_gt(s1.recounts - s0.recounts + s1.exact_tails - s0.exact_tails,
               fast / 8, "recounts %llu exact tails %llu",
               s1.recounts - s0.recounts, s1.exact_tails - s0.exact_tails);
  cr_expect_gt(s1.exact_tails - s0.exact_tails, 0);
  /* without the retry, a quarter of these went to the double path
     (fast 436, resolved 140); with it, none */
  cr_expect_gt(fast, 8 * resolved, "fast %llu resolved %llu", fast,
               resolved);
}

/* The exact tail of a retry after the deepest band (-24): the head's
   last bucket (key 383, d in (-24, -23.94]) and the tail (d <= -24,
   whose keys clamp to 383 too) meet in one bucket.  Rows with many
   values in that bucket and a tail below it, u placed 1e-9 .. 1e-7 from
   CDF boundaries deep in the bands (the first decision fails on the
   head's float buckets, the retry decides): every answer the oracle's. */
Test(fastsel, an_exact_tail_after_the_deepest_band_keeps_the_last_bucket)
{
  static struct row r;
  struct qrs__fast_stats s0, s1;
  struct qrs__sel_params p;
  struct qrs__sel_out o;
  size_t n, i, j;
  int it, k, q;
  float t;

  fresh = 1;
  qrs__fast_stats_get(&s0);
  for (it = 0; it < 12; it++) {
    n = 8192;
    r.n = n;
    for (i = 0; i < n; i++) {
      if (i < 3000)
        r.f[i] = (float)(-16.5 - 6.5 * rnd());  /* the bands */
      else if (i < 4500)
        r.f[i] = -23.96f;                       /* bucket 383 */
      else
        r.f[i] = (float)(-30.0 - rnd());        /* the tail */
    }
    r.f[0] = 0.0f;
    for (i = n - 1; i > 0; i--) {
      j = (size_t)(rnd() * (double)(i + 1));
      t = r.f[i];
      r.f[i] = r.f[j];
      r.f[j] = t;
    }
    make_row_dtype(&r, QRS_DTYPE_F32);
    for (k = 0; k < 8; k++) {
      p = params(1.0, 1.0, 1.0 - 1e-7 * (0.5 + 3.0 * rnd()), 0);
      check(&r, &p, &o);
      for (q = 0; q < 4; q++) {
        p.u = o.cdf_hi + (q % 2 ? 1.0 : -1.0) * (q < 2 ? 1e-9 : 1e-8);
        if (p.u > 0.0 && p.u < 1.0)
          check(&r, &p, NULL);
      }
    }
  }
  qrs__fast_stats_get(&s1);
  cr_log_info("last bucket: fast %llu, resolved %llu, exact tails %llu, "
              "recounts %llu", s1.fast - s0.fast, s1.resolved - s0.resolved,
              s1.exact_tails - s0.exact_tails, s1.recounts - s0.recounts);
  cr_expect_eq(mismatches, 0);
  cr_expect_gt(s1.fast - s0.fast, 0);
}

/* The next selection of a workspace starts its head at the rung its
   predecessor's row showed enough mass above: the same deep selection
   twice runs its band passes once, then none, with the oracle's answer
   both times; a shallow target starts at the first rung again. */
Test(fastsel, the_next_selection_starts_at_the_rung_it_needs)
{
  static struct row r;
  struct qrs__fast_stats s0, s1;
  struct qrs__sel_params p;
  struct qrs__sel_out a, b;
  struct qrs__view v;
  unsigned long long bands[3];
  int k, ra, rb, it;

  for (it = 0; it < 4; it++) {
    make_row(&r, 2, NMAX, it % 2 ? QRS_DTYPE_BF16 : QRS_DTYPE_F32);
    v = view(&r);
    for (k = 0; k < QRS__NFRAC; k++)
      ws.ffrac[k] = -1.0;
    for (k = 0; k < 3; k++) {
      p = params(1.0, 1.0, k < 2 ? 0.993 : 0.3, 0);
      qrs__fast_enable(0);
      ra = qrs__select(&ws, &v, NULL, &p, &a);
      qrs__fast_enable(1);
      qrs__fast_stats_get(&s0);
      rb = qrs__select(&ws, &v, NULL, &p, &b);
      qrs__fast_stats_get(&s1);
      bands[k] = s1.bands - s0.bands;
      compare(&r, &p, &a, ra, &b, rb, "history");
      cr_expect_eq(s1.fast - s0.fast, 1, "selection %d decided by the "
                   "oracle", k);
    }
    cr_expect_geq(bands[0], 1, "first deep selection: %llu bands",
                  bands[0]);
    cr_expect_eq(bands[1], 0, "second: %llu bands", bands[1]);
    cr_expect_eq(bands[2], 0, "shallow: %llu bands", bands[2]);
  }
  cr_expect_eq(mismatches, 0);
}

/* A nucleus over rows whose tail lies just below the skip cutoff
   (FAST_DSKIP, d = -20): the groups there are not read, yet their mass
   (up to 1e-4 of Z here) decides the nucleus when top-p sits at a
   prefix mass of the head.  The bound must carry it: the same answers as
   the oracle, some of them through the exact resolution. */
Test(fastsel, unread_groups_below_the_skip_cutoff_keep_the_nucleus_exact)
{
  static struct row r;
  struct qrs__fast_stats s0, s1;
  struct qrs__sel_params p;
  struct qrs__view v;
  double T, tail, pre, zt, w[4];
  size_t n, i, j;
  int it, its, k, h;
  float t;

  qrs__fast_stats_get(&s0);
  its = RUNNING_ON_VALGRIND ? 24 : 240;
  for (it = 0; it < its; it++) {
    qrs__kernel_level(it % 2 ? 2 : 1);
    n = NMAX - (size_t)(rnd() * 64.0);
    T = it % 3 ? 1.0 : 0.4 + rnd();
    tail = -20.001 - (it % 4) * 0.5 - 0.25 * rnd();   /* d of the tail */
    r.n = n;
    for (i = 0; i < n; i++)
      r.f[i] = (float)(tail * T);
    for (h = 0; h < 4; h++)
      r.f[h] = (float)(-0.75 * h * T);
    for (i = n - 1; i > 0; i--) {
      j = (size_t)(rnd() * (double)(i + 1));
      t = r.f[i];
      r.f[i] = r.f[j];
      r.f[j] = t;
    }
    make_row_dtype(&r, it % 5 == 4 ? QRS_DTYPE_BF16 : QRS_DTYPE_F32);
    /* The exact Z (the max is 0), and top-p at the mass of the first k
       head tokens: just below, at, just above. */
    v = view(&r);
    for (i = 0, zt = 0.0, h = 0; i < n; i++) {
      zt += exp(qrs__kload(&v, i) / T);
      if (qrs__kload(&v, i) > -10.0 * T)
        w[h++] = exp(qrs__kload(&v, i) / T);    /* the head, in any order */
    }
    cr_assert_eq(h, 4);
    qsort(w, 4, sizeof(w[0]), cmp_desc);
    k = 1 + it % 3;
    for (h = 0, pre = 0.0; h < k; h++)
      pre += w[h];
    for (h = 0; h < 3; h++) {
      p = params(T, pre / zt * (1.0 + (h - 1) * 1e-9), rnd(), 0);
      check(&r, &p, NULL);
    }
  }
  qrs__fast_stats_get(&s1);
  cr_expect_eq(mismatches, 0);
  cr_log_info("skip cutoff: fast %llu, resolved %llu, skipped %llu, "
              "recounts %llu", s1.fast - s0.fast, s1.resolved - s0.resolved,
              s1.skipped - s0.skipped, s1.recounts - s0.recounts);
  cr_expect_gt(s1.skipped - s0.skipped, (unsigned long long)its * 500);
  /* top-p exactly at a prefix mass: the oracle decides (each of the
     three fast variants); 1e-9 either side: decided once the unread
     groups are read (the recount) */
  cr_expect_geq(s1.resolved - s0.resolved, (unsigned long long)its * 3);
  cr_expect_geq(s1.recounts - s0.recounts, (unsigned long long)its * 3);
}

/* Rows of many float-pass blocks whose max is found late (a rising trend,
   leading -inf blocks, a far larger max in the last block): the running
   max rescales the sums and recomputes the head; every triple still
   matches the oracle, and the ladder's band passes run. */
Test(fastsel, running_max_and_ladder_bands_match_the_double_path)
{
  static const enum qrs_dtype dts[3] = { QRS_DTYPE_F32, QRS_DTYPE_BF16,
                                         QRS_DTYPE_F16 };
  static struct row r;
  struct qrs__fast_stats s0, s1;
  struct qrs__sel_params p;
  size_t n, i;
  int kind, d, k;

  fresh = 1;
  qrs__fast_stats_get(&s0);
  for (kind = 0; kind < 8; kind++)
    for (d = 0; d < 3; d++) {
      /* both kernel variants: SSE2 (scalar head stores), AVX2 */
      qrs__kernel_level(kind < 4 ? 2 : 1);
      n = 20000 + (size_t)(rnd() * 5000.0);
      make_row(&r, kind % 4 == 3 ? 3 : 2, n, QRS_DTYPE_F32);
      for (i = 0; i < n; i++) {
        if (kind % 4 == 0)
          r.f[i] += (float)(10.0 * (double)i / (double)n);   /* rising */
        else if (kind % 4 == 1 && i < 3000)
          r.f[i] = -INFINITY;                    /* leading -inf blocks */
      }
      if (kind % 4 == 2)
        r.f[n - 5] = 60.0f;                      /* a far larger max */
      make_row_dtype(&r, dts[d]);
      for (k = 0; k < (RUNNING_ON_VALGRIND ? 8 : 40); k++) {
        p = params(k % 3 ? 0.5 + 1.5 * rnd() : 1.0,
                   k % 3 == 0 ? 1.0 : k % 3 == 1 ? 0.95 : 0.5 + 0.5 * rnd(),
                   rnd(), 0);
        check(&r, &p, NULL);
      }
    }
  qrs__fast_stats_get(&s1);
  cr_expect_eq(mismatches, 0);
  cr_expect_gt(s1.fast - s0.fast, RUNNING_ON_VALGRIND ? 100 : 600,
               "fast %llu", s1.fast - s0.fast);
  cr_expect_gt(s1.bands - s0.bands, RUNNING_ON_VALGRIND ? 4 : 40,
               "bands %llu",
               s1.bands - s0.bands);
}

/* NaN, +inf anywhere (also late, also inside a leading -inf block) and
   all -inf rows are QRS_E_LOGITS through every pass that finds the max
   itself: the fast path's float pass, the entropy throttle's float pass,
   the top-k heap's scan, the plain scan. */
Test(fastsel, bad_rows_fail_on_every_fused_path)
{
  static const enum qrs_dtype dts[3] = { QRS_DTYPE_F32, QRS_DTYPE_BF16,
                                         QRS_DTYPE_F16 };
  static const uint16_t nan16[3] = { 0, 0x7fc0u, 0x7e00u };
  static const uint16_t inf16[3] = { 0, 0x7f80u, 0x7c00u };
  static struct row r;
  struct qrs__sel_params p;
  struct qrs__sel_out o;
  struct qrs__view v;
  size_t n, i, at;
  int d, bad, c, rc;

  n = 9000;
  for (d = 0; d < 6; d++)
    for (bad = 0; bad < 5; bad++)
      for (c = 0; c < 4; c++) {
        qrs__kernel_level(d < 3 ? 2 : 1);
        make_row(&r, 5, n, dts[d % 3]);
        at = bad == 3 ? 1500 : n - 1 - (size_t)(rnd() * 100.0);
        if (bad == 3)
          for (i = 0; i < 2048; i++) {       /* -inf blocks, NaN inside */
            r.f[i] = -INFINITY;
            r.h[i] = d % 3 == 1 ? 0xff80u : 0xfc00u;
          }
        for (i = 0; i < n && bad == 2; i++) {
          r.f[i] = -INFINITY;
          r.h[i] = d % 3 == 1 ? 0xff80u : 0xfc00u;
        }
        if (bad == 0 || bad == 3) {
          r.f[at] = NAN;
          r.h[at] = nan16[d % 3];
        } else if (bad == 1) {
          r.f[at] = INFINITY;
          r.h[at] = inf16[d % 3];
        } else if (bad == 4) {
          r.f[at] = -NAN;
          r.h[at] = (uint16_t)(nan16[d % 3] | 0x8000u);
        }
        p = params(c == 1 ? 0.7 : 1.0, c == 0 ? 0.95 : 1.0, 0.4, 0);
        if (c == 1)
          p.top_k = 50;
        if (c == 2)
          p.min_p = 0.05;
        if (c == 3) {
          p.nucleus = QRS__NUCLEUS_THROTTLE;
          p.thr_target = 2.0 * M_LN2;
          p.thr_pmin = 0.01;
          p.thr_pmax = 0.99;
        }
        v = view(&r);
        rc = qrs__select(&ws, &v, NULL, &p, &o);
        cr_expect_eq(rc, QRS_E_LOGITS, "dtype %d bad %d config %d: %d", d,
                     bad, c, rc);
      }
}

/* The top-k heap's pass gives the scan's max (or scans when its float sum
   cannot rule out a NaN / +inf: here a sum that overflows). */
Test(fastsel, topk_scan_equals_scan_and_topk)
{
  static struct row r;
  struct qrs__scan a, b;
  struct qrs__view v;
  uint32_t pa[64], pb[64];
  double xa[64], xb[64];
  int shape, big;
  size_t i;

  for (shape = 0; shape < 6; shape++)
    for (big = 0; big < 2; big++) {
      make_row(&r, shape, 5000, QRS_DTYPE_F32);
      if (big)
        for (i = 0; i < 5000; i += 7)
          r.f[i] = 3e38f;
      v = view(&r);
      cr_assert_eq(qrs__ktopk_scan(&v, 50, pa, xa, &a), 50);
      qrs__kscan(&v, &b);
      cr_assert_eq(qrs__ktopk(&v, 50, pb, xb), 50);
      cr_expect_eq(a.max, b.max);
      cr_expect_eq(a.has_nan, b.has_nan);
      cr_expect_eq(a.has_posinf, b.has_posinf);
      cr_expect_eq(memcmp(pa, pb, 50 * sizeof(*pa)), 0, "shape %d big %d",
                   shape, big);
      cr_expect_eq(memcmp(xa, xb, 50 * sizeof(*xa)), 0, "shape %d big %d",
                   shape, big);
    }
}

/* A fixed temperature skips the sampler's own scan: a broken row found by
   the selection's float pass is still QRS_E_LOGITS and leaves the chain
   where it was; the same sampler's next good row gives the oracle's
   token. */
Test(fastsel, sampler_without_its_scan_refuses_broken_rows)
{
  static struct row r;
  struct qrs_sampler_config *cfg;
  struct qrs_sampler *s;
  struct qrs_commitment cm;
  struct qrs__sel_params p;
  struct qrs__sel_out o;
  struct qrs__view v;
  uint32_t tok;
  size_t at;
  int k;

  cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
  cr_assert_eq(qrs_sampler_config_set(cfg, "top_p", "0.95"), 0);
  cr_assert_eq(qrs_sampler_new(cfg, 6000, &s), 0);
  qrs_sampler_config_free(cfg);
  for (k = 0; k < 3; k++) {
    make_row(&r, 2, 6000, QRS_DTYPE_F32);
    at = 5990 - (size_t)k * 2500;
    r.f[at] = k == 1 ? INFINITY : NAN;
    cr_expect_eq(qrs_sampler_select_u(s, r.f, QRS_DTYPE_F32, 6000, 0.5, &tok,
                                      NULL),
                 QRS_E_LOGITS, "case %d", k);
  }
  qrs_sampler_next_commitment(s, &cm);
  cr_expect_eq(cm.step, 0);
  make_row(&r, 2, 6000, QRS_DTYPE_F32);
  cr_assert_eq(qrs_sampler_select_u(s, r.f, QRS_DTYPE_F32, 6000, 0.5, &tok,
                                    NULL), 0);
  p = params(1.0, 0.95, 0.5, 0);
  v = view(&r);
  qrs__fast_enable(0);
  cr_assert_eq(qrs__select(&ws, &v, NULL, &p, &o), 0);
  qrs__fast_enable(1);
  cr_expect_eq(tok, o.token);
  qrs_sampler_next_commitment(s, &cm);
  cr_expect_eq(cm.step, 1);
  qrs_sampler_free(s);
}

/* min-p's cut collected in the scan's own pass (a fixed temperature: no
   scan before the selection) gives exactly what the scan and then the
   collection give: every output field, every shape (a late max, leading
   -inf blocks, more candidates than the compaction holds), both stage
   orders with min-p first, both kernel variants. */
Test(fastsel, minp_collected_in_the_scan_pass_is_exact)
{
  static const enum qrs_dtype dts[3] = { QRS_DTYPE_F32, QRS_DTYPE_BF16,
                                         QRS_DTYPE_F16 };
  static struct row r;
  struct qrs__sel_params p;
  struct qrs__sel_out a, b;
  struct qrs__scan sc;
  struct qrs__view v;
  size_t n, i, bad;
  int shape, d, k, ra, rb;

  bad = 0;
  for (shape = 0; shape < 8; shape++)
    for (d = 0; d < 6; d++) {
      qrs__kernel_level(d < 3 ? 2 : 1);
      n = 6000 + (size_t)(rnd() * 20000.0);
      make_row(&r, shape % 6, n, QRS_DTYPE_F32);
      if (shape == 6)
        for (i = 0; i < n; i++)
          r.f[i] += (float)(12.0 * (double)i / (double)n);   /* late max */
      if (shape == 7)
        for (i = 0; i < 2500; i++)
          r.f[i] = -INFINITY;
      make_row_dtype(&r, dts[d % 3]);
      v = view(&r);
      qrs__kscan(&v, &sc);
      for (k = 0; k < (RUNNING_ON_VALGRIND ? 5 : 30); k++) {
        p = params(k % 4 ? 0.3 + 2.0 * rnd() : 1.0,
                   k % 2 ? 0.9 : 1.0, rnd(), k % 3 == 2 ? 1 : 0);
        p.min_p = k % 5 == 0 ? 1e-7 : k % 5 == 1 ? 1.0 : rnd() * 0.3;
        ra = qrs__select(&ws, &v, &sc, &p, &a);
        rb = qrs__select(&ws, &v, NULL, &p, &b);
        if (ra != rb || memcmp(&a, &b, sizeof(a)) != 0) {
          if (bad++ < 5)
            cr_log_error("shape %d dtype %d T %g min_p %g order %d: "
                         "r %d/%d token %u/%u cand %u/%u", shape, d, p.T,
                         p.min_p, (int)p.order, ra, rb, a.token, b.token,
                         a.num_candidates, b.num_candidates);
        }
      }
    }
  cr_expect_eq(bad, 0, "%zu differences", bad);
}

/* min-p's cut through the moment pass's sub-block maxima (ws.mb, what
   the sampler hands the selection after an entropy strategy's pass)
   against the same selection without them: identical token, rank,
   counts, probability and CDF interval, bit for bit; cuts exactly at a
   logit (min_p = exp of an element's d) among them, and rows whose
   length is not a multiple of the sub-block. */
Test(fastsel, min_p_by_sub_block_maxima_equals_the_whole_row_collect)
{
  static const enum qrs_dtype dts[3] = { QRS_DTYPE_F32, QRS_DTYPE_BF16,
                                         QRS_DTYPE_F16 };
  static struct row r;
  struct qrs__sel_params p;
  struct qrs__sel_out a, o;
  struct qrs__scan sc;
  struct qrs__fmom fm;
  struct qrs__view v;
  size_t n, k, j, exact;
  int it, ra, ro;
  double x = 0.0;

  exact = 0;
  for (it = 0; it < 600; it++) {
    qrs__kernel_level(it % 2 ? 2 : 1);
    n = 300 + (size_t)(rnd() * 20000.0);
    make_row(&r, it % 6, n, dts[it % 3]);
    v = view(&r);
    qrs__fmoments(&v, &sc, &fm, ws.mb);
    cr_assert_eq(qrs__row_check(&sc, n), 0);
    p = params(0.3 + 1.5 * rnd(), it % 4 == 0 ? 0.9 : 1.0, rnd(), it % 2);
    if (it % 3 == 0) {
      /* the cut exactly at the d of a sub-block's max, among the
         sub-blocks that hold one of the values within 4 of the max (a
         cut that keeps few enough to be collected) */
      for (j = 0, k = n; j < n; j++)
        if (qrs__kload(&v, j) >= sc.max - 4.0 && (k == n || rnd() < 0.3))
          k = j;
      k = k / QRS__MOM_SUB * QRS__MOM_SUB;
      for (x = -INFINITY, j = k; j < k + QRS__MOM_SUB && j < n; j++)
        x = fmax(x, qrs__kload(&v, j));
      if (!(x > -INFINITY))
        continue;
      p.min_p = exp((x - sc.max) / (p.order == QRS__ORDER_TRUNCATE_FIRST
                                         ? 1.0
                                         : p.T));
      exact += p.min_p > 0.0;
    } else {
      p.min_p = 0.001 + 0.3 * rnd();
    }
    ws.mb_ready = 1;
    ws.mb_data = v.data;
    ra = qrs__select(&ws, &v, &sc, &p, &a);
    ws.mb_ready = 0;
    ro = qrs__select(&ws, &v, &sc, &p, &o);
    cr_assert_eq(ra, ro, "it %d", it);
    if (ra != 0)
      continue;
    cr_expect(a.token == o.token && a.rank == o.rank &&
                  a.num_candidates == o.num_candidates &&
                  a.eff_min_p == o.eff_min_p && a.prob == o.prob &&
                  a.cdf_lo == o.cdf_lo && a.cdf_hi == o.cdf_hi,
              "it %d n %zu dt %d T %.17g min_p %.17g: token %u/%u cand "
              "%u/%u min-p %zu/%zu", it, n, r.dt, p.T, p.min_p, a.token,
              o.token, a.num_candidates, o.num_candidates, a.eff_min_p,
              o.eff_min_p);
  }
  cr_expect_gt(exact, 100);
}
