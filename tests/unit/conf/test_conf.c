/* The config loader (daemon/conf/, conf.h): defaults, good files, each
   kind of bad file with the exact message (file, line, key), printing
   and reloading.  One suite for the one module, so it is long: most of
   its lines are the case tables of bad texts and their messages. */
#define _GNU_SOURCE
#include <errno.h>
#include <locale.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "conf/conf.h"

#define FIXTURE(name) QRS_TEST_SOURCE_DIR "/conf/" name
#define SOURCE_YAML QRS_TEST_SOURCE_DIR "/../conf/qrsd.yaml"

/* ---- Helpers ----------------------------------------------------------- */

/* text with "allow_test_sources: true" appended if it has a mock (which
   needs it; appended so that line numbers stay), unless it sets the
   key itself.  Static storage. */
static const char *
allow_tests(const char *text)
{
  static char buf[65536];

  if (!strstr(text, "mock") || strstr(text, "allow_test_sources") ||
      strlen(text) + 64 > sizeof(buf))
    return text;
  snprintf(buf, sizeof(buf), "%s%sallow_test_sources: true\n", text,
           text[0] && text[strlen(text) - 1] != '\n' ? "\n" : "");
  return buf;
}

static struct qrsd_conf *
load_default(void)
{
  struct qrsd_conf *c;
  char err[256];
  int r;

  c = NULL;
  r = conf_load_default(&c, err, sizeof(err));
  cr_assert_eq(r, 0, "built-in default: %s", err);
  cr_assert_not_null(c);
  return c;
}

static struct qrsd_conf *
load_text(const char *text)
{
  struct qrsd_conf *c;
  char err[256];
  int r;

  c = NULL;
  text = allow_tests(text);
  r = conf_load_string(text, strlen(text), "t.yaml", &c, err, sizeof(err));
  cr_assert_eq(r, 0, "unexpected error %d: %s\n--- text:\n%s", r, err, text);
  cr_assert_not_null(c);
  return c;
}

static struct qrsd_conf *
load_path(const char *path)
{
  struct qrsd_conf *c;
  char err[256];
  int r;

  c = NULL;
  r = conf_load_file(path, &c, err, sizeof(err));
  cr_assert_eq(r, 0, "unexpected error %d: %s", r, err);
  cr_assert_not_null(c);
  return c;
}

/* The socket, the amplifier and the request limits of a and b agree. */
static void
assert_conf_head_eq(const struct qrsd_conf *a, const struct qrsd_conf *b)
{
  cr_assert_str_eq(a->socket_path, b->socket_path);
  cr_assert_eq(a->socket_mode, b->socket_mode, "mode %o != %o",
               a->socket_mode, b->socket_mode);
  cr_assert_str_eq(a->socket_group, b->socket_group);
  cr_assert_str_eq(a->default_source, b->default_source);
  cr_assert_str_eq(a->amp_type, b->amp_type);
  cr_assert_eq(a->amp_sample_count, b->amp_sample_count);
  cr_assert_eq(a->amp_population_mean, b->amp_population_mean);
  cr_assert_eq(a->amp_population_std, b->amp_population_std);
  cr_assert_eq(a->amp_epsilon, b->amp_epsilon);
  cr_assert_eq(a->max_frame_bytes, b->max_frame_bytes);
  cr_assert_eq(a->max_sample_count, b->max_sample_count);
  cr_assert_eq(a->max_connections, b->max_connections);
  cr_assert_eq(a->max_inflight, b->max_inflight);
  cr_assert_eq(a->request_timeout_ms, b->request_timeout_ms);
}

/* c's sources are the n of want, in order: name, type and line, and the
   seed and mean shift of the mocks. */
static void
assert_sources_are(const struct qrsd_conf *c, const struct conf_source *want,
                   size_t n)
{
  size_t i;

  cr_assert_eq(c->n_sources, n);
  for (i = 0; i < n; i++) {
    cr_assert_str_eq(c->sources[i].name, want[i].name, "source %zu", i);
    cr_assert_eq(c->sources[i].type, want[i].type, "source %s",
                 want[i].name);
    cr_assert_eq(c->sources[i].line, want[i].line, "source %s",
                 want[i].name);
    if (want[i].type != CONF_SOURCE_MOCK)
      continue;
    cr_assert_eq(c->sources[i].mock_seed, want[i].mock_seed, "source %s",
                 want[i].name);
    cr_assert_eq(c->sources[i].mock_mean_shift, want[i].mock_mean_shift,
                 "source %s", want[i].name);
  }
}

/* Everything but file and the sources' lines. */
static void
assert_conf_eq(const struct qrsd_conf *a, const struct qrsd_conf *b)
{
  size_t i;

  assert_conf_head_eq(a, b);
  cr_assert_eq(a->allow_test_sources, b->allow_test_sources);
  cr_assert_eq(a->hello_timeout_ms, b->hello_timeout_ms);
  cr_assert_eq(a->frame_timeout_ms, b->frame_timeout_ms);
  cr_assert_eq(a->idle_timeout_ms, b->idle_timeout_ms);
  cr_assert_eq(a->max_connections_per_uid, b->max_connections_per_uid);
  cr_assert_eq(a->memory_budget, b->memory_budget);
  cr_assert_eq(a->n_sources, b->n_sources);
  for (i = 0; i < a->n_sources; i++) {
    cr_assert_str_eq(a->sources[i].name, b->sources[i].name);
    cr_assert_eq(a->sources[i].type, b->sources[i].type, "source %s",
                 a->sources[i].name);
    cr_assert_eq(a->sources[i].mock_seed, b->sources[i].mock_seed);
    cr_assert_eq(a->sources[i].mock_mean_shift,
                 b->sources[i].mock_mean_shift);
    cr_assert_str_eq(a->sources[i].fallback, b->sources[i].fallback);
  }
}

/* conf_print() into a new string (caller frees). */
static char *
print_conf(const struct qrsd_conf *c)
{
  char *buf;
  size_t len;
  FILE *f;

  buf = NULL;
  f = open_memstream(&buf, &len);
  cr_assert_not_null(f);
  cr_assert_eq(conf_print(c, f), 0);
  cr_assert_eq(fclose(f), 0);
  return buf;
}

/* A load of fixture name fails with -EINVAL and exactly
   "<path>:<line>: <msg>". */
static void
expect_file_error(const char *name, int line, const char *msg)
{
  struct qrsd_conf *c;
  char path[1024], want[2048], err[512];
  int r;

  snprintf(path, sizeof(path), "%s/conf/%s", QRS_TEST_SOURCE_DIR, name);
  snprintf(want, sizeof(want), "%s:%d: %s", path, line, msg);
  c = NULL;
  r = conf_load_file(path, &c, err, sizeof(err));
  cr_assert_eq(r, -EINVAL, "%s: got %d (%s)", name, r, err);
  cr_assert_null(c);
  cr_assert_str_eq(err, want);
}

