/* EntropyService / PurityService server on gRPC C-core; see gserve.h.

   Per call: a RECV_CLOSE_ON_SERVER batch from the start (tells us when the
   client goes away), then for a unary call the request that came with it,
   for a stream one RECV_MESSAGE at a time.  A call is freed when its last
   batch has completed and the backend has answered its request. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/grpc_security.h>

#include "base/container.h"
#include "base/log.h"
#include "base/keyfile.h"
#include "base/regfile.h"
#include "grpc/gserve.h"

enum kind {
  K_ENTROPY,
  K_ENTROPY_STREAM,
  K_DRAW,
  K_DRAW_STREAM,
  K_OTHER,
  K_COUNT
};

static const char *const method_path[K_OTHER] = {
  GW_ENTROPY_METHOD, GW_ENTROPY_STREAM_METHOD,
  GW_DRAW_METHOD, GW_DRAW_STREAM_METHOD,
};

struct gserve {
  struct gbridge *br;
  grpc_server *server;
  void *method[K_OTHER];
  struct gserve_backend be;
  char *api_key;
  size_t api_key_len;
  char *header;
  int verbose;
  int stopping;
  size_t calls;                     /* live call objects */
  uint64_t answered;
  struct gb_op shutdown_op;
  int shutdown_done;
  void (*on_stopped)(void *arg);
  void *stopped_arg;
};

struct gserve_call {
  struct gserve *g;
  enum kind kind;
  struct gb_op op_new, op_close, op_send, op_recv;
  grpc_call *call;
  gpr_timespec deadline;
  grpc_metadata_array md;
  grpc_call_details details;        /* K_OTHER */
  grpc_byte_buffer *payload;
  grpc_byte_buffer *out;
  int cancelled;
  int refs;                         /* batches + the backend's request */
  int started;                      /* initial metadata sent */
  int ended;                        /* status sent */
  int admitted;                     /* call_begin said yes */
  void *principal;
  struct gserve_req req;
};

static void request_new(struct gserve *g, enum kind k);
static void finish(struct gserve_call *c, int code, const char *details);

static void
maybe_stopped(struct gserve *g)
{
  if (!g->stopping || !g->shutdown_done || g->calls > 0)
    return;
  if (g->on_stopped)
    g->on_stopped(g->stopped_arg);
  if (g->api_key)
    explicit_bzero(g->api_key, g->api_key_len);
  free(g->api_key);
  free(g->header);
  free(g);
}

static void
call_unref(struct gserve_call *c)
{
  struct gserve *g = c->g;

  if (--c->refs > 0)
    return;
  grpc_byte_buffer_destroy(c->payload);    /* each takes NULL */
  grpc_byte_buffer_destroy(c->out);
  grpc_metadata_array_destroy(&c->md);
  if (c->kind == K_OTHER)
    grpc_call_details_destroy(&c->details);
  if (c->call)
    grpc_call_unref(c->call);
  if (c->admitted && g->be.call_end)
    g->be.call_end(g->be.ctx, c->principal, c->kind == K_ENTROPY_STREAM ||
                   c->kind == K_DRAW_STREAM);
  free(c);
  g->calls--;
  maybe_stopped(g);
}

/* The value of the api key header in md, or NULL. */
static const grpc_slice *
find_key(const struct gserve *g, const grpc_metadata_array *md)
{
  size_t i;

  for (i = 0; i < md->count; i++)
    if (grpc_slice_str_cmp(md->metadata[i].key, g->header) == 0)
      return &md->metadata[i].value;
  return NULL;
}

static int
key_ok(struct gserve *g, const grpc_metadata_array *md)
{
  const grpc_slice *v;
  unsigned diff;
  size_t j;

  if (!g->api_key)
    return 1;
  v = find_key(g, md);
  if (!v || GRPC_SLICE_LENGTH(*v) != g->api_key_len)
    return 0;
  diff = 0;                         /* constant time */
  for (j = 0; j < g->api_key_len; j++)
    diff |= GRPC_SLICE_START_PTR(*v)[j] ^ (uint8_t)g->api_key[j];
  return diff == 0;
}

