/* libqrs client internals for tests and tools (not installed, hidden
   symbols). */
#ifndef QRS_CLIENTINT_H
#define QRS_CLIENTINT_H

#include <qrs/client.h>

#include "frame.h"

/* A client on an already connected stream socket fd (non-blocking is set
   here), after its HELLO exchange; it never reconnects.  For the fuzz
   harness of the reply parser, which plays the daemon from a buffer.
   fd belongs to libqrs from the call on (closed on error too). */
int qrs__client_new_fd(int fd, const struct qrs_client_options *opts,
                       struct qrs_client **ret_client);

/* A draw's amplifier parameters (qrs/client.h) into m's fields 20-24;
   w is the caller's storage for the wrappers (lives as long as m). */
struct qrs_amp_params;
struct qrs__amp_wire {
  QrsIpc__DoubleValue mean, std, eps;
  QrsIpc__UInt32Value zcal, ecal;
};
void qrs__amp_to_wire(const struct qrs_amp_params *ap, QrsIpc__Draw *m,
                      struct qrs__amp_wire *w);

#endif
