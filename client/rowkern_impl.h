/* Kernel template, included by rowkern.c once per instruction set with:
     KS(name)  the name with the set's suffix
     VW        lanes (doubles per vector)
     vd, vi      vector types: VW doubles, VW int64
     KS_LOAD_F32(p)  VW floats at p as a vd
     KS_LOAD_F16(p), KS_LOAD_BF16(p)  the same for 16-bit types (optional)
     KS_STORE_KEYS(p, t)  VW int32 at p from the doubles t (in range)
     KW, vk, vfl  int32 / float vectors of the native width (KW lanes)
     KS_ANYK(m)   whether any lane of the vk mask m is set
   Vectors are always of the machine's native width: GCC lowers wider
   vector comparisons lane by lane. */

#define VSEL(c, a, b) ((vd)(((vi)(c) & (vi)(a)) | (~(vi)(c) & (vi)(b))))
#define VZERO(c, a) ((vd)((vi)(a) & (vi)(c)))

static inline __attribute__((always_inline)) vd
KS(splat)(double x)
{
  vd v;
  int j;

  for (j = 0; j < VW; j++)
    v[j] = x;
  return v;
}

static inline __attribute__((always_inline)) vd
KS(iota)(size_t base)
{
  vd v;
  int j;

  for (j = 0; j < VW; j++)
    v[j] = (double)(base + (size_t)j);
  return v;
}

static inline __attribute__((always_inline)) int
KS(any)(vi m)
{
#ifdef KS_MOVEMASK
  return KS_MOVEMASK(m) != 0;
#else
  int64_t r;
  int j;

  r = 0;
  for (j = 0; j < VW; j++)
    r |= m[j];
  return r != 0;
#endif
}

static inline __attribute__((always_inline)) double
KS(hsum)(vd v)
{
  double s;
  int j;

  s = v[0];
  for (j = 1; j < VW; j++)
    s += v[j];
  return s;
}

static inline __attribute__((always_inline)) int64_t
KS(hsumi)(vi v)
{
  int64_t s;
  int j;

  s = 0;
  for (j = 0; j < VW; j++)
    s += v[j];
  return s;
}

static inline __attribute__((always_inline)) vfl
KS(splatf)(float x)
{
  vfl v;
  int j;

  for (j = 0; j < KW; j++)
    v[j] = x;
  return v;
}

/* KW floats of a float32 / float16 / bfloat16 row from i (i + KW <= n);
   exact conversions. */
static inline __attribute__((always_inline)) vfl
KS(loadf)(const void *data, size_t i, int dt)
{
  vfl x;
  int j;

  if (dt == QRS_DTYPE_F32) {
    memcpy(&x, (const float *)data + i, sizeof(x));
    return x;
  }
#ifdef KS_LOADF_F16
  if (dt == QRS_DTYPE_F16)
    return KS_LOADF_F16((const uint16_t *)data + i);
  if (dt == QRS_DTYPE_BF16)
    return KS_LOADF_BF16((const uint16_t *)data + i);
#endif
  x = KS(splatf)(0.0f);
  for (j = 0; j < KW; j++)
    x[j] = (float)load1(data, i + (size_t)j, dt);
  return x;
}

static inline __attribute__((always_inline)) unsigned
KS(maskf)(vk m)
{
#ifdef KS_MOVEMASKF
  return (unsigned)KS_MOVEMASKF(m);
#else
  unsigned r = 0;
  int j;

  for (j = 0; j < KW; j++)
    r |= (unsigned)(m[j] != 0) << j;
  return r;
#endif
}


#define FMAX(a, b) \
  ((vfl)(((vk)((a) > (b)) & (vk)(a)) | (~(vk)((a) > (b)) & (vk)(b))))
#define FMIN(a, b) \
  ((vfl)(((vk)((a) < (b)) & (vk)(a)) | (~(vk)((a) < (b)) & (vk)(b))))

/* VW values from data[i..), n: row length (lanes past it are 0). */
static inline __attribute__((always_inline)) vd
KS(load)(const void *data, size_t i, size_t n, int dt)
{
  vd x;
  int j;

  if (i + VW <= n) {
    if (dt == QRS_DTYPE_F32)
      return KS_LOAD_F32((const float *)data + i);
    if (dt == QRS_DTYPE_F64) {
      memcpy(&x, (const double *)data + i, sizeof(x));
      return x;
    }
#ifdef KS_LOAD_F16
    if (dt == QRS_DTYPE_F16)
      return KS_LOAD_F16((const uint16_t *)data + i);
    if (dt == QRS_DTYPE_BF16)
      return KS_LOAD_BF16((const uint16_t *)data + i);
#endif
    for (j = 0; j < VW; j++)
      x[j] = load1(data, i + (size_t)j, dt);
    return x;
  }
  for (j = 0; j < VW; j++)
    x[j] = i + (size_t)j < n ? load1(data, i + (size_t)j, dt) : 0.0;
  return x;
}

/* exp(d) for D_NORMAL <= d <= 0 (lanes below are clamped, caller masks). */
static inline __attribute__((always_inline)) vd
KS(exp)(vd d)
{
  const double shifter = 0x1.8p52;
  vd t, kd, r, p;
  vi ki;

  d = VSEL(d < D_NORMAL, KS(splat)(D_NORMAL), d);
  t = d * 1.4426950408889634 + shifter;
  kd = t - shifter;
  ki = (vi)t - (vi)KS(splat)(shifter);
  r = d - kd * 0.693147180369123816490;
  r = r - kd * 1.90821492927058770002e-10;
  /* Near-minimax degree 11 (Chebyshev interpolation on
     [-0.3466, 0.3466]): relative error 1.7e-17 before rounding. */
  p = KS(splat)(2.5110049204818658e-08);
  p = 2.763265472252779e-07 + r * p;
  p = 2.755724088722987e-06 + r * p;
  p = 2.4801485441561313e-05 + r * p;
  p = 0.00019841269890076403 + r * p;
  p = 0.0013888888952352863 + r * p;
  p = 0.008333333333319589 + r * p;
  p = 0.04166666666648795 + r * p;
  p = 0.1666666666666668 + r * p;
  p = 0.5000000000000019 + r * p;
  p = 1.0 + r * p;
  p = 1.0 + r * p;
  return p * (vd)((ki + 1023) << 52);
}

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
              struct hblock *hb)
{
  vd d, dc, e, ed, t;
  vi in, small, hd;
  size_t k;
  int j;

  d = (x - m) * invt;
  dc = VSEL(d < D_CLAMP, KS(splat)(D_CLAMP), d);
  e = KS(exp)(dc);
  small = dc < D_NORMAL;
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
  struct hblock hb;
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
    end = i + HBLOCK < n ? i + HBLOCK : n;
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
      head_block(ret, &hb, h, fw ? hw : NULL);
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
    mass_tiny(v, m, invt, b, pinv, pmin, ret, fw, fh);
}

#define KS_MASS(sfx, dt, fw, fb) \
  static KS_TARGET void \
  KS(mass_##sfx)(const struct qrs__view *v, double m, double invt, \
                 const struct qrs__bound *b, double pinv, double pmin, \
                 struct qrs__mass *ret) \
  { \
    KS(mass_impl)(v, m, invt, b, pinv, pmin, ret, dt, fw, fb); \
  }

KS_MASS(f32_p, QRS_DTYPE_F32, 0, 0)
KS_MASS(f32_b, QRS_DTYPE_F32, 0, 1)
KS_MASS(f32_w, QRS_DTYPE_F32, 1, 0)
KS_MASS(f32_wb, QRS_DTYPE_F32, 1, 1)
KS_MASS(f64_p, QRS_DTYPE_F64, 0, 0)
KS_MASS(f64_b, QRS_DTYPE_F64, 0, 1)
KS_MASS(f64_w, QRS_DTYPE_F64, 1, 0)
KS_MASS(f64_wb, QRS_DTYPE_F64, 1, 1)
KS_MASS(f16_p, QRS_DTYPE_F16, 0, 0)
KS_MASS(f16_b, QRS_DTYPE_F16, 0, 1)
KS_MASS(f16_w, QRS_DTYPE_F16, 1, 0)
KS_MASS(f16_wb, QRS_DTYPE_F16, 1, 1)
KS_MASS(bf16_p, QRS_DTYPE_BF16, 0, 0)
KS_MASS(bf16_b, QRS_DTYPE_BF16, 0, 1)
KS_MASS(bf16_w, QRS_DTYPE_BF16, 1, 0)
KS_MASS(bf16_wb, QRS_DTYPE_BF16, 1, 1)

