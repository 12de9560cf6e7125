/* Template (rowkern_isa.h includes it once per variant): the passes in
   double precision that the exact selection, the entropy strategies and
   the oracle build on (rowkern.h has their contracts): the mass pass and
   its histogram, the collections of a set's elements by weight range or
   by bucket, the scans, top-k (heap and block maxima), the double floor
   and the fused scan with the entropy sums.  Each *_impl takes the dtype
   as a constant argument: rowkern_dtype.h compiles one copy per dtype. */
/* Lanes (positions pos, values x) in the set b and the predicate. */
static inline __attribute__((always_inline)) vi
KS(member)(vd x, vd pos, double n, const struct qrs__bound *b, double m,
           double pinv, double pmin)
{
  vi in;

  in = (pos < n) & ((x > b->x) | ((x == b->x) & (pos >= (double)b->i)));
  if (pmin > -INFINITY)
    in &= ((x - m) * pinv >= pmin);
  return in;
}

/* Running sums of one lane group of the mass pass. */
struct KS(macc) {
  vd z, w, w2, cin, csmall, tiny, xmin, tz, tw;
};

static inline __attribute__((always_inline)) void
KS(macc_init)(struct KS(macc) *a)
{
  a->z = a->w = a->w2 = a->tz = a->tw = KS(splat)(0.0);
  a->cin = a->csmall = KS(splat)(0.0);
  a->tiny = KS(splat)(-INFINITY);
  a->xmin = KS(splat)(INFINITY);
}

/* The histogram bucket of an element (d clamped as dc), as a double not
   yet truncated (bucket k: [k, k + 1)): QRS__NBUCKET (no bucket) outside
   the set or for a zero weight. */
static inline __attribute__((always_inline)) vd
KS(key)(vd dc, vi in)
{
  vd t;

  t = dc * -QRS__BSCALE;
  t = VSEL(t > (double)(QRS__NBUCKET - 1),
           KS(splat)((double)(QRS__NBUCKET - 1)), t);
  return VSEL(in & (dc >= QRS__D_UNDERFLOW), t,
              KS(splat)((double)QRS__NBUCKET));
}

/* One vector (positions i..) of the mass pass.  restricted: lanes are
   tested for membership (else every lane is in the set).  fh: the lanes
   in buckets below hs (the head) are appended to the block buffer hb
   for the histogram and the head list; the others only go to the tail
   sums. */
static inline __attribute__((always_inline)) void
KS(mass_step)(struct KS(macc) *a, vd x, vd pos, size_t i, double n,
              double m, double invt, const struct qrs__bound *b, double pinv,
              double pmin, int restricted, int fw, int fh, double hs,
              struct qrs__hblock *hb)
{
  vd d, dc, e, ed, t;
  vi in, small, hd;
  size_t k;
  int j;

  d = (x - m) * invt;
  dc = VSEL(d < QRS__D_CLAMP, KS(splat)(QRS__D_CLAMP), d);
  e = KS(exp)(dc);
  small = dc < QRS__D_NORMAL;
  in = (vi)KS(splat)(0.0) == 0;
  if (restricted) {
    in = KS(member)(x, pos, n, b, m, pinv, pmin);
    small &= in;
    e = VZERO(in & ~small, e);
    a->cin += VZERO(in, KS(splat)(1.0));
    a->xmin = VSEL(in & (x < a->xmin), x, a->xmin);
  } else {
    e = VZERO(~small, e);
  }
  /* Lanes whose weight is subnormal or 0: counted; the largest such d
     tells whether any is subnormal (then libm recomputes them). */
  a->csmall += VZERO(small, KS(splat)(1.0));
  a->tiny = VSEL(small & (dc > a->tiny), dc, a->tiny);
  a->z += e;
  ed = e * dc;
  if (fw) {
    a->w += ed;
    a->w2 += ed * dc;
  }
  if (fh) {
    t = KS(key)(dc, in);
    hd = t < hs;
    a->tz += VZERO(~hd, e);
    if (fw)
      a->tw += VZERO(~hd, ed);
    if (KS(any)(hd)) {
      for (j = 0; j < VW; j++) {
        if (!hd[j])
          continue;
        k = hb->n++;
        hb->e[k] = e[j];
        hb->w[k] = ed[j];
        hb->k[k] = (int32_t)t[j];
        hb->x[k] = x[j];
        hb->p[k] = (uint32_t)(i + (size_t)j);
      }
    }
  }
}

