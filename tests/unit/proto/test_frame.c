/* Frame codec: our encoder against golden frames (tests/wire/v1), the
   header checks, and the error-code mapping. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <qrs/error.h>

#include "frame.h"
#include "vectors.h"

/* Read tests/wire/v1/<name>.hex (first line a comment). */
static uint8_t *
golden(const char *name, size_t *ret_len)
{
  char path[4096], line[8192];
  uint8_t *b;
  FILE *f;

  snprintf(path, sizeof(path), "%s/wire/v1/%s.hex", QRS_TEST_SOURCE_DIR,
           name);
  f = fopen(path, "r");
  cr_assert_not_null(f, "cannot open %s", path);
  cr_assert_not_null(fgets(line, sizeof(line), f));
  cr_assert_eq(line[0], '#');
  cr_assert_not_null(fgets(line, sizeof(line), f));
  fclose(f);
  line[strcspn(line, "\n")] = '\0';
  b = vec_hex(line, ret_len);
  return b;
}

static void
assert_encodes_to(const char *name, uint16_t type, uint32_t seq,
                  const ProtobufCMessage *m)
{
  uint8_t buf[1024], *want;
  size_t len;
  int n;

  want = golden(name, &len);
  n = qrs__frame_pack(type, seq, m, buf, sizeof(buf));
  cr_assert_eq(n, (int)len, "%s: encoded %d bytes, golden has %zu", name, n,
               len);
  cr_assert_eq(qrs__frame_size(m), len);
  cr_assert(memcmp(buf, want, len) == 0, "%s: bytes differ from golden",
            name);
  memset(buf, 0, sizeof(buf));
  cr_assert_eq(qrs__frame_pack_sized(type, seq, m, buf, len), (int)len);
  cr_assert(memcmp(buf, want, len) == 0, "%s: pack_sized differs", name);
  free(want);
}

Test(frame, hello_matches_golden)
{
  QrsIpc__Hello m = QRS_IPC__HELLO__INIT;

  m.protocol_version = 1;
  m.client_name = "golden";
  assert_encodes_to("hello", QRS_MSG_HELLO, 7, &m.base);
}

Test(frame, draw_with_commitment_matches_golden)
{
  QrsIpc__Draw m = QRS_IPC__DRAW__INIT;
  QrsIpc__Commitment cm = QRS_IPC__COMMITMENT__INIT;
  uint8_t salt[16];
  int i;

  for (i = 0; i < 16; i++)
    salt[i] = (uint8_t)i;
  cm.salt.data = salt;
  cm.salt.len = 16;
  cm.step = 1;
  cm.prev_token_id = 42;
  m.source = "system";
  m.sample_count = 10000;
  m.commitment = &cm;
  assert_encodes_to("draw", QRS_MSG_DRAW, 0x01020304, &m.base);
}

Test(frame, error_matches_golden)
{
  QrsIpc__Error m = QRS_IPC__ERROR__INIT;

  m.code = qrs__error_to_wire(QRS_E_SAMPLE_COUNT);
  m.message = "bad";
  assert_encodes_to("error", QRS_MSG_ERROR, 9, &m.base);
}

Test(frame, empty_status_matches_golden)
{
  QrsIpc__Status m = QRS_IPC__STATUS__INIT;

  assert_encodes_to("status", QRS_MSG_STATUS, 1, &m.base);
}

Test(frame, golden_draw_reply_decodes)
{
  struct qrs_frame_hdr h;
  QrsIpc__DrawReply *r;
  uint8_t *b;
  size_t len;

  b = golden("draw_reply", &len);
  cr_assert_eq(qrs__frame_hdr_decode(b, QRS_DEFAULT_MAX_FRAME, &h), 0);
  cr_assert_eq(h.magic, QRS_FRAME_MAGIC);
  cr_assert_eq(h.version, 1);
  cr_assert_eq(h.type, QRS_MSG_DRAW_REPLY);
  cr_assert_eq(h.seq, 0x01020304u);
  cr_assert_eq(h.length + QRS_FRAME_HDR_SIZE, len);
  r = qrs_ipc__draw_reply__unpack(NULL, h.length, b + QRS_FRAME_HDR_SIZE);
  cr_assert_not_null(r);
  cr_assert_eq(r->u, 0.5);
  cr_assert_eq(r->z, -1.25);
  cr_assert_eq(r->sample_mean, 127.5);
  cr_assert_eq(r->sample_count, 10000);
  cr_assert_str_eq(r->served_by, "system");
  cr_assert_str_eq(r->amplifier, "zscore_mean");
  cr_assert_eq(r->nonce, 8681103821628823450ull);
  cr_assert_not_null(r->received);
  cr_assert_eq(r->received->realtime_ns, 1700000000000000000ll);
  cr_assert_eq(r->received->monotonic_ns, 123456789);
  cr_assert_null(r->generated);
  cr_assert_eq(r->fallback, 0);
  qrs_ipc__draw_reply__free_unpacked(r, NULL);
  free(b);
}

Test(frame, header_round_trips_in_network_order)
{
  struct qrs_frame_hdr h, back;
  uint8_t b[QRS_FRAME_HDR_SIZE];

  h.magic = QRS_FRAME_MAGIC;
  h.version = 1;
  h.type = 0x0a0b;
  h.flags = 0;
  h.reserved = 0;
  h.length = 0x00010203;
  h.seq = 0xdeadbeef;
  qrs__frame_hdr_encode(&h, b);
  cr_assert_eq(b[0], 0x51);
  cr_assert_eq(b[3], 0x21);
  cr_assert_eq(b[6], 0x0a);
  cr_assert_eq(b[7], 0x0b);
  cr_assert_eq(b[19], 0xef);
  cr_assert_eq(qrs__frame_hdr_decode(b, 0x00010203, &back), 0);
  cr_assert_eq(memcmp(&h, &back, sizeof(h)), 0);
}

