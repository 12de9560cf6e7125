/* qrsd's configuration: conf/qrsd.yaml parsed into one struct qrsd_conf.

   The defaults are the values of conf/qrsd.yaml, which is compiled in
   (conf_default_yaml): a file is applied on top of it, so a key the file
   leaves out keeps its default.  "sources", when given, replaces the default
   list as a whole.  The loader never logs or prints, and keeps no global
   state; the caller logs the one-line error it returns. */
#ifndef QRSD_CONF_H
#define QRSD_CONF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CONF_BUILTIN_NAME "(built-in default)"
#define CONF_MAX_FILE_SIZE (1024 * 1024)  /* conf_load_file() refuses more */
#define CONF_MAX_SOURCE_NAME 63
#define CONF_MAX_SOURCES 256

enum conf_source_type {
  CONF_SOURCE_SYSTEM,
  CONF_SOURCE_MOCK,
  CONF_SOURCE_DEVICE,
  CONF_SOURCE_TIMING,
  CONF_SOURCE_NOISE,
  CONF_SOURCE_GRPC,
  CONF_SOURCE_PRNG,
};

#define CONF_MAX_MECHANISMS 32

/* A gRPC upstream (type grpc).  Strings are never NULL after loading. */
struct conf_grpc {
  char *target;             /* unix:/path or host:port */
  char *mode;               /* unary | server_streaming | bidi_streaming */
  int insecure;             /* 1: plaintext; 0: TLS (unix: defaults to 1) */
  char *ca_file, *cert_file, *key_file, *server_name;   /* tls.* */
  char *api_key_file;       /* "" = none; the key never leaves the file */
  char *api_key_header;
  double timeout_ms;        /* cap of the adaptive call timeout */
  uint32_t retry_count;
  int check_echo;           /* a wrong echo fails the fetch */
  int preprobe;             /* TCP pre-probe before attempts
                               (grpc/upstream_probe.c) */
  char *method, *stream_method, *draw_method, *draw_stream_method;
  uint64_t max_bytes_per_request, max_requests_per_minute,
           max_bytes_per_day;                          /* quota.*, 0: none */
  uint32_t cb_window_size, cb_max_consecutive_failures;  /* breaker.* */
  double cb_min_timeout_ms, cb_timeout_multiplier, cb_recovery_window_s,
         cb_recovery_window_max_s;
  const char *state_dir;    /* the conf's state_dir (borrowed) */
};

struct conf_source {
  char *name;
  enum conf_source_type type;
  int line;                 /* where it was declared (0: built-in) */
  char *fallback;           /* "error" (default), "system", "mock" or a
                               declared source; no cycles */
  int fallback_line;        /* of the fallback key, else of the source */
  uint64_t mock_seed;       /* mock only */
  double mock_mean_shift;   /* mock only: shift of the byte mean */

  /* Local sources (device, timing, noise). */
  uint32_t health_alpha_exp;  /* health tests: alpha = 2^-N */
  double min_entropy;       /* device: claimed bits per byte */
  char *device_path;        /* device */
  uint32_t device_chunk;    /* device: bytes per read(2) */
  int device_lock;          /* device: flock(LOCK_EX) */
  int device_drain;         /* device: discard buffered bytes first */
  char *conditioning;       /* timing, noise: raw | vonneumann | sha256 */
  char *combine;            /* noise: xor | concat */
  uint32_t timeout_ms;      /* timing, noise: harvest timeout */
  char **mechanisms;        /* noise: names; none = all available */
  size_t n_mechanisms;
  struct conf_grpc grpc;    /* grpc only */
  char *prng_seed_file;     /* prng: 64 hex characters, a secret (the
                               key-file rule of base/keyfile.h) */
};

#define CONF_MAX_STUDY_NAME 48
#define CONF_MAX_STUDIES 64
#define CONF_STUDY_MIN_ARMS 2
#define CONF_STUDY_MAX_ARMS 8

/* A study (studies:): randomized, blinded arms over declared sources.
   Its plan is every key: a reload may add or remove a study, never
   change one. */
struct conf_study {
  char *name;               /* [A-Za-z0-9._-]{1,48}; no source's name */
  int line;
  char **arms;              /* source names, 2..8, distinct, in order */
  size_t n_arms;
  char *unit;               /* "request" | "draw" */
  uint64_t planned_units;   /* >= 2 */
  char *statistic;          /* mean_probit_diff | ks_u | mean_surprisal */
  double alpha;             /* (0, 0.5] */
  double effect;            /* > 0 */
  char *assignment_seed_file;  /* 64 hex characters, a secret */
};

#define CONF_HASH_HEX 64     /* SHA-256 in hex */

