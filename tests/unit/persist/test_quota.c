/* Upstream quotas: splitting, the per-minute window, the daily count and
   its persistence across a restart (and a crash: reserved at the first
   admission, never beyond the allowance). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <criterion/criterion.h>

#include "base/regfile.h"
#include "persist/atomicfile.h"
#include "persist/quota.h"
#include "testutil.h"

#define T0 1764547200         /* 2025-12-01 00:00:00 UTC */

static char dir[64];

static void
mkdir_tmp(void)
{
  test_tmpdir(dir, sizeof(dir), "qrs-quota");
}

static void
rm_tmp(void)
{
  test_tmpdir_remove(dir);
}

/* A FIFO at the state path would hold a blocking open for ever: the
   timeout turns that into a failure. */
TestSuite(quota, .init = mkdir_tmp, .fini = rm_tmp, .timeout = 10);

typedef int due_fn(struct quota *q, double now_mono, time_t now_real,
                   char *buf, size_t *ret_len, uint64_t *ret_value);

/* What the daemon does (upstream_channel.c, there on a worker thread)
   with the text due() hands over: write it and report.  Returns the
   write's result (1: nothing due). */
static int
write_text(struct quota *q, due_fn *due, double now_mono, time_t now_real)
{
  char buf[QUOTA_STATE_MAX];
  uint64_t value;
  size_t len;
  int r;

  if (!due(q, now_mono, now_real, buf, &len, &value))
    return 1;
  r = atomicfile_write(q->path, buf, len, 1);
  quota_persist_done(q, value, r);
  return r;
}

/* After an admission: the reservation that is due, if any. */
static int
write_due(struct quota *q, double now_mono, time_t now_real)
{
  return write_text(q, quota_persist_due, now_mono, now_real);
}

/* A clean shutdown: the exact count. */
static int
flush_exact(struct quota *q, double now_mono, time_t now_real)
{
  return write_text(q, quota_flush_due, now_mono, now_real);
}

/* The state file's text (the caller frees it). */
static char *
state_text(const char *name)
{
  char path[128], *text;

  snprintf(path, sizeof(path), "%s/quota-%s.json", dir, name);
  cr_assert_eq(regfile_read(path, 0, 4096, &text, NULL, NULL, 0), 0);
  return text;
}

/* A quota of p that is not saved anywhere, at T0. */
static void
open_unsaved(struct quota *q, const struct quota_params *p)
{
  char err[200];

  cr_assert_eq(quota_init(q, p, NULL, "x", 0.0, T0, err, sizeof(err)), 0,
               "%s", err);
}

Test(quota, splits_a_large_fetch_into_requests_of_the_maximum)
{
  struct quota_params p = { 35200, 0, 0 };
  struct quota q;
  size_t n;

  open_unsaved(&q, &p);
  cr_assert_eq(quota_chunk(&q, 10000, &n), 10000);
  cr_assert_eq(n, 1);
  cr_assert_eq(quota_chunk(&q, 35200, &n), 35200);
  cr_assert_eq(n, 1);
  cr_assert_eq(quota_chunk(&q, 35201, &n), 35200);
  cr_assert_eq(n, 2);
  cr_assert_eq(quota_chunk(&q, 100000, &n), 35200);
  cr_assert_eq(n, 3);
  quota_done(&q);
}

Test(quota, refuses_beyond_the_requests_per_minute_and_slides)
{
  struct quota_params p = { 1000, 5, 0 };
  struct quota q;
  int i;

  open_unsaved(&q, &p);
  for (i = 0; i < 5; i++)
    cr_assert_eq(quota_admit(&q, 10, 100.0 + i, T0), QUOTA_OK);
  cr_assert_eq(quota_admit(&q, 10, 105.0, T0), QUOTA_RPM);
  cr_assert_eq(q.refused_rpm, 1);
  cr_assert_eq(quota_minute_requests(&q, 105.0), 5);
  /* The first admission (t = 100) leaves the window at t = 160. */
  cr_assert_eq(quota_admit(&q, 10, 159.9, T0), QUOTA_RPM);
  cr_assert_eq(quota_admit(&q, 10, 160.0, T0), QUOTA_OK);
  /* A split fetch needs all its requests at once: 2500 B = 3 requests. */
  cr_assert_eq(quota_admit(&q, 2500, 162.0, T0), QUOTA_RPM);
  cr_assert_eq(quota_admit(&q, 2500, 163.0, T0), QUOTA_OK);
  cr_assert_eq(quota_minute_requests(&q, 163.0), 5);
  quota_done(&q);
}

