/* Integration: the draw journal of a real qrsd.  100,000 draws served through
   raw frames: every reply carries its journal sequence, the journal on disk
   verifies (journal_verify(): every hash recomputed, across rotated files) and
   holds each reply's u at its sequence; a journal that cannot be written is
   never silent: under on_error: stop draws are refused, under label they are
   served marked unjournalled; a full disk (a small tmpfs) loses a logged
   range, recorded as a gap once the writer writes again on its own, and
   no draw is answered with a sequence whose entry is not on disk; a
   SIGKILL in the flush window answers no sequence number twice; what the
   gRPC compat endpoint serves is journalled too. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <unistd.h>
#include <sys/mount.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <criterion/criterion.h>
#include <json-c/json.h>
#include <qrs/error.h>

#include "harness.h"
#include "persist/journal.h"
#include "qrs_ipc.pb-c.h"

static struct daemon D;
static char jdir[160];

static void
stop_and_clean(void)
{
  daemon_cleanup(&D);
}

TestSuite(journal, .fini = stop_and_clean, .timeout = 240);

/* daemon_prepare() D, with an empty journal directory in it: jdir. */
static void
prepare_jdir(void)
{
  daemon_prepare(&D, NULL);
  snprintf(jdir, sizeof jdir, "%s/journal", D.dir);
  cr_assert_eq(mkdir(jdir, 0700), 0);
}

static void
run_q(uint64_t max_bytes, const char *on_error, unsigned queue)
{
  char yaml[512];

  prepare_jdir();
  snprintf(yaml, sizeof yaml, "journal: { dir: \"%s\", max_bytes: %llu, "
           "queue: %u, batch: 4096, on_error: %s }\n"
           "status_file: \"%s/status.json\"\n", jdir,
           (unsigned long long)max_bytes, queue, on_error, D.dir);
  daemon_write_conf(&D, yaml);
  daemon_start(&D, NULL);
}

static void
run(uint64_t max_bytes, const char *on_error)
{
  run_q(max_bytes, on_error, 65536);
}

/* Receive one DRAW_REPLY (or ERROR: its code in *ret_err). */
static QrsIpc__DrawReply *
recv_draw(int fd, int *ret_err)
{
  struct qrs_frame_hdr h;
  QrsIpc__DrawReply *r = NULL;
  QrsIpc__Error *e;
  uint8_t *p;

  cr_assert_eq(raw_recv(fd, &h, &p), 0, "EOF instead of a reply");
  *ret_err = 0;
  if (h.type == QRS_MSG_ERROR) {
    e = qrs_ipc__error__unpack(NULL, h.length, p);
    cr_assert_not_null(e);
    *ret_err = qrs__error_from_wire(e->code);
    qrs_ipc__error__free_unpacked(e, NULL);
  } else {
    cr_assert_eq(h.type, QRS_MSG_DRAW_REPLY);
    r = qrs_ipc__draw_reply__unpack(NULL, h.length, p);
    cr_assert_not_null(r);
  }
  free(p);
  return r;
}

/* The status file's "journal" object once it has state want (waits up
   to 5 s: the file is rewritten at most once a second, on changes): its
   seq, and its head in head. */
static uint64_t
status_journal(const char *want, char head[JOURNAL_HEX_LEN + 1])
{
  struct json_object *o = NULL, *jo, *v;
  uint64_t seq;
  char path[160], *text;
  int i;

  snprintf(path, sizeof path, "%s/status.json", D.dir);
  for (i = 0; i < 50; i++, usleep(100000)) {
    json_object_put(o);
    o = NULL;
    if (access(path, F_OK) != 0)
      continue;
    text = read_text_file(path, 1 << 20, NULL);
    o = json_tokener_parse(text);
    free(text);
    if (o && json_object_object_get_ex(o, "journal", &jo) &&
        json_object_object_get_ex(jo, "state", &v) &&
        strcmp(json_object_get_string(v), want) == 0)
      break;
  }
  cr_assert_not_null(o, "no status file");
  cr_assert(json_object_object_get_ex(o, "journal", &jo));
  cr_assert(json_object_object_get_ex(jo, "state", &v));
  cr_assert_str_eq(json_object_get_string(v), want);
  cr_assert(json_object_object_get_ex(jo, "head", &v));
  snprintf(head, JOURNAL_HEX_LEN + 1, "%s", json_object_get_string(v));
  cr_assert(json_object_object_get_ex(jo, "seq", &v));
  seq = (uint64_t)json_object_get_uint64(v);
  json_object_put(o);
  return seq;
}

