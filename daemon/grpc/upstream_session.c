/* The bidi sessions of a gRPC upstream in bidi_streaming mode (see
   upstream_int.h for the pieces of the upstream).

   A session is one long-lived stream of a kind (bytes: StreamEntropy,
   draws: StreamDraws) on which reqs queue in FIFO order: requests are
   pipelined, an entry past its deadline fails its req and stays as a
   tombstone for its late reply, and too many tombstones restart the
   stream.  When the stream ends, every req still on it fails (and may be
   retried on a new one).

   Every request carries a sequence id unique on its stream: the nonce,
   or a fresh id when there is none or the nonce is taken (outstanding,
   or answered on this stream before: the parts of a split fetch).  With
   check_echo (the default) a reply goes to the sent entry whose id it
   echoes, and a reply that matches none - a duplicate, an extra reply, a
   reply to a request not sent yet, one that echoes 0 or does not decode
   - fails the stream: everything waiting on it fails over (-EPROTO) and
   the upstream is quarantined (upstream__violation()), so that no reply
   is ever taken for another request's.  check_echo false (field 2 is no
   echo) keeps the reference's matching: the echoed entry, else the
   oldest; a reply while nothing is awaited still fails the stream.

   Owns struct session; calls back into upstream.c
   (upstream__attempt_result(), upstream__violation()) and uses the
   channel's calls (upstream_channel.c). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/container.h"
#include "base/log.h"
#include "grpc/upstream_int.h"

#define MAX_TOMBSTONES 16             /* timed-out reqs before a reset */
#define SPENT_MAX 64                  /* answered ids remembered */

/* An entry of a session's FIFO: a live req, or the tombstone of one
   that timed out (its late reply must be matched and dropped). */
struct entry {
  struct upreq *r;                      /* NULL: tombstone */
  uint64_t key;                       /* the sequence id it carries */
  uint64_t deadline;                  /* ns, hrtime */
  TAILQ_ENTRY(entry) link;
};

struct session {
  struct upstream *u;
  enum upkind kind;
  struct upcall gc;
  struct gb_op op_start, op_recv, op_send, op_status;
  int refs;                           /* batches + timer + owner */
  int dead;
  int recv_busy;                      /* a batch with RECV_MESSAGE is out */
  int send_in_recv;                   /* ... and it carries s->gc.send */
  TAILQ_HEAD(, entry) fifo;           /* sent, then unsent entries */
  struct entry *unsent;               /* first entry not yet written */
  size_t count, tombstones;
  uint64_t spent[SPENT_MAX];          /* ids answered, a ring */
  size_t spent_next;
  uv_timer_t timer;
};

static void
session_kill(struct session *s)
{
  if (!s)
    return;
  s->dead = 1;
  if (s->gc.call)
    grpc_call_cancel(s->gc.call, NULL);
}

static void
session_release(struct session *s)
{
  struct upstream *u = s->u;
  struct entry *e;

  if (--s->refs > 0)
    return;
  while (!TAILQ_EMPTY(&s->fifo)) {
    e = TAILQ_FIRST(&s->fifo);
    TAILQ_REMOVE(&s->fifo, e, link);
    free(e);
  }
  upstream__call_close(&s->gc);
  free(s);
  u->live--;
  upstream__maybe_free(u);
}

static void
on_session_timer_closed(uv_handle_t *h)
{
  session_release(h->data);
}

/* Remove e from the FIFO. */
static void
entry_unlink(struct session *s, struct entry *e)
{
  if (s->unsent == e)
    s->unsent = TAILQ_NEXT(e, link);
  TAILQ_REMOVE(&s->fifo, e, link);
  if (!e->r)
    s->tombstones--;
  s->count--;
  free(e);
}

/* The oldest entry if it was sent (it awaits the next reply), else NULL. */
static struct entry *
oldest_sent(struct session *s)
{
  struct entry *e;

  e = TAILQ_FIRST(&s->fifo);
  return e != s->unsent ? e : NULL;
}

/* The entry carrying id, or NULL. */
static struct entry *
entry_find(struct session *s, uint64_t id)
{
  struct entry *e;

  TAILQ_FOREACH(e, &s->fifo, link)
    if (e->key == id)
      return e;
  return NULL;
}

/* Was id answered on this stream (within the last SPENT_MAX replies)? */
static int
spent(const struct session *s, uint64_t id)
{
  size_t i;

  for (i = 0; i < SPENT_MAX; i++)
    if (s->spent[i] == id)
      return 1;
  return 0;
}

/* The sequence id for r on s: its nonce unless taken, else a fresh one. */
static uint64_t
session_key(struct session *s, struct upreq *r)
{
  uint64_t id = r->job->nonce;

  while (id == 0 || entry_find(s, id) || spent(s, id))
    id = upstream__fresh_seq(s->u);
  return id;
}

