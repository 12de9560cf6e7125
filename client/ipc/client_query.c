/* libqrs IPC client: raw bytes and the queries (client_conn.h has the
   pieces).

   BYTES, and STATUS, HEALTH and SOURCES: an empty request whose reply
   carries the daemon's source table, decoded into the public structs
   of qrs/client.h (each with its own copy of the table). */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <qrs/client.h>

#include "client_conn.h"

int
qrs_client_bytes(struct qrs_client *c, const char *source, void *buf,
                 size_t n, struct qrs_bytes_info *info)
{
  QrsIpc__Bytes m = QRS_IPC__BYTES__INIT;
  ProtobufCMessage *reply;
  QrsIpc__BytesReply *b;
  int r;

  if (!c || !buf || n == 0)
    return -EINVAL;
  pthread_mutex_lock(&c->lock);
  c->errmsg[0] = '\0';
  if (c->info.max_bytes_per_request && n > c->info.max_bytes_per_request) {
    r = QRS_E_TOO_LARGE;
    goto out;
  }
  m.source = (char *)(source ? source : "");
  m.count = (uint32_t)n;
  r = qrs__client_call(c, QRS_MSG_BYTES, &m.base, QRS_MSG_BYTES_REPLY, &reply);
  if (r < 0)
    goto out;
  b = (QrsIpc__BytesReply *)reply;
  if (b->data.len != n) {
    r = QRS_E_PROTOCOL;
  } else {
    memcpy(buf, b->data.data, n);
    if (info) {
      qrs__copy_str(info->source, sizeof(info->source), b->source);
      qrs__copy_str(info->served_by, sizeof(info->served_by), b->served_by);
      info->fallback = b->fallback;
      qrs__copy_str(info->served_type, sizeof(info->served_type),
                    b->served_type);
      info->production = b->production;
    }
  }
  qrs__client_release(c, reply);
out:
  qrs__client_keep_errmsg(c);
  pthread_mutex_unlock(&c->lock);
  return r;
}

static const char *
source_state_name(QrsIpc__SourceState st)
{
  switch (st) {
  case QRS_IPC__SOURCE_STATE__SOURCE_OK:
    return "ok";
  case QRS_IPC__SOURCE_STATE__SOURCE_DEGRADED:
    return "degraded";
  case QRS_IPC__SOURCE_STATE__SOURCE_FAILED:
    return "failed";
  default:
    return "unknown";
  }
}

/* The registry state and the local-source statistics (SourceInfo 11-16,
   40-51). */
static void
local_from_wire(struct qrs_source_info *o, const QrsIpc__SourceInfo *v)
{
  struct qrs_mechanism_info *m;
  const QrsIpc__MechanismInfo *w;
  size_t i;

  qrs__copy_str(o->state, sizeof(o->state), source_state_name(v->state));
  o->timeouts = v->timeouts;
  o->refusals = v->refusals;
  qrs__copy_str(o->last_failure, sizeof(o->last_failure), v->last_failure);
  o->last_failure_ns = v->last_failure_ns;
  o->local = v->local;
  o->min_entropy = -1.0;
  if (!v->local)
    return;
  qrs__copy_str(o->health_state, sizeof(o->health_state), v->health_state);
  qrs__copy_str(o->health_reason, sizeof(o->health_reason), v->health_reason);
  o->bytes_per_s = v->bytes_per_s;
  o->draw_bytes = v->draw_bytes;
  o->draws_per_s = v->draws_per_s;
  o->min_entropy = v->min_entropy;
  o->raw_samples = v->raw_samples;
  qrs__copy_str(o->freshness, sizeof(o->freshness), v->freshness);
  qrs__copy_str(o->conditioning, sizeof(o->conditioning), v->conditioning);
  qrs__copy_str(o->combine, sizeof(o->combine), v->combine);
  for (i = 0; i < v->n_mechanisms && i < QRS_MECHANISMS_MAX; i++) {
    m = &o->mechanisms[i];
    w = v->mechanisms[i];
    qrs__copy_str(m->name, sizeof(m->name), w->name);
    qrs__copy_str(m->description, sizeof(m->description), w->description);
    m->available = w->available;
    qrs__copy_str(m->unavailable_reason, sizeof(m->unavailable_reason),
                  w->unavailable_reason);
    qrs__copy_str(m->state, sizeof(m->state), w->state);
    m->bytes_per_s = w->bytes_per_s;
    m->min_entropy = w->min_entropy;
    m->harvests = w->harvests;
    m->samples = w->samples;
    m->timeouts = w->timeouts;
    m->cut = w->cut;
    m->failures = w->failures;
    qrs__copy_str(m->last_error, sizeof(m->last_error), w->last_error);
  }
  o->n_mechanisms = i;
}

