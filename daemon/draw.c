/* The draw engine: fresh bytes for each DRAW / BYTES request, generated
   after the request arrived, amplified into u (DRAW) or returned raw
   (BYTES). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <qrs/error.h>

#include "amplify.h"
#include "draw.h"
#include "drawamp.h"
#include "log.h"
#include "nonce.h"

enum job_kind {
  JOB_DRAW,
  JOB_BYTES,
};

/* One request's entropy: what to read and how to answer. */
struct req {
  enum job_kind kind;
  struct conn *conn;
  struct source *src;
  uint32_t seq;
  size_t n;                     /* bytes to read */
  struct amp_req amp;           /* DRAW: the amplifier and its parameters */
  struct amp_exact_table *table;  /* exact: its table (a reference) */
  uint64_t nonce;
  struct ts received;
  struct ts generated;
};

/* A read on a worker thread. */
struct job {
  uv_work_t work;
  uv_timer_t timer;
  struct req req;
  uint8_t *buf;
  int err;
  int answered;                 /* reply or timeout error sent */
};

void
ts_now(struct ts *t)
{
  struct timespec a, b;

  clock_gettime(CLOCK_REALTIME, &a);
  clock_gettime(CLOCK_MONOTONIC, &b);
  t->realtime_ns = (int64_t)a.tv_sec * 1000000000 + a.tv_nsec;
  t->monotonic_ns = (int64_t)b.tv_sec * 1000000000 + b.tv_nsec;
}

static void
ts_to_wire(const struct ts *t, QrsIpc__Timestamp *w)
{
  qrs_ipc__timestamp__init(w);
  w->realtime_ns = t->realtime_ns;
  w->monotonic_ns = t->monotonic_ns;
}

/* The request is over: drop what it holds. */
static void
req_end(struct req *rq)
{
  amp_exact_release(rq->table);
  rq->table = NULL;
}

static void
reply_draw(struct req *rq, const uint8_t *buf)
{
  QrsIpc__DrawReply r = QRS_IPC__DRAW_REPLY__INIT;
  QrsIpc__Timestamp received, generated, sent;
  struct server *srv;
  struct amp_params p;
  struct amp_result a;
  struct ts now;
  int err;

  srv = conn_server(rq->conn);
  err = drawamp_run(srv, rq->src, &rq->amp, rq->table, buf, &a, &p);
  if (err < 0) {
    /* only if the calibration was dropped from its bounded cache between
       the preparation and the read */
    log_warn("%s: %s draw could not be amplified: %s", conn_name(rq->conn),
             amp_name(rq->amp.type), qrs_strerror(err));
    conn_send_error(rq->conn, rq->seq, err, "the %s calibration was "
                    "replaced while the draw was read; try again",
                    amp_name(rq->amp.type));
    return;
  }

  r.u = a.u;
  r.z = a.z;
  r.sample_mean = a.sample_mean;
  r.sample_count = rq->amp.sample_count;
  r.source = rq->src->name;
  r.served_by = rq->src->name;
  r.fallback = 0;
  r.amplifier = (char *)amp_name(rq->amp.type);
  r.nonce = rq->nonce;
  r.echo = QRS_IPC__ECHO__ECHO_NONE;
  r.byte_sum = a.byte_sum;
  r.population_mean = p.population_mean;
  r.population_std = p.population_std;
  r.extra_bytes = (uint32_t)(rq->n - rq->amp.sample_count);
  ts_to_wire(&rq->received, &received);
  ts_to_wire(&rq->generated, &generated);
  r.received = &received;
  r.generated = &generated;
  r.sent = &sent;
  ts_now(&now);
  ts_to_wire(&now, &sent);
  srv->draws++;
  conn_send(rq->conn, QRS_MSG_DRAW_REPLY, rq->seq, &r.base);
}

static void
reply_bytes(struct req *rq, const uint8_t *buf)
{
  QrsIpc__BytesReply r = QRS_IPC__BYTES_REPLY__INIT;

  r.data.data = (uint8_t *)buf;
  r.data.len = rq->n;
  r.source = rq->src->name;
  r.served_by = rq->src->name;
  r.fallback = 0;
  conn_send(rq->conn, QRS_MSG_BYTES_REPLY, rq->seq, &r.base);
}

