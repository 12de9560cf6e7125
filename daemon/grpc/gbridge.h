/* Driving gRPC C-core from a libuv loop.

   gRPC exposes no file descriptor to poll, so one thread per bridge blocks
   in grpc_completion_queue_next().  When the loop is run by looplock_run()
   (qrsd), that thread takes the loop's lock and runs each completed
   operation's callback itself, as the loop (looplock.h): no hand-off to
   the loop thread.  Otherwise (tools, tests that run the loop with
   uv_run()) it hands every completion to the loop through uv_async_send()
   and the callback runs on the loop thread.  Either way a callback runs
   with ok = the completion's success flag, one at a time with every other
   loop callback, and every batch is started by whoever is the loop, which
   keeps gRPC's rule that batches on one call are serialised and keeps all
   state single-threaded.

   An operation is a struct gb_op embedded in the caller's own structure;
   its address is the gRPC tag. */
#ifndef QRSD_GBRIDGE_H
#define QRSD_GBRIDGE_H

#include <pthread.h>

#include <grpc/grpc.h>
#include <uv.h>

#include "base/looplock.h"

struct gb_op;
typedef void (*gb_cb)(struct gb_op *op, int ok);

struct gb_op {
  gb_cb cb;
  int ok;
};

struct gbridge {
  uv_loop_t *loop;
  struct looplock *lk;          /* callbacks on the CQ thread, or NULL */
  grpc_completion_queue *cq;
  uv_async_t wake;
  pthread_t thread;
  pthread_mutex_t lock;
  /* Completed, not yet run: (op, ok) pairs owned by the bridge, so that
     the CQ thread never writes into an op (the loop thread's memory). */
  struct gb_event { struct gb_op *op; int ok; } *ev, *spare;
  size_t n_ev, cap_ev, cap_spare;
  int thread_done;              /* set by the thread, under lock */
  int closing;
  void (*on_closed)(struct gbridge *b);
};

/* Create the completion queue and start its thread.  0 or a negative
   errno.  grpc_init() must have been called. */
int gbridge_init(struct gbridge *b, uv_loop_t *loop);

/* Shut the queue down once every call on it has finished (cancel them
   first): the remaining completions still run their callbacks, then the
   thread is joined, the async handle closed, the queue destroyed and
   on_closed (may be NULL) called on the loop thread.  The loop must keep
   running until then. */
void gbridge_close(struct gbridge *b, void (*on_closed)(struct gbridge *b));

/* Start a batch whose completion runs op->cb as the loop.  Returns
   the grpc_call_error; on anything but GRPC_CALL_OK no completion will
   come. */
grpc_call_error gbridge_batch(grpc_call *call, const grpc_op *ops,
                              size_t n, struct gb_op *op, gb_cb cb);

/* Helpers for messages: a byte buffer holding a copy of data, and the
   whole content of a received buffer as one new slice (unref it). */
grpc_byte_buffer *gbridge_buffer(const void *data, size_t len);
grpc_slice gbridge_read_all(grpc_byte_buffer *bb);

/* A deadline ms milliseconds from now (ms < 0: none). */
gpr_timespec gbridge_deadline(double ms);

/* The daemon's one bridge, shared by every gRPC user on loop (upstreams,
   the compat endpoint): the first get calls grpc_init() and starts it,
   the last put closes it (once its calls have finished) and calls
   grpc_shutdown().  NULL on failure. */
struct gbridge *gbridge_shared_get(uv_loop_t *loop);
void gbridge_shared_put(void);

#endif
