/* A source registry on a libuv loop for the unit tests of the registry
   and of the sources behind it (testreg.c; links qrsd's internals). */
#ifndef QRS_TESTREG_H
#define QRS_TESTREG_H

#include <stddef.h>

#include <uv.h>

#include "engine/registry.h"

/* Initialise loop and build a registry on it from the sources config in
   yaml (limits: 64 KiB inline reads, bytes_max bytes in flight); fails
   the test on error.  Free with testreg_free(). */
struct registry *testreg_new(uv_loop_t *loop, const char *yaml,
                             size_t bytes_max);

/* Stop reg, run loop until everything it started has closed, free reg
   and close loop (which must then have no handle left). */
void testreg_free(uv_loop_t *loop, struct registry *reg);

/* Run loop until *calls is non-zero (a done callback counted). */
void testreg_wait(uv_loop_t *loop, const int *calls);

#endif
