/* Integration-test helpers that use libqrs (harness_client.c, linked
   only into the tests that link libqrs; harness.c does not need it). */
#ifndef QRS_TEST_HARNESS_CLIENT_H
#define QRS_TEST_HARNESS_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <qrs/client.h>
#include <qrs/sampler.h>

/* A client on sock, or the test fails. */
struct qrs_client *connect_client(const char *sock);

/* One draw through a new client succeeds. */
void assert_draw_works(const char *sock);

/* qrs_client_draw() from source (NULL: the default).  Returns its code;
   the draw in *d. */
int draw_from(struct qrs_client *c, const char *source, struct qrs_draw *d);

/* qrs_client_draw() of sample_count samples committed to salt (salt_len
   bytes; NULL, 0: empty), step and no previous token (-1).  Returns its
   code; the draw in *d. */
int draw_committed(struct qrs_client *c, const uint8_t *salt,
                   size_t salt_len, uint64_t step, uint32_t sample_count,
                   struct qrs_draw *d);

/* n logits shaped like a language model's: slope * log(1 + k), k a
   permutation of 0..n-1 that seed picks. */
void lm_row(float *row, size_t n, unsigned seed, double slope);

/* A sampler for vocab tokens with sample_count 64 and then each key,
   value pair that follows (NULL-terminated) set, or the test fails. */
struct qrs_sampler *sampler_with(size_t vocab, ...);

#endif
