/* qrs-bench local: the local noise mechanisms and the timing source.

   For each mechanism: raw throughput (samples = bytes per second, one
   mechanism harvested alone for about --seconds), the latency of a whole
   read of 1,000 and 10,000 bytes through the harvester (raw
   conditioning: start-up test done beforehand, health tests on, as in a
   draw), and the MCV min-entropy estimate per raw sample.  The baseline
   in the same run is getrandom(2) for the same byte counts: the fastest
   honest way to get that many random bytes on this machine. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "bench.h"
#include "local/devread.h"
#include "local/harvest.h"

/* Median latency in microseconds of reps reads of n bytes; -1 on error. */
static double
read_latency(struct noise *nz, size_t n, int reps, char *why, size_t wlen)
{
  double t[64];
  uint8_t *buf;
  uint64_t t0;
  int i, r;

  buf = malloc(n);
  if (!buf)
    return -1;
  for (i = 0; i < reps && i < 64; i++) {
    t0 = noise_now_ns();
    r = noise_read(nz, buf, n, 0, why, wlen);
    if (r < 0) {
      free(buf);
      return -1;
    }
    t[i] = (double)(noise_now_ns() - t0) / 1e3;
  }
  free(buf);
  return bench_median(t, (size_t)i);
}

static double
getrandom_latency(size_t n, int reps)
{
  double t[64];
  uint8_t buf[10000];
  uint64_t t0;
  int i;

  for (i = 0; i < reps && i < 64; i++) {
    t0 = noise_now_ns();
    if (getrandom(buf, n, 0) != (ssize_t)n)
      return -1;
    t[i] = (double)(noise_now_ns() - t0) / 1e3;
  }
  return bench_median(t, (size_t)i);
}

static void
bench_one(const struct noise_mech *m, double seconds, int reps)
{
  struct noise *nz;
  uint8_t *raw;
  char why[256], err[256];
  size_t cap;
  ssize_t got;
  uint64_t t0, dt;
  double rate, h, l1, l10;

  if (!m->probe(why, sizeof(why))) {
    printf("%-16s unavailable: %s\n", m->name, why);
    return;
  }
  cap = 64u << 20;
  raw = malloc(cap);
  if (!raw)
    return;
  t0 = noise_now_ns();
  got = noise_mech_raw(m, raw, cap, t0 + (uint64_t)(seconds * 1e9));
  dt = noise_now_ns() - t0;
  if (got <= 0) {
    printf("%-16s harvest failed: %s\n", m->name,
           got < 0 ? strerror((int)-got) : "no samples");
    free(raw);
    return;
  }
  rate = (double)got / ((double)dt / 1e9);
  h = mcv_min_entropy(raw, (size_t)got);
  free(raw);

  l1 = l10 = -1;
  if (noise_new(&m, 1, COND_RAW, NOISE_XOR, 30000, HEALTH_ALPHA_DEFAULT,
                &nz, err, sizeof(err)) == 0) {
    /* The first read carries the start-up test; leave it out. */
    (void)read_latency(nz, 1000, 1, why, sizeof(why));
    l1 = read_latency(nz, 1000, reps, why, sizeof(why));
    l10 = read_latency(nz, 10000, reps, why, sizeof(why));
    noise_free(nz);
  }
  printf("%-16s %12.0f %10.3f %12.1f %12.1f  %.1f\n", m->name, rate, h,
         l1, l10, l10 > 0 ? 1e6 / l10 : 0.0);
  if (l1 < 0 || l10 < 0)
    printf("%-16s   a read failed: %s\n", "", why);
}

/* The noise source as configured by default: every available mechanism,
   raw conditioning, timeout_ms 1000, combined by comb.  Warm-up reads
   first (start-up tests, rate measurement), as a running qrsd has done;
   then the latencies, the throughput of 10,000-byte reads, the MCV of the
   combined raw stream, and how many mechanisms delivered every byte of
   the last read. */
static void
bench_noise(enum noise_combine comb, int reps)
{
  struct noise_slot *a, *b;
  struct noise *nz;
  char why[256], err[256], label[32], left[256];
  double l1, l10, h;
  size_t i, full, o;
  int k;

  if (noise_new(NULL, 0, COND_RAW, comb, 1000, HEALTH_ALPHA_DEFAULT, &nz,
                err, sizeof(err)) < 0) {
    printf("noise: %s\n", err);
    return;
  }
  snprintf(label, sizeof(label), "noise (%s)", noise_combine_name(comb));
  for (k = 0; k < 5; k++)
    (void)read_latency(nz, 10000, 1, why, sizeof(why));
  l1 = read_latency(nz, 1000, reps, why, sizeof(why));
  l10 = read_latency(nz, 10000, reps, why, sizeof(why));
  a = calloc(nz->nslot, sizeof(*a));
  b = calloc(nz->nslot, sizeof(*b));
  full = 0;
  left[0] = '\0';
  o = 0;
  if (a && b) {
    noise_snapshot(nz, a, nz->nslot);
    (void)read_latency(nz, 10000, 1, why, sizeof(why));
    noise_snapshot(nz, b, nz->nslot);
    for (i = 0; i < nz->nslot; i++) {
      if (b[i].samples - a[i].samples == 10000)
        full++;
      else if (b[i].available && o < sizeof(left))
        o += (size_t)snprintf(left + o, sizeof(left) - o, " %s %" PRIu64,
                              b[i].m->name, b[i].samples - a[i].samples);
    }
  }
  pthread_mutex_lock(&nz->stats_lock);
  h = mcv_estimate(&nz->raw_mcv);
  pthread_mutex_unlock(&nz->stats_lock);
  printf("%-16s %12.0f %10.3f %12.1f %12.1f  %.1f   (%zu of %zu "
         "available mechanisms in every byte)\n", label,
         l10 > 0 ? 1e10 / l10 : 0.0, h, l1, l10, l10 > 0 ? 1e6 / l10 : 0.0,
         comb == NOISE_XOR ? full : nz->navailable, nz->navailable);
  if (comb == NOISE_XOR && left[0])
    printf("%-16s   samples in the last read from the others:%s\n", "",
           left);
  if (l1 < 0 || l10 < 0)
    printf("%-16s   a read failed: %s\n", "", why);
  free(a);
  free(b);
  noise_free(nz);
}

