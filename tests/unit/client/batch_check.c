/* The batch-equals-single-calls check, shared by the criterion suite
   (test_batch.c) and the plain program CI runs under TSan
   (batch_tsan.c: criterion's arena does not start under TSan). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qrs/qrs.h>

#include "batch_check.h"

#define B 12
#define N 3000
#define STEPS 4

static uint64_t rng = 0x9e3779b97f4a7c15ull;

double
batch_rnd(void)
{
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) * 0x1p-53;
}

/* Per-row configurations: stateful strategies included. */
static const char *const confs[][4] = {
  { "top_p", "0.9", NULL, NULL },
  { "temperature_strategy", "edt", "top_p", "0.95" },
  { "preset", "creative_sampling", NULL, NULL },
  { "min_p_base", "0.05", "fixed_temperature", "0.8" },
  { "top_k", "40", "top_p", "0.9" },
  { "temperature_strategy", "entropy_throttle", NULL, NULL },
};

struct qrs_sampler *
batch_sampler(int c, size_t n)
{
  struct qrs_sampler_config *cfg;
  struct qrs_sampler *s;
  int i, r;

  if (qrs_sampler_config_new(&cfg) < 0)
    return NULL;
  r = qrs_sampler_config_set(cfg, "log_level", "none");
  for (i = 0; r == 0 && i < 4 && confs[c % 6][i]; i += 2) {
    if (!strcmp(confs[c % 6][i], "preset"))
      r = qrs_sampler_config_set_preset(cfg, confs[c % 6][i + 1]);
    else
      r = qrs_sampler_config_set(cfg, confs[c % 6][i], confs[c % 6][i + 1]);
  }
  if (r < 0 || qrs_sampler_new(cfg, n, &s) < 0)
    s = NULL;
  qrs_sampler_config_free(cfg);
  return s;
}

/* Records compare equal but for the timings. */
static void
untime(struct qrs_token_record *r)
{
  r->timestamp_ns = 0;
  r->entropy_fetch_ms = 0.0;
  r->total_sampling_ms = 0.0;
  r->temperature_ms = 0.0;
  r->select_ms = 0.0;
}

static void
fill(float *f, uint16_t *h, size_t rows)
{
  size_t i;
  uint32_t b;

  for (i = 0; i < rows * (N + 5); i++) {
    f[i] = (float)(8.0 - 1.5 * log(1.0 + (double)(i % N) * batch_rnd() * 3.0) +
                   0.5 * batch_rnd());
    memcpy(&b, &f[i], sizeof(b));
    h[i] = (uint16_t)(b >> 16);
  }
}

int
batch_check_same(unsigned threads, enum qrs_dtype dt, char *err,
                 size_t errlen)
{
  static float f[B * (N + 5)];
  static uint16_t h[B * (N + 5)];
  struct qrs_sampler *one[B], *bat[B];
  struct qrs_batch_row rows[B];
  struct qrs_token_record ra[B], rb[B];
  struct qrs_pool *pool;
  const char *base;
  uint32_t tok;
  size_t es;
  int b, step, r, bad;

  bad = 0;
  memset(one, 0, sizeof(one));
  memset(bat, 0, sizeof(bat));
  if (qrs_pool_new(threads, &pool) < 0 || qrs_pool_threads(pool) != threads) {
    snprintf(err, errlen, "qrs_pool_new(%u)", threads);
    return -1;
  }
  for (b = 0; b < B; b++) {
    one[b] = batch_sampler(b, N);
    bat[b] = batch_sampler(b, N);
    if (!one[b] || !bat[b]) {
      snprintf(err, errlen, "sampler %d", b);
      bad = -1;
      goto out;
    }
  }
  es = dt == QRS_DTYPE_F32 ? 4 : 2;
  base = dt == QRS_DTYPE_F32 ? (const char *)f : (const char *)h;
  for (step = 0; step < STEPS && !bad; step++) {
    fill(f, h, B);
    memset(rows, 0, sizeof(rows));
    for (b = 0; b < B; b++) {
      rows[b].sampler = bat[b];
      rows[b].u = batch_rnd();
      rows[b].record = &rb[b];
      r = qrs_sampler_select_u(one[b], base + (size_t)b * (N + 5) * es, dt,
                               N, rows[b].u, &tok, &ra[b]);
      if (r != 0) {
        snprintf(err, errlen, "single call row %d: %s", b, qrs_strerror(r));
        bad = -1;
        goto out;
      }
      rows[b].token = tok ^ 1u;     /* overwritten by the batch */
    }
    r = qrs_sample_batch(pool, base, dt, N, N + 5, rows, B);
    if (r != 0) {
      snprintf(err, errlen, "step %d: %d rows failed", step, r);
      bad = -1;
      goto out;
    }
    for (b = 0; b < B; b++) {
      untime(&ra[b]);
      untime(&rb[b]);
      if (rows[b].status != 0 || rows[b].token != ra[b].token_id ||
          memcmp(&ra[b], &rb[b], sizeof(ra[b])) != 0) {
        snprintf(err, errlen, "step %d row %d: status %d token %u/%u or "
                 "record differ", step, b, rows[b].status, rows[b].token,
                 ra[b].token_id);
        bad = -1;
        goto out;
      }
    }
  }
out:
  for (b = 0; b < B; b++) {
    qrs_sampler_free(one[b]);
    qrs_sampler_free(bat[b]);
  }
  qrs_pool_free(pool);
  return bad;
}
