/* qrs-bench grpc: a draw through qrsd whose source is a gRPC upstream
   (qrs-entropy-server), per mode, against the direct call to the same
   server in the same mode with the same sizes (the floor: what a client
   that talks gRPC itself pays), measured in alternating rounds of one run.

   Then the prefetch figure: with the upstream answering after
   --server-latency-ms and an engine step of --step-ms between beginning a
   draw and needing it, the time the client still waits in
   qrs_client_draw_finish(), against the upstream's latency. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>

#include <qrs/client.h>

#include "bench.h"
#include "gwire.h"

#define NMODES 3

static const char *const mode_name[NMODES] = {
  "unary", "server_streaming", "bidi_streaming",
};

struct gopts {
  const char *qrsd, *server;
  int n, rounds, pin;
  int only;                     /* one mode's index, or -1: all */
  uint32_t bytes;
  double server_latency_ms, step_ms;
};

static char dir[64];
static pid_t server_pid = -1, qrsd_pid = -1;

/* rel next to our own binary (the build tree) unless given. */
static const char *
sibling(const char *given, const char *rel, char *buf, size_t len)
{
  const char *p;

  if (given)
    return given;
  p = bench_sibling(rel, buf, len);
  return p ? p : rel;
}

static void
stop_children(void)
{
  bench_kill(&qrsd_pid, SIGTERM);
  bench_kill(&server_pid, SIGTERM);
}

static void
start_server(const struct gopts *o, double latency_ms)
{
  char listen[128], lat[32], line[256];
  int out[2];
  ssize_t r;

  snprintf(listen, sizeof(listen), "unix:%s/qrng.sock", dir);
  snprintf(lat, sizeof(lat), "%g", latency_ms);
  if (pipe(out) < 0)
    exit(1);
  server_pid = fork();
  if (server_pid == 0) {
    if (o->pin)
      bench_pin(1);
    dup2(out[1], 1);
    close(out[0]);
    execl(o->server, "qrs-entropy-server", "--listen", listen,
          "--latency-ms", lat, (char *)NULL);
    _exit(127);
  }
  close(out[1]);
  r = read(out[0], line, sizeof(line) - 1);
  close(out[0]);
  if (r <= 0 || strncmp(line, "listening on", 12) != 0) {
    fprintf(stderr, "qrs-bench: %s did not start\n", o->server);
    stop_children();
    exit(1);
  }
}

static void
start_qrsd(const struct gopts *o)
{
  char conf[128], sock[128];
  FILE *f;
  int i;

  snprintf(conf, sizeof(conf), "%s/qrsd.yaml", dir);
  snprintf(sock, sizeof(sock), "%s/qrsd.sock", dir);
  f = fopen(conf, "w");
  if (!f)
    exit(1);
  fprintf(f, "socket: { path: %s }\nstate_dir: %s\nstatus_file: \"\"\n"
          "sources:\n  system: { type: system }\n", sock, dir);
  for (i = 0; i < NMODES; i++)
    /* No quotas, and a breaker whose adaptive timeout (5 ms floor by
       default) a loaded machine's scheduling hiccup cannot hit: the
       figures are latencies, like the direct call's, which has no
       deadline at all. */
    fprintf(f, "  g_%s: { type: grpc, target: \"unix:%s/qrng.sock\", "
            "mode: %s, fallback: error, quota: { max_bytes_per_request: 0, "
            "max_requests_per_minute: 0, max_bytes_per_day: 0 }, "
            "breaker: { min_timeout_ms: 2000 } }\n",
            mode_name[i], dir, mode_name[i]);
  fclose(f);
  qrsd_pid = fork();
  if (qrsd_pid == 0) {
    if (o->pin)
      bench_pin(0);
    if (!freopen(getenv("QRS_BENCH_QRSD_LOG") ? getenv("QRS_BENCH_QRSD_LOG")
                 : "/dev/null", "a", stderr))
      _exit(127);
    execl(o->qrsd, "qrsd", "-c", conf, (char *)NULL);
    _exit(127);
  }
  if (bench_wait_qrsd(sock, 300) == 0)
    return;
  fprintf(stderr, "qrs-bench: %s did not start with a grpc source\n",
          o->qrsd);
  stop_children();
  exit(1);
}

/* ---- the floor: a blocking gRPC C-core client ------------------------ */

