/* Integration: qrsd against hostile clients and hard edges.  Each test
   here failed against the daemon before its fix. */
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
#include "harness_client.h"

static struct daemon D;

static void
stop_and_clean(void)
{
  daemon_cleanup(&D);
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

/* In a child about to exec qrsd: close criterion's descriptors too. */
static void
close_from(int lowfd)
{
  int fd;

  for (fd = lowfd; fd < 1024; fd++)
    close(fd);
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
    close_from(3);
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
  char err[4096];

  daemon_prepare(&D, "default_source: system\n"
                     "sources:\n"
                     "  system: { type: mock, seed: 5 }\n");
  cr_assert_eq(daemon_try_start(&D, NULL, err, sizeof(err)), 1,
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

/* STATUS through c succeeds, whole, with n_sources sources. */
static void
assert_status_lists(struct qrs_client *c, size_t n_sources)
{
  struct qrs_status *st;

  cr_assert_eq(qrs_client_status(c, &st), 0, "%s", qrs_client_errmsg(c));
  cr_assert_eq(st->n_sources, n_sources);
  qrs_status_free(st);
}

Test(limits, status_of_many_sources_fits_a_small_max_frame_bytes,
     .fini = stop_and_clean)
{
  char yaml[2048], out[16384], err[1024];
  char *argv[] = { (char *)getenv("QRSCTL_BIN"), (char *)"--socket", D.sock,
                   (char *)"status", NULL };
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
  assert_status_lists(c, 13);
  qrs_client_free(c);
  cr_assert_eq(run_capture(argv, out, sizeof(out), err, sizeof(err)), 0,
               "%s", err);
  cr_assert(strstr(out, "system12"), "%s", out);
}

/* Local sources report statistics and their mechanisms in SourceInfo
   (a noise source with every mechanism is over 2 KiB before its first
   read): STATUS with five of them failed at max_frame_bytes 1024 with
   "Malformed frame or payload", because libqrs bounded the unpacked reply
   by the request limit instead of the reply limit (max_reply_bytes), and
   qrsd's reply limit now counts each local source's statistics at their
   bounds. */
Test(limits, status_of_local_sources_fits_a_small_max_frame_bytes,
     .fini = stop_and_clean)
{
  char out[65536], err[1024];
  char *argv[] = { (char *)getenv("QRSCTL_BIN"), (char *)"--socket", D.sock,
                   (char *)"--json", (char *)"sources", NULL };
  struct qrs_client *c;

  daemon_run(&D, "limits: { max_frame_bytes: 1024 }\n"
                 "default_source: system\n"
                 "sources:\n"
                 "  system: { type: system }\n"
                 "  noise1: { type: noise }\n"
                 "  noise2: { type: noise, combine: concat }\n"
                 "  noise3: { type: noise, conditioning: sha256 }\n"
                 "  noise4: { type: noise, conditioning: vonneumann }\n"
                 "  noise5: { type: noise, combine: concat, "
                 "conditioning: sha256 }\n"
                 "  jitter: { type: timing }\n");
  c = connect_client(D.sock);
  assert_status_lists(c, 7);
  qrs_client_free(c);
  cr_assert_eq(run_capture(argv, out, sizeof(out), err, sizeof(err)), 0,
               "%s", err);
  cr_assert(strstr(out, "noise2") && strstr(out, "mechanisms"), "%s", out);
}

/* ---- item 3: silent connections, deadlines, per-uid cap, BUSY --------- */

Test(limits, silent_connection_is_closed_at_the_hello_deadline,
     .fini = stop_and_clean)
{
  int fd;

  daemon_run(&D, "limits: { hello_timeout_ms: 300 }\n");
  fd = raw_connect(D.sock);
  /* Nothing sent: an ERROR_TIMEOUT (seq 0) and the end, well within the
     harness's 5 s. */
  cr_assert_eq(raw_expect_error_eof(fd, QRS_E_TIMEOUT), 0);
  assert_draw_works(D.sock);
}

Test(limits, half_sent_frame_is_closed_at_the_frame_deadline,
     .fini = stop_and_clean)
{
  uint8_t hdr[QRS_FRAME_HDR_SIZE];
  int fd;

  daemon_run(&D, "limits: { frame_timeout_ms: 300 }\n");
  fd = raw_connect_hello(D.sock);
  raw_frame_hdr(hdr, QRS_MSG_STATUS, 10, 3);
  raw_send(fd, hdr, sizeof(hdr));       /* the payload never comes */
  cr_assert_eq(raw_expect_error_eof(fd, QRS_E_TIMEOUT), 0);
}

Test(limits, per_uid_cap_answers_busy_to_the_hello_and_clients_say_busy,
     .fini = stop_and_clean)
{
  char out[4096], err[4096];
  char *argv[] = { (char *)getenv("QRSCTL_BIN"), (char *)"--socket", D.sock,
                   (char *)"draw", NULL };
  struct qrs_client *c;
  int a, b, r;

  daemon_run(&D, "limits: { max_connections_per_uid: 2 }\n");
  a = raw_connect_hello(D.sock);
  b = raw_connect_hello(D.sock);
  raw_expect_hello_busy(D.sock, 77);
  /* libqrs and qrsctl report BUSY, not a lost connection. */
  r = qrs_client_new(D.sock, NULL, &c);
  cr_assert_eq(r, QRS_E_BUSY, "qrs_client_new: %s", qrs_strerror(r));
  cr_assert_eq(run_capture(argv, out, sizeof(out), err, sizeof(err)), 2);
  cr_assert(strstr(err, qrs_strerror(QRS_E_BUSY)), "%s", err);
  cr_assert_null(strstr(err, "lost"), "%s", err);
  close(a);
  close(b);
  usleep(100000);
  assert_draw_works(D.sock);
}

Test(limits, request_above_its_type_cap_is_refused_before_buffering,
     .fini = stop_and_clean)
{
  uint8_t hdr[QRS_FRAME_HDR_SIZE];
  int fd;

  daemon_run(&D, NULL);
  fd = raw_connect(D.sock);
  /* Before HELLO, a 1 MiB - 1 STATUS: refused on its header alone. */
  raw_frame_hdr(hdr, QRS_MSG_STATUS, 1048575, 12);
  raw_send(fd, hdr, sizeof(hdr));
  cr_assert_eq(raw_expect_error_eof(fd, QRS_E_TOO_LARGE), 12);
  cr_assert(daemon_log_contains(&D, "exceeds the 64-byte limit of its "
                                "type"));
}

/* ---- item 1: unread replies pin bounded memory ------------------------- */

static long
rss_kib(pid_t pid)
{
  char path[64], line[256];
  long kib;
  FILE *f;

  snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  f = fopen(path, "r");
  cr_assert_not_null(f);
  kib = -1;
  while (fgets(line, sizeof(line), f))
    if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
      break;
  fclose(f);
  return kib;
}

Test(limits, unread_replies_are_bounded_and_answered_busy,
     .fini = stop_and_clean, .timeout = 120)
{
  QrsIpc__Bytes m = QRS_IPC__BYTES__INIT;
  int fd, busy, data;
  long rss, rss0;

  daemon_run(&D, NULL);
  fd = raw_connect_hello(D.sock);
  rss0 = rss_kib(D.pid);
  /* 64 pipelined BYTES of ~1 MiB, and no reading. */
  m.count = 1048064;
  raw_send_many(fd, QRS_MSG_BYTES, 100, 64, &m.base);
  usleep(1500000);
  rss = rss_kib(D.pid);
  cr_log_info("qrsd RSS with 64 unread 1 MiB replies requested: %ld KiB "
              "(%ld KiB before)", rss, rss0);
  /* Before the budget every reply was kept: over 64 MiB more.  The growth
     is what counts (a sanitized qrsd starts far larger). */
  cr_assert_lt(rss - rss0, 32 * 1024, "RSS %ld KiB, %ld KiB before", rss,
               rss0);
  data = raw_recv_count(fd, 64, 100, QRS_MSG_BYTES_REPLY, &busy);
  cr_log_info("%d replies, %d BUSY", data, busy);
  cr_assert_geq(busy, 48, "%d BUSY of 64", busy);
  cr_assert_geq(data, 1);
  close(fd);
  assert_draw_works(D.sock);
}

/* ---- item 5: timeouts count toward health; reads per client ----------- */

Test(limits, a_timeout_marks_the_source_failing, .fini = stop_and_clean)
{
  QrsIpc__Draw m = QRS_IPC__DRAW__INIT;
  char out[8192], err[1024];
  char *argv[] = { (char *)getenv("QRSCTL_BIN"), (char *)"--socket", D.sock,
                   (char *)"health", NULL };
  int fd, st;

  /* 16 MiB from getrandom take far more than 1 ms. */
  daemon_run(&D, "limits: { request_timeout_ms: 1, max_sample_count: "
                 "16777216 }\n");
  fd = raw_connect_hello(D.sock);
  m.sample_count = 16777216;
  raw_send_msg(fd, QRS_MSG_DRAW, 5, &m.base);
  cr_assert_eq(raw_expect_error(fd, QRS_E_TIMEOUT), 5);
  close(fd);
  st = run_capture(argv, out, sizeof(out), err, sizeof(err));
  cr_assert_eq(st, 2, "health must say failed (status %d): %s", st, out);
  cr_assert(strstr(out, "timed out") || strstr(out, "not delivered"), "%s",
            out);
}

Test(limits, one_client_cannot_take_every_worker_read,
     .fini = stop_and_clean)
{
  QrsIpc__Draw m = QRS_IPC__DRAW__INIT;
  struct qrs_frame_hdr h;
  int a, b, busy;
  uint8_t *p;

  daemon_run(&D, "limits: { max_sample_count: 16777216 }\n");
  a = raw_connect_hello(D.sock);
  b = raw_connect_hello(D.sock);
  m.sample_count = 16777216;
  raw_send_many(a, QRS_MSG_DRAW, 10, 8, &m.base);
  usleep(20000);
  /* While a's reads run, b still gets a worker read. */
  raw_send_msg(b, QRS_MSG_DRAW, 99, &m.base);
  cr_assert_eq(raw_recv(b, &h, &p), 0);
  cr_assert_eq(h.seq, 99);
  cr_assert_eq(h.type, QRS_MSG_DRAW_REPLY, "b got %s%s",
               qrs__msg_name(h.type),
               h.type == QRS_MSG_ERROR ? " (BUSY?)" : "");
  free(p);
  raw_recv_count(a, 8, 10, QRS_MSG_DRAW_REPLY, &busy);
  cr_assert_geq(busy, 4, "a's share is bounded: %d BUSY of 8", busy);
  close(a);
  close(b);
}

/* ---- item 2: logging never blocks the loop, and is rate-limited ------- */

/* Connect to sock, retrying for up to 5 s; the fd. */
static int
connect_retry(const char *sock)
{
  struct qrs_client *c;
  int i;

  for (i = 0; i < 500; i++) {
    if (qrs_client_new(sock, NULL, &c) == 0) {
      qrs_client_free(c);
      return 0;
    }
    usleep(10000);
  }
  return -1;
}

static pid_t stalled_pid = -1;

static void
kill_stalled(void)
{
  if (stalled_pid > 0) {
    kill(stalled_pid, SIGKILL);
    waitpid(stalled_pid, NULL, 0);
  }
}

Test(limits, a_stalled_stderr_does_not_stall_the_daemon, .timeout = 120,
     .fini = kill_stalled)
{
  char dir[] = "/tmp/qrs-log-XXXXXX", sock[128];
  int p[2], i, fd, st;
  pid_t pid;

  cr_assert_not_null(mkdtemp(dir));
  snprintf(sock, sizeof(sock), "%s/qrsd.sock", dir);
  cr_assert_eq(pipe(p), 0);
  pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    dup2(p[1], 2);
    close_from(3);
    execl(getenv("QRSD_BIN"), "qrsd", "-v", "--socket", sock, (char *)NULL);
    _exit(98);
  }
  stalled_pid = pid;
  close(p[1]);                          /* p[0] is never read */
  cr_assert_eq(connect_retry(sock), 0);
  /* Debug lines for every connection: far more than a pipe holds. */
  for (i = 0; i < 2000; i++) {
    fd = raw_connect_hello(sock);
    close(fd);
  }
  assert_draw_works(sock);
  cr_assert_eq(kill(pid, SIGTERM), 0);
  st = wait_exit(pid, 10000);
  stalled_pid = -1;
  cr_assert_eq(st, 0, "qrsd did not stop cleanly on SIGTERM (%d)", st);
  close(p[0]);
  unlink(sock);
  rmdir(dir);
}

Test(limits, repeated_bad_frames_are_logged_with_a_limit,
     .fini = stop_and_clean, .timeout = 120)
{
  char line[1024];
  int i, fd, lines;
  FILE *f;

  daemon_run(&D, NULL);
  for (i = 0; i < 3000; i++) {
    fd = raw_connect(D.sock);
    raw_send(fd, "JUNKJUNKJUNKJUNKJUNK", 20);
    raw_expect_error(fd, QRS_E_PROTOCOL);
    close(fd);
  }
  assert_draw_works(D.sock);
  usleep(200000);
  f = fopen(D.log, "r");
  cr_assert_not_null(f);
  lines = 0;
  while (fgets(line, sizeof(line), f))
    lines++;
  fclose(f);
  cr_assert_lt(lines, 300, "%d log lines for 3000 bad frames", lines);
  /* The next one after a quiet window says how many were left out. */
  sleep(11);
  fd = raw_connect(D.sock);
  raw_send(fd, "JUNKJUNKJUNKJUNKJUNK", 20);
  raw_expect_error(fd, QRS_E_PROTOCOL);
  close(fd);
  usleep(200000);
  cr_assert(daemon_log_contains(&D, "similar messages suppressed"));
}

/* ---- item 8: socket ownership by path ---------------------------------- */

/* Run the next daemon_start() with the shim preloaded and var=value. */
static void
preload_shim(const char *var, const char *value)
{
  char asan[512];
  const char *a;

  cr_assert_not_null(getenv("QRS_SHIM_SOCK"));
  setenv("LD_PRELOAD", getenv("QRS_SHIM_SOCK"), 1);
  setenv(var, value, 1);
  /* An ASan qrsd accepts a preloaded library after its runtime. */
  a = getenv("ASAN_OPTIONS");
  snprintf(asan, sizeof(asan), "%s%sverify_asan_link_order=0", a ? a : "",
           a && *a ? ":" : "");
  setenv("ASAN_OPTIONS", asan, 1);
}

static void
unload_shim(const char *var)
{
  unsetenv("LD_PRELOAD");
  unsetenv(var);
}

Test(limits, a_symlink_in_place_of_the_socket_is_not_followed,
     .fini = stop_and_clean)
{
  char victim[160];
  struct stat st;
  int fd;

  daemon_prepare(&D, "socket: { mode: \"0666\", group: \"\" }\n");
  snprintf(victim, sizeof(victim), "%s/victim", D.dir);
  fd = open(victim, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  cr_assert_geq(fd, 0);
  close(fd);
  cr_assert_eq(chmod(victim, 0600), 0);
  preload_shim("QRS_SHIM_SWAP_VICTIM", victim);
  daemon_start(&D, NULL);
  unload_shim("QRS_SHIM_SWAP_VICTIM");
  cr_assert_eq(lstat(D.sock, &st), 0);
  cr_assert(S_ISLNK(st.st_mode), "the shim put a symlink in place");
  cr_assert_eq(stat(victim, &st), 0);
  cr_assert_eq(st.st_mode & 07777, 0600, "victim mode changed to %04o",
               st.st_mode & 07777);
}

Test(limits, socket_is_born_with_its_mode_and_a_big_group_is_found,
     .fini = stop_and_clean)
{
  struct stat st;

  daemon_prepare(&D, "socket: { mode: \"0640\", group: qrs-test-big }\n");
  preload_shim("QRS_SHIM_BIG_GROUP", "qrs-test-big:4242");
  daemon_start(&D, NULL);
  unload_shim("QRS_SHIM_BIG_GROUP");
  cr_assert_eq(lstat(D.sock, &st), 0);
  cr_assert(S_ISSOCK(st.st_mode));
  cr_assert_eq(st.st_mode & 0777, 0640, "mode %04o", st.st_mode & 0777);
  cr_assert_eq(st.st_gid, 4242, "group %u: the ERANGE retry failed",
               (unsigned)st.st_gid);
  cr_assert_not(daemon_log_contains(&D, "does not exist"));
}

/* ---- item 11: a second SIGTERM during shutdown ------------------------- */

/* Closing the signal handles restored the default action before SIG_IGN
   was set: the shim delivers a SIGTERM exactly in that window. */
Test(limits, a_signal_in_the_shutdown_window_does_not_kill_the_daemon,
     .fini = stop_and_clean)
{
  daemon_prepare(&D, NULL);
  preload_shim("QRS_SHIM_SIGNAL_IN_WINDOW", "1");
  daemon_start(&D, NULL);
  unload_shim("QRS_SHIM_SIGNAL_IN_WINDOW");
  assert_draw_works(D.sock);
  cr_assert_eq(daemon_stop(&D), 0, "killed by the second signal");
}

/* ---- administrators keep connections at max_connections --------------- */

/* In a child running as uid 65534: connect and HELLO until a HELLO is
   answered BUSY (at most 64 times), then open 80 more connections that
   never say HELLO; write to out how many were served (one byte, 255 if no
   BUSY came), then hold them all until hold is closed. */
static void
hold_as_nobody(const char *sock, int out, int hold)
{
  struct qrs_frame_hdr h;
  uint8_t *p, served;
  int fd, i;
  char c;

  if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
    _exit(2);
  served = 255;
  for (i = 0; i < 64; i++) {
    fd = raw_connect(sock);
    raw_send_hello(fd, 5);
    if (raw_recv(fd, &h, &p) < 0)
      _exit(3);
    free(p);
    if (h.type == QRS_MSG_ERROR) {
      served = (uint8_t)i;
      break;
    }
  }
  /* Then a flood: more connections than qrsd keeps to answer BUSY
     (beyond them it closes new ones at once), never a HELLO. */
  for (i = 0; i < 80; i++)
    raw_connect(sock);
  if (write(out, &served, 1) != 1)
    _exit(4);
  while (read(hold, &c, 1) > 0)
    ;
  _exit(0);
}

Test(limits, administrators_are_served_when_clients_hold_every_connection,
     .fini = stop_and_clean)
{
  char out[8192], err[4096];
  int tochild[2], fromchild[2], fd, st;
  uint8_t served;
  pid_t pid;

  if (geteuid() != 0)
    cr_skip_test("needs root to hold connections as another user");
  /* The default reserve: 4 of 8 are kept for administrators. */
  daemon_run(&D, "socket: { mode: \"0666\", group: \"\" }\n"
                 "limits: { max_connections: 8 }\n");
  cr_assert_eq(chmod(D.dir, 0755), 0);
  cr_assert_eq(pipe(tochild), 0);
  cr_assert_eq(pipe(fromchild), 0);
  pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    close(tochild[1]);
    close(fromchild[0]);
    hold_as_nobody(D.sock, fromchild[1], tochild[0]);
  }
  close(tochild[0]);
  close(fromchild[1]);
  cr_assert_eq(read(fromchild[0], &served, 1), 1, "the holder failed");
  /* An ordinary client got max_connections less the reserve. */
  cr_expect_eq(served, 4, "uid 65534 was served %u connections of 8",
               served);
  /* Root still gets its health and status. */
  cr_assert_eq(run_qrsctl(D.sock, out, sizeof(out), err, sizeof(err),
                          "health", NULL), 0, "health: %s", err);
  cr_assert_eq(run_qrsctl(D.sock, out, sizeof(out), err, sizeof(err),
                          "status", NULL), 0, "status: %s", err);
  cr_assert(daemon_log_contains(&D, "4 connections for non-administrators "
                                "(limits.reserved_admin_connections) is "
                                "the limit"));
  /* A reserved connection serves no DRAW. */
  fd = raw_connect_hello(D.sock);
  raw_send_draw(fd, 9, "", 100);
  cr_assert_eq(raw_expect_error(fd, QRS_E_BUSY), 9);
  close(fd);
  close(tochild[1]);
  close(fromchild[0]);
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "holder status %d", st);
  /* Once the clients left, root draws again. */
  usleep(100000);
  assert_draw_works(D.sock);
}

/* ---- key files others could change or read ----------------------------- */

/* The compat endpoint on a unix socket with api_keys at keys (and, with
   cert, TLS on a TCP port). */
static void
compat_yaml(char *yaml, size_t len, const char *keys, const char *cert,
            const char *key)
{
  if (cert)
    snprintf(yaml, len, "state_dir: %s\nstatus_file: \"\"\n"
             "grpc_compat: { listen: \"127.0.0.1:0\", source: system, "
             "api_keys: \"%s\", tls_cert: \"%s\", tls_key: \"%s\" }\n",
             D.dir, keys, cert, key);
  else
    snprintf(yaml, len, "state_dir: %s\nstatus_file: \"\"\n"
             "grpc_compat: { listen: \"unix:%s/compat.sock\", "
             "source: system, api_keys: \"%s\" }\n", D.dir, D.dir, keys);
}

/* An api_keys file at path with one key, alice's (the SHA-256 of
   "hello"). */
static void
write_alice_keys(const char *path)
{
  write_text_file(path, "alice 2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7"
                  "425e73043362938b9824\n");
}

static void
assert_has(const char *err, const char *want)
{
  cr_assert_not_null(strstr(err, want), "'%s' lacks '%s'", err, want);
}

/* qrsd must not start on yaml (with what: the reason it must not), and
   say want; its error is left in err. */
static void
assert_refused(const char *yaml, const char *what, const char *want,
               char *err, size_t len)
{
  cr_assert_neq(daemon_try_start(&D, yaml, err, len), 0,
                "qrsd started with %s: %s", what, err);
  assert_has(err, want);
}

Test(limits, an_api_keys_file_others_may_write_stops_qrsd_naming_it,
     .fini = stop_and_clean, .timeout = 30)
{
  char keys[128], yaml[1024], err[4096], want[256];

  daemon_prepare(&D, NULL);
  snprintf(keys, sizeof(keys), "%s/api_keys", D.dir);
  write_alice_keys(keys);
  cr_assert_eq(chmod(keys, 0666), 0);
  compat_yaml(yaml, sizeof(yaml), keys, NULL, NULL);
  snprintf(want, sizeof(want), "%s (owner uid %u, mode 0666) is writable "
           "by group or others", keys, (unsigned)geteuid());
  assert_refused(yaml, "an api_keys file of mode 0666", want, err,
                 sizeof(err));
  snprintf(want, sizeof(want), "chmod go-w %s", keys);
  assert_has(err, want);
}

/* Kubernetes mounts a secret as a chain of links to a read-only file,
   0444 and root's: the file of hashes is taken. */
Test(limits, an_api_keys_file_behind_links_and_read_only_is_taken,
     .fini = stop_and_clean, .timeout = 30)
{
  char data[128], keys[160], link[128], yaml[1024];

  if (geteuid() != 0)
    cr_skip_test("needs root for a root-owned file");
  daemon_prepare(&D, NULL);
  snprintf(data, sizeof(data), "%s/..2024_01_01", D.dir);
  cr_assert_eq(mkdir(data, 0755), 0);
  snprintf(keys, sizeof(keys), "%s/api_keys", data);
  write_alice_keys(keys);
  cr_assert_eq(chmod(keys, 0444), 0);
  snprintf(link, sizeof(link), "%s/..data", D.dir);
  cr_assert_eq(symlink("..2024_01_01", link), 0);
  snprintf(link, sizeof(link), "%s/api_keys", D.dir);
  cr_assert_eq(symlink("..data/api_keys", link), 0);
  compat_yaml(yaml, sizeof(yaml), link, NULL, NULL);
  daemon_write_conf(&D, yaml);
  daemon_start(&D, NULL);
  cr_assert_eq(daemon_stop(&D), 0);
}

Test(limits, a_tls_key_others_may_read_stops_qrsd_naming_it,
     .fini = stop_and_clean, .timeout = 60)
{
  char keys[128], cert[128], key[128], cmd[512], yaml[1024], err[4096];
  char want[256];

  daemon_prepare(&D, NULL);
  snprintf(keys, sizeof(keys), "%s/api_keys", D.dir);
  write_alice_keys(keys);
  snprintf(cert, sizeof(cert), "%s/tls.pem", D.dir);
  snprintf(key, sizeof(key), "%s/tls.key", D.dir);
  snprintf(cmd, sizeof(cmd), "openssl req -x509 -newkey rsa:2048 -nodes "
           "-days 2 -subj /CN=localhost -keyout %s -out %s 2>/dev/null",
           key, cert);
  cr_assert_eq(system(cmd), 0, "openssl failed");
  cr_assert_eq(chmod(key, 0644), 0);
  compat_yaml(yaml, sizeof(yaml), keys, cert, key);
  snprintf(want, sizeof(want), "%s (owner uid %u, mode 0644) holds a secret "
           "that others may read: chmod", key, (unsigned)geteuid());
  assert_refused(yaml, "a TLS key of mode 0644", want, err, sizeof(err));
  /* Readable by its owner (and, root's, by its group): taken. */
  cr_assert_eq(chmod(key, geteuid() == 0 ? 0640 : 0600), 0);
  write_text_file(D.conf, yaml);
  daemon_start(&D, NULL);
  cr_assert_eq(daemon_stop(&D), 0);
}
