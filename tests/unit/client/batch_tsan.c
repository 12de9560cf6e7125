/* The batch check as a plain program, for the TSan build in .ci/run
   (criterion does not start under TSan).  Exit 0: a batch on 1 and 2
   threads equals single calls. */
#include <stdio.h>

#include <qrs/qrs.h>

#include "batch_check.h"

int
main(void)
{
  char err[256];
  unsigned t;

  for (t = 1; t <= 2; t++) {
    if (batch_check_same(t, QRS_DTYPE_F32, err, sizeof(err)) != 0 ||
        batch_check_same(t, QRS_DTYPE_BF16, err, sizeof(err)) != 0) {
      fprintf(stderr, "batch_tsan: %u threads: %s\n", t, err);
      return 1;
    }
  }
  printf("batch_tsan: 1 and 2 threads equal single calls\n");
  return 0;
}
