/* Frame header codec and message-type table, shared by libqrs and qrsd. */
#include <errno.h>
#include <string.h>
#include <arpa/inet.h>

#include <qrs/error.h>

#include "frame.h"

_Static_assert(sizeof(struct qrs_frame_hdr) == QRS_FRAME_HDR_SIZE,
               "wire header size");

static const struct {
  const char *name;
  const ProtobufCMessageDescriptor *desc;
} msg_table[] = {
  [QRS_MSG_HELLO] = { "HELLO", &qrs_ipc__hello__descriptor },
  [QRS_MSG_HELLO_REPLY] = { "HELLO_REPLY", &qrs_ipc__hello_reply__descriptor },
  [QRS_MSG_DRAW] = { "DRAW", &qrs_ipc__draw__descriptor },
  [QRS_MSG_DRAW_REPLY] = { "DRAW_REPLY", &qrs_ipc__draw_reply__descriptor },
  [QRS_MSG_BYTES] = { "BYTES", &qrs_ipc__bytes__descriptor },
  [QRS_MSG_BYTES_REPLY] = { "BYTES_REPLY", &qrs_ipc__bytes_reply__descriptor },
  [QRS_MSG_STATUS] = { "STATUS", &qrs_ipc__status__descriptor },
  [QRS_MSG_STATUS_REPLY] = { "STATUS_REPLY",
                             &qrs_ipc__status_reply__descriptor },
  [QRS_MSG_HEALTH] = { "HEALTH", &qrs_ipc__health__descriptor },
  [QRS_MSG_HEALTH_REPLY] = { "HEALTH_REPLY",
                             &qrs_ipc__health_reply__descriptor },
  [QRS_MSG_SOURCES] = { "SOURCES", &qrs_ipc__sources__descriptor },
  [QRS_MSG_SOURCES_REPLY] = { "SOURCES_REPLY",
                              &qrs_ipc__sources_reply__descriptor },
  [QRS_MSG_ERROR] = { "ERROR", &qrs_ipc__error__descriptor },
  [QRS_MSG_RELOAD] = { "RELOAD", &qrs_ipc__reload__descriptor },
  [QRS_MSG_RELOAD_REPLY] = { "RELOAD_REPLY",
                             &qrs_ipc__reload_reply__descriptor },
  [QRS_MSG_SOURCE_CONTROL] = { "SOURCE_CONTROL",
                               &qrs_ipc__source_control__descriptor },
  [QRS_MSG_SOURCE_CONTROL_REPLY] = {
    "SOURCE_CONTROL_REPLY", &qrs_ipc__source_control_reply__descriptor },
};

#define N_MSG (sizeof(msg_table) / sizeof(msg_table[0]))

static void
put16(uint8_t *p, uint16_t v)
{
  v = htons(v);
  memcpy(p, &v, 2);
}

static void
put32(uint8_t *p, uint32_t v)
{
  v = htonl(v);
  memcpy(p, &v, 4);
}

static uint16_t
get16(const uint8_t *p)
{
  uint16_t v;

  memcpy(&v, p, 2);
  return ntohs(v);
}

static uint32_t
get32(const uint8_t *p)
{
  uint32_t v;

  memcpy(&v, p, 4);
  return ntohl(v);
}

void
qrs__frame_hdr_encode(const struct qrs_frame_hdr *h,
                      uint8_t out[QRS_FRAME_HDR_SIZE])
{
  put32(out + 0, h->magic);
  put16(out + 4, h->version);
  put16(out + 6, h->type);
  put16(out + 8, h->flags);
  put16(out + 10, h->reserved);
  put32(out + 12, h->length);
  put32(out + 16, h->seq);
}

int
qrs__frame_hdr_decode(const uint8_t in[QRS_FRAME_HDR_SIZE],
                      uint32_t max_payload, struct qrs_frame_hdr *ret_hdr)
{
  struct qrs_frame_hdr h;

  h.magic = get32(in + 0);
  h.version = get16(in + 4);
  h.type = get16(in + 6);
  h.flags = get16(in + 8);
  h.reserved = get16(in + 10);
  h.length = get32(in + 12);
  h.seq = get32(in + 16);

  if (h.magic != QRS_FRAME_MAGIC || h.flags != 0 || h.reserved != 0)
    return QRS_E_PROTOCOL;
  *ret_hdr = h;
  if (h.length > max_payload)
    return QRS_E_TOO_LARGE;
  return 0;
}

const ProtobufCMessageDescriptor *
qrs__msg_descriptor(uint16_t type)
{
  if (type >= N_MSG)
    return NULL;
  return msg_table[type].desc;
}

const char *
qrs__msg_name(uint16_t type)
{
  if (type >= N_MSG || !msg_table[type].name)
    return "UNKNOWN";
  return msg_table[type].name;
}

size_t
qrs__frame_size(const ProtobufCMessage *m)
{
  return QRS_FRAME_HDR_SIZE + protobuf_c_message_get_packed_size(m);
}

int
qrs__frame_pack(uint16_t type, uint32_t seq, const ProtobufCMessage *m,
                uint8_t *buf, size_t cap)
{
  size_t size;

  size = qrs__frame_size(m);
  if (size > cap)
    return -EMSGSIZE;
  return qrs__frame_pack_sized(type, seq, m, buf, size);
}

int
qrs__frame_pack_sized(uint16_t type, uint32_t seq, const ProtobufCMessage *m,
                      uint8_t *buf, size_t size)
{
  struct qrs_frame_hdr h;
  size_t len;

  if (size < QRS_FRAME_HDR_SIZE || size - QRS_FRAME_HDR_SIZE > INT32_MAX - 64)
    return -EMSGSIZE;
  len = size - QRS_FRAME_HDR_SIZE;
  h.magic = QRS_FRAME_MAGIC;
  h.version = QRS_PROTO_VERSION;
  h.type = type;
  h.flags = 0;
  h.reserved = 0;
  h.length = (uint32_t)len;
  h.seq = seq;
  qrs__frame_hdr_encode(&h, buf);
  /* protobuf-c writes exactly get_packed_size() bytes; a size that was
     not computed for m is caught here, after the fact but before the
     frame is used */
  if (protobuf_c_message_pack(m, buf + QRS_FRAME_HDR_SIZE) != len)
    return -EMSGSIZE;
  return (int)size;
}

QrsIpc__ErrorCode
qrs__error_to_wire(int err)
{
  if ((err <= QRS_E_PROTOCOL && err >= QRS_E_HELLO_REQUIRED) ||
      err == QRS_E_AMP_PARAMS || err == QRS_E_CALIBRATION ||
      err == QRS_E_PERMISSION || err == QRS_E_BAD_CONFIG)
    return (QrsIpc__ErrorCode)(-err - 1000);
  if (err == -ETIMEDOUT)
    return QRS_IPC__ERROR_CODE__ERROR_TIMEOUT;
  if (err == -ENOMEM)
    return QRS_IPC__ERROR_CODE__ERROR_BUSY;
  return QRS_IPC__ERROR_CODE__ERROR_INTERNAL;
}

int
qrs__error_from_wire(int code)
{
  if ((code >= 1 && code <= -QRS_E_HELLO_REQUIRED - 1000) ||
      code == -QRS_E_AMP_PARAMS - 1000 || code == -QRS_E_CALIBRATION - 1000 ||
      code == -QRS_E_PERMISSION - 1000 || code == -QRS_E_BAD_CONFIG - 1000)
    return -1000 - code;
  return QRS_E_INTERNAL;
}
