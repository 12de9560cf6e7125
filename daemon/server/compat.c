/* The gRPC compatibility endpoint; see compat.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>

#include <grpc/grpc.h>

#include "amplify.h"
#include "server/compat.h"
#include "grpc/gbridge.h"
#include "grpc/gserve.h"
#include "base/log.h"
#include "persist/journal.h"
#include "qrs_ipc.pb-c.h"
#include "server/apikeys.h"
#include "server/compat_gate.h"
#include "server/sockfile.h"
#include "server/statuspub.h"
#include "strcopy.h"
#include "timestamp.h"

struct compat {
  const struct qrsd_conf *conf;
  struct registry *reg;
  struct gserve *g;
  struct gate *gate;                /* the listener, in front of g */
  char *inner_path;                 /* g's private socket: DIR/sockN */
  unsigned gen;                     /* N, 0 or 1: gRPC started again */
  struct gbridge *br;
  struct gserve_conf gc;            /* to start gRPC again */
  struct gserve_backend be;
  char inner_url[140];              /* gc.listen: unix:inner_path */
  int servers;                      /* gserve objects not yet freed */
  struct apikeys *keys;             /* NULL: no keys required */
  struct statuspub *sp;             /* shows the keys' use */
  struct journal *journal;          /* the draw journal, NULL: none */
  struct amp_params amp;
  struct log_ratelimit rl_denied, rl_unauth;
  uint64_t unauthenticated;         /* calls refused: no or unknown key */
};

/* One request in flight through the registry. */
struct pending {
  struct compat *c;
  struct gserve_req *r;
  struct apikey *key;               /* its in-flight slot, or NULL */
  size_t n;
};

/* The draw journal's entry for what r is answered with, as for a local
   draw but from no local process (pid 0, uid 4294967295) and with
   ",via=grpc" ending its amplifier parameters: a draw (amp zscore_mean,
   u) or a byte block (amp "bytes", u NaN).  0: answer r; -1: r was
   refused (the journal cannot take the entry, journal.on_error stop). */
static int
journal_served(struct compat *c, struct gserve_req *r,
               const struct reg_result *res, double u)
{
  struct journal_entry je;
  struct timespec now;
  int e;

  if (!c->journal)
    return 0;
  memset(&je, 0, sizeof(je));
  je.uid = UINT32_MAX;
  str_copy(je.source, sizeof(je.source), res->served_by);
  if (r->draw) {
    str_copy(je.amp, sizeof(je.amp), "zscore_mean");
    snprintf(je.amp_params, sizeof(je.amp_params), "n=%zu,mean=%.17g,"
             "std=%.17g,via=grpc", res->n, c->amp.population_mean,
             c->amp.population_std);
    je.nonce = r->drw.sequence_id;
  } else {
    str_copy(je.amp, sizeof(je.amp), "bytes");
    snprintf(je.amp_params, sizeof(je.amp_params), "n=%zu,via=grpc",
             res->n);
    je.nonce = r->entropy.sequence_id;
  }
  je.echo_ok = res->echo == QRS_IPC__ECHO__ECHO_VERIFIED;
  je.t_recv = (double)r->received_ns / 1e9;
  je.t_gen = (double)res->generated.realtime_ns / 1e9;
  clock_gettime(CLOCK_REALTIME, &now);
  je.t_sent = (double)now.tv_sec + (double)now.tv_nsec / 1e9;
  je.u = u;
  if (res->fallback)
    str_copy(je.fallback, sizeof(je.fallback), res->served_by);
  e = journal_submit_bytes(c->journal, &je, res->data, res->n);
  if (e == 0 || journal_serves_unjournalled(c->journal))
    return 0;
  gserve_reply_error(r, GRPC_STATUS_UNAVAILABLE, e == -EAGAIN ?
                     "the draw journal cannot take the draw (queue full); "
                     "journal.on_error is stop" : "the draw journal cannot "
                     "take the draw (write error); journal.on_error is "
                     "stop");
  return -1;
}

