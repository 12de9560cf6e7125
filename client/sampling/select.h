/* Token selection (libqrs internal): one logits row, a temperature, the
   truncation stages and a uniform u -> one token.

   Order of candidates: larger logit first; equal logits: higher token id
   first (the order the reference produced on every tied case of its
   vectors).  Every truncation keeps a prefix of that order, so the whole
   pipeline is a series of prefix cuts followed by a CDF search with u
   over the final prefix.  Nothing sorts the vocabulary:
   cuts are logit thresholds (top-k, min-p, mirostat) or mass crossings
   (top-p, CDF, entropy throttle).  A crossing is found from the mass
   histogram of the pass that computed the normaliser (1/16 unit of
   (x - max) / T per bucket): one walk over the buckets, one collection of
   the crossing bucket, and a sort of it (refined by a histogram of its
   logits first when a bucket is crowded, as in flat rows). */
#ifndef QRS_SELECT_H
#define QRS_SELECT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/rowkern.h"

enum qrs__order {
  QRS__ORDER_REFERENCE = 0,       /* T, top-k, softmax, min-p, top-p */
  QRS__ORDER_TRUNCATE_FIRST = 1,  /* reference's truncate_first */
  QRS__ORDER_HF = 2,              /* T, top-k (ties kept), top-p, min-p */
  QRS__ORDER_LLAMA = 3,           /* top-k, top-p, min-p at T=1, then T */
};

enum qrs__nucleus {
  QRS__NUCLEUS_TOP_P = 0,         /* plain top-p */
  QRS__NUCLEUS_THROTTLE = 1,      /* exact entropy throttle */
  QRS__NUCLEUS_MIROSTAT = 2,      /* mirostat v2 surprise cut */
};

struct qrs__sel_params {
  double T;
  long long top_k;                /* <= 0: off */
  double top_p;                   /* >= 1: off */
  double min_p;                   /* <= 0: off */
  double u;
  enum qrs__order order;
  enum qrs__nucleus nucleus;      /* reference order only */
  double mu;                      /* mirostat: cut surprise > mu bits */
  double thr_target;              /* throttle: target entropy, nats */
  double thr_pmin, thr_pmax;      /* throttle: kept mass bounds */
  int want_entropy;               /* report the final distribution's H */
};

struct qrs__sel_out {
  uint32_t token;
  uint32_t rank;
  uint32_t num_candidates;
  double prob;
  double cdf_lo, cdf_hi;          /* C(r-1)/Z, C(r)/Z */
  int greedy;
  size_t eff_top_k;
  size_t eff_top_p;
  size_t eff_min_p;
  double top_p_used;              /* kept mass fraction of the nucleus
                                     stage (NaN: no nucleus stage) */
  double kept_entropy;            /* nats, of the final distribution when
                                     computed (want_entropy), else NaN */
  double pre_prob;                /* mirostat: the token's probability
                                     before the surprise cut */
};

/* The fast path's history: mass fractions above d = -8, -10, .., -16. */
#define QRS__NFRAC 5

struct qrs__sel_ws {
  size_t cap;
  uint32_t *lpos;                 /* cap: search list */
  double *lx;
  double *le;
  uint32_t *cpos;                 /* QRS__SMALL_CAP: compacted candidates */
  double *cx;
  uint32_t *kpos;                 /* QRS__TOPK_HEAP: top-k list */
  double *kx;
  size_t kready;                  /* the list already holds the top
                                     kready of this selection's row */
  /* cpos / cx slot 0 already hold this selection's row's elements with
     (x - max) * cpinv >= cpmin (ccnt of them) */
  int cready;
  size_t ccnt;
  double cpinv, cpmin;
  double *hz;                     /* QRS__NBUCKET: mass histogram */
  double *hw;
  uint32_t *hpos;                 /* QRS__HEAD_CAP: the head list */
  double *hx, *he;
  int32_t *hk;
  /* the fast path's head list (cap + 16 each: the compressed stores'
     slack) */
  uint32_t *fpos;
  float *fx, *fe;
  int32_t *fk;
  double *fxe;                    /* cap: exact weights of the head */
  uint32_t *spos;                 /* cap + 16: the head in bucket order */
  float *sx;
  size_t *soff;                   /* QRS__NBUCKET + 1: bucket starts */
  double *fz, *ferr;              /* QRS__NBUCKET: head bucket sums */
  double *fzx;                    /* QRS__NBUCKET: exact bucket sums */
  size_t *fcnt;
  /* The entropy throttle's fast path without a scan: the head rung to
     start at (0: d >= -4, 1: d >= -8), from this workspace's previous
     selection (only the speed depends on it). */
  int ft_start;
  /* The fast path's previous selection: its row's float mass fraction
     above d = -8, -10, -12, -14, -16 (< 0: not known), from which the
     next selection's first head may start deeper (only the speed
     depends on it: rows of one request are alike). */
  double ffrac[QRS__NFRAC];
  /* The float moment pass's sub-block maxima of the row at mb_data
     (moments.h; the sampler sets mb_ready for one selection): min-p's
     collection then reads only the sub-blocks that reach its cut. */
  float *mb;                      /* 8 * (cap / QRS__MOM_SUB + 1) */
  const void *mb_data;
  float mb_min;                   /* that row's min */
  int mb_ready;
  /* The fast path handed this selection on with a crossing below its
     deepest rung: the double path's first mass pass resolves every
     bucket (the crossing is in the tail; no second pass). */
  int deep;
};

/* Fast-path statistics (process-wide, relaxed atomics): selections the
   float path decided, and those it handed to the double path because a
   decision fell within its error bound (the exact resolution). */
struct qrs__fast_stats {
  unsigned long long fast;
  unsigned long long resolved;
  unsigned long long ineligible;
  unsigned long long bands;       /* ladder band passes */
  unsigned long long skipped;     /* float-pass groups not read (their
                                     mass bounded: FAST_DSKIP) */
  unsigned long long recounts;    /* tails summed afresh (a decision
                                     that did not certify after a band) */
  unsigned long long rehead;      /* retries giving the whole head exact
                                     weights */
  unsigned long long exact_tails;  /* retries giving a small tail exact
                                      weights (instead of a recount) */
  unsigned long long deep_heads;  /* nucleus passes whose head started at
                                     d = -10 (few lane maxima above) */
};
void qrs__fast_stats_get(struct qrs__fast_stats *ret);
/* 0: the float fast path off (the double path only; tests compare the
   two), 1: on (the default). */
void qrs__fast_enable(int on);

#define QRS__SMALL_CAP 4096
#define QRS__HEAD_CAP 4096

int qrs__sel_ws_init(struct qrs__sel_ws *ws, size_t cap);
void qrs__sel_ws_done(struct qrs__sel_ws *ws);

/* Select a token.  scan: the row's qrs__kscan() result (the caller has
   rejected NaN / +inf / all -inf rows).  Returns 0, QRS_E_NO_CANDIDATES,
   -EINVAL (row longer than the workspace). */
int qrs__select(struct qrs__sel_ws *ws, const struct qrs__view *row,
                const struct qrs__scan *scan,
                const struct qrs__sel_params *p, struct qrs__sel_out *out);

/* Check a row: 0, or QRS_E_LOGITS for NaN, +inf or all -inf. */
int qrs__row_check(const struct qrs__scan *scan, size_t n);

#endif
