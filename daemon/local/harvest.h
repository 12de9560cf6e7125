/* Local noise: an OpenEntropy-style harvester of independent noise
   mechanisms of this host (the `noise` source), and CPU timing jitter
   around a memory-bound workload (the `timing` source).

   A mechanism produces raw samples, one byte each: for the timing
   mechanisms, the duration of one event (a clock read, a sleep, a DRAM
   access, a page fault ...) in CPU timestamp-counter ticks, XOR-folded to
   8 bits; for rdrand/rdseed, bytes of the CPU's own generator.  No
   mechanism reads OS randomness (getrandom, /dev/urandom).

   A harvester owns a set of mechanisms.  Each read harvests every
   mechanism in parallel, one thread per mechanism, after the request
   arrived (nothing is pooled), under a timeout; runs each mechanism's raw
   samples through its own SP 800-90B health tests (health.h); combines the
   mechanisms' samples; and conditions the result (condition.h).

   Combination (documented in docs/sources.md):
   xor     byte i of the raw stream is the XOR of sample i of every
           mechanism that delivered it; at least one mechanism must deliver
           all of them.  The read waits for the mechanisms whose measured
           rate (over 64 samples or more) delivers all n samples, after
           what is left of their start-up test, by the deadline with a
           margin of 2 - or, while none is measured, for the first one that
           delivers all n.  The others harvest in small pieces (about 2 to
           8 ms each, at least one per read) until those are done, and what
           they delivered is XORed into the first bytes; they are counted
           as "cut" (not a failure).  A waited-for mechanism whose rate
           in this read no longer makes the deadline (judged after each
           piece; a piece lasts 32 ms at most) stops being waited for and
           is cut like the others.  A waited-for mechanism that falls
           short at the deadline counts a timeout.
   concat  the mechanisms' samples one after the other, in list order;
           the harvest ends as soon as all of them together delivered
           enough, or at the timeout (a shortfall is a failure).

   A mechanism whose samples fail a health test is left out of that read
   and of the following ones until it passes a start-up re-test (1,024
   consecutive samples of the mechanism, discarded) at the start of later
   reads; a start-up test cut short goes on at the next read.  Thread-safe: reads
   on one harvester are serialised by its lock. */
#ifndef QRSD_NOISE_H
#define QRSD_NOISE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "local/condition.h"
#include "stats/health.h"

struct noise_mech {
  const char *name;
  const char *what;             /* one line: what it samples */
  double h;                     /* min-entropy per sample claimed for the
                                   health tests (bits), conservative */
  /* 1 if usable on this host; else 0 and one line in why. */
  int (*probe)(char *why, size_t len);
  /* Fill out[0..n) with raw samples; stop at deadline_ns
     (CLOCK_MONOTONIC).  Returns the number of samples written (less than
     n only at the deadline) or a negative errno. */
  ssize_t (*harvest)(uint8_t *out, size_t n, uint64_t deadline_ns);
};

/* The noise mechanisms, in their canonical order, and the timing source's
   mechanism. */
extern const struct noise_mech noise_mechs[];
extern const size_t noise_mech_count;
extern const struct noise_mech noise_timing_mech;

const struct noise_mech *noise_mech_find(const char *name);

enum noise_combine {
  NOISE_XOR,
  NOISE_CONCAT,
};

int noise_combine_parse(const char *s, enum noise_combine *ret);
const char *noise_combine_name(enum noise_combine c);

/* Per-mechanism state and statistics (read them with noise_snapshot()). */
struct noise_slot {
  const struct noise_mech *m;
  int available;
  char why[128];                /* why unavailable, or "" */
  struct health health;
  struct mcv mcv;               /* over every raw sample harvested */
  uint64_t harvests;            /* reads it took part in */
  uint64_t samples;             /* raw samples delivered */
  uint64_t timeouts;            /* reads where it fell short at the
                                   deadline */
  uint64_t cut;                 /* xor: reads where it was stopped early
                                   because the mechanisms the read waits
                                   for had delivered (not a failure) */
  uint64_t raw_harvested;       /* raw samples, start-up tests too: with
                                   busy_ns, its measured rate */
  size_t piece;                 /* samples per harvest call when it may
                                   be stopped early (0: not yet known) */
  uint64_t failures;            /* health failures and errors */
  uint64_t busy_ns;             /* time spent harvesting */
  char last_error[160];
};

struct noise {
  pthread_mutex_t lock;         /* one read at a time */
  pthread_mutex_t stats_lock;   /* the slots; held only briefly */
  enum condition_mode cond;
  enum noise_combine combine;
  unsigned timeout_ms;
  size_t nslot;
  struct noise_slot *slot;      /* selected mechanisms, available or not */
  size_t navailable;
  struct mcv raw_mcv;           /* the combined raw stream (before
                                   conditioning) of successful reads */
};

/* Build a harvester over the named mechanisms (names NULL or nnames 0: all
   of noise_mechs[]).  Unknown names are an error; known mechanisms that
   are unavailable here are kept (and reported) but never harvested; no
   available mechanism at all is an error.  alpha: health-test false-alarm
   probability.  Returns 0 or a negative errno with err filled in. */
int noise_new(const struct noise_mech *const *mechs, size_t nmechs,
              enum condition_mode cond, enum noise_combine combine,
              unsigned timeout_ms, double alpha, struct noise **ret_noise,
              char *err, size_t errlen);

/* The same, resolving names ("clock_jitter", ...). */
int noise_new_named(const char *const *names, size_t nnames,
                    enum condition_mode cond, enum noise_combine combine,
                    unsigned timeout_ms, double alpha,
                    struct noise **ret_noise, char *err, size_t errlen);

void noise_free(struct noise *nz);   /* accepts NULL */

/* n fresh bytes, harvested now, finished by deadline_ns (CLOCK_MONOTONIC;
   0: the harvester's timeout only).  Returns 0, -ETIMEDOUT (not enough
   samples in time), -EIO (every mechanism failed its health tests) or
   -ENOMEM; on failure, detail (may be NULL) gets one line saying why. */
int noise_read(struct noise *nz, uint8_t *out, size_t n, uint64_t deadline_ns,
               char *detail, size_t dlen);

/* Copy up to max slots (their statistics and health state) into out;
   never waits for a harvest.  Returns the number copied. */
size_t noise_snapshot(struct noise *nz, struct noise_slot *out, size_t max);

/* Raw samples of one mechanism, without health tests or conditioning
   (for tests and the benchmark). */
ssize_t noise_mech_raw(const struct noise_mech *m, uint8_t *out, size_t n,
                       uint64_t deadline_ns);

uint64_t noise_now_ns(void);         /* CLOCK_MONOTONIC in ns */

#endif
