/* The vectorised row passes (client/sampling/kernels/rowkern.c), in both kernel variants,
   against plain loops over libm. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "sampling/kernels/rowkern.h"

#define TESTRNG_SEED 0x9e3779b97f4a7c15ull
#include "testrng.h"

static const int levels[] = { 1, 2 };

Test(rowkern, half_and_bfloat16_convert_exactly_specials_included)
{
  static const struct {
    uint16_t h;
    double v;
  } half[] = {
    { 0x0000, 0.0 },      { 0x3c00, 1.0 },     { 0xc000, -2.0 },
    { 0x7bff, 65504.0 },  { 0x0001, 0x1p-24 }, { 0x03ff, 1023 * 0x1p-24 },
    { 0x0400, 0x1p-14 },  { 0x7c00, INFINITY }, { 0xfc00, -INFINITY },
    { 0x3555, 0x1.554p-2 },
  };
  static const struct {
    uint16_t h;
    double v;
  } bf[] = {
    { 0x3f80, 1.0 }, { 0xc040, -3.0 }, { 0x7f80, INFINITY },
    { 0xff80, -INFINITY }, { 0x0001, 0x1p-133 }, { 0x4049, 3.140625 },
  };
  struct qrs__view v;
  uint16_t nan16[1] = { 0x7e00 };
  size_t i;

  v.dtype = QRS_DTYPE_F16;
  v.n = 1;
  for (i = 0; i < sizeof(half) / sizeof(half[0]); i++) {
    v.data = &half[i].h;
    cr_expect_eq(qrs__kload(&v, 0), half[i].v, "half %04x", half[i].h);
  }
  v.dtype = QRS_DTYPE_BF16;
  for (i = 0; i < sizeof(bf) / sizeof(bf[0]); i++) {
    v.data = &bf[i].h;
    cr_expect_eq(qrs__kload(&v, 0), bf[i].v, "bf16 %04x", bf[i].h);
  }
  v.dtype = QRS_DTYPE_F16;
  v.data = nan16;
  cr_expect(isnan(qrs__kload(&v, 0)));
}

/* The vector loaders agree with the scalar one: scan and mass of a random
   half / bfloat16 row equal those of its float64 image. */
Test(rowkern, vector_and_scalar_loads_agree_for_16_bit_rows)
{
  uint16_t h[103], b[103];
  double x[103], y[103];
  struct qrs__view vh, vb, vx, vy;
  struct qrs__scan s1, s2;
  struct qrs__mass m1, m2;
  struct qrs__bound all = { -INFINITY, 0 };
  size_t i, l;

  for (i = 0; i < 103; i++) {
    h[i] = (uint16_t)(0x3000 + (uint16_t)(rnd() * 0x1000));
    b[i] = (uint16_t)(0x3e00 + (uint16_t)(rnd() * 0x200));
  }
  vh = (struct qrs__view){ h, QRS_DTYPE_F16, 103 };
  vb = (struct qrs__view){ b, QRS_DTYPE_BF16, 103 };
  for (i = 0; i < 103; i++) {
    x[i] = qrs__kload(&vh, i);
    y[i] = qrs__kload(&vb, i);
  }
  vx = (struct qrs__view){ x, QRS_DTYPE_F64, 103 };
  vy = (struct qrs__view){ y, QRS_DTYPE_F64, 103 };
  for (l = 0; l < 2; l++) {
    qrs__kernel_level(levels[l]);
    qrs__kscan(&vh, &s1);
    qrs__kscan(&vx, &s2);
    cr_expect_eq(s1.max, s2.max);
    qrs__kmass(&vh, s1.max, 1.3, &all, 1.0, -INFINITY, QRS__M_W, &m1);
    qrs__kmass(&vx, s1.max, 1.3, &all, 1.0, -INFINITY, QRS__M_W, &m2);
    cr_expect_eq(m1.z, m2.z);
    cr_expect_eq(m1.w, m2.w);
    qrs__kscan(&vb, &s1);
    qrs__kscan(&vy, &s2);
    cr_expect_eq(s1.max, s2.max);
    qrs__kmass(&vb, s1.max, 0.7, &all, 1.0, -INFINITY, 0, &m1);
    qrs__kmass(&vy, s1.max, 0.7, &all, 1.0, -INFINITY, 0, &m2);
    cr_expect_eq(m1.z, m2.z);
  }
}

