/* The STATUS, HEALTH and SOURCES replies of the native socket server
   (server_int.h says what the other pieces are): the daemon's counters,
   its health (a statistics alarm degrades a healthy daemon) and, in all
   three, the table of sources from the registry, with each local source's
   statistics and mechanisms and each served stream's monitor as of its
   last check (no sort on the loop thread for a status request).  The
   draw journal's state and head are in STATUS, and a failing journal
   degrades HEALTH (failed when it refuses draws). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qrs-config.h"

#include "engine/draw.h"
#include "engine/study.h"
#include "persist/journal.h"
#include "sources/local.h"
#include "stats/monitor.h"
#include "server/compat.h"
#include "server/server_int.h"

/* Upper bounds of the draw-latency buckets in seconds (Prometheus'
   le), from the floor of a round trip (~10 us) to the request timeout's
   order; counts past the last go to +Inf. */
static const double lat_le_s[SERVER_LAT_BUCKETS] = {
  10e-6, 20e-6, 50e-6, 100e-6, 200e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3,
  20e-3, 50e-3, 100e-3, 500e-3, 1.0, 5.0,
};

void
report_draw_served(struct server *srv, const QrsIpc__DrawReply *r)
{
  double s = 0;
  size_t i;

  srv->draws++;
  if (r->received && r->sent &&
      r->sent->monotonic_ns > r->received->monotonic_ns)
    s = (double)(r->sent->monotonic_ns - r->received->monotonic_ns) / 1e9;
  for (i = 0; i < SERVER_LAT_BUCKETS && s > lat_le_s[i]; i++)
    ;
  srv->lat_counts[i]++;
  srv->lat_sum_s += s;
}

static QrsIpc__SourceState
state_to_wire(enum reg_state st)
{
  switch (st) {
  case REG_OK:
    return QRS_IPC__SOURCE_STATE__SOURCE_OK;
  case REG_DEGRADED:
    return QRS_IPC__SOURCE_STATE__SOURCE_DEGRADED;
  case REG_FAILED:
    return QRS_IPC__SOURCE_STATE__SOURCE_FAILED;
  }
  return QRS_IPC__SOURCE_STATE__SOURCE_STATE_UNKNOWN;
}

static void
fill_source_info(struct server *srv, const struct reg_info *ri,
                 QrsIpc__SourceInfo *info)
{
  const struct monitor *mon;

  qrs_ipc__source_info__init(info);
  /* the statistics as of the monitor's last check (every window/8
     draws): no sort on the loop thread for a status request */
  mon = draw_monitor(srv->draw, ri->name);
  if (mon && mon->conf.window) {
    info->stat_window = mon->n;
    info->stat_ks = mon->ks;
    info->stat_ks_p = mon->ks_p;
    info->stat_cusum_hi = mon->cusum_hi;
    info->stat_cusum_lo = mon->cusum_lo;
    info->stat_alarm = mon->alarm;
    info->stat_alarm_reason = (char *)mon->reason;
  }
  info->name = (char *)ri->name;
  info->type = (char *)ri->type;
  info->healthy = ri->state == REG_OK;
  info->is_default = ri->is_default;
  info->production = ri->production;
  info->fallback = (char *)ri->fallback;
  info->draws = ri->draws;
  info->bytes = ri->bytes;
  info->failures = ri->failures;
  info->detail = (char *)ri->detail;
  info->state = state_to_wire(ri->state);
  info->fallbacks = ri->fallbacks;
  info->timeouts = ri->timeouts;
  info->refusals = ri->refusals;
  info->last_failure = (char *)ri->last_failure;
  info->last_failure_ns = ri->last_failure_ns;
  info->builtin = ri->builtin;
  info->disabled = ri->disabled;
  if (ri->has_upstream) {
    info->upstream = 1;
    info->breaker_state = (char *)ri->up.breaker_state;
    info->consecutive_failures = ri->up.consecutive_failures;
    info->timeout_ms = ri->up.timeout_ms;
    info->latency_p99_ms = ri->up.p99_ms;
    info->quota_minute_requests = ri->up.quota_minute_requests;
    info->quota_minute_limit = ri->up.quota_rpm_limit;
    info->quota_day_bytes = ri->up.quota_day_bytes;
    info->quota_day_limit = ri->up.quota_day_limit;
  }
}

/* Source table for STATUS, HEALTH and SOURCES replies.  The arrays are
   freed with free_source_infos(). */