/* A reload replaced the source: the new quota takes the old one's use,
   the newest requests of the minute as many as its limit holds, the
   day's larger count; the minute slides on from their times. */
Test(quota, a_replacement_takes_the_use)
{
  struct quota_params p5 = { 1000, 5, 0 }, p2 = { 1000, 2, 0 };
  struct quota a, b, c;
  int i;

  open_unsaved(&a, &p5);
  for (i = 0; i < 4; i++)
    cr_assert_eq(quota_admit(&a, 100, 100.0 + i, T0), QUOTA_OK);
  open_unsaved(&b, &p5);
  quota_take_use(&b, &a, 110.0);
  cr_assert_eq(quota_minute_requests(&b, 110.0), 4);
  cr_assert_eq(quota_day_bytes(&b, T0), 400);
  cr_assert_eq(quota_admit(&b, 100, 110.0, T0), QUOTA_OK);
  cr_assert_eq(quota_admit(&b, 100, 110.0, T0), QUOTA_RPM);
  /* the oldest taken (t = 100) leaves the window at t = 160 */
  cr_assert_eq(quota_admit(&b, 100, 160.0, T0), QUOTA_OK);
  /* a lower limit: the newest two (t = 102, 103) */
  open_unsaved(&c, &p2);
  c.day_bytes = 1000;            /* as read from a state file */
  quota_take_use(&c, &a, 110.0);
  cr_assert_eq(quota_minute_requests(&c, 110.0), 2);
  cr_assert_eq(quota_day_bytes(&c, T0), 1000, "the larger count");
  cr_assert_eq(quota_admit(&c, 100, 161.9, T0), QUOTA_RPM);
  cr_assert_eq(quota_admit(&c, 100, 162.0, T0), QUOTA_OK);
  quota_done(&a);
  quota_done(&b);
  quota_done(&c);
}

Test(quota, refuses_beyond_the_daily_bytes_and_rolls_over_at_midnight)
{
  struct quota_params p = { 0, 0, 1000 };
  struct quota q;

  open_unsaved(&q, &p);
  cr_assert_eq(quota_admit(&q, 600, 1, T0 + 10), QUOTA_OK);
  cr_assert_eq(quota_admit(&q, 400, 2, T0 + 20), QUOTA_OK);
  cr_assert_eq(quota_admit(&q, 1, 3, T0 + 30), QUOTA_DAY);
  cr_assert_eq(quota_admit(&q, 2000, 3, T0 + 30), QUOTA_DAY);
  cr_assert_eq(q.refused_day, 2);
  cr_assert_eq(quota_day_bytes(&q, T0 + 40), 1000);
  cr_assert_eq(quota_admit(&q, 1000, 4, T0 + 86400), QUOTA_OK);
  cr_assert_eq(quota_day_bytes(&q, T0 + 86401), 1000);
  quota_done(&q);
}

Test(quota, the_daily_count_survives_a_restart)
{
  struct quota_params p = { 0, 0, 10000000 };
  struct quota q;
  char err[200];
  char *text;

  cr_assert_eq(quota_init(&q, &p, dir, "qrng", 0.0, T0, err, sizeof(err)), 0);
  cr_assert_eq(quota_admit(&q, 12345, 1, T0 + 5), QUOTA_OK);
  cr_assert_eq(write_due(&q, 1, T0 + 5), 0);
  cr_assert_eq(q.persist_error, 0);
  /* Without a clean flush (a crash), the reservation is what survives:
     never less than the count, at most a block (1/256 of the limit)
     more. */
  quota_done(&q);
  cr_assert_eq(quota_init(&q, &p, dir, "qrng", 0.0, T0 + 60, err, sizeof(err)),
               0);
  cr_assert_eq(quota_day_bytes(&q, T0 + 60), 12345 + 10000000 / 256);
  /* A clean flush keeps the exact count. */
  q.day_bytes = 20000;
  cr_assert_eq(flush_exact(&q, 0.0, T0 + 60), 0);
  quota_done(&q);
  text = state_text("qrng");
  cr_assert_str_eq(text, "{\"day\":\"2025-12-01\",\"bytes_used\":20000,"
                   "\"minute\":[]}\n");
  free(text);
  cr_assert_eq(quota_init(&q, &p, dir, "qrng", 0.0, T0 + 120, err, sizeof(err)),
               0);
  cr_assert_eq(quota_day_bytes(&q, T0 + 120), 20000);
  quota_done(&q);

  /* The next day starts from zero. */
  cr_assert_eq(quota_init(&q, &p, dir, "qrng", 0.0, T0 + 86400, err,
                          sizeof(err)), 0);
  cr_assert_eq(quota_day_bytes(&q, T0 + 86400), 0);
  quota_done(&q);
}

