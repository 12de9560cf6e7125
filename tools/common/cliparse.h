/* The command lines of the qrs tools: strict parsing of values, and a
   table-driven option parser on getopt_long() that each program describes
   its options to once.  Each value function prints what is wrong to
   stderr, as "PROG: OPT: ...", and returns -1; 0 on success. */
#ifndef QRS_CLIPARSE_H
#define QRS_CLIPARSE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Unsigned decimal, the whole string, no sign or spaces, in [min, max].
   With suffixes, one of k/K/M/G multiplies by 2^10/2^20/2^30. */
int cli_parse_u64(const char *prog, const char *opt, const char *s,
                  uint64_t min, uint64_t max, int suffixes, uint64_t *ret);

/* Signed decimal, the whole string, in [min, max]. */
int cli_parse_i64(const char *prog, const char *opt, const char *s,
                  int64_t min, int64_t max, int64_t *ret);

/* A finite decimal number (ranges are the caller's to check). */
int cli_parse_double(const char *prog, const char *opt, const char *s,
                     double *ret);

/* An even number of hex digits, at most max bytes, into buf. */
int cli_parse_hex(const char *prog, const char *opt, const char *s,
                  uint8_t *buf, size_t max, size_t *ret_len);

/* ---- option tables ---- */

/* How an option's argument is read and stored in field. */
enum cli_opt_type {
  CLI_OPT_STRING,               /* const char **field = arg */
  CLI_OPT_SET,                  /* no argument: int *field = val */
  CLI_OPT_U64,                  /* uint64_t *field: cli_parse_u64() in
                                   [min, max], CLI_SUFFIX in flags */
  CLI_OPT_I64,                  /* int64_t *field: cli_parse_i64(), any
                                   int64_t */
  CLI_OPT_FINITE,               /* double *field: cli_parse_double() */
  CLI_OPT_NUM,                  /* num() reads a double in the tool's own
                                   syntax, checked against [min, max];
                                   stored as enum cli_num val says */
  CLI_OPT_INT,                  /* unchecked (qrs-bench checks after):
                                   int *field = atoi(arg) */
  CLI_OPT_U32,                  /* uint32_t *field = strtoul(arg) */
  CLI_OPT_SIZE,                 /* size_t *field = strtoul(arg) */
  CLI_OPT_DOUBLE,               /* double *field = atof(arg) */
  CLI_OPT_CALL,                 /* call(o, opt, arg): 0, or -1 when arg is
                                   bad (call has said why) */
  CLI_OPT_HELP,                 /* no argument: the parser's help */
  CLI_OPT_DONE,                 /* no argument: parsing stops, the result
                                   is call(o, opt, NULL), an exit status
                                   (-V, --version) */
};

/* CLI_OPT_NUM: the C type of *field; the double is cast to it. */
enum cli_num {
  CLI_NUM_DOUBLE,
  CLI_NUM_U32,
  CLI_NUM_U64,
  CLI_NUM_LONG,
};

#define CLI_SUFFIX 0x1          /* CLI_OPT_U64: k, M or G allowed */

/* One option: a long name, a short letter, or both.  The messages name
   it as label, else as --name, else as -key (opt below). */
struct cli_opt {
  const char *name;             /* --name, or NULL: short only */
  int key;                      /* -key, or 0: long only */
  enum cli_opt_type type;
  void *field;
  int val;                      /* SET: the value; NUM: enum cli_num */
  uint64_t min, max;            /* U64, NUM: the range (NUM: for num) */
  unsigned flags;
  const char *label;
  unsigned *seen;               /* when not NULL: |= bit once stored */
  unsigned bit;
  int (*call)(const struct cli_opt *o, const char *opt, const char *arg);
  int (*num)(const struct cli_opt *o, const char *opt, const char *arg,
             double *ret);      /* 0, or -1 after saying what is wrong */
};

#define CLI_OPT_MAX 32          /* options a table may have */

#define CLI_IN_ORDER 0x1        /* stop at the first operand ("+") */
#define CLI_QUIET 0x2           /* getopt says nothing, bad() does (":") */

/* A command line: its options (ended by an entry with neither name nor
   key) and what to do about -h and bad options. */
struct cli {
  const char *prog;             /* the value errors' "PROG: " */
  unsigned flags;
  const struct cli_opt *opts;
  void (*usage)(FILE *f);       /* the help, or the complaint's usage */
  /* CLI_OPT_HELP: the exit status after the help; NULL: usage(stdout),
     then 0 */
  int (*help)(const struct cli *cli);
  /* after getopt_long() returned c, '?' or ':' (CLI_QUIET: a missing
     argument); NULL: usage(stderr) */
  void (*bad)(const struct cli *cli, int c, char **argv);
  const void *ctx;              /* the caller's, for help and bad */
};

/* Parse argv[1..] against cli's options with getopt_long() (optind is
   reset first; the operands start at optind afterwards), storing each
   value as its type says.  Returns -1 to go on, else the exit status: 0
   (or help()'s) after the help, a DONE option's, or 2 after a bad option
   or value (said). */
int cli_opts_parse(const struct cli *cli, int argc, char **argv);

#endif
