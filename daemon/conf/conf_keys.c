/* The configuration's keys (conf_int.h says what the other pieces of the
   loader are): the tables of keys, one line per setting, and the walker
   that fills struct qrsd_conf and each struct conf_source from a YAML
   tree against them, typed and bounded (numbers independent of the
   locale, strings without control characters, YAML 1.2 booleans), with
   the checks inside one source.  conf_print() walks the same tables. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf_int.h"
#include "gwire.h"
#include "local/harvest.h"

#define C_OFF(field) offsetof(struct qrsd_conf, field)
#define S_OFF(field) offsetof(struct conf_source, field)

static const char *const amp_types[] = { "zscore_mean", "zscore_thought",
                                         "ecdf", "exact", NULL };

static const struct key socket_keys[] = {
  { .name = "path", .kind = KEY_STRING, .offset = C_OFF(socket_path),
    .umin = 1, .umax = 107 },           /* sizeof(sun_path) - 1 */
  { .name = "mode", .kind = KEY_MODE, .offset = C_OFF(socket_mode),
    .umin = 0, .umax = 0777 },
  { .name = "group", .kind = KEY_STRING, .offset = C_OFF(socket_group),
    .umin = 0, .umax = 255 },
  { .name = NULL }
};

static const struct key access_keys[] = {
  { .name = "group", .kind = KEY_STRING, .offset = C_OFF(access_group),
    .umin = 0, .umax = 255, .live = 1 },
  { .name = "admin_group", .kind = KEY_STRING,
    .offset = C_OFF(access_admin_group), .umin = 0, .umax = 255,
    .live = 1 },
  { .name = NULL }
};

static const char *const log_levels[] = { "err", "warn", "info", "debug",
                                          NULL };

static const struct key log_keys[] = {
  { .name = "level", .kind = KEY_STRING, .offset = C_OFF(log_level),
    .umin = 1, .umax = 15, .choices = log_levels, .live = 1 },
  { .name = NULL }
};

static const struct key amplifier_keys[] = {
  { .name = "type", .kind = KEY_STRING, .offset = C_OFF(amp_type),
    .umin = 1, .umax = 63, .choices = amp_types },
  { .name = "sample_count", .kind = KEY_U32,
    .offset = C_OFF(amp_sample_count), .umin = 1, .umax = 16777216 },
  { .name = "population_mean", .kind = KEY_DOUBLE,
    .offset = C_OFF(amp_population_mean), .dmin = 0.0, .dmax = 255.0 },
  { .name = "population_std", .kind = KEY_DOUBLE,
    .offset = C_OFF(amp_population_std), .dmin = 0.0, .dmax = 127.5,
    .open = OPEN_MIN },
  { .name = "epsilon", .kind = KEY_DOUBLE, .offset = C_OFF(amp_epsilon),
    .dmin = 0.0, .dmax = 0.5, .open = OPEN_MIN | OPEN_MAX },
  { .name = "zscore_calibration_samples", .kind = KEY_U32,
    .offset = C_OFF(amp_zscore_calibration_samples), .umin = 0,
    .umax = 10000000 },
  { .name = "ecdf_calibration_samples", .kind = KEY_U32,
    .offset = C_OFF(amp_ecdf_calibration_samples), .umin = 2,
    .umax = 10000000 },
  { .name = NULL }
};

static const struct key limits_keys[] = {
  { .name = "max_frame_bytes", .kind = KEY_U32,
    .offset = C_OFF(max_frame_bytes), .umin = 1024, .umax = 67108864 },
  { .name = "max_sample_count", .kind = KEY_U32,
    .offset = C_OFF(max_sample_count), .umin = 1, .umax = 16777216, .live = 1 },
  { .name = "max_connections", .kind = KEY_U32,
    .offset = C_OFF(max_connections), .umin = 1, .umax = 65536, .live = 1 },
  { .name = "max_inflight_per_connection", .kind = KEY_U32,
    .offset = C_OFF(max_inflight), .umin = 1, .umax = 4096, .live = 1 },
  { .name = "request_timeout_ms", .kind = KEY_U32,
    .offset = C_OFF(request_timeout_ms), .umin = 1, .umax = 600000, .live = 1 },
  { .name = "max_calibration_samples", .kind = KEY_U32,
    .offset = C_OFF(max_calibration_samples), .umin = 2, .umax = 10000000,
    .live = 1 },
  { .name = "max_calibration_bytes", .kind = KEY_U64,
    .offset = C_OFF(max_calibration_bytes), .umin = 1,
    .umax = 17179869184ull, .live = 1 },
  { .name = "exact_cache_bytes", .kind = KEY_U64,
    .offset = C_OFF(exact_cache_bytes), .umin = 1048576,
    .umax = 17179869184ull, .live = 1 },
  { .name = "hello_timeout_ms", .kind = KEY_U32,
    .offset = C_OFF(hello_timeout_ms), .umin = 1, .umax = 600000, .live = 1 },
  { .name = "frame_timeout_ms", .kind = KEY_U32,
    .offset = C_OFF(frame_timeout_ms), .umin = 1, .umax = 600000, .live = 1 },
  { .name = "idle_timeout_ms", .kind = KEY_U32,
    .offset = C_OFF(idle_timeout_ms), .umin = 0, .umax = 86400000, .live = 1 },
  { .name = "max_connections_per_uid", .kind = KEY_U32,
    .offset = C_OFF(max_connections_per_uid), .umin = 1, .umax = 65536,
    .live = 1 },
  { .name = "reserved_admin_connections", .kind = KEY_U32,
    .offset = C_OFF(reserved_admin_connections), .umin = 0, .umax = 65536,
    .live = 1 },
  { .name = "memory_budget_bytes", .kind = KEY_U64,
    .offset = C_OFF(memory_budget), .umin = 16777216,
    .umax = 1099511627776ull, .live = 1 },
  { .name = NULL }
};

