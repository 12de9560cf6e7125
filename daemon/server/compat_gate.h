/* The gRPC compat endpoint's front door: qrsd's own listener on
   grpc_compat.listen (a TCP address or a unix socket), on the libuv loop,
   in front of gRPC, which listens only on a private unix socket (in a
   directory of state_dir only qrsd's user may enter).  Each admitted
   connection is relayed byte for byte (TLS included: the handshake is
   gRPC's, end to end) to that socket.

   Why not gRPC's own listener: gRPC C-core 1.51 owns its accept loop,
   bounds nothing, and after one EMFILE from accept4() drops the port for
   good.  grpc_server_add_channel_from_fd() would hand over an accepted fd,
   but only without TLS, and gRPC never says when it closes it, so nothing
   could be counted.  Here every connection is counted from accept to
   close, which gives:

   - a bound on connections, in all and per peer (IP address, or uid for
     a unix socket), refused at once (closed) beyond it;
   - a descriptor reserve: an accepted descriptor whose number is within
     fd_reserve of RLIMIT_NOFILE is closed at once, so the connections of
     this endpoint (three descriptors each: the client's, the relay's end,
     gRPC's end) can never take the ones the main socket, the sources and
     the journal need; gRPC's private listener sees only admitted
     connections, so it never meets EMFILE;
   - a listener that keeps accepting: libuv's accept loop survives EMFILE
     (it accepts and closes what it cannot hold, and goes on).

   The handshake and idle timeouts are gRPC's (server channel args, see
   gserve_conf): gRPC closes its end, and the relay closes the client's.
   A relay that has had nothing from gRPC 2 s past the handshake timeout
   is closed all the same.  gRPC drops its listener for good after an
   accept error: when a client had no answer, the gate probes gRPC's
   socket with a connection of its own (a client cannot fake the
   outcome), and when gRPC neither answers nor closes it in that time,
   the owner starts gRPC again.
   A relay holds two 8 KiB buffers and reads a side only while the other
   has written what it sent last: bounded memory, backpressure both ways. */
#ifndef QRSD_COMPAT_GATE_H
#define QRSD_COMPAT_GATE_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

struct gate;

struct gate_conf {
  const char *listen;               /* unix:PATH or HOST:PORT (a name:
                                       its first address; localhost:
                                       127.0.0.1) */
  const char *inner_path;           /* gRPC's private socket */
  unsigned socket_mode;             /* a unix listener's mode */
  unsigned max_conns;               /* in all */
  unsigned max_per_peer;
  unsigned fd_reserve;              /* descriptors kept for the rest */
  /* gRPC's handshake timeout: a relay with nothing from gRPC 2 s after
     it is closed.  When a relay's client sent something and had nothing
     back for a second, the gate probes gRPC's socket itself; a probe
     without an answer as long means gRPC is not accepting, and on_stall
     (may be NULL) is called. */
  unsigned stall_ms;
  void (*on_stall)(void *ctx);
  void *ctx;
};

struct gate_stats {
  uint64_t conns;                   /* open now */
  uint64_t accepted;                /* admitted so far */
  uint64_t refused_full;            /* max_conns reached */
  uint64_t refused_peer;            /* max_per_peer reached */
  uint64_t refused_fds;             /* descriptor reserve or EMFILE */
  uint64_t relay_failed;            /* gRPC's socket did not answer */
  uint64_t relay_bytes;             /* relay buffers held now */
  unsigned max_conns;               /* the bound in effect */
};

/* Bind and listen.  0 and the gate (*ret_port: the bound TCP port, 1 for
   a unix socket), or a negative errno with err filled in.  Start-up
   only (it may stat and unlink a stale socket file). */
int gate_start(uv_loop_t *loop, const struct gate_conf *conf,
               struct gate **ret, int *ret_port, char *err, size_t errlen);

/* Relay new connections to path from now on (gRPC started again).  0 or
   -ENOMEM. */
int gate_set_inner(struct gate *g, const char *path);

/* Stop listening and close every relayed connection; the gate is freed
   once its handles are closed.  Accepts NULL. */
void gate_stop(struct gate *g);

void gate_stats(const struct gate *g, struct gate_stats *st);

/* Can the endpoint take another connection now?  0, or 1 with why (one
   line) filled in: at its bound, out of descriptors, or refusing or
   failing to relay within the last few seconds. */
int gate_degraded(const struct gate *g, char *why, size_t whylen);

#endif
