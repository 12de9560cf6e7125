/* The draw journal: an append-only, hash-chained file of every draw
   served.

   Format (version 1), one text line per record, UTF-8 free (every field
   is ASCII; text fields have tabs, newlines and backslashes refused):

     # qrs-journal 1 file=<index> prev=<64 hex>\n           (header)
     <seq>\t<pid>\t<uid>\t<source>\t<amp>\t<amp_params>\t<nonce hex>\t
     <echo 0|1>\t<t_recv>\t<t_gen>\t<t_sent>\t<sha256 of bytes, hex>\t
     <u>\t<fallback>\t<prev hex>\t<hash hex>\n                 (entry)

     #gap\t<first>\t<last>\t<reason>\t<prev hex>\t<hash hex>\n  (gap)
     #study\t<fields>\t<prev hex>\t<hash hex>\n                (study)

   An entry is a draw served to a local client, or a draw or byte block
   served over the gRPC compat endpoint (server/compat.h): those have pid
   0, uid 4294967295 (no local process), amp_params ending in
   ",via=grpc", and a byte block has amp "bytes" and u "nan".

   A study record (engine/study.h says its fields) is written when a
   study starts, before any of its draws; it takes no sequence number
   and is hashed and chained like an entry.

   A gap record says that sequence numbers first..last are in no entry
   (JOURNAL_GAP_*: why); it is hashed and chained like an entry.  Numbers
   are reserved durably in blocks in <dir>/journal.seq before they are
   handed out, so that a start after a crash resumes past every number
   that may have been answered (and records those not written as a gap);
   a clean close cuts the reservation back to the last entry.

   Times are CLOCK_REALTIME seconds with 9 decimals, u is %.17g (it
   round-trips exactly).  hash = SHA-256 over the entry line from its
   first byte up to and including the tab before the hash; prev is the
   previous record's hash (64 zeros for the first entry ever), so the
   chain runs across files: file <dir>/journal-<index 6 digits>.log is
   rotated when it reaches max_bytes (checked between batches, so a file
   may pass it by one batch), and the next file's header names
   the last hash of the one before.  Sequences start at 1 and grow by
   one per entry, also across files, except where a gap record skips.

   Threads: journal_submit() is called from the loop thread and never
   does file I/O: it copies the entry into a bounded queue (queue_len
   entries; with journal_submit_bytes() a draw's bytes go into a bounded
   arena, bytes_buf, for the writer to hash).  The writer thread sleeps
   until an entry arrives (one wake-up), takes everything queued (at most
   fsync_every entries: what queued up while it wrote the last batch is
   the next batch, a group commit) and writes it in one write(); then it
   says so through params on_written, so that a draw's reply can wait for
   its entry to be written (journal_progress()).  A second thread, the syncer, fsyncs
   what was written at most flush_ms after the first entry written since
   the last fsync (at once with flush_ms 0, and at every fsync_every
   entries), so that no write, and no draw, waits for a disk's fsync.  An entry is thus in the file (it
   survives the process: a crash, SIGKILL) when its draw is answered, and
   durable (survives the machine: power loss, a kernel crash) at most
   flush_ms + one fsync after that; the head in the status file is the
   durable one.  A full queue or a write error is not silent:
   journal_state() says which, the entry is not journalled, and the
   caller applies the configured policy (stop serving, or serve the draw
   labelled "unjournalled").  After a write error the batch is cut off
   the file again, the entries queued are dropped (lost: logged by range,
   journal_lost(), and handed to the loop by journal_progress()), and the
   writer tries again every second; once it writes, a gap record names
   the lost range and the state is ok. */
#ifndef QRSD_JOURNAL_H
#define QRSD_JOURNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define JOURNAL_HASH_LEN 32
#define JOURNAL_HEX_LEN 64
#define JOURNAL_NAME_MAX 64         /* source, amp, fallback (with NUL):
                                       the config's 63 characters */
#define JOURNAL_PARAMS_MAX 224      /* amplifier parameters (with NUL):
                                       a study draw's add its stream and
                                       unit tag */
#define JOURNAL_LINE_MAX 2048       /* one formatted entry or record */
#define JOURNAL_RECORD_MAX (JOURNAL_LINE_MAX - 2 * JOURNAL_HEX_LEN - 4)
                                    /* a record's fields before prev */
