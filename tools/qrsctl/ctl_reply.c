/* qrsctl's replies, each described once: a field table per JSON object
   (ctl.h) gives its --json line and its text for people.

     status, health, sources   a block of labelled lines, then the sources
     a source                  a row of the sources table; its "stats" a
                               row of the statistics table; its "upstream"
                               a line; its "local" a block and its
                               "mechanisms" a table
     draw                      one numbered line; its "draw_meta" a line
     validate                  JSON only (the verdict is a sentence)

   A table lists the fields in the order of the JSON object (qrsctl(1)
   documents them, scripts read them); col gives their order in the text.
   The JSON keys, their order and forms are those of qrsctl 0.1. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ctl.h"

/* A field only the JSON shows. */
#define JSON_ONLY(j) { j, .col = 0 }

#define SI(k, t, m) JSONFIELD_ROW(k, t, struct qrs_source_info, m)
#define SI_F(k, t, m, fl) JSONFIELD_ROW_F(k, t, struct qrs_source_info, m, fl)
#define MI(k, t, m) JSONFIELD_ROW(k, t, struct qrs_mechanism_info, m)
#define ST(k, t, m) JSONFIELD_ROW(k, t, struct qrs_status, m)
#define DR(k, t, m) JSONFIELD_ROW(k, t, struct draw_row, m)
#define DR_F(k, t, m, fl) JSONFIELD_ROW_F(k, t, struct draw_row, m, fl)

/* A min-entropy estimate: "7.95", or "-" before the first sample. */
static const char *
entropy_text(char *buf, size_t size, double h)
{
  if (h < 0 || !isfinite(h))
    snprintf(buf, size, "-");
  else
    snprintf(buf, size, "%.2f", h);
  return buf;
}

/* --- a local source's mechanisms --- */

static const char *
mech_entropy(char *buf, size_t size, const void *row)
{
  const struct qrs_mechanism_info *m = row;

  return entropy_text(buf, size, m->min_entropy);
}

/* Why it is unavailable, else its last error. */
static const char *
mech_note(char *buf, size_t size, const void *row)
{
  const struct qrs_mechanism_info *m = row;

  if (!m->available)
    return out_safe(buf, size, m->unavailable_reason,
                    sizeof(m->unavailable_reason));
  return out_safe(buf, size, m->last_error, sizeof(m->last_error));
}

static const struct ctl_field mech_fields[] = {
  { MI("name", STR, name), .col = 1, .head = "MECHANISM", .width = -16 },
  JSON_ONLY(MI("description", STR, description)),
  JSON_ONLY(MI("available", BOOL, available)),
  JSON_ONLY(MI("unavailable_reason", STR, unavailable_reason)),
  { MI("state", STR, state), .col = 2, .head = "STATE", .width = -11 },
  { MI("bytes_per_s", SHORTEST, bytes_per_s), .col = 3, .head = "RAW B/S",
    .width = 12, .prec = 0 },
  { JSONFIELD_ROW_F("min_entropy", SHORTEST, struct qrs_mechanism_info,
                    min_entropy, JSONFIELD_NULL_NEG),
    .col = 4, .text = mech_entropy, .head = "H(MCV)", .width = 7 },
  JSON_ONLY(MI("harvests", U64, harvests)),
  { MI("samples", U64, samples), .col = 5, .head = "SAMPLES", .width = 10 },
  { MI("timeouts", U64, timeouts), .col = 7, .head = "TIMEOUTS",
    .width = 8 },
  { MI("cut", U64, cut), .col = 6, .head = "CUT", .width = 6 },
  { MI("failures", U64, failures), .col = 8, .head = "FAILURES",
    .width = 8 },
  { MI("last_error", STR, last_error), .col = 9, .text = mech_note,
    .head = "NOTE", .sep = "  " },
};

static const struct ctl_table mech_table =
  CTL_TABLE_COLUMNS(mech_fields, "    ", " ", NULL);

/* --- a local source: health tests, capacity, min-entropy --- */

