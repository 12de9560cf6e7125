/* qrs-bench draw: the draw round trip through a real qrsd, against the
   floor of the same work without the daemon.

   The floor is a minimal blocking server in its own process: for each
   request frame (the size of a DRAW frame) it calls getrandom() for
   sample_count bytes, makes one pass over them, and writes a frame the size
   of a DRAW_REPLY.  Draw and floor are measured in alternating rounds in
   one run, under the same CPU pinning, and printed with their ratio. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <qrs/client.h>

#include "amplify.h"
#include "bench.h"
#include "frame.h"

struct opts {
  const char *socket;           /* NULL: start our own qrsd */
  const char *qrsd;
  struct bench_rounds draws;
  double seconds;               /* per throughput measurement */
  int pin;
};

static char tmpdir[64];
static pid_t qrsd_pid = -1;
static pid_t floor_pid = -1;
static char floor_sock[100];
static char qrsd_sock[100];
static size_t req_size, reply_size;

/* Frame sizes of a default DRAW and of the DRAW_REPLY qrsd sends. */
static void
measure_frame_sizes(uint32_t samples)
{
  QrsIpc__Draw d = QRS_IPC__DRAW__INIT;
  QrsIpc__DrawReply r = QRS_IPC__DRAW_REPLY__INIT;
  QrsIpc__Timestamp t = QRS_IPC__TIMESTAMP__INIT;

  d.sample_count = samples;
  req_size = qrs__frame_size(&d.base);
  t.realtime_ns = 1796000000000000000ll;
  t.monotonic_ns = 700000000000ll;
  r.u = 0.4;
  r.z = -0.3;
  r.sample_mean = 127.4;
  r.sample_count = samples;
  r.source = "system";
  r.served_by = "system";
  r.amplifier = "zscore_mean";
  r.received = &t;
  r.generated = &t;
  r.sent = &t;
  reply_size = qrs__frame_size(&r.base);
}

/* ---- the floor server ----------------------------------------------- */

struct floor_conn {
  int fd;
  uint32_t samples;
};

/* Move all n bytes of b through fd: read them (out 0) or write them (out
   1).  Returns 0, or -1 when fd failed or reached its end.  Inline, so
   that each caller's copy has its direction folded in. */
static inline int
move_full(int fd, uint8_t *b, size_t n, int out)
{
  ssize_t r;
  size_t done;

  done = 0;
  while (done < n) {
    if (out)
      r = write(fd, b + done, n - done);
    else
      r = read(fd, b + done, n - done);
    if (r <= 0) {
      if (r < 0 && errno == EINTR)
        continue;
      return -1;
    }
    done += (size_t)r;
  }
  return 0;
}

/* The same pass qrsd makes (its amplifier's byte sum). */
static uint64_t
one_pass(const uint8_t *b, size_t n)
{
  return amp_byte_sum(b, n);
}

static void
fill_random(uint8_t *b, size_t n)
{
  size_t done;
  ssize_t r;

  done = 0;
  while (done < n) {
    r = getrandom(b + done, n - done, 0);
    if (r > 0)
      done += (size_t)r;
  }
}

static void *
floor_conn_main(void *arg)
{
  struct floor_conn *fc;
  uint8_t req[256], reply[512], *buf;
  uint64_t sum;

  fc = arg;
  buf = malloc(fc->samples);
  memset(reply, 0, sizeof(reply));
  while (buf && move_full(fc->fd, req, req_size, 0) == 0) {
    fill_random(buf, fc->samples);
    sum = one_pass(buf, fc->samples);
    memcpy(reply + 20, &sum, sizeof(sum));
    if (move_full(fc->fd, reply, reply_size, 1) < 0)
      break;
  }
  free(buf);
  close(fc->fd);
  free(fc);
  return NULL;
}

static void
floor_server(int lfd, uint32_t samples)
{
  struct floor_conn *fc;
  pthread_t t;
  int fd;

  for (;;) {
    fd = accept(lfd, NULL, NULL);
    if (fd < 0)
      continue;
    fc = malloc(sizeof(*fc));
    fc->fd = fd;
    fc->samples = samples;
    pthread_create(&t, NULL, floor_conn_main, fc);
    pthread_detach(t);
  }
}

/* A new AF_UNIX stream socket (or -1) and in *sa the address of path. */
static int
unix_socket(const char *path, struct sockaddr_un *sa)
{
  memset(sa, 0, sizeof(*sa));
  sa->sun_family = AF_UNIX;
  snprintf(sa->sun_path, sizeof(sa->sun_path), "%s", path);
  return socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
}

static int
listen_unix(const char *path)
{
  struct sockaddr_un sa;
  int fd;

  fd = unix_socket(path, &sa);
  if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
      listen(fd, 64) < 0) {
    perror("floor server");
    exit(1);
  }
  return fd;
}

static int
connect_unix(const char *path)
{
  struct sockaddr_un sa;
  int fd;

  fd = unix_socket(path, &sa);
  if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
    perror(path);
    exit(1);
  }
  return fd;
}

