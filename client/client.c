/* libqrs IPC client (work in progress). */
#include "qrs-config.h"

#include <qrs/client.h>

const char *
qrs_version(void)
{
  return QRS_VERSION;
}
