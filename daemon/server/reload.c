/* Live reload of the configuration: server_reload() in
   server.h says what it does.

   The file is read, hashed and parsed, its groups resolved (getgrnam_r
   reads /etc/group) and its differences from the configuration in use
   listed on a libuv worker thread (which also checks that a device
   source added or changed names a readable path): the loop only applies
   the result - it opens the sources added or changed (as startup does:
   no open reads a device or waits for the network), swaps the live
   keys' values and the sources, retires the sources removed or replaced
   (registry_reload_commit()), sets a few derived limits and the
   monitors, and answers.  Nothing changes the configuration in use
   while the worker reads it: there is one reload at a time, and the
   loop applies it only once the worker is done. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <qrs/error.h>

#include "base/log.h"
#include "engine/study.h"
#include "server/server_int.h"

#define CHANGE_WIRE_MAX 340     /* a ConfigChange's encoded size bound:
                                   key, two values, the flag, tags */

struct reload_job {
  uv_work_t work;
  struct server *srv;
  struct conn *conn;            /* who asked (held), or NULL: SIGHUP */
  uint32_t seq;

  /* The worker's results. */
  int r;                        /* 0, or a negative errno: err says why */
  char err[512];
  struct qrsd_conf *next;
  struct access access;         /* access.group, resolved */
  struct access admin;          /* access.admin_group, resolved */
  struct conf_change *changes;
  size_t n_changes;
};

/* Keep a value the command line set (-s, -S) over the file's. */
static int
keep_override(char **next_value, const char *value)
{
  char *v;

  v = strdup(value);
  if (!v)
    return -ENOMEM;
  free(*next_value);
  *next_value = v;
  return 0;
}

/* A device source added or changed must name a device qrsd can read:
   checked here, on the worker (the source itself opens the device on its
   own thread, at its first fetch, and would only fail its draws). */
static int
check_devices(const struct qrsd_conf *cur, const struct qrsd_conf *next,
              char *err, size_t errlen)
{
  const struct conf_source *a, *b;
  size_t i;

  for (i = 0; i < next->n_sources; i++) {
    b = &next->sources[i];
    if (b->type != CONF_SOURCE_DEVICE)
      continue;
    a = conf_find_source(cur, b->name);
    if (a && conf_source_same(a, b, 0) == 1)
      continue;
    if (access(b->device_path, R_OK) < 0) {
      snprintf(err, errlen, "%.200s:%d: sources.%s.path: cannot read "
               "'%.200s': %s", next->file, b->line, b->name, b->device_path,
               strerror(errno));
      return -EINVAL;
    }
  }
  return 0;
}

/* On a worker thread. */
static void
reload_work(uv_work_t *w)
{
  struct reload_job *j = w->data;
  const struct qrsd_conf *cur = j->srv->conf;
  char why[160];
  int r;

  if (!strcmp(cur->file, CONF_BUILTIN_NAME))
    r = conf_load_default(&j->next, j->err, sizeof(j->err));
  else
    r = conf_load_file(cur->file, &j->next, j->err, sizeof(j->err));
  if (r < 0) {
    if (!j->err[0])
      snprintf(j->err, sizeof(j->err), "cannot read %s: %s", cur->file,
               strerror(-r));
    goto out;
  }
  if ((j->srv->socket_forced &&
       keep_override(&j->next->socket_path, cur->socket_path) < 0) ||
      (j->srv->status_forced &&
       keep_override(&j->next->status_file, cur->status_file) < 0)) {
    r = -ENOMEM;
    snprintf(j->err, sizeof(j->err), "out of memory");
    goto out;
  }
  r = conf_check_live(cur, j->next, j->err, sizeof(j->err));
  if (r < 0)
    goto out;
  r = check_devices(cur, j->next, j->err, sizeof(j->err));
  if (r < 0)
    goto out;
  r = studies_check(cur, j->next, j->err, sizeof(j->err));
  if (r < 0)
    goto out;
  /* socket.group needs a restart: the one in use still counts.  The
     loader names file:line for what it checks; a group is looked up
     here, so the message names the file and the key. */
  r = access_resolve(&j->access, j->next->access_group, cur->socket_group,
                     why, sizeof(why));
  if (r == 0)
    r = access_resolve_admin(&j->admin, j->next->access_admin_group,
                             why, sizeof(why));
  if (r < 0) {
    snprintf(j->err, sizeof(j->err), "%.300s: %s", cur->file, why);
    goto out;
  }
  r = conf_diff(cur, j->next, &j->changes, &j->n_changes);
  if (r < 0)
    snprintf(j->err, sizeof(j->err), "out of memory");

out:
  j->r = r;
}