static inline __attribute__((always_inline)) void
KS(mass_impl)(const struct qrs__view *v, double m, double invt,
              const struct qrs__bound *b, double pinv, double pmin,
              struct qrs__mass *ret, int dt, int fw, int fh)
{
  struct KS(macc) a0, a1;
  struct qrs__hblock hb;
  double h[2][QRS__NBUCKET + 1], hw[2][QRS__NBUCKET + 1];
  vd pos, xmin, tiny;
  size_t i, n, end, full, k;
  double t, dn, hs;
  int j, restricted;

  n = v->n;
  dn = (double)n;
  restricted = b->x > -INFINITY || b->i > 0 || pmin > -INFINITY;
  KS(macc_init)(&a0);
  KS(macc_init)(&a1);
  if (fh) {
    memset(h, 0, sizeof(h));
    if (fw)
      memset(hw, 0, sizeof(hw));
    ret->nhead = 0;
  }
  hs = (double)ret->hsplit;
  pos = KS(iota)(0);
  for (i = 0; i < n; i = end) {
    end = i + QRS__HBLOCK < n ? i + QRS__HBLOCK : n;
    full = i + ((end - i) & ~(size_t)(2 * VW - 1));
    hb.n = 0;
    if (restricted) {
      for (k = i; k < full; k += 2 * VW, pos += (double)(2 * VW)) {
        KS(mass_step)(&a0, KS(load)(v->data, k, n, dt), pos, k, dn, m, invt,
                      b, pinv, pmin, 1, fw, fh, hs, &hb);
        KS(mass_step)(&a1, KS(load)(v->data, k + VW, n, dt),
                      pos + (double)VW, k + VW, dn, m, invt, b, pinv, pmin, 1,
                      fw, fh, hs, &hb);
      }
    } else {
      for (k = i; k < full; k += 2 * VW) {
        KS(mass_step)(&a0, KS(load)(v->data, k, n, dt), pos, k, dn, m, invt,
                      b, pinv, pmin, 0, fw, fh, hs, &hb);
        KS(mass_step)(&a1, KS(load)(v->data, k + VW, n, dt), pos, k + VW, dn,
                      m, invt, b, pinv, pmin, 0, fw, fh, hs, &hb);
      }
      a0.cin += KS(splat)((double)(full - i) / VW);
      pos = KS(iota)(full);
    }
    for (k = full; k < end; k += VW, pos += (double)VW)
      KS(mass_step)(&a0, KS(load)(v->data, k, end, dt), pos, k, dn, m, invt,
                    b, pinv, pmin, 1, fw, fh, hs, &hb);
    if (fh && hb.n)
      qrs__khead_block(ret, &hb, h, fw ? hw : NULL);
  }
  ret->z = KS(hsum)(a0.z + a1.z);
  ret->w = fw ? KS(hsum)(a0.w + a1.w) : 0.0;
  ret->w2 = fw ? KS(hsum)(a0.w2 + a1.w2) : 0.0;
  ret->n_in = (size_t)KS(hsum)(a0.cin + a1.cin);
  ret->nz = ret->n_in - (size_t)KS(hsum)(a0.csmall + a1.csmall);
  xmin = VSEL(a1.xmin < a0.xmin, a1.xmin, a0.xmin);
  tiny = VSEL(a1.tiny > a0.tiny, a1.tiny, a0.tiny);
  ret->xmin = INFINITY;
  t = -INFINITY;
  for (j = 0; j < VW; j++) {
    if (xmin[j] < ret->xmin)
      ret->xmin = xmin[j];
    if (tiny[j] > t)
      t = tiny[j];
  }
  if (!restricted && n > 0)
    ret->xmin = -INFINITY;
  if (fh) {
    for (j = 0; j < QRS__NBUCKET; j++) {
      ret->hz[j] = h[0][j] + h[1][j];
      if (fw)
        ret->hw[j] = hw[0][j] + hw[1][j];
    }
    ret->tz = KS(hsum)(a0.tz + a1.tz);
    ret->tw = fw ? KS(hsum)(a0.tw + a1.tw) : 0.0;
  }
  if (t >= QRS__D_UNDERFLOW)
    qrs__kmass_tiny(v, m, invt, b, pinv, pmin, ret, fw, fh);
}

