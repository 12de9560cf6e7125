/* The gRPC endpoint's api keys; see apikeys.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "base/keyfile.h"
#include "base/log.h"
#include "base/regfile.h"
#include "persist/atomicfile.h"
#include "server/apikeys.h"

struct apikeys {
  uv_loop_t *loop;
  struct apikey *keys;
  size_t n;
  size_t live;                        /* state writes in flight */
  int closing;
};

static double
now_s(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void
sha256(const uint8_t *p, size_t len, uint8_t out[32])
{
  unsigned n = 32;

  if (EVP_Digest(p, len, out, &n, EVP_sha256(), NULL) != 1)
    memset(out, 0, 32);             /* matches no entry (all-zero is
                                       refused in the file) */
}

void
apikey_hash_hex(const uint8_t *key, size_t len, char hex[65])
{
  uint8_t h[32];
  size_t i;

  sha256(key, len, h);
  for (i = 0; i < 32; i++)
    snprintf(hex + 2 * i, 3, "%02x", h[i]);
}

static int
name_ok(const char *s)
{
  size_t n = strlen(s);

  return n >= 1 && n <= APIKEY_MAX_NAME &&
         strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                   "0123456789._-") == n && s[0] != '.';
}

static int
hex_hash(const char *s, uint8_t out[32])
{
  static const uint8_t zero[32];
  unsigned v;
  size_t i;

  if (strlen(s) != 64 || strspn(s, "0123456789abcdefABCDEF") != 64)
    return -1;
  for (i = 0; i < 32; i++) {
    if (sscanf(s + 2 * i, "%2x", &v) != 1)
      return -1;
    out[i] = (uint8_t)v;
  }
  return memcmp(out, zero, 32) ? 0 : -1;
}

static int
parse_u64(const char *s, uint64_t max, uint64_t *ret)
{
  char *end;
  unsigned long long v;

  if (*s < '0' || *s > '9')
    return -1;
  errno = 0;
  v = strtoull(s, &end, 10);
  if (errno || *end || v > max)
    return -1;
  *ret = v;
  return 0;
}

