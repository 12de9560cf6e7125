/* The EntropyService / PurityService codec against tests/vectors/wire.json
   (the reference's proto/wire.py), and against protoc-c's encoding of the
   project's own .proto files, so that the two can never drift apart. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "entropy_service.pb-c.h"
#include "gwire.h"
#include "purity_service.pb-c.h"
#include "vectors.h"

/* The first case of wire.json's section name (there is one at least). */
static struct json_object *
section(struct vec_iter *it, const char *name)
{
  struct json_object *c;

  c = vec_first(it, "wire.json", name);
  cr_assert_gt(it->n, 0, "no %s", name);
  return c;
}

/* The n bytes in buf are case c's "hex"; what and i name the case in a
   failure. */
static void
assert_case_hex(struct json_object *c, const uint8_t *buf, size_t n,
                const char *what, size_t i)
{
  uint8_t *want;
  size_t wlen;

  want = vec_hex(json_object_get_string(vec_get(c, "hex")), &wlen);
  cr_assert_eq(n, wlen, "%s %zu", what, i);
  cr_assert_arr_eq(buf, want, n, "%s %zu", what, i);
  free(want);
}

static int
slice_eq(struct gw_slice s, const char *str)
{
  return s.len == strlen(str) && (s.len == 0 || memcmp(s.data, str, s.len) == 0);
}

Test(gwire, varints_match_the_reference)
{
  struct vec_iter it;
  struct json_object *c;
  uint8_t buf[16];
  size_t n;

  for (c = section(&it, "varints"); c; c = vec_next(&it)) {
    n = gw_varint_put(buf, json_object_get_uint64(vec_get(c, "value")));
    assert_case_hex(c, buf, n, "varint", it.i);
  }
}

Test(gwire, entropy_requests_encode_and_decode)
{
  struct vec_iter it;
  struct json_object *c;
  struct gw_entropy_req m, d;
  QrEntropy__EntropyRequest pm = QR_ENTROPY__ENTROPY_REQUEST__INIT;
  uint8_t buf[64], pbuf[64];
  size_t n, pn;

  for (c = section(&it, "entropy_requests"); c; c = vec_next(&it)) {
    m.bytes_needed = json_object_get_uint64(vec_get(c, "bytes_needed"));
    m.sequence_id = json_object_get_uint64(vec_get(c, "sequence_id"));
    n = gw_entropy_req_encode(&m, buf, sizeof(buf));
    assert_case_hex(c, buf, n, "request", it.i);

    pm.bytes_needed = (int32_t)m.bytes_needed;
    pm.sequence_id = (int64_t)m.sequence_id;
    pn = qr_entropy__entropy_request__pack(&pm, pbuf);
    assert_case_hex(c, pbuf, pn, "protoc-c disagrees on request", it.i);

    cr_assert_eq(gw_entropy_req_decode(buf, n, &d), 0);
    cr_assert_eq(d.bytes_needed, m.bytes_needed);
    cr_assert_eq(d.sequence_id, m.sequence_id);
  }
}

Test(gwire, entropy_responses_decode_as_the_reference)
{
  struct vec_iter it;
  struct json_object *c, *e, *err;
  struct gw_entropy_resp m;
  uint8_t *in, *data, *re;
  size_t len, dlen, rlen;
  int errors = 0;

  for (c = section(&it, "entropy_responses"); c; c = vec_next(&it)) {
    e = vec_get(c, "expected");
    in = vec_hex(json_object_get_string(vec_get(c, "hex")), &len);
    cr_assert_eq(gw_entropy_resp_decode(in, len, &m), 0, "response %zu", it.i);
    if (json_object_object_get_ex(e, "error", &err)) {
      /* The reference raises for a reply without data; the codec reports
         no data and the caller refuses it. */
      cr_assert_eq(m.data.len, 0, "response %zu", it.i);
      errors++;
      free(in);
      continue;
    }
    data = vec_hex(json_object_get_string(vec_get(e, "data_hex")), &dlen);
    cr_assert_eq(m.data.len, dlen, "response %zu", it.i);
    cr_assert_arr_eq(m.data.data, data, dlen, "response %zu", it.i);
    cr_assert_eq(m.sequence_id,
                 json_object_get_uint64(vec_get(e, "sequence_id")));
    cr_assert_eq(m.generation_timestamp_ns,
                 json_object_get_uint64(vec_get(e,
                                                "generation_timestamp_ns")));
    /* Re-encoding the decoded fields round-trips through protoc-c. */
    rlen = gw_entropy_resp_bound(m.data.len, m.device_id.len);
    re = malloc(rlen);
    rlen = gw_entropy_resp_encode(&m, re, rlen);
    {
      QrEntropy__EntropyResponse *p;

      p = qr_entropy__entropy_response__unpack(NULL, rlen, re);
      cr_assert_not_null(p);
      cr_assert_eq(p->data.len, dlen);
      cr_assert_eq((uint64_t)p->sequence_id, m.sequence_id);
      qr_entropy__entropy_response__free_unpacked(p, NULL);
    }
    free(re);
    free(data);
    free(in);
  }
  cr_assert_eq(errors, 2);
}

