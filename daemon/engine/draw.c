/* The draw engine: fresh bytes for each DRAW / BYTES request, fetched
   from the registry after the request arrived, amplified into u (DRAW) or
   returned raw (BYTES). */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <qrs/error.h>

#include "amp_exact.h"
#include "engine/ampreq.h"
#include "amplify.h"
#include "engine/draw.h"
#include "engine/study.h"
#include "base/container.h"
#include "base/log.h"
#include "base/notify.h"
#include "base/peer.h"
#include "stats/monitor.h"
#include "nonce.h"
#include "persist/journal.h"
#include "sources/source.h"
#include "strcopy.h"

struct prep;

/* Per source (as the registry lists them): its calibrations, keyed by the
   source a request asks for, and the live statistics of the u it served,
   keyed by the source that served the bytes. */
struct srcamp {
  char *name;
  struct amp_state st;
  struct monitor mon;
  LIST_HEAD(, prep) inflight;   /* preparations in progress */
};

#define SRCAMP_SPARE (2 * CONF_MAX_SOURCES)

struct draw_engine {
  const struct qrsd_conf *conf;
  struct registry *reg;
  uv_loop_t *loop;
  uint32_t max_bytes_per_request;
  struct log_ratelimit fail_rl;
  struct srcamp *amp;
  size_t n_amp;
  size_t cap_amp;
  struct journal *journal;      /* NULL: journal.dir "" */
  struct studies *studies;      /* NULL: none configured */
  struct amp_state study_amp;   /* study draws' (no calibration) */
  uv_async_t *written;          /* the journal wrote (or lost) entries */
  STAILQ_HEAD(, req) held;      /* draw replies waiting for their entry
                                   to be written, in sequence order */
  /* the last journal amplifier parameters formatted (two %.17g cost more
     than the rest of the entry; a source's population is constant) */
  struct {
    uint32_t n;
    double mean, std;
    char text[JOURNAL_PARAMS_MAX - STUDY_PARAMS_MAX + 1];
                                /* a study draw appends its own */
  } jparams;
};

enum job_kind {
  JOB_DRAW,
  JOB_BYTES,
};

/* One request, from registry_fetch() to its reply. */
struct req {
  struct draw_engine *e;
  enum job_kind kind;
  char source[64];              /* as asked ("": the default) */
  struct amp_req amp;           /* DRAW: the amplifier and its parameters */
  struct amp_exact_table *table;  /* exact: its table (a reference) */
  STAILQ_ENTRY(req) prep_link;  /* waiting for a preparation */
  int forced_fallback;          /* a server draw fell back to local bytes */
  struct source_draw sd;        /* amplifier "server" */
  uint64_t nonce;
  struct ts received;
  const struct peer *peer;
  struct reg_owner *owner;
  draw_reply_fn reply;
  void *ctx;
  struct study_draw study;      /* a study draw (study.study set) */
  /* a draw reply held until its journal entry is written (held.journal_seq
     set), with what it points to */
  STAILQ_ENTRY(req) held_link;
  QrsIpc__DrawReply held;
  QrsIpc__DrawMeta held_meta;
  QrsIpc__Timestamp held_ts[3];
  char held_source[64], held_served_by[64], held_type[64];
};

static void on_journal_written(uv_async_t *h);

static void
monitor_conf_of(const struct qrsd_conf *conf, struct monitor_conf *mc)
{
  mc->window = conf->monitor_window;
  mc->ks_alarm_p = conf->monitor_ks_alarm_p;
  mc->cusum_k = conf->monitor_cusum_k;
  mc->cusum_h = conf->monitor_cusum_h;
}

static int
monitor_conf_equal(const struct monitor_conf *a, const struct monitor_conf *b)
{
  return a->window == b->window && a->ks_alarm_p == b->ks_alarm_p &&
         a->cusum_k == b->cusum_k && a->cusum_h == b->cusum_h;
}

/* What the engine derives from limits.* (again on a reload). */
static void
limits_apply(struct draw_engine *e)
{
  const struct qrsd_conf *conf = e->conf;

  amp_exact_cache_limit(conf->exact_cache_bytes);
  /* A BYTES reply is the data plus a few short strings. */
  e->max_bytes_per_request = conf->max_frame_bytes - 512;
  if (e->max_bytes_per_request > conf->max_sample_count)
    e->max_bytes_per_request = conf->max_sample_count;
}

/* The journal's on_written, on its writer thread. */
static void
journal_wake(void *arg)
{
  uv_async_send(arg);
}

static void
on_written_closed(uv_handle_t *h)
{
  free(h);
}