static const char *
local_rate(char *buf, size_t size, const void *row)
{
  const struct qrs_source_info *si = row;

  if (si->bytes_per_s > 0)
    snprintf(buf, size, "%.0f B/s measured, %.2f draws/s at the default "
             "sample_count (%" PRIu32 " B)", si->bytes_per_s,
             si->draws_per_s, si->draw_bytes);
  else
    snprintf(buf, size, "rate not measured yet (no read so far)");
  return buf;
}

static const char *
local_entropy(char *buf, size_t size, const void *row)
{
  const struct qrs_source_info *si = row;

  return entropy_text(buf, size, si->min_entropy);
}

static const struct ctl_field local_fields[] = {
  { SI(NULL, STR, name), .col = 1, .pre = "\n  ", .post = ":" },
  { SI("health_state", STR, health_state), .col = 2,
    .pre = " health tests " },
  { SI("health_reason", STR, health_reason), .col = 3, .pre = " (last: ",
    .post = ")", .flags = CTL_OMIT },
  { SI("bytes_per_s", SHORTEST, bytes_per_s), .col = 6, .pre = "\n    ",
    .text = local_rate },
  JSON_ONLY(SI("draw_bytes", U32, draw_bytes)),
  JSON_ONLY(SI("draws_per_s", SHORTEST, draws_per_s)),
  { SI_F("min_entropy", SHORTEST, min_entropy, JSONFIELD_NULL_NEG),
    .col = 7, .pre = "\n    min-entropy (MCV) of the raw samples: ",
    .post = " bits/sample", .text = local_entropy },
  { SI("raw_samples", U64, raw_samples), .col = 8, .pre = " over ",
    .post = " samples" },
  { SI("freshness", STR, freshness), .col = 9, .pre = "\n    fresh: ",
    .flags = CTL_OMIT },
  { SI("conditioning", STR, conditioning), .col = 4,
    .pre = "; conditioning " },
  { SI("combine", STR, combine), .col = 5, .pre = ", combine ",
    .flags = CTL_OMIT },
  JSON_ONLY(JSONFIELD_ARRAY_ROW("mechanisms", struct qrs_source_info,
                                mechanisms, n_mechanisms, &mech_table.json)),
};

static const struct ctl_table local_table = CTL_TABLE(local_fields);

/* --- a network upstream: breaker and quota --- */

static const struct ctl_field upstream_fields[] = {
  { SI(NULL, STR, name), .col = 1, .pre = "  ", .post = ":" },
  { SI("breaker_state", STR, breaker_state), .col = 2, .pre = " breaker " },
  { SI("consecutive_failures", U32, consecutive_failures), .col = 3,
    .pre = " (", .post = " consecutive failures" },
  { SI("timeout_ms", DOUBLE, timeout_ms), .col = 4, .pre = ", timeout ",
    .post = " ms);", .prec = 1 },
  { SI("quota_minute_requests", U64, quota_minute_requests), .col = 5,
    .pre = " quota " },
  { SI("quota_minute_limit", U64, quota_minute_limit), .col = 6, .pre = "/",
    .post = " requests this minute,", .unset = "unlimited" },
  { SI("quota_day_bytes", U64, quota_day_bytes), .col = 7, .pre = " " },
  { SI("quota_day_limit", U64, quota_day_limit), .col = 8, .pre = "/",
    .post = " bytes today;", .unset = "unlimited" },
  { SI(NULL, U64, fallbacks), .col = 9, .pre = " ",
    .post = " served by fallback\n" },
};

static const struct ctl_table upstream_table = CTL_TABLE(upstream_fields);

/* --- the live statistics of the u a source served --- */

static const char *
stats_alarm(char *buf, size_t size, const void *row)
{
  const struct qrs_source_info *si = row;

  if (!si->stats.alarm)
    return "-";
  return out_safe(buf, size, si->stats.alarm_reason,
                  sizeof(si->stats.alarm_reason));
}

/* No window: monitoring is off or nothing was drawn yet. */
static int
stats_blank(const void *row)
{
  const struct qrs_source_info *si = row;

  return !si->stats.window;
}

