/* qrs-audit: verify a qrsd draw journal and libqrs per-token records
   offline.  The journal: every SHA-256 recomputed, the chain across
   rotated files, sequences.  The records (audit_records.c): u in its CDF
   interval, received <= generated <= sent, no journal entry named
   twice, and with --journal every draw an entry with the same u, source,
   fallback label, nonce and times.  The replays (audit_replay.c): with
   --salt the nonce chain, with --logits each token selected again.

   Exit status: 0 intact, 1 a fault found (named), 2 usage or I/O. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "audit.h"
#include "audit_journal.h"
#include "audit_stats.h"
#include "audit_study.h"
#include "cliparse.h"
#include "nonce.h"
#include "persist/journal.h"
#include "sortcmp.h"

static void
usage(FILE *f)
{
  fprintf(f,
"Usage: qrs-audit [OPTIONS] --journal DIR\n"
"       qrs-audit [OPTIONS] --records FILE [--journal DIR]\n"
"       qrs-audit [--json] [--report DIR] --study DIR\n"
"Verify qrsd's hash-chained draw journal (journal.dir) and libqrs's\n"
"per-token records offline.\n"
"\n"
"  -j, --journal DIR   the journal directory (journal-000001.log, ...)\n"
"      --checkpoint SEQ:HEAD  a checkpoint qrsd logged (QRS_JOURNAL_SEQ=,\n"
"                      QRS_JOURNAL_HEAD=): the chain must pass through HEAD\n"
"                      at SEQ and the journal must reach SEQ (repeatable)\n"
"      --checkpoints FILE  every checkpoint in a system-journal export\n"
"                      (journalctl -o export, or -o json) (repeatable)\n"
"      --pruned        the oldest files were deleted (retention): audit\n"
"                      from the lowest file present, its header's prev the\n"
"                      start of the chain\n"
"  -r, --records FILE  libqrs full records, one JSON object a line (a\n"
"                      sampler's log at log_level full, qrs-generate\n"
"                      --records)\n"
"      --stats         with --records: the statistics of the run's u (KS,\n"
"                      Anderson-Darling, runs test, Stouffer Z) and per\n"
"                      source the draws, fallbacks and latency\n"
"      --control FILE  with --records: the records of a control arm (e.g.\n"
"                      the same experiment on the system source): the\n"
"                      two-sample comparison and its power (implies --stats)\n"
"      --report DIR    with --records: plots of u (histogram, QQ, over the\n"
"                      run) and of each source's latency, PNG and SVG,\n"
"                      drawn by gnuplot into DIR (implies --stats)\n"
"      --salt HEX      with --records: the run's commitment salt; every\n"
"                      nonce must follow from it, the step and the previous\n"
"                      token of its request (nonce-chain)\n"
"      --logits FILE   with --records: a sampler's logits dump\n"
"                      (qrs_sampler_set_logits_dump()); each row is selected\n"
"                      again with its record's u under the dump's config\n"
"                      (token-mismatch, config-mismatch, logits-missing)\n"
"      --study DIR     a study (docs/studies.md): DIR/journal, optionally\n"
"                      DIR/records/*.jsonl and DIR/reveal.json; blinded\n"
"                      counts per label, or with the reveal every\n"
"                      commitment, assignment and prng draw checked, then\n"
"                      the pre-registered statistic (--report: the plots\n"
"                      of its draws by label)\n"
"      --json          the verdict as one JSON object on stdout\n"
"      --max-failures N  failures listed (default 100; all are counted)\n"
"  -h, --help          this help\n"
"\n"
"The journal: every entry's SHA-256 is recomputed, each prev must be the\n"
"hash before (across files: each header names the last hash of the file\n"
"before), sequences must run 1, 2, 3, ... and the file indices must have\n"
"no gap.  With checkpoints, the entry at each checkpoint's sequence must\n"
"have its hash and the journal must reach the last one.  The first fault\n"
"is named: entry-edited, entry-dropped, entries-reordered, draw-replayed,\n"
"chain-broken, files-spliced, file-missing, journal-truncated,\n"
"checkpoint-mismatch, malformed-entry, unreadable.  The chain alone\n"
"proves the files consistent with themselves; only a checkpoint, kept\n"
"outside the directory, catches a rewritten chain or a cut tail.\n"
"\n"
"The records, each: u inside its token's CDF interval (cdf_lo, cdf_hi]\n"
"(u-outside-cdf); received <= generated <= sent (times-out-of-order); no\n"
"journal entry named by two records (draw-reused).  With --journal too,\n"
"each record's draw must be the journal entry its journal_seq names\n"
"(draw-not-journalled, draw-unjournalled, entry-missing) with the same u,\n"
"source, fallback label, nonce and times (u-mismatch, source-mismatch,\n"
"fallback-mismatch, nonce-mismatch, times-mismatch).  A line that is not\n"
"a full record is malformed-record.  Every failure is listed as\n"
"FILE:LINE: check: detail.\n"
"\n"
"Exit status: 0 intact, 1 a fault found, 2 bad usage or unreadable input.\n");
}

/* The checkpoints of --checkpoint and --checkpoints. */
static struct audit_checkpoint *cps;
static size_t n_cps, cap_cps;

