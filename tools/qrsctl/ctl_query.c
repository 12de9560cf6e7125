/* The qrsctl commands that ask qrsd (status, health, sources, draw,
   bytes): connect with libqrs, ask, hand the reply to its printer
   (ctl_reply.c), say what failed in one line.  Each connects once and
   frees the client before it returns. */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <qrs/client.h>
#include <qrs/error.h>

#include "cliparse.h"
#include "ctl.h"

/* Draws kept in flight by 'draw -n N' (and never more than qrsd allows). */
#define DRAW_WINDOW 16
/* Largest chunk 'bytes' asks for in one request. */
#define BYTES_CHUNK_MAX (64 * 1024)
/* Chunk size when qrsd does not say its limit. */
#define BYTES_CHUNK_DEFAULT 4096
/* Longest --salt, in bytes (qrs_commitment.salt_len). */
#define SALT_MAX 256

/* Why connecting may have failed, for the end of the error line. */
static const char *
connect_hint(int r)
{
  if (r == -ENOENT || r == -ECONNREFUSED)
    return " (is qrsd running?)";
  if (r == -EACCES || r == -EPERM)
    return " (may this user open qrsd's socket?)";
  if (r == QRS_E_PERMISSION)
    return " (qrsd refused this user: only root, qrsd's own user and "
           "members of its access.group may connect; qrsd logs which "
           "group)";
  if (r == QRS_E_VERSION)
    return " (qrsctl and qrsd do not speak the same protocol)";
  return "";
}

static int
ctl_connect(const struct ctl *ctl, struct qrs_client **ret_client)
{
  struct qrs_client_options opts;
  struct qrs_client *c;
  int r;

  memset(&opts, 0, sizeof(opts));
  opts.client_name = "qrsctl";
  opts.timeout_ms = ctl->timeout_ms;
  r = qrs_client_new(ctl->socket_path, &opts, &c);
  if (r < 0) {
    fprintf(stderr, "qrsctl: cannot connect to %s: %s%s\n",
            ctl->socket_path, qrs_strerror(r), connect_hint(r));
    return r;
  }
  *ret_client = c;
  return 0;
}

/* Say that a call on c failed, as one line: what failed, the error, and
   the daemon's own words when it gave some (a refused privileged request
   says why).  A connect error without them comes from libqrs
   reconnecting after qrsd went away. */
static void
call_error(const struct qrs_client *c, const char *what, int r)
{
  const char *msg;
  char buf[512];

  msg = qrs_client_errmsg(c);
  if (msg && msg[0])
    fprintf(stderr, "qrsctl: %s: %s (%s)\n", what, qrs_strerror(r),
            out_safe(buf, sizeof(buf), msg, strlen(msg) + 1));
  else if (*connect_hint(r))
    fprintf(stderr, "qrsctl: %s: cannot reconnect to %s: %s%s\n", what,
            qrs_client_socket_path(c), qrs_strerror(r), connect_hint(r));
  else
    fprintf(stderr, "qrsctl: %s: %s\n", what, qrs_strerror(r));
}

/* call_error() for a privileged request (reload, source control), and
   who may make it when qrsd refused it. */
static void
admin_call_error(const struct qrs_client *c, const char *what, int r)
{
  call_error(c, what, r);
  if (r == QRS_E_PERMISSION)
    fprintf(stderr, "qrsctl: %s is privileged: run it as root, as "
            "qrsd's user, or as a member of qrsd's access.admin_group\n",
            what);
}

/* The commands without options of their own: one question each. */
enum query {
  QUERY_STATUS,
  QUERY_HEALTH,
  QUERY_SOURCES,
  QUERY_METRICS,                /* STATUS, then SOURCES */
};

/* health's exit status says it too. */
static int
health_exit(const struct qrs_health *h)
{
  if (h->state == QRS_HEALTH_HEALTHY)
    return EXIT_HEALTHY;
  if (h->state == QRS_HEALTH_DEGRADED)
    return EXIT_DEGRADED;
  return EXIT_ERROR;
}

/* What metrics shows: STATUS, then SOURCES, into *st and *s (free
   both).  0, or the error of the request that failed (then neither is
   kept). */
