/* libqrs client internals for tests (not installed, hidden symbols). */
#ifndef QRS_CLIENTINT_H
#define QRS_CLIENTINT_H

#include <qrs/client.h>

/* A client on an already connected stream socket fd (non-blocking is set
   here), after its HELLO exchange; it never reconnects.  For the fuzz
   harness of the reply parser, which plays the daemon from a buffer.
   fd belongs to libqrs from the call on (closed on error too). */
int qrs__client_new_fd(int fd, const struct qrs_client_options *opts,
                       struct qrs_client **ret_client);

#endif