int
draw_engine_new(const struct qrsd_conf *conf, struct registry *reg,
                uv_loop_t *loop, struct draw_engine **ret_engine)
{
  struct monitor_conf mc;
  struct draw_engine *e;
  struct reg_info ri;
  size_t i;

  e = calloc(1, sizeof(*e));
  if (!e)
    return -ENOMEM;
  e->conf = conf;
  e->reg = reg;
  e->loop = loop;
  amp_state_init(&e->study_amp);
  STAILQ_INIT(&e->held);
  e->n_amp = registry_count(reg);
  /* Room for the sources reloads add: preparations in flight point into
     the array, so it never moves. */
  e->cap_amp = e->n_amp + SRCAMP_SPARE;
  e->amp = calloc(e->cap_amp, sizeof(*e->amp));
  if (!e->amp) {
    free(e);
    return -ENOMEM;
  }
  monitor_conf_of(conf, &mc);
  for (i = 0; i < e->n_amp; i++) {
    registry_info(reg, i, &ri);
    e->amp[i].name = strdup(ri.name);
    amp_state_init(&e->amp[i].st);
    if (!e->amp[i].name || monitor_init(&e->amp[i].mon, &mc) < 0) {
      e->n_amp = i + 1;
      draw_engine_free(e);
      return -ENOMEM;
    }
  }
  limits_apply(e);
  if (conf->journal_dir && conf->journal_dir[0]) {
    struct journal_params jp;
    char err[512];
    int r;

    journal_params_default(&jp);
    jp.dir = conf->journal_dir;
    jp.max_bytes = conf->journal_max_bytes;
    jp.queue_len = conf->journal_queue;
    jp.fsync_every = conf->journal_batch;
    jp.flush_ms = conf->journal_flush_ms;
    jp.bytes_buf = (size_t)conf->journal_hash_buffer;
    jp.nice = (int)conf->journal_writer_nice;
    if (conf->journal_writer_cpu && conf->journal_writer_cpu[0]) {
      char *end;
      long cpu;

      errno = 0;
      cpu = strtol(conf->journal_writer_cpu, &end, 10);
      if (errno || *end || end == conf->journal_writer_cpu || cpu < 0 ||
          cpu > 1023) {
        log_err("journal.writer_cpu: \"%s\" is not a CPU number (0..1023, "
                "or \"\" for not pinned)", conf->journal_writer_cpu);
        draw_engine_free(e);
        return -EINVAL;
      }
      jp.cpu = (int)cpu;
    }
    jp.policy = strcmp(conf->journal_on_error, "label") == 0 ?
                JOURNAL_POLICY_LABEL : JOURNAL_POLICY_STOP;
    /* the writer thread tells the loop that entries were written: the
       replies waiting for them go out (on_journal_written()) */
    e->written = malloc(sizeof(*e->written));
    if (!e->written) {
      draw_engine_free(e);
      return -ENOMEM;
    }
    r = uv_async_init(loop, e->written, on_journal_written);
    if (r < 0) {
      free(e->written);
      e->written = NULL;
      log_err("journal: cannot set up its wake-up: %s", uv_strerror(r));
      draw_engine_free(e);
      return r;
    }
    e->written->data = e;
    uv_unref((uv_handle_t *)e->written);
    jp.on_written = journal_wake;
    jp.on_written_arg = e->written;
    notify_step("resuming the draw journal in %s", jp.dir);
    r = journal_open(&e->journal, &jp, err, sizeof err);
    if (r < 0) {
      log_err("%s", err);
      draw_engine_free(e);
      return r;
    }
  }
  if (conf->n_studies) {
    char err[512];
    int r;

    r = studies_new(conf, reg, e->journal, &e->studies, err, sizeof err);
    if (r < 0) {
      log_err("%s", err);
      draw_engine_free(e);
      return r;
    }
  }
  *ret_engine = e;
  return 0;
}

static struct srcamp *srcamp_of(struct draw_engine *e, const char *name);

int
draw_engine_reconfigure(struct draw_engine *e)
{
  struct monitor_conf mc;
  struct monitor m;
  size_t i;
  int r;

  limits_apply(e);
  monitor_conf_of(e->conf, &mc);
  r = 0;
  if (e->studies || e->conf->n_studies) {
    char err[512];

    if (studies_reload(&e->studies, e->conf, e->reg, e->journal, err,
                       sizeof err) < 0)
      log_warn("reload: %s", err);
  }
  /* Sources a reload added get theirs; those it removed keep theirs (a
     draw in flight may still use it; a source replaced keeps its
     calibration under its name). */
  for (i = 0; i < registry_count(e->reg); i++) {
    struct reg_info ri;
    struct srcamp *sa;

    registry_info(e->reg, i, &ri);
    if (srcamp_of(e, ri.name))
      continue;
    if (e->n_amp == e->cap_amp) {
      log_warn("source '%s': no room for its amplifier state after %zu "
               "sources; restart qrsd", ri.name, e->n_amp);
      r = -ENOMEM;
      continue;
    }
    sa = &e->amp[e->n_amp];
    sa->name = strdup(ri.name);
    amp_state_init(&sa->st);
    if (!sa->name || monitor_init(&sa->mon, &mc) < 0) {
      free(sa->name);
      amp_state_free(&sa->st);
      sa->name = NULL;
      r = -ENOMEM;
      continue;
    }
    e->n_amp++;
  }
  for (i = 0; i < e->n_amp; i++) {
    if (monitor_conf_equal(&e->amp[i].mon.conf, &mc))
      continue;
    /* A new window starts empty, and its alarm unlatched. */
    if (monitor_init(&m, &mc) < 0) {
      r = -ENOMEM;
      continue;
    }
    monitor_free(&e->amp[i].mon);
    e->amp[i].mon = m;
  }
  return r;
}

void
draw_engine_free(struct draw_engine *e)
{
  size_t i;

  if (!e)
    return;
  for (i = 0; i < e->n_amp; i++) {
    free(e->amp[i].name);
    amp_state_free(&e->amp[i].st);
    monitor_free(&e->amp[i].mon);
  }
  free(e->amp);
  studies_free(e->studies);
  amp_state_free(&e->study_amp);
  journal_close(e->journal);
  /* not stopped (a start that failed): the loop does not run again */
  if (e->written && !uv_is_closing((uv_handle_t *)e->written))
    uv_close((uv_handle_t *)e->written, on_written_closed);
  free(e);
}

struct journal *
draw_journal(struct draw_engine *e)
{
  return e->journal;
}

struct studies *
draw_studies(struct draw_engine *e)
{
  return e->studies;
}

static struct srcamp *
srcamp_of(struct draw_engine *e, const char *name)
{
  size_t i;

  if (!name || !*name)
    name = registry_default(e->reg);
  for (i = 0; i < e->n_amp; i++)
    if (!strcmp(e->amp[i].name, name))
      return &e->amp[i];
  return NULL;
}

const struct monitor *
draw_monitor(struct draw_engine *e, const char *source)
{
  struct srcamp *sa;

  sa = srcamp_of(e, source);
  return sa ? &sa->mon : NULL;
}

int
draw_alarms(const struct draw_engine *e, const char **ret_source,
            const char **ret_reason)
{
  size_t i;
  int n;

  n = 0;
  for (i = 0; i < e->n_amp; i++) {
    if (!e->amp[i].mon.alarm)
      continue;
    if (!n++) {
      *ret_source = e->amp[i].name;
      *ret_reason = e->amp[i].mon.reason;
    }
  }
  return n;
}

/* The request is over: drop what it holds. */
static void
req_free(struct req *rq)
{
  study_draw_end(&rq->study);
  amp_exact_release(rq->table);
  free(rq);
}

uint32_t
draw_max_bytes(const struct draw_engine *e)
{
  return e->max_bytes_per_request;
}

