/* A gRPC upstream (EntropyService / PurityService client); see upstream.h.

   This file: jobs and reqs (upstream_fetch(), upstream_draw(), the split
   of a large fetch, the circuit check, retries, the deadline), the unary
   and server-streaming attempts, the validation of every reply and the
   breaker bookkeeping of every outcome.  A req goes through the pre-probe
   (upstream_probe.c) and then either to an attempt here or to a bidi
   session (upstream_session.c); the channel, calls and the upstream's
   lifetime are upstream_channel.c's (upstream_int.h says what each piece
   offers the others). */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/container.h"
#include "base/log.h"
#include "grpc/upstream_int.h"

static void req_attempt(struct upreq *r);

/* ---- sequence ids and the stream protocol ----------------------------- */

/* Random (getrandom(2), never waiting: 8 bytes from the pool), so that
   an upstream cannot answer a request before it has seen it; a counter
   if the pool cannot be read. */
uint64_t
upstream__fresh_seq(struct upstream *u)
{
  uint64_t v = 0;

  if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v))
    v = ++u->next_seq;
  v &= INT64_MAX;
  return v ? v : 1;
}

int
upstream_distrusted(const struct upstream *u, char *why, size_t len)
{
  if (!u->distrust_until || upstream__now_ns() >= u->distrust_until)
    return 0;
  if (why)
    snprintf(why, len, "%s", u->distrust_why);
  return 1;
}

void
upstream__violation(struct upstream *u, const char *why)
{
  double w = u->breaker.p.recovery_window_s;

  u->stream_violations++;
  u->distrust_until = upstream__now_ns() + (uint64_t)(w * 1e9);
  if (u->distrust_until == 0)
    u->distrust_until = 1;
  snprintf(u->distrust_why, sizeof(u->distrust_why),
           "stream protocol violation, quarantined for %.3g s: %s", w, why);
  log_ev(LOG_LEVEL_WARN, &(struct log_fields){ .event = "stream-violation",
                                               .source = u->name },
         "source '%s': %s", u->name, u->distrust_why);
}

/* ---- replies ---------------------------------------------------------- */

static void
copy_str(char *dst, size_t cap, struct gw_slice s)
{
  size_t n = s.len < cap - 1 ? s.len : cap - 1;
  size_t i;

  for (i = 0; i < n; i++)
    dst[i] = (s.data[i] >= 0x20 && s.data[i] < 0x7f) ? (char)s.data[i] :
             '?';
  dst[n] = '\0';
}

/* Check the reply to r and take its content.  0, or -EPROTO with detail
   filled in. */
static int
take_reply(struct upreq *r, const uint8_t *msg, size_t len, char *detail,
           size_t dlen)
{
  struct job *j = r->job;
  struct upstream *u = j->u;
  uint64_t seq, gen;

  if (j->kind == KIND_BYTES) {
    struct gw_entropy_resp m;

    if (gw_entropy_resp_decode(msg, len, &m) < 0) {
      snprintf(detail, dlen, "reply does not decode");
      return -EPROTO;
    }
    if (m.data.len == 0) {
      snprintf(detail, dlen, "reply carries no data");
      return -EPROTO;
    }
    if (m.data.len != r->n) {
      snprintf(detail, dlen, "reply carries %zu bytes, %zu asked", m.data.len,
               r->n);
      return -EPROTO;
    }
    seq = m.sequence_id;
    gen = m.generation_timestamp_ns;
    memcpy(j->buf + r->off, m.data.data, r->n);
  } else {
    struct gw_draw_resp m;

    if (gw_draw_resp_decode(msg, len, &m) < 0) {
      snprintf(detail, dlen, "reply does not decode");
      return -EPROTO;
    }
    if (!(m.u > 0.0 && m.u < 1.0) || !isfinite(m.z)) {
      snprintf(detail, dlen, m.u == 0.0 ? "draw reply without u" :
               "draw reply u = %g outside (0, 1)", m.u);
      return -EPROTO;
    }
    seq = m.sequence_id;
    gen = m.generation_timestamp_ns;
    j->res.u = m.u;
    j->res.z = m.z;
    j->res.coherence_z = m.coherence_z;
    j->res.coherence_r = m.coherence_r;
    j->res.coherence_valid = m.coherence_valid;
    j->res.integrated_bytes = m.integrated_bytes > UINT32_MAX ? UINT32_MAX :
                              (uint32_t)m.integrated_bytes;
    copy_str(j->res.source_id, sizeof(j->res.source_id), m.source_id);
    copy_str(j->res.purity_label, sizeof(j->res.purity_label),
             m.purity_label);
    copy_str(j->res.integrator, sizeof(j->res.integrator), m.integrator);
  }
  /* The reply must answer the request it came for (the sequence_id the
     attempt carried: the nonce, else a fresh id).  No echo (0) is "none":
     a unary or server-streaming call carries one reply, and a bidi
     session matched it by its echo before (upstream_session.c).  An
     attempt that carried a fresh id instead of the nonce (taken on its
     stream) verifies nothing. */
  if (seq != 0 && seq != r->seq) {
    if (u->check_echo) {
      u->echo_failures++;
      snprintf(detail, dlen, "reply echoes sequence_id %llu, not the "
               "request's %llu", (unsigned long long)seq,
               (unsigned long long)r->seq);
      return -EPROTO;
    }
    if (j->nonce)
      j->seen_mismatch = 1;           /* check_echo: false serves it */
  } else if (j->nonce && (seq == 0 || r->seq != j->nonce)) {
    j->seen_no_echo = 1;
  }
  if (gen > j->res.generation_ns)
    j->res.generation_ns = gen;
  return 0;
}

