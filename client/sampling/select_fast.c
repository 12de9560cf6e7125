/* Token selection on the float fast path (select_int.h lists the
   pieces; docs/sampling.md has the error bound). */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <qrs/error.h>

#include "kernels/moments.h"
#include "select_int.h"

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
   path's own exp) and the crossing's bucket is ordered by
   qrs__sel_refine().  The decision is certified when the crossing
   element is the same at both ends of the target's uncertainty (the
   bound of the float rest, and 4e-11 Z for the double sums' rounding).
   Otherwise it is retried once with the whole head exact and the tail
   exact (at most half the row) or summed again; then the double path
   decides (the exact resolution). */

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

int
qrs__sel_fast_on(void)
{
  return __atomic_load_n(&fast_on, __ATOMIC_RELAXED);
}

void
qrs__sel_fast_note(int r)
{
  if (r == 0)
    __atomic_fetch_add(&fstats.fast, 1, __ATOMIC_RELAXED);
  else
    __atomic_fetch_add(r == 2 ? &fstats.resolved : &fstats.ineligible, 1,
                       __ATOMIC_RELAXED);
}

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
  if (qrs__sel_refine(ws, s, k, invt, X_MASS, dlo, 0.0, 0.0, 0, &h) != 0 ||
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

int
qrs__sel_fast_eligible(const struct qrs__view *row,
                       const struct qrs__sel_params *p)
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

/* qrs__sel_fast(): select_int.h. */
int
qrs__sel_fast(struct qrs__sel_ws *ws, const struct qrs__view *row,
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
  qrs__sel_finish(&s, &h, zn, out);
  return 0;
}