void
draw_vreply_error(draw_reply_fn reply, void *ctx, int err, const char *fmt,
                  va_list ap)
{
  QrsIpc__Error m = QRS_IPC__ERROR__INIT;
  char msg[512];

  vsnprintf(msg, sizeof(msg), fmt, ap);
  m.code = qrs__error_to_wire(err);
  m.message = msg;
  reply(ctx, QRS_MSG_ERROR, &m.base);
}

void
draw_reply_error(draw_reply_fn reply, void *ctx, int err, const char *fmt,
                 ...)
{
  va_list ap;

  va_start(ap, fmt);
  draw_vreply_error(reply, ctx, err, fmt, ap);
  va_end(ap);
}

static void
ts_to_wire(const struct ts *t, QrsIpc__Timestamp *w)
{
  qrs_ipc__timestamp__init(w);
  w->realtime_ns = t->realtime_ns;
  w->monotonic_ns = t->monotonic_ns;
}

/* received / generated / sent (now) into r, through w[3]. */
static void
stamp_reply(QrsIpc__DrawReply *r, const struct ts *received,
            const struct ts *generated, QrsIpc__Timestamp w[3])
{
  struct ts now;

  ts_to_wire(received, &w[0]);
  ts_to_wire(generated, &w[1]);
  r->received = &w[0];
  r->generated = &w[1];
  ts_now(&now);
  ts_to_wire(&now, &w[2]);
  r->sent = &w[2];
}

/* With -v: one line per served draw, with the journal fields that tie
   it to its client and its journal entry (DRAW_SEQ). */
static void
log_debug_draw(const struct req *rq, const QrsIpc__DrawReply *r)
{
  if (!log_debug_enabled())
    return;
  log_ev(LOG_LEVEL_DEBUG, &(struct log_fields){ .event = "draw",
                                                .source = r->served_by,
                                                .peer = rq->peer,
                                                .seq = r->journal_seq },
         "%s: draw from '%s'%s, u %.17g, journal seq %llu", rq->peer->name,
         r->served_by, r->fallback ? " (fallback)" : "", r->u,
         (unsigned long long)r->journal_seq);
}

/* Hold r (a copy of it and of what it points to, in rq) until the
   journal has written its entry (r->journal_seq): on_journal_written()
   sends it.  The requests in flight are bounded (limits.max_inflight,
   the memory budget): so are the replies held. */
static void
hold(struct req *rq, const QrsIpc__DrawReply *r)
{
  rq->held = *r;
  str_copy(rq->held_source, sizeof(rq->held_source), r->source);
  rq->held.source = rq->held_source;
  str_copy(rq->held_served_by, sizeof(rq->held_served_by), r->served_by);
  rq->held.served_by = rq->held_served_by;
  if (r->served_type) {
    str_copy(rq->held_type, sizeof(rq->held_type), r->served_type);
    rq->held.served_type = rq->held_type;
  }
  rq->held_ts[0] = *r->received;
  rq->held_ts[1] = *r->generated;
  rq->held_ts[2] = *r->sent;
  rq->held.received = &rq->held_ts[0];
  rq->held.generated = &rq->held_ts[1];
  rq->held.sent = &rq->held_ts[2];
  if (r->meta) {
    /* its strings are in rq->sd, which lives as long as rq */
    rq->held_meta = *r->meta;
    rq->held.meta = &rq->held_meta;
  }
  STAILQ_INSERT_TAIL(&rq->e->held, rq, held_link);
}

/* A held reply's entry was written (lost 0), or was lost to a write
   error: the reply goes out labelled unjournalled (journal.on_error
   label) or an error instead (stop).  rq is freed. */
static void
send_held(struct req *rq, int lost)
{
  if (lost && (rq->study.study ||
               !journal_serves_unjournalled(rq->e->journal))) {
    draw_reply_error(rq->reply, rq->ctx, QRS_E_INTERNAL, "the draw "
                     "journal could not write the draw's entry (write "
                     "error); %s", rq->study.study ? "a study draw is served "
                     "only journalled" : "journal.on_error is stop");
    req_free(rq);
    return;
  }
  if (lost) {
    rq->held.journal_seq = 0;
    rq->held.unjournalled = 1;
  }
  if (rq->study.study)
    study_served(&rq->study);     /* counted once served, journalled */
  log_debug_draw(rq, &rq->held);
  rq->reply(rq->ctx, QRS_MSG_DRAW_REPLY, &rq->held.base);
  req_free(rq);
}

/* The writer thread wrote entries (or lost them): send the replies held
   for them, in order. */
static void
on_journal_written(uv_async_t *h)
{
  struct journal_range lost[JOURNAL_LOST_RANGES];
  struct draw_engine *e = h->data;
  uint64_t written, s;
  struct req *rq;
  unsigned n, i;

  n = journal_progress(e->journal, &written, lost);
  while ((rq = STAILQ_FIRST(&e->held)) != NULL) {
    s = rq->held.journal_seq;
    for (i = 0; i < n && (s < lost[i].first || s > lost[i].last); i++)
      ;
    if (i == n && s > written)
      break;
    STAILQ_REMOVE_HEAD(&e->held, held_link);
    send_held(rq, i < n);
  }
}

void
draw_engine_stop(struct draw_engine *e)
{
  struct req *rq;

  if (!e || !e->written)
    return;
  on_journal_written(e->written);
  /* only replies to connections closed already can be left */
  while ((rq = STAILQ_FIRST(&e->held)) != NULL) {
    STAILQ_REMOVE_HEAD(&e->held, held_link);
    draw_reply_error(rq->reply, rq->ctx, QRS_E_INTERNAL, "qrsd stopped "
                     "before the draw's journal entry was written");
    req_free(rq);
  }
  /* the writer may still write entries (compat requests, the refused
     ones above): it must not wake a handle that is gone */
  journal_detach(e->journal);
  uv_close((uv_handle_t *)e->written, on_written_closed);
  e->written = NULL;
}

/* The draw's journal entry (no I/O: journal_submit() queues it), before
   the reply goes out.  0: send r (unjournalled set, or no journal); 1:
   r is held until its entry is written (hold(): rq is the held list's
   now); -1: an error was sent instead (journal.on_error: stop).  data
   (n bytes) are the bytes amplified; NULL for a server draw, whose entry
   hashes nothing (its bytes stayed upstream: 64 zeros). */
