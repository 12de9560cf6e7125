/* Writing to a file descriptor; see fdio.h. */
#include <errno.h>
#include <unistd.h>

#include "base/fdio.h"

int
fd_write_all(int fd, const void *b, size_t n)
{
  const char *p = b;
  ssize_t w;

  while (n > 0) {
    w = write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      return -errno;
    if (w == 0)
      return -EIO;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}
