/* qrs._qrs.Sampler: one request's sampling state (qrs_sampler), stepped
   on one row of logits at a time. */
#include "_qrs.h"

#include <stdio.h>

/* Forget the prefetch (on its connection, still open) and let the
   connection go; one its Client closed is freed with its last holder. */
static void
sampler_release_conn(SamplerObject *self)
{
  struct qpy_conn *conn = self->prefetch_conn;

  if (!conn)
    return;
  qrs_sampler_cancel_prefetch(self->s);
  self->prefetch_conn = NULL;
  qpy_conn_unref(conn);
}

void
qpy_sampler_hold_conn(SamplerObject *self, struct qpy_conn *conn)
{
  if (self->prefetch_conn == conn)
    return;
  sampler_release_conn(self);
  self->prefetch_conn = qpy_conn_ref(conn);
}

static int
sampler_init(SamplerObject *self, PyObject *args, PyObject *kw)
{
  static char *kwl[] = { "config", "vocab_size", NULL };
  PyObject *cfg = Py_None;
  Py_ssize_t vocab;
  int r;

  if (!PyArg_ParseTupleAndKeywords(args, kw, "On", kwl, &cfg, &vocab))
    return -1;
  if (cfg != Py_None && !PyObject_TypeCheck(cfg, &qpy_config_type)) {
    PyErr_SetString(PyExc_TypeError, "config must be a qrs.Config or None");
    return -1;
  }
  if (vocab <= 0) {
    PyErr_SetString(PyExc_ValueError, "vocab_size must be positive");
    return -1;
  }
  sampler_release_conn(self);
  qrs_sampler_free(self->s);
  self->s = NULL;
  r = qrs_sampler_new(cfg == Py_None ? NULL : ((ConfigObject *)cfg)->cfg,
                      (size_t)vocab, &self->s);
  if (r < 0) {
    qpy_set_error(r, cfg == Py_None
                     ? NULL
                     : qrs_sampler_config_error(((ConfigObject *)cfg)->cfg));
    return -1;
  }
  self->vocab = (size_t)vocab;
  return 0;
}

