/* The compat endpoint's own listener and relay; see compat_gate.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <netinet/in.h>

#include "base/container.h"
#include "base/log.h"
#include "server/compat_gate.h"
#include "server/sockfile.h"
#include "timestamp.h"

#define RELAY_BUF 8192
/* A refusal for lack of room, or a failed relay, keeps the endpoint
   degraded for this long: a flood that is held, not renewed, still
   shows. */
#define DEGRADED_NS (5 * (int64_t)1000000000)

union stream {
  uv_handle_t h;
  uv_stream_t s;
  uv_tcp_t tcp;
  uv_pipe_t pipe;
};

/* One direction of a relay: what was read from one side, being written
   to the other. */
struct half {
  uv_write_t w;
  int busy;                         /* a write in flight */
  char buf[RELAY_BUF];
};

struct peer {
  int family;                       /* AF_INET, AF_INET6, AF_UNIX (uid) */
  uint8_t addr[16];
  uid_t uid;
};

struct gconn {
  struct gate *g;
  struct gconn *prev, *next;
  union stream out;                 /* the client */
  uv_pipe_t in;                     /* gRPC's private socket */
  uv_connect_t connect;
  struct peer peer;
  struct half up, down;             /* client -> gRPC, gRPC -> client */
  int in_open;                      /* in was initialised */
  int closing;
  int handles;                      /* open handles, for the last close */
  int listed;                       /* counted in g->conns */
  int64_t opened_ns;
  uint64_t up_bytes, down_bytes;
};

struct gate {
  uv_loop_t *loop;
  union stream lis;
  int is_unix;
  char *inner_path;
  char *path;                       /* a unix listener's, to remove */
  dev_t dev;
  ino_t ino;
  unsigned max_conns, max_per_peer;
  int fd_limit;                     /* refuse a descriptor numbered >= */
  struct gconn *head;
  size_t n_conns, n_handles;
  uint64_t accepted, refused_full, refused_peer, refused_fds, relay_failed;
  int64_t last_room_ns, last_fail_ns;
  struct log_ratelimit rl_full, rl_peer, rl_fail;
  int stopping, lis_open;
  union stream drain;               /* takes one when out of memory */
  int drain_busy;
  uv_timer_t sweep;                 /* every second: stalled relays */
  int sweep_open;
  int64_t stall_ns;
  void (*on_stall)(void *ctx);
  void *ctx;
  uint64_t stalls;
  uv_pipe_t probe;                  /* is gRPC accepting? */
  uv_connect_t probe_c;
  uv_write_t probe_w;
  char probe_buf[64];
  int probe_open, probing;
  int64_t probe_ns;
};

static void conn_close(struct gconn *c);

static void
maybe_free(struct gate *g)
{
  if (!g->stopping || g->lis_open || g->sweep_open || g->probe_open ||
      g->n_handles > 0)
    return;
  free(g->inner_path);
  free(g->path);
  free(g);
}

/* The gate's own handles (listener, sweep timer, probe) closed. */
static void
on_gate_handle_closed(uv_handle_t *h)
{
  struct gate *g = h->data;

  if (h == &g->lis.h)
    g->lis_open = 0;
  else if (h == (uv_handle_t *)&g->sweep)
    g->sweep_open = 0;
  else
    g->probe_open = 0;
  maybe_free(g);
}

static void
on_conn_closed(uv_handle_t *h)
{
  struct gconn *c = h->data;
  struct gate *g = c->g;

  if (--c->handles > 0)
    return;
  if (c->listed) {
    if (c->prev)
      c->prev->next = c->next;
    else
      g->head = c->next;
    if (c->next)
      c->next->prev = c->prev;
    g->n_conns--;
  }
  free(c);
  g->n_handles--;
  maybe_free(g);
}

static void probe_start(struct gate *g);
static int suspect(const struct gconn *c, int64_t now);

static void
conn_close(struct gconn *c)
{
  if (c->closing)
    return;
  c->closing = 1;
  if (c->listed && suspect(c, mono_now_ns()))
    probe_start(c->g);
  uv_close(&c->out.h, on_conn_closed);
  if (c->in_open)
    uv_close((uv_handle_t *)&c->in, on_conn_closed);
}

