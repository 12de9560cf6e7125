/* The config loader's hints: a misspelled key, source type or choice is
   reported with the nearest valid name ("did you mean 'system'?"), a source
   type with the list this build supports, and nothing is suggested when no
   name is close. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "conf/conf.h"
#include "conf/conf_int.h"

#define TYPES "system, mock, device, timing, noise, grpc, prng"

/* Loading text fails with -EINVAL and exactly "t.yaml:<line>: <msg>". */
static void
expect_error(const char *text, int line, const char *msg)
{
  struct qrsd_conf *c;
  char want[1024], err[512];
  int r;

  snprintf(want, sizeof(want), "t.yaml:%d: %s", line, msg);
  c = NULL;
  r = conf_load_string(text, strlen(text), "t.yaml", &c, err, sizeof(err));
  cr_assert_eq(r, -EINVAL, "got %d (%s)\n--- text:\n%s", r, err, text);
  cr_assert_null(c);
  cr_assert_str_eq(err, want, "--- text:\n%s", text);
}

Test(conf_hints, a_misspelled_key_names_the_key_meant)
{
  expect_error("sockett:\n  path: /tmp/q.sock\n", 1,
               "sockett: unknown key; did you mean 'socket'?");
  expect_error("socket:\n  grup: qrs\n", 2,
               "socket.grup: unknown key; did you mean 'group'?");
  expect_error("limits: { max_conections: 5 }\n", 1,
               "limits.max_conections: unknown key; did you mean "
               "'max_connections'?");
  expect_error("sources:\n  s: { type: system, falback: error }\n", 2,
               "sources.s.falback: unknown key; did you mean 'fallback'?");
}

Test(conf_hints, a_misspelled_source_type_names_the_type_and_the_list)
{
  expect_error("sources:\n  oops: { type: sytem }\n", 2,
               "sources.oops.type: source type 'sytem' is not supported by "
               "this build (supported: " TYPES "); did you mean 'system'?");
  expect_error("sources:\n  oops: { type: System }\n", 2,
               "sources.oops.type: source type 'System' is not supported by "
               "this build (supported: " TYPES "); did you mean 'system'?");
  expect_error("sources:\n  q: { type: gprc }\n", 2,
               "sources.q.type: source type 'gprc' is not supported by "
               "this build (supported: " TYPES "); did you mean 'grpc'?");
}

Test(conf_hints, a_misspelled_source_name_names_the_source_meant)
{
  expect_error("sources:\n  quantum: { type: system }\n"
               "default_source: quantun\n", 3,
               "default_source: source 'quantun' is not declared under "
               "sources; did you mean 'quantum'?");
  expect_error("sources:\n  quantum: { type: system, fallback: sytem }\n"
               "default_source: quantum\n", 2,
               "sources.quantum.fallback: 'sytem' is not a declared source "
               "(use error, system, mock or a source under sources); did "
               "you mean 'system'?");
  expect_error("sources:\n  quantum: { type: system, fallback: elsewhere }\n"
               "default_source: quantum\n", 2,
               "sources.quantum.fallback: 'elsewhere' is not a declared "
               "source (use error, system, mock or a source under sources)");
}

Test(conf_hints, a_misspelled_choice_names_the_choice_meant)
{
  expect_error("amplifier: { type: zscore_men }\n", 1,
               "amplifier.type: 'zscore_men' is not supported by this build "
               "(supported: zscore_mean, zscore_thought, ecdf, exact); did "
               "you mean 'zscore_mean'?");
  expect_error("sources:\n  t: { type: timing, conditioning: sha265 }\n", 2,
               "sources.t.conditioning: 'sha265' is not supported by this "
               "build (supported: raw, vonneumann, sha256); did you mean "
               "'sha256'?");
}

Test(conf_hints, nothing_close_gives_no_hint)
{
  expect_error("oops: 1\n", 1, "oops: unknown key");
  expect_error("sources:\n  oops: { type: quantum }\n", 2,
               "sources.oops.type: source type 'quantum' is not supported by "
               "this build (supported: " TYPES ")");
  expect_error("sources:\n  s: { type: system, seed: 1 }\n", 2,
               "sources.s.seed: unknown key");
  expect_error("amplifier: { type: mean }\n", 1,
               "amplifier.type: 'mean' is not supported by this build "
               "(supported: zscore_mean, zscore_thought, ecdf, exact)");
}

Test(conf_hints, nearest_allows_few_edits_for_the_length)
{
  static const char *const names[] = { "type", "fallback", "mode", "path",
                                       NULL };
  char hint[80];

  cr_assert_str_eq(conf__nearest("tpye", names), "type");   /* a swap */
  cr_assert_str_eq(conf__nearest("fallbakc", names), "fallback");
  cr_assert_str_eq(conf__nearest("fall_back", names), "fallback");
  cr_assert_str_eq(conf__nearest("MODE", names), "mode");
  cr_assert_str_eq(conf__nearest("pth", names), "path");
  cr_assert_null(conf__nearest("x", names));
  cr_assert_null(conf__nearest("tp", names));       /* 2 edits of 4 */
  cr_assert_null(conf__nearest("fbllbxcx", names)); /* 3 edits */
  cr_assert_null(conf__nearest("", names));
  conf__hint(hint, sizeof(hint), "moed", names);
  cr_assert_str_eq(hint, "; did you mean 'mode'?");
  conf__hint(hint, sizeof(hint), "quantum", names);
  cr_assert_str_eq(hint, "");
}

Test(conf_hints, names_join_and_cut_to_fit)
{
  static const char *const names[] = { "raw", "vonneumann", "sha256", NULL };
  static const char *const none[] = { NULL };
  char buf[64], small[8];

  conf__join_names(buf, sizeof(buf), names);
  cr_assert_str_eq(buf, "raw, vonneumann, sha256");
  conf__join_names(buf, sizeof(buf), none);
  cr_assert_str_eq(buf, "");
  conf__join_names(small, sizeof(small), names);
  cr_assert_str_eq(small, "raw, vo");
}
