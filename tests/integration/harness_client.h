/* Integration-test helpers that use libqrs (only for tests linked with
   it; harness.c itself does not need libqrs). */
#ifndef QRS_TEST_HARNESS_CLIENT_H
#define QRS_TEST_HARNESS_CLIENT_H

#include <criterion/criterion.h>

#include <qrs/client.h>

/* A client on sock, or the test fails. */
static inline struct qrs_client *
connect_client(const char *sock)
{
  struct qrs_client *c;
  int r;

  r = qrs_client_new(sock, NULL, &c);
  cr_assert_eq(r, 0, "qrs_client_new(%s): %s", sock, qrs_strerror(r));
  return c;
}

/* One draw through a new client succeeds. */
static inline void
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

#endif
