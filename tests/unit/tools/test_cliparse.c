/* The tools' option tables (tools/common/cliparse.c): each type stores what its
   row says, the marks, -h and DONE, bad options and values, and the
   getopt modes. */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "cliparse.h"

static int usage_calls;
static FILE *usage_file;
static int bad_calls;
static int bad_c;

static void
usage(FILE *f)
{
  usage_calls++;
  usage_file = f;
}

static void
bad(const struct cli *cli, int c, char **argv)
{
  (void)cli;
  (void)argv;
  bad_calls++;
  bad_c = c;
}

static int
help(const struct cli *cli)
{
  return *(const int *)cli->ctx;
}

static int
done(const struct cli_opt *o, const char *opt, const char *arg)
{
  (void)opt;
  cr_assert_null(arg);
  return o->val;
}

/* A number in [min, max], written with a leading '#'. */
static int
hash_num(const struct cli_opt *o, const char *opt, const char *arg,
         double *ret)
{
  (void)opt;
  if (arg[0] != '#')
    return -1;
  *ret = (double)strtoull(arg + 1, NULL, 10);
  if (*ret < (double)o->min || *ret > (double)o->max)
    return -1;
  return 0;
}

static int
upper(const struct cli_opt *o, const char *opt, const char *arg)
{
  cr_assert_str_eq(opt, "--upper");
  if (strcmp(arg, "UP"))
    return -1;
  *(int *)o->field = 1;
  return 0;
}

/* The values of one table, with every type once. */
struct vals {
  const char *s;
  int flag, i, up;
  uint32_t u32, n32;
  size_t size;
  double d, fin, nd;
  uint64_t u64, n64;
  int64_t i64;
  long nl;
  unsigned seen;
};

static int
parse(struct vals *v, unsigned flags, int argc, char **argv)
{
  const struct cli_opt opts[] = {
    { .name = "string", .key = 's', .type = CLI_OPT_STRING, .field = &v->s },
    { .name = "flag", .key = 'f', .type = CLI_OPT_SET, .field = &v->flag,
      .val = 7, .seen = &v->seen, .bit = 0x1 },
    { .key = 'i', .type = CLI_OPT_INT, .field = &v->i },
    { .name = "u32", .type = CLI_OPT_U32, .field = &v->u32 },
    { .name = "size", .type = CLI_OPT_SIZE, .field = &v->size },
    { .name = "double", .type = CLI_OPT_DOUBLE, .field = &v->d },
    { .name = "u64", .key = 'n', .type = CLI_OPT_U64, .field = &v->u64,
      .min = 1, .max = 4096, .flags = CLI_SUFFIX, .seen = &v->seen,
      .bit = 0x2 },
    { .name = "i64", .type = CLI_OPT_I64, .field = &v->i64 },
    { .name = "finite", .type = CLI_OPT_FINITE, .field = &v->fin },
    { .name = "n32", .type = CLI_OPT_NUM, .field = &v->n32,
      .val = CLI_NUM_U32, .num = hash_num, .max = 100 },
    { .name = "n64", .type = CLI_OPT_NUM, .field = &v->n64,
      .val = CLI_NUM_U64, .num = hash_num, .max = 100 },
    { .name = "nd", .type = CLI_OPT_NUM, .field = &v->nd,
      .val = CLI_NUM_DOUBLE, .num = hash_num, .max = 100 },
    { .name = "nl", .type = CLI_OPT_NUM, .field = &v->nl,
      .val = CLI_NUM_LONG, .num = hash_num, .max = 100 },
    { .name = "upper", .type = CLI_OPT_CALL, .field = &v->up,
      .call = upper },
    { .name = "help", .key = 'h', .type = CLI_OPT_HELP },
    { .name = "version", .key = 'V', .type = CLI_OPT_DONE, .val = 5,
      .call = done },
    { 0 },
  };
  const struct cli cli = {
    .prog = "test", .flags = flags, .opts = opts, .usage = usage,
    .bad = flags & CLI_QUIET ? bad : NULL,
  };

  usage_calls = bad_calls = 0;
  usage_file = NULL;
  bad_c = 0;
  opterr = 0;
  return cli_opts_parse(&cli, argc, argv);
}

#define ARGV(...) (char *[]){ "prog", __VA_ARGS__, NULL }
#define ARGC(...) ((int)(sizeof((char *[]){ "prog", __VA_ARGS__ }) / \
                         sizeof(char *)))
#define PARSE(v, flags, ...) \
  parse((v), (flags), ARGC(__VA_ARGS__), ARGV(__VA_ARGS__))

Test(cliparse, every_type_stores_its_value)
{
  struct vals v;
  int r;

  memset(&v, 0, sizeof(v));
  r = PARSE(&v, 0, "-s", "str", "--flag", "-i", "-3", "--u32", "42",
            "--size", "43", "--double", "0.5", "-n", "1k", "--i64",
            "-9000000000", "--finite", "2.5", "--n32", "#10", "--n64", "#11",
            "--nd", "#12", "--nl", "#13", "--upper", "UP");
  cr_assert_eq(r, -1);
  cr_assert_str_eq(v.s, "str");
  cr_assert_eq(v.flag, 7);
  cr_assert_eq(v.i, -3);
  cr_assert_eq(v.u32, 42);
  cr_assert_eq(v.size, 43);
  cr_assert_eq(v.d, 0.5);
  cr_assert_eq(v.u64, 1024);
  cr_assert_eq(v.i64, INT64_C(-9000000000));
  cr_assert_eq(v.fin, 2.5);
  cr_assert_eq(v.n32, 10);
  cr_assert_eq(v.n64, 11);
  cr_assert_eq(v.nd, 12.0);
  cr_assert_eq(v.nl, 13);
  cr_assert_eq(v.up, 1);
}

