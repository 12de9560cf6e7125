/* Token selection: prefix cuts and a CDF search, without sorting.  This
   file holds the workspace, the row check and the dispatch (which path
   takes a selection, and the scans it fuses into a path's first pass);
   select_int.h lists the pieces. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <qrs/error.h>

#include "fthrottle.h"
#include "kernels/moments.h"
#include "select_int.h"

/* The workspace's arrays, each its own allocation of
   (cap / cap_div) * per_cap + add elements: what qrs__sel_ws_init()
   allocates and qrs__sel_ws_done() frees. */
struct ws_array {
  size_t offset;                  /* of the pointer in struct qrs__sel_ws */
  size_t esize;
  size_t per_cap, cap_div, add;
};

#define WS_ARRAY(f, per_cap, cap_div, add) \
  { offsetof(struct qrs__sel_ws, f), \
    sizeof(*((struct qrs__sel_ws *)0)->f), per_cap, cap_div, add }

static const struct ws_array ws_arrays[] = {
  WS_ARRAY(mb, 8, QRS__MOM_SUB, 8),
  WS_ARRAY(lpos, 1, 1, 0),
  WS_ARRAY(lx, 1, 1, 0),
  WS_ARRAY(le, 1, 1, 0),
  WS_ARRAY(cpos, 0, 1, 2 * QRS__SMALL_CAP),
  WS_ARRAY(cx, 0, 1, 2 * QRS__SMALL_CAP),
  WS_ARRAY(kpos, 0, 1, QRS__TOPK_HEAP),
  WS_ARRAY(kx, 0, 1, QRS__TOPK_HEAP),
  WS_ARRAY(hz, 0, 1, QRS__NBUCKET),
  WS_ARRAY(hw, 0, 1, QRS__NBUCKET),
  WS_ARRAY(hpos, 0, 1, QRS__HEAD_CAP),
  WS_ARRAY(hx, 0, 1, QRS__HEAD_CAP),
  WS_ARRAY(he, 0, 1, QRS__HEAD_CAP),
  WS_ARRAY(hk, 0, 1, QRS__HEAD_CAP),
  WS_ARRAY(fpos, 1, 1, 16),
  WS_ARRAY(fx, 1, 1, 16),
  WS_ARRAY(fe, 1, 1, 16),
  WS_ARRAY(fk, 1, 1, 16),
  WS_ARRAY(fxe, 1, 1, 0),
  WS_ARRAY(spos, 1, 1, 16),
  WS_ARRAY(sx, 1, 1, 16),
  WS_ARRAY(soff, 0, 1, QRS__NBUCKET + 1),
  WS_ARRAY(fzx, 0, 1, QRS__NBUCKET),
  WS_ARRAY(fz, 0, 1, QRS__NBUCKET),
  WS_ARRAY(ferr, 0, 1, QRS__NBUCKET),
  WS_ARRAY(fcnt, 0, 1, QRS__NBUCKET),
};

#define N_WS_ARRAYS (sizeof(ws_arrays) / sizeof(ws_arrays[0]))

int
qrs__sel_ws_init(struct qrs__sel_ws *ws, size_t cap)
{
  const struct ws_array *a;
  void *p;
  size_t i;
  int k;

  memset(ws, 0, sizeof(*ws));
  if (cap == 0 || cap > UINT32_MAX)
    return -EINVAL;
  ws->cap = cap;
  ws->ft_start = 1;
  for (k = 0; k < QRS__NFRAC; k++)
    ws->ffrac[k] = -1.0;
  for (i = 0; i < N_WS_ARRAYS; i++) {
    a = &ws_arrays[i];
    p = malloc((cap / a->cap_div * a->per_cap + a->add) * a->esize);
    if (!p) {
      qrs__sel_ws_done(ws);
      return -ENOMEM;
    }
    memcpy((char *)ws + a->offset, &p, sizeof(p));
  }
  return 0;
}

void
qrs__sel_ws_done(struct qrs__sel_ws *ws)
{
  void *p;
  size_t i;

  if (!ws)
    return;
  for (i = 0; i < N_WS_ARRAYS; i++) {
    memcpy(&p, (char *)ws + ws_arrays[i].offset, sizeof(p));
    free(p);
  }
  memset(ws, 0, sizeof(*ws));
}

int
qrs__row_check(const struct qrs__scan *scan, size_t n)
{
  if (n == 0)
    return -EINVAL;
  if (scan->has_nan || scan->has_posinf || scan->max == -INFINITY)
    return QRS_E_LOGITS;
  return 0;
}
static void
reset_out(struct qrs__sel_out *out)
{
  memset(out, 0, sizeof(*out));
  out->top_p_used = NAN;
  out->kept_entropy = NAN;
  out->pre_prob = NAN;
}