static void
on_fetched(void *ctx, const struct reg_result *res)
{
  struct pending *p = ctx;
  struct gserve_req *r = p->r;
  char why[200];

  if (p->key) {
    apikey_release(p->key);
    statuspub_touch(p->c->sp);
  }
  if (res->status < 0) {
    snprintf(why, sizeof(why), "source '%s': %s", res->source, res->why);
    gserve_reply_error(r, GRPC_STATUS_UNAVAILABLE, why);
  } else if (!r->draw) {
    struct gw_entropy_resp m;

    if (journal_served(p->c, r, res, NAN) != 0)
      goto out;
    memset(&m, 0, sizeof(m));
    m.data.data = res->data;
    m.data.len = res->n;
    m.sequence_id = r->entropy.sequence_id;
    m.generation_timestamp_ns = (uint64_t)res->generated.realtime_ns;
    m.device_id.data = (const uint8_t *)res->served_by;
    m.device_id.len = strlen(res->served_by);
    gserve_reply_entropy(r, &m);
  } else {
    struct gw_draw_resp m;
    struct amp_result a;

    memset(&m, 0, sizeof(m));
    if (amp_zscore_mean(&p->c->amp, res->data, res->n, &a) < 0) {
      gserve_reply_error(r, GRPC_STATUS_INTERNAL, "amplifier failed");
    } else if (journal_served(p->c, r, res, a.u) == 0) {
      m.u = a.u;
      m.z = a.z;
      m.sequence_id = r->drw.sequence_id;
      m.generation_timestamp_ns = (uint64_t)res->generated.realtime_ns;
      m.source_id.data = (const uint8_t *)res->served_by;
      m.source_id.len = strlen(res->served_by);
      m.purity_label.data = (const uint8_t *)(res->fallback ? "fallback" :
                                              res->served_type);
      m.purity_label.len = strlen((const char *)m.purity_label.data);
      m.integrated_bytes = res->n;
      m.integrator.data = (const uint8_t *)"zscore_mean";
      m.integrator.len = strlen("zscore_mean");
      gserve_reply_draw(r, &m);
    }
  }
out:
  free(p);
}

/* The source a request draws from: a draw's source_id, or (none, or an
   EntropyRequest) grpc_compat.source. */
static const char *
req_source(const struct compat *c, const struct gserve_req *r)
{
  return r->draw && r->drw.source_id.len ? r->source_id :
         c->conf->compat_source;
}

/* Without api keys only grpc_compat.source is served: a client of this
   endpoint, local and unauthenticated, must not spend another source's
   quota.  With keys, each key's sources (by default
   that one). */
static int
source_allowed(const struct compat *c, const struct gserve_req *r)
{
  const char *src = req_source(c, r);

  if (strlen(src) != (r->draw && r->drw.source_id.len ?
                      r->drw.source_id.len : strlen(src)))
    return 0;                       /* a NUL inside the name */
  if (r->principal)
    return apikey_source_ok(r->principal, src, c->conf->compat_source);
  return strcmp(src, c->conf->compat_source) == 0;
}

/* Refuse r, naming the source it asked for (made printable: it is the
   client's). */
static void
deny_source(struct compat *c, struct gserve_req *r)
{
  char name[65], why[200];
  unsigned char u;
  size_t i;

  for (i = 0; i < r->drw.source_id.len && i < sizeof(name) - 1; i++) {
    u = (unsigned char)r->source_id[i];
    name[i] = u < 0x20 || u >= 0x7f ? '?' : (char)u;
  }
  name[i] = '\0';
  if (r->principal) {
    ((struct apikey *)r->principal)->refused_source++;
    snprintf(why, sizeof(why), "source '%s%s' is not allowed for api key "
             "'%s'", name, r->drw.source_id.len > i ? "..." : "",
             ((struct apikey *)r->principal)->name);
  } else {
    snprintf(why, sizeof(why), "source '%s%s' is not served here (this "
             "endpoint serves only '%s')", name,
             r->drw.source_id.len > i ? "..." : "", c->conf->compat_source);
  }
  log_limited_ev(&c->rl_denied, LOG_LEVEL_WARN,
                 &(struct log_fields){ .event = "compat-denied",
                                       .source = name },
                 "gRPC compat: draw refused: %s", why);
  gserve_reply_error(r, GRPC_STATUS_PERMISSION_DENIED, why);
}

