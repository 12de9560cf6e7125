/* The draw journal's state for the status file and the reports; see
   journal.h.  Only the journal's public functions: no lock of its own. */
#include <string.h>

#include <json-c/json.h>

#include "persist/journal.h"

const char *
journal_state_name(enum journal_state s)
{
  switch (s) {
  case JOURNAL_OK: return "ok";
  case JOURNAL_QUEUE_FULL: return "queue-full";
  case JOURNAL_WRITE_ERROR: return "write-error";
  case JOURNAL_STOPPED: return "stopped";
  }
  return "?";
}

struct json_object *
journal_status_json(struct journal *j)
{
  struct json_object *o = json_object_new_object();
  char head[JOURNAL_HEX_LEN + 1];
  enum journal_state st;
  uint64_t seq, first, last;
  int err;

  if (o == NULL)
    return NULL;
  st = journal_state(j, &err);
  journal_head(j, head, &seq);
  json_object_object_add(o, "state",
                         json_object_new_string(journal_state_name(st)));
  if (st == JOURNAL_WRITE_ERROR)
    json_object_object_add(o, "error", json_object_new_string(strerror(err)));
  json_object_object_add(o, "on_error", json_object_new_string(
                         journal_serves_unjournalled(j) ? "label" :
                         "stop"));
  json_object_object_add(o, "head", json_object_new_string(head));
  json_object_object_add(o, "seq", json_object_new_uint64(seq));
  journal_lost(j, &first, &last);
  if (first != 0) {
    json_object_object_add(o, "lost_first", json_object_new_uint64(first));
    json_object_object_add(o, "lost_last", json_object_new_uint64(last));
  }
  json_object_object_add(o, "hashed_inline",
                         json_object_new_uint64(journal_hashed_inline(j)));
  return o;
}
