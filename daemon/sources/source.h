/* Entropy sources: one asynchronous interface behind which every kind of
   source sits (system, mock, device, timing, noise, grpc, prng).  One file per
   type in daemon/sources/ (timing and noise share noise.c).  The registry
   (daemon/engine/registry.h) is the only caller: it owns fallback,
   admission, health and statistics around the sources, and nothing else
   in qrsd touches a source.

   THE FETCH

   A fetch asks a source for n fresh bytes by a deadline.  The registry
   fills a struct source_fetch (buffer, n, deadline, nonce, done) and calls
   source_fetch_start() on the loop thread.  From then on:

   - Ownership.  f and f->buf belong to the registry, but the source may
     write into f->buf and use f->work and the links until it completes
     the fetch.  The registry frees neither before completion, not even
     after the deadline passed: a late fetch keeps its buffer (and its
     share of the byte budget) until it completes.

   - Completion.  Exactly once per started fetch, on the LOOP THREAD, the
     source calls source_fetch_complete(f, status): 0 (f->buf holds n
     fresh bytes) or a negative errno, with one line in f->why saying what
     went wrong (no secrets: it is logged and shown by qrsctl).  It sets
     f->generated (when the bytes came into existence) and, if an upstream
     saw the nonce, f->echo.  The completion may run before
     source_fetch_start() returns (a small non-blocking read is done
     inline) - the registry copes with that.
     A source that completes on a thread of its own (gRPC completion
     queue, a reader thread) posts the fetch with source_cq_post() from
     that thread; a struct source_cq (uv_async_t + locked list) then
     completes it on the loop thread.  Blocking sources that only have
     ops->read get this for free: source_fetch_start() runs read() inline
     when n <= inline_max (the source promises that cannot block) and
     otherwise on libuv's worker pool, completing in the after-callback.

   - Deadline.  f->deadline_ns is CLOCK_MONOTONIC nanoseconds.  The source
     should pass it on (a gRPC deadline) and give up by then, but need not
     watch it: the registry runs the timer.  When the deadline passes first
     the registry counts a timeout, serves the request elsewhere (fallback)
     or answers ERROR_TIMEOUT, and calls ops->cancel(f) if the source has
     one (a hint: complete soon, typically with -ECANCELED).  A fetch that
     completes after its deadline is discarded: its bytes are never served
     to anyone; the registry frees the buffer and releases its budget then.

   - Starting fails.  ops->fetch returns a negative errno when it could
     not start at all (no completion follows); the registry treats that
     like a failed fetch.

   THREADS

   open/close/describe/admit/fetch/cancel/stop/outcome: loop thread (open
   and close also at start-up and exit, with no loop running).  read: any
   thread (a worker), so it must be thread-safe.  source_cq_post: any
   thread.  Statistics and health live in the registry, not here.

   ADMISSION (breaker, quota, health tests)

   ops->admit, if present, is asked before each fetch: 0 lets it go, a
   negative errno ("not now": -EAGAIN breaker open, -EDQUOT over quota,
   -EIO a failed health test, ...) with a line in why sends the request
   straight to the source's fallback, labelled as such, or fails it with
   ERROR_ENTROPY_UNAVAILABLE under "fallback: error".  ops->outcome, if
   present, hears how every fetch ended (also timeouts, which the source
   does not otherwise see as a completion status), with its latency, so a
   breaker can keep its rolling statistics.

   Adding a type: a file here with a const struct source_ops, the type in
   conf.h/conf.c (start its key table with SOURCE_COMMON_KEYS) and a line
   in source.c's ops_for(). */
#ifndef QRSD_SOURCE_H
#define QRSD_SOURCE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include <uv.h>

#include "conf/conf.h"
#include "timestamp.h"

struct source;
struct upstream_stats;
struct local_stats;

