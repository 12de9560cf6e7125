/* Integration-test harness: a real qrsd on a temporary socket, raw frame
   I/O for protocol tests, and helpers to run the command-line tools.

   The binaries come from the environment meson sets: $QRSD_BIN and
   $QRSCTL_BIN. */
#ifndef QRS_TEST_HARNESS_H
#define QRS_TEST_HARNESS_H

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

/* Start qrsd on d->sock (with -c d->conf if set) plus extra args (NULL
   terminated), and wait for READY=1 on NOTIFY_SOCKET.  Fails the test if it
   does not come within 10 s. */
void daemon_start(struct daemon *d, ...);

/* Prepare + start in one go. */
void daemon_run(struct daemon *d, const char *yaml);

/* SIGTERM and wait; returns the exit status (or 128 + signal).  Asserts it
   stopped within 10 s. */
int daemon_stop(struct daemon *d);

/* Remove the temporary directory (after daemon_stop). */
void daemon_cleanup(struct daemon *d);

/* Does qrsd's log contain needle (waits up to 3 s for it)? */
int daemon_log_contains(const struct daemon *d, const char *needle);
/* How often it occurs now (the first MiB; no waiting). */
int daemon_log_count(const struct daemon *d, const char *needle);

/* Wait for "STOPPING=1" (or another line) on the notify socket. */
/* How much slower than a plain build the qrsd under test may be:
   $QRS_TEST_TIME_SCALE (.ci/run sets it for the TSan qrsd), else 4 when
   the suite drives another build's qrsd (QRSD_BIN_OVERRIDE: the TSan one)
   or runs under ASan, else 1.  Scales the deadlines of what must succeed,
   never what must fail. */
int test_time_scale(void);

int daemon_wait_notify(struct daemon *d, const char *what, int timeout_ms);

/* Run argv with stdout captured into out (NUL-terminated, truncated to
   outlen); stderr into err if not NULL.  Returns the exit status. */
int run_capture(char *const argv[], char *out, size_t outlen, char *err,
                size_t errlen);

/* Raw protocol. */
int raw_connect(const char *sock);
void raw_send(int fd, const void *buf, size_t len);
void raw_send_msg(int fd, uint16_t type, uint32_t seq,
                  const ProtobufCMessage *m);
void raw_hello(int fd);
/* Read one frame (5 s timeout).  Returns 0 and the frame (payload in a new
   buffer, caller frees), or -1 on EOF. */
int raw_recv(int fd, struct qrs_frame_hdr *h, uint8_t **payload);
/* Expect an ERROR frame with the given QRS_E_* code; returns its seq. */
uint32_t raw_expect_error(int fd, int code);
/* Expect the peer to close (EOF within 5 s). */
void raw_expect_eof(int fd);

/* Kolmogorov-Smirnov p-value of n samples against U(0,1); sorts x. */
double ks_uniform_p(double *x, size_t n);

#endif
