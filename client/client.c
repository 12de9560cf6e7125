/* libqrs IPC client: blocking calls with timeouts over one Unix stream
   socket, pipelined draws by ticket, reconnect after a daemon restart.

   Replies are matched by seq.  A reply that arrives while the caller waits
   for another one is kept in its ticket's slot (draws) or dropped (a call
   that already timed out).  A connection error marks the connection dead:
   every open ticket then finishes with QRS_E_DISCONNECTED and the next call
   reconnects (unless no_reconnect). */
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

#include "clientint.h"

#define MAX_TICKETS 1024
#define ERRMSG_MAX 256
/* Replies are unpacked into a per-client arena: a draw's reply, or an
   ERROR, takes well under 1 KiB, so the token path never allocates.
   Larger replies (BYTES, STATUS with many sources) go to the heap, at most
   ARENA_HEAP_FACTOR times the reply limit in all for one reply (protobuf-c
   turns a 2-byte empty element of a repeated message into a whole
   struct). */
#define ARENA_SIZE (16 * 1024)
/* The receive buffer grows by at most this much ahead of the bytes
   received. */
#define RECV_CHUNK (256 * 1024)
/* A daemon's frame limit is believed up to qrsd's own maximum. */
#define MAX_FRAME_LIMIT (64u * 1024u * 1024u)
#define ARENA_HEAP_FACTOR 4

enum slot_state {
  SLOT_FREE = 0,
  SLOT_PENDING,                 /* sent, no reply yet */
  SLOT_DONE,                    /* reply (or error) stored */
  SLOT_CANCELLED,               /* reply will be dropped */
};

struct slot {
  enum slot_state state;
  uint32_t seq;
  int err;
  struct qrs_draw draw;
  char errmsg[ERRMSG_MAX];      /* the daemon's words for err */
};

struct qrs_client {
  pthread_mutex_t lock;
  char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
  char name[QRS_NAME_MAX];
  int timeout_ms;
  int no_reconnect;
  qrs_log_cb log_cb;
  void *log_ud;

  int fd;                       /* -1: not connected */
  int connected_once;
  uint32_t next_seq;
  struct qrs_server_info info;
  char errmsg[ERRMSG_MAX];      /* of the call in progress */

  uint8_t *rbuf;                /* bytes received, not yet consumed */
  size_t rlen;
  size_t rcap;

  struct slot *slots;
  size_t n_slots;

  ProtobufCAllocator pb_alloc;  /* over the arena below */
  size_t arena_used;            /* bytes handed out since the last unpack */
  size_t heap_used;             /* heap bytes handed out since then */
  _Alignas(16) uint8_t arena[ARENA_SIZE];
};

/* ---- small helpers -------------------------------------------------- */

/* The daemon's message for the error of the calling thread's last call,
   and the client it was made on (qrs_client_errmsg). */
void
qrs__amp_to_wire(const struct qrs_amp_params *ap, QrsIpc__Draw *m,
                 struct qrs__amp_wire *w)
{
  if (!ap)
    return;
  if (ap->set & QRS_AMP_POPULATION_MEAN) {
    qrs_ipc__double_value__init(&w->mean);
    w->mean.value = ap->population_mean;
    m->population_mean = &w->mean;
  }
  if (ap->set & QRS_AMP_POPULATION_STD) {
    qrs_ipc__double_value__init(&w->std);
    w->std.value = ap->population_std;
    m->population_std = &w->std;
  }
  if (ap->set & QRS_AMP_EPSILON) {
    qrs_ipc__double_value__init(&w->eps);
    w->eps.value = ap->uniform_clamp_epsilon;
    m->uniform_clamp_epsilon = &w->eps;
  }
  if (ap->set & QRS_AMP_ZSCORE_CALIBRATION) {
    qrs_ipc__uint32_value__init(&w->zcal);
    w->zcal.value = ap->zscore_calibration_samples;
    m->zscore_calibration_samples = &w->zcal;
  }
  if (ap->set & QRS_AMP_ECDF_CALIBRATION) {
    qrs_ipc__uint32_value__init(&w->ecal);
    w->ecal.value = ap->ecdf_calibration_samples;
    m->ecdf_calibration_samples = &w->ecal;
  }
}

