/* Integration-test harness (see harness.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <criterion/criterion.h>

#include <qrs/error.h>

#include "harness.h"
#include "timestamp.h"

static const char *
qrsd_bin(void)
{
  const char *p;

  /* QRSD_BIN_OVERRIDE: run the suite against another build's qrsd (the
     TSan one, .ci/run). */
  p = getenv("QRSD_BIN_OVERRIDE");
  if (!p || !*p)
    p = getenv("QRSD_BIN");
  cr_assert(p && *p, "QRSD_BIN is not set (run through meson test)");
  return p;
}

void
write_text_file(const char *path, const char *text)
{
  FILE *f;

  f = fopen(path, "w");
  cr_assert_not_null(f, "cannot write %s", path);
  fputs(text, f);
  fclose(f);
}

void
write_key_file(const char *path, const char *text)
{
  write_text_file(path, text);
  cr_assert_eq(chmod(path, 0600), 0, "chmod %s", path);
}

char *
read_text_file(const char *path, size_t max, size_t *ret_len)
{
  char *text;
  size_t n;
  FILE *f;

  f = fopen(path, "r");
  cr_assert_not_null(f, "cannot read %s", path);
  text = malloc(max);
  cr_assert_not_null(text);
  n = fread(text, 1, max - 1, f);
  fclose(f);
  text[n] = '\0';
  if (ret_len)
    *ret_len = n;
  return text;
}

void
read_lines(const char *path, char **lines, int n)
{
  size_t cap;
  ssize_t len;
  FILE *f;
  int i;

  f = fopen(path, "r");
  cr_assert_not_null(f, "cannot read %s", path);
  for (i = 0; i < n; i++) {
    lines[i] = NULL;
    cap = 0;
    len = getline(&lines[i], &cap, f);
    cr_assert_gt(len, 1, "%s: line %d", path, i + 1);
    lines[i][len - 1] = '\0';
  }
  fclose(f);
}

void
daemon_prepare(struct daemon *d, const char *yaml)
{
  memset(d, 0, sizeof(*d));
  d->pid = -1;
  d->notify_fd = -1;
  snprintf(d->dir, sizeof(d->dir), "/tmp/qrs-test-XXXXXX");
  cr_assert_not_null(mkdtemp(d->dir));
  snprintf(d->sock, sizeof(d->sock), "%s/qrsd.sock", d->dir);
  snprintf(d->log, sizeof(d->log), "%s/qrsd.log", d->dir);
  snprintf(d->notify, sizeof(d->notify), "%s/notify", d->dir);
  if (yaml)
    daemon_write_conf(d, yaml);
}

void
daemon_write_conf(struct daemon *d, const char *yaml)
{
  snprintf(d->conf, sizeof(d->conf), "%s/qrsd.yaml", d->dir);
  write_text_file(d->conf, yaml);
}

static int64_t
now_ms(void)
{
  return mono_now_ns() / 1000000;
}

/* A new AF_UNIX socket of type (close-on-exec), and path's address in
   *sa. */
static int
unix_socket(int type, const char *path, struct sockaddr_un *sa)
{
  int fd;

  fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
  cr_assert_geq(fd, 0);
  memset(sa, 0, sizeof(*sa));
  sa->sun_family = AF_UNIX;
  snprintf(sa->sun_path, sizeof(sa->sun_path), "%s", path);
  return fd;
}

int
unix_bind(const char *path)
{
  struct sockaddr_un sa;
  int fd;

  fd = unix_socket(SOCK_STREAM, path, &sa);
  cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0,
               "bind %s: %s", path, strerror(errno));
  return fd;
}

int
daemon_wait_notify(struct daemon *d, const char *what, int timeout_ms)
{
  char buf[1024];
  struct pollfd p;
  int64_t end;
  ssize_t n;

  end = now_ms() + timeout_ms;
  for (;;) {
    p.fd = d->notify_fd;
    p.events = POLLIN;
    if (poll(&p, 1, (int)(end - now_ms() > 0 ? end - now_ms() : 0)) <= 0)
      return 0;
    n = recv(d->notify_fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0)
      return 0;
    buf[n] = '\0';
    if (strstr(buf, what))
      return 1;
  }
}

