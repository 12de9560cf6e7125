/* The draw engine: just-in-time entropy for DRAW and BYTES requests.

   The bytes for a request are fetched from the registry after the request
   arrived: there is no pool.  The engine knows nothing of connections:
   the server passes a reply function and its context with each request,
   and the engine calls it exactly once with the reply message (DRAW_REPLY,
   BYTES_REPLY) or an ERROR - possibly before draw_handle()/bytes_handle()
   returns.  The message and everything it points to is valid during that
   call only.  peer (base/peer.h) is the client, named in log lines and
   in the draw journal; the caller keeps it valid until the reply.  owner
   (may be NULL) accounts the client's reads in progress (registry.h).
   With a draw journal, a DRAW_REPLY is sent only once its entry is
   written (the journal's writer thread wakes the loop), or labelled
   unjournalled / refused if the entry was lost; the loop never waits.
   Loop thread only. */
#ifndef QRSD_DRAW_H
#define QRSD_DRAW_H

#include <stdarg.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>
#include <uv.h>

#include "conf/conf.h"
#include "frame.h"
#include "engine/registry.h"
#include "timestamp.h"

struct peer;

struct draw_engine;

typedef void (*draw_reply_fn)(void *ctx, uint16_t type,
                              const ProtobufCMessage *m);

/* 0 and a new engine on reg (which must outlive it), -ENOMEM, or an
   errno from opening the journal (journal.dir; logged).  loop
   runs the amplifiers' preparations (calibrations, exact tables) on its
   worker threads. */
int draw_engine_new(const struct qrsd_conf *conf, struct registry *reg,
                    uv_loop_t *loop, struct draw_engine **ret_engine);
void draw_engine_free(struct draw_engine *e);   /* accepts NULL */

/* The server stopped (every connection closed): the draw replies still
   waiting for their journal entry are dropped (answered with an error
   nobody reads) and the journal's wake-up handle closed.  Before
   draw_engine_free(), while the loop still runs; accepts NULL. */
void draw_engine_stop(struct draw_engine *e);

/* The configuration changed (a reload, in place): recompute what the
   engine derives from limits.*, and restart the monitors whose monitor.*
   settings changed (their windows start empty).  0, or -ENOMEM when a
   monitor kept its old settings for want of memory. */
int draw_engine_reconfigure(struct draw_engine *e);

/* The largest BYTES count served (HelloReply.max_bytes_per_request). */
uint32_t draw_max_bytes(const struct draw_engine *e);

void draw_handle(struct draw_engine *e, const QrsIpc__Draw *req,
                 const struct ts *received, const struct peer *peer,
                 struct reg_owner *owner, draw_reply_fn reply, void *ctx);
void bytes_handle(struct draw_engine *e, const QrsIpc__Bytes *req,
                  const struct ts *received, const struct peer *peer,
                  struct reg_owner *owner, draw_reply_fn reply, void *ctx);

/* The live statistics of the u that source served (monitor.h), or NULL
   for an unknown name. */
struct monitor;
const struct monitor *draw_monitor(struct draw_engine *e,
                                   const char *source);
/* How many sources raised a statistics alarm; the first one's name and
   reason when there is one. */
int draw_alarms(const struct draw_engine *e, const char **ret_source,
                const char **ret_reason);

/* The draw journal (persist/journal.h; journal.dir), or NULL when off:
   its head and state for the status file. */
struct journal;
struct journal *draw_journal(struct draw_engine *e);

/* The studies running (engine/study.h), or NULL when none was ever
   configured. */
struct studies;
struct studies *draw_studies(struct draw_engine *e);

/* Send an Error through reply (also used by the server). */
void draw_reply_error(draw_reply_fn reply, void *ctx, int err,
                      const char *fmt, ...)
  __attribute__((format(printf, 4, 5)));
void draw_vreply_error(draw_reply_fn reply, void *ctx, int err,
                       const char *fmt, va_list ap)
  __attribute__((format(printf, 4, 0)));

#endif
