/* qrs._qrs: the CPython binding of libqrs (client, sampler config,
   sampler, batch).  A thin layer: every call maps to one libqrs call;
   errors become qrs.QrsError subclasses chosen by the QRS_E_* / errno
   code (qrs/errors.py maps them; qpy_set_error() raises through
   qrs.errors.raise_code).

   Rows are read in place (_qrs_rows.c): nothing is copied.  One file a
   role: this one the module, its errors and functions; _qrs_client.c,
   _qrs_config.c, _qrs_sampler.c and _qrs_pool.c a type each;
   _qrs_bench.c the C baseline timing; _qrs.h what they share. */
#include "_qrs.h"

/* ---- errors ---------------------------------------------------------- */

static PyObject *raise_code_fn;   /* qrs.errors.raise_code */

PyObject *
qpy_set_error(int r, const char *detail)
{
  PyObject *res;

  if (!raise_code_fn) {
    PyErr_Format(PyExc_RuntimeError, "%s (%d)", qrs_strerror(r), r);
    return NULL;
  }
  res = PyObject_CallFunction(raise_code_fn, "is", r, detail ? detail : "");
  Py_XDECREF(res);
  if (!PyErr_Occurred())
    PyErr_Format(PyExc_RuntimeError, "%s (%d)", qrs_strerror(r), r);
  return NULL;
}

static PyObject *
py_set_raise(PyObject *self, PyObject *fn)
{
  (void)self;
  if (!PyCallable_Check(fn)) {
    PyErr_SetString(PyExc_TypeError, "raise_code must be callable");
    return NULL;
  }
  Py_XSETREF(raise_code_fn, Py_NewRef(fn));
  Py_RETURN_NONE;
}

/* ---- module functions ------------------------------------------------ */

static PyObject *
py_force_one_hot(PyObject *self, PyObject *args)
{
  PyObject *obj;
  unsigned int tok;
  const char *dt = NULL;
  struct rows rw;
  int r;

  (void)self;
  if (!PyArg_ParseTuple(args, "OI|z", &obj, &tok, &dt))
    return NULL;
  if (qpy_rows_get(obj, dt, 0, &rw) < 0) {
    qpy_rows_release(&rw);
    return NULL;
  }
  if (qpy_rows_readonly(&rw, "the logits row")) {
    qpy_rows_release(&rw);
    return NULL;
  }
  r = qrs_force_one_hot((void *)rw.data, rw.dtype, rw.ncols, tok);
  qpy_rows_release(&rw);
  if (r < 0)
    return qpy_set_error(r, "token out of the row");
  Py_RETURN_NONE;
}

static PyObject *
py_strerror(PyObject *self, PyObject *args)
{
  const char *n;
  int e;

  (void)self;
  if (!PyArg_ParseTuple(args, "i", &e))
    return NULL;
  n = qrs_strerror_name(e);
  return Py_BuildValue("(sz)", qrs_strerror(e), n);
}

static PyObject *
py_names(PyObject *self, PyObject *arg)
{
  const char *(*fn)(size_t);
  PyObject *l, *s;
  size_t i;

  (void)self;
  fn = PyObject_IsTrue(arg) ? qrs_sampler_preset_name
                            : qrs_sampler_field_name;
  l = PyList_New(0);
  for (i = 0; l && fn(i); i++) {
    s = PyUnicode_FromString(fn(i));
    if (!s || PyList_Append(l, s) < 0) {
      Py_XDECREF(s);
      Py_CLEAR(l);
      break;
    }
    Py_DECREF(s);
  }
  return l;
}

static PyMethodDef module_methods[] = {
  { "_set_raise", py_set_raise, METH_O, NULL },
  { "_bench_c", (PyCFunction)(void (*)(void))qpy_bench_c,
    METH_VARARGS | METH_KEYWORDS,
    "_bench_c(logits, samplers, client=None, u=None) -> seconds: one C "
    "libqrs call per row, timed in C "
    "(tools/qrs-bench/pybench.py's baseline)" },
  { "force_one_hot", py_force_one_hot, METH_VARARGS,
    "force_one_hot(row, token, dtype=None): row = -inf except row[token]=0" },
  { "strerror", py_strerror, METH_VARARGS,
    "strerror(code) -> (message, name)" },
  { "_names", py_names, METH_O,
    "_names(presets) -> field names (False) or preset names (True)" },
  { NULL, NULL, 0, NULL },
};

static struct PyModuleDef moduledef = {
  PyModuleDef_HEAD_INIT, "qrs._qrs", "libqrs binding", -1, module_methods,
  NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__qrs(void);

PyMODINIT_FUNC
PyInit__qrs(void)
{
  PyObject *m;

  if (PyType_Ready(&qpy_client_type) < 0 ||
      PyType_Ready(&qpy_config_type) < 0 ||
      PyType_Ready(&qpy_sampler_type) < 0 ||
      PyType_Ready(&qpy_pool_type) < 0)
    return NULL;
  m = PyModule_Create(&moduledef);
  if (!m)
    return NULL;
  if (PyModule_AddObjectRef(m, "Client", (PyObject *)&qpy_client_type) < 0 ||
      PyModule_AddObjectRef(m, "Config", (PyObject *)&qpy_config_type) < 0 ||
      PyModule_AddObjectRef(m, "Sampler", (PyObject *)&qpy_sampler_type) < 0 ||
      PyModule_AddObjectRef(m, "Pool", (PyObject *)&qpy_pool_type) < 0 ||
      PyModule_AddStringConstant(m, "libqrs_version", qrs_version()) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
