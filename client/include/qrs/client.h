/* libqrs client: talks to qrsd over its Unix socket.

   A struct qrs_client is one connection to qrsd.  It has no threads and no
   event loop: every call blocks until its reply arrives or its timeout
   passes.  A client may be used from several threads; calls on one client
   are serialised by an internal lock.  Distinct clients are independent.

   Ownership: the caller owns every struct it passes in and every struct a
   call fills in.  Objects returned through a `**ret_` pointer are allocated
   by libqrs and freed with the matching _free() function, which accepts
   NULL.  Strings in request structs are read during the call only.

   Memory: replies are unpacked into a 16 KiB arena of the client, so
   draws (qrs_client_draw, _draw_begin/_finish) make no heap allocation
   once connected.  Larger replies (BYTES, STATUS) use the heap, at most
   four times the frame limit for one reply; a reply that would need more
   is QRS_E_PROTOCOL.  The daemon's frame limit is believed up to 64 MiB
   (qrsd's own maximum), and the receive buffer grows with the bytes that
   arrive, not with the length a header claims.

   Errors: every int-returning function returns 0 on success or a negative
   errno / QRS_E_* code (see qrs/error.h); out-parameters are written only
   on success.  The library never prints, exits or aborts.  Added in 0.1
   unless noted. */
#ifndef QRS_CLIENT_H
#define QRS_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <qrs/error.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The socket used when neither the path argument nor $QRS_SOCKET is set. */
#define QRS_DEFAULT_SOCKET "/run/qrsd/qrsd.sock"
/* The per-call timeout used when the options leave it at 0. */
#define QRS_DEFAULT_TIMEOUT_MS 5000
/* Capacity (with the NUL) of the name strings in the result structs. */
#define QRS_NAME_MAX 64

struct qrs_client;

/* Log messages libqrs would like to tell (reconnects and the like).  The
   library is silent unless a callback is installed.  level is a syslog
   level (LOG_ERR .. LOG_DEBUG); msg is valid during the call only. */
typedef void (*qrs_log_cb)(int level, const char *msg, void *userdata);

struct qrs_client_options {
  const char *client_name;  /* told to qrsd in HELLO; NULL: "libqrs" */
  int timeout_ms;           /* per call: 0 = QRS_DEFAULT_TIMEOUT_MS,
                               < 0 = wait for ever */
  int no_reconnect;         /* non-zero: never reconnect on its own */
};

/* What qrsd said about itself in its HELLO reply. */
struct qrs_server_info {
  uint32_t protocol_version;
  char server_version[QRS_NAME_MAX];
  char default_source[QRS_NAME_MAX];
  uint32_t default_sample_count;
  uint32_t max_sample_count;
  uint32_t max_inflight;          /* in-flight requests per connection */
  uint32_t max_frame_bytes;
  uint32_t max_bytes_per_request; /* for qrs_client_bytes() */
  char features[256];             /* space-separated feature names */
  char default_source_type[QRS_NAME_MAX];   /* "system", "mock", ... */
  int default_production;         /* 0: the default is test-only */
  int test_sources_allowed;       /* qrsd may serve test-only sources */
  uint32_t max_reply_bytes;       /* largest reply payload qrsd sends
                                     (>= max_frame_bytes) */
};

/* Connect to qrsd at path (NULL: $QRS_SOCKET, else QRS_DEFAULT_SOCKET) and
   exchange HELLO.  opts may be NULL.  Returns 0 and a new client in
   *ret_client, or -ENOENT / -ECONNREFUSED / -EACCES (nobody listens or no
   permission), -ENAMETOOLONG (path over 107 bytes), QRS_E_VERSION,
   -ETIMEDOUT, -ENOMEM.  Free with qrs_client_free(). */
QRS_EXPORT int qrs_client_new(const char *path,
                              const struct qrs_client_options *opts,
                              struct qrs_client **ret_client);

/* Close the connection and free the client.  Outstanding tickets are
   forgotten.  Accepts NULL. */
QRS_EXPORT void qrs_client_free(struct qrs_client *c);

/* Install (or, with cb NULL, remove) the log callback. */
QRS_EXPORT void qrs_client_set_log_cb(struct qrs_client *c, qrs_log_cb cb,
                                      void *userdata);

