/* qrsd's configuration loader: YAML (libyaml) into struct qrsd_conf.

   The text is first read into a small tree of nodes that keep their line
   numbers (so that every error can name one), then the tree is walked
   against tables of keys.  A new setting is one line in a table below;
   conf_print() walks the same tables, so it prints every setting there is.

   The embedded default (conf/qrsd.yaml) is applied first, then the file,
   then the checks that involve more than one key. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml.h>

#include "conf/conf.h"
#include "local/harvest.h"
#include "gwire.h"

#define MAX_DEPTH 32          /* nesting of YAML collections */
#define MAX_PATH 256          /* dotted key path in messages */
#define SHOW 60               /* bytes of a value quoted in a message */

/* ---- The tree ---------------------------------------------------------- */

enum node_kind { NODE_SCALAR, NODE_MAPPING, NODE_SEQUENCE };

struct node {
  enum node_kind kind;
  int line;                 /* 1-based; a mapping value: its key's */
  int plain;                /* scalar written without quotes */
  char *text;               /* scalar, NUL-terminated (no NUL inside) */
  struct node *children;    /* mapping: key, value, key, value, ... */
  struct node *next;
};

struct parser {
  const char *name;         /* the file, for messages */
  char *err;
  size_t errlen;
  locale_t c_locale;
  int builtin;              /* applying the embedded default */
};

/* ---- The tables of keys ------------------------------------------------ */

enum key_kind {
  KEY_SECTION,              /* a mapping of the keys in sub */
  KEY_STRING,               /* char *, length umin..umax, maybe choices */
  KEY_MODE,                 /* unsigned, octal text, umin..umax */
  KEY_U32,                  /* uint32_t, decimal, umin..umax */
  KEY_U64,                  /* uint64_t, decimal, umin..umax */
  KEY_BOOL,                 /* int 0/1, YAML true/false */
  KEY_DOUBLE,               /* double, dmin..dmax, bounds open as flagged */
  KEY_SOURCES,              /* the sources mapping */
  KEY_SOURCE_TYPE,          /* "type" of a source: read before the rest */
  KEY_MECHANISMS,           /* a source's mechanisms: a list of names */
};

#define OPEN_MIN 1u
#define OPEN_MAX 2u

struct key {
  const char *name;
  enum key_kind kind;
  size_t offset;            /* of the field in the struct being filled */
  const struct key *sub;    /* KEY_SECTION: keys, ended by a NULL name */
  uint64_t umin, umax;
  double dmin, dmax;
  unsigned open;            /* KEY_DOUBLE: OPEN_MIN | OPEN_MAX */
  const char *const *choices;  /* KEY_STRING: allowed values, or NULL */
};

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
    .offset = C_OFF(max_sample_count), .umin = 1, .umax = 16777216 },
  { .name = "max_connections", .kind = KEY_U32,
    .offset = C_OFF(max_connections), .umin = 1, .umax = 65536 },
  { .name = "max_inflight_per_connection", .kind = KEY_U32,
    .offset = C_OFF(max_inflight), .umin = 1, .umax = 4096 },
  { .name = "request_timeout_ms", .kind = KEY_U32,
    .offset = C_OFF(request_timeout_ms), .umin = 1, .umax = 600000 },
  { .name = "max_calibration_samples", .kind = KEY_U32,
    .offset = C_OFF(max_calibration_samples), .umin = 2, .umax = 10000000 },
  { .name = "max_calibration_bytes", .kind = KEY_U64,
    .offset = C_OFF(max_calibration_bytes), .umin = 1,
    .umax = 17179869184ull },
  { .name = "exact_cache_bytes", .kind = KEY_U64,
    .offset = C_OFF(exact_cache_bytes), .umin = 1048576,
    .umax = 17179869184ull },
  { .name = "hello_timeout_ms", .kind = KEY_U32,
    .offset = C_OFF(hello_timeout_ms), .umin = 1, .umax = 600000 },
  { .name = "frame_timeout_ms", .kind = KEY_U32,
    .offset = C_OFF(frame_timeout_ms), .umin = 1, .umax = 600000 },
  { .name = "idle_timeout_ms", .kind = KEY_U32,
    .offset = C_OFF(idle_timeout_ms), .umin = 0, .umax = 86400000 },
  { .name = "max_connections_per_uid", .kind = KEY_U32,
    .offset = C_OFF(max_connections_per_uid), .umin = 1, .umax = 65536 },
  { .name = "memory_budget_bytes", .kind = KEY_U64,
    .offset = C_OFF(memory_budget), .umin = 16777216,
    .umax = 1099511627776ull },
  { .name = NULL }
};

static const struct key monitor_keys[] = {
  { .name = "window", .kind = KEY_U32, .offset = C_OFF(monitor_window),
    .umin = 0, .umax = 100000 },
  { .name = "ks_alarm_p", .kind = KEY_DOUBLE,
    .offset = C_OFF(monitor_ks_alarm_p), .dmin = 0.0, .dmax = 0.5 },
  { .name = "cusum_k", .kind = KEY_DOUBLE, .offset = C_OFF(monitor_cusum_k),
    .dmin = 0.0, .dmax = 10.0 },
  { .name = "cusum_h", .kind = KEY_DOUBLE, .offset = C_OFF(monitor_cusum_h),
    .dmin = 0.0, .dmax = 1e9, .open = OPEN_MIN },
  { .name = NULL }
};

static const struct key compat_keys[] = {
  { .name = "listen", .kind = KEY_STRING, .offset = C_OFF(compat_listen),
    .umin = 0, .umax = 200 },
  { .name = "source", .kind = KEY_STRING, .offset = C_OFF(compat_source),
    .umin = 1, .umax = CONF_MAX_SOURCE_NAME },
  { .name = NULL }
};

