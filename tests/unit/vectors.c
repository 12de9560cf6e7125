/* Test-vector loading shared by the unit tests. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "vectors.h"

const char *
vec_dir(void)
{
  const char *d;

  d = getenv("QRS_VECTORS_DIR");
  if (d && *d)
    return d;
  return QRS_TEST_VECTORS_DIR;
}

struct json_object *
vec_load(const char *file)
{
  struct json_object *o;
  char path[4096];

  snprintf(path, sizeof(path), "%s/%s", vec_dir(), file);
  o = json_object_from_file(path);
  cr_assert_not_null(o, "cannot load vectors from %s: %s", path,
                     json_util_get_last_err());
  return o;
}

struct json_object *
vec_get(struct json_object *obj, const char *key)
{
  struct json_object *v;

  cr_assert(json_object_object_get_ex(obj, key, &v), "missing key '%s'", key);
  return v;
}

struct json_object *
vec_first(struct vec_iter *it, const char *file, const char *key)
{
  it->root = vec_load(file);
  it->cases = vec_get(it->root, key);
  cr_assert(json_object_is_type(it->cases, json_type_array),
            "%s: '%s' is not an array", file, key);
  it->n = json_object_array_length(it->cases);
  it->i = 0;
  if (it->n == 0) {
    vec_done(it);
    return NULL;
  }
  return json_object_array_get_idx(it->cases, 0);
}

struct json_object *
vec_next(struct vec_iter *it)
{
  if (!it->root)
    return NULL;
  if (++it->i >= it->n) {
    vec_done(it);
    return NULL;
  }
  return json_object_array_get_idx(it->cases, it->i);
}

void
vec_done(struct vec_iter *it)
{
  json_object_put(it->root);
  it->root = it->cases = NULL;
}

double
vec_double(struct json_object *v)
{
  const char *s;

  if (json_object_is_type(v, json_type_string)) {
    s = json_object_get_string(v);
    if (!strcmp(s, "inf"))
      return INFINITY;
    if (!strcmp(s, "-inf"))
      return -INFINITY;
    if (!strcmp(s, "nan"))
      return NAN;
    cr_assert_fail("not a number: '%s'", s);
  }
  cr_assert(json_object_is_type(v, json_type_double) ||
            json_object_is_type(v, json_type_int), "not a number");
  return json_object_get_double(v);
}

uint8_t *
vec_hex(const char *hex, size_t *ret_len)
{
  char pair[3];
  size_t n, i;
  uint8_t *b;

  n = strlen(hex);
  cr_assert(n % 2 == 0, "odd hex length %zu", n);
  b = malloc(n / 2 + 1);
  cr_assert_not_null(b);
  pair[2] = '\0';
  for (i = 0; i < n / 2; i++) {
    pair[0] = hex[2 * i];
    pair[1] = hex[2 * i + 1];
    cr_assert(isxdigit((unsigned char)pair[0]) &&
              isxdigit((unsigned char)pair[1]), "bad hex at %zu", 2 * i);
    b[i] = (uint8_t)strtoul(pair, NULL, 16);
  }
  *ret_len = n / 2;
  return b;
}