/* Copy the server's HELLO data (of the current connection; a reconnect
   renews it) into *ret_info, under the client's lock.  Returns 0 or
   -EINVAL.  Safe while other threads use c.  Added in 0.1. */
QRS_EXPORT int qrs_client_get_server_info(const struct qrs_client *c,
                                          struct qrs_server_info *ret_info);

/* The server's HELLO data as qrs_client_get_server_info() copies it, in
   storage of the calling thread: valid until this thread calls
   qrs_client_server_info() again (for any client) or exits.  Never NULL
   for a live c.  Safe while other threads use c. */
QRS_EXPORT const struct qrs_server_info *
qrs_client_server_info(const struct qrs_client *c);

/* The daemon's own words for the error of the last call the calling
   thread made on c (e.g. "no source named 'x' is configured"), or "" when
   that error did not come from the daemon, the call succeeded, or the
   thread's last call was on another client.  Each thread sees its own
   calls' messages; the string lives in storage of the calling thread,
   valid until its next call on a client. */
QRS_EXPORT const char *qrs_client_errmsg(const struct qrs_client *c);

/* The socket path the client connects to.  Owned by the client. */
QRS_EXPORT const char *qrs_client_socket_path(const struct qrs_client *c);

/* The commitment of a draw: qrsd derives the 63-bit nonce from
   SHA-256(salt || u64le(step) || i64le(prev_token_id)), as qr-sampler's
   derive_commit_nonce() does, and a source that echoes it proves its bytes
   came after the token it commits to.  Use prev_token_id -1 for the first
   token of a request. */
struct qrs_commitment {
  const uint8_t *salt;      /* may be NULL when salt_len is 0 */
  size_t salt_len;          /* at most 256 */
  uint64_t step;
  int64_t prev_token_id;
};

/* Amplifier parameters of one draw, named as in qr-sampler's config.
   Only the fields whose QRS_AMP_* bit is in set are sent; the others take
   qrsd's configured values.  qrsd checks them against its limits and answers
   QRS_E_AMP_PARAMS when one is outside (see qrs_ipc.proto, Draw).
   Added in 0.1 (protocol additions Draw 20-24). */
enum qrs_amp_field {
  QRS_AMP_POPULATION_MEAN = 1 << 0,
  QRS_AMP_POPULATION_STD = 1 << 1,
  QRS_AMP_EPSILON = 1 << 2,
  QRS_AMP_ZSCORE_CALIBRATION = 1 << 3,
  QRS_AMP_ECDF_CALIBRATION = 1 << 4,
};

struct qrs_amp_params {
  unsigned set;                     /* QRS_AMP_* bits of the fields sent */
  double population_mean;           /* finite, 0 .. 255 */
  double population_std;            /* finite, > 0 */
  double uniform_clamp_epsilon;     /* 0 <= eps < 0.5 */
  uint32_t zscore_calibration_samples;  /* 0: no calibration */
  uint32_t ecdf_calibration_samples;    /* >= 2 */
};

struct qrs_draw_request {
  const char *source;       /* NULL or "": the daemon's default source */
  const char *amplifier;    /* NULL or "": the configured default
                               (zscore_mean, zscore_thought, ecdf, exact) */
  uint32_t sample_count;    /* 0: the configured default */
  const struct qrs_commitment *commitment; /* NULL: no nonce */
  const struct qrs_amp_params *amp;        /* NULL: all daemon defaults */
  /* Amplifier "server" only (an upstream's PurityService integrates the
     draw): the upstream source id (NULL or "": the one its api key is
     bound to) and the raw bytes to integrate (0: the upstream's
     default).  Added in 0.1. */
  const char *draw_source_id;
  uint32_t draw_block_bytes;
  /* A study's unit tag ([A-Za-z0-9._:-]{1,64}) when source names a study
     that assigns its arms by request (qrsd.yaml(5), studies); NULL or "":
     none.  Added in 0.1. */
  const char *unit;
};

struct qrs_timestamp {
  int64_t realtime_ns;      /* CLOCK_REALTIME */
  int64_t monotonic_ns;     /* CLOCK_MONOTONIC, comparable across
                               processes on one host */
};