static void
alloc_up(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
  struct gconn *c = h->data;

  *buf = uv_buf_init(c->up.buf, sizeof(c->up.buf));
}

static void
alloc_down(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
  struct gconn *c = h->data;

  *buf = uv_buf_init(c->down.buf, sizeof(c->down.buf));
}

static void on_read_out(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);
static void on_read_in(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);

static void
on_up_written(uv_write_t *w, int status)
{
  struct gconn *c = CONTAINER_OF(w, struct gconn, up.w);

  c->up.busy = 0;
  if (c->closing)
    return;
  if (status < 0 || uv_read_start(&c->out.s, alloc_up, on_read_out) < 0)
    conn_close(c);
}

static void
on_down_written(uv_write_t *w, int status)
{
  struct gconn *c = CONTAINER_OF(w, struct gconn, down.w);

  c->down.busy = 0;
  if (c->closing)
    return;
  if (status < 0 ||
      uv_read_start((uv_stream_t *)&c->in, alloc_down, on_read_in) < 0)
    conn_close(c);
}

/* Pass what one side sent to the other; stop reading that side until it
   is written.  Either side ending ends both. */
static void
relay(struct gconn *c, uv_stream_t *from, uv_stream_t *to, struct half *hf,
      ssize_t n, uv_write_cb cb)
{
  uv_buf_t b;

  if (n == 0)
    return;
  if (n < 0) {
    conn_close(c);
    return;
  }
  uv_read_stop(from);
  b = uv_buf_init(hf->buf, (unsigned)n);
  hf->busy = 1;
  if (uv_write(&hf->w, to, &b, 1, cb) < 0) {
    hf->busy = 0;
    conn_close(c);
  }
}

static void
on_read_out(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
  struct gconn *c = s->data;

  if (n > 0)
    c->up_bytes += (uint64_t)n;
  relay(c, s, (uv_stream_t *)&c->in, &c->up, n, on_up_written);
}

static void
on_read_in(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
  struct gconn *c = s->data;

  if (n > 0)
    c->down_bytes += (uint64_t)n;
  relay(c, s, &c->out.s, &c->down, n, on_down_written);
}

static void
on_inner_connected(uv_connect_t *req, int status)
{
  struct gconn *c = CONTAINER_OF(req, struct gconn, connect);
  struct gate *g = c->g;

  if (c->closing)
    return;
  if (status < 0) {
    g->relay_failed++;
    g->last_fail_ns = mono_now_ns();
    log_limited(&g->rl_fail, LOG_LEVEL_ERR, "gRPC compat: cannot reach "
                "gRPC's socket %s: %s; connection closed", g->inner_path,
                uv_strerror(status));
    conn_close(c);
    return;
  }
  if (uv_read_start(&c->out.s, alloc_up, on_read_out) < 0 ||
      uv_read_start((uv_stream_t *)&c->in, alloc_down, on_read_in) < 0)
    conn_close(c);
}

/* The peer of an accepted connection: its IP address, or for a unix
   socket its uid.  Peers that cannot be told count as one. */
static void
peer_of(struct gconn *c, int fd)
{
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  struct ucred cr;
  socklen_t crlen = sizeof(cr);

  memset(&c->peer, 0, sizeof(c->peer));
  if (c->g->is_unix) {
    c->peer.family = AF_UNIX;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) == 0)
      c->peer.uid = cr.uid;
    return;
  }
  if (getpeername(fd, (struct sockaddr *)&ss, &len) < 0)
    return;
  c->peer.family = ss.ss_family;
  if (ss.ss_family == AF_INET)
    memcpy(c->peer.addr, &((struct sockaddr_in *)&ss)->sin_addr, 4);
  else if (ss.ss_family == AF_INET6)
    memcpy(c->peer.addr, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
}

