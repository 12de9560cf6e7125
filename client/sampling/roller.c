/* The roller: discrete decisions from draws (qrs/roller.h; qr-sampler's
   QthoughtRoller in its qthought.py).  The mappings from u reproduce the
   reference exactly: fsum is Python's correctly rounded math.fsum, and the
   running sums are sequential like the reference's. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <qrs/roller.h>

#include "amplify.h"
#include "sampling.h"

struct qrs_roller {
  struct qrs_client *client;
  qrs_roller_draw_fn draw;
  void *ctx;
  struct qrs__cfgvals cfg;
  const char *source;           /* into cfg, or NULL */
  const char *amplifier;
  uint32_t sample_count;
  struct qrs_amp_params amp;
  int thought_amp;              /* the amplifier is zscore_thought */
  int thought_open;
  struct amp_thought acc;
  struct amp_params acc_params; /* mean/std of the thought's last draw */
  struct qrs_provenance *buf;   /* ring, grown up to QRS_ROLLER_BUFFER */
  size_t cap, head, n;
  uint64_t dropped;
};

const char *
qrs_decision_kind_name(enum qrs_decision_kind k)
{
  static const char *const names[] = {
    [QRS_DECISION_CHOOSE] = "choose",
    [QRS_DECISION_CHOOSE_WEIGHTED] = "choose_weighted",
    [QRS_DECISION_COIN] = "coin",
    [QRS_DECISION_BIND_INT] = "bind_int",
    [QRS_DECISION_DRAW_U] = "draw_u",
    [QRS_DECISION_DRAW_INDEX] = "draw_index",
  };

  if ((unsigned)k >= sizeof(names) / sizeof(names[0]))
    return "unknown";
  return names[k];
}

/* Python's math.fsum (Shewchuk's partials, then a correctly rounded
   total).  The inputs are finite, so 64 partials are always enough. */
static double
fsum(const double *v, size_t count, size_t stride)
{
  double p[64], x, y, hi, lo, yr;
  size_t i, j, k, n;

  n = 0;
  for (k = 0; k < count; k++) {
    x = *(const double *)((const char *)v + k * stride);
    i = 0;
    for (j = 0; j < n; j++) {
      y = p[j];
      if (fabs(x) < fabs(y)) {
        hi = x;
        x = y;
        y = hi;
      }
      hi = x + y;
      lo = y - (hi - x);
      if (lo != 0.0)
        p[i++] = lo;
      x = hi;
    }
    n = i;
    if (n < 64)
      p[n++] = x;
  }
  if (n == 0)
    return 0.0;
  hi = p[--n];
  lo = 0.0;
  while (n > 0) {
    x = hi;
    y = p[--n];
    hi = x + y;
    yr = hi - x;
    lo = y - yr;
    if (lo != 0.0)
      break;
  }
  if (n > 0 && ((lo < 0.0 && p[n - 1] < 0.0) || (lo > 0.0 && p[n - 1] > 0.0))) {
    y = lo * 2.0;
    x = hi + y;
    yr = x - hi;
    if (y == yr)
      hi = x;
  }
  return hi;
}

int
qrs_map_choose(double u, uint32_t k, int64_t *ret)
{
  int64_t v;

  if (k < 1)
    return -EINVAL;
  v = (int64_t)(u * (double)k);             /* truncation toward zero */
  *ret = v < (int64_t)k - 1 ? v : (int64_t)k - 1;
  return 0;
}

static int
check_weights(const double *w, size_t n, double *ret_total)
{
  size_t i;

  if (!w || n == 0)
    return -EINVAL;
  for (i = 0; i < n; i++)
    if (!isfinite(w[i]) || w[i] < 0.0)
      return -EINVAL;
  *ret_total = fsum(w, n, sizeof(*w));
  return *ret_total > 0.0 ? 0 : -EINVAL;
}

static int64_t
map_weighted(double u, const double *w, size_t n, double total)
{
  double t, c;
  size_t i;

  t = u * total;
  c = 0.0;
  for (i = 0; i < n; i++) {
    c += w[i];
    if (t < c)
      return (int64_t)i;
  }
  return (int64_t)n - 1;      /* rounding left t past the last sum: the
                                 last option, as the reference's is */
}

int
qrs_map_choose_weighted(double u, const double *w, size_t n, int64_t *ret)
{
  double total;
  int r;

  r = check_weights(w, n, &total);
  if (r < 0)
    return r;
  *ret = map_weighted(u, w, n, total);
  return 0;
}

