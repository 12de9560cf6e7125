/* qrsctl validate FILE: run 'qrsd -n -c FILE' (qrsd's own check of a
   configuration) and report its verdict. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctl.h"

#ifndef QRSD_PATH
#define QRSD_PATH "/usr/local/sbin/qrsd"
#endif

/* The qrsd to run: $QRSD, else ../../daemon/qrsd from this executable
   (the build tree), else the installed one. */
static const char *
find_qrsd(char *buf, size_t size)
{
  const char *env;
  char *slash;
  ssize_t n;

  env = getenv("QRSD");
  if (env && env[0])
    return env;
  n = readlink("/proc/self/exe", buf, size - 1);
  if (n > 0) {
    buf[n] = '\0';
    slash = strrchr(buf, '/');
    if (slash && (size_t)(slash - buf) + sizeof("/../../daemon/qrsd") <= size) {
      strcpy(slash, "/../../daemon/qrsd");
      if (access(buf, X_OK) == 0)
        return buf;
    }
  }
  return QRSD_PATH;
}

int
cmd_validate(struct ctl *ctl, const struct command *cmd, int argc,
             char **argv)
{
  posix_spawn_file_actions_t fa;
  struct validate_result res;
  const char *qrsd, *file;
  char *child_argv[5];
  char path[PATH_MAX];
  pid_t pid;
  int r, wstatus, valid;
  const struct cli_opt opts[] = { CTL_COMMON_OPTS(ctl) };

  r = ctl_parse_options(cmd, opts, argc, argv);
  if (r >= 0)
    return r;
  if (argc - optind != 1) {
    fprintf(stderr, "qrsctl: validate: %s\n", optind < argc ?
            "one FILE only" : "FILE is required");
    ctl_command_usage_error(cmd);
    return EXIT_ERROR;
  }
  file = argv[optind];
  qrsd = find_qrsd(path, sizeof(path));

  r = posix_spawn_file_actions_init(&fa);
  if (r) {
    fprintf(stderr, "qrsctl: validate: %s\n", strerror(r));
    return EXIT_ERROR;
  }
  /* qrsd's own words go to stderr when stdout carries JSON. */
  if (ctl->json)
    r = posix_spawn_file_actions_adddup2(&fa, STDERR_FILENO, STDOUT_FILENO);
  if (!r) {
    child_argv[0] = (char *)"qrsd";
    child_argv[1] = (char *)"-n";
    child_argv[2] = (char *)"-c";
    child_argv[3] = (char *)file;
    child_argv[4] = NULL;
    fflush(stdout);
    r = posix_spawnp(&pid, qrsd, &fa, NULL, child_argv, environ);
  }
  posix_spawn_file_actions_destroy(&fa);
  if (r) {
    fprintf(stderr, "qrsctl: validate: cannot run %s: %s\n", qrsd,
            strerror(r));
    return EXIT_ERROR;
  }
  while (waitpid(pid, &wstatus, 0) < 0) {
    if (errno != EINTR) {
      fprintf(stderr, "qrsctl: validate: waiting for %s: %s\n", qrsd,
              strerror(errno));
      return EXIT_ERROR;
    }
  }
  if (WIFSIGNALED(wstatus)) {
    fprintf(stderr, "qrsctl: validate: %s was killed by signal %d (%s)\n",
            qrsd, WTERMSIG(wstatus), strsignal(WTERMSIG(wstatus)));
    return EXIT_ERROR;
  }
  valid = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;

  if (ctl->json) {
    res.file = file;
    res.valid = valid;
    res.qrsd = qrsd;
    res.exit_status = WEXITSTATUS(wstatus);
    if (reply_validate(&res) < 0)
      return EXIT_ERROR;
    return valid ? 0 : EXIT_ERROR;
  }
  if (valid) {
    printf("%s: configuration is valid\n", file);
    return out_done(0);
  }
  fprintf(stderr, "qrsctl: %s: configuration is invalid (qrsd exited with "
          "status %d)\n", file, WEXITSTATUS(wstatus));
  return EXIT_ERROR;
}