enum qrs_echo {
  QRS_ECHO_NONE = 0,        /* no upstream saw the nonce */
  QRS_ECHO_VERIFIED = 1,    /* the upstream echoed it back */
  QRS_ECHO_MISMATCH = 2,    /* the upstream answered another id */
};

/* The PurityService metadata of a server-integrated draw (the
   DrawResponse fields of third_party/qr-sampler/src/qr_sampler/proto/
   purity_service.proto).  has_meta is 0 when the draw had none. */
struct qrs_draw_meta {
  double z;
  double coherence_z;
  double coherence_r;
  int coherence_valid;
  uint32_t integrated_bytes;
  uint64_t generation_timestamp_ns;   /* 0: not given */
  char purity_label[QRS_NAME_MAX];
  char integrator[QRS_NAME_MAX];
  char source_id[QRS_NAME_MAX];
};

/* One amplified draw: u in (0,1) from sample_count fresh bytes that qrsd
   generated after the request arrived (received <= generated <= sent). */
struct qrs_draw {
  double u;
  double z;
  double sample_mean;
  uint32_t sample_count;
  char source[QRS_NAME_MAX];      /* the source asked for */
  char served_by[QRS_NAME_MAX];   /* the source that produced the bytes */
  char amplifier[QRS_NAME_MAX];
  int fallback;                   /* 1: served by a fallback leg */
  uint64_t nonce;                 /* 0: no commitment */
  uint64_t byte_sum;              /* exact sum of the sample_count bytes */
  double population_mean;         /* the mean and std z was computed */
  double population_std;          /* with (calibrated when calibrated) */
  uint32_t extra_bytes;           /* bytes read beyond sample_count
                                     (exact: 7, the bits of V) */
  enum qrs_echo echo;
  struct qrs_timestamp received;  /* qrsd decoded the request */
  struct qrs_timestamp generated; /* the entropy was in hand */
  struct qrs_timestamp sent;      /* the reply was encoded */
  int has_meta;
  struct qrs_draw_meta meta;
  char served_type[QRS_NAME_MAX]; /* type of served_by ("system", "mock") */
  int production;                 /* 0: a test-only source served it */
  uint64_t journal_seq;           /* the draw's entry in qrsd's draw
                                     journal (0: no journal) */
  int unjournalled;               /* 1: the journal is on but could not
                                     take the draw (journal.on_error:
                                     label) */
};

/* One draw, blocking.  req may be NULL (all defaults).  Returns 0 and fills
   *ret_draw; or QRS_E_UNKNOWN_SOURCE, QRS_E_SAMPLE_COUNT, QRS_E_ENTROPY,
   QRS_E_BUSY, -ETIMEDOUT, QRS_E_DISCONNECTED, ...  If the daemon restarted
   since the last call, the client reconnects and sends the draw again. */
QRS_EXPORT int qrs_client_draw(struct qrs_client *c,
                               const struct qrs_draw_request *req,
                               struct qrs_draw *ret_draw);

/* Pipelined draws: _begin sends the request and returns at once with a
   ticket in *ret_ticket; _finish waits for that ticket's reply.  At most
   server_info.max_inflight tickets may be open per client (QRS_E_BUSY
   beyond).  Replies to other tickets that arrive meanwhile are kept until
   their own _finish.  _cancel forgets a ticket (its reply is dropped when it
   comes).  A ticket whose connection was lost finishes with
   QRS_E_DISCONNECTED. */
QRS_EXPORT int qrs_client_draw_begin(struct qrs_client *c,
                                     const struct qrs_draw_request *req,
                                     uint32_t *ret_ticket);
QRS_EXPORT int qrs_client_draw_finish(struct qrs_client *c, uint32_t ticket,
                                      struct qrs_draw *ret_draw);
QRS_EXPORT int qrs_client_draw_cancel(struct qrs_client *c, uint32_t ticket);

/* Where raw bytes came from. */
struct qrs_bytes_info {
  char source[QRS_NAME_MAX];
  char served_by[QRS_NAME_MAX];
  int fallback;
  char served_type[QRS_NAME_MAX]; /* type of served_by */
  int production;                 /* 0: a test-only source served it */
};

