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
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "audit.h"
#include "audit_journal.h"
#include "audit_json.h"
#include "audit_stats.h"
#include "sortcmp.h"

static const char *const check_names[AUDIT_N_CHECKS] = {
  [AUDIT_MALFORMED] = "malformed-record",
  [AUDIT_U_OUTSIDE_CDF] = "u-outside-cdf",
  [AUDIT_TIMES_ORDER] = "times-out-of-order",
  [AUDIT_DRAW_REUSED] = "draw-reused",
  [AUDIT_NOT_JOURNALLED] = "draw-not-journalled",
  [AUDIT_UNJOURNALLED] = "draw-unjournalled",
  [AUDIT_ENTRY_MISSING] = "entry-missing",
  [AUDIT_ENTRY_IN_GAP] = "draw-in-gap",
  [AUDIT_U_MISMATCH] = "u-mismatch",
  [AUDIT_SOURCE_MISMATCH] = "source-mismatch",
  [AUDIT_FALLBACK_MISMATCH] = "fallback-mismatch",
  [AUDIT_NONCE_MISMATCH] = "nonce-mismatch",
  [AUDIT_TIMES_MISMATCH] = "times-mismatch",
  [AUDIT_NONCE_CHAIN] = "nonce-chain",
  [AUDIT_CONFIG_MISMATCH] = "config-mismatch",
  [AUDIT_LOGITS_MISSING] = "logits-missing",
  [AUDIT_TOKEN_MISMATCH] = "token-mismatch",
  [AUDIT_RECORDS_TRUNCATED] = "records-truncated",
  [AUDIT_RECORDS_LOST] = "records-lost",
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

void *
audit_failure_json(const char *file, uint64_t line, const char *check,
                   const char *detail)
{
  struct json_object *x = json_object_new_object();

  if (file)
    json_object_object_add(x, "file", json_object_new_string(file));
  json_object_object_add(x, "line", json_object_new_uint64(line));
  json_object_object_add(x, "check", json_object_new_string(check));
  json_object_object_add(x, "detail", json_object_new_string(detail));
  return x;
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
num_field(const struct aj_value *x, double *v, int *null)
{
  *null = x->kind == AJ_NULL;
  if (x->kind == AJ_NULL)
    return 0;
  if (x->kind != AJ_INT && x->kind != AJ_UINT && x->kind != AJ_DOUBLE)
    return -1;
  *v = x->d;
  return 0;
}

/* An integer member (ns, seq) or null: 0. */
static int
int_field(const struct aj_value *x, int64_t *v, int optional)
{
  *v = 0;
  if (x->kind == AJ_ABSENT)
    return optional ? 0 : -1;
  if (x->kind == AJ_NULL)
    return 0;
  if (x->kind == AJ_UINT)
    *v = INT64_MAX;             /* as json-c reads it */
  else if (x->kind == AJ_INT)
    *v = x->i;
  else
    return -1;
  return 0;
}

static int
bool_field(const struct aj_value *x, int *v, int optional)
{
  *v = 0;
  if (x->kind == AJ_ABSENT)
    return optional ? 0 : -1;
  if (x->kind != AJ_BOOL)
    return -1;
  *v = x->b;
  return 0;
}

/* "emitted" and "emitted_token" into r (absent: emitted, as every record
   of a sampler whose tokens are always used).  0, or -1 when malformed. */
static int
emission(const struct aj_value *e, const struct aj_value *t,
         struct audit_record *r)
{
  r->emitted = 1;
  r->emitted_token = -1;
  if (e->kind == AJ_NULL)
    r->emitted = -1;
  else if (e->kind == AJ_BOOL)
    r->emitted = e->b;
  else if (e->kind != AJ_ABSENT)
    return -1;
  if (t->kind == AJ_ABSENT)
    return 0;
  if (r->emitted != 0 || t->kind != AJ_INT || t->i < 0 ||
      t->i > (int64_t)UINT32_MAX)
    return -1;
  r->emitted_token = t->i;
  return 0;
}

/* A string member into dst[size], cut to fit. */
static void
copy_cut(char *dst, size_t size, const struct aj_value *x)
{
  size_t n = x->len < size - 1 ? x->len : size - 1;

  memcpy(dst, x->s, n);
  dst[n] = '\0';
}

/* The checks of one record alone (its members in v); its fields into r.
   0, or -1 when it is malformed (named). */
static int
check_one(struct audit *a, const struct aj_value *v, struct audit_record *r)
{
  static const enum aj_member tk[3] = { AJ_RECEIVED, AJ_GENERATED, AJ_SENT };
  static const char *const tk_name[3] = {
    "draw_received_ns", "draw_generated_ns", "draw_sent_ns",
  };
  const struct aj_value *x;
  double lo = 0, hi = 0;
  int nu, nlo, nhi, greedy, i;
  int64_t seq;
  const char *missing = NULL;

  if (num_field(&v[AJ_U_VALUE], &r->u, &nu) != 0)
    missing = "u_value";
  else if (num_field(&v[AJ_CDF_LO], &lo, &nlo) != 0)
    missing = "cdf_lo (a full record: log_level full)";
  else if (num_field(&v[AJ_CDF_HI], &hi, &nhi) != 0)
    missing = "cdf_hi";
  else if (bool_field(&v[AJ_GREEDY], &greedy, 0) != 0)
    missing = "greedy";
  else if (bool_field(&v[AJ_FALLBACK], &r->fallback, 0) != 0)
    missing = "entropy_is_fallback";
  else if (bool_field(&v[AJ_UNJOURNALLED], &r->unjournalled, 1) != 0)
    missing = "entropy_unjournalled";
  else if (v[AJ_SOURCE].kind != AJ_STRING)
    missing = "entropy_source_used";
  else if (int_field(&v[AJ_JOURNAL_SEQ], &seq, 1) != 0)
    missing = "journal_seq";
  if (missing == NULL) {
    copy_cut(r->source, sizeof r->source, &v[AJ_SOURCE]);
    x = &v[AJ_JOURNAL_SEQ];
    r->seq = x->kind == AJ_UINT ? x->u :
             x->kind == AJ_INT && x->i > 0 ? (uint64_t)x->i : 0;
    for (i = 0; i < 3 && missing == NULL; i++)
      if (int_field(&v[tk[i]], &r->t[i], 1) != 0)
        missing = tk_name[i];
  }
  if (missing == NULL) {
    x = &v[AJ_NONCE];
    r->nonce = 0;
    if (x->kind != AJ_ABSENT && x->kind != AJ_NULL) {
      if (x->kind != AJ_STRING || x->len == 0 || x->len > 16 ||
          aj_hex64(x->s, x->s + x->len, &r->nonce) != 0)
        missing = "entropy_nonce (16 hex digits)";
    }
  }
  if (missing == NULL) {
    x = &v[AJ_TOKEN_PROB];
    r->token_prob = x->kind == AJ_INT || x->kind == AJ_UINT ||
                    x->kind == AJ_DOUBLE ? x->d : NAN;
  }
  if (missing == NULL) {
    double step, token;
    int ns, nt, nz, nm;

    /* integers that fit what they are kept in (a cast out of range is
       undefined) */
    if (num_field(&v[AJ_STEP], &step, &ns) != 0 || ns ||
        !(step >= 0 && step < 0x1p64) || step != floor(step))
      missing = "step (an integer, 0 to 2^64 - 1)";
    else if (num_field(&v[AJ_TOKEN], &token, &nt) != 0 || nt ||
             !(token >= -0x1p63 && token < 0x1p63) || token != floor(token))
      missing = "token_id (an integer, -2^63 to 2^63 - 1)";
    else if (int_field(&v[AJ_TIMESTAMP], &r->timestamp_ns, 0) != 0)
      missing = "timestamp_ns";
    else if (num_field(&v[AJ_Z], &r->z, &nz) != 0)
      missing = "z_score";
    else if (num_field(&v[AJ_MEAN], &r->mean, &nm) != 0)
      missing = "sample_mean";
    else if (v[AJ_CONFIG_HASH].kind != AJ_STRING)
      missing = "config_hash";
    else if (emission(&v[AJ_EMITTED], &v[AJ_EMITTED_TOKEN], r) != 0)
      missing = "a valid emitted (true, false or null; emitted_token, an "
                "integer, only with false)";
    else {
      r->step = (uint64_t)step;
      r->token = (int64_t)token;
      if (nz)
        r->z = NAN;
      if (nm)
        r->mean = NAN;
      copy_cut(r->config_hash, sizeof r->config_hash, &v[AJ_CONFIG_HASH]);
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

  return SORT_ORDER2(a->seq, b->seq, a->line, b->line);
}

#define FRAME_HEAD "{\"qrs_records\": "
#define FRAME_END "{\"qrs_records_end\": "

/* The end line's two counts, "N, \"lost\": M}" at p; 0, or -1 when it is
   not that. */
static int
frame_counts(const char *p, const char *end, uint64_t *ret_n,
             uint64_t *ret_lost)
{
  static const char mid[] = ", \"lost\": ";
  uint64_t v[2] = { 0, 0 };
  int k, digits;

  for (k = 0; k < 2; k++) {
    for (digits = 0; p < end && *p >= '0' && *p <= '9'; p++, digits++) {
      if (digits == 19)
        return -1;
      v[k] = v[k] * 10 + (uint64_t)(*p - '0');
    }
    if (digits == 0)
      return -1;
    if (k == 0) {
      if ((size_t)(end - p) < sizeof(mid) - 1 ||
          memcmp(p, mid, sizeof(mid) - 1) != 0)
        return -1;
      p += sizeof(mid) - 1;
    }
  }
  if (end - p != 1 || *p != '}')
    return -1;
  *ret_n = v[0];
  *ret_lost = v[1];
  return 0;
}

/* A records file an engine's writer frames (qrs.vllm's $QRS_RECORDS_DIR:
   a header line, the records, an end line with their count): 1 when line
   is the header or the end line (checked here), 0 when it is neither. */
static int
frame_line(struct audit *a, const char *line, size_t len, uint64_t lineno)
{
  uint64_t n, lost;

  if (len >= sizeof(FRAME_HEAD) - 1 &&
      memcmp(line, FRAME_HEAD, sizeof(FRAME_HEAD) - 1) == 0) {
    if (a->frame_line || a->n_rec)
      audit_failed(a, lineno, AUDIT_MALFORMED, "a header line past the "
                   "file's start (files put together?)");
    else
      a->frame_line = lineno;
    return 1;
  }
  if (len < sizeof(FRAME_END) - 1 ||
      memcmp(line, FRAME_END, sizeof(FRAME_END) - 1) != 0)
    return 0;
  if (!a->frame_line || a->frame_end_line) {
    audit_failed(a, lineno, AUDIT_MALFORMED, "an end line %s",
                 a->frame_end_line ? "after the end line" :
                                     "without a header line");
    return 1;
  }
  a->frame_end_line = lineno;
  if (frame_counts(line + sizeof(FRAME_END) - 1, line + len, &n, &lost) < 0)
    audit_failed(a, lineno, AUDIT_MALFORMED, "an end line that is not "
                 "{\"qrs_records_end\": N, \"lost\": M}");
  else if (n != a->frame_records || lost != 0)
    audit_failed(a, lineno, AUDIT_RECORDS_LOST, "the writer counted %"
                 PRIu64 " records and dropped %" PRIu64 "; the file has %"
                 PRIu64, n, lost, a->frame_records);
  return 1;
}

/* One line of the records (len bytes at line, AJ_PADDING more
   readable): checked and kept.  0, or -ENOMEM. */
static int
record_line(struct audit *a, struct aj_parser *p, const char *line,
            size_t len, uint64_t lineno)
{
  struct aj_value v[AJ_N_MEMBERS];
  struct audit_record r, *grown;
  char why[160];
  size_t n;
  int k;

  while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
    len--;
  if (len == 0)
    return 0;
  if (len > AUDIT_LINE_MAX) {
    audit_failed(a, lineno, AUDIT_MALFORMED, "line of %zu bytes (at most %u)",
                 len, AUDIT_LINE_MAX);
    return 0;
  }
  if (frame_line(a, line, len, lineno))
    return 0;
  if (a->frame_end_line) {
    audit_failed(a, lineno, AUDIT_MALFORMED, "a record after the end line "
                 "(line %" PRIu64 ")", a->frame_end_line);
    return 0;
  }
  k = aj_parse(p, line, len, v, why, sizeof why);
  if (k < 0) {
    audit_failed(a, lineno, AUDIT_MALFORMED, "not JSON (%s)", why);
    return 0;
  }
  if (k > 0) {
    audit_failed(a, lineno, AUDIT_MALFORMED, "not a libqrs record: not a "
                 "JSON object");
    return 0;
  }
  memset(&r, 0, sizeof r);
  r.line = lineno;
  if (check_one(a, v, &r) != 0)
    return 0;
  if (a->n_rec == a->cap_rec) {
    n = a->cap_rec ? 2 * a->cap_rec : 4096;
    grown = realloc(a->rec, n * sizeof *a->rec);
    if (grown == NULL)
      return -ENOMEM;
    a->rec = grown;
    a->cap_rec = n;
  }
  a->rec[a->n_rec++] = r;
  if (r.emitted < 0)
    a->emission_unknown++;
  else if (r.emitted == 0 && r.emitted_token >= 0)
    a->overridden++;
  else if (r.emitted == 0)
    a->rejected++;
  if (v[AJ_DEVICE_SELECTION].kind == AJ_STRING) {
    if (strcmp(v[AJ_DEVICE_SELECTION].s, "certified") == 0)
      a->device_certified++;
    else if (strcmp(v[AJ_DEVICE_SELECTION].s, "uncertified") == 0)
      a->device_uncertified++;
  }
  if (a->frame_line)
    a->frame_records++;
  return 0;
}

/* The lines of a regular file, mapped: no copy but the last line's (the
   parser reads past a line's end, and past the map there is nothing). */
static int
read_mapped(struct audit *a, struct aj_parser *p, int fd, size_t size,
            uint64_t *lineno)
{
  const char *m, *at, *end, *nl;
  char *tail = NULL;
  size_t len;
  int e = 0;

  if (size == 0)
    return 0;
  m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (m == MAP_FAILED)
    return -errno;
  (void)madvise((void *)m, size, MADV_SEQUENTIAL);
  end = m + size;
  for (at = m; at < end && e == 0; at = nl + 1) {
    nl = memchr(at, '\n', (size_t)(end - at));
    if (nl == NULL)
      nl = end;
    len = (size_t)(nl - at);
    ++*lineno;
    if (nl + AJ_PADDING < end || len > AUDIT_LINE_MAX) {
      e = record_line(a, p, at, len, *lineno);
      continue;
    }
    tail = malloc(len + AJ_PADDING);
    if (tail == NULL) {
      e = -ENOMEM;
      break;
    }
    memcpy(tail, at, len);
    e = record_line(a, p, tail, len, *lineno);
    free(tail);
  }
  munmap((void *)m, size);
  return e;
}

static void
overlong(struct audit *a, uint64_t lineno, uint64_t len)
{
  audit_failed(a, lineno, AUDIT_MALFORMED, "line of %" PRIu64 " bytes (at "
               "most %u)", len, AUDIT_LINE_MAX);
}

/* The lines of anything else (a pipe, a terminal), read in blocks into a
   buffer of a bounded size: a line longer than AUDIT_LINE_MAX is counted
   and refused as it streams past, never held whole. */
static int
read_stream(struct audit *a, struct aj_parser *p, int fd, uint64_t *lineno)
{
  size_t cap = 2 * (size_t)AUDIT_LINE_MAX + 2, at = 0, end = 0, len;
  uint64_t skipped = 0;
  int eof = 0, skipping = 0, e = 0;
  char *buf, *nl;
  ssize_t n;

  buf = malloc(cap + AJ_PADDING);
  if (buf == NULL)
    return -ENOMEM;
  while (e == 0) {
    nl = memchr(buf + at, '\n', end - at);
    if (nl != NULL) {
      len = (size_t)(nl - (buf + at));
      if (skipping) {
        overlong(a, *lineno, skipped + len);
        skipping = 0;
      } else {
        ++*lineno;
        e = record_line(a, p, buf + at, len, *lineno);
      }
      at += len + 1;
      continue;
    }
    if (end - at > AUDIT_LINE_MAX) {
      /* no newline within the limit: drop what is held, count the rest */
      if (!skipping) {
        ++*lineno;
        skipping = 1;
        skipped = 0;
      }
      skipped += end - at;
      at = end = 0;
    }
    if (eof) {
      if (skipping)
        overlong(a, *lineno, skipped + (end - at));
      else if (end > at)
        e = record_line(a, p, buf + at, end - at, ++*lineno);
      break;
    }
    memmove(buf, buf + at, end - at);
    end -= at;
    at = 0;
    n = read(fd, buf + end, cap - end);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      e = -EIO;
      break;
    }
    if (n == 0)
      eof = 1;
    end += (size_t)n;
  }
  free(buf);
  return e;
}

int
audit_records(struct audit *a, const char *path, char *err, size_t errlen)
{
  struct aj_parser *p;
  struct stat st;
  uint64_t lineno = 0;
  size_t i;
  FILE *f;
  int e = 0;

  if (a->fail == NULL)
    a->fail = calloc(AUDIT_FAILURES_KEPT, sizeof *a->fail);
  p = aj_parser_new();
  f = fopen(path, "re");
  if (f == NULL || a->fail == NULL || p == NULL) {
    e = f == NULL ? -errno : -ENOMEM;
    snprintf(err, errlen, "%s: %s", path, strerror(-e));
    goto out;
  }
  if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode))
    e = read_mapped(a, p, fileno(f), (size_t)st.st_size, &lineno);
  else
    e = read_stream(a, p, fileno(f), &lineno);
  if (e == -ENOMEM) {
    snprintf(err, errlen, "%s: out of memory at line %" PRIu64, path,
             lineno);
    goto out;
  }
  if (e < 0) {
    snprintf(err, errlen, "%s: %s", path, e == -EIO ? "read error" :
             strerror(-e));
    goto out;
  }
  if (a->frame_line && !a->frame_end_line)
    audit_failed(a, lineno, AUDIT_RECORDS_TRUNCATED, "no end line after %"
                 PRIu64 " records: the writer stopped before the request "
                 "ended (the process died?)", a->frame_records);
  /* no journal entry named twice: sorted by seq, a reuse is adjacent
     (a run's records are mostly in seq order already: then no sort) */
  for (i = 1; i < a->n_rec && cmp_seq(&a->rec[i - 1], &a->rec[i]) < 0; i++)
    ;
  if (i < a->n_rec)
    qsort(a->rec, a->n_rec, sizeof *a->rec, cmp_seq);
  for (i = 1; i < a->n_rec; i++)
    if (a->rec[i].seq != 0 && a->rec[i].seq == a->rec[i - 1].seq)
      audit_failed(a, a->rec[i].line, AUDIT_DRAW_REUSED, "journal entry %" PRIu64
                   " is also the draw of line %" PRIu64 " (a draw used twice)",
                   a->rec[i].seq, a->rec[i - 1].line);
out:
  if (f)
    fclose(f);
  aj_parser_free(p);
  return e;
}

/* ---- against the journal --------------------------------------------- */

struct jwalk {
  struct audit *a;
  size_t next;                  /* the next record (by seq) to match */
};

/* Eight bytes at a time, each tab found exactly by its zero byte in
   word ^ tabs (one memchr() call per field was most of this). */
int
audit_split_fields(const char *line, size_t len, struct jfield *f, int n)
{
  const uint64_t tabs = 0x0909090909090909ull, low7 = 0x7f7f7f7f7f7f7f7full;
  uint64_t w, z;
  size_t off, k;
  int i = 0;

  f[0].s = line;
  for (off = 0; off + 8 <= len && i < n - 1; off += 8) {
    memcpy(&w, line + off, 8);
    w ^= tabs;
    z = ~(((w & low7) + low7) | w | low7);  /* 0x80 where a tab was */
    while (z != 0 && i < n - 1) {
      k = off + (size_t)__builtin_ctzll(z) / 8;
      f[i].e = line + k;
      f[++i].s = line + k + 1;
      z &= z - 1;
    }
  }
  for (k = off; k < len && i < n - 1; k++)
    if (line[k] == '\t') {
      f[i].e = line + k;
      f[++i].s = line + k + 1;
    }
  if (i < n - 1)
    return -1;
  f[i].e = line + len;
  return 0;
}

int
audit_field_is(const struct jfield *f, const char *s)
{
  size_t n = strlen(s);

  return (size_t)(f->e - f->s) == n && memcmp(f->s, s, n) == 0;
}

/* A journal time ("%.9f" seconds) in ns: 0, or -1 when it is not
   written so (then it is read as a number). */
static int
fixed9_ns(const struct jfield *f, int64_t *ns)
{
  const char *p = f->s;
  int64_t v = 0;
  int k;

  for (; p < f->e && *p >= '0' && *p <= '9'; p++) {
    if (v > (INT64_MAX / 1000000000 - 9) / 10)
      return -1;
    v = 10 * v + (*p - '0');
  }
  if (p == f->s || f->e - p != 10 || *p != '.')
    return -1;
  for (k = 0, p++; k < 9; k++, p++) {
    if (*p < '0' || *p > '9')
      return -1;
    v = 10 * v + (*p - '0');
  }
  *ns = v;
  return 0;
}

static void
match_entry(struct audit *a, const struct audit_record *r, const char *line,
            size_t len)
{
  /* seq pid uid source amp amp_params nonce echo t_recv t_gen t_sent
     bytes_sha u fallback prev hash */
  struct jfield f[16];
  double u, t;
  int64_t ns;
  uint64_t nonce;
  int i, fb, off;

  if (audit_split_fields(line, len, f, 16) != 0) {
    audit_failed(a, r->line, AUDIT_ENTRY_MISSING, "journal entry %" PRIu64
                 " has not 16 fields", r->seq);
    return;
  }
#define FIELD(k) (int)(f[k].e - f[k].s), f[k].s
  if (aj_number(f[12].s, f[12].e, &u) != 0 || isnan(r->u) || u != r->u)
    audit_failed(a, r->line, AUDIT_U_MISMATCH, "record u %.17g, journal entry %"
                 PRIu64 " u %.*s", r->u, r->seq, FIELD(12));
  if (!audit_field_is(&f[3], r->source))
    audit_failed(a, r->line, AUDIT_SOURCE_MISMATCH, "record source \"%s\", "
                 "journal entry %" PRIu64 " \"%.*s\"", r->source, r->seq,
                 FIELD(3));
  fb = f[13].e != f[13].s;
  if (r->fallback != fb ||
      (r->fallback && !audit_field_is(&f[13], r->source)))
    audit_failed(a, r->line, AUDIT_FALLBACK_MISMATCH, "record fallback %s (source "
                 "\"%s\"), journal entry %" PRIu64 " fallback \"%.*s\"",
                 r->fallback ? "true" : "false", r->source, r->seq, FIELD(13));
  if (aj_hex64(f[6].s, f[6].e, &nonce) != 0 || nonce != r->nonce)
    audit_failed(a, r->line, AUDIT_NONCE_MISMATCH, "record nonce %016" PRIx64
                 ", journal entry %" PRIu64 " %.*s", r->nonce, r->seq,
                 FIELD(6));
  for (i = 0; i < 3; i++) {
    if (r->t[i] == 0)
      continue;
    /* the journal's %.9f seconds hold a double: about 0.25 us at
       today's epoch; 1 us apart is a different time */
    if (fixed9_ns(&f[8 + i], &ns) == 0)
      off = ns - r->t[i] > 1000 || r->t[i] - ns > 1000;
    else
      off = aj_number(f[8 + i].s, f[8 + i].e, &t) != 0 ||
            fabs(t - (double)r->t[i] / 1e9) > 1e-6;
    if (off) {
      audit_failed(a, r->line, AUDIT_TIMES_MISMATCH, "record %s %" PRId64
                   " ns, journal entry %" PRIu64 " %.*s s", i == 0 ? "received" :
                   i == 1 ? "generated" : "sent", r->t[i], r->seq,
                   FIELD(8 + i));
      break;
    }
  }
#undef FIELD
}

/* The records whose draws are in a gap of the journal: named, with why
   the journal has no entry for them. */
static int
on_gap(void *ctx, uint64_t first, uint64_t last, const char *reason)
{
  struct jwalk *w = ctx;
  struct audit *a = w->a;

  while (w->next < a->n_rec && a->rec[w->next].seq < first)
    w->next++;
  for (; w->next < a->n_rec && a->rec[w->next].seq <= last; w->next++)
    audit_failed(a, a->rec[w->next].line, AUDIT_ENTRY_IN_GAP,
                 "journal_seq %" PRIu64 " is in the journal's gap %" PRIu64
                 "..%" PRIu64 " (%s): %s", a->rec[w->next].seq, first, last,
                 reason, strcmp(reason, JOURNAL_GAP_RESTART) == 0 ?
                 "served in the flush window of a qrsd that stopped "
                 "without closing its journal" :
                 "served, and lost to a write error");
  return 0;
}

static int
on_entry(void *ctx, uint64_t seq, const char *line, size_t len)
{
  struct jwalk *w = ctx;
  struct audit *a = w->a;

  if (seq == 0)
    return 0;                   /* a study record: no draw */
  while (w->next < a->n_rec && a->rec[w->next].seq < seq)
    w->next++;                  /* seq 0 (none), or named twice */
  while (w->next < a->n_rec && a->rec[w->next].seq == seq) {
    match_entry(a, &a->rec[w->next], line, len);
    w->next++;
  }
  return 0;
}

void
audit_journal(struct audit *a, const char *dir, int pruned,
              struct audit_checkpoint *cps, size_t n,
              struct audit_journal_result *res, char *err, size_t errlen)
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
  a->journal_fault = audit_journal_walk(dir, pruned, cps, n, on_entry,
                                       on_gap, &w, res, err, errlen);
  a->entries = res->entries;
  /* a pruned journal: the draws of the files deleted are not known */
  for (i = 0; i < a->n_rec && res->first_file > 1; i++)
    if (a->rec[i].seq != 0 && a->rec[i].seq < res->first_seq)
      a->unchecked++;
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

  return SORT_ORDER(p->line, q->line);
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
