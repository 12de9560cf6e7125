#define _GNU_SOURCE
/* The qrsd server: listening socket, connections, framing, dispatch.

   Everything here runs on the loop thread.  Every buffer a peer can grow
   has a cap: a connection's read buffer holds at most one maximal frame,
   its queued replies at most wq_max bytes (beyond that we stop reading
   from it until the peer catches up), and its requests in flight at most
   limits.max_inflight_per_connection (beyond that: BUSY). */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "qrs-config.h"

#include <qrs/error.h>

#include "engine/draw.h"
#include "sources/local.h"
#include "stats/monitor.h"
#include "base/log.h"
#include "server/server.h"

#define RBUF_INITIAL (16 * 1024)
#define WQ_MIN_CAP (4 * 1024 * 1024)
#define DECODE_ARENA (64 * 1024)      /* protobuf-c's allocations for one
                                         request of at most 1 KiB */
#define DRAW_REPLY_MAX 1024           /* a DrawReply's encoded size bound */
#define SWEEP_MS 100                  /* how often deadlines are checked */
#define REFUSED_SLACK 64              /* refused connections kept to answer
                                         BUSY; beyond: closed at once */

struct conn {
  uv_pipe_t pipe;               /* handle.data points back here */
  struct server *srv;
  struct conn *prev;
  struct conn *next;
  uint64_t id;
  char name[96];                /* "conn 3 (pid 42, uid 1000)" */

  uint8_t *rbuf;
  size_t rlen;
  size_t rcap;
  size_t rmax;                  /* header + max frame */

  size_t wq_bytes;              /* queued in uv_write, not yet written */
  size_t wq_max;
  uint32_t inflight;            /* requests taken, not yet answered */
  unsigned refs;                /* 1 for the handle + 1 per worker job */

  int hello_done;
  int reading;
  int closing;                  /* uv_close called or flushing to close */
  char *client_name;

  uid_t uid;
  int has_uid;
  int refused;                  /* over a connection limit: the first
                                   frame is answered BUSY, then close */
  char refuse_msg[96];
  int64_t accepted_ns;          /* CLOCK_MONOTONIC */
  int64_t partial_ns;           /* an incomplete frame began; 0: none */
  int64_t active_ns;            /* last byte read or reply sent */
  size_t reserved;              /* reply bytes reserved for requests */
  struct reg_owner owner;       /* its reads in progress */
};

/* A queued write.  The frame is packed straight into data, and what
   uv_try_write() did not take is written from there: a reply is copied
   once, by the encoder (issue 11 item 4). */
struct wreq {
  uv_write_t req;
  struct conn *conn;
  size_t len;                   /* bytes still to write */
  uint8_t data[];
};

static void conn_close(struct conn *c);
static void conn_send_error(struct conn *c, uint32_t seq, int err,
                            const char *fmt, ...)
  __attribute__((format(printf, 4, 5)));
static void conn_close_after_flush(struct conn *c);
static void conn_update_reading(struct conn *c);
static void server_maybe_stopped(struct server *srv);

/* ---- connections: lifetime ------------------------------------------ */

static void
conn_hold(struct conn *c)
{
  c->refs++;
}

static void
conn_free(struct conn *c)
{
  free(c->rbuf);
  free(c->client_name);
  free(c);
}

static void
conn_release(struct conn *c)
{
  if (--c->refs == 0)
    conn_free(c);
}

static void
on_conn_closed(uv_handle_t *h)
{
  struct conn *c;
  struct server *srv;

  c = h->data;
  srv = c->srv;
  if (c->prev)
    c->prev->next = c->next;
  else
    srv->conns = c->next;
  if (c->next)
    c->next->prev = c->prev;
  srv->n_conns--;
  if (c->refused)
    srv->n_refused--;
  log_debug("%s: closed", c->name);
  conn_release(c);
  server_maybe_stopped(srv);
}

static void
conn_close(struct conn *c)
{
  if (uv_is_closing((uv_handle_t *)&c->pipe))
    return;
  c->closing = 1;
  uv_close((uv_handle_t *)&c->pipe, on_conn_closed);
}

static void
on_shutdown(uv_shutdown_t *req, int status)
{
  struct conn *c;

  c = req->data;
  free(req);
  conn_close(c);
}

/* Send what is queued, then close. */
static void
conn_close_after_flush(struct conn *c)
{
  uv_shutdown_t *req;

  if (c->closing)
    return;
  c->closing = 1;
  uv_read_stop((uv_stream_t *)&c->pipe);
  c->reading = 0;
  req = malloc(sizeof(*req));
  if (!req) {
    c->closing = 0;
    conn_close(c);
    return;
  }
  req->data = c;
  if (uv_shutdown(req, (uv_stream_t *)&c->pipe, on_shutdown) < 0) {
    free(req);
    c->closing = 0;
    conn_close(c);
  }
}

/* While stopping, a connection with nothing in flight is closed. */
static void
conn_check_idle(struct conn *c)
{
  if (c->srv->stopping && !c->closing && c->inflight == 0)
    conn_close_after_flush(c);
}

static void
conn_request_done(struct conn *c)
{
  if (c->inflight > 0)
    c->inflight--;
  conn_check_idle(c);
}

/* ---- connections: writing ------------------------------------------- */

static void
on_write(uv_write_t *req, int status)
{
  struct wreq *w;
  struct conn *c;

  w = (struct wreq *)req;
  c = w->conn;
  c->wq_bytes -= w->len;
  c->srv->mem_queued -= w->len;
  free(w);
  if (status < 0 && status != UV_ECANCELED && !c->closing) {
    log_limited(&c->srv->rl_conn, LOG_LEVEL_INFO,
                "%s: write failed: %s; closing", c->name, uv_strerror(status));
    conn_close(c);
  }
  conn_update_reading(c);
  conn_release(c);
}

