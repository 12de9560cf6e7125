/* SP 800-90B continuous health tests and the MCV min-entropy estimate. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "stats/health.h"

static int
params_ok(double alpha, double h)
{
  return alpha > 0.0 && alpha < 1.0 && h > 0.0 && h <= 8.0;
}

unsigned
health_rct_cutoff(double alpha, double h)
{
  double x;

  if (!params_ok(alpha, h))
    return 0;
  /* Absorb rounding so that alpha = 2^-30, H = 1 gives exactly 30. */
  x = -log2(alpha) / h;
  return 1 + (unsigned)ceil(x - 1e-9);
}

unsigned
health_apt_cutoff(double alpha, double h, unsigned w)
{
  double p, lp, lq, logc, tail;
  unsigned m;

  if (!params_ok(alpha, h) || w < 2 || w > 65536)
    return 0;
  p = exp2(-h);
  lp = log(p);
  lq = log1p(-p);

  /* C is the smallest m with P(X >= m) <= alpha, X ~ Bin(w, p): that is
     1 + CRITBINOM(w, p, 1 - alpha).  Sum the upper tail from X = w down,
     carrying log C(w, j) by the recurrence C(w, j) = C(w, j + 1) (j + 1) /
     (w - j); the tail terms are small, so no 1 - alpha cancellation. */
  logc = 0.0;
  tail = 0.0;
  for (m = w;; m--) {
    tail += exp(logc + m * lp + (w - m) * lq);
    if (tail > alpha)
      break;
    if (m == 0)
      return 0;                 /* cannot happen for alpha < 1 */
    logc += log((double)m) - log((double)(w - m + 1));
  }
  /* P(X >= m) > alpha, P(X >= m + 1) <= alpha.  m + 1 = w + 1 (the
     test cannot fail) when even a whole window of one value is more
     likely than alpha under the claimed H (claims below about 0.06 bits
     at W = 512, alpha = 2^-30): the standard's cutoff, not capped at w,
     which would fail a healthy source at P(X = w) per window (0.07% for
     H = 0.02, syscall_latency's claim).  A stuck source is still
     caught by the repetition count test. */
  return m + 1;
}

int
health_init(struct health *hs, double alpha, double h, int binary)
{
  memset(hs, 0, sizeof(*hs));
  if (!params_ok(alpha, h) || (binary && h > 1.0))
    return -EINVAL;
  hs->alpha = alpha;
  hs->h = h;
  hs->binary = binary ? 1 : 0;
  hs->apt_window = binary ? HEALTH_APT_WINDOW_BINARY
                          : HEALTH_APT_WINDOW_NONBINARY;
  hs->rct_cutoff = health_rct_cutoff(alpha, h);
  hs->apt_cutoff = health_apt_cutoff(alpha, h, hs->apt_window);
  health_retest(hs);
  return 0;
}

void
health_retest(struct health *hs)
{
  hs->rct_run = 0;
  hs->apt_pos = 0;
  hs->apt_count = 0;
  hs->state = HEALTH_STARTUP;
  hs->startup_left = HEALTH_STARTUP_SAMPLES;
}

static int
fail(struct health *hs, const char *test, uint8_t v, unsigned count,
     unsigned cutoff)
{
  hs->state = HEALTH_FAILED;
  snprintf(hs->reason, sizeof(hs->reason),
           "%s test: value 0x%02x seen %u times (cutoff %u, H=%.3g, "
           "alpha=2^%.1f)", test, v, count, cutoff, hs->h, log2(hs->alpha));
  return -EIO;
}

int
health_feed(struct health *hs, const uint8_t *s, size_t n)
{
  size_t i;
  uint8_t v;

  hs->samples += n;
  if (hs->state == HEALTH_FAILED)
    return -EIO;
  for (i = 0; i < n; i++) {
    v = s[i];

    if (hs->rct_run > 0 && v == hs->rct_last) {
      hs->rct_run++;
      if (hs->rct_run >= hs->rct_cutoff) {
        hs->rct_failures++;
        return fail(hs, "repetition count", v, hs->rct_run, hs->rct_cutoff);
      }
    } else {
      hs->rct_last = v;
      hs->rct_run = 1;
    }

    if (hs->apt_pos == 0) {
      hs->apt_ref = v;
      hs->apt_count = 1;
      hs->apt_pos = 1;
    } else {
      hs->apt_pos++;
      if (v == hs->apt_ref) {
        hs->apt_count++;
        if (hs->apt_count >= hs->apt_cutoff) {
          hs->apt_failures++;
          return fail(hs, "adaptive proportion", v, hs->apt_count,
                      hs->apt_cutoff);
        }
      }
      if (hs->apt_pos >= hs->apt_window)
        hs->apt_pos = 0;
    }

    if (hs->state == HEALTH_STARTUP && --hs->startup_left == 0)
      hs->state = HEALTH_OK;
  }
  return 0;
}

const char *
health_state_name(enum health_state st)
{
  switch (st) {
  case HEALTH_STARTUP:
    return "startup";
  case HEALTH_OK:
    return "ok";
  case HEALTH_FAILED:
    return "failed";
  }
  return "?";
}

void
mcv_add(struct mcv *m, const uint8_t *s, size_t n)
{
  size_t i;

  for (i = 0; i < n; i++)
    m->count[s[i]]++;
  m->n += n;
}

double
mcv_estimate(const struct mcv *m)
{
  uint64_t max;
  double p, pu;
  int i;

  if (m->n < 2)
    return -1.0;
  max = 0;
  for (i = 0; i < 256; i++)
    if (m->count[i] > max)
      max = m->count[i];
  p = (double)max / (double)m->n;
  pu = p + 2.576 * sqrt(p * (1.0 - p) / (double)(m->n - 1));
  if (pu >= 1.0)
    return 0.0;
  return -log2(pu);
}

double
mcv_min_entropy(const uint8_t *s, size_t n)
{
  struct mcv m;

  memset(&m, 0, sizeof(m));
  mcv_add(&m, s, n);
  return mcv_estimate(&m);
}
