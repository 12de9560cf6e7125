/* Integration: a study through a real qrsd.  Two arms - a seeded mock
   standing in for the quantum source, and a prng control - over 2,000
   units tagged by the client: every reply is labelled by the study and
   an arm label only; each unit's label is the one the assignment rule
   gives, recomputed here from the seed file the test wrote; every
   control draw's bytes are regenerated from the control's seed and
   match the journal's hash; the #study record carries the plan and the
   commitments; the journal's chain still verifies; the status file
   counts by label, and the arms' own counters count no study draw.
   Bad study configurations are refused with their reason, a draw to a
   unit-by-request study without a tag is refused while qrsd keeps
   serving, and a reload refuses a changed plan but adds and removes
   studies. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <json-c/json.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <qrs/client.h>
#include <qrs/error.h>

#include "harness.h"
#include "harness_client.h"
#include "persist/journal.h"

#define N_UNITS 2000
#define SAMPLES 64

static struct daemon D;
/* pilot1's effect, as written */
static const char *plan_effect = "0.1";

static void
teardown(void)
{
  /* the next test starts from the plan as written */
  plan_effect = "0.1";
  if (D.pid > 0)
    daemon_stop(&D);
  daemon_cleanup(&D);
}

TestSuite(study, .fini = teardown, .timeout = 240);

static const char control_hex[] =
  "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
static const char assign_hex[] =
  "f0e1d2c3b4a5968778695a4b3c2d1e0f00112233445566778899aabbccddeeff";

static void
unhex(const char *hex, uint8_t *out, size_t n)
{
  size_t i;
  unsigned v;

  for (i = 0; i < n; i++) {
    cr_assert_eq(sscanf(hex + 2 * i, "%2x", &v), 1);
    out[i] = (uint8_t)v;
  }
}

static void
sha256_hex(const void *b, size_t n, char out[65])
{
  uint8_t h[32];
  unsigned len = 32, i;

  cr_assert(EVP_Digest(b, n, h, &len, EVP_sha256(), NULL));
  for (i = 0; i < 32; i++)
    sprintf(out + 2 * i, "%02x", h[i]);
}

/* The study's HMAC over domain \0 name \0 tail. */
static void
study_mac(const uint8_t seed[32], const char *domain, const char *name,
          const char *tail, uint8_t out[32])
{
  char msg[256];
  size_t n;
  unsigned len = 32;

  n = (size_t)snprintf(msg, sizeof msg, "%s%c%s%c%s", domain, 0, name, 0,
                       tail);
  cr_assert(HMAC(EVP_sha256(), seed, 32, (uint8_t *)msg, n, out, &len));
}

/* The label of each arm (config order) by the label rule. */
static void
labels_of(const uint8_t seed[32], const char *name, int k, char *label)
{
  uint8_t key[8][32];
  char dec[8];
  int i, j, below;

  for (i = 0; i < k; i++) {
    snprintf(dec, sizeof dec, "%d", i);
    study_mac(seed, "qrs-study-label", name, dec, key[i]);
  }
  for (i = 0; i < k; i++) {
    below = 0;
    for (j = 0; j < k; j++)
      below += memcmp(key[j], key[i], 32) < 0;
    label[i] = (char)('A' + below);
  }
}

/* The arm a unit tag is assigned to. */
static int
arm_of(const uint8_t seed[32], const char *name, const char *tag, int k)
{
  uint8_t h[32];
  uint64_t v = 0;
  int i;

  study_mac(seed, "qrs-study-unit", name, tag, h);
  for (i = 0; i < 8; i++)
    v = v << 8 | h[i];
  return (int)(v % (uint64_t)k);
}

/* The control's bytes of draw (epoch, ctr): ChaCha20, block counter 0,
   nonce epoch || ctr (big endian). */
static void
control_bytes(const uint8_t seed[32], const uint8_t epoch[4], uint64_t ctr,
              uint8_t *out, int n)
{
  uint8_t iv[16] = { 0 }, zero[SAMPLES] = { 0 };
  EVP_CIPHER_CTX *x;
  int len, i;

  memcpy(iv + 4, epoch, 4);
  for (i = 0; i < 8; i++)
    iv[8 + i] = (uint8_t)(ctr >> (56 - 8 * i));
  x = EVP_CIPHER_CTX_new();
  cr_assert_not_null(x);
  cr_assert(EVP_EncryptInit_ex(x, EVP_chacha20(), NULL, seed, iv));
  cr_assert(EVP_EncryptUpdate(x, out, &len, zero, n));
  EVP_CIPHER_CTX_free(x);
}