/* Write the len-byte frame in w->data (w from malloc; taken). */
static void
conn_write(struct conn *c, struct wreq *w, size_t len)
{
  uv_buf_t b;
  int n;

  if (c->closing) {
    free(w);
    return;
  }
  b = uv_buf_init((char *)w->data, (unsigned)len);
  n = uv_try_write((uv_stream_t *)&c->pipe, &b, 1);
  if (n == (int)len) {
    free(w);
    return;
  }
  if (n < 0 && n != UV_EAGAIN) {
    log_limited(&c->srv->rl_conn, LOG_LEVEL_INFO,
                "%s: write failed: %s; closing", c->name, uv_strerror(n));
    free(w);
    conn_close(c);
    return;
  }
  if (n < 0)
    n = 0;
  w->conn = c;
  w->len = len - (size_t)n;
  b = uv_buf_init((char *)w->data + n, (unsigned)w->len);
  if (uv_write(&w->req, (uv_stream_t *)&c->pipe, &b, 1, on_write) < 0) {
    free(w);
    conn_close(c);
    return;
  }
  c->wq_bytes += w->len;
  c->srv->mem_queued += w->len;
  conn_hold(c);
  conn_update_reading(c);
}

static void
conn_send(struct conn *c, uint16_t type, uint32_t seq,
          const ProtobufCMessage *m)
{
  struct wreq *w;
  size_t size;
  int n;

  if (c->closing)
    return;
  size = qrs__frame_size(m);
  if (size - QRS_FRAME_HDR_SIZE > c->srv->max_reply_bytes) {
    /* Cannot happen with the bounds above; never send what the client
       was told it would not get. */
    log_err("%s: %s reply of %zu bytes exceeds max_reply_bytes %u", c->name,
            qrs__msg_name(type), size, c->srv->max_reply_bytes);
    if (type != QRS_MSG_ERROR)
      conn_send_error(c, seq, QRS_E_INTERNAL, "the reply would exceed %u "
                      "bytes", c->srv->max_reply_bytes);
    return;
  }
  w = malloc(sizeof(*w) + size);
  if (!w) {
    log_err("%s: out of memory encoding %s; closing", c->name,
            qrs__msg_name(type));
    conn_close(c);
    return;
  }
  n = qrs__frame_pack(type, seq, m, w->data, size);
  if (n <= 0) {
    free(w);
    return;
  }
  c->active_ns = mono_now_ns();
  conn_write(c, w, (size_t)n);
}

/* An answer to seq on c, sent at once (draw_reply_fn). */
struct direct {
  struct conn *conn;
  uint32_t seq;
};

static void
send_direct(void *ctx, uint16_t type, const ProtobufCMessage *m)
{
  struct direct *d;

  d = ctx;
  if (type == QRS_MSG_ERROR)
    d->conn->srv->errors++;
  conn_send(d->conn, type, d->seq, m);
}

static void
conn_send_error(struct conn *c, uint32_t seq, int err, const char *fmt, ...)
{
  struct direct d;
  va_list ap;

  d.conn = c;
  d.seq = seq;
  va_start(ap, fmt);
  draw_vreply_error(send_direct, &d, err, fmt, ap);
  va_end(ap);
}

/* ---- connections: reading ------------------------------------------- */

static void
conn_update_reading(struct conn *c);

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void
conn_update_reading(struct conn *c)
{
  int want;

  if (c->closing)
    return;
  want = !c->srv->stopping && c->wq_bytes < c->wq_max;
  if (want && !c->reading) {
    if (uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read) == 0)
      c->reading = 1;
  } else if (!want && c->reading) {
    uv_read_stop((uv_stream_t *)&c->pipe);
    c->reading = 0;
  }
}

static void
on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
  struct conn *c;

  c = h->data;
  buf->base = (char *)c->rbuf + c->rlen;
  buf->len = c->rcap - c->rlen;
}

/* Make room for need bytes in the read buffer (need <= rmax). */
static int
conn_reserve(struct conn *c, size_t need)
{
  uint8_t *p;

  if (need <= c->rcap)
    return 0;
  p = realloc(c->rbuf, need);
  if (!p)
    return -ENOMEM;
  c->rbuf = p;
  c->rcap = need;
  return 0;
}

static void handle_frame(struct conn *c, const struct qrs_frame_hdr *h,
                         const uint8_t *payload);

/* The largest payload of each request type (issue 11 item 4): real
   requests are far smaller, and the cap is checked on the header, before
   the payload is buffered or decoded.  A Draw is two names of at most 63
   bytes, a salt of at most 256 and a few numbers; Status, Health and
   Sources are empty. */
static uint32_t
request_cap(uint16_t type)
{
  switch (type) {
  case QRS_MSG_HELLO:
  case QRS_MSG_DRAW:
    return 1024;
  case QRS_MSG_BYTES:
    return 256;
  case QRS_MSG_STATUS:
  case QRS_MSG_HEALTH:
  case QRS_MSG_SOURCES:
    return 64;
  default:
    return 1024;                /* answered ERROR_UNSUPPORTED */
  }
}