static struct qrs_source_info *
sources_from_wire(QrsIpc__SourceInfo **v, size_t n)
{
  struct qrs_source_info *out;
  size_t i;

  out = calloc(n ? n : 1, sizeof(*out));
  if (!out)
    return NULL;
  for (i = 0; i < n; i++) {
    qrs__copy_str(out[i].name, sizeof(out[i].name), v[i]->name);
    qrs__copy_str(out[i].type, sizeof(out[i].type), v[i]->type);
    qrs__copy_str(out[i].fallback, sizeof(out[i].fallback), v[i]->fallback);
    out[i].healthy = v[i]->healthy;
    out[i].is_default = v[i]->is_default;
    out[i].production = v[i]->production;
    out[i].draws = v[i]->draws;
    out[i].bytes = v[i]->bytes;
    out[i].failures = v[i]->failures;
    qrs__copy_str(out[i].detail, sizeof(out[i].detail), v[i]->detail);
    out[i].stats.window = v[i]->stat_window;
    out[i].stats.ks = v[i]->stat_ks;
    out[i].stats.ks_p = v[i]->stat_ks_p;
    out[i].stats.cusum_hi = v[i]->stat_cusum_hi;
    out[i].stats.cusum_lo = v[i]->stat_cusum_lo;
    out[i].stats.alarm = v[i]->stat_alarm;
    qrs__copy_str(out[i].stats.alarm_reason, sizeof(out[i].stats.alarm_reason),
                  v[i]->stat_alarm_reason);
    out[i].fallbacks = v[i]->fallbacks;
    out[i].upstream = v[i]->upstream;
    qrs__copy_str(out[i].breaker_state, sizeof(out[i].breaker_state),
                  v[i]->breaker_state);
    out[i].consecutive_failures = v[i]->consecutive_failures;
    out[i].timeout_ms = v[i]->timeout_ms;
    out[i].quota_minute_requests = v[i]->quota_minute_requests;
    out[i].quota_minute_limit = v[i]->quota_minute_limit;
    out[i].quota_day_bytes = v[i]->quota_day_bytes;
    out[i].quota_day_limit = v[i]->quota_day_limit;
    out[i].latency_p99_ms = v[i]->latency_p99_ms;
    out[i].disabled = v[i]->disabled;
    local_from_wire(&out[i], v[i]);
  }
  return out;
}

/* STATUS, HEALTH and SOURCES: an empty request of type, its reply of
   type want, and the public struct (size bytes, its source table's
   pointer at offset sources) that from_wire fills from the reply,
   pointing *ret_v / *ret_n at the reply's table. */
struct query {
  uint16_t type, want;
  size_t size, sources;
  void (*from_wire)(void *o, const ProtobufCMessage *m,
                    QrsIpc__SourceInfo ***ret_v, size_t *ret_n);
};

/* Run query q: 0 and a new public struct with its own copy of the
   source table in *ret (ret: a pointer to q's struct pointer), or
   -EINVAL, -ENOMEM, or the call's error. */
