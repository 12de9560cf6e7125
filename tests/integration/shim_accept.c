/* LD_PRELOAD shim for compat-flood.sh: QRS_SHIM_ACCEPT_EMFILE=FILE: while
   FILE exists, the next accept4() on a unix socket whose path holds
   "/compat-grpc/" (gRPC's private listener in qrsd) removes FILE and
   fails with EMFILE, as when the process is out of descriptors; gRPC
   1.51 then drops that listener for good. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

int
accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
  int (*real)(int, struct sockaddr *, socklen_t *, int);
  struct sockaddr_un un;
  socklen_t unlen = sizeof(un);
  const char *trigger;

  real = (int (*)(int, struct sockaddr *, socklen_t *, int))
         dlsym(RTLD_NEXT, "accept4");
  trigger = getenv("QRS_SHIM_ACCEPT_EMFILE");
  memset(&un, 0, sizeof(un));
  if (trigger && getsockname(fd, (struct sockaddr *)&un, &unlen) == 0 &&
      un.sun_family == AF_UNIX &&
      strstr(un.sun_path, "/compat-grpc/") && unlink(trigger) == 0) {
    errno = EMFILE;
    return -1;
  }
  return real(fd, sa, len, flags);
}