/* Collect the set's elements with d in the range from dlo to dhi, d
   computed exactly as the mass pass computes it; closed at dlo iff
   lo_in, at dhi iff hi_in (constants in every caller).  Stores at most
   cap of them (positions ascending); *ret_above (may be NULL): the set
   elements above the range. */
static inline __attribute__((always_inline)) size_t
KS(collect_range)(const struct qrs__view *v, double m, double invt,
                  const struct qrs__bound *b, double dlo, double dhi,
                  int lo_in, int hi_in, uint32_t *pos_out, double *x_out,
                  size_t cap, size_t *ret_above, int dt)
{
  vd x, d, pos, above, above2;
  vi in, hi, sel;
  size_t i, n, cnt;
  int j, restricted;

  n = v->n;
  cnt = 0;
  above = above2 = KS(splat)(0.0);
  pos = KS(iota)(0);
  restricted = b->x > -INFINITY || b->i > 0;
  for (i = 0; i < n; i += VW, pos += (double)VW) {
    x = KS(load)(v->data, i, n, dt);
    d = (x - m) * invt;
    if (hi_in)
      hi = d > dhi;
    else
      hi = d >= dhi;
    if (lo_in)
      sel = ~hi & (d >= dlo);
    else
      sel = ~hi & (d > dlo);
    if (restricted || i + VW > n) {
      in = KS(member)(x, pos, (double)n, b, m, 1.0, -INFINITY);
      hi &= in;
      sel &= in;
    }
    if (i & VW)
      above2 += VZERO(hi, KS(splat)(1.0));
    else
      above += VZERO(hi, KS(splat)(1.0));
    if (!KS(any)(sel))
      continue;
    for (j = 0; j < VW; j++) {
      if (!sel[j])
        continue;
      if (cnt < cap) {
        pos_out[cnt] = (uint32_t)(i + (size_t)j);
        x_out[cnt] = x[j];
      }
      cnt++;
    }
  }
  if (ret_above)
    *ret_above = (size_t)KS(hsum)(above + above2);
  return cnt;
}

/* The set's elements with dlo <= d < dhi (qrs__kcollect()). */
static inline __attribute__((always_inline)) size_t
KS(collect_impl)(const struct qrs__view *v, double m, double invt,
                 const struct qrs__bound *b, double dlo, double dhi,
                 uint32_t *pos_out, double *x_out, size_t cap,
                 size_t *ret_above, int dt)
{
  return KS(collect_range)(v, m, invt, b, dlo, dhi, 1, 0, pos_out, x_out,
                           cap, ret_above, dt);
}

static void
KS(kexp)(double *p, size_t n, double m, double invt)
{
  vd x, d, dc, e;
  vi small;
  size_t i;
  int j;

  for (i = 0; i < n; i += VW) {
    x = KS(load)(p, i, n, QRS_DTYPE_F64);
    d = (x - m) * invt;
    dc = VSEL(d < QRS__D_CLAMP, KS(splat)(QRS__D_CLAMP), d);
    e = KS(exp)(dc);
    small = dc < QRS__D_NORMAL;
    e = VZERO(~small, e);
    if (KS(any)(small)) {
      for (j = 0; j < VW; j++)
        if (small[j] && dc[j] >= QRS__D_UNDERFLOW)
          e[j] = exp(dc[j]);
    }
    if (i + VW <= n)
      memcpy(p + i, &e, sizeof(e));
    else
      for (j = 0; i + (size_t)j < n; j++)
        p[i + (size_t)j] = e[j];
  }
}

