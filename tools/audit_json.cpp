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
  "config_hash",
};

/* The members by their names' length (a record has some 55 keys and we
   want 18: most are turned away by their length alone). */
#define AJ_KEY_MAX 24
static signed char by_len[AJ_KEY_MAX + 1][4];

static void
index_names(void)
{
  size_t i, l, k;

  memset(by_len, -1, sizeof by_len);
  for (i = 0; i < AJ_N_MEMBERS; i++) {
    l = strlen(names[i]);
    for (k = 0; by_len[l][k] >= 0; k++)
      ;
    by_len[l][k] = (signed char)i;
  }
}

/* The member a key names, or -1. */
static int
member_of(std::string_view k)
{
  const signed char *c;
  size_t i;

  if (k.size() > AJ_KEY_MAX || k.empty())
    return -1;
  c = by_len[k.size()];
  for (i = 0; i < 4 && c[i] >= 0; i++)
    if (k[0] == names[c[i]][0] && k[k.size() - 1] == names[c[i]][k.size() - 1]
        && memcmp(k.data(), names[c[i]], k.size()) == 0)
      return c[i];
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