/* Admissions never write the state file (an fsync must not hold up the
   daemon's loop), and neither does the start-up: the first reservation
   is handed out at the first admission, the next once less than half a
   block of the last one is left, one at a time, and counts only once
   its write is reported done. */
Test(quota, reservations_are_handed_to_the_caller_to_write)
{
  struct quota_params p = { 0, 0, 0 };
  struct quota q;
  char err[200], path[128], buf[QUOTA_STATE_MAX], *text;
  uint64_t value, v2;
  size_t len;

  snprintf(path, sizeof(path), "%s/quota-res.json", dir);
  cr_assert_eq(quota_init(&q, &p, dir, "res", 0.0, T0, err, sizeof(err)),
               0);
  /* Nothing written, nothing due before the first admission. */
  cr_assert_neq(access(path, F_OK), 0);
  cr_assert_eq(q.persisted, 0);
  cr_assert_eq(quota_persist_due(&q, 0.0, T0, buf, &len, &value), 0);
  cr_assert_eq(quota_admit(&q, 1, 1, T0), QUOTA_OK);
  cr_assert_eq(quota_persist_due(&q, 1.0, T0, buf, &len, &value), 1);
  cr_assert_eq(value, 1 + QUOTA_PERSIST_BLOCK);
  cr_assert_eq(atomicfile_write(path, buf, len, 1), 0);
  quota_persist_done(&q, value, 0);
  cr_assert_eq(quota_admit(&q, QUOTA_PERSIST_BLOCK / 2, 1, T0), QUOTA_OK);
  cr_assert_eq(quota_persist_due(&q, 1.0, T0, buf, &len, &value), 0);
  cr_assert_eq(quota_admit(&q, 1, 1, T0), QUOTA_OK);
  /* Past half a block: due, and the file is still the old reservation. */
  cr_assert_eq(quota_persist_due(&q, 1.0, T0, buf, &len, &value), 1);
  cr_assert_eq(value, QUOTA_PERSIST_BLOCK / 2 + 2 + QUOTA_PERSIST_BLOCK);
  text = state_text("res");
  cr_assert_not_null(strstr(text, "\"bytes_used\":1048577,"), "%s", text);
  free(text);
  /* One in flight at a time, even past the durable reservation. */
  cr_assert_eq(quota_admit(&q, QUOTA_PERSIST_BLOCK, 2, T0), QUOTA_OK);
  cr_assert_eq(quota_persist_due(&q, 2.0, T0, buf, &len, &v2), 0);
  /* The caller's write (here on this thread) and its report. */
  cr_assert_eq(atomicfile_write(path, buf, len, 1), 0);
  quota_persist_done(&q, value, 0);
  cr_assert_eq(q.persisted, value);
  cr_assert_eq(q.persist_error, 0);
  /* Now the next one (the count passed the last reservation). */
  cr_assert_eq(quota_persist_due(&q, 2.0, T0, buf, &len, &v2), 1);
  cr_assert_eq(v2, QUOTA_PERSIST_BLOCK / 2 + 2 + 2 * QUOTA_PERSIST_BLOCK);
  quota_persist_done(&q, v2, -EIO);
  cr_assert_eq(q.persist_error, -EIO);
  cr_assert_eq(q.persisted, value);
  quota_done(&q);
  /* A crash now resumes from the durable reservation. */
  cr_assert_eq(quota_init(&q, &p, dir, "res", 0.0, T0 + 5, err, sizeof(err)),
               0);
  cr_assert_eq(quota_day_bytes(&q, T0 + 5), value);
  quota_done(&q);
}

/* Once, a start-up that reserved a 1 MiB block before any use left a small
   quota "over" after one crash.  Now a run that fetched nothing costs nothing,
   and one that did costs at most a block of 1/256 of the day (19 bytes of
   5000), never beyond the allowance. */
