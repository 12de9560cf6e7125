/* qrs._qrs: the CPython binding of libqrs (client, sampler config,
   sampler, batch).  A thin layer: every call maps to one libqrs call;
   errors become qrs.QrsError subclasses chosen by the QRS_E_* / errno
   code (qrs/errors.py maps them; this file raises through
   qrs.errors.raise_code).

   Rows are read in place: a C-contiguous buffer (numpy, array, memoryview)
   of f32 ('f'), f16 ('e') or f64 ('d'), or any object with __dlpack__ on
   the CPU (torch tensors, f32/f16/bf16).  Nothing is copied. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <qrs/batch.h>
#include <qrs/client.h>
#include <qrs/sampler.h>

/* ---- errors ---------------------------------------------------------- */

static PyObject *raise_code_fn;   /* qrs.errors.raise_code */

/* Raise the exception for code r with detail (may be NULL or ""); returns
   NULL for `return set_error(...)`. */
static PyObject *
set_error(int r, const char *detail)
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

/* ---- rows: buffer protocol and DLPack -------------------------------- */

/* The DLPack ABI (dlpack.h, v0.8, unversioned capsule "dltensor"). */
struct dl_device { int32_t device_type; int32_t device_id; };
struct dl_dtype { uint8_t code; uint8_t bits; uint16_t lanes; };
struct dl_tensor {
  void *data;
  struct dl_device device;
  int32_t ndim;
  struct dl_dtype dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
};
struct dl_managed {
  struct dl_tensor t;
  void *manager_ctx;
  void (*deleter)(struct dl_managed *);
};
#define DL_CPU 1
#define DL_CUDA_HOST 3
#define DL_INT 0
#define DL_UINT 1
#define DL_FLOAT 2
#define DL_BFLOAT 4

/* A row (or a 2-D block of rows) held for one call. */
struct rows {
  const void *data;
  enum qrs_dtype dtype;
  size_t nrows, ncols, stride;    /* stride in elements */
  Py_buffer view;
  int has_view;
  PyObject *capsule;
  struct dl_managed *dl;
};

static void
rows_release(struct rows *r)
{
  if (r->has_view)
    PyBuffer_Release(&r->view);
  r->has_view = 0;
  if (r->dl) {
    if (r->dl->deleter)
      r->dl->deleter(r->dl);
    r->dl = NULL;
  }
  Py_CLEAR(r->capsule);
}

static int
dtype_name(const char *name, enum qrs_dtype *ret)
{
  if (!strcmp(name, "f32") || !strcmp(name, "float32"))
    *ret = QRS_DTYPE_F32;
  else if (!strcmp(name, "f16") || !strcmp(name, "float16"))
    *ret = QRS_DTYPE_F16;
  else if (!strcmp(name, "bf16") || !strcmp(name, "bfloat16"))
    *ret = QRS_DTYPE_BF16;
  else if (!strcmp(name, "f64") || !strcmp(name, "float64"))
    *ret = QRS_DTYPE_F64;
  else
    return -1;
  return 0;
}

