/* The draw journal: entries written in order with their sequence, the
   SHA-256 chain recomputed line by line and across rotated files, the
   chain resumed by a second open, refused text fields, and a failing
   journal reported (never silent) with the policy applied, then written
   again on its own; what a crash or a full disk leaves (torn and
   header-only files), FIFOs and stray names at start; no sequence number
   handed out twice across a SIGKILL. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <criterion/criterion.h>
#include <openssl/evp.h>

#include "persist/journal.h"
#include "testutil.h"

static char dir[64];

static void
mk(void)
{
  test_tmpdir(dir, sizeof(dir), "qrs-journal");
}

static void
rm(void)
{
  test_tmpdir_remove(dir);
}

TestSuite(journal, .init = mk, .fini = rm, .timeout = 30);

static void
entry(struct journal_entry *e, unsigned i)
{
  memset(e, 0, sizeof *e);
  e->pid = 1000 + (int32_t)i;
  e->uid = 7;
  strcpy(e->source, "qrng");
  strcpy(e->amp, "xor");
  strcpy(e->amp_params, "k=4");
  e->nonce = 0x1234567800000000ull + i;
  e->echo_ok = 1;
  e->t_recv = 1.7e9 + i;
  e->t_gen = e->t_recv + 0.001;
  e->t_sent = e->t_gen + 0.001;
  e->bytes_sha[0] = (uint8_t)i;
  e->u = (i + 0.5) / 1e4;
  strcpy(e->fallback, i % 3 ? "" : "system");
}

static void
submit_all(struct journal *j, unsigned from, unsigned n)
{
  struct journal_entry e;
  unsigned i;
  int r;

  for (i = from; i < from + n; i++) {
    entry(&e, i);
    while ((r = journal_submit(j, &e)) == -EAGAIN)
      test_sleep_ms(1);
    cr_assert_eq(r, 0, "submit %u: %d", i, r);
    cr_assert_eq(e.seq, (uint64_t)i + 1);
  }
}

/* journal_verify() with every entry's u checked against what entry()
   submitted. */
static int
check_u(void *ctx, uint64_t seq, const char *line, size_t len)
{
  const char *f = line;
  unsigned k;

  (void)ctx;
  cr_assert_eq(strlen(line), len, "the line's length is given");
  for (k = 0; k < 12; k++)
    f = strchr(f, '\t') + 1;
  cr_assert_eq(strtod(f, NULL), (seq - 1 + 0.5) / 1e4, "u round-trips");
  return 0;
}

static unsigned
verify(char head[JOURNAL_HEX_LEN + 1], unsigned *ret_files)
{
  char path[256], err[512];
  uint64_t n = 0;
  unsigned idx;
  int r;

  r = journal_verify(dir, check_u, NULL, &n, head, err, sizeof err);
  cr_assert_eq(r, JOURNAL_INTACT, "%s: %s", journal_fault_name(r), err);
  for (idx = 1;; idx++) {
    snprintf(path, sizeof path, "%s/journal-%06u.log", dir, idx);
    if (access(path, F_OK) != 0)
      break;
  }
  if (ret_files)
    *ret_files = idx - 1;
  return (unsigned)n;
}

static struct journal *
open_j(uint64_t max_bytes, enum journal_policy pol)
{
  struct journal_params p;
  struct journal *j;
  char err[256] = "";
  int r;

  journal_params_default(&p);
  p.dir = dir;
  p.max_bytes = max_bytes;
  p.policy = pol;
  p.fsync_every = 8;              /* small batches: many rotations */
  r = journal_open(&j, &p, err, sizeof err);
  cr_assert_eq(r, 0, "journal_open: %d %s", r, err);
  return j;
}

