/* Adaptive-P99 circuit breaker; see breaker.h. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grpc/breaker.h"

void
breaker_params_default(struct breaker_params *p)
{
  p->window_size = 100;
  p->min_timeout_ms = 5.0;
  p->timeout_multiplier = 1.5;
  p->max_timeout_ms = 5000.0;
  p->recovery_window_s = 10.0;
  p->recovery_window_max_s = 60.0;
  p->max_consecutive_failures = 3;
}

int
breaker_init(struct breaker *b, const struct breaker_params *p)
{
  memset(b, 0, sizeof(*b));
  if (p->window_size < 1 || p->window_size > BREAKER_MAX_WINDOW ||
      !(p->min_timeout_ms >= 0) || !(p->timeout_multiplier > 0) ||
      !(p->max_timeout_ms > 0) || !(p->recovery_window_s >= 0) ||
      !(p->recovery_window_max_s >= 0) || !isfinite(p->max_timeout_ms) ||
      !isfinite(p->recovery_window_max_s) ||
      p->max_consecutive_failures < 1)
    return -EINVAL;
  b->p = *p;
  /* one allocation: the ring, then its samples sorted */
  b->window = calloc(2 * p->window_size, sizeof(*b->window));
  if (!b->window)
    return -ENOMEM;
  b->sorted = b->window + p->window_size;
  b->p99_ms = p->max_timeout_ms;
  return 0;
}

void
breaker_done(struct breaker *b)
{
  free(b->window);
  b->window = b->sorted = NULL;
}

/* First index of the ascending v[0..n) holding a value above x. */
static size_t
upper_bound(const double *v, size_t n, double x)
{
  size_t lo = 0, hi = n, mid;

  while (lo < hi) {
    mid = lo + (hi - lo) / 2;
    if (v[mid] <= x)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* The window's samples are also kept sorted (one binary search and a
   memmove per sample, instead of sorting the window on every call): the
   P99 is the reference's sorted[floor(len * 0.99)], the same value. */
void
breaker_record_latency(struct breaker *b, double ms)
{
  size_t idx, k;

  if (isnan(ms))
    return;
  if (b->count == b->p.window_size) {
    /* Drop the oldest sample (the slot about to be overwritten). */
    k = upper_bound(b->sorted, b->count, b->window[b->head]) - 1;
    memmove(b->sorted + k, b->sorted + k + 1,
            (b->count - k - 1) * sizeof(*b->sorted));
    b->count--;
  }
  b->window[b->head] = ms;
  b->head = (b->head + 1) % b->p.window_size;
  k = upper_bound(b->sorted, b->count, ms);
  memmove(b->sorted + k + 1, b->sorted + k,
          (b->count - k) * sizeof(*b->sorted));
  b->sorted[k] = ms;
  b->count++;
  if (b->count < 10)
    return;
  idx = (size_t)floor((double)b->count * 0.99);
  if (idx > b->count - 1)
    idx = b->count - 1;
  b->p99_ms = b->sorted[idx];
}

void
breaker_record_censored(struct breaker *b, double elapsed_s,
                        double timeout_s)
{
  if (elapsed_s * 1000.0 >= 0.8 * timeout_s * 1000.0)
    breaker_record_latency(b, elapsed_s * 1000.0);
}

double
breaker_timeout_ms(const struct breaker *b)
{
  double t = b->p99_ms * b->p.timeout_multiplier;

  if (t < b->p.min_timeout_ms)
    t = b->p.min_timeout_ms;
  if (t > b->p.max_timeout_ms)
    t = b->p.max_timeout_ms;
  return t;
}

void
breaker_note_success(struct breaker *b, double ms)
{
  breaker_record_latency(b, ms);
  b->consecutive_failures = 0;
  b->open_count = 0;
}

double
breaker_note_failure(struct breaker *b, double now)
{
  double window;

  b->consecutive_failures++;
  if (b->consecutive_failures < b->p.max_consecutive_failures)
    return -1.0;
  /* 2^open_count, saturating long before it could overflow a double. */
  window = b->p.recovery_window_s *
           ldexp(1.0, b->open_count > 1000 ? 1000 : (int)b->open_count);
  if (window > b->p.recovery_window_max_s)
    window = b->p.recovery_window_max_s;
  b->open = 1;
  b->open_until = now + window;
  b->open_count++;
  b->opened_total++;
  return window;
}

int
breaker_try_half_open(struct breaker *b, double now)
{
  if (now >= b->open_until) {
    b->open = 0;
    return 1;
  }
  return 0;
}

int
breaker_is_blocking(const struct breaker *b, double now)
{
  return b->open && now < b->open_until;
}

const char *
breaker_state_name(const struct breaker *b, double now)
{
  if (!b->open)
    return "closed";
  return now < b->open_until ? "open" : "half-open";
}
