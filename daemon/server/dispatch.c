/* The requests of the native socket server (server_int.h says what the
   other pieces are): a complete frame's payload decoded in a fixed arena
   (whatever a peer packs into its 1 KiB, it cannot make us allocate
   more), checked (a request type, the protocol version, HELLO first, the
   connection's in-flight limit) and dispatched: HELLO answered here, DRAW
   and BYTES handed to the draw engine once their reply fits the
   connection's write queue and the memory budget (else BUSY), STATUS,
   HEALTH and SOURCES to report.c, RELOAD (privileged) to reload.c,
   SOURCE_CONTROL (privileged) to control.c.  A connection taken from the
   administrators' reserve gets BUSY for DRAW and BYTES. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "qrs-config.h"

#include <qrs/error.h>

#include "base/log.h"
#include "server/server_int.h"

#define DRAW_REPLY_MAX 1024           /* a DrawReply's encoded size bound */

static void
handle_hello(struct conn *c, uint32_t seq, const QrsIpc__Hello *m,
             uint16_t hdr_version)
{
  QrsIpc__HelloReply r = QRS_IPC__HELLO_REPLY__INIT;
  static char *features[] = { "draw", "bytes", "pipelining", "commitment",
                              "amp-params", "amp-exact", "amp-ecdf",
                              "amp-zscore-thought", "stat-monitor" };
  const char *def_type;
  struct server *srv;
  int def_production;

  srv = c->srv;
  if (m->protocol_version != QRS_PROTO_VERSION) {
    log_limited(&c->srv->rl_frame, LOG_LEVEL_WARN,
                "%s: client speaks protocol %u, we speak %u; closing",
                c->peer.name, m->protocol_version, QRS_PROTO_VERSION);
    conn_send_error(c, seq, QRS_E_VERSION,
                    "qrsd %s speaks protocol version %u, not %u",
                    QRS_VERSION, QRS_PROTO_VERSION, m->protocol_version);
    conn_close_after_flush(c);
    return;
  }
  free(c->client_name);
  c->client_name = strndup(m->client_name ? m->client_name : "", 64);
  c->hello_done = 1;
  log_debug("%s: hello from '%s'", c->peer.name,
            c->client_name ? c->client_name : "");

  r.protocol_version = QRS_PROTO_VERSION;
  r.server_version = (char *)QRS_VERSION;
  r.n_features = sizeof(features) / sizeof(features[0]);
  r.features = features;
  r.default_source = (char *)registry_default(srv->reg);
  r.default_sample_count = srv->conf->amp_sample_count;
  r.max_sample_count = srv->conf->max_sample_count;
  r.max_inflight = srv->conf->max_inflight;
  r.max_frame_bytes = srv->conf->max_frame_bytes;
  r.max_bytes_per_request = draw_max_bytes(srv->draw);
  registry_type(srv->reg, NULL, &def_type, &def_production);
  r.default_source_type = (char *)def_type;
  r.default_production = def_production;
  r.test_sources_allowed = srv->conf->allow_test_sources;
  r.max_reply_bytes = srv->max_reply_bytes;
  conn_send(c, QRS_MSG_HELLO_REPLY, seq, &r.base);
}

/* A DRAW or BYTES request handed to the draw engine: answered through
   on_reply(), exactly once.  It holds the connection (and an in-flight
   slot) until then. */
struct pending {
  struct conn *conn;
  uint32_t seq;
  size_t reserved;              /* bytes of reply budget held */
};

static void
on_reply(void *ctx, uint16_t type, const ProtobufCMessage *m)
{
  struct pending *p;
  struct conn *c;

  p = ctx;
  c = p->conn;
  c->reserved -= p->reserved;
  c->srv->mem_reserved -= p->reserved;
  if (type == QRS_MSG_ERROR)
    c->srv->errors++;
  else if (type == QRS_MSG_DRAW_REPLY)
    report_draw_served(c->srv, (const QrsIpc__DrawReply *)m);
  conn_send(c, type, p->seq, m);
  free(p);
  conn_request_done(c);
  conn_release(c);
}

/* Admit a request whose reply takes up to reply bytes and whose read
   takes up to read bytes, or answer BUSY to its seq and return NULL:
   the reply must fit the connection's write queue, everything must fit
   the memory budget, and the client's reads in progress (also those
   abandoned at their deadline) must fit its share. */