static const struct key monitor_keys[] = {
  { .name = "window", .kind = KEY_U32, .offset = C_OFF(monitor_window),
    .umin = 0, .umax = 100000, .live = 1 },
  { .name = "ks_alarm_p", .kind = KEY_DOUBLE,
    .offset = C_OFF(monitor_ks_alarm_p), .dmin = 0.0, .dmax = 0.5, .live = 1 },
  { .name = "cusum_k", .kind = KEY_DOUBLE, .offset = C_OFF(monitor_cusum_k),
    .dmin = 0.0, .dmax = 10.0, .live = 1 },
  { .name = "cusum_h", .kind = KEY_DOUBLE, .offset = C_OFF(monitor_cusum_h),
    .dmin = 0.0, .dmax = 1e9, .open = OPEN_MIN, .live = 1 },
  { .name = NULL }
};

static const char *const journal_policies[] = { "stop", "label", NULL };

static const struct key journal_keys[] = {
  { .name = "dir", .kind = KEY_STRING, .offset = C_OFF(journal_dir),
    .umin = 0, .umax = 4000 },
  { .name = "max_bytes", .kind = KEY_U64,
    .offset = C_OFF(journal_max_bytes), .umin = 4096,
    .umax = UINT64_C(1099511627776) },
  { .name = "queue", .kind = KEY_U32, .offset = C_OFF(journal_queue),
    .umin = 1, .umax = 65536 },
  { .name = "batch", .kind = KEY_U32, .offset = C_OFF(journal_batch),
    .umin = 1, .umax = 65536 },
  { .name = "flush_ms", .kind = KEY_U32, .offset = C_OFF(journal_flush_ms),
    .umin = 0, .umax = 1000 },
  { .name = "hash_buffer", .kind = KEY_U64,
    .offset = C_OFF(journal_hash_buffer), .umin = 0,
    .umax = UINT64_C(1073741824) },
  { .name = "writer_cpu", .kind = KEY_STRING,
    .offset = C_OFF(journal_writer_cpu), .umin = 0, .umax = 4 },
  { .name = "writer_nice", .kind = KEY_U32,
    .offset = C_OFF(journal_writer_nice), .umin = 0, .umax = 19 },
  { .name = "on_error", .kind = KEY_STRING,
    .offset = C_OFF(journal_on_error), .umin = 1, .umax = 15,
    .choices = journal_policies },
  { .name = NULL }
};

static const struct key compat_keys[] = {
  { .name = "listen", .kind = KEY_STRING, .offset = C_OFF(compat_listen),
    .umin = 0, .umax = 200 },
  { .name = "source", .kind = KEY_STRING, .offset = C_OFF(compat_source),
    .umin = 1, .umax = CONF_MAX_SOURCE_NAME },
  { .name = "socket_mode", .kind = KEY_MODE,
    .offset = C_OFF(compat_socket_mode), .umin = 0, .umax = 0777 },
  { .name = "socket_group", .kind = KEY_STRING,
    .offset = C_OFF(compat_socket_group), .umin = 0, .umax = 255 },
  { .name = "tls_cert", .kind = KEY_STRING, .offset = C_OFF(compat_tls_cert),
    .umin = 0, .umax = 4000 },
  { .name = "tls_key", .kind = KEY_STRING, .offset = C_OFF(compat_tls_key),
    .umin = 0, .umax = 4000 },
  { .name = "tls_client_ca", .kind = KEY_STRING,
    .offset = C_OFF(compat_tls_client_ca), .umin = 0, .umax = 4000 },
  { .name = "api_keys", .kind = KEY_STRING, .offset = C_OFF(compat_api_keys),
    .umin = 0, .umax = 4000 },
  { .name = "api_key_header", .kind = KEY_STRING,
    .offset = C_OFF(compat_api_key_header), .umin = 1, .umax = 100 },
  { .name = "max_connections", .kind = KEY_U32,
    .offset = C_OFF(compat_max_connections), .umin = 1, .umax = 65536 },
  { .name = "max_connections_per_peer", .kind = KEY_U32,
    .offset = C_OFF(compat_max_per_peer), .umin = 1, .umax = 65536 },
  { .name = "handshake_timeout_ms", .kind = KEY_U32,
    .offset = C_OFF(compat_handshake_timeout_ms), .umin = 100,
    .umax = 600000 },
  { .name = "idle_timeout_ms", .kind = KEY_U32,
    .offset = C_OFF(compat_idle_timeout_ms), .umin = 1000,
    .umax = 86400000 },
  { .name = NULL }
};

/* The top level, in the order conf_print() writes it. */
const struct key conf__top_keys[] = {
  { .name = "socket", .kind = KEY_SECTION, .sub = socket_keys },
  { .name = "access", .kind = KEY_SECTION, .sub = access_keys },
  { .name = "log", .kind = KEY_SECTION, .sub = log_keys },
  { .name = "default_source", .kind = KEY_STRING,
    .offset = C_OFF(default_source), .umin = 1,
    .umax = CONF_MAX_SOURCE_NAME, .live = 1 },
  { .name = "amplifier", .kind = KEY_SECTION, .sub = amplifier_keys },
  { .name = "limits", .kind = KEY_SECTION, .sub = limits_keys },
  { .name = "monitor", .kind = KEY_SECTION, .sub = monitor_keys },
  { .name = "allow_test_sources", .kind = KEY_BOOL,
    .offset = C_OFF(allow_test_sources) },
  { .name = "state_dir", .kind = KEY_STRING, .offset = C_OFF(state_dir),
    .umin = 1, .umax = 4000 },
  { .name = "status_file", .kind = KEY_STRING, .offset = C_OFF(status_file),
    .umin = 0, .umax = 4000 },
  { .name = "sources", .kind = KEY_SOURCES },
  { .name = "grpc_compat", .kind = KEY_SECTION, .sub = compat_keys },
  { .name = "journal", .kind = KEY_SECTION, .sub = journal_keys },
  { .name = "studies", .kind = KEY_STUDIES },
  { .name = NULL }
};

