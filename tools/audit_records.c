/* qrs-audit: libqrs per-token records checked alone and against qrsd's
   draw journal (see audit.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "audit.h"
#include "audit_stats.h"

static const char *const check_names[AUDIT_N_CHECKS] = {
  [AUDIT_MALFORMED] = "malformed-record",
  [AUDIT_U_OUTSIDE_CDF] = "u-outside-cdf",
  [AUDIT_TIMES_ORDER] = "times-out-of-order",
  [AUDIT_DRAW_REUSED] = "draw-reused",
  [AUDIT_NOT_JOURNALLED] = "draw-not-journalled",
  [AUDIT_UNJOURNALLED] = "draw-unjournalled",
  [AUDIT_ENTRY_MISSING] = "entry-missing",
  [AUDIT_U_MISMATCH] = "u-mismatch",
  [AUDIT_SOURCE_MISMATCH] = "source-mismatch",
  [AUDIT_FALLBACK_MISMATCH] = "fallback-mismatch",
  [AUDIT_NONCE_MISMATCH] = "nonce-mismatch",
  [AUDIT_TIMES_MISMATCH] = "times-mismatch",
  [AUDIT_NONCE_CHAIN] = "nonce-chain",
  [AUDIT_CONFIG_MISMATCH] = "config-mismatch",
  [AUDIT_LOGITS_MISSING] = "logits-missing",
  [AUDIT_TOKEN_MISMATCH] = "token-mismatch",
};

const char *
audit_check_name(enum audit_check c)
{
  return c < AUDIT_N_CHECKS ? check_names[c] : "?";
}

void
audit_failed(struct audit *a, uint64_t line, enum audit_check c,
             const char *fmt, ...)
{
  struct audit_failure *f;
  va_list ap;

  a->counts[c]++;
  if (a->n_fail >= AUDIT_FAILURES_KEPT || a->fail == NULL)
    return;
  f = &a->fail[a->n_fail++];
  f->line = line;
  f->check = c;
  va_start(ap, fmt);
  vsnprintf(f->detail, sizeof f->detail, fmt, ap);
  va_end(ap);
}

uint64_t
audit_total(const struct audit *a)
{
  uint64_t n = 0;
  int c;

  for (c = 0; c < AUDIT_N_CHECKS; c++)
    n += a->counts[c];
  return n;
}

void
audit_free(struct audit *a)
{
  free(a->rec);
  free(a->fail);
  memset(a, 0, sizeof *a);
}

/* ---- one record ------------------------------------------------------ */

/* A member that is a number (int or double), or null (*null set). */
static int
num_field(struct json_object *o, const char *k, double *v, int *null)
{
  struct json_object *x;

  *null = 0;
  if (!json_object_object_get_ex(o, k, &x))
    return -1;
  if (x == NULL) {
    *null = 1;
    return 0;
  }
  if (!json_object_is_type(x, json_type_double) &&
      !json_object_is_type(x, json_type_int))
    return -1;
  *v = json_object_get_double(x);
  return 0;
}

/* An integer member (ns, seq) or null: 0. */
static int
int_field(struct json_object *o, const char *k, int64_t *v, int optional)
{
  struct json_object *x;

  *v = 0;
  if (!json_object_object_get_ex(o, k, &x))
    return optional ? 0 : -1;
  if (x == NULL)
    return 0;
  if (!json_object_is_type(x, json_type_int))
    return -1;
  *v = json_object_get_int64(x);
  return 0;
}

static int
bool_field(struct json_object *o, const char *k, int *v, int optional)
{
  struct json_object *x;

  *v = 0;
  if (!json_object_object_get_ex(o, k, &x))
    return optional ? 0 : -1;
  if (!json_object_is_type(x, json_type_boolean))
    return -1;
  *v = json_object_get_boolean(x);
  return 0;
}

/* The checks of one record alone; its fields into r.  0, or -1 when it
   is malformed (named). */
