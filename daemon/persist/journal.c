/* The draw journal; see journal.h. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "base/fdio.h"
#include "base/log.h"
#include "persist/atomicfile.h"
#include "persist/journal.h"
#include "persist/journal_int.h"

#define ZERO_HEX \
  "0000000000000000000000000000000000000000000000000000000000000000"

/* How often a failed writer tries again (recover()). */
#define JOURNAL_RETRY_MS 1000

/* Stray names in the directory logged at a start, at most. */
#define JOURNAL_STRAY_LOG 8

/* The hash arena's alignment: a cache line (arena_copy()). */
#define ARENA_ALIGN 64

/* Where a queued entry's bytes are in the arena: len bytes at off (len 0:
   bytes_sha is set already); span is what the entry holds of the ring,
   len plus the end of the ring skipped when it wrapped. */
struct slot_bytes {
  size_t off, len, span;
};

struct journal {
  struct journal_params p;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t wake;
  struct journal_entry *q;          /* ring of p.queue_len entries */
  struct slot_bytes *qb;            /* each slot's bytes in the arena */
  size_t q_head, q_len;
  /* the bytes of queued draws that the writer hashes (a ring of
     p.bytes_buf bytes; a_used from a_tail on, wrapping) */
  uint8_t *arena;
  size_t a_tail, a_used;
  uint64_t hashed_inline;           /* draws hashed at submit: no room */
  int idle;                         /* the writer waits for an entry */
  /* submitting thread only: the bytes hash */
  EVP_MD_CTX *sub_md;
  uint64_t next_seq;
  uint64_t reserved;                /* durably reserved: next_seq may
                                       reach it, not pass it */
  uint64_t lost_first, lost_last;   /* served, not written (0: none) */
  uint64_t written_seq;             /* the last entry written (write(2)) */
  struct journal_range lost_q[JOURNAL_LOST_RANGES];  /* for
                                       journal_progress(), not taken yet */
  unsigned n_lost_q;
  int stopping;
  int finished;                 /* journal_finish() done */
  enum journal_state state;
  int err;
  char head_hex[JOURNAL_HEX_LEN + 1];   /* durable head */
  uint64_t head_seq;
  /* writer thread only (block: set at open) */
  uint64_t block;                   /* sequence numbers reserved at once */
  int fd;
  unsigned file_index;
  uint64_t file_bytes;
  char prev_hex[JOURNAL_HEX_LEN + 1];   /* last formatted */
  uint64_t last_seq;
  /* under mu: the last record written (maybe not synced), and what the
     syncer thread is asked to fsync */
  char w_hex[JOURNAL_HEX_LEN + 1];
  uint64_t w_seq;
  pthread_t syncer;
  pthread_cond_t sync_wake;
  int sync_pending;                 /* written since the last fsync */
  unsigned sync_count;              /* entries of it */
  struct timespec sync_due;         /* its fsync is due (CLOCK_MONOTONIC) */
  int sync_stop;                    /* the syncer ends */
  int sync_err;                     /* its fsync failed: for the writer */
  /* held while the file is fsync'd, rotated or opened: j->fd and
     file_index change under it (the writer), the syncer reads them under
     it; the checkpoint's fields too.  Taken before mu, never after. */
  pthread_mutex_t fd_mu;
  char *buf;                        /* a batch of formatted lines */
  size_t buf_cap;
  EVP_MD_CTX *w_md;                 /* the line hashes */
  EVP_MD *sha;                      /* fetched once (both threads) */
  /* the last checkpoint logged (writer thread; open and close) */
  uint64_t cp_seq;
  unsigned cp_file;
  time_t cp_time;                   /* CLOCK_MONOTONIC seconds */
};

static void checkpoint(struct journal *j, const char *forced);

void
journal_params_default(struct journal_params *p)
{
  memset(p, 0, sizeof *p);
  p->max_bytes = 64u << 20;
  p->queue_len = 4096;
  p->fsync_every = 4096;
  p->flush_ms = JOURNAL_FLUSH_MS;
  p->bytes_buf = JOURNAL_BYTES_BUF;
  p->cpu = -1;
  p->nice = JOURNAL_NICE;
  p->policy = JOURNAL_POLICY_STOP;
}


void
journal_line_hash(const char *line, size_t len, uint8_t out[JOURNAL_HASH_LEN])
{
  unsigned n = JOURNAL_HASH_LEN;

  EVP_Digest(line, len, out, &n, EVP_sha256(), NULL);
}

/* Hex digit pairs by byte value: two bytes per byte hashed, one load
   each (journal_hex() runs for every entry written and verified). */
static const char hex_pairs[513] =
  "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
  "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"
  "404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f"
  "606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f"
  "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"
  "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
  "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf"
  "e0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";

void
journal_hex(const uint8_t *b, size_t n, char *out)
{
  size_t i;

  for (i = 0; i < n; i++)
    memcpy(out + 2 * i, hex_pairs + 2 * b[i], 2);
  out[2 * n] = '\0';
}

static int
text_ok(const char *s)
{
  for (; *s; s++)
    if (*s == '\t' || *s == '\n' || *s == '\r' || *s == '\\')
      return 0;
  return 1;
}

/* Can e's text fields go into a line (no tab, newline, backslash)? */
static int
entry_text_ok(const struct journal_entry *e)
{
  return text_ok(e->source) && text_ok(e->amp) && text_ok(e->amp_params) &&
         text_ok(e->fallback);
}

/* SHA-256 of n bytes with a context set up once (EVP_Digest() with
   EVP_sha256() fetches and sets one up per call); 0 or -EIO. */
static int
md_sha256(EVP_MD_CTX *md, const EVP_MD *sha, const void *b, size_t n,
          uint8_t out[JOURNAL_HASH_LEN])
{
  if (!EVP_DigestInit_ex(md, sha, NULL) || !EVP_DigestUpdate(md, b, n) ||
      !EVP_DigestFinal_ex(md, out, NULL))
    return -EIO;
  return 0;
}

