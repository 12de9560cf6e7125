/* Strict parsing of command-line values for the qrs tools.  Each
   function prints what is wrong to stderr, as "PROG: OPT: ...", and
   returns -1; 0 on success. */
#ifndef QRS_CLIPARSE_H
#define QRS_CLIPARSE_H

#include <stddef.h>
#include <stdint.h>

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

#endif
