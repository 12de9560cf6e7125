/* The entropy throttle on the float fast path (libqrs internal; see
   fthrottle.c and docs/sampling.md, "The entropy throttle on the fast
   path"). */
#ifndef QRS_FTHROTTLE_H
#define QRS_FTHROTTLE_H

#include "select.h"

/* The exact entropy throttle (reference order) for a float32 / 16-bit
   row: 0 selected (out filled as the double path fills it), 1 not a
   configuration this path takes, 2 a decision within the error bound
   (the double path decides), 3 (scan NULL only) the row has a NaN, +inf
   or no finite value (the caller scans it for the error).  scan: the
   row's checked scan, or NULL: the first float pass finds the max
   itself and puts the scan's result into *found (for the double path,
   after a 2). */
int qrs__fast_throttle(struct qrs__sel_ws *ws, const struct qrs__view *row,
                       const struct qrs__scan *scan,
                       const struct qrs__sel_params *p,
                       struct qrs__sel_out *out, struct qrs__scan *found);

#endif