static size_t
peer_conns(const struct gate *g, const struct peer *p)
{
  const struct gconn *c;
  size_t n = 0;

  for (c = g->head; c; c = c->next)
    if (c->peer.family == p->family && c->peer.uid == p->uid &&
        memcmp(c->peer.addr, p->addr, sizeof(p->addr)) == 0)
      n++;
  return n;
}

static void
room_refused(struct gate *g, const char *why)
{
  g->last_room_ns = mono_now_ns();
  log_limited(&g->rl_full, LOG_LEVEL_WARN, "gRPC compat: connection "
              "refused: %s (%zu open)", why, g->n_conns);
}

static void
on_drained(uv_handle_t *h)
{
  struct gate *g = h->data;

  g->drain_busy = 0;
  g->n_handles--;
  maybe_free(g);
}

/* Take the pending connection and close it: one left in the queue would
   stop libuv's accepting. */
static void
drain(struct gate *g)
{
  if (g->drain_busy)
    return;
  if (g->is_unix)
    uv_pipe_init(g->loop, &g->drain.pipe, 0);
  else
    uv_tcp_init(g->loop, &g->drain.tcp);
  g->drain.h.data = g;
  g->drain_busy = 1;
  g->n_handles++;
  uv_accept(&g->lis.s, &g->drain.s);
  uv_close(&g->drain.h, on_drained);
}

static void
on_connection(uv_stream_t *lis, int status)
{
  struct gate *g = lis->data;
  struct gconn *c;
  uv_os_fd_t fd;
  char why[96];
  int r;

  if (status < 0) {
    /* EMFILE, ENFILE, ENOBUFS: libuv has closed what it could not hold
       and goes on listening. */
    g->refused_fds++;
    snprintf(why, sizeof(why), "accept: %s", uv_strerror(status));
    room_refused(g, why);
    return;
  }
  c = calloc(1, sizeof(*c));
  if (!c) {
    g->refused_full++;
    room_refused(g, "out of memory");
    drain(g);
    return;
  }
  c->g = g;
  c->out.h.data = c;
  c->in.data = c;
  if (g->is_unix)
    r = uv_pipe_init(g->loop, &c->out.pipe, 0);
  else
    r = uv_tcp_init(g->loop, &c->out.tcp);
  if (r < 0) {
    free(c);
    drain(g);
    return;
  }
  c->handles = 1;
  g->n_handles++;
  if (uv_accept(lis, &c->out.s) < 0 || uv_fileno(&c->out.h, &fd) < 0) {
    conn_close(c);
    return;
  }
  if (fd + 2 >= g->fd_limit) {       /* the relay's end, gRPC's end */
    g->refused_fds++;
    room_refused(g, "descriptors kept in reserve");
    conn_close(c);
    return;
  }
  if (g->n_conns >= g->max_conns) {
    g->refused_full++;
    snprintf(why, sizeof(why), "grpc_compat.max_connections %u reached",
             g->max_conns);
    room_refused(g, why);
    conn_close(c);
    return;
  }
  peer_of(c, fd);
  if (peer_conns(g, &c->peer) >= g->max_per_peer) {
    g->refused_peer++;
    log_limited(&g->rl_peer, LOG_LEVEL_WARN, "gRPC compat: connection "
                "refused: grpc_compat.max_connections_per_peer %u reached "
                "by one peer", g->max_per_peer);
    conn_close(c);
    return;
  }
  c->listed = 1;
  c->next = g->head;
  if (g->head)
    g->head->prev = c;
  g->head = c;
  g->n_conns++;
  g->accepted++;
  c->opened_ns = mono_now_ns();
  uv_pipe_init(g->loop, &c->in, 0);
  c->in_open = 1;
  c->handles++;
  uv_pipe_connect(&c->connect, &c->in, g->inner_path, on_inner_connected);
}

static void
probe_end(struct gate *g)
{
  if (g->probe_open && !uv_is_closing((uv_handle_t *)&g->probe))
    uv_close((uv_handle_t *)&g->probe, on_gate_handle_closed);
  g->probing = 0;
}

static void
alloc_probe(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
  struct gate *g = h->data;

  *buf = uv_buf_init(g->probe_buf, sizeof(g->probe_buf));
}

