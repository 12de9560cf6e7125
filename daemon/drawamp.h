/* The amplifier stage of the draw engine: per-source calibrations and
   live statistics, the preparation a draw may need before its bytes are
   read (a calibration, the exact amplifier's table), and the reply's
   amplifier fields. */
#ifndef QRSD_DRAWAMP_H
#define QRSD_DRAWAMP_H

#include <stddef.h>
#include <stdint.h>

#include "amp_exact.h"
#include "ampreq.h"
#include "monitor.h"
#include "source.h"

struct server;

/* Per source; owned by the loop thread. */
struct srcamp {
  struct amp_state st;
  struct monitor mon;
  void *inflight;               /* draw.c's preparations in progress */
};

/* Set up srv->amp for srv's sources (after they are open). */
int drawamp_init(struct server *srv, char *err, size_t errlen);
void drawamp_done(struct server *srv);
struct srcamp *drawamp_of(struct server *srv, const struct source *src);

/* The work a draw needs before its read, done on a worker thread:
   calibration blocks read (in bounded chunks) and reduced to their byte
   means, and the exact table built or taken from the cache. */
struct drawamp_prep {
  struct source *src;
  struct amp_req amp;
  uint32_t blocks;              /* calibration blocks to read (0: none) */
  struct amp_calibration cal;   /* out: computed from them */
  int want_table;
  struct amp_exact_table *table;  /* out (caller releases) */
  int err;                      /* out: 0 or a negative errno */
  char msg[256];
};

/* Whether a draw of a on src needs a preparation first; takes the exact
   table from the cache into *ret_table when it is there (no build on the
   loop thread).  Fills p when it returns 1. */
int drawamp_needs_prep(struct server *srv, struct source *src,
                       const struct amp_req *a,
                       struct amp_exact_table **ret_table,
                       struct drawamp_prep *p);
/* The worker half (thread-safe). */
void drawamp_prep_work(struct drawamp_prep *p);
/* The loop half: store the calibration (no computing: a pointer swap).
   0, or an error for the client (QRS_E_CALIBRATION / QRS_E_ENTROPY /
   -ENOMEM) with p->msg set.  Frees what p holds except the table. */
int drawamp_prep_finish(struct server *srv, struct drawamp_prep *p);
/* Whether two preparations do the same work (so one can wait for the
   other). */
int drawamp_prep_same(const struct drawamp_prep *a,
                      const struct drawamp_prep *b);
/* Bytes of memory a preparation holds while it runs. */
size_t drawamp_prep_bytes(const struct drawamp_prep *p);

/* Amplify buf for a draw on src and account it in the source's monitor
   (logging an alarm once).  0 or a negative error. */
int drawamp_run(struct server *srv, struct source *src,
                const struct amp_req *a, const struct amp_exact_table *t,
                const uint8_t *buf, struct amp_result *ret,
                struct amp_params *ret_p);

#endif
