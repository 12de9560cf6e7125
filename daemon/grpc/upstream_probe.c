/* The TCP pre-probe of a gRPC upstream, as qr-sampler's gRPC source has
   one (entropy/qgrpc/preprobe.py; upstream_int.h says what the other
   pieces are).

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
   upstream_fetch().

   Owns struct probe; resumes or fails the reqs that wait for it through
   upstream.c (upstream__req_dispatch(), upstream__attempt_result()). */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/log.h"
#include "grpc/upstream_int.h"

/* Connect timeout, backoff after a failed probe, and how long a
   successful fetch makes probing unnecessary. */
#define PROBE_TIMEOUT_MS 500
#define PROBE_BACKOFF_NS (5ull * 1000000000)
#define PROBE_HEALTHY_NS (30ull * 1000000000)

struct probe {
  struct upstream *u;
  SLIST_HEAD(, upreq) waiting;        /* attempts waiting for the verdict,
                                         newest first */
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
  upstream__maybe_free(u);
}

/* The verdict: 0 (reachable) or a libuv error; resume the waiters. */
static void
probe_finish(struct probe *p, int status)
{
  struct upstream *u = p->u;
  struct upreq *r;
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
    u->probe_failed_at = upstream__now_ns();
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
  while (!SLIST_EMPTY(&p->waiting)) {
    r = SLIST_FIRST(&p->waiting);
    SLIST_REMOVE_HEAD(&p->waiting, probe_link);
    if (u->closing)
      upstream__req_finish(r, -ECANCELED, 0, "source closing");
    else if (p->verdict_only || status < 0)
      upstream__attempt_result(r, -EHOSTUNREACH, -1, NULL, 0, why);
    else
      upstream__req_dispatch(r);
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
int
upstream__probe_gate(struct upreq *r)
{
  struct upstream *u = r->job->u;
  uint64_t t = upstream__now_ns();
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
  SLIST_INSERT_HEAD(&u->probe->waiting, r, probe_link);
  return 1;
}


void
upstream__probe_cancel(struct upstream *u)
{
  if (u->probe)
    uv_timer_start(&u->probe->timer, on_probe_timer, 0, 0);
}