static const mass_fn KS(mass_fns)[4][4] = {
  { KS(mass_f32_p), KS(mass_f32_b), KS(mass_f32_w), KS(mass_f32_wb) },
  { KS(mass_f16_p), KS(mass_f16_b), KS(mass_f16_w), KS(mass_f16_wb) },
  { KS(mass_bf16_p), KS(mass_bf16_b), KS(mass_bf16_w), KS(mass_bf16_wb) },
  { KS(mass_f64_p), KS(mass_f64_b), KS(mass_f64_w), KS(mass_f64_wb) },
};

/* Collect the set's elements with dlo <= d < dhi. */
static inline __attribute__((always_inline)) size_t
KS(collect_impl)(const struct qrs__view *v, double m, double invt,
                 const struct qrs__bound *b, double dlo, double dhi,
                 uint32_t *pos_out, double *x_out, size_t cap,
                 size_t *ret_above, int dt)
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
    hi = d >= dhi;
    sel = ~hi & (d >= dlo);
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

#define KS_COLLECT(sfx, dt) \
  static KS_TARGET size_t \
  KS(collect_##sfx)(const struct qrs__view *v, double m, double invt, \
                    const struct qrs__bound *b, double dlo, double dhi, \
                    uint32_t *pos, double *x, size_t cap, size_t *above) \
  { \
    return KS(collect_impl)(v, m, invt, b, dlo, dhi, pos, x, cap, above, \
                            dt); \
  }

KS_COLLECT(f32, QRS_DTYPE_F32)
KS_COLLECT(f16, QRS_DTYPE_F16)
KS_COLLECT(bf16, QRS_DTYPE_BF16)
KS_COLLECT(f64, QRS_DTYPE_F64)

static const collect_fn KS(collect_fns)[4] = {
  KS(collect_f32), KS(collect_f16), KS(collect_bf16), KS(collect_f64),
};

static KS_TARGET void
KS(kexp)(double *p, size_t n, double m, double invt)
{
  vd x, d, dc, e;
  vi small;
  size_t i;
  int j;

  for (i = 0; i < n; i += VW) {
    x = KS(load)(p, i, n, QRS_DTYPE_F64);
    d = (x - m) * invt;
    dc = VSEL(d < D_CLAMP, KS(splat)(D_CLAMP), d);
    e = KS(exp)(dc);
    small = dc < D_NORMAL;
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

#define KS_SCAN(sfx, dt) \
  static KS_TARGET void \
  KS(scan_##sfx)(const struct qrs__view *v, struct qrs__scan *ret) \
  { \
    KS(scan_impl)(v, ret, dt); \
  }

KS_SCAN(f64, QRS_DTYPE_F64)


/* The set's elements in histogram bucket key of a mass pass at invt
   (keys recomputed exactly as the pass computed them): positions
   (ascending) and values; *ret_above: set elements in lower buckets. */
static inline __attribute__((always_inline)) size_t
KS(collect_bucket_impl)(const struct qrs__view *v, double m, double invt,
                        const struct qrs__bound *b, int key, uint32_t *pos,
                        double *x_out, size_t *ret_above, int dt)
{
  vd x, d, p, above, above2;
  vi in, hi, sel;
  size_t i, n, cnt;
  double dhi, dlo;
  int j, restricted;

  /* The bucket of d is trunc(-d * 16) (clamped): scaling by 16 is exact,
     so bucket key is exactly -(key + 1) / 16 < d <= -key / 16, and the
     last bucket everything down to the underflow limit. */
  dhi = -(double)key / QRS__BSCALE;
  dlo = key == QRS__NBUCKET - 1 ? QRS__D_UNDERFLOW
                                : -(double)(key + 1) / QRS__BSCALE;
  n = v->n;
  cnt = 0;
  above = above2 = KS(splat)(0.0);
  p = KS(iota)(0);
  restricted = b->x > -INFINITY || b->i > 0;
  for (i = 0; i < n; i += VW, p += (double)VW) {
    x = KS(load)(v->data, i, n, dt);
    d = (x - m) * invt;
    hi = d > dhi;
    if (key == QRS__NBUCKET - 1)
      sel = ~hi & (d >= dlo);
    else
      sel = ~hi & (d > dlo);
    if (restricted || i + VW > n) {
      in = KS(member)(x, p, (double)n, b, m, 1.0, -INFINITY);
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
      pos[cnt] = (uint32_t)(i + (size_t)j);
      x_out[cnt] = x[j];
      cnt++;
    }
  }
  if (ret_above)
    *ret_above = (size_t)KS(hsum)(above + above2);
  return cnt;
}

#define KS_CBUCKET(sfx, dt) \
  static KS_TARGET size_t \
  KS(cbucket_##sfx)(const struct qrs__view *v, double m, double invt, \
                    const struct qrs__bound *b, int key, uint32_t *pos, \
                    double *x, size_t *above) \
  { \
    return KS(collect_bucket_impl)(v, m, invt, b, key, pos, x, above, dt); \
  }

KS_CBUCKET(f32, QRS_DTYPE_F32)
KS_CBUCKET(f16, QRS_DTYPE_F16)
KS_CBUCKET(bf16, QRS_DTYPE_BF16)
KS_CBUCKET(f64, QRS_DTYPE_F64)

static const cbucket_fn KS(cbucket_fns)[4] = {
  KS(cbucket_f32), KS(cbucket_f16), KS(cbucket_bf16), KS(cbucket_f64),
};

/* The scan of float32 and 16-bit rows at the full float width (the
   conversions are exact). */
static inline __attribute__((always_inline)) void
KS(scan_wide_impl)(const struct qrs__view *v, struct qrs__scan *ret, int dt)
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
      nan |= x != x;
      mx[q] = FMAX(x, mx[q]);
    }
  }
  m = -INFINITY;
  for (q = 0; q < 4; q++)
    for (j = 0; j < KW; j++)
      m = mx[q][j] > m ? mx[q][j] : m;
  ret->has_nan = KS_ANYK(nan);
  for (; i < n; i++) {
    xi = (float)load1(v->data, i, dt);
    if (xi != xi)
      ret->has_nan = 1;
    m = xi > m ? xi : m;
  }
  ret->max = m;
  ret->has_posinf = ret->max == INFINITY;
}

