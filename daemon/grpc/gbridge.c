/* gRPC completion queue thread <-> libuv loop; see gbridge.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/support/time.h>

#include "grpc/gbridge.h"

/* A completed operation's callback, run as the loop. */
static void
op_run(struct gb_op *op, int ok)
{
  op->ok = ok;
  op->cb(op, ok);
}

static void *
cq_main(void *arg)
{
  struct gbridge *b = arg;
  grpc_event ev;

  for (;;) {
    ev = grpc_completion_queue_next(b->cq,
                                    gpr_inf_future(GPR_CLOCK_REALTIME),
                                    NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN)
      break;
    if (ev.type != GRPC_OP_COMPLETE)
      continue;
    if (b->lk) {
      /* Be the loop for this callback: no hand-off, no wake-up. */
      looplock_enter(b->lk);
      op_run(ev.tag, ev.success);
      looplock_leave(b->lk);
      continue;
    }
    pthread_mutex_lock(&b->lock);
    if (b->n_ev == b->cap_ev) {
      size_t cap = b->cap_ev ? 2 * b->cap_ev : 64;
      struct gb_event *v = realloc(b->ev, cap * sizeof(*v));

      if (!v)
        abort();                /* cannot drop a completion */
      b->ev = v;
      b->cap_ev = cap;
    }
    b->ev[b->n_ev].op = ev.tag;
    b->ev[b->n_ev].ok = ev.success;
    b->n_ev++;
    pthread_mutex_unlock(&b->lock);
    uv_async_send(&b->wake);
  }
  pthread_mutex_lock(&b->lock);
  b->thread_done = 1;
  pthread_mutex_unlock(&b->lock);
  uv_async_send(&b->wake);
  return NULL;
}

static void
on_async_closed(uv_handle_t *h)
{
  struct gbridge *b = h->data;

  grpc_completion_queue_destroy(b->cq);
  b->cq = NULL;
  free(b->ev);
  free(b->spare);
  b->ev = b->spare = NULL;
  pthread_mutex_destroy(&b->lock);
  if (b->on_closed)
    b->on_closed(b);
}

static void
on_wake(uv_async_t *h)
{
  struct gbridge *b = h->data;
  struct gb_event *list, *tmp;
  size_t n, i, cap;
  int done;

  /* uv_async_send coalesces: always take everything (swap the arrays). */
  pthread_mutex_lock(&b->lock);
  list = b->ev;
  n = b->n_ev;
  cap = b->cap_ev;
  b->ev = b->spare;
  b->cap_ev = b->cap_spare;
  b->spare = NULL;
  b->cap_spare = 0;
  b->n_ev = 0;
  done = b->thread_done;
  pthread_mutex_unlock(&b->lock);

  for (i = 0; i < n; i++)
    op_run(list[i].op, list[i].ok);
  /* Keep the array for the next swap. */
  pthread_mutex_lock(&b->lock);
  tmp = b->spare;
  b->spare = list;
  b->cap_spare = cap;
  pthread_mutex_unlock(&b->lock);
  free(tmp);
  if (done && !uv_is_closing((uv_handle_t *)&b->wake)) {
    pthread_join(b->thread, NULL);
    uv_close((uv_handle_t *)&b->wake, on_async_closed);
  }
}

int
gbridge_init(struct gbridge *b, uv_loop_t *loop)
{
  int r;

  memset(b, 0, sizeof(*b));
  b->loop = loop;
  b->lk = looplock_for(loop);
  b->cq = grpc_completion_queue_create_for_next(NULL);
  if (!b->cq)
    return -ENOMEM;
  pthread_mutex_init(&b->lock, NULL);
  r = uv_async_init(loop, &b->wake, on_wake);
  if (r < 0)
    goto fail;
  b->wake.data = b;
  r = -pthread_create(&b->thread, NULL, cq_main, b);
  if (r < 0) {
    uv_close((uv_handle_t *)&b->wake, NULL);
    goto fail;
  }
  return 0;

fail:
  grpc_completion_queue_destroy(b->cq);
  pthread_mutex_destroy(&b->lock);
  b->cq = NULL;
  return r;
}

void
gbridge_close(struct gbridge *b, void (*on_closed)(struct gbridge *b))
{
  if (b->closing)
    return;
  b->closing = 1;
  b->on_closed = on_closed;
  grpc_completion_queue_shutdown(b->cq);
}

grpc_call_error
gbridge_batch(grpc_call *call, const grpc_op *ops, size_t n,
              struct gb_op *op, gb_cb cb)
{
  op->cb = cb;
  return grpc_call_start_batch(call, ops, n, op, NULL);
}

grpc_byte_buffer *
gbridge_buffer(const void *data, size_t len)
{
  grpc_slice s = grpc_slice_from_copied_buffer(data, len);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);

  grpc_slice_unref(s);
  return bb;
}

grpc_slice
gbridge_read_all(grpc_byte_buffer *bb)
{
  grpc_byte_buffer_reader r;
  grpc_slice s;

  if (!grpc_byte_buffer_reader_init(&r, bb))
    return grpc_empty_slice();
  s = grpc_byte_buffer_reader_readall(&r);
  grpc_byte_buffer_reader_destroy(&r);
  return s;
}

gpr_timespec
gbridge_deadline(double ms)
{
  if (ms < 0)
    return gpr_inf_future(GPR_CLOCK_REALTIME);
  return gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                      gpr_time_from_micros((int64_t)(ms * 1000.0),
                                           GPR_TIMESPAN));
}

static struct gbridge shared;
static int shared_refs;

static void
on_shared_closed(struct gbridge *b)
{
  grpc_shutdown();
}

struct gbridge *
gbridge_shared_get(uv_loop_t *loop)
{
  if (shared_refs > 0) {
    shared_refs++;
    return &shared;
  }
  grpc_init();
  if (gbridge_init(&shared, loop) < 0) {
    grpc_shutdown();
    return NULL;
  }
  shared_refs = 1;
  return &shared;
}

void
gbridge_shared_put(void)
{
  if (shared_refs <= 0 || --shared_refs > 0)
    return;
  gbridge_close(&shared, on_shared_closed);
}
