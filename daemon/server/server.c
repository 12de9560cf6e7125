/* The qrsd server: start and stop, the listening socket, accepting.

   server_init() opens the registry, the draw engine, the status file and
   the compat endpoint; server_listen_path() or server_listen_fd() starts
   listening; every accepted connection gets its limits checked (over
   one, its first request is answered BUSY; the last
   limits.reserved_admin_connections are kept for administrators) and
   then belongs to conn.c,
   its requests to dispatch.c and report.c (server_int.h).  A sweep timer
   enforces the HELLO, frame and idle deadlines.  server_stop() answers
   what is in flight and closes everything before on_stopped runs.

   Everything here runs on the loop thread.  Every buffer a peer can grow
   has a cap: a connection's read buffer holds at most one maximal frame,
   its queued replies at most wq_max bytes (beyond that we stop reading
   from it until the peer catches up), and its requests in flight at most
   limits.max_inflight_per_connection (beyond that: BUSY). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <qrs/error.h>

#include "base/container.h"
#include "base/log.h"
#include "persist/journal.h"
#include "server/server_int.h"
#include "server/sockfile.h"
#include "sources/local.h"

#define WQ_MIN_CAP (4 * 1024 * 1024)
#define SWEEP_MS 100                  /* how often deadlines are checked */
#define REFUSED_SLACK 64              /* refused connections kept to answer
                                         BUSY; beyond: closed at once */

/* ---- listening ------------------------------------------------------ */

static void
owner_get(struct reg_owner *o)
{
  conn_hold(CONTAINER_OF(o, struct conn, owner));
}

static void
owner_put(struct reg_owner *o)
{
  conn_release(CONTAINER_OF(o, struct conn, owner));
}

/* Connections of uid that are served (not refused). */
static uint32_t
conns_of_uid(const struct server *srv, uid_t uid)
{
  const struct conn *c;
  uint32_t n;

  n = 0;
  LIST_FOREACH(c, &srv->conns, link)
    n += c->peer.has_cred && c->peer.uid == uid && !c->refused &&
         !c->closing;
  return n;
}

/* c is over a limit of max connections (per: "" or " per user"). */
static void
conn_refuse(struct conn *c, uint32_t max, const char *per)
{
  c->refused = 1;
  c->refuse_err = QRS_E_BUSY;
  c->srv->n_refused++;
  c->srv->refused_total++;
  snprintf(c->refuse_msg, sizeof(c->refuse_msg), "qrsd serves at most %u "
           "connections%s", max, per);
  log_limited(&c->srv->rl_busy, LOG_LEVEL_WARN, "%s: refused: %u "
              "connections%s is the limit", c->peer.name, max, per);
}

/* c's peer is not in the access list (refuse_msg says why): its first
   request is answered PERMISSION_DENIED, then it is closed.  Counted
   with the refused, so that a flood of them is closed at once. */
static void
conn_deny(struct conn *c)
{
  struct server *srv = c->srv;

  log_limited_ev(&srv->rl_denied, LOG_LEVEL_WARN,
                 &(struct log_fields){ .event = "access-denied",
                                       .peer = &c->peer },
                 "%s: access denied: %s", c->peer.name, c->refuse_msg);
  srv->refused_total++;
  c->refused = 1;                     /* not served, even while it closes */
  srv->n_refused++;
  if (srv->n_refused > REFUSED_SLACK) {
    conn_close(c);
    return;
  }
  c->refuse_err = QRS_E_PERMISSION;
  conn_update_reading(c);
}

/* May c's peer use a connection reserved for administration (root,
   qrsd's own uid, access.admin_group)?  fd: its socket. */
static int
conn_is_admin(const struct conn *c, int fd)
{
  char why[160];

  return c->peer.has_cred &&
         access_peer_admin(&c->srv->admin, fd, c->peer.uid, c->gid, why,
                           sizeof(why));
}