/* May call c go on?  0, or the status it was refused with (sent). */
static int
admit_call(struct gserve_call *c)
{
  struct gserve *g = c->g;
  const grpc_slice *v;
  char why[256];
  int code;

  if (!g->be.call_begin) {
    if (key_ok(g, &c->md))
      return 0;
    finish(c, GRPC_STATUS_UNAUTHENTICATED, "missing or wrong api key");
    return GRPC_STATUS_UNAUTHENTICATED;
  }
  v = find_key(g, &c->md);
  why[0] = '\0';
  code = g->be.call_begin(g->be.ctx, v ? GRPC_SLICE_START_PTR(*v) : NULL,
                          v ? GRPC_SLICE_LENGTH(*v) : 0,
                          c->kind == K_ENTROPY_STREAM ||
                          c->kind == K_DRAW_STREAM, &c->principal, why,
                          sizeof(why));
  if (code == 0) {
    c->admitted = 1;
    return 0;
  }
  finish(c, code, why);
  return code;
}

/* A reply was sent: drop its buffer.  The call that carried the send
   comes from op. */
static struct gserve_call *
call_sent(struct gb_op *op)
{
  struct gserve_call *c = CONTAINER_OF(op, struct gserve_call, op_send);

  if (c->out) {
    grpc_byte_buffer_destroy(c->out);
    c->out = NULL;
  }
  return c;
}

static void
on_send_done(struct gb_op *op, int ok)
{
  call_unref(call_sent(op));
}

static void
finish(struct gserve_call *c, int code, const char *details)
{
  grpc_op ops[2];
  grpc_slice d = grpc_slice_from_copied_string(details ? details : "");
  size_t n = 0;

  if (c->ended) {
    grpc_slice_unref(d);
    return;
  }
  c->ended = 1;
  memset(ops, 0, sizeof(ops));
  if (!c->started) {
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    c->started = 1;
  }
  ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[n].data.send_status_from_server.status = (grpc_status_code)code;
  ops[n].data.send_status_from_server.status_details = &d;
  n++;
  c->refs++;
  if (gbridge_batch(c->call, ops, n, &c->op_send, on_send_done) !=
      GRPC_CALL_OK)
    call_unref(c);
  grpc_slice_unref(d);
  if (c->g->verbose && code != GRPC_STATUS_OK)
    log_info("gRPC %s: status %d (%s)", c->kind < K_OTHER ?
             method_path[c->kind] : "call", code, details ? details : "");
}

static void on_recv(struct gb_op *op, int ok);

static void
recv_next(struct gserve_call *c)
{
  grpc_op ops[2];
  size_t n = 0;

  memset(ops, 0, sizeof(ops));
  if (!c->started) {
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    c->started = 1;
  }
  ops[n].op = GRPC_OP_RECV_MESSAGE;
  ops[n].data.recv_message.recv_message = &c->payload;
  n++;
  c->refs++;
  if (gbridge_batch(c->call, ops, n, &c->op_recv, on_recv) != GRPC_CALL_OK)
    call_unref(c);
}

static void
on_stream_send_done(struct gb_op *op, int ok)
{
  struct gserve_call *c;

  c = call_sent(op);
  if (ok && !c->cancelled && !c->g->stopping)
    recv_next(c);
  call_unref(c);
}

static void
send_reply(struct gserve_call *c, const uint8_t *msg, size_t len)
{
  grpc_op ops[3];
  grpc_slice d = grpc_empty_slice();
  size_t n = 0;
  int stream = c->kind == K_ENTROPY_STREAM || c->kind == K_DRAW_STREAM;

  if (c->ended)
    return;
  memset(ops, 0, sizeof(ops));
  c->out = gbridge_buffer(msg, len);
  if (!c->started) {
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    c->started = 1;
  }
  ops[n].op = GRPC_OP_SEND_MESSAGE;
  ops[n].data.send_message.send_message = c->out;
  n++;
  if (!stream) {
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = GRPC_STATUS_OK;
    ops[n].data.send_status_from_server.status_details = &d;
    n++;
    c->ended = 1;
  }
  c->refs++;
  c->g->answered++;
  if (gbridge_batch(c->call, ops, n, &c->op_send,
                    stream ? on_stream_send_done : on_send_done) !=
      GRPC_CALL_OK)
    call_unref(c);
}

