/* Field tables to json-c objects (core/jsonfield.c): each type, the
   null flags, custom rows, arrays, and tables written wrong. */
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

static char *
text(const struct rec *r)
{
  struct json_object *o;
  char *s;

  cr_assert_eq(jsonfield_object(rec_fields, JSONFIELD_N(rec_fields), r, &o),
               0);
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
                   "\"small\":4000000000,\"signed\":-5,"
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
  static const struct jsonfield custom_value[] = {
    JSONFIELD_CUSTOM_ROW("x", add_two),
  };
  struct json_object *o, *v;
  struct rec r;

  memset(&r, 0, sizeof(r));
  cr_assert_eq(jsonfield_object(wrong, 1, &r, &o), -EINVAL);
  cr_assert_eq(jsonfield_value(&custom_value[0], &r, &v), -EINVAL);
}

Test(jsonfield, an_array_has_one_object_per_element)
{
  static const struct jsonfield f[] = {
    JSONFIELD_ROW("small", U32, struct rec, small),
  };
  struct json_object *o;
  struct rec r[3];

  memset(r, 0, sizeof(r));
  r[0].small = 1;
  r[1].small = 2;
  r[2].small = 3;
  o = json_object_new_object();
  cr_assert_eq(jsonfield_add_array(o, "recs", f, 1, r, 3, sizeof(r[0])), 0);
  cr_assert_eq(jsonfield_add_array(o, "none", f, 1, r, 0, sizeof(r[0])), 0);
  cr_assert_str_eq(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN),
                   "{\"recs\":[{\"small\":1},{\"small\":2},{\"small\":3}],"
                   "\"none\":[]}");
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