#define N_DRAWS 100000
#define WINDOW 32
#define MAX_TAIL 50                 /* windows drawn until the status file
                                       shows a durable head */

static double *served_u;
static uint64_t status_seq;          /* the status file's journal seq */
static char status_entry_hash[JOURNAL_HEX_LEN + 1];  /* that entry's */

static int
check_entry(void *ctx, uint64_t seq, const char *line, size_t len)
{
  const char *f = line;
  unsigned k;

  (void)ctx;
  cr_assert_eq(strlen(line), len, "the line's length is given");
  cr_assert_leq(seq, N_DRAWS + MAX_TAIL * WINDOW);
  if (seq == status_seq)
    memcpy(status_entry_hash, line + len - JOURNAL_HEX_LEN,
           JOURNAL_HEX_LEN + 1);
  for (k = 0; k < 12; k++)
    f = strchr(f, '\t') + 1;
  cr_assert_eq(strtod(f, NULL), served_u[seq - 1],
               "entry %llu holds the u served", (unsigned long long)seq);
  return 0;
}

/* qrs-audit --json on jdir: exit status and a piece of its output. */
static void
audit_expect(int status, const char *needle)
{
  char out[4096], errb[4096];
  char *argv[] = { getenv("QRS_AUDIT_BIN"), "--json", "--journal", jdir,
                   NULL };
  int r;

  cr_assert_not_null(argv[0]);
  r = run_capture(argv, out, sizeof out, errb, sizeof errb);
  cr_assert_eq(r, status, "qrs-audit exit %d: %s %s", r, out, errb);
  cr_assert(strstr(out, needle) != NULL, "qrs-audit: %s", out);
}

/* One digit of the first entry's pid changed in place (the entry's hash
   no longer matches). */
static void
tamper_first_u(void)
{
  char path[256];
  FILE *fp;
  int c;

  snprintf(path, sizeof path, "%s/journal-000001.log", jdir);
  fp = fopen(path, "r+");
  cr_assert_not_null(fp);
  while ((c = fgetc(fp)) != EOF && c != '\n')
    ;
  /* the second line is "1\t<pid>\t...": the pid's first digit */
  cr_assert_eq(fseek(fp, 2, SEEK_CUR), 0);
  c = fgetc(fp);
  cr_assert_eq(fseek(fp, -1, SEEK_CUR), 0);
  fputc(c == '9' ? '8' : c + 1, fp);
  fclose(fp);
}

static uint64_t served;              /* draws served so far */
static unsigned busy_retries;        /* BUSY (queue full) answers retried */

/* One served reply: the next journal sequence, never unjournalled; its u
   goes to served_u. */
static void
take_reply(QrsIpc__DrawReply *r)
{
  cr_assert_eq(r->journal_seq, served + 1, "journal seq %llu after %llu",
               (unsigned long long)r->journal_seq,
               (unsigned long long)served);
  cr_assert_eq(r->unjournalled, 0);
  served_u[served++] = r->u;
  qrs_ipc__draw_reply__free_unpacked(r, NULL);
}

/* WINDOW pipelined draws, sequence numbers from i + 2: each reply carries
   the next journal sequence.  A draw answered BUSY (the journal's queue
   full: on_error stop refuses, as it must, when the writer falls behind a
   loaded machine's fsync) takes no sequence; it is drawn again after a
   pause of 2 ms, for up to 30 s.  Any other error fails. */
static void
draw_window(int fd, int i)
{
  QrsIpc__DrawReply *r;
  int k, code, nbusy = 0, tries;

  for (k = 0; k < WINDOW; k++)
    raw_send_draw(fd, (uint32_t)(i + k + 2), NULL, 16);
  for (k = 0; k < WINDOW; k++) {
    r = recv_draw(fd, &code);
    if (code == QRS_E_BUSY) {
      nbusy++;
      continue;
    }
    cr_assert_eq(code, 0, "draw %d refused: %d", i + k, code);
    take_reply(r);
  }
  for (; nbusy > 0; nbusy--) {
    for (tries = 0;; tries++) {
      cr_assert_lt(tries, 15000, "the journal's queue stayed full for 30 s");
      usleep(2000);
      busy_retries++;
      raw_send_draw(fd, (uint32_t)(i + 1), NULL, 16);
      r = recv_draw(fd, &code);
      if (code != QRS_E_BUSY)
        break;
    }
    cr_assert_eq(code, 0, "draw refused: %d", code);
    take_reply(r);
  }
}

