/* The cross-process status file (the reference's, third_party/
   qr-sampler/src/qr_sampler/telemetry/status_file.py): one JSON object
   that other processes (an engine's health endpoint, monitoring) read
   without talking to qrsd.

   Keys, in order: any gate keys (gate_open, gate_boost, coherence_valid)
   carried over from the current file (an engine's coherence gate writes
   them), then the reference's primary_name, fallback_name,
   last_source_used, fallback_count, currently_degraded, then qrsd's own
   keys (the caller's "extra" object: per-source state, breaker, quota
   use), then updated_at (seconds since the epoch, float).

   In two steps, so that no file is touched on the loop thread: the loop
   takes a snapshot (statusfile_snapshot(): the reference's keys and
   extra's, as text, in memory), forced (a degraded/recovered transition)
   or at most once a second (statusfile_due()); a worker thread writes it
   (statusfile_write(): reads the current file for the gate keys, as a
   regular file only, see base/regfile.h, then replaces it atomically:
   temp file + rename).  Path "" disables the file. */
#ifndef QRSD_STATUSFILE_H
#define QRSD_STATUSFILE_H

#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#define STATUSFILE_MAX (1 << 20)        /* the file, and a snapshot */

struct statusfile {
  char *path;                   /* NULL: disabled */
  double last_snapshot;         /* monotonic seconds, 0: never */
  uint64_t snapshots;
};

struct status_summary {
  const char *primary_name;
  const char *fallback_name;
  const char *last_source_used;
  uint64_t fallback_count;
  int currently_degraded;
};

/* 0 or -ENOMEM.  path NULL or "" disables. */
int statusfile_init(struct statusfile *sf, const char *path);
void statusfile_done(struct statusfile *sf);

/* Is a snapshot due now: forced, or a second since the last one?  0 when
   disabled.  Loop thread. */
int statusfile_due(const struct statusfile *sf, int force, double now_mono);

/* The snapshot: the reference's keys from s, then extra's (may be NULL;
   not taken over), as a JSON object's text in a new buffer (the caller
   frees it) of at most STATUSFILE_MAX bytes.  0, -ENOMEM or -EFBIG.
   Counts as taken (the throttle's clock) on success.  No I/O; loop
   thread. */
int statusfile_snapshot(struct statusfile *sf, const struct status_summary *s,
                        struct json_object *extra, double now_mono,
                        char **ret_text, size_t *ret_len);

/* Write snapshot text (len bytes, from statusfile_snapshot()) to path:
   the current file's gate keys, the snapshot's keys, updated_at (now).
   Returns 0; 1 when written but what was at path was not a regular file
   (a FIFO, a link: not read, replaced; err says what it was); or a
   negative errno with err (errlen > 0) naming the path.  Any thread (one
   writer per path at a time); never blocks on what is at path. */
int statusfile_write(const char *path, const char *text, size_t len,
                     char *err, size_t errlen);

#endif