static void
handle_request(void *ctx, struct gserve_req *r)
{
  struct compat *c = ctx;
  struct pending *p;
  const char *source = req_source(c, r);
  uint64_t n, nonce;
  char why[300];
  int64_t deadline;
  int e;

  if (r->draw) {
    n = r->drw.block_bytes ? r->drw.block_bytes : c->conf->amp_sample_count;
    nonce = r->drw.sequence_id;
    if (!source_allowed(c, r)) {
      deny_source(c, r);
      return;
    }
  } else {
    n = r->entropy.bytes_needed;
    nonce = r->entropy.sequence_id;
  }
  if (n == 0 || n > c->conf->max_sample_count) {
    snprintf(why, sizeof(why), "%s must be 1 .. %u",
             r->draw ? "block_bytes" : "bytes_needed",
             c->conf->max_sample_count);
    gserve_reply_error(r, n == 0 ? GRPC_STATUS_INVALID_ARGUMENT :
                       GRPC_STATUS_OUT_OF_RANGE, why);
    return;
  }
  p = calloc(1, sizeof(*p));
  if (!p) {
    gserve_reply_error(r, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  if (r->principal && apikey_admit(r->principal, (size_t)n, why,
                                   sizeof(why)) < 0) {
    free(p);
    gserve_reply_error(r, GRPC_STATUS_RESOURCE_EXHAUSTED, why);
    return;
  }
  p->c = c;
  p->r = r;
  p->key = r->principal;
  p->n = (size_t)n;
  deadline = mono_now_ns() +
             (int64_t)c->conf->request_timeout_ms * 1000000;
  e = registry_fetch(c->reg, source, p->n, nonce & INT64_MAX, deadline,
                     on_fetched, p);
  if (e < 0) {
    if (p->key)
      apikey_release(p->key);
    free(p);
    snprintf(why, sizeof(why), "cannot fetch: %s", strerror(-e));
    gserve_reply_error(r, e == -EBUSY ? GRPC_STATUS_RESOURCE_EXHAUSTED :
                       GRPC_STATUS_UNAVAILABLE, why);
  }
}

/* Every request of a key changes its use in the status file. */
static void
on_request(void *ctx, struct gserve_req *r)
{
  struct compat *c = ctx;
  int keyed = r->principal != NULL;

  handle_request(ctx, r);
  if (keyed)
    statuspub_touch(c->sp);
}

/* A call arrives: with api keys, its key must be known (and a stream
   within the key's share). */
static int
on_call_begin(void *ctx, const uint8_t *key, size_t len, int stream,
              void **principal, char *why, size_t whylen)
{
  struct compat *c = ctx;
  struct apikey *k;

  *principal = NULL;
  if (!c->keys)
    return 0;
  k = key ? apikeys_find(c->keys, key, len) : NULL;
  if (!k) {
    c->unauthenticated++;
    /* never the key itself, not even a part */
    log_limited(&c->rl_unauth, LOG_LEVEL_WARN, "gRPC compat: call refused: "
                "%s api key (%" PRIu64 " refused so far)", key ? "unknown" :
                "no", c->unauthenticated);
    snprintf(why, whylen, "%s api key (metadata '%s')", key ? "unknown" :
             "missing", c->conf->compat_api_key_header);
    return GRPC_STATUS_UNAUTHENTICATED;
  }
  if (stream && apikey_stream_open(k, why, whylen) < 0)
    return GRPC_STATUS_RESOURCE_EXHAUSTED;
  *principal = k;
  return 0;
}

static void
on_call_end(void *ctx, void *principal, int stream)
{
  struct compat *c = ctx;

  if (principal && stream) {
    apikey_stream_close(principal);
    statuspub_touch(c->sp);
  }
}

/* The status file's "api_keys": each key's use, by name. */
static json_object *
status_json(void *ctx)
{
  struct compat *c = ctx;

  return apikeys_status_json(c->keys);
}

/* The directory of the private socket at path: made (mode 0700) or, if
   there, a directory of ours, not a link, given mode 0700.  0, or a
   negative errno with why filled in. */
static int
private_dir(const char *path, char *why, size_t whylen)
{
  char dir[128];
  struct stat st;
  char *slash;
  int fd, r;

  snprintf(dir, sizeof(dir), "%s", path);
  slash = strrchr(dir, '/');
  if (slash)
    *slash = '\0';
  if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
    r = -errno;
    snprintf(why, whylen, "cannot make %s: %s", dir, strerror(errno));
    return r;
  }
  fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    r = -errno;
    snprintf(why, whylen, "cannot open %s: %s", dir, strerror(errno));
    return r;
  }
  r = 0;
  if (fstat(fd, &st) < 0 || st.st_uid != geteuid()) {
    r = -EPERM;
    snprintf(why, whylen, "%s is not qrsd's own directory", dir);
  } else if ((st.st_mode & 0777) != 0700 && fchmod(fd, 0700) < 0) {
    r = -errno;
    snprintf(why, whylen, "cannot make %s private: %s", dir,
             strerror(errno));
  }
  close(fd);
  return r;
}