struct direct {
  grpc_channel *ch;
  grpc_completion_queue *cq;
  grpc_call *bidi;              /* bidi_streaming: one persistent call */
  int started;
  grpc_metadata_array imd;
};

static grpc_byte_buffer *
request_buffer(uint32_t n, uint64_t seq)
{
  struct gw_entropy_req m = { n, seq };
  uint8_t buf[32];
  size_t len = gw_entropy_req_encode(&m, buf, sizeof(buf));
  grpc_slice s = grpc_slice_from_copied_buffer((const char *)buf, len);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);

  grpc_slice_unref(s);
  return bb;
}

/* Check a reply like qrsd does (decode, length, echo). */
static void
check_reply(grpc_byte_buffer *bb, uint32_t n, uint64_t seq)
{
  grpc_byte_buffer_reader r;
  struct gw_entropy_resp m;
  grpc_slice s;

  if (!bb || !grpc_byte_buffer_reader_init(&r, bb)) {
    fprintf(stderr, "qrs-bench: direct call failed\n");
    stop_children();
    exit(1);
  }
  s = grpc_byte_buffer_reader_readall(&r);
  grpc_byte_buffer_reader_destroy(&r);
  if (gw_entropy_resp_decode(GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s),
                             &m) < 0 || m.data.len != n ||
      m.sequence_id != seq) {
    fprintf(stderr, "qrs-bench: bad direct reply\n");
    stop_children();
    exit(1);
  }
  grpc_slice_unref(s);
  grpc_byte_buffer_destroy(bb);
}

static void
pluck(struct direct *d, void *tag)
{
  grpc_event ev = grpc_completion_queue_pluck(d->cq, tag,
                    gpr_inf_future(GPR_CLOCK_REALTIME), NULL);

  if (ev.type != GRPC_OP_COMPLETE || !ev.success) {
    fprintf(stderr, "qrs-bench: direct call failed\n");
    stop_children();
    exit(1);
  }
}

