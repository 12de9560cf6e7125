/* The registry's state in the status file; see statuspub.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "jsonfield.h"

#include "sources/local.h"
#include "base/log.h"
#include "engine/study.h"
#include "persist/journal.h"
#include "stats/monitor.h"
#include "server/statuspub.h"

/* What the status file says of one source: the registry's view, its
   monitor (NULL: no statistics: monitoring is off) and its local
   statistics (NULL: not a local source). */
struct source_view {
  struct reg_info ri;
  const struct monitor *mon;
  const struct local_stats *ls;
};

#define SV(k, t, m) JSONFIELD_ROW(k, t, struct source_view, m)
#define SV_UP(k, t, m) \
  JSONFIELD_ROW_IF(k, t, struct source_view, m, ri.has_upstream)
#define MS(k, t, m) JSONFIELD_ROW(k, t, struct local_mech_stats, m)
#define LS(k, t, m) JSONFIELD_ROW(k, t, struct local_stats, m)

/* The live statistics of the u a source served, as of the monitor's last
   check (the same figures as SourceInfo.stat_*). */
static const struct jsonfield stats_rows[] = {
  JSONFIELD_ROW("window", U32, struct monitor, n),
  JSONFIELD_ROW("ks", DOUBLE, struct monitor, ks),
  JSONFIELD_ROW("ks_p", DOUBLE, struct monitor, ks_p),
  JSONFIELD_ROW("cusum_hi", DOUBLE, struct monitor, cusum_hi),
  JSONFIELD_ROW("cusum_lo", DOUBLE, struct monitor, cusum_lo),
  JSONFIELD_ROW("alarm", BOOL, struct monitor, alarm),
  JSONFIELD_ROW("alarm_reason", STR, struct monitor, reason),
};

static const struct jsonfield_table stats_table = JSONFIELD_TABLE(stats_rows);

/* A noise or timing source's mechanisms (SourceInfo 52); the
   min-entropy estimates are null before the first sample. */
static const struct jsonfield mech_rows[] = {
  MS("name", CSTR, name),
  MS("available", BOOL, available),
  JSONFIELD_ROW_UNLESS("unavailable_reason", STR, struct local_mech_stats,
                       why, available),
  MS("state", CSTR, state),
  MS("bytes_per_s", DOUBLE, bytes_per_s),
  JSONFIELD_ROW_F("min_entropy", DOUBLE, struct local_mech_stats,
                  min_entropy, JSONFIELD_NULL_NEG),
  MS("samples", U64, samples),
  MS("timeouts", U64, timeouts),
  MS("cut", U64, cut),
  MS("failures", U64, failures),
  MS("last_error", STR, last_error),
};

static const struct jsonfield_table mech_table = JSONFIELD_TABLE(mech_rows);

/* A local source's statistics (the same figures as SourceInfo 40-51). */
static const struct jsonfield local_rows[] = {
  LS("health_state", CSTR, health_state),
  LS("health_reason", STR, health_reason),
  LS("bytes_per_s", DOUBLE, bytes_per_s),
  LS("draw_bytes", U32, draw_bytes),
  LS("draws_per_s", DOUBLE, draws_per_s),
  JSONFIELD_ROW_F("min_entropy", DOUBLE, struct local_stats, min_entropy,
                  JSONFIELD_NULL_NEG),
  LS("raw_samples", U64, raw_samples),
  LS("freshness", CSTR, freshness),
  LS("conditioning", CSTR, conditioning),
  LS("combine", CSTR, combine),
  JSONFIELD_ARRAY_ROW_F("mechanisms", struct local_stats, mech, n_mech,
                        &mech_table, JSONFIELD_NONEMPTY),
};

static const struct jsonfield_table local_table = JSONFIELD_TABLE(local_rows);

/* A network upstream's circuit breaker. */
static const struct jsonfield breaker_rows[] = {
  SV("state", CSTR, ri.up.breaker_state),
  SV("consecutive_failures", U32, ri.up.consecutive_failures),
  SV("opened", U64, ri.up.breaker_opened),
  SV("p99_ms", DOUBLE, ri.up.p99_ms),
  SV("timeout_ms", DOUBLE, ri.up.timeout_ms),
};

static const struct jsonfield_table breaker_table =
  JSONFIELD_TABLE(breaker_rows);

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
static const struct jsonfield quota_rows[] = {
  SV("minute_requests", U64, ri.up.quota_minute_requests),
  SV("minute_limit", U64, ri.up.quota_rpm_limit),
  SV("day_bytes", U64, ri.up.quota_day_bytes),
  SV("day_limit", U64, ri.up.quota_day_limit),
  JSONFIELD_CUSTOM_ROW("refused", add_quota_refused),
};