/* The keys of each source type, into struct conf_source.  Every table
   starts with the keys all sources have. */
#define SOURCE_COMMON_KEYS \
  { .name = "type", .kind = KEY_SOURCE_TYPE }, \
  { .name = "fallback", .kind = KEY_STRING, .offset = S_OFF(fallback), \
    .umin = 1, .umax = CONF_MAX_SOURCE_NAME }

static const struct key system_keys[] = {
  SOURCE_COMMON_KEYS,
  { .name = NULL }
};

static const struct key mock_keys[] = {
  SOURCE_COMMON_KEYS,
  { .name = "seed", .kind = KEY_U64, .offset = S_OFF(mock_seed),
    .umin = 0, .umax = UINT64_MAX },
  { .name = "mean_shift", .kind = KEY_DOUBLE,
    .offset = S_OFF(mock_mean_shift), .dmin = -127.5, .dmax = 127.5 },
  { .name = NULL }
};

static const char *const conditionings[] = { "raw", "vonneumann", "sha256",
                                            NULL };
static const char *const combines[] = { "xor", "concat", NULL };

#define HEALTH_ALPHA_KEY \
  { .name = "health_alpha_exp", .kind = KEY_U32, \
    .offset = S_OFF(health_alpha_exp), .umin = 8, .umax = 60 }

/* The harvested sources' (timing, noise) conditioning and timeout. */
#define CONDITIONING_KEY \
  { .name = "conditioning", .kind = KEY_STRING, \
    .offset = S_OFF(conditioning), .umin = 1, .umax = 15, \
    .choices = conditionings }
#define HARVEST_TIMEOUT_KEY \
  { .name = "timeout_ms", .kind = KEY_U32, .offset = S_OFF(timeout_ms), \
    .umin = 1, .umax = 600000 }

static const struct key device_keys[] = {
  SOURCE_COMMON_KEYS,
  { .name = "path", .kind = KEY_STRING, .offset = S_OFF(device_path),
    .umin = 1, .umax = 4095 },
  { .name = "chunk", .kind = KEY_U32, .offset = S_OFF(device_chunk),
    .umin = 1, .umax = 1048576 },
  { .name = "lock", .kind = KEY_BOOL, .offset = S_OFF(device_lock) },
  { .name = "drain", .kind = KEY_BOOL, .offset = S_OFF(device_drain) },
  { .name = "min_entropy", .kind = KEY_DOUBLE, .offset = S_OFF(min_entropy),
    .dmin = 0.0, .dmax = 8.0, .open = OPEN_MIN },
  HEALTH_ALPHA_KEY,
  { .name = NULL }
};

static const struct key timing_keys[] = {
  SOURCE_COMMON_KEYS,
  CONDITIONING_KEY,
  HARVEST_TIMEOUT_KEY,
  HEALTH_ALPHA_KEY,
  { .name = NULL }
};

static const struct key noise_keys[] = {
  SOURCE_COMMON_KEYS,
  CONDITIONING_KEY,
  { .name = "mechanisms", .kind = KEY_MECHANISMS },
  { .name = "combine", .kind = KEY_STRING, .offset = S_OFF(combine),
    .umin = 1, .umax = 15, .choices = combines },
  HARVEST_TIMEOUT_KEY,
  HEALTH_ALPHA_KEY,
  { .name = NULL }
};

#define G_OFF(field) S_OFF(grpc.field)
#define STR_KEY(n, f, lo, hi) \
  { .name = n, .kind = KEY_STRING, .offset = G_OFF(f), .umin = lo, \
    .umax = hi }

static const char *const grpc_modes[] = {
  "unary", "server_streaming", "bidi_streaming", NULL,
};

static const struct key grpc_tls_keys[] = {
  STR_KEY("ca_file", ca_file, 0, 4000),
  STR_KEY("cert_file", cert_file, 0, 4000),
  STR_KEY("key_file", key_file, 0, 4000),
  STR_KEY("server_name", server_name, 0, 255),
  { .name = NULL }
};

static const struct key grpc_method_keys[] = {
  STR_KEY("entropy", method, 0, 255),
  STR_KEY("entropy_stream", stream_method, 0, 255),
  STR_KEY("draw", draw_method, 0, 255),
  STR_KEY("draw_stream", draw_stream_method, 0, 255),
  { .name = NULL }
};

static const struct key grpc_quota_keys[] = {
  { .name = "max_bytes_per_request", .kind = KEY_U64,
    .offset = G_OFF(max_bytes_per_request), .umin = 0, .umax = 67108864 },
  { .name = "max_requests_per_minute", .kind = KEY_U64,
    .offset = G_OFF(max_requests_per_minute), .umin = 0, .umax = 100000 },
  { .name = "max_bytes_per_day", .kind = KEY_U64,
    .offset = G_OFF(max_bytes_per_day), .umin = 0, .umax = UINT64_MAX },
  { .name = NULL }
};

