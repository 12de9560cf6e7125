/* A bounded string copy for the draw path, where snprintf(dst, cap, "%s",
   src) costs a formatted-output call per name (glibc 2.36 has no
   strlcpy). */
#ifndef QRS_STRCOPY_H
#define QRS_STRCOPY_H

#include <stddef.h>

/* Copy src (NULL: "") into dst of cap > 0 bytes, truncated to cap - 1
   bytes and always NUL-terminated. */
static inline void
str_copy(char *dst, size_t cap, const char *src)
{
  size_t n;

  n = 0;
  if (src)
    for (; n + 1 < cap && src[n]; n++)
      dst[n] = src[n];
  dst[n] = '\0';
}

#endif
