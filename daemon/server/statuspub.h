/* Publishing the registry's state in the status file (statusfile.h):
   forced on every source state transition (degraded, failed, recovered),
   otherwise at most once a second while requests are being served.  The
   reference's keys describe the default source; "sources" carries every
   source's state, counters, breaker and quota use (never an api key) and
   the live statistics of the u it served (the draw engine's monitor). */
#ifndef QRSD_STATUSPUB_H
#define QRSD_STATUSPUB_H

#include "engine/draw.h"
#include "engine/registry.h"
#include "persist/statusfile.h"

struct statuspub {
  struct statusfile sf;
  struct registry *reg;
  struct draw_engine *draw;     /* NULL: no statistics */
  uv_loop_t *loop;
  int warned;                   /* a write failure was logged */
};

/* Attach to reg (and draw's statistics, draw may be NULL) and write the
   first snapshot.  path "" or NULL: nothing is ever written.  0 or
   -ENOMEM. */
int statuspub_start(struct statuspub *sp, struct registry *reg,
                    struct draw_engine *draw, uv_loop_t *loop,
                    const char *path);
/* Write a final snapshot and detach.  Accepts a zeroed one. */
void statuspub_stop(struct statuspub *sp);

#endif