static const struct key grpc_breaker_keys[] = {
  { .name = "window_size", .kind = KEY_U32, .offset = G_OFF(cb_window_size),
    .umin = 1, .umax = 100000 },
  { .name = "min_timeout_ms", .kind = KEY_DOUBLE,
    .offset = G_OFF(cb_min_timeout_ms), .dmin = 0, .dmax = 600000 },
  { .name = "timeout_multiplier", .kind = KEY_DOUBLE,
    .offset = G_OFF(cb_timeout_multiplier), .dmin = 0, .dmax = 1000,
    .open = OPEN_MIN },
  { .name = "recovery_window_s", .kind = KEY_DOUBLE,
    .offset = G_OFF(cb_recovery_window_s), .dmin = 0, .dmax = 86400 },
  { .name = "recovery_window_max_s", .kind = KEY_DOUBLE,
    .offset = G_OFF(cb_recovery_window_max_s), .dmin = 0, .dmax = 86400 },
  { .name = "max_consecutive_failures", .kind = KEY_U32,
    .offset = G_OFF(cb_max_consecutive_failures), .umin = 1,
    .umax = 1000000 },
  { .name = NULL }
};

static const struct key grpc_keys[] = {
  SOURCE_COMMON_KEYS,
  STR_KEY("target", target, 1, 255),
  { .name = "mode", .kind = KEY_STRING, .offset = G_OFF(mode), .umin = 1,
    .umax = 32, .choices = grpc_modes },
  { .name = "insecure", .kind = KEY_BOOL, .offset = G_OFF(insecure) },
  { .name = "tls", .kind = KEY_SECTION, .sub = grpc_tls_keys },
  STR_KEY("api_key_file", api_key_file, 0, 4000),
  STR_KEY("api_key_header", api_key_header, 1, 100),
  { .name = "timeout_ms", .kind = KEY_DOUBLE, .offset = G_OFF(timeout_ms),
    .dmin = 1, .dmax = 600000 },
  { .name = "retry_count", .kind = KEY_U32, .offset = G_OFF(retry_count),
    .umin = 0, .umax = 10 },
  { .name = "check_echo", .kind = KEY_BOOL, .offset = G_OFF(check_echo) },
  { .name = "preprobe", .kind = KEY_BOOL, .offset = G_OFF(preprobe) },
  /* Health tests on the upstream's bytes: claimed bits per byte, 0 off. */
  { .name = "min_entropy", .kind = KEY_DOUBLE, .offset = S_OFF(min_entropy),
    .dmin = 0.0, .dmax = 8.0 },
  HEALTH_ALPHA_KEY,
  { .name = "methods", .kind = KEY_SECTION, .sub = grpc_method_keys },
  { .name = "quota", .kind = KEY_SECTION, .sub = grpc_quota_keys },
  { .name = "breaker", .kind = KEY_SECTION, .sub = grpc_breaker_keys },
  { .name = NULL }
};

static const struct key prng_keys[] = {
  SOURCE_COMMON_KEYS,
  { .name = "seed_file", .kind = KEY_STRING, .offset = S_OFF(prng_seed_file),
    .umin = 0, .umax = 4000 },
  { .name = NULL }
};

static const struct source_type source_types[] = {
  { "system", CONF_SOURCE_SYSTEM, system_keys, 0 },
  { "mock", CONF_SOURCE_MOCK, mock_keys, 1 },
  { "device", CONF_SOURCE_DEVICE, device_keys, 0 },
  { "timing", CONF_SOURCE_TIMING, timing_keys, 0 },
  { "noise", CONF_SOURCE_NOISE, noise_keys, 0 },
  { "grpc", CONF_SOURCE_GRPC, grpc_keys, 0 },
  { "prng", CONF_SOURCE_PRNG, prng_keys, 0 },
};

#define N_SOURCE_TYPES (sizeof(source_types) / sizeof(source_types[0]))

/* ---- Numbers ----------------------------------------------------------- */

void
conf__format_double(double v, locale_t loc, char *buf, size_t len)
{
  locale_t old;
  int prec;

  old = uselocale(loc);
  for (prec = 1; prec <= 17; prec++) {
    snprintf(buf, len, "%.*g", prec, v);
    if (strtod_l(buf, NULL, loc) == v)
      break;
  }
  uselocale(old);
}

/* Decimal digits with an optional sign, no leading zeros.  Returns 0 and
   the magnitude in *ret (*ret_neg: it had a minus), -ERANGE when it does
   not fit 64 bits, -EINVAL when it is not such a number. */
static int
read_uint(const char *s, uint64_t *ret, int *ret_neg)
{
  uint64_t v;
  int neg, overflow;

  neg = 0;
  if (*s == '+' || *s == '-')
    neg = *s++ == '-';
  if (*s < '0' || *s > '9' || (s[0] == '0' && s[1] != '\0'))
    return -EINVAL;
  v = 0;
  overflow = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9')
      return -EINVAL;
    if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
      overflow = 1;
    else
      v = v * 10 + (uint64_t)(*s - '0');
  }
  if (overflow)
    return -ERANGE;
  *ret = v;
  *ret_neg = neg;
  return 0;
}

static int
parse_uint(struct parser *p, const struct key *k, const struct node *v,
           const char *path, uint64_t *ret)
{
  uint64_t u;
  int neg, r;

  if (v->kind != NODE_SCALAR || conf__is_null(v))
    return conf__fail_type(p, v, path, "an integer");
  r = read_uint(v->text, &u, &neg);
  if (r == -EINVAL)
    return conf__fail_type(p, v, path, "an integer");
  if (r < 0 || (neg && u > 0) || u < k->umin || u > k->umax)
    return conf__fail(p, v->line, path, "value %.*s out of range %" PRIu64
                      "..%" PRIu64, SHOW, v->text, k->umin, k->umax);
  *ret = u;
  return 0;
}

