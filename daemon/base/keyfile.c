/* Files of secrets: see keyfile.h. */
#include "keyfile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/regfile.h"

int
keyfile_check(const char *path, const struct stat *st,
              enum keyfile_kind kind, uid_t self, char *err, size_t errlen)
{
  unsigned mode;
  mode_t bad;

  mode = (unsigned)(st->st_mode & 07777);
  if (st->st_uid != 0 && st->st_uid != self) {
    snprintf(err, errlen, "%s is owned by uid %u (mode %04o), not by root "
             "or qrsd's user (uid %u), so its owner could change it: "
             "chown root %s", path, (unsigned)st->st_uid, mode,
             (unsigned)self, path);
    return -EPERM;
  }
  if (kind == KEYFILE_HASHES) {
    if (!(st->st_mode & (S_IWGRP | S_IWOTH)))
      return 0;
    snprintf(err, errlen, "%s (owner uid %u, mode %04o) is writable by "
             "group or others, who could add a key: chmod go-w %s", path,
             (unsigned)st->st_uid, mode, path);
    return -EPERM;
  }
  /* A secret: the group may read a root-owned one (0640). */
  bad = S_IRWXO | S_IWGRP | S_IXGRP;
  if (st->st_uid != 0)
    bad |= S_IRGRP;
  if (!(st->st_mode & bad))
    return 0;
  snprintf(err, errlen, "%s (owner uid %u, mode %04o) holds a secret "
           "that %s may %s: chmod %s %s", path, (unsigned)st->st_uid, mode,
           st->st_mode & S_IRWXO ? "others" : "its group",
           st->st_mode & (S_IWOTH | S_IWGRP) ? "change" : "read",
           st->st_uid == 0 ? "0640" : "0600", path);
  return -EPERM;
}

int
keyfile_read(const char *path, enum keyfile_kind kind, size_t max,
             char **ret_buf, size_t *ret_len, char *err, size_t errlen)
{
  struct stat st;
  int fd, r;

  fd = regfile_open(path, REGFILE_FOLLOW, err, errlen);
  if (fd < 0)
    return fd;
  if (fstat(fd, &st) < 0) {
    r = -errno;
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    close(fd);
    return r;
  }
  r = keyfile_check(path, &st, kind, geteuid(), err, errlen);
  if (r < 0) {
    close(fd);
    return r;
  }
  /* the descriptor checked is the one read: no swap in between */
  return regfile_read_fd(fd, path, max, ret_buf, ret_len, err, errlen);
}
