/* The draw journal's files read at start-up (journal_resume.c), for
   journal.c: private to the two (everyone else includes journal.h). */
#ifndef QRSD_JOURNAL_INT_H
#define QRSD_JOURNAL_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "persist/journal.h"

/* Open path without following a link or blocking on a FIFO, and refuse
   what is not a regular file; the fd, or a negative errno with err set. */
int journal__open_regular(const char *path, int flags, struct stat *st,
                          char *err, size_t errlen);

/* The last line of the file at path: 0 entry or gap (*seq, hash), 1
   header (hash: its prev), 3 a study record (hash; no sequence:
   journal__file_seq() finds it), 2 the file holds no complete line
   (nothing to resume from: removed when repair is set), or a negative
   errno with err set.  With repair, a torn last line is set aside
   first. */
int journal__last_line(const char *path, int repair, uint64_t *seq,
                       char hash[JOURNAL_HEX_LEN + 1], uint64_t *size,
                       char *err, size_t errlen);

/* The last sequence in the file at path (an entry's, or a gap's last),
   read from its start: for a file that ends in study records.  0 with
   *seq, 1 when it has none, or a negative errno with err set. */
int journal__file_seq(const char *path, uint64_t *seq, char *err,
                      size_t errlen);

#endif
