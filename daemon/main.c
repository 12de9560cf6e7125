/* qrsd: the qrs entropy daemon.  Owns the entropy sources and serves
   just-in-time amplified draws over a Unix socket. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>

#include "qrs-config.h"

#if HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include <uv.h>

#include "conf/conf.h"
#include "base/log.h"
#include "base/notify.h"
#include "base/regfile.h"
#include "timestamp.h"
#include "base/looplock.h"
#include "server/server.h"
#include "ops/watchdog.h"

static struct server srv;
static struct looplock lk;
static uv_signal_t sig_term, sig_int, sig_hup;
static struct watchdog wd;
/* Test hook (QRSD_TEST_HOOKS=1 in the environment only): SIGUSR2 blocks
   the loop for QRSD_TEST_STALL_MS (default 3000) ms, as a wedged loop
   would, so that a test can see the watchdog pings stop. */
static uv_signal_t sig_stall;
static int stall_hook;
/* SIGTERM or SIGINT before the loop's handlers (start-up), or 0. */
static volatile sig_atomic_t early_signal;

static void
usage(FILE *f)
{
  fprintf(f,
"Usage: qrsd [OPTION]...\n"
"\n"
"qrsd is the qrs entropy daemon.  It owns every configured entropy source\n"
"and serves just-in-time amplified draws (fresh bytes -> one uniform u)\n"
"and raw bytes to local clients (libqrs, qrsctl) over a Unix socket.\n"
"It runs in the foreground; under systemd use Type=notify.\n"
"\n"
"Options:\n"
"  -c, --config FILE   read the configuration from FILE (default:\n"
"                      %s if it exists, else the\n"
"                      built-in default, which equals the shipped file)\n"
"  -s, --socket PATH   listen on PATH instead of the configured socket.path\n"
"  -S, --status-file PATH\n"
"                      write the status file to PATH instead of the\n"
"                      configured status_file (\"\" disables it)\n"
"  -n, --check         check the configuration, report, and exit\n"
"  -p, --print-config  print the effective configuration as YAML and exit\n"
"  -v, --verbose       log debug messages too (whatever log.level says)\n"
"  -h, --help          show this help and exit\n"
"  -V, --version       show the version and exit\n"
"\n"
"Signals:\n"
"  SIGTERM, SIGINT     stop accepting, answer requests in flight, exit 0\n"
"                      (during start-up: stop there, exit 0)\n"
"  SIGHUP              reload the configuration file: parsed off the\n"
"                      event loop; an invalid one is refused (logged with\n"
"                      file, line and key) and the one in use keeps\n"
"                      serving; limits, access lists, log.level and\n"
"                      monitor.* change live, other keys are logged as\n"
"                      needing a restart and keep their value; connections\n"
"                      and requests in flight are not touched (also\n"
"                      'qrsctl reload', 'systemctl reload qrsd')\n"
"\n"
"Socket activation: when systemd passes a listening socket (LISTEN_FDS),\n"
"qrsd serves on it instead of binding socket.path.  At start, a socket file\n"
"on which a live daemon answers is refused; one whose connect is refused\n"
"(ECONNREFUSED, a stale socket) is replaced; any other file is left alone.\n"
"\n"
"Exit status: 0 on a clean stop or a valid configuration (-n), 1 on a\n"
"configuration or start-up error, 2 on bad usage.\n"
"\n"
"Examples:\n"
"  qrsd -n -c /etc/qrsd/qrsd.yaml      check a configuration file\n"
"  qrsd --socket ./run/qrsd.sock       run with the built-in default\n"
"  qrsctl --socket ./run/qrsd.sock draw\n",
          QRS_DEFAULT_CONFIG);
}

static void
on_early_signal(int signum)
{
  early_signal = signum;
}

/* Signals from the first instruction: until the loop's handlers take
   over, SIGTERM and SIGINT are noted (without SA_RESTART, so that a
   blocking call returns EINTR) and the start-up stops cleanly at its next
   step; SIGHUP is ignored.  Unblocked too: a parent may have
   left them blocked (then a pending one arrives here). */
