/* qrsd logging that never blocks the loop.

   log_msg() formats the line and puts it in a bounded queue; a writer
   thread takes it from there to the journal (sd_journal_send, when
   systemd gave us a journal stream and journald listens) or to stderr.  A
   sink that stalls (a pipe nobody drains) stalls only the writer: once
   the queue is full, lines are dropped and counted, and the writer says
   how many when it can write again.  Repeated events of one kind are
   limited before they get here (log_limited). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include "qrs-config.h"

#if HAVE_SYSTEMD
#include <systemd/sd-journal.h>
#endif

#include "base/fdio.h"
#include "base/log.h"
#include "base/peer.h"
#include "timestamp.h"

#define QUEUE_LINES 512
#define LINE_MAX_LEN 1024
#define FIELD_MAX_LEN 64            /* QRS_EVENT= and SOURCE= values */

struct line {
  enum log_level level;
  struct timespec when;
  char text[LINE_MAX_LEN];
  /* journal fields, copied: the caller's strings may not outlive it */
  char event[FIELD_MAX_LEN];        /* "" when none */
  char source[FIELD_MAX_LEN];
  int has_client;
  unsigned pid, uid;
  uint64_t seq;
  int has_jhead;                    /* a journal checkpoint */
  uint64_t jseq;
  char jhead[65];
};

/* Set on the loop (start, reload), read by every thread that logs. */
static int max_level = LOG_LEVEL_INFO;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static pthread_cond_t drained = PTHREAD_COND_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct line *queue;        /* QUEUE_LINES, a ring */
static unsigned head, count;
static uint64_t dropped;
static int started;               /* the writer thread runs */
static int stop;
static int exited;                /* the writer thread returned */
static pthread_t writer;
static int journal;               /* 1: journald, 0: stderr */

void
log_set_level(enum log_level level)
{
  __atomic_store_n(&max_level, (int)level, __ATOMIC_RELAXED);
}

int
log_level_parse(const char *name, enum log_level *ret_level)
{
  static const struct {
    const char *name;
    enum log_level level;
  } names[] = {
    { "err", LOG_LEVEL_ERR }, { "warn", LOG_LEVEL_WARN },
    { "info", LOG_LEVEL_INFO }, { "debug", LOG_LEVEL_DEBUG },
  };
  size_t i;

  for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (name && !strcmp(name, names[i].name)) {
      *ret_level = names[i].level;
      return 0;
    }
  return -EINVAL;
}

int
log_debug_enabled(void)
{
  return __atomic_load_n(&max_level, __ATOMIC_RELAXED) >= LOG_LEVEL_DEBUG;
}

/* Is stderr the journal stream systemd gave us, and journald there? */
static int
use_journal(void)
{
#if HAVE_SYSTEMD
  unsigned long long dev, ino;
  const char *e;
  struct stat st;

  e = getenv("JOURNAL_STREAM");
  if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2)
    return 0;
  if (fstat(STDERR_FILENO, &st) < 0)
    return 0;
  if (st.st_dev != (dev_t)dev || st.st_ino != (ino_t)ino)
    return 0;
  /* sd_journal_send() returns 0 when nobody listens (toolchain.md 7). */
  return access("/run/systemd/journal/socket", W_OK) == 0;
#else
  return 0;
#endif
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

#if HAVE_SYSTEMD
/* One journal entry: the message, its priority and the event's fields
   (sd_journal_sendv, so that the fields present make the entry). */
