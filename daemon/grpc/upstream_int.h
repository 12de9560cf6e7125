/* What the pieces of the gRPC upstream share; private to them (everyone
   else includes upstream.h).

   The upstream is four files, one per stage of a fetch:
   - upstream.c: jobs (one upstream_fetch() or upstream_draw()), their
     reqs (one upstream request each, with its attempts) and the unary and
     server-streaming attempts; reply validation; breaker bookkeeping;
   - upstream_session.c: the bidi sessions of bidi_streaming mode, on which
     reqs queue in FIFO order;
   - upstream_probe.c: the TCP pre-probe that gates an attempt;
   - upstream_channel.c: the upstream's lifetime (new, free), its channel,
     calls and credentials, gRPC status to errno, the quota's persistence
     and the state for status.

   Objects:
   - a job is one upstream_fetch() or upstream_draw(): one or more reqs
     (a fetch above max_bytes_per_request is split), a callback when all
     are done;
   - a req is one upstream request with its attempts (1 + retry_count);
   - an attempt is one unary or server-streaming call;
   - a session is the persistent bidi stream of bidi_streaming mode (one
     for bytes, one for draws).

   Every gRPC completion comes back on the loop thread (gbridge).  The
   upstream counts what is alive (jobs, attempts, sessions, probes, quota
   writes) so that upstream_free() can wait for the last completion:
   whoever drops the count calls upstream__maybe_free().

   Functions named upstream__*() are the pieces' calls into each other. */
#ifndef QRSD_UPSTREAM_INT_H
#define QRSD_UPSTREAM_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include <grpc/grpc.h>
#include <uv.h>

#include "grpc/upstream.h"
#include "gwire.h"

enum upkind { KIND_BYTES, KIND_DRAW };

struct session;
struct attempt;
struct probe;

struct upreq {
  struct job *job;
  size_t off, n;                      /* bytes: slice of the job buffer */
  int attempt;                        /* attempts made */
  uint64_t t0;                        /* start of this attempt (ns) */
  double timeout_ms;                  /* of this attempt */
  uint64_t seq;                       /* the sequence_id this attempt
                                         carries: the nonce, or a fresh
                                         per-upstream id (never 0) */
  int done;
  struct session *sess;               /* bidi: the stream it is on */
  SLIST_ENTRY(upreq) probe_link;      /* waiting for the pre-probe */
};

struct job {
  struct upstream *u;
  enum upkind kind;
  upstream_cb cb;
  void *arg;
  uint64_t nonce;
  size_t n;
  uint8_t *buf;
  char source_id[GW_MAX_ID + 1];
  uint32_t block_bytes;
  size_t nreq, ndone;
  int64_t deadline;                   /* monotonic ns, 0: none */
  struct upreq *reqs;
  struct upstream_result res;
  int seen_no_echo;                   /* a reply echoed nothing */
  int seen_mismatch;                  /* one echoed another id (served:
                                         check_echo false) */
};

/* One gRPC call and what its batches fill in: an attempt's, or a
   session's stream. */
struct upcall {
  grpc_call *call;
  grpc_byte_buffer *send, *recv;
  grpc_metadata_array imd, tmd;
  grpc_status_code status;
  grpc_slice details;
};

struct upstream {
  char *name, *target, *method, *stream_method, *draw_method,
       *draw_stream_method, *header, *server_name;
  enum upstream_mode mode;
  int tls;
  char *ca_pem, *cert_pem, *key_pem;
  char *api_key;
  size_t api_key_len;
  double timeout_ms;
  uint32_t retry_count;
  int check_echo;

  struct gbridge *br;
  grpc_channel *ch;
  grpc_channel_credentials *creds;
  uint64_t last_reset;                /* ns */
  struct session *sess[2];            /* current, per kind */
  LIST_HEAD(, attempt) attempts;      /* live (<sys/queue.h>) */
  struct breaker breaker;
  struct quota quota;
  size_t inflight;                    /* reqs in flight */
  size_t live;                        /* jobs + attempts + sessions */
  int closing;

  /* pre-probe */
  int preprobe;                       /* enabled */
  uint64_t last_success;              /* ns of the last good fetch, 0 */
  uint64_t probe_failed_at;           /* ns of the last failed probe, 0 */
  char probe_why[160];                /* why it failed */
  struct probe *probe;                /* running, or NULL */
  uint64_t probes, probe_failures;

