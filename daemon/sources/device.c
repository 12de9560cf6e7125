/* The device source: fresh bytes from a character device (/dev/hwrng, a
   QRNG card's node), a FIFO fed by a vendor tool, or a file (devread.h
   says what "fresh" means for each), read on the source's own thread.
   Every byte read passes the SP 800-90B health tests (health.h) with the
   configured min_entropy per byte, after a start-up test on 1,024 bytes
   (read and discarded at the first fetch); after a failure the source
   refuses fetches (they go to its fallback, labelled) until a re-test of
   1,024 fresh bytes passes. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "local/devread.h"
#include "stats/health.h"
#include "sources/local.h"

/* Re-test a failed device at most this often. */
#define RETEST_EVERY_NS 1000000000LL
#define RETEST_DEADLINE_NS 2000000000LL

struct device {
  struct local_worker w;        /* first: the local_source_*() ops */
  struct devread dev;
  pthread_mutex_t hlock;        /* health, mcv, retest_ns */
  struct health health;
  struct mcv mcv;
  int64_t retest_ns;
};


/* The start-up test: 1,024 fresh bytes that are never served. */
static int
startup(struct device *d, int64_t deadline_ns, char *why, size_t wlen)
{
  uint8_t tmp[HEALTH_STARTUP_SAMPLES];
  int r;

  r = devread_read(&d->dev, tmp, sizeof(tmp), (uint64_t)deadline_ns, why,
                   wlen);
  if (r < 0)
    return r;
  pthread_mutex_lock(&d->hlock);
  health_retest(&d->health);
  mcv_add(&d->mcv, tmp, sizeof(tmp));
  r = health_feed(&d->health, tmp, sizeof(tmp));
  if (r < 0)
    snprintf(why, wlen, "start-up health test failed: %s",
             d->health.reason);
  pthread_mutex_unlock(&d->hlock);
  return r;
}

static void
retest(struct source *s)
{
  char why[160];

  (void)startup(s->priv, mono_now_ns() + RETEST_DEADLINE_NS, why,
                sizeof(why));
}

static int
serve(struct source *s, uint8_t *buf, size_t n, int64_t deadline_ns,
      char *why, size_t wlen)
{
  struct device *d = s->priv;
  enum health_state st;
  int r;

  pthread_mutex_lock(&d->hlock);
  st = d->health.state;
  pthread_mutex_unlock(&d->hlock);
  if (st == HEALTH_FAILED) {
    snprintf(why, wlen, "unhealthy: %s", d->health.reason);
    return -EIO;
  }
  if (st == HEALTH_STARTUP) {
    r = startup(d, deadline_ns, why, wlen);
    if (r < 0)
      return r;
  }
  r = devread_read(&d->dev, buf, n, (uint64_t)deadline_ns, why, wlen);
  if (r < 0)
    return r;
  pthread_mutex_lock(&d->hlock);
  mcv_add(&d->mcv, buf, n);
  r = health_feed(&d->health, buf, n);
  if (r < 0)
    snprintf(why, wlen, "health test failed: %s", d->health.reason);
  pthread_mutex_unlock(&d->hlock);
  return r;
}

static int
device_open(struct source *s, const struct conf_source *cs, char *err,
            size_t errlen)
{
  struct device *d;
  int r;

  d = calloc(1, sizeof(*d));
  if (!d)
    return -ENOMEM;
  r = devread_init(&d->dev, cs->device_path, cs->device_chunk,
                   cs->device_lock, cs->device_drain);
  if (r < 0) {
    snprintf(err, errlen, "source '%s': bad device parameters", cs->name);
    free(d);
    return r;
  }
  pthread_mutex_init(&d->hlock, NULL);
  r = health_init(&d->health, ldexp(1.0, -(int)cs->health_alpha_exp),
                  cs->min_entropy, 0);
  if (r < 0) {
    snprintf(err, errlen, "source '%s': bad health-test parameters",
             cs->name);
    goto fail;
  }
  /* The start-up test runs at the first fetch (the device may not be
     there at open): 1,024 bytes read before that fetch's own. */
  s->priv = d;
  r = local_worker_start(&d->w, s, serve, retest, err, errlen);
  if (r < 0)
    goto fail;
  return 0;

fail:
  s->priv = NULL;
  devread_done(&d->dev);
  pthread_mutex_destroy(&d->hlock);
  free(d);
  return r;
}

static int
device_admit(struct source *s, size_t n, char *why, size_t whylen)
{
  struct device *d = s->priv;
  int failed, want;
  int64_t now;

  now = mono_now_ns();
  pthread_mutex_lock(&d->hlock);
  failed = d->health.state == HEALTH_FAILED;
  want = failed && now >= d->retest_ns;
  if (want)
    d->retest_ns = now + RETEST_EVERY_NS;
  if (failed)
    snprintf(why, whylen, "unhealthy, re-testing: %s", d->health.reason);
  pthread_mutex_unlock(&d->hlock);
  if (want)
    local_worker_want_retest(&d->w);
  return failed ? -EIO : 0;
}

static void
device_close(struct source *s)
{
  struct device *d = s->priv;

  if (!d)
    return;
  local_worker_done(&d->w);
  devread_done(&d->dev);
  pthread_mutex_destroy(&d->hlock);
  free(d);
  s->priv = NULL;
}

static void
device_describe(const struct source *s, char *buf, size_t len)
{
  struct device *d = s->priv;
  enum devread_kind kind;
  char rate[96];
  double h;
  enum health_state st;

  local_worker_rate_line(&d->w, rate, sizeof(rate));
  pthread_mutex_lock(&d->hlock);
  h = mcv_estimate(&d->mcv);
  st = d->health.state;
  pthread_mutex_unlock(&d->hlock);
  kind = devread_kind(&d->dev);
  snprintf(buf, len, "device %s (%s): health %s, %s, MCV %.2f bits/byte; "
           "fresh: %s", d->dev.path, devread_kind_name(kind),
           health_state_name(st), rate, h, devread_freshness(kind,
                                                             d->dev.drain));
}

static void
device_local_stats(struct source *s, struct local_stats *st)
{
  struct device *d = s->priv;

  local_worker_rate(&d->w, st);
  pthread_mutex_lock(&d->hlock);
  st->health_state = health_state_name(d->health.state);
  snprintf(st->health_reason, sizeof(st->health_reason), "%s",
           d->health.reason);
  st->min_entropy = mcv_estimate(&d->mcv);
  st->raw_samples = d->mcv.n;
  pthread_mutex_unlock(&d->hlock);
  st->freshness = devread_freshness(devread_kind(&d->dev), d->dev.drain);
  st->conditioning = "raw";
  st->combine = "";
}

const struct source_ops source_device_ops = {
  .type = "device",
  .production = 1,
  .open = device_open,
  LOCAL_SOURCE_OPS,
  .admit = device_admit,
  .close = device_close,
  .describe = device_describe,
  .local_stats = device_local_stats,
};
