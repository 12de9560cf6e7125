/* Entropy sources: one small interface behind which every kind of source
   sits (system, mock; later device, timing, noise, grpc).

   A source produces n fresh bytes on demand.  read() is synchronous and
   thread-safe; the draw engine calls it on the loop thread only when the
   source says that a read of that size cannot block (inline_max), and on a
   worker thread otherwise. */
#ifndef QRSD_SOURCE_H
#define QRSD_SOURCE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "conf.h"

struct source;

struct source_ops {
  const char *type;             /* "system", "mock", ... */
  int production;               /* 0: test-only source */
  /* Set up from the config entry.  0 or a negative errno; on failure err
     holds one line saying why. */
  int (*open)(struct source *s, const struct conf_source *cs, char *err,
              size_t errlen);
  /* Fill buf with n fresh bytes.  0 or a negative errno; on failure the
     source may write one line into s->detail (under s->lock). */
  int (*read)(struct source *s, uint8_t *buf, size_t n);
  void (*close)(struct source *s);
  /* One line describing the source's parameters, for logs and status. */
  void (*describe)(const struct source *s, char *buf, size_t len);
};

struct source {
  const struct source_ops *ops;
  char *name;
  size_t inline_max;            /* reads up to this size never block */
  void *priv;

  /* Statistics and health, updated by the loop thread only. */
  uint64_t draws;
  uint64_t bytes;
  uint64_t failures;
  int healthy;
  char detail[256];             /* last error, or "" */
};

/* Create and open the source a config entry declares.  Returns 0 and the
   new source, or a negative errno with err filled in. */
int source_new(const struct conf_source *cs, struct source **ret_source,
               char *err, size_t errlen);
void source_free(struct source *s);   /* accepts NULL */

/* The parameters line (e.g. "mock seed=1 mean_shift=+2.000"). */
void source_describe(const struct source *s, char *buf, size_t len);

extern const struct source_ops source_system_ops;
extern const struct source_ops source_mock_ops;

#endif
