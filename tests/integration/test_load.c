/* Load under threads (issue 11): 64 clients with 4 threads each draw from
   one real qrsd through libqrs, blocking and pipelined, reading the error
   message and the server info as they go; qrsd restarts once in the
   middle, so every client reconnects while its other threads use it.
   Every call must succeed or return a typed error (a QRS_E_* code or a
   negative errno), and every thread gets its N_DRAWS draws (retrying
   after errors) within DEADLINE_S.  Run under
   TSan by .ci/run (build-tsan). */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include <qrs/client.h>

#include "harness.h"

#define N_CLIENTS 64
#define N_THREADS 4
#define N_DRAWS 40
#define DEADLINE_S 90

static struct daemon D;
static struct qrs_client *clients[N_CLIENTS];
static int64_t deadline_ns;

struct worker {
  struct qrs_client *c;
  int ok, failed, bad;
  int bad_rc;
  pthread_t t;
};

static int64_t
mono_ns(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* 0, a QRS_E_* code or a negative errno; not a stray value. */
static int
typed(int r)
{
  return r == 0 || (r < 0 && (r > -4096 || qrs_strerror_name(r) != NULL));
}

static void
account(struct worker *w, int r)
{
  if (r == 0) {
    w->ok++;
  } else if (typed(r)) {
    w->failed++;
  } else {
    w->bad++;
    w->bad_rc = r;
  }
}

static void *
work(void *arg)
{
  struct worker *w = arg;
  struct qrs_server_info info;
  const struct qrs_server_info *ip;
  struct qrs_draw d;
  uint32_t t;
  int i, r;

  for (i = 0; w->ok < N_DRAWS && mono_ns() < deadline_ns; i++) {
    if (i % 3 == 2) {
      r = qrs_client_draw_begin(w->c, NULL, &t);
      if (r == 0)
        r = qrs_client_draw_finish(w->c, t, &d);
    } else {
      r = qrs_client_draw(w->c, NULL, &d);
    }
    account(w, r);
    if (r < 0)
      usleep(10000);            /* qrsd restarting: try again shortly */
    if (r == 0 && !(d.u > 0.0 && d.u < 1.0)) {
      w->bad++;
      w->bad_rc = 1;
    }
    (void)strlen(qrs_client_errmsg(w->c));
    ip = qrs_client_server_info(w->c);
    if (!ip || qrs_client_get_server_info(w->c, &info) != 0 ||
        info.max_frame_bytes == 0) {
      w->bad++;
      w->bad_rc = 2;
    }
  }
  return NULL;
}

static void
stop(void)
{
  daemon_cleanup(&D);
}

Test(load, clients_with_threads_draw_or_get_typed_errors, .fini = stop)
{
  static struct worker w[N_CLIENTS * N_THREADS];
  struct qrs_client_options o;
  int i, r, ok, failed, bad;

  daemon_run(&D, "limits: { max_connections: 1024 }\n");
  memset(&o, 0, sizeof(o));
  o.timeout_ms = 20000;
  for (i = 0; i < N_CLIENTS; i++) {
    r = qrs_client_new(D.sock, &o, &clients[i]);
    cr_assert_eq(r, 0, "client %d: %s", i, qrs_strerror(r));
  }
  deadline_ns = mono_ns() + (int64_t)DEADLINE_S * 1000000000;
  for (i = 0; i < N_CLIENTS * N_THREADS; i++) {
    w[i].c = clients[i / N_THREADS];
    cr_assert_eq(pthread_create(&w[i].t, NULL, work, &w[i]), 0);
  }
  /* A restart while they draw: every client reconnects under load. */
  usleep(200000);
  daemon_stop(&D);
  close(D.notify_fd);
  daemon_start(&D, NULL);
  ok = failed = bad = 0;
  for (i = 0; i < N_CLIENTS * N_THREADS; i++) {
    pthread_join(w[i].t, NULL);
    ok += w[i].ok;
    failed += w[i].failed;
    bad += w[i].bad;
    cr_expect_eq(w[i].bad, 0, "thread %d: untyped result %d", i,
                 w[i].bad_rc);
    cr_expect_eq(w[i].ok, N_DRAWS, "thread %d: %d draws before the deadline",
                 i, w[i].ok);
  }
  for (i = 0; i < N_CLIENTS; i++)
    qrs_client_free(clients[i]);
  fprintf(stderr, "load: %d draws, %d typed errors, %d bad\n", ok, failed,
          bad);
  cr_expect_eq(bad, 0);
}