static int
format_entry(const struct journal_entry *e, const char *prev_hex, char *buf,
             uint8_t hash[JOURNAL_HASH_LEN], EVP_MD_CTX *md,
             const EVP_MD *md_sha)
{
  char sha[JOURNAL_HEX_LEN + 1];
  int n;

  if (e->record) {
    n = snprintf(buf, JOURNAL_LINE_MAX, "%s%s\t", e->record, prev_hex);
  } else {
    if (!entry_text_ok(e))
      return -EINVAL;
    journal_hex(e->bytes_sha, JOURNAL_HASH_LEN, sha);
    n = snprintf(buf, JOURNAL_LINE_MAX,
                 "%" PRIu64 "\t%" PRId32 "\t%" PRIu32 "\t%s\t%s\t%s\t%016"
                 PRIx64 "\t%d\t%.9f\t%.9f\t%.9f\t%s\t%.17g\t%s\t%s\t",
                 e->seq, e->pid, e->uid, e->source, e->amp, e->amp_params,
                 e->nonce, e->echo_ok ? 1 : 0, e->t_recv, e->t_gen,
                 e->t_sent, sha, e->u, e->fallback, prev_hex);
  }
  if (n < 0 || n + JOURNAL_HEX_LEN + 2 > JOURNAL_LINE_MAX)
    return -EINVAL;
  if (md != NULL) {
    if (md_sha256(md, md_sha, buf, (size_t)n, hash) != 0)
      return -EIO;
  } else {
    journal_line_hash(buf, (size_t)n, hash);
  }
  journal_hex(hash, JOURNAL_HASH_LEN, buf + n);
  buf[n + JOURNAL_HEX_LEN] = '\n';
  buf[n + JOURNAL_HEX_LEN + 1] = '\0';
  return n + JOURNAL_HEX_LEN + 1;
}

int
journal_format(const struct journal_entry *e, const char *prev_hex,
               char *buf, uint8_t hash[JOURNAL_HASH_LEN])
{
  return format_entry(e, prev_hex, buf, hash, NULL, NULL);
}

static void
file_path(const struct journal *j, unsigned index, char *out, size_t len)
{
  snprintf(out, len, "%s/journal-%06u.log", j->p.dir, index);
}

/* A gap record for first..last with prev (hex) into buf
   (JOURNAL_LINE_MAX), setting hash (binary); its length. */
static int
format_gap(uint64_t first, uint64_t last, const char *reason,
           const char *prev_hex, char *buf, uint8_t hash[JOURNAL_HASH_LEN])
{
  int n;

  n = snprintf(buf, JOURNAL_LINE_MAX, JOURNAL_GAP_TAG "\t%" PRIu64 "\t%"
               PRIu64 "\t%s\t%s\t", first, last, reason, prev_hex);
  journal_line_hash(buf, (size_t)n, hash);
  journal_hex(hash, JOURNAL_HASH_LEN, buf + n);
  buf[n + JOURNAL_HEX_LEN] = '\n';
  buf[n + JOURNAL_HEX_LEN + 1] = '\0';
  return n + JOURNAL_HEX_LEN + 1;
}

/* Is name exactly journal-<6 digits>.log (index >= 1)?  1 with *idx. */
static int
journal_file_name(const char *name, unsigned *idx)
{
  unsigned v = 0;
  int i;

  if (strncmp(name, "journal-", 8) != 0)
    return 0;
  for (i = 8; i < 14; i++) {
    if (name[i] < '0' || name[i] > '9')
      return 0;
    v = 10 * v + (unsigned)(name[i] - '0');
  }
  if (strcmp(name + 14, ".log") != 0 || v == 0)
    return 0;
  *idx = v;
  return 1;
}

/* What the journal itself keeps next to its files: the reservation
   (and its temp file) and torn tails set aside. */
static int
own_name(const char *name)
{
  size_t n = strlen(name);

  return strncmp(name, JOURNAL_SEQ_FILE, strlen(JOURNAL_SEQ_FILE)) == 0 ||
         (n > 5 && strcmp(name + n - 5, ".torn") == 0 &&
          strncmp(name, "journal-", 8) == 0);
}

/* The newest file's index (0 when none) and the chain head and the last
   sequence, from its last line: a torn one is set aside first, a file
   with no line is removed, and a file with only a header (stopped after
   a rotation, before its first entry) resumes from the file before. */
static int
resume(struct journal *j, char *err, size_t errlen)
{
  char path[4096];
  DIR *d;
  struct dirent *de;
  unsigned best = 0, idx, stray = 0;
  char hash[JOURNAL_HEX_LEN + 1];
  uint64_t seq = 0, size = 0, osize;
  int r;

  d = opendir(j->p.dir);
  if (d == NULL) {
    r = -errno;
    snprintf(err, errlen, "journal directory %s: %s", j->p.dir,
             strerror(errno));
    return r;
  }
  while ((de = readdir(d)) != NULL) {
    if (journal_file_name(de->d_name, &idx)) {
      if (idx > best)
        best = idx;
    } else if (de->d_name[0] != '.' && !own_name(de->d_name) &&
               stray++ < JOURNAL_STRAY_LOG) {
      log_warn("journal: %s/%s is not a journal file (journal-NNNNNN.log): "
               "ignored", j->p.dir, de->d_name);
    }
  }
  closedir(d);
  if (stray > JOURNAL_STRAY_LOG)
    log_warn("journal: %u more names in %s ignored", stray -
             JOURNAL_STRAY_LOG, j->p.dir);
  strcpy(j->prev_hex, ZERO_HEX);
  j->last_seq = 0;
  for (;;) {
    j->file_index = best;
    if (best == 0)
      return 0;
    file_path(j, best, path, sizeof path);
    r = journal__last_line(path, 1, &seq, hash, &size, err, errlen);
    if (r != 2)
      break;
    best--;
  }
  if (r < 0)
    return r;
  strcpy(j->prev_hex, hash);
  j->file_bytes = size;
  if (r == 3)
    r = journal__file_seq(path, &seq, err, errlen);
  if (r < 0)
    return r;
  if (r == 0) {
    j->last_seq = seq;
    return 0;
  }
  /* only a header (and study records): the sequence is the last of an
     earlier file */
  for (idx = best - 1; idx > 0; idx--) {
    file_path(j, idx, path, sizeof path);
    r = journal__last_line(path, 0, &seq, hash, &osize, err, errlen);
    if (r == 3)
      r = journal__file_seq(path, &seq, err, errlen);
    if (r < 0)
      return r;
    if (r == 0) {
      j->last_seq = seq;
      break;
    }
  }
  return 0;
}

