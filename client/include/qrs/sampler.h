/* libqrs sampling: from one logits row and one draw u to one token id.

   A struct qrs_sampler_config holds every per-request field of the
   reference qr-sampler (temperature strategy and all its parameters,
   top_k, top_p, min_p_base, truncate_first, the amplifier and source of
   the draws, logging) plus a few qrs extensions.  Values come from four
   layers, highest first:

     explicit    qrs_sampler_config_set*() / _set_arg()
     preset      qrs_sampler_config_set_preset(), else $QR_PRESET
     environment qrs_sampler_config_load_env(): QR_<FIELD> (any case)
     default     the reference's defaults

   A struct qrs_sampler is one request's sampling state: a copy of the
   resolved configuration, the temperature strategy's per-request state
   (EMAs, ring buffer, coherence gate, ...), the commitment salt and step,
   the prefetched draw ticket, and a workspace sized to the vocabulary.
   After qrs_sampler_new() no call allocates per token.

   One token:

     qrs_sampler_sample_token()  draw from qrsd with a commitment (salt, step,
                                 previous token; usually prefetched) ->
                                 temperature -> selection -> record;
                                 then the next token's draw is
                                 requested at once (prefetch), so the
                                 daemon round trip overlaps the engine's
                                 next forward pass;
     qrs_sampler_step()          the same step with a draw the caller got
                                 itself (replays, tests, other transports);
     qrs_sampler_select_u()      the same with only a u.

   Selection (the reference's TokenSelector, third_party/qr-sampler/src/
   qr_sampler/selection/selector.py): top-k -> softmax -> min-p ->
   top-p -> CDF search with u over the candidates in descending
   probability order (u near 0: the most probable token; u near 1: the
   least probable survivor).  T <= 0 is greedy.  Candidates with equal
   logits are ordered higher token id first (the order the reference
   produced on every tied vector); greedy returns the lowest id among the
   maximal logits (argmax).  No path sorts the vocabulary: truncations are
   logit thresholds or mass crossings found from band sums.

   Rows: float32, float16, bfloat16 or float64, converted on the fly.
   -inf logits (grammar masks) are ordinary input: they get probability 0
   and are excluded from entropies.  A NaN or +inf logit, or a row whose
   logits are all -inf, is QRS_E_LOGITS: never a token.

   Differences from the reference, all deliberate:
   - Masked entropy.  The reference's joint entropy helper returns H = 0
     and VH = 0 for any row with a -inf logit, which feeds
     hvh_drift, evdt_tt, gdt, belltemp, mix_temperatures, ring_buffer_ar
     and tt_exchange a zero entropy under grammar masks.  libqrs computes
     the entropy of the masked distribution everywhere (the value the
     reference's fixed/edt/dynatemp already report).
   - Broken rows.  The reference picks a token from NaN rows at T <= 0
     and samples uniformly from all -inf / all +inf rows; libqrs returns
     QRS_E_LOGITS for all of them.
   - Validation.  Unknown strategy names (temperature_strategy,
     coherence_inner_strategy), log levels, stage orders and values out of
     range are QRS_E_CONFIG_VALUE naming the field (the reference falls
     back to "fixed" for a bad inner strategy).  rba_buffer_n is capped at
     1048576.  A double field may be set to anything the reference
     accepts (NaN, infinities), but the check of the whole configuration
     (qrs_sampler_config_validate(), qrs_sampler_new()) requires every
     double field to be finite and at most 1e6 in magnitude, top_p and the
     strategies' *_min_p_base in [0, 1], population_mean in [0, 255],
     population_std in (0, 127.5], uniform_clamp_epsilon in (0, 0.5),
     hvh_lambda_ema in [0, 1] (the reference turns a NaN temperature into
     greedy selection and keeps every token for a NaN top_p).
   - Infrastructure fields of the reference (grpc_*, cb_*, fallback_mode,
     quotas, entropy_source_instances, oe_*) belong to qrsd's config:
     QR_* variables naming them are ignored, setting them explicitly is
     QRS_E_CONFIG_FIELD.
   - preset_active in records shows the preset in effect, whether it came
     from QR_PRESET or from the caller (the reference shows QR_PRESET
     only).  config_hash follows the reference exactly (infrastructure
     fields at their defaults), so equal configurations hash alike; a
     non-default qrs extension field is appended to the hashed JSON.
   - sample_mean is NaN when the draw did not report one (server draws);
     JSON records write NaN and infinities as null.

   Threads: a sampler or config is used by one thread at a time; distinct
   objects are independent.  The library never prints: records go only to
   the FILE* or path the caller gives.

   Errors: int functions return 0 (or a count) or a negative errno /
   QRS_E_* code (qrs/error.h); out-parameters are written only on success.
   Every object returned through **ret_ is freed by the matching _free(),
   which accepts NULL.  Added in 0.1. */