/* Loading text fails with -EINVAL and exactly "t.yaml:<line>: <msg>"
   (line 0: "t.yaml: <msg>").  When it does not, the test fails and goes
   on (cr_expect), so that a table reports each row that fails. */
static void
expect_text_error(const char *text, int line, const char *msg)
{
  struct qrsd_conf *c;
  char want[1024], err[512];
  int r;

  if (line > 0)
    snprintf(want, sizeof(want), "t.yaml:%d: %s", line, msg);
  else
    snprintf(want, sizeof(want), "t.yaml: %s", msg);
  c = NULL;
  err[0] = '\0';
  text = allow_tests(text);
  r = conf_load_string(text, strlen(text), "t.yaml", &c, err, sizeof(err));
  cr_expect_eq(r, -EINVAL, "got %d (%s)\n--- text:\n%s", r, err, text);
  cr_expect_null(c);
  cr_expect_str_eq(err, want, "got  '%s'\nwant '%s'\n--- text:\n%s", err,
                   want, text);
  conf_free(c);
}

/* A text that loading rejects, with the line and message
   expect_text_error() wants. */
struct bad_text {
  const char *text;
  int line;
  const char *msg;
};

/* expect_text_error() for each of the n cases (each failing one's text
   in its message). */
static void
expect_text_errors(const struct bad_text *bad, size_t n)
{
  size_t i;

  for (i = 0; i < n; i++)
    expect_text_error(bad[i].text, bad[i].line, bad[i].msg);
}

/* ---- Defaults ---------------------------------------------------------- */

Test(conf, default_has_the_documented_values)
{
  static const struct conf_source sources[] = {
    { .name = "system", .type = CONF_SOURCE_SYSTEM, .line = 0 },
  };
  static const struct qrsd_conf want = {
    .socket_path = "/run/qrsd/qrsd.sock", .socket_mode = 0660,
    .socket_group = "qrs", .default_source = "system",
    .amp_type = "zscore_mean", .amp_sample_count = 10000,
    .amp_population_mean = 127.5, .amp_population_std = 73.90027063,
    .amp_epsilon = 1.0e-10, .max_frame_bytes = 1048576,
    .max_sample_count = 1048576, .max_connections = 1024,
    .max_inflight = 64, .request_timeout_ms = 5000,
  };
  struct qrsd_conf *c;

  c = load_default();
  cr_assert_str_eq(c->file, "(built-in default)");
  assert_conf_head_eq(c, &want);
  assert_sources_are(c, sources, 1);
  conf_free(c);
}

Test(conf, embedded_default_is_the_source_file_byte_for_byte)
{
  char *buf;
  size_t len;
  FILE *f;

  f = fopen(SOURCE_YAML, "rb");
  cr_assert_not_null(f, "%s: %s", SOURCE_YAML, strerror(errno));
  buf = malloc(CONF_MAX_FILE_SIZE);
  cr_assert_not_null(buf);
  len = fread(buf, 1, CONF_MAX_FILE_SIZE, f);
  fclose(f);
  cr_assert_eq(len, conf_default_yaml_len);
  cr_assert_eq(memcmp(buf, conf_default_yaml, len), 0);
  cr_assert_eq(conf_default_yaml[len], '\0');
  free(buf);
}

Test(conf, source_file_loads_equal_to_embedded_default)
{
  struct qrsd_conf *d, *c;

  d = load_default();
  c = load_path(SOURCE_YAML);
  cr_assert_str_eq(c->file, SOURCE_YAML);
  assert_conf_eq(c, d);
  cr_assert_gt(c->sources[0].line, 0);   /* declared in the file */
  conf_free(c);
  conf_free(d);
}

Test(conf, empty_text_keeps_every_default)
{
  static const char *const texts[] = {
    "", "# nothing but a comment\n", "---\n", "---\n...\n", "~\n",
    "socket:\namplifier:\nlimits: {}\n",
  };
  struct qrsd_conf *d, *c;
  size_t i;

  d = load_default();
  for (i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
    c = load_text(texts[i]);
    cr_assert_str_eq(c->file, "t.yaml");
    assert_conf_eq(c, d);
    conf_free(c);
  }
  conf_free(d);
}

Test(conf, missing_key_keeps_its_default)
{
  struct qrsd_conf *c;

  c = load_text("socket:\n  path: /tmp/x.sock\nlimits:\n"
                "  max_connections: 3\n");
  cr_assert_str_eq(c->socket_path, "/tmp/x.sock");
  cr_assert_eq(c->socket_mode, 0660);
  cr_assert_str_eq(c->socket_group, "qrs");
  cr_assert_eq(c->max_connections, 3);
  cr_assert_eq(c->max_inflight, 64);
  cr_assert_eq(c->n_sources, 1);
  conf_free(c);
}

/* ---- Good files -------------------------------------------------------- */

Test(conf, full_file_with_mock_sources)
{
  static const struct conf_source sources[] = {
    { .name = "sys.main", .type = CONF_SOURCE_SYSTEM, .line = 22 },
    { .name = "mock-1", .type = CONF_SOURCE_MOCK, .line = 23,
      .mock_seed = UINT64_MAX, .mock_mean_shift = -2.5 },
    { .name = "mock_2", .type = CONF_SOURCE_MOCK, .line = 27,
      .mock_seed = 0, .mock_mean_shift = 2.0 },   /* seed: the default */
  };
  static const struct qrsd_conf want = {
    .socket_path = "/tmp/qrs test/qrsd.sock", .socket_mode = 0640,
    .socket_group = "", .default_source = "mock-1",
    .amp_type = "zscore_mean", .amp_sample_count = 4096,
    .amp_population_mean = 127.25, .amp_population_std = 73.612,
    .amp_epsilon = 1e-12, .max_frame_bytes = 65536,
    .max_sample_count = 8192, .max_connections = 16, .max_inflight = 8,
    .request_timeout_ms = 250,
  };
  struct qrsd_conf *c;

  c = load_path(FIXTURE("good_full.yaml"));
  cr_assert_str_eq(c->file, FIXTURE("good_full.yaml"));
  assert_conf_head_eq(c, &want);
  assert_sources_are(c, sources, 3);
  conf_free(c);
}

Test(conf, flow_and_block_style_load_the_same)
{
  struct qrsd_conf *a, *b;

  a = load_text("socket:\n"
                "  path: 'rel/q.sock'\n"
                "  mode: \"0600\"\n"
                "default_source: m\n"
                "amplifier:\n"
                "  sample_count: 77\n"
                "  epsilon: 0.001\n"
                "sources:\n"
                "  m:\n"
                "    type: mock\n"
                "    seed: 42\n"
                "    mean_shift: -1.25\n"
                "  s:\n"
                "    type: system\n");
  b = load_text("{ socket: { path: rel/q.sock, mode: 0600 },"
                " default_source: \"m\", amplifier: { sample_count: 77,"
                " epsilon: 1e-3 }, sources: { m: { type: mock, seed: 42,"
                " mean_shift: -1.25 }, s: { type: system } },"
                " allow_test_sources: true }\n");
  assert_conf_eq(a, b);
  cr_assert_str_eq(a->socket_path, "rel/q.sock");
  cr_assert_eq(a->socket_mode, 0600);
  cr_assert_eq(a->amp_epsilon, 0.001);
  cr_assert_eq(a->n_sources, 2);
  conf_free(a);
  conf_free(b);
}

