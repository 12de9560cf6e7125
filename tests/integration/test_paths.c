/* What qrsd finds at the paths it opens, with a real qrsd (and a real
   qrs-entropy-server for the quota): a FIFO that replaces the status file at
   runtime stops nothing; a FIFO, a symbolic link or /dev/null at the config,
   status or quota state path at start-up is refused at once, naming the path;
   a regular file in /dev is no device; a SIGTERM pending when qrsd starts
   stops it cleanly; a small daily quota survives SIGKILL restarts, and a state
   file dated in the future keeps its count. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <criterion/criterion.h>

#include "harness.h"
#include "timestamp.h"
#include "upserver.h"

static struct daemon D;
static struct upserver U;

static void
prepare(void)
{
  daemon_prepare(&D, NULL);
  memset(&U, 0, sizeof(U));
}

static void
finish(void)
{
  daemon_cleanup(&D);
  upserver_stop(&U, 0);
}

TestSuite(paths, .init = prepare, .fini = finish, .timeout = 120);

/* Write the config (printf-style) as D's config file. */
static void config(const char *fmt, ...)
  __attribute__((format(printf, 1, 2)));

static void
config(const char *fmt, ...)
{
  char yaml[4096];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(yaml, sizeof(yaml), fmt, ap);
  va_end(ap);
  daemon_write_conf(&D, yaml);
}

/* Start qrsd on D's socket with args (NULL-terminated; no NOTIFY_SOCKET,
   stderr to D's log), with SIGTERM blocked when block_term is set (a
   parent that left it so: it is pending if sent before qrsd unblocks
   it).  Returns the pid. */
static pid_t
spawn(int block_term, const char *const *args)
{
  const char *argv[16];
  sigset_t set, old;
  size_t n = 0;
  pid_t pid;
  int fd;

  argv[n++] = getenv("QRSD_BIN");
  argv[n++] = "--socket";
  argv[n++] = D.sock;
  while (args && *args && n < 15)
    argv[n++] = *args++;
  argv[n] = NULL;
  cr_assert_not_null(argv[0], "QRSD_BIN is not set");
  /* Blocked before the fork: a signal sent as soon as it returns is
     pending in the child, never taken by it before the exec. */
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  if (block_term)
    sigprocmask(SIG_BLOCK, &set, &old);
  pid = fork();
  if (pid != 0 && block_term)
    sigprocmask(SIG_SETMASK, &old, NULL);
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    fd = open(D.log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0)
      dup2(fd, 2);
    unsetenv("NOTIFY_SOCKET");
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  return pid;
}

/* Wait up to timeout_ms for pid: its exit status (128 + signal), or -1
   after a timeout (it is then killed and reaped). */
static int
wait_exit(pid_t pid, int timeout_ms)
{
  int64_t end = mono_now_ns() + (int64_t)timeout_ms * 1000000;
  int st;

  for (;;) {
    if (waitpid(pid, &st, WNOHANG) == pid)
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (mono_now_ns() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -1;
    }
    usleep(5000);
  }
}

/* qrsd -c conf (and -S status when not NULL) must exit 1 at once, its
   log naming path and what is there. */
static void
expect_refused(const char *conf, const char *status, const char *path,
               const char *what)
{
  const char *args[5] = { "-c", conf, status ? "-S" : NULL, status, NULL };
  char needle[256], *text;
  int r;

  unlink(D.log);
  r = wait_exit(spawn(0, args), 5000 * test_time_scale());
  cr_assert_eq(r, 1, "qrsd with %s at %s: exit %d (-1: still running after "
               "5 s)", what, path, r);
  snprintf(needle, sizeof(needle), "%s: %s, not a regular file", path, what);
  if (!daemon_log_contains(&D, needle)) {
    text = read_text_file(D.log, 4096, NULL);
    cr_assert_fail("no '%s' in the log: %s", needle, text);
  }
}

/* Once, after a FIFO replaced the status file, the loop sat in a blocking
   open() of it: every draw and status timed out and SIGTERM was ignored.  Now
   the loop never touches the file: draws and status go on, the worker replaces
   the FIFO (and says so), SIGTERM stops qrsd within a second. */