/* The config: a mock "quantum", a prng "control", and study pilot1 over
   them (extra: more YAML under studies:, after pilot1). */
static void
write_conf(const char *plan_extra, const char *more_studies)
{
  char yaml[4096];

  snprintf(yaml, sizeof yaml,
           "allow_test_sources: true\n"
           "status_file: \"%s/status.json\"\n"
           "journal:\n  dir: \"%s/journal\"\n"
           "sources:\n"
           "  system: { type: system }\n"
           "  quantum: { type: mock, seed: 11 }\n"
           "  control: { type: prng, seed_file: \"%s/control.seed\" }\n"
           "studies:\n"
           "  pilot1:\n"
           "    arms: [quantum, control]\n"
           "    unit: request\n"
           "    planned_units: %d\n"
           "    statistic: mean_probit_diff\n"
           "    alpha: 0.05\n"
           "    effect: %s\n"
           "    assignment_seed_file: \"%s/pilot1.assign\"\n%s%s",
           D.dir, D.dir, D.dir, N_UNITS, plan_effect, D.dir, plan_extra,
           more_studies);
  daemon_write_conf(&D, yaml);
}

static void
prepare(void)
{
  char path[160];

  daemon_prepare(&D, NULL);
  snprintf(path, sizeof path, "%s/journal", D.dir);
  cr_assert_eq(mkdir(path, 0700), 0);
  snprintf(path, sizeof path, "%s/control.seed", D.dir);
  write_key_file(path, control_hex);
  snprintf(path, sizeof path, "%s/pilot1.assign", D.dir);
  write_key_file(path, assign_hex);
}

static int
study_draw(struct qrs_client *c, const char *study, const char *unit,
           struct qrs_draw *d)
{
  struct qrs_draw_request req;

  memset(&req, 0, sizeof req);
  req.source = study;
  req.sample_count = SAMPLES;
  req.unit = unit;
  return qrs_client_draw(c, &req, d);
}

/* What the test remembers of each draw, by journal sequence. */
struct seen {
  char label;
  char tag[16];
};

/* Field i (0-based, tab-separated) of line into out. */
static void
field(const char *line, int i, char *out, size_t len)
{
  const char *p = line, *t;
  size_t n;

  while (i-- > 0) {
    p = strchr(p, '\t');
    cr_assert_not_null(p, "no field in %s", line);
    p++;
  }
  t = strchr(p, '\t');
  n = t ? (size_t)(t - p) : strlen(p);
  cr_assert_lt(n, len);
  memcpy(out, p, n);
  out[n] = '\0';
}

struct check {
  struct seen *seen;
  uint64_t n_seen;
  uint8_t control_seed[32];
  char label[2];                /* of quantum, control */
  char epoch[9];
  uint64_t entries, control_checked;
};

/* Every entry of the journal (journal_verify()'s callback). */
static int
check_entry(void *ctx, uint64_t seq, const char *line, size_t len)
{
  struct check *k = ctx;
  char src[64], params[256], sha[80], want[65], ep[16], *p;
  uint8_t epoch[4], bytes[SAMPLES];
  unsigned long long ctr;
  char tag[80];

  (void)len;
  cr_assert_leq(seq, k->n_seen);
  field(line, 3, src, sizeof src);
  field(line, 5, params, sizeof params);
  field(line, 11, sha, sizeof sha);
  cr_assert_eq(src[0], 'p', "entry %" PRIu64 ": source %s", seq, src);
  cr_assert_eq(strlen(src), 8);
  cr_assert_eq(src[7], k->seen[seq].label, "entry %" PRIu64 ": %s", seq,
               src);
  cr_assert_null(strstr(line, "quantum"));
  cr_assert_null(strstr(line, "control"));
  p = strstr(params, ",study=");
  cr_assert_not_null(p, "%s", params);
  cr_assert_eq(sscanf(p, ",study=%8[0-9a-f]:%llu,unit=%70s", ep, &ctr,
                      tag), 3, "%s", params);
  cr_assert_str_eq(ep, k->epoch, "entry %" PRIu64 ": another epoch", seq);
  cr_assert_str_eq(tag, k->seen[seq].tag);
  cr_assert(!strncmp(params, "n=64,", 5), "%s", params);
  if (k->seen[seq].label == k->label[1]) {
    unhex(ep, epoch, 4);
    control_bytes(k->control_seed, epoch, ctr, bytes, SAMPLES);
    sha256_hex(bytes, SAMPLES, want);
    cr_assert_str_eq(sha, want, "entry %" PRIu64 ": the control draw "
                     "(ctr %llu) is not its seed's keystream", seq, ctr);
    k->control_checked++;
  }
  k->entries++;
  return 0;
}