Test(rowkern, scan_finds_max_nan_and_infinities)
{
  float f[37];
  struct qrs__view v = { f, QRS_DTYPE_F32, 37 };
  struct qrs__scan s;
  size_t i, l;

  for (l = 0; l < 2; l++) {
    qrs__kernel_level(levels[l]);
    for (i = 0; i < 37; i++)
      f[i] = (float)(i % 7) - 3.0f;
    f[36] = 9.5f;   /* in the tail */
    qrs__kscan(&v, &s);
    cr_expect_eq(s.max, 9.5);
    cr_expect(!s.has_nan && !s.has_posinf);
    f[35] = NAN;
    qrs__kscan(&v, &s);
    cr_expect(s.has_nan);
    cr_expect_eq(s.max, 9.5, "NaN never wins the max");
    f[35] = INFINITY;
    qrs__kscan(&v, &s);
    cr_expect(s.has_posinf);
    for (i = 0; i < 37; i++)
      f[i] = -INFINITY;
    qrs__kscan(&v, &s);
    cr_expect_eq(s.max, -INFINITY);
    cr_expect_eq(qrs__kfind(&v, -INFINITY), 0);
  }
}

/* The fast path's first read: max, min, NaN, and (AVX2) the lane maxima
   of every whole group of 64 values, NaN ignored, f32 and bf16 rows. */
Test(rowkern, group_maxima_pass_finds_max_min_nan_and_lane_maxima)
{
  static const size_t ns[] = { 5, 37, 64, 200, 1037 };
  static float f[1037], gm[8 * (1037 / 64 + 1)];
  static uint16_t h[1037];
  struct qrs__view v;
  float mx, mn, em, en, lm;
  uint32_t b;
  size_t i, k, l, g, ng, q;
  int nan, enan, dt;

  for (l = 0; l < 2; l++) {
    qrs__kernel_level(levels[l]);
    for (q = 0; q < sizeof(ns) / sizeof(ns[0]); q++) {
      for (k = 0; k < 4; k++) {
        for (dt = 0; dt < 2; dt++) {
          for (i = 0; i < ns[q]; i++) {
            f[i] = (float)(40.0 * rnd() - 20.0);
            if (k == 1 && rnd() < 0.05)
              f[i] = NAN;
            if (k == 2 && rnd() < 0.3)
              f[i] = -INFINITY;
            memcpy(&b, &f[i], sizeof(b));
            h[i] = (uint16_t)(b >> 16);
            if (dt) {           /* the bf16 value, exactly */
              b = (uint32_t)h[i] << 16;
              memcpy(&f[i], &b, sizeof(b));
            }
          }
          if (k == 3)
            f[ns[q] - 1] = INFINITY, h[ns[q] - 1] = 0x7f80;
          v.data = dt ? (const void *)h : (const void *)f;
          v.dtype = dt ? QRS_DTYPE_BF16 : QRS_DTYPE_F32;
          v.n = ns[q];
          ng = qrs__kgmax(&v, gm, &mx, &mn, &nan);
          em = -INFINITY;
          en = INFINITY;
          enan = 0;
          for (i = 0; i < ns[q]; i++) {
            em = f[i] > em ? f[i] : em;
            en = f[i] < en ? f[i] : en;
            enan |= f[i] != f[i];
          }
          cr_expect_eq(mx, em, "n %zu k %zu dt %d", ns[q], k, dt);
          cr_expect_eq(mn, en, "n %zu k %zu dt %d", ns[q], k, dt);
          cr_expect_eq(nan, enan, "n %zu", ns[q]);
          cr_expect_eq(ng, levels[l] == 2 && qrs__kernel_level(-1) == 2
                               ? ns[q] / 64 : 0, "n %zu level %d", ns[q],
                       levels[l]);
          for (g = 0; g < ng; g++) {
            for (i = 0; i < 8; i++) {
              lm = -INFINITY;
              for (b = 0; b < 8; b++)
                lm = f[g * 64 + b * 8 + i] > lm ? f[g * 64 + b * 8 + i] : lm;
              cr_expect_eq(gm[g * 8 + i], lm, "group %zu lane %zu", g, i);
            }
          }
        }
      }
    }
  }
}

