/* looplock: another thread becomes the loop while the loop thread sleeps
   in poll(); what it leaves behind (write callbacks, timers, closed
   handles) runs without waiting for the loop thread's next wake-up. */
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "base/looplock.h"
#include "timestamp.h"

static uv_loop_t loop;
static struct looplock lk;
static uv_async_t keep;         /* keeps the loop alive with nothing due */
static uv_async_t rescue;       /* unreferenced: wakes a loop left asleep */
static uv_timer_t timer;
static int ended, rescued;      /* atomics: run returned, rescue sent */

TestSuite(looplock, .timeout = 30);

static uint64_t
ms_now(void)
{
  return (uint64_t)mono_now_ns() / 1000000;
}

static void
no_async(uv_async_t *a)
{
  (void)a;
}

/* From the helper thread: wait up to 2 s for *flag; if it is still 0,
   wake the loop the documented way (a loop thread that was not woken
   when it should have been then finishes, late) and say so. */
static void
wait_or_rescue(const int *flag)
{
  int i;

  for (i = 0; i < 200 && !__atomic_load_n(flag, __ATOMIC_ACQUIRE); i++)
    usleep(10000);
  if (!__atomic_load_n(flag, __ATOMIC_ACQUIRE)) {
    __atomic_store_n(&rescued, 1, __ATOMIC_RELEASE);
    uv_async_send(&rescue);
  }
}

/* The test thread is the loop: init, then run until no handle is left;
   helper runs on another thread meanwhile. */
static void
run_with(void *(*helper)(void *))
{
  pthread_t th;

  cr_assert_eq(uv_loop_init(&loop), 0);
  cr_assert_eq(looplock_init(&lk, &loop), 0);
  cr_assert_eq(looplock_for(&loop), &lk);
  cr_assert_eq(uv_async_init(&loop, &keep, no_async), 0);
  cr_assert_eq(uv_async_init(&loop, &rescue, no_async), 0);
  uv_unref((uv_handle_t *)&rescue);
  cr_assert_eq(pthread_create(&th, NULL, helper, NULL), 0);
  looplock_run(&lk);
  __atomic_store_n(&ended, 1, __ATOMIC_RELEASE);
  pthread_join(th, NULL);
  uv_close((uv_handle_t *)&rescue, NULL);
  uv_run(&loop, UV_RUN_NOWAIT);          /* still holding the lock */
  cr_assert_eq(uv_loop_close(&loop), 0);
  looplock_done(&lk);
  cr_assert_null(looplock_for(&loop));
  cr_assert_eq(rescued, 0, "the loop thread slept through its work");
}

/* ---- a timer started from another thread ----------------------------- */

static uint64_t started_ms, fired_ms;
static int fired;

static void
on_timer(uv_timer_t *t)
{
  fired_ms = ms_now();
  __atomic_store_n(&fired, 1, __ATOMIC_RELEASE);
  uv_close((uv_handle_t *)t, NULL);
  uv_close((uv_handle_t *)&keep, NULL);
}

static void *
start_timer(void *arg)
{
  (void)arg;
  usleep(50000);                /* the loop thread waits, no deadline */
  looplock_enter(&lk);
  started_ms = ms_now();
  uv_timer_init(&loop, &timer);
  uv_update_time(&loop);
  uv_timer_start(&timer, on_timer, 20, 0);
  looplock_leave(&lk);
  wait_or_rescue(&fired);
  return NULL;
}

Test(looplock, a_timer_started_by_another_thread_fires_on_time)
{
  run_with(start_timer);
  /* Without the wake-up the loop thread would sleep for ever. */
  /* Not at once (libuv's loop clock may be a coarse one, a few ms
     behind), and not only when something else woke the loop. */
  cr_assert_geq(fired_ms, started_ms + 10);
  cr_assert_lt(fired_ms, started_ms + 2000, "fired after %llu ms",
               (unsigned long long)(fired_ms - started_ms));
}

/* ---- what a callback queues runs before leave returns ---------------- */

static uv_pipe_t pipe_h;
static int sv[2], wrote, write_status = 1, closed;
static pthread_t helper_thread, write_thread, close_thread;