struct source_fetch {
  /* Set by the registry before source_fetch_start(); read-only after. */
  struct source *src;
  uint8_t *buf;                 /* n bytes */
  size_t n;
  int64_t deadline_ns;          /* CLOCK_MONOTONIC */
  uint64_t nonce;               /* the draw's commitment, 0: none; goes
                                   upstream as sequence_id */
  void (*done)(struct source_fetch *f);   /* the registry's; loop thread */
  void *ctx;                    /* the registry's */
  int has_stream;               /* a study draw: stream is its nonce (a
                                   prng source's keystream; others
                                   ignore it); else a prng source sets
                                   its own when it starts the fetch */
  uint8_t stream[12];           /* epoch (4 bytes) || counter (8, big
                                   endian): sources/prng.h */

  /* Set by the source before completing. */
  int status;                   /* 0 or a negative errno */
  struct ts generated;          /* when the bytes were in hand */
  int echo;                     /* 0 none, 1 verified, 2 mismatch
                                   (QrsIpc__Echo values) */
  char why[160];                /* status < 0: one line; no secrets */

  /* The source's while the fetch runs. */
  uv_work_t work;               /* the worker path of ops->read */
  STAILQ_ENTRY(source_fetch) queue_link;  /* a local worker's queue */
  STAILQ_ENTRY(source_fetch) cq_link;     /* source_cq's list */
  int inline_done;              /* completed within source_fetch_start() */
};

/* A server-integrated draw (amplifier "server"): the source's upstream
   integrates the bytes itself (PurityService) and returns u with its
   metadata.  Filled by the registry; the source completes it exactly once
   on the loop thread by calling d->done(d) (never from within ops->draw),
   with status 0 (u, z, meta set) or a negative errno and why. */
struct source_draw {
  uint64_t nonce;
  char source_id[128];          /* the upstream's source id, "" default */
  uint32_t block_bytes;         /* 0: the upstream's default */
  int64_t deadline_ns;          /* CLOCK_MONOTONIC */
  void (*done)(struct source_draw *d);
  void *ctx;

  int status;
  char why[160];
  double u, z, coherence_z, coherence_r;
  int coherence_valid;
  uint32_t integrated_bytes;
  uint64_t generation_timestamp_ns;
  char purity_label[128], integrator[64], served_source_id[128];
  int echo;                     /* QrsIpc__Echo value */
  struct ts generated;

  /* The registry's, while the draw runs (it holds the source). */
  void (*reg_done)(struct source_draw *d);
  void *reg_rs;
};

