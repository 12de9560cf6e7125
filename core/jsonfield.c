/* Field tables for json-c; see jsonfield.h. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonfield.h"

struct json_object *
jsonfield_shortest(double v)
{
  char buf[32];
  int prec;

  /* json-c alone prints 17 digits: 0.0815 as 0.081500000000000003. */
  if (!isfinite(v))
    return NULL;
  for (prec = 15; prec < 17; prec++) {
    snprintf(buf, sizeof(buf), "%.*g", prec, v);
    if (strtod(buf, NULL) == v)
      break;
  }
  if (prec == 17)
    snprintf(buf, sizeof(buf), "%.17g", v);
  return json_object_new_double_s(v, buf);
}

/* The size a member of type t must have (0: any). */
static size_t
type_size(enum jsonfield_type t)
{
  switch (t) {
  case JSONFIELD_CSTR:
    return sizeof(const char *);
  case JSONFIELD_BOOL:
  case JSONFIELD_INT:
  case JSONFIELD_NAME:
    return sizeof(int);
  case JSONFIELD_U32:
    return sizeof(uint32_t);
  case JSONFIELD_I64:
  case JSONFIELD_U64:
  case JSONFIELD_HEX64:
    return sizeof(uint64_t);
  case JSONFIELD_DOUBLE:
  case JSONFIELD_SHORTEST:
    return sizeof(double);
  default:
    return 0;
  }
}

/* A leaf row's member, read as its type. */
union scalar {
  const char *s;
  int i;
  uint32_t u32;
  int64_t i64;
  uint64_t u64;
  double d;
};

/* The member of leaf row f at p (its size checked against its type). */
static union scalar
load(const struct jsonfield *f, const void *p)
{
  union scalar v;

  memset(&v, 0, sizeof(v));
  memcpy(&v, p, type_size(f->type));
  return v;
}

/* An INT, U32 or I64 member, widened. */
static int64_t
integer(const struct jsonfield *f, union scalar v)
{
  if (f->type == JSONFIELD_INT)
    return v.i;
  if (f->type == JSONFIELD_U32)
    return v.u32;
  return v.i64;
}

/* A number as a double, for the NULL_* flags. */
static double
number(const struct jsonfield *f, union scalar v)
{
  switch (f->type) {
  case JSONFIELD_INT:
  case JSONFIELD_U32:
  case JSONFIELD_I64:
    return (double)integer(f, v);
  case JSONFIELD_U64:
  case JSONFIELD_HEX64:
    return (double)v.u64;
  case JSONFIELD_DOUBLE:
  case JSONFIELD_SHORTEST:
    return v.d;
  default:
    return 1;
  }
}

/* The JSON value of a leaf row: a new object in *ret, or NULL for a JSON
   null. */
static int
leaf_value(const struct jsonfield *f, const void *base,
           struct json_object **ret)
{
  struct json_object *v;
  union scalar u;
  const char *p;
  char hex[17];
  double d;

  if (f->type >= JSONFIELD_OBJECT)
    return -EINVAL;
  if (type_size(f->type) && f->size != type_size(f->type))
    return -EINVAL;
  if (f->type == JSONFIELD_NAME && !f->name)
    return -EINVAL;
  p = (const char *)base + f->offset;
  u = load(f, p);
  d = number(f, u);
  if (((f->flags & JSONFIELD_NULL_NEG) && d < 0) ||
      ((f->flags & JSONFIELD_NULL_ZERO) && d == 0)) {
    *ret = NULL;
    return 0;
  }

  switch (f->type) {
  case JSONFIELD_STR:
    v = json_object_new_string_len(p, (int)strnlen(p, f->size));
    break;
  case JSONFIELD_CSTR:
    v = json_object_new_string(u.s);
    break;
  case JSONFIELD_BOOL:
    v = json_object_new_boolean(u.i);
    break;
  case JSONFIELD_INT:
  case JSONFIELD_U32:
  case JSONFIELD_I64:
    v = json_object_new_int64(integer(f, u));
    break;
  case JSONFIELD_NAME:
    v = json_object_new_string(f->name(u.i));
    break;
  case JSONFIELD_U64:
    v = json_object_new_uint64(u.u64);
    break;
  case JSONFIELD_HEX64:
    snprintf(hex, sizeof(hex), "%016" PRIx64, u.u64);
    v = json_object_new_string(hex);
    break;
  case JSONFIELD_DOUBLE:
    v = json_object_new_double(d);
    break;
  case JSONFIELD_SHORTEST:
    if (!isfinite(d)) {
      *ret = NULL;
      return 0;
    }
    v = jsonfield_shortest(d);
    break;
  default:
    return -EINVAL;
  }
  if (!v)
    return -ENOMEM;
  *ret = v;
  return 0;
}