/* The bytes (or the error) for rq are in: account and answer. */
static void
finish(struct req *rq, const uint8_t *buf, int err)
{
  struct source *src;
  struct server *srv;

  src = rq->src;
  srv = conn_server(rq->conn);
  if (err < 0) {
    src->failures++;
    src->healthy = 0;
    snprintf(src->detail, sizeof(src->detail), "read of %zu bytes failed: "
             "%s", rq->n, qrs_strerror(err));
    log_warn("source '%s': read of %zu bytes for %s failed: %s", src->name,
             rq->n, conn_name(rq->conn), qrs_strerror(err));
    conn_send_error(rq->conn, rq->seq, QRS_E_ENTROPY,
                    "source '%s' could not deliver %zu bytes: %s", src->name,
                    rq->n, qrs_strerror(err));
  } else {
    if (!src->healthy)
      log_info("source '%s' recovered", src->name);
    src->healthy = 1;
    src->detail[0] = '\0';
    src->draws++;
    src->bytes += rq->n;
    srv->bytes += rq->n;
    if (rq->kind == JOB_DRAW)
      reply_draw(rq, buf);
    else
      reply_bytes(rq, buf);
  }
  req_end(rq);
  conn_request_done(rq->conn);
}

static void
job_work(uv_work_t *w)
{
  struct job *j;

  j = w->data;
  j->err = j->req.src->ops->read(j->req.src, j->buf, j->req.n);
  ts_now(&j->req.generated);
}

static void
on_job_timer_closed(uv_handle_t *h)
{
  free(h->data);
}

static void
job_after(uv_work_t *w, int status)
{
  struct server *srv;
  struct conn *c;
  struct job *j;

  j = w->data;
  c = j->req.conn;
  srv = conn_server(c);
  srv->async_bytes -= j->req.n;
  if (!j->answered) {
    j->answered = 1;
    uv_timer_stop(&j->timer);
    if (conn_alive(c))
      finish(&j->req, j->buf, status < 0 ? status : j->err);
  }
  req_end(&j->req);
  free(j->buf);
  j->buf = NULL;
  conn_release(c);
  uv_close((uv_handle_t *)&j->timer, on_job_timer_closed);
}

static void
on_job_timeout(uv_timer_t *t)
{
  struct job *j;

  j = t->data;
  if (j->answered)
    return;
  j->answered = 1;
  log_warn("source '%s': %zu bytes for %s not ready after %u ms", j->req.src->name,
           j->req.n, conn_name(j->req.conn),
           conn_server(j->req.conn)->conf->request_timeout_ms);
  j->req.src->failures++;
  if (conn_alive(j->req.conn)) {
    conn_send_error(j->req.conn, j->req.seq, QRS_E_TIMEOUT,
                    "source '%s' did not deliver %zu bytes within %u ms",
                    j->req.src->name, j->req.n,
                    conn_server(j->req.conn)->conf->request_timeout_ms);
    conn_request_done(j->req.conn);
  }
}

/* Get rq->n fresh bytes and answer: inline when the source promises not to
   block for that size, else on a worker thread. */
static void
fetch(struct req *rq)
{
  struct server *srv;
  struct job *j;
  size_t limit;
  int err, r;

  srv = conn_server(rq->conn);
  limit = rq->src->inline_max < srv->inline_max ? rq->src->inline_max
                                                 : srv->inline_max;
  if (rq->n <= limit) {
    err = rq->src->ops->read(rq->src, srv->scratch, rq->n);
    ts_now(&rq->generated);
    finish(rq, srv->scratch, err);
    return;
  }

  if (srv->async_bytes + rq->n > srv->async_bytes_max) {
    log_info("%s: %zu bytes of reads already in progress; answering BUSY",
             conn_name(rq->conn), srv->async_bytes);
    conn_send_error(rq->conn, rq->seq, QRS_E_BUSY,
                    "qrsd is busy: too many large reads in progress");
    req_end(rq);
    conn_request_done(rq->conn);
    return;
  }
  j = calloc(1, sizeof(*j));
  if (j)
    j->buf = malloc(rq->n);
  if (!j || !j->buf) {
    free(j);
    log_err("%s: out of memory for a %zu-byte read", conn_name(rq->conn),
            rq->n);
    conn_send_error(rq->conn, rq->seq, -ENOMEM, "out of memory");
    req_end(rq);
    conn_request_done(rq->conn);
    return;
  }
  j->req = *rq;
  j->work.data = j;
  j->timer.data = j;
  uv_timer_init(srv->loop, &j->timer);
  r = uv_queue_work(srv->loop, &j->work, job_work, job_after);
  if (r < 0) {
    log_err("%s: cannot queue a read: %s", conn_name(rq->conn),
            uv_strerror(r));
    conn_send_error(rq->conn, rq->seq, QRS_E_INTERNAL,
                    "cannot queue the read: %s", uv_strerror(r));
    req_end(rq);
    conn_request_done(rq->conn);
    free(j->buf);
    uv_close((uv_handle_t *)&j->timer, on_job_timer_closed);
    return;
  }
  srv->async_bytes += rq->n;
  conn_hold(rq->conn);
  uv_timer_start(&j->timer, on_job_timeout, srv->conf->request_timeout_ms, 0);
}

