/* qrs._qrs.Client: one connection to qrsd (qrs_client), its draws,
   status, health and HELLO reply. */
#include "_qrs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct qpy_conn *
qpy_conn_ref(struct qpy_conn *conn)
{
  conn->refs++;
  return conn;
}

void
qpy_conn_unref(struct qpy_conn *conn)
{
  if (!conn || --conn->refs > 0)
    return;
  qrs_client_free(conn->c);
  PyMem_Free(conn);
}

struct qpy_conn *
qpy_client_conn(ClientObject *self)
{
  if (!self->conn) {
    PyErr_SetString(PyExc_ValueError, "the client is closed");
    return NULL;
  }
  return qpy_conn_ref(self->conn);
}

/* Make conn (NULL: none) the client's connection; the one it replaces
   closes once nothing else holds it. */
static void
client_set_conn(ClientObject *self, struct qpy_conn *conn)
{
  struct qpy_conn *old = self->conn;

  self->conn = conn;
  qpy_conn_unref(old);
}

/* A new connection.  On an open client it replaces the old one once
   connected, which then closes as close() closes it (calls in flight on
   it finish); a failed reconnect leaves the client as it was. */
static int
client_init(ClientObject *self, PyObject *args, PyObject *kw)
{
  static char *kwl[] = { "path", "timeout_ms", "client_name",
                         "no_reconnect", NULL };
  const char *path = NULL, *name = "qrs-python";
  struct qrs_client_options o;
  struct qrs_client *c = NULL;
  struct qpy_conn *conn;
  int timeout = 0, norec = 0, r;

  if (!PyArg_ParseTupleAndKeywords(args, kw, "|zizp", kwl, &path, &timeout,
                                   &name, &norec))
    return -1;
  memset(&o, 0, sizeof(o));
  o.client_name = name;
  o.timeout_ms = timeout;
  o.no_reconnect = norec;
  Py_BEGIN_ALLOW_THREADS
  r = qrs_client_new(path, &o, &c);
  Py_END_ALLOW_THREADS
  if (r < 0) {
    char msg[256];
    snprintf(msg, sizeof(msg), "connecting to qrsd at %s",
             path ? path : (getenv("QRS_SOCKET") ? getenv("QRS_SOCKET")
                                                 : QRS_DEFAULT_SOCKET));
    qpy_set_error(r, msg);
    return -1;
  }
  conn = PyMem_Malloc(sizeof(*conn));
  if (!conn) {
    qrs_client_free(c);
    PyErr_NoMemory();
    return -1;
  }
  conn->c = c;
  conn->refs = 1;
  client_set_conn(self, conn);
  return 0;
}

static void
client_dealloc(ClientObject *self)
{
  qpy_conn_unref(self->conn);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
client_close(ClientObject *self, PyObject *unused)
{
  (void)unused;
  client_set_conn(self, NULL);
  Py_RETURN_NONE;
}

/* ns, or None for 0 (not known), as the records write them. */
static PyObject *
ns_or_none(int64_t ns)
{
  if (!ns)
    Py_RETURN_NONE;
  return PyLong_FromLongLong((long long)ns);
}

/* A draw as a dict: what qrsd answered, with the labels the records
   carry (echo, journal_seq, unjournalled, the draw's three times). */
static PyObject *
draw_dict(const struct qrs_draw *d)
{
  static const char *const echo[] = { "none", "verified", "mismatch" };
  PyObject *o;

  o = Py_BuildValue(
      "{s:d,s:d,s:d,s:I,s:s,s:s,s:s,s:O,s:K,s:K,s:s,s:O,s:s,s:O,s:N,s:N,"
      "s:N}",
      "u", d->u, "z", d->z, "sample_mean", d->sample_mean,
      "sample_count", d->sample_count, "source", d->source,
      "served_by", d->served_by, "amplifier", d->amplifier,
      "fallback", d->fallback ? Py_True : Py_False,
      "nonce", (unsigned long long)d->nonce,
      "byte_sum", (unsigned long long)d->byte_sum,
      "served_type", d->served_type,
      "production", d->production ? Py_True : Py_False,
      "echo", (unsigned)d->echo < 3 ? echo[d->echo] : "none",
      "unjournalled", d->unjournalled ? Py_True : Py_False,
      "received_ns", ns_or_none(d->received.realtime_ns),
      "generated_ns", ns_or_none(d->generated.realtime_ns),
      "sent_ns", ns_or_none(d->sent.realtime_ns));
  if (!o)
    return NULL;
  if (d->journal_seq) {
    PyObject *v = PyLong_FromUnsignedLongLong(d->journal_seq);

    if (!v || PyDict_SetItemString(o, "journal_seq", v) < 0) {
      Py_XDECREF(v);
      Py_DECREF(o);
      return NULL;
    }
    Py_DECREF(v);
  } else if (PyDict_SetItemString(o, "journal_seq", Py_None) < 0) {
    Py_DECREF(o);
    return NULL;
  }
  return o;
}

static PyObject *
client_draw(ClientObject *self, PyObject *args, PyObject *kw)
{
  static char *kwl[] = { "source", "amplifier", "sample_count", "salt",
                         "step", "prev_token", "unit", NULL };
  const char *source = NULL, *amp = NULL, *unit = NULL;
  unsigned int count = 0;
  Py_buffer salt = { 0 };
  unsigned long long step = 0;
  long long prev = -1;
  struct qrs_draw_request rq;
  struct qrs_commitment cm;
  struct qrs_draw d;
  struct qpy_conn *conn;
  PyObject *res;
  int r;

  if (!PyArg_ParseTupleAndKeywords(args, kw, "|zzIy*KLz", kwl, &source,
                                   &amp, &count, &salt, &step, &prev, &unit))
    return NULL;
  conn = qpy_client_conn(self);
  if (!conn) {
    PyBuffer_Release(&salt);
    return NULL;
  }
  memset(&rq, 0, sizeof(rq));
  rq.source = source;
  rq.amplifier = amp;
  rq.sample_count = count;
  rq.unit = unit;
  if (salt.buf) {
    cm.salt = salt.buf;
    cm.salt_len = (size_t)salt.len;
    cm.step = step;
    cm.prev_token_id = prev;
    rq.commitment = &cm;
  }
  Py_BEGIN_ALLOW_THREADS
  r = qrs_client_draw(conn->c, &rq, &d);
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&salt);
  res = r < 0 ? qpy_set_error(r, qrs_client_errmsg(conn->c)) : draw_dict(&d);
  qpy_conn_unref(conn);
  return res;
}

