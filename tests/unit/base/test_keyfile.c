/* keyfile: files of secrets are refused when someone besides root and
   qrsd's user could change them (or, for a private key, read them), with
   a message that names the file, its owner and mode, and the fix; a
   symbolic link is followed to the file that is checked. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <criterion/criterion.h>

#include "base/keyfile.h"
#include "testutil.h"

static char dir[64], path[128];

static void
mk(void)
{
  test_tmpdir(dir, sizeof(dir), "qrs-keyfile");
  snprintf(path, sizeof(path), "%s/secret", dir);
  test_write_file(path, "secret\n");
}

static void
rm(void)
{
  test_tmpdir_remove(dir);
}

TestSuite(keyfile, .init = mk, .fini = rm, .timeout = 10);

/* keyfile_read() of path with mode: its result, err in err. */
static int
read_mode(mode_t mode, enum keyfile_kind kind, char *err, size_t errlen)
{
  char *buf = NULL;
  int r;

  cr_assert_eq(chmod(path, mode), 0);
  err[0] = '\0';
  r = keyfile_read(path, kind, 4096, &buf, NULL, err, errlen);
  if (r == 0)
    cr_assert_str_eq(buf, "secret\n");
  free(buf);
  return r;
}

/* Modes of a file owned by the test's user (root: the group may read a
   root-owned secret) and what keyfile_read() says of them: NULL, taken;
   else refused naming the file, its mode, who may do what, and the chmod
   that fixes it. */
static const struct {
  enum keyfile_kind kind;
  mode_t mode;
  int root_only;
  const char *says;
} modes[] = {
  /* api keys (hashes): anyone may read them; only the owner may write */
  { KEYFILE_HASHES, 0666, 0, "writable by group or others, who could add "
    "a key: chmod go-w " },
  { KEYFILE_HASHES, 0664, 0, "writable by group or others" },
  { KEYFILE_HASHES, 0644, 0, NULL },
  { KEYFILE_HASHES, 0444, 0, NULL },   /* a Kubernetes secret's default */
  { KEYFILE_HASHES, 0600, 0, NULL },
  /* a secret: nothing for others; the group may read root's */
  { KEYFILE_PRIVATE, 0644, 0, "holds a secret that others may read: chmod "
    "0" },
  { KEYFILE_PRIVATE, 0604, 0, "that others may read" },
  { KEYFILE_PRIVATE, 0660, 0, "that its group may change" },
  { KEYFILE_PRIVATE, 0600, 0, NULL },
  { KEYFILE_PRIVATE, 0400, 0, NULL },
  { KEYFILE_PRIVATE, 0640, 1, NULL },
  { KEYFILE_PRIVATE, 0440, 1, NULL },
};

Test(keyfile, each_mode_is_taken_or_refused_naming_file_mode_and_fix)
{
  char err[512], mode[16];
  size_t i, n;
  int r;

  for (i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
    if (modes[i].root_only && geteuid() != 0)
      continue;                 /* the group's read: root-owned only */
    r = read_mode(modes[i].mode, modes[i].kind, err, sizeof(err));
    if (!modes[i].says) {
      cr_assert_eq(r, 0, "mode %04o: %s", (unsigned)modes[i].mode, err);
      continue;
    }
    cr_assert_eq(r, -EPERM, "mode %04o taken", (unsigned)modes[i].mode);
    snprintf(mode, sizeof(mode), "mode %04o", (unsigned)modes[i].mode);
    cr_assert_not_null(strstr(err, mode), "%s", err);
    cr_assert_not_null(strstr(err, modes[i].says), "%s", err);
    /* the message begins and ends with the file: the fix names it */
    n = strlen(path);
    cr_assert_eq(strncmp(err, path, n), 0, "%s", err);
    cr_assert(strlen(err) > n && strcmp(err + strlen(err) - n, path) == 0,
              "%s", err);
  }
}

/* keyfile_check() of "/k", a regular file of mode and owner, for a
   qrsd running as uid 998. */
static int
check_as_998(mode_t mode, uid_t owner, enum keyfile_kind kind, char *err,
             size_t errlen)
{
  struct stat st;

  memset(&st, 0, sizeof(st));
  st.st_mode = S_IFREG | mode;
  st.st_uid = owner;
  return keyfile_check("/k", &st, kind, 998, err, errlen);
}