/* The journal's #study line (the first), or the test fails. */
static char *
study_record(void)
{
  char path[160], *text, *l, *e;

  snprintf(path, sizeof path, "%s/journal/journal-000001.log", D.dir);
  text = read_text_file(path, 64 << 20, NULL);
  l = strstr(text, "\n#study\t");
  cr_assert_not_null(l, "no #study record in the journal");
  l++;
  e = strchr(l, '\n');
  cr_assert_not_null(e);
  *e = '\0';
  l = strdup(l);
  free(text);
  return l;
}

Test(study, two_arms_blinded_assigned_by_the_seed_and_verifiable)
{
  uint8_t aseed[32], cseed[32];
  struct check k;
  struct qrs_client *c;
  struct qrs_draw d;
  char tag[16], label[2], want[600], com_a[65], com_c[65], *rec, *st;
  char head[JOURNAL_HEX_LEN + 1], err[512], out[65536], served[2];
  struct json_object *root, *studies, *s0, *labs, *srcs, *o;
  uint64_t n_entries, draws[2] = { 0, 0 }, units[2] = { 0, 0 };
  int i, r, arm, extra;

  prepare();
  write_conf("", "");
  daemon_start(&D, NULL);
  unhex(assign_hex, aseed, 32);
  unhex(control_hex, cseed, 32);
  labels_of(aseed, "pilot1", 2, label);
  cr_assert_neq(label[0], label[1]);

  memset(&k, 0, sizeof k);
  k.seen = calloc(2 * N_UNITS + 1, sizeof *k.seen);
  cr_assert_not_null(k.seen);
  c = connect_client(D.sock);
  for (i = 0; i < N_UNITS; i++) {
    snprintf(tag, sizeof tag, "run-%04d", i);
    arm = arm_of(aseed, "pilot1", tag, 2);
    units[arm]++;
    /* every fifth unit draws twice: a unit keeps its arm */
    for (extra = 0; extra < 1 + (i % 5 == 0); extra++) {
      r = study_draw(c, "pilot1", tag, &d);
      cr_assert_eq(r, 0, "unit %s: %s", tag, qrs_strerror(r));
      cr_assert_str_eq(d.source, "pilot1");
      cr_assert_str_eq(d.served_type, "study");
      cr_assert_eq(d.fallback, 0);
      cr_assert_eq(d.production, 0, "the mock arm makes it a test study");
      cr_assert_eq(d.has_meta, 0);
      cr_assert_eq(d.echo, QRS_ECHO_NONE);
      cr_assert_eq(strlen(d.served_by), 8, "%s", d.served_by);
      cr_assert(!strncmp(d.served_by, "pilot1/", 7), "%s", d.served_by);
      cr_assert_eq(d.served_by[7], label[arm], "unit %s: served by %s, the "
                   "rule says arm %d (%c)", tag, d.served_by, arm,
                   label[arm]);
      cr_assert(d.u > 0 && d.u < 1);
      cr_assert_gt(d.journal_seq, 0);
      cr_assert_lt(d.journal_seq, (uint64_t)(2 * N_UNITS + 1));
      k.seen[d.journal_seq].label = d.served_by[7];
      snprintf(k.seen[d.journal_seq].tag, sizeof k.seen[0].tag, "%s", tag);
      if (d.journal_seq > k.n_seen)
        k.n_seen = d.journal_seq;
      draws[arm]++;
    }
  }
  /* balanced within what the schedule says: a fair coin per unit, so
     within 5 standard deviations (22.4) of N_UNITS / 2 */
  cr_assert_eq(units[0] + units[1], (uint64_t)N_UNITS);
  cr_assert_lt(llabs((long long)units[0] - N_UNITS / 2), 112,
               "units per arm %" PRIu64 " / %" PRIu64, units[0], units[1]);
  cr_assert_gt(draws[0], 0);
  cr_assert_gt(draws[1], 0);

  /* metrics: by label */
  r = run_qrsctl(D.sock, out, sizeof out, err, sizeof err, "metrics", NULL);
  cr_assert_eq(r, 0, "qrsctl metrics: %s", err);
  snprintf(want, sizeof want, "qrsd_study_label_draws_total{study=\"pilot1\","
           "label=\"%c\"} %" PRIu64 "\n", label[1], draws[1]);
  cr_assert_not_null(strstr(out, want), "want %s in:\n%s", want, out);
  snprintf(want, sizeof want, "qrsd_study_units{study=\"pilot1\","
           "planned=\"0\"} %d\n", N_UNITS);
  cr_assert_not_null(strstr(out, want), "want %s in:\n%s", want, out);

  /* the status file: by label only, and the arms count nothing */
  r = run_qrsctl(D.sock, out, sizeof out, err, sizeof err, "status", NULL);
  cr_assert_eq(r, 0, "qrsctl status: %s", err);
  {
    char *line = strstr(out, "Studies         : "), *e;

    cr_assert_not_null(line, "qrsctl status: %s", out);
    e = strchr(line, '\n');
    cr_assert_not_null(e);
    *e = '\0';
    snprintf(want, sizeof want, "pilot1 complete, %d of %d units (A ",
             N_UNITS, N_UNITS);
    cr_assert_not_null(strstr(line, want), "%s", line);
    cr_assert_null(strstr(line, "quantum"), "%s", line);
    cr_assert_null(strstr(line, "control"), "%s", line);
  }
  {
    char path[160];

    snprintf(path, sizeof path, "%s/status.json", D.dir);
    /* the snapshot of the last draws is written within a second */
    sleep(2);
    st = read_text_file(path, 1 << 20, NULL);
  }
  root = json_tokener_parse(st);
  cr_assert_not_null(root, "%s", st);
  cr_assert(json_object_object_get_ex(root, "studies", &studies), "%s", st);
  cr_assert_eq(json_object_array_length(studies), 1);
  s0 = json_object_array_get_idx(studies, 0);
  cr_assert_null(strstr(json_object_to_json_string(s0), "quantum"));
  cr_assert_null(strstr(json_object_to_json_string(s0), "control"));
  cr_assert(json_object_object_get_ex(s0, "units_seen", &o));
  cr_assert_eq(json_object_get_int64(o), N_UNITS);
  cr_assert(json_object_object_get_ex(s0, "state", &o));
  cr_assert_str_eq(json_object_get_string(o), "complete");
  cr_assert(json_object_object_get_ex(s0, "labels", &labs));
  for (i = 0; i < 2; i++) {
    served[0] = label[i];
    served[1] = '\0';
    cr_assert(json_object_object_get_ex(labs, served, &o), "%s", st);
    cr_assert(json_object_object_get_ex(o, "draws", &o));
    cr_assert_eq((uint64_t)json_object_get_int64(o), draws[i]);
  }
  cr_assert(json_object_object_get_ex(root, "sources", &srcs), "%s", st);
  {
    struct json_object_iter it;
    struct json_object *n;

    json_object_object_foreachC(srcs, it) {
      cr_assert(json_object_object_get_ex(it.val, "draws", &n), "%s", st);
      cr_assert_eq(json_object_get_int64(n), 0, "source %s counted study "
                   "draws: %s", it.key, json_object_to_json_string(it.val));
    }
  }
  json_object_put(root);
  free(st);
  qrs_client_free(c);
  cr_assert_eq(daemon_stop(&D), 0);

  /* the record: the plan and the commitments */
  rec = study_record();
  sha256_hex(aseed, 32, com_a);
  sha256_hex(cseed, 32, com_c);
  field(rec, 2, k.epoch, sizeof k.epoch);
  cr_assert_eq(strlen(k.epoch), 8);
  snprintf(want, sizeof want, "#study\tpilot1\t%s\trequest\t%d\t"
           "mean_probit_diff\t0.050000000000000003\t0.10000000000000001\t%s\t"
           "quantum:mock:-,control:prng:%s\t", k.epoch, N_UNITS, com_a,
           com_c);
  cr_assert(!strncmp(rec, want, strlen(want)), "record:\n%s\nwant:\n%s",
            rec, want);
  free(rec);

  /* every entry: its label, its unit, the control's bytes; the chain */
  memcpy(k.control_seed, cseed, 32);
  k.label[0] = label[0];
  k.label[1] = label[1];
  snprintf(out, sizeof out, "%s/journal", D.dir);
  r = journal_verify(out, check_entry, &k, &n_entries, head, err,
                     sizeof err);
  cr_assert_eq(r, JOURNAL_INTACT, "%s", err);
  cr_assert_eq(k.entries, draws[0] + draws[1]);
  cr_assert_eq(k.control_checked, draws[1]);
  free(k.seen);
}

