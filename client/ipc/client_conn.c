/* libqrs IPC client: the connection (client_conn.h has the pieces).

   Connect and the HELLO exchange, whole frames out before a deadline and
   in with a receive buffer that grows with the bytes that arrive, the
   per-client arena replies are unpacked into, one call and its reply
   (reconnecting once), and the replies of tickets other than the one
   waited for, kept in their slots. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "qrs-config.h"

#include <qrs/client.h>

#include "client_conn.h"

#define MAX_TICKETS 1024
/* The receive buffer grows by at most this much ahead of the bytes
   received. */
#define RECV_CHUNK (256 * 1024)
/* A daemon's frame limit is believed up to qrsd's own maximum. */
#define MAX_FRAME_LIMIT (64u * 1024u * 1024u)
#define ARENA_HEAP_FACTOR 4

static void client_log(struct qrs_client *c, int level, const char *fmt,
                       ...) __attribute__((format(printf, 3, 4)));

static void
client_log(struct qrs_client *c, int level, const char *fmt, ...)
{
  char msg[512];
  va_list ap;

  if (!c->log_cb)
    return;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  c->log_cb(level, msg, c->log_ud);
}

static int64_t
now_ms(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t
qrs__client_deadline(const struct qrs_client *c)
{
  return c->timeout_ms < 0 ? -1 : now_ms() + c->timeout_ms;
}

/* poll() timeout until deadline: -1 (for ever), or >= 0. */
static int
remaining(int64_t deadline)
{
  int64_t left;

  if (deadline < 0)
    return -1;
  left = deadline - now_ms();
  if (left < 0)
    return 0;
  return left > INT32_MAX ? INT32_MAX : (int)left;
}

uint32_t
qrs__client_take_seq(struct qrs_client *c)
{
  if (++c->next_seq == 0)
    c->next_seq = 1;
  return c->next_seq;
}

struct slot *
qrs__client_find_slot(struct qrs_client *c, uint32_t seq)
{
  size_t i;

  for (i = 0; i < c->n_slots; i++)
    if (c->slots[i].state != SLOT_FREE && c->slots[i].seq == seq)
      return &c->slots[i];
  return NULL;
}

/* ---- unpacking replies --------------------------------------------- */

static void *
arena_alloc(void *ud, size_t size)
{
  struct qrs_client *c = ud;
  size_t need, limit;
  void *p;

  need = (size + 15) & ~(size_t)15;
  if (need >= size && need <= ARENA_SIZE - c->arena_used) {
    p = c->arena + c->arena_used;
    c->arena_used += need;
    return p;
  }
  limit = (size_t)c->info.max_reply_bytes * ARENA_HEAP_FACTOR;
  if (size > limit || c->heap_used > limit - size)
    return NULL;                /* unpack fails: QRS_E_PROTOCOL */
  p = malloc(size);
  if (p)
    c->heap_used += size;
  return p;
}

static void
arena_free(void *ud, void *p)
{
  struct qrs_client *c = ud;
  uintptr_t a = (uintptr_t)p, lo = (uintptr_t)c->arena;

  if (a >= lo && a < lo + ARENA_SIZE)
    return;                     /* the arena is reset as a whole */
  free(p);
}

/* Unpack a payload into the arena.  At most one unpacked reply is alive
   at a time (under the lock); qrs__client_release() it before the next. */
static ProtobufCMessage *
unpack(struct qrs_client *c, const ProtobufCMessageDescriptor *desc,
       size_t len, const uint8_t *data)
{
  c->arena_used = 0;
  c->heap_used = 0;
  return protobuf_c_message_unpack(desc, &c->pb_alloc, len, data);
}

void
qrs__client_release(struct qrs_client *c, ProtobufCMessage *m)
{
  if (m)
    protobuf_c_message_free_unpacked(m, &c->pb_alloc);
  c->arena_used = 0;
  c->heap_used = 0;
}

/* ---- connection ----------------------------------------------------- */

/* Forget the connection: every open ticket is lost with it. */
static void
disconnect(struct qrs_client *c, int why)
{
  size_t i;

  if (c->fd < 0)
    return;
  client_log(c, LOG_INFO, "libqrs: connection to %s lost: %s", c->path,
             qrs_strerror(why));
  close(c->fd);
  c->fd = -1;
  c->rlen = 0;
  for (i = 0; i < c->n_slots; i++) {
    if (c->slots[i].state == SLOT_PENDING) {
      c->slots[i].state = SLOT_DONE;
      c->slots[i].err = QRS_E_DISCONNECTED;
    } else if (c->slots[i].state == SLOT_CANCELLED) {
      c->slots[i].state = SLOT_FREE;
    }
  }
}

static int
sock_connect(const char *path, int timeout_ms, int *ret_fd)
{
  struct sockaddr_un sa;
  struct timeval tv;
  int fd, r;

  fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -errno;
  if (timeout_ms >= 0) {
    tv.tv_sec = timeout_ms / 1000;
    tv.tv_usec = (timeout_ms % 1000) * 1000;
    /* Bounds a connect() to a socket whose backlog is full. */
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  }
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  memcpy(sa.sun_path, path, strlen(path) + 1);
  if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
    r = errno == EAGAIN || errno == EINPROGRESS ? -ETIMEDOUT : -errno;
    close(fd);
    return r;
  }
  if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) {
    r = -errno;
    close(fd);
    return r;
  }
  *ret_fd = fd;
  return 0;
}

