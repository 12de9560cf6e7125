/* The prng source: a ChaCha20 keystream keyed by a secret seed
   (sources/prng.h), the verifiable control arm of a study.  Its bytes are
   not entropy: anyone with the seed regenerates them, which is the
   point.  Outside a study each fetch takes the source's own nonce (its
   epoch, drawn at open, and its own counter); a study draw brings the
   study's (f->stream). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "base/keyfile.h"
#include "sources/prng.h"
#include "sources/source.h"

/* Fetches up to this size are computed on the loop thread (ChaCha20 makes
   them in well under a millisecond); larger ones on the worker pool. */
#define PRNG_INLINE_MAX (256 * 1024)

struct prng {
  uint8_t seed[PRNG_SEED_LEN];
  uint8_t epoch[PRNG_EPOCH_LEN];
  uint64_t ctr;                 /* loop thread */
  char commitment[PRNG_HEX_LEN + 1];
  EVP_CIPHER_CTX *ctx;          /* keyed once: the loop thread's draws */
};

int
prng_seed_load(const char *path, uint8_t seed[PRNG_SEED_LEN], char *err,
               size_t errlen)
{
  char msg[384], *buf;
  size_t len, n;
  int r;

  r = keyfile_read(path, KEYFILE_PRIVATE, 4096, &buf, &len, msg,
                   sizeof(msg));
  if (r < 0) {
    snprintf(err, errlen, "seed file %s: %s", path, msg);
    return r;
  }
  if (len == 2 * PRNG_SEED_LEN + 1 && buf[len - 1] == '\n')
    len--;
  buf[len] = '\0';
  r = len == 2 * PRNG_SEED_LEN &&
      OPENSSL_hexstr2buf_ex(seed, PRNG_SEED_LEN, &n, buf, '\0') == 1 &&
      n == PRNG_SEED_LEN ? 0 : -EINVAL;
  OPENSSL_cleanse(buf, len);
  free(buf);
  if (r < 0) {
    OPENSSL_cleanse(seed, PRNG_SEED_LEN);
    snprintf(err, errlen, "seed file %s: not 64 hex characters (and an "
             "optional newline); make one with: head -c 32 /dev/urandom | "
             "od -An -tx1 | tr -d ' \\n' > FILE", path);
  }
  return r;
}

void
prng_commitment(const uint8_t seed[PRNG_SEED_LEN], char hex[PRNG_HEX_LEN + 1])
{
  static const char digits[] = "0123456789abcdef";
  uint8_t h[32];
  unsigned n = sizeof(h), i;

  if (!EVP_Digest(seed, PRNG_SEED_LEN, h, &n, EVP_sha256(), NULL))
    memset(h, 0, sizeof(h));
  for (i = 0; i < sizeof(h); i++) {
    hex[2 * i] = digits[h[i] >> 4];
    hex[2 * i + 1] = digits[h[i] & 15];
  }
  hex[PRNG_HEX_LEN] = '\0';
}

int
prng_epoch_new(uint8_t epoch[PRNG_EPOCH_LEN])
{
  ssize_t n;

  do
    n = getrandom(epoch, PRNG_EPOCH_LEN, 0);
  while (n < 0 && errno == EINTR);
  return n == PRNG_EPOCH_LEN ? 0 : -EIO;
}

void
prng_nonce(const uint8_t epoch[PRNG_EPOCH_LEN], uint64_t ctr,
           uint8_t nonce[PRNG_NONCE_LEN])
{
  int i;

  memcpy(nonce, epoch, PRNG_EPOCH_LEN);
  for (i = 0; i < 8; i++)
    nonce[PRNG_EPOCH_LEN + i] = (uint8_t)(ctr >> (56 - 8 * i));
}

/* A ChaCha20 context keyed with seed, or NULL. */
static EVP_CIPHER_CTX *
keyed(const uint8_t seed[PRNG_SEED_LEN])
{
  EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();

  if (ctx && !EVP_EncryptInit_ex(ctx, EVP_chacha20(), NULL, seed, NULL)) {
    EVP_CIPHER_CTX_free(ctx);
    ctx = NULL;
  }
  return ctx;
}

