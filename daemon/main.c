/* qrsd: the qrs entropy daemon (work in progress). */
#include <stdio.h>

int
main(void)
{
  return 0;
}