void
daemon_start(struct daemon *d, ...)
{
  const char *argv[32], *a;
  struct sockaddr_un sa;
  va_list ap;
  int n, fd;

  d->notify_fd = unix_socket(SOCK_DGRAM, d->notify, &sa);
  unlink(d->notify);
  cr_assert_eq(bind(d->notify_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);

  n = 0;
  argv[n++] = qrsd_bin();
  argv[n++] = "--socket";
  argv[n++] = d->sock;
  if (d->conf[0]) {
    argv[n++] = "-c";
    argv[n++] = d->conf;
  }
  va_start(ap, d);
  while ((a = va_arg(ap, const char *)) && n < 30)
    argv[n++] = a;
  va_end(ap);
  argv[n] = NULL;

  d->pid = fork();
  cr_assert_geq(d->pid, 0);
  if (d->pid == 0) {
    fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0)
      dup2(fd, 2);
    setenv("NOTIFY_SOCKET", d->notify, 1);
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  if (!daemon_wait_notify(d, "READY=1", 10000)) {
    char cmd[512];

    snprintf(cmd, sizeof(cmd), "cat %s >&2", d->log);
    (void)system(cmd);
    cr_assert_fail("qrsd did not report READY=1 within 10 s");
  }
}

void
daemon_run(struct daemon *d, const char *yaml)
{
  daemon_prepare(d, yaml);
  daemon_start(d, NULL);
}

int
daemon_try_start(struct daemon *d, const char *yaml, char *err,
                 size_t errlen)
{
  char out[4096];
  char *argv[6];

  if (yaml)
    daemon_write_conf(d, yaml);
  argv[0] = (char *)qrsd_bin();
  argv[1] = (char *)"-c";
  argv[2] = d->conf;
  argv[3] = (char *)"--socket";
  argv[4] = d->sock;
  argv[5] = NULL;
  return run_capture(argv, out, sizeof(out), err, errlen);
}

void
daemon_restart(struct daemon *d)
{
  cr_assert_eq(daemon_stop(d), 0);
  close(d->notify_fd);
  d->notify_fd = -1;
  daemon_start(d, NULL);
}

int
daemon_stop(struct daemon *d)
{
  int64_t end, next;
  pid_t r;
  int st;

  if (d->pid <= 0)
    return -1;
  kill(d->pid, SIGTERM);
  /* 10 s, stretched for a sanitizer's qrsd.  Under ThreadSanitizer a
     SIGTERM the kernel hands to a thread parked in a wait (a libuv
     worker, a gRPC thread) can stay undelivered: seen with the compat
     endpoint's threads, where a second SIGTERM stopped qrsd at once.  A
     sanitizer's qrsd is sent it again every second; a real one must stop
     on the first. */
  end = now_ms() + 10000 * test_time_scale();
  next = now_ms() + 1000;
  for (;;) {
    r = waitpid(d->pid, &st, WNOHANG);
    if (r == d->pid)
      break;
    if (test_time_scale() > 1 && now_ms() > next) {
      kill(d->pid, SIGTERM);
      next = now_ms() + 1000;
    }
    if (now_ms() > end) {
      kill(d->pid, SIGKILL);
      waitpid(d->pid, &st, 0);
      cr_assert_fail("qrsd did not stop within %d s of SIGTERM",
                     10 * test_time_scale());
    }
    usleep(5000);
  }
  d->pid = -1;
  if (WIFEXITED(st))
    return WEXITSTATUS(st);
  return 128 + WTERMSIG(st);
}

void
daemon_cleanup(struct daemon *d)
{
  char cmd[256];

  if (d->pid > 0)
    daemon_stop(d);
  if (d->notify_fd >= 0)
    close(d->notify_fd);
  d->notify_fd = -1;
  if (d->dir[0] && !getenv("QRS_KEEP_TEST_DIRS")) {
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->dir);
    (void)system(cmd);
  }
}

int
daemon_log_contains(const struct daemon *d, const char *needle)
{
  int i;

  /* qrsd writes its log from a thread of its own: give it 3 s. */
  for (i = 0; i < 300; i++) {
    if (daemon_log_count(d, needle) > 0)
      return 1;
    usleep(10000);
  }
  return 0;
}

int
daemon_log_count(const struct daemon *d, const char *needle)
{
  static char buf[1 << 20];
  const char *p;
  size_t n;
  FILE *f;
  int k;

  f = fopen(d->log, "r");
  if (!f)
    return 0;
  n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  k = 0;
  for (p = buf; (p = strstr(p, needle)); p += strlen(needle))
    k++;
  return k;
}

static void
drain(int fd, char *out, size_t outlen, size_t *len)
{
  ssize_t n;

  if (!out || *len + 1 >= outlen) {
    char sink[4096];

    n = read(fd, sink, sizeof(sink));
  } else {
    n = read(fd, out + *len, outlen - 1 - *len);
    if (n > 0)
      *len += (size_t)n;
  }
  (void)n;
}

