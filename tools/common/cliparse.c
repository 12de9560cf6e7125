/* The command lines of the qrs tools (see cliparse.h): strict parsing of
   values, and the option tables' parser. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cliparse.h"

/* Strict unsigned decimal: the whole string, no sign, no spaces, in
   [min, max].  With suffixes, one of k/K/M/G multiplies by 2^10/2^20/2^30.
   Prints what is wrong, naming the option, and returns -1. */
int
cli_parse_u64(const char *prog, const char *opt, const char *s, uint64_t min,
              uint64_t max, int suffixes, uint64_t *ret)
{
  unsigned long long v;
  uint64_t mult;
  char *end;

  mult = 1;
  if (!isdigit((unsigned char)s[0]))
    goto bad;
  errno = 0;
  v = strtoull(s, &end, 10);
  if (errno == ERANGE)
    goto range;
  if (suffixes && *end) {
    switch (*end) {
    case 'k':
    case 'K':
      mult = UINT64_C(1) << 10;
      break;
    case 'M':
      mult = UINT64_C(1) << 20;
      break;
    case 'G':
      mult = UINT64_C(1) << 30;
      break;
    default:
      goto bad;
    }
    end++;
  }
  if (*end)
    goto bad;
  if (v > max / mult)
    goto range;
  v *= mult;
  if (v < min)
    goto range;
  *ret = v;
  return 0;

bad:
  fprintf(stderr, "%s: %s: '%s' is not %s\n", prog, opt, s,
          suffixes ? "an unsigned number (with an optional k, M or G)" :
          "an unsigned number");
  return -1;
range:
  fprintf(stderr, "%s: %s: '%s' is out of range (%" PRIu64 " to %"
          PRIu64 ")\n", prog, opt, s, min, max);
  return -1;
}

int
cli_parse_i64(const char *prog, const char *opt, const char *s, int64_t min,
              int64_t max, int64_t *ret)
{
  long long v;
  char *end;

  if (!isdigit((unsigned char)s[s[0] == '-']))
    goto bad;
  errno = 0;
  v = strtoll(s, &end, 10);
  if (*end)
    goto bad;
  if (errno == ERANGE || v < min || v > max) {
    fprintf(stderr, "%s: %s: '%s' is out of range (%" PRId64 " to %"
            PRId64 ")\n", prog, opt, s, min, max);
    return -1;
  }
  *ret = v;
  return 0;

bad:
  fprintf(stderr, "%s: %s: '%s' is not a number\n", prog, opt, s);
  return -1;
}

int
cli_parse_double(const char *prog, const char *opt, const char *s,
                 double *ret)
{
  char *end;
  double v;

  errno = 0;
  v = strtod(s, &end);
  if (!*s || *end || errno == ERANGE || !isfinite(v)) {
    fprintf(stderr, "%s: %s: '%s' is not a finite number\n", prog, opt, s);
    return -1;
  }
  *ret = v;
  return 0;
}

