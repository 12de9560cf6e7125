/* The IPC client's pieces (libqrs internal, not installed): what the
   calls share with the connection.

   client.c        a client's lifetime and what it tells about itself
                   (server info, socket path, the last call's message)
   client_conn.c   the connection: connect and HELLO, frames out and in,
                   the reply arena, one call and its reply, tickets'
                   replies that arrive while another call waits
   client_draw.c   draws: the wire request, blocking and pipelined by
                   ticket, the reply's decoding
   client_query.c  raw bytes and the STATUS / HEALTH / SOURCES queries
                   with their replies' decoding

   Every function here runs with c->lock held by the public call that
   uses it, except qrs__client_alloc(). */
#ifndef QRS_CLIENT_CONN_H
#define QRS_CLIENT_CONN_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/un.h>

#include <qrs/client.h>

#include "clientint.h"
#include "strcopy.h"

#define ERRMSG_MAX 512
/* Replies are unpacked into a per-client arena: a draw's reply, or an
   ERROR, takes well under 1 KiB, so the token path never allocates.
   Larger replies (BYTES, STATUS with many sources) go to the heap, at most
   ARENA_HEAP_FACTOR times the reply limit in all for one reply (protobuf-c
   turns a 2-byte empty element of a repeated message into a whole
   struct). */
#define ARENA_SIZE (16 * 1024)

enum slot_state {
  SLOT_FREE = 0,
  SLOT_PENDING,                 /* sent, no reply yet */
  SLOT_DONE,                    /* reply (or error) stored */
  SLOT_CANCELLED,               /* reply will be dropped */
};

/* A pipelined draw's ticket. */
struct slot {
  enum slot_state state;
  uint32_t seq;
  int err;
  struct qrs_draw draw;
  char errmsg[ERRMSG_MAX];      /* the daemon's words for err */
};

struct qrs_client {
  pthread_mutex_t lock;
  char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
  char name[QRS_NAME_MAX];
  int timeout_ms;
  int no_reconnect;
  qrs_log_cb log_cb;
  void *log_ud;

  int fd;                       /* -1: not connected */
  int connected_once;
  uint32_t next_seq;
  struct qrs_server_info info;
  char errmsg[ERRMSG_MAX];      /* of the call in progress */

  uint8_t *rbuf;                /* bytes received, not yet consumed */
  size_t rlen;
  int just_sent;                /* a request went out, no recv since */
  size_t rcap;

  struct slot *slots;
  size_t n_slots;

  ProtobufCAllocator pb_alloc;  /* over the arena below */
  size_t arena_used;            /* bytes handed out since the last unpack */
  size_t heap_used;             /* heap bytes handed out since then */
  _Alignas(16) uint8_t arena[ARENA_SIZE];
};

static inline void
qrs__copy_str(char *dst, size_t cap, const char *src)
{
  str_copy(dst, cap, src);
}

/* client.c: the end of a public call, under the lock: its error message
   becomes the calling thread's (qrs_client_errmsg()). */
void qrs__client_keep_errmsg(const struct qrs_client *c);

/* client_conn.c */

/* A new client for path with opts, not connected.  Returns 0 and the
   client in *ret_client, or -ENOMEM, -ENAMETOOLONG.  Free with
   qrs_client_free(). */
int qrs__client_alloc(const char *path, const struct qrs_client_options *opts,
                      struct qrs_client **ret_client);

/* Deadline for a call started now (-1: none). */
int64_t qrs__client_deadline(const struct qrs_client *c);

/* The next request's seq (never 0). */
uint32_t qrs__client_take_seq(struct qrs_client *c);

/* The open ticket of seq, or NULL. */
struct slot *qrs__client_find_slot(struct qrs_client *c, uint32_t seq);

/* The HELLO exchange on c->fd; sizes the ticket table. */
int qrs__client_hello(struct qrs_client *c, int64_t deadline);

/* Connect (again) if needed: socket and HELLO. */
int qrs__client_connect(struct qrs_client *c, int64_t deadline);

/* Send one frame of type with seq and payload m before deadline. */
int qrs__client_send(struct qrs_client *c, uint16_t type, uint32_t seq,
                     const ProtobufCMessage *m, int64_t deadline);

/* Wait for the reply to seq, of type want (or ERROR), stashing the others.
   On success *ret_msg holds the unpacked reply (give it back with
   qrs__client_release()). */
int qrs__client_wait_reply(struct qrs_client *c, uint32_t seq, uint16_t want,
                           ProtobufCMessage **ret_msg, int64_t deadline);

/* Take in the replies that have already arrived, without waiting: frees
   the slots of cancelled tickets whose replies are in. */
void qrs__client_drain(struct qrs_client *c);

/* One request and its reply (clears c->errmsg first), reconnecting once
   if the connection turns out to be dead (for example after a daemon
   restart).  *ret_msg as qrs__client_wait_reply(). */
int qrs__client_call(struct qrs_client *c, uint16_t type,
                     const ProtobufCMessage *m, uint16_t want,
                     ProtobufCMessage **ret_msg);

/* Give back an unpacked reply (NULL: just reset the arena). */
void qrs__client_release(struct qrs_client *c, ProtobufCMessage *m);

/* client_draw.c: a DRAW_REPLY into d (all of d is set). */
void qrs__draw_from_wire(const QrsIpc__DrawReply *m, struct qrs_draw *d);

#endif
