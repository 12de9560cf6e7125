/* The adaptive circuit breaker of a network upstream: qr-sampler's
   AdaptiveCircuitBreaker (third_party/qr-sampler/src/qr_sampler/entropy/
   qgrpc/breaker.py), reproduced exactly (tests/vectors/breaker.json).

   A rolling window of call latencies gives a P99; the call timeout is
   P99 x multiplier, kept within [min_timeout_ms, max_timeout_ms].  After
   max_consecutive_failures failed fetches in a row the circuit opens for a
   recovery window that doubles with every consecutive opening, up to
   recovery_window_max_s; once it has elapsed one half-open attempt may go
   through (the caller recreates the channel first).  Failures are not reset
   when the circuit opens, so a failed half-open attempt re-opens it at once
   with the doubled window; a success resets both counts.

   Pure logic: the caller passes the time (seconds on a monotonic clock).
   Not thread-safe; qrsd uses it from the loop thread only. */
#ifndef QRSD_BREAKER_H
#define QRSD_BREAKER_H

#include <stddef.h>
#include <stdint.h>

#define BREAKER_MAX_WINDOW 100000

struct breaker_params {
  uint32_t window_size;           /* latency samples kept, 1..100000 */
  double min_timeout_ms;          /* adaptive timeout floor */
  double timeout_multiplier;
  double max_timeout_ms;          /* hard cap (the source's call timeout) */
  double recovery_window_s;       /* first open period */
  double recovery_window_max_s;   /* cap of the doubling */
  uint32_t max_consecutive_failures;
};

struct breaker {
  struct breaker_params p;
  double *window;                 /* ring of the last samples (ms) */
  double *sorted;                 /* the same samples, ascending (in
                                     window's allocation) */
  size_t count;                   /* samples held, <= window_size */
  size_t head;                    /* next slot to write */
  double p99_ms;                  /* initially max_timeout_ms */
  uint32_t consecutive_failures;
  int open;                       /* circuit_open flag */
  double open_until;              /* monotonic seconds */
  uint32_t open_count;            /* consecutive openings (backoff level) */
  uint64_t opened_total;          /* openings since start, for statistics */
};

/* Defaults as in the reference (window 100, floor 5 ms, x1.5, cap 5000 ms,
   10 s doubling to 60 s, 3 failures). */
void breaker_params_default(struct breaker_params *p);

/* 0, -EINVAL (parameters out of range) or -ENOMEM.  Release with
   breaker_done(), which accepts a zeroed or half-built breaker. */
int breaker_init(struct breaker *b, const struct breaker_params *p);
void breaker_done(struct breaker *b);

/* A latency sample in ms; from 10 samples on the P99 follows the window. */
void breaker_record_latency(struct breaker *b, double ms);
/* A failed call that waited elapsed_s of a timeout_s budget: recorded as a
   sample only when it used at least 80% of the budget. */
void breaker_record_censored(struct breaker *b, double elapsed_s,
                             double timeout_s);
/* The timeout for the next call, in ms. */
double breaker_timeout_ms(const struct breaker *b);

void breaker_note_success(struct breaker *b, double ms);
/* A failed fetch (after its retries).  Returns the recovery window in
   seconds when this failure opened (or re-opened) the circuit, else a
   negative value. */
double breaker_note_failure(struct breaker *b, double now);
/* When the circuit is open and its window has elapsed: close the flag and
   return 1 (the caller makes one trial, recreating the channel first).
   Otherwise 0. */
int breaker_try_half_open(struct breaker *b, double now);
/* Open and still inside its recovery window. */
int breaker_is_blocking(const struct breaker *b, double now);

/* "closed", "open" (blocking) or "half-open" (open, window elapsed,
   waiting for the trial). */
const char *breaker_state_name(const struct breaker *b, double now);

#endif