static int
select_impl(struct qrs__sel_ws *ws, const struct qrs__view *row,
            const struct qrs__scan *scan, const struct qrs__sel_params *p,
            struct qrs__sel_out *out)
{
  struct qrs__scan sc;
  double invt;
  int r, fast;

  if (row->n > ws->cap || p->T == INFINITY)
    return -EINVAL;
  ws->deep = 0;
  fast = p->T > 0.0 && qrs__sel_fast_eligible(row, p);
  r = 1;
  if (fast && !scan) {
    /* The fast path's pass finds the max (and any NaN / +inf) itself. */
    reset_out(out);
    r = qrs__sel_fast(ws, row, NULL, p, out, &sc);
    if (r != 3)
      scan = &sc;
  }
  if (!scan && p->T > 0.0 && p->nucleus == QRS__NUCLEUS_THROTTLE &&
      qrs__sel_fast_on()) {
    /* So does the throttle's (fthrottle.c). */
    reset_out(out);
    r = qrs__fast_throttle(ws, row, NULL, p, out, &sc);
    if (r == 0 || r == 2)
      scan = &sc;
  }
  ws->kready = 0;
  if (!scan && p->T > 0.0 && p->order != QRS__ORDER_HF && p->top_k > 0 &&
      (unsigned long long)p->top_k < row->n &&
      p->top_k <= QRS__TOPK_HEAP) {
    /* The top-k heap's pass scans the row too (support() takes its
       list). */
    qrs__ktopk_scan(row, (size_t)p->top_k, ws->kpos, ws->kx, &sc);
    ws->kready = (size_t)p->top_k;
    scan = &sc;
  }
  ws->cready = 0;
  if (!scan && p->T > 0.0 && !fast &&
      (p->order == QRS__ORDER_REFERENCE ||
       p->order == QRS__ORDER_TRUNCATE_FIRST) &&
      p->min_p > 0.0 && p->min_p <= 1.0 &&
      !(p->top_k > 0 && (unsigned long long)p->top_k < row->n) &&
      qrs__sel_inv_temp(p->T, row, &invt) == 0) {
    /* min-p's cut (sel_reference's first compaction) in the scan's pass:
       the candidates against the running max, then the exact test. */
    ws->cpinv = p->order == QRS__ORDER_TRUNCATE_FIRST ? 1.0 : invt;
    ws->cpmin = log(p->min_p);
    if (ws->cpmin > QRS__D_UNDERFLOW &&
        qrs__kcollect_scan(row, ws->cpinv, ws->cpmin, ws->cpos, ws->cx,
                           QRS__SMALL_CAP, ws->fpos, ws->fx, &sc,
                           &ws->ccnt)) {
      ws->cready = 1;
      scan = &sc;
    }
  }
  if (!scan) {
    qrs__kscan(row, &sc);
    scan = &sc;
  }
  if (r == 1 || r == 3) {
    r = qrs__row_check(scan, row->n);
    if (r < 0)
      return r;
    reset_out(out);
    if (!(p->T > 0.0)) {
      /* Greedy: the first maximal logit.  (NaN T counts as greedy.) */
      out->greedy = 1;
      out->token = (uint32_t)qrs__kfind(row, scan->max);
      if (out->token >= row->n)
        return QRS_E_INTERNAL;   /* never a token: a bug, not a pick */
      out->prob = 1.0;
      out->cdf_lo = 0.0;
      out->cdf_hi = 1.0;
      out->num_candidates = 1;
      return 0;
    }
    r = fast ? qrs__sel_fast(ws, row, scan, p, out, &sc) : 1;
  }
  if (r == 1 && p->nucleus == QRS__NUCLEUS_THROTTLE &&
      qrs__sel_fast_on())
    r = qrs__fast_throttle(ws, row, scan, p, out, NULL);
  qrs__sel_fast_note(r);
  if (r == 0)
    return 0;
  if (r == 2)
    reset_out(out);
  switch (p->order) {
  case QRS__ORDER_TRUNCATE_FIRST:
    return qrs__sel_reference(ws, row, scan, p, out, 1);
  case QRS__ORDER_HF:
    return qrs__sel_hf(ws, row, scan, p, out);
  case QRS__ORDER_LLAMA:
    return qrs__sel_llama(ws, row, scan, p, out);
  default:
    return qrs__sel_reference(ws, row, scan, p, out, 0);
  }
}

int
qrs__select(struct qrs__sel_ws *ws, const struct qrs__view *row,
            const struct qrs__scan *scan, const struct qrs__sel_params *p,
            struct qrs__sel_out *out)
{
  unsigned fe;
  int r;

  fe = qrs__fpenv_enter();
  r = select_impl(ws, row, scan, p, out);
  qrs__fpenv_leave(fe);
  return r;
}