uint32_t
server_open_connections(const struct qrsd_conf *conf)
{
  uint32_t reserve;

  reserve = conf->reserved_admin_connections;
  if (reserve > conf->max_connections / 2)
    reserve = conf->max_connections / 2;
  return conf->max_connections - reserve;
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
  uint32_t served, open_max;
  socklen_t len;
  int reserve;
  uv_os_fd_t fd;

  srv = listener->data;
  fd = -1;
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
  peer_init(&c->peer, ++srv->next_conn_id);
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
  LIST_INSERT_HEAD(&srv->conns, c, link);
  srv->n_conns++;

  len = sizeof(cred);
  if (uv_fileno((uv_handle_t *)&c->pipe, &fd) == 0 &&
      getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
    peer_set_cred(&c->peer, cred.pid, cred.uid);
    c->gid = cred.gid;
    if (!access_peer_allowed(&srv->access, fd, cred.uid, cred.gid,
                             c->refuse_msg, sizeof(c->refuse_msg))) {
      conn_deny(c);
      return;
    }
  } else if (srv->access.on) {
    snprintf(c->refuse_msg, sizeof(c->refuse_msg), "qrsd cannot read the "
             "peer's credentials (SO_PEERCRED)");
    conn_deny(c);
    return;
  }

  /* Over a limit, the client's first request (its HELLO) is answered
     BUSY with that request's seq, so that it can say BUSY rather than
     "connection lost"; the HELLO deadline still applies.  Far over, we
     do not wait. */
  served = srv->n_conns - srv->n_refused;
  open_max = server_open_connections(srv->conf);
  reserve = served > open_max && served <= srv->conf->max_connections &&
            conn_is_admin(c, fd);     /* an operator during a flood too */
  if (srv->n_refused >= REFUSED_SLACK && !reserve) {
    log_limited(&srv->rl_busy, LOG_LEVEL_WARN, "%s: refused at once: "
                "%u connections is the limit", c->peer.name,
                srv->conf->max_connections);
    srv->refused_total++;
    c->refused = 1;                   /* not served while it closes */
    srv->n_refused++;
    conn_close(c);
    return;
  }
  if (served > srv->conf->max_connections)
    conn_refuse(c, srv->conf->max_connections, "");
  else if (served > open_max && !reserve)
    conn_refuse(c, open_max, " for non-administrators "
                "(limits.reserved_admin_connections)");
  else if (c->peer.has_cred && conns_of_uid(srv, c->peer.uid) >
           srv->conf->max_connections_per_uid)
    conn_refuse(c, srv->conf->max_connections_per_uid, " per user");
  else if (reserve) {
    c->in_reserve = 1;
    log_debug("%s: served on a connection reserved for administration "
              "(%u of %u connections in use)", c->peer.name, served,
              srv->conf->max_connections);
  }
  log_debug("%s: connected", c->peer.name);
  conn_update_reading(c);
  return;

fail_alloc:
  log_err("out of memory accepting a connection");
}

/* Close c with an ERROR_TIMEOUT saying why (seq 0: no request). */
unsigned
server_recheck_access(struct server *srv)
{
  struct conn *c, *next;
  unsigned n = 0;
  int fd;

  for (c = LIST_FIRST(&srv->conns); c; c = next) {
    next = LIST_NEXT(c, link);
    if (c->closing || c->refused || c->revoked || !c->peer.has_cred ||
        uv_fileno((uv_handle_t *)&c->pipe, &fd) != 0)
      continue;
    if (access_peer_allowed(&srv->access, fd, c->peer.uid, c->gid,
                            c->refuse_msg, sizeof(c->refuse_msg)))
      continue;
    log_limited_ev(&srv->rl_denied, LOG_LEVEL_WARN,
                   &(struct log_fields){ .event = "access-revoked",
                                         .peer = &c->peer },
                   "%s: access revoked by the reload: %s; closed once its "
                   "%u request(s) in flight are answered", c->peer.name,
                   c->refuse_msg, c->inflight);
    srv->refused_total++;
    c->revoked = 1;
    n++;
    conn_update_reading(c);
    conn_check_idle(c);
  }
  return n;
}

static void
conn_expire(struct conn *c, const char *what, uint32_t ms)
{
  log_limited(&c->srv->rl_deadline, LOG_LEVEL_INFO, "%s: %s within %u ms; "
              "closing", c->peer.name, what, ms);
  conn_send_error(c, 0, QRS_E_TIMEOUT, "%s within %u ms; closing", what, ms);
  conn_close_after_flush(c);
}

/* The HELLO, frame and idle deadlines. */
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
  for (c = LIST_FIRST(&srv->conns); c; c = next) {
    next = LIST_NEXT(c, link);
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
      log_debug("%s: idle for %u ms; closing", c->peer.name,
                conf->idle_timeout_ms);
      conn_close_after_flush(c);
    }
  }
}

/* The listener, the sweep timer or the stop timer is closed. */
static void
on_handle_closed(uv_handle_t *h)
{
  struct server *srv;

  srv = h->data;
  if (h == (uv_handle_t *)&srv->listener)
    srv->listener_open = 0;
  else if (h == (uv_handle_t *)&srv->sweep)
    srv->sweep_open = 0;
  else
    srv->stop_timer_open = 0;
  server_maybe_stopped(srv);
}