Test(cliparse, u64_checks_its_range_and_suffix)
{
  struct vals v;

  memset(&v, 0, sizeof(v));
  cr_assert_eq(PARSE(&v, 0, "--u64", "4096"), -1);
  cr_assert_eq(v.u64, 4096);
  cr_assert_eq(PARSE(&v, 0, "--u64", "4k"), -1);
  cr_assert_eq(v.u64, 4096);
  cr_assert_eq(PARSE(&v, 0, "--u64", "5k"), 2);     /* 5120 > 4096 */
  cr_assert_eq(PARSE(&v, 0, "--u64", "0"), 2);
  cr_assert_eq(PARSE(&v, 0, "--u64", "1x"), 2);
  cr_assert_eq(v.u64, 4096);                          /* kept */
  cr_assert_eq(usage_calls, 0);                       /* said, no usage */
}

Test(cliparse, marks_only_the_options_given)
{
  struct vals v;

  memset(&v, 0, sizeof(v));
  cr_assert_eq(PARSE(&v, 0, "-n", "5"), -1);
  cr_assert_eq(v.seen, 0x2);
  cr_assert_eq(PARSE(&v, 0, "-f"), -1);
  cr_assert_eq(v.seen, 0x3);
}

Test(cliparse, bad_values_stop_with_2)
{
  struct vals v;

  memset(&v, 0, sizeof(v));
  cr_assert_eq(PARSE(&v, 0, "--n32", "10"), 2);       /* no '#' */
  cr_assert_eq(PARSE(&v, 0, "--n32", "#101"), 2);     /* above max */
  cr_assert_eq(PARSE(&v, 0, "--upper", "down"), 2);
  cr_assert_eq(PARSE(&v, 0, "--finite", "inf"), 2);
  cr_assert_eq(PARSE(&v, 0, "--i64", "1x"), 2);
}

Test(cliparse, help_prints_usage_to_stdout)
{
  struct vals v;

  memset(&v, 0, sizeof(v));
  cr_assert_eq(PARSE(&v, 0, "-n", "5", "--help", "-n", "x"), 0);
  cr_assert_eq(usage_calls, 1);
  cr_assert_eq(usage_file, stdout);
}

Test(cliparse, help_callback_gives_the_status)
{
  const struct cli_opt opts[] = {
    { .name = "help", .key = 'h', .type = CLI_OPT_HELP },
    { 0 },
  };
  int status;
  const struct cli cli = {
    .prog = "test", .opts = opts, .help = help, .ctx = &status,
  };

  status = 3;
  cr_assert_eq(cli_opts_parse(&cli, 2, ARGV("-h")), 3);
}

Test(cliparse, done_returns_its_call)
{
  struct vals v;

  memset(&v, 0, sizeof(v));
  cr_assert_eq(PARSE(&v, 0, "-V"), 5);
  cr_assert_eq(PARSE(&v, 0, "--version"), 5);
}

Test(cliparse, unknown_option_prints_usage_to_stderr)
{
  struct vals v;

  memset(&v, 0, sizeof(v));
  cr_assert_eq(PARSE(&v, 0, "--bogus"), 2);
  cr_assert_eq(usage_calls, 1);
  cr_assert_eq(usage_file, stderr);
  cr_assert_eq(PARSE(&v, 0, "-s"), 2);                /* no argument */
  cr_assert_eq(usage_file, stderr);
}

Test(cliparse, quiet_tells_bad_what_getopt_saw)
{
  struct vals v;

  memset(&v, 0, sizeof(v));
  cr_assert_eq(PARSE(&v, CLI_QUIET, "-s"), 2);
  cr_assert_eq(bad_calls, 1);
  cr_assert_eq(bad_c, ':');
  cr_assert_eq(PARSE(&v, CLI_QUIET, "-x"), 2);
  cr_assert_eq(bad_c, '?');
  cr_assert_eq(usage_calls, 0);
}

Test(cliparse, operands_follow_the_options)
{
  struct vals v;
  char **argv;

  memset(&v, 0, sizeof(v));
  argv = ARGV("one", "-f", "two");
  cr_assert_eq(parse(&v, 0, 4, argv), -1);            /* permuted */
  cr_assert_eq(v.flag, 7);
  cr_assert_eq(optind, 2);
  cr_assert_str_eq(argv[optind], "one");

  memset(&v, 0, sizeof(v));
  argv = ARGV("one", "-f", "two");
  cr_assert_eq(parse(&v, CLI_IN_ORDER, 4, argv), -1); /* stops at one */
  cr_assert_eq(v.flag, 0);
  cr_assert_eq(optind, 1);
}

Test(cliparse, long_names_may_be_abbreviated)
{
  struct vals v;

  memset(&v, 0, sizeof(v));
  cr_assert_eq(PARSE(&v, 0, "--str", "x", "--fl"), -1);
  cr_assert_str_eq(v.s, "x");
  cr_assert_eq(v.flag, 7);
}
