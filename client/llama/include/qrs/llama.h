/* libqrs-llama: libqrs as a llama.cpp sampler.

   A qrs sampler is a struct llama_sampler (llama.cpp's llama_sampler_i:
   name, accept, apply, reset, clone, free) that runs a struct qrs_sampler
   (qrs/sampler.h): every preset, temperature strategy and stage order of
   libqrs, with each token's draw from qrsd carrying the commitment chain
   (salt, step, previous token) and the next token's draw requested as
   soon as a token is selected (entropy_prefetch), so the daemon round trip
   overlaps llama.cpp's next decode.

   It works alone or as the last sampler of a llama_sampler_chain after
   llama.cpp's own samplers (grammar, penalties, top-k, ...).  Candidates
   arrive as llama_token_data, possibly truncated, reordered or masked
   with -inf; the sampler selects exactly what libqrs selects on the
   vocabulary-wide row that has each candidate's logit at its token id and
   -inf everywhere else, and sets cur_p->selected.  Token ids are the
   model's, so the commitment chain and the per-token records hold real
   token ids.

   llama_sampler_sample() aborts the process when no sampler selected a
   token, and a qrs sampler selects nothing when it has no draw (qrsd
   stopped, the source failed): it never invents a token.  Engines sample
   with qrs_llama_sample() instead, which returns the error.  Engines that
   use qrs as the whole chain call qrs_llama_sample_logits(), which reads
   the row from llama_get_logits_ith() directly, without building the
   12-byte-per-token candidate array.

     struct llama_sampler *chain, *qs;
     llama_token tok;

     qrs_llama_sampler_new(vocab, cfg, client, &qs);
     chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
     llama_sampler_chain_add(chain, llama_sampler_init_top_k(40));
     llama_sampler_chain_add(chain, qs);            // the chain owns qs
     ...
     r = qrs_llama_sample(chain, ctx, -1, &tok);    // after llama_decode()
     if (r < 0)
       fprintf(stderr, "%s\n", qrs_strerror(r));    // no token: stop/retry

   Threads: as llama.cpp's samplers, one thread at a time per sampler; the
   qrs_client may be shared (its calls are serialised).  The client must
   outlive every sampler made with it.  Errors: int functions return 0 or
   a negative errno / QRS_E_* code (qrs/error.h).  Added in 0.1. */
#ifndef QRS_LLAMA_H
#define QRS_LLAMA_H

#include <stddef.h>
#include <stdint.h>

#include <llama.h>

#include <qrs/client.h>
#include <qrs/sampler.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The name llama_sampler_name() returns for a qrs sampler. */
#define QRS_LLAMA_SAMPLER_NAME "qrs"

/* A llama.cpp sampler for vocab's model, selecting with cfg's effective
   configuration (copied; NULL: libqrs's defaults) and drawing from qrsd
   through c (borrowed; it must outlive the sampler).  Each request (each
   llama_sampler_reset()) gets a fresh random commitment salt unless
   qrs_llama_sampler_set_salt() fixed one.  Returns 0 and *ret_smpl, or
   -EINVAL, -ENOMEM, or qrs_sampler_new()'s errors (QRS_E_CONFIG_VALUE).
   Free with llama_sampler_free(), unless a chain owns it. */
QRS_EXPORT int qrs_llama_sampler_new(const struct llama_vocab *vocab,
                                     const struct qrs_sampler_config *cfg,
                                     struct qrs_client *c,
                                     struct llama_sampler **ret_smpl);

/* The qrs_sampler inside smpl, or inside the first qrs sampler of the
   chain smpl (searched recursively), to set a log sink, read diagnostics
   or replay; owned by smpl.  NULL when there is none. */
QRS_EXPORT struct qrs_sampler *qrs_llama_sampler_get(
    struct llama_sampler *smpl);

/* Use this salt (1..256 bytes) for the commitments of this request and
   of every request after llama_sampler_reset() (replays, tests); NULL
   goes back to a fresh random salt per request.  smpl may be a chain.
   Returns 0, -EINVAL, -ENOENT (no qrs sampler in smpl). */
QRS_EXPORT int qrs_llama_sampler_set_salt(struct llama_sampler *smpl,
                                          const uint8_t *salt, size_t len);

/* What the last apply of the qrs sampler in smpl (a chain: its first qrs
   sampler) did: 0 a token was selected, 1 the config says bypass (nothing
   selected, later samplers may choose), or the error that left
   cur_p->selected at -1 (QRS_E_DISCONNECTED, QRS_E_ENTROPY, QRS_E_LOGITS,
   ...).  -ENOENT when smpl holds no qrs sampler. */
QRS_EXPORT int qrs_llama_sampler_status(const struct llama_sampler *smpl);

/* The record of the last token the qrs sampler in smpl selected.
   Returns 0, -ENOENT (no qrs sampler), -ENODATA (no token yet). */
QRS_EXPORT int qrs_llama_sampler_record(const struct llama_sampler *smpl,
                                        struct qrs_token_record *ret);

/* llama_sampler_sample() that returns errors instead of aborting: build
   the candidates from the logits of output idx of ctx (-1: the last),
   apply smpl (a chain holding a qrs sampler, or a qrs sampler alone, in
   which case this is qrs_llama_sample_logits()), accept the token.
   Returns 0 and *ret_token; or the qrs sampler's error, or
   QRS_E_NO_CANDIDATES when the chain selected nothing, -EINVAL (no
   logits at idx), -ENOENT (no qrs sampler in smpl), -ENOMEM.  On error
   nothing was accepted and the qrs step did not advance: calling again
   draws again for the same token. */
QRS_EXPORT int qrs_llama_sample(struct llama_sampler *smpl,
                                struct llama_context *ctx, int32_t idx,
                                llama_token *ret_token);

/* The whole chain in one call, for engines that use qrs alone: the row of
   llama_get_logits_ith(ctx, idx) goes to qrs_sampler_sample_token() as it
   is (no candidate array).  smpl must be a qrs sampler.  ret_record may
   be NULL.  Returns 0 and *ret_token, 1 (bypass: no token), or the errors
   of qrs_sampler_sample_token(), -EINVAL (no logits at idx, or smpl is not
   a qrs sampler). */
QRS_EXPORT int qrs_llama_sample_logits(struct llama_sampler *smpl,
                                       struct llama_context *ctx,
                                       int32_t idx, llama_token *ret_token,
                                       struct qrs_token_record *ret_record);

/* Load llama.cpp's CPU backend (ggml picks the best variant for this
   CPU) from dir, NULL: the folder libllama was loaded from.  Call once
   before loading a model.  Returns 0, or -ENOENT when no backend device
   is available afterwards. */
QRS_EXPORT int qrs_llama_load_backends(const char *dir);

#ifdef __cplusplus
}
#endif

#endif