#ifndef QRS_SAMPLER_H
#define QRS_SAMPLER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <qrs/error.h>
#include <qrs/client.h>
#include <qrs/dtype.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* Configuration                                                        */
/* ------------------------------------------------------------------ */

/* Field names are the reference's (QRSamplerConfig), e.g. "top_k",
   "temperature_strategy", "hvh_lambda_ema"; qrs_sampler_field_name()
   lists them all.  Per-request reference fields:

     entropy_source_type entropy_prefetch signal_amplifier_type
     sample_count population_mean population_std uniform_clamp_epsilon
     zscore_calibration_samples draw_source_id draw_block_bytes
     temperature_strategy fixed_temperature edt_* hvh_* tt_* evdt_* gdt_*
     dynatemp_* belltemp_* mix_* rba_* coherence_* top_k top_p min_p_base
     truncate_first bypass log_level diagnostic_mode

   Strategies: fixed, edt, hvh_drift, coherence_gate, tt_exchange,
   evdt_tt, gdt, dynatemp, belltemp, mix_temperatures, ring_buffer_ar
   (the reference's eleven), and:

     entropy_throttle  T = fixed_temperature; top-p chosen per token so
                       that the Shannon entropy (bits) of the renormalised
                       kept distribution is as close as possible to
                       throttle_target_bits, with the kept mass in
                       [throttle_p_min, throttle_p_max].  The entropy of
                       the renormalised most-probable prefix never
                       decreases as tokens are added, so the exact cut is
                       found in one search per token.  throttle_mode
                       "controller" instead runs the seed's proportional
                       controller: top-p starts at throttle_p_init and
                       after each token p <- clip(p - throttle_gain *
                       (H - target), p_min, p_max) whenever |H - target| >
                       throttle_tolerance_bits (H of the kept
                       distribution, bits).  Replaces top_p.
     mirostat_v2       T = fixed_temperature; tokens with surprise
                       -log2 p > mu are cut (the top token always stays),
                       u selects among the rest, then
                       mu <- mu - mirostat_eta * (-log2 p_selected -
                       mirostat_tau), with p_selected the token's
                       probability before the cut (llama.cpp uses the
                       renormalised one, which keeps mu well above tau);
                       mu starts at 2 tau.  Applied after min-p, before
                       top-p.  The record's token_prob * top_p_used is
                       p_selected.

   qrs extension fields (defaults in brackets):
     stage_order         [reference] "reference": temperature, top-k,
                         softmax, min-p, top-p (truncate_first=true: the
                         reference's min-p-before-temperature order);
                         "hf": HF transformers' warpers - temperature,
                         top-k (every token tied with the k-th kept),
                         top-p, min-p; "llama": llama.cpp's default chain
                         - top-k, top-p and min-p on the T = 1
                         distribution, temperature last.
     throttle_mode [exact], throttle_target_bits [2.0],
     throttle_p_min [0.01], throttle_p_max [0.99], throttle_p_init [0.9],
     throttle_gain [0.05], throttle_tolerance_bits [0.5]
     mirostat_tau [5.0] (bits), mirostat_eta [0.1]

   Values given as text are parsed like the reference's settings: booleans
   1/0 true/false yes/no on/off t/f y/n (any case); integers also as
   integral floats ("2.0"); floats in C-locale decimal or exponent form. */
struct qrs_sampler_config;

