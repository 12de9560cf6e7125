/* Upstream quotas; see quota.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "base/log.h"
#include "base/regfile.h"
#include "persist/quota.h"

#define STATE_MAX 8192
#define MINUTE_MAX_PAIRS 64             /* [second, count] pairs kept */

void
quota_params_default(struct quota_params *p)
{
  p->max_bytes_per_request = 35200;
  p->max_requests_per_minute = 500;
  p->max_bytes_per_day = 524288000;
}

static int64_t
utc_day(time_t t)
{
  return (int64_t)(t >= 0 ? t / 86400 : (t - 86399) / 86400);
}

static void
day_string(int64_t day, char *buf, size_t len)
{
  time_t t = (time_t)(day * 86400);
  struct tm tm;

  gmtime_r(&t, &tm);
  strftime(buf, len, "%Y-%m-%d", &tm);
}

static void
prune(struct quota *q, double now_mono)
{
  size_t cap = (size_t)q->p.max_requests_per_minute, oldest;

  while (q->ring_len > 0) {
    oldest = (q->ring_head + cap - q->ring_len) % cap;
    if (now_mono - q->ring[oldest] < 60.0)
      break;
    q->ring_len--;
  }
}

/* Restore the per-minute window from "minute": [[t, k], ...] (k
   admissions at wall-clock second t, rounded up): those younger than 60 s
   at now go back into the ring, at their age on the monotonic clock,
   newest kept when the ceiling is now lower. */
static void
restore_minute(struct quota *q, struct json_object *jm, double now_mono,
               time_t now_real)
{
  size_t cap = (size_t)q->p.max_requests_per_minute, i, n, k;
  struct json_object *e, *jt, *jk;
  int64_t t, cnt;
  double at;

  if (!cap || !json_object_is_type(jm, json_type_array))
    return;
  n = json_object_array_length(jm);
  for (i = 0; i < n && i < MINUTE_MAX_PAIRS; i++) {
    e = json_object_array_get_idx(jm, i);
    if (!json_object_is_type(e, json_type_array) ||
        json_object_array_length(e) != 2)
      continue;
    jt = json_object_array_get_idx(e, 0);
    jk = json_object_array_get_idx(e, 1);
    if (!json_object_is_type(jt, json_type_int) ||
        !json_object_is_type(jk, json_type_int))
      continue;
    t = json_object_get_int64(jt);
    cnt = json_object_get_int64(jk);
    if (cnt <= 0 || (int64_t)now_real - t >= 60)
      continue;
    at = now_mono - (double)((int64_t)now_real - t);
    if (at > now_mono)
      at = now_mono;
    for (k = 0; k < (size_t)cnt && k < cap; k++) {
      q->ring[q->ring_head] = at;
      q->ring_head = (q->ring_head + 1) % cap;
      if (q->ring_len < cap)
        q->ring_len++;
    }
  }
}

/* The UTC day of "YYYY-MM-DD" in *ret_day, or -EINVAL. */
static int
parse_day(const char *text, int64_t *ret_day)
{
  char back[16];
  struct tm tm;
  int64_t day;
  int y, m, d;

  if (strlen(text) != 10 || sscanf(text, "%4d-%2d-%2d", &y, &m, &d) != 3)
    return -EINVAL;
  memset(&tm, 0, sizeof(tm));
  tm.tm_year = y - 1900;
  tm.tm_mon = m - 1;
  tm.tm_mday = d;
  day = utc_day(timegm(&tm));
  day_string(day, back, sizeof(back));
  if (strcmp(back, text) != 0)
    return -EINVAL;               /* 2025-02-30 and the like */
  *ret_day = day;
  return 0;
}

