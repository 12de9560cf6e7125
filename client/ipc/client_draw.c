/* libqrs IPC client: draws (client_conn.h has the pieces).

   The wire request from a struct qrs_draw_request (its commitment and
   amplifier parameters as submessages in the caller's storage), the
   blocking draw, the pipelined one by ticket (begin, finish, cancel) and
   the reply's decoding, which the connection also uses for a ticket's
   reply that arrives while another call waits. */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include <qrs/client.h>

#include "client_conn.h"

/* w, set to v, for an optional field of the wire message. */
static QrsIpc__DoubleValue *
double_value(QrsIpc__DoubleValue *w, double v)
{
  qrs_ipc__double_value__init(w);
  w->value = v;
  return w;
}

static QrsIpc__UInt32Value *
uint32_value(QrsIpc__UInt32Value *w, uint32_t v)
{
  qrs_ipc__uint32_value__init(w);
  w->value = v;
  return w;
}

/* A draw's amplifier parameters into the wire message's optional
   fields (clientint.h). */
void
qrs__amp_to_wire(const struct qrs_amp_params *ap, QrsIpc__Draw *m,
                 struct qrs__amp_wire *w)
{
  if (!ap)
    return;
  if (ap->set & QRS_AMP_POPULATION_MEAN)
    m->population_mean = double_value(&w->mean, ap->population_mean);
  if (ap->set & QRS_AMP_POPULATION_STD)
    m->population_std = double_value(&w->std, ap->population_std);
  if (ap->set & QRS_AMP_EPSILON)
    m->uniform_clamp_epsilon = double_value(&w->eps,
                                            ap->uniform_clamp_epsilon);
  if (ap->set & QRS_AMP_ZSCORE_CALIBRATION)
    m->zscore_calibration_samples =
        uint32_value(&w->zcal, ap->zscore_calibration_samples);
  if (ap->set & QRS_AMP_ECDF_CALIBRATION)
    m->ecdf_calibration_samples =
        uint32_value(&w->ecal, ap->ecdf_calibration_samples);
}

static void
ts_from_wire(const QrsIpc__Timestamp *w, struct qrs_timestamp *t)
{
  t->realtime_ns = w ? w->realtime_ns : 0;
  t->monotonic_ns = w ? w->monotonic_ns : 0;
}

void
qrs__draw_from_wire(const QrsIpc__DrawReply *m, struct qrs_draw *d)
{
  const QrsIpc__DrawMeta *mm;

  memset(d, 0, sizeof(*d));
  d->u = m->u;
  d->z = m->z;
  d->sample_mean = m->sample_mean;
  d->sample_count = m->sample_count;
  qrs__copy_str(d->source, sizeof(d->source), m->source);
  qrs__copy_str(d->served_by, sizeof(d->served_by), m->served_by);
  qrs__copy_str(d->amplifier, sizeof(d->amplifier), m->amplifier);
  d->fallback = m->fallback;
  qrs__copy_str(d->served_type, sizeof(d->served_type), m->served_type);
  d->production = m->production;
  d->journal_seq = m->journal_seq;
  d->unjournalled = m->unjournalled;
  d->nonce = m->nonce;
  d->byte_sum = m->byte_sum;
  d->population_mean = m->population_mean;
  d->population_std = m->population_std;
  d->extra_bytes = m->extra_bytes;
  switch (m->echo) {
  case QRS_IPC__ECHO__ECHO_VERIFIED:
    d->echo = QRS_ECHO_VERIFIED;
    break;
  case QRS_IPC__ECHO__ECHO_MISMATCH:
    d->echo = QRS_ECHO_MISMATCH;
    break;
  default:
    d->echo = QRS_ECHO_NONE;
    break;
  }
  ts_from_wire(m->received, &d->received);
  ts_from_wire(m->generated, &d->generated);
  ts_from_wire(m->sent, &d->sent);
  mm = m->meta;
  if (mm) {
    d->has_meta = 1;
    d->meta.z = mm->z;
    d->meta.coherence_z = mm->coherence_z;
    d->meta.coherence_r = mm->coherence_r;
    d->meta.coherence_valid = mm->coherence_valid;
    d->meta.integrated_bytes = mm->integrated_bytes;
    d->meta.generation_timestamp_ns = mm->generation_timestamp_ns;
    qrs__copy_str(d->meta.purity_label, sizeof(d->meta.purity_label),
                  mm->purity_label);
    qrs__copy_str(d->meta.integrator, sizeof(d->meta.integrator),
                  mm->integrator);
    qrs__copy_str(d->meta.source_id, sizeof(d->meta.source_id), mm->source_id);
  }
}

/* Storage for the submessages of one wire Draw. */
struct draw_wire {
  QrsIpc__Commitment cm;
  struct qrs__amp_wire amp;
};

/* Fill the wire request; dw is the caller's storage for submessages. */
static int
draw_to_wire(const struct qrs_client *c, const struct qrs_draw_request *req,
             QrsIpc__Draw *m, struct draw_wire *dw)
{
  QrsIpc__Commitment *cm = &dw->cm;

  qrs_ipc__draw__init(m);
  if (!req)
    return 0;
  m->source = (char *)(req->source ? req->source : "");
  m->amplifier = (char *)(req->amplifier ? req->amplifier : "");
  m->sample_count = req->sample_count;
  m->draw_source_id = (char *)(req->draw_source_id ? req->draw_source_id :
                               "");
  m->draw_block_bytes = req->draw_block_bytes;
  m->unit = (char *)(req->unit ? req->unit : "");
  if (req->commitment) {
    if (req->commitment->salt_len && !req->commitment->salt)
      return -EINVAL;
    qrs_ipc__commitment__init(cm);
    cm->salt.data = (uint8_t *)req->commitment->salt;
    cm->salt.len = req->commitment->salt_len;
    cm->step = req->commitment->step;
    cm->prev_token_id = req->commitment->prev_token_id;
    m->commitment = cm;
  }
  qrs__amp_to_wire(req->amp, m, &dw->amp);
  return 0;
}

