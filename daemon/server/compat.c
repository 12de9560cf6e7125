/* The gRPC compatibility endpoint; see compat.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>

#include <grpc/grpc.h>

#include "amplify.h"
#include "server/compat.h"
#include "grpc/gbridge.h"
#include "grpc/gserve.h"
#include "base/log.h"
#include "server/sockfile.h"
#include "timestamp.h"

struct compat {
  const struct qrsd_conf *conf;
  struct registry *reg;
  struct gserve *g;
  struct amp_params amp;
  struct log_ratelimit rl_denied;
};

/* One request in flight through the registry. */
struct pending {
  struct compat *c;
  struct gserve_req *r;
  size_t n;
};

static void
on_fetched(void *ctx, const struct reg_result *res)
{
  struct pending *p = ctx;
  struct gserve_req *r = p->r;
  char why[200];

  if (res->status < 0) {
    snprintf(why, sizeof(why), "source '%s': %s", res->source, res->why);
    gserve_reply_error(r, GRPC_STATUS_UNAVAILABLE, why);
  } else if (!r->draw) {
    struct gw_entropy_resp m;

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
    } else {
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
  free(p);
}

/* A draw's source_id names grpc_compat.source, or none ("").  Only that
   source is served: a client of this endpoint, local and unauthenticated,
   must not spend another source's quota (issue 26 item 2). */
static int
source_allowed(const struct compat *c, const struct gserve_req *r)
{
  size_t len;

  len = r->drw.source_id.len;
  return len == 0 || (len == strlen(c->conf->compat_source) &&
                      !memcmp(r->source_id, c->conf->compat_source, len));
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
  snprintf(why, sizeof(why), "source '%s%s' is not served here (this "
           "endpoint serves only '%s')", name,
           r->drw.source_id.len > i ? "..." : "", c->conf->compat_source);
  log_limited_ev(&c->rl_denied, LOG_LEVEL_WARN,
                 &(struct log_fields){ .event = "compat-denied",
                                       .source = name },
                 "gRPC compat: draw refused: %s", why);
  gserve_reply_error(r, GRPC_STATUS_PERMISSION_DENIED, why);
}

static void
on_request(void *ctx, struct gserve_req *r)
{
  struct compat *c = ctx;
  struct pending *p;
  const char *source = c->conf->compat_source;
  uint64_t n, nonce;
  char why[160];
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
  p->c = c;
  p->r = r;
  p->n = (size_t)n;
  deadline = mono_now_ns() +
             (int64_t)c->conf->request_timeout_ms * 1000000;
  e = registry_fetch(c->reg, source, p->n, nonce & INT64_MAX, deadline,
                     on_fetched, p);
  if (e < 0) {
    free(p);
    snprintf(why, sizeof(why), "cannot fetch: %s", strerror(-e));
    gserve_reply_error(r, e == -EBUSY ? GRPC_STATUS_RESOURCE_EXHAUSTED :
                       GRPC_STATUS_UNAVAILABLE, why);
  }
}

int
compat_start(uv_loop_t *loop, const struct qrsd_conf *conf,
             struct registry *reg, struct compat **ret, char *err,
             size_t errlen)
{
  struct gserve_conf gc;
  struct gserve_backend be;
  struct gbridge *br;
  struct compat *c;
  char why[300], dir_why[300];
  const char *path;
  mode_t old_umask;
  int r, port;

  *ret = NULL;
  if (!conf->compat_listen || !*conf->compat_listen)
    return 0;
  c = calloc(1, sizeof(*c));
  if (!c)
    return -ENOMEM;
  c->conf = conf;
  c->reg = reg;
  c->amp.population_mean = conf->amp_population_mean;
  c->amp.population_std = conf->amp_population_std;
  c->amp.epsilon = conf->amp_epsilon;
  br = gbridge_shared_get(loop);
  if (!br) {
    free(c);
    snprintf(err, errlen, "grpc_compat: cannot start gRPC");
    return -ENOMEM;
  }
  memset(&gc, 0, sizeof(gc));
  gc.listen = conf->compat_listen;
  be.ctx = c;
  be.request = on_request;
  old_umask = 0;
  path = strncmp(conf->compat_listen, "unix:", 5) == 0 ?
         conf->compat_listen + 5 : NULL;
  /* A unix socket is born with its final mode, as the main socket is
     (server.c): gRPC binds it here, and a chmod by path afterwards would
     follow a symlink put in its place. */
  if (path)
    old_umask = umask(0777 & ~(mode_t)conf->compat_socket_mode);
  r = gserve_start(br, &gc, &be, &c->g, &port, why, sizeof(why));
  if (path)
    umask(old_umask);
  if (r < 0) {
    /* gRPC gives no errno: the directory may say what went wrong. */
    if (path && sockfile_dir_problem(path, dir_why, sizeof(dir_why)))
      snprintf(err, errlen, "grpc_compat: cannot bind %s: %s", path,
               dir_why);
    else
      snprintf(err, errlen, "grpc_compat: %s", why);
    gbridge_shared_put();
    free(c);
    return r;
  }
  if (path)
    sockfile_apply_group(path, conf->compat_socket_group);
  if (strncmp(conf->compat_listen, "unix:", 5) == 0)
    log_info("gRPC compat endpoint on %s (source '%s')",
             conf->compat_listen, conf->compat_source);
  else
    log_info("gRPC compat endpoint on %s, port %d (source '%s')",
             conf->compat_listen, port, conf->compat_source);
  *ret = c;
  return 0;
}

static void
on_stopped(void *arg)
{
  free(arg);
  gbridge_shared_put();
}

void
compat_stop(struct compat *c)
{
  if (!c)
    return;
  gserve_stop(c->g, on_stopped, c);
}