static void
on_closed(uv_handle_t *h)
{
  (void)h;
  closed++;
  close_thread = pthread_self();
}

static void
on_write(uv_write_t *w, int status)
{
  (void)w;
  wrote = 1;
  write_status = status;
  write_thread = pthread_self();
}

static int setup_rc[3], wrote_before = -1, closed_before = -1;

/* (criterion's asserts belong to the test's own thread: this one only
   records.) */
static void *
write_and_close(void *arg)
{
  static uv_write_t w;
  static char msg[] = "draw reply";
  uv_buf_t b = uv_buf_init(msg, sizeof(msg));

  (void)arg;
  helper_thread = pthread_self();
  usleep(20000);
  looplock_enter(&lk);
  setup_rc[0] = uv_pipe_init(&loop, &pipe_h, 0);
  setup_rc[1] = uv_pipe_open(&pipe_h, sv[0]);
  setup_rc[2] = uv_write(&w, (uv_stream_t *)&pipe_h, &b, 1, on_write);
  uv_close((uv_handle_t *)&pipe_h, on_closed);
  uv_close((uv_handle_t *)&keep, on_closed);
  wrote_before = wrote;
  closed_before = closed;
  looplock_leave(&lk);
  return NULL;
}

Test(looplock, a_write_and_closes_from_another_thread_complete_there)
{
  char buf[32];

  cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  run_with(write_and_close);
  cr_assert_eq(setup_rc[0], 0);
  cr_assert_eq(setup_rc[1], 0);
  cr_assert_eq(setup_rc[2], 0);
  cr_assert_eq(wrote_before, 0);
  cr_assert_eq(closed_before, 0);
  cr_assert_eq(wrote, 1);
  cr_assert_eq(write_status, 0);
  cr_assert_eq(closed, 2);
  /* Run by leave, on the thread that queued them: no wake-up needed. */
  cr_assert(pthread_equal(write_thread, helper_thread),
            "the write callback ran on the loop thread");
  cr_assert(pthread_equal(close_thread, helper_thread),
            "the close callbacks ran on the loop thread");
  cr_assert_eq(read(sv[1], buf, sizeof(buf)), (ssize_t)sizeof("draw reply"));
  cr_assert_str_eq(buf, "draw reply");
  close(sv[1]);
}

/* ---- the loop's last handle closed by another thread ------------------ */

static void *
close_last(void *arg)
{
  (void)arg;
  usleep(20000);
  looplock_enter(&lk);
  uv_close((uv_handle_t *)&keep, NULL);
  looplock_leave(&lk);
  wait_or_rescue(&ended);
  return NULL;
}

Test(looplock, the_loop_ends_when_another_thread_closes_its_last_handle)
{
  run_with(close_last);
}

/* ---- one at a time ---------------------------------------------------- */

#define ROUNDS 20000

static unsigned long counter, ticks, helper_rounds;
static int helper_done;

static void
on_tick(uv_timer_t *t)
{
  unsigned long c = counter;

  counter = c + 1;              /* a lost update if two ran at once */
  ticks++;
  if (helper_done) {
    uv_close((uv_handle_t *)t, NULL);
    uv_close((uv_handle_t *)&keep, NULL);
  }
}

static void *
count(void *arg)
{
  unsigned long c;
  int i;

  (void)arg;
  for (i = 0; i < ROUNDS; i++) {
    looplock_enter(&lk);
    c = counter;
    counter = c + 1;
    helper_rounds++;
    if (i == 0) {
      uv_timer_init(&loop, &timer);
      uv_timer_start(&timer, on_tick, 0, 1);
    }
    if (i == ROUNDS - 1)
      helper_done = 1;
    looplock_leave(&lk);
  }
  return NULL;
}

Test(looplock, the_loop_and_another_thread_never_run_at_once)
{
  run_with(count);
  cr_assert_eq(helper_rounds, ROUNDS);
  cr_assert_gt(ticks, 0);
  cr_assert_eq(counter, helper_rounds + ticks);
}