static void
catch_early_signals(void)
{
  struct sigaction sa;
  sigset_t set;

  memset(&sa, 0, sizeof(sa));
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = on_early_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sa.sa_handler = SIG_IGN;
  sigaction(SIGHUP, &sa, NULL);
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

/* A start-up step is done (or failed: it may have been interrupted): on
   an early signal, release what the steps so far made and exit 0. */
static void
stop_if_signalled(struct qrsd_conf *conf, int server_up)
{
  if (!early_signal)
    return;
  log_info("%s during start-up: stopping", strsignal(early_signal));
  if (server_up)
    server_done(&srv);
  conf_free(conf);
  exit(0);
}

static struct qrsd_conf *
load_config(const char *path)
{
  struct qrsd_conf *conf;
  char err[512];
  int r;

  if (!path && access(QRS_DEFAULT_CONFIG, F_OK) == 0)
    path = QRS_DEFAULT_CONFIG;
  err[0] = '\0';
  if (path)
    r = conf_load_file(path, &conf, err, sizeof(err));
  else
    r = conf_load_default(&conf, err, sizeof(err));
  if (r < 0) {
    stop_if_signalled(NULL, 0);
    if (err[0])
      fprintf(stderr, "qrsd: %s\n", err);
    else
      fprintf(stderr, "qrsd: cannot read %s: %s\n",
              path ? path : "the built-in configuration", strerror(-r));
    exit(1);
  }
  return conf;
}

static void
on_stopped(struct server *s)
{
  sigset_t set;

  (void)s;
  /* Closing the handles restores the default actions: block the signals
     first, so that one arriving in between waits, and is then ignored
     instead of killing us while we finish cleanly. */
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  uv_close((uv_handle_t *)&sig_term, NULL);
  uv_close((uv_handle_t *)&sig_int, NULL);
  uv_close((uv_handle_t *)&sig_hup, NULL);
  if (stall_hook)
    uv_close((uv_handle_t *)&sig_stall, NULL);
  watchdog_stop(&wd);
  signal(SIGTERM, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

static void
on_stall(uv_signal_t *h, int signum)
{
  const char *v = getenv("QRSD_TEST_STALL_MS");
  long ms = v ? strtol(v, NULL, 10) : 3000;
  struct timespec ts;

  (void)h;
  (void)signum;
  if (ms <= 0 || ms > 600000)
    ms = 3000;
  log_warn("test hook: blocking the loop for %ld ms", ms);
  ts.tv_sec = ms / 1000;
  ts.tv_nsec = (ms % 1000) * 1000000L;
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
    ;
}

static void
on_signal(uv_signal_t *h, int signum)
{
  if (signum == SIGHUP) {
    server_reload(&srv, NULL, 0);
    return;
  }
  if (srv.stopping)
    return;
  log_info("%s: stopping", strsignal(signum));
  notify("STOPPING=1");
  server_stop(&srv, on_stopped);
}

/* The listening socket systemd passed, or -1. */
static int
activated_fd(void)
{
#if HAVE_SYSTEMD
  int n;

  n = sd_listen_fds(1);
  if (n < 0)
    fatal("cannot read the sockets systemd passed: %s", strerror(-n));
  if (n == 0)
    return -1;
  if (n > 1)
    fatal("systemd passed %d sockets; qrsd takes exactly one", n);
  if (sd_is_socket_unix(SD_LISTEN_FDS_START, SOCK_STREAM, 1, NULL, 0) <= 0)
    fatal("the socket systemd passed is not a listening Unix stream "
          "socket");
  return SD_LISTEN_FDS_START;
#else
  return -1;
#endif
}

/* Descriptors the config needs: a connection each, those refused with
   BUSY, and some for sources, the journal and the listener.  Raise the
   soft limit towards the hard one if needed; warn if it stays short. */
static void
check_nofile(const struct qrsd_conf *conf)
{
  struct rlimit rl;
  rlim_t need;

  need = (rlim_t)conf->max_connections + 64 + 64 + conf->n_sources;
  if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= need)
    return;
  if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need)
    rl.rlim_cur = need;
  else
    rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < need)
    log_warn("limits.max_connections %u needs about %llu file descriptors, "
             "but RLIMIT_NOFILE is %llu: raise it (LimitNOFILE= in "
             "qrsd.service) or lower max_connections", conf->max_connections,
             (unsigned long long)need, (unsigned long long)rl.rlim_cur);
}