Test(quota, a_crash_costs_a_small_quota_at_most_a_block)
{
  struct quota_params p = { 0, 0, 5000 };
  struct quota q;
  char err[200], path[128];
  int i;

  snprintf(path, sizeof(path), "%s/quota-small.json", dir);
  /* Three runs killed before any fetch. */
  for (i = 0; i < 3; i++) {
    cr_assert_eq(quota_init(&q, &p, dir, "small", 0.0, T0 + i, err,
                            sizeof(err)), 0, "%s", err);
    cr_assert_eq(quota_day_bytes(&q, T0 + i), 0);
    quota_done(&q);
  }
  cr_assert_neq(access(path, F_OK), 0);
  /* One killed after an 8-byte warm-up fetch. */
  cr_assert_eq(quota_init(&q, &p, dir, "small", 0.0, T0 + 5, err,
                          sizeof(err)), 0);
  cr_assert_eq(quota_admit(&q, 8, 1, T0 + 5), QUOTA_OK);
  cr_assert_eq(write_due(&q, 1, T0 + 5), 0);
  quota_done(&q);
  cr_assert_eq(quota_init(&q, &p, dir, "small", 0.0, T0 + 6, err,
                          sizeof(err)), 0);
  cr_assert_eq(quota_day_bytes(&q, T0 + 6), 8 + 5000 / 256);
  cr_assert_eq(quota_admit(&q, 4000, 1, T0 + 6), QUOTA_OK);
  quota_done(&q);
}

Test(quota, a_reservation_never_exceeds_the_allowance)
{
  struct quota_params p = { 0, 0, 5000 };
  struct quota q;
  char err[200], buf[QUOTA_STATE_MAX], *text;
  uint64_t value;
  size_t len;

  cr_assert_eq(quota_init(&q, &p, dir, "cap", 0.0, T0, err, sizeof(err)),
               0);
  cr_assert_eq(quota_admit(&q, 4990, 1, T0), QUOTA_OK);
  cr_assert_eq(quota_persist_due(&q, 1, T0, buf, &len, &value), 1);
  cr_assert_eq(value, 5000);
  cr_assert_eq(atomicfile_write(q.path, buf, len, 1), 0);
  quota_persist_done(&q, value, 0);
  /* The rest of the allowance is already reserved: nothing more due. */
  cr_assert_eq(quota_admit(&q, 10, 2, T0), QUOTA_OK);
  cr_assert_eq(quota_persist_due(&q, 2, T0, buf, &len, &value), 0);
  cr_assert_eq(quota_admit(&q, 1, 3, T0), QUOTA_DAY);
  text = state_text("cap");
  cr_assert_not_null(strstr(text, "\"bytes_used\":5000,"), "%s", text);
  free(text);
  quota_done(&q);
}

/* Once, a state file dated after today (the clock went back) was dropped,
   granting a fresh day.  Its count is kept (the larger). */
Test(quota, a_state_file_dated_in_the_future_keeps_its_count)
{
  struct quota_params p = { 0, 0, 5000 };
  struct quota q;
  char err[200], path[128];

  snprintf(path, sizeof(path), "%s/quota-fut.json", dir);
  cr_assert_eq(atomicfile_write(path, "{\"day\":\"2025-12-03\","
                                "\"bytes_used\":4900}", 39, 0), 0);
  cr_assert_eq(quota_init(&q, &p, dir, "fut", 0.0, T0, err, sizeof(err)),
               0, "%s", err);
  cr_assert_eq(quota_day_bytes(&q, T0), 4900);
  cr_assert_eq(quota_admit(&q, 101, 1, T0), QUOTA_DAY);
  quota_done(&q);
  /* A day of the past is forgotten, as before. */
  cr_assert_eq(atomicfile_write(path, "{\"day\":\"2025-11-30\","
                                "\"bytes_used\":4900}", 39, 0), 0);
  cr_assert_eq(quota_init(&q, &p, dir, "fut", 0.0, T0, err, sizeof(err)),
               0, "%s", err);
  cr_assert_eq(quota_day_bytes(&q, T0), 0);
  quota_done(&q);
  /* A day that is no date is no state file. */
  cr_assert_eq(atomicfile_write(path, "{\"day\":\"2025-02-30\","
                                "\"bytes_used\":4900}", 39, 0), 0);
  cr_assert_eq(quota_init(&q, &p, dir, "fut", 0.0, T0, err, sizeof(err)),
               -EINVAL);
  cr_assert_not_null(strstr(err, "not a quota state file"), "%s", err);
  quota_done(&q);
}

/* Once, a FIFO at the state path held the start-up in open() for ever.  A FIFO
   or a link is refused at once, the error naming the file and what it is. */
