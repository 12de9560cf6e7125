/* A source registry on a libuv loop for the unit tests (testreg.h). */
#include <string.h>

#include <criterion/criterion.h>

#include "conf/conf.h"
#include "testreg.h"

int
testsrc_new(enum conf_source_type type, const char *name, uint64_t seed,
            double shift, struct source **ret_src, char *err, size_t errlen)
{
  struct conf_source cs;

  memset(&cs, 0, sizeof(cs));
  cs.name = (char *)name;
  cs.type = type;
  cs.mock_seed = seed;
  cs.mock_mean_shift = shift;
  return source_new(&cs, NULL, ret_src, err, errlen);
}

struct source *
testsrc_open(enum conf_source_type type, const char *name, uint64_t seed,
             double shift)
{
  struct source *s;
  char err[256];

  cr_assert_eq(testsrc_new(type, name, seed, shift, &s, err, sizeof(err)),
               0, "%s", err);
  return s;
}

struct registry *
testreg_new(uv_loop_t *loop, const char *yaml, size_t bytes_max)
{
  struct qrsd_conf *conf;
  struct reg_limits lim;
  struct registry *reg;
  char err[256];

  cr_assert_eq(uv_loop_init(loop), 0);
  cr_assert_eq(conf_load_string(yaml, strlen(yaml), "t", &conf, err,
                                sizeof(err)), 0, "%s", err);
  lim.inline_max = 64 * 1024;
  lim.bytes_max = bytes_max;
  cr_assert_eq(registry_new(loop, conf, &lim, &reg, err, sizeof(err)), 0,
               "%s", err);
  conf_free(conf);
  return reg;
}

void
testreg_free(uv_loop_t *loop, struct registry *reg)
{
  registry_stop(reg);
  uv_run(loop, UV_RUN_DEFAULT);
  registry_free(reg);
  cr_assert_eq(uv_loop_close(loop), 0);
}

void
testreg_wait(uv_loop_t *loop, const int *calls)
{
  while (*calls == 0)
    uv_run(loop, UV_RUN_ONCE);
}
