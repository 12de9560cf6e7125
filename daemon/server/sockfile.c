/* The socket files' group and what a failed bind means; see sockfile.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "base/log.h"
#include "server/sockfile.h"

/* The group named name (NULL: the group gid), in *ret_buf (caller frees,
   also on failure; NULL: out of memory).  A group with many members
   needs more than any fixed buffer: retry on ERANGE. */
static struct group *
group_get(const char *name, gid_t gid, struct group *gr, char **ret_buf)
{
  struct group *res;
  size_t len;
  char *buf;
  int r;

  buf = NULL;
  res = NULL;
  for (len = 4096; len <= 16 * 1024 * 1024; len *= 2) {
    free(buf);
    buf = malloc(len);
    if (!buf)
      break;
    if (name)
      r = getgrnam_r(name, gr, buf, len, &res);
    else
      r = getgrgid_r(gid, gr, buf, len, &res);
    if (r != ERANGE)
      break;
  }
  *ret_buf = buf;
  return buf ? res : NULL;
}

int
sockfile_group_gid(const char *name, gid_t *gid)
{
  struct group gr, *res;
  char *buf;

  res = group_get(name, 0, &gr, &buf);
  if (res)
    *gid = res->gr_gid;
  free(buf);
  return res ? 0 : buf ? -ENOENT : -ENOMEM;
}

void
sockfile_apply_group(const char *path, const char *group)
{
  struct group gr, *res;
  char *buf;

  if (!group || !*group)
    return;
  res = group_get(group, 0, &gr, &buf);
  if (!res) {
    log_warn("socket group '%s' %s; %s keeps its group", group,
             buf ? "does not exist" : "cannot be looked up (out of memory)",
             path);
    free(buf);
    return;
  }
  /* Never through a symlink someone put in place of our socket. */
  if (fchownat(AT_FDCWD, path, (uid_t)-1, res->gr_gid,
               AT_SYMLINK_NOFOLLOW) < 0)
    log_warn("cannot give %s to group '%s': %s", path, group,
             strerror(errno));
  free(buf);
}

/* "user:group" of st's owner, names where they have one. */
static void
owner_name(const struct stat *st, char *out, size_t len)
{
  struct passwd pw, *pres;
  struct group gr, *gres;
  char pbuf[4096], *gbuf;

  pres = NULL;
  if (getpwuid_r(st->st_uid, &pw, pbuf, sizeof(pbuf), &pres) != 0)
    pres = NULL;
  gres = group_get(NULL, st->st_gid, &gr, &gbuf);
  if (pres && gres)
    snprintf(out, len, "%s:%s", pres->pw_name, gres->gr_name);
  else if (pres)
    snprintf(out, len, "%s:%u", pres->pw_name, (unsigned)st->st_gid);
  else if (gres)
    snprintf(out, len, "%u:%s", (unsigned)st->st_uid, gres->gr_name);
  else
    snprintf(out, len, "%u:%u", (unsigned)st->st_uid, (unsigned)st->st_gid);
  free(gbuf);
}

/* dir exists but we may not do access (W_OK | X_OK, or X_OK) in it: 1
   and a line in buf naming its owner and mode and who we are. */
static int
dir_denied(const char *dir, int access, char *buf, size_t len)
{
  struct passwd pw, *res;
  char owner[200], me[300], pbuf[4096];
  struct stat st;
  uid_t uid;

  if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode) ||
      faccessat(AT_FDCWD, dir, access, AT_EACCESS) == 0 || errno != EACCES)
    return 0;
  owner_name(&st, owner, sizeof(owner));
  uid = geteuid();
  res = NULL;
  if (getpwuid_r(uid, &pw, pbuf, sizeof(pbuf), &res) == 0 && res)
    snprintf(me, sizeof(me), "uid %u (%s)", (unsigned)uid, res->pw_name);
  else
    snprintf(me, sizeof(me), "uid %u", (unsigned)uid);
  snprintf(buf, len, "permission denied: directory %s (owner %s, mode %04o) "
           "%s %s", dir, owner, (unsigned)(st.st_mode & 07777),
           access & W_OK ? "is not writable by" : "cannot be searched by", me);
  return 1;
}