#define KS_SCANW(sfx, dt) \
  static KS_TARGET void \
  KS(scanw_##sfx)(const struct qrs__view *v, struct qrs__scan *ret) \
  { \
    KS(scan_wide_impl)(v, ret, dt); \
  }

KS_SCANW(f32, QRS_DTYPE_F32)
KS_SCANW(f16, QRS_DTYPE_F16)
KS_SCANW(bf16, QRS_DTYPE_BF16)

static const scan_fn KS(scan_fns)[4] = {
  KS(scanw_f32), KS(scanw_f16), KS(scanw_bf16), KS(scan_f64),
};

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
  struct hitem h[QRS__TOPK_HEAP];
  vd x0, x1, bm;
  size_t i, n, first;
  double xi;
  int j;

  n = v->n;
  for (i = 0; i < k; i++) {
    h[i].x = load1(v->data, i, dt);
    h[i].pos = (uint32_t)i;
    oddv |= !(h[i].x < INFINITY);
  }
  for (i = k / 2; i-- > 0;)
    hsift(h, k, i);
  first = (k + 7) & ~(size_t)7;
  if (first > n)
    first = n;
  for (i = k; i < first; i++) {
    xi = load1(v->data, i, dt);
    oddv |= !(xi < INFINITY);
    if (xi >= h[0].x) {
      h[0].x = xi;
      h[0].pos = (uint32_t)i;
      hsift(h, k, 0);
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
        xi = load1(v->data, i + (size_t)j, dt);
        if (xi >= h[0].x) {
          h[0].x = xi;
          h[0].pos = (uint32_t)(i + (size_t)j);
          hsift(h, k, 0);
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
        xi = load1(v->data, i + (size_t)j, dt);
        if (xi >= h[0].x) {
          h[0].x = xi;
          h[0].pos = (uint32_t)(i + (size_t)j);
          hsift(h, k, 0);
        }
      }
    }
    first = i;
  }
  for (i = first; i < n && odd && dt != QRS_DTYPE_F64; i++)
    oddv |= !(load1(v->data, i, dt) < INFINITY);
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
      xi = load1(v->data, i + (size_t)j, dt);
      if (xi >= h[0].x) {
        h[0].x = xi;
        h[0].pos = (uint32_t)(i + (size_t)j);
        hsift(h, k, 0);
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
  struct hitem h[QRS__TOPK_BLOCKS_K];
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
      xi = load1(v->data, i, dt);
      oddv |= !(xi < INFINITY);
      r = xi > r ? (float)xi : r;
    }
    bm[nbt++] = r;
  }
  for (j = 0; j < KW; j++)
    oddv |= !(acc[j] < INFINITY);
  memcpy(sel, bm, nbt * sizeof(*sel));
  t = kth_largest_f(sel, nbt, k);
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
          mk |= (unsigned)(load1(v->data, i + (size_t)j, dt) >= t) << j;
      }
      while (mk) {
        j = __builtin_ctz(mk);
        mk &= mk - 1;
        xi = load1(v->data, i + (size_t)j, dt);
        if (cnt < k) {
          h[cnt].x = xi;
          h[cnt].pos = (uint32_t)(i + (size_t)j);
          if (++cnt == k)
            for (lo = k / 2; lo-- > 0;)
              hsift(h, k, lo);
        } else if (xi >= h[0].x) {
          h[0].x = xi;
          h[0].pos = (uint32_t)(i + (size_t)j);
          hsift(h, k, 0);
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

#define KS_TOPK(sfx, dt) \
  static KS_TARGET size_t \
  KS(topk_##sfx)(const struct qrs__view *v, size_t k, uint32_t *pos, \
                 double *x) \
  { \
    return KS(topk_impl)(v, k, pos, x, NULL, dt); \
  } \
  static KS_TARGET size_t \
  KS(topkscan_##sfx)(const struct qrs__view *v, size_t k, uint32_t *pos, \
                     double *x, int *odd) \
  { \
    return KS(topk_impl)(v, k, pos, x, odd, dt); \
  }

KS_TOPK(f32, QRS_DTYPE_F32)
KS_TOPK(f16, QRS_DTYPE_F16)
KS_TOPK(bf16, QRS_DTYPE_BF16)
KS_TOPK(f64, QRS_DTYPE_F64)

static const topk_fn KS(topk_fns)[4] = {
  KS(topk_f32), KS(topk_f16), KS(topk_bf16), KS(topk_f64),
};

static const topkscan_fn KS(topkscan_fns)[4] = {
  KS(topkscan_f32), KS(topkscan_f16), KS(topkscan_bf16), KS(topkscan_f64),
};

/* The floor: blocks of FLOOR_BLOCK values, each read from memory once
   (its max and then its exponentials while it sits in L1). */
static inline __attribute__((always_inline)) double
KS(floor_impl)(const struct qrs__view *v, double *ret_max, int dt)
{
  vd x, mx0, mx1, s0, s1, d;
  size_t i, j, n, end, full;
  double run_max, sum, bm, xi;
  int l;

  n = v->n;
  run_max = -INFINITY;
  sum = 0.0;
  for (i = 0; i < n; i = end) {
    end = i + FLOOR_BLOCK < n ? i + FLOOR_BLOCK : n;
    full = i + ((end - i) & ~(size_t)(2 * VW - 1));
    mx0 = mx1 = KS(splat)(-INFINITY);
    for (j = i; j < full; j += 2 * VW) {
      x = KS(load)(v->data, j, n, dt);
      mx0 = VSEL(x > mx0, x, mx0);
      x = KS(load)(v->data, j + VW, n, dt);
      mx1 = VSEL(x > mx1, x, mx1);
    }
    mx0 = VSEL(mx1 > mx0, mx1, mx0);
    bm = mx0[0];
    for (l = 1; l < VW; l++)
      bm = mx0[l] > bm ? mx0[l] : bm;
    for (j = full; j < end; j++) {
      xi = load1(v->data, j, dt);
      bm = xi > bm ? xi : bm;
    }
    if (bm > run_max) {
      sum = run_max == -INFINITY ? 0.0 : sum * exp(run_max - bm);
      run_max = bm;
    }
    s0 = s1 = KS(splat)(0.0);
    for (j = i; j < full; j += 2 * VW) {
      d = KS(load)(v->data, j, n, dt) - run_max;
      d = VSEL(d < D_CLAMP, KS(splat)(D_CLAMP), d);
      s0 += VZERO(~(d < D_NORMAL), KS(exp)(d));
      d = KS(load)(v->data, j + VW, n, dt) - run_max;
      d = VSEL(d < D_CLAMP, KS(splat)(D_CLAMP), d);
      s1 += VZERO(~(d < D_NORMAL), KS(exp)(d));
    }
    for (j = full; j < end; j++)
      sum += exp(load1(v->data, j, dt) - run_max);
    sum += KS(hsum)(s0 + s1);
  }
  *ret_max = run_max;
  return sum;
}

#define KS_FLOOR(sfx, dt) \
  static KS_TARGET double \
  KS(floor_##sfx)(const struct qrs__view *v, double *ret_max) \
  { \
    return KS(floor_impl)(v, ret_max, dt); \
  }

KS_FLOOR(f32, QRS_DTYPE_F32)
KS_FLOOR(f16, QRS_DTYPE_F16)
KS_FLOOR(bf16, QRS_DTYPE_BF16)
KS_FLOOR(f64, QRS_DTYPE_F64)

static const floor_fn KS(floor_fns)[4] = {
  KS(floor_f32), KS(floor_f16), KS(floor_bf16), KS(floor_f64),
};

/* Scan and entropy sums in one pass: blocks of FLOOR_BLOCK values, each
   read once (its max, then its weights against the running max, which
   rescales the sums when it grows).  Returns 1 when a weight fell below
   the normal range (the caller then redoes the sums with the final max:
   exact subnormal weights need it). */
static inline __attribute__((always_inline)) int
KS(scan_entropy_impl)(const struct qrs__view *v, struct qrs__scan *sc,
                      struct qrs__mass *ms, int dt)
{
  vd x, mx0, mx1, d, dc, e, ed, az, aw, aw2;
  vi nan, small;
  size_t i, j, n, end, full;
  double m, bm, dl, f, z, w, w2, xi, ei;
  int l, anysmall;

  n = v->n;
  m = -INFINITY;
  z = w = w2 = 0.0;
  nan = (vi)KS(splat)(0.0);
  anysmall = 0;
  sc->has_nan = 0;
  for (i = 0; i < n; i = end) {
    end = i + FLOOR_BLOCK < n ? i + FLOOR_BLOCK : n;
    full = i + ((end - i) & ~(size_t)(2 * VW - 1));
    mx0 = mx1 = KS(splat)(-INFINITY);
    for (j = i; j < full; j += 2 * VW) {
      x = KS(load)(v->data, j, n, dt);
      nan |= x != x;
      mx0 = VSEL(x > mx0, x, mx0);
      x = KS(load)(v->data, j + VW, n, dt);
      nan |= x != x;
      mx1 = VSEL(x > mx1, x, mx1);
    }
    mx0 = VSEL(mx1 > mx0, mx1, mx0);
    bm = mx0[0];
    for (l = 1; l < VW; l++)
      bm = mx0[l] > bm ? mx0[l] : bm;
    for (j = full; j < end; j++) {
      xi = load1(v->data, j, dt);
      if (xi != xi)
        sc->has_nan = 1;
      bm = xi > bm ? xi : bm;
    }
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
      dc = VSEL(d < D_CLAMP, KS(splat)(D_CLAMP), d);
      e = KS(exp)(dc);
      small = dc < D_NORMAL;
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
      xi = load1(v->data, j, dt) - m;
      if (xi < D_NORMAL) {
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

#define KS_SCANH(sfx, dt) \
  static KS_TARGET int \
  KS(scanh_##sfx)(const struct qrs__view *v, struct qrs__scan *sc, \
                  struct qrs__mass *ms) \
  { \
    return KS(scan_entropy_impl)(v, sc, ms, dt); \
  }

KS_SCANH(f32, QRS_DTYPE_F32)
KS_SCANH(f16, QRS_DTYPE_F16)
KS_SCANH(bf16, QRS_DTYPE_BF16)
KS_SCANH(f64, QRS_DTYPE_F64)

static const scanh_fn KS(scanh_fns)[4] = {
  KS(scanh_f32), KS(scanh_f16), KS(scanh_bf16), KS(scanh_f64),
};

/* ---- float-width passes (float32 and 16-bit rows) ---- */

/* The set of the whole row's elements with dlo <= (x - m) * invt (in
   double, exactly as collect_impl decides), found by a float compare
   against a threshold no element of the set is below, then the exact
   test on the few lanes that pass.  thr: that threshold. */
static inline __attribute__((always_inline)) size_t
KS(fcollect_impl)(const struct qrs__view *v, double m, double invt,
                  double dlo, float thr, uint32_t *pos_out, double *x_out,
                  size_t cap, int dt)
{
  vfl x, t;
  size_t i, n, cnt;
  unsigned mask;
  double xd;
  int j;

  n = v->n;
  cnt = 0;
  t = KS(splatf)(thr);
  for (i = 0; i + KW <= n; i += KW) {
    x = KS(loadf)(v->data, i, dt);
    mask = KS(maskf)((vk)(x >= t));
    while (mask) {
      j = __builtin_ctz(mask);
      mask &= mask - 1;
      xd = x[j];
      if (!((xd - m) * invt >= dlo))
        continue;
      if (cnt < cap) {
        pos_out[cnt] = (uint32_t)(i + (size_t)j);
        x_out[cnt] = xd;
      }
      cnt++;
    }
  }
  for (; i < n; i++) {
    xd = load1(v->data, i, dt);
    if (!((xd - m) * invt >= dlo))
      continue;
    if (cnt < cap) {
      pos_out[cnt] = (uint32_t)i;
      x_out[cnt] = xd;
    }
    cnt++;
  }
  return cnt;
}

#define KS_FCOLLECT(sfx, dt) \
  static KS_TARGET size_t \
  KS(fcollect_##sfx)(const struct qrs__view *v, double m, double invt, \
                     double dlo, float thr, uint32_t *pos, double *x, \
                     size_t cap) \
  { \
    return KS(fcollect_impl)(v, m, invt, dlo, thr, pos, x, cap, dt); \
  }

KS_FCOLLECT(f32, QRS_DTYPE_F32)
KS_FCOLLECT(f16, QRS_DTYPE_F16)
KS_FCOLLECT(bf16, QRS_DTYPE_BF16)

static const fcollect_fn KS(fcollect_fns)[4] = {
  KS(fcollect_f32), KS(fcollect_f16), KS(fcollect_bf16), NULL,
};

/* exp(d) in float for d <= 0: d = k ln2 + r, |r| <= ln2 / 2 (ln2 split in
   two floats), the degree-6 Taylor polynomial of exp(r) (truncation below
   1.2e-7 relative), times 2^k built in the exponent field; 0 below
   FEXP_MIN (where the result would leave the normal range). */
#define FEXP_MIN (-87.0f)

/* exp(d) in float for FEXP_MIN <= d <= 0 (no clamp: the caller's); a
   NaN d gives a NaN or garbage, never an exception. */
static inline __attribute__((always_inline)) vfl
KS(expf_core)(vfl d)
{
  vfl kf, r, p;
  vk ki;

  kf = d * 1.44269504f + 12582912.0f;
  ki = (vk)kf - (vk)KS(splatf)(12582912.0f);
  kf = kf - 12582912.0f;
  r = d - kf * 0.693145751953125f;
  r = r - kf * 1.428606765330187e-06f;
  p = 1.0f / 720 * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return (vfl)((vk)p + (ki << 23));
}

static inline __attribute__((always_inline)) vfl
KS(expf)(vfl d)
{
  vk lo;

  lo = d < FEXP_MIN;
  d = (vfl)(((vk)d & ~lo) | ((vk)KS(splatf)(FEXP_MIN) & lo));
  return (vfl)((vk)KS(expf_core)(d) & ~lo);
}

static KS_TARGET float
KS(expf1)(float d)
{
  vfl t = KS(splatf)(d);

  t = KS(expf)(FMAX(t, KS(splatf)(FEXP_MIN)));
  return d >= FEXP_MIN ? t[0] : 0.0f;
}

/* The benchmark's floor: max and sum(exp(x - max)) in float, each block
   read from memory once (its max, then its exponentials from L1). */
static inline __attribute__((always_inline)) double
KS(ffloor_impl)(const struct qrs__view *v, double *ret_max, int dt)
{
  vfl x, mx0, mx1, s0, s1;
  size_t i, j, n, end, full;
  double run_max, sum;
  float bm, xi;
  int l;

  n = v->n;
  run_max = -INFINITY;
  sum = 0.0;
  for (i = 0; i < n; i = end) {
    end = i + FLOOR_BLOCK < n ? i + FLOOR_BLOCK : n;
    full = i + ((end - i) & ~(size_t)(2 * KW - 1));
    mx0 = mx1 = KS(splatf)(-INFINITY);
    for (j = i; j < full; j += 2 * KW) {
      x = KS(loadf)(v->data, j, dt);
      mx0 = FMAX(x, mx0);
      x = KS(loadf)(v->data, j + KW, dt);
      mx1 = FMAX(x, mx1);
    }
    mx0 = FMAX(mx1, mx0);
    bm = mx0[0];
    for (l = 1; l < KW; l++)
      bm = mx0[l] > bm ? mx0[l] : bm;
    for (j = full; j < end; j++) {
      xi = (float)load1(v->data, j, dt);
      bm = xi > bm ? xi : bm;
    }
    if (bm > run_max) {
      sum = run_max == -INFINITY ? 0.0 : sum * exp(run_max - bm);
      run_max = bm;
    }
    s0 = s1 = KS(splatf)(0.0f);
    for (j = i; j < full; j += 2 * KW) {
      s0 += KS(expf)(KS(loadf)(v->data, j, dt) - (float)run_max);
      s1 += KS(expf)(KS(loadf)(v->data, j + KW, dt) - (float)run_max);
    }
    s0 += s1;
    for (l = 0; l < KW; l++)
      sum += s0[l];
    for (j = full; j < end; j++)
      sum += exp(load1(v->data, j, dt) - run_max);
  }
  *ret_max = run_max;
  return sum;
}

/* The read-only floor: the max, four accumulators. */
static inline __attribute__((always_inline)) double
KS(fread_impl)(const struct qrs__view *v, int dt)
{
  vfl x, mx[4];
  size_t i, n;
  float m, xi;
  int j, q;

  n = v->n;
  for (q = 0; q < 4; q++)
    mx[q] = KS(splatf)(-INFINITY);
  for (i = 0; i + 4 * KW <= n; i += 4 * KW) {
    for (q = 0; q < 4; q++) {
      x = KS(loadf)(v->data, i + (size_t)(q * KW), dt);
      mx[q] = FMAX(x, mx[q]);
    }
  }
  m = -INFINITY;
  for (q = 0; q < 4; q++)
    for (j = 0; j < KW; j++)
      m = mx[q][j] > m ? mx[q][j] : m;
  for (; i < n; i++) {
    xi = (float)load1(v->data, i, dt);
    m = xi > m ? xi : m;
  }
  return m;
}

#define KS_FFLOOR(sfx, dt) \
  static KS_TARGET double \
  KS(ffloor_##sfx)(const struct qrs__view *v, double *ret_max) \
  { \
    return KS(ffloor_impl)(v, ret_max, dt); \
  } \
  static KS_TARGET double \
  KS(fread_##sfx)(const struct qrs__view *v, double *ret_max) \
  { \
    return *ret_max = KS(fread_impl)(v, dt); \
  }

KS_FFLOOR(f32, QRS_DTYPE_F32)
KS_FFLOOR(f16, QRS_DTYPE_F16)
KS_FFLOOR(bf16, QRS_DTYPE_BF16)

static const floor_fn KS(ffloor_fns)[4] = {
  KS(ffloor_f32), KS(ffloor_f16), KS(ffloor_bf16), NULL,
};

static const floor_fn KS(fread_fns)[4] = {
  KS(fread_f32), KS(fread_f16), KS(fread_bf16), NULL,
};

/* The float pass of the fast selection (select.c), in blocks of
   QRS__FP_BLOCK values, each read from memory once: with fused, the
   block's max first (the running max; NaN noted), then from L1 the
   weights e = expf((x - m) * invt) in float against the running max m.
   The sums over the elements outside the head (d < dhead) go to double
   vectors after at most 8 float terms per lane, together with the sum of
   e * d for the bound; when the running max rises they are rescaled by
   exp((m_old - m_new) * invtd) in double (the head entries already
   written are recomputed against the final max at the end).  The head
   (d > dhead against the running max: a superset of the final head)
   goes to hpos / hx / he / hk (position, value, float weight, bucket
   key), compressed 8 lanes at a time where the CPU can (the arrays need
   KW entries of slack).  The counts of d >= -745.0 and d >= -745.3
   against the final max come from the row's min (every element when the
   min is above both), else from a counting pass. */
static inline __attribute__((always_inline)) vk
KS(fkey)(vfl d)
{
  vfl t = -d * 16.0f;

  t = (vfl)(((vk)(t < (float)(QRS__FP_NB - 1)) & (vk)t) |
            (~(vk)(t < (float)(QRS__FP_NB - 1)) &
             (vk)KS(splatf)((float)(QRS__FP_NB - 1))));
  return __builtin_convertvector(t, vk);
}

static inline __attribute__((always_inline)) int32_t
KS(fkey1)(float d)
{
  float t = -d * 16.0f;

  return t < (float)(QRS__FP_NB - 1) ? (int32_t)t : QRS__FP_NB - 1;
}

static inline __attribute__((always_inline)) size_t
KS(fhead)(unsigned mask, size_t i, vfl x, uint32_t *hpos, float *hx,
          size_t nh)
{
#ifdef KS_COMPRESS
  vk pv, perm;
  int j;

  for (j = 0; j < KW; j++)
    pv[j] = (int32_t)(i + (size_t)j);
  perm = KS_COMPRESS(mask);
  KS_PERMSTORE(hpos + nh, pv, perm);
  KS_PERMSTORE(hx + nh, x, perm);
  return nh + (size_t)__builtin_popcount(mask);
#else
  int j;

  while (mask) {
    j = __builtin_ctz(mask);
    mask &= mask - 1;
    hpos[nh] = (uint32_t)(i + (size_t)j);
    hx[nh] = x[j];
    nh++;
  }
  return nh;
#endif
}

/* One vector's float weights e = exp(d), d = (x - m) * invt, and the d
   that goes into the bound's sum (*dc: clamped at FEXP_MIN, below which
   the weight is 0).  clamp 0: the caller knows every d >= FEXP_MIN.  A
   NaN d stays NaN. */
static inline __attribute__((always_inline)) vfl
KS(fweight)(vfl x, vfl mv, vfl iv, vfl lo, int unit, int clamp, vfl *d,
            vfl *dc)
{
  *d = unit ? x - mv : (x - mv) * iv;
  if (!clamp) {
    *dc = *d;
    return KS(expf_core)(*d);
  }
  *dc = KS_VMAX(lo, *d);
  return (vfl)((vk)KS(expf_core)(*dc) & ~(vk)(*d < lo));
}

/* The weights of [i, full) (whole vectors) against max m: the sums
   outside the head into zd / wd (8 float terms per lane at most), the
   head into the list.  clamp: the block may hold d below FEXP_MIN (else
   no lane does); unit: invt is 1.  A NaN
   value makes wd NaN (its d passes every step as NaN). */
static inline __attribute__((always_inline)) size_t
KS(fgroups)(const void *data, size_t i, size_t full, vfl mv, vfl iv, vfl hv,
            vd *zd, vd *wd, uint32_t *hpos, float *hx, size_t nh, int dt,
            int clamp, int unit, int dense, const vfl *gmx, size_t ng,
            int skip, vfl sk, vd *sd, size_t *nskip)
{
  vfl x, d, dc, e, zb, wb, lo;
  vk hm;
  size_t j, g, gi;
  unsigned mask;

  lo = KS(splatf)(FEXP_MIN);
  for (j = i, gi = 0; j < full; gi++) {
    zb = wb = KS(splatf)(0.0f);
    /* A group whose max (the block's first read) is not in the head
       needs no head test per vector (float d is monotone in x). */
    if (gi < ng) {
      d = unit ? gmx[gi] - mv : (gmx[gi] - mv) * iv;
      if (skip && !KS(maskf)((vk)(d >= sk))) {
        /* Every value of the group lies below the skip cutoff: not
           read.  Each lane's 8 values weigh at most its max's weight:
           the bound of their mass (fpass_impl scales it). */
        e = KS(expf_core)(KS_VMAX(lo, d));
        *sd += KS_LOHALF(e) + KS_HIHALF(e);
        j += 8 * KW;
        (*nskip)++;
        continue;
      }
      if (!KS(maskf)((vk)(d > hv))) {
        for (g = 0; g < 8; g++, j += KW) {
          e = KS(fweight)(KS(loadf)(data, j, dt), mv, iv, lo, unit, clamp,
                          &d, &dc);
          zb += e;
          wb += e * dc;
        }
        *zd += KS_LOHALF(zb) + KS_HIHALF(zb);
        *wd += KS_LOHALF(wb) + KS_HIHALF(wb);
        continue;
      }
    }
    for (g = 0; g < 8 && j < full; g++, j += KW) {
      x = KS(loadf)(data, j, dt);
      e = KS(fweight)(x, mv, iv, lo, unit, clamp, &d, &dc);
      hm = (vk)(d > hv);
      mask = KS(maskf)(hm);
#ifdef KS_COMPRESS
      if (dense)        /* no branch: a compressed store of 0 to 8 lanes */
        nh = KS(fhead)(mask, j, x, hpos, hx, nh);
      else
#endif
      if (__builtin_expect(mask != 0, 0))
        nh = KS(fhead)(mask, j, x, hpos, hx, nh);
      e = (vfl)((vk)e & ~hm);
      zb += e;
      wb += e * dc;
    }
    *zd += KS_LOHALF(zb) + KS_HIHALF(zb);
    *wd += KS_LOHALF(wb) + KS_HIHALF(wb);
  }
  return nh;
}

static inline __attribute__((always_inline)) size_t
KS(fpass_impl)(const struct qrs__view *v, float m_in, float invt,
               double invtd, float dhead, uint32_t *hpos, float *hx,
               float *he, int32_t *hk, struct qrs__fpass *ret, int dt,
               int fused, const float *gm, float lo_in, float *gm_out,
               float dskip)
{
  vfl x, x1, d, e, mv, iv, hv, lo, bm0, bm1, mn0, mn1, g0, g1, sk;
  vfl gmx[QRS__FP_BLOCK / (8 * KW)];
  vd zd, wd, sd, fr;
  vk hm, ca, cb;
  size_t i, j, k, n, nh, nb, ng, ngm, nstale, end, full;
  double z, w, extra, f, b;
  float m, bm, bmn, xf, df, ef, xmin, mfirst;
  int l, clamp, unit, dense, skip;

  n = v->n;
  nh = nstale = ngm = 0;
  extra = 0.0;
  zd = wd = sd = KS(splat)(0.0);
  ret->nskip = 0;
  mfirst = m_in;
  m = fused ? -INFINITY : m_in;
  /* Skipping needs a row known to hold no NaN (a skipped group is not
     read): only with the max given. */
  skip = !fused && dskip > -INFINITY;
  sk = KS(splatf)(dskip);
  unit = invt == 1.0f;
  dense = 0;
  iv = KS(splatf)(invt);
  hv = KS(splatf)(dhead);
  lo = KS(splatf)(FEXP_MIN);
  xmin = INFINITY;
  for (i = 0; i < n; i = end) {
    end = i + QRS__FP_BLOCK < n ? i + QRS__FP_BLOCK : n;
    full = i + ((end - i) & ~(size_t)(KW - 1));
    if (gm) {
      /* Known (the moment pass's): the max m, the row's min, and each
         group's lane maxima; no first read of the block. */
      for (ng = 0; ng < (full - i) / (8 * KW); ng++)
        memcpy(&gmx[ng], gm + (i / (8 * KW) + ng) * KW, sizeof(vfl));
      bm = m;
      bmn = lo_in;
      goto known;
    }
    /* The block's max and min, from memory (then it sits in L1). */
    bm0 = bm1 = KS(splatf)(-INFINITY);
    mn0 = mn1 = KS(splatf)(INFINITY);
    /* Groups of 8 vectors (fgroups'): each group's max per lane too
       (merged in order: the same first maximal value per lane). */
    for (j = i, ng = 0; j + 8 * KW <= full; j += 8 * KW) {
      g0 = g1 = KS(splatf)(-INFINITY);
      for (k = 0; k < 8 * KW; k += 2 * KW) {
        x = KS(loadf)(v->data, j + k, dt);
        x1 = KS(loadf)(v->data, j + k + KW, dt);
        g0 = KS_VMAX(x, g0);
        g1 = KS_VMAX(x1, g1);
        mn0 = KS_VMIN(x, mn0);
        mn1 = KS_VMIN(x1, mn1);
      }
      bm0 = KS_VMAX(g0, bm0);
      bm1 = KS_VMAX(g1, bm1);
      gmx[ng] = KS_VMAX(g1, g0);
      if (gm_out) {
        /* The row's group maxima for the ladder's band passes, while
           they are contiguous from the row's start. */
        if (ngm == i / (8 * KW) + ng)
          memcpy(gm_out + ngm++ * KW, &gmx[ng], sizeof(vfl));
      }
      ng++;
    }
    for (; j + 2 * KW <= full; j += 2 * KW) {
      x = KS(loadf)(v->data, j, dt);
      x1 = KS(loadf)(v->data, j + KW, dt);
      bm0 = KS_VMAX(x, bm0);
      bm1 = KS_VMAX(x1, bm1);
      mn0 = KS_VMIN(x, mn0);
      mn1 = KS_VMIN(x1, mn1);
    }
    for (; j < full; j += KW) {
      x = KS(loadf)(v->data, j, dt);
      bm0 = KS_VMAX(x, bm0);
      mn0 = KS_VMIN(x, mn0);
    }
    bm0 = KS_VMAX(bm1, bm0);
    mn0 = KS_VMIN(mn1, mn0);
    bm = bm0[0];
    bmn = mn0[0];
    for (l = 1; l < KW; l++) {
      bm = bm0[l] > bm ? bm0[l] : bm;
      bmn = mn0[l] < bmn ? mn0[l] : bmn;
    }
    for (j = full; j < end; j++) {
      xf = (float)load1(v->data, j, dt);
      bm = xf > bm ? xf : bm;
      bmn = xf < bmn ? xf : bmn;
    }
  known:
    xmin = bmn < xmin ? bmn : xmin;
    if (fused && bm > m) {
      if (m > -INFINITY) {
        /* The sums so far against the new max; the factor's own error
           (a few double ulps) goes into the bound. */
        f = exp(((double)m - (double)bm) * invtd);
        fr = KS(splat)(f);
        zd *= fr;
        wd *= fr;
        extra = extra * f + KS(hsum)(zd) * 1e-12;
        nstale = nh;
      } else {
        mfirst = bm;
      }
      m = bm;
    }
    if (m == -INFINITY) {
      /* Nothing above -inf yet (fused): no weights; only a NaN matters. */
      for (j = i; j < end; j++) {
        xf = (float)load1(v->data, j, dt);
        if (xf != xf)
          wd[0] = NAN;
      }
      continue;
    }
    mv = KS(splatf)(m);
    /* Lanes below FEXP_MIN need the clamp (known from the block's min;
       a NaN min is no clamp: its d stays NaN either way). */
    clamp = (bmn - m) * invt < FEXP_MIN;
    /* A block after one with many head elements takes the compressed
       store without a branch (a branch taken at random costs more). */
    nb = nh;
    if (dense)
      nh = unit ? KS(fgroups)(v->data, i, full, mv, iv, hv, &zd, &wd, hpos,
                              hx, nh, dt, 1, 1, 1, gmx, ng, skip, sk, &sd,
                              &ret->nskip)
                : KS(fgroups)(v->data, i, full, mv, iv, hv, &zd, &wd, hpos,
                              hx, nh, dt, 1, 0, 1, gmx, ng, skip, sk, &sd,
                              &ret->nskip);
    else if (clamp)
      nh = unit ? KS(fgroups)(v->data, i, full, mv, iv, hv, &zd, &wd, hpos,
                              hx, nh, dt, 1, 1, 0, gmx, ng, skip, sk, &sd,
                              &ret->nskip)
                : KS(fgroups)(v->data, i, full, mv, iv, hv, &zd, &wd, hpos,
                              hx, nh, dt, 1, 0, 0, gmx, ng, skip, sk, &sd,
                              &ret->nskip);
    else
      nh = unit ? KS(fgroups)(v->data, i, full, mv, iv, hv, &zd, &wd, hpos,
                              hx, nh, dt, 0, 1, 0, gmx, ng, skip, sk, &sd,
                              &ret->nskip)
                : KS(fgroups)(v->data, i, full, mv, iv, hv, &zd, &wd, hpos,
                              hx, nh, dt, 0, 0, 0, gmx, ng, skip, sk, &sd,
                              &ret->nskip);
    dense = nh - nb > QRS__FP_BLOCK / 64;
    for (j = full; j < end; j++) {
      xf = (float)load1(v->data, j, dt);
      df = (xf - m) * invt;
      ef = df >= FEXP_MIN ? KS(expf1)(df) : 0.0f;
      if (df != df) {
        wd[0] = NAN;            /* as the vector loop: NaN in w */
      } else if (df <= dhead) {
        zd[0] += ef;
        wd[0] += (double)ef * (double)(df > FEXP_MIN ? df : FEXP_MIN);
      } else {
        hpos[nh] = (uint32_t)j;
        hx[nh] = xf;
        he[nh] = ef;
        hk[nh] = KS(fkey1)(df);
        nh++;
      }
    }
  }
  w = KS(hsum)(wd);
  ret->max = m;
  ret->mfirst = fused ? mfirst : m;
  ret->ngm = gm ? (n + 8 * KW - 1) / (8 * KW) : ngm;
  ret->bad = fused && (w != w || m == INFINITY || m == -INFINITY);
  if (ret->bad)
    return 0;
  /* The head's weights and keys, on the compact list (the pass stores
   only positions and values: two compressed stores instead of four),
   against the final max: the same floats for entries written under it;
   entries written under an older max that are now below dhead go to the
   sums (their buckets would be incomplete in the list). */
  mv = KS(splatf)(m);
  for (j = 0; j + KW <= nh; j += KW) {
    memcpy(&x, hx + j, sizeof(x));
    d = (x - mv) * iv;
    e = (vfl)((vk)KS(expf)(FMAX(d, lo)) & (vk)(d >= lo));
    memcpy(he + j, &e, sizeof(e));
    hm = KS(fkey)(d);
    memcpy(hk + j, &hm, sizeof(hm));
  }
  for (; j < nh; j++) {
    df = (hx[j] - m) * invt;
    he[j] = df >= FEXP_MIN ? KS(expf1)(df) : 0.0f;
    hk[j] = KS(fkey1)(df);
  }
  for (i = j = nstale ? 0 : nh; i < nh; i++) {
    df = i < nstale ? (hx[i] - m) * invt : 0.0f;
    if (df <= dhead) {
      zd[0] += he[i];
      wd[0] += (double)he[i] * (double)(df > FEXP_MIN ? df : FEXP_MIN);
      continue;
    }
    hpos[j] = hpos[i];
    hx[j] = hx[i];
    he[j] = he[i];
    hk[j] = hk[i];
    j++;
  }
  nh = j;
  z = KS(hsum)(zd);
  w = KS(hsum)(wd);
  /* The skipped groups' mass lies in [0, b]: b / 2 into the sum, b / 2
     into the bound.  b: 8 values per lane at most its max's float
     weight, whose error against the exact weight (C0 + C1 * 87 at the
     most) the factor covers. */
  b = KS(hsum)(sd) * 8.0 * (1.0 + 1e-4);
  ret->z = z + 0.5 * b;
  ret->err = QRS__FP_C0 * z - QRS__FP_C1 * w + extra + 0.5 * b;
  ret->w = w;
  /* The counts: every element when even the min is above both limits;
     else a counting pass (masked or very wide rows). */
  if ((xmin - m) * invt >= -745.0f) {
    ret->cnt_a = ret->cnt_b = n;
    return nh;
  }
  ca = cb = (vk)KS(splatf)(0.0f);
  for (j = 0; j + KW <= n; j += KW) {
    d = (KS(loadf)(v->data, j, dt) - mv) * iv;
    ca -= (vk)(d >= -745.0f);
    cb -= (vk)(d >= -745.3f);
  }
  ret->cnt_a = ret->cnt_b = 0;
  for (l = 0; l < KW; l++) {
    ret->cnt_a += (size_t)ca[l];
    ret->cnt_b += (size_t)cb[l];
  }
  for (; j < n; j++) {
    df = ((float)load1(v->data, j, dt) - m) * invt;
    ret->cnt_a += df >= -745.0f;
    ret->cnt_b += df >= -745.3f;
  }
  return nh;
}

/* One group of 8 vectors of the band pass: the elements with
   lv < d <= hv appended to the list (dense: a compressed store per
   vector without a branch). */
static inline __attribute__((always_inline)) size_t
KS(fband_group)(const void *data, size_t j, vfl mv, vfl iv, vfl lv, vfl hv,
                uint32_t *hpos, float *hx, size_t nh, int dt, int unit,
                int dense)
{
  vfl x, d;
  unsigned mask;
  int g;

  for (g = 0; g < 8; g++, j += KW) {
    x = KS(loadf)(data, j, dt);
    d = unit ? x - mv : (x - mv) * iv;
    mask = KS(maskf)((vk)(d > lv) & (vk)(d <= hv));
#ifdef KS_COMPRESS
    if (dense)
      nh = KS(fhead)(mask, j, x, hpos, hx, nh);
    else
#endif
    if (mask)
      nh = KS(fhead)(mask, j, x, hpos, hx, nh);
  }
  (void)dense;
  return nh;
}

/* The band pass of the ladder: the elements with dlo < d <= dhi
   (d = (x - m) * invt in float exactly as the float pass computes it;
   dlo may be -inf) appended to the head list from nh, with their float weights
   and keys.  Returns the new length. */
static inline __attribute__((always_inline)) size_t
KS(fband_impl)(const struct qrs__view *v, float m, float invt, float dlo,
               float dhi, uint32_t *hpos, float *hx, float *he, int32_t *hk,
               size_t nh, int dt, const float *gm, size_t ngm, float dsh,
               double *ret_z, double *ret_zd)
{
  vfl x, d, mv, iv, lv, hv, e, sv, t;
  vd sz, szd;
  vk key;
  size_t j, n, nh0, nb, g, ngf, gpb;
  unsigned mask;
  float df;
  int dense, unit;

  n = v->n;
  nh0 = nh;
  mv = KS(splatf)(m);
  iv = KS(splatf)(invt);
  lv = KS(splatf)(dlo);
  hv = KS(splatf)(dhi);
  dense = 0;
  unit = invt == 1.0f;
  ngf = n / (8 * KW);
  gpb = QRS__FP_BLOCK / (8 * KW);
  for (g = 0, nb = nh; g < ngf; g++) {
    if (gm && g < ngm) {
      /* A group whose max is not above dlo has nothing in the band
         (float d is monotone in x): not read. */
      memcpy(&x, gm + g * KW, sizeof(x));
      d = unit ? x - mv : (x - mv) * iv;
      if (!KS(maskf)((vk)(d > lv)))
        goto next;
    }
    j = g * 8 * KW;
    /* Blocks after a dense one store without a branch (as the pass). */
    if (dense)
      nh = unit ? KS(fband_group)(v->data, j, mv, iv, lv, hv, hpos, hx, nh,
                                  dt, 1, 1)
                : KS(fband_group)(v->data, j, mv, iv, lv, hv, hpos, hx, nh,
                                  dt, 0, 1);
    else
      nh = unit ? KS(fband_group)(v->data, j, mv, iv, lv, hv, hpos, hx, nh,
                                  dt, 1, 0)
                : KS(fband_group)(v->data, j, mv, iv, lv, hv, hpos, hx, nh,
                                  dt, 0, 0);
  next:
    if (g % gpb == gpb - 1) {
      dense = nh - nb > QRS__FP_BLOCK / 64;
      nb = nh;
    }
  }
  for (j = ngf * 8 * KW; j + KW <= n; j += KW) {
    x = KS(loadf)(v->data, j, dt);
    d = (x - mv) * iv;
    mask = KS(maskf)((vk)(d > lv) & (vk)(d <= hv));
    if (mask)
      nh = KS(fhead)(mask, j, x, hpos, hx, nh);
  }
  for (; j < n; j++) {
    df = ((float)load1(v->data, j, dt) - m) * invt;
    if (df > dlo && df <= dhi) {
      hpos[nh] = (uint32_t)j;
      hx[nh] = (float)load1(v->data, j, dt);
      nh++;
    }
  }
  /* Weights and keys on the compact list (0 below FEXP_MIN: dlo may be
     -inf), and the sums of e and of e * max(-d - dsh, 0). */
  sv = KS(splatf)(dsh);
  sz = szd = KS(splat)(0.0);
  for (j = nh0; j + KW <= nh; j += KW) {
    memcpy(&x, hx + j, sizeof(x));
    d = (x - mv) * iv;
    e = KS(expf)(d);
    memcpy(he + j, &e, sizeof(e));
    key = KS(fkey)(d);
    memcpy(hk + j, &key, sizeof(key));
    t = KS_VMAX(-d - sv, KS(splatf)(0.0f)) * e;
    sz += KS_LOHALF(e) + KS_HIHALF(e);
    szd += KS_LOHALF(t) + KS_HIHALF(t);
  }
  *ret_z = KS(hsum)(sz);
  *ret_zd = KS(hsum)(szd);
  for (; j < nh; j++) {
    df = (hx[j] - m) * invt;
    he[j] = KS(expf1)(df);
    hk[j] = KS(fkey1)(df);
    *ret_z += he[j];
    *ret_zd += (double)he[j] * (double)(-df - dsh > 0.0f ? -df - dsh : 0.0f);
  }
  return nh;
}

/* The row's max and min in float, whether it holds a NaN, and (gm not
   NULL) each whole group of 8 vectors' lane maxima in the layout of
   qrs__fmoments()'s mb (NaN ignored).  Returns the groups written. */
static inline __attribute__((always_inline)) size_t
KS(gmax_impl)(const struct qrs__view *v, float *gm, float *ret_max,
              float *ret_min, int *ret_nan, int dt)
{
  vfl x, x1, g0, g1, mx, mn0, mn1;
  vk nan;
  size_t j, k, n, ng;
  float m, mn, xf;
  int l, has_nan;

  n = v->n;
  mx = KS(splatf)(-INFINITY);
  mn0 = mn1 = KS(splatf)(INFINITY);
  nan = (vk)KS(splatf)(0.0f);
  for (j = ng = 0; j + 8 * KW <= n; j += 8 * KW, ng++) {
    g0 = g1 = KS(splatf)(-INFINITY);
    for (k = 0; k < 8 * KW; k += 2 * KW) {
      x = KS(loadf)(v->data, j + k, dt);
      x1 = KS(loadf)(v->data, j + k + KW, dt);
      g0 = KS_VMAX(x, g0);
      g1 = KS_VMAX(x1, g1);
      mn0 = KS_VMIN(x, mn0);
      mn1 = KS_VMIN(x1, mn1);
      nan |= (vk)(x != x) | (vk)(x1 != x1);
    }
    g0 = KS_VMAX(g1, g0);
    if (gm)
      memcpy(gm + ng * KW, &g0, sizeof(g0));
    mx = KS_VMAX(g0, mx);
  }
  for (; j + KW <= n; j += KW) {
    x = KS(loadf)(v->data, j, dt);
    mx = KS_VMAX(x, mx);
    mn0 = KS_VMIN(x, mn0);
    nan |= (vk)(x != x);
  }
  mn0 = KS_VMIN(mn1, mn0);
  m = mx[0];
  mn = mn0[0];
  has_nan = nan[0] != 0;
  for (l = 1; l < KW; l++) {
    m = mx[l] > m ? mx[l] : m;
    mn = mn0[l] < mn ? mn0[l] : mn;
    has_nan |= nan[l] != 0;
  }
  for (; j < n; j++) {
    xf = (float)load1(v->data, j, dt);
    m = xf > m ? xf : m;
    mn = xf < mn ? xf : mn;
    has_nan |= xf != xf;
  }
  *ret_max = m;
  *ret_min = mn;
  *ret_nan = has_nan;
  return gm ? ng : 0;
}

#define KS_GMAX(sfx, dt) \
  static KS_TARGET size_t \
  KS(gmax_##sfx)(const struct qrs__view *v, float *gm, float *ret_max, \
                 float *ret_min, int *ret_nan) \
  { \
    return KS(gmax_impl)(v, KW == 8 ? gm : NULL, ret_max, ret_min, \
                         ret_nan, dt); \
  }

KS_GMAX(f32, QRS_DTYPE_F32)
KS_GMAX(f16, QRS_DTYPE_F16)
KS_GMAX(bf16, QRS_DTYPE_BF16)

static const gmax_fn KS(gmax_fns)[4] = {
  KS(gmax_f32), KS(gmax_f16), KS(gmax_bf16), NULL,
};

/* The ladder's recount: the float weights of the elements with
   d <= dlo (d exactly as qrs__kfpass() computes it at max m), summed
   afresh as the pass sums them (8 terms per lane in float, then
   double): *ret_z and its bound *ret_err (as qrs__fpass's z / err). */
static inline __attribute__((always_inline)) void
KS(ftail_impl)(const struct qrs__view *v, float m, float invt, float dlo,
               double *ret_z, double *ret_err, double *ret_w, int dt,
               int unit)
{
  vfl x, d, dc, e, mv, iv, lv, lo, zb, wb;
  vd zd, wd;
  size_t j, g, n;
  double z, w;
  float df, ef;

  n = v->n;
  mv = KS(splatf)(m);
  iv = KS(splatf)(invt);
  lv = KS(splatf)(dlo);
  lo = KS(splatf)(FEXP_MIN);
  zd = wd = KS(splat)(0.0);
  for (j = 0; j + KW <= n;) {
    zb = wb = KS(splatf)(0.0f);
    for (g = 0; g < 8 && j + KW <= n; g++, j += KW) {
      x = KS(loadf)(v->data, j, dt);
      e = KS(fweight)(x, mv, iv, lo, unit, 1, &d, &dc);
      e = (vfl)((vk)e & (vk)(d <= lv));
      zb += e;
      wb += e * dc;
    }
    zd += KS_LOHALF(zb) + KS_HIHALF(zb);
    wd += KS_LOHALF(wb) + KS_HIHALF(wb);
  }
  z = KS(hsum)(zd);
  w = KS(hsum)(wd);
  for (; j < n; j++) {
    df = ((float)load1(v->data, j, dt) - m) * invt;
    if (df <= dlo && df >= FEXP_MIN) {
      ef = KS(expf1)(df);
      z += ef;
      w += (double)ef * (double)df;
    }
  }
  *ret_z = z;
  *ret_err = QRS__FP_C0 * z - QRS__FP_C1 * w;
  *ret_w = w;
}

#define KS_FTAIL(sfx, dt) \
  static KS_TARGET void \
  KS(ftail_##sfx)(const struct qrs__view *v, float m, float invt, \
                  float dlo, double *ret_z, double *ret_err, \
                  double *ret_w) \
  { \
    if (invt == 1.0f) \
      KS(ftail_impl)(v, m, invt, dlo, ret_z, ret_err, ret_w, dt, 1); \
    else \
      KS(ftail_impl)(v, m, invt, dlo, ret_z, ret_err, ret_w, dt, 0); \
  }

KS_FTAIL(f32, QRS_DTYPE_F32)
KS_FTAIL(f16, QRS_DTYPE_F16)
KS_FTAIL(bf16, QRS_DTYPE_BF16)

static const ftail_fn KS(ftail_fns)[4] = {
  KS(ftail_f32), KS(ftail_f16), KS(ftail_bf16), NULL,
};

#define KS_FBAND(sfx, dt) \
  static KS_TARGET size_t \
  KS(fband_##sfx)(const struct qrs__view *v, float m, float invt, \
                  float dlo, float dhi, uint32_t *hpos, float *hx, \
                  float *he, int32_t *hk, size_t nh, const float *gm, \
                  size_t ngm, float dsh, double *ret_z, double *ret_zd) \
  { \
    if (KW != 8) \
      gm = NULL; \
    return KS(fband_impl)(v, m, invt, dlo, dhi, hpos, hx, he, hk, nh, dt, \
                          gm, ngm, dsh, ret_z, ret_zd); \
  }

KS_FBAND(f32, QRS_DTYPE_F32)
KS_FBAND(f16, QRS_DTYPE_F16)
KS_FBAND(bf16, QRS_DTYPE_BF16)

static const fband_fn KS(fband_fns)[4] = {
  KS(fband_f32), KS(fband_f16), KS(fband_bf16), NULL,
};

/* A float threshold below every x with (x - m) * pinv >= dlo (the exact
   test follows); NaN when it leaves the float range. */
static inline __attribute__((always_inline)) float
KS(fcthr)(float m, double dlo, double pinv)
{
  double thr;

  thr = (double)m + dlo / pinv;
  thr -= 1e-5 * (fabs((double)m) + fabs(dlo / pinv)) + 1e-30;
  if (!(thr > -FLT_MAX && thr < FLT_MAX))
    return NAN;
  return nextafterf((float)thr, -INFINITY);
}

/* The max of a float32 / 16-bit row and, in the same pass (blocks of
   QRS__FP_BLOCK read from memory once), the candidates x >= thr(max)
   against the running max (a superset of the final set: the threshold
   only rises), compressed into tpos / tx (room for the row + 16).
   thr(m) is the caller's float threshold for a max m (NaN: none fits
   float; then 0 is returned with *ret_ok 0).  *ret_odd: a float sum of
   every value is NaN or +inf (a NaN or +inf may be in the row).  Returns
   the candidates' count; *ret_max the max. */
static inline __attribute__((always_inline)) size_t
KS(fcscan_impl)(const struct qrs__view *v, double dlo, double pinv,
                uint32_t *tpos, float *tx, float *ret_max, int *ret_odd,
                int *ret_ok, int dt)
{
  vfl x, x1, bm0, bm1, acc, tv;
  size_t i, j, k, n, nt, end, full;
  unsigned mask;
  float m, bm, xf, thr;
  int l, odd;

  n = v->n;
  nt = 0;
  m = -INFINITY;
  thr = INFINITY;
  odd = 0;
  acc = KS(splatf)(0.0f);
  *ret_ok = 1;
  for (i = 0; i < n; i = end) {
    end = i + QRS__FP_BLOCK < n ? i + QRS__FP_BLOCK : n;
    full = i + ((end - i) & ~(size_t)(KW - 1));
    bm0 = bm1 = KS(splatf)(-INFINITY);
    for (j = i; j + 2 * KW <= full; j += 2 * KW) {
      x = KS(loadf)(v->data, j, dt);
      x1 = KS(loadf)(v->data, j + KW, dt);
      acc += x + x1;
      bm0 = KS_VMAX(x, bm0);
      bm1 = KS_VMAX(x1, bm1);
    }
    for (; j < full; j += KW) {
      x = KS(loadf)(v->data, j, dt);
      acc += x;
      bm0 = KS_VMAX(x, bm0);
    }
    bm0 = KS_VMAX(bm1, bm0);
    bm = bm0[0];
    for (l = 1; l < KW; l++)
      bm = bm0[l] > bm ? bm0[l] : bm;
    for (j = full; j < end; j++) {
      xf = (float)load1(v->data, j, dt);
      odd |= !(xf < INFINITY);
      bm = xf > bm ? xf : bm;
    }
    if (bm > m) {
      m = bm;
      thr = KS(fcthr)(m, dlo, pinv);
      if (thr != thr) {
        *ret_ok = 0;
        return 0;
      }
      /* The candidates so far against the raised threshold. */
      for (j = k = 0; j < nt; j++)
        if (tx[j] >= thr) {
          tpos[k] = tpos[j];
          tx[k] = tx[j];
          k++;
        }
      nt = k;
    }
    if (m == -INFINITY)
      continue;
    tv = KS(splatf)(thr);
    for (j = i; j < full; j += KW) {
      x = KS(loadf)(v->data, j, dt);
      mask = KS(maskf)((vk)(x >= tv));
      if (mask)
        nt = KS(fhead)(mask, j, x, tpos, tx, nt);
    }
    for (j = full; j < end; j++) {
      xf = (float)load1(v->data, j, dt);
      if (xf >= thr) {
        tpos[nt] = (uint32_t)j;
        tx[nt] = xf;
        nt++;
      }
    }
  }
  for (l = 0; l < KW; l++)
    odd |= !(acc[l] < INFINITY);
  *ret_odd = odd;
  *ret_max = m;
  return nt;
}

#define KS_FCSCAN(sfx, dt) \
  static KS_TARGET size_t \
  KS(fcscan_##sfx)(const struct qrs__view *v, double dlo, double pinv, \
                   uint32_t *tpos, float *tx, float *ret_max, int *ret_odd, \
                   int *ret_ok) \
  { \
    return KS(fcscan_impl)(v, dlo, pinv, tpos, tx, ret_max, ret_odd, \
                           ret_ok, dt); \
  }

KS_FCSCAN(f32, QRS_DTYPE_F32)
KS_FCSCAN(f16, QRS_DTYPE_F16)
KS_FCSCAN(bf16, QRS_DTYPE_BF16)

static const fcscan_fn KS(fcscan_fns)[4] = {
  KS(fcscan_f32), KS(fcscan_f16), KS(fcscan_bf16), NULL,
};

#define KS_FPASS(sfx, dt) \
  static KS_TARGET size_t \
  KS(fpass_##sfx)(const struct qrs__view *v, float m, float invt, \
                  double invtd, float dhead, uint32_t *hpos, float *hx, \
                  float *he, int32_t *hk, struct qrs__fpass *ret, \
                  const float *gm, float lo, float *gm_out, float dskip) \
  { \
    if (KW != 8) \
      gm = gm_out = NULL; \
    if (m != m) \
      return KS(fpass_impl)(v, m, invt, invtd, dhead, hpos, hx, he, hk, \
                            ret, dt, 1, NULL, 0.0f, gm_out, -INFINITY); \
    if (gm) \
      return KS(fpass_impl)(v, m, invt, invtd, dhead, hpos, hx, he, hk, \
                            ret, dt, 0, gm, lo, NULL, dskip); \
    return KS(fpass_impl)(v, m, invt, invtd, dhead, hpos, hx, he, hk, ret, \
                          dt, 0, NULL, 0.0f, gm_out, dskip); \
  }

KS_FPASS(f32, QRS_DTYPE_F32)
KS_FPASS(f16, QRS_DTYPE_F16)
KS_FPASS(bf16, QRS_DTYPE_BF16)

static const fpass_fn KS(fpass_fns)[4] = {
  KS(fpass_f32), KS(fpass_f16), KS(fpass_bf16), NULL,
};

#undef VSEL
#undef FMAX
#undef FMIN
#undef VZERO
#undef KS_MASS
#undef KS_COLLECT
#undef KS_SCAN
#undef KS_TOPK
#undef KS_FLOOR
#undef KS_CBUCKET
#undef KS_SCANH
#undef KS_SCANW