void
gserve_reply_entropy(struct gserve_req *r, const struct gw_entropy_resp *m)
{
  struct gserve_call *c = r->call;
  size_t cap = gw_entropy_resp_bound(m->data.len, m->device_id.len), len;
  uint8_t *msg = malloc(cap);

  if (!msg) {
    finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
  } else {
    len = gw_entropy_resp_encode(m, msg, cap);
    send_reply(c, msg, len);
    free(msg);
  }
  call_unref(c);
}

void
gserve_reply_draw(struct gserve_req *r, const struct gw_draw_resp *m)
{
  struct gserve_call *c = r->call;
  uint8_t msg[GW_MAX_REQUEST + 1024];
  size_t len = gw_draw_resp_encode(m, msg, sizeof(msg));

  if (len > sizeof(msg))
    finish(c, GRPC_STATUS_INTERNAL, "draw reply too large");
  else
    send_reply(c, msg, len);
  call_unref(c);
}

void
gserve_reply_error(struct gserve_req *r, int grpc_status, const char *msg)
{
  struct gserve_call *c = r->call;

  finish(c, grpc_status, msg);
  call_unref(c);
}

/* Decode the request in c->payload and hand it to the backend. */
static void
take_request(struct gserve_call *c)
{
  struct gserve_req *r = &c->req;
  grpc_slice sl = gbridge_read_all(c->payload);
  const uint8_t *p = GRPC_SLICE_START_PTR(sl);
  size_t len = GRPC_SLICE_LENGTH(sl);
  struct timespec ts;
  int bad;

  grpc_byte_buffer_destroy(c->payload);
  c->payload = NULL;
  memset(r, 0, sizeof(*r));
  r->call = c;
  r->principal = c->principal;
  r->draw = c->kind == K_DRAW || c->kind == K_DRAW_STREAM;
  r->stream = c->kind == K_ENTROPY_STREAM || c->kind == K_DRAW_STREAM;
  clock_gettime(CLOCK_REALTIME, &ts);
  r->received_ns = (uint64_t)ts.tv_sec * 1000000000u +
                   (uint64_t)ts.tv_nsec;
  if (r->draw) {
    bad = len > GW_MAX_REQUEST || gw_draw_req_decode(p, len, &r->drw) < 0 ||
          r->drw.source_id.len > GW_MAX_ID;
    if (!bad) {
      if (r->drw.source_id.len)
        memcpy(r->source_id, r->drw.source_id.data, r->drw.source_id.len);
      r->source_id[r->drw.source_id.len] = '\0';
      r->drw.source_id.data = (const uint8_t *)r->source_id;
    }
  } else {
    bad = len > GW_MAX_REQUEST || gw_entropy_req_decode(p, len,
                                                        &r->entropy) < 0;
  }
  grpc_slice_unref(sl);
  if (bad) {
    finish(c, GRPC_STATUS_INVALID_ARGUMENT, "malformed request");
    return;
  }
  c->refs++;                        /* until the backend answers */
  c->g->be.request(c->g->be.ctx, r);
}

static void
on_recv(struct gb_op *op, int ok)
{
  struct gserve_call *c = CONTAINER_OF(op, struct gserve_call, op_recv);

  if (!ok || !c->payload || c->cancelled || c->g->stopping) {
    /* The client half-closed (or went away): end the stream. */
    if (!c->cancelled)
      finish(c, GRPC_STATUS_OK, "");
  } else {
    take_request(c);
  }
  call_unref(c);
}

static void
on_close(struct gb_op *op, int ok)
{
  struct gserve_call *c = CONTAINER_OF(op, struct gserve_call, op_close);

  call_unref(c);
}