  uint64_t calls, failures, timeouts, echo_failures, validation_failures;
  uint64_t resets;
  uint64_t draw_unimplemented_at;     /* ns, 0: never */

  /* Sequence ids and the stream protocol (upstream_session.c). */
  uint64_t next_seq;                  /* fresh ids without getrandom */
  uint64_t stream_violations;         /* replies matching no request */
  uint64_t distrust_until;            /* ns: quarantined until, 0: never */
  char distrust_why[200];             /* the violation that caused it */
  int persist_logged;                 /* quota persist error last logged */
  int quota_flushed;                  /* the exact count queued at shutdown */
};

/* The loop's clock (CLOCK_MONOTONIC), in ns and in s. */
static inline uint64_t
upstream__now_ns(void)
{
  return uv_hrtime();
}

static inline double
now_s(void)
{
  return (double)uv_hrtime() / 1e9;
}

/* upstream.c: reqs and attempts */

/* A fresh sequence id for a request without a nonce (or whose nonce is
   taken on its stream): random, never 0, never negative on the wire (a
   bidi session also makes it unique on its stream). */
uint64_t upstream__fresh_seq(struct upstream *u);
/* A reply matched no request: count it, quarantine u for the breaker's
   recovery window (every fetch fails over at once) and log why. */
void upstream__violation(struct upstream *u, const char *why);

/* An attempt of r ended: err 0 with the reply (msg, len), or an error
   (status -1: a failed pre-probe, no call was made).  Validates the
   reply, retries or finishes r. */
void upstream__attempt_result(struct upreq *r, int err, int status,
                              const uint8_t *msg, size_t len,
                              const char *why);
/* r is over (err 0 or a negative errno): breaker bookkeeping, and the
   job's callback once its last req is over. */
void upstream__req_finish(struct upreq *r, int err, int status,
                          const char *detail);
/* Start the attempt counted by req_attempt() (after the pre-probe). */
void upstream__req_dispatch(struct upreq *r);
/* The request message of r into buf; its length. */
int upstream__encode_request(struct upreq *r, uint8_t *buf, size_t cap);
/* Cancel every live unary and server-streaming call. */
void upstream__attempts_cancel(struct upstream *u);

/* upstream_session.c: bidi sessions */

/* Queue r on the session of its kind (opened if needed).  0 or -ENOMEM;
   the reply comes through upstream__attempt_result(). */
int upstream__session_submit(struct upreq *r);
/* End both sessions: their reqs fail (and may retry on a new one). */
void upstream__sessions_close(struct upstream *u);

/* upstream_probe.c: the TCP pre-probe */

/* Before an attempt: 0 to go ahead, or 1 when r now waits for a probe's
   verdict (then upstream__req_dispatch() or a failure follows). */
int upstream__probe_gate(struct upreq *r);
/* upstream_free(): the running probe's waiters fail on the next turn. */
void upstream__probe_cancel(struct upstream *u);

/* upstream_channel.c: channel, calls, errors, lifetime */

/* Free u once it is closing and nothing is alive. */
void upstream__maybe_free(struct upstream *u);
/* The channel, created if there is none.  0 or -ENOMEM. */
int upstream__channel_ensure(struct upstream *u);
/* Recreate the channel (and end the sessions).  force: ignore the rate
   limit. */
void upstream__channel_reset(struct upstream *u, int force);
/* Start c as a call of method on u's channel (timeout_ms < 0: none),
   with its metadata arrays and details ready.  upstream__call_close()
   undoes it. */
void upstream__call_open(struct upstream *u, struct upcall *c,
                         const char *method, double timeout_ms);
void upstream__call_close(struct upcall *c);
/* The RECV_STATUS_ON_CLIENT batch of c, completing through op and cb. */
grpc_call_error upstream__call_status(struct upcall *c, struct gb_op *op,
                                      gb_cb cb);
/* op: SEND_INITIAL_METADATA with the api key (md: its storage). */
void upstream__op_initial_md(struct upstream *u, grpc_op *op,
                             grpc_metadata *md);
/* A gRPC status as the negative errno of upstream.h (0 for OK). */
int upstream__status_err(grpc_status_code st);
/* The server rejected the request itself: retrying or reconnecting does
   not help. */
int upstream__server_rejection(int status);
/* "gRPC status 14: ..." into buf. */
void upstream__status_detail(char *buf, size_t len, grpc_status_code st,
                             grpc_slice d);

#endif