static int
opt_checkpoint(const struct cli_opt *o, const char *opt, const char *arg)
{
  struct audit_checkpoint cp;
  char err[1024];
  int r;

  (void)o;
  if (strcmp(opt, "--checkpoints") == 0) {
    r = audit_checkpoints_read(arg, &cps, &n_cps, &cap_cps, err, sizeof err);
    if (r < 0)
      fprintf(stderr, "qrs-audit: --checkpoints: %s\n", err);
    return r < 0 ? -1 : 0;
  }
  if (audit_checkpoint_parse(arg, &cp) != 0) {
    fprintf(stderr, "qrs-audit: %s: '%s' is not SEQ:HEAD (HEAD: 64 "
            "lowercase hex digits)\n", opt, arg);
    return -1;
  }
  if (n_cps == cap_cps) {
    struct audit_checkpoint *p;

    p = realloc(cps, (cap_cps ? 2 * cap_cps : 16) * sizeof(*p));
    if (p == NULL) {
      fprintf(stderr, "qrs-audit: out of memory\n");
      return -1;
    }
    cps = p;
    cap_cps = cap_cps ? 2 * cap_cps : 16;
  }
  cps[n_cps++] = cp;
  return 0;
}

static int
cmp_fail(const void *x, const void *y)
{
  const struct audit_failure *a = x, *b = y;

  return SORT_ORDER2(a->line, b->line, a->check, b->check);
}

/* The first failing check (by line), or NULL. */
static const char *
first_check(const struct audit *a)
{
  int c;

  if (a->n_fail > 0)
    return audit_check_name(a->fail[0].check);
  for (c = 0; c < AUDIT_N_CHECKS; c++)
    if (a->counts[c])
      return audit_check_name(c);
  return NULL;
}

static double
rate(uint64_t n, double secs)
{
  return secs > 0 ? (double)n / secs : 0;
}

/* The statistics of the records read (and of the control arm's), and the
   plots.  0, or -1 with err saying why. */
static int
run_stats(const struct audit *a, const char *control, const char *report,
          struct audit_stats *st, char *err, size_t errlen)
{
  struct audit_sample *s = NULL, *cs = NULL;
  struct audit ca;
  long n, nc = 0;
  int r = -1;

  memset(&ca, 0, sizeof ca);
  n = audit_samples(a, &s);
  if (n < 0) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  if (control) {
    if (audit_records(&ca, control, err, errlen) < 0)
      goto out;
    nc = audit_samples(&ca, &cs);
    if (nc < 0) {
      snprintf(err, errlen, "out of memory");
      goto out;
    }
  }
  r = audit_stats_compute(s, (size_t)n, cs, (size_t)nc, st);
  if (r == -EINVAL) {
    snprintf(err, errlen, "--stats needs at least 2 records with u in "
             "(0, 1)%s", control ? " in each arm" : "");
    goto out;
  }
  if (r < 0) {
    snprintf(err, errlen, "out of memory");
    goto out;
  }
  if (report &&
      audit_stats_plots(report, s, (size_t)n, st, err, errlen) < 0) {
    r = -1;
    goto out;
  }
  r = 0;
out:
  free(s);
  free(cs);
  audit_free(&ca);
  return r < 0 ? -1 : 0;
}

