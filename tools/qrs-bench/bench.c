/* The harness the qrs-bench subcommands share (see bench.h): option
   parsing, statistics of the samples, pinning and process chores.  Nothing
   here runs inside a timed region. */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include <qrs/client.h>

#include "bench.h"
#include "sortcmp.h"

int
bench_opts_parse(int argc, char **argv, const struct cli_opt *opts,
                 void (*usage)(FILE *f))
{
  const struct cli cli = {
    .prog = "qrs-bench", .opts = opts, .usage = usage,
  };

  return cli_opts_parse(&cli, argc, argv);
}

void
bench_lat_init(struct bench_lat *l, size_t cap)
{
  l->v = malloc((cap ? cap : 1) * sizeof(*l->v));
  l->n = 0;
  l->cap = cap;
  if (!l->v) {
    fprintf(stderr, "qrs-bench: out of memory\n");
    exit(1);
  }
}

void
bench_lat_done(struct bench_lat *l)
{
  free(l->v);
  l->v = NULL;
  l->n = l->cap = 0;
}

void
bench_lat_sort(struct bench_lat *l)
{
  qsort(l->v, l->n, sizeof(*l->v), sort_cmp_i64);
}

double
bench_lat_pct_us(const struct bench_lat *l, double p)
{
  size_t i;

  i = (size_t)(p * (double)(l->n - 1) + 0.5);
  return (double)l->v[i] / 1000.0;
}

struct qrs_client *
bench_connect(const char *sock)
{
  struct qrs_client *c;
  int r;

  r = qrs_client_new(sock, NULL, &c);
  if (r < 0) {
    fprintf(stderr, "qrs-bench: cannot connect to %s: %s\n", sock,
            qrs_strerror(r));
    exit(1);
  }
  return c;
}

void
bench_lat_draws(struct qrs_client *c, const struct bench_rounds *r,
                struct bench_lat *l)
{
  struct qrs_draw_request rq;
  struct qrs_draw d;
  int64_t t0;
  int i, err;

  memset(&rq, 0, sizeof(rq));
  rq.sample_count = r->samples;
  for (i = 0; i < r->per_round; i++) {
    t0 = mono_now_ns();
    err = qrs_client_draw(c, &rq, &d);
    if (err < 0) {
      fprintf(stderr, "qrs-bench: draw: %s\n", qrs_strerror(err));
      exit(1);
    }
    bench_lat_add(l, mono_now_ns() - t0);
  }
}

void
bench_print_lat(const char *name, struct bench_lat *l)
{
  bench_lat_sort(l);
  printf("  %-34s p50 %8.1f us   p99 %8.1f us   p99.9 %8.1f us\n", name,
         bench_lat_pct_us(l, 0.5), bench_lat_pct_us(l, 0.99),
         bench_lat_pct_us(l, 0.999));
}

double
bench_median(double *v, size_t n)
{
  qsort(v, n, sizeof(*v), sort_cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double
bench_throughput(struct bench_worker *w, int n, double seconds,
                 void *(*fn)(void *), uint64_t *failed)
{
  uint64_t total = 0;
  int64_t start;
  int i;

  start = mono_now_ns();
  for (i = 0; i < n; i++) {
    w[i].end = start + (int64_t)(seconds * 1e9);
    w[i].count = w[i].failed = 0;
    pthread_create(&w[i].th, NULL, fn, &w[i]);
  }
  *failed = 0;
  for (i = 0; i < n; i++) {
    pthread_join(w[i].th, NULL);
    total += w[i].count;
    *failed += w[i].failed;
  }
  return (double)total / ((double)(mono_now_ns() - start) / 1e9);
}

int
bench_pin(int cpu)
{
  cpu_set_t set;

  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof(set), &set);
}

int
bench_unpin(void)
{
  cpu_set_t set;
  long n, i;

  n = sysconf(_SC_NPROCESSORS_ONLN);
  CPU_ZERO(&set);
  for (i = 0; i < n && i < CPU_SETSIZE; i++)
    CPU_SET(i, &set);
  return sched_setaffinity(0, sizeof(set), &set);
}

const char *
bench_sibling(const char *rel, char *buf, size_t len)
{
  char self[4096], *slash;
  ssize_t n;

  n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0)
    return NULL;
  self[n] = '\0';
  slash = strrchr(self, '/');
  if (!slash)
    return NULL;
  *slash = '\0';
  snprintf(buf, len, "%s/%s", self, rel);
  return buf;
}

const char *
bench_find_qrsd(const char *opt)
{
  static char path[4200];

  if (opt)
    return opt;
  if (getenv("QRSD") && *getenv("QRSD"))
    return getenv("QRSD");
  if (bench_sibling("../../daemon/qrsd", path, sizeof(path)) &&
      access(path, X_OK) == 0)
    return path;
  return "qrsd";
}

pid_t
bench_start_qrsd(const char *bin, const char *sock, const char *conf,
                 int pin)
{
  pid_t pid;

  fflush(stdout);
  pid = fork();
  if (pid == 0) {
    if (pin)
      bench_pin(0);
    if (!freopen("/dev/null", "w", stderr))
      _exit(127);
    if (conf)
      execlp(bin, "qrsd", "--socket", sock, "--config", conf,
             "--status-file", "", (char *)NULL);
    else
      execlp(bin, "qrsd", "--socket", sock, (char *)NULL);
    _exit(127);
  }
  if (pid > 0 && bench_wait_qrsd(sock, 200) == 0)
    return pid;
  fprintf(stderr, "qrs-bench: %s did not start\n", bin);
  exit(1);
}

int
bench_wait_qrsd(const char *sock, int tries)
{
  struct qrs_client *c;
  int i;

  for (i = 0; i < tries; i++) {
    if (qrs_client_new(sock, NULL, &c) == 0) {
      qrs_client_free(c);
      return 0;
    }
    usleep(10000);
  }
  return -1;
}

void
bench_kill(pid_t *pid, int sig)
{
  if (*pid <= 0)
    return;
  kill(*pid, sig);
  waitpid(*pid, NULL, 0);
  *pid = -1;
}

int
bench_rmdir(const char *dir)
{
  char cmd[128];

  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : -1;
}

static const char *tmpdir_made;

static void
tmpdir_remove(void)
{
  if (bench_rmdir(tmpdir_made) < 0)
    fprintf(stderr, "qrs-bench: could not remove %s\n", tmpdir_made);
}

int
bench_tmpdir(char *dir, size_t size, void (*stop)(void))
{
  snprintf(dir, size, "/tmp/qrs-bench-XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return -1;
  }
  tmpdir_made = dir;
  atexit(tmpdir_remove);
  if (stop)
    atexit(stop);               /* the last registered runs first */
  signal(SIGPIPE, SIG_IGN);
  return 0;
}
