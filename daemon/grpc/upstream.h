/* A gRPC upstream: the client side of qr_entropy.EntropyService and
   qr_purity.PurityService (or a third-party service whose request field 1
   is the byte count and whose reply field 1 is the data), driven from the
   libuv loop through a gbridge.

   An upstream owns its channel (insecure or TLS, api key metadata), the
   bidi sessions of bidi_streaming mode, the adaptive circuit breaker and
   the provider quotas.  upstream_fetch() and upstream_draw() run the whole
   machinery of one fetch, as qr-sampler's
   QuantumGrpcSource._fetch_with_recovery() does: circuit check (half-open
   trial recreates the channel), 1 + retry_count attempts each bounded by
   the breaker's timeout, reply validation (exact length, non-empty data; a
   draw's u finite and inside (0, 1); a non-zero echo equal to the
   sequence id the request carried: its nonce, else a fresh id),
   breaker bookkeeping, channel recreation after failures (rate-limited),
   and the split of a fetch larger than max_bytes_per_request into several
   upstream requests.  Quota admission is separate (upstream_admit()), so
   that the caller can fall back before anything goes upstream.

   Everything runs on the loop thread.  The api key is never logged and
   never part of any string this module produces. */
#ifndef QRSD_UPSTREAM_H
#define QRSD_UPSTREAM_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "grpc/breaker.h"
#include "grpc/gbridge.h"
#include "persist/quota.h"

enum upstream_mode {
  UPSTREAM_UNARY,
  UPSTREAM_SERVER_STREAMING,
  UPSTREAM_BIDI_STREAMING,
};

#define UPSTREAM_MAX_PENDING 256      /* requests in flight per upstream */
#define UPSTREAM_MAX_KEY 4096

/* Configuration of one upstream (strings owned by the caller; copied). */
struct upstream_conf {
  const char *name;
  const char *target;               /* unix:/path or host:port */
  enum upstream_mode mode;
  const char *method;               /* unary byte method */
  const char *stream_method;        /* streaming byte method */
  const char *draw_method;          /* "" disables unary draws */
  const char *draw_stream_method;   /* "" disables bidi draws */
  int insecure;                     /* explicit: no TLS */
  const char *ca_file, *cert_file, *key_file;
  const char *server_name;          /* TLS name override, or "" */
  const char *api_key_file;         /* "" = none */
  const char *api_key_header;       /* lowercase; default "api-key" */
  double timeout_ms;                /* cap of the adaptive timeout */
  uint32_t retry_count;
  int check_echo;                   /* a wrong non-zero echo fails; 0:
                                       served, labelled a mismatch */
  int preprobe;                     /* TCP pre-probe (upstream_probe.c) */
  struct breaker_params breaker;
  struct quota_params quota;
  const char *state_dir;            /* for the daily quota, or NULL */
};

/* How the replies of a fetch answered its nonce (the values of the IPC
   Echo enum).  A split fetch takes the worst of its replies: any other id
   (served only with check_echo false) is a mismatch, else any reply
   without an echo makes it "none". */
enum upstream_echo {
  UPSTREAM_ECHO_NONE = 0,           /* no nonce, or a reply echoed nothing */
  UPSTREAM_ECHO_VERIFIED = 1,       /* every reply echoed the nonce */
  UPSTREAM_ECHO_MISMATCH = 2,       /* a reply echoed another sequence_id */
};

/* What a fetch or draw produced (valid during the callback only). */
struct upstream_result {
  int err;                          /* 0, or a negative errno (below) */
  int grpc_status;                  /* of the last attempt, 0 if none */
  char detail[200];                 /* why it failed, for logs and replies */
  const uint8_t *data;              /* fetch: exactly n bytes */
  size_t len;
  int echo;                         /* enum upstream_echo */
  uint64_t generation_ns;           /* newest generation time, 0 unknown */
  double elapsed_ms;                /* of the successful attempt(s) */
  int attempts;
  /* draws only (PurityService DrawResponse) */
  double u, z, coherence_z, coherence_r;
  int coherence_valid;
  uint32_t integrated_bytes;
  char source_id[128], purity_label[128], integrator[64];
};
/* err: -ETIMEDOUT (deadline), -EHOSTUNREACH (UNAVAILABLE / connection),
   -EPROTO (a reply failed validation or did not decode), -EACCES
   (UNAUTHENTICATED / PERMISSION_DENIED), -EDQUOT (RESOURCE_EXHAUSTED),
   -ENOSYS (UNIMPLEMENTED or no method configured), -EAGAIN (circuit
   open), -EBUSY (too many requests in flight), -ECANCELED (upstream
   closing), -EIO (any other gRPC status). */

