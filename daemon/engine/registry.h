/* The source registry: every configured source and what is around it -
   lookup by name, the default source, fallback, admission (breaker,
   quota, health tests via source_ops.admit), health state and
   statistics.  The draw engine asks the registry for bytes; nothing else
   in qrsd touches a source (daemon/sources/source.h).

   A FETCH THROUGH THE REGISTRY

   registry_fetch() asks the named source (NULL or "": the default) for n
   fresh bytes by a deadline.  It returns 0 and calls done exactly once
   later (possibly before registry_fetch() returns, when a small read is
   done inline), or returns a negative errno and never calls done:
   -ENOENT no such source, -EBUSY the byte budget for fetches in progress
   is used up, -ENOMEM.

   On the loop thread, done gets a struct reg_result.  res->data (n bytes)
   is valid during the call only; the strings live as long as the
   registry.  On success res->served_by names the source whose bytes they
   are and res->fallback says whether that is not the one asked for.

   FALLBACK

   Each source has a fallback (config key "fallback:"): "error" (the
   default: a failed fetch fails the request), "system", "mock" or any
   other declared source; conf.c rejects unknown names and cycles.
   "system" and "mock" need not be declared: the registry then creates a
   built-in one (mock: seed 0, no shift) that serves only as a fallback
   and cannot be asked for by name.  The primary leg fails when the
   source's fetch fails, its deadline passes, or source_ops.admit says
   "not now"; the request then goes to the fallback (and on to its
   fallback, if that fails too), labelled: served_by = the leg that
   delivered, fallback = 1.  When a source has a fallback, its own leg gets
   the deadline minus a reserve (a fifth of the time, at most 1 s) so that
   the fallback has time to answer.

   HEALTH

   Per source: OK; DEGRADED while requests for it are served by its
   fallback; FAILED while requests for it fail (no fallback, or the
   fallback failed too).  The transitions are logged once each
   ("degraded", "failed", "recovered"); repeated failure warnings are
   rate-limited.  A source returns to OK when a fetch of its own succeeds.
   registry_health() is FAILED when the default source is FAILED,
   DEGRADED when any source is not OK, HEALTHY otherwise.

   Loop thread only, every function. */
#ifndef QRSD_REGISTRY_H
#define QRSD_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "conf/conf.h"
#include "timestamp.h"
#include "grpc/upstream.h"

struct registry;
struct source;

enum reg_state {
  REG_OK,
  REG_DEGRADED,                 /* served by its fallback */
  REG_FAILED,                   /* its requests fail */
};

struct reg_result {
  int status;                   /* 0; -ETIMEDOUT (a leg hit its deadline
                                   and no leg delivered); QRS_E_ENTROPY
                                   (every leg failed); see why */
  const uint8_t *data;          /* n bytes when status == 0 */
  size_t n;
  const char *source;           /* the source asked for */
  const char *served_by;        /* status 0: whose bytes these are */
  const char *served_type;      /* its type ("system", "mock", ...) */
  int production;               /* 0: a test-only source served */
  int fallback;                 /* served_by is not the source asked for */
  struct ts generated;          /* when the bytes were in hand */
  int echo;                     /* QrsIpc__Echo value */
  const char *why;              /* status < 0: one line */
};

typedef void (*reg_done_fn)(void *ctx, const struct reg_result *res);

/* A snapshot of one source, for STATUS/HEALTH/SOURCES.  Strings point
   into the registry (valid until the next fetch completes). */
struct reg_info {
  const char *name;
  const char *type;
  int production;
  int is_default;
  int builtin;                  /* created only to serve as a fallback */
  int disabled;                 /* by an operator (registry_set_disabled) */
  const char *fallback;         /* "error" or a source name */
  enum reg_state state;
  uint64_t draws;               /* fetches it served (as any leg) */
  uint64_t bytes;               /* bytes it served */
  uint64_t failures;            /* its fetches that failed or timed out */
  uint64_t timeouts;            /* of which timed out */
  uint64_t fallbacks;           /* requests for it served by a fallback */
  uint64_t refusals;            /* fetches admit() sent elsewhere */
  const char *last_failure;     /* "" or one line */
  int64_t last_failure_ns;      /* CLOCK_REALTIME, 0: never */
  char detail[256];             /* describe() line, or the last failure */
  int has_upstream;             /* a network upstream: up is filled */
  struct upstream_stats up;     /* breaker, quota (never the api key) */
};

