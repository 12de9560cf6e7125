/* libqrs: entropy-driven token sampling.  The umbrella header. */
#ifndef QRS_QRS_H
#define QRS_QRS_H

#include <qrs/error.h>
#include <qrs/client.h>
#include <qrs/sampler.h>
#include <qrs/roller.h>
#include <qrs/batch.h>

#endif
