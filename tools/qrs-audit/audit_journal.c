/* qrs-audit's walk of the draw journal and the checkpoints it is
   anchored to (audit_journal.h). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>
#include <openssl/evp.h>

#include "audit.h"
#include "audit_journal.h"
#include "sortcmp.h"

#define ZERO_HEX \
  "0000000000000000000000000000000000000000000000000000000000000000"
#define FILES_MAX (1u << 24)
#define EXPORT_LINE_MAX AUDIT_LINE_MAX

const char *
audit_journal_fault_name(int fault)
{
  switch (fault) {
  case AUDIT_JOURNAL_FILE_MISSING: return "file-missing";
  case AUDIT_JOURNAL_TRUNCATED: return "journal-truncated";
  case AUDIT_JOURNAL_CHECKPOINT: return "checkpoint-mismatch";
  }
  return journal_fault_name((enum journal_fault)fault);
}

static int
is_hex64(const char *s, size_t len)
{
  size_t i;

  if (len != JOURNAL_HEX_LEN)
    return 0;
  for (i = 0; i < len; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
      return 0;
  return 1;
}

/* A decimal uint64 that is all of s[0, len): 0, or -1. */
static int
parse_u64(const char *s, size_t len, uint64_t *v)
{
  uint64_t x = 0;
  size_t i;

  if (len == 0 || len > 20)
    return -1;
  for (i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9' || x > (UINT64_MAX - 9) / 10)
      return -1;
    x = 10 * x + (uint64_t)(s[i] - '0');
  }
  *v = x;
  return 0;
}

int
audit_checkpoint_parse(const char *s, struct audit_checkpoint *cp)
{
  const char *colon;

  colon = strchr(s, ':');
  if (colon == NULL || parse_u64(s, (size_t)(colon - s), &cp->seq) != 0 ||
      !is_hex64(colon + 1, strlen(colon + 1)))
    return -EINVAL;
  memcpy(cp->head, colon + 1, JOURNAL_HEX_LEN + 1);
  return 0;
}

static int
push_checkpoint(struct audit_checkpoint **cps, size_t *n, size_t *cap,
                uint64_t seq, const char *head)
{
  struct audit_checkpoint *p;

  if (*n >= AUDIT_CHECKPOINTS_MAX)
    return -E2BIG;
  if (*n == *cap) {
    p = realloc(*cps, (*cap ? 2 * *cap : 64) * sizeof(*p));
    if (p == NULL)
      return -ENOMEM;
    *cps = p;
    *cap = *cap ? 2 * *cap : 64;
  }
  (*cps)[*n].seq = seq;
  memcpy((*cps)[*n].head, head, JOURNAL_HEX_LEN);
  (*cps)[*n].head[JOURNAL_HEX_LEN] = '\0';
  (*n)++;
  return 0;
}

/* One export entry's fields of interest, as they are read. */
struct cp_entry {
  int has_seq, has_head, bad;
  uint64_t seq;
  char head[JOURNAL_HEX_LEN + 1];
};

static void
cp_field(struct cp_entry *e, const char *k, size_t klen, const char *v,
         size_t vlen)
{
  if (klen == 15 && memcmp(k, "QRS_JOURNAL_SEQ", 15) == 0) {
    e->has_seq = parse_u64(v, vlen, &e->seq) == 0;
    e->bad |= !e->has_seq;
  } else if (klen == 16 && memcmp(k, "QRS_JOURNAL_HEAD", 16) == 0) {
    e->has_head = is_hex64(v, vlen);
    e->bad |= !e->has_head;
    if (e->has_head)
      memcpy(e->head, v, JOURNAL_HEX_LEN + 1);
  }
}

/* -o json: the object's string fields (an array: a repeated field, its
   strings each). */
static void
cp_json(struct cp_entry *e, struct json_object *o)
{
  struct json_object *v, *x;
  const char *keys[] = { "QRS_JOURNAL_SEQ", "QRS_JOURNAL_HEAD" };
  size_t i, k;

  for (k = 0; k < 2; k++) {
    if (!json_object_object_get_ex(o, keys[k], &v))
      continue;
    if (json_object_is_type(v, json_type_string)) {
      cp_field(e, keys[k], strlen(keys[k]), json_object_get_string(v),
               (size_t)json_object_get_string_len(v));
    } else if (json_object_is_type(v, json_type_array)) {
      for (i = 0; i < json_object_array_length(v); i++) {
        x = json_object_array_get_idx(v, i);
        if (json_object_is_type(x, json_type_string))
          cp_field(e, keys[k], strlen(keys[k]), json_object_get_string(x),
                   (size_t)json_object_get_string_len(x));
      }
    } else {
      e->bad = 1;
    }
  }
}