/* The top level, in the order conf_print() writes it. */
static const struct key top_keys[] = {
  { .name = "socket", .kind = KEY_SECTION, .sub = socket_keys },
  { .name = "default_source", .kind = KEY_STRING,
    .offset = C_OFF(default_source), .umin = 1,
    .umax = CONF_MAX_SOURCE_NAME },
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
  { .name = "conditioning", .kind = KEY_STRING, .offset = S_OFF(conditioning),
    .umin = 1, .umax = 15, .choices = conditionings },
  { .name = "timeout_ms", .kind = KEY_U32, .offset = S_OFF(timeout_ms),
    .umin = 1, .umax = 600000 },
  HEALTH_ALPHA_KEY,
  { .name = NULL }
};

static const struct key noise_keys[] = {
  SOURCE_COMMON_KEYS,
  { .name = "conditioning", .kind = KEY_STRING, .offset = S_OFF(conditioning),
    .umin = 1, .umax = 15, .choices = conditionings },
  { .name = "mechanisms", .kind = KEY_MECHANISMS },
  { .name = "combine", .kind = KEY_STRING, .offset = S_OFF(combine),
    .umin = 1, .umax = 15, .choices = combines },
  { .name = "timeout_ms", .kind = KEY_U32, .offset = S_OFF(timeout_ms),
    .umin = 1, .umax = 600000 },
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
  { .name = "methods", .kind = KEY_SECTION, .sub = grpc_method_keys },
  { .name = "quota", .kind = KEY_SECTION, .sub = grpc_quota_keys },
  { .name = "breaker", .kind = KEY_SECTION, .sub = grpc_breaker_keys },
  { .name = NULL }
};

static const struct {
  const char *name;
  enum conf_source_type type;
  const struct key *keys;
  int test_only;            /* needs allow_test_sources: true */
} source_types[] = {
  { "system", CONF_SOURCE_SYSTEM, system_keys, 0 },
  { "mock", CONF_SOURCE_MOCK, mock_keys, 1 },
  { "device", CONF_SOURCE_DEVICE, device_keys, 0 },
  { "timing", CONF_SOURCE_TIMING, timing_keys, 0 },
  { "noise", CONF_SOURCE_NOISE, noise_keys, 0 },
  { "grpc", CONF_SOURCE_GRPC, grpc_keys, 0 },
};

#define N_SOURCE_TYPES (sizeof(source_types) / sizeof(source_types[0]))

/* ---- Errors ------------------------------------------------------------ */

/* Write "name:line: path: message" into p->err (line 0: no line, path NULL
   or "": no path), with control characters made visible as '?' so that it
   stays one line.  Returns -EINVAL. */