Test(journal, hundred_thousand_draws_verify)
{
  char head[JOURNAL_HEX_LEN + 1], shead[JOURNAL_HEX_LEN + 1], err[512];
  char want[64];
  uint64_t entries = 0;
  int fd, i, tail, v;

  served_u = calloc(N_DRAWS + MAX_TAIL * WINDOW, sizeof *served_u);
  cr_assert_not_null(served_u);
  run(1u << 20, "stop");       /* 1 MiB files: several rotations */
  fd = raw_connect_hello(D.sock);
  for (i = 0; i < N_DRAWS; i += WINDOW)
    draw_window(fd, i);
  /* The head is durable flush_ms + an fsync after a draw, and the status
     file is rewritten on changes at most once a second: a few more
     draws until it shows a head past 0. */
  for (tail = 0;; tail++) {
    status_seq = status_journal("ok", shead);
    if (status_seq > 0)
      break;
    cr_assert_lt(tail, MAX_TAIL, "the status file's journal seq stays 0");
    usleep(100000);
    draw_window(fd, i);
    i += WINDOW;
  }
  close(fd);
  cr_assert_eq(daemon_stop(&D), 0);
  v = journal_verify(jdir, check_entry, NULL, &entries, head, err,
                     sizeof err);
  cr_assert_eq(v, JOURNAL_INTACT, "%s: %s", journal_fault_name(v), err);
  cr_assert_eq(entries, served);
  cr_assert_eq(served, (uint64_t)i);
  if (busy_retries)
    printf("journal: %u draws answered BUSY (queue full) drawn again\n",
           busy_retries);
  audit_expect(0, "\"verdict\":\"intact\"");
  snprintf(want, sizeof want, "\"entries\":%d", i);
  audit_expect(0, want);
  tamper_first_u();
  audit_expect(1, "\"verdict\":\"entry-edited\"");
  cr_assert_str_eq(shead, status_entry_hash, "the status file's head is "
                   "the hash of journal entry %llu",
                   (unsigned long long)status_seq);
  free(served_u);
}

/* A queue of one entry: pipelined draws overrun it, the ones it cannot
   take are answered BUSY with no sequence taken (on_error stop), drawn
   again they are served, and the journal holds each served draw once, in
   order, intact. */
Test(journal, queue_full_refuses_busy_and_loses_nothing)
{
  char head[JOURNAL_HEX_LEN + 1], err[512];
  uint64_t entries = 0;
  int i, v;

  served_u = calloc(N_DRAWS + MAX_TAIL * WINDOW, sizeof *served_u);
  cr_assert_not_null(served_u);
  run_q(1u << 20, "stop", 1);
  {
    int fd = raw_connect_hello(D.sock);

    for (i = 0; i < 16 * WINDOW; i += WINDOW)
      draw_window(fd, i);
    close(fd);
  }
  cr_assert_gt(busy_retries, 0, "a queue of 1 was never full in %d "
               "pipelined draws", i);
  cr_assert_eq(served, (uint64_t)i);
  cr_assert_eq(daemon_stop(&D), 0);
  cr_assert(daemon_log_contains(&D, "journal: queue full (1 entries); "
                                "draws are refused"));
  v = journal_verify(jdir, check_entry, NULL, &entries, head, err,
                     sizeof err);
  cr_assert_eq(v, JOURNAL_INTACT, "%s: %s", journal_fault_name(v), err);
  cr_assert_eq(entries, served);
  printf("journal: queue of 1: %u BUSY answers drawn again, %llu draws "
         "journalled in order\n", busy_retries, (unsigned long long)served);
  free(served_u);
}

/* The journal directory is removed under a running qrsd: the next
   rotation fails. */
static int
draws_until_error(int fd, int *ret_unjournalled)
{
  QrsIpc__DrawReply *r;
  int i, code = 0;
  char cmd[256];

  snprintf(cmd, sizeof cmd, "rm -rf %s", jdir);
  cr_assert_eq(system(cmd), 0);
  *ret_unjournalled = 0;
  for (i = 0; i < 200000; i++) {
    raw_send_draw(fd, (uint32_t)(i + 2), NULL, 16);
    r = recv_draw(fd, &code);
    if (code != 0)
      return code;
    if (r->unjournalled) {
      *ret_unjournalled = 1;
      qrs_ipc__draw_reply__free_unpacked(r, NULL);
      return 0;
    }
    qrs_ipc__draw_reply__free_unpacked(r, NULL);
  }
  return 0;
}