/* Start a request: resolve its source, or answer UNKNOWN_SOURCE and
   return -1. */
static int
req_init(struct req *rq, enum job_kind kind, struct conn *c, uint32_t seq,
         const struct ts *received, const char *source)
{
  memset(rq, 0, sizeof(*rq));
  rq->kind = kind;
  rq->conn = c;
  rq->seq = seq;
  rq->received = *received;
  rq->src = server_find_source(conn_server(c), source);
  if (rq->src)
    return 0;
  log_info("%s: unknown source '%.64s'", conn_name(c), source);
  conn_send_error(c, seq, QRS_E_UNKNOWN_SOURCE,
                  "no source named '%.64s' is configured", source);
  conn_request_done(c);
  return -1;
}

/* The preparation of a draw (calibration, exact table) on a worker
   thread; then the draw itself.  Draws that need the same preparation
   while one is in progress wait for it instead of repeating it. */
struct waiter {
  struct req req;
  struct waiter *next;
};

struct prepjob {
  uv_work_t work;
  struct req req;
  struct drawamp_prep p;
  size_t held;
  struct waiter *waiters;
  struct prepjob *next;         /* in the source's in-flight list */
};

static int prepare(struct req *rq, const struct drawamp_prep *p);

static void
prep_work(uv_work_t *w)
{
  struct prepjob *pj;

  pj = w->data;
  drawamp_prep_work(&pj->p);
}

/* After the preparation: go on with rq (err 0) or answer err. */
static void
prep_resume(struct req *rq, int err, const char *msg)
{
  struct drawamp_prep again;
  struct server *srv;

  srv = conn_server(rq->conn);
  if (!conn_alive(rq->conn)) {
    req_end(rq);
    return;
  }
  if (err < 0) {
    conn_send_error(rq->conn, rq->seq, err, "%s", msg[0] ? msg :
                    qrs_strerror(err));
    req_end(rq);
    conn_request_done(rq->conn);
    return;
  }
  if (!rq->table &&
      drawamp_needs_prep(srv, rq->src, &rq->amp, &rq->table, &again)) {
    if (prepare(rq, &again) < 0) {       /* dropped from a cache meanwhile */
      req_end(rq);
      conn_request_done(rq->conn);
    }
    return;
  }
  fetch(rq);
}

static void
prep_after(uv_work_t *w, int status)
{
  struct prepjob *pj, **pp;
  struct waiter *wt, *next;
  struct srcamp *sa;
  struct server *srv;
  struct conn *c;
  int err;

  pj = w->data;
  c = pj->req.conn;
  srv = conn_server(c);
  srv->async_bytes -= pj->held;
  sa = drawamp_of(srv, pj->req.src);
  for (pp = (struct prepjob **)&sa->inflight; *pp; pp = &(*pp)->next)
    if (*pp == pj) {
      *pp = pj->next;
      break;
    }
  pj->req.table = pj->p.table;         /* the request holds it now */
  err = status < 0 ? status : drawamp_prep_finish(srv, &pj->p);
  if (err == QRS_E_ENTROPY) {
    pj->req.src->failures++;
    log_warn("%s", pj->p.msg);
  }
  prep_resume(&pj->req, err, pj->p.msg);
  conn_release(c);
  for (wt = pj->waiters; wt; wt = next) {
    next = wt->next;
    c = wt->req.conn;
    prep_resume(&wt->req, err, pj->p.msg);
    conn_release(c);
    free(wt);
  }
  free(pj);
}

/* Queue the preparation rq needs, or wait for the same one in progress
   (0); or answer and return -1. */