static void
conn_process(struct conn *c)
{
  struct qrs_frame_hdr h;
  size_t off, total;
  int r;

  memset(&h, 0, sizeof(h));
  off = 0;
  while (!c->closing && c->rlen - off >= QRS_FRAME_HDR_SIZE) {
    r = qrs__frame_hdr_decode(c->rbuf + off, c->srv->conf->max_frame_bytes,
                              &h);
    if (r == 0 && c->refused) {
      /* Over a connection limit: answer the first request and go. */
      conn_send_error(c, h.seq, QRS_E_BUSY, "%s", c->refuse_msg);
      conn_close_after_flush(c);
      return;
    }
    if (r == 0 && h.length > request_cap(h.type)) {
      log_limited(&c->srv->rl_frame, LOG_LEVEL_WARN, "%s: %s request of %u "
                  "bytes exceeds the %u-byte limit of its type; closing",
                  c->name, qrs__msg_name(h.type), h.length,
                  request_cap(h.type));
      conn_send_error(c, h.seq, QRS_E_TOO_LARGE, "%s payload of %u bytes "
                      "exceeds the limit of %u for its type",
                      qrs__msg_name(h.type), h.length, request_cap(h.type));
      conn_close_after_flush(c);
      return;
    }
    if (r == QRS_E_TOO_LARGE) {
      log_limited(&c->srv->rl_frame, LOG_LEVEL_WARN, "%s: %s frame of %u "
                  "bytes exceeds the %u-byte limit; closing", c->name,
                  qrs__msg_name(h.type), h.length,
                  c->srv->conf->max_frame_bytes);
      conn_send_error(c, h.seq, QRS_E_TOO_LARGE,
                      "frame payload of %u bytes exceeds the limit of %u",
                      h.length, c->srv->conf->max_frame_bytes);
      conn_close_after_flush(c);
      return;
    }
    if (r < 0) {
      log_limited(&c->srv->rl_frame, LOG_LEVEL_WARN, "%s: malformed frame "
                  "header (magic 0x%02x%02x%02x%02x); closing", c->name,
                  c->rbuf[off], c->rbuf[off + 1], c->rbuf[off + 2],
                  c->rbuf[off + 3]);
      conn_send_error(c, 0, QRS_E_PROTOCOL,
                      "malformed frame header (bad magic, flags or "
                      "reserved field)");
      conn_close_after_flush(c);
      return;
    }
    total = QRS_FRAME_HDR_SIZE + (size_t)h.length;
    if (c->rlen - off < total)
      break;
    handle_frame(c, &h, c->rbuf + off + QRS_FRAME_HDR_SIZE);
    off += total;
  }
  if (c->closing)
    return;

  /* Keep the partial frame at the front; make room for all of it. */
  if (off > 0) {
    memmove(c->rbuf, c->rbuf + off, c->rlen - off);
    c->rlen -= off;
  }
  /* The frame deadline runs from the first byte of a frame. */
  if (c->rlen == 0)
    c->partial_ns = 0;
  else if (off > 0 || c->partial_ns == 0)
    c->partial_ns = mono_now_ns();
  if (c->rlen >= QRS_FRAME_HDR_SIZE) {
    total = QRS_FRAME_HDR_SIZE + (size_t)h.length;
    if (conn_reserve(c, total) < 0) {
      log_err("%s: out of memory for a %zu-byte frame; closing", c->name,
              total);
      conn_close(c);
    }
  } else if (c->rcap > RBUF_INITIAL && c->rlen <= RBUF_INITIAL) {
    /* Give back what a large frame took. */
    uint8_t *p = realloc(c->rbuf, RBUF_INITIAL);

    if (p) {
      c->rbuf = p;
      c->rcap = RBUF_INITIAL;
    }
  }
}

static void
on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
  struct conn *c;

  c = s->data;
  if (nread == 0)
    return;
  if (nread < 0) {
    if (nread == UV_EOF) {
      if (c->rlen > 0 || c->inflight > 0)
        log_limited(&c->srv->rl_conn, LOG_LEVEL_INFO,
                    "%s: client disconnected with %s%u request(s) in flight",
                    c->name, c->rlen > 0 ? "a partial frame and " : "",
                    c->inflight);
      else
        log_debug("%s: client disconnected", c->name);
    } else {
      log_limited(&c->srv->rl_conn, LOG_LEVEL_INFO,
                  "%s: read failed: %s; closing", c->name,
                  uv_strerror((int)nread));
    }
    conn_close(c);
    return;
  }
  c->rlen += (size_t)nread;
  c->active_ns = mono_now_ns();
  conn_process(c);
}

/* ---- requests ------------------------------------------------------- */

static QrsIpc__SourceState
state_to_wire(enum reg_state st)
{
  switch (st) {
  case REG_OK:
    return QRS_IPC__SOURCE_STATE__SOURCE_OK;
  case REG_DEGRADED:
    return QRS_IPC__SOURCE_STATE__SOURCE_DEGRADED;
  case REG_FAILED:
    return QRS_IPC__SOURCE_STATE__SOURCE_FAILED;
  }
  return QRS_IPC__SOURCE_STATE__SOURCE_STATE_UNKNOWN;
}

static void
fill_source_info(struct server *srv, const struct reg_info *ri,
                 QrsIpc__SourceInfo *info)
{
  const struct monitor *mon;

  qrs_ipc__source_info__init(info);
  /* the statistics as of the monitor's last check (every window/8
     draws): no sort on the loop thread for a status request */
  mon = draw_monitor(srv->draw, ri->name);
  if (mon && mon->conf.window) {
    info->stat_window = mon->n;
    info->stat_ks = mon->ks;
    info->stat_ks_p = mon->ks_p;
    info->stat_cusum_hi = mon->cusum_hi;
    info->stat_cusum_lo = mon->cusum_lo;
    info->stat_alarm = mon->alarm;
    info->stat_alarm_reason = (char *)mon->reason;
  }
  info->name = (char *)ri->name;
  info->type = (char *)ri->type;
  info->healthy = ri->state == REG_OK;
  info->is_default = ri->is_default;
  info->production = ri->production;
  info->fallback = (char *)ri->fallback;
  info->draws = ri->draws;
  info->bytes = ri->bytes;
  info->failures = ri->failures;
  info->detail = (char *)ri->detail;
  info->state = state_to_wire(ri->state);
  info->fallbacks = ri->fallbacks;
  info->timeouts = ri->timeouts;
  info->refusals = ri->refusals;
  info->last_failure = (char *)ri->last_failure;
  info->last_failure_ns = ri->last_failure_ns;
  info->builtin = ri->builtin;
  if (ri->has_upstream) {
    info->upstream = 1;
    info->breaker_state = (char *)ri->up.breaker_state;
    info->consecutive_failures = ri->up.consecutive_failures;
    info->timeout_ms = ri->up.timeout_ms;
    info->quota_minute_requests = ri->up.quota_minute_requests;
    info->quota_minute_limit = ri->up.quota_rpm_limit;
    info->quota_day_bytes = ri->up.quota_day_bytes;
    info->quota_day_limit = ri->up.quota_day_limit;
  }
}

