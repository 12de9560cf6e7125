/* What the pieces of the token selection share (libqrs internal; callers
   use select.h).

   select.c        the workspace, the row check and the dispatch: which
                   path takes a selection, the scans it can fuse
   select_exact.c  the double path: exact weights, prefix cuts and the
                   CDF search without sorting, in each stage order
                   (reference, HF, llama.cpp), and the exact resolution
                   of what the float path cannot certify
   select_fast.c   the float fast path (reference order, top-p or
                   none): one float pass with an error bound, the head
                   ladder, and the certification of its decision
   fthrottle.c     the entropy throttle on the float path */
#ifndef QRS_SELECT_INT_H
#define QRS_SELECT_INT_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "select.h"

/* The candidates at some stage: the elements of view v at or above the
   bound b.  A view is the row itself or a list of some of its logits in
   ascending token order (ids maps list positions to token ids), so the
   tie rule "higher token id first" is "higher view position first". */
struct cset {
  struct qrs__view v;
  const uint32_t *ids;
  struct qrs__bound b;
  double m;                       /* the row's (and the set's) max logit */
};

/* A crossing: the first element, in selection order, at which a running
   sum reaches its target. */
struct hit {
  size_t vpos;                    /* position in the set's view */
  double x;
  double e;                       /* its weight */
  double before;                  /* mass strictly before it */
  double wbefore;                 /* sum of e * d strictly before it */
  size_t rank;                    /* elements strictly before it */
};

enum {
  X_MASS = 0,                     /* sum of e >= t */
  X_ENTROPY = 1,                  /* entropy of the prefix >= t */
};

/* Lists refined down to this size are sorted outright. */
#define SORT_MAX 24
/* Buckets per refinement step. */
#define NBUCKET 64

static inline uint32_t
tok(const struct cset *s, size_t vpos)
{
  return s->ids ? s->ids[vpos] : (uint32_t)vpos;
}

static inline int
reached(int kind, double z, double w, double t)
{
  if (kind == X_MASS)
    return z >= t;
  return z > 0.0 && log(z) - w / z >= t;
}

static inline int
in_bound(const struct qrs__bound *b, double x, size_t i)
{
  return x > b->x || (x == b->x && i >= b->i);
}

/* The larger of two bounds (the intersection of the two sets). */
static inline void
bound_raise(struct qrs__bound *b, double x, size_t i)
{
  if (x > b->x || (x == b->x && i > b->i)) {
    b->x = x;
    b->i = i;
  }
}

/* select_exact.c */

/* Find the crossing in ws's list [0, n) (positions ascending, values in
   lx, weights in le), given the mass / e*d / count of the set elements
   before the whole list.  Returns 0, or 1 when the list is empty. */
int qrs__sel_refine(struct qrs__sel_ws *ws, const struct cset *s, size_t n,
                    double invt, int kind, double t, double before,
                    double wbefore, size_t rank, struct hit *ret);

/* out's token, rank, probability and CDF interval from the crossing h
   of a set of mass z. */
void qrs__sel_finish(const struct cset *s, const struct hit *h, double z,
                     struct qrs__sel_out *out);

/* 1 / T into *ret, or QRS_E_CONFIG_VALUE (a float64 row at a T whose
   inverse overflows). */
int qrs__sel_inv_temp(double T, const struct qrs__view *row, double *ret);

/* The double path in reference order (tfirst: the reference's
   truncate-first order), HF transformers' and llama.cpp's. */
int qrs__sel_reference(struct qrs__sel_ws *ws, const struct qrs__view *row,
                       const struct qrs__scan *scan,
                       const struct qrs__sel_params *p,
                       struct qrs__sel_out *out, int tfirst);
int qrs__sel_hf(struct qrs__sel_ws *ws, const struct qrs__view *row,
                const struct qrs__scan *scan, const struct qrs__sel_params *p,
                struct qrs__sel_out *out);
int qrs__sel_llama(struct qrs__sel_ws *ws, const struct qrs__view *row,
                   const struct qrs__scan *scan,
                   const struct qrs__sel_params *p, struct qrs__sel_out *out);

/* select_fast.c */

/* Whether the fast path is on (qrs__fast_enable()). */
int qrs__sel_fast_on(void);

/* Whether the fast path takes this selection. */
int qrs__sel_fast_eligible(const struct qrs__view *row,
                           const struct qrs__sel_params *p);

/* 0: selected; 2: a decision within the error bound (the double path
   decides); 3: scan NULL and the row has a NaN, +inf or no finite value
   (the caller scans it for the error).  Only for
   qrs__sel_fast_eligible() selections.  scan NULL: the first pass finds
   the max itself, and puts the scan's result into *found (for the
   double path, after a 2). */
int qrs__sel_fast(struct qrs__sel_ws *ws, const struct qrs__view *row,
                  const struct qrs__scan *scan,
                  const struct qrs__sel_params *p, struct qrs__sel_out *out,
                  struct qrs__scan *found);

/* Count a selection's outcome in the fast path's statistics: r 0 the
   float path decided, 2 it handed the decision to the double path, else
   the float path did not apply. */
void qrs__sel_fast_note(int r);

#endif
