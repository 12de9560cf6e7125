/* The draw engine: fresh bytes for each DRAW / BYTES request, fetched
   from the registry after the request arrived, amplified into u (DRAW) or
   returned raw (BYTES). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qrs/error.h>

#include "amplify.h"
#include "draw.h"
#include "log.h"
#include "nonce.h"
#include "source.h"

struct draw_engine {
  const struct qrsd_conf *conf;
  struct registry *reg;
  uint32_t max_bytes_per_request;
  struct log_ratelimit fail_rl;
};

enum job_kind {
  JOB_DRAW,
  JOB_BYTES,
};

/* One request, from registry_fetch() to its reply. */
struct req {
  struct draw_engine *e;
  enum job_kind kind;
  enum amp_type amp;
  int forced_fallback;          /* a server draw fell back to local bytes */
  char source[CONF_MAX_SOURCE_NAME + 1];
  uint32_t sample_count;
  struct source_draw sd;        /* amplifier "server" */
  uint64_t nonce;
  struct ts received;
  const char *who;
  draw_reply_fn reply;
  void *ctx;
};

int
draw_engine_new(const struct qrsd_conf *conf, struct registry *reg,
                struct draw_engine **ret_engine)
{
  struct draw_engine *e;

  e = calloc(1, sizeof(*e));
  if (!e)
    return -ENOMEM;
  e->conf = conf;
  e->reg = reg;
  /* A BYTES reply is the data plus a few short strings. */
  e->max_bytes_per_request = conf->max_frame_bytes - 512;
  if (e->max_bytes_per_request > conf->max_sample_count)
    e->max_bytes_per_request = conf->max_sample_count;
  *ret_engine = e;
  return 0;
}

void
draw_engine_free(struct draw_engine *e)
{
  free(e);
}

uint32_t
draw_max_bytes(const struct draw_engine *e)
{
  return e->max_bytes_per_request;
}

void
draw_reply_error(draw_reply_fn reply, void *ctx, int err, const char *fmt,
                 ...)
{
  QrsIpc__Error m = QRS_IPC__ERROR__INIT;
  char msg[512];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  m.code = qrs__error_to_wire(err);
  m.message = msg;
  reply(ctx, QRS_MSG_ERROR, &m.base);
}

static void
ts_to_wire(const struct ts *t, QrsIpc__Timestamp *w)
{
  qrs_ipc__timestamp__init(w);
  w->realtime_ns = t->realtime_ns;
  w->monotonic_ns = t->monotonic_ns;
}

/* received / generated / sent (now) into r, through w[3]. */
static void
stamp_reply(QrsIpc__DrawReply *r, const struct ts *received,
            const struct ts *generated, QrsIpc__Timestamp w[3])
{
  struct ts now;

  ts_to_wire(received, &w[0]);
  ts_to_wire(generated, &w[1]);
  r->received = &w[0];
  r->generated = &w[1];
  ts_now(&now);
  ts_to_wire(&now, &w[2]);
  r->sent = &w[2];
}

static void
reply_draw(struct req *rq, const struct reg_result *res)
{
  QrsIpc__DrawReply r = QRS_IPC__DRAW_REPLY__INIT;
  QrsIpc__Timestamp w[3];
  const struct qrsd_conf *conf;
  struct amp_params p;
  struct amp_result a;

  conf = rq->e->conf;
  p.population_mean = conf->amp_population_mean;
  p.population_std = conf->amp_population_std;
  p.epsilon = conf->amp_epsilon;
  amp_zscore_mean(&p, res->data, res->n, &a);   /* n >= 1 was checked */

  r.u = a.u;
  r.z = a.z;
  r.sample_mean = a.sample_mean;
  r.sample_count = (uint32_t)res->n;
  r.source = (char *)res->source;
  r.served_by = (char *)res->served_by;
  r.fallback = res->fallback || rq->forced_fallback;
  r.amplifier = (char *)amp_name(rq->amp);
  r.nonce = rq->nonce;
  r.echo = (QrsIpc__Echo)res->echo;
  stamp_reply(&r, &rq->received, &res->generated, w);
  rq->reply(rq->ctx, QRS_MSG_DRAW_REPLY, &r.base);
}

static void
reply_bytes(struct req *rq, const struct reg_result *res)
{
  QrsIpc__BytesReply r = QRS_IPC__BYTES_REPLY__INIT;

  r.data.data = (uint8_t *)res->data;
  r.data.len = res->n;
  r.source = (char *)res->source;
  r.served_by = (char *)res->served_by;
  r.fallback = res->fallback;
  rq->reply(rq->ctx, QRS_MSG_BYTES_REPLY, &r.base);
}

