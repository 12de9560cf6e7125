/* The qrsd server: the listening socket, client connections, frames and
   request dispatch, all on one libuv loop. */
#ifndef QRSD_SERVER_H
#define QRSD_SERVER_H

#include <stdint.h>
#include <sys/queue.h>
#include <sys/types.h>

#include <uv.h>

#include "server/compat.h"
#include "server/access.h"
#include "server/statuspub.h"

#include "frame.h"
#include "conf/conf.h"
#include "engine/draw.h"
#include "base/log.h"
#include "engine/registry.h"

struct conn;
struct reload_job;

#define SERVER_LAT_BUCKETS 16    /* bounds in report.c; + one for +Inf */

struct server {
  uv_loop_t *loop;
  struct qrsd_conf *conf;       /* the caller's; a reload changes its live
                                   keys in place (conf_apply_live()) */

  uv_pipe_t listener;
  int listener_open;
  char *socket_path;            /* what we listen on (for status) */
  int own_socket;               /* we created the file: unlink on exit */
  dev_t sock_dev;
  ino_t sock_ino;

  struct registry *reg;         /* the sources: for status only */
  struct statuspub status;      /* the status file */
  struct compat *compat;        /* the gRPC compat endpoint, or NULL */
  struct draw_engine *draw;

  LIST_HEAD(conn_list, conn) conns;  /* <sys/queue.h> */
  uint32_t n_conns;
  uint32_t n_refused;           /* of which over a limit, closing soon */
  uint64_t refused_total;       /* connections refused, ever (metrics) */
  uint64_t busy_total;          /* requests answered BUSY, ever */
  /* draw latency, received to sent: counts per report.c's bucket */
  uint64_t lat_counts[SERVER_LAT_BUCKETS + 1];
  double lat_sum_s;
  uint64_t next_conn_id;

  uint32_t max_reply_bytes;     /* HelloReply.max_reply_bytes */
  size_t mem_queued;            /* replies queued for writing */
  size_t mem_reserved;          /* replies of requests in progress */
  size_t read_max_per_conn;     /* a client's reads in progress */
  uint8_t *arena;               /* request decoding (bounded) */
  size_t arena_used;

  uv_timer_t sweep;             /* HELLO, frame and idle deadlines */
  int sweep_open;
  struct log_ratelimit rl_deadline;
  struct log_ratelimit rl_busy;
  struct log_ratelimit rl_frame;
  struct log_ratelimit rl_conn;
  struct log_ratelimit rl_denied;
  struct access access;         /* who may connect (access.h) */
  struct access admin;          /* who may RELOAD (access.admin_group) */
  struct reload_job *reloading; /* the reload in progress, or NULL */
  int reload_again;             /* SIGHUP during a reload: once more */
  uint64_t reloads;             /* applied */
  uint64_t reloads_refused;     /* invalid configurations refused */
  int log_forced;               /* qrsd -v: log.level is not applied */
  int socket_forced;            /* -s / -S: socket.path / status_file */
  int status_forced;            /*   keep their values over reloads */

  uint64_t requests;
  uint64_t draws;
  uint64_t errors;
  int64_t start_mono_ns;

  int stopping;
  uv_timer_t stop_timer;
  int stop_timer_open;
  void (*on_stopped)(struct server *srv);
};

/* Open every configured source (the registry) and the draw engine.  0,
   or a negative errno with err filled in.  srv is the caller's storage;
   undo with server_done(). */
int server_init(struct server *srv, uv_loop_t *loop,
                struct qrsd_conf *conf, char *err, size_t errlen);

/* Reload the configuration: conf->file is read and parsed on
   a worker thread, never on the loop; an invalid one is refused with its
   error (file:line: key: why) and the one in use keeps serving; else the
   keys flagged live are applied in place (limits, access lists, log
   level, monitors) and the others keep their values until a restart,
   reported "needs restart".  Connections and requests in flight are not
   touched.  c NULL (SIGHUP): the outcome is logged; else c gets a
   RELOAD_REPLY or an ERROR to seq.  One reload at a time: during one,
   a request is answered BUSY and a SIGHUP runs another after it. */
void server_reload(struct server *srv, struct conn *c, uint32_t seq);

/* Listen on path: refuse (-EADDRINUSE) if a live daemon answers there,
   replace a stale socket file, apply the configured mode and group. */
int server_listen_path(struct server *srv, const char *path, char *err,
                       size_t errlen);

/* Listen on an already bound and listening socket (systemd activation). */
int server_listen_fd(struct server *srv, int fd, char *err, size_t errlen);

/* Stop accepting, answer what is in flight, close every connection, stop
   the sources (registry_stop), then call on_stopped (from the loop). */
void server_stop(struct server *srv, void (*on_stopped)(struct server *));

/* Free sources and buffers; unlink the socket file if we made it.  Call
   after the loop has run out. */
void server_done(struct server *srv);

#endif
