/* qrs-bench budgets: qrsd's operating budgets, measured on the real
   daemon.

   ready   exec of qrsd until it tells systemd READY=1 (sd_notify on a
           NOTIFY_SOCKET this program listens on) and until its first
           draw is served, with local sources only; next to the floor of
           the same exec: fork + exec + exit of /bin/true.  Budget: ready
           <= 100 ms.
   idle    the CPU time of every qrsd thread (/proc/PID/task/TID/schedstat,
           nanoseconds) over a period with no client, as a share of one
           core.  Budget: < 0.1 %.
   reload  qrs_client_reload() on that qrsd, its file alternating between
           the sources above and the same with a device source added and
           a limit changed (each reload applies a source opened or
           retired): the loop time of the apply step qrsd reports, and
           the round trip.  Budget: <= 50 ms of loop time.

   The figures are printed with their budgets; the exit status is 0 when
   the run completed (met or not: a benchmark measures, it does not
   judge), 1 when it could not. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <qrs/client.h>

#include "bench.h"

struct opts {
  const char *qrsd;
  const char *config;           /* NULL: the local-sources config below */
  int starts;
  double idle_seconds;
  int reloads;
};

static char tmpdir[64];
static pid_t qrsd_pid = -1;

static void
stop_servers(void)
{
  bench_kill(&qrsd_pid, SIGTERM);
}

/* The sources a GPU host has without network: the OS, a device node, the
   timing jitter of this CPU. */
static int
write_config_v(const char *path, int variant)
{
  FILE *f = fopen(path, "w");

  if (!f)
    return -1;
  if (variant)
    fprintf(f, "limits: { max_inflight_per_connection: 32 }\n");
  fprintf(f,
          "socket: { path: %s/qrsd.sock, mode: \"0600\", group: \"\" }\n"
          "state_dir: %s\n"
          "status_file: %s/status.json\n"
          "default_source: system\n"
          "sources:\n"
          "  system: { type: system }\n"
          "  dev: { type: device, path: /dev/urandom }\n"
          "  jitter: { type: timing, conditioning: sha256 }\n",
          tmpdir, tmpdir, tmpdir);
  if (variant)
    fprintf(f, "  extra: { type: device, path: /dev/urandom }\n");
  return fclose(f) == 0 ? 0 : -1;
}

static int
write_config(const char *path)
{
  return write_config_v(path, 0);
}

/* n reloads of the running qrsd at sock, its file conf alternating (when
   it is ours); the apply step's loop time and the round trip, in ms. */
static int
measure_reloads(const char *sock, const char *conf, int ours, int n,
                double *apply_ms, double *trip_ms)
{
  struct qrs_client *c;
  struct qrs_reload *rl;
  int64_t t0;
  int i, r;

  r = qrs_client_new(sock, NULL, &c);
  if (r != 0) {
    fprintf(stderr, "qrs-bench budgets: cannot connect to %s\n", sock);
    return -1;
  }
  for (i = 0; i < n; i++) {
    if (ours && write_config_v(conf, (i + 1) % 2) < 0) {
      perror(conf);
      qrs_client_free(c);
      return -1;
    }
    t0 = mono_now_ns();
    r = qrs_client_reload(c, &rl);
    trip_ms[i] = (double)(mono_now_ns() - t0) / 1e6;
    if (r != 0) {
      fprintf(stderr, "qrs-bench budgets: reload %d: %s\n", i + 1,
              qrs_client_errmsg(c));
      qrs_client_free(c);
      return -1;
    }
    apply_ms[i] = (double)rl->apply_ns / 1e6;
    if (ours && rl->applied == 0) {
      fprintf(stderr, "qrs-bench budgets: reload %d applied nothing\n",
              i + 1);
      qrs_reload_free(rl);
      qrs_client_free(c);
      return -1;
    }
    qrs_reload_free(rl);
  }
  qrs_client_free(c);
  return 0;
}

/* A datagram socket at path for sd_notify(); its fd. */
static int
notify_listen(const char *path)
{
  struct sockaddr_un sa;
  int fd;

  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof(sa.sun_path))
    return -1;
  strcpy(sa.sun_path, path);
  fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Wait up to ms for a notification that holds READY=1; 0, or -1. */
static int
wait_ready(int fd, int ms)
{
  char buf[4096];
  struct pollfd p = { .fd = fd, .events = POLLIN };
  int64_t end = mono_now_ns() + (int64_t)ms * 1000000;
  ssize_t n;

  while (mono_now_ns() < end) {
    if (poll(&p, 1, (int)((end - mono_now_ns()) / 1000000) + 1) <= 0)
      continue;
    n = recv(fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0)
      continue;
    buf[n] = '\0';
    if (!strncmp(buf, "READY=1", 7) || strstr(buf, "\nREADY=1"))
      return 0;
  }
  return -1;
}