/* qrsd refuses yaml (the pilot1 config with plan_extra and more studies
   written over it) naming want. */
static void
assert_refused(const char *plan_extra, const char *more, const char *want)
{
  char err[4096];

  write_conf(plan_extra, more);
  cr_assert_neq(daemon_try_start(&D, NULL, err, sizeof err), 0,
                "qrsd started with %s%s", plan_extra, more);
  cr_assert_not_null(strstr(err, want), "want \"%s\" in:\n%s", want, err);
}

Test(study, bad_plans_are_refused_with_their_reason)
{
  char path[160], more[512];

  prepare();
  assert_refused("", "  other:\n    arms: [quantum, nosuch]\n"
                 "    unit: draw\n    planned_units: 10\n"
                 "    statistic: ks_u\n    alpha: 0.05\n    effect: 0.2\n"
                 "    assignment_seed_file: /x\n",
                 "studies.other: arm 'nosuch' is not declared under sources");
  assert_refused("", "  other:\n    arms: [quantum, quantum]\n",
                 "source 'quantum' is an arm twice");
  assert_refused("", "  other:\n    arms: [quantum]\n",
                 "1 arms; a study has 2 to 8");
  assert_refused("", "  control:\n    arms: [quantum, system]\n"
                 "    unit: draw\n    planned_units: 10\n"
                 "    statistic: ks_u\n    alpha: 0.05\n    effect: 0.2\n"
                 "    assignment_seed_file: /x\n",
                 "studies.control: a source has this name too");
  assert_refused("", "  other:\n    arms: [quantum, system]\n",
                 "studies.other: missing key 'unit'");
  assert_refused("    alpha: 0.7\n", "", "duplicate key");
  assert_refused("", "  other:\n    arms: [quantum, system]\n"
                 "    unit: draw\n    planned_units: 10\n"
                 "    statistic: median\n    alpha: 0.05\n    effect: 0.2\n"
                 "    assignment_seed_file: /x\n", "studies.other.statistic");

  /* no journal */
  snprintf(more, sizeof more,
           "allow_test_sources: true\n"
           "sources:\n  system: { type: system }\n"
           "  quantum: { type: mock, seed: 11 }\n"
           "studies:\n  s:\n    arms: [quantum, system]\n    unit: draw\n"
           "    planned_units: 10\n    statistic: ks_u\n    alpha: 0.05\n"
           "    effect: 0.2\n    assignment_seed_file: /x\n");
  daemon_write_conf(&D, more);
  {
    char err[4096];

    cr_assert_neq(daemon_try_start(&D, NULL, err, sizeof err), 0);
    cr_assert_not_null(strstr(err, "a study needs the draw journal"), "%s",
                       err);
  }

  /* seed files: not hex, readable by others, missing */
  snprintf(path, sizeof path, "%s/control.seed", D.dir);
  write_key_file(path, "not a seed\n");
  assert_refused("", "", "control.seed: not 64 hex characters");
  write_key_file(path, control_hex);
  cr_assert_eq(chmod(path, 0644), 0);
  assert_refused("", "", "control.seed");
  cr_assert_eq(chmod(path, 0600), 0);
  snprintf(path, sizeof path, "%s/pilot1.assign", D.dir);
  cr_assert_eq(unlink(path), 0);
  assert_refused("", "", "study 'pilot1': assignment_seed_file");
  {
    char log[64];

    /* a refusal never shows a seed */
    snprintf(log, sizeof log, "%.32s", control_hex);
    cr_assert_eq(daemon_log_count(&D, log), 0);
  }
}