static void
emit_journal(const struct line *l)
{
  char f[10][LINE_MAX_LEN + 16];
  struct iovec iov[10];
  int n = 0, i;

  snprintf(f[n++], sizeof(f[0]), "MESSAGE=%s", l->text);
  snprintf(f[n++], sizeof(f[0]), "PRIORITY=%d", (int)l->level);
  snprintf(f[n++], sizeof(f[0]), "SYSLOG_IDENTIFIER=qrsd");
  if (l->event[0])
    snprintf(f[n++], sizeof(f[0]), "QRS_EVENT=%s", l->event);
  if (l->source[0])
    snprintf(f[n++], sizeof(f[0]), "SOURCE=%s", l->source);
  if (l->has_client) {
    snprintf(f[n++], sizeof(f[0]), "CLIENT_PID=%u", l->pid);
    snprintf(f[n++], sizeof(f[0]), "CLIENT_UID=%u", l->uid);
  }
  if (l->seq)
    snprintf(f[n++], sizeof(f[0]), "DRAW_SEQ=%llu",
             (unsigned long long)l->seq);
  if (l->has_jhead) {
    snprintf(f[n++], sizeof(f[0]), "QRS_JOURNAL_SEQ=%llu",
             (unsigned long long)l->jseq);
    snprintf(f[n++], sizeof(f[0]), "QRS_JOURNAL_HEAD=%s", l->jhead);
  }
  for (i = 0; i < n; i++) {
    iov[i].iov_base = f[i];
    iov[i].iov_len = strlen(f[i]);
  }
  sd_journal_sendv(iov, n);
}
#endif

/* Write one line to the sink; blocking is fine here (writer thread or a
   dying process). */
static void
emit(const struct line *l)
{
  char stamp[32], buf[LINE_MAX_LEN + 96];
  struct tm tm;
  int n;

#if HAVE_SYSTEMD
  if (journal) {
    emit_journal(l);
    return;
  }
#endif
  gmtime_r(&l->when.tv_sec, &tm);
  strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
  n = snprintf(buf, sizeof(buf), "%s.%03ldZ qrsd[%d]: %s: %s\n", stamp,
               l->when.tv_nsec / 1000000, (int)getpid(),
               level_name(l->level), l->text);
  if (n < 0)
    return;
  if ((size_t)n >= sizeof(buf))
    n = (int)sizeof(buf) - 1;
  (void)fd_write_all(STDERR_FILENO, buf, (size_t)n);   /* nowhere to say */
}

static void *
writer_main(void *arg)
{
  struct line l;
  uint64_t lost;

  (void)arg;
  pthread_mutex_lock(&lock);
  for (;;) {
    while (!count && !dropped && !stop)
      pthread_cond_wait(&wake, &lock);
    if (!count && !dropped && stop)
      break;
    lost = dropped;
    dropped = 0;
    if (count) {
      l = queue[head];
      head = (head + 1) % QUEUE_LINES;
      count--;
    } else {
      l.text[0] = '\0';
    }
    pthread_mutex_unlock(&lock);
    if (lost) {
      struct line m;

      m.level = LOG_LEVEL_WARN;
      clock_gettime(CLOCK_REALTIME, &m.when);
      snprintf(m.text, sizeof(m.text), "%llu log messages dropped: the "
               "log sink was too slow", (unsigned long long)lost);
      emit(&m);
    }
    if (l.text[0])
      emit(&l);
    pthread_mutex_lock(&lock);
  }
  exited = 1;
  pthread_cond_broadcast(&drained);
  pthread_mutex_unlock(&lock);
  return NULL;
}

static void
log_atexit(void)
{
  log_flush();
}

static void
start(void)
{
  sigset_t all, old;

  journal = use_journal();
  queue = calloc(QUEUE_LINES, sizeof(*queue));
  if (!queue)
    return;
  /* The writer takes no signals: they belong to the loop. */
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  started = pthread_create(&writer, NULL, writer_main, NULL) == 0;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (started)
    atexit(log_atexit);
}

void
log_flush(void)
{
  struct timespec until;
  int done;

  pthread_mutex_lock(&lock);
  if (!started || stop) {
    pthread_mutex_unlock(&lock);
    return;
  }
  stop = 1;
  pthread_cond_signal(&wake);
  /* Give a stalled sink 2 s, then leave the writer to its fate: exiting
     must not hang on a pipe nobody reads. */
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 2;
  while (!exited &&
         pthread_cond_timedwait(&drained, &lock, &until) != ETIMEDOUT)
    ;
  done = exited;
  pthread_mutex_unlock(&lock);
  if (done) {
    pthread_join(writer, NULL);
    free(queue);
    queue = NULL;
  }
}

/* A field value on one line, without '=' troubles: journald takes any
   bytes after the first '=', but keep it printable. */
static void
field_copy(char *dst, const char *src)
{
  size_t i;

  for (i = 0; src && src[i] && i < FIELD_MAX_LEN - 1; i++)
    dst[i] = (src[i] == '\n' || src[i] == '\r') ? ' ' : src[i];
  dst[i] = '\0';
}