/* Anything from gRPC, or its closing the probe: it accepts. */
static void
on_probe_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
  struct gate *g = s->data;

  if (n != 0)
    probe_end(g);
}

static void
on_probe_written(uv_write_t *w, int status)
{
}

static void
on_probe_connected(uv_connect_t *req, int status)
{
  struct gate *g = req->data;
  uv_buf_t b;

  if (!g->probing)
    return;
  if (status < 0) {
    probe_end(g);                   /* counted as a failed relay already */
    return;
  }
  /* One byte: gRPC answers at once, or waits for the rest of a TLS
     ClientHello and closes at its handshake timeout. */
  b = uv_buf_init((char *)"P", 1);
  if (uv_read_start((uv_stream_t *)&g->probe, alloc_probe,
                    on_probe_read) < 0 ||
      uv_write(&g->probe_w, (uv_stream_t *)&g->probe, &b, 1,
               on_probe_written) < 0)
    probe_end(g);
}

/* Is gRPC accepting?  A relay whose client sent something and had nothing
   back for a second says it may not be (gRPC 1.51 drops its listener for
   good after an accept error).  The gate's own connection tells: gRPC
   answers it or closes it within its handshake timeout. */
static void
probe_start(struct gate *g)
{
  if (g->probing || g->probe_open || g->stopping)
    return;
  if (uv_pipe_init(g->loop, &g->probe, 0) < 0)
    return;
  g->probe.data = g;
  g->probe_open = 1;
  g->probing = 1;
  g->probe_ns = mono_now_ns();
  g->probe_c.data = g;
  uv_pipe_connect(&g->probe_c, &g->probe, g->inner_path, on_probe_connected);
}

static int
suspect(const struct gconn *c, int64_t now)
{
  return c->up_bytes > 0 && c->down_bytes == 0 &&
         now - c->opened_ns >= 1000000000;
}

/* Every second: a relay that has had nothing from gRPC well past gRPC's
   handshake timeout is closed (gRPC never accepted it); a probe that has
   had no answer as long means gRPC is not accepting, and the owner is
   told to start it again. */
static void
on_sweep(uv_timer_t *t)
{
  struct gate *g = t->data;
  struct gconn *c, *next;
  int64_t now = mono_now_ns();

  for (c = g->head; c; c = next) {
    next = c->next;
    if (c->closing || c->down_bytes > 0)
      continue;
    if (suspect(c, now))
      probe_start(g);
    if (now - c->opened_ns >= g->stall_ns)
      conn_close(c);
  }
  if (!g->probing || now - g->probe_ns < g->stall_ns)
    return;
  probe_end(g);
  g->stalls++;
  g->last_fail_ns = now;
  log_limited(&g->rl_fail, LOG_LEVEL_ERR, "gRPC compat: gRPC has not "
              "answered a connection in %lld ms: it is not accepting; "
              "starting it again", (long long)(g->stall_ns / 1000000));
  if (g->on_stall)
    g->on_stall(g->ctx);
}

int
gate_set_inner(struct gate *g, const char *path)
{
  char *p = strdup(path);

  if (!p)
    return -ENOMEM;
  free(g->inner_path);
  g->inner_path = p;
  return 0;
}

/* Descriptors open now, about: the lowest free one. */
static int
fds_open(void)
{
  int n = 0, fd;

  fd = fcntl(0, F_DUPFD_CLOEXEC, 0);
  if (fd >= 0) {
    n = fd;
    close(fd);
  }
  return n;
}

static int
bind_unix(struct gate *g, const char *path, unsigned mode, char *err,
          size_t errlen)
{
  int r;

  r = sockfile_bind(g->loop, &g->lis.pipe, &g->lis_open, path, mode,
                    &g->dev, &g->ino, err, errlen);
  if (r == 0)
    g->path = strdup(path);
  return r;
}

