/* The exact amplifier: a randomized probability-integral transform of the
   byte sum, so that u is exactly Uniform(0, 1) under the null (N i.i.d.
   uniform bytes) while staying monotone in the byte sum.

   A draw of sample_count = N reads N + AMP_EXACT_EXTRA bytes: S = the sum
   of the first N, k = the low 53 bits of the next 7 (little-endian),
   V = k / 2^53, and

     u = F(S - 1) + V * P(S)

   with F the exact null CDF of S and P its mass.  F comes from a table per
   N (amp_exact_table), computed from the characteristic function of S
   with one real FFT over a window that holds all but 1e-15 of the mass;
   docs/statistics.md proves that every F in the table is within 1e-12 of
   the exact value.  Tables are kept in a process-wide cache bounded in
   bytes (amp_exact_cache_limit), safe to use from any thread. */
#ifndef QRS_CORE_AMP_EXACT_H
#define QRS_CORE_AMP_EXACT_H

#include <stddef.h>
#include <stdint.h>

#include "amplify.h"

/* Bytes an exact draw reads beyond sample_count (53 bits of V). */
#define AMP_EXACT_EXTRA 7

/* Half-width of the table's window in units of 255 sqrt(N): Hoeffding
   bounds the mass beyond it by exp(-2 c^2) < 5e-16 on each side. */
#define AMP_EXACT_WINDOW_C 4.2

struct amp_exact_table {
  uint32_t n;               /* sample_count */
  int64_t s0;               /* first byte sum in the window */
  size_t w;                 /* window length */
  /* cache bookkeeping */
  unsigned refs;
  uint64_t used;
  double cdf[];             /* w: cdf[j] = P(S <= s0 + j), nondecreasing */
};

/* Build the table for N bytes (1 .. 16777216).  Returns 0 or -ENOMEM /
   -EINVAL.  Takes O(sqrt(N) log N) time and 8 * ~2142 sqrt(N) bytes. */
int amp_exact_table_build(uint32_t n, struct amp_exact_table **ret);
void amp_exact_table_free(struct amp_exact_table *t);
/* Bytes the table for N takes (what the cache accounts). */
size_t amp_exact_table_bytes(uint32_t n);

/* P(S <= s). */
double amp_exact_cdf(const struct amp_exact_table *t, int64_t s);

/* The table for N from the cache, built on this thread on a miss.  Release
   with amp_exact_release().  Returns 0, -ENOMEM, or -E2BIG when the table
   alone exceeds the cache limit. */
int amp_exact_get(uint32_t n, struct amp_exact_table **ret);
void amp_exact_release(struct amp_exact_table *t);
/* The table for N if it is in the cache (never builds): 0 or -ENOENT. */
int amp_exact_try_get(uint32_t n, struct amp_exact_table **ret);
/* Whether the table for N is in the cache now (no build). */
int amp_exact_cached(uint32_t n);
/* Set the cache's byte limit (default 64 MiB); drops unused tables above
   it.  Drop everything unused with limit 0 and then restore. */
void amp_exact_cache_limit(size_t bytes);
size_t amp_exact_cache_bytes(void);

/* u from b[0 .. n + AMP_EXACT_EXTRA) with t->n == n.  z and sample_mean
   are the z-score of the sum against p (diagnostics; u does not use p
   except for the clamp to [epsilon, 1 - epsilon]).  Returns 0 or
   AMP_E_EMPTY. */
int amp_exact(const struct amp_exact_table *t, const struct amp_params *p,
              const uint8_t *b, size_t n, struct amp_result *ret);

#endif
