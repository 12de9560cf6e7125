/* Start and stop qrs-entropy-server for tests; see upserver.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "upserver.h"

#define MAX_ARGS 40

pid_t
upserver_fork(struct upserver *s, int *fd)
{
  int out[2], lf;

  snprintf(s->log, sizeof(s->log), "/tmp/qrs-upserver-%ld-%ld.log",
           (long)getpid(), (long)time(NULL) ^ (long)random());
  cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
  s->pid = fork();
  cr_assert_geq(s->pid, 0);
  if (s->pid == 0) {
    /* Never outlive a test that crashed. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(out[0]);
    lf = open(s->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (lf >= 0)
      dup2(lf, 2);
    *fd = out[1];
    return 0;
  }
  close(out[1]);
  *fd = out[0];
  return s->pid;
}

void
upserver_await(struct upserver *s, int fd)
{
  char line[256];
  struct pollfd p;
  size_t n = 0;
  ssize_t r;

  memset(line, 0, sizeof(line));
  for (;;) {
    p.fd = fd;
    p.events = POLLIN;
    cr_assert_gt(poll(&p, 1, 10000), 0, "the test server did not start");
    r = read(fd, line + n, sizeof(line) - 1 - n);
    cr_assert_gt(r, 0, "the test server exited at start (log %s)", s->log);
    n += (size_t)r;
    if (memchr(line, '\n', n))
      break;
  }
  close(fd);
  *strchr(line, '\n') = '\0';
  cr_assert_eq(strncmp(line, "listening on ", 13), 0, "%s", line);
  snprintf(s->addr, sizeof(s->addr), "%s", line + 13);
}

void
upserver_startv(struct upserver *s, const char *listen,
                const char *const *args)
{
  const char *bin = getenv("QRS_ENTROPY_SERVER_BIN");
  const char *argv[MAX_ARGS + 4];
  size_t n = 0, i;
  int fd;

  cr_assert_not_null(bin, "QRS_ENTROPY_SERVER_BIN not set");
  argv[n++] = bin;
  argv[n++] = "--listen";
  argv[n++] = listen;
  for (i = 0; args && args[i] && n < MAX_ARGS; i++)
    argv[n++] = args[i];
  argv[n] = NULL;
  if (upserver_fork(s, &fd) == 0) {
    dup2(fd, 1);
    execv(bin, (char *const *)argv);
    _exit(127);
  }
  upserver_await(s, fd);
}

void
upserver_start(struct upserver *s, const char *listen, ...)
{
  const char *args[MAX_ARGS + 1];
  size_t n = 0;
  va_list ap;

  va_start(ap, listen);
  while (n < MAX_ARGS && (args[n] = va_arg(ap, const char *)) != NULL)
    n++;
  va_end(ap);
  args[n] = NULL;
  upserver_startv(s, listen, args);
}

int
upserver_wait(struct upserver *s, int timeout_ms)
{
  int st, i;

  for (i = 0; i < timeout_ms / 10; i++) {
    if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
      s->pid = 0;
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    usleep(10000);
  }
  return -1;
}

int
upserver_stop(struct upserver *s, int hard)
{
  int r;

  if (s->pid <= 0)
    return 0;
  kill(s->pid, hard ? SIGKILL : SIGTERM);
  r = upserver_wait(s, 10000);
  cr_assert_neq(r, -1, "qrs-entropy-server did not stop");
  unlink(s->log);
  return r;
}

void
upserver_make_certs(const char *dir)
{
  char cmd[2048];

  snprintf(cmd, sizeof(cmd),
    "cd '%s' && "
    "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=qrs-ca "
    "  -keyout ca.key -out ca.pem 2>/dev/null && "
    "openssl req -newkey rsa:2048 -nodes -subj /CN=localhost "
    "  -keyout srv.key -out srv.csr 2>/dev/null && "
    "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > ext && "
    "openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key "
    "  -CAcreateserial -days 2 -extfile ext -out srv.pem 2>/dev/null && "
    "openssl req -newkey rsa:2048 -nodes -subj /CN=qrsd "
    "  -keyout cli.key -out cli.csr 2>/dev/null && "
    "openssl x509 -req -in cli.csr -CA ca.pem -CAkey ca.key "
    "  -CAcreateserial -days 2 -out cli.pem 2>/dev/null", dir);
  cr_assert_eq(system(cmd), 0, "openssl failed");
}