static int fail(struct parser *p, int line, const char *path,
                const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int
fail(struct parser *p, int line, const char *path, const char *fmt, ...)
{
  va_list ap;
  size_t n;
  int w;

  if (!p->err || p->errlen == 0)
    return -EINVAL;

  if (line > 0)
    w = snprintf(p->err, p->errlen, "%s:%d: ", p->name, line);
  else
    w = snprintf(p->err, p->errlen, "%s: ", p->name);
  n = w < 0 ? 0 : (size_t)w;
  if (n < p->errlen && path && *path) {
    w = snprintf(p->err + n, p->errlen - n, "%s: ", path);
    n += w < 0 ? 0 : (size_t)w;
  }
  if (n < p->errlen) {
    va_start(ap, fmt);
    vsnprintf(p->err + n, p->errlen - n, fmt, ap);
    va_end(ap);
  }
  for (n = 0; p->err[n]; n++)
    if ((unsigned char)p->err[n] < 0x20 || p->err[n] == 0x7f)
      p->err[n] = '?';
  return -EINVAL;
}

static int
fail_nomem(struct parser *p)
{
  fail(p, 0, NULL, "out of memory");
  return -ENOMEM;
}

static int
is_null(const struct node *n)
{
  if (n->kind != NODE_SCALAR || !n->plain)
    return 0;
  return !strcmp(n->text, "") || !strcmp(n->text, "~") ||
         !strcmp(n->text, "null") || !strcmp(n->text, "Null") ||
         !strcmp(n->text, "NULL");
}

/* "expected <what>, got <what n is>" */
static int
fail_type(struct parser *p, const struct node *n, const char *path,
          const char *what)
{
  if (n->kind == NODE_MAPPING)
    return fail(p, n->line, path, "expected %s, got a mapping", what);
  if (n->kind == NODE_SEQUENCE)
    return fail(p, n->line, path, "expected %s, got a sequence", what);
  if (is_null(n))
    return fail(p, n->line, path, "expected %s, got no value", what);
  return fail(p, n->line, path, "expected %s, got '%.*s'%s", what, SHOW,
              n->text, strlen(n->text) > SHOW ? "..." : "");
}

/* ---- Numbers ----------------------------------------------------------- */

/* Shortest text that reads back as v, independent of the locale. */
static void
format_double(double v, locale_t loc, char *buf, size_t len)
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

  if (v->kind != NODE_SCALAR || is_null(v))
    return fail_type(p, v, path, "an integer");
  r = read_uint(v->text, &u, &neg);
  if (r == -EINVAL)
    return fail_type(p, v, path, "an integer");
  if (r < 0 || (neg && u > 0) || u < k->umin || u > k->umax)
    return fail(p, v->line, path, "value %.*s out of range %" PRIu64
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

  if (v->kind != NODE_SCALAR || is_null(v))
    return fail_type(p, v, path, "an octal mode like \"0660\"");
  s = v->text;
  if (s[0] == '0' && (s[1] == 'o' || s[1] == 'O'))
    s += 2;
  if (*s == '\0')
    return fail_type(p, v, path, "an octal mode like \"0660\"");
  m = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '7')
      return fail_type(p, v, path, "an octal mode like \"0660\"");
    if (m <= k->umax)
      m = m * 8 + (uint64_t)(*s - '0');
  }
  if (m < k->umin || m > k->umax)
    return fail(p, v->line, path, "value %.*s out of range %#" PRIo64
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

  if (v->kind != NODE_SCALAR || is_null(v))
    return fail_type(p, v, path, "a number");
  /* Only [+-]digits[.digits][e[+-]digits]: strtod() alone would also take
     "inf", "nan", hex and leading blanks. */
  digits = 0;
  for (s = v->text; *s; s++) {
    if (*s >= '0' && *s <= '9')
      digits = 1;
    else if (!strchr("+-.eE", *s))
      return fail_type(p, v, path, "a number");
  }
  if (!digits)
    return fail_type(p, v, path, "a number");
  errno = 0;
  d = strtod_l(v->text, &end, p->c_locale);
  if (end == v->text || *end != '\0')
    return fail_type(p, v, path, "a number");

  ok = isfinite(d);
  ok = ok && ((k->open & OPEN_MIN) ? d > k->dmin : d >= k->dmin);
  ok = ok && ((k->open & OPEN_MAX) ? d < k->dmax : d <= k->dmax);
  if (!ok) {
    format_double(k->dmin, p->c_locale, lo, sizeof(lo));
    format_double(k->dmax, p->c_locale, hi, sizeof(hi));
    if (!k->open)
      return fail(p, v->line, path, "value %.*s out of range %s..%s", SHOW,
                  v->text, lo, hi);
    return fail(p, v->line, path, "value %.*s out of range %s %s x %s %s",
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

  if (v->kind != NODE_SCALAR || is_null(v))
    return fail_type(p, v, path, "a string");
  len = strlen(v->text);
  if (len < k->umin && len == 0)
    return fail(p, v->line, path, "must not be empty");
  if (len < k->umin || len > k->umax)
    return fail(p, v->line, path, "'%.*s%s' has %zu bytes, not %" PRIu64
                "..%" PRIu64, SHOW, v->text, len > SHOW ? "..." : "", len,
                k->umin, k->umax);
  for (s = v->text; *s; s++)
    if ((unsigned char)*s < 0x20 || *s == 0x7f)
      return fail(p, v->line, path, "contains a control character");
  if (k->choices) {
    for (c = k->choices; *c; c++)
      if (!strcmp(*c, v->text))
        break;
    if (!*c) {
      char list[256];
      size_t n = 0;

      list[0] = '\0';
      for (c = k->choices; *c && n < sizeof(list); c++)
        n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%s",
                              c == k->choices ? "" : ", ", *c);
      return fail(p, v->line, path, "'%.*s' is not supported by this build "
                  "(supported: %s)", SHOW, v->text, list);
    }
  }

  dup = strdup(v->text);
  if (!dup)
    return fail_nomem(p);
  free(*ret);
  *ret = dup;
  return 0;
}

/* ---- Mappings ---------------------------------------------------------- */

/* path.key into buf (just key at the top level, just path for key ""),
   cut to fit. */
static void
join_path(char *buf, size_t len, const char *path, const char *key)
{
  if (snprintf(buf, len, "%s%s%s", path, *path && *key ? "." : "", key) < 0)
    buf[0] = '\0';
}

/* Check the key node kn of mapping map (a scalar, not given before) and
   write its dotted path under path into sub. */
static int
check_key(struct parser *p, const struct node *map, const struct node *kn,
          const char *path, char *sub, size_t sublen)
{
  const struct node *k;

  if (kn->kind != NODE_SCALAR)
    return fail(p, kn->line, path, "a key must be a string");
  join_path(sub, sublen, path, kn->text);
  for (k = map->children; k != kn; k = k->next->next)
    if (k->kind == NODE_SCALAR && !strcmp(k->text, kn->text))
      return fail(p, kn->line, sub, "duplicate key (first given at line %d)",
                  k->line);
  return 0;
}

static int parse_mapping(struct parser *p, const struct node *map,
                         const char *path, const struct key *keys,
                         void *base);

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
  return fail_type(p, v, path, "true or false");
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
    return fail_type(p, v, path, "a list of mechanism names");
  free_mechanisms(s);
  n = 0;
  for (it = v->children; it; it = it->next)
    n++;
  if (n > CONF_MAX_MECHANISMS)
    return fail(p, v->line, path, "more than %d mechanisms",
                CONF_MAX_MECHANISMS);
  s->mechanisms = calloc(n ? n : 1, sizeof(*s->mechanisms));
  if (!s->mechanisms)
    return fail_nomem(p);
  for (it = v->children; it; it = it->next) {
    if (it->kind != NODE_SCALAR || is_null(it))
      return fail_type(p, it, path, "a mechanism name");
    if (!noise_mech_find(it->text))
      return fail(p, it->line, path, "unknown noise mechanism '%.*s' (see "
                  "qrsctl sources --json, or README: local sources)", SHOW,
                  it->text);
    for (i = 0; i < s->n_mechanisms; i++)
      if (!strcmp(s->mechanisms[i], it->text))
        return fail(p, it->line, path, "mechanism '%.*s' listed twice",
                    SHOW, it->text);
    s->mechanisms[s->n_mechanisms] = strdup(it->text);
    if (!s->mechanisms[s->n_mechanisms])
      return fail_nomem(p);
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
    if (is_null(v))
      return 0;                         /* "socket:" alone: all defaults */
    if (v->kind != NODE_MAPPING)
      return fail_type(p, v, path, "a mapping");
    return parse_mapping(p, v, path, k->sub, base);
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
  }
  return fail(p, v->line, path, "internal error: unknown kind of key");
}

static int
parse_mapping(struct parser *p, const struct node *map, const char *path,
              const struct key *keys, void *base)
{
  const struct node *kn, *vn;
  const struct key *k;
  char sub[MAX_PATH];
  int r;

  for (kn = map->children; kn; kn = vn->next) {
    vn = kn->next;
    r = check_key(p, map, kn, path, sub, sizeof(sub));
    if (r < 0)
      return r;
    for (k = keys; k->name; k++)
      if (!strcmp(k->name, kn->text))
        break;
    if (!k->name)
      return fail(p, kn->line, sub, "unknown key");
    r = parse_value(p, k, vn, sub, base);
    if (r < 0)
      return r;
  }
  return 0;
}

/* ---- Sources ----------------------------------------------------------- */

static int
valid_source_name(const char *s)
{
  size_t n;

  for (n = 0; s[n]; n++)
    if (!((s[n] >= 'a' && s[n] <= 'z') || (s[n] >= 'A' && s[n] <= 'Z') ||
          (s[n] >= '0' && s[n] <= '9') || s[n] == '_' || s[n] == '.' ||
          s[n] == '-'))
      return 0;
  return n >= 1 && n <= CONF_MAX_SOURCE_NAME;
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
  return *field ? 0 : fail_nomem(p);
}

