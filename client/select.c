/* Token selection: prefix cuts and a CDF search, without sorting. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <qrs/error.h>

#include "fthrottle.h"
#include "moments.h"
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

static uint32_t
tok(const struct cset *s, size_t vpos)
{
  return s->ids ? s->ids[vpos] : (uint32_t)vpos;
}

static int
reached(int kind, double z, double w, double t)
{
  if (kind == X_MASS)
    return z >= t;
  return z > 0.0 && log(z) - w / z >= t;
}

static int
in_bound(const struct qrs__bound *b, double x, size_t i)
{
  return x > b->x || (x == b->x && i >= b->i);
}

/* The larger of two bounds (the intersection of the two sets). */
static void
bound_raise(struct qrs__bound *b, double x, size_t i)
{
  if (x > b->x || (x == b->x && i > b->i)) {
    b->x = x;
    b->i = i;
  }
}

int
qrs__sel_ws_init(struct qrs__sel_ws *ws, size_t cap)
{
  int k;

  memset(ws, 0, sizeof(*ws));
  if (cap == 0 || cap > UINT32_MAX)
    return -EINVAL;
  ws->cap = cap;
  ws->ft_start = 1;
  for (k = 0; k < QRS__NFRAC; k++)
    ws->ffrac[k] = -1.0;
  ws->mb = malloc((cap / QRS__MOM_SUB + 1) * 8 * sizeof(*ws->mb));
  ws->lpos = malloc(cap * sizeof(*ws->lpos));
  ws->lx = malloc(cap * sizeof(*ws->lx));
  ws->le = malloc(cap * sizeof(*ws->le));
  ws->cpos = malloc(2 * QRS__SMALL_CAP * sizeof(*ws->cpos));
  ws->cx = malloc(2 * QRS__SMALL_CAP * sizeof(*ws->cx));
  ws->kpos = malloc(QRS__TOPK_HEAP * sizeof(*ws->kpos));
  ws->kx = malloc(QRS__TOPK_HEAP * sizeof(*ws->kx));
  ws->hz = malloc(QRS__NBUCKET * sizeof(*ws->hz));
  ws->hw = malloc(QRS__NBUCKET * sizeof(*ws->hw));
  ws->hpos = malloc(QRS__HEAD_CAP * sizeof(*ws->hpos));
  ws->hx = malloc(QRS__HEAD_CAP * sizeof(*ws->hx));
  ws->he = malloc(QRS__HEAD_CAP * sizeof(*ws->he));
  ws->hk = malloc(QRS__HEAD_CAP * sizeof(*ws->hk));
  ws->fpos = malloc((cap + 16) * sizeof(*ws->fpos));
  ws->fx = malloc((cap + 16) * sizeof(*ws->fx));
  ws->fe = malloc((cap + 16) * sizeof(*ws->fe));
  ws->fk = malloc((cap + 16) * sizeof(*ws->fk));
  ws->fxe = malloc(cap * sizeof(*ws->fxe));
  ws->spos = malloc((cap + 16) * sizeof(*ws->spos));
  ws->sx = malloc((cap + 16) * sizeof(*ws->sx));
  ws->soff = malloc((QRS__NBUCKET + 1) * sizeof(*ws->soff));
  ws->fzx = malloc(QRS__NBUCKET * sizeof(*ws->fzx));
  ws->fz = malloc(QRS__NBUCKET * sizeof(*ws->fz));
  ws->ferr = malloc(QRS__NBUCKET * sizeof(*ws->ferr));
  ws->fcnt = malloc(QRS__NBUCKET * sizeof(*ws->fcnt));
  if (!ws->fxe || !ws->spos || !ws->sx || !ws->soff || !ws->fzx || !ws->fpos || !ws->fx || !ws->fe || !ws->fk || !ws->fz || !ws->ferr ||
      !ws->fcnt || !ws->lpos || !ws->lx || !ws->le || !ws->cpos || !ws->cx ||
      !ws->kpos || !ws->kx || !ws->hz || !ws->hw || !ws->hpos || !ws->hx ||
      !ws->he || !ws->hk || !ws->mb) {
    qrs__sel_ws_done(ws);
    return -ENOMEM;
  }
  return 0;
}

void
qrs__sel_ws_done(struct qrs__sel_ws *ws)
{
  if (!ws)
    return;
  free(ws->lpos);
  free(ws->lx);
  free(ws->le);
  free(ws->cpos);
  free(ws->cx);
  free(ws->kpos);
  free(ws->kx);
  free(ws->hz);
  free(ws->hw);
  free(ws->hpos);
  free(ws->hx);
  free(ws->he);
  free(ws->hk);
  free(ws->fpos);
  free(ws->fx);
  free(ws->fe);
  free(ws->fk);
  free(ws->fz);
  free(ws->fxe);
  free(ws->spos);
  free(ws->sx);
  free(ws->soff);
  free(ws->fzx);
  free(ws->ferr);
  free(ws->fcnt);
  free(ws->mb);
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

/* Sort list entries [0, n) into selection order (logit descending,
   position descending). */
static void
sort_list(uint32_t *pos, double *x, double *e, size_t n)
{
  size_t i, j;
  uint32_t tp;
  double tx, te;

  for (i = 1; i < n; i++) {
    tp = pos[i];
    tx = x[i];
    te = e ? e[i] : 0.0;
    for (j = i; j > 0; j--) {
      if (x[j - 1] > tx || (x[j - 1] == tx && pos[j - 1] > tp))
        break;
      pos[j] = pos[j - 1];
      x[j] = x[j - 1];
      if (e)
        e[j] = e[j - 1];
    }
    pos[j] = tp;
    x[j] = tx;
    if (e)
      e[j] = te;
  }
}

/* Find the crossing in ws's list [0, n) (positions ascending, values in
   lx, weights in le), given the mass / e*d / count of the set elements
   before the whole list.  Returns 0, or 1 when the list is empty. */
static int
refine(struct qrs__sel_ws *ws, const struct cset *s, size_t n, double invt,
       int kind, double t, double before, double wbefore, size_t rank,
       struct hit *ret)
{
  double bz[NBUCKET], bw[NBUCKET], xmin, xmax, scale, cz, cw, d, e0, d0;
  size_t bc[NBUCKET], i, k, lo, hi, mid;
  int b, sel;

  for (;;) {
    if (n == 0)
      return 1;
    if (n <= SORT_MAX) {
      sort_list(ws->lpos, ws->lx, ws->le, n);
      for (i = 0; i < n; i++) {
        d = (ws->lx[i] - s->m) * invt;
        cz = before + ws->le[i];
        cw = wbefore + ws->le[i] * d;
        if (reached(kind, cz, cw, t) || i == n - 1)
          break;
        before = cz;
        wbefore = cw;
      }
      ret->vpos = ws->lpos[i];
      ret->x = ws->lx[i];
      ret->e = ws->le[i];
      ret->before = before;
      ret->wbefore = wbefore;
      ret->rank = rank + i;
      return 0;
    }
    xmin = xmax = ws->lx[0];
    for (i = 1; i < n; i++) {
      xmin = ws->lx[i] < xmin ? ws->lx[i] : xmin;
      xmax = ws->lx[i] > xmax ? ws->lx[i] : xmax;
    }
    if (xmin == xmax) {
      /* Equal logits, equal weights: the j-th in selection order is the
         (n-1-j)-th in the list.  The smallest j reaching t, by bisection
         (the running sums are monotone). */
      e0 = ws->le[0];
      d0 = (xmin - s->m) * invt;
      lo = 0;
      hi = n - 1;
      while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        if (reached(kind, before + (double)(mid + 1) * e0,
                    wbefore + (double)(mid + 1) * e0 * d0, t))
          hi = mid;
        else
          lo = mid + 1;
      }
      k = n - 1 - lo;
      ret->vpos = ws->lpos[k];
      ret->x = ws->lx[k];
      ret->e = e0;
      ret->before = before + (double)lo * e0;
      ret->wbefore = wbefore + (double)lo * e0 * d0;
      ret->rank = rank + lo;
      return 0;
    }
    scale = (double)NBUCKET / (xmax - xmin);
    if (!isfinite(scale)) {
      /* A range too narrow to split: sort it (only ever a few values). */
      sort_list(ws->lpos, ws->lx, ws->le, n);
      cz = before;
      cw = wbefore;
      for (i = 0; i < n; i++) {
        d = (ws->lx[i] - s->m) * invt;
        if (reached(kind, cz + ws->le[i], cw + ws->le[i] * d, t) ||
            i == n - 1)
          break;
        cz += ws->le[i];
        cw += ws->le[i] * d;
      }
      ret->vpos = ws->lpos[i];
      ret->x = ws->lx[i];
      ret->e = ws->le[i];
      ret->before = cz;
      ret->wbefore = cw;
      ret->rank = rank + i;
      return 0;
    }
    memset(bz, 0, sizeof(bz));
    memset(bw, 0, sizeof(bw));
    memset(bc, 0, sizeof(bc));
    for (i = 0; i < n; i++) {
      b = (int)((xmax - ws->lx[i]) * scale);
      b = b < NBUCKET ? b : NBUCKET - 1;
      bz[b] += ws->le[i];
      bw[b] += ws->le[i] * ((ws->lx[i] - s->m) * invt);
      bc[b]++;
    }
    sel = -1;
    cz = before;
    cw = wbefore;
    for (b = 0; b < NBUCKET; b++) {
      if (!bc[b])
        continue;
      sel = b;
      if (reached(kind, cz + bz[b], cw + bw[b], t))
        break;
      cz += bz[b];
      cw += bw[b];
      rank += bc[b];
    }
    if (b == NBUCKET) {
      /* Rounding kept the list total just short of t: its last bucket. */
      cz -= bz[sel];
      cw -= bw[sel];
      rank -= bc[sel];
    }
    before = cz;
    wbefore = cw;
    k = 0;
    for (i = 0; i < n; i++) {
      b = (int)((xmax - ws->lx[i]) * scale);
      b = b < NBUCKET ? b : NBUCKET - 1;
      if (b != sel)
        continue;
      ws->lpos[k] = ws->lpos[i];
      ws->lx[k] = ws->lx[i];
      ws->le[k] = ws->le[i];
      k++;
    }
    n = k;
  }
}