/* Plain sums over libm, the bucket rule included. */
static void
plain_mass(const double *x, size_t n, double m, double invt, double xlo,
           double *z, double *w, size_t *nz, double *hz)
{
  double d, e;
  size_t i;
  int k;

  *z = *w = 0.0;
  *nz = 0;
  memset(hz, 0, QRS__NBUCKET * sizeof(*hz));
  for (i = 0; i < n; i++) {
    if (!(x[i] >= xlo))
      continue;
    d = (x[i] - m) * invt;
    e = exp(d);
    if (e == 0.0)
      continue;
    *z += e;
    *w += e * d;
    (*nz)++;
    k = -d * QRS__BSCALE >= QRS__NBUCKET - 1 ? QRS__NBUCKET - 1
                                             : (int)(-d * QRS__BSCALE);
    hz[k] += e;
  }
}

Test(rowkern, mass_pass_matches_libm_down_to_subnormal_weights)
{
  static double hz[QRS__NBUCKET], hw[QRS__NBUCKET], pz[QRS__NBUCKET];
  static uint32_t hpos[4096];
  static double hx[4096], he[4096];
  static int32_t hk[4096];
  struct qrs__view v;
  struct qrs__mass ms;
  struct qrs__bound all = { -INFINITY, 0 }, b;
  double *x, z, w, m, xlo;
  size_t n, i, nz, l, t;
  int k;

  n = 3001;
  x = malloc(n * sizeof(*x));
  for (l = 0; l < 2; l++) {
    qrs__kernel_level(levels[l]);
    for (t = 0; t < 6; t++) {
      /* t odd: logit gaps up to 900 (subnormal and zero weights) */
      for (i = 0; i < n; i++)
        x[i] = t & 1 ? -900.0 * rnd() : 10.0 * rnd() - 5.0;
      x[7] = t & 1 ? 0.0 : 5.0;
      if (t >= 4)
        x[11] = -INFINITY;
      m = x[7];
      v = (struct qrs__view){ x, QRS_DTYPE_F64, n };
      ms.hz = hz;
      ms.hw = hw;
      ms.hsplit = t < 2 ? QRS__NBUCKET : 128;
      ms.hcap = 4096;
      ms.hpos = hpos;
      ms.hx = hx;
      ms.he = he;
      ms.hk = hk;
      qrs__kmass(&v, m, 1.0 / (0.5 + t), &all, 1.0, -INFINITY,
                 QRS__M_W | QRS__M_HIST, &ms);
      plain_mass(x, n, m, 1.0 / (0.5 + t), -INFINITY, &z, &w, &nz, pz);
      cr_expect_float_eq(ms.z, z, 1e-14 * z, "t %zu: z %.17g %.17g", t, ms.z,
                         z);
      cr_expect_float_eq(ms.w, w, 1e-12 * fabs(w) + 1e-300);
      cr_expect_eq(ms.nz, nz, "t %zu: nz %zu want %zu", t, ms.nz, nz);
      cr_expect_eq(ms.n_in, n);
      for (k = 0; k < ms.hsplit; k++)
        cr_expect_float_eq(hz[k], pz[k], 1e-14 * pz[k] + 1e-300,
                           "t %zu bucket %d", t, k);
      if (ms.hsplit < QRS__NBUCKET) {
        double tail = 0.0;

        for (k = ms.hsplit; k < QRS__NBUCKET; k++)
          tail += pz[k];
        cr_expect_float_eq(ms.tz, tail, 1e-13 * tail + 1e-300);
      }
      /* A bound: only x >= xlo (with the predicate form of min-p too). */
      xlo = m - 3.0;
      b.x = xlo;
      b.i = 0;
      qrs__kmass(&v, m, 1.0, &b, 1.0, -INFINITY, 0, &ms);
      plain_mass(x, n, m, 1.0, xlo, &z, &w, &nz, pz);
      cr_expect_float_eq(ms.z, z, 1e-14 * z);
      cr_expect_eq(ms.n_in, nz);
      qrs__kmass(&v, m, 1.0, &all, 1.0, -3.0, 0, &ms);
      cr_expect_float_eq(ms.z, z, 1e-14 * z);
      cr_expect_geq(ms.xmin, xlo);
    }
  }
  free(x);
}