struct infos {
  QrsIpc__SourceInfo *v;
  QrsIpc__SourceInfo **p;
  struct reg_info *ri;
  struct local_stats *ls;       /* per source (local sources only) */
  QrsIpc__MechanismInfo *mv;    /* LOCAL_MECH_MAX per source */
  QrsIpc__MechanismInfo **mp;
  size_t n;
};

/* The statistics of a local source (SourceInfo 40-51); mv and mp have
   room for LOCAL_MECH_MAX mechanisms. */
static void
fill_local_info(const struct local_stats *ls, QrsIpc__SourceInfo *info,
                QrsIpc__MechanismInfo *mv, QrsIpc__MechanismInfo **mp)
{
  const struct local_mech_stats *ms;
  size_t i;

  info->local = 1;
  info->health_state = (char *)ls->health_state;
  info->health_reason = (char *)ls->health_reason;
  info->bytes_per_s = ls->bytes_per_s;
  info->draw_bytes = ls->draw_bytes;
  info->draws_per_s = ls->draws_per_s;
  info->min_entropy = ls->min_entropy;
  info->raw_samples = ls->raw_samples;
  info->freshness = (char *)ls->freshness;
  info->conditioning = (char *)ls->conditioning;
  info->combine = (char *)ls->combine;
  for (i = 0; i < ls->n_mech; i++) {
    ms = &ls->mech[i];
    qrs_ipc__mechanism_info__init(&mv[i]);
    mv[i].name = (char *)ms->name;
    mv[i].description = (char *)ms->what;
    mv[i].available = ms->available;
    mv[i].unavailable_reason = (char *)ms->why;
    mv[i].state = (char *)ms->state;
    mv[i].bytes_per_s = ms->bytes_per_s;
    mv[i].min_entropy = ms->min_entropy;
    mv[i].harvests = ms->harvests;
    mv[i].samples = ms->samples;
    mv[i].timeouts = ms->timeouts;
    mv[i].cut = ms->cut;
    mv[i].failures = ms->failures;
    mv[i].last_error = (char *)ms->last_error;
    mp[i] = &mv[i];
  }
  info->n_mechanisms = ls->n_mech;
  info->mechanisms = ls->n_mech ? mp : NULL;
}

static void
free_source_infos(struct infos *in)
{
  free(in->v);
  free(in->p);
  free(in->ri);
  free(in->ls);
  free(in->mv);
  free(in->mp);
}

/* The source table of a reply to seq on c; on failure c gets an ERROR
   reply instead and this returns -ENOMEM. */
static int
make_source_infos(struct conn *c, uint32_t seq, struct infos *in)
{
  struct server *srv;
  size_t i;

  srv = c->srv;
  in->n = registry_count(srv->reg);
  in->v = calloc(in->n, sizeof(*in->v));
  in->p = calloc(in->n, sizeof(*in->p));
  in->ri = calloc(in->n, sizeof(*in->ri));
  in->ls = calloc(in->n, sizeof(*in->ls));
  in->mv = calloc(in->n * LOCAL_MECH_MAX, sizeof(*in->mv));
  in->mp = calloc(in->n * LOCAL_MECH_MAX, sizeof(*in->mp));
  if (!in->v || !in->p || !in->ri || !in->ls || !in->mv || !in->mp) {
    free_source_infos(in);
    conn_send_error(c, seq, -ENOMEM, "out of memory");
    return -ENOMEM;
  }
  for (i = 0; i < in->n; i++) {
    registry_info(srv->reg, i, &in->ri[i]);
    fill_source_info(srv, &in->ri[i], &in->v[i]);
    if (registry_local_stats(srv->reg, i, &in->ls[i]) == 0)
      fill_local_info(&in->ls[i], &in->v[i], in->mv + i * LOCAL_MECH_MAX,
                      in->mp + i * LOCAL_MECH_MAX);
    in->p[i] = &in->v[i];
  }
  return 0;
}

/* The draw journal's state, on_error and head (a mutex held briefly: no
   I/O); state "off" without a journal. */
struct jinfo {
  enum journal_state st;
  int err;
  int on;
  const char *on_error;
  uint64_t seq;
  char head[JOURNAL_HEX_LEN + 1];
};

static void
journal_info(struct server *srv, struct jinfo *ji)
{
  struct journal *j;

  j = draw_journal(srv->draw);
  memset(ji, 0, sizeof *ji);
  if (j == NULL)
    return;
  ji->on = 1;
  ji->st = journal_state(j, &ji->err);
  ji->on_error = journal_serves_unjournalled(j) ? "label" : "stop";
  journal_head(j, ji->head, &ji->seq);
}