static inline __attribute__((always_inline)) void
KS(scan_impl)(const struct qrs__view *v, struct qrs__scan *ret, int dt)
{
  vd x, mx[4], pos;
  vi nan;
  size_t i, n;
  int j, q;

  n = v->n;
  for (q = 0; q < 4; q++)
    mx[q] = KS(splat)(-INFINITY);
  nan = (vi)KS(splat)(0.0);
  for (i = 0; i + 4 * VW <= n; i += 4 * VW) {
    for (q = 0; q < 4; q++) {
      x = KS(load)(v->data, i + (size_t)(q * VW), n, dt);
      nan |= (x != x);
      mx[q] = VSEL(x > mx[q], x, mx[q]);
    }
  }
  pos = KS(iota)(i);
  for (; i < n; i += VW, pos += (double)VW) {
    x = KS(load)(v->data, i, n, dt);
    x = VSEL(pos < (double)n, x, KS(splat)(-INFINITY));
    nan |= (x != x);
    mx[0] = VSEL(x > mx[0], x, mx[0]);
  }
  for (q = 1; q < 4; q++)
    mx[0] = VSEL(mx[q] > mx[0], mx[q], mx[0]);
  ret->max = -INFINITY;
  for (j = 0; j < VW; j++)
    if (mx[0][j] > ret->max)
      ret->max = mx[0][j];
  ret->has_nan = KS(any)(nan);
  ret->has_posinf = ret->max == INFINITY;
}

/* The set's elements in histogram bucket key of a mass pass at invt
   (keys recomputed exactly as the pass computed them): positions
   (ascending) and values; *ret_above: set elements in lower buckets.
   The bucket of d is trunc(-d * 16) (clamped): scaling by 16 is exact,
   so bucket key is exactly -(key + 1) / 16 < d <= -key / 16, and the
   last bucket everything down to the underflow limit. */
static inline __attribute__((always_inline)) size_t
KS(collect_bucket_impl)(const struct qrs__view *v, double m, double invt,
                        const struct qrs__bound *b, int key, uint32_t *pos,
                        double *x_out, size_t *ret_above, int dt)
{
  double dhi;

  dhi = -(double)key / QRS__BSCALE;
  if (key == QRS__NBUCKET - 1)
    return KS(collect_range)(v, m, invt, b, QRS__D_UNDERFLOW, dhi, 1, 1,
                             pos, x_out, SIZE_MAX, ret_above, dt);
  return KS(collect_range)(v, m, invt, b, -(double)(key + 1) / QRS__BSCALE,
                           dhi, 0, 1, pos, x_out, SIZE_MAX, ret_above, dt);
}

/* The max of a float32 / 16-bit row at the full float width (the
   conversions are exact), four accumulators; has_nan (NULL: not looked
   for, the read-only floor of the benchmark) gets whether a NaN is in
   the row. */
static inline __attribute__((always_inline)) float
KS(fmax_row)(const struct qrs__view *v, int dt, int *has_nan)
{
  vfl x, mx[4];
  vk nan;
  size_t i, n;
  float m, xi;
  int j, q;

  n = v->n;
  for (q = 0; q < 4; q++)
    mx[q] = KS(splatf)(-INFINITY);
  nan = (vk)KS(splatf)(0.0f);
  for (i = 0; i + 4 * KW <= n; i += 4 * KW) {
    for (q = 0; q < 4; q++) {
      x = KS(loadf)(v->data, i + (size_t)(q * KW), dt);
      if (has_nan)
        nan |= x != x;
      mx[q] = FMAX(x, mx[q]);
    }
  }
  m = -INFINITY;
  for (q = 0; q < 4; q++)
    for (j = 0; j < KW; j++)
      m = mx[q][j] > m ? mx[q][j] : m;
  if (has_nan)
    *has_nan = KS_ANYK(nan);
  for (; i < n; i++) {
    xi = (float)qrs__kload1(v->data, i, dt);
    if (has_nan && xi != xi)
      *has_nan = 1;
    m = xi > m ? xi : m;
  }
  return m;
}