/* An attempt of r ended: err 0 with the reply (msg, len), or an error. */
void
upstream__attempt_result(struct upreq *r, int err, int status,
                         const uint8_t *msg, size_t len, const char *why)
{
  struct job *j = r->job;
  struct upstream *u = j->u;
  char detail[200];
  double elapsed_ms = (double)(upstream__now_ns() - r->t0) / 1e6;
  int no_call = status == -1;         /* a failed pre-probe */

  if (err == 0) {
    err = take_reply(r, msg, len, detail, sizeof(detail));
    if (err == 0) {
      breaker_note_success(&u->breaker, elapsed_ms);
      u->last_success = upstream__now_ns();
      if (elapsed_ms > j->res.elapsed_ms)
        j->res.elapsed_ms = elapsed_ms;
      upstream__req_finish(r, 0, status, NULL);
      return;
    }
    u->validation_failures++;
  } else {
    snprintf(detail, sizeof(detail), "%s", why);
    if (err == -ETIMEDOUT)
      u->timeouts++;
  }
  /* A failed pre-probe made no call: no latency to learn. */
  if (no_call)
    status = 0;
  else
    breaker_record_censored(&u->breaker, elapsed_ms / 1000.0,
                            r->timeout_ms / 1000.0);
  if (status == GRPC_STATUS_RESOURCE_EXHAUSTED)
    log_ev(LOG_LEVEL_WARN, &(struct log_fields){ .event = "quota-exhausted",
                                                 .source = u->name },
           "source '%s': the upstream says a quota or limit is "
           "exhausted (%s)", u->name, detail);
  if (err == -EHOSTUNREACH)
    upstream__channel_reset(u, 0);
  if (u->closing || upstream__server_rejection(status) ||
      r->attempt >= 1 + (int)u->retry_count ||
      (j->deadline && (int64_t)upstream__now_ns() >= j->deadline)) {
    upstream__req_finish(r, err, status, detail);
    return;
  }
  req_attempt(r);
}

/* ---- unary and server-streaming attempts ------------------------------ */

struct attempt {
  struct upstream *u;
  struct upreq *r;
  struct upcall gc;
  struct gb_op op_main, op_status;
  int pending;                        /* batches outstanding */
  int delivered;
  LIST_ENTRY(attempt) link;           /* upstream's live list */
};

static void
attempt_free(struct attempt *a)
{
  struct upstream *u = a->u;

  upstream__call_close(&a->gc);
  LIST_REMOVE(a, link);
  free(a);
  u->live--;
  upstream__maybe_free(u);
}

static void
attempt_deliver(struct attempt *a)
{
  grpc_slice s;
  char why[200];
  int err;

  if (a->delivered)
    return;
  if (a->gc.recv) {
    a->delivered = 1;
    s = gbridge_read_all(a->gc.recv);
    upstream__attempt_result(a->r, 0, GRPC_STATUS_OK,
                             GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s),
                             NULL);
    grpc_slice_unref(s);
    return;
  }
  if (a->pending > 0)
    return;                           /* wait for the status */
  a->delivered = 1;
  err = upstream__status_err(a->gc.status);
  if (err == 0) {
    err = -EPROTO;
    snprintf(why, sizeof(why), "no reply message");
  } else {
    upstream__status_detail(why, sizeof(why), a->gc.status, a->gc.details);
  }
  upstream__attempt_result(a->r, err, a->gc.status, NULL, 0, why);
}

