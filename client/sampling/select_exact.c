/* Token selection on the double path: exact weights (the row kernels'
   double exponential), prefix cuts and a CDF search by histogram
   refinement without sorting, in each stage order (reference, HF
   transformers, llama.cpp); it also resolves what the float fast path
   cannot certify (select_int.h lists the pieces). */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <qrs/error.h>

#include "kernels/moments.h"
#include "select_int.h"

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

/* The crossing is list entry k, of weight e, after before / wbefore /
   rank of the set's mass / e*d / elements.  Returns 0. */
static int
hit_at(const struct qrs__sel_ws *ws, size_t k, double e, double before,
       double wbefore, size_t rank, struct hit *ret)
{
  ret->vpos = ws->lpos[k];
  ret->x = ws->lx[k];
  ret->e = e;
  ret->before = before;
  ret->wbefore = wbefore;
  ret->rank = rank;
  return 0;
}

/* The crossing in ws's list [0, n) (n >= 1) by sorting it and summing in
   selection order (its last entry when rounding keeps the sums short of
   t); the arguments as for qrs__sel_refine().  Returns 0. */
static int
scan_sorted(struct qrs__sel_ws *ws, const struct cset *s, size_t n,
            double invt, int kind, double t, double before, double wbefore,
            size_t rank, struct hit *ret)
{
  double cz, cw, d;
  size_t i;

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
  return hit_at(ws, i, ws->le[i], before, wbefore, rank + i, ret);
}

/* Find the crossing in ws's list [0, n) (positions ascending, values in
   lx, weights in le), given the mass / e*d / count of the set elements
   before the whole list.  Returns 0, or 1 when the list is empty. */
int
qrs__sel_refine(struct qrs__sel_ws *ws, const struct cset *s, size_t n,
                double invt, int kind, double t, double before,
                double wbefore, size_t rank, struct hit *ret)
{
  double bz[NBUCKET], bw[NBUCKET], xmin, xmax, scale, cz, cw, e0, d0;
  size_t bc[NBUCKET], i, k, lo, hi, mid;
  int b, sel;

  for (;;) {
    if (n == 0)
      return 1;
    if (n <= SORT_MAX)
      return scan_sorted(ws, s, n, invt, kind, t, before, wbefore, rank,
                         ret);
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
      return hit_at(ws, n - 1 - lo, e0, before + (double)lo * e0,
                    wbefore + (double)lo * e0 * d0, rank + lo, ret);
    }
    scale = (double)NBUCKET / (xmax - xmin);
    if (!isfinite(scale))
      /* A range too narrow to split: sort it (only ever a few values). */
      return scan_sorted(ws, s, n, invt, kind, t, before, wbefore, rank,
                         ret);
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
    return qrs__sel_refine(ws, s, n, invt, kind, t, cz, cw, above, ret);
  }
  n = qrs__kcollect_bucket(&s->v, s->m, invt, &s->b, b, ws->lpos, ws->lx,
                           &above);
  memcpy(ws->le, ws->lx, n * sizeof(*ws->le));
  qrs__kexp(ws->le, n, s->m, invt);
  return qrs__sel_refine(ws, s, n, invt, kind, t, cz, cw, above, ret);
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

void
qrs__sel_finish(const struct cset *s, const struct hit *h, double z,
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
  qrs__sel_finish(s, &h, z, out);
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
int
qrs__sel_inv_temp(double T, const struct qrs__view *row, double *ret)
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

/* The opening every stage order shares: the support (keep_ties as in
   support()) into *s and out->eff_top_k, 1/T into *ret_invt and
   log(min-p) into *ret_pmin (-INFINITY without min-p).  Returns 0, 1
   when min-p is above 1 (nothing reaches it: the order decides which one
   token to keep), or QRS_E_CONFIG_VALUE (qrs__sel_inv_temp()). */
static int
open_order(struct qrs__sel_ws *ws, const struct qrs__view *row,
           const struct qrs__scan *scan, const struct qrs__sel_params *p,
           int keep_ties, struct cset *s, double *ret_invt, double *ret_pmin,
           struct qrs__sel_out *out)
{
  int r;

  support(ws, row, scan, p->top_k, keep_ties, s, &out->eff_top_k);
  r = qrs__sel_inv_temp(p->T, row, ret_invt);
  if (r < 0)
    return r;
  *ret_pmin = p->min_p > 0.0 ? log(p->min_p) : -INFINITY;
  return *ret_pmin > 0.0;
}

/* Reference order (and the reference's truncate-first order). */
int
qrs__sel_reference(struct qrs__sel_ws *ws, const struct qrs__view *row,
                   const struct qrs__scan *scan,
                   const struct qrs__sel_params *p, struct qrs__sel_out *out,
                   int tfirst)
{
  struct cset s;
  struct qrs__mass ms;
  struct hit cut, *cutp;
  double invt, pinv, pmin, z, theta, zall, kh, zpre;
  size_t n_minp, n_eff, ncand, nsup;
  unsigned flags;
  int has_minp, nucleus, r;

  r = open_order(ws, row, scan, p, 0, &s, &invt, &pmin, out);
  if (r != 0) {
    /* min_p > 1: the reference keeps the argmax. */
    return r < 0 ? r : singleton(&s, out);
  }
  has_minp = p->min_p > 0.0;
  pinv = tfirst ? 1.0 : invt;
  if (!has_minp && tfirst)
    pmin = QRS__D_UNDERFLOW;
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
  nsup = tfirst ? row->n : out->eff_top_k;
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

/* singleton(), with the top element in selection order: the highest
   position holding the max (HF and llama.cpp keep it when min-p removes
   everything).  QRS_E_INTERNAL when there is none. */
static int
top_element(const struct cset *s, struct qrs__sel_out *out)
{
  size_t i;
  int r;

  r = singleton(s, out);
  if (r < 0)
    return r;
  for (i = s->v.n; i-- > 0;)
    if (qrs__kload(&s->v, i) == s->m) {
      out->token = tok(s, i);
      return 0;
    }
  return QRS_E_INTERNAL;
}

/* HF transformers: temperature, top-k (ties with the k-th kept), top-p,
   then min-p, all at T. */
int
qrs__sel_hf(struct qrs__sel_ws *ws, const struct qrs__view *row,
            const struct qrs__scan *scan, const struct qrs__sel_params *p,
            struct qrs__sel_out *out)
{
  struct cset s;
  struct qrs__mass ms;
  struct hit cut, *cutp;
  double invt, z, pmin;
  size_t ncand;
  int r;

  r = open_order(ws, row, scan, p, 1, &s, &invt, &pmin, out);
  if (r != 0) {
    /* min_p > 1: HF keeps one token, the most probable. */
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
int
qrs__sel_llama(struct qrs__sel_ws *ws, const struct qrs__view *row,
               const struct qrs__scan *scan, const struct qrs__sel_params *p,
               struct qrs__sel_out *out)
{
  struct cset s;
  struct qrs__mass ms;
  struct hit cut;
  double invt, pmin;
  int r;

  r = open_order(ws, row, scan, p, 0, &s, &invt, &pmin, out);
  if (r != 0)
    return r < 0 ? r : top_element(&s, out);
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

