/* The exact entropy throttle on the float fast path.

   The double path (select.c) measures the whole row in double with a
   histogram and the e*d moments, then searches the prefix (in selection
   order) whose renormalised entropy is closest to the target, applies
   the kept-mass bounds [pmin, pmax] of the row's mass Z, and runs the
   CDF search with u over the kept prefix.  Every decision but the mass
   bounds involves only the first few elements of the order (a 2-bit
   nucleus), so here:

   - one float pass (qrs__kfpass(): float weights, the mass outside a
     head d >= dhead with its error bound, the head list);
   - the head bucketed by 1/16 of d (a counting sort: bucket order is
     selection order between buckets) and, bucket by bucket from the
     top and only as far as a decision needs, the exact double weights
     (qrs__kexp(): the double path's own weights, bit for bit) and their
     sums; a bucket is sorted (x descending, position descending) only
     when a crossing falls in it;
   - Z = the exact sums of the buckets done + the float mass of the rest,
     within E (the float bound, plus the double sums' rounding);
   - each decision is certified with a margin: the entropy crossing and
     the include / exclude choice by 1e-9 nats (the two paths' double
     sums differ by far less), the mass bounds and the mass and CDF
     crossings by the bound of Z and the sums' rounding.  A decision
     within its margin goes to the double path (counted as an exact
     resolution); a crossing below the head reruns the pass with a
     deeper head (-4, -8, -16), then goes to the double path.

   The token, rank, candidate counts are the double path's; the
   probability, CDF interval and kept entropy are computed from the same
   exact weights, equal up to the order of the double sums (relative
   1e-13); top_p_used = kept mass / Z carries Z's float bound (relative
   below 1e-6). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <qrs/error.h>

#include "fthrottle.h"

#define FT_MIN_N 256
#define FT_NB 256                 /* buckets of 1/16: d >= -16 */
#define FT_DROUND 4e-11           /* relative rounding of double sums */
#define FT_HMARGIN 1e-9           /* nats */

/* The head ladder: d >= -8, then -16; rows whose sample says the -8
   head would be large (flat rows: most of the row) start at -4. */
#define FT_RUNGS 3
static const float ft_dhead[FT_RUNGS] = { -4.0f, -8.0f, -16.0f };
#define FT_SAMPLES 512
#define FT_BIG_HEAD 8192

struct ft {
  struct qrs__sel_ws *ws;
  const struct qrs__view *row;
  double m, invt;
  float mf, invf;
  struct qrs__fpass fp;
  float dhead;
  size_t nh;
  size_t off[FT_NB + 1];          /* bucket b: lpos/lx/le[off[b] ..) */
  unsigned char done[FT_NB];      /* exact weights and sums */
  unsigned char sorted[FT_NB];
};

/* A crossing: the element, its exact weight, and the prefix before it. */
struct fhit {
  size_t j;                       /* index in lpos / lx / le */
  size_t rank;
  double e, before, wbefore;
};

static int
fkey(float x, float mf, float invf)
{
  int k;

  k = (int)(-(double)((x - mf) * invf) * 16.0);
  return k < FT_NB ? k : FT_NB - 1;
}

/* Selection order: larger logit first, equal logits higher position
   first. */
static int
ahead(double xa, uint32_t pa, double xb, uint32_t pb)
{
  return xa > xb || (xa == xb && pa > pb);
}

/* Bucket b's exact weights and sums (ws->fzx: sum e, ws->hw: sum e d). */
static void
ensure(struct ft *f, int b)
{
  struct qrs__sel_ws *ws = f->ws;
  size_t j, lo, hi;
  double z, w;

  if (f->done[b])
    return;
  lo = f->off[b];
  hi = f->off[b + 1];
  memcpy(ws->le + lo, ws->lx + lo, (hi - lo) * sizeof(*ws->le));
  qrs__kexp(ws->le + lo, hi - lo, f->m, f->invt);
  z = w = 0.0;
  for (j = lo; j < hi; j++) {
    z += ws->le[j];
    w += ws->le[j] * ((ws->lx[j] - f->m) * f->invt);
  }
  ws->fzx[b] = z;
  ws->hw[b] = w;
  f->done[b] = 1;
}

/* Bucket b in selection order (Shell sort: buckets hold at most a few
   thousand elements, usually a handful). */
