/* The qsort() comparisons the tools share: ascending order of doubles
   and of int64_t, and SORT_ORDER() for the keys of their own. */
#ifndef QRS_SORTCMP_H
#define QRS_SORTCMP_H

#include <stdint.h>

/* -1, 0 or 1 as x is below, equal to or above y (any arithmetic type;
   each is read twice). */
#define SORT_ORDER(x, y) (((x) > (y)) - ((x) < (y)))

/* The same for a key of two parts: by x1 and y1, then x2 and y2 where
   those are equal. */
#define SORT_ORDER2(x1, y1, x2, y2) \
  ((x1) != (y1) ? SORT_ORDER(x1, y1) : SORT_ORDER(x2, y2))

static inline int
sort_cmp_double(const void *a, const void *b)
{
  return SORT_ORDER(*(const double *)a, *(const double *)b);
}

static inline int
sort_cmp_i64(const void *a, const void *b)
{
  return SORT_ORDER(*(const int64_t *)a, *(const int64_t *)b);
}

#endif