/* Write a whole frame before deadline.  A partial write that cannot be
   completed leaves the stream unusable: the connection is dropped. */
static int
send_all(struct qrs_client *c, const uint8_t *buf, size_t len,
         int64_t deadline)
{
  struct pollfd p;
  size_t done;
  ssize_t n;
  int r;

  done = 0;
  while (done < len) {
    n = send(c->fd, buf + done, len - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno != EAGAIN) {
      r = -errno;
      disconnect(c, r);
      return QRS_E_DISCONNECTED;
    }
    p.fd = c->fd;
    p.events = POLLOUT;
    r = poll(&p, 1, remaining(deadline));
    if (r == 0) {
      if (done > 0)
        disconnect(c, -ETIMEDOUT);
      return -ETIMEDOUT;
    }
    if (r < 0 && errno != EINTR)
      return -errno;
  }
  return 0;
}

int
qrs__client_send(struct qrs_client *c, uint16_t type, uint32_t seq,
                 const ProtobufCMessage *m, int64_t deadline)
{
  uint8_t stackbuf[1024], *buf;
  size_t size;
  int n, r;

  size = qrs__frame_size(m);
  buf = size <= sizeof(stackbuf) ? stackbuf : malloc(size);
  if (!buf)
    return -ENOMEM;
  n = qrs__frame_pack_sized(type, seq, m, buf, size);
  r = n < 0 ? n : send_all(c, buf, (size_t)n, deadline);
  c->just_sent = r == 0;
  if (buf != stackbuf)
    free(buf);
  return r;
}

/* Read until rbuf holds one whole frame; return its header.  The frame
   occupies rbuf[0 .. QRS_FRAME_HDR_SIZE + hdr.length). */
static int
recv_frame(struct qrs_client *c, struct qrs_frame_hdr *ret_hdr,
           int64_t deadline)
{
  struct qrs_frame_hdr h;
  struct pollfd p;
  size_t need;
  uint8_t *nb;
  ssize_t n;
  int r;

  memset(&h, 0, sizeof(h));
  for (;;) {
    need = QRS_FRAME_HDR_SIZE;
    if (c->rlen >= QRS_FRAME_HDR_SIZE) {
      r = qrs__frame_hdr_decode(c->rbuf, c->info.max_reply_bytes, &h);
      if (r < 0) {
        disconnect(c, r);
        return QRS_E_PROTOCOL;
      }
      need += h.length;
      if (c->rlen >= need) {
        *ret_hdr = h;
        return 0;
      }
    }
    /* Grow with the bytes that arrive, not with what a header claims. */
    if (need - c->rlen > RECV_CHUNK)
      need = c->rlen + RECV_CHUNK;
    if (need > c->rcap) {
      nb = realloc(c->rbuf, need);
      if (!nb)
        return -ENOMEM;
      c->rbuf = nb;
      c->rcap = need;
    }
    if (c->just_sent && c->rlen == 0) {
      /* The answer to a request sent a moment ago is not here yet: wait
         for it at once instead of a recv() that would say EAGAIN. */
      c->just_sent = 0;
      n = -1;
      errno = EAGAIN;
    } else {
      n = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, 0);
    }
    if (n > 0) {
      c->rlen += (size_t)n;
      continue;
    }
    if (n == 0) {
      disconnect(c, -ECONNRESET);
      return QRS_E_DISCONNECTED;
    }
    if (errno == EINTR)
      continue;
    if (errno != EAGAIN) {
      disconnect(c, -errno);
      return QRS_E_DISCONNECTED;
    }
    p.fd = c->fd;
    p.events = POLLIN;
    r = poll(&p, 1, remaining(deadline));
    if (r == 0)
      return -ETIMEDOUT;
    if (r < 0 && errno != EINTR)
      return -errno;
  }
}

static void
consume_frame(struct qrs_client *c, const struct qrs_frame_hdr *h)
{
  size_t len;

  len = QRS_FRAME_HDR_SIZE + (size_t)h->length;
  memmove(c->rbuf, c->rbuf + len, c->rlen - len);
  c->rlen -= len;
}

