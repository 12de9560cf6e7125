/* Who may use qrsd's socket: peer credentials against the
   access list.  Allowed: root, qrsd's own uid, and members (primary or
   supplementary, SO_PEERGROUPS) of one group. */
#ifndef QRSD_SERVER_ACCESS_H
#define QRSD_SERVER_ACCESS_H

#include <stddef.h>
#include <sys/types.h>

struct access {
  int on;                       /* 0: anyone who can open the socket */
  gid_t gid;
  char group[64];               /* its name, for messages */
};

/* Resolve the group: explicit (access.group) if not "", else sockgroup
   (socket.group).  An explicit group that does not exist is an error
   (-ENOENT, err filled in); a missing socket group turns the check off
   with a warning.  Called at start, before the loop serves. */
int access_resolve(struct access *a, const char *explicit_group,
                   const char *sockgroup, char *err, size_t errlen);

/* 1 if the peer on fd (uid, gid from SO_PEERCRED) may connect; 0 with
   why filled in (for the client and the log) if not. */
int access_peer_allowed(const struct access *a, int fd, uid_t uid, gid_t gid,
                        char *why, size_t whylen);

/* The admin group (access.admin_group; "" or NULL: none, a->on 0): who
   may use the privileged requests (RELOAD).  A group that does not exist
   is an error (-ENOENT, err filled in naming the key).  Reads /etc/group
   (getgrnam_r): at start, or on a reload's worker thread. */
int access_resolve_admin(struct access *a, const char *group, char *err,
                         size_t errlen);

/* 1 if the peer may use a privileged request: root, qrsd's own uid, or
   a member of a's group; 0 with why filled in if not. */
int access_peer_admin(const struct access *a, int fd, uid_t uid, gid_t gid,
                      char *why, size_t whylen);

#endif