static int
ask_metrics(struct qrs_client *c, struct qrs_status **st,
            struct qrs_sources **s)
{
  int r;

  r = qrs_client_status(c, st);
  if (r < 0)
    return r;
  r = qrs_client_sources(c, s);
  if (r < 0)
    qrs_status_free(*st);
  return r;
}

/* Ask qrsd question q, print the reply, free it.  Returns the exit
   status. */
static int
query(struct ctl *ctl, const struct command *cmd, int argc, char **argv,
      enum query q)
{
  static const char *const what[] = {
    [QUERY_STATUS] = "status request failed",
    [QUERY_HEALTH] = "health request failed",
    [QUERY_SOURCES] = "sources request failed",
    [QUERY_METRICS] = "metrics: status or sources request failed",
  };
  struct qrs_client *c;
  struct qrs_status *st;
  struct qrs_health *h;
  struct qrs_sources *s;
  int r, status;
  const struct cli_opt opts[] = { CTL_COMMON_OPTS(ctl) };

  r = ctl_parse(cmd, opts, argc, argv);
  if (r >= 0)
    return r;
  if (ctl_connect(ctl, &c) < 0)
    return EXIT_ERROR;
  if (q == QUERY_STATUS)
    r = qrs_client_status(c, &st);
  else if (q == QUERY_HEALTH)
    r = qrs_client_health(c, &h);
  else if (q == QUERY_SOURCES)
    r = qrs_client_sources(c, &s);
  else
    r = ask_metrics(c, &st, &s);
  if (r < 0)
    call_error(c, what[q], r);
  qrs_client_free(c);
  if (r < 0)
    return EXIT_ERROR;

  status = 0;
  if (q == QUERY_STATUS) {
    r = reply_status(ctl, st);
    qrs_status_free(st);
  } else if (q == QUERY_HEALTH) {
    status = health_exit(h);
    r = reply_health(ctl, h);
    qrs_health_free(h);
  } else if (q == QUERY_SOURCES) {
    r = reply_sources(ctl, s);
    qrs_sources_free(s);
  } else {
    r = ctl_print_metrics(stdout, st, s);
    if (r < 0)
      fprintf(stderr, "qrsctl: metrics: cannot write the output\n");
    qrs_status_free(st);
    qrs_sources_free(s);
  }
  return r < 0 ? EXIT_ERROR : status;
}

/* One metrics scrape into path, atomically: a temporary file in the
   same directory, renamed over path, so that node_exporter's textfile
   collector never reads half a file.  When qrsd cannot be asked, path is
   removed (stale figures would look live).  Returns the exit status. */
static int
metrics_textfile(struct ctl *ctl, const char *path)
{
  struct qrs_client *c;
  struct qrs_status *st;
  struct qrs_sources *s;
  char tmp[4096];
  FILE *f;
  int fd, r;

  if (snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", path) >= (int)sizeof(tmp)) {
    fprintf(stderr, "qrsctl: metrics: --textfile path too long\n");
    return EXIT_ERROR;
  }
  r = -1;
  if (ctl_connect(ctl, &c) == 0) {
    r = ask_metrics(c, &st, &s);
    if (r < 0)
      call_error(c, "metrics: status or sources request failed", r);
    qrs_client_free(c);
  }
  if (r < 0) {
    if (unlink(path) < 0 && errno != ENOENT)
      fprintf(stderr, "qrsctl: metrics: cannot remove %s: %s\n", path,
              strerror(errno));
    return EXIT_ERROR;
  }
  fd = mkstemp(tmp);
  f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) {
    fprintf(stderr, "qrsctl: metrics: cannot create %s: %s\n", tmp,
            strerror(errno));
    if (fd >= 0)
      close(fd);
    qrs_status_free(st);
    qrs_sources_free(s);
    return EXIT_ERROR;
  }
  r = fchmod(fd, 0644);
  if (ctl_print_metrics(f, st, s) < 0)
    r = -1;
  if (fclose(f) != 0)
    r = -1;
  qrs_status_free(st);
  qrs_sources_free(s);
  if (r < 0 || rename(tmp, path) < 0) {
    fprintf(stderr, "qrsctl: metrics: cannot write %s: %s\n", path,
            strerror(errno));
    unlink(tmp);
    return EXIT_ERROR;
  }
  return 0;
}