static int
check_one(struct audit *a, struct json_object *o, struct audit_record *r)
{
  static const char *const tk[3] = {
    "draw_received_ns", "draw_generated_ns", "draw_sent_ns",
  };
  struct json_object *x;
  double lo, hi;
  int nu, nlo, nhi, greedy, i;
  int64_t seq;
  const char *s, *missing = NULL;

  if (!json_object_is_type(o, json_type_object))
    missing = "a JSON object";
  else if (num_field(o, "u_value", &r->u, &nu) != 0)
    missing = "u_value";
  else if (num_field(o, "cdf_lo", &lo, &nlo) != 0)
    missing = "cdf_lo (a full record: log_level full)";
  else if (num_field(o, "cdf_hi", &hi, &nhi) != 0)
    missing = "cdf_hi";
  else if (bool_field(o, "greedy", &greedy, 0) != 0)
    missing = "greedy";
  else if (bool_field(o, "entropy_is_fallback", &r->fallback, 0) != 0)
    missing = "entropy_is_fallback";
  else if (bool_field(o, "entropy_unjournalled", &r->unjournalled, 1) != 0)
    missing = "entropy_unjournalled";
  else if (!json_object_object_get_ex(o, "entropy_source_used", &x) ||
           !json_object_is_type(x, json_type_string))
    missing = "entropy_source_used";
  else if (int_field(o, "journal_seq", &seq, 1) != 0)
    missing = "journal_seq";
  if (missing == NULL) {
    snprintf(r->source, sizeof r->source, "%s", json_object_get_string(x));
    r->seq = (uint64_t)seq;
    if (json_object_object_get_ex(o, "journal_seq", &x) && x != NULL)
      r->seq = json_object_get_uint64(x);
    for (i = 0; i < 3 && missing == NULL; i++)
      if (int_field(o, tk[i], &r->t[i], 1) != 0)
        missing = tk[i];
  }
  if (missing == NULL) {
    r->nonce = 0;
    if (json_object_object_get_ex(o, "entropy_nonce", &x) && x != NULL) {
      char *end;

      s = json_object_get_string(x);
      errno = 0;
      r->nonce = strtoull(s, &end, 16);
      if (!json_object_is_type(x, json_type_string) || errno || *end ||
          end == s)
        missing = "entropy_nonce (16 hex digits)";
    }
  }
  if (missing == NULL) {
    double step, token;
    int ns, nt, nz, nm;

    if (num_field(o, "step", &step, &ns) != 0 || ns || step < 0)
      missing = "step";
    else if (num_field(o, "token_id", &token, &nt) != 0 || nt)
      missing = "token_id";
    else if (int_field(o, "timestamp_ns", &r->timestamp_ns, 0) != 0)
      missing = "timestamp_ns";
    else if (num_field(o, "z_score", &r->z, &nz) != 0)
      missing = "z_score";
    else if (num_field(o, "sample_mean", &r->mean, &nm) != 0)
      missing = "sample_mean";
    else if (!json_object_object_get_ex(o, "config_hash", &x) ||
             !json_object_is_type(x, json_type_string))
      missing = "config_hash";
    else {
      r->step = (uint64_t)step;
      r->token = (int64_t)token;
      if (nz)
        r->z = NAN;
      if (nm)
        r->mean = NAN;
      snprintf(r->config_hash, sizeof r->config_hash, "%s",
               json_object_get_string(x));
    }
  }
  if (missing != NULL) {
    audit_failed(a, r->line, AUDIT_MALFORMED, "not a libqrs record: no %s",
                 missing);
    return -1;
  }
  if (nu) {
    r->u = NAN;
    if (!greedy) {
      audit_failed(a, r->line, AUDIT_MALFORMED, "u_value is null in a record "
                   "that is not greedy");
      return -1;
    }
  } else if (nlo || nhi) {
    audit_failed(a, r->line, AUDIT_MALFORMED, "cdf_lo or cdf_hi is null");
    return -1;
  } else if (!(lo < r->u && r->u <= hi)) {
    audit_failed(a, r->line, AUDIT_U_OUTSIDE_CDF, "u %.17g is not in its token's "
                 "CDF interval (%.17g, %.17g]", r->u, lo, hi);
  }
  if (r->t[0] && r->t[1] && r->t[2] &&
      !(r->t[0] <= r->t[1] && r->t[1] <= r->t[2]))
    audit_failed(a, r->line, AUDIT_TIMES_ORDER, "received %" PRId64 " generated %"
                 PRId64 " sent %" PRId64 " (ns): not received <= generated <= "
                 "sent", r->t[0], r->t[1], r->t[2]);
  return 0;
}

/* ---- the file -------------------------------------------------------- */

static int
cmp_seq(const void *x, const void *y)
{
  const struct audit_record *a = x, *b = y;

  if (a->seq != b->seq)
    return a->seq < b->seq ? -1 : 1;
  return a->line < b->line ? -1 : a->line > b->line;
}

