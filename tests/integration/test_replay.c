/* Integration: qrs-audit's replays over a real qrsd.  Samplers with a fixed
   salt draw through qrsd with commitments, writing full records and a logits
   dump (qrs_sampler_set_logits_dump()); qrs-audit --salt --logits derives
   every nonce from the salt and selects every token again from its row and u:
   the run passes.  Then each tamper is named with its line: a token changed, a
   row changed in the dump, a row dropped from the dump, a config hash changed,
   the wrong salt. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <json-c/json.h>
#include <qrs/client.h>
#include <qrs/sampler.h>

#include "harness.h"
#include "harness_client.h"

#define N_TOKENS 300
#define VOCAB 2000
#define SALT_HEX "00112233445566778899aabbccddeeff"

static struct daemon D;
static char recs[160], dump[160];
static char *lines[N_TOKENS];
static uint32_t tokens[N_TOKENS];

/* One request of N_TOKENS through qrsd with the salt, a stateful
   temperature strategy (edt: its state must be replayed too), records
   and dump; then a second request on the same sampler (reset: step 0). */
static void
run(void)
{
  static const uint8_t salt[16] = { 0x00, 0x11, 0x22, 0x33, 0x44, 0x55,
                                    0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb,
                                    0xcc, 0xdd, 0xee, 0xff };
  struct qrs_client *c;
  struct qrs_sampler *s;
  float row[VOCAB];
  int t, r;

  daemon_prepare(&D, NULL);
  daemon_start(&D, NULL);
  snprintf(recs, sizeof recs, "%s/records.jsonl", D.dir);
  snprintf(dump, sizeof dump, "%s/logits.dump", D.dir);
  c = connect_client(D.sock);
  s = sampler_with(VOCAB, "log_level", "full", "temperature_strategy",
                   "edt", NULL);
  cr_assert_eq(qrs_sampler_set_log_path(s, recs), 0);
  cr_assert_eq(qrs_sampler_set_logits_dump(s, dump), 0);
  cr_assert_eq(qrs_sampler_set_salt(s, salt, sizeof salt), 0);
  for (t = 0; t < N_TOKENS; t++) {
    if (t == N_TOKENS / 2) {      /* the next request, same salt */
      cr_assert_eq(qrs_sampler_reset(s), 0);
      cr_assert_eq(qrs_sampler_set_salt(s, salt, sizeof salt), 0);
    }
    lm_row(row, VOCAB, (unsigned)t, -1.1);
    r = qrs_sampler_sample_token(s, c, row, QRS_DTYPE_F32, VOCAB,
                                 &tokens[t], NULL);
    cr_assert_eq(r, 0, "token %d: %s", t, qrs_strerror(r));
  }
  qrs_sampler_free(s);          /* closes records and dump */
  qrs_client_free(c);
  cr_assert_eq(daemon_stop(&D), 0);

  read_lines(recs, lines, N_TOKENS);
}

static void
teardown(void)
{
  int i;

  for (i = 0; i < N_TOKENS; i++) {
    free(lines[i]);
    lines[i] = NULL;
  }
  daemon_cleanup(&D);
}

TestSuite(replay, .init = run, .fini = teardown, .timeout = 120);

/* qrs-audit --json --records R --logits L --salt S: status, output. */
static struct json_object *
audit(const char *r, const char *l, const char *salt, int *status)
{
  static char out[1 << 16];
  char errb[4096];
  char *argv[] = { getenv("QRS_AUDIT_BIN"), "--json", "--records",
                   (char *)r, "--logits", (char *)l, "--salt",
                   (char *)salt, NULL };
  struct json_object *o;

  cr_assert_not_null(argv[0]);
  *status = run_capture(argv, out, sizeof out, errb, sizeof errb);
  o = json_tokener_parse(out);
  cr_assert_not_null(o, "qrs-audit printed: %s %s", out, errb);
  return o;
}

static int64_t
get_int(struct json_object *o, const char *k)
{
  struct json_object *v;

  cr_assert(json_object_object_get_ex(o, k, &v), "no \"%s\"", k);
  return json_object_get_int64(v);
}

/* The first failure is check at line (1-based). */
static void
first_failure(struct json_object *o, const char *check, int line)
{
  struct json_object *fa, *f0, *v;

  cr_assert(json_object_object_get_ex(o, "failures", &fa));
  cr_assert_gt(json_object_array_length(fa), 0, "no failure listed: %s",
               json_object_to_json_string(o));
  f0 = json_object_array_get_idx(fa, 0);
  cr_assert(json_object_object_get_ex(f0, "check", &v));
  cr_assert_str_eq(json_object_get_string(v), check, "%s",
                   json_object_to_json_string(o));
  cr_assert(json_object_object_get_ex(f0, "line", &v));
  cr_assert_eq(json_object_get_int(v), line, "%s",
               json_object_to_json_string(o));
}

/* qrs-audit on records r, logits l and salt fails (status 1), its first
   failure check at line (1-based). */