static int
parse_mode(struct parser *p, const struct key *k, const struct node *v,
           const char *path, unsigned *ret)
{
  const char *s;
  uint64_t m;

  if (v->kind != NODE_SCALAR || conf__is_null(v))
    return conf__fail_type(p, v, path, "an octal mode like \"0660\"");
  s = v->text;
  if (s[0] == '0' && (s[1] == 'o' || s[1] == 'O'))
    s += 2;
  if (*s == '\0')
    return conf__fail_type(p, v, path, "an octal mode like \"0660\"");
  m = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '7')
      return conf__fail_type(p, v, path, "an octal mode like \"0660\"");
    if (m <= k->umax)
      m = m * 8 + (uint64_t)(*s - '0');
  }
  if (m < k->umin || m > k->umax)
    return conf__fail(p, v->line, path, "value %.*s out of range %#" PRIo64
                      "..%#" PRIo64, SHOW, v->text, k->umin, k->umax);
  *ret = (unsigned)m;
  return 0;
}

static int
parse_double(struct parser *p, const struct key *k, const struct node *v,
             const char *path, double *ret)
{
  char lo[32], hi[32];
  const char *s;
  char *end;
  double d;
  int digits, ok;

  if (v->kind != NODE_SCALAR || conf__is_null(v))
    return conf__fail_type(p, v, path, "a number");
  /* Only [+-]digits[.digits][e[+-]digits]: strtod() alone would also take
     "inf", "nan", hex and leading blanks. */
  digits = 0;
  for (s = v->text; *s; s++) {
    if (*s >= '0' && *s <= '9')
      digits = 1;
    else if (!strchr("+-.eE", *s))
      return conf__fail_type(p, v, path, "a number");
  }
  if (!digits)
    return conf__fail_type(p, v, path, "a number");
  errno = 0;
  d = strtod_l(v->text, &end, p->c_locale);
  if (end == v->text || *end != '\0')
    return conf__fail_type(p, v, path, "a number");

  ok = isfinite(d);
  ok = ok && ((k->open & OPEN_MIN) ? d > k->dmin : d >= k->dmin);
  ok = ok && ((k->open & OPEN_MAX) ? d < k->dmax : d <= k->dmax);
  if (!ok) {
    conf__format_double(k->dmin, p->c_locale, lo, sizeof(lo));
    conf__format_double(k->dmax, p->c_locale, hi, sizeof(hi));
    if (!k->open)
      return conf__fail(p, v->line, path, "value %.*s out of range %s..%s",
                        SHOW, v->text, lo, hi);
    return conf__fail(p, v->line, path, "value %.*s out of range %s %s x %s %s",
                      SHOW, v->text, lo, (k->open & OPEN_MIN) ? "<" : "<=",
                      (k->open & OPEN_MAX) ? "<" : "<=", hi);
  }
  *ret = d;
  return 0;
}

/* ---- Strings ----------------------------------------------------------- */

static int
parse_string(struct parser *p, const struct key *k, const struct node *v,
             const char *path, char **ret)
{
  const char *const *c;
  const char *s;
  size_t len;
  char *dup;

  if (v->kind != NODE_SCALAR || conf__is_null(v))
    return conf__fail_type(p, v, path, "a string");
  len = strlen(v->text);
  if (len < k->umin && len == 0)
    return conf__fail(p, v->line, path, "must not be empty");
  if (len < k->umin || len > k->umax)
    return conf__fail(p, v->line, path, "'%.*s%s' has %zu bytes, not %" PRIu64
                      "..%" PRIu64, SHOW, v->text, len > SHOW ? "..." : "", len,
                      k->umin, k->umax);
  for (s = v->text; *s; s++)
    if ((unsigned char)*s < 0x20 || *s == 0x7f)
      return conf__fail(p, v->line, path, "contains a control character");
  if (k->choices) {
    for (c = k->choices; *c; c++)
      if (!strcmp(*c, v->text))
        break;
    if (!*c) {
      char list[256], hint[80];

      conf__join_names(list, sizeof(list), k->choices);
      conf__hint(hint, sizeof(hint), v->text, k->choices);
      return conf__fail(p, v->line, path, "'%.*s' is not supported by this "
                        "build (supported: %s)%s", SHOW, v->text, list, hint);
    }
  }

  dup = strdup(v->text);
  if (!dup)
    return conf__fail_nomem(p);
  free(*ret);
  *ret = dup;
  return 0;
}

/* Check the key node kn of mapping map (a scalar, not given before) and
   write its dotted path under path into sub. */
int
conf__check_key(struct parser *p, const struct node *map, const struct node *kn,
          const char *path, char *sub, size_t sublen)
{
  const struct node *k;

  if (kn->kind != NODE_SCALAR)
    return conf__fail(p, kn->line, path, "a key must be a string");
  conf__join_path(sub, sublen, path, kn->text);
  for (k = map->children; k != kn; k = k->next->next)
    if (k->kind == NODE_SCALAR && !strcmp(k->text, kn->text))
      return conf__fail(p, kn->line, sub, "duplicate key (first given at "
                        "line %d)", k->line);
  return 0;
}


/* YAML 1.2 core booleans only: true/false (any case of the first letter
   or all capitals), no yes/no/on/off. */
static int
parse_bool(struct parser *p, const struct node *v, const char *path,
           int *ret)
{
  static const char *const yes[] = { "true", "True", "TRUE", NULL };
  static const char *const no[] = { "false", "False", "FALSE", NULL };
  int i;

  if (v->kind == NODE_SCALAR && v->plain)
    for (i = 0; yes[i]; i++) {
      if (!strcmp(v->text, yes[i])) {
        *ret = 1;
        return 0;
      }
      if (!strcmp(v->text, no[i])) {
        *ret = 0;
        return 0;
      }
    }
  return conf__fail_type(p, v, path, "true or false");
}
static int parse_sources(struct parser *p, const struct node *v,
                         const char *path, struct qrsd_conf *conf);

