/* The draw engine: just-in-time entropy for DRAW and BYTES requests.

   The bytes for a request are generated after the request arrived: there
   is no pool.  Small reads from non-blocking sources run on the loop
   thread; everything else on libuv's worker threads, bounded by the
   server's async byte budget and the request timeout. */
#ifndef QRSD_DRAW_H
#define QRSD_DRAW_H

#include <stdint.h>

#include "server.h"

struct ts {
  int64_t realtime_ns;
  int64_t monotonic_ns;
};

void ts_now(struct ts *t);

/* Handle a decoded request; the reply (or an Error) is sent on c, and
   conn_request_done(c) is called once it has been. */
void draw_handle(struct conn *c, uint32_t seq, const QrsIpc__Draw *req,
                 const struct ts *received);
void bytes_handle(struct conn *c, uint32_t seq, const QrsIpc__Bytes *req,
                  const struct ts *received);

#endif
