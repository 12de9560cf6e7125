/* Why qrsd's socket cannot be bound (daemon/server/sockfile.c, through
   server_listen_path()): a missing directory is named as missing (libuv
   reports it as EACCES), a directory we may not write or search names its
   owner and mode and who we are, and a directory that explains nothing leaves
   the error as it was. */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <criterion/criterion.h>
#include <uv.h>

#include "server/server.h"
#include "server/sockfile.h"
#include "testutil.h"

static char dir[64];

static void
setup(void)
{
  test_tmpdir(dir, sizeof(dir), "qrs-sockfile");
}

static void
teardown(void)
{
  chmod(dir, 0700);
  test_tmpdir_remove(dir);
}

TestSuite(sockfile, .init = setup, .fini = teardown);

/* server_listen_path(path) on a fresh loop: its return and err. */
static int
listen_error(const char *path, char *err, size_t len)
{
  struct qrsd_conf conf;
  struct server srv;
  uv_loop_t loop;
  int r;

  memset(&conf, 0, sizeof(conf));
  conf.socket_mode = 0660;
  conf.socket_group = (char *)"";
  cr_assert_eq(uv_loop_init(&loop), 0);
  memset(&srv, 0, sizeof(srv));
  srv.loop = &loop;
  srv.conf = &conf;
  err[0] = '\0';
  r = server_listen_path(&srv, path, err, len);
  if (srv.listener_open)
    uv_close((uv_handle_t *)&srv.listener, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  cr_assert_eq(uv_loop_close(&loop), 0);
  free(srv.socket_path);
  return r;
}

/* listen_error() as an unprivileged user: as uid 65534 in a child when
   we are root (root may write anywhere), else as ourselves. */
static int
listen_error_unprivileged(const char *path, char *err, size_t len)
{
  int fds[2], status, r;
  ssize_t n;
  pid_t pid;

  if (geteuid() != 0)
    return listen_error(path, err, len);
  cr_assert_eq(pipe(fds), 0);
  pid = fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) {
    close(fds[0]);
    if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
      _exit(2);
    r = listen_error(path, err, len);
    if (write(fds[1], err, strlen(err)) < 0)
      _exit(3);
    _exit(r < 0 ? 0 : 1);
  }
  close(fds[1]);
  n = read(fds[0], err, len - 1);
  err[n > 0 ? n : 0] = '\0';
  close(fds[0]);
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "child: status %d, err '%s'", status, err);
  return -EACCES;
}

/* "uid N (name)" of the user listen_error_unprivileged() runs as. */
static void
unprivileged_user(char *buf, size_t len)
{
  struct passwd *pw;
  uid_t uid;

  uid = geteuid() == 0 ? 65534 : geteuid();
  pw = getpwuid(uid);
  if (pw)
    snprintf(buf, len, "uid %u (%s)", (unsigned)uid, pw->pw_name);
  else
    snprintf(buf, len, "uid %u", (unsigned)uid);
}

/* The owner of path as sockfile.c names it, when both have names. */
static void
owner_of(const char *path, char *buf, size_t len)
{
  struct stat st;
  struct passwd *pw;

  cr_assert_eq(stat(path, &st), 0);
  pw = getpwuid(st.st_uid);
  cr_assert_not_null(pw);
  snprintf(buf, len, "(owner %s:", pw->pw_name);
}

Test(sockfile, a_missing_directory_is_named_as_missing)
{
  char path[128], err[512], want[256];

  snprintf(path, sizeof(path), "%s/no/such/dir/q.sock", dir);
  cr_assert_lt(listen_error(path, err, sizeof(err)), 0);
  snprintf(want, sizeof(want), "cannot bind %s: directory %s/no/such/dir "
           "does not exist", path, dir);
  cr_assert_str_eq(err, want);
}

Test(sockfile, a_directory_we_may_not_write_names_its_owner)
{
  char sub[128], path[160], err[512], want[512], who[128], owner[160];

  snprintf(sub, sizeof(sub), "%s/ro", dir);
  snprintf(path, sizeof(path), "%s/q.sock", sub);
  cr_assert_eq(mkdir(sub, 0755), 0);
  cr_assert_eq(chmod(sub, 0555), 0);
  cr_assert_eq(chmod(dir, 0755), 0);
  cr_assert_lt(listen_error_unprivileged(path, err, sizeof(err)), 0);
  unprivileged_user(who, sizeof(who));
  owner_of(sub, owner, sizeof(owner));
  snprintf(want, sizeof(want), "cannot bind %s: permission denied: "
           "directory %s %s", path, sub, owner);
  cr_assert(!strncmp(err, want, strlen(want)), "'%s' does not start "
            "with '%s'", err, want);
  snprintf(want, sizeof(want), ", mode 0555) is not writable by %s", who);
  cr_assert_not_null(strstr(err, want), "'%s' lacks '%s'", err, want);
}

Test(sockfile, a_directory_we_may_not_search_is_named)
{
  char sub[128], path[200], err[512], want[512], who[128];

  snprintf(sub, sizeof(sub), "%s/closed", dir);
  snprintf(path, sizeof(path), "%s/inner/q.sock", sub);
  cr_assert_eq(mkdir(sub, 0700), 0);
  snprintf(want, sizeof(want), "%s/inner", sub);
  cr_assert_eq(mkdir(want, 0777), 0);
  cr_assert_eq(chmod(dir, 0755), 0);
  if (geteuid() != 0)
    cr_assert_eq(chmod(sub, 0600), 0);   /* not even for ourselves */
  cr_assert_lt(listen_error_unprivileged(path, err, sizeof(err)), 0);
  unprivileged_user(who, sizeof(who));
  snprintf(want, sizeof(want), "directory %s (owner ", sub);
  cr_assert_not_null(strstr(err, want), "'%s' lacks '%s'", err, want);
  snprintf(want, sizeof(want), "cannot be searched by %s", who);
  cr_assert_not_null(strstr(err, want), "'%s' lacks '%s'", err, want);
  chmod(sub, 0700);
}

Test(sockfile, a_file_in_place_of_the_directory_is_named)
{
  char file[128], path[160], err[512], want[512];
  FILE *f;

  snprintf(file, sizeof(file), "%s/file", dir);
  f = fopen(file, "w");
  cr_assert_not_null(f);
  fclose(f);
  snprintf(path, sizeof(path), "%s/q.sock", file);
  cr_assert_lt(listen_error(path, err, sizeof(err)), 0);
  snprintf(want, sizeof(want), "cannot bind %s: %s is not a directory", path,
           file);
  cr_assert_str_eq(err, want);
}

Test(sockfile, a_usable_directory_explains_nothing)
{
  char path[128], buf[64];

  snprintf(path, sizeof(path), "%s/q.sock", dir);
  strcpy(buf, "untouched");
  cr_assert_eq(sockfile_dir_problem(path, buf, sizeof(buf)), 0);
  cr_assert_str_eq(buf, "untouched");
  cr_assert_eq(sockfile_dir_problem("q.sock", buf, sizeof(buf)), 0);
  cr_assert_str_eq(buf, "untouched");
}
