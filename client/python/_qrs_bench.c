/* qrs._qrs._bench_c(logits[rows, vocab], samplers, client=None, u=None)
   -> seconds: the C baseline of tools/qrs-bench/pybench.py, timed in C
   with the GIL released: row i sampled by samplers[i], one libqrs call
   per row (qrs_sampler_sample_token() through client, else
   qrs_sampler_select_u() with u[i]), as a C engine calls it. */
#include "_qrs.h"

#include <string.h>
#include <time.h>

PyObject *
qpy_bench_c(PyObject *self, PyObject *args, PyObject *kw)
{
  static char *kwl[] = { "logits", "samplers", "client", "u", NULL };
  PyObject *lobj, *sseq, *cobj = Py_None, *uobj = Py_None, *res = NULL;
  PyObject *fast = NULL, *ufast = NULL;
  struct qrs_sampler **ss = NULL;
  double *us = NULL;
  struct qpy_conn *conn = NULL;
  struct qrs_client *c = NULL;
  struct rows rw;
  struct timespec t0, t1;
  Py_ssize_t n, i;
  uint32_t tok;
  int r = 0;

  (void)self;
  memset(&rw, 0, sizeof(rw));
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OO", kwl, &lobj, &sseq,
                                   &cobj, &uobj))
    return NULL;
  if (cobj != Py_None) {
    if (!PyObject_TypeCheck(cobj, &qpy_client_type)) {
      PyErr_SetString(PyExc_TypeError, "client must be a qrs.Client");
      return NULL;
    }
    conn = qpy_client_conn((ClientObject *)cobj);
    if (!conn)
      return NULL;
    c = conn->c;
  }
  if (qpy_rows_get(lobj, NULL, 1, &rw) < 0)
    goto out;
  fast = PySequence_Fast(sseq, "samplers must be a sequence");
  if (!fast)
    goto out;
  n = PySequence_Fast_GET_SIZE(fast);
  if ((size_t)n != rw.nrows) {
    PyErr_SetString(PyExc_ValueError, "one sampler per row");
    goto out;
  }
  if (!c) {
    ufast = uobj == Py_None ? NULL
                            : PySequence_Fast(uobj, "u must be a sequence");
    if (!ufast || PySequence_Fast_GET_SIZE(ufast) != n) {
      if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "without a client: one u per row");
      goto out;
    }
  }
  ss = PyMem_Calloc((size_t)n + 1, sizeof(*ss));
  us = PyMem_Calloc((size_t)n + 1, sizeof(*us));
  if (!ss || !us) {
    PyErr_NoMemory();
    goto out;
  }
  for (i = 0; i < n; i++) {
    SamplerObject *so = qpy_sampler_item(fast, i, rw.ncols);
    if (!so)
      goto out;
    ss[i] = so->s;
    if (conn)
      qpy_sampler_hold_conn(so, conn);
    else if (qpy_u_get(PySequence_Fast_GET_ITEM(ufast, i), i, &us[i]) < 0)
      goto out;
  }
  Py_BEGIN_ALLOW_THREADS
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (i = 0; i < n && r >= 0; i++) {
    const char *row = (const char *)rw.data +
                      (size_t)i * rw.stride * qpy_elem_size(rw.dtype);
    r = c ? qrs_sampler_sample_token(ss[i], c, row, rw.dtype, rw.ncols, &tok,
                                     NULL)
          : qrs_sampler_select_u(ss[i], row, rw.dtype, rw.ncols, us[i], &tok,
                                 NULL);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  Py_END_ALLOW_THREADS
  if (r < 0) {
    qpy_set_error(r, c ? qrs_client_errmsg(c) : "the C baseline");
    goto out;
  }
  res = PyFloat_FromDouble((double)(t1.tv_sec - t0.tv_sec) +
                           (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
out:
  PyMem_Free(ss);
  PyMem_Free(us);
  Py_XDECREF(fast);
  Py_XDECREF(ufast);
  qpy_rows_release(&rw);
  qpy_conn_unref(conn);
  return res;
}