/* Buckets resolved by a mass pass at first: (x - max) / T above -8.  An
   LM row has nearly all its tokens (and rarely a crossing) below. */
#define HSPLIT 128

/* The set's mass at invt (with the predicate (x - m) * pinv >= pmin), its
   histogram in the workspace. */
static void
measure(struct qrs__sel_ws *ws, const struct cset *s, double invt,
        double pinv, double pmin, unsigned flags, struct qrs__mass *ms)
{
  ms->hz = ws->hz;
  ms->hw = ws->hw;
  ms->hsplit = ws->deep ? QRS__NBUCKET : HSPLIT;
  ms->hcap = QRS__HEAD_CAP;
  ms->hpos = ws->hpos;
  ms->hx = ws->hx;
  ms->he = ws->he;
  ms->hk = ws->hk;
  qrs__kmass(&s->v, s->m, invt, &s->b, pinv, pmin, flags, ms);
  ms->pinv = pinv;
  ms->pmin = pmin;
  ms->flags = flags;
}

/* The crossing of target t in the set s at inverse temperature invt,
   given s's mass pass ms (with the histogram; with W for X_ENTROPY).
   A crossing in the tail resolves the whole histogram first (a second
   pass, which ms then keeps).  Returns 0, or 1 when the set's total
   never reaches t. */
static int
xsearch(struct qrs__sel_ws *ws, const struct cset *s, double invt,
        struct qrs__mass *ms, int kind, double t, struct hit *ret)
{
  double cz, cw, hw;
  size_t n, above, i;
  int b;

  cz = cw = 0.0;
  for (b = 0; b < ms->hsplit; b++) {
    /* e*d sums whenever the pass has them: a mass crossing's wbefore
       gives the kept entropy (throttle bounds, want_entropy). */
    hw = ms->flags & QRS__M_W ? ms->hw[b] : 0.0;
    if (ms->hz[b] > 0.0 && reached(kind, cz + ms->hz[b], cw + hw, t))
      break;
    cz += ms->hz[b];
    cw += hw;
  }
  if (b == ms->hsplit) {
    if (b == QRS__NBUCKET ||
        !reached(kind, cz + ms->tz,
                 cw + (ms->flags & QRS__M_W ? ms->tw : 0.0), t))
      return 1;
    /* The crossing is in the tail: resolve every bucket. */
    ms->hsplit = QRS__NBUCKET;
    qrs__kmass(&s->v, s->m, invt, &s->b, ms->pinv, ms->pmin, ms->flags, ms);
    return xsearch(ws, s, invt, ms, kind, t, ret);
  }
  if (ms->nhead != SIZE_MAX && b < QRS__NBUCKET - 1) {
    /* The bucket's elements are in the head list: no pass over the row.
       (The last bucket can hold subnormal weights, which the list
       lacks.) */
    n = above = 0;
    for (i = 0; i < ms->nhead; i++) {
      if (ms->hk[i] < b) {
        above++;
        continue;
      }
      if (ms->hk[i] != b || !in_bound(&s->b, ms->hx[i], ms->hpos[i]))
        continue;
      ws->lpos[n] = ms->hpos[i];
      ws->lx[n] = ms->hx[i];
      ws->le[n] = ms->he[i];
      n++;
    }
    return refine(ws, s, n, invt, kind, t, cz, cw, above, ret);
  }
  n = qrs__kcollect_bucket(&s->v, s->m, invt, &s->b, b, ws->lpos, ws->lx,
                           &above);
  memcpy(ws->le, ws->lx, n * sizeof(*ws->le));
  qrs__kexp(ws->le, n, s->m, invt);
  return refine(ws, s, n, invt, kind, t, cz, cw, above, ret);
}

/* The last candidate of the set in selection order: the smallest logit
   with a positive weight, lowest position among equals. */
static int
last_candidate(const struct cset *s, double invt, struct hit *ret)
{
  double x, d, best;
  size_t i, bi;

  best = INFINITY;
  bi = s->v.n;
  for (i = 0; i < s->v.n; i++) {
    x = qrs__kload(&s->v, i);
    if (!in_bound(&s->b, x, i) || !(x < best))
      continue;
    d = (x - s->m) * invt;
    if (d < QRS__D_UNDERFLOW || exp(d) <= 0.0)
      continue;
    best = x;
    bi = i;
  }
  if (bi == s->v.n)
    return 1;
  ret->vpos = bi;
  ret->x = best;
  ret->e = best;
  qrs__kexp(&ret->e, 1, s->m, invt);
  return 0;
}

/* The first (lowest id) maximal element of the set; s->v.n when there
   is none (an internal error: the max came from the same row). */
static size_t
argmax_first(const struct cset *s)
{
  size_t i;

  for (i = 0; i < s->v.n; i++)
    if (qrs__kload(&s->v, i) == s->m && in_bound(&s->b, s->m, i))
      return i;
  return s->v.n;
}

/* Lexicographic order for the quickselect of a large top-k. */
static int
above_lex(double xa, uint32_t pa, double xb, uint32_t pb)
{
  return xa > xb || (xa == xb && pa > pb);
}

/* The k-th (0-based) element in selection order of the list [0, n). */
static void
nth_element(uint32_t *pos, double *x, size_t n, size_t k)
{
  size_t lo, hi, i, j, mid;
  double px, tx;
  uint32_t pp, tp;

  lo = 0;
  hi = n - 1;
  while (lo < hi) {
    mid = lo + (hi - lo) / 2;
    /* median of three into mid */
    if (above_lex(x[lo], pos[lo], x[mid], pos[mid])) {
      tx = x[lo]; x[lo] = x[mid]; x[mid] = tx;
      tp = pos[lo]; pos[lo] = pos[mid]; pos[mid] = tp;
    }
    if (above_lex(x[mid], pos[mid], x[hi], pos[hi])) {
      tx = x[mid]; x[mid] = x[hi]; x[hi] = tx;
      tp = pos[mid]; pos[mid] = pos[hi]; pos[hi] = tp;
      if (above_lex(x[lo], pos[lo], x[mid], pos[mid])) {
        tx = x[lo]; x[lo] = x[mid]; x[mid] = tx;
        tp = pos[lo]; pos[lo] = pos[mid]; pos[mid] = tp;
      }
    }
    /* Now x[lo] <= x[mid] <= x[hi] in lexicographic order; partition
       with the pivot so that the larger elements come first. */
    px = x[mid];
    pp = pos[mid];
    i = lo;
    j = hi;
    for (;;) {
      while (above_lex(x[i], pos[i], px, pp))
        i++;
      while (above_lex(px, pp, x[j], pos[j]))
        j--;
      if (i >= j)
        break;
      tx = x[i]; x[i] = x[j]; x[j] = tx;
      tp = pos[i]; pos[i] = pos[j]; pos[j] = tp;
      i++;
      j--;
    }
    if (k <= j)
      hi = j;
    else
      lo = j + 1;
  }
}

