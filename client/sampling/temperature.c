/* Temperature strategies (qr-sampler's temperature/ package) and two of
   qrs's own: entropy_throttle and mirostat_v2, which pick the nucleus
   instead. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <qrs/error.h>

#include "kernels/moments.h"
#include "sampling.h"

/* The guardrail box of the dynamic strategies (dynatemp's and belltemp's
   _TEMP_CLAMP and _MIN_P_CLAMP in the reference). */
#define T_LO 0.3
#define T_HI 2.2
#define MP_LO 0.0
#define MP_HI 0.15

/* coherence_gate's EMA snaps shut below this. */
#define EMA_FLOOR 1e-6

static const char *const names[QRS__T_COUNT] = {
  "fixed", "edt", "hvh_drift", "coherence_gate", "tt_exchange", "evdt_tt",
  "gdt", "dynatemp", "belltemp", "mix_temperatures", "ring_buffer_ar",
  "entropy_throttle", "mirostat_v2",
};

const char *
qrs__strategy_name(int kind)
{
  if (kind < 0 || kind >= QRS__T_COUNT)
    return NULL;
  return names[kind];
}

int
qrs__strategy_kind(const char *name)
{
  if (!name)
    return -1;
  return qrs__name_index(names, QRS__T_COUNT, sizeof(names[0]), name);
}

/* clip(x, lo, hi) = max(lo, min(hi, x)), as numpy.clip for finite x. */
static double
clip(double x, double lo, double hi)
{
  return x < lo ? lo : x > hi ? hi : x;
}

/* The bell of gdt and belltemp: peak * exp(-(h - mu)^2 / (2 sigma^2)). */
static double
bell_curve(double peak, double h, double mu, double sigma)
{
  return peak * exp(-(h - mu) * (h - mu) / (2.0 * sigma * sigma));
}

static void
hvh_of(struct qrs__row *r, const struct qrs__mass *ms)
{
  double m1;

  m1 = ms->w / ms->z;
  r->h = log(ms->z) - m1;
  r->h = r->h > 0.0 ? r->h : 0.0;
  r->vh = ms->w2 / ms->z - m1 * m1;
  r->vh = r->vh > 0.0 ? r->vh : 0.0;
  r->have_h = r->have_vh = 1;
}

/* The row's H and VH.  float32 / 16-bit rows of at least
   QRS__MOM_MIN_N logits: the float moment pass, which *defines* them
   there (moments.h: every path computes the same bits, so a temperature
   derived from H is the same on the fast path and the oracle); other
   rows: the double moment pass.  sc gets the row's scan when not NULL
   (the pass reads the row once for both). */
static void
row_moments(struct qrs__row *r, struct qrs__scan *sc)
{
  struct qrs__scan tmp;
  struct qrs__fmom fm;
  struct qrs__mass ms;
  struct qrs__bound all = { -INFINITY, 0 };

  if (qrs__fmoments_applies(r->v.dtype, r->v.n)) {
    qrs__fmoments(&r->v, sc ? sc : &tmp, &fm, sc ? r->mb : NULL);
    r->mb_done = sc && r->mb;
    r->min = fm.min;
    if (qrs__row_check(sc ? sc : &tmp, r->v.n) == 0) {
      qrs__fmoments_hvh(&fm, &r->h, &r->vh);
      r->have_h = r->have_vh = 1;
    }
    return;
  }
  if (sc) {
    qrs__kscan_entropy(&r->v, sc, &ms);
    if (qrs__row_check(sc, r->v.n) == 0)
      hvh_of(r, &ms);
    return;
  }
  qrs__kmass(&r->v, r->scan.max, 1.0, &all, 1.0, -INFINITY, QRS__M_W, &ms);
  hvh_of(r, &ms);
}

void
qrs__row_prepare(struct qrs__row *r, const void *data, enum qrs_dtype dtype,
                 size_t n, int want_h, float *mb)
{
  memset(r, 0, sizeof(*r));
  r->mb = mb;
  r->v.data = data;
  r->v.dtype = dtype;
  r->v.n = n;
  if (!want_h) {
    qrs__kscan(&r->v, &r->scan);
    return;
  }
  row_moments(r, &r->scan);
}

