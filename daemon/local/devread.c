/* Device, FIFO and file reads with deadlines, reopen backoff, an optional
   exclusive lock, and first-come first-served readers. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/regfile.h"
#include "local/devread.h"
#include "timestamp.h"

/* Poll a regular file for appended bytes this often. */
#define FILE_POLL_MS 10
/* Drain at most this much before a read. */
#define DRAIN_MAX (1u << 20)

struct devread_waiter {
  TAILQ_ENTRY(devread_waiter) link;
  size_t n;
};

static uint64_t
now_ns(void)
{
  return (uint64_t)mono_now_ns();
}

int
devread_init(struct devread *d, const char *path, size_t chunk, int lock,
             int drain)
{
  pthread_condattr_t ca;

  memset(d, 0, sizeof(*d));
  TAILQ_INIT(&d->waiters);
  d->fd = -1;
  if (!path || !path[0] || chunk > DEVREAD_CHUNK_MAX)
    return -EINVAL;
  d->path = strdup(path);
  if (!d->path)
    return -ENOMEM;
  d->chunk = chunk ? chunk : DEVREAD_CHUNK_DEFAULT;
  d->lock = lock ? 1 : 0;
  d->drain = drain ? 1 : 0;
  d->backoff_min_ms = DEVREAD_BACKOFF_MIN_MS;
  pthread_mutex_init(&d->mu, NULL);
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&d->cv, &ca);
  pthread_condattr_destroy(&ca);
  capacity_init(&d->cap);
  return 0;
}

void
devread_done(struct devread *d)
{
  if (!d->path)
    return;
  if (d->fd >= 0)
    close(d->fd);
  free(d->scratch);
  free(d->path);
  capacity_done(&d->cap);
  pthread_cond_destroy(&d->cv);
  pthread_mutex_destroy(&d->mu);
  d->path = NULL;
}

const char *
devread_kind_name(enum devread_kind k)
{
  switch (k) {
  case DEVREAD_CHAR:
    return "character device";
  case DEVREAD_FIFO:
    return "FIFO";
  case DEVREAD_FILE:
    return "file";
  case DEVREAD_UNKNOWN:
    break;
  }
  return "not opened";
}

enum devread_kind
devread_kind(struct devread *d)
{
  enum devread_kind k;

  pthread_mutex_lock(&d->mu);
  k = d->kind;
  pthread_mutex_unlock(&d->mu);
  return k;
}

const char *
devread_freshness(enum devread_kind k, int drain)
{
  switch (k) {
  case DEVREAD_CHAR:
    return "read from the driver at request time; the hardware may have "
           "generated them up to its buffer depth earlier";
  case DEVREAD_FIFO:
    return drain ? "written by the feeding tool after the request arrived "
                   "(buffered bytes are discarded first)"
                 : "written by the feeding tool; up to the pipe buffer "
                   "(64 KiB) may predate the request";
  case DEVREAD_FILE:
    return "read once, front to back, never rewound; as fresh as the "
           "appending writer";
  case DEVREAD_UNKNOWN:
    break;
  }
  return "unknown until the path is opened";
}

/* Record "<path>: <detail>" as the last error and count a failure. */
static void
set_error(struct devread *d, char *why, size_t wlen, const char *detail)
{
  pthread_mutex_lock(&d->mu);
  snprintf(d->last_error, sizeof(d->last_error), "%s: %s", d->path, detail);
  d->failures++;
  if (why)
    snprintf(why, wlen, "%s", d->last_error);
  pthread_mutex_unlock(&d->mu);
}

/* Close and schedule a reopen after the (doubling) backoff. */
static void
vanish(struct devread *d)
{
  if (d->fd >= 0)
    close(d->fd);
  d->fd = -1;
  if (d->backoff_ms == 0)
    d->backoff_ms = d->backoff_min_ms;
  else if (d->backoff_ms < DEVREAD_BACKOFF_MAX_MS)
    d->backoff_ms = d->backoff_ms * 2 > DEVREAD_BACKOFF_MAX_MS
                    ? DEVREAD_BACKOFF_MAX_MS : d->backoff_ms * 2;
  d->reopen_ns = now_ns() + (uint64_t)d->backoff_ms * 1000000u;
}