static int
journal_draw(struct req *rq, QrsIpc__DrawReply *r, const uint8_t *data,
             size_t n)
{
  struct journal_entry je;
  int err;

  if (rq->e->journal == NULL) {
    log_debug_draw(rq, r);
    return 0;
  }
  if (rq->e->written == NULL) {
    /* draw_engine_stop() ran: no reply could be held (a read that ended
       after every connection closed) */
    draw_reply_error(rq->reply, rq->ctx, QRS_E_INTERNAL, "qrsd is "
                     "stopping");
    return -1;
  }
  memset(&je, 0, sizeof je);
  je.pid = (int32_t)rq->peer->pid;
  je.uid = (uint32_t)rq->peer->uid;
  str_copy(je.source, sizeof je.source, r->served_by);
  str_copy(je.amp, sizeof je.amp, r->amplifier);
  if (rq->e->jparams.text[0] == '\0' ||
      rq->e->jparams.n != r->sample_count ||
      memcmp(&rq->e->jparams.mean, &r->population_mean, sizeof(double)) ||
      memcmp(&rq->e->jparams.std, &r->population_std, sizeof(double))) {
    rq->e->jparams.n = r->sample_count;
    rq->e->jparams.mean = r->population_mean;
    rq->e->jparams.std = r->population_std;
    snprintf(rq->e->jparams.text, sizeof rq->e->jparams.text,
             "n=%u,mean=%.17g,std=%.17g", r->sample_count,
             r->population_mean, r->population_std);
  }
  if (rq->study.study)
    snprintf(je.amp_params, sizeof je.amp_params, "%s%s",
             rq->e->jparams.text, rq->study.params);
  else
    memcpy(je.amp_params, rq->e->jparams.text, sizeof rq->e->jparams.text);
  je.nonce = r->nonce;
  je.echo_ok = r->echo == QRS_IPC__ECHO__ECHO_VERIFIED;
  je.t_recv = r->received->realtime_ns / 1e9;
  je.t_gen = r->generated->realtime_ns / 1e9;
  je.t_sent = r->sent->realtime_ns / 1e9;
  je.u = r->u;
  if (r->fallback)
    str_copy(je.fallback, sizeof je.fallback, r->served_by);
  err = data ? journal_submit_bytes(rq->e->journal, &je, data, n) :
        journal_submit(rq->e->journal, &je);
  if (err == 0) {
    r->journal_seq = je.seq;
    hold(rq, r);
    return 1;
  }
  /* not journal_may_serve(): by now the writer may have drained the
     queue that refused this draw, and the state be ok again; under the
     policy stop the draw was not journalled and is not served */
  if (journal_serves_unjournalled(rq->e->journal)) {
    r->unjournalled = 1;
    return 0;
  }
  draw_reply_error(rq->reply, rq->ctx, err == -EAGAIN ? QRS_E_BUSY :
                   QRS_E_INTERNAL, "the draw journal cannot take the draw "
                   "(%s); journal.on_error is stop", err == -EAGAIN ?
                   "queue full" : "write error");
  return -1;
}

/* A study draw's reply: labelled by the study and the arm's label only
   (no source, no echo, no fallback: nothing that tells the arms apart).
   1: held, else it (or an error) was sent. */
static int
send_study_reply(struct req *rq, const struct reg_result *res,
                 const struct amp_result *a, const struct amp_params *p)
{
  QrsIpc__DrawReply r = QRS_IPC__DRAW_REPLY__INIT;
  QrsIpc__Timestamp w[3];
  int err;

  r.u = a->u;
  r.z = a->z;
  r.sample_mean = a->sample_mean;
  r.sample_count = rq->amp.sample_count;
  r.source = (char *)study_name(rq->study.study);
  r.served_by = rq->study.served_by;
  r.fallback = 0;
  r.served_type = (char *)"study";
  r.production = study_production(rq->study.study);
  r.amplifier = (char *)amp_name(rq->amp.type);
  r.nonce = rq->nonce;
  r.echo = QRS_IPC__ECHO__ECHO_NONE;
  r.byte_sum = a->byte_sum;
  r.population_mean = p->population_mean;
  r.population_std = p->population_std;
  r.extra_bytes = (uint32_t)(res->n - rq->amp.sample_count);
  stamp_reply(&r, &rq->received, &res->generated, w);
  err = journal_draw(rq, &r, res->data, res->n);
  if (err == 0) {
    /* not journalled: an audit could not check it, so it is never served
       (journal.on_error label aside); it is counted once its entry is
       written (send_held()) */
    draw_reply_error(rq->reply, rq->ctx, QRS_E_BUSY, "the draw journal "
                     "cannot take the draw; a study draw is served only "
                     "journalled");
    return 0;
  }
  return err == 1;
}

