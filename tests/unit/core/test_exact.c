/* The exact amplifier: its null CDF against a direct convolution, the
   window's mass, monotonicity in S, uniformity of u, and the cache. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <criterion/criterion.h>

#include "amp_exact.h"
#include "ustat.h"

/* The population of uniform bytes (what the exact amplifier is given
   with every draw). */
static const struct amp_params P = { 127.5, 73.9003, 1e-10 };

/* P(S = s) for N bytes by N direct convolutions with the byte
   distribution, in long double (running sums over 256 terms).  Natively
   this oracle is good to ~1e-16 (the table agrees to 3e-16); valgrind
   computes long double as double, where it is good to ~1e-13.  The
   assertion is the promise, 1e-12. */
static long double *
convolve(uint32_t n)
{
  long double *p, *q, run;
  size_t len, s, i;
  uint32_t k;

  len = 255 * (size_t)n + 1;
  p = calloc(len, sizeof(*p));
  q = calloc(len, sizeof(*q));
  cr_assert(p && q);
  for (i = 0; i < 256; i++)
    p[i] = 1.0L / 256.0L;
  for (k = 2; k <= n; k++) {
    run = 0.0;
    for (s = 0; s <= 255 * (size_t)k; s++) {
      if (s <= 255 * (size_t)(k - 1))
        run += p[s];
      if (s >= 256)
        run -= p[s - 256];
      q[s] = run / 256.0L;
    }
    memcpy(p, q, len * sizeof(*p));
  }
  free(q);
  return p;
}

Test(exact, cdf_matches_direct_convolution)
{
  static const uint32_t ns[] = { 1, 2, 3, 5, 8, 16, 50, 69, 70, 100, 300 };
  struct amp_exact_table *t;
  long double *p, f;
  double err, maxerr;
  size_t i, s;

  for (i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
    cr_assert_eq(amp_exact_table_build(ns[i], &t), 0);
    p = convolve(ns[i]);
    f = 0.0L;
    maxerr = 0.0;
    for (s = 0; s <= 255 * (size_t)ns[i]; s++) {
      f += p[s];
      err = (double)fabsl((long double)amp_exact_cdf(t, (int64_t)s) - f);
      if (err > maxerr)
        maxerr = err;
    }
    cr_assert_lt(maxerr, 1e-12, "N %u: max |F - F_conv| = %g", ns[i],
                 maxerr);
    cr_log_info("N %u: max |F - F_conv| = %g", ns[i], maxerr);
    cr_assert_eq(amp_exact_cdf(t, -1), 0.0);
    cr_assert_eq(amp_exact_cdf(t, 255 * (int64_t)ns[i]), 1.0);
    free(p);
    amp_exact_table_free(t);
  }
}

Test(exact, large_n_tables_are_normalised_and_symmetric)
{
  static const uint32_t ns[] = { 1000, 10000, 65536 };
  struct amp_exact_table *t;
  double top, mid, sym;
  int64_t s, mu2;
  size_t i;

  for (i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
    cr_assert_eq(amp_exact_table_build(ns[i], &t), 0);
    top = t->cdf[t->w - 1];
    cr_assert_lt(fabs(top - 1.0), 1e-13, "N %u: total mass %.17g", ns[i], top);
    /* S and 255N - S have the same law: F(s) + F(255N - s - 1) = 1 */
    mu2 = 255 * (int64_t)ns[i];
    for (s = t->s0; s < t->s0 + (int64_t)t->w; s += 97) {
      sym = amp_exact_cdf(t, s) + amp_exact_cdf(t, mu2 - s - 1);
      cr_assert_lt(fabs(sym - 1.0), 1e-13, "N %u s %ld: %.17g", ns[i],
                   (long)s, sym);
    }
    /* near the middle F is close to the normal CDF (a loose sanity check:
       the exact law differs from the normal by O(1/N) there) */
    mid = amp_exact_cdf(t, mu2 / 2);
    cr_assert_lt(fabs(mid - 0.5), 0.01);
    amp_exact_table_free(t);
  }
}

Test(exact, u_is_monotone_in_the_byte_sum)
{
  struct amp_exact_table *t;
  struct amp_result r;
  uint8_t b[64 + AMP_EXACT_EXTRA];
  double lo_prev;
  int64_t s;
  int i, j;

  cr_assert_eq(amp_exact_table_build(64, &t), 0);
  /* For every S: u with V = 0 is >= u of S - 1 with V = max. */
  lo_prev = -1.0;
  for (s = 0; s <= 255 * 64; s++) {
    memset(b, 0, sizeof(b));
    for (i = 0, j = (int)s; i < 64; i++) {
      b[i] = (uint8_t)(j > 255 ? 255 : j);
      j -= b[i];
    }
    cr_assert_eq(amp_exact(t, &P, b, 64, &r), 0);
    cr_assert_eq(r.byte_sum, (uint64_t)s);
    cr_assert_geq(r.u, lo_prev, "S %ld", (long)s);
    memset(b + 64, 0xff, AMP_EXACT_EXTRA);
    cr_assert_eq(amp_exact(t, &P, b, 64, &r), 0);
    cr_assert_geq(r.u, lo_prev);
    lo_prev = r.u;
  }
  amp_exact_table_free(t);
}

