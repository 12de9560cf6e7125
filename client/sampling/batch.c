/* Batch sampling over a thread pool (qrs/batch.h).

   The pool's workers sleep on a condition variable between batches.  A
   batch bumps the generation, and the caller and every worker take rows
   from one atomic counter until none is left; the caller returns once
   every worker has left the batch, so nothing refers to the rows after
   the call.  Rows run the public single-row calls unchanged, so a batch
   is B single calls by construction, but for the order of the draws of
   rows with a client: the caller begins them in row order, before the
   rows (each row without a prefetch for this step) and after them (each
   row's next prefetch), so that which bytes of a source reach which row
   does not depend on the threads' timing (a seeded mock source gives
   the same tokens on any pool). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <wchar.h>

#include <qrs/batch.h>

#include "sampling.h"

struct qrs_pool {
  unsigned threads;
  pthread_t *tid;                 /* threads - 1 workers */
  unsigned started;
  pthread_mutex_t run_lock;       /* one batch at a time */
  pthread_mutex_t lock;
  pthread_cond_t wake;            /* workers: a new generation or stop */
  pthread_cond_t done;            /* caller: every worker left */
  unsigned long gen;
  unsigned left;                  /* workers that left this generation */
  int stop;
  /* the batch */
  const char *logits;
  int one_hot;                    /* qrs_sample_batch_one_hot() */
  size_t esize, n, stride, nrows;
  enum qrs_dtype dtype;
  struct qrs_batch_row *rows;
  /* atomic: next row to take; 64 bytes of padding on either side keep it
     off the cache lines of the batch's fields, so taking a row does not
     evict them from the other threads' caches */
  char pad0[64];
  size_t next;
  char pad1[64];
  /* duplicate check: sorted sampler pointers */
  struct qrs_sampler **sorted;
  size_t sorted_cap;
};

_Static_assert(sizeof(wchar_t) == 4, "wchar_t must be 32 bits");

/* The row's n values -inf but 0 at token, in its dtype (IEEE bit
   patterns; bfloat16 is float32's upper half).  The row was read by its
   selection just before: it is in this thread's cache, so the stores hit
   it there instead of costing a pass over memory later. */
static void
fill_one_hot(void *row, enum qrs_dtype dt, size_t n, uint32_t token)
{
  uint16_t *h = row, hv;
  uint64_t *d = row;
  size_t k;

  switch (dt) {
  case QRS_DTYPE_F32:
    /* glibc's wmemset is a vector fill (wchar_t: 32 bits, checked
       above) */
    wmemset(row, (wchar_t)0xff800000u, n);
    ((uint32_t *)row)[token] = 0;
    break;
  case QRS_DTYPE_F16:
  case QRS_DTYPE_BF16:
    hv = dt == QRS_DTYPE_F16 ? 0xfc00 : 0xff80;
    for (k = 0; k < n; k++)
      h[k] = hv;
    h[token] = 0;
    break;
  case QRS_DTYPE_F64:
    for (k = 0; k < n; k++)
      d[k] = 0xfff0000000000000ull;
    d[token] = 0;
    break;
  }
}

static void
run_row(struct qrs_pool *p, size_t i)
{
  struct qrs_batch_row *r = &p->rows[i];
  const void *row = p->logits + i * p->stride * p->esize;

  if (r->status < 0)
    return;                       /* rejected before the batch */
  if (r->client)
    r->status = qrs__sampler_sample_token(r->sampler, r->client, row,
                                          p->dtype, p->n, 0, &r->token,
                                          r->record);
  else if (r->draw)
    r->status = qrs_sampler_step(r->sampler, row, p->dtype, p->n, r->draw,
                                 r->flags, &r->token, r->record);
  else
    r->status = qrs_sampler_select_u(r->sampler, row, p->dtype, p->n, r->u,
                                     &r->token, r->record);
  if (p->one_hot && r->status == 0)
    fill_one_hot((void *)row, p->dtype, p->n, r->token);
}

/* Rows are taken one ahead: while a thread samples its row, the float
   pass brings the thread's next row into its cache (qrs__khint), so a
   row of a batch is rarely read from memory by its own selection. */
static void
take_rows(struct qrs_pool *p)
{
  size_t i, next;

  i = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED);
  while (i < p->nrows) {
    next = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED);
    qrs__khint.next = next < p->nrows
                          ? p->logits + next * p->stride * p->esize
                          : NULL;
    qrs__khint.bytes = p->n * p->esize;
    run_row(p, i);
    i = next;
  }
  qrs__khint.next = NULL;
}

static void *
worker(void *arg)
{
  struct qrs_pool *p = arg;
  unsigned long seen;

  /* Generation 0 is "no batch yet": a batch begun before this thread
     first takes the lock is still seen as new. */
  seen = 0;
  pthread_mutex_lock(&p->lock);
  for (;;) {
    while (!p->stop && p->gen == seen)
      pthread_cond_wait(&p->wake, &p->lock);
    if (p->stop)
      break;
    seen = p->gen;
    pthread_mutex_unlock(&p->lock);
    take_rows(p);
    pthread_mutex_lock(&p->lock);
    if (++p->left == p->threads - 1)
      pthread_cond_signal(&p->done);
  }
  pthread_mutex_unlock(&p->lock);
  return NULL;
}

void
qrs_pool_free(struct qrs_pool *p)
{
  unsigned i;

  if (!p)
    return;
  pthread_mutex_lock(&p->lock);
  p->stop = 1;
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->lock);
  for (i = 0; i < p->started; i++)
    pthread_join(p->tid[i], NULL);
  pthread_cond_destroy(&p->wake);
  pthread_cond_destroy(&p->done);
  pthread_mutex_destroy(&p->lock);
  pthread_mutex_destroy(&p->run_lock);
  free(p->tid);
  free(p->sorted);
  free(p);
}