/* Source table for STATUS, HEALTH and SOURCES replies.  The arrays are
   freed with free_source_infos(). */
struct infos {
  QrsIpc__SourceInfo *v;
  QrsIpc__SourceInfo **p;
  struct reg_info *ri;
  struct local_stats *ls;       /* per source (local sources only) */
  QrsIpc__MechanismInfo *mv;    /* LOCAL_MECH_MAX per source */
  QrsIpc__MechanismInfo **mp;
  size_t n;
};

/* The statistics of a local source (SourceInfo 40-51); mv and mp have
   room for LOCAL_MECH_MAX mechanisms. */
static void
fill_local_info(const struct local_stats *ls, QrsIpc__SourceInfo *info,
                QrsIpc__MechanismInfo *mv, QrsIpc__MechanismInfo **mp)
{
  const struct local_mech_stats *ms;
  size_t i;

  info->local = 1;
  info->health_state = (char *)ls->health_state;
  info->health_reason = (char *)ls->health_reason;
  info->bytes_per_s = ls->bytes_per_s;
  info->draw_bytes = ls->draw_bytes;
  info->draws_per_s = ls->draws_per_s;
  info->min_entropy = ls->min_entropy;
  info->raw_samples = ls->raw_samples;
  info->freshness = (char *)ls->freshness;
  info->conditioning = (char *)ls->conditioning;
  info->combine = (char *)ls->combine;
  for (i = 0; i < ls->n_mech; i++) {
    ms = &ls->mech[i];
    qrs_ipc__mechanism_info__init(&mv[i]);
    mv[i].name = (char *)ms->name;
    mv[i].description = (char *)ms->what;
    mv[i].available = ms->available;
    mv[i].unavailable_reason = (char *)ms->why;
    mv[i].state = (char *)ms->state;
    mv[i].bytes_per_s = ms->bytes_per_s;
    mv[i].min_entropy = ms->min_entropy;
    mv[i].harvests = ms->harvests;
    mv[i].samples = ms->samples;
    mv[i].timeouts = ms->timeouts;
    mv[i].cut = ms->cut;
    mv[i].failures = ms->failures;
    mv[i].last_error = (char *)ms->last_error;
    mp[i] = &mv[i];
  }
  info->n_mechanisms = ls->n_mech;
  info->mechanisms = ls->n_mech ? mp : NULL;
}

static void
free_source_infos(struct infos *in)
{
  free(in->v);
  free(in->p);
  free(in->ri);
  free(in->ls);
  free(in->mv);
  free(in->mp);
}

static int
make_source_infos(struct server *srv, struct infos *in)
{
  size_t i;

  in->n = registry_count(srv->reg);
  in->v = calloc(in->n, sizeof(*in->v));
  in->p = calloc(in->n, sizeof(*in->p));
  in->ri = calloc(in->n, sizeof(*in->ri));
  in->ls = calloc(in->n, sizeof(*in->ls));
  in->mv = calloc(in->n * LOCAL_MECH_MAX, sizeof(*in->mv));
  in->mp = calloc(in->n * LOCAL_MECH_MAX, sizeof(*in->mp));
  if (!in->v || !in->p || !in->ri || !in->ls || !in->mv || !in->mp) {
    free_source_infos(in);
    return -ENOMEM;
  }
  for (i = 0; i < in->n; i++) {
    registry_info(srv->reg, i, &in->ri[i]);
    fill_source_info(srv, &in->ri[i], &in->v[i]);
    if (registry_local_stats(srv->reg, i, &in->ls[i]) == 0)
      fill_local_info(&in->ls[i], &in->v[i], in->mv + i * LOCAL_MECH_MAX,
                      in->mp + i * LOCAL_MECH_MAX);
    in->p[i] = &in->v[i];
  }
  return 0;
}

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
                "%s: client speaks protocol %u, we speak %u; closing", c->name,
                m->protocol_version, QRS_PROTO_VERSION);
    conn_send_error(c, seq, QRS_E_VERSION,
                    "qrsd %s speaks protocol version %u, not %u",
                    QRS_VERSION, QRS_PROTO_VERSION, m->protocol_version);
    conn_close_after_flush(c);
    return;
  }
  free(c->client_name);
  c->client_name = strndup(m->client_name ? m->client_name : "", 64);
  c->hello_done = 1;
  log_debug("%s: hello from '%s'", c->name,
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

static void
handle_status(struct conn *c, uint32_t seq)
{
  QrsIpc__StatusReply r = QRS_IPC__STATUS_REPLY__INIT;
  struct server *srv;
  struct infos in;
  struct ts now;

  srv = c->srv;
  if (make_source_infos(srv, &in) < 0) {
    conn_send_error(c, seq, -ENOMEM, "out of memory");
    return;
  }
  ts_now(&now);
  r.server_version = (char *)QRS_VERSION;
  r.protocol_version = QRS_PROTO_VERSION;
  r.pid = (uint32_t)getpid();
  r.uptime_ms = (uint64_t)(now.monotonic_ns - srv->start_mono_ns) / 1000000;
  r.socket_path = srv->socket_path;
  r.default_source = (char *)registry_default(srv->reg);
  r.connections = srv->n_conns;
  r.requests = srv->requests;
  r.draws = srv->draws;
  r.bytes = registry_bytes(srv->reg);
  r.errors = srv->errors;
  r.n_sources = in.n;
  r.sources = in.p;
  conn_send(c, QRS_MSG_STATUS_REPLY, seq, &r.base);
  free_source_infos(&in);
}

static void
handle_health(struct conn *c, uint32_t seq)
{
  QrsIpc__HealthReply r = QRS_IPC__HEALTH_REPLY__INIT;
  const char *alarm_src, *alarm_reason;
  struct server *srv;
  struct infos in;
  char msg[256];
  int alarms;

  srv = c->srv;
  if (make_source_infos(srv, &in) < 0) {
    conn_send_error(c, seq, -ENOMEM, "out of memory");
    return;
  }
  switch (registry_health(srv->reg, msg, sizeof(msg))) {
  case REG_FAILED:
    r.state = QRS_IPC__HEALTH_STATE__HEALTH_FAILED;
    break;
  case REG_DEGRADED:
    r.state = QRS_IPC__HEALTH_STATE__HEALTH_DEGRADED;
    break;
  case REG_OK:
    r.state = QRS_IPC__HEALTH_STATE__HEALTH_HEALTHY;
    break;
  }
  /* a statistics alarm (the served u drifts) degrades a healthy daemon */
  alarms = draw_alarms(srv->draw, &alarm_src, &alarm_reason);
  if (alarms && r.state == QRS_IPC__HEALTH_STATE__HEALTH_HEALTHY) {
    r.state = QRS_IPC__HEALTH_STATE__HEALTH_DEGRADED;
    snprintf(msg, sizeof(msg), "statistics alarm on %d source%s; '%s': "
             "%.150s", alarms, alarms == 1 ? "" : "s", alarm_src,
             alarm_reason);
  }
  r.message = msg;
  r.n_sources = in.n;
  r.sources = in.p;
  conn_send(c, QRS_MSG_HEALTH_REPLY, seq, &r.base);
  free_source_infos(&in);
}

static void
handle_sources(struct conn *c, uint32_t seq)
{
  QrsIpc__SourcesReply r = QRS_IPC__SOURCES_REPLY__INIT;
  struct infos in;

  if (make_source_infos(c->srv, &in) < 0) {
    conn_send_error(c, seq, -ENOMEM, "out of memory");
    return;
  }
  r.default_source = (char *)registry_default(c->srv->reg);
  r.n_sources = in.n;
  r.sources = in.p;
  conn_send(c, QRS_MSG_SOURCES_REPLY, seq, &r.base);
  free_source_infos(&in);
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
    c->srv->draws++;
  conn_send(c, type, p->seq, m);
  free(p);
  conn_request_done(c);
  conn_release(c);
}

/* Admit a request whose reply takes up to reply bytes and whose read
   takes up to read bytes, or answer BUSY to its seq and return NULL
   (issue 11 items 1 and 5): the reply must fit the connection's write
   queue, everything must fit the memory budget, and the client's reads in
   progress (also those abandoned at their deadline) must fit its share. */
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
                c->name, why);
    conn_send_error(c, seq, QRS_E_BUSY, "qrsd is busy: %s", why);
    return NULL;
  }
  p = malloc(sizeof(*p));
  if (!p) {
    log_err("%s: out of memory for a request", c->name);
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
    return 1;
  default:
    return 0;
  }
}

