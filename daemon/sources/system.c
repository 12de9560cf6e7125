/* The system source: the kernel CSPRNG through getrandom(2). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "sources/source.h"

/* getrandom() of up to this many bytes takes well under 200 us. */
#define SYSTEM_INLINE_MAX (64 * 1024)

static int
system_open(struct source *s, const struct conf_source *cs, char *err,
            size_t errlen)
{
  unsigned char probe;
  ssize_t n;

  /* Refuse to start serving before the kernel pool is initialised. */
  n = getrandom(&probe, 1, GRND_NONBLOCK);
  if (n < 0 && errno == EAGAIN) {
    snprintf(err, errlen, "source '%s': the kernel entropy pool is not "
             "initialised yet", cs->name);
    return -EAGAIN;
  }
  s->inline_max = SYSTEM_INLINE_MAX;
  return 0;
}

static int
system_read(struct source *s, uint8_t *buf, size_t n, char *why,
            size_t whylen)
{
  size_t done;
  ssize_t r;

  done = 0;
  while (done < n) {
    /* Short counts happen above 256 bytes when a signal arrives. */
    r = getrandom(buf + done, n - done, 0);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      snprintf(why, whylen, "getrandom: %s", strerror(errno));
      return -errno;
    }
    done += (size_t)r;
  }
  return 0;
}

static void
system_describe(const struct source *s, char *buf, size_t len)
{
  snprintf(buf, len, "system (getrandom)");
}

const struct source_ops source_system_ops = {
  .type = "system",
  .production = 1,
  .open = system_open,
  .read = system_read,
  .describe = system_describe,
};
