/* Template (rowkern_isa.h includes it once per variant): the float-width
   passes over float32 and 16-bit rows, the fast selection's (select.c,
   rowkern.h has their contracts): the float cut of a set, the float
   floor and read floor of the benchmark, the float pass with its head
   list, the ladder's band pass and recount, the group maxima and the
   fused scan with the candidates of a cut.  Each *_impl takes the dtype
   as a constant argument: rowkern_dtype.h compiles one copy per dtype. */
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
    xd = qrs__kload1(v->data, i, dt);
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

/* The benchmark's floor: max and sum(exp(x - max)) in float, each block
   read from memory once (its max, then its exponentials from L1).  Its
   block max stays its own (fcscan_impl's reads the same way with
   another max instruction): the floor is the yardstick of the
   benchmark's ratios and must not move when a pass changes. */
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
    end = i + QRS__FLOOR_BLOCK < n ? i + QRS__FLOOR_BLOCK : n;
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
      xi = (float)qrs__kload1(v->data, j, dt);
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
      sum += exp(qrs__kload1(v->data, j, dt) - run_max);
  }
  *ret_max = run_max;
  return sum;
}

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
/* The lane maxima of the group of 8 vectors from j, of its even vectors
   in *g0 and of its odd ones in *g1 (merged in order by the callers:
   the same first maximal value per lane); the lane minima into *mn0 /
   *mn1 likewise, and (nan not NULL) the lanes that saw a NaN into
   *nan. */
static inline __attribute__((always_inline)) void
KS(group_max)(const void *data, size_t j, int dt, vfl *g0, vfl *g1,
              vfl *mn0, vfl *mn1, vk *nan)
{
  vfl x, x1;
  size_t k;

  *g0 = *g1 = KS(splatf)(-INFINITY);
  for (k = 0; k < 8 * KW; k += 2 * KW) {
    x = KS(loadf)(data, j + k, dt);
    x1 = KS(loadf)(data, j + k + KW, dt);
    *g0 = KS_VMAX(x, *g0);
    *g1 = KS_VMAX(x1, *g1);
    *mn0 = KS_VMIN(x, *mn0);
    *mn1 = KS_VMIN(x1, *mn1);
    if (nan)
      *nan |= (vk)(x != x) | (vk)(x1 != x1);
  }
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
            int skip, vfl sk, vd *sd, size_t *nskip, const char *pf,
            size_t es)
{
  vfl x, d, dc, e, zb, wb, lo;
  vk hm;
  size_t j, g, gi, k;
  unsigned mask;

  lo = KS(splatf)(FEXP_MIN);
  for (j = i, gi = 0; j < full; gi++) {
    /* the next row's bytes of this group (qrs__khint), into L2 */
    if (pf)
      for (k = 0; k < 8 * KW * es; k += 64)
        __builtin_prefetch(pf + (j - i) * es + k, 0, 2);
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
  size_t i, j, n, nh, nb, ng, ngm, nstale, end, full;
  double z, w, extra, f, b;
  float m, bm, bmn, xf, df, ef, xmin, mfirst;
  int l, clamp, unit, dense, skip;
  const char *pf;
  size_t es;

  n = v->n;
  es = qrs__dtype_size((enum qrs_dtype)dt);
  pf = qrs__khint.next && qrs__khint.bytes >= n * es ? qrs__khint.next
                                                      : NULL;
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
      KS(group_max)(v->data, j, dt, &g0, &g1, &mn0, &mn1, NULL);
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
      xf = (float)qrs__kload1(v->data, j, dt);
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
        xf = (float)qrs__kload1(v->data, j, dt);
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
    /* The flags as constants: one copy of the loop for each case. */
#define FGROUPS(clamp_, unit_, dense_) \
  KS(fgroups)(v->data, i, full, mv, iv, hv, &zd, &wd, hpos, hx, nh, dt, \
              clamp_, unit_, dense_, gmx, ng, skip, sk, &sd, &ret->nskip, \
              pf ? pf + i * es : NULL, es)
    if (dense)
      nh = unit ? FGROUPS(1, 1, 1) : FGROUPS(1, 0, 1);
    else if (clamp)
      nh = unit ? FGROUPS(1, 1, 0) : FGROUPS(1, 0, 0);
    else
      nh = unit ? FGROUPS(0, 1, 0) : FGROUPS(0, 0, 0);
#undef FGROUPS
    dense = nh - nb > QRS__FP_BLOCK / 64;
    for (j = full; j < end; j++) {
      xf = (float)qrs__kload1(v->data, j, dt);
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
    df = ((float)qrs__kload1(v->data, j, dt) - m) * invt;
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
#define FBAND_GROUP(unit_, dense_) \
  KS(fband_group)(v->data, j, mv, iv, lv, hv, hpos, hx, nh, dt, unit_, \
                  dense_)
    if (dense)
      nh = unit ? FBAND_GROUP(1, 1) : FBAND_GROUP(0, 1);
    else
      nh = unit ? FBAND_GROUP(1, 0) : FBAND_GROUP(0, 0);
#undef FBAND_GROUP
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
    df = ((float)qrs__kload1(v->data, j, dt) - m) * invt;
    if (df > dlo && df <= dhi) {
      hpos[nh] = (uint32_t)j;
      hx[nh] = (float)qrs__kload1(v->data, j, dt);
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
  vfl x, g0, g1, mx, mn0, mn1;
  vk nan;
  size_t j, n, ng;
  float m, mn, xf;
  int l, has_nan;

  n = v->n;
  mx = KS(splatf)(-INFINITY);
  mn0 = mn1 = KS(splatf)(INFINITY);
  nan = (vk)KS(splatf)(0.0f);
  for (j = ng = 0; j + 8 * KW <= n; j += 8 * KW, ng++) {
    KS(group_max)(v->data, j, dt, &g0, &g1, &mn0, &mn1, &nan);
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
    xf = (float)qrs__kload1(v->data, j, dt);
    m = xf > m ? xf : m;
    mn = xf < mn ? xf : mn;
    has_nan |= xf != xf;
  }
  *ret_max = m;
  *ret_min = mn;
  *ret_nan = has_nan;
  return gm ? ng : 0;
}

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
    df = ((float)qrs__kload1(v->data, j, dt) - m) * invt;
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
      xf = (float)qrs__kload1(v->data, j, dt);
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
      xf = (float)qrs__kload1(v->data, j, dt);
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
