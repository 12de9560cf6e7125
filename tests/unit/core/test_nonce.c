/* Commitment nonce against tests/vectors/nonce.json (the reference's
   derive_commit_nonce()). */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "nonce.h"
#include "vectors.h"

Test(nonce, matches_every_reference_case)
{
  struct json_object *c;
  struct vec_iter it;
  uint8_t *salt;
  uint64_t got, want;
  size_t len;

  c = vec_first(&it, "nonce.json", "cases");
  cr_assert_gt(it.n, 0);
  for (; c; c = vec_next(&it)) {
    salt = vec_hex(json_object_get_string(vec_get(c, "salt_hex")), &len);
    got = nonce_derive(salt, len,
                       json_object_get_uint64(vec_get(c, "step")),
                       json_object_get_int64(vec_get(c, "prev_token_id")));
    want = json_object_get_uint64(vec_get(c, "expected_nonce"));
    cr_assert_eq(got, want, "case %zu: got %llu want %llu", it.i,
                 (unsigned long long)got, (unsigned long long)want);
    free(salt);
  }
}

Test(nonce, follows_the_adapter_chain)
{
  struct json_object *v, *chain, *steps, *tokens, *s;
  uint8_t *salt;
  size_t i, len;
  int64_t prev;

  v = vec_load("nonce.json");
  chain = vec_get(v, "chain");
  salt = vec_hex(json_object_get_string(vec_get(chain, "salt_hex")), &len);
  steps = vec_get(chain, "nonces");
  tokens = vec_get(chain, "selected_tokens");
  cr_assert_gt(json_object_array_length(steps), 1);
  prev = -1;
  for (i = 0; i < json_object_array_length(steps); i++) {
    s = json_object_array_get_idx(steps, i);
    /* Each step commits to the token selected at the step before. */
    cr_assert_eq(json_object_get_int64(vec_get(s, "prev_token_id")), prev);
    cr_assert_eq(nonce_derive(salt, len, (uint64_t)i, prev),
                 json_object_get_uint64(vec_get(s, "nonce")),
                 "chain step %zu", i);
    prev = json_object_get_int64(json_object_array_get_idx(tokens, i));
  }
  free(salt);
  json_object_put(v);
}

Test(nonce, is_never_zero_and_fits_63_bits)
{
  uint64_t n;
  int i;

  for (i = 0; i < 1000; i++) {
    n = nonce_derive((const uint8_t *)"x", 1, (uint64_t)i, i - 1);
    cr_assert_neq(n, 0);
    cr_assert_eq(n >> 63, 0);
  }
}

Test(nonce, refuses_an_oversized_salt)
{
  uint8_t salt[NONCE_MAX_SALT + 1];

  memset(salt, 7, sizeof(salt));
  cr_assert_eq(nonce_derive(salt, sizeof(salt), 0, -1), 0);
  cr_assert_neq(nonce_derive(salt, NONCE_MAX_SALT, 0, -1), 0);
}