static struct pending *
pending_new(struct conn *c, uint32_t seq, size_t reply, size_t read)
{
  struct server *srv;
  struct pending *p;
  const char *why;
  size_t used;

  srv = c->srv;
  used = srv->mem_queued + srv->mem_reserved +
         registry_bytes_held(srv->reg);
  why = NULL;
  if (c->wq_bytes + c->reserved + reply > c->wq_max)
    why = "its replies are not being read";
  else if (used + reply + read > srv->conf->memory_budget)
    why = "the memory budget for requests in progress is used up";
  else if (c->owner.held + read > srv->read_max_per_conn)
    why = "its reads in progress use its share of the read budget";
  if (why) {
    log_limited(&srv->rl_busy, LOG_LEVEL_INFO, "%s: answering BUSY: %s",
                c->peer.name, why);
    srv->busy_total++;
    conn_send_error(c, seq, QRS_E_BUSY, "qrsd is busy: %s", why);
    return NULL;
  }
  p = malloc(sizeof(*p));
  if (!p) {
    log_err("%s: out of memory for a request", c->peer.name);
    conn_send_error(c, seq, -ENOMEM, "out of memory");
    return NULL;
  }
  p->conn = c;
  p->seq = seq;
  p->reserved = reply;
  c->reserved += reply;
  srv->mem_reserved += reply;
  c->inflight++;
  conn_hold(c);
  return p;
}

/* A privileged request (RELOAD, SOURCE_CONTROL): root, qrsd's own user
   or a member of access.admin_group; anyone else gets PERMISSION_DENIED
   saying why, and one rate-limited log line. */
static int
privileged(struct conn *c, uint32_t seq, uint16_t type)
{
  char why[160];
  uv_os_fd_t fd;

  if (!c->peer.has_cred || uv_fileno((uv_handle_t *)&c->pipe, &fd) < 0)
    snprintf(why, sizeof(why), "qrsd cannot read the peer's credentials "
             "(SO_PEERCRED)");
  else if (access_peer_admin(&c->srv->admin, fd, c->peer.uid, c->gid, why,
                             sizeof(why)))
    return 1;
  log_limited(&c->srv->rl_denied, LOG_LEVEL_WARN, "%s: %s refused: %s",
              c->peer.name, qrs__msg_name(type), why);
  conn_send_error(c, seq, QRS_E_PERMISSION, "%s is a privileged request: "
                  "%s", qrs__msg_name(type), why);
  return 0;
}

static void *
arena_alloc(void *data, size_t size)
{
  struct server *srv;
  void *p;

  srv = data;
  size = (size + 15) & ~(size_t)15;
  if (size > DECODE_ARENA - srv->arena_used)
    return NULL;
  p = srv->arena + srv->arena_used;
  srv->arena_used += size;
  return p;
}

static void
arena_free(void *data, void *p)
{
  (void)data;
  (void)p;
}

static int
is_request_type(uint16_t type)
{
  switch (type) {
  case QRS_MSG_HELLO:
  case QRS_MSG_DRAW:
  case QRS_MSG_BYTES:
  case QRS_MSG_STATUS:
  case QRS_MSG_HEALTH:
  case QRS_MSG_SOURCES:
  case QRS_MSG_RELOAD:
  case QRS_MSG_SOURCE_CONTROL:
    return 1;
  default:
    return 0;
  }
}