static int
seq_path(const struct journal *j, char *out, size_t len)
{
  return snprintf(out, len, "%s/" JOURNAL_SEQ_FILE, j->p.dir) >= (int)len ?
         -ENAMETOOLONG : 0;
}

/* The reservation: every sequence number up to it may have been handed
   out.  0 when there is none; a negative errno with err set. */
static int
read_reserved(struct journal *j, uint64_t *ret, char *err, size_t errlen)
{
  char path[4096], buf[128], *f, *end;
  struct stat st;
  ssize_t n;
  int fd;

  *ret = 0;
  if (seq_path(j, path, sizeof path) != 0)
    return -ENAMETOOLONG;
  if (access(path, F_OK) != 0 && errno == ENOENT)
    return 0;
  fd = journal__open_regular(path, O_RDONLY, &st, err, errlen);
  if (fd < 0)
    return fd;
  n = pread(fd, buf, sizeof buf - 1, 0);
  close(fd);
  buf[n > 0 ? n : 0] = '\0';
  f = strstr(buf, "reserved=");
  if (n <= 0 || strncmp(buf, "qrs-journal-seq 1 ", 18) != 0 || f == NULL) {
    snprintf(err, errlen, "journal %s: not a qrs-journal-seq 1 file (it "
             "holds the sequence numbers reserved; remove it only if the "
             "journal's last entry is the last draw served)", path);
    return -EINVAL;
  }
  *ret = strtoull(f + 9, &end, 10);
  if (*end != '\n' || *ret > UINT64_MAX / 2) {
    snprintf(err, errlen, "journal %s: reserved= does not parse", path);
    return -EINVAL;
  }
  return 0;
}

/* Reserve every sequence number up to upto, durably, before any is
   handed out; 0 or a negative errno. */
static int
write_reserved(struct journal *j, uint64_t upto)
{
  char path[4096], buf[128];
  int n;

  if (seq_path(j, path, sizeof path) != 0)
    return -ENAMETOOLONG;
  n = snprintf(buf, sizeof buf, "qrs-journal-seq 1 reserved=%" PRIu64 "\n",
               upto);
  return atomicfile_write(path, buf, (size_t)n, 1);
}

/* Open the next file (index + 1) with its header (writer thread, or
   journal_open() before it starts).  A file that could not get its
   header is removed. */
static int
open_next_locked(struct journal *j, const char *prev_hex)
{
  char path[4096], hdr[128];
  int fd, n, r;

  if (j->fd >= 0) {
    if (fsync(j->fd) != 0) {
      r = -errno;
      return r;
    }
    close(j->fd);
    j->fd = -1;
  }
  file_path(j, j->file_index + 1, path, sizeof path);
  fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0640);
  if (fd < 0)
    return -errno;
  n = snprintf(hdr, sizeof hdr, "# qrs-journal 1 file=%u prev=%s\n",
               j->file_index + 1, prev_hex);
  r = fd_write_all(fd, hdr, (size_t)n);
  if (r == 0 && fsync(fd) != 0)
    r = -errno;
  if (r != 0) {
    close(fd);
    unlink(path);
    return r;
  }
  j->fd = fd;
  j->file_index++;
  j->file_bytes = (uint64_t)n;
  return 0;
}

static int
open_current_locked(struct journal *j, const char *prev_hex)
{
  char path[4096];

  if (j->file_index == 0 || j->file_bytes >= j->p.max_bytes)
    return open_next_locked(j, prev_hex);
  file_path(j, j->file_index, path, sizeof path);
  j->fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
  return j->fd < 0 ? -errno : 0;
}

/* open_next_locked() (next 1) or open_current_locked() with fd_mu held:
   the syncer never fsyncs a file being closed. */
static int
open_file(struct journal *j, const char *prev_hex, int next)
{
  int r;

  pthread_mutex_lock(&j->fd_mu);
  r = next ? open_next_locked(j, prev_hex) : open_current_locked(j, prev_hex);
  pthread_mutex_unlock(&j->fd_mu);
  return r;
}

/* Append len bytes of buf (whole lines) to the current file, rotating
   first when it is full (the full file is fsync'd): 0, or a negative
   errno with the file cut back to the size it had (no torn line stays).
   The bytes written are durable at the next sync_file(). */
static int
append(struct journal *j, const char *buf, size_t len, const char *prev_hex)
{
  int r = 0;

  if (j->fd < 0)
    r = open_file(j, prev_hex, 0);
  else if (j->file_bytes >= j->p.max_bytes)
    r = open_file(j, prev_hex, 1);
  if (r == 0)
    r = fd_write_all(j->fd, buf, len);
  if (r == 0) {
    j->file_bytes += len;
    return 0;
  }
  /* the space a torn batch took comes back now; if this fails too,
     recover() cuts it before writing anything else */
  if (j->fd >= 0 && ftruncate(j->fd, (off_t)j->file_bytes) == 0)
    (void)fsync(j->fd);
  return r;
}

/* Set ts to ms from now (CLOCK_MONOTONIC). */
static void
deadline_in(unsigned ms, struct timespec *ts)
{
  clock_gettime(CLOCK_MONOTONIC, ts);
  ts->tv_sec += (time_t)(ms / 1000);
  ts->tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec++;
    ts->tv_nsec -= 1000000000L;
  }
}

/* n entries were written (writer thread, after append()): they are the
   chain's written end; the loop is told (params on_written), so that the
   replies waiting for them go out, and the syncer thread is asked to
   fsync them within flush_ms. */
static void
written(struct journal *j, unsigned n)
{
  pthread_mutex_lock(&j->mu);
  memcpy(j->w_hex, j->prev_hex, sizeof j->w_hex);
  j->w_seq = j->last_seq;
  j->written_seq = j->last_seq;
  if (j->state == JOURNAL_QUEUE_FULL)
    j->state = JOURNAL_OK;
  if (!j->sync_pending) {
    j->sync_pending = 1;
    deadline_in(j->p.flush_ms, &j->sync_due);
    pthread_cond_signal(&j->sync_wake);
  }
  j->sync_count += n;
  if (j->sync_count >= j->p.fsync_every && j->sync_count - n <
      j->p.fsync_every)
    pthread_cond_signal(&j->sync_wake);
  /* under mu: journal_detach() waits for it */
  if (j->p.on_written)
    j->p.on_written(j->p.on_written_arg);
  pthread_mutex_unlock(&j->mu);
}

