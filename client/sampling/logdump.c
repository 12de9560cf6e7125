/* The logits dump (qrs_sampler_set_logits_dump()): every selected token's
   logits row, bit for bit as the engine passed it, after a header with
   the sampler's effective configuration, so that qrs-audit can select
   each token again from its row and u and compare it with the record.
   The layout is in qrs/sampler.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qrs/sampler.h>

#include "sampling.h"

static void
put_u32(unsigned char *p, uint32_t v)
{
  int i;

  for (i = 0; i < 4; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

static void
put_u64(unsigned char *p, uint64_t v)
{
  int i;

  for (i = 0; i < 8; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

/* The header text: "config_hash=H\n", then "field=value\n" for every
   field in qrs_sampler_field_name() order.  Returns its length or
   -ENOMEM / -EINVAL; *ret is malloc'd. */
static int
header_text(const struct qrs__cfgvals *cfg, const char *config_hash,
            char **ret)
{
  char val[128], *p, *np;
  const char *name;
  size_t len = 0, cap = 4096, need;
  int r, i;

  p = malloc(cap);
  if (!p)
    return -ENOMEM;
  len = (size_t)snprintf(p, cap, "config_hash=%s\n", config_hash);
  for (i = 0; (name = qrs_sampler_field_name((size_t)i)); i++) {
    r = qrs__cfgvals_text(cfg, name, val, sizeof(val));
    if (r < 0 || (size_t)r >= sizeof(val)) {
      free(p);
      return r < 0 ? r : -EINVAL;
    }
    need = strlen(name) + (size_t)r + 3;
    if (len + need > cap) {
      np = realloc(p, cap * 2 + need);
      if (!np) {
        free(p);
        return -ENOMEM;
      }
      p = np;
      cap = cap * 2 + need;
    }
    len += (size_t)snprintf(p + len, cap - len, "%s=%s\n", name, val);
  }
  *ret = p;
  return (int)len;
}

int
qrs__logits_dump_open(const char *path, const struct qrs__cfgvals *cfg,
                      const char *config_hash, FILE **ret_f)
{
  unsigned char head[16];
  char *text;
  FILE *f;
  int len, r;

  len = header_text(cfg, config_hash, &text);
  if (len < 0)
    return len;
  /* stdio's own buffer: a row (594 KiB for 151,936 f32) is larger, and
     glibc writes it straight from the caller's memory */
  f = fopen(path, "we");
  if (!f) {
    r = -errno;
    free(text);
    return r;
  }
  memcpy(head, QRS_LOGITS_DUMP_MAGIC, 8);
  put_u32(head + 8, QRS_LOGITS_DUMP_VERSION);
  put_u32(head + 12, (uint32_t)len);
  if (fwrite(head, 1, sizeof head, f) != sizeof head ||
      fwrite(text, 1, (size_t)len, f) != (size_t)len || fflush(f) != 0) {
    r = errno ? -errno : -EIO;
    fclose(f);
    free(text);
    return r;
  }
  free(text);
  *ret_f = f;
  return 0;
}

void
qrs__logits_dump_row(FILE *f, const void *logits, enum qrs_dtype dtype,
                     size_t n, uint64_t step, int64_t timestamp_ns)
{
  unsigned char head[QRS_LOGITS_FRAME_HEADER];

  memcpy(head, QRS_LOGITS_FRAME_MAGIC, 8);
  put_u32(head + 8, (uint32_t)dtype);
  put_u32(head + 12, 0);
  put_u64(head + 16, step);
  put_u64(head + 24, (uint64_t)timestamp_ns);
  put_u64(head + 32, (uint64_t)n);
  /* a failing write never fails the token; qrs-audit names the rows
     that are missing */
  if (fwrite(head, 1, sizeof head, f) == sizeof head)
    (void)fwrite(logits, qrs__dtype_size(dtype), n, f);
}