/* The support: the whole row, or its top-k.  keep_ties: every element
   equal to the k-th is kept (HF).  Sets *ret_k to the support size. */
static void
support(struct qrs__sel_ws *ws, const struct qrs__view *row,
        const struct qrs__scan *scan, long long top_k, int keep_ties,
        struct cset *s, size_t *ret_k)
{
  size_t n, k, i, cnt;

  n = row->n;
  s->v = *row;
  s->ids = NULL;
  s->b.x = -INFINITY;
  s->b.i = 0;
  s->m = scan->max;
  *ret_k = n;
  if (top_k <= 0 || (unsigned long long)top_k >= n)
    return;
  k = (size_t)top_k;
  if (k <= QRS__TOPK_HEAP && !keep_ties) {
    if (ws->kready != k)
      qrs__ktopk(row, k, ws->kpos, ws->kx);
    ws->kready = 0;
    /* Into position order (insertion sort on position, k <= 1024). */
    for (i = 1; i < k; i++) {
      uint32_t tp = ws->kpos[i];
      double tx = ws->kx[i];
      size_t j = i;

      while (j > 0 && ws->kpos[j - 1] > tp) {
        ws->kpos[j] = ws->kpos[j - 1];
        ws->kx[j] = ws->kx[j - 1];
        j--;
      }
      ws->kpos[j] = tp;
      ws->kx[j] = tx;
    }
    s->v.data = ws->kx;
    s->v.dtype = QRS_DTYPE_F64;
    s->v.n = k;
    s->ids = ws->kpos;
    *ret_k = k;
    return;
  }
  if (k <= QRS__TOPK_HEAP) {
    /* Ties kept: everything at or above the k-th value. */
    qrs__ktopk(row, k, ws->kpos, ws->kx);
    s->b.x = INFINITY;
    for (i = 0; i < k; i++)
      s->b.x = ws->kx[i] < s->b.x ? ws->kx[i] : s->b.x;
  } else {
    /* Large k: the k-th element by quickselect on a copy, then a bound
       on the row. */
    cnt = qrs__kcollect(row, scan->max, 1.0, &s->b, -INFINITY, INFINITY,
                        ws->lpos, ws->lx, ws->cap, NULL);
    nth_element(ws->lpos, ws->lx, cnt, k - 1);
    s->b.x = ws->lx[k - 1];
    s->b.i = keep_ties ? 0 : ws->lpos[k - 1];
  }
  *ret_k = k;
  if (keep_ties)
    *ret_k = qrs__kcollect(row, scan->max, 1.0, &s->b, -INFINITY, INFINITY,
                           NULL, NULL, 0, NULL);
}

/* qrs__kcollect() of the whole row v (max m, pinv > 0, dlo pmin, no upper
   limit, cap QRS__SMALL_CAP; a count above the cap may stop short of the
   total) reading only the sub-blocks whose maxima (the
   moment pass's, ws->mb) reach a float threshold at or below the exact
   cut: (x - m) * pinv >= pmin is monotone in x, so a sub-block whose max
   fails it has no element that passes.  The margin below the cut covers
   the double test's roundings (relative to |m| and |pmin / pinv|, not to
   the cut). */
static size_t
collect_blocks(const struct qrs__sel_ws *ws, const struct qrs__view *v,
               double m, double pinv, double pmin, uint32_t *pos, double *x)
{
  typedef float v4f __attribute__((vector_size(16)));
  typedef int32_t v4i __attribute__((vector_size(16)));
  static const struct qrs__bound all = { -INFINITY, 0 };
  struct qrs__view sv;
  size_t nb, b, e, lo, hi, cnt, c, st, i, esz;
  double t, tl;
  v4f mv, mv1, tv;
  v4i hit;
  uint64_t q[2];
  float tf;
  int l;

  t = m + pmin / pinv;
  tl = t - 1e-6 * (fabs(m) + fabs(pmin / pinv)) - 1e-300;
  tf = (float)tl;
  if ((double)tf > tl)
    tf = nextafterf(tf, -INFINITY);
  for (l = 0; l < 4; l++)
    tv[l] = tf;
  esz = v->dtype == QRS_DTYPE_F32 ? 4 : 2;
  nb = (v->n + QRS__MOM_SUB - 1) / QRS__MOM_SUB;
  cnt = 0;
  for (b = 0; b < nb; b = e) {
    /* The next run of sub-blocks that reach tf. */
    for (; b < nb; b++) {
      memcpy(&mv, ws->mb + b * 8, sizeof(mv));
      memcpy(&mv1, ws->mb + b * 8 + 4, sizeof(mv1));
      hit = (mv >= tv) | (mv1 >= tv);
      memcpy(q, &hit, sizeof(q));
      if (q[0] | q[1])
        break;
    }
    if (b == nb)
      break;
    for (e = b + 1; e < nb; e++) {
      memcpy(&mv, ws->mb + e * 8, sizeof(mv));
      memcpy(&mv1, ws->mb + e * 8 + 4, sizeof(mv1));
      hit = (mv >= tv) | (mv1 >= tv);
      memcpy(q, &hit, sizeof(q));
      if (!(q[0] | q[1]))
        break;
    }
    lo = b * QRS__MOM_SUB;
    hi = e * QRS__MOM_SUB < v->n ? e * QRS__MOM_SUB : v->n;
    sv.data = (const char *)v->data + lo * esz;
    sv.dtype = v->dtype;
    sv.n = hi - lo;
    st = cnt < QRS__SMALL_CAP ? cnt : QRS__SMALL_CAP;
    c = qrs__kcollect(&sv, m, pinv, &all, pmin, INFINITY, pos + st, x + st,
                      QRS__SMALL_CAP - st, NULL);
    for (i = 0; i < c && st + i < QRS__SMALL_CAP; i++)
      pos[st + i] += (uint32_t)lo;
    cnt += c;
    if (cnt > QRS__SMALL_CAP)
      break;                    /* too many: the caller only needs that */
  }
  return cnt;
}

/* Replace the set by the list of its elements with (x - m) * pinv >= pmin
   (into buffer slot 0 or 1) when they are at most QRS__SMALL_CAP.
   Returns how many there are, or SIZE_MAX (set unchanged) when more. */
static size_t
compact(struct qrs__sel_ws *ws, struct cset *s, double pinv, double pmin,
        int slot)
{
  uint32_t *pos;
  double *x;
  size_t cnt, i;

  pos = ws->cpos + (size_t)slot * QRS__SMALL_CAP;
  x = ws->cx + (size_t)slot * QRS__SMALL_CAP;
  if (slot == 0 && ws->cready && !s->ids && s->b.x == -INFINITY &&
      s->b.i == 0 && pinv == ws->cpinv && pmin == ws->cpmin)
    cnt = ws->ccnt;             /* the scan's pass collected them */
  else if (slot == 0 && ws->mb_ready && s->v.data == ws->mb_data &&
           !s->ids && s->b.x == -INFINITY && s->b.i == 0 && pinv > 0.0 &&
           s->v.dtype != QRS_DTYPE_F64)
    cnt = collect_blocks(ws, &s->v, s->m, pinv, pmin, pos, x);
  else
    cnt = qrs__kcollect(&s->v, s->m, pinv, &s->b, pmin, INFINITY, pos, x,
                        QRS__SMALL_CAP, NULL);
  ws->cready = 0;
  if (cnt > QRS__SMALL_CAP)
    return SIZE_MAX;
  for (i = 0; i < cnt; i++)
    pos[i] = tok(s, pos[i]);
  s->v.data = x;
  s->v.dtype = QRS_DTYPE_F64;
  s->v.n = cnt;
  s->ids = pos;
  s->b.x = -INFINITY;
  s->b.i = 0;
  return cnt;
}