static PyObject *
source_list(const struct qrs_source_info *s, size_t n)
{
  PyObject *l, *o;
  size_t i;

  l = PyList_New((Py_ssize_t)n);
  if (!l)
    return NULL;
  for (i = 0; i < n; i++) {
    o = Py_BuildValue("{s:s,s:s,s:s,s:O,s:O,s:O,s:K,s:K,s:K,s:s,s:s}",
                      "name", s[i].name, "type", s[i].type,
                      "fallback", s[i].fallback,
                      "healthy", s[i].healthy ? Py_True : Py_False,
                      "is_default", s[i].is_default ? Py_True : Py_False,
                      "production", s[i].production ? Py_True : Py_False,
                      "draws", (unsigned long long)s[i].draws,
                      "bytes", (unsigned long long)s[i].bytes,
                      "failures", (unsigned long long)s[i].failures,
                      "state", s[i].state, "detail", s[i].detail);
    if (!o) {
      Py_DECREF(l);
      return NULL;
    }
    PyList_SET_ITEM(l, (Py_ssize_t)i, o);
  }
  return l;
}

/* The studies of a status reply, by label only (as qrsd reports them). */
static PyObject *
study_list(const struct qrs_study_info *s, size_t n)
{
  PyObject *l, *o, *labels, *lb;
  size_t i, k;

  l = PyList_New((Py_ssize_t)n);
  if (!l)
    return NULL;
  for (i = 0; i < n; i++) {
    labels = PyList_New((Py_ssize_t)s[i].n_labels);
    if (!labels) {
      Py_DECREF(l);
      return NULL;
    }
    for (k = 0; k < s[i].n_labels; k++) {
      lb = Py_BuildValue("{s:s,s:K,s:K}", "label", s[i].labels[k].label,
                         "draws", (unsigned long long)s[i].labels[k].draws,
                         "units", (unsigned long long)s[i].labels[k].units);
      if (!lb) {
        Py_DECREF(labels);
        Py_DECREF(l);
        return NULL;
      }
      PyList_SET_ITEM(labels, (Py_ssize_t)k, lb);
    }
    o = Py_BuildValue("{s:s,s:s,s:K,s:s,s:d,s:s,s:K,s:s,s:N}", "name",
                      s[i].name, "unit", s[i].unit, "planned_units",
                      (unsigned long long)s[i].planned_units, "statistic",
                      s[i].statistic, "alpha", s[i].alpha, "epoch",
                      s[i].epoch, "units_seen",
                      (unsigned long long)s[i].units_seen, "state",
                      s[i].state, "labels", labels);
    if (!o) {
      Py_DECREF(l);
      return NULL;
    }
    PyList_SET_ITEM(l, (Py_ssize_t)i, o);
  }
  return l;
}

/* Run fetch(c, ret) on the client's connection without the GIL (fetch
   stores a reply that the caller frees in *ret).  Returns 0, or -1 with
   the Python error set. */
static int
client_fetch(ClientObject *self, int (*fetch)(struct qrs_client *, void *),
             void *ret)
{
  struct qpy_conn *conn;
  int r;

  conn = qpy_client_conn(self);
  if (!conn)
    return -1;
  Py_BEGIN_ALLOW_THREADS
  r = fetch(conn->c, ret);
  Py_END_ALLOW_THREADS
  if (r < 0)
    qpy_set_error(r, qrs_client_errmsg(conn->c));
  qpy_conn_unref(conn);
  return r < 0 ? -1 : 0;
}

