/* The grpc source: an upstream QRNG over gRPC (daemon/grpc/upstream.c does the
   work).  Fetches complete on the loop through the daemon's shared gRPC
   bridge; admission says no while the circuit breaker is open or a quota
   is used up, so the registry serves the request from the fallback,
   labelled as such.  The api key never appears in anything this file
   writes.

   An upstream's bytes are supposed to be full entropy: they go through
   the SP 800-90B health tests of the local sources (stats/health.h) at
   the min-entropy the source claims (min_entropy, default 8 bits per
   byte; 0: no tests).  A fetch whose bytes fail them fails (its fallback
   serves it, labelled); after that the source refuses fetches and draws
   until a re-test passes: once a second at most, one fetch asks for
   1,024 bytes more, which must pass the start-up test and are never
   served.  The first 1,024 bytes after start are tested like any others
   and served when they pass (a start-up test of bytes thrown away would
   cost every start a request's worth of quota); a stuck or constant
   upstream fails the repetition count test within 5 bytes at 8 bits per
   byte. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc/gbridge.h"
#include "base/log.h"
#include "sources/source.h"
#include "stats/health.h"
#include "grpc/upstream.h"

/* Re-test a failed upstream at most this often. */
#define RETEST_EVERY_NS 1000000000ull

struct gsrc {
  struct upstream *up;
  int bridged;                  /* holds a reference on the shared bridge */
  char target[256];
  char mode[32];
  int tls, key;
  int tested;                   /* health tests on (min_entropy > 0) */
  struct health health;
  uint64_t retest_ns;           /* hrtime of the next re-test allowed */
};

static int
grpc_open(struct source *s, const struct conf_source *cs, char *err,
          size_t errlen)
{
  const struct conf_grpc *g = &cs->grpc;
  struct upstream_conf uc;
  struct gbridge *br;
  struct gsrc *gs;
  char why[300];
  int r, mode;

  if (!s->loop) {
    snprintf(err, errlen, "source '%s': a grpc source needs the event loop",
             cs->name);
    return -EINVAL;
  }
  mode = upstream_mode_parse(g->mode);
  if (mode < 0) {
    snprintf(err, errlen, "source '%s': unknown mode '%s'", cs->name,
             g->mode);
    return -EINVAL;
  }
  gs = calloc(1, sizeof(*gs));
  if (!gs)
    return -ENOMEM;
  br = gbridge_shared_get(s->loop);
  if (!br) {
    free(gs);
    snprintf(err, errlen, "source '%s': cannot start gRPC", cs->name);
    return -ENOMEM;
  }
  gs->bridged = 1;
  memset(&uc, 0, sizeof(uc));
  uc.name = cs->name;
  uc.target = g->target;
  uc.mode = (enum upstream_mode)mode;
  uc.method = g->method;
  uc.stream_method = g->stream_method;
  uc.draw_method = g->draw_method;
  uc.draw_stream_method = g->draw_stream_method;
  uc.insecure = g->insecure;
  uc.ca_file = g->ca_file;
  uc.cert_file = g->cert_file;
  uc.key_file = g->key_file;
  uc.server_name = g->server_name;
  uc.api_key_file = g->api_key_file;
  uc.api_key_header = g->api_key_header;
  uc.timeout_ms = g->timeout_ms;
  uc.retry_count = g->retry_count;
  uc.check_echo = g->check_echo;
  uc.preprobe = g->preprobe;
  uc.breaker.window_size = g->cb_window_size;
  uc.breaker.min_timeout_ms = g->cb_min_timeout_ms;
  uc.breaker.timeout_multiplier = g->cb_timeout_multiplier;
  uc.breaker.max_timeout_ms = g->timeout_ms;
  uc.breaker.recovery_window_s = g->cb_recovery_window_s;
  uc.breaker.recovery_window_max_s = g->cb_recovery_window_max_s;
  uc.breaker.max_consecutive_failures = g->cb_max_consecutive_failures;
  uc.quota.max_bytes_per_request = g->max_bytes_per_request;
  uc.quota.max_requests_per_minute = g->max_requests_per_minute;
  uc.quota.max_bytes_per_day = g->max_bytes_per_day;
  uc.state_dir = g->state_dir;
  r = upstream_new(br, &uc, &gs->up, why, sizeof(why));
  if (r < 0) {
    snprintf(err, errlen, "source '%s': %s", cs->name, why);
    gbridge_shared_put();
    free(gs);
    return r;
  }
  if (cs->min_entropy > 0) {
    r = health_init(&gs->health, ldexp(1.0, -(int)cs->health_alpha_exp),
                    cs->min_entropy, 0);
    if (r < 0) {
      snprintf(err, errlen, "source '%s': bad health-test parameters",
               cs->name);
      upstream_free(gs->up);
      gbridge_shared_put();
      free(gs);
      return r;
    }
    gs->tested = 1;
  }
  snprintf(gs->target, sizeof(gs->target), "%s", g->target);
  snprintf(gs->mode, sizeof(gs->mode), "%s", g->mode);
  gs->tls = !g->insecure;
  gs->key = *g->api_key_file != '\0';
  s->priv = gs;
  s->inline_max = 0;
  return 0;
}

