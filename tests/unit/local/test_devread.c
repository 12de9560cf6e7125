/* Device reads against real file descriptors: a FIFO and a pty that the
   test writes, and a regular file. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "local/devread.h"
#include "testutil.h"
#include "timestamp.h"

static struct test_fifo F;

/* The monotonic clock, unsigned as devread's deadlines. */
static uint64_t
now_ns(void)
{
  return (uint64_t)mono_now_ns();
}

static uint64_t
in_ms(unsigned ms)
{
  return now_ns() + (uint64_t)ms * 1000000u;
}

static void
setup(void)
{
  test_fifo_init(&F, "qrs-devread");
}

static void
teardown(void)
{
  char path[160];

  snprintf(path, sizeof(path), "%s/file", F.dir);
  unlink(path);
  test_fifo_done(&F);
}

TestSuite(devread, .init = setup, .fini = teardown, .timeout = 60);

Test(devread, fifo_short_writes_assemble_one_read)
{
  struct devread d;
  uint8_t want[64], got[64];
  char why[256];
  size_t i;
  int w, fl;

  w = test_fifo_writer(&F);
  for (i = 0; i < sizeof(want); i++)
    want[i] = (uint8_t)(i * 7 + 1);
  cr_assert_eq(devread_init(&d, F.path, 0, 0, 0), 0);
  /* 64 bytes arrive in writes of 5, so the reader sees short reads. */
  for (i = 0; i < sizeof(want); i += 5)
    cr_assert_gt(write(w, want + i, sizeof(want) - i < 5 ? sizeof(want) - i
                                                          : 5), 0);
  cr_assert_eq(devread_read(&d, got, sizeof(got), in_ms(5000), why,
                            sizeof(why)), 0, "%s", why);
  cr_assert(memcmp(want, got, sizeof(got)) == 0);
  cr_assert_eq(d.kind, DEVREAD_FIFO);
  fl = fcntl(d.fd, F_GETFD);
  cr_assert(fl >= 0 && (fl & FD_CLOEXEC), "the device fd is O_CLOEXEC");
  cr_assert_eq(d.reads, 1);
  cr_assert_eq(d.bytes, 64);
  cr_assert_gt(capacity_rate(&d.cap), 0.0);
  close(w);
  devread_done(&d);
}

struct dribble {
  int fd;
  unsigned every_ms;
  size_t chunk;
  atomic_int stop;
};

static void *
dribble_run(void *arg)
{
  struct dribble *dr = arg;
  uint8_t b[64];
  unsigned k = 0;

  while (!atomic_load(&dr->stop)) {
    memset(b, (int)(k++ & 0xff), sizeof(b));
    if (write(dr->fd, b, dr->chunk) < 0)
      break;
    test_sleep_ms(dr->every_ms);
  }
  return NULL;
}

Test(devread, slow_writer_past_the_deadline_is_a_typed_timeout)
{
  struct devread d;
  struct dribble dr;
  pthread_t th;
  uint8_t got[1000];
  char why[256];
  uint64_t t0;
  int r;

  dr.fd = test_fifo_writer(&F);
  dr.every_ms = 50;
  dr.chunk = 1;
  atomic_init(&dr.stop, 0);
  cr_assert_eq(pthread_create(&th, NULL, dribble_run, &dr), 0);
  cr_assert_eq(devread_init(&d, F.path, 0, 0, 0), 0);

  /* 100 bytes at one per 50 ms cannot arrive in 200 ms. */
  t0 = now_ns();
  r = devread_read(&d, got, 100, t0 + 200000000u, why, sizeof(why));
  cr_assert_eq(r, -ETIMEDOUT, "%d %s", r, why);
  cr_assert(strstr(why, "too slow") != NULL, "%s", why);
  cr_assert_geq(d.fd, 0, "a slow device stays open");

  /* A small read succeeds and measures the rate (about 20 B/s) ... */
  r = devread_read(&d, got, 3, in_ms(10000), why, sizeof(why));
  cr_assert_eq(r, 0, "%s", why);
  cr_assert_lt(capacity_rate(&d.cap), 1000.0);

  /* ... after which a read that cannot make its deadline is refused at
     once instead of stalling for 3 s. */
  t0 = now_ns();
  r = devread_read(&d, got, 1000, t0 + 3000000000u, why, sizeof(why));
  cr_assert_eq(r, -EAGAIN, "%d %s", r, why);
  cr_assert(strstr(why, "refused") != NULL, "%s", why);
  cr_assert_lt(now_ns() - t0, 2000000000u, "refused without waiting");
  cr_assert_eq(d.cap.refused, 1);

  atomic_store(&dr.stop, 1);
  pthread_join(th, NULL);
  close(dr.fd);
  devread_done(&d);
}