/* An ERROR payload -> its QRS_E_* code; the daemon's message goes to
   msg (ERRMSG_MAX bytes). */
static int
decode_error(struct qrs_client *c, const uint8_t *payload, size_t len,
             char *msg)
{
  QrsIpc__Error *e;
  int r;

  e = (QrsIpc__Error *)unpack(c, &qrs_ipc__error__descriptor, len,
                              payload);
  if (!e)
    return QRS_E_PROTOCOL;
  r = qrs__error_from_wire(e->code);
  qrs__copy_str(msg, ERRMSG_MAX, e->message);
  qrs__client_release(c, &e->base);
  return r;
}

/* A reply for a ticket other than the one being waited for. */
static void
stash_reply(struct qrs_client *c, const struct qrs_frame_hdr *h,
            const uint8_t *payload)
{
  QrsIpc__DrawReply *m;
  struct slot *s;

  s = qrs__client_find_slot(c, h->seq);
  if (!s || s->state == SLOT_DONE)
    return;                     /* a call that gave up on it */
  if (s->state == SLOT_CANCELLED) {
    s->state = SLOT_FREE;
    return;
  }
  s->state = SLOT_DONE;
  if (h->type == QRS_MSG_ERROR) {
    s->err = decode_error(c, payload, h->length, s->errmsg);
    return;
  }
  m = h->type == QRS_MSG_DRAW_REPLY
        ? (QrsIpc__DrawReply *)unpack(c, &qrs_ipc__draw_reply__descriptor,
                                      h->length, payload)
        : NULL;
  if (!m) {
    s->err = QRS_E_PROTOCOL;
    return;
  }
  s->err = 0;
  qrs__draw_from_wire(m, &s->draw);
  qrs__client_release(c, &m->base);
}

void
qrs__client_drain(struct qrs_client *c)
{
  struct qrs_frame_hdr h;

  memset(&h, 0, sizeof(h));
  while (c->fd >= 0 && recv_frame(c, &h, now_ms()) == 0) {
    stash_reply(c, &h, c->rbuf + QRS_FRAME_HDR_SIZE);
    consume_frame(c, &h);
  }
}

int
qrs__client_wait_reply(struct qrs_client *c, uint32_t seq, uint16_t want,
                       ProtobufCMessage **ret_msg, int64_t deadline)
{
  struct qrs_frame_hdr h;
  ProtobufCMessage *m;
  const uint8_t *payload;
  int r;

  memset(&h, 0, sizeof(h));
  for (;;) {
    if (c->fd < 0)
      return QRS_E_DISCONNECTED;
    r = recv_frame(c, &h, deadline);
    if (r < 0)
      return r;
    payload = c->rbuf + QRS_FRAME_HDR_SIZE;
    if (h.seq == 0 && h.type == QRS_MSG_ERROR) {
      /* Not an answer: the daemon is closing the connection and says why
         (a deadline, or an older qrsd over its connection limit). */
      r = decode_error(c, payload, h.length, c->errmsg);
      consume_frame(c, &h);
      disconnect(c, r);
      return r;
    }
    if (h.seq != seq) {
      stash_reply(c, &h, payload);
      consume_frame(c, &h);
      continue;
    }
    if (h.type == QRS_MSG_ERROR) {
      r = decode_error(c, payload, h.length, c->errmsg);
      consume_frame(c, &h);
      return r;
    }
    if (h.type != want) {
      disconnect(c, QRS_E_PROTOCOL);
      return QRS_E_PROTOCOL;
    }
    m = unpack(c, qrs__msg_descriptor(want), h.length, payload);
    consume_frame(c, &h);
    if (!m) {
      disconnect(c, QRS_E_PROTOCOL);
      return QRS_E_PROTOCOL;
    }
    *ret_msg = m;
    return 0;
  }
}