int
sockfile_dir_problem(const char *path, char *buf, size_t len)
{
  char dir[PATH_MAX];
  const char *slash;
  struct stat st;
  size_t i, n;

  slash = strrchr(path, '/');
  n = slash ? (size_t)(slash - path) : 0;
  if (n >= sizeof(dir))
    return 0;
  if (!slash)
    snprintf(dir, sizeof(dir), ".");
  else if (n == 0)
    snprintf(dir, sizeof(dir), "/");
  else
    snprintf(dir, sizeof(dir), "%.*s", (int)n, path);

  if (stat(dir, &st) < 0) {
    if (errno == ENOENT) {
      snprintf(buf, len, "directory %s does not exist", dir);
      return 1;
    }
    if (errno == ENOTDIR) {
      snprintf(buf, len, "%s is not a directory (a part of it is a file)",
               dir);
      return 1;
    }
    if (errno != EACCES)
      return 0;
    /* A directory on the way cannot be searched: name the first. */
    for (i = 1; dir[i]; i++) {
      if (dir[i] != '/')
        continue;
      dir[i] = '\0';
      if (dir_denied(dir, X_OK, buf, len))
        return 1;
      dir[i] = '/';
    }
    return 0;
  }
  if (!S_ISDIR(st.st_mode)) {
    snprintf(buf, len, "%s is not a directory", dir);
    return 1;
  }
  return dir_denied(dir, W_OK | X_OK, buf, len);
}

/* Whether a daemon listens on the socket at path: 1 yes, 0 no (connect()
   was refused: the socket is stale), or a negative errno: we cannot tell
   (EACCES: it is not ours to judge), so the caller must leave it alone. */
static int
socket_probe(const char *path)
{
  struct sockaddr_un sa;
  int fd, r;

  fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -errno;
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
  r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
  if (r < 0)
    r = errno == ECONNREFUSED ? 0 : -errno;
  else
    r = 1;
  close(fd);
  return r;
}

int
sockfile_bind(uv_loop_t *loop, uv_pipe_t *pipe, int *pipe_open,
              const char *path, unsigned mode, dev_t *dev, ino_t *ino,
              char *err, size_t errlen)
{
  struct sockaddr_un sa;
  struct stat st;
  mode_t old_umask;
  char why[300];
  int r;

  if (strlen(path) >= sizeof(sa.sun_path)) {
    snprintf(err, errlen, "socket path '%s' is longer than %zu bytes",
             path, sizeof(sa.sun_path) - 1);
    return -ENAMETOOLONG;
  }
  if (lstat(path, &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      snprintf(err, errlen, "%s exists and is not a socket; not touching "
               "it", path);
      return -EEXIST;
    }
    r = socket_probe(path);
    if (r > 0) {
      snprintf(err, errlen, "another daemon is already listening on %s",
               path);
      return -EADDRINUSE;
    }
    if (r < 0) {
      snprintf(err, errlen, "cannot tell whether a daemon listens on %s "
               "(connect: %s); not touching it", path, strerror(-r));
      return r;
    }
    log_info("removing stale socket %s", path);
    if (unlink(path) < 0 && errno != ENOENT) {
      r = -errno;
      snprintf(err, errlen, "cannot remove stale socket %s: %s", path,
               strerror(errno));
      return r;
    }
  }
  r = uv_pipe_init(loop, pipe, 0);
  if (r < 0) {
    snprintf(err, errlen, "cannot bind %s: %s", path, uv_strerror(r));
    return r;
  }
  *pipe_open = 1;
  /* The socket is born with its final mode: no chmod by path afterwards,
     which would follow a symlink put in its place. */
  old_umask = umask(0777 & ~(mode_t)mode);
  r = uv_pipe_bind(pipe, path);
  umask(old_umask);
  if (r < 0) {
    /* libuv says EACCES for a missing directory too: ask the directory. */
    if ((r != UV_EACCES && r != UV_ENOENT && r != UV_ENOTDIR) ||
        !sockfile_dir_problem(path, why, sizeof(why)))
      snprintf(why, sizeof(why), "%s", uv_strerror(r));
    snprintf(err, errlen, "cannot bind %s: %s", path, why);
    return r;
  }
  if (lstat(path, &st) == 0) {
    *dev = st.st_dev;
    *ino = st.st_ino;
  }
  return 0;
}