Test(devread, eof_and_vanished_writer_then_reopen)
{
  struct devread d;
  uint8_t got[32];
  char why[256];
  uint64_t t0;
  int w, r;

  w = test_fifo_writer(&F);
  cr_assert_eq(devread_init(&d, F.path, 0, 0, 0), 0);

  /* The writer sends 10 bytes and goes away: EOF before 32 bytes. */
  cr_assert_eq(write(w, "0123456789", 10), 10);
  close(w);
  r = devread_read(&d, got, 32, in_ms(5000), why, sizeof(why));
  cr_assert_eq(r, -ENODEV, "%d %s", r, why);
  cr_assert(strstr(why, "writer went away") != NULL, "%s", why);
  cr_assert_lt(d.fd, 0, "closed after EOF");

  /* During the backoff reads fail at once. */
  t0 = now_ns();
  r = devread_read(&d, got, 4, in_ms(5000), why, sizeof(why));
  cr_assert_eq(r, -ENODEV, "%d %s", r, why);
  cr_assert(strstr(why, "next open in") != NULL, "%s", why);
  cr_assert_lt(now_ns() - t0, 1000000000u);

  /* The writer returns; after the backoff the FIFO is opened again. */
  w = test_fifo_writer(&F);
  test_sleep_ms(DEVREAD_BACKOFF_MIN_MS + 50);
  cr_assert_eq(write(w, "abcd", 4), 4);
  r = devread_read(&d, got, 4, in_ms(5000), why, sizeof(why));
  cr_assert_eq(r, 0, "%s", why);
  cr_assert(memcmp(got, "abcd", 4) == 0);
  cr_assert_eq(d.reopens, 1);
  cr_assert_eq(d.backoff_ms, 0, "a good read resets the backoff");
  close(w);
  devread_done(&d);
}

struct later {
  int fd;
  const char *text;
};

static void *
later_run(void *arg)
{
  struct later *l = arg;

  test_sleep_ms(100);
  if (write(l->fd, l->text, strlen(l->text)) < 0)
    return NULL;
  return NULL;
}

Test(devread, drain_discards_bytes_written_before_the_read)
{
  struct devread d;
  struct later l;
  pthread_t th;
  uint8_t got[5];
  char why[256];
  int w;

  w = test_fifo_writer(&F);
  cr_assert_eq(devread_init(&d, F.path, 0, 0, 1), 0);
  /* The first read opens the FIFO (nothing comes). */
  cr_assert_eq(devread_read(&d, got, 4, in_ms(50), why, sizeof(why)),
               -ETIMEDOUT, "%s", why);
  /* Stale bytes, written before the next request: never served. */
  cr_assert_eq(write(w, "stale", 5), 5);
  cr_assert_eq(devread_read(&d, got, 4, in_ms(200), why, sizeof(why)),
               -ETIMEDOUT, "%s", why);
  cr_assert_eq(d.drained, 5);
  /* Bytes written after the request arrived are. */
  cr_assert_eq(write(w, "stale", 5), 5);
  l.fd = w;
  l.text = "fresh";
  cr_assert_eq(pthread_create(&th, NULL, later_run, &l), 0);
  cr_assert_eq(devread_read(&d, got, 5, in_ms(5000), why, sizeof(why)), 0,
               "%s", why);
  pthread_join(th, NULL);
  cr_assert(memcmp(got, "fresh", 5) == 0);
  cr_assert_eq(d.drained, 10);
  close(w);
  devread_done(&d);
}

