/* qrs-audit --study: see audit_study.h. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <json-c/json.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "audit.h"
#include "audit_journal.h"
#include "audit_json.h"
#include "audit_stats.h"
#include "audit_study.h"
#include "audit_study_stats.h"
#include "sortcmp.h"
#include "ustat.h"

#define ARMS_MAX 8
#define NAME_MAX_LEN 48             /* a study's name */
#define TAG_MAX 64                  /* a unit tag */
#define STUDIES_MAX 64
#define BYTES_MAX (16u << 20)       /* a draw's bytes regenerated */
#define REVEAL_MAX 65536            /* reveal.json's size */
#define FAIL_KEPT 1000
#define SEED_LEN 32
#define POWER_SEED 0x5eed5eed5eedull

enum study_check {
  SC_MALFORMED_RECORD = 0,
  SC_PLAN_CHANGED,
  SC_STUDY_MISSING,
  SC_MALFORMED_ENTRY,
  SC_EPOCH_UNKNOWN,
  SC_FALLBACK,
  SC_LABEL_UNKNOWN,
  SC_UNIT_TAG,
  SC_UNIT_SPLIT,
  SC_CTR_REUSED,
  SC_COMMITMENT,
  SC_SEED_MISSING,
  SC_ASSIGNMENT,
  SC_BYTES,
  SC_RECORD_REUSED,
  SC_N,                             /* then the records' checks (audit.h) */
};

static const char *const sc_names[SC_N] = {
  [SC_MALFORMED_RECORD] = "malformed-study-record",
  [SC_PLAN_CHANGED] = "plan-changed",
  [SC_STUDY_MISSING] = "study-missing",
  [SC_MALFORMED_ENTRY] = "malformed-study-entry",
  [SC_EPOCH_UNKNOWN] = "epoch-unknown",
  [SC_FALLBACK] = "study-fallback",
  [SC_LABEL_UNKNOWN] = "label-unknown",
  [SC_UNIT_TAG] = "unit-tag-mismatch",
  [SC_UNIT_SPLIT] = "unit-split",
  [SC_CTR_REUSED] = "ctr-reused",
  [SC_COMMITMENT] = "commitment-mismatch",
  [SC_SEED_MISSING] = "seed-missing",
  [SC_ASSIGNMENT] = "assignment-mismatch",
  [SC_BYTES] = "bytes-mismatch",
  [SC_RECORD_REUSED] = "record-reused",
};

static const char *
check_name(int c)
{
  return c < SC_N ? sc_names[c] : audit_check_name(c - SC_N);
}

static const char *const statistics[] = {
  "mean_probit_diff", "ks_u", "mean_surprisal",
};
#define N_STATISTICS 3

struct failure {
  uint32_t file;                    /* index into paths */
  uint64_t line;
  int check;
  char detail[240];
};

struct arm {
  char source[64], type[32];
  char commit[JOURNAL_HEX_LEN + 1]; /* "-": none */
  int label;                        /* revealed: 0 = "A", ... */
  int has_seed;
  uint8_t seed[SEED_LEN];
};

struct unit {
  char tag[TAG_MAX + 1];
  int label;
  uint32_t file, line;              /* its first draw */
  double zs, ss;                    /* sums of Phi^-1(u), -ln(token_prob) */
  uint32_t nz, ns;
};

struct draw {
  uint64_t seq, ctr;
  uint32_t epoch, unit, file, line;
  double u, t_recv, t_sent;
  int label;
  int has_record;
};

struct study {
  char name[NAME_MAX_LEN + 1];
  int have_plan;
  char plan[1024];                  /* the record's fields but the epoch */
  char unit[16], statistic[32];
  uint64_t planned;
  double alpha, effect;
  char assign[JOURNAL_HEX_LEN + 1];
  size_t k;
  struct arm arm[ARMS_MAX];
  int label_arm[ARMS_MAX];          /* revealed: label -> arm */
  int revealed;                     /* the target, reveal checked */
  uint8_t assign_seed[SEED_LEN];
  uint32_t *epochs;
  size_t n_epochs, records;
  struct unit *units;               /* in order of first draw */
  size_t n_units, cap_units;
  uint32_t *slots;                  /* tag -> unit index + 1 (0: free) */
  size_t cap_slots;
  struct draw *draws;
  size_t n_draws, cap_draws;
  uint64_t label_draws[ARMS_MAX], label_units[ARMS_MAX];
};

struct reveal {
  int present;
  char study[NAME_MAX_LEN + 1];
  uint8_t assign_seed[SEED_LEN];
  size_t n_seeds;
  char seed_src[ARMS_MAX][64];
  uint8_t seed[ARMS_MAX][SEED_LEN];
};

struct ctx {
  const struct audit_study_opts *o;
  struct audit_journal_result *jr;
  char **paths;
  size_t n_paths;
  struct failure *fail;
  size_t n_fail;
  uint64_t counts[SC_N + AUDIT_N_CHECKS];
  struct study studies[STUDIES_MAX];
  size_t n_studies;
  struct reveal rv;
  uint32_t reveal_path;
  EVP_MD_CTX *md;
  EVP_CIPHER_CTX *cc;
  EVP_CIPHER *chacha;
  uint8_t *buf;                     /* draw bytes regenerated */
  size_t cap_buf;
  int oom;
};

/* ---- helpers --------------------------------------------------------- */

static uint32_t
path_index(struct ctx *c, const char *path)
{
  char **p;

  if (c->n_paths && strcmp(c->paths[c->n_paths - 1], path) == 0)
    return (uint32_t)(c->n_paths - 1);
  p = realloc(c->paths, (c->n_paths + 1) * sizeof(*p));
  if (!p || !(p[c->n_paths] = strdup(path))) {
    if (p)
      c->paths = p;
    c->oom = 1;
    return 0;
  }
  c->paths = p;
  return (uint32_t)c->n_paths++;
}

__attribute__((format(printf, 5, 6))) static void
failed(struct ctx *c, uint32_t file, uint64_t line, int check,
       const char *fmt, ...)
{
  struct failure *f;
  va_list ap;

  c->counts[check]++;
  if (c->n_fail >= FAIL_KEPT)
    return;
  f = &c->fail[c->n_fail++];
  f->file = file;
  f->line = line;
  f->check = check;
  va_start(ap, fmt);
  vsnprintf(f->detail, sizeof f->detail, fmt, ap);
  va_end(ap);
}

static int
hex_decode(const char *s, size_t len, uint8_t *out, size_t n)
{
  size_t i;
  int hi, lo;

  if (len != 2 * n)
    return -1;
  for (i = 0; i < n; i++) {
    hi = s[2 * i] >= '0' && s[2 * i] <= '9' ? s[2 * i] - '0' :
         s[2 * i] >= 'a' && s[2 * i] <= 'f' ? s[2 * i] - 'a' + 10 : -1;
    lo = s[2 * i + 1] >= '0' && s[2 * i + 1] <= '9' ? s[2 * i + 1] - '0' :
         s[2 * i + 1] >= 'a' && s[2 * i + 1] <= 'f' ?
         s[2 * i + 1] - 'a' + 10 : -1;
    if (hi < 0 || lo < 0)
      return -1;
    out[i] = (uint8_t)(hi << 4 | lo);
  }
  return 0;
}

