/* libFuzzer harness: the frame decoder and every message of the protocol.

   The input is a byte stream as a peer would send it: frames one after
   the other.  Each header goes through qrs__frame_hdr_decode(); each
   payload that fits is unpacked with the descriptor of its type (requests
   and replies alike, unknown types with every descriptor in turn), packed
   again, and the packed bytes must unpack again to the same size. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <qrs/error.h>

#include "frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Small limit so that lengths near it are reachable. */
#define FUZZ_MAX_PAYLOAD (64u * 1024u)

static void
round_trip(const ProtobufCMessageDescriptor *desc, const uint8_t *p,
           size_t len, uint16_t type, uint32_t seq)
{
  ProtobufCMessage *m, *m2;
  uint8_t *buf;
  size_t size;
  int n;

  m = protobuf_c_message_unpack(desc, NULL, len, p);
  if (!m)
    return;
  size = qrs__frame_size(m);
  buf = malloc(size);
  if (!buf)
    abort();
  n = qrs__frame_pack(type, seq, m, buf, size);
  if (n < 0 || (size_t)n != size)
    abort();
  /* The packed frame decodes as a header and a payload again. */
  {
    struct qrs_frame_hdr h;

    if (qrs__frame_hdr_decode(buf, UINT32_MAX, &h) != 0 || h.seq != seq ||
        h.type != type || h.length != size - QRS_FRAME_HDR_SIZE)
      abort();
  }
  m2 = protobuf_c_message_unpack(desc, NULL, size - QRS_FRAME_HDR_SIZE,
                                 buf + QRS_FRAME_HDR_SIZE);
  if (!m2 || protobuf_c_message_get_packed_size(m2) !=
                 size - QRS_FRAME_HDR_SIZE)
    abort();
  protobuf_c_message_free_unpacked(m2, NULL);
  protobuf_c_message_free_unpacked(m, NULL);
  free(buf);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  const ProtobufCMessageDescriptor *desc;
  struct qrs_frame_hdr h;
  uint16_t t;
  int r;

  while (size >= QRS_FRAME_HDR_SIZE) {
    r = qrs__frame_hdr_decode(data, FUZZ_MAX_PAYLOAD, &h);
    if (r == QRS_E_PROTOCOL)
      return 0;
    if (r == QRS_E_TOO_LARGE) {
      if (h.length <= FUZZ_MAX_PAYLOAD)
        abort();                /* a header within the limit refused */
      return 0;
    }
    if (r != 0 || h.length > FUZZ_MAX_PAYLOAD)
      abort();
    if (h.length > size - QRS_FRAME_HDR_SIZE)
      return 0;                 /* a partial frame: wait for more */
    (void)qrs__msg_name(h.type);
    desc = qrs__msg_descriptor(h.type);
    if (desc) {
      round_trip(desc, data + QRS_FRAME_HDR_SIZE, h.length, h.type, h.seq);
    } else {
      /* An unknown type: any message layout must cope with the bytes. */
      for (t = QRS_MSG_HELLO; t <= QRS_MSG_ERROR; t++)
        round_trip(qrs__msg_descriptor(t), data + QRS_FRAME_HDR_SIZE,
                   h.length, t, h.seq);
    }
    data += QRS_FRAME_HDR_SIZE + h.length;
    size -= QRS_FRAME_HDR_SIZE + h.length;
  }
  return 0;
}
