/* Strict parsing of command-line values for the qrs tools (see
   cliparse.h). */
#include <ctype.h>
#include <errno.h>
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