static void
commitment(const uint8_t seed[SEED_LEN], char out[JOURNAL_HEX_LEN + 1])
{
  uint8_t h[JOURNAL_HASH_LEN];

  EVP_Digest(seed, SEED_LEN, h, NULL, EVP_sha256(), NULL);
  journal_hex(h, sizeof h, out);
}

/* HMAC-SHA256(seed, prefix "\0" name "\0" tail). */
static void
study_hmac(const uint8_t seed[SEED_LEN], const char *prefix,
           const char *name, const char *tail, uint8_t out[32])
{
  char msg[256];
  size_t n = 0, l;
  unsigned len = 32;

  l = strlen(prefix) + 1;
  memcpy(msg, prefix, l);
  n += l;
  l = strlen(name) + 1;
  memcpy(msg + n, name, l);
  n += l;
  l = strlen(tail);
  memcpy(msg + n, tail, l);
  n += l;
  HMAC(EVP_sha256(), seed, SEED_LEN, (const uint8_t *)msg, n, out, &len);
}

/* The arm a unit tag is assigned. */
static int
assigned_arm(const struct study *s, const char *tag)
{
  uint8_t h[32];
  uint64_t v = 0;
  int i;

  study_hmac(s->assign_seed, "qrs-study-unit", s->name, tag, h);
  for (i = 0; i < 8; i++)
    v = v << 8 | h[i];
  return (int)(v % s->k);
}

static int
cmp_key(const void *x, const void *y)
{
  return memcmp(x, y, 33);          /* 32 key bytes, then the arm */
}

/* Labels by HMAC key order: the first arm gets "A". */
static void
label_order(struct study *s)
{
  uint8_t keys[ARMS_MAX][33];
  char dec[24];
  size_t i;

  for (i = 0; i < s->k; i++) {
    snprintf(dec, sizeof dec, "%zu", i);
    study_hmac(s->assign_seed, "qrs-study-label", s->name, dec, keys[i]);
    keys[i][32] = (uint8_t)i;
  }
  qsort(keys, s->k, sizeof keys[0], cmp_key);
  for (i = 0; i < s->k; i++) {
    s->label_arm[i] = keys[i][32];
    s->arm[keys[i][32]].label = (int)i;
  }
}

static int
valid_chars(const char *s, size_t len, size_t max, const char *extra)
{
  size_t i;

  if (len == 0 || len > max)
    return 0;
  for (i = 0; i < len; i++)
    if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') ||
          (s[i] >= '0' && s[i] <= '9') || strchr(extra, s[i])) ||
        s[i] == '\0')
      return 0;
  return 1;
}

static struct study *
find_study(struct ctx *c, const char *name, size_t len)
{
  size_t i;

  for (i = 0; i < c->n_studies; i++)
    if (strlen(c->studies[i].name) == len &&
        memcmp(c->studies[i].name, name, len) == 0)
      return &c->studies[i];
  return NULL;
}

static int
is_target(const struct ctx *c, const struct study *s)
{
  return c->rv.present && strcmp(c->rv.study, s->name) == 0;
}

/* ---- the study record ----------------------------------------------- */

/* The arms field "source:type:commitment,...": 0, or -1 (why says
   why). */
static int
parse_arms(struct study *s, const struct jfield *f, char *why, size_t wl)
{
  const char *p = f->s, *e, *c1, *c2;
  struct arm *a;
  size_t i;

  s->k = 0;
  while (p < f->e) {
    e = memchr(p, ',', (size_t)(f->e - p));
    e = e ? e : f->e;
    c1 = memchr(p, ':', (size_t)(e - p));
    c2 = c1 ? memchr(c1 + 1, ':', (size_t)(e - c1 - 1)) : NULL;
    if (s->k == ARMS_MAX || !c2 || c1 == p || c2 == c1 + 1 ||
        (size_t)(c1 - p) >= sizeof a->source ||
        (size_t)(c2 - c1 - 1) >= sizeof a->type) {
      snprintf(why, wl, "arm %zu is not source:type:commitment (at most %d "
               "arms)", s->k + 1, ARMS_MAX);
      return -1;
    }
    a = &s->arm[s->k++];
    memset(a, 0, sizeof *a);
    memcpy(a->source, p, (size_t)(c1 - p));
    memcpy(a->type, c1 + 1, (size_t)(c2 - c1 - 1));
    if ((e - c2 - 1 == 1 && c2[1] == '-' && strcmp(a->type, "prng") != 0) ||
        (e - c2 - 1 == JOURNAL_HEX_LEN &&
         hex_decode(c2 + 1, JOURNAL_HEX_LEN, (uint8_t[32]){ 0 }, 32) == 0)) {
      memcpy(a->commit, c2 + 1, (size_t)(e - c2 - 1));
    } else {
      snprintf(why, wl, "arm %s: commitment is not 64 hex digits (or - "
               "for a source that is not prng)", a->source);
      return -1;
    }
    for (i = 0; i + 1 < s->k; i++)
      if (strcmp(s->arm[i].source, a->source) == 0) {
        snprintf(why, wl, "arm %s is named twice", a->source);
        return -1;
      }
    p = e < f->e ? e + 1 : e;
  }
  if (s->k < 2) {
    snprintf(why, wl, "fewer than 2 arms");
    return -1;
  }
  return 0;
}

/* The fields of a study record into s (a scratch study): 0, or -1. */
static int
parse_record(const struct jfield *f, struct study *s, uint32_t *epoch,
             char *why, size_t wl)
{
  uint8_t e[4];
  char tmp[64], *end;
  size_t i;

  memset(s, 0, sizeof *s);
  if (!valid_chars(f[1].s, (size_t)(f[1].e - f[1].s), NAME_MAX_LEN, "._-")) {
    snprintf(why, wl, "the name is not [A-Za-z0-9._-]{1,48}");
    return -1;
  }
  memcpy(s->name, f[1].s, (size_t)(f[1].e - f[1].s));
  if (hex_decode(f[2].s, (size_t)(f[2].e - f[2].s), e, 4) != 0) {
    snprintf(why, wl, "the epoch is not 8 lowercase hex digits");
    return -1;
  }
  *epoch = (uint32_t)e[0] << 24 | (uint32_t)e[1] << 16 |
           (uint32_t)e[2] << 8 | e[3];
  if (!audit_field_is(&f[3], "request") && !audit_field_is(&f[3], "draw")) {
    snprintf(why, wl, "unit is neither request nor draw");
    return -1;
  }
  memcpy(s->unit, f[3].s, (size_t)(f[3].e - f[3].s));
  snprintf(tmp, sizeof tmp, "%.*s", (int)(f[4].e - f[4].s), f[4].s);
  errno = 0;
  s->planned = strtoull(tmp, &end, 10);
  if (errno || *end || tmp[0] < '0' || tmp[0] > '9' || s->planned < 2) {
    snprintf(why, wl, "planned_units is not an integer >= 2");
    return -1;
  }
  for (i = 0; i < N_STATISTICS; i++)
    if (audit_field_is(&f[5], statistics[i]))
      snprintf(s->statistic, sizeof s->statistic, "%s", statistics[i]);
  if (!s->statistic[0]) {
    snprintf(why, wl, "statistic is not mean_probit_diff, ks_u or "
             "mean_surprisal");
    return -1;
  }
  if (aj_number(f[6].s, f[6].e, &s->alpha) != 0 ||
      !(s->alpha > 0 && s->alpha <= 0.5) ||
      aj_number(f[7].s, f[7].e, &s->effect) != 0 || !(s->effect > 0) ||
      isinf(s->effect)) {
    snprintf(why, wl, "alpha not in (0, 0.5] or effect not > 0");
    return -1;
  }
  if ((size_t)(f[8].e - f[8].s) != JOURNAL_HEX_LEN ||
      hex_decode(f[8].s, JOURNAL_HEX_LEN, (uint8_t[32]){ 0 }, 32) != 0) {
    snprintf(why, wl, "the assignment commitment is not 64 hex digits");
    return -1;
  }
  memcpy(s->assign, f[8].s, JOURNAL_HEX_LEN);
  if (parse_arms(s, &f[9], why, wl) != 0)
    return -1;
  snprintf(s->plan, sizeof s->plan, "%.*s", (int)(f[9].e - f[3].s), f[3].s);
  return 0;
}

