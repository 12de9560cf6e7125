/* Opening a regular file by path, safely: every file qrsd reads by path
   (the configuration, quota state, the status file, and key and
   certificate files) goes through here.

   The open never blocks and never has a device's side effects: the path
   is looked at first (lstat, or stat when links are followed) and only a
   regular file is opened, with O_NONBLOCK (a FIFO swapped in since
   cannot hold the open), O_NOCTTY and O_CLOEXEC, and O_NOFOLLOW unless
   REGFILE_FOLLOW; the descriptor's type is checked again (fstat), so a
   race gains nothing.  A FIFO, device, socket or directory is refused,
   and so is a symbolic link without REGFILE_FOLLOW.

   Every failure fills err (when not NULL) with one line that names the
   path and what is wrong with it ("/etc/qrsd/qrsd.yaml: a FIFO, not a
   regular file").  Any thread; no state. */
#ifndef QRSD_REGFILE_H
#define QRSD_REGFILE_H

#include <stddef.h>
#include <sys/types.h>

/* Follow a symbolic link (to a regular file).  Without it a link is
   refused: right for the files qrsd itself replaces by rename. */
#define REGFILE_FOLLOW 1

/* Open path read-only.  Returns the descriptor (the caller closes it) or
   a negative errno: -ENOENT and the like from the system, -ELOOP (a
   symbolic link, not followed), -EISDIR (a directory), -EINVAL (another
   type: FIFO, device, socket). */
int regfile_open(const char *path, int flags, char *err, size_t errlen);

/* Read the whole file (at most max bytes) into a new NUL-terminated
   buffer: 0, regfile_open()'s errors, -EFBIG (larger than max), -ENOMEM
   or a read error.  The caller frees *ret_buf; *ret_len may be NULL. */
int regfile_read(const char *path, int flags, size_t max, char **ret_buf,
                 size_t *ret_len, char *err, size_t errlen);

/* regfile_read() of a descriptor regfile_open() gave for path (path
   only names it in err); fd is closed, whatever the outcome.  A buffer
   not handed back is zeroed before it is freed (a key file's). */
int regfile_read_fd(int fd, const char *path, size_t max, char **ret_buf,
                    size_t *ret_len, char *err, size_t errlen);

/* Check what is at path, without opening it: 0 when nothing is there
   (-ENOENT is not an error here) or a regular file, else as
   regfile_open() (for a path qrsd will create or replace). */
int regfile_check(const char *path, int flags, char *err, size_t errlen);

/* "a FIFO", "a character device", ... for a st_mode (in messages). */
const char *regfile_type_name(mode_t mode);

#endif
