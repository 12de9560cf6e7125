/* Studies (config studies:): randomized, blinded arms over declared
   sources, for the draw engine.

   A client joins a study by naming it as its draw's source, with a unit
   tag when the study's unit is "request" (unit "draw": each draw is a
   unit of its own, tagged "<epoch>:<ctr>").  The unit's arm comes from
   the secret assignment seed; the reply, the journal and everything
   qrsd shows name the study and the arm's label ("A", "B", ...), never
   the source behind it.

   CRYPTOGRAPHY (the audit, qrs-audit --study, recomputes all of it)

   - seed: 32 bytes from a file of 64 hex characters (sources/prng.h);
     its commitment is the hex SHA-256 of the bytes.
   - epoch: 4 random bytes drawn each time the study starts (qrsd starts,
     or a reload adds it); ctr: the study's draws in that epoch, 0, 1,
     ..., in the order they are started (every arm shares it).  A draw's
     stream nonce is epoch || ctr (8 bytes, big endian): a prng arm's
     bytes are its keystream for that nonce.
   - label order: key_i = HMAC-SHA256(seed, "qrs-study-label\0" name "\0"
     decimal(i)) for arm i (config order); arms sorted by key_i, bytewise
     ascending, take "A", "B", ... in that order.
   - assignment of tag t: the first 8 bytes of HMAC-SHA256(seed,
     "qrs-study-unit\0" name "\0" t), big endian, mod the number of arms.

   THE STUDY RECORD (the journal's, persist/journal.h), written when the
   study starts, before any of its draws:

     #study <name> <epoch 8hex> <unit> <planned_units> <statistic>
     <alpha %.17g> <effect %.17g> <assignment seed commitment>
     <arms: source:type:commitment,... in config order ("-": none)>
     <prev> <hash>                                   (tab-separated)

   A study draw's entry has source "<study>/<label>", no fallback, and
   amp_params "n=..,mean=..,std=..,study=<epoch>:<ctr>,unit=<tag>".

   Loop thread only. */
#ifndef QRSD_STUDY_H
#define QRSD_STUDY_H

#include <stddef.h>
#include <stdint.h>

#include "conf/conf.h"
#include "sources/prng.h"

struct registry;
struct journal;
struct json_object;
struct study;
struct studies;

#define STUDY_TAG_MAX 64            /* a unit tag: [A-Za-z0-9._:-]{1,64} */
#define STUDY_LABEL_MAX 64          /* "<study>/<label>" with its NUL */
/* Distinct units counted exactly per study (units seen, per label: a
   set of 8-byte keys): twice the planned units, at most this many (16
   MiB), so that the memory clients' tags can take is the plan's; past it
   units are still assigned and served, and the status says the count is
   no longer exact. */
#define STUDY_UNITS_TRACKED (1u << 20)
/* ",study=<epoch hex>:<ctr>,unit=<tag>" with its NUL */
#define STUDY_PARAMS_MAX \
  (sizeof(",study=") - 1 + 2 * PRNG_EPOCH_LEN + 1 + 20 + \
   sizeof(",unit=") - 1 + STUDY_TAG_MAX + 1)

/* One draw of a study, from study_begin() to study_served(). */
struct study_draw {
  struct study *study;              /* a reference: study_draw_end() */
  unsigned arm;                     /* config index */
  char label;                       /* 'A'.. */
  const char *source;               /* the arm's source (valid while the
                                       study is referenced) */
  uint64_t ctr;
  uint8_t stream[PRNG_NONCE_LEN];
  char tag[STUDY_TAG_MAX + 1];
  char served_by[STUDY_LABEL_MAX];  /* "<study>/<label>" */
  char params[STUDY_PARAMS_MAX];    /* ",study=<epoch>:<ctr>,unit=<tag>" */
  uint64_t unit_key;                /* for units seen */
};

/* Start conf's studies on reg: each one's seeds read, labels drawn, its
   record queued on j.  0 and *ret (NULL when conf has none), or a
   negative errno with err saying which study and why. */
int studies_new(const struct qrsd_conf *conf, struct registry *reg,
                struct journal *j, struct studies **ret, char *err,
                size_t errlen);

/* A reload (conf is the new configuration, applied; the registry has its
   sources): studies conf no longer has stop taking draws (those in
   flight finish), those it adds start (their records queued).  0, or a
   negative errno with err set (the studies that started stay). */
int studies_reload(struct studies **ps, const struct qrsd_conf *conf,
                   struct registry *reg, struct journal *j, char *err,
                   size_t errlen);

/* Can a reload from cur to next start the studies next adds (their
   assignment seeds readable, the journal on)?  0, or a negative errno
   with err set.  Reads the two configurations only: it may run on a
   worker thread, before anything changes. */
int studies_check(const struct qrsd_conf *cur, const struct qrsd_conf *next,
                  char *err, size_t errlen);

void studies_free(struct studies *s);     /* accepts NULL */

/* The running study called name, or NULL. */
struct study *studies_find(struct studies *s, const char *name);

/* A draw for t with the client's unit tag (NULL or "": none).  0 with d
   filled and t referenced, or a negative qrs error with msg set (no
   tag for a study of unit request, a bad tag). */
int study_begin(struct study *t, const char *tag, struct study_draw *d,
                char *msg, size_t msglen);
/* The draw was served: count it for its label and unit. */
void study_served(struct study_draw *d);
/* The draw is over (served or not): drop its reference. */
void study_draw_end(struct study_draw *d);

/* The AND of the arms' production flags. */
int study_production(const struct study *t);
const char *study_name(const struct study *t);

/* What qrsd shows of a study (status, metrics): by label only.  Strings
   live as long as the study. */
struct study_view {
  const char *name, *unit, *statistic, *epoch, *state;
  uint64_t planned_units, units_seen;
  double alpha;
  int units_exact;                  /* not past STUDY_UNITS_TRACKED */
  unsigned n_labels;
  uint64_t draws[CONF_STUDY_MAX_ARMS];   /* by label: A, B, ... */
  uint64_t units[CONF_STUDY_MAX_ARMS];
};

size_t studies_count(const struct studies *s);      /* accepts NULL */
void studies_view(const struct studies *s, size_t i, struct study_view *v);

/* The status file's "studies" array (by label only); NULL without
   memory. */
struct json_object *studies_status_json(const struct studies *s);

#endif