int
cmd_metrics(struct ctl *ctl, const struct command *cmd, int argc,
            char **argv)
{
  const char *textfile = NULL;
  double interval = 0;
  const struct cli_opt opts[] = {
    { .name = "textfile", .type = CLI_OPT_STRING, .field = &textfile },
    { .name = "interval", .type = CLI_OPT_FINITE, .field = &interval },
    CTL_COMMON_OPTS(ctl)
  };
  int r;

  r = ctl_parse(cmd, opts, argc, argv);
  if (r >= 0)
    return r;
  if (interval < 0 || (interval > 0 && interval < 0.1) ||
      (interval > 0 && !textfile)) {
    fprintf(stderr, "qrsctl: metrics: --interval needs --textfile and at "
            "least 0.1 seconds\n");
    return EXIT_ERROR;
  }
  if (!textfile)                /* to stdout: options parsed above */
    return query(ctl, cmd, 1, argv, QUERY_METRICS);
  for (;;) {
    r = metrics_textfile(ctl, textfile);
    if (interval == 0)
      return r;
    usleep((useconds_t)(interval * 1e6));
  }
}

/* status, health and sources: the command's name is the question. */
int
cmd_query(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
  static const char *const names[] = {
    [QUERY_STATUS] = "status",
    [QUERY_HEALTH] = "health",
    [QUERY_SOURCES] = "sources",
  };
  enum query q;

  q = QUERY_STATUS;
  while (q < QUERY_SOURCES && strcmp(cmd->name, names[q]) != 0)
    q++;
  return query(ctl, cmd, argc, argv, q);
}

int
cmd_reload(struct ctl *ctl, const struct command *cmd, int argc,
           char **argv)
{
  const struct cli_opt opts[] = { CTL_COMMON_OPTS(ctl) };
  struct qrs_client *c;
  struct qrs_reload *rl;
  int r;

  r = ctl_parse(cmd, opts, argc, argv);
  if (r >= 0)
    return r;
  if (ctl_connect(ctl, &c) < 0)
    return EXIT_ERROR;
  r = qrs_client_reload(c, &rl);
  if (r < 0) {
    admin_call_error(c, "reload", r);
    if (r == QRS_E_BAD_CONFIG)
      fprintf(stderr, "qrsctl: reload: nothing changed; qrsd keeps "
              "serving with the configuration in use\n");
  }
  qrs_client_free(c);
  if (r < 0)
    return EXIT_ERROR;
  r = reply_reload(ctl, rl);
  qrs_reload_free(rl);
  return r < 0 ? EXIT_ERROR : 0;
}

/* SOURCE_CONTROL: "source enable|disable NAME", "quota reset NAME".
   what names the command in messages ("source disable"). */
static int
source_control(struct ctl *ctl, const char *what, const char *name,
               enum qrs_source_action action)
{
  struct qrs_source_control rc;
  struct json_object *o;
  struct qrs_client *c;
  char buf[256];
  int r;

  if (ctl_connect(ctl, &c) < 0)
    return EXIT_ERROR;
  r = qrs_client_source_control(c, name, action, &rc);
  if (r < 0)
    admin_call_error(c, what, r);
  qrs_client_free(c);
  if (r < 0)
    return EXIT_ERROR;
  if (!ctl->json) {
    printf("%s\n", SAFE(buf, rc.message));
    return out_done(out_flush() < 0 ? EXIT_ERROR : 0);
  }
  o = json_object_new_object();
  if (o && (json_object_object_add(o, "source",
                                   json_object_new_string(rc.source)) ||
            json_object_object_add(o, "action",
                                   json_object_new_string(what)) ||
            json_object_object_add(o, "changed",
                                   json_object_new_boolean(rc.changed)) ||
            json_object_object_add(o, "disabled",
                                   json_object_new_boolean(rc.disabled)) ||
            json_object_object_add(o, "message",
                                   json_object_new_string(rc.message)))) {
    json_object_put(o);
    o = NULL;
  }
  return out_done(out_json(o ? 0 : -ENOMEM, o) < 0 ? EXIT_ERROR : 0);
}