Test(conf, mode_is_read_as_octal_in_every_spelling)
{
  static const char *const texts[] = {
    "socket: { mode: \"0640\" }", "socket: { mode: 0640 }",
    "socket: { mode: 640 }", "socket: { mode: 0o640 }",
    "socket: { mode: '0640' }",
  };
  struct qrsd_conf *c;
  size_t i;

  for (i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
    c = load_text(texts[i]);
    cr_assert_eq(c->socket_mode, 0640, "%s: got %o", texts[i],
                 c->socket_mode);
    conf_free(c);
  }
  c = load_text("socket: { mode: \"0\" }");
  cr_assert_eq(c->socket_mode, 0);
  conf_free(c);
  c = load_text("socket: { mode: \"0777\" }");
  cr_assert_eq(c->socket_mode, 0777);
  conf_free(c);
}

Test(conf, integer_and_float_limits_are_inclusive_where_documented)
{
  struct qrsd_conf *c;

  c = load_text("limits: { max_frame_bytes: 1024, max_connections: 65536,"
                " max_sample_count: 16777216, request_timeout_ms: 600000 }\n"
                "amplifier: { sample_count: 16777216, population_mean: 0,"
                " population_std: 127.5, epsilon: 0.4999 }\n"
                "sources: { system: { type: system },"
                " m: { type: mock, mean_shift: -127.5 } }\n");
  cr_assert_eq(c->max_frame_bytes, 1024);
  cr_assert_eq(c->max_connections, 65536);
  cr_assert_eq(c->max_sample_count, 16777216);
  cr_assert_eq(c->request_timeout_ms, 600000);
  cr_assert_eq(c->amp_sample_count, 16777216);
  cr_assert_eq(c->amp_population_mean, 0.0);
  cr_assert_eq(c->amp_population_std, 127.5);
  cr_assert_eq(c->amp_epsilon, 0.4999);
  cr_assert_eq(c->sources[1].mock_mean_shift, -127.5);
  conf_free(c);
}

Test(conf, sources_replace_the_default_list)
{
  struct qrsd_conf *c;

  c = load_text("default_source: m\nsources:\n  m: { type: mock }\n");
  cr_assert_eq(c->n_sources, 1);
  cr_assert_str_eq(c->sources[0].name, "m");
  cr_assert_eq(c->sources[0].line, 3);
  cr_assert_null(conf_find_source(c, "system"));
  cr_assert_eq(conf_find_source(c, "m"), &c->sources[0]);
  conf_free(c);
}

Test(conf, find_source_and_type_names)
{
  struct qrsd_conf *c;

  c = load_path(FIXTURE("good_full.yaml"));
  cr_assert_eq(conf_find_source(c, "mock_2"), &c->sources[2]);
  cr_assert_eq(conf_find_source(c, "sys.main"), &c->sources[0]);
  cr_assert_null(conf_find_source(c, "mock"));
  cr_assert_null(conf_find_source(c, NULL));
  cr_assert_null(conf_find_source(NULL, "mock_2"));
  cr_assert_str_eq(conf_source_type_name(CONF_SOURCE_SYSTEM), "system");
  cr_assert_str_eq(conf_source_type_name(CONF_SOURCE_MOCK), "mock");
  conf_free(c);
}

/* ---- Printing ---------------------------------------------------------- */

static void
assert_print_reparses(const struct qrsd_conf *c)
{
  struct qrsd_conf *back;
  char *text;

  text = print_conf(c);
  back = load_text(text);
  assert_conf_eq(back, c);
  conf_free(back);
  free(text);
}

Test(conf, print_reparses_to_the_same_config)
{
  struct qrsd_conf *c;

  c = load_default();
  assert_print_reparses(c);
  conf_free(c);

  /* Every value differs from the default here, so a key that print left
     out would come back as its default and differ. */
  c = load_path(FIXTURE("good_full.yaml"));
  assert_print_reparses(c);
  conf_free(c);

  c = load_text("amplifier: { population_mean: 0.1, population_std: "
                "0.30000000000000004, epsilon: 4.9406564584124654e-324 }\n"
                "sources: { system: { type: system }, \"a.b-c_d\": { type: "
                "mock, seed: 1, mean_shift: 1e-300 } }\n");
  assert_print_reparses(c);
  conf_free(c);
}

Test(conf, print_writes_every_section_and_source)
{
  struct qrsd_conf *c;
  char *text;

  c = load_path(FIXTURE("good_full.yaml"));
  text = print_conf(c);
  cr_assert_not_null(strstr(text, "\nsocket:\n  path: \"/tmp/qrs test/"
                            "qrsd.sock\"\n  mode: \"0640\"\n"), "%s", text);
  cr_assert_not_null(strstr(text, "  max_inflight_per_connection: 8\n"),
                     "%s", text);
  cr_assert_not_null(strstr(text, "  \"mock-1\": { type: mock, fallback: "
                            "\"error\", seed: 18446744073709551615, "
                            "mean_shift: -2.5 }\n"),
                     "%s", text);
  free(text);
  conf_free(c);
}

/* ---- Fallbacks --------------------------------------------------------- */

Test(conf, fallback_defaults_to_error_and_takes_names)
{
  struct qrsd_conf *c;

  c = load_text("sources:\n"
                "  a: { type: mock, fallback: b }\n"
                "  b: { type: mock, fallback: system }\n"
                "  c: { type: system }\n"
                "  d: { type: mock, fallback: mock }\n"
                "default_source: c\n");
  cr_assert_str_eq(conf_find_source(c, "a")->fallback, "b");
  cr_assert_str_eq(conf_find_source(c, "b")->fallback, "system");
  cr_assert_str_eq(conf_find_source(c, "c")->fallback, "error");
  cr_assert_str_eq(conf_find_source(c, "d")->fallback, "mock");
  cr_assert_eq(conf_find_source(c, "a")->fallback_line, 2);
  conf_free(c);
}

Test(conf, fallback_to_an_unknown_source_is_rejected)
{
  expect_text_error("sources:\n"
                    "  a:\n"
                    "    type: system\n"
                    "    fallback: nosuch\n"
                    "default_source: a\n", 4,
                    "sources.a.fallback: 'nosuch' is not a declared source "
                    "(use error, system, mock or a source under sources)");
}

