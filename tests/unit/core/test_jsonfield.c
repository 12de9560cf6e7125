/* Field tables to json-c objects (core/jsonfield.c): each type, the
   null flags, custom rows, conditions, nested objects and arrays, rows
   larger than struct jsonfield, and tables written wrong. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "jsonfield.h"

enum colour { RED, GREEN };

struct rec {
  char name[8];
  const char *kind;
  int on;
  int count;
  uint32_t small;
  int64_t signed_;
  uint64_t big;
  double plain;
  double shortest;
  uint64_t nonce;
  enum colour colour;
  double entropy;
  uint64_t stamp;
};

static const char *
colour_name(int c)
{
  return c == GREEN ? "green" : "red";
}

static int
add_two(struct json_object *o, const char *key, const void *base)
{
  const struct rec *r = base;

  (void)key;
  json_object_object_add(o, "a", json_object_new_int64(r->small));
  json_object_object_add(o, "b", json_object_new_int64(r->small * 2));
  return 0;
}

static const struct jsonfield rec_fields[] = {
  JSONFIELD_ROW("name", STR, struct rec, name),
  JSONFIELD_ROW("kind", CSTR, struct rec, kind),
  JSONFIELD_ROW("on", BOOL, struct rec, on),
  JSONFIELD_ROW("count", INT, struct rec, count),
  JSONFIELD_ROW("small", U32, struct rec, small),
  JSONFIELD_ROW("signed", I64, struct rec, signed_),
  JSONFIELD_ROW("big", U64, struct rec, big),
  JSONFIELD_ROW("plain", DOUBLE, struct rec, plain),
  JSONFIELD_ROW("shortest", SHORTEST, struct rec, shortest),
  JSONFIELD_ROW_F("nonce", HEX64, struct rec, nonce, JSONFIELD_NULL_ZERO),
  JSONFIELD_NAME_ROW("colour", struct rec, colour, colour_name),
  JSONFIELD_ROW_F("entropy", SHORTEST, struct rec, entropy,
                  JSONFIELD_NULL_NEG),
  JSONFIELD_ROW_F("stamp", U64, struct rec, stamp, JSONFIELD_NULL_ZERO),
  JSONFIELD_ROW(NULL, U64, struct rec, big),    /* not written */
  JSONFIELD_CUSTOM_ROW(NULL, add_two),
};

static const struct jsonfield_table rec_table = JSONFIELD_TABLE(rec_fields);

static char *
text(const struct rec *r)
{
  struct json_object *o;
  char *s;

  cr_assert_eq(jsonfield_object(&rec_table, r, &o), 0);
  s = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
  json_object_put(o);
  return s;
}

Test(jsonfield, writes_every_type_in_table_order)
{
  struct rec r;
  char *s;

  memset(&r, 0, sizeof(r));
  memcpy(r.name, "full1234", 8);              /* no NUL: 8 bytes */
  r.kind = "mock";
  r.on = 1;
  r.count = -2;
  r.small = 4000000000u;
  r.signed_ = -5;
  r.big = UINT64_MAX;
  r.plain = 0.0815;
  r.shortest = 0.0815;
  r.nonce = 0xab;
  r.colour = GREEN;
  r.entropy = 7.5;
  r.stamp = 3;
  s = text(&r);
  cr_assert_str_eq(s, "{\"name\":\"full1234\",\"kind\":\"mock\",\"on\":true,"
                   "\"count\":-2,\"small\":4000000000,\"signed\":-5,"
                   "\"big\":18446744073709551615,"
                   "\"plain\":0.081500000000000003,\"shortest\":0.0815,"
                   "\"nonce\":\"00000000000000ab\",\"colour\":\"green\","
                   "\"entropy\":7.5,\"stamp\":3,\"a\":4000000000,"
                   "\"b\":3705032704}");
  free(s);
}

Test(jsonfield, null_flags_and_non_finite_doubles_write_null)
{
  struct rec r;
  char *s;

  memset(&r, 0, sizeof(r));
  r.kind = "";
  r.shortest = NAN;
  r.entropy = -1;
  s = text(&r);
  cr_assert(strstr(s, "\"shortest\":null"), "%s", s);
  cr_assert(strstr(s, "\"nonce\":null"), "%s", s);
  cr_assert(strstr(s, "\"entropy\":null"), "%s", s);
  cr_assert(strstr(s, "\"stamp\":null"), "%s", s);
  cr_assert(strstr(s, "\"colour\":\"red\""), "%s", s);
  free(s);
}

