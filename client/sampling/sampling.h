/* libqrs sampling internals: configuration values, temperature
   strategies, the sampler object and per-token records. */
#ifndef QRS_SAMPLING_H
#define QRS_SAMPLING_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <qrs/sampler.h>

#include "kernels/rowkern.h"
#include "select.h"

/* ---- configuration (sconfig.c) ---- */

/* Every sampler field's resolved value. */
struct qrs__cfgvals {
  /* source routing and amplification (handed to qrsd per draw) */
  char entropy_source_type[QRS_NAME_MAX];
  int entropy_prefetch;
  char signal_amplifier_type[QRS_NAME_MAX];
  long long sample_count;
  double population_mean;
  double population_std;
  double uniform_clamp_epsilon;
  long long zscore_calibration_samples;
  char draw_source_id[QRS_NAME_MAX];
  long long draw_block_bytes;
  /* temperature */
  char temperature_strategy[QRS_NAME_MAX];
  double fixed_temperature;
  double edt_base_temp, edt_exponent, edt_min_temp, edt_max_temp;
  double hvh_t_base, hvh_alpha_h, hvh_alpha_vh, hvh_gamma_dh, hvh_delta_dvh;
  double hvh_lambda_ema, hvh_min_p_base, hvh_kappa_h, hvh_nu_dh;
  double tt_t_base, tt_gamma, tt_min_p_base, tt_min_p_scale;
  double evdt_t_base, evdt_alpha, evdt_beta, evdt_min_p_base;
  double evdt_min_p_scale, evdt_min_p_vh;
  double gdt_t_base, gdt_t_peak, gdt_mu, gdt_sigma, gdt_alpha;
  double gdt_lambda_vh, gdt_min_p_base, gdt_min_p_scale;
  double dynatemp_t_center, dynatemp_t_range, dynatemp_exponent;
  double dynatemp_min_p;
  double belltemp_t_base, belltemp_t_peak, belltemp_mu, belltemp_sigma;
  double belltemp_vh_weight, belltemp_lambda_vh, belltemp_min_p_base;
  double belltemp_min_p_scale;
  double mix_t_cool, mix_t_hot, mix_gate_a, mix_gate_b, mix_gate_c;
  double mix_gate_d, mix_min_p;
  long long rba_buffer_n;
  double rba_lam, rba_threshold, rba_t, rba_min_p;
  double coherence_threshold, coherence_t_boost_max, coherence_ema_alpha;
  char coherence_inner_strategy[QRS_NAME_MAX];
  /* selection, logging */
  long long top_k;
  double top_p;
  double min_p_base;
  int truncate_first;
  int bypass;
  char log_level[16];
  int diagnostic_mode;
  /* qrs extensions */
  char stage_order[16];
  char throttle_mode[16];
  double throttle_target_bits, throttle_p_min, throttle_p_max;
  double throttle_p_init, throttle_gain, throttle_tolerance_bits;
  double mirostat_tau, mirostat_eta;
  char study_unit[QRS_NAME_MAX + 1];  /* a study's unit tag, "" none */
};

/* Fill v with the effective values (explicit > preset > environment >
   default).  Never fails: every layer was validated when it was set. */
void qrs__config_resolve(const struct qrs_sampler_config *cfg,
                         struct qrs__cfgvals *v);

/* Cross-field validation of resolved values; writes the message (naming
   the field) to err.  0 or QRS_E_CONFIG_VALUE. */
int qrs__config_check(const struct qrs__cfgvals *v, char *err,
                      size_t errlen);

/* A field's value in v as text (as qrs_sampler_config_get()). */
int qrs__cfgvals_text(const struct qrs__cfgvals *v, const char *field,
                      char *buf, size_t len);

/* The logits dump (logdump.c): open path and write the header; append one
   token's row. */
int qrs__logits_dump_open(const char *path, const struct qrs__cfgvals *cfg,
                          const char *config_hash, FILE **ret_f);
void qrs__logits_dump_row(FILE *f, const void *logits, enum qrs_dtype dtype,
                          size_t n, uint64_t step, int64_t timestamp_ns);

/* The preset in effect (explicit, else environment) or NULL. */
const char *qrs__config_preset(const struct qrs_sampler_config *cfg);

