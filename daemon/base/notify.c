/* sd_notify messages: see notify.h. */
#include "qrs-config.h"

#include "base/notify.h"

#include <stdarg.h>
#include <stdio.h>

#if HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

static int ready;

void
notify(const char *state)
{
#if HAVE_SYSTEMD
  sd_notify(0, state);
#else
  (void)state;
#endif
}

void
notify_step(const char *fmt, ...)
{
  char step[200], msg[300];
  va_list ap;

  if (ready)
    return;
  va_start(ap, fmt);
  vsnprintf(step, sizeof(step), fmt, ap);
  va_end(ap);
  snprintf(msg, sizeof(msg), "EXTEND_TIMEOUT_USEC=%llu\nSTATUS=Starting: %s",
           (unsigned long long)NOTIFY_STEP_MS * 1000, step);
  notify(msg);
}

void
notify_ready(const char *state)
{
  ready = 1;
  notify(state);
}