/* The reveal checked against study s's record at file:line. */
static void
check_reveal(struct ctx *c, struct study *s, uint32_t file, uint64_t line)
{
  char h[JOURNAL_HEX_LEN + 1];
  size_t i, j;
  int ok = 1;

  commitment(c->rv.assign_seed, h);
  if (strcmp(h, s->assign) != 0) {
    failed(c, file, line, SC_COMMITMENT, "the assignment seed of reveal.json "
           "hashes to %s; the study record commits to %s", h, s->assign);
    ok = 0;
  }
  for (i = 0; i < s->k; i++) {
    struct arm *a = &s->arm[i];

    for (j = 0; j < c->rv.n_seeds; j++)
      if (strcmp(c->rv.seed_src[j], a->source) == 0)
        break;
    if (strcmp(a->type, "prng") != 0)
      continue;
    if (j == c->rv.n_seeds) {
      failed(c, file, line, SC_SEED_MISSING, "arm %s is prng and reveal.json "
             "has no seed for it: its draws cannot be checked", a->source);
      ok = 0;
      continue;
    }
    commitment(c->rv.seed[j], h);
    if (strcmp(h, a->commit) != 0) {
      failed(c, file, line, SC_COMMITMENT, "the seed of arm %s in reveal.json "
             "hashes to %s; the study record commits to %s", a->source, h,
             a->commit);
      ok = 0;
      continue;
    }
    a->has_seed = 1;
    memcpy(a->seed, c->rv.seed[j], SEED_LEN);
  }
  if (!s->revealed) {
    /* the seeds as revealed drive the checks that follow, even where a
       commitment failed: each entry is then named too */
    memcpy(s->assign_seed, c->rv.assign_seed, SEED_LEN);
    label_order(s);
    s->revealed = 1;
  }
  (void)ok;
}

static void
on_study_record(struct ctx *c, const char *line, size_t len, uint32_t file,
                uint64_t lineno)
{
  struct jfield f[12];
  struct study tmp, *s;
  uint32_t epoch, *ep;
  char why[160];

  if (audit_split_fields(line, len, f, 12) != 0 ||
      parse_record(f, &tmp, &epoch, why, sizeof why) != 0) {
    failed(c, file, lineno, SC_MALFORMED_RECORD, "%s",
           audit_split_fields(line, len, f, 12) != 0 ?
           "not 12 tab-separated fields" : why);
    return;
  }
  s = find_study(c, tmp.name, strlen(tmp.name));
  if (s == NULL) {
    if (c->n_studies == STUDIES_MAX) {
      failed(c, file, lineno, SC_MALFORMED_RECORD, "more than %d studies",
             STUDIES_MAX);
      return;
    }
    s = &c->studies[c->n_studies++];
    *s = tmp;
    s->have_plan = 1;
  } else if (strcmp(s->plan, tmp.plan) != 0) {
    failed(c, file, lineno, SC_PLAN_CHANGED, "study %s's plan is not the "
           "one of its first record: %s, then %s", s->name, s->plan,
           tmp.plan);
    return;
  }
  ep = realloc(s->epochs, (s->n_epochs + 1) * sizeof(*ep));
  if (!ep) {
    c->oom = 1;
    return;
  }
  s->epochs = ep;
  s->epochs[s->n_epochs++] = epoch;
  s->records++;
  if (is_target(c, s))
    check_reveal(c, s, file, lineno);
}

/* ---- the entries ---------------------------------------------------- */

static uint64_t
tag_hash(const char *p)
{
  uint64_t h = 14695981039346656037ull;

  for (; *p; p++)
    h = (h ^ (unsigned char)*p) * 1099511628211ull;
  return h;
}

/* The unit of tag (added when new: *added set): its index, or -1 when
   out of memory. */
static long
unit_of(struct ctx *c, struct study *s, const char *tag, int *added)
{
  uint32_t *slots;
  struct unit *u;
  size_t i, h, n;

  *added = 0;
  if (2 * (s->n_units + 1) > s->cap_slots) {
    n = s->cap_slots ? 2 * s->cap_slots : 1024;
    slots = calloc(n, sizeof(*slots));
    if (!slots) {
      c->oom = 1;
      return -1;
    }
    for (i = 0; i < s->n_units; i++) {
      for (h = tag_hash(s->units[i].tag) & (n - 1); slots[h];
           h = (h + 1) & (n - 1))
        ;
      slots[h] = (uint32_t)i + 1;
    }
    free(s->slots);
    s->slots = slots;
    s->cap_slots = n;
  }
  for (h = tag_hash(tag) & (s->cap_slots - 1); s->slots[h];
       h = (h + 1) & (s->cap_slots - 1))
    if (strcmp(s->units[s->slots[h] - 1].tag, tag) == 0)
      return (long)s->slots[h] - 1;
  if (s->n_units == s->cap_units) {
    n = s->cap_units ? 2 * s->cap_units : 1024;
    u = realloc(s->units, n * sizeof(*u));
    if (!u) {
      c->oom = 1;
      return -1;
    }
    s->units = u;
    s->cap_units = n;
  }
  u = &s->units[s->n_units];
  memset(u, 0, sizeof *u);
  snprintf(u->tag, sizeof u->tag, "%s", tag);
  s->slots[h] = (uint32_t)++s->n_units;
  *added = 1;
  return (long)s->n_units - 1;
}

/* "key=value" pairs of amp_params: value of key into [*vs, *ve). */
static int
param(const struct jfield *f, const char *key, const char **vs,
      const char **ve)
{
  const char *p = f->s, *e, *eq;
  size_t kl = strlen(key);

  while (p < f->e) {
    e = memchr(p, ',', (size_t)(f->e - p));
    e = e ? e : f->e;
    eq = memchr(p, '=', (size_t)(e - p));
    if (eq && (size_t)(eq - p) == kl && memcmp(p, key, kl) == 0) {
      *vs = eq + 1;
      *ve = e;
      return 0;
    }
    p = e < f->e ? e + 1 : e;
  }
  return -1;
}

/* Regenerate a prng arm's draw of n bytes at (epoch, ctr) and compare
   its SHA-256 with the entry's (hex at f). */
