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

/* The gid of group name (key: its config key, for the message). */
static int
group_gid(const char *key, const char *name, gid_t *ret_gid, char *err,
          size_t errlen)
{
  int r;

  r = sockfile_group_gid(name, ret_gid);
  if (r < 0)
    snprintf(err, errlen, "%s: %s '%s'", key,
             r == -ENOENT ? "no group" : "out of memory looking up group",
             name);
  return r;
}

/* Is the peer on fd (primary group gid) a member of group want? */
static int
peer_in_group(int fd, gid_t gid, gid_t want)
{
  gid_t groups[PEER_GROUPS_MAX];
  socklen_t len;
  size_t i, n;

  if (gid == want)
    return 1;
  len = sizeof(groups);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
    return 0;
  /* ERANGE: more than PEER_GROUPS_MAX groups; only the first ones (and
     the primary group) count, which refuses rather than allows. */
  n = len / sizeof(groups[0]);
  for (i = 0; i < n; i++)
    if (groups[i] == want)
      return 1;
  return 0;
}

/* a checks membership of group gid, named name. */
static void
access_set(struct access *a, gid_t gid, const char *name)
{
  a->on = 1;
  a->gid = gid;
  snprintf(a->group, sizeof(a->group), "%s", name);
}

int
access_resolve(struct access *a, const char *explicit_group,
               const char *sockgroup, char *err, size_t errlen)
{
  const char *name;
  char why[160];
  gid_t gid;
  int r;

  memset(a, 0, sizeof(*a));
  name = explicit_group && explicit_group[0] ? explicit_group : sockgroup;
  if (!name || !name[0])
    return 0;
  r = group_gid("access.group", name, &gid, why, sizeof(why));
  if (r < 0) {
    if (name == explicit_group) {
      snprintf(err, errlen, "%s", why);
      return r;
    }
    log_warn("access: socket.group '%s' does not exist: anyone who can "
             "open the socket may use it", name);
    return 0;
  }
  access_set(a, gid, name);
  return 0;
}

int
access_peer_allowed(const struct access *a, int fd, uid_t uid, gid_t gid,
                    char *why, size_t whylen)
{
  if (!a->on || uid == 0 || uid == geteuid() || peer_in_group(fd, gid, a->gid))
    return 1;
  snprintf(why, whylen, "uid %u is not root and not in group '%s' "
           "(access.group)", (unsigned)uid, a->group);
  return 0;
}

int
access_resolve_admin(struct access *a, const char *group, char *err,
                     size_t errlen)
{
  gid_t gid;
  int r;

  memset(a, 0, sizeof(*a));
  if (!group || !group[0])
    return 0;
  r = group_gid("access.admin_group", group, &gid, err, errlen);
  if (r < 0)
    return r;
  access_set(a, gid, group);
  return 0;
}

int
access_peer_admin(const struct access *a, int fd, uid_t uid, gid_t gid,
                  char *why, size_t whylen)
{
  if (uid == 0 || uid == geteuid() ||
      (a->on && peer_in_group(fd, gid, a->gid)))
    return 1;
  if (a->on)
    snprintf(why, whylen, "uid %u is not root, not qrsd's user and not in "
             "group '%s' (access.admin_group)", (unsigned)uid, a->group);
  else
    snprintf(why, whylen, "uid %u is not root and not qrsd's user "
             "(access.admin_group is not set)", (unsigned)uid);
  return 0;
}
