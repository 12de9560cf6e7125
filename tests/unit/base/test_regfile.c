/* regfile: a regular file by path, read without blocking; a FIFO, a
   device, a directory or (unless followed) a symbolic link is refused at
   once, with a message that names the path and what it is. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <criterion/criterion.h>

#include "base/regfile.h"
#include "testutil.h"

static char dir[64], path[128], link_path[128];

static void
mk(void)
{
  test_tmpdir(dir, sizeof(dir), "qrs-regfile");
  snprintf(path, sizeof(path), "%s/file", dir);
  snprintf(link_path, sizeof(link_path), "%s/link", dir);
  test_write_file(path, "hello");
}

static void
rm(void)
{
  test_tmpdir_remove(dir);
}

/* A FIFO that nobody writes would hold a blocking open for ever: the
   timeout turns that into a failure. */
TestSuite(regfile, .init = mk, .fini = rm, .timeout = 10);

/* regfile_read() of p fails with want, and err names p and has what. */
static void
expect_refused(const char *p, int flags, int want, const char *what)
{
  char err[256], *buf = NULL;
  int r;

  err[0] = '\0';
  r = regfile_read(p, flags, 100, &buf, NULL, err, sizeof(err));
  cr_assert_eq(r, want, "%s: %d (%s)", p, r, err);
  cr_assert_null(buf);
  cr_assert_eq(strncmp(err, p, strlen(p)), 0, "%s", err);
  cr_assert_not_null(strstr(err, what), "%s", err);
}

Test(regfile, reads_a_regular_file)
{
  char *buf;
  size_t len;

  cr_assert_eq(regfile_read(path, 0, 100, &buf, &len, NULL, 0), 0);
  cr_assert_str_eq(buf, "hello");
  cr_assert_eq(len, 5);
  free(buf);
}

Test(regfile, refuses_a_fifo_without_blocking)
{
  char fifo[160];

  snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
  cr_assert_eq(mkfifo(fifo, 0600), 0);
  expect_refused(fifo, 0, -EINVAL, ": a FIFO, not a regular file");
  expect_refused(fifo, REGFILE_FOLLOW, -EINVAL, "a FIFO");
  cr_assert_eq(regfile_check(fifo, 0, NULL, 0), -EINVAL);
}

Test(regfile, refuses_a_device_and_a_directory)
{
  expect_refused("/dev/null", REGFILE_FOLLOW, -EINVAL,
                 ": a character device, not a regular file");
  expect_refused(dir, REGFILE_FOLLOW, -EISDIR, ": a directory");
}

Test(regfile, follows_a_link_only_when_asked)
{
  char *buf;

  cr_assert_eq(symlink(path, link_path), 0);
  expect_refused(link_path, 0, -ELOOP, "a symbolic link, not a regular "
                 "file (links are not followed here)");
  cr_assert_eq(regfile_check(link_path, 0, NULL, 0), -ELOOP);
  cr_assert_eq(regfile_read(link_path, REGFILE_FOLLOW, 100, &buf, NULL,
                            NULL, 0), 0);
  cr_assert_str_eq(buf, "hello");
  free(buf);
  /* A link to a device is the device. */
  cr_assert_eq(unlink(link_path), 0);
  cr_assert_eq(symlink("/dev/null", link_path), 0);
  expect_refused(link_path, REGFILE_FOLLOW, -EINVAL, "a character device");
}

Test(regfile, refuses_a_file_larger_than_max)
{
  char err[256], *buf = NULL;

  cr_assert_eq(regfile_read(path, 0, 4, &buf, NULL, err, sizeof(err)),
               -EFBIG);
  cr_assert_null(buf);
  cr_assert_not_null(strstr(err, ": larger than 4 bytes"), "%s", err);
}

Test(regfile, a_missing_file_is_enoent_but_passes_the_check)
{
  char missing[160];

  snprintf(missing, sizeof(missing), "%s/missing", dir);
  expect_refused(missing, 0, -ENOENT, ": No such file or directory");
  cr_assert_eq(regfile_check(missing, 0, NULL, 0), 0);
  cr_assert_eq(regfile_check(path, 0, NULL, 0), 0);
}
