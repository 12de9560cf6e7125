/* Atomic file replacement by temp file + rename; see atomicfile.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fdio.h"
#include "persist/atomicfile.h"

#define TMP_FLAGS (O_WRONLY | O_CREAT | O_EXCL | O_NONBLOCK | O_NOFOLLOW | \
                   O_CLOEXEC)

static void
sync_dir(const char *path)
{
  char *copy, *dir;
  int fd;

  copy = strdup(path);
  if (!copy)
    return;
  dir = dirname(copy);
  fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
  free(copy);
}

int
atomicfile_write(const char *path, const void *data, size_t len,
                 int durable)
{
  char *tmp = NULL;
  int fd = -1, r;

  if (asprintf(&tmp, "%s.%ld.tmp", path, (long)getpid()) < 0)
    return -ENOMEM;
  /* Always a new file: whatever is at the temp path (a stale temp file of
     an earlier process with our pid, a FIFO, a link) is removed, never
     opened, so the open cannot block or write through a link. */
  fd = open(tmp, TMP_FLAGS, 0644);
  if (fd < 0 && errno == EEXIST && unlink(tmp) == 0)
    fd = open(tmp, TMP_FLAGS, 0644);
  if (fd < 0) {
    r = -errno;
    free(tmp);
    return r;
  }
  r = fd_write_all(fd, data, len);
  if (r == 0 && durable && fsync(fd) < 0)
    r = -errno;
  if (close(fd) < 0 && r == 0)
    r = -errno;
  if (r == 0 && rename(tmp, path) < 0)
    r = -errno;
  if (r < 0)
    (void)unlink(tmp);
  else if (durable)
    sync_dir(path);
  free(tmp);
  return r;
}
