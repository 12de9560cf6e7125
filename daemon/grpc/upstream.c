/* A gRPC upstream (EntropyService / PurityService client); see upstream.h.

   Objects:
   - a job is one upstream_fetch() or upstream_draw(): one or more reqs
     (a fetch above max_bytes_per_request is split), a callback when all
     are done;
   - a req is one upstream request with its attempts (1 + retry_count);
   - an attempt is one unary or server-streaming call;
   - a session is the persistent bidi stream of bidi_streaming mode (one
     for bytes, one for draws); reqs queue on it in FIFO order.

   Every gRPC completion comes back on the loop thread (gbridge).  The
   upstream counts what is alive (jobs, attempts, sessions) so that
   upstream_free() can wait for the last completion. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc_security.h>
#include <grpc/support/time.h>

#include "persist/atomicfile.h"
#include "gwire.h"
#include "base/log.h"
#include "grpc/upstream.h"

enum kind { KIND_BYTES, KIND_DRAW };

#define MAX_TOMBSTONES 16             /* timed-out reqs before a reset */
#define RESET_INTERVAL_MS 1000        /* channel recreation rate limit */

/* TCP pre-probe (spec 6.5): connect timeout, backoff after a failed
   probe, and how long a successful fetch makes probing unnecessary. */
#define PROBE_TIMEOUT_MS 500
#define PROBE_BACKOFF_NS (5ull * 1000000000)
#define PROBE_HEALTHY_NS (30ull * 1000000000)

struct session;
struct job;
struct probe;

struct req {
  struct job *job;
  size_t off, n;                      /* bytes: slice of the job buffer */
  int attempt;                        /* attempts made */
  uint64_t t0;                        /* start of this attempt (ns) */
  double timeout_ms;                  /* of this attempt */
  int done;
  struct session *sess;                /* bidi: the stream it is on */
  struct req *next;                   /* waiting for the pre-probe */
};

struct job {
  struct upstream *u;
  enum kind kind;
  upstream_cb cb;
  void *arg;
  uint64_t nonce;
  size_t n;
  uint8_t *buf;
  char source_id[GW_MAX_ID + 1];
  uint32_t block_bytes;
  size_t nreq, ndone;
  int64_t deadline;                   /* monotonic ns, 0: none */
  struct req *reqs;
  struct upstream_result res;
  int seen_no_echo;                   /* a reply echoed nothing */
  int seen_mismatch;                  /* one echoed another id (served:
                                         check_echo false) */
};

struct attempt {
  struct upstream *u;
  struct req *r;
  enum kind kind;
  grpc_call *call;
  struct gb_op op_main, op_status;
  int pending;                        /* batches outstanding */
  int delivered;
  grpc_byte_buffer *send, *recv;
  grpc_metadata_array imd, tmd;
  grpc_status_code status;
  grpc_slice details;
  struct attempt *next, *prev;        /* upstream's live list */
};

/* An entry of a session's FIFO: a live req, or the tombstone of one
   that timed out (its late reply must be matched and dropped). */
struct entry {
  struct req *r;                      /* NULL: tombstone */
  uint64_t key;                       /* nonce, 0 if none */
  uint64_t deadline;                  /* ns, hrtime */
  struct entry *next;
};

struct session {
  struct upstream *u;
  enum kind kind;
  grpc_call *call;
  struct gb_op op_start, op_recv, op_send, op_status;
  int refs;                           /* batches + timer + owner */
  int dead;
  int recv_busy;                      /* a batch with RECV_MESSAGE is out */
  int send_in_recv;                   /* ... and it carries s->send */
  grpc_byte_buffer *recv, *send;
  grpc_metadata_array imd, tmd;
  grpc_status_code status;
  grpc_slice details;
  struct entry *head, *tail;          /* FIFO of sent/unsent entries */
  struct entry *unsent;               /* first entry not yet written */
  size_t count, tombstones;
  uv_timer_t timer;
};

struct upstream {
  char *name, *target, *method, *stream_method, *draw_method,
       *draw_stream_method, *header, *server_name;
  enum upstream_mode mode;
  int tls;
  char *ca_pem, *cert_pem, *key_pem;
  char *api_key;
  size_t api_key_len;
  double timeout_ms;
  uint32_t retry_count;
  int check_echo;

  struct gbridge *br;
  grpc_channel *ch;
  grpc_channel_credentials *creds;
  uint64_t last_reset;                /* ns */
  struct session *sess[2];            /* current, per kind */
  struct attempt *attempts;           /* live */
  struct breaker breaker;
  struct quota quota;
  size_t inflight;                    /* reqs in flight */
  size_t live;                        /* jobs + attempts + sessions */
  int closing;

  /* pre-probe */
  int preprobe;                       /* enabled */
  uint64_t last_success;              /* ns of the last good fetch, 0 */
  uint64_t probe_failed_at;           /* ns of the last failed probe, 0 */
  char probe_why[160];                /* why it failed */
  struct probe *probe;                /* running, or NULL */
  uint64_t probes, probe_failures;

  uint64_t calls, failures, timeouts, echo_failures, validation_failures;
  uint64_t resets;
  uint64_t draw_unimplemented_at;     /* ns, 0: never */
  int persist_logged;                 /* quota persist error last logged */
};

static void req_attempt(struct req *r);
static void req_finish(struct req *r, int err, int status,
                       const char *detail);
static void session_release(struct session *s);

static uint64_t
now_ns(void)
{
  return uv_hrtime();
}

static double
now_s(void)
{
  return (double)uv_hrtime() / 1e9;
}

const char *
upstream_mode_name(enum upstream_mode m)
{
  switch (m) {
  case UPSTREAM_UNARY: return "unary";
  case UPSTREAM_SERVER_STREAMING: return "server_streaming";
  case UPSTREAM_BIDI_STREAMING: return "bidi_streaming";
  }
  return "unknown";
}

int
upstream_mode_parse(const char *s)
{
  if (strcmp(s, "unary") == 0)
    return UPSTREAM_UNARY;
  if (strcmp(s, "server_streaming") == 0)
    return UPSTREAM_SERVER_STREAMING;
  if (strcmp(s, "bidi_streaming") == 0)
    return UPSTREAM_BIDI_STREAMING;
  return -1;
}

static void
maybe_free(struct upstream *u)
{
  if (!u->closing || u->live > 0)
    return;
  if (u->ch)
    grpc_channel_destroy(u->ch);
  if (u->creds)
    grpc_channel_credentials_release(u->creds);
  breaker_done(&u->breaker);
  quota_done(&u->quota);
  if (u->api_key)
    explicit_bzero(u->api_key, u->api_key_len);
  if (u->key_pem)
    explicit_bzero(u->key_pem, strlen(u->key_pem));
  free(u->api_key);
  free(u->key_pem);
  free(u->cert_pem);
  free(u->ca_pem);
  free(u->name);
  free(u->target);
  free(u->method);
  free(u->stream_method);
  free(u->draw_method);
  free(u->draw_stream_method);
  free(u->header);
  free(u->server_name);
  free(u);
}