/* fsync what was written (any thread; the writer's own when it rotates,
   recovers or closes, else the syncer's): the head (the status file's)
   reaches it, and with cp a checkpoint is logged when one is due.  0 or
   a negative errno. */
static int
sync_file(struct journal *j, int cp)
{
  char hex[JOURNAL_HEX_LEN + 1];
  uint64_t seq;
  int r = 0;

  pthread_mutex_lock(&j->fd_mu);
  pthread_mutex_lock(&j->mu);
  memcpy(hex, j->w_hex, sizeof hex);
  seq = j->w_seq;
  pthread_mutex_unlock(&j->mu);
  if (j->fd >= 0 && fsync(j->fd) != 0)
    r = -errno;
  if (r == 0) {
    pthread_mutex_lock(&j->mu);
    if (seq >= j->head_seq) {
      memcpy(j->head_hex, hex, sizeof j->head_hex);
      j->head_seq = seq;
    }
    pthread_mutex_unlock(&j->mu);
    if (cp)
      checkpoint(j, NULL);
  }
  pthread_mutex_unlock(&j->fd_mu);
  return r;
}

/* Is the fsync asked for due (flush_ms passed since the first entry
   written after the last one, fsync_every entries written, or
   closing)?  With mu held. */
static int
sync_is_due(const struct journal *j)
{
  struct timespec now;

  if (j->sync_stop || j->p.flush_ms == 0 ||
      j->sync_count >= j->p.fsync_every)
    return 1;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec > j->sync_due.tv_sec ||
         (now.tv_sec == j->sync_due.tv_sec &&
          now.tv_nsec >= j->sync_due.tv_nsec);
}

/* The syncer thread: fsyncs what the writer wrote when it is due, so
   that neither the writer (and the draws waiting for its writes) nor the
   loop waits for a disk's fsync.  A failed fsync is handed to the writer
   (sync_err), which fails the journal. */
static void *
syncer(void *arg)
{
  struct journal *j = arg;
  int r;

  pthread_mutex_lock(&j->mu);
  for (;;) {
    while (!j->sync_pending && !j->sync_stop)
      pthread_cond_wait(&j->sync_wake, &j->mu);
    if (!j->sync_pending)
      break;
    if (!sync_is_due(j)) {
      pthread_cond_timedwait(&j->sync_wake, &j->mu, &j->sync_due);
      continue;
    }
    j->sync_pending = 0;
    j->sync_count = 0;
    pthread_mutex_unlock(&j->mu);
    r = sync_file(j, 1);
    pthread_mutex_lock(&j->mu);
    if (r != 0 && j->sync_err == 0) {
      j->sync_err = r;
      pthread_cond_signal(&j->wake);
    }
  }
  pthread_mutex_unlock(&j->mu);
  return NULL;
}

/* Keep at least half a block of sequence numbers reserved ahead of the
   ones handed out (writer thread); 0 or a negative errno. */
static int
reserve_ahead(struct journal *j)
{
  uint64_t handed, upto;
  int r;

  pthread_mutex_lock(&j->mu);
  handed = j->next_seq - 1;
  upto = j->reserved;
  pthread_mutex_unlock(&j->mu);
  if (upto - handed >= j->block / 2)
    return 0;
  upto = handed + j->block;
  r = write_reserved(j, upto);
  if (r != 0)
    return r;
  pthread_mutex_lock(&j->mu);
  j->reserved = upto;
  pthread_mutex_unlock(&j->mu);
  return 0;
}

/* Free the records queued (with mu held, or no writer running): they
   are dropped with the entries. */
static void
drop_records(struct journal *j)
{
  size_t i, slot;

  for (i = 0; i < j->q_len; i++) {
    slot = (j->q_head + i) % j->p.queue_len;
    free(j->q[slot].record);
    j->q[slot].record = NULL;
  }
}

/* A write or fsync failed (r): every entry handed out and not written
   is lost (the batch that failed, and what is queued behind it: dropped,
   not written after the failure; those written stay, their draws were
   answered journalled), and the loop is told which (journal_progress());
   draws are refused or labelled until recover() succeeds. */
static void
fail(struct journal *j, int r)
{
  char path[4096];
  uint64_t first, last;
  int was;

  pthread_mutex_lock(&j->mu);
  first = j->written_seq + 1;
  last = j->next_seq - 1;
  drop_records(j);
  j->q_head = (j->q_head + j->q_len) % j->p.queue_len;
  j->q_len = 0;
  j->a_used = 0;
  j->a_tail = 0;
  was = j->state == JOURNAL_WRITE_ERROR;
  j->state = JOURNAL_WRITE_ERROR;
  j->err = -r;
  memcpy(j->prev_hex, j->w_hex, sizeof j->prev_hex);
  j->last_seq = j->w_seq;
  if (last >= first) {
    if (j->lost_first == 0)
      j->lost_first = first;
    j->lost_last = last;
    if (j->n_lost_q == JOURNAL_LOST_RANGES) {
      j->lost_q[j->n_lost_q - 1].last = last;
    } else {
      j->lost_q[j->n_lost_q].first = first;
      j->lost_q[j->n_lost_q++].last = last;
    }
  }
  if (j->p.on_written && last >= first)
    j->p.on_written(j->p.on_written_arg);
  pthread_mutex_unlock(&j->mu);
  if (was)
    return;
  /* open_next() failed: the file it could not create */
  file_path(j, j->fd < 0 && j->file_bytes >= j->p.max_bytes ?
            j->file_index + 1 : j->file_index, path, sizeof path);
  if (last >= first)
    log_err("journal %s: %s; draws are %s until it can be written again "
            "(tried every %u ms); entries %" PRIu64 "..%" PRIu64 " are lost "
            "(served, not written)", path, strerror(-r),
            j->p.policy == JOURNAL_POLICY_STOP ? "refused" :
            "served labelled \"unjournalled\"", JOURNAL_RETRY_MS, first,
            last);
  else
    log_err("journal %s: %s; draws are %s until it can be written again "
            "(tried every %u ms)", path, strerror(-r),
            j->p.policy == JOURNAL_POLICY_STOP ? "refused" :
            "served labelled \"unjournalled\"", JOURNAL_RETRY_MS);
}

/* Append a gap record for first..last (reason: a JOURNAL_GAP_*), move
   the chain past it and fsync: 0, or a negative errno. */