static int
bind_tcp(struct gate *g, const char *listen, int *ret_port, char *err,
         size_t errlen)
{
  struct addrinfo hints, *ai = NULL;
  struct sockaddr_storage ss;
  char host[256];
  const char *colon, *h, *port;
  size_t hl;
  int r, len;

  colon = strrchr(listen, ':');
  if (!colon || colon == listen || !colon[1]) {
    snprintf(err, errlen, "grpc_compat.listen '%s': not unix:PATH or "
             "HOST:PORT", listen);
    return -EINVAL;
  }
  h = listen;
  hl = (size_t)(colon - listen);
  if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
    h++;
    hl -= 2;
  }
  if (hl >= sizeof(host)) {
    snprintf(err, errlen, "grpc_compat.listen '%s': host too long", listen);
    return -EINVAL;
  }
  memcpy(host, h, hl);
  host[hl] = '\0';
  port = colon + 1;
  memset(&hints, 0, sizeof(hints));
  hints.ai_socktype = SOCK_STREAM;
  /* One listener, on the first address: localhost is 127.0.0.1 (gRPC
     bound ::1 too; every client of it falls back to 127.0.0.1). */
  if (strcmp(host, "localhost") == 0)
    hints.ai_family = AF_INET;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  r = getaddrinfo(host, port, &hints, &ai);
  if (r != 0) {
    snprintf(err, errlen, "grpc_compat.listen '%s': %s", listen,
             gai_strerror(r));
    return -EINVAL;
  }
  r = uv_tcp_init(g->loop, &g->lis.tcp);
  if (r < 0) {
    freeaddrinfo(ai);
    snprintf(err, errlen, "cannot listen on '%s': %s", listen,
             uv_strerror(r));
    return r;
  }
  g->lis_open = 1;
  r = uv_tcp_bind(&g->lis.tcp, ai->ai_addr, 0);
  freeaddrinfo(ai);
  if (r < 0) {
    snprintf(err, errlen, "cannot listen on '%s': %s", listen,
             uv_strerror(r));
    return r;
  }
  len = sizeof(ss);
  r = uv_tcp_getsockname(&g->lis.tcp, (struct sockaddr *)&ss, &len);
  if (r < 0) {
    snprintf(err, errlen, "cannot listen on '%s': %s", listen,
             uv_strerror(r));
    return r;
  }
  *ret_port = ntohs(ss.ss_family == AF_INET6 ?
                    ((struct sockaddr_in6 *)&ss)->sin6_port :
                    ((struct sockaddr_in *)&ss)->sin_port);
  return 0;
}

int
gate_start(uv_loop_t *loop, const struct gate_conf *conf, struct gate **ret,
           int *ret_port, char *err, size_t errlen)
{
  struct gate *g;
  struct rlimit rl;
  long room;
  int r, port = 1;

  *ret = NULL;
  g = calloc(1, sizeof(*g));
  if (!g)
    return -ENOMEM;
  g->loop = loop;
  g->lis.h.data = g;
  g->max_conns = conf->max_conns;
  g->max_per_peer = conf->max_per_peer;
  g->inner_path = strdup(conf->inner_path);
  if (!g->inner_path) {
    free(g);
    return -ENOMEM;
  }
  g->stall_ns = ((int64_t)conf->stall_ms + 2000) * 1000000;
  g->on_stall = conf->on_stall;
  g->ctx = conf->ctx;
  g->fd_limit = 1 << 30;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
      rl.rlim_cur < (rlim_t)g->fd_limit)
    g->fd_limit = (int)rl.rlim_cur - (int)conf->fd_reserve;
  /* Three descriptors a connection: what fits above those open now. */
  room = ((long)g->fd_limit - fds_open()) / 3;
  if (room < (long)g->max_conns) {
    if (room < 1) {
      snprintf(err, errlen, "grpc_compat: RLIMIT_NOFILE %llu leaves no "
               "descriptors for it after the %u kept for the main socket "
               "and the sources: raise LimitNOFILE or lower "
               "limits.max_connections", (unsigned long long)rl.rlim_cur,
               conf->fd_reserve);
      free(g->inner_path);
      free(g);
      return -EMFILE;
    }
    log_warn("grpc_compat.max_connections %u: RLIMIT_NOFILE %llu leaves "
             "room for %ld, the bound now (each takes three descriptors; "
             "%u are kept for the main socket and the sources)", g->max_conns,
             (unsigned long long)rl.rlim_cur, room, conf->fd_reserve);
    g->max_conns = (unsigned)room;
  }
  g->is_unix = strncmp(conf->listen, "unix:", 5) == 0;
  if (g->is_unix)
    r = bind_unix(g, conf->listen + 5, conf->socket_mode, err, errlen);
  else
    r = bind_tcp(g, conf->listen, &port, err, errlen);
  if (r == 0) {
    r = uv_listen(&g->lis.s, 511, on_connection);
    if (r < 0)
      snprintf(err, errlen, "cannot listen on '%s': %s", conf->listen,
               uv_strerror(r));
  }
  if (r == 0) {
    uv_timer_init(loop, &g->sweep);
    g->sweep.data = g;
    g->sweep_open = 1;
    uv_timer_start(&g->sweep, on_sweep, 1000, 1000);
    uv_unref((uv_handle_t *)&g->sweep);
  }
  if (r < 0) {
    g->stopping = 1;
    if (g->lis_open)
      uv_close(&g->lis.h, on_gate_handle_closed);
    else
      maybe_free(g);
    return r;
  }
  *ret = g;
  if (ret_port)
    *ret_port = port;
  return 0;
}

