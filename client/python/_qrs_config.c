/* qrs._qrs.Config: a sampler configuration (qrs_sampler_config, its
   default, environment, preset and explicit layers). */
#include "_qrs.h"

#include <string.h>

static int
config_init(ConfigObject *self, PyObject *args, PyObject *kw)
{
  int r;

  if (!PyArg_ParseTuple(args, "") || (kw && PyDict_Size(kw))) {
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_TypeError, "Config() takes no arguments");
    return -1;
  }
  qrs_sampler_config_free(self->cfg);
  self->cfg = NULL;
  r = qrs_sampler_config_new(&self->cfg);
  if (r < 0) {
    qpy_set_error(r, NULL);
    return -1;
  }
  return 0;
}

static void
config_dealloc(ConfigObject *self)
{
  qrs_sampler_config_free(self->cfg);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
config_result(ConfigObject *self, int r)
{
  if (r < 0)
    return qpy_set_error(r, qrs_sampler_config_error(self->cfg));
  return PyLong_FromLong(r);
}

static PyObject *
config_set(ConfigObject *self, PyObject *args)
{
  const char *f, *v;

  if (!PyArg_ParseTuple(args, "ss", &f, &v))
    return NULL;
  return config_result(self, qrs_sampler_config_set(self->cfg, f, v));
}

static PyObject *
config_set_arg(ConfigObject *self, PyObject *args)
{
  const char *f, *v;

  if (!PyArg_ParseTuple(args, "ss", &f, &v))
    return NULL;
  return config_result(self, qrs_sampler_config_set_arg(self->cfg, f, v));
}

static PyObject *
config_unset(ConfigObject *self, PyObject *args)
{
  const char *f;

  if (!PyArg_ParseTuple(args, "s", &f))
    return NULL;
  return config_result(self, qrs_sampler_config_unset(self->cfg, f));
}

static PyObject *
config_set_preset(ConfigObject *self, PyObject *args)
{
  const char *p;

  if (!PyArg_ParseTuple(args, "z", &p))
    return NULL;
  return config_result(self, qrs_sampler_config_set_preset(self->cfg, p));
}

/* load_env(env=None): env a mapping of names to values, or None for the
   process environment. */
static PyObject *
config_load_env(ConfigObject *self, PyObject *args)
{
  PyObject *env = Py_None, *items = NULL, *res = NULL, *it, *s;
  char **envp = NULL;
  Py_ssize_t n, i;

  if (!PyArg_ParseTuple(args, "|O", &env))
    return NULL;
  if (env == Py_None)
    return config_result(self, qrs_sampler_config_load_env(self->cfg, NULL));
  items = PyMapping_Items(env);
  if (!items)
    return NULL;
  n = PyList_GET_SIZE(items);
  envp = PyMem_Calloc((size_t)n + 1, sizeof(char *));
  if (!envp) {
    PyErr_NoMemory();
    goto out;
  }
  for (i = 0; i < n; i++) {
    it = PyList_GET_ITEM(items, i);
    s = PyUnicode_FromFormat("%S=%S", PyTuple_GET_ITEM(it, 0),
                             PyTuple_GET_ITEM(it, 1));
    if (!s)
      goto out;
    envp[i] = PyMem_Malloc((size_t)PyUnicode_GET_LENGTH(s) * 4 + 1);
    if (!envp[i]) {
      Py_DECREF(s);
      PyErr_NoMemory();
      goto out;
    }
    strcpy(envp[i], PyUnicode_AsUTF8(s));
    Py_DECREF(s);
  }
  res = config_result(self, qrs_sampler_config_load_env(self->cfg, envp));
out:
  if (envp) {
    for (i = 0; i < n; i++)
      PyMem_Free(envp[i]);
    PyMem_Free(envp);
  }
  Py_XDECREF(items);
  return res;
}

static PyObject *
config_get(ConfigObject *self, PyObject *args)
{
  char buf[512];
  const char *f;
  int r;

  if (!PyArg_ParseTuple(args, "s", &f))
    return NULL;
  r = qrs_sampler_config_get(self->cfg, f, buf, sizeof(buf));
  if (r < 0)
    return qpy_set_error(r, f);
  return PyUnicode_FromString(buf);
}

static PyObject *
config_layer(ConfigObject *self, PyObject *args)
{
  static const char *const names[] = { "default", "env", "preset",
                                       "explicit" };
  const char *f;
  int r;

  if (!PyArg_ParseTuple(args, "s", &f))
    return NULL;
  r = qrs_sampler_config_layer(self->cfg, f);
  if (r < 0)
    return qpy_set_error(r, f);
  return PyUnicode_FromString(r <= 3 ? names[r] : "?");
}

static PyObject *
config_validate(ConfigObject *self, PyObject *unused)
{
  (void)unused;
  return config_result(self, qrs_sampler_config_validate(self->cfg));
}

static PyObject *
config_hash(ConfigObject *self, PyObject *unused)
{
  char buf[17];
  int r;

  (void)unused;
  r = qrs_sampler_config_hash(self->cfg, buf);
  if (r < 0)
    return qpy_set_error(r, NULL);
  return PyUnicode_FromString(buf);
}

static PyObject *
config_preset(ConfigObject *self, void *unused)
{
  const char *p;

  (void)unused;
  p = qrs_sampler_config_preset(self->cfg);
  if (!p)
    Py_RETURN_NONE;
  return PyUnicode_FromString(p);
}

static PyObject *
config_copy(ConfigObject *self, PyObject *unused)
{
  ConfigObject *o;
  int r;

  (void)unused;
  o = (ConfigObject *)qpy_config_type.tp_alloc(&qpy_config_type, 0);
  if (!o)
    return NULL;
  r = qrs_sampler_config_copy(self->cfg, &o->cfg);
  if (r < 0) {
    Py_DECREF(o);
    return qpy_set_error(r, NULL);
  }
  return (PyObject *)o;
}

static PyMethodDef config_methods[] = {
  { "set", (PyCFunction)config_set, METH_VARARGS,
    "set(field, value): explicit layer, value as text" },
  { "set_arg", (PyCFunction)config_set_arg, METH_VARARGS,
    "set_arg(key, value): a reference qr_* argument (others ignored)" },
  { "unset", (PyCFunction)config_unset, METH_VARARGS,
    "unset(field): remove an explicit value" },
  { "set_preset", (PyCFunction)config_set_preset, METH_VARARGS,
    "set_preset(name or None)" },
  { "load_env", (PyCFunction)config_load_env, METH_VARARGS,
    "load_env(env=None) -> int: the QR_* environment layer" },
  { "get", (PyCFunction)config_get, METH_VARARGS,
    "get(field) -> str: the effective value" },
  { "layer", (PyCFunction)config_layer, METH_VARARGS,
    "layer(field) -> 'default' | 'env' | 'preset' | 'explicit'" },
  { "validate", (PyCFunction)config_validate, METH_NOARGS,
    "validate(): the whole-configuration checks" },
  { "hash", (PyCFunction)config_hash, METH_NOARGS,
    "hash() -> str: the reference's config_hash" },
  { "copy", (PyCFunction)config_copy, METH_NOARGS, "a deep copy" },
  { NULL, NULL, 0, NULL },
};

static PyGetSetDef config_getset[] = {
  { "preset", (getter)config_preset, NULL, "the preset in effect", NULL },
  { NULL, NULL, NULL, NULL, NULL },
};

PyTypeObject qpy_config_type = {
  PyVarObject_HEAD_INIT(NULL, 0)
  .tp_name = "qrs._qrs.Config",
  .tp_basicsize = sizeof(ConfigObject),
  .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
  .tp_doc = "Config(): a sampler configuration (libqrs layers)",
  .tp_new = PyType_GenericNew,
  .tp_init = (initproc)config_init,
  .tp_dealloc = (destructor)config_dealloc,
  .tp_methods = config_methods,
  .tp_getset = config_getset,
};