Test(rowkern, exp_kernel_is_within_a_few_ulp_of_libm)
{
  double v[1000], d;
  size_t i, l;
  double worst;

  for (l = 0; l < 2; l++) {
    qrs__kernel_level(levels[l]);
    for (i = 0; i < 1000; i++)
      v[i] = -750.0 * (double)i / 999.0;
    qrs__kexp(v, 1000, 0.0, 1.0);
    worst = 0.0;
    for (i = 0; i < 1000; i++) {
      d = -750.0 * (double)i / 999.0;
      if (exp(d) == 0.0) {
        cr_expect_eq(v[i], 0.0, "underflow at %g", d);
        continue;
      }
      if (fabs(v[i] / exp(d) - 1.0) > worst)
        worst = fabs(v[i] / exp(d) - 1.0);
    }
    cr_expect_lt(worst, 5e-16, "worst relative error %g", worst);
    cr_expect_gt(worst, 0.0, "not libm itself");
  }
}

Test(rowkern, collect_and_topk_follow_the_tie_rule)
{
  double x[50];
  uint32_t pos[50];
  double xs[50];
  struct qrs__view v = { x, QRS_DTYPE_F64, 50 };
  struct qrs__bound all = { -INFINITY, 0 }, b;
  size_t i, n, above, l;
  int seen[50];

  for (i = 0; i < 50; i++)
    x[i] = (double)(i % 5);   /* ten tokens at each of 0..4 */
  for (l = 0; l < 2; l++) {
    qrs__kernel_level(levels[l]);
    /* top-12: the ten 4s and the two highest-id 3s */
    cr_assert_eq(qrs__ktopk(&v, 12, pos, xs), 12);
    memset(seen, 0, sizeof(seen));
    for (i = 0; i < 12; i++)
      seen[pos[i]] = 1;
    for (i = 0; i < 50; i++)
      cr_expect_eq(seen[i], x[i] == 4.0 || i == 48 || i == 43,
                   "token %zu", i);
    /* collect d in [-2, -1): the 2s (and 3s excluded); above: 3s and 4s */
    n = qrs__kcollect(&v, 4.0, 1.0, &all, -2.0, -1.0, pos, xs, 50, &above);
    cr_expect_eq(n, 10);
    cr_expect_eq(above, 20);
    for (i = 1; i < n; i++)
      cr_expect_gt(pos[i], pos[i - 1], "ascending");
    /* a lexicographic bound: 3s from id 38 on, and every 4 */
    b.x = 3.0;
    b.i = 38;
    n = qrs__kcollect(&v, 4.0, 1.0, &b, -INFINITY, INFINITY, pos, xs, 50,
                      NULL);
    cr_expect_eq(n, 13);
    /* bucket collection agrees with the mass pass's bucket of d = -1 */
    n = qrs__kcollect_bucket(&v, 4.0, 1.0, &all, 16, pos, xs, &above);
    cr_expect_eq(n, 10);
    cr_expect_eq(above, 10);
    for (i = 0; i < n; i++)
      cr_expect_eq(xs[i], 3.0);
  }
}

Test(rowkern, floor_is_max_and_sum_exp)
{
  float *f;
  struct qrs__view v;
  double mx, s, ref;
  size_t i, n, l;

  n = 5000;
  f = malloc(n * sizeof(*f));
  for (i = 0; i < n; i++)
    f[i] = (float)(8.0 * rnd());
  f[4321] = 9.0f;
  v = (struct qrs__view){ f, QRS_DTYPE_F32, n };
  ref = 0.0;
  for (i = 0; i < n; i++)
    ref += exp((double)f[i] - 9.0);
  for (l = 0; l < 2; l++) {
    qrs__kernel_level(levels[l]);
    s = qrs__kfloor(&v, &mx);
    cr_expect_eq(mx, 9.0);
    cr_expect_float_eq(s, ref, 1e-12 * ref);
  }
  free(f);
}

