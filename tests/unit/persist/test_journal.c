/* The draw journal: entries written in order with their sequence, the
   SHA-256 chain recomputed line by line and across rotated files, the
   chain resumed by a second open, refused text fields, and a failing
   journal reported (never silent) with the policy applied. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <criterion/criterion.h>

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

/* Walk every file: headers carry the chain, every line's hash is the
   SHA-256 of its text before the hash, prev is the hash before,
   sequences grow by one.  Returns the entries seen; head = last hash. */
static unsigned
verify(char head[JOURNAL_HEX_LEN + 1], unsigned *ret_files)
{
  char path[256], line[JOURNAL_LINE_MAX + 8], prev[JOURNAL_HEX_LEN + 1];
  char hx[JOURNAL_HEX_LEN + 1], *f;
  uint8_t h[JOURNAL_HASH_LEN];
  unsigned idx, n = 0, k;
  unsigned long long seq;
  size_t len;
  FILE *fp;

  strcpy(prev, "0000000000000000000000000000000000000000000000000000000000000000");
  for (idx = 1;; idx++) {
    snprintf(path, sizeof path, "%s/journal-%06u.log", dir, idx);
    fp = fopen(path, "r");
    if (fp == NULL)
      break;
    cr_assert_not_null(fgets(line, sizeof line, fp));
    f = strstr(line, "prev=");
    cr_assert_not_null(f, "header of %s: %s", path, line);
    cr_assert_eq(strncmp(f + 5, prev, JOURNAL_HEX_LEN), 0,
                 "file %u does not continue the chain", idx);
    while (fgets(line, sizeof line, fp)) {
      len = strlen(line);
      cr_assert(len > JOURNAL_HEX_LEN + 1 && line[len - 1] == '\n');
      journal_line_hash(line, len - 1 - JOURNAL_HEX_LEN, h);
      journal_hex(h, JOURNAL_HASH_LEN, hx);
      cr_assert_eq(strncmp(line + len - 1 - JOURNAL_HEX_LEN, hx,
                           JOURNAL_HEX_LEN), 0, "hash of entry %u", n + 1);
      cr_assert_eq(strncmp(line + len - 2 - 2 * JOURNAL_HEX_LEN, prev,
                           JOURNAL_HEX_LEN), 0, "prev of entry %u", n + 1);
      cr_assert_eq(sscanf(line, "%llu", &seq), 1);
      cr_assert_eq(seq, (unsigned long long)n + 1);
      f = line;
      for (k = 0; k < 12; k++)
        f = strchr(f, '\t') + 1;
      cr_assert_eq(strtod(f, NULL), (n + 0.5) / 1e4, "u round-trips");
      memcpy(prev, hx, sizeof prev);
      n++;
    }
    fclose(fp);
  }
  memcpy(head, prev, JOURNAL_HEX_LEN + 1);
  if (ret_files)
    *ret_files = idx - 1;
  return n;
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
