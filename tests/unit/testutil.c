/* Fixtures shared by the unit tests (testutil.h). */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#include <criterion/criterion.h>

#include "testutil.h"

void
test_fifo_init(struct test_fifo *f, const char *prefix)
{
  signal(SIGPIPE, SIG_IGN);
  f->hold = -1;
  test_tmpdir(f->dir, sizeof(f->dir), prefix);
  snprintf(f->path, sizeof(f->path), "%s/fifo", f->dir);
  cr_assert_eq(mkfifo(f->path, 0600), 0);
}

int
test_fifo_writer(struct test_fifo *f)
{
  int w;

  if (f->hold < 0)
    f->hold = open(f->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  cr_assert_geq(f->hold, 0);
  w = open(f->path, O_WRONLY | O_CLOEXEC);
  cr_assert_geq(w, 0);
  return w;
}

void
test_fifo_done(struct test_fifo *f)
{
  if (f->hold >= 0)
    close(f->hold);
  f->hold = -1;
  unlink(f->path);
  rmdir(f->dir);
}

void
test_tmpdir(char *dir, size_t len, const char *prefix)
{
  snprintf(dir, len, "/tmp/%s-XXXXXX", prefix);
  cr_assert_not_null(mkdtemp(dir), "mkdtemp %s", dir);
}

void
test_tmpdir_remove(const char *dir)
{
  char cmd[256];

  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
}

void
test_write_file(const char *path, const char *text)
{
  FILE *fp = fopen(path, "w");

  cr_assert_not_null(fp, "%s", path);
  fputs(text, fp);
  fclose(fp);
}

void
test_sleep_ms(unsigned ms)
{
  struct timespec ts;

  ts.tv_sec = ms / 1000;
  ts.tv_nsec = (long)(ms % 1000) * 1000000L;
  nanosleep(&ts, NULL);
}