Test(paths, a_fifo_at_the_status_path_at_runtime_stops_nothing)
{
  char status[160], out[4096], err[1024];
  struct stat st;
  int64_t end;
  int i, r;

  config("status_file: %s/status.json\n"
         "sources: { system: { type: system } }\n", D.dir);
  daemon_start(&D, NULL);
  snprintf(status, sizeof(status), "%s/status.json", D.dir);
  /* A worker writes the status file: wait (5 s at most) for the first. */
  end = mono_now_ns() + 5000000000LL;
  while (stat(status, &st) != 0 && mono_now_ns() < end)
    usleep(10000);
  cr_assert_eq(unlink(status), 0, "no status file %s after 5 s", status);
  cr_assert_eq(mkfifo(status, 0644), 0);
  /* Over two seconds of draws: the status file is due again (once a
     second) while they are served. */
  end = mono_now_ns() + 2500000000LL;
  for (i = 0; mono_now_ns() < end; i++) {
    r = run_qrsctl(D.sock, out, sizeof(out), err, sizeof(err), "-t", "3000",
                   "draw", NULL);
    cr_assert_eq(r, 0, "draw %d after the FIFO: exit %d: %s", i, r, err);
    usleep(100000);
  }
  r = run_qrsctl(D.sock, out, sizeof(out), err, sizeof(err), "-t", "3000",
                 "status", NULL);
  cr_assert_eq(r, 0, "status after the FIFO: exit %d: %s", r, err);
  cr_assert(daemon_log_contains(&D, "status.json: a FIFO, not a regular "
                                "file; replaced"));
  cr_assert_eq(lstat(status, &st), 0);
  cr_assert(S_ISREG(st.st_mode), "the FIFO is still there");
  kill(D.pid, SIGTERM);
  r = wait_exit(D.pid, 1000 * test_time_scale());
  D.pid = -1;
  cr_assert_eq(r, 0, "exit %d after SIGTERM (-1: not within a second)", r);
}

/* A FIFO, a symbolic link or /dev/null at the config, status or quota
   state path at start-up: refused at once (exit 1), the path and what is
   there in the error; never a hang (a FIFO held open() for ever). */
Test(paths, odd_files_at_start_up_are_refused_naming_the_path)
{
  char fifo[160], link[160], conf[160], state[160];

  snprintf(fifo, sizeof(fifo), "%s/fifo", D.dir);
  snprintf(link, sizeof(link), "%s/link", D.dir);
  cr_assert_eq(mkfifo(fifo, 0644), 0);
  cr_assert_eq(symlink(fifo, link), 0);
  snprintf(conf, sizeof(conf), "%s/qrsd.yaml", D.dir);
  snprintf(state, sizeof(state), "%s/quota-q.json", D.dir);

  /* The config: a link is followed (to what it names). */
  expect_refused(fifo, NULL, fifo, "a FIFO");
  expect_refused(link, NULL, link, "a FIFO");
  expect_refused("/dev/null", NULL, "/dev/null", "a character device");

  /* The status file: replaced by rename, so a link is not followed. */
  config("sources: { system: { type: system } }\n");
  expect_refused(conf, fifo, fifo, "a FIFO");
  expect_refused(conf, link, link, "a symbolic link");
  expect_refused(conf, "/dev/null", "/dev/null", "a character device");

  /* The quota state of a grpc source (read at start-up; the upstream is
     not needed for that). */
  config("state_dir: %s\nstatus_file: \"\"\n"
         "sources:\n"
         "  system: { type: system }\n"
         "  q: { type: grpc, target: \"127.0.0.1:1\", insecure: true, "
         "fallback: system,\n"
         "       quota: { max_bytes_per_day: 5000 } }\n", D.dir);
  cr_assert_eq(mkfifo(state, 0644), 0);
  expect_refused(conf, NULL, state, "a FIFO");
  cr_assert_eq(unlink(state), 0);
  cr_assert_eq(symlink("/dev/null", state), 0);
  expect_refused(conf, NULL, state, "a symbolic link");
}

/* "Signals work from the first instruction": a SIGTERM already pending
   when qrsd starts (its parent had it blocked) stops the start-up
   cleanly: exit 0 at once, no socket left behind.  Before, qrsd kept it
   blocked and served on. */
Test(paths, a_sigterm_pending_at_start_up_stops_it_cleanly)
{
  const char *args[3];
  pid_t pid;
  int r;

  config("status_file: %s/status.json\n"
         "sources: { system: { type: system } }\n", D.dir);
  args[0] = "-c";
  args[1] = D.conf;
  args[2] = NULL;
  pid = spawn(1, args);
  kill(pid, SIGTERM);
  r = wait_exit(pid, 1000 * test_time_scale());
  cr_assert_eq(r, 0, "exit %d (-1: still running a second after SIGTERM)",
               r);
  cr_assert(daemon_log_contains(&D, "during start-up: stopping"));
  cr_assert_neq(access(D.sock, F_OK), 0, "%s left behind", D.sock);
}

/* Config with one grpc source 'q' on U and a daily quota of 5000 bytes;
   the state in D.dir. */
