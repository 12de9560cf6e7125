/* gnuplot for the tools' reports: see plot.h. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "plot.h"

FILE *
plot_open(const char *prog, const char *dir, const char *name)
{
  char path[4096];
  FILE *f;

  snprintf(path, sizeof(path), "%s/%s", dir, name);
  f = fopen(path, "w");
  if (!f)
    fprintf(stderr, "%s: %s: %s\n", prog, path, strerror(errno));
  return f;
}

int
plot_run(const char *prog, const char *dir, const char *script)
{
  char path[4096];
  pid_t pid;
  int status;

  snprintf(path, sizeof(path), "%s/%s", dir, script);
  pid = fork();
  if (pid < 0)
    return -errno;
  if (pid == 0) {
    if (chdir(dir) < 0)
      _exit(127);
    execlp("gnuplot", "gnuplot", script, (char *)NULL);
    _exit(127);
  }
  if (waitpid(pid, &status, 0) < 0)
    return -errno;
  if (!WIFEXITED(status) || WEXITSTATUS(status)) {
    fprintf(stderr, "%s: gnuplot %s failed (status %d%s)\n", prog, path,
            WIFEXITED(status) ? WEXITSTATUS(status) : -1,
            WIFEXITED(status) && WEXITSTATUS(status) == 127 ?
            ": is gnuplot installed? (Debian: gnuplot-nox)" : "");
    return -EIO;
  }
  return 0;
}