Test(frame, bad_magic_flags_or_reserved_is_protocol_error)
{
  struct qrs_frame_hdr h;
  uint8_t *b;
  size_t len;

  b = golden("status", &len);
  b[0] ^= 0xff;
  cr_assert_eq(qrs__frame_hdr_decode(b, 1024, &h), QRS_E_PROTOCOL);
  b[0] ^= 0xff;
  b[9] = 1;                     /* flags */
  cr_assert_eq(qrs__frame_hdr_decode(b, 1024, &h), QRS_E_PROTOCOL);
  b[9] = 0;
  b[11] = 1;                    /* reserved */
  cr_assert_eq(qrs__frame_hdr_decode(b, 1024, &h), QRS_E_PROTOCOL);
  b[11] = 0;
  cr_assert_eq(qrs__frame_hdr_decode(b, 1024, &h), 0);
  free(b);
}

Test(frame, length_over_limit_is_too_large)
{
  struct qrs_frame_hdr h;
  uint8_t *b;
  size_t len;

  b = golden("hello", &len);
  cr_assert_eq(qrs__frame_hdr_decode(b, 9, &h), QRS_E_TOO_LARGE);
  cr_assert_eq(h.length, 10);   /* still reported, for the log line */
  cr_assert_eq(qrs__frame_hdr_decode(b, 10, &h), 0);
  free(b);
}

Test(frame, pack_refuses_a_small_buffer)
{
  QrsIpc__Hello m = QRS_IPC__HELLO__INIT;
  uint8_t buf[29];

  m.protocol_version = 1;
  m.client_name = "golden";
  cr_assert_eq(qrs__frame_pack(QRS_MSG_HELLO, 1, &m.base, buf, sizeof(buf)),
               -EMSGSIZE);
}

Test(frame, pack_sized_refuses_a_size_not_computed_for_the_message)
{
  QrsIpc__Hello m = QRS_IPC__HELLO__INIT;
  uint8_t buf[256];
  size_t size;

  m.protocol_version = 1;
  m.client_name = "golden";
  size = qrs__frame_size(&m.base);
  cr_assert_eq(qrs__frame_pack_sized(QRS_MSG_HELLO, 1, &m.base, buf, size),
               (int)size);
  cr_assert_eq(qrs__frame_pack_sized(QRS_MSG_HELLO, 1, &m.base, buf,
                                     size + 1), -EMSGSIZE);
  cr_assert_eq(qrs__frame_pack_sized(QRS_MSG_HELLO, 1, &m.base, buf, 3),
               -EMSGSIZE);
}

Test(frame, unknown_types_have_no_descriptor)
{
  cr_assert_not_null(qrs__msg_descriptor(QRS_MSG_DRAW));
  cr_assert_null(qrs__msg_descriptor(0));
  cr_assert_null(qrs__msg_descriptor(QRS_MSG_SOURCE_CONTROL_REPLY + 1));
  cr_assert_null(qrs__msg_descriptor(0xffff));
  cr_assert_str_eq(qrs__msg_name(QRS_MSG_SOURCES_REPLY), "SOURCES_REPLY");
  cr_assert_str_eq(qrs__msg_name(999), "UNKNOWN");
}

Test(frame, error_codes_round_trip_through_the_wire)
{
  int e;

  for (e = QRS_E_PROTOCOL; e >= QRS_E_HELLO_REQUIRED; e--)
    cr_assert_eq(qrs__error_from_wire(qrs__error_to_wire(e)), e,
                 "%s", qrs_strerror_name(e));
  cr_assert_eq(qrs__error_to_wire(-ETIMEDOUT),
               QRS_IPC__ERROR_CODE__ERROR_TIMEOUT);
  cr_assert_eq(qrs__error_to_wire(QRS_E_AMP_PARAMS),
               QRS_IPC__ERROR_CODE__ERROR_AMPLIFIER_PARAMS);
  cr_assert_eq(qrs__error_to_wire(QRS_E_CALIBRATION),
               QRS_IPC__ERROR_CODE__ERROR_CALIBRATION);
  cr_assert_eq(qrs__error_from_wire(20), QRS_E_AMP_PARAMS);
  cr_assert_eq(qrs__error_from_wire(21), QRS_E_CALIBRATION);
  cr_assert_eq(qrs__error_from_wire(15), QRS_E_INTERNAL);   /* unassigned */
  cr_assert_eq(qrs__error_from_wire(0), QRS_E_INTERNAL);
  cr_assert_eq(qrs__error_from_wire(9999), QRS_E_INTERNAL);
}

Test(frame, strerror_covers_errno_and_qrs_codes)
{
  cr_assert_str_eq(qrs_strerror(QRS_E_BUSY),
                   "Too many connections or requests in flight");
  cr_assert_str_eq(qrs_strerror(-ENOENT), "No such file or directory");
  cr_assert_str_eq(qrs_strerror_name(-ETIMEDOUT), "ETIMEDOUT");
  cr_assert_str_eq(qrs_strerror_name(QRS_E_LOGITS), "QRS_E_LOGITS");
  cr_assert_str_eq(qrs_strerror(-99999), "Unknown error");
  cr_assert_null(qrs_strerror_name(-99999));
}
