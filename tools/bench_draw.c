/* qrs-bench draw (work in progress). */
#include <stdio.h>

#include "bench.h"

int
bench_draw(int argc, char **argv)
{
  fprintf(stderr, "qrs-bench draw: not built yet\n");
  return 1;
}