static void
sort_bucket(struct ft *f, int b)
{
  static const size_t gaps[] = { 701, 301, 132, 57, 23, 10, 4, 1 };
  struct qrs__sel_ws *ws = f->ws;
  size_t lo, n, g, i, k;
  uint32_t tp;
  double tx, te;
  unsigned gi;

  if (f->sorted[b])
    return;
  lo = f->off[b];
  n = f->off[b + 1] - lo;
  for (gi = 0; gi < sizeof(gaps) / sizeof(gaps[0]); gi++) {
    g = gaps[gi];
    for (i = g; i < n; i++) {
      tp = ws->lpos[lo + i];
      tx = ws->lx[lo + i];
      te = ws->le[lo + i];
      for (k = i; k >= g && ahead(tx, tp, ws->lx[lo + k - g],
                                  ws->lpos[lo + k - g]);
           k -= g) {
        ws->lpos[lo + k] = ws->lpos[lo + k - g];
        ws->lx[lo + k] = ws->lx[lo + k - g];
        ws->le[lo + k] = ws->le[lo + k - g];
      }
      ws->lpos[lo + k] = tp;
      ws->lx[lo + k] = tx;
      ws->le[lo + k] = te;
    }
  }
  f->sorted[b] = 1;
}

/* Z: the exact sums of the buckets done plus the float mass of the rest
   (outside the head and the buckets not done), *ret_e its bound. */
static double
zbound(const struct ft *f, double *ret_e)
{
  const struct qrs__sel_ws *ws = f->ws;
  double z, e;
  int b;

  z = f->fp.z;
  e = f->fp.err;
  for (b = 0; b < FT_NB; b++) {
    if (f->done[b]) {
      z += ws->fzx[b];
    } else {
      z += ws->fz[b];
      e += ws->fz[b] * (QRS__FP_C0 + QRS__FP_C1 * (double)(b + 1) / 16.0);
    }
  }
  *ret_e = e * 1.01 + (double)f->row->n * 1.7e-38 + FT_DROUND * z;
  return z;
}

static int
hreached(double z, double w, double t)
{
  return z > 0.0 && log(z) - w / z >= t;
}

static double
hof(double z, double w)
{
  return z > 0.0 ? log(z) - w / z : 0.0;
}

/* Whether the whole row's entropy is certainly below t - FT_HMARGIN,
   given the exact sums cz, cw of the whole head.  The tail (d < dhead)
   has mass R within its float bound, R_hi = R + E, and e d sums W with
   dhead R_lo >= W >= -R_hi ln(nt / R_hi) (the most -e ln e that nt
   weights of total R_hi can make) and >= -87 R_hi; H = ln Z - W / Z is
   largest at a corner of that box. */
static int
whole_below(const struct ft *f, double cz, double cw, double t)
{
  double rl, rh, wl, wh, nt, h, hmax;
  int i;

  rh = f->fp.z + f->fp.err * 1.01 + (double)f->row->n * 1.7e-38;
  rl = f->fp.z - f->fp.err * 1.01;
  rl = rl > 0.0 ? rl : 0.0;
  nt = (double)(f->row->n - f->nh);
  wh = (double)f->dhead * rl;
  wl = -87.0 * rh - (double)f->row->n * 1.5e-36;
  if (rh > 0.0 && nt > 2.72 * rh && -rh * log(nt / rh) > wl)
    wl = -rh * log(nt / rh);
  hmax = -INFINITY;
  for (i = 0; i < 4; i++) {
    h = hof(cz + (i & 1 ? rh : rl), cw + (i & 2 ? wl : wh));
    hmax = h > hmax ? h : hmax;
  }
  return hmax * (1.0 + 1e-12) < t - FT_HMARGIN;
}

/* The first element (selection order) at which the prefix mass
   (entropy: the prefix's entropy) reaches t.  0 with the hit; 3 when the
   head's buckets do not reach it (entropy: 4 when the whole row is
   certainly below t); entropy crossings are certified (the prefix
   through the element above t, the one before below it, by
   FT_HMARGIN: the prefix entropy never decreases along the order),
   else 2. */
