/* Integration: qrsd against hostile clients and hard edges (issue 11,
   items 1-11).  Each test here failed against the daemon before its fix. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <criterion/criterion.h>

#include <qrs/client.h>

#include "harness.h"

static struct daemon D;

static void
stop_and_clean(void)
{
  daemon_cleanup(&D);
}

static struct qrs_client *
connect_client(const char *sock)
{
  struct qrs_client *c;
  int r;

  r = qrs_client_new(sock, NULL, &c);
  cr_assert_eq(r, 0, "qrs_client_new(%s): %s", sock, qrs_strerror(r));
  return c;
}

static void
assert_draw_works(const char *sock)
{
  struct qrs_client *c;
  struct qrs_draw d;
  int r;

  c = connect_client(sock);
  r = qrs_client_draw(c, NULL, &d);
  cr_assert_eq(r, 0, "draw: %s", qrs_strerror(r));
  cr_assert(d.u > 0 && d.u < 1);
  qrs_client_free(c);
}

/* Wait up to ms for pid; its exit status, or -1 if it still runs (then it
   is killed). */
static int
wait_exit(pid_t pid, int ms)
{
  int st, i;

  for (i = 0; i < ms / 10; i++) {
    if (waitpid(pid, &st, WNOHANG) == pid)
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    usleep(10000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  return -1;
}

/* ---- item 7: only ECONNREFUSED means a stale socket ------------------- */

Test(limits, unprivileged_second_daemon_does_not_steal_the_socket,
     .fini = stop_and_clean)
{
  char log[160], text[4096];
  pid_t pid;
  int fd, st;
  ssize_t n;

  if (geteuid() != 0)
    cr_skip_test("needs root to run the second qrsd as another user");
  daemon_run(&D, "socket: { mode: \"0600\", group: \"\" }\n");
  /* Anyone may create and remove files in the directory. */
  cr_assert_eq(chmod(D.dir, 0777), 0);
  snprintf(log, sizeof(log), "%s/second.log", D.dir);
  pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    dup2(fd, 2);
    if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
      _exit(99);
    execl(getenv("QRSD_BIN"), "qrsd", "--socket", D.sock, (char *)NULL);
    _exit(98);
  }
  st = wait_exit(pid, 5000);
  fd = open(log, O_RDONLY);
  n = fd >= 0 ? read(fd, text, sizeof(text) - 1) : 0;
  text[n > 0 ? n : 0] = '\0';
  if (fd >= 0)
    close(fd);
  cr_assert_eq(st, 1, "the second qrsd must refuse (status %d): %s", st,
               text);
  cr_assert(strstr(text, "Permission denied"), "%s", text);
  cr_assert_null(strstr(text, "removing stale socket"), "%s", text);
  assert_draw_works(D.sock);
}

/* ---- item 6: truthful labels; test sources only when allowed ---------- */

Test(limits, mock_posing_as_system_is_refused_without_allow_test_sources,
     .fini = stop_and_clean, .timeout = 30)
{
  char out[4096], err[4096];
  char *argv[] = { (char *)getenv("QRSD_BIN"), (char *)"-c", D.conf,
                   (char *)"--socket", D.sock, NULL };

  daemon_prepare(&D, "default_source: system\n"
                     "sources:\n"
                     "  system: { type: mock, seed: 5 }\n");
  cr_assert_eq(run_capture(argv, out, sizeof(out), err, sizeof(err)), 1,
               "qrsd must refuse to start: %s", err);
  cr_assert(strstr(err, "qrsd.yaml:3: sources.system: a mock source is for "
                   "tests only"), "%s", err);
  cr_assert_neq(access(D.sock, F_OK), 0);
}

Test(limits, replies_name_the_serving_type_and_production_flag,
     .fini = stop_and_clean)
{
  const struct qrs_server_info *info;
  struct qrs_bytes_info bi;
  struct qrs_client *c;
  struct qrs_draw d;
  char out[4096], err[1024];
  uint8_t buf[16];
  char *argv[] = { (char *)getenv("QRSCTL_BIN"), (char *)"--socket", D.sock,
                   (char *)"draw", NULL };

  daemon_run(&D, "allow_test_sources: true\n"
                 "default_source: system\n"
                 "sources:\n"
                 "  system: { type: mock, seed: 5 }\n"
                 "  real: { type: system }\n");
  c = connect_client(D.sock);
  info = qrs_client_server_info(c);
  cr_assert_str_eq(info->default_source_type, "mock");
  cr_assert_not(info->default_production);
  cr_assert(info->test_sources_allowed);
  cr_assert_eq(qrs_client_draw(c, NULL, &d), 0);
  cr_assert_str_eq(d.served_by, "system");
  cr_assert_str_eq(d.served_type, "mock");
  cr_assert_not(d.production);
  cr_assert_eq(qrs_client_bytes(c, "real", buf, sizeof(buf), &bi), 0);
  cr_assert_str_eq(bi.served_type, "system");
  cr_assert(bi.production);
  qrs_client_free(c);
  cr_assert_eq(run_capture(argv, out, sizeof(out), err, sizeof(err)), 0,
               "%s", err);
  cr_assert(strstr(out, "[TEST SOURCE: mock, not for production]"), "%s",
            out);
}

/* ---- item 9: replies larger than max_frame_bytes ----------------------- */

Test(limits, status_of_many_sources_fits_a_small_max_frame_bytes,
     .fini = stop_and_clean)
{
  char yaml[2048], out[16384], err[1024];
  char *argv[] = { (char *)getenv("QRSCTL_BIN"), (char *)"--socket", D.sock,
                   (char *)"status", NULL };
  struct qrs_status *st;
  struct qrs_client *c;
  size_t len;
  int i;

  len = (size_t)snprintf(yaml, sizeof(yaml), "limits: { max_frame_bytes: "
                         "1024 }\nsources:\n");
  for (i = 0; i < 13; i++)
    len += (size_t)snprintf(yaml + len, sizeof(yaml) - len,
                            "  system%02d: { type: system }\n", i);
  snprintf(yaml + len, sizeof(yaml) - len, "default_source: system00\n");
  daemon_run(&D, yaml);
  c = connect_client(D.sock);
  cr_assert_gt(qrs_client_server_info(c)->max_reply_bytes, 1024);
  cr_assert_eq(qrs_client_status(c, &st), 0, "%s", qrs_client_errmsg(c));
  cr_assert_eq(st->n_sources, 13);
  qrs_status_free(st);
  qrs_client_free(c);
  cr_assert_eq(run_capture(argv, out, sizeof(out), err, sizeof(err)), 0,
               "%s", err);
  cr_assert(strstr(out, "system12"), "%s", out);
}
