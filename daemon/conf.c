/* TEMPORARY stand-in for the conf branch: built-in defaults only, plus a
   "mock" source when QRSD_TEMP_MOCK is set. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"

int
conf_load_default(struct qrsd_conf **ret_conf, char *err, size_t errlen)
{
  struct qrsd_conf *c;
  const char *m;

  c = calloc(1, sizeof(*c));
  c->file = strdup("(built-in default)");
  c->socket_path = strdup("/run/qrsd/qrsd.sock");
  c->socket_mode = 0660;
  c->socket_group = strdup("qrs");
  c->default_source = strdup("system");
  c->amp_type = strdup("zscore_mean");
  c->amp_sample_count = 10000;
  c->amp_population_mean = 127.5;
  c->amp_population_std = 73.90027063;
  c->amp_epsilon = 1e-10;
  c->max_frame_bytes = 1048576;
  c->max_sample_count = 1048576;
  c->max_connections = 1024;
  c->max_inflight = 64;
  c->request_timeout_ms = 5000;
  c->sources = calloc(2, sizeof(*c->sources));
  c->n_sources = 1;
  c->sources[0].name = strdup("system");
  m = getenv("QRSD_TEMP_MOCK");
  if (m) {
    c->n_sources = 2;
    c->sources[1].name = strdup("mock");
    c->sources[1].type = CONF_SOURCE_MOCK;
    c->sources[1].mock_seed = 1;
    c->sources[1].mock_mean_shift = atof(m);
  }
  *ret_conf = c;
  return 0;
}

int
conf_load_file(const char *path, struct qrsd_conf **ret_conf, char *err,
               size_t errlen)
{
  return conf_load_default(ret_conf, err, errlen);
}

int
conf_load_string(const char *text, size_t len, const char *name,
                 struct qrsd_conf **ret_conf, char *err, size_t errlen)
{
  return conf_load_default(ret_conf, err, errlen);
}

void
conf_free(struct qrsd_conf *c)
{
  size_t i;

  if (!c)
    return;
  for (i = 0; i < c->n_sources; i++)
    free(c->sources[i].name);
  free(c->sources);
  free(c->file);
  free(c->socket_path);
  free(c->socket_group);
  free(c->default_source);
  free(c->amp_type);
  free(c);
}

int
conf_print(const struct qrsd_conf *conf, FILE *f)
{
  return 0;
}

const struct conf_source *
conf_find_source(const struct qrsd_conf *conf, const char *name)
{
  size_t i;

  for (i = 0; i < conf->n_sources; i++)
    if (!strcmp(conf->sources[i].name, name))
      return &conf->sources[i];
  return NULL;
}

const char *
conf_source_type_name(enum conf_source_type t)
{
  return t == CONF_SOURCE_MOCK ? "mock" : "system";
}
