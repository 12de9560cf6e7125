/* qrs._qrs, internal: what the extension's files share.  Not installed;
   every name here is prefixed qpy_ (the extension may be linked with the
   static libqrs, whose internal symbols are not prefixed qrs_). */
#ifndef QRS_PY_QRS_H
#define QRS_PY_QRS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>
#include <stdint.h>

#include <qrs/batch.h>
#include <qrs/client.h>
#include <qrs/sampler.h>

/* ---- errors (_qrs.c) ------------------------------------------------- */

/* Raise the exception for code r with detail (may be NULL or ""); returns
   NULL for `return qpy_set_error(...)`. */
PyObject *qpy_set_error(int r, const char *detail);

/* ---- rows (_qrs_rows.c) ---------------------------------------------- */

struct dl_managed;
struct dl_managed_versioned;

/* A row (or a 2-D block of rows) held for one call: qpy_rows_get() fills
   it, qpy_rows_release() lets it go (also after a failed get). */
struct rows {
  const void *data;
  enum qrs_dtype dtype;
  size_t nrows, ncols, stride;    /* stride in elements */
  Py_buffer view;
  int has_view;
  PyObject *capsule;
  struct dl_managed *dl;          /* DLPack 0.x */
  struct dl_managed_versioned *dlv;  /* DLPack 1.x */
};

/* Get obj's rows in place (a buffer or __dlpack__), 1-D or 2-D as want_2d
   says; dtype_hint (NULL or a name) reinterprets a 16-bit integer buffer
   as f16/bf16 (numpy has no bfloat16). */
int qpy_rows_get(PyObject *obj, const char *dtype_hint, int want_2d,
                 struct rows *r);
void qpy_rows_release(struct rows *r);
/* Whether the rows may not be written in place (sets ValueError "<what>
   is read-only" then): a read-only buffer; a DLPack tensor its producer
   marks read-only or copied, or whose memory this process may not write
   (a file mapped read-only: torch has no read-only tensors). */
int qpy_rows_readonly(const struct rows *r, const char *what);
size_t qpy_elem_size(enum qrs_dtype t);

/* ---- Client (_qrs_client.c) ------------------------------------------ */

/* One connection to qrsd (a qrs_client) and who holds it: the Client
   that opened it, until close() or the next __init__(); each call on it
   with the GIL released, for the call; each Sampler whose prefetched draw
   may be on it (libqrs cancels that ticket through the qrs_client, on
   qrs_sampler_free() or a step on another client).  The last reference
   frees it, so a close() while calls are in flight closes the socket
   when the last of them returns.  References change with the GIL held. */
struct qpy_conn {
  struct qrs_client *c;
  Py_ssize_t refs;
};

typedef struct {
  PyObject_HEAD
  struct qpy_conn *conn;  /* NULL: closed, or never opened */
} ClientObject;

extern PyTypeObject qpy_client_type;

/* A reference on the client's connection, for a call; NULL with
   ValueError "the client is closed" set. */
struct qpy_conn *qpy_client_conn(ClientObject *self);
struct qpy_conn *qpy_conn_ref(struct qpy_conn *conn);
/* Drop a reference (conn may be NULL); the last frees the qrs_client. */
void qpy_conn_unref(struct qpy_conn *conn);

/* ---- Config (_qrs_config.c) ------------------------------------------ */

typedef struct {
  PyObject_HEAD
  struct qrs_sampler_config *cfg;
} ConfigObject;

extern PyTypeObject qpy_config_type;

/* ---- Sampler (_qrs_sampler.c) ---------------------------------------- */

typedef struct {
  PyObject_HEAD
  struct qrs_sampler *s;
  struct qpy_conn *prefetch_conn;  /* kept while a prefetch may be
                                      outstanding on it */
  size_t vocab;
} SamplerObject;

extern PyTypeObject qpy_sampler_type;

/* The sampler is about to step or prefetch on conn. */
void qpy_sampler_hold_conn(SamplerObject *self, struct qpy_conn *conn);
/* fast[i] (a PySequence_Fast) as the Sampler of a row of ncols logits;
   NULL with the error set if it is no Sampler or the row does not fit. */
SamplerObject *qpy_sampler_item(PyObject *fast, Py_ssize_t i, size_t ncols);
/* obj as a selection u: 0, or -1 with the error set, URangeError
   (QRS_E_U_RANGE) for NaN, infinite or outside [0, 1], also where
   libqrs would not look at u (a bypass sampler); the error names u[i],
   or u when i is negative. */
int qpy_u_get(PyObject *obj, Py_ssize_t i, double *ret_u);
/* The token record as a dict. */
PyObject *qpy_record_dict(const struct qrs_token_record *r);
/* A `record`/`records` argument (None or absent: 0): 0 none, 1 a dict,
   2 the JSON line ("json"), or -1 with the error set. */
int qpy_want_records(PyObject *obj);
/* rec as want asks (1: qpy_record_dict(), 2: its JSON line); NULL with
   the error set. */
PyObject *qpy_record_out(const struct qrs_token_record *rec, int want);

/* ---- Pool (_qrs_pool.c) ---------------------------------------------- */

extern PyTypeObject qpy_pool_type;

/* ---- the C baseline (_qrs_bench.c) ----------------------------------- */

PyObject *qpy_bench_c(PyObject *self, PyObject *args, PyObject *kw);

#endif