/* 1: the reply is held (rq too), else it (or an error) was sent. */
static int
send_draw_reply(struct req *rq, const struct reg_result *res)
{
  QrsIpc__DrawReply r = QRS_IPC__DRAW_REPLY__INIT;
  QrsIpc__Timestamp w[3];
  struct srcamp *asked, *served;
  struct amp_params p;
  struct amp_result a;
  int err;

  if (rq->study.study) {
    /* no calibration (study_draw() refused those amplifiers), and no
       monitor: per-source statistics would tell the arms apart */
    err = amp_state_run(&rq->e->study_amp, &rq->amp, NULL, res->data, &a,
                        &p);
    if (err < 0) {
      draw_reply_error(rq->reply, rq->ctx, err, "the draw could not be "
                       "amplified: %s", qrs_strerror(err));
      return 0;
    }
    return send_study_reply(rq, res, &a, &p);
  }
  /* calibrations belong to the source asked for, the statistics to the
     one that served */
  asked = srcamp_of(rq->e, rq->source);
  if (!asked) {
    /* default_source moved by a reload to a source without amplifier
       state (no room: draw_engine_reconfigure() logged it) */
    draw_reply_error(rq->reply, rq->ctx, QRS_E_INTERNAL, "no amplifier "
                     "state for this source: restart qrsd");
    return 0;
  }
  err = amp_state_run(&asked->st, &rq->amp, rq->table, res->data, &a, &p);
  if (err < 0) {
    /* only if the calibration was dropped from its bounded cache between
       the preparation and the read */
    log_warn("%s: %s draw could not be amplified: %s", rq->peer->name,
             amp_name(rq->amp.type), qrs_strerror(err));
    draw_reply_error(rq->reply, rq->ctx, err, "the %s calibration was "
                     "replaced while the draw was read; try again",
                     amp_name(rq->amp.type));
    return 0;
  }
  served = srcamp_of(rq->e, res->served_by);
  if (served && monitor_add(&served->mon, a.u, a.z))
    log_ev(LOG_LEVEL_WARN, &(struct log_fields){ .event = "monitor-alarm",
                                                 .source = served->name },
           "source '%s': statistics alarm: %s", served->name,
           served->mon.reason);

  r.u = a.u;
  r.z = a.z;
  r.sample_mean = a.sample_mean;
  r.sample_count = rq->amp.sample_count;
  r.source = (char *)res->source;
  r.served_by = (char *)res->served_by;
  r.fallback = res->fallback || rq->forced_fallback;
  r.served_type = (char *)res->served_type;
  r.production = res->production;
  r.amplifier = (char *)amp_name(rq->amp.type);
  r.nonce = rq->nonce;
  r.echo = (QrsIpc__Echo)res->echo;
  r.byte_sum = a.byte_sum;
  r.population_mean = p.population_mean;
  r.population_std = p.population_std;
  r.extra_bytes = (uint32_t)(res->n - rq->amp.sample_count);
  stamp_reply(&r, &rq->received, &res->generated, w);
  err = journal_draw(rq, &r, res->data, res->n);
  if (err == 0)
    rq->reply(rq->ctx, QRS_MSG_DRAW_REPLY, &r.base);
  return err == 1;
}

static void
reply_bytes(struct req *rq, const struct reg_result *res)
{
  QrsIpc__BytesReply r = QRS_IPC__BYTES_REPLY__INIT;

  r.data.data = (uint8_t *)res->data;
  r.data.len = res->n;
  r.source = (char *)res->source;
  r.served_by = (char *)res->served_by;
  r.fallback = res->fallback;
  r.served_type = (char *)res->served_type;
  r.production = res->production;
  rq->reply(rq->ctx, QRS_MSG_BYTES_REPLY, &r.base);
}

/* rq's read failed or timed out (res->status -ETIMEDOUT): log it, limited,
   and answer ENTROPY or TIMEOUT. */
static void
reply_fetch_failed(struct req *rq, const struct reg_result *res)
{
  int timed_out = res->status == -ETIMEDOUT;

  log_limited_ev(&rq->e->fail_rl, LOG_LEVEL_WARN,
                 &(struct log_fields){ .event = timed_out ? "fetch-timeout"
                                                          : "fetch-failed",
                                       .source = res->source,
                                       .peer = rq->peer },
                 "%s: %zu bytes from source '%s' %s: %s", rq->peer->name,
                 res->n, res->source, timed_out ? "timed out" : "failed",
                 res->why);
  if (timed_out)
    draw_reply_error(rq->reply, rq->ctx, QRS_E_TIMEOUT, "source '%s' did "
                     "not deliver %zu bytes within %u ms: %.300s",
                     res->source, res->n, rq->e->conf->request_timeout_ms,
                     res->why);
  else
    draw_reply_error(rq->reply, rq->ctx, QRS_E_ENTROPY, "source '%s' could "
                     "not deliver %zu bytes: %.300s", res->source, res->n,
                     res->why);
}

/* The registry's answer for rq. */
static void
on_fetched(void *ctx, const struct reg_result *res)
{
  struct req *rq;

  rq = ctx;
  if (res->status == 0) {
    if (rq->kind == JOB_DRAW) {
      if (send_draw_reply(rq, res))
        return;                 /* held */
    } else {
      reply_bytes(rq, res);
    }
  } else if (rq->study.study) {
    /* the arm's own reason would name its source */
    log_limited(&rq->e->fail_rl, LOG_LEVEL_WARN, "%s: a draw of study "
                "'%s' failed (arm %c%s)", rq->peer->name,
                study_name(rq->study.study), rq->study.label,
                res->status == -ETIMEDOUT ? ", timed out" : "");
    draw_reply_error(rq->reply, rq->ctx, res->status == -ETIMEDOUT ?
                     QRS_E_TIMEOUT : QRS_E_ENTROPY, "%s: the arm could not "
                     "deliver %zu bytes%s (a study draw never falls back)",
                     rq->study.served_by, res->n, res->status == -ETIMEDOUT ?
                     " in time" : "");
  } else {
    reply_fetch_failed(rq, res);
  }
  req_free(rq);
}

/* Ask the registry for n bytes for rq (which it then owns), by
   deadline. */
static void
fetch(struct req *rq, const char *source, size_t n, int64_t deadline)
{
  struct draw_engine *e;
  draw_reply_fn reply;
  const struct peer *peer;
  void *ctx;
  int r;

  e = rq->e;
  peer = rq->peer;
  reply = rq->reply;
  ctx = rq->ctx;
  if (rq->study.study)
    r = registry_fetch_study(rq->e->reg, rq->owner, rq->study.source, n,
                             rq->study.stream, deadline, on_fetched, rq);
  else
    r = registry_fetch_for(rq->e->reg, rq->owner, source, n, rq->nonce,
                           deadline, on_fetched, rq);
  if (r == 0)
    return;
  req_free(rq);
  if (r == -EBUSY) {
    log_limited(&e->fail_rl, LOG_LEVEL_INFO, "%s: too many bytes of "
                "reads in progress; answering BUSY", peer->name);
    draw_reply_error(reply, ctx, QRS_E_BUSY, "qrsd is busy: too many large "
                     "reads in progress");
  } else if (r == -ENOENT) {
    draw_reply_error(reply, ctx, QRS_E_UNKNOWN_SOURCE, "no source named "
                     "'%.64s' is configured", source);
  } else {
    draw_reply_error(reply, ctx, QRS_E_INTERNAL, "cannot start the read: %s",
                     qrs_strerror(r));
  }
}

/* A new request, or NULL after answering UNKNOWN_SOURCE / out of memory. */
static struct req *
req_new(struct draw_engine *e, enum job_kind kind, const char *source,
        const struct ts *received, const struct peer *peer,
        struct reg_owner *owner, draw_reply_fn reply, void *ctx)
{
  struct req *rq;