static void
free_mechanisms(struct conf_source *s)
{
  size_t i;

  for (i = 0; i < s->n_mechanisms; i++)
    free(s->mechanisms[i]);
  free(s->mechanisms);
  s->mechanisms = NULL;
  s->n_mechanisms = 0;
}

/* mechanisms: [name, ...]: known names, each once; [] = all available. */
static int
parse_mechanisms(struct parser *p, const struct node *v, const char *path,
                 struct conf_source *s)
{
  const struct node *it;
  size_t n, i;

  if (v->kind != NODE_SEQUENCE)
    return conf__fail_type(p, v, path, "a list of mechanism names");
  free_mechanisms(s);
  n = 0;
  for (it = v->children; it; it = it->next)
    n++;
  if (n > CONF_MAX_MECHANISMS)
    return conf__fail(p, v->line, path, "more than %d mechanisms",
                      CONF_MAX_MECHANISMS);
  s->mechanisms = calloc(n ? n : 1, sizeof(*s->mechanisms));
  if (!s->mechanisms)
    return conf__fail_nomem(p);
  for (it = v->children; it; it = it->next) {
    if (it->kind != NODE_SCALAR || conf__is_null(it))
      return conf__fail_type(p, it, path, "a mechanism name");
    if (!noise_mech_find(it->text))
      return conf__fail(p, it->line, path, "unknown noise mechanism '%.*s' "
                        "(see qrsctl sources --json, or qrsd.yaml(5), "
                        "Type noise)", SHOW, it->text);
    for (i = 0; i < s->n_mechanisms; i++)
      if (!strcmp(s->mechanisms[i], it->text))
        return conf__fail(p, it->line, path, "mechanism '%.*s' listed twice",
                          SHOW, it->text);
    s->mechanisms[s->n_mechanisms] = strdup(it->text);
    if (!s->mechanisms[s->n_mechanisms])
      return conf__fail_nomem(p);
    s->n_mechanisms++;
  }
  return 0;
}

static int
parse_value(struct parser *p, const struct key *k, const struct node *v,
            const char *path, void *base)
{
  char *field;
  uint64_t u;
  int r;

  field = (char *)base + k->offset;
  switch (k->kind) {
  case KEY_SECTION:
    if (conf__is_null(v))
      return 0;                         /* "socket:" alone: all defaults */
    if (v->kind != NODE_MAPPING)
      return conf__fail_type(p, v, path, "a mapping");
    return conf__parse_mapping(p, v, path, k->sub, base);
  case KEY_STRING:
    return parse_string(p, k, v, path, (char **)(void *)field);
  case KEY_MODE:
    return parse_mode(p, k, v, path, (unsigned *)(void *)field);
  case KEY_U32:
    r = parse_uint(p, k, v, path, &u);
    if (r == 0)
      *(uint32_t *)(void *)field = (uint32_t)u;
    return r;
  case KEY_U64:
    return parse_uint(p, k, v, path, (uint64_t *)(void *)field);
  case KEY_BOOL:
    return parse_bool(p, v, path, (int *)(void *)field);
  case KEY_DOUBLE:
    return parse_double(p, k, v, path, (double *)(void *)field);
  case KEY_SOURCES:
    return parse_sources(p, v, path, base);
  case KEY_SOURCE_TYPE:
    return 0;                           /* parse_source() has read it */
  case KEY_MECHANISMS:
    return parse_mechanisms(p, v, path, base);
  case KEY_STUDIES:
    return conf__parse_studies(p, v, path, base);
  case KEY_ARMS:
    return conf__parse_arms(p, v, path, base);
  }
  return conf__fail(p, v->line, path, "internal error: unknown kind of key");
}

#define MAX_KEYS 32           /* keys in one table, for hints */

/* kn (at sub) is none of keys: say which one it may have meant. */
static int
fail_unknown_key(struct parser *p, const struct node *kn, const char *sub,
                 const struct key *keys)
{
  const char *names[MAX_KEYS + 1];
  char hint[80];
  size_t n;

  for (n = 0; n < MAX_KEYS && keys[n].name; n++)
    names[n] = keys[n].name;
  names[n] = NULL;
  conf__hint(hint, sizeof(hint), kn->text, names);
  return conf__fail(p, kn->line, sub, "unknown key%s", hint);
}

int
conf__parse_mapping(struct parser *p, const struct node *map, const char *path,
                    const struct key *keys, void *base)
{
  const struct node *kn, *vn;
  const struct key *k;
  char sub[MAX_PATH];
  int r;

  for (kn = map->children; kn; kn = vn->next) {
    vn = kn->next;
    r = conf__check_key(p, map, kn, path, sub, sizeof(sub));
    if (r < 0)
      return r;
    for (k = keys; k->name; k++)
      if (!strcmp(k->name, kn->text))
        break;
    if (!k->name)
      return fail_unknown_key(p, kn, sub, keys);
    r = parse_value(p, k, vn, sub, base);
    if (r < 0)
      return r;
  }
  return 0;
}

/* ---- Sources ----------------------------------------------------------- */

int
conf_name_ok(const char *s, size_t max, const char *extra)
{
  size_t n;

  for (n = 0; s[n]; n++)
    if (!((s[n] >= 'a' && s[n] <= 'z') || (s[n] >= 'A' && s[n] <= 'Z') ||
          (s[n] >= '0' && s[n] <= '9') || s[n] == '_' || s[n] == '.' ||
          s[n] == '-' || (extra && strchr(extra, s[n]))))
      return 0;
  return n >= 1 && n <= max;
}