Test(devread, pty_reads_and_removal)
{
  struct devread d;
  struct termios t;
  uint8_t got[6];
  char why[256], *name;
  int m, s, r;

  m = posix_openpt(O_RDWR | O_NOCTTY);
  cr_assert_geq(m, 0);
  cr_assert_eq(grantpt(m), 0);
  cr_assert_eq(unlockpt(m), 0);
  name = ptsname(m);
  cr_assert_not_null(name);
  /* Raw mode, so that bytes pass unchanged (no line editing, no echo). */
  s = open(name, O_RDWR | O_NOCTTY);
  cr_assert_geq(s, 0);
  cr_assert_eq(tcgetattr(s, &t), 0);
  cfmakeraw(&t);
  cr_assert_eq(tcsetattr(s, TCSANOW, &t), 0);

  cr_assert_eq(devread_init(&d, name, 2, 0, 0), 0);
  cr_assert_eq(write(m, "\x00\xffqr\n\x03", 6), 6);
  r = devread_read(&d, got, 6, in_ms(5000), why, sizeof(why));
  cr_assert_eq(r, 0, "%s", why);
  cr_assert(memcmp(got, "\x00\xffqr\n\x03", 6) == 0);
  cr_assert_eq(d.kind, DEVREAD_CHAR);

  /* The device goes away (the master side closes): a typed failure, and
     the node no longer exists for the reopen. */
  close(s);
  close(m);
  r = devread_read(&d, got, 6, in_ms(5000), why, sizeof(why));
  cr_assert_eq(r, -ENODEV, "%d %s", r, why);
  test_sleep_ms(DEVREAD_BACKOFF_MIN_MS + 50);
  r = devread_read(&d, got, 6, in_ms(5000), why, sizeof(why));
  cr_assert_eq(r, -ENODEV, "%d %s", r, why);
  cr_assert(strstr(why, "cannot open") != NULL, "%s", why);
  cr_assert_eq(d.backoff_ms, 2 * DEVREAD_BACKOFF_MIN_MS, "backoff doubles");
  devread_done(&d);
}

Test(devread, file_is_read_once_and_followed, .timeout = 60)
{
  struct devread d;
  uint8_t got[64];
  char path[160], why[256];
  int f;

  snprintf(path, sizeof(path), "%s/file", F.dir);
  f = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
  cr_assert_geq(f, 0);
  cr_assert_eq(write(f, "ABCDEFGHIJ", 10), 10);
  cr_assert_eq(devread_init(&d, path, 3, 0, 0), 0);   /* 3-byte chunks */
  cr_assert_eq(devread_read(&d, got, 6, in_ms(5000), why, sizeof(why)), 0,
               "%s", why);
  cr_assert(memcmp(got, "ABCDEF", 6) == 0);
  cr_assert_eq(d.kind, DEVREAD_FILE);
  /* Only four bytes are left: wait for more, then give up. */
  cr_assert_eq(devread_read(&d, got, 6, in_ms(100), why, sizeof(why)),
               -ETIMEDOUT);
  /* Appended bytes are read next; nothing is ever read twice. */
  cr_assert_eq(write(f, "KLMN", 4), 4);
  cr_assert_eq(devread_read(&d, got, 4, in_ms(5000), why, sizeof(why)), 0,
               "%s", why);
  cr_assert(memcmp(got, "KLMN", 4) == 0);
  close(f);
  devread_done(&d);
}

Test(devread, exclusive_lock)
{
  struct devread d;
  uint8_t got[4];
  char path[160], why[256];
  int f;

  snprintf(path, sizeof(path), "%s/file", F.dir);
  f = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  cr_assert_geq(f, 0);
  cr_assert_eq(write(f, "1234", 4), 4);
  cr_assert_eq(flock(f, LOCK_EX), 0);
  cr_assert_eq(devread_init(&d, path, 0, 1, 0), 0);
  cr_assert_eq(devread_read(&d, got, 4, in_ms(5000), why, sizeof(why)),
               -EBUSY);
  cr_assert(strstr(why, "held by another process") != NULL, "%s", why);
  devread_done(&d);

  /* Unlocked, the lock is taken and the bytes read. */
  cr_assert_eq(flock(f, LOCK_UN), 0);
  cr_assert_eq(devread_init(&d, path, 0, 1, 0), 0);
  cr_assert_eq(devread_read(&d, got, 4, in_ms(5000), why, sizeof(why)), 0,
               "%s", why);
  cr_assert_eq(flock(f, LOCK_EX | LOCK_NB), -1, "qrsd holds the lock");
  devread_done(&d);
  close(f);
}