int
audit_records(struct audit *a, const char *path, char *err, size_t errlen)
{
  struct json_tokener *tok;
  struct json_object *o;
  struct audit_record r, *grown;
  char *line = NULL;
  size_t cap = 0, i;
  uint64_t lineno = 0;
  ssize_t len;
  FILE *f;
  int e = 0;

  if (a->fail == NULL)
    a->fail = calloc(AUDIT_FAILURES_KEPT, sizeof *a->fail);
  tok = json_tokener_new();
  f = fopen(path, "re");
  if (f == NULL || a->fail == NULL || tok == NULL) {
    e = f == NULL ? -errno : -ENOMEM;
    snprintf(err, errlen, "%s: %s", path, strerror(-e));
    goto out;
  }
  while ((len = getline(&line, &cap, f)) >= 0) {
    lineno++;
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
      line[--len] = '\0';
    if (len == 0)
      continue;
    memset(&r, 0, sizeof r);
    r.line = lineno;
    if ((size_t)len > AUDIT_LINE_MAX) {
      audit_failed(a, lineno, AUDIT_MALFORMED, "line of %zd bytes (at most %u)",
                   len, AUDIT_LINE_MAX);
      continue;
    }
    json_tokener_reset(tok);
    o = json_tokener_parse_ex(tok, line, (int)len);
    if (o == NULL || json_tokener_get_parse_end(tok) != (size_t)len) {
      audit_failed(a, lineno, AUDIT_MALFORMED, "not JSON (%s)",
                   o == NULL ? json_tokener_error_desc(json_tokener_get_error(tok))
                             : "text after the object");
      json_object_put(o);
      continue;
    }
    if (check_one(a, o, &r) == 0) {
      if (a->n_rec == a->cap_rec) {
        size_t n = a->cap_rec ? 2 * a->cap_rec : 4096;

        grown = realloc(a->rec, n * sizeof *a->rec);
        if (grown == NULL) {
          json_object_put(o);
          e = -ENOMEM;
          snprintf(err, errlen, "%s: out of memory at line %" PRIu64, path,
                   lineno);
          goto out;
        }
        a->rec = grown;
        a->cap_rec = n;
      }
      a->rec[a->n_rec++] = r;
    }
    json_object_put(o);
  }
  if (ferror(f)) {
    e = -EIO;
    snprintf(err, errlen, "%s: read error", path);
    goto out;
  }
  /* no journal entry named twice: sorted by seq, a reuse is adjacent */
  qsort(a->rec, a->n_rec, sizeof *a->rec, cmp_seq);
  for (i = 1; i < a->n_rec; i++)
    if (a->rec[i].seq != 0 && a->rec[i].seq == a->rec[i - 1].seq)
      audit_failed(a, a->rec[i].line, AUDIT_DRAW_REUSED, "journal entry %" PRIu64
                   " is also the draw of line %" PRIu64 " (a draw used twice)",
                   a->rec[i].seq, a->rec[i - 1].line);
out:
  if (f)
    fclose(f);
  json_tokener_free(tok);
  free(line);
  return e;
}

/* ---- against the journal --------------------------------------------- */

struct jwalk {
  struct audit *a;
  size_t next;                  /* the next record (by seq) to match */
};

/* The n tab-separated fields of line into f (NUL-ended in place). */
static int
split_fields(char *line, char **f, int n)
{
  int i;

  for (i = 0; i < n; i++) {
    f[i] = line;
    line = strchr(line, '\t');
    if (line == NULL)
      return i == n - 1 ? 0 : -1;
    *line++ = '\0';
  }
  return 0;
}

static void
match_entry(struct audit *a, const struct audit_record *r, char *line)
{
  /* seq pid uid source amp amp_params nonce echo t_recv t_gen t_sent
     bytes_sha u fallback prev hash */
  char *f[16];
  double u, t;
  uint64_t nonce;
  int i;

  if (split_fields(line, f, 16) != 0) {
    audit_failed(a, r->line, AUDIT_ENTRY_MISSING, "journal entry %" PRIu64
                 " has not 16 fields", r->seq);
    return;
  }
  u = strtod(f[12], NULL);
  if (isnan(r->u) || u != r->u)
    audit_failed(a, r->line, AUDIT_U_MISMATCH, "record u %.17g, journal entry %"
                 PRIu64 " u %s", r->u, r->seq, f[12]);
  if (strcmp(f[3], r->source) != 0)
    audit_failed(a, r->line, AUDIT_SOURCE_MISMATCH, "record source \"%s\", "
                 "journal entry %" PRIu64 " \"%s\"", r->source, r->seq, f[3]);
  if (r->fallback != (f[13][0] != '\0') ||
      (r->fallback && strcmp(f[13], r->source) != 0))
    audit_failed(a, r->line, AUDIT_FALLBACK_MISMATCH, "record fallback %s (source "
                 "\"%s\"), journal entry %" PRIu64 " fallback \"%s\"",
                 r->fallback ? "true" : "false", r->source, r->seq, f[13]);
  nonce = strtoull(f[6], NULL, 16);
  if (nonce != r->nonce)
    audit_failed(a, r->line, AUDIT_NONCE_MISMATCH, "record nonce %016" PRIx64
                 ", journal entry %" PRIu64 " %s", r->nonce, r->seq, f[6]);
  for (i = 0; i < 3; i++) {
    if (r->t[i] == 0)
      continue;
    /* the journal's %.9f seconds hold a double: about 0.25 us at
       today's epoch; 1 us apart is a different time */
    t = strtod(f[8 + i], NULL);
    if (fabs(t - (double)r->t[i] / 1e9) > 1e-6) {
      audit_failed(a, r->line, AUDIT_TIMES_MISMATCH, "record %s %" PRId64
                   " ns, journal entry %" PRIu64 " %s s", i == 0 ? "received" :
                   i == 1 ? "generated" : "sent", r->t[i], r->seq, f[8 + i]);
      break;
    }
  }
}

