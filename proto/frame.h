/* The qrs IPC frame: a fixed 20-byte header in network byte order, then a
   protobuf-c payload (proto/qrs_ipc.proto documents the format and keeps the
   protocol changelog).  Shared by libqrs and qrsd; not installed. */
#ifndef QRS_FRAME_H
#define QRS_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "qrs_ipc.pb-c.h"

#define QRS_FRAME_MAGIC 0x51525321u   /* "QRS!" */
#define QRS_PROTO_VERSION 1
#define QRS_FRAME_HDR_SIZE 20
#define QRS_DEFAULT_MAX_FRAME (1024u * 1024u)

/* Message types: append-only, never reused. */
enum qrs_msg_type {
  QRS_MSG_HELLO = 1,
  QRS_MSG_HELLO_REPLY = 2,
  QRS_MSG_DRAW = 3,
  QRS_MSG_DRAW_REPLY = 4,
  QRS_MSG_BYTES = 5,
  QRS_MSG_BYTES_REPLY = 6,
  QRS_MSG_STATUS = 7,
  QRS_MSG_STATUS_REPLY = 8,
  QRS_MSG_HEALTH = 9,
  QRS_MSG_HEALTH_REPLY = 10,
  QRS_MSG_SOURCES = 11,
  QRS_MSG_SOURCES_REPLY = 12,
  QRS_MSG_ERROR = 13,
  QRS_MSG_RELOAD = 14,
  QRS_MSG_RELOAD_REPLY = 15,
  QRS_MSG_SOURCE_CONTROL = 16,
  QRS_MSG_SOURCE_CONTROL_REPLY = 17,
};

struct qrs_frame_hdr {
  uint32_t magic;      /* QRS_FRAME_MAGIC */
  uint16_t version;    /* QRS_PROTO_VERSION */
  uint16_t type;       /* enum qrs_msg_type */
  uint16_t flags;      /* none defined yet: must be 0 */
  uint16_t reserved;   /* must be 0 */
  uint32_t length;     /* payload bytes */
  uint32_t seq;        /* echoed in the reply */
};

/* Write h into out[0..20) in network byte order. */
void qrs__frame_hdr_encode(const struct qrs_frame_hdr *h,
                           uint8_t out[QRS_FRAME_HDR_SIZE]);

/* Parse and check a header.  Returns 0 and fills *ret_hdr; QRS_E_PROTOCOL
   for a bad magic or non-zero flags/reserved; QRS_E_TOO_LARGE when length
   exceeds max_payload (*ret_hdr is filled in that case too, so the caller
   can name the sizes). */
int qrs__frame_hdr_decode(const uint8_t in[QRS_FRAME_HDR_SIZE],
                          uint32_t max_payload, struct qrs_frame_hdr *ret_hdr);

/* The payload descriptor of a message type, or NULL for a type this
   version does not know. */
const ProtobufCMessageDescriptor *qrs__msg_descriptor(uint16_t type);

/* "DRAW", "HELLO_REPLY", ...; "UNKNOWN" for other values. */
const char *qrs__msg_name(uint16_t type);

/* Bytes needed for the frame carrying m (header + payload). */
size_t qrs__frame_size(const ProtobufCMessage *m);

/* Encode header and m into buf (capacity cap).  Returns the frame size, or
   -EMSGSIZE if it does not fit. */
int qrs__frame_pack(uint16_t type, uint32_t seq, const ProtobufCMessage *m,
                    uint8_t *buf, size_t cap);

/* The same when size = qrs__frame_size(m) is known (buf holds size bytes):
   the payload's size is not computed a second time. */
int qrs__frame_pack_sized(uint16_t type, uint32_t seq,
                          const ProtobufCMessage *m, uint8_t *buf,
                          size_t size);

/* Map between QRS_E_* codes and qrs_ipc.ErrorCode values on the wire. */
QrsIpc__ErrorCode qrs__error_to_wire(int err);
int qrs__error_from_wire(int code);

#endif