Test(journal, unwritable_stop_refuses)
{
  int fd, un, code;

  run(4096, "stop");
  fd = raw_connect_hello(D.sock);
  code = draws_until_error(fd, &un);
  cr_assert_eq(code, QRS_E_INTERNAL, "refused with %d", code);
  cr_assert_eq(un, 0);
  cr_assert(daemon_log_contains(&D, "No such file or directory; draws are "
                                "refused"));
  close(fd);
  daemon_stop(&D);
}

Test(journal, unwritable_label_serves_unjournalled)
{
  int fd, un, code;

  run(4096, "label");
  fd = raw_connect_hello(D.sock);
  code = draws_until_error(fd, &un);
  cr_assert_eq(code, 0);
  cr_assert_eq(un, 1, "served labelled unjournalled (log: %d errors)",
               daemon_log_count(&D, "journal: "));
  cr_assert(daemon_log_contains(&D, "served labelled \"unjournalled\""));
  {
    char head[JOURNAL_HEX_LEN + 1];
    QrsIpc__DrawReply *r;
    int i;

    /* draws for 1.5 s: the status file is rewritten as they are served */
    for (i = 0; i < 15; i++, usleep(100000)) {
      raw_send_draw(fd, (uint32_t)(100000 + i), NULL, 16);
      r = recv_draw(fd, &code);
      cr_assert_eq(code, 0);
      cr_assert_eq(r->unjournalled, 1);
      qrs_ipc__draw_reply__free_unpacked(r, NULL);
    }
    status_journal("write-error", head);
  }
  close(fd);
  daemon_stop(&D);
}

Test(journal, unusable_dir_stops_startup)
{
  char yaml[256], errb[4096];

  daemon_prepare(&D, NULL);
  snprintf(yaml, sizeof yaml, "journal: { dir: \"%s/missing\" }\n", D.dir);
  cr_assert_neq(daemon_try_start(&D, yaml, errb, sizeof errb), 0);
  cr_assert(strstr(errb, "missing") != NULL, "stderr: %s", errb);
}

/* The one gap record a test expects: its reason (a JOURNAL_GAP_*), and
   the range journal_verify_gaps() finds, through one_gap_cb(). */
struct one_gap {
  const char *reason;
  uint64_t first, last;
};

static int
one_gap_cb(void *ctx, uint64_t first, uint64_t last, const char *reason)
{
  struct one_gap *g = ctx;

  cr_assert_str_eq(reason, g->reason);
  cr_assert_eq(g->first, 0, "one gap");
  g->first = first;
  g->last = last;
  return 0;
}

/* The disk fills: a 64 KiB tmpfs in this test's own mount namespace
   (root), most of it taken by a filler file.  Pipelined draws under
   on_error: label run into the full disk; the entries lost are logged by
   their range, the draws whose entries were lost and those after are
   labelled unjournalled, and once the filler is removed the journal is
   written again on its own: a gap record names the lost range, no torn
   line stays, every reply that carries a sequence (none labelled) has its
   entry on disk, and qrsd starts again on the journal. */
static struct one_gap dfull_gap = { JOURNAL_GAP_WRITE_ERROR, 0, 0 };
static uint8_t dfull_on_disk[4096];

static int
dfull_entry_cb(void *ctx, uint64_t seq, const char *line, size_t len)
{
  (void)ctx;
  (void)line;
  (void)len;
  if (seq < sizeof dfull_on_disk)
    dfull_on_disk[seq] = 1;
  return 0;
}

static void
umount_and_clean(void)
{
  if (jdir[0])
    umount2(jdir, MNT_DETACH);
  daemon_cleanup(&D);
}