struct qrsd_conf {
  char *file;               /* a path, or "(built-in default)" */
  char hash[CONF_HASH_HEX + 1];  /* SHA-256 of the text read (the file's
                               bytes, or the embedded default's), hex */
  char *socket_path;
  unsigned socket_mode;     /* e.g. 0660 */
  char *socket_group;       /* "" = none */
  char *access_group;       /* access.group; "" = socket_group */
  char *access_admin_group; /* access.admin_group; "" = root and qrsd's
                               user only may use privileged requests */
  char *log_level;          /* log.level: err | warn | info | debug */
  char *default_source;
  char *amp_type;           /* "zscore_mean" */
  uint32_t amp_sample_count;
  double amp_population_mean;
  double amp_population_std;
  double amp_epsilon;
  uint32_t amp_zscore_calibration_samples;  /* 0: no calibration */
  uint32_t amp_ecdf_calibration_samples;    /* 2 .. */
  uint32_t max_frame_bytes;
  uint32_t max_sample_count;
  uint32_t max_connections;
  uint32_t max_inflight;    /* per connection */
  uint32_t request_timeout_ms;
  uint32_t max_calibration_samples;   /* blocks of one calibration */
  uint64_t max_calibration_bytes;     /* blocks * sample_count */
  uint64_t exact_cache_bytes;         /* the exact amplifier's tables */
  uint32_t monitor_window;            /* u values in the KS window; 0: off */
  double monitor_ks_alarm_p;          /* alarm when the window's KS p is
                                         below this */
  double monitor_cusum_k;             /* CUSUM drift allowance (z units) */
  double monitor_cusum_h;             /* CUSUM alarm threshold */
  uint32_t hello_timeout_ms;    /* HELLO must come within this */
  uint32_t frame_timeout_ms;    /* a started frame must complete */
  uint32_t idle_timeout_ms;     /* 0: idle connections stay */
  uint32_t max_connections_per_uid;
  uint32_t reserved_admin_connections;  /* of max_connections, kept for
                                           root, qrsd's uid and
                                           access.admin_group */
  uint64_t memory_budget;       /* queued replies + reads in progress */
  int allow_test_sources;   /* serve non-production (mock) sources */
  char *state_dir;          /* persisted state (daily quota counts) */
  char *status_file;        /* "" = none */
  char *compat_listen;      /* grpc_compat.listen; "" = off */
  char *compat_source;      /* grpc_compat.source: the only one served */
  unsigned compat_socket_mode;  /* grpc_compat.socket_mode (unix: only) */
  char *compat_socket_group;    /* grpc_compat.socket_group; "" = none */
  char *compat_tls_cert;        /* grpc_compat.tls_cert (PEM); "" = no TLS */
  char *compat_tls_key;         /* grpc_compat.tls_key (PEM) */
  char *compat_tls_client_ca;   /* grpc_compat.tls_client_ca; "" = no mTLS */
  char *compat_api_keys;        /* grpc_compat.api_keys (key file); "" = none */
  char *compat_api_key_header;  /* grpc_compat.api_key_header */
  uint32_t compat_max_connections;      /* grpc_compat.max_connections */
  uint32_t compat_max_per_peer;  /* grpc_compat.max_connections_per_peer */
  uint32_t compat_handshake_timeout_ms; /* grpc_compat.handshake_timeout_ms */
  uint32_t compat_idle_timeout_ms;      /* grpc_compat.idle_timeout_ms */
  char *journal_dir;            /* journal.dir; "" = no journal */
  uint64_t journal_max_bytes;   /* journal.max_bytes (rotation) */
  uint32_t journal_queue;       /* journal.queue */
  uint32_t journal_batch;       /* journal.batch (entries per fsync) */
  uint32_t journal_flush_ms;    /* journal.flush_ms (writer collects) */
  uint64_t journal_hash_buffer; /* journal.hash_buffer (bytes) */
  char *journal_writer_cpu;     /* journal.writer_cpu: "" or a CPU number */
  uint32_t journal_writer_nice; /* journal.writer_nice, 0..19 */
  char *journal_on_error;       /* journal.on_error: "stop" or "label" */
  struct conf_source *sources;  /* in the order declared */
  size_t n_sources;             /* 1 .. CONF_MAX_SOURCES */
  struct conf_study *studies;   /* in the order declared */
  size_t n_studies;
};

/* conf/qrsd.yaml as it was at build time (generated by conf/embed.py), and
   its length in bytes without the terminating NUL. */
extern const char conf_default_yaml[];
extern const size_t conf_default_yaml_len;

