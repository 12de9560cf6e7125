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
  AUDIT_U_MISMATCH,             /* the entry's u is not the record's */
  AUDIT_SOURCE_MISMATCH,        /* the entry's source is not the record's */
  AUDIT_FALLBACK_MISMATCH,      /* fallback label disagrees */
  AUDIT_NONCE_MISMATCH,         /* the entry's nonce is not the record's */
  AUDIT_TIMES_MISMATCH,         /* the entry's times are not the record's */
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

struct audit_record;

struct audit {
  struct audit_record *rec;     /* what the checks need of each record */
  size_t n_rec, cap_rec;
  uint64_t counts[AUDIT_N_CHECKS];
  struct audit_failure *fail;   /* the first AUDIT_FAILURES_KEPT */
  size_t n_fail;
  /* the journal cross-check */
  int journal_fault;            /* journal_verify()'s result */
  uint64_t entries;             /* intact journal entries */
  uint64_t unchecked;           /* records past a journal fault */
};

/* Read and check the records in path (each alone, then journal_seq
   reuse).  0, or -errno when path cannot be read (err says why); record
   faults are not errors: they are in a->counts and a->fail. */
int audit_records(struct audit *a, const char *path, char *err,
                  size_t errlen);

/* Cross-check the records read against the journal in dir: every draw a
   journal entry with the same u, source, fallback label, nonce and
   times.  The journal is verified on the way (a->journal_fault, head,
   err as journal_verify() sets them). */
void audit_journal(struct audit *a, const char *dir,
                   char head[JOURNAL_HEX_LEN + 1], char *err,
                   size_t errlen);

/* Total failures over every check. */
uint64_t audit_total(const struct audit *a);

void audit_free(struct audit *a);

/* The records read with a u, in record (line) order, as the statistics
   take them (audit_stats.h): a new array in *out (the caller frees it),
   its length returned; -ENOMEM. */
struct audit_sample;
long audit_samples(const struct audit *a, struct audit_sample **out);

#endif
