/* Integration-test helpers that use libqrs (see harness_client.h). */
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include <criterion/criterion.h>

#include "harness_client.h"

struct qrs_client *
connect_client(const char *sock)
{
  struct qrs_client *c;
  int r;

  r = qrs_client_new(sock, NULL, &c);
  cr_assert_eq(r, 0, "qrs_client_new(%s): %s", sock, qrs_strerror(r));
  return c;
}

void
assert_draw_works(const char *sock)
{
  struct qrs_client *c;
  struct qrs_draw d;
  int r;

  c = connect_client(sock);
  r = qrs_client_draw(c, NULL, &d);
  cr_assert_eq(r, 0, "draw: %s", qrs_strerror(r));
  cr_assert(d.u > 0 && d.u < 1);
  qrs_client_free(c);
}

int
draw_from(struct qrs_client *c, const char *source, struct qrs_draw *d)
{
  struct qrs_draw_request rq;

  memset(&rq, 0, sizeof(rq));
  rq.source = source;
  return qrs_client_draw(c, &rq, d);
}

int
draw_committed(struct qrs_client *c, const uint8_t *salt, size_t salt_len,
               uint64_t step, uint32_t sample_count, struct qrs_draw *d)
{
  struct qrs_draw_request rq;
  struct qrs_commitment cm;

  memset(&cm, 0, sizeof(cm));
  cm.salt = salt;
  cm.salt_len = salt_len;
  cm.step = step;
  cm.prev_token_id = -1;
  memset(&rq, 0, sizeof(rq));
  rq.commitment = &cm;
  rq.sample_count = sample_count;
  return qrs_client_draw(c, &rq, d);
}

void
lm_row(float *row, size_t n, unsigned seed, double slope)
{
  size_t i;

  for (i = 0; i < n; i++)
    row[i] = (float)(slope * log(1.0 + (double)((i * 7919u + seed * 104729u)
                                                % n)));
}

struct qrs_sampler *
sampler_with(size_t vocab, ...)
{
  struct qrs_sampler_config *cfg;
  struct qrs_sampler *s;
  const char *key, *value;
  va_list ap;

  cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
  cr_assert_eq(qrs_sampler_config_set(cfg, "sample_count", "64"), 0);
  va_start(ap, vocab);
  while ((key = va_arg(ap, const char *))) {
    value = va_arg(ap, const char *);
    cr_assert_eq(qrs_sampler_config_set(cfg, key, value), 0, "%s=%s", key,
                 value);
  }
  va_end(ap);
  cr_assert_eq(qrs_sampler_new(cfg, vocab, &s), 0);
  qrs_sampler_config_free(cfg);
  return s;
}