static const struct ctl_field stats_fields[] = {
  { SI(NULL, STR, name), .col = 1, .head = "NAME", .width = -1,
    .flags = CTL_FIT },
  { SI("window", U32, stats.window), .col = 2, .head = "WINDOW",
    .width = 7 },
  { SI("ks", SHORTEST, stats.ks), .col = 3, .head = "KS", .width = 8,
    .prec = 5 },
  { SI("ks_p", SHORTEST, stats.ks_p), .col = 4, .head = "KS-P", .width = 9,
    .prec = 3, .flags = CTL_G },
  { SI("cusum_hi", SHORTEST, stats.cusum_hi), .col = 5, .head = "CUSUM+",
    .width = 8, .prec = 2 },
  { SI("cusum_lo", SHORTEST, stats.cusum_lo), .col = 6, .head = "CUSUM-",
    .width = 8, .prec = 2 },
  JSON_ONLY(SI("alarm", BOOL, stats.alarm)),
  { SI("alarm_reason", STR, stats.alarm_reason), .col = 7,
    .text = stats_alarm, .head = "ALARM" },
};

static const struct ctl_table stats_table =
  CTL_TABLE_COLUMNS(stats_fields, "  ", "  ", stats_blank);

/* --- a source --- */

/* "-" when it has no fallback. */
static const char *
source_fallback(char *buf, size_t size, const void *row)
{
  const struct qrs_source_info *si = row;

  if (!si->fallback[0] || !strcmp(si->fallback, "error"))
    return "-";
  return out_safe(buf, size, si->fallback, sizeof(si->fallback));
}

/* "disabled" (an operator's), else its health. */
static const char *
source_health(char *buf, size_t size, const void *row)
{
  const struct qrs_source_info *si = row;

  (void)buf;
  (void)size;
  return si->disabled ? "disabled" : si->healthy ? "healthy" : "UNHEALTHY";
}

static const char *
source_detail(char *buf, size_t size, const void *row)
{
  const struct qrs_source_info *si = row;
  char detail[sizeof(si->detail)];

  snprintf(buf, size, "%s%s", si->production ? "" : "[test only] ",
           SAFE(detail, si->detail));
  return buf;
}

/* The sources table, chronyc style: '*' marks the default. */
static const struct ctl_field source_fields[] = {
  { SI("name", STR, name), .col = 2, .head = "NAME", .width = -1,
    .flags = CTL_FIT, .sep = " " },
  { SI("type", STR, type), .col = 3, .head = "TYPE", .width = -1,
    .flags = CTL_FIT },
  { SI("fallback", STR, fallback), .col = 5, .text = source_fallback,
    .head = "FALLBACK", .width = -1, .flags = CTL_FIT },
  { SI("healthy", BOOL, healthy), .col = 4, .text = source_health,
    .head = "HEALTH", .width = -9 },
  { SI("is_default", BOOL, is_default), .col = 1, .on = "*", .unset = " ",
    .head = " ", .width = 1 },
  JSON_ONLY(SI("production", BOOL, production)),
  { SI("draws", U64, draws), .col = 6, .head = "DRAWS", .width = 1,
    .flags = CTL_FIT },
  { SI("bytes", U64, bytes), .col = 7, .head = "BYTES", .width = 1,
    .flags = CTL_FIT },
  { SI("failures", U64, failures), .col = 8, .head = "FAILURES",
    .width = 1, .flags = CTL_FIT },
  { SI("detail", STR, detail), .col = 9, .text = source_detail,
    .head = "DETAIL" },
  JSON_ONLY(SI("state", STR, state)),
  JSON_ONLY(SI("disabled", BOOL, disabled)),
  JSON_ONLY(SI("timeouts", U64, timeouts)),
  JSON_ONLY(SI("refusals", U64, refusals)),
  JSON_ONLY(SI("last_failure", STR, last_failure)),
  JSON_ONLY(SI("last_failure_ns", I64, last_failure_ns)),
  JSON_ONLY(JSONFIELD_OBJECT_ROW("stats", &stats_table.json)),
  JSON_ONLY(SI("fallbacks", U64, fallbacks)),
  JSON_ONLY(JSONFIELD_OBJECT_IF("upstream", &upstream_table.json,
                                struct qrs_source_info, upstream)),
  JSON_ONLY(JSONFIELD_OBJECT_IF("local", &local_table.json,
                                struct qrs_source_info, local)),
};