static int
cross(struct ft *f, int entropy, double t, struct fhit *h)
{
  struct qrs__sel_ws *ws = f->ws;
  double cz, cw, e, d;
  size_t rank, j;
  int b;

  cz = cw = 0.0;
  rank = 0;
  for (b = 0; b < FT_NB; b++) {
    if (f->off[b + 1] == f->off[b])
      continue;
    ensure(f, b);
    if (entropy ? hreached(cz + ws->fzx[b], cw + ws->hw[b], t)
                : cz + ws->fzx[b] >= t)
      break;
    cz += ws->fzx[b];
    cw += ws->hw[b];
    rank += f->off[b + 1] - f->off[b];
  }
  if (b == FT_NB)
    return entropy && whole_below(f, cz, cw, t) ? 4 : 3;
  sort_bucket(f, b);
  for (j = f->off[b]; j < f->off[b + 1]; j++) {
    e = ws->le[j];
    d = (ws->lx[j] - f->m) * f->invt;
    if (entropy ? hreached(cz + e, cw + e * d, t) : cz + e >= t) {
      if (entropy && (!(hof(cz + e, cw + e * d) - t > FT_HMARGIN) ||
                      (rank > 0 && !(t - hof(cz, cw) > FT_HMARGIN))))
        return 2;
      h->j = j;
      h->rank = rank;
      h->e = e;
      h->before = cz;
      h->wbefore = cw;
      return 0;
    }
    cz += e;
    cw += e * d;
    rank++;
  }
  /* The bucket's sum reached t, its elements not: rounding. */
  return 2;
}

/* The crossing of a target known within +-mt: the same element at both
   ends, or 2 (within the bound) / 3 (below the head). */
static int
mass_cross_sure(struct ft *f, double t, double mt, struct fhit *h)
{
  struct fhit h2;
  int r;

  if (!(t - mt > 0.0))
    return 2;
  r = cross(f, 0, t - mt, h);
  if (r)
    return r;
  r = cross(f, 0, t + mt, &h2);
  if (r)
    return r;
  return h->j == h2.j ? 0 : 2;
}

/* One attempt with the head at d >= dhead: 0, 2, 3 (deeper), or 5 (a
   fused pass found a NaN, +inf or no finite value). */
static int
attempt(struct ft *f, float dhead, const struct qrs__sel_params *p,
        struct qrs__sel_out *out)
{
  struct qrs__sel_ws *ws = f->ws;
  size_t cur[FT_NB], i, j, len;
  struct fhit h, c;
  double t, z, ez, zs, ws_, kh, dx, di, de, bound;
  int b, incl, r;

  f->dhead = dhead;
  f->nh = qrs__kfpass(f->row, f->mf, f->invf, f->invt, dhead, ws->fpos,
                      ws->fx, ws->fe, ws->fk, &f->fp, NULL, 0.0f, NULL, -INFINITY);
  if (f->mf != f->mf) {
    /* The pass found the max (no scan before it). */
    if (f->fp.bad)
      return 5;
    f->mf = f->fp.max;
    f->m = (double)f->fp.max;
  }
  if (f->fp.cnt_a != f->fp.cnt_b)
    return 2;                   /* weights at the underflow limit */
  /* Counting sort of the head by bucket into lpos / lx. */
  memset(ws->fz, 0, FT_NB * sizeof(*ws->fz));
  memset(cur, 0, sizeof(cur));
  for (i = 0; i < f->nh; i++) {
    b = fkey(ws->fx[i], f->mf, f->invf);
    ws->fk[i] = (uint16_t)b;
    ws->fz[b] += ws->fe[i];
    cur[b]++;
  }
  f->off[0] = 0;
  for (b = 0; b < FT_NB; b++) {
    f->off[b + 1] = f->off[b] + cur[b];
    cur[b] = f->off[b];
  }
  for (i = 0; i < f->nh; i++) {
    j = cur[ws->fk[i]]++;
    ws->lpos[j] = ws->fpos[i];
    ws->lx[j] = ws->fx[i];
  }
  memset(f->done, 0, sizeof(f->done));
  memset(f->sorted, 0, sizeof(f->sorted));

  /* The entropy crossing and the include / exclude choice. */
  t = p->thr_target;
  r = cross(f, 1, t, &h);
  if (r == 4 && !(p->thr_pmax < 1.0))
    return 2;   /* everything kept: Z's exact e d sum would be needed */
  if (r != 0 && r != 4)
    return r;
  z = zbound(f, &ez);
  bound = NAN;
  zs = ws_ = 0.0;
  len = 0;
  if (r == 4) {
    /* Everything is below the target: every token is kept, and pmax < 1
       cuts at pmax Z. */
    bound = p->thr_pmax;
  } else {
    dx = (ws->lx[h.j] - f->m) * f->invt;
    incl = 1;
    if (h.rank > 0) {
      di = fabs(hof(h.before + h.e, h.wbefore + h.e * dx) - t);
      de = fabs(hof(h.before, h.wbefore) - t);
      if (!(fabs(di - de) > 2.0 * FT_HMARGIN))
        return 2;
      incl = de < di ? 0 : 1;
    }
    zs = incl ? h.before + h.e : h.before;
    ws_ = incl ? h.wbefore + h.e * dx : h.wbefore;
    len = incl ? h.rank + 1 : h.rank;

    /* The kept-mass bounds against Z (known within ez): below pmin Z or
       above pmax Z, the cut is the mass crossing there instead. */
    if (!(zs * (1.0 + 1e-12) < p->thr_pmin * (z - ez)) &&
        !(zs * (1.0 - 1e-12) >= p->thr_pmin * (z + ez)))
      return 2;
    if (zs < p->thr_pmin * z) {
      bound = p->thr_pmin;
    } else {
      if (!(zs * (1.0 - 1e-12) > p->thr_pmax * (z + ez)) &&
          !(zs * (1.0 + 1e-12) <= p->thr_pmax * (z - ez)))
        return 2;
      if (zs > p->thr_pmax * z)
        bound = p->thr_pmax;
    }
  }
  if (!isnan(bound)) {
    r = mass_cross_sure(f, bound * z, bound * ez + FT_DROUND * z, &h);
    if (r)
      return r;
    dx = (ws->lx[h.j] - f->m) * f->invt;
    zs = h.before + h.e;
    ws_ = h.wbefore + h.e * dx;
    len = h.rank + 1;
  }
  kh = hof(zs, ws_);