/* Cut the set to its elements with (x - m) * pinv >= pmin and measure it
   at invt: compacted when small, else by a predicate pass. */
static void
cut_measure(struct qrs__sel_ws *ws, struct cset *s, double pinv,
            double pmin, int slot, double invt, unsigned flags,
            struct qrs__mass *ms)
{
  /* A cut at the underflow limit keeps nearly everything: not worth a
     compaction attempt. */
  if (pmin > QRS__D_UNDERFLOW &&
      compact(ws, s, pinv, pmin, slot) != SIZE_MAX)
    pmin = -INFINITY;
  measure(ws, s, invt, pinv, pmin, flags, ms);
  if (pmin > -INFINITY)
    bound_raise(&s->b, ms->xmin, 0);
}

static void
finish(const struct cset *s, const struct hit *h, double z,
       struct qrs__sel_out *out)
{
  out->token = tok(s, h->vpos);
  out->rank = (uint32_t)h->rank;
  out->prob = h->e / z;
  out->cdf_lo = h->before / z;
  out->cdf_hi = (h->before + h->e) / z;
}

static int
singleton(const struct cset *s, struct qrs__sel_out *out)
{
  size_t i;

  i = argmax_first(s);
  if (i >= s->v.n)
    return QRS_E_INTERNAL;
  out->token = tok(s, i);
  out->rank = 0;
  out->prob = 1.0;
  out->cdf_lo = 0.0;
  out->cdf_hi = 1.0;
  out->num_candidates = 1;
  out->eff_top_p = out->eff_min_p = 1;
  return 0;
}

/* The CDF search over the final set: target u * z.  cut: the nucleus
   crossing (the last candidate), or NULL. */
static int
cdf(struct qrs__sel_ws *ws, const struct cset *s, double invt,
    struct qrs__mass *ms, double u, double z, size_t ncand,
    const struct hit *cut, struct qrs__sel_out *out)
{
  struct hit h;

  if (ncand == 0)
    return QRS_E_NO_CANDIDATES;
  if (xsearch(ws, s, invt, ms, X_MASS, u * z, &h) != 0) {
    /* u above every prefix sum (u >= 1, NaN, or rounding): the last
       candidate. */
    if (cut) {
      h = *cut;
    } else {
      if (last_candidate(s, invt, &h) != 0)
        return QRS_E_NO_CANDIDATES;
      h.before = z - h.e;
      h.wbefore = 0.0;
    }
    h.rank = ncand - 1;
  }
  out->num_candidates = (uint32_t)ncand;
  finish(s, &h, z, out);
  return 0;
}

/* Mass and e*d of the prefix through h (incl) or before it (excl). */
static double
hz(const struct hit *h, int incl)
{
  return incl ? h->before + h->e : h->before;
}

static double
hh(const struct hit *h, double m, double invt, int incl)
{
  double z, w;

  z = hz(h, incl);
  w = incl ? h->wbefore + h->e * ((h->x - m) * invt) : h->wbefore;
  return z > 0.0 ? log(z) - w / z : 0.0;
}

/* Entropy throttle: the prefix whose entropy is closest to the target,
   with its mass fraction in [pmin, pmax] (the mass bounds are searched
   only when the entropy's choice breaks them).  Sets the cut in *ret
   (rank SIZE_MAX: no cut element to remember) and the bound; returns the
   prefix length. */
static size_t
throttle(struct qrs__sel_ws *ws, struct cset *s, double invt,
         struct qrs__mass *ms, const struct qrs__sel_params *p,
         size_t nall, struct hit *ret, double *ret_z, double *ret_h)
{
  struct hit h;
  double z, ztot, wtot;
  size_t len;
  int incl;

  ztot = ms->z;
  wtot = ms->w;
  incl = 1;
  if (xsearch(ws, s, invt, ms, X_ENTROPY, p->thr_target, &h) != 0) {
    /* Even the whole set is below the target: keep everything allowed. */
    h.rank = SIZE_MAX;
    len = nall;
    z = ztot;
  } else {
    if (h.rank > 0 && fabs(hh(&h, s->m, invt, 0) - p->thr_target) <
                          fabs(hh(&h, s->m, invt, 1) - p->thr_target))
      incl = 0;
    len = incl ? h.rank + 1 : h.rank;
    z = hz(&h, incl);
  }
  if (z < p->thr_pmin * ztot) {
    if (xsearch(ws, s, invt, ms, X_MASS, p->thr_pmin * ztot, &h) == 0) {
      incl = 1;
      len = h.rank + 1;
      z = hz(&h, 1);
    }
  } else if (z > p->thr_pmax * ztot) {
    if (xsearch(ws, s, invt, ms, X_MASS, p->thr_pmax * ztot, &h) == 0) {
      incl = 1;
      len = h.rank + 1;
      z = hz(&h, 1);
    }
  }
  *ret_z = z;
  ret->rank = SIZE_MAX;
  if (h.rank == SIZE_MAX) {
    *ret_h = ztot > 0.0 ? log(ztot) - wtot / ztot : 0.0;
    return len;   /* keep everything: no cut */
  }
  *ret_h = hh(&h, s->m, invt, incl);
  if (incl) {
    bound_raise(&s->b, h.x, h.vpos);
    *ret = h;
  } else {
    /* The cut is the element before h: the bound (everything above h)
       and its mass are all the CDF search needs. */
    bound_raise(&s->b, h.x, h.vpos + 1);
  }
  return len;
}

/* 1 / T for the selection.  Below T = 2^-1024, 1 / T overflows (and
   (x - max) * inf is NaN at the max): for float32 and 16-bit rows every
   positive logit gap is at least 2^-149, so every weight but the max's is
   exactly 0 at T and at 1 / T = DBL_MAX alike, and every logit threshold
   cuts the same elements; float64 rows can hold gaps small enough to
   matter, so there such a T is QRS_E_CONFIG_VALUE, never a guess. */
static int
inv_temp(double T, const struct qrs__view *row, double *ret)
{
  double invt;

  if (T == 1.0) {
    *ret = 1.0;
    return 0;
  }
  invt = 1.0 / T;
  if (isfinite(invt)) {
    *ret = invt;
    return 0;
  }
  if (row->dtype != QRS_DTYPE_F64) {
    *ret = DBL_MAX;
    return 0;
  }
  return QRS_E_CONFIG_VALUE;
}

/* Reference order (and the reference's truncate-first order). */
static int
sel_reference(struct qrs__sel_ws *ws, const struct qrs__view *row,
              const struct qrs__scan *scan, const struct qrs__sel_params *p,
              struct qrs__sel_out *out, int tfirst)
{
  struct cset s;
  struct qrs__mass ms;
  struct hit cut, *cutp;
  double invt, pinv, pmin, z, theta, zall, kh, zpre;
  size_t eff_k, n_minp, n_eff, ncand, nsup;
  unsigned flags;
  int has_minp, nucleus, r;