Test(journal, disk_full_recovers_and_records_the_loss,
     .fini = umount_and_clean)
{
  char yaml[512], filler[256], err[512], head[JOURNAL_HEX_LEN + 1];
  static uint64_t seqs[800];
  QrsIpc__DrawReply *r;
  uint64_t n = 0;
  int fd, i, k, code, un = 0, journalled = 0;
  FILE *fp;

  if (geteuid() != 0)
    cr_skip_test("needs root (a tmpfs in a mount namespace of its own)");
  prepare_jdir();
  cr_assert_eq(unshare(CLONE_NEWNS), 0, "unshare: %s", strerror(errno));
  cr_assert_eq(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), 0);
  cr_assert_eq(mount("tmpfs", jdir, "tmpfs", MS_NOSUID | MS_NODEV,
                     "size=64k,mode=0700"), 0, "%s", strerror(errno));
  snprintf(filler, sizeof filler, "%s/filler", jdir);
  fp = fopen(filler, "w");
  cr_assert_not_null(fp);
  for (i = 0; i < 40 * 1024; i++)
    fputc('x', fp);
  cr_assert_eq(fclose(fp), 0);
  snprintf(yaml, sizeof yaml, "journal: { dir: \"%s\", on_error: label }\n",
           jdir);
  daemon_write_conf(&D, yaml);
  daemon_start(&D, NULL);

  fd = raw_connect_hello(D.sock);
  for (i = 0; i < 400; i += 20) {
    for (k = 0; k < 20; k++)
      raw_send_draw(fd, (uint32_t)(i + k + 2), NULL, 16);
    for (k = 0; k < 20; k++) {
      r = recv_draw(fd, &code);
      cr_assert_eq(code, 0, "draw %d: %d", i + k, code);
      if (r->unjournalled)
        un++;
      else
        seqs[journalled++] = r->journal_seq;
      qrs_ipc__draw_reply__free_unpacked(r, NULL);
    }
  }
  cr_assert(daemon_log_contains(&D, "No space left on device; draws are "
                                "served labelled"), "the failure is logged");
  cr_assert(daemon_log_contains(&D, "are lost (served, not written)"),
            "the entries lost are named");
  /* the draws whose entries were written carry a sequence; those after
     the writer met the full disk are labelled */
  for (i = 0; i < 200 && un == 0; i++) {
    raw_send_draw(fd, (uint32_t)(500 + i), NULL, 16);
    r = recv_draw(fd, &code);
    cr_assert_eq(code, 0);
    if (r->unjournalled)
      un++;
    else if (journalled < 780)
      seqs[journalled++] = r->journal_seq;
    qrs_ipc__draw_reply__free_unpacked(r, NULL);
    usleep(10000);
  }
  cr_assert_gt(un, 0, "draws after the failure are labelled");

  cr_assert_eq(unlink(filler), 0);
  cr_assert(daemon_log_contains(&D, "written again; the lost entries"),
            "the journal recovers on its own");
  for (i = 0; i < 20; i++) {
    raw_send_draw(fd, (uint32_t)(1000 + i), NULL, 16);
    r = recv_draw(fd, &code);
    cr_assert_eq(code, 0);
    cr_assert_eq(r->unjournalled, 0, "journalled again");
    cr_assert_lt(journalled, 800);
    seqs[journalled++] = r->journal_seq;
    qrs_ipc__draw_reply__free_unpacked(r, NULL);
  }
  close(fd);
  daemon_stop(&D);

  cr_assert_eq(journal_verify_gaps(jdir, dfull_entry_cb, one_gap_cb,
                                   &dfull_gap, &n, head, err, sizeof err),
               JOURNAL_INTACT, "%s", err);
  cr_assert_gt(dfull_gap.first, 0, "a gap record names the loss");
  for (i = 0; i < journalled; i++)
    cr_assert(seqs[i] > 0 && seqs[i] < sizeof dfull_on_disk &&
              dfull_on_disk[seqs[i]], "draw answered with seq %llu, which "
              "is no entry on disk (the gap is %llu..%llu)",
              (unsigned long long)seqs[i],
              (unsigned long long)dfull_gap.first,
              (unsigned long long)dfull_gap.last);

  /* and qrsd starts on it again */
  close(D.notify_fd);
  D.notify_fd = -1;
  daemon_start(&D, NULL);
  fd = raw_connect_hello(D.sock);
  raw_send_draw(fd, 2, NULL, 16);
  r = recv_draw(fd, &code);
  cr_assert_eq(code, 0);
  cr_assert_gt(r->journal_seq, n);
  qrs_ipc__draw_reply__free_unpacked(r, NULL);
  close(fd);
  daemon_stop(&D);
}

/* SIGKILL inside the flush window (a second: the draws answered are not
   durable yet): after the restart no sequence number answered before is
   answered again, and a gap record covers every number that may have
   been. */
static struct one_gap kill_gap = { JOURNAL_GAP_RESTART, 0, 0 };