  /* The CDF crossing with u inside the kept prefix. */
  r = mass_cross_sure(f, p->u * zs, 2.0 * FT_DROUND * zs, &c);
  if (r)
    return r;
  if (c.rank >= len)
    return 2;
  z = zbound(f, &ez);
  out->token = ws->lpos[c.j];
  out->rank = (uint32_t)c.rank;
  out->num_candidates = (uint32_t)len;
  out->prob = c.e / zs;
  out->cdf_lo = c.before / zs;
  out->cdf_hi = (c.before + c.e) / zs;
  out->eff_top_k = f->row->n;
  out->eff_min_p = f->fp.cnt_a;
  out->eff_top_p = len;
  out->top_p_used = zs / z;
  out->kept_entropy = kh;
  return 0;
}

int
qrs__fast_throttle(struct qrs__sel_ws *ws, const struct qrs__view *row,
                   const struct qrs__scan *scan,
                   const struct qrs__sel_params *p, struct qrs__sel_out *out,
                   struct qrs__scan *found)
{
  struct ft f;
  size_t i, cnt, step;
  int rung, r, start;

  if (row->dtype == QRS_DTYPE_F64 || row->n < FT_MIN_N ||
      p->order != QRS__ORDER_REFERENCE ||
      p->nucleus != QRS__NUCLEUS_THROTTLE ||
      (p->top_k > 0 && (unsigned long long)p->top_k < row->n) ||
      p->min_p > 0.0 || !(p->T >= 0.01) || !(p->T <= 100.0) ||
      !(p->u > 0.0 && p->u < 1.0) || !(p->thr_target >= 0.0) ||
      !isfinite(p->thr_target) || !(p->thr_pmin >= 0.0) ||
      !(p->thr_pmax <= 1.0) || !(p->thr_pmin <= p->thr_pmax))
    return 1;
  f.ws = ws;
  f.row = row;
  f.invt = p->T == 1.0 ? 1.0 : 1.0 / p->T;
  f.invf = (float)f.invt;
  /* The first rung (the choice changes only the speed: each rung is
     certified).  With a scan, every n / FT_SAMPLES-th logit estimates
     the -8 head's size.  Without one (the first pass finds the max: NaN
     mf), samples cannot tell a flat row from a mid one (their max is
     far below a mid row's): the start follows this workspace's previous
     selection (rows of one request are alike): -4 after a -8 head that
     was large, -8 after a -4 head that was not deep enough. */
  if (scan) {
    f.m = scan->max;
    f.mf = (float)scan->max;
    step = row->n / FT_SAMPLES;
    for (i = cnt = 0; i < FT_SAMPLES; i++)
      cnt += (qrs__kload(row, i * step) - f.m) * f.invt >= -8.0;
    start = cnt * step > FT_BIG_HEAD ? 0 : 1;
  } else {
    f.m = f.mf = NAN;
    start = ws->ft_start;
  }
  r = 2;
  for (rung = start; rung < FT_RUNGS; rung++) {
    r = attempt(&f, ft_dhead[rung], p, out);
    if (r != 3)
      break;
  }
  if (!scan && r != 5)
    ws->ft_start = rung > start                         ? 1
                   : rung == 1 && f.nh > FT_BIG_HEAD ? 0
                                                       : start;
  if (r == 3)
    r = 2;
  if (r == 5)
    return 3;
  if (!scan) {
    found->max = f.m;
    found->has_nan = found->has_posinf = 0;
  }
  return r;
}
