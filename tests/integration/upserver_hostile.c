/* A hostile EntropyService for integration tests (see upserver.h): a
   real gRPC C-core server in a child process that answers GetEntropy
   and StreamEntropy (PurityService: UNIMPLEMENTED) the way a broken or
   malicious upstream would.  One thread per call, each driving its call
   through a completion queue of its own, so that a stream's replies go
   out exactly as the mode says, unlike qrs-entropy-server's gserve,
   which answers each request once and in order. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>

#include "grpc/gbridge.h"
#include "gwire.h"
#include "upserver.h"

#define HOSTILE_MAX_BYTES 65536

struct hcall {
  enum upserver_hostile mode;
  grpc_call *call;
  grpc_call_details det;
  grpc_metadata_array md;
  grpc_completion_queue *cq;
  uint8_t data[HOSTILE_MAX_BYTES];
  uint8_t out[HOSTILE_MAX_BYTES + 64];
};

/* Run one batch on c and wait for it: 1 if it succeeded. */
static int
batch(struct hcall *c, grpc_op *ops, size_t n)
{
  grpc_event ev;

  if (grpc_call_start_batch(c->call, ops, n, c, NULL) != GRPC_CALL_OK)
    return 0;
  ev = grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                                  NULL);
  return ev.type == GRPC_OP_COMPLETE && ev.success;
}

/* Encode into c->out one EntropyResponse of n bytes (zeros, or fresh)
   echoing seq; its length, or 0. */
static size_t
encode_reply(struct hcall *c, size_t n, int zeros, uint64_t seq)
{
  struct gw_entropy_resp m;
  struct timespec ts;
  size_t len;

  if (zeros)
    memset(c->data, 0, n);
  else if (getrandom(c->data, n, 0) != (ssize_t)n)
    return 0;
  clock_gettime(CLOCK_REALTIME, &ts);
  memset(&m, 0, sizeof(m));
  m.data.data = c->data;
  m.data.len = n;
  m.sequence_id = seq;
  m.generation_timestamp_ns = (uint64_t)ts.tv_sec * 1000000000u +
                              (uint64_t)ts.tv_nsec;
  len = gw_entropy_resp_encode(&m, c->out, sizeof(c->out));
  return len <= sizeof(c->out) ? len : 0;
}

/* Send what c->out holds (len bytes, 0: nothing to send) as a message. */
static int
send_encoded(struct hcall *c, size_t len)
{
  grpc_op op;
  int ok;

  if (len == 0)
    return 0;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_SEND_MESSAGE;
  op.data.send_message.send_message = gbridge_buffer(c->out, len);
  ok = batch(c, &op, 1);
  grpc_byte_buffer_destroy(op.data.send_message.send_message);
  return ok;
}

static int
send_reply(struct hcall *c, size_t n, int zeros, uint64_t seq)
{
  return send_encoded(c, encode_reply(c, n, zeros, seq));
}

/* The replies to one request, as the mode says. */
static int
answer(struct hcall *c, const struct gw_entropy_req *rq)
{
  size_t n = rq->bytes_needed, len;
  uint64_t seq = rq->sequence_id;

  switch (c->mode) {
  case UPSERVER_DUPLICATE:
    len = encode_reply(c, n, 0, seq);
    return send_encoded(c, len) && send_encoded(c, len);
  case UPSERVER_EXTRA:
    return send_reply(c, n, 0, seq) && send_reply(c, n, 0, seq);
  case UPSERVER_UNSENT:
    return send_reply(c, n, 0, seq) &&
           send_reply(c, n, 0, (seq + 1) & INT64_MAX);
  case UPSERVER_ZERO_ECHO:
    return send_reply(c, n, 0, 0);
  case UPSERVER_CONSTANT:
    return send_reply(c, n, 1, seq);
  }
  return 0;
}

