/* The server side of qr_entropy.EntropyService and qr_purity.PurityService
   over gRPC C-core, driven from a libuv loop (gbridge): accepts GetEntropy,
   StreamEntropy, GetDraw and StreamDraws calls, checks the api key, decodes
   each request and hands it to a backend, which answers it (now or later)
   with gserve_reply_*().  Every other method gets UNIMPLEMENTED.

   Used by tools/qrs-entropy-server (backend: a device plus fault flags)
   and by qrsd's compat endpoint (backend: qrsd's sources and amplifiers).

   A stream's requests are answered in order, one at a time: the next
   request is read only after the previous one was answered. */
#ifndef QRSD_GSERVE_H
#define QRSD_GSERVE_H

#include <stddef.h>
#include <stdint.h>

#include "grpc/gbridge.h"
#include "gwire.h"

struct gserve;
struct gserve_call;

struct gserve_conf {
  const char *listen;               /* unix:PATH or HOST:PORT */
  const char *tls_cert, *tls_key;   /* PEM files; NULL: insecure */
  const char *tls_client_ca;        /* require client certs; NULL: don't */
  const char *api_key;              /* required key, or NULL */
  size_t api_key_len;
  const char *api_key_header;       /* default "api-key" */
  int refuse_purity;                /* PurityService gets UNIMPLEMENTED */
  int verbose;                      /* log every non-OK status */
  /* A connection must finish its TLS handshake and send its HTTP/2
     preface and SETTINGS within handshake_timeout_ms, and is closed
     (GOAWAY) after idle_timeout_ms without a call.  0: gRPC's defaults
     (120 s; never). */
  int handshake_timeout_ms;
  int idle_timeout_ms;
};

/* One request awaiting its answer.  The backend answers it exactly once
   with a gserve_reply_*() call, which ends the request's lifetime. */
struct gserve_req {
  void *principal;                  /* the backend's, from call_begin */
  int draw;                         /* 0: EntropyRequest, 1: DrawRequest */
  int stream;                       /* part of a bidi stream */
  struct gw_entropy_req entropy;
  struct gw_draw_req drw;           /* source_id points into source_id[] */
  char source_id[GW_MAX_ID + 1];
  uint64_t received_ns;             /* CLOCK_REALTIME when it arrived */
  struct gserve_call *call;         /* gserve's */
};

struct gserve_backend {
  void *ctx;
  void (*request)(void *ctx, struct gserve_req *r);
  /* Optional, instead of gserve_conf.api_key: each call of a served
     method as it arrives, with the key it presented under the api key
     header (NULL, 0: none) and whether it is a stream.  Returns 0 and
     the call's principal (handed back in every request's principal and
     to call_end), or a gRPC status to refuse the call with, why its
     message. */
  int (*call_begin)(void *ctx, const uint8_t *key, size_t len, int stream,
                    void **principal, char *why, size_t whylen);
  /* A call that call_begin admitted is gone (the backend has answered
     all its requests). */
  void (*call_end)(void *ctx, void *principal, int stream);
};

/* Listen and start accepting calls.  Returns 0 and the server with the
   bound port in *ret_port (1 for unix sockets), or a negative errno with
   err filled in. */
int gserve_start(struct gbridge *br, const struct gserve_conf *conf,
                 const struct gserve_backend *backend,
                 struct gserve **ret, int *ret_port, char *err,
                 size_t errlen);

/* Stop listening, cancel every call; on_stopped (may be NULL) runs on the
   loop once the server is gone and the object freed.  Requests still held
   by the backend must still be answered (the reply is discarded). */
void gserve_stop(struct gserve *g, void (*on_stopped)(void *arg),
                 void *arg);

void gserve_reply_entropy(struct gserve_req *r,
                          const struct gw_entropy_resp *m);
void gserve_reply_draw(struct gserve_req *r, const struct gw_draw_resp *m);
/* End the call (a stream ends too) with a gRPC status and a message. */
void gserve_reply_error(struct gserve_req *r, int grpc_status,
                        const char *msg);

/* Requests answered with data so far. */
uint64_t gserve_answered(const struct gserve *g);

#endif