/* A regular file or FIFO in /dev itself (not on a file system mounted
   below it, such as /dev/shm) is no device: most likely what a write to
   a missing node left ("echo > /dev/hwrng" creates a file), and reading
   it would serve its stale bytes as fresh.  Elsewhere a FIFO or a file is
   a source by design. */
static int
stray_in_dev(const char *path, const struct stat *st)
{
  struct stat dev;

  if (S_ISCHR(st->st_mode) || strncmp(path, "/dev/", 5) != 0)
    return 0;
  return stat("/dev", &dev) == 0 && dev.st_dev == st->st_dev;
}

static int
dev_open(struct devread *d, char *why, size_t wlen)
{
  struct stat st;
  char msg[160];
  int fd;

  if (d->reopen_ns && now_ns() < d->reopen_ns) {
    snprintf(msg, sizeof(msg), "unavailable, next open in %llu ms",
             (unsigned long long)((d->reopen_ns - now_ns()) / 1000000u));
    set_error(d, why, wlen, msg);
    return -ENODEV;
  }
  fd = open(d->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    snprintf(msg, sizeof(msg), "cannot open: %s", strerror(errno));
    set_error(d, why, wlen, msg);
    vanish(d);
    return -ENODEV;
  }
  if (fstat(fd, &st) < 0 ||
      !(S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode) || S_ISREG(st.st_mode))) {
    close(fd);
    set_error(d, why, wlen, "not a character device, FIFO or regular file");
    vanish(d);
    return -ENODEV;
  }
  if (stray_in_dev(d->path, &st)) {
    close(fd);
    snprintf(msg, sizeof(msg), "%s in /dev, not a device node (left by a "
             "write to a missing device?)", regfile_type_name(st.st_mode));
    set_error(d, why, wlen, msg);
    vanish(d);
    return -ENODEV;
  }
  if (d->lock && flock(fd, LOCK_EX | LOCK_NB) < 0) {
    int e = errno;

    close(fd);
    snprintf(msg, sizeof(msg), "exclusive lock: %s",
             e == EWOULDBLOCK ? "held by another process" : strerror(e));
    set_error(d, why, wlen, msg);
    vanish(d);
    return -EBUSY;
  }
  d->fd = fd;
  pthread_mutex_lock(&d->mu);   /* kind: also read by devread_kind() */
  d->kind = S_ISCHR(st.st_mode) ? DEVREAD_CHAR
            : S_ISFIFO(st.st_mode) ? DEVREAD_FIFO : DEVREAD_FILE;
  if (d->reopen_ns)
    d->reopens++;
  pthread_mutex_unlock(&d->mu);
  d->reopen_ns = 0;
  return 0;
}

/* Discard what is already buffered (FIFO and character devices). */
static void
drain_buffered(struct devread *d)
{
  ssize_t k;
  size_t total;

  if (d->kind == DEVREAD_FILE)
    return;
  if (!d->scratch) {
    d->scratch = malloc(d->chunk);
    if (!d->scratch)
      return;
  }
  total = 0;
  while (total < DRAIN_MAX) {
    k = read(d->fd, d->scratch, d->chunk);
    if (k <= 0)
      break;
    total += (size_t)k;
  }
  pthread_mutex_lock(&d->mu);
  d->drained += total;
  pthread_mutex_unlock(&d->mu);
}

static int
wait_ms(uint64_t deadline)
{
  uint64_t t;

  t = now_ns();
  if (t >= deadline)
    return 0;
  return (int)((deadline - t + 999999) / 1000000);
}

