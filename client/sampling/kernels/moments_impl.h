/* The moment kernel's template, included by moments.c once per variant
   with:
     MK(name)       the name with the variant's suffix
     MFMA(a, b, c)  a * b + c with one rounding, lane by lane (v8f)
     MMAX8(a, b), MMIN8(a, b)  FMAX8 / FMIN8 of moments.c, lane by lane
     MCVT_LO(s), MCVT_HI(s)  lanes 0-3 / 4-7 of s as 4 doubles
     MCVT_BF16(h), MCVT_F16(h)  8 bfloat16 / float16 values (v8h) as
                    floats (exact conversions)
     MTARGET        the variant's target attribute (its instruction
                    sets), on every function of the variant
   Every operation is on 8-lane vectors (GCC lowers them to the
   variant's registers), so each lane computes the same IEEE operations
   in every variant.  It undefines them at its end, ready for the next
   variant. */

/* 8 values of a float32 / float16 / bfloat16 row from i, exact
   conversions; lanes past n are -inf. */
static inline __attribute__((always_inline)) MTARGET v8f
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
  return dt == QRS_DTYPE_BF16 ? MCVT_BF16(h) : MCVT_F16(h);
}

/* exp(d) for -87 <= d <= 0: d = k ln2 + r, |r| <= ln2 / 2 (ln2 split in
   two floats), the degree-6 Taylor polynomial of exp(r) by Horner with
   fused multiply-adds, times 2^k in the exponent field. */
static inline __attribute__((always_inline)) MTARGET v8f
MK(expf)(v8f d)
{
  v8f kf, r, p;
  v8i ki;

  kf = MFMA(d, c_log2e, c_shift);
  ki = (v8i)kf - (v8i)c_shift;
  kf = kf - c_shift;
  r = MFMA(kf, c_mln2hi, d);
  r = MFMA(kf, c_mln2lo, r);
  p = MFMA(c_p6, r, c_p5);
  p = MFMA(p, r, c_p4);
  p = MFMA(p, r, c_p3);
  p = MFMA(p, r, c_p2);
  p = MFMA(p, r, c_one);
  p = MFMA(p, r, c_one);
  return (v8f)((v8i)p + (ki << 23));
}

static MTARGET float
MK(expf1)(float d)
{
  return MK(expf)(SPLATF(d))[0];
}

/* The moments of 8 values against the max mv into the partial sums.
   masked 0: the caller knows every d >= -87 (the same bits as with the
   mask, in fewer operations). */
static inline __attribute__((always_inline)) MTARGET void
MK(macc)(v8f x, v8f mv, v8f *zf, v8f *wf, v8f *w2f, int masked)
{
  v8f d, dc, e, ed;
  v8i ok;

  d = x - mv;
  if (masked) {
    ok = d >= c_dmin;          /* also false for -inf and NaN */
    dc = (v8f)((v8i)d & ok);
    e = (v8f)((v8i)MK(expf)(dc) & ok);
  } else {
    dc = d;
    e = MK(expf)(dc);
  }
  ed = e * dc;
  *zf = *zf + e;
  *wf = *wf + ed;
  *w2f = MFMA(ed, dc, *w2f);
}

static inline __attribute__((always_inline)) MTARGET void
MK(fmom)(const struct qrs__view *v, struct qrs__scan *sc,
         struct qrs__fmom *ret, float *mb, int dt)
{
  v8f x, xa, xb, mx, mx1, mn, mn1, mv, za, wa, w2a, zb, wb, w2b, sm, sm1;
  v4d zd[2], wd[2], w2d[2];
  v8i nan, nan1;
  float buf[MOM_BLOCK] __attribute__((aligned(32)));
  const float *src;
  size_t i, j, q, n, end, qend, base, lim;
  double z, w, w2, dl, f;
  float m, bm, bmin, rmin;
  int k, l, masked;

