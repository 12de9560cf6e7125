/* The gRPC compatibility endpoint (grpc_compat: { listen, source,
   socket_mode, socket_group }): qrsd serves qr_entropy.EntropyService and
   qr_purity.PurityService on a unix socket (with that mode and group) or
   loopback address, backed by its own registry, so that an existing
   qr-sampler deployment can point at qrsd without code changes.

   Every request is answered just in time: the bytes are fetched from the
   source after the request arrived (through the registry, so the source's
   fallback and admission apply), and the reply echoes the request's
   sequence_id and stamps generation_timestamp_ns with the time the bytes
   were in hand.  Only grpc_compat.source is served: a draw's
   DrawRequest.source_id is "" or that source, any other gets
   PERMISSION_DENIED naming it (its clients are not authenticated, and
   must not spend other sources' quotas).  The draw integrates
   block_bytes (0 = the configured sample_count) with the zscore_mean
   amplifier.  With a draw journal, every draw and byte block answered
   has its entry (persist/journal.h: from no local process, amplifier
   parameters ending in ",via=grpc"), and journal.on_error applies: stop
   refuses a request the journal cannot take (UNAVAILABLE), label serves
   it (a gRPC reply has no label). */
#ifndef QRSD_COMPAT_H
#define QRSD_COMPAT_H

#include <uv.h>

#include "conf/conf.h"
#include "engine/registry.h"
#include "server/compat_gate.h"
#include "server/statuspub.h"

struct compat;

/* Start listening (nothing when conf->compat_listen is "").  journal
   (NULL: none) must outlive the endpoint's requests.  0 and *ret (NULL
   when off), or a negative errno with err filled in. */
struct journal;
int compat_start(uv_loop_t *loop, const struct qrsd_conf *conf,
                 struct registry *reg, struct journal *journal,
                 struct statuspub *sp, struct compat **ret, char *err,
                 size_t errlen);

/* Can the endpoint take a connection now?  0 (or off), or 1 with why
   filled in (compat_gate.h: gate_degraded()). */
int compat_degraded(const struct compat *c, char *why, size_t whylen);

/* The endpoint's figures (all 0 when c is NULL). */
void compat_figures(const struct compat *c, struct gate_stats *st);

/* Stop serving; the object is freed once its last call is gone.  Accepts
   NULL.  Call before the registry stops. */
void compat_stop(struct compat *c);

#endif