/* ---- processes ------------------------------------------------------ */

static void
start_floor(const struct opts *o)
{
  int lfd;

  snprintf(floor_sock, sizeof(floor_sock), "%s/floor.sock", tmpdir);
  lfd = listen_unix(floor_sock);
  floor_pid = fork();
  if (floor_pid == 0) {
    if (o->pin)
      bench_pin(0);
    floor_server(lfd, o->draws.samples);
    _exit(0);
  }
  close(lfd);
}

static void
start_qrsd(const struct opts *o)
{
  snprintf(qrsd_sock, sizeof(qrsd_sock), "%s/qrsd.sock", tmpdir);
  qrsd_pid = bench_start_qrsd(bench_find_qrsd(o->qrsd), qrsd_sock, NULL,
                              o->pin);
}

static void
stop_servers(void)
{
  bench_kill(&qrsd_pid, SIGTERM);
  bench_kill(&floor_pid, SIGKILL);
}

/* ---- latency -------------------------------------------------------- */

static void
lat_floor(int fd, struct bench_lat *l, int count)
{
  uint8_t req[256], reply[512];
  int64_t t0;
  int i;

  memset(req, 0, sizeof(req));
  for (i = 0; i < count; i++) {
    t0 = mono_now_ns();
    if (move_full(fd, req, req_size, 1) < 0 ||
        move_full(fd, reply, reply_size, 0) < 0) {
      fprintf(stderr, "qrs-bench: floor server went away\n");
      exit(1);
    }
    bench_lat_add(l, mono_now_ns() - t0);
  }
}

static void
lat_local(struct bench_lat *gr, struct bench_lat *pass, int count,
          uint32_t samples)
{
  volatile uint64_t sink;
  uint8_t *buf;
  int64_t t0;
  int i;

  buf = malloc(samples);
  for (i = 0; i < count; i++) {
    t0 = mono_now_ns();
    fill_random(buf, samples);
    bench_lat_add(gr, mono_now_ns() - t0);
    t0 = mono_now_ns();
    sink = one_pass(buf, samples);
    bench_lat_add(pass, mono_now_ns() - t0);
  }
  (void)sink;
  free(buf);
}

/* ---- throughput ----------------------------------------------------- */

/* What the workers of a figure draw from. */
struct tput {
  const struct opts *o;
  int floor;                    /* 1: against the floor server */
};

/* A worker (struct bench_worker, ctx a struct tput): round trips until
   its end, the first failure ends them. */
static void *
tput_main(void *arg)
{
  struct bench_worker *w = arg;
  const struct tput *t = w->ctx;
  struct qrs_draw_request rq;
  uint8_t req[256], reply[512];
  struct qrs_client *c;
  struct qrs_draw d;
  int fd;

  memset(req, 0, sizeof(req));
  if (t->floor) {
    fd = connect_unix(floor_sock);
    while (mono_now_ns() < w->end) {
      if (move_full(fd, req, req_size, 1) < 0 ||
          move_full(fd, reply, reply_size, 0) < 0)
        break;
      w->count++;
    }
    close(fd);
    return NULL;
  }
  if (qrs_client_new(qrsd_sock, NULL, &c) < 0)
    return NULL;
  memset(&rq, 0, sizeof(rq));
  rq.sample_count = t->o->draws.samples;
  while (mono_now_ns() < w->end) {
    if (qrs_client_draw(c, &rq, &d) < 0)
      break;
    w->count++;
  }
  qrs_client_free(c);
  return NULL;
}

/* Round trips/s of clients threads (at most 16) for o->seconds. */
static double
throughput(const struct opts *o, int clients, int floor)
{
  struct bench_worker w[16];
  struct tput t;
  uint64_t failed;
  int i;

  t.o = o;
  t.floor = floor;
  for (i = 0; i < clients; i++)
    w[i].ctx = &t;
  return bench_throughput(w, clients, o->seconds, tput_main, &failed);
}

/* ---- main ----------------------------------------------------------- */

static void
usage(FILE *f)
{
  fprintf(f,
"Usage: qrs-bench draw [OPTIONS]\n"
"\n"
"Measures qrsd's draw round trip (latency from one client; draws/s with\n"
"1, 4 and 16 clients) and, in the same run, the floor: a blocking AF_UNIX\n"
"server in its own process that answers a frame of the same size after\n"
"getrandom() of the same byte count and one pass over the bytes.  Prints\n"
"each figure and the ratio draw/floor.\n"
"\n"
"Options:\n"
"  --socket PATH     measure a running qrsd (default: start one from the\n"
"                    build tree on a temporary socket)\n"
"  --qrsd PATH       the qrsd binary to start (default: $QRSD, else\n"
"                    the build tree's daemon/qrsd)\n"
"  --samples N       bytes per draw (default 10000)\n"
"  --rounds N        alternating latency rounds (default 10)\n"
"  --per-round N     round trips per round and side (default 2000)\n"
"  --seconds S       duration of each throughput figure (default 1.5)\n"
"  --no-pin          do not pin client and servers to CPU 0 for the\n"
"                    latency figures\n"
"  -h, --help        show this help\n");
}

