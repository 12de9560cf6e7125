/* libFuzzer harness: libqrs's reply parser.

   The input plays qrsd: it is the byte stream the client reads on its
   socket (a socketpair; the input, then EOF).  The client makes its HELLO
   (seq 1), two pipelined draws (seq 2, 3), a blocking draw (4) that
   stashes the others' replies, finishes both tickets, then BYTES (5),
   STATUS (6), HEALTH (7) and SOURCES (8), as real callers would.  Every
   call must end with success or a typed error; a draw that succeeds must
   carry a u in [0, 1] or NaN as sent, strings NUL-terminated. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include <qrs/client.h>
#include <qrs/error.h>

#include "ipc/clientint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Within a socket buffer: the write never blocks. */
#define FUZZ_MAX_INPUT (64 * 1024)

static void
check_rc(int r)
{
  /* 0, a QRS_E_* code, or an errno the client documents. */
  if (r > 0)
    abort();
  if (r < 0 && !(r <= QRS_E_PROTOCOL && r > -1200) &&
      r != -ETIMEDOUT && r != -ENOMEM && r != -EINVAL && r != -EPIPE &&
      r != -ECONNRESET)
    abort();
}

static void
check_draw(int r, const struct qrs_draw *d)
{
  check_rc(r);
  if (r == 0 && (strnlen(d->source, sizeof(d->source)) == sizeof(d->source) ||
                 strnlen(d->served_by, sizeof(d->served_by)) ==
                     sizeof(d->served_by)))
    abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  struct qrs_client_options o;
  struct qrs_client *c;
  struct qrs_sources *src;
  struct qrs_health *hl;
  struct qrs_status *st;
  struct qrs_draw d;
  const struct qrs_server_info *in;
  uint8_t bytes[16];
  uint32_t t1, t2;
  int sv[2], r1, r2, r;

  if (size > FUZZ_MAX_INPUT)
    return 0;
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
    abort();
  if (size && write(sv[1], data, size) != (ssize_t)size)
    abort();
  shutdown(sv[1], SHUT_WR);
  memset(&o, 0, sizeof(o));
  o.timeout_ms = 2000;          /* never reached: EOF comes first */
  o.no_reconnect = 1;
  r = qrs__client_new_fd(sv[0], &o, &c);
  check_rc(r);
  if (r == 0) {
    in = qrs_client_server_info(c);
    if (!in || strnlen(in->features, sizeof(in->features)) ==
                   sizeof(in->features))
      abort();
    r1 = qrs_client_draw_begin(c, NULL, &t1);
    r2 = qrs_client_draw_begin(c, NULL, &t2);
    check_rc(r1);
    check_rc(r2);
    r = qrs_client_draw(c, NULL, &d);
    check_draw(r, &d);
    if (r1 == 0) {
      r = qrs_client_draw_finish(c, t1, &d);
      check_draw(r, &d);
    }
    if (r2 == 0) {
      r = qrs_client_draw_cancel(c, t2);
      check_rc(r);
    }
    (void)qrs_client_errmsg(c);
    check_rc(qrs_client_bytes(c, NULL, bytes, sizeof(bytes), NULL));
    r = qrs_client_status(c, &st);
    check_rc(r);
    if (r == 0)
      qrs_status_free(st);
    r = qrs_client_health(c, &hl);
    check_rc(r);
    if (r == 0)
      qrs_health_free(hl);
    r = qrs_client_sources(c, &src);
    check_rc(r);
    if (r == 0)
      qrs_sources_free(src);
    qrs_client_free(c);
  }
  close(sv[1]);
  return 0;
}