/* For qrs_sample_batch() (batch.c), which begins the draws of a batch's
   rows in row order from one thread, so that which bytes of a source
   reach which row does not depend on the pool's timing:
   qrs__sampler_begin_draw() begins this step's draw on c now (after the
   logits exist: its record does not say prefetched) unless a prefetch
   for this step is open on c (0, or the begin's error: then the step
   draws blocking); qrs__sampler_sample_token() is
   qrs_sampler_sample_token() that begins the next prefetch only when
   prefetch_next is set. */
int qrs__sampler_begin_draw(struct qrs_sampler *s, struct qrs_client *c);
int qrs__sampler_sample_token(struct qrs_sampler *s, struct qrs_client *c,
                              const void *logits, enum qrs_dtype dtype,
                              size_t n, int prefetch_next,
                              uint32_t *ret_token,
                              struct qrs_token_record *ret_record);

/* What a draw sends for cfg (sampler.c): source, amplifier and
   sample_count when set above the default layer (else NULL / 0: qrsd's
   defaults), and the amplifier parameters likewise.  The strings point
   into v. */
void qrs__draw_setup(const struct qrs_sampler_config *cfg,
                     const struct qrs__cfgvals *v, const char **ret_source,
                     const char **ret_amplifier, uint32_t *ret_sample_count,
                     struct qrs_amp_params *ret_amp);

/* The reference-compatible config hash (16 hex digits + NUL).  0, or
   -ENOMEM (out untouched). */
int qrs__config_hash(const struct qrs_sampler_config *cfg,
                     const struct qrs__cfgvals *v, char out[17]);

/* ---- temperature strategies (temperature.c) ---- */

enum qrs__strategy_kind {
  QRS__T_FIXED = 0,
  QRS__T_EDT,
  QRS__T_HVH_DRIFT,
  QRS__T_COHERENCE_GATE,
  QRS__T_TT_EXCHANGE,
  QRS__T_EVDT_TT,
  QRS__T_GDT,
  QRS__T_DYNATEMP,
  QRS__T_BELLTEMP,
  QRS__T_MIX_TEMPERATURES,
  QRS__T_RING_BUFFER_AR,
  QRS__T_ENTROPY_THROTTLE,
  QRS__T_MIROSTAT_V2,
  QRS__T_COUNT
};

/* The strategy's name by kind, and the kind by name (-1: unknown). */
const char *qrs__strategy_name(int kind);
int qrs__strategy_kind(const char *name);

/* sconfig_tables.c: the index of name among count names, the first at
   names and each next one stride bytes on (an array of strings, or the
   name member of an array of structs), or -1. */
int qrs__name_index(const char *const *names, size_t count, size_t stride,
                    const char *name);

/* One token's row, with lazily computed statistics of the raw logits. */
struct qrs__row {
  struct qrs__view v;
  struct qrs__scan scan;
  int have_h;                 /* h valid */
  int have_vh;                /* h and vh valid */
  double h;                   /* Shannon entropy, nats (masked) */
  double vh;                  /* varentropy */
  float *mb;                  /* room for the moment pass's sub-block
                                 maxima (moments.h), or NULL */
  int mb_done;                /* the pass filled mb for this row */
  float min;                  /* and found this min */
};

/* Set up r for one token: the scan, and with want_h the entropy and
   varentropy too, in the same pass over the row (which also fills mb
   when given and the float moment pass applies: r->mb_done). */
void qrs__row_prepare(struct qrs__row *r, const void *data,
                      enum qrs_dtype dtype, size_t n, int want_h,
                      float *mb);

/* Entropy (and varentropy) of the raw row, computed once per token.
   -inf logits are masked (probability 0), unlike the reference, whose
   joint helper returns H = VH = 0 for a row with any -inf logit. */
double qrs__row_h(struct qrs__row *r);
void qrs__row_hvh(struct qrs__row *r, double *h, double *vh);

/* What a strategy computed for one token.  NaN / -1: not emitted. */
struct qrs__tresult {
  double T;
  double H;                   /* NaN when not needed and not computed */
  double min_p;
  double varentropy;
  double h_ema, vh_ema;
  int gate_open;
  double gate_boost;
  int coherence_valid;
  double coherence_z;
  const char *inner;          /* coherence_gate: inner actually used */
  int transformed;            /* select on the strategy's trow */
  enum qrs__nucleus nucleus;
  double mu;                  /* mirostat */
  double thr_target;          /* throttle (nats) */
  double top_p;               /* throttle controller: this token's top-p */
  int want_kept_entropy;
  /* diagnostics (tests, records) */
  double h_norm, pre_clamp_temp, pre_clamp_min_p, d_h, d_vh;
  double h_kept, entropy_removed;
  long long n_kept;
  double alpha, t_mix, bell, vh_norm, vh_boost;
  long long n_buffered, n_penalized;
  int embeddings_attached;
};

