/* Messages to the service manager (sd_notify; no-ops outside systemd or
   a build without libsystemd).

   notify_step() names a start-up step that may take a while (opening a
   source, resuming the draw journal) and gives it NOTIFY_STEP_MS more:
   STATUS=Starting: <step> and EXTEND_TIMEOUT_USEC, which systemd honours
   only once TimeoutStartSec= has run out, so a start-up that makes
   progress is not killed, and one stuck in a step is, NOTIFY_STEP_MS
   after the step began.  After notify_ready() it does nothing (a
   reload's steps are not start-up). */
#ifndef QRSD_BASE_NOTIFY_H
#define QRSD_BASE_NOTIFY_H

#define NOTIFY_STEP_MS 30000

/* Send state as it is (e.g. "STOPPING=1"). */
void notify(const char *state);

void notify_step(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Send state (READY=1 and its STATUS=) and end the start-up steps. */
void notify_ready(const char *state);

#endif