struct source_ops {
  const char *type;             /* "system", "mock", ... */
  int production;               /* 0: test-only source */
  /* Set up from the config entry (s->loop and s->name are set).  0 or a
     negative errno; on failure err holds one line saying why. */
  int (*open)(struct source *s, const struct conf_source *cs, char *err,
              size_t errlen);
  /* Either fetch (asynchronous; see above) ... */
  int (*fetch)(struct source *s, struct source_fetch *f);
  /* ... or read: fill buf with n fresh bytes, synchronously.  0 or a
     negative errno (and a line in why).  Thread-safe. */
  int (*read)(struct source *s, uint8_t *buf, size_t n, char *why,
              size_t whylen);
  /* Optional: the deadline of f passed; make it complete soon. */
  void (*cancel)(struct source *s, struct source_fetch *f);
  /* Optional: may a fetch of n bytes go to this source now?  See above. */
  int (*admit)(struct source *s, size_t n, char *why, size_t whylen);
  /* Optional: f ended with status (0, -ETIMEDOUT at the deadline, ...)
     after latency_ns.  Called once per fetch, at the deadline or at the
     completion, whichever comes first. */
  void (*outcome)(struct source *s, const struct source_fetch *f,
                  int status, int64_t latency_ns);
  /* Optional: the daemon stops; close loop handles (the loop still runs
     and the source must still complete every fetch it started). */
  void (*stop)(struct source *s);
  void (*close)(struct source *s);
  /* One line describing the source's parameters, for logs and status. */
  void (*describe)(const struct source *s, char *buf, size_t len);
  /* Optional: a server-integrated draw; a negative errno when it cannot
     start (no completion follows). */
  int (*draw)(struct source *s, struct source_draw *d);
  /* Optional (network upstreams): breaker and quota state for status. */
  void (*upstream_stats)(struct source *s, struct upstream_stats *st);
  /* Optional (local sources: device, timing, noise): their health tests,
     measured capacity, min-entropy estimate and mechanisms (local.h).
     Never waits for a read in progress. */
  void (*local_stats)(struct source *s, struct local_stats *st);
  /* Optional (sources with a provider quota): the quota's use back to
     0 (an operator's request), made durable as the quota's own writes
     are.  0, or a negative errno with a line in why. */
  int (*quota_reset)(struct source *s, char *why, size_t whylen);
  /* Optional: a reload changed only the quota limits (and fallback) of
     this source: take cs's limits, keeping the use counted.  0 or a
     negative errno. */
  int (*set_quota)(struct source *s, const struct conf_source *cs);
  /* Optional: a reload replaced old (the same name, the same type, keys
     changed) by s: s takes the provider quota use old counted, so that a
     reload never lets the source past its provider's limits. */
  void (*take_use)(struct source *s, struct source *old);
  /* Optional (prng): the commitment of the source's secret (hex
     SHA-256 of its seed) into hex (65 bytes).  0, or -ENOSYS. */
  int (*commitment)(const struct source *s, char *hex);
};

struct source {
  const struct source_ops *ops;
  char *name;
  uv_loop_t *loop;              /* NULL in unit tests of read() */
  size_t inline_max;            /* reads up to this size never block */
  uint32_t draw_bytes;          /* bytes of a draw at the configured
                                   default sample_count (set by the
                                   registry; 0: not known) */
  void *priv;
};

/* Create and open the source a config entry declares, on loop (NULL: only
   read() can be used).  Returns 0 and the new source, or a negative errno
   with err filled in. */
int source_new(const struct conf_source *cs, uv_loop_t *loop,
               struct source **ret_source, char *err, size_t errlen);
void source_free(struct source *s);   /* accepts NULL */

/* The parameters line (e.g. "mock seed=1 mean_shift=+2.000"). */
void source_describe(const struct source *s, char *buf, size_t len);

/* Start f (see THE FETCH).  0: source_fetch_complete() follows exactly
   once (perhaps already done); < 0: it could not start, no completion.
   inline_limit caps the reads done on the loop thread (the daemon's own
   limit; 0: none inline). */
int source_fetch_start(struct source_fetch *f, size_t inline_limit);

/* Loop thread: f ended with status; calls f->done. */
void source_fetch_complete(struct source_fetch *f, int status);

/* Completions from other threads.  init/close on the loop thread;
   post from any thread, then f completes on the loop thread with
   status.  The queue must stay open until every posted fetch has
   completed (close it from ops->stop after the last one). */
/* Fetches in arrival order (<sys/queue.h>). */
STAILQ_HEAD(source_fetch_list, source_fetch);

struct source_cq {
  uv_async_t async;
  pthread_mutex_t lock;
  struct source_fetch_list done;
};

int source_cq_init(struct source_cq *q, uv_loop_t *loop);
void source_cq_post(struct source_cq *q, struct source_fetch *f, int status);
/* close_cb runs once the handle is closed (q may be freed then). */
void source_cq_close(struct source_cq *q, uv_close_cb close_cb);

extern const struct source_ops source_system_ops;
extern const struct source_ops source_mock_ops;
extern const struct source_ops source_device_ops;
extern const struct source_ops source_timing_ops;
extern const struct source_ops source_noise_ops;
extern const struct source_ops source_grpc_ops;
extern const struct source_ops source_prng_ops;

#endif
