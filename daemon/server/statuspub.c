/* The registry's state in the status file; see statuspub.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "sources/local.h"
#include "base/log.h"
#include "stats/monitor.h"
#include "server/statuspub.h"

/* The live statistics of the u a source served, as of the monitor's last
   check (the same figures as SourceInfo.stat_*). */
static struct json_object *
stats_json(const struct monitor *mon)
{
  struct json_object *o = json_object_new_object();

  json_object_object_add(o, "window", json_object_new_uint64(mon->n));
  json_object_object_add(o, "ks", json_object_new_double(mon->ks));
  json_object_object_add(o, "ks_p", json_object_new_double(mon->ks_p));
  json_object_object_add(o, "cusum_hi",
                         json_object_new_double(mon->cusum_hi));
  json_object_object_add(o, "cusum_lo",
                         json_object_new_double(mon->cusum_lo));
  json_object_object_add(o, "alarm", json_object_new_boolean(mon->alarm));
  json_object_object_add(o, "alarm_reason",
                         json_object_new_string(mon->reason));
  return o;
}

/* A min-entropy estimate; null before the first sample. */
static struct json_object *
entropy_json(double h)
{
  return h < 0 ? NULL : json_object_new_double(h);
}

/* A local source's statistics (the same figures as SourceInfo 40-51). */
static struct json_object *
local_json(const struct local_stats *ls)
{
  struct json_object *o = json_object_new_object(), *a, *m;
  const struct local_mech_stats *ms;
  size_t i;

  json_object_object_add(o, "health_state",
                         json_object_new_string(ls->health_state));
  json_object_object_add(o, "health_reason",
                         json_object_new_string(ls->health_reason));
  json_object_object_add(o, "bytes_per_s",
                         json_object_new_double(ls->bytes_per_s));
  json_object_object_add(o, "draw_bytes",
                         json_object_new_uint64(ls->draw_bytes));
  json_object_object_add(o, "draws_per_s",
                         json_object_new_double(ls->draws_per_s));
  json_object_object_add(o, "min_entropy", entropy_json(ls->min_entropy));
  json_object_object_add(o, "raw_samples",
                         json_object_new_uint64(ls->raw_samples));
  json_object_object_add(o, "freshness",
                         json_object_new_string(ls->freshness));
  json_object_object_add(o, "conditioning",
                         json_object_new_string(ls->conditioning));
  json_object_object_add(o, "combine", json_object_new_string(ls->combine));
  if (!ls->n_mech)
    return o;
  a = json_object_new_array();
  for (i = 0; i < ls->n_mech; i++) {
    ms = &ls->mech[i];
    m = json_object_new_object();
    json_object_object_add(m, "name", json_object_new_string(ms->name));
    json_object_object_add(m, "available",
                           json_object_new_boolean(ms->available));
    if (!ms->available)
      json_object_object_add(m, "unavailable_reason",
                             json_object_new_string(ms->why));
    json_object_object_add(m, "state", json_object_new_string(ms->state));
    json_object_object_add(m, "bytes_per_s",
                           json_object_new_double(ms->bytes_per_s));
    json_object_object_add(m, "min_entropy", entropy_json(ms->min_entropy));
    json_object_object_add(m, "samples",
                           json_object_new_uint64(ms->samples));
    json_object_object_add(m, "timeouts",
                           json_object_new_uint64(ms->timeouts));
    json_object_object_add(m, "cut", json_object_new_uint64(ms->cut));
    json_object_object_add(m, "failures",
                           json_object_new_uint64(ms->failures));
    json_object_object_add(m, "last_error",
                           json_object_new_string(ms->last_error));
    json_object_array_add(a, m);
  }
  json_object_object_add(o, "mechanisms", a);
  return o;
}

