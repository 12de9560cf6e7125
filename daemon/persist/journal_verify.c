/* The draw journal read back: journal_verify() walks the files and
   recomputes every hash (see journal.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "persist/journal.h"

#define ZERO_HEX \
  "0000000000000000000000000000000000000000000000000000000000000000"

const char *
journal_fault_name(enum journal_fault f)
{
  switch (f) {
  case JOURNAL_INTACT: return "intact";
  case JOURNAL_FAULT_IO: return "unreadable";
  case JOURNAL_FAULT_PARSE: return "malformed-entry";
  case JOURNAL_FAULT_HASH: return "entry-edited";
  case JOURNAL_FAULT_DROPPED: return "entry-dropped";
  case JOURNAL_FAULT_REORDERED: return "entries-reordered";
  case JOURNAL_FAULT_REPLAYED: return "draw-replayed";
  case JOURNAL_FAULT_CHAIN: return "chain-broken";
  case JOURNAL_FAULT_SPLICE: return "files-spliced";
  }
  return "?";
}

int
journal_line_check(const char *line, size_t len, int nl, EVP_MD_CTX *md,
                  const EVP_MD *sha, char hx[JOURNAL_HEX_LEN + 1],
                  const char *path, unsigned lineno, char *err,
                  size_t errlen)
{
  uint8_t h[JOURNAL_HASH_LEN];
  size_t body;

  if (len < 2 * JOURNAL_HEX_LEN + 2 || !nl) {
    snprintf(err, errlen, "%s:%u: truncated or overlong entry", path,
             lineno);
    return JOURNAL_FAULT_PARSE;
  }
  body = len - JOURNAL_HEX_LEN;
  if (!EVP_DigestInit_ex(md, sha, NULL) ||
      !EVP_DigestUpdate(md, line, body) ||
      !EVP_DigestFinal_ex(md, h, NULL)) {
    snprintf(err, errlen, "%s:%u: SHA-256 failed", path, lineno);
    return JOURNAL_FAULT_IO;
  }
  journal_hex(h, JOURNAL_HASH_LEN, hx);
  if (line[body - 1] != '\t' || memcmp(line + body, hx, JOURNAL_HEX_LEN)) {
    snprintf(err, errlen, "%s:%u: the entry's hash does not match its "
             "text", path, lineno);
    return JOURNAL_FAULT_HASH;
  }
  return JOURNAL_INTACT;
}

char *
journal_lines_next(struct journal_lines *lr, size_t *len, int *nl)
{
  char *p, *q;
  ssize_t n;

  for (;;) {
    p = lr->buf + lr->at;
    q = memchr(p, '\n', lr->end - lr->at);
    if (q != NULL || lr->eof || lr->end - lr->at > JOURNAL_LINE_MAX) {
      if (q == NULL || (size_t)(q - p) > JOURNAL_LINE_MAX) {
        if (lr->at == lr->end)
          return NULL;
        *len = lr->end - lr->at;
        if (*len > JOURNAL_LINE_MAX + 1)
          *len = JOURNAL_LINE_MAX + 1;
        *nl = 0;
        lr->at += *len;
        /* the byte after: past cap (buf has one more), or the rest of
           an overlong line, which the caller refuses without reading */
        p[*len] = '\0';
        return p;
      }
      *len = (size_t)(q - p);
      *nl = 1;
      *q = '\0';
      lr->at += *len + 1;
      return p;
    }
    /* keep the partial line, read more behind it */
    memmove(lr->buf, p, lr->end - lr->at);
    lr->end -= lr->at;
    lr->at = 0;
    do
      n = read(lr->fd, lr->buf + lr->end, lr->cap - lr->end);
    while (n < 0 && errno == EINTR);
    if (n < 0) {
      lr->err = errno;
      return NULL;
    }
    if (n == 0)
      lr->eof = 1;
    lr->end += (size_t)n;
  }
}

