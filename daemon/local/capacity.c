/* Measured throughput and admission control. */
#include <math.h>
#include <string.h>

#include "local/capacity.h"
#include "timestamp.h"

/* A read's weight in the average: its duration over this time constant
   (capped at 1). */
#define CAPACITY_TAU_NS 2000000000.0

void
capacity_init(struct capacity *c)
{
  memset(c, 0, sizeof(*c));     /* not measured, nothing counted */
  pthread_mutex_init(&c->lock, NULL);
}

void
capacity_done(struct capacity *c)
{
  pthread_mutex_destroy(&c->lock);
}

void
capacity_note(struct capacity *c, uint64_t bytes, uint64_t ns)
{
  double r, w;

  if (ns == 0)
    ns = 1;
  r = (double)bytes * 1e9 / (double)ns;
  w = (double)ns / CAPACITY_TAU_NS;
  if (w > 1.0)
    w = 1.0;
  pthread_mutex_lock(&c->lock);
  if (c->reads == 0)
    c->rate = r;
  else
    c->rate += w * (r - c->rate);
  c->reads++;
  c->bytes += bytes;
  c->busy_ns += ns;
  c->last_ns = mono_now_ns();
  pthread_mutex_unlock(&c->lock);
}

double
capacity_rate(struct capacity *c)
{
  double r;

  pthread_mutex_lock(&c->lock);
  r = c->rate;
  pthread_mutex_unlock(&c->lock);
  return r;
}

int
capacity_admit(struct capacity *c, uint64_t n, uint64_t queued,
               uint64_t remaining_ns, double slack)
{
  double need_ns;
  int ok;

  pthread_mutex_lock(&c->lock);
  if (c->reads == 0 || c->rate <= 0.0 ||
      mono_now_ns() - c->last_ns > CAPACITY_STALE_NS) {
    ok = 1;
  } else {
    need_ns = (double)(n + queued) * 1e9 / c->rate * (slack > 1.0 ? slack
                                                                  : 1.0);
    ok = need_ns <= (double)remaining_ns;
    if (!ok)
      c->refused++;
  }
  pthread_mutex_unlock(&c->lock);
  return ok;
}