static void
handle_frame(struct conn *c, const struct qrs_frame_hdr *h,
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
                "%s: unsupported message type %u (%s)", c->name, h->type,
                qrs__msg_name(h->type));
    conn_send_error(c, h->seq, QRS_E_UNSUPPORTED,
                    "message type %u is not a request this qrsd serves",
                    h->type);
    return;
  }
  if (h->version != QRS_PROTO_VERSION && h->type != QRS_MSG_HELLO) {
    log_limited(&c->srv->rl_frame, LOG_LEVEL_WARN,
                "%s: frame of protocol version %u; closing", c->name,
                h->version);
    conn_send_error(c, h->seq, QRS_E_VERSION,
                    "frame of protocol version %u, qrsd speaks %u",
                    h->version, QRS_PROTO_VERSION);
    conn_close_after_flush(c);
    return;
  }
  desc = qrs__msg_descriptor(h->type);
  /* Decoding allocates from a fixed arena (issue 11 item 4): whatever a
     peer packs into its 1 KiB, it cannot make us allocate more. */
  alloc.alloc = arena_alloc;
  alloc.free = arena_free;
  alloc.allocator_data = srv;
  srv->arena_used = 0;
  m = protobuf_c_message_unpack(desc, &alloc, h->length, payload);
  if (!m) {
    log_limited(&c->srv->rl_frame, LOG_LEVEL_WARN,
                "%s: %s payload of %u bytes does not decode; closing",
                c->name, qrs__msg_name(h->type), h->length);
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
                "%s: %s before HELLO", c->name, qrs__msg_name(h->type));
    conn_send_error(c, h->seq, QRS_E_HELLO_REQUIRED,
                    "send HELLO before %s", qrs__msg_name(h->type));
    goto out;
  }
  if (c->inflight >= srv->conf->max_inflight) {
    log_limited(&c->srv->rl_busy, LOG_LEVEL_INFO,
                "%s: more than %u requests in flight; answering BUSY",
                c->name, srv->conf->max_inflight);
    conn_send_error(c, h->seq, QRS_E_BUSY,
                    "more than %u requests in flight on this connection",
                    srv->conf->max_inflight);
    goto out;
  }

  switch (h->type) {
  case QRS_MSG_DRAW:
    n = ((QrsIpc__Draw *)m)->sample_count;
    if (n > srv->conf->max_sample_count)
      n = 0;                    /* refused by the engine */
    p = pending_new(c, h->seq, DRAW_REPLY_MAX, n);
    if (p)
      draw_handle(srv->draw, (QrsIpc__Draw *)m, &received, c->name,
                  &c->owner, on_reply, p);
    break;
  case QRS_MSG_BYTES:
    n = ((QrsIpc__Bytes *)m)->count;
    if (n > draw_max_bytes(srv->draw))
      n = 0;
    p = pending_new(c, h->seq, QRS_FRAME_HDR_SIZE + 512 + n, n);
    if (p)
      bytes_handle(srv->draw, (QrsIpc__Bytes *)m, &received, c->name,
                   &c->owner, on_reply, p);
    break;
  case QRS_MSG_STATUS:
    handle_status(c, h->seq);
    break;
  case QRS_MSG_HEALTH:
    handle_health(c, h->seq);
    break;
  case QRS_MSG_SOURCES:
    handle_sources(c, h->seq);
    break;
  }