static __thread struct {
  const struct qrs_client *c;
  char msg[ERRMSG_MAX];
} tl_err;

/* The server info handed out by qrs_client_server_info(). */
static __thread struct qrs_server_info tl_info;

/* End of a public call, under the lock: its error message becomes the
   calling thread's. */
static void
keep_errmsg(const struct qrs_client *c)
{
  tl_err.c = c;
  memcpy(tl_err.msg, c->errmsg, sizeof(tl_err.msg));
}

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

/* Deadline for a call started now (-1: none). */
static int64_t
deadline_for(const struct qrs_client *c)
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

static void
copy_str(char *dst, size_t cap, const char *src)
{
  snprintf(dst, cap, "%s", src ? src : "");
}

static uint32_t
take_seq(struct qrs_client *c)
{
  if (++c->next_seq == 0)
    c->next_seq = 1;
  return c->next_seq;
}

static struct slot *
find_slot(struct qrs_client *c, uint32_t seq)
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
   at a time (under the lock); release() it before the next. */
static ProtobufCMessage *
unpack(struct qrs_client *c, const ProtobufCMessageDescriptor *desc,
       size_t len, const uint8_t *data)
{
  c->arena_used = 0;
  c->heap_used = 0;
  return protobuf_c_message_unpack(desc, &c->pb_alloc, len, data);
}

static void
release(struct qrs_client *c, ProtobufCMessage *m)
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

static int
send_msg(struct qrs_client *c, uint16_t type, uint32_t seq,
         const ProtobufCMessage *m, int64_t deadline)
{
  uint8_t stackbuf[1024], *buf;
  size_t size;
  int n, r;

  size = qrs__frame_size(m);
  buf = size <= sizeof(stackbuf) ? stackbuf : malloc(size);
  if (!buf)
    return -ENOMEM;
  n = qrs__frame_pack(type, seq, m, buf, size);
  r = n < 0 ? n : send_all(c, buf, (size_t)n, deadline);
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
    n = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, 0);
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
  copy_str(msg, ERRMSG_MAX, e->message);
  release(c, &e->base);
  return r;
}

static void draw_from_wire(const QrsIpc__DrawReply *m, struct qrs_draw *d);

/* A reply for a ticket other than the one being waited for. */
static void
stash_reply(struct qrs_client *c, const struct qrs_frame_hdr *h,
            const uint8_t *payload)
{
  QrsIpc__DrawReply *m;
  struct slot *s;

  s = find_slot(c, h->seq);
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
  draw_from_wire(m, &s->draw);
  release(c, &m->base);
}

/* Take in the replies that have already arrived, without waiting: frees
   the slots of cancelled tickets whose replies are in. */
static void
drain_replies(struct qrs_client *c)
{
  struct qrs_frame_hdr h;

  memset(&h, 0, sizeof(h));
  while (c->fd >= 0 && recv_frame(c, &h, now_ms()) == 0) {
    stash_reply(c, &h, c->rbuf + QRS_FRAME_HDR_SIZE);
    consume_frame(c, &h);
  }
}

/* Wait for the reply to seq, of type want (or ERROR), stashing the others.
   On success *ret_msg holds the unpacked reply (give it back with
   release()). */