/* The one-pass scan and entropy equals a scan followed by a mass pass,
   also when the running max grows from block to block and when weights
   are subnormal. */
Test(rowkern, scan_with_entropy_equals_scan_then_mass)
{
  struct qrs__view v;
  struct qrs__scan s1, s2;
  struct qrs__mass m1, m2;
  struct qrs__bound all = { -INFINITY, 0 };
  double *x;
  float *f;
  size_t i, n, l;
  int t;

  n = 9000;
  x = malloc(n * sizeof(*x));
  f = malloc(n * sizeof(*f));
  for (l = 0; l < 2; l++) {
    qrs__kernel_level(levels[l]);
    for (t = 0; t < 3; t++) {
      for (i = 0; i < n; i++) {
        /* rising maxima across blocks; t 2: gaps into the subnormals */
        x[i] = t == 2 ? -750.0 * rnd() : 0.001 * (double)i - 4.0 * rnd();
        if (t == 1 && i % 97 == 0)
          x[i] = -INFINITY;
        f[i] = (float)x[i];
      }
      if (t == 2)
        x[n - 1] = 0.0;
      v = (struct qrs__view){ x, QRS_DTYPE_F64, n };
      qrs__kscan_entropy(&v, &s1, &m1);
      qrs__kscan(&v, &s2);
      qrs__kmass(&v, s2.max, 1.0, &all, 1.0, -INFINITY, QRS__M_W, &m2);
      cr_expect_eq(s1.max, s2.max);
      cr_expect_eq(s1.has_nan, s2.has_nan);
      cr_expect_float_eq(m1.z, m2.z, 1e-13 * m2.z, "t %d", t);
      cr_expect_float_eq(m1.w, m2.w, 1e-12 * fabs(m2.w) + 1e-300, "t %d", t);
      cr_expect_float_eq(m1.w2, m2.w2, 1e-12 * fabs(m2.w2) + 1e-300, "t %d",
                         t);
      v = (struct qrs__view){ f, QRS_DTYPE_F32, n };
      qrs__kscan_entropy(&v, &s1, &m1);
      qrs__kscan(&v, &s2);
      cr_expect_eq(s1.max, s2.max);
    }
    x[5] = NAN;
    v = (struct qrs__view){ x, QRS_DTYPE_F64, n };
    qrs__kscan_entropy(&v, &s1, &m1);
    cr_expect(s1.has_nan);
  }
  free(x);
  free(f);
}

/* ---- masks at -DBL_MAX ---- */

/* numpy's finfo(float64).min as a mask before the max: the running
   rescale of the one-pass entropy sums must not overflow (dl * dl). */
Test(rowkern, entropy_pass_survives_minus_dbl_max_masks)
{
  struct qrs__view v;
  struct qrs__scan s1, s2;
  struct qrs__mass m1, m2;
  struct qrs__bound all = { -INFINITY, 0 };
  double *x;
  size_t i, n, l;

  n = 5000;
  x = malloc(n * sizeof(*x));
  for (l = 0; l < 2; l++) {
    qrs__kernel_level(levels[l]);
    for (i = 0; i < n; i++)
      x[i] = i < 2100 || i % 3 == 0 ? -DBL_MAX : 2.0 * rnd();
    v = (struct qrs__view){ x, QRS_DTYPE_F64, n };
    qrs__kscan_entropy(&v, &s1, &m1);
    qrs__kscan(&v, &s2);
    qrs__kmass(&v, s2.max, 1.0, &all, 1.0, -INFINITY, QRS__M_W, &m2);
    cr_assert(isfinite(m1.z) && isfinite(m1.w) && isfinite(m1.w2),
              "z %g w %g w2 %g", m1.z, m1.w, m1.w2);
    cr_expect_float_eq(m1.z, m2.z, 1e-13 * m2.z);
    cr_expect_float_eq(m1.w, m2.w, 1e-12 * fabs(m2.w));
    cr_expect_float_eq(m1.w2, m2.w2, 1e-12 * fabs(m2.w2));
    cr_expect(log(m1.z) - m1.w / m1.z > 1.0);
  }
  free(x);
}