static int
prepare(struct req *rq, const struct drawamp_prep *p)
{
  struct prepjob *pj;
  struct waiter *wt;
  struct srcamp *sa;
  struct server *srv;
  size_t held;
  int r;

  srv = conn_server(rq->conn);
  sa = drawamp_of(srv, rq->src);
  for (pj = sa->inflight; pj; pj = pj->next) {
    if (!drawamp_prep_same(&pj->p, p))
      continue;
    wt = calloc(1, sizeof(*wt));
    if (!wt) {
      conn_send_error(rq->conn, rq->seq, -ENOMEM, "out of memory");
      return -1;
    }
    wt->req = *rq;
    wt->next = pj->waiters;
    pj->waiters = wt;
    conn_hold(rq->conn);
    return 0;
  }
  held = drawamp_prep_bytes(p);
  if (held && srv->async_bytes + held > srv->async_bytes_max) {
    conn_send_error(rq->conn, rq->seq, QRS_E_BUSY,
                    "qrsd is busy: too many large reads in progress");
    return -1;
  }
  pj = calloc(1, sizeof(*pj));
  if (!pj) {
    conn_send_error(rq->conn, rq->seq, -ENOMEM, "out of memory");
    return -1;
  }
  pj->req = *rq;
  pj->p = *p;
  pj->held = held;
  pj->work.data = pj;
  r = uv_queue_work(srv->loop, &pj->work, prep_work, prep_after);
  if (r < 0) {
    free(pj);
    conn_send_error(rq->conn, rq->seq, QRS_E_INTERNAL,
                    "cannot queue the calibration: %s", uv_strerror(r));
    return -1;
  }
  if (p->blocks)
    log_info("%s: calibrating %s on source '%s' (%u blocks of %u bytes)",
             conn_name(rq->conn), amp_name(p->amp.type), rq->src->name,
             p->blocks, p->amp.sample_count);
  pj->next = sa->inflight;
  sa->inflight = pj;
  srv->async_bytes += held;
  conn_hold(rq->conn);
  return 0;
}

void
draw_handle(struct conn *c, uint32_t seq, const QrsIpc__Draw *m,
            const struct ts *received)
{
  const QrsIpc__Commitment *cm;
  struct drawamp_prep prep;
  struct server *srv;
  struct req rq;
  char msg[256];
  int r;

  srv = conn_server(c);
  if (req_init(&rq, JOB_DRAW, c, seq, received, m->source) < 0)
    return;

  if (m->sample_count == 0 || m->sample_count > srv->conf->max_sample_count) {
    log_info("%s: draw with sample_count %u refused (limit 1..%u)",
             conn_name(c), m->sample_count, srv->conf->max_sample_count);
    conn_send_error(c, seq, QRS_E_SAMPLE_COUNT,
                    "sample_count %u is outside 1..%u", m->sample_count,
                    srv->conf->max_sample_count);
    conn_request_done(c);
    return;
  }

  r = ampreq_resolve(srv->conf, m, m->sample_count, &rq.amp, msg,
                     sizeof(msg));
  if (r < 0) {
    log_info("%s: draw refused: %s", conn_name(c), msg);
    conn_send_error(c, seq, r, "%s", msg);
    conn_request_done(c);
    return;
  }
  rq.n = ampreq_read_bytes(&rq.amp);

  cm = m->commitment;
  if (cm) {
    if (cm->salt.len > NONCE_MAX_SALT) {
      log_info("%s: commitment salt of %zu bytes refused", conn_name(c),
               cm->salt.len);
      conn_send_error(c, seq, QRS_E_BAD_REQUEST,
                      "commitment salt of %zu bytes exceeds %d",
                      cm->salt.len, NONCE_MAX_SALT);
      conn_request_done(c);
      return;
    }
    rq.nonce = nonce_derive(cm->salt.data, cm->salt.len, cm->step,
                            cm->prev_token_id);
  }
  if (drawamp_needs_prep(srv, rq.src, &rq.amp, &rq.table, &prep)) {
    if (prepare(&rq, &prep) < 0) {
      req_end(&rq);
      conn_request_done(c);
    }
    return;
  }
  fetch(&rq);
}

void
bytes_handle(struct conn *c, uint32_t seq, const QrsIpc__Bytes *m,
             const struct ts *received)
{
  struct server *srv;
  struct req rq;

  srv = conn_server(c);
  if (req_init(&rq, JOB_BYTES, c, seq, received, m->source) < 0)
    return;
  if (m->count == 0 || m->count > srv->max_bytes_per_request) {
    log_info("%s: bytes request for %u bytes refused (limit 1..%u)",
             conn_name(c), m->count, srv->max_bytes_per_request);
    conn_send_error(c, seq, m->count ? QRS_E_TOO_LARGE : QRS_E_BAD_REQUEST,
                    "count %u is outside 1..%u", m->count,
                    srv->max_bytes_per_request);
    conn_request_done(c);
    return;
  }
  rq.n = m->count;
  fetch(&rq);
}
