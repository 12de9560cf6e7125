/* What the pieces of the native socket server share; private to them
   (everyone else includes server.h).

   The server is four files, one per stage of a request:
   - server.c: start and stop, the listening socket (path or systemd fd),
     accepting connections with their limits, the HELLO/frame/idle
     deadlines;
   - conn.c (conn_*()): a connection's lifetime, its reads and writes, and
     the framing of its byte stream (header checks, per-type caps), which
     hands each complete frame to dispatch_frame();
   - dispatch.c: a frame's request decoded (in a bounded arena) and
     dispatched: HELLO, DRAW and BYTES (to the draw engine, with the reply
     budget held until on_reply), STATUS, HEALTH and SOURCES (to report.c);
   - report.c (report_*()): the STATUS, HEALTH and SOURCES replies, built
     from the registry and the draw engine's monitors.

   Everything runs on the loop thread. */
#ifndef QRSD_SERVER_INT_H
#define QRSD_SERVER_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/peer.h"
#include "server/server.h"

#define RBUF_INITIAL (16 * 1024)
#define DECODE_ARENA (64 * 1024)      /* protobuf-c's allocations for one
                                         request of at most 1 KiB */

struct conn {
  uv_pipe_t pipe;               /* handle.data points back here */
  struct server *srv;
  LIST_ENTRY(conn) link;        /* the server's conns */
  struct peer peer;             /* its number, pid and uid; its name */

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
  int revoked;                  /* a reload's access list refuses the
                                   peer: no new requests; told
                                   (refuse_msg) and closed once nothing
                                   is in flight */
  char *client_name;

  gid_t gid;                    /* primary group (SO_PEERCRED; with
                                   peer.uid when peer.has_cred) */
  int refused;                  /* over a connection limit: the first
                                   frame is answered BUSY, then close */
  int refuse_err;               /* QRS_E_BUSY or QRS_E_PERMISSION */
  int in_reserve;               /* an administrator's, accepted beyond
                                   server_open_connections(): no DRAW
                                   or BYTES on it */
  char refuse_msg[128];
  int64_t accepted_ns;          /* CLOCK_MONOTONIC */
  int64_t partial_ns;           /* an incomplete frame began; 0: none */
  int64_t active_ns;            /* last byte read or reply sent */
  size_t reserved;              /* reply bytes reserved for requests */
  struct reg_owner owner;       /* its reads in progress */
};

/* server.c */

/* Connections anyone allowed may hold: limits.max_connections less
   limits.reserved_admin_connections (at most half of it is reserved). */
uint32_t server_open_connections(const struct qrsd_conf *conf);

/* While stopping: call on_stopped once every connection and handle is
   closed. */
void server_maybe_stopped(struct server *srv);
/* After a reload changed the access list: every open connection whose
   peer it no longer allows is revoked (no new requests; its requests in
   flight are answered, then an ERROR PERMISSION_DENIED with seq 0 and
   the close).  The number revoked. */
unsigned server_recheck_access(struct server *srv);
/* What the server and the registry derive from limits.* (at start and
   on a reload). */
void server_limits_of(const struct qrsd_conf *conf, struct reg_limits *lim,
                      size_t *ret_read_max);

/* conn.c */

/* A reference: the handle holds one, every request in flight another;
   the last release frees c. */
void conn_hold(struct conn *c);
void conn_release(struct conn *c);
/* Close at once (queued writes are cancelled). */
void conn_close(struct conn *c);
/* Send what is queued, then close. */
void conn_close_after_flush(struct conn *c);
/* Read while the write queue has room and the server is not stopping. */
void conn_update_reading(struct conn *c);
/* While stopping, a connection with nothing in flight is closed; so is a
   revoked one, after an ERROR (seq 0) that says why. */
void conn_check_idle(struct conn *c);
/* A request in flight was answered. */
void conn_request_done(struct conn *c);
/* Encode m as a frame of type answering seq and queue it. */
void conn_send(struct conn *c, uint16_t type, uint32_t seq,
               const ProtobufCMessage *m);
/* An ERROR reply (err a QRS_E_* or negative errno) to seq. */
void conn_send_error(struct conn *c, uint32_t seq, int err, const char *fmt,
                     ...) __attribute__((format(printf, 4, 5)));

/* dispatch.c */

/* A complete frame: decode its request and answer or dispatch it. */
void dispatch_frame(struct conn *c, const struct qrs_frame_hdr *h,
                    const uint8_t *payload);

/* report.c */

void report_status(struct conn *c, uint32_t seq);
/* Count a draw reply about to be sent: draws and its latency bucket. */
void report_draw_served(struct server *srv, const QrsIpc__DrawReply *r);
void report_health(struct conn *c, uint32_t seq);
void report_sources(struct conn *c, uint32_t seq);

/* control.c */

/* SOURCE_CONTROL (privileged; dispatch.c checked the peer): enable,
   disable a source or reset its quota, and answer seq. */
void control_handle(struct conn *c, uint32_t seq,
                    const QrsIpc__SourceControl *m);

#endif