Test(conf, connection_limits_have_defaults_and_ranges)
{
  static const struct bad_text bad[] = {
    { "limits: { hello_timeout_ms: 0 }\n",
      1, "limits.hello_timeout_ms: value 0 out of range 1..600000" },
    { "limits:\n  memory_budget_bytes: 1000\n",
      2, "limits.memory_budget_bytes: value 1000 out of range "
         "16777216..1099511627776" },
    { "limits: { max_connections_per_uid: 0 }\n",
      1, "limits.max_connections_per_uid: value 0 out of range 1..65536" },
  };
  struct qrsd_conf *c;

  c = load_default();
  cr_assert_eq(c->hello_timeout_ms, 5000);
  cr_assert_eq(c->frame_timeout_ms, 10000);
  cr_assert_eq(c->idle_timeout_ms, 0);
  cr_assert_eq(c->max_connections_per_uid, 256);
  cr_assert_eq(c->memory_budget, 268435456);
  conf_free(c);
  c = load_text("limits: { hello_timeout_ms: 1, frame_timeout_ms: 600000, "
                "idle_timeout_ms: 86400000, max_connections_per_uid: 1, "
                "memory_budget_bytes: 1099511627776 }\n");
  cr_assert_eq(c->hello_timeout_ms, 1);
  cr_assert_eq(c->frame_timeout_ms, 600000);
  cr_assert_eq(c->idle_timeout_ms, 86400000);
  cr_assert_eq(c->max_connections_per_uid, 1);
  cr_assert_eq(c->memory_budget, 1099511627776ull);
  conf_free(c);
  expect_text_errors(bad, sizeof(bad) / sizeof(bad[0]));
}

Test(conf, test_sources_need_allow_test_sources)
{
  struct qrsd_conf *c;
  char err[256];
  const char *mock = "default_source: system\n"
                     "sources:\n"
                     "  system: { type: mock, seed: 1 }\n";
  const char *fb = "sources:\n"
                   "  system: { type: system, fallback: mock }\n";

  cr_assert_eq(conf_load_string(mock, strlen(mock), "t.yaml", &c, err,
                                sizeof(err)), -EINVAL);
  cr_assert_str_eq(err, "t.yaml:3: sources.system: a mock source is for "
                   "tests only and serves only with allow_test_sources: "
                   "true");
  cr_assert_eq(conf_load_string(fb, strlen(fb), "t.yaml", &c, err,
                                sizeof(err)), -EINVAL);
  cr_assert_str_eq(err, "t.yaml:2: sources.system.fallback: the built-in "
                   "mock source is for tests only and serves only with "
                   "allow_test_sources: true");
  c = load_text(mock);
  cr_assert(c->allow_test_sources);
  conf_free(c);
  c = load_default();
  cr_assert_not(c->allow_test_sources);
  conf_free(c);
  expect_text_error("allow_test_sources: yes\n", 1, "allow_test_sources: "
                    "expected true or false, got 'yes'");
}

/* ---- Each kind of bad file --------------------------------------------- */

Test(conf, unknown_key_names_file_line_and_key)
{
  expect_file_error("bad_unknown_key.yaml", 5, "socket.grup: unknown key; "
                    "did you mean 'group'?");
}

Test(conf, string_where_integer_is_a_type_error)
{
  expect_file_error("bad_type_string.yaml", 5, "limits.max_connections: "
                    "expected an integer, got 'plenty'");
}

Test(conf, mapping_where_scalar_is_a_type_error)
{
  expect_file_error("bad_type_mapping.yaml", 4, "socket.group: "
                    "expected a string, got a mapping");
}

Test(conf, out_of_range_value_names_the_range)
{
  expect_file_error("bad_range.yaml", 7, "limits.max_connections: "
                    "value 0 out of range 1..65536");
}

Test(conf, non_octal_mode_is_rejected)
{
  expect_file_error("bad_mode.yaml", 4, "socket.mode: expected an octal "
                    "mode like \"0660\", got '0x1B0'");
}

Test(conf, unsupported_source_type_is_rejected)
{
  expect_file_error("bad_source_type.yaml", 7, "sources.qrng.type: source "
                    "type 'quantum' is not supported by this build "
                    "(supported: system, mock, device, timing, noise, grpc, prng)");
}

Test(conf, duplicate_key_names_both_lines)
{
  expect_file_error("bad_duplicate_key.yaml", 5, "limits.max_connections: "
                    "duplicate key (first given at line 3)");
}

Test(conf, undeclared_default_source_is_rejected)
{
  expect_file_error("bad_default_source.yaml", 2, "default_source: source "
                    "'qrng' is not declared under sources");
}

Test(conf, sample_count_above_limit_is_rejected)
{
  expect_file_error("bad_sample_count.yaml", 6, "amplifier.sample_count: "
                    "value 10000 is above limits.max_sample_count (5000)");
}

Test(conf, malformed_yaml_is_a_syntax_error_with_its_line)
{
  expect_file_error("bad_syntax.yaml", 6, "syntax error: did not find "
                    "expected ',' or '}' (while parsing a flow mapping at "
                    "line 5)");
}

Test(conf, empty_sources_is_rejected)
{
  expect_file_error("bad_empty_sources.yaml", 4, "sources: at least one "
                    "source is required");
}

/* ---- More bad text ----------------------------------------------------- */

/* Bad texts, each refused with its line and a message that names the
   key, by kind.  Every row is checked (a row that fails does not hide
   the ones after it). */
