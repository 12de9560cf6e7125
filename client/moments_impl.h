/* The moment kernel's template, included by moments.c once per variant
   with:
     MK(name)       the name with the variant's suffix
     MFMA(a, b, c)  a * b + c with one rounding, lane by lane (v8f)
   Every operation is on 8-lane vectors (GCC lowers them to the
   variant's registers), so each lane computes the same IEEE operations
   in every variant. */

/* 8 values of a float32 / float16 / bfloat16 row from i, exact
   conversions; lanes past n are -inf. */
static inline __attribute__((always_inline)) v8f
MK(load)(const void *data, size_t i, size_t n, int dt)
{
  v8f x;
  v8h h;
  size_t j;

  if (dt == QRS_DTYPE_F32) {
    if (i + 8 <= n) {
      memcpy(&x, (const float *)data + i, sizeof(x));
      return x;
    }
    for (j = 0; j < 8; j++)
      x[j] = i + j < n ? ((const float *)data)[i + j] : -INFINITY;
    return x;
  }
  if (i + 8 <= n) {
    memcpy(&h, (const uint16_t *)data + i, sizeof(h));
  } else {
    for (j = 0; j < 8; j++)
      h[j] = i + j < n ? ((const uint16_t *)data)[i + j]
             : dt == QRS_DTYPE_BF16 ? (uint16_t)0xff80u
                                    : (uint16_t)0xfc00u;   /* -inf */
  }
  return dt == QRS_DTYPE_BF16 ? bf16_to_v8f(h) : f16_to_v8f(h);
}

/* exp(d) for -87 <= d <= 0: d = k ln2 + r, |r| <= ln2 / 2 (ln2 split in
   two floats), the degree-6 Taylor polynomial of exp(r) by Horner with
   fused multiply-adds, times 2^k in the exponent field. */
static inline __attribute__((always_inline)) v8f
MK(expf)(v8f d)
{
  v8f kf, r, p;
  v8i ki;

  kf = MFMA(d, splatf(1.44269504f), splatf(12582912.0f));
  ki = (v8i)kf - (v8i)splatf(12582912.0f);
  kf = kf - 12582912.0f;
  r = MFMA(kf, splatf(-0.693145751953125f), d);
  r = MFMA(kf, splatf(-1.428606765330187e-06f), r);
  p = MFMA(splatf(1.0f / 720), r, splatf(1.0f / 120));
  p = MFMA(p, r, splatf(1.0f / 24));
  p = MFMA(p, r, splatf(1.0f / 6));
  p = MFMA(p, r, splatf(0.5f));
  p = MFMA(p, r, splatf(1.0f));
  p = MFMA(p, r, splatf(1.0f));
  return (v8f)((v8i)p + (ki << 23));
}

static float
MK(expf1)(float d)
{
  return MK(expf)(splatf(d))[0];
}

static void
MK(fmom)(const struct qrs__view *v, struct qrs__scan *sc,
         struct qrs__fmom *ret, int dt)
{
  v8f x, mx, mv, d, dc, e, ed, zf, wf, w2f;
  v8d zd, wd, w2d;
  v8i nan, ok;
  size_t i, j, n, end;
  double z, w, w2, dl, f;
  float m, bm;
  int k, l;

  n = v->n;
  m = -INFINITY;
  z = w = w2 = 0.0;
  nan = (v8i)splatf(0.0f);
  ret->nrescale = 0;
  for (i = 0; i < n; i = end) {
    end = i + MOM_BLOCK < n ? i + MOM_BLOCK : n;
    /* The block's max (and NaN), then its moments from L1. */
    mx = splatf(-INFINITY);
    for (j = i; j < end; j += 8) {
      x = MK(load)(v->data, j, n, dt);
      nan |= x != x;
      mx = (v8f)(((x > mx) & (v8i)x) | (~(x > mx) & (v8i)mx));
    }
    bm = mx[0];
    for (l = 1; l < 8; l++)
      bm = mx[l] > bm ? mx[l] : bm;
    if (bm > m) {
      if (m > -INFINITY && bm < INFINITY) {
        /* d against the new max is d - dl: rescale the sums. */
        dl = (double)bm - (double)m;
        if (!(dl <= 745.0)) {
          z = w = w2 = 0.0;   /* every earlier weight underflows */
        } else {
          f = exp(-dl);
          w2 = f * (w2 - 2.0 * dl * w + dl * dl * z);
          w = f * (w - dl * z);
          z = f * z;
        }
        ret->nrescale++;
      }
      m = bm;
    }
    if (!(m > -INFINITY && m < INFINITY))
      continue;   /* nothing finite yet, or +inf: the row is rejected */
    mv = splatf(m);
    zd = wd = w2d = splatd(0.0);
    for (j = i; j < end;) {
      /* Float partial sums of at most 8 terms per lane. */
      zf = wf = w2f = splatf(0.0f);
      for (k = 0; k < 8 && j < end; k++, j += 8) {
        x = MK(load)(v->data, j, n, dt);
        d = x - mv;
        ok = d >= -87.0f;            /* also false for -inf and NaN */
        dc = (v8f)((v8i)d & ok);
        e = (v8f)((v8i)MK(expf)(dc) & ok);
        ed = e * dc;
        zf = zf + e;
        wf = wf + ed;
        w2f = MFMA(ed, dc, w2f);
      }
      zd = zd + __builtin_convertvector(zf, v8d);
      wd = wd + __builtin_convertvector(wf, v8d);
      w2d = w2d + __builtin_convertvector(w2f, v8d);
    }
    z += hsumd(zd);
    w += hsumd(wd);
    w2 += hsumd(w2d);
  }
  sc->max = m;
  sc->has_nan = 0;
  for (l = 0; l < 8; l++)
    sc->has_nan |= nan[l] != 0;
  sc->has_posinf = m == INFINITY;
  ret->z = z;
  ret->w = w;
  ret->w2 = w2;
  ret->n = n;
}