int
qrs__strategy_reads_row(const struct qrs__strategy *st)
{
  switch (st->kind) {
  case QRS__T_FIXED:
  case QRS__T_ENTROPY_THROTTLE:
  case QRS__T_MIROSTAT_V2:
    return 0;
  default:
    return 1;
  }
}

/* Every strategy that reads the row wants H, but the coherence gate's
   reading is its inner strategy's. */
int
qrs__strategy_wants_h(const struct qrs__strategy *st)
{
  if (st->kind == QRS__T_COHERENCE_GATE)
    return st->inner && qrs__strategy_wants_h(st->inner);
  return qrs__strategy_reads_row(st);
}

static void
row_stats(struct qrs__row *r)
{
  row_moments(r, NULL);
}

double
qrs__row_h(struct qrs__row *r)
{
  if (!r->have_h)
    row_stats(r);
  return r->h;
}

void
qrs__row_hvh(struct qrs__row *r, double *h, double *vh)
{
  if (!r->have_vh)
    row_stats(r);
  *h = r->h;
  *vh = r->vh;
}

static void
result_init(struct qrs__tresult *res)
{
  memset(res, 0, sizeof(*res));
  res->H = NAN;
  res->min_p = NAN;
  res->varentropy = NAN;
  res->h_ema = res->vh_ema = NAN;
  res->gate_open = -1;
  res->gate_boost = NAN;
  res->coherence_valid = -1;
  res->coherence_z = NAN;
  res->nucleus = QRS__NUCLEUS_TOP_P;
  res->mu = NAN;
  res->thr_target = NAN;
  res->top_p = NAN;
  res->h_norm = res->pre_clamp_temp = res->pre_clamp_min_p = NAN;
  res->d_h = res->d_vh = NAN;
  res->h_kept = res->entropy_removed = NAN;
  res->n_kept = -1;
  res->alpha = res->t_mix = res->bell = res->vh_norm = res->vh_boost = NAN;
  res->n_buffered = res->n_penalized = -1;
  res->embeddings_attached = -1;
}

static int
needs_vocab2(int kind)
{
  return kind == QRS__T_EDT || kind == QRS__T_GDT ||
         kind == QRS__T_DYNATEMP || kind == QRS__T_BELLTEMP;
}

int
qrs__strategy_init(struct qrs__strategy *st, int kind,
                   const struct qrs__cfgvals *cfg, size_t vocab_size,
                   size_t row_cap)
{
  int ik, r;

  memset(st, 0, sizeof(*st));
  st->kind = kind;
  st->vocab_size = vocab_size;
  if (kind < 0 || kind >= QRS__T_COUNT)
    return QRS_E_CONFIG_VALUE;
  if (needs_vocab2(kind) && vocab_size < 2)
    return QRS_E_CONFIG_VALUE;
  if (kind == QRS__T_COHERENCE_GATE) {
    st->inner = calloc(1, sizeof(*st->inner));
    if (!st->inner)
      return -ENOMEM;
    /* As the reference: an unresolvable or self-referential inner
       strategy, or one that fails to build, falls back to fixed. */
    ik = cfg->coherence_inner_strategy[0]
             ? qrs__strategy_kind(cfg->coherence_inner_strategy)
             : QRS__T_FIXED;
    if (ik < 0 || ik == QRS__T_COHERENCE_GATE)
      ik = QRS__T_FIXED;
    r = qrs__strategy_init(st->inner, ik, cfg, vocab_size, row_cap);
    if (r == -ENOMEM) {
      qrs__strategy_done(st);
      return r;
    }
    if (r < 0) {
      qrs__strategy_done(st->inner);
      ik = QRS__T_FIXED;
      r = qrs__strategy_init(st->inner, ik, cfg, vocab_size, row_cap);
      if (r < 0) {
        qrs__strategy_done(st);
        return r;
      }
    }
    st->inner_kind = ik;
  }
  if (kind == QRS__T_RING_BUFFER_AR) {
    st->ring_cap = (size_t)cfg->rba_buffer_n;
    st->ring = malloc(st->ring_cap * sizeof(*st->ring));
    st->marks = malloc(st->ring_cap * sizeof(*st->marks));
    if (!st->ring || !st->marks) {
      qrs__strategy_done(st);
      return -ENOMEM;
    }
  }
  if (kind == QRS__T_RING_BUFFER_AR || kind == QRS__T_MIX_TEMPERATURES) {
    st->trow_cap = row_cap;
    st->trow = malloc(row_cap * sizeof(*st->trow));
    if (!st->trow) {
      qrs__strategy_done(st);
      return -ENOMEM;
    }
  }
  qrs__strategy_reset(st, cfg);
  return 0;
}