  if (kind == JOB_BYTES && studies_find(e->studies, source)) {
    log_info("%s: bytes request for study '%.64s' refused", peer->name,
             source);
    draw_reply_error(reply, ctx, QRS_E_BAD_REQUEST, "'%.64s' is a study: "
                     "it serves draws only", source);
    return NULL;
  }
  if (!registry_has(e->reg, source) && !studies_find(e->studies, source)) {
    log_info("%s: unknown source '%.64s'", peer->name, source);
    draw_reply_error(reply, ctx, QRS_E_UNKNOWN_SOURCE,
                     "no source named '%.64s' is configured", source);
    return NULL;
  }
  rq = calloc(1, sizeof(*rq));
  if (!rq) {
    log_err("%s: out of memory for a request", peer->name);
    draw_reply_error(reply, ctx, -ENOMEM, "out of memory");
    return NULL;
  }
  rq->e = e;
  rq->kind = kind;
  str_copy(rq->source, sizeof(rq->source), source);
  rq->received = *received;
  rq->peer = peer;
  rq->owner = owner;
  rq->reply = reply;
  rq->ctx = ctx;
  return rq;
}

/* ---- preparations: a calibration or the exact table ----------------

   A draw whose calibration is not cached, or whose exact table is not
   built, first waits for a preparation: the calibration blocks are fetched
   through the registry in chunks of at most PREP_CHUNK bytes (their byte
   means summed as they arrive), then the calibration (the ecdf sort
   included) is computed and the exact table built on a worker thread, and
   stored on the loop thread.  Draws that need the same preparation wait
   for the one in progress; all are then served (or refused with its
   error) in the order they came. */

#define PREP_CHUNK (1u << 20)

struct prep {
  struct draw_engine *e;
  struct srcamp *sa;
  struct amp_req amp;
  char source[64];
  uint32_t blocks, done, per;
  double *means;
  int want_table;
  struct amp_calibration cal;
  struct amp_exact_table *table;
  int err;
  char msg[256];
  uv_work_t work;
  STAILQ_HEAD(, req) waiters;
  LIST_ENTRY(prep) link;        /* srcamp.inflight */
};

static int
deadline_from_now(const struct draw_engine *e, int64_t *ret)
{
  struct ts now;

  ts_now(&now);
  *ret = now.monotonic_ns + (int64_t)e->conf->request_timeout_ms * 1000000;
  return 0;
}

static int
same_prep(const struct prep *p, const struct amp_req *a, uint32_t blocks,
          int want_table)
{
  int za, zb;

  if (p->amp.sample_count != a->sample_count || p->blocks != blocks ||
      p->want_table != want_table)
    return 0;
  za = p->amp.type == AMP_ZSCORE_MEAN || p->amp.type == AMP_ZSCORE_THOUGHT;
  zb = a->type == AMP_ZSCORE_MEAN || a->type == AMP_ZSCORE_THOUGHT;
  return za == zb && (za || p->amp.type == a->type);
}

static void prep_next_chunk(struct prep *p);
static void start_draw(struct req *rq);

static void
prep_work(uv_work_t *w)
{
  struct prep *p;
  int r;

  p = w->data;
  if (!p->err && p->blocks)
    p->err = amp_calibration_compute(&p->amp, p->means, p->blocks, &p->cal,
                                      p->msg, sizeof(p->msg));
  if (!p->err && p->want_table) {
    r = amp_exact_get(p->amp.sample_count, &p->table);
    if (r < 0) {
      p->err = r;
      snprintf(p->msg, sizeof(p->msg), "cannot build the exact "
               "amplifier's table for sample_count %u: %s",
               p->amp.sample_count, qrs_strerror(r));
    }
  }
}

static void
prep_after(uv_work_t *w, int status)
{
  struct prep *p;
  struct req *rq, *next;

  p = w->data;
  LIST_REMOVE(p, link);
  if (status < 0 && !p->err) {
    p->err = QRS_E_INTERNAL;
    snprintf(p->msg, sizeof(p->msg), "the preparation was cancelled");
  }
  if (!p->err && p->blocks) {
    amp_calibration_store(&p->sa->st, &p->amp, &p->cal);
    log_info("source '%s': %s calibrated from %u blocks of %u bytes",
             p->sa->name, amp_name(p->amp.type), p->blocks,
             p->amp.sample_count);
  } else if (p->err) {
    log_warn("source '%s': %s preparation failed: %s", p->sa->name,
             amp_name(p->amp.type), p->msg);
  }
  amp_calibration_free(&p->cal);
  for (rq = STAILQ_FIRST(&p->waiters); rq; rq = next) {
    next = STAILQ_NEXT(rq, prep_link);
    if (p->err) {
      draw_reply_error(rq->reply, rq->ctx, p->err, "%s", p->msg);
      req_free(rq);
      continue;
    }
    if (p->table && !rq->table) {
      rq->table = p->table;             /* the first one takes the ref */
      p->table = NULL;
    }
    start_draw(rq);
  }
  amp_exact_release(p->table);
  free(p->means);
  free(p);
}

/* Every block is in (or the fetch failed): compute on a worker. */
static void
prep_compute(struct prep *p)
{
  int r;

  p->work.data = p;
  r = uv_queue_work(p->e->loop, &p->work, prep_work, prep_after);
  if (r < 0) {
    p->err = QRS_E_INTERNAL;
    snprintf(p->msg, sizeof(p->msg), "cannot queue the preparation: %s",
             uv_strerror(r));
    prep_after(&p->work, 0);
  }
}

static void
on_chunk(void *ctx, const struct reg_result *res)
{
  struct prep *p;
  uint32_t i, k;
  size_t n;

  p = ctx;
  n = p->amp.sample_count;
  if (res->status < 0) {
    p->err = res->status == -ETIMEDOUT ? QRS_E_TIMEOUT : QRS_E_ENTROPY;
    snprintf(p->msg, sizeof(p->msg), "the %s calibration could not read "
             "source '%s': %.160s", amp_name(p->amp.type), res->source,
             res->why);
    prep_compute(p);
    return;
  }
  k = (uint32_t)(res->n / n);
  for (i = 0; i < k; i++)
    p->means[p->done + i] = (double)amp_byte_sum(res->data + (size_t)i * n,
                                                 n) / (double)n;
  p->done += k;
  if (p->done < p->blocks)
    prep_next_chunk(p);
  else
    prep_compute(p);
}

