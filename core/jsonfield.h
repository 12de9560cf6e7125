/* Field tables for json-c: a struct written as a JSON object from one
   row per key, each naming a member (by offset) and how it is written,
   instead of one json_object_object_add() call per key.  qrsd's status
   file (daemon/server/statuspub.c, daemon/persist/statusfile.c) and
   qrsctl's --json output (tools/qrsctl/ctl_reply.c) describe their structs this
   way, each with its own tables.

   A table is an array of struct jsonfield, written in order:

     static const struct jsonfield mon_rows[] = {
       JSONFIELD_ROW("window", U32, struct monitor, n),
       JSONFIELD_ROW("ks", DOUBLE, struct monitor, ks),
       ...
     };
     static const struct jsonfield_table mon_table =
       JSONFIELD_TABLE(mon_rows);

     r = jsonfield_object(&mon_table, mon, &o);

   Rows may nest another table as an object or an array of objects, and
   may depend on an int member (written only when it is set).

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
  JSONFIELD_INT,        /* int */
  JSONFIELD_U32,        /* uint32_t */
  JSONFIELD_I64,        /* int64_t (or a uint64_t written as one) */
  JSONFIELD_U64,        /* uint64_t */
  JSONFIELD_DOUBLE,     /* double, as json-c writes it (17 digits) */
  JSONFIELD_SHORTEST,   /* double, the shortest decimal that reads back
                           as the same value; NaN and infinity: null */
  JSONFIELD_HEX64,      /* uint64_t as a string of 16 hex digits */
  JSONFIELD_NAME,       /* an enum (int) as the string name(value) */
  JSONFIELD_OBJECT,     /* an object: table sub over the struct at the
                           member (offset 0: the same struct) */
  JSONFIELD_ARRAY,      /* an array: one object of sub per element of the
                           member, count elements (a size_t member) */
  JSONFIELD_CUSTOM,     /* add(o, key, base) writes the key, or several
                           keys, or nothing */
};

/* flags */
#define JSONFIELD_NULL_NEG 0x1   /* a negative number is written null */
#define JSONFIELD_NULL_ZERO 0x2  /* 0 is written null */
#define JSONFIELD_IF 0x4         /* written only when the int member at
                                    cond is not 0 */
#define JSONFIELD_UNLESS 0x8     /* written only when it is 0 */
#define JSONFIELD_DEREF 0x10     /* OBJECT, ARRAY: the member points to the
                                    struct(s); an OBJECT's NULL: not
                                    written */
#define JSONFIELD_NONEMPTY 0x20  /* ARRAY: not written when empty */

struct jsonfield_table;

struct jsonfield {
  const char *key;      /* NULL: not written, unless JSONFIELD_CUSTOM (a
                           caller's table may hold rows of its own) */
  enum jsonfield_type type;
  size_t offset;        /* of the member in the struct */
  size_t size;          /* of the member (OBJECT, ARRAY: of an element) */
  unsigned flags;
  size_t cond;          /* JSONFIELD_IF, _UNLESS: offset of the int */
  size_t count;         /* ARRAY: offset of the size_t element count */
  const struct jsonfield_table *sub;            /* OBJECT, ARRAY */
  const char *(*name)(int value);               /* NAME */
  /* CUSTOM: add to o what key means for base; 0 or -ENOMEM */
  int (*add)(struct json_object *o, const char *key, const void *base);
};

/* The rows of one JSON object, n of them, stride bytes apart: a plain
   array of struct jsonfield (JSONFIELD_TABLE()), or a caller's array of
   larger rows that each begin with one (qrsctl's rows carry their text
   too). */
struct jsonfield_table {
  const struct jsonfield *rows;
  size_t n;
  size_t stride;
};

#define JSONFIELD_N(a) (sizeof(a) / sizeof((a)[0]))
#define JSONFIELD_TABLE(a) { (a), JSONFIELD_N(a), sizeof((a)[0]) }

#define JSONFIELD_MEMBER(st, m) \
  .offset = offsetof(st, m), .size = sizeof(((st *)0)->m)