void
qrs__strategy_done(struct qrs__strategy *st)
{
  if (!st)
    return;
  if (st->inner) {
    qrs__strategy_done(st->inner);
    free(st->inner);
  }
  free(st->ring);
  free(st->marks);
  free(st->trow);
  free(st->emb_norm);
  free(st->centroid);
  memset(st, 0, sizeof(*st));
}

void
qrs__strategy_reset(struct qrs__strategy *st, const struct qrs__cfgvals *cfg)
{
  st->first = 1;
  st->h_ema = st->vh_ema = 0.0;
  st->b_ema = 0.0;
  st->have_meta = 0;
  st->ring_len = st->ring_head = 0;
  st->thr_p = cfg->throttle_p_init;
  st->mu = 2.0 * cfg->mirostat_tau;
  if (st->inner)
    qrs__strategy_reset(st->inner, cfg);
}

/* The state a token changes, as saved: the scalars, then the ring's
   ring_cap ids, then the inner strategy's state. */
struct strategy_saved {
  int first;
  int have_meta;
  double h_ema, vh_ema, b_ema, thr_p, mu;
  struct qrs_draw_meta meta;
  size_t ring_len, ring_head;
};

size_t
qrs__strategy_state_size(const struct qrs__strategy *st)
{
  return sizeof(struct strategy_saved) + st->ring_cap * sizeof(*st->ring) +
         (st->inner ? qrs__strategy_state_size(st->inner) : 0);
}

/* The scalars between a strategy and its saved form (save: st to sv). */
static void
saved_scalars(struct qrs__strategy *st, struct strategy_saved *sv, int save)
{
#define X(f) (save ? (void)(sv->f = st->f) : (void)(st->f = sv->f))
  X(first);
  X(have_meta);
  X(h_ema);
  X(vh_ema);
  X(b_ema);
  X(thr_p);
  X(mu);
  X(meta);
  X(ring_len);
  X(ring_head);
#undef X
}

void
qrs__strategy_save(const struct qrs__strategy *st, unsigned char *buf)
{
  struct strategy_saved sv;

  memset(&sv, 0, sizeof(sv));
  saved_scalars((struct qrs__strategy *)st, &sv, 1);
  memcpy(buf, &sv, sizeof(sv));
  buf += sizeof(sv);
  if (st->ring_cap) {
    memcpy(buf, st->ring, st->ring_cap * sizeof(*st->ring));
    buf += st->ring_cap * sizeof(*st->ring);
  }
  if (st->inner)
    qrs__strategy_save(st->inner, buf);
}

int
qrs__strategy_restore(struct qrs__strategy *st, const unsigned char *buf)
{
  struct strategy_saved sv;
  const unsigned char *inner;

  memcpy(&sv, buf, sizeof(sv));
  /* checked before anything changes: the ring's indices stay in it */
  if ((sv.first != 0 && sv.first != 1) ||
      (sv.have_meta != 0 && sv.have_meta != 1) ||
      sv.ring_len > st->ring_cap ||
      (st->ring_cap ? sv.ring_head >= st->ring_cap : sv.ring_head != 0))
    return -EINVAL;
  inner = buf + sizeof(sv) + st->ring_cap * sizeof(*st->ring);
  if (st->inner && qrs__strategy_restore(st->inner, inner) < 0)
    return -EINVAL;
  saved_scalars(st, &sv, 0);
  if (st->ring_cap)
    memcpy(st->ring, buf + sizeof(sv), st->ring_cap * sizeof(*st->ring));
  return 0;
}