/* ---- channel ---------------------------------------------------------- */

static int
channel_ensure(struct upstream *u)
{
  grpc_arg args[4];
  grpc_channel_args ca;
  size_t n = 0;

  if (u->ch)
    return 0;
  args[n].type = GRPC_ARG_INTEGER;
  args[n].key = (char *)GRPC_ARG_KEEPALIVE_TIME_MS;
  args[n++].value.integer = 300000;
  args[n].type = GRPC_ARG_INTEGER;
  args[n].key = (char *)GRPC_ARG_KEEPALIVE_TIMEOUT_MS;
  args[n++].value.integer = 20000;
  args[n].type = GRPC_ARG_INTEGER;
  args[n].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[n++].value.integer = 64 << 20;
  if (u->server_name && *u->server_name) {
    args[n].type = GRPC_ARG_STRING;
    args[n].key = (char *)GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
    args[n++].value.string = u->server_name;
  }
  ca.num_args = n;
  ca.args = args;
  u->ch = grpc_channel_create(u->target, u->creds, &ca);
  return u->ch ? 0 : -ENOMEM;
}

static void
session_kill(struct session *s)
{
  if (!s)
    return;
  s->dead = 1;
  if (s->call)
    grpc_call_cancel(s->call, NULL);
}

/* Recreate the channel (toolchain.md: a 1.51 channel reconnects slowly
   after the server restarts).  force: ignore the rate limit. */
static void
channel_reset(struct upstream *u, int force)
{
  uint64_t t = now_ns();
  int k;

  if (!u->ch)
    return;
  if (!force && t - u->last_reset < (uint64_t)RESET_INTERVAL_MS * 1000000)
    return;
  u->last_reset = t;
  u->resets++;
  for (k = 0; k < 2; k++) {
    if (u->sess[k]) {
      session_kill(u->sess[k]);
      session_release(u->sess[k]);
      u->sess[k] = NULL;
    }
  }
  grpc_channel_destroy(u->ch);
  u->ch = NULL;
  log_debug("source '%s': gRPC channel recreated", u->name);
}

static grpc_call *
call_new(struct upstream *u, const char *method, double timeout_ms)
{
  grpc_slice m = grpc_slice_from_static_string(method);
  grpc_call *c;

  c = grpc_channel_create_call(u->ch, NULL, GRPC_PROPAGATE_DEFAULTS,
                               u->br->cq, m, NULL,
                               gbridge_deadline(timeout_ms), NULL);
  grpc_slice_unref(m);
  return c;
}

static void
op_initial_md(struct upstream *u, grpc_op *op, grpc_metadata *md)
{
  memset(op, 0, sizeof(*op));
  op->op = GRPC_OP_SEND_INITIAL_METADATA;
  if (u->api_key) {
    md->key = grpc_slice_from_static_string(u->header);
    md->value = grpc_slice_from_static_buffer(u->api_key, u->api_key_len);
    op->data.send_initial_metadata.count = 1;
    op->data.send_initial_metadata.metadata = md;
  }
}

/* ---- errors ----------------------------------------------------------- */

static int
status_err(grpc_status_code st)
{
  switch (st) {
  case GRPC_STATUS_OK: return 0;
  case GRPC_STATUS_DEADLINE_EXCEEDED: return -ETIMEDOUT;
  case GRPC_STATUS_UNAVAILABLE: return -EHOSTUNREACH;
  case GRPC_STATUS_UNAUTHENTICATED:
  case GRPC_STATUS_PERMISSION_DENIED: return -EACCES;
  case GRPC_STATUS_RESOURCE_EXHAUSTED: return -EDQUOT;
  case GRPC_STATUS_UNIMPLEMENTED: return -ENOSYS;
  default: return -EIO;
  }
}

/* The server rejected the request itself: retrying or reconnecting does
   not help (spec 6.6 step 4). */
static int
server_rejection(int status)
{
  switch (status) {
  case GRPC_STATUS_FAILED_PRECONDITION:
  case GRPC_STATUS_INVALID_ARGUMENT:
  case GRPC_STATUS_NOT_FOUND:
  case GRPC_STATUS_PERMISSION_DENIED:
  case GRPC_STATUS_UNAUTHENTICATED:
  case GRPC_STATUS_OUT_OF_RANGE:
  case GRPC_STATUS_ALREADY_EXISTS:
  case GRPC_STATUS_UNIMPLEMENTED:
    return 1;
  default:
    return 0;
  }
}

