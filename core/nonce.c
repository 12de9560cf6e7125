/* Commitment nonce, as qr-sampler's derive_commit_nonce() derives it
   (third_party/qr-sampler/src/qr_sampler/core/pipeline.py). */
#include <string.h>

#include <openssl/sha.h>

#include "nonce.h"

uint64_t
nonce_derive(const uint8_t *salt, size_t salt_len, uint64_t step,
             int64_t prev_token_id)
{
  unsigned char m[NONCE_MAX_SALT + 16];
  unsigned char d[SHA256_DIGEST_LENGTH];
  uint64_t prev, v;
  int i;

  if (salt_len > NONCE_MAX_SALT)
    return 0;
  if (salt_len)
    memcpy(m, salt, salt_len);
  prev = (uint64_t)prev_token_id;   /* two's complement, as i64le */
  for (i = 0; i < 8; i++) {
    m[salt_len + i] = (unsigned char)(step >> (8 * i));
    m[salt_len + 8 + i] = (unsigned char)(prev >> (8 * i));
  }
  SHA256(m, salt_len + 16, d);

  v = 0;
  for (i = 0; i < 8; i++)
    v = v << 8 | d[i];
  v &= 0x7fffffffffffffffull;
  return v ? v : 1;
}