/* Where a field's effective value comes from. */
enum qrs_config_layer {
  QRS_LAYER_DEFAULT = 0,
  QRS_LAYER_ENV = 1,
  QRS_LAYER_PRESET = 2,
  QRS_LAYER_EXPLICIT = 3,
};

/* A config with every field at its default.  Returns 0, -EINVAL,
   -ENOMEM. */
QRS_EXPORT int qrs_sampler_config_new(struct qrs_sampler_config **ret_cfg);
QRS_EXPORT void qrs_sampler_config_free(struct qrs_sampler_config *cfg);
/* A deep copy.  Returns 0, -EINVAL, -ENOMEM. */
QRS_EXPORT int qrs_sampler_config_copy(const struct qrs_sampler_config *cfg,
                                       struct qrs_sampler_config **ret_cfg);

/* Explicit layer.  Returns 0, or QRS_E_CONFIG_FIELD (no such field, or an
   infrastructure field of the reference), QRS_E_CONFIG_VALUE (wrong type,
   out of range, unknown name), -EINVAL (NULL).  On error nothing changes
   and qrs_sampler_config_error() names the field and the problem. */
QRS_EXPORT int qrs_sampler_config_set(struct qrs_sampler_config *cfg,
                                      const char *field, const char *value);
QRS_EXPORT int qrs_sampler_config_set_double(struct qrs_sampler_config *cfg,
                                             const char *field, double value);
/* Integer and boolean fields (a double field takes the integer too). */
QRS_EXPORT int qrs_sampler_config_set_int(struct qrs_sampler_config *cfg,
                                          const char *field,
                                          long long value);
/* Remove an explicit value.  Returns 0, QRS_E_CONFIG_FIELD, -EINVAL. */
QRS_EXPORT int qrs_sampler_config_unset(struct qrs_sampler_config *cfg,
                                        const char *field);

/* A reference-style per-request argument: key "qr_<field>" or
   "qr_preset" sets that field (explicit layer) or the preset; keys not
   starting with "qr_" belong to other processors and are ignored (returns
   0).  Same errors as qrs_sampler_config_set(), plus QRS_E_CONFIG_FIELD
   for an unknown preset. */
QRS_EXPORT int qrs_sampler_config_set_arg(struct qrs_sampler_config *cfg,
                                          const char *key, const char *value);

/* Preset layer: one of the seven built-in presets (qrs_sampler_preset_name),
   with the reference's exact values; NULL or "" removes it.  An explicit
   preset replaces $QR_PRESET (which is then not applied at all).
   Returns 0, QRS_E_CONFIG_FIELD (unknown preset), -EINVAL. */
QRS_EXPORT int qrs_sampler_config_set_preset(struct qrs_sampler_config *cfg,
                                             const char *name);

/* Environment layer: replace it with the QR_<FIELD> variables of envp
   (NULL: the process environment; names match any case) and QR_PRESET.
   Unknown QR_* names and the reference's infrastructure fields are
   ignored.  Returns the number of fields read, or QRS_E_CONFIG_VALUE /
   QRS_E_CONFIG_FIELD (a bad value, or QR_PRESET naming no preset; the
   message names the variable; nothing changes), -EINVAL. */
QRS_EXPORT int qrs_sampler_config_load_env(struct qrs_sampler_config *cfg,
                                           char *const *envp);

/* The effective value as text ("0.95", "hvh_drift", "true") into buf.
   Returns the length it needs (without the NUL, like snprintf) or
   QRS_E_CONFIG_FIELD, -EINVAL. */
QRS_EXPORT int qrs_sampler_config_get(const struct qrs_sampler_config *cfg,
                                      const char *field, char *buf,
                                      size_t len);
/* The effective value of a numeric or boolean field.  Returns 0,
   QRS_E_CONFIG_FIELD, QRS_E_CONFIG_VALUE (a text field), -EINVAL. */
QRS_EXPORT int qrs_sampler_config_get_double(
    const struct qrs_sampler_config *cfg, const char *field,
    double *ret_value);
/* Which layer gives the effective value, or QRS_E_CONFIG_FIELD. */
QRS_EXPORT int qrs_sampler_config_layer(const struct qrs_sampler_config *cfg,
                                        const char *field);