Test(quota, a_fifo_or_link_at_the_state_path_is_refused_at_once)
{
  struct quota_params p = { 0, 0, 5000 };
  struct quota q;
  char err[300], path[128];

  snprintf(path, sizeof(path), "%s/quota-odd.json", dir);
  cr_assert_eq(mkfifo(path, 0644), 0);
  cr_assert_eq(quota_init(&q, &p, dir, "odd", 0.0, T0, err, sizeof(err)),
               -EINVAL);
  cr_assert_eq(strncmp(err, path, strlen(path)), 0, "%s", err);
  cr_assert_not_null(strstr(err, ": a FIFO, not a regular file"), "%s", err);
  quota_done(&q);
  cr_assert_eq(unlink(path), 0);
  cr_assert_eq(symlink("/dev/null", path), 0);
  cr_assert_eq(quota_init(&q, &p, dir, "odd", 0.0, T0, err, sizeof(err)),
               -ELOOP);
  cr_assert_not_null(strstr(err, ": a symbolic link, not a regular file"),
                     "%s", err);
  quota_done(&q);
}

Test(quota, a_corrupt_state_file_is_a_clear_error)
{
  struct quota_params p = { 0, 0, 1000 };
  struct quota q;
  char err[300], path[128];

  snprintf(path, sizeof(path), "%s/quota-a_b.json", dir);
  cr_assert_eq(atomicfile_write(path, "{\"day\":", 7, 0), 0);
  cr_assert_eq(quota_init(&q, &p, dir, "a/b", 0.0, T0, err, sizeof(err)),
               -EINVAL);
  cr_assert_not_null(strstr(err, "quota-a_b.json"), "%s", err);
  cr_assert_not_null(strstr(err, "remove it"), "%s", err);
  quota_done(&q);
}

Test(quota, an_unwritable_state_dir_is_reported_but_admits)
{
  struct quota_params p = { 0, 0, 1000 };
  struct quota q;
  char err[200];

  cr_assert_eq(quota_init(&q, &p, "/nonexistent/qrs", "x", 0.0, T0, err,
                          sizeof(err)), 0);
  cr_assert_eq(quota_admit(&q, 10, 1, T0), QUOTA_OK);
  cr_assert_eq(write_due(&q, 1, T0), -ENOENT);
  cr_assert_eq(q.persist_error, -ENOENT);
  quota_done(&q);
}

Test(quota, refuses_a_rate_above_the_ceiling)
{
  struct quota_params p = { 0, QUOTA_MAX_RPM + 1, 0 };
  struct quota q;
  char err[200];

  cr_assert_eq(quota_init(&q, &p, NULL, "x", 0.0, T0, err, sizeof(err)),
               -EINVAL);
  quota_done(&q);
}

/* The per-minute window survives a restart (a new process: another
   monotonic clock): requests of the last 60 s still count, older ones
   do not, and an admission's second is rounded up, never down. */
Test(quota, the_minute_window_survives_a_restart)
{
  struct quota_params p = { 0, 5, 0 };
  struct quota q;
  char err[200];
  int i;

  cr_assert_eq(quota_init(&q, &p, dir, "m", 1000.0, T0, err, sizeof(err)),
               0);
  for (i = 0; i < 3; i++)
    cr_assert_eq(quota_admit(&q, 10, 1000.0 + i, T0 + i), QUOTA_OK);
  cr_assert_eq(flush_exact(&q, 1002.5, T0 + 2), 0);
  quota_done(&q);

  /* 10 s later, in a process whose monotonic clock reads 5. */
  cr_assert_eq(quota_init(&q, &p, dir, "m", 5.0, T0 + 12, err, sizeof(err)),
               0);
  cr_assert_eq(quota_minute_requests(&q, 5.0), 3);
  cr_assert_eq(quota_admit(&q, 10, 5.0, T0 + 12), QUOTA_OK);
  cr_assert_eq(quota_admit(&q, 10, 5.1, T0 + 12), QUOTA_OK);
  cr_assert_eq(quota_admit(&q, 10, 5.2, T0 + 12), QUOTA_RPM);
  /* The restored three leave the window ~60 s after they were made. */
  cr_assert_eq(quota_minute_requests(&q, 5.0 + 52.0), 2);
  quota_done(&q);

  /* Restarted over a minute after the last admissions (the file was
     rewritten by them, without a flush: a crash): nothing left. */
  cr_assert_eq(quota_init(&q, &p, dir, "m", 7.0, T0 + 75, err, sizeof(err)),
               0);
  cr_assert_eq(quota_minute_requests(&q, 7.0), 0);
  quota_done(&q);
}
