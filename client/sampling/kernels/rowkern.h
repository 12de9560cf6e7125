/* Vectorised passes over one logits row (libqrs internal).

   A row is viewed as n values of one dtype.  Every pass converts float16 /
   bfloat16 / float32 to double on the fly (no converted copy of the row is
   ever made) and works in double precision.  The exponential used by every
   pass is the same polynomial (about 2 ulp), so a weight computed by one
   pass is bit-identical to the same weight computed by another. */
#ifndef QRS_ROWKERN_H
#define QRS_ROWKERN_H

#include <stddef.h>
#include <stdint.h>

#include <qrs/dtype.h>

struct qrs__view {
  const void *data;
  enum qrs_dtype dtype;
  size_t n;
};

/* A set of row positions: (x, i) is in the set iff (x, i) >= (bx, bi) in
   lexicographic order, i.e. x > bx, or x == bx and i >= bi.  Since the
   selection order is "larger logit first, equal logits: higher position
   first", every prefix of that order is such a set.  { -INFINITY, 0 } is
   the whole row. */
struct qrs__bound {
  double x;
  size_t i;
};

/* The mass histogram: bucket b holds the elements with
   key = min(QRS__NBUCKET - 1, trunc(-d * QRS__BSCALE)) == b, i.e.
   d in (-(b+1)/16, -b/16] for d = (x - max) / T above -63.9. */
#define QRS__NBUCKET 1024
#define QRS__BSCALE 16.0

/* exp(d) > 0 in binary64 iff d >= QRS__D_UNDERFLOW. */
#define QRS__D_UNDERFLOW (-745.1332191019411)

/* Largest k for qrs__ktopk(). */
#define QRS__TOPK_HEAP 1024
/* Top-k by block maxima (float32 / 16-bit rows): for k up to
   QRS__TOPK_BLOCKS_K, with at most QRS__TOPK_NB blocks (on the stack). */
#define QRS__TOPK_BLOCKS_K 256
#define QRS__TOPK_NB 2048

struct qrs__scan {
  double max;             /* largest non-NaN value (-inf if none) */
  int has_nan;
  int has_posinf;
};

struct qrs__mass {
  double z;                   /* sum of e = exp(d) over the set */
  double w;                   /* sum of e * d (QRS__M_W) */
  double w2;                  /* sum of e * d * d (QRS__M_W) */
  /* QRS__M_HIST: buckets below hsplit (the caller sets it, 1 ..
     QRS__NBUCKET) are resolved into hz / hw (caller's storage of
     QRS__NBUCKET each); the rest are only summed into tz / tw (the tail:
     a crossing there needs a pass with hsplit = QRS__NBUCKET). */
  int hsplit;
  double *hz;                 /* sum of e per bucket */
  double *hw;                 /* the same for e * d (with W) */
  double tz, tw;              /* the tail's sums */
  /* The head list: the resolved buckets' elements (positions ascending)
     while there are at most hcap of them (caller's storage); nhead
     SIZE_MAX when there were more. */
  size_t hcap, nhead;
  uint32_t *hpos;
  double *hx, *he;
  int32_t *hk;
  double pinv, pmin;          /* how the pass was made (for a rerun) */
  unsigned flags;
  size_t n_in;                /* elements in the set */
  size_t nz;                  /* elements in the set with e > 0 */
  double xmin;                /* smallest x in a restricted set (a bound
                                 or predicate); -inf when unrestricted */
};

enum {
  QRS__M_W = 1,               /* also W2 */
  QRS__M_HIST = 4,            /* fill hz (and hw with W) */
};

double qrs__kload(const struct qrs__view *v, size_t i);
void qrs__kscan(const struct qrs__view *v, struct qrs__scan *ret);
size_t qrs__kfind(const struct qrs__view *v, double x);

/* Mass of the set b intersected with { (x - m) * pinv >= pmin } (pmin
   -INFINITY: no predicate) at inverse temperature invt:
   d = (x - m) * invt, e = exp(d).  With QRS__M_HIST, ret->hz (and hw)
   must point to QRS__NBUCKET doubles each. */