/* The preset in effect (explicit, else $QR_PRESET) or NULL.  Owned by
   cfg, valid until it changes. */
QRS_EXPORT const char *
qrs_sampler_config_preset(const struct qrs_sampler_config *cfg);

/* Check the whole effective configuration (the cross-field checks of
   qrs_sampler_new()).  Returns 0 or QRS_E_CONFIG_VALUE with
   qrs_sampler_config_error() set. */
QRS_EXPORT int qrs_sampler_config_validate(struct qrs_sampler_config *cfg);

/* The last error message of cfg ("top_k: not an integer: 'abc'"), or ""
   Owned by cfg. */
QRS_EXPORT const char *
qrs_sampler_config_error(const struct qrs_sampler_config *cfg);

/* The reference's config_hash: the first 16 hex digits of SHA-256 over
   the reference's compact JSON dump of the effective configuration (the
   reference's infrastructure fields at their defaults; its "preset" field
   is $QR_PRESET, as in the reference).  buf gets 16 digits and a NUL.
   Returns 0, -EINVAL, or -ENOMEM (buf untouched). */
QRS_EXPORT int qrs_sampler_config_hash(const struct qrs_sampler_config *cfg,
                                       char buf[17]);

/* The i-th field name / built-in preset name, NULL past the end. */
QRS_EXPORT const char *qrs_sampler_field_name(size_t i);
QRS_EXPORT const char *qrs_sampler_preset_name(size_t i);

/* ------------------------------------------------------------------ */
/* Per-token record (the reference's TokenSamplingRecord)               */
/* ------------------------------------------------------------------ */

/* Where a token was selected (a record's device_selection; JSON null,
   "certified", "uncertified"). */
enum qrs_device_selection {
  QRS_DEVICE_SELECTION_NONE = 0,        /* by libqrs, no device involved */
  QRS_DEVICE_SELECTION_CERTIFIED = 1,   /* on a device, certified equal to
                                           libqrs's pick */
  QRS_DEVICE_SELECTION_UNCERTIFIED = 2, /* the device could not certify
                                           it: libqrs selected from the
                                           row */
};

/* Doubles that the reference may leave null are NaN here; tri-state
   booleans are -1 (null), 0, 1.  Field order follows the reference. */
struct qrs_token_record {
  int64_t timestamp_ns;           /* CLOCK_MONOTONIC at token start */
  double entropy_fetch_ms;        /* waiting for the draw */
  double total_sampling_ms;
  char entropy_source_used[QRS_NAME_MAX];  /* draw's served_by */
  int entropy_is_fallback;
  double sample_mean;             /* NaN: not reported */
  double z_score;
  double u_value;
  char temperature_strategy[QRS_NAME_MAX];
  double shannon_entropy;         /* nats, of the raw (masked) row; NaN
                                     when nothing needed it (log level
                                     none, no diagnostic mode, and a
                                     strategy that does not use it) */
  double temperature_used;
  uint32_t token_id;
  uint32_t token_rank;            /* 0: most probable candidate */
  double token_prob;              /* in the final renormalised dist. */
  uint32_t num_candidates;
  char config_hash[17];
  double varentropy;
  double min_p_used;              /* NaN when greedy */
  char preset_active[QRS_NAME_MAX];   /* "" and has_preset 0: null */
  int has_preset;
  double h_ema;
  double vh_ema;
  int entropy_prefetch_hit;       /* -1: no ticket */
  uint64_t entropy_nonce;         /* 0: null */
  int entropy_echo_verified;      /* -1: null */
  int64_t entropy_server_timestamp_ns;  /* has_server_timestamp 0: null */
  int has_server_timestamp;
  double temperature_ms;
  double amplify_ms;              /* always 0: qrsd amplifies */
  double select_ms;
  int has_draw_meta;              /* the draw_* / purity fields below */
  double draw_z;
  double draw_coherence_z;
  int draw_coherence_valid;
  double draw_coherence_r;
  char purity_label[QRS_NAME_MAX];
  uint32_t integrated_bytes;
  char integrator[QRS_NAME_MAX];
  char draw_source_id[QRS_NAME_MAX];
  int gate_open;                  /* -1: not coherence_gate */
  double gate_boost;
  /* qrs additions */
  uint64_t step;                  /* token index in the request */
  double cdf_lo;                  /* C(r-1)/Z: u in (cdf_lo, cdf_hi] picks */
  double cdf_hi;                  /* C(r)/Z    this token (greedy: 0, 1) */
  double top_p_used;              /* the nucleus mass kept (throttle,
                                     mirostat); NaN: no nucleus stage */
  double kept_entropy_bits;       /* entropy_throttle: H of the kept
                                     distribution; NaN otherwise */
  double mirostat_mu;             /* mu used for this token; NaN */
  int greedy;
  char entropy_source_type[QRS_NAME_MAX];  /* type of the serving source */
  int entropy_production;         /* 0: a test-only source served it */
  /* provenance (qrs-audit --records): the draw's qrsd journal entry and
     its times (CLOCK_REALTIME ns; 0: not known, null in JSON) */
  uint64_t journal_seq;           /* 0: no journal (null) */
  int entropy_unjournalled;       /* 1: journal on, draw not journalled */
  int64_t draw_received_ns;       /* qrsd decoded the request */
  int64_t draw_generated_ns;      /* the entropy was in hand */
  int64_t draw_sent_ns;           /* the reply was encoded */
  /* selection on a device (qrs_sampler_finish_pick / _finish_row) */
  int device_selection;           /* enum qrs_device_selection */
};