/* n raw bytes from source (NULL: default) into buf, for validation suites
   (ent, dieharder).  n must be 1 .. server_info.max_bytes_per_request,
   else QRS_E_TOO_LARGE / -EINVAL.  info may be NULL. */
QRS_EXPORT int qrs_client_bytes(struct qrs_client *c, const char *source,
                                void *buf, size_t n,
                                struct qrs_bytes_info *info);

/* One source as qrsd sees it. */
/* One mechanism of a local noise (or timing) source, as qrsd measures
   it (struct qrs_source_info.mechanisms). */
#define QRS_MECHANISMS_MAX 16
struct qrs_mechanism_info {
  char name[QRS_NAME_MAX];        /* clock_jitter, rdrand, ... */
  char description[128];          /* what it samples */
  int available;                  /* usable on qrsd's host */
  char unavailable_reason[128];   /* available 0: why not */
  char state[16];                 /* untested | startup | ok | failed |
                                     unavailable (SP 800-90B tests) */
  double bytes_per_s;             /* raw samples per second harvesting;
                                     0: not measured yet */
  double min_entropy;             /* MCV estimate, bits per raw sample;
                                     -1: no sample yet */
  uint64_t harvests;              /* reads it took part in */
  uint64_t samples;               /* raw samples it contributed */
  uint64_t timeouts;              /* reads it fell short at the deadline */
  uint64_t cut;                   /* xor reads it was stopped early (its
                                     partial samples used; no failure) */
  uint64_t failures;              /* health-test failures and errors */
  char last_error[160];
};

struct qrs_source_info {
  char name[QRS_NAME_MAX];
  char type[QRS_NAME_MAX];
  char fallback[QRS_NAME_MAX];    /* "" or "error": none */
  int healthy;
  int is_default;
  int production;                 /* 0 for mock sources */
  uint64_t draws;
  uint64_t bytes;
  uint64_t failures;
  char detail[256];
  /* Live statistics of the u this source served (qrsd's monitor:
     section); window 0: monitoring is off or no draw yet. */
  struct {
    uint32_t window;              /* u values in the KS window */
    double ks;                    /* KS distance against uniform */
    double ks_p;                  /* its p-value */
    double cusum_hi;              /* one-sided CUSUMs of z */
    double cusum_lo;
    int alarm;                    /* latched until qrsd restarts */
    char alarm_reason[160];
  } stats;
  /* Added in 0.1: requests for it served by its fallback; and for a
     network upstream (upstream = 1) its circuit breaker and quota use. */
  uint64_t fallbacks;
  int upstream;
  char breaker_state[16];         /* closed | open | half-open */
  uint32_t consecutive_failures;
  double timeout_ms;              /* adaptive call timeout now */
  uint64_t quota_minute_requests, quota_minute_limit;   /* limit 0: none */
  uint64_t quota_day_bytes, quota_day_limit;
  /* Added in 0.1: the registry's state of the source and its
     failures; and for a local source (local = 1: device, timing, noise)
     its health tests, measured capacity, min-entropy estimate and
     mechanisms. */
  char state[16];                 /* ok | degraded | failed | unknown */
  uint64_t timeouts;              /* of the failures: deadline passed */
  uint64_t refusals;              /* fetches its admission check sent
                                     elsewhere */
  char last_failure[160];         /* "" or one line */
  int64_t last_failure_ns;        /* CLOCK_REALTIME; 0: never failed */
  int local;
  char health_state[16];          /* startup | ok | failed */
  char health_reason[160];        /* the last health-test failure */
  double bytes_per_s;             /* measured throughput; 0: not yet */
  uint32_t draw_bytes;            /* qrsd's default sample_count */
  double draws_per_s;             /* bytes_per_s / draw_bytes */
  double min_entropy;             /* MCV estimate of the raw samples,
                                     bits per sample; -1: none yet */
  uint64_t raw_samples;           /* samples behind min_entropy */
  char freshness[160];            /* what "fresh" means for it */
  char conditioning[16];          /* raw | vonneumann | sha256 */
  char combine[16];               /* noise: xor | concat; else "" */
  size_t n_mechanisms;            /* noise and timing sources */
  struct qrs_mechanism_info mechanisms[QRS_MECHANISMS_MAX];
  /* Added in 0.1: a network upstream's P99 call latency, as
     its circuit breaker tracks it. */
  double latency_p99_ms;
  /* Added in 0.1: an operator disabled it
     (qrs_client_source_control()); it takes no draws. */
  int disabled;
};

