/* Conditioning: von Neumann debiasing and the SHA-256 chain. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <openssl/sha.h>
#include <valgrind/valgrind.h>

#include "local/condition.h"

static uint64_t
next64(uint64_t *x)
{
  *x ^= *x >> 12;
  *x ^= *x << 25;
  *x ^= *x >> 27;
  return *x * 2685821657736338717ULL;
}

static void
unhex(const char *h, uint8_t *b, size_t n)
{
  size_t i;
  unsigned v;

  cr_assert_eq(strlen(h), 2 * n);
  for (i = 0; i < n; i++) {
    cr_assert_eq(sscanf(h + 2 * i, "%2x", &v), 1);
    b[i] = (uint8_t)v;
  }
}

Test(condition, parse_and_name)
{
  enum condition_mode m;

  cr_assert_eq(condition_parse("raw", &m), 0);
  cr_assert_eq(m, COND_RAW);
  cr_assert_eq(condition_parse("vonneumann", &m), 0);
  cr_assert_eq(m, COND_VONNEUMANN);
  cr_assert_eq(condition_parse("sha256", &m), 0);
  cr_assert_str_eq(condition_name(m), "sha256");
  cr_assert_eq(condition_parse("von_neumann", &m), -EINVAL);
  cr_assert_eq(condition_parse("", &m), -EINVAL);
}

Test(condition, vonneumann_pairs_msb_first)
{
  /* 0x69 = 01 10 10 01 -> bits 0 1 1 0; twice -> 0110 0110 = 0x66.
     0x0f = 00 00 11 11 -> nothing.  0xc3 = 11 00 00 11 -> nothing. */
  uint8_t in[] = { 0x69, 0x0f, 0xc3, 0x69 }, out[4];
  unsigned acc = 0, nacc = 0;

  cr_assert_eq(condition_vonneumann(in, sizeof(in), out, sizeof(out), &acc,
                                    &nacc), 1);
  cr_assert_eq(out[0], 0x66);
  cr_assert_eq(nacc, 0);

  /* Leftover bits carry over to the next call. */
  cr_assert_eq(condition_vonneumann(in, 1, out, sizeof(out), &acc, &nacc),
               0);
  cr_assert_eq(nacc, 4);
  cr_assert_eq(condition_vonneumann(in, 1, out, sizeof(out), &acc, &nacc),
               1);
  cr_assert_eq(out[0], 0x66);
}

Test(condition, vonneumann_output_of_a_biased_input_is_unbiased)
{
  uint8_t *raw, *out;
  uint64_t x, ones, bits, count[256];
  unsigned acc = 0, nacc = 0;
  size_t n, m, i;
  double p1, chi, e;
  int k;

  /* Independent bits with P(1) = 0.9. */
  n = RUNNING_ON_VALGRIND ? 1u << 20 : 4u << 20;
  raw = malloc(n);
  out = malloc(n);
  cr_assert(raw && out);
  x = 0x9e3779b97f4a7c15ULL;
  ones = 0;
  for (i = 0; i < n; i++) {
    raw[i] = 0;
    for (k = 0; k < 8; k++)
      if ((next64(&x) >> 11) < (uint64_t)(0.9 * 9007199254740992.0))
        raw[i] |= (uint8_t)(1u << k);
    ones += (uint64_t)__builtin_popcount(raw[i]);
  }
  p1 = (double)ones / (8.0 * (double)n);
  cr_assert(p1 > 0.89 && p1 < 0.91, "input bias %f", p1);

  m = condition_vonneumann(raw, n, out, n, &acc, &nacc);
  /* Expected yield: 4 pairs * 2 * 0.9 * 0.1 / 8 bits = 9 % of the input. */
  cr_assert(m > n / 12 && m < n / 10, "yield %zu of %zu", m, n);

  ones = 0;
  memset(count, 0, sizeof(count));
  for (i = 0; i < m; i++) {
    ones += (uint64_t)__builtin_popcount(out[i]);
    count[out[i]]++;
  }
  bits = 8 * (uint64_t)m;
  /* |ones - bits/2| within 5 standard deviations (sqrt(bits)/2). */
  cr_assert_lt(fabs((double)ones - bits / 2.0), 5.0 * sqrt((double)bits) / 2,
               "ones %lu of %lu bits", (unsigned long)ones,
               (unsigned long)bits);
  /* Byte frequencies: chi-square with 255 degrees of freedom below the
     0.9999 quantile (about 347.6). */
  e = (double)m / 256.0;
  chi = 0.0;
  for (k = 0; k < 256; k++)
    chi += ((double)count[k] - e) * ((double)count[k] - e) / e;
  cr_assert_lt(chi, 347.6, "chi-square %f", chi);
  free(raw);
  free(out);
}

Test(condition, sha256_chain_matches_independent_digests)
{
  /* Expected values computed with Python's hashlib, independently of
     qrsd: block i = sha256(state + raw[64 i : 64 i + 64] + le64(i)), the
     input wrapping to its start when it runs out. */
  static const char *want100 =
    "0da008f2aef32028db43456f1bdc70158d999e52cf9a4ebdd6cb500c6986c004"
    "37a90c04e3853035256ff76e11161853391845acf6eacc3778e3bd37de29c232"
    "6695b7242d93129ac698a307ec13e989";
  static const char *wantabc =
    "a2b76f5c6179a848fe26f62dfe863cd4fbbb35320c9c5bee22295a2deae077fe"
    "683fc2cecf3d48d1";
  uint8_t raw[100], out[80], want[80];
  size_t i;

  for (i = 0; i < sizeof(raw); i++)
    raw[i] = (uint8_t)i;
  unhex(want100, want, 80);
  cr_assert_eq(condition_sha256(raw, 100, out, 80), 0);
  cr_assert(memcmp(out, want, 80) == 0);

  unhex(wantabc, want, 40);
  cr_assert_eq(condition_sha256((const uint8_t *)"abc", 3, out, 40), 0);
  cr_assert(memcmp(out, want, 40) == 0);

  cr_assert_eq(condition_sha256(raw, 0, out, 40), -EINVAL);
}

Test(condition, sha256_chain_matches_one_shot_sha256)
{
  uint8_t raw[256], out[96], msg[32 + 64 + 8], state[32];
  uint64_t x;
  size_t i, b;

  /* The qrsd ratio: 64 raw bytes per 32 output bytes, no wrapping. */
  x = 12345;
  for (i = 0; i < sizeof(raw); i++)
    raw[i] = (uint8_t)next64(&x);
  cr_assert_eq(condition_sha256(raw, 192, out, 96), 0);
  memset(state, 0, sizeof(state));
  for (b = 0; b < 3; b++) {
    memcpy(msg, state, 32);
    memcpy(msg + 32, raw + 64 * b, 64);
    memset(msg + 96, 0, 8);
    msg[96] = (uint8_t)b;
    SHA256(msg, sizeof(msg), state);
    cr_assert(memcmp(out + 32 * b, state, 32) == 0, "block %zu", b);
  }
}