/* The line of key a (and b within it) in a source's mapping. */
static int
source_key_line(const struct node *map, const char *a, const char *b)
{
  const struct node *kn;

  for (kn = map->children; kn && kn->next; kn = kn->next->next) {
    if (kn->kind != NODE_SCALAR || strcmp(kn->text, a))
      continue;
    if (!b)
      return kn->line;
    return source_key_line(kn->next, b, NULL);
  }
  return map->line;
}

static int
grpc_finish(struct parser *p, struct conf_source *s, const struct node *vn,
            const char *path)
{
  struct conf_grpc *g = &s->grpc;
  const char *h;
  char sub[MAX_PATH];

  if (set_default(p, &g->target, "") < 0 ||
      set_default(p, &g->mode, "unary") < 0 ||
      set_default(p, &g->ca_file, "") < 0 ||
      set_default(p, &g->cert_file, "") < 0 ||
      set_default(p, &g->key_file, "") < 0 ||
      set_default(p, &g->server_name, "") < 0 ||
      set_default(p, &g->api_key_file, "") < 0 ||
      set_default(p, &g->api_key_header, "api-key") < 0 ||
      set_default(p, &g->method, GW_ENTROPY_METHOD) < 0 ||
      set_default(p, &g->stream_method, GW_ENTROPY_STREAM_METHOD) < 0 ||
      set_default(p, &g->draw_method, GW_DRAW_METHOD) < 0 ||
      set_default(p, &g->draw_stream_method, GW_DRAW_STREAM_METHOD) < 0)
    return -ENOMEM;
  if (!*g->target)
    return fail(p, vn->line, path, "missing key 'target' (unix:/path or "
                "host:port)");
  if (g->insecure < 0)
    g->insecure = strncmp(g->target, "unix:", 5) == 0;
  if (!*g->cert_file != !*g->key_file) {
    join_path(sub, sizeof(sub), path, "tls");
    return fail(p, source_key_line(vn, "tls", NULL), sub,
                "cert_file and key_file go together");
  }
  if (g->insecure && (*g->ca_file || *g->cert_file)) {
    join_path(sub, sizeof(sub), path, "insecure");
    return fail(p, source_key_line(vn, "insecure", NULL), sub,
                "insecure: true and tls files exclude each other");
  }
  for (h = g->api_key_header; *h; h++)
    if (!((*h >= 'a' && *h <= 'z') || (*h >= '0' && *h <= '9') ||
          *h == '-' || *h == '_' || *h == '.')) {
      join_path(sub, sizeof(sub), path, "api_key_header");
      return fail(p, source_key_line(vn, "api_key_header", NULL), sub,
                  "'%s' must be lowercase letters, digits, '-', '_' or "
                  "'.'", g->api_key_header);
    }
  if (strcmp(g->mode, "unary") && !*g->stream_method) {
    join_path(sub, sizeof(sub), path, "methods");
    return fail(p, source_key_line(vn, "methods", NULL), sub,
                "mode %s needs methods.entropy_stream", g->mode);
  }
  if (!strcmp(g->mode, "unary") && !*g->method) {
    join_path(sub, sizeof(sub), path, "methods");
    return fail(p, source_key_line(vn, "methods", NULL), sub,
                "mode unary needs methods.entropy");
  }
  if (g->cb_recovery_window_max_s < g->cb_recovery_window_s) {
    join_path(sub, sizeof(sub), path, "breaker");
    return fail(p, source_key_line(vn, "breaker", NULL), sub,
                "recovery_window_max_s is below recovery_window_s");
  }
  return 0;
}

static void
grpc_free(struct conf_grpc *g)
{
  free(g->target);
  free(g->mode);
  free(g->ca_file);
  free(g->cert_file);
  free(g->key_file);
  free(g->server_name);
  free(g->api_key_file);
  free(g->api_key_header);
  free(g->method);
  free(g->stream_method);
  free(g->draw_method);
  free(g->draw_stream_method);
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
    return fail(p, kn->line, path, "more than %d sources", CONF_MAX_SOURCES);
  if (!valid_source_name(kn->text))
    return fail(p, kn->line, path, "invalid source name (1 to %d of "
                "A-Z a-z 0-9 _ . -)", CONF_MAX_SOURCE_NAME);
  if (vn->kind != NODE_MAPPING)
    return fail_type(p, vn, path, "a mapping with a type");

  tv = NULL;
  for (tk = vn->children; tk; tk = tk->next->next)
    if (tk->kind == NODE_SCALAR && !strcmp(tk->text, "type")) {
      tv = tk->next;
      break;
    }
  if (!tv)
    return fail(p, vn->line, path, "missing key 'type'");
  fb_line = vn->line;
  for (tk = vn->children; tk; tk = tk->next->next)
    if (tk->kind == NODE_SCALAR && !strcmp(tk->text, "fallback"))
      fb_line = tk->line;
  join_path(sub, sizeof(sub), path, "type");
  if (tv->kind != NODE_SCALAR || is_null(tv))
    return fail_type(p, tv, sub, "a source type");
  for (i = 0; i < N_SOURCE_TYPES; i++)
    if (!strcmp(source_types[i].name, tv->text))
      break;
  if (i == N_SOURCE_TYPES)
    return fail(p, tv->line, sub, "source type '%.*s' is not supported by "
                "this build", SHOW, tv->text);

  s = realloc(conf->sources, (conf->n_sources + 1) * sizeof(*s));
  if (!s)
    return fail_nomem(p);
  conf->sources = s;
  s = &conf->sources[conf->n_sources];
  memset(s, 0, sizeof(*s));
  s->name = strdup(kn->text);
  s->fallback = strdup("error");
  s->device_path = strdup("");
  s->conditioning = strdup("raw");
  s->combine = strdup("xor");
  conf->n_sources++;
  if (!s->name || !s->fallback || !s->device_path || !s->conditioning ||
      !s->combine)
    return fail_nomem(p);
  s->type = source_types[i].type;
  s->line = p->builtin ? 0 : kn->line;
  if (s->type == CONF_SOURCE_GRPC)
    grpc_defaults(&s->grpc);
  s->fallback_line = p->builtin ? 0 : fb_line;
  s->health_alpha_exp = 30;
  s->min_entropy = 1.0;
  s->device_chunk = 4096;
  s->timeout_ms = 1000;

  r = parse_mapping(p, vn, path, source_types[i].keys, s);
  if (r < 0)
    return r;
  if (s->type == CONF_SOURCE_DEVICE && !s->device_path[0])
    return fail(p, vn->line, path, "missing key 'path' (the device node, "
                "FIFO or file to read)");
  if (s->type == CONF_SOURCE_GRPC)
    return grpc_finish(p, s, vn, path);
  return 0;
}

