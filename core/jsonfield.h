/* Field tables for json-c: a struct written as a JSON object from one
   row per key, each naming a member (by offset) and how it is written,
   instead of one json_object_object_add() call per key.  qrsd's status
   file (daemon/server/statuspub.c, daemon/persist/statusfile.c) and
   qrsctl's --json output (tools/ctl_reply.c) describe their structs this
   way, each with its own tables.

   A table is an array of struct jsonfield, written in order:

     static const struct jsonfield mon_fields[] = {
       JSONFIELD_ROW("window", U32, struct monitor, n),
       JSONFIELD_ROW("ks", DOUBLE, struct monitor, ks),
       ...
     };
     o = jsonfield_object(mon_fields, JSONFIELD_N(mon_fields), mon);

   Every function returns 0 or a negative errno: -ENOMEM, or -EINVAL for
   a row whose size does not fit its type (a table written wrong).  No
   global state; safe on any thread. */
#ifndef QRS_CORE_JSONFIELD_H
#define QRS_CORE_JSONFIELD_H

#include <stddef.h>

#include <json-c/json.h>

enum jsonfield_type {
  JSONFIELD_STR,        /* char[size]: up to its first NUL */
  JSONFIELD_CSTR,       /* const char *, not NULL */
  JSONFIELD_BOOL,       /* int: true when not 0 */
  JSONFIELD_U32,        /* uint32_t */
  JSONFIELD_I64,        /* int64_t (or a uint64_t written as one) */
  JSONFIELD_U64,        /* uint64_t */
  JSONFIELD_DOUBLE,     /* double, as json-c writes it (17 digits) */
  JSONFIELD_SHORTEST,   /* double, the shortest decimal that reads back
                           as the same value; NaN and infinity: null */
  JSONFIELD_HEX64,      /* uint64_t as a string of 16 hex digits */
  JSONFIELD_NAME,       /* an enum (int) as the string name(value) */
  JSONFIELD_CUSTOM,     /* add(o, key, base) writes the key, or several
                           keys, or nothing */
};

/* flags */
#define JSONFIELD_NULL_NEG 0x1   /* a negative number is written null */
#define JSONFIELD_NULL_ZERO 0x2  /* 0 is written null */

struct jsonfield {
  const char *key;      /* NULL: not written, unless JSONFIELD_CUSTOM (a
                           caller's table may hold rows of its own) */
  enum jsonfield_type type;
  size_t offset;        /* of the member in the struct */
  size_t size;          /* of the member */
  unsigned flags;
  const char *(*name)(int value);               /* JSONFIELD_NAME */
  /* JSONFIELD_CUSTOM: add to o what key means for base; 0 or -ENOMEM */
  int (*add)(struct json_object *o, const char *key, const void *base);
};

#define JSONFIELD_N(table) (sizeof(table) / sizeof((table)[0]))

/* A row for member m of struct type st, written as type t (STR, U64 ...)
   under key k; _F with flags. */
#define JSONFIELD_ROW_F(k, t, st, m, fl) \
  { (k), JSONFIELD_##t, offsetof(st, m), sizeof(((st *)0)->m), (fl), \
    NULL, NULL }
#define JSONFIELD_ROW(k, t, st, m) JSONFIELD_ROW_F(k, t, st, m, 0)
/* Member m (an enum) as the string fn(m). */
#define JSONFIELD_NAME_ROW(k, st, m, fn) \
  { (k), JSONFIELD_NAME, offsetof(st, m), sizeof(((st *)0)->m), 0, \
    (fn), NULL }
/* Whatever fn(o, k, base) adds. */
#define JSONFIELD_CUSTOM_ROW(k, fn) \
  { (k), JSONFIELD_CUSTOM, 0, 0, 0, NULL, (fn) }

/* The JSON value of f's member of base: a new object in *ret, or NULL
   for a JSON null.  Not for JSONFIELD_CUSTOM (-EINVAL). */
int jsonfield_value(const struct jsonfield *f, const void *base,
                    struct json_object **ret);

/* Add f's key and value (or, for JSONFIELD_CUSTOM, what f->add adds) to
   the object o. */
int jsonfield_add(struct json_object *o, const struct jsonfield *f,
                  const void *base);

/* Add every row of the table, in order; stops at the first error. */
int jsonfield_add_all(struct json_object *o, const struct jsonfield *fields,
                      size_t n, const void *base);

/* A new object of the table's keys over base in *ret (free it with
   json_object_put()). */
int jsonfield_object(const struct jsonfield *fields, size_t n,
                     const void *base, struct json_object **ret);

/* Add key: [ ... ] to o, one object of the table per element of the
   array at base (count elements, stride bytes apart). */
int jsonfield_add_array(struct json_object *o, const char *key,
                        const struct jsonfield *fields, size_t n,
                        const void *base, size_t count, size_t stride);

/* v as JSONFIELD_SHORTEST writes it (NULL: NaN, infinity, or no memory;
   tell them apart with isfinite()). */
struct json_object *jsonfield_shortest(double v);

#endif
