/* The prng source's stream, shared with the studies that use it as a
   control arm (engine/study.c): ChaCha20 (OpenSSL EVP_chacha20) keyed by
   a secret 32-byte seed, one stream per draw.  A draw's bytes are the
   first n bytes of the keystream with the IV made of a 4-byte
   little-endian block counter 0 and a 12-byte nonce: 4 bytes of epoch
   (random, drawn when the stream starts) and 8 bytes of a counter, big
   endian.  Whoever learns the seed regenerates every draw from its
   (epoch, counter); the seed's commitment (SHA-256 of its bytes, in hex)
   can be published before any draw. */
#ifndef QRSD_PRNG_H
#define QRSD_PRNG_H

#include <stddef.h>
#include <stdint.h>

#define PRNG_SEED_LEN 32
#define PRNG_EPOCH_LEN 4
#define PRNG_NONCE_LEN 12
#define PRNG_HEX_LEN 64

/* Read a seed file (64 hex characters and an optional newline; a secret:
   keyfile_read() with KEYFILE_PRIVATE) into seed.  0, or a negative errno
   with err naming the file and what is wrong (never the content). */
int prng_seed_load(const char *path, uint8_t seed[PRNG_SEED_LEN], char *err,
                   size_t errlen);

/* The commitment of a seed: lowercase hex SHA-256 of its bytes. */
void prng_commitment(const uint8_t seed[PRNG_SEED_LEN],
                     char hex[PRNG_HEX_LEN + 1]);

/* A fresh random epoch (getrandom); 0 or a negative errno. */
int prng_epoch_new(uint8_t epoch[PRNG_EPOCH_LEN]);

/* The nonce of draw ctr in epoch. */
void prng_nonce(const uint8_t epoch[PRNG_EPOCH_LEN], uint64_t ctr,
                uint8_t nonce[PRNG_NONCE_LEN]);

/* n keystream bytes for nonce into out.  0 or -EIO (libcrypto). */
int prng_keystream(const uint8_t seed[PRNG_SEED_LEN],
                   const uint8_t nonce[PRNG_NONCE_LEN], uint8_t *out,
                   size_t n);

#endif