static void
check_bytes(struct ctx *c, const struct arm *a, uint32_t epoch,
            uint64_t ctr, size_t n, const struct jfield *f, uint32_t file,
            uint64_t line, uint64_t seq)
{
  uint8_t iv[16] = { 0 }, h[JOURNAL_HASH_LEN], *b;
  char hx[JOURNAL_HEX_LEN + 1];
  int i, outl;

  if (n > c->cap_buf) {
    b = realloc(c->buf, n);
    if (!b) {
      c->oom = 1;
      return;
    }
    c->buf = b;
    c->cap_buf = n;
  }
  for (i = 0; i < 4; i++)
    iv[4 + i] = (uint8_t)(epoch >> (24 - 8 * i));
  for (i = 0; i < 8; i++)
    iv[8 + i] = (uint8_t)(ctr >> (56 - 8 * i));
  memset(c->buf, 0, n);
  if (!EVP_EncryptInit_ex(c->cc, c->chacha, NULL, a->seed, iv) ||
      !EVP_EncryptUpdate(c->cc, c->buf, &outl, c->buf, (int)n)) {
    c->oom = 1;
    return;
  }
  EVP_Digest(c->buf, n, h, NULL, EVP_sha256(), NULL);
  journal_hex(h, sizeof h, hx);
  if (!audit_field_is(f, hx))
    failed(c, file, line, SC_BYTES, "entry %" PRIu64 " (arm %s, %08" PRIx32
           ":%" PRIu64 ", %zu bytes): the seed's bytes hash to %s, the "
           "entry says %.*s", seq, a->source, epoch, ctr, n, hx,
           (int)(f->e - f->s), f->s);
}

static void
on_entry(struct ctx *c, uint64_t seq, const char *line, size_t len,
         uint32_t file, uint64_t lineno)
{
  struct jfield f[16];
  const char *slash, *vs, *ve, *colon;
  char tag[TAG_MAX + 1], num[32], *end;
  struct study *s;
  struct unit *u;
  struct draw *d;
  uint32_t epoch;
  uint64_t ctr, n;
  uint8_t eb[4];
  size_t i;
  int label, arm, added;
  long ui;

  if (audit_split_fields(line, len, f, 16) != 0)
    return;                         /* not an entry's shape: no draw */
  slash = memchr(f[3].s, '/', (size_t)(f[3].e - f[3].s));
  if (slash == NULL)
    return;                         /* not a study's draw */
  s = find_study(c, f[3].s, (size_t)(slash - f[3].s));
  if (s == NULL) {
    failed(c, file, lineno, SC_STUDY_MISSING, "entry %" PRIu64 " names "
           "study %.*s, whose study record is not before it", seq,
           (int)(slash - f[3].s), f[3].s);
    return;
  }
  if (f[3].e - slash != 2 || slash[1] < 'A' ||
      slash[1] >= 'A' + (int)s->k) {
    failed(c, file, lineno, SC_LABEL_UNKNOWN, "entry %" PRIu64 " has label "
           "\"%.*s\"; study %s has %zu arms (labels A to %c)", seq,
           (int)(f[3].e - slash - 1), slash + 1, s->name, s->k,
           (char)('A' + s->k - 1));
    return;
  }
  label = slash[1] - 'A';
  if (param(&f[5], "study", &vs, &ve) != 0 ||
      (colon = memchr(vs, ':', (size_t)(ve - vs))) == NULL ||
      hex_decode(vs, (size_t)(colon - vs), eb, 4) != 0 ||
      (size_t)(ve - colon - 1) >= sizeof num) {
    failed(c, file, lineno, SC_MALFORMED_ENTRY, "entry %" PRIu64 ": no "
           "study=<epoch 8hex>:<ctr> in its parameters", seq);
    return;
  }
  snprintf(num, sizeof num, "%.*s", (int)(ve - colon - 1), colon + 1);
  errno = 0;
  ctr = strtoull(num, &end, 10);
  epoch = (uint32_t)eb[0] << 24 | (uint32_t)eb[1] << 16 |
          (uint32_t)eb[2] << 8 | eb[3];
  if (errno || *end || num[0] < '0' || num[0] > '9') {
    failed(c, file, lineno, SC_MALFORMED_ENTRY, "entry %" PRIu64 ": ctr "
           "\"%s\" is not a decimal integer", seq, num);
    return;
  }
  if (param(&f[5], "unit", &vs, &ve) != 0 ||
      !valid_chars(vs, (size_t)(ve - vs), TAG_MAX, ".:_-")) {
    failed(c, file, lineno, SC_MALFORMED_ENTRY, "entry %" PRIu64 ": no "
           "unit=<tag> ([A-Za-z0-9._:-]{1,64}) in its parameters", seq);
    return;
  }
  snprintf(tag, sizeof tag, "%.*s", (int)(ve - vs), vs);
  if (param(&f[5], "n", &vs, &ve) != 0 ||
      snprintf(num, sizeof num, "%.*s", (int)(ve - vs), vs) >=
      (int)sizeof num || (n = strtoull(num, &end, 10), *end) ||
      num[0] < '0' || num[0] > '9' || n == 0 || n > BYTES_MAX) {
    failed(c, file, lineno, SC_MALFORMED_ENTRY, "entry %" PRIu64 ": no "
           "n=<bytes> (1 to %u) in its parameters", seq, BYTES_MAX);
    return;
  }
  if (f[13].e != f[13].s)
    failed(c, file, lineno, SC_FALLBACK, "entry %" PRIu64 " fell back to "
           "%.*s: a study draw never falls back", seq,
           (int)(f[13].e - f[13].s), f[13].s);
  for (i = 0; i < s->n_epochs && s->epochs[i] != epoch; i++)
    ;
  if (i == s->n_epochs)
    failed(c, file, lineno, SC_EPOCH_UNKNOWN, "entry %" PRIu64 ": epoch "
           "%08" PRIx32 " is in no study record of %s before it", seq,
           epoch, s->name);
  if (strcmp(s->unit, "draw") == 0) {
    snprintf(num, sizeof num, "%08" PRIx32 ":%" PRIu64, epoch, ctr);
    if (strcmp(num, tag) != 0)
      failed(c, file, lineno, SC_UNIT_TAG, "entry %" PRIu64 ": a draw "
             "unit's tag must be %s, not %s", seq, num, tag);
  }
  ui = unit_of(c, s, tag, &added);
  if (ui < 0)
    return;
  u = &s->units[ui];
  if (added) {
    u->label = label;
    u->file = file;
    u->line = (uint32_t)lineno;
    s->label_units[label]++;
  } else if (u->label != label) {
    failed(c, file, lineno, SC_UNIT_SPLIT, "unit %s has label %c here and "
           "%c at %s:%" PRIu32 " (a unit's draws share one arm)", tag,
           'A' + label, 'A' + u->label, c->paths[u->file], u->line);
  }
  s->label_draws[label]++;
  if (s->revealed) {
    arm = assigned_arm(s, tag);
    if (s->arm[arm].label != label)
      failed(c, file, lineno, SC_ASSIGNMENT, "entry %" PRIu64 ": unit %s "
             "is assigned arm %s (label %c); the entry has label %c", seq,
             tag, s->arm[arm].source, 'A' + s->arm[arm].label, 'A' + label);
    arm = s->label_arm[label];
    if (s->arm[arm].has_seed)
      check_bytes(c, &s->arm[arm], epoch, ctr, (size_t)n, &f[11], file,
                  lineno, seq);
  }
  if (s->n_draws == s->cap_draws) {
    size_t m = s->cap_draws ? 2 * s->cap_draws : 4096;

    d = realloc(s->draws, m * sizeof(*d));
    if (!d) {
      c->oom = 1;
      return;
    }
    s->draws = d;
    s->cap_draws = m;
  }
  d = &s->draws[s->n_draws++];
  memset(d, 0, sizeof *d);
  d->seq = seq;
  d->ctr = ctr;
  d->epoch = epoch;
  d->unit = (uint32_t)ui;
  d->file = file;
  d->line = (uint32_t)lineno;
  d->label = label;
  if (aj_number(f[12].s, f[12].e, &d->u) != 0)
    d->u = NAN;
  if (d->u > 0 && d->u < 1) {
    u->zs += ustat_phi_inv(d->u);
    u->nz++;
  }
  if (aj_number(f[8].s, f[8].e, &d->t_recv) != 0 ||
      aj_number(f[10].s, f[10].e, &d->t_sent) != 0)
    d->t_recv = d->t_sent = 0;
}