static void
on_new(struct gb_op *op, int ok)
{
  struct gserve_call *c = CONTAINER_OF(op, struct gserve_call, op_new);
  struct gserve *g = c->g;
  grpc_op close_op;

  c->refs = 1;
  if (!ok || g->stopping) {
    call_unref(c);                  /* a pending request coming back */
    return;
  }
  request_new(g, c->kind);

  memset(&close_op, 0, sizeof(close_op));
  close_op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  close_op.data.recv_close_on_server.cancelled = &c->cancelled;
  if (gbridge_batch(c->call, &close_op, 1, &c->op_close, on_close) !=
      GRPC_CALL_OK) {
    call_unref(c);
    return;
  }
  c->refs++;                        /* held while we decide */
  if (c->kind == K_OTHER)
    finish(c, GRPC_STATUS_UNIMPLEMENTED, "method not implemented");
  else if (admit_call(c) != 0)
    ;                               /* refused: its status is sent */
  else if (c->kind == K_ENTROPY_STREAM || c->kind == K_DRAW_STREAM)
    recv_next(c);
  else if (!c->payload)
    finish(c, GRPC_STATUS_INVALID_ARGUMENT, "no request message");
  else
    take_request(c);
  call_unref(c);
}

static void
request_new(struct gserve *g, enum kind k)
{
  struct gserve_call *c;
  grpc_call_error e;

  if (g->stopping)
    return;
  c = calloc(1, sizeof(*c));
  if (!c) {
    log_err("gRPC server: out of memory, not accepting %s calls",
            k < K_OTHER ? method_path[k] : "other");
    return;
  }
  c->g = g;
  c->kind = k;
  c->op_new.cb = on_new;
  grpc_metadata_array_init(&c->md);
  g->calls++;
  if (k == K_OTHER) {
    grpc_call_details_init(&c->details);
    e = grpc_server_request_call(g->server, &c->call, &c->details, &c->md,
                                 g->br->cq, g->br->cq, &c->op_new);
  } else {
    e = grpc_server_request_registered_call(g->server, g->method[k],
          &c->call, &c->deadline, &c->md,
          k == K_ENTROPY || k == K_DRAW ? &c->payload : NULL,
          g->br->cq, g->br->cq, &c->op_new);
  }
  if (e != GRPC_CALL_OK) {
    log_err("gRPC server: cannot accept calls (error %d)", (int)e);
    c->refs = 1;
    call_unref(c);
  }
}

/* A PEM file (a regular file, links followed: secrets are often mounted
   as links), or NULL with err set. */
static char *
read_pem(const char *path, char *err, size_t errlen)
{
  char *buf;

  if (regfile_read(path, REGFILE_FOLLOW, 1 << 20, &buf, NULL, err,
                   errlen) < 0)
    return NULL;
  return buf;
}

static grpc_server_credentials *
make_creds(const struct gserve_conf *c, char *err, size_t errlen)
{
  grpc_ssl_pem_key_cert_pair pair;
  grpc_server_credentials *creds = NULL;
  char *cert = NULL, *key = NULL, *ca = NULL;

  if (!c->tls_cert)
    return grpc_insecure_server_credentials_create();
  cert = read_pem(c->tls_cert, err, errlen);
  if (cert && keyfile_read(c->tls_key, KEYFILE_PRIVATE, 1 << 20, &key, NULL,
                           err, errlen) < 0)
    key = NULL;
  if (key && c->tls_client_ca)
    ca = read_pem(c->tls_client_ca, err, errlen);
  if (cert && key && (ca || !c->tls_client_ca)) {
    pair.cert_chain = cert;
    pair.private_key = key;
    creds = grpc_ssl_server_credentials_create_ex(ca, &pair, 1,
              ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                 : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE, NULL);
    if (!creds)
      snprintf(err, errlen, "TLS certificate or key not usable");
  }
  if (key)
    explicit_bzero(key, strlen(key));
  free(cert);
  free(key);
  free(ca);
  return creds;
}