static int
append_gap(struct journal *j, uint64_t first, uint64_t last,
           const char *reason)
{
  char line[JOURNAL_LINE_MAX];
  uint8_t hash[JOURNAL_HASH_LEN];
  int n, r;

  n = format_gap(first, last, reason, j->prev_hex, line, hash);
  r = append(j, line, (size_t)n, j->prev_hex);
  if (r != 0)
    return r;
  journal_hex(hash, JOURNAL_HASH_LEN, j->prev_hex);
  j->last_seq = last;
  pthread_mutex_lock(&j->mu);
  memcpy(j->w_hex, j->prev_hex, sizeof j->w_hex);
  j->w_seq = last;
  pthread_mutex_unlock(&j->mu);
  return sync_file(j, 0);
}

/* After a failure: the sequence reservation renewed, then a gap record
   for the entries lost, durably; 0 (the journal takes draws again) or a
   negative errno. */
static int
recover(struct journal *j)
{
  char path[4096];
  uint64_t first, last;
  int r;

  if (j->fd >= 0 && ftruncate(j->fd, (off_t)j->file_bytes) != 0)
    return -errno;
  r = sync_file(j, 0);
  if (r == 0)
    r = reserve_ahead(j);
  if (r != 0)
    return r;
  journal_lost(j, &first, &last);
  if (first != 0) {
    r = append_gap(j, first, last, JOURNAL_GAP_WRITE_ERROR);
    if (r != 0)
      return r;
  }
  pthread_mutex_lock(&j->mu);
  memcpy(j->head_hex, j->prev_hex, sizeof j->head_hex);
  j->head_seq = j->last_seq;
  /* the next loss starts after the gap */
  j->written_seq = j->last_seq;
  j->lost_first = j->lost_last = 0;
  j->state = JOURNAL_OK;
  j->err = 0;
  j->sync_err = 0;
  pthread_mutex_unlock(&j->mu);
  file_path(j, j->file_index, path, sizeof path);
  if (first != 0)
    log_warn("journal %s: written again; the lost entries %" PRIu64 "..%"
             PRIu64 " are recorded as a gap", path, first, last);
  else
    log_warn("journal %s: written again", path);
  return 0;
}

/* The writer in the failed state: recover() every JOURNAL_RETRY_MS
   until it succeeds or the journal closes (one last try).  0 when the
   journal takes draws again, -1 when it closes. */
static int
retry(struct journal *j)
{
  struct timespec dl;
  int stopping;

  pthread_mutex_lock(&j->mu);
  deadline_in(JOURNAL_RETRY_MS, &dl);
  while (!j->stopping)
    if (pthread_cond_timedwait(&j->wake, &j->mu, &dl) == ETIMEDOUT)
      break;
  stopping = j->stopping;
  pthread_mutex_unlock(&j->mu);
  if (recover(j) == 0)
    return 0;
  return stopping ? -1 : 0;
}

/* The writer waits for entries (idle set: the next journal_submit()
   signals once), or a failed fsync of the syncer's.  It does not collect
   entries before it writes them: a draw's reply waits for its entry,
   and what is submitted while a batch is written makes the next batch.
   Called and returns with mu held; the number queued (0: closing, or
   sync_err). */
static size_t
wait_batch(struct journal *j)
{
  while (j->q_len == 0 && !j->stopping && j->sync_err == 0) {
    j->idle = 1;
    pthread_cond_wait(&j->wake, &j->mu);
  }
  j->idle = 0;
  return j->q_len;
}

/* Group commit: take what is queued (at most fsync_every entries and
   what fits the buffer), format it from the ring slots without the lock
   (journal_submit() only fills the slots after the queued ones), write it
   in one write() and tell the loop; entries submitted meanwhile make the
   next batch; the syncer thread fsyncs them (syncer()).  A failed write
   or fsync loses the entries not written (fail()), and the writer tries
   again every JOURNAL_RETRY_MS (retry()).  On close, with every entry
   written and fsync'd, the reservation is cut back to the last sequence:
   the next start records no gap. */
static void *
writer(void *arg)
{
  struct journal *j = arg;
  uint8_t hash[JOURNAL_HASH_LEN];
  char batch_prev[JOURNAL_HEX_LEN + 1];
  size_t len, batch, take, head, i, max, span;
  int n, r, failed;

  /* below the loop thread when they share a CPU (per-thread nice: the
     writer's own tid) */
  if (j->p.nice != 0 && setpriority(PRIO_PROCESS, (id_t)gettid(),
                                    j->p.nice) != 0)
    log_warn("journal: writer thread nice %d: %s", j->p.nice,
             strerror(errno));
  max = j->buf_cap / JOURNAL_LINE_MAX;
  if (max > j->p.fsync_every)
    max = j->p.fsync_every;
  for (;;) {
    pthread_mutex_lock(&j->mu);
    failed = j->state == JOURNAL_WRITE_ERROR;
    pthread_mutex_unlock(&j->mu);
    if (failed) {
      if (retry(j) != 0)
        break;
      continue;
    }
    r = reserve_ahead(j);
    if (r != 0) {
      fail(j, r);
      continue;
    }
    memcpy(batch_prev, j->prev_hex, sizeof batch_prev);
    pthread_mutex_lock(&j->mu);
    take = wait_batch(j);
    head = j->q_head;
    r = j->sync_err;
    j->sync_err = 0;
    pthread_mutex_unlock(&j->mu);
    if (r == 0 && take == 0)
      r = sync_file(j, 1);      /* closing: everything written first */
    if (r != 0) {
      fail(j, r);
      continue;
    }
    if (take == 0) {
      /* closing with everything written: no number past the last one
         was handed out */
      if (write_reserved(j, j->last_seq) != 0)
        log_warn("journal: could not record the last sequence; the next "
                 "start records a gap after %" PRIu64, j->last_seq);
      break;
    }
    if (take > max)
      take = max;
    len = 0;
    batch = 0;
    span = 0;
    for (i = 0; i < take; i++) {
      struct journal_entry *e = &j->q[(head + i) % j->p.queue_len];
      const struct slot_bytes *sb = &j->qb[(head + i) % j->p.queue_len];

      span += sb->span;
      /* no sched_yield() between draws: their replies wait for this
         batch, and a yield on a busy CPU hands it to another process */
      if (sb->len > 0 &&
          md_sha256(j->w_md, j->sha, j->arena + sb->off, sb->len,
                    e->bytes_sha) != 0)
        EVP_Digest(j->arena + sb->off, sb->len, e->bytes_sha, NULL,
                   EVP_sha256(), NULL);
      n = format_entry(e, j->prev_hex, j->buf + len, hash, j->w_md, j->sha);
      if (n < 0)
        continue;               /* refused at submit already */
      len += (size_t)n;
      batch++;
      journal_hex(hash, JOURNAL_HASH_LEN, j->prev_hex);
      if (e->record) {
        free(e->record);
        e->record = NULL;
      } else {
        j->last_seq = e->seq;
      }
    }
    pthread_mutex_lock(&j->mu);
    j->q_head = (head + take) % j->p.queue_len;
    j->q_len -= take;
    j->a_used -= span;
    j->a_tail = j->a_used == 0 ? 0 : (j->a_tail + span) % j->p.bytes_buf;
    pthread_mutex_unlock(&j->mu);
    if (batch == 0)
      continue;
    r = append(j, j->buf, len, batch_prev);
    if (r == 0)
      written(j, (unsigned)batch);
    else
      fail(j, r);
  }
  return NULL;
}