struct qrs__strategy {
  int kind;
  size_t vocab_size;
  /* hvh_drift */
  int first;
  double h_ema, vh_ema;
  /* coherence_gate */
  double b_ema;
  int have_meta;
  struct qrs_draw_meta meta;
  struct qrs__strategy *inner;
  int inner_kind;
  /* ring_buffer_ar */
  uint32_t *ring;
  size_t ring_cap, ring_len, ring_head;
  const void *emb;
  enum qrs_dtype emb_dtype;
  size_t emb_rows, emb_dim;
  double *emb_norm;
  double *centroid;
  uint32_t *marks;            /* ring ids, deduplicated per token */
  /* mix_temperatures, ring_buffer_ar: the transformed row */
  double *trow;
  size_t trow_cap;
  /* entropy_throttle (controller) */
  double thr_p;
  /* mirostat_v2 */
  double mu;
};

/* Build a strategy for kind with the given config (vocab_size: the
   model's vocabulary, used by the h/ln V normalisations; row_cap: the
   longest row).  Returns 0, QRS_E_CONFIG_VALUE (vocab_size < 2 for edt,
   gdt, dynatemp, belltemp), -ENOMEM. */
int qrs__strategy_init(struct qrs__strategy *st, int kind,
                       const struct qrs__cfgvals *cfg, size_t vocab_size,
                       size_t row_cap);
void qrs__strategy_done(struct qrs__strategy *st);
/* Whether the strategy always needs the row's entropy. */
int qrs__strategy_wants_h(const struct qrs__strategy *st);
/* Whether the strategy reads anything of the row (0: fixed, the entropy
   throttle and mirostat v2, whose temperature is the configured one; the
   selection then scans the row itself, in its first pass). */
int qrs__strategy_reads_row(const struct qrs__strategy *st);
/* Back to the state of a new request. */
void qrs__strategy_reset(struct qrs__strategy *st,
                         const struct qrs__cfgvals *cfg);
/* The per-request state a token changes (EMAs, controllers, the
   coherence gate, ring_buffer_ar's ring, the inner strategy's), as
   qrs__strategy_state_size() bytes: saved and restored into a strategy
   built with the same configuration.  _restore: 0, or -EINVAL (ring
   indices or flags out of range: nothing restored at this level; an
   inner strategy found bad leaves the outer unchanged). */
size_t qrs__strategy_state_size(const struct qrs__strategy *st);
void qrs__strategy_save(const struct qrs__strategy *st, unsigned char *buf);
int qrs__strategy_restore(struct qrs__strategy *st, const unsigned char *buf);
/* One token.  need_h: the caller wants H even if the strategy does not.
   Returns 0, -EDOM (edt: 0 raised to a negative exponent), QRS_E_LOGITS. */
int qrs__strategy_compute(struct qrs__strategy *st,
                          const struct qrs__cfgvals *cfg, struct qrs__row *r,
                          int need_h, struct qrs__tresult *res);
void qrs__strategy_observe_meta(struct qrs__strategy *st,
                                const struct qrs_draw_meta *meta);
/* After a selection: the token, its final probability and (throttle
   controller) the kept distribution's entropy in nats. */
void qrs__strategy_observe_token(struct qrs__strategy *st,
                                 const struct qrs__cfgvals *cfg,
                                 uint32_t token, double prob,
                                 double kept_entropy);
int qrs__strategy_attach_embeddings(struct qrs__strategy *st,
                                    const void *table, enum qrs_dtype dtype,
                                    size_t rows, size_t dim);

/* ---- records (record.c) ---- */

/* Append one record as a JSON line (level 1 summary, 2 full) to f.
   Returns 0 or -EIO / -ENOMEM. */
int qrs__record_write(const struct qrs_token_record *rec, int level,
                      FILE *f);

/* Shortest round-trip decimal of x, in the style of Python/pydantic
   (positional for 1e-5 <= |x| < 1e16 with ".0" for integers, else
   "1e-10", "1.5e+16").  Non-finite: "NaN", "inf", "-inf". */
void qrs__fmt_double(double x, char *buf, size_t len);

#endif
