/* qrs-audit: the checks that replay the sampler (see audit.h): the nonce
   chain from the salt (--salt), and each token selected again from the
   logits dump and its record's u (--logits). */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qrs/error.h>
#include <qrs/sampler.h>

#include "audit.h"
#include "nonce.h"
#include "sortcmp.h"

static int
cmp_line(const void *x, const void *y)
{
  const struct audit_record *a = x, *b = y;

  return SORT_ORDER(a->line, b->line);
}

/* ---- --salt ---------------------------------------------------------- */

/* Sequences followed at once (concurrent requests logging to one file);
   beyond it the least recently extended is forgotten, and its next
   record fails the chain. */
#define OPEN_SEQS 4096

/* A request's chain: the token emitted last (the head: a later token's
   draw is committed to it) and the record read last (the tail: a
   speculative row's draw is committed to the row before it, emitted or
   not). */
struct seq {
  uint64_t step;                /* the head's step */
  int64_t token;                /* the head's token */
  uint64_t tail_step;
  int64_t tail_token;
  int tail_rejected;            /* the tail is a rejected draft: so is
                                   every row after it in its step */
  uint64_t used;                /* a clock, for forgetting */
};

int
audit_nonce_chain(struct audit *a, const uint8_t *salt, size_t len,
                  char *err, size_t errlen)
{
  struct seq *open_seqs;
  size_t n_open = 0, i, j, oldest;
  uint64_t clock = 0, want;
  int via_tail;

  open_seqs = calloc(OPEN_SEQS, sizeof *open_seqs);
  if (open_seqs == NULL) {
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  qsort(a->rec, a->n_rec, sizeof *a->rec, cmp_line);
  for (i = 0; i < a->n_rec; i++) {
    const struct audit_record *r = &a->rec[i];

    clock++;
    j = n_open;
    via_tail = 0;
    if (r->step == 0) {
      want = nonce_derive(salt, len, 0, -1);
    } else {
      /* the open sequence at step - 1 whose token gives this nonce */
      want = 0;
      for (j = 0; j < n_open; j++) {
        if (open_seqs[j].step + 1 == r->step) {
          want = nonce_derive(salt, len, r->step, open_seqs[j].token);
          if (r->nonce == 0 || want == r->nonce)
            break;
        }
        if (open_seqs[j].tail_step + 1 == r->step &&
            (open_seqs[j].tail_step != open_seqs[j].step ||
             open_seqs[j].tail_token != open_seqs[j].token)) {
          want = nonce_derive(salt, len, r->step, open_seqs[j].tail_token);
          if (r->nonce == 0 || want == r->nonce) {
            via_tail = 1;
            break;
          }
        }
      }
    }
    if (r->nonce != 0 && want != r->nonce) {
      if (r->step == 0)
        audit_failed(a, r->line, AUDIT_NONCE_CHAIN, "nonce %016" PRIx64
                     " at step 0 is not the salt's (%016" PRIx64 ")",
                     r->nonce, want);
      else
        audit_failed(a, r->line, AUDIT_NONCE_CHAIN, "nonce %016" PRIx64
                     " at step %" PRIu64 " follows from the salt and no "
                     "earlier record's token at step %" PRIu64 "%s",
                     r->nonce, r->step, r->step - 1,
                     want ? "" : " (there is none)");
      continue;
    }
    if (r->step != 0 && j == n_open)
      continue;                 /* greedy, nothing to follow */
    if (via_tail && open_seqs[j].tail_rejected && r->emitted == 1) {
      audit_failed(a, r->line, AUDIT_NONCE_CHAIN, "the token at step %"
                   PRIu64 " is emitted, but its row follows a rejected "
                   "draft (every later row of that step is rejected too)",
                   r->step);
      continue;
    }
    if (j == n_open) {          /* a new sequence */
      if (n_open < OPEN_SEQS) {
        j = n_open++;
      } else {
        for (oldest = 0, j = 1; j < n_open; j++)
          if (open_seqs[j].used < open_seqs[oldest].used)
            oldest = j;
        j = oldest;
      }
    }
    if (r->emitted != 0 || r->emitted_token >= 0 || r->step == 0) {
      open_seqs[j].step = r->step;
      open_seqs[j].token = r->emitted == 0 && r->emitted_token >= 0
                           ? r->emitted_token : r->token;
    }
    open_seqs[j].tail_step = r->step;
    open_seqs[j].tail_token = r->token;
    open_seqs[j].tail_rejected = r->emitted == 0 && r->emitted_token < 0;
    open_seqs[j].used = clock;
  }
  free(open_seqs);
  return 0;
}

/* ---- --logits -------------------------------------------------------- */

static uint32_t
get_u32(const unsigned char *p)
{
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

static uint64_t
get_u64(const unsigned char *p)
{
  return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

/* Rows longer than this are not a vocabulary (a corrupt frame). */
#define ROW_MAX (1u << 24)

/* The dump's header: its configuration into a new config, its hash. */
static int
read_header(FILE *f, const char *path, struct qrs_sampler_config **ret,
            char hash[17], char *err, size_t errlen)
{
  unsigned char head[16];
  struct qrs_sampler_config *cfg;
  char *text, *line, *next, *eq;
  uint32_t len;
  int r;

  if (fread(head, 1, sizeof head, f) != sizeof head ||
      memcmp(head, QRS_LOGITS_DUMP_MAGIC, 8) != 0) {
    snprintf(err, errlen, "%s: not a libqrs logits dump (no %s header)",
             path, QRS_LOGITS_DUMP_MAGIC);
    return -EINVAL;
  }
  if (get_u32(head + 8) != QRS_LOGITS_DUMP_VERSION) {
    snprintf(err, errlen, "%s: logits dump version %" PRIu32 " (this "
             "qrs-audit reads %d)", path, get_u32(head + 8),
             QRS_LOGITS_DUMP_VERSION);
    return -EINVAL;
  }
  len = get_u32(head + 12);
  if (len > (1u << 20) || (text = malloc(len + 1)) == NULL) {
    snprintf(err, errlen, "%s: a header of %" PRIu32 " bytes", path, len);
    return -EINVAL;
  }
  if (fread(text, 1, len, f) != len) {
    snprintf(err, errlen, "%s: the header is cut short", path);
    free(text);
    return -EINVAL;
  }
  text[len] = '\0';
  if (qrs_sampler_config_new(&cfg) < 0) {
    free(text);
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  hash[0] = '\0';
  for (line = text; *line; line = next) {
    next = strchr(line, '\n');
    next = next ? (*next = '\0', next + 1) : line + strlen(line);
    eq = strchr(line, '=');
    if (eq == NULL)
      continue;
    *eq++ = '\0';
    if (strcmp(line, "config_hash") == 0) {
      snprintf(hash, 17, "%s", eq);
      continue;
    }
    r = qrs_sampler_config_set(cfg, line, eq);
    if (r < 0) {
      snprintf(err, errlen, "%s: header: %s", path,
               qrs_sampler_config_error(cfg));
      qrs_sampler_config_free(cfg);
      free(text);
      return -EINVAL;
    }
  }
  free(text);
  if (strlen(hash) != 16) {
    snprintf(err, errlen, "%s: the header has no config_hash", path);
    qrs_sampler_config_free(cfg);
    return -EINVAL;
  }
  *ret = cfg;
  return 0;
}

/* Records by (timestamp_ns, step): a frame finds its record. */
static int
cmp_key(const void *x, const void *y)
{
  const struct audit_record *a = *(const struct audit_record *const *)x;
  const struct audit_record *b = *(const struct audit_record *const *)y;

  return SORT_ORDER2(a->timestamp_ns, b->timestamp_ns, a->step, b->step);
}

static const struct audit_record *
find_record(struct audit_record **by_key, size_t n, int64_t ts,
            uint64_t step)
{
  struct audit_record key, *kp = &key, **hit;

  key.timestamp_ns = ts;
  key.step = step;
  hit = bsearch(&kp, by_key, n, sizeof *by_key, cmp_key);
  return hit ? *hit : NULL;
}

int
audit_logits(struct audit *a, const char *path, uint64_t *ret_rows,
             char *err, size_t errlen)
{
  static const size_t esize[] = { 4, 2, 2, 8 };
  unsigned char fh[QRS_LOGITS_FRAME_HEADER];
  struct qrs_sampler_config *cfg = NULL;
  struct qrs_sampler *s = NULL;
  struct audit_record **by_key = NULL;
  const struct audit_record *r;
  struct qrs_draw d;
  char hash[17], val[64];
  void *row = NULL;
  size_t i, cap = 0, got;
  uint64_t step, n, next_step = 0, frames = 0, rows = 0;
  uint32_t dtype, token;
  int64_t ts;
  FILE *f;
  int e = 0, rc;

  *ret_rows = 0;
  f = fopen(path, "re");
  if (f == NULL) {
    e = -errno;
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return e;
  }
  e = read_header(f, path, &cfg, hash, err, errlen);
  if (e < 0)
    goto out;
  if (qrs_sampler_config_get(cfg, "temperature_strategy", val,
                             sizeof val) >= 0 &&
      strcmp(val, "coherence_gate") == 0) {
    snprintf(err, errlen, "%s: coherence_gate is replayed only with each "
             "draw's metadata, which the records do not carry whole", path);
    e = -EINVAL;
    goto out;
  }
  by_key = malloc((a->n_rec ? a->n_rec : 1) * sizeof *by_key);
  if (by_key == NULL) {
    e = -ENOMEM;
    snprintf(err, errlen, "out of memory");
    goto out;
  }
  for (i = 0; i < a->n_rec; i++)
    by_key[i] = &a->rec[i];
  qsort(by_key, a->n_rec, sizeof *by_key, cmp_key);
  /* every record of the dump's sampler has its configuration */
  for (i = 0; i < a->n_rec; i++)
    if (strcmp(a->rec[i].config_hash, hash) != 0)
      audit_failed(a, a->rec[i].line, AUDIT_CONFIG_MISMATCH, "config_hash "
                   "%s, the logits dump's sampler %s", a->rec[i].config_hash,
                   hash);

  while ((got = fread(fh, 1, sizeof fh, f)) == sizeof fh) {
    frames++;
    if (memcmp(fh, QRS_LOGITS_FRAME_MAGIC, 8) != 0 ||
        (dtype = get_u32(fh + 8)) > QRS_DTYPE_F64 ||
        (n = get_u64(fh + 32)) == 0 || n > ROW_MAX) {
      snprintf(err, errlen, "%s: row %" PRIu64 " is not a frame", path,
               frames);
      e = -EINVAL;
      goto out;
    }
    step = get_u64(fh + 16);
    ts = (int64_t)get_u64(fh + 24);
    if (n * esize[dtype] > cap) {
      free(row);
      cap = n * esize[dtype];
      row = malloc(cap);
      if (row == NULL) {
        e = -ENOMEM;
        snprintf(err, errlen, "out of memory");
        goto out;
      }
    }
    if (fread(row, esize[dtype], n, f) != n) {
      snprintf(err, errlen, "%s: row %" PRIu64 " is cut short", path,
               frames);
      e = -EINVAL;
      goto out;
    }
    r = find_record(by_key, a->n_rec, ts, step);
    if (s == NULL) {
      rc = qrs_sampler_new(cfg, n, &s);
      if (rc < 0) {
        snprintf(err, errlen, "%s: a sampler from its configuration: %s",
                 path, qrs_strerror(rc));
        e = -EINVAL;
        goto out;
      }
    }
    if (step == 0 && next_step != 0) {
      qrs_sampler_reset(s);     /* the next request: fresh state */
    } else if (step != next_step) {
      if (frames == 1)
        audit_failed(a, r ? r->line : 0, AUDIT_LOGITS_MISSING, "the dump "
                     "begins at step %" PRIu64 ": its request's earlier "
                     "rows are missing, the replay stops", step);
      else
        audit_failed(a, r ? r->line : 0, AUDIT_LOGITS_MISSING, "the dump "
                     "goes from step %" PRIu64 " to step %" PRIu64 " (rows "
                     "missing): the replay stops", next_step - 1, step);
      break;
    }
    next_step = step + 1;
    if (r == NULL) {
      audit_failed(a, 0, AUDIT_LOGITS_MISSING, "the dump's row %" PRIu64
                   " (step %" PRIu64 ", timestamp_ns %" PRId64 ") has no "
                   "record: the replay stops", frames, step, ts);
      break;
    }
    memset(&d, 0, sizeof d);
    d.u = isnan(r->u) ? 0.5 : r->u;     /* greedy: u is not read */
    d.z = r->z;
    d.sample_mean = r->mean;
    rc = qrs_sampler_step(s, row, (enum qrs_dtype)dtype, n, &d, 0, &token,
                          NULL);
    if (rc != 0) {
      audit_failed(a, r->line, AUDIT_TOKEN_MISMATCH, "its row selects no "
                   "token (%s)", rc > 0 ? "bypass" : qrs_strerror(rc));
      continue;
    }
    rows++;
    if ((int64_t)token != r->token)
      audit_failed(a, r->line, AUDIT_TOKEN_MISMATCH, "recorded token %"
                   PRId64 ", its logits row and u %.17g select %" PRIu32,
                   r->token, r->u, token);
  }
  if (got != 0 && got != sizeof fh && e == 0) {
    snprintf(err, errlen, "%s: the last row's header is cut short", path);
    e = -EINVAL;
  }
out:
  *ret_rows = rows;
  qrs_sampler_free(s);
  qrs_sampler_config_free(cfg);
  free(by_key);
  free(row);
  fclose(f);
  return e;
}