int
qrs_map_coin(double u, double p, int64_t *ret)
{
  if (!(p >= 0.0 && p <= 1.0))
    return -EINVAL;
  *ret = u < p;
  return 0;
}

static int
check_ranges(const struct qrs_int_range *r, size_t n, double *ret_total)
{
  size_t i;

  if (!r || n == 0)
    return -EINVAL;
  for (i = 0; i < n; i++)
    if (r[i].high < r[i].low || !(r[i].weight > 0.0) ||
        !isfinite(r[i].weight) ||
        (uint64_t)r[i].high - (uint64_t)r[i].low >= UINT64_MAX / 2)
      return -EINVAL;
  *ret_total = fsum(&r[0].weight, n, sizeof(*r));
  return 0;
}

static int64_t
map_ranges(double u, const struct qrs_int_range *r, size_t n, double total)
{
  double t, c, lo, x;
  int64_t span, v;
  size_t i;

  t = u * total;
  c = 0.0;
  for (i = 0; i < n; i++) {
    if (t < c + r[i].weight)
      break;
    c += r[i].weight;
  }
  if (i < n) {
    lo = c;
  } else {
    i = n - 1;
    lo = total - r[i].weight;
  }
  span = r[i].high - r[i].low + 1;
  x = (t - lo) / r[i].weight * (double)span;
  v = (int64_t)x;
  return r[i].low + (v < span - 1 ? v : span - 1);
}

int
qrs_map_bind_int(double u, const struct qrs_int_range *ranges, size_t n,
                 int64_t *ret)
{
  double total;
  int r;

  r = check_ranges(ranges, n, &total);
  if (r < 0)
    return r;
  *ret = map_ranges(u, ranges, n, total);
  return 0;
}

static void
set_range(struct qrs_int_range *r, int64_t low, int64_t high, double w)
{
  r->low = low;
  r->high = high;
  r->weight = w;
}

int
qrs_range_time(struct qrs_int_range *r)
{
  set_range(&r[0], 0, 5, 0.5);
  set_range(&r[1], 6, 11, 1.5);
  set_range(&r[2], 12, 17, 1.5);
  set_range(&r[3], 18, 23, 1.0);
  return 4;
}

int
qrs_range_age(struct qrs_int_range *r)
{
  set_range(&r[0], 0, 17, 1.0);
  set_range(&r[1], 18, 64, 3.0);
  set_range(&r[2], 65, 99, 1.0);
  return 3;
}

int
qrs_range_year(struct qrs_int_range *r, int64_t low, int64_t high)
{
  int64_t mid;

  if (high <= low || low < -(INT64_C(1) << 60) || high > INT64_C(1) << 60)
    return -EINVAL;
  /* floor((low + high) / 2), also for negative sums */
  mid = low + high;
  mid = mid >= 0 ? mid / 2 : -((-mid + 1) / 2);
  set_range(&r[0], low, mid, 1.0);
  set_range(&r[1], mid + 1, high, 2.0);
  return 2;
}

static int
client_draw(void *ctx, const struct qrs_draw_request *req,
            struct qrs_draw *ret)
{
  return qrs_client_draw(ctx, req, ret);
}

static int
roller_new(qrs_roller_draw_fn draw, void *ctx, struct qrs_client *client,
           const struct qrs_sampler_config *cfg, struct qrs_roller **ret)
{
  struct qrs_sampler_config *own;
  struct qrs_roller *r;
  char err[256];
  int rc;

  own = NULL;
  if (!cfg) {
    rc = qrs_sampler_config_new(&own);
    if (rc < 0)
      return rc;
    rc = qrs_sampler_config_set_preset(own, "qthought");
    if (rc < 0) {
      qrs_sampler_config_free(own);
      return rc;
    }
    cfg = own;
  }
  r = calloc(1, sizeof(*r));
  if (!r) {
    qrs_sampler_config_free(own);
    return -ENOMEM;
  }
  qrs__config_resolve(cfg, &r->cfg);
  rc = qrs__config_check(&r->cfg, err, sizeof(err));
  if (rc < 0) {
    qrs_sampler_config_free(own);
    free(r);
    return rc;
  }
  qrs__draw_setup(cfg, &r->cfg, &r->source, &r->amplifier, &r->sample_count,
                  &r->amp);
  qrs_sampler_config_free(own);
  r->client = client;
  r->draw = draw;
  r->ctx = ctx;
  r->thought_amp = !strcmp(r->cfg.signal_amplifier_type, "zscore_thought");
  r->acc_params.population_mean = r->cfg.population_mean;
  r->acc_params.population_std = r->cfg.population_std;
  r->acc_params.epsilon = r->cfg.uniform_clamp_epsilon;
  *ret = r;
  return 0;
}

