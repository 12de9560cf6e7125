/* The systemd watchdog.  When the service manager asks for
   one (WatchdogSec=, seen through sd_watchdog_enabled()), a loop timer
   sends WATCHDOG=1 at a third of the interval, but only while
   - the loop runs (a stalled loop fires no timer: no ping), and
   - the libuv worker threads make progress: every tick queues a no-op
     work item; one still not run two ticks later means every worker is
     wedged (a source read that never returns, a stuck completion), and
     the pings stop until it runs, so systemd restarts qrsd.
   Each tick also refreshes STATUS= with the serving summary. */
#ifndef QRSD_OPS_WATCHDOG_H
#define QRSD_OPS_WATCHDOG_H

#include <stdint.h>

#include <uv.h>

struct server;

struct watchdog {
  uv_timer_t timer;
  uv_work_t probe;
  int open;
  int probe_busy;               /* the probe is queued or running */
  unsigned probe_ticks;         /* ticks it has been outstanding */
  uint64_t interval_ms;         /* the tick; 0: no watchdog */
  uint64_t pings;
  uint64_t missed;              /* ticks without a ping */
  struct server *srv;
};

/* Start it on loop if the service manager wants a watchdog; also if not,
   for STATUS= refreshes every 10 s under systemd.  A no-op outside
   systemd. */
void watchdog_start(struct watchdog *w, uv_loop_t *loop, struct server *srv);

/* Close the timer (at stop). */
void watchdog_stop(struct watchdog *w);

#endif