Test(journal, chain_rotation_resume)
{
  char head[JOURNAL_HEX_LEN + 1], dhead[JOURNAL_HEX_LEN + 1];
  struct journal *j = open_j(4096, JOURNAL_POLICY_STOP);
  unsigned files;
  uint64_t seq;

  submit_all(j, 0, 500);
  journal_close(j);
  cr_assert_eq(verify(head, &files), 500);
  cr_assert_gt(files, 5, "rotated by size: %u files", files);

  j = open_j(4096, JOURNAL_POLICY_STOP);
  journal_head(j, dhead, &seq);
  cr_assert_eq(seq, 500);
  cr_assert_str_eq(dhead, head);
  submit_all(j, 500, 300);
  journal_close(j);
  cr_assert_eq(verify(head, NULL), 800);
}

Test(journal, head_is_durable_head)
{
  char head[JOURNAL_HEX_LEN + 1], dhead[JOURNAL_HEX_LEN + 1];
  struct journal *j = open_j(1u << 20, JOURNAL_POLICY_STOP);
  uint64_t seq = 0;
  int i;

  submit_all(j, 0, 100);
  for (i = 0; i < 2000 && seq != 100; i++) {
    test_sleep_ms(5);
    journal_head(j, dhead, &seq);
  }
  cr_assert_eq(seq, 100);
  cr_assert_eq(verify(head, NULL), 100);
  cr_assert_str_eq(dhead, head);
  cr_assert_eq(journal_state(j, NULL), JOURNAL_OK);
  journal_close(j);
}

Test(journal, refuses_text_that_breaks_lines)
{
  struct journal *j = open_j(1u << 20, JOURNAL_POLICY_STOP);
  struct journal_entry e;

  entry(&e, 0);
  strcpy(e.source, "a\tb");
  cr_assert_eq(journal_submit(j, &e), -EINVAL);
  entry(&e, 0);
  strcpy(e.amp_params, "x\ny");
  cr_assert_eq(journal_submit(j, &e), -EINVAL);
  journal_close(j);
}

/* The directory goes away: the next rotation cannot create its file. */
static void
failing(enum journal_policy pol, int may_serve)
{
  struct journal *j = open_j(4096, pol);
  struct journal_entry e;
  int i, r = 0, err = 0;
  char cmd[128];

  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_assert_eq(system(cmd), 0);
  for (i = 0; i < 5000; i++) {
    entry(&e, (unsigned)i);
    r = journal_submit(j, &e);
    if (r == -EIO)
      break;
    if (r == -EAGAIN)
      test_sleep_ms(1);
  }
  cr_assert_eq(r, -EIO, "a failing journal is reported");
  cr_assert_eq(journal_state(j, &err), JOURNAL_WRITE_ERROR);
  cr_assert_eq(err, ENOENT);
  cr_assert_eq(journal_may_serve(j), may_serve);
  journal_close(j);
  mkdir(dir, 0700);
}

Test(journal, write_error_stop)
{
  failing(JOURNAL_POLICY_STOP, 0);
}

Test(journal, write_error_label)
{
  failing(JOURNAL_POLICY_LABEL, 1);
}

Test(journal, bad_params)
{
  struct journal_params p;
  struct journal *j;
  char err[256] = "";

  journal_params_default(&p);
  cr_assert_eq(journal_open(&j, &p, err, sizeof err), -EINVAL);
  cr_assert_neq(err[0], '\0');
  p.dir = "/nonexistent/qrs-journal";
  cr_assert_lt(journal_open(&j, &p, err, sizeof err), 0);
  cr_assert_not_null(strstr(err, "/nonexistent/qrs-journal"));
}

/* Tamper tests: each edit of a journal is found and named. */
static char *lines[64];
static size_t n_lines;

static void
load(const char *path)
{
  char buf[JOURNAL_LINE_MAX + 8];
  FILE *fp = fopen(path, "r");

  cr_assert_not_null(fp);
  n_lines = 0;
  while (n_lines < 64 && fgets(buf, sizeof buf, fp))
    lines[n_lines++] = strdup(buf);
  fclose(fp);
}

static void
save(const char *path)
{
  FILE *fp = fopen(path, "w");
  size_t i;

  cr_assert_not_null(fp);
  for (i = 0; i < n_lines; i++) {
    fputs(lines[i], fp);
    free(lines[i]);
  }
  fclose(fp);
}

