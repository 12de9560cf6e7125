/* Files of secrets, checked before they are read: who owns the file and
   who else may read or write it.  A symbolic link is followed (secrets
   are often mounted as a chain of links) and the file it ends at is
   checked, on the descriptor that is read.

   KEYFILE_PRIVATE, a secret whose reader can use it: a private key
   (grpc_compat.tls_key, an upstream's tls.key_file) or an upstream's
   api key (api_key_file): owned by root or qrsd's user; no permission
   for others; the group may read it only when root owns it (0640: a
   group such as ssl-cert that the service joins), never write it.  So
   0600, 0400 and, root-owned, 0640 and 0440 are fine; 0644 and 0660 are
   not.

   KEYFILE_HASHES, the api keys of the compat endpoint
   (grpc_compat.api_keys), which hold SHA-256 hashes, not keys: owned by
   root or qrsd's user, and not writable by group or others (whoever can
   write it can add a key).  Reading is harmless: 0644 and 0444 (a
   Kubernetes secret's default) are fine; 0664 and 0666 are not.

   Refusals name the file, its owner and mode, and the chmod or chown that
   fixes it.  Any thread; no state. */
#ifndef QRSD_KEYFILE_H
#define QRSD_KEYFILE_H

#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

enum keyfile_kind {
  KEYFILE_PRIVATE,
  KEYFILE_HASHES,
};

/* May st (of path, read by qrsd running as uid self) hold secrets of
   kind?  0, or -EPERM with err saying why and how to fix it. */
int keyfile_check(const char *path, const struct stat *st,
                  enum keyfile_kind kind, uid_t self, char *err,
                  size_t errlen);

/* regfile_read() (links followed) of a file that keyfile_check() accepts
   for qrsd's effective uid: 0, -EPERM or regfile_read()'s errors.  The
   caller frees *ret_buf (and clears it first when it held a key);
   *ret_len may be NULL. */
int keyfile_read(const char *path, enum keyfile_kind kind, size_t max,
                 char **ret_buf, size_t *ret_len, char *err, size_t errlen);

#endif