/* The scan of float32 and 16-bit rows. */
static inline __attribute__((always_inline)) void
KS(scan_wide_impl)(const struct qrs__view *v, struct qrs__scan *ret, int dt)
{
  ret->max = KS(fmax_row)(v, dt, &ret->has_nan);
  ret->has_posinf = ret->max == INFINITY;
}

/* The lane-wise max of the 4 KW values from i (i + 4 KW <= n); their
   float sum added to *acc unless acc is NULL. */
static inline __attribute__((always_inline)) vfl
KS(max4)(const void *data, size_t i, int dt, vfl *acc)
{
  vfl a0, a1, a2, a3;

  a0 = KS(loadf)(data, i, dt);
  a1 = KS(loadf)(data, i + KW, dt);
  a2 = KS(loadf)(data, i + 2 * KW, dt);
  a3 = KS(loadf)(data, i + 3 * KW, dt);
  if (acc)
    *acc += (a0 + a1) + (a2 + a3);
  return FMAX(FMAX(a0, a1), FMAX(a2, a3));
}

/* Top-k: a min-heap of the k best so far; a block of 8 is skipped unless
   it holds a value >= the heap minimum (a later position outranks an
   equal value). */
static inline __attribute__((always_inline)) size_t
KS(topk_heap)(const struct qrs__view *v, size_t k, uint32_t *pos,
              double *xo, int *odd, int dt)
{
  vfl acc = KS(splatf)(0.0f);
  int oddv = 0;
  struct qrs__hitem h[QRS__TOPK_HEAP];
  vd x0, x1, bm;
  size_t i, n, first;
  double xi;
  int j;

  n = v->n;
  for (i = 0; i < k; i++) {
    h[i].x = qrs__kload1(v->data, i, dt);
    h[i].pos = (uint32_t)i;
    oddv |= !(h[i].x < INFINITY);
  }
  for (i = k / 2; i-- > 0;)
    qrs__khsift(h, k, i);
  first = (k + 7) & ~(size_t)7;
  if (first > n)
    first = n;
  for (i = k; i < first; i++) {
    xi = qrs__kload1(v->data, i, dt);
    oddv |= !(xi < INFINITY);
    if (xi >= h[0].x) {
      h[0].x = xi;
      h[0].pos = (uint32_t)i;
      qrs__khsift(h, k, 0);
    }
  }
  if (dt != QRS_DTYPE_F64) {
    /* The values are floats: skip KW of them with one float compare
       (h[0].x is one of them, exactly). */
    vfl hm, a0;

    /* 4 KW values per test while none reaches the heap minimum.  acc: a
       float sum of every value, NaN or +inf when the row may hold a NaN
       or +inf (or a sum overflowed: then the caller scans). */
    for (i = first; i + 4 * KW <= n; i += 4 * KW) {
      hm = KS(splatf)((float)h[0].x);
      if (!KS(maskf)((vk)(KS(max4)(v->data, i, dt, odd ? &acc : NULL) >=
                          hm)))
        continue;
      for (j = 0; j < 4 * KW; j++) {
        xi = qrs__kload1(v->data, i + (size_t)j, dt);
        if (xi >= h[0].x) {
          h[0].x = xi;
          h[0].pos = (uint32_t)(i + (size_t)j);
          qrs__khsift(h, k, 0);
        }
      }
    }
    for (; i + KW <= n; i += KW) {
      a0 = KS(loadf)(v->data, i, dt);
      if (odd)
        acc += a0;
      if (!KS(maskf)((vk)(a0 >= (float)h[0].x)))
        continue;
      for (j = 0; j < KW; j++) {
        xi = qrs__kload1(v->data, i + (size_t)j, dt);
        if (xi >= h[0].x) {
          h[0].x = xi;
          h[0].pos = (uint32_t)(i + (size_t)j);
          qrs__khsift(h, k, 0);
        }
      }
    }
    first = i;
  }
  for (i = first; i < n && odd && dt != QRS_DTYPE_F64; i++)
    oddv |= !(qrs__kload1(v->data, i, dt) < INFINITY);
  for (j = 0; j < KW; j++)
    oddv |= !(acc[j] < INFINITY);
  if (odd)
    *odd = oddv;
  for (i = first; i < n; i += 8) {
    x0 = KS(load)(v->data, i, n, dt);
    if (VW == 4) {
      x1 = KS(load)(v->data, i + 4, n, dt);
    } else {
      x1 = KS(load)(v->data, i + 2, n, dt);
      bm = KS(load)(v->data, i + 4, n, dt);
      x0 = VSEL(bm > x0, bm, x0);
      bm = KS(load)(v->data, i + 6, n, dt);
      x1 = VSEL(bm > x1, bm, x1);
    }
    bm = VSEL(x1 > x0, x1, x0);
    if (!KS(any)(bm >= h[0].x))
      continue;
    for (j = 0; j < 8 && i + (size_t)j < n; j++) {
      xi = qrs__kload1(v->data, i + (size_t)j, dt);
      if (xi >= h[0].x) {
        h[0].x = xi;
        h[0].pos = (uint32_t)(i + (size_t)j);
        qrs__khsift(h, k, 0);
      }
    }
  }
  for (i = 0; i < k; i++) {
    pos[i] = h[i].pos;
    xo[i] = h[i].x;
  }
  return k;
}

