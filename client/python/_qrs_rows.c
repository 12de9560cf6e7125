/* qrs._qrs: logits rows read in place, through the buffer protocol (a
   C-contiguous buffer of f32 'f', f16 'e' or f64 'd': numpy, array,
   memoryview) or DLPack (any object with __dlpack__ on the CPU: torch
   tensors, f32/f16/bf16/f64).  Nothing is copied. */
#include "_qrs.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23    /* Linux 5.14; older C headers lack it */
#endif

/* The DLPack ABI (dlpack.h): v0.8's unversioned capsule "dltensor", and
   v1's "dltensor_versioned", whose flags say read-only or copied. */
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
struct dl_managed_versioned {
  struct { uint32_t major, minor; } version;  /* this far in every major */
  void *manager_ctx;
  void (*deleter)(struct dl_managed_versioned *);
  uint64_t flags;
  struct dl_tensor t;
};
#define DL_FLAG_READ_ONLY 0x1
#define DL_FLAG_IS_COPIED 0x2
#define DL_CPU 1
#define DL_CUDA_HOST 3
#define DL_INT 0
#define DL_UINT 1
#define DL_FLOAT 2
#define DL_BFLOAT 4

void
qpy_rows_release(struct rows *r)
{
  if (r->has_view)
    PyBuffer_Release(&r->view);
  r->has_view = 0;
  if (r->dl) {
    if (r->dl->deleter)
      r->dl->deleter(r->dl);
    r->dl = NULL;
  }
  if (r->dlv) {
    if (r->dlv->deleter)
      r->dlv->deleter(r->dlv);
    r->dlv = NULL;
  }
  Py_CLEAR(r->capsule);
}

/* Whether the mappings in /proc/self/maps (in address order) cover
   [lo, hi) with writable ones. */
static int
maps_writable(unsigned long lo, unsigned long hi)
{
  unsigned long a, b, at = lo;
  char perms[5];
  FILE *f;

  f = fopen("/proc/self/maps", "re");
  if (!f)
    return 0;
  while (at < hi &&
         fscanf(f, "%lx-%lx %4s%*[^\n]", &a, &b, perms) == 3) {
    if (a > at)
      break;                      /* a hole */
    if (b > at) {
      if (perms[1] != 'w')
        break;
      at = b;
    }
  }
  fclose(f);
  return at >= hi;
}

/* Whether this process may write [p, p + len): a write to a page mapped
   read-only (a file mapped so, as a torch tensor's memory) is SIGSEGV,
   which no DLPack producer has to tell.  MADV_POPULATE_WRITE faults the
   pages in writable, which the write would do anyway, or fails where a
   write would fault; where it cannot tell (EINVAL: a kernel before 5.14,
   a mapping it does not populate, and a read-only one), the mappings
   tell. */
static int
mem_writable(const void *p, size_t len)
{
  unsigned long page, lo, hi;

  if (len == 0)
    return 1;
  page = (unsigned long)sysconf(_SC_PAGESIZE);
  lo = (unsigned long)p & ~(page - 1);
  hi = ((unsigned long)p + len + page - 1) & ~(page - 1);
  if (madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE) == 0)
    return 1;
  return errno == EINVAL && maps_writable(lo, hi);
}

int
qpy_rows_readonly(const struct rows *r, const char *what)
{
  size_t len;

  if (r->has_view) {
    if (!r->view.readonly)
      return 0;
  } else if (r->dlv && (r->dlv->flags & DL_FLAG_IS_COPIED)) {
    PyErr_Format(PyExc_ValueError, "%s is a copy the DLPack producer "
                 "made: a write would not reach the tensor", what);
    return 1;
  } else if (!r->dlv || !(r->dlv->flags & DL_FLAG_READ_ONLY)) {
    len = r->nrows ? ((r->nrows - 1) * r->stride + r->ncols) *
                         qpy_elem_size(r->dtype)
                   : 0;
    if (mem_writable(r->data, len))
      return 0;
  }
  PyErr_Format(PyExc_ValueError, "%s is read-only", what);
  return 1;
}