int
journal_lines_open(struct journal_lines *lr, const char *path)
{
  lr->fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (lr->fd < 0)
    return -errno;
  (void)posix_fadvise(lr->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  lr->at = lr->end = 0;
  lr->eof = lr->err = 0;
  return 0;
}

int
journal_lines_end(const struct journal_lines *lr, const char *path,
                  char *err, size_t errlen)
{
  if (!lr->err)
    return JOURNAL_INTACT;
  snprintf(err, errlen, "%s: %s", path, strerror(lr->err));
  return JOURNAL_FAULT_IO;
}

/* The decimal sequence number that starts s and ends at a tab: 0, or -1. */
static int
entry_seq(const char *s, uint64_t *v)
{
  uint64_t x = 0;
  const char *p;

  for (p = s; *p >= '0' && *p <= '9'; p++) {
    if (x > (UINT64_MAX - 9) / 10)
      return -1;
    x = 10 * x + (uint64_t)(*p - '0');
  }
  if (p == s || *p != '\t')
    return -1;
  *v = x;
  return 0;
}

/* Sequence s where last + 1 was due: the same draw again, an earlier one
   (moved), or a later one: moved if the next line holds the one due,
   dropped otherwise. */
static int
seq_fault(struct journal_lines *lr, uint64_t s, uint64_t last)
{
  const char *line;
  uint64_t next;
  size_t len;
  int nl;

  if (s == last)
    return JOURNAL_FAULT_REPLAYED;
  if (s < last)
    return JOURNAL_FAULT_REORDERED;
  line = journal_lines_next(lr, &len, &nl);
  if (line && entry_seq(line, &next) == 0 && next == last + 1)
    return JOURNAL_FAULT_REORDERED;
  return JOURNAL_FAULT_DROPPED;
}

/* One file's entries; *prev and *seq carry the chain.  md: one digest
   context for every line (EVP_Digest() would set one up per line, a
   third of the time at these sizes). */
int
journal_gap_fields(const char *line, size_t len, uint64_t *first,
                   uint64_t *last, const char **reason, size_t *reason_len,
                   const char **prev)
{
  const char *f, *tab;
  char *end;

  if (len < sizeof JOURNAL_GAP_TAG + 2 * JOURNAL_HEX_LEN + 2 ||
      memcmp(line, JOURNAL_GAP_TAG "\t", sizeof JOURNAL_GAP_TAG) != 0)
    return -1;
  f = line + sizeof JOURNAL_GAP_TAG;
  *first = strtoull(f, &end, 10);
  if (end == f || *end != '\t')
    return -1;
  f = end + 1;
  *last = strtoull(f, &end, 10);
  if (end == f || *end != '\t' || *last < *first)
    return -1;
  *reason = end + 1;
  tab = memchr(*reason, '\t', len - (size_t)(*reason - line));
  if (tab == NULL || tab - line != (ptrdiff_t)(len - 2 * JOURNAL_HEX_LEN - 2))
    return -1;
  *reason_len = (size_t)(tab - *reason);
  *prev = tab + 1;
  return 0;
}

/* A gap record (its hash checked already; hx is it): it must take the
   sequence on where it stands, and chain. */
static int
verify_gap(char *line, size_t len, const char *path, unsigned lineno,
           char *prev, const char *hx, uint64_t *seq, journal_gap_cb gap,
           void *ctx, char *err, size_t errlen)
{
  const char *reason, *p;
  uint64_t first, last;
  size_t rlen;

  if (journal_gap_fields(line, len, &first, &last, &reason, &rlen, &p) < 0)
    goto bad;
  if (first != *seq + 1) {
    snprintf(err, errlen, "%s:%u: gap from %" PRIu64 " after %" PRIu64,
             path, lineno, first, *seq);
    return first <= *seq ? JOURNAL_FAULT_REORDERED : JOURNAL_FAULT_DROPPED;
  }
  if (memcmp(p, prev, JOURNAL_HEX_LEN)) {
    snprintf(err, errlen, "%s:%u: prev is not the hash of the entry "
             "before", path, lineno);
    return JOURNAL_FAULT_CHAIN;
  }
  *seq = last;
  memcpy(prev, hx, JOURNAL_HEX_LEN + 1);
  if (gap) {
    line[reason - line + rlen] = '\0';
    return gap(ctx, first, last, reason);
  }
  return JOURNAL_INTACT;
bad:
  snprintf(err, errlen, "%s:%u: malformed gap record", path, lineno);
  return JOURNAL_FAULT_PARSE;
}

static int
verify_file(struct journal_lines *lr, const char *path, char *prev, uint64_t *seq,
            int (*cb)(void *, uint64_t, const char *, size_t),
            journal_gap_cb gap, void *ctx, EVP_MD_CTX *md, const EVP_MD *sha,
            char *err, size_t errlen)
{
  char *line, hx[JOURNAL_HEX_LEN + 1], *f;
  uint64_t s;
  size_t len, body;
  unsigned lineno = 1;
  int r, nl;

  line = journal_lines_next(lr, &len, &nl);
  if (line == NULL || !nl || strncmp(line, "# qrs-journal 1 ", 16) != 0 ||
      (f = strstr(line, "prev=")) == NULL ||
      strlen(f + 5) != JOURNAL_HEX_LEN) {
    if (lr->err)
      return journal_lines_end(lr, path, err, errlen);
    snprintf(err, errlen, "%s:1: not a qrs-journal 1 header", path);
    return JOURNAL_FAULT_PARSE;
  }
  if (memcmp(f + 5, prev, JOURNAL_HEX_LEN) != 0) {
    snprintf(err, errlen, "%s:1: the header's prev is not the last hash "
             "of the file before", path);
    return JOURNAL_FAULT_SPLICE;
  }
  while ((line = journal_lines_next(lr, &len, &nl)) != NULL) {
    lineno++;
    r = journal_line_check(line, len, nl, md, sha, hx, path, lineno, err,
                          errlen);
    if (r != JOURNAL_INTACT)
      return r;
    body = len - JOURNAL_HEX_LEN;
    if (strncmp(line, JOURNAL_STUDY_TAG "\t", sizeof JOURNAL_STUDY_TAG) ==
        0) {
      /* a study record: no sequence; it chains */
      if (memcmp(line + body - 1 - JOURNAL_HEX_LEN, prev, JOURNAL_HEX_LEN)) {
        snprintf(err, errlen, "%s:%u: prev is not the hash of the entry "
                 "before", path, lineno);
        return JOURNAL_FAULT_CHAIN;
      }
      memcpy(prev, hx, JOURNAL_HEX_LEN + 1);
      continue;
    }
    if (strncmp(line, JOURNAL_GAP_TAG "\t", sizeof JOURNAL_GAP_TAG) == 0) {
      r = verify_gap(line, len, path, lineno, prev, hx, seq, gap, ctx, err,
                     errlen);
      if (r != JOURNAL_INTACT)
        return r;
      continue;
    }
    if (entry_seq(line, &s) != 0) {
      snprintf(err, errlen, "%s:%u: no sequence", path, lineno);
      return JOURNAL_FAULT_PARSE;
    }
    if (s != *seq + 1) {
      snprintf(err, errlen, "%s:%u: sequence %" PRIu64 " after %" PRIu64,
               path, lineno, s, *seq);
      return seq_fault(lr, s, *seq);
    }
    if (memcmp(line + body - 1 - JOURNAL_HEX_LEN, prev, JOURNAL_HEX_LEN)) {
      snprintf(err, errlen, "%s:%u: prev is not the hash of the entry "
               "before", path, lineno);
      return JOURNAL_FAULT_CHAIN;
    }
    *seq = s;
    memcpy(prev, hx, JOURNAL_HEX_LEN + 1);
    if (cb && (r = cb(ctx, s, line, len)) != 0)
      return r;
  }
  return journal_lines_end(lr, path, err, errlen);
}

int
journal_verify(const char *dir,
               int (*cb)(void *ctx, uint64_t seq, const char *line,
                         size_t len),
               void *ctx, uint64_t *ret_entries,
               char head[JOURNAL_HEX_LEN + 1], char *err, size_t errlen)
{
  return journal_verify_gaps(dir, cb, NULL, ctx, ret_entries, head, err,
                             errlen);
}

int
journal_verify_gaps(const char *dir,
                    int (*cb)(void *ctx, uint64_t seq, const char *line,
                              size_t len),
                    journal_gap_cb gap, void *ctx, uint64_t *ret_entries,
                    char head[JOURNAL_HEX_LEN + 1], char *err,
                    size_t errlen)
{
  char path[4096], prev[JOURNAL_HEX_LEN + 1];
  struct journal_lines lr = { .fd = -1, .cap = JOURNAL_LINES_BLOCK };
  struct stat st;
  uint64_t seq = 0;
  unsigned idx;
  int r = JOURNAL_INTACT, e;

  EVP_MD_CTX *md = EVP_MD_CTX_new();
  EVP_MD *sha = EVP_MD_fetch(NULL, "SHA256", NULL);

  strcpy(prev, ZERO_HEX);
  err[0] = '\0';
  lr.buf = malloc(lr.cap + 1);
  if (md == NULL || sha == NULL || lr.buf == NULL) {
    snprintf(err, errlen, lr.buf ? "SHA-256 unavailable (libcrypto)" :
             "out of memory");
    r = JOURNAL_FAULT_IO;
    goto out;
  }
  for (idx = 1;; idx++) {
    snprintf(path, sizeof path, "%s/journal-%06u.log", dir, idx);
    e = journal_lines_open(&lr, path);
    if (e < 0) {
      if (e == -ENOENT && idx > 1)
        break;
      snprintf(err, errlen, "%s: %s", path, strerror(-e));
      r = JOURNAL_FAULT_IO;
      break;
    }
    if (fstat(lr.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      snprintf(err, errlen, "%s: not a regular file", path);
      close(lr.fd);
      r = JOURNAL_FAULT_IO;
      break;
    }
    r = verify_file(&lr, path, prev, &seq, cb, gap, ctx, md, sha, err,
                    errlen);
    close(lr.fd);
    if (r != JOURNAL_INTACT)
      break;
  }
out:
  free(lr.buf);
  EVP_MD_CTX_free(md);
  EVP_MD_free(sha);
  if (ret_entries)
    *ret_entries = seq;
  if (head)
    memcpy(head, prev, JOURNAL_HEX_LEN + 1);
  return r;
}
