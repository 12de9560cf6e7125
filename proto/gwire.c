/* Hand-written protobuf codec for the EntropyService and PurityService
   messages; see gwire.h for the decoding rules. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "gwire.h"

enum {
  WT_VARINT = 0,
  WT_FIXED64 = 1,
  WT_LEN = 2,
  WT_FIXED32 = 5,
};

size_t
gw_varint_put(uint8_t *buf, uint64_t v)
{
  size_t n = 0;

  while (v >= 0x80) {
    buf[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  buf[n++] = (uint8_t)v;
  return n;
}

static size_t
varint_len(uint64_t v)
{
  size_t n = 1;

  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

/* A growing writer that only counts once the buffer is too small. */
struct writer {
  uint8_t *buf;
  size_t cap;
  size_t len;
};

static void
put_raw(struct writer *w, const void *p, size_t n)
{
  if (w->len + n <= w->cap)
    memcpy(w->buf + w->len, p, n);
  w->len += n;
}

static void
put_varint_field(struct writer *w, unsigned field, uint64_t v)
{
  uint8_t tmp[20];
  size_t n;

  if (v == 0)
    return;
  n = gw_varint_put(tmp, (uint64_t)field << 3 | WT_VARINT);
  n += gw_varint_put(tmp + n, v);
  put_raw(w, tmp, n);
}

static void
put_double_field(struct writer *w, unsigned field, double d)
{
  uint8_t tmp[16];
  uint64_t bits;
  size_t n;
  int i;

  if (d == 0.0 && !signbit(d))
    return;
  memcpy(&bits, &d, sizeof(bits));
  n = gw_varint_put(tmp, (uint64_t)field << 3 | WT_FIXED64);
  for (i = 0; i < 8; i++)
    tmp[n++] = (uint8_t)(bits >> (8 * i));
  put_raw(w, tmp, n);
}

static void
put_bytes_field(struct writer *w, unsigned field, const struct gw_slice *s)
{
  uint8_t tmp[20];
  size_t n;

  if (s->len == 0)
    return;
  n = gw_varint_put(tmp, (uint64_t)field << 3 | WT_LEN);
  n += gw_varint_put(tmp + n, s->len);
  put_raw(w, tmp, n);
  put_raw(w, s->data, s->len);
}

size_t
gw_entropy_req_encode(const struct gw_entropy_req *m, uint8_t *buf,
                      size_t cap)
{
  struct writer w = { buf, cap, 0 };

  put_varint_field(&w, 1, m->bytes_needed);
  put_varint_field(&w, 2, m->sequence_id);
  return w.len;
}

size_t
gw_entropy_resp_encode(const struct gw_entropy_resp *m, uint8_t *buf,
                       size_t cap)
{
  struct writer w = { buf, cap, 0 };

  put_bytes_field(&w, 1, &m->data);
  put_varint_field(&w, 2, m->sequence_id);
  put_varint_field(&w, 3, m->generation_timestamp_ns);
  put_bytes_field(&w, 4, &m->device_id);
  return w.len;
}

size_t
gw_entropy_resp_bound(size_t n, size_t device_id_len)
{
  return 1 + varint_len(n) + n + 2 * 11 + 1 + varint_len(device_id_len) +
         device_id_len;
}

size_t
gw_draw_req_encode(const struct gw_draw_req *m, uint8_t *buf, size_t cap)
{
  struct writer w = { buf, cap, 0 };

  put_varint_field(&w, 1, m->sequence_id);
  put_bytes_field(&w, 2, &m->source_id);
  put_varint_field(&w, 3, m->block_bytes);
  return w.len;
}

size_t
gw_draw_resp_encode(const struct gw_draw_resp *m, uint8_t *buf, size_t cap)
{
  struct writer w = { buf, cap, 0 };

  put_double_field(&w, 1, m->u);
  put_double_field(&w, 2, m->z);
  put_varint_field(&w, 3, m->sequence_id);
  put_varint_field(&w, 4, m->generation_timestamp_ns);
  put_bytes_field(&w, 5, &m->source_id);
  put_double_field(&w, 6, m->coherence_z);
  put_varint_field(&w, 7, m->coherence_valid ? 1 : 0);
  put_bytes_field(&w, 8, &m->purity_label);
  put_varint_field(&w, 9, m->integrated_bytes);
  put_bytes_field(&w, 10, &m->integrator);
  put_double_field(&w, 11, m->coherence_r);
  return w.len;
}

/* One decoded field. */
struct field {
  unsigned num;
  unsigned wt;
  uint64_t v;                   /* varint value or fixed64 bits */
  struct gw_slice s;            /* length-delimited payload */
};

static int
get_varint(const uint8_t *buf, size_t len, size_t *pos, uint64_t *ret)
{
  uint64_t v = 0;
  unsigned shift = 0;

  while (*pos < len && shift < 64) {
    uint8_t b = buf[(*pos)++];

    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *ret = v;
      return 0;
    }
    shift += 7;
  }
  return -EBADMSG;
}