#define JOURNAL_QUEUE_MAX 65536
#define JOURNAL_FLUSH_MS 5          /* default flush_ms */
#define JOURNAL_BYTES_BUF (2u << 20)   /* default bytes_buf */
#define JOURNAL_BYTES_BUF_MAX (1u << 30)
#define JOURNAL_NICE 0              /* default nice of the writer thread */
/* A checkpoint (the head, to the system journal: QRS_JOURNAL_SEQ=,
   QRS_JOURNAL_HEAD=) is logged at open, at each rotation, at close, and
   while draws are written every so many entries or seconds. */
#define JOURNAL_CHECKPOINT_ENTRIES 65536
#define JOURNAL_CHECKPOINT_SECS 60
#define JOURNAL_GAP_TAG "#gap"      /* a gap record's first field */
#define JOURNAL_STUDY_TAG "#study"  /* a study record's first field */
#define JOURNAL_GAP_RESTART "restart"
#define JOURNAL_GAP_WRITE_ERROR "write-error"
#define JOURNAL_SEQ_FILE "journal.seq"  /* the sequence reservation */

enum journal_policy {
  JOURNAL_POLICY_STOP = 0,          /* refuse to serve unjournalled */
  JOURNAL_POLICY_LABEL,             /* serve, labelled "unjournalled" */
};

enum journal_state {
  JOURNAL_OK = 0,
  JOURNAL_QUEUE_FULL,               /* the writer fell behind */
  JOURNAL_WRITE_ERROR,              /* write/fsync/open failed (errno) */
  JOURNAL_STOPPED,                  /* journal_close() was called */
};

struct journal_params {
  char *dir;                        /* directory of the journal files */
  uint64_t max_bytes;               /* rotation size (>= 4096) */
  unsigned queue_len;               /* 1..JOURNAL_QUEUE_MAX */
  unsigned fsync_every;             /* entries per fsync, >= 1 */
  unsigned flush_ms;                /* most an entry written waits for
                                       its fsync (0: at once) */
  size_t bytes_buf;                 /* the arena journal_submit_bytes()
                                       copies draws' bytes into, for the
                                       writer to hash (0: none, hash at
                                       submit); <= JOURNAL_BYTES_BUF_MAX */
  int cpu;                          /* the writer thread runs on this CPU
                                       only (-1: where the process may) */
  int nice;                         /* the writer thread's nice, 0..19:
                                       above 0 it yields to the loop
                                       thread on a shared CPU */
  enum journal_policy policy;
  /* Called on the writer thread after each batch is written or lost (a
     write error), with the journal's lock held: it must be thread-safe
     and quick (uv_async_send()) and call nothing of the journal; NULL:
     none.  journal_detach() ends the calls. */
  void (*on_written)(void *arg);
  void *on_written_arg;
};

/* A range of sequence numbers, first..last. */
struct journal_range {
  uint64_t first, last;
};

/* Lost ranges journal_progress() keeps until taken; past it the newest
   one is extended (entries written in between then count as lost: their
   draws are labelled or refused, never claimed journalled wrongly). */
#define JOURNAL_LOST_RANGES 8

struct journal_entry {
  uint64_t seq;                     /* set by journal_submit() */
  int32_t pid;
  uint32_t uid;
  char source[JOURNAL_NAME_MAX];
  char amp[JOURNAL_NAME_MAX];
  char amp_params[JOURNAL_PARAMS_MAX];
  uint64_t nonce;
  int echo_ok;
  double t_recv, t_gen, t_sent;     /* CLOCK_REALTIME seconds */
  uint8_t bytes_sha[JOURNAL_HASH_LEN];
  double u;
  char fallback[JOURNAL_NAME_MAX];  /* "" when none */
  char *record;                     /* NULL: an entry; else a record's
                                       fields up to and including the tab
                                       before prev (journal_submit_record()
                                       owns it) */
};

struct journal;

/* Defaults: 64 MiB files, 4096 queued entries, batches of at most 4096
   entries (a batch's buffer is at most 4096 lines), flush_ms
   JOURNAL_FLUSH_MS, policy stop; dir and on_written stay NULL. */
void journal_params_default(struct journal_params *p);

/* Open (creating dir's files, resuming the chain from the newest file
   if there is one) and start the writer thread.  0 or a negative errno
   (err says what). */
int journal_open(struct journal **ret, const struct journal_params *p,
                 char *err, size_t errlen);
/* Flush, fsync and stop the threads (the "close" checkpoint); what
   journal_state(), journal_head() and journal_status_json() say stays
   readable, final, until journal_close().  NULL and a second call are
   accepted. */
void journal_finish(struct journal *j);
/* journal_finish(), then free (NULL is accepted). */
void journal_close(struct journal *j);