/* One option NAME=VALUE of k; 0 or -1 with err. */
static int
parse_option(struct apikey *k, char *opt, struct quota_params *qp,
             char *err, size_t errlen)
{
  char *eq = strchr(opt, '='), *save, *s;
  uint64_t v;

  if (!eq) {
    snprintf(err, errlen, "'%.40s' is not NAME=VALUE", opt);
    return -1;
  }
  *eq++ = '\0';
  if (!strcmp(opt, "sources")) {
    for (s = strtok_r(eq, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
      if (k->n_sources == APIKEY_MAX_SOURCES) {
        snprintf(err, errlen, "more than %d sources", APIKEY_MAX_SOURCES);
        return -1;
      }
      k->sources[k->n_sources] = strdup(s);
      if (!k->sources[k->n_sources]) {
        snprintf(err, errlen, "out of memory");
        return -1;
      }
      k->n_sources++;
    }
    return 0;
  }
  if (!strcmp(opt, "bytes_per_request")) {
    if (parse_u64(eq, UINT32_MAX, &k->max_bytes_per_request) == 0)
      return 0;
  } else if (!strcmp(opt, "requests_per_minute")) {
    if (parse_u64(eq, QUOTA_MAX_RPM, &qp->max_requests_per_minute) == 0)
      return 0;
  } else if (!strcmp(opt, "bytes_per_day")) {
    if (parse_u64(eq, UINT64_MAX / 2, &qp->max_bytes_per_day) == 0)
      return 0;
  } else if (!strcmp(opt, "streams") || !strcmp(opt, "in_flight")) {
    if (parse_u64(eq, 100000, &v) == 0 && v > 0) {
      if (opt[0] == 's')
        k->max_streams = (uint32_t)v;
      else
        k->max_in_flight = (uint32_t)v;
      return 0;
    }
  } else {
    snprintf(err, errlen, "unknown option '%.40s' (sources, "
             "bytes_per_request, requests_per_minute, bytes_per_day, "
             "streams, in_flight)", opt);
    return -1;
  }
  snprintf(err, errlen, "%s: '%.40s' is not a number in range", opt, eq);
  return -1;
}

/* One line "NAME HASH [OPTIONS]" into k; 0 or -1 with err. */
static int
parse_line(struct apikeys *ks, struct apikey *k, char *line,
           const char *state_dir, char *err, size_t errlen)
{
  struct quota_params qp;
  char *save, *name, *hash, *opt, qname[APIKEY_MAX_NAME + 8], why[200];
  size_t i;

  memset(&qp, 0, sizeof(qp));
  k->set = ks;
  k->max_streams = APIKEY_DEFAULT_STREAMS;
  k->max_in_flight = APIKEY_DEFAULT_IN_FLIGHT;
  name = strtok_r(line, " \t", &save);
  hash = strtok_r(NULL, " \t", &save);
  if (!name_ok(name)) {
    snprintf(err, errlen, "name '%.70s': 1..%d of A-Z a-z 0-9 . _ -",
             name, APIKEY_MAX_NAME);
    return -1;
  }
  snprintf(k->name, sizeof(k->name), "%s", name);
  for (i = 0; i < (size_t)(k - ks->keys); i++)
    if (!strcmp(ks->keys[i].name, name)) {
      snprintf(err, errlen, "name '%s' appears twice", name);
      return -1;
    }
  if (!hash || hex_hash(hash, k->hash) < 0) {
    snprintf(err, errlen, "'%s': the second field must be the key's "
             "SHA-256, 64 hex digits (qrsctl hash-key prints it)", name);
    return -1;
  }
  while ((opt = strtok_r(NULL, " \t", &save)))
    if (parse_option(k, opt, &qp, err, errlen) < 0)
      return -1;
  snprintf(qname, sizeof(qname), "key-%s", name);
  if (quota_init(&k->quota, &qp, state_dir, qname, now_s(), time(NULL), why,
                 sizeof(why)) < 0) {
    snprintf(err, errlen, "'%s': %s", name, why);
    return -1;
  }
  return 0;
}

static void
key_clear(struct apikey *k)
{
  size_t i;

  for (i = 0; i < k->n_sources; i++)
    free(k->sources[i]);
  quota_done(&k->quota);
}

static void
keys_free_now(struct apikeys *ks)
{
  size_t i;

  for (i = 0; i < ks->n; i++)
    key_clear(&ks->keys[i]);
  free(ks->keys);
  free(ks);
}

int
apikeys_load(uv_loop_t *loop, const char *path, const char *state_dir,
             struct apikeys **ret, char *err, size_t errlen)
{
  struct apikeys *ks;
  char *buf, *line, *save, why[600];
  size_t lineno = 0;
  int r;

  *ret = NULL;
  r = keyfile_read(path, KEYFILE_HASHES, APIKEY_MAX_FILE, &buf, NULL, why,
                   sizeof(why));
  if (r < 0) {
    snprintf(err, errlen, "api_keys: %s", why);
    return r;
  }
  ks = calloc(1, sizeof(*ks));
  if (ks)
    ks->keys = calloc(APIKEY_MAX_KEYS, sizeof(*ks->keys));
  if (!ks || !ks->keys) {
    free(ks);
    free(buf);
    snprintf(err, errlen, "api_keys: out of memory");
    return -ENOMEM;
  }
  ks->loop = loop;
  /* strsep keeps empty lines, so that line numbers stay right */
  save = buf;
  while ((line = strsep(&save, "\n"))) {
    lineno++;
    line[strcspn(line, "#\r")] = '\0';
    if (line[strspn(line, " \t")] == '\0')
      continue;
    if (ks->n == APIKEY_MAX_KEYS) {
      snprintf(why, sizeof(why), "more than %d keys", APIKEY_MAX_KEYS);
      goto bad;
    }
    if (parse_line(ks, &ks->keys[ks->n], line, state_dir, why,
                   sizeof(why)) < 0) {
      key_clear(&ks->keys[ks->n]);
      goto bad;
    }
    ks->n++;
  }
  free(buf);
  if (ks->n == 0) {
    snprintf(err, errlen, "api_keys: %s has no keys", path);
    keys_free_now(ks);
    return -EINVAL;
  }
  *ret = ks;
  return 0;
bad:
  snprintf(err, errlen, "api_keys: %s:%zu: %s", path, lineno, why);
  free(buf);
  keys_free_now(ks);
  return -EINVAL;
}

struct apikey *
apikeys_find(struct apikeys *ks, const uint8_t *key, size_t len)
{
  struct apikey *found = NULL;
  uint8_t h[32];
  size_t i;

  if (len == 0 || len > APIKEY_MAX_LEN)
    return NULL;
  sha256(key, len, h);
  /* every entry compared, whatever matched: the time says nothing */
  for (i = 0; i < ks->n; i++)
    if (CRYPTO_memcmp(h, ks->keys[i].hash, 32) == 0)
      found = &ks->keys[i];
  OPENSSL_cleanse(h, sizeof(h));
  return found;
}

int
apikey_source_ok(const struct apikey *k, const char *source,
                 const char *def)
{
  size_t i;

  if (k->n_sources == 0)
    return strcmp(source, def) == 0;
  for (i = 0; i < k->n_sources; i++)
    if (!strcmp(source, k->sources[i]))
      return 1;
  return 0;
}

/* ---- the quota state on a worker thread (as an upstream's) ---- */

struct kwrite {
  uv_work_t work;
  struct apikey *k;
  uint64_t value;
  size_t len;
  int r;
  char buf[QUOTA_STATE_MAX];
};

static void
kwrite_work(uv_work_t *w)
{
  struct kwrite *q = w->data;

  q->r = atomicfile_write(q->k->quota.path, q->buf, q->len, 1);
}

static void
persist_log(struct apikey *k)
{
  if (k->quota.persist_error == k->persist_logged)
    return;
  if (k->quota.persist_error)
    log_warn("api key '%s': cannot save its daily count in %s: %s", k->name,
             k->quota.path, strerror(-k->quota.persist_error));
  else
    log_info("api key '%s': daily count saved again", k->name);
  k->persist_logged = k->quota.persist_error;
}

static void kwrite_next(struct apikey *k);

static void
kwrite_done(uv_work_t *w, int status)
{
  struct kwrite *q = w->data;
  struct apikey *k = q->k;
  struct apikeys *ks = k->set;

  quota_persist_done(&k->quota, q->value, status < 0 ? status : q->r);
  free(q);
  k->writing = 0;
  ks->live--;
  persist_log(k);
  kwrite_next(k);
  if (ks->closing && ks->live == 0)
    keys_free_now(ks);
}

/* The next write due for k: a reservation, or at close the exact count. */
static void
kwrite_next(struct apikey *k)
{
  struct kwrite *q;
  uint64_t value;
  size_t len;
  int due;

  if (k->writing || !k->quota.path)
    return;
  q = malloc(sizeof(*q));
  if (!q)
    return;                         /* the next admission tries again */
  if (k->set->closing) {
    due = !k->flushed && quota_flush_due(&k->quota, now_s(), time(NULL),
                                         q->buf, &len, &value);
    k->flushed |= due;
  } else {
    due = quota_persist_due(&k->quota, now_s(), time(NULL), q->buf, &len,
                            &value);
  }
  if (!due) {
    free(q);
    return;
  }
  q->k = k;
  q->len = len;
  q->value = value;
  q->work.data = q;
  if (uv_queue_work(k->set->loop, &q->work, kwrite_work, kwrite_done) < 0) {
    quota_persist_done(&k->quota, value, -ENOMEM);
    persist_log(k);
    free(q);
    return;
  }
  k->writing = 1;
  k->set->live++;
}

void
apikeys_free(struct apikeys *ks)
{
  size_t i;

  if (!ks)
    return;
  ks->closing = 1;
  for (i = 0; i < ks->n; i++)
    kwrite_next(&ks->keys[i]);
  if (ks->live == 0)
    keys_free_now(ks);
}

int
apikey_admit(struct apikey *k, size_t n, char *why, size_t whylen)
{
  enum quota_verdict v;

  if (k->max_bytes_per_request && n > k->max_bytes_per_request) {
    k->refused_size++;
    snprintf(why, whylen, "api key '%s': %zu bytes is over its "
             "bytes_per_request (%" PRIu64 ")", k->name, n,
             k->max_bytes_per_request);
    return -1;
  }
  if (k->in_flight >= k->max_in_flight) {
    k->refused_concurrency++;
    snprintf(why, whylen, "api key '%s': %u requests in flight, its share "
             "(in_flight)", k->name, k->in_flight);
    return -1;
  }
  v = quota_admit(&k->quota, n, now_s(), time(NULL));
  if (v != QUOTA_OK) {
    k->refused_quota++;
    snprintf(why, whylen, "api key '%s': quota exceeded (%s: %" PRIu64
             ")", k->name, quota_verdict_name(v), v == QUOTA_RPM ?
             k->quota.p.max_requests_per_minute :
             k->quota.p.max_bytes_per_day);
    return -1;
  }
  kwrite_next(k);
  k->in_flight++;
  k->requests++;
  k->bytes += n;
  return 0;
}

void
apikey_release(struct apikey *k)
{
  if (k->in_flight > 0)
    k->in_flight--;
}

int
apikey_stream_open(struct apikey *k, char *why, size_t whylen)
{
  if (k->streams >= k->max_streams) {
    k->refused_concurrency++;
    snprintf(why, whylen, "api key '%s': %u streams open, its share "
             "(streams)", k->name, k->streams);
    return -1;
  }
  k->streams++;
  return 0;
}

void
apikey_stream_close(struct apikey *k)
{
  if (k->streams > 0)
    k->streams--;
}

static void
add_u64(json_object *o, const char *key, uint64_t v)
{
  json_object_object_add(o, key, json_object_new_uint64(v));
}

json_object *
apikeys_status_json(struct apikeys *ks)
{
  json_object *arr = json_object_new_array(), *o;
  struct apikey *k;
  size_t i;

  if (!arr)
    return NULL;
  for (i = 0; i < ks->n; i++) {
    k = &ks->keys[i];
    o = json_object_new_object();
    if (!o)
      break;
    json_object_object_add(o, "name", json_object_new_string(k->name));
    add_u64(o, "requests", k->requests);
    add_u64(o, "bytes", k->bytes);
    add_u64(o, "streams", k->streams);
    add_u64(o, "in_flight", k->in_flight);
    add_u64(o, "minute_requests", quota_minute_requests(&k->quota, now_s()));
    add_u64(o, "day_bytes", quota_day_bytes(&k->quota, time(NULL)));
    add_u64(o, "refused_size", k->refused_size);
    add_u64(o, "refused_quota", k->refused_quota);
    add_u64(o, "refused_concurrency", k->refused_concurrency);
    add_u64(o, "refused_source", k->refused_source);
    json_object_array_add(arr, o);
  }
  return arr;
}
