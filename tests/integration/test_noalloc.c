/* qrs_sampler_sample_token() against a real qrsd makes no heap allocation per
   token (sampler.h's promise), the draw's reply included.

   The unit test's --wrap=malloc sees only the calls libqrs's own objects
   make; protobuf-c unpacks replies inside libprotobuf-c.so.  This program
   replaces malloc, calloc and realloc for the whole process (glibc's
   __libc_* do the work) and counts the calls made by the counting thread.
   Not built under sanitizers, which replace malloc themselves. */
#define _GNU_SOURCE
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <qrs/client.h>
#include <qrs/sampler.h>

#include "harness.h"
#include "harness_client.h"

void *__libc_malloc(size_t n);
void *__libc_calloc(size_t n, size_t m);
void *__libc_realloc(void *p, size_t n);

static __thread int counting;
static __thread long nalloc;

void *
malloc(size_t n)
{
  if (counting)
    nalloc++;
  return __libc_malloc(n);
}

void *
calloc(size_t n, size_t m)
{
  if (counting)
    nalloc++;
  return __libc_calloc(n, m);
}

void *
realloc(void *p, size_t n)
{
  if (counting)
    nalloc++;
  return __libc_realloc(p, n);
}

static struct daemon D;

static void
stop(void)
{
  daemon_cleanup(&D);
}

static void
count_tokens(const char *prefetch)
{
  struct qrs_token_record rec;
  struct qrs_client *c;
  struct qrs_sampler *s;
  float row[512];
  int t, r;

  c = connect_client(D.sock);
  s = sampler_with(512, "entropy_prefetch", prefetch, "temperature_strategy",
                   "edt", NULL);
  /* Warm-up: the first tokens may size the receive buffer. */
  for (t = 0; t < 5; t++) {
    lm_row(row, 512, (unsigned)t, -1.1);
    cr_assert_eq(qrs_sampler_sample_token(s, c, row, QRS_DTYPE_F32, 512,
                                          NULL, &rec), 0);
  }
  nalloc = 0;
  for (t = 0; t < 50; t++) {
    lm_row(row, 512, (unsigned)t + 5, -1.1);
    counting = 1;
    r = qrs_sampler_sample_token(s, c, row, QRS_DTYPE_F32, 512, NULL, &rec);
    counting = 0;
    cr_assert_eq(r, 0, "token %d: %s", t, qrs_strerror(r));
  }
  cr_expect_eq(nalloc, 0, "entropy_prefetch=%s: %ld allocations in 50 tokens",
               prefetch, nalloc);
  qrs_sampler_free(s);
  qrs_client_free(c);
}

Test(noalloc, sample_token_with_a_real_daemon_does_not_allocate,
     .fini = stop)
{
  void *(*volatile alloc)(size_t) = malloc;
  void *p;

  daemon_run(&D, NULL);
  /* The counter counts (through a pointer the compiler cannot elide). */
  nalloc = 0;
  counting = 1;
  p = alloc(16);
  counting = 0;
  free(p);
  cr_assert_eq(nalloc, 1);
  count_tokens("true");
  count_tokens("false");
}