static int
on_line(void *ctx, uint64_t seq, const char *line, size_t len)
{
  struct ctx *c = ctx;
  uint32_t file = path_index(c, c->jr->at_path);

  if (seq == 0)
    on_study_record(c, line, len, file, c->jr->at_line);
  else
    on_entry(c, seq, line, len, file, c->jr->at_line);
  return c->oom ? JOURNAL_FAULT_IO : 0;
}

/* ---- reveal.json ---------------------------------------------------- */

/* A 64-hex member into out: 0, or -1. */
static int
seed_of(struct json_object *v, uint8_t out[SEED_LEN])
{
  return json_object_is_type(v, json_type_string) &&
         hex_decode(json_object_get_string(v),
                    (size_t)json_object_get_string_len(v), out,
                    SEED_LEN) == 0 ? 0 : -1;
}

/* 0 (rv->present set when the file is there), or -1 when it cannot be
   read or is malformed (said on stderr). */
static int
read_reveal(const char *path, struct reveal *rv)
{
  struct json_object *o, *v, *seeds;
  struct stat st;
  const char *why = NULL;
  size_t len;

  memset(rv, 0, sizeof *rv);
  if (stat(path, &st) != 0) {
    if (errno == ENOENT)
      return 0;
    fprintf(stderr, "qrs-audit: %s: %s\n", path, strerror(errno));
    return -1;
  }
  if (!S_ISREG(st.st_mode) || st.st_size > REVEAL_MAX) {
    fprintf(stderr, "qrs-audit: %s: not a regular file of at most %d "
            "bytes\n", path, REVEAL_MAX);
    return -1;
  }
  o = json_object_from_file(path);
  if (!o || !json_object_is_type(o, json_type_object)) {
    why = "not a JSON object";
  } else if (!json_object_object_get_ex(o, "study", &v) ||
             !json_object_is_type(v, json_type_string) ||
             (len = (size_t)json_object_get_string_len(v)) == 0 ||
             len > NAME_MAX_LEN) {
    why = "no \"study\": the study's name";
  } else {
    memcpy(rv->study, json_object_get_string(v), len);
    if (!json_object_object_get_ex(o, "assignment_seed", &v) ||
        seed_of(v, rv->assign_seed) != 0)
      why = "no \"assignment_seed\": 64 lowercase hex digits";
    else if (json_object_object_get_ex(o, "seeds", &seeds) &&
             !json_object_is_type(seeds, json_type_object))
      why = "\"seeds\" is not an object of source: 64 hex digits";
  }
  if (!why && json_object_object_get_ex(o, "seeds", &seeds)) {
    struct json_object_iter it;

    /* the iterator form: the plain foreach is a GNU statement expression */
    json_object_object_foreachC(seeds, it) {
      if (rv->n_seeds == ARMS_MAX ||
          strlen(it.key) >= sizeof rv->seed_src[0] ||
          seed_of(it.val, rv->seed[rv->n_seeds]) != 0) {
        why = "\"seeds\": at most 8 of source: 64 lowercase hex digits";
        break;
      }
      snprintf(rv->seed_src[rv->n_seeds++], sizeof rv->seed_src[0], "%s",
               it.key);
    }
  }
  json_object_put(o);
  if (why) {
    fprintf(stderr, "qrs-audit: %s: %s\n", path, why);
    return -1;
  }
  rv->present = 1;
  return 0;
}

/* ---- after the walk: counters reused, records ----------------------- */

/* SORT_ORDER of a key of three parts. */
static int
order3(uint64_t x1, uint64_t y1, uint64_t x2, uint64_t y2, uint64_t x3,
       uint64_t y3)
{
  return x1 != y1 ? SORT_ORDER(x1, y1) : SORT_ORDER2(x2, y2, x3, y3);
}

static int
cmp_ctr(const void *x, const void *y)
{
  const struct draw *a = x, *b = y;

  return order3(a->epoch, b->epoch, a->ctr, b->ctr, a->seq, b->seq);
}

static void
check_ctr(struct ctx *c, struct study *s)
{
  struct draw *v;
  size_t i;

  if (s->n_draws < 2)
    return;
  v = malloc(s->n_draws * sizeof(*v));
  if (!v) {
    c->oom = 1;
    return;
  }
  memcpy(v, s->draws, s->n_draws * sizeof(*v));
  qsort(v, s->n_draws, sizeof(*v), cmp_ctr);
  for (i = 1; i < s->n_draws; i++)
    if (v[i].epoch == v[i - 1].epoch && v[i].ctr == v[i - 1].ctr)
      failed(c, v[i].file, v[i].line, SC_CTR_REUSED, "entry %" PRIu64
             " reuses %08" PRIx32 ":%" PRIu64 " of entry %" PRIu64 " (%s:%"
             PRIu32 "): one nonce, two draws", v[i].seq, v[i].epoch,
             v[i].ctr, v[i - 1].seq, c->paths[v[i - 1].file],
             v[i - 1].line);
  free(v);
}

