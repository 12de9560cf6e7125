/* qrs-audit's record reader (audit_json.cpp): the members of one libqrs
   record line that the checks need, read with simdjson's DOM parser
   (the whole line validated, as strictly as json-c: RFC 8259 and UTF-8;
   many times faster than building json-c's tree, which bounded the
   audit's throughput).  C callers; the C++ stays in the one file. */
#ifndef QRS_AUDIT_JSON_H
#define QRS_AUDIT_JSON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes past a line's end that aj_parse() may read (simdjson's
   SIMDJSON_PADDING; audit_json.cpp checks they agree). */
#define AJ_PADDING 64

/* The members read, by name. */
enum aj_member {
  AJ_U_VALUE = 0, AJ_CDF_LO, AJ_CDF_HI, AJ_GREEDY, AJ_FALLBACK,
  AJ_UNJOURNALLED, AJ_SOURCE, AJ_JOURNAL_SEQ, AJ_RECEIVED, AJ_GENERATED,
  AJ_SENT, AJ_NONCE, AJ_STEP, AJ_TOKEN, AJ_TIMESTAMP, AJ_Z, AJ_MEAN,
  AJ_CONFIG_HASH, AJ_EMITTED, AJ_EMITTED_TOKEN, AJ_TOKEN_PROB,
  AJ_DEVICE_SELECTION, AJ_N_MEMBERS,
};

enum aj_kind {
  AJ_ABSENT = 0,                /* no such member */
  AJ_NULL, AJ_BOOL,
  AJ_INT,                       /* fits int64: i (and d) */
  AJ_UINT,                      /* > INT64_MAX: u (and d) */
  AJ_DOUBLE,                    /* a number written with . or e: d */
  AJ_STRING,                    /* s (at most AJ_STRING_MAX bytes kept) */
  AJ_OTHER,                     /* an array or an object */
};

#define AJ_STRING_MAX 71

struct aj_value {
  enum aj_kind kind;
  int b;
  int64_t i;
  uint64_t u;
  double d;
  size_t len;                   /* of s */
  char s[AJ_STRING_MAX + 1];    /* NUL-ended, cut at AJ_STRING_MAX */
};

struct aj_parser;

/* NULL when out of memory. */
struct aj_parser *aj_parser_new(void);
void aj_parser_free(struct aj_parser *p);

/* Parse the len bytes at line (followed by AJ_PADDING readable bytes) as
   one JSON text and read its members into v (a member named twice: the
   last, as json-c).  0; 1 when the text is JSON but not an object; -1
   when it is not JSON (err says why). */
int aj_parse(struct aj_parser *p, const char *line, size_t len,
             struct aj_value v[AJ_N_MEMBERS], char *err, size_t errlen);

/* Only simdjson's parse of the len bytes at line (padded as for
   aj_parse()), nothing read from it: the floor of qrs-bench journal's
   audit figure.  0, or -1 when it is not JSON. */
int aj_parse_only(struct aj_parser *p, const char *line, size_t len);

/* The number (strtod()'s value, correctly rounded) or the hexadecimal
   integer (no sign, no 0x) written in [s, end), all of it: 0, else -1.
   std::from_chars: several times strtod()/strtoull(), no locale. */
int aj_number(const char *s, const char *end, double *v);
int aj_hex64(const char *s, const char *end, uint64_t *v);

#ifdef __cplusplus
}
#endif

#endif