int
qrs_client_draw(struct qrs_client *c, const struct qrs_draw_request *req,
                struct qrs_draw *ret_draw)
{
  struct draw_wire dw;
  ProtobufCMessage *reply;
  QrsIpc__Draw m;
  int r;

  if (!c || !ret_draw)
    return -EINVAL;
  r = draw_to_wire(c, req, &m, &dw);
  if (r < 0)
    return r;
  pthread_mutex_lock(&c->lock);
  if (m.sample_count == 0)
    m.sample_count = c->info.default_sample_count;
  r = qrs__client_call(c, QRS_MSG_DRAW, &m.base, QRS_MSG_DRAW_REPLY, &reply);
  if (r == 0) {
    qrs__draw_from_wire((QrsIpc__DrawReply *)reply, ret_draw);
    qrs__client_release(c, reply);
  }
  qrs__client_keep_errmsg(c);
  pthread_mutex_unlock(&c->lock);
  return r;
}

/* A free ticket slot, or NULL. */
static struct slot *
free_slot(struct qrs_client *c)
{
  size_t i;

  for (i = 0; i < c->n_slots; i++)
    if (c->slots[i].state == SLOT_FREE)
      return &c->slots[i];
  return NULL;
}

int
qrs_client_draw_begin(struct qrs_client *c,
                      const struct qrs_draw_request *req,
                      uint32_t *ret_ticket)
{
  struct draw_wire dw;
  struct slot *s;
  QrsIpc__Draw m;
  int64_t deadline;
  int r;

  if (!c || !ret_ticket)
    return -EINVAL;
  r = draw_to_wire(c, req, &m, &dw);
  if (r < 0)
    return r;
  pthread_mutex_lock(&c->lock);
  c->errmsg[0] = '\0';
  deadline = qrs__client_deadline(c);
  r = qrs__client_connect(c, deadline);
  if (r < 0)
    goto out;
  if (m.sample_count == 0)
    m.sample_count = c->info.default_sample_count;
  s = free_slot(c);
  if (!s) {
    qrs__client_drain(c);
    s = free_slot(c);
  }
  if (!s) {
    r = QRS_E_BUSY;
    goto out;
  }
  memset(s, 0, sizeof(*s));
  s->seq = qrs__client_take_seq(c);
  r = qrs__client_send(c, QRS_MSG_DRAW, s->seq, &m.base, deadline);
  if (r == QRS_E_DISCONNECTED && !c->no_reconnect) {
    /* The daemon went away since the last call: once more, afresh. */
    r = qrs__client_connect(c, deadline);
    if (r == 0)
      r = qrs__client_send(c, QRS_MSG_DRAW, s->seq, &m.base, deadline);
  }
  if (r < 0)
    goto out;
  s->state = SLOT_PENDING;
  *ret_ticket = s->seq;
out:
  qrs__client_keep_errmsg(c);
  pthread_mutex_unlock(&c->lock);
  return r;
}

int
qrs_client_draw_finish(struct qrs_client *c, uint32_t ticket,
                       struct qrs_draw *ret_draw)
{
  ProtobufCMessage *reply;
  struct slot *s;
  int r;

  if (!c || !ret_draw)
    return -EINVAL;
  pthread_mutex_lock(&c->lock);
  c->errmsg[0] = '\0';
  s = qrs__client_find_slot(c, ticket);
  if (!s || s->state == SLOT_CANCELLED) {
    r = QRS_E_NO_TICKET;
    goto out;
  }
  if (s->state == SLOT_PENDING) {
    r = qrs__client_wait_reply(c, ticket, QRS_MSG_DRAW_REPLY, &reply,
                               qrs__client_deadline(c));
    if (r == -ETIMEDOUT)
      goto out;                 /* the ticket stays open */
    s->state = SLOT_DONE;
    s->err = r;
    if (r == 0) {
      qrs__draw_from_wire((QrsIpc__DrawReply *)reply, &s->draw);
      qrs__client_release(c, reply);
    }
  } else if (s->err < 0) {
    /* Stashed while another call waited: its message came with it. */
    memcpy(c->errmsg, s->errmsg, sizeof(c->errmsg));
  }
  r = s->err;
  if (r == 0)
    *ret_draw = s->draw;
  s->state = SLOT_FREE;
out:
  qrs__client_keep_errmsg(c);
  pthread_mutex_unlock(&c->lock);
  return r;
}

int
qrs_client_draw_cancel(struct qrs_client *c, uint32_t ticket)
{
  struct slot *s;
  int r;

  if (!c)
    return -EINVAL;
  pthread_mutex_lock(&c->lock);
  s = qrs__client_find_slot(c, ticket);
  r = 0;
  if (!s || s->state == SLOT_CANCELLED)
    r = QRS_E_NO_TICKET;
  else if (s->state == SLOT_PENDING)
    s->state = SLOT_CANCELLED;
  else
    s->state = SLOT_FREE;
  pthread_mutex_unlock(&c->lock);
  return r;
}
