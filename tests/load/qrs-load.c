/* qrs-load: 64 clients with 4 threads each draw from one real qrsd through
   libqrs, blocking and pipelined, reading the error message and the server
   info as they go; qrsd restarts once in the middle, so every client
   reconnects while its other threads use it.

   Every call must succeed or return a typed error (a QRS_E_* code or a
   negative errno), and every thread must get its draws (retrying after an
   error) within the deadline.  A plain program, not a criterion suite:
   criterion cannot run under ThreadSanitizer, and .ci/run runs this one
   in the TSan build.

     qrs-load QRSD [CLIENTS THREADS DRAWS DEADLINE_S]

   Exit status 0 when every check held; prints one line of counts. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include <qrs/client.h>

#include "timestamp.h"

struct worker {
  struct qrs_client *c;
  int ok, failed, bad, bad_rc;
  pthread_t t;
};

static int n_draws = 40;
static int64_t deadline_ns;

/* A QRS_E_* code or a negative errno. */
static int
typed(int r)
{
  return r < 0 && (r > -4096 || qrs_strerror_name(r) != NULL);
}

static void *
work(void *arg)
{
  struct worker *w = arg;
  struct qrs_server_info info;
  struct qrs_draw d;
  uint32_t t;
  int i, r;

  for (i = 0; w->ok < n_draws && mono_now_ns() < deadline_ns; i++) {
    if (i % 3 == 2) {
      r = qrs_client_draw_begin(w->c, NULL, &t);
      if (r == 0)
        r = qrs_client_draw_finish(w->c, t, &d);
    } else {
      r = qrs_client_draw(w->c, NULL, &d);
    }
    if (r == 0 && d.u > 0.0 && d.u < 1.0) {
      w->ok++;
    } else if (r != 0 && typed(r)) {
      w->failed++;
      usleep(10000);            /* qrsd restarting: again shortly */
    } else {
      w->bad++;
      w->bad_rc = r ? r : 1;
    }
    (void)strlen(qrs_client_errmsg(w->c));
    if (!qrs_client_server_info(w->c) ||
        qrs_client_get_server_info(w->c, &info) != 0 ||
        info.max_frame_bytes == 0) {
      w->bad++;
      w->bad_rc = 2;
    }
  }
  return NULL;
}

static pid_t
start_qrsd(const char *qrsd, const char *sock)
{
  struct qrs_client_options o;
  struct qrs_client *c;
  pid_t pid;
  int i;

  pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    execl(qrsd, qrsd, "--socket", sock, (char *)NULL);
    _exit(127);
  }
  memset(&o, 0, sizeof(o));
  o.timeout_ms = 1000;
  for (i = 0; i < 1000; i++) {
    if (qrs_client_new(sock, &o, &c) == 0) {
      qrs_client_free(c);
      return pid;
    }
    usleep(10000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return -1;
}

static int
stop_qrsd(pid_t pid)
{
  int st;

  kill(pid, SIGTERM);
  if (waitpid(pid, &st, 0) != pid)
    return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int
main(int argc, char **argv)
{
  struct qrs_client_options o;
  struct qrs_client **clients;
  struct worker *w;
  char dir[] = "/tmp/qrs-load-XXXXXX", sock[128];
  int n_clients = 64, n_threads = 4, deadline_s = 120;
  int i, r, ok, failed, bad, short_threads, st1, st2, rc;
  pid_t pid;

  if (argc < 2) {
    fprintf(stderr, "usage: qrs-load QRSD [CLIENTS THREADS DRAWS "
                    "DEADLINE_S]\n");
    return 2;
  }
  if (argc >= 6) {
    n_clients = atoi(argv[2]);
    n_threads = atoi(argv[3]);
    n_draws = atoi(argv[4]);
    deadline_s = atoi(argv[5]);
  }
  if (n_clients < 1 || n_threads < 1 || n_draws < 1 || deadline_s < 1) {
    fprintf(stderr, "qrs-load: counts must be positive\n");
    return 2;
  }
  if (!mkdtemp(dir)) {
    perror("qrs-load: mkdtemp");
    return 1;
  }
  snprintf(sock, sizeof(sock), "%s/qrsd.sock", dir);
  pid = start_qrsd(argv[1], sock);
  if (pid < 0) {
    fprintf(stderr, "qrs-load: qrsd did not come up on %s\n", sock);
    return 1;
  }
  clients = calloc((size_t)n_clients, sizeof(*clients));
  w = calloc((size_t)n_clients * (size_t)n_threads, sizeof(*w));
  if (!clients || !w)
    return 1;
  memset(&o, 0, sizeof(o));
  o.timeout_ms = 20000;
  for (i = 0; i < n_clients; i++) {
    r = qrs_client_new(sock, &o, &clients[i]);
    if (r < 0) {
      fprintf(stderr, "qrs-load: client %d: %s\n", i, qrs_strerror(r));
      stop_qrsd(pid);
      return 1;
    }
  }
  deadline_ns = mono_now_ns() + (int64_t)deadline_s * 1000000000;
  for (i = 0; i < n_clients * n_threads; i++) {
    w[i].c = clients[i / n_threads];
    if (pthread_create(&w[i].t, NULL, work, &w[i]) != 0) {
      fprintf(stderr, "qrs-load: pthread_create failed\n");
      return 1;
    }
  }
  /* The restart, while they draw. */
  usleep(200000);
  st1 = stop_qrsd(pid);
  pid = start_qrsd(argv[1], sock);
  if (pid < 0) {
    fprintf(stderr, "qrs-load: qrsd did not come up again\n");
    return 1;
  }
  ok = failed = bad = short_threads = 0;
  for (i = 0; i < n_clients * n_threads; i++) {
    pthread_join(w[i].t, NULL);
    ok += w[i].ok;
    failed += w[i].failed;
    bad += w[i].bad;
    if (w[i].bad)
      fprintf(stderr, "qrs-load: thread %d: untyped result %d\n", i,
              w[i].bad_rc);
    short_threads += w[i].ok < n_draws;
  }
  for (i = 0; i < n_clients; i++)
    qrs_client_free(clients[i]);
  st2 = stop_qrsd(pid);
  rmdir(dir);
  printf("qrs-load: %d clients x %d threads: %d draws, %d typed errors, "
         "%d untyped, %d threads short of %d draws; qrsd exit %d, %d\n",
         n_clients, n_threads, ok, failed, bad, short_threads, n_draws, st1,
         st2);
  rc = bad == 0 && short_threads == 0 && st1 == 0 && st2 == 0 ? 0 : 1;
  free(clients);
  free(w);
  return rc;
}
