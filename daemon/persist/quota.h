/* Provider quotas of one upstream: bytes per request (a larger fetch is
   split into several upstream requests), requests per minute (a sliding
   60-second window) and bytes per UTC day.

   The daily count survives a restart: it is persisted in the state
   directory ("<state_dir>/quota-<source>.json", replaced atomically and
   durably).  To avoid a disk write per draw the file records a
   reservation: the count plus one block (1/256 of the daily limit, at
   least a byte; QUOTA_PERSIST_BLOCK without a limit), but never beyond
   the daily limit, written at the first admission (never at start-up: a
   run that fetches nothing costs nothing) and again whenever less than
   half a block of it is left.  Those writes are not made here (an fsync
   must not hold up the loop): quota_persist_due() hands the text to the
   caller, which writes it on a worker thread and reports with
   quota_persist_done(); quota_flush_due() hands over the exact count the
   same way (clean shutdown).  After a crash the count resumes from the
   reservation, so a crash costs at most one block (1/256 of the day's
   allowance) and never more than what was left of it; at most about 512
   reservations are written in a day of full use.  The count under-counts
   only if more than half a block was admitted while a reservation write
   was still in flight, or a crash comes within that write after UTC
   midnight.
   A state file dated after today (the clock went back) keeps its count
   for today, with a warning in the log, rather than granting a fresh
   day.
   The file also carries the per-minute window (admissions of the last 60
   s, per wall-clock second), so that a restart does not grant a fresh
   minute: exact after a clean stop, as of the last write after a crash.

   Bookkeeping: the caller passes the times; the only file I/O is
   quota_init()'s read (start-up, before the loop serves; see
   base/regfile.h).  Loop thread only. */
#ifndef QRSD_QUOTA_H
#define QRSD_QUOTA_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define QUOTA_MAX_RPM 100000          /* requests-per-minute ceiling */
#define QUOTA_PERSIST_BLOCK (1u << 20)  /* the block without a daily limit */
#define QUOTA_STATE_MAX 4096           /* the state file's text */

struct quota_params {
  uint64_t max_bytes_per_request;     /* 0: unlimited (never split) */
  uint64_t max_requests_per_minute;   /* 0: unlimited; <= QUOTA_MAX_RPM */
  uint64_t max_bytes_per_day;         /* 0: unlimited */
};

enum quota_verdict {
  QUOTA_OK = 0,
  QUOTA_RPM,                          /* over requests per minute */
  QUOTA_DAY,                          /* over bytes per day */
};

struct quota {
  struct quota_params p;
  char *path;                         /* persisted day count, or NULL */
  double *ring;                       /* admission times (monotonic s) */
  size_t ring_len, ring_head;         /* entries held, next slot */
  int64_t day;                        /* UTC days since the epoch */
  uint64_t day_bytes;                 /* used today */
  uint64_t persisted;                 /* value in the file (durable) */
  int admitted;                       /* an admission today, by us */
  int pending;                        /* a reservation write in flight */
  int64_t pending_day;                /* the day it was made for */
  uint64_t refused_rpm, refused_day;  /* statistics */
  int persist_error;                  /* last write's negative errno, or 0 */
  int reset_pending;                  /* reset while a write was in flight:
                                         its value is stale */
};

/* Reference defaults (35200 B, 500/min, 524288000 B/day). */
void quota_params_default(struct quota_params *p);

/* Set up; with state_dir non-NULL load today's count for source name.
   Writes nothing.  0, or -EINVAL (parameters out of range, a state file
   that does not parse, or one that is not a regular file: err says
   which), -ELOOP (a symbolic link), -EISDIR, -ENOMEM or an errno from
   reading (err names the file).  Release
   with quota_done() (accepts a zeroed or half-built quota). */
int quota_init(struct quota *q, const struct quota_params *p,
               const char *state_dir, const char *name, double now_mono,
               time_t now_real, char *err, size_t errlen);
void quota_done(struct quota *q);

/* The size of each upstream request for a fetch of n bytes, and how many
   requests it takes (n > 0). */
size_t quota_chunk(const struct quota *q, size_t n, size_t *ret_requests);

/* May a fetch of n bytes go upstream now?  QUOTA_OK records it (its
   requests and bytes); otherwise nothing is recorded and the counter of
   the refusal grows.  No I/O. */
enum quota_verdict quota_admit(struct quota *q, size_t n, double now_mono,
                               time_t now_real);

/* A reservation to write: 1 with the state file's text in buf
   (QUOTA_STATE_MAX bytes), its length and the count it reserves (the
   quota is then pending until quota_persist_done()); 0 when none is due
   (none before the day's first admission), one is in flight, or there is
   no state file. */
int quota_persist_due(struct quota *q, double now_mono, time_t now_real,
                      char *buf, size_t *ret_len, uint64_t *ret_value);
/* The write of value finished with r (0 or a negative errno: in
   persist_error). */
void quota_persist_done(struct quota *q, uint64_t value, int r);
/* Requests in the current 60-second window. */
uint64_t quota_minute_requests(struct quota *q, double now_mono);
/* Bytes used today (rolls over at UTC midnight). */
uint64_t quota_day_bytes(struct quota *q, time_t now_real);

/* The exact count to persist at a clean shutdown, as quota_persist_due()
   hands over a reservation (report with quota_persist_done()): 1 with
   the text in buf, or 0 without a state file or while a write is in
   flight (ask again when it is done). */
int quota_flush_due(struct quota *q, double now_mono, time_t now_real,
                    char *buf, size_t *ret_len, uint64_t *ret_value);

/* An operator's reset: no requests in the minute window and no bytes
   used today.  The next quota_persist_due() writes a reservation from 0
   (a write in flight then counts for nothing), so that a restart keeps
   the reset.  The refusal counters are kept. */
void quota_reset(struct quota *q, time_t now_real);

/* New limits (a reload), the use so far kept: the requests of the last
   minute (as many as the new limit holds) and today's bytes.  0,
   -EINVAL (above QUOTA_MAX_RPM) or -ENOMEM (the old limits stay). */
int quota_set_params(struct quota *q, const struct quota_params *p);

/* dst replaces src (the same source opened again by a reload, its limits
   dst's): dst takes src's use, exact where dst's came from the state
   file: today's bytes (the larger count) and the admissions of the last
   minute (the newest, as many as dst's limit holds). */
void quota_take_use(struct quota *dst, const struct quota *src,
                    double now_mono);

const char *quota_verdict_name(enum quota_verdict v);

#endif
