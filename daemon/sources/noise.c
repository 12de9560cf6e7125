/* The noise and timing sources: the OpenEntropy-style harvester of local
   noise mechanisms (daemon/local/harvest.h), and CPU timing jitter around
   a memory-bound workload (the same harvester over one mechanism).  Bytes
   are harvested on the source's own thread after the request arrived;
   each mechanism's raw samples pass its SP 800-90B health tests, and a
   failed mechanism is re-tested before it contributes again. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sources/local.h"
#include "local/harvest.h"

struct noise_src {
  struct local_worker w;        /* first: the local_source_*() ops */
  struct noise *nz;
};

static int
serve(struct source *s, uint8_t *buf, size_t n, int64_t deadline_ns,
      char *why, size_t wlen)
{
  struct noise_src *ns = s->priv;

  return noise_read(ns->nz, buf, n, (uint64_t)deadline_ns, why, wlen);
}

static int
open_common(struct source *s, const struct conf_source *cs, int timing,
            char *err, size_t errlen)
{
  const struct noise_mech *one;
  struct noise_src *ns;
  enum condition_mode cond;
  enum noise_combine comb;
  char e[200];
  int r;

  if (condition_parse(cs->conditioning, &cond) < 0 ||
      noise_combine_parse(cs->combine, &comb) < 0) {
    snprintf(err, errlen, "source '%s': bad conditioning or combine",
             cs->name);
    return -EINVAL;
  }
  ns = calloc(1, sizeof(*ns));
  if (!ns)
    return -ENOMEM;
  e[0] = '\0';
  if (timing) {
    one = &noise_timing_mech;
    r = noise_new(&one, 1, cond, NOISE_XOR, cs->timeout_ms,
                  ldexp(1.0, -(int)cs->health_alpha_exp), &ns->nz, e,
                  sizeof(e));
  } else {
    r = noise_new_named((const char *const *)cs->mechanisms,
                        cs->n_mechanisms, cond, comb, cs->timeout_ms,
                        ldexp(1.0, -(int)cs->health_alpha_exp), &ns->nz, e,
                        sizeof(e));
  }
  if (r < 0) {
    snprintf(err, errlen, "source '%s': %s", cs->name, e);
    free(ns);
    return r;
  }
  s->priv = ns;
  r = local_worker_start(&ns->w, s, serve, NULL, err, errlen);
  if (r < 0) {
    noise_free(ns->nz);
    free(ns);
    s->priv = NULL;
    return r;
  }
  return 0;
}

static int
noise_src_open(struct source *s, const struct conf_source *cs, char *err,
               size_t errlen)
{
  return open_common(s, cs, 0, err, errlen);
}

static int
timing_src_open(struct source *s, const struct conf_source *cs, char *err,
                size_t errlen)
{
  return open_common(s, cs, 1, err, errlen);
}

static void
src_close(struct source *s)
{
  struct noise_src *ns = s->priv;

  if (!ns)
    return;
  local_worker_done(&ns->w);
  noise_free(ns->nz);
  free(ns);
  s->priv = NULL;
}

/* "noise (sha256, xor): clock_jitter ok MCV 1.23, hwmon unavailable, ...;
   12 B/s ..." */
static void
src_describe(const struct source *s, char *buf, size_t len)
{
  struct noise_src *ns = s->priv;
  struct noise_slot *slot;
  char rate[96];
  size_t i, n, o;
  double h;

  local_worker_rate_line(&ns->w, rate, sizeof(rate));
  o = (size_t)snprintf(buf, len, "%s (%s%s%s): %s; ", s->ops->type,
                       condition_name(ns->nz->cond),
                       ns->nz->nslot > 1 ? ", " : "",
                       ns->nz->nslot > 1
                       ? noise_combine_name(ns->nz->combine) : "", rate);
  slot = calloc(ns->nz->nslot, sizeof(*slot));
  if (!slot)
    return;
  n = noise_snapshot(ns->nz, slot, ns->nz->nslot);
  for (i = 0; i < n && o < len; i++) {
    if (!slot[i].available) {
      o += (size_t)snprintf(buf + o, len - o, "%s%s unavailable",
                            i ? ", " : "", slot[i].m->name);
      continue;
    }
    h = mcv_estimate(&slot[i].mcv);
    o += (size_t)snprintf(buf + o, len - o, "%s%s %s", i ? ", " : "",
                          slot[i].m->name,
                          slot[i].harvests == 0 ? "untested"
                          : health_state_name(slot[i].health.state));
    if (h >= 0 && o < len)
      o += (size_t)snprintf(buf + o, len - o, " MCV %.2f", h);
  }
  free(slot);
}