int
qrs__client_hello(struct qrs_client *c, int64_t deadline)
{
  QrsIpc__Hello m = QRS_IPC__HELLO__INIT;
  QrsIpc__HelloReply *r;
  ProtobufCMessage *reply;
  struct qrs_server_info *in;
  struct slot *ns;
  uint32_t seq;
  size_t i, len, n;
  int ret;

  m.protocol_version = QRS_PROTO_VERSION;
  m.client_name = c->name;
  seq = qrs__client_take_seq(c);
  ret = qrs__client_send(c, QRS_MSG_HELLO, seq, &m.base, deadline);
  if (ret == 0)
    ret = qrs__client_wait_reply(c, seq, QRS_MSG_HELLO_REPLY, &reply,
                                 deadline);
  if (ret < 0)
    return ret;
  r = (QrsIpc__HelloReply *)reply;

  in = &c->info;
  memset(in, 0, sizeof(*in));
  in->protocol_version = r->protocol_version;
  qrs__copy_str(in->server_version, sizeof(in->server_version),
                r->server_version);
  qrs__copy_str(in->default_source, sizeof(in->default_source),
                r->default_source);
  in->default_sample_count = r->default_sample_count;
  in->max_sample_count = r->max_sample_count;
  in->max_inflight = r->max_inflight;
  in->max_frame_bytes = r->max_frame_bytes ? r->max_frame_bytes
                                           : QRS_DEFAULT_MAX_FRAME;
  if (in->max_frame_bytes > MAX_FRAME_LIMIT)
    in->max_frame_bytes = MAX_FRAME_LIMIT;
  in->max_bytes_per_request = r->max_bytes_per_request;
  qrs__copy_str(in->default_source_type, sizeof(in->default_source_type),
                r->default_source_type);
  in->default_production = r->default_production;
  in->test_sources_allowed = r->test_sources_allowed;
  in->max_reply_bytes = r->max_reply_bytes > in->max_frame_bytes
                        ? r->max_reply_bytes : in->max_frame_bytes;
  len = 0;
  for (i = 0; i < r->n_features && len < sizeof(in->features); i++)
    len += (size_t)snprintf(in->features + len, sizeof(in->features) - len,
                            "%s%s", i ? " " : "", r->features[i]);
  qrs__client_release(c, &r->base);

  n = in->max_inflight;
  if (n == 0 || n > MAX_TICKETS)
    n = MAX_TICKETS;
  if (n > c->n_slots) {
    ns = realloc(c->slots, n * sizeof(*ns));
    if (!ns)
      return -ENOMEM;
    memset(ns + c->n_slots, 0, (n - c->n_slots) * sizeof(*ns));
    c->slots = ns;
    c->n_slots = n;
  }
  return 0;
}

int
qrs__client_connect(struct qrs_client *c, int64_t deadline)
{
  int r;

  if (c->fd >= 0)
    return 0;
  if (c->connected_once && c->no_reconnect)
    return QRS_E_DISCONNECTED;
  r = sock_connect(c->path, remaining(deadline), &c->fd);
  if (r < 0)
    return r;
  c->rlen = 0;
  r = qrs__client_hello(c, deadline);
  if (r < 0) {
    if (c->fd >= 0) {
      close(c->fd);
      c->fd = -1;
    }
    return r;
  }
  if (c->connected_once)
    client_log(c, LOG_INFO, "libqrs: reconnected to %s (qrsd %s)", c->path,
               c->info.server_version);
  c->connected_once = 1;
  return 0;
}

int
qrs__client_call(struct qrs_client *c, uint16_t type,
                 const ProtobufCMessage *m, uint16_t want,
                 ProtobufCMessage **ret_msg)
{
  int64_t deadline;
  uint32_t seq;
  int attempt, r;

  deadline = qrs__client_deadline(c);
  c->errmsg[0] = '\0';
  r = QRS_E_DISCONNECTED;
  for (attempt = 0; attempt < 2; attempt++) {
    r = qrs__client_connect(c, deadline);
    if (r < 0)
      return r;
    seq = qrs__client_take_seq(c);
    r = qrs__client_send(c, type, seq, m, deadline);
    if (r == 0)
      r = qrs__client_wait_reply(c, seq, want, ret_msg, deadline);
    if (r != QRS_E_DISCONNECTED || c->no_reconnect)
      return r;
  }
  return r;
}

/* ---- a client's storage ------------------------------------------- */

int
qrs__client_alloc(const char *path, const struct qrs_client_options *opts,
                  struct qrs_client **ret_client)
{
  struct qrs_client *c;
  int r;

  c = calloc(1, sizeof(*c));
  if (!c)
    return -ENOMEM;
  c->fd = -1;
  c->pb_alloc.alloc = arena_alloc;
  c->pb_alloc.free = arena_free;
  c->pb_alloc.allocator_data = c;
  pthread_mutex_init(&c->lock, NULL);
  if (strlen(path) >= sizeof(c->path)) {
    r = -ENAMETOOLONG;
    goto fail;
  }
  qrs__copy_str(c->path, sizeof(c->path), path);
  qrs__copy_str(c->name, sizeof(c->name),
                opts && opts->client_name ? opts->client_name : "libqrs");
  c->timeout_ms = opts && opts->timeout_ms ? opts->timeout_ms
                                           : QRS_DEFAULT_TIMEOUT_MS;
  c->no_reconnect = opts ? opts->no_reconnect : 0;
  c->info.max_frame_bytes = QRS_DEFAULT_MAX_FRAME;
  c->info.max_reply_bytes = QRS_DEFAULT_MAX_FRAME;
  *ret_client = c;
  return 0;

fail:
  qrs_client_free(c);
  return r;
}