int
qrs_pool_new(unsigned threads, struct qrs_pool **ret_pool)
{
  struct qrs_pool *p;
  long ncpu;
  int r;

  if (!ret_pool)
    return -EINVAL;
  if (threads == 0) {
    ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    threads = ncpu > 0 ? (unsigned)ncpu : 1;
    threads = threads < QRS_POOL_MAX_THREADS ? threads
                                             : QRS_POOL_MAX_THREADS;
  }
  if (threads > QRS_POOL_MAX_THREADS)
    return -EINVAL;
  p = calloc(1, sizeof(*p));
  if (!p)
    return -ENOMEM;
  p->threads = threads;
  pthread_mutex_init(&p->run_lock, NULL);
  pthread_mutex_init(&p->lock, NULL);
  pthread_cond_init(&p->wake, NULL);
  pthread_cond_init(&p->done, NULL);
  if (threads > 1) {
    p->tid = calloc(threads - 1, sizeof(*p->tid));
    if (!p->tid) {
      qrs_pool_free(p);
      return -ENOMEM;
    }
  }
  for (p->started = 0; p->started + 1 < threads; p->started++) {
    r = pthread_create(&p->tid[p->started], NULL, worker, p);
    if (r != 0) {
      qrs_pool_free(p);
      return -r;
    }
  }
  *ret_pool = p;
  return 0;
}

unsigned
qrs_pool_threads(const struct qrs_pool *p)
{
  return p ? p->threads : 0;
}

static int
cmp_ptr(const void *a, const void *b)
{
  uintptr_t x = (uintptr_t)*(struct qrs_sampler *const *)a;
  uintptr_t y = (uintptr_t)*(struct qrs_sampler *const *)b;

  return x < y ? -1 : x > y;
}

/* Marks rows with a NULL sampler, and every row of a sampler that appears
   twice, -EINVAL (a sampler is one thread's at a time).  Returns -ENOMEM
   when the check's array cannot grow. */
static int
check_rows(struct qrs_pool *p, struct qrs_batch_row *rows, size_t nrows)
{
  struct qrs_sampler **s;
  size_t i, k;

  if (nrows > p->sorted_cap) {
    s = realloc(p->sorted, nrows * sizeof(*s));
    if (!s)
      return -ENOMEM;
    p->sorted = s;
    p->sorted_cap = nrows;
  }
  for (i = k = 0; i < nrows; i++) {
    rows[i].status = rows[i].sampler ? 0 : -EINVAL;
    if (rows[i].sampler)
      p->sorted[k++] = rows[i].sampler;
  }
  qsort(p->sorted, k, sizeof(*p->sorted), cmp_ptr);
  for (i = 1; i < k; i++) {
    if (p->sorted[i] != p->sorted[i - 1])
      continue;
    /* Rare: mark every row of that sampler. */
    for (size_t j = 0; j < nrows; j++)
      if (rows[j].sampler == p->sorted[i])
        rows[j].status = -EINVAL;
  }
  return 0;
}

static int
run_batch(struct qrs_pool *p, const void *logits, int one_hot,
          enum qrs_dtype dtype, size_t n, size_t row_stride,
          struct qrs_batch_row *rows, size_t nrows)
{
  size_t i, es;
  int r, bad;

  es = qrs__dtype_size(dtype);
  if (!p || !logits || (!rows && nrows) || n == 0 || row_stride < n ||
      es == 0 || (nrows && row_stride > SIZE_MAX / es / nrows))
    return -EINVAL;
  if (nrows == 0)
    return 0;
  pthread_mutex_lock(&p->run_lock);
  r = check_rows(p, rows, nrows);
  if (r < 0) {
    pthread_mutex_unlock(&p->run_lock);
    return r;
  }
  p->logits = logits;
  p->one_hot = one_hot;
  p->esize = es;
  p->n = n;
  p->stride = row_stride;
  p->dtype = dtype;
  p->rows = rows;
  p->nrows = nrows;
  p->next = 0;
  /* this step's draws, in row order (a failed begin: the row draws
     blocking) */
  for (i = 0; i < nrows; i++)
    if (rows[i].status >= 0 && rows[i].client)
      (void)qrs__sampler_begin_draw(rows[i].sampler, rows[i].client);
  if (p->threads > 1 && nrows > 1) {
    pthread_mutex_lock(&p->lock);
    p->left = 0;
    p->gen++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    take_rows(p);
    pthread_mutex_lock(&p->lock);
    while (p->left < p->threads - 1)
      pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
  } else {
    take_rows(p);
  }
  p->rows = NULL;
  pthread_mutex_unlock(&p->run_lock);
  /* the next step's prefetches, in row order */
  for (i = 0; i < nrows; i++)
    if (rows[i].status == 0 && rows[i].client)
      (void)qrs_sampler_prefetch(rows[i].sampler, rows[i].client);
  bad = 0;
  for (i = 0; i < nrows; i++)
    bad += rows[i].status < 0;
  return bad;
}

int
qrs_sample_batch(struct qrs_pool *p, const void *logits,
                 enum qrs_dtype dtype, size_t n, size_t row_stride,
                 struct qrs_batch_row *rows, size_t nrows)
{
  return run_batch(p, logits, 0, dtype, n, row_stride, rows, nrows);
}

int
qrs_sample_batch_one_hot(struct qrs_pool *p, void *logits,
                         enum qrs_dtype dtype, size_t n, size_t row_stride,
                         struct qrs_batch_row *rows, size_t nrows)
{
  return run_batch(p, logits, 1, dtype, n, row_stride, rows, nrows);
}
