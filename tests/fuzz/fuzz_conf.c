/* libFuzzer harness: the YAML config loader.

   Any text either loads or fails with -EINVAL and a one-line message; a
   config that loads prints as YAML that loads back and prints the same
   (conf.h's promise for conf_print()). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *
print_conf(const struct qrsd_conf *conf, size_t *ret_len)
{
  char *text;
  FILE *f;

  text = NULL;
  f = open_memstream(&text, ret_len);
  if (!f)
    abort();
  if (conf_print(conf, f) != 0)
    abort();
  if (fclose(f) != 0)
    abort();
  return text;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  struct qrsd_conf *conf, *again;
  char err[512], *t1, *t2;
  size_t l1, l2;
  int r;

  if (size > 256 * 1024)
    return 0;
  conf = NULL;
  err[0] = '\0';
  r = conf_load_string((const char *)data, size, "fuzz.yaml", &conf, err,
                       sizeof(err));
  if (r < 0) {
    if (r != -EINVAL || conf)
      abort();
    if (!err[0] || strchr(err, '\n'))
      abort();                  /* one line saying what is wrong */
    return 0;
  }
  t1 = print_conf(conf, &l1);
  again = NULL;
  r = conf_load_string(t1, l1, "fuzz.yaml", &again, err, sizeof(err));
  if (r != 0) {
    fprintf(stderr, "printed config does not load back: %s\n%s\n", err, t1);
    abort();
  }
  t2 = print_conf(again, &l2);
  if (l1 != l2 || memcmp(t1, t2, l1) != 0) {
    fprintf(stderr, "printed config differs after a round trip:\n%s\n---\n%s\n",
            t1, t2);
    abort();
  }
  free(t1);
  free(t2);
  conf_free(again);
  conf_free(conf);
  return 0;
}