static const struct jsonfield_table quota_table = JSONFIELD_TABLE(quota_rows);

static const char *
state_name(int s)
{
  return registry_state_name((enum reg_state)s);
}

/* One source under "sources": a network upstream's keys after its
   counters, then stats and local when it has them. */
static const struct jsonfield source_rows[] = {
  SV("type", CSTR, ri.type),
  JSONFIELD_NAME_ROW("state", struct source_view, ri.state, state_name),
  SV("fallback", CSTR, ri.fallback),
  SV("draws", U64, ri.draws),
  SV("bytes", U64, ri.bytes),
  SV("failures", U64, ri.failures),
  SV("fallbacks", U64, ri.fallbacks),
  SV("refusals", U64, ri.refusals),
  SV("last_failure", CSTR, ri.last_failure),
  JSONFIELD_OBJECT_IF("breaker", &breaker_table, struct source_view,
                      ri.has_upstream),
  JSONFIELD_OBJECT_IF("quota", &quota_table, struct source_view,
                      ri.has_upstream),
  SV_UP("echo_failures", U64, ri.up.echo_failures),
  SV_UP("stream_violations", U64, ri.up.stream_violations),
  SV_UP("quarantined", BOOL, ri.up.quarantined),
  SV_UP("authenticated", BOOL, ri.up.authenticated),
  JSONFIELD_POINTER_ROW("stats", struct source_view, mon, &stats_table),
  JSONFIELD_POINTER_ROW("local", struct source_view, ls, &local_table),
};

static const struct jsonfield_table source_table =
  JSONFIELD_TABLE(source_rows);

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
    if (sv.mon && !sv.mon->conf.window)
      sv.mon = NULL;
    sv.ls = registry_local_stats(sp->reg, i, ls) == 0 ? ls : NULL;
    r = jsonfield_add_object(srcs, sv.ri.name, &source_table, &sv);
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

/* A snapshot written on a worker thread. */
struct spwrite {
  uv_work_t work;
  struct statuspub *sp;         /* outlives it (statuspub_stop() waits) */
  char *text;
  size_t len;
  int r;
  char err[320];
};

static void
sp_work(uv_work_t *w)
{
  struct spwrite *q = w->data;

  q->r = statusfile_write(q->sp->sf.path, q->text, q->len, q->err,
                          sizeof(q->err));
}

static void start_write(struct statuspub *sp, char *text, size_t len);

/* Log a change of the file's health once, not every write. */
static void
sp_done(uv_work_t *w, int status)
{
  struct spwrite *q = w->data;
  struct statuspub *sp = q->sp;

  if (status < 0)
    snprintf(q->err, sizeof(q->err), "%s: %s", sp->sf.path,
             uv_strerror(status));
  if (status < 0 || q->r < 0) {
    if (!sp->warned)
      log_ev(LOG_LEVEL_WARN,
             &(struct log_fields){ .event = "status-file-error" },
             "cannot write the status file: %s", q->err);
    sp->warned = 1;
  } else {
    if (q->r > 0)
      log_warn("status file %s", q->err);
    else if (sp->warned)
      log_info("status file %s written again", sp->sf.path);
    sp->warned = 0;
  }
  sp->inflight = NULL;
  free(q->text);
  free(q);
  if (sp->next) {
    start_write(sp, sp->next, sp->next_len);
    sp->next = NULL;
  }
}

/* Hand text (taken over) to a worker thread, or keep it for when the
   write in flight is done (the latest only: at most one write in flight
   and one waiting). */
static void
start_write(struct statuspub *sp, char *text, size_t len)
{
  struct spwrite *q;

  if (sp->inflight) {
    free(sp->next);
    sp->next = text;
    sp->next_len = len;
    return;
  }
  /* Out of memory: no snapshot this time (the next change writes one). */
  q = malloc(sizeof(*q));
  if (!q) {
    free(text);
    return;
  }
  q->sp = sp;
  q->text = text;
  q->len = len;
  q->r = 0;
  q->err[0] = '\0';
  q->work.data = q;
  if (uv_queue_work(sp->loop, &q->work, sp_work, sp_done) < 0) {
    free(text);
    free(q);
    return;
  }
  sp->inflight = q;
}

static void publish(struct statuspub *sp, int force);

static void
on_trail(uv_timer_t *t)
{
  struct statuspub *sp = t->data;

  sp->trail_armed = 0;
  publish(sp, 1);
}

static void
on_trail_closed(uv_handle_t *h)
{
  struct statuspub *sp = h->data;

  sp->trail_open = 0;
}