/* Next field at *pos: 1 with *f filled, 0 at the end (or at a wire type
   that stops parsing), -EBADMSG when truncated. */
static int
next_field(const uint8_t *buf, size_t len, size_t *pos, struct field *f)
{
  uint64_t tag, n;
  int i;

  if (*pos >= len)
    return 0;
  if (get_varint(buf, len, pos, &tag) < 0)
    return -EBADMSG;
  f->num = tag >> 3 > 0xffffffffu ? 0 : (unsigned)(tag >> 3);
  f->wt = tag & 7;
  switch (f->wt) {
  case WT_VARINT:
    return get_varint(buf, len, pos, &f->v) < 0 ? -EBADMSG : 1;
  case WT_FIXED64:
    if (len - *pos < 8)
      return -EBADMSG;
    f->v = 0;
    for (i = 7; i >= 0; i--)
      f->v = f->v << 8 | buf[*pos + (size_t)i];
    *pos += 8;
    return 1;
  case WT_LEN:
    if (get_varint(buf, len, pos, &n) < 0 || n > len - *pos)
      return -EBADMSG;
    f->s.data = buf + *pos;
    f->s.len = (size_t)n;
    *pos += (size_t)n;
    return 1;
  case WT_FIXED32:
    if (len - *pos < 4)
      return -EBADMSG;
    *pos += 4;
    return 1;
  default:
    *pos = len;
    return 0;
  }
}

static double
bits_double(uint64_t bits)
{
  double d;

  memcpy(&d, &bits, sizeof(d));
  return d;
}

/* The decoders share one loop: the per-message part maps (num, wt) to a
   member. */
#define DECODE_LOOP(buf, len, f, body)                  \
  do {                                                  \
    size_t pos_ = 0;                                    \
    int r_;                                             \
                                                        \
    for (;;) {                                          \
      r_ = next_field((buf), (len), &pos_, &(f));       \
      if (r_ < 0)                                       \
        return r_;                                      \
      if (r_ == 0)                                      \
        break;                                          \
      body                                              \
    }                                                   \
  } while (0)

int
gw_entropy_req_decode(const uint8_t *buf, size_t len,
                      struct gw_entropy_req *m)
{
  struct field f;

  memset(m, 0, sizeof(*m));
  DECODE_LOOP(buf, len, f, {
    if (f.num == 1 && f.wt == WT_VARINT)
      m->bytes_needed = f.v;
    else if (f.num == 2 && f.wt == WT_VARINT)
      m->sequence_id = f.v;
  });
  return 0;
}

int
gw_entropy_resp_decode(const uint8_t *buf, size_t len,
                       struct gw_entropy_resp *m)
{
  struct field f;

  memset(m, 0, sizeof(*m));
  DECODE_LOOP(buf, len, f, {
    if (f.num == 1 && f.wt == WT_LEN)
      m->data = f.s;
    else if (f.num == 2 && f.wt == WT_VARINT)
      m->sequence_id = f.v;
    else if (f.num == 3 && f.wt == WT_VARINT)
      m->generation_timestamp_ns = f.v;
    else if (f.num == 4 && f.wt == WT_LEN)
      m->device_id = f.s;
  });
  return 0;
}

int
gw_draw_req_decode(const uint8_t *buf, size_t len, struct gw_draw_req *m)
{
  struct field f;

  memset(m, 0, sizeof(*m));
  DECODE_LOOP(buf, len, f, {
    if (f.num == 1 && f.wt == WT_VARINT)
      m->sequence_id = f.v;
    else if (f.num == 2 && f.wt == WT_LEN)
      m->source_id = f.s;
    else if (f.num == 3 && f.wt == WT_VARINT)
      m->block_bytes = f.v;
  });
  return 0;
}

int
gw_draw_resp_decode(const uint8_t *buf, size_t len, struct gw_draw_resp *m)
{
  struct field f;

  memset(m, 0, sizeof(*m));
  DECODE_LOOP(buf, len, f, {
    switch (f.num > 15 ? 0 : f.num << 3 | f.wt) {
    case 1 << 3 | WT_FIXED64: m->u = bits_double(f.v); break;
    case 2 << 3 | WT_FIXED64: m->z = bits_double(f.v); break;
    case 3 << 3 | WT_VARINT: m->sequence_id = f.v; break;
    case 4 << 3 | WT_VARINT: m->generation_timestamp_ns = f.v; break;
    case 5 << 3 | WT_LEN: m->source_id = f.s; break;
    case 6 << 3 | WT_FIXED64: m->coherence_z = bits_double(f.v); break;
    case 7 << 3 | WT_VARINT: m->coherence_valid = f.v != 0; break;
    case 8 << 3 | WT_LEN: m->purity_label = f.s; break;
    case 9 << 3 | WT_VARINT: m->integrated_bytes = f.v; break;
    case 10 << 3 | WT_LEN: m->integrator = f.s; break;
    case 11 << 3 | WT_FIXED64: m->coherence_r = bits_double(f.v); break;
    default: break;
    }
  });
  return 0;
}