static void
sampler_dealloc(SamplerObject *self)
{
  /* the prefetch is cancelled on its connection, which must be open */
  sampler_release_conn(self);
  qrs_sampler_free(self->s);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

PyObject *
qpy_record_dict(const struct qrs_token_record *r)
{
  PyObject *d;

#define NUM(v) PyFloat_FromDouble(v)
  d = Py_BuildValue(
      "{s:I,s:I,s:d,s:I,s:d,s:d,s:d,s:N,s:s,s:s,s:O,s:s,s:d,s:d,s:d,s:K,"
      "s:K,s:s,s:O,s:d,s:d,s:d,s:O}",
      "token_id", r->token_id, "token_rank", r->token_rank,
      "token_prob", r->token_prob, "num_candidates", r->num_candidates,
      "u_value", r->u_value, "z_score", r->z_score,
      "temperature_used", r->temperature_used,
      "shannon_entropy", NUM(r->shannon_entropy),
      "temperature_strategy", r->temperature_strategy,
      "entropy_source_used", r->entropy_source_used,
      "entropy_is_fallback", r->entropy_is_fallback ? Py_True : Py_False,
      "config_hash", r->config_hash,
      "entropy_fetch_ms", r->entropy_fetch_ms,
      "total_sampling_ms", r->total_sampling_ms,
      "select_ms", r->select_ms,
      "entropy_nonce", (unsigned long long)r->entropy_nonce,
      "step", (unsigned long long)r->step,
      "entropy_source_type", r->entropy_source_type,
      "entropy_production", r->entropy_production ? Py_True : Py_False,
      "cdf_lo", r->cdf_lo, "cdf_hi", r->cdf_hi,
      "min_p_used", r->min_p_used,
      "greedy", r->greedy ? Py_True : Py_False);
#undef NUM
  if (d && r->device_selection != QRS_DEVICE_SELECTION_NONE) {
    PyObject *v = PyUnicode_FromString(
        r->device_selection == QRS_DEVICE_SELECTION_CERTIFIED
            ? "certified" : "uncertified");
    if (!v || PyDict_SetItemString(d, "device_selection", v) < 0) {
      Py_XDECREF(v);
      Py_DECREF(d);
      return NULL;
    }
    Py_DECREF(v);
  }
  if (d && r->entropy_prefetch_hit >= 0) {
    if (PyDict_SetItemString(d, "entropy_prefetch_hit",
                             r->entropy_prefetch_hit ? Py_True
                                                     : Py_False) < 0) {
      Py_DECREF(d);
      return NULL;
    }
  }
  return d;
}

/* A record as the JSON line libqrs's log writes (level 2: every field),
   without its newline; NULL with the error set. */
static PyObject *
record_json(const struct qrs_token_record *rec)
{
  PyObject *o = NULL;
  char *buf = NULL;
  size_t len = 0;
  FILE *f;
  int r;

  f = open_memstream(&buf, &len);
  if (!f)
    return PyErr_NoMemory();
  r = qrs_token_record_write(rec, 2, f);
  if (fclose(f) != 0 && r == 0)
    r = -ENOMEM;
  if (r < 0)
    qpy_set_error(r, "writing a record");
  else
    o = PyUnicode_FromStringAndSize(buf, len && buf[len - 1] == '\n'
                                             ? (Py_ssize_t)len - 1
                                             : (Py_ssize_t)len);
  free(buf);
  return o;
}

int
qpy_want_records(PyObject *obj)
{
  if (!obj || obj == Py_None)
    return 0;
  if (PyUnicode_Check(obj)) {
    if (PyUnicode_CompareWithASCIIString(obj, "json") != 0) {
      PyErr_SetString(PyExc_ValueError, "records must be a bool or 'json'");
      return -1;
    }
    return 2;
  }
  return PyObject_IsTrue(obj);
}

PyObject *
qpy_record_out(const struct qrs_token_record *rec, int want)
{
  return want == 2 ? record_json(rec) : qpy_record_dict(rec);
}

static int
check_vocab(SamplerObject *self, size_t n)
{
  if (n > self->vocab) {
    PyErr_Format(PyExc_ValueError,
                 "row of %zu logits is longer than the sampler's vocabulary "
                 "(%zu); call reserve() for padded rows", n, self->vocab);
    return -1;
  }
  if (n == 0) {
    PyErr_SetString(PyExc_ValueError, "empty logits row");
    return -1;
  }
  return 0;
}

/* obj's one row, for this sampler's step: 0, or -1 with the error set
   and nothing held. */
static int
sampler_row(SamplerObject *self, PyObject *obj, const char *dtype_hint,
            struct rows *rw)
{
  if (qpy_rows_get(obj, dtype_hint, 0, rw) < 0 ||
      check_vocab(self, rw->ncols) < 0) {
    qpy_rows_release(rw);
    return -1;
  }
  return 0;
}

SamplerObject *
qpy_sampler_item(PyObject *fast, Py_ssize_t i, size_t ncols)
{
  PyObject *item = PySequence_Fast_GET_ITEM(fast, i);

  if (!PyObject_TypeCheck(item, &qpy_sampler_type)) {
    PyErr_Format(PyExc_TypeError, "samplers[%zd] is not a qrs.Sampler", i);
    return NULL;
  }
  if (check_vocab((SamplerObject *)item, ncols) < 0)
    return NULL;
  return (SamplerObject *)item;
}

int
qpy_u_get(PyObject *obj, Py_ssize_t i, double *ret_u)
{
  char what[80];
  double u;

  u = PyFloat_AsDouble(obj);
  if (u == -1.0 && PyErr_Occurred())
    return -1;
  if (!(u >= 0.0 && u <= 1.0)) {
    if (i < 0)
      snprintf(what, sizeof(what), "u = %g", u);
    else
      snprintf(what, sizeof(what), "u[%zd] = %g", i, u);
    qpy_set_error(QRS_E_U_RANGE, what);
    return -1;
  }
  *ret_u = u;
  return 0;
}

static PyObject *
token_result(int r, uint32_t tok, const struct qrs_token_record *rec,
             int want_rec, const char *detail)
{
  if (r < 0)
    return qpy_set_error(r, detail);
  if (r == 1)                     /* bypass */
    Py_RETURN_NONE;
  if (want_rec) {
    /* want_rec 2: the record's JSON line; else a dict */
    PyObject *o = qpy_record_out(rec, want_rec);

    return o ? Py_BuildValue("(IN)", tok, o) : NULL;
  }
  return PyLong_FromUnsignedLong(tok);
}

static PyObject *
sampler_sample_token(SamplerObject *self, PyObject *args, PyObject *kw)
{
  static char *kwl[] = { "client", "logits", "dtype", "record", NULL };
  PyObject *cobj, *lobj;
  const char *dt = NULL;
  int want = 0, r;
  struct rows rw;
  struct qrs_token_record rec;
  struct qpy_conn *conn;
  PyObject *res;
  uint32_t tok = 0;

  if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O|zp", kwl, &qpy_client_type,
                                   &cobj, &lobj, &dt, &want))
    return NULL;
  conn = qpy_client_conn((ClientObject *)cobj);
  if (!conn)
    return NULL;
  if (sampler_row(self, lobj, dt, &rw) < 0) {
    qpy_conn_unref(conn);
    return NULL;
  }
  qpy_sampler_hold_conn(self, conn);
  Py_BEGIN_ALLOW_THREADS
  r = qrs_sampler_sample_token(self->s, conn->c, rw.data, rw.dtype, rw.ncols,
                               &tok, want ? &rec : NULL);
  Py_END_ALLOW_THREADS
  qpy_rows_release(&rw);
  res = token_result(r, tok, &rec, want, qrs_client_errmsg(conn->c));
  qpy_conn_unref(conn);
  return res;
}

