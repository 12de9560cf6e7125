/* Source construction (config entry -> implementation), the fetch path
   shared by every source, and the cross-thread completion queue. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sources/source.h"

static const struct source_ops *
ops_for(enum conf_source_type t)
{
  switch (t) {
  case CONF_SOURCE_SYSTEM:
    return &source_system_ops;
  case CONF_SOURCE_MOCK:
    return &source_mock_ops;
  case CONF_SOURCE_DEVICE:
    return &source_device_ops;
  case CONF_SOURCE_TIMING:
    return &source_timing_ops;
  case CONF_SOURCE_NOISE:
    return &source_noise_ops;
  case CONF_SOURCE_GRPC:
    return &source_grpc_ops;
  case CONF_SOURCE_PRNG:
    return &source_prng_ops;
  }
  return NULL;
}

int
source_new(const struct conf_source *cs, uv_loop_t *loop,
           struct source **ret_source, char *err, size_t errlen)
{
  struct source *s;
  int r;

  s = calloc(1, sizeof(*s));
  if (!s)
    return -ENOMEM;
  s->ops = ops_for(cs->type);
  s->name = strdup(cs->name);
  s->loop = loop;
  if (!s->ops || !s->name) {
    snprintf(err, errlen, "source '%s': cannot create", cs->name);
    r = s->ops ? -ENOMEM : -EINVAL;
    goto fail;
  }
  r = s->ops->open(s, cs, err, errlen);
  if (r < 0)
    goto fail;
  *ret_source = s;
  return 0;

fail:
  free(s->name);
  free(s);
  return r;
}

void
source_free(struct source *s)
{
  if (!s)
    return;
  if (s->ops && s->ops->close)
    s->ops->close(s);
  free(s->name);
  free(s);
}

void
source_describe(const struct source *s, char *buf, size_t len)
{
  if (s->ops->describe)
    s->ops->describe(s, buf, len);
  else
    snprintf(buf, len, "%s", s->ops->type);
}

/* ---- the fetch ------------------------------------------------------- */

void
source_fetch_complete(struct source_fetch *f, int status)
{
  f->status = status;
  if (status == 0)
    f->why[0] = '\0';
  else if (!f->why[0])
    snprintf(f->why, sizeof(f->why), "%s", strerror(-status));
  f->done(f);
}

static void
read_work(uv_work_t *w)
{
  struct source_fetch *f;

  f = w->data;
  f->status = f->src->ops->read(f->src, f->buf, f->n, f->why,
                                sizeof(f->why));
  ts_now(&f->generated);
}

static void
read_after(uv_work_t *w, int status)
{
  struct source_fetch *f;

  f = w->data;
  if (status == UV_ECANCELED)
    snprintf(f->why, sizeof(f->why), "cancelled before it started");
  source_fetch_complete(f, status < 0 ? status : f->status);
}

int
source_fetch_start(struct source_fetch *f, size_t inline_limit)
{
  struct source *s;
  size_t limit;
  int r;

  s = f->src;
  f->status = 0;
  f->echo = 0;
  f->why[0] = '\0';
  f->inline_done = 0;
  if (s->ops->fetch)
    return s->ops->fetch(s, f);
  if (!s->ops->read || !s->loop)
    return -ENOTSUP;

  limit = s->inline_max < inline_limit ? s->inline_max : inline_limit;
  if (f->n <= limit) {
    r = s->ops->read(s, f->buf, f->n, f->why, sizeof(f->why));
    ts_now(&f->generated);
    f->inline_done = 1;
    source_fetch_complete(f, r);
    return 0;
  }
  f->work.data = f;
  return uv_queue_work(s->loop, &f->work, read_work, read_after);
}

/* ---- completions from other threads ---------------------------------- */

static void
on_cq_async(uv_async_t *a)
{
  struct source_fetch_list done;
  struct source_fetch *f, *next;
  struct source_cq *q;

  q = a->data;
  STAILQ_INIT(&done);
  pthread_mutex_lock(&q->lock);
  STAILQ_CONCAT(&done, &q->done);
  pthread_mutex_unlock(&q->lock);
  for (f = STAILQ_FIRST(&done); f; f = next) {
    next = STAILQ_NEXT(f, cq_link);
    source_fetch_complete(f, f->status);
  }
}

int
source_cq_init(struct source_cq *q, uv_loop_t *loop)
{
  int r;

  memset(q, 0, sizeof(*q));
  STAILQ_INIT(&q->done);
  r = pthread_mutex_init(&q->lock, NULL);
  if (r != 0)
    return -r;
  r = uv_async_init(loop, &q->async, on_cq_async);
  if (r < 0) {
    pthread_mutex_destroy(&q->lock);
    return r;
  }
  q->async.data = q;
  return 0;
}

void
source_cq_post(struct source_cq *q, struct source_fetch *f, int status)
{
  f->status = status;
  pthread_mutex_lock(&q->lock);
  STAILQ_INSERT_TAIL(&q->done, f, cq_link);
  pthread_mutex_unlock(&q->lock);
  uv_async_send(&q->async);
}

void
source_cq_close(struct source_cq *q, uv_close_cb close_cb)
{
  /* Whatever is still queued completes now. */
  on_cq_async(&q->async);
  pthread_mutex_destroy(&q->lock);
  uv_close((uv_handle_t *)&q->async, close_cb);
}
