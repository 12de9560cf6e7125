/* An operator's requests about one source: SOURCE_CONTROL
   enables or disables it (registry_set_disabled()) or resets its quota
   (registry_quota_reset()).  dispatch.c has checked that the peer is an
   admin; everything here is bookkeeping on the loop, answered at once. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <qrs/error.h>

#include "base/log.h"
#include "server/server_int.h"

static const char *
action_verb(QrsIpc__SourceAction a)
{
  switch (a) {
  case QRS_IPC__SOURCE_ACTION__SOURCE_ENABLE:
    return "enable";
  case QRS_IPC__SOURCE_ACTION__SOURCE_DISABLE:
    return "disable";
  case QRS_IPC__SOURCE_ACTION__SOURCE_QUOTA_RESET:
    return "quota reset";
  default:
    return "?";
  }
}

static int
is_disabled(struct server *srv, const char *name)
{
  struct reg_info ri;
  size_t i;

  for (i = 0; i < registry_count(srv->reg); i++) {
    registry_info(srv->reg, i, &ri);
    if (!strcmp(ri.name, name))
      return ri.disabled;
  }
  return 0;
}

void
control_handle(struct conn *c, uint32_t seq, const QrsIpc__SourceControl *m)
{
  QrsIpc__SourceControlReply r = QRS_IPC__SOURCE_CONTROL_REPLY__INIT;
  struct server *srv = c->srv;
  const char *name = m->source ? m->source : "";
  char msg[256], why[160];
  int rc;

  if (!name[0] || !registry_has(srv->reg, name)) {
    conn_send_error(c, seq, QRS_E_UNKNOWN_SOURCE, "%s: no declared source "
                    "'%.64s' (qrsctl sources lists them)",
                    action_verb(m->action), name);
    return;
  }
  why[0] = '\0';
  switch (m->action) {
  case QRS_IPC__SOURCE_ACTION__SOURCE_ENABLE:
  case QRS_IPC__SOURCE_ACTION__SOURCE_DISABLE:
    rc = registry_set_disabled(srv->reg, name, m->action ==
                               QRS_IPC__SOURCE_ACTION__SOURCE_DISABLE);
    if (rc < 0)
      break;
    r.changed = rc == 1;
    snprintf(msg, sizeof(msg), "source '%s' %s%s", name,
             rc == 1 ? "" : "was already ",
             m->action == QRS_IPC__SOURCE_ACTION__SOURCE_DISABLE ?
             "disabled" : "enabled");
    break;
  case QRS_IPC__SOURCE_ACTION__SOURCE_QUOTA_RESET:
    rc = registry_quota_reset(srv->reg, name, why, sizeof(why));
    if (rc < 0)
      break;
    r.changed = 1;
    snprintf(msg, sizeof(msg), "source '%s': quota use reset to 0", name);
    break;
  default:
    conn_send_error(c, seq, QRS_E_BAD_REQUEST, "SOURCE_CONTROL: unknown "
                    "action %d", (int)m->action);
    return;
  }
  if (rc < 0) {
    conn_send_error(c, seq, rc == -ENOENT ? QRS_E_UNKNOWN_SOURCE :
                    QRS_E_BAD_REQUEST, "%s %s: %s", action_verb(m->action),
                    name, why[0] ? why : qrs_strerror(rc));
    return;
  }
  /* The registry's observer has republished the status file. */
  log_info("%s: %s", c->peer.name, msg);
  r.source = (char *)name;
  r.action = m->action;
  r.disabled = is_disabled(srv, name);
  r.message = msg;
  conn_send(c, QRS_MSG_SOURCE_CONTROL_REPLY, seq, &r.base);
}
