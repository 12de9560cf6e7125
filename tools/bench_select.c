/* qrs-bench select (work in progress). */
#include <stdio.h>

#include "bench.h"

int
bench_select(int argc, char **argv)
{
  fprintf(stderr, "qrs-bench select: not built yet\n");
  return 1;
}