int
bench_draw(int argc, char **argv)
{
  struct opts o = {
    .draws = { .samples = 10000, .rounds = 10, .per_round = 2000 },
    .seconds = 1.5,
    .pin = 1,
  };
  const struct cli_opt opts[] = {
    { .name = "socket", .type = CLI_OPT_STRING, .field = &o.socket },
    { .name = "qrsd", .type = CLI_OPT_STRING, .field = &o.qrsd },
    BENCH_ROUNDS_OPTS(&o.draws),
    { .name = "seconds", .type = CLI_OPT_DOUBLE, .field = &o.seconds },
    { .name = "no-pin", .type = CLI_OPT_SET, .field = &o.pin },
    BENCH_OPTS_END,
  };
  struct bench_lat ld, lf, lg, lp;
  struct qrs_client *c;
  double p50d, p99d, p999d, p50f, p99f, p999f, td, tf;
  static const int nclients[] = { 1, 4, 16 };
  int i, fd, r;
  size_t total;

  r = bench_opts_parse(argc, argv, opts, usage);
  if (r >= 0)
    return r;
  if (bench_rounds_bad(&o.draws) || o.seconds <= 0) {
    fprintf(stderr, "qrs-bench draw: bad option value\n");
    return 2;
  }

  if (bench_tmpdir(tmpdir, sizeof(tmpdir), stop_servers) < 0)
    return 1;
  measure_frame_sizes(o.draws.samples);
  start_floor(&o);
  if (o.socket && strlen(o.socket) >= sizeof(qrsd_sock)) {
    fprintf(stderr, "qrs-bench draw: socket path too long\n");
    return 2;
  }
  if (o.socket)
    snprintf(qrsd_sock, sizeof(qrsd_sock), "%s", o.socket);
  else
    start_qrsd(&o);

  if (o.pin)
    bench_pin(0);
  c = bench_connect(qrsd_sock);
  fd = connect_unix(floor_sock);

  total = (size_t)o.draws.rounds * (size_t)o.draws.per_round;
  bench_lat_init(&ld, total);
  bench_lat_init(&lf, total);
  bench_lat_init(&lg, total);
  bench_lat_init(&lp, total);
  /* Warm up both paths, then alternate rounds so that the machine's
     moods fall on both sides alike. */
  bench_lat_draws(c, &o.draws, &ld);
  lat_floor(fd, &lf, o.draws.per_round);
  ld.n = lf.n = 0;
  for (i = 0; i < o.draws.rounds; i++) {
    bench_lat_draws(c, &o.draws, &ld);
    lat_floor(fd, &lf, o.draws.per_round);
    lat_local(&lg, &lp, o.draws.per_round / 4, o.draws.samples);
  }
  close(fd);
  qrs_client_free(c);

  printf("qrs-bench draw: sample_count %u, request frame %zu B, reply "
         "frame %zu B, %s, %d x %d round trips per side\n", o.draws.samples,
         req_size, reply_size, o.pin ? "client and servers pinned to CPU 0"
                                      : "unpinned",
         o.draws.rounds, o.draws.per_round);
  printf("latency (one client, blocking):\n");
  bench_print_lat("draw through qrsd", &ld);
  bench_print_lat("floor (echo + getrandom + pass)", &lf);
  bench_print_lat("  of which getrandom", &lg);
  bench_print_lat("  of which one pass", &lp);
  p50d = bench_lat_pct_us(&ld, 0.5);
  p99d = bench_lat_pct_us(&ld, 0.99);
  p999d = bench_lat_pct_us(&ld, 0.999);
  p50f = bench_lat_pct_us(&lf, 0.5);
  p99f = bench_lat_pct_us(&lf, 0.99);
  p999f = bench_lat_pct_us(&lf, 0.999);
  printf("  ratio draw/floor: p50 %.2fx (target <= 1.1x)   p99 %.2fx "
         "(target <= 3x)   p99.9 %.2fx\n", p50d / p50f, p99d / p99f,
         p999d / p999f);

  if (o.pin)
    bench_unpin();
  printf("throughput (%.1f s each, unpinned client threads):\n", o.seconds);
  for (i = 0; i < 3; i++) {
    td = throughput(&o, nclients[i], 0);
    tf = throughput(&o, nclients[i], 1);
    printf("  %2d client%s  draws %9.0f /s   floor %9.0f /s   ratio "
           "%.2f%s\n", nclients[i], nclients[i] > 1 ? "s" : " ", td, tf,
           td / tf, nclients[i] == 16 ? " (target >= 1.0)" : "");
  }
  bench_lat_done(&ld);
  bench_lat_done(&lf);
  bench_lat_done(&lg);
  bench_lat_done(&lp);
  return 0;
}
