/* libqrs IPC client: a client's lifetime and what it tells about itself.

   Blocking calls with timeouts over one Unix stream socket, pipelined
   draws by ticket, reconnect after a daemon restart: client_conn.h lists
   the pieces.  Replies are matched by seq.  A reply that arrives while the
   caller waits for another one is kept in its ticket's slot (draws) or
   dropped (a call that already timed out).  A connection error marks the
   connection dead: every open ticket then finishes with
   QRS_E_DISCONNECTED and the next call reconnects (unless
   no_reconnect). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qrs-config.h"

#include <qrs/client.h>

#include "client_conn.h"

/* The daemon's message for the error of the calling thread's last call,
   and the client it was made on (qrs_client_errmsg). */
static __thread struct {
  const struct qrs_client *c;
  char msg[ERRMSG_MAX];
} tl_err;

/* The server info handed out by qrs_client_server_info(). */
static __thread struct qrs_server_info tl_info;

void
qrs__client_keep_errmsg(const struct qrs_client *c)
{
  tl_err.c = c;
  memcpy(tl_err.msg, c->errmsg, sizeof(tl_err.msg));
}

int
qrs_client_new(const char *path, const struct qrs_client_options *opts,
               struct qrs_client **ret_client)
{
  struct qrs_client *c;
  int r;

  if (!ret_client)
    return -EINVAL;
  if (!path || !*path)
    path = getenv("QRS_SOCKET");
  if (!path || !*path)
    path = QRS_DEFAULT_SOCKET;
  r = qrs__client_alloc(path, opts, &c);
  if (r < 0)
    return r;
  r = qrs__client_connect(c, qrs__client_deadline(c));
  if (r < 0) {
    qrs_client_free(c);
    return r;
  }
  *ret_client = c;
  return 0;
}

int
qrs__client_new_fd(int fd, const struct qrs_client_options *opts,
                   struct qrs_client **ret_client)
{
  struct qrs_client *c;
  int r;

  if (fd < 0 || !ret_client) {
    if (fd >= 0)
      close(fd);
    return -EINVAL;
  }
  r = qrs__client_alloc("(fd)", opts, &c);
  if (r < 0) {
    close(fd);
    return r;
  }
  c->no_reconnect = 1;
  c->fd = fd;
  r = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0 ? -errno : 0;
  if (r == 0)
    r = qrs__client_hello(c, qrs__client_deadline(c));
  if (r < 0) {
    qrs_client_free(c);
    return r;
  }
  c->connected_once = 1;
  *ret_client = c;
  return 0;
}

void
qrs_client_free(struct qrs_client *c)
{
  if (!c)
    return;
  if (tl_err.c == c)
    tl_err.c = NULL;
  if (c->fd >= 0)
    close(c->fd);
  pthread_mutex_destroy(&c->lock);
  free(c->rbuf);
  free(c->slots);
  free(c);
}

void
qrs_client_set_log_cb(struct qrs_client *c, qrs_log_cb cb, void *userdata)
{
  if (!c)
    return;
  pthread_mutex_lock(&c->lock);
  c->log_cb = cb;
  c->log_ud = userdata;
  pthread_mutex_unlock(&c->lock);
}

int
qrs_client_get_server_info(const struct qrs_client *c,
                           struct qrs_server_info *ret_info)
{
  pthread_mutex_t *lock;

  if (!c || !ret_info)
    return -EINVAL;
  /* The lock guards a reconnect's new HELLO data; c stays const. */
  lock = (pthread_mutex_t *)&c->lock;
  pthread_mutex_lock(lock);
  *ret_info = c->info;
  pthread_mutex_unlock(lock);
  return 0;
}

const struct qrs_server_info *
qrs_client_server_info(const struct qrs_client *c)
{
  if (!c || qrs_client_get_server_info(c, &tl_info) < 0)
    return NULL;
  return &tl_info;
}

const char *
qrs_client_errmsg(const struct qrs_client *c)
{
  return c && tl_err.c == c ? tl_err.msg : "";
}

const char *
qrs_client_socket_path(const struct qrs_client *c)
{
  return c ? c->path : NULL;
}

const char *
qrs_version(void)
{
  return QRS_VERSION;
}