/* ---- denormals-are-zero / flush-to-zero ---- */

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>

static unsigned
daz_on(void)
{
  unsigned old = _mm_getcsr();

  _mm_setcsr(old | 0x8040u);     /* DAZ | FTZ */
  return old;
}

static void
daz_off(unsigned old)
{
  _mm_setcsr(old);
}

/* The results of every row kernel on a row, for comparison across
   floating-point modes. */
struct kres {
  struct qrs__scan sc;
  struct qrs__mass ms;
  size_t find, ncol, above, nb, ntop;
  uint32_t pos[64], bpos[64], tpos[8];
  double x[64], bx[64], tx[8], hz[QRS__NBUCKET], hw[QRS__NBUCKET];
  double floor_z, floor_m, e1;
};

static void
all_kernels(const struct qrs__view *v, struct kres *r)
{
  struct qrs__bound all = { -INFINITY, 0 };
  struct qrs__mass ms;
  static uint32_t hpos[4096];
  static double hx[4096], he[4096];
  static int32_t hk[4096];

  memset(r, 0, sizeof(*r));
  qrs__kscan(v, &r->sc);
  r->find = qrs__kfind(v, r->sc.max);
  memset(&ms, 0, sizeof(ms));
  ms.hz = r->hz;
  ms.hw = r->hw;
  ms.hsplit = QRS__NBUCKET;
  ms.hcap = 4096;
  ms.hpos = hpos;
  ms.hx = hx;
  ms.he = he;
  ms.hk = hk;
  qrs__kmass(v, r->sc.max, 1.0, &all, 1.0, -INFINITY,
             QRS__M_W | QRS__M_HIST, &ms);
  r->ms = ms;
  r->ncol = qrs__kcollect(v, r->sc.max, 1.0, &all, -1e-30, INFINITY,
                          r->pos, r->x, 64, &r->above);
  r->nb = qrs__kcollect_bucket(v, r->sc.max, 1.0, &all, 0, r->bpos, r->bx,
                               NULL);
  r->ntop = qrs__ktopk(v, 8, r->tpos, r->tx);
  r->floor_z = qrs__kfloor(v, &r->floor_m);
  r->e1 = qrs__kload(v, 3);
}

/* A float16 row whose logits are all half subnormals (|x| < 2^-14), the
   max among them: under DAZ/FTZ the scalar loader used to flush them to
   0, so the greedy search found no element equal to the max and
   returned the row length as a token.  Every kernel must give the same
   results in both modes, in both kernel variants, for every dtype. */
Test(rowkern, every_kernel_is_immune_to_daz_and_ftz)
{
  struct kres a, b;
  struct qrs__view v;
  uint16_t h[61];
  float f[61];
  double d[61];
  size_t i, n, l;
  unsigned old;
  int dt;

  n = 61;                 /* not a multiple of any vector width */
  for (i = 0; i < n; i++) {
    h[i] = (uint16_t)(1 + (i * 37) % 1000);     /* subnormal halves */
    if (i % 5 == 0)
      h[i] |= 0x8000u;
  }
  h[17] = 1003;                                 /* the max */
  for (i = 0; i < n; i++) {
    f[i] = (float)(i % 7) * 0x1p-140f;          /* float subnormals */
    d[i] = (double)(i % 9) * 0x1p-1070;         /* double subnormals */
  }
  f[33] = 9 * 0x1p-140f;
  d[44] = 11 * 0x1p-1070;
  for (l = 0; l < 2; l++) {
    qrs__kernel_level(levels[l]);
    for (dt = 0; dt < 4; dt++) {
      if (dt == QRS_DTYPE_BF16)
        continue;       /* below, from the float row's top bits */
      v.dtype = (enum qrs_dtype)dt;
      v.n = n;
      v.data = dt == QRS_DTYPE_F16 ? (const void *)h
               : dt == QRS_DTYPE_F32 ? (const void *)f : (const void *)d;
      all_kernels(&v, &a);
      old = daz_on();
      all_kernels(&v, &b);
      daz_off(old);
      cr_assert_lt(b.find, n, "level %d dtype %d: max not found", levels[l],
                   dt);
      cr_expect_eq(a.find, b.find, "level %d dtype %d", levels[l], dt);
      cr_expect_eq(a.sc.max, b.sc.max, "level %d dtype %d", levels[l], dt);
      cr_expect_eq(a.e1, b.e1, "level %d dtype %d", levels[l], dt);
      cr_expect_eq(a.ms.z, b.ms.z, "level %d dtype %d", levels[l], dt);
      cr_expect_eq(a.ms.nz, b.ms.nz, "level %d dtype %d", levels[l], dt);
      cr_expect_eq(a.ncol, b.ncol, "level %d dtype %d", levels[l], dt);
      cr_expect_eq(a.above, b.above, "level %d dtype %d", levels[l], dt);
      cr_expect_eq(a.nb, b.nb, "level %d dtype %d", levels[l], dt);
      cr_expect_eq(a.ntop, b.ntop);
      cr_expect_eq(memcmp(a.pos, b.pos, sizeof(a.pos)), 0);
      cr_expect_eq(memcmp(a.x, b.x, sizeof(a.x)), 0);
      cr_expect_eq(memcmp(a.tpos, b.tpos, sizeof(a.tpos)), 0);
      cr_expect_eq(memcmp(a.hz, b.hz, sizeof(a.hz)), 0);
      cr_expect_eq(a.floor_m, b.floor_m);
      cr_expect_eq(a.floor_z, b.floor_z);
    }
  }
}
#endif

