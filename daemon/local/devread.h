/* Reading fresh bytes from a device node, FIFO or file (the core of the
   `device` source), on a worker thread, never on the loop thread.

   What "fresh" means depends on what the path is:
   - character device (/dev/hwrng, a QRNG card's node): the bytes the
     driver hands over on read(2), which the hardware generated at most
     its buffer depth earlier (hw_random keeps a small kernel buffer; many
     QRNG cards a FIFO of some KiB).  Nothing is buffered in qrsd.
   - FIFO fed by a vendor tool: the writer's bytes; up to the pipe buffer
     (64 KiB by default) may have been written before the request arrived.
     With drain on, whatever is already buffered is discarded before each
     read, so every byte served was written after the request arrived.
   - regular file: read once, front to back, never rewound; at its end
     the reader waits for more to be appended (tail -f), up to the
     deadline.  A file is as fresh as whoever appends to it.
   A regular file or FIFO in /dev itself (not below a mount there, such
   as /dev/shm) is refused (-ENODEV): there a device node is expected,
   and such a file is what a write to a missing node leaves.

   Failures are typed:
   -ETIMEDOUT  not enough bytes by the deadline (a slow device or writer);
               the device stays open, the partial bytes are discarded.
   -ENODEV     the device vanished (ENODEV, ENXIO, EIO, EOF on a device or
               FIFO: the writer went away) or cannot be opened; it is
               closed and re-opened at the next read after a backoff
               (100 ms doubling to 10 s, reset by a successful read).
               Reads during the backoff fail at once with -ENODEV.
   -EBUSY      the exclusive lock (flock) is held by another process.

   Concurrent readers are served one at a time in arrival order (a FIFO
   queue, not a mutex that a busy reader can re-take): four clients on one
   slow device all make progress.  A reader whose deadline passes while
   it waits its turn leaves the queue with -ETIMEDOUT. */
#ifndef QRSD_DEVREAD_H
#define QRSD_DEVREAD_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "local/capacity.h"

#define DEVREAD_BACKOFF_MIN_MS 100
#define DEVREAD_BACKOFF_MAX_MS 10000
#define DEVREAD_CHUNK_DEFAULT 4096
#define DEVREAD_CHUNK_MAX (1u << 20)

enum devread_kind {
  DEVREAD_UNKNOWN,              /* not opened yet */
  DEVREAD_CHAR,
  DEVREAD_FIFO,
  DEVREAD_FILE,
};

struct devread_waiter;
TAILQ_HEAD(devread_waiters, devread_waiter);

struct devread {
  char *path;
  size_t chunk;                 /* bytes per read(2) */
  int lock;                     /* flock(LOCK_EX) the node */
  int drain;                    /* discard buffered bytes before a read */
  unsigned backoff_min_ms;

  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct devread_waiters waiters;       /* readers in arrival order */
  uint64_t queued_bytes;        /* bytes the waiting readers want */

  /* Below: only the reader at the head of the queue. */
  int fd;                       /* -1: closed */
  enum devread_kind kind;       /* written under mu (devread_kind()) */
  unsigned backoff_ms;          /* 0: no backoff pending */
  uint64_t reopen_ns;           /* no open before this (CLOCK_MONOTONIC) */
  uint8_t *scratch;             /* drain buffer */

  /* Statistics (under mu). */
  struct capacity cap;
  uint64_t reads, bytes, failures, reopens, drained;
  char last_error[160];
};

/* Set up a reader for path (nothing is opened until the first read).
   chunk 0: DEVREAD_CHUNK_DEFAULT; at most DEVREAD_CHUNK_MAX.  Returns 0 or
   -EINVAL / -ENOMEM. */
int devread_init(struct devread *d, const char *path, size_t chunk,
                 int lock, int drain);
void devread_done(struct devread *d);

/* n fresh bytes into buf by deadline_ns (CLOCK_MONOTONIC).  0 or one of
   the errors above (plus -EAGAIN when admission control says that the
   device's measured rate cannot deliver n bytes, behind the bytes already
   queued, by the deadline: refused at once).  On failure, why (may be
   NULL) gets one line. */
int devread_read(struct devread *d, uint8_t *buf, size_t n,
                 uint64_t deadline_ns, char *why, size_t wlen);

/* "character device", "FIFO", "file" or "not opened". */
const char *devread_kind_name(enum devread_kind k);

/* The kind of node, as of the last open (any thread). */
enum devread_kind devread_kind(struct devread *d);

/* What "fresh" means for this kind, one line (for qrsctl sources). */
const char *devread_freshness(enum devread_kind k, int drain);

#endif
