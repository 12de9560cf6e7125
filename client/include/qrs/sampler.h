/* libqrs sampling: temperature strategies, token selection and the
   per-token record.  (Filled in by the sampling work, issue 3.) */
#ifndef QRS_SAMPLER_H
#define QRS_SAMPLER_H

#include <qrs/error.h>
#include <qrs/client.h>

#endif