out:
  protobuf_c_message_free_unpacked(m, &alloc);
}

/* ---- listening ------------------------------------------------------ */

static void
owner_get(struct reg_owner *o)
{
  conn_hold((struct conn *)((char *)o - offsetof(struct conn, owner)));
}

static void
owner_put(struct reg_owner *o)
{
  conn_release((struct conn *)((char *)o - offsetof(struct conn, owner)));
}

/* Connections of uid that are served (not refused). */
static uint32_t
conns_of_uid(const struct server *srv, uid_t uid)
{
  const struct conn *c;
  uint32_t n;

  n = 0;
  for (c = srv->conns; c; c = c->next)
    n += c->has_uid && c->uid == uid && !c->refused && !c->closing;
  return n;
}

static void
on_unlisted_closed(uv_handle_t *h)
{
  conn_release(h->data);
}

static void
on_connection(uv_stream_t *listener, int status)
{
  struct server *srv;
  struct conn *c;
  struct ucred cred;
  socklen_t len;
  uv_os_fd_t fd;

  srv = listener->data;
  if (status < 0) {
    log_limited(&srv->rl_conn, LOG_LEVEL_WARN,
                "accept failed: %s", uv_strerror(status));
    return;
  }
  c = calloc(1, sizeof(*c));
  if (!c)
    goto fail_alloc;
  c->rmax = QRS_FRAME_HDR_SIZE + (size_t)srv->conf->max_frame_bytes;
  c->rcap = RBUF_INITIAL < c->rmax ? RBUF_INITIAL : c->rmax;
  c->rbuf = malloc(c->rcap);
  if (!c->rbuf) {
    free(c);
    goto fail_alloc;
  }
  c->srv = srv;
  c->refs = 1;
  c->id = ++srv->next_conn_id;
  c->owner.get = owner_get;
  c->owner.put = owner_put;
  c->accepted_ns = mono_now_ns();
  c->active_ns = c->accepted_ns;
  c->wq_max = 2 * (size_t)srv->conf->max_frame_bytes;
  if (c->wq_max < WQ_MIN_CAP)
    c->wq_max = WQ_MIN_CAP;
  uv_pipe_init(srv->loop, &c->pipe, 0);
  c->pipe.data = c;
  if (uv_accept(listener, (uv_stream_t *)&c->pipe) < 0) {
    c->closing = 1;
    uv_close((uv_handle_t *)&c->pipe, on_unlisted_closed);
    return;
  }
  c->next = srv->conns;
  if (srv->conns)
    srv->conns->prev = c;
  srv->conns = c;
  srv->n_conns++;

  snprintf(c->name, sizeof(c->name), "conn %llu", (unsigned long long)c->id);
  len = sizeof(cred);
  if (uv_fileno((uv_handle_t *)&c->pipe, &fd) == 0 &&
      getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
    snprintf(c->name, sizeof(c->name), "conn %llu (pid %d, uid %u)",
             (unsigned long long)c->id, (int)cred.pid, (unsigned)cred.uid);
    c->uid = cred.uid;
    c->has_uid = 1;
  }

  /* Over a limit, the client's first request (its HELLO) is answered
     BUSY with that request's seq, so that it can say BUSY rather than
     "connection lost" (issue 11 item 3); the HELLO deadline still
     applies.  Far over, we do not wait. */
  if (srv->n_refused >= REFUSED_SLACK) {
    log_limited(&srv->rl_busy, LOG_LEVEL_WARN, "%s: refused at once: "
                "%u connections is the limit", c->name,
                srv->conf->max_connections);
    conn_close(c);
    return;
  }
  if (srv->n_conns - srv->n_refused > srv->conf->max_connections) {
    c->refused = 1;
    snprintf(c->refuse_msg, sizeof(c->refuse_msg), "qrsd serves at most %u "
             "connections", srv->conf->max_connections);
    log_limited(&srv->rl_busy, LOG_LEVEL_WARN, "%s: refused: %u "
                "connections is the limit", c->name,
                srv->conf->max_connections);
  } else if (c->has_uid && conns_of_uid(srv, c->uid) >
             srv->conf->max_connections_per_uid) {
    c->refused = 1;
    snprintf(c->refuse_msg, sizeof(c->refuse_msg), "qrsd serves at most %u "
             "connections per user", srv->conf->max_connections_per_uid);
    log_limited(&srv->rl_busy, LOG_LEVEL_WARN, "%s: refused: %u "
                "connections per user is the limit", c->name,
                srv->conf->max_connections_per_uid);
  }
  if (c->refused)
    srv->n_refused++;
  log_debug("%s: connected", c->name);
  conn_update_reading(c);
  return;

fail_alloc:
  log_err("out of memory accepting a connection");
}

/* Close c with an ERROR_TIMEOUT saying why (seq 0: no request). */
static void
conn_expire(struct conn *c, const char *what, uint32_t ms)
{
  log_limited(&c->srv->rl_deadline, LOG_LEVEL_INFO, "%s: %s within %u ms; "
              "closing", c->name, what, ms);
  conn_send_error(c, 0, QRS_E_TIMEOUT, "%s within %u ms; closing", what, ms);
  conn_close_after_flush(c);
}