static PyObject *
sampler_select_u(SamplerObject *self, PyObject *args, PyObject *kw)
{
  static char *kwl[] = { "logits", "u", "dtype", "record", NULL };
  PyObject *lobj, *uobj;
  const char *dt = NULL;
  double u;
  int want = 0, r;
  struct rows rw;
  struct qrs_token_record rec;
  uint32_t tok = 0;

  if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|zp", kwl, &lobj, &uobj, &dt,
                                   &want))
    return NULL;
  if (qpy_u_get(uobj, -1, &u) < 0 || sampler_row(self, lobj, dt, &rw) < 0)
    return NULL;
  r = qrs_sampler_select_u(self->s, rw.data, rw.dtype, rw.ncols, u, &tok,
                           want ? &rec : NULL);
  qpy_rows_release(&rw);
  return token_result(r, tok, &rec, want, NULL);
}

static PyObject *
sampler_prefetch(SamplerObject *self, PyObject *args)
{
  struct qpy_conn *conn;
  PyObject *cobj;
  int r;

  if (!PyArg_ParseTuple(args, "O!", &qpy_client_type, &cobj))
    return NULL;
  conn = qpy_client_conn((ClientObject *)cobj);
  if (!conn)
    return NULL;
  qpy_sampler_hold_conn(self, conn);
  r = qrs_sampler_prefetch(self->s, conn->c);
  if (r < 0)
    qpy_set_error(r, qrs_client_errmsg(conn->c));
  qpy_conn_unref(conn);
  if (r < 0)
    return NULL;
  Py_RETURN_NONE;
}

static PyObject *
sampler_set_salt(SamplerObject *self, PyObject *args)
{
  Py_buffer b;
  int r;

  if (!PyArg_ParseTuple(args, "y*", &b))
    return NULL;
  r = qrs_sampler_set_salt(self->s, b.buf, (size_t)b.len);
  PyBuffer_Release(&b);
  if (r < 0)
    return qpy_set_error(r, "salt must be 1..256 bytes");
  Py_RETURN_NONE;
}