static void
direct_call(struct direct *d, int mode, uint32_t n, uint64_t seq)
{
  grpc_op ops[6];
  grpc_byte_buffer *send = request_buffer(n, seq), *recv = NULL;
  grpc_metadata_array imd, tmd;
  grpc_status_code st;
  grpc_slice details, m;
  grpc_call *call;
  size_t k = 0;
  int tag;

  memset(ops, 0, sizeof(ops));
  if (mode == 2) {
    if (!d->bidi) {
      m = grpc_slice_from_static_string(GW_ENTROPY_STREAM_METHOD);
      d->bidi = grpc_channel_create_call(d->ch, NULL,
                  GRPC_PROPAGATE_DEFAULTS, d->cq, m, NULL,
                  gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
      grpc_slice_unref(m);
      grpc_metadata_array_init(&d->imd);
      ops[k++].op = GRPC_OP_SEND_INITIAL_METADATA;
      ops[k].op = GRPC_OP_RECV_INITIAL_METADATA;
      ops[k++].data.recv_initial_metadata.recv_initial_metadata = &d->imd;
    }
    ops[k].op = GRPC_OP_SEND_MESSAGE;
    ops[k++].data.send_message.send_message = send;
    ops[k].op = GRPC_OP_RECV_MESSAGE;
    ops[k++].data.recv_message.recv_message = &recv;
    grpc_call_start_batch(d->bidi, ops, k, &tag, NULL);
    pluck(d, &tag);
    grpc_byte_buffer_destroy(send);
    check_reply(recv, n, seq);
    return;
  }
  m = grpc_slice_from_static_string(mode == 0 ? GW_ENTROPY_METHOD :
                                    GW_ENTROPY_STREAM_METHOD);
  call = grpc_channel_create_call(d->ch, NULL, GRPC_PROPAGATE_DEFAULTS,
                                  d->cq, m, NULL,
                                  gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  grpc_slice_unref(m);
  grpc_metadata_array_init(&imd);
  grpc_metadata_array_init(&tmd);
  details = grpc_empty_slice();
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = send;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &imd;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &recv;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &tmd;
  ops[5].data.recv_status_on_client.status = &st;
  ops[5].data.recv_status_on_client.status_details = &details;
  if (mode == 0) {
    grpc_call_start_batch(call, ops, 6, &tag, NULL);
    pluck(d, &tag);
  } else {
    /* One reply, then cancel: as qrsd does in server_streaming mode. */
    grpc_call_start_batch(call, ops, 5, &tag, NULL);
    pluck(d, &tag);
    grpc_call_cancel(call, NULL);
    grpc_call_start_batch(call, ops + 5, 1, &tag, NULL);
    grpc_completion_queue_pluck(d->cq, &tag,
                                gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  }
  check_reply(recv, n, seq);
  grpc_byte_buffer_destroy(send);
  grpc_metadata_array_destroy(&imd);
  grpc_metadata_array_destroy(&tmd);
  grpc_slice_unref(details);
  grpc_call_unref(call);
}

/* ---- measurements ---------------------------------------------------- */

static void
measure_direct(struct direct *d, int mode, const struct gopts *o,
               struct bench_lat *out)
{
  int64_t t0;
  int i;

  for (i = 0; i < o->n; i++) {
    t0 = mono_now_ns();
    direct_call(d, mode, o->bytes, 1 + (uint64_t)i);
    bench_lat_add(out, mono_now_ns() - t0);
  }
}

static void
measure_qrsd(struct qrs_client *c, int mode, const struct gopts *o,
             struct bench_lat *out, uint64_t step0)
{
  struct qrs_commitment cm = { NULL, 0, 0, -1 };
  struct qrs_draw_request req;
  struct qrs_draw dr;
  char src[64];
  int64_t t0;
  int i, r;

  snprintf(src, sizeof(src), "g_%s", mode_name[mode]);
  memset(&req, 0, sizeof(req));
  req.source = src;
  req.sample_count = o->bytes;
  req.commitment = &cm;
  for (i = 0; i < o->n; i++) {
    cm.step = step0 + (uint64_t)i;
    t0 = mono_now_ns();
    r = qrs_client_draw(c, &req, &dr);
    bench_lat_add(out, mono_now_ns() - t0);
    if (r != 0 || dr.fallback || dr.echo != QRS_ECHO_VERIFIED) {
      fprintf(stderr, "qrs-bench: draw from %s failed (%d, fallback %d, "
              "echo %d)\n", src, r, dr.fallback, (int)dr.echo);
      stop_children();
      exit(1);
    }
  }
}

/* The modes --mode leaves to measure. */
static int
mode_wanted(const struct gopts *o, int m)
{
  return o->only < 0 || m == o->only;
}

/* Direct calls and draws through qrsd in each mode, warmed up, then in
   alternating rounds; prints the table. */
static void
measure_modes(struct direct *d, struct qrs_client *c, const struct gopts *o)
{
  struct bench_lat dv[NMODES], qv[NMODES], warm;
  char a[32], b[32];
  double dp50, qp50;
  size_t total;
  int m, round;

  total = (size_t)o->n * (size_t)o->rounds;
  for (m = 0; m < NMODES; m++) {
    bench_lat_init(&dv[m], total);
    bench_lat_init(&qv[m], total);
  }
  /* Warm both paths (connections, first calls) before measuring. */
  bench_lat_init(&warm, (size_t)o->n);
  for (m = 0; m < NMODES; m++) {
    if (!mode_wanted(o, m))
      continue;
    measure_direct(d, m, o, &warm);
    warm.n = 0;
    measure_qrsd(c, m, o, &warm, 1000000);
    warm.n = 0;
  }
  for (round = 0; round < o->rounds; round++) {
    for (m = 0; m < NMODES; m++) {
      if (!mode_wanted(o, m))
        continue;
      measure_direct(d, m, o, &dv[m]);
      measure_qrsd(c, m, o, &qv[m], (uint64_t)round * 10000000);
    }
  }
  printf("qrs-bench grpc: %u bytes per draw/call, %d x %d round trips per "
         "mode%s\n", o->bytes, o->rounds, o->n, o->pin ? ", pinned" : "");
  printf("%-18s %22s %22s %10s\n", "mode", "direct p50/p99 (us)",
         "via qrsd p50/p99 (us)", "p50 ratio");
  for (m = 0; m < NMODES; m++) {
    if (mode_wanted(o, m)) {
      bench_lat_sort(&dv[m]);
      bench_lat_sort(&qv[m]);
      dp50 = bench_lat_pct_us(&dv[m], 0.5);
      qp50 = bench_lat_pct_us(&qv[m], 0.5);
      snprintf(a, sizeof(a), "%.1f / %.1f", dp50,
               bench_lat_pct_us(&dv[m], 0.99));
      snprintf(b, sizeof(b), "%.1f / %.1f", qp50,
               bench_lat_pct_us(&qv[m], 0.99));
      printf("%-18s %22s %22s %9.2fx\n", mode_name[m], a, b, qp50 / dp50);
    }
    bench_lat_done(&dv[m]);
    bench_lat_done(&qv[m]);
  }
  bench_lat_done(&warm);
}

/* The prefetch figure, against a restarted upstream that answers late:
   the time qrs_client_draw_finish() still waits after an engine step,
   beside the direct bidi call's latency.  Returns 0, or 1 on a failure. */
static int
measure_prefetch(struct direct *d, const struct gopts *o, const char *sock)
{
  struct qrs_commitment cm = { NULL, 0, 0, -1 };
  struct qrs_draw_request req;
  struct bench_lat up, wait;
  struct qrs_client *c;
  struct qrs_draw dr;
  struct timespec step;
  uint32_t ticket, next;
  double dp50, qp50;
  int64_t t0;
  int i;

  if (qrs_client_new(sock, NULL, &c) != 0)
    return 1;
  bench_lat_init(&up, (size_t)o->n);
  bench_lat_init(&wait, (size_t)o->n);
  measure_direct(d, 2, o, &up);
  memset(&req, 0, sizeof(req));
  req.source = "g_bidi_streaming";
  req.sample_count = o->bytes;
  req.commitment = &cm;
  step.tv_sec = 0;
  step.tv_nsec = (long)(o->step_ms * 1e6);
  cm.step = 0;
  if (qrs_client_draw_begin(c, &req, &ticket) != 0)
    return 1;
  for (i = 0; i < o->n; i++) {
    nanosleep(&step, NULL);           /* the engine computes token i+1 */
    t0 = mono_now_ns();
    if (qrs_client_draw_finish(c, ticket, &dr) != 0 || dr.fallback) {
      fprintf(stderr, "qrs-bench: prefetched draw failed\n");
      stop_children();
      return 1;
    }
    bench_lat_add(&wait, mono_now_ns() - t0);
    cm.step = (uint64_t)i + 1;        /* commit to the next token */
    if (qrs_client_draw_begin(c, &req, &next) != 0)
      return 1;
    ticket = next;
  }
  (void)qrs_client_draw_finish(c, ticket, &dr);
  bench_lat_sort(&up);
  bench_lat_sort(&wait);
  dp50 = bench_lat_pct_us(&up, 0.5);
  qp50 = bench_lat_pct_us(&wait, 0.5);
  printf("prefetch: upstream latency %.3g ms (direct bidi p50 %.1f us), "
         "engine step %.3g ms:\n", o->server_latency_ms, dp50, o->step_ms);
  printf("  client-visible wait p50 %.1f us, p99 %.1f us = %.2f%% of the "
         "upstream latency (p50)\n", qp50, bench_lat_pct_us(&wait, 0.99),
         100.0 * qp50 / dp50);
  qrs_client_free(c);
  bench_lat_done(&up);
  bench_lat_done(&wait);
  return 0;
}

static void
gusage(FILE *f)
{
  fprintf(f,
"Usage: qrs-bench grpc [OPTIONS]\n"
"\n"
"Draw round trips through qrsd with a gRPC upstream (qrs-entropy-server on\n"
"a unix socket), per mode, beside the direct gRPC call to the same server\n"
"in the same mode with the same sizes; then the client-visible wait of a\n"
"prefetched draw.\n"
"\n"
"  -n N                   round trips per measurement (default 2000)\n"
"  -r, --rounds N         alternating rounds (default 3)\n"
"  -b, --bytes N          bytes per draw / per call (default 10000)\n"
"      --server-latency-ms MS  upstream latency for the prefetch figure\n"
"                         (default 1)\n"
"      --step-ms MS       simulated engine step (default 2)\n"
"      --pin              qrsd and client on CPU 0, the server on CPU 1\n"
"      --mode MODE        measure only this mode (unary, server_streaming,\n"
"                         bidi_streaming)\n"
"      --qrsd PATH        (default: the build tree's daemon/qrsd)\n"
"      --server PATH      (default: the build tree's qrs-entropy-server)\n");
}

/* --mode: the index of the one mode to measure (int *field). */
static int
set_mode(const struct cli_opt *o, const char *opt, const char *arg)
{
  int *only = o->field;

  (void)opt;
  for (*only = NMODES - 1; *only >= 0; (*only)--)
    if (strcmp(arg, mode_name[*only]) == 0)
      return 0;
  fprintf(stderr, "qrs-bench grpc: unknown mode '%s'\n", arg);
  return -1;
}

/* A fresh channel to the server (one whose server restarted reconnects
   slowly, toolchain.md). */
static void
direct_channel(struct direct *d, const char *target)
{
  grpc_channel_credentials *cr;

  cr = grpc_insecure_credentials_create();
  d->ch = grpc_channel_create(target, cr, NULL);
  grpc_channel_credentials_release(cr);
}

int
bench_grpc(int argc, char **argv)
{
  struct gopts o = { NULL, NULL, 2000, 3, 0, -1, 10000, 1.0, 2.0 };
  const struct cli_opt opts[] = {
    { .key = 'n', .type = CLI_OPT_INT, .field = &o.n },
    { .name = "rounds", .key = 'r', .type = CLI_OPT_INT, .field = &o.rounds },
    { .name = "bytes", .key = 'b', .type = CLI_OPT_U32, .field = &o.bytes },
    { .name = "server-latency-ms", .type = CLI_OPT_DOUBLE,
      .field = &o.server_latency_ms },
    { .name = "step-ms", .type = CLI_OPT_DOUBLE, .field = &o.step_ms },
    { .name = "pin", .type = CLI_OPT_SET, .field = &o.pin, .val = 1 },
    { .name = "mode", .type = CLI_OPT_CALL, .field = &o.only,
      .call = set_mode },
    { .name = "qrsd", .type = CLI_OPT_STRING, .field = &o.qrsd },
    { .name = "server", .type = CLI_OPT_STRING, .field = &o.server },
    BENCH_OPTS_END,
  };
  char sock[128], target[128], qrsd_path[4200], server_path[4200];
  struct qrs_client *c;
  struct direct d;
  int r;

  r = bench_opts_parse(argc, argv, opts, gusage);
  if (r >= 0)
    return r;
  if (o.n < 10 || o.rounds < 1 || o.bytes < 1 || o.bytes > (1u << 20)) {
    gusage(stderr);
    return 2;
  }
  o.qrsd = sibling(o.qrsd, "../../daemon/qrsd", qrsd_path,
                   sizeof(qrsd_path));
  o.server = sibling(o.server, "../qrs-entropy-server/qrs-entropy-server",
                     server_path, sizeof(server_path));
  strcpy(dir, "/tmp/qrs-bench-grpc-XXXXXX");
  if (!mkdtemp(dir))
    return 1;
  if (o.pin)
    bench_pin(0);

  start_server(&o, 0);
  start_qrsd(&o);
  snprintf(sock, sizeof(sock), "%s/qrsd.sock", dir);
  if (qrs_client_new(sock, NULL, &c) != 0) {
    stop_children();
    return 1;
  }
  grpc_init();
  memset(&d, 0, sizeof(d));
  snprintf(target, sizeof(target), "unix:%s/qrng.sock", dir);
  direct_channel(&d, target);
  d.cq = grpc_completion_queue_create_for_pluck(NULL);
  measure_modes(&d, c, &o);

  /* Prefetch: the upstream now takes server_latency_ms per call. */
  if (d.bidi) {
    grpc_call_cancel(d.bidi, NULL);
    grpc_call_unref(d.bidi);
    grpc_metadata_array_destroy(&d.imd);
    d.bidi = NULL;
  }
  qrs_client_free(c);
  stop_children();
  start_server(&o, o.server_latency_ms);
  start_qrsd(&o);
  grpc_channel_destroy(d.ch);
  direct_channel(&d, target);
  if (measure_prefetch(&d, &o, sock) != 0)
    return 1;

  grpc_channel_destroy(d.ch);
  grpc_completion_queue_shutdown(d.cq);
  while (grpc_completion_queue_pluck(d.cq, NULL,
           gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
         GRPC_QUEUE_SHUTDOWN)
    ;
  grpc_completion_queue_destroy(d.cq);
  grpc_shutdown();
  stop_children();
  return bench_rmdir(dir) < 0 ? 1 : 0;
}