Test(devread, bad_arguments)
{
  struct devread d;

  cr_assert_eq(devread_init(&d, "", 0, 0, 0), -EINVAL);
  cr_assert_eq(devread_init(&d, "/dev/null", DEVREAD_CHUNK_MAX + 1, 0, 0),
               -EINVAL);
  cr_assert_str_eq(devread_kind_name(DEVREAD_UNKNOWN), "not opened");
  cr_assert_gt(strlen(devread_freshness(DEVREAD_FIFO, 1)), 0);
}

/* Fairness: four readers on one slow FIFO all make progress. */
struct client {
  struct devread *d;
  atomic_int *stop;
  int ok;
  int timeouts;
};

static void *
client_run(void *arg)
{
  struct client *c = arg;
  uint8_t b[16];
  char why[256];
  int r;

  while (!atomic_load(c->stop)) {
    r = devread_read(c->d, b, sizeof(b), in_ms(3000), why, sizeof(why));
    if (r == 0)
      c->ok++;
    else
      c->timeouts++;
  }
  return NULL;
}

Test(devread, four_clients_on_a_slow_device_all_progress)
{
  struct devread d;
  struct dribble dr;
  struct client c[4];
  pthread_t wt, th[4];
  atomic_int stop;
  int i, total;

  dr.fd = test_fifo_writer(&F);
  dr.every_ms = 5;
  dr.chunk = 16;                /* about 3 KB/s */
  atomic_init(&dr.stop, 0);
  atomic_init(&stop, 0);
  cr_assert_eq(devread_init(&d, F.path, 0, 0, 0), 0);
  cr_assert_eq(pthread_create(&wt, NULL, dribble_run, &dr), 0);
  for (i = 0; i < 4; i++) {
    c[i].d = &d;
    c[i].stop = &stop;
    c[i].ok = 0;
    c[i].timeouts = 0;
    cr_assert_eq(pthread_create(&th[i], NULL, client_run, &c[i]), 0);
  }
  test_sleep_ms(1500);
  atomic_store(&stop, 1);
  for (i = 0; i < 4; i++)
    pthread_join(th[i], NULL);
  atomic_store(&dr.stop, 1);
  pthread_join(wt, NULL);

  total = 0;
  for (i = 0; i < 4; i++) {
    cr_assert_geq(c[i].ok, 3, "client %d starved: %d reads, %d failures", i,
                  c[i].ok, c[i].timeouts);
    total += c[i].ok;
  }
  /* Served in turn: no client got more than twice its fair share plus
     slack. */
  for (i = 0; i < 4; i++)
    cr_assert_leq(c[i].ok, total / 2 + 2, "client %d took %d of %d", i,
                  c[i].ok, total);
  close(dr.fd);
  devread_done(&d);
}

Test(devread, capacity_admission_and_staleness)
{
  struct capacity c;

  capacity_init(&c);
  cr_assert_eq(capacity_admit(&c, 1u << 30, 0, 1, 1.0), 1,
               "nothing measured: admitted");
  capacity_note(&c, 100, 1000000000u);          /* 100 B/s */
  cr_assert_float_eq(capacity_rate(&c), 100.0, 1e-9);
  cr_assert_eq(capacity_admit(&c, 50, 0, 1000000000u, 1.0), 1);
  cr_assert_eq(capacity_admit(&c, 50, 60, 1000000000u, 1.0), 0,
               "the bytes queued ahead count");
  cr_assert_eq(capacity_admit(&c, 1000, 0, 1000000000u, 1.0), 0);
  cr_assert_eq(c.refused, 2);
  /* A long read moves the average most of the way. */
  capacity_note(&c, 2000, 2000000000u);         /* 1000 B/s over 2 s */
  cr_assert_float_eq(capacity_rate(&c), 1000.0, 1e-9);
  /* An old measurement no longer refuses: the next read re-measures. */
  c.last_ns -= CAPACITY_STALE_NS + 1;
  cr_assert_eq(capacity_admit(&c, 1u << 20, 0, 1000000u, 1.0), 1);
  capacity_done(&c);
}