Test(journal, sigkill_in_flush_window_never_repeats_a_sequence)
{
  char yaml[512], err[512];
  QrsIpc__DrawReply *r;
  uint64_t max = 0, n = 0;
  int fd, i, k, code, st;

  prepare_jdir();
  snprintf(yaml, sizeof yaml, "journal: { dir: \"%s\", flush_ms: 1000, "
           "batch: 65536, queue: 65536 }\n", jdir);
  daemon_write_conf(&D, yaml);
  daemon_start(&D, NULL);
  fd = raw_connect_hello(D.sock);
  for (i = 0; i < 300; i += 30) {
    for (k = 0; k < 30; k++)
      raw_send_draw(fd, (uint32_t)(i + k + 2), NULL, 16);
    for (k = 0; k < 30; k++) {
      r = recv_draw(fd, &code);
      cr_assert_eq(code, 0);
      cr_assert_gt(r->journal_seq, max);
      max = r->journal_seq;
      qrs_ipc__draw_reply__free_unpacked(r, NULL);
    }
  }
  kill(D.pid, SIGKILL);
  cr_assert_eq(waitpid(D.pid, &st, 0), D.pid);
  D.pid = -1;
  close(fd);
  close(D.notify_fd);
  D.notify_fd = -1;

  daemon_start(&D, NULL);
  cr_assert(daemon_log_contains(&D, "qrsd stopped without closing the "
                                "journal"));
  fd = raw_connect_hello(D.sock);
  raw_send_draw(fd, 1000, NULL, 16);
  r = recv_draw(fd, &code);
  cr_assert_eq(code, 0);
  cr_assert_gt(r->journal_seq, max, "seq %llu answered twice",
               (unsigned long long)r->journal_seq);
  qrs_ipc__draw_reply__free_unpacked(r, NULL);
  close(fd);
  cr_assert_eq(daemon_stop(&D), 0);
  cr_assert_eq(journal_verify_gaps(jdir, NULL, one_gap_cb, &kill_gap, &n,
                                   NULL, err, sizeof err), JOURNAL_INTACT,
               "%s", err);
  cr_assert_gt(kill_gap.first, 0, "the crash window is recorded");
  cr_assert_geq(kill_gap.last, max, "every number answered is in the "
                "journal or in the gap");
  /* qrs-audit walks the gap record: intact, the gap counted */
  audit_expect(0, "\"verdict\":\"intact\"");
  audit_expect(0, "\"gaps\":1,");
}

/* Two sources whose 63-character names differ in the last character
   stay two names in the journal. */
static char long_names[2][64];
static int long_matched;

static int
long_name_cb(void *ctx, uint64_t seq, const char *line, size_t len)
{
  const char *f = line;
  int k;

  (void)ctx;
  (void)len;
  for (k = 0; k < 3; k++)
    f = strchr(f, '\t') + 1;
  cr_assert_leq(seq, 2);
  cr_assert_eq(strncmp(f, long_names[seq - 1], 63), 0, "entry %llu: %.70s",
               (unsigned long long)seq, f);
  cr_assert_eq(f[63], '\t');
  long_matched++;
  return 0;
}

Test(journal, source_names_of_63_characters)
{
  char yaml[1024], err[512];
  QrsIpc__DrawReply *r;
  int fd, i, code;

  for (i = 0; i < 2; i++) {
    memset(long_names[i], 'q', 62);
    long_names[i][62] = (char)('a' + i);
    long_names[i][63] = '\0';
  }
  prepare_jdir();
  snprintf(yaml, sizeof yaml, "journal: { dir: \"%s\" }\n"
           "default_source: %s\nsources:\n"
           "  %s: { type: system }\n  %s: { type: system }\n", jdir,
           long_names[0], long_names[0], long_names[1]);
  daemon_write_conf(&D, yaml);
  daemon_start(&D, NULL);
  fd = raw_connect_hello(D.sock);
  for (i = 0; i < 2; i++) {
    raw_send_draw(fd, (uint32_t)(i + 2), long_names[i], 16);
    r = recv_draw(fd, &code);
    cr_assert_eq(code, 0);
    cr_assert_str_eq(r->served_by, long_names[i]);
    qrs_ipc__draw_reply__free_unpacked(r, NULL);
  }
  close(fd);
  cr_assert_eq(daemon_stop(&D), 0);
  cr_assert_eq(journal_verify(jdir, long_name_cb, NULL, NULL, NULL, err,
                              sizeof err), JOURNAL_INTACT, "%s", err);
  cr_assert_eq(long_matched, 2);
}

/* A FIFO where the journal file should be refuses the start at once,
   naming it; stray names beside the journal files do not stop it. */
Test(journal, fifo_refuses_start, .timeout = 30)
{
  char yaml[512], errb[4096], path[256];

  prepare_jdir();
  snprintf(path, sizeof path, "%s/journal-000001.log", jdir);
  cr_assert_eq(mkfifo(path, 0600), 0);
  snprintf(yaml, sizeof yaml, "journal: { dir: \"%s\" }\n", jdir);
  cr_assert_neq(daemon_try_start(&D, yaml, errb, sizeof errb), 0);
  cr_assert_not_null(strstr(errb, path), "stderr: %s", errb);
  cr_assert_not_null(strstr(errb, "not a regular file"), "stderr: %s", errb);
}

