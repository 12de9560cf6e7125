/* A gRPC upstream's channel and lifetime (upstream_int.h says what the
   other pieces are): upstream_new() (methods, api key, TLS credentials,
   breaker, quota) and upstream_free(), the channel with its rate-limited
   recreation, the calls and metadata every attempt and session starts
   with, gRPC status to errno, the persistence of the daily quota count
   (written on a worker thread), and the state for status.  Calls into
   the other pieces only to end what is alive (attempts, sessions,
   probe). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc_security.h>
#include <grpc/support/time.h>

#include "base/log.h"
#include "base/names.h"
#include "base/keyfile.h"
#include "base/regfile.h"
#include "grpc/upstream_int.h"
#include "persist/atomicfile.h"

#define RESET_INTERVAL_MS 1000        /* channel recreation rate limit */

static const char *const mode_names[] = {
  [UPSTREAM_UNARY] = "unary",
  [UPSTREAM_SERVER_STREAMING] = "server_streaming",
  [UPSTREAM_BIDI_STREAMING] = "bidi_streaming",
};

const char *
upstream_mode_name(enum upstream_mode m)
{
  return NAMES_NAME(mode_names, m, "unknown");
}

int
upstream_mode_parse(const char *s)
{
  return NAMES_FIND(mode_names, s);
}

void
upstream__maybe_free(struct upstream *u)
{
  if (!u->closing || u->live > 0)
    return;
  if (u->ch)
    grpc_channel_destroy(u->ch);
  if (u->creds)
    grpc_channel_credentials_release(u->creds);
  breaker_done(&u->breaker);
  quota_done(&u->quota);
  if (u->api_key)
    explicit_bzero(u->api_key, u->api_key_len);
  if (u->key_pem)
    explicit_bzero(u->key_pem, strlen(u->key_pem));
  free(u->api_key);
  free(u->key_pem);
  free(u->cert_pem);
  free(u->ca_pem);
  free(u->name);
  free(u->target);
  free(u->method);
  free(u->stream_method);
  free(u->draw_method);
  free(u->draw_stream_method);
  free(u->header);
  free(u->server_name);
  free(u);
  grpc_shutdown();                    /* upstream_new()'s grpc_init() */
}

/* ---- channel ---------------------------------------------------------- */

int
upstream__channel_ensure(struct upstream *u)
{
  grpc_arg args[4];
  grpc_channel_args ca;
  size_t n = 0;

  if (u->ch)
    return 0;
  args[n].type = GRPC_ARG_INTEGER;
  args[n].key = (char *)GRPC_ARG_KEEPALIVE_TIME_MS;
  args[n++].value.integer = 300000;
  args[n].type = GRPC_ARG_INTEGER;
  args[n].key = (char *)GRPC_ARG_KEEPALIVE_TIMEOUT_MS;
  args[n++].value.integer = 20000;
  args[n].type = GRPC_ARG_INTEGER;
  args[n].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[n++].value.integer = 64 << 20;
  if (u->server_name && *u->server_name) {
    args[n].type = GRPC_ARG_STRING;
    args[n].key = (char *)GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
    args[n++].value.string = u->server_name;
  }
  ca.num_args = n;
  ca.args = args;
  u->ch = grpc_channel_create(u->target, u->creds, &ca);
  return u->ch ? 0 : -ENOMEM;
}

/* Recreate the channel (a gRPC 1.51 channel reconnects slowly after the
   server restarts).  force: ignore the rate limit. */
void
upstream__channel_reset(struct upstream *u, int force)
{
  uint64_t t = upstream__now_ns();

  if (!u->ch)
    return;
  if (!force && t - u->last_reset < (uint64_t)RESET_INTERVAL_MS * 1000000)
    return;
  u->last_reset = t;
  u->resets++;
  upstream__sessions_close(u);
  grpc_channel_destroy(u->ch);
  u->ch = NULL;
  log_debug("source '%s': gRPC channel recreated", u->name);
}