size_t
qpy_elem_size(enum qrs_dtype t)
{
  return t == QRS_DTYPE_F64 ? 8 : t == QRS_DTYPE_F32 ? 4 : 2;
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

/* r's rows, columns and row stride from an ndim-D shape with strides in
   elements (NULL: C-contiguous), as both the buffer protocol and DLPack
   give them: 1-D [vocab] or 2-D [rows, vocab] as want_2d says, each row
   contiguous.  fix names the caller's remedy for a non-contiguous row. */
static int
rows_shape(struct rows *r, int ndim, const int64_t *shape,
           const int64_t *strides, int want_2d, const char *fix)
{
  int64_t rows, cols;

  if (ndim == 1 && !want_2d) {
    rows = 1;
    cols = shape[0];
    if (strides && cols > 1 && strides[0] != 1)
      goto noncontig;
    r->stride = (size_t)cols;
  } else if (ndim == 2 && want_2d) {
    rows = shape[0];
    cols = shape[1];
    if (strides && cols > 1 && strides[1] != 1)
      goto noncontig;
    r->stride = strides && rows > 1 ? (size_t)strides[0] : (size_t)cols;
    if (rows > 1 && r->stride < (size_t)cols)
      goto noncontig;
  } else {
    PyErr_Format(PyExc_ValueError, "logits must be %s, not %d-D",
                 want_2d ? "2-D [rows, vocab]" : "1-D [vocab]", ndim);
    return -1;
  }
  r->nrows = (size_t)rows;
  r->ncols = (size_t)cols;
  return 0;
noncontig:
  PyErr_Format(PyExc_ValueError, "logits rows must be contiguous (%s)",
               fix);
  return -1;
}

/* obj.__dlpack__(max_version=(1, 0)), or obj.__dlpack__() from a
   producer that takes no max_version. */
static PyObject *
dlpack_capsule(PyObject *obj)
{
  PyObject *fn, *noargs, *kw, *cap = NULL;

  fn = PyObject_GetAttrString(obj, "__dlpack__");
  if (!fn)
    return NULL;
  noargs = PyTuple_New(0);
  kw = Py_BuildValue("{s:(ii)}", "max_version", 1, 0);
  if (noargs && kw) {
    cap = PyObject_Call(fn, noargs, kw);
    if (!cap && PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_Clear();
      cap = PyObject_CallNoArgs(fn);
    }
  }
  Py_XDECREF(kw);
  Py_XDECREF(noargs);
  Py_DECREF(fn);
  return cap;
}

static int
rows_from_dlpack(PyObject *obj, struct rows *r, int want_2d)
{
  struct dl_tensor *t;

  r->capsule = dlpack_capsule(obj);
  if (!r->capsule)
    return -1;
  /* consumed once renamed: the capsule's destructor must not free it */
  if (PyCapsule_IsValid(r->capsule, "dltensor_versioned")) {
    r->dlv = PyCapsule_GetPointer(r->capsule, "dltensor_versioned");
    if (PyCapsule_SetName(r->capsule, "used_dltensor_versioned") < 0) {
      r->dlv = NULL;
      return -1;
    }
    if (r->dlv->version.major != 1) {
      PyErr_Format(PyExc_TypeError, "DLPack version %u.%u is not 1.x",
                   (unsigned)r->dlv->version.major,
                   (unsigned)r->dlv->version.minor);
      return -1;
    }
    t = &r->dlv->t;
  } else {
    r->dl = PyCapsule_GetPointer(r->capsule, "dltensor");
    if (!r->dl)
      return -1;
    if (PyCapsule_SetName(r->capsule, "used_dltensor") < 0) {
      r->dl = NULL;
      return -1;
    }
    t = &r->dl->t;
  }
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
  if (rows_shape(r, (int)t->ndim, t->shape, t->strides, want_2d,
                 "call .contiguous()") < 0)
    return -1;
  r->data = (const char *)t->data + t->byte_offset;
  return 0;
bad_dtype:
  PyErr_Format(PyExc_TypeError,
               "logits dtype (DLPack code %d, %d bits) is not float32, "
               "float16, bfloat16 or float64", t->dtype.code, t->dtype.bits);
  return -1;
}

/* The buffer's dtype from its format, or from dtype_hint (NULL or a name)
   for a 16-bit integer buffer. */
static int
buffer_dtype(const Py_buffer *v, const char *dtype_hint, enum qrs_dtype *ret)
{
  const char *f = v->format ? v->format : "B";
  size_t isz = (size_t)v->itemsize;
  enum qrs_dtype d;

  if (*f == '<' || *f == '=' || *f == '@')
    f++;
  if (!strcmp(f, "f") && isz == 4)
    *ret = QRS_DTYPE_F32;
  else if (!strcmp(f, "e") && isz == 2)
    *ret = QRS_DTYPE_F16;
  else if (!strcmp(f, "d") && isz == 8)
    *ret = QRS_DTYPE_F64;
  else if ((!strcmp(f, "h") || !strcmp(f, "H")) && isz == 2 && dtype_hint) {
    if (dtype_name(dtype_hint, ret) < 0 ||
        (*ret != QRS_DTYPE_F16 && *ret != QRS_DTYPE_BF16)) {
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
  if (dtype_hint && *ret != QRS_DTYPE_F16 && *ret != QRS_DTYPE_BF16) {
    if (dtype_name(dtype_hint, &d) < 0 || d != *ret) {
      PyErr_Format(PyExc_TypeError, "dtype %s does not match the buffer's "
                   "format '%s'", dtype_hint, f);
      return -1;
    }
  }
  return 0;
}

int
qpy_rows_get(PyObject *obj, const char *dtype_hint, int want_2d,
             struct rows *r)
{
  Py_buffer *v = &r->view;
  int64_t shape[2], strides[2];
  int i;

  memset(r, 0, sizeof(*r));
  if (!PyObject_CheckBuffer(obj) && PyObject_HasAttrString(obj, "__dlpack__"))
    return rows_from_dlpack(obj, r, want_2d);
  if (PyObject_GetBuffer(obj, v, PyBUF_STRIDES | PyBUF_FORMAT) < 0)
    return -1;
  r->has_view = 1;
  if (buffer_dtype(v, dtype_hint, &r->dtype) < 0)
    return -1;
  /* The strides in elements for rows_shape(); one that is not a whole
     number of elements becomes 0, which no check there takes for a
     contiguous row.  A row stride that is negative or not a whole number
     of elements is refused here: rows_shape() takes the row stride as it
     comes. */
  for (i = 0; i < v->ndim && i < 2; i++) {
    shape[i] = (int64_t)v->shape[i];
    strides[i] = v->strides[i] % v->itemsize
                     ? 0 : (int64_t)(v->strides[i] / v->itemsize);
  }
  if (v->ndim == 2 && want_2d &&
      (v->strides[0] < 0 || v->strides[0] % v->itemsize)) {
    PyErr_SetString(PyExc_ValueError,
                    "logits rows must be contiguous (np.ascontiguousarray)");
    return -1;
  }
  if (rows_shape(r, v->ndim, shape, strides, want_2d,
                 "np.ascontiguousarray") < 0)
    return -1;
  r->data = v->buf;
  return 0;
}