#define QRS_LATENCY_BUCKETS_MAX 32

/* One arm label of a study: its draws and units served. */
#define QRS_STUDY_LABELS_MAX 8
struct qrs_study_label {
  char label[4];                  /* "A", "B", ... */
  uint64_t draws;
  uint64_t units;
};

/* A study qrsd runs (qrsd.yaml(5), STUDIES).  Added in 0.1. */
#define QRS_STUDIES_MAX 64
struct qrs_study_info {
  char name[QRS_NAME_MAX];
  char unit[16];                  /* request | draw */
  uint64_t planned_units;
  char statistic[32];
  double alpha;
  char epoch[16];                 /* 8 hex: this start's stream epoch */
  uint64_t units_seen;
  char state[16];                 /* running | complete */
  size_t n_labels;
  struct qrs_study_label labels[QRS_STUDY_LABELS_MAX];
};

struct qrs_status {
  char server_version[QRS_NAME_MAX];
  uint32_t protocol_version;
  uint32_t pid;
  uint64_t uptime_ms;
  char socket_path[128];
  char default_source[QRS_NAME_MAX];
  uint32_t connections;
  uint64_t requests;
  uint64_t draws;
  uint64_t bytes;
  uint64_t errors;
  size_t n_sources;
  struct qrs_source_info *sources;  /* n_sources entries */
  /* Added in 0.1: the draw latency (received to sent) as a
     histogram: count[i] draws took at most le_s[i] seconds and more than
     le_s[i - 1]; count[n_buckets] is past the last bound (+Inf). */
  size_t n_latency_buckets;
  double latency_le_s[QRS_LATENCY_BUCKETS_MAX];
  uint64_t latency_count[QRS_LATENCY_BUCKETS_MAX + 1];
  double latency_sum_s;
  uint64_t connections_refused;   /* closed over a limit or denied */
  uint64_t busy_replies;          /* requests answered BUSY */
  uint64_t memory_used_bytes;     /* what limits.memory_budget_bytes bounds */
  uint64_t memory_budget_bytes;
  char config_file[256];            /* the configuration in use (0.1+) */
  char config_hash[65];             /* SHA-256 (hex) of its text, as
                                       last loaded; "" from an older qrsd */
  /* Added in 0.1: the draw journal.  journal_state "off" (none
     configured), "ok", "queue-full", "write-error" or "stopped" ("" from
     an older qrsd); journal_error the write error's text while it fails
     (else ""); journal_on_error "stop" (draws refused while it fails) or
     "label" (served labelled unjournalled); journal_seq and journal_head
     the last entry durably written and its SHA-256 chain hash (hex; 0 and
     "" before the first), what qrs-audit --checkpoint takes. */
  char journal_state[16];
  char journal_error[128];
  char journal_on_error[8];
  uint64_t journal_seq;
  char journal_head[65];
  /* Added in 0.1: the gRPC compat endpoint (0 when off): connections
     open, their bound, those refused, relay buffers held. */
  uint64_t compat_connections;
  uint64_t compat_max_connections;
  uint64_t compat_connections_refused;
  uint64_t compat_relay_bytes;
  /* Added in 0.1: the studies running, by arm label only (which source
     is behind a label stays secret until the seeds are revealed). */
  size_t n_studies;
  struct qrs_study_info studies[QRS_STUDIES_MAX];
};

enum qrs_health_state {
  QRS_HEALTH_UNKNOWN = 0,
  QRS_HEALTH_HEALTHY = 1,
  QRS_HEALTH_DEGRADED = 2,  /* serving, some source unhealthy (or the
                               draw journal fails, draws labelled) */
  QRS_HEALTH_FAILED = 3,    /* the default source cannot serve (or the
                               draw journal fails, draws refused) */
};

struct qrs_health {
  enum qrs_health_state state;
  char message[256];
  size_t n_sources;
  struct qrs_source_info *sources;
};