Test(conf, bad_texts_are_rejected_naming_line_and_key)
{
#define HEAD "sources:\n  system: { type: system }\n"
  static const struct bad_text bad[] = {
    /* integers */
    { "limits:\n  max_connections: -1\n",
      2, "limits.max_connections: value -1 out of range 1..65536" },
    { "limits:\n  max_connections: 65537\n",
      2, "limits.max_connections: value 65537 out of range 1..65536" },
    { "limits: { max_frame_bytes: 99999999999999999999999 }",
      1, "limits.max_frame_bytes: value 99999999999999999999999 out of "
         "range 1024..67108864" },
    { "limits:\n  max_connections: 010\n",
      2, "limits.max_connections: expected an integer, got '010'" },
    { "limits:\n  max_connections: 1.5\n",
      2, "limits.max_connections: expected an integer, got '1.5'" },
    { "limits:\n  max_connections:\n",
      2, "limits.max_connections: expected an integer, got no value" },
    { "limits:\n  max_connections: [1]\n",
      2, "limits.max_connections: expected an integer, got a sequence" },
    { "sources:\n  m: { type: mock, seed: 18446744073709551616 }\n",
      2, "sources.m.seed: value 18446744073709551616 out of range "
         "0..18446744073709551615" },
    { "amplifier:\n  sample_count: 0\n",
      2, "amplifier.sample_count: value 0 out of range 1..16777216" },
    /* floats */
    { "amplifier:\n  epsilon: 0.5\n",
      2, "amplifier.epsilon: value 0.5 out of range 0 < x < 0.5" },
    { "amplifier:\n  epsilon: 0\n",
      2, "amplifier.epsilon: value 0 out of range 0 < x < 0.5" },
    { "amplifier:\n  population_std: 0.0\n",
      2, "amplifier.population_std: value 0.0 out of range 0 < x <= 127.5" },
    { "amplifier:\n  population_mean: 1e999\n",
      2, "amplifier.population_mean: value 1e999 out of range 0..255" },
    { "amplifier:\n  population_mean: nan\n",
      2, "amplifier.population_mean: expected a number, got 'nan'" },
    { "amplifier:\n  population_mean: .inf\n",
      2, "amplifier.population_mean: expected a number, got '.inf'" },
    { "amplifier:\n  population_mean: 0x10\n",
      2, "amplifier.population_mean: expected a number, got '0x10'" },
    { "amplifier:\n  population_mean: 127,5\n",
      2, "amplifier.population_mean: expected a number, got '127,5'" },
    { "sources:\n  m: { type: mock, mean_shift: 200 }\n",
      2, "sources.m.mean_shift: value 200 out of range -127.5..127.5" },
    /* socket modes */
    { "socket:\n  mode: \"0868\"\n",
      2, "socket.mode: expected an octal mode like \"0660\", got '0868'" },
    { "socket:\n  mode: rw-rw----\n",
      2, "socket.mode: expected an octal mode like \"0660\", got "
         "'rw-rw----'" },
    { "socket:\n  mode: \"01777\"\n",
      2, "socket.mode: value 01777 out of range 0..0777" },
    { "socket:\n  mode: 0o\n",
      2, "socket.mode: expected an octal mode like \"0660\", got '0o'" },
    /* sources */
    { "sources:\n",
      1, "sources: at least one source is required" },
    { "sources: [system]\n",
      1, "sources: expected a mapping of sources, got a sequence" },
    { "sources:\n  system: system\n",
      2, "sources.system: expected a mapping with a type, got 'system'" },
    { "sources:\n  m:\n    seed: 1\n",
      2, "sources.m: missing key 'type'" },
    { "sources:\n  m: { type: [mock] }\n",
      2, "sources.m.type: expected a source type, got a sequence" },
    { "sources:\n  system: { type: system, seed: 1 }\n",
      2, "sources.system.seed: unknown key" },
    { "sources:\n  system: { type: system }\n  system: { type: system }\n",
      3, "sources.system: duplicate key (first given at line 2)" },
    { "sources:\n  \"a b\": { type: system }\n",
      2, "sources.a b: invalid source name (1 to 63 of A-Z a-z 0-9 _ . -)" },
    { "sources:\n  \"\": { type: system }\n",
      2, "sources: invalid source name (1 to 63 of A-Z a-z 0-9 _ . -)" },
    { "sources:\n  m: { type: mock, type: system }\n",
      2, "sources.m.type: duplicate key (first given at line 2)" },
    { "sources:\n  m: { type: quantum }\n",
      2, "sources.m.type: source type 'quantum' is not supported by this "
         "build (supported: system, mock, device, timing, noise, grpc, prng)" },
    /* fallback cycles */
    { "sources:\n  a: { type: mock, fallback: b }\n  b: { type: mock, "
      "fallback: c }\n  c: { type: mock, fallback: a }\ndefault_source: a\n",
      2, "sources.a.fallback: fallback cycle: a -> b -> c -> a" },
    { "sources:\n  system: { type: system, fallback: system }\n",
      2, "sources.system.fallback: fallback cycle: system -> system" },
    /* cross-checks: the line of the related key */
    /* default_source left at "system", which the new list lacks. */
    { "# a comment\nsources:\n  m: { type: mock }\n",
      2, "default_source: source 'system' is not declared under sources" },
    /* sample_count left at 10000. */
    { "limits:\n\n  max_sample_count: 100\n",
      3, "amplifier.sample_count: value 10000 is above "
         "limits.max_sample_count (100)" },
    /* YAML features outside the subset qrsd reads */
    { "socket:\n  path: &p /tmp/a\n  group: *p\n",
      2, "socket.path: YAML anchors and aliases are not supported" },
    { "limits:\n  max_connections: !!int 5\n",
      2, "limits.max_connections: YAML tags are not supported" },
    { "limits: {}\n---\nsocket: {}\n",
      2, "more than one YAML document" },
    { "- socket\n",
      1, "expected a mapping of keys at the top level, got a sequence" },
    { "socket\n",
      1, "expected a mapping of keys at the top level, got 'socket'" },
    { "socket: /tmp/s\n",
      1, "socket: expected a mapping, got '/tmp/s'" },
    { "socket:\n  ? [a]\n  : 1\n",
      2, "socket: a key must be a string" },
    { "a: [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]"
      "]]]]]]]]]]]]]]]]]]]]]]]]]]\n",
      1, "a: nested too deeply" },
    { "limits:\n  max_connections: 5\n  bad: [\n",
      4, "syntax error: did not find expected node content (while parsing "
         "a flow node at line 4)" },
    /* local sources (device, timing, noise) */
    { "sources:\n  hw: { type: device }\n",
      2, "sources.hw: missing key 'path' (the device node, FIFO or file to "
         "read)" },
    { "sources:\n  hw: { type: device, path: /x, lock: yes }\n",
      2, "sources.hw.lock: expected true or false, got 'yes'" },
    { "sources:\n  hw: { type: device, path: /x, chunk: 0 }\n",
      2, "sources.hw.chunk: value 0 out of range 1..1048576" },
    { "sources:\n  n: { type: noise, mechanisms: [warp] }\n",
      2, "sources.n.mechanisms: unknown noise mechanism 'warp' (see qrsctl "
         "sources --json, or qrsd.yaml(5), Type noise)" },
    { "sources:\n  n: { type: noise, mechanisms: [rdrand, rdrand] }\n",
      2, "sources.n.mechanisms: mechanism 'rdrand' listed twice" },
    { "sources:\n  n: { type: noise, mechanisms: rdrand }\n",
      2, "sources.n.mechanisms: expected a list of mechanism names, got "
         "'rdrand'" },
    { "sources:\n  t: { type: timing, conditioning: md5 }\n",
      2, "sources.t.conditioning: 'md5' is not supported by this build "
         "(supported: raw, vonneumann, sha256)" },
    { "sources:\n  t: { type: timing, timeout_ms: 0 }\n",
      2, "sources.t.timeout_ms: value 0 out of range 1..600000" },
    { "sources:\n  t: { type: timing, mechanisms: [] }\n",
      2, "sources.t.mechanisms: unknown key" },
    { "sources:\n  t: { type: timing, health_alpha_exp: 2 }\n",
      2, "sources.t.health_alpha_exp: value 2 out of range 8..60" },
    /* amplifier and monitor values */
    { "amplifier: { type: server }\n",
      1, "amplifier.type: 'server' is not supported by this build "
         "(supported: zscore_mean, zscore_thought, ecdf, exact)" },
    { "amplifier: { ecdf_calibration_samples: 1 }\n",
      1, "amplifier.ecdf_calibration_samples: value 1 out of range "
         "2..10000000" },
    { "monitor: { window: 100001 }\n",
      1, "monitor.window: value 100001 out of range 0..100000" },
    { "monitor: { cusum_h: 0 }\n",
      1, "monitor.cusum_h: value 0 out of range 0 < x <= 1e+09" },
    { "limits: { exact_cache_bytes: 1000 }\n",
      1, "limits.exact_cache_bytes: value 1000 out of range "
         "1048576..17179869184" },
    { "amplifier: { zscore_calibration_samples: 300 }\nlimits: { "
      "max_calibration_samples: 200 }\n",
      2, "amplifier: calibration samples above "
         "limits.max_calibration_samples (200)" },
    /* gRPC sources */
    { HEAD "  q: { type: grpc }\n",
      3, "sources.q: missing key 'target' (unix:/path or host:port)" },
    { HEAD "  q: { type: grpc, target: a:1, mode: fast }\n",
      3, "sources.q.mode: 'fast' is not supported by this build "
         "(supported: unary, server_streaming, bidi_streaming)" },
    { HEAD "  q: { type: grpc, target: a:1,\n"
      "    tls: { cert_file: c.pem } }\n",
      4, "sources.q.tls: cert_file and key_file go together" },
    { HEAD "  q: { type: grpc, target: a:1,\n"
      "    insecure: true, tls: { ca_file: c.pem } }\n",
      4, "sources.q.insecure: insecure: true and tls files exclude each "
         "other" },
    { HEAD "  q: { type: grpc, target: a:1,\n"
      "    api_key_header: Api-Key }\n",
      4, "sources.q.api_key_header: 'Api-Key' must be lowercase letters, "
         "digits, '-', '_' or '.'" },
    { HEAD "  q: { type: grpc, target: a:1, insecure: yes }\n",
      3, "sources.q.insecure: expected true or false, got 'yes'" },
    { HEAD "  q: { type: grpc, target: a:1,\n"
      "    quota: { max_requests_per_minute: 100001 } }\n",
      4, "sources.q.quota.max_requests_per_minute: value 100001 out of "
         "range 0..100000" },
    /* grpc_compat: only a local listener, only a declared source */
    { "sources: { system: { type: system } }\ngrpc_compat: { listen: "
      "\"0.0.0.0:50051\" }\n",
      2, "grpc_compat.listen: '0.0.0.0:50051' is neither unix:PATH nor a "
         "loopback address (127.0.0.1:PORT, localhost:PORT, [::1]:PORT): "
         "another host's address needs TLS (tls_cert, tls_key) and api keys "
         "(api_keys)" },
    { "sources: { system: { type: system } }\ngrpc_compat: { listen: "
      "\"0.0.0.0:50051\", tls_cert: /c.pem }\n",
      2, "grpc_compat.tls_cert: tls_cert and tls_key go together" },
    { "sources: { system: { type: system } }\ngrpc_compat: { listen: "
      "\"unix:/x\", tls_client_ca: /ca.pem }\n",
      2, "grpc_compat.tls_client_ca: a client CA needs tls_cert and tls_key" },
    { "sources: { system: { type: system } }\ngrpc_compat: { listen: "
      "\"unix:/x\", source: q }\n",
      2, "grpc_compat.source: source 'q' is not declared under sources" },
  };
#undef HEAD

  expect_text_errors(bad, sizeof(bad) / sizeof(bad[0]));
}