int
run_capture(char *const argv[], char *out, size_t outlen, char *err,
            size_t errlen)
{
  int po[2], pe[2], st, open_fds, i;
  struct pollfd p[2];
  char *buf[2];
  size_t cap[2], len[2];
  pid_t pid;

  cr_assert_eq(pipe2(po, O_CLOEXEC), 0);
  cr_assert_eq(pipe2(pe, O_CLOEXEC), 0);
  pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    dup2(po[1], 1);
    dup2(pe[1], 2);
    execv(argv[0], argv);
    _exit(127);
  }
  close(po[1]);
  close(pe[1]);
  /* Stream 0 is stdout into out, 1 stderr into err. */
  p[0].fd = po[0];
  p[1].fd = pe[0];
  buf[0] = out;
  buf[1] = err;
  cap[0] = outlen;
  cap[1] = errlen;
  len[0] = len[1] = 0;
  open_fds = 2;
  while (open_fds > 0) {
    p[0].events = p[1].events = POLLIN;
    if (poll(p, 2, 20000) <= 0)
      break;
    for (i = 0; i < 2; i++) {
      if (!p[i].revents)
        continue;
      if (p[i].revents & POLLIN) {
        drain(p[i].fd, buf[i], cap[i], &len[i]);
      } else {
        p[i].fd = -1;
        open_fds--;
      }
    }
  }
  for (i = 0; i < 2; i++)
    if (buf[i])
      buf[i][len[i]] = '\0';
  close(po[0]);
  close(pe[0]);
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int
run_qrsctlv(const char *sock, char *out, size_t outlen, char *err,
            size_t errlen, va_list ap)
{
  char *argv[32], *a;
  int n;

  n = 0;
  argv[n++] = getenv("QRSCTL_BIN");
  cr_assert_not_null(argv[0], "QRSCTL_BIN is not set");
  argv[n++] = (char *)"-s";
  argv[n++] = (char *)sock;
  while ((a = va_arg(ap, char *)) && n < 31)
    argv[n++] = a;
  argv[n] = NULL;
  return run_capture(argv, out, outlen, err, errlen);
}

int
run_qrsctl(const char *sock, char *out, size_t outlen, char *err,
           size_t errlen, ...)
{
  va_list ap;
  int r;

  va_start(ap, errlen);
  r = run_qrsctlv(sock, out, outlen, err, errlen, ap);
  va_end(ap);
  return r;
}

int
raw_connect(const char *sock)
{
  struct sockaddr_un sa;
  struct timeval tv;
  int fd;

  fd = unix_socket(SOCK_STREAM, sock, &sa);
  cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0,
               "connect %s: %s", sock, strerror(errno));
  tv.tv_sec = 5;
  tv.tv_usec = 0;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

void
raw_send(int fd, const void *buf, size_t len)
{
  cr_assert_eq(send(fd, buf, len, MSG_NOSIGNAL), (ssize_t)len);
}

void
raw_send_msg(int fd, uint16_t type, uint32_t seq, const ProtobufCMessage *m)
{
  uint8_t buf[4096];
  int n;

  n = qrs__frame_pack(type, seq, m, buf, sizeof(buf));
  cr_assert_gt(n, 0);
  raw_send(fd, buf, (size_t)n);
}

void
raw_send_many(int fd, uint16_t type, uint32_t seq, int count,
              const ProtobufCMessage *m)
{
  uint8_t *buf;
  size_t len, cap;
  int i, n;

  cap = (size_t)count * 256;
  buf = malloc(cap);
  cr_assert_not_null(buf);
  len = 0;
  for (i = 0; i < count; i++) {
    n = qrs__frame_pack(type, seq + (uint32_t)i, m, buf + len, cap - len);
    cr_assert_gt(n, 0);
    len += (size_t)n;
  }
  raw_send(fd, buf, len);
  free(buf);
}

void
raw_send_draw(int fd, uint32_t seq, const char *source, uint32_t n)
{
  QrsIpc__Draw m = QRS_IPC__DRAW__INIT;

  m.source = (char *)(source ? source : "");
  m.sample_count = n;
  raw_send_msg(fd, QRS_MSG_DRAW, seq, &m.base);
}

void
raw_send_hello(int fd, uint32_t seq)
{
  QrsIpc__Hello m = QRS_IPC__HELLO__INIT;

  m.protocol_version = QRS_PROTO_VERSION;
  raw_send_msg(fd, QRS_MSG_HELLO, seq, &m.base);
}

void
raw_frame_hdr(uint8_t b[QRS_FRAME_HDR_SIZE], uint16_t type, uint32_t length,
              uint32_t seq)
{
  const struct qrs_frame_hdr h = {
    .magic = QRS_FRAME_MAGIC, .version = QRS_PROTO_VERSION, .type = type,
    .length = length, .seq = seq,
  };

  qrs__frame_hdr_encode(&h, b);
}

static int
read_full(int fd, uint8_t *buf, size_t len)
{
  size_t done;
  ssize_t n;

  done = 0;
  while (done < len) {
    n = recv(fd, buf + done, len - done, 0);
    if (n == 0)
      return -1;
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno == ECONNRESET)
        return -1;
      cr_assert_fail("recv: %s", strerror(errno));
    }
    done += (size_t)n;
  }
  return 0;
}