Test(study, a_draw_without_its_unit_is_refused_and_qrsd_keeps_serving)
{
  struct qrs_client *c;
  struct qrs_draw d;
  int r;

  prepare();
  write_conf("", "");
  daemon_start(&D, NULL);
  c = connect_client(D.sock);
  r = study_draw(c, "pilot1", NULL, &d);
  cr_assert_eq(r, QRS_E_BAD_REQUEST, "%s", qrs_strerror(r));
  cr_assert_not_null(strstr(qrs_client_errmsg(c), "needs a unit tag"),
                     "%s", qrs_client_errmsg(c));
  r = study_draw(c, "pilot1", "bad tag!", &d);
  cr_assert_eq(r, QRS_E_BAD_REQUEST, "%s", qrs_strerror(r));
  r = study_draw(c, "pilot1", "unit-1", &d);
  cr_assert_eq(r, 0, "%s", qrs_strerror(r));
  cr_assert(!strncmp(d.served_by, "pilot1/", 7));
  /* a study serves draws, not raw bytes */
  {
    uint8_t buf[16];

    r = qrs_client_bytes(c, "pilot1", buf, sizeof buf, NULL);
    cr_assert_eq(r, QRS_E_BAD_REQUEST, "%s", qrs_strerror(r));
  }
  /* qrsctl draw: with --unit, and without it refused */
  {
    char out[4096], err[1024];

    r = run_qrsctl(D.sock, out, sizeof out, err, sizeof err, "draw", "-n",
                   "3", "--source", "pilot1", "--unit", "unit-9", NULL);
    cr_assert_eq(r, 0, "qrsctl draw: %s", err);
    cr_assert_not_null(strstr(out, "pilot1/"), "%s", out);
    r = run_qrsctl(D.sock, out, sizeof out, err, sizeof err, "draw",
                   "--source", "pilot1", NULL);
    cr_assert_neq(r, 0, "%s", out);
    cr_assert_not_null(strstr(err, "needs a unit tag"), "%s", err);
  }
  assert_draw_works(D.sock);
  qrs_client_free(c);
}