/* Element (i, j) of the embedding table. */
static double
emb_at(const struct qrs__strategy *st, size_t i, size_t j)
{
  struct qrs__view v;

  v.data = st->emb;
  v.dtype = st->emb_dtype;
  v.n = st->emb_rows * st->emb_dim;
  return qrs__kload(&v, i * st->emb_dim + j);
}

int
qrs__strategy_attach_embeddings(struct qrs__strategy *st, const void *table,
                                enum qrs_dtype dtype, size_t rows,
                                size_t dim)
{
  double *norm, *cen, s, e;
  size_t i, j;

  if (st->inner)
    st = st->inner;
  if (!table || dim == 0 || rows != st->vocab_size ||
      (dtype != QRS_DTYPE_F32 && dtype != QRS_DTYPE_F16 &&
       dtype != QRS_DTYPE_BF16 && dtype != QRS_DTYPE_F64))
    return -EINVAL;
  norm = malloc(rows * sizeof(*norm));
  cen = malloc(dim * sizeof(*cen));
  if (!norm || !cen) {
    free(norm);
    free(cen);
    return -ENOMEM;
  }
  st->emb = table;
  st->emb_dtype = dtype;
  st->emb_rows = rows;
  st->emb_dim = dim;
  for (i = 0; i < rows; i++) {
    s = 0.0;
    for (j = 0; j < dim; j++) {
      e = emb_at(st, i, j);
      s += e * e;
    }
    s = sqrt(s);
    norm[i] = s > 1e-12 ? s : 1e-12;
  }
  free(st->emb_norm);
  free(st->centroid);
  st->emb_norm = norm;
  st->centroid = cen;
  return 0;
}

/* Copy the row into trow as doubles. */
static void
row_to_trow(struct qrs__strategy *st, const struct qrs__row *r)
{
  size_t i;

  for (i = 0; i < r->v.n; i++)
    st->trow[i] = qrs__kload(&r->v, i);
}

static int
ring_buffer(struct qrs__strategy *st, const struct qrs__cfgvals *cfg,
            struct qrs__row *r, struct qrs__tresult *res)
{
  double p0, p1, pen, dot, cn, sim;
  size_t nb, i, j, k, start, nmark, n;
  uint32_t id;

  res->T = clip(cfg->rba_t, T_LO, T_HI);
  res->min_p = clip(cfg->rba_min_p, MP_LO, MP_HI);
  nb = st->ring_len;
  if ((size_t)cfg->rba_buffer_n < nb)
    nb = (size_t)cfg->rba_buffer_n;
  res->n_buffered = (long long)nb;
  res->n_penalized = 0;
  res->embeddings_attached = st->emb != NULL;
  if (!(cfg->rba_lam > 0.0) || nb == 0)
    return 0;
  n = r->v.n;
  /* The nb most recent ids, oldest first. */
  start = (st->ring_head + st->ring_cap - nb) % st->ring_cap;
  if (st->emb) {
    for (j = 0; j < st->emb_dim; j++)
      st->centroid[j] = 0.0;
    for (k = 0; k < nb; k++) {
      id = st->ring[(start + k) % st->ring_cap];
      if (id >= st->emb_rows)
        continue;
      for (j = 0; j < st->emb_dim; j++)
        st->centroid[j] += emb_at(st, id, j);
    }
    cn = 0.0;
    for (j = 0; j < st->emb_dim; j++) {
      st->centroid[j] /= (double)nb;
      cn += st->centroid[j] * st->centroid[j];
    }
    cn = sqrt(cn);
    cn = cn > 1e-12 ? cn : 1e-12;
    row_to_trow(st, r);
    for (i = 0; i < n && i < st->emb_rows; i++) {
      dot = 0.0;
      for (j = 0; j < st->emb_dim; j++)
        dot += emb_at(st, i, j) * st->centroid[j];
      sim = dot / (st->emb_norm[i] * cn);
      pen = cfg->rba_lam * fmax(0.0, sim - cfg->rba_threshold);
      if (pen != 0.0) {
        st->trow[i] -= pen;
        res->n_penalized++;
      }
    }
  } else {
    /* Exact-id similarity: 1 for buffered ids, 0 elsewhere. */
    p1 = cfg->rba_lam * fmax(0.0, 1.0 - cfg->rba_threshold);
    p0 = cfg->rba_lam * fmax(0.0, 0.0 - cfg->rba_threshold);
    nmark = 0;
    for (k = 0; k < nb; k++) {
      id = st->ring[(start + k) % st->ring_cap];
      for (j = 0; j < nmark && st->marks[j] != id; j++)
        ;
      if (j == nmark && id < n)
        st->marks[nmark++] = id;
    }
    if (p0 != 0.0) {
      res->n_penalized = (long long)n;
      if (p1 == 0.0)
        res->n_penalized -= (long long)nmark;
    } else if (p1 != 0.0) {
      res->n_penalized = (long long)nmark;
    }
    if (res->n_penalized == 0)
      return 0;
    row_to_trow(st, r);
    if (p0 != 0.0)
      for (i = 0; i < n; i++)
        st->trow[i] -= p0;
    for (j = 0; j < nmark; j++)
      st->trow[st->marks[j]] = qrs__kload(&r->v, st->marks[j]) - p1;
  }
  if (res->n_penalized > 0)
    res->transformed = 1;
  return 0;
}