/* The studies for a StatusReply, by label only. */
struct studies_w {
  size_t n;
  QrsIpc__StudyInfo *v, **pv;
  QrsIpc__StudyLabel *l, **pl;
  char (*names)[4];
};

static void
studies_wire_free(struct studies_w *w)
{
  free(w->v);
  free(w->pv);
  free(w->l);
  free(w->pl);
  free(w->names);
}

/* 0, or -ENOMEM (the reply then goes without its studies). */
static int
studies_wire(struct server *srv, struct studies_w *w)
{
  struct studies *ss = draw_studies(srv->draw);
  struct study_view sv;
  size_t i, k, n, m;

  memset(w, 0, sizeof(*w));
  n = studies_count(ss);
  if (n == 0)
    return 0;
  m = n * CONF_STUDY_MAX_ARMS;
  w->v = calloc(n, sizeof(*w->v));
  w->pv = calloc(n, sizeof(*w->pv));
  w->l = calloc(m, sizeof(*w->l));
  w->pl = calloc(m, sizeof(*w->pl));
  w->names = calloc(m, sizeof(*w->names));
  if (!w->v || !w->pv || !w->l || !w->pl || !w->names) {
    studies_wire_free(w);
    memset(w, 0, sizeof(*w));
    return -ENOMEM;
  }
  for (i = 0; i < n; i++) {
    studies_view(ss, i, &sv);
    qrs_ipc__study_info__init(&w->v[i]);
    w->pv[i] = &w->v[i];
    w->v[i].name = (char *)sv.name;
    w->v[i].unit = (char *)sv.unit;
    w->v[i].planned_units = sv.planned_units;
    w->v[i].statistic = (char *)sv.statistic;
    w->v[i].alpha = sv.alpha;
    w->v[i].epoch = (char *)sv.epoch;
    w->v[i].units_seen = sv.units_seen;
    w->v[i].state = (char *)sv.state;
    w->v[i].n_labels = sv.n_labels;
    w->v[i].labels = &w->pl[i * CONF_STUDY_MAX_ARMS];
    for (k = 0; k < sv.n_labels; k++) {
      size_t at = i * CONF_STUDY_MAX_ARMS + k;

      qrs_ipc__study_label__init(&w->l[at]);
      w->pl[at] = &w->l[at];
      w->names[at][0] = (char)('A' + k);
      w->l[at].label = w->names[at];
      w->l[at].draws = sv.draws[k];
      w->l[at].units = sv.units[k];
    }
  }
  w->n = n;
  return 0;
}

void
report_status(struct conn *c, uint32_t seq)
{
  QrsIpc__StatusReply r = QRS_IPC__STATUS_REPLY__INIT;
  struct studies_w sw;
  struct server *srv;
  struct gate_stats cf;
  struct infos in;
  struct jinfo ji;
  struct ts now;

  srv = c->srv;
  if (make_source_infos(c, seq, &in) < 0)
    return;
  ts_now(&now);
  r.server_version = (char *)QRS_VERSION;
  r.protocol_version = QRS_PROTO_VERSION;
  r.pid = (uint32_t)getpid();
  r.uptime_ms = (uint64_t)(now.monotonic_ns - srv->start_mono_ns) / 1000000;
  r.socket_path = srv->socket_path;
  r.default_source = (char *)registry_default(srv->reg);
  r.connections = srv->n_conns;
  r.requests = srv->requests;
  r.draws = srv->draws;
  r.bytes = registry_bytes(srv->reg);
  r.errors = srv->errors;
  r.n_draw_latency_counts = SERVER_LAT_BUCKETS + 1;
  r.draw_latency_counts = srv->lat_counts;
  r.n_draw_latency_le_s = SERVER_LAT_BUCKETS;
  r.draw_latency_le_s = (double *)lat_le_s;
  r.draw_latency_sum_s = srv->lat_sum_s;
  r.connections_refused = srv->refused_total;
  r.busy_replies = srv->busy_total;
  r.memory_used_bytes = srv->mem_queued + srv->mem_reserved +
                        registry_bytes_held(srv->reg);
  r.memory_budget_bytes = srv->conf->memory_budget;
  compat_figures(srv->compat, &cf);
  r.compat_connections = cf.conns;
  r.compat_max_connections = cf.max_conns;
  r.compat_connections_refused = cf.refused_full + cf.refused_peer +
                                 cf.refused_fds;
  r.compat_relay_bytes = cf.relay_bytes;
  r.n_sources = in.n;
  r.sources = in.p;
  r.config_file = srv->conf->file;
  r.config_hash = (char *)srv->conf->hash;
  journal_info(srv, &ji);
  r.journal_state = (char *)(ji.on ? journal_state_name(ji.st) : "off");
  if (ji.on) {
    if (ji.st == JOURNAL_WRITE_ERROR)
      r.journal_error = strerror(ji.err);
    r.journal_on_error = (char *)ji.on_error;
    r.journal_seq = ji.seq;
    if (ji.seq > 0)
      r.journal_head = ji.head;
  }
  if (studies_wire(srv, &sw) == 0) {
    r.n_studies = sw.n;
    r.studies = sw.pv;
  }
  conn_send(c, QRS_MSG_STATUS_REPLY, seq, &r.base);
  free_source_infos(&in);
  studies_wire_free(&sw);
}