typedef void (*upstream_cb)(void *arg, const struct upstream_result *res);

struct upstream;

/* Create (no connection is made until the first call).  0, or -EINVAL /
   -ENOENT / -EACCES / -ENOMEM with err filled in (never with the key). */
int upstream_new(struct gbridge *br, const struct upstream_conf *conf,
                 struct upstream **ret, char *err, size_t errlen);

/* Fail everything pending with -ECANCELED (callbacks run later, on the
   loop), cancel the calls, flush the quota, and free the upstream once its
   last gRPC completion has come back.  Accepts NULL. */
void upstream_free(struct upstream *u);

/* Quota admission for a fetch of n bytes (QUOTA_OK records it). */
enum quota_verdict upstream_admit(struct upstream *u, size_t n);

/* An operator's quota reset (quota_reset()), its reservation written at
   once on a worker thread (or after the write in flight). */
void upstream_quota_reset(struct upstream *u);

/* dst replaces src (a reload re-opened the source): dst takes src's quota
   use (quota_take_use()) and writes it; src no longer writes its own. */
void upstream_take_use(struct upstream *dst, struct upstream *src);

/* New quota limits (a reload), keeping the use counted: 0 or
   quota_set_params()'s error. */
int upstream_set_quota(struct upstream *u, const struct quota_params *p);

/* The circuit is open inside its recovery window: a fetch would fail at
   once with -EAGAIN. */
int upstream_blocking(const struct upstream *u);

/* Quarantined after a stream protocol violation (a bidi reply that
   matched no request: a duplicate, an extra reply, a reply to a request
   never sent, no echo; see upstream_session.c) for the breaker's
   recovery window: 1 with why filled in (may be NULL), else 0.  A fetch
   would fail at once with -EPROTO. */
int upstream_distrusted(const struct upstream *u, char *why, size_t len);

/* Fetch n fresh bytes (n >= 1) committed to nonce (0: none), by
   deadline_ns (CLOCK_MONOTONIC ns, as uv_hrtime(); 0: none): no attempt
   starts after it and none waits beyond it.  cb runs exactly once, on the
   loop thread, never from within this call.  Returns 0, or -EBUSY /
   -ENOMEM / -EINVAL without calling cb. */
int upstream_fetch(struct upstream *u, size_t n, uint64_t nonce,
                   int64_t deadline_ns, upstream_cb cb, void *arg);

/* A server-integrated draw (PurityService): unary GetDraw, or StreamDraws
   in bidi_streaming mode.  Like upstream_fetch(). */
int upstream_draw(struct upstream *u, uint64_t nonce, const char *source_id,
                  uint32_t block_bytes, int64_t deadline_ns, upstream_cb cb,
                  void *arg);

/* PurityService answered UNIMPLEMENTED recently (within a minute): a
   draw would fail with -ENOSYS, so the caller may go local at once. */
int upstream_draws_unsupported(const struct upstream *u);

/* State for status and health (never contains the key). */
struct upstream_stats {
  const char *breaker_state;        /* closed | open | half-open */
  double p99_ms, timeout_ms;
  uint32_t consecutive_failures;
  uint64_t breaker_opened;
  uint32_t latency_samples;
  uint64_t calls, failures, timeouts, echo_failures, validation_failures;
  uint64_t channel_resets;
  uint64_t stream_violations;       /* bidi replies matching no request */
  int quarantined;                  /* after one, for a recovery window */
  uint64_t preprobes, preprobe_failures;   /* connects made / failed */
  uint64_t quota_minute_requests, quota_day_bytes;
  uint64_t quota_refused_rpm, quota_refused_day;
  uint64_t quota_rpm_limit, quota_day_limit;   /* 0: none */
  int authenticated;                /* an api key is configured */
  int tls;
  const char *mode;
  const char *target;
};
void upstream_stats(struct upstream *u, struct upstream_stats *st);

const char *upstream_mode_name(enum upstream_mode m);
/* "unary" ... ; -1 if unknown. */
int upstream_mode_parse(const char *s);

#endif
