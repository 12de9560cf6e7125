/* Running the libuv loop so that another thread can take it over while
   the loop thread sleeps.

   qrsd's state is owned by "the loop": it is only touched from libuv
   callbacks, one at a time.  looplock_run() keeps that rule with a mutex
   instead of a thread: the loop thread holds the lock whenever it is
   inside libuv and releases it only while it waits in poll() on the
   loop's backend descriptor.  A thread that takes the lock with
   looplock_enter() is then the loop: it may run any code the loop thread
   may run (callbacks, uv_* calls, gRPC batches), and looplock_leave()
   runs one non-blocking loop iteration on that thread (write callbacks,
   new watchers, due timers, closing handles) and wakes the loop thread
   only when its planned wake-up is too late for the timers now pending.

   The gRPC bridge uses it to run a completion's callback on the
   completion-queue thread as soon as the completion exists: the draw's
   reply reaches the client without first waking the loop thread (on a
   virtual machine each wake of an idle vCPU costs tens of microseconds).

   One loop per process may be run this way. */
#ifndef QRSD_LOOPLOCK_H
#define QRSD_LOOPLOCK_H

#include <pthread.h>
#include <stdint.h>

#include <uv.h>

struct looplock {
  uv_loop_t *loop;
  pthread_mutex_t lock;
  int efd;                      /* wakes the loop thread's poll() */
  uint64_t wake_at;             /* loop time (ms) the poll returns by */
};

/* Prepare lk to run loop; call before anything that asks looplock_for().
   The calling thread holds the lock from here to looplock_done() except
   while looplock_run() waits: everything it does to the loop before and
   after the run is the loop's own work.  0 or a negative errno. */
int looplock_init(struct looplock *lk, uv_loop_t *loop);

/* Run the loop until nothing keeps it alive (uv_run(UV_RUN_DEFAULT)'s
   contract, without uv_stop()).  On the thread that called init. */
void looplock_run(struct looplock *lk);

/* Release the lock and what init made (after looplock_run() returned,
   once no other thread can enter). */
void looplock_done(struct looplock *lk);

/* The lock of loop, or NULL when loop is not run by looplock_run(). */
struct looplock *looplock_for(uv_loop_t *loop);

/* From another thread: become the loop / stop being it.  Never from the
   loop thread, never from a callback. */
void looplock_enter(struct looplock *lk);
void looplock_leave(struct looplock *lk);

#endif