static void
prep_next_chunk(struct prep *p)
{
  int64_t deadline;
  uint32_t k;
  int r;

  k = p->blocks - p->done < p->per ? p->blocks - p->done : p->per;
  deadline_from_now(p->e, &deadline);
  r = registry_fetch(p->e->reg, p->source, (size_t)k * p->amp.sample_count,
                     0, deadline, on_chunk, p);
  if (r < 0) {
    p->err = r == -EBUSY ? QRS_E_BUSY : QRS_E_INTERNAL;
    snprintf(p->msg, sizeof(p->msg), "the %s calibration could not start "
             "a read: %s", amp_name(p->amp.type), r == -EBUSY ?
             "too many large reads in progress" : qrs_strerror(r));
    prep_compute(p);
  }
}

/* Queue rq behind the preparation it needs. */
static void
prep_join(struct req *rq, struct srcamp *sa, uint32_t blocks, int want_table)
{
  struct draw_engine *e;
  struct prep *p;

  e = rq->e;
  LIST_FOREACH(p, &sa->inflight, link)
    if (same_prep(p, &rq->amp, blocks, want_table))
      break;
  if (!p) {
    p = calloc(1, sizeof(*p));
    if (p && blocks)
      p->means = malloc((size_t)blocks * sizeof(double));
    if (!p || (blocks && !p->means)) {
      free(p);
      log_err("%s: out of memory for a calibration", rq->peer->name);
      draw_reply_error(rq->reply, rq->ctx, -ENOMEM, "out of memory");
      req_free(rq);
      return;
    }
    p->e = e;
    p->sa = sa;
    p->amp = rq->amp;
    snprintf(p->source, sizeof(p->source), "%s", rq->source);
    p->blocks = blocks;
    p->per = rq->amp.sample_count >= PREP_CHUNK ? 1 :
             (uint32_t)(PREP_CHUNK / rq->amp.sample_count);
    p->want_table = want_table;
    STAILQ_INIT(&p->waiters);
    LIST_INSERT_HEAD(&sa->inflight, p, link);
    /* Before anything can complete. */
    STAILQ_INSERT_TAIL(&p->waiters, rq, prep_link);
    if (blocks) {
      log_info("%s: calibrating %s on source '%s' (%u blocks of %u bytes)",
               rq->peer->name, amp_name(rq->amp.type), sa->name, blocks,
               rq->amp.sample_count);
      prep_next_chunk(p);
    } else {
      prep_compute(p);
    }
    return;
  }
  STAILQ_INSERT_TAIL(&p->waiters, rq, prep_link);
}

/* Prepare (if needed) and fetch the draw's bytes. */
static void
start_draw(struct req *rq)
{
  struct srcamp *sa;
  int64_t deadline;
  uint32_t blocks;
  int want_table;

  sa = srcamp_of(rq->e, rq->source);
  if (!sa) {
    /* A source a reload added when the engine had no room left for its
       amplifier state (draw_engine_reconfigure() logged it). */
    void *ctx = rq->ctx;
    draw_reply_fn reply = rq->reply;

    req_free(rq);
    draw_reply_error(reply, ctx, QRS_E_INTERNAL, "no amplifier state for "
                     "this source: restart qrsd");
    return;
  }
  blocks = amp_state_missing(&sa->st, &rq->amp);
  want_table = rq->amp.type == AMP_EXACT && !rq->table &&
               amp_exact_try_get(rq->amp.sample_count, &rq->table) < 0;
  if (blocks || want_table) {
    prep_join(rq, sa, blocks, want_table);
    return;
  }
  /* the request's own deadline, or a fresh one after a preparation */
  deadline = rq->received.monotonic_ns +
             (int64_t)rq->e->conf->request_timeout_ms * 1000000;
  if (rq->table || rq->amp.zcal || rq->amp.type == AMP_ECDF) {
    int64_t fresh;

    deadline_from_now(rq->e, &fresh);
    if (fresh > deadline)
      deadline = fresh;
  }
  fetch(rq, rq->source, ampreq_read_bytes(&rq->amp), deadline);
}

/* A server draw's answer: the upstream's u and metadata, or on failure
   sample_count bytes amplified here with zscore_mean, labelled as a
   fallback: a failed upstream costs the draw its label, never the draw
   (as the reference's FallbackEntropySource, third_party/qr-sampler/
   src/qr_sampler/entropy/fallback.py). */
static void
on_server_draw(struct source_draw *d)
{
  struct req *rq = CONTAINER_OF(d, struct req, sd);
  QrsIpc__DrawReply r = QRS_IPC__DRAW_REPLY__INIT;
  QrsIpc__DrawMeta meta = QRS_IPC__DRAW_META__INIT;
  QrsIpc__Timestamp w[3];
  const char *type;
  int production;

  if (d->status < 0) {
    log_limited(&rq->e->fail_rl, LOG_LEVEL_WARN, "%s: server draw from "
                "source '%s' failed (%s); amplifying %u bytes locally",
                rq->peer->name, rq->source, d->why, rq->amp.sample_count);
    rq->amp.type = AMP_ZSCORE_MEAN;
    rq->forced_fallback = 1;
    start_draw(rq);
    return;
  }
  if (registry_type(rq->e->reg, rq->source, &type, &production) == 0) {
    r.served_type = (char *)type;
    r.production = production;
  }
  r.u = d->u;
  r.z = d->z;
  r.sample_mean = 0;
  r.sample_count = d->integrated_bytes;
  r.source = rq->source;
  r.served_by = rq->source;
  r.fallback = 0;
  r.amplifier = (char *)amp_name(AMP_SERVER);
  r.nonce = rq->nonce;
  r.echo = (QrsIpc__Echo)d->echo;
  meta.z = d->z;
  meta.coherence_z = d->coherence_z;
  meta.coherence_valid = d->coherence_valid;
  meta.coherence_r = d->coherence_r;
  meta.purity_label = d->purity_label;
  meta.integrated_bytes = d->integrated_bytes;
  meta.integrator = d->integrator;
  meta.source_id = d->served_source_id;
  meta.generation_timestamp_ns = d->generation_timestamp_ns;
  r.meta = &meta;
  stamp_reply(&r, &rq->received, &d->generated, w);
  switch (journal_draw(rq, &r, NULL, 0)) {
  case 1:
    return;                     /* held */
  case 0:
    rq->reply(rq->ctx, QRS_MSG_DRAW_REPLY, &r.base);
    break;
  }
  req_free(rq);
}