static void
status_detail(char *buf, size_t len, grpc_status_code st, grpc_slice d)
{
  size_t n = GRPC_SLICE_LENGTH(d);

  if (n > 150)
    n = 150;
  snprintf(buf, len, "gRPC status %d%s%.*s", (int)st, n ? ": " : "",
           (int)n, (const char *)GRPC_SLICE_START_PTR(d));
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
take_reply(struct req *r, const uint8_t *msg, size_t len, char *detail,
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
  if (j->nonce && seq == 0) {
    j->seen_no_echo = 1;
  } else if (j->nonce && seq != j->nonce && u->check_echo) {
    u->echo_failures++;
    snprintf(detail, dlen, "reply echoes sequence_id %llu, not the nonce "
             "%llu", (unsigned long long)seq, (unsigned long long)j->nonce);
    return -EPROTO;
  } else if (j->nonce && seq != j->nonce) {
    j->seen_mismatch = 1;             /* check_echo: false serves it */
  }
  if (gen > j->res.generation_ns)
    j->res.generation_ns = gen;
  return 0;
}

/* An attempt of r ended: err 0 with the reply (msg, len), or an error. */
static void
attempt_result(struct req *r, int err, int status, const uint8_t *msg,
               size_t len, const char *why)
{
  struct job *j = r->job;
  struct upstream *u = j->u;
  char detail[200];
  double elapsed_ms = (double)(now_ns() - r->t0) / 1e6;
  int no_call = status == -1;         /* a failed pre-probe */

  if (err == 0) {
    err = take_reply(r, msg, len, detail, sizeof(detail));
    if (err == 0) {
      breaker_note_success(&u->breaker, elapsed_ms);
      u->last_success = now_ns();
      if (elapsed_ms > j->res.elapsed_ms)
        j->res.elapsed_ms = elapsed_ms;
      req_finish(r, 0, status, NULL);
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
    log_warn("source '%s': the upstream says its quota is exhausted "
             "(RESOURCE_EXHAUSTED)", u->name);
  if (err == -EHOSTUNREACH)
    channel_reset(u, 0);
  if (u->closing || server_rejection(status) ||
      r->attempt >= 1 + (int)u->retry_count ||
      (j->deadline && (int64_t)now_ns() >= j->deadline)) {
    req_finish(r, err, status, detail);
    return;
  }
  req_attempt(r);
}

/* ---- unary and server-streaming attempts ------------------------------ */

static void
attempt_free(struct attempt *a)
{
  struct upstream *u = a->u;

  if (a->send)
    grpc_byte_buffer_destroy(a->send);
  if (a->recv)
    grpc_byte_buffer_destroy(a->recv);
  grpc_metadata_array_destroy(&a->imd);
  grpc_metadata_array_destroy(&a->tmd);
  grpc_slice_unref(a->details);
  if (a->call)
    grpc_call_unref(a->call);
  if (a->prev)
    a->prev->next = a->next;
  else
    u->attempts = a->next;
  if (a->next)
    a->next->prev = a->prev;
  free(a);
  u->live--;
  maybe_free(u);
}

static void
attempt_deliver(struct attempt *a)
{
  grpc_slice s;
  char why[200];
  int err;

  if (a->delivered)
    return;
  if (a->recv) {
    a->delivered = 1;
    s = gbridge_read_all(a->recv);
    attempt_result(a->r, 0, GRPC_STATUS_OK, GRPC_SLICE_START_PTR(s),
                   GRPC_SLICE_LENGTH(s), NULL);
    grpc_slice_unref(s);
    return;
  }
  if (a->pending > 0)
    return;                           /* wait for the status */
  a->delivered = 1;
  err = status_err(a->status);
  if (err == 0) {
    err = -EPROTO;
    snprintf(why, sizeof(why), "no reply message");
  } else {
    status_detail(why, sizeof(why), a->status, a->details);
  }
  attempt_result(a->r, err, a->status, NULL, 0, why);
}

static void
on_attempt_main(struct gb_op *op, int ok)
{
  struct attempt *a = (struct attempt *)((char *)op -
                                         offsetof(struct attempt, op_main));

  a->pending--;
  /* Server streaming: one reply is all we want; end the call. */
  if (a->recv && !a->delivered) {
    attempt_deliver(a);
    if (a->pending > 0)
      grpc_call_cancel(a->call, NULL);
  } else if (a->pending == 0) {
    attempt_deliver(a);
  }
  if (a->pending == 0)
    attempt_free(a);
}

static void
on_attempt_status(struct gb_op *op, int ok)
{
  struct attempt *a = (struct attempt *)((char *)op -
                                         offsetof(struct attempt,
                                                  op_status));

  a->pending--;
  if (a->pending == 0) {
    attempt_deliver(a);
    attempt_free(a);
  }
}

static int
encode_request(struct req *r, uint8_t *buf, size_t cap)
{
  struct job *j = r->job;

  if (j->kind == KIND_BYTES) {
    struct gw_entropy_req m = { r->n, j->nonce };

    return (int)gw_entropy_req_encode(&m, buf, cap);
  } else {
    struct gw_draw_req m;

    m.sequence_id = j->nonce;
    m.source_id.data = (const uint8_t *)j->source_id;
    m.source_id.len = strlen(j->source_id);
    m.block_bytes = j->block_bytes;
    return (int)gw_draw_req_encode(&m, buf, cap);
  }
}

static int
attempt_start(struct req *r, const char *method, int streaming)
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
  a->details = grpc_empty_slice();
  grpc_metadata_array_init(&a->imd);
  grpc_metadata_array_init(&a->tmd);
  a->call = call_new(u, method, r->timeout_ms);
  len = encode_request(r, buf, sizeof(buf));
  a->send = gbridge_buffer(buf, (size_t)len);
  a->next = u->attempts;
  if (a->next)
    a->next->prev = a;
  u->attempts = a;
  u->live++;

  memset(ops, 0, sizeof(ops));
  op_initial_md(u, &ops[0], &md);
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = a->send;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &a->imd;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &a->recv;
  if (gbridge_batch(a->call, ops, 5, &a->op_main, on_attempt_main) !=
      GRPC_CALL_OK)
    goto fail;
  a->pending++;
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[0].data.recv_status_on_client.trailing_metadata = &a->tmd;
  ops[0].data.recv_status_on_client.status = &a->status;
  ops[0].data.recv_status_on_client.status_details = &a->details;
  if (gbridge_batch(a->call, ops, 1, &a->op_status, on_attempt_status) !=
      GRPC_CALL_OK) {
    grpc_call_cancel(a->call, NULL);
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

/* ---- bidi sessions ---------------------------------------------------- */

static void
session_release(struct session *s)
{
  struct upstream *u = s->u;
  struct entry *e;

  if (--s->refs > 0)
    return;
  while (s->head) {
    e = s->head;
    s->head = e->next;
    free(e);
  }
  if (s->recv)
    grpc_byte_buffer_destroy(s->recv);
  if (s->send)
    grpc_byte_buffer_destroy(s->send);
  grpc_metadata_array_destroy(&s->imd);
  grpc_metadata_array_destroy(&s->tmd);
  grpc_slice_unref(s->details);
  if (s->call)
    grpc_call_unref(s->call);
  free(s);
  u->live--;
  maybe_free(u);
}

static void
on_session_timer_closed(uv_handle_t *h)
{
  session_release(h->data);
}

/* Remove e from the FIFO (prev is its predecessor or NULL). */
static void
entry_unlink(struct session *s, struct entry *prev, struct entry *e)
{
  if (prev)
    prev->next = e->next;
  else
    s->head = e->next;
  if (s->tail == e)
    s->tail = prev;
  if (s->unsent == e)
    s->unsent = e->next;
  if (!e->r)
    s->tombstones--;
  s->count--;
  free(e);
}

/* The stream is gone: every live req on it fails (and may retry). */
static void
session_fail_all(struct session *s, int err, int status, const char *why)
{
  struct entry *e;
  struct req *r;

  s->dead = 1;
  if (s->u->sess[s->kind] == s) {
    s->u->sess[s->kind] = NULL;
    session_release(s);               /* the owner's reference */
  }
  while (s->head) {
    e = s->head;
    r = e->r;
    entry_unlink(s, NULL, e);
    if (r) {
      r->sess = NULL;
      attempt_result(r, err, status, NULL, 0, why);
    }
  }
}

static void session_pump(struct session *s);
static void on_session_recv(struct gb_op *op, int ok);
static void on_session_timer(uv_timer_t *t);

static void
on_session_started(struct gb_op *op, int ok)
{
  session_release((struct session *)((char *)op -
                                     offsetof(struct session, op_start)));
}

static void
on_session_send(struct gb_op *op, int ok)
{
  struct session *s = (struct session *)((char *)op -
                                         offsetof(struct session, op_send));

  grpc_byte_buffer_destroy(s->send);
  s->send = NULL;
  if (ok && !s->dead)
    session_pump(s);
  session_release(s);
}

/* Start what the FIFO needs: a SEND_MESSAGE of the next unsent request
   (gRPC allows one at a time) and a RECV_MESSAGE while any sent request
   (or tombstone) awaits its reply.

   A request sent to an idle stream (nothing else to send, nothing
   awaited) goes in one batch with its RECV_MESSAGE: one completion when
   the reply is there, instead of a send completion first, which costs a
   wake-up of the completion-queue thread and one of the loop while the
   upstream works on the request.  Otherwise the send is a batch of its
   own so that requests keep being pipelined while replies are awaited;
   a request that comes while an idle-stream batch is out waits for its
   reply (at most one round trip, and only at the start of a burst). */
static void
session_pump(struct session *s)
{
  uint8_t buf[GW_MAX_REQUEST];
  grpc_op ops[2];
  struct gb_op *op;
  gb_cb cb;
  size_t n = 0;
  int len, send, recv;

  if (s->dead)
    return;
  send = s->unsent && !s->send;
  recv = !s->recv_busy && s->head && s->head != s->unsent;
  if (send && !s->recv_busy && !recv && !s->unsent->next)
    recv = 1;                         /* idle stream: one batch */
  else if (send && recv)
    recv = 0, send = 1;               /* pipelining: separate batches */
  if (!send && !recv)
    return;
  memset(ops, 0, sizeof(ops));
  if (send) {
    len = encode_request(s->unsent->r, buf, sizeof(buf));
    s->unsent = s->unsent->next;
    s->send = gbridge_buffer(buf, (size_t)len);
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = s->send;
  }
  if (recv) {
    ops[n].op = GRPC_OP_RECV_MESSAGE;
    ops[n++].data.recv_message.recv_message = &s->recv;
  }
  op = recv ? &s->op_recv : &s->op_send;
  cb = recv ? on_session_recv : on_session_send;
  s->refs++;
  if (gbridge_batch(s->call, ops, n, op, cb) != GRPC_CALL_OK) {
    if (send) {
      grpc_byte_buffer_destroy(s->send);
      s->send = NULL;
    }
    s->refs--;
    session_kill(s);
    return;
  }
  if (recv) {
    s->recv_busy = 1;
    s->send_in_recv = send;
  }
  if (send && !recv)
    session_pump(s);                  /* a RECV_MESSAGE may be due too */
}

static void
on_session_recv(struct gb_op *op, int ok)
{
  struct session *s = (struct session *)((char *)op -
                                         offsetof(struct session, op_recv));
  struct entry *e, *prev, *match = NULL, *match_prev = NULL;
  struct gw_entropy_resp er;
  struct gw_draw_resp dr;
  grpc_slice sl;
  uint64_t seq = 0;
  struct req *r;

  s->recv_busy = 0;
  if (s->send_in_recv) {
    grpc_byte_buffer_destroy(s->send);
    s->send = NULL;
    s->send_in_recv = 0;
  }
  if (!ok || !s->recv) {
    /* End of stream; the status batch says why and fails the rest. */
    s->dead = 1;
    session_release(s);
    return;
  }
  sl = gbridge_read_all(s->recv);
  grpc_byte_buffer_destroy(s->recv);
  s->recv = NULL;
  if (s->kind == KIND_BYTES) {
    if (gw_entropy_resp_decode(GRPC_SLICE_START_PTR(sl),
                               GRPC_SLICE_LENGTH(sl), &er) == 0)
      seq = er.sequence_id;
  } else if (gw_draw_resp_decode(GRPC_SLICE_START_PTR(sl),
                                 GRPC_SLICE_LENGTH(sl), &dr) == 0) {
    seq = dr.sequence_id;
  }
  /* The entry whose key the reply echoes, else the oldest (FIFO). */
  if (seq) {
    for (prev = NULL, e = s->head; e && e != s->unsent; prev = e,
         e = e->next) {
      if (e->key == seq) {
        match = e;
        match_prev = prev;
        break;
      }
    }
  }
  if (!match && s->head && s->head != s->unsent) {
    match = s->head;
    match_prev = NULL;
  }
  if (match) {
    r = match->r;
    entry_unlink(s, match_prev, match);
    if (r) {
      r->sess = NULL;
      attempt_result(r, 0, GRPC_STATUS_OK, GRPC_SLICE_START_PTR(sl),
                     GRPC_SLICE_LENGTH(sl), NULL);
    }
  }
  grpc_slice_unref(sl);
  session_pump(s);                    /* the next send and/or receive */
  session_release(s);
}

static void
on_session_status(struct gb_op *op, int ok)
{
  struct session *s = (struct session *)((char *)op -
                                         offsetof(struct session,
                                                  op_status));
  char why[200];
  int err;

  uv_timer_stop(&s->timer);
  err = status_err(s->status);
  if (err == 0)
    err = -EHOSTUNREACH;
  status_detail(why, sizeof(why), s->status, s->details);
  if (strlen(why) + 20 < sizeof(why) && s->status == GRPC_STATUS_OK)
    strcat(why, " (stream ended)");
  session_fail_all(s, err, s->status, why);
  uv_close((uv_handle_t *)&s->timer, on_session_timer_closed);
  session_release(s);
}

static void
session_arm(struct session *s)
{
  struct entry *e;
  uint64_t t = now_ns(), first = UINT64_MAX;

  for (e = s->head; e; e = e->next)
    if (e->r && e->deadline < first)
      first = e->deadline;
  if (first == UINT64_MAX) {
    uv_timer_stop(&s->timer);
    return;
  }
  uv_update_time(s->u->br->loop);
  uv_timer_start(&s->timer, on_session_timer,
                 first > t ? (first - t + 999999) / 1000000 : 0, 0);
}

static void
on_session_timer(uv_timer_t *t)
{
  struct session *s = t->data;
  struct entry *e, *prev;
  int sent;
  struct req *r;
  uint64_t now = now_ns();
  int again;

  do {
    again = 0;
    for (prev = NULL, sent = 1, e = s->head; e; prev = e, e = e->next) {
      if (e == s->unsent)
        sent = 0;
      if (!e->r || e->deadline > now)
        continue;
      r = e->r;
      if (sent) {
        /* Keep a tombstone so that the late reply matches it. */
        e->r = NULL;
        s->tombstones++;
      } else {
        entry_unlink(s, prev, e);     /* never sent: no reply will come */
      }
      r->sess = NULL;
      attempt_result(r, -ETIMEDOUT, GRPC_STATUS_DEADLINE_EXCEEDED, NULL, 0,
                     "timed out waiting for the stream reply");
      again = 1;                      /* the list may have changed */
      break;
    }
  } while (again && !s->dead);
  if (s->tombstones >= MAX_TOMBSTONES && !s->dead) {
    log_debug("source '%s': bidi stream stalled, restarting it",
              s->u->name);
    session_kill(s);
  }
  if (!s->dead)
    session_arm(s);
}

static struct session *
session_open(struct upstream *u, enum kind kind)
{
  struct session *s;
  grpc_op ops[3];
  grpc_metadata md;
  const char *method = kind == KIND_BYTES ? u->stream_method :
                       u->draw_stream_method;

  s = calloc(1, sizeof(*s));
  if (!s)
    return NULL;
  s->u = u;
  s->kind = kind;
  s->details = grpc_empty_slice();
  grpc_metadata_array_init(&s->imd);
  grpc_metadata_array_init(&s->tmd);
  uv_timer_init(u->br->loop, &s->timer);
  s->timer.data = s;
  s->refs = 2;                        /* owner + timer */
  u->live++;
  s->call = call_new(u, method, -1);

  /* The metadata batch (toolchain.md: a call needs RECV_INITIAL_METADATA
     or its messages never arrive); the messages follow in session_pump(),
     the status batch says when the stream ends. */
  memset(ops, 0, sizeof(ops));
  op_initial_md(u, &ops[0], &md);
  ops[1].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[1].data.recv_initial_metadata.recv_initial_metadata = &s->imd;
  if (gbridge_batch(s->call, ops, 2, &s->op_start, on_session_started) ==
      GRPC_CALL_OK)
    s->refs++;
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[0].data.recv_status_on_client.trailing_metadata = &s->tmd;
  ops[0].data.recv_status_on_client.status = &s->status;
  ops[0].data.recv_status_on_client.status_details = &s->details;
  if (gbridge_batch(s->call, ops, 1, &s->op_status, on_session_status) ==
      GRPC_CALL_OK) {
    s->refs++;
  } else {
    /* No status will come: undo by hand. */
    s->dead = 1;
    grpc_call_cancel(s->call, NULL);
    uv_close((uv_handle_t *)&s->timer, on_session_timer_closed);
    session_release(s);
    return NULL;
  }
  return s;
}

static int
session_submit(struct req *r)
{
  struct upstream *u = r->job->u;
  enum kind kind = r->job->kind;
  struct session *s = u->sess[kind];
  struct entry *e;

  if (!s || s->dead) {
    s = session_open(u, kind);
    if (!s)
      return -ENOMEM;
    u->sess[kind] = s;
  }
  e = calloc(1, sizeof(*e));
  if (!e)
    return -ENOMEM;
  e->r = r;
  e->key = r->job->nonce;
  e->deadline = r->t0 + (uint64_t)(r->timeout_ms * 1e6);
  if (s->tail)
    s->tail->next = e;
  else
    s->head = e;
  s->tail = e;
  if (!s->unsent)
    s->unsent = e;
  s->count++;
  r->sess = s;
  session_pump(s);
  session_arm(s);
  return 0;
}

/* ---- reqs and jobs ---------------------------------------------------- */

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
  free(j->buf);
  free(j->reqs);
  free(j);
  u->live--;
  maybe_free(u);
}

static void
req_finish(struct req *r, int err, int status, const char *detail)
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
      u->draw_unimplemented_at = now_ns();
    /* A call started before the circuit opened tells nothing new: it
       must not re-open it with a doubled window. */
    if (err != -ENOSYS && err != -ECANCELED &&
        !breaker_is_blocking(&u->breaker, now_s())) {
      w = breaker_note_failure(&u->breaker, now_s());
      if (w >= 0)
        log_warn("source '%s': circuit breaker open for %.1f s after %u "
                 "consecutive failures (last: %s)", u->name, w,
                 u->breaker.consecutive_failures, detail ? detail : "");
      if (!server_rejection(status))
        channel_reset(u, 0);
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

/* ---- TCP pre-probe (spec 6.5) ----------------------------------------

   Before an attempt, unless a fetch succeeded within the last 30 s: a
   connect() to the target with a 0.5 s timeout, so that an unreachable or
   black-holed host fails the attempt in half a second instead of the
   whole call timeout, and for 5 s after a failed probe every attempt
   fails at once ("backoff in effect") without touching the network.
   Unlike the reference's blocking connect, the probe runs on the loop
   (libuv connect, getaddrinfo on the worker pool); attempts that arrive
   while it runs wait for its verdict (one probe at a time).  A unix:
   target is probed with a connect() to its socket; targets in another
   gRPC naming scheme (dns:, ipv4:, ...) except dns:///host:port are not
   probed.  The backoff verdict is also delivered through a probe object,
   on the next loop iteration, so that no callback runs inside
   upstream_fetch(). */

struct probe {
  struct upstream *u;
  struct req *waiting;                /* attempts waiting for the verdict */
  int verdict_only;                   /* backoff: no connect, just fail */
  int done, refs;                     /* handles open + getaddrinfo */
  int have_sock;
  uv_timer_t timer;
  uv_getaddrinfo_t gai;
  union {
    uv_handle_t h;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  } sock;
  uv_connect_t conn;
  char what[300];                     /* host:port or the socket path */
};

static void req_dispatch(struct req *r);

/* Does gRPC reach TCP targets through an HTTP proxy (its environment
   variables, in the order gRPC reads them)?  Then a direct connect says
   nothing about the path gRPC takes, and the probe is skipped. */
static int
grpc_uses_proxy(void)
{
  static const char *const vars[] = { "grpc_proxy", "https_proxy",
                                      "http_proxy" };
  const char *v;
  size_t i;

  for (i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
    v = getenv(vars[i]);
    if (v && *v)
      return 1;
  }
  return 0;
}

/* Where to connect: 1 and a unix path, 2 and host + port, or 0 (not
   probed: another naming scheme, a TCP target behind gRPC's HTTP proxy,
   or malformed, which gRPC reports). */
static int
probe_target(const char *target, char *a, size_t alen, char *port,
             size_t plen)
{
  const char *t = target, *colon, *close;
  size_t n;

  if (strncmp(t, "unix://", 7) == 0 || strncmp(t, "unix:", 5) == 0) {
    snprintf(a, alen, "%s", t + (t[5] == '/' && t[6] == '/' ? 7 : 5));
    return *a ? 1 : -1;
  }
  if (grpc_uses_proxy())
    return 0;
  if (strncmp(t, "dns:///", 7) == 0)
    t += 7;
  colon = strchr(t, ':');
  if (t[0] != '[' && colon &&
      strspn(colon + 1, "0123456789") != strlen(colon + 1))
    return 0;                         /* ipv4:, vsock:, a bare IPv6 ... */
  if (t[0] == '[') {                  /* [v6]:port */
    close = strchr(t, ']');
    if (!close || (close[1] != ':' && close[1] != '\0'))
      return -1;
    n = (size_t)(close - t - 1);
    colon = close[1] ? close + 1 : NULL;
    t++;
  } else {
    n = colon ? (size_t)(colon - t) : strlen(t);
  }
  if (n == 0 || n >= alen)
    return -1;
  memcpy(a, t, n);
  a[n] = '\0';
  if (!colon) {
    snprintf(port, plen, "443");      /* gRPC's default */
    return 2;
  }
  if (!colon[1] || strspn(colon + 1, "0123456789") != strlen(colon + 1) ||
      atoi(colon + 1) < 1 || atoi(colon + 1) > 65535)
    return -1;
  snprintf(port, plen, "%s", colon + 1);
  return 2;
}

static void
on_probe_closed(uv_handle_t *h)
{
  struct probe *p = h->data;
  struct upstream *u = p->u;

  if (--p->refs > 0)
    return;
  free(p);
  u->live--;
  maybe_free(u);
}

/* The verdict: 0 (reachable) or a libuv error; resume the waiters. */
static void
probe_finish(struct probe *p, int status)
{
  struct upstream *u = p->u;
  struct req *r, *list;
  char why[320];

  if (p->done)
    return;
  p->done = 1;
  if (u->probe == p)
    u->probe = NULL;
  if (p->verdict_only) {
    snprintf(why, sizeof(why), "QRNG host unreachable (TCP pre-probe "
             "failed within the last 5 s: %s; backoff in effect)",
             u->probe_why);
  } else if (status < 0) {
    u->probe_failed_at = now_ns();
    u->probe_failures++;
    snprintf(u->probe_why, sizeof(u->probe_why), "%.100s: %s", p->what,
             status == UV_ETIMEDOUT ? "no connection within 500 ms" :
             uv_strerror(status));
    snprintf(why, sizeof(why), "QRNG host %s unreachable (TCP pre-probe)",
             u->probe_why);
    if (!u->closing)
      log_warn("source '%s': TCP pre-probe failed: %s; attempts fail at "
               "once for 5 s", u->name, u->probe_why);
  }
  list = p->waiting;
  p->waiting = NULL;
  while ((r = list)) {
    list = r->next;
    r->next = NULL;
    if (u->closing)
      req_finish(r, -ECANCELED, 0, "source closing");
    else if (p->verdict_only || status < 0)
      attempt_result(r, -EHOSTUNREACH, -1, NULL, 0, why);
    else
      req_dispatch(r);
  }
  uv_close((uv_handle_t *)&p->timer, on_probe_closed);
  if (p->have_sock)
    uv_close(&p->sock.h, on_probe_closed);
}

/* Has the connect in flight completed by now?  After a stall of the loop
   its timer can run before the connect's callback: look at the socket
   itself before calling it a timeout. */
static int
probe_connected(struct probe *p)
{
  struct pollfd pf;
  uv_os_fd_t fd;
  socklen_t sl = sizeof(int);
  int e = -1;

  if (!p->have_sock || uv_fileno(&p->sock.h, &fd) < 0)
    return 0;
  pf.fd = fd;
  pf.events = POLLOUT;
  if (poll(&pf, 1, 0) != 1 || !(pf.revents & POLLOUT))
    return 0;
  return getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &sl) == 0 && e == 0;
}

static void
on_probe_timer(uv_timer_t *t)
{
  struct probe *p = t->data;

  if (p->verdict_only || p->u->closing)
    probe_finish(p, p->verdict_only ? 0 : UV_ECANCELED);
  else
    probe_finish(p, probe_connected(p) ? 0 : UV_ETIMEDOUT);
}

static void
on_probe_connected(uv_connect_t *c, int status)
{
  probe_finish(c->data, status);
}

static void
on_probe_resolved(uv_getaddrinfo_t *g, int status, struct addrinfo *ai)
{
  struct probe *p = g->data;
  int r;

  p->refs--;
  if (p->done) {
    uv_freeaddrinfo(ai);
    if (p->refs == 0) {               /* the handles closed already */
      p->refs = 1;
      on_probe_closed((uv_handle_t *)&p->timer);
    }
    return;
  }
  if (status < 0) {
    probe_finish(p, status);
    return;
  }
  uv_tcp_init(p->u->br->loop, &p->sock.tcp);
  p->sock.h.data = p;
  p->have_sock = 1;
  p->refs++;
  r = uv_tcp_connect(&p->conn, &p->sock.tcp, ai->ai_addr,
                     on_probe_connected);
  uv_freeaddrinfo(ai);
  if (r < 0)
    probe_finish(p, r);
}

/* Start a probe of u's target (verdict_only: deliver the backoff failure
   on the next loop iteration).  budget_ms bounds the connect.  NULL when
   the target is not probed (the caller goes ahead). */
static struct probe *
probe_start(struct upstream *u, int verdict_only, double budget_ms)
{
  struct addrinfo hints;
  struct probe *p;
  char addr[256], port[16];
  int kind = 0, r;

  if (!verdict_only) {
    kind = probe_target(u->target, addr, sizeof(addr), port, sizeof(port));
    if (kind <= 0)
      return NULL;
  }
  p = calloc(1, sizeof(*p));
  if (!p)
    return NULL;
  p->u = u;
  p->verdict_only = verdict_only;
  u->live++;
  u->probe = p;
  uv_timer_init(u->br->loop, &p->timer);
  p->timer.data = p;
  p->refs = 1;
  p->conn.data = p;
  if (budget_ms > PROBE_TIMEOUT_MS || budget_ms <= 0)
    budget_ms = PROBE_TIMEOUT_MS;
  uv_update_time(u->br->loop);        /* timers count from the loop's now */
  uv_timer_start(&p->timer, on_probe_timer,
                 verdict_only ? 0 : (uint64_t)budget_ms, 0);
  if (verdict_only)
    return p;
  u->probes++;
  if (kind == 1) {
    snprintf(p->what, sizeof(p->what), "%s", addr);
    uv_pipe_init(u->br->loop, &p->sock.pipe, 0);
    p->sock.h.data = p;
    p->have_sock = 1;
    p->refs++;
    uv_pipe_connect(&p->conn, &p->sock.pipe, addr, on_probe_connected);
    return p;
  }
  snprintf(p->what, sizeof(p->what), "%s%s%s:%s", strchr(addr, ':') ?
           "[" : "", addr, strchr(addr, ':') ? "]" : "", port);
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  p->gai.data = p;
  p->refs++;
  r = uv_getaddrinfo(u->br->loop, &p->gai, on_probe_resolved, addr, port,
                     &hints);
  if (r < 0) {
    p->refs--;
    probe_finish(p, r);
  }
  return p;
}

/* Before an attempt: 0 to go ahead, or 1 when r now waits for a probe's
   verdict. */
static int
probe_gate(struct req *r)
{
  struct upstream *u = r->job->u;
  uint64_t t = now_ns();
  int backoff;

  if (!u->preprobe)
    return 0;
  if (u->last_success && t - u->last_success < PROBE_HEALTHY_NS)
    return 0;
  backoff = u->probe_failed_at && t - u->probe_failed_at < PROBE_BACKOFF_NS;
  if (!u->probe || u->probe->done) {
    double left = -1;

    if (r->job->deadline)
      left = (double)(r->job->deadline - (int64_t)t) / 1e6;
    if (!probe_start(u, backoff, left) || !u->probe)
      return 0;                       /* not probed */
  }
  r->next = u->probe->waiting;
  u->probe->waiting = r;
  return 1;
}

static void
req_attempt(struct req *r)
{
  r->attempt++;
  r->t0 = now_ns();
  r->timeout_ms = breaker_timeout_ms(&r->job->u->breaker);
  if (r->job->u->closing || probe_gate(r) == 0)
    req_dispatch(r);
}

/* Start the attempt counted by req_attempt(). */
static void
req_dispatch(struct req *r)
{
  struct job *j = r->job;
  struct upstream *u = j->u;
  const char *method;
  int streaming = 0, bidi = 0, err;

  r->t0 = now_ns();
  r->timeout_ms = breaker_timeout_ms(&u->breaker);
  if (j->deadline) {
    double left = (double)(j->deadline - (int64_t)r->t0) / 1e6;

    if (left <= 0) {
      req_finish(r, -ETIMEDOUT, GRPC_STATUS_DEADLINE_EXCEEDED,
                 "deadline passed before the call");
      return;
    }
    if (left < r->timeout_ms)
      r->timeout_ms = left;
  }
  u->calls++;
  if (u->closing) {
    req_finish(r, -ECANCELED, 0, "source closing");
    return;
  }
  if (channel_ensure(u) < 0) {
    req_finish(r, -ENOMEM, 0, "cannot create the gRPC channel");
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
    req_finish(r, -ENOSYS, GRPC_STATUS_UNIMPLEMENTED,
               "no method configured for this call");
    return;
  }
  err = bidi ? session_submit(r) : attempt_start(r, method, streaming);
  if (err < 0)
    attempt_result(r, err, 0, NULL, 0, "cannot start the call");
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

  /* Circuit open: inside its window every req fails at once (the caller
     falls back); past it, this fetch is the half-open trial, on a fresh
     channel. */
  if (u->breaker.open) {
    if (!breaker_try_half_open(&u->breaker, now_s())) {
      snprintf(j->res.detail, sizeof(j->res.detail),
               "circuit breaker open: too many consecutive failures");
      j->res.err = -EAGAIN;
      for (i = 0; i < nreq; i++) {
        j->reqs[i].done = 1;
        u->inflight--;
      }
      j->ndone = nreq;
      /* Deliver from the loop, never from within the caller. */
      return 1;
    }
    log_info("source '%s': recovery window over, trying the upstream "
             "again", u->name);
    channel_reset(u, 1);
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
    free(j->reqs);
    free(j->buf);
    free(j);
    return r;
  }
  if (r == 1) {
    d = calloc(1, sizeof(*d));
    if (!d) {
      u->live--;
      free(j->reqs);
      free(j->buf);
      free(j);
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
  j = calloc(1, sizeof(*j));
  if (!j)
    return -ENOMEM;
  j->buf = malloc(n);
  if (!j->buf) {
    free(j);
    return -ENOMEM;
  }
  j->u = u;
  j->kind = KIND_BYTES;
  j->cb = cb;
  j->arg = arg;
  j->nonce = nonce & INT64_MAX;
  j->n = n;
  j->deadline = deadline_ns;
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
  j = calloc(1, sizeof(*j));
  if (!j)
    return -ENOMEM;
  j->u = u;
  j->kind = KIND_DRAW;
  j->cb = cb;
  j->arg = arg;
  j->nonce = nonce & INT64_MAX;
  snprintf(j->source_id, sizeof(j->source_id), "%s",
           source_id ? source_id : "");
  j->block_bytes = block_bytes;
  j->deadline = deadline_ns;
  return job_submit(u, j);
}

/* ---- set-up ----------------------------------------------------------- */

static char *
slurp(const char *path, size_t max, const char *what, char *err,
      size_t errlen)
{
  FILE *f;
  char *buf;
  size_t n;

  f = fopen(path, "re");
  if (!f) {
    snprintf(err, errlen, "cannot read %s '%s': %s", what, path,
             strerror(errno));
    return NULL;
  }
  buf = malloc(max + 1);
  n = buf ? fread(buf, 1, max + 1, f) : 0;
  fclose(f);
  if (!buf || n > max) {
    snprintf(err, errlen, "%s '%s' is larger than %zu bytes", what, path,
             max);
    free(buf);
    return NULL;
  }
  buf[n] = '\0';
  return buf;
}

static int
header_ok(const char *h)
{
  const char *p;

  if (!*h)
    return 0;
  for (p = h; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
          *p == '-' || *p == '_' || *p == '.'))
      return 0;
  return h[0] != ':' && strncmp(h, "grpc-", 5) != 0;
}

int
upstream_new(struct gbridge *br, const struct upstream_conf *c,
             struct upstream **ret, char *err, size_t errlen)
{
  struct upstream *u;
  grpc_ssl_pem_key_cert_pair pair;
  size_t n;
  int r = -ENOMEM;

  u = calloc(1, sizeof(*u));
  if (!u)
    return -ENOMEM;
  u->br = br;
  u->mode = c->mode;
  u->timeout_ms = c->timeout_ms;
  u->retry_count = c->retry_count;
  u->check_echo = c->check_echo;
  u->preprobe = c->preprobe;
  u->name = strdup(c->name);
  u->target = strdup(c->target);
  u->method = strdup(c->method ? c->method : GW_ENTROPY_METHOD);
  u->stream_method = strdup(c->stream_method ? c->stream_method :
                            GW_ENTROPY_STREAM_METHOD);
  u->draw_method = strdup(c->draw_method ? c->draw_method : GW_DRAW_METHOD);
  u->draw_stream_method = strdup(c->draw_stream_method ?
                                 c->draw_stream_method :
                                 GW_DRAW_STREAM_METHOD);
  u->header = strdup(c->api_key_header && *c->api_key_header ?
                     c->api_key_header : "api-key");
  u->server_name = strdup(c->server_name ? c->server_name : "");
  u->closing = 1;                     /* until fully built: maybe_free */
  if (!u->name || !u->target || !u->method || !u->stream_method ||
      !u->draw_method || !u->draw_stream_method || !u->header ||
      !u->server_name) {
    snprintf(err, errlen, "out of memory");
    goto fail;
  }
  r = -EINVAL;
  if (!header_ok(u->header)) {
    snprintf(err, errlen, "api_key_header '%s': must be lowercase letters, "
             "digits, '-', '_' or '.', not a reserved name", u->header);
    goto fail;
  }
  if (u->mode != UPSTREAM_UNARY && !*u->stream_method) {
    snprintf(err, errlen, "mode %s needs a stream method path",
             upstream_mode_name(u->mode));
    goto fail;
  }
  if (!*u->method && u->mode == UPSTREAM_UNARY) {
    snprintf(err, errlen, "mode unary needs a method path");
    goto fail;
  }
  if (c->api_key_file && *c->api_key_file) {
    u->api_key = slurp(c->api_key_file, UPSTREAM_MAX_KEY, "api_key_file",
                       err, errlen);
    if (!u->api_key) {
      r = -EACCES;
      goto fail;
    }
    n = strcspn(u->api_key, "\r\n");
    u->api_key[n] = '\0';
    u->api_key_len = n;
    if (n == 0) {
      snprintf(err, errlen, "api_key_file '%s' is empty", c->api_key_file);
      goto fail;
    }
  }
  if (c->insecure) {
    u->creds = grpc_insecure_credentials_create();
  } else {
    u->tls = 1;
    if (c->ca_file && *c->ca_file) {
      u->ca_pem = slurp(c->ca_file, 1 << 20, "tls ca_file", err, errlen);
      if (!u->ca_pem) {
        r = -EACCES;
        goto fail;
      }
    }
    if ((c->cert_file && *c->cert_file) != (c->key_file && *c->key_file)) {
      snprintf(err, errlen, "tls: cert_file and key_file go together");
      goto fail;
    }
    if (c->cert_file && *c->cert_file) {
      u->cert_pem = slurp(c->cert_file, 1 << 20, "tls cert_file", err,
                          errlen);
      u->key_pem = u->cert_pem ? slurp(c->key_file, 1 << 20,
                                       "tls key_file", err, errlen) : NULL;
      if (!u->key_pem) {
        r = -EACCES;
        goto fail;
      }
      pair.cert_chain = u->cert_pem;
      pair.private_key = u->key_pem;
    }
    u->creds = grpc_ssl_credentials_create(u->ca_pem,
                                           u->cert_pem ? &pair : NULL,
                                           NULL, NULL);
  }
  if (!u->creds) {
    snprintf(err, errlen, "cannot create the channel credentials");
    goto fail;
  }
  r = breaker_init(&u->breaker, &c->breaker);
  if (r < 0) {
    snprintf(err, errlen, "breaker parameters out of range");
    goto fail;
  }
  r = quota_init(&u->quota, &c->quota, c->state_dir, c->name, now_s(),
                 time(NULL), err, errlen);
  if (r < 0)
    goto fail;
  u->closing = 0;
  *ret = u;
  return 0;

fail:
  maybe_free(u);
  return r;
}

/* The exact daily count at shutdown (upstream_free(), or the last
   reservation write's completion after it). */
static void
quota_final_flush(struct upstream *u)
{
  int r = quota_flush(&u->quota, now_s(), time(NULL));

  if (r < 0)
    log_warn("source '%s': cannot save today's quota count: %s", u->name,
             strerror(-r));
}

void
upstream_free(struct upstream *u)
{
  struct attempt *a;
  int k;

  if (!u || u->closing)
    return;
  u->closing = 1;
  /* The exact count, now or (a reservation write in flight: two writers
     of one file) once that write is done. */
  if (!u->quota.pending)
    quota_final_flush(u);
  for (a = u->attempts; a; a = a->next)
    grpc_call_cancel(a->call, NULL);
  if (u->probe)                       /* its waiters fail on the next turn */
    uv_timer_start(&u->probe->timer, on_probe_timer, 0, 0);
  for (k = 0; k < 2; k++) {
    if (u->sess[k]) {
      session_kill(u->sess[k]);
      session_release(u->sess[k]);
      u->sess[k] = NULL;
    }
  }
  maybe_free(u);
}

/* Log a change of the state file's health once, not every fetch. */
static void
persist_log(struct upstream *u)
{
  if (u->quota.persist_error != u->persist_logged) {
    if (u->quota.persist_error)
      log_warn("source '%s': cannot save the daily quota count in %s: %s "
               "(a restart would forget today's use)", u->name,
               u->quota.path, strerror(-u->quota.persist_error));
    else
      log_info("source '%s': daily quota count saved again", u->name);
    u->persist_logged = u->quota.persist_error;
  }
}

/* A reservation of the daily count, written (durably: fsync) on a
   worker thread, never on the loop. */
struct qwrite {
  uv_work_t work;
  struct upstream *u;
  const char *path;                   /* u's: u outlives the work */
  uint64_t value;
  size_t len;
  int r;
  char buf[QUOTA_STATE_MAX];
};

static void
qwrite_work(uv_work_t *w)
{
  struct qwrite *q = w->data;

  q->r = atomicfile_write(q->path, q->buf, q->len, 1);
}

static void qwrite_start(struct upstream *u);

static void
qwrite_done(uv_work_t *w, int status)
{
  struct qwrite *q = w->data;
  struct upstream *u = q->u;

  quota_persist_done(&u->quota, q->value, status < 0 ? status : q->r);
  free(q);
  u->live--;
  if (u->closing) {
    /* upstream_free() left the exact count for after this write. */
    quota_final_flush(u);
  } else {
    persist_log(u);
    qwrite_start(u);
  }
  maybe_free(u);
}

static void
qwrite_start(struct upstream *u)
{
  struct qwrite *q;
  char buf[QUOTA_STATE_MAX];
  uint64_t value;
  size_t len;

  /* Most admissions: nothing due, nothing allocated. */
  if (!quota_persist_due(&u->quota, now_s(), time(NULL), buf, &len,
                         &value))
    return;
  q = malloc(sizeof(*q));
  if (!q) {
    quota_persist_done(&u->quota, value, -ENOMEM);
    persist_log(u);
    return;
  }
  memcpy(q->buf, buf, len);
  q->len = len;
  q->value = value;
  q->u = u;
  q->work.data = q;
  q->path = u->quota.path;
  if (uv_queue_work(u->br->loop, &q->work, qwrite_work, qwrite_done) < 0) {
    quota_persist_done(&u->quota, q->value, -ENOMEM);
    persist_log(u);
    free(q);
    return;
  }
  u->live++;
}

enum quota_verdict
upstream_admit(struct upstream *u, size_t n)
{
  enum quota_verdict v = quota_admit(&u->quota, n, now_s(), time(NULL));

  if (v == QUOTA_OK)
    qwrite_start(u);
  persist_log(u);
  return v;
}

int
upstream_draws_unsupported(const struct upstream *u)
{
  return u->draw_unimplemented_at &&
         now_ns() - u->draw_unimplemented_at < 60ull * 1000000000;
}

int
upstream_blocking(const struct upstream *u)
{
  return breaker_is_blocking(&u->breaker, now_s());
}

void
upstream_stats(struct upstream *u, struct upstream_stats *st)
{
  memset(st, 0, sizeof(*st));
  st->breaker_state = breaker_state_name(&u->breaker, now_s());
  st->p99_ms = u->breaker.p99_ms;
  st->timeout_ms = breaker_timeout_ms(&u->breaker);
  st->consecutive_failures = u->breaker.consecutive_failures;
  st->breaker_opened = u->breaker.opened_total;
  st->latency_samples = (uint32_t)u->breaker.count;
  st->calls = u->calls;
  st->failures = u->failures;
  st->timeouts = u->timeouts;
  st->echo_failures = u->echo_failures;
  st->validation_failures = u->validation_failures;
  st->channel_resets = u->resets;
  st->preprobes = u->probes;
  st->preprobe_failures = u->probe_failures;
  st->quota_minute_requests = quota_minute_requests(&u->quota, now_s());
  st->quota_day_bytes = quota_day_bytes(&u->quota, time(NULL));
  st->quota_refused_rpm = u->quota.refused_rpm;
  st->quota_refused_day = u->quota.refused_day;
  st->quota_rpm_limit = u->quota.p.max_requests_per_minute;
  st->quota_day_limit = u->quota.p.max_bytes_per_day;
  st->authenticated = u->api_key != NULL;
  st->tls = u->tls;
  st->mode = upstream_mode_name(u->mode);
  st->target = u->target;
}
