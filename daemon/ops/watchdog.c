/* The systemd watchdog and STATUS= line: see watchdog.h. */
#include "qrs-config.h"

#include "ops/watchdog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "base/log.h"
#include "server/server.h"

#define STATUS_ONLY_MS 10000    /* no watchdog: STATUS= refresh period */
#define PROBE_SLACK_TICKS 2     /* ticks a probe may take before the
                                   workers count as wedged */

static void
probe_work(uv_work_t *req)
{
  (void)req;                    /* running at all is the point */
}

static void
probe_done(uv_work_t *req, int status)
{
  struct watchdog *w = req->data;

  (void)status;
  w->probe_busy = 0;
  w->probe_ticks = 0;
}

static void
on_tick(uv_timer_t *t)
{
  struct watchdog *w = t->data;
  const struct server *srv = w->srv;
  char msg[256];
  int alive = 1;

  if (w->probe_busy) {
    if (++w->probe_ticks >= PROBE_SLACK_TICKS)
      alive = 0;
  } else {
    w->probe.data = w;
    if (uv_queue_work(t->loop, &w->probe, probe_work, probe_done) == 0) {
      w->probe_busy = 1;
      w->probe_ticks = 0;
    }
  }
  snprintf(msg, sizeof(msg), "%sSTATUS=Serving on %s: %u connections, "
           "%llu requests, %llu draws, %llu errors%s",
           alive && w->interval_ms ? "WATCHDOG=1\n" : "",
           srv->socket_path ? srv->socket_path : "?",
           srv->n_conns, (unsigned long long)srv->requests,
           (unsigned long long)srv->draws, (unsigned long long)srv->errors,
           alive ? "" : " (worker threads stalled)");
  if (w->interval_ms) {
    if (alive) {
      w->pings++;
    } else {
      if (w->missed++ == 0)
        log_ev(LOG_LEVEL_WARN, &(struct log_fields){ .event = "watchdog-stall" },
               "watchdog: the worker threads made no progress for %llu "
               "ms; not pinging systemd",
               (unsigned long long)(w->probe_ticks * w->interval_ms));
    }
    if (alive && w->missed) {
      log_info("watchdog: worker threads progress again; pinging");
      w->missed = 0;
    }
  }
#if HAVE_SYSTEMD
  sd_notify(0, msg);
#endif
}

void
watchdog_start(struct watchdog *w, uv_loop_t *loop, struct server *srv)
{
  uint64_t usec = 0;
  uint64_t period;

  memset(w, 0, sizeof(*w));
  w->srv = srv;
#if HAVE_SYSTEMD
  if (!getenv("NOTIFY_SOCKET"))
    return;
  if (sd_watchdog_enabled(0, &usec) <= 0)
    usec = 0;
#else
  (void)loop;
  return;
#endif
  w->interval_ms = usec / 3000;
  if (usec && w->interval_ms == 0)
    w->interval_ms = 1;
  period = w->interval_ms ? w->interval_ms : STATUS_ONLY_MS;
  uv_timer_init(loop, &w->timer);
  w->timer.data = w;
  uv_timer_start(&w->timer, on_tick, period, period);
  uv_unref((uv_handle_t *)&w->timer);
  w->open = 1;
  if (w->interval_ms)
    log_info("watchdog: pinging systemd every %llu ms (WatchdogSec %llu ms)",
             (unsigned long long)w->interval_ms,
             (unsigned long long)(usec / 1000));
}

void
watchdog_stop(struct watchdog *w)
{
  if (!w->open)
    return;
  uv_timer_stop(&w->timer);
  uv_close((uv_handle_t *)&w->timer, NULL);
  w->open = 0;
}