static const struct ctl_table source_table =
  CTL_TABLE_COLUMNS(source_fields, "", "  ", NULL);

/* The sources as text: the table, their statistics, each upstream's
   line, each local source's block. */
static void
print_sources(const struct qrs_source_info *src, size_t n)
{
  size_t i;

  if (!n) {
    puts("No sources.");
    return;
  }
  table_columns(&source_table, src, n, sizeof(src[0]));
  putchar('\n');
  table_columns(&stats_table, src, n, sizeof(src[0]));
  for (i = 0; i < n; i++)
    if (src[i].upstream)
      table_line(&upstream_table, &src[i]);
  for (i = 0; i < n; i++) {
    if (!src[i].local)
      continue;
    table_line(&local_table, &src[i]);
    putchar('\n');
    if (src[i].n_mechanisms)
      table_columns(&mech_table, src[i].mechanisms, src[i].n_mechanisms,
                    sizeof(src[i].mechanisms[0]));
  }
}

/* --- status, health, sources --- */

/* "1d 02:03:04 (93784 s)" */
static const char *
status_uptime(char *buf, size_t size, const void *row)
{
  const struct qrs_status *st = row;
  uint64_t s;

  s = st->uptime_ms / 1000;
  if (s >= 86400)
    snprintf(buf, size, "%" PRIu64 "d %02u:%02u:%02u (%" PRIu64 " s)",
             s / 86400, (unsigned)(s % 86400 / 3600),
             (unsigned)(s % 3600 / 60), (unsigned)(s % 60), s);
  else
    snprintf(buf, size, "%02u:%02u:%02u (%" PRIu64 " s)",
             (unsigned)(s / 3600), (unsigned)(s % 3600 / 60),
             (unsigned)(s % 60), s);
  return buf;
}

static const char *
status_sources(char *buf, size_t size, const void *row)
{
  const struct qrs_status *st = row;
  size_t i, healthy;

  healthy = 0;
  for (i = 0; i < st->n_sources; i++)
    healthy += !!st->sources[i].healthy;
  snprintf(buf, size, "%zu (%zu healthy)", st->n_sources, healthy);
  return buf;
}

/* "ok (on_error stop)", "write-error: No space left on device
   (on_error stop: draws refused)", "off" */
static const char *
status_journal(char *buf, size_t size, const void *row)
{
  const struct qrs_status *st = row;
  int stop;

  stop = strcmp(st->journal_on_error, "stop") == 0;
  if (st->journal_state[0] == '\0')
    return NULL;                  /* an older qrsd */
  if (strcmp(st->journal_state, "off") == 0)
    snprintf(buf, size, "off");
  else if (strcmp(st->journal_state, "ok") == 0)
    snprintf(buf, size, "ok (on_error %s)", st->journal_on_error);
  else
    snprintf(buf, size, "%s%s%s (on_error %s: draws %s)", st->journal_state,
             st->journal_error[0] ? ": " : "", st->journal_error,
             st->journal_on_error, stop ? "refused" :
             "served unjournalled");
  return buf;
}

/* "1234 e3b0c442..." (the head, whole: qrs-audit --checkpoint SEQ:HEAD) */
static const char *
status_journal_head(char *buf, size_t size, const void *row)
{
  const struct qrs_status *st = row;

  if (st->journal_head[0] == '\0')
    return NULL;
  snprintf(buf, size, "%" PRIu64 ":%s", st->journal_seq, st->journal_head);
  return buf;
}

/* A study, by label only: "pilot1 running, 1200 of 2000 units (A 610
   draws 600 units, B 590 draws 590 units)"; "; " between studies. */
static const char *
status_studies(char *buf, size_t size, const void *row)
{
  const struct qrs_status *st = row;
  const struct qrs_study_info *t;
  size_t i, k, n;

  if (st->n_studies == 0)
    return NULL;
  n = 0;
  for (i = 0; i < st->n_studies && n < size; i++) {
    t = &st->studies[i];
    n += (size_t)snprintf(buf + n, size - n, "%s%s %s, %" PRIu64 " of %"
                          PRIu64 " units (", i ? "; " : "", t->name,
                          t->state, t->units_seen, t->planned_units);
    for (k = 0; k < t->n_labels && n < size; k++)
      n += (size_t)snprintf(buf + n, size - n, "%s%s %" PRIu64 " draws %"
                            PRIu64 " units", k ? ", " : "",
                            t->labels[k].label, t->labels[k].draws,
                            t->labels[k].units);
    if (n < size)
      n += (size_t)snprintf(buf + n, size - n, ")");
  }
  return buf;
}

