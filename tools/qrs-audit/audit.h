/* qrs-audit's checks of libqrs per-token records (audit_records.c),
   alone or against qrsd's draw journal (daemon/persist/journal.h).

   Records are libqrs's full JSON lines (qrs_token_record_write() level 2,
   what a sampler's log at log_level full and qrs-generate --records
   write).  Each failure names the record's line, the check and what was
   found; qrs-audit prints them and counts them per check. */
#ifndef QRS_AUDIT_H
#define QRS_AUDIT_H

#include <stddef.h>
#include <stdint.h>

#include "persist/journal.h"

/* The checks, in the order they run; audit_check_name() names them. */
enum audit_check {
  AUDIT_MALFORMED = 0,          /* not a full record (JSON, fields) */
  AUDIT_U_OUTSIDE_CDF,          /* u not in (cdf_lo, cdf_hi] */
  AUDIT_TIMES_ORDER,            /* not received <= generated <= sent */
  AUDIT_DRAW_REUSED,            /* a journal entry named by two records */
  AUDIT_NOT_JOURNALLED,         /* a draw without journal_seq */
  AUDIT_UNJOURNALLED,           /* served labelled unjournalled */
  AUDIT_ENTRY_MISSING,          /* journal_seq names no journal entry */
  AUDIT_ENTRY_IN_GAP,           /* journal_seq is in a gap record's range
                                   (a crash window, a write error) */
  AUDIT_U_MISMATCH,             /* the entry's u is not the record's */
  AUDIT_SOURCE_MISMATCH,        /* the entry's source is not the record's */
  AUDIT_FALLBACK_MISMATCH,      /* fallback label disagrees */
  AUDIT_NONCE_MISMATCH,         /* the entry's nonce is not the record's */
  AUDIT_TIMES_MISMATCH,         /* the entry's times are not the record's */
  AUDIT_NONCE_CHAIN,            /* --salt: the nonce does not follow from
                                   the salt, step and previous token */
  AUDIT_CONFIG_MISMATCH,        /* --logits: another config hash */
  AUDIT_LOGITS_MISSING,         /* --logits: a step's row is not there */
  AUDIT_TOKEN_MISMATCH,         /* --logits: the row and u select another
                                   token */
  AUDIT_RECORDS_TRUNCATED,      /* a framed records file without its
                                   end line (the writer stopped) */
  AUDIT_RECORDS_LOST,           /* the end line counts other records than
                                   the file has, or records the writer
                                   dropped */
  AUDIT_N_CHECKS,
};
const char *audit_check_name(enum audit_check c);

struct audit_failure {
  uint64_t line;                /* 1-based line of the records file */
  enum audit_check check;
  char detail[200];
};

/* Kept failures (at most AUDIT_FAILURES_KEPT in detail), all counted. */
#define AUDIT_FAILURES_KEPT 1000
#define AUDIT_LINE_MAX (1u << 20)   /* longest record line read */

/* What the checks need of one record. */
struct audit_record {
  uint64_t line;
  uint64_t seq;                 /* journal_seq; 0: null */
  double u;                     /* NaN: null */
  int64_t t[3];                 /* received, generated, sent; 0: null */
  uint64_t nonce;               /* 0: null */
  int fallback, unjournalled;
  char source[64];
  /* for --salt and --logits */
  uint64_t step;
  int64_t token;
  int64_t timestamp_ns;
  double z, mean;               /* z_score, sample_mean (NaN: null) */
  char config_hash[17];
  /* whether the engine emitted the token: 1 (also when the record does
     not say: every record of a plain sampler), 0 (a rejected speculative
     draft, or emitted_token was forced in its place), -1 (not known) */
  int emitted;
  int64_t emitted_token;        /* -1: none */
  double token_prob;            /* NaN: absent or null */
};

struct audit {
  struct audit_record *rec;     /* what the checks need of each record */
  size_t n_rec, cap_rec;
  uint64_t counts[AUDIT_N_CHECKS];
  struct audit_failure *fail;   /* the first AUDIT_FAILURES_KEPT */
  size_t n_fail;
  /* a framed records file (a header line, the records, an end line) */
  uint64_t frame_line;          /* the header's line; 0: not framed */
  uint64_t frame_end_line;      /* the end line's; 0: none yet */
  uint64_t frame_records;       /* records after the header */
  /* the journal cross-check */
  int journal_fault;            /* audit_journal_walk()'s result */
  uint64_t entries;             /* intact journal entries */
  uint64_t unchecked;           /* records past a journal fault */
  /* records whose token was not emitted: rejected drafts, tokens
     overridden, and those whose fate is not known */
  uint64_t rejected, overridden, emission_unknown;
  /* records whose token a device selected (certified equal to libqrs's
     pick) and those it left to libqrs (uncertified) */
  uint64_t device_certified, device_uncertified;
};

/* Read and check the records in path (each alone, then journal_seq
   reuse).  0, or -errno when path cannot be read (err says why); record
   faults are not errors: they are in a->counts and a->fail. */
int audit_records(struct audit *a, const char *path, char *err,
                  size_t errlen);

/* Cross-check the records read against the journal in dir: every draw a
   journal entry with the same u, source, fallback label, nonce and
   times.  The journal is walked on the way (audit_journal.h: pruned and
   the checkpoints cps as audit_journal_walk() takes them; a->journal_fault
   its result, res and err as it sets them). */
struct audit_checkpoint;
struct audit_journal_result;
void audit_journal(struct audit *a, const char *dir, int pruned,
                   struct audit_checkpoint *cps, size_t n,
                   struct audit_journal_result *res, char *err,
                   size_t errlen);

/* --salt: every record's nonce is nonce_derive(salt, step, the token of
   its sequence's previous record, -1 at step 0); sequences are followed
   through interleaved records by the nonce itself. */
int audit_nonce_chain(struct audit *a, const uint8_t *salt, size_t len,
                      char *err, size_t errlen);

/* --logits: the dump's rows (qrs_sampler_set_logits_dump()) selected
   again, each with its record's u through a sampler built from the
   dump's configuration, in step order; a different token, a config hash
   that is not the dump's, a step without its row are failures.  0, or
   -errno / -EINVAL when the dump cannot be read (err says why);
   *ret_rows: the rows replayed. */
int audit_logits(struct audit *a, const char *path, uint64_t *ret_rows,
                 char *err, size_t errlen);

/* Count a failure of check c at a record's line; its detail is kept
   while fewer than AUDIT_FAILURES_KEPT are. */
__attribute__((format(printf, 4, 5))) void
audit_failed(struct audit *a, uint64_t line, enum audit_check c,
             const char *fmt, ...);

/* A field of a journal line: [s, e). */
struct jfield {
  const char *s, *e;
};

/* The n tab-separated fields of the len bytes at line into f: 0, or -1
   when it has fewer (the last runs to the line's end). */
int audit_split_fields(const char *line, size_t len, struct jfield *f,
                       int n);

/* Whether field f is the string s. */
int audit_field_is(const struct jfield *f, const char *s);

/* A failure as a json-c object (struct json_object *; the caller owns
   it): file (left out when NULL), line, check, detail. */
void *audit_failure_json(const char *file, uint64_t line, const char *check,
                         const char *detail);

/* Total failures over every check. */
uint64_t audit_total(const struct audit *a);

void audit_free(struct audit *a);

/* The records read with a u, in record (line) order, as the statistics
   take them (audit_stats.h): a new array in *out (the caller frees it),
   its length returned; -ENOMEM. */
struct audit_sample;
long audit_samples(const struct audit *a, struct audit_sample **out);

#endif