static void
expect(enum journal_fault want)
{
  char err[512];
  int r = journal_verify(dir, NULL, NULL, NULL, NULL, err, sizeof err);

  cr_assert_eq(r, (int)want, "want %s, got %s (%s)", journal_fault_name(want),
               journal_fault_name((enum journal_fault)r), err);
  cr_assert_neq(err[0], '\0');
}

static void
small_run(char *path, size_t len)
{
  struct journal *j = open_j(1u << 20, JOURNAL_POLICY_STOP);

  submit_all(j, 0, 20);
  journal_close(j);
  snprintf(path, len, "%s/journal-000001.log", dir);
  load(path);
  cr_assert_eq(n_lines, 21);
}

Test(journal, tamper_edit_byte)
{
  char path[256];

  small_run(path, sizeof path);
  lines[5][strlen(lines[5]) / 2] ^= 1;        /* inside u or a time */
  save(path);
  expect(JOURNAL_FAULT_HASH);
}

Test(journal, tamper_drop_entry)
{
  char path[256];

  small_run(path, sizeof path);
  free(lines[7]);
  memmove(&lines[7], &lines[8], (n_lines - 8) * sizeof *lines);
  n_lines--;
  save(path);
  expect(JOURNAL_FAULT_DROPPED);
}

Test(journal, tamper_reorder)
{
  char path[256], *t;

  small_run(path, sizeof path);
  t = lines[3];
  lines[3] = lines[4];
  lines[4] = t;
  save(path);
  expect(JOURNAL_FAULT_REORDERED);
}

Test(journal, tamper_replay)
{
  char path[256];

  small_run(path, sizeof path);
  lines[n_lines] = strdup(lines[n_lines - 1]);  /* the last draw twice */
  n_lines++;
  save(path);
  expect(JOURNAL_FAULT_REPLAYED);
}

/* The last entry cut short (a crash mid-write): no newline, half a line. */
Test(journal, truncated_last_entry)
{
  char path[256], err[512];
  size_t n;
  int r;

  small_run(path, sizeof path);
  n = strlen(lines[n_lines - 1]);
  lines[n_lines - 1][n / 2] = '\0';
  save(path);
  r = journal_verify(dir, NULL, NULL, NULL, NULL, err, sizeof err);
  cr_assert_eq(r, JOURNAL_FAULT_PARSE, "%s", err);
  cr_assert_not_null(strstr(err, "journal-000001.log:21: truncated"), "%s",
                     err);
}

/* A line longer than any entry, in the middle of the file. */
Test(journal, overlong_entry)
{
  char path[256], err[512];
  int r;

  small_run(path, sizeof path);
  free(lines[9]);
  lines[9] = malloc(3 * JOURNAL_LINE_MAX);
  memset(lines[9], '7', 3 * JOURNAL_LINE_MAX - 2);
  lines[9][3 * JOURNAL_LINE_MAX - 2] = '\n';
  lines[9][3 * JOURNAL_LINE_MAX - 1] = '\0';
  save(path);
  r = journal_verify(dir, NULL, NULL, NULL, NULL, err, sizeof err);
  cr_assert_eq(r, JOURNAL_FAULT_PARSE, "%s", err);
  cr_assert_not_null(strstr(err, ":10: truncated or overlong"), "%s", err);
}

/* One file of several MB: its lines cross the verifier's read blocks
   (1 MB) and each still verifies, its u intact. */
Test(journal, file_larger_than_read_block)
{
  char head[JOURNAL_HEX_LEN + 1], path[256];
  struct journal *j = open_j(64u << 20, JOURNAL_POLICY_STOP);
  struct stat st;
  unsigned files;

  submit_all(j, 0, 12000);
  journal_close(j);
  snprintf(path, sizeof path, "%s/journal-000001.log", dir);
  cr_assert_eq(stat(path, &st), 0);
  cr_assert_gt(st.st_size, 3 << 20, "%lld bytes", (long long)st.st_size);
  cr_assert_eq(verify(head, &files), 12000);
  cr_assert_eq(files, 1);
}

