/* What qrsctl's files share (qrsctl's own header, not installed):

     qrsctl.c        the command line: commands, help, options, main()
     ctl_query.c     the commands that ask qrsd: status, health, sources,
                     draw, bytes, reload,
                     source, quota
     ctl_validate.c  validate: runs 'qrsd -n -c FILE'
     ctl_metrics.c   metrics: STATUS and SOURCES as Prometheus text
     ctl_reply.c     the replies described once, as field tables that
                     give both the text for people and the --json line
     ctl_out.c       writing output: text made safe for a terminal,
                     flushing, JSON lines, and the field tables' engine

   qrsctl uses libqrs's public API only, and core/jsonfield for JSON. */
#ifndef QRS_CTL_H
#define QRS_CTL_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include <json-c/json.h>

#include <qrs/client.h>

#include "cliparse.h"
#include "jsonfield.h"

#define EXIT_HEALTHY 0
#define EXIT_DEGRADED 1
#define EXIT_ERROR 2

/* Global options, parsed before the command. */
struct ctl {
  const char *socket_path;  /* resolved: --socket, $QRS_SOCKET, default */
  int timeout_ms;           /* as struct qrs_client_options wants it */
  int json;
};

struct command;

/* A command: argv[0] is its name, its options follow.  Returns the exit
   status. */
typedef int ctl_run_fn(struct ctl *ctl, const struct command *cmd,
                       int argc, char **argv);

struct command {
  const char *name;
  const char *args;         /* the synopsis after the name */
  const char *help;         /* what it does, then its options */
  ctl_run_fn *run;
};

/* qrsctl.c: option parsing shared by every command. */

/* The options every command accepts, -j/-c/--json and -h/--help, and the
   end of a command's option table (cliparse.h). */
#define CTL_COMMON_OPTS(ctl) \
  { .name = "json", .key = 'j', .type = CLI_OPT_SET, .field = &(ctl)->json, \
    .val = 1 }, \
  { .key = 'c', .type = CLI_OPT_SET, .field = &(ctl)->json, .val = 1 }, \
  { .name = "help", .key = 'h', .type = CLI_OPT_HELP }, \
  { 0 }

/* Parse cmd's options, opts (ending with CTL_COMMON_OPTS()), and refuse
   operands: -1 to go on, else the exit status (after the help, or saying
   what is wrong).  ctl_parse_options(): the operands, from optind, are
   the caller's to check. */
int ctl_parse(const struct command *cmd, const struct cli_opt *opts,
              int argc, char **argv);
int ctl_parse_options(const struct command *cmd, const struct cli_opt *opts,
                      int argc, char **argv);
/* The command's synopsis and a pointer to its help, on stderr. */
void ctl_command_usage_error(const struct command *cmd);

/* ctl_query.c and ctl_validate.c: the commands (cmd_query: status,
   health and sources, the question named by the command). */
ctl_run_fn cmd_query, cmd_metrics, cmd_draw, cmd_bytes, cmd_validate,
           cmd_hash_key, cmd_reload, cmd_source, cmd_quota;

/* ctl_metrics.c: st and src as Prometheus text format 0.0.4 on f.  0, or
   -1 if writing failed. */
int ctl_print_metrics(FILE *f, const struct qrs_status *st,
                      const struct qrs_sources *src);

/* ctl_out.c: output. */

/* Copy a string from qrsd for a terminal: control characters become '?'.
   src holds at most srcsize bytes (it may lack the NUL). */
const char *out_safe(char *dst, size_t dstsize, const char *src,
                     size_t srcsize);
#define SAFE(buf, field) out_safe((buf), sizeof(buf), (field), sizeof(field))

/* Finish a line of output.  Returns 0, or 1 when the reader has gone away
   (EPIPE: stop quietly), or -1 after saying what failed. */
int out_flush(void);
/* The exit status after the last output: EXIT_ERROR when it failed. */
int out_done(int status);
/* Print obj as one line of plain JSON and free it; r < 0 (obj NULL):
   building it failed with that errno, say so.  Returns as out_flush(). */
int out_json(int r, struct json_object *obj);

