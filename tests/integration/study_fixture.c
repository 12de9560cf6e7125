/* A study's files as qrsd and libqrs write them, for qrs-audit --study's
   tests: DIR/journal/journal-000001.log (the header, one ordinary draw,
   the #study record, then every study draw, hashed and chained as
   persist/journal.h says), DIR/records/run.jsonl (a full libqrs record
   per draw) and DIR/reveal.json.  Two arms: "quantum" (a mock: bytes
   from SHA-256 of the draw's counter, u shifted by --shift standard
   deviations of Phi^-1(u)) and "control" (prng: ChaCha20 keyed by its
   seed, exactly as qrsd's prng source); --arms 3 adds "system".  Seeds
   follow from --seed; --effect is the plan's stated effect; --restart
   writes a second study record (qrsd started again: a new epoch, the
   counter from 0) before that unit.

   Usage: study_fixture DIR [--units N] [--draws K] [--unit request|draw]
            [--statistic S] [--planned N] [--shift X] [--effect X]
            [--seed N] [--restart UNIT]
            [--arms K] [--no-reveal] [--tamper WHAT]
   WHAT: commitment (the control seed's commitment in the study record),
   assignment (every entry of one control unit relabelled to the quantum
   arm's label), control-bytes (one control draw's SHA-256), ctr-reused
   (one draw's counter the one before it, its bytes to match),
   records-moved (one record's label the other arm's), plan-changed
   (with --restart: the second record's planned units one more).  Each
   tamper keeps the chain intact and prints "tampered FILE:LINE" (FILE
   relative to DIR): what qrs-audit must name. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "ustat.h"

#define NAME "pilot1"
#define DRAW_BYTES 16
#define EPOCH0 0x1a2b3c4du

static uint8_t assign_seed[32], control_seed[32];
static FILE *jf;
static char prev[65];
static unsigned jline;
static uint32_t epoch = EPOCH0;           /* the running start's */

static void
hex(const uint8_t *b, size_t n, char *out)
{
  size_t i;

  for (i = 0; i < n; i++)
    sprintf(out + 2 * i, "%02x", b[i]);
}

static void
sha256(const void *b, size_t n, uint8_t out[32])
{
  EVP_Digest(b, n, out, NULL, EVP_sha256(), NULL);
}

/* A journal line: body (up to and including its prev's tab) hashed,
   the hash appended, the chain moved on. */
static void
jwrite(const char *body)
{
  uint8_t h[32];
  char hx[65];

  sha256(body, strlen(body), h);
  hex(h, 32, hx);
  fprintf(jf, "%s%s\n", body, hx);
  memcpy(prev, hx, 65);
  jline++;
}

static void
hmac(const uint8_t seed[32], const char *prefix, const char *tail,
     uint8_t out[32])
{
  char msg[256];
  size_t n;
  unsigned len = 32;

  n = (size_t)snprintf(msg, sizeof msg, "%s", prefix) + 1;
  n += (size_t)snprintf(msg + n, sizeof msg - n, "%s", NAME) + 1;
  n += (size_t)snprintf(msg + n, sizeof msg - n, "%s", tail);
  HMAC(EVP_sha256(), seed, 32, (const uint8_t *)msg, n, out, &len);
}

static int
assigned(const char *tag, int k)
{
  uint8_t h[32];
  uint64_t v = 0;
  int i;

  hmac(assign_seed, "qrs-study-unit", tag, h);
  for (i = 0; i < 8; i++)
    v = v << 8 | h[i];
  return (int)(v % (uint64_t)k);
}

static int
cmp33(const void *a, const void *b)
{
  return memcmp(a, b, 33);
}

static void
chacha(const uint8_t seed[32], uint64_t ctr, uint8_t *out, size_t n)
{
  EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
  uint8_t iv[16] = { 0 };
  int i, outl;

  for (i = 0; i < 4; i++)
    iv[4 + i] = (uint8_t)(epoch >> (24 - 8 * i));
  for (i = 0; i < 8; i++)
    iv[8 + i] = (uint8_t)(ctr >> (56 - 8 * i));
  memset(out, 0, n);
  if (!c || !EVP_EncryptInit_ex(c, EVP_chacha20(), NULL, seed, iv) ||
      !EVP_EncryptUpdate(c, out, &outl, out, (int)n)) {
    fprintf(stderr, "study_fixture: ChaCha20 failed\n");
    exit(2);
  }
  EVP_CIPHER_CTX_free(c);
}