/* The stream is gone: every live req on it fails (and may retry). */
static void
session_fail_all(struct session *s, int err, int status, const char *why)
{
  struct entry *e;
  struct upreq *r;

  s->dead = 1;
  if (s->u->sess[s->kind] == s) {
    s->u->sess[s->kind] = NULL;
    session_release(s);               /* the owner's reference */
  }
  while (!TAILQ_EMPTY(&s->fifo)) {
    e = TAILQ_FIRST(&s->fifo);
    r = e->r;
    entry_unlink(s, e);
    if (r) {
      r->sess = NULL;
      upstream__attempt_result(r, err, status, NULL, 0, why);
    }
  }
}

static void session_pump(struct session *s);
static void on_session_recv(struct gb_op *op, int ok);
static void on_session_timer(uv_timer_t *t);

static void
on_session_started(struct gb_op *op, int ok)
{
  session_release(CONTAINER_OF(op, struct session, op_start));
}

static void
on_session_send(struct gb_op *op, int ok)
{
  struct session *s = CONTAINER_OF(op, struct session, op_send);

  grpc_byte_buffer_destroy(s->gc.send);
  s->gc.send = NULL;
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
  send = s->unsent && !s->gc.send;
  recv = !s->recv_busy && oldest_sent(s);
  if (send && !s->recv_busy && !recv && !TAILQ_NEXT(s->unsent, link))
    recv = 1;                         /* idle stream: one batch */
  else if (send && recv)
    recv = 0, send = 1;               /* pipelining: separate batches */
  if (!send && !recv)
    return;
  memset(ops, 0, sizeof(ops));
  if (send) {
    len = upstream__encode_request(s->unsent->r, buf, sizeof(buf));
    s->unsent = TAILQ_NEXT(s->unsent, link);
    s->gc.send = gbridge_buffer(buf, (size_t)len);
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = s->gc.send;
  }
  if (recv) {
    ops[n].op = GRPC_OP_RECV_MESSAGE;
    ops[n++].data.recv_message.recv_message = &s->gc.recv;
  }
  op = recv ? &s->op_recv : &s->op_send;
  cb = recv ? on_session_recv : on_session_send;
  s->refs++;
  if (gbridge_batch(s->gc.call, ops, n, op, cb) != GRPC_CALL_OK) {
    if (send) {
      grpc_byte_buffer_destroy(s->gc.send);
      s->gc.send = NULL;
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

/* The sent entry a reply (decoded: ok; echoing seq) answers, or NULL
   with why filled in: it matches none (see the top of the file). */
static struct entry *
session_match(struct session *s, int decoded, uint64_t seq, char *why,
              size_t len)
{
  struct entry *e, *oldest = oldest_sent(s), *x;

  if (!oldest) {
    snprintf(why, len, "a reply (echoing sequence_id %llu) while no "
             "request awaited one", (unsigned long long)seq);
    return NULL;
  }
  e = seq ? entry_find(s, seq) : NULL;
  /* The unsent entries are s->unsent and all after it. */
  for (x = s->unsent; e && x; x = TAILQ_NEXT(x, link)) {
    if (x == e) {
      snprintf(why, len, "a reply to request %llu, which was not sent "
               "yet", (unsigned long long)seq);
      return NULL;
    }
  }
  if (!s->u->check_echo)
    return e ? e : oldest;
  if (e)
    return e;
  if (!decoded)
    snprintf(why, len, "a reply that does not decode");
  else if (!seq)
    snprintf(why, len, "a reply echoing no sequence_id (its request "
             "cannot be told)");
  else
    snprintf(why, len, spent(s, seq) ?
             "a second reply to request %llu (already answered)" :
             "a reply echoing sequence_id %llu, which no request on the "
             "stream carries", (unsigned long long)seq);
  return NULL;
}

/* A reply matched no request: fail everything waiting on the stream
   (it fails over, or retries once the quarantine is over), end it. */
static void
session_violation(struct session *s, const char *why)
{
  char detail[200];

  upstream__violation(s->u, why);
  snprintf(detail, sizeof(detail), "bidi stream: %s", why);
  session_fail_all(s, -EPROTO, 0, detail);
  session_kill(s);
}

static void
on_session_recv(struct gb_op *op, int ok)
{
  struct session *s = CONTAINER_OF(op, struct session, op_recv);
  struct entry *match;
  struct gw_entropy_resp er;
  struct gw_draw_resp dr;
  grpc_slice sl;
  uint64_t seq;
  struct upreq *r;
  char why[160];
  int decoded;

  s->recv_busy = 0;
  if (s->send_in_recv) {
    grpc_byte_buffer_destroy(s->gc.send);
    s->gc.send = NULL;
    s->send_in_recv = 0;
  }
  if (!ok || !s->gc.recv) {
    /* End of stream; the status batch says why and fails the rest. */
    s->dead = 1;
    session_release(s);
    return;
  }
  sl = gbridge_read_all(s->gc.recv);
  grpc_byte_buffer_destroy(s->gc.recv);
  s->gc.recv = NULL;
  if (s->kind == KIND_BYTES) {
    decoded = gw_entropy_resp_decode(GRPC_SLICE_START_PTR(sl),
                                     GRPC_SLICE_LENGTH(sl), &er) == 0;
    seq = decoded ? er.sequence_id : 0;
  } else {
    decoded = gw_draw_resp_decode(GRPC_SLICE_START_PTR(sl),
                                  GRPC_SLICE_LENGTH(sl), &dr) == 0;
    seq = decoded ? dr.sequence_id : 0;
  }
  match = session_match(s, decoded, seq, why, sizeof(why));
  if (!match) {
    grpc_slice_unref(sl);
    session_violation(s, why);
    session_release(s);
    return;
  }
  s->spent[s->spent_next++ % SPENT_MAX] = match->key;
  r = match->r;
  entry_unlink(s, match);
  if (r) {
    r->sess = NULL;
    upstream__attempt_result(r, 0, GRPC_STATUS_OK,
                             GRPC_SLICE_START_PTR(sl),
                             GRPC_SLICE_LENGTH(sl), NULL);
  }
  grpc_slice_unref(sl);
  session_pump(s);                    /* the next send and/or receive */
  session_release(s);
}

static void
on_session_status(struct gb_op *op, int ok)
{
  struct session *s = CONTAINER_OF(op, struct session, op_status);
  char why[200];
  int err;

  uv_timer_stop(&s->timer);
  err = upstream__status_err(s->gc.status);
  if (err == 0)
    err = -EHOSTUNREACH;
  upstream__status_detail(why, sizeof(why), s->gc.status, s->gc.details);
  if (strlen(why) + 20 < sizeof(why) && s->gc.status == GRPC_STATUS_OK)
    strcat(why, " (stream ended)");
  session_fail_all(s, err, s->gc.status, why);
  uv_close((uv_handle_t *)&s->timer, on_session_timer_closed);
  session_release(s);
}

static void
session_arm(struct session *s)
{
  struct entry *e;
  uint64_t t = upstream__now_ns(), first = UINT64_MAX;

  TAILQ_FOREACH(e, &s->fifo, link)
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
  struct entry *e;
  int sent;
  struct upreq *r;
  uint64_t now = upstream__now_ns();
  int again;

  do {
    again = 0;
    sent = 1;
    TAILQ_FOREACH(e, &s->fifo, link) {
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
        entry_unlink(s, e);           /* never sent: no reply will come */
      }
      r->sess = NULL;
      upstream__attempt_result(r, -ETIMEDOUT, GRPC_STATUS_DEADLINE_EXCEEDED,
                               NULL, 0,
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
session_open(struct upstream *u, enum upkind kind)
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
  TAILQ_INIT(&s->fifo);
  uv_timer_init(u->br->loop, &s->timer);
  s->timer.data = s;
  s->refs = 2;                        /* owner + timer */
  u->live++;
  upstream__call_open(u, &s->gc, method, -1);

  /* The metadata batch (in gRPC C-core a call needs
     RECV_INITIAL_METADATA or its messages never arrive); the messages
     follow in session_pump(), the status batch says when the stream
     ends. */
  memset(ops, 0, sizeof(ops));
  upstream__op_initial_md(u, &ops[0], &md);
  ops[1].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[1].data.recv_initial_metadata.recv_initial_metadata = &s->gc.imd;
  if (gbridge_batch(s->gc.call, ops, 2, &s->op_start, on_session_started) ==
      GRPC_CALL_OK)
    s->refs++;
  if (upstream__call_status(&s->gc, &s->op_status, on_session_status) ==
      GRPC_CALL_OK) {
    s->refs++;
  } else {
    /* No status will come: undo by hand. */
    s->dead = 1;
    grpc_call_cancel(s->gc.call, NULL);
    uv_close((uv_handle_t *)&s->timer, on_session_timer_closed);
    session_release(s);
    return NULL;
  }
  return s;
}

int
upstream__session_submit(struct upreq *r)
{
  struct upstream *u = r->job->u;
  enum upkind kind = r->job->kind;
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
  e->key = r->seq = session_key(s, r);
  e->deadline = r->t0 + (uint64_t)(r->timeout_ms * 1e6);
  TAILQ_INSERT_TAIL(&s->fifo, e, link);
  if (!s->unsent)
    s->unsent = e;
  s->count++;
  r->sess = s;
  session_pump(s);
  session_arm(s);
  return 0;
}

void
upstream__sessions_close(struct upstream *u)
{
  int k;

  for (k = 0; k < 2; k++) {
    if (u->sess[k]) {
      session_kill(u->sess[k]);
      session_release(u->sess[k]);
      u->sess[k] = NULL;
    }
  }
}