static pid_t
spawn_qrsd(const char *bin, const char *conf, const char *notify)
{
  pid_t pid = fork();

  if (pid == 0) {
    int fd = open("/dev/null", O_WRONLY);

    if (fd >= 0) {
      dup2(fd, 2);
      close(fd);
    }
    setenv("NOTIFY_SOCKET", notify, 1);
    execl(bin, "qrsd", "-c", conf, (char *)NULL);
    _exit(127);
  }
  return pid;
}

/* One draw through a new connection; 0 once it is served. */
static int
first_draw(const char *sock)
{
  struct qrs_client *c;
  struct qrs_draw_request rq;
  struct qrs_draw d;
  int r;

  if (qrs_client_new(sock, NULL, &c) < 0)
    return -1;
  memset(&rq, 0, sizeof(rq));
  r = qrs_client_draw(c, &rq, &d);
  qrs_client_free(c);
  return r < 0 ? -1 : 0;
}

/* The floor of an exec: fork, exec /bin/true, reap; in ms. */
static double
exec_floor_ms(void)
{
  int64_t t0 = mono_now_ns();
  pid_t pid = fork();
  int st;

  if (pid == 0) {
    execl("/bin/true", "true", (char *)NULL);
    _exit(127);
  }
  waitpid(pid, &st, 0);
  return (double)(mono_now_ns() - t0) / 1e6;
}