Test(conf, bad_strings_are_rejected)
{
  char text[256];

  expect_text_error("socket:\n  path: \"\"\n", 2,
                    "socket.path: must not be empty");
  memset(text, 0, sizeof(text));
  strcpy(text, "socket:\n  path: /");
  memset(text + strlen(text), 'a', 107);
  strcat(text, "\n");
  expect_text_error(text, 2, "socket.path: '/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                    "aaaaaaaaaaaaaaaaaaaaaaaaaaaa...' has 108 bytes, not "
                    "1..107");
  expect_text_error("socket:\n  group: \"a\\tb\"\n", 2,
                    "socket.group: contains a control character");
  expect_text_error("socket:\n  group: \"a\\0b\"\n", 2,
                    "socket.group: contains a NUL character");
  expect_text_error("socket:\n  group:\n", 2,
                    "socket.group: expected a string, got no value");
  expect_text_error("amplifier:\n  type: mean\n", 2, "amplifier.type: 'mean'"
                    " is not supported by this build (supported: "
                    "zscore_mean, zscore_thought, ecdf, exact)");
}

Test(conf, source_count_is_capped)
{
  struct qrsd_conf *c;
  char *text;
  size_t len;
  FILE *f;
  int i;

  text = NULL;
  f = open_memstream(&text, &len);
  cr_assert_not_null(f);
  fputs("sources:\n  system: { type: system }\n", f);
  for (i = 1; i < CONF_MAX_SOURCES; i++)
    fprintf(f, "  m%d: { type: mock, seed: %d }\n", i, i);
  cr_assert_eq(fclose(f), 0);
  c = load_text(text);
  cr_assert_eq(c->n_sources, CONF_MAX_SOURCES);
  cr_assert_eq(c->sources[CONF_MAX_SOURCES - 1].mock_seed,
               CONF_MAX_SOURCES - 1);
  conf_free(c);
  free(text);

  text = NULL;
  f = open_memstream(&text, &len);
  cr_assert_not_null(f);
  fputs("sources:\n  system: { type: system }\n", f);
  for (i = 1; i <= CONF_MAX_SOURCES; i++)
    fprintf(f, "  m%d: { type: mock }\n", i);
  cr_assert_eq(fclose(f), 0);
  expect_text_error(text, CONF_MAX_SOURCES + 2, "sources.m256: more than "
                    "256 sources");
  free(text);
}

Test(conf, invalid_utf8_is_rejected_with_its_line)
{
  expect_text_error("socket:\n  group: q\xffrs\n", 2,
                    "invalid leading UTF-8 octet");
}

Test(conf, unknown_top_level_key_is_rejected)
{
  expect_text_error("socket: {}\nstat_dir: /var/lib/qrsd\n", 2,
                    "stat_dir: unknown key; did you mean 'state_dir'?");
}

/* ---- Locale ------------------------------------------------------------ */

/* Switch to a locale whose decimal point is ','; builds one with localedef
   in a temporary directory when none is installed.  0 when none can be
   had. */
static int
use_comma_locale(char *dir, size_t dirlen)
{
  static const char *const names[] = {
    "de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "nl_NL.UTF-8",
  };
  char cmd[1024], buf[16];
  size_t i;

  dir[0] = '\0';
  for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (setlocale(LC_ALL, names[i]))
      goto check;
  snprintf(dir, dirlen, "/tmp/qrs-test-locale-XXXXXX");
  if (!mkdtemp(dir))
    return 0;
  snprintf(cmd, sizeof(cmd), "localedef -i de_DE -f UTF-8 %s/de_DE.UTF-8 "
           ">/dev/null 2>&1", dir);
  if (system(cmd) != 0)
    return 0;
  setenv("LOCPATH", dir, 1);
  if (!setlocale(LC_ALL, "de_DE.UTF-8"))
    return 0;
check:
  snprintf(buf, sizeof(buf), "%.1f", 1.5);
  return !strcmp(buf, "1,5");
}