static int
rows_from_dlpack(PyObject *obj, struct rows *r, int want_2d)
{
  struct dl_tensor *t;
  int64_t rows, cols, es;

  r->capsule = PyObject_CallMethod(obj, "__dlpack__", NULL);
  if (!r->capsule)
    return -1;
  r->dl = PyCapsule_GetPointer(r->capsule, "dltensor");
  if (!r->dl)
    return -1;
  /* consumed: the capsule's destructor must not free it again */
  if (PyCapsule_SetName(r->capsule, "used_dltensor") < 0) {
    r->dl = NULL;
    return -1;
  }
  t = &r->dl->t;
  if (t->device.device_type != DL_CPU &&
      t->device.device_type != DL_CUDA_HOST) {
    PyErr_SetString(PyExc_ValueError,
                    "logits must be in host memory (a CPU tensor)");
    return -1;
  }
  if (t->dtype.lanes != 1)
    goto bad_dtype;
  if (t->dtype.code == DL_FLOAT && t->dtype.bits == 32)
    r->dtype = QRS_DTYPE_F32;
  else if (t->dtype.code == DL_FLOAT && t->dtype.bits == 16)
    r->dtype = QRS_DTYPE_F16;
  else if (t->dtype.code == DL_BFLOAT && t->dtype.bits == 16)
    r->dtype = QRS_DTYPE_BF16;
  else if (t->dtype.code == DL_FLOAT && t->dtype.bits == 64)
    r->dtype = QRS_DTYPE_F64;
  else
    goto bad_dtype;
  es = t->dtype.bits / 8;
  if (t->ndim == 1 && !want_2d) {
    rows = 1;
    cols = t->shape[0];
    if (t->strides && cols > 1 && t->strides[0] != 1)
      goto noncontig;
    r->stride = (size_t)cols;
  } else if (t->ndim == 2 && want_2d) {
    rows = t->shape[0];
    cols = t->shape[1];
    if (t->strides && cols > 1 && t->strides[1] != 1)
      goto noncontig;
    r->stride = t->strides && rows > 1 ? (size_t)t->strides[0]
                                       : (size_t)cols;
    if (rows > 1 && r->stride < (size_t)cols)
      goto noncontig;
  } else {
    PyErr_Format(PyExc_ValueError, "logits must be %s, not %d-D",
                 want_2d ? "2-D [rows, vocab]" : "1-D [vocab]",
                 (int)t->ndim);
    return -1;
  }
  r->data = (const char *)t->data + t->byte_offset;
  r->nrows = (size_t)rows;
  r->ncols = (size_t)cols;
  (void)es;
  return 0;
bad_dtype:
  PyErr_Format(PyExc_TypeError,
               "logits dtype (DLPack code %d, %d bits) is not float32, "
               "float16, bfloat16 or float64", t->dtype.code, t->dtype.bits);
  return -1;
noncontig:
  PyErr_SetString(PyExc_ValueError,
                  "logits rows must be contiguous (call .contiguous())");
  return -1;
}

/* Get obj's rows; dtype_hint (NULL or a name) reinterprets a 16-bit
   integer buffer as f16/bf16 (numpy has no bfloat16). */
static int
rows_get(PyObject *obj, const char *dtype_hint, int want_2d, struct rows *r)
{
  Py_buffer *v = &r->view;
  const char *f;
  size_t isz;

  memset(r, 0, sizeof(*r));
  if (!PyObject_CheckBuffer(obj) && PyObject_HasAttrString(obj, "__dlpack__"))
    return rows_from_dlpack(obj, r, want_2d);
  if (PyObject_GetBuffer(obj, v, PyBUF_STRIDES | PyBUF_FORMAT) < 0)
    return -1;
  r->has_view = 1;
  f = v->format ? v->format : "B";
  if (*f == '<' || *f == '=' || *f == '@')
    f++;
  isz = (size_t)v->itemsize;
  if (!strcmp(f, "f") && isz == 4)
    r->dtype = QRS_DTYPE_F32;
  else if (!strcmp(f, "e") && isz == 2)
    r->dtype = QRS_DTYPE_F16;
  else if (!strcmp(f, "d") && isz == 8)
    r->dtype = QRS_DTYPE_F64;
  else if ((!strcmp(f, "h") || !strcmp(f, "H")) && isz == 2 && dtype_hint) {
    if (dtype_name(dtype_hint, &r->dtype) < 0 ||
        (r->dtype != QRS_DTYPE_F16 && r->dtype != QRS_DTYPE_BF16)) {
      PyErr_Format(PyExc_TypeError, "dtype %s does not fit a 16-bit buffer",
                   dtype_hint);
      return -1;
    }
  } else {
    PyErr_Format(PyExc_TypeError,
                 "logits buffer format '%s' is not float32, float16 or "
                 "float64 (bfloat16: pass a 16-bit buffer with "
                 "dtype='bf16', or a torch tensor)", f);
    return -1;
  }
  if (dtype_hint && r->dtype != QRS_DTYPE_F16 &&
      r->dtype != QRS_DTYPE_BF16) {
    enum qrs_dtype d;
    if (dtype_name(dtype_hint, &d) < 0 || d != r->dtype) {
      PyErr_Format(PyExc_TypeError, "dtype %s does not match the buffer's "
                   "format '%s'", dtype_hint, f);
      return -1;
    }
  }
  if (v->ndim == 1 && !want_2d) {
    r->nrows = 1;
    r->ncols = (size_t)v->shape[0];
    if (r->ncols > 1 && v->strides[0] != v->itemsize)
      goto noncontig;
    r->stride = r->ncols;
  } else if (v->ndim == 2 && want_2d) {
    r->nrows = (size_t)v->shape[0];
    r->ncols = (size_t)v->shape[1];
    if (r->ncols > 1 && v->strides[1] != v->itemsize)
      goto noncontig;
    if (v->strides[0] < 0 || v->strides[0] % v->itemsize)
      goto noncontig;
    r->stride = r->nrows > 1 ? (size_t)(v->strides[0] / v->itemsize)
                             : r->ncols;
    if (r->nrows > 1 && r->stride < r->ncols)
      goto noncontig;
  } else {
    PyErr_Format(PyExc_ValueError, "logits must be %s, not %d-D",
                 want_2d ? "2-D [rows, vocab]" : "1-D [vocab]", v->ndim);
    return -1;
  }
  r->data = v->buf;
  return 0;
noncontig:
  PyErr_SetString(PyExc_ValueError,
                  "logits rows must be contiguous (np.ascontiguousarray)");
  return -1;
}

