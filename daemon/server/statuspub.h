/* Publishing the registry's state in the status file (statusfile.h):
   forced on every source state transition (degraded, failed, recovered),
   otherwise at most once a second while requests are being served (a
   change within the second after a snapshot is written at its end, by a
   timer, so the file never stays behind the last change).  The
   reference's keys describe the default source; "sources" carries every
   source's state, counters, breaker and quota use (never an api key) and
   the live statistics of the u it served (the draw engine's monitor).

   The loop only takes snapshots (in memory); a worker thread writes them
   (statusfile_write()), one at a time: a snapshot taken while one is
   being written waits, replaced by any later one, so at most one write
   is in flight and one waiting.  Nothing on the loop thread touches the
   file. */
#ifndef QRSD_STATUSPUB_H
#define QRSD_STATUSPUB_H

#include "engine/draw.h"
#include "engine/registry.h"
#include "persist/statusfile.h"

struct spwrite;

struct statuspub {
  struct statusfile sf;
  struct registry *reg;
  struct draw_engine *draw;     /* NULL: no statistics */
  const struct qrsd_conf *conf; /* "config": its file and hash */
  uv_loop_t *loop;
  int warned;                   /* a write failure was logged */
  struct spwrite *inflight;     /* the write on a worker thread, or NULL */
  char *next;                   /* the snapshot waiting for it, or NULL */
  size_t next_len;
  /* Optional: the status file's "api_keys" (the gRPC endpoint's clients),
     a new json array, or NULL. */
  struct json_object *(*extra_json)(void *ctx);
  void *extra_ctx;
  uv_timer_t trail;             /* the snapshot of a change not yet due */
  int trail_armed, trail_open;
};

/* Attach to reg (and draw's statistics, draw may be NULL) and take the
   first snapshot (written once the loop runs).  path "" or NULL: nothing
   is ever written.  0 or -ENOMEM. */
int statuspub_start(struct statuspub *sp, struct registry *reg,
                    struct draw_engine *draw, uv_loop_t *loop,
                    const struct qrsd_conf *conf, const char *path);
/* Something the snapshot shows changed outside the registry (an api
   key's use): a snapshot now, or at the end of the second. */
void statuspub_touch(struct statuspub *sp);
/* Take a snapshot now (the configuration changed: a reload). */
void statuspub_publish(struct statuspub *sp);
/* Take a final snapshot, detach, and run the loop until the writes in
   flight are done (after the loop has stopped serving: from
   server_done()).  Accepts a zeroed one. */
void statuspub_stop(struct statuspub *sp);

#endif