/* The command's options, then VERB NAME: -1 to go on with the verb's
   index in verbs (NULL-terminated) in *ret_verb and NAME at
   argv[optind + 1], or the exit status (after --help, or after saying
   what is wrong). */
static int
verb_and_name(struct ctl *ctl, const struct command *cmd,
              const char *const *verbs, int argc, char **argv,
              int *ret_verb)
{
  const struct cli_opt opts[] = { CTL_COMMON_OPTS(ctl) };
  int i, r;

  r = ctl_parse_options(cmd, opts, argc, argv);
  if (r >= 0)
    return r;
  if (argc - optind != 2) {
    fprintf(stderr, "qrsctl: %s: %s\n", cmd->name, argc - optind < 2 ?
            "a verb and a source NAME are required" :
            "one verb and one NAME only");
    ctl_command_usage_error(cmd);
    return EXIT_ERROR;
  }
  for (i = 0; verbs[i]; i++)
    if (!strcmp(argv[optind], verbs[i])) {
      *ret_verb = i;
      return -1;
    }
  fprintf(stderr, "qrsctl: %s: unknown verb '%s'\n", cmd->name,
          argv[optind]);
  ctl_command_usage_error(cmd);
  return EXIT_ERROR;
}

int
cmd_source(struct ctl *ctl, const struct command *cmd, int argc,
           char **argv)
{
  static const char *const verbs[] = { "enable", "disable", NULL };
  int r, v;

  r = verb_and_name(ctl, cmd, verbs, argc, argv, &v);
  if (r >= 0)
    return r;
  return source_control(ctl, v ? "source disable" : "source enable",
                        argv[optind + 1],
                        v ? QRS_SOURCE_DISABLE : QRS_SOURCE_ENABLE);
}

int
cmd_quota(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
  static const char *const verbs[] = { "reset", NULL };
  int r, v;

  r = verb_and_name(ctl, cmd, verbs, argc, argv, &v);
  if (r >= 0)
    return r;
  return source_control(ctl, "quota reset", argv[optind + 1],
                        QRS_SOURCE_QUOTA_RESET);
}

/* draw --salt HEX, into field, a struct draw_salt. */
struct draw_salt {
  uint8_t bytes[SALT_MAX];
  size_t len;
};

static int
set_salt(const struct cli_opt *o, const char *opt, const char *arg)
{
  struct draw_salt *salt = o->field;

  return cli_parse_hex("qrsctl", opt, arg, salt->bytes, SALT_MAX,
                       &salt->len);
}

/* What of draw's options was given, beyond the amplifier's (amp.set). */
#define DRAW_SALT 0x1
#define DRAW_COMMIT 0x2           /* --step or --prev-token */