static int
start_listening(struct server *srv, char *err, size_t errlen)
{
  int r;

  r = access_resolve(&srv->access, srv->conf->access_group,
                     srv->conf->socket_group, err, errlen);
  if (r < 0)
    return r;
  r = access_resolve_admin(&srv->admin, srv->conf->access_admin_group, err,
                           errlen);
  if (r < 0)
    return r;
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

int
server_listen_path(struct server *srv, const char *path, char *err,
                   size_t errlen)
{
  int r;

  free(srv->socket_path);
  srv->socket_path = strdup(path);
  if (!srv->socket_path)
    return -ENOMEM;
  r = sockfile_bind(srv->loop, &srv->listener, &srv->listener_open, path,
                    srv->conf->socket_mode, &srv->sock_dev, &srv->sock_ino,
                    err, errlen);
  if (r < 0)
    return r;
  srv->own_socket = 1;
  sockfile_apply_group(path, srv->conf->socket_group);
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

void
server_limits_of(const struct qrsd_conf *conf, struct reg_limits *lim,
                 size_t *ret_read_max)
{
  /* getrandom() of up to 64 KiB is short enough for the loop thread:
     larger reads go to the worker threads, which may hold this much at
     once. */
  lim->inline_max = 64 * 1024;
  lim->bytes_max = 64u * 1024 * 1024;
  if (lim->bytes_max < 4 * (size_t)conf->max_sample_count)
    lim->bytes_max = 4 * (size_t)conf->max_sample_count;
  /* One client's reads in progress: a quarter of the read budget, but at
     least one read of the largest size. */
  *ret_read_max = lim->bytes_max / 4;
  if (*ret_read_max < conf->max_sample_count)
    *ret_read_max = conf->max_sample_count;
}

int
server_init(struct server *srv, uv_loop_t *loop,
            struct qrsd_conf *conf, char *err, size_t errlen)
{
  struct reg_limits lim;
  struct ts now;
  size_t i;
  int r;

  memset(srv, 0, sizeof(*srv));
  LIST_INIT(&srv->conns);
  srv->loop = loop;
  srv->conf = conf;
  ts_now(&now);
  srv->start_mono_ns = now.monotonic_ns;

  server_limits_of(conf, &lim, &srv->read_max_per_conn);
  r = registry_new(loop, conf, &lim, &srv->reg, err, errlen);
  if (r < 0)
    return r;
  srv->arena = malloc(DECODE_ARENA);
  if (!srv->arena) {
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  r = draw_engine_new(conf, srv->reg, loop, &srv->draw);
  if (r < 0) {
    snprintf(err, errlen, "%s", r == -ENOMEM ? "out of memory" :
             "the draw journal could not be opened (see above)");
    return r;
  }
  /* Requests are held to max_frame_bytes; replies may be larger: a
     SourceInfo is under 1 KiB (its strings are bounded), plus, for a
     local source, its statistics and up to LOCAL_MECH_MAX mechanisms of
     under 512 bytes each (bounded strings too), so STATUS with every
     source fits here. */
  srv->max_reply_bytes = 2048;
  for (i = 0; i < registry_count(srv->reg); i++) {
    srv->max_reply_bytes += 1024;
    if (registry_has_local_stats(srv->reg, i))
      srv->max_reply_bytes += 1024 + LOCAL_MECH_MAX * 512;
  }
  if (srv->max_reply_bytes < conf->max_frame_bytes)
    srv->max_reply_bytes = conf->max_frame_bytes;
  r = statuspub_start(&srv->status, srv->reg, srv->draw, loop, conf,
                      conf->status_file);
  if (r < 0) {
    snprintf(err, errlen, "out of memory");
    return r;
  }
  return compat_start(loop, conf, srv->reg, draw_journal(srv->draw),
                      &srv->status, &srv->compat, err, errlen);
}

void
server_maybe_stopped(struct server *srv)
{
  void (*cb)(struct server *);

  if (!srv->stopping || !LIST_EMPTY(&srv->conns) ||
      srv->listener_open || srv->sweep_open)
    return;
  if (srv->stop_timer_open) {
    if (!uv_is_closing((uv_handle_t *)&srv->stop_timer))
      uv_close((uv_handle_t *)&srv->stop_timer, on_handle_closed);
    return;
  }
  cb = srv->on_stopped;
  srv->on_stopped = NULL;
  if (cb) {
    draw_engine_stop(srv->draw);
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
  for (c = LIST_FIRST(&srv->conns); c; c = next) {
    next = LIST_NEXT(c, link);
    if (c->inflight)
      log_warn("%s: still %u request(s) in flight at shutdown; closing",
               c->peer.name, c->inflight);
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
    uv_close((uv_handle_t *)&srv->listener, on_handle_closed);
  if (srv->sweep_open && !uv_is_closing((uv_handle_t *)&srv->sweep))
    uv_close((uv_handle_t *)&srv->sweep, on_handle_closed);
  uv_timer_init(srv->loop, &srv->stop_timer);
  srv->stop_timer.data = srv;
  srv->stop_timer_open = 1;
  uv_timer_start(&srv->stop_timer, on_stop_timeout,
                 srv->conf->request_timeout_ms + 1000, 0);
  for (c = LIST_FIRST(&srv->conns); c; c = next) {
    next = LIST_NEXT(c, link);
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
  /* the journal's last entries written first: the final status file
     shows where it ended */
  journal_finish(draw_journal(srv->draw));
  statuspub_stop(&srv->status);
  draw_engine_free(srv->draw);
  registry_free(srv->reg);
  free(srv->arena);
  free(srv->socket_path);
  memset(srv, 0, sizeof(*srv));
}
