/* Regular files opened by path, safely; see regfile.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/regfile.h"

const char *
regfile_type_name(mode_t mode)
{
  switch (mode & S_IFMT) {
  case S_IFREG: return "a regular file";
  case S_IFDIR: return "a directory";
  case S_IFLNK: return "a symbolic link";
  case S_IFIFO: return "a FIFO";
  case S_IFCHR: return "a character device";
  case S_IFBLK: return "a block device";
  case S_IFSOCK: return "a socket";
  }
  return "of an unknown type";
}

/* 0 when st is a regular file, else the error (err says what it is). */
static int
check_type(const char *path, const struct stat *st, char *err,
           size_t errlen)
{
  if (S_ISREG(st->st_mode))
    return 0;
  if (err && errlen > 0)
    snprintf(err, errlen, "%s: %s, not a regular file%s", path,
             regfile_type_name(st->st_mode),
             S_ISLNK(st->st_mode) ? " (links are not followed here)" : "");
  if (S_ISLNK(st->st_mode))
    return -ELOOP;
  return S_ISDIR(st->st_mode) ? -EISDIR : -EINVAL;
}

static int
sys_error(const char *path, int e, char *err, size_t errlen)
{
  char msg[128];

  if (err && errlen > 0)
    snprintf(err, errlen, "%s: %s", path, strerror_r(e, msg, sizeof(msg)));
  return -e;
}

static int
look(const char *path, int flags, struct stat *st)
{
  return (flags & REGFILE_FOLLOW) ? stat(path, st) : lstat(path, st);
}

int
regfile_check(const char *path, int flags, char *err, size_t errlen)
{
  struct stat st;

  if (look(path, flags, &st) < 0)
    return 0;
  return check_type(path, &st, err, errlen);
}

int
regfile_open(const char *path, int flags, char *err, size_t errlen)
{
  struct stat st;
  int fd, r;

  if (look(path, flags, &st) < 0)
    return sys_error(path, errno, err, errlen);
  r = check_type(path, &st, err, errlen);
  if (r < 0)
    return r;
  fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC |
            ((flags & REGFILE_FOLLOW) ? 0 : O_NOFOLLOW));
  if (fd < 0)
    return sys_error(path, errno, err, errlen);
  /* Replaced between the look and the open? */
  if (fstat(fd, &st) < 0) {
    r = sys_error(path, errno, err, errlen);
    close(fd);
    return r;
  }
  r = check_type(path, &st, err, errlen);
  if (r < 0) {
    close(fd);
    return r;
  }
  return fd;
}

int
regfile_read_fd(int fd, const char *path, size_t max, char **ret_buf,
                size_t *ret_len, char *err, size_t errlen)
{
  char *buf = NULL;
  size_t len = 0;
  ssize_t n;
  int r = 0;

  buf = malloc(max + 2);
  if (!buf) {
    r = -ENOMEM;
    if (err && errlen > 0)
      snprintf(err, errlen, "%s: out of memory", path);
    goto done;
  }
  for (;;) {
    n = read(fd, buf + len, max + 1 - len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      r = sys_error(path, errno, err, errlen);
      goto done;
    }
    if (n == 0)
      break;
    len += (size_t)n;
    if (len > max) {
      r = -EFBIG;
      if (err && errlen > 0)
        snprintf(err, errlen, "%s: larger than %zu bytes", path, max);
      goto done;
    }
  }
  buf[len] = '\0';
  *ret_buf = buf;
  buf = NULL;
  if (ret_len)
    *ret_len = len;

done:
  if (buf) {
    explicit_bzero(buf, len);   /* it may hold a secret (keyfile.c) */
    free(buf);
  }
  close(fd);
  return r;
}

int
regfile_read(const char *path, int flags, size_t max, char **ret_buf,
             size_t *ret_len, char *err, size_t errlen)
{
  int fd;

  fd = regfile_open(path, flags, err, errlen);
  if (fd < 0)
    return fd;
  return regfile_read_fd(fd, path, max, ret_buf, ret_len, err, errlen);
}