void
upstream__call_open(struct upstream *u, struct upcall *c, const char *method,
                    double timeout_ms)
{
  grpc_slice m;

  m = grpc_slice_from_static_string(method);
  c->details = grpc_empty_slice();
  grpc_metadata_array_init(&c->imd);
  grpc_metadata_array_init(&c->tmd);
  c->call = grpc_channel_create_call(u->ch, NULL, GRPC_PROPAGATE_DEFAULTS,
                                     u->br->cq, m, NULL,
                                     gbridge_deadline(timeout_ms), NULL);
  grpc_slice_unref(m);
}

void
upstream__call_close(struct upcall *c)
{
  grpc_byte_buffer_destroy(c->send);    /* each takes NULL */
  grpc_byte_buffer_destroy(c->recv);
  grpc_metadata_array_destroy(&c->imd);
  grpc_metadata_array_destroy(&c->tmd);
  grpc_slice_unref(c->details);
  if (c->call)
    grpc_call_unref(c->call);
}

grpc_call_error
upstream__call_status(struct upcall *c, struct gb_op *op, gb_cb cb)
{
  grpc_op ops[1];

  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[0].data.recv_status_on_client.trailing_metadata = &c->tmd;
  ops[0].data.recv_status_on_client.status = &c->status;
  ops[0].data.recv_status_on_client.status_details = &c->details;
  return gbridge_batch(c->call, ops, 1, op, cb);
}

void
upstream__op_initial_md(struct upstream *u, grpc_op *op, grpc_metadata *md)
{
  memset(op, 0, sizeof(*op));
  op->op = GRPC_OP_SEND_INITIAL_METADATA;
  if (u->api_key) {
    md->key = grpc_slice_from_static_string(u->header);
    md->value = grpc_slice_from_static_buffer(u->api_key, u->api_key_len);
    op->data.send_initial_metadata.count = 1;
    op->data.send_initial_metadata.metadata = md;
  }
}

/* ---- errors ----------------------------------------------------------- */

int
upstream__status_err(grpc_status_code st)
{
  switch (st) {
  case GRPC_STATUS_OK: return 0;
  case GRPC_STATUS_DEADLINE_EXCEEDED: return -ETIMEDOUT;
  case GRPC_STATUS_UNAVAILABLE: return -EHOSTUNREACH;
  case GRPC_STATUS_UNAUTHENTICATED:
  case GRPC_STATUS_PERMISSION_DENIED: return -EACCES;
  case GRPC_STATUS_RESOURCE_EXHAUSTED: return -EDQUOT;
  case GRPC_STATUS_UNIMPLEMENTED: return -ENOSYS;
  default: return -EIO;
  }
}

/* The server rejected the request itself: retrying or reconnecting does
   not help.  The statuses of qr-sampler's _SERVER_SIDE_REJECTION_CODES
   (entropy/qgrpc/source.py), and UNIMPLEMENTED. */
int
upstream__server_rejection(int status)
{
  switch (status) {
  case GRPC_STATUS_FAILED_PRECONDITION:
  case GRPC_STATUS_INVALID_ARGUMENT:
  case GRPC_STATUS_NOT_FOUND:
  case GRPC_STATUS_PERMISSION_DENIED:
  case GRPC_STATUS_UNAUTHENTICATED:
  case GRPC_STATUS_OUT_OF_RANGE:
  case GRPC_STATUS_ALREADY_EXISTS:
  case GRPC_STATUS_UNIMPLEMENTED:
    return 1;
  default:
    return 0;
  }
}

static const char *
status_name(grpc_status_code st)
{
  static const char *const names[] = {
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
    "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED",
  };

  return (unsigned)st < sizeof(names) / sizeof(names[0]) ? names[st]
                                                         : "?";
}

/* "gRPC status N NAME: details", short enough for the callers' 160-byte
   buffers.  gRPC puts the cause last ("failed to connect to all
   addresses; last error: UNKNOWN: ipv4:...: Ssl handshake failed: ...:
   certificate verify failed"): its generic opening is dropped, and long
   details keep their end. */
void
upstream__status_detail(char *buf, size_t len, grpc_status_code st,
                        grpc_slice d)
{
  static const char generic[] = "failed to connect to all addresses; "
                                "last error: ";
  const char *p = (const char *)GRPC_SLICE_START_PTR(d);
  size_t n = GRPC_SLICE_LENGTH(d);
  const char *cut = "";

  if (n > sizeof(generic) - 1 &&
      memcmp(p, generic, sizeof(generic) - 1) == 0) {
    p += sizeof(generic) - 1;
    n -= sizeof(generic) - 1;
  }
  if (n > 112) {
    p += n - 109;
    n = 109;
    cut = "...";
  }
  snprintf(buf, len, "gRPC status %d %s%s%s%.*s", (int)st, status_name(st),
           n ? ": " : "", cut, (int)n, p);
}

