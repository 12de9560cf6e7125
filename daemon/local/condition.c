/* Conditioning modes: raw, von Neumann, SHA-256 chain (libcrypto). */
#include <errno.h>
#include <string.h>

#include <openssl/evp.h>

#include "base/names.h"
#include "local/condition.h"

static const char *const condition_names[] = {
  [COND_RAW] = "raw",
  [COND_VONNEUMANN] = "vonneumann",
  [COND_SHA256] = "sha256",
};

NAMES_DEFINE(condition_parse, condition_name, enum condition_mode,
             condition_names, "?")

size_t
condition_vonneumann(const uint8_t *raw, size_t rawlen, uint8_t *out,
                     size_t outmax, unsigned *acc, unsigned *nacc)
{
  size_t i, o;
  unsigned b1, b2;
  int k;

  o = 0;
  for (i = 0; i < rawlen && o < outmax; i++) {
    for (k = 7; k > 0; k -= 2) {
      b1 = (raw[i] >> k) & 1;
      b2 = (raw[i] >> (k - 1)) & 1;
      if (b1 == b2)
        continue;
      *acc = (*acc << 1) | b1;
      if (++*nacc == 8) {
        out[o++] = (uint8_t)*acc;
        *acc = 0;
        *nacc = 0;
        if (o == outmax)
          break;
      }
    }
  }
  return o;
}

int
condition_sha256(const uint8_t *raw, size_t rawlen, uint8_t *out, size_t n)
{
  uint8_t state[32], le[8];
  size_t off, chunk, done, take;
  uint64_t counter;
  EVP_MD_CTX *ctx;
  int i, r;

  if (rawlen == 0)
    return -EINVAL;
  ctx = EVP_MD_CTX_new();
  if (!ctx)
    return -ENOMEM;
  memset(state, 0, sizeof(state));
  off = 0;
  done = 0;
  r = 0;
  for (counter = 0; done < n; counter++) {
    chunk = rawlen - off < 64 ? rawlen - off : 64;
    for (i = 0; i < 8; i++)
      le[i] = (uint8_t)(counter >> (8 * i));
    if (EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1 ||
        EVP_DigestUpdate(ctx, state, sizeof(state)) != 1 ||
        EVP_DigestUpdate(ctx, raw + off, chunk) != 1 ||
        EVP_DigestUpdate(ctx, le, sizeof(le)) != 1 ||
        EVP_DigestFinal_ex(ctx, state, NULL) != 1) {
      r = -EIO;
      break;
    }
    take = n - done < 32 ? n - done : 32;
    memcpy(out + done, state, take);
    done += take;
    off += 64;
    if (off >= rawlen)
      off = 0;
  }
  EVP_MD_CTX_free(ctx);
  OPENSSL_cleanse(state, sizeof(state));
  return r;
}