/* Two runs spliced: a second run's file put after the first one's. */
Test(journal, tamper_splice)
{
  char path[256], other[64], cmd[512];
  struct journal *j;

  small_run(path, sizeof path);
  save(path);
  test_tmpdir(other, sizeof other, "qrs-journal2");
  /* a second journal: its own files and sequence reservation */
  snprintf(cmd, sizeof cmd, "mv %s/journal-000001.log %s/journal.seq %s/",
           dir, dir, other);
  cr_assert_eq(system(cmd), 0);
  j = open_j(1u << 20, JOURNAL_POLICY_STOP);
  submit_all(j, 0, 5);
  journal_close(j);
  snprintf(cmd, sizeof cmd, "mv %s/journal-000001.log %s/journal-000002.log"
           " && mv %s/journal-000001.log %s/", dir, dir, other, dir);
  cr_assert_eq(system(cmd), 0);
  test_tmpdir_remove(other);
  expect(JOURNAL_FAULT_SPLICE);
}

/* The chain rewritten: an entry's prev edited and its hash recomputed. */
Test(journal, tamper_rechained)
{
  char path[256], hx[JOURNAL_HEX_LEN + 1];
  uint8_t h[JOURNAL_HASH_LEN];
  size_t len;

  small_run(path, sizeof path);
  len = strlen(lines[9]);
  lines[9][len - 3 - JOURNAL_HEX_LEN] ^= 1;    /* inside prev */
  journal_line_hash(lines[9], len - 1 - JOURNAL_HEX_LEN, h);
  journal_hex(h, JOURNAL_HASH_LEN, hx);
  memcpy(lines[9] + len - 1 - JOURNAL_HEX_LEN, hx, JOURNAL_HEX_LEN);
  save(path);
  expect(JOURNAL_FAULT_CHAIN);
}

/* The bytes hash of entry seq's line (field 11) in hex. */
static char bytes_hex[4096][JOURNAL_HEX_LEN + 1];

static int
collect_bytes_sha(void *ctx, uint64_t seq, const char *line, size_t len)
{
  const char *f = line;
  unsigned k;

  (void)ctx;
  (void)len;
  for (k = 0; k < 11; k++)
    f = strchr(f, '\t') + 1;
  cr_assert_lt(seq, 4096);
  memcpy(bytes_hex[seq], f, JOURNAL_HEX_LEN);
  bytes_hex[seq][JOURNAL_HEX_LEN] = '\0';
  return 0;
}

static size_t
bytes_len(unsigned i)
{
  if (i % 7 == 0)
    return 0;                     /* the hash of nothing */
  if (i % 50 == 0)
    return 20000;                 /* more than the arena holds */
  return 700 + (i * 37) % 2300;
}

static void
bytes_fill(uint8_t *b, size_t n, unsigned i)
{
  size_t k;

  for (k = 0; k < n; k++)
    b[k] = (uint8_t)(i * 31 + k * 7);
}

/* journal_submit_bytes(): the writer hashes the bytes copied into the
   arena, across its wrap, and a draw that finds the arena full (bytes
   larger than the arena, or a burst) is hashed at submit instead: every
   entry holds the SHA-256 of its own bytes either way. */