static void
audit_fails(const char *r, const char *l, const char *salt,
            const char *check, int line)
{
  struct json_object *o;
  int st;

  o = audit(r, l, salt, &st);
  cr_assert_eq(st, 1, "%s", json_object_to_json_string(o));
  first_failure(o, check, line);
  json_object_put(o);
}

/* The records with line k (1-based) replaced by text. */
static void
write_records(const char *path, int k, const char *text)
{
  FILE *f = fopen(path, "w");
  int t;

  cr_assert_not_null(f);
  for (t = 0; t < N_TOKENS; t++)
    fprintf(f, "%s\n", t + 1 == k ? text : lines[t]);
  cr_assert_eq(fclose(f), 0);
}

/* Line k with the first "key":value number replaced by v. */
static char *
with_field(int k, const char *key, const char *v)
{
  struct json_object *o = json_tokener_parse(lines[k - 1]);
  char *s;

  cr_assert_not_null(o);
  json_object_object_add(o, key, json_object_new_string(v));
  if (strcmp(key, "token_id") == 0)
    json_object_object_add(o, key, json_object_new_int(atoi(v)));
  s = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
  json_object_put(o);
  return s;
}

Test(replay, the_run_passes)
{
  struct json_object *o;
  int st;

  o = audit(recs, dump, SALT_HEX, &st);
  cr_assert_eq(st, 0, "%s", json_object_to_json_string(o));
  cr_assert_eq(get_int(o, "logits_rows"), N_TOKENS);
  cr_assert_eq(get_int(o, "record_failures"), 0);
  json_object_put(o);
}

Test(replay, a_token_changed)
{
  char path[200], tok[16], *l;

  snprintf(path, sizeof path, "%s/t.jsonl", D.dir);
  snprintf(tok, sizeof tok, "%u", (tokens[41] + 1) % VOCAB);
  l = with_field(42, "token_id", tok);
  write_records(path, 42, l);
  free(l);
  /* the nonce of line 43 follows from the true token, not the edited
     one: the chain names the edit too */
  audit_fails(path, dump, SALT_HEX, "token-mismatch", 42);
}

Test(replay, the_wrong_salt)
{
  audit_fails(recs, dump, "00112233445566778899aabbccddee00", "nonce-chain",
              1);
}

Test(replay, a_config_hash_changed)
{
  char path[200], *l;

  snprintf(path, sizeof path, "%s/c.jsonl", D.dir);
  l = with_field(7, "config_hash", "0123456789abcdef");
  write_records(path, 7, l);
  free(l);
  audit_fails(path, dump, SALT_HEX, "config-mismatch", 7);
}

/* The dump's bytes, and the offset of row k's frame (0-based). */
static unsigned char *
read_dump(size_t *len, size_t k, size_t *off, size_t *frame)
{
  unsigned char *b;
  FILE *f = fopen(dump, "r");
  long n;
  uint32_t text;
  size_t i;

  cr_assert_not_null(f);
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  rewind(f);
  b = malloc((size_t)n);
  cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  memcpy(&text, b + 12, 4);
  *frame = QRS_LOGITS_FRAME_HEADER + VOCAB * sizeof(float);
  cr_assert_eq((size_t)n, 16 + text + N_TOKENS * *frame);
  i = 16 + text + k * *frame;
  *off = i;
  *len = (size_t)n;
  return b;
}

static void
write_bytes(const char *path, const unsigned char *b, size_t n)
{
  FILE *f = fopen(path, "w");

  cr_assert_not_null(f);
  cr_assert_eq(fwrite(b, 1, n, f), n);
  cr_assert_eq(fclose(f), 0);
}

Test(replay, a_row_changed_in_the_dump)
{
  char path[200];
  unsigned char *b;
  size_t n, off, frame;
  float *row, ninf = -INFINITY;

  /* row 99: the recorded token can no longer be selected */
  b = read_dump(&n, 99, &off, &frame);
  row = (float *)(b + off + QRS_LOGITS_FRAME_HEADER);
  memcpy(&row[tokens[99]], &ninf, sizeof ninf);
  snprintf(path, sizeof path, "%s/r.dump", D.dir);
  write_bytes(path, b, n);
  free(b);
  audit_fails(recs, path, SALT_HEX, "token-mismatch", 100);
}

Test(replay, a_row_dropped_from_the_dump)
{
  char path[200];
  unsigned char *b;
  size_t n, off, frame;

  b = read_dump(&n, 20, &off, &frame);
  memmove(b + off, b + off + frame, n - off - frame);
  snprintf(path, sizeof path, "%s/d.dump", D.dir);
  write_bytes(path, b, n - frame);
  free(b);
  audit_fails(recs, path, SALT_HEX, "logits-missing", 22);
}

Test(replay, not_a_dump)
{
  char *argv[] = { getenv("QRS_AUDIT_BIN"), "--records", recs, "--logits",
                   recs, NULL };
  static char out[4096];
  char errb[4096];

  cr_assert_eq(run_capture(argv, out, sizeof out, errb, sizeof errb), 2);
  cr_assert(strstr(errb, "not a libqrs logits dump") != NULL, "%s", errb);
}
