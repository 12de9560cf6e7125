/* A source registry on a libuv loop for the unit tests (testreg.h). */
#include <string.h>

#include <criterion/criterion.h>

#include "conf/conf.h"
#include "testreg.h"

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