Test(study, a_reload_adds_and_removes_studies_but_keeps_a_plan)
{
  struct qrs_reload *rl;
  struct qrs_client *c;
  struct qrs_draw d;
  char path[160], more[512], *rec;
  int r;

  prepare();
  write_conf("", "");
  daemon_start(&D, NULL);
  c = connect_client(D.sock);

  /* a changed plan is refused; the study keeps serving */
  plan_effect = "0.3";
  write_conf("", "");
  plan_effect = "0.1";
  r = qrs_client_reload(c, &rl);
  cr_assert_eq(r, QRS_E_BAD_CONFIG, "a changed plan: %s", qrs_strerror(r));
  cr_assert_not_null(strstr(qrs_client_errmsg(c), "the plan of a "
                            "running study cannot change"), "%s",
                     qrs_client_errmsg(c));
  cr_assert_eq(study_draw(c, "pilot1", "u1", &d), 0);

  /* so is a changed arm: the control's seed file */
  snprintf(path, sizeof path, "%s/control2.seed", D.dir);
  write_key_file(path, assign_hex);
  {
    char yaml[4096], *text, *at;

    write_conf("", "");
    snprintf(path, sizeof path, "%s/qrsd.yaml", D.dir);
    text = read_text_file(path, sizeof yaml, NULL);
    at = strstr(text, "control.seed");
    cr_assert_not_null(at);
    snprintf(yaml, sizeof yaml, "%.*scontrol2.seed%s", (int)(at - text), text,
             at + strlen("control.seed"));
    free(text);
    daemon_write_conf(&D, yaml);
  }
  r = qrs_client_reload(c, &rl);
  cr_assert_eq(r, QRS_E_BAD_CONFIG, "a changed arm: %s", qrs_strerror(r));
  cr_assert_not_null(strstr(qrs_client_errmsg(c), "an arm of running study "
                            "'pilot1' cannot change"), "%s",
                     qrs_client_errmsg(c));

  /* another study added: its record is journalled, it serves */
  snprintf(path, sizeof path, "%s/pilot2.assign", D.dir);
  write_key_file(path, assign_hex);
  snprintf(more, sizeof more, "  pilot2:\n    arms: [control, quantum]\n"
           "    unit: draw\n    planned_units: 10\n    statistic: ks_u\n"
           "    alpha: 0.01\n    effect: 0.5\n"
           "    assignment_seed_file: \"%s\"\n", path);
  write_conf("", more);
  cr_assert_eq(qrs_client_reload(c, &rl), 0, "%s", qrs_client_errmsg(c));
  qrs_reload_free(rl);
  cr_assert_eq(study_draw(c, "pilot2", NULL, &d), 0, "%s",
               qrs_client_errmsg(c));
  cr_assert(!strncmp(d.served_by, "pilot2/", 7), "%s", d.served_by);

  /* pilot1 removed: it is unknown now */
  snprintf(more, sizeof more,
           "allow_test_sources: true\n"
           "journal:\n  dir: \"%s/journal\"\n"
           "sources:\n  system: { type: system }\n"
           "  quantum: { type: mock, seed: 11 }\n"
           "  control: { type: prng, seed_file: \"%s/control.seed\" }\n",
           D.dir, D.dir);
  daemon_write_conf(&D, more);
  cr_assert_eq(qrs_client_reload(c, &rl), 0, "%s", qrs_client_errmsg(c));
  qrs_reload_free(rl);
  r = study_draw(c, "pilot1", "u1", &d);
  cr_assert_eq(r, QRS_E_UNKNOWN_SOURCE, "%s", qrs_strerror(r));
  qrs_client_free(c);
  cr_assert_eq(daemon_stop(&D), 0);
  rec = study_record();
  cr_assert(!strncmp(rec, "#study\tpilot1\t", 14), "%s", rec);
  free(rec);

  /* the journal resumes after its study records, the chain intact */
  {
    char err[512], jd[160];
    uint64_t n;

    snprintf(jd, sizeof jd, "%s/journal", D.dir);
    cr_assert_eq(journal_verify(jd, NULL, NULL, &n, NULL, err, sizeof err),
                 JOURNAL_INTACT, "%s", err);
    cr_assert_eq(n, 2);
  }
}

