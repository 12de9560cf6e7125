/* Upstream quotas: splitting, the per-minute window, the daily count and
   its persistence across a restart. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

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

TestSuite(quota, .init = mkdir_tmp, .fini = rm_tmp);

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
  char path[128];
  char *text;

  cr_assert_eq(quota_init(&q, &p, dir, "qrng", 0.0, T0, err, sizeof(err)), 0);
  cr_assert_eq(quota_admit(&q, 12345, 1, T0 + 5), QUOTA_OK);
  cr_assert_eq(q.persist_error, 0);
  /* Without a clean flush (a crash), the reservation is what survives:
     never less than the count. */
  quota_done(&q);
  cr_assert_eq(quota_init(&q, &p, dir, "qrng", 0.0, T0 + 60, err, sizeof(err)),
               0);
  cr_assert_geq(quota_day_bytes(&q, T0 + 60), 12345);
  cr_assert_leq(quota_day_bytes(&q, T0 + 60), 12345 + QUOTA_PERSIST_BLOCK);
  /* A clean flush keeps the exact count. */
  q.day_bytes = 20000;
  cr_assert_eq(quota_flush(&q, 0.0, T0 + 60), 0);
  quota_done(&q);
  snprintf(path, sizeof(path), "%s/quota-qrng.json", dir);
  cr_assert_eq(atomicfile_read(path, 4096, &text, NULL), 0);
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
   daemon's loop): the next reservation is handed out once less than half
   a block of the last one is left, one at a time, and counts only once
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
  /* Start-up reserved one block. */
  cr_assert_eq(q.persisted, QUOTA_PERSIST_BLOCK);
  cr_assert_eq(quota_persist_due(&q, 0.0, T0, buf, &len, &value), 0);
  cr_assert_eq(quota_admit(&q, QUOTA_PERSIST_BLOCK / 2, 1, T0), QUOTA_OK);
  cr_assert_eq(quota_persist_due(&q, 1.0, T0, buf, &len, &value), 0);
  cr_assert_eq(quota_admit(&q, 1, 1, T0), QUOTA_OK);
  /* Past half a block: due, and the file is still the old reservation. */
  cr_assert_eq(quota_persist_due(&q, 1.0, T0, buf, &len, &value), 1);
  cr_assert_eq(value, QUOTA_PERSIST_BLOCK / 2 + 1 + QUOTA_PERSIST_BLOCK);
  cr_assert_eq(atomicfile_read(path, 4096, &text, NULL), 0);
  cr_assert_not_null(strstr(text, "\"bytes_used\":1048576,"), "%s", text);
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
  cr_assert_eq(v2, QUOTA_PERSIST_BLOCK / 2 + 1 + 2 * QUOTA_PERSIST_BLOCK);
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
  cr_assert_eq(quota_flush(&q, 1002.5, T0 + 2), 0);
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