/* Top-k of a float32 / 16-bit row by block maxima: one pass records the
   max of every block of bs values; t, the k-th largest of those maxima,
   is a value of the row with at least k values >= t (the k blocks'
   maxima), so the k largest of the row in the selection order are all
   >= t and lie in blocks whose max is >= t.  Only those blocks (about k
   of them on a row of distinct values) are read again, their values
   >= t fed in position order to the same min-heap as qrs__ktopk()'s heap
   pass: the heap's order (x, then position) is total, so its final set
   does not depend on which values it saw and dropped.  Costs one read
   pass instead of a heap pass whose k ln(n / k) insertions cost more than
   the read.  Returns 0 when it does not apply (the caller takes the heap
   pass): fewer than 4k blocks, or values >= t that do not fill the heap
   (only a NaN, which the block maxima skip, can do that). */
static inline __attribute__((always_inline)) size_t
KS(topk_blocks)(const struct qrs__view *v, size_t k, uint32_t *pos,
                double *xo, int *odd, int dt)
{
  float bm[QRS__TOPK_NB + 1], sel[QRS__TOPK_NB + 1];
  struct qrs__hitem h[QRS__TOPK_BLOCKS_K];
  vfl acc = KS(splatf)(0.0f), m, tv;
  size_t n = v->n, bs, nb, nbt, b, i, lo, hi, cnt;
  unsigned mk;
  double xi;
  float t, r;
  int j, oddv = 0;

  bs = 4 * 4 * KW;
  while (n / bs > QRS__TOPK_NB)
    bs *= 2;
  nb = n / bs;
  if (nb < 4 * k)
    return 0;
  for (b = 0; b < nb; b++) {
    i = b * bs;
    m = KS(splatf)(-INFINITY);
    for (lo = i; lo < i + bs; lo += 4 * KW)
      m = FMAX(m, KS(max4)(v->data, lo, dt, odd ? &acc : NULL));
    r = -INFINITY;
    for (j = 0; j < KW; j++)
      r = m[j] > r ? m[j] : r;
    bm[b] = r;
  }
  /* the tail: one more block */
  nbt = nb;
  if (nb * bs < n) {
    r = -INFINITY;
    for (i = nb * bs; i < n; i++) {
      xi = qrs__kload1(v->data, i, dt);
      oddv |= !(xi < INFINITY);
      r = xi > r ? (float)xi : r;
    }
    bm[nbt++] = r;
  }
  for (j = 0; j < KW; j++)
    oddv |= !(acc[j] < INFINITY);
  memcpy(sel, bm, nbt * sizeof(*sel));
  t = qrs__kkth_largest(sel, nbt, k);
  tv = KS(splatf)(t);
  cnt = 0;
  for (b = 0; b < nbt; b++) {
    if (!(bm[b] >= t))
      continue;
    lo = b * bs;
    hi = b < nb ? lo + bs : n;
    for (i = lo; i < hi; i += KW) {
      if (i + KW <= hi) {
        mk = KS(maskf)((vk)(KS(loadf)(v->data, i, dt) >= tv));
      } else {
        mk = 0;
        for (j = 0; i + (size_t)j < hi; j++)
          mk |= (unsigned)(qrs__kload1(v->data, i + (size_t)j, dt) >= t)
                << j;
      }
      while (mk) {
        j = __builtin_ctz(mk);
        mk &= mk - 1;
        xi = qrs__kload1(v->data, i + (size_t)j, dt);
        if (cnt < k) {
          h[cnt].x = xi;
          h[cnt].pos = (uint32_t)(i + (size_t)j);
          if (++cnt == k)
            for (lo = k / 2; lo-- > 0;)
              qrs__khsift(h, k, lo);
        } else if (xi >= h[0].x) {
          h[0].x = xi;
          h[0].pos = (uint32_t)(i + (size_t)j);
          qrs__khsift(h, k, 0);
        }
      }
    }
  }
  if (cnt < k)
    return 0;
  if (odd)
    *odd = oddv;
  for (i = 0; i < k; i++) {
    pos[i] = h[i].pos;
    xo[i] = h[i].x;
  }
  return k;
}