/* The health tests failed and no re-test is due: 1 with why. */
static int
unhealthy(struct gsrc *gs, char *why, size_t len)
{
  if (!gs->tested || gs->health.state != HEALTH_FAILED)
    return 0;
  if (uv_hrtime() >= gs->retest_ns)
    return 0;
  snprintf(why, len, "unhealthy, re-testing: %.130s", gs->health.reason);
  return 1;
}

/* The health tests on a fetch's reply: first the prefix bytes of a
   re-test (never served), then the n to serve.  0, or -EIO with why. */
static int
test_reply(struct source *s, const uint8_t *data, size_t prefix, size_t n,
           char *why, size_t len)
{
  struct gsrc *gs = s->priv;
  struct health *h = &gs->health;

  if (!gs->tested)
    return 0;
  if (prefix) {
    health_retest(h);
    if (health_feed(h, data, prefix) < 0) {
      snprintf(why, len, "health re-test failed: %.130s", h->reason);
      return -EIO;
    }
    log_info("source '%s': the upstream's bytes pass the health tests "
             "again", s->name);
  }
  if (h->state == HEALTH_FAILED) {
    snprintf(why, len, "unhealthy: %.130s", h->reason);
    return -EIO;
  }
  if (health_feed(h, data + prefix, n) < 0) {
    log_warn("source '%s': the upstream's bytes failed a health test "
             "(served by the fallback until a re-test passes): %s",
             s->name, h->reason);
    snprintf(why, len, "health test failed: %.130s", h->reason);
    return -EIO;
  }
  return 0;
}

static void
on_fetched(void *arg, const struct upstream_result *res)
{
  struct source_fetch *f = arg;
  size_t prefix;

  if (res->err == 0) {
    prefix = res->len - f->n;         /* a re-test's bytes come first */
    if (test_reply(f->src, res->data, prefix, f->n, f->why,
                   sizeof(f->why)) < 0) {
      source_fetch_complete(f, -EIO);
      return;
    }
    memcpy(f->buf, res->data + prefix, f->n);
    ts_now(&f->generated);
    f->echo = res->echo;
    source_fetch_complete(f, 0);
    return;
  }
  snprintf(f->why, sizeof(f->why), "%.159s", res->detail);
  source_fetch_complete(f, res->err);
}

static int
grpc_fetch(struct source *s, struct source_fetch *f)
{
  struct gsrc *gs = s->priv;

  size_t prefix = 0;

  if (!gs->up)
    return -ECANCELED;
  if (unhealthy(gs, f->why, sizeof(f->why)))
    return -EIO;
  if (gs->tested && gs->health.state == HEALTH_FAILED) {
    /* This fetch is the re-test: 1,024 bytes more, never served. */
    gs->retest_ns = uv_hrtime() + RETEST_EVERY_NS;
    if (upstream_admit(gs->up, HEALTH_STARTUP_SAMPLES) != QUOTA_OK) {
      snprintf(f->why, sizeof(f->why), "unhealthy, and no quota for a "
               "re-test: %.110s", gs->health.reason);
      return -EIO;
    }
    prefix = HEALTH_STARTUP_SAMPLES;
  }
  return upstream_fetch(gs->up, prefix + f->n, f->nonce, f->deadline_ns,
                        on_fetched, f);
}

static void
on_drawn(void *arg, const struct upstream_result *res)
{
  struct source_draw *d = arg;

  d->status = res->err;
  if (res->err == 0) {
    d->u = res->u;
    d->z = res->z;
    d->coherence_z = res->coherence_z;
    d->coherence_r = res->coherence_r;
    d->coherence_valid = res->coherence_valid;
    d->integrated_bytes = res->integrated_bytes;
    d->generation_timestamp_ns = res->generation_ns;
    snprintf(d->purity_label, sizeof(d->purity_label), "%s",
             res->purity_label);
    snprintf(d->integrator, sizeof(d->integrator), "%s", res->integrator);
    snprintf(d->served_source_id, sizeof(d->served_source_id), "%s",
             res->source_id);
    d->echo = res->echo;
    ts_now(&d->generated);
  } else {
    snprintf(d->why, sizeof(d->why), "%.159s", res->detail);
  }
  d->done(d);
}