struct qrs_sources {
  char default_source[QRS_NAME_MAX];
  size_t n_sources;
  struct qrs_source_info *sources;
};

/* Queries.  On success *ret_ holds a new object; free it with the matching
   _free(), which accepts NULL. */
QRS_EXPORT int qrs_client_status(struct qrs_client *c,
                                 struct qrs_status **ret_status);
QRS_EXPORT void qrs_status_free(struct qrs_status *s);
QRS_EXPORT int qrs_client_health(struct qrs_client *c,
                                 struct qrs_health **ret_health);
QRS_EXPORT void qrs_health_free(struct qrs_health *h);
QRS_EXPORT int qrs_client_sources(struct qrs_client *c,
                                  struct qrs_sources **ret_sources);
QRS_EXPORT void qrs_sources_free(struct qrs_sources *s);

/* One key that differs between qrsd's configuration in use and the one
   a reload read.  Values are as "qrsd -p" prints them, cut to 95 bytes. */
struct qrs_config_change {
  char key[128];                /* "limits.max_sample_count" */
  char old_value[96];
  char new_value[96];           /* "(removed)": a source removed */
  int needs_restart;            /* 1: it keeps old_value until qrsd
                                   restarts; 0: applied */
};

struct qrs_reload {
  char config_file[256];
  char config_hash[65];         /* SHA-256 (hex) of the text now in use */
  uint32_t applied;             /* changes applied live */
  uint32_t needs_restart;       /* changes waiting for a restart */
  uint64_t apply_ns;            /* qrsd loop time the apply step took */
  size_t n_changes;             /* listed in changes */
  uint32_t n_omitted;           /* more changes, not listed (the daemon's
                                   log has them) */
  struct qrs_config_change *changes;
};

/* Ask qrsd to reload its configuration file (privileged: root, qrsd's
   user or a member of access.admin_group).  0 and a new struct in *ret
   (free it with qrs_reload_free(), which accepts NULL), or
   QRS_E_PERMISSION (not allowed), QRS_E_BAD_CONFIG (the file is invalid:
   qrs_client_errmsg() has qrsd's "file:line: key: why"; the old
   configuration keeps serving), QRS_E_BUSY (a reload in progress),
   -EINVAL, -ENOMEM, or the call's error.  Added in 0.1. */
QRS_EXPORT int qrs_client_reload(struct qrs_client *c,
                                 struct qrs_reload **ret);
QRS_EXPORT void qrs_reload_free(struct qrs_reload *r);

/* An operator's request about one declared source (privileged, like
   qrs_client_reload()).  ENABLE / DISABLE: a disabled source takes no
   draws (its requests go to its fallback, labelled, or fail with
   QRS_E_ENTROPY) until enabled again or qrsd restarts.  QUOTA_RESET: the
   use of its provider quota (requests this minute, bytes today) back to
   0, persisted; only sources that have one (grpc). */
enum qrs_source_action {
  QRS_SOURCE_ENABLE = 1,
  QRS_SOURCE_DISABLE = 2,
  QRS_SOURCE_QUOTA_RESET = 3,
};

struct qrs_source_control {
  char source[QRS_NAME_MAX];
  int changed;                  /* 0: it already was so */
  int disabled;                 /* the source's state now */
  char message[256];            /* what qrsd did, one line */
};

/* 0 and *ret filled in, or QRS_E_PERMISSION (not allowed),
   QRS_E_UNKNOWN_SOURCE, QRS_E_BAD_REQUEST (QUOTA_RESET of a source
   without a quota: qrs_client_errmsg() says so), -EINVAL, or the call's
   error.  Added in 0.1. */
QRS_EXPORT int qrs_client_source_control(struct qrs_client *c,
                                         const char *source,
                                         enum qrs_source_action action,
                                         struct qrs_source_control *ret);

/* "healthy", "degraded", "failed" or "unknown". */
QRS_EXPORT const char *qrs_health_state_name(enum qrs_health_state s);

/* The libqrs version string ("0.1.0"). */
QRS_EXPORT const char *qrs_version(void);

#ifdef __cplusplus
}
#endif

#endif