/* ---- set-up ----------------------------------------------------------- */

/* The whole of a file the channel needs (a regular file, links
   followed: secrets are often mounted as links), or NULL with err set.
   secret: a private key or the api key, which keyfile.h's rule on
   owners and modes applies to; else a certificate. */
static char *
slurp(const char *path, int secret, size_t max, const char *what, char *err,
      size_t errlen)
{
  char msg[512];
  char *buf;
  int r;

  r = secret ? keyfile_read(path, KEYFILE_PRIVATE, max, &buf, NULL, msg,
                            sizeof(msg))
             : regfile_read(path, REGFILE_FOLLOW, max, &buf, NULL, msg,
                            sizeof(msg));
  if (r < 0) {
    snprintf(err, errlen, "cannot %s %s %s", secret ? "use" : "read", what,
             msg);
    return NULL;
  }
  return buf;
}

static int
header_ok(const char *h)
{
  const char *p;

  if (!*h)
    return 0;
  for (p = h; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
          *p == '-' || *p == '_' || *p == '.'))
      return 0;
  return h[0] != ':' && strncmp(h, "grpc-", 5) != 0;
}

int
upstream_new(struct gbridge *br, const struct upstream_conf *c,
             struct upstream **ret, char *err, size_t errlen)
{
  struct upstream *u;
  grpc_ssl_pem_key_cert_pair pair;
  size_t n;
  int r = -ENOMEM;

  u = calloc(1, sizeof(*u));
  if (!u)
    return -ENOMEM;
  /* gRPC itself stays up until the channel and the credentials are gone,
     which may be after the bridge has closed and put its own reference
     (a final quota write still in flight holds u at shutdown). */
  grpc_init();
  LIST_INIT(&u->attempts);
  u->br = br;
  u->mode = c->mode;
  u->timeout_ms = c->timeout_ms;
  u->retry_count = c->retry_count;
  u->check_echo = c->check_echo;
  u->preprobe = c->preprobe;
  u->name = strdup(c->name);
  u->target = strdup(c->target);
  u->method = strdup(c->method ? c->method : GW_ENTROPY_METHOD);
  u->stream_method = strdup(c->stream_method ? c->stream_method :
                            GW_ENTROPY_STREAM_METHOD);
  u->draw_method = strdup(c->draw_method ? c->draw_method : GW_DRAW_METHOD);
  u->draw_stream_method = strdup(c->draw_stream_method ?
                                 c->draw_stream_method :
                                 GW_DRAW_STREAM_METHOD);
  u->header = strdup(c->api_key_header && *c->api_key_header ?
                     c->api_key_header : "api-key");
  u->server_name = strdup(c->server_name ? c->server_name : "");
  u->closing = 1;                     /* until fully built: maybe_free */
  if (!u->name || !u->target || !u->method || !u->stream_method ||
      !u->draw_method || !u->draw_stream_method || !u->header ||
      !u->server_name) {
    snprintf(err, errlen, "out of memory");
    goto fail;
  }
  r = -EINVAL;
  if (!header_ok(u->header)) {
    snprintf(err, errlen, "api_key_header '%s': must be lowercase letters, "
             "digits, '-', '_' or '.', not a reserved name", u->header);
    goto fail;
  }
  if (u->mode != UPSTREAM_UNARY && !*u->stream_method) {
    snprintf(err, errlen, "mode %s needs a stream method path",
             upstream_mode_name(u->mode));
    goto fail;
  }
  if (!*u->method && u->mode == UPSTREAM_UNARY) {
    snprintf(err, errlen, "mode unary needs a method path");
    goto fail;
  }
  if (c->api_key_file && *c->api_key_file) {
    u->api_key = slurp(c->api_key_file, 1, UPSTREAM_MAX_KEY, "api_key_file",
                       err, errlen);
    if (!u->api_key) {
      r = -EACCES;
      goto fail;
    }
    n = strcspn(u->api_key, "\r\n");
    u->api_key[n] = '\0';
    u->api_key_len = n;
    if (n == 0) {
      snprintf(err, errlen, "api_key_file '%s' is empty", c->api_key_file);
      goto fail;
    }
  }
  if (c->insecure) {
    u->creds = grpc_insecure_credentials_create();
  } else {
    u->tls = 1;
    if (c->ca_file && *c->ca_file) {
      u->ca_pem = slurp(c->ca_file, 0, 1 << 20, "tls ca_file", err, errlen);
      if (!u->ca_pem) {
        r = -EACCES;
        goto fail;
      }
    }
    if ((c->cert_file && *c->cert_file) != (c->key_file && *c->key_file)) {
      snprintf(err, errlen, "tls: cert_file and key_file go together");
      goto fail;
    }
    if (c->cert_file && *c->cert_file) {
      u->cert_pem = slurp(c->cert_file, 0, 1 << 20, "tls cert_file", err,
                          errlen);
      u->key_pem = u->cert_pem ? slurp(c->key_file, 1, 1 << 20,
                                       "tls key_file", err, errlen)
                               : NULL;
      if (!u->key_pem) {
        r = -EACCES;
        goto fail;
      }
      pair.cert_chain = u->cert_pem;
      pair.private_key = u->key_pem;
    }
    u->creds = grpc_ssl_credentials_create(u->ca_pem,
                                           u->cert_pem ? &pair : NULL,
                                           NULL, NULL);
  }
  if (!u->creds) {
    snprintf(err, errlen, "cannot create the channel credentials");
    goto fail;
  }
  r = breaker_init(&u->breaker, &c->breaker);
  if (r < 0) {
    snprintf(err, errlen, "breaker parameters out of range");
    goto fail;
  }
  r = quota_init(&u->quota, &c->quota, c->state_dir, c->name, now_s(),
                 time(NULL), err, errlen);
  if (r < 0)
    goto fail;
  u->closing = 0;
  *ret = u;
  return 0;

fail:
  upstream__maybe_free(u);
  return r;
}