static int
header_ok(const char *h)
{
  size_t n = strlen(h);

  return n > 0 && strspn(h, "abcdefghijklmnopqrstuvwxyz0123456789-_.") == n &&
         strncmp(h, "grpc-", 5) != 0;
}

static void
compat_free(struct compat *c)
{
  apikeys_free(c->keys);
  free(c->inner_path);
  free(c);
}

/* A gserve is gone: the last one frees c (compat_stop has run). */
static void
on_stopped(void *arg)
{
  struct compat *c = arg;

  if (--c->servers > 0)
    return;
  compat_free(c);
  gbridge_shared_put();
}

/* gRPC's private socket for generation gen: DIR/sock0 or DIR/sock1 (a
   gRPC server being stopped may remove its own path late). */
static void
set_inner(struct compat *c)
{
  char *slash = strrchr(c->inner_path, '/');

  slash[5] = (char)('0' + c->gen);  /* "/sockN" */
  snprintf(c->inner_url, sizeof(c->inner_url), "unix:%s", c->inner_path);
}

/* The gate saw gRPC accept nothing (after an accept error gRPC 1.51
   drops its listener for good): start a new gRPC server on the other
   path, relay new connections there, and stop the old one. */
static void
on_stall(void *ctx)
{
  struct compat *c = ctx;
  struct gserve *g;
  char why[300];
  int r;

  if (c->servers > 1)
    return;                         /* the last restart is still ending */
  c->gen ^= 1;
  set_inner(c);
  r = gserve_start(c->br, &c->gc, &c->be, &g, NULL, why, sizeof(why));
  if (r == 0) {
    r = gate_set_inner(c->gate, c->inner_path);
    if (r < 0) {
      gserve_stop(g, NULL, NULL);
      snprintf(why, sizeof(why), "out of memory");
    }
  }
  if (r < 0) {
    log_err("gRPC compat: cannot start gRPC again on %s: %s", c->inner_path,
            why);
    c->gen ^= 1;
    set_inner(c);
    return;
  }
  log_warn("gRPC compat: gRPC started again on %s", c->inner_path);
  c->servers++;
  gserve_stop(c->g, on_stopped, c);
  c->g = g;
}