Test(exact, u_is_uniform_from_system_entropy)
{
  struct amp_exact_table *t;
  struct amp_result r;
  uint8_t *b;
  double *u, d, pv;
  size_t i, m, n;

  n = 100;
  m = 20000;
  cr_assert_eq(amp_exact_get((uint32_t)n, &t), 0);
  b = malloc(m * (n + AMP_EXACT_EXTRA));
  u = malloc(m * sizeof(*u));
  cr_assert(b && u);
  for (i = 0; i < m * (n + AMP_EXACT_EXTRA); i += 256)
    cr_assert_eq(getrandom(b + i, m * (n + AMP_EXACT_EXTRA) - i < 256 ?
                           m * (n + AMP_EXACT_EXTRA) - i : 256, 0),
                 (ssize_t)(m * (n + AMP_EXACT_EXTRA) - i < 256 ?
                           m * (n + AMP_EXACT_EXTRA) - i : 256));
  for (i = 0; i < m; i++) {
    cr_assert_eq(amp_exact(t, &P, b + i * (n + AMP_EXACT_EXTRA), n, &r), 0);
    u[i] = r.u;
  }
  d = ustat_ks(u, m);
  pv = ustat_ks_pvalue(d, m);
  cr_assert_gt(pv, 1e-4, "KS D %g p %g", d, pv);
  /* and u does not sit on a lattice: all 20000 values are distinct */
  for (i = 1; i < m; i++)
    cr_assert_neq(u[i], u[i - 1]);
  amp_exact_release(t);
  free(b);
  free(u);
}

Test(exact, shifted_bytes_move_u_in_the_direction_of_the_shift)
{
  struct amp_exact_table *t;
  struct amp_result r;
  uint8_t b[1000 + AMP_EXACT_EXTRA];
  double mean_hi, mean_lo;
  unsigned x;
  int i, k;

  cr_assert_eq(amp_exact_get(1000, &t), 0);
  x = 12345;
  mean_hi = mean_lo = 0.0;
  for (k = 0; k < 2000; k++) {
    for (i = 0; i < 1000 + AMP_EXACT_EXTRA; i++) {
      x = x * 1103515245u + 12345u;
      b[i] = (uint8_t)(x >> 23);
    }
    /* +1 on half the bytes (capped): mean shift about +0.5 */
    for (i = 0; i < 1000; i += 2)
      if (b[i] < 255)
        b[i]++;
    cr_assert_eq(amp_exact(t, &P, b, 1000, &r), 0);
    mean_hi += r.u;
    for (i = 0; i < 1000; i += 2)
      b[i] = b[i] >= 2 ? (uint8_t)(b[i] - 2) : 0;
    cr_assert_eq(amp_exact(t, &P, b, 1000, &r), 0);
    mean_lo += r.u;
  }
  mean_hi /= 2000;
  mean_lo /= 2000;
  /* a shift of 0.5 per byte at N = 1000 is z = 0.5 sqrt(1000) / 73.9 =
     0.214 per draw: E u = Phi-ish(0.214) ~ 0.56, over 2000 draws the
     standard error of the mean u is 0.0065 */
  cr_assert_gt(mean_hi, 0.53, "%g", mean_hi);
  cr_assert_lt(mean_lo, 0.47, "%g", mean_lo);
  amp_exact_release(t);
}

Test(exact, cache_is_bounded_and_shares_tables)
{
  struct amp_exact_table *a, *b, *c;
  size_t one;

  amp_exact_cache_limit(0);                   /* drop what other tests left */
  one = amp_exact_table_bytes(5000);
  amp_exact_cache_limit(one + one / 2);       /* room for one table */
  cr_assert_eq(amp_exact_get(5000, &a), 0);
  cr_assert_eq(amp_exact_get(5000, &b), 0);
  cr_assert_eq(a, b);                         /* shared */
  cr_assert_eq(amp_exact_cache_bytes(), one);
  cr_assert_eq(amp_exact_get(5001, &c), 0);   /* 5000 in use: private */
  cr_assert(amp_exact_cached(5000));
  cr_assert_leq(amp_exact_cache_bytes(), one + one / 2);
  amp_exact_release(c);
  amp_exact_release(a);
  amp_exact_release(b);
  cr_assert_eq(amp_exact_get(5001, &c), 0);   /* evicts unused 5000 */
  cr_assert(!amp_exact_cached(5000));
  cr_assert(amp_exact_cached(5001));
  amp_exact_release(c);
  cr_assert_eq(amp_exact_get(1048576, &c), -E2BIG);  /* alone too big */
  amp_exact_cache_limit(64u << 20);
  cr_assert_leq(amp_exact_table_bytes(1048576), 20u << 20);
  cr_assert_eq(amp_exact_get(1048576, &c), 0);
  cr_assert_lt(fabs(c->cdf[c->w - 1] - 1.0), 1e-13);
  amp_exact_release(c);
  amp_exact_cache_limit(0);
  cr_assert_eq(amp_exact_cache_bytes(), 0);
}