static int
mix_temperatures(struct qrs__strategy *st, const struct qrs__cfgvals *cfg,
                 struct qrs__row *r, struct qrs__tresult *res)
{
  struct qrs__mass mc, mh;
  struct qrs__bound all = { -INFINITY, 0 };
  double h, vh, g, a, m, ic, ih, x, pc, ph;
  size_t i;

  qrs__row_hvh(r, &h, &vh);
  g = cfg->mix_gate_a * (h - cfg->mix_gate_b) +
      cfg->mix_gate_c * (vh - cfg->mix_gate_d);
  a = 1.0 / (1.0 + exp(-clip(g, -700.0, 700.0)));
  m = r->scan.max;
  ic = 1.0 / cfg->mix_t_cool;
  ih = 1.0 / cfg->mix_t_hot;
  qrs__kmass(&r->v, m, ic, &all, 1.0, -INFINITY, 0, &mc);
  qrs__kmass(&r->v, m, ih, &all, 1.0, -INFINITY, 0, &mh);
  for (i = 0; i < r->v.n; i++) {
    x = qrs__kload(&r->v, i);
    pc = exp((x - m) * ic) / mc.z;
    ph = exp((x - m) * ih) / mh.z;
    st->trow[i] = log(a * ph + (1.0 - a) * pc);
  }
  res->T = 1.0;
  res->H = h;
  res->varentropy = vh;
  res->min_p = clip(cfg->mix_min_p, MP_LO, MP_HI);
  res->alpha = a;
  res->t_mix = a * cfg->mix_t_hot + (1.0 - a) * cfg->mix_t_cool;
  res->transformed = 1;
  return 0;
}

static int
tt_exchange(const struct qrs__cfgvals *cfg, struct qrs__row *r,
            struct qrs__tresult *res)
{
  struct qrs__mass mk, mall;
  struct qrs__bound all = { -INFINITY, 0 };
  double h, raw_mp, mp, hk, raw_t;

  h = qrs__row_h(r);
  raw_mp = cfg->tt_min_p_base + cfg->tt_min_p_scale * h;
  mp = clip(raw_mp, MP_LO, MP_HI);
  if (mp > 0.0) {
    /* The kept set e >= min_p (e = exp(x - max)): a measurement only. */
    qrs__kmass(&r->v, r->scan.max, 1.0, &all, 1.0, log(mp), QRS__M_W, &mk);
    hk = log(mk.z) - mk.w / mk.z;
    res->h_kept = hk > 0.0 ? hk : 0.0;
    res->n_kept = (long long)mk.n_in;
  } else {
    qrs__kmass(&r->v, r->scan.max, 1.0, &all, 1.0, -INFINITY, 0, &mall);
    res->h_kept = h;
    res->n_kept = (long long)mall.nz;
  }
  res->entropy_removed = fmax(0.0, h - res->h_kept);
  raw_t = cfg->tt_t_base + cfg->tt_gamma * res->entropy_removed;
  res->T = clip(raw_t, T_LO, T_HI);
  res->H = h;
  res->min_p = mp;
  res->pre_clamp_temp = raw_t;
  res->pre_clamp_min_p = raw_mp;
  return 0;
}