static void quota_final_flush(struct upstream *u);

void
upstream_free(struct upstream *u)
{
  if (!u || u->closing)
    return;
  u->closing = 1;
  /* The exact count, on a worker thread (the loop still runs: this is
     registry_stop()), now or once a reservation write in flight is done
     (two writers of one file). */
  quota_final_flush(u);
  upstream__attempts_cancel(u);
  upstream__probe_cancel(u);          /* its waiters fail on the next turn */
  upstream__sessions_close(u);
  upstream__maybe_free(u);
}

/* Log a change of the state file's health once, not every fetch. */
static void
persist_log(struct upstream *u)
{
  if (u->quota.persist_error != u->persist_logged) {
    if (u->quota.persist_error)
      log_warn("source '%s': cannot save the daily quota count in %s: %s "
               "(a restart would forget today's use)", u->name,
               u->quota.path, strerror(-u->quota.persist_error));
    else
      log_info("source '%s': daily quota count saved again", u->name);
    u->persist_logged = u->quota.persist_error;
  }
}

/* A reservation of the daily count, written (durably: fsync) on a
   worker thread, never on the loop. */
struct qwrite {
  uv_work_t work;
  struct upstream *u;
  const char *path;                   /* u's: u outlives the work */
  uint64_t value;
  size_t len;
  int r;
  char buf[QUOTA_STATE_MAX];
};

static void
qwrite_work(uv_work_t *w)
{
  struct qwrite *q = w->data;

  q->r = atomicfile_write(q->path, q->buf, q->len, 1);
}

static void qwrite_start(struct upstream *u);

static void
qwrite_done(uv_work_t *w, int status)
{
  struct qwrite *q = w->data;
  struct upstream *u = q->u;

  quota_persist_done(&u->quota, q->value, status < 0 ? status : q->r);
  free(q);
  u->live--;
  persist_log(u);
  if (u->closing)
    quota_final_flush(u);       /* if it waited for this write */
  else
    qwrite_start(u);
  upstream__maybe_free(u);
}

/* Write the state text buf on a worker thread; a failure to queue is
   reported as the write's. */
