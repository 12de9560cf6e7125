/* The mock source: deterministic bytes from a seed, for tests and
   statistics only.

   Bytes are uniform on 0..255 (xoshiro256** seeded through splitmix64),
   except that with probability q = |mean_shift| / 127.5 a byte is replaced
   by 255 (shift > 0) or 0 (shift < 0), which moves the byte mean by exactly
   mean_shift in expectation while keeping the stream reproducible. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "sources/source.h"

struct mock {
  pthread_mutex_t lock;
  uint64_t st[4];
  uint64_t seed;
  double shift;
  uint64_t threshold;       /* replace when a 32-bit draw is below this;
                               0 .. 2^32 (2^32: always) */
  uint8_t fill;             /* 255 or 0 */
};

static uint64_t
splitmix64(uint64_t *x)
{
  uint64_t z;

  *x += 0x9e3779b97f4a7c15ull;
  z = *x;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t
rotl(uint64_t x, int k)
{
  return (x << k) | (x >> (64 - k));
}

static uint64_t
xoshiro_next(uint64_t st[4])
{
  uint64_t result, t;

  result = rotl(st[1] * 5, 7) * 9;
  t = st[1] << 17;
  st[2] ^= st[0];
  st[3] ^= st[1];
  st[1] ^= st[2];
  st[0] ^= st[3];
  st[2] ^= t;
  st[3] = rotl(st[3], 45);
  return result;
}

static int
mock_open(struct source *s, const struct conf_source *cs, char *err,
          size_t errlen)
{
  struct mock *m;
  uint64_t x;
  double q;
  int i;

  if (!(fabs(cs->mock_mean_shift) <= 127.5)) {
    snprintf(err, errlen, "source '%s': mean_shift must be within "
             "-127.5..127.5", cs->name);
    return -EINVAL;
  }
  m = calloc(1, sizeof(*m));
  if (!m)
    return -ENOMEM;
  pthread_mutex_init(&m->lock, NULL);
  m->seed = cs->mock_seed;
  m->shift = cs->mock_mean_shift;
  x = m->seed;
  for (i = 0; i < 4; i++)
    m->st[i] = splitmix64(&x);
  q = fabs(m->shift) / 127.5;
  /* In 64 bits: q just below 1 rounds to 2^32, which must stay "always"
     and not wrap to 0. */
  m->threshold = (uint64_t)llround(q * 4294967296.0);
  m->fill = m->shift > 0 ? 255 : 0;
  s->priv = m;
  s->inline_max = 256 * 1024;
  return 0;
}

static int
mock_read(struct source *s, uint8_t *buf, size_t n, char *why, size_t whylen)
{
  struct mock *m;
  uint64_t v, w;
  size_t i;
  int k;

  (void)why;
  (void)whylen;
  m = s->priv;
  pthread_mutex_lock(&m->lock);
  for (i = 0; i < n; i += 8) {
    v = xoshiro_next(m->st);
    for (k = 0; k < 8 && i + k < n; k++)
      buf[i + k] = (uint8_t)(v >> (8 * k));
    if (m->threshold == 0)
      continue;
    for (k = 0; k < 8 && i + k < n; k += 2) {
      w = xoshiro_next(m->st);
      if ((uint64_t)(uint32_t)w < m->threshold)
        buf[i + k] = m->fill;
      if (k + 1 < 8 && i + k + 1 < n && (w >> 32) < m->threshold)
        buf[i + k + 1] = m->fill;
    }
  }
  pthread_mutex_unlock(&m->lock);
  return 0;
}

static void
mock_close(struct source *s)
{
  struct mock *m;

  m = s->priv;
  if (!m)
    return;
  pthread_mutex_destroy(&m->lock);
  free(m);
}

static void
mock_describe(const struct source *s, char *buf, size_t len)
{
  const struct mock *m;

  m = s->priv;
  snprintf(buf, len, "mock (seed %llu, mean shift %+.3f; NOT FOR PRODUCTION)",
           (unsigned long long)m->seed, m->shift);
}

const struct source_ops source_mock_ops = {
  .type = "mock",
  .production = 0,
  .open = mock_open,
  .read = mock_read,
  .close = mock_close,
  .describe = mock_describe,
};