void qrs__kmass(const struct qrs__view *v, double m, double invt,
                const struct qrs__bound *b, double pinv, double pmin,
                unsigned flags, struct qrs__mass *ret);

/* The positions (ascending) and values of the set b's elements with
   dlo <= d < dhi (dhi may be +INFINITY), d = (x - m) * invt, computed
   exactly as in qrs__kmass().  Stores at most cap of them and returns how
   many there are; *ret_above (may be NULL) gets the number of set elements
   with d >= dhi. */
size_t qrs__kcollect(const struct qrs__view *v, double m, double invt,
                     const struct qrs__bound *b, double dlo, double dhi,
                     uint32_t *pos, double *x, size_t cap,
                     size_t *ret_above);

/* The set b's elements (positive weight) in histogram bucket key of a
   mass pass at invt, positions ascending, with their values; *ret_above
   gets the number of set elements in lower buckets (larger weights). */
size_t qrs__kcollect_bucket(const struct qrs__view *v, double m, double invt,
                            const struct qrs__bound *b, int key,
                            uint32_t *pos, double *x, size_t *ret_above);

/* In place: v[i] = exp((v[i] - m) * invt), bit-identical to the weights of
   qrs__kmass(). */
void qrs__kexp(double *v, size_t n, double m, double invt);

/* The k (1 <= k <= QRS__TOPK_HEAP, k <= n) largest elements in the
   selection order, unordered.  Returns k. */
size_t qrs__ktopk(const struct qrs__view *v, size_t k, uint32_t *pos,
                  double *x);

/* qrs__kscan() and qrs__kcollect(v, max, pinv, whole row, dlo, INFINITY,
   pos, x, cap, NULL) in one pass over a float32 / 16-bit row (blocks read
   once, candidates against the running max in tpos / tx: room for the
   row + 16).  Returns 1 with *sc and *ret_cnt (the count, which may
   exceed cap), or 0 (nothing set: a float64 row, a threshold outside the
   float range, no finite max, or a float sum that cannot rule out a NaN
   or +inf) when the caller must scan. */
int qrs__kcollect_scan(const struct qrs__view *v, double pinv, double dlo,
                       uint32_t *pos, double *x, size_t cap, uint32_t *tpos,
                       float *tx, struct qrs__scan *sc, size_t *ret_cnt);

/* qrs__ktopk() and qrs__kscan() in one pass over a float32 / 16-bit row
   (float64 rows: two passes). */
size_t qrs__ktopk_scan(const struct qrs__view *v, size_t k, uint32_t *pos,
                       double *x, struct qrs__scan *sc);

/* qrs__kscan() and the entropy sums z, w, w2 of the whole row at T = 1
   (ms->z, w, w2; nothing else of ms) in one pass over memory.  The sums
   are meaningless when the scan finds a NaN, +inf or no finite value. */
void qrs__kscan_entropy(const struct qrs__view *v, struct qrs__scan *sc,
                        struct qrs__mass *ms);

/* The benchmark floor: one pass computing max and sum(exp(x - max)).
   Returns the sum; *ret_max gets the max. */
double qrs__kfloor(const struct qrs__view *v, double *ret_max);

/* Denormals-are-zero and flush-to-zero (MXCSR bits that
   torch.set_flush_denormal(True) or any -ffast-math library may leave
   set in the engine's thread) change what subnormal logits compare equal
   to and what subnormal weights are.  Every kernel entry and the
   selection run with both bits clear and restore the caller's mode:
   qrs__fpenv_enter() returns the mode to hand to qrs__fpenv_leave(). */
#if defined(__x86_64__) || (defined(__i386__) && defined(__SSE__))
#include <xmmintrin.h>
#define QRS__MXCSR_DAZ_FTZ 0x8040u

