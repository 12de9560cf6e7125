/* qrsd configuration (TEMPORARY interface copy; replaced by the conf
   branch). */
#ifndef QRSD_CONF_H
#define QRSD_CONF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum conf_source_type { CONF_SOURCE_SYSTEM, CONF_SOURCE_MOCK };

struct conf_source {
  char *name;
  enum conf_source_type type;
  int line;
  uint64_t mock_seed;
  double mock_mean_shift;
};

struct qrsd_conf {
  char *file;
  char *socket_path;
  unsigned socket_mode;
  char *socket_group;
  char *default_source;
  char *amp_type;
  uint32_t amp_sample_count;
  double amp_population_mean;
  double amp_population_std;
  double amp_epsilon;
  uint32_t max_frame_bytes;
  uint32_t max_sample_count;
  uint32_t max_connections;
  uint32_t max_inflight;
  uint32_t request_timeout_ms;
  struct conf_source *sources;
  size_t n_sources;
};

int conf_load_file(const char *path, struct qrsd_conf **ret_conf, char *err,
                   size_t errlen);
int conf_load_string(const char *text, size_t len, const char *name,
                     struct qrsd_conf **ret_conf, char *err, size_t errlen);
int conf_load_default(struct qrsd_conf **ret_conf, char *err, size_t errlen);
void conf_free(struct qrsd_conf *conf);
int conf_print(const struct qrsd_conf *conf, FILE *f);
const struct conf_source *conf_find_source(const struct qrsd_conf *conf,
                                           const char *name);
const char *conf_source_type_name(enum conf_source_type t);

#endif