static void
free_sources(struct qrsd_conf *conf)
{
  size_t i;

  for (i = 0; i < conf->n_sources; i++) {
    free(conf->sources[i].name);
    grpc_free(&conf->sources[i].grpc);
    free(conf->sources[i].fallback);
    free(conf->sources[i].device_path);
    free(conf->sources[i].conditioning);
    free(conf->sources[i].combine);
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

  if (is_null(v) || (v->kind == NODE_MAPPING && !v->children))
    return fail(p, v->line, path, "at least one source is required");
  if (v->kind != NODE_MAPPING)
    return fail_type(p, v, path, "a mapping of sources");

  free_sources(conf);
  for (kn = v->children; kn; kn = vn->next) {
    vn = kn->next;
    r = check_key(p, v, kn, path, sub, sizeof(sub));
    if (r < 0)
      return r;
    r = parse_source(p, conf, kn, vn, sub);
    if (r < 0)
      return r;
  }
  return 0;
}

/* ---- YAML into the tree ------------------------------------------------ */

static void
node_free(struct node *n)
{
  struct node *next;

  while (n) {
    next = n->next;
    node_free(n->children);
    free(n->text);
    free(n);
    n = next;
  }
}

static int
fail_yaml(struct parser *p, yaml_parser_t *yp, const char *text, size_t len)
{
  size_t i;
  int line;

  if (yp->error == YAML_MEMORY_ERROR)
    return fail_nomem(p);
  if (yp->error == YAML_READER_ERROR) {
    line = 1;
    for (i = 0; i < yp->problem_offset && i < len; i++)
      if (text[i] == '\n')
        line++;
    return fail(p, line, NULL, "%s", yp->problem ? yp->problem :
                "unreadable text");
  }
  if (yp->context)
    return fail(p, (int)yp->problem_mark.line + 1, NULL,
                "syntax error: %s (%s at line %d)", yp->problem, yp->context,
                (int)yp->context_mark.line + 1);
  return fail(p, (int)yp->problem_mark.line + 1, NULL, "syntax error: %s",
              yp->problem ? yp->problem : "unknown");
}

struct reader {
  yaml_parser_t yp;
  const char *text;
  size_t len;
};

static int
next_event(struct parser *p, struct reader *rd, yaml_event_t *ev)
{
  if (!yaml_parser_parse(&rd->yp, ev))
    return fail_yaml(p, &rd->yp, rd->text, rd->len);
  return 0;
}

/* Build the node at path that starts with event ev (which this deletes). */
static int
build_node(struct parser *p, struct reader *rd, yaml_event_t *ev, int depth,
           const char *path, struct node **ret)
{
  struct node *n, *child, *prev, **tail;
  yaml_event_type_t end;
  yaml_char_t *anchor, *tag;
  yaml_event_t cev;
  char sub[MAX_PATH];
  int count, r;

  n = NULL;
  anchor = NULL;
  tag = NULL;
  end = YAML_NO_EVENT;
  switch (ev->type) {
  case YAML_ALIAS_EVENT:
    anchor = ev->data.alias.anchor;
    break;
  case YAML_SCALAR_EVENT:
    anchor = ev->data.scalar.anchor;
    tag = ev->data.scalar.tag;
    break;
  case YAML_SEQUENCE_START_EVENT:
    anchor = ev->data.sequence_start.anchor;
    tag = ev->data.sequence_start.tag;
    end = YAML_SEQUENCE_END_EVENT;
    break;
  case YAML_MAPPING_START_EVENT:
    anchor = ev->data.mapping_start.anchor;
    tag = ev->data.mapping_start.tag;
    end = YAML_MAPPING_END_EVENT;
    break;
  default:
    r = fail(p, (int)ev->start_mark.line + 1, path, "unexpected YAML event");
    goto out;
  }
  if (anchor) {
    r = fail(p, (int)ev->start_mark.line + 1, path,
             "YAML anchors and aliases are not supported");
    goto out;
  }
  if (tag) {
    r = fail(p, (int)ev->start_mark.line + 1, path,
             "YAML tags are not supported");
    goto out;
  }
  if (depth > MAX_DEPTH) {
    r = fail(p, (int)ev->start_mark.line + 1, path, "nested too deeply");
    goto out;
  }

  n = calloc(1, sizeof(*n));
  if (!n) {
    r = fail_nomem(p);
    goto out;
  }
  n->line = (int)ev->start_mark.line + 1;

  if (ev->type == YAML_SCALAR_EVENT) {
    n->kind = NODE_SCALAR;
    n->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    if (memchr(ev->data.scalar.value, '\0', ev->data.scalar.length)) {
      r = fail(p, n->line, path, "contains a NUL character");
      goto out;
    }
    n->text = strndup((const char *)ev->data.scalar.value,
                      ev->data.scalar.length);
    if (!n->text) {
      r = fail_nomem(p);
      goto out;
    }
    r = 0;
    goto out;
  }

  n->kind = end == YAML_MAPPING_END_EVENT ? NODE_MAPPING : NODE_SEQUENCE;
  tail = &n->children;
  prev = NULL;
  for (count = 0;; count++) {
    r = next_event(p, rd, &cev);
    if (r < 0)
      goto out;
    if (cev.type == end) {
      yaml_event_delete(&cev);
      break;
    }
    /* A value's path names its key. */
    if (n->kind == NODE_MAPPING && count % 2 == 1 &&
        prev->kind == NODE_SCALAR)
      join_path(sub, sizeof(sub), path, prev->text);
    else
      join_path(sub, sizeof(sub), path, "");
    r = build_node(p, rd, &cev, depth + 1, sub, &child);
    if (r < 0)
      goto out;
    /* A value is reported on its key's line (a block mapping would
       start on the line after, and "key:" with nothing after has no line
       of its own). */
    if (n->kind == NODE_MAPPING && count % 2 == 1)
      child->line = prev->line;
    *tail = child;
    tail = &child->next;
    prev = child;
  }
  r = 0;

out:
  yaml_event_delete(ev);
  if (r < 0) {
    node_free(n);
    return r;
  }
  *ret = n;
  return 0;
}

/* Read text into a tree; *ret_root is NULL for a text with no document. */
static int
read_tree(struct parser *p, const char *text, size_t len,
          struct node **ret_root)
{
  struct reader rd;
  struct node *root;
  yaml_event_t ev;
  int r;

  root = NULL;
  if (!yaml_parser_initialize(&rd.yp))
    return fail_nomem(p);
  rd.text = text;
  rd.len = len;
  yaml_parser_set_input_string(&rd.yp, (const unsigned char *)text, len);

  r = next_event(p, &rd, &ev);                  /* stream start */
  if (r < 0)
    goto out;
  yaml_event_delete(&ev);
  r = next_event(p, &rd, &ev);
  if (r < 0)
    goto out;
  if (ev.type == YAML_STREAM_END_EVENT) {       /* nothing but comments */
    yaml_event_delete(&ev);
    goto out;
  }
  yaml_event_delete(&ev);                       /* document start */

  r = next_event(p, &rd, &ev);
  if (r < 0)
    goto out;
  r = build_node(p, &rd, &ev, 0, "", &root);
  if (r < 0)
    goto out;

  r = next_event(p, &rd, &ev);                  /* document end */
  if (r < 0)
    goto out;
  yaml_event_delete(&ev);
  r = next_event(p, &rd, &ev);
  if (r < 0)
    goto out;
  if (ev.type != YAML_STREAM_END_EVENT)
    r = fail(p, (int)ev.start_mark.line + 1, NULL,
             "more than one YAML document");
  yaml_event_delete(&ev);

out:
  yaml_parser_delete(&rd.yp);
  if (r < 0) {
    node_free(root);
    return r;
  }
  *ret_root = root;
  return 0;
}

/* ---- Loading ----------------------------------------------------------- */

/* Apply text on top of conf; *ret_root gets its tree (for check()). */
static int
apply(struct parser *p, struct qrsd_conf *conf, const char *text, size_t len,
      struct node **ret_root)
{
  struct node *root;
  int r;

  r = read_tree(p, text, len, &root);
  if (r < 0)
    return r;
  if (root && !is_null(root)) {
    if (root->kind != NODE_MAPPING)
      r = fail_type(p, root, NULL, "a mapping of keys at the top level");
    else
      r = parse_mapping(p, root, "", top_keys, conf);
  }
  if (r < 0) {
    node_free(root);
    return r;
  }
  *ret_root = root;
  return 0;
}

/* The line of the key at path a[.b] in root, or 0. */
static int
key_line(const struct node *root, const char *a, const char *b)
{
  const struct node *k;

  while (root && root->kind == NODE_MAPPING) {
    for (k = root->children; k; k = k->next->next)
      if (k->kind == NODE_SCALAR && !strcmp(k->text, a))
        break;
    if (!k)
      return 0;
    if (!b)
      return k->line;
    root = k->next;
    a = b;
    b = NULL;
  }
  return 0;
}

/* Every fallback names "error", "system", "mock" or a declared source,
   and no chain of fallbacks comes back to where it started. */
static int
check_fallbacks(struct parser *p, const struct qrsd_conf *conf)
{
  const struct conf_source *s, *t;
  char path[MAX_PATH], chain[512];
  size_t i, steps, len;

  for (i = 0; i < conf->n_sources; i++) {
    s = &conf->sources[i];
    snprintf(path, sizeof(path), "sources.%s.fallback", s->name);
    if (strcmp(s->fallback, "error") && strcmp(s->fallback, "system") &&
        strcmp(s->fallback, "mock") && !conf_find_source(conf, s->fallback))
      return fail(p, s->fallback_line, path, "'%s' is not a declared "
                  "source (use error, system, mock or a source under "
                  "sources)", s->fallback);
  }
  for (i = 0; i < conf->n_sources; i++) {
    s = &conf->sources[i];
    len = (size_t)snprintf(chain, sizeof(chain), "%s", s->name);
    for (t = s, steps = 0; steps <= conf->n_sources; steps++) {
      t = conf_find_source(conf, t->fallback);
      if (!t)
        break;
      if (len < sizeof(chain))
        len += (size_t)snprintf(chain + len, sizeof(chain) - len, " -> %s",
                                t->name);
      if (t == s) {
        snprintf(path, sizeof(path), "sources.%s.fallback", s->name);
        return fail(p, s->fallback_line, path, "fallback cycle: %s",
                    chain);
      }
    }
  }
  return 0;
}

/* Test-only sources (and fallbacks to the built-in mock) need
   allow_test_sources: true, so that a mock cannot serve, under any name,
   by accident (issue 11 item 6). */
static int
check_test_sources(struct parser *p, const struct qrsd_conf *conf)
{
  const struct conf_source *s;
  char path[MAX_PATH];
  size_t i;

  if (conf->allow_test_sources)
    return 0;
  for (i = 0; i < conf->n_sources; i++) {
    s = &conf->sources[i];
    if (conf_source_type_is_test(s->type)) {
      snprintf(path, sizeof(path), "sources.%s", s->name);
      return fail(p, s->line, path, "a %s source is for tests only and "
                  "serves only with allow_test_sources: true",
                  conf_source_type_name(s->type));
    }
    if (!strcmp(s->fallback, "mock") && !conf_find_source(conf, "mock")) {
      snprintf(path, sizeof(path), "sources.%s.fallback", s->name);
      return fail(p, s->fallback_line, path, "the built-in mock source is "
                  "for tests only and serves only with allow_test_sources: "
                  "true");
    }
  }
  return 0;
}

/* The checks that involve more than one key. */
static int
check(struct parser *p, const struct qrsd_conf *conf, const struct node *root)
{
  int line;

  line = check_fallbacks(p, conf);
  if (line < 0)
    return line;

  if (conf->n_sources == 0)
    return fail(p, key_line(root, "sources", NULL), "sources",
                "at least one source is required");
  if (!conf_find_source(conf, conf->default_source)) {
    line = key_line(root, "default_source", NULL);
    if (!line)
      line = key_line(root, "sources", NULL);
    return fail(p, line, "default_source", "source '%s' is not declared "
                "under sources", conf->default_source);
  }
  if (*conf->compat_listen) {
    const char *l = conf->compat_listen;

    if (strncmp(l, "unix:", 5) && strncmp(l, "127.", 4) &&
        strncmp(l, "localhost:", 10) && strncmp(l, "[::1]:", 6))
      return fail(p, key_line(root, "grpc_compat", "listen"),
                  "grpc_compat.listen", "'%s' is neither unix:PATH nor a "
                  "loopback address (127.0.0.1:PORT, localhost:PORT, "
                  "[::1]:PORT)", l);
    if (!conf_find_source(conf, conf->compat_source))
      return fail(p, key_line(root, "grpc_compat", "source"),
                  "grpc_compat.source", "source '%s' is not declared under "
                  "sources", conf->compat_source);
  }
  if (conf->amp_sample_count > conf->max_sample_count) {
    line = key_line(root, "amplifier", "sample_count");
    if (!line)
      line = key_line(root, "limits", "max_sample_count");
    return fail(p, line, "amplifier.sample_count", "value %" PRIu32
                " is above limits.max_sample_count (%" PRIu32 ")",
                conf->amp_sample_count, conf->max_sample_count);
  }
  if (conf->amp_zscore_calibration_samples > conf->max_calibration_samples ||
      conf->amp_ecdf_calibration_samples > conf->max_calibration_samples) {
    line = key_line(root, "limits", "max_calibration_samples");
    return fail(p, line, "amplifier", "calibration samples above "
                "limits.max_calibration_samples (%" PRIu32 ")",
                conf->max_calibration_samples);
  }
  return check_test_sources(p, conf);
}

/* The embedded default's tree, read once per process (it is 14 KB of
   annotated YAML; every load starts from it).  Never freed: it lives as
   long as the process.  If it cannot be read, default_tree stays NULL and
   load() reads it again to report why. */
static struct node *default_tree;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

static void
read_default_tree(void)
{
  struct parser p;

  memset(&p, 0, sizeof(p));
  p.name = CONF_BUILTIN_NAME;
  p.builtin = 1;
  if (read_tree(&p, conf_default_yaml, conf_default_yaml_len,
                &default_tree) < 0)
    default_tree = NULL;
}

/* The embedded default, then text unless only_default. */
static int
load(const char *name, const char *text, size_t len, int only_default,
     struct qrsd_conf **ret_conf, char *err, size_t errlen)
{
  struct qrsd_conf *conf;
  struct node *root;
  struct parser p;
  int r;

  if (!ret_conf || (!text && len > 0))
    return -EINVAL;
  if (err && errlen > 0)
    err[0] = '\0';
  memset(&p, 0, sizeof(p));
  p.name = CONF_BUILTIN_NAME;
  p.builtin = 1;
  p.err = err;
  p.errlen = errlen;
  root = NULL;
  conf = NULL;

  p.c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
  if (!p.c_locale)
    return fail_nomem(&p);

  conf = calloc(1, sizeof(*conf));
  if (!conf) {
    r = fail_nomem(&p);
    goto out;
  }
  conf->file = strdup(name);
  if (!conf->file) {
    r = fail_nomem(&p);
    goto out;
  }

  pthread_once(&default_once, read_default_tree);
  if (default_tree && default_tree->kind == NODE_MAPPING)
    r = parse_mapping(&p, default_tree, "", top_keys, conf);
  else
    r = apply(&p, conf, conf_default_yaml, conf_default_yaml_len, &root);
  if (r < 0)
    goto out;
  if (!only_default) {
    node_free(root);
    root = NULL;
    p.name = name;
    p.builtin = 0;
    r = apply(&p, conf, text ? text : "", len, &root);
    if (r < 0)
      goto out;
  }
  r = check(&p, conf, root ? root : (only_default ? default_tree : NULL));
  if (r == 0) {
    size_t i;

    for (i = 0; i < conf->n_sources; i++)
      conf->sources[i].grpc.state_dir = conf->state_dir;
  }

out:
  node_free(root);
  freelocale(p.c_locale);
  if (r < 0) {
    conf_free(conf);
    return r;
  }
  *ret_conf = conf;
  return 0;
}

int
conf_load_string(const char *text, size_t len, const char *name,
                 struct qrsd_conf **ret_conf, char *err, size_t errlen)
{
  return load(name ? name : "(string)", text, len, 0, ret_conf, err, errlen);
}

int
conf_load_default(struct qrsd_conf **ret_conf, char *err, size_t errlen)
{
  return load(CONF_BUILTIN_NAME, NULL, 0, 1, ret_conf, err, errlen);
}

int
conf_load_file(const char *path, struct qrsd_conf **ret_conf, char *err,
               size_t errlen)
{
  struct stat st;
  char msg[128];
  char *buf;
  size_t len;
  ssize_t n;
  int fd, r;

  if (!path || !ret_conf)
    return -EINVAL;
  buf = NULL;
  len = 0;

  fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    r = -errno;
    goto fail;
  }
  if (fstat(fd, &st) < 0) {
    r = -errno;
    goto fail;
  }
  if (S_ISDIR(st.st_mode)) {
    r = -EISDIR;
    goto fail;
  }
  buf = malloc(CONF_MAX_FILE_SIZE + 1);
  if (!buf) {
    r = -ENOMEM;
    goto fail;
  }
  for (;;) {
    n = read(fd, buf + len, CONF_MAX_FILE_SIZE + 1 - len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      r = -errno;
      goto fail;
    }
    if (n == 0)
      break;
    len += (size_t)n;
    if (len > CONF_MAX_FILE_SIZE) {
      r = -EFBIG;
      goto fail;
    }
  }
  close(fd);
  fd = -1;

  r = conf_load_string(buf, len, path, ret_conf, err, errlen);
  free(buf);
  return r;

fail:
  if (err && errlen > 0) {
    if (r == -EFBIG)
      snprintf(err, errlen, "%s: larger than %d bytes", path,
               CONF_MAX_FILE_SIZE);
    else
      snprintf(err, errlen, "%s: %s", path, strerror_r(-r, msg, sizeof(msg)));
  }
  if (fd >= 0)
    close(fd);
  free(buf);
  return r;
}