  n = v->n;
  m = -INFINITY;
  z = w = w2 = 0.0;
  nan = nan1 = (v8i)SPLATF(0.0f);
  ret->nrescale = 0;
  rmin = INFINITY;
  for (i = 0; i < n; i = end) {
    end = i + MOM_BLOCK < n ? i + MOM_BLOCK : n;
    /* The block's max (and NaN), then its moments from L1. */
    mx = mx1 = SPLATF(-INFINITY);
    mn = mn1 = SPLATF(INFINITY);
    /* Per QRS__MOM_SUB values: their max per lane (merged into the
       block's: the same first maximal value per lane as a running max),
       stored for the caller when mb is given. */
    for (q = i; q < end; q = qend) {
      qend = q + QRS__MOM_SUB < end ? q + QRS__MOM_SUB : end;
      sm = sm1 = SPLATF(-INFINITY);
      for (j = q; j < qend; j += 16) {
        x = MK(load)(v->data, j, n, dt);
        if (dt != QRS_DTYPE_F32)
          memcpy(buf + (j - i), &x, sizeof(x));
        nan |= x != x;
        sm = MMAX8(x, sm);
        mn = MMIN8(x, mn);
        x = MK(load)(v->data, j + 8, n, dt);
        if (dt != QRS_DTYPE_F32)
          memcpy(buf + (j - i) + 8, &x, sizeof(x));
        nan1 |= x != x;
        sm1 = MMAX8(x, sm1);
        mn1 = MMIN8(x, mn1);
      }
      mx = MMAX8(sm, mx);
      mx1 = MMAX8(sm1, mx1);
      if (mb) {
        sm = MMAX8(sm1, sm);
        memcpy(mb + (q / QRS__MOM_SUB) * 8, &sm, sizeof(sm));
      }
    }
    mx = MMAX8(mx1, mx);
    mn = MMIN8(mn1, mn);
    bm = mx[0];
    bmin = mn[0];
    for (l = 1; l < 8; l++) {
      bm = mx[l] > bm ? mx[l] : bm;
      bmin = mn[l] < bmin ? mn[l] : bmin;
    }
    rmin = bmin < rmin ? bmin : rmin;
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
    mv = SPLATF(m);
    for (l = 0; l < 2; l++)
      zd[l] = wd[l] = w2d[l] = c_zero4;
    /* Groups of MOM_GROUP values (lanes past n are -inf: weight 0): two
       chains of float partial sums per lane, added, then into doubles.
       Without the mask when the block's min says every d >= -87. */
    masked = !(bmin - m >= -87.0f) || end - i < MOM_BLOCK;
    /* 16-bit rows: the block's floats from the max loop's copy (L1). */
    if (dt == QRS_DTYPE_F32) {
      src = (const float *)v->data;
      base = 0;
      lim = n;
    } else {
      src = buf;
      base = i;
      lim = end - i;
    }
    for (j = i; j < end; j += MOM_GROUP) {
      za = wa = w2a = zb = wb = w2b = SPLATF(0.0f);
      for (k = 0; k < MOM_GROUP; k += 16) {
        xa = MK(load)(src, j - base + (size_t)k, lim, QRS_DTYPE_F32);
        xb = MK(load)(src, j - base + (size_t)k + 8, lim, QRS_DTYPE_F32);
        if (masked) {
          MK(macc)(xa, mv, &za, &wa, &w2a, 1);
          MK(macc)(xb, mv, &zb, &wb, &w2b, 1);
        } else {
          MK(macc)(xa, mv, &za, &wa, &w2a, 0);
          MK(macc)(xb, mv, &zb, &wb, &w2b, 0);
        }
      }
      ADDHALVES(zd, za + zb);
      ADDHALVES(wd, wa + wb);
      ADDHALVES(w2d, w2a + w2b);
    }
    z += hsum2(zd);
    w += hsum2(wd);
    w2 += hsum2(w2d);
  }
  sc->max = m;
  sc->has_nan = 0;
  nan |= nan1;
  for (l = 0; l < 8; l++)
    sc->has_nan |= nan[l] != 0;
  sc->has_posinf = m == INFINITY;
  ret->z = z;
  ret->w = w;
  ret->w2 = w2;
  ret->n = n;
  ret->min = rmin;
}

/* One function per dtype (the loads specialised). */
static MTARGET void
MK(fmom_f32)(const struct qrs__view *v, struct qrs__scan *sc,
             struct qrs__fmom *ret, float *mb)
{
  MK(fmom)(v, sc, ret, mb, QRS_DTYPE_F32);
}

static MTARGET void
MK(fmom_bf16)(const struct qrs__view *v, struct qrs__scan *sc,
              struct qrs__fmom *ret, float *mb)
{
  MK(fmom)(v, sc, ret, mb, QRS_DTYPE_BF16);
}

static MTARGET void
MK(fmom_f16)(const struct qrs__view *v, struct qrs__scan *sc,
             struct qrs__fmom *ret, float *mb)
{
  MK(fmom)(v, sc, ret, mb, QRS_DTYPE_F16);
}

#undef MK
#undef MFMA
#undef MMAX8
#undef MMIN8
#undef MCVT_LO
#undef MCVT_HI
#undef MCVT_BF16
#undef MCVT_F16
#undef MTARGET
