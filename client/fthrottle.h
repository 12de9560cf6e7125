/* The entropy throttle on the float fast path (libqrs internal; see
   fthrottle.c and docs/sampling.md, "The entropy throttle on the fast
   path"). */
#ifndef QRS_FTHROTTLE_H
#define QRS_FTHROTTLE_H

#include "select.h"

/* The exact entropy throttle (reference order) for a float32 / 16-bit
   row: 0 selected (out filled as the double path fills it), 1 not a
   configuration this path takes, 2 a decision within the error bound
   (the double path decides).  scan: the row's checked scan. */
int qrs__fast_throttle(struct qrs__sel_ws *ws, const struct qrs__view *row,
                       const struct qrs__scan *scan,
                       const struct qrs__sel_params *p,
                       struct qrs__sel_out *out);

#endif
