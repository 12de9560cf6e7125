/* The unix socket files qrsd binds (its own socket, the gRPC compat
   endpoint's): the group they are given, and what a failed bind means.
   Start-up only: these may block (NSS look-ups, stat of the path). */
#ifndef QRSD_SOCKFILE_H
#define QRSD_SOCKFILE_H

#include <stddef.h>
#include <sys/types.h>

#include <uv.h>

/* Give the socket file at path to group (NULL or "": leave it), never
   through a symlink put in its place.  A group that does not exist or a
   failed chown is logged as a warning; the socket stays usable. */
void sockfile_apply_group(const char *path, const char *group);

/* The gid of group name, however many members it has: 0, or -ENOENT (no
   such group), -ENOMEM. */
int sockfile_group_gid(const char *name, gid_t *gid);

/* Why binding a socket at path failed, when its directory says so: 1 and
   one line in buf ("directory /x does not exist", "directory /run/x
   (owner root:root, mode 0755) is not writable by uid 1000 (user
   'alice')"), or 0 when the directory explains nothing (buf untouched).
   libuv reports a missing directory as EACCES, and gRPC reports no
   errno at all: ask this rather than trust either. */
int sockfile_dir_problem(const char *path, char *buf, size_t len);

/* Bind pipe (initialised here on loop; *pipe_open set once it must be
   closed) at path, the socket file born with mode.  What is at path
   already: a socket nobody listens on (a stale one) is removed and
   logged; a live one (-EADDRINUSE), one that cannot be probed, or
   anything that is not a socket (-EEXIST) is left alone and refused.
   0 and the file's dev and ino (what is removed at exit must still be
   it), or a negative errno with one line in err. */
int sockfile_bind(uv_loop_t *loop, uv_pipe_t *pipe, int *pipe_open,
                  const char *path, unsigned mode, dev_t *dev, ino_t *ino,
                  char *err, size_t errlen);

#endif