static void
reply_error(struct reload_job *j, int err, const char *msg)
{
  if (j->conn)
    conn_send_error(j->conn, j->seq, err, "%s", msg);
}

static void
log_changes(const struct reload_job *j)
{
  const struct conf_change *c;
  size_t i;

  for (i = 0; i < j->n_changes; i++) {
    c = &j->changes[i];
    if (c->live)
      log_info("reload: %s: %s -> %s", c->key, c->old_value, c->new_value);
    else
      log_warn("reload: %s: %s -> %s needs a restart; keeping %s", c->key,
               c->old_value, c->new_value, c->old_value);
  }
}

static void
reply_ok(struct reload_job *j, uint32_t applied, uint32_t restart,
         uint64_t apply_ns)
{
  QrsIpc__ReloadReply r = QRS_IPC__RELOAD_REPLY__INIT;
  QrsIpc__ConfigChange *v, **p;
  struct server *srv = j->srv;
  size_t i, n, max;

  if (!j->conn)
    return;
  /* The reply stays within max_reply_bytes: the changes beyond are
     counted, not listed (the log has them all). */
  max = srv->max_reply_bytes > 1024 ?
        (srv->max_reply_bytes - 1024) / CHANGE_WIRE_MAX : 0;
  n = j->n_changes < max ? j->n_changes : max;
  v = calloc(n ? n : 1, sizeof(*v));
  p = calloc(n ? n : 1, sizeof(*p));
  if (!v || !p) {
    free(v);
    free(p);
    conn_send_error(j->conn, j->seq, -ENOMEM, "the reload was applied, "
                    "but there is no memory for its reply");
    return;
  }
  for (i = 0; i < n; i++) {
    qrs_ipc__config_change__init(&v[i]);
    v[i].key = j->changes[i].key;
    v[i].old_value = j->changes[i].old_value;
    v[i].new_value = j->changes[i].new_value;
    v[i].needs_restart = !j->changes[i].live;
    p[i] = &v[i];
  }
  r.config_file = srv->conf->file;
  r.config_hash = srv->conf->hash;
  r.n_changes = n;
  r.changes = p;
  r.changes_omitted = (uint32_t)(j->n_changes - n);
  r.applied = applied;
  r.needs_restart = restart;
  r.apply_ns = apply_ns;
  conn_send(j->conn, QRS_MSG_RELOAD_REPLY, j->seq, &r.base);
  free(p);
  free(v);
}