static void
publish(struct statuspub *sp, int force)
{
  struct status_summary sum;
  struct json_object *extra, *srcs, *cf;
  const char *alarm_src, *alarm_reason;
  struct reg_info def;
  struct local_stats *ls;
  char msg[256], *text;
  enum reg_state h;
  size_t len;
  double now;
  int r;

  now = (double)uv_hrtime() / 1e9;
  if (!statusfile_due(&sp->sf, force, now)) {
    /* not due: written when it is (a snapshot then shows this change) */
    if (sp->trail_open && !sp->trail_armed) {
      double wait = sp->sf.last_snapshot + 1.0 - now;

      sp->trail_armed = 1;
      uv_timer_start(&sp->trail, on_trail,
                     wait > 0 ? (uint64_t)(wait * 1000) + 1 : 1, 0);
    }
    return;
  }
  if (sp->trail_armed) {
    uv_timer_stop(&sp->trail);
    sp->trail_armed = 0;
  }
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
  /* a failing draw journal too: never silent */
  if (h == REG_OK && sp->draw && draw_journal(sp->draw) &&
      journal_state(draw_journal(sp->draw), NULL) != JOURNAL_OK) {
    h = REG_DEGRADED;
    snprintf(msg, sizeof(msg), "draw journal: %s", journal_state_name(
             journal_state(draw_journal(sp->draw), NULL)));
  }
  json_object_object_add(extra, "health",
                         json_object_new_string(registry_state_name(h)));
  json_object_object_add(extra, "health_message",
                         json_object_new_string(msg));
  json_object_object_add(extra, "sources", srcs);
  if (sp->extra_json)
    json_object_object_add(extra, "api_keys", sp->extra_json(sp->extra_ctx));
  cf = sp->conf ? json_object_new_object() : NULL;
  if (cf) {
    json_object_object_add(cf, "file", json_object_new_string(sp->conf->file));
    json_object_object_add(cf, "hash", json_object_new_string(sp->conf->hash));
    json_object_object_add(extra, "config", cf);
  }
  if (sp->draw && draw_journal(sp->draw))
    json_object_object_add(extra, "journal",
                           journal_status_json(draw_journal(sp->draw)));
  /* by label only: which source is behind one stays secret */
  if (sp->draw && draw_studies(sp->draw))
    json_object_object_add(extra, "studies",
                           studies_status_json(draw_studies(sp->draw)));
  sum.primary_name = def.name ? def.name : "";
  sum.fallback_name = def.fallback ? def.fallback : "error";
  sum.last_source_used = registry_last_used(sp->reg);
  sum.fallback_count = registry_fallbacks(sp->reg);
  sum.currently_degraded = h != REG_OK;
  r = statusfile_snapshot(&sp->sf, &sum, extra, now, &text, &len);
  json_object_put(extra);
  if (r < 0) {
    if (!sp->warned)
      log_warn("cannot write the status file %s: %s", sp->sf.path,
               strerror(-r));
    sp->warned = 1;
    return;
  }
  start_write(sp, text, len);
}

static void
on_change(void *ctx, int transition)
{
  publish(ctx, transition);
}

int
statuspub_start(struct statuspub *sp, struct registry *reg,
                struct draw_engine *draw, uv_loop_t *loop,
                const struct qrsd_conf *conf, const char *path)
{
  int r;

  memset(sp, 0, sizeof(*sp));
  sp->reg = reg;
  sp->draw = draw;
  sp->conf = conf;
  sp->loop = loop;
  r = statusfile_init(&sp->sf, path);
  if (r < 0)
    return r;
  if (!sp->sf.path)
    return 0;
  uv_timer_init(loop, &sp->trail);
  uv_unref((uv_handle_t *)&sp->trail);     /* never keeps the loop up */
  sp->trail.data = sp;
  sp->trail_open = 1;
  registry_set_observer(reg, on_change, sp);
  publish(sp, 1);
  return 0;
}

void
statuspub_touch(struct statuspub *sp)
{
  if (sp && sp->reg && sp->sf.path)
    publish(sp, 0);
}

void
statuspub_publish(struct statuspub *sp)
{
  if (sp->reg && sp->sf.path)
    publish(sp, 1);
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
  if (sp->trail_open) {
    uv_timer_stop(&sp->trail);
    sp->trail_armed = 0;
    uv_close((uv_handle_t *)&sp->trail, on_trail_closed);
  }
  /* The loop has stopped serving (or never started): run it for the
     last writes, which the worker thread makes. */
  while (sp->inflight || sp->trail_open)
    uv_run(sp->loop, UV_RUN_ONCE);
  free(sp->next);
  sp->next = NULL;
  statusfile_done(&sp->sf);
  sp->reg = NULL;
}