static inline __attribute__((always_inline)) size_t
KS(topk_impl)(const struct qrs__view *v, size_t k, uint32_t *pos,
              double *xo, int *odd, int dt)
{
  size_t r;

  if (dt != QRS_DTYPE_F64 && k <= QRS__TOPK_BLOCKS_K &&
      (r = KS(topk_blocks)(v, k, pos, xo, odd, dt)) != 0)
    return r;
  return KS(topk_heap)(v, k, pos, xo, odd, dt);
}

/* The max of the block [i, end) of a row of n values, full the end of
   its whole pairs of vectors.  nan (NULL: not looked for): its lanes
   set where a vector held a NaN; *has_nan set to 1 when the rest
   does. */
static inline __attribute__((always_inline)) double
KS(block_max)(const void *data, size_t i, size_t full, size_t end, size_t n,
              int dt, vi *nan, int *has_nan)
{
  vd x, mx0, mx1;
  size_t j;
  double bm, xi;
  int l;

  mx0 = mx1 = KS(splat)(-INFINITY);
  for (j = i; j < full; j += 2 * VW) {
    x = KS(load)(data, j, n, dt);
    if (nan)
      *nan |= x != x;
    mx0 = VSEL(x > mx0, x, mx0);
    x = KS(load)(data, j + VW, n, dt);
    if (nan)
      *nan |= x != x;
    mx1 = VSEL(x > mx1, x, mx1);
  }
  mx0 = VSEL(mx1 > mx0, mx1, mx0);
  bm = mx0[0];
  for (l = 1; l < VW; l++)
    bm = mx0[l] > bm ? mx0[l] : bm;
  for (j = full; j < end; j++) {
    xi = qrs__kload1(data, j, dt);
    if (nan && xi != xi)
      *has_nan = 1;
    bm = xi > bm ? xi : bm;
  }
  return bm;
}

/* The floor: blocks of QRS__FLOOR_BLOCK values, each read from memory once
   (its max and then its exponentials while it sits in L1). */
static inline __attribute__((always_inline)) double
KS(floor_impl)(const struct qrs__view *v, double *ret_max, int dt)
{
  vd s0, s1, d;
  size_t i, j, n, end, full;
  double run_max, sum, bm;

  n = v->n;
  run_max = -INFINITY;
  sum = 0.0;
  for (i = 0; i < n; i = end) {
    end = i + QRS__FLOOR_BLOCK < n ? i + QRS__FLOOR_BLOCK : n;
    full = i + ((end - i) & ~(size_t)(2 * VW - 1));
    bm = KS(block_max)(v->data, i, full, end, n, dt, NULL, NULL);
    if (bm > run_max) {
      sum = run_max == -INFINITY ? 0.0 : sum * exp(run_max - bm);
      run_max = bm;
    }
    s0 = s1 = KS(splat)(0.0);
    for (j = i; j < full; j += 2 * VW) {
      d = KS(load)(v->data, j, n, dt) - run_max;
      d = VSEL(d < QRS__D_CLAMP, KS(splat)(QRS__D_CLAMP), d);
      s0 += VZERO(~(d < QRS__D_NORMAL), KS(exp)(d));
      d = KS(load)(v->data, j + VW, n, dt) - run_max;
      d = VSEL(d < QRS__D_CLAMP, KS(splat)(QRS__D_CLAMP), d);
      s1 += VZERO(~(d < QRS__D_NORMAL), KS(exp)(d));
    }
    for (j = full; j < end; j++)
      sum += exp(qrs__kload1(v->data, j, dt) - run_max);
    sum += KS(hsum)(s0 + s1);
  }
  *ret_max = run_max;
  return sum;
}