/* The result of a strategy of the normalised H hn alone: T (clamped by
   the strategy) and its raw value. */
static void
hn_result(struct qrs__tresult *res, double T, double h, double hn,
          double raw)
{
  res->T = T;
  res->H = h;
  res->h_norm = hn;
  res->pre_clamp_temp = raw;
}

/* The result of a strategy of H and varentropy vh: T and min-p clamped
   from their raw values, which are kept too. */
static void
hvh_result(struct qrs__tresult *res, double h, double vh, double raw,
           double raw_mp)
{
  res->T = clip(raw, T_LO, T_HI);
  res->min_p = clip(raw_mp, MP_LO, MP_HI);
  res->H = h;
  res->varentropy = vh;
  res->pre_clamp_temp = raw;
  res->pre_clamp_min_p = raw_mp;
}

/* The same for a bell curve's strategy, with its normalised H and
   varentropy and the curve's value. */
static void
bell_result(struct qrs__tresult *res, double h, double vh, double hn,
            double vn, double bell, double raw, double raw_mp)
{
  hvh_result(res, h, vh, raw, raw_mp);
  res->h_norm = hn;
  res->vh_norm = vn;
  res->bell = bell;
}

/* The strategy proper, for a given config (coherence_gate passes a copy
   with a raised base temperature). */
static int
compute(struct qrs__strategy *st, const struct qrs__cfgvals *cfg,
        struct qrs__row *r, int need_h, struct qrs__tresult *res)
{
  double h, vh, hn, raw, raw_mp, dh, dvh, lam, vn, bell, excess, tf;
  double lnv;