/* The fast path's float exp: within 16 u (u = 2^-24, relative) of exp of
   its float argument over [-87, 0] (two thirds of QRS__FP_C0; the rest
   covers the float partial sums), in both kernel variants; 0 below. */
Test(rowkern, float_exp_is_within_its_certified_bound)
{
  double worst, e, ref;
  float d;
  size_t l;
  int i;

  for (l = 0; l < 2; l++) {
    qrs__kernel_level(levels[l]);
    worst = 0.0;
    for (i = 0; i <= 2000000; i++) {
      d = (float)(-87.0 * (double)i / 2000000.0);
      if (i % 3 == 1)
        d = nextafterf(d, 0.0f);
      ref = exp((double)d);
      e = fabs((double)qrs__kexpf(d) - ref) / ref;
      worst = e > worst ? e : worst;
    }
    cr_expect_lt(worst, 16.0 * QRS__FP_U, "level %d: %g", levels[l], worst);
    cr_expect_eq(qrs__kexpf(-87.5f), 0.0f);
    cr_log_info("float exp: worst relative error %.3g (%.2f x 2^-24)",
                worst, worst / QRS__FP_U);
  }
}

/* Top-k against a full sort in the selection order (x descending, then
   the later position first). */
struct xp {
  double x;
  uint32_t pos;
};

static int
xp_desc(const void *a, const void *b)
{
  const struct xp *p = a, *q = b;

  if (p->x != q->x)
    return p->x > q->x ? -1 : 1;
  return p->pos > q->pos ? -1 : p->pos < q->pos;
}

static int
u32_cmp(const void *a, const void *b)
{
  uint32_t p = *(const uint32_t *)a, q = *(const uint32_t *)b;

  return p < q ? -1 : p > q;
}

/* qrs__ktopk() and qrs__ktopk_scan() return exactly the sorted row's first
   k positions (as a set) and their values, for each k of ks, in both
   kernel variants. */