/* Read past n bytes of f (a pipe too): 0, or -1 at its end. */
static int
skip_bytes(FILE *f, uint64_t n)
{
  char b[4096];
  size_t k;

  while (n > 0) {
    k = n < sizeof b ? (size_t)n : sizeof b;
    if (fread(b, 1, k, f) != k)
      return -1;
    n -= k;
  }
  return 0;
}

int
audit_checkpoints_read(const char *path, struct audit_checkpoint **cps,
                       size_t *n, size_t *cap, char *err, size_t errlen)
{
  struct json_object *o;
  struct cp_entry e;
  unsigned char lenb[8];
  uint64_t line = 0, flen;
  size_t len;
  char *buf, *eq, *p;
  int json = -1, r = 0;
  FILE *f;

  f = fopen(path, "re");
  if (f == NULL) {
    r = -errno;
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return r;
  }
  buf = malloc(EXPORT_LINE_MAX + 2);
  if (buf == NULL) {
    fclose(f);
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  memset(&e, 0, sizeof e);
  for (;;) {
    if (fgets(buf, EXPORT_LINE_MAX + 2, f) == NULL) {
      if (ferror(f)) {
        r = -EIO;
        snprintf(err, errlen, "%s: read error", path);
      }
      break;
    }
    line++;
    len = strlen(buf);
    if (len > 0 && buf[len - 1] == '\n') {
      buf[--len] = '\0';
    } else if (!feof(f)) {
      r = -EFBIG;
      snprintf(err, errlen, "%s:%" PRIu64 ": a line longer than %u bytes",
               path, line, EXPORT_LINE_MAX);
      break;
    }
    p = buf;
    if (json < 0 && len > 0)
      json = buf[0] == '{' || buf[0] == '\x1e';
    if (json == 1) {
      if (*p == '\x1e')
        p++;
      if (*p == '\0')
        continue;
      o = json_tokener_parse(p);
      if (o == NULL || !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        r = -EINVAL;
        snprintf(err, errlen, "%s:%" PRIu64 ": not a JSON object (journalctl"
                 " -o json writes one a line)", path, line);
        break;
      }
      memset(&e, 0, sizeof e);
      cp_json(&e, o);
      json_object_put(o);
    } else if (len == 0) {
      /* -o export: a blank line ends an entry */
    } else {
      eq = memchr(buf, '=', len);
      if (eq != NULL) {
        cp_field(&e, buf, (size_t)(eq - buf), eq + 1,
                 len - (size_t)(eq - buf) - 1);
        continue;
      }
      /* a binary field: its name, then a little-endian 64-bit length,
         the data and a newline */
      if (fread(lenb, 1, 8, f) != 8) {
        r = -EINVAL;
        snprintf(err, errlen, "%s:%" PRIu64 ": a binary field cut short",
                 path, line);
        break;
      }
      flen = 0;
      for (r = 7; r >= 0; r--)
        flen = flen << 8 | lenb[r];
      r = 0;
      /* kept (after its name, in the buffer) when it fits, else read
         past: no field of ours is that long */
      if (flen <= EXPORT_LINE_MAX - len) {
        if (fread(buf + len + 1, 1, (size_t)flen, f) != (size_t)flen)
          r = -EINVAL;
        else
          cp_field(&e, buf, len, buf + len + 1, (size_t)flen);
      } else if (skip_bytes(f, flen) != 0) {
        r = -EINVAL;
      }
      if (r != 0 || fgetc(f) != '\n') {
        r = -EINVAL;
        snprintf(err, errlen, "%s:%" PRIu64 ": a binary field cut short",
                 path, line);
        break;
      }
      continue;
    }
    /* the end of an entry */
    if (e.bad) {
      r = -EINVAL;
      snprintf(err, errlen, "%s:%" PRIu64 ": QRS_JOURNAL_SEQ or "
               "QRS_JOURNAL_HEAD malformed", path, line);
      break;
    }
    if (e.has_seq && e.has_head) {
      r = push_checkpoint(cps, n, cap, e.seq, e.head);
      if (r < 0) {
        snprintf(err, errlen, "%s: %s", path, r == -E2BIG ?
                 "too many checkpoints" : "out of memory");
        break;
      }
    }
    memset(&e, 0, sizeof e);
  }
  if (r == 0 && json != 1 && (e.has_seq || e.has_head)) {
    /* the last entry without its blank line */
    if (e.bad) {
      r = -EINVAL;
      snprintf(err, errlen, "%s: QRS_JOURNAL_SEQ or QRS_JOURNAL_HEAD "
               "malformed", path);
    } else if (e.has_seq && e.has_head) {
      r = push_checkpoint(cps, n, cap, e.seq, e.head);
      if (r < 0)
        snprintf(err, errlen, "%s: out of memory", path);
    }
  }
  free(buf);
  fclose(f);
  return r;
}

/* The decimal sequence that starts s and ends at a tab: 0, or -1. */
static int
entry_seq(const char *s, uint64_t *v)
{
  const char *tab;

  tab = strchr(s, '\t');
  return tab ? parse_u64(s, (size_t)(tab - s), v) : -1;
}

/* The walk's state across files. */
struct walk {
  char prev[JOURNAL_HEX_LEN + 1];
  uint64_t seq;                     /* the last entry's */
  int started;                      /* an entry or a header fixed seq */
  int seq_known;                    /* seq is meaningful */
  struct audit_checkpoint *cps;
  size_t n, next;                   /* checkpoints, the next to pass */
  struct audit_journal_result *res;
  journal_gap_cb gap;               /* may be NULL */
  /* a checkpoint at seq that the record there did not match: a study
     record after it may (its hash is then the head qrsd logged) */
  int held;
  char held_hex[JOURNAL_HEX_LEN + 1];
  char held_path[4096];
  unsigned held_line;
  EVP_MD_CTX *md;
  const EVP_MD *sha;
};

/* The checkpoints at or before seq s (whose hash is hex, the hash after
   the record at s): each must be hex at s; before the walk's first entry
   they are counted as unchecked.  One at s that hex is not is held: a
   study record that follows (no sequence of its own) may have its hash;
   unmatched_checkpoint() names it once the walk passes s. */
static void
pass_checkpoints(struct walk *w, uint64_t s, const char *hex,
                 const char *path, unsigned lineno)
{
  while (w->next < w->n && w->cps[w->next].seq <= s) {
    const struct audit_checkpoint *c = &w->cps[w->next];

    if (c->seq < s) {
      w->next++;
      w->res->checkpoints_before++;
      continue;
    }
    if (memcmp(c->head, hex, JOURNAL_HEX_LEN) != 0) {
      if (!w->held) {
        w->held = 1;
        memcpy(w->held_hex, hex, JOURNAL_HEX_LEN + 1);
        snprintf(w->held_path, sizeof w->held_path, "%s", path);
        w->held_line = lineno;
      }
      return;
    }
    w->next++;
    w->held = 0;
    w->res->checkpoints_checked++;
  }
}

/* A checkpoint held at the walk's sequence that no record there matched:
   the fault (the first record's file and line), else 0. */
static int
unmatched_checkpoint(struct walk *w, char *err, size_t errlen)
{
  const struct audit_checkpoint *c;

  if (!w->held || w->next >= w->n || w->cps[w->next].seq != w->seq)
    return 0;
  c = &w->cps[w->next];
  snprintf(err, errlen, "%s:%u: the hash after sequence %" PRIu64
           " is %s, the checkpoint says %s (the chain was rewritten)",
           w->held_path, w->held_line, w->seq, w->held_hex, c->head);
  return AUDIT_JOURNAL_CHECKPOINT;
}

/* Chain the record (entry or gap) that ends the sequence at last, whose
   prev field is prev and whose hash is hx: prev must be the hash of the
   record before, the checkpoints up to last must agree, then the walk
   stands after it.  0, or the fault (said in err). */
static int
chain_link(struct walk *w, const char *prev, uint64_t last, const char *hx,
           const char *path, unsigned lineno, char *err, size_t errlen)
{
  int r;

  if (memcmp(prev, w->prev, JOURNAL_HEX_LEN) != 0) {
    snprintf(err, errlen, "%s:%u: prev is not the hash of the entry "
             "before", path, lineno);
    return JOURNAL_FAULT_CHAIN;
  }
  r = unmatched_checkpoint(w, err, errlen);
  if (r != 0)
    return r;
  w->held = 0;
  pass_checkpoints(w, last, hx, path, lineno);
  w->seq = last;
  memcpy(w->prev, hx, JOURNAL_HEX_LEN + 1);
  return 0;
}

/* A gap record (its hash hx checked): the numbers first..last, in no
   entry, take the sequence on where it stands (qrsd wrote it after a
   restart past its reservation, or after a write error), and it chains
   like an entry; the records of those numbers go to w->gap. */
static int
walk_gap(struct walk *w, char *line, size_t len, const char *hx,
         const char *path, unsigned lineno, void *ctx, char *err,
         size_t errlen)
{
  const char *reason, *prev;
  uint64_t first, last;
  size_t rlen;
  int r;

  if (journal_gap_fields(line, len, &first, &last, &reason, &rlen,
                         &prev) < 0) {
    snprintf(err, errlen, "%s:%u: malformed gap record", path, lineno);
    return JOURNAL_FAULT_PARSE;
  }
  if (!w->seq_known) {
    w->seq = first - 1;
    w->seq_known = 1;
  }
  if (first != w->seq + 1) {
    snprintf(err, errlen, "%s:%u: gap from %" PRIu64 " after %" PRIu64,
             path, lineno, first, w->seq);
    return first <= w->seq ? JOURNAL_FAULT_REORDERED : JOURNAL_FAULT_DROPPED;
  }
  r = chain_link(w, prev, last, hx, path, lineno, err, errlen);
  if (r != 0)
    return r;
  w->res->gaps++;
  w->res->gap_numbers += last - first + 1;
  line[reason - line + rlen] = '\0';
  return w->gap ? w->gap(ctx, first, last, reason) : 0;
}

static int
walk_file(struct walk *w, struct journal_lines *lr, const char *path, unsigned idx,
          int first, int (*cb)(void *, uint64_t, const char *, size_t),
          void *ctx, char *err, size_t errlen)
{
  char *line, hx[JOURNAL_HEX_LEN + 1], *f;
  unsigned lineno = 1, hidx;
  uint64_t s;
  size_t len, body;
  int r, nl;

  line = journal_lines_next(lr, &len, &nl);
  if (line == NULL || !nl || sscanf(line, "# qrs-journal 1 file=%u ",
                                    &hidx) != 1 ||
      (f = strstr(line, " prev=")) == NULL ||
      !is_hex64(f + 6, strlen(f + 6))) {
    if (lr->err)
      return journal_lines_end(lr, path, err, errlen);
    snprintf(err, errlen, "%s:1: not a qrs-journal 1 header", path);
    return JOURNAL_FAULT_PARSE;
  }
  if (hidx != idx) {
    snprintf(err, errlen, "%s:1: the header names file %u (a file renamed)",
             path, hidx);
    return JOURNAL_FAULT_SPLICE;
  }
  if (first) {
    /* the chain starts at this header: zeros for the first file ever,
       else (pruned) whatever it names; a checkpoint anchors it */
    memcpy(w->prev, f + 6, JOURNAL_HEX_LEN + 1);
    if (idx == 1 && strcmp(w->prev, ZERO_HEX) != 0) {
      snprintf(err, errlen, "%s:1: the first file's prev is not zeros",
               path);
      return JOURNAL_FAULT_SPLICE;
    }
    w->seq_known = idx == 1;
  } else if (memcmp(f + 6, w->prev, JOURNAL_HEX_LEN) != 0) {
    snprintf(err, errlen, "%s:1: the header's prev is not the last hash "
             "of the file before", path);
    return JOURNAL_FAULT_SPLICE;
  }
  while ((line = journal_lines_next(lr, &len, &nl)) != NULL) {
    lineno++;
    r = journal_line_check(line, len, nl, w->md, w->sha, hx, path, lineno,
                          err, errlen);
    if (r != JOURNAL_INTACT)
      return r;
    body = len - JOURNAL_HEX_LEN;
    if (strncmp(line, JOURNAL_GAP_TAG "\t", sizeof JOURNAL_GAP_TAG) == 0) {
      r = walk_gap(w, line, len, hx, path, lineno, ctx, err, errlen);
      if (r != 0)
        return r;
      continue;
    }
    w->res->at_path = path;
    w->res->at_line = lineno;
    if (strncmp(line, AUDIT_STUDY_TAG "\t", sizeof AUDIT_STUDY_TAG) == 0) {
      /* a study record: chained, no sequence of its own */
      if (memcmp(line + body - 1 - JOURNAL_HEX_LEN, w->prev,
                 JOURNAL_HEX_LEN) != 0) {
        snprintf(err, errlen, "%s:%u: prev is not the hash of the entry "
                 "before", path, lineno);
        return JOURNAL_FAULT_CHAIN;
      }
      memcpy(w->prev, hx, JOURNAL_HEX_LEN + 1);
      /* before the first entry, checkpoints stay "before" as ever */
      if (w->seq_known && (w->res->entries || w->res->gaps))
        pass_checkpoints(w, w->seq, hx, path, lineno);
      if (cb && (r = cb(ctx, 0, line, len)) != 0)
        return r;
      continue;
    }
    if (entry_seq(line, &s) != 0) {
      snprintf(err, errlen, "%s:%u: no sequence", path, lineno);
      return JOURNAL_FAULT_PARSE;
    }
    if (!w->seq_known) {
      /* a pruned journal's first entry: the sequence before it is the
         one its prev is the hash after */
      if (s == 0) {
        snprintf(err, errlen, "%s:%u: sequence 0", path, lineno);
        return JOURNAL_FAULT_PARSE;
      }
      w->seq = s - 1;
      w->seq_known = 1;
      pass_checkpoints(w, s - 1, w->prev, path, lineno);
    }
    if (s != w->seq + 1) {
      snprintf(err, errlen, "%s:%u: sequence %" PRIu64 " after %" PRIu64,
               path, lineno, s, w->seq);
      return s == w->seq ? JOURNAL_FAULT_REPLAYED :
             s < w->seq ? JOURNAL_FAULT_REORDERED : JOURNAL_FAULT_DROPPED;
    }
    r = chain_link(w, line + body - 1 - JOURNAL_HEX_LEN, s, hx, path,
                   lineno, err, errlen);
    if (r != 0)
      return r;
    if (w->res->entries++ == 0)
      w->res->first_seq = s;
    w->res->last_seq = s;
    if (cb && (r = cb(ctx, s, line, len)) != 0)
      return r;
  }
  return journal_lines_end(lr, path, err, errlen);
}

/* "journal-<at least 6 digits>.log", as the writer names them: 0 with
   the index, or -1. */
static int
file_index(const char *name, unsigned *idx)
{
  uint64_t v;
  size_t len = strlen(name);
  char back[64];

  if (len < 8 + 6 + 4 || len > 40 || strncmp(name, "journal-", 8) != 0 ||
      strcmp(name + len - 4, ".log") != 0 ||
      parse_u64(name + 8, len - 12, &v) != 0 || v == 0 || v > UINT32_MAX)
    return -1;
  snprintf(back, sizeof back, "journal-%06u.log", (unsigned)v);
  if (strcmp(back, name) != 0)
    return -1;                      /* leading zeros the writer never
                                       writes: not one of its files */
  *idx = (unsigned)v;
  return 0;
}

static int
cmp_unsigned(const void *x, const void *y)
{
  return SORT_ORDER(*(const unsigned *)x, *(const unsigned *)y);
}

static int
cmp_checkpoint(const void *x, const void *y)
{
  const struct audit_checkpoint *a = x, *b = y;

  return SORT_ORDER(a->seq, b->seq);
}

/* The indices of dir's journal files, sorted: a new array in *ret (the
   caller frees it), its length, or a negative errno. */
static long
list_files(const char *dir, unsigned **ret)
{
  struct dirent *d;
  unsigned *v = NULL, *p, idx;
  size_t n = 0, cap = 0;
  DIR *dp;
  int e;

  dp = opendir(dir);
  if (dp == NULL)
    return -errno;
  for (;;) {
    errno = 0;
    d = readdir(dp);
    if (d == NULL)
      break;
    if (file_index(d->d_name, &idx) != 0)
      continue;
    if (n == cap) {
      if (cap >= FILES_MAX) {
        free(v);
        closedir(dp);
        return -E2BIG;
      }
      p = realloc(v, (cap ? 2 * cap : 64) * sizeof(*v));
      if (p == NULL) {
        free(v);
        closedir(dp);
        return -ENOMEM;
      }
      v = p;
      cap = cap ? 2 * cap : 64;
    }
    v[n++] = idx;
  }
  if (errno != 0) {
    e = errno;
    free(v);
    closedir(dp);
    return -e;
  }
  closedir(dp);
  if (n > 0)
    qsort(v, n, sizeof(*v), cmp_unsigned);
  *ret = v;
  return (long)n;
}

int
audit_journal_walk(const char *dir, int pruned,
                   struct audit_checkpoint *cps, size_t n,
                   int (*cb)(void *ctx, uint64_t seq, const char *line,
                             size_t len),
                   journal_gap_cb gap, void *ctx,
                   struct audit_journal_result *res,
                   char *err, size_t errlen)
{
  struct journal_lines lr = { .fd = -1, .cap = JOURNAL_LINES_BLOCK };
  struct walk w;
  char path[4096];
  unsigned *files = NULL;
  long nf;
  size_t i;
  int r = JOURNAL_INTACT;
  EVP_MD *sha;

  sha = EVP_MD_fetch(NULL, "SHA256", NULL);
  memset(res, 0, sizeof *res);
  memset(&w, 0, sizeof w);
  strcpy(w.prev, ZERO_HEX);
  w.cps = cps;
  w.n = n;
  w.res = res;
  w.gap = gap;
  w.sha = sha;
  w.md = EVP_MD_CTX_new();
  err[0] = '\0';
  if (n > 0)
    qsort(cps, n, sizeof(*cps), cmp_checkpoint);
  lr.buf = malloc(lr.cap + 1);
  if (w.md == NULL || sha == NULL || lr.buf == NULL) {
    snprintf(err, errlen, lr.buf ? "SHA-256 unavailable (libcrypto)" :
             "out of memory");
    r = JOURNAL_FAULT_IO;
    goto out;
  }
  nf = list_files(dir, &files);
  if (nf < 0) {
    snprintf(err, errlen, "%s: %s", dir, strerror((int)-nf));
    r = JOURNAL_FAULT_IO;
    goto out;
  }
  if (nf == 0) {
    snprintf(err, errlen, "%s/journal-000001.log: no journal files",
             dir);
    r = JOURNAL_FAULT_IO;
    goto out;
  }
  if (files[0] != 1 && !pruned) {
    snprintf(err, errlen, "%s/journal-000001.log: missing (the first file "
             "present is journal-%06u.log; --pruned audits from it)", dir,
             files[0]);
    r = AUDIT_JOURNAL_FILE_MISSING;
    goto out;
  }
  res->first_file = files[0];
  for (i = 0; i < (size_t)nf; i++) {
    if (i > 0 && files[i] != files[i - 1] + 1) {
      snprintf(err, errlen, "%s/journal-%06u.log: missing (journal-%06u.log"
               " follows journal-%06u.log)", dir, files[i - 1] + 1, files[i],
               files[i - 1]);
      r = AUDIT_JOURNAL_FILE_MISSING;
      goto out;
    }
    snprintf(path, sizeof path, "%s/journal-%06u.log", dir, files[i]);
    r = journal_lines_open(&lr, path);
    if (r < 0) {
      snprintf(err, errlen, "%s: %s", path, strerror(-r));
      r = JOURNAL_FAULT_IO;
      goto out;
    }
    r = walk_file(&w, &lr, path, files[i], i == 0, cb, ctx, err, errlen);
    close(lr.fd);
    res->last_file = files[i];
    if (r != JOURNAL_INTACT)
      goto out;
  }
  r = unmatched_checkpoint(&w, err, errlen);
  if (r != 0)
    goto out;
  if (w.next < w.n) {
    const struct audit_checkpoint *last = &w.cps[w.n - 1];

    snprintf(err, errlen, "%s/journal-%06u.log: the journal ends at "
             "sequence %" PRIu64 ", before checkpoint %" PRIu64 ":%s (entries "
             "or files cut from its end)", dir, files[nf - 1], w.seq,
             last->seq, last->head);
    r = AUDIT_JOURNAL_TRUNCATED;
  }
out:
  memcpy(res->head, w.prev, JOURNAL_HEX_LEN + 1);
  free(files);
  free(lr.buf);
  EVP_MD_CTX_free(w.md);
  EVP_MD_free(sha);
  return r;
}
