/* The registry's state in the status file; see statuspub.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "jsonfield.h"

#include "sources/local.h"
#include "base/log.h"
#include "stats/monitor.h"
#include "server/statuspub.h"

/* What the status file says of one source: the registry's view, its
   monitor (NULL: no statistics) and its local statistics (NULL: not a
   local source). */
struct source_view {
  struct reg_info ri;
  const struct monitor *mon;
  const struct local_stats *ls;
};

#define SV(k, t, m) JSONFIELD_ROW(k, t, struct source_view, m)

/* The live statistics of the u a source served, as of the monitor's last
   check (the same figures as SourceInfo.stat_*). */
static const struct jsonfield stats_fields[] = {
  JSONFIELD_ROW("window", U32, struct monitor, n),
  JSONFIELD_ROW("ks", DOUBLE, struct monitor, ks),
  JSONFIELD_ROW("ks_p", DOUBLE, struct monitor, ks_p),
  JSONFIELD_ROW("cusum_hi", DOUBLE, struct monitor, cusum_hi),
  JSONFIELD_ROW("cusum_lo", DOUBLE, struct monitor, cusum_lo),
  JSONFIELD_ROW("alarm", BOOL, struct monitor, alarm),
  JSONFIELD_ROW("alarm_reason", STR, struct monitor, reason),
};

/* The reason only when the mechanism is unavailable. */
static int
add_unavailable_reason(struct json_object *o, const char *key,
                       const void *base)
{
  static const struct jsonfield why =
    JSONFIELD_ROW(NULL, STR, struct local_mech_stats, why);
  const struct local_mech_stats *ms = base;
  struct jsonfield f = why;

  if (ms->available)
    return 0;
  f.key = key;
  return jsonfield_add(o, &f, base);
}

/* A noise or timing source's mechanisms (SourceInfo 52). */
static const struct jsonfield mech_fields[] = {
  JSONFIELD_ROW("name", CSTR, struct local_mech_stats, name),
  JSONFIELD_ROW("available", BOOL, struct local_mech_stats, available),
  JSONFIELD_CUSTOM_ROW("unavailable_reason", add_unavailable_reason),
  JSONFIELD_ROW("state", CSTR, struct local_mech_stats, state),
  JSONFIELD_ROW("bytes_per_s", DOUBLE, struct local_mech_stats,
                bytes_per_s),
  JSONFIELD_ROW_F("min_entropy", DOUBLE, struct local_mech_stats,
                  min_entropy, JSONFIELD_NULL_NEG),
  JSONFIELD_ROW("samples", U64, struct local_mech_stats, samples),
  JSONFIELD_ROW("timeouts", U64, struct local_mech_stats, timeouts),
  JSONFIELD_ROW("cut", U64, struct local_mech_stats, cut),
  JSONFIELD_ROW("failures", U64, struct local_mech_stats, failures),
  JSONFIELD_ROW("last_error", STR, struct local_mech_stats, last_error),
};

static int
add_mechanisms(struct json_object *o, const char *key, const void *base)
{
  const struct local_stats *ls = base;

  if (!ls->n_mech)
    return 0;
  return jsonfield_add_array(o, key, mech_fields, JSONFIELD_N(mech_fields),
                             ls->mech, ls->n_mech, sizeof(ls->mech[0]));
}

/* A local source's statistics (the same figures as SourceInfo 40-51);
   the min-entropy estimates are null before the first sample. */
static const struct jsonfield local_fields[] = {
  JSONFIELD_ROW("health_state", CSTR, struct local_stats, health_state),
  JSONFIELD_ROW("health_reason", STR, struct local_stats, health_reason),
  JSONFIELD_ROW("bytes_per_s", DOUBLE, struct local_stats, bytes_per_s),
  JSONFIELD_ROW("draw_bytes", U32, struct local_stats, draw_bytes),
  JSONFIELD_ROW("draws_per_s", DOUBLE, struct local_stats, draws_per_s),
  JSONFIELD_ROW_F("min_entropy", DOUBLE, struct local_stats, min_entropy,
                  JSONFIELD_NULL_NEG),
  JSONFIELD_ROW("raw_samples", U64, struct local_stats, raw_samples),
  JSONFIELD_ROW("freshness", CSTR, struct local_stats, freshness),
  JSONFIELD_ROW("conditioning", CSTR, struct local_stats, conditioning),
  JSONFIELD_ROW("combine", CSTR, struct local_stats, combine),
  JSONFIELD_CUSTOM_ROW("mechanisms", add_mechanisms),
};

/* key: the object of the table over base. */
static int
add_object(struct json_object *o, const char *key,
           const struct jsonfield *fields, size_t n, const void *base)
{
  struct json_object *v;
  int r;

  r = jsonfield_object(fields, n, base, &v);
  if (r < 0)
    return r;
  if (json_object_object_add(o, key, v) < 0) {
    json_object_put(v);
    return -ENOMEM;
  }
  return 0;
}

/* A network upstream's circuit breaker. */
static const struct jsonfield breaker_fields[] = {
  SV("state", CSTR, ri.up.breaker_state),
  SV("consecutive_failures", U32, ri.up.consecutive_failures),
  SV("opened", U64, ri.up.breaker_opened),
  SV("p99_ms", DOUBLE, ri.up.p99_ms),
  SV("timeout_ms", DOUBLE, ri.up.timeout_ms),
};