Test(gwire, draw_requests_encode_and_decode)
{
  struct vec_iter it;
  struct json_object *c;
  struct gw_draw_req m, d;
  QrPurity__DrawRequest pm = QR_PURITY__DRAW_REQUEST__INIT;
  const char *sid;
  uint8_t buf[GW_MAX_REQUEST], pbuf[GW_MAX_REQUEST];
  size_t n, pn;

  for (c = section(&it, "draw_requests"); c; c = vec_next(&it)) {
    sid = json_object_get_string(vec_get(c, "source_id"));
    m.sequence_id = json_object_get_uint64(vec_get(c, "sequence_id"));
    m.source_id.data = (const uint8_t *)sid;
    m.source_id.len = strlen(sid);
    m.block_bytes = json_object_get_uint64(vec_get(c, "block_bytes"));
    n = gw_draw_req_encode(&m, buf, sizeof(buf));
    assert_case_hex(c, buf, n, "draw request", it.i);

    pm.sequence_id = (int64_t)m.sequence_id;
    pm.source_id = (char *)sid;
    pm.block_bytes = (uint32_t)m.block_bytes;
    pn = qr_purity__draw_request__pack(&pm, pbuf);
    assert_case_hex(c, pbuf, pn, "protoc-c disagrees on draw request", it.i);

    cr_assert_eq(gw_draw_req_decode(buf, n, &d), 0);
    cr_assert_eq(d.sequence_id, m.sequence_id);
    cr_assert(slice_eq(d.source_id, sid));
    cr_assert_eq(d.block_bytes, m.block_bytes);
  }
}

Test(gwire, draw_responses_decode_as_the_reference)
{
  struct vec_iter it;
  struct json_object *c, *e, *err;
  struct gw_draw_resp m;
  uint8_t *in, re[256];
  size_t len, n;
  int errors = 0;

  for (c = section(&it, "draw_responses"); c; c = vec_next(&it)) {
    e = vec_get(c, "expected");
    in = vec_hex(json_object_get_string(vec_get(c, "hex")), &len);
    cr_assert_eq(gw_draw_resp_decode(in, len, &m), 0);
    if (json_object_object_get_ex(e, "error", &err)) {
      cr_assert_eq(m.u, 0.0, "draw response %zu: u absent", it.i);
      errors++;
      free(in);
      continue;
    }
    cr_assert_eq(m.u, vec_double(vec_get(e, "u")), "response %zu", it.i);
    cr_assert_eq(m.z, vec_double(vec_get(e, "z")));
    cr_assert_eq(m.sequence_id,
                 json_object_get_uint64(vec_get(e, "sequence_id")));
    cr_assert_eq(m.generation_timestamp_ns,
                 json_object_get_uint64(vec_get(e,
                                                "generation_timestamp_ns")));
    cr_assert(slice_eq(m.source_id,
                       json_object_get_string(vec_get(e, "source_id"))));
    cr_assert_eq(m.coherence_z, vec_double(vec_get(e, "coherence_z")));
    cr_assert_eq(m.coherence_valid,
                 json_object_get_boolean(vec_get(e, "coherence_valid")));
    cr_assert(slice_eq(m.purity_label,
                       json_object_get_string(vec_get(e, "purity_label"))));
    cr_assert_eq(m.integrated_bytes,
                 json_object_get_uint64(vec_get(e, "integrated_bytes")));
    cr_assert(slice_eq(m.integrator,
                       json_object_get_string(vec_get(e, "integrator"))));
    cr_assert_eq(m.coherence_r, vec_double(vec_get(e, "coherence_r")));
    /* Our encoder writes the same bytes back (fields ascending, defaults
       omitted). */
    n = gw_draw_resp_encode(&m, re, sizeof(re));
    cr_assert_eq(n, len, "draw response %zu re-encoded", it.i);
    cr_assert_arr_eq(re, in, n);
    free(in);
  }
  cr_assert_eq(errors, 1);
}

Test(gwire, truncated_input_is_an_error)
{
  /* data field claiming 5 bytes with 2 present; a varint running off the
     end; a fixed64 cut short. */
  static const uint8_t short_len[] = { 0x0a, 0x05, 0x01, 0x02 };
  static const uint8_t short_varint[] = { 0x10, 0x80 };
  static const uint8_t short_fixed[] = { 0x09, 0x00, 0x00 };
  struct gw_entropy_resp er;
  struct gw_draw_resp dr;

  cr_assert_eq(gw_entropy_resp_decode(short_len, sizeof(short_len), &er),
               -EBADMSG);
  cr_assert_eq(gw_entropy_resp_decode(short_varint, sizeof(short_varint),
                                      &er), -EBADMSG);
  cr_assert_eq(gw_draw_resp_decode(short_fixed, sizeof(short_fixed), &dr),
               -EBADMSG);
}

Test(gwire, a_group_wire_type_stops_parsing_silently)
{
  /* data = 01, then field 3 with wire type 3 (start group), then more
     bytes that are never read. */
  static const uint8_t in[] = { 0x0a, 0x01, 0x01, 0x1b, 0xff, 0xff };
  struct gw_entropy_resp m;

  cr_assert_eq(gw_entropy_resp_decode(in, sizeof(in), &m), 0);
  cr_assert_eq(m.data.len, 1);
  cr_assert_eq(m.data.data[0], 0x01);
}

Test(gwire, encoders_report_the_size_they_need)
{
  struct gw_entropy_req m = { 10000, 9 };
  uint8_t buf[2];

  cr_assert_eq(gw_entropy_req_encode(&m, buf, sizeof(buf)), 5);
}
