/* The status file; see statusfile.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jsonfield.h"

#include "persist/atomicfile.h"
#include "persist/statusfile.h"

#define STATUS_MAX (1 << 20)

static const char *const gate_keys[] = {
  "gate_open", "gate_boost", "coherence_valid",
};

/* The reference's keys. */
static const struct jsonfield summary_rows[] = {
  JSONFIELD_ROW("primary_name", CSTR, struct status_summary, primary_name),
  JSONFIELD_ROW("fallback_name", CSTR, struct status_summary,
                fallback_name),
  JSONFIELD_ROW("last_source_used", CSTR, struct status_summary,
                last_source_used),
  JSONFIELD_ROW("fallback_count", I64, struct status_summary,
                fallback_count),
  JSONFIELD_ROW("currently_degraded", BOOL, struct status_summary,
                currently_degraded),
};

static const struct jsonfield_table summary_table =
  JSONFIELD_TABLE(summary_rows);

int
statusfile_init(struct statusfile *sf, const char *path)
{
  memset(sf, 0, sizeof(*sf));
  if (!path || !*path)
    return 0;
  sf->path = strdup(path);
  return sf->path ? 0 : -ENOMEM;
}

void
statusfile_done(struct statusfile *sf)
{
  free(sf->path);
  sf->path = NULL;
}

/* The gate keys of the current file, copied into out. */
static void
carry_gate_keys(const char *path, struct json_object *out)
{
  struct json_object *cur, *v;
  char *text;
  size_t i;

  if (atomicfile_read(path, STATUS_MAX, &text, NULL) < 0)
    return;
  cur = json_tokener_parse(text);
  free(text);
  if (!cur)
    return;
  if (json_object_is_type(cur, json_type_object)) {
    for (i = 0; i < sizeof(gate_keys) / sizeof(gate_keys[0]); i++)
      if (json_object_object_get_ex(cur, gate_keys[i], &v))
        json_object_object_add(out, gate_keys[i], json_object_get(v));
  }
  json_object_put(cur);
}

int
statusfile_update(struct statusfile *sf, const struct status_summary *s,
                  struct json_object *extra, int force, double now_mono)
{
  struct json_object *o;
  struct timespec ts;
  const char *text;
  size_t len;
  int r;

  if (!sf->path)
    return 0;
  if (!force && sf->writes > 0 && now_mono - sf->last_write < 1.0)
    return 0;
  o = json_object_new_object();
  if (!o)
    return -ENOMEM;
  carry_gate_keys(sf->path, o);
  r = jsonfield_add_all(o, &summary_table, s);
  if (r < 0) {
    json_object_put(o);
    return r;
  }
  if (extra) {
    struct json_object_iter it;

    json_object_object_foreachC(extra, it)
      json_object_object_add(o, it.key, json_object_get(it.val));
  }
  clock_gettime(CLOCK_REALTIME, &ts);
  json_object_object_add(o, "updated_at",
                         json_object_new_double((double)ts.tv_sec +
                                                ts.tv_nsec / 1e9));
  text = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN |
                                              JSON_C_TO_STRING_NOSLASHESCAPE,
                                           &len);
  r = atomicfile_write(sf->path, text, len, 0);
  json_object_put(o);
  sf->last_error = r;
  if (r < 0)
    return r;
  sf->last_write = now_mono;
  sf->writes++;
  return 1;
}