/* Hand over an entry (loop thread; no I/O, no allocation).  0 with
   e->seq set, -EAGAIN (queue full), -EIO (the writer failed: see
   journal_state()), -EINVAL (a text field with a tab, newline or
   backslash) or -ESHUTDOWN. */
int journal_submit(struct journal *j, struct journal_entry *e);

/* Queue a record (its text fields, from its tag up to and including the
   tab before prev; at most JOURNAL_RECORD_MAX bytes, no newline or
   backslash): it is written in queue order, takes no sequence number,
   and is hashed and chained like an entry.  0, or what journal_submit()
   returns (-EINVAL for a bad text, -ENOMEM). */
int journal_submit_record(struct journal *j, const char *fields);

/* journal_submit() for a draw whose bytes_sha is the SHA-256 of n bytes
   b: they are copied into the bounded arena (params bytes_buf) and the
   writer thread hashes them, so that the loop thread pays a memcpy, not a
   SHA-256; when the arena has no room they are hashed here (nothing is
   lost, the draw costs the hash).  Returns what journal_submit() does. */
int journal_submit_bytes(struct journal *j, struct journal_entry *e,
                         const void *b, size_t n);

/* SHA-256 of a draw's n bytes b, for journal_entry.bytes_sha, with a
   digest context set up once.  Only from the thread that calls
   journal_submit() (the loop thread). */
void journal_hash_bytes(struct journal *j, const void *b, size_t n,
                        uint8_t out[JOURNAL_HASH_LEN]);

/* No more params on_written calls once this returns (one in progress
   has ended): what it wakes may go. */
void journal_detach(struct journal *j);

/* What became of the entries handed out, for the thread that submits
   (draw replies held until their entry is written): every sequence
   number up to *ret_written that is in none of the lost ranges (returned
   now or by an earlier call) has its entry written (write(2) done);
   each lost range (entries never written, a write error) is returned
   once, oldest first, into lost.  The number of ranges returned. */
unsigned journal_progress(struct journal *j, uint64_t *ret_written,
                          struct journal_range lost[JOURNAL_LOST_RANGES]);

/* The state, the last errno of a write error (0 otherwise), the head:
   the hash and sequence of the last entry durably written (fsync'd). */
enum journal_state journal_state(struct journal *j, int *ret_errno);
void journal_head(struct journal *j, char hex[JOURNAL_HEX_LEN + 1],
                  uint64_t *ret_seq);
/* While a write error lasts: the sequence numbers of the entries it
   lost, first..last (served, not written; first 0: none).  Once the
   writer can write again they are a gap record and this is 0 again. */
void journal_lost(struct journal *j, uint64_t *ret_first,
                  uint64_t *ret_last);
/* How many draws journal_submit_bytes() hashed on the calling thread
   because the arena had no room (bytes_buf too small for the rate, or
   the writer behind). */
uint64_t journal_hashed_inline(struct journal *j);
/* May a draw be served now under the policy?  1 yes (journalled or
   labelled), 0 no (policy stop while the journal is failing). */
int journal_may_serve(struct journal *j);
/* A draw journal_submit*() refused: may it be served, labelled
   "unjournalled"?  1 only under the policy label (whatever the state is
   by now: the writer may have drained the queue since). */
int journal_serves_unjournalled(const struct journal *j);
const char *journal_state_name(enum journal_state s);

/* The status file's "journal" object: state, error (strerror, when
   failing), policy, head (hash of the last durable entry), seq (its
   sequence) and, while entries are lost, lost_first and lost_last; NULL
   without memory. */
struct json_object;
struct json_object *journal_status_json(struct journal *j);

/* Shared with qrs-audit: the hash of an entry's line (len bytes, up to
   and including the tab before the hash field). */
void journal_line_hash(const char *line, size_t len,
                       uint8_t out[JOURNAL_HASH_LEN]);
void journal_hex(const uint8_t *b, size_t n, char *out);
/* Format an entry with prev (hex) into buf (JOURNAL_LINE_MAX), setting
   hash (binary); the length, or -EINVAL. */
int journal_format(const struct journal_entry *e, const char *prev_hex,
                   char *buf, uint8_t hash[JOURNAL_HASH_LEN]);