static void log_vmsg(enum log_level level, const struct log_fields *f,
                     const char *fmt, va_list ap)
  __attribute__((format(printf, 3, 0)));

static void
log_vmsg(enum log_level level, const struct log_fields *f, const char *fmt,
         va_list ap)
{
  struct line *l, now;
  int n;

  pthread_once(&once, start);
  clock_gettime(CLOCK_REALTIME, &now.when);
  now.level = level;
  vsnprintf(now.text, sizeof(now.text), fmt, ap);
  /* A peer's text may end up in a message: keep it on one line. */
  for (n = 0; now.text[n]; n++)
    if (now.text[n] == '\n' || now.text[n] == '\r')
      now.text[n] = ' ';
  field_copy(now.event, f ? f->event : NULL);
  field_copy(now.source, f ? f->source : NULL);
  now.has_client = f && f->peer && f->peer->has_cred;
  if (now.has_client) {
    now.pid = (unsigned)f->peer->pid;
    now.uid = (unsigned)f->peer->uid;
  }
  now.seq = f ? f->seq : 0;
  now.has_jhead = f && f->journal_head;
  now.jseq = now.has_jhead ? f->journal_seq : 0;
  snprintf(now.jhead, sizeof(now.jhead), "%s",
           now.has_jhead ? f->journal_head : "");

  pthread_mutex_lock(&lock);
  if (!started || stop) {
    /* No writer (out of memory, or after log_flush): write ourselves. */
    pthread_mutex_unlock(&lock);
    emit(&now);
    return;
  }
  if (count == QUEUE_LINES) {
    dropped++;
  } else {
    l = &queue[(head + count) % QUEUE_LINES];
    *l = now;
    count++;
  }
  pthread_cond_signal(&wake);
  pthread_mutex_unlock(&lock);
}

void
log_msg(enum log_level level, const char *fmt, ...)
{
  va_list ap;

  if ((int)level > __atomic_load_n(&max_level, __ATOMIC_RELAXED))
    return;
  va_start(ap, fmt);
  log_vmsg(level, NULL, fmt, ap);
  va_end(ap);
}

void
log_ev(enum log_level level, const struct log_fields *f, const char *fmt,
       ...)
{
  va_list ap;

  if ((int)level > __atomic_load_n(&max_level, __ATOMIC_RELAXED) &&
      !(f && f->journal_head))
    return;
  va_start(ap, fmt);
  log_vmsg(level, f, fmt, ap);
  va_end(ap);
}

static void log_vlimited(struct log_ratelimit *rl, enum log_level level,
                         const struct log_fields *f, const char *fmt,
                         va_list ap)
  __attribute__((format(printf, 4, 0)));

void
log_limited(struct log_ratelimit *rl, enum log_level level, const char *fmt,
            ...)
{
  va_list ap;

  va_start(ap, fmt);
  log_vlimited(rl, level, NULL, fmt, ap);
  va_end(ap);
}

void
log_limited_ev(struct log_ratelimit *rl, enum log_level level,
               const struct log_fields *f, const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  log_vlimited(rl, level, f, fmt, ap);
  va_end(ap);
}

static void
log_vlimited(struct log_ratelimit *rl, enum log_level level,
             const struct log_fields *f, const char *fmt, va_list ap)
{
  char line[900];
  uint64_t skipped;
  unsigned interval_ms, burst;
  int64_t now;

  if ((int)level > __atomic_load_n(&max_level, __ATOMIC_RELAXED))
    return;
  interval_ms = rl->interval_ms ? rl->interval_ms : 10000;
  burst = rl->burst ? rl->burst : 5;
  now = mono_now_ns();
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
  vsnprintf(line, sizeof(line), fmt, ap);
  if (skipped)
    log_ev(level, f, "%s (%llu similar messages suppressed)", line,
           (unsigned long long)skipped);
  else
    log_ev(level, f, "%s", line);
}

void
fatal(const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  log_vmsg(LOG_LEVEL_ERR, NULL, fmt, ap);
  va_end(ap);
  exit(1);                      /* atexit: the queue is written out */
}