/* The keystream at nonce from a keyed context (only its IV is set). */
static int
keystream(EVP_CIPHER_CTX *ctx, const uint8_t nonce[PRNG_NONCE_LEN],
          uint8_t *out, size_t n)
{
  uint8_t iv[16];
  size_t done;
  int len, ok;

  memset(iv, 0, 4);             /* block counter 0, little endian */
  memcpy(iv + 4, nonce, PRNG_NONCE_LEN);
  ok = EVP_EncryptInit_ex(ctx, NULL, NULL, NULL, iv);
  memset(out, 0, n);
  for (done = 0; ok && done < n; done += (size_t)len) {
    len = n - done > (1u << 30) ? 1 << 30 : (int)(n - done);
    ok = EVP_EncryptUpdate(ctx, out + done, &len, out + done, len);
  }
  return ok ? 0 : -EIO;
}

int
prng_keystream(const uint8_t seed[PRNG_SEED_LEN],
               const uint8_t nonce[PRNG_NONCE_LEN], uint8_t *out, size_t n)
{
  EVP_CIPHER_CTX *ctx = keyed(seed);
  int r;

  if (!ctx)
    return -EIO;
  r = keystream(ctx, nonce, out, n);
  EVP_CIPHER_CTX_free(ctx);
  return r;
}

static int
prng_open(struct source *s, const struct conf_source *cs, char *err,
          size_t errlen)
{
  struct prng *p;
  int r;

  p = calloc(1, sizeof(*p));
  if (!p)
    return -ENOMEM;
  r = prng_seed_load(cs->prng_seed_file, p->seed, err, errlen);
  if (r == 0 && prng_epoch_new(p->epoch) < 0) {
    snprintf(err, errlen, "source '%s': no random epoch (getrandom)",
             cs->name);
    r = -EIO;
  }
  if (r == 0 && !(p->ctx = keyed(p->seed))) {
    snprintf(err, errlen, "source '%s': ChaCha20 (libcrypto) failed",
             cs->name);
    r = -EIO;
  }
  if (r < 0) {
    OPENSSL_cleanse(p, sizeof(*p));
    free(p);
    return r;
  }
  prng_commitment(p->seed, p->commitment);
  s->priv = p;
  s->inline_max = PRNG_INLINE_MAX;
  return 0;
}

/* f's bytes from its stream: with the source's keyed context on the loop
   thread (on_loop), else with one of its own (a worker). */
static void
fill(struct source_fetch *f, int on_loop)
{
  struct prng *p = f->src->priv;

  f->status = on_loop ? keystream(p->ctx, f->stream, f->buf, f->n)
                      : prng_keystream(p->seed, f->stream, f->buf, f->n);
  if (f->status < 0)
    snprintf(f->why, sizeof(f->why), "ChaCha20 (libcrypto) failed");
  ts_now(&f->generated);
}

static void
fill_work(uv_work_t *w)
{
  fill(w->data, 0);
}

static void
fill_after(uv_work_t *w, int status)
{
  struct source_fetch *f = w->data;

  if (status == UV_ECANCELED)
    snprintf(f->why, sizeof(f->why), "cancelled before it started");
  source_fetch_complete(f, status < 0 ? status : f->status);
}

static int
prng_fetch(struct source *s, struct source_fetch *f)
{
  struct prng *p = s->priv;

  if (!f->has_stream) {
    prng_nonce(p->epoch, p->ctr++, f->stream);
    f->has_stream = 1;
  }
  if (f->n <= s->inline_max || !s->loop) {
    fill(f, 1);
    f->inline_done = 1;
    source_fetch_complete(f, f->status);
    return 0;
  }
  f->work.data = f;
  return uv_queue_work(s->loop, &f->work, fill_work, fill_after);
}

static int
prng_commitment_of(const struct source *s, char *hex)
{
  const struct prng *p = s->priv;

  memcpy(hex, p->commitment, PRNG_HEX_LEN + 1);
  return 0;
}

static void
prng_close(struct source *s)
{
  struct prng *p = s->priv;

  if (!p)
    return;
  EVP_CIPHER_CTX_free(p->ctx);    /* its key schedule cleansed too */
  OPENSSL_cleanse(p, sizeof(*p));
  free(s->priv);
}

static void
prng_describe(const struct source *s, char *buf, size_t len)
{
  const struct prng *p = s->priv;

  /* the commitment is public; the seed never leaves the source */
  snprintf(buf, len, "prng (ChaCha20, seed commitment %.16s...; a study's "
           "control, not entropy)", p->commitment);
}

const struct source_ops source_prng_ops = {
  .type = "prng",
  .production = 1,
  .open = prng_open,
  .fetch = prng_fetch,
  .close = prng_close,
  .describe = prng_describe,
  .commitment = prng_commitment_of,
};