int
cmd_draw(struct ctl *ctl, const struct command *cmd, int argc,
         char **argv)
{
  const struct qrs_server_info *info;
  struct qrs_draw_request req;
  struct qrs_amp_params amp;
  struct qrs_commitment com;
  struct draw_salt salt;
  struct draw_row row;
  struct qrs_client *c;
  uint32_t tickets[DRAW_WINDOW];
  char what[QRS_NAME_MAX + 96];
  uint64_t count, samples, step, sent, done, window, zblocks, eblocks;
  int64_t prev_token;
  unsigned given;
  int r;
  const struct cli_opt opts[] = {
    { .name = "count", .key = 'n', .type = CLI_OPT_U64, .field = &count,
      .min = 1, .max = UINT32_MAX, .label = "-n" },
    { .name = "source", .type = CLI_OPT_STRING, .field = &req.source },
    { .name = "unit", .type = CLI_OPT_STRING, .field = &req.unit },
    { .name = "samples", .type = CLI_OPT_U64, .field = &samples, .min = 1,
      .max = UINT32_MAX },
    { .name = "amplifier", .type = CLI_OPT_STRING, .field = &req.amplifier },
    { .name = "population-mean", .type = CLI_OPT_FINITE,
      .field = &amp.population_mean, .seen = &amp.set,
      .bit = QRS_AMP_POPULATION_MEAN },
    { .name = "population-std", .type = CLI_OPT_FINITE,
      .field = &amp.population_std, .seen = &amp.set,
      .bit = QRS_AMP_POPULATION_STD },
    { .name = "epsilon", .type = CLI_OPT_FINITE,
      .field = &amp.uniform_clamp_epsilon, .seen = &amp.set,
      .bit = QRS_AMP_EPSILON },
    { .name = "zscore-calibration", .type = CLI_OPT_U64, .field = &zblocks,
      .max = UINT32_MAX, .seen = &amp.set,
      .bit = QRS_AMP_ZSCORE_CALIBRATION },
    { .name = "ecdf-calibration", .type = CLI_OPT_U64, .field = &eblocks,
      .max = UINT32_MAX, .seen = &amp.set,
      .bit = QRS_AMP_ECDF_CALIBRATION },
    { .name = "salt", .type = CLI_OPT_CALL, .field = &salt,
      .call = set_salt, .seen = &given, .bit = DRAW_SALT },
    { .name = "step", .type = CLI_OPT_U64, .field = &step,
      .max = UINT64_MAX, .seen = &given, .bit = DRAW_COMMIT },
    { .name = "prev-token", .type = CLI_OPT_I64, .field = &prev_token,
      .seen = &given, .bit = DRAW_COMMIT },
    CTL_COMMON_OPTS(ctl),
  };

  memset(&req, 0, sizeof(req));
  memset(&amp, 0, sizeof(amp));
  memset(&com, 0, sizeof(com));
  memset(&row, 0, sizeof(row));
  count = 1;
  samples = 0;
  step = 0;
  zblocks = 0;
  eblocks = 0;
  prev_token = -1;
  salt.len = 0;
  given = 0;
  r = ctl_parse(cmd, opts, argc, argv);
  if (r >= 0)
    return r;
  if ((given & DRAW_COMMIT) && !(given & DRAW_SALT)) {
    fprintf(stderr, "qrsctl: draw: --step and --prev-token need --salt\n");
    ctl_command_usage_error(cmd);
    return EXIT_ERROR;
  }
  req.sample_count = (uint32_t)samples;
  amp.zscore_calibration_samples = (uint32_t)zblocks;
  amp.ecdf_calibration_samples = (uint32_t)eblocks;
  if (amp.set)
    req.amp = &amp;
  if (given & DRAW_SALT) {
    com.salt = salt.bytes;
    com.salt_len = salt.len;
    com.prev_token_id = prev_token;
    req.commitment = &com;
  }
  row.show_amplifier = req.amplifier && req.amplifier[0];

  if (ctl_connect(ctl, &c) < 0)
    return EXIT_ERROR;
  info = qrs_client_server_info(c);
  window = DRAW_WINDOW;
  if (info->max_inflight && info->max_inflight < window)
    window = info->max_inflight;
  if (count < window)
    window = count;

  /* Keep up to window draws in flight, print them in order.  Draw i
     (from 0) commits to step + i. */
  sent = 0;
  done = 0;
  r = 0;
  while (done < count) {
    while (sent < count && sent - done < window) {
      com.step = step + sent;
      r = qrs_client_draw_begin(c, &req, &tickets[sent % DRAW_WINDOW]);
      if (r == QRS_E_BUSY && sent > done) {
        /* qrsd allows fewer in flight than we thought: wait for one. */
        window = sent - done;
        break;
      }
      if (r < 0)
        goto draw_failed;
      sent++;
    }
    r = qrs_client_draw_finish(c, tickets[done % DRAW_WINDOW], &row.d);
    if (r < 0)
      goto draw_failed;
    done++;
    row.index = done;
    r = reply_draw(ctl, &row);
    if (r) {
      /* The reader left (1, quietly) or output failed (-1, said). */
      qrs_client_free(c);
      return r < 0 ? EXIT_ERROR : 0;
    }
  }
  qrs_client_free(c);
  return 0;

draw_failed:
  if (req.source && req.source[0])
    snprintf(what, sizeof(what), "draw %" PRIu64 " of %" PRIu64 " from "
             "source '%s' failed", done + 1, count, req.source);
  else
    snprintf(what, sizeof(what), "draw %" PRIu64 " of %" PRIu64
             " failed", done + 1, count);
  call_error(c, what, r);
  qrs_client_free(c);             /* forgets the tickets still open */
  return EXIT_ERROR;
}