Test(journal, bytes_hashed_by_writer_through_a_bounded_arena)
{
  static uint8_t b[20000];
  struct journal_params p;
  struct journal_entry e;
  struct journal *j;
  uint8_t want[JOURNAL_HASH_LEN];
  char err[256] = "", hex[JOURNAL_HEX_LEN + 1], head[JOURNAL_HEX_LEN + 1];
  uint64_t n = 0;
  unsigned i, total = 600;
  int r;

  journal_params_default(&p);
  p.dir = dir;
  p.bytes_buf = 10000;            /* 3 to 14 draws: it wraps and fills */
  p.flush_ms = 1;
  r = journal_open(&j, &p, err, sizeof err);
  cr_assert_eq(r, 0, "journal_open: %d %s", r, err);
  for (i = 0; i < total; i++) {
    entry(&e, i);
    bytes_fill(b, bytes_len(i), i);
    while ((r = journal_submit_bytes(j, &e, b, bytes_len(i))) == -EAGAIN)
      test_sleep_ms(1);
    cr_assert_eq(r, 0, "submit %u: %d", i, r);
    cr_assert_eq(e.seq, (uint64_t)i + 1);
  }
  journal_close(j);
  r = journal_verify(dir, collect_bytes_sha, NULL, &n, head, err, sizeof err);
  cr_assert_eq(r, JOURNAL_INTACT, "%s: %s", journal_fault_name(r), err);
  cr_assert_eq(n, total);
  for (i = 0; i < total; i++) {
    bytes_fill(b, bytes_len(i), i);
    EVP_Digest(b, bytes_len(i), want, NULL, EVP_sha256(), NULL);
    journal_hex(want, JOURNAL_HASH_LEN, hex);
    cr_assert_str_eq(bytes_hex[i + 1], hex, "entry %u's bytes hash", i + 1);
  }
}

/* Restarts: what a crash, a full disk or a stray name leaves behind must
   not keep the journal from resuming, and no sequence number is handed
   out twice. */

/* A small file's text (NUL-ended; free it). */
static char *
test_read_file(const char *path)
{
  char *b = calloc(1, 4096);
  FILE *fp = fopen(path, "r");
  size_t n;

  cr_assert_not_null(fp, "%s", path);
  n = fread(b, 1, 4095, fp);
  b[n] = '\0';
  fclose(fp);
  return b;
}

static int
open_p(struct journal **j, uint64_t max_bytes, unsigned flush_ms, char *err,
       size_t errlen)
{
  struct journal_params p;

  journal_params_default(&p);
  p.dir = dir;
  p.max_bytes = max_bytes;
  /* batches of 8, unless entries wait out a flush window */
  p.fsync_every = flush_ms ? 4096 : 8;
  p.flush_ms = flush_ms;
  return journal_open(j, &p, err, errlen);
}

/* The newest file's index and its last hash. */
static unsigned
newest(char hash[JOURNAL_HEX_LEN + 1])
{
  char path[256], err[512];
  unsigned idx;
  uint64_t n;

  cr_assert_eq(journal_verify(dir, NULL, NULL, &n, hash, err, sizeof err),
               JOURNAL_INTACT, "%s", err);
  for (idx = 1;; idx++) {
    snprintf(path, sizeof path, "%s/journal-%06u.log", dir, idx);
    if (access(path, F_OK) != 0)
      return idx - 1;
  }
}

/* A rotation wrote the next file's header, and qrsd stopped (or was
   killed) before the first entry went into it. */
Test(journal, header_only_file_resumes)
{
  char hash[JOURNAL_HEX_LEN + 1], path[256], hdr[256];
  struct journal *j = open_j(4096, JOURNAL_POLICY_STOP);
  unsigned idx;

  submit_all(j, 0, 100);
  journal_close(j);
  idx = newest(hash);
  snprintf(path, sizeof path, "%s/journal-%06u.log", dir, idx + 1);
  snprintf(hdr, sizeof hdr, "# qrs-journal 1 file=%u prev=%s\n", idx + 1,
           hash);
  test_write_file(path, hdr);
  j = open_j(4096, JOURNAL_POLICY_STOP);
  submit_all(j, 100, 50);
  journal_close(j);
  cr_assert_eq(verify(NULL, NULL), 150);
}

/* The last entry cut short by a crash or a full disk: set aside in
   <file>.torn, cut off, and the journal goes on from the entry before. */
Test(journal, torn_last_line_set_aside)
{
  static const char torn[] = "21\t1020\t7\tqrng\txor\tk=4\t12345";
  char path[256], aside[300], *text;
  struct journal *j;
  FILE *fp;

  small_run(path, sizeof path);
  save(path);
  fp = fopen(path, "a");
  cr_assert_not_null(fp);
  fputs(torn, fp);
  fclose(fp);
  j = open_j(1u << 20, JOURNAL_POLICY_STOP);
  submit_all(j, 20, 10);
  journal_close(j);
  cr_assert_eq(verify(NULL, NULL), 30);
  snprintf(aside, sizeof aside, "%s.torn", path);
  text = test_read_file(aside);
  cr_assert_str_eq(text, torn, "the torn bytes are kept aside");
  free(text);
}