static void *
serve_call(void *arg)
{
  struct hcall *c = arg;
  grpc_op ops[2];
  grpc_byte_buffer *bb = NULL;
  grpc_status_code st = GRPC_STATUS_OK;
  struct gw_entropy_req rq;
  grpc_slice sl, method = c->det.method;
  int cancelled = 0, entropy;

  entropy = grpc_slice_str_cmp(method, GW_ENTROPY_METHOD) == 0 ||
            grpc_slice_str_cmp(method, GW_ENTROPY_STREAM_METHOD) == 0;
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  if (!batch(c, ops, 1))
    goto done;
  while (entropy) {
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_RECV_MESSAGE;
    ops[0].data.recv_message.recv_message = &bb;
    if (!batch(c, ops, 1) || !bb)
      break;
    sl = gbridge_read_all(bb);
    grpc_byte_buffer_destroy(bb);
    bb = NULL;
    memset(&rq, 0, sizeof(rq));
    if (gw_entropy_req_decode(GRPC_SLICE_START_PTR(sl),
                              GRPC_SLICE_LENGTH(sl), &rq) < 0 ||
        rq.bytes_needed == 0 || rq.bytes_needed > HOSTILE_MAX_BYTES) {
      grpc_slice_unref(sl);
      st = GRPC_STATUS_INVALID_ARGUMENT;
      break;
    }
    grpc_slice_unref(sl);
    if (!answer(c, &rq))
      goto done;
  }
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  ops[0].data.recv_close_on_server.cancelled = &cancelled;
  ops[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[1].data.send_status_from_server.status =
    entropy ? st : GRPC_STATUS_UNIMPLEMENTED;
  batch(c, ops, 2);

done:
  grpc_call_unref(c->call);
  grpc_call_details_destroy(&c->det);
  grpc_metadata_array_destroy(&c->md);
  grpc_completion_queue_shutdown(c->cq);
  while (grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                                    NULL).type != GRPC_QUEUE_SHUTDOWN)
    ;
  grpc_completion_queue_destroy(c->cq);
  free(c);
  return NULL;
}

/* The child: listen, say where, serve until killed. */
static void
hostile_main(const char *listen, enum upserver_hostile mode, int out)
{
  grpc_server_credentials *cr;
  grpc_completion_queue *cq;
  grpc_server *srv;
  grpc_event ev;
  struct hcall *c;
  pthread_t th;
  char addr[300];
  int port;

  grpc_init();
  srv = grpc_server_create(NULL, NULL);
  cq = grpc_completion_queue_create_for_next(NULL);
  grpc_server_register_completion_queue(srv, cq, NULL);
  cr = grpc_insecure_server_credentials_create();
  port = grpc_server_add_http2_port(srv, listen, cr);
  grpc_server_credentials_release(cr);
  if (port <= 0)
    _exit(1);
  grpc_server_start(srv);
  if (strncmp(listen, "unix:", 5) == 0)
    snprintf(addr, sizeof(addr), "%s", listen);
  else
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
  dprintf(out, "listening on %s\n", addr);
  close(out);
  for (;;) {
    c = calloc(1, sizeof(*c));
    if (!c)
      _exit(1);
    c->mode = mode;
    c->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_call_details_init(&c->det);
    grpc_metadata_array_init(&c->md);
    if (grpc_server_request_call(srv, &c->call, &c->det, &c->md, c->cq, cq,
                                 c) != GRPC_CALL_OK)
      _exit(1);
    ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                                    NULL);
    if (ev.type != GRPC_OP_COMPLETE || !ev.success ||
        pthread_create(&th, NULL, serve_call, c) != 0)
      _exit(1);
    pthread_detach(th);
  }
}

void
upserver_hostile_start(struct upserver *s, const char *listen,
                       enum upserver_hostile mode)
{
  int fd;

  if (upserver_fork(s, &fd) == 0) {
    hostile_main(listen, mode, fd);
    _exit(1);
  }
  upserver_await(s, fd);
}