static void
check_topk(const struct qrs__view *v, const size_t *ks, size_t nk,
           const char *what)
{
  static struct xp all[200000];
  static uint32_t want[1024], got[1024];
  static double gx[1024];
  struct qrs__scan sc;
  size_t i, n = v->n, r, k, ki, l;
  int pass;

  for (i = 0; i < n; i++) {
    all[i].x = qrs__kload(v, i);
    all[i].pos = (uint32_t)i;
  }
  qsort(all, n, sizeof(*all), xp_desc);
  for (ki = 0; ki < nk; ki++) {
    k = ks[ki];
    if (k > n)
      continue;
    for (i = 0; i < k; i++)
      want[i] = all[i].pos;
    qsort(want, k, sizeof(*want), u32_cmp);
    for (l = 0; l < 2; l++) {
      qrs__kernel_level(levels[l]);
      for (pass = 0; pass < 2; pass++) {
        r = pass ? qrs__ktopk_scan(v, k, got, gx, &sc)
                 : qrs__ktopk(v, k, got, gx);
        cr_assert_eq(r, k, "%s k %zu", what, k);
        for (i = 0; i < k; i++)
          cr_assert_eq(gx[i], qrs__kload(v, got[i]), "%s: value of %u",
                       what, got[i]);
        qsort(got, k, sizeof(*got), u32_cmp);
        for (i = 0; i < k; i++)
          cr_assert_eq(got[i], want[i], "%s k %zu level %d%s: %zu-th "
                       "position %u, the sort says %u", what, k,
                       levels[l], pass ? " scan" : "", i, got[i], want[i]);
        if (pass) {
          cr_assert_eq(sc.max, all[0].x, "%s: max", what);
          cr_assert(!sc.has_nan && !sc.has_posinf, "%s", what);
        }
      }
    }
  }
}

/* Large rows take the block-maxima top-k (one read pass, then only the
   blocks whose max reaches the k-th largest block max): every dtype,
   both kernel variants, k from 1 to QRS__TOPK_BLOCKS_K and past it, rows
   of distinct values, of heavy ties (few levels, signed zeros), ascending
   and descending (the heap's worst and best order), all but a few -inf,
   all equal, and lengths with a partial last block. */
Test(rowkern, topk_by_block_maxima_equals_a_full_sort)
{
  static float f[151936 + 77];
  static uint16_t h[151936 + 77], bf[151936 + 77];
  static const size_t ks[] = { 1, 2, 50, 150, QRS__TOPK_BLOCKS_K,
                               QRS__TOPK_BLOCKS_K + 1 };
  static const size_t ns[] = { 151936 + 77, 40000 + 13, 4096 };
  struct qrs__view v;
  char what[96];
  size_t i, n, ni;
  int shape;
  uint32_t u;
  float y;

  for (ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
    n = ns[ni];
    /* (the longest row, with blocks of 128, on two shapes only: the test
       runs under valgrind too) */
    for (shape = 0; shape < (ni == 0 ? 2 : 6); shape++) {
      for (i = 0; i < n; i++) {
        switch (shape) {
        case 0: y = (float)(3.0 * gauss()); break;
        case 1: y = (float)floor(2.0 * gauss()) * (rnd() < 0.5 ? 1 : -1);
                if (y == 0.0f && rnd() < 0.5) y = -0.0f;
                break;
        case 2: y = (float)i * 1e-3f; break;
        case 3: y = -(float)i * 1e-3f; break;
        case 4: y = rnd() < 0.001 ? (float)gauss() : -INFINITY; break;
        default: y = 1.5f; break;
        }
        f[i] = y;
        memcpy(&u, &y, sizeof(u));
        bf[i] = (uint16_t)(u >> 16);
        /* a half of about the same size: exponent and top mantissa */
        h[i] = (uint16_t)(shape == 4 && y == -INFINITY ? 0xfc00
                          : (u >> 16 & 0x8000) |
                            (((u >> 23 & 0xff) - 127 + 15) & 0x1f) << 10 |
                            (u >> 13 & 0x3ff));
        if ((h[i] & 0x7c00) == 0x7c00)
          h[i] = (uint16_t)(h[i] & 0x83ff);
      }
      v.n = n;
      v.data = f;
      v.dtype = QRS_DTYPE_F32;
      snprintf(what, sizeof(what), "f32 n %zu shape %d", n, shape);
      check_topk(&v, ks, sizeof(ks) / sizeof(ks[0]), what);
      v.data = bf;
      v.dtype = QRS_DTYPE_BF16;
      what[0] = 'b';
      check_topk(&v, ks, sizeof(ks) / sizeof(ks[0]), what);
      v.data = h;
      v.dtype = QRS_DTYPE_F16;
      what[0] = 'h';
      check_topk(&v, ks, sizeof(ks) / sizeof(ks[0]), what);
    }
  }
}
