/* qrs._qrs.Pool: threads for batch sampling, a block of rows and one
   Sampler each in one qrs_sample_batch() call. */
#include "_qrs.h"

#include <string.h>

typedef struct {
  PyObject_HEAD
  struct qrs_pool *pool;
  struct qrs_batch_row *rows;
  struct qrs_token_record *recs;
  struct qpy_conn **conns;        /* the rows' connections, for the call */
  size_t cap;
  int busy;                       /* a sample() is using rows, recs, conns */
} PoolObject;

static int
pool_init(PoolObject *self, PyObject *args, PyObject *kw)
{
  static char *kwl[] = { "threads", NULL };
  unsigned int threads = 1;
  int r;

  if (!PyArg_ParseTupleAndKeywords(args, kw, "|I", kwl, &threads))
    return -1;
  if (self->pool) {
    PyErr_SetString(PyExc_RuntimeError, "Pool already initialised");
    return -1;
  }
  r = qrs_pool_new(threads, &self->pool);
  if (r < 0) {
    qpy_set_error(r, "threads must be 0..256");
    return -1;
  }
  return 0;
}

static void
pool_dealloc(PoolObject *self)
{
  qrs_pool_free(self->pool);
  PyMem_Free(self->rows);
  PyMem_Free(self->recs);
  PyMem_Free(self->conns);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Room for n rows in rows, recs and conns: 0, or -1 with the error set. */
static int
pool_reserve(PoolObject *self, size_t n)
{
  struct qrs_batch_row *nr;
  struct qrs_token_record *nrec;
  struct qpy_conn **nc;

  if (n <= self->cap)
    return 0;
  nr = PyMem_Realloc(self->rows, n * sizeof(*nr));
  if (nr)
    self->rows = nr;
  nrec = nr ? PyMem_Realloc(self->recs, n * sizeof(*nrec)) : NULL;
  if (nrec)
    self->recs = nrec;
  nc = nrec ? PyMem_Realloc(self->conns, n * sizeof(*nc)) : NULL;
  if (!nc) {
    PyErr_NoMemory();
    return -1;
  }
  self->conns = nc;
  self->cap = n;
  return 0;
}

/* sample(logits[rows, vocab], samplers, client=None, u=None, dtype=None,
   records=False) -> (tokens, statuses, records or None): samplers[i]
   samples row i in one qrs_sample_batch() call; token -1 where the status
   is not 0 (1: bypass, negative: the error code).  records: True, a dict
   per row; "json", the row's record as the JSON line libqrs's log writes
   (every field: journal_seq, the draw's times, the echo), as a str.
   client: one Client for
   every row, or a sequence of one per row (an engine with more requests
   than one connection's in-flight draws spreads them over several).  A u
   that is not a number in [0, 1] raises URangeError before any row is
   sampled.  One call at a time per Pool: another thread's call meanwhile
   raises RuntimeError. */
static PyObject *
pool_sample(PoolObject *self, PyObject *args, PyObject *kw)
{
  static char *kwl[] = { "logits", "samplers", "client", "u", "dtype",
                         "records", "one_hot", NULL };
  PyObject *lobj, *sseq, *cobj = Py_None, *uobj = Py_None, *robj = NULL;
  PyObject *fast = NULL, *ufast = NULL, *cfast = NULL, *res = NULL;
  PyObject *toks = NULL, *stats = NULL, *recl = NULL, *item;
  struct qpy_conn *one = NULL, *conn;
  const char *dt = NULL;
  int want = 0, one_hot = 0, r;
  struct rows rw;
  Py_ssize_t n, i, nconns = 0;

  memset(&rw, 0, sizeof(rw));
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OOzOp", kwl, &lobj, &sseq,
                                   &cobj, &uobj, &dt, &robj, &one_hot))
    return NULL;
  want = qpy_want_records(robj);
  if (want < 0)
    return NULL;
  if (self->busy) {
    PyErr_SetString(PyExc_RuntimeError,
                    "the Pool is sampling on another thread");
    return NULL;
  }
  /* until out: the calls below may run Python code (a __float__, a
     sequence's items), and so another thread's sample() */
  self->busy = 1;
  if (cobj != Py_None && PyObject_TypeCheck(cobj, &qpy_client_type)) {
    one = qpy_client_conn((ClientObject *)cobj);
    if (!one)
      goto out;
  } else if (cobj != Py_None) {
    if (!PyList_Check(cobj) && !PyTuple_Check(cobj)) {
      PyErr_SetString(PyExc_TypeError, "client must be a qrs.Client or a "
                      "list of them (one per row)");
      goto out;
    }
    cfast = PySequence_Fast(cobj, "client must be a sequence");
    if (!cfast)
      goto out;
  } else if (uobj == Py_None) {
    PyErr_SetString(PyExc_ValueError, "pass a client or u values");
    goto out;
  }
  if (qpy_rows_get(lobj, dt, 1, &rw) < 0)
    goto out;
  if (one_hot && qpy_rows_readonly(&rw, "one_hot writes the logits in "
                                    "place: their memory"))
    goto out;
  fast = PySequence_Fast(sseq, "samplers must be a sequence");
  if (!fast)
    goto out;
  n = PySequence_Fast_GET_SIZE(fast);
  if ((size_t)n > rw.nrows) {
    PyErr_Format(PyExc_ValueError, "%zd samplers for %zu logits rows", n,
                 rw.nrows);
    goto out;
  }
  if (uobj != Py_None) {
    ufast = PySequence_Fast(uobj, "u must be a sequence");
    if (!ufast)
      goto out;
    if (PySequence_Fast_GET_SIZE(ufast) != n) {
      PyErr_SetString(PyExc_ValueError, "u and samplers differ in length");
      goto out;
    }
  }
  if (cfast && PySequence_Fast_GET_SIZE(cfast) != n) {
    PyErr_SetString(PyExc_ValueError, "client and samplers differ in length");
    goto out;
  }
  if (pool_reserve(self, (size_t)n) < 0)
    goto out;
  for (i = 0; i < n; i++) {
    SamplerObject *so = qpy_sampler_item(fast, i, rw.ncols);
    if (!so)
      goto out;
    conn = one;
    if (cfast) {
      item = PySequence_Fast_GET_ITEM(cfast, i);
      if (!PyObject_TypeCheck(item, &qpy_client_type)) {
        PyErr_Format(PyExc_TypeError, "client[%zd] is not a qrs.Client", i);
        goto out;
      }
      conn = qpy_client_conn((ClientObject *)item);
      if (!conn)
        goto out;
      self->conns[nconns++] = conn;
    }
    memset(&self->rows[i], 0, sizeof(self->rows[i]));
    self->rows[i].sampler = so->s;
    self->rows[i].client = conn ? conn->c : NULL;
    self->rows[i].record = want ? &self->recs[i] : NULL;
    if (ufast && qpy_u_get(PySequence_Fast_GET_ITEM(ufast, i), i,
                           &self->rows[i].u) < 0)
      goto out;
    if (conn)
      qpy_sampler_hold_conn(so, conn);
  }
  Py_BEGIN_ALLOW_THREADS
  if (one_hot)
    r = qrs_sample_batch_one_hot(self->pool, (void *)rw.data, rw.dtype,
                                 rw.ncols, rw.stride, self->rows, (size_t)n);
  else
    r = qrs_sample_batch(self->pool, rw.data, rw.dtype, rw.ncols,
                         rw.stride, self->rows, (size_t)n);
  Py_END_ALLOW_THREADS
  if (r < 0) {
    qpy_set_error(r, "sampling the batch");
    goto out;
  }
  toks = PyList_New(n);
  stats = PyList_New(n);
  recl = want ? PyList_New(n) : Py_NewRef(Py_None);
  if (!toks || !stats || !recl)
    goto out;
  for (i = 0; i < n; i++) {
    int st = self->rows[i].status;
    PyList_SET_ITEM(toks, i, st == 0 ? PyLong_FromUnsignedLong(
                                           self->rows[i].token)
                                     : PyLong_FromLong(-1));
    PyList_SET_ITEM(stats, i, PyLong_FromLong(st));
    if (want)
      PyList_SET_ITEM(recl, i, st != 0     ? Py_NewRef(Py_None)
                                       : qpy_record_out(&self->recs[i],
                                                        want));
  }
  if (PyErr_Occurred())         /* a record or an int not made */
    goto out;
  res = PyTuple_Pack(3, toks, stats, recl);