/* A FIFO where the newest file should be: refused at once, named. */
Test(journal, fifo_refused, .timeout = 10)
{
  char path[256], err[512] = "";
  struct journal *j = NULL;

  snprintf(path, sizeof path, "%s/journal-000001.log", dir);
  cr_assert_eq(mkfifo(path, 0600), 0);
  cr_assert_lt(open_p(&j, 1u << 20, 0, err, sizeof err), 0);
  cr_assert_null(j);
  cr_assert_not_null(strstr(err, path), "%s", err);
  cr_assert_not_null(strstr(err, "not a regular file"), "%s", err);
}

/* Names that are not exactly journal-NNNNNN.log are not journal files. */
Test(journal, stray_names_ignored)
{
  static const char *const stray[] = {
    "journal-000007", "journal-000001.log.gz", "journal-000009.log.tmp",
    "journal-00001.log", "journal-0000010.log", "notes.txt",
  };
  char path[256];
  struct journal *j;
  size_t i;

  small_run(path, sizeof path);
  save(path);
  for (i = 0; i < sizeof stray / sizeof stray[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, stray[i]);
    test_write_file(path, "x\n");
  }
  j = open_j(1u << 20, JOURNAL_POLICY_STOP);
  submit_all(j, 20, 5);
  journal_close(j);
  cr_assert_eq(verify(NULL, NULL), 25);
}

static char long_seen[2][JOURNAL_NAME_MAX];

static int
collect_source(void *ctx, uint64_t seq, const char *line, size_t len)
{
  const char *f = strchr(strchr(strchr(line, '\t') + 1, '\t') + 1, '\t') + 1;

  (void)ctx;
  (void)len;
  cr_assert_leq(seq, 2);
  snprintf(long_seen[seq - 1], sizeof long_seen[0], "%.*s",
           (int)(strchr(f, '\t') - f), f);
  return 0;
}

/* Source names of the config's 63 characters that differ only in the
   last one stay two names. */
Test(journal, names_of_63_characters)
{
  char name[2][64], err[512];
  struct journal *j = open_j(1u << 20, JOURNAL_POLICY_STOP);
  struct journal_entry e;
  int i;

  for (i = 0; i < 2; i++) {
    memset(name[i], 'a', 62);
    name[i][62] = (char)('0' + i);
    name[i][63] = '\0';
    entry(&e, (unsigned)i);
    cr_assert_lt(strlen(name[i]), sizeof e.source, "63 characters fit");
    memcpy(e.source, name[i], strlen(name[i]) + 1);
    memcpy(e.fallback, name[i], strlen(name[i]) + 1);
    cr_assert_eq(journal_submit(j, &e), 0);
  }
  journal_close(j);
  cr_assert_eq(journal_verify(dir, collect_source, NULL, NULL, NULL, err,
                              sizeof err), JOURNAL_INTACT, "%s", err);
  cr_assert_str_eq(long_seen[0], name[0]);
  cr_assert_str_eq(long_seen[1], name[1]);
}

static uint64_t gap_first, gap_last;
static char gap_reason[32];

static int
on_gap(void *ctx, uint64_t first, uint64_t last, const char *reason)
{
  (void)ctx;
  cr_assert_eq(gap_first, 0, "one gap");
  gap_first = first;
  gap_last = last;
  snprintf(gap_reason, sizeof gap_reason, "%s", reason);
  return 0;
}

/* SIGKILL inside the flush window (entries written, not yet fsync'd):
   the entries written stay (a draw's reply waits for its write, not for
   the fsync), the numbers reserved past them are never handed out again,
   and a gap record says which. */