/* The read itself, by the reader at the head of the queue. */
static int
dev_read(struct devread *d, uint8_t *buf, size_t n, uint64_t deadline,
         char *why, size_t wlen)
{
  struct pollfd pfd;
  size_t done, want;
  ssize_t k;
  int r, ms, e;

  if (d->fd < 0) {
    r = dev_open(d, why, wlen);
    if (r < 0)
      return r;
  }
  if (d->drain)
    drain_buffered(d);
  done = 0;
  while (done < n) {
    want = n - done < d->chunk ? n - done : d->chunk;
    k = read(d->fd, buf + done, want);
    if (k > 0) {
      done += (size_t)k;      /* a short read is fine: read the rest */
      continue;
    }
    if (k == 0) {
      if (d->kind == DEVREAD_FILE) {
        /* End of a file: wait for the writer to append. */
        ms = wait_ms(deadline);
        if (ms == 0)
          goto timeout;
        poll(NULL, 0, ms < FILE_POLL_MS ? ms : FILE_POLL_MS);
        continue;
      }
      set_error(d, why, wlen, d->kind == DEVREAD_FIFO
                ? "end of file: the FIFO's writer went away"
                : "end of file from the device");
      vanish(d);
      return -ENODEV;
    }
    e = errno;
    if (e == EINTR)
      continue;
    if (e == EAGAIN) {
      ms = wait_ms(deadline);
      if (ms == 0)
        goto timeout;
      pfd.fd = d->fd;
      pfd.events = POLLIN;
      pfd.revents = 0;
      r = poll(&pfd, 1, ms);
      if (r < 0 && errno != EINTR) {
        e = errno;
        goto vanished;
      }
      /* POLLHUP without data: the read that follows sees the EOF. */
      continue;
    }
vanished:
    set_error(d, why, wlen, strerror(e));
    vanish(d);
    return -ENODEV;
  }
  d->backoff_ms = 0;
  return 0;

timeout:
  {
    char msg[128];

    snprintf(msg, sizeof(msg), "too slow: %zu of %zu bytes by the deadline",
             done, n);
    set_error(d, why, wlen, msg);
  }
  return -ETIMEDOUT;
}

int
devread_read(struct devread *d, uint8_t *buf, size_t n, uint64_t deadline_ns,
             char *why, size_t wlen)
{
  struct devread_waiter self;
  struct timespec ts;
  uint64_t t0, queued;
  int r;

  t0 = now_ns();
  if (t0 >= deadline_ns) {
    set_error(d, why, wlen, "the deadline passed before the read started");
    return -ETIMEDOUT;
  }

  /* Join the queue, unless the measured rate says it is hopeless. */
  pthread_mutex_lock(&d->mu);
  queued = d->queued_bytes;
  pthread_mutex_unlock(&d->mu);
  if (!capacity_admit(&d->cap, n, queued, deadline_ns - t0, 1.0)) {
    char msg[160];

    snprintf(msg, sizeof(msg), "refused: %zu bytes behind %llu queued "
             "cannot arrive in time at %.0f B/s", n,
             (unsigned long long)queued, capacity_rate(&d->cap));
    set_error(d, why, wlen, msg);
    return -EAGAIN;
  }

  self.n = n;
  pthread_mutex_lock(&d->mu);
  TAILQ_INSERT_TAIL(&d->waiters, &self, link);
  d->queued_bytes += n;
  ts.tv_sec = (time_t)(deadline_ns / 1000000000u);
  ts.tv_nsec = (long)(deadline_ns % 1000000000u);
  r = 0;
  while (TAILQ_FIRST(&d->waiters) != &self) {
    if (pthread_cond_timedwait(&d->cv, &d->mu, &ts) == ETIMEDOUT &&
        TAILQ_FIRST(&d->waiters) != &self) {
      r = -ETIMEDOUT;
      break;
    }
  }
  pthread_mutex_unlock(&d->mu);

  t0 = now_ns();
  if (r == 0)
    r = dev_read(d, buf, n, deadline_ns, why, wlen);
  else
    set_error(d, why, wlen, "the deadline passed while waiting for other "
              "readers");

  pthread_mutex_lock(&d->mu);
  TAILQ_REMOVE(&d->waiters, &self, link);
  d->queued_bytes -= n;
  if (r == 0) {
    d->reads++;
    d->bytes += n;
  }
  pthread_cond_broadcast(&d->cv);
  pthread_mutex_unlock(&d->mu);
  if (r == 0)
    capacity_note(&d->cap, n, now_ns() - t0);
  return r;
}