struct reg_limits {
  size_t inline_max;            /* largest read done on the loop thread */
  size_t bytes_max;             /* bytes held by fetches in progress */
};

/* Open every source of conf (and the built-in fallbacks it needs) on
   loop.  0 and the registry, or a negative errno with err filled in. */
int registry_new(uv_loop_t *loop, const struct qrsd_conf *conf,
                 const struct reg_limits *limits,
                 struct registry **ret_reg, char *err, size_t errlen);

/* Replace the limits (a reload): fetches in progress keep what they
   hold; new ones are admitted against the new bytes_max. */
void registry_set_limits(struct registry *reg,
                         const struct reg_limits *limits);

/* Each declared source takes its conf's fallback
   (registry_reload_commit() does this too; conf's fallbacks name "error"
   or sources it has).  Requests in progress walk the new chain from their
   next leg.  0 or -ENOMEM (that source keeps its old fallback). */
int registry_set_fallbacks(struct registry *reg,
                           const struct qrsd_conf *conf);

/* A reload changes the sources (registry_reload_open(), then
   conf_apply_live(), then registry_reload_commit()).  Open opens every
   source of next that cur does not have or has with other keys (their
   fallbacks aside), on the loop as startup does: 0 and *ret, or a
   negative errno with err filled in (nothing changed then).  Commit
   makes conf's sources (the applied configuration) the ones served:
   those opened replace the old ones of the same name, those conf no
   longer has are retired - a request for one gets -ENOENT at once, as
   for an unknown source, while fetches and draws in flight on it finish
   normally; it is closed when the last one is done.  Sources kept keep
   their statistics, state and quota use.  0 or -ENOMEM (err says what
   is missing).  Abort frees what open opened; accepts NULL. */
struct reg_reload;
int registry_reload_open(struct registry *reg, const struct qrsd_conf *cur,
                         const struct qrsd_conf *next,
                         struct reg_reload **ret, char *err, size_t errlen);
int registry_reload_commit(struct registry *reg, struct reg_reload *rl,
                           const struct qrsd_conf *conf, char *err,
                           size_t errlen);
void registry_reload_abort(struct reg_reload *rl);

/* An operator disables (disabled 1) or enables a declared source.  A
   disabled source takes no new fetch or draw: a request for it, or a
   fallback chain through it, moves on to the next fallback as if its
   admission check said no (labelled, counted in refusals), or fails
   with "disabled by an operator".  Fetches in progress finish.  1 when
   the state changed, 0 when it already was so, -ENOENT: no declared
   source of that name. */
int registry_set_disabled(struct registry *reg, const char *name,
                          int disabled);

/* An operator resets the quota use of a declared source
   (source_ops.quota_reset).  0; -ENOENT no such source; -ENOSYS it has
   no quota, or the source's error; why says so. */
int registry_quota_reset(struct registry *reg, const char *name, char *why,
                         size_t whylen);

/* The daemon stops: every source's ops->stop.  Fetches in progress still
   complete. */
void registry_stop(struct registry *reg);

/* After the loop ran out.  Accepts NULL. */
void registry_free(struct registry *reg);

/* For unit tests and future source types: register an already opened
   source s (the registry takes it) with fallback fb ("error", a name).
   0 or a negative errno. */
int registry_add(struct registry *reg, struct source *s, const char *fb);

/* Is there a source of that name a request may ask for? */
int registry_has(const struct registry *reg, const char *name);
const char *registry_default(const struct registry *reg);
/* The type and production flag of the source called name (NULL or "":
   the default).  0, or -ENOENT (then *type and *production are not
   set). */