int
compat_start(uv_loop_t *loop, const struct qrsd_conf *conf,
             struct registry *reg, struct journal *journal,
             struct statuspub *sp, struct compat **ret, char *err,
             size_t errlen)
{
  struct gserve_conf gc;
  struct gate_conf gt;
  struct gserve_backend be;
  struct gbridge *br;
  struct compat *c;
  char why[300], dir_why[300];
  const char *path;
  int r, port;

  *ret = NULL;
  if (!conf->compat_listen || !*conf->compat_listen)
    return 0;
  c = calloc(1, sizeof(*c));
  if (!c)
    return -ENOMEM;
  c->conf = conf;
  c->reg = reg;
  c->journal = journal;
  c->amp.population_mean = conf->amp_population_mean;
  c->amp.population_std = conf->amp_population_std;
  c->amp.epsilon = conf->amp_epsilon;
  if (!header_ok(conf->compat_api_key_header)) {
    snprintf(err, errlen, "grpc_compat.api_key_header '%s': must be "
             "lowercase letters, digits, '-', '_' or '.', not grpc-*",
             conf->compat_api_key_header);
    free(c);
    return -EINVAL;
  }
  if (*conf->compat_api_keys) {
    r = apikeys_load(loop, conf->compat_api_keys, conf->state_dir, &c->keys,
                     why, sizeof(why));
    if (r < 0) {
      snprintf(err, errlen, "grpc_compat.%s", why);
      free(c);
      return r;
    }
  }
  br = gbridge_shared_get(loop);
  if (!br) {
    compat_free(c);
    snprintf(err, errlen, "grpc_compat: cannot start gRPC");
    return -ENOMEM;
  }
  /* gRPC listens only on a private socket, in a directory of state_dir
     that only qrsd's user may enter; the gate listens on
     grpc_compat.listen and relays what it admits (compat_gate.h says
     why). */
  if (asprintf(&c->inner_path, "%s/compat-grpc/sock0", conf->state_dir) < 0) {
    c->inner_path = NULL;
    r = -ENOMEM;
    snprintf(err, errlen, "grpc_compat: out of memory");
    goto fail;
  }
  if (strlen(c->inner_path) >= 108) {
    r = -ENAMETOOLONG;
    snprintf(err, errlen, "grpc_compat: state_dir '%s' is too long for "
             "its private socket (%s, at most 107 bytes)", conf->state_dir,
             c->inner_path);
    goto fail;
  }
  r = private_dir(c->inner_path, why, sizeof(why));
  if (r < 0) {
    snprintf(err, errlen, "grpc_compat: %s", why);
    goto fail;
  }
  memset(&gc, 0, sizeof(gc));
  set_inner(c);
  gc.listen = c->inner_url;
  gc.api_key_header = conf->compat_api_key_header;
  gc.handshake_timeout_ms = (int)conf->compat_handshake_timeout_ms;
  gc.idle_timeout_ms = (int)conf->compat_idle_timeout_ms;
  if (*conf->compat_tls_cert) {
    gc.tls_cert = conf->compat_tls_cert;
    gc.tls_key = conf->compat_tls_key;
    gc.tls_client_ca = *conf->compat_tls_client_ca ?
                       conf->compat_tls_client_ca : NULL;
  }
  memset(&be, 0, sizeof(be));
  be.ctx = c;
  be.request = on_request;
  be.call_begin = on_call_begin;
  be.call_end = on_call_end;
  c->br = br;
  c->gc = gc;
  c->be = be;
  r = gserve_start(br, &gc, &be, &c->g, NULL, why, sizeof(why));
  if (r < 0) {
    if (sockfile_dir_problem(c->inner_path, dir_why, sizeof(dir_why)))
      snprintf(err, errlen, "grpc_compat: cannot bind %s: %s",
               c->inner_path, dir_why);
    else
      snprintf(err, errlen, "grpc_compat: %s", why);
    goto fail;
  }
  memset(&gt, 0, sizeof(gt));
  gt.listen = conf->compat_listen;
  gt.inner_path = c->inner_path;
  gt.socket_mode = conf->compat_socket_mode;
  gt.max_conns = conf->compat_max_connections;
  gt.max_per_peer = conf->compat_max_per_peer;
  /* what the main socket may need: as main.c's check of RLIMIT_NOFILE */
  gt.fd_reserve = conf->max_connections + 128 + (unsigned)conf->n_sources;
  gt.stall_ms = conf->compat_handshake_timeout_ms;
  gt.on_stall = on_stall;
  gt.ctx = c;
  c->servers = 1;
  r = gate_start(loop, &gt, &c->gate, &port, why, sizeof(why));
  if (r < 0) {
    snprintf(err, errlen, "grpc_compat: %s", why);
    gserve_stop(c->g, on_stopped, c);
    return r;
  }
  path = strncmp(conf->compat_listen, "unix:", 5) == 0 ?
         conf->compat_listen + 5 : NULL;
  if (path)
    sockfile_apply_group(path, conf->compat_socket_group);
  if (c->keys && sp) {
    c->sp = sp;
    sp->extra_json = status_json;
    sp->extra_ctx = c;
  }
  if (strncmp(conf->compat_listen, "unix:", 5) == 0)
    log_info("gRPC compat endpoint on %s (source '%s'%s%s)",
             conf->compat_listen, conf->compat_source,
             gc.tls_cert ? ", TLS" : "", c->keys ? ", api keys" : "");
  else
    log_info("gRPC compat endpoint on %s, port %d (source '%s'%s%s%s)",
             conf->compat_listen, port, conf->compat_source,
             gc.tls_cert ? ", TLS" : "", gc.tls_client_ca ?
             ", client certificates required" : "",
             c->keys ? ", api keys" : "");
  *ret = c;
  return 0;

fail:
  gbridge_shared_put();
  compat_free(c);
  return r;
}

int
compat_degraded(const struct compat *c, char *why, size_t whylen)
{
  return c ? gate_degraded(c->gate, why, whylen) : 0;
}

void
compat_figures(const struct compat *c, struct gate_stats *st)
{
  gate_stats(c ? c->gate : NULL, st);
}

void
compat_stop(struct compat *c)
{
  if (!c)
    return;
  if (c->sp) {
    c->sp->extra_json = NULL;
    c->sp->extra_ctx = NULL;
  }
  gate_stop(c->gate);
  c->gate = NULL;
  gserve_stop(c->g, on_stopped, c);
}
