/* libqrs roller: discrete decisions driven by entropy draws (the
   reference's QthoughtRoller, third_party/qr-sampler/src/qr_sampler/
   qthought.py; docs/roller.md).

   A struct qrs_roller turns one fresh qrsd draw into one decision:
   qrs_roller_choose() picks one of k options, _choose_weighted() one of
   n weighted options, _coin() a biased coin, _bind_int() an integer
   from weighted ranges (_range_time / _age / _year build the reference's
   specs), _draw_u() and _draw_index() return the draw itself.  Every
   decision fills a provenance record: the value, the draw's u, z and bias,
   the source that served it, whether it was a fallback, its generation
   time and latency.  choose, choose_weighted, coin and bind_int also
   append the record to the roller's decision buffer (at most
   QRS_ROLLER_BUFFER records; the oldest are dropped, and counted, beyond),
   which qrs_roller_drain() hands over.

   Thoughts: qrs_roller_begin_thought() opens a thought; every draw until
   the next drain is folded into it (draw_u and draw_index too).  For the
   zscore_thought amplifier, drain() attaches to each record the thought's
   aggregate z-score, computed from the exact byte sums of the draws, so
   that many small decisions can be read as one signal.

   Example (a decision and its record; error handling shortened):

     struct qrs_client *c;
     struct qrs_roller *r;
     struct qrs_provenance p;

     qrs_client_new(NULL, NULL, &c);
     qrs_roller_new(c, NULL, &r);         // preset "qthought"
     qrs_roller_begin_thought(r);
     if (qrs_roller_choose(r, 6, &p) == 0)
       printf("die: %lld (u=%.6f z=%+.3f from %s)\n",
              (long long)p.value + 1, p.u, p.z_score, p.source);
     ...
     struct qrs_provenance buf[16];
     int n = qrs_roller_drain(r, buf, 16); // with the thought's aggregate
     qrs_roller_free(r);
     qrs_client_free(c);

   Validation errors (-EINVAL) happen before any entropy is drawn.  A
   roller is not thread-safe; use one per thread.  Added in 0.1. */
#ifndef QRS_ROLLER_H
#define QRS_ROLLER_H

#include <stddef.h>
#include <stdint.h>

#include <qrs/client.h>
#include <qrs/sampler.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Records the decision buffer holds before it drops the oldest. */
#define QRS_ROLLER_BUFFER 4096

enum qrs_decision_kind {
  QRS_DECISION_CHOOSE,
  QRS_DECISION_CHOOSE_WEIGHTED,
  QRS_DECISION_COIN,
  QRS_DECISION_BIND_INT,
  QRS_DECISION_DRAW_U,
  QRS_DECISION_DRAW_INDEX,
};

/* "choose", "choose_weighted", "coin", "bind_int", "draw_u", "draw_index"
   (static strings; "unknown" for a bad value). */
QRS_EXPORT const char *qrs_decision_kind_name(enum qrs_decision_kind k);

/* zscore_thought's aggregate over a thought's draws (the reference's
   ZScoreThoughtAmplifier.thought_aggregate()). */
struct qrs_thought_aggregate {
  double sample_mean;       /* S / C */
  double z_score;           /* bias / sem */
  double sem;               /* sigma / sqrt(C) */
  uint64_t sample_count;    /* C, bytes in the thought */
  double bias;              /* sample_mean - mu */
  double u;                 /* clamp(Phi(z_score)) */
};

/* The provenance of one decision (the reference's ChoiceProvenance). */
struct qrs_provenance {
  enum qrs_decision_kind kind;
  int64_t value;            /* the decision (coin: 0 or 1; draw_u: 0) */
  double u;
  double z_score;
  double bias;              /* draw's byte mean - configured
                               population_mean, as the reference's is:
                               not the calibrated baseline */
  char source[QRS_NAME_MAX];      /* the source that served the bytes */
  char amplifier[QRS_NAME_MAX];
  int is_fallback;
  int64_t generation_timestamp_ns;  /* CLOCK_REALTIME when the draw
                                       came back */
  double latency_ms;        /* the draw's round trip */
  uint32_t sample_count;
  uint64_t byte_sum;
  uint64_t nonce;           /* 0: none */
  int has_thought;          /* thought below is set (drained inside a
                               thought with zscore_thought) */
  struct qrs_thought_aggregate thought;
};

/* One draw as a roller needs it.  qrs_roller_new() draws through a
   qrs_client; qrs_roller_new_custom() through this function instead (for
   tests and for embedding in programs with their own entropy).  It
   returns 0 and fills *ret (at least u, z, sample_mean, sample_count,
   byte_sum, population_mean, population_std, served_by, amplifier,
   fallback), or a negative error that the decision returns. */