Test(journal, stray_names_do_not_stop_start)
{
  char yaml[512], path[256];
  static const char *const stray[] = { "journal-000007",
                                       "journal-000001.log.gz" };
  QrsIpc__DrawReply *r;
  int fd, code;
  size_t i;

  prepare_jdir();
  for (i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "%s/%s", jdir, stray[i]);
    write_text_file(path, "x\n");
  }
  snprintf(yaml, sizeof yaml, "journal: { dir: \"%s\" }\n", jdir);
  daemon_write_conf(&D, yaml);
  daemon_start(&D, NULL);
  cr_assert(daemon_log_contains(&D, "journal-000007 is not a journal file"));
  fd = raw_connect_hello(D.sock);
  raw_send_draw(fd, 2, NULL, 16);
  r = recv_draw(fd, &code);
  cr_assert_eq(code, 0);
  cr_assert_eq(r->journal_seq, 1);
  qrs_ipc__draw_reply__free_unpacked(r, NULL);
  close(fd);
  cr_assert_eq(daemon_stop(&D), 0);
}

/* What a crash leaves at the end of the newest file does not keep qrsd
   from starting: a torn last line is set aside in <file>.torn, a file
   holding only its header (a rotation, then a stop) is resumed. */
static uint64_t
draw_one(void)
{
  QrsIpc__DrawReply *r;
  uint64_t seq;
  int fd, code;

  fd = raw_connect_hello(D.sock);
  raw_send_draw(fd, 2, NULL, 16);
  r = recv_draw(fd, &code);
  cr_assert_eq(code, 0);
  cr_assert_eq(r->unjournalled, 0);
  seq = r->journal_seq;
  qrs_ipc__draw_reply__free_unpacked(r, NULL);
  close(fd);
  return seq;
}

static unsigned
newest_file(char *path, size_t len)
{
  unsigned idx;

  for (idx = 1;; idx++) {
    snprintf(path, len, "%s/journal-%06u.log", jdir, idx);
    if (access(path, F_OK) != 0)
      break;
  }
  snprintf(path, len, "%s/journal-%06u.log", jdir, idx - 1);
  return idx - 1;
}

Test(journal, torn_and_header_only_files_restart)
{
  char path[256], aside[300], hdr[256], head[JOURNAL_HEX_LEN + 1];
  char err[512];
  uint64_t seq = 0, n;
  unsigned idx;
  int i;
  FILE *fp;

  run(4096, "stop");
  for (i = 0; i < 40; i++)
    cr_assert_eq(draw_one(), ++seq);
  cr_assert_eq(daemon_stop(&D), 0);
  close(D.notify_fd);
  D.notify_fd = -1;

  newest_file(path, sizeof path);
  fp = fopen(path, "a");
  cr_assert_not_null(fp);
  fputs("41\t1234\t0\tsys", fp);
  fclose(fp);
  daemon_start(&D, NULL);
  cr_assert(daemon_log_contains(&D, "its last line was torn"));
  cr_assert_eq(draw_one(), ++seq);
  snprintf(aside, sizeof aside, "%s.torn", path);
  cr_assert_eq(access(aside, F_OK), 0, "the torn bytes are kept");
  cr_assert_eq(daemon_stop(&D), 0);
  close(D.notify_fd);
  D.notify_fd = -1;

  cr_assert_eq(journal_verify(jdir, NULL, NULL, &n, head, err, sizeof err),
               JOURNAL_INTACT, "%s", err);
  idx = newest_file(path, sizeof path);
  snprintf(path, sizeof path, "%s/journal-%06u.log", jdir, idx + 1);
  snprintf(hdr, sizeof hdr, "# qrs-journal 1 file=%u prev=%s\n", idx + 1,
           head);
  write_text_file(path, hdr);
  daemon_start(&D, NULL);
  cr_assert_eq(draw_one(), ++seq);
  cr_assert_eq(daemon_stop(&D), 0);
  cr_assert_eq(journal_verify(jdir, NULL, NULL, &n, NULL, err, sizeof err),
               JOURNAL_INTACT, "%s", err);
  cr_assert_eq(n, seq);
}

