/* The api keys of the gRPC endpoint (grpc_compat.api_keys): who may draw,
   from which sources, how much and how many at once.

   The key file has one client a line (blank lines and '#' comments
   skipped):

     NAME SHA256HEX [sources=a,b] [bytes_per_request=N]
          [requests_per_minute=N] [bytes_per_day=N] [streams=N]
          [in_flight=N]

   NAME is 1..64 of [A-Za-z0-9._-] (it names the client in the log and
   the status file, and its quota state file "quota-key-NAME.json");
   SHA256HEX is the SHA-256 of the key, 64 hex digits (`qrsctl hash-key`
   prints it).  A limit of 0 or one left out is unlimited, except
   streams and in_flight (defaults APIKEY_DEFAULT_STREAMS and
   APIKEY_DEFAULT_IN_FLIGHT); sources defaults to the endpoint's source.

   The key file holds hashes only; a presented key is hashed and compared
   with every entry in constant time (CRYPTO_memcmp, no early exit), and
   never kept or logged.  The daily byte count and the per-minute window
   persist in the state directory like an upstream's quota (persist/
   quota.h), written on a worker thread.  The file is read at start (a
   change takes effect at the next restart).  Loop thread only. */
#ifndef QRSD_APIKEYS_H
#define QRSD_APIKEYS_H

#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>
#include <uv.h>

#include "persist/quota.h"

#define APIKEY_MAX_KEYS 1024
#define APIKEY_MAX_NAME 64
#define APIKEY_MAX_SOURCES 16
#define APIKEY_MAX_FILE (1 << 20)
#define APIKEY_DEFAULT_STREAMS 64
#define APIKEY_DEFAULT_IN_FLIGHT 256
#define APIKEY_MAX_LEN 4096         /* a longer presented key is refused */

struct apikeys;

struct apikey {
  struct apikeys *set;
  char name[APIKEY_MAX_NAME + 1];
  uint8_t hash[32];
  char *sources[APIKEY_MAX_SOURCES];  /* none: the endpoint's source */
  size_t n_sources;
  uint64_t max_bytes_per_request;     /* 0: unlimited */
  uint32_t max_streams, max_in_flight;
  struct quota quota;                 /* requests/min, bytes/day */
  int writing;                        /* a state write in flight */
  int flushed;                        /* the final count was queued */
  int persist_logged;
  /* use */
  uint32_t streams, in_flight;
  uint64_t requests, bytes;
  uint64_t refused_size, refused_quota, refused_concurrency,
           refused_source;
};

/* Read the key file at path and each key's persisted quota state from
   state_dir (NULL: none).  0 and *ret, or a negative errno with err
   naming the file and line. */
int apikeys_load(uv_loop_t *loop, const char *path, const char *state_dir,
                 struct apikeys **ret, char *err, size_t errlen);
/* Queue the exact counts' final writes and free once they are done (the
   loop must still run; the caller's loop drain finishes them). */
void apikeys_free(struct apikeys *ks);

/* The entry of a presented key, or NULL (unknown). */
struct apikey *apikeys_find(struct apikeys *ks, const uint8_t *key,
                            size_t len);

/* May k draw from source (def: the endpoint's source)? */
int apikey_source_ok(const struct apikey *k, const char *source,
                     const char *def);

/* Admit one request of n bytes: 0 (counted: its in-flight slot is held
   until apikey_release()), or -1 with why (the reason a client sees). */
int apikey_admit(struct apikey *k, size_t n, char *why, size_t whylen);
void apikey_release(struct apikey *k);

/* A stream opens / closes: 0, or -1 with why (over its share). */
int apikey_stream_open(struct apikey *k, char *why, size_t whylen);
void apikey_stream_close(struct apikey *k);

/* Each key's use, by name (never the key or its hash): an array. */
json_object *apikeys_status_json(struct apikeys *ks);

/* SHA-256 of key in lowercase hex (65 bytes with the NUL). */
void apikey_hash_hex(const uint8_t *key, size_t len, char hex[65]);

#endif