  lnv = st->vocab_size >= 2 ? log((double)st->vocab_size) : NAN;
  switch (st->kind) {
  case QRS__T_FIXED:
  case QRS__T_ENTROPY_THROTTLE:
  case QRS__T_MIROSTAT_V2:
    res->T = cfg->fixed_temperature;
    res->H = need_h ? qrs__row_h(r) : NAN;
    if (st->kind == QRS__T_ENTROPY_THROTTLE) {
      if (!strcmp(cfg->throttle_mode, "controller")) {
        res->top_p = st->thr_p;
        res->want_kept_entropy = 1;
      } else {
        res->nucleus = QRS__NUCLEUS_THROTTLE;
        res->thr_target = cfg->throttle_target_bits * M_LN2;
      }
    } else if (st->kind == QRS__T_MIROSTAT_V2) {
      res->nucleus = QRS__NUCLEUS_MIROSTAT;
      res->mu = st->mu;
    }
    return 0;
  case QRS__T_EDT:
    h = qrs__row_h(r);
    hn = h / lnv;
    if (hn == 0.0 && cfg->edt_exponent < 0.0)
      return -EDOM;   /* the reference raises: 0.0 ** negative */
    raw = cfg->edt_base_temp * pow(hn, cfg->edt_exponent);
    hn_result(res, fmax(cfg->edt_min_temp, fmin(cfg->edt_max_temp, raw)), h,
              hn, raw);
    return 0;
  case QRS__T_HVH_DRIFT:
    qrs__row_hvh(r, &h, &vh);
    if (st->first) {
      st->h_ema = h;
      st->vh_ema = vh;
      dh = dvh = 0.0;
      st->first = 0;
    } else {
      lam = cfg->hvh_lambda_ema;
      dh = h - st->h_ema;
      dvh = vh - st->vh_ema;
      st->h_ema = (1.0 - lam) * st->h_ema + lam * h;
      st->vh_ema = (1.0 - lam) * st->vh_ema + lam * vh;
    }
    raw = cfg->hvh_t_base + cfg->hvh_alpha_h * h + cfg->hvh_alpha_vh * vh +
          cfg->hvh_gamma_dh * dh + cfg->hvh_delta_dvh * dvh;
    raw_mp = cfg->hvh_min_p_base + cfg->hvh_kappa_h * h + cfg->hvh_nu_dh * dh;
    hvh_result(res, h, vh, raw, raw_mp);
    res->h_ema = st->h_ema;
    res->vh_ema = st->vh_ema;
    res->d_h = dh;
    res->d_vh = dvh;
    return 0;
  case QRS__T_TT_EXCHANGE:
    return tt_exchange(cfg, r, res);
  case QRS__T_EVDT_TT:
    qrs__row_hvh(r, &h, &vh);
    raw_mp = cfg->evdt_min_p_base + cfg->evdt_min_p_scale * h +
             cfg->evdt_min_p_vh * vh;
    raw = cfg->evdt_t_base + cfg->evdt_alpha * h + cfg->evdt_beta * vh;
    hvh_result(res, h, vh, raw, raw_mp);
    return 0;
  case QRS__T_GDT:
    qrs__row_hvh(r, &h, &vh);
    hn = clip(h / lnv, 0.0, 1.0);
    vn = 1.0 - exp(-vh / cfg->gdt_lambda_vh);
    bell = bell_curve(cfg->gdt_t_peak, hn, cfg->gdt_mu, cfg->gdt_sigma);
    res->vh_boost = cfg->gdt_alpha * vn * (1.0 - hn);
    raw = cfg->gdt_t_base + bell + res->vh_boost;
    excess = fmax(0.0, raw - cfg->gdt_t_base);
    raw_mp = cfg->gdt_t_peak > 0.0
                 ? cfg->gdt_min_p_base +
                       cfg->gdt_min_p_scale * excess / cfg->gdt_t_peak
                 : cfg->gdt_min_p_base;
    bell_result(res, h, vh, hn, vn, bell, raw, raw_mp);
    return 0;
  case QRS__T_DYNATEMP:
    h = qrs__row_h(r);
    hn = clip(h / lnv, 0.0, 1.0);
    raw = cfg->dynatemp_t_center - cfg->dynatemp_t_range +
          2.0 * cfg->dynatemp_t_range * pow(hn, cfg->dynatemp_exponent);
    hn_result(res, clip(raw, T_LO, T_HI), h, hn, raw);
    res->min_p = clip(cfg->dynatemp_min_p, MP_LO, MP_HI);
    return 0;
  case QRS__T_BELLTEMP:
    qrs__row_hvh(r, &h, &vh);
    hn = clip(h / lnv, 0.0, 1.0);
    vn = 1.0 - exp(-vh / cfg->belltemp_lambda_vh);
    bell = bell_curve(cfg->belltemp_t_peak, hn, cfg->belltemp_mu,
                      cfg->belltemp_sigma);
    raw = cfg->belltemp_t_base + bell + cfg->belltemp_vh_weight * vn;
    tf = clip((clip(raw, T_LO, T_HI) - T_LO) / (T_HI - T_LO), 0.0, 1.0);
    raw_mp = cfg->belltemp_min_p_base + cfg->belltemp_min_p_scale * tf;
    bell_result(res, h, vh, hn, vn, bell, raw, raw_mp);
    return 0;
  case QRS__T_MIX_TEMPERATURES:
    return mix_temperatures(st, cfg, r, res);
  case QRS__T_RING_BUFFER_AR:
    qrs__row_hvh(r, &h, &vh);
    res->H = h;
    res->varentropy = vh;
    return ring_buffer(st, cfg, r, res);
  default:
    return -EINVAL;
  }
}

static int
coherence_gate(struct qrs__strategy *st, const struct qrs__cfgvals *cfg,
               struct qrs__row *r, int need_h, struct qrs__tresult *res)
{
  struct qrs__cfgvals boosted;
  double b, boost, a;
  int valid, ret;

