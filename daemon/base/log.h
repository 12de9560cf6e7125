/* qrsd logging: one line per event, to the journal (sd_journal_send) when
   systemd gave us a journal stream and journald listens, else to stderr
   with a timestamp.  In the journal, an event logged with log_ev() also
   carries the fields an operator filters on (journalctl QRS_EVENT=...):
   QRS_EVENT=, SOURCE=, CLIENT_PID=, CLIENT_UID=, DRAW_SEQ=, and the
   draw journal's checkpoints QRS_JOURNAL_SEQ=, QRS_JOURNAL_HEAD=.  Never
   blocks the caller: lines go through a bounded queue to a writer
   thread; when the sink stalls and the queue is full, lines are dropped
   and counted ("N log messages dropped").  Events a peer can repeat at
   will go through log_limited(). */
#ifndef QRSD_LOG_H
#define QRSD_LOG_H

#include <stdarg.h>
#include <stdint.h>

enum log_level {
  LOG_LEVEL_ERR = 3,
  LOG_LEVEL_WARN = 4,
  LOG_LEVEL_INFO = 6,
  LOG_LEVEL_DEBUG = 7,
};

/* Messages above level are dropped (default LOG_LEVEL_INFO).  Safe to
   call while other threads log (a reload changes it). */
void log_set_level(enum log_level level);
/* "err", "warn", "info", "debug" (log.level) into *ret_level: 0, or
   -EINVAL. */
int log_level_parse(const char *name, enum log_level *ret_level);
int log_debug_enabled(void);

void log_msg(enum log_level level, const char *fmt, ...)
  __attribute__((format(printf, 2, 3)));

/* The journal fields of one event; zero-initialise and set what applies.
   event: a short fixed name (QRS_EVENT=), e.g. "source-degraded";
   source: a source's name (SOURCE=); peer: the client (base/peer.h),
   whose pid and uid, when known, give CLIENT_PID= and CLIENT_UID=; seq:
   a draw's journal sequence (DRAW_SEQ=) when > 0; journal_head: a draw
   journal checkpoint, the hash (64 hex) after entry journal_seq
   (QRS_JOURNAL_HEAD=, QRS_JOURNAL_SEQ=): logged whatever the level, as
   it anchors the journal outside its directory. */
struct peer;
struct log_fields {
  const char *event;
  const char *source;
  const struct peer *peer;
  uint64_t seq;
  uint64_t journal_seq;
  const char *journal_head;
};

void log_ev(enum log_level level, const struct log_fields *f,
            const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));

#define log_err(...) log_msg(LOG_LEVEL_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) \
  do { \
    if (log_debug_enabled()) \
      log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__); \
  } while (0)

/* Rate limiting of one kind of event: at most burst messages per
   interval; the first message after a suppressed stretch ends in
   "(N similar messages suppressed)".  Zero-initialise, then set interval_ms
   and burst (0 each: 10 s, 5). */
struct log_ratelimit {
  unsigned interval_ms;
  unsigned burst;
  int64_t window_start_ns;
  unsigned in_window;
  uint64_t suppressed;
};

void log_limited(struct log_ratelimit *rl, enum log_level level,
                 const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));
/* log_limited() with the journal fields f (NULL: none). */
void log_limited_ev(struct log_ratelimit *rl, enum log_level level,
                    const struct log_fields *f, const char *fmt, ...)
  __attribute__((format(printf, 4, 5)));

/* Write out what is queued (at most 2 s if the sink stalls) and write
   synchronously from then on.  Runs at exit by itself. */
void log_flush(void);

/* Log at error level and exit(1).  Start-up only. */
void fatal(const char *fmt, ...)
  __attribute__((format(printf, 1, 2), noreturn));

#endif
