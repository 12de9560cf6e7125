/* The commitment nonce of a pipelined draw: it commits to the token chosen
   before the draw, so a source that echoes it proves its bytes came after
   that choice.  The derivation is qr-sampler's derive_commit_nonce()
   (third_party/qr-sampler/src/qr_sampler/core/pipeline.py). */
#ifndef QRS_CORE_NONCE_H
#define QRS_CORE_NONCE_H

#include <stddef.h>
#include <stdint.h>

#define NONCE_MAX_SALT 256

/* SHA-256(salt || u64le(step) || i64le(prev_token_id)), first 8 bytes read
   big-endian, top bit cleared; 0 becomes 1.  Returns the nonce, which is in
   1 .. 2^63-1, or 0 when salt_len exceeds NONCE_MAX_SALT. */
uint64_t nonce_derive(const uint8_t *salt, size_t salt_len, uint64_t step,
                      int64_t prev_token_id);

#endif