static void
server_draw(struct req *rq, const QrsIpc__Draw *m)
{
  int r;

  if (!rq->source[0])
    str_copy(rq->source, sizeof(rq->source), registry_default(rq->e->reg));
  str_copy(rq->sd.source_id, sizeof(rq->sd.source_id), m->draw_source_id);
  rq->sd.nonce = rq->nonce;
  rq->sd.block_bytes = m->draw_block_bytes;
  rq->sd.deadline_ns = rq->received.monotonic_ns +
                       (int64_t)rq->e->conf->request_timeout_ms * 1000000;
  rq->sd.done = on_server_draw;
  r = registry_draw(rq->e->reg, rq->source, &rq->sd);
  if (r == 0)
    return;
  /* Not started (no PurityService here, breaker open, over quota): the
     local fallback at once. */
  if (!rq->sd.why[0])
    snprintf(rq->sd.why, sizeof(rq->sd.why), "%s", r == -ENOSYS ?
             "the source cannot make server draws" : qrs_strerror(r));
  rq->sd.status = r;
  on_server_draw(&rq->sd);
}

/* A draw of study t (rq resolved): its unit assigned, the arm's bytes
   fetched.  0 (rq is the fetch's), or -1 after answering an error (the
   caller frees rq). */
static int
study_draw(struct req *rq, struct study *t, const QrsIpc__Draw *m)
{
  char msg[256];
  int r;

  if (rq->amp.type != AMP_ZSCORE_MEAN && rq->amp.type != AMP_ZSCORE_THOUGHT)
    r = QRS_E_AMP_PARAMS;
  else if (rq->amp.zcal)
    r = QRS_E_AMP_PARAMS;
  else
    r = 0;
  if (r) {
    log_info("%s: draw of study '%s' refused: amplifier %s%s",
             rq->peer->name, study_name(t), amp_name(rq->amp.type),
             rq->amp.zcal ? " with a calibration" : "");
    draw_reply_error(rq->reply, rq->ctx, r, "a study draw takes amplifier "
                     "zscore_mean or zscore_thought without a calibration "
                     "(the arms must be amplified alike): %s%s refused",
                     amp_name(rq->amp.type),
                     rq->amp.zcal ? " with a calibration" : "");
    return -1;
  }
  r = study_begin(t, m->unit, &rq->study, msg, sizeof(msg));
  if (r < 0) {
    log_info("%s: draw refused: %s", rq->peer->name, msg);
    draw_reply_error(rq->reply, rq->ctx, r, "%s", msg);
    return -1;
  }
  fetch(rq, rq->source, ampreq_read_bytes(&rq->amp),
        rq->received.monotonic_ns +
        (int64_t)rq->e->conf->request_timeout_ms * 1000000);
  return 0;
}

void
draw_handle(struct draw_engine *e, const QrsIpc__Draw *m,
            const struct ts *received, const struct peer *peer,
            struct reg_owner *owner, draw_reply_fn reply, void *ctx)
{
  const QrsIpc__Commitment *cm;
  struct study *t;
  struct req *rq;
  char msg[256];
  int r;

  rq = req_new(e, JOB_DRAW, m->source, received, peer, owner, reply, ctx);
  if (!rq)
    return;

  if (m->sample_count == 0 || m->sample_count > e->conf->max_sample_count) {
    log_info("%s: draw with sample_count %u refused (limit 1..%u)", peer->name,
             m->sample_count, e->conf->max_sample_count);
    draw_reply_error(reply, ctx, QRS_E_SAMPLE_COUNT,
                     "sample_count %u is outside 1..%u", m->sample_count,
                     e->conf->max_sample_count);
    goto refused;
  }

  r = ampreq_resolve(e->conf, m, m->sample_count, &rq->amp, msg,
                     sizeof(msg));
  if (r < 0) {
    log_info("%s: draw refused: %s", peer->name, msg);
    draw_reply_error(reply, ctx, r, "%s", msg);
    goto refused;
  }

  cm = m->commitment;
  if (cm) {
    if (cm->salt.len > NONCE_MAX_SALT) {
      log_info("%s: commitment salt of %zu bytes refused", peer->name,
               cm->salt.len);
      draw_reply_error(reply, ctx, QRS_E_BAD_REQUEST,
                       "commitment salt of %zu bytes exceeds %d",
                       cm->salt.len, NONCE_MAX_SALT);
      goto refused;
    }
    rq->nonce = nonce_derive(cm->salt.data, cm->salt.len, cm->step,
                             cm->prev_token_id);
  }
  t = studies_find(e->studies, m->source);
  if (t) {
    if (study_draw(rq, t, m) < 0)
      goto refused;
    return;
  }
  if (rq->amp.type == AMP_SERVER) {
    server_draw(rq, m);
    return;
  }
  start_draw(rq);
  return;

refused:
  req_free(rq);
}

void
bytes_handle(struct draw_engine *e, const QrsIpc__Bytes *m,
             const struct ts *received, const struct peer *peer,
             struct reg_owner *owner, draw_reply_fn reply, void *ctx)
{
  struct req *rq;

  rq = req_new(e, JOB_BYTES, m->source, received, peer, owner, reply, ctx);
  if (!rq)
    return;
  if (m->count == 0 || m->count > e->max_bytes_per_request) {
    log_info("%s: bytes request for %u bytes refused (limit 1..%u)",
             peer->name, m->count, e->max_bytes_per_request);
    draw_reply_error(reply, ctx, m->count ? QRS_E_TOO_LARGE
                                          : QRS_E_BAD_REQUEST,
                     "count %u is outside 1..%u", m->count,
                     e->max_bytes_per_request);
    req_free(rq);
    return;
  }
  fetch(rq, m->source, m->count, received->monotonic_ns +
        (int64_t)e->conf->request_timeout_ms * 1000000);
}