/* ctl_out.c: field tables.  A reply's table lists its fields in the order
   of its JSON object; each row is the JSON row (jsonfield.h: key NULL for
   a field only the text shows; a nested object or array names the
   other table's json) and how the text shows it.  The text puts
   the fields in the order of col, in one of two layouts:

   - a line (table_line()): each field as pre, its value, post
     (" u=" 0.123, "Protocol        : " 1 "\n");
   - columns (table_columns()): a heading row, then one row per element,
     each value padded to its column's width.

   The value's text comes from its type, never from a format in the table
   (so the compiler checks every format): a STR through out_safe(), a
   BOOL as on when true, an enum as its name, integers in decimal (HEX64:
   16 hex digits), doubles with prec digits after the point (CTL_G: prec
   significant digits; CTL_PLUS: with a sign).  A value that is 0, "" or
   false is unset: CTL_OMIT leaves the field out, else unset replaces its
   text (a BOOL without one is left out).  text, when not NULL, makes the
   value's text instead (NULL: leave the field out). */
typedef const char *(*ctl_text_fn)(char *buf, size_t size, const void *row);

#define CTL_OMIT 0x1        /* unset: no text at all, pre and post too */
#define CTL_PLUS 0x2        /* a double with its sign: +0.1234 */
#define CTL_G 0x4           /* a double as %g */
#define CTL_FIT 0x8         /* columns: widen to the widest value */

struct ctl_field {
  struct jsonfield json;
  int col;                  /* place in the text, from 1; 0: JSON only */
  const char *pre;          /* line: before the value */
  const char *post;         /* line: after it */
  const char *on;           /* BOOL: the text when true */
  const char *unset;        /* the text of an unset value */
  unsigned flags;
  int prec;                 /* doubles: digits */
  ctl_text_fn text;
  const char *head;         /* columns: heading */
  int width;                /* columns: least width; negative: left */
  const char *sep;          /* columns: before it; NULL: the table's */
};

struct ctl_table {
  struct jsonfield_table json;  /* the same rows, for JSON */
  const struct ctl_field *fields;
  size_t n;
  /* columns only */
  const char *indent;       /* before every row */
  const char *sep;          /* between columns */
  int (*blank)(const void *row);  /* a row that shows only its first
                                     column, the others "-" */
};

/* The table of an array of struct ctl_field; _COLUMNS with the columns'
   indent, separator and blank test. */
#define CTL_TABLE_COLUMNS(f, indent, sep, blank) \
  { { &(f)[0].json, sizeof(f) / sizeof((f)[0]), sizeof((f)[0]) }, (f), \
    sizeof(f) / sizeof((f)[0]), (indent), (sep), (blank) }
#define CTL_TABLE(f) CTL_TABLE_COLUMNS(f, NULL, NULL, NULL)

/* Print the table's text fields of row as a line (no newline added). */
void table_line(const struct ctl_table *t, const void *row);
/* Print a heading and one row per element of rows as columns. */
void table_columns(const struct ctl_table *t, const void *rows, size_t n,
                   size_t stride);

/* ctl_reply.c: each reply as text or (ctl->json) one JSON line.  Return
   as out_flush(). */

/* One draw of 'draw -n N': its number (from 1) and whether the text
   names the amplifier (--amplifier was given). */
struct draw_row {
  uint64_t index;
  int show_amplifier;
  struct qrs_draw d;
};

struct validate_result {
  const char *file;
  int valid;
  const char *qrsd;         /* the program that checked it */
  int exit_status;          /* qrsd's */
};

int reply_status(const struct ctl *ctl, const struct qrs_status *st);
int reply_health(const struct ctl *ctl, const struct qrs_health *h);
int reply_sources(const struct ctl *ctl, const struct qrs_sources *s);
int reply_draw(const struct ctl *ctl, const struct draw_row *row);
/* The outcome of a reload and its diff (key: old -> new). */
int reply_reload(const struct ctl *ctl, const struct qrs_reload *r);
/* JSON only: the text of a verdict is the caller's. */
int reply_validate(const struct validate_result *v);

#endif