int
main(int argc, char **argv)
{
  const char *dir = NULL, *records = NULL, *control = NULL, *report = NULL;
  const char *salt_hex = NULL, *logits = NULL, *study = NULL;
  int json = 0, max_fail = 100, stats = 0, pruned = 0, r, rc, c;
  const struct cli_opt opts[] = {
    { .name = "journal", .key = 'j', .type = CLI_OPT_STRING, .field = &dir },
    { .name = "records", .key = 'r', .type = CLI_OPT_STRING,
      .field = &records },
    { .name = "checkpoint", .type = CLI_OPT_CALL, .call = opt_checkpoint },
    { .name = "checkpoints", .type = CLI_OPT_CALL, .call = opt_checkpoint },
    { .name = "pruned", .type = CLI_OPT_SET, .field = &pruned, .val = 1 },
    { .name = "json", .type = CLI_OPT_SET, .field = &json, .val = 1 },
    { .name = "stats", .type = CLI_OPT_SET, .field = &stats, .val = 1 },
    { .name = "control", .type = CLI_OPT_STRING, .field = &control },
    { .name = "report", .type = CLI_OPT_STRING, .field = &report },
    { .name = "salt", .type = CLI_OPT_STRING, .field = &salt_hex },
    { .name = "logits", .type = CLI_OPT_STRING, .field = &logits },
    { .name = "study", .type = CLI_OPT_STRING, .field = &study },
    { .name = "max-failures", .type = CLI_OPT_INT, .field = &max_fail },
    { .name = "help", .key = 'h', .type = CLI_OPT_HELP },
    { 0 },
  };
  const struct cli cli = { .prog = "qrs-audit", .opts = opts,
                           .usage = usage };
  char head[JOURNAL_HEX_LEN + 1] = "", err[1024] = "", rerr[1024] = "";
  struct json_object *o, *fa, *fc;
  struct timespec t0, t1, t2;
  struct audit a;
  struct audit_stats st;
  struct audit_journal_result jr;
  const char *verdict;
  uint64_t entries = 0, total, logits_rows = 0;
  uint8_t salt[NONCE_MAX_SALT];
  size_t salt_len = 0;
  double rsecs, jsecs;
  size_t i;

  r = cli_opts_parse(&cli, argc, argv);
  if (r >= 0) {
    free(cps);
    return r;
  }
  if (study) {
    struct audit_study_opts so = { .dir = study, .report = report,
                                   .json = json, .max_fail = max_fail };

    if (dir || records || stats || control || salt_hex || logits ||
        n_cps || pruned || optind != argc || max_fail < 0) {
      fprintf(stderr, "qrs-audit: --study takes only --json, --report "
              "and --max-failures\n");
      free(cps);
      return 2;
    }
    return audit_study(&so, stdout);
  }
  if ((dir == NULL && records == NULL) || optind != argc || max_fail < 0) {
    usage(stderr);
    return 2;
  }
  if ((stats || control || report || salt_hex || logits) && !records) {
    fprintf(stderr, "qrs-audit: --stats, --control, --report, --salt and "
            "--logits need --records\n");
    return 2;
  }
  if ((n_cps || pruned) && !dir) {
    fprintf(stderr, "qrs-audit: --checkpoint, --checkpoints and --pruned "
            "need --journal\n");
    return 2;
  }
  if (salt_hex && (cli_parse_hex("qrs-audit", "--salt", salt_hex, salt,
                                 sizeof salt, &salt_len) < 0 ||
                   salt_len == 0))
    return 2;
  stats |= control != NULL || report != NULL;
  memset(&a, 0, sizeof a);
  memset(&jr, 0, sizeof jr);
  r = JOURNAL_INTACT;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (records && audit_records(&a, records, rerr, sizeof rerr) < 0) {
    fprintf(stderr, "qrs-audit: %s\n", rerr);
    audit_free(&a);
    return 2;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (records && dir) {
    audit_journal(&a, dir, pruned, cps, n_cps, &jr, err, sizeof err);
    r = a.journal_fault;
  } else if (dir) {
    r = audit_journal_walk(dir, pruned, cps, n_cps, NULL, NULL, NULL, &jr,
                           err, sizeof err);
  }
  entries = jr.entries;
  memcpy(head, jr.head, sizeof head);
  clock_gettime(CLOCK_MONOTONIC, &t2);
  if ((salt_hex && audit_nonce_chain(&a, salt, salt_len, rerr,
                                     sizeof rerr) < 0) ||
      (logits && audit_logits(&a, logits, &logits_rows, rerr,
                              sizeof rerr) < 0)) {
    fprintf(stderr, "qrs-audit: %s\n", rerr);
    audit_free(&a);
    return 2;
  }
  rsecs = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
  jsecs = (double)(t2.tv_sec - t1.tv_sec) + (t2.tv_nsec - t1.tv_nsec) / 1e9;
  if (stats && run_stats(&a, control, report, &st, rerr, sizeof rerr) < 0) {
    fprintf(stderr, "qrs-audit: %s\n", rerr);
    audit_free(&a);
    return 2;
  }
  if (a.n_fail)                 /* a.fail is NULL when none failed */
    qsort(a.fail, a.n_fail, sizeof *a.fail, cmp_fail);
  total = audit_total(&a);
  verdict = r != JOURNAL_INTACT ? audit_journal_fault_name(r) :
            total ? first_check(&a) : "intact";

  if (json) {
    o = json_object_new_object();
    json_object_object_add(o, "verdict", json_object_new_string(verdict));
    if (dir) {
      json_object_object_add(o, "entries", json_object_new_uint64(entries));
      json_object_object_add(o, "head", json_object_new_string(head));
      if (jr.entries) {
        json_object_object_add(o, "first_seq",
                               json_object_new_uint64(jr.first_seq));
        json_object_object_add(o, "last_seq",
                               json_object_new_uint64(jr.last_seq));
      }
      json_object_object_add(o, "first_file",
                             json_object_new_uint64(jr.first_file));
      json_object_object_add(o, "checkpoints_checked",
                             json_object_new_uint64(jr.checkpoints_checked));
      /* numbers handed out whose entries were never written */
      json_object_object_add(o, "gaps", json_object_new_uint64(jr.gaps));
      json_object_object_add(o, "gap_numbers",
                             json_object_new_uint64(jr.gap_numbers));
      if (jr.checkpoints_before)
        json_object_object_add(o, "checkpoints_before_first_entry",
                               json_object_new_uint64(
                                 jr.checkpoints_before));
      if (r != JOURNAL_INTACT) {
        json_object_object_add(o, "journal_fault", json_object_new_string(
                               audit_journal_fault_name(r)));
        json_object_object_add(o, "detail", json_object_new_string(err));
      }
      json_object_object_add(o, "entries_per_second",
                             json_object_new_double(rate(entries, jsecs)));
    }
    if (records) {
      json_object_object_add(o, "records",
                             json_object_new_uint64(a.n_rec +
                                                    a.counts[AUDIT_MALFORMED]));
      json_object_object_add(o, "record_failures",
                             json_object_new_uint64(total));
      fc = json_object_new_object();
      for (c = 0; c < AUDIT_N_CHECKS; c++)
        if (a.counts[c])
          json_object_object_add(fc, audit_check_name(c),
                                 json_object_new_uint64(a.counts[c]));
      json_object_object_add(o, "failure_counts", fc);
      fa = json_object_new_array();
      for (i = 0; i < a.n_fail && i < (size_t)max_fail; i++)
        json_object_array_add(fa, audit_failure_json(NULL, a.fail[i].line,
                              audit_check_name(a.fail[i].check),
                              a.fail[i].detail));
      json_object_object_add(o, "failures", fa);
      if (a.unchecked)
        json_object_object_add(o, "records_unchecked",
                               json_object_new_uint64(a.unchecked));
      {
        const struct { const char *name; uint64_t n; } emission[] = {
          { "records_rejected", a.rejected },
          { "records_overridden", a.overridden },
          { "records_emission_unknown", a.emission_unknown },
          { "records_device_certified", a.device_certified },
          { "records_device_uncertified", a.device_uncertified },
        };

        for (c = 0; c < 5; c++)
          json_object_object_add(o, emission[c].name,
                                 json_object_new_uint64(emission[c].n));
      }
      json_object_object_add(o, "records_per_second",
                             json_object_new_double(rate(a.n_rec, rsecs)));
      if (logits)
        json_object_object_add(o, "logits_rows",
                               json_object_new_uint64(logits_rows));
      if (stats)
        json_object_object_add(o, "statistics", audit_stats_json(&st));
    }
    puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
    json_object_put(o);
  } else {
    for (i = 0; i < a.n_fail && i < (size_t)max_fail; i++)
      printf("%s:%" PRIu64 ": %s: %s\n", records, a.fail[i].line,
             audit_check_name(a.fail[i].check), a.fail[i].detail);
    if (records) {
      const char *sep = ":";

      printf("records: %zu read, %" PRIu64 " failures", a.n_rec +
             (size_t)a.counts[AUDIT_MALFORMED], total);
      for (c = 0; c < AUDIT_N_CHECKS; c++)
        if (a.counts[c]) {
          printf("%s %s %" PRIu64, sep, audit_check_name(c), a.counts[c]);
          sep = ",";
        }
      printf(" (%.0f records/s)\n", rate(a.n_rec, rsecs));
      if (a.unchecked)
        printf("records: %" PRIu64 " not checked against the journal (past "
               "its fault, or in files pruned)\n", a.unchecked);
      if (a.rejected || a.overridden || a.emission_unknown)
        printf("records: tokens not emitted: %" PRIu64 " rejected drafts, %"
               PRIu64 " overridden; %" PRIu64 " not known\n", a.rejected,
               a.overridden, a.emission_unknown);
      if (a.device_certified || a.device_uncertified)
        printf("records: selected on a device: %" PRIu64 " certified, %"
               PRIu64 " uncertified (selected by libqrs from the row)\n",
               a.device_certified, a.device_uncertified);
      if (logits)
        printf("logits: %" PRIu64 " rows selected again from %s\n",
               logits_rows, logits);
    }
    if (stats)
      audit_stats_print(stdout, &st);
    if (report)
      printf("plots: %s/u_hist.png, u_qq.png, u_time.png, latency.png "
             "(and .svg)\n", report);
    if (dir && r == JOURNAL_INTACT) {
      printf("journal intact: %" PRIu64 " entries, head %s (%.0f entries/s)"
             "\n", entries, head, rate(entries, jsecs));
      if (jr.gaps)
        printf("journal: %" PRIu64 " gap records: %" PRIu64 " numbers handed "
               "out whose entries were never written (a crash window, a "
               "write error)\n", jr.gaps, jr.gap_numbers);
      if (jr.first_file > 1)
        printf("journal: from journal-%06u.log (sequence %" PRIu64 " on); "
               "the files before it are gone\n", jr.first_file,
               jr.first_seq);
      if (n_cps)
        printf("journal: %zu checkpoints passed%s\n",
               jr.checkpoints_checked, jr.checkpoints_before ?
               " (those before the first entry not checked)" : "");
      else
        printf("journal: no checkpoint given: the chain proves the files "
               "consistent, not complete or unrewritten\n");
    } else if (dir) {
      printf("journal %s: %s (%" PRIu64 " entries intact before it)\n",
             audit_journal_fault_name(r), err, entries);
    }
  }
  rc = r == JOURNAL_FAULT_IO ? 2 : r != JOURNAL_INTACT || total ? 1 : 0;
  audit_free(&a);
  free(cps);
  return rc;
}