/* The study record of a start. */
static void
study_record(const char *unit, uint64_t planned, const char *stat,
             double effect, const char *ac, const char *arms)
{
  char body[2048];

  snprintf(body, sizeof body, "#study\t" NAME "\t%08x\t%s\t%" PRIu64 "\t%s\t"
           "%.17g\t%.17g\t%s\t%s\t%s\t", epoch, unit, planned, stat, 0.05,
           effect, ac, arms, prev);
  jwrite(body);
}

static void
seed_from(uint64_t seed, const char *what, uint8_t out[32])
{
  char s[96];

  snprintf(s, sizeof s, "%s:%" PRIu64, what, seed);
  sha256(s, strlen(s), out);
}

int
main(int argc, char **argv)
{
  const char *dir, *unit = "request", *stat = "mean_probit_diff";
  const char *tamper = "";
  const char *arm_src[3] = { "quantum", "control", "system" };
  const char *arm_type[3] = { "mock", "prng", "system" };
  int units = 200, draws = 2, k = 2, reveal = 1, restart = 0, i, j, arm;
  int lab;
  int tampered_unit = -1, tamper_done = 0, rec_target_done = 0;
  uint64_t seed = 1, planned = 0, seq = 0, ctr = 0, c_used;
  double shift = 0, effect = 0.2;
  char path[4096], body[2048], arms[512], tag[80], hx[65], ac[65], cc[65];
  char lbl_of_arm[3];
  uint8_t keys[3][33], b[DRAW_BYTES], h[32];
  FILE *rf, *vf;

  if (argc < 2) {
    fprintf(stderr, "usage: study_fixture DIR [options]\n");
    return 2;
  }
  dir = argv[1];
  for (i = 2; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

    if (strcmp(o, "--no-reveal") == 0) {
      reveal = 0;
      continue;
    }
    if (!v) {
      fprintf(stderr, "study_fixture: %s needs a value\n", o);
      return 2;
    }
    i++;
    if (strcmp(o, "--units") == 0)
      units = atoi(v);
    else if (strcmp(o, "--draws") == 0)
      draws = atoi(v);
    else if (strcmp(o, "--unit") == 0)
      unit = v;
    else if (strcmp(o, "--statistic") == 0)
      stat = v;
    else if (strcmp(o, "--planned") == 0)
      planned = strtoull(v, NULL, 10);
    else if (strcmp(o, "--shift") == 0)
      shift = strtod(v, NULL);
    else if (strcmp(o, "--effect") == 0)
      effect = strtod(v, NULL);
    else if (strcmp(o, "--seed") == 0)
      seed = strtoull(v, NULL, 10);
    else if (strcmp(o, "--arms") == 0)
      k = atoi(v);
    else if (strcmp(o, "--restart") == 0)
      restart = atoi(v);
    else if (strcmp(o, "--tamper") == 0)
      tamper = v;
    else {
      fprintf(stderr, "study_fixture: unknown option %s\n", o);
      return 2;
    }
  }
  if (k < 2 || k > 3 || units < 1 || draws < 1) {
    fprintf(stderr, "study_fixture: --arms 2 or 3, --units and --draws "
            ">= 1\n");
    return 2;
  }
  if (!planned)
    planned = (uint64_t)units * (strcmp(unit, "draw") == 0 ? draws : 1);
  seed_from(seed, "assign", assign_seed);
  seed_from(seed, "control", control_seed);
  /* label order: arms sorted by their HMAC key */
  for (i = 0; i < k; i++) {
    char d[4];

    snprintf(d, sizeof d, "%d", i);
    hmac(assign_seed, "qrs-study-label", d, keys[i]);
    keys[i][32] = (uint8_t)i;
  }
  qsort(keys, (size_t)k, 33, cmp33);
  for (i = 0; i < k; i++)
    lbl_of_arm[keys[i][32]] = (char)('A' + i);

  snprintf(path, sizeof path, "%s/journal", dir);
  if ((mkdir(dir, 0700) && errno != EEXIST) || mkdir(path, 0700) ||
      (snprintf(path, sizeof path, "%s/records", dir), mkdir(path, 0700))) {
    fprintf(stderr, "study_fixture: %s: %s\n", path, strerror(errno));
    return 2;
  }
  snprintf(path, sizeof path, "%s/journal/journal-000001.log", dir);
  jf = fopen(path, "w");
  snprintf(path, sizeof path, "%s/records/run.jsonl", dir);
  rf = fopen(path, "w");
  if (!jf || !rf) {
    fprintf(stderr, "study_fixture: cannot write in %s\n", dir);
    return 2;
  }
  memset(prev, '0', 64);
  prev[64] = '\0';
  fprintf(jf, "# qrs-journal 1 file=1 prev=%s\n", prev);
  jline = 1;

  /* an ordinary draw before the study */
  sha256("system", 6, h);
  hex(h, 32, hx);
  seq++;
  snprintf(body, sizeof body, "%" PRIu64 "\t100\t0\tsystem\tzscore_mean\t"
           "n=16,mean=127.5,std=73.6\t%016" PRIx64 "\t1\t1700000000.000000000"
           "\t1700000000.000000100\t1700000000.000000200\t%s\t0.5\t\t%s\t",
           seq, seq, hx, prev);
  jwrite(body);

  /* the study record */
  {
    uint8_t other[32];

    sha256(assign_seed, 32, h);
    hex(h, 32, ac);
    if (strcmp(tamper, "commitment") == 0) {
      seed_from(seed + 1, "control", other);
      sha256(other, 32, h);
    } else {
      sha256(control_seed, 32, h);
    }
    hex(h, 32, cc);
  }
  arms[0] = '\0';
  for (i = 0; i < k; i++)
    snprintf(arms + strlen(arms), sizeof arms - strlen(arms), "%s%s:%s:%s",
             i ? "," : "", arm_src[i], arm_type[i], i == 1 ? cc : "-");
  study_record(unit, planned, stat, effect, ac, arms);
  if (strcmp(tamper, "commitment") == 0)
    printf("tampered journal/journal-000001.log:%u\n", jline);

  /* the draws */
  for (i = 0; i < units; i++) {
    if (i > 0 && i == restart) {
      /* qrsd started again: a new epoch, the counter from 0 */
      epoch++;
      ctr = 0;
      study_record(unit, planned + (strcmp(tamper, "plan-changed") == 0),
                   stat, effect, ac, arms);
      if (strcmp(tamper, "plan-changed") == 0)
        printf("tampered journal/journal-000001.log:%u\n", jline);
    }
    for (j = 0; j < draws; j++) {
      double u0, u, prob;
      uint64_t v;
      int64_t t0;
      int m;
      char rlabel;

      c_used = ctr;
      if (strcmp(tamper, "ctr-reused") == 0 && i == 1 && j == 0)
        c_used = ctr - 1;
      if (strcmp(unit, "draw") == 0)
        snprintf(tag, sizeof tag, "%08x:%" PRIu64, epoch, c_used);
      else
        snprintf(tag, sizeof tag, "run-%d", i);
      arm = assigned(tag, k);
      lab = lbl_of_arm[arm];
      if (strcmp(tamper, "assignment") == 0 && arm == 1 &&
          (tampered_unit < 0 || tampered_unit == i) &&
          strcmp(unit, "request") == 0) {
        tampered_unit = i;
        lab = lbl_of_arm[0];
      }
      if (arm == 1) {
        chacha(control_seed, c_used, b, DRAW_BYTES);
      } else {
        char mk[64];

        snprintf(mk, sizeof mk, "mock:%" PRIu64 ":%" PRIu64 ":%d", seed,
                 c_used, arm);
        sha256(mk, strlen(mk), h);
        memcpy(b, h, DRAW_BYTES);
      }
      sha256(b, DRAW_BYTES, h);
      if (strcmp(tamper, "control-bytes") == 0 && arm == 1 &&
          !tamper_done) {
        h[0] ^= 1;
        tamper_done = 1;
        printf("tampered journal/journal-000001.log:%u\n", jline + 1);
      }
      hex(h, 32, hx);
      for (v = 0, m = 0; m < 8; m++)
        v = v << 8 | b[m];
      u0 = ((double)(v >> 11) + 0.5) * 0x1p-53;
      u = arm == 0 && shift != 0 ?
          ustat_phi(ustat_phi_inv(u0) + shift) : u0;
      if (!(u > 0 && u < 1))
        u = u0;
      seq++;
      t0 = 1700000000000000000ll + (int64_t)seq * 1000000;
      snprintf(body, sizeof body, "%" PRIu64 "\t100\t0\t" NAME "/%c\t"
               "zscore_mean\tn=%d,mean=127.5,std=73.6,study=%08x:%" PRIu64
               ",unit=%s\t%016" PRIx64 "\t1\t%" PRId64 ".%09" PRId64 "\t%"
               PRId64 ".%09" PRId64 "\t%" PRId64 ".%09" PRId64 "\t%s\t%.17g"
               "\t\t%s\t", seq, lab, DRAW_BYTES, epoch, c_used, tag,
               seq * 7919, t0 / 1000000000, t0 % 1000000000,
               (t0 + 100) / 1000000000, (t0 + 100) % 1000000000,
               (t0 + 200) / 1000000000, (t0 + 200) % 1000000000, hx, u,
               prev);
      jwrite(body);
      if (strcmp(tamper, "ctr-reused") == 0 && i == 1 && j == 0)
        printf("tampered journal/journal-000001.log:%u\n", jline);
      if (strcmp(tamper, "assignment") == 0 && tampered_unit == i &&
          j == 0)
        printf("tampered journal/journal-000001.log:%u\n", jline);
      /* the record: a token whose probability grows with u */
      prob = 0.2 + 0.6 * u;
      rlabel = (char)lab;
      if (strcmp(tamper, "records-moved") == 0 && !rec_target_done &&
          seq > 10) {
        rlabel = (char)(lab == 'A' ? 'B' : 'A');
        rec_target_done = 1;
        printf("tampered records/run.jsonl:%" PRIu64 "\n", seq - 1);
      }
      fprintf(rf, "{\"step\": %d, \"token_id\": %" PRIu64 ", \"u_value\": "
              "%.17g, \"cdf_lo\": %.17g, \"cdf_hi\": %.17g, \"token_prob\": "
              "%.17g, \"greedy\": false, \"entropy_is_fallback\": false, "
              "\"entropy_source_used\": \"" NAME "/%c\", "
              "\"entropy_source_type\": \"study\", \"journal_seq\": %"
              PRIu64 ", \"draw_received_ns\": %" PRId64 ", "
              "\"draw_generated_ns\": %" PRId64 ", \"draw_sent_ns\": %"
              PRId64 ", \"entropy_nonce\": \"%016" PRIx64 "\", "
              "\"timestamp_ns\": %" PRId64 ", \"z_score\": null, "
              "\"sample_mean\": null, \"config_hash\": \"0123456789abcdef\"}"
              "\n", j, seq % 1000, u, u > 1e-3 ? u - 1e-3 : 0,
              u < 1 - 1e-3 ? u + 1e-3 : 1, prob, rlabel, seq, t0, t0 + 100,
              t0 + 200, seq * 7919, t0 + 300);
      ctr++;
    }
  }
  fclose(jf);
  fclose(rf);
  if (reveal) {
    snprintf(path, sizeof path, "%s/reveal.json", dir);
    vf = fopen(path, "w");
    if (!vf) {
      fprintf(stderr, "study_fixture: %s: %s\n", path, strerror(errno));
      return 2;
    }
    hex(assign_seed, 32, ac);
    hex(control_seed, 32, cc);
    fprintf(vf, "{\"study\": \"" NAME "\", \"assignment_seed\": \"%s\", "
            "\"seeds\": {\"control\": \"%s\"}}\n", ac, cc);
    fclose(vf);
  }
  return 0;
}