/* The HELLO, frame and idle deadlines (issue 11 item 3). */
static void
on_sweep(uv_timer_t *t)
{
  const struct qrsd_conf *conf;
  struct conn *c, *next;
  struct server *srv;
  int64_t now;

  srv = t->data;
  conf = srv->conf;
  now = mono_now_ns();
  for (c = srv->conns; c; c = next) {
    next = c->next;
    if (c->closing)
      continue;
    if (!c->hello_done &&
        now - c->accepted_ns > (int64_t)conf->hello_timeout_ms * 1000000)
      conn_expire(c, "no HELLO", conf->hello_timeout_ms);
    else if (c->partial_ns && c->reading &&
             now - c->partial_ns > (int64_t)conf->frame_timeout_ms * 1000000)
      conn_expire(c, "a frame was not completed", conf->frame_timeout_ms);
    else if (conf->idle_timeout_ms && c->inflight == 0 && c->rlen == 0 &&
             c->wq_bytes == 0 &&
             now - c->active_ns > (int64_t)conf->idle_timeout_ms * 1000000) {
      log_debug("%s: idle for %u ms; closing", c->name,
                conf->idle_timeout_ms);
      conn_close_after_flush(c);
    }
  }
}

static void
on_sweep_closed(uv_handle_t *h)
{
  struct server *srv;

  srv = h->data;
  srv->sweep_open = 0;
  server_maybe_stopped(srv);
}

static int
start_listening(struct server *srv, char *err, size_t errlen)
{
  int r;

  srv->listener.data = srv;
  r = uv_listen((uv_stream_t *)&srv->listener, 128, on_connection);
  if (r < 0) {
    snprintf(err, errlen, "cannot listen on %s: %s", srv->socket_path,
             uv_strerror(r));
    return r;
  }
  uv_timer_init(srv->loop, &srv->sweep);
  srv->sweep.data = srv;
  srv->sweep_open = 1;
  uv_timer_start(&srv->sweep, on_sweep, SWEEP_MS, SWEEP_MS);
  return 0;
}

/* Does a live process accept connections on path?  0: no, the socket is
   stale (ECONNREFUSED, the only answer that proves it); 1: yes; a negative
   errno: we cannot tell (EACCES: it is not ours to judge), so the caller
   must leave it alone (issue 11 item 7). */
static int
socket_probe(const char *path)
{
  struct sockaddr_un sa;
  int fd, r;

  fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -errno;
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
  r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
  if (r < 0)
    r = errno == ECONNREFUSED ? 0 : -errno;
  else
    r = 1;
  close(fd);
  return r;
}

static void
apply_group(const char *path, const char *group)
{
  struct group gr, *res;
  size_t len;
  char *buf;
  int r;

  if (!group || !*group)
    return;
  /* A group with many members needs more than any fixed buffer: retry on
     ERANGE (issue 11 item 8). */
  buf = NULL;
  res = NULL;
  for (len = 4096; len <= 16 * 1024 * 1024; len *= 2) {
    free(buf);
    buf = malloc(len);
    if (!buf)
      break;
    r = getgrnam_r(group, &gr, buf, len, &res);
    if (r != ERANGE)
      break;
  }
  if (!buf || !res) {
    log_warn("socket group '%s' %s; %s keeps its group", group,
             buf ? "does not exist" : "cannot be looked up (out of memory)",
             path);
    free(buf);
    return;
  }
  /* Never through a symlink someone put in place of our socket. */
  if (fchownat(AT_FDCWD, path, (uid_t)-1, res->gr_gid,
               AT_SYMLINK_NOFOLLOW) < 0)
    log_warn("cannot give %s to group '%s': %s", path, group,
             strerror(errno));
  free(buf);
}

int
server_listen_path(struct server *srv, const char *path, char *err,
                   size_t errlen)
{
  struct sockaddr_un sa;
  struct stat st;
  mode_t old_umask;
  int r;

  if (strlen(path) >= sizeof(sa.sun_path)) {
    snprintf(err, errlen, "socket path '%s' is longer than %zu bytes",
             path, sizeof(sa.sun_path) - 1);
    return -ENAMETOOLONG;
  }
  free(srv->socket_path);
  srv->socket_path = strdup(path);
  if (!srv->socket_path)
    return -ENOMEM;

  if (lstat(path, &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      snprintf(err, errlen, "%s exists and is not a socket; not touching "
               "it", path);
      return -EEXIST;
    }
    r = socket_probe(path);
    if (r > 0) {
      snprintf(err, errlen, "another daemon is already listening on %s",
               path);
      return -EADDRINUSE;
    }
    if (r < 0) {
      snprintf(err, errlen, "cannot tell whether a daemon listens on %s "
               "(connect: %s); not touching it", path, strerror(-r));
      return r;
    }
    log_info("removing stale socket %s", path);
    if (unlink(path) < 0 && errno != ENOENT) {
      r = -errno;
      snprintf(err, errlen, "cannot remove stale socket %s: %s", path,
               strerror(errno));
      return r;
    }
  }

  uv_pipe_init(srv->loop, &srv->listener, 0);
  srv->listener_open = 1;
  /* The socket is born with its final mode: no chmod by path afterwards,
     which would follow a symlink put in its place (issue 11 item 8). */
  old_umask = umask(0777 & ~(mode_t)srv->conf->socket_mode);
  r = uv_pipe_bind(&srv->listener, path);
  umask(old_umask);
  if (r < 0) {
    snprintf(err, errlen, "cannot bind %s: %s", path, uv_strerror(r));
    return r;
  }
  srv->own_socket = 1;
  if (lstat(path, &st) == 0) {
    srv->sock_dev = st.st_dev;
    srv->sock_ino = st.st_ino;
  }
  apply_group(path, srv->conf->socket_group);
  return start_listening(srv, err, errlen);
}

int
server_listen_fd(struct server *srv, int fd, char *err, size_t errlen)
{
  struct sockaddr_un sa;
  socklen_t len;
  int r;

  len = sizeof(sa);
  memset(&sa, 0, sizeof(sa));
  free(srv->socket_path);
  if (getsockname(fd, (struct sockaddr *)&sa, &len) == 0 && sa.sun_path[0])
    srv->socket_path = strdup(sa.sun_path);
  else
    srv->socket_path = strdup("(socket activation)");
  if (!srv->socket_path)
    return -ENOMEM;
  uv_pipe_init(srv->loop, &srv->listener, 0);
  srv->listener_open = 1;
  r = uv_pipe_open(&srv->listener, fd);
  if (r < 0) {
    snprintf(err, errlen, "cannot use the socket systemd passed: %s",
             uv_strerror(r));
    return r;
  }
  return start_listening(srv, err, errlen);
}