/* libqrs's sampler in a study: study_unit (here from QR_STUDY_UNIT) goes
   with every draw, the records name the study's label, and the config
   hash is the one without the unit. */
Test(study, a_sampler_draws_for_its_unit_and_records_the_label)
{
  struct qrs_sampler_config *cfg;
  struct qrs_sampler *s;
  struct qrs_client *c;
  char recs[160], h1[32], h2[32], v[80], want[96], label[2], *text;
  char *env[] = { "QR_STUDY_UNIT=run-0042", "QR_ENTROPY_SOURCE_TYPE=pilot1",
                  NULL };
  uint8_t aseed[32];
  float row[50];
  uint32_t tok;
  int t, r, n;

  prepare();
  write_conf("", "");
  daemon_start(&D, NULL);
  cr_assert_eq(qrs_sampler_config_new(&cfg), 0);
  cr_assert_eq(qrs_sampler_config_hash(cfg, h1), 0);
  cr_assert_eq(qrs_sampler_config_load_env(cfg, env), 2);
  cr_assert_gt(qrs_sampler_config_get(cfg, "study_unit", v, sizeof v), 0);
  cr_assert_str_eq(v, "run-0042");
  cr_assert_eq(qrs_sampler_config_set(cfg, "entropy_source_type", "system"),
               0);
  cr_assert_eq(qrs_sampler_config_hash(cfg, h2), 0);
  cr_assert_str_eq(h1, h2, "study_unit changed the config hash");
  cr_assert_eq(qrs_sampler_config_set(cfg, "entropy_source_type", "pilot1"),
               0);
  cr_assert_eq(qrs_sampler_config_set(cfg, "sample_count", "64"), 0);
  cr_assert_eq(qrs_sampler_config_set(cfg, "log_level", "full"), 0);
  cr_assert_eq(qrs_sampler_new(cfg, 50, &s), 0);
  qrs_sampler_config_free(cfg);
  snprintf(recs, sizeof recs, "%s/records.jsonl", D.dir);
  cr_assert_eq(qrs_sampler_set_log_path(s, recs), 0);
  c = connect_client(D.sock);
  for (t = 0; t < 20; t++) {
    lm_row(row, 50, (unsigned)t, -1.0);
    r = qrs_sampler_sample_token(s, c, row, QRS_DTYPE_F32, 50, &tok, NULL);
    cr_assert_eq(r, 0, "token %d: %s", t, qrs_strerror(r));
  }
  qrs_sampler_free(s);
  qrs_client_free(c);

  unhex(assign_hex, aseed, 32);
  labels_of(aseed, "pilot1", 2, label);
  snprintf(want, sizeof want, "\"entropy_source_used\":\"pilot1/%c\"",
           label[arm_of(aseed, "pilot1", "run-0042", 2)]);
  text = read_text_file(recs, 1 << 20, NULL);
  n = 0;
  for (char *p = text; (p = strstr(p, want)) != NULL; p++)
    n++;
  cr_assert_eq(n, 20, "want %s in every record:\n%.2000s", want, text);
  cr_assert_not_null(strstr(text, "\"entropy_source_type\":\"study\""),
                     "%.2000s", text);
  cr_assert_null(strstr(text, "quantum"));
  cr_assert_null(strstr(text, "control"));
  free(text);
}

/* A counter of the source called name, from qrsctl sources --json. */
static int64_t
source_counter(const char *name, const char *counter)
{
  struct json_object *root, *srcs, *s, *n, *v;
  static char out[65536];
  char err[512];
  int64_t x = -1;
  size_t i;

  cr_assert_eq(run_qrsctl(D.sock, out, sizeof out, err, sizeof err,
                          "sources", "--json", NULL), 0, "%s", err);
  root = json_tokener_parse(out);
  cr_assert_not_null(root, "%s", out);
  cr_assert(json_object_object_get_ex(root, "sources", &srcs));
  for (i = 0; i < json_object_array_length(srcs); i++) {
    s = json_object_array_get_idx(srcs, i);
    if (json_object_object_get_ex(s, "name", &n) &&
        !strcmp(json_object_get_string(n), name) &&
        json_object_object_get_ex(s, counter, &v))
      x = json_object_get_int64(v);
  }
  json_object_put(root);
  cr_assert_geq(x, 0, "no %s of source %s", counter, name);
  return x;
}