static void
on_attempt_main(struct gb_op *op, int ok)
{
  struct attempt *a = CONTAINER_OF(op, struct attempt, op_main);

  a->pending--;
  /* Server streaming: one reply is all we want; end the call. */
  if (a->gc.recv && !a->delivered) {
    attempt_deliver(a);
    if (a->pending > 0)
      grpc_call_cancel(a->gc.call, NULL);
  } else if (a->pending == 0) {
    attempt_deliver(a);
  }
  if (a->pending == 0)
    attempt_free(a);
}

static void
on_attempt_status(struct gb_op *op, int ok)
{
  struct attempt *a = CONTAINER_OF(op, struct attempt, op_status);

  a->pending--;
  if (a->pending == 0) {
    attempt_deliver(a);
    attempt_free(a);
  }
}

int
upstream__encode_request(struct upreq *r, uint8_t *buf, size_t cap)
{
  struct job *j = r->job;

  if (j->kind == KIND_BYTES) {
    struct gw_entropy_req m = { r->n, r->seq };

    return (int)gw_entropy_req_encode(&m, buf, cap);
  } else {
    struct gw_draw_req m;

    m.sequence_id = r->seq;
    m.source_id.data = (const uint8_t *)j->source_id;
    m.source_id.len = strlen(j->source_id);
    m.block_bytes = j->block_bytes;
    return (int)gw_draw_req_encode(&m, buf, cap);
  }
}

static int
attempt_start(struct upreq *r, const char *method, int streaming)
{
  struct upstream *u = r->job->u;
  struct attempt *a;
  grpc_op ops[6];
  grpc_metadata md;
  uint8_t buf[GW_MAX_REQUEST];
  int len;

  a = calloc(1, sizeof(*a));
  if (!a)
    return -ENOMEM;
  a->u = u;
  a->r = r;
  upstream__call_open(u, &a->gc, method, r->timeout_ms);
  len = upstream__encode_request(r, buf, sizeof(buf));
  a->gc.send = gbridge_buffer(buf, (size_t)len);
  LIST_INSERT_HEAD(&u->attempts, a, link);
  u->live++;

  memset(ops, 0, sizeof(ops));
  upstream__op_initial_md(u, &ops[0], &md);
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = a->gc.send;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &a->gc.imd;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &a->gc.recv;
  if (gbridge_batch(a->gc.call, ops, 5, &a->op_main, on_attempt_main) !=
      GRPC_CALL_OK)
    goto fail;
  a->pending++;
  if (upstream__call_status(&a->gc, &a->op_status, on_attempt_status) !=
      GRPC_CALL_OK) {
    grpc_call_cancel(a->gc.call, NULL);
    a->delivered = 1;                 /* the main batch fails; we report */
    return -EIO;
  }
  a->pending++;
  (void)streaming;
  return 0;

fail:
  a->delivered = 1;
  attempt_free(a);
  return -EIO;
}

void
upstream__attempts_cancel(struct upstream *u)
{
  struct attempt *a;

  LIST_FOREACH(a, &u->attempts, link)
    grpc_call_cancel(a->gc.call, NULL);
}

/* ---- reqs and jobs ---------------------------------------------------- */

/* A job of kind for cb (its buffer and reqs come later), or NULL. */
static struct job *
job_new(struct upstream *u, enum upkind kind, uint64_t nonce,
        int64_t deadline_ns, upstream_cb cb, void *arg)
{
  struct job *j;

  j = calloc(1, sizeof(*j));
  if (!j)
    return NULL;
  j->u = u;
  j->kind = kind;
  j->cb = cb;
  j->arg = arg;
  j->nonce = nonce & INT64_MAX;
  j->deadline = deadline_ns;
  return j;
}

static void
job_free(struct job *j)
{
  free(j->buf);
  free(j->reqs);
  free(j);
}

static void
job_done(struct job *j)
{
  struct upstream *u = j->u;

  if (j->res.err == 0) {
    j->res.data = j->buf;
    j->res.len = j->kind == KIND_BYTES ? j->n : 0;
    j->res.echo = j->nonce == 0 ? UPSTREAM_ECHO_NONE :
                  j->seen_mismatch ? UPSTREAM_ECHO_MISMATCH :
                  j->seen_no_echo ? UPSTREAM_ECHO_NONE :
                  UPSTREAM_ECHO_VERIFIED;
  }
  j->cb(j->arg, &j->res);
  job_free(j);
  u->live--;
  upstream__maybe_free(u);
}

