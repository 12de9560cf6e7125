/* The sampler: one request's configuration, strategy state, commitment
   chain, prefetched draw and workspace; the per-token step. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <qrs/sampler.h>

#include "sampling.h"

/* diagnostic_mode keeps at most this many records (as the reference). */
#define DIAG_CAP 50000
#define SALT_LEN 16
#define SALT_MAX 256

struct qrs_sampler {
  struct qrs__cfgvals cfg;
  char config_hash[17];
  char preset[QRS_NAME_MAX];
  int has_preset;
  int strategy_kind;
  enum qrs__order order;
  int log_level;                  /* 0 none, 1 summary, 2 full */
  /* draw request fields; NULL / 0: the daemon's default */
  const char *source;
  const char *amplifier;
  uint32_t sample_count;
  struct qrs_amp_params amp;    /* the explicitly set amplifier fields */
  size_t vocab_size;
  size_t cap;                     /* longest row */
  struct qrs__sel_ws ws;
  struct qrs__strategy st;
  /* commitment chain */
  uint8_t salt[SALT_MAX];
  size_t salt_len;
  uint64_t step;
  int64_t prev_token;
  /* the prefetched draw */
  struct qrs_client *pf_client;
  uint32_t pf_ticket;
  uint64_t pf_step;
  int pf_active;
  int pf_jit;                     /* begun after the logits (batch.c) */
  /* a draw taken for a selection made elsewhere (qrs_sampler_take_draw) */
  struct qrs_draw held;
  uint64_t held_step;
  unsigned held_flags;
  double held_fetch_ms;
  int held_active;
  /* logging */
  FILE *log;
  int log_owned;
  char *logbuf;                   /* line buffer of a log file we opened */
  FILE *dump;                     /* the logits dump, or NULL */
  /* diagnostic_mode ring */
  struct qrs_token_record *diag;
  size_t diag_len, diag_head;
};

