/* The access list: see access.h. */
#include "access.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"
#include "sockfile.h"

#define PEER_GROUPS_MAX 256     /* supplementary groups read per peer */

int
access_resolve(struct access *a, const char *explicit_group,
               const char *sockgroup, char *err, size_t errlen)
{
  const char *name;
  gid_t gid;
  int r;

  memset(a, 0, sizeof(*a));
  name = explicit_group && explicit_group[0] ? explicit_group : sockgroup;
  if (!name || !name[0])
    return 0;
  r = sockfile_group_gid(name, &gid);
  if (r < 0) {
    if (name == explicit_group) {
      snprintf(err, errlen, "access.group: %s '%s'",
               r == -ENOENT ? "no group" : "out of memory looking up group",
               name);
      return r;
    }
    log_warn("access: socket.group '%s' does not exist: anyone who can "
             "open the socket may use it", name);
    return 0;
  }
  a->on = 1;
  a->gid = gid;
  snprintf(a->group, sizeof(a->group), "%s", name);
  return 0;
}

int
access_peer_allowed(const struct access *a, int fd, uid_t uid, gid_t gid,
                    char *why, size_t whylen)
{
  gid_t groups[PEER_GROUPS_MAX];
  socklen_t len;
  size_t i, n;

  if (!a->on || uid == 0 || uid == geteuid() || gid == a->gid)
    return 1;
  len = sizeof(groups);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) == 0) {
    n = len / sizeof(groups[0]);
    for (i = 0; i < n; i++)
      if (groups[i] == a->gid)
        return 1;
  }
  /* ERANGE: more than PEER_GROUPS_MAX groups; only the first ones (and
     the primary group) count, which refuses rather than allows. */
  snprintf(why, whylen, "uid %u is not root and not in group '%s' "
           "(access.group)", (unsigned)uid, a->group);
  return 0;
}