int
raw_recv(int fd, struct qrs_frame_hdr *h, uint8_t **payload)
{
  uint8_t hb[QRS_FRAME_HDR_SIZE];

  if (read_full(fd, hb, sizeof(hb)) < 0)
    return -1;
  cr_assert_eq(qrs__frame_hdr_decode(hb, 64u << 20, h), 0);
  *payload = malloc(h->length ? h->length : 1);
  cr_assert_not_null(*payload);
  cr_assert_eq(read_full(fd, *payload, h->length), 0);
  return 0;
}

int
raw_connect_hello(const char *sock)
{
  int fd;

  fd = raw_connect(sock);
  raw_hello(fd);
  return fd;
}

void
raw_expect_hello_busy(const char *sock, uint32_t seq)
{
  int fd;

  fd = raw_connect(sock);
  raw_send_hello(fd, seq);
  cr_assert_eq(raw_expect_error(fd, QRS_E_BUSY), seq);
  raw_expect_eof(fd);
  close(fd);
}

void
raw_hello(int fd)
{
  QrsIpc__Hello m = QRS_IPC__HELLO__INIT;
  struct qrs_frame_hdr h;
  uint8_t *p;

  m.protocol_version = QRS_PROTO_VERSION;
  m.client_name = "raw-test";
  raw_send_msg(fd, QRS_MSG_HELLO, 1, &m.base);
  cr_assert_eq(raw_recv(fd, &h, &p), 0);
  cr_assert_eq(h.type, QRS_MSG_HELLO_REPLY);
  cr_assert_eq(h.seq, 1);
  free(p);
}

uint32_t
raw_expect_error(int fd, int code)
{
  struct qrs_frame_hdr h;
  QrsIpc__Error *e;
  uint8_t *p;

  cr_assert_eq(raw_recv(fd, &h, &p), 0, "expected an ERROR frame, got EOF");
  cr_assert_eq(h.type, QRS_MSG_ERROR, "expected ERROR, got %s",
               qrs__msg_name(h.type));
  e = qrs_ipc__error__unpack(NULL, h.length, p);
  cr_assert_not_null(e);
  cr_assert_eq(qrs__error_from_wire(e->code), code,
               "expected %s, got %s (%s)", qrs_strerror_name(code),
               qrs_strerror_name(qrs__error_from_wire(e->code)), e->message);
  cr_assert_gt(strlen(e->message), 0, "error without a message");
  qrs_ipc__error__free_unpacked(e, NULL);
  free(p);
  return h.seq;
}

int
raw_recv_count(int fd, int n, uint32_t seq, uint16_t type, int *ret_errors)
{
  struct qrs_frame_hdr h;
  uint8_t *seen, *p;
  int i, k, errors;

  seen = calloc((size_t)n, 1);
  cr_assert_not_null(seen);
  k = errors = 0;
  for (i = 0; i < n; i++) {
    cr_assert_eq(raw_recv(fd, &h, &p), 0, "EOF after %d of %d replies", i,
                 n);
    cr_assert(h.seq >= seq && h.seq - seq < (uint32_t)n,
              "seq %u outside %u..%u", h.seq, seq, seq + (uint32_t)n - 1);
    cr_assert_eq(seen[h.seq - seq], 0, "seq %u twice", h.seq);
    seen[h.seq - seq] = 1;
    k += h.type == type;
    errors += h.type == QRS_MSG_ERROR;
    free(p);
  }
  free(seen);
  if (ret_errors)
    *ret_errors = errors;
  return k;
}

void
raw_expect_reply(int fd, uint16_t type, uint32_t seq)
{
  struct qrs_frame_hdr h;
  uint8_t *p;

  cr_assert_eq(raw_recv(fd, &h, &p), 0);
  cr_assert_eq(h.type, type, "expected %s, got %s", qrs__msg_name(type),
               qrs__msg_name(h.type));
  cr_assert_eq(h.seq, seq);
  free(p);
}

void
raw_expect_eof(int fd)
{
  uint8_t b[256];
  ssize_t n;

  do
    n = recv(fd, b, sizeof(b), 0);
  while (n > 0);
  cr_assert(n == 0 || errno == ECONNRESET, "expected EOF: %s",
            n < 0 ? strerror(errno) : "");
}

uint32_t
raw_expect_error_eof(int fd, int code)
{
  uint32_t seq;

  seq = raw_expect_error(fd, code);
  raw_expect_eof(fd);
  close(fd);
  return seq;
}

int
test_time_scale(void)
{
  const char *e = getenv("QRS_TEST_TIME_SCALE");
  const char *o = getenv("QRSD_BIN_OVERRIDE");
  int asan = 0;

#if defined(__SANITIZE_ADDRESS__)
  asan = 1;
#endif
  if (e && atoi(e) >= 1)
    return atoi(e);
  return asan || (o && *o) ? 4 : 1;
}