static int
on_entry(void *ctx, uint64_t seq, const char *line)
{
  struct jwalk *w = ctx;
  struct audit *a = w->a;
  char buf[JOURNAL_LINE_MAX + 1];

  while (w->next < a->n_rec && a->rec[w->next].seq < seq)
    w->next++;                  /* seq 0 (none), or named twice */
  while (w->next < a->n_rec && a->rec[w->next].seq == seq) {
    snprintf(buf, sizeof buf, "%s", line);
    match_entry(a, &a->rec[w->next], buf);
    w->next++;
  }
  return 0;
}

void
audit_journal(struct audit *a, const char *dir,
              char head[JOURNAL_HEX_LEN + 1], char *err, size_t errlen)
{
  struct jwalk w = { a, 0 };
  size_t i;

  /* records without a journal entry */
  for (i = 0; i < a->n_rec && a->rec[i].seq == 0; i++) {
    if (isnan(a->rec[i].u))
      continue;                 /* greedy: no draw */
    if (a->rec[i].unjournalled)
      audit_failed(a, a->rec[i].line, AUDIT_UNJOURNALLED, "the draw was served "
                   "labelled unjournalled (qrsd's journal could not take it)");
    else
      audit_failed(a, a->rec[i].line, AUDIT_NOT_JOURNALLED, "no journal_seq: the "
                   "draw is in no journal");
  }
  w.next = i;
  a->journal_fault = journal_verify(dir, on_entry, &w, &a->entries, head,
                                    err, errlen);
  for (i = w.next; i < a->n_rec; i++) {
    if (a->journal_fault != JOURNAL_INTACT) {
      a->unchecked++;           /* past the fault: not known */
      continue;
    }
    if (i > 0 && a->rec[i].seq == a->rec[i - 1].seq)
      continue;                 /* named twice: counted already */
    audit_failed(a, a->rec[i].line, AUDIT_ENTRY_MISSING, "journal_seq %" PRIu64
                 " is not in the journal (%" PRIu64 " entries)", a->rec[i].seq,
                 a->entries);
  }
}

struct lined {
  uint64_t line;
  struct audit_sample s;
};

static int
cmp_line(const void *x, const void *y)
{
  const struct lined *p = x, *q = y;

  return (p->line > q->line) - (p->line < q->line);
}

long
audit_samples(const struct audit *a, struct audit_sample **out)
{
  struct audit_sample *s;
  struct lined *l;
  size_t i, n = 0;

  l = malloc((a->n_rec ? a->n_rec : 1) * sizeof(*l));
  s = malloc((a->n_rec ? a->n_rec : 1) * sizeof(*s));
  if (!s || !l) {
    free(s);
    free(l);
    return -ENOMEM;
  }
  for (i = 0; i < a->n_rec; i++) {
    const struct audit_record *r = &a->rec[i];

    if (isnan(r->u))
      continue;
    memset(&l[n], 0, sizeof(l[n]));
    l[n].line = r->line;
    l[n].s.u = r->u;
    l[n].s.t_recv = r->t[0] > 0 ? (double)r->t[0] / 1e9 : 0;
    l[n].s.t_sent = r->t[2] > 0 ? (double)r->t[2] / 1e9 : 0;
    snprintf(l[n].s.source, sizeof(l[n].s.source), "%s", r->source);
    l[n].s.fallback = r->fallback;
    n++;
  }
  /* the checks ordered the records by journal entry: back to line order */
  qsort(l, n, sizeof(*l), cmp_line);
  for (i = 0; i < n; i++)
    s[i] = l[i].s;
  free(l);
  *out = s;
  return (long)n;
}