void
upstream__req_finish(struct upreq *r, int err, int status, const char *detail)
{
  struct job *j = r->job;
  struct upstream *u = j->u;
  double w;

  if (r->done)
    return;
  r->done = 1;
  u->inflight--;
  if (err < 0) {
    u->failures++;
    /* A missing PurityService does not say anything about the upstream's
       health: not a breaker failure. */
    if (err == -ENOSYS && j->kind == KIND_DRAW)
      u->draw_unimplemented_at = upstream__now_ns();
    /* A call started before the circuit opened tells nothing new: it
       must not re-open it with a doubled window. */
    if (err != -ENOSYS && err != -ECANCELED &&
        !breaker_is_blocking(&u->breaker, now_s())) {
      w = breaker_note_failure(&u->breaker, now_s());
      if (w >= 0)
        log_ev(LOG_LEVEL_WARN,
               &(struct log_fields){ .event = "breaker-open",
                                     .source = u->name },
               "source '%s': circuit breaker open for %.1f s after %u "
               "consecutive failures (last: %s)", u->name, w,
               u->breaker.consecutive_failures, detail ? detail : "");
      if (!upstream__server_rejection(status))
        upstream__channel_reset(u, 0);
    }
    if (j->res.err == 0) {
      j->res.err = err;
      j->res.grpc_status = status;
      snprintf(j->res.detail, sizeof(j->res.detail), "%s",
               detail ? detail : "failed");
    }
  }
  if (r->attempt > j->res.attempts)
    j->res.attempts = r->attempt;
  if (++j->ndone == j->nreq)
    job_done(j);
}

static void
req_attempt(struct upreq *r)
{
  r->attempt++;
  r->t0 = upstream__now_ns();
  r->timeout_ms = breaker_timeout_ms(&r->job->u->breaker);
  if (r->job->u->closing || upstream__probe_gate(r) == 0)
    upstream__req_dispatch(r);
}

/* Start the attempt counted by req_attempt(). */
void
upstream__req_dispatch(struct upreq *r)
{
  struct job *j = r->job;
  struct upstream *u = j->u;
  const char *method;
  int streaming = 0, bidi = 0, err;

  r->t0 = upstream__now_ns();
  r->timeout_ms = breaker_timeout_ms(&u->breaker);
  if (j->deadline) {
    double left = (double)(j->deadline - (int64_t)r->t0) / 1e6;

    if (left <= 0) {
      upstream__req_finish(r, -ETIMEDOUT, GRPC_STATUS_DEADLINE_EXCEEDED,
                           "deadline passed before the call");
      return;
    }
    if (left < r->timeout_ms)
      r->timeout_ms = left;
  }
  u->calls++;
  if (u->closing) {
    upstream__req_finish(r, -ECANCELED, 0, "source closing");
    return;
  }
  if (upstream_distrusted(u, NULL, 0)) {
    upstream__req_finish(r, -EPROTO, 0, u->distrust_why);
    return;
  }
  if (upstream__channel_ensure(u) < 0) {
    upstream__req_finish(r, -ENOMEM, 0, "cannot create the gRPC channel");
    return;
  }
  if (j->kind == KIND_BYTES) {
    if (u->mode == UPSTREAM_UNARY) {
      method = u->method;
    } else {
      method = u->stream_method;
      streaming = 1;
      bidi = u->mode == UPSTREAM_BIDI_STREAMING;
    }
  } else if (u->mode == UPSTREAM_BIDI_STREAMING && *u->draw_stream_method) {
    method = u->draw_stream_method;
    bidi = 1;
  } else {
    method = u->draw_method;
  }
  if (!*method) {
    upstream__req_finish(r, -ENOSYS, GRPC_STATUS_UNIMPLEMENTED,
                         "no method configured for this call");
    return;
  }
  /* A bidi session picks the sequence id (unique on its stream). */
  if (!bidi)
    r->seq = j->nonce ? j->nonce : upstream__fresh_seq(u);
  err = bidi ? upstream__session_submit(r) :
        attempt_start(r, method, streaming);
  if (err < 0)
    upstream__attempt_result(r, err, 0, NULL, 0, "cannot start the call");
}

/* Every req of j fails with err before anything goes upstream; 1: the
   job is delivered from the loop, never from within the caller. */