/* ---- Client ---------------------------------------------------------- */

/* A sampler's prefetched draw is a ticket on the qrs_client it was begun
   on, which libqrs cancels through that client (qrs_sampler_free, the
   next step on another client): the qrs_client must outlive it.  So a
   Sampler holds the Client of its prefetch (users counts them), and
   close() with users left only marks the Client closed; the last
   sampler to let go frees the qrs_client. */
typedef struct {
  PyObject_HEAD
  struct qrs_client *c;
  Py_ssize_t users;  /* Samplers whose prefetch may be on c */
  int closed;        /* close() was called: c is freed when users is 0 */
} ClientObject;

static PyTypeObject ClientType;

static int
client_init(ClientObject *self, PyObject *args, PyObject *kw)
{
  static char *kwl[] = { "path", "timeout_ms", "client_name",
                         "no_reconnect", NULL };
  const char *path = NULL, *name = "qrs-python";
  struct qrs_client_options o;
  int timeout = 0, norec = 0, r;

  if (!PyArg_ParseTupleAndKeywords(args, kw, "|zizp", kwl, &path, &timeout,
                                   &name, &norec))
    return -1;
  if (self->users > 0) {
    PyErr_SetString(PyExc_RuntimeError,
                    "the client has samplers prefetching on it");
    return -1;
  }
  memset(&o, 0, sizeof(o));
  o.client_name = name;
  o.timeout_ms = timeout;
  o.no_reconnect = norec;
  qrs_client_free(self->c);
  self->c = NULL;
  self->closed = 0;
  Py_BEGIN_ALLOW_THREADS
  r = qrs_client_new(path, &o, &self->c);
  Py_END_ALLOW_THREADS
  if (r < 0) {
    char msg[256];
    snprintf(msg, sizeof(msg), "connecting to qrsd at %s",
             path ? path : (getenv("QRS_SOCKET") ? getenv("QRS_SOCKET")
                                                 : QRS_DEFAULT_SOCKET));
    set_error(r, msg);
    return -1;
  }
  return 0;
}

