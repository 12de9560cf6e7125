/* The worker behind the local sources (device, timing, noise): one thread
   per source that serves its fetches one at a time, in arrival order, so
   that no client of a slow or exclusive device starves; completions go
   back to the loop thread through a source_cq.  Nothing blocks the loop.

   Admission: a fetch is refused at once (completed with -EAGAIN and a
   line saying why, which sends it to the source's fallback, labelled)
   when the source's measured rate cannot deliver its bytes, behind the
   bytes already queued, by its deadline; or when LOCAL_QUEUE_MAX fetches
   are already waiting.  A fetch whose deadline passes while it waits is
   completed with -ETIMEDOUT without touching the source. */
#ifndef QRSD_SOURCES_LOCAL_H
#define QRSD_SOURCES_LOCAL_H

#include <pthread.h>
#include <stdint.h>

#include "local/capacity.h"
#include "sources/source.h"

#define LOCAL_QUEUE_MAX 64
#define LOCAL_MECH_MAX 16       /* mechanisms reported per source */

/* Statistics of a local source (source_ops.local_stats), for STATUS,
   SOURCES and the status file.  The strings are static or copied. */
struct local_mech_stats {
  const char *name;
  const char *what;             /* one line: what it samples */
  int available;
  char why[128];                /* unavailable: why not */
  const char *state;            /* untested | startup | ok | failed |
                                   unavailable */
  double bytes_per_s;           /* raw samples per second of harvesting,
                                   0: not measured */
  double min_entropy;           /* MCV estimate, bits per raw sample; -1:
                                   no sample yet */
  uint64_t harvests;            /* reads it took part in */
  uint64_t samples;             /* raw samples it contributed */
  uint64_t timeouts;            /* reads it fell short at the deadline */
  uint64_t cut;                 /* reads it was stopped early because the
                                   mechanisms that can make the deadline
                                   had delivered (xor; not a failure) */
  uint64_t failures;            /* health-test failures and errors */
  char last_error[160];
};

struct local_stats {
  const char *health_state;     /* startup | ok | failed (SP 800-90B) */
  char health_reason[160];      /* the last health-test failure, "" */
  double bytes_per_s;           /* measured throughput, 0: not yet */
  uint32_t draw_bytes;          /* the default sample_count */
  double draws_per_s;           /* bytes_per_s / draw_bytes */
  double min_entropy;           /* MCV estimate of the raw samples, bits
                                   per sample; -1: no sample yet */
  uint64_t raw_samples;         /* samples behind that estimate */
  const char *freshness;        /* what "fresh" means here, or "" */
  const char *conditioning;     /* raw | vonneumann | sha256 | "" */
  const char *combine;          /* xor | concat | "" */
  size_t n_mech;
  struct local_mech_stats mech[LOCAL_MECH_MAX];
};

/* Blocking: n fresh bytes into buf by deadline_ns; 0 or -errno + why. */
typedef int (*local_serve_fn)(struct source *s, uint8_t *buf, size_t n,
                              int64_t deadline_ns, char *why, size_t wlen);
/* Optional, blocking: re-test a failed source (health start-up test). */
typedef void (*local_retest_fn)(struct source *s);

struct local_worker {
  struct source *src;
  local_serve_fn serve;
  local_retest_fn retest;
  struct capacity cap;
  struct source_cq cq;
  int cq_open;

  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct source_fetch_list queue;  /* through queue_link */
  size_t queued;
  uint64_t queued_bytes;
  int retest_wanted;
  int stopping;
  pthread_t th;
  int started;
};

/* Start the worker of s (s->loop must be set).  0 or -errno + err. */
int local_worker_start(struct local_worker *w, struct source *s,
                       local_serve_fn serve, local_retest_fn retest,
                       char *err, size_t errlen);

/* ops->fetch. */
int local_worker_fetch(struct local_worker *w, struct source_fetch *f);

/* Ask for a re-test (at most one pending). */
void local_worker_want_retest(struct local_worker *w);

/* ops->stop: finish the fetch in hand, cancel the queued ones, close the
   completion queue. */
void local_worker_stop(struct local_worker *w);

/* ops->close (after stop and the loop's end). */
void local_worker_done(struct local_worker *w);

/* "12345 B/s, 1.23 draws/s at 10000 B" or "rate not measured yet"; the
   draw size is the source's draw_bytes (the configured default
   sample_count). */
void local_worker_rate_line(struct local_worker *w, char *buf, size_t len);

/* Fill the rate fields of st (bytes_per_s, draw_bytes, draws_per_s). */
void local_worker_rate(struct local_worker *w, struct local_stats *st);

/* The source_ops of a local source whose priv struct starts with its
   struct local_worker: fetch through the worker, read() through its
   serve function (with a deadline of LOCAL_READ_TIMEOUT_NS from now: the
   synchronous path of tools and unit tests), stop the worker. */
#define LOCAL_READ_TIMEOUT_NS 5000000000LL
int local_source_fetch(struct source *s, struct source_fetch *f);
int local_source_read(struct source *s, uint8_t *buf, size_t n, char *why,
                      size_t whylen);
void local_source_stop(struct source *s);

/* Those three, as members of a struct source_ops initialiser. */
#define LOCAL_SOURCE_OPS \
  .fetch = local_source_fetch, \
  .read = local_source_read, \
  .stop = local_source_stop

#endif
