/* One worker thread per local source, first come first served. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "sources/local.h"

/* Throughput is quoted per draw of the configured default sample_count
   (struct source.draw_bytes); this only when it is not known (unit
   tests that open a source without a registry). */
#define LOCAL_DRAW_BYTES_UNKNOWN 10000

static void *
worker_run(void *arg)
{
  struct local_worker *w = arg;
  struct source_fetch *f;
  int64_t t0;
  int r, retest;

  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (STAILQ_EMPTY(&w->queue) && !w->retest_wanted && !w->stopping)
      pthread_cond_wait(&w->cv, &w->mu);
    if (w->retest_wanted && STAILQ_EMPTY(&w->queue) && !w->stopping) {
      w->retest_wanted = 0;
      pthread_mutex_unlock(&w->mu);
      if (w->retest)
        w->retest(w->src);
      pthread_mutex_lock(&w->mu);
      continue;
    }
    f = STAILQ_FIRST(&w->queue);
    if (!f)
      break;                    /* stopping, nothing queued */
    STAILQ_REMOVE_HEAD(&w->queue, queue_link);
    retest = w->stopping;
    pthread_mutex_unlock(&w->mu);

    t0 = mono_now_ns();
    if (retest) {
      snprintf(f->why, sizeof(f->why), "qrsd is stopping");
      r = -ECANCELED;
    } else if (t0 >= f->deadline_ns) {
      snprintf(f->why, sizeof(f->why), "the deadline passed while it "
               "waited for earlier requests");
      r = -ETIMEDOUT;
    } else {
      r = w->serve(w->src, f->buf, f->n, f->deadline_ns, f->why,
                   sizeof(f->why));
      ts_now(&f->generated);
      if (r == 0)
        capacity_note(&w->cap, f->n, (uint64_t)(mono_now_ns() - t0));
    }

    pthread_mutex_lock(&w->mu);
    w->queued--;
    w->queued_bytes -= f->n;
    pthread_mutex_unlock(&w->mu);
    source_cq_post(&w->cq, f, r);
    pthread_mutex_lock(&w->mu);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

int
local_worker_start(struct local_worker *w, struct source *s,
                   local_serve_fn serve, local_retest_fn retest, char *err,
                   size_t errlen)
{
  int r;

  memset(w, 0, sizeof(*w));
  w->src = s;
  w->serve = serve;
  w->retest = retest;
  STAILQ_INIT(&w->queue);
  capacity_init(&w->cap);
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  if (!s->loop)
    return 0;                   /* unit tests of read(): no worker */
  r = source_cq_init(&w->cq, s->loop);
  if (r < 0) {
    snprintf(err, errlen, "source '%s': %s", s->name, strerror(-r));
    return r;
  }
  w->cq_open = 1;
  r = pthread_create(&w->th, NULL, worker_run, w);
  if (r != 0) {
    snprintf(err, errlen, "source '%s': cannot start its thread: %s",
             s->name, strerror(r));
    return -r;
  }
  w->started = 1;
  return 0;
}

int
local_worker_fetch(struct local_worker *w, struct source_fetch *f)
{
  int64_t now;
  uint64_t queued;
  size_t waiting;

  if (!w->started)
    return -ENOTSUP;
  now = mono_now_ns();
  pthread_mutex_lock(&w->mu);
  queued = w->queued_bytes;
  waiting = w->queued;
  pthread_mutex_unlock(&w->mu);

  if (waiting >= LOCAL_QUEUE_MAX) {
    snprintf(f->why, sizeof(f->why), "refused: %zu requests already wait "
             "for this source", waiting);
    source_fetch_complete(f, -EBUSY);
    return 0;
  }
  if (f->deadline_ns <= now ||
      !capacity_admit(&w->cap, f->n, queued,
                      (uint64_t)(f->deadline_ns - now), 1.0)) {
    snprintf(f->why, sizeof(f->why), "refused: %zu bytes (behind %llu "
             "queued) cannot be harvested by the deadline at the measured "
             "%.0f B/s", f->n, (unsigned long long)queued,
             capacity_rate(&w->cap));
    source_fetch_complete(f, -EAGAIN);
    return 0;
  }

  pthread_mutex_lock(&w->mu);
  STAILQ_INSERT_TAIL(&w->queue, f, queue_link);
  w->queued++;
  w->queued_bytes += f->n;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
  return 0;
}

void
local_worker_want_retest(struct local_worker *w)
{
  pthread_mutex_lock(&w->mu);
  w->retest_wanted = 1;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static void
on_cq_closed(uv_handle_t *h)
{
}

/* Stop the thread: it cancels what is queued.  Bounded: the fetch in
   hand ends by its deadline. */
static void
join_worker(struct local_worker *w)
{
  if (!w->started)
    return;
  pthread_mutex_lock(&w->mu);
  w->stopping = 1;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
  pthread_join(w->th, NULL);
  w->started = 0;
}

void
local_worker_stop(struct local_worker *w)
{
  join_worker(w);
  if (w->cq_open) {
    source_cq_close(&w->cq, on_cq_closed);
    w->cq_open = 0;
  }
}

void
local_worker_done(struct local_worker *w)
{
  join_worker(w);
  capacity_done(&w->cap);
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
}

void
local_worker_rate(struct local_worker *w, struct local_stats *st)
{
  st->bytes_per_s = capacity_rate(&w->cap);
  st->draw_bytes = w->src->draw_bytes ? w->src->draw_bytes
                   : LOCAL_DRAW_BYTES_UNKNOWN;
  st->draws_per_s = st->bytes_per_s / st->draw_bytes;
}

void
local_worker_rate_line(struct local_worker *w, char *buf, size_t len)
{
  struct local_stats st;

  local_worker_rate(w, &st);
  if (st.bytes_per_s <= 0.0)
    snprintf(buf, len, "rate not measured yet");
  else
    snprintf(buf, len, "%.0f B/s, %.2f draws/s at %" PRIu32 " B",
             st.bytes_per_s, st.draws_per_s, st.draw_bytes);
}

int
local_source_fetch(struct source *s, struct source_fetch *f)
{
  struct local_worker *w = s->priv;

  return local_worker_fetch(w, f);
}

int
local_source_read(struct source *s, uint8_t *buf, size_t n, char *why,
                  size_t whylen)
{
  struct local_worker *w = s->priv;

  return w->serve(s, buf, n, mono_now_ns() + LOCAL_READ_TIMEOUT_NS, why,
                  whylen);
}

void
local_source_stop(struct source *s)
{
  struct local_worker *w = s->priv;

  local_worker_stop(w);
}