typedef int (*qrs_roller_draw_fn)(void *ctx,
                                  const struct qrs_draw_request *req,
                                  struct qrs_draw *ret);

struct qrs_roller;

/* A roller drawing through c with the config's source, amplifier,
   sample_count and amplifier parameters (cfg NULL: the defaults with
   preset "qthought", like the reference).  Only the fields above apply;
   cfg is copied.  Returns 0, QRS_E_CONFIG_VALUE (cfg does not validate),
   -EINVAL or -ENOMEM. */
QRS_EXPORT int qrs_roller_new(struct qrs_client *c,
                              const struct qrs_sampler_config *cfg,
                              struct qrs_roller **ret_roller);
QRS_EXPORT int qrs_roller_new_custom(qrs_roller_draw_fn draw, void *ctx,
                                     const struct qrs_sampler_config *cfg,
                                     struct qrs_roller **ret_roller);
/* Accepts NULL. */
QRS_EXPORT void qrs_roller_free(struct qrs_roller *r);

/* min(trunc(u k), k - 1); k >= 1. */
QRS_EXPORT int qrs_roller_choose(struct qrs_roller *r, uint32_t k,
                                 struct qrs_provenance *ret);
/* t = u fsum(w); the first i with t < w_0 + ... + w_i, else n - 1.  n >= 1,
   every w_i finite and >= 0, fsum(w) > 0. */
QRS_EXPORT int qrs_roller_choose_weighted(struct qrs_roller *r,
                                          const double *w, size_t n,
                                          struct qrs_provenance *ret);
/* u < p; 0 <= p <= 1. */
QRS_EXPORT int qrs_roller_coin(struct qrs_roller *r, double p,
                               struct qrs_provenance *ret);

/* One weighted integer range of bind_int: [low, high] with weight. */
struct qrs_int_range {
  int64_t low;
  int64_t high;             /* >= low */
  double weight;            /* finite, > 0 */
};

/* A value from the ranges: the range by weight, then uniformly inside it,
   as the reference's QthoughtRoller.bind_int() maps u.  n >= 1. */
QRS_EXPORT int qrs_roller_bind_int(struct qrs_roller *r,
                                   const struct qrs_int_range *ranges,
                                   size_t n, struct qrs_provenance *ret);
/* The reference's specs: hours of a day ([0,5]x0.5 [6,11]x1.5 [12,17]x1.5
   [18,23]x1), ages ([0,17]x1 [18,64]x3 [65,99]x1), years ([low,mid]x1
   [mid+1,high]x2, mid = floor((low+high)/2); the reference's default is
   1900..2099).  Fill ranges (capacity 4) and return the count, or -EINVAL
   (year: high <= low). */
QRS_EXPORT int qrs_range_time(struct qrs_int_range *ranges);
QRS_EXPORT int qrs_range_age(struct qrs_int_range *ranges);
QRS_EXPORT int qrs_range_year(struct qrs_int_range *ranges, int64_t low,
                              int64_t high);

/* The draw alone (value 0; not buffered, but folded into a thought). */
QRS_EXPORT int qrs_roller_draw_u(struct qrs_roller *r,
                                 struct qrs_provenance *ret);
/* Like choose, not buffered. */
QRS_EXPORT int qrs_roller_draw_index(struct qrs_roller *r, uint32_t k,
                                     struct qrs_provenance *ret);

/* Open a thought (resets its aggregate). */
QRS_EXPORT void qrs_roller_begin_thought(struct qrs_roller *r);

/* Move up to cap buffered records, oldest first, into out and return how
   many; records beyond cap stay for the next call.  When a thought is
   open, every record carries its aggregate, and the call that empties the
   buffer closes the thought. */
QRS_EXPORT int qrs_roller_drain(struct qrs_roller *r,
                                struct qrs_provenance *out, size_t cap);
/* Records waiting in the buffer, and records dropped because it was
   full since the roller was made. */
QRS_EXPORT size_t qrs_roller_pending(const struct qrs_roller *r);
QRS_EXPORT uint64_t qrs_roller_dropped(const struct qrs_roller *r);

/* The pure mappings from u (those of the reference's QthoughtRoller
   decisions), for callers with their own u.  Same validation; 0 or
   -EINVAL. */
QRS_EXPORT int qrs_map_choose(double u, uint32_t k, int64_t *ret);
QRS_EXPORT int qrs_map_choose_weighted(double u, const double *w, size_t n,
                                       int64_t *ret);
QRS_EXPORT int qrs_map_coin(double u, double p, int64_t *ret);
QRS_EXPORT int qrs_map_bind_int(double u, const struct qrs_int_range *ranges,
                                size_t n, int64_t *ret);

#ifdef __cplusplus
}
#endif

#endif
