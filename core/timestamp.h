/* A moment on both clocks: CLOCK_REALTIME for the wire, CLOCK_MONOTONIC
   for deadlines and ordering. */
#ifndef QRS_CORE_TIMESTAMP_H
#define QRS_CORE_TIMESTAMP_H

#include <stdint.h>
#include <time.h>

struct ts {
  int64_t realtime_ns;
  int64_t monotonic_ns;
};

static inline int64_t
mono_now_ns(void)
{
  struct timespec t;

  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static inline void
ts_now(struct ts *t)
{
  struct timespec a;

  clock_gettime(CLOCK_REALTIME, &a);
  t->realtime_ns = (int64_t)a.tv_sec * 1000000000 + a.tv_nsec;
  t->monotonic_ns = mono_now_ns();
}

#endif