Test(journal, sigkill_in_flush_window_never_repeats_a_sequence)
{
  char err[512] = "", hd[JOURNAL_HEX_LEN + 1];
  struct journal *j;
  struct journal_entry e;
  uint64_t handed = 0, n = 0, head = 0;
  int fds[2], st, i;
  pid_t pid;

  cr_assert_eq(pipe(fds), 0);
  pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    /* 10 durable entries, then 200 written in a flush window of a
       second */
    if (open_p(&j, 1u << 20, 0, err, sizeof err) != 0)
      _exit(2);
    for (i = 0; i < 10; i++) {
      entry(&e, (unsigned)i);
      if (journal_submit(j, &e) != 0)
        _exit(3);
    }
    for (i = 0; i < 2000 && head != 10; i++) {
      test_sleep_ms(5);
      journal_head(j, hd, &head);
    }
    journal_close(j);
    if (open_p(&j, 1u << 20, 1000, err, sizeof err) != 0)
      _exit(4);
    for (i = 10; i < 210; i++) {
      entry(&e, (unsigned)i);
      if (journal_submit(j, &e) != 0)
        _exit(5);
    }
    for (i = 0; i < 2000 && head != 210; i++) {
      struct journal_range lost[JOURNAL_LOST_RANGES];

      test_sleep_ms(5);
      if (journal_progress(j, &head, lost) != 0)
        _exit(7);
    }
    if (head != 210)
      _exit(8);
    if (write(fds[1], &e.seq, sizeof e.seq) != sizeof e.seq)
      _exit(6);
    pause();
    _exit(0);
  }
  close(fds[1]);
  cr_assert_eq(read(fds[0], &handed, sizeof handed), sizeof handed);
  close(fds[0]);
  kill(pid, SIGKILL);
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFSIGNALED(st), "status %d", st);
  cr_assert_eq(handed, 210);

  cr_assert_eq(open_p(&j, 1u << 20, 0, err, sizeof err), 0, "%s", err);
  entry(&e, 210);
  cr_assert_eq(journal_submit(j, &e), 0);
  cr_assert_gt(e.seq, handed, "seq %llu handed out again",
               (unsigned long long)e.seq);
  journal_close(j);
  cr_assert_eq(journal_verify_gaps(dir, NULL, on_gap, NULL, &n, NULL, err,
                                   sizeof err), JOURNAL_INTACT, "%s", err);
  cr_assert_eq(n, e.seq, "the last sequence");
  cr_assert_eq(gap_first, 211, "the gap starts after the last written: "
               "%llu", (unsigned long long)gap_first);
  cr_assert_geq(gap_last, handed, "it covers every number handed out");
  cr_assert_eq(gap_last + 1, e.seq);
  cr_assert_str_eq(gap_reason, JOURNAL_GAP_RESTART);
}

/* The directory comes back: the writer, trying every second, writes
   again on its own, first a gap record for the entries it lost. */
Test(journal, write_error_recovers_when_writable_again)
{
  struct journal *j = open_j(4096, JOURNAL_POLICY_STOP);
  struct journal_entry e;
  uint64_t first = 0, last = 0, seq = 0, lost;
  char cmd[128], path[256], *text, *nl;
  unsigned idx;
  int i, r = 0;

  submit_all(j, 0, 100);
  journal_close(j);
  idx = newest(NULL);
  j = open_j(4096, JOURNAL_POLICY_STOP);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_assert_eq(system(cmd), 0);
  for (i = 0; i < 5000 && r != -EIO; i++) {
    entry(&e, 100 + (unsigned)i);
    r = journal_submit(j, &e);
    if (r == -EAGAIN)
      test_sleep_ms(1);
  }
  cr_assert_eq(r, -EIO);
  journal_lost(j, &first, &last);
  /* the open file (unlinked) may take a few batches before a rotation
     fails */
  cr_assert_gt(first, 100, "lost from the first entry not durable");
  cr_assert_geq(last, first);
  lost = first;
  cr_assert_eq(mkdir(dir, 0700), 0);
  for (i = 0; i < 300 && journal_state(j, NULL) != JOURNAL_OK; i++)
    test_sleep_ms(10);
  cr_assert_eq(journal_state(j, NULL), JOURNAL_OK, "written again");
  journal_lost(j, &first, &seq);
  cr_assert_eq(first, 0);
  entry(&e, 0);
  cr_assert_eq(journal_submit(j, &e), 0);
  cr_assert_eq(e.seq, last + 1, "the sequence goes on after the gap");
  journal_close(j);
  /* the old files went with the directory: the new one begins with the
     header, then the gap */
  snprintf(path, sizeof path, "%s/journal-%06u.log", dir, idx + 1);
  text = test_read_file(path);
  nl = strchr(text, '\n');
  cr_assert_not_null(nl);
  snprintf(cmd, sizeof cmd, JOURNAL_GAP_TAG "\t%llu\t%llu\t"
           JOURNAL_GAP_WRITE_ERROR "\t", (unsigned long long)lost,
           (unsigned long long)last);
  cr_assert_eq(strncmp(nl + 1, cmd, strlen(cmd)), 0, "%s", text);
  free(text);
}