static int
query_run(struct qrs_client *c, const struct query *q, void *ret)
{
  QrsIpc__Status empty = QRS_IPC__STATUS__INIT;
  struct qrs_source_info *table;
  QrsIpc__SourceInfo **v;
  ProtobufCMessage *reply;
  size_t n;
  char *o;
  int r;

  if (!c || !ret)
    return -EINVAL;
  /* The reply lives in the client's arena, which the next call on any
     thread reuses: it is read and released under the lock. */
  pthread_mutex_lock(&c->lock);
  r = qrs__client_call(c, q->type, &empty.base, q->want, &reply);
  qrs__client_keep_errmsg(c);
  if (r < 0) {
    pthread_mutex_unlock(&c->lock);
    return r;
  }
  table = NULL;
  o = calloc(1, q->size);
  if (o) {
    q->from_wire(o, reply, &v, &n);
    table = sources_from_wire(v, n);
  }
  qrs__client_release(c, reply);
  pthread_mutex_unlock(&c->lock);
  if (!table) {
    free(o);
    return -ENOMEM;
  }
  memcpy(o + q->sources, &table, sizeof(table));
  memcpy(ret, &o, sizeof(o));
  return 0;
}

/* Free o, a public struct of query q, and its source table. */
static void
query_free(const struct query *q, void *o)
{
  struct qrs_source_info *table;

  if (!o)
    return;
  memcpy(&table, (char *)o + q->sources, sizeof(table));
  free(table);
  free(o);
}

static void
study_from_wire(struct qrs_study_info *t, const QrsIpc__StudyInfo *w)
{
  size_t i;

  qrs__copy_str(t->name, sizeof(t->name), w->name);
  qrs__copy_str(t->unit, sizeof(t->unit), w->unit);
  t->planned_units = w->planned_units;
  qrs__copy_str(t->statistic, sizeof(t->statistic), w->statistic);
  t->alpha = w->alpha;
  qrs__copy_str(t->epoch, sizeof(t->epoch), w->epoch);
  t->units_seen = w->units_seen;
  qrs__copy_str(t->state, sizeof(t->state), w->state);
  for (i = 0; i < w->n_labels && i < QRS_STUDY_LABELS_MAX; i++) {
    qrs__copy_str(t->labels[i].label, sizeof(t->labels[i].label),
                  w->labels[i]->label);
    t->labels[i].draws = w->labels[i]->draws;
    t->labels[i].units = w->labels[i]->units;
  }
  t->n_labels = i;
}

static void
status_from_wire(void *o, const ProtobufCMessage *m,
                 QrsIpc__SourceInfo ***ret_v, size_t *ret_n)
{
  const QrsIpc__StatusReply *sr;
  struct qrs_status *s;
  size_t i;

  s = o;
  sr = (const QrsIpc__StatusReply *)m;
  qrs__copy_str(s->server_version, sizeof(s->server_version),
                sr->server_version);
  s->protocol_version = sr->protocol_version;
  s->pid = sr->pid;
  s->uptime_ms = sr->uptime_ms;
  qrs__copy_str(s->socket_path, sizeof(s->socket_path), sr->socket_path);
  qrs__copy_str(s->default_source, sizeof(s->default_source),
                sr->default_source);
  s->connections = sr->connections;
  s->requests = sr->requests;
  s->draws = sr->draws;
  s->bytes = sr->bytes;
  s->errors = sr->errors;
  /* the histogram only when its shape is one we can hold */
  if (sr->n_draw_latency_le_s <= QRS_LATENCY_BUCKETS_MAX &&
      sr->n_draw_latency_counts == sr->n_draw_latency_le_s + 1) {
    s->n_latency_buckets = sr->n_draw_latency_le_s;
    for (i = 0; i < s->n_latency_buckets; i++)
      s->latency_le_s[i] = sr->draw_latency_le_s[i];
    for (i = 0; i <= s->n_latency_buckets; i++)
      s->latency_count[i] = sr->draw_latency_counts[i];
  }
  s->latency_sum_s = sr->draw_latency_sum_s;
  s->connections_refused = sr->connections_refused;
  s->busy_replies = sr->busy_replies;
  s->memory_used_bytes = sr->memory_used_bytes;
  s->memory_budget_bytes = sr->memory_budget_bytes;
  s->compat_connections = sr->compat_connections;
  s->compat_max_connections = sr->compat_max_connections;
  s->compat_connections_refused = sr->compat_connections_refused;
  s->compat_relay_bytes = sr->compat_relay_bytes;
  s->n_sources = sr->n_sources;
  qrs__copy_str(s->config_file, sizeof(s->config_file), sr->config_file);
  qrs__copy_str(s->config_hash, sizeof(s->config_hash), sr->config_hash);
  qrs__copy_str(s->journal_state, sizeof(s->journal_state),
                sr->journal_state);
  qrs__copy_str(s->journal_error, sizeof(s->journal_error),
                sr->journal_error);
  qrs__copy_str(s->journal_on_error, sizeof(s->journal_on_error),
                sr->journal_on_error);
  s->journal_seq = sr->journal_seq;
  qrs__copy_str(s->journal_head, sizeof(s->journal_head), sr->journal_head);
  for (i = 0; i < sr->n_studies && i < QRS_STUDIES_MAX; i++)
    study_from_wire(&s->studies[i], sr->studies[i]);
  s->n_studies = i;
  *ret_v = sr->sources;
  *ret_n = sr->n_sources;
}