/* Tell the writer thread (when writer is set) to write what is queued
   and end, then the syncer thread, and wait for them. */
static void
threads_stop(struct journal *j, int writer_too)
{
  if (writer_too) {
    pthread_mutex_lock(&j->mu);
    j->stopping = 1;
    pthread_cond_signal(&j->wake);
    pthread_mutex_unlock(&j->mu);
    pthread_join(j->thread, NULL);
  }
  pthread_mutex_lock(&j->mu);
  j->sync_stop = 1;
  pthread_cond_signal(&j->sync_wake);
  pthread_mutex_unlock(&j->mu);
  pthread_join(j->syncer, NULL);
}

/* Close j's file and free j, with no writer thread running (never
   started, or stopped); j may be half built by journal_open(). */
static void
journal_free(struct journal *j)
{
  if (j->fd >= 0)
    close(j->fd);
  if (j->q != NULL)
    drop_records(j);
  pthread_mutex_destroy(&j->mu);
  pthread_mutex_destroy(&j->fd_mu);
  pthread_cond_destroy(&j->wake);
  pthread_cond_destroy(&j->sync_wake);
  EVP_MD_CTX_free(j->w_md);
  EVP_MD_CTX_free(j->sub_md);
  EVP_MD_free(j->sha);
  free(j->buf);
  free(j->arena);
  free(j->qb);
  free(j->q);
  free(j->p.dir);
  free(j);
}

/* The sequence numbers last_seq + 1 .. reserved were reserved by a qrsd
   that stopped without closing the journal (a crash, SIGKILL): draws
   served with some of them may not have been written (the flush
   window).  None is handed out again: a gap record says which. */
static int
restart_gap(struct journal *j, uint64_t reserved)
{
  char path[4096];
  uint64_t first = j->last_seq + 1;
  int r;

  r = append_gap(j, first, reserved, JOURNAL_GAP_RESTART);
  if (r != 0)
    return r;
  file_path(j, j->file_index, path, sizeof path);
  log_warn("journal %s: qrsd stopped without closing the journal; "
           "sequence numbers %" PRIu64 "..%" PRIu64 " were reserved and "
           "are not in it (draws served with some of them were lost): "
           "recorded as a gap, never handed out again", path, first,
           reserved);
  return 0;
}

int
journal_open(struct journal **ret, const struct journal_params *p,
             char *err, size_t errlen)
{
  pthread_condattr_t ca;
  struct journal *j;
  uint64_t reserved;
  int r;

  *ret = NULL;
  if (p->dir == NULL || p->max_bytes < 4096 || p->queue_len == 0 ||
      p->queue_len > JOURNAL_QUEUE_MAX || p->fsync_every == 0 ||
      p->bytes_buf > JOURNAL_BYTES_BUF_MAX || p->cpu < -1 ||
      p->cpu >= CPU_SETSIZE || p->nice < 0 || p->nice > 19) {
    snprintf(err, errlen, "journal: bad parameters (directory, max_bytes "
             ">= 4096, queue 1..%u, fsync_every >= 1, bytes_buf <= %u, "
             "cpu -1..%d, nice 0..19)", JOURNAL_QUEUE_MAX,
             JOURNAL_BYTES_BUF_MAX, CPU_SETSIZE - 1);
    return -EINVAL;
  }
  j = calloc(1, sizeof *j);
  if (j == NULL)
    return -ENOMEM;
  pthread_mutex_init(&j->mu, NULL);
  pthread_mutex_init(&j->fd_mu, NULL);
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&j->wake, &ca);
  pthread_cond_init(&j->sync_wake, &ca);
  pthread_condattr_destroy(&ca);
  j->p = *p;
  j->fd = -1;
  j->p.dir = strdup(p->dir);
  j->q = calloc(p->queue_len, sizeof *j->q);
  j->qb = calloc(p->queue_len, sizeof *j->qb);
  if (p->bytes_buf > 0)
    j->arena = aligned_alloc(ARENA_ALIGN, (p->bytes_buf + ARENA_ALIGN - 1) &
                             ~(size_t)(ARENA_ALIGN - 1));
  j->buf_cap = (size_t)(p->fsync_every < 4096 ? p->fsync_every : 4096) *
               JOURNAL_LINE_MAX;
  j->buf = malloc(j->buf_cap);
  j->sha = EVP_MD_fetch(NULL, "SHA256", NULL);
  j->w_md = EVP_MD_CTX_new();
  j->sub_md = EVP_MD_CTX_new();
  if (j->p.dir == NULL || j->q == NULL || j->qb == NULL ||
      (p->bytes_buf > 0 && j->arena == NULL) || j->buf == NULL ||
      j->sha == NULL ||
      j->w_md == NULL || j->sub_md == NULL) {
    r = -ENOMEM;
    goto fail;
  }
  r = resume(j, err, errlen);
  if (r != 0)
    goto fail;
  r = read_reserved(j, &reserved, err, errlen);
  if (r != 0)
    goto fail;
  r = open_file(j, j->prev_hex, 0);
  if (r == 0 && reserved > j->last_seq)
    r = restart_gap(j, reserved);
  j->block = 8 * (uint64_t)p->queue_len;
  if (j->block < 4096)
    j->block = 4096;
  j->next_seq = j->last_seq + 1;
  j->reserved = j->last_seq;
  if (r == 0)
    r = reserve_ahead(j);
  if (r != 0) {
    snprintf(err, errlen, "journal in %s: %s", j->p.dir, strerror(-r));
    goto fail;
  }
  memcpy(j->head_hex, j->prev_hex, sizeof j->head_hex);
  j->head_seq = j->last_seq;
  memcpy(j->w_hex, j->prev_hex, sizeof j->w_hex);
  j->w_seq = j->written_seq = j->last_seq;
  checkpoint(j, "open");
  r = -pthread_create(&j->syncer, NULL, syncer, j);
  if (r != 0) {
    snprintf(err, errlen, "journal: thread: %s", strerror(-r));
    goto fail;
  }
  r = -pthread_create(&j->thread, NULL, writer, j);
  if (r == 0 && j->p.cpu >= 0) {
    cpu_set_t set;

    CPU_ZERO(&set);
    CPU_SET(j->p.cpu, &set);
    r = -pthread_setaffinity_np(j->thread, sizeof set, &set);
    if (r != 0) {
      snprintf(err, errlen, "journal: writer thread on CPU %d: %s",
               j->p.cpu, strerror(-r));
      threads_stop(j, 1);
      goto fail;
    }
  } else if (r != 0) {
    snprintf(err, errlen, "journal: thread: %s", strerror(-r));
    threads_stop(j, 0);
    goto fail;
  }
  *ret = j;
  return 0;