  valid = 0;
  res->coherence_z = NAN;
  if (!st->have_meta) {
    st->b_ema = 0.0;   /* first token, or a degraded draw: hard reset */
  } else {
    valid = st->meta.coherence_valid != 0;
    res->coherence_z = st->meta.coherence_z;
    b = 0.0;
    if (valid && st->meta.coherence_z >= cfg->coherence_threshold)
      b = cfg->coherence_t_boost_max * fmax(0.0, st->meta.coherence_r);
    a = cfg->coherence_ema_alpha;
    st->b_ema = a * b + (1.0 - a) * st->b_ema;
    if (!(st->b_ema >= EMA_FLOOR))
      st->b_ema = 0.0;   /* also a NaN from a broken meta: fail safe */
  }
  res->coherence_valid = valid;
  boost = st->b_ema;
  ret = -1;
  if (boost > 0.0) {
    boosted = *cfg;
    switch (st->inner_kind) {
    case QRS__T_FIXED:
      boosted.fixed_temperature += boost;
      break;
    case QRS__T_EDT:
      boosted.edt_base_temp += boost;
      break;
    case QRS__T_HVH_DRIFT:
      boosted.hvh_t_base += boost;
      break;
    default:
      break;
    }
    ret = compute(st->inner, &boosted, r, need_h, res);
    if (ret == 0 && st->inner_kind != QRS__T_FIXED &&
        st->inner_kind != QRS__T_EDT && st->inner_kind != QRS__T_HVH_DRIFT)
      res->T += boost;   /* no base field: added after, past its clamps */
    if (ret != 0) {
      /* Fail-safe: the unboosted inner result. */
      boost = st->b_ema = 0.0;
    }
  }
  if (ret != 0) {
    ret = compute(st->inner, cfg, r, need_h, res);
    if (ret != 0)
      return ret;
  }
  res->inner = qrs__strategy_name(st->inner_kind);
  res->gate_open = boost > 0.0;
  res->gate_boost = boost;
  return 0;
}

int
qrs__strategy_compute(struct qrs__strategy *st,
                      const struct qrs__cfgvals *cfg, struct qrs__row *r,
                      int need_h, struct qrs__tresult *res)
{
  int ret;

  result_init(res);
  if (qrs__row_check(&r->scan, r->v.n) < 0)
    return QRS_E_LOGITS;
  if (st->kind == QRS__T_COHERENCE_GATE)
    ret = coherence_gate(st, cfg, r, need_h, res);
  else
    ret = compute(st, cfg, r, need_h, res);
  if (ret == 0 && need_h && isnan(res->H))
    res->H = qrs__row_h(r);
  return ret;
}

void
qrs__strategy_observe_meta(struct qrs__strategy *st,
                           const struct qrs_draw_meta *meta)
{
  if (meta) {
    st->meta = *meta;
    st->have_meta = 1;
  } else {
    st->have_meta = 0;
  }
}

void
qrs__strategy_observe_token(struct qrs__strategy *st,
                            const struct qrs__cfgvals *cfg, uint32_t token,
                            double prob, double kept_entropy)
{
  double hb, dev, s;

  if (st->inner) {
    qrs__strategy_observe_token(st->inner, cfg, token, prob, kept_entropy);
    return;
  }
  switch (st->kind) {
  case QRS__T_RING_BUFFER_AR:
    st->ring[st->ring_head] = token;
    st->ring_head = (st->ring_head + 1) % st->ring_cap;
    if (st->ring_len < st->ring_cap)
      st->ring_len++;
    break;
  case QRS__T_MIROSTAT_V2:
    if (prob > 0.0) {
      s = -log2(prob);
      st->mu -= cfg->mirostat_eta * (s - cfg->mirostat_tau);
    }
    break;
  case QRS__T_ENTROPY_THROTTLE:
    if (!strcmp(cfg->throttle_mode, "controller") && !isnan(kept_entropy)) {
      hb = kept_entropy / M_LN2;
      dev = hb - cfg->throttle_target_bits;
      if (fabs(dev) > cfg->throttle_tolerance_bits)
        st->thr_p = clip(st->thr_p - cfg->throttle_gain * dev,
                         cfg->throttle_p_min, cfg->throttle_p_max);
    }
    break;
  default:
    break;
  }
}