void
dispatch_frame(struct conn *c, const struct qrs_frame_hdr *h,
               const uint8_t *payload)
{
  const ProtobufCMessageDescriptor *desc;
  ProtobufCAllocator alloc;
  struct pending *p;
  struct server *srv;
  ProtobufCMessage *m;
  struct ts received;
  size_t n;

  srv = c->srv;
  ts_now(&received);
  srv->requests++;

  if (!is_request_type(h->type)) {
    log_limited(&c->srv->rl_frame, LOG_LEVEL_INFO,
                "%s: unsupported message type %u (%s)", c->peer.name, h->type,
                qrs__msg_name(h->type));
    conn_send_error(c, h->seq, QRS_E_UNSUPPORTED,
                    "message type %u is not a request this qrsd serves",
                    h->type);
    return;
  }
  if (h->version != QRS_PROTO_VERSION && h->type != QRS_MSG_HELLO) {
    log_limited(&c->srv->rl_frame, LOG_LEVEL_WARN,
                "%s: frame of protocol version %u; closing", c->peer.name,
                h->version);
    conn_send_error(c, h->seq, QRS_E_VERSION,
                    "frame of protocol version %u, qrsd speaks %u",
                    h->version, QRS_PROTO_VERSION);
    conn_close_after_flush(c);
    return;
  }
  desc = qrs__msg_descriptor(h->type);
  /* Decoding allocates from a fixed arena: whatever a peer packs into
     its 1 KiB, it cannot make us allocate more. */
  alloc.alloc = arena_alloc;
  alloc.free = arena_free;
  alloc.allocator_data = srv;
  srv->arena_used = 0;
  m = protobuf_c_message_unpack(desc, &alloc, h->length, payload);
  if (!m) {
    log_limited(&c->srv->rl_frame, LOG_LEVEL_WARN,
                "%s: %s payload of %u bytes does not decode; closing",
                c->peer.name, qrs__msg_name(h->type), h->length);
    conn_send_error(c, h->seq, QRS_E_PROTOCOL,
                    "%s payload does not decode", qrs__msg_name(h->type));
    conn_close_after_flush(c);
    return;
  }
  if (h->type == QRS_MSG_HELLO) {
    handle_hello(c, h->seq, (QrsIpc__Hello *)m, h->version);
    goto out;
  }
  if (!c->hello_done) {
    log_limited(&c->srv->rl_frame, LOG_LEVEL_INFO,
                "%s: %s before HELLO", c->peer.name, qrs__msg_name(h->type));
    conn_send_error(c, h->seq, QRS_E_HELLO_REQUIRED,
                    "send HELLO before %s", qrs__msg_name(h->type));
    goto out;
  }
  if (c->inflight >= srv->conf->max_inflight) {
    log_limited(&c->srv->rl_busy, LOG_LEVEL_INFO,
                "%s: more than %u requests in flight; answering BUSY",
                c->peer.name, srv->conf->max_inflight);
    srv->busy_total++;
    conn_send_error(c, h->seq, QRS_E_BUSY,
                    "more than %u requests in flight on this connection",
                    srv->conf->max_inflight);
    goto out;
  }

  if (c->in_reserve && (h->type == QRS_MSG_DRAW ||
                        h->type == QRS_MSG_BYTES)) {
    srv->busy_total++;
    conn_send_error(c, h->seq, QRS_E_BUSY, "this connection is one of the "
                    "%u reserved for administration "
                    "(limits.reserved_admin_connections): no %s on it",
                    srv->conf->max_connections -
                    server_open_connections(srv->conf),
                    qrs__msg_name(h->type));
    goto out;
  }

  switch (h->type) {
  case QRS_MSG_DRAW:
    n = ((QrsIpc__Draw *)m)->sample_count;
    if (n > srv->conf->max_sample_count)
      n = 0;                    /* refused by the engine */
    p = pending_new(c, h->seq, DRAW_REPLY_MAX, n);
    if (p)
      draw_handle(srv->draw, (QrsIpc__Draw *)m, &received, &c->peer,
                  &c->owner, on_reply, p);
    break;
  case QRS_MSG_BYTES:
    n = ((QrsIpc__Bytes *)m)->count;
    if (n > draw_max_bytes(srv->draw))
      n = 0;
    p = pending_new(c, h->seq, QRS_FRAME_HDR_SIZE + 512 + n, n);
    if (p)
      bytes_handle(srv->draw, (QrsIpc__Bytes *)m, &received, &c->peer,
                   &c->owner, on_reply, p);
    break;
  case QRS_MSG_STATUS:
    report_status(c, h->seq);
    break;
  case QRS_MSG_HEALTH:
    report_health(c, h->seq);
    break;
  case QRS_MSG_SOURCES:
    report_sources(c, h->seq);
    break;
  case QRS_MSG_RELOAD:
    if (privileged(c, h->seq, h->type))
      server_reload(srv, c, h->seq);
    break;
  case QRS_MSG_SOURCE_CONTROL:
    if (privileged(c, h->seq, h->type))
      control_handle(c, h->seq, (const QrsIpc__SourceControl *)m);
    break;
  }

out:
  protobuf_c_message_free_unpacked(m, &alloc);
}