  support(ws, row, scan, p->top_k, 0, &s, &eff_k);
  out->eff_top_k = eff_k;
  r = inv_temp(p->T, row, &invt);
  if (r < 0)
    return r;
  has_minp = p->min_p > 0.0;
  pinv = tfirst ? 1.0 : invt;
  if (has_minp)
    pmin = log(p->min_p);
  else
    pmin = tfirst ? QRS__D_UNDERFLOW : -INFINITY;
  if (has_minp && pmin > 0.0) {
    /* min_p > 1: nothing reaches it; the reference keeps the argmax. */
    return singleton(&s, out);
  }
  nucleus = !(p->top_p >= 1.0) || p->nucleus != QRS__NUCLEUS_TOP_P;
  flags = QRS__M_HIST;
  if (p->want_entropy || p->nucleus == QRS__NUCLEUS_THROTTLE)
    flags |= QRS__M_W;
  cut_measure(ws, &s, pinv, pmin, 0, invt, flags, &ms);
  n_minp = has_minp || tfirst ? ms.n_in : ms.nz;
  out->eff_min_p = n_minp;
  z = ms.z;
  ncand = tfirst ? ms.nz : n_minp;
  n_eff = ncand;
  cutp = NULL;
  out->top_p_used = NAN;
  zpre = z;
  if (p->nucleus == QRS__NUCLEUS_MIROSTAT) {
    /* Keep p >= 2^-mu, i.e. d >= ln Z - mu ln 2 (at least the top). */
    theta = log(z) - p->mu * M_LN2;
    if (theta > 0.0) {
      r = singleton(&s, out);
      if (r < 0)
        return r;
      out->eff_min_p = n_minp;
      out->top_p_used = 1.0 / z;
      out->pre_prob = 1.0 / z;
      return 0;
    }
    cut_measure(ws, &s, invt, theta, 1, invt, flags, &ms);
    out->top_p_used = ms.z / z;
    zpre = z;
    z = ms.z;
    ncand = n_eff = ms.n_in;
    nucleus = !(p->top_p >= 1.0);
  }
  nsup = tfirst ? row->n : eff_k;
  if (p->nucleus == QRS__NUCLEUS_THROTTLE) {
    zall = z;
    n_eff = throttle(ws, &s, invt, &ms, p, ncand, &cut, &z, &kh);
    out->top_p_used = z / zall;
    ncand = n_eff;
    cutp = cut.rank == SIZE_MAX ? NULL : &cut;
    out->kept_entropy = kh;
  } else if (nucleus) {
    r = xsearch(ws, &s, invt, &ms, X_MASS, p->top_p * z, &cut);
    if (r == 0) {
      bound_raise(&s.b, cut.x, cut.vpos);
      n_eff = ncand = cut.rank + 1;
      z = hz(&cut, 1);
      cutp = &cut;
      if (p->want_entropy)
        out->kept_entropy = hh(&cut, s.m, invt, 1);
    } else {
      /* Never reached (top_p NaN, or rounding): every support token. */
      n_eff = nsup;
      if (p->want_entropy)
        out->kept_entropy = z > 0.0 ? log(z) - ms.w / z : 0.0;
    }
    if (p->nucleus == QRS__NUCLEUS_TOP_P)
      out->top_p_used = p->top_p;
  } else if (p->want_entropy) {
    out->kept_entropy = z > 0.0 ? log(z) - ms.w / z : 0.0;
  }
  out->eff_top_p = n_eff;
  if (n_eff == 0)
    return QRS_E_NO_CANDIDATES;
  r = cdf(ws, &s, invt, &ms, p->u, z, ncand, cutp, out);
  if (r == 0 && p->nucleus == QRS__NUCLEUS_MIROSTAT)
    out->pre_prob = out->prob * z / zpre;
  return r;
}

/* The top element in selection order: the highest position holding the
   max (HF and llama.cpp keep it when min-p removes everything).
   QRS_E_INTERNAL when there is none. */
static int
top_element(const struct cset *s, struct qrs__sel_out *out)
{
  size_t i;

  for (i = s->v.n; i-- > 0;)
    if (qrs__kload(&s->v, i) == s->m) {
      out->token = tok(s, i);
      return 0;
    }
  return QRS_E_INTERNAL;
}

/* HF transformers: temperature, top-k (ties with the k-th kept), top-p,
   then min-p, all at T. */
static int
sel_hf(struct qrs__sel_ws *ws, const struct qrs__view *row,
       const struct qrs__scan *scan, const struct qrs__sel_params *p,
       struct qrs__sel_out *out)
{
  struct cset s;
  struct qrs__mass ms;
  struct hit cut, *cutp;
  double invt, z, pmin;
  size_t eff_k, ncand;
  int r;

  support(ws, row, scan, p->top_k, 1, &s, &eff_k);
  out->eff_top_k = eff_k;
  r = inv_temp(p->T, row, &invt);
  if (r < 0)
    return r;
  pmin = p->min_p > 0.0 ? log(p->min_p) : -INFINITY;
  if (pmin > 0.0) {
    /* Nothing reaches it: HF keeps one token, the most probable. */
    r = singleton(&s, out);
    return r < 0 ? r : top_element(&s, out);
  }
  measure(ws, &s, invt, 1.0, -INFINITY, QRS__M_HIST, &ms);
  z = ms.z;
  ncand = ms.nz;
  cutp = NULL;
  if (!(p->top_p >= 1.0) &&
      xsearch(ws, &s, invt, &ms, X_MASS, p->top_p * z, &cut) == 0) {
    bound_raise(&s.b, cut.x, cut.vpos);
    ncand = cut.rank + 1;
    z = hz(&cut, 1);
    cutp = &cut;
  }
  out->eff_top_p = ncand;
  out->eff_min_p = ncand;
  if (pmin > -INFINITY) {
    /* min-p relative to the max, which top-p never removes: a second
       prefix; the pass over both gives the final set. */
    measure(ws, &s, invt, invt, pmin, QRS__M_HIST, &ms);
    bound_raise(&s.b, ms.xmin, 0);
    if (ms.n_in < ncand)
      cutp = NULL;
    z = ms.z;
    ncand = ms.n_in;
    out->eff_min_p = ncand;
  }
  return cdf(ws, &s, invt, &ms, p->u, z, ncand, cutp, out);
}

/* llama.cpp's default chain: top-k, then top-p and min-p on the T = 1
   distribution, temperature last. */
static int
sel_llama(struct qrs__sel_ws *ws, const struct qrs__view *row,
          const struct qrs__scan *scan, const struct qrs__sel_params *p,
          struct qrs__sel_out *out)
{
  struct cset s;
  struct qrs__mass ms;
  struct hit cut;
  double invt, pmin;
  size_t eff_k;
  int r;

  support(ws, row, scan, p->top_k, 0, &s, &eff_k);
  out->eff_top_k = eff_k;
  r = inv_temp(p->T, row, &invt);
  if (r < 0)
    return r;
  pmin = p->min_p > 0.0 ? log(p->min_p) : -INFINITY;
  if (pmin > 0.0) {
    r = singleton(&s, out);
    return r < 0 ? r : top_element(&s, out);
  }
  out->eff_top_p = 0;
  if (!(p->top_p >= 1.0)) {
    measure(ws, &s, 1.0, 1.0, -INFINITY, QRS__M_HIST, &ms);
    out->eff_top_p = ms.nz;
    if (xsearch(ws, &s, 1.0, &ms, X_MASS, p->top_p * ms.z, &cut) == 0) {
      bound_raise(&s.b, cut.x, cut.vpos);
      out->eff_top_p = cut.rank + 1;
    }
  }
  /* min-p (a prefix too) and then the temperature, over what is left. */
  cut_measure(ws, &s, 1.0, pmin, 0, invt, QRS__M_HIST, &ms);
  out->eff_min_p = ms.nz;
  if (!out->eff_top_p)
    out->eff_top_p = ms.nz;
  return cdf(ws, &s, invt, &ms, p->u, ms.z, ms.nz, NULL, out);
}

/* ---- the float fast path ----

   Reference order, plain top-p or none, no top-k / min-p (those are
   logit cuts the double path already does at read speed), float32 and
   16-bit rows.  Without a scan, one read of the row (qrs__kgmax) gives
   the max and the group maxima first.  One float pass (qrs__kfpass)
   gives Z with an error bound E and the head list (d > -8 or -10; band
   passes in logit space add the ladder's next bands when needed),
   bucketed by 1/16 of d and put in bucket order.  Each crossing (top-p
   at p Z, then u Z_nucleus) is placed in one bucket by the float sums;
   the buckets up to it get their exact double weights (the double
   path's own exp) and the crossing's bucket is ordered by refine().  The
   decision is certified when the crossing element is the same at both
   ends of the target's uncertainty (the bound of the float rest, and
   4e-11 Z for the double sums' rounding).  Otherwise it is retried once
   with the whole head exact and the tail exact (at most half the row)
   or summed again; then the double path decides (the exact
   resolution). */

