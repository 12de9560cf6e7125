/* The status file; see statusfile.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jsonfield.h"

#include "base/regfile.h"
#include "persist/atomicfile.h"
#include "persist/statusfile.h"

static const char *const gate_keys[] = {
  "gate_open", "gate_boost", "coherence_valid",
};

#define N_GATE_KEYS (sizeof(gate_keys) / sizeof(gate_keys[0]))
#define GATE_VALUE_MAX 64
#define GATES_MAX (N_GATE_KEYS * (GATE_VALUE_MAX + 24))
#define JSON_FLAGS (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)

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

int
statusfile_due(const struct statusfile *sf, int force, double now_mono)
{
  if (!sf->path)
    return 0;
  return force || sf->snapshots == 0 || now_mono - sf->last_snapshot >= 1.0;
}

int
statusfile_snapshot(struct statusfile *sf, const struct status_summary *s,
                    struct json_object *extra, double now_mono,
                    char **ret_text, size_t *ret_len)
{
  struct json_object_iter it;
  struct json_object *o;
  const char *text;
  size_t len;
  int r;

  o = json_object_new_object();
  if (!o)
    return -ENOMEM;
  r = jsonfield_add_all(o, &summary_table, s);
  if (r < 0)
    goto done;
  if (extra) {
    json_object_object_foreachC(extra, it)
      json_object_object_add(o, it.key, json_object_get(it.val));
  }
  text = json_object_to_json_string_length(o, JSON_FLAGS, &len);
  if (!text) {
    r = -ENOMEM;
    goto done;
  }
  /* "{...}" with at least the reference's keys inside. */
  if (len > STATUSFILE_MAX || len < 2) {
    r = -EFBIG;
    goto done;
  }
  *ret_text = strdup(text);
  if (!*ret_text) {
    r = -ENOMEM;
    goto done;
  }
  *ret_len = len;
  sf->last_snapshot = now_mono;
  sf->snapshots++;

done:
  json_object_put(o);
  return r;
}

/* The gate keys of the file at path, as text ('"k":v,' each) into
   out (GATES_MAX bytes); a value longer than GATE_VALUE_MAX (they are
   booleans and a number) is left out.  A file that is not a regular one
   is not read: *ret_odd gets 1 and err what it is. */
static void
gate_text(const char *path, char *out, int *ret_odd, char *err,
          size_t errlen)
{
  struct json_object *cur, *v;
  size_t i, len = 0;
  const char *vt;
  char *text;
  int r;

  out[0] = '\0';
  *ret_odd = 0;
  r = regfile_read(path, 0, STATUSFILE_MAX, &text, NULL, err, errlen);
  if (r < 0) {
    *ret_odd = r == -ELOOP || r == -EINVAL;
    return;
  }
  cur = json_tokener_parse(text);
  free(text);
  if (cur && json_object_is_type(cur, json_type_object)) {
    for (i = 0; i < N_GATE_KEYS; i++) {
      if (!json_object_object_get_ex(cur, gate_keys[i], &v))
        continue;
      vt = json_object_to_json_string_ext(v, JSON_FLAGS);
      if (vt && strlen(vt) <= GATE_VALUE_MAX)
        len += (size_t)snprintf(out + len, GATES_MAX - len, "\"%s\":%s,",
                                gate_keys[i], vt);
    }
  }
  json_object_put(cur);
}

int
statusfile_write(const char *path, const char *text, size_t len, char *err,
                 size_t errlen)
{
  char gates[GATES_MAX], at[48], msg[128], *out;
  struct timespec ts;
  size_t glen, n;
  int odd, r;

  if (len < 2 || text[0] != '{' || text[len - 1] != '}')
    return -EINVAL;
  gate_text(path, gates, &odd, err, errlen);
  glen = strlen(gates);
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(at, sizeof(at), "%s\"updated_at\":%.6f}", len > 2 ? "," : "",
           (double)ts.tv_sec + ts.tv_nsec / 1e9);
  out = malloc(1 + glen + len + sizeof(at));
  if (!out) {
    snprintf(err, errlen, "%s: out of memory", path);
    return -ENOMEM;
  }
  /* "{" gates, the snapshot's keys, updated_at "}" */
  out[0] = '{';
  memcpy(out + 1, gates, glen);
  memcpy(out + 1 + glen, text + 1, len - 2);
  n = 1 + glen + len - 2;
  memcpy(out + n, at, strlen(at));
  n += strlen(at);
  r = atomicfile_write(path, out, n, 0);
  free(out);
  if (r < 0) {
    snprintf(err, errlen, "%s: %s", path, strerror_r(-r, msg, sizeof(msg)));
    return r;
  }
  if (odd) {
    /* err has "<path>: a FIFO, not a regular file..." */
    n = strlen(err);
    snprintf(err + n, errlen - n, "; replaced by a new status file");
    return 1;
  }
  return 0;
}