void
conf_free(struct qrsd_conf *conf)
{
  if (!conf)
    return;
  free(conf->file);
  free(conf->socket_path);
  free(conf->socket_group);
  free(conf->default_source);
  free(conf->amp_type);
  free(conf->state_dir);
  free(conf->status_file);
  free(conf->compat_listen);
  free(conf->compat_source);
  free_sources(conf);
  free(conf);
}

const struct conf_source *
conf_find_source(const struct qrsd_conf *conf, const char *name)
{
  size_t i;

  if (!conf || !name)
    return NULL;
  for (i = 0; i < conf->n_sources; i++)
    if (!strcmp(conf->sources[i].name, name))
      return &conf->sources[i];
  return NULL;
}

int
conf_source_type_is_test(enum conf_source_type t)
{
  size_t i;

  for (i = 0; i < N_SOURCE_TYPES; i++)
    if (source_types[i].type == t)
      return source_types[i].test_only;
  return 1;
}

const char *
conf_source_type_name(enum conf_source_type t)
{
  size_t i;

  for (i = 0; i < N_SOURCE_TYPES; i++)
    if (source_types[i].type == t)
      return source_types[i].name;
  return "unknown";
}

/* ---- Printing ---------------------------------------------------------- */

/* s as a YAML double-quoted string. */
static void
print_string(FILE *f, const char *s)
{
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20 || *s == 0x7f)
      fprintf(f, "\\x%02x", (unsigned)(unsigned char)*s);
    else
      fputc(*s, f);
  }
  fputc('"', f);
}