#define SL(k, t, m) JSONFIELD_ROW(k, t, struct qrs_study_label, m)
#define SY(k, t, m) JSONFIELD_ROW(k, t, struct qrs_study_info, m)

static const struct jsonfield study_label_rows[] = {
  SL("label", STR, label),
  SL("draws", U64, draws),
  SL("units", U64, units),
};

static const struct jsonfield_table study_label_table =
  JSONFIELD_TABLE(study_label_rows);

static const struct jsonfield study_rows[] = {
  SY("name", STR, name),
  SY("unit", STR, unit),
  SY("planned_units", U64, planned_units),
  SY("statistic", STR, statistic),
  SY("alpha", DOUBLE, alpha),
  SY("epoch", STR, epoch),
  SY("units_seen", U64, units_seen),
  SY("state", STR, state),
  JSONFIELD_ARRAY_ROW("labels", struct qrs_study_info, labels, n_labels,
                      &study_label_table),
};

static const struct jsonfield_table study_table = JSONFIELD_TABLE(study_rows);

static const struct ctl_field status_fields[] = {
  { ST("server_version", STR, server_version), .col = 1,
    .pre = "Server version  : ", .post = "\n" },
  { ST("protocol_version", U32, protocol_version), .col = 2,
    .pre = "Protocol        : ", .post = "\n" },
  { ST("pid", U32, pid), .col = 3, .pre = "PID             : ",
    .post = "\n" },
  { ST("uptime_ms", U64, uptime_ms), .col = 4,
    .pre = "Uptime          : ", .post = "\n", .text = status_uptime },
  { ST("socket_path", STR, socket_path), .col = 5,
    .pre = "Socket          : ", .post = "\n" },
  { ST("default_source", STR, default_source), .col = 6,
    .pre = "Default source  : ", .post = "\n" },
  { ST("connections", U32, connections), .col = 7,
    .pre = "Connections     : ", .post = "\n" },
  { ST("requests", U64, requests), .col = 8, .pre = "Requests        : ",
    .post = "\n" },
  { ST("draws", U64, draws), .col = 9, .pre = "Draws           : ",
    .post = "\n" },
  { ST("bytes", U64, bytes), .col = 10, .pre = "Bytes           : ",
    .post = "\n" },
  { ST("errors", U64, errors), .col = 11, .pre = "Errors          : ",
    .post = "\n" },
  { JSONFIELD_POINTER_ARRAY_ROW("sources", struct qrs_status, sources,
                                n_sources, &source_table.json), .col = 12,
    .pre = "Sources         : ", .post = "\n", .text = status_sources },
  { ST("config_file", STR, config_file), .col = 13,
    .pre = "Config          : ", .post = "\n" },
  { ST("config_hash", STR, config_hash), .col = 14,
    .pre = "Config SHA-256  : ", .post = "\n" },
  { ST("journal_state", STR, journal_state), .col = 15,
    .pre = "Journal         : ", .post = "\n", .text = status_journal },
  JSON_ONLY(ST("journal_error", STR, journal_error)),
  JSON_ONLY(ST("journal_on_error", STR, journal_on_error)),
  { ST("journal_seq", U64, journal_seq), .col = 16,
    .pre = "Journal head    : ", .post = "\n", .text = status_journal_head,
    .flags = CTL_OMIT },
  JSON_ONLY(ST("journal_head", STR, journal_head)),
  { ST("compat_connections", U64, compat_connections), .col = 17,
    .pre = "gRPC compat     : ", .post = " connections" },
  { ST("compat_max_connections", U64, compat_max_connections), .col = 18,
    .pre = " (bound ", .post = "" },
  { ST("compat_connections_refused", U64, compat_connections_refused),
    .col = 19, .pre = ", ", .post = " refused)\n" },
  { JSONFIELD_ARRAY_ROW("studies", struct qrs_status, studies, n_studies,
                        &study_table), .col = 20,
    .pre = "Studies         : ", .post = "\n", .text = status_studies },
};

