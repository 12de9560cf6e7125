/* The reference vectors' config values for the sampler's config parser
   (cfgtext.c; the client suites that load config values from JSON). */
#ifndef QRS_TEST_CFGTEXT_H
#define QRS_TEST_CFGTEXT_H

#include <stddef.h>

#include <json-c/json.h>

/* A JSON scalar as the text qrs_sampler_config_set() takes: true/false,
   an integer, a double in qrs's round-trip format, or the string. */
void cfg_text(struct json_object *v, char *buf, size_t len);

#endif