/* Numbers before parsing a grpc source (strings are filled in after). */
static void
grpc_defaults(struct conf_grpc *g)
{
  g->insecure = -1;                   /* decided by the target */
  g->timeout_ms = 5000;
  g->retry_count = 2;
  g->check_echo = 1;
  g->preprobe = 1;
  g->max_bytes_per_request = 35200;
  g->max_requests_per_minute = 500;
  g->max_bytes_per_day = 524288000;
  g->cb_window_size = 100;
  g->cb_min_timeout_ms = 5;
  g->cb_timeout_multiplier = 1.5;
  g->cb_recovery_window_s = 10;
  g->cb_recovery_window_max_s = 60;
  g->cb_max_consecutive_failures = 3;
}

static int
set_default(struct parser *p, char **field, const char *value)
{
  if (*field)
    return 0;
  *field = strdup(value);
  return *field ? 0 : conf__fail_nomem(p);
}

/* The strings of a grpc source and their defaults, in the order they
   are filled in (and freed). */
#define GS(field) offsetof(struct conf_grpc, field)

static const struct {
  size_t offset;
  const char *value;
} grpc_strings[] = {
  { GS(target), "" },
  { GS(mode), "unary" },
  { GS(ca_file), "" },
  { GS(cert_file), "" },
  { GS(key_file), "" },
  { GS(server_name), "" },
  { GS(api_key_file), "" },
  { GS(api_key_header), "api-key" },
  { GS(method), GW_ENTROPY_METHOD },
  { GS(stream_method), GW_ENTROPY_STREAM_METHOD },
  { GS(draw_method), GW_DRAW_METHOD },
  { GS(draw_stream_method), GW_DRAW_STREAM_METHOD },
};

#define N_GRPC_STRINGS (sizeof(grpc_strings) / sizeof(grpc_strings[0]))

static char **
grpc_string(struct conf_grpc *g, size_t i)
{
  return (char **)(void *)((char *)g + grpc_strings[i].offset);
}

/* A grpc source's mapping vn at path is wrong at its key: the error names
   path.key and the key's line (the source's if the key is not there). */
static int fail_key(struct parser *p, const struct node *vn,
                    const char *path, const char *key, const char *fmt, ...)
  __attribute__((format(printf, 5, 6)));

static int
fail_key(struct parser *p, const struct node *vn, const char *path,
         const char *key, const char *fmt, ...)
{
  char sub[MAX_PATH];
  va_list ap;
  int line, r;

  conf__join_path(sub, sizeof(sub), path, key);
  line = conf__key_line(vn, key, NULL);
  if (!line)
    line = vn->line;
  va_start(ap, fmt);
  r = conf__vfail(p, line, sub, fmt, ap);
  va_end(ap);
  return r;
}

static int
grpc_finish(struct parser *p, struct conf_source *s, const struct node *vn,
            const char *path)
{
  struct conf_grpc *g = &s->grpc;
  const char *h;
  size_t i;

  for (i = 0; i < N_GRPC_STRINGS; i++)
    if (set_default(p, grpc_string(g, i), grpc_strings[i].value) < 0)
      return -ENOMEM;
  if (!*g->target)
    return conf__fail(p, vn->line, path, "missing key 'target' (unix:/path or "
                      "host:port)");
  if (g->insecure < 0)
    g->insecure = strncmp(g->target, "unix:", 5) == 0;
  if (!*g->cert_file != !*g->key_file)
    return fail_key(p, vn, path, "tls",
                    "cert_file and key_file go together");
  if (g->insecure && (*g->ca_file || *g->cert_file))
    return fail_key(p, vn, path, "insecure",
                    "insecure: true and tls files exclude each other");
  for (h = g->api_key_header; *h; h++)
    if (!((*h >= 'a' && *h <= 'z') || (*h >= '0' && *h <= '9') ||
          *h == '-' || *h == '_' || *h == '.'))
      return fail_key(p, vn, path, "api_key_header",
                      "'%s' must be lowercase letters, digits, '-', '_' or "
                      "'.'", g->api_key_header);
  if (strcmp(g->mode, "unary") && !*g->stream_method)
    return fail_key(p, vn, path, "methods",
                    "mode %s needs methods.entropy_stream", g->mode);
  if (!strcmp(g->mode, "unary") && !*g->method)
    return fail_key(p, vn, path, "methods",
                    "mode unary needs methods.entropy");
  if (g->cb_recovery_window_max_s < g->cb_recovery_window_s)
    return fail_key(p, vn, path, "breaker",
                    "recovery_window_max_s is below recovery_window_s");
  return 0;
}

static void
grpc_free(struct conf_grpc *g)
{
  size_t i;

  for (i = 0; i < N_GRPC_STRINGS; i++)
    free(*grpc_string(g, i));
}

/* tv (at path) names no source type: say which this build has, and
   which one it may have meant. */
static int
fail_source_type(struct parser *p, const struct node *tv, const char *path)
{
  const char *names[N_SOURCE_TYPES + 1];
  char list[256], hint[80];
  size_t i;

  for (i = 0; i < N_SOURCE_TYPES; i++)
    names[i] = source_types[i].name;
  names[i] = NULL;
  conf__join_names(list, sizeof(list), names);
  conf__hint(hint, sizeof(hint), tv->text, names);
  return conf__fail(p, tv->line, path, "source type '%.*s' is not supported "
                    "by this build (supported: %s)%s", SHOW, tv->text, list,
                    hint);
}

