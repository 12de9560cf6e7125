/* Conditioning of raw noise samples, the modes OpenEntropy offers (and
   qr-sampler's oe_conditioning setting names):

   raw         the samples unchanged, one output byte per raw byte.
   vonneumann  pairwise bit debiasing: the bits of the raw bytes are taken
               MSB first in pairs; 01 gives 0, 10 gives 1, 00 and 11 are
               dropped; output bits are packed MSB first.  Yields about a
               quarter of the input for unbiased input, less for biased.
               Removes bias from independent bits, nothing else.
   sha256      a counter-mode chain: output block i (32 bytes) is
               SHA-256(state || chunk_i || u64le(i)), state = the previous
               block (32 zero bytes at first), chunk_i = the i-th 64-byte
               slice of the raw input (the last one may be shorter; the
               input wraps when it runs out).  qrsd feeds it 64 fresh raw
               bytes per 32 output bytes, so no input is reused; it cannot
               add entropy: the output has at most the raw input's.

   SHA-256 comes from libcrypto. */
#ifndef QRSD_CONDITION_H
#define QRSD_CONDITION_H

#include <stddef.h>
#include <stdint.h>

enum condition_mode {
  COND_RAW,
  COND_VONNEUMANN,
  COND_SHA256,
};

/* Raw bytes qrsd harvests per sha256 output byte. */
#define COND_SHA256_RAW_PER_BYTE 2

/* "raw", "vonneumann", "sha256" -> mode.  0 or -EINVAL. */
int condition_parse(const char *s, enum condition_mode *ret_mode);
const char *condition_name(enum condition_mode m);

/* Von Neumann: debias rawlen bytes into out (room for outmax bytes).
   Whole output bytes only: leftover bits (fewer than 8) are kept in
   *acc / *nacc between calls (start both at 0) so that nothing is lost
   across harvest rounds.  Returns the number of bytes written. */
size_t condition_vonneumann(const uint8_t *raw, size_t rawlen, uint8_t *out,
                            size_t outmax, unsigned *acc, unsigned *nacc);

/* SHA-256 chain of rawlen raw bytes into n output bytes.  0, -EINVAL
   (rawlen 0) or -ENOMEM / -EIO (libcrypto failure). */
int condition_sha256(const uint8_t *raw, size_t rawlen, uint8_t *out,
                     size_t n);

#endif