static int
hex_value(int c)
{
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

int
cli_parse_hex(const char *prog, const char *opt, const char *s, uint8_t *buf,
              size_t max, size_t *ret_len)
{
  size_t len, i;
  int hi, lo;

  len = strlen(s);
  if (len % 2 || len / 2 > max) {
    fprintf(stderr, "%s: %s: want an even number of hex digits, "
            "at most %zu bytes\n", prog, opt, max);
    return -1;
  }
  for (i = 0; i < len / 2; i++) {
    hi = hex_value((unsigned char)s[2 * i]);
    lo = hex_value((unsigned char)s[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      fprintf(stderr, "%s: %s: '%s' is not hexadecimal\n", prog, opt,
              s);
      return -1;
    }
    buf[i] = (uint8_t)(hi << 4 | lo);
  }
  *ret_len = len / 2;
  return 0;
}


/* getopt_long()'s value for an option without a short letter. */
#define LONG_ONLY 256

static int
takes_arg(const struct cli_opt *o)
{
  return o->type != CLI_OPT_SET && o->type != CLI_OPT_HELP &&
         o->type != CLI_OPT_DONE;
}

/* What the messages call o: label, --name or -key. */
static const char *
opt_label(const struct cli_opt *o, char *buf, size_t size)
{
  if (o->label)
    return o->label;
  if (o->name)
    snprintf(buf, size, "--%s", o->name);
  else
    snprintf(buf, size, "-%c", o->key);
  return buf;
}

static void
num_store(const struct cli_opt *o, double v)
{
  switch (o->val) {
  case CLI_NUM_DOUBLE:
    *(double *)o->field = v;
    break;
  case CLI_NUM_U32:
    *(uint32_t *)o->field = (uint32_t)v;
    break;
  case CLI_NUM_U64:
    *(uint64_t *)o->field = (uint64_t)v;
    break;
  case CLI_NUM_LONG:
    *(long *)o->field = (long)v;
    break;
  }
}

/* Store arg as o's type says; 0, or -1 when it is bad (said). */
static int
opt_set(const struct cli *cli, const struct cli_opt *o, const char *arg)
{
  char buf[64];
  const char *opt;
  double v;

  opt = opt_label(o, buf, sizeof(buf));
  switch (o->type) {
  case CLI_OPT_STRING:
    *(const char **)o->field = arg;
    break;
  case CLI_OPT_SET:
    *(int *)o->field = o->val;
    break;
  case CLI_OPT_U64:
    if (cli_parse_u64(cli->prog, opt, arg, o->min, o->max,
                      o->flags & CLI_SUFFIX, o->field) < 0)
      return -1;
    break;
  case CLI_OPT_I64:
    if (cli_parse_i64(cli->prog, opt, arg, INT64_MIN, INT64_MAX,
                      o->field) < 0)
      return -1;
    break;
  case CLI_OPT_FINITE:
    if (cli_parse_double(cli->prog, opt, arg, o->field) < 0)
      return -1;
    break;
  case CLI_OPT_NUM:
    if (o->num(o, opt, arg, &v) < 0)
      return -1;
    num_store(o, v);
    break;
  case CLI_OPT_INT:
    *(int *)o->field = atoi(arg);
    break;
  case CLI_OPT_U32:
    *(uint32_t *)o->field = (uint32_t)strtoul(arg, NULL, 10);
    break;
  case CLI_OPT_SIZE:
    *(size_t *)o->field = strtoul(arg, NULL, 10);
    break;
  case CLI_OPT_DOUBLE:
    *(double *)o->field = atof(arg);
    break;
  case CLI_OPT_CALL:
    if (o->call(o, opt, arg) < 0)
      return -1;
    break;
  case CLI_OPT_HELP:
  case CLI_OPT_DONE:
    break;
  }
  if (o->seen)
    *o->seen |= o->bit;
  return 0;
}

/* What getopt_long() returns for opts[i]. */
static int
opt_val(const struct cli_opt *opts, size_t i)
{
  return opts[i].key ? opts[i].key : LONG_ONLY + (int)i;
}

int
cli_opts_parse(const struct cli *cli, int argc, char **argv)
{
  const struct cli_opt *opts, *o;
  struct option lo[CLI_OPT_MAX + 1];
  char shorts[3 * CLI_OPT_MAX + 3];
  char buf[64];
  size_t i, n, ns;
  int c;

  opts = cli->opts;
  n = ns = 0;
  if (cli->flags & CLI_IN_ORDER)
    shorts[ns++] = '+';
  if (cli->flags & CLI_QUIET)
    shorts[ns++] = ':';
  for (i = 0; opts[i].name || opts[i].key; i++) {
    if (i == CLI_OPT_MAX) {
      fprintf(stderr, "%s: more than %d options\n", cli->prog, CLI_OPT_MAX);
      return 2;
    }
    if (opts[i].key) {
      shorts[ns++] = (char)opts[i].key;
      if (takes_arg(&opts[i]))
        shorts[ns++] = ':';
    }
    if (opts[i].name) {
      lo[n].name = opts[i].name;
      lo[n].has_arg = takes_arg(&opts[i]) ? required_argument : no_argument;
      lo[n].flag = NULL;
      lo[n].val = opt_val(opts, i);
      n++;
    }
  }
  shorts[ns] = '\0';
  memset(&lo[n], 0, sizeof(lo[n]));

  optind = 0;
  while ((c = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
    for (i = 0; opts[i].name || opts[i].key; i++)
      if (c == opt_val(opts, i))
        break;
    o = &opts[i];
    if (!o->name && !o->key) {
      if (cli->bad)
        cli->bad(cli, c, argv);
      else
        cli->usage(stderr);
      return 2;
    }
    if (o->type == CLI_OPT_HELP) {
      if (cli->help)
        return cli->help(cli);
      cli->usage(stdout);
      return 0;
    }
    if (o->type == CLI_OPT_DONE)
      return o->call(o, opt_label(o, buf, sizeof(buf)), NULL);
    if (opt_set(cli, o, optarg) < 0)
      return 2;
  }
  return -1;
}