void
report_health(struct conn *c, uint32_t seq)
{
  QrsIpc__HealthReply r = QRS_IPC__HEALTH_REPLY__INIT;
  const char *alarm_src, *alarm_reason;
  struct server *srv;
  struct infos in;
  struct jinfo ji;
  char msg[256], was[256];
  int alarms;

  srv = c->srv;
  if (make_source_infos(c, seq, &in) < 0)
    return;
  switch (registry_health(srv->reg, msg, sizeof(msg))) {
  case REG_FAILED:
    r.state = QRS_IPC__HEALTH_STATE__HEALTH_FAILED;
    break;
  case REG_DEGRADED:
    r.state = QRS_IPC__HEALTH_STATE__HEALTH_DEGRADED;
    break;
  case REG_OK:
    r.state = QRS_IPC__HEALTH_STATE__HEALTH_HEALTHY;
    break;
  }
  /* a statistics alarm (the served u drifts) degrades a healthy daemon */
  alarms = draw_alarms(srv->draw, &alarm_src, &alarm_reason);
  if (alarms && r.state == QRS_IPC__HEALTH_STATE__HEALTH_HEALTHY) {
    r.state = QRS_IPC__HEALTH_STATE__HEALTH_DEGRADED;
    snprintf(msg, sizeof(msg), "statistics alarm on %d source%s; '%s': "
             "%.150s", alarms, alarms == 1 ? "" : "s", alarm_src,
             alarm_reason);
  }
  /* a failing draw journal: failed when draws are refused (on_error
     stop), else degraded (served labelled unjournalled) */
  journal_info(srv, &ji);
  if (ji.on && ji.st != JOURNAL_OK) {
    memcpy(was, msg, sizeof was);
    snprintf(msg, sizeof(msg), "draw journal %s%s%s: draws %s%s%.100s",
             journal_state_name(ji.st),
             ji.st == JOURNAL_WRITE_ERROR ? " " : "",
             ji.st == JOURNAL_WRITE_ERROR ? strerror(ji.err) : "",
             strcmp(ji.on_error, "stop") == 0 ? "refused (journal.on_error "
             "stop)" : "served unjournalled (journal.on_error label)",
             was[0] && r.state != QRS_IPC__HEALTH_STATE__HEALTH_HEALTHY ?
             "; " : "",
             r.state != QRS_IPC__HEALTH_STATE__HEALTH_HEALTHY ? was : "");
    if (strcmp(ji.on_error, "stop") == 0)
      r.state = QRS_IPC__HEALTH_STATE__HEALTH_FAILED;
    else if (r.state == QRS_IPC__HEALTH_STATE__HEALTH_HEALTHY)
      r.state = QRS_IPC__HEALTH_STATE__HEALTH_DEGRADED;
  }
  /* so does a compat endpoint that cannot take a connection */
  if (r.state == QRS_IPC__HEALTH_STATE__HEALTH_HEALTHY &&
      compat_degraded(srv->compat, msg, sizeof(msg)))
    r.state = QRS_IPC__HEALTH_STATE__HEALTH_DEGRADED;
  r.message = msg;
  r.n_sources = in.n;
  r.sources = in.p;
  conn_send(c, QRS_MSG_HEALTH_REPLY, seq, &r.base);
  free_source_infos(&in);
}

void
report_sources(struct conn *c, uint32_t seq)
{
  QrsIpc__SourcesReply r = QRS_IPC__SOURCES_REPLY__INIT;
  struct infos in;

  if (make_source_infos(c, seq, &in) < 0)
    return;
  r.default_source = (char *)registry_default(c->srv->reg);
  r.n_sources = in.n;
  r.sources = in.p;
  conn_send(c, QRS_MSG_SOURCES_REPLY, seq, &r.base);
  free_source_infos(&in);
}