Test(jsonfield, a_row_that_does_not_fit_its_member_is_refused)
{
  static const struct jsonfield wrong[] = {
    JSONFIELD_ROW("small", U64, struct rec, small),
  };
  static const struct jsonfield no_add[] = {
    { .key = "x", .type = JSONFIELD_CUSTOM },
  };
  static const struct jsonfield_table wrong_table = JSONFIELD_TABLE(wrong);
  static const struct jsonfield_table no_add_table = JSONFIELD_TABLE(no_add);
  struct json_object *o;
  struct rec r;

  memset(&r, 0, sizeof(r));
  cr_assert_eq(jsonfield_object(&wrong_table, &r, &o), -EINVAL);
  cr_assert_eq(jsonfield_object(&no_add_table, &r, &o), -EINVAL);
}

struct item {
  uint32_t v;
};

struct holder {
  int has_extra;
  uint32_t extra;
  struct item inline_items[3];
  size_t n_inline;
  const struct item *items;
  size_t n_items;
  const struct item *one;
};

static const struct jsonfield item_rows[] = {
  JSONFIELD_ROW("v", U32, struct item, v),
};

static const struct jsonfield_table item_table = JSONFIELD_TABLE(item_rows);

static const struct jsonfield holder_rows[] = {
  JSONFIELD_ROW_IF("extra", U32, struct holder, extra, has_extra),
  JSONFIELD_ROW_UNLESS("no_extra", BOOL, struct holder, has_extra,
                       has_extra),
  JSONFIELD_ARRAY_ROW("inline", struct holder, inline_items, n_inline,
                      &item_table),
  JSONFIELD_POINTER_ARRAY_ROW("items", struct holder, items, n_items,
                              &item_table),
  JSONFIELD_ARRAY_ROW_F("nonempty", struct holder, inline_items, n_items,
                        &item_table, JSONFIELD_NONEMPTY),
  JSONFIELD_POINTER_ROW("one", struct holder, one, &item_table),
  JSONFIELD_OBJECT_IF("same", &item_table, struct holder, has_extra),
};

static const struct jsonfield_table holder_table =
  JSONFIELD_TABLE(holder_rows);

static void
assert_holder(const struct holder *h, const char *want)
{
  struct json_object *o;

  cr_assert_eq(jsonfield_object(&holder_table, h, &o), 0);
  cr_assert_str_eq(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN),
                   want);
  json_object_put(o);
}

Test(jsonfield, conditions_objects_and_arrays)
{
  static const struct item items[2] = { { 7 }, { 8 } };
  struct holder h;

  memset(&h, 0, sizeof(h));
  /* nothing set: conditional rows and NULL pointers are left out, empty
     arrays written as [] unless NONEMPTY */
  assert_holder(&h, "{\"no_extra\":false,\"inline\":[],\"items\":[]}");
  h.has_extra = 1;
  h.extra = 5;
  h.inline_items[0].v = 1;
  h.inline_items[1].v = 2;
  h.n_inline = 2;
  h.items = items;
  h.n_items = 2;
  h.one = &items[1];
  /* "same" is item_table over the holder itself: its first member */
  assert_holder(&h, "{\"extra\":5,\"inline\":[{\"v\":1},{\"v\":2}],"
                "\"items\":[{\"v\":7},{\"v\":8}],"
                "\"nonempty\":[{\"v\":1},{\"v\":2}],"
                "\"one\":{\"v\":8},\"same\":{\"v\":1}}");
}

/* A caller's rows that begin with a struct jsonfield. */
struct wide_row {
  struct jsonfield json;
  const char *label;
};

Test(jsonfield, a_table_of_larger_rows_is_walked_by_its_stride)
{
  static const struct wide_row rows[] = {
    { JSONFIELD_ROW("v", U32, struct item, v), "value" },
    { JSONFIELD_ROW(NULL, U32, struct item, v), "text only" },
    { JSONFIELD_ROW("again", U32, struct item, v), "again" },
  };
  static const struct jsonfield_table t = {
    &rows[0].json, JSONFIELD_N(rows), sizeof(rows[0])
  };
  struct item it = { 3 };
  struct json_object *o;

  cr_assert_eq(jsonfield_object(&t, &it, &o), 0);
  cr_assert_str_eq(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN),
                   "{\"v\":3,\"again\":3}");
  json_object_put(o);
}

Test(jsonfield, shortest_reads_back_as_the_same_double)
{
  static const double v[] = { 0.1, 1.0 / 3, 1e-300, 0.0815, 123456789.125 };
  struct json_object *o;
  size_t i;

  for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
    o = jsonfield_shortest(v[i]);
    cr_assert_eq(strtod(json_object_to_json_string(o), NULL), v[i]);
    json_object_put(o);
  }
  cr_assert_null(jsonfield_shortest(INFINITY));
}