out:
  Py_XDECREF(toks);
  Py_XDECREF(stats);
  Py_XDECREF(recl);
  Py_XDECREF(fast);
  Py_XDECREF(ufast);
  Py_XDECREF(cfast);
  qpy_rows_release(&rw);
  while (nconns > 0)
    qpy_conn_unref(self->conns[--nconns]);
  qpy_conn_unref(one);
  self->busy = 0;
  return res;
}

static PyMethodDef pool_methods[] = {
  { "sample", (PyCFunction)(void (*)(void))pool_sample,
    METH_VARARGS | METH_KEYWORDS,
    "sample(logits, samplers, client=None, u=None, dtype=None, "
    "records=False, one_hot=False) -> (tokens, statuses, records); "
    "client: a Client, or a list of one per row; "
    "u: one per row, each in [0, 1]; "
    "one_hot: each sampled row is then written over in place, -inf but 0 "
    "at its token (qrs_sample_batch_one_hot()); read-only rows are "
    "refused" },
  { NULL, NULL, 0, NULL },
};

static PyObject *
pool_threads_get(PoolObject *self, void *closure)
{
  (void)closure;
  if (!self->pool) {
    PyErr_SetString(PyExc_RuntimeError, "Pool not initialised");
    return NULL;
  }
  return PyLong_FromUnsignedLong(qrs_pool_threads(self->pool));
}

static PyGetSetDef pool_getset[] = {
  { "threads", (getter)pool_threads_get, NULL,
    "the pool's thread count, the caller included", NULL },
  { NULL, NULL, NULL, NULL, NULL },
};

PyTypeObject qpy_pool_type = {
  PyVarObject_HEAD_INIT(NULL, 0)
  .tp_name = "qrs._qrs.Pool",
  .tp_basicsize = sizeof(PoolObject),
  .tp_flags = Py_TPFLAGS_DEFAULT,
  .tp_doc = "Pool(threads=1): threads for batch sampling "
            "(0: one per online CPU)",
  .tp_new = PyType_GenericNew,
  .tp_init = (initproc)pool_init,
  .tp_dealloc = (destructor)pool_dealloc,
  .tp_methods = pool_methods,
  .tp_getset = pool_getset,
};