/* qrsd stopped right after a study started (the journal ends in its
   record) resumes the chain there; a study draw never falls back: an arm
   that fails fails the draw, and the arm's source counts nothing. */
Test(study, the_journal_resumes_after_a_record_and_a_failing_arm_fails)
{
  char more[1024], jd[160], err[512], *rec;
  int64_t dead_failures, dead_fallbacks;
  uint8_t aseed[32];
  struct qrs_client *c;
  struct qrs_draw d;
  uint64_t n;
  int i, r, failed;

  prepare();
  snprintf(more, sizeof more,
           "  pilot3:\n    arms: [dead, control]\n    unit: request\n"
           "    planned_units: 10\n    statistic: ks_u\n    alpha: 0.05\n"
           "    effect: 0.5\n    assignment_seed_file: \"%s/pilot1.assign\"\n",
           D.dir);
  write_conf("", more);
  {
    /* an upstream nobody serves, falling back to the kernel's RNG */
    char *text, path[160], yaml[4096];

    snprintf(path, sizeof path, "%s/qrsd.yaml", D.dir);
    text = read_text_file(path, sizeof yaml, NULL);
    snprintf(yaml, sizeof yaml, "%s", text);
    free(text);
    snprintf(strstr(yaml, "studies:\n"), sizeof yaml - (size_t)(strstr(yaml,
             "studies:\n") - yaml), "  dead: { type: grpc, target: "
             "\"unix:%s/nobody.sock\", fallback: system, timeout_ms: 200 }\n"
             "studies:\n  pilot1:\n    arms: [quantum, control]\n"
             "    unit: request\n    planned_units: %d\n"
             "    statistic: mean_probit_diff\n    alpha: 0.05\n"
             "    effect: 0.1\n    assignment_seed_file: \"%s/pilot1.assign\""
             "\n%s", D.dir, N_UNITS, D.dir, more);
    daemon_write_conf(&D, yaml);
  }
  daemon_start(&D, NULL);
  cr_assert_eq(daemon_stop(&D), 0);
  daemon_start(&D, NULL);               /* resumes after the records */
  c = connect_client(D.sock);
  cr_assert_eq(study_draw(c, "pilot1", "u1", &d), 0, "%s",
               qrs_client_errmsg(c));
  unhex(assign_hex, aseed, 32);
  dead_failures = source_counter("dead", "failures");
  dead_fallbacks = source_counter("dead", "fallbacks");
  failed = 0;
  for (i = 0; i < 8; i++) {
    char tag[16];

    snprintf(tag, sizeof tag, "x%d", i);
    r = study_draw(c, "pilot3", tag, &d);
    if (arm_of(aseed, "pilot3", tag, 2) == 0) {
      cr_assert_neq(r, 0, "a draw of the dead arm was served by %s",
                    d.served_by);
      cr_assert_null(strstr(qrs_client_errmsg(c), "dead"), "%s",
                     qrs_client_errmsg(c));
      cr_assert_not_null(strstr(qrs_client_errmsg(c), "never falls back"),
                         "%s", qrs_client_errmsg(c));
      failed++;
    } else {
      cr_assert_eq(r, 0, "%s", qrs_client_errmsg(c));
    }
  }
  cr_assert_gt(failed, 0, "no tag went to the dead arm");
  cr_assert_eq(source_counter("dead", "failures"), dead_failures);
  cr_assert_eq(source_counter("dead", "fallbacks"), dead_fallbacks);
  qrs_client_free(c);
  cr_assert_eq(daemon_stop(&D), 0);

  snprintf(jd, sizeof jd, "%s/journal", D.dir);
  cr_assert_eq(journal_verify(jd, NULL, NULL, &n, NULL, err, sizeof err),
               JOURNAL_INTACT, "%s", err);
  cr_assert_eq(n, 9 - (uint64_t)failed, "entries: %" PRIu64, n);
  rec = study_record();
  free(rec);
  /* two starts: two records of each study, each with its own epoch */
  {
    char path[160], *text, *p;
    int k = 0;

    snprintf(path, sizeof path, "%s/journal/journal-000001.log", D.dir);
    text = read_text_file(path, 1 << 20, NULL);
    for (p = text; (p = strstr(p, "\n#study\tpilot1\t")) != NULL; p++)
      k++;
    cr_assert_eq(k, 2, "%s", text);
    free(text);
  }
}