static const struct ctl_table status_table = CTL_TABLE(status_fields);

static const char *
health_state_name(int s)
{
  return qrs_health_state_name((enum qrs_health_state)s);
}

static const struct ctl_field health_fields[] = {
  { JSONFIELD_NAME_ROW("state", struct qrs_health, state,
                       health_state_name),
    .col = 1, .pre = "State           : ", .post = "\n" },
  { JSONFIELD_ROW("message", STR, struct qrs_health, message), .col = 2,
    .pre = "Message         : ", .post = "\n", .flags = CTL_OMIT },
  JSON_ONLY(JSONFIELD_POINTER_ARRAY_ROW("sources", struct qrs_health, sources,
                                        n_sources, &source_table.json)),
};

static const struct ctl_table health_table = CTL_TABLE(health_fields);

static const struct ctl_field sources_fields[] = {
  JSON_ONLY(JSONFIELD_ROW("default_source", STR, struct qrs_sources,
                          default_source)),
  JSON_ONLY(JSONFIELD_POINTER_ARRAY_ROW("sources", struct qrs_sources,
                                        sources, n_sources,
                                        &source_table.json)),
};

static const struct ctl_table sources_table = CTL_TABLE(sources_fields);

/* The JSON line of a reply's table over row. */
static int
print_json(const struct ctl_table *t, const void *row)
{
  struct json_object *o;
  int r;

  o = NULL;
  r = jsonfield_object(&t->json, row, &o);
  return out_json(r, o);
}

/* A reply that lists the sources: its JSON line, or its table's line
   (when line) and the sources as text. */
static int
reply_with_sources(const struct ctl *ctl, const struct ctl_table *t,
                   const void *row, int line,
                   const struct qrs_source_info *src, size_t n)
{
  if (ctl->json)
    return print_json(t, row);
  if (line) {
    table_line(t, row);
    putchar('\n');
  }
  print_sources(src, n);
  return out_flush();
}

int
reply_status(const struct ctl *ctl, const struct qrs_status *st)
{
  return reply_with_sources(ctl, &status_table, st, 1, st->sources,
                            st->n_sources);
}

int
reply_health(const struct ctl *ctl, const struct qrs_health *h)
{
  return reply_with_sources(ctl, &health_table, h, 1, h->sources,
                            h->n_sources);
}

int
reply_sources(const struct ctl *ctl, const struct qrs_sources *s)
{
  return reply_with_sources(ctl, &sources_table, s, 0, s->sources,
                            s->n_sources);
}

/* --- a reload --- */

#define RC(k, t, m) JSONFIELD_ROW(k, t, struct qrs_config_change, m)
#define RL(k, t, m) JSONFIELD_ROW(k, t, struct qrs_reload, m)

static const struct ctl_field change_fields[] = {
  { RC("key", STR, key), .col = 1, .pre = "  ", .post = ": " },
  { RC("old_value", STR, old_value), .col = 2, .post = " -> " },
  { RC("new_value", STR, new_value), .col = 3 },
  { RC("needs_restart", BOOL, needs_restart), .col = 4,
    .on = "  (needs a restart: the old value stays until then)",
    .flags = CTL_OMIT },
};

static const struct ctl_table change_table = CTL_TABLE(change_fields);

static const char *
reload_apply_ms(char *buf, size_t size, const void *row)
{
  const struct qrs_reload *r = row;

  snprintf(buf, size, "%.3f ms of qrsd's loop", (double)r->apply_ns / 1e6);
  return buf;
}