static int
job_fail_now(struct upstream *u, struct job *j, int err)
{
  size_t i;

  j->res.err = err;
  for (i = 0; i < j->nreq; i++) {
    j->reqs[i].done = 1;
    u->inflight--;
  }
  j->ndone = j->nreq;
  return 1;
}

static int
job_start(struct upstream *u, struct job *j)
{
  size_t i, chunk, nreq;

  if (j->kind == KIND_BYTES)
    chunk = quota_chunk(&u->quota, j->n, &nreq);
  else
    chunk = 0, nreq = 1;
  if (u->inflight + nreq > UPSTREAM_MAX_PENDING)
    return -EBUSY;
  j->reqs = calloc(nreq, sizeof(*j->reqs));
  if (!j->reqs)
    return -ENOMEM;
  j->nreq = nreq;
  for (i = 0; i < nreq; i++) {
    j->reqs[i].job = j;
    j->reqs[i].off = i * chunk;
    j->reqs[i].n = j->kind == KIND_BYTES ?
                   (i + 1 < nreq ? chunk : j->n - i * chunk) : 0;
  }
  u->live++;
  u->inflight += nreq;

  /* Quarantined after a stream protocol violation, or the circuit open
     inside its window: every req fails at once (the caller falls back);
     past the window, this fetch is the half-open trial, on a fresh
     channel. */
  if (upstream_distrusted(u, j->res.detail, sizeof(j->res.detail)))
    return job_fail_now(u, j, -EPROTO);
  if (u->breaker.open) {
    if (!breaker_try_half_open(&u->breaker, now_s())) {
      snprintf(j->res.detail, sizeof(j->res.detail),
               "circuit breaker open: too many consecutive failures");
      return job_fail_now(u, j, -EAGAIN);
    }
    log_ev(LOG_LEVEL_INFO, &(struct log_fields){ .event = "breaker-half-open",
                                                 .source = u->name },
           "source '%s': recovery window over, trying the upstream again",
           u->name);
    upstream__channel_reset(u, 1);
  }
  for (i = 0; i < nreq; i++)
    req_attempt(&j->reqs[i]);
  return 0;
}

/* Jobs that failed before anything went upstream complete on the next
   loop iteration (a callback never runs inside upstream_fetch()). */
struct deferred {
  uv_idle_t idle;
  struct job *job;
};

static void
on_deferred_closed(uv_handle_t *h)
{
  free(h->data);
}

static void
on_deferred(uv_idle_t *h)
{
  struct deferred *d = h->data;

  uv_idle_stop(h);
  job_done(d->job);
  uv_close((uv_handle_t *)h, on_deferred_closed);
}

static int
job_submit(struct upstream *u, struct job *j)
{
  struct deferred *d;
  int r;

  r = job_start(u, j);
  if (r < 0) {
    job_free(j);
    return r;
  }
  if (r == 1) {
    d = calloc(1, sizeof(*d));
    if (!d) {
      u->live--;
      job_free(j);
      return -ENOMEM;
    }
    d->job = j;
    uv_idle_init(u->br->loop, &d->idle);
    d->idle.data = d;
    uv_idle_start(&d->idle, on_deferred);
  }
  return 0;
}

int
upstream_fetch(struct upstream *u, size_t n, uint64_t nonce,
               int64_t deadline_ns, upstream_cb cb, void *arg)
{
  struct job *j;

  if (u->closing)
    return -ECANCELED;
  if (n == 0)
    return -EINVAL;
  j = job_new(u, KIND_BYTES, nonce, deadline_ns, cb, arg);
  if (!j)
    return -ENOMEM;
  j->buf = malloc(n);
  if (!j->buf) {
    job_free(j);
    return -ENOMEM;
  }
  j->n = n;
  return job_submit(u, j);
}

int
upstream_draw(struct upstream *u, uint64_t nonce, const char *source_id,
              uint32_t block_bytes, int64_t deadline_ns, upstream_cb cb,
              void *arg)
{
  struct job *j;

  if (u->closing)
    return -ECANCELED;
  if (source_id && strlen(source_id) > GW_MAX_ID)
    return -EINVAL;
  j = job_new(u, KIND_DRAW, nonce, deadline_ns, cb, arg);
  if (!j)
    return -ENOMEM;
  snprintf(j->source_id, sizeof(j->source_id), "%s",
           source_id ? source_id : "");
  j->block_bytes = block_bytes;
  return job_submit(u, j);
}