/* The gRPC compat endpoint journals what it serves: qrsd serves its
   system source on grpc_compat and draws from it itself through a grpc
   source (unary GetEntropy); Python grpc calls GetEntropy, StreamEntropy,
   GetDraw and StreamDraws.  Each draw and byte block served over the
   endpoint is an entry (no local process, ",via=grpc"); a draw from the
   grpc source has its local entry, and the byte block the endpoint
   served for it has an entry with the same bytes' hash; the journal
   verifies and qrs-audit finds it intact. */
static unsigned via_bytes, via_draws, local_c1;
static char c1_sha[32][JOURNAL_HEX_LEN + 1], bytes_sha[64][JOURNAL_HEX_LEN + 1];

static int
compat_entry_cb(void *ctx, uint64_t seq, const char *line, size_t len)
{
  const char *f[16], *p = line;
  int k;

  (void)ctx;
  (void)seq;
  (void)len;
  for (k = 0; k < 16 && p; k++) {
    f[k] = p;
    p = strchr(p, '\t');
    if (p)
      p++;
  }
  cr_assert_eq(k, 16, "an entry has 16 fields: %s", line);
  if (strstr(line, ",via=grpc\t") != NULL) {
    cr_assert_eq(strncmp(f[1], "0\t4294967295\tsystem\t", 20), 0,
                 "no local process, source system: %s", line);
    if (strncmp(f[4], "bytes\t", 6) == 0) {
      cr_assert_eq(strncmp(f[12], "nan\t", 4), 0, "%s", line);
      if (via_bytes < 64)
        snprintf(bytes_sha[via_bytes], JOURNAL_HEX_LEN + 1, "%s", f[11]);
      via_bytes++;
    } else {
      cr_assert_eq(strncmp(f[4], "zscore_mean\t", 12), 0, "%s", line);
      cr_assert(strtod(f[12], NULL) > 0 && strtod(f[12], NULL) < 1);
      via_draws++;
    }
  } else if (strncmp(f[3], "c1\t", 3) == 0 && local_c1 < 32) {
    snprintf(c1_sha[local_c1++], JOURNAL_HEX_LEN + 1, "%s", f[11]);
  }
  return 0;
}

Test(journal, compat_draws_and_byte_blocks_are_journalled)
{
  char yaml[1024], cmd[512], err[512];
  QrsIpc__DrawReply *r;
  uint64_t n = 0;
  unsigned i, k;
  int fd, code, found;

  prepare_jdir();
  snprintf(yaml, sizeof yaml, "state_dir: %s\njournal: { dir: \"%s\" }\n"
           "grpc_compat: { listen: \"unix:%s/compat.sock\", source: system }\n"
           "sources:\n"
           "  system: { type: system }\n"
           "  c1: { type: grpc, target: \"unix:%s/compat.sock\", "
           "mode: unary }\n", D.dir, jdir, D.dir, D.dir);
  daemon_write_conf(&D, yaml);
  daemon_start(&D, NULL);
  fd = raw_connect_hello(D.sock);
  for (i = 0; i < 4; i++) {
    raw_send_draw(fd, i + 2, "c1", 64);
    r = recv_draw(fd, &code);
    cr_assert_eq(code, 0, "draw %u from c1: %d", i, code);
    cr_assert_str_eq(r->served_by, "c1");
    cr_assert_gt(r->journal_seq, 0);
    qrs_ipc__draw_reply__free_unpacked(r, NULL);
  }
  close(fd);
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/integration/grpc_client.py"
           " unix:%s/compat.sock", QRS_TEST_SOURCE_DIR, D.dir);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
  cr_assert_eq(daemon_stop(&D), 0);

  cr_assert_eq(journal_verify(jdir, compat_entry_cb, NULL, &n, NULL, err,
                              sizeof err), JOURNAL_INTACT, "%s", err);
  cr_assert_eq(local_c1, 4, "the four draws from c1");
  /* the c1 draws' byte blocks, and GetEntropy, StreamEntropy */
  cr_assert_geq(via_bytes, 6, "byte blocks journalled: %u", via_bytes);
  cr_assert_geq(via_draws, 2, "GetDraw, StreamDraws journalled: %u",
                via_draws);
  for (i = 0; i < local_c1; i++) {
    for (found = 0, k = 0; k < via_bytes && k < 64 && !found; k++)
      found = strcmp(c1_sha[i], bytes_sha[k]) == 0;
    cr_assert(found, "the bytes of c1's draw %u (sha %s) are in no entry "
              "of the endpoint", i, c1_sha[i]);
  }
  audit_expect(0, "\"verdict\":\"intact\"");
}