static void
qwrite_queue(struct upstream *u, const char *buf, size_t len, uint64_t value)
{
  struct qwrite *q;

  q = malloc(sizeof(*q));
  if (!q) {
    quota_persist_done(&u->quota, value, -ENOMEM);
    persist_log(u);
    return;
  }
  memcpy(q->buf, buf, len);
  q->len = len;
  q->value = value;
  q->u = u;
  q->work.data = q;
  q->path = u->quota.path;
  if (uv_queue_work(u->br->loop, &q->work, qwrite_work, qwrite_done) < 0) {
    quota_persist_done(&u->quota, q->value, -ENOMEM);
    persist_log(u);
    free(q);
    return;
  }
  u->live++;
}

static void
qwrite_start(struct upstream *u)
{
  char buf[QUOTA_STATE_MAX];
  uint64_t value;
  size_t len;

  /* Most admissions: nothing due, nothing allocated. */
  if (quota_persist_due(&u->quota, now_s(), time(NULL), buf, &len, &value))
    qwrite_queue(u, buf, len, value);
}

/* The exact daily count at shutdown: once, after any write in flight. */
static void
quota_final_flush(struct upstream *u)
{
  char buf[QUOTA_STATE_MAX];
  uint64_t value;
  size_t len;

  if (u->quota_flushed)
    return;
  if (!quota_flush_due(&u->quota, now_s(), time(NULL), buf, &len, &value))
    return;
  u->quota_flushed = 1;
  qwrite_queue(u, buf, len, value);
}

enum quota_verdict
upstream_admit(struct upstream *u, size_t n)
{
  enum quota_verdict v = quota_admit(&u->quota, n, now_s(), time(NULL));

  if (v == QUOTA_OK)
    qwrite_start(u);
  persist_log(u);
  return v;
}

void
upstream_quota_reset(struct upstream *u)
{
  quota_reset(&u->quota, time(NULL));
  qwrite_start(u);
  persist_log(u);
}

void
upstream_take_use(struct upstream *dst, struct upstream *src)
{
  quota_take_use(&dst->quota, &src->quota, now_s());
  /* src's count is dst's now, and dst writes it: src's last write at
     its close would put back a smaller one */
  src->quota_flushed = 1;
  qwrite_start(dst);
  persist_log(dst);
}

int
upstream_set_quota(struct upstream *u, const struct quota_params *p)
{
  return quota_set_params(&u->quota, p);
}

int
upstream_draws_unsupported(const struct upstream *u)
{
  return u->draw_unimplemented_at &&
         upstream__now_ns() - u->draw_unimplemented_at < 60ull * 1000000000;
}

int
upstream_blocking(const struct upstream *u)
{
  return breaker_is_blocking(&u->breaker, now_s());
}

void
upstream_stats(struct upstream *u, struct upstream_stats *st)
{
  memset(st, 0, sizeof(*st));
  st->breaker_state = breaker_state_name(&u->breaker, now_s());
  st->p99_ms = u->breaker.p99_ms;
  st->timeout_ms = breaker_timeout_ms(&u->breaker);
  st->consecutive_failures = u->breaker.consecutive_failures;
  st->breaker_opened = u->breaker.opened_total;
  st->latency_samples = (uint32_t)u->breaker.count;
  st->calls = u->calls;
  st->failures = u->failures;
  st->timeouts = u->timeouts;
  st->echo_failures = u->echo_failures;
  st->validation_failures = u->validation_failures;
  st->channel_resets = u->resets;
  st->stream_violations = u->stream_violations;
  st->quarantined = upstream_distrusted(u, NULL, 0);
  st->preprobes = u->probes;
  st->preprobe_failures = u->probe_failures;
  st->quota_minute_requests = quota_minute_requests(&u->quota, now_s());
  st->quota_day_bytes = quota_day_bytes(&u->quota, time(NULL));
  st->quota_refused_rpm = u->quota.refused_rpm;
  st->quota_refused_day = u->quota.refused_day;
  st->quota_rpm_limit = u->quota.p.max_requests_per_minute;
  st->quota_day_limit = u->quota.p.max_bytes_per_day;
  st->authenticated = u->api_key != NULL;
  st->tls = u->tls;
  st->mode = upstream_mode_name(u->mode);
  st->target = u->target;
}