static void
log_start(const struct qrsd_conf *conf, int activated)
{
  struct reg_info ri;
  char line[1024];
  size_t i, n, len;

  len = 0;
  line[0] = '\0';
  n = registry_count(srv.reg);
  for (i = 0; i < n && len < sizeof(line); i++) {
    registry_info(srv.reg, i, &ri);
    len += (size_t)snprintf(line + len, sizeof(line) - len, "%s%s: %s%s%s",
                            i ? ", " : "", ri.name, ri.detail,
                            strcmp(ri.fallback, "error") ? ", fallback " :
                            "", strcmp(ri.fallback, "error") ? ri.fallback :
                            "");
  }
  log_ev(LOG_LEVEL_INFO, &(struct log_fields){ .event = "start" },
         "qrsd %s listening on %s (%s); default source '%s'; sources: %s;"
         " config %s", QRS_VERSION, srv.socket_path,
         activated ? "socket activation" : "bound by qrsd",
         registry_default(srv.reg), line, conf->file);
  for (i = 0; i < n; i++) {
    registry_info(srv.reg, i, &ri);
    if (!ri.production)
      log_warn("source '%s' is a %s source: not for production", ri.name,
               ri.type);
  }
}

/* Warm-up: one small fetch from every network upstream once qrsd is
   serving.  It never delays READY=1; a failure is logged, and the registry
   marks the source degraded (or failed) as for any fetch. */
static void
on_warmed(void *ctx, const struct reg_result *res)
{
  /* res->source, not ctx: a reload may free the configuration's sources
     (and their names) while the warm-up is in flight. */
  const char *name = res->source;

  (void)ctx;
  if (res->status == 0 && !res->fallback)
    log_info("source '%s': warm-up fetch ok", name);
  else
    log_warn("source '%s': warm-up fetch failed (%s); %s", name,
             res->status < 0 ? res->why : "served by its fallback",
             res->status < 0 ? "its requests fail until it answers" :
             "serving from its fallback until it answers");
}

static void
warm_up(const struct qrsd_conf *conf)
{
  int64_t deadline;
  size_t i;
  int r;

  deadline = mono_now_ns() + (int64_t)conf->request_timeout_ms * 1000000;
  for (i = 0; i < conf->n_sources; i++) {
    if (conf->sources[i].type != CONF_SOURCE_GRPC)
      continue;
    r = registry_fetch(srv.reg, conf->sources[i].name, 8, 0, deadline,
                       on_warmed, NULL);
    if (r < 0)
      log_warn("source '%s': cannot start the warm-up fetch: %s",
               conf->sources[i].name, strerror(-r));
  }
}

