/* qrs-audit's walk of qrsd's draw journal (persist/journal.h's format):
   every file of the directory in index order, a gap in the indices a
   fault, every hash recomputed, and the chain checked against
   checkpoints (sequence and head hash) that qrsd logged to the system
   journal (QRS_JOURNAL_SEQ=, QRS_JOURNAL_HEAD=) or that the operator
   wrote down: a checkpoint is the only thing outside the directory, so
   only a checkpoint catches a chain rewritten end to end or a cut tail.

   Faults are journal.h's enum journal_fault, and past its values the
   ones below; audit_journal_fault_name() names both. */
#ifndef QRS_AUDIT_JOURNAL_H
#define QRS_AUDIT_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "persist/journal.h"

enum {
  AUDIT_JOURNAL_FILE_MISSING = 64,  /* a gap in the file indices */
  AUDIT_JOURNAL_TRUNCATED,          /* ends before a checkpoint */
  AUDIT_JOURNAL_CHECKPOINT,         /* the chain misses a checkpoint */
};
const char *audit_journal_fault_name(int fault);

#define AUDIT_CHECKPOINTS_MAX 100000

/* A study record's first field (audit_study.h): hashed and chained like
   an entry, with no sequence number of its own. */
#define AUDIT_STUDY_TAG "#study"

struct audit_checkpoint {
  uint64_t seq;
  char head[JOURNAL_HEX_LEN + 1];   /* lowercase hex */
};

/* "SEQ:HEAD" (HEAD 64 hex digits) into *cp: 0 or -EINVAL. */
int audit_checkpoint_parse(const char *s, struct audit_checkpoint *cp);

/* The checkpoints in a system-journal export (journalctl -o export, or
   -o json / json-seq: one object a line): every entry with both
   QRS_JOURNAL_SEQ= and QRS_JOURNAL_HEAD=, appended to *cps (*n of them,
   *cap allocated; the caller frees *cps).  Lines are read bounded (a
   longer one is refused).  0, or a negative errno with err saying why
   (path, line). */
int audit_checkpoints_read(const char *path, struct audit_checkpoint **cps,
                           size_t *n, size_t *cap, char *err,
                           size_t errlen);

struct audit_journal_result {
  uint64_t entries;                 /* intact entries walked */
  uint64_t first_seq, last_seq;     /* of those (0 when none) */
  unsigned first_file, last_file;   /* file indices walked */
  size_t checkpoints_checked;       /* checkpoints the walk passed */
  size_t checkpoints_before;        /* before the first entry: unchecked */
  char head[JOURNAL_HEX_LEN + 1];   /* the last intact hash */
  uint64_t gaps;                    /* gap records walked */
  uint64_t gap_numbers;             /* the sequence numbers they name */
  /* the file and line of the record handed to cb (during the call) */
  const char *at_path;
  unsigned at_line;
};

/* Walk dir's journal files.  From journal-000001.log, unless pruned: then
   from the lowest index present, its header's prev taken as the chain's
   start (a checkpoint at the sequence before its first entry anchors
   it).  cps (n, any order; sorted here) are checked on the way: the
   entry at each checkpoint's sequence must have its hash (or a study
   record's right after it), and the journal must reach the last one.  cb
   as journal_verify()'s, and for each study record with seq 0; gap (may
   be NULL) for each gap record (journal_verify_gaps()'s).  Returns
   JOURNAL_INTACT or the first fault (err: the file, line and what). */
int audit_journal_walk(const char *dir, int pruned,
                       struct audit_checkpoint *cps, size_t n,
                       int (*cb)(void *ctx, uint64_t seq, const char *line,
                                 size_t len),
                       journal_gap_cb gap, void *ctx,
                       struct audit_journal_result *res,
                       char *err, size_t errlen);

#endif