static int
load_state(struct quota *q, double now_mono, time_t now_real, char *err,
           size_t errlen)
{
  struct json_object *j = NULL, *jd, *jb, *jm;
  char *text, today[16];
  int64_t day;
  uint64_t used;
  int r;

  /* Not a link, a FIFO or a device: the start-up never blocks here. */
  r = regfile_read(q->path, 0, STATE_MAX, &text, NULL, err, errlen);
  if (r == -ENOENT)
    return 0;
  if (r < 0)
    return r;
  j = json_tokener_parse(text);
  free(text);
  if (!j || !json_object_object_get_ex(j, "day", &jd) ||
      !json_object_is_type(jd, json_type_string) ||
      parse_day(json_object_get_string(jd), &day) < 0 ||
      !json_object_object_get_ex(j, "bytes_used", &jb) ||
      !json_object_is_type(jb, json_type_int) ||
      json_object_get_int64(jb) < 0) {
    snprintf(err, errlen, "%s: not a quota state file (expected "
             "{\"day\":\"YYYY-MM-DD\",\"bytes_used\":N}); remove it to "
             "reset today's count", q->path);
    json_object_put(j);
    return -EINVAL;
  }
  used = (uint64_t)json_object_get_int64(jb);
  /* A day after today: the clock went back (or the file came from
     elsewhere).  Forgetting its count would grant a fresh day: keep the
     larger one, and say so. */
  if (day > q->day) {
    day_string(q->day, today, sizeof(today));
    log_warn("%s is dated %s, after today (%s): has the clock gone back? "
             "counting its %llu bytes as used today", q->path,
             json_object_get_string(jd), today, (unsigned long long)used);
  }
  if (day >= q->day && used > q->day_bytes) {
    q->day_bytes = used;
    q->persisted = used;
  }
  if (json_object_object_get_ex(j, "minute", &jm))
    restore_minute(q, jm, now_mono, now_real);
  json_object_put(j);
  return 0;
}

/* The state file's text: the day's count as value and the per-minute
   window as [second, count] pairs of wall-clock seconds, each
   admission's time rounded up (a restored entry expires no earlier than
   the real one).  buf has QUOTA_STATE_MAX bytes; returns the length. */
static size_t
serialize(struct quota *q, uint64_t value, double now_mono, time_t now_real,
          char *buf)
{
  size_t cap = (size_t)q->p.max_requests_per_minute, i, idx, pairs = 0;
  char day[16];
  int64_t sec = 0, last = 0;
  uint64_t cnt = 0;
  int n;

  if (cap)
    prune(q, now_mono);
  day_string(q->day, day, sizeof(day));
  n = snprintf(buf, QUOTA_STATE_MAX, "{\"day\":\"%s\",\"bytes_used\":%llu,"
               "\"minute\":[", day, (unsigned long long)value);
  for (i = 0; cap && i <= q->ring_len; i++) {
    if (i < q->ring_len) {
      idx = (q->ring_head + cap - q->ring_len + i) % cap;
      sec = (int64_t)now_real + 1 -
            (int64_t)(now_mono - q->ring[idx]);
      if (sec == last) {
        cnt++;
        continue;
      }
    }
    if (cnt && pairs < MINUTE_MAX_PAIRS) {
      n += snprintf(buf + n, QUOTA_STATE_MAX - (size_t)n, "%s[%lld,%llu]",
                    pairs ? "," : "", (long long)last,
                    (unsigned long long)cnt);
      pairs++;
    }
    if (i < q->ring_len) {
      last = sec;
      cnt = 1;
    }
  }
  n += snprintf(buf + n, QUOTA_STATE_MAX - (size_t)n, "]}\n");
  return (size_t)n;
}

/* The reservation block: 1/256 of the daily limit (at least a byte), or
   QUOTA_PERSIST_BLOCK without one. */
static uint64_t
block_size(const struct quota *q)
{
  uint64_t block = q->p.max_bytes_per_day / 256;

  if (!q->p.max_bytes_per_day)
    return QUOTA_PERSIST_BLOCK;
  return block ? block : 1;
}

/* What is left of today's allowance (UINT64_MAX without a limit). */
static uint64_t
remaining(const struct quota *q)
{
  if (!q->p.max_bytes_per_day)
    return UINT64_MAX;
  return q->day_bytes < q->p.max_bytes_per_day ?
         q->p.max_bytes_per_day - q->day_bytes : 0;
}

