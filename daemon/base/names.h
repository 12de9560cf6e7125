/* The names of an enum's values: a table of strings indexed by the value
   (designated initialisers; a hole is NULL), read both ways.  For the
   modes and kinds that the config and status spell out. */
#ifndef QRSD_NAMES_H
#define QRSD_NAMES_H

#include <stddef.h>
#include <string.h>

/* The value named s, or -1. */
static inline int
names_find(const char *const *names, size_t n, const char *s)
{
  size_t i;

  for (i = 0; i < n; i++)
    if (names[i] && strcmp(names[i], s) == 0)
      return (int)i;
  return -1;
}

/* The name of v, or unknown when the table has none. */
static inline const char *
names_name(const char *const *names, size_t n, int v, const char *unknown)
{
  if (v < 0 || (size_t)v >= n || !names[v])
    return unknown;
  return names[v];
}

#define NAMES_FIND(table, s) \
  names_find((table), sizeof(table) / sizeof((table)[0]), (s))
#define NAMES_NAME(table, v, unknown) \
  names_name((table), sizeof(table) / sizeof((table)[0]), (int)(v), \
             (unknown))

/* Define the pair of functions a module exports for an enum it names:
     int parse(const char *s, enum_type *ret): 0, or -EINVAL for a name
       the table does not have (*ret set only on success);
     const char *name(enum_type v): its name, or unknown.
   The file includes <errno.h>. */
#define NAMES_DEFINE(parse, name, enum_type, table, unknown) \
  int \
  parse(const char *s, enum_type *ret) \
  { \
    int v; \
    v = NAMES_FIND(table, s); \
    if (v < 0) \
      return -EINVAL; \
    *ret = (enum_type)v; \
    return 0; \
  } \
  const char * \
  name(enum_type v) \
  { \
    return NAMES_NAME(table, v, unknown); \
  }

#endif