int registry_type(const struct registry *reg, const char *name,
                  const char **type, int *production);

int registry_fetch(struct registry *reg, const char *name, size_t n,
                   uint64_t nonce, int64_t deadline_ns, reg_done_fn done,
                   void *ctx);

/* Who a fetch is for, so that a client's reads in progress - also those
   abandoned at their deadline and still running - can be bounded (the
   server gives each connection its share of the read budget).  The
   registry adds each leg's n to held and calls get() when the leg
   starts, and subtracts it and calls put() when the leg's buffer is
   freed, which may be long after done was called. */
struct reg_owner {
  size_t held;
  void (*get)(struct reg_owner *o);
  void (*put)(struct reg_owner *o);
};

/* registry_fetch() on behalf of owner (NULL: nobody in particular). */
int registry_fetch_for(struct registry *reg, struct reg_owner *owner,
                       const char *name, size_t n, uint64_t nonce,
                       int64_t deadline_ns, reg_done_fn done, void *ctx);
/* A study's draw from one of its arms (the source called name): the
   fetch carries the study's stream nonce (stream: 12 bytes, the prng
   source's; others ignore it), never falls back (a failure fails the
   draw), and the source counts nothing of it - no draws, bytes,
   failures or state change - so that per-source figures cannot tell
   which arm a study label is.  Returns and completes as
   registry_fetch_for(). */
int registry_fetch_study(struct registry *reg, struct reg_owner *owner,
                         const char *name, size_t n, const uint8_t stream[12],
                         int64_t deadline_ns, reg_done_fn done, void *ctx);

/* The commitment of the secret of the source called name (a prng
   source's seed: hex SHA-256, 65 bytes with the NUL) into hex: 0, or
   -ENOSYS when it has none (or there is no such source). */
int registry_commitment(const struct registry *reg, const char *name,
                        char *hex);

/* A server-integrated draw from the named source (NULL or "": the
   default), if it can do them: 0 and d->done later; or -ENOENT (no such
   source), -ENOSYS (its type cannot draw), or the admission check's error
   (breaker open, over quota) without a completion.  No fallback here: the
   draw engine falls back to bytes amplified locally. */
struct source_draw;
int registry_draw(struct registry *reg, const char *name,
                  struct source_draw *d);

/* Sources, in config order, then the built-in fallbacks in use. */
size_t registry_count(const struct registry *reg);
void registry_info(const struct registry *reg, size_t i,
                   struct reg_info *info);

/* The local statistics (health tests, measured rate, min-entropy
   estimate, mechanisms; sources/local.h) of source i: 0, or -ENOSYS when
   it is not a local source (st is zeroed then).  Never waits for a read
   in progress. */
struct local_stats;
/* Does source i report local statistics (registry_local_stats())? */
int registry_has_local_stats(const struct registry *reg, size_t i);
int registry_local_stats(const struct registry *reg, size_t i,
                         struct local_stats *st);

/* Overall: REG_FAILED / REG_DEGRADED / REG_OK (see HEALTH); msg gets one
   line. */
enum reg_state registry_health(const struct registry *reg, char *msg,
                               size_t len);

/* Totals over all sources. */
uint64_t registry_bytes(const struct registry *reg);

/* Bytes held by fetches in progress (also late ones). */
size_t registry_bytes_held(const struct registry *reg);

const char *registry_state_name(enum reg_state s);

/* Called on the loop after every fetch that was served (transition 0)
   and on every state transition of a source (transition 1): the status
   file writer's hook.  One observer; NULL removes it. */
typedef void (*reg_observer_fn)(void *ctx, int transition);
void registry_set_observer(struct registry *reg, reg_observer_fn fn,
                           void *ctx);

/* The source that served the last fetch ("" before the first), and the
   requests served by a fallback so far (all sources). */
const char *registry_last_used(const struct registry *reg);
uint64_t registry_fallbacks(const struct registry *reg);

#endif