/* CPU time of all of pid's threads in ns, or -1. */
static int64_t
cpu_ns(pid_t pid)
{
  char path[320], line[128];
  struct dirent *de;
  int64_t sum = 0;
  long long v;
  DIR *d;
  FILE *f;

  snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
  d = opendir(path);
  if (!d)
    return -1;
  while ((de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.')
      continue;
    snprintf(path, sizeof(path), "/proc/%d/task/%s/schedstat", (int)pid,
             de->d_name);
    f = fopen(path, "r");
    if (!f)
      continue;                 /* the thread ended meanwhile */
    if (fgets(line, sizeof(line), f) && sscanf(line, "%lld", &v) == 1)
      sum += v;
    fclose(f);
  }
  closedir(d);
  return sum;
}

static void
usage(FILE *f)
{
  fprintf(f,
"Usage: qrs-bench budgets [OPTIONS]\n"
"\n"
"qrsd's operating budgets, measured on the real daemon and printed with\n"
"their targets: the time from exec to READY=1 and to the first served\n"
"draw (<= 100 ms, next to the floor of exec'ing /bin/true), the idle\n"
"CPU with no client (< 0.1 %% of a core), and the loop time of a reload\n"
"(<= 50 ms; with the default configuration each reload adds or retires\n"
"a device source and changes a limit; with --config the file is reloaded\n"
"as it is).\n"
"\n"
"Options:\n"
"      --qrsd PATH        the daemon to run (default: $QRSD, else\n"
"                         the build tree's daemon/qrsd)\n"
"      --config FILE      qrsd's configuration (default: one with local\n"
"                         sources only: system, /dev/urandom, timing)\n"
"      --starts N         start-ups to measure (default 20)\n"
"      --idle-seconds S   length of the idle measurement (default 60)\n"
"      --reloads N        reloads to measure (default 20)\n"
"  -h, --help             show this help and exit\n");
}

int
bench_budgets(int argc, char **argv)
{
  struct opts o = { .starts = 20, .idle_seconds = 60, .reloads = 20 };
  const struct cli_opt opts[] = {
    { .name = "qrsd", .type = CLI_OPT_STRING, .field = &o.qrsd },
    { .name = "config", .type = CLI_OPT_STRING, .field = &o.config },
    { .name = "starts", .type = CLI_OPT_INT, .field = &o.starts },
    { .name = "idle-seconds", .type = CLI_OPT_DOUBLE,
      .field = &o.idle_seconds },
    { .name = "reloads", .type = CLI_OPT_INT, .field = &o.reloads },
    BENCH_OPTS_END,
  };
  char conf[128], notify[128], sock[128];
  double *ready, *served, *floor_ms, *apply_ms, *trip_ms, idle_pct, med;
  const char *bin;
  int64_t t0, c0, c1, w0, w1;
  int i, nfd, r;

  r = bench_opts_parse(argc, argv, opts, usage);
  if (r >= 0)
    return r;
  if (o.starts < 1 || o.idle_seconds <= 0 || o.reloads < 1) {
    fprintf(stderr, "qrs-bench budgets: bad option value\n");
    return 2;
  }
  bin = bench_find_qrsd(o.qrsd);
  if (bench_tmpdir(tmpdir, sizeof(tmpdir), stop_servers) < 0)
    return 1;
  snprintf(conf, sizeof(conf), "%s/qrsd.yaml", tmpdir);
  snprintf(notify, sizeof(notify), "%s/notify", tmpdir);
  snprintf(sock, sizeof(sock), "%s/qrsd.sock", tmpdir);
  if (o.config)
    snprintf(conf, sizeof(conf), "%s", o.config);
  else if (write_config(conf) < 0) {
    perror(conf);
    return 1;
  }
  nfd = notify_listen(notify);
  if (nfd < 0) {
    perror(notify);
    return 1;
  }
  ready = calloc((size_t)o.starts, sizeof(double));
  served = calloc((size_t)o.starts, sizeof(double));
  floor_ms = calloc((size_t)o.starts, sizeof(double));
  apply_ms = calloc((size_t)o.reloads, sizeof(double));
  trip_ms = calloc((size_t)o.reloads, sizeof(double));
  if (!ready || !served || !floor_ms || !apply_ms || !trip_ms) {
    fprintf(stderr, "qrs-bench budgets: out of memory\n");
    return 1;
  }

  /* Start-ups: each one measured from just before the fork. */
  for (i = 0; i < o.starts; i++) {
    floor_ms[i] = exec_floor_ms();
    t0 = mono_now_ns();
    qrsd_pid = spawn_qrsd(bin, conf, notify);
    if (wait_ready(nfd, 5000) < 0) {
      fprintf(stderr, "qrs-bench budgets: %s -c %s sent no READY=1 within "
              "5 s\n", bin, conf);
      return 1;
    }
    ready[i] = (double)(mono_now_ns() - t0) / 1e6;
    while (first_draw(sock) < 0) {
      if (mono_now_ns() - t0 > 5000000000ll) {
        fprintf(stderr, "qrs-bench budgets: no draw served within 5 s\n");
        return 1;
      }
      usleep(200);
    }
    served[i] = (double)(mono_now_ns() - t0) / 1e6;
    if (i + 1 < o.starts)
      bench_kill(&qrsd_pid, SIGTERM);
  }

  /* Idle: the last qrsd, after its first draw, with no client. */
  sleep(1);                     /* past the start-up work */
  c0 = cpu_ns(qrsd_pid);
  w0 = mono_now_ns();
  usleep((useconds_t)(o.idle_seconds * 1e6));
  c1 = cpu_ns(qrsd_pid);
  w1 = mono_now_ns();
  if (c0 < 0 || c1 < 0) {
    fprintf(stderr, "qrs-bench budgets: cannot read qrsd's CPU time\n");
    return 1;
  }
  idle_pct = 100.0 * (double)(c1 - c0) / (double)(w1 - w0);

  /* Reloads: the same qrsd, after the idle period. */
  if (measure_reloads(sock, conf, o.config == NULL, o.reloads, apply_ms,
                      trip_ms) < 0)
    return 1;

  printf("qrs-bench budgets: %s, config %s, %d start-ups\n", bin,
         o.config ? o.config : "local sources (system, /dev/urandom, timing)",
         o.starts);
  /* bench_median() sorts: the last value is then the largest */
  med = bench_median(ready, (size_t)o.starts);
  printf("  exec -> READY=1       median %7.2f ms   max %7.2f ms   "
         "(budget <= 100 ms)\n", med, ready[o.starts - 1]);
  med = bench_median(served, (size_t)o.starts);
  printf("  exec -> first draw    median %7.2f ms   max %7.2f ms\n", med,
         served[o.starts - 1]);
  printf("  floor: exec /bin/true median %7.2f ms\n",
         bench_median(floor_ms, (size_t)o.starts));
  printf("  idle CPU over %.0f s    %.4f %% of a core (%.1f ms)   "
         "(budget < 0.1 %%)\n", (double)(w1 - w0) / 1e9, idle_pct,
         (double)(c1 - c0) / 1e6);
  med = bench_median(apply_ms, (size_t)o.reloads);
  printf("  reload, loop time     median %7.3f ms   max %7.3f ms   "
         "(budget <= 50 ms; %d reloads%s)\n", med, apply_ms[o.reloads - 1],
         o.reloads, o.config ? "" : ", each a device source added or "
         "retired and a limit changed");
  med = bench_median(trip_ms, (size_t)o.reloads);
  printf("  reload, round trip    median %7.3f ms   max %7.3f ms   (qrsctl "
         "reload's wait: the file read and checked off the loop)\n", med,
         trip_ms[o.reloads - 1]);
  free(apply_ms);
  free(trip_ms);
  free(ready);
  free(served);
  free(floor_ms);
  close(nfd);
  return 0;
}