#define FAST_MIN_N 256
/* The head ladder: d > -8 (or -10: fast_sparse_head()), then bands
   down to -12, -14, -16 and -24 (the last only when no group went
   unread: FAST_DSKIP lies above it).  A broad row's crossing at u near
   1 lies near -14: the band to -14 holds half the elements the band to
   -16 would. */
#define FAST_RUNGS 5
static const float fast_dhead_deep[FAST_RUNGS] = { -10.0f, -12.0f, -14.0f,
                                                   -16.0f, -24.0f };
static const float fast_dhead_std[FAST_RUNGS] = { -8.0f, -12.0f, -14.0f,
                                                  -16.0f, -24.0f };
#define FAST_NB QRS__FP_NB
/* Relative bound of the double sums' rounding (either path). */
#define FAST_DROUND 4e-11
/* With a nucleus and the max known (the row scanned: no NaN), the pass
   does not read the groups of 64 values whose max lies below d = -20:
   their mass (at most 64 e^-20 = 1.3e-7 of the max's weight per group)
   enters Z as a bound.  At a low temperature (edt's) most of an LM row
   lies there. */
#define FAST_DSKIP (-20.0f)

static int fast_on = 1;
static struct qrs__fast_stats fstats;

void
qrs__fast_enable(int on)
{
  __atomic_store_n(&fast_on, on, __ATOMIC_RELAXED);
}

void
qrs__fast_stats_get(struct qrs__fast_stats *ret)
{
  ret->fast = __atomic_load_n(&fstats.fast, __ATOMIC_RELAXED);
  ret->resolved = __atomic_load_n(&fstats.resolved, __ATOMIC_RELAXED);
  ret->ineligible = __atomic_load_n(&fstats.ineligible, __ATOMIC_RELAXED);
  ret->bands = __atomic_load_n(&fstats.bands, __ATOMIC_RELAXED);
  ret->skipped = __atomic_load_n(&fstats.skipped, __ATOMIC_RELAXED);
  ret->recounts = __atomic_load_n(&fstats.recounts, __ATOMIC_RELAXED);
  ret->deep_heads = __atomic_load_n(&fstats.deep_heads, __ATOMIC_RELAXED);
  ret->rehead = __atomic_load_n(&fstats.rehead, __ATOMIC_RELAXED);
  ret->exact_tails = __atomic_load_n(&fstats.exact_tails, __ATOMIC_RELAXED);
}

/* The head's float weights from index i0 to nh into the bucket sums fz
   and counts fcnt (two interleaved sets: consecutive elements of one
   bucket, as in flat rows, would otherwise wait on each other's
   store). */
static void
fast_hist(struct qrs__sel_ws *ws, size_t i0, size_t nh)
{
  double z2[FAST_NB];
  size_t c2[FAST_NB], i;
  const int32_t *fk = ws->fk;
  const float *fe = ws->fe;
  double *fz = ws->fz;
  size_t *fcnt = ws->fcnt;
  int k;

  memset(z2, 0, sizeof(z2));
  memset(c2, 0, sizeof(c2));
  for (i = i0; i + 2 <= nh; i += 2) {
    fz[fk[i]] += fe[i];
    fcnt[fk[i]]++;
    z2[fk[i + 1]] += fe[i + 1];
    c2[fk[i + 1]]++;
  }
  if (i < nh) {
    fz[fk[i]] += fe[i];
    fcnt[fk[i]]++;
  }
  for (k = 0; k < FAST_NB; k++) {
    fz[k] += z2[k];
    fcnt[k] += c2[k];
  }
}

/* Each bucket's start in spos / sx (soff, from the counts fcnt), and
   into cur for fast_sort(). */
static void
fast_offsets(struct qrs__sel_ws *ws, size_t *cur)
{
  int k;

  ws->soff[0] = 0;
  for (k = 0; k < FAST_NB; k++) {
    ws->soff[k + 1] = ws->soff[k] + ws->fcnt[k];
    cur[k] = ws->soff[k];
  }
}

/* The list entries [i0, i1) (positions fpos, values fx, keys fk) into
   spos / sx in bucket order (a counting sort: the order within a bucket
   kept, so positions ascend in each); cur: each bucket's next slot
   (advanced). */
static void
fast_sort(struct qrs__sel_ws *ws, size_t i0, size_t i1, size_t *cur)
{
  const uint32_t *fpos = ws->fpos;
  const float *fx = ws->fx;
  const int32_t *fk = ws->fk;
  uint32_t *spos = ws->spos;
  float *sx = ws->sx;
  size_t i, d;

  for (i = i0; i < i1; i++) {
    d = cur[fk[i]]++;
    spos[d] = fpos[i];
    sx[d] = fx[i];
  }
}

/* Exact weights for the sorted entries of buckets b0 .. b1 (the oracle's
   own exponential), and their bucket sums fzx. */
static void
fast_exact(struct qrs__sel_ws *ws, int b0, int b1, double m, double invt)
{
  size_t i, i0 = ws->soff[b0], i1 = ws->soff[b1 + 1];
  double z;
  int b;

  for (i = i0; i < i1; i++)
    ws->fxe[i] = ws->sx[i];
  qrs__kexp(ws->fxe + i0, i1 - i0, m, invt);
  for (b = b0; b <= b1; b++) {
    for (i = ws->soff[b], z = 0.0; i < ws->soff[b + 1]; i++)
      z += ws->fxe[i];
    ws->fzx[b] = z;
  }
}

/* The elements of bucket b (within the bound lim when given) into the
   search list with their exact weights.  Returns how many. */
static size_t
fast_gather(struct qrs__sel_ws *ws, int b, const struct qrs__bound *lim)
{
  size_t i, k;

  for (i = ws->soff[b], k = 0; i < ws->soff[b + 1]; i++) {
    if (lim && !in_bound(lim, ws->sx[i], ws->spos[i]))
      continue;
    ws->lpos[k] = ws->spos[i];
    ws->lx[k] = ws->sx[i];
    ws->le[k] = ws->fxe[i];
    k++;
  }
  return k;
}

/* The crossing of target t, known to within +-mt, among the exact
   buckets 0 .. bmax (within lim when given, lim in bucket blim).  Returns
   0 with the hit, or 1 when the crossing is not certain (or beyond the
   exact buckets). */
static int
fast_cross(struct qrs__sel_ws *ws, const struct cset *s, double invt,
           int bmax, double t, double mt,
           const struct qrs__bound *lim, int blim, struct hit *ret)
{
  struct hit h;
  double cb, dlo, dhi, tot;
  size_t rank, k, i;
  int b;

  cb = 0.0;
  rank = 0;
  for (b = 0; b <= bmax; b++) {
    if (lim && b > blim)
      return 1;
    if (!ws->fcnt[b])
      continue;
    if (cb + ws->fzx[b] >= t)
      break;
    cb += ws->fzx[b];
    rank += ws->fcnt[b];
  }
  if (b > bmax)
    return 1;
  dlo = t - mt - cb;
  dhi = t + mt - cb;
  if (!(dlo > 0.0))
    return 1;
  k = fast_gather(ws, b, lim && b == blim ? lim : NULL);
  tot = 0.0;
  for (i = 0; i < k; i++)
    tot += ws->le[i];
  if (k == 0 || !(tot * (1.0 - 1e-14) >= dhi))
    return 1;
  /* The first element whose running mass reaches dlo; it is also the
     first to reach dhi when its own weight carries the sum past dhi
     (every element before it stops short of dlo <= dhi). */
  if (refine(ws, s, k, invt, X_MASS, dlo, 0.0, 0.0, 0, &h) != 0 ||
      !(h.before < dlo && h.before + h.e >= dhi))
    return 1;
  *ret = h;
  ret->before += cb;
  ret->rank += rank;
  return 0;
}

/* The head bucket of a float value (as the float pass's d). */
static int
fast_key(float x, float mf, float invf)
{
  float t = -((x - mf) * invf) * 16.0f;

  return t < (float)(FAST_NB - 1) ? (int)t : FAST_NB - 1;
}

