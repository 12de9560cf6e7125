/* LD_PRELOAD shim for the socket-ownership tests (test_limits.c).

   QRS_SHIM_SWAP_VICTIM=FILE: right after qrsd binds its socket, the
   socket file is replaced by a symlink to FILE - the race an attacker
   with write access to the directory can win - so that anything qrsd
   then does to the path by name lands on FILE.

   QRS_SHIM_BIG_GROUP=NAME:GID: getgrnam_r(NAME) needs a buffer of at least
   64 KiB (ERANGE below), like a group with thousands of members, and then
   answers gid GID.

   QRS_SHIM_SIGNAL_IN_WINDOW=1: when the program sets SIGTERM to SIG_IGN,
   a SIGTERM arrives just before - a second signal in the shutdown
   window. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

int
bind(int fd, const struct sockaddr *sa, socklen_t len)
{
  int (*real)(int, const struct sockaddr *, socklen_t);
  const struct sockaddr_un *un;
  const char *victim;
  char moved[200];
  int r;

  real = (int (*)(int, const struct sockaddr *, socklen_t))
         dlsym(RTLD_NEXT, "bind");
  r = real(fd, sa, len);
  victim = getenv("QRS_SHIM_SWAP_VICTIM");
  if (r == 0 && victim && sa->sa_family == AF_UNIX) {
    un = (const struct sockaddr_un *)(const void *)sa;
    snprintf(moved, sizeof(moved), "%s.moved", un->sun_path);
    if (rename(un->sun_path, moved) == 0)
      symlink(victim, un->sun_path);
  }
  return r;
}

int
getgrnam_r(const char *name, struct group *gr, char *buf, size_t len,
           struct group **res)
{
  int (*real)(const char *, struct group *, char *, size_t,
              struct group **);
  const char *big, *colon;
  size_t n;

  big = getenv("QRS_SHIM_BIG_GROUP");
  colon = big ? strchr(big, ':') : NULL;
  if (colon && strlen(name) == (size_t)(colon - big) &&
      !strncmp(name, big, (size_t)(colon - big))) {
    *res = NULL;
    if (len < 65536)
      return ERANGE;
    n = strlen(name);
    memcpy(buf, name, n + 1);
    memset(gr, 0, sizeof(*gr));
    gr->gr_name = buf;
    gr->gr_passwd = buf + n;
    gr->gr_gid = (gid_t)atoi(colon + 1);
    gr->gr_mem = (char **)(void *)(buf + ((n + 16) & ~(size_t)7));
    gr->gr_mem[0] = NULL;
    *res = gr;
    return 0;
  }
  real = (int (*)(const char *, struct group *, char *, size_t,
                  struct group **))dlsym(RTLD_NEXT, "getgrnam_r");
  return real(name, gr, buf, len, res);
}

sighandler_t
signal(int signum, sighandler_t handler)
{
  sighandler_t (*real)(int, sighandler_t);

  real = (sighandler_t (*)(int, sighandler_t))dlsym(RTLD_NEXT, "signal");
  if (signum == SIGTERM && handler == SIG_IGN &&
      getenv("QRS_SHIM_SIGNAL_IN_WINDOW"))
    raise(SIGTERM);
  return real(signum, handler);
}