int
gserve_start(struct gbridge *br, const struct gserve_conf *conf,
             const struct gserve_backend *backend, struct gserve **ret,
             int *ret_port, char *err, size_t errlen)
{
  struct gserve *g;
  grpc_server_credentials *creds;
  grpc_arg arg[3];
  grpc_channel_args args;
  int k, port;

  g = calloc(1, sizeof(*g));
  if (!g)
    return -ENOMEM;
  g->br = br;
  g->be = *backend;
  g->verbose = conf->verbose;
  g->header = strdup(conf->api_key_header ? conf->api_key_header :
                     "api-key");
  if (conf->api_key) {
    g->api_key = malloc(conf->api_key_len + 1);
    if (g->api_key) {
      memcpy(g->api_key, conf->api_key, conf->api_key_len);
      g->api_key[conf->api_key_len] = '\0';
      g->api_key_len = conf->api_key_len;
    }
  }
  if (!g->header || (conf->api_key && !g->api_key)) {
    free(g->header);
    free(g->api_key);
    free(g);
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  creds = make_creds(conf, err, errlen);
  if (!creds) {
    free(g->header);
    free(g->api_key);
    free(g);
    return -EINVAL;
  }
  /* Requests are a few bytes: refuse anything large before decoding. */
  memset(arg, 0, sizeof(arg));
  arg[0].type = GRPC_ARG_INTEGER;
  arg[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  arg[0].value.integer = 64 * 1024;
  args.num_args = 1;
  if (conf->handshake_timeout_ms > 0) {
    arg[args.num_args].type = GRPC_ARG_INTEGER;
    arg[args.num_args].key = (char *)GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS;
    arg[args.num_args].value.integer = conf->handshake_timeout_ms;
    args.num_args++;
  }
  if (conf->idle_timeout_ms > 0) {
    arg[args.num_args].type = GRPC_ARG_INTEGER;
    arg[args.num_args].key = (char *)GRPC_ARG_MAX_CONNECTION_IDLE_MS;
    arg[args.num_args].value.integer = conf->idle_timeout_ms;
    args.num_args++;
  }
  args.args = arg;
  g->server = grpc_server_create(&args, NULL);
  grpc_server_register_completion_queue(g->server, br->cq, NULL);
  for (k = 0; k < K_OTHER; k++) {
    if (conf->refuse_purity && (k == K_DRAW || k == K_DRAW_STREAM))
      continue;
    g->method[k] = grpc_server_register_method(g->server, method_path[k],
      NULL, k == K_ENTROPY || k == K_DRAW ?
      GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER : GRPC_SRM_PAYLOAD_NONE, 0);
  }
  port = grpc_server_add_http2_port(g->server, conf->listen, creds);
  grpc_server_credentials_release(creds);
  if (port == 0) {
    snprintf(err, errlen, "cannot listen on '%s'", conf->listen);
    grpc_server_destroy(g->server);   /* no listener: allowed */
    free(g->header);
    free(g->api_key);
    free(g);
    return -EADDRNOTAVAIL;
  }
  grpc_server_start(g->server);
  for (k = 0; k < K_COUNT; k++)
    if (k == K_OTHER || g->method[k])
      request_new(g, (enum kind)k);
  *ret = g;
  if (ret_port)
    *ret_port = port;
  return 0;
}

static void
on_shutdown(struct gb_op *op, int ok)
{
  struct gserve *g = CONTAINER_OF(op, struct gserve, shutdown_op);

  grpc_server_destroy(g->server);
  g->server = NULL;
  g->shutdown_done = 1;
  maybe_stopped(g);
}

void
gserve_stop(struct gserve *g, void (*on_stopped)(void *arg), void *arg)
{
  if (!g || g->stopping)
    return;
  g->stopping = 1;
  g->on_stopped = on_stopped;
  g->stopped_arg = arg;
  g->shutdown_op.cb = on_shutdown;
  grpc_server_shutdown_and_notify(g->server, g->br->cq, &g->shutdown_op);
  grpc_server_cancel_all_calls(g->server);
}

uint64_t
gserve_answered(const struct gserve *g)
{
  return g->answered;
}