/* What journal_verify() found wrong (the first one). */
enum journal_fault {
  JOURNAL_INTACT = 0,
  JOURNAL_FAULT_IO,                 /* a file could not be read */
  JOURNAL_FAULT_PARSE,              /* a line is not an entry */
  JOURNAL_FAULT_HASH,               /* an entry's text was edited */
  JOURNAL_FAULT_DROPPED,            /* the sequence skips: entries gone */
  JOURNAL_FAULT_REORDERED,          /* entries out of sequence order */
  JOURNAL_FAULT_REPLAYED,           /* an entry (a draw) appears twice */
  JOURNAL_FAULT_CHAIN,              /* in sequence, but prev is not the
                                       hash before (rewritten chain) */
  JOURNAL_FAULT_SPLICE,             /* a file's header does not continue
                                       the chain of the file before */
};
const char *journal_fault_name(enum journal_fault f);

/* Walk dir's files from journal-000001.log on, recomputing every hash.
   For each intact entry, cb (may be NULL) gets its sequence and its line
   (len bytes, NUL-ended, without the newline); a non-zero return stops the
   walk with that value.  JOURNAL_INTACT with the last sequence (the
   number of entries when no gap record skips any) and the head (last
   hash), or the first fault with err naming the file and line.  Gap
   records are checked and skipped (journal_verify_gaps() reports them). */
int journal_verify(const char *dir,
                   int (*cb)(void *ctx, uint64_t seq, const char *line,
                             size_t len),
                   void *ctx, uint64_t *ret_entries,
                   char head[JOURNAL_HEX_LEN + 1], char *err, size_t errlen);

/* A gap record: sequence numbers first..last are in no entry, for the
   reason given (JOURNAL_GAP_RESTART: reserved by a qrsd that stopped
   without closing the journal, draws served with some of them lost in
   its flush window; JOURNAL_GAP_WRITE_ERROR: served, and lost to a write
   error).  A non-zero return stops the walk with that value. */
typedef int (*journal_gap_cb)(void *ctx, uint64_t first, uint64_t last,
                              const char *reason);
/* A journal file's lines, read in large blocks into a buffer of the
   reader's own (a line is ended in place: no copy per line, no
   strlen()).  The caller opens fd and allocates buf with cap + 1 bytes
   (cap: JOURNAL_LINES_BLOCK), at, end, eof and err 0. */
struct journal_lines {
  int fd;
  char *buf;
  size_t cap, at, end;              /* unread bytes: [at, end) */
  int eof, err;                     /* err: an errno */
};

#define JOURNAL_LINES_BLOCK (1u << 20)

/* The next line without its newline (NUL-ended, *len its length), or
   NULL at the end (lr->err set on a read error).  A line that has no
   newline within JOURNAL_LINE_MAX + 1 bytes (truncated or overlong) is
   returned as it is with *nl 0. */
char *journal_lines_next(struct journal_lines *lr, size_t *len, int *nl);

/* Open path into lr (its buffer kept) and read it from the start: 0, or
   open(2)'s negative errno.  The caller closes lr->fd. */
int journal_lines_open(struct journal_lines *lr, const char *path);

/* Once journal_lines_next() returned NULL: JOURNAL_INTACT at the end of
   the file, or JOURNAL_FAULT_IO with path and the read error in err. */
int journal_lines_end(const struct journal_lines *lr, const char *path,
                      char *err, size_t errlen);

/* One line of a journal file as read (nl: it ended in a newline): its
   hash (the last field, over the text before it) checked, in hx.
   JOURNAL_INTACT, JOURNAL_FAULT_PARSE (truncated or overlong),
   JOURNAL_FAULT_HASH or JOURNAL_FAULT_IO (libcrypto), err naming path
   and lineno. */
struct evp_md_ctx_st;
struct evp_md_st;
int journal_line_check(const char *line, size_t len, int nl,
                      struct evp_md_ctx_st *md, const struct evp_md_st *sha,
                      char hx[JOURNAL_HEX_LEN + 1], const char *path,
                      unsigned lineno, char *err, size_t errlen);

/* The fields of a gap record, line (len bytes, its hash last, as read):
   first..last, the reason (reason_len bytes) and the prev hash's hex,
   pointing into line.  0, or -1 when it is not a well-formed one. */
int journal_gap_fields(const char *line, size_t len, uint64_t *first,
                       uint64_t *last, const char **reason,
                       size_t *reason_len, const char **prev);

/* journal_verify() with gap (may be NULL) called for each gap record. */
int journal_verify_gaps(const char *dir,
                        int (*cb)(void *ctx, uint64_t seq, const char *line,
                                  size_t len),
                        journal_gap_cb gap, void *ctx, uint64_t *ret_entries,
                        char head[JOURNAL_HEX_LEN + 1], char *err,
                        size_t errlen);

#endif
