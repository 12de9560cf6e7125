/* Template: one dtype's entry points of one variant, included by
   rowkern_isa.h once per dtype with
     KD(name)  the name with the variant's and the dtype's suffixes
     KD_DT     the dtype: a constant, so every pass below is compiled
               for it (its loads and conversions specialised)
     KD_FLOAT  1 for float32 / 16-bit rows (the float-width passes of
               rowkern_float.h exist), 0 for float64
   and ending in KD(kdt), the struct qrs__kdt of them (rowkern_int.h).
   Each is the pass of rowkern_exact.h / rowkern_float.h behind the
   qrs__k* function of rowkern.h with the same name, for this dtype; the
   flags a pass takes as constants are chosen here. */

/* The mass pass with each combination of QRS__M_W (fw) and QRS__M_HIST
   (fh) as constants: p(lain), b(uckets), w(eighted), wb. */
#define KD_MASS(name, fw, fh) \
  static void \
  KD(name)(const struct qrs__view *v, double m, double invt, \
           const struct qrs__bound *b, double pinv, double pmin, \
           struct qrs__mass *ret) \
  { \
    KS(mass_impl)(v, m, invt, b, pinv, pmin, ret, KD_DT, fw, fh); \
  }

KD_MASS(mass_p, 0, 0)
KD_MASS(mass_b, 0, 1)
KD_MASS(mass_w, 1, 0)
KD_MASS(mass_wb, 1, 1)
#undef KD_MASS

static size_t
KD(collect)(const struct qrs__view *v, double m, double invt,
            const struct qrs__bound *b, double dlo, double dhi,
            uint32_t *pos, double *x, size_t cap, size_t *ret_above)
{
  return KS(collect_impl)(v, m, invt, b, dlo, dhi, pos, x, cap, ret_above,
                          KD_DT);
}

static size_t
KD(cbucket)(const struct qrs__view *v, double m, double invt,
            const struct qrs__bound *b, int key, uint32_t *pos, double *x,
            size_t *ret_above)
{
  return KS(collect_bucket_impl)(v, m, invt, b, key, pos, x, ret_above,
                                 KD_DT);
}

static void
KD(scan)(const struct qrs__view *v, struct qrs__scan *ret)
{
  /* float32 and 16-bit values at the full float width (the conversions
     are exact) */
  if (KD_FLOAT)
    KS(scan_wide_impl)(v, ret, KD_DT);
  else
    KS(scan_impl)(v, ret, KD_DT);
}

static size_t
KD(topk)(const struct qrs__view *v, size_t k, uint32_t *pos, double *x,
         int *odd)
{
  if (!odd)
    return KS(topk_impl)(v, k, pos, x, NULL, KD_DT);
  return KS(topk_impl)(v, k, pos, x, odd, KD_DT);
}

static double
KD(floor)(const struct qrs__view *v, double *ret_max)
{
  return KS(floor_impl)(v, ret_max, KD_DT);
}

static int
KD(scanh)(const struct qrs__view *v, struct qrs__scan *sc,
          struct qrs__mass *ms)
{
  return KS(scan_entropy_impl)(v, sc, ms, KD_DT);
}

#if KD_FLOAT
static size_t
KD(fcollect)(const struct qrs__view *v, double m, double invt, double dlo,
             float thr, uint32_t *pos, double *x, size_t cap)
{
  return KS(fcollect_impl)(v, m, invt, dlo, thr, pos, x, cap, KD_DT);
}

static double
KD(ffloor)(const struct qrs__view *v, double *ret_max)
{
  return KS(ffloor_impl)(v, ret_max, KD_DT);
}

/* The read-only floor: the scan's max alone. */
static double
KD(fread)(const struct qrs__view *v)
{
  return KS(fmax_row)(v, KD_DT, NULL);
}

/* The group maxima (gm, gm_out) exist at 8 floats per vector only. */
static size_t
KD(fpass)(const struct qrs__view *v, float m, float invt, double invtd,
          float dhead, uint32_t *hpos, float *hx, float *he, int32_t *hk,
          struct qrs__fpass *ret, const float *gm, float lo, float *gm_out,
          float dskip)
{
  if (KW != 8)
    gm = gm_out = NULL;
  if (m != m)
    return KS(fpass_impl)(v, m, invt, invtd, dhead, hpos, hx, he, hk, ret,
                          KD_DT, 1, NULL, 0.0f, gm_out, -INFINITY);
  if (gm)
    return KS(fpass_impl)(v, m, invt, invtd, dhead, hpos, hx, he, hk, ret,
                          KD_DT, 0, gm, lo, NULL, dskip);
  return KS(fpass_impl)(v, m, invt, invtd, dhead, hpos, hx, he, hk, ret,
                        KD_DT, 0, NULL, 0.0f, gm_out, dskip);
}

static size_t
KD(fband)(const struct qrs__view *v, float m, float invt, float dlo,
          float dhi, uint32_t *hpos, float *hx, float *he, int32_t *hk,
          size_t nh, const float *gm, size_t ngm, float dsh, double *ret_z,
          double *ret_zd)
{
  if (KW != 8)
    gm = NULL;
  return KS(fband_impl)(v, m, invt, dlo, dhi, hpos, hx, he, hk, nh, KD_DT,
                        gm, ngm, dsh, ret_z, ret_zd);
}

static size_t
KD(gmax)(const struct qrs__view *v, float *gm, float *ret_max,
         float *ret_min, int *ret_nan)
{
  return KS(gmax_impl)(v, KW == 8 ? gm : NULL, ret_max, ret_min, ret_nan,
                       KD_DT);
}

static void
KD(ftail)(const struct qrs__view *v, float m, float invt, float dlo,
          double *ret_z, double *ret_err, double *ret_w)
{
  if (invt == 1.0f)
    KS(ftail_impl)(v, m, invt, dlo, ret_z, ret_err, ret_w, KD_DT, 1);
  else
    KS(ftail_impl)(v, m, invt, dlo, ret_z, ret_err, ret_w, KD_DT, 0);
}

static size_t
KD(fcscan)(const struct qrs__view *v, double dlo, double pinv,
           uint32_t *tpos, float *tx, float *ret_max, int *ret_odd,
           int *ret_ok)
{
  return KS(fcscan_impl)(v, dlo, pinv, tpos, tx, ret_max, ret_odd, ret_ok,
                         KD_DT);
}
#endif

static const struct qrs__kdt KD(kdt) = {
  .mass = { KD(mass_p), KD(mass_b), KD(mass_w), KD(mass_wb) },
  .collect = KD(collect),
  .cbucket = KD(cbucket),
  .scan = KD(scan),
  .topk = KD(topk),
  .floor = KD(floor),
  .scanh = KD(scanh),
#if KD_FLOAT
  .fcollect = KD(fcollect),
  .ffloor = KD(ffloor),
  .fread = KD(fread),
  .fpass = KD(fpass),
  .fband = KD(fband),
  .gmax = KD(gmax),
  .ftail = KD(ftail),
  .fcscan = KD(fcscan),
#endif
};