Test(conf, floats_do_not_depend_on_the_locale)
{
  struct qrsd_conf *c, *back;
  char dir[64], cmd[128];
  char *text;
  int ok;

  ok = use_comma_locale(dir, sizeof(dir));
  if (dir[0]) {
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
  }
  /* setup.sh installs 'locales', which localedef needs. */
  cr_assert(ok, "no locale with a decimal comma could be set up");

  c = load_text("amplifier: { population_mean: 127.25, epsilon: 1.5e-3 }\n"
                "sources: { system: { type: system },"
                " m: { type: mock, mean_shift: -0.75 } }\n");
  cr_assert_eq(c->amp_population_mean, 127.25);
  cr_assert_eq(c->amp_epsilon, 1.5e-3);
  cr_assert_eq(c->sources[1].mock_mean_shift, -0.75);
  text = print_conf(c);
  cr_assert_not_null(strstr(text, "population_mean: 127.25\n"), "%s", text);
  cr_assert_not_null(strstr(text, "mean_shift: -0.75 }"), "%s", text);
  back = load_text(text);
  assert_conf_eq(back, c);
  conf_free(back);
  free(text);
  conf_free(c);

  expect_text_error("amplifier:\n  population_mean: 127,5\n", 2,
                    "amplifier.population_mean: expected a number, got "
                    "'127,5'");
  expect_text_error("amplifier:\n  epsilon: 0.75\n", 2,
                    "amplifier.epsilon: value 0.75 out of range 0 < x < 0.5");
}

/* ---- Files and the error buffer ---------------------------------------- */

Test(conf, missing_file_is_enoent)
{
  struct qrsd_conf *c;
  char err[256];
  int r;

  c = NULL;
  r = conf_load_file(FIXTURE("no_such_file.yaml"), &c, err, sizeof(err));
  cr_assert_eq(r, -ENOENT);
  cr_assert_null(c);
  cr_assert_str_eq(err, FIXTURE("no_such_file.yaml") ": No such file or "
                   "directory");
}

Test(conf, directory_is_not_a_config_file)
{
  struct qrsd_conf *c;
  char err[256];
  int r;

  c = NULL;
  r = conf_load_file(QRS_TEST_SOURCE_DIR "/conf", &c, err, sizeof(err));
  cr_assert_eq(r, -EISDIR);
  cr_assert_null(c);
}

Test(conf, oversized_file_is_refused)
{
  struct qrsd_conf *c;
  char path[] = "/tmp/qrs-test-conf-XXXXXX";
  char err[256], want[300];
  char *buf;
  FILE *f;
  int fd, r;

  fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  f = fdopen(fd, "w");
  cr_assert_not_null(f);
  buf = malloc(CONF_MAX_FILE_SIZE + 1);
  cr_assert_not_null(buf);
  memset(buf, '#', CONF_MAX_FILE_SIZE + 1);
  cr_assert_eq(fwrite(buf, 1, CONF_MAX_FILE_SIZE + 1, f),
               CONF_MAX_FILE_SIZE + 1);
  fclose(f);
  free(buf);

  c = NULL;
  r = conf_load_file(path, &c, err, sizeof(err));
  unlink(path);
  cr_assert_eq(r, -EFBIG);
  cr_assert_null(c);
  snprintf(want, sizeof(want), "%s: larger than %d bytes", path,
           CONF_MAX_FILE_SIZE);
  cr_assert_str_eq(err, want);
}

Test(conf, text_without_nul_terminator_is_read_to_len)
{
  struct qrsd_conf *c;
  char err[128];
  int r;

  c = NULL;
  /* The text goes on past len: only "limits: {max_connections: 7}" counts. */
  r = conf_load_string("limits: {max_connections: 7}garbage", 28, "t.yaml",
                       &c, err, sizeof(err));
  cr_assert_eq(r, 0, "%s", err);
  cr_assert_eq(c->max_connections, 7);
  conf_free(c);
}

Test(conf, small_or_absent_error_buffer_is_safe)
{
  struct qrsd_conf *c;
  char err[12];
  int r;

  c = NULL;
  memset(err, 'x', sizeof(err));
  r = conf_load_string("limits: {max_connections: 0}", 28, "t.yaml", &c,
                       err, sizeof(err));
  cr_assert_eq(r, -EINVAL);
  cr_assert_str_eq(err, "t.yaml:1: l");
  r = conf_load_string("limits: {max_connections: 0}", 28, "t.yaml", &c,
                       NULL, 0);
  cr_assert_eq(r, -EINVAL);
  r = conf_load_file(FIXTURE("no_such_file.yaml"), &c, NULL, 0);
  cr_assert_eq(r, -ENOENT);
  cr_assert_null(c);
}

Test(conf, bad_arguments_are_einval)
{
  struct qrsd_conf *c;

  c = NULL;
  cr_assert_eq(conf_load_string("", 0, "t", NULL, NULL, 0), -EINVAL);
  cr_assert_eq(conf_load_string(NULL, 5, "t", &c, NULL, 0), -EINVAL);
  cr_assert_eq(conf_load_file(NULL, &c, NULL, 0), -EINVAL);
  cr_assert_eq(conf_print(NULL, stdout), -EINVAL);
  cr_assert_null(c);
  conf_free(NULL);
}

/* ---- Local sources (device, timing, noise) ----------------------------- */

