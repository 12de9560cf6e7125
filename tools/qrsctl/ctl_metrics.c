/* qrsctl metrics: qrsd's STATUS and SOURCES replies as Prometheus text
   exposition format 0.0.4 (names, units and suffixes by Prometheus'
   conventions: counters end in _total, units in the name, base units),
   for a scrape wrapper or node_exporter's textfile collector
   (`qrsctl metrics > dir/qrsd.prom.$$ && mv ...`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

/* v as a label value: \, " and newline escaped; other control
   characters become '?'. */
static void
put_label(FILE *f, const char *v)
{
  for (; *v; v++) {
    if (*v == '\\' || *v == '"')
      fprintf(f, "\\%c", *v);
    else if (*v == '\n')
      fputs("\\n", f);
    else if ((unsigned char)*v < 0x20 || *v == 0x7f)
      fputc('?', f);
    else
      fputc(*v, f);
  }
}

static void
family(FILE *f, const char *name, const char *type, const char *help)
{
  fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A family of one unlabelled integer sample. */
static void
scalar(FILE *f, const char *name, const char *type, const char *help,
       uint64_t v)
{
  family(f, name, type, help);
  fprintf(f, "%s %llu\n", name, (unsigned long long)v);
}

static void
sample_src(FILE *f, const char *name, const struct qrs_source_info *s,
           const char *extra_label, const char *extra_value, double v)
{
  fprintf(f, "%s{source=\"", name);
  put_label(f, s->name);
  if (extra_label) {
    fprintf(f, "\",%s=\"", extra_label);
    put_label(f, extra_value);
  }
  fprintf(f, "\"} %.17g\n", v);
}

/* One family with a sample per source, of the value get() returns
   (skipped where want() says no). */
struct src_family {
  const char *name, *type, *help;
  double (*get)(const struct qrs_source_info *s);
  int (*want)(const struct qrs_source_info *s);
};

#define GETTER(fn, expr) \
  static double fn(const struct qrs_source_info *s) { return (double)(expr); }
GETTER(g_draws, s->draws)
GETTER(g_bytes, s->bytes)
GETTER(g_failures, s->failures)
GETTER(g_timeouts, s->timeouts)
GETTER(g_refusals, s->refusals)
GETTER(g_fallbacks, s->fallbacks)
GETTER(g_healthy, s->healthy != 0)
GETTER(g_production, s->production != 0)
GETTER(g_default, s->is_default != 0)
GETTER(g_disabled, s->disabled != 0)
GETTER(g_consec, s->consecutive_failures)
GETTER(g_timeout_s, s->timeout_ms / 1000.0)
GETTER(g_p99_s, s->latency_p99_ms / 1000.0)
GETTER(g_qmin, s->quota_minute_requests)
GETTER(g_qmin_lim, s->quota_minute_limit)
GETTER(g_qday, s->quota_day_bytes)
GETTER(g_qday_lim, s->quota_day_limit)
GETTER(g_ht_ok, strcmp(s->health_state, "failed") != 0)
GETTER(g_rate, s->bytes_per_s)
GETTER(g_minent, s->min_entropy / 8.0)
GETTER(g_win, s->stats.window)
GETTER(g_ks, s->stats.ks)
GETTER(g_ksp, s->stats.ks_p)
GETTER(g_cuhi, s->stats.cusum_hi)
GETTER(g_culo, s->stats.cusum_lo)
GETTER(g_alarm, s->stats.alarm != 0)
GETTER(g_lastfail, s->last_failure_ns / 1e9)

static int w_all(const struct qrs_source_info *s) { (void)s; return 1; }
static int w_upstream(const struct qrs_source_info *s) { return s->upstream; }
static int w_local(const struct qrs_source_info *s) { return s->local; }
static int w_minent(const struct qrs_source_info *s)
{
  return s->local && s->min_entropy >= 0;
}
static int w_stats(const struct qrs_source_info *s)
{
  return s->stats.window > 0;
}
static int w_failed(const struct qrs_source_info *s)
{
  return s->last_failure_ns > 0;
}

static const struct src_family src_families[] = {
  { "qrsd_source_draws_total", "counter", "Draws served by the source.",
    g_draws, w_all },
  { "qrsd_source_bytes_total", "counter", "Entropy bytes served by the "
    "source.", g_bytes, w_all },
  { "qrsd_source_failures_total", "counter", "Failed fetches from the "
    "source (timeouts included).", g_failures, w_all },
  { "qrsd_source_timeouts_total", "counter", "Fetches from the source "
    "that passed their deadline.", g_timeouts, w_all },
  { "qrsd_source_refusals_total", "counter", "Fetches the source's "
    "admission check sent elsewhere.", g_refusals, w_all },
  { "qrsd_source_fallbacks_total", "counter", "Requests for the source "
    "served by its fallback.", g_fallbacks, w_all },
  { "qrsd_source_healthy", "gauge", "1 if the source is healthy.",
    g_healthy, w_all },
  { "qrsd_source_production", "gauge", "1 for a production source, 0 for "
    "a test (mock) source.", g_production, w_all },
  { "qrsd_source_default", "gauge", "1 for the default source.",
    g_default, w_all },
  { "qrsd_source_disabled", "gauge", "1 while an operator has the source "
    "disabled (qrsctl source disable).", g_disabled, w_all },
  { "qrsd_source_last_failure_timestamp_seconds", "gauge", "When the "
    "source last failed (Unix time).", g_lastfail, w_failed },
  { "qrsd_upstream_consecutive_failures", "gauge", "Consecutive failures "
    "of a network upstream (its circuit breaker's count).", g_consec,
    w_upstream },
  { "qrsd_upstream_call_timeout_seconds", "gauge", "A network upstream's "
    "adaptive call timeout.", g_timeout_s, w_upstream },
  { "qrsd_upstream_latency_p99_seconds", "gauge", "A network upstream's "
    "99th percentile of call latency, as its circuit breaker tracks it.",
    g_p99_s, w_upstream },
  { "qrsd_upstream_quota_minute_requests", "gauge", "Requests to the "
    "upstream in the current minute.", g_qmin, w_upstream },
  { "qrsd_upstream_quota_minute_limit_requests", "gauge", "The "
    "upstream's per-minute request limit (0: none).", g_qmin_lim,
    w_upstream },
  { "qrsd_upstream_quota_day_bytes", "gauge", "Bytes fetched from the "
    "upstream today.", g_qday, w_upstream },
  { "qrsd_upstream_quota_day_limit_bytes", "gauge", "The upstream's daily "
    "byte limit (0: none).", g_qday_lim, w_upstream },
  { "qrsd_local_health_tests_passing", "gauge", "1 unless the local "
    "source's SP 800-90B health tests failed.", g_ht_ok, w_local },
  { "qrsd_local_throughput_bytes_per_second", "gauge", "Measured "
    "throughput of the local source (0: not yet).", g_rate, w_local },
  { "qrsd_local_min_entropy_ratio", "gauge", "MCV min-entropy estimate "
    "of the local source's raw samples (one byte each), as a fraction of "
    "8 bits.", g_minent, w_minent },
  { "qrsd_monitor_window_draws", "gauge", "Draws (u values) in the "
    "monitor's KS window.", g_win, w_stats },
  { "qrsd_monitor_ks_distance", "gauge", "Kolmogorov-Smirnov distance of "
    "the served u against uniform.", g_ks, w_stats },
  { "qrsd_monitor_ks_p_value", "gauge", "The KS distance's p-value.",
    g_ksp, w_stats },
  { "qrsd_monitor_cusum_high", "gauge", "Upper one-sided CUSUM of z.",
    g_cuhi, w_stats },
  { "qrsd_monitor_cusum_low", "gauge", "Lower one-sided CUSUM of z.",
    g_culo, w_stats },
  { "qrsd_monitor_alarm", "gauge", "1 once the monitor raised an alarm "
    "(latched until qrsd restarts).", g_alarm, w_stats },
};

/* A state set: one sample per possible state, 1 for the current one. */
static void
state_set(FILE *f, const char *name, const char *help,
          const struct qrs_sources *src, int (*want)(const struct qrs_source_info *),
          const char *(*cur)(const struct qrs_source_info *),
          const char *const *states)
{
  size_t i, k;
  int any = 0;

  for (i = 0; i < src->n_sources; i++)
    any |= want(&src->sources[i]);
  if (!any)
    return;
  family(f, name, "gauge", help);
  for (i = 0; i < src->n_sources; i++) {
    if (!want(&src->sources[i]))
      continue;
    for (k = 0; states[k]; k++)
      sample_src(f, name, &src->sources[i], "state", states[k],
                 strcmp(cur(&src->sources[i]), states[k]) == 0);
  }
}

static const char *c_state(const struct qrs_source_info *s)
{
  return s->state;
}
static const char *c_breaker(const struct qrs_source_info *s)
{
  return s->breaker_state;
}

/* The studies, by arm label only (which source is behind a label is
   secret while a study runs). */
static void
study_metrics(FILE *f, const struct qrs_status *st)
{
  const struct qrs_study_info *t;
  size_t i, k;
  int per;

  if (st->n_studies == 0)
    return;
  for (per = 0; per < 2; per++) {
    family(f, per ? "qrsd_study_label_units_total" :
           "qrsd_study_label_draws_total", "counter", per ?
           "Units a study's arm label was served for." :
           "Draws a study's arm label served.");
    for (i = 0; i < st->n_studies; i++) {
      t = &st->studies[i];
      for (k = 0; k < t->n_labels; k++) {
        fprintf(f, "%s{study=\"", per ? "qrsd_study_label_units_total" :
                "qrsd_study_label_draws_total");
        put_label(f, t->name);
        fputs("\",label=\"", f);
        put_label(f, t->labels[k].label);
        fprintf(f, "\"} %llu\n", (unsigned long long)(per ?
                t->labels[k].units : t->labels[k].draws));
      }
    }
  }
  family(f, "qrsd_study_units", "gauge", "Distinct units a study has "
         "seen, and (planned=\"1\") the units it planned.");
  for (i = 0; i < st->n_studies; i++) {
    t = &st->studies[i];
    fputs("qrsd_study_units{study=\"", f);
    put_label(f, t->name);
    fprintf(f, "\",planned=\"0\"} %llu\n",
            (unsigned long long)t->units_seen);
    fputs("qrsd_study_units{study=\"", f);
    put_label(f, t->name);
    fprintf(f, "\",planned=\"1\"} %llu\n",
            (unsigned long long)t->planned_units);
  }
}

int
ctl_print_metrics(FILE *f, const struct qrs_status *st,
                  const struct qrs_sources *src)
{
  static const char *const states[] = { "ok", "degraded", "failed",
                                        "unknown", NULL };
  static const char *const breaker[] = { "closed", "open", "half-open",
                                         NULL };
  size_t i, k;

  family(f, "qrsd_build_info", "gauge", "qrsd's version and protocol; "
         "always 1.");
  fputs("qrsd_build_info{version=\"", f);
  put_label(f, st->server_version);
  fprintf(f, "\",protocol=\"%u\"} 1\n", st->protocol_version);
  family(f, "qrsd_config_info", "gauge", "The configuration in use: its "
         "file and the SHA-256 of the text last loaded; always 1.");
  fputs("qrsd_config_info{file=\"", f);
  put_label(f, st->config_file);
  fputs("\",hash=\"", f);
  put_label(f, st->config_hash);
  fputs("\"} 1\n", f);
  family(f, "qrsd_uptime_seconds", "gauge", "Time since qrsd started.");
  fprintf(f, "qrsd_uptime_seconds %.3f\n", st->uptime_ms / 1000.0);
  scalar(f, "qrsd_connections", "gauge", "Client connections open.",
         st->connections);
  scalar(f, "qrsd_requests_total", "counter", "Requests served.",
         st->requests);
  scalar(f, "qrsd_draws_total", "counter", "Draws served.", st->draws);
  scalar(f, "qrsd_served_bytes_total", "counter", "Entropy bytes served.",
         st->bytes);
  scalar(f, "qrsd_request_errors_total", "counter", "Requests answered "
         "with an error.", st->errors);
  scalar(f, "qrsd_connections_refused_total", "counter", "Connections "
         "refused: over a connection limit or not in the access list.",
         st->connections_refused);
  scalar(f, "qrsd_busy_replies_total", "counter", "Requests answered BUSY "
         "(a limit on requests in flight or on memory).", st->busy_replies);
  scalar(f, "qrsd_memory_used_bytes", "gauge", "Memory held for requests "
         "in progress: queued and reserved replies, reads held.",
         st->memory_used_bytes);
  scalar(f, "qrsd_memory_budget_bytes", "gauge", "The bound on "
         "qrsd_memory_used_bytes (limits.memory_budget_bytes).",
         st->memory_budget_bytes);
  if (st->journal_state[0] && strcmp(st->journal_state, "off") != 0) {
    scalar(f, "qrsd_journal_ok", "gauge", "1 while the draw journal "
           "writes every draw, 0 while it fails (journal.on_error says "
           "whether draws are refused or served unjournalled).",
           strcmp(st->journal_state, "ok") == 0);
    family(f, "qrsd_journal_info", "gauge", "The draw journal: its state, "
           "on_error, and the head (the last entry durably written: its "
           "sequence and chain hash, a qrs-audit checkpoint); always 1.");
    fputs("qrsd_journal_info{state=\"", f);
    put_label(f, st->journal_state);
    fputs("\",on_error=\"", f);
    put_label(f, st->journal_on_error);
    fprintf(f, "\",seq=\"%llu\",head=\"", (unsigned long long)st->journal_seq);
    put_label(f, st->journal_head);
    fputs("\"} 1\n", f);
    scalar(f, "qrsd_journal_sequence", "gauge", "The sequence of the last "
           "draw journal entry durably written.", st->journal_seq);
  }
  study_metrics(f, st);
  scalar(f, "qrsd_compat_connections", "gauge", "Connections open on the "
         "gRPC compat endpoint.", st->compat_connections);
  scalar(f, "qrsd_compat_max_connections", "gauge", "The bound on "
         "qrsd_compat_connections in effect.", st->compat_max_connections);
  scalar(f, "qrsd_compat_connections_refused_total", "counter",
         "Connections the gRPC compat endpoint closed at once: over a "
         "bound, or no descriptor to spare.",
         st->compat_connections_refused);
  scalar(f, "qrsd_compat_relay_bytes", "gauge", "Memory the gRPC compat "
         "endpoint's relay holds (gRPC's own is not known).",
         st->compat_relay_bytes);
  if (st->n_latency_buckets > 0) {
    uint64_t cum = 0;

    family(f, "qrsd_draw_duration_seconds", "histogram", "Draw latency "
           "inside qrsd, from the request read to the reply sent.");
    for (i = 0; i < st->n_latency_buckets; i++) {
      cum += st->latency_count[i];
      fprintf(f, "qrsd_draw_duration_seconds_bucket{le=\"%g\"} %llu\n",
              st->latency_le_s[i], (unsigned long long)cum);
    }
    cum += st->latency_count[st->n_latency_buckets];
    fprintf(f, "qrsd_draw_duration_seconds_bucket{le=\"+Inf\"} %llu\n",
            (unsigned long long)cum);
    fprintf(f, "qrsd_draw_duration_seconds_sum %.9g\n", st->latency_sum_s);
    fprintf(f, "qrsd_draw_duration_seconds_count %llu\n",
            (unsigned long long)cum);
  }
  family(f, "qrsd_source_info", "gauge", "Each configured source and its "
         "type; always 1.");
  for (i = 0; i < src->n_sources; i++) {
    sample_src(f, "qrsd_source_info", &src->sources[i], "type",
               src->sources[i].type, 1);
  }
  for (k = 0; k < sizeof(src_families) / sizeof(src_families[0]); k++) {
    const struct src_family *sf = &src_families[k];
    int any = 0;

    for (i = 0; i < src->n_sources; i++)
      any |= sf->want(&src->sources[i]);
    if (!any)
      continue;
    family(f, sf->name, sf->type, sf->help);
    for (i = 0; i < src->n_sources; i++)
      if (sf->want(&src->sources[i]))
        sample_src(f, sf->name, &src->sources[i], NULL, NULL,
                   sf->get(&src->sources[i]));
  }
  state_set(f, "qrsd_source_state", "The registry's state of the source "
            "(1 for the current state).", src, w_all, c_state, states);
  state_set(f, "qrsd_upstream_breaker_state", "A network upstream's "
            "circuit breaker (1 for the current state).", src, w_upstream,
            c_breaker, breaker);
  return fflush(f) == 0 && !ferror(f) ? 0 : -1;
}
