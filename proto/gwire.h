/* The protobuf encoding of qr_entropy.EntropyService and
   qr_purity.PurityService messages (entropy_service.proto,
   purity_service.proto), written by hand so that it decodes exactly as
   the reference does and accepts third-party services:

   - encoding omits default values and writes fields in ascending order;
   - decoding matches a field by number *and* wire type (a field of the
     expected number but another wire type is skipped as unknown), skips
     unknown fields of wire types 0, 1, 2 and 5, stops silently at any other
     wire type, and keeps the last occurrence of a repeated field;
   - varints are read as unsigned 64-bit values.

   Decoded messages point into the input buffer (nothing is allocated); they
   are valid as long as that buffer is.  Shared by qrsd (client and compat
   server) and tools/qrs-entropy-server. */
#ifndef QRS_GWIRE_H
#define QRS_GWIRE_H

#include <stddef.h>
#include <stdint.h>

#define GW_ENTROPY_METHOD "/qr_entropy.EntropyService/GetEntropy"
#define GW_ENTROPY_STREAM_METHOD "/qr_entropy.EntropyService/StreamEntropy"
#define GW_DRAW_METHOD "/qr_purity.PurityService/GetDraw"
#define GW_DRAW_STREAM_METHOD "/qr_purity.PurityService/StreamDraws"

/* Upper bound of an encoded request (fixed fields plus a source_id of at
   most GW_MAX_ID bytes). */
#define GW_MAX_ID 256
#define GW_MAX_REQUEST (64 + GW_MAX_ID)

struct gw_slice {
  const uint8_t *data;
  size_t len;
};

struct gw_entropy_req {
  uint64_t bytes_needed;        /* int32 on the wire */
  uint64_t sequence_id;
};

struct gw_entropy_resp {
  struct gw_slice data;
  uint64_t sequence_id;
  uint64_t generation_timestamp_ns;
  struct gw_slice device_id;
};

struct gw_draw_req {
  uint64_t sequence_id;
  struct gw_slice source_id;
  uint64_t block_bytes;         /* uint32 on the wire */
};

struct gw_draw_resp {
  double u;
  double z;
  uint64_t sequence_id;
  uint64_t generation_timestamp_ns;
  struct gw_slice source_id;
  double coherence_z;
  int coherence_valid;
  struct gw_slice purity_label;
  uint64_t integrated_bytes;
  struct gw_slice integrator;
  double coherence_r;
};

/* Varint (unsigned LEB128) of v into buf (at least 10 bytes); returns the
   length. */
size_t gw_varint_put(uint8_t *buf, uint64_t v);

/* Encoders: write the message into buf (cap bytes) and return its length,
   or return the length needed without writing anything when it exceeds
   cap. */
size_t gw_entropy_req_encode(const struct gw_entropy_req *m, uint8_t *buf,
                             size_t cap);
size_t gw_entropy_resp_encode(const struct gw_entropy_resp *m, uint8_t *buf,
                              size_t cap);
size_t gw_draw_req_encode(const struct gw_draw_req *m, uint8_t *buf,
                          size_t cap);
size_t gw_draw_resp_encode(const struct gw_draw_resp *m, uint8_t *buf,
                           size_t cap);

/* The encoded size of an EntropyResponse whose other fields are small:
   an upper bound for a reply carrying n data bytes. */
size_t gw_entropy_resp_bound(size_t n, size_t device_id_len);

/* Decoders: 0, or -EBADMSG when the input is truncated (a varint or a
   length running past the end).  They do not judge the content: an
   EntropyResponse without data or a DrawResponse with u = 0 decode fine;
   the caller decides (see qrsd's reply validation). */
int gw_entropy_req_decode(const uint8_t *buf, size_t len,
                          struct gw_entropy_req *m);
int gw_entropy_resp_decode(const uint8_t *buf, size_t len,
                           struct gw_entropy_resp *m);
int gw_draw_req_decode(const uint8_t *buf, size_t len,
                       struct gw_draw_req *m);
int gw_draw_resp_decode(const uint8_t *buf, size_t len,
                        struct gw_draw_resp *m);

#endif
