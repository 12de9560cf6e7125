/* A client connection of the native socket server (server_int.h says
   what the other pieces are): its lifetime and references, its writes
   (uv_try_write() first, the rest queued; past wq_max bytes queued we stop
   reading until the peer catches up), its reads into a buffer that holds
   at most one maximal frame, and the framing of the byte stream: each
   header is checked (magic, version fields, the frame limit and the cap
   of its request type) before its payload is buffered, and each complete
   frame goes to dispatch_frame().  A connection refused over a limit gets
   BUSY for its first request, then is closed. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qrs/error.h>

#include "base/log.h"
#include "server/server_int.h"

/* A queued write.  The frame is packed straight into data, and what
   uv_try_write() did not take is written from there: a reply is copied
   once, by the encoder. */
struct wreq {
  uv_write_t req;
  struct conn *conn;
  size_t len;                   /* bytes still to write */
  uint8_t data[];
};

void
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

void
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
  LIST_REMOVE(c, link);
  srv->n_conns--;
  if (c->refused)
    srv->n_refused--;
  log_debug("%s: closed", c->peer.name);
  conn_release(c);
  server_maybe_stopped(srv);
}

void
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
void
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

/* While stopping, a connection with nothing in flight is closed; so is a
   revoked one, told why first (its draws in flight were answered). */
void
conn_check_idle(struct conn *c)
{
  if (c->closing || c->inflight > 0)
    return;
  if (c->revoked) {
    conn_send_error(c, 0, QRS_E_PERMISSION, "%s", c->refuse_msg);
    conn_close_after_flush(c);
  } else if (c->srv->stopping) {
    conn_close_after_flush(c);
  }
}

void
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
                "%s: write failed: %s; closing", c->peer.name,
                uv_strerror(status));
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
                "%s: write failed: %s; closing", c->peer.name, uv_strerror(n));
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

void
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
    log_err("%s: %s reply of %zu bytes exceeds max_reply_bytes %u",
            c->peer.name, qrs__msg_name(type), size, c->srv->max_reply_bytes);
    if (type != QRS_MSG_ERROR)
      conn_send_error(c, seq, QRS_E_INTERNAL, "the reply would exceed %u "
                      "bytes", c->srv->max_reply_bytes);
    return;
  }
  w = malloc(sizeof(*w) + size);
  if (!w) {
    log_err("%s: out of memory encoding %s; closing", c->peer.name,
            qrs__msg_name(type));
    conn_close(c);
    return;
  }
  n = qrs__frame_pack_sized(type, seq, m, w->data, size);
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

void
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

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

void
conn_update_reading(struct conn *c)
{
  int want;

  if (c->closing)
    return;
  want = !c->srv->stopping && !c->revoked && c->wq_bytes < c->wq_max;
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

/* The largest payload of each request type: real
   requests are far smaller, and the cap is checked on the header, before
   the payload is buffered or decoded.  A Draw is two names of at most 63
   bytes, a salt of at most 256 and a few numbers; Status, Health,
   Sources and Reload are empty. */
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
  case QRS_MSG_RELOAD:
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
      conn_send_error(c, h.seq, c->refuse_err, "%s", c->refuse_msg);
      conn_close_after_flush(c);
      return;
    }
    if (r == 0 && h.length > request_cap(h.type)) {
      log_limited(&c->srv->rl_frame, LOG_LEVEL_WARN, "%s: %s request of %u "
                  "bytes exceeds the %u-byte limit of its type; closing",
                  c->peer.name, qrs__msg_name(h.type), h.length,
                  request_cap(h.type));
      conn_send_error(c, h.seq, QRS_E_TOO_LARGE, "%s payload of %u bytes "
                      "exceeds the limit of %u for its type",
                      qrs__msg_name(h.type), h.length, request_cap(h.type));
      conn_close_after_flush(c);
      return;
    }
    if (r == QRS_E_TOO_LARGE) {
      log_limited(&c->srv->rl_frame, LOG_LEVEL_WARN, "%s: %s frame of %u "
                  "bytes exceeds the %u-byte limit; closing", c->peer.name,
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
                  "header (magic 0x%02x%02x%02x%02x); closing", c->peer.name,
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
    dispatch_frame(c, &h, c->rbuf + off + QRS_FRAME_HDR_SIZE);
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
      log_err("%s: out of memory for a %zu-byte frame; closing", c->peer.name,
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
                    c->peer.name, c->rlen > 0 ? "a partial frame and " : "",
                    c->inflight);
      else
        log_debug("%s: client disconnected", c->peer.name);
    } else {
      log_limited(&c->srv->rl_conn, LOG_LEVEL_INFO,
                  "%s: read failed: %s; closing", c->peer.name,
                  uv_strerror((int)nread));
    }
    conn_close(c);
    return;
  }
  c->rlen += (size_t)nread;
  c->active_ns = mono_now_ns();
  conn_process(c);
}