static const struct query status_query = {
  QRS_MSG_STATUS, QRS_MSG_STATUS_REPLY, sizeof(struct qrs_status),
  offsetof(struct qrs_status, sources), status_from_wire,
};

int
qrs_client_status(struct qrs_client *c, struct qrs_status **ret_status)
{
  return query_run(c, &status_query, ret_status);
}

void
qrs_status_free(struct qrs_status *s)
{
  query_free(&status_query, s);
}

static enum qrs_health_state
health_from_wire(QrsIpc__HealthState s)
{
  switch (s) {
  case QRS_IPC__HEALTH_STATE__HEALTH_HEALTHY:
    return QRS_HEALTH_HEALTHY;
  case QRS_IPC__HEALTH_STATE__HEALTH_DEGRADED:
    return QRS_HEALTH_DEGRADED;
  case QRS_IPC__HEALTH_STATE__HEALTH_FAILED:
    return QRS_HEALTH_FAILED;
  default:
    return QRS_HEALTH_UNKNOWN;
  }
}

static void
health_reply_from_wire(void *o, const ProtobufCMessage *m,
                       QrsIpc__SourceInfo ***ret_v, size_t *ret_n)
{
  const QrsIpc__HealthReply *hr;
  struct qrs_health *h;

  h = o;
  hr = (const QrsIpc__HealthReply *)m;
  h->state = health_from_wire(hr->state);
  qrs__copy_str(h->message, sizeof(h->message), hr->message);
  h->n_sources = hr->n_sources;
  *ret_v = hr->sources;
  *ret_n = hr->n_sources;
}

static const struct query health_query = {
  QRS_MSG_HEALTH, QRS_MSG_HEALTH_REPLY, sizeof(struct qrs_health),
  offsetof(struct qrs_health, sources), health_reply_from_wire,
};

int
qrs_client_health(struct qrs_client *c, struct qrs_health **ret_health)
{
  return query_run(c, &health_query, ret_health);
}

void
qrs_health_free(struct qrs_health *h)
{
  query_free(&health_query, h);
}

static void
sources_reply_from_wire(void *o, const ProtobufCMessage *m,
                        QrsIpc__SourceInfo ***ret_v, size_t *ret_n)
{
  const QrsIpc__SourcesReply *sr;
  struct qrs_sources *s;

  s = o;
  sr = (const QrsIpc__SourcesReply *)m;
  qrs__copy_str(s->default_source, sizeof(s->default_source),
                sr->default_source);
  s->n_sources = sr->n_sources;
  *ret_v = sr->sources;
  *ret_n = sr->n_sources;
}

static const struct query sources_query = {
  QRS_MSG_SOURCES, QRS_MSG_SOURCES_REPLY, sizeof(struct qrs_sources),
  offsetof(struct qrs_sources, sources), sources_reply_from_wire,
};

int
qrs_client_sources(struct qrs_client *c, struct qrs_sources **ret_sources)
{
  return query_run(c, &sources_query, ret_sources);
}

void
qrs_sources_free(struct qrs_sources *s)
{
  query_free(&sources_query, s);
}

/* A struct qrs_reload and its changes, in one allocation (so that
   qrs_reload_free() is one free()). */
struct reload_block {
  struct qrs_reload r;          /* first: its address is the block's */
  struct qrs_config_change changes[];
};