/* More bytes after the last line than any entry has is not a torn
   entry: the start is refused, naming the file and the byte range. */
Test(journal, garbage_tail_refused_with_its_range)
{
  char path[256], err[512] = "", want[400];
  struct journal *j = NULL;
  struct stat st;
  FILE *fp;
  int i;

  small_run(path, sizeof path);
  save(path);
  cr_assert_eq(stat(path, &st), 0);
  fp = fopen(path, "a");
  cr_assert_not_null(fp);
  for (i = 0; i < 3000; i++)
    fputc('x', fp);
  fclose(fp);
  cr_assert_lt(open_p(&j, 1u << 20, 0, err, sizeof err), 0);
  cr_assert_null(j);
  snprintf(want, sizeof want, "%s: 3000 bytes after its last line (from "
           "offset %lld)", path, (long long)st.st_size);
  cr_assert_not_null(strstr(err, want), "%s", err);
}

/* What the loop's held replies wait for: on_written is called after each
   batch, journal_progress() says every entry up to the last written is
   written; once the directory is gone the entries not written come back
   as one lost range, after the last written, that takes every number
   handed out after it, and is returned once. */
static unsigned wakes;

static void
count_wake(void *arg)
{
  (void)arg;
  __atomic_add_fetch(&wakes, 1, __ATOMIC_SEQ_CST);
}

Test(journal, progress_names_written_and_lost_entries)
{
  struct journal_range lost[JOURNAL_LOST_RANGES];
  struct journal_params p;
  struct journal_entry e;
  struct journal *j;
  uint64_t written = 0, handed = 0;
  char err[256] = "", cmd[128];
  unsigned n = 0, i;
  int r = 0;

  journal_params_default(&p);
  p.dir = dir;
  p.max_bytes = 4096;
  p.fsync_every = 8;
  p.on_written = count_wake;
  cr_assert_eq(journal_open(&j, &p, err, sizeof err), 0, "%s", err);
  submit_all(j, 0, 20);
  for (i = 0; i < 2000 && written != 20; i++) {
    test_sleep_ms(2);
    cr_assert_eq(journal_progress(j, &written, lost), 0, "nothing lost");
  }
  cr_assert_eq(written, 20);
  cr_assert_gt(__atomic_load_n(&wakes, __ATOMIC_SEQ_CST), 0);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_assert_eq(system(cmd), 0);
  for (i = 0; i < 5000 && r != -EIO; i++) {
    entry(&e, 20 + i);
    r = journal_submit(j, &e);
    if (r == 0)
      handed = e.seq;
    else if (r == -EAGAIN)
      test_sleep_ms(1);
  }
  cr_assert_eq(r, -EIO);
  n = journal_progress(j, &written, lost);
  cr_assert_eq(n, 1, "one lost range");
  cr_assert_eq(lost[0].first, written + 1, "lost from after the last "
               "written (%llu): %llu", (unsigned long long)written,
               (unsigned long long)lost[0].first);
  cr_assert_eq(lost[0].last, handed);
  cr_assert_eq(journal_progress(j, &written, lost), 0, "returned once");
  journal_close(j);
  mkdir(dir, 0700);
}