static PyObject *
sampler_reset(SamplerObject *self, PyObject *unused)
{
  int r;

  (void)unused;
  r = qrs_sampler_reset(self->s);
  if (r < 0)
    return qpy_set_error(r, NULL);
  Py_RETURN_NONE;
}

static PyObject *
sampler_reserve(SamplerObject *self, PyObject *args)
{
  Py_ssize_t n;
  int r;

  if (!PyArg_ParseTuple(args, "n", &n))
    return NULL;
  if (n <= 0) {
    PyErr_SetString(PyExc_ValueError, "reserve() needs a positive size");
    return NULL;
  }
  r = qrs_sampler_reserve(self->s, (size_t)n);
  if (r < 0)
    return qpy_set_error(r, NULL);
  if ((size_t)n > self->vocab)
    self->vocab = (size_t)n;
  Py_RETURN_NONE;
}

static PyObject *
sampler_set_log_path(SamplerObject *self, PyObject *args)
{
  const char *p;
  int r;

  if (!PyArg_ParseTuple(args, "s", &p))
    return NULL;
  r = qrs_sampler_set_log_path(self->s, p);
  if (r < 0)
    return qpy_set_error(r, p);
  Py_RETURN_NONE;
}

static PyObject *
sampler_set_logits_dump(SamplerObject *self, PyObject *args)
{
  const char *p;
  int r;

  if (!PyArg_ParseTuple(args, "z", &p))
    return NULL;
  r = qrs_sampler_set_logits_dump(self->s, p);
  if (r < 0)
    return qpy_set_error(r, p ? p : "closing the logits dump");
  Py_RETURN_NONE;
}

static PyObject *
sampler_next_commitment(SamplerObject *self, PyObject *unused)
{
  struct qrs_commitment cm;

  (void)unused;
  qrs_sampler_next_commitment(self->s, &cm);
  return Py_BuildValue("{s:y#,s:K,s:L}", "salt", (const char *)cm.salt,
                       (Py_ssize_t)cm.salt_len, "step",
                       (unsigned long long)cm.step, "prev_token",
                       (long long)cm.prev_token_id);
}

static PyObject *
sampler_cancel_prefetch(SamplerObject *self, PyObject *unused)
{
  (void)unused;
  qrs_sampler_cancel_prefetch(self->s);
  Py_RETURN_NONE;
}

static PyObject *
sampler_save_state(SamplerObject *self, PyObject *unused)
{
  PyObject *b;
  size_t n;
  int r;

  (void)unused;
  n = qrs_sampler_state_size(self->s);
  b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
  if (!b)
    return NULL;
  r = qrs_sampler_save_state(self->s, PyBytes_AS_STRING(b), n);
  if (r < 0) {
    Py_DECREF(b);
    return qpy_set_error(r, NULL);
  }
  return b;
}

static PyObject *
sampler_restore_state(SamplerObject *self, PyObject *args)
{
  Py_buffer buf;
  int r;

  if (!PyArg_ParseTuple(args, "y*", &buf))
    return NULL;
  /* the prefetch goes with the state left (and its connection with it) */
  sampler_release_conn(self);
  r = qrs_sampler_restore_state(self->s, buf.buf, (size_t)buf.len);
  PyBuffer_Release(&buf);
  if (r < 0)
    return qpy_set_error(r, "a state saved by a sampler with this "
                            "configuration and vocabulary");
  Py_RETURN_NONE;
}

static PyObject *
sampler_set_previous_token(SamplerObject *self, PyObject *args)
{
  unsigned long long tok;
  int r;

  if (!PyArg_ParseTuple(args, "K", &tok))
    return NULL;
  if (tok > UINT32_MAX)
    return qpy_set_error(-EINVAL, "token id out of range");
  sampler_release_conn(self);
  r = qrs_sampler_set_previous_token(self->s, (uint32_t)tok);
  if (r < 0)
    return qpy_set_error(r, "set_previous_token (no token selected yet, "
                            "or an id outside the row)");
  Py_RETURN_NONE;
}