static void
quota_config(void)
{
  upserver_start(&U, "127.0.0.1:0", NULL);
  config("state_dir: %s\nstatus_file: \"\"\n"
         "sources:\n"
         "  system: { type: system }\n"
         "  q: { type: grpc, target: \"%s\", insecure: true, "
         "fallback: system,\n"
         "       quota: { max_bytes_per_day: 5000 } }\n", D.dir, U.addr);
}

/* Today's bytes of 'q' (qrsctl --json sources). */
static long long
day_bytes(void)
{
  char out[16384], err[1024];
  const char *p;

  cr_assert_eq(run_qrsctl(D.sock, out, sizeof(out), err, sizeof(err),
                          "--json", "sources", NULL), 0, "%s", err);
  p = strstr(out, "\"quota_day_bytes\":");
  cr_assert_not_null(p, "%s", out);
  p += strlen("\"quota_day_bytes\":");
  if (*p == '"')
    p++;
  return atoll(p);
}

/* Once, the start-up reserved a 1 MiB block before any use, so one SIGKILL
   left a 5000-byte quota "over" for the day and every later run fell back with
   0 bytes fetched.  Now each of three killed runs still fetches from the
   upstream (its warm-up), and the count grows by at most a block (19 bytes)
   per crash. */
Test(paths, sigkill_restarts_do_not_lock_a_small_quota_out)
{
  char state[160];
  long long day;
  int i, k;

  quota_config();
  snprintf(state, sizeof(state), "%s/quota-q.json", D.dir);
  for (i = 1; i <= 3; i++) {
    daemon_start(&D, NULL);
    for (k = 0; k < 300 && daemon_log_count(&D, "source 'q': warm-up "
                                            "fetch ok") < i; k++)
      usleep(10000);
    cr_assert_eq(daemon_log_count(&D, "source 'q': warm-up fetch ok"), i,
                 "run %d did not fetch from the upstream", i);
    /* Its reservation is written (on a worker thread) after the fetch. */
    for (k = 0; k < 300 && access(state, F_OK) != 0; k++)
      usleep(10000);
    day = day_bytes();
    cr_assert(day >= 8 * i && day <= (8 + 5000 / 256) * i,
              "run %d: %lld bytes counted", i, day);
    usleep(200000);
    kill(D.pid, SIGKILL);
    cr_assert_eq(wait_exit(D.pid, 5000), 128 + SIGKILL);
    D.pid = -1;
    close(D.notify_fd);
    D.notify_fd = -1;
  }
}

/* Once, a state file dated after today (the clock went back) was dropped, the
   count restarting at 0.  Its count is kept, with a warning: 4995 of 5000 used
   leaves no room for the 8-byte warm-up. */
Test(paths, a_future_dated_quota_state_keeps_its_count)
{
  char state[160];

  quota_config();
  snprintf(state, sizeof(state), "%s/quota-q.json", D.dir);
  write_text_file(state, "{\"day\":\"2999-01-01\",\"bytes_used\":4995}\n");
  daemon_start(&D, NULL);
  cr_assert(daemon_log_contains(&D, "quota-q.json is dated 2999-01-01, "
                                "after today"));
  cr_assert(daemon_log_contains(&D, "source 'q': warm-up fetch failed"));
  cr_assert_eq(day_bytes(), 4995);
}

/* A regular file in /dev is what a write to a missing device node
   leaves: a device source refuses it, naming the path, rather than serve
   its stale bytes. */
Test(paths, a_regular_file_in_dev_is_no_device)
{
  char dev[96], out[4096], err[1024], needle[160];
  int fd, r;

  snprintf(dev, sizeof(dev), "/dev/qrs-test-%ld", (long)getpid());
  fd = open(dev, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    cr_skip_test("cannot create %s: %s", dev, strerror(errno));
  cr_assert_eq(write(fd, "0123456789abcdef", 16), 16);
  close(fd);
  config("status_file: \"\"\n"
         "sources:\n"
         "  system: { type: system }\n"
         "  hw: { type: device, path: %s }\n", dev);
  daemon_start(&D, NULL);
  r = run_qrsctl(D.sock, out, sizeof(out), err, sizeof(err), "bytes", "-n",
                 "16", "--source", "hw", NULL);
  unlink(dev);
  cr_assert_neq(r, 0, "served from a regular file in /dev: %s", out);
  snprintf(needle, sizeof(needle), "%s: a regular file in /dev, not a "
           "device node", dev);
  cr_assert(strstr(err, needle) || strstr(out, needle) ||
            daemon_log_contains(&D, needle), "%s%s", out, err);
}