/* Write rec as one JSON line (json-c) to f: level 1 = summary (token,
   rank, prob, u, temp, entropy, source, fallback, fetch_ms, total_ms),
   2 = every field.  The line goes out in one stdio operation under f's
   lock, so threads sharing f never interleave lines.  Returns 0, -EINVAL,
   -EIO, -ENOMEM. */
QRS_EXPORT int qrs_token_record_write(const struct qrs_token_record *rec,
                                      int level, FILE *f);

/* ------------------------------------------------------------------ */
/* Sampler                                                              */
/* ------------------------------------------------------------------ */

struct qrs_sampler;

/* A sampler for one request with cfg's effective values (copied: cfg may
   be freed afterwards; NULL: defaults).  vocab_size: the model's
   vocabulary size; rows may be up to max(vocab_size, qrs_sampler_reserve)
   long.  A fresh 16-byte salt comes from getrandom().  Returns 0 and
   *ret_sampler, or QRS_E_CONFIG_VALUE (a check of the whole
   configuration failed: truncate_first, entropy_throttle or mirostat_v2
   (also as coherence_inner_strategy) with a stage_order other than
   reference, throttle_p_min above throttle_p_max, a double field not
   finite or out of its range (see Validation above); or vocab_size < 2
   for edt, gdt, dynatemp, belltemp), -EINVAL (vocab_size 0 or above 2^32 - 1),
   -ENOMEM, or getrandom()'s error.  Free with qrs_sampler_free(). */
QRS_EXPORT int qrs_sampler_new(const struct qrs_sampler_config *cfg,
                               size_t vocab_size,
                               struct qrs_sampler **ret_sampler);

/* Cancels an outstanding prefetch on the client it was made with (that
   client must still be alive), closes a log file opened by path, and
   frees.  Accepts NULL. */
QRS_EXPORT void qrs_sampler_free(struct qrs_sampler *s);

/* Allow rows up to max_row long (padded vocabularies).  The only call
   besides _new that allocates.  Returns 0, -EINVAL, -ENOMEM. */
QRS_EXPORT int qrs_sampler_reserve(struct qrs_sampler *s, size_t max_row);

/* Start a new request with the same configuration: fresh strategy state,
   a new salt, step 0; an outstanding prefetch is cancelled.  Returns 0 or
   getrandom()'s error. */
QRS_EXPORT int qrs_sampler_reset(struct qrs_sampler *s);