/* Write all of buf to fd.  Returns 0, 1 when the reader has gone away
   (EPIPE), or -1 with errno set. */
static int
write_all(int fd, const uint8_t *buf, size_t n)
{
  ssize_t w;

  while (n) {
    w = write(fd, buf, n);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EPIPE)
        return 1;
      return -1;
    }
    buf += w;
    n -= (size_t)w;
  }
  return 0;
}

int
cmd_bytes(struct ctl *ctl, const struct command *cmd, int argc,
          char **argv)
{
  const struct qrs_server_info *info;
  struct qrs_bytes_info bi;
  struct qrs_client *c;
  const char *source;
  uint8_t *buf;
  uint64_t count, left;
  size_t chunk, n;
  char by[QRS_NAME_MAX], asked[QRS_NAME_MAX], what[128];
  int r, force, warned;
  const struct cli_opt opts[] = {
    { .name = "count", .key = 'n', .type = CLI_OPT_U64, .field = &count,
      .min = 1, .max = UINT64_MAX, .flags = CLI_SUFFIX, .label = "-n" },
    { .name = "source", .type = CLI_OPT_STRING, .field = &source },
    { .name = "force", .key = 'f', .type = CLI_OPT_SET, .field = &force,
      .val = 1 },
    CTL_COMMON_OPTS(ctl),
  };

  count = 0;
  source = NULL;
  force = 0;
  r = ctl_parse(cmd, opts, argc, argv);
  if (r >= 0)
    return r;
  if (!count) {
    fprintf(stderr, "qrsctl: bytes: -n N is required\n");
    ctl_command_usage_error(cmd);
    return EXIT_ERROR;
  }
  if (ctl->json) {
    fprintf(stderr, "qrsctl: bytes: --json does not apply to raw bytes\n");
    ctl_command_usage_error(cmd);
    return EXIT_ERROR;
  }
  if (!force && isatty(STDOUT_FILENO)) {
    fprintf(stderr, "qrsctl: bytes: refusing to write binary data to a "
            "terminal (redirect it, or use --force)\n");
    return EXIT_ERROR;
  }

  if (ctl_connect(ctl, &c) < 0)
    return EXIT_ERROR;
  info = qrs_client_server_info(c);
  chunk = info->max_bytes_per_request;
  if (!chunk)
    chunk = BYTES_CHUNK_DEFAULT;
  if (chunk > BYTES_CHUNK_MAX)
    chunk = BYTES_CHUNK_MAX;
  buf = malloc(chunk);
  if (!buf) {
    fprintf(stderr, "qrsctl: bytes: %s\n", strerror(ENOMEM));
    qrs_client_free(c);
    return EXIT_ERROR;
  }

  r = 0;
  warned = 0;
  left = count;
  while (left) {
    n = left < chunk ? (size_t)left : chunk;
    r = qrs_client_bytes(c, source, buf, n, &bi);
    if (r < 0) {
      snprintf(what, sizeof(what), "bytes: request for %zu bytes (after %"
               PRIu64 " of %" PRIu64 ") failed", n, count - left, count);
      call_error(c, what, r);
      r = EXIT_ERROR;
      break;
    }
    if (bi.fallback && !(warned & 1)) {
      /* Validating a fallback's bytes is validating the wrong source. */
      fprintf(stderr, "qrsctl: warning: source '%s' is served by its "
              "fallback '%s'\n", SAFE(asked, bi.source),
              SAFE(by, bi.served_by));
      warned = 1;
    }
    if (!bi.production && !(warned & 2)) {
      fprintf(stderr, "qrsctl: warning: these bytes come from '%s', a test "
              "source (type %s), not for production\n",
              SAFE(by, bi.served_by), SAFE(asked, bi.served_type));
      warned |= 2;
    }
    r = write_all(STDOUT_FILENO, buf, n);
    if (r > 0) {
      r = 0;                      /* the reader has had enough */
      break;
    }
    if (r < 0) {
      fprintf(stderr, "qrsctl: bytes: cannot write output: %s\n",
              strerror(errno));
      r = EXIT_ERROR;
      break;
    }
    left -= n;
  }
  free(buf);
  qrs_client_free(c);
  return r;
}