static int
fetch_status(struct qrs_client *c, void *ret)
{
  return qrs_client_status(c, ret);
}

static int
fetch_health(struct qrs_client *c, void *ret)
{
  return qrs_client_health(c, ret);
}

static PyObject *
client_status(ClientObject *self, PyObject *unused)
{
  struct qrs_status *st;
  PyObject *src, *stu = NULL, *res;

  (void)unused;
  if (client_fetch(self, fetch_status, &st) < 0)
    return NULL;
  src = source_list(st->sources, st->n_sources);
  if (src) {
    stu = study_list(st->studies, st->n_studies);
    if (!stu)
      Py_CLEAR(src);
  }
  res = src ? Py_BuildValue(
                  "{s:s,s:I,s:I,s:K,s:s,s:s,s:I,s:K,s:K,s:K,s:K,s:N,s:N}",
                  "server_version", st->server_version,
                  "protocol_version", st->protocol_version, "pid", st->pid,
                  "uptime_ms", (unsigned long long)st->uptime_ms,
                  "socket_path", st->socket_path,
                  "default_source", st->default_source,
                  "connections", st->connections,
                  "requests", (unsigned long long)st->requests,
                  "draws", (unsigned long long)st->draws,
                  "bytes", (unsigned long long)st->bytes,
                  "errors", (unsigned long long)st->errors, "sources", src,
                  "studies", stu)
            : NULL;
  qrs_status_free(st);
  return res;
}

static PyObject *
client_health(ClientObject *self, PyObject *unused)
{
  struct qrs_health *h;
  PyObject *src, *res;

  (void)unused;
  if (client_fetch(self, fetch_health, &h) < 0)
    return NULL;
  src = source_list(h->sources, h->n_sources);
  res = src ? Py_BuildValue("{s:s,s:s,s:N}",
                            "state", qrs_health_state_name(h->state),
                            "message", h->message, "sources", src)
            : NULL;
  qrs_health_free(h);
  return res;
}

static PyObject *
client_server_info(ClientObject *self, PyObject *unused)
{
  struct qrs_server_info si;
  struct qpy_conn *conn;
  PyObject *res;

  (void)unused;
  conn = qpy_client_conn(self);
  if (!conn)
    return NULL;
  qrs_client_get_server_info(conn->c, &si);
  res = Py_BuildValue("{s:I,s:s,s:s,s:s,s:O,s:O,s:s,s:I,s:I,s:I}",
                      "protocol_version", si.protocol_version,
                      "server_version", si.server_version,
                      "default_source", si.default_source,
                      "default_source_type", si.default_source_type,
                      "default_production",
                      si.default_production ? Py_True : Py_False,
                      "test_sources_allowed",
                      si.test_sources_allowed ? Py_True : Py_False,
                      "features", si.features,
                      "max_inflight", si.max_inflight,
                      "default_sample_count", si.default_sample_count,
                      "max_sample_count", si.max_sample_count);
  qpy_conn_unref(conn);
  return res;
}

static PyObject *
client_socket_path(ClientObject *self, void *unused)
{
  struct qpy_conn *conn;
  PyObject *res;

  (void)unused;
  conn = qpy_client_conn(self);
  if (!conn)
    return NULL;
  res = PyUnicode_FromString(qrs_client_socket_path(conn->c));
  qpy_conn_unref(conn);
  return res;
}

static PyMethodDef client_methods[] = {
  { "draw", (PyCFunction)(void (*)(void))client_draw,
    METH_VARARGS | METH_KEYWORDS,
    "draw(source=None, amplifier=None, sample_count=0, salt=None, step=0, "
    "prev_token=-1, unit=None) -> dict: one amplified draw (unit: a "
    "study's unit tag)" },
  { "status", (PyCFunction)client_status, METH_NOARGS,
    "status() -> dict: qrsd's status (its sources; its studies by "
    "label only)" },
  { "health", (PyCFunction)client_health, METH_NOARGS,
    "health() -> dict: qrsd's health" },
  { "server_info", (PyCFunction)client_server_info, METH_NOARGS,
    "server_info() -> dict: the HELLO reply" },
  { "close", (PyCFunction)client_close, METH_NOARGS,
    "close the connection: later calls raise ValueError; calls in flight "
    "on other threads finish first" },
  { NULL, NULL, 0, NULL },
};

static PyGetSetDef client_getset[] = {
  { "socket_path", (getter)client_socket_path, NULL, "the socket path", NULL },
  { NULL, NULL, NULL, NULL, NULL },
};

PyTypeObject qpy_client_type = {
  PyVarObject_HEAD_INIT(NULL, 0)
  .tp_name = "qrs._qrs.Client",
  .tp_basicsize = sizeof(ClientObject),
  .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
  .tp_doc = "Client(path=None, timeout_ms=0, client_name='qrs-python', "
            "no_reconnect=False): one connection to qrsd",
  .tp_new = PyType_GenericNew,
  .tp_init = (initproc)client_init,
  .tp_dealloc = (destructor)client_dealloc,
  .tp_methods = client_methods,
  .tp_getset = client_getset,
};