/* key: o's new member v (taken over, also on failure). */
static int
add_value(struct json_object *o, const char *key, struct json_object *v)
{
  if (json_object_object_add(o, key, v) < 0) {
    json_object_put(v);
    return -ENOMEM;
  }
  return 0;
}

/* Is f written for base (its JSONFIELD_IF or _UNLESS)? */
static int
written(const struct jsonfield *f, const void *base)
{
  int v;

  if (!(f->flags & (JSONFIELD_IF | JSONFIELD_UNLESS)))
    return 1;
  memcpy(&v, (const char *)base + f->cond, sizeof(v));
  return (f->flags & JSONFIELD_IF) ? v != 0 : v == 0;
}

/* The struct(s) an OBJECT or ARRAY row stands for. */
static const void *
member_of(const struct jsonfield *f, const void *base)
{
  const void *p;

  if (!(f->flags & JSONFIELD_DEREF))
    return (const char *)base + f->offset;
  memcpy(&p, (const char *)base + f->offset, sizeof(p));
  return p;
}

static int
add_array(struct json_object *o, const struct jsonfield *f,
          const void *base)
{
  struct json_object *a, *e;
  const char *elem;
  size_t i, n;
  int r;

  memcpy(&n, (const char *)base + f->count, sizeof(n));
  if (!n && (f->flags & JSONFIELD_NONEMPTY))
    return 0;
  elem = member_of(f, base);
  a = json_object_new_array();
  if (!a)
    return -ENOMEM;
  r = add_value(o, f->key, a);
  if (r < 0)
    return r;
  for (i = 0; i < n; i++) {
    r = jsonfield_object(f->sub, elem + i * f->size, &e);
    if (r < 0)
      return r;
    if (json_object_array_add(a, e) < 0) {
      json_object_put(e);
      return -ENOMEM;
    }
  }
  return 0;
}

int
jsonfield_add(struct json_object *o, const struct jsonfield *f,
              const void *base)
{
  struct json_object *v;
  const void *p;
  int r;

  if (!written(f, base))
    return 0;
  switch (f->type) {
  case JSONFIELD_CUSTOM:
    return f->add ? f->add(o, f->key, base) : -EINVAL;
  case JSONFIELD_OBJECT:
    p = member_of(f, base);
    if (!f->key || !p)
      return 0;
    return jsonfield_add_object(o, f->key, f->sub, p);
  case JSONFIELD_ARRAY:
    if (!f->key)
      return 0;
    return add_array(o, f, base);
  default:
    if (!f->key)
      return 0;
    r = leaf_value(f, base, &v);
    if (r < 0)
      return r;
    return add_value(o, f->key, v);
  }
}

int
jsonfield_add_all(struct json_object *o, const struct jsonfield_table *t,
                  const void *base)
{
  const struct jsonfield *f;
  size_t i;
  int r;

  for (i = 0; i < t->n; i++) {
    f = (const struct jsonfield *)((const char *)t->rows + i * t->stride);
    r = jsonfield_add(o, f, base);
    if (r < 0)
      return r;
  }
  return 0;
}

int
jsonfield_object(const struct jsonfield_table *t, const void *base,
                 struct json_object **ret)
{
  struct json_object *o;
  int r;

  o = json_object_new_object();
  if (!o)
    return -ENOMEM;
  r = jsonfield_add_all(o, t, base);
  if (r < 0) {
    json_object_put(o);
    return r;
  }
  *ret = o;
  return 0;
}

int
jsonfield_add_object(struct json_object *o, const char *key,
                     const struct jsonfield_table *t, const void *base)
{
  struct json_object *v;
  int r;

  r = jsonfield_object(t, base, &v);
  if (r < 0)
    return r;
  return add_value(o, key, v);
}
