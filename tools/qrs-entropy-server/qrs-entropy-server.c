/* qrs-entropy-server: a gRPC EntropyService + PurityService server.

   A real gRPC C-core server (proto/entropy_service.proto,
   proto/purity_service.proto) serving fresh bytes from getrandom(2) or a
   device file.  qrs uses it as the upstream in its tests and benchmarks;
   it is also the template for hardware vendors: read_entropy() below is
   the only function that touches the source of randomness, replace it and
   the rest (protocol, echo, timestamps, api key, TLS) stays.

   One libuv loop runs everything; gRPC's completion queue reaches it
   through daemon/grpc/gbridge.  Fault flags (--latency-ms, --error-rate,
   ...) make it misbehave on purpose so that clients can be tested against
   every failure an upstream can show.  usage() is the manual. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <grpc/grpc.h>
#include <grpc/support/time.h>
#include <uv.h>

#include "base/keyfile.h"
#include "cliparse.h"
#include "grpc/gbridge.h"
#include "grpc/gserve.h"
#include "gwire.h"

#define DEFAULT_MAX_BYTES (1u << 20)
#define HARD_MAX_BYTES (4u << 20)
#define DEFAULT_BLOCK_BYTES 10000
#define KEY_MAX 4096

/* Byte mean and standard deviation of uniform bytes: (0 + 255) / 2 and
   sqrt((256^2 - 1) / 12). */
#define POP_MEAN 127.5
#define POP_STD 73.90027063549903
#define U_EPS 1e-10

struct options {
  const char *listen;
  const char *device;
  const char *device_id;
  const char *api_key_file;
  const char *api_key_header;
  const char *tls_cert, *tls_key, *tls_client_ca;
  uint32_t max_bytes;
  uint32_t block_bytes;
  double latency_ms, jitter_ms, error_rate;
  uint64_t drop_after;          /* 0: never */
  int no_echo, wrong_echo, short_data, empty_data, stall, refuse_purity;
  int bad_u;
  long seed;
  int verbose;
};

/* A request held back: delayed by --latency-ms/--jitter-ms, or stalled. */
struct held {
  struct srv *s;
  struct gserve_req *r;
  uv_timer_t timer;
  struct held *next, *prev;
};

struct srv {
  struct options o;
  uv_loop_t *loop;
  struct gbridge br;
  struct gserve *g;
  char *api_key;
  size_t api_key_len;
  int dev_fd;
  int stopping;
  int exit_code;
  struct held *held;            /* delayed or stalled requests */
  uv_signal_t sigint, sigterm;
  unsigned short rng[3];
};

static void srv_stop(struct srv *s, int code);

/* ======================================================================
   VENDOR TEMPLATE: the one function that reads the source of randomness.

   Fill buf with n fresh bytes, generated now (never from a pool filled
   earlier: clients rely on "just in time"), and store the time they came
   into existence (CLOCK_REALTIME, ns) in *ret_ts_ns.  Return 0, or a
   negative errno on failure (the client gets UNAVAILABLE with the
   message).  It runs on the server's only thread and may block for as
   long as the device needs; n is at most --max-bytes.

   This version reads --device PATH if given (a character device such as
   /dev/hwrng, or a file), else getrandom(2).
   ====================================================================== */
static int
read_entropy(struct srv *s, uint8_t *buf, size_t n, uint64_t *ret_ts_ns)
{
  struct timespec ts;
  size_t got = 0;
  ssize_t r;

  while (got < n) {
    if (s->dev_fd >= 0)
      r = read(s->dev_fd, buf + got, n - got);
    else
      r = getrandom(buf + got, n - got, 0);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    if (r == 0)
      return -ENODATA;          /* end of a device file */
    got += (size_t)r;
  }
  clock_gettime(CLOCK_REALTIME, &ts);
  *ret_ts_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
  return 0;
}
/* ================== end of the vendor template ======================= */

static void logmsg(struct srv *s, const char *fmt, ...)
  __attribute__((format(printf, 2, 3)));

