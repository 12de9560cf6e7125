/* qrsd logging to stderr (journal-aware). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#include "log.h"

static enum log_level max_level = LOG_LEVEL_INFO;
static int journal = -1;   /* -1: not checked yet */

void
log_set_level(enum log_level level)
{
  max_level = level;
}

int
log_debug_enabled(void)
{
  return max_level >= LOG_LEVEL_DEBUG;
}

/* Is stderr the journal stream systemd gave us? */
static int
stderr_is_journal(void)
{
  unsigned long long dev, ino;
  const char *e;
  struct stat st;

  e = getenv("JOURNAL_STREAM");
  if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2)
    return 0;
  if (fstat(STDERR_FILENO, &st) < 0)
    return 0;
  return st.st_dev == (dev_t)dev && st.st_ino == (ino_t)ino;
}

static const char *
level_name(enum log_level level)
{
  switch (level) {
  case LOG_LEVEL_ERR:
    return "error";
  case LOG_LEVEL_WARN:
    return "warning";
  case LOG_LEVEL_INFO:
    return "info";
  default:
    return "debug";
  }
}

static void
log_vmsg(enum log_level level, const char *fmt, va_list ap)
{
  char line[1024], stamp[32];
  struct timespec ts;
  struct tm tm;
  int n;

  if (journal < 0)
    journal = stderr_is_journal();

  vsnprintf(line, sizeof(line), fmt, ap);
  /* A peer's text may end up in a message: keep it on one line. */
  for (n = 0; line[n]; n++)
    if (line[n] == '\n' || line[n] == '\r')
      line[n] = ' ';

  if (journal) {
    fprintf(stderr, "<%d>%s\n", (int)level, line);
    return;
  }
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
  fprintf(stderr, "%s.%03ldZ qrsd[%d]: %s: %s\n", stamp,
          ts.tv_nsec / 1000000, (int)getpid(), level_name(level), line);
}

void
log_msg(enum log_level level, const char *fmt, ...)
{
  va_list ap;

  if (level > max_level)
    return;
  va_start(ap, fmt);
  log_vmsg(level, fmt, ap);
  va_end(ap);
}

void
log_limited(struct log_ratelimit *rl, enum log_level level, const char *fmt,
            ...)
{
  struct timespec t;
  char line[900];
  uint64_t skipped;
  unsigned interval_ms, burst;
  int64_t now;
  va_list ap;

  if (level > max_level)
    return;
  interval_ms = rl->interval_ms ? rl->interval_ms : 10000;
  burst = rl->burst ? rl->burst : 5;
  clock_gettime(CLOCK_MONOTONIC, &t);
  now = (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
  if (rl->window_start_ns == 0 ||
      now - rl->window_start_ns >= (int64_t)interval_ms * 1000000) {
    rl->window_start_ns = now;
    rl->in_window = 0;
  }
  if (rl->in_window >= burst) {
    rl->suppressed++;
    return;
  }
  rl->in_window++;
  skipped = rl->suppressed;
  rl->suppressed = 0;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  if (skipped)
    log_msg(level, "%s (%llu similar messages suppressed)", line,
            (unsigned long long)skipped);
  else
    log_msg(level, "%s", line);
}

void
fatal(const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  log_vmsg(LOG_LEVEL_ERR, fmt, ap);
  va_end(ap);
  exit(1);
}
