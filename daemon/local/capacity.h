/* Measured capacity of a local source, and admission control from it.

   A source notes every read it completes (bytes, and the time from the
   start of the read, waiting included).  The rate is an exponentially
   weighted average over reads, weighted by their duration, so that one
   long read counts for more than many short ones.  Before a read, the
   source asks whether n bytes (behind `queued` bytes already waiting) can
   be served by the deadline at that rate; when the answer is no, the
   draw is refused at once (or handed to the fallback) instead of being
   left to stall.

   Thread-safe (its own lock). */
#ifndef QRSD_CAPACITY_H
#define QRSD_CAPACITY_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define CAPACITY_STALE_NS 2000000000LL

struct capacity {
  pthread_mutex_t lock;
  double rate;                  /* bytes per second; 0: not measured */
  uint64_t reads;
  uint64_t bytes;
  uint64_t busy_ns;
  uint64_t refused;             /* admissions refused */
  int64_t last_ns;              /* CLOCK_MONOTONIC of the last note */
};

void capacity_init(struct capacity *c);
void capacity_done(struct capacity *c);

/* A read of bytes took ns (ns > 0). */
void capacity_note(struct capacity *c, uint64_t bytes, uint64_t ns);

/* Bytes per second measured so far, 0 before the first read. */
double capacity_rate(struct capacity *c);

/* 1 if n bytes, after `queued` bytes ahead of them, can be delivered
   within remaining_ns at the measured rate; else 0, counted in
   c->refused.  Always 1 before anything was measured, and when the last
   measurement is older than CAPACITY_STALE_NS: a read is how the rate
   gets (re-)measured, so a source that was slow once is not refused for
   ever.  slack: a factor above 1 for the rate's uncertainty. */
int capacity_admit(struct capacity *c, uint64_t n, uint64_t queued,
                   uint64_t remaining_ns, double slack);

#endif