static uint64_t
min_u64(uint64_t a, uint64_t b)
{
  return a < b ? a : b;
}

int
quota_init(struct quota *q, const struct quota_params *p,
           const char *state_dir, const char *name, double now_mono,
           time_t now_real, char *err, size_t errlen)
{
  char *safe, *c;
  int r;

  memset(q, 0, sizeof(*q));
  if (p->max_requests_per_minute > QUOTA_MAX_RPM) {
    snprintf(err, errlen, "max_requests_per_minute above %d",
             QUOTA_MAX_RPM);
    return -EINVAL;
  }
  q->p = *p;
  q->day = utc_day(now_real);
  if (p->max_requests_per_minute) {
    q->ring = calloc(p->max_requests_per_minute, sizeof(*q->ring));
    if (!q->ring)
      return -ENOMEM;
  }
  if (!state_dir || !*state_dir)
    return 0;

  safe = strdup(name);
  if (!safe)
    return -ENOMEM;
  for (c = safe; *c; c++)
    if (!(*c >= 'a' && *c <= 'z') && !(*c >= 'A' && *c <= 'Z') &&
        !(*c >= '0' && *c <= '9') && *c != '-' && *c != '_' && *c != '.')
      *c = '_';
  r = asprintf(&q->path, "%s/quota-%s.json", state_dir, safe);
  free(safe);
  if (r < 0) {
    q->path = NULL;
    return -ENOMEM;
  }
  /* Nothing is written until the first admission (quota_persist_due()):
     a run that fetches nothing costs nothing. */
  return load_state(q, now_mono, now_real, err, errlen);
}

void
quota_done(struct quota *q)
{
  free(q->ring);
  free(q->path);
  q->ring = NULL;
  q->path = NULL;
}

size_t
quota_chunk(const struct quota *q, size_t n, size_t *ret_requests)
{
  size_t chunk = n;

  if (q->p.max_bytes_per_request && chunk > q->p.max_bytes_per_request)
    chunk = (size_t)q->p.max_bytes_per_request;
  if (chunk == 0)
    chunk = 1;
  if (ret_requests)
    *ret_requests = n / chunk + (n % chunk != 0);
  return chunk;
}

static void
roll_day(struct quota *q, time_t now_real)
{
  int64_t d = utc_day(now_real);

  if (d != q->day) {
    q->day = d;
    q->day_bytes = 0;
    q->persisted = 0;
    q->admitted = 0;
  }
}

enum quota_verdict
quota_admit(struct quota *q, size_t n, double now_mono, time_t now_real)
{
  size_t requests, i, cap = (size_t)q->p.max_requests_per_minute;

  quota_chunk(q, n, &requests);
  if (cap) {
    prune(q, now_mono);
    if (requests > cap - q->ring_len) {
      q->refused_rpm++;
      return QUOTA_RPM;
    }
  }
  roll_day(q, now_real);
  if (q->p.max_bytes_per_day &&
      (n > q->p.max_bytes_per_day ||
       q->day_bytes > q->p.max_bytes_per_day - n)) {
    q->refused_day++;
    return QUOTA_DAY;
  }

  for (i = 0; cap && i < requests; i++) {
    q->ring[q->ring_head] = now_mono;
    q->ring_head = (q->ring_head + 1) % cap;
    q->ring_len++;
  }
  q->day_bytes += n;
  q->admitted = 1;
  return QUOTA_OK;
}

int
quota_persist_due(struct quota *q, double now_mono, time_t now_real,
                  char *buf, size_t *ret_len, uint64_t *ret_value)
{
  uint64_t block, rem;

  if (!q->path || q->pending)
    return 0;
  roll_day(q, now_real);
  if (!q->admitted)
    return 0;                     /* nothing to reserve for yet today */
  block = block_size(q);
  rem = remaining(q);
  /* Due when less than half a block is left of the reservation (or of
     the allowance, when that is less); never beyond the allowance. */
  if (q->day_bytes + min_u64(block / 2, rem) <= q->persisted)
    return 0;
  *ret_value = q->day_bytes + min_u64(block, rem);
  *ret_len = serialize(q, *ret_value, now_mono, now_real, buf);
  q->pending = 1;
  q->pending_day = q->day;
  return 1;
}