static const struct ctl_field reload_fields[] = {
  { RL("config_file", STR, config_file), .col = 1,
    .pre = "Reloaded        : ", .post = "\n" },
  { RL("config_hash", STR, config_hash), .col = 2,
    .pre = "Config SHA-256  : ", .post = "\n" },
  { RL("applied", U32, applied), .col = 3,
    .pre = "Applied live    : ", .post = "\n", .unset = "0" },
  { RL("needs_restart", U32, needs_restart), .col = 4,
    .pre = "Needs restart   : ", .post = "\n", .unset = "0" },
  { RL("apply_ns", U64, apply_ns), .col = 5, .text = reload_apply_ms,
    .pre = "Apply time      : ", .post = "\n" },
  JSON_ONLY(JSONFIELD_POINTER_ARRAY_ROW("changes", struct qrs_reload,
                                        changes, n_changes,
                                        &change_table.json)),
  JSON_ONLY(RL("changes_omitted", U32, n_omitted)),
};

static const struct ctl_table reload_table = CTL_TABLE(reload_fields);

int
reply_reload(const struct ctl *ctl, const struct qrs_reload *r)
{
  size_t i;

  if (ctl->json)
    return print_json(&reload_table, r);
  table_line(&reload_table, r);
  if (!r->n_changes && !r->n_omitted)
    fputs("Changes         : none\n", stdout);
  else
    fputs("Changes         :\n", stdout);
  for (i = 0; i < r->n_changes; i++) {
    table_line(&change_table, &r->changes[i]);
    putchar('\n');
  }
  if (r->n_omitted)
    printf("  (%" PRIu32 " more, not listed: qrsd's log has them)\n",
           r->n_omitted);
  return out_flush();
}

/* --- a draw --- */

static const struct ctl_field meta_fields[] = {
  { DR("z", SHORTEST, d.meta.z), .col = 1, .pre = "   meta: z=",
    .prec = 4, .flags = CTL_PLUS },
  { DR("coherence_z", SHORTEST, d.meta.coherence_z), .col = 2,
    .pre = " coherence_z=", .prec = 4, .flags = CTL_PLUS },
  { DR("coherence_r", SHORTEST, d.meta.coherence_r), .col = 3,
    .pre = " coherence_r=", .prec = 4 },
  { DR("coherence_valid", BOOL, d.meta.coherence_valid), .col = 4,
    .pre = " coherence_valid=", .on = "yes", .unset = "no" },
  { DR("integrated_bytes", U32, d.meta.integrated_bytes), .col = 5,
    .pre = " integrated_bytes=" },
  JSON_ONLY(DR_F("generation_timestamp_ns", U64,
                 d.meta.generation_timestamp_ns, JSONFIELD_NULL_ZERO)),
  { DR("purity_label", STR, d.meta.purity_label), .col = 6,
    .pre = " purity=" },
  { DR("integrator", STR, d.meta.integrator), .col = 7,
    .pre = " integrator=" },
  { DR("source_id", STR, d.meta.source_id), .col = 8, .pre = " source_id=",
    .post = "\n" },
};

static const struct ctl_table meta_table = CTL_TABLE(meta_fields);

/* Named only when --amplifier chose it. */
static const char *
draw_amplifier(char *buf, size_t size, const void *row)
{
  const struct draw_row *dr = row;

  if (!dr->show_amplifier)
    return NULL;
  return out_safe(buf, size, dr->d.amplifier, sizeof(dr->d.amplifier));
}

/* The echo check: null when no upstream saw the nonce. */
static int
add_echo(struct json_object *o, const char *key, const void *row)
{
  const struct draw_row *dr = row;
  struct json_object *v;

  v = NULL;
  if (dr->d.echo != QRS_ECHO_NONE) {
    v = json_object_new_boolean(dr->d.echo == QRS_ECHO_VERIFIED);
    if (!v)
      return -ENOMEM;
  }
  if (json_object_object_add(o, key, v) < 0) {
    json_object_put(v);
    return -ENOMEM;
  }
  return 0;
}

static const char *
draw_echo(char *buf, size_t size, const void *row)
{
  const struct draw_row *dr = row;

  if (dr->d.echo == QRS_ECHO_VERIFIED)
    return "verified";
  if (dr->d.echo == QRS_ECHO_MISMATCH)
    return "MISMATCH";
  return NULL;
}

/* A test source's type, as a warning. */
static const char *
draw_test_source(char *buf, size_t size, const void *row)
{
  const struct draw_row *dr = row;

  if (dr->d.production)
    return NULL;
  return out_safe(buf, size, dr->d.served_type, sizeof(dr->d.served_type));
}