/* Whether the fast path takes this selection. */
static int
fast_eligible(const struct qrs__view *row, const struct qrs__sel_params *p)
{
  return __atomic_load_n(&fast_on, __ATOMIC_RELAXED) &&
         row->dtype != QRS_DTYPE_F64 && row->n >= FAST_MIN_N &&
         p->order == QRS__ORDER_REFERENCE &&
         p->nucleus == QRS__NUCLEUS_TOP_P &&
         !(p->top_k > 0 && (unsigned long long)p->top_k < row->n) &&
         !(p->min_p > 0.0) && !p->want_entropy && p->T >= 0.01 &&
         p->T <= 100.0 && p->u > 0.0 && p->u < 1.0 && p->top_p > 0.0;
}

/* Whether a nucleus's first head may start at d = -10 (-8 otherwise):
   when few of the row's lane maxima lie above it (a sample of every 8th
   group), that head stays small and a broad row's cut (near d = -10)
   needs no band pass; a flat row's would hold most of the row. */
static int
fast_sparse_head(const float *gm, size_t n, float mf, float invf)
{
  size_t g, ng, cnt, all;
  int l;

  ng = n / QRS__MOM_SUB;
  cnt = all = 0;
  for (g = 0; g < ng; g += 8) {
    for (l = 0; l < 8; l++)
      cnt += (gm[g * 8 + (size_t)l] - mf) * invf > -10.0f;
    all += 8;
  }
  return cnt * 4 <= all;
}

/* The ladder's rung to start at: the first whose boundary the previous
   selection's row had at least the target's mass above (with a margin),
   or one past the deepest it measured when none had; never below -16
   (groups below FAST_DSKIP may go unread).  0 without a history. */
static int
fast_start_rung(const struct qrs__sel_ws *ws, const float *dhead,
                double target)
{
  int r, k, last;

  last = -1;
  for (r = 0; r < FAST_RUNGS && dhead[r] >= -16.0f; r++) {
    k = (int)(-dhead[r] - 8.0f) / 2;
    if (ws->ffrac[k] < 0.0)
      break;
    if (ws->ffrac[k] >= target + 0.002)
      return r;
    last = r;
  }
  if (last < 0)
    return 0;
  return last + 1 < FAST_RUNGS && dhead[last + 1] >= -16.0f ? last + 1
                                                              : last;
}

/* This selection's mass fractions above the boundaries its head reached
   (head bucket sums fz over the float Z), for the next one. */
static void
fast_note_fracs(struct qrs__sel_ws *ws, float dlast, double z)
{
  double cum;
  int k, b, kb;

  cum = 0.0;
  b = 0;
  for (k = 0; k < QRS__NFRAC; k++) {
    kb = 16 * (8 + 2 * k);            /* first bucket below -8 - 2k */
    if ((float)-(8 + 2 * k) < dlast || !(z > 0.0)) {
      ws->ffrac[k] = -1.0;
      continue;
    }
    for (; b < kb; b++)
      cum += ws->fz[b];
    ws->ffrac[k] = cum / z;
  }
}

/* The decisions on the exact buckets 0 .. bmax with the float rest
   (z the whole mass, rerr the rest's bound): the nucleus's cut (top-p
   < 1: ncand, zn its exact mass) and u's crossing.  0 with the hit, or
   1 when one of them does not certify. */
static int
fast_decide(struct qrs__sel_ws *ws, const struct cset *s,
            const struct qrs__sel_params *p, int bmax, float mf,
            float invf, double invt, double z, double rerr, struct hit *h,
            double *zn, size_t *ncand)
{
  struct qrs__bound cb;
  struct hit cut;
  double mz = FAST_DROUND * z;

  if (p->top_p < 1.0) {
    if (fast_cross(ws, s, invt, bmax, p->top_p * z,
                   p->top_p * rerr + mz, NULL, 0, &cut) != 0)
      return 1;
    *ncand = cut.rank + 1;
    *zn = cut.before + cut.e;     /* exact weights only */
    cb.x = cut.x;
    cb.i = cut.vpos;
    return fast_cross(ws, s, invt, bmax, p->u * *zn, 2.0 * mz, &cb,
                      fast_key((float)cut.x, mf, invf), h);
  }
  *zn = z;
  return fast_cross(ws, s, invt, bmax, p->u * z, p->u * rerr + mz, NULL,
                    0, h);
}

/* 0: selected; 2: a decision within the error bound (the double path
   decides); 3: scan NULL and the row has a NaN, +inf or no finite value
   (the caller scans it for the error).  Only for fast_eligible()
   selections.  scan NULL: the first pass finds the max itself, and puts
   the scan's result into *found (for the double path, after a 2). */
static int
fast_select(struct qrs__sel_ws *ws, const struct qrs__view *row,
            const struct qrs__scan *scan, const struct qrs__sel_params *p,
            struct qrs__sel_out *out, struct qrs__scan *found)
{
  struct qrs__fpass fp;
  struct cset s;
  struct hit h;
  double invt, z, ez, zn, tf, cum, zx, rz, rerr, mx, eb, dsh, bz, bzd, c1;
  float mf, invf, lo;
  size_t nh, nt, i, nz, ncand, cur[FAST_NB];
  int k, k0, bmax, rung, start, known, recount, exact_tail, gm_ok;
  const float *fast_dhead;