/* A request's state at a token boundary, to resume from when tokens the
   sampler selected were not used (speculative decoding's rejected
   drafts: restore the state saved after the last token that was).  The
   state is the step, the previous token of the next commitment and the
   temperature strategy's per-request state (EMAs, controllers, the
   coherence gate, ring_buffer_ar's ring); not the salt, the
   configuration or the diagnostic records.  It is
   qrs_sampler_state_size() bytes, the same for every state of one
   sampler; _save writes them to buf (len at least that: else -ENOBUFS),
   _restore takes bytes saved from a sampler with the same configuration
   and vocabulary (else -EINVAL, nothing changed) and cancels an
   outstanding prefetch (it was committed under the state left).  The
   bytes are for this libqrs in this process (native byte order and
   layout), not a file format.  Returns 0 or the error. */
QRS_EXPORT size_t qrs_sampler_state_size(const struct qrs_sampler *s);
QRS_EXPORT int qrs_sampler_save_state(const struct qrs_sampler *s, void *buf,
                                      size_t len);
QRS_EXPORT int qrs_sampler_restore_state(struct qrs_sampler *s,
                                         const void *buf, size_t len);

/* The token that was used in place of the one the sampler selected last
   (a token forced after selection): the next commitment names it as the
   previous token; an outstanding prefetch is cancelled.  Returns 0, or
   -EINVAL (no token selected yet: step 0). */
QRS_EXPORT int qrs_sampler_set_previous_token(struct qrs_sampler *s,
                                              uint32_t token);

/* Use this salt (1..256 bytes) for the commitments from now on (replay,
   tests); an outstanding prefetch (committed under the old salt) is
   cancelled.  Returns 0 or -EINVAL. */
QRS_EXPORT int qrs_sampler_set_salt(struct qrs_sampler *s,
                                    const uint8_t *salt, size_t len);

/* The commitment of the next draw: salt, step, previous token (-1 at
   step 0).  The salt pointer is owned by s. */
QRS_EXPORT void qrs_sampler_next_commitment(const struct qrs_sampler *s,
                                            struct qrs_commitment *ret);

/* The sampler's resolved configuration as a new config object (explicit
   layer only).  Returns 0, -ENOMEM. */
QRS_EXPORT int qrs_sampler_get_config(const struct qrs_sampler *s,
                                      struct qrs_sampler_config **ret_cfg);

/* ring_buffer_ar embedding mode: cosine similarity to the centroid of
   the buffered tokens' rows of table (rows x dim values of dtype,
   row-major, owned by the caller, which keeps it alive and unchanged
   while s uses it).  rows must be the sampler's vocab_size.  The
   similarity of every vocabulary entry is computed per token (rows x dim
   multiply-adds).  Returns 0, -EINVAL, -ENOMEM. */
QRS_EXPORT int qrs_sampler_attach_embeddings(struct qrs_sampler *s,
                                             const void *table,
                                             enum qrs_dtype dtype,
                                             size_t rows, size_t dim);

/* Where records go, as JSON lines at the config's log_level (summary:
   the short form, full: every field, none: nothing).  With neither set,
   nothing is written.  _set_log_file: f stays the caller's (NULL stops
   logging); _set_log_path: opened for appending, line buffered, closed by
   s: each line reaches the file in one write(2), whole, even with other
   samplers or processes appending to the same path.  Samplers in several
   threads may share one FILE* (lines never interleave).  Building a line
   with json-c allocates: a sampler without a sink allocates nothing per
   token.  A failing write never fails the token.  Returns 0, -EINVAL,
   -ENOMEM, or fopen()'s -errno. */
QRS_EXPORT int qrs_sampler_set_log_file(struct qrs_sampler *s, FILE *f);
QRS_EXPORT int qrs_sampler_set_log_path(struct qrs_sampler *s,
                                        const char *path);

/* The logits dump, for qrs-audit --logits (a research run's evidence that
   each recorded token is the one its row and u select): from now on every
   step that selects a token appends that token's logits row, bit for bit
   in the dtype it was passed, to the file at path (created or truncated;
   NULL stops and closes it).  A 151,936-entry f32 row is 594 KiB per
   token: a dump is for audited runs, not for serving.  A failing write
   never fails the token (qrs-audit names the rows that are missing).
   Layout, integers little-endian:
     header  "QRSLOGIT", u32 version (1), u32 text length L, then L bytes
             of text: "config_hash=<16 hex>\n" and "<field>=<value>\n" for
             every field of the effective configuration
     frame   "QRSLROW\0", u32 dtype (enum qrs_dtype), u32 0, u64 step,
             u64 the record's timestamp_ns, u64 n, then the n values
   Returns 0, -EINVAL, -ENOMEM, or fopen()'s / write(2)'s -errno. */
