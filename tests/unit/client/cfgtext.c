/* The reference vectors' config values as config text (cfgtext.h). */
#include <stdio.h>

#include "cfgtext.h"
#include "sampling/sampling.h"

void
cfg_text(struct json_object *v, char *buf, size_t len)
{
  if (json_object_is_type(v, json_type_boolean))
    snprintf(buf, len, "%s", json_object_get_boolean(v) ? "true" : "false");
  else if (json_object_is_type(v, json_type_int))
    snprintf(buf, len, "%lld", (long long)json_object_get_int64(v));
  else if (json_object_is_type(v, json_type_double))
    qrs__fmt_double(json_object_get_double(v), buf, len);
  else
    snprintf(buf, len, "%s", json_object_get_string(v));
}