/* One source: name kn, its mapping vn. */
static int
parse_source(struct parser *p, struct qrsd_conf *conf, const struct node *kn,
             const struct node *vn, const char *path)
{
  const struct node *tk, *tv;
  struct conf_source *s;
  char sub[MAX_PATH];
  size_t i;
  int fb_line, r;

  if (conf->n_sources >= CONF_MAX_SOURCES)
    return conf__fail(p, kn->line, path, "more than %d sources",
                      CONF_MAX_SOURCES);
  if (!conf_name_ok(kn->text, CONF_MAX_SOURCE_NAME, NULL))
    return conf__fail(p, kn->line, path, "invalid source name (1 to %d of "
                      "A-Z a-z 0-9 _ . -)", CONF_MAX_SOURCE_NAME);
  if (vn->kind != NODE_MAPPING)
    return conf__fail_type(p, vn, path, "a mapping with a type");

  tv = NULL;
  for (tk = vn->children; tk; tk = tk->next->next)
    if (tk->kind == NODE_SCALAR && !strcmp(tk->text, "type")) {
      tv = tk->next;
      break;
    }
  if (!tv)
    return conf__fail(p, vn->line, path, "missing key 'type'");
  fb_line = vn->line;
  for (tk = vn->children; tk; tk = tk->next->next)
    if (tk->kind == NODE_SCALAR && !strcmp(tk->text, "fallback"))
      fb_line = tk->line;
  conf__join_path(sub, sizeof(sub), path, "type");
  if (tv->kind != NODE_SCALAR || conf__is_null(tv))
    return conf__fail_type(p, tv, sub, "a source type");
  for (i = 0; i < N_SOURCE_TYPES; i++)
    if (!strcmp(source_types[i].name, tv->text))
      break;
  if (i == N_SOURCE_TYPES)
    return fail_source_type(p, tv, sub);

  s = realloc(conf->sources, (conf->n_sources + 1) * sizeof(*s));
  if (!s)
    return conf__fail_nomem(p);
  conf->sources = s;
  s = &conf->sources[conf->n_sources];
  memset(s, 0, sizeof(*s));
  s->name = strdup(kn->text);
  s->fallback = strdup("error");
  s->device_path = strdup("");
  s->conditioning = strdup("raw");
  s->combine = strdup("xor");
  s->prng_seed_file = strdup("");
  conf->n_sources++;
  if (!s->name || !s->fallback || !s->device_path || !s->conditioning ||
      !s->combine || !s->prng_seed_file)
    return conf__fail_nomem(p);
  s->type = source_types[i].type;
  s->line = p->builtin ? 0 : kn->line;
  if (s->type == CONF_SOURCE_GRPC)
    grpc_defaults(&s->grpc);
  s->fallback_line = p->builtin ? 0 : fb_line;
  s->health_alpha_exp = 30;
  s->min_entropy = s->type == CONF_SOURCE_GRPC ? 8.0 : 1.0;
  s->device_chunk = 4096;
  s->timeout_ms = 1000;

  r = conf__parse_mapping(p, vn, path, source_types[i].keys, s);
  if (r < 0)
    return r;
  if (s->type == CONF_SOURCE_DEVICE && !s->device_path[0])
    return conf__fail(p, vn->line, path, "missing key 'path' (the device node, "
                      "FIFO or file to read)");
  if (s->type == CONF_SOURCE_PRNG && !s->prng_seed_file[0])
    return conf__fail(p, vn->line, path, "missing key 'seed_file' (a file "
                      "of 64 hex characters: the stream's secret key)");
  if (s->type == CONF_SOURCE_GRPC)
    return grpc_finish(p, s, vn, path);
  return 0;
}

void
conf__free_sources(struct qrsd_conf *conf)
{
  size_t i;

  for (i = 0; i < conf->n_sources; i++) {
    free(conf->sources[i].name);
    grpc_free(&conf->sources[i].grpc);
    free(conf->sources[i].fallback);
    free(conf->sources[i].device_path);
    free(conf->sources[i].conditioning);
    free(conf->sources[i].combine);
    free(conf->sources[i].prng_seed_file);
    free_mechanisms(&conf->sources[i]);
  }
  free(conf->sources);
  conf->sources = NULL;
  conf->n_sources = 0;
}

/* The sources mapping: it replaces the sources so far. */
static int
parse_sources(struct parser *p, const struct node *v, const char *path,
              struct qrsd_conf *conf)
{
  const struct node *kn, *vn;
  char sub[MAX_PATH];
  int r;

  if (conf__is_null(v) || (v->kind == NODE_MAPPING && !v->children))
    return conf__fail(p, v->line, path, "at least one source is required");
  if (v->kind != NODE_MAPPING)
    return conf__fail_type(p, v, path, "a mapping of sources");

  conf__free_sources(conf);
  for (kn = v->children; kn; kn = vn->next) {
    vn = kn->next;
    r = conf__check_key(p, v, kn, path, sub, sizeof(sub));
    if (r < 0)
      return r;
    r = parse_source(p, conf, kn, vn, sub);
    if (r < 0)
      return r;
  }
  return 0;
}


const struct source_type *
conf__source_type(enum conf_source_type t)
{
  size_t i;

  for (i = 0; i < N_SOURCE_TYPES; i++)
    if (source_types[i].type == t)
      return &source_types[i];
  return NULL;
}

int
conf_source_type_is_test(enum conf_source_type t)
{
  const struct source_type *st;

  st = conf__source_type(t);
  return st ? st->test_only : 1;
}

const char *
conf_source_type_name(enum conf_source_type t)
{
  const struct source_type *st;

  st = conf__source_type(t);
  return st ? st->name : "unknown";
}