/* ---- start and stop ------------------------------------------------- */

int
server_init(struct server *srv, uv_loop_t *loop,
            const struct qrsd_conf *conf, char *err, size_t errlen)
{
  struct reg_limits lim;
  struct ts now;
  size_t i;
  int r;

  memset(srv, 0, sizeof(*srv));
  srv->loop = loop;
  srv->conf = conf;
  ts_now(&now);
  srv->start_mono_ns = now.monotonic_ns;

  /* getrandom() of 64 KiB takes well under 200 us: larger reads go to
     the worker threads, which may hold this much at once. */
  lim.inline_max = 64 * 1024;
  lim.bytes_max = 64u * 1024 * 1024;
  if (lim.bytes_max < 4 * (size_t)conf->max_sample_count)
    lim.bytes_max = 4 * (size_t)conf->max_sample_count;
  r = registry_new(loop, conf, &lim, &srv->reg, err, errlen);
  if (r < 0)
    return r;
  /* One client's reads in progress: a quarter of the read budget, but at
     least one read of the largest size (issue 11 item 5). */
  srv->read_max_per_conn = lim.bytes_max / 4;
  if (srv->read_max_per_conn < conf->max_sample_count)
    srv->read_max_per_conn = conf->max_sample_count;
  srv->arena = malloc(DECODE_ARENA);
  if (!srv->arena) {
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  r = draw_engine_new(conf, srv->reg, loop, &srv->draw);
  if (r < 0) {
    snprintf(err, errlen, "out of memory");
    return r;
  }
  /* Requests are held to max_frame_bytes; replies may be larger: a
     SourceInfo is under 1 KiB (its strings are bounded), plus, for a
     local source, its statistics and up to LOCAL_MECH_MAX mechanisms of
     under 512 bytes each (bounded strings too), so STATUS with every
     source fits here (issue 11 item 9). */
  srv->max_reply_bytes = 2048;
  for (i = 0; i < registry_count(srv->reg); i++) {
    srv->max_reply_bytes += 1024;
    if (registry_has_local_stats(srv->reg, i))
      srv->max_reply_bytes += 1024 + LOCAL_MECH_MAX * 512;
  }
  if (srv->max_reply_bytes < conf->max_frame_bytes)
    srv->max_reply_bytes = conf->max_frame_bytes;
  r = statuspub_start(&srv->status, srv->reg, srv->draw, loop,
                      conf->status_file);
  if (r < 0) {
    snprintf(err, errlen, "out of memory");
    return r;
  }
  return compat_start(loop, conf, srv->reg, &srv->compat, err, errlen);
}

static void
on_stop_timer_closed(uv_handle_t *h)
{
  struct server *srv;

  srv = h->data;
  srv->stop_timer_open = 0;
  server_maybe_stopped(srv);
}

static void
on_listener_closed(uv_handle_t *h)
{
  struct server *srv;

  srv = h->data;
  srv->listener_open = 0;
  server_maybe_stopped(srv);
}

static void
server_maybe_stopped(struct server *srv)
{
  void (*cb)(struct server *);

  if (!srv->stopping || srv->conns || srv->listener_open ||
      srv->sweep_open)
    return;
  if (srv->stop_timer_open) {
    if (!uv_is_closing((uv_handle_t *)&srv->stop_timer))
      uv_close((uv_handle_t *)&srv->stop_timer, on_stop_timer_closed);
    return;
  }
  cb = srv->on_stopped;
  srv->on_stopped = NULL;
  if (cb) {
    registry_stop(srv->reg);
    cb(srv);
  }
}

static void
on_stop_timeout(uv_timer_t *t)
{
  struct server *srv;
  struct conn *c, *next;

  srv = t->data;
  for (c = srv->conns; c; c = next) {
    next = c->next;
    if (c->inflight)
      log_warn("%s: still %u request(s) in flight at shutdown; closing",
               c->name, c->inflight);
    conn_close(c);
  }
}

void
server_stop(struct server *srv, void (*on_stopped)(struct server *))
{
  struct conn *c, *next;

  if (srv->stopping)
    return;
  srv->stopping = 1;
  srv->on_stopped = on_stopped;
  compat_stop(srv->compat);
  srv->compat = NULL;
  if (srv->listener_open && !uv_is_closing((uv_handle_t *)&srv->listener))
    uv_close((uv_handle_t *)&srv->listener, on_listener_closed);
  if (srv->sweep_open && !uv_is_closing((uv_handle_t *)&srv->sweep))
    uv_close((uv_handle_t *)&srv->sweep, on_sweep_closed);
  uv_timer_init(srv->loop, &srv->stop_timer);
  srv->stop_timer.data = srv;
  srv->stop_timer_open = 1;
  uv_timer_start(&srv->stop_timer, on_stop_timeout,
                 srv->conf->request_timeout_ms + 1000, 0);
  for (c = srv->conns; c; c = next) {
    next = c->next;
    conn_update_reading(c);
    conn_check_idle(c);
  }
  server_maybe_stopped(srv);
}

void
server_done(struct server *srv)
{
  struct stat st;

  if (srv->own_socket && srv->socket_path &&
      stat(srv->socket_path, &st) == 0 && st.st_dev == srv->sock_dev &&
      st.st_ino == srv->sock_ino)
    unlink(srv->socket_path);
  statuspub_stop(&srv->status);
  draw_engine_free(srv->draw);
  registry_free(srv->reg);
  free(srv->arena);
  free(srv->socket_path);
  memset(srv, 0, sizeof(*srv));
}