static int
wait_reply(struct qrs_client *c, uint32_t seq, uint16_t want,
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

static int
hello(struct qrs_client *c, int64_t deadline)
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
  seq = take_seq(c);
  ret = send_msg(c, QRS_MSG_HELLO, seq, &m.base, deadline);
  if (ret == 0)
    ret = wait_reply(c, seq, QRS_MSG_HELLO_REPLY, &reply, deadline);
  if (ret < 0)
    return ret;
  r = (QrsIpc__HelloReply *)reply;

  in = &c->info;
  memset(in, 0, sizeof(*in));
  in->protocol_version = r->protocol_version;
  copy_str(in->server_version, sizeof(in->server_version),
           r->server_version);
  copy_str(in->default_source, sizeof(in->default_source),
           r->default_source);
  in->default_sample_count = r->default_sample_count;
  in->max_sample_count = r->max_sample_count;
  in->max_inflight = r->max_inflight;
  in->max_frame_bytes = r->max_frame_bytes ? r->max_frame_bytes
                                           : QRS_DEFAULT_MAX_FRAME;
  if (in->max_frame_bytes > MAX_FRAME_LIMIT)
    in->max_frame_bytes = MAX_FRAME_LIMIT;
  in->max_bytes_per_request = r->max_bytes_per_request;
  copy_str(in->default_source_type, sizeof(in->default_source_type),
           r->default_source_type);
  in->default_production = r->default_production;
  in->test_sources_allowed = r->test_sources_allowed;
  in->max_reply_bytes = r->max_reply_bytes > in->max_frame_bytes
                        ? r->max_reply_bytes : in->max_frame_bytes;
  len = 0;
  for (i = 0; i < r->n_features && len < sizeof(in->features); i++)
    len += (size_t)snprintf(in->features + len, sizeof(in->features) - len,
                            "%s%s", i ? " " : "", r->features[i]);
  release(c, &r->base);

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

/* Connect (again) if needed. */
static int
ensure_connected(struct qrs_client *c, int64_t deadline)
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
  r = hello(c, deadline);
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

/* One request and its reply, reconnecting once if the connection turns
   out to be dead (for example after a daemon restart). */
static int
call(struct qrs_client *c, uint16_t type, const ProtobufCMessage *m,
     uint16_t want, ProtobufCMessage **ret_msg)
{
  int64_t deadline;
  uint32_t seq;
  int attempt, r;

  deadline = deadline_for(c);
  c->errmsg[0] = '\0';
  r = QRS_E_DISCONNECTED;
  for (attempt = 0; attempt < 2; attempt++) {
    r = ensure_connected(c, deadline);
    if (r < 0)
      return r;
    seq = take_seq(c);
    r = send_msg(c, type, seq, m, deadline);
    if (r == 0)
      r = wait_reply(c, seq, want, ret_msg, deadline);
    if (r != QRS_E_DISCONNECTED || c->no_reconnect)
      return r;
  }
  return r;
}

/* ---- public: lifetime ----------------------------------------------- */

static int
client_alloc(const char *path, const struct qrs_client_options *opts,
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
  copy_str(c->path, sizeof(c->path), path);
  copy_str(c->name, sizeof(c->name),
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

int
qrs_client_new(const char *path, const struct qrs_client_options *opts,
               struct qrs_client **ret_client)
{
  struct qrs_client *c;
  int r;

  if (!ret_client)
    return -EINVAL;
  if (!path || !*path)
    path = getenv("QRS_SOCKET");
  if (!path || !*path)
    path = QRS_DEFAULT_SOCKET;
  r = client_alloc(path, opts, &c);
  if (r < 0)
    return r;
  r = ensure_connected(c, deadline_for(c));
  if (r < 0) {
    qrs_client_free(c);
    return r;
  }
  *ret_client = c;
  return 0;
}

int
qrs__client_new_fd(int fd, const struct qrs_client_options *opts,
                   struct qrs_client **ret_client)
{
  struct qrs_client *c;
  int r;

  if (fd < 0 || !ret_client) {
    if (fd >= 0)
      close(fd);
    return -EINVAL;
  }
  r = client_alloc("(fd)", opts, &c);
  if (r < 0) {
    close(fd);
    return r;
  }
  c->no_reconnect = 1;
  c->fd = fd;
  r = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0 ? -errno : 0;
  if (r == 0)
    r = hello(c, deadline_for(c));
  if (r < 0) {
    qrs_client_free(c);
    return r;
  }
  c->connected_once = 1;
  *ret_client = c;
  return 0;
}

void
qrs_client_free(struct qrs_client *c)
{
  if (!c)
    return;
  if (tl_err.c == c)
    tl_err.c = NULL;
  if (c->fd >= 0)
    close(c->fd);
  pthread_mutex_destroy(&c->lock);
  free(c->rbuf);
  free(c->slots);
  free(c);
}

void
qrs_client_set_log_cb(struct qrs_client *c, qrs_log_cb cb, void *userdata)
{
  if (!c)
    return;
  pthread_mutex_lock(&c->lock);
  c->log_cb = cb;
  c->log_ud = userdata;
  pthread_mutex_unlock(&c->lock);
}

int
qrs_client_get_server_info(const struct qrs_client *c,
                           struct qrs_server_info *ret_info)
{
  pthread_mutex_t *lock;

  if (!c || !ret_info)
    return -EINVAL;
  /* The lock guards a reconnect's new HELLO data; c stays const. */
  lock = (pthread_mutex_t *)&c->lock;
  pthread_mutex_lock(lock);
  *ret_info = c->info;
  pthread_mutex_unlock(lock);
  return 0;
}

const struct qrs_server_info *
qrs_client_server_info(const struct qrs_client *c)
{
  if (!c || qrs_client_get_server_info(c, &tl_info) < 0)
    return NULL;
  return &tl_info;
}

const char *
qrs_client_errmsg(const struct qrs_client *c)
{
  return c && tl_err.c == c ? tl_err.msg : "";
}

const char *
qrs_client_socket_path(const struct qrs_client *c)
{
  return c ? c->path : NULL;
}

const char *
qrs_version(void)
{
  return QRS_VERSION;
}

/* ---- public: draws -------------------------------------------------- */

static void
ts_from_wire(const QrsIpc__Timestamp *w, struct qrs_timestamp *t)
{
  t->realtime_ns = w ? w->realtime_ns : 0;
  t->monotonic_ns = w ? w->monotonic_ns : 0;
}

static void
draw_from_wire(const QrsIpc__DrawReply *m, struct qrs_draw *d)
{
  const QrsIpc__DrawMeta *mm;

  memset(d, 0, sizeof(*d));
  d->u = m->u;
  d->z = m->z;
  d->sample_mean = m->sample_mean;
  d->sample_count = m->sample_count;
  copy_str(d->source, sizeof(d->source), m->source);
  copy_str(d->served_by, sizeof(d->served_by), m->served_by);
  copy_str(d->amplifier, sizeof(d->amplifier), m->amplifier);
  d->fallback = m->fallback;
  copy_str(d->served_type, sizeof(d->served_type), m->served_type);
  d->production = m->production;
  d->nonce = m->nonce;
  d->byte_sum = m->byte_sum;
  d->population_mean = m->population_mean;
  d->population_std = m->population_std;
  d->extra_bytes = m->extra_bytes;
  switch (m->echo) {
  case QRS_IPC__ECHO__ECHO_VERIFIED:
    d->echo = QRS_ECHO_VERIFIED;
    break;
  case QRS_IPC__ECHO__ECHO_MISMATCH:
    d->echo = QRS_ECHO_MISMATCH;
    break;
  default:
    d->echo = QRS_ECHO_NONE;
    break;
  }
  ts_from_wire(m->received, &d->received);
  ts_from_wire(m->generated, &d->generated);
  ts_from_wire(m->sent, &d->sent);
  mm = m->meta;
  if (mm) {
    d->has_meta = 1;
    d->meta.z = mm->z;
    d->meta.coherence_z = mm->coherence_z;
    d->meta.coherence_r = mm->coherence_r;
    d->meta.coherence_valid = mm->coherence_valid;
    d->meta.integrated_bytes = mm->integrated_bytes;
    d->meta.generation_timestamp_ns = mm->generation_timestamp_ns;
    copy_str(d->meta.purity_label, sizeof(d->meta.purity_label),
             mm->purity_label);
    copy_str(d->meta.integrator, sizeof(d->meta.integrator), mm->integrator);
    copy_str(d->meta.source_id, sizeof(d->meta.source_id), mm->source_id);
  }
}

/* Storage for the submessages of one wire Draw. */
struct draw_wire {
  QrsIpc__Commitment cm;
  struct qrs__amp_wire amp;
};

/* Fill the wire request; dw is the caller's storage for submessages. */
static int
draw_to_wire(const struct qrs_client *c, const struct qrs_draw_request *req,
             QrsIpc__Draw *m, struct draw_wire *dw)
{
  QrsIpc__Commitment *cm = &dw->cm;

  qrs_ipc__draw__init(m);
  if (!req)
    return 0;
  m->source = (char *)(req->source ? req->source : "");
  m->amplifier = (char *)(req->amplifier ? req->amplifier : "");
  m->sample_count = req->sample_count;
  m->draw_source_id = (char *)(req->draw_source_id ? req->draw_source_id :
                               "");
  m->draw_block_bytes = req->draw_block_bytes;
  if (req->commitment) {
    if (req->commitment->salt_len && !req->commitment->salt)
      return -EINVAL;
    qrs_ipc__commitment__init(cm);
    cm->salt.data = (uint8_t *)req->commitment->salt;
    cm->salt.len = req->commitment->salt_len;
    cm->step = req->commitment->step;
    cm->prev_token_id = req->commitment->prev_token_id;
    m->commitment = cm;
  }
  qrs__amp_to_wire(req->amp, m, &dw->amp);
  return 0;
}

int
qrs_client_draw(struct qrs_client *c, const struct qrs_draw_request *req,
                struct qrs_draw *ret_draw)
{
  struct draw_wire dw;
  ProtobufCMessage *reply;
  QrsIpc__Draw m;
  int r;

  if (!c || !ret_draw)
    return -EINVAL;
  r = draw_to_wire(c, req, &m, &dw);
  if (r < 0)
    return r;
  pthread_mutex_lock(&c->lock);
  if (m.sample_count == 0)
    m.sample_count = c->info.default_sample_count;
  r = call(c, QRS_MSG_DRAW, &m.base, QRS_MSG_DRAW_REPLY, &reply);
  if (r == 0) {
    draw_from_wire((QrsIpc__DrawReply *)reply, ret_draw);
    release(c, reply);
  }
  keep_errmsg(c);
  pthread_mutex_unlock(&c->lock);
  return r;
}

int
qrs_client_draw_begin(struct qrs_client *c,
                      const struct qrs_draw_request *req,
                      uint32_t *ret_ticket)
{
  struct draw_wire dw;
  struct slot *s;
  QrsIpc__Draw m;
  int64_t deadline;
  size_t i;
  int r;

  if (!c || !ret_ticket)
    return -EINVAL;
  r = draw_to_wire(c, req, &m, &dw);
  if (r < 0)
    return r;
  pthread_mutex_lock(&c->lock);
  c->errmsg[0] = '\0';
  deadline = deadline_for(c);
  r = ensure_connected(c, deadline);
  if (r < 0)
    goto out;
  if (m.sample_count == 0)
    m.sample_count = c->info.default_sample_count;
  s = NULL;
  for (i = 0; i < c->n_slots && !s; i++)
    if (c->slots[i].state == SLOT_FREE)
      s = &c->slots[i];
  if (!s) {
    drain_replies(c);
    for (i = 0; i < c->n_slots && !s; i++)
      if (c->slots[i].state == SLOT_FREE)
        s = &c->slots[i];
  }
  if (!s) {
    r = QRS_E_BUSY;
    goto out;
  }
  memset(s, 0, sizeof(*s));
  s->seq = take_seq(c);
  r = send_msg(c, QRS_MSG_DRAW, s->seq, &m.base, deadline);
  if (r == QRS_E_DISCONNECTED && !c->no_reconnect) {
    /* The daemon went away since the last call: once more, afresh. */
    r = ensure_connected(c, deadline);
    if (r == 0)
      r = send_msg(c, QRS_MSG_DRAW, s->seq, &m.base, deadline);
  }
  if (r < 0)
    goto out;
  s->state = SLOT_PENDING;
  *ret_ticket = s->seq;
out:
  keep_errmsg(c);
  pthread_mutex_unlock(&c->lock);
  return r;
}

int
qrs_client_draw_finish(struct qrs_client *c, uint32_t ticket,
                       struct qrs_draw *ret_draw)
{
  ProtobufCMessage *reply;
  struct slot *s;
  int r;

  if (!c || !ret_draw)
    return -EINVAL;
  pthread_mutex_lock(&c->lock);
  c->errmsg[0] = '\0';
  s = find_slot(c, ticket);
  if (!s || s->state == SLOT_CANCELLED) {
    r = QRS_E_NO_TICKET;
    goto out;
  }
  if (s->state == SLOT_PENDING) {
    r = wait_reply(c, ticket, QRS_MSG_DRAW_REPLY, &reply, deadline_for(c));
    if (r == -ETIMEDOUT)
      goto out;                 /* the ticket stays open */
    s->state = SLOT_DONE;
    s->err = r;
    if (r == 0) {
      draw_from_wire((QrsIpc__DrawReply *)reply, &s->draw);
      release(c, reply);
    }
  } else if (s->err < 0) {
    /* Stashed while another call waited: its message came with it. */
    memcpy(c->errmsg, s->errmsg, sizeof(c->errmsg));
  }
  r = s->err;
  if (r == 0)
    *ret_draw = s->draw;
  s->state = SLOT_FREE;
out:
  keep_errmsg(c);
  pthread_mutex_unlock(&c->lock);
  return r;
}

int
qrs_client_draw_cancel(struct qrs_client *c, uint32_t ticket)
{
  struct slot *s;
  int r;

  if (!c)
    return -EINVAL;
  pthread_mutex_lock(&c->lock);
  s = find_slot(c, ticket);
  r = 0;
  if (!s || s->state == SLOT_CANCELLED)
    r = QRS_E_NO_TICKET;
  else if (s->state == SLOT_PENDING)
    s->state = SLOT_CANCELLED;
  else
    s->state = SLOT_FREE;
  pthread_mutex_unlock(&c->lock);
  return r;
}

/* ---- public: bytes and queries -------------------------------------- */

int
qrs_client_bytes(struct qrs_client *c, const char *source, void *buf,
                 size_t n, struct qrs_bytes_info *info)
{
  QrsIpc__Bytes m = QRS_IPC__BYTES__INIT;
  ProtobufCMessage *reply;
  QrsIpc__BytesReply *b;
  int r;

  if (!c || !buf || n == 0)
    return -EINVAL;
  pthread_mutex_lock(&c->lock);
  c->errmsg[0] = '\0';
  if (c->info.max_bytes_per_request && n > c->info.max_bytes_per_request) {
    r = QRS_E_TOO_LARGE;
    goto out;
  }
  m.source = (char *)(source ? source : "");
  m.count = (uint32_t)n;
  r = call(c, QRS_MSG_BYTES, &m.base, QRS_MSG_BYTES_REPLY, &reply);
  if (r < 0)
    goto out;
  b = (QrsIpc__BytesReply *)reply;
  if (b->data.len != n) {
    r = QRS_E_PROTOCOL;
  } else {
    memcpy(buf, b->data.data, n);
    if (info) {
      copy_str(info->source, sizeof(info->source), b->source);
      copy_str(info->served_by, sizeof(info->served_by), b->served_by);
      info->fallback = b->fallback;
      copy_str(info->served_type, sizeof(info->served_type),
               b->served_type);
      info->production = b->production;
    }
  }
  release(c, reply);
out:
  keep_errmsg(c);
  pthread_mutex_unlock(&c->lock);
  return r;
}

static const char *
source_state_name(QrsIpc__SourceState st)
{
  switch (st) {
  case QRS_IPC__SOURCE_STATE__SOURCE_OK:
    return "ok";
  case QRS_IPC__SOURCE_STATE__SOURCE_DEGRADED:
    return "degraded";
  case QRS_IPC__SOURCE_STATE__SOURCE_FAILED:
    return "failed";
  default:
    return "unknown";
  }
}

/* The registry state and the local-source statistics (SourceInfo 11-16,
   40-51). */
static void
local_from_wire(struct qrs_source_info *o, const QrsIpc__SourceInfo *v)
{
  struct qrs_mechanism_info *m;
  const QrsIpc__MechanismInfo *w;
  size_t i;

  copy_str(o->state, sizeof(o->state), source_state_name(v->state));
  o->timeouts = v->timeouts;
  o->refusals = v->refusals;
  copy_str(o->last_failure, sizeof(o->last_failure), v->last_failure);
  o->last_failure_ns = v->last_failure_ns;
  o->local = v->local;
  o->min_entropy = -1.0;
  if (!v->local)
    return;
  copy_str(o->health_state, sizeof(o->health_state), v->health_state);
  copy_str(o->health_reason, sizeof(o->health_reason), v->health_reason);
  o->bytes_per_s = v->bytes_per_s;
  o->draw_bytes = v->draw_bytes;
  o->draws_per_s = v->draws_per_s;
  o->min_entropy = v->min_entropy;
  o->raw_samples = v->raw_samples;
  copy_str(o->freshness, sizeof(o->freshness), v->freshness);
  copy_str(o->conditioning, sizeof(o->conditioning), v->conditioning);
  copy_str(o->combine, sizeof(o->combine), v->combine);
  for (i = 0; i < v->n_mechanisms && i < QRS_MECHANISMS_MAX; i++) {
    m = &o->mechanisms[i];
    w = v->mechanisms[i];
    copy_str(m->name, sizeof(m->name), w->name);
    copy_str(m->description, sizeof(m->description), w->description);
    m->available = w->available;
    copy_str(m->unavailable_reason, sizeof(m->unavailable_reason),
             w->unavailable_reason);
    copy_str(m->state, sizeof(m->state), w->state);
    m->bytes_per_s = w->bytes_per_s;
    m->min_entropy = w->min_entropy;
    m->harvests = w->harvests;
    m->samples = w->samples;
    m->timeouts = w->timeouts;
    m->cut = w->cut;
    m->failures = w->failures;
    copy_str(m->last_error, sizeof(m->last_error), w->last_error);
  }
  o->n_mechanisms = i;
}

static struct qrs_source_info *
sources_from_wire(QrsIpc__SourceInfo **v, size_t n)
{
  struct qrs_source_info *out;
  size_t i;

  out = calloc(n ? n : 1, sizeof(*out));
  if (!out)
    return NULL;
  for (i = 0; i < n; i++) {
    copy_str(out[i].name, sizeof(out[i].name), v[i]->name);
    copy_str(out[i].type, sizeof(out[i].type), v[i]->type);
    copy_str(out[i].fallback, sizeof(out[i].fallback), v[i]->fallback);
    out[i].healthy = v[i]->healthy;
    out[i].is_default = v[i]->is_default;
    out[i].production = v[i]->production;
    out[i].draws = v[i]->draws;
    out[i].bytes = v[i]->bytes;
    out[i].failures = v[i]->failures;
    copy_str(out[i].detail, sizeof(out[i].detail), v[i]->detail);
    out[i].stats.window = v[i]->stat_window;
    out[i].stats.ks = v[i]->stat_ks;
    out[i].stats.ks_p = v[i]->stat_ks_p;
    out[i].stats.cusum_hi = v[i]->stat_cusum_hi;
    out[i].stats.cusum_lo = v[i]->stat_cusum_lo;
    out[i].stats.alarm = v[i]->stat_alarm;
    copy_str(out[i].stats.alarm_reason, sizeof(out[i].stats.alarm_reason),
             v[i]->stat_alarm_reason);
    out[i].fallbacks = v[i]->fallbacks;
    out[i].upstream = v[i]->upstream;
    copy_str(out[i].breaker_state, sizeof(out[i].breaker_state),
             v[i]->breaker_state);
    out[i].consecutive_failures = v[i]->consecutive_failures;
    out[i].timeout_ms = v[i]->timeout_ms;
    out[i].quota_minute_requests = v[i]->quota_minute_requests;
    out[i].quota_minute_limit = v[i]->quota_minute_limit;
    out[i].quota_day_bytes = v[i]->quota_day_bytes;
    out[i].quota_day_limit = v[i]->quota_day_limit;
    local_from_wire(&out[i], v[i]);
  }
  return out;
}

/* STATUS, HEALTH and SOURCES: an empty request and its reply. */
static int
query(struct qrs_client *c, uint16_t type, uint16_t want, const void *ret,
      ProtobufCMessage **ret_msg)
{
  QrsIpc__Status empty = QRS_IPC__STATUS__INIT;
  int r;

  if (!c || !ret)
    return -EINVAL;
  pthread_mutex_lock(&c->lock);
  r = call(c, type, &empty.base, want, ret_msg);
  keep_errmsg(c);
  pthread_mutex_unlock(&c->lock);
  return r;
}

/* A new object of size bytes (zeroed) with *sources at offset off filled
   from the wire's table; NULL when out of memory. */
static void *
new_with_sources(size_t size, size_t off, QrsIpc__SourceInfo **v, size_t n)
{
  struct qrs_source_info *table;
  char *o;

  o = calloc(1, size);
  table = sources_from_wire(v, n);
  if (!o || !table) {
    free(o);
    free(table);
    return NULL;
  }
  memcpy(o + off, &table, sizeof(table));
  return o;
}

int
qrs_client_status(struct qrs_client *c, struct qrs_status **ret_status)
{
  ProtobufCMessage *reply;
  QrsIpc__StatusReply *sr;
  struct qrs_status *s;
  int r;

  r = query(c, QRS_MSG_STATUS, QRS_MSG_STATUS_REPLY, ret_status, &reply);
  if (r < 0)
    return r;
  sr = (QrsIpc__StatusReply *)reply;
  s = new_with_sources(sizeof(*s), offsetof(struct qrs_status, sources),
                       sr->sources, sr->n_sources);
  if (s) {
    copy_str(s->server_version, sizeof(s->server_version),
             sr->server_version);
    s->protocol_version = sr->protocol_version;
    s->pid = sr->pid;
    s->uptime_ms = sr->uptime_ms;
    copy_str(s->socket_path, sizeof(s->socket_path), sr->socket_path);
    copy_str(s->default_source, sizeof(s->default_source),
             sr->default_source);
    s->connections = sr->connections;
    s->requests = sr->requests;
    s->draws = sr->draws;
    s->bytes = sr->bytes;
    s->errors = sr->errors;
    s->n_sources = sr->n_sources;
  }
  release(c, reply);
  if (!s)
    return -ENOMEM;
  *ret_status = s;
  return 0;
}

void
qrs_status_free(struct qrs_status *s)
{
  if (!s)
    return;
  free(s->sources);
  free(s);
}

static enum qrs_health_state
health_from_wire(QrsIpc__HealthState s)
{
  switch (s) {
  case QRS_IPC__HEALTH_STATE__HEALTH_HEALTHY:
    return QRS_HEALTH_HEALTHY;
  case QRS_IPC__HEALTH_STATE__HEALTH_DEGRADED:
    return QRS_HEALTH_DEGRADED;
  case QRS_IPC__HEALTH_STATE__HEALTH_FAILED:
    return QRS_HEALTH_FAILED;
  default:
    return QRS_HEALTH_UNKNOWN;
  }
}

int
qrs_client_health(struct qrs_client *c, struct qrs_health **ret_health)
{
  ProtobufCMessage *reply;
  QrsIpc__HealthReply *hr;
  struct qrs_health *h;
  int r;

  r = query(c, QRS_MSG_HEALTH, QRS_MSG_HEALTH_REPLY, ret_health, &reply);
  if (r < 0)
    return r;
  hr = (QrsIpc__HealthReply *)reply;
  h = new_with_sources(sizeof(*h), offsetof(struct qrs_health, sources),
                       hr->sources, hr->n_sources);
  if (h) {
    h->state = health_from_wire(hr->state);
    copy_str(h->message, sizeof(h->message), hr->message);
    h->n_sources = hr->n_sources;
  }
  release(c, reply);
  if (!h)
    return -ENOMEM;
  *ret_health = h;
  return 0;
}

void
qrs_health_free(struct qrs_health *h)
{
  if (!h)
    return;
  free(h->sources);
  free(h);
}

int
qrs_client_sources(struct qrs_client *c, struct qrs_sources **ret_sources)
{
  QrsIpc__SourcesReply *sr;
  ProtobufCMessage *reply;
  struct qrs_sources *s;
  int r;

  r = query(c, QRS_MSG_SOURCES, QRS_MSG_SOURCES_REPLY, ret_sources, &reply);
  if (r < 0)
    return r;
  sr = (QrsIpc__SourcesReply *)reply;
  s = new_with_sources(sizeof(*s), offsetof(struct qrs_sources, sources),
                       sr->sources, sr->n_sources);
  if (s) {
    copy_str(s->default_source, sizeof(s->default_source),
             sr->default_source);
    s->n_sources = sr->n_sources;
  }
  release(c, reply);
  if (!s)
    return -ENOMEM;
  *ret_sources = s;
  return 0;
}

void
qrs_sources_free(struct qrs_sources *s)
{
  if (!s)
    return;
  free(s->sources);
  free(s);
}

const char *
qrs_health_state_name(enum qrs_health_state s)
{
  switch (s) {
  case QRS_HEALTH_HEALTHY:
    return "healthy";
  case QRS_HEALTH_DEGRADED:
    return "degraded";
  case QRS_HEALTH_FAILED:
    return "failed";
  default:
    return "unknown";
  }
}