/* An optional client argument: its connection (referenced, held by the
   sampler for its prefetch), NULL for None; -1 with the error set. */
static int
optional_conn(SamplerObject *self, PyObject *cobj, struct qpy_conn **ret)
{
  *ret = NULL;
  if (!cobj || cobj == Py_None)
    return 0;
  if (!PyObject_TypeCheck(cobj, &qpy_client_type)) {
    PyErr_SetString(PyExc_TypeError, "client must be a qrs.Client or None");
    return -1;
  }
  *ret = qpy_client_conn((ClientObject *)cobj);
  if (!*ret)
    return -1;
  qpy_sampler_hold_conn(self, *ret);
  return 0;
}

static PyObject *
sampler_take_draw(SamplerObject *self, PyObject *args)
{
  struct qpy_conn *conn;
  PyObject *cobj;
  double u = 0.0;
  int r;

  if (!PyArg_ParseTuple(args, "O!", &qpy_client_type, &cobj))
    return NULL;
  if (optional_conn(self, cobj, &conn) < 0)
    return NULL;
  Py_BEGIN_ALLOW_THREADS
  r = qrs_sampler_take_draw(self->s, conn->c, &u);
  Py_END_ALLOW_THREADS
  if (r < 0)
    qpy_set_error(r, qrs_client_errmsg(conn->c));
  qpy_conn_unref(conn);
  if (r < 0)
    return NULL;
  if (r == 1)
    Py_RETURN_NONE;
  return PyFloat_FromDouble(u);
}

static PyObject *
sampler_finish_pick(SamplerObject *self, PyObject *args, PyObject *kw)
{
  static char *kwl[] = { "client", "token", "rank", "num_candidates", "prob",
                         "cdf_lo", "cdf_hi", "entropy", "temperature",
                         "record", NULL };
  struct qrs_token_record rec;
  struct qrs_pick p;
  struct qpy_conn *conn;
  PyObject *cobj, *robj = NULL;
  int want, r;

  memset(&p, 0, sizeof(p));
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OIIIddddd|O", kwl, &cobj,
                                   &p.token, &p.rank, &p.num_candidates,
                                   &p.prob, &p.cdf_lo, &p.cdf_hi, &p.entropy,
                                   &p.temperature, &robj))
    return NULL;
  want = qpy_want_records(robj);
  if (want < 0 || optional_conn(self, cobj, &conn) < 0)
    return NULL;
  r = qrs_sampler_finish_pick(self->s, conn ? conn->c : NULL, &p, &rec);
  if (conn)
    qpy_conn_unref(conn);
  return token_result(r, p.token, &rec, want,
                       r == -ENOENT ? "no draw taken for this step"
                       : r == -EOPNOTSUPP
                           ? "this sampler's selection needs the row"
                           : "a pick this sampler would not make");
}

static PyObject *
sampler_finish_row(SamplerObject *self, PyObject *args, PyObject *kw)
{
  static char *kwl[] = { "client", "logits", "dtype", "record", NULL };
  struct qrs_token_record rec;
  struct qpy_conn *conn;
  PyObject *cobj, *lobj, *robj = NULL;
  const char *dt = NULL;
  struct rows rw;
  uint32_t tok = 0;
  int want, r;

  if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|zO", kwl, &cobj, &lobj, &dt,
                                   &robj))
    return NULL;
  want = qpy_want_records(robj);
  if (want < 0 || sampler_row(self, lobj, dt, &rw) < 0)
    return NULL;
  if (optional_conn(self, cobj, &conn) < 0) {
    qpy_rows_release(&rw);
    return NULL;
  }
  r = qrs_sampler_finish_row(self->s, conn ? conn->c : NULL, rw.data,
                             rw.dtype, rw.ncols, &tok, &rec);
  qpy_rows_release(&rw);
  if (conn)
    qpy_conn_unref(conn);
  return token_result(r, tok, &rec, want,
                       r == -ENOENT ? "no draw taken for this step" : NULL);
}

