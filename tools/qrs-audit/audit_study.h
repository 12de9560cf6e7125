/* qrs-audit --study DIR: a study's journal, records and revealed seeds
   checked, then its pre-registered statistic (docs/studies.md).

   DIR holds journal/ (a copy of qrsd's journal directory), optionally
   records/ (libqrs records files, *.jsonl) and reveal.json:

     {"study": NAME, "assignment_seed": HEX64, "seeds": {SOURCE: HEX64}}

   The journal's study records and study entries (persist/journal.h):

     #study\t<name>\t<epoch 8hex>\t<unit>\t<planned_units>\t<statistic>\t
     <alpha>\t<effect>\t<assign commitment>\t<arms>\t<prev>\t<hash>

   with <arms> "source:type:commitment,..." in config order, and entries
   whose source is "<study>/<label>" and whose amp_params end in
   ",study=<epoch>:<ctr>,unit=<tag>".

   Without reveal.json: the blinded report (per study: its plan, units
   seen, draws and units per label) and the checks that need no seed.
   With it: the commitments, the label order, every unit's assignment,
   every prng arm draw's bytes regenerated (ChaCha20, SHA-256 against the
   entry), then the pre-registered statistic, its p-value, effect size
   with 95 % CI and power, and the others labelled exploratory; the
   statistics are withheld while a check fails.  Every failure is
   FILE:LINE: check: detail. */
#ifndef QRS_AUDIT_STUDY_H
#define QRS_AUDIT_STUDY_H

#include <stdio.h>

struct audit_study_opts {
  const char *dir;
  const char *report;           /* plots into this directory, or NULL */
  int json;                     /* the report as one JSON object */
  int max_fail;                 /* failures listed (all are counted) */
};

/* The audit of opts->dir, its report on out.  0: every check passed; 1:
   a check failed; 2: DIR or a file in it unreadable, or reveal.json
   malformed (said on stderr). */
int audit_study(const struct audit_study_opts *opts, FILE *out);

#endif