/* The device source's reader on a path (default /dev/hwrng). */
static void
bench_device(const char *path, double seconds, int reps)
{
  struct devread d;
  uint8_t *buf;
  char why[256];
  double t[64], l1, l10, rate, h;
  uint64_t t0, got;
  int i, k, r;

  if (access(path, R_OK) != 0) {
    printf("%-16s unavailable: %s: %s\n", "device", path, strerror(errno));
    return;
  }
  buf = malloc(1 << 16);
  if (!buf || devread_init(&d, path, 0, 0, 0) < 0) {
    free(buf);
    return;
  }
  got = 0;
  h = -1;
  t0 = noise_now_ns();
  while (noise_now_ns() - t0 < (uint64_t)(seconds * 1e9)) {
    r = devread_read(&d, buf, 4096, noise_now_ns() + 5000000000ULL, why,
                     sizeof(why));
    if (r < 0) {
      printf("%-16s %s: %s\n", "device", path, why);
      goto out;
    }
    if (got == 0)
      h = mcv_min_entropy(buf, 4096);
    got += 4096;
  }
  rate = (double)got / ((double)(noise_now_ns() - t0) / 1e9);
  l1 = l10 = -1;
  for (k = 0; k < 2; k++) {
    for (i = 0; i < reps && i < 64; i++) {
      t0 = noise_now_ns();
      if (devread_read(&d, buf, k ? 10000 : 1000, t0 + 5000000000ULL, why,
                       sizeof(why)) < 0)
        goto out;
      t[i] = (double)(noise_now_ns() - t0) / 1e3;
    }
    if (k)
      l10 = bench_median(t, (size_t)i);
    else
      l1 = bench_median(t, (size_t)i);
  }
  printf("%-16s %12.0f %10.3f %12.1f %12.1f  %.1f   (%s)\n", "device", rate,
         h, l1, l10, l10 > 0 ? 1e6 / l10 : 0.0, path);
out:
  devread_done(&d);
  free(buf);
}

static void
usage(FILE *f)
{
  fprintf(f,
          "Usage: qrs-bench local [--seconds S] [--reps N] [MECHANISM...]\n"
          "\n"
          "Measures each local noise mechanism (default: all, then the\n"
          "timing source's, the noise source over all mechanisms with xor\n"
          "and with concat, then the device reader): raw bytes/s, the MCV\n"
          "min-entropy per raw sample, and the median latency of a 1,000-\n"
          "and a 10,000-byte read through the harvester, with getrandom(2)\n"
          "as the baseline.  For the noise rows, bytes/s is that of\n"
          "10,000-byte reads and the MCV is of the combined raw stream.\n"
          "\n"
          "  --seconds S   harvest time for the throughput figure (1)\n"
          "  --reps N      reads per latency figure, at most 64 (9)\n"
          "  --device PATH the device source's reader on PATH, last\n"
          "                (/dev/hwrng)\n");
}

int
bench_local(int argc, char **argv)
{
  const char *device = "/dev/hwrng";
  double seconds = 1.0;
  int reps = 9;
  const struct cli_opt opts[] = {
    { .name = "seconds", .key = 's', .type = CLI_OPT_DOUBLE,
      .field = &seconds },
    { .name = "reps", .key = 'r', .type = CLI_OPT_INT, .field = &reps },
    { .name = "device", .key = 'd', .type = CLI_OPT_STRING, .field = &device },
    BENCH_OPTS_END,
  };
  const struct noise_mech *m;
  double g1, g10;
  int r, i;
  size_t k;

  r = bench_opts_parse(argc, argv, opts, usage);
  if (r >= 0)
    return r;
  if (seconds <= 0 || reps < 1 || reps > 64) {
    usage(stderr);
    return 2;
  }
  g1 = getrandom_latency(1000, reps);
  g10 = getrandom_latency(10000, reps);
  printf("baseline getrandom: 1,000 B in %.1f us, 10,000 B in %.1f us\n",
         g1, g10);
  printf("%-16s %12s %10s %12s %12s  %s\n", "mechanism", "raw B/s",
         "MCV b/smp", "1k read us", "10k read us", "draws/s@10k");
  if (optind < argc) {
    for (i = optind; i < argc; i++) {
      m = strcmp(argv[i], "timing") ? noise_mech_find(argv[i])
                                     : &noise_timing_mech;
      if (!m) {
        fprintf(stderr, "qrs-bench: unknown mechanism '%s'\n", argv[i]);
        return 2;
      }
      bench_one(m, seconds, reps);
    }
    return 0;
  }
  for (k = 0; k < noise_mech_count; k++)
    bench_one(&noise_mechs[k], seconds, reps);
  bench_one(&noise_timing_mech, seconds, reps);
  bench_noise(NOISE_XOR, reps);
  bench_noise(NOISE_CONCAT, reps);
  bench_device(device, seconds, reps);
  return 0;
}
