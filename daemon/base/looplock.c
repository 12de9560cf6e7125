/* The loop run under a lock; see looplock.h. */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>

#include "base/log.h"
#include "base/looplock.h"

static struct looplock *registered;

int
looplock_init(struct looplock *lk, uv_loop_t *loop)
{
  memset(lk, 0, sizeof(*lk));
  lk->loop = loop;
  lk->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (lk->efd < 0)
    return -errno;
  pthread_mutex_init(&lk->lock, NULL);
  pthread_mutex_lock(&lk->lock);       /* the caller is the loop */
  lk->wake_at = UINT64_MAX;
  registered = lk;
  return 0;
}

void
looplock_done(struct looplock *lk)
{
  if (registered == lk)
    registered = NULL;
  if (lk->efd >= 0)
    close(lk->efd);
  lk->efd = -1;
  pthread_mutex_unlock(&lk->lock);
  pthread_mutex_destroy(&lk->lock);
}

struct looplock *
looplock_for(uv_loop_t *loop)
{
  return registered && registered->loop == loop ? registered : NULL;
}

/* The loop time (ms) by which the loop must run again, from its
   backend timeout t: -1 (nothing due) is "never". */
static uint64_t
due_at(uv_loop_t *loop, int t)
{
  return t < 0 ? UINT64_MAX : uv_now(loop) + (uint64_t)t;
}

void
looplock_run(struct looplock *lk)
{
  struct pollfd pf[2];
  uint64_t v;
  int t;

  pf[0].fd = uv_backend_fd(lk->loop);
  pf[1].fd = lk->efd;
  /* The lock is held here (init took it) except inside poll(). */
  while (uv_run(lk->loop, UV_RUN_NOWAIT)) {
    t = uv_backend_timeout(lk->loop);
    lk->wake_at = due_at(lk->loop, t);
    pthread_mutex_unlock(&lk->lock);
    pf[0].events = pf[1].events = POLLIN;
    pf[0].revents = pf[1].revents = 0;
    if (poll(pf, 2, t) < 0 && errno != EINTR)
      log_warn("loop: poll: %s", strerror(errno));
    if (pf[1].revents & POLLIN)
      while (read(lk->efd, &v, sizeof(v)) > 0)
        ;
    pthread_mutex_lock(&lk->lock);
  }
}

void
looplock_enter(struct looplock *lk)
{
  pthread_mutex_lock(&lk->lock);
}

void
looplock_leave(struct looplock *lk)
{
  uint64_t one = 1, due;

  /* What the callbacks queued (a finished write's callback, a watcher
     to register, a handle to close, a timer due now) runs here, so that
     the loop thread need not wake for it. */
  uv_run(lk->loop, UV_RUN_NOWAIT);
  due = due_at(lk->loop, uv_backend_timeout(lk->loop));
  if (due < lk->wake_at) {
    lk->wake_at = due;
    if (write(lk->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
      log_warn("loop: cannot wake the loop thread: %s", strerror(errno));
  }
  pthread_mutex_unlock(&lk->lock);
}