static struct draw *
draw_of(struct study *s, uint64_t seq)
{
  size_t lo = 0, hi = s->n_draws, mid;

  while (lo < hi) {
    mid = (lo + hi) / 2;
    if (s->draws[mid].seq < seq)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < s->n_draws && s->draws[lo].seq == seq ? &s->draws[lo] : NULL;
}

static int
cmp_name(const void *x, const void *y)
{
  return strcmp(*(char *const *)x, *(char *const *)y);
}

/* One records file: its checks against the journal, then each emitted
   token's surprisal added to its study unit.  0, or -1 (said). */
static int
one_records(struct ctx *c, struct study *s, const char *path,
            const char *jdir, uint64_t *joined)
{
  struct audit a;
  struct audit_journal_result jr;
  struct draw *d;
  char err[1024];
  uint32_t file;
  size_t i;

  memset(&a, 0, sizeof a);
  if (audit_records(&a, path, err, sizeof err) < 0) {
    fprintf(stderr, "qrs-audit: %s\n", err);
    audit_free(&a);
    return -1;
  }
  audit_journal(&a, jdir, 0, NULL, 0, &jr, err, sizeof err);
  file = path_index(c, path);
  for (i = 0; i < a.n_fail; i++)
    failed(c, file, a.fail[i].line, SC_N + (int)a.fail[i].check, "%s",
           a.fail[i].detail);
  /* failed() counted those kept; the rest are counted here */
  for (i = 0; i < AUDIT_N_CHECKS; i++)
    c->counts[SC_N + i] += a.counts[i];
  for (i = 0; i < a.n_fail; i++)
    c->counts[SC_N + a.fail[i].check]--;
  for (i = 0; s && i < a.n_rec; i++) {
    const struct audit_record *r = &a.rec[i];

    d = r->seq ? draw_of(s, r->seq) : NULL;
    if (!d)
      continue;
    if (d->has_record && d->has_record != (int)file + 1) {
      failed(c, file, r->line, SC_RECORD_REUSED, "journal entry %" PRIu64
             " is also the draw of a record in %s", r->seq,
             c->paths[d->has_record - 1]);
      continue;
    }
    d->has_record = (int)file + 1;
    (*joined)++;
    if (r->emitted == 1 && r->token_prob > 0 && r->token_prob <= 1) {
      s->units[d->unit].ss += -log(r->token_prob);
      s->units[d->unit].ns++;
    }
  }
  audit_free(&a);
  return 0;
}

/* Every *.jsonl of dir/records, in name order.  0, or -1 (said). */
static int
check_records(struct ctx *c, struct study *s, const char *dir,
              uint64_t *files, uint64_t *joined)
{
  char rdir[4096], jdir[4096], path[8192], **names = NULL, **p;
  struct dirent *e;
  size_t n = 0, i, l;
  int r = 0;
  DIR *d;

  snprintf(rdir, sizeof rdir, "%s/records", dir);
  snprintf(jdir, sizeof jdir, "%s/journal", dir);
  d = opendir(rdir);
  if (!d) {
    if (errno == ENOENT)
      return 0;
    fprintf(stderr, "qrs-audit: %s: %s\n", rdir, strerror(errno));
    return -1;
  }
  while ((e = readdir(d)) != NULL) {
    l = strlen(e->d_name);
    if (l < 7 || strcmp(e->d_name + l - 6, ".jsonl") != 0)
      continue;
    p = realloc(names, (n + 1) * sizeof(*p));
    if (!p || !(p[n] = strdup(e->d_name))) {
      names = p ? p : names;
      r = -1;
      fprintf(stderr, "qrs-audit: out of memory\n");
      break;
    }
    names = p;
    n++;
  }
  closedir(d);
  if (n)
    qsort(names, n, sizeof(*names), cmp_name);
  for (i = 0; i < n && r == 0; i++) {
    snprintf(path, sizeof path, "%s/%s", rdir, names[i]);
    r = one_records(c, s, path, jdir, joined);
    (*files)++;
  }
  for (i = 0; i < n; i++)
    free(names[i]);
  free(names);
  return r;
}

/* ---- the statistics ------------------------------------------------- */

struct result {
  const char *name;
  int ok;                           /* computed */
  struct study_welch w;             /* the unit values (ks_u: Phi^-1(u)) */
  double ks_d, p, power;
  size_t na, nb;
  unsigned sims;                    /* ks_u's power: simulated studies */
};

/* Statistic which of study s, label A against label B. */
static int
compute(const struct study *s, const char *which, struct result *res)
{
  double *a, *b, *za = NULL, *zb = NULL;
  size_t na = 0, nb = 0, i, n;
  int ks = strcmp(which, "ks_u") == 0, sur, r = -EINVAL;

  memset(res, 0, sizeof *res);
  res->name = which;
  sur = strcmp(which, "mean_surprisal") == 0;
  n = ks ? s->n_draws : s->n_units;
  a = malloc((n ? n : 1) * sizeof(*a));
  b = malloc((n ? n : 1) * sizeof(*b));
  if (!a || !b) {
    r = -ENOMEM;
    goto out;
  }
  for (i = 0; i < n; i++) {
    const struct unit *u = ks ? NULL : &s->units[i];
    int label = ks ? s->draws[i].label : u->label;
    double v;

    if (ks) {
      v = s->draws[i].u;
      if (!(v > 0 && v < 1))
        continue;
    } else if (sur ? u->ns == 0 : u->nz == 0) {
      continue;
    } else {
      v = sur ? u->ss / u->ns : u->zs / u->nz;
    }
    if (label == 0)
      a[na++] = v;
    else if (label == 1)
      b[nb++] = v;
  }
  res->na = na;
  res->nb = nb;
  if (ks) {
    za = malloc((na ? na : 1) * sizeof(*za));
    zb = malloc((nb ? nb : 1) * sizeof(*zb));
    if (!za || !zb) {
      r = -ENOMEM;
      goto out;
    }
    for (i = 0; i < na; i++)
      za[i] = ustat_phi_inv(a[i]);
    for (i = 0; i < nb; i++)
      zb[i] = ustat_phi_inv(b[i]);
    if (study_welch(za, na, zb, nb, &res->w) != 0)
      goto out;
    res->ks_d = study_ks2(a, na, b, nb);
    res->p = study_ks2_pvalue(res->ks_d, na, nb);
    /* simulated: only for the pre-registered statistic (its cost) */
    res->sims = strcmp(s->statistic, which) == 0 ?
                study_power_ks_sims(na, nb) : 0;
    res->power = res->sims ? study_power_ks(s->effect, na, nb, s->alpha,
                                            res->sims, POWER_SEED) : NAN;
    if (res->power < 0) {
      r = -ENOMEM;
      goto out;
    }
  } else {
    if (study_welch(a, na, b, nb, &res->w) != 0)
      goto out;
    res->p = res->w.p;
    res->power = study_power(s->effect, na, nb, s->alpha);
  }
  res->ok = 1;
  r = 0;
out:
  free(a);
  free(b);
  free(za);
  free(zb);
  return r;
}

/* ---- the report ----------------------------------------------------- */

static const char *
arm_of_label(const struct study *s, int label, char *buf, size_t len)
{
  const struct arm *a;

  if (!s->revealed)
    return "";
  a = &s->arm[s->label_arm[label]];
  snprintf(buf, len, " (%s, %s)", a->source, a->type);
  return buf;
}

static void
print_result(FILE *out, const struct study *s, const struct result *r,
             int primary)
{
  char x[96], y[96];

  fprintf(out, "%s: %s%s\n", primary ? "pre-registered statistic" :
          "exploratory (not pre-registered)", r->name,
          s->k > 2 ? " (label A against label B: the first two labels; "
          "the other arms are left out)" : "");
  if (!r->ok) {
    fprintf(out, "  not computed: fewer than 2 %s with a value in label A "
            "or B (or no variance)%s\n", strcmp(r->name, "ks_u") ?
            "units" : "draws", strcmp(r->name, "mean_surprisal") ? "" :
            "; it needs the records (records/*.jsonl)");
    return;
  }
  fprintf(out, "  A%s - B%s\n", arm_of_label(s, 0, x, sizeof x),
          arm_of_label(s, 1, y, sizeof y));
  if (strcmp(r->name, "ks_u") == 0)
    fprintf(out, "  two-sample Kolmogorov-Smirnov of u over %zu and %zu "
            "draws: D = %.6g, p = %.4g\n", r->na, r->nb, r->ks_d, r->p);
  else
    fprintf(out, "  Welch t over %zu and %zu units: t = %.4f, df = %.1f, "
            "p = %.4g\n", r->na, r->nb, r->w.t, r->w.df, r->p);
  fprintf(out, "  %s: A %.6g, B %.6g; difference %.6g (95%% CI %.6g to "
          "%.6g)\n", strcmp(r->name, "ks_u") == 0 ? "mean Phi^-1(u) per "
          "draw" : strcmp(r->name, "mean_surprisal") == 0 ?
          "mean surprisal per unit (nats)" : "mean Phi^-1(u) per unit",
          r->w.mean_a, r->w.mean_b, r->w.diff, r->w.diff_lo, r->w.diff_hi);
  fprintf(out, "  effect size d = %.4f (95%% CI %.4f to %.4f)\n", r->w.d,
          r->w.d_lo, r->w.d_hi);
  if (!isnan(r->power))
    fprintf(out, "  power against an effect of %g s.d. at alpha %g: %.3f%s"
            "\n", s->effect, s->alpha, r->power, r->sims ?
            " (simulated)" : "");
  if (primary)
    fprintf(out, "  %s\n", r->p <= s->alpha ? "p <= alpha: the null "
            "hypothesis (no difference between the arms) is rejected" :
            "p > alpha: the null hypothesis (no difference between the "
            "arms) is not rejected");
}

static void
print_study(FILE *out, const struct study *s, uint64_t prng_draws)
{
  char x[96];
  size_t i;

  fprintf(out, "study %s: %zu arms, %s\n", s->name, s->k, s->revealed ?
          "revealed" : "blinded (counts per label only)");
  fprintf(out, "  plan: unit %s, %" PRIu64 " units, statistic %s, alpha %g, "
          "effect %g; study records: %zu (one per qrsd start)\n", s->unit,
          s->planned, s->statistic, s->alpha, s->effect, s->records);
  for (i = 0; i < s->k; i++)
    fprintf(out, "  label %c%s: %" PRIu64 " units, %" PRIu64 " draws\n",
            (char)('A' + i), arm_of_label(s, (int)i, x, sizeof x),
            s->label_units[i], s->label_draws[i]);
  if (s->n_units >= s->planned)
    fprintf(out, "  units: %zu of %" PRIu64 " planned: complete\n",
            s->n_units, s->planned);
  else
    fprintf(out, "  units: stopped early at %zu of %" PRIu64 " planned\n",
            s->n_units, s->planned);
  if (s->revealed)
    fprintf(out, "  revealed: commitments, label order, the assignment of "
            "%zu units and %" PRIu64 " prng draws' bytes checked\n",
            s->n_units, prng_draws);
}

static int
cmp_fail(const void *x, const void *y)
{
  const struct failure *a = x, *b = y;

  return order3(a->file, b->file, a->line, b->line, (uint64_t)a->check,
                (uint64_t)b->check);
}

/* The plots of the study's draws, by label (audit_stats.h). */
static int
plots(const struct study *s, const char *dir)
{
  struct audit_sample *v;
  struct audit_stats st;
  char err[512];
  size_t i, n = 0;
  int r;

  v = calloc(s->n_draws ? s->n_draws : 1, sizeof(*v));
  if (!v)
    return -1;
  for (i = 0; i < s->n_draws; i++) {
    v[n].u = s->draws[i].u;
    v[n].t_recv = s->draws[i].t_recv;
    v[n].t_sent = s->draws[i].t_sent;
    snprintf(v[n].source, sizeof v[n].source, "%c%s%.40s",
             'A' + s->draws[i].label, s->revealed ? " " : "",
             s->revealed ? s->arm[s->label_arm[s->draws[i].label]].source :
             "");
    n++;
  }
  r = audit_stats_compute(v, n, NULL, 0, &st);
  if (r == 0)
    r = audit_stats_plots(dir, v, n, &st, err, sizeof err);
  else
    snprintf(err, sizeof err, "fewer than 2 draws with u in (0, 1)");
  if (r < 0)
    fprintf(stderr, "qrs-audit: --report: %s\n", err);
  free(v);
  return r < 0 ? -1 : 0;
}

static uint64_t
prng_draws(const struct study *s)
{
  uint64_t n = 0;
  size_t i;

  for (i = 0; s->revealed && i < s->n_draws; i++)
    n += s->arm[s->label_arm[s->draws[i].label]].has_seed;
  return n;
}

/* [lo, hi] */
static struct json_object *
interval(double lo, double hi)
{
  struct json_object *a = json_object_new_array_ext(2);

  json_object_array_add(a, json_object_new_double(lo));
  json_object_array_add(a, json_object_new_double(hi));
  return a;
}

static void
add_result(struct json_object *o, const char *key, const struct result *r)
{
  struct json_object *x = json_object_new_object();

  json_object_object_add(x, "statistic", json_object_new_string(r->name));
  json_object_object_add(x, "computed", json_object_new_boolean(r->ok));
  if (r->ok) {
    json_object_object_add(x, "n_a", json_object_new_uint64(r->na));
    json_object_object_add(x, "n_b", json_object_new_uint64(r->nb));
    json_object_object_add(x, "t", json_object_new_double(r->w.t));
    json_object_object_add(x, "ks_d", json_object_new_double(r->ks_d));
    json_object_object_add(x, "p", json_object_new_double(r->p));
    json_object_object_add(x, "diff", json_object_new_double(r->w.diff));
    json_object_object_add(x, "diff_ci", interval(r->w.diff_lo,
                                                  r->w.diff_hi));
    json_object_object_add(x, "d", json_object_new_double(r->w.d));
    json_object_object_add(x, "d_ci", interval(r->w.d_lo, r->w.d_hi));
    if (!isnan(r->power))
      json_object_object_add(x, "power", json_object_new_double(r->power));
  }
  json_object_object_add(o, key, x);
}

static struct json_object *
study_json(const struct study *s)
{
  struct json_object *o = json_object_new_object(), *a, *x;
  size_t i;

  json_object_object_add(o, "name", json_object_new_string(s->name));
  json_object_object_add(o, "revealed", json_object_new_boolean(s->revealed));
  json_object_object_add(o, "unit", json_object_new_string(s->unit));
  json_object_object_add(o, "planned_units",
                         json_object_new_uint64(s->planned));
  json_object_object_add(o, "units", json_object_new_uint64(s->n_units));
  json_object_object_add(o, "complete",
                         json_object_new_boolean(s->n_units >= s->planned));
  json_object_object_add(o, "statistic",
                         json_object_new_string(s->statistic));
  a = json_object_new_array();
  for (i = 0; i < s->k; i++) {
    char l[2] = { (char)('A' + i), 0 };

    x = json_object_new_object();
    json_object_object_add(x, "label", json_object_new_string(l));
    json_object_object_add(x, "units",
                           json_object_new_uint64(s->label_units[i]));
    json_object_object_add(x, "draws",
                           json_object_new_uint64(s->label_draws[i]));
    if (s->revealed)
      json_object_object_add(x, "arm", json_object_new_string(
                             s->arm[s->label_arm[i]].source));
    json_object_array_add(a, x);
  }
  json_object_object_add(o, "labels", a);
  return o;
}

int
audit_study(const struct audit_study_opts *o, FILE *out)
{
  struct audit_journal_result jr;
  struct json_object *jo = NULL, *ja;
  struct result res[N_STATISTICS];
  struct study *target = NULL;
  char jdir[4096], rpath[4096], err[1024] = "";
  uint64_t total = 0, rfiles = 0, joined = 0;
  size_t i, j;
  int fault, rc = 2, computed = 0;
  struct ctx c;

  memset(&c, 0, sizeof c);
  memset(&jr, 0, sizeof jr);
  c.o = o;
  c.jr = &jr;
  c.fail = calloc(FAIL_KEPT, sizeof(*c.fail));
  c.md = EVP_MD_CTX_new();
  c.cc = EVP_CIPHER_CTX_new();
  c.chacha = EVP_CIPHER_fetch(NULL, "ChaCha20", NULL);
  if (!c.fail || !c.md || !c.cc || !c.chacha) {
    fprintf(stderr, "qrs-audit: out of memory, or no ChaCha20 in "
            "libcrypto\n");
    goto out;
  }
  snprintf(jdir, sizeof jdir, "%s/journal", o->dir);
  snprintf(rpath, sizeof rpath, "%s/reveal.json", o->dir);
  if (read_reveal(rpath, &c.rv) != 0)
    goto out;
  c.reveal_path = path_index(&c, rpath);
  fault = audit_journal_walk(jdir, 0, NULL, 0, on_line, NULL, &c, &jr, err,
                             sizeof err);
  if (c.oom || fault == JOURNAL_FAULT_IO) {
    fprintf(stderr, "qrs-audit: %s\n", c.oom ? "out of memory" : err);
    goto out;
  }
  for (i = 0; i < c.n_studies; i++)
    if (is_target(&c, &c.studies[i]))
      target = &c.studies[i];
  if (c.rv.present && !target)
    failed(&c, c.reveal_path, 1, SC_STUDY_MISSING, "study %s has no study "
           "record in the journal", c.rv.study);
  for (i = 0; i < c.n_studies; i++)
    check_ctr(&c, &c.studies[i]);
  if (check_records(&c, target, o->dir, &rfiles, &joined) != 0)
    goto out;
  if (c.oom) {
    fprintf(stderr, "qrs-audit: out of memory\n");
    goto out;
  }
  for (i = 0; i < SC_N + AUDIT_N_CHECKS; i++)
    total += c.counts[i];
  if (target && target->revealed && total == 0 && fault == JOURNAL_INTACT) {
    computed = 1;
    for (i = 0; i < N_STATISTICS; i++)
      if (compute(target, statistics[i], &res[i]) == -ENOMEM) {
        fprintf(stderr, "qrs-audit: out of memory\n");
        goto out;
      }
  }
  if (o->report && (target || c.n_studies) &&
      plots(target ? target : &c.studies[0], o->report) != 0)
    goto out;
  if (c.n_fail)
    qsort(c.fail, c.n_fail, sizeof(*c.fail), cmp_fail);
  rc = fault != JOURNAL_INTACT || total ? 1 : 0;

  if (o->json) {
    jo = json_object_new_object();
    json_object_object_add(jo, "verdict", json_object_new_string(
      fault != JOURNAL_INTACT ? audit_journal_fault_name(fault) :
      total && c.n_fail ? check_name(c.fail[0].check) : total ?
      "failed" : "intact"));
    if (fault != JOURNAL_INTACT)
      json_object_object_add(jo, "journal_fault", json_object_new_string(
                             err));
    json_object_object_add(jo, "failures_total",
                           json_object_new_uint64(total));
    ja = json_object_new_array();
    for (i = 0; i < c.n_fail && i < (size_t)o->max_fail; i++)
      json_object_array_add(ja, audit_failure_json(
        c.paths[c.fail[i].file], c.fail[i].line,
        check_name(c.fail[i].check), c.fail[i].detail));
    json_object_object_add(jo, "failures", ja);
    ja = json_object_new_array();
    for (i = 0; i < c.n_studies; i++)
      if (!c.rv.present || &c.studies[i] == target)
        json_object_array_add(ja, study_json(&c.studies[i]));
    json_object_object_add(jo, "studies", ja);
    if (computed) {
      for (i = 0; i < N_STATISTICS; i++)
        if (strcmp(statistics[i], target->statistic) == 0)
          add_result(jo, "primary", &res[i]);
      ja = json_object_new_object();
      for (i = 0; i < N_STATISTICS; i++)
        if (strcmp(statistics[i], target->statistic) != 0)
          add_result(ja, statistics[i], &res[i]);
      json_object_object_add(jo, "exploratory", ja);
    }
    fprintf(out, "%s\n", json_object_to_json_string_ext(jo,
            JSON_C_TO_STRING_PLAIN));
    json_object_put(jo);
    goto out;
  }
  for (i = 0; i < c.n_fail && i < (size_t)o->max_fail; i++)
    fprintf(out, "%s:%" PRIu64 ": %s: %s\n", c.paths[c.fail[i].file],
            c.fail[i].line, check_name(c.fail[i].check), c.fail[i].detail);
  if (fault != JOURNAL_INTACT)
    fprintf(out, "journal %s: %s (%" PRIu64 " entries intact before it)\n",
            audit_journal_fault_name(fault), err, jr.entries);
  else
    fprintf(out, "journal intact: %" PRIu64 " entries, head %s\n",
            jr.entries, jr.head);
  if (c.n_studies == 0)
    fprintf(out, "no study records in the journal\n");
  for (i = 0; i < c.n_studies; i++)
    if (!c.rv.present || &c.studies[i] == target)
      print_study(out, &c.studies[i], prng_draws(&c.studies[i]));
  if (rfiles && target)
    fprintf(out, "records: %" PRIu64 " files, %" PRIu64 " records of the "
            "study's draws\n", rfiles, joined);
  else if (rfiles)
    fprintf(out, "records: %" PRIu64 " files checked against the "
            "journal\n", rfiles);
  if (o->report && (target || c.n_studies))
    fprintf(out, "plots: %s/u_hist.png, u_qq.png, u_time.png, latency.png "
            "(and .svg), by label\n", o->report);
  if (total) {
    fprintf(out, "%" PRIu64 " checks failed:", total);
    for (i = 0, j = 0; i < SC_N + AUDIT_N_CHECKS; i++)
      if (c.counts[i])
        fprintf(out, "%s %s %" PRIu64, j++ ? "," : "", check_name((int)i),
                c.counts[i]);
    fprintf(out, "\n");
  }
  if (target && !computed)
    fprintf(out, "statistics withheld: %s\n", !target->revealed ?
            "not revealed" : "a check failed");
  if (!c.rv.present && c.n_studies)
    fprintf(out, "blinded: no reveal.json; the statistics wait for the "
            "seeds\n");
  for (i = 0; computed && i < N_STATISTICS; i++)
    if (strcmp(statistics[i], target->statistic) == 0)
      print_result(out, target, &res[i], 1);
  for (i = 0; computed && i < N_STATISTICS; i++)
    if (strcmp(statistics[i], target->statistic) != 0)
      print_result(out, target, &res[i], 0);
out:
  for (i = 0; i < c.n_studies; i++) {
    free(c.studies[i].epochs);
    free(c.studies[i].units);
    free(c.studies[i].slots);
    free(c.studies[i].draws);
  }
  for (i = 0; i < c.n_paths; i++)
    free(c.paths[i]);
  free(c.paths);
  free(c.fail);
  free(c.buf);
  EVP_MD_CTX_free(c.md);
  EVP_CIPHER_CTX_free(c.cc);
  EVP_CIPHER_free(c.chacha);
  return rc;
}
