/* Template (rowkern_isa.h includes it once per variant): the vector
   primitives of the row kernels at the variant's width, VW doubles or KW
   floats per vector (rowkern_isa.h lists the macros a variant defines):
   splats, horizontal sums, masks, the loads of each dtype (exact
   conversions), the double exponential of the exact passes and the float
   exponential of the fast selection's passes, its bucket keys and its
   compressed stores.  All always_inline: they never cross a call.
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
    x[j] = (float)qrs__kload1(data, i + (size_t)j, dt);
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
      x[j] = qrs__kload1(data, i + (size_t)j, dt);
    return x;
  }
  for (j = 0; j < VW; j++)
    x[j] = i + (size_t)j < n ? qrs__kload1(data, i + (size_t)j, dt) : 0.0;
  return x;
}

/* exp(d) for QRS__D_NORMAL <= d <= 0 (lanes below are clamped, caller
   masks). */
static inline __attribute__((always_inline)) vd
KS(exp)(vd d)
{
  const double shifter = 0x1.8p52;
  vd t, kd, r, p;
  vi ki;

  d = VSEL(d < QRS__D_NORMAL, KS(splat)(QRS__D_NORMAL), d);
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

static float
KS(expf1)(float d)
{
  vfl t = KS(splatf)(d);

  t = KS(expf)(FMAX(t, KS(splatf)(FEXP_MIN)));
  return d >= FEXP_MIN ? t[0] : 0.0f;
}

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
