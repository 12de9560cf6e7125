/* Writing to a file descriptor until all is written.  Any thread; no
   state. */
#ifndef QRSD_BASE_FDIO_H
#define QRSD_BASE_FDIO_H

#include <stddef.h>

/* Write the n bytes at b to fd, through short writes and EINTR: 0, or a
   negative errno (-EIO when write() wrote nothing).  On failure some
   bytes may have been written. */
int fd_write_all(int fd, const void *b, size_t n);

#endif