static int
add_quota_refused(struct json_object *o, const char *key, const void *base)
{
  const struct source_view *sv = base;
  struct json_object *v;

  v = json_object_new_uint64(sv->ri.up.quota_refused_rpm +
                             sv->ri.up.quota_refused_day);
  if (!v || json_object_object_add(o, key, v) < 0) {
    json_object_put(v);
    return -ENOMEM;
  }
  return 0;
}

/* Its quota use (never the api key). */
static const struct jsonfield quota_fields[] = {
  SV("minute_requests", U64, ri.up.quota_minute_requests),
  SV("minute_limit", U64, ri.up.quota_rpm_limit),
  SV("day_bytes", U64, ri.up.quota_day_bytes),
  SV("day_limit", U64, ri.up.quota_day_limit),
  JSONFIELD_CUSTOM_ROW("refused", add_quota_refused),
};

static int
add_breaker(struct json_object *o, const char *key, const void *base)
{
  return add_object(o, key, breaker_fields, JSONFIELD_N(breaker_fields),
                    base);
}

static int
add_quota(struct json_object *o, const char *key, const void *base)
{
  return add_object(o, key, quota_fields, JSONFIELD_N(quota_fields), base);
}

static const struct jsonfield upstream_fields[] = {
  JSONFIELD_CUSTOM_ROW("breaker", add_breaker),
  JSONFIELD_CUSTOM_ROW("quota", add_quota),
  SV("echo_failures", U64, ri.up.echo_failures),
  SV("authenticated", BOOL, ri.up.authenticated),
};

/* A network upstream's keys (none for another source). */
static int
add_upstream(struct json_object *o, const char *key, const void *base)
{
  const struct source_view *sv = base;

  (void)key;
  if (!sv->ri.has_upstream)
    return 0;
  return jsonfield_add_all(o, upstream_fields, JSONFIELD_N(upstream_fields),
                           base);
}

static int
add_stats(struct json_object *o, const char *key, const void *base)
{
  const struct source_view *sv = base;

  if (!sv->mon || !sv->mon->conf.window)
    return 0;
  return add_object(o, key, stats_fields, JSONFIELD_N(stats_fields),
                    sv->mon);
}

static int
add_local(struct json_object *o, const char *key, const void *base)
{
  const struct source_view *sv = base;

  if (!sv->ls)
    return 0;
  return add_object(o, key, local_fields, JSONFIELD_N(local_fields),
                    sv->ls);
}

static const char *
state_name(int s)
{
  return registry_state_name((enum reg_state)s);
}

/* One source under "sources". */
static const struct jsonfield source_fields[] = {
  SV("type", CSTR, ri.type),
  JSONFIELD_NAME_ROW("state", struct source_view, ri.state, state_name),
  SV("fallback", CSTR, ri.fallback),
  SV("draws", U64, ri.draws),
  SV("bytes", U64, ri.bytes),
  SV("failures", U64, ri.failures),
  SV("fallbacks", U64, ri.fallbacks),
  SV("refusals", U64, ri.refusals),
  SV("last_failure", CSTR, ri.last_failure),
  JSONFIELD_CUSTOM_ROW(NULL, add_upstream),
  JSONFIELD_CUSTOM_ROW("stats", add_stats),
  JSONFIELD_CUSTOM_ROW("local", add_local),
};

/* The object of every source by name in *ret, and the default source's
   view in *def (zeroed when there is none).  0 or -ENOMEM. */
static int
sources_json(struct statuspub *sp, struct local_stats *ls,
             struct reg_info *def, struct json_object **ret)
{
  struct json_object *srcs;
  struct source_view sv;
  size_t i, n;
  int r;

  srcs = json_object_new_object();
  if (!srcs)
    return -ENOMEM;
  memset(def, 0, sizeof(*def));
  n = registry_count(sp->reg);
  for (i = 0; i < n; i++) {
    registry_info(sp->reg, i, &sv.ri);
    sv.mon = sp->draw ? draw_monitor(sp->draw, sv.ri.name) : NULL;
    sv.ls = registry_local_stats(sp->reg, i, ls) == 0 ? ls : NULL;
    r = add_object(srcs, sv.ri.name, source_fields,
                   JSONFIELD_N(source_fields), &sv);
    if (r < 0) {
      json_object_put(srcs);
      return r;
    }
    if (sv.ri.is_default)
      *def = sv.ri;
  }
  *ret = srcs;
  return 0;
}

static void
publish(struct statuspub *sp, int force)
{
  struct status_summary sum;
  struct json_object *extra, *srcs;
  const char *alarm_src, *alarm_reason;
  struct reg_info def;
  struct local_stats *ls;
  char msg[256];
  enum reg_state h;
  int r;

  if (!sp->sf.path)
    return;
  if (!force && sp->sf.writes > 0 &&
      (double)uv_hrtime() / 1e9 - sp->sf.last_write < 1.0)
    return;
  /* Out of memory: no snapshot this time (the next change writes one). */
  ls = malloc(sizeof(*ls));
  if (!ls)
    return;
  r = sources_json(sp, ls, &def, &srcs);
  free(ls);
  if (r < 0)
    return;
  h = registry_health(sp->reg, msg, sizeof(msg));
  /* a statistics alarm (the served u drifts) degrades a healthy daemon,
     as in HEALTH */
  if (h == REG_OK && sp->draw &&
      draw_alarms(sp->draw, &alarm_src, &alarm_reason) > 0) {
    h = REG_DEGRADED;
    snprintf(msg, sizeof(msg), "statistics alarm on '%s': %.150s",
             alarm_src, alarm_reason);
  }
  extra = json_object_new_object();
  if (!extra) {
    json_object_put(srcs);
    return;
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