fail:
  journal_free(j);
  return r;
}

void
journal_finish(struct journal *j)
{
  if (j == NULL || j->finished)
    return;
  j->finished = 1;
  threads_stop(j, 1);
  if (j->fd >= 0 && fsync(j->fd) != 0)
    log_err("journal: fsync: %s", strerror(errno));
  checkpoint(j, "close");
}

void
journal_close(struct journal *j)
{
  if (j == NULL)
    return;
  journal_finish(j);
  journal_free(j);
}

void
journal_hash_bytes(struct journal *j, const void *b, size_t n,
                   uint8_t out[JOURNAL_HASH_LEN])
{
  if (md_sha256(j->sub_md, j->sha, b, n, out) != 0)
    EVP_Digest(b, n, out, NULL, EVP_sha256(), NULL);
}

/* n bytes from b into the arena at dst (ARENA_ALIGN-aligned).  The
   writer thread on another CPU reads them there for hashing, which leaves
   the arena's lines in that CPU's cache: the loop's ordinary stores into
   them next time round then wait for each line to come back, several
   times slower than stores into lines of its own (qrs-bench journal
   --hash-buffer).  Streaming stores write past the caches, at one cost
   whoever holds the lines, and leave the loop's cache to the draw path;
   the fence orders them before the queue's unlock publishes the
   entry. */
static void
arena_copy(uint8_t *dst, const uint8_t *b, size_t n)
{
#if defined(__SSE2__)
  size_t i;

  for (i = 0; i + 64 <= n; i += 64) {
    __m128i x0 = _mm_loadu_si128((const __m128i *)(b + i));
    __m128i x1 = _mm_loadu_si128((const __m128i *)(b + i + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(b + i + 32));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(b + i + 48));

    _mm_stream_si128((__m128i *)(dst + i), x0);
    _mm_stream_si128((__m128i *)(dst + i + 16), x1);
    _mm_stream_si128((__m128i *)(dst + i + 32), x2);
    _mm_stream_si128((__m128i *)(dst + i + 48), x3);
  }
  memcpy(dst + i, b + i, n - i);
  _mm_sfence();
#else
  memcpy(dst, b, n);
#endif
}

/* Room for n contiguous bytes in the arena: 1 with *off and *span set
   (span includes the end of the ring skipped to wrap), 0 without room.
   With mu held. */