/* Scan and entropy sums in one pass: blocks of QRS__FLOOR_BLOCK values,
   each read once (its max, then its weights against the running max,
   which rescales the sums when it grows).  Returns 1 when a weight fell below
   the normal range (the caller then redoes the sums with the final max:
   exact subnormal weights need it). */
static inline __attribute__((always_inline)) int
KS(scan_entropy_impl)(const struct qrs__view *v, struct qrs__scan *sc,
                      struct qrs__mass *ms, int dt)
{
  vd x, d, dc, e, ed, az, aw, aw2;
  vi nan, small;
  size_t i, j, n, end, full;
  double m, bm, dl, f, z, w, w2, xi, ei;
  int anysmall;

  n = v->n;
  m = -INFINITY;
  z = w = w2 = 0.0;
  nan = (vi)KS(splat)(0.0);
  anysmall = 0;
  sc->has_nan = 0;
  for (i = 0; i < n; i = end) {
    end = i + QRS__FLOOR_BLOCK < n ? i + QRS__FLOOR_BLOCK : n;
    full = i + ((end - i) & ~(size_t)(2 * VW - 1));
    bm = KS(block_max)(v->data, i, full, end, n, dt, &nan, &sc->has_nan);
    if (bm > m) {
      if (m > -INFINITY && bm < INFINITY) {
        /* d against the new max is d - dl: rescale the sums. */
        dl = bm - m;
        if (!(dl <= -QRS__D_UNDERFLOW)) {
          /* Every earlier weight is 0 against the new max (and dl may be
             inf, e.g. after a -DBL_MAX mask: dl * dl would overflow). */
          z = w = w2 = 0.0;
        } else {
          f = exp(-dl);
          w2 = f * (w2 - 2.0 * dl * w + dl * dl * z);
          w = f * (w - dl * z);
          z = f * z;
        }
      }
      m = bm;
    }
    if (!(m > -INFINITY && m < INFINITY))
      continue;   /* nothing finite yet, or +inf: the row is rejected */
    az = aw = aw2 = KS(splat)(0.0);
    for (j = i; j < full; j += VW) {
      x = KS(load)(v->data, j, n, dt);
      d = x - m;
      dc = VSEL(d < QRS__D_CLAMP, KS(splat)(QRS__D_CLAMP), d);
      e = KS(exp)(dc);
      small = dc < QRS__D_NORMAL;
      anysmall |= KS(any)(small & (dc >= QRS__D_UNDERFLOW));
      e = VZERO(~small, e);
      ed = e * dc;
      az += e;
      aw += ed;
      aw2 += ed * dc;
    }
    z += KS(hsum)(az);
    w += KS(hsum)(aw);
    w2 += KS(hsum)(aw2);
    for (j = full; j < end; j++) {
      xi = qrs__kload1(v->data, j, dt) - m;
      if (xi < QRS__D_NORMAL) {
        anysmall |= xi >= QRS__D_UNDERFLOW;
        continue;
      }
      ei = exp(xi);
      z += ei;
      w += ei * xi;
      w2 += ei * xi * xi;
    }
  }
  sc->max = m;
  sc->has_nan |= KS(any)(nan);
  sc->has_posinf = m == INFINITY;
  ms->z = z;
  ms->w = w;
  ms->w2 = w2;
  return anysmall;
}