/* "journal=SEQ", "unjournalled" (served while qrsd's journal failed,
   journal.on_error label), or nothing (no journal). */
static const char *
draw_journal(char *buf, size_t size, const void *row)
{
  const struct draw_row *dr = row;

  if (dr->d.unjournalled)
    return "unjournalled";
  if (dr->d.journal_seq == 0)
    return NULL;
  snprintf(buf, size, "journal=%" PRIu64, dr->d.journal_seq);
  return buf;
}

/* One draw as a numbered line, chronyc style. */
static const struct ctl_field draw_fields[] = {
  { DR("index", U64, index), .col = 1, .post = ":" },
  { DR("u", SHORTEST, d.u), .col = 2, .pre = " u=", .prec = 15 },
  { DR("z", SHORTEST, d.z), .col = 3, .pre = " z=", .prec = 4,
    .flags = CTL_PLUS },
  { DR("amplifier", STR, d.amplifier), .col = 8, .pre = " amplifier=",
    .text = draw_amplifier },
  { DR("source", STR, d.source), .col = 4, .pre = " source=" },
  { DR("served_by", STR, d.served_by), .col = 5, .pre = " served_by=" },
  { DR("fallback", BOOL, d.fallback), .col = 10, .on = " [FALLBACK]" },
  { DR("served_type", STR, d.served_type), .col = 11,
    .pre = " [TEST SOURCE: ", .post = ", not for production]",
    .text = draw_test_source },
  JSON_ONLY(DR("production", BOOL, d.production)),
  { DR("sample_count", U32, d.sample_count), .col = 6, .pre = " samples=" },
  JSON_ONLY(DR("sample_mean", SHORTEST, d.sample_mean)),
  { DR_F("nonce", HEX64, d.nonce, JSONFIELD_NULL_ZERO), .col = 7,
    .pre = " nonce=", .unset = "-" },
  { JSONFIELD_CUSTOM_ROW("echo_verified", add_echo), .col = 9,
    .pre = " echo=", .text = draw_echo },
  { DR_F("journal_seq", U64, d.journal_seq, JSONFIELD_NULL_ZERO), .col = 12,
    .pre = " ", .text = draw_journal },
  JSON_ONLY(DR("unjournalled", BOOL, d.unjournalled)),
  JSON_ONLY(DR("t_received_ns", I64, d.received.realtime_ns)),
  JSON_ONLY(DR("t_generated_ns", I64, d.generated.realtime_ns)),
  JSON_ONLY(DR("t_sent_ns", I64, d.sent.realtime_ns)),
  JSON_ONLY(DR("t_received_mono_ns", I64, d.received.monotonic_ns)),
  JSON_ONLY(DR("t_generated_mono_ns", I64, d.generated.monotonic_ns)),
  JSON_ONLY(DR("t_sent_mono_ns", I64, d.sent.monotonic_ns)),
  JSON_ONLY(JSONFIELD_OBJECT_IF("draw_meta", &meta_table.json,
                                struct draw_row, d.has_meta)),
};

static const struct ctl_table draw_table = CTL_TABLE(draw_fields);

int
reply_draw(const struct ctl *ctl, const struct draw_row *row)
{
  if (ctl->json)
    return print_json(&draw_table, row);
  table_line(&draw_table, row);
  putchar('\n');
  if (row->d.has_meta)
    table_line(&meta_table, row);
  return out_flush();
}

/* --- validate --- */

#define VR(k, t, m) JSONFIELD_ROW(k, t, struct validate_result, m)

static const struct ctl_field validate_fields[] = {
  JSON_ONLY(VR("file", CSTR, file)),
  JSON_ONLY(VR("valid", BOOL, valid)),
  JSON_ONLY(VR("qrsd", CSTR, qrsd)),
  JSON_ONLY(VR("qrsd_exit_status", INT, exit_status)),
};

static const struct ctl_table validate_table = CTL_TABLE(validate_fields);

int
reply_validate(const struct validate_result *v)
{
  return print_json(&validate_table, v);
}