static void
client_dealloc(ClientObject *self)
{
  qrs_client_free(self->c);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
client_ok(ClientObject *self)
{
  if (!self->c || self->closed) {
    PyErr_SetString(PyExc_ValueError, "the client is closed");
    return 0;
  }
  return 1;
}

static PyObject *
client_close(ClientObject *self, PyObject *unused)
{
  (void)unused;
  self->closed = 1;
  if (self->users == 0) {
    qrs_client_free(self->c);
    self->c = NULL;
  }
  Py_RETURN_NONE;
}

static PyObject *
draw_dict(const struct qrs_draw *d)
{
  return Py_BuildValue(
      "{s:d,s:d,s:d,s:I,s:s,s:s,s:s,s:O,s:K,s:K,s:s,s:O}",
      "u", d->u, "z", d->z, "sample_mean", d->sample_mean,
      "sample_count", d->sample_count, "source", d->source,
      "served_by", d->served_by, "amplifier", d->amplifier,
      "fallback", d->fallback ? Py_True : Py_False,
      "nonce", (unsigned long long)d->nonce,
      "byte_sum", (unsigned long long)d->byte_sum,
      "served_type", d->served_type,
      "production", d->production ? Py_True : Py_False);
}

static PyObject *
client_draw(ClientObject *self, PyObject *args, PyObject *kw)
{
  static char *kwl[] = { "source", "amplifier", "sample_count", "salt",
                         "step", "prev_token", NULL };
  const char *source = NULL, *amp = NULL;
  unsigned int count = 0;
  Py_buffer salt = { 0 };
  unsigned long long step = 0;
  long long prev = -1;
  struct qrs_draw_request rq;
  struct qrs_commitment cm;
  struct qrs_draw d;
  int r;

  if (!PyArg_ParseTupleAndKeywords(args, kw, "|zzIy*KL", kwl, &source, &amp,
                                   &count, &salt, &step, &prev))
    return NULL;
  if (!client_ok(self)) {
    PyBuffer_Release(&salt);
    return NULL;
  }
  memset(&rq, 0, sizeof(rq));
  rq.source = source;
  rq.amplifier = amp;
  rq.sample_count = count;
  if (salt.buf) {
    cm.salt = salt.buf;
    cm.salt_len = (size_t)salt.len;
    cm.step = step;
    cm.prev_token_id = prev;
    rq.commitment = &cm;
  }
  Py_BEGIN_ALLOW_THREADS
  r = qrs_client_draw(self->c, &rq, &d);
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&salt);
  if (r < 0)
    return set_error(r, qrs_client_errmsg(self->c));
  return draw_dict(&d);
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

static PyObject *
client_status(ClientObject *self, PyObject *unused)
{
  struct qrs_status *st;
  PyObject *src, *res;
  int r;

  (void)unused;
  if (!client_ok(self))
    return NULL;
  Py_BEGIN_ALLOW_THREADS
  r = qrs_client_status(self->c, &st);
  Py_END_ALLOW_THREADS
  if (r < 0)
    return set_error(r, qrs_client_errmsg(self->c));
  src = source_list(st->sources, st->n_sources);
  res = src ? Py_BuildValue(
                  "{s:s,s:I,s:I,s:K,s:s,s:s,s:I,s:K,s:K,s:K,s:K,s:N}",
                  "server_version", st->server_version,
                  "protocol_version", st->protocol_version, "pid", st->pid,
                  "uptime_ms", (unsigned long long)st->uptime_ms,
                  "socket_path", st->socket_path,
                  "default_source", st->default_source,
                  "connections", st->connections,
                  "requests", (unsigned long long)st->requests,
                  "draws", (unsigned long long)st->draws,
                  "bytes", (unsigned long long)st->bytes,
                  "errors", (unsigned long long)st->errors, "sources", src)
            : NULL;
  qrs_status_free(st);
  return res;
}

static PyObject *
client_health(ClientObject *self, PyObject *unused)
{
  struct qrs_health *h;
  PyObject *src, *res;
  int r;

  (void)unused;
  if (!client_ok(self))
    return NULL;
  Py_BEGIN_ALLOW_THREADS
  r = qrs_client_health(self->c, &h);
  Py_END_ALLOW_THREADS
  if (r < 0)
    return set_error(r, qrs_client_errmsg(self->c));
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

  (void)unused;
  if (!client_ok(self))
    return NULL;
  qrs_client_get_server_info(self->c, &si);
  return Py_BuildValue("{s:I,s:s,s:s,s:s,s:O,s:O,s:s,s:I,s:I,s:I}",
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
}

static PyObject *
client_socket_path(ClientObject *self, void *unused)
{
  (void)unused;
  if (!client_ok(self))
    return NULL;
  return PyUnicode_FromString(qrs_client_socket_path(self->c));
}

static PyMethodDef client_methods[] = {
  { "draw", (PyCFunction)(void (*)(void))client_draw,
    METH_VARARGS | METH_KEYWORDS,
    "draw(source=None, amplifier=None, sample_count=0, salt=None, step=0, "
    "prev_token=-1) -> dict: one amplified draw" },
  { "status", (PyCFunction)client_status, METH_NOARGS,
    "status() -> dict: qrsd's status" },
  { "health", (PyCFunction)client_health, METH_NOARGS,
    "health() -> dict: qrsd's health" },
  { "server_info", (PyCFunction)client_server_info, METH_NOARGS,
    "server_info() -> dict: the HELLO reply" },
  { "close", (PyCFunction)client_close, METH_NOARGS, "close the connection" },
  { NULL, NULL, 0, NULL },
};

static PyGetSetDef client_getset[] = {
  { "socket_path", (getter)client_socket_path, NULL, "the socket path", NULL },
  { NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject ClientType = {
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

/* ---- Config ---------------------------------------------------------- */

typedef struct {
  PyObject_HEAD
  struct qrs_sampler_config *cfg;
} ConfigObject;

static PyTypeObject ConfigType;

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
    set_error(r, NULL);
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
    return set_error(r, qrs_sampler_config_error(self->cfg));
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
    return set_error(r, f);
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
    return set_error(r, f);
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
    return set_error(r, NULL);
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
  o = (ConfigObject *)ConfigType.tp_alloc(&ConfigType, 0);
  if (!o)
    return NULL;
  r = qrs_sampler_config_copy(self->cfg, &o->cfg);
  if (r < 0) {
    Py_DECREF(o);
    return set_error(r, NULL);
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

static PyTypeObject ConfigType = {
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

/* ---- Sampler --------------------------------------------------------- */

typedef struct {
  PyObject_HEAD
  struct qrs_sampler *s;
  ClientObject *prefetch_client;  /* kept alive while a prefetch may be
                                     outstanding on it */
  size_t vocab;
} SamplerObject;

static PyTypeObject SamplerType;

/* Forget the prefetch (on its client, still alive) and let the client
   go; a closed client with no other users is freed. */
static void
sampler_release_client(SamplerObject *self)
{
  ClientObject *co = self->prefetch_client;

  if (!co)
    return;
  qrs_sampler_cancel_prefetch(self->s);
  self->prefetch_client = NULL;
  if (--co->users == 0 && co->closed) {
    qrs_client_free(co->c);
    co->c = NULL;
  }
  Py_DECREF(co);
}

/* The sampler is about to step or prefetch on co. */
static void
sampler_hold_client(SamplerObject *self, ClientObject *co)
{
  if (self->prefetch_client == co)
    return;
  sampler_release_client(self);
  self->prefetch_client = (ClientObject *)Py_NewRef(co);
  co->users++;
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
  if (cfg != Py_None && !PyObject_TypeCheck(cfg, &ConfigType)) {
    PyErr_SetString(PyExc_TypeError, "config must be a qrs.Config or None");
    return -1;
  }
  if (vocab <= 0) {
    PyErr_SetString(PyExc_ValueError, "vocab_size must be positive");
    return -1;
  }
  sampler_release_client(self);
  qrs_sampler_free(self->s);
  self->s = NULL;
  r = qrs_sampler_new(cfg == Py_None ? NULL : ((ConfigObject *)cfg)->cfg,
                      (size_t)vocab, &self->s);
  if (r < 0) {
    set_error(r, cfg == Py_None
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
  /* the prefetch is cancelled on its client, which must be alive */
  sampler_release_client(self);
  qrs_sampler_free(self->s);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
record_dict(const struct qrs_token_record *r)
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

static PyObject *
token_result(int r, uint32_t tok, const struct qrs_token_record *rec,
             int want_rec, const char *detail)
{
  if (r < 0)
    return set_error(r, detail);
  if (r == 1)                     /* bypass */
    Py_RETURN_NONE;
  if (want_rec)
    return Py_BuildValue("(IN)", tok, record_dict(rec));
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
  uint32_t tok = 0;

  if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O|zp", kwl, &ClientType,
                                   &cobj, &lobj, &dt, &want))
    return NULL;
  if (!client_ok((ClientObject *)cobj))
    return NULL;
  if (rows_get(lobj, dt, 0, &rw) < 0 || check_vocab(self, rw.ncols) < 0) {
    rows_release(&rw);
    return NULL;
  }
  sampler_hold_client(self, (ClientObject *)cobj);
  Py_BEGIN_ALLOW_THREADS
  r = qrs_sampler_sample_token(self->s, ((ClientObject *)cobj)->c, rw.data,
                               rw.dtype, rw.ncols, &tok,
                               want ? &rec : NULL);
  Py_END_ALLOW_THREADS
  rows_release(&rw);
  return token_result(r, tok, &rec, want,
                      qrs_client_errmsg(((ClientObject *)cobj)->c));
}

static PyObject *
sampler_select_u(SamplerObject *self, PyObject *args, PyObject *kw)
{
  static char *kwl[] = { "logits", "u", "dtype", "record", NULL };
  PyObject *lobj;
  const char *dt = NULL;
  double u;
  int want = 0, r;
  struct rows rw;
  struct qrs_token_record rec;
  uint32_t tok = 0;

  if (!PyArg_ParseTupleAndKeywords(args, kw, "Od|zp", kwl, &lobj, &u, &dt,
                                   &want))
    return NULL;
  if (rows_get(lobj, dt, 0, &rw) < 0 || check_vocab(self, rw.ncols) < 0) {
    rows_release(&rw);
    return NULL;
  }
  r = qrs_sampler_select_u(self->s, rw.data, rw.dtype, rw.ncols, u, &tok,
                           want ? &rec : NULL);
  rows_release(&rw);
  return token_result(r, tok, &rec, want, NULL);
}

static PyObject *
sampler_prefetch(SamplerObject *self, PyObject *args)
{
  PyObject *cobj;
  int r;

  if (!PyArg_ParseTuple(args, "O!", &ClientType, &cobj))
    return NULL;
  if (!client_ok((ClientObject *)cobj))
    return NULL;
  sampler_hold_client(self, (ClientObject *)cobj);
  r = qrs_sampler_prefetch(self->s, ((ClientObject *)cobj)->c);
  if (r < 0)
    return set_error(r, qrs_client_errmsg(((ClientObject *)cobj)->c));
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
    return set_error(r, "salt must be 1..256 bytes");
  Py_RETURN_NONE;
}

static PyObject *
sampler_reset(SamplerObject *self, PyObject *unused)
{
  int r;

  (void)unused;
  r = qrs_sampler_reset(self->s);
  if (r < 0)
    return set_error(r, NULL);
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
    return set_error(r, NULL);
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
    return set_error(r, p);
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
    return set_error(r, p ? p : "closing the logits dump");
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

static PyMethodDef sampler_methods[] = {
  { "sample_token", (PyCFunction)(void (*)(void))sampler_sample_token,
    METH_VARARGS | METH_KEYWORDS,
    "sample_token(client, logits, dtype=None, record=False) -> token, "
    "(token, record) or None (bypass)" },
  { "select_u", (PyCFunction)(void (*)(void))sampler_select_u,
    METH_VARARGS | METH_KEYWORDS,
    "select_u(logits, u, dtype=None, record=False): the step with u only" },
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
  { NULL, NULL, 0, NULL },
};

static PyTypeObject SamplerType = {
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

/* ---- batch ----------------------------------------------------------- */

typedef struct {
  PyObject_HEAD
  struct qrs_pool *pool;
  struct qrs_batch_row *rows;
  struct qrs_token_record *recs;
  size_t cap;
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
    set_error(r, "threads must be 0..256");
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
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* sample(logits[rows, vocab], samplers, client=None, u=None, dtype=None,
   records=False) -> (tokens, statuses, records or None): samplers[i]
   samples row i in one qrs_sample_batch() call; token -1 where the status
   is not 0 (1: bypass, negative: the error code).  client: one Client for
   every row, or a sequence of one per row (an engine with more requests
   than one connection's in-flight draws spreads them over several). */
static PyObject *
pool_sample(PoolObject *self, PyObject *args, PyObject *kw)
{
  static char *kwl[] = { "logits", "samplers", "client", "u", "dtype",
                         "records", "one_hot", NULL };
  PyObject *lobj, *sseq, *cobj = Py_None, *uobj = Py_None;
  PyObject *fast = NULL, *ufast = NULL, *cfast = NULL, *res = NULL;
  PyObject *toks = NULL, *stats = NULL, *recl = NULL, *item;
  ClientObject *co;
  struct qrs_client *c = NULL;
  const char *dt = NULL;
  int want = 0, one_hot = 0, r;
  struct rows rw;
  Py_ssize_t n, i;

  memset(&rw, 0, sizeof(rw));
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OOzpp", kwl, &lobj, &sseq,
                                   &cobj, &uobj, &dt, &want, &one_hot))
    return NULL;
  if (cobj != Py_None && PyObject_TypeCheck(cobj, &ClientType)) {
    if (!client_ok((ClientObject *)cobj))
      return NULL;
    c = ((ClientObject *)cobj)->c;
  } else if (cobj != Py_None) {
    if (!PyList_Check(cobj) && !PyTuple_Check(cobj)) {
      PyErr_SetString(PyExc_TypeError, "client must be a qrs.Client or a "
                      "list of them (one per row)");
      return NULL;
    }
    cfast = PySequence_Fast(cobj, "client must be a sequence");
    if (!cfast)
      return NULL;
  } else if (uobj == Py_None) {
    PyErr_SetString(PyExc_ValueError, "pass a client or u values");
    return NULL;
  }
  if (rows_get(lobj, dt, 1, &rw) < 0)
    goto out;
  if (one_hot && rw.has_view && rw.view.readonly) {
    PyErr_SetString(PyExc_ValueError, "one_hot writes the rows: the logits "
                    "buffer is read-only");
    goto out;
  }
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
  if ((size_t)n > self->cap) {
    struct qrs_batch_row *nr;
    struct qrs_token_record *nrec;
    nr = PyMem_Realloc(self->rows, (size_t)n * sizeof(*nr));
    if (!nr) {
      PyErr_NoMemory();
      goto out;
    }
    self->rows = nr;
    nrec = PyMem_Realloc(self->recs, (size_t)n * sizeof(*nrec));
    if (!nrec) {
      PyErr_NoMemory();
      goto out;
    }
    self->recs = nrec;
    self->cap = (size_t)n;
  }
  for (i = 0; i < n; i++) {
    SamplerObject *so;
    item = PySequence_Fast_GET_ITEM(fast, i);
    if (!PyObject_TypeCheck(item, &SamplerType)) {
      PyErr_Format(PyExc_TypeError, "samplers[%zd] is not a qrs.Sampler", i);
      goto out;
    }
    so = (SamplerObject *)item;
    if (check_vocab(so, rw.ncols) < 0)
      goto out;
    co = c ? (ClientObject *)cobj : NULL;
    if (cfast) {
      item = PySequence_Fast_GET_ITEM(cfast, i);
      if (!PyObject_TypeCheck(item, &ClientType)) {
        PyErr_Format(PyExc_TypeError, "client[%zd] is not a qrs.Client", i);
        goto out;
      }
      co = (ClientObject *)item;
      if (!client_ok(co))
        goto out;
    }
    memset(&self->rows[i], 0, sizeof(self->rows[i]));
    self->rows[i].sampler = so->s;
    self->rows[i].client = co ? co->c : NULL;
    self->rows[i].record = want ? &self->recs[i] : NULL;
    if (ufast) {
      self->rows[i].u = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(ufast, i));
      if (self->rows[i].u == -1.0 && PyErr_Occurred())
        goto out;
    }
    if (co)
      sampler_hold_client(so, co);
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
    set_error(r, "sampling the batch");
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
      PyList_SET_ITEM(recl, i, st == 0 ? record_dict(&self->recs[i])
                                       : Py_NewRef(Py_None));
  }
  res = PyTuple_Pack(3, toks, stats, recl);
out:
  Py_XDECREF(toks);
  Py_XDECREF(stats);
  Py_XDECREF(recl);
  Py_XDECREF(fast);
  Py_XDECREF(ufast);
  Py_XDECREF(cfast);
  rows_release(&rw);
  return res;
}

static PyMethodDef pool_methods[] = {
  { "sample", (PyCFunction)(void (*)(void))pool_sample,
    METH_VARARGS | METH_KEYWORDS,
    "sample(logits, samplers, client=None, u=None, dtype=None, "
    "records=False, one_hot=False) -> (tokens, statuses, records); "
    "client: a Client, or a list of one per row; "
    "one_hot: each sampled row is then written over in place, -inf but 0 "
    "at its token (qrs_sample_batch_one_hot())" },
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

static PyTypeObject PoolType = {
  PyVarObject_HEAD_INIT(NULL, 0)
  .tp_name = "qrs._qrs.Pool",
  .tp_basicsize = sizeof(PoolObject),
  .tp_flags = Py_TPFLAGS_DEFAULT,
  .tp_doc = "Pool(threads=1): threads for batch sampling (0: one per online CPU)",
  .tp_new = PyType_GenericNew,
  .tp_init = (initproc)pool_init,
  .tp_dealloc = (destructor)pool_dealloc,
  .tp_methods = pool_methods,
  .tp_getset = pool_getset,
};

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
  if (rows_get(obj, dt, 0, &rw) < 0) {
    rows_release(&rw);
    return NULL;
  }
  if (rw.has_view && rw.view.readonly) {
    rows_release(&rw);
    PyErr_SetString(PyExc_ValueError, "the logits row is read-only");
    return NULL;
  }
  r = qrs_force_one_hot((void *)rw.data, rw.dtype, rw.ncols, tok);
  rows_release(&rw);
  if (r < 0)
    return set_error(r, "token out of the row");
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

static size_t
elem_size(enum qrs_dtype t)
{
  return t == QRS_DTYPE_F64 ? 8 : t == QRS_DTYPE_F32 ? 4 : 2;
}

/* _bench_c(logits[rows, vocab], samplers, client=None, u=None) ->
   seconds: the C baseline of tools/qrs-bench/pybench.py, timed in C with the GIL
   released: row i sampled by samplers[i], one libqrs call per row
   (qrs_sampler_sample_token() through client, else
   qrs_sampler_select_u() with u[i]), as a C engine calls it. */
static PyObject *
py_bench_c(PyObject *self, PyObject *args, PyObject *kw)
{
  static char *kwl[] = { "logits", "samplers", "client", "u", NULL };
  PyObject *lobj, *sseq, *cobj = Py_None, *uobj = Py_None, *res = NULL;
  PyObject *fast = NULL, *ufast = NULL, *item;
  struct qrs_sampler **ss = NULL;
  double *us = NULL;
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
    if (!PyObject_TypeCheck(cobj, &ClientType) ||
        !client_ok((ClientObject *)cobj)) {
      if (!PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "client must be a qrs.Client");
      return NULL;
    }
    c = ((ClientObject *)cobj)->c;
  }
  if (rows_get(lobj, NULL, 1, &rw) < 0)
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
    item = PySequence_Fast_GET_ITEM(fast, i);
    if (!PyObject_TypeCheck(item, &SamplerType)) {
      PyErr_Format(PyExc_TypeError, "samplers[%zd] is not a qrs.Sampler", i);
      goto out;
    }
    if (check_vocab((SamplerObject *)item, rw.ncols) < 0)
      goto out;
    ss[i] = ((SamplerObject *)item)->s;
    if (c)
      sampler_hold_client((SamplerObject *)item, (ClientObject *)cobj);
    else {
      us[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(ufast, i));
      if (us[i] == -1.0 && PyErr_Occurred())
        goto out;
    }
  }
  Py_BEGIN_ALLOW_THREADS
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (i = 0; i < n && r >= 0; i++) {
    const char *row = (const char *)rw.data +
                      (size_t)i * rw.stride * elem_size(rw.dtype);
    r = c ? qrs_sampler_sample_token(ss[i], c, row, rw.dtype, rw.ncols, &tok,
                                     NULL)
          : qrs_sampler_select_u(ss[i], row, rw.dtype, rw.ncols, us[i], &tok,
                                 NULL);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  Py_END_ALLOW_THREADS
  if (r < 0) {
    set_error(r, c ? qrs_client_errmsg(c) : "the C baseline");
    goto out;
  }
  res = PyFloat_FromDouble((double)(t1.tv_sec - t0.tv_sec) +
                           (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
out:
  PyMem_Free(ss);
  PyMem_Free(us);
  Py_XDECREF(fast);
  Py_XDECREF(ufast);
  rows_release(&rw);
  return res;
}

static PyMethodDef module_methods[] = {
  { "_set_raise", py_set_raise, METH_O, NULL },
  { "_bench_c", (PyCFunction)(void (*)(void))py_bench_c,
    METH_VARARGS | METH_KEYWORDS,
    "_bench_c(logits, samplers, client=None, u=None) -> seconds: one C "
    "libqrs call per row, timed in C (tools/qrs-bench/pybench.py's baseline)" },
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

  if (PyType_Ready(&ClientType) < 0 || PyType_Ready(&ConfigType) < 0 ||
      PyType_Ready(&SamplerType) < 0 || PyType_Ready(&PoolType) < 0)
    return NULL;
  m = PyModule_Create(&moduledef);
  if (!m)
    return NULL;
  if (PyModule_AddObjectRef(m, "Client", (PyObject *)&ClientType) < 0 ||
      PyModule_AddObjectRef(m, "Config", (PyObject *)&ConfigType) < 0 ||
      PyModule_AddObjectRef(m, "Sampler", (PyObject *)&SamplerType) < 0 ||
      PyModule_AddObjectRef(m, "Pool", (PyObject *)&PoolType) < 0 ||
      PyModule_AddStringConstant(m, "libqrs_version", qrs_version()) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