QRS_EXPORT int qrs_sampler_set_logits_dump(struct qrs_sampler *s,
                                           const char *path);
#define QRS_LOGITS_DUMP_MAGIC "QRSLOGIT"
#define QRS_LOGITS_DUMP_VERSION 1
#define QRS_LOGITS_FRAME_MAGIC "QRSLROW"
#define QRS_LOGITS_FRAME_HEADER 40

/* Flags for qrs_sampler_step(). */
#define QRS_STEP_PREFETCHED 0x1   /* the draw was requested before this
                                     token's logits existed */

/* One token with a draw the caller already has: temperature, the draw's
   metadata to the strategy (coherence_gate: lag by one), selection with
   draw->u, strategy feedback, record, log; then step += 1 and the
   selected token becomes the previous token of the next commitment.
   logits: n values of dtype (n <= the row capacity), read only.
   draw->u must be a number in [0, 1] (qrsd's draws lie in (0, 1)).
   ret_token, ret_record may be NULL.  Returns 0, or 1 when the config
   says bypass (nothing done, no token), QRS_E_U_RANGE (u NaN, infinite
   or outside [0, 1]: nothing done), QRS_E_LOGITS (NaN, +inf, all -inf),
   QRS_E_NO_CANDIDATES, -EDOM (edt with a negative exponent on a
   zero-entropy row, as the reference), -EINVAL.  On error the sampler's
   state is unchanged except for strategy state the reference also
   updates before selection (hvh_drift EMAs, coherence gate EMA). */
QRS_EXPORT int qrs_sampler_step(struct qrs_sampler *s, const void *logits,
                                enum qrs_dtype dtype, size_t n,
                                const struct qrs_draw *draw, unsigned flags,
                                uint32_t *ret_token,
                                struct qrs_token_record *ret_record);

/* qrs_sampler_step() with a draw that carries only u. */
QRS_EXPORT int qrs_sampler_select_u(struct qrs_sampler *s,
                                    const void *logits, enum qrs_dtype dtype,
                                    size_t n, double u, uint32_t *ret_token,
                                    struct qrs_token_record *ret_record);

/* The whole per-token step with qrsd: this token's draw (the prefetched
   one, else a blocking draw, with the commitment salt / step / previous
   token, and the config's entropy_source_type, signal_amplifier_type and
   sample_count when set), then qrs_sampler_step() with it (temperature,
   selection, record); then, with entropy_prefetch (the default), the next
   token's draw is begun at once.  The draw's metadata reaches the
   strategy after this token's temperature, so coherence_gate lags by one
   draw as in the reference.  A prefetched draw that failed is retried
   once as a blocking draw.  Returns what qrs_sampler_step() returns, or
   the client's error (QRS_E_ENTROPY, QRS_E_UNKNOWN_SOURCE,
   QRS_E_DISCONNECTED, -ETIMEDOUT, ...).  On any error no token was
   selected and the step did not advance; the next call draws again for
   the same step. */
QRS_EXPORT int qrs_sampler_sample_token(struct qrs_sampler *s,
                                        struct qrs_client *c,
                                        const void *logits,
                                        enum qrs_dtype dtype, size_t n,
                                        uint32_t *ret_token,
                                        struct qrs_token_record *ret_record);

/* Begin the next token's draw now (e.g. when the request is added, so the
   first draw overlaps the prefill), unless one is outstanding or
   entropy_prefetch is off.  Returns 0 or the client's error. */
QRS_EXPORT int qrs_sampler_prefetch(struct qrs_sampler *s,
                                    struct qrs_client *c);