/* The registry's answer for rq. */
static void
on_fetched(void *ctx, const struct reg_result *res)
{
  struct req *rq;

  rq = ctx;
  if (res->status == 0) {
    if (rq->kind == JOB_DRAW)
      reply_draw(rq, res);
    else
      reply_bytes(rq, res);
  } else if (res->status == -ETIMEDOUT) {
    log_limited(&rq->e->fail_rl, LOG_LEVEL_WARN, "%s: %zu bytes from "
                "source '%s' timed out: %s", rq->who, res->n, res->source,
                res->why);
    draw_reply_error(rq->reply, rq->ctx, QRS_E_TIMEOUT, "source '%s' did "
                     "not deliver %zu bytes within %u ms: %.300s",
                     res->source, res->n, rq->e->conf->request_timeout_ms,
                     res->why);
  } else {
    log_limited(&rq->e->fail_rl, LOG_LEVEL_WARN, "%s: %zu bytes from "
                "source '%s' failed: %s", rq->who, res->n, res->source,
                res->why);
    draw_reply_error(rq->reply, rq->ctx, QRS_E_ENTROPY, "source '%s' could "
                     "not deliver %zu bytes: %.300s", res->source, res->n,
                     res->why);
  }
  free(rq);
}

/* Ask the registry for n bytes for rq (which it then owns). */
static void
fetch(struct req *rq, const char *source, size_t n)
{
  struct draw_engine *e;
  draw_reply_fn reply;
  const char *who;
  int64_t deadline;
  void *ctx;
  int r;

  e = rq->e;
  who = rq->who;
  reply = rq->reply;
  ctx = rq->ctx;
  deadline = rq->received.monotonic_ns +
             (int64_t)rq->e->conf->request_timeout_ms * 1000000;
  r = registry_fetch(rq->e->reg, source, n, rq->nonce, deadline, on_fetched,
                     rq);
  if (r == 0)
    return;
  free(rq);
  if (r == -EBUSY) {
    log_limited(&e->fail_rl, LOG_LEVEL_INFO, "%s: too many bytes of "
                "reads in progress; answering BUSY", who);
    draw_reply_error(reply, ctx, QRS_E_BUSY, "qrsd is busy: too many large "
                     "reads in progress");
  } else if (r == -ENOENT) {
    draw_reply_error(reply, ctx, QRS_E_UNKNOWN_SOURCE, "no source named "
                     "'%.64s' is configured", source);
  } else {
    draw_reply_error(reply, ctx, QRS_E_INTERNAL, "cannot start the read: %s",
                     qrs_strerror(r));
  }
}

/* A new request, or NULL after answering UNKNOWN_SOURCE / out of memory. */
static struct req *
req_new(struct draw_engine *e, enum job_kind kind, const char *source,
        const struct ts *received, const char *who, draw_reply_fn reply,
        void *ctx)
{
  struct req *rq;

  if (!registry_has(e->reg, source)) {
    log_info("%s: unknown source '%.64s'", who, source);
    draw_reply_error(reply, ctx, QRS_E_UNKNOWN_SOURCE,
                     "no source named '%.64s' is configured", source);
    return NULL;
  }
  rq = calloc(1, sizeof(*rq));
  if (!rq) {
    log_err("%s: out of memory for a request", who);
    draw_reply_error(reply, ctx, -ENOMEM, "out of memory");
    return NULL;
  }
  rq->e = e;
  rq->kind = kind;
  rq->received = *received;
  rq->who = who;
  rq->reply = reply;
  rq->ctx = ctx;
  return rq;
}

/* A server draw's answer: the upstream's u and metadata, or on failure
   sample_count bytes amplified here with zscore_mean, labelled as a
   fallback (reference spec 8.5 / 6.8). */
static void
on_server_draw(struct source_draw *d)
{
  struct req *rq = (struct req *)((char *)d - offsetof(struct req, sd));
  QrsIpc__DrawReply r = QRS_IPC__DRAW_REPLY__INIT;
  QrsIpc__DrawMeta meta = QRS_IPC__DRAW_META__INIT;
  QrsIpc__Timestamp w[3];

  if (d->status < 0) {
    log_limited(&rq->e->fail_rl, LOG_LEVEL_WARN, "%s: server draw from "
                "source '%s' failed (%s); amplifying %u bytes locally",
                rq->who, rq->source, d->why, rq->sample_count);
    rq->amp = AMP_ZSCORE_MEAN;
    rq->forced_fallback = 1;
    fetch(rq, rq->source, rq->sample_count);
    return;
  }
  r.u = d->u;
  r.z = d->z;
  r.sample_mean = 0;
  r.sample_count = d->integrated_bytes;
  r.source = rq->source;
  r.served_by = rq->source;
  r.fallback = 0;
  r.amplifier = (char *)amp_name(AMP_SERVER);
  r.nonce = rq->nonce;
  r.echo = (QrsIpc__Echo)d->echo;
  meta.z = d->z;
  meta.coherence_z = d->coherence_z;
  meta.coherence_valid = d->coherence_valid;
  meta.coherence_r = d->coherence_r;
  meta.purity_label = d->purity_label;
  meta.integrated_bytes = d->integrated_bytes;
  meta.integrator = d->integrator;
  meta.source_id = d->served_source_id;
  meta.generation_timestamp_ns = d->generation_timestamp_ns;
  r.meta = &meta;
  stamp_reply(&r, &rq->received, &d->generated, w);
  rq->reply(rq->ctx, QRS_MSG_DRAW_REPLY, &r.base);
  free(rq);
}

