/* libFuzzer harness: qrsd's connection handler, fed raw byte streams.

   A real server (server_init + server_listen_path, the built-in config
   with a system and a mock source) listens on a Unix socket in a
   temporary directory; for every input the harness connects, writes the
   input, half-closes, and runs the daemon's loop while draining replies,
   until qrsd closes the connection.  Every reply must be a well-formed
   frame with a known reply type; the connection must end (a connection
   left open after the client's EOF is reported as a hang: the loop gives
   up after 10 s and aborts). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <uv.h>

#include "conf/conf.h"
#include "frame.h"
#include "base/log.h"
#include "server/server.h"
#include "timestamp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_INPUT (64 * 1024)
#define FUZZ_MAX_REPLY (64u * 1024u * 1024u)

static uv_loop_t loop;
static struct server srv;
static struct qrsd_conf *conf;
static char sock_path[108];
static int ready;

static void
setup(void)
{
  char dir[] = "/tmp/qrs-fuzz-server-XXXXXX", err[512], yaml[1024];
  int i, r;

  if (!mkdtemp(dir))
    abort();
  snprintf(sock_path, sizeof(sock_path), "%s/qrsd.sock", dir);
  /* allow_test_sources: where qrsd has it (the mock source needs it). */
  for (i = 0; i < 2; i++) {
    snprintf(yaml, sizeof(yaml),
             "socket: { path: \"%s\", mode: \"0600\", group: \"\" }\n"
             "default_source: system\n"
             "%s"
             "limits: { max_frame_bytes: 65536,"
             " max_inflight_per_connection: 8, request_timeout_ms: 2000 }\n"
             "sources:\n"
             "  system: { type: system }\n"
             "  fair: { type: mock, seed: 11, mean_shift: 0.0 }\n",
             sock_path, i == 0 ? "allow_test_sources: true\n" : "");
    r = conf_load_string(yaml, strlen(yaml), "fuzz", &conf, err,
                         sizeof(err));
    if (r == 0)
      break;
  }
  if (r < 0) {
    fprintf(stderr, "fuzz_server: config: %s\n", err);
    abort();
  }
  log_set_level(LOG_LEVEL_ERR);
  if (uv_loop_init(&loop) != 0)
    abort();
  if (server_init(&srv, &loop, conf, err, sizeof(err)) < 0 ||
      server_listen_path(&srv, sock_path, err, sizeof(err)) < 0) {
    fprintf(stderr, "fuzz_server: %s\n", err);
    abort();
  }
  ready = 1;
}

/* Check the reply frames in buf[0..len); returns the bytes consumed. */
static size_t
check_replies(const uint8_t *buf, size_t len)
{
  struct qrs_frame_hdr h;
  size_t off;

  off = 0;
  while (len - off >= QRS_FRAME_HDR_SIZE) {
    /* Replies may be larger than requests (a negotiated reply limit). */
    if (qrs__frame_hdr_decode(buf + off, FUZZ_MAX_REPLY, &h) != 0) {
      fprintf(stderr, "fuzz_server: qrsd sent a bad frame header\n");
      abort();
    }
    if (len - off - QRS_FRAME_HDR_SIZE < h.length)
      break;
    if (h.type % 2 != 0 && h.type != QRS_MSG_ERROR) {
      fprintf(stderr, "fuzz_server: qrsd sent a request type %u\n", h.type);
      abort();
    }
    if (!qrs__msg_descriptor(h.type)) {
      fprintf(stderr, "fuzz_server: unknown reply type %u\n", h.type);
      abort();
    }
    {
      ProtobufCMessage *m = protobuf_c_message_unpack(
          qrs__msg_descriptor(h.type), NULL, h.length,
          buf + off + QRS_FRAME_HDR_SIZE);

      if (!m) {
        fprintf(stderr, "fuzz_server: a %s that does not decode\n",
                qrs__msg_name(h.type));
        abort();
      }
      protobuf_c_message_free_unpacked(m, NULL);
    }
    off += QRS_FRAME_HDR_SIZE + h.length;
  }
  return off;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  static uint8_t rbuf[1 << 20];
  struct sockaddr_un sa;
  size_t rlen, used, sent;
  int64_t end;
  ssize_t n;
  int fd, eof;

  if (!ready)
    setup();
  if (size > FUZZ_MAX_INPUT)
    return 0;
  fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    abort();
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  memcpy(sa.sun_path, sock_path, strlen(sock_path) + 1);
  if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
    abort();
  sent = 0;
  rlen = 0;
  eof = 0;
  end = mono_now_ns() + 10000000000LL;      /* 10 s */
  while (!eof) {
    if (sent < size) {
      n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
      if (n > 0)
        sent += (size_t)n;
      else if (n < 0 && errno != EAGAIN)
        sent = size;            /* qrsd closed on us: fine */
      if (sent == size)
        shutdown(fd, SHUT_WR);
    } else if (size == 0 && sent == 0) {
      shutdown(fd, SHUT_WR);
      sent = 1;
    }
    uv_run(&loop, UV_RUN_NOWAIT);
    for (;;) {
      if (rlen == sizeof(rbuf))
        rlen = 0;               /* drop what was checked */
      n = recv(fd, rbuf + rlen, sizeof(rbuf) - rlen, 0);
      if (n > 0) {
        rlen += (size_t)n;
        used = check_replies(rbuf, rlen);
        memmove(rbuf, rbuf + used, rlen - used);
        rlen -= used;
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EINTR))
        eof = 1;
      break;
    }
    if (mono_now_ns() > end) {
      fprintf(stderr, "fuzz_server: qrsd kept the connection open 10 s "
                      "after the client's EOF\n");
      abort();
    }
  }
  close(fd);
  /* Let qrsd finish closing its side. */
  uv_run(&loop, UV_RUN_NOWAIT);
  return 0;
}