static struct qrs_reload *
reload_from_wire(const QrsIpc__ReloadReply *m)
{
  struct qrs_config_change *o;
  struct reload_block *b;
  struct qrs_reload *r;
  size_t i;

  b = calloc(1, sizeof(*b) + m->n_changes * sizeof(b->changes[0]));
  if (!b)
    return NULL;
  r = &b->r;
  r->changes = b->changes;
  qrs__copy_str(r->config_file, sizeof(r->config_file), m->config_file);
  qrs__copy_str(r->config_hash, sizeof(r->config_hash), m->config_hash);
  r->applied = m->applied;
  r->needs_restart = m->needs_restart;
  r->apply_ns = m->apply_ns;
  r->n_omitted = m->changes_omitted;
  for (i = 0; i < m->n_changes; i++) {
    o = &r->changes[i];
    qrs__copy_str(o->key, sizeof(o->key), m->changes[i]->key);
    qrs__copy_str(o->old_value, sizeof(o->old_value),
                  m->changes[i]->old_value);
    qrs__copy_str(o->new_value, sizeof(o->new_value),
                  m->changes[i]->new_value);
    o->needs_restart = m->changes[i]->needs_restart;
  }
  r->n_changes = m->n_changes;
  return r;
}

void
qrs_reload_free(struct qrs_reload *r)
{
  free(r);
}

int
qrs_client_reload(struct qrs_client *c, struct qrs_reload **ret)
{
  QrsIpc__Reload m = QRS_IPC__RELOAD__INIT;
  ProtobufCMessage *reply;
  struct qrs_reload *r;
  int rc;

  if (!c || !ret)
    return -EINVAL;
  pthread_mutex_lock(&c->lock);
  rc = qrs__client_call(c, QRS_MSG_RELOAD, &m.base, QRS_MSG_RELOAD_REPLY,
                        &reply);
  qrs__client_keep_errmsg(c);
  if (rc < 0) {
    pthread_mutex_unlock(&c->lock);
    return rc;
  }
  /* read and released under the lock, as query_run() does */
  r = reload_from_wire((const QrsIpc__ReloadReply *)reply);
  qrs__client_release(c, reply);
  pthread_mutex_unlock(&c->lock);
  if (!r)
    return -ENOMEM;
  *ret = r;
  return 0;
}

int
qrs_client_source_control(struct qrs_client *c, const char *source,
                          enum qrs_source_action action,
                          struct qrs_source_control *ret)
{
  QrsIpc__SourceControl m = QRS_IPC__SOURCE_CONTROL__INIT;
  const QrsIpc__SourceControlReply *r;
  ProtobufCMessage *reply;
  int rc;

  if (!c || !source || !source[0] || !ret ||
      (action != QRS_SOURCE_ENABLE && action != QRS_SOURCE_DISABLE &&
       action != QRS_SOURCE_QUOTA_RESET))
    return -EINVAL;
  m.source = (char *)source;
  m.action = (QrsIpc__SourceAction)action;
  pthread_mutex_lock(&c->lock);
  rc = qrs__client_call(c, QRS_MSG_SOURCE_CONTROL, &m.base,
                        QRS_MSG_SOURCE_CONTROL_REPLY, &reply);
  qrs__client_keep_errmsg(c);
  if (rc < 0) {
    pthread_mutex_unlock(&c->lock);
    return rc;
  }
  /* read and released under the lock, as query_run() does */
  r = (const QrsIpc__SourceControlReply *)reply;
  memset(ret, 0, sizeof(*ret));
  qrs__copy_str(ret->source, sizeof(ret->source), r->source);
  qrs__copy_str(ret->message, sizeof(ret->message), r->message);
  ret->changed = r->changed;
  ret->disabled = r->disabled;
  qrs__client_release(c, reply);
  pthread_mutex_unlock(&c->lock);
  return 0;
}

const char *
qrs_health_state_name(enum qrs_health_state s)
{
  switch (s) {
  case QRS_HEALTH_HEALTHY:
    return "healthy";
  case QRS_HEALTH_DEGRADED:
    return "degraded";
  case QRS_HEALTH_FAILED:
    return "failed";
  default:
    return "unknown";
  }
}