static inline unsigned
qrs__fpenv_enter(void)
{
  unsigned csr = _mm_getcsr();

  if (csr & QRS__MXCSR_DAZ_FTZ)
    _mm_setcsr(csr & ~QRS__MXCSR_DAZ_FTZ);
  return csr;
}

static inline void
qrs__fpenv_leave(unsigned csr)
{
  if (csr & QRS__MXCSR_DAZ_FTZ)
    _mm_setcsr(csr);
}
#else
static inline unsigned
qrs__fpenv_enter(void)
{
  return 0;
}

static inline void
qrs__fpenv_leave(unsigned csr)
{
  (void)csr;
}
#endif

/* The float pass of the fast selection.  Each weight's relative error
   against exp of the exact (x - m) / T is at most
   QRS__FP_C0 + QRS__FP_C1 * |d| (d the float (x - m) * invt, down to
   FEXP_MIN = -87, below which the weight is 0): C0 covers the
   polynomial and its rounding (16 u; measured at most 4.2 u) and the
   float partial sums (8 terms: 8 u), C1 the
   three roundings of d (x - m, invt, the product) amplified by exp;
   C1U the one rounding of x - m when invt is exactly 1 (the kernels
   then compute d = x - m, no product).
   docs/sampling.md has the derivation; test_rowkern checks the
   polynomial part on a dense sweep. */
#define QRS__FP_U 0x1p-24
#define QRS__FP_C0 (24.0 * QRS__FP_U)
#define QRS__FP_C1 (3.01 * QRS__FP_U)
#define QRS__FP_C1U (1.01 * QRS__FP_U)
#define QRS__FP_DMIN (-87.0)

/* Values per block of the float pass (read from memory once), and its
   head buckets: key = min(QRS__FP_NB - 1, trunc(-d * 16)) (every d of
   the ladder's deepest band, d > -24, has its own). */
#define QRS__FP_BLOCK 1024
#define QRS__FP_NB 384

/* Bytes of one value of dtype dt (0: not a dtype). */
static inline size_t
qrs__dtype_size(enum qrs_dtype dt)
{
  switch (dt) {
  case QRS_DTYPE_F32:
    return 4;
  case QRS_DTYPE_F16:
  case QRS_DTYPE_BF16:
    return 2;
  case QRS_DTYPE_F64:
    return 8;
  }
  return 0;
}

/* The calling thread's hint to the float pass: the row it will read
   next (qrs_sample_batch() sets it to the row a pool thread samples
   after this one), of at least bytes bytes.  While the pass computes
   this row's weights it asks the cache for the next row's bytes at the
   same offsets, so that row's first read finds them in L2 instead of
   memory.  Prefetches only: no result depends on it.  next NULL: none. */
struct qrs__khint {
  const char *next;
  size_t bytes;
};
extern __thread struct qrs__khint qrs__khint;

struct qrs__fpass {
  double z;                   /* sum of the float weights outside the
                                 head (d < dhead) */
  double err;                 /* their sum of e * (C0 + C1 |d|) (the
                                 bound) */
  double w;                   /* the sum of e * d in it (<= 0): err with
                                 C1U instead is err + (C1 - C1U) w */
  size_t cnt_a;               /* elements with float d >= -745.0 */
  size_t cnt_b;               /* elements with float d >= -745.3 */
  float max;                  /* the max used (found, when fused) */
  float mfirst;               /* fused: the first running max (every
                                 weight was summed against a max in
                                 [mfirst, max]); else max */
  int bad;                    /* fused: a NaN, +inf, or no value above
                                 -inf (nothing else is set) */
  size_t ngm;                 /* group maxima in gm / gm_out */
  size_t nskip;               /* groups not read (dskip) */
};