void
gate_stop(struct gate *g)
{
  struct gconn *c;
  struct stat st;

  if (!g || g->stopping)
    return;
  g->stopping = 1;
  /* the socket file, unless another has taken its place */
  if (g->path && lstat(g->path, &st) == 0 && st.st_dev == g->dev &&
      st.st_ino == g->ino)
    unlink(g->path);
  for (c = g->head; c; c = c->next)
    conn_close(c);
  uv_close(&g->lis.h, on_gate_handle_closed);
  uv_close((uv_handle_t *)&g->sweep, on_gate_handle_closed);
  probe_end(g);
}

void
gate_stats(const struct gate *g, struct gate_stats *st)
{
  memset(st, 0, sizeof(*st));
  if (!g)
    return;
  st->conns = g->n_conns;
  st->accepted = g->accepted;
  st->refused_full = g->refused_full;
  st->refused_peer = g->refused_peer;
  st->refused_fds = g->refused_fds;
  st->relay_failed = g->relay_failed;
  st->relay_bytes = (uint64_t)g->n_conns * sizeof(struct gconn);
  st->max_conns = g->max_conns;
}

int
gate_degraded(const struct gate *g, char *why, size_t whylen)
{
  int64_t now = mono_now_ns();
  int fd;

  if (!g)
    return 0;
  if (g->n_conns >= g->max_conns) {
    snprintf(why, whylen, "gRPC compat endpoint: at its bound of %u "
             "connections", g->max_conns);
    return 1;
  }
  /* The lowest free descriptor says whether one more would fit. */
  fd = fcntl(0, F_DUPFD_CLOEXEC, 0);
  if (fd >= 0)
    close(fd);
  if (fd < 0 || fd + 2 >= g->fd_limit) {
    snprintf(why, whylen, "gRPC compat endpoint: out of descriptors "
             "(%zu connections)", g->n_conns);
    return 1;
  }
  if (g->last_room_ns && now - g->last_room_ns < DEGRADED_NS) {
    snprintf(why, whylen, "gRPC compat endpoint: refusing connections "
             "for lack of room (%zu open)", g->n_conns);
    return 1;
  }
  if (g->probing && now - g->probe_ns >= 1000000000) {
    snprintf(why, whylen, "gRPC compat endpoint: gRPC has not answered "
             "for %lld ms", (long long)((now - g->probe_ns) / 1000000));
    return 1;
  }
  if (g->last_fail_ns && now - g->last_fail_ns < DEGRADED_NS) {
    snprintf(why, whylen, "gRPC compat endpoint: cannot reach gRPC's "
             "socket");
    return 1;
  }
  return 0;
}