/* Member m of struct type st, written as type t (STR, U64 ...) under key
   k; _F with flags; _IF only when the int member c is not 0, _UNLESS
   only when it is. */
#define JSONFIELD_ROW_F(k, t, st, m, fl) \
  { .key = (k), .type = JSONFIELD_##t, JSONFIELD_MEMBER(st, m), \
    .flags = (fl) }
#define JSONFIELD_ROW(k, t, st, m) JSONFIELD_ROW_F(k, t, st, m, 0)
#define JSONFIELD_ROW_IF(k, t, st, m, c) \
  { .key = (k), .type = JSONFIELD_##t, JSONFIELD_MEMBER(st, m), \
    .flags = JSONFIELD_IF, .cond = offsetof(st, c) }
#define JSONFIELD_ROW_UNLESS(k, t, st, m, c) \
  { .key = (k), .type = JSONFIELD_##t, JSONFIELD_MEMBER(st, m), \
    .flags = JSONFIELD_UNLESS, .cond = offsetof(st, c) }
/* Member m (an enum) as the string fn(m). */
#define JSONFIELD_NAME_ROW(k, st, m, fn) \
  { .key = (k), .type = JSONFIELD_NAME, JSONFIELD_MEMBER(st, m), \
    .name = (fn) }
/* The object of table t over the same struct; _IF only when the int
   member c of struct st is not 0. */
#define JSONFIELD_OBJECT_ROW(k, t) \
  { .key = (k), .type = JSONFIELD_OBJECT, .sub = (t) }
#define JSONFIELD_OBJECT_IF(k, t, st, c) \
  { .key = (k), .type = JSONFIELD_OBJECT, .sub = (t), \
    .flags = JSONFIELD_IF, .cond = offsetof(st, c) }
/* The object of table t over the struct member m points to (NULL: none). */
#define JSONFIELD_POINTER_ROW(k, st, m, t) \
  { .key = (k), .type = JSONFIELD_OBJECT, .offset = offsetof(st, m), \
    .sub = (t), .flags = JSONFIELD_DEREF }
/* The array of table t's objects over the array member m of n elements
   (n a size_t member); _POINTER_ when m points to the first element. */
#define JSONFIELD_ARRAY_ROW_F(k, st, m, n, t, fl) \
  { .key = (k), .type = JSONFIELD_ARRAY, .offset = offsetof(st, m), \
    .size = sizeof(((st *)0)->m[0]), .count = offsetof(st, n), .sub = (t), \
    .flags = (fl) }
#define JSONFIELD_ARRAY_ROW(k, st, m, n, t) \
  JSONFIELD_ARRAY_ROW_F(k, st, m, n, t, 0)
#define JSONFIELD_POINTER_ARRAY_ROW(k, st, m, n, t) \
  JSONFIELD_ARRAY_ROW_F(k, st, m, n, t, JSONFIELD_DEREF)
/* Whatever fn(o, k, base) adds. */
#define JSONFIELD_CUSTOM_ROW(k, fn) \
  { .key = (k), .type = JSONFIELD_CUSTOM, .add = (fn) }

/* Add f's key and value to the object o, or nothing when its condition
   says so (for JSONFIELD_CUSTOM, what f->add adds). */
int jsonfield_add(struct json_object *o, const struct jsonfield *f,
                  const void *base);

/* Add every row of the table, in order; stops at the first error. */
int jsonfield_add_all(struct json_object *o, const struct jsonfield_table *t,
                      const void *base);

/* A new object of the table's keys over base in *ret (free it with
   json_object_put()). */
int jsonfield_object(const struct jsonfield_table *t, const void *base,
                     struct json_object **ret);

/* Add key: the object of the table over base, to o. */
int jsonfield_add_object(struct json_object *o, const char *key,
                         const struct jsonfield_table *t, const void *base);

/* v as JSONFIELD_SHORTEST writes it (NULL: NaN, infinity, or no memory;
   tell them apart with isfinite()). */
struct json_object *jsonfield_shortest(double v);

#endif