static int
grpc_draw(struct source *s, struct source_draw *d)
{
  struct gsrc *gs = s->priv;

  if (!gs->up)
    return -ECANCELED;
  /* The bytes behind a server draw are the same upstream's. */
  if (gs->tested && gs->health.state == HEALTH_FAILED) {
    snprintf(d->why, sizeof(d->why), "unhealthy: %.130s", gs->health.reason);
    return -EIO;
  }
  if (upstream_draws_unsupported(gs->up)) {
    snprintf(d->why, sizeof(d->why), "the upstream has no PurityService");
    return -ENOSYS;
  }
  return upstream_draw(gs->up, d->nonce, d->source_id, d->block_bytes,
                       d->deadline_ns, on_drawn, d);
}

static int
grpc_admit(struct source *s, size_t n, char *why, size_t whylen)
{
  struct gsrc *gs = s->priv;
  enum quota_verdict v;

  if (!gs->up) {
    snprintf(why, whylen, "source stopping");
    return -ECANCELED;
  }
  if (upstream_distrusted(gs->up, why, whylen))
    return -EPROTO;
  if (upstream_blocking(gs->up)) {
    snprintf(why, whylen, "circuit breaker open");
    return -EAGAIN;
  }
  if (unhealthy(gs, why, whylen))
    return -EIO;
  v = upstream_admit(gs->up, n);
  if (v != QUOTA_OK) {
    snprintf(why, whylen, "over quota (%s)", quota_verdict_name(v));
    return -EDQUOT;
  }
  return 0;
}

static int
grpc_quota_reset(struct source *s, char *why, size_t whylen)
{
  struct gsrc *gs = s->priv;

  if (!gs->up) {
    snprintf(why, whylen, "source stopping");
    return -ECANCELED;
  }
  upstream_quota_reset(gs->up);
  return 0;
}

static int
grpc_set_quota(struct source *s, const struct conf_source *cs)
{
  struct quota_params p;
  struct gsrc *gs = s->priv;

  if (!gs->up)
    return -ECANCELED;
  memset(&p, 0, sizeof(p));
  p.max_bytes_per_request = cs->grpc.max_bytes_per_request;
  p.max_requests_per_minute = cs->grpc.max_requests_per_minute;
  p.max_bytes_per_day = cs->grpc.max_bytes_per_day;
  return upstream_set_quota(gs->up, &p);
}

static void
grpc_take_use(struct source *s, struct source *old)
{
  struct gsrc *gs = s->priv, *go = old->priv;

  if (gs && gs->up && go && go->up)
    upstream_take_use(gs->up, go->up);
}

static void
grpc_stop(struct source *s)
{
  struct gsrc *gs = s->priv;

  if (!gs || !gs->up)
    return;
  upstream_free(gs->up);
  gs->up = NULL;
  if (gs->bridged) {
    gbridge_shared_put();
    gs->bridged = 0;
  }
}

static void
grpc_close(struct source *s)
{
  grpc_stop(s);
  free(s->priv);
  s->priv = NULL;
}

static void
grpc_describe(const struct source *s, char *buf, size_t len)
{
  const struct gsrc *gs = s->priv;

  snprintf(buf, len, "grpc %s (%s, %s%s)", gs->target, gs->mode,
           gs->tls ? "TLS" : "plaintext", gs->key ? ", api key" : "");
}

static void
grpc_upstream_stats(struct source *s, struct upstream_stats *st)
{
  struct gsrc *gs = s->priv;

  if (gs && gs->up) {
    upstream_stats(gs->up, st);
    return;
  }
  memset(st, 0, sizeof(*st));
  st->breaker_state = "stopped";
  st->mode = gs ? gs->mode : "";
  st->target = gs ? gs->target : "";
}

const struct source_ops source_grpc_ops = {
  .type = "grpc",
  .production = 1,
  .open = grpc_open,
  .fetch = grpc_fetch,
  .admit = grpc_admit,
  .draw = grpc_draw,
  .stop = grpc_stop,
  .close = grpc_close,
  .describe = grpc_describe,
  .upstream_stats = grpc_upstream_stats,
  .quota_reset = grpc_quota_reset,
  .set_quota = grpc_set_quota,
  .take_use = grpc_take_use,
};