static void
server_draw(struct req *rq, const QrsIpc__Draw *m)
{
  int r;

  snprintf(rq->sd.source_id, sizeof(rq->sd.source_id), "%s",
           m->draw_source_id ? m->draw_source_id : "");
  rq->sd.nonce = rq->nonce;
  rq->sd.block_bytes = m->draw_block_bytes;
  rq->sd.deadline_ns = rq->received.monotonic_ns +
                       (int64_t)rq->e->conf->request_timeout_ms * 1000000;
  rq->sd.done = on_server_draw;
  r = registry_draw(rq->e->reg, rq->source, &rq->sd);
  if (r == 0)
    return;
  /* Not started (no PurityService here, breaker open, over quota): the
     local fallback at once. */
  if (!rq->sd.why[0])
    snprintf(rq->sd.why, sizeof(rq->sd.why), "%s", r == -ENOSYS ?
             "the source cannot make server draws" : qrs_strerror(r));
  rq->sd.status = r;
  on_server_draw(&rq->sd);
}

void
draw_handle(struct draw_engine *e, const QrsIpc__Draw *m,
            const struct ts *received, const char *who, draw_reply_fn reply,
            void *ctx)
{
  const QrsIpc__Commitment *cm;
  const char *amp_name_req;
  struct req *rq;
  int amp;

  rq = req_new(e, JOB_DRAW, m->source, received, who, reply, ctx);
  if (!rq)
    return;

  amp_name_req = m->amplifier && *m->amplifier ? m->amplifier
                                                : e->conf->amp_type;
  amp = amp_find(amp_name_req);
  if (amp < 0) {
    log_info("%s: unknown amplifier '%.64s'", who, amp_name_req);
    draw_reply_error(reply, ctx, QRS_E_UNKNOWN_AMPLIFIER,
                     "no amplifier named '%.64s' (known: zscore_mean, "
                     "server)",
                     amp_name_req);
    goto refused;
  }
  rq->amp = (enum amp_type)amp;

  if (m->sample_count == 0 || m->sample_count > e->conf->max_sample_count) {
    log_info("%s: draw with sample_count %u refused (limit 1..%u)", who,
             m->sample_count, e->conf->max_sample_count);
    draw_reply_error(reply, ctx, QRS_E_SAMPLE_COUNT,
                     "sample_count %u is outside 1..%u", m->sample_count,
                     e->conf->max_sample_count);
    goto refused;
  }

  cm = m->commitment;
  if (cm) {
    if (cm->salt.len > NONCE_MAX_SALT) {
      log_info("%s: commitment salt of %zu bytes refused", who,
               cm->salt.len);
      draw_reply_error(reply, ctx, QRS_E_BAD_REQUEST,
                       "commitment salt of %zu bytes exceeds %d",
                       cm->salt.len, NONCE_MAX_SALT);
      goto refused;
    }
    rq->nonce = nonce_derive(cm->salt.data, cm->salt.len, cm->step,
                             cm->prev_token_id);
  }
  if (rq->amp == AMP_SERVER) {
    snprintf(rq->source, sizeof(rq->source), "%s", m->source && *m->source ?
             m->source : registry_default(e->reg));
    rq->sample_count = m->sample_count;
    server_draw(rq, m);
    return;
  }
  fetch(rq, m->source, m->sample_count);
  return;

refused:
  free(rq);
}

void
bytes_handle(struct draw_engine *e, const QrsIpc__Bytes *m,
             const struct ts *received, const char *who, draw_reply_fn reply,
             void *ctx)
{
  struct req *rq;

  rq = req_new(e, JOB_BYTES, m->source, received, who, reply, ctx);
  if (!rq)
    return;
  if (m->count == 0 || m->count > e->max_bytes_per_request) {
    log_info("%s: bytes request for %u bytes refused (limit 1..%u)", who,
             m->count, e->max_bytes_per_request);
    draw_reply_error(reply, ctx, m->count ? QRS_E_TOO_LARGE
                                          : QRS_E_BAD_REQUEST,
                     "count %u is outside 1..%u", m->count,
                     e->max_bytes_per_request);
    free(rq);
    return;
  }
  fetch(rq, m->source, m->count);
}
