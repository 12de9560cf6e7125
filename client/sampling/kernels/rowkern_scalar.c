/* The scalar code of the row kernels, called by both variants
   (rowkern_int.h): the mass pass's subnormal weights through libm, the
   merge of a histogram block, the top-k heap and the quickselect of the
   block maxima.  Compiled for the baseline instruction set: the same
   code whichever variant calls it. */
#include <math.h>
#include <string.h>

#include "rowkern_int.h"

/* Subnormal weights (logit gaps above 708 T): rare, exact via libm. */
void
qrs__kmass_tiny(const struct qrs__view *v, double m, double invt,
                const struct qrs__bound *b, double pinv, double pmin,
                struct qrs__mass *ret, int fw, int fh)
{
  double xi, di, ei;
  size_t i;

  for (i = 0; i < v->n; i++) {
    xi = qrs__kload1(v->data, i, v->dtype);
    if (!(xi > b->x || (xi == b->x && i >= b->i)))
      continue;
    if (pmin > -INFINITY && !((xi - m) * pinv >= pmin))
      continue;
    di = (xi - m) * invt;
    if (!(di < QRS__D_NORMAL && di >= QRS__D_UNDERFLOW))
      continue;
    ei = exp(di);
    ret->z += ei;
    ret->nz += ei > 0.0;
    /* Bucket QRS__NBUCKET - 1: in the tail unless fully resolved. */
    if (fh && ret->hsplit < QRS__NBUCKET) {
      ret->tz += ei;
      if (fw)
        ret->tw += ei * di;
    } else if (fh) {
      ret->hz[QRS__NBUCKET - 1] += ei;
      if (fw)
        ret->hw[QRS__NBUCKET - 1] += ei * di;
    }
    if (fw) {
      ret->w += ei * di;
      ret->w2 += ei * di * di;
    }
  }
}

/* Two interleaved copies of each histogram, so that a run of equal
   buckets does not serialise. */
void
qrs__khead_block(struct qrs__mass *ret, const struct qrs__hblock *hb,
                 double (*h)[QRS__NBUCKET + 1],
                 double (*hw)[QRS__NBUCKET + 1])
{
  size_t k, o;

  for (k = 0; k + 2 <= hb->n; k += 2) {
    h[0][hb->k[k]] += hb->e[k];
    h[1][hb->k[k + 1]] += hb->e[k + 1];
  }
  if (k < hb->n)
    h[0][hb->k[k]] += hb->e[k];
  if (hw) {
    for (k = 0; k + 2 <= hb->n; k += 2) {
      hw[0][hb->k[k]] += hb->w[k];
      hw[1][hb->k[k + 1]] += hb->w[k + 1];
    }
    if (k < hb->n)
      hw[0][hb->k[k]] += hb->w[k];
  }
  if (ret->nhead > ret->hcap || ret->nhead + hb->n > ret->hcap) {
    ret->nhead = SIZE_MAX;   /* too many: searches collect instead */
    return;
  }
  o = ret->nhead;
  memcpy(ret->hpos + o, hb->p, hb->n * sizeof(*ret->hpos));
  memcpy(ret->hx + o, hb->x, hb->n * sizeof(*ret->hx));
  memcpy(ret->he + o, hb->e, hb->n * sizeof(*ret->he));
  memcpy(ret->hk + o, hb->k, hb->n * sizeof(*ret->hk));
  ret->nhead += hb->n;
}

static inline __attribute__((always_inline)) int
hless(const struct qrs__hitem *a, const struct qrs__hitem *b)
{
  return a->x < b->x || (a->x == b->x && a->pos < b->pos);
}

void
qrs__khsift(struct qrs__hitem *h, size_t n, size_t i)
{
  struct qrs__hitem t;
  size_t c;

  t = h[i];
  for (;;) {
    c = 2 * i + 1;
    if (c >= n)
      break;
    if (c + 1 < n && hless(&h[c + 1], &h[c]))
      c++;
    if (!hless(&h[c], &t))
      break;
    h[i] = h[c];
    i = c;
  }
  h[i] = t;
}

/* Quickselect with Hoare's partition around the middle element (equal
   values split evenly; lo <= j < hi, so every round shrinks the
   range). */
float
qrs__kkth_largest(float *a, size_t n, size_t k)
{
  ptrdiff_t lo = 0, hi = (ptrdiff_t)n - 1, i, j, want = (ptrdiff_t)k - 1;
  float p, t;

  while (lo < hi) {
    p = a[lo + (hi - lo) / 2];
    i = lo - 1;
    j = hi + 1;
    for (;;) {
      do
        i++;
      while (a[i] > p);
      do
        j--;
      while (a[j] < p);
      if (i >= j)
        break;
      t = a[i];
      a[i] = a[j];
      a[j] = t;
    }
    /* a[lo..j] >= p >= a[j+1..hi] */
    if (want <= j)
      hi = j;
    else
      lo = j + 1;
  }
  return a[want];
}