static int
arena_reserve(struct journal *j, size_t n, size_t *off, size_t *span)
{
  size_t size = j->p.bytes_buf, p;

  /* whole cache lines: each draw's bytes start on a line of their own
     (arena_copy()'s streaming stores, no line shared by two draws) */
  n = (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
  if (n == 0 || n > size || j->a_used == size)
    return 0;
  p = (j->a_tail + j->a_used) % size;
  if (j->a_used == 0 || p > j->a_tail) {
    /* free: [p, size) and [0, a_tail) */
    if (size - p >= n) {
      *off = p;
      *span = n;
      return 1;
    }
    if (j->a_tail >= n) {
      *off = 0;
      *span = size - p + n;
      return 1;
    }
    return 0;
  }
  /* wrapped: free is [p, a_tail) */
  if (j->a_tail - p >= n) {
    *off = p;
    *span = n;
    return 1;
  }
  return 0;
}

/* Queue e (its bytes b, n of them, copied into the arena unless b is
   NULL).  -ENOSPC: no room in the arena, nothing queued. */
static int
submit(struct journal *j, struct journal_entry *e, const void *b, size_t n)
{
  struct slot_bytes sb = { 0, 0, 0 };
  size_t slot;
  int r = 0;

  pthread_mutex_lock(&j->mu);
  if (j->stopping) {
    r = -ESHUTDOWN;
  } else if (j->state == JOURNAL_WRITE_ERROR) {
    r = -EIO;
  } else if (j->q_len == j->p.queue_len) {
    if (j->state != JOURNAL_QUEUE_FULL)
      log_warn("journal: queue full (%u entries); draws are %s",
               j->p.queue_len, j->p.policy == JOURNAL_POLICY_STOP ?
               "refused" : "served labelled \"unjournalled\"");
    j->state = JOURNAL_QUEUE_FULL;
    r = -EAGAIN;
  } else if (j->next_seq > j->reserved) {
    /* the writer renews the reservation long before; it is behind */
    if (j->state != JOURNAL_QUEUE_FULL)
      log_warn("journal: no sequence number reserved past %" PRIu64 "; "
               "draws are %s", j->reserved, j->p.policy ==
               JOURNAL_POLICY_STOP ? "refused" : "served labelled "
               "\"unjournalled\"");
    j->state = JOURNAL_QUEUE_FULL;
    pthread_cond_signal(&j->wake);
    r = -EAGAIN;
  } else if (b != NULL && !arena_reserve(j, n, &sb.off, &sb.span)) {
    r = -ENOSPC;
  } else {
    if (b != NULL) {
      sb.len = n;
      arena_copy(j->arena + sb.off, b, n);
      j->a_used += sb.span;
    }
    e->seq = e->record ? 0 : j->next_seq++;
    slot = (j->q_head + j->q_len) % j->p.queue_len;
    j->q[slot] = *e;
    j->qb[slot] = sb;
    j->q_len++;
    /* no wake-up per draw: only an idle writer (a busy one takes what
       queued up when it is done) */
    if (j->idle) {
      j->idle = 0;
      pthread_cond_signal(&j->wake);
    }
  }
  pthread_mutex_unlock(&j->mu);
  return r;
}

int
journal_submit(struct journal *j, struct journal_entry *e)
{
  if (!entry_text_ok(e))
    return -EINVAL;
  return submit(j, e, NULL, 0);
}

int
journal_submit_record(struct journal *j, const char *fields)
{
  struct journal_entry e;
  size_t n = strlen(fields);
  int r;

  if (n < 2 || n > JOURNAL_RECORD_MAX || fields[0] != '#' ||
      fields[n - 1] != '\t' || strchr(fields, '\n') ||
      strchr(fields, '\r') || strchr(fields, '\\'))
    return -EINVAL;
  memset(&e, 0, sizeof e);
  e.record = strdup(fields);
  if (e.record == NULL)
    return -ENOMEM;
  r = submit(j, &e, NULL, 0);
  if (r != 0)
    free(e.record);
  return r;
}

int
journal_submit_bytes(struct journal *j, struct journal_entry *e,
                     const void *b, size_t n)
{
  int r;

  if (!entry_text_ok(e))
    return -EINVAL;
  if (n > 0) {
    r = submit(j, e, b, n);
    if (r != -ENOSPC)
      return r;
  }
  /* the arena is full (or n is 0): hash here */
  if (n > 0 && j->p.bytes_buf > 0) {
    pthread_mutex_lock(&j->mu);
    j->hashed_inline++;
    pthread_mutex_unlock(&j->mu);
  }
  journal_hash_bytes(j, b, n, e->bytes_sha);
  return submit(j, e, NULL, 0);
}

enum journal_state
journal_state(struct journal *j, int *ret_errno)
{
  enum journal_state s;

  pthread_mutex_lock(&j->mu);
  s = j->stopping ? JOURNAL_STOPPED : j->state;
  if (ret_errno)
    *ret_errno = j->err;
  pthread_mutex_unlock(&j->mu);
  return s;
}

void
journal_head(struct journal *j, char hex[JOURNAL_HEX_LEN + 1],
             uint64_t *ret_seq)
{
  pthread_mutex_lock(&j->mu);
  memcpy(hex, j->head_hex, JOURNAL_HEX_LEN + 1);
  if (ret_seq)
    *ret_seq = j->head_seq;
  pthread_mutex_unlock(&j->mu);
}

void
journal_lost(struct journal *j, uint64_t *ret_first, uint64_t *ret_last)
{
  pthread_mutex_lock(&j->mu);
  *ret_first = j->lost_first;
  *ret_last = j->lost_last;
  pthread_mutex_unlock(&j->mu);
}

void
journal_detach(struct journal *j)
{
  pthread_mutex_lock(&j->mu);
  j->p.on_written = NULL;
  j->p.on_written_arg = NULL;
  pthread_mutex_unlock(&j->mu);
}

unsigned
journal_progress(struct journal *j, uint64_t *ret_written,
                 struct journal_range lost[JOURNAL_LOST_RANGES])
{
  unsigned n;

  pthread_mutex_lock(&j->mu);
  *ret_written = j->written_seq;
  n = j->n_lost_q;
  memcpy(lost, j->lost_q, n * sizeof lost[0]);
  j->n_lost_q = 0;
  pthread_mutex_unlock(&j->mu);
  return n;
}

uint64_t
journal_hashed_inline(struct journal *j)
{
  uint64_t n;

  pthread_mutex_lock(&j->mu);
  n = j->hashed_inline;
  pthread_mutex_unlock(&j->mu);
  return n;
}

int
journal_may_serve(struct journal *j)
{
  enum journal_state s = journal_state(j, NULL);

  return s == JOURNAL_OK || j->p.policy == JOURNAL_POLICY_LABEL;
}

int
journal_serves_unjournalled(const struct journal *j)
{
  return j->p.policy == JOURNAL_POLICY_LABEL;
}


/* A checkpoint in the system journal: the durable head (QRS_JOURNAL_SEQ=,
   QRS_JOURNAL_HEAD=), the chain's anchor outside its directory, which
   qrs-audit --checkpoints checks a run against.  Forced at open and
   close (forced: why); else after a batch that began a new file (a
   rotation), or when JOURNAL_CHECKPOINT_ENTRIES entries or
   JOURNAL_CHECKPOINT_SECS seconds have passed since the last.  log_ev()
   queues it: no I/O here. */
static void
checkpoint(struct journal *j, const char *forced)
{
  struct log_fields f = { .event = "journal-checkpoint" };
  char head[JOURNAL_HEX_LEN + 1];
  struct timespec now;
  const char *why;
  uint64_t seq;

  clock_gettime(CLOCK_MONOTONIC, &now);
  journal_head(j, head, &seq);
  if (seq == 0 && forced) {
    j->cp_file = j->file_index;     /* an empty journal: nothing yet */
    j->cp_time = now.tv_sec > 0 ? now.tv_sec : 1;
  }
  if (seq == 0 || (seq == j->cp_seq && !forced))
    return;
  if (forced)
    why = forced;
  else if (j->file_index != j->cp_file)
    why = "rotation";
  else if (seq - j->cp_seq >= JOURNAL_CHECKPOINT_ENTRIES)
    why = "entries";
  else if (now.tv_sec - j->cp_time >= JOURNAL_CHECKPOINT_SECS)
    why = "interval";
  else
    return;
  f.journal_seq = seq;
  f.journal_head = head;
  log_ev(LOG_LEVEL_INFO, &f, "journal checkpoint (%s): sequence %" PRIu64
         ", head %s, file journal-%06u.log", why, seq, head, j->file_index);
  j->cp_seq = seq;
  j->cp_file = j->file_index;
  j->cp_time = now.tv_sec > 0 ? now.tv_sec : 1;
}
