/* qrs-audit's record reader: simdjson's DOM parser (audit_json.h). */
#include <charconv>
#include <cstdio>
#include <cstring>
#include <new>

#include <simdjson.h>

#include "audit_json.h"

static_assert(AJ_PADDING == simdjson::SIMDJSON_PADDING,
              "AJ_PADDING must be simdjson's padding");

struct aj_parser {
  simdjson::dom::parser dom;
};

/* The members' names, by enum aj_member. */
static const char *const names[AJ_N_MEMBERS] = {
  "u_value", "cdf_lo", "cdf_hi", "greedy", "entropy_is_fallback",
  "entropy_unjournalled", "entropy_source_used", "journal_seq",
  "draw_received_ns", "draw_generated_ns", "draw_sent_ns", "entropy_nonce",
  "step", "token_id", "timestamp_ns", "z_score", "sample_mean",
  "config_hash", "emitted", "emitted_token", "token_prob",
  "device_selection",
};

/* The members in an open-addressed table hashed on a key's length and
   first and last bytes (a record has some 55 keys and we want 22: most
   land on an empty slot and are turned away without a comparison). */
#define AJ_KEY_MAX 24
#define AJ_SLOTS 256
static signed char slot[AJ_SLOTS];
static unsigned char name_len[AJ_N_MEMBERS];

static inline unsigned
key_hash(const char *k, size_t n)
{
  return (unsigned)(n * 31 + (unsigned char)k[0] * 3 +
                    (unsigned char)k[n - 1]) & (AJ_SLOTS - 1);
}

static void
index_names(void)
{
  size_t i, h;

  memset(slot, -1, sizeof slot);
  for (i = 0; i < AJ_N_MEMBERS; i++) {
    name_len[i] = (unsigned char)strlen(names[i]);
    for (h = key_hash(names[i], name_len[i]); slot[h] >= 0;
         h = (h + 1) & (AJ_SLOTS - 1))
      ;
    slot[h] = (signed char)i;
  }
}

/* Whether the n <= AJ_KEY_MAX bytes at a and b are equal: fixed-size
   loads (a call to memcmp() for each key cost more than the compare). */
static inline bool
eq_short(const char *a, const char *b, size_t n)
{
  uint64_t x, y, u, v;

  if (n >= 8) {
    memcpy(&x, a, 8);
    memcpy(&y, b, 8);
    memcpy(&u, a + n - 8, 8);
    memcpy(&v, b + n - 8, 8);
    if (((x ^ y) | (u ^ v)) != 0)
      return false;
    if (n > 16) {
      memcpy(&x, a + 8, 8);
      memcpy(&y, b + 8, 8);
      return x == y;
    }
    return true;
  }
  if (n >= 4) {
    uint32_t p, q, r, t;

    memcpy(&p, a, 4);
    memcpy(&q, b, 4);
    memcpy(&r, a + n - 4, 4);
    memcpy(&t, b + n - 4, 4);
    return ((p ^ q) | (r ^ t)) == 0;
  }
  return memcmp(a, b, n) == 0;
}

/* The member a key names, or -1. */
static inline int
member_of(std::string_view k)
{
  size_t n = k.size(), h;
  int m;

  if (n > AJ_KEY_MAX || n == 0)
    return -1;
  for (h = key_hash(k.data(), n); (m = slot[h]) >= 0;
       h = (h + 1) & (AJ_SLOTS - 1))
    if (name_len[m] == n && eq_short(k.data(), names[m], n))
      return m;
  return -1;
}

/* n <= AJ_STRING_MAX bytes from src to dst: fixed-size moves (memcpy of
   a variable length is glibc's rep movs here, whose start-up cost was a
   fifth of the record reading). */
static inline void
copy_short(char *dst, const char *src, size_t n)
{
  size_t k;

  if (n >= 16) {
    for (k = 0; k + 16 <= n; k += 16)
      memcpy(dst + k, src + k, 16);
    memcpy(dst + n - 16, src + n - 16, 16);
  } else if (n >= 8) {
    memcpy(dst, src, 8);
    memcpy(dst + n - 8, src + n - 8, 8);
  } else if (n >= 4) {
    memcpy(dst, src, 4);
    memcpy(dst + n - 4, src + n - 4, 4);
  } else {
    for (k = 0; k < n; k++)
      dst[k] = src[k];
  }
}

/* The member's value into *v. */
static void
read_value(simdjson::dom::element e, struct aj_value *v)
{
  using simdjson::dom::element_type;
  std::string_view s;

  switch (e.type()) {
  case element_type::NULL_VALUE:
    v->kind = AJ_NULL;
    break;
  case element_type::BOOL:
    v->kind = AJ_BOOL;
    v->b = e.get_bool().value_unsafe();
    break;
  case element_type::INT64:
    v->kind = AJ_INT;
    v->i = e.get_int64().value_unsafe();
    v->d = (double)v->i;
    break;
  case element_type::UINT64:
    v->kind = AJ_UINT;
    v->u = e.get_uint64().value_unsafe();
    v->d = (double)v->u;
    break;
  case element_type::DOUBLE:
    v->kind = AJ_DOUBLE;
    v->d = e.get_double().value_unsafe();
    break;
  case element_type::STRING:
    v->kind = AJ_STRING;
    s = e.get_string().value_unsafe();
    if (s.size() > AJ_STRING_MAX)
      s = s.substr(0, AJ_STRING_MAX);
    copy_short(v->s, s.data(), s.size());
    v->s[s.size()] = '\0';
    v->len = s.size();
    break;
  default:
    v->kind = AJ_OTHER;
    break;
  }
}

struct aj_parser *
aj_parser_new(void)
{
  static int indexed;

  if (!indexed) {
    index_names();
    indexed = 1;
  }
  return new (std::nothrow) aj_parser;
}

void
aj_parser_free(struct aj_parser *p)
{
  delete p;
}

int
aj_parse(struct aj_parser *p, const char *line, size_t len,
         struct aj_value v[AJ_N_MEMBERS], char *err, size_t errlen)
{
  simdjson::dom::element doc;
  simdjson::dom::object obj;
  simdjson::error_code ec;
  int i, m;

  for (i = 0; i < AJ_N_MEMBERS; i++)
    v[i].kind = AJ_ABSENT;
  ec = p->dom.parse(line, len, false).get(doc);
  if (ec) {
    snprintf(err, errlen, "%s", simdjson::error_message(ec));
    return -1;
  }
  if (doc.get_object().get(obj))
    return 1;
  for (auto field : obj) {
    m = member_of(field.key);
    if (m >= 0)
      read_value(field.value, &v[m]);
  }
  return 0;
}

int
aj_parse_only(struct aj_parser *p, const char *line, size_t len)
{
  simdjson::dom::element doc;

  return p->dom.parse(line, len, false).get(doc) ? -1 : 0;
}

int
aj_number(const char *s, const char *end, double *v)
{
  std::from_chars_result r = std::from_chars(s, end, *v);

  return r.ec == std::errc() && r.ptr == end ? 0 : -1;
}

int
aj_hex64(const char *s, const char *end, uint64_t *v)
{
  std::from_chars_result r = std::from_chars(s, end, *v, 16);

  return r.ec == std::errc() && r.ptr == end ? 0 : -1;
}
