/* The cross-process status file (reference spec 14): one JSON object
   that other processes (an engine's health endpoint, monitoring) read
   without talking to qrsd.

   Keys, in order: any gate keys (gate_open, gate_boost, coherence_valid)
   carried over from the current file (an engine's coherence gate writes
   them), then the reference's primary_name, fallback_name,
   last_source_used, fallback_count, currently_degraded, then qrsd's own
   keys (the caller's "extra" object: per-source state, breaker, quota
   use), then updated_at (seconds since the epoch, float).

   Written atomically (temp file + rename).  statusfile_update() writes at
   once when forced (a degraded/recovered transition) and otherwise at most
   once a second.  Path "" disables the file.  Loop thread only. */
#ifndef QRSD_STATUSFILE_H
#define QRSD_STATUSFILE_H

#include <stdint.h>

#include <json-c/json.h>

struct statusfile {
  char *path;                   /* NULL: disabled */
  double last_write;            /* monotonic seconds, 0: never */
  uint64_t writes;
  int last_error;               /* negative errno of the last write */
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

/* Write the file now (force) or if a second has passed since the last
   write.  extra (may be NULL) is merged in (its keys after the reference's
   ones) and not taken over.  Returns 1 written, 0 throttled or disabled,
   or a negative errno (also kept in last_error; never fatal). */
int statusfile_update(struct statusfile *sf, const struct status_summary *s,
                      struct json_object *extra, int force, double now_mono);

#endif