/* qrsd's own user (not root) may not share its private key with a
   group; only a root-owned key may be 0640. */
Test(keyfile, private_key_of_qrsds_user_is_for_it_alone)
{
  char err[512];

  cr_assert_eq(check_as_998(0640, 998, KEYFILE_PRIVATE, err, sizeof(err)),
               -EPERM);
  cr_assert_not_null(strstr(err, "chmod 0600 /k"), "%s", err);
  cr_assert_eq(check_as_998(0600, 998, KEYFILE_PRIVATE, err, sizeof(err)),
               0);
  cr_assert_eq(check_as_998(0640, 0, KEYFILE_PRIVATE, err, sizeof(err)), 0,
               "%s", err);
}

Test(keyfile, a_file_of_another_user_is_refused_naming_the_owner)
{
  char err[512];

  cr_assert_eq(check_as_998(0600, 1000, KEYFILE_HASHES, err, sizeof(err)),
               -EPERM);
  cr_assert_not_null(strstr(err, "owned by uid 1000"), "%s", err);
  cr_assert_not_null(strstr(err, "chown root /k"), "%s", err);
  cr_assert_eq(check_as_998(0600, 1000, KEYFILE_PRIVATE, err, sizeof(err)),
               -EPERM);
  if (geteuid() != 0)
    return;
  cr_assert_eq(chown(path, 65534, 65534), 0);
  cr_assert_eq(read_mode(0600, KEYFILE_HASHES, err, sizeof(err)), -EPERM);
  cr_assert_not_null(strstr(err, "owned by uid 65534"), "%s", err);
}

/* Kubernetes mounts a secret as key -> ..data/key -> ..2024_01/key, a
   read-only file of mode 0444 (or 0440) owned by root: the file at the
   end of the chain is what is checked. */
Test(keyfile, a_symlink_chain_to_a_root_owned_read_only_file_is_taken)
{
  char d1[160], d2[160], link1[200], link2[200], target[200], err[512];
  char *buf = NULL;

  if (geteuid() != 0)
    cr_skip_test("needs root to own the file as root");
  snprintf(d1, sizeof(d1), "%s/..2024_01_01", dir);
  snprintf(d2, sizeof(d2), "%s/..data", dir);
  cr_assert_eq(mkdir(d1, 0755), 0);
  snprintf(target, sizeof(target), "%s/api_keys", d1);
  cr_assert_eq(rename(path, target), 0);
  cr_assert_eq(chmod(target, 0444), 0);
  cr_assert_eq(symlink("..2024_01_01", d2), 0);
  snprintf(link1, sizeof(link1), "%s/api_keys", dir);
  cr_assert_eq(symlink("..data/api_keys", link1), 0);
  cr_assert_eq(keyfile_read(link1, KEYFILE_HASHES, 4096, &buf, NULL, err,
                            sizeof(err)), 0, "%s", err);
  free(buf);
  buf = NULL;
  /* A private key mounted the same way, 0440. */
  cr_assert_eq(chmod(target, 0440), 0);
  cr_assert_eq(keyfile_read(link1, KEYFILE_PRIVATE, 4096, &buf, NULL, err,
                            sizeof(err)), 0, "%s", err);
  free(buf);
  buf = NULL;
  /* The link's own mode (0777) is not what counts, the file's is. */
  cr_assert_eq(chmod(target, 0666), 0);
  cr_assert_eq(keyfile_read(link1, KEYFILE_HASHES, 4096, &buf, NULL, err,
                            sizeof(err)), -EPERM);
  cr_assert_not_null(strstr(err, "mode 0666"), "%s", err);
  cr_assert_null(buf);
  /* A link into /tmp to a file anyone may write: refused. */
  snprintf(link2, sizeof(link2), "%s/tmp-link", dir);
  cr_assert_eq(symlink(target, link2), 0);
  cr_assert_eq(keyfile_read(link2, KEYFILE_HASHES, 4096, &buf, NULL, err,
                            sizeof(err)), -EPERM);
  cr_assert_null(buf);
}