static struct json_object *
source_json(const struct reg_info *ri, const struct monitor *mon,
            const struct local_stats *ls)
{
  struct json_object *o = json_object_new_object(), *u;

  json_object_object_add(o, "type", json_object_new_string(ri->type));
  json_object_object_add(o, "state",
                         json_object_new_string(registry_state_name(
                                                  ri->state)));
  json_object_object_add(o, "fallback",
                         json_object_new_string(ri->fallback));
  json_object_object_add(o, "draws", json_object_new_uint64(ri->draws));
  json_object_object_add(o, "bytes", json_object_new_uint64(ri->bytes));
  json_object_object_add(o, "failures",
                         json_object_new_uint64(ri->failures));
  json_object_object_add(o, "fallbacks",
                         json_object_new_uint64(ri->fallbacks));
  json_object_object_add(o, "refusals",
                         json_object_new_uint64(ri->refusals));
  json_object_object_add(o, "last_failure",
                         json_object_new_string(ri->last_failure));
  if (ri->has_upstream) {
    u = json_object_new_object();
    json_object_object_add(u, "state",
                           json_object_new_string(ri->up.breaker_state));
    json_object_object_add(u, "consecutive_failures",
                           json_object_new_uint64(
                             ri->up.consecutive_failures));
    json_object_object_add(u, "opened", json_object_new_uint64(
                                          ri->up.breaker_opened));
    json_object_object_add(u, "p99_ms", json_object_new_double(
                                          ri->up.p99_ms));
    json_object_object_add(u, "timeout_ms", json_object_new_double(
                                              ri->up.timeout_ms));
    json_object_object_add(o, "breaker", u);
    u = json_object_new_object();
    json_object_object_add(u, "minute_requests", json_object_new_uint64(
                             ri->up.quota_minute_requests));
    json_object_object_add(u, "minute_limit", json_object_new_uint64(
                             ri->up.quota_rpm_limit));
    json_object_object_add(u, "day_bytes", json_object_new_uint64(
                             ri->up.quota_day_bytes));
    json_object_object_add(u, "day_limit", json_object_new_uint64(
                             ri->up.quota_day_limit));
    json_object_object_add(u, "refused", json_object_new_uint64(
                             ri->up.quota_refused_rpm +
                             ri->up.quota_refused_day));
    json_object_object_add(o, "quota", u);
    json_object_object_add(o, "echo_failures", json_object_new_uint64(
                             ri->up.echo_failures));
    json_object_object_add(o, "authenticated",
                           json_object_new_boolean(ri->up.authenticated));
  }
  if (mon && mon->conf.window)
    json_object_object_add(o, "stats", stats_json(mon));
  if (ls)
    json_object_object_add(o, "local", local_json(ls));
  return o;
}

static void
publish(struct statuspub *sp, int force)
{
  struct status_summary sum;
  struct json_object *extra, *srcs;
  const char *alarm_src, *alarm_reason;
  const struct monitor *mon;
  struct reg_info ri, def;
  struct local_stats *ls;
  char msg[256];
  enum reg_state h;
  size_t i, n;
  int r;

  if (!sp->sf.path)
    return;
  if (!force && sp->sf.writes > 0 &&
      (double)uv_hrtime() / 1e9 - sp->sf.last_write < 1.0)
    return;
  ls = malloc(sizeof(*ls));
  if (!ls)
    return;
  extra = json_object_new_object();
  srcs = json_object_new_object();
  memset(&def, 0, sizeof(def));
  n = registry_count(sp->reg);
  for (i = 0; i < n; i++) {
    registry_info(sp->reg, i, &ri);
    mon = sp->draw ? draw_monitor(sp->draw, ri.name) : NULL;
    json_object_object_add(srcs, ri.name, source_json(
                             &ri, mon, registry_local_stats(sp->reg, i, ls)
                             == 0 ? ls : NULL));
    if (ri.is_default)
      def = ri;
  }
  h = registry_health(sp->reg, msg, sizeof(msg));
  /* a statistics alarm (the served u drifts) degrades a healthy daemon,
     as in HEALTH */
  if (h == REG_OK && sp->draw &&
      draw_alarms(sp->draw, &alarm_src, &alarm_reason) > 0) {
    h = REG_DEGRADED;
    snprintf(msg, sizeof(msg), "statistics alarm on '%s': %.150s",
             alarm_src, alarm_reason);
  }
  json_object_object_add(extra, "health",
                         json_object_new_string(registry_state_name(h)));
  json_object_object_add(extra, "health_message",
                         json_object_new_string(msg));
  json_object_object_add(extra, "sources", srcs);
  sum.primary_name = def.name ? def.name : "";
  sum.fallback_name = def.fallback ? def.fallback : "error";
  sum.last_source_used = registry_last_used(sp->reg);
  sum.fallback_count = registry_fallbacks(sp->reg);
  sum.currently_degraded = h != REG_OK;
  r = statusfile_update(&sp->sf, &sum, extra, force,
                        (double)uv_hrtime() / 1e9);
  json_object_put(extra);
  free(ls);
  if (r < 0 && !sp->warned) {
    log_warn("cannot write the status file %s: %s", sp->sf.path,
             strerror(-r));
    sp->warned = 1;
  } else if (r > 0 && sp->warned) {
    log_info("status file %s written again", sp->sf.path);
    sp->warned = 0;
  }
}

static void
on_change(void *ctx, int transition)
{
  publish(ctx, transition);
}

int
statuspub_start(struct statuspub *sp, struct registry *reg,
                struct draw_engine *draw, uv_loop_t *loop, const char *path)
{
  int r;

  memset(sp, 0, sizeof(*sp));
  sp->reg = reg;
  sp->draw = draw;
  sp->loop = loop;
  r = statusfile_init(&sp->sf, path);
  if (r < 0)
    return r;
  if (!sp->sf.path)
    return 0;
  registry_set_observer(reg, on_change, sp);
  publish(sp, 1);
  return 0;
}

void
statuspub_stop(struct statuspub *sp)
{
  if (!sp->reg)
    return;
  if (sp->sf.path) {
    publish(sp, 1);
    registry_set_observer(sp->reg, NULL, NULL);
  }
  statusfile_done(&sp->sf);
  sp->reg = NULL;
}