static void
print_scalar(FILE *f, const struct key *k, const void *base, locale_t loc)
{
  const char *field;
  char buf[32];

  field = (const char *)base + k->offset;
  switch (k->kind) {
  case KEY_STRING:
    print_string(f, *(char *const *)(const void *)field);
    break;
  case KEY_MODE:
    fprintf(f, "\"%04o\"", *(const unsigned *)(const void *)field);
    break;
  case KEY_U32:
    fprintf(f, "%" PRIu32, *(const uint32_t *)(const void *)field);
    break;
  case KEY_U64:
    fprintf(f, "%" PRIu64, *(const uint64_t *)(const void *)field);
    break;
  case KEY_DOUBLE:
    format_double(*(const double *)(const void *)field, loc, buf,
                  sizeof(buf));
    fputs(buf, f);
    break;
  case KEY_BOOL:
    fputs(*(const int *)(const void *)field ? "true" : "false", f);
    break;
  case KEY_SECTION:
  case KEY_SOURCES:
  case KEY_SOURCE_TYPE:
  case KEY_MECHANISMS:
    break;
  }
}

static void
print_keys(FILE *f, const struct qrsd_conf *conf, const struct key *keys,
           int indent, locale_t loc)
{
  const struct conf_source *s;
  const struct key *k, *sk;
  size_t i, t;

  for (k = keys; k->name; k++) {
    fprintf(f, "%*s%s:", indent, "", k->name);
    if (k->kind == KEY_SECTION) {
      fputc('\n', f);
      print_keys(f, conf, k->sub, indent + 2, loc);
      continue;
    }
    if (k->kind != KEY_SOURCES) {
      fputc(' ', f);
      print_scalar(f, k, conf, loc);
      fputc('\n', f);
      continue;
    }
    fputc('\n', f);
    for (i = 0; i < conf->n_sources; i++) {
      s = &conf->sources[i];
      for (t = 0; t < N_SOURCE_TYPES; t++)
        if (source_types[t].type == s->type)
          break;
      if (t == N_SOURCE_TYPES)
        continue;
      fprintf(f, "%*s", indent + 2, "");
      print_string(f, s->name);
      fprintf(f, ": { type: %s", source_types[t].name);
      for (sk = source_types[t].keys; sk->name; sk++) {
        if (sk->kind == KEY_SOURCE_TYPE)
          continue;
        fprintf(f, ", %s: ", sk->name);
        if (sk->kind == KEY_MECHANISMS) {
          size_t m;

          fputc('[', f);
          for (m = 0; m < s->n_mechanisms; m++)
            fprintf(f, "%s%s", m ? ", " : "", s->mechanisms[m]);
          fputc(']', f);
          continue;
        }
        if (sk->kind == KEY_SECTION) {
          const struct key *nk;

          fputs("{ ", f);
          for (nk = sk->sub; nk->name; nk++) {
            fprintf(f, "%s%s: ", nk == sk->sub ? "" : ", ", nk->name);
            print_scalar(f, nk, s, loc);
          }
          fputs(" }", f);
          continue;
        }
        print_scalar(f, sk, s, loc);
      }
      fputs(" }\n", f);
    }
  }
}

int
conf_print(const struct qrsd_conf *conf, FILE *f)
{
  locale_t loc;

  if (!conf || !f)
    return -EINVAL;
  loc = newlocale(LC_ALL_MASK, "C", (locale_t)0);
  if (!loc)
    return -ENOMEM;
  fputs("# qrsd: effective configuration, from ", f);
  print_string(f, conf->file ? conf->file : "");
  fputc('\n', f);
  print_keys(f, conf, top_keys, 0, loc);
  freelocale(loc);
  if (ferror(f))
    return errno > 0 ? -errno : -EIO;
  return 0;
}