  invt = p->T == 1.0 ? 1.0 : 1.0 / p->T;
  mf = scan ? (float)scan->max : NAN;
  invf = (float)invt;
  lo = ws->mb_min;
  /* ws->mb holds this row's group maxima: the moment pass's, or (AVX2)
     the first read's below. */
  gm_ok = scan && ws->mb_ready && ws->mb_data == row->data;
  if (!scan) {
    /* One read of the row first: its max, min and group maxima.  The
       pass then knows its max (the head against it alone, no running
       max's stale entries) and reads each block once, skipping the
       groups a nucleus leaves unread. */
    gm_ok = qrs__kgmax(row, ws->mb, &mf, &lo, &k) > 0;
    if (k || mf == INFINITY || mf == -INFINITY)
      return 3;
    found->max = mf;
    found->has_nan = found->has_posinf = 0;
  }
  /* The ladder: a head down to d = -8 (-10) first (an LM row's nucleus
     and most of its mass), then the bands down to -12, -14, -16 and -24
     when the head's mass falls short of the first crossing; the first
     pass may start deeper (fast_start_rung()). */
  known = !scan || (ws->mb_ready && ws->mb_data == row->data);
  fast_dhead = fast_dhead_std;
  if (p->top_p < 1.0 && gm_ok &&
      fast_sparse_head(ws->mb, row->n, mf, invf)) {
    fast_dhead = fast_dhead_deep;
    __atomic_fetch_add(&fstats.deep_heads, 1, __ATOMIC_RELAXED);
  }
  start = fast_start_rung(ws, fast_dhead,
                          p->top_p < 1.0 ? p->top_p : p->u);
  nh = qrs__kfpass(row, mf, invf, invt, fast_dhead[start], ws->fpos, ws->fx,
                   ws->fe, ws->fk, &fp, known ? ws->mb : NULL, lo,
                   known ? NULL : ws->mb,
                   p->top_p < 1.0 ? FAST_DSKIP : -INFINITY);
  if (fp.nskip)
    __atomic_fetch_add(&fstats.skipped, fp.nskip, __ATOMIC_RELAXED);
  /* At T = 1 exactly, d = x - m carries one rounding: C1U. */
  c1 = invt == 1.0 ? QRS__FP_C1U : QRS__FP_C1;
  fp.err += (QRS__FP_C1 - c1) * fp.w;
  mf = fp.max;
  if (fp.cnt_a != fp.cnt_b)
    return 2;                   /* weights at the underflow limit */
  nz = fp.cnt_a;
  memset(ws->fz, 0, FAST_NB * sizeof(*ws->fz));
  memset(ws->fcnt, 0, FAST_NB * sizeof(*ws->fcnt));
  for (rung = start, i = 0;; rung++) {
    fast_hist(ws, i, nh);
    i = nh;
    /* z: the float Z (the pass's sum outside the head, the head's bucket
       sums), ez its error bound (a bucket's |d| is at most (k + 1) / 16;
       the tail's bound fp.err still covers the float partial sums of the
       elements a band moved to the head); weights below FEXP_MIN count
       as 0: at most 1.7e-38 each. */
    z = fp.z;
    ez = fp.err;
    for (k = 0; k < FAST_NB; k++) {
      ws->ferr[k] = ws->fz[k] * (QRS__FP_C0 + c1 * (double)(k + 1) / 16.0);
      z += ws->fz[k];
      ez += ws->ferr[k];
    }
    ez = ez * 1.01 + (double)row->n * 1.7e-38;
    tf = (p->top_p < 1.0 ? p->top_p : p->u) * z + 2.0 * ez;
    if (rung == FAST_RUNGS - 1 || (fast_dhead[rung] <= -16.0f && fp.nskip) ||
        z - fp.z >= tf)
      break;
    /* The next band of the ladder joins the head: a compare in logit
       space over the row.  Its weights (the same floats the pass summed)
       leave the tail's sum, and their own errors its
       bound: at most what the pass added for them, e (16 u + C1 |d_s|)
       with d_s the d it summed them at (against a running max from
       fp.mfirst up: |d_s| >= |d| - dsh), less 1e-4 for the weights' own
       difference (and the float products of the kernel's sum); the 8 u
       of the float partial sums they were added in stay. */
    __atomic_fetch_add(&fstats.bands, 1, __ATOMIC_RELAXED);
    dsh = ((double)mf - (double)fp.mfirst) * invt * (1.0 + 1e-6);
    nh = qrs__kfband(row, mf, invf, fast_dhead[rung + 1], fast_dhead[rung],
                     ws->fpos, ws->fx, ws->fe, ws->fk, nh, ws->mb, fp.ngm,
                     nextafterf((float)dsh, INFINITY), &bz, &bzd);
    fp.z -= bz;
    eb = (QRS__FP_C0 - 8.0 * QRS__FP_U) * bz + c1 * bzd;
    fp.z = fp.z > 0.0 ? fp.z : 0.0;
    eb *= 1.0 - 1e-4;
    fp.err = fp.err - eb > 0.0 ? fp.err - eb : 0.0;
  }
  ws->deep = z - fp.z < tf;     /* the crossing may lie below the head */
  fast_note_fracs(ws, fast_dhead[rung], z);
  mx = (double)mf;
  /* The exact buckets: the float sums place the first crossing (the
     nucleus cut, else u Z); every head element up to one bucket past it
     gets its exact weight, so only the mass after those buckets is
     known from floats. */
  cum = 0.0;
  for (bmax = 0; bmax < FAST_NB - 1; bmax++) {
    cum += ws->fz[bmax];
    if (cum >= tf)
      break;
  }
  bmax = bmax + 1 < FAST_NB ? bmax + 1 : FAST_NB - 1;
  /* The head in bucket order; exact weights up to bmax. */
  fast_offsets(ws, cur);
  fast_sort(ws, 0, nh, cur);
  memset(ws->fzx, 0, FAST_NB * sizeof(*ws->fzx));
  fast_exact(ws, 0, bmax, mx, invt);
  /* The rest: the float mass after the exact buckets and its bound.
     A decision that does not certify is retried once: the whole head
     gets exact weights (the head's float buckets after the exact ones
     were part of the rest's bound); a tail of at most half the row is
     collected with exact weights too (nothing left to a float bound);
     a larger one, after a band moved elements out of it (or groups went
     unread), is summed afresh: its bound then covers only its own mass,
     not the partial sums of the elements the bands took (a crossing
     deep in a broad row, u near 1, needs that).  Then the oracle. */
  s.v = *row;
  s.ids = NULL;
  s.b.x = -INFINITY;
  s.b.i = 0;
  s.m = mx;
  ncand = nz;
  for (recount = 0;; recount++) {
    zx = 0.0;
    rz = fp.z;
    rerr = fp.err;
    for (k = 0; k < FAST_NB; k++) {
      if (k <= bmax) {
        zx += ws->fzx[k];
      } else {
        rz += ws->fz[k];
        rerr += ws->ferr[k];
      }
    }
    rerr = rerr * 1.01 + (double)row->n * 1.7e-38;
    z = zx + rz;
    if (fast_decide(ws, &s, p, bmax, mf, invf, invt, z, rerr, &h, &zn,
                    &ncand) == 0)
      break;
    /* The tail's keys (d <= dhead: from 16 |dhead| up) must follow the
       head's: not after the deepest band, whose tail clamps into the
       head's last bucket. */
    k0 = (int)(-16.0f * fast_dhead[rung]);
    exact_tail = row->n - nh <= row->n / 2 && k0 < FAST_NB;
    if (recount || (rung == start && !fp.nskip && bmax == FAST_NB - 1 &&
                    !exact_tail))
      return 2;
    if ((rung > start || fp.nskip) && !exact_tail) {
      __atomic_fetch_add(&fstats.recounts, 1, __ATOMIC_RELAXED);
      qrs__kftail(row, mf, invf, fast_dhead[rung], &fp.z, &fp.err, &fp.w);
      fp.err += (QRS__FP_C1 - c1) * fp.w;
    }
    if (bmax < FAST_NB - 1) {
      /* The head's buckets after the exact ones (their float bound is
         then most of what is left) get exact weights too. */
      __atomic_fetch_add(&fstats.rehead, 1, __ATOMIC_RELAXED);
      fast_exact(ws, bmax + 1, FAST_NB - 1, mx, invt);
      bmax = FAST_NB - 1;
    }
    if (exact_tail) {
      /* A small tail (at most half the row) collected as well (its
         buckets follow the head's: d <= dhead), with exact weights:
         nothing is left to a float bound. */
      __atomic_fetch_add(&fstats.exact_tails, 1, __ATOMIC_RELAXED);
      nt = qrs__kfband(row, mf, invf, -INFINITY, fast_dhead[rung], ws->fpos,
                       ws->fx, ws->fe, ws->fk, 0, ws->mb, fp.ngm, 0.0f, &bz,
                       &bzd);
      for (i = 0; i < nt; i++)
        ws->fcnt[ws->fk[i]]++;
      fast_offsets(ws, cur);
      fast_sort(ws, 0, nt, cur);
      fast_exact(ws, k0, FAST_NB - 1, mx, invt);
      fp.z = fp.err = 0.0;
    }
  }
  if (p->top_p < 1.0)
    out->top_p_used = p->top_p;
  out->eff_top_k = row->n;
  out->eff_min_p = nz;
  out->eff_top_p = ncand;
  out->num_candidates = (uint32_t)ncand;
  finish(&s, &h, zn, out);
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
  fast = p->T > 0.0 && fast_eligible(row, p);
  r = 1;
  if (fast && !scan) {
    /* The fast path's pass finds the max (and any NaN / +inf) itself. */
    reset_out(out);
    r = fast_select(ws, row, NULL, p, out, &sc);
    if (r != 3)
      scan = &sc;
  }
  if (!scan && p->T > 0.0 && p->nucleus == QRS__NUCLEUS_THROTTLE &&
      __atomic_load_n(&fast_on, __ATOMIC_RELAXED)) {
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
      inv_temp(p->T, row, &invt) == 0) {
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
    r = fast ? fast_select(ws, row, scan, p, out, &sc) : 1;
  }
  if (r == 1 && p->nucleus == QRS__NUCLEUS_THROTTLE &&
      __atomic_load_n(&fast_on, __ATOMIC_RELAXED))
    r = qrs__fast_throttle(ws, row, scan, p, out, NULL);
  if (r == 0) {
    __atomic_fetch_add(&fstats.fast, 1, __ATOMIC_RELAXED);
    return 0;
  }
  __atomic_fetch_add(r == 2 ? &fstats.resolved : &fstats.ineligible, 1,
                     __ATOMIC_RELAXED);
  if (r == 2)
    reset_out(out);
  switch (p->order) {
  case QRS__ORDER_TRUNCATE_FIRST:
    return sel_reference(ws, row, scan, p, out, 1);
  case QRS__ORDER_HF:
    return sel_hf(ws, row, scan, p, out);
  case QRS__ORDER_LLAMA:
    return sel_llama(ws, row, scan, p, out);
  default:
    return sel_reference(ws, row, scan, p, out, 0);
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