int
qrs_roller_new(struct qrs_client *c, const struct qrs_sampler_config *cfg,
               struct qrs_roller **ret)
{
  if (!c || !ret)
    return -EINVAL;
  return roller_new(client_draw, c, c, cfg, ret);
}

int
qrs_roller_new_custom(qrs_roller_draw_fn draw, void *ctx,
                      const struct qrs_sampler_config *cfg,
                      struct qrs_roller **ret)
{
  if (!draw || !ret)
    return -EINVAL;
  return roller_new(draw, ctx, NULL, cfg, ret);
}

void
qrs_roller_free(struct qrs_roller *r)
{
  if (!r)
    return;
  free(r->buf);
  free(r);
}

static int64_t
now_ns(clockid_t id)
{
  struct timespec ts;

  clock_gettime(id, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void
copy_name(char *dst, const char *src)
{
  size_t n;

  n = strnlen(src, QRS_NAME_MAX - 1);
  memcpy(dst, src, n);
  dst[n] = '\0';
}

/* One draw into a provenance record (the reference's ChoiceProvenance). */
static int
roll(struct qrs_roller *r, enum qrs_decision_kind kind,
     struct qrs_provenance *p)
{
  struct qrs_draw_request req;
  struct qrs_draw d;
  int64_t t0;
  int rc;

  memset(&req, 0, sizeof(req));
  req.source = r->source;
  req.amplifier = r->amplifier;
  req.sample_count = r->sample_count;
  req.amp = r->amp.set ? &r->amp : NULL;
  t0 = now_ns(CLOCK_MONOTONIC);
  rc = r->draw(r->ctx, &req, &d);
  if (rc < 0)
    return rc;
  memset(p, 0, sizeof(*p));
  p->kind = kind;
  p->u = d.u;
  p->z_score = d.z;
  p->bias = d.sample_mean - r->cfg.population_mean;
  copy_name(p->source, d.served_by[0] ? d.served_by : d.source);
  copy_name(p->amplifier, d.amplifier);
  p->is_fallback = d.fallback;
  p->generation_timestamp_ns = now_ns(CLOCK_REALTIME);
  p->latency_ms = (double)(now_ns(CLOCK_MONOTONIC) - t0) / 1e6;
  p->sample_count = d.sample_count;
  p->byte_sum = d.byte_sum;
  p->nonce = d.nonce;
  if (r->thought_amp) {
    amp_thought_add(&r->acc, d.byte_sum, d.sample_count);
    if (d.population_std > 0.0) {
      r->acc_params.population_mean = d.population_mean;
      r->acc_params.population_std = d.population_std;
    }
  }
  return 0;
}

static int
buffer(struct qrs_roller *r, const struct qrs_provenance *p)
{
  struct qrs_provenance *nb;
  size_t ncap, i;

  if (r->n == r->cap && r->cap < QRS_ROLLER_BUFFER) {
    ncap = r->cap ? 2 * r->cap : 16;
    if (ncap > QRS_ROLLER_BUFFER)
      ncap = QRS_ROLLER_BUFFER;
    nb = malloc(ncap * sizeof(*nb));
    if (!nb)
      return -ENOMEM;
    for (i = 0; i < r->n; i++)
      nb[i] = r->buf[(r->head + i) % r->cap];
    free(r->buf);
    r->buf = nb;
    r->cap = ncap;
    r->head = 0;
  }
  if (r->n == r->cap) {                  /* full: drop the oldest */
    r->head = (r->head + 1) % r->cap;
    r->n--;
    r->dropped++;
  }
  r->buf[(r->head + r->n) % r->cap] = *p;
  r->n++;
  return 0;
}

/* Hand decision p back in *ret (ret may be NULL), kept first in the
   buffer that qrs_roller_drain() empties when keep is set (the draws
   are not kept).  *ret is set even when keeping it fails (-ENOMEM):
   the decision was made. */
static int
hand_back(struct qrs_roller *r, const struct qrs_provenance *p, int keep,
          struct qrs_provenance *ret)
{
  int rc;

  rc = keep ? buffer(r, p) : 0;
  if (ret)
    *ret = *p;
  return rc;
}

/* One of k: a choice (kept) or a draw of an index (not kept). */
static int
choose(struct qrs_roller *r, uint32_t k, enum qrs_decision_kind kind,
       struct qrs_provenance *ret)
{
  struct qrs_provenance p;
  int rc;

  if (k < 1)
    return -EINVAL;
  rc = roll(r, kind, &p);
  if (rc < 0)
    return rc;
  qrs_map_choose(p.u, k, &p.value);
  return hand_back(r, &p, kind == QRS_DECISION_CHOOSE, ret);
}

int
qrs_roller_choose(struct qrs_roller *r, uint32_t k, struct qrs_provenance *ret)
{
  return choose(r, k, QRS_DECISION_CHOOSE, ret);
}

int
qrs_roller_choose_weighted(struct qrs_roller *r, const double *w, size_t n,
                           struct qrs_provenance *ret)
{
  struct qrs_provenance p;
  double total;
  int rc;

  rc = check_weights(w, n, &total);
  if (rc < 0)
    return rc;
  rc = roll(r, QRS_DECISION_CHOOSE_WEIGHTED, &p);
  if (rc < 0)
    return rc;
  p.value = map_weighted(p.u, w, n, total);
  return hand_back(r, &p, 1, ret);
}

int
qrs_roller_coin(struct qrs_roller *r, double prob, struct qrs_provenance *ret)
{
  struct qrs_provenance p;
  int rc;

  if (!(prob >= 0.0 && prob <= 1.0))
    return -EINVAL;
  rc = roll(r, QRS_DECISION_COIN, &p);
  if (rc < 0)
    return rc;
  p.value = p.u < prob;
  return hand_back(r, &p, 1, ret);
}

int
qrs_roller_bind_int(struct qrs_roller *r, const struct qrs_int_range *ranges,
                    size_t n, struct qrs_provenance *ret)
{
  struct qrs_provenance p;
  double total;
  int rc;

  rc = check_ranges(ranges, n, &total);
  if (rc < 0)
    return rc;
  rc = roll(r, QRS_DECISION_BIND_INT, &p);
  if (rc < 0)
    return rc;
  p.value = map_ranges(p.u, ranges, n, total);
  return hand_back(r, &p, 1, ret);
}

int
qrs_roller_draw_u(struct qrs_roller *r, struct qrs_provenance *ret)
{
  struct qrs_provenance p;
  int rc;

  rc = roll(r, QRS_DECISION_DRAW_U, &p);
  if (rc < 0)
    return rc;
  return hand_back(r, &p, 0, ret);
}

int
qrs_roller_draw_index(struct qrs_roller *r, uint32_t k,
                      struct qrs_provenance *ret)
{
  return choose(r, k, QRS_DECISION_DRAW_INDEX, ret);
}

void
qrs_roller_begin_thought(struct qrs_roller *r)
{
  amp_thought_begin(&r->acc);
  r->acc_params.population_mean = r->cfg.population_mean;
  r->acc_params.population_std = r->cfg.population_std;
  r->thought_open = 1;
}

int
qrs_roller_drain(struct qrs_roller *r, struct qrs_provenance *out,
                 size_t cap)
{
  struct amp_aggregate a;
  size_t i, k;

  if (!out && cap)
    return -EINVAL;
  k = r->n < cap ? r->n : cap;
  if (k > INT32_MAX)
    k = INT32_MAX;
  if (r->thought_open && r->thought_amp)
    amp_thought_aggregate(&r->acc, &r->acc_params, &a);
  for (i = 0; i < k; i++) {
    out[i] = r->buf[(r->head + i) % r->cap];
    if (r->thought_open && r->thought_amp) {
      out[i].has_thought = 1;
      out[i].thought.sample_mean = a.sample_mean;
      out[i].thought.z_score = a.z;
      out[i].thought.sem = a.sem;
      out[i].thought.sample_count = a.sample_count;
      out[i].thought.bias = a.bias;
      out[i].thought.u = a.u;
    }
  }
  if (k) {
    r->head = (r->head + k) % r->cap;
    r->n -= k;
  }
  if (r->n == 0)
    r->thought_open = 0;
  return (int)k;
}

size_t
qrs_roller_pending(const struct qrs_roller *r)
{
  return r->n;
}

uint64_t
qrs_roller_dropped(const struct qrs_roller *r)
{
  return r->dropped;
}
