/* Integration-test harness: a real qrsd on a temporary socket, raw frame
   I/O for protocol tests, and helpers to run the command-line tools.

   The binaries come from the environment meson sets: $QRSD_BIN and
   $QRSCTL_BIN. */
#ifndef QRS_TEST_HARNESS_H
#define QRS_TEST_HARNESS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "frame.h"

struct daemon {
  pid_t pid;
  char dir[64];                 /* temporary directory, removed at stop */
  char sock[96];
  char conf[96];                /* "" when running on the built-in config */
  char log[96];                 /* qrsd's stderr */
  char notify[96];              /* our NOTIFY_SOCKET */
  int notify_fd;
};

/* Make a temporary directory and (if yaml is not NULL) write it as the
   config file qrsd.yaml there; does not start anything. */
void daemon_prepare(struct daemon *d, const char *yaml);

/* Write yaml as d's config file, qrsd.yaml in d->dir (for a config that
   names paths in d->dir: after daemon_prepare()). */
void daemon_write_conf(struct daemon *d, const char *yaml);

/* Start qrsd on d->sock (with -c d->conf if set) plus extra args (NULL
   terminated), and wait for READY=1 on NOTIFY_SOCKET.  Fails the test if it
   does not come within 10 s. */
void daemon_start(struct daemon *d, ...);

/* Prepare + start in one go. */
void daemon_run(struct daemon *d, const char *yaml);

/* For a configuration qrsd must refuse: write yaml (unless NULL) as d's
   config file and run qrsd on it and d->sock in the foreground, its
   stderr into err.  Returns its exit status once it exits (a qrsd that
   starts serving does not, and the test times out). */
int daemon_try_start(struct daemon *d, const char *yaml, char *err,
                     size_t errlen);

/* The first n lines of the file at path, without their newlines, in
   lines[0..n-1] (each a new string: the caller frees them), or the test
   fails. */
void read_lines(const char *path, char **lines, int n);

/* SIGTERM and wait; returns the exit status (or 128 + signal).  Asserts it
   stopped within 10 s. */
int daemon_stop(struct daemon *d);

/* Remove the temporary directory (after daemon_stop). */
void daemon_cleanup(struct daemon *d);

/* Stop d (it must exit 0) and start it again on the same socket and
   config. */
void daemon_restart(struct daemon *d);

/* Does qrsd's log contain needle (waits up to 3 s for it)? */
int daemon_log_contains(const struct daemon *d, const char *needle);
/* How often it occurs now (the first MiB; no waiting). */
int daemon_log_count(const struct daemon *d, const char *needle);

/* How much slower than a plain build the qrsd under test may be:
   $QRS_TEST_TIME_SCALE (.ci/run sets it for the TSan qrsd), else 4 when
   the suite drives another build's qrsd (QRSD_BIN_OVERRIDE: the TSan one)
   or runs under ASan, else 1.  Scales the deadlines of what must succeed,
   never what must fail. */
int test_time_scale(void);

/* Wait for "STOPPING=1" (or another line) on the notify socket. */
int daemon_wait_notify(struct daemon *d, const char *what, int timeout_ms);

/* Write text to path (created or truncated), or the test fails. */
void write_text_file(const char *path, const char *text);
/* The same for a secret (a key file qrsd reads): mode 0600, as qrsd
   requires of a file others could otherwise read. */
void write_key_file(const char *path, const char *text);

/* The first max - 1 bytes of the file at path in a new NUL-terminated
   buffer (caller frees); *ret_len (may be NULL) gets their count.  Fails
   the test if the file cannot be opened. */
char *read_text_file(const char *path, size_t max, size_t *ret_len);

/* An AF_UNIX stream socket bound to path (not listening), or the test
   fails. */
int unix_bind(const char *path);

/* Run argv with stdout captured into out (NUL-terminated, truncated to
   outlen); stderr into err if not NULL.  Returns the exit status. */
int run_capture(char *const argv[], char *out, size_t outlen, char *err,
                size_t errlen);

/* Run $QRSCTL_BIN -s sock with the arguments that follow (NULL
   terminated), captured as run_capture() does.  Returns the exit
   status. */
int run_qrsctl(const char *sock, char *out, size_t outlen, char *err,
               size_t errlen, ...);
int run_qrsctlv(const char *sock, char *out, size_t outlen, char *err,
                size_t errlen, va_list ap);

/* Raw protocol. */
int raw_connect(const char *sock);
void raw_send(int fd, const void *buf, size_t len);
void raw_send_msg(int fd, uint16_t type, uint32_t seq,
                  const ProtobufCMessage *m);
/* count frames of type carrying m, seq, seq + 1, ..., in one write. */
void raw_send_many(int fd, uint16_t type, uint32_t seq, int count,
                   const ProtobufCMessage *m);
/* A DRAW of n samples from source ("" or NULL: the default). */
void raw_send_draw(int fd, uint32_t seq, const char *source, uint32_t n);
/* A HELLO with this protocol version, without waiting for the reply. */
void raw_send_hello(int fd, uint32_t seq);
/* Encode a frame header (magic, QRS_PROTO_VERSION) into b. */
void raw_frame_hdr(uint8_t b[QRS_FRAME_HDR_SIZE], uint16_t type,
                   uint32_t length, uint32_t seq);
/* HELLO and its reply. */
void raw_hello(int fd);
/* raw_connect() and raw_hello(): a connection ready for requests. */
int raw_connect_hello(const char *sock);
/* A new connection's HELLO (with seq) is answered BUSY, and the
   connection closed (a connection limit is reached). */
void raw_expect_hello_busy(const char *sock, uint32_t seq);
/* Read one frame (5 s timeout).  Returns 0 and the frame (payload in a new
   buffer, caller frees), or -1 on EOF. */
int raw_recv(int fd, struct qrs_frame_hdr *h, uint8_t **payload);
/* Expect an ERROR frame with the given QRS_E_* code; returns its seq. */
uint32_t raw_expect_error(int fd, int code);
/* Receive n frames (5 s timeout each) whose seqs are seq .. seq + n - 1,
   each once, in any order.  Returns how many were of type; *ret_errors
   (may be NULL) gets how many were ERROR. */
int raw_recv_count(int fd, int n, uint32_t seq, uint16_t type,
                   int *ret_errors);
/* Expect a frame of type with seq (its payload is discarded). */
void raw_expect_reply(int fd, uint16_t type, uint32_t seq);
/* Expect the peer to close (EOF within 5 s). */
void raw_expect_eof(int fd);
/* raw_expect_error() and raw_expect_eof(), then close fd: the daemon
   answered a fatal error.  Returns the ERROR's seq. */
uint32_t raw_expect_error_eof(int fd, int code);

#endif