/* Parse a file (a regular file, or a link to one: a FIFO, device or
   directory is refused without reading it, see base/regfile.h).  0 and a
   new conf in *ret_conf, or a negative errno (-ENOENT/-EACCES etc. from
   opening or reading, -EISDIR, -EINVAL for a file of another type or any
   content error, -EFBIG above CONF_MAX_FILE_SIZE, -ENOMEM).  On error,
   err (capacity errlen; may be NULL) receives one line like
   "/etc/qrsd/qrsd.yaml:12: limits.max_connections: value 0 out of range
   1..65536": file, line, dotted key path, what is wrong.  The caller frees
   *ret_conf with conf_free(). */
int conf_load_file(const char *path, struct qrsd_conf **ret_conf, char *err,
                   size_t errlen);

/* Parse text (len bytes; need not be NUL-terminated).  name is used in
   messages in place of the file and stored in conf->file (NULL: "(string)").
   Returns and reports like conf_load_file(). */
int conf_load_string(const char *text, size_t len, const char *name,
                     struct qrsd_conf **ret_conf, char *err, size_t errlen);

/* The embedded default (conf/qrsd.yaml compiled in); file = "(built-in
   default)".  Fails only with -ENOMEM. */
int conf_load_default(struct qrsd_conf **ret_conf, char *err, size_t errlen);

/* Free conf and everything it owns.  Accepts NULL. */
void conf_free(struct qrsd_conf *conf);

/* Print the effective config as YAML that conf_load_string() accepts and
   that loads back to an equal config (every key written out, numbers
   independent of the locale).  Returns 0 or -errno (a failed write). */
int conf_print(const struct qrsd_conf *conf, FILE *f);

/* The source named name, or NULL.  The pointer lives as long as conf. */
const struct conf_source *conf_find_source(const struct qrsd_conf *conf,
                                           const char *name);

/* Is s a name of 1 to max characters out of A-Z a-z 0-9 _ . - and those
   in extra (may be NULL)?  Sources' and studies' names, unit tags. */
int conf_name_ok(const char *s, size_t max, const char *extra);

/* The study named name, or NULL. */
const struct conf_study *conf_find_study(const struct qrsd_conf *conf,
                                         const char *name);

/* Do two studies have the same plan (every key)?  1 yes, 0 no. */
int conf_study_same(const struct conf_study *a, const struct conf_study *b);

/* "system", "mock" (a static string; "unknown" for a bad value). */
const char *conf_source_type_name(enum conf_source_type t);

/* Is a source of type t for tests only (mock)? */
int conf_source_type_is_test(enum conf_source_type t);

/* ---- Reload (conf_diff.c) --------------------------------------------- */

#define CONF_KEY_MAX 128          /* a dotted key path, shown */
#define CONF_SHOW_MAX 96          /* a value, shown (longer ones are cut) */

/* One difference between the configuration in use and a new one. */
struct conf_change {
  char key[CONF_KEY_MAX];         /* "limits.max_inflight_per_connection",
                                     "sources.qrng.fallback", "sources.x" */
  char old_value[CONF_SHOW_MAX];  /* as conf_print() writes it; "(none)"
                                     for a source added */
  char new_value[CONF_SHOW_MAX];  /* "(removed)" for a source removed */
  int live;                       /* 1: a reload applies it; 0: it keeps
                                     its value until qrsd restarts */
};

/* The differences from cur to next, key by key in conf_print()'s order.
   0 and a new array (free() it; NULL when there are none) in *ret with
   its count in *ret_n, or -ENOMEM.  Reads both, changes neither: it may
   run on a worker thread while nothing changes cur. */
int conf_diff(const struct qrsd_conf *cur, const struct qrsd_conf *next,
              struct conf_change **ret, size_t *ret_n);

/* Can next's live keys go with cur's other ones?  Values that need a
   restart stay as they are, so the checks across keys are made again on
   the mix (amplifier.sample_count <= limits.max_sample_count, ...).  0,
   or -EINVAL with err filled in (naming next's file and the key). */
int conf_check_live(const struct qrsd_conf *cur,
                    const struct qrsd_conf *next, char *err, size_t errlen);

/* Apply a reload: the values of next's live keys (and its hash) go into
   cur, cur's old ones into next, which the caller then frees with
   conf_free().  Keys that need a restart keep cur's values.  The sources
   array is next's afterwards: pointers into cur's old one die with
   next. */
void conf_apply_live(struct qrsd_conf *cur, struct qrsd_conf *next);

/* Do two sources have the same type and keys, their fallbacks aside
   (and with but_quota, their quota limits)?  1 yes, 0 no (a reload
   replaces it), -ENOMEM. */
int conf_source_same(const struct conf_source *a,
                     const struct conf_source *b, int but_quota);

#endif