/* The step split in two, for a selection made elsewhere (a GPU that
   keeps the logits; the `qrs` Python package's qrs.device):
     qrs_sampler_take_draw(s, c, &u);     this step's draw, held by s
     ... the device selects at u ...
     qrs_sampler_finish_pick(s, c, &pick, &rec);   its token, or
     qrs_sampler_finish_row(s, c, row, dtype, n, &tok, &rec);
   take_draw gets the draw exactly as qrs_sampler_sample_token() would
   (the prefetched one, else one blocking draw with the same commitment)
   and holds it for this step; a second call in the same step returns the
   held u.  Returns 0, 1 (bypass: nothing drawn), QRS_E_U_RANGE, or the
   client's error. */
QRS_EXPORT int qrs_sampler_take_draw(struct qrs_sampler *s,
                                     struct qrs_client *c, double *ret_u);

/* What a selection made elsewhere measured (in the reference's order,
   from the same row and u). */
struct qrs_pick {
  uint32_t token;
  uint32_t rank;                  /* 0: the most probable candidate */
  uint32_t num_candidates;        /* after every truncation */
  double prob;                    /* in the final renormalised dist. */
  double cdf_lo, cdf_hi;          /* u in [cdf_lo, cdf_hi] picked it */
  double entropy;                 /* nats of the raw row (NaN: unknown) */
  double temperature;             /* the temperature it selected at */
};

/* Ends the step with the held draw and a token selected elsewhere: the
   strategy's feedback, the record (device_selection "certified"), the
   commitment chain and the log move on exactly as after libqrs's own
   selection, and the next draw is prefetched on c (NULL: none).  Only a
   sampler whose temperature reads nothing of the row (fixed) in the
   reference's stage order, without a logits dump: -EOPNOTSUPP otherwise.
   Returns 0, -ENOENT (no draw held for this step), -EINVAL (a token
   outside the row, a temperature other than the sampler's, a u outside
   [cdf_lo, cdf_hi]). */
QRS_EXPORT int qrs_sampler_finish_pick(struct qrs_sampler *s,
                                       struct qrs_client *c,
                                       const struct qrs_pick *pick,
                                       struct qrs_token_record *ret_record);

/* Ends the step with the held draw by libqrs's own selection from the
   row (a row the device could not certify): what qrs_sampler_step()
   does with that draw, the record saying "uncertified"; then the next
   draw is prefetched on c (NULL: none).  Returns what qrs_sampler_step()
   returns, or -ENOENT (no draw held). */
QRS_EXPORT int qrs_sampler_finish_row(struct qrs_sampler *s,
                                      struct qrs_client *c,
                                      const void *logits,
                                      enum qrs_dtype dtype, size_t n,
                                      uint32_t *ret_token,
                                      struct qrs_token_record *ret_record);

/* Forget an outstanding prefetched draw (its reply is dropped) and a
   draw held by qrs_sampler_take_draw(). */
QRS_EXPORT void qrs_sampler_cancel_prefetch(struct qrs_sampler *s);

/* For engines that take logits back: row[token] = 0, every other entry
   -inf (n entries of dtype).  Returns 0 or -EINVAL (token >= n). */
QRS_EXPORT int qrs_force_one_hot(void *logits, enum qrs_dtype dtype,
                                 size_t n, uint32_t token);

/* diagnostic_mode: the last records (at most 50000, oldest first). */
QRS_EXPORT size_t qrs_sampler_diagnostic_count(const struct qrs_sampler *s);
/* The i-th kept record (0: oldest).  Returns 0 or -ERANGE. */
QRS_EXPORT int qrs_sampler_diagnostic_record(const struct qrs_sampler *s,
                                             size_t i,
                                             struct qrs_token_record *ret);

/* Summary of the kept records (reference get_summary_stats). */
struct qrs_sampler_stats {
  size_t total_tokens;
  double mean_u, min_u, max_u;
  double mean_rank, mean_prob;
  double mean_fetch_ms, mean_total_ms, max_total_ms;
  size_t fallback_count;
  double fallback_rate;
};
/* Returns 0, or -ENODATA when no record is kept. */
QRS_EXPORT int qrs_sampler_summary_stats(const struct qrs_sampler *s,
                                         struct qrs_sampler_stats *ret);

#ifdef __cplusplus
}
#endif

#endif