int
main(int argc, char **argv)
{
  static const struct option opts[] = {
    { "config", required_argument, NULL, 'c' },
    { "socket", required_argument, NULL, 's' },
    { "status-file", required_argument, NULL, 'S' },
    { "check", no_argument, NULL, 'n' },
    { "print-config", no_argument, NULL, 'p' },
    { "verbose", no_argument, NULL, 'v' },
    { "help", no_argument, NULL, 'h' },
    { "version", no_argument, NULL, 'V' },
    { NULL, 0, NULL, 0 },
  };
  const char *config_path, *socket_path, *status_path;
  struct qrsd_conf *conf;
  int opt, check, print, verbose, fd, r;
  enum log_level level;
  uv_loop_t *loop;
  char err[512];
  char status[512];

  catch_early_signals();
  config_path = NULL;
  socket_path = NULL;
  status_path = NULL;
  check = 0;
  print = 0;
  verbose = 0;
  while ((opt = getopt_long(argc, argv, "c:s:S:npvhV", opts, NULL)) != -1) {
    switch (opt) {
    case 'c':
      config_path = optarg;
      break;
    case 's':
      socket_path = optarg;
      break;
    case 'S':
      status_path = optarg;
      break;
    case 'n':
      check = 1;
      break;
    case 'p':
      print = 1;
      break;
    case 'v':
      verbose = 1;
      log_set_level(LOG_LEVEL_DEBUG);
      break;
    case 'h':
      usage(stdout);
      return 0;
    case 'V':
      printf("qrsd %s (protocol %d)\n", QRS_VERSION, QRS_PROTO_VERSION);
      return 0;
    default:
      fprintf(stderr, "Try 'qrsd --help' for more information.\n");
      return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "qrsd: unexpected argument '%s'\n"
            "Try 'qrsd --help' for more information.\n", argv[optind]);
    return 2;
  }

  conf = load_config(config_path);
  if (!verbose && log_level_parse(conf->log_level, &level) == 0)
    log_set_level(level);
  if (socket_path) {
    free(conf->socket_path);
    conf->socket_path = strdup(socket_path);
    if (!conf->socket_path)
      fatal("out of memory");
  }
  if (status_path) {
    free(conf->status_file);
    conf->status_file = strdup(status_path);
    if (!conf->status_file)
      fatal("out of memory");
  }
  /* The status file is replaced by rename: never a FIFO, device, link
     or directory that happens to be at its path (-S /dev/null). */
  if (conf->status_file && conf->status_file[0] &&
      regfile_check(conf->status_file, 0, err, sizeof(err)) < 0) {
    fprintf(stderr, "qrsd: status file %s (qrsd replaces it: remove it, "
            "choose another path, or set status_file: \"\" to disable "
            "it)\n", err);
    conf_free(conf);
    return 1;
  }
  stop_if_signalled(conf, 0);
  if (check) {
    printf("qrsd: configuration %s is valid\n", conf->file);
    conf_free(conf);
    return 0;
  }
  if (print) {
    r = conf_print(conf, stdout);
    conf_free(conf);
    return r < 0 ? 1 : 0;
  }

  signal(SIGPIPE, SIG_IGN);
  loop = uv_default_loop();
  r = looplock_init(&lk, loop);
  if (r < 0)
    fatal("cannot set up the event loop: %s", strerror(-r));
  r = server_init(&srv, loop, conf, err, sizeof(err));
  if (r < 0) {
    stop_if_signalled(conf, 0);
    fatal("%s", err);
  }
  srv.log_forced = verbose;
  srv.socket_forced = socket_path != NULL;
  srv.status_forced = status_path != NULL;
  stop_if_signalled(conf, 1);

  fd = activated_fd();
  if (fd >= 0)
    r = server_listen_fd(&srv, fd, err, sizeof(err));
  else
    r = server_listen_path(&srv, conf->socket_path, err, sizeof(err));
  if (r < 0) {
    stop_if_signalled(conf, 1);
    log_err("%s", err);
    server_done(&srv);
    conf_free(conf);
    return 1;
  }
  stop_if_signalled(conf, 1);

  uv_signal_init(loop, &sig_term);
  uv_signal_init(loop, &sig_int);
  uv_signal_init(loop, &sig_hup);
  uv_signal_start(&sig_term, on_signal, SIGTERM);
  uv_signal_start(&sig_int, on_signal, SIGINT);
  uv_signal_start(&sig_hup, on_signal, SIGHUP);
  /* One that came between the last step and the handlers. */
  if (early_signal)
    on_signal(&sig_term, early_signal);

  if (!srv.stopping) {
    log_start(conf, fd >= 0);
    check_nofile(conf);
    snprintf(status, sizeof(status), "READY=1\nSTATUS=Serving on %s "
             "(default source %s)", srv.socket_path,
             registry_default(srv.reg));
    notify_ready(status);
    watchdog_start(&wd, loop, &srv);
    if (getenv("QRSD_TEST_HOOKS") &&
        strcmp(getenv("QRSD_TEST_HOOKS"), "1") == 0) {
      stall_hook = 1;
      uv_signal_init(loop, &sig_stall);
      uv_signal_start(&sig_stall, on_stall, SIGUSR2);
      uv_unref((uv_handle_t *)&sig_stall);
    }
    warm_up(conf);
  }

  looplock_run(&lk);

  server_done(&srv);
  conf_free(conf);
  r = uv_loop_close(loop);
  looplock_done(&lk);
  if (r < 0)
    log_warn("event loop closed with handles open: %s", uv_strerror(r));
  log_ev(LOG_LEVEL_INFO, &(struct log_fields){ .event = "stop" }, "stopped");
  return 0;
}