void
quota_persist_done(struct quota *q, uint64_t value, int r)
{
  q->pending = 0;
  q->persist_error = r;
  if (q->reset_pending) {
    q->reset_pending = 0;       /* written before the reset: stale */
    return;
  }
  if (r == 0 && q->pending_day == q->day && value > q->persisted)
    q->persisted = value;
}

uint64_t
quota_minute_requests(struct quota *q, double now_mono)
{
  if (q->p.max_requests_per_minute)
    prune(q, now_mono);
  return q->ring_len;
}

uint64_t
quota_day_bytes(struct quota *q, time_t now_real)
{
  roll_day(q, now_real);
  return q->day_bytes;
}

int
quota_flush_due(struct quota *q, double now_mono, time_t now_real,
                char *buf, size_t *ret_len, uint64_t *ret_value)
{
  if (!q->path || q->pending)
    return 0;
  roll_day(q, now_real);
  *ret_value = q->day_bytes;
  *ret_len = serialize(q, *ret_value, now_mono, now_real, buf);
  q->pending = 1;
  q->pending_day = q->day;
  return 1;
}

void
quota_reset(struct quota *q, time_t now_real)
{
  roll_day(q, now_real);
  q->ring_len = 0;
  q->ring_head = 0;
  q->day_bytes = 0;
  q->persisted = 0;
  q->admitted = 1;              /* so that the reset is written */
  q->reset_pending = q->pending;
}

const char *
quota_verdict_name(enum quota_verdict v)
{
  switch (v) {
  case QUOTA_OK: return "ok";
  case QUOTA_RPM: return "requests per minute";
  case QUOTA_DAY: return "bytes per day";
  }
  return "unknown";
}

void
quota_take_use(struct quota *dst, const struct quota *src, double now_mono)
{
  size_t scap = (size_t)src->p.max_requests_per_minute;
  size_t dcap = (size_t)dst->p.max_requests_per_minute;
  size_t keep, i;

  if (src->day == dst->day) {
    if (src->day_bytes > dst->day_bytes)
      dst->day_bytes = src->day_bytes;
    dst->admitted |= src->admitted;
  }
  if (dcap == 0 || scap == 0)
    return;
  /* src's window holds what the file's did (src wrote it, or restored it
     at its start) and what came after: it replaces dst's */
  keep = src->ring_len < dcap ? src->ring_len : dcap;
  for (i = 0; i < keep; i++)
    dst->ring[i] = src->ring[(src->ring_head + scap - keep + i) % scap];
  dst->ring_len = keep;
  dst->ring_head = keep % dcap;
  prune(dst, now_mono);
}

int
quota_set_params(struct quota *q, const struct quota_params *p)
{
  size_t oldcap, newcap, keep, i;
  double *ring;

  if (p->max_requests_per_minute > QUOTA_MAX_RPM)
    return -EINVAL;
  oldcap = (size_t)q->p.max_requests_per_minute;
  newcap = (size_t)p->max_requests_per_minute;
  if (newcap != oldcap) {
    ring = NULL;
    if (newcap) {
      ring = calloc(newcap, sizeof(*ring));
      if (!ring)
        return -ENOMEM;
    }
    /* The newest admissions, oldest first. */
    keep = q->ring_len < newcap ? q->ring_len : newcap;
    for (i = 0; i < keep; i++)
      ring[i] = q->ring[(q->ring_head + oldcap - keep + i) % oldcap];
    free(q->ring);
    q->ring = ring;
    q->ring_len = keep;
    q->ring_head = newcap ? keep % newcap : 0;
  }
  q->p = *p;
  return 0;
}