static PyMethodDef sampler_methods[] = {
  { "sample_token", (PyCFunction)(void (*)(void))sampler_sample_token,
    METH_VARARGS | METH_KEYWORDS,
    "sample_token(client, logits, dtype=None, record=False) -> token, "
    "(token, record) or None (bypass)" },
  { "select_u", (PyCFunction)(void (*)(void))sampler_select_u,
    METH_VARARGS | METH_KEYWORDS,
    "select_u(logits, u, dtype=None, record=False): the step with u only" },
  { "take_draw", (PyCFunction)sampler_take_draw, METH_VARARGS,
    "take_draw(client) -> u or None (bypass): this step's draw (the "
    "prefetched one, else a blocking draw), held for finish_pick() or "
    "finish_row()" },
  { "finish_pick", (PyCFunction)(void (*)(void))sampler_finish_pick,
    METH_VARARGS | METH_KEYWORDS,
    "finish_pick(client, token, rank, num_candidates, prob, cdf_lo, "
    "cdf_hi, entropy, temperature, record=False): end the step with a "
    "token selected elsewhere (a device) at the held draw's u; client "
    "(or None) gets the next prefetch" },
  { "finish_row", (PyCFunction)(void (*)(void))sampler_finish_row,
    METH_VARARGS | METH_KEYWORDS,
    "finish_row(client, logits, dtype=None, record=False): end the step "
    "by libqrs's selection from the row at the held draw's u" },
  { "prefetch", (PyCFunction)sampler_prefetch, METH_VARARGS,
    "prefetch(client): begin the next token's draw" },
  { "cancel_prefetch", (PyCFunction)sampler_cancel_prefetch, METH_NOARGS,
    "forget an outstanding prefetched draw" },
  { "set_salt", (PyCFunction)sampler_set_salt, METH_VARARGS,
    "set_salt(bytes): the commitment salt (1..256 bytes)" },
  { "reset", (PyCFunction)sampler_reset, METH_NOARGS,
    "a new request: fresh state and salt, step 0" },
  { "reserve", (PyCFunction)sampler_reserve, METH_VARARGS,
    "reserve(n): allow rows up to n long" },
  { "set_log_path", (PyCFunction)sampler_set_log_path, METH_VARARGS,
    "set_log_path(path): append JSON records there" },
  { "set_logits_dump", (PyCFunction)sampler_set_logits_dump, METH_VARARGS,
    "set_logits_dump(path or None): write every selected token's logits "
    "row there (qrs-audit --logits replays them); None closes it" },
  { "next_commitment", (PyCFunction)sampler_next_commitment, METH_NOARGS,
    "the commitment of the next draw" },
  { "save_state", (PyCFunction)sampler_save_state, METH_NOARGS,
    "save_state() -> bytes: the request's state at this token boundary "
    "(step, previous token, strategy state) for restore_state()" },
  { "restore_state", (PyCFunction)sampler_restore_state, METH_VARARGS,
    "restore_state(bytes): resume from a state save_state() returned "
    "(the same configuration and vocabulary); cancels the prefetch" },
  { "set_previous_token", (PyCFunction)sampler_set_previous_token,
    METH_VARARGS,
    "set_previous_token(id): the token used in place of the last one "
    "selected (forced after selection); cancels the prefetch" },
  { NULL, NULL, 0, NULL },
};

PyTypeObject qpy_sampler_type = {
  PyVarObject_HEAD_INIT(NULL, 0)
  .tp_name = "qrs._qrs.Sampler",
  .tp_basicsize = sizeof(SamplerObject),
  .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
  .tp_doc = "Sampler(config, vocab_size): one request's sampling state",
  .tp_new = PyType_GenericNew,
  .tp_init = (initproc)sampler_init,
  .tp_dealloc = (destructor)sampler_dealloc,
  .tp_methods = sampler_methods,
};