Test(conf, local_sources_parse_with_defaults_and_print_back)
{
  struct qrsd_conf *c, *c2;
  const struct conf_source *d, *t, *n;
  char *text;

  c = load_text("sources:\n"
                "  system: { type: system }\n"
                "  hw: { type: device, path: /dev/hwrng, fallback: system }\n"
                "  fifo: { type: device, path: /run/q.fifo, chunk: 512,\n"
                "          lock: true, drain: true, min_entropy: 7.5,\n"
                "          health_alpha_exp: 40 }\n"
                "  jitter: { type: timing, conditioning: sha256 }\n"
                "  noise: { type: noise, mechanisms: [] }\n"
                "  some: { type: noise, conditioning: vonneumann,\n"
                "          mechanisms: [clock_jitter, rdrand],\n"
                "          combine: concat, timeout_ms: 250 }\n");
  d = conf_find_source(c, "hw");
  cr_assert_not_null(d);
  cr_assert_eq(d->type, CONF_SOURCE_DEVICE);
  cr_assert_str_eq(d->device_path, "/dev/hwrng");
  cr_assert_eq(d->device_chunk, 4096);
  cr_assert_eq(d->device_lock, 0);
  cr_assert_eq(d->health_alpha_exp, 30);
  cr_assert_float_eq(d->min_entropy, 1.0, 1e-12);
  d = conf_find_source(c, "fifo");
  cr_assert_eq(d->device_chunk, 512);
  cr_assert_eq(d->device_lock, 1);
  cr_assert_eq(d->device_drain, 1);
  cr_assert_float_eq(d->min_entropy, 7.5, 1e-12);
  cr_assert_eq(d->health_alpha_exp, 40);
  t = conf_find_source(c, "jitter");
  cr_assert_eq(t->type, CONF_SOURCE_TIMING);
  cr_assert_str_eq(t->conditioning, "sha256");
  n = conf_find_source(c, "noise");
  cr_assert_eq(n->type, CONF_SOURCE_NOISE);
  cr_assert_eq(n->n_mechanisms, 0);
  cr_assert_str_eq(n->conditioning, "raw");
  cr_assert_str_eq(n->combine, "xor");
  cr_assert_eq(n->timeout_ms, 1000);
  n = conf_find_source(c, "some");
  cr_assert_eq(n->n_mechanisms, 2);
  cr_assert_str_eq(n->mechanisms[1], "rdrand");
  cr_assert_str_eq(n->combine, "concat");
  cr_assert_eq(n->timeout_ms, 250);

  /* What conf_print() writes loads back to the same values. */
  text = print_conf(c);
  c2 = load_text(text);
  n = conf_find_source(c2, "some");
  cr_assert_eq(n->n_mechanisms, 2);
  cr_assert_str_eq(n->mechanisms[0], "clock_jitter");
  cr_assert_eq(conf_find_source(c2, "fifo")->device_lock, 1);
  cr_assert_str_eq(conf_find_source(c2, "fifo")->device_path, "/run/q.fifo");
  free(text);
  conf_free(c2);
  conf_free(c);
}

/* ---- Amplifiers and the monitor ---------------------------------------- */

Test(conf, amplifier_and_monitor_defaults)
{
  struct qrsd_conf *c;

  c = load_default();
  cr_assert_eq(c->amp_zscore_calibration_samples, 0);
  cr_assert_eq(c->amp_ecdf_calibration_samples, 2000);
  cr_assert_eq(c->max_calibration_samples, 100000);
  cr_assert_eq(c->max_calibration_bytes, 268435456);
  cr_assert_eq(c->exact_cache_bytes, 67108864);
  cr_assert_eq(c->monitor_window, 10000);
  cr_assert_eq(c->monitor_ks_alarm_p, 1e-6);
  cr_assert_eq(c->monitor_cusum_k, 0.5);
  cr_assert_eq(c->monitor_cusum_h, 20.0);
  conf_free(c);
}

Test(conf, amplifier_types_and_monitor_keys_load)
{
  static const char *const types[] = { "zscore_mean", "zscore_thought",
                                       "ecdf", "exact" };
  struct qrsd_conf *c;
  char text[256];
  size_t i;

  for (i = 0; i < 4; i++) {
    snprintf(text, sizeof(text), "amplifier: { type: %s }\n", types[i]);
    c = load_text(text);
    cr_assert_str_eq(c->amp_type, types[i]);
    conf_free(c);
  }
  c = load_text("amplifier: { zscore_calibration_samples: 200,\n"
                "             ecdf_calibration_samples: 5000 }\n"
                "limits: { max_calibration_samples: 5000,\n"
                "          max_calibration_bytes: 1000000,\n"
                "          exact_cache_bytes: 2097152 }\n"
                "monitor: { window: 0, ks_alarm_p: 0, cusum_k: 1.5,\n"
                "           cusum_h: 8 }\n");
  cr_assert_eq(c->amp_zscore_calibration_samples, 200);
  cr_assert_eq(c->amp_ecdf_calibration_samples, 5000);
  cr_assert_eq(c->max_calibration_bytes, 1000000);
  cr_assert_eq(c->exact_cache_bytes, 2097152);
  cr_assert_eq(c->monitor_window, 0);
  cr_assert_eq(c->monitor_ks_alarm_p, 0.0);
  cr_assert_eq(c->monitor_cusum_k, 1.5);
  cr_assert_eq(c->monitor_cusum_h, 8.0);
  conf_free(c);
}

/* ---- gRPC upstreams ---------------------------------------------------- */

Test(conf, grpc_source_gets_the_reference_defaults)
{
  struct qrsd_conf *c = load_text(
    "state_dir: /tmp/st\nstatus_file: \"\"\n"
    "sources:\n  system: { type: system }\n"
    "  q: { type: grpc, target: \"unix:/run/q.sock\" }\n"
    "  r: { type: grpc, target: \"10.0.0.2:50051\", mode: bidi_streaming,\n"
    "       tls: { ca_file: /etc/ca.pem }, api_key_file: /etc/k,\n"
    "       api_key_header: x-key, retry_count: 0, check_echo: false,\n"
    "       quota: { max_requests_per_minute: 0 },\n"
    "       breaker: { max_consecutive_failures: 1,\n"
    "                  recovery_window_s: 0.5, recovery_window_max_s: 2 },\n"
    "       methods: { draw: \"\" } }\n"
    "grpc_compat: { listen: \"127.0.0.1:50051\", source: q }\n");
  const struct conf_grpc *q = &conf_find_source(c, "q")->grpc;
  const struct conf_grpc *r = &conf_find_source(c, "r")->grpc;

  cr_assert_str_eq(c->state_dir, "/tmp/st");
  cr_assert_str_eq(c->status_file, "");
  cr_assert_str_eq(c->compat_listen, "127.0.0.1:50051");
  cr_assert_str_eq(c->compat_source, "q");
  cr_assert_str_eq(q->mode, "unary");
  cr_assert_eq(q->insecure, 1, "unix: targets are plaintext by default");
  cr_assert_eq(q->timeout_ms, 5000);
  cr_assert_eq(q->retry_count, 2);
  cr_assert_eq(q->check_echo, 1);
  cr_assert_str_eq(q->api_key_header, "api-key");
  cr_assert_str_eq(q->method, "/qr_entropy.EntropyService/GetEntropy");
  cr_assert_str_eq(q->draw_stream_method,
                   "/qr_purity.PurityService/StreamDraws");
  cr_assert_eq(q->max_bytes_per_request, 35200);
  cr_assert_eq(q->max_requests_per_minute, 500);
  cr_assert_eq(q->max_bytes_per_day, 524288000);
  cr_assert_eq(q->cb_window_size, 100);
  cr_assert_eq(q->cb_max_consecutive_failures, 3);
  cr_assert_eq(r->insecure, 0, "host:port targets use TLS by default");
  cr_assert_str_eq(r->ca_file, "/etc/ca.pem");
  cr_assert_str_eq(r->mode, "bidi_streaming");
  cr_assert_str_eq(r->api_key_header, "x-key");
  cr_assert_eq(r->retry_count, 0);
  cr_assert_eq(r->check_echo, 0);
  cr_assert_eq(r->max_requests_per_minute, 0);
  cr_assert_eq(r->cb_max_consecutive_failures, 1);
  cr_assert_eq(r->cb_recovery_window_s, 0.5);
  cr_assert_str_eq(r->draw_method, "");
  conf_free(c);
}