/* On the loop: apply the worker's result. */
static void
apply(struct reload_job *j)
{
  struct server *srv = j->srv;
  struct reg_reload *rl;
  struct reg_limits lim;
  enum log_level level;
  uint32_t applied, restart;
  uint64_t t0, t1;
  char err[512];
  size_t i;
  int revoke;

  t0 = uv_hrtime();
  /* The sources added or changed first: if one cannot open, nothing
     changes and the old configuration keeps serving. */
  err[0] = '\0';
  if (registry_reload_open(srv->reg, srv->conf, j->next, &rl, err,
                           sizeof(err)) < 0) {
    srv->reloads_refused++;
    log_err("reload refused: %s; %s (sha256 %.16s...) keeps serving",
            err, srv->conf->file, srv->conf->hash);
    reply_error(j, QRS_E_BAD_CONFIG, err);
    return;
  }
  applied = 0;
  restart = 0;
  for (i = 0; i < j->n_changes; i++) {
    applied += j->changes[i].live != 0;
    restart += j->changes[i].live == 0;
  }
  conf_apply_live(srv->conf, j->next);
  err[0] = '\0';
  if (registry_reload_commit(srv->reg, rl, srv->conf, err, sizeof(err)) < 0)
    log_warn("reload: %s changing the sources: qrsctl sources shows the "
             "ones in use", err);
  revoke = srv->access.on != j->access.on || srv->access.gid != j->access.gid;
  srv->access = j->access;
  srv->admin = j->admin;
  if (revoke)
    server_recheck_access(srv);
  if (!srv->log_forced &&
      log_level_parse(srv->conf->log_level, &level) == 0)
    log_set_level(level);
  server_limits_of(srv->conf, &lim, &srv->read_max_per_conn);
  registry_set_limits(srv->reg, &lim);
  if (registry_set_fallbacks(srv->reg, srv->conf) < 0)
    log_warn("reload: out of memory changing a fallback: qrsctl sources "
             "shows the fallbacks in use");
  if (draw_engine_reconfigure(srv->draw) < 0)
    log_warn("reload: out of memory restarting a monitor: it keeps its "
             "old monitor.* settings");
  t1 = uv_hrtime();
  srv->reloads++;
  log_changes(j);
  log_info("reload: %s (sha256 %.16s...) in use: %u change(s) applied, "
           "%u need a restart; applied in %.3f ms of loop time",
           srv->conf->file, srv->conf->hash, applied, restart,
           (double)(t1 - t0) / 1e6);
  statuspub_publish(&srv->status);
  reply_ok(j, applied, restart, t1 - t0);
}

static void
reload_done(uv_work_t *w, int status)
{
  struct reload_job *j = w->data;
  struct server *srv = j->srv;

  srv->reloading = NULL;
  if (status < 0) {
    j->r = status;
    snprintf(j->err, sizeof(j->err), "the reload was cancelled");
  }
  if (j->r < 0) {
    srv->reloads_refused++;
    log_err("reload refused: %s; %s (sha256 %.16s...) keeps serving",
            j->err, srv->conf->file, srv->conf->hash);
    reply_error(j, j->r == -ENOMEM ? -ENOMEM : QRS_E_BAD_CONFIG, j->err);
  } else {
    apply(j);
  }
  conf_free(j->next);
  free(j->changes);
  if (j->conn) {
    conn_request_done(j->conn);
    conn_release(j->conn);
  }
  free(j);
  if (srv->reload_again && !srv->stopping) {
    srv->reload_again = 0;
    server_reload(srv, NULL, 0);
  }
}

void
server_reload(struct server *srv, struct conn *c, uint32_t seq)
{
  struct reload_job *j;
  int r;

  if (srv->reloading) {
    if (c) {
      conn_send_error(c, seq, QRS_E_BUSY, "a reload is in progress");
    } else {
      log_info("SIGHUP: a reload is in progress; reloading again after it");
      srv->reload_again = 1;
    }
    return;
  }
  if (srv->stopping) {
    if (c)
      conn_send_error(c, seq, QRS_E_SHUTDOWN, "qrsd is stopping");
    return;
  }
  j = calloc(1, sizeof(*j));
  if (!j) {
    log_err("reload: out of memory");
    if (c)
      conn_send_error(c, seq, -ENOMEM, "out of memory");
    return;
  }
  j->srv = srv;
  j->conn = c;
  j->seq = seq;
  j->work.data = j;
  log_info("reload of %s requested by %s", srv->conf->file,
           c ? c->peer.name : "SIGHUP");
  r = uv_queue_work(srv->loop, &j->work, reload_work, reload_done);
  if (r < 0) {
    log_err("reload: cannot start: %s", uv_strerror(r));
    if (c)
      conn_send_error(c, seq, QRS_E_INTERNAL, "cannot start the reload: %s",
                      uv_strerror(r));
    free(j);
    return;
  }
  srv->reloading = j;
  if (c) {
    c->inflight++;
    conn_hold(c);
  }
}