/* float32 / 16-bit rows only: the pass above over the whole row at
   max m, inverse temperature invt (invtd: the same in double, for the
   rescaling of a fused pass); m NaN: the max is found in the same pass
   (fused: blocks of QRS__FP_BLOCK, a running max).  The head list
   (elements with float d > dhead; fused: against the running max, so
   possibly a few more) goes to hpos / hx / he / hk (position, value,
   float weight against the final max, bucket key), which need room for
   the whole row plus 16 entries.  Returns the head's length.
   gm (may be NULL; m known): the float moment pass's lane maxima of
   the row (moments.h, QRS__MOM_SUB values per 8 floats) and lo the
   row's min: the pass then reads each block once (AVX2; SSE2 ignores
   them).  gm_out (may be NULL; room as gm; AVX2 only): the pass's own
   group maxima in gm's layout, ret->ngm of them (from the row's start);
   with gm, ret->ngm counts gm's.  qrs__kfband() skips the groups whose
   max is below its band.
   dskip (m known; -INFINITY: none; at most QRS__FP_DMAXSKIP, below
   the ladder's second band): a group of 8 vectors whose max (gm's, or
   the block's first read) has d < dskip is not read; its mass, at most
   b = 8 * the sum of its lane maxima's weights, goes into ret->z as b / 2
   and into ret->err as b / 2.  Only where the float tail needs no more
   than that bound (select.c: a nucleus, whose probabilities are exact
   weights). */
#define QRS__FP_DMAXSKIP (-16.0f)
size_t qrs__kfpass(const struct qrs__view *v, float m, float invt,
                   double invtd, float dhead, uint32_t *hpos, float *hx,
                   float *he, int32_t *hk, struct qrs__fpass *ret,
                   const float *gm, float lo, float *gm_out, float dskip);

/* The ladder's band pass: the elements with dlo < d <= dhi (d exactly as
   qrs__kfpass() computes it at max m; dlo may be -inf) appended to the head
   lists from nh (the same layout; room for the whole row + 16).  Returns
   the new length.  No exponential over the row: a compare in logit
   space, the weights on the compact list.  gm (may be NULL): ngm group
   maxima as qrs__kfpass() gives them; groups below dlo are not read.
   *ret_z: the sum of the new entries' float weights e; *ret_zd: the sum
   of e * max(-d - dsh, 0) (float products, summed in double). */
size_t qrs__kfband(const struct qrs__view *v, float m, float invt,
                   float dlo, float dhi, uint32_t *hpos, float *hx,
                   float *he, int32_t *hk, size_t nh, const float *gm,
                   size_t ngm, float dsh, double *ret_z, double *ret_zd);
/* float32 / 16-bit rows: the max and min (NaN ignored), whether a NaN
   is present, and (gm not NULL, AVX2 only) the lane maxima of every
   whole group of 64 values in the layout of qrs__fmoments()'s mb, for
   qrs__kfpass()'s gm.  One read of the row.  Returns the groups written
   (0 without gm or on SSE2). */
size_t qrs__kgmax(const struct qrs__view *v, float *gm, float *ret_max,
                  float *ret_min, int *ret_nan);

/* The ladder's recount: the elements with d <= dlo (d exactly as
   qrs__kfpass() computes it at max m, the row known to hold no NaN),
   their float weights summed afresh: *ret_z and its bound *ret_err
   (qrs__fpass's z and err for that tail, and its sum of e * d in
   *ret_w; weights below QRS__FP_DMIN count as 0).  A full exponential
   pass: select.c calls it only when a decision fails to certify against
   the pass's own bound. */
void qrs__kftail(const struct qrs__view *v, float m, float invt, float dlo,
                 double *ret_z, double *ret_err, double *ret_w);
float qrs__kexpf(float d);

/* The real floor of the benchmark: the same in float32 (degree-6
   polynomial exp), at the machine's float width; float64 rows fall back
   to qrs__kfloor(). */
double qrs__kfloor_float(const struct qrs__view *v, double *ret_max);

/* The read-only floor: one pass computing only the max. */
double qrs__kread(const struct qrs__view *v);

/* The kernel variant in use: 1 SSE2, 2 AVX2+FMA.  force 1 or 2 switches
   (tests run both; a variant the build lacks falls back to 1); any other
   value just reports. */
int qrs__kernel_level(int force);

#endif
