/* Sources, and a source registry on a libuv loop, for the unit tests of
   the registry and of the sources behind it (testreg.c; links qrsd's
   internals). */
#ifndef QRS_TESTREG_H
#define QRS_TESTREG_H

#include <stddef.h>

#include <uv.h>

#include "engine/registry.h"
#include "sources/source.h"

/* source_new() for a source called name of type with the mock's seed and
   mean shift (the other fields zero, no loop): its result, the source in
   *ret_src. */
int testsrc_new(enum conf_source_type type, const char *name, uint64_t seed,
                double shift, struct source **ret_src, char *err,
                size_t errlen);

/* testsrc_new() that must succeed.  Free with source_free(). */
struct source *testsrc_open(enum conf_source_type type, const char *name,
                            uint64_t seed, double shift);

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