static void
logmsg(struct srv *s, const char *fmt, ...)
{
  va_list ap;

  (void)s;
  va_start(ap, fmt);
  fputs("qrs-entropy-server: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static double
uniform01(struct srv *s)
{
  return erand48(s->rng);
}

static uint64_t
echo_of(struct srv *s, uint64_t seq)
{
  if (s->o.no_echo)
    return 0;
  if (s->o.wrong_echo)
    return (seq + 1) & INT64_MAX;
  return seq;
}

/* n fresh bytes for r in a new buffer (the caller frees), their time in
   *ret_ts; or NULL after answering r with the error. */
static uint8_t *
fresh_block(struct srv *s, struct gserve_req *r, size_t n, uint64_t *ret_ts)
{
  uint8_t *data = malloc(n ? n : 1);
  char why[160];
  int e;

  if (!data) {
    gserve_reply_error(r, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    return NULL;
  }
  e = read_entropy(s, data, n, ret_ts);
  if (e < 0) {
    snprintf(why, sizeof(why), "entropy source failed: %s", strerror(-e));
    logmsg(s, "%s", why);
    free(data);
    gserve_reply_error(r, GRPC_STATUS_UNAVAILABLE, why);
    return NULL;
  }
  return data;
}

/* Answer one EntropyRequest. */
static void
answer_entropy(struct srv *s, struct gserve_req *r)
{
  struct gw_entropy_resp resp;
  uint64_t n64 = r->entropy.bytes_needed;
  uint8_t *data;
  char why[160];
  size_t n;

  if (n64 == 0 || n64 > INT32_MAX) {
    gserve_reply_error(r, GRPC_STATUS_INVALID_ARGUMENT,
                       "bytes_needed must be between 1 and 2147483647");
    return;
  }
  if (n64 > s->o.max_bytes) {
    snprintf(why, sizeof(why), "bytes_needed %" PRIu64 " above the "
             "server's maximum of %" PRIu32, n64, s->o.max_bytes);
    gserve_reply_error(r, GRPC_STATUS_OUT_OF_RANGE, why);
    return;
  }
  n = (size_t)n64;
  memset(&resp, 0, sizeof(resp));
  data = fresh_block(s, r, n, &resp.generation_timestamp_ns);
  if (!data)
    return;
  resp.data.data = data;
  resp.data.len = s->o.empty_data ? 0 : s->o.short_data ? n / 2 : n;
  resp.sequence_id = echo_of(s, r->entropy.sequence_id);
  resp.device_id.data = (const uint8_t *)s->o.device_id;
  resp.device_id.len = strlen(s->o.device_id);
  gserve_reply_entropy(r, &resp);
  free(data);
}

/* Answer one DrawRequest: integrate a fresh block into z and u = Phi(z)
   (byte mean against the uniform population). */
static void
answer_draw(struct srv *s, struct gserve_req *r)
{
  struct gw_draw_resp resp;
  uint8_t *data;
  uint64_t sum = 0;
  size_t n, i;
  char why[160];
  double mean, z, u;

  if (r->drw.source_id.len > 0 && strcmp(r->source_id, s->o.device_id)) {
    snprintf(why, sizeof(why), "unknown source_id (this server serves "
             "'%s')", s->o.device_id);
    gserve_reply_error(r, GRPC_STATUS_NOT_FOUND, why);
    return;
  }
  if (r->drw.block_bytes > s->o.max_bytes) {
    snprintf(why, sizeof(why), "block_bytes %" PRIu64 " above the server's "
             "maximum of %" PRIu32, r->drw.block_bytes, s->o.max_bytes);
    gserve_reply_error(r, GRPC_STATUS_OUT_OF_RANGE, why);
    return;
  }
  n = r->drw.block_bytes ? (size_t)r->drw.block_bytes : s->o.block_bytes;
  memset(&resp, 0, sizeof(resp));
  data = fresh_block(s, r, n, &resp.generation_timestamp_ns);
  if (!data)
    return;
  if (s->o.short_data)
    n /= 2;
  for (i = 0; i < n; i++)
    sum += data[i];
  free(data);
  mean = n ? (double)sum / (double)n : POP_MEAN;
  z = n ? (mean - POP_MEAN) / (POP_STD / sqrt((double)n)) : 0.0;
  u = 0.5 * (1.0 + erf(z / sqrt(2.0)));
  if (u < U_EPS)
    u = U_EPS;
  if (u > 1.0 - U_EPS)
    u = 1.0 - U_EPS;
  if (s->o.bad_u)
    u = 1.5;
  resp.u = s->o.empty_data ? 0.0 : u;   /* u = 0 on the wire: absent */
  resp.z = z;
  resp.sequence_id = echo_of(s, r->drw.sequence_id);
  resp.source_id.data = (const uint8_t *)s->o.device_id;
  resp.source_id.len = strlen(s->o.device_id);
  resp.purity_label.data = (const uint8_t *)(s->dev_fd >= 0 ?
                                             "device/raw/none" :
                                             "os/getrandom/none");
  resp.purity_label.len = strlen((const char *)resp.purity_label.data);
  resp.integrated_bytes = n;
  resp.integrator.data = (const uint8_t *)"byte_mean_z";
  resp.integrator.len = strlen("byte_mean_z");
  gserve_reply_draw(r, &resp);
}

static void
answer(struct srv *s, struct gserve_req *r)
{
  if (s->stopping) {
    gserve_reply_error(r, GRPC_STATUS_UNAVAILABLE, "server going away");
    return;
  }
  if (s->o.drop_after && gserve_answered(s->g) >= s->o.drop_after) {
    logmsg(s, "--drop-after %" PRIu64 ": dropping every connection and "
           "exiting", s->o.drop_after);
    gserve_reply_error(r, GRPC_STATUS_UNAVAILABLE, "server going away");
    srv_stop(s, 0);
    return;
  }
  if (s->o.error_rate > 0 && uniform01(s) < s->o.error_rate) {
    gserve_reply_error(r, GRPC_STATUS_UNAVAILABLE,
                       "injected error (--error-rate)");
    return;
  }
  if (r->draw)
    answer_draw(s, r);
  else
    answer_entropy(s, r);
}

static void
on_held_closed(uv_handle_t *h)
{
  free(h->data);
}

static void
held_release(struct held *h)
{
  struct srv *s = h->s;

  if (h->prev)
    h->prev->next = h->next;
  else
    s->held = h->next;
  if (h->next)
    h->next->prev = h->prev;
  uv_close((uv_handle_t *)&h->timer, on_held_closed);
}

static void
on_delay(uv_timer_t *t)
{
  struct held *h = t->data;

  answer(h->s, h->r);
  held_release(h);
}

/* gserve's backend: a request has arrived. */
static void
on_request(void *ctx, struct gserve_req *r)
{
  struct srv *s = ctx;
  struct held *h;
  double delay;

  delay = s->o.latency_ms + s->o.jitter_ms * uniform01(s);
  if (!s->o.stall && delay <= 0) {
    answer(s, r);
    return;
  }
  h = calloc(1, sizeof(*h));
  if (!h) {
    gserve_reply_error(r, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  h->s = s;
  h->r = r;
  uv_timer_init(s->loop, &h->timer);
  h->timer.data = h;
  h->next = s->held;
  if (h->next)
    h->next->prev = h;
  s->held = h;
  if (!s->o.stall)              /* stalled: held until we stop */
    uv_timer_start(&h->timer, on_delay, (uint64_t)ceil(delay), 0);
}

static void
on_bridge_closed(struct gbridge *b)
{
  struct srv *s = (struct srv *)((char *)b - offsetof(struct srv, br));

  uv_close((uv_handle_t *)&s->sigint, NULL);
  uv_close((uv_handle_t *)&s->sigterm, NULL);
}

static void
on_stopped(void *arg)
{
  struct srv *s = arg;

  s->g = NULL;
  gbridge_close(&s->br, on_bridge_closed);
}

static void
srv_stop(struct srv *s, int code)
{
  if (s->stopping)
    return;
  s->stopping = 1;
  s->exit_code = code;
  gserve_stop(s->g, on_stopped, s);
  /* Held requests are answered now (their calls are being cancelled). */
  while (s->held) {
    uv_timer_stop(&s->held->timer);
    gserve_reply_error(s->held->r, GRPC_STATUS_UNAVAILABLE,
                       "server going away");
    held_release(s->held);
  }
}

static void
on_signal(uv_signal_t *h, int sig)
{
  srv_stop(h->data, 0);
}

static void
usage(FILE *f)
{
  fputs(
"Usage: qrs-entropy-server --listen ADDRESS [OPTIONS]\n"
"\n"
"Serve qr_entropy.EntropyService (GetEntropy, StreamEntropy) and\n"
"qr_purity.PurityService (GetDraw, StreamDraws) over gRPC, with fresh\n"
"bytes from getrandom(2) or a device.  Every reply echoes the request's\n"
"sequence_id and carries generation_timestamp_ns, the time its bytes were\n"
"read.  qrs uses it as a test upstream; hardware vendors can use it as a\n"
"template (replace read_entropy() in qrs-entropy-server.c).\n"
"\n"
"Listening:\n"
"  -l, --listen ADDRESS      unix:PATH (an existing socket file is replaced)\n"
"                            or HOST:PORT (port 0 picks a free port).  The\n"
"                            bound address is printed on stdout as\n"
"                            'listening on ADDRESS' once calls are accepted.\n"
"      --tls-cert FILE       serve TLS with this PEM certificate chain ...\n"
"      --tls-key FILE        ... and this PEM private key\n"
"      --tls-client-ca FILE  also require a client certificate signed by\n"
"                            this CA (mutual TLS)\n"
"      --api-key-file FILE   require metadata HEADER: KEY on every call, the\n"
"                            key being the file's first line; a missing or\n"
"                            wrong key gets UNAUTHENTICATED.  Never logged;\n"
"                            refused when others may read the file (0600,\n"
"                            or 0640 owned by root, as qrsd's key files)\n"
"      --api-key-header NAME the metadata key (default api-key, lowercase)\n"
"\n"
"Entropy:\n"
"      --device PATH         read bytes from PATH (e.g. /dev/hwrng) instead\n"
"                            of getrandom(2); end of file is UNAVAILABLE\n"
"      --device-id NAME      device_id / source_id in replies (default\n"
"                            'getrandom', or the device path)\n"
"      --max-bytes N         largest bytes_needed or block_bytes served\n"
"                            (default 1048576, at most 4194304); larger\n"
"                            requests get OUT_OF_RANGE\n"
"      --block-bytes N       block integrated by a draw that asks for 0\n"
"                            (default 10000)\n"
"\n"
"  GetDraw / StreamDraws integrate block_bytes fresh bytes into\n"
"  z = (mean - 127.5) / (73.9003 / sqrt(n)) and u = Phi(z) clamped to\n"
"  [1e-10, 1 - 1e-10]; integrator 'byte_mean_z', coherence_valid false.\n"
"  A non-empty source_id other than --device-id gets NOT_FOUND.\n"
"\n"
"Faults (for testing clients; each says what the client sees):\n"
"      --latency-ms MS       answer every request MS milliseconds late\n"
"      --jitter-ms MS        plus a uniform random 0..MS milliseconds\n"
"      --error-rate P        answer a fraction P (0..1) of requests with\n"
"                            UNAVAILABLE 'injected error' (a stream ends)\n"
"      --drop-after N        after N answered requests, cancel every call\n"
"                            and exit 0 (the upstream dies mid-run)\n"
"      --no-echo             reply sequence_id 0 (echo not verifiable)\n"
"      --wrong-echo          reply sequence_id + 1 (a broken commitment)\n"
"      --short-data          reply half the bytes asked for (draws\n"
"                            integrate half the block)\n"
"      --empty-data          reply no data at all (draws: u absent)\n"
"      --bad-u               draws reply u = 1.5 (outside (0, 1))\n"
"      --stall               accept requests and never answer them (the\n"
"                            client's deadline or cancel ends the call)\n"
"      --refuse-purity       do not offer PurityService: its calls get\n"
"                            UNIMPLEMENTED\n"
"      --seed N              seed of --jitter-ms / --error-rate (default:\n"
"                            from the clock)\n"
"\n"
"  Other methods always get UNIMPLEMENTED.\n"
"\n"
"  -v, --verbose             log every non-OK status to stderr\n"
"  -h, --help                show this help\n"
"\n"
"Exit status: 0 after SIGINT/SIGTERM or --drop-after, 1 on a start-up\n"
"error (the message says which), 2 on bad usage.\n"
"\n"
"Example:\n"
"  qrs-entropy-server --listen unix:/run/qrng.sock --api-key-file key.txt\n",
    f);
}

/* A number option: strtod()'s syntax, in [min, max]. */
static int
parse_num(const struct cli_opt *opt, const char *name, const char *arg,
          double *ret)
{
  char *end;
  double v, lo, hi;

  lo = (double)opt->min;
  hi = (double)opt->max;
  errno = 0;
  v = strtod(arg, &end);
  if (errno || end == arg || *end || !(v >= lo && v <= hi)) {
    fprintf(stderr, "qrs-entropy-server: %s: '%s' is not a number in "
            "[%g, %g]\n", name, arg, lo, hi);
    return -1;
  }
  *ret = v;
  return 0;
}

static void
bad_option(const struct cli *cli, int c, char **argv)
{
  (void)cli;
  (void)c;
  (void)argv;
  fputs("Try 'qrs-entropy-server --help'.\n", stderr);
}

/* The table's rows: --name with a string, a flag, or a number stored as
   as (enum cli_num) in [lo, hi]. */
#define OPT_STR(n, f) \
  { .name = (n), .type = CLI_OPT_STRING, .field = (f) }
#define OPT_FLAG(n, f) \
  { .name = (n), .type = CLI_OPT_SET, .field = (f), .val = 1 }
#define OPT_NUM(n, f, as, lo, hi) \
  { .name = (n), .type = CLI_OPT_NUM, .field = (f), .val = (as), \
    .num = parse_num, .min = (lo), .max = (hi) }

static int
parse_args(int argc, char **argv, struct options *o)
{
  const struct cli_opt opts[] = {
    { .name = "listen", .key = 'l', .type = CLI_OPT_STRING,
      .field = &o->listen },
    OPT_STR("tls-cert", &o->tls_cert),
    OPT_STR("tls-key", &o->tls_key),
    OPT_STR("tls-client-ca", &o->tls_client_ca),
    OPT_STR("api-key-file", &o->api_key_file),
    OPT_STR("api-key-header", &o->api_key_header),
    OPT_STR("device", &o->device),
    OPT_STR("device-id", &o->device_id),
    OPT_NUM("max-bytes", &o->max_bytes, CLI_NUM_U32, 1, HARD_MAX_BYTES),
    OPT_NUM("block-bytes", &o->block_bytes, CLI_NUM_U32, 1, HARD_MAX_BYTES),
    OPT_NUM("latency-ms", &o->latency_ms, CLI_NUM_DOUBLE, 0, 3600000),
    OPT_NUM("jitter-ms", &o->jitter_ms, CLI_NUM_DOUBLE, 0, 3600000),
    OPT_NUM("error-rate", &o->error_rate, CLI_NUM_DOUBLE, 0, 1),
    OPT_NUM("drop-after", &o->drop_after, CLI_NUM_U64, 1, 1000000000000000),
    OPT_FLAG("no-echo", &o->no_echo),
    OPT_FLAG("wrong-echo", &o->wrong_echo),
    OPT_FLAG("short-data", &o->short_data),
    OPT_FLAG("empty-data", &o->empty_data),
    OPT_FLAG("bad-u", &o->bad_u),
    OPT_FLAG("stall", &o->stall),
    OPT_FLAG("refuse-purity", &o->refuse_purity),
    OPT_NUM("seed", &o->seed, CLI_NUM_LONG, 0, 2147483647),
    { .name = "verbose", .key = 'v', .type = CLI_OPT_SET,
      .field = &o->verbose, .val = 1 },
    { .name = "help", .key = 'h', .type = CLI_OPT_HELP },
    { 0 },
  };
  const struct cli cli = {
    .prog = "qrs-entropy-server", .opts = opts, .usage = usage,
    .bad = bad_option,
  };
  int r;

  o->api_key_header = "api-key";
  o->max_bytes = DEFAULT_MAX_BYTES;
  o->block_bytes = DEFAULT_BLOCK_BYTES;
  o->seed = (long)time(NULL) ^ (long)getpid();
  r = cli_opts_parse(&cli, argc, argv);
  if (r == 0)
    exit(0);                    /* after --help */
  if (r > 0)
    return -1;
  if (optind < argc || !o->listen) {
    fprintf(stderr, "qrs-entropy-server: %s\nTry 'qrs-entropy-server "
            "--help'.\n", optind < argc ? "unexpected argument" :
            "--listen ADDRESS is required");
    return -1;
  }
  if (!o->tls_cert != !o->tls_key) {
    fputs("qrs-entropy-server: --tls-cert and --tls-key go together\n",
          stderr);
    return -1;
  }
  if (o->tls_client_ca && !o->tls_cert) {
    fputs("qrs-entropy-server: --tls-client-ca needs --tls-cert and "
          "--tls-key\n", stderr);
    return -1;
  }
  if (!o->device_id)
    o->device_id = o->device ? o->device : "getrandom";
  return 0;
}

static int
load_key(struct srv *s)
{
  char *k = NULL, err[300];
  size_t n;
  int r;

  if (!s->o.api_key_file)
    return 0;
  /* a secret: refused when others may read it, as qrsd's key files */
  r = keyfile_read(s->o.api_key_file, KEYFILE_PRIVATE, KEY_MAX, &k, NULL,
                   err, sizeof(err));
  if (r < 0) {
    fprintf(stderr, "qrs-entropy-server: api key file: %s\n",
            err[0] ? err : strerror(-r));
    return -1;
  }
  n = strcspn(k, "\r\n");
  k[n] = '\0';
  if (n == 0) {
    fprintf(stderr, "qrs-entropy-server: api key file '%s' is empty\n",
            s->o.api_key_file);
    free(k);
    return -1;
  }
  s->api_key = k;
  s->api_key_len = n;
  return 0;
}

int
main(int argc, char **argv)
{
  struct srv s;
  struct gserve_conf gc;
  struct gserve_backend be = { .ctx = NULL, .request = on_request };
  char bound[300], err[300];
  int port;

  memset(&s, 0, sizeof(s));
  s.dev_fd = -1;
  if (parse_args(argc, argv, &s.o) < 0)
    return 2;
  s.rng[0] = (unsigned short)s.o.seed;
  s.rng[1] = (unsigned short)(s.o.seed >> 16);
  s.rng[2] = 0x330e;
  if (load_key(&s) < 0)
    return 1;
  if (s.o.device) {
    s.dev_fd = open(s.o.device, O_RDONLY | O_CLOEXEC);
    if (s.dev_fd < 0) {
      fprintf(stderr, "qrs-entropy-server: cannot open device '%s': %s\n",
              s.o.device, strerror(errno));
      return 1;
    }
  }
  signal(SIGPIPE, SIG_IGN);

  grpc_init();
  s.loop = uv_default_loop();
  if (gbridge_init(&s.br, s.loop) < 0) {
    fputs("qrs-entropy-server: cannot start the completion queue\n", stderr);
    return 1;
  }
  memset(&gc, 0, sizeof(gc));
  gc.listen = s.o.listen;
  gc.tls_cert = s.o.tls_cert;
  gc.tls_key = s.o.tls_key;
  gc.tls_client_ca = s.o.tls_client_ca;
  gc.api_key = s.api_key;
  gc.api_key_len = s.api_key_len;
  gc.api_key_header = s.o.api_key_header;
  gc.refuse_purity = s.o.refuse_purity;
  gc.verbose = s.o.verbose;
  be.ctx = &s;
  if (gserve_start(&s.br, &gc, &be, &s.g, &port, err, sizeof(err)) < 0) {
    fprintf(stderr, "qrs-entropy-server: %s\n", err);
    gbridge_close(&s.br, NULL);
    uv_run(s.loop, UV_RUN_DEFAULT);
    grpc_shutdown();
    return 1;
  }

  uv_signal_init(s.loop, &s.sigint);
  uv_signal_init(s.loop, &s.sigterm);
  s.sigint.data = s.sigterm.data = &s;
  uv_signal_start(&s.sigint, on_signal, SIGINT);
  uv_signal_start(&s.sigterm, on_signal, SIGTERM);

  if (strncmp(s.o.listen, "unix:", 5) == 0) {
    snprintf(bound, sizeof(bound), "%s", s.o.listen);
  } else {
    const char *colon = strrchr(s.o.listen, ':');

    snprintf(bound, sizeof(bound), "%.*s:%d",
             colon ? (int)(colon - s.o.listen) : 0, s.o.listen, port);
  }
  printf("listening on %s\n", bound);
  fflush(stdout);
  if (s.o.verbose)
    logmsg(&s, "serving %s%s%s", s.o.device_id,
           s.api_key ? ", api key required" : "",
           s.o.tls_cert ? ", TLS" : "");

  uv_run(s.loop, UV_RUN_DEFAULT);
  uv_loop_close(s.loop);
  grpc_shutdown();
  if (s.dev_fd >= 0)
    close(s.dev_fd);
  if (s.api_key)
    explicit_bzero(s.api_key, s.api_key_len);
  free(s.api_key);
  return s.exit_code;
}