/* The source's health: ok while any mechanism passes its tests, failed
   when every available one failed, startup before that. */
static void
src_local_stats(struct source *s, struct local_stats *st)
{
  struct noise_src *ns = s->priv;
  struct local_mech_stats *ms;
  struct noise_slot *slot;
  size_t i, n, nok, nfailed;

  local_worker_rate(&ns->w, st);
  st->conditioning = condition_name(ns->nz->cond);
  st->combine = ns->nz->nslot > 1 ? noise_combine_name(ns->nz->combine)
                : "";
  st->freshness = "harvested after the request arrived; nothing is pooled";
  st->health_state = health_state_name(HEALTH_STARTUP);
  slot = calloc(ns->nz->nslot, sizeof(*slot));
  if (!slot)
    return;
  pthread_mutex_lock(&ns->nz->stats_lock);
  st->min_entropy = mcv_estimate(&ns->nz->raw_mcv);
  st->raw_samples = ns->nz->raw_mcv.n;
  pthread_mutex_unlock(&ns->nz->stats_lock);
  n = noise_snapshot(ns->nz, slot, ns->nz->nslot);
  nok = 0;
  nfailed = 0;
  for (i = 0; i < n; i++) {
    if (!slot[i].available)
      continue;
    if (slot[i].health.state == HEALTH_OK)
      nok++;
    else if (slot[i].health.state == HEALTH_FAILED) {
      nfailed++;
      if (!st->health_reason[0])
        snprintf(st->health_reason, sizeof(st->health_reason), "%s: %s",
                 slot[i].m->name, slot[i].health.reason);
    }
  }
  if (nok)
    st->health_state = health_state_name(HEALTH_OK);
  else if (nfailed && nfailed == ns->nz->navailable)
    st->health_state = health_state_name(HEALTH_FAILED);
  for (i = 0; i < n && i < LOCAL_MECH_MAX; i++) {
    ms = &st->mech[i];
    ms->name = slot[i].m->name;
    ms->what = slot[i].m->what;
    ms->available = slot[i].available;
    snprintf(ms->why, sizeof(ms->why), "%s", slot[i].why);
    ms->state = !slot[i].available ? "unavailable"
                : slot[i].harvests == 0 ? "untested"
                : health_state_name(slot[i].health.state);
    ms->bytes_per_s = slot[i].busy_ns
                      ? (double)slot[i].raw_harvested * 1e9
                        / (double)slot[i].busy_ns : 0.0;
    ms->min_entropy = mcv_estimate(&slot[i].mcv);
    ms->harvests = slot[i].harvests;
    ms->samples = slot[i].samples;
    ms->timeouts = slot[i].timeouts;
    ms->cut = slot[i].cut;
    ms->failures = slot[i].failures;
    snprintf(ms->last_error, sizeof(ms->last_error), "%s",
             slot[i].last_error);
  }
  st->n_mech = i;
  free(slot);
}

/* The two types differ only in their name and how they open. */
#define HARVEST_SOURCE_OPS(name, open_fn) { \
  .type = name, \
  .production = 1, \
  .open = open_fn, \
  LOCAL_SOURCE_OPS, \
  .close = src_close, \
  .describe = src_describe, \
  .local_stats = src_local_stats, \
}

const struct source_ops source_noise_ops =
  HARVEST_SOURCE_OPS("noise", noise_src_open);
const struct source_ops source_timing_ops =
  HARVEST_SOURCE_OPS("timing", timing_src_open);
