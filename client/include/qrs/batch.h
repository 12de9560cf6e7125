/* qrs/batch.h: sample a whole decode step's batch in one call.

   An engine samples B rows every decode step, each row belonging to its
   own request (its own sampler, state, draw).  qrs_sample_batch() runs
   those B per-row steps over a thread pool the engine creates once:

     struct qrs_pool *pool;
     struct qrs_batch_row rows[MAX_BATCH];   // the engine's, reused

     qrs_pool_new(2, &pool);                 // at startup
     ...
     // every decode step, after the forward pass:
     for (b = 0; b < B; b++) {
       rows[b].sampler = req[b]->sampler;    // one per request
       rows[b].client = client;              // or NULL with a draw / u
       rows[b].record = NULL;                // or &req[b]->rec
     }
     qrs_sample_batch(pool, logits, QRS_DTYPE_BF16, vocab, padded_vocab,
                      rows, B);
     for (b = 0; b < B; b++)
       if (rows[b].status == 0)
         append(req[b], rows[b].token);
       else
         finish_with_error(req[b], rows[b].status);
     ...
     qrs_pool_free(pool);                    // at shutdown

   Row b of the batch is `logits + b * row_stride` elements of dtype
   (row_stride >= n, e.g. a padded vocabulary); the buffer is only read.
   Each row does exactly what the single-row call does (same tokens, same
   records, same sampler state afterwards), so a batch equals B calls of
   qrs_sampler_sample_token() / _step() / _select_u() in any order.  Rows
   with a client draw from qrsd in row order whatever the threads: the
   caller begins each row's draw (unless a prefetch for this step is
   open) before any row is sampled, and each row's next prefetch after
   the last, so a source's bytes reach the same rows on any pool (a
   seeded mock source gives the same tokens with 1 or 8 threads).  A
   draw begun so is requested after the logits: its record does not say
   prefetched.

   Threads: the pool's threads are the caller plus threads - 1 workers
   started by qrs_pool_new(); threads = 1 runs every row on the calling
   thread.  Rows are handed out one at a time as threads become free.  A
   pool serves one qrs_sample_batch() at a time (calls from several
   threads on one pool are serialised).  Nothing is allocated per call
   once the pool has seen the largest batch.  Added in 0.1. */
#ifndef QRS_BATCH_H
#define QRS_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include <qrs/client.h>
#include <qrs/error.h>
#include <qrs/sampler.h>

#ifdef __cplusplus
extern "C" {
#endif

struct qrs_pool;

/* Largest thread count of a pool. */
#define QRS_POOL_MAX_THREADS 256

/* A pool of threads (1 .. QRS_POOL_MAX_THREADS; 0 means the number of
   online CPUs).  Returns 0, -EINVAL, -ENOMEM or pthread_create()'s
   -errno. */
QRS_EXPORT int qrs_pool_new(unsigned threads, struct qrs_pool **ret_pool);

/* Stops and joins the workers.  Not while a batch runs on the pool. */
QRS_EXPORT void qrs_pool_free(struct qrs_pool *pool);

/* The pool's thread count (the caller included). */
QRS_EXPORT unsigned qrs_pool_threads(const struct qrs_pool *pool);

/* One row of a batch.  The inputs are the caller's; the call writes token
   and status (and *record when given). */
struct qrs_batch_row {
  struct qrs_sampler *sampler;    /* in: this row's sampler; no sampler may
                                     appear in two rows of one batch */
  struct qrs_client *client;      /* in: non-NULL: the whole step with qrsd
                                     (qrs_sampler_sample_token()) */
  const struct qrs_draw *draw;    /* in, client NULL: the draw to use
                                     (qrs_sampler_step() with flags) */
  double u;                       /* in, client and draw NULL: u alone
                                     (qrs_sampler_select_u()) */
  unsigned flags;                 /* in: qrs_sampler_step() flags */
  struct qrs_token_record *record;/* in: NULL, or where the record goes */
  uint32_t token;                 /* out: the token (status 0) */
  int status;                     /* out: what the single-row call
                                     returned (0, 1 = bypass, or a
                                     negative error), or -EINVAL for a
                                     NULL or repeated sampler */
};

/* Sample nrows rows of a [nrows x row_stride] logits buffer.  Returns the
   number of rows whose status is negative (0: every row sampled), or
   -EINVAL (NULL pool / logits / rows, n == 0, row_stride < n, unknown
   dtype) or -ENOMEM before any row was touched. */
QRS_EXPORT int qrs_sample_batch(struct qrs_pool *pool, const void *logits,
                                enum qrs_dtype dtype, size_t n,
                                size_t row_stride,
                                struct qrs_batch_row *rows, size_t nrows);

/* qrs_sample_batch(), and every row sampled (status 0) is then written
   over in place, right after its selection while it is still in cache:
   -inf in its n values but 0 at the token (rows with status 1, bypass, or
   an error are left as they were).  For an engine whose own sampler runs
   after this one and must emit exactly the chosen token (a vLLM logits
   processor, a transformers processor under greedy decoding): one pass
   over the rows instead of two.  logits must be writable; the rows are
   selected from their values before they are written.  Added in 0.1. */
QRS_EXPORT int qrs_sample_batch_one_hot(struct qrs_pool *pool, void *logits,
                                        enum qrs_dtype dtype, size_t n,
                                        size_t row_stride,
                                        struct qrs_batch_row *rows,
                                        size_t nrows);

#ifdef __cplusplus
}
#endif

#endif
