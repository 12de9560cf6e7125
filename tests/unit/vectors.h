/* Test-vector loading shared by the unit tests.

   Vector files are looked up in $QRS_VECTORS_DIR if it is set and
   non-empty, else in the tree's tests/vectors/ (QRS_TEST_VECTORS_DIR). */
#ifndef QRS_TEST_VECTORS_H
#define QRS_TEST_VECTORS_H

#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

/* Parse the named file (e.g. "nonce.json").  Fails the current criterion
   test (cr_assert) when it cannot be read or parsed.  Release with
   json_object_put(). */
struct json_object *vec_load(const char *file);

/* The cases of a vector file, the elements of the array under key:

     for (c = vec_first(&it, "select.json", "cases"); c; c = vec_next(&it))

   it.i is the current case's index and it.n the number of cases.  The
   file is released when vec_next() returns NULL; vec_done() releases it
   early.  Cases (and all in them) live until then. */
struct vec_iter {
  struct json_object *root;
  struct json_object *cases;
  size_t i;
  size_t n;
};

struct json_object *vec_first(struct vec_iter *it, const char *file,
                              const char *key);
struct json_object *vec_next(struct vec_iter *it);
void vec_done(struct vec_iter *it);

/* obj[key], failing the test if absent. */
struct json_object *vec_get(struct json_object *obj, const char *key);

/* A number, or one of the strings "inf", "-inf", "nan". */
double vec_double(struct json_object *v);

/* Decode lowercase hex into a new buffer (caller frees); *ret_len gets the
   length.  Fails the test on bad hex. */
uint8_t *vec_hex(const char *hex, size_t *ret_len);

/* The directory the vectors are read from. */
const char *vec_dir(void);

#endif