static int64_t
now_ns(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int
fill_random(uint8_t *buf, size_t len)
{
  ssize_t r;
  size_t got;

  for (got = 0; got < len;) {
    r = getrandom(buf + got, len - got, 0);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    got += (size_t)r;
  }
  return 0;
}

static int
level_of(const char *s)
{
  if (!strcmp(s, "full"))
    return 2;
  if (!strcmp(s, "summary"))
    return 1;
  return 0;
}

static enum qrs__order
order_of(const struct qrs__cfgvals *v)
{
  if (!strcmp(v->stage_order, "hf"))
    return QRS__ORDER_HF;
  if (!strcmp(v->stage_order, "llama"))
    return QRS__ORDER_LLAMA;
  return v->truncate_first ? QRS__ORDER_TRUNCATE_FIRST
                           : QRS__ORDER_REFERENCE;
}

/* The draw fields set above the default layer go to qrsd with every
   draw; the others take qrsd's configured values (whose population_std is
   the correct 73.9003, not the reference's 73.612). */
void
qrs__draw_setup(const struct qrs_sampler_config *cfg,
                const struct qrs__cfgvals *v, const char **ret_source,
                const char **ret_amplifier, uint32_t *ret_sample_count,
                struct qrs_amp_params *ret_amp)
{
  *ret_source = NULL;
  *ret_amplifier = NULL;
  *ret_sample_count = 0;
  if (qrs_sampler_config_layer(cfg, "entropy_source_type") !=
      QRS_LAYER_DEFAULT)
    *ret_source = v->entropy_source_type;
  if (qrs_sampler_config_layer(cfg, "signal_amplifier_type") !=
      QRS_LAYER_DEFAULT)
    *ret_amplifier = v->signal_amplifier_type;
  if (qrs_sampler_config_layer(cfg, "sample_count") != QRS_LAYER_DEFAULT &&
      v->sample_count > 0 && v->sample_count <= UINT32_MAX)
    *ret_sample_count = (uint32_t)v->sample_count;

  memset(ret_amp, 0, sizeof(*ret_amp));
  if (qrs_sampler_config_layer(cfg, "population_mean") != QRS_LAYER_DEFAULT)
    ret_amp->set |= QRS_AMP_POPULATION_MEAN;
  if (qrs_sampler_config_layer(cfg, "population_std") != QRS_LAYER_DEFAULT)
    ret_amp->set |= QRS_AMP_POPULATION_STD;
  if (qrs_sampler_config_layer(cfg, "uniform_clamp_epsilon") !=
      QRS_LAYER_DEFAULT)
    ret_amp->set |= QRS_AMP_EPSILON;
  if (qrs_sampler_config_layer(cfg, "zscore_calibration_samples") !=
          QRS_LAYER_DEFAULT &&
      v->zscore_calibration_samples >= 0 &&
      v->zscore_calibration_samples <= UINT32_MAX)
    ret_amp->set |= QRS_AMP_ZSCORE_CALIBRATION;
  ret_amp->population_mean = v->population_mean;
  ret_amp->population_std = v->population_std;
  ret_amp->uniform_clamp_epsilon = v->uniform_clamp_epsilon;
  ret_amp->zscore_calibration_samples =
      (uint32_t)v->zscore_calibration_samples;
}

int
qrs_sampler_new(const struct qrs_sampler_config *cfg, size_t vocab_size,
                struct qrs_sampler **ret_sampler)
{
  struct qrs_sampler_config *tmp;
  struct qrs_sampler *s;
  const char *pn;
  char err[256];
  int r;

  if (!ret_sampler || vocab_size == 0 || vocab_size > UINT32_MAX)
    return -EINVAL;
  tmp = NULL;
  if (!cfg) {
    r = qrs_sampler_config_new(&tmp);
    if (r < 0)
      return r;
    cfg = tmp;
  }
  s = calloc(1, sizeof(*s));
  if (!s) {
    r = -ENOMEM;
    goto fail;
  }
  qrs__config_resolve(cfg, &s->cfg);
  r = qrs__config_check(&s->cfg, err, sizeof(err));
  if (r < 0)
    goto fail;
  r = qrs__config_hash(cfg, &s->cfg, s->config_hash);
  if (r < 0)
    goto fail;
  pn = qrs__config_preset(cfg);
  if (pn) {
    snprintf(s->preset, sizeof(s->preset), "%s", pn);
    s->has_preset = 1;
  }
  s->strategy_kind = qrs__strategy_kind(s->cfg.temperature_strategy);
  s->order = order_of(&s->cfg);
  s->log_level = level_of(s->cfg.log_level);
  qrs__draw_setup(cfg, &s->cfg, &s->source, &s->amplifier, &s->sample_count,
                  &s->amp);
  s->vocab_size = vocab_size;
  s->cap = vocab_size;
  s->prev_token = -1;
  r = qrs__sel_ws_init(&s->ws, s->cap);
  if (r < 0)
    goto fail;
  r = qrs__strategy_init(&s->st, s->strategy_kind, &s->cfg, vocab_size,
                         s->cap);
  if (r < 0)
    goto fail;
  if (s->cfg.diagnostic_mode) {
    s->diag = malloc(DIAG_CAP * sizeof(*s->diag));
    if (!s->diag) {
      r = -ENOMEM;
      goto fail;
    }
  }
  s->salt_len = SALT_LEN;
  r = fill_random(s->salt, SALT_LEN);
  if (r < 0)
    goto fail;
  qrs_sampler_config_free(tmp);
  *ret_sampler = s;
  return 0;

fail:
  qrs_sampler_free(s);
  qrs_sampler_config_free(tmp);
  return r;
}

void
qrs_sampler_free(struct qrs_sampler *s)
{
  if (!s)
    return;
  qrs_sampler_cancel_prefetch(s);
  if (s->log_owned && s->log)
    fclose(s->log);
  free(s->logbuf);
  if (s->dump)
    fclose(s->dump);
  qrs__sel_ws_done(&s->ws);
  qrs__strategy_done(&s->st);
  free(s->diag);
  free(s);
}

int
qrs_sampler_reserve(struct qrs_sampler *s, size_t max_row)
{
  struct qrs__sel_ws ws;
  double *trow;
  int r;

  if (!s || max_row == 0 || max_row > UINT32_MAX)
    return -EINVAL;
  if (max_row <= s->cap)
    return 0;
  r = qrs__sel_ws_init(&ws, max_row);
  if (r < 0)
    return r;
  if (s->st.trow || (s->st.inner && s->st.inner->trow)) {
    struct qrs__strategy *t = s->st.trow ? &s->st : s->st.inner;

    trow = realloc(t->trow, max_row * sizeof(*trow));
    if (!trow) {
      qrs__sel_ws_done(&ws);
      return -ENOMEM;
    }
    t->trow = trow;
    t->trow_cap = max_row;
  }
  qrs__sel_ws_done(&s->ws);
  s->ws = ws;
  s->cap = max_row;
  return 0;
}

int
qrs_sampler_reset(struct qrs_sampler *s)
{
  int r;

  if (!s)
    return -EINVAL;
  qrs_sampler_cancel_prefetch(s);
  r = fill_random(s->salt, SALT_LEN);
  if (r < 0)
    return r;
  s->salt_len = SALT_LEN;
  s->step = 0;
  s->prev_token = -1;
  qrs__strategy_reset(&s->st, &s->cfg);
  s->diag_len = s->diag_head = 0;
  return 0;
}

/* The head of a saved state; the strategy's state follows it. */
struct state_head {
  char magic[8];
  uint32_t version;
  int32_t strategy_kind;
  char config_hash[17];
  uint64_t vocab_size;
  uint64_t size;
  uint64_t step;
  int64_t prev_token;
};

#define STATE_MAGIC "QRSSTATE"
#define STATE_VERSION 1

size_t
qrs_sampler_state_size(const struct qrs_sampler *s)
{
  return s ? sizeof(struct state_head) + qrs__strategy_state_size(&s->st)
           : 0;
}

int
qrs_sampler_save_state(const struct qrs_sampler *s, void *buf, size_t len)
{
  struct state_head h;
  size_t size;

  if (!s || !buf)
    return -EINVAL;
  size = qrs_sampler_state_size(s);
  if (len < size)
    return -ENOBUFS;
  memset(&h, 0, sizeof(h));
  memcpy(h.magic, STATE_MAGIC, sizeof(h.magic));
  h.version = STATE_VERSION;
  h.strategy_kind = s->strategy_kind;
  memcpy(h.config_hash, s->config_hash, sizeof(h.config_hash));
  h.vocab_size = s->vocab_size;
  h.size = size;
  h.step = s->step;
  h.prev_token = s->prev_token;
  memcpy(buf, &h, sizeof(h));
  qrs__strategy_save(&s->st, (unsigned char *)buf + sizeof(h));
  return 0;
}

int
qrs_sampler_restore_state(struct qrs_sampler *s, const void *buf,
                          size_t len)
{
  struct state_head h;

  if (!s || !buf || len != qrs_sampler_state_size(s))
    return -EINVAL;
  memcpy(&h, buf, sizeof(h));
  if (memcmp(h.magic, STATE_MAGIC, sizeof(h.magic)) != 0 ||
      h.version != STATE_VERSION || h.strategy_kind != s->strategy_kind ||
      memcmp(h.config_hash, s->config_hash, sizeof(h.config_hash)) != 0 ||
      h.vocab_size != s->vocab_size || h.size != len ||
      h.prev_token < -1 || h.prev_token >= (int64_t)s->cap ||
      (h.step == 0) != (h.prev_token == -1))
    return -EINVAL;
  if (qrs__strategy_restore(&s->st, (const unsigned char *)buf + sizeof(h)) <
      0)
    return -EINVAL;
  qrs_sampler_cancel_prefetch(s);
  s->step = h.step;
  s->prev_token = h.prev_token;
  return 0;
}

int
qrs_sampler_set_previous_token(struct qrs_sampler *s, uint32_t token)
{
  if (!s || s->step == 0 || token >= s->cap)
    return -EINVAL;
  qrs_sampler_cancel_prefetch(s);
  s->prev_token = token;
  return 0;
}

int
qrs_sampler_set_salt(struct qrs_sampler *s, const uint8_t *salt, size_t len)
{
  if (!s || !salt || len == 0 || len > SALT_MAX)
    return -EINVAL;
  /* A draw prefetched now is committed under the old salt. */
  qrs_sampler_cancel_prefetch(s);
  memcpy(s->salt, salt, len);
  s->salt_len = len;
  return 0;
}

void
qrs_sampler_next_commitment(const struct qrs_sampler *s,
                            struct qrs_commitment *ret)
{
  if (!s || !ret)
    return;
  ret->salt = s->salt;
  ret->salt_len = s->salt_len;
  ret->step = s->step;
  ret->prev_token_id = s->prev_token;
}

int
qrs_sampler_get_config(const struct qrs_sampler *s,
                       struct qrs_sampler_config **ret_cfg)
{
  struct qrs_sampler_config *c;
  const char *name;
  char buf[128];
  size_t i;
  int r;

  if (!s || !ret_cfg)
    return -EINVAL;
  r = qrs_sampler_config_new(&c);
  if (r < 0)
    return r;
  for (i = 0; (name = qrs_sampler_field_name(i)); i++) {
    r = qrs__cfgvals_text(&s->cfg, name, buf, sizeof(buf));
    if (r < 0)
      goto fail;
    r = qrs_sampler_config_set(c, name, buf);
    if (r < 0)
      goto fail;
  }
  *ret_cfg = c;
  return 0;

fail:
  qrs_sampler_config_free(c);
  return r;
}

int
qrs_sampler_attach_embeddings(struct qrs_sampler *s, const void *table,
                              enum qrs_dtype dtype, size_t rows, size_t dim)
{
  if (!s)
    return -EINVAL;
  return qrs__strategy_attach_embeddings(&s->st, table, dtype, rows, dim);
}

int
qrs_sampler_set_log_file(struct qrs_sampler *s, FILE *f)
{
  if (!s)
    return -EINVAL;
  if (s->log_owned && s->log)
    fclose(s->log);
  free(s->logbuf);
  s->logbuf = NULL;
  s->log = f;
  s->log_owned = 0;
  return 0;
}

/* Lines of records written to a file this long or shorter reach it in one
   write(2) (O_APPEND: whole, even with other writers of the file). */
#define LOG_LINE_MAX (64 * 1024)

int
qrs_sampler_set_log_path(struct qrs_sampler *s, const char *path)
{
  char *buf;
  FILE *f;
  int r;

  if (!s || !path)
    return -EINVAL;
  buf = malloc(LOG_LINE_MAX);
  if (!buf)
    return -ENOMEM;
  f = fopen(path, "ae");
  if (!f) {
    r = -errno;
    free(buf);
    return r;
  }
  /* Line buffered in a buffer larger than any record line: every line
     is one write(2). */
  setvbuf(f, buf, _IOLBF, LOG_LINE_MAX);
  qrs_sampler_set_log_file(s, f);
  s->log_owned = 1;
  s->logbuf = buf;
  return 0;
}

int
qrs_sampler_set_logits_dump(struct qrs_sampler *s, const char *path)
{
  FILE *f = NULL;
  int r;

  if (!s)
    return -EINVAL;
  if (path) {
    r = qrs__logits_dump_open(path, &s->cfg, s->config_hash, &f);
    if (r < 0)
      return r;
  }
  if (s->dump)
    fclose(s->dump);
  s->dump = f;
  return 0;
}

static void
diag_push(struct qrs_sampler *s, const struct qrs_token_record *rec)
{
  s->diag[s->diag_head] = *rec;
  s->diag_head = (s->diag_head + 1) % DIAG_CAP;
  if (s->diag_len < DIAG_CAP)
    s->diag_len++;
}

size_t
qrs_sampler_diagnostic_count(const struct qrs_sampler *s)
{
  return s && s->diag ? s->diag_len : 0;
}

int
qrs_sampler_diagnostic_record(const struct qrs_sampler *s, size_t i,
                              struct qrs_token_record *ret)
{
  if (!s || !ret)
    return -EINVAL;
  if (!s->diag || i >= s->diag_len)
    return -ERANGE;
  *ret = s->diag[(s->diag_head + DIAG_CAP - s->diag_len + i) % DIAG_CAP];
  return 0;
}

int
qrs_sampler_summary_stats(const struct qrs_sampler *s,
                          struct qrs_sampler_stats *ret)
{
  struct qrs_token_record rec;
  struct qrs_sampler_stats st;
  size_t i, n;

  if (!s || !ret)
    return -EINVAL;
  n = qrs_sampler_diagnostic_count(s);
  if (n == 0)
    return -ENODATA;
  memset(&st, 0, sizeof(st));
  st.min_u = INFINITY;
  st.max_u = -INFINITY;
  for (i = 0; i < n; i++) {
    qrs_sampler_diagnostic_record(s, i, &rec);
    st.mean_u += rec.u_value;
    st.min_u = rec.u_value < st.min_u ? rec.u_value : st.min_u;
    st.max_u = rec.u_value > st.max_u ? rec.u_value : st.max_u;
    st.mean_rank += rec.token_rank;
    st.mean_prob += rec.token_prob;
    st.mean_fetch_ms += rec.entropy_fetch_ms;
    st.mean_total_ms += rec.total_sampling_ms;
    st.max_total_ms = rec.total_sampling_ms > st.max_total_ms
                          ? rec.total_sampling_ms
                          : st.max_total_ms;
    st.fallback_count += rec.entropy_is_fallback != 0;
  }
  st.total_tokens = n;
  st.mean_u /= (double)n;
  st.mean_rank /= (double)n;
  st.mean_prob /= (double)n;
  st.mean_fetch_ms /= (double)n;
  st.mean_total_ms /= (double)n;
  st.fallback_rate = (double)st.fallback_count / (double)n;
  *ret = st;
  return 0;
}

static int
dtype_ok(enum qrs_dtype dt)
{
  return dt == QRS_DTYPE_F32 || dt == QRS_DTYPE_F16 ||
         dt == QRS_DTYPE_BF16 || dt == QRS_DTYPE_F64;
}

static void
copy_name(char *dst, const char *src)
{
  snprintf(dst, QRS_NAME_MAX, "%s", src ? src : "");
}

/* A step's end, however its token was selected: the strategy's
   feedback, the record, the chain, the log.  logits: the row (NULL when
   it was selected elsewhere: then the sampler has no logits dump). */
static void
finish_step(struct qrs_sampler *s, const struct qrs_draw *draw,
            unsigned flags, double fetch_ms, const struct qrs__tresult *tr,
            double min_p, const struct qrs__sel_out *so, int64_t t0,
            int64_t t1, int64_t t2, const void *logits, enum qrs_dtype dtype,
            size_t n, enum qrs_device_selection dev,
            struct qrs_token_record *ret_record)
{
  struct qrs_token_record rec;
  int64_t t3;

  /* the draw's metadata: first used by the next token's temperature */
  qrs__strategy_observe_meta(&s->st, draw->has_meta ? &draw->meta : NULL);

  /* feedback to the strategy */
  qrs__strategy_observe_token(
      &s->st, &s->cfg, so->token,
      tr->nucleus == QRS__NUCLEUS_MIROSTAT ? so->pre_prob : so->prob,
      so->kept_entropy);

  /* the record */
  memset(&rec, 0, sizeof(rec));
  rec.timestamp_ns = t0;
  rec.entropy_fetch_ms = fetch_ms;
  copy_name(rec.entropy_source_used,
            draw->served_by[0] ? draw->served_by : draw->source);
  rec.entropy_is_fallback = draw->fallback != 0;
  copy_name(rec.entropy_source_type, draw->served_type);
  rec.entropy_production = draw->production != 0;
  rec.sample_mean = draw->has_meta ? NAN : draw->sample_mean;
  rec.z_score = draw->has_meta ? draw->meta.z : draw->z;
  rec.u_value = draw->u;
  copy_name(rec.temperature_strategy, s->cfg.temperature_strategy);
  rec.shannon_entropy = tr->H;
  rec.temperature_used = tr->T;
  rec.token_id = so->token;
  rec.token_rank = so->rank;
  rec.token_prob = so->prob;
  rec.num_candidates = so->num_candidates;
  memcpy(rec.config_hash, s->config_hash, sizeof(rec.config_hash));
  rec.varentropy = tr->varentropy;
  rec.min_p_used = so->greedy ? NAN : min_p;
  if (s->has_preset) {
    copy_name(rec.preset_active, s->preset);
    rec.has_preset = 1;
  }
  rec.h_ema = tr->h_ema;
  rec.vh_ema = tr->vh_ema;
  rec.entropy_prefetch_hit = flags & QRS_STEP_PREFETCHED ? 1 : -1;
  rec.entropy_nonce = draw->nonce;
  rec.entropy_echo_verified = draw->echo == QRS_ECHO_VERIFIED   ? 1
                              : draw->echo == QRS_ECHO_MISMATCH ? 0
                                                                : -1;
  if (draw->generated.realtime_ns) {
    rec.entropy_server_timestamp_ns = draw->generated.realtime_ns;
    rec.has_server_timestamp = 1;
  }
  rec.journal_seq = draw->journal_seq;
  rec.entropy_unjournalled = draw->unjournalled != 0;
  rec.draw_received_ns = draw->received.realtime_ns;
  rec.draw_generated_ns = draw->generated.realtime_ns;
  rec.draw_sent_ns = draw->sent.realtime_ns;
  rec.temperature_ms = (double)(t1 - t0) / 1e6;
  rec.amplify_ms = 0.0;
  rec.select_ms = (double)(t2 - t1) / 1e6;
  if (draw->has_meta) {
    rec.has_draw_meta = 1;
    rec.draw_z = draw->meta.z;
    rec.draw_coherence_z = draw->meta.coherence_z;
    rec.draw_coherence_valid = draw->meta.coherence_valid != 0;
    rec.draw_coherence_r = draw->meta.coherence_r;
    copy_name(rec.purity_label, draw->meta.purity_label);
    rec.integrated_bytes = draw->meta.integrated_bytes;
    copy_name(rec.integrator, draw->meta.integrator);
    copy_name(rec.draw_source_id, draw->meta.source_id);
  } else {
    rec.draw_z = rec.draw_coherence_z = rec.draw_coherence_r = NAN;
  }
  rec.gate_open = tr->gate_open;
  rec.gate_boost = tr->gate_boost;
  rec.step = s->step;
  rec.cdf_lo = so->cdf_lo;
  rec.cdf_hi = so->cdf_hi;
  rec.top_p_used = so->top_p_used;
  rec.kept_entropy_bits = tr->nucleus == QRS__NUCLEUS_THROTTLE ||
                                  tr->want_kept_entropy
                              ? so->kept_entropy / M_LN2
                              : NAN;
  rec.mirostat_mu = tr->mu;
  rec.greedy = so->greedy;
  rec.device_selection = dev;
  t3 = now_ns();
  rec.total_sampling_ms = (double)(t3 - t0) / 1e6 + fetch_ms;

  /* the chain moves on */
  s->step++;
  s->prev_token = so->token;

  /* log (a failing log sink never fails the token) */
  if (s->log && s->log_level > 0)
    qrs__record_write(&rec, s->log_level, s->log);
  if (s->dump)
    qrs__logits_dump_row(s->dump, logits, dtype, n, rec.step,
                         rec.timestamp_ns);
  if (s->diag)
    diag_push(s, &rec);
  if (ret_record)
    *ret_record = rec;
}

/* The step proper; fetch_ms: time spent waiting for the draw; dev: what
   the record says of a device (UNCERTIFIED: it left the row to libqrs). */
static int
step_impl(struct qrs_sampler *s, const void *logits, enum qrs_dtype dtype,
          size_t n, const struct qrs_draw *draw, unsigned flags,
          double fetch_ms, enum qrs_device_selection dev,
          uint32_t *ret_token, struct qrs_token_record *ret_record)
{
  struct qrs__row row;
  struct qrs__tresult tr;
  struct qrs__sel_params sp;
  struct qrs__sel_out so;
  struct qrs__view sv;
  struct qrs__scan ss;
  const struct qrs__strategy *ts;
  int64_t t0, t1, t2;
  int r, need_h, lazy;

  if (!s || !logits || !draw || n == 0 || !dtype_ok(dtype))
    return -EINVAL;
  if (n > s->cap)
    return -EINVAL;
  if (s->cfg.bypass)
    return 1;
  /* u is a probability mass: a NaN (which no comparison rejects in the
     CDF search) or anything outside [0, 1] would still pick a token */
  if (!(draw->u >= 0.0 && draw->u <= 1.0))
    return QRS_E_U_RANGE;
  t0 = now_ns();
  need_h = (s->log && s->log_level > 0) || s->diag;
  /* A configured temperature (fixed, entropy throttle, mirostat) needs
     nothing of the row: the selection scans it (the fast paths in their
     own first pass) and reports a bad row. */
  lazy = !need_h && !qrs__strategy_reads_row(&s->st);
  if (lazy) {
    /* row.scan stays a placeholder (max 0, no NaN): it only has to pass
       the strategy's row check; the fixed strategy reads nothing else of
       the row, and the selection gets no scan. */
    memset(&row, 0, sizeof(row));
    row.v.data = logits;
    row.v.dtype = dtype;
    row.v.n = n;
  } else {
    qrs__row_prepare(&row, logits, dtype, n,
                     need_h || qrs__strategy_wants_h(&s->st), s->ws.mb);
    r = qrs__row_check(&row.scan, n);
    if (r < 0)
      return r;
  }

  /* 1. temperature */
  r = qrs__strategy_compute(&s->st, &s->cfg, &row, need_h, &tr);
  if (r < 0)
    return r;
  t1 = now_ns();

  /* 2. selection */
  memset(&sp, 0, sizeof(sp));
  sp.T = tr.T;
  sp.top_k = s->cfg.top_k;
  sp.top_p = isnan(tr.top_p) ? s->cfg.top_p : tr.top_p;
  sp.min_p = isnan(tr.min_p) ? s->cfg.min_p_base : tr.min_p;
  sp.u = draw->u;
  sp.order = s->order;
  sp.nucleus = s->order == QRS__ORDER_REFERENCE ||
                       s->order == QRS__ORDER_TRUNCATE_FIRST
                   ? tr.nucleus
                   : QRS__NUCLEUS_TOP_P;
  sp.mu = tr.mu;
  sp.thr_target = tr.thr_target;
  sp.thr_pmin = s->cfg.throttle_p_min;
  sp.thr_pmax = s->cfg.throttle_p_max;
  sp.want_entropy = tr.want_kept_entropy ||
                    tr.nucleus == QRS__NUCLEUS_THROTTLE;
  sv = row.v;
  ss = row.scan;
  if (tr.transformed) {
    ts = s->st.inner ? s->st.inner : &s->st;
    sv.data = ts->trow;
    sv.dtype = QRS_DTYPE_F64;
    qrs__kscan(&sv, &ss);
  }
  /* The moment pass's sub-block maxima of this row, for min-p's cut. */
  s->ws.mb_ready = !lazy && row.mb_done && !tr.transformed;
  s->ws.mb_data = logits;
  s->ws.mb_min = row.min;
  r = qrs__select(&s->ws, &sv, lazy && !tr.transformed ? NULL : &ss, &sp,
                  &so);
  s->ws.mb_ready = 0;
  if (r < 0)
    return r;
  t2 = now_ns();

  finish_step(s, draw, flags, fetch_ms, &tr, sp.min_p, &so, t0, t1, t2,
              logits, dtype, n, dev, ret_record);
  if (ret_token)
    *ret_token = so.token;
  return 0;
}

int
qrs_sampler_step(struct qrs_sampler *s, const void *logits,
                 enum qrs_dtype dtype, size_t n, const struct qrs_draw *draw,
                 unsigned flags, uint32_t *ret_token,
                 struct qrs_token_record *ret_record)
{
  return step_impl(s, logits, dtype, n, draw, flags, 0.0,
                   QRS_DEVICE_SELECTION_NONE, ret_token,
                   ret_record);
}

int
qrs_sampler_select_u(struct qrs_sampler *s, const void *logits,
                     enum qrs_dtype dtype, size_t n, double u,
                     uint32_t *ret_token, struct qrs_token_record *ret_record)
{
  struct qrs_draw d;

  memset(&d, 0, sizeof(d));
  d.u = u;
  d.sample_mean = NAN;
  return step_impl(s, logits, dtype, n, &d, 0, 0.0,
                   QRS_DEVICE_SELECTION_NONE, ret_token, ret_record);
}

static void
draw_request(const struct qrs_sampler *s, struct qrs_commitment *cm,
             struct qrs_draw_request *req)
{
  qrs_sampler_next_commitment(s, cm);
  memset(req, 0, sizeof(*req));
  req->source = s->source;
  req->amplifier = s->amplifier;
  req->sample_count = s->sample_count;
  req->commitment = cm;
  req->amp = s->amp.set ? &s->amp : NULL;
  req->draw_source_id = s->cfg.draw_source_id;
  req->draw_block_bytes = s->cfg.draw_block_bytes > 0 &&
                          s->cfg.draw_block_bytes <= UINT32_MAX ?
                          (uint32_t)s->cfg.draw_block_bytes : 0;
  req->unit = s->cfg.study_unit;
}

/* The held draw of this step, or NULL. */
static const struct qrs_draw *
held_draw(const struct qrs_sampler *s)
{
  return s->held_active && s->held_step == s->step ? &s->held : NULL;
}

/* Begins this step's draw on c unless one is open there: a prefetch
   (jit 0: only with entropy_prefetch), or a draw begun after the logits
   (jit 1, qrs__sampler_begin_draw()). */
static int
begin_step_draw(struct qrs_sampler *s, struct qrs_client *c, int jit)
{
  struct qrs_commitment cm;
  struct qrs_draw_request req;
  uint32_t ticket;
  int r;

  if (s->pf_active && s->pf_step == s->step && s->pf_client == c)
    return 0;
  if (held_draw(s))
    return 0;                     /* this step's draw is in hand */
  qrs_sampler_cancel_prefetch(s);
  if (s->cfg.bypass || (!jit && !s->cfg.entropy_prefetch))
    return 0;
  draw_request(s, &cm, &req);
  r = qrs_client_draw_begin(c, &req, &ticket);
  if (r < 0)
    return r;
  s->pf_client = c;
  s->pf_ticket = ticket;
  s->pf_step = s->step;
  s->pf_active = 1;
  s->pf_jit = jit;
  return 0;
}

int
qrs_sampler_prefetch(struct qrs_sampler *s, struct qrs_client *c)
{
  if (!s || !c)
    return -EINVAL;
  return begin_step_draw(s, c, 0);
}

int
qrs__sampler_begin_draw(struct qrs_sampler *s, struct qrs_client *c)
{
  return begin_step_draw(s, c, 1);
}

void
qrs_sampler_cancel_prefetch(struct qrs_sampler *s)
{
  if (!s)
    return;
  s->held_active = 0;             /* a held draw's commitment goes too */
  if (!s->pf_active)
    return;
  if (s->pf_client)
    qrs_client_draw_cancel(s->pf_client, s->pf_ticket);
  s->pf_active = 0;
  s->pf_client = NULL;
}

/* This step's draw on c: the prefetched one when it is open there, else
   one blocking draw with the same commitment.  flags: QRS_STEP_PREFETCHED
   when it was begun before the logits; fetch_ms: the wait. */
static int
step_draw(struct qrs_sampler *s, struct qrs_client *c, struct qrs_draw *draw,
          unsigned *flags, double *fetch_ms)
{
  struct qrs_commitment cm;
  struct qrs_draw_request req;
  int64_t t0;
  int r;

  *flags = 0;
  t0 = now_ns();
  r = -1;
  if (s->pf_active && s->pf_client == c && s->pf_step == s->step) {
    s->pf_active = 0;
    r = qrs_client_draw_finish(c, s->pf_ticket, draw);
    if (r == 0 && !s->pf_jit)
      *flags = QRS_STEP_PREFETCHED;
    else if (r == -ETIMEDOUT)
      /* The ticket stays open after a timeout: give it back, or its late
         reply holds the client's slot for good. */
      (void)qrs_client_draw_cancel(c, s->pf_ticket);
  } else {
    qrs_sampler_cancel_prefetch(s);
  }
  if (r != 0) {
    /* No prefetch, or it failed: one blocking draw, same commitment. */
    draw_request(s, &cm, &req);
    r = qrs_client_draw(c, &req, draw);
    if (r < 0)
      return r;
  }
  *fetch_ms = (double)(now_ns() - t0) / 1e6;
  return 0;
}

/* The next token's draw now, so that it overlaps the next forward pass.
   A failure here is not this token's: the next token draws serially. */
static void
prefetch_next(struct qrs_sampler *s, struct qrs_client *c)
{
  if (c && s->cfg.entropy_prefetch)
    (void)qrs_sampler_prefetch(s, c);
}

int
qrs__sampler_sample_token(struct qrs_sampler *s, struct qrs_client *c,
                          const void *logits, enum qrs_dtype dtype, size_t n,
                          int prefetch, uint32_t *ret_token,
                          struct qrs_token_record *ret_record)
{
  struct qrs_draw draw;
  unsigned flags;
  double fetch_ms;
  int r;

  if (!s || !c || !logits || n == 0 || !dtype_ok(dtype) || n > s->cap)
    return -EINVAL;
  if (s->cfg.bypass)
    return 1;
  if (held_draw(s)) {
    /* this step's draw was taken already (qrs_sampler_take_draw) */
    draw = s->held;
    flags = s->held_flags;
    fetch_ms = s->held_fetch_ms;
  } else {
    r = step_draw(s, c, &draw, &flags, &fetch_ms);
    if (r < 0)
      return r;
  }
  r = step_impl(s, logits, dtype, n, &draw, flags, fetch_ms,
                QRS_DEVICE_SELECTION_NONE, ret_token, ret_record);
  if (r != 0)
    return r;
  s->held_active = 0;
  if (prefetch)
    prefetch_next(s, c);
  return 0;
}

int
qrs_sampler_take_draw(struct qrs_sampler *s, struct qrs_client *c,
                      double *ret_u)
{
  int r;

  if (!s || !c)
    return -EINVAL;
  if (s->cfg.bypass)
    return 1;
  if (held_draw(s)) {
    if (ret_u)
      *ret_u = s->held.u;
    return 0;
  }
  s->held_active = 0;
  r = step_draw(s, c, &s->held, &s->held_flags, &s->held_fetch_ms);
  if (r < 0)
    return r;
  /* a u outside [0, 1] never leaves here: a selection elsewhere would
     still pick a token with it */
  if (!(s->held.u >= 0.0 && s->held.u <= 1.0))
    return QRS_E_U_RANGE;
  s->held_step = s->step;
  s->held_active = 1;
  if (ret_u)
    *ret_u = s->held.u;
  return 0;
}

int
qrs_sampler_finish_row(struct qrs_sampler *s, struct qrs_client *c,
                       const void *logits, enum qrs_dtype dtype, size_t n,
                       uint32_t *ret_token,
                       struct qrs_token_record *ret_record)
{
  const struct qrs_draw *d;
  int r;

  if (!s)
    return -EINVAL;
  d = held_draw(s);
  if (!d)
    return -ENOENT;
  r = step_impl(s, logits, dtype, n, d, s->held_flags, s->held_fetch_ms,
                QRS_DEVICE_SELECTION_UNCERTIFIED, ret_token, ret_record);
  if (r != 0)
    return r;
  s->held_active = 0;
  prefetch_next(s, c);
  return 0;
}

int
qrs_sampler_finish_pick(struct qrs_sampler *s, struct qrs_client *c,
                        const struct qrs_pick *pick,
                        struct qrs_token_record *ret_record)
{
  struct qrs__row row;
  struct qrs__tresult tr;
  struct qrs__sel_out so;
  const struct qrs_draw *d;
  double min_p;
  int64_t t0;
  int r;

  if (!s || !pick)
    return -EINVAL;
  d = held_draw(s);
  if (!d)
    return -ENOENT;
  /* only what the device selects: the configured temperature (it reads
     nothing of the row) and the reference's stage order; a logits dump
     needs the row */
  if (qrs__strategy_reads_row(&s->st) || s->order != QRS__ORDER_REFERENCE ||
      s->dump)
    return -EOPNOTSUPP;
  if (pick->token >= s->cap || pick->num_candidates == 0 ||
      !(pick->cdf_lo <= d->u && d->u <= pick->cdf_hi))
    return -EINVAL;
  t0 = now_ns();
  /* a placeholder row, as for a lazy step: the strategy reads none of it */
  memset(&row, 0, sizeof(row));
  row.v.dtype = QRS_DTYPE_F32;
  row.v.n = s->vocab_size;
  r = qrs__strategy_compute(&s->st, &s->cfg, &row, 0, &tr);
  if (r < 0)
    return r;
  if (tr.transformed || tr.nucleus != QRS__NUCLEUS_TOP_P)
    return -EOPNOTSUPP;
  /* the pick was made at the temperature this sampler would use */
  if (!(fabs(pick->temperature - tr.T) <= 1e-12 * fmax(1.0, fabs(tr.T))))
    return -EINVAL;
  tr.H = pick->entropy;
  memset(&so, 0, sizeof(so));
  so.token = pick->token;
  so.rank = pick->rank;
  so.num_candidates = pick->num_candidates;
  so.prob = so.pre_prob = pick->prob;
  so.cdf_lo = pick->cdf_lo;
  so.cdf_hi = pick->cdf_hi;
  so.greedy = !(tr.T > 0.0);
  so.top_p_used = NAN;
  so.kept_entropy = NAN;
  min_p = isnan(tr.min_p) ? s->cfg.min_p_base : tr.min_p;
  finish_step(s, d, s->held_flags, s->held_fetch_ms, &tr, min_p, &so, t0, t0,
              t0, NULL, QRS_DTYPE_F32, 0, QRS_DEVICE_SELECTION_CERTIFIED,
              ret_record);
  s->held_active = 0;
  prefetch_next(s, c);
  return 0;
}

int
qrs_sampler_sample_token(struct qrs_sampler *s, struct qrs_client *c,
                         const void *logits, enum qrs_dtype dtype, size_t n,
                         uint32_t *ret_token,
                         struct qrs_token_record *ret_record)
{
  return qrs__sampler_sample_token(s, c, logits, dtype, n, 1, ret_token,
                                   ret_record);
}

/* Every element of the row of type t -inf (ninf), the token's 0. */
#define ONE_HOT(t, ninf) \
  do { \
    t *a = logits; \
    for (i = 0; i < n; i++) \
      a[i] = (ninf); \
    a[token] = 0; \
  } while (0)

int
qrs_force_one_hot(void *logits, enum qrs_dtype dtype, size_t n,
                  uint32_t token)
{
  size_t i;

  if (!logits || token >= n || !dtype_ok(dtype))
    return -EINVAL;
  switch (dtype) {
  case QRS_DTYPE_F32:
    ONE_HOT(float, -INFINITY);
    break;
  case QRS_DTYPE_F64:
    ONE_HOT(double, -INFINITY);
    break;
  default:
    ONE_HOT(uint16_t, dtype == QRS_DTYPE_F16 ? 0xfc00 : 0xff80);
    break;
  }
  return 0;
}
#undef ONE_HOT
