/* The qsort() comparisons the tools share: ascending order of doubles
   and of int64_t. */
#ifndef QRS_SORTCMP_H
#define QRS_SORTCMP_H

#include <stdint.h>

static inline int
sort_cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;

  return (x > y) - (x < y);
}

static inline int
sort_cmp_i64(const void *a, const void *b)
{
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

  return (x > y) - (x < y);
}

#endif
