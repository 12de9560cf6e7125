/* The noise mechanisms: small timing experiments on this host, the CPU's
   random number instructions, and hardware-monitor sensors.  Each returns
   raw samples (one byte each); see harvest.h. */
#define _GNU_SOURCE
#include <dirent.h>
#include <sched.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#include <x86intrin.h>
#endif

#include "local/harvest.h"
#include "timestamp.h"

/* How often the cheap mechanisms look at the clock for the deadline. */
#define DEADLINE_EVERY 64

uint64_t
noise_now_ns(void)
{
  return (uint64_t)mono_now_ns();
}

/* The finest clock there is: the timestamp counter on x86-64. */
static inline uint64_t
ticks(void)
{
#if defined(__x86_64__)
  return __rdtsc();
#else
  return noise_now_ns();
#endif
}

/* One duration -> one sample: the XOR of its bytes. */
static inline uint8_t
fold(uint64_t d)
{
  d ^= d >> 32;
  d ^= d >> 16;
  d ^= d >> 8;
  return (uint8_t)d;
}

static inline int
past(size_t i, uint64_t deadline_ns)
{
  return (i % DEADLINE_EVERY) == 0 && noise_now_ns() >= deadline_ns;
}

static int
probe_always(char *why, size_t len)
{
  if (len)
    why[0] = '\0';
  return 1;
}

/* clock_jitter: the duration of 16 back-to-back clock_gettime() calls
   (one call alone is too regular: about 0.2 bits per sample here). */
static ssize_t
harvest_clock(uint8_t *out, size_t n, uint64_t deadline_ns)
{
  struct timespec ts;
  uint64_t t0, t1;
  size_t i;
  int k;

  for (i = 0; i < n; i++) {
    if (past(i, deadline_ns))
      break;
    t0 = ticks();
    for (k = 0; k < 16; k++)
      clock_gettime(CLOCK_MONOTONIC, &ts);
    t1 = ticks();
    out[i] = fold(t1 - t0);
  }
  return (ssize_t)i;
}

/* sleep_jitter: how long a 1 us nanosleep() really takes (timer slack set
   to 1 ns for the harvesting thread). */
static ssize_t
harvest_sleep(uint8_t *out, size_t n, uint64_t deadline_ns)
{
  struct timespec req = { 0, 1000 };
  uint64_t t0, t1;
  size_t i;

  (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  for (i = 0; i < n; i++) {
    if (noise_now_ns() >= deadline_ns)
      break;
    t0 = ticks();
    nanosleep(&req, NULL);
    t1 = ticks();
    out[i] = fold(t1 - t0);
  }
  return (ssize_t)i;
}

/* thread_race: a second thread increments a shared counter; each sample
   is the time until the counter was seen to move (coherency misses, and
   the scheduler when the other thread is not running), XOR how far it
   moved. */
struct race {
  _Atomic uint64_t counter;
  _Atomic int stop;
};

static void *
race_run(void *arg)
{
  struct race *r = arg;

  while (!atomic_load_explicit(&r->stop, memory_order_relaxed))
    atomic_fetch_add_explicit(&r->counter, 1, memory_order_relaxed);
  return NULL;
}

static ssize_t
harvest_race(uint8_t *out, size_t n, uint64_t deadline_ns)
{
  struct race r;
  pthread_t th;
  uint64_t prev, c, t0, t1;
  volatile unsigned spin;
  size_t i;
  int e;

  atomic_init(&r.counter, 0);
  atomic_init(&r.stop, 0);
  e = pthread_create(&th, NULL, race_run, &r);
  if (e)
    return -e;
  prev = atomic_load_explicit(&r.counter, memory_order_relaxed);
  for (i = 0; i < n; i++) {
    if (past(i, deadline_ns))
      break;
    t0 = ticks();
    for (spin = 1;; spin++) {
      c = atomic_load_explicit(&r.counter, memory_order_relaxed);
      if (c != prev)
        break;
      if (spin % 4096 == 0) {
        /* On one CPU (or under valgrind) the counter thread runs only
           when this one gives way. */
        sched_yield();
        if (noise_now_ns() >= deadline_ns)
          break;
      }
    }
    t1 = ticks();
    if (c == prev)
      break;                    /* the deadline, not a sample */
    out[i] = fold((c - prev) ^ (t1 - t0));
    prev = c;
  }
  atomic_store(&r.stop, 1);
  pthread_join(th, NULL);
  return (ssize_t)i;
}

/* dram_timing: the latency of one load from DRAM (the line is flushed
   from the caches first), at addresses spread over 1 MiB. */
#define DRAM_BYTES (1u << 20)

static ssize_t
harvest_dram(uint8_t *out, size_t n, uint64_t deadline_ns)
{
#if defined(__x86_64__)
  volatile uint8_t *buf;
  uint64_t t0, t1, idx;
  size_t i;

  buf = malloc(DRAM_BYTES);
  if (!buf)
    return -ENOMEM;
  memset((void *)buf, 0x5a, DRAM_BYTES);
  idx = 0;
  for (i = 0; i < n; i++) {
    if (past(i, deadline_ns))
      break;
    idx = (idx * 6364136223846793005ULL + 1442695040888963407ULL);
    _mm_clflush((const void *)&buf[(idx >> 40) % DRAM_BYTES]);
    _mm_mfence();
    _mm_lfence();
    t0 = ticks();
    (void)buf[(idx >> 40) % DRAM_BYTES];
    _mm_lfence();
    t1 = ticks();
    out[i] = fold(t1 - t0);
  }
  free((void *)buf);
  return (ssize_t)i;
#else
  return -ENOTSUP;
#endif
}

static int
probe_x86(char *why, size_t len)
{
#if defined(__x86_64__)
  return probe_always(why, len);
#else
  snprintf(why, len, "needs x86-64 (clflush)");
  return 0;
#endif
}

/* page_fault: the time of the first write to a fresh anonymous page
   (a minor fault: the kernel finds and zeroes a page). */
#define PF_PAGES 64

static ssize_t
harvest_pagefault(uint8_t *out, size_t n, uint64_t deadline_ns)
{
  volatile uint8_t *p;
  uint64_t t0, t1;
  size_t i, pg, psz;

  psz = (size_t)sysconf(_SC_PAGESIZE);
  p = mmap(NULL, PF_PAGES * psz, PROT_READ | PROT_WRITE,
           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return -errno;
  pg = 0;
  for (i = 0; i < n; i++) {
    if (past(i, deadline_ns))
      break;
    if (pg == PF_PAGES) {
      /* Drop the pages so that the next touches fault again. */
      madvise((void *)p, PF_PAGES * psz, MADV_DONTNEED);
      pg = 0;
    }
    t0 = ticks();
    p[pg * psz] = 1;
    t1 = ticks();
    pg++;
    out[i] = fold(t1 - t0);
  }
  munmap((void *)p, PF_PAGES * psz);
  return (ssize_t)i;
}

/* branch_timing: a loop of 64 branches whose directions follow the
   previous samples, so the predictor keeps mispredicting differently. */
static ssize_t
harvest_branch(uint8_t *out, size_t n, uint64_t deadline_ns)
{
  uint64_t t0, t1, x;
  volatile uint64_t acc;
  unsigned j;
  size_t i;

  x = 0x9e3779b97f4a7c15ULL;
  acc = 0;
  for (i = 0; i < n; i++) {
    if (past(i, deadline_ns))
      break;
    t0 = ticks();
    for (j = 0; j < 64; j++) {
      if ((x >> j) & 1)
        acc += j;
      else
        acc ^= (uint64_t)j << 3;
    }
    t1 = ticks();
    out[i] = fold(t1 - t0);
    x = (x << 7 | x >> 57) ^ (t1 - t0) * 0xff51afd7ed558ccdULL;
  }
  (void)acc;                    /* the branches' work, kept by volatile */
  return (ssize_t)i;
}

/* syscall_latency: one getppid() system call, kernel entry and exit. */
static ssize_t
harvest_syscall(uint8_t *out, size_t n, uint64_t deadline_ns)
{
  uint64_t t0, t1;
  size_t i;

  for (i = 0; i < n; i++) {
    if (past(i, deadline_ns))
      break;
    t0 = ticks();
    (void)syscall(SYS_getppid);
    t1 = ticks();
    out[i] = fold(t1 - t0);
  }
  return (ssize_t)i;
}

/* fsync_latency: write 512 bytes to an unnamed temporary file and
   fdatasync() it: the storage stack's completion time. */
static const char *
tmp_dir(void)
{
  const char *d;

  d = getenv("TMPDIR");
  return d && d[0] ? d : "/tmp";
}

static int
open_tmpfile(void)
{
  return open(tmp_dir(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
}

static int
probe_fsync(char *why, size_t len)
{
  int fd;

  fd = open_tmpfile();
  if (fd < 0) {
    snprintf(why, len, "cannot create an O_TMPFILE in %s: %s", tmp_dir(),
             strerror(errno));
    return 0;
  }
  close(fd);
  return probe_always(why, len);
}

static ssize_t
harvest_fsync(uint8_t *out, size_t n, uint64_t deadline_ns)
{
  uint8_t blk[512];
  uint64_t t0, t1;
  size_t i;
  int fd;

  fd = open_tmpfile();
  if (fd < 0)
    return -errno;
  memset(blk, 0, sizeof(blk));
  for (i = 0; i < n; i++) {
    if (noise_now_ns() >= deadline_ns)
      break;
    blk[i % sizeof(blk)]++;
    t0 = ticks();
    if (pwrite(fd, blk, sizeof(blk), 0) != (ssize_t)sizeof(blk) ||
        fdatasync(fd) < 0) {
      close(fd);
      return -EIO;
    }
    t1 = ticks();
    out[i] = fold(t1 - t0);
  }
  close(fd);
  return (ssize_t)i;
}

/* rdrand / rdseed: the CPU's DRBG and its entropy source.  These bytes
   are already conditioned in silicon (AES-CBC-MAC / CTR-DRBG on Intel and
   AMD): hardware output, but not raw noise. */
#if defined(__x86_64__)
static int
cpu_has(int seed)
{
  unsigned a, b, c, d;

  if (!seed)
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 30));
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 18));
}

__attribute__((target("rdrnd,rdseed")))
static int
cpu_rand64(int seed, unsigned long long *v)
{
  int tries;

  /* Intel's guidance: retry rdrand 10 times; rdseed may run dry under
     load, so it gets more tries with a pause. */
  for (tries = 0; tries < (seed ? 1000 : 10); tries++) {
    if (seed ? _rdseed64_step(v) : _rdrand64_step(v))
      return 0;
    if (seed)
      _mm_pause();
  }
  return -EAGAIN;
}
#endif

static int
probe_cpu(int seed, char *why, size_t len)
{
#if defined(__x86_64__)
  unsigned long long v;

  if (!cpu_has(seed)) {
    snprintf(why, len, "this CPU has no %s instruction (CPUID)",
             seed ? "RDSEED" : "RDRAND");
    return 0;
  }
  if (cpu_rand64(seed, &v) < 0) {
    snprintf(why, len, "%s reports no data", seed ? "RDSEED" : "RDRAND");
    return 0;
  }
  return probe_always(why, len);
#else
  snprintf(why, len, "needs x86-64");
  return 0;
#endif
}

static int
probe_rdrand(char *why, size_t len)
{
  return probe_cpu(0, why, len);
}

static int
probe_rdseed(char *why, size_t len)
{
  return probe_cpu(1, why, len);
}

static ssize_t
harvest_cpu(int seed, uint8_t *out, size_t n, uint64_t deadline_ns)
{
#if defined(__x86_64__)
  unsigned long long v;
  size_t i, k;

  for (i = 0; i < n;) {
    if (past(i, deadline_ns))
      break;
    if (cpu_rand64(seed, &v) < 0)
      return -EAGAIN;
    for (k = 0; k < 8 && i < n; k++, i++)
      out[i] = (uint8_t)(v >> (8 * k));
  }
  return (ssize_t)i;
#else
  return -ENOTSUP;
#endif
}

static ssize_t
harvest_rdrand(uint8_t *out, size_t n, uint64_t deadline_ns)
{
  return harvest_cpu(0, out, n, deadline_ns);
}

static ssize_t
harvest_rdseed(uint8_t *out, size_t n, uint64_t deadline_ns)
{
  return harvest_cpu(1, out, n, deadline_ns);
}

/* hwmon: read a hardware-monitor sensor (temperature, voltage, current,
   power, fan) through sysfs; the sample is its last digits XOR the time
   the read took (the driver often talks to the chip over SMBus). */
#define HWMON_DIR "/sys/class/hwmon"
#define HWMON_MAX 16

static int
hwmon_open_all(int *fds, int max)
{
  char path[600];
  struct dirent *d, *e;
  DIR *top, *sub;
  int n, fd;

  n = 0;
  top = opendir(HWMON_DIR);
  if (!top)
    return 0;
  while (n < max && (d = readdir(top)) != NULL) {
    if (d->d_name[0] == '.')
      continue;
    snprintf(path, sizeof(path), HWMON_DIR "/%.255s", d->d_name);
    sub = opendir(path);
    if (!sub)
      continue;
    while (n < max && (e = readdir(sub)) != NULL) {
      if (!strstr(e->d_name, "_input"))
        continue;
      if (snprintf(path, sizeof(path), HWMON_DIR "/%.255s/%.255s",
                   d->d_name, e->d_name) >= (int)sizeof(path))
        continue;
      fd = open(path, O_RDONLY | O_CLOEXEC);
      if (fd >= 0)
        fds[n++] = fd;
    }
    closedir(sub);
  }
  closedir(top);
  return n;
}

static void
close_all(int *fds, int n)
{
  while (n-- > 0)
    close(fds[n]);
}

static int
probe_hwmon(char *why, size_t len)
{
  int fds[HWMON_MAX], n;

  n = hwmon_open_all(fds, HWMON_MAX);
  close_all(fds, n);
  if (n == 0) {
    snprintf(why, len, "no readable sensor under " HWMON_DIR
             " (no hwmon driver, or a container)");
    return 0;
  }
  return probe_always(why, len);
}

static ssize_t
harvest_hwmon(uint8_t *out, size_t n, uint64_t deadline_ns)
{
  int fds[HWMON_MAX], nfd;
  char buf[32];
  uint64_t t0, t1;
  ssize_t k;
  size_t i;

  nfd = hwmon_open_all(fds, HWMON_MAX);
  if (nfd == 0)
    return -ENODEV;
  for (i = 0; i < n; i++) {
    if (noise_now_ns() >= deadline_ns)
      break;
    t0 = ticks();
    k = pread(fds[i % (size_t)nfd], buf, sizeof(buf) - 1, 0);
    t1 = ticks();
    if (k <= 0) {
      close_all(fds, nfd);
      return k < 0 ? -errno : -EIO;
    }
    buf[k] = '\0';
    out[i] = fold((t1 - t0) ^ (uint64_t)strtoll(buf, NULL, 10));
  }
  close_all(fds, nfd);
  return (ssize_t)i;
}

/* The timing source: clock deltas around a memory-bound workload: 16
   dependent loads (each address depends on the value the previous load
   returned) from lines of a 1 MiB buffer that were flushed from the
   caches first, so that every load goes to DRAM. */
#define WORK_BYTES (1u << 20)
#define WORK_LOADS 16

static ssize_t
harvest_timing(uint8_t *out, size_t n, uint64_t deadline_ns)
{
#if defined(__x86_64__)
  volatile uint32_t *buf;
  uint32_t addr[WORK_LOADS], v, mask;
  uint64_t t0, t1, x;
  size_t i;
  unsigned j;

  mask = WORK_BYTES / sizeof(uint32_t) - 1;
  buf = calloc(1, WORK_BYTES);          /* zeros; the compiler can't know */
  if (!buf)
    return -ENOMEM;
  x = 1;
  for (i = 0; i < n; i++) {
    if (past(i, deadline_ns))
      break;
    for (j = 0; j < WORK_LOADS; j++) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      addr[j] = (uint32_t)(x >> 40) & mask;
      _mm_clflush((const void *)&buf[addr[j]]);
    }
    _mm_mfence();
    _mm_lfence();
    t0 = ticks();
    v = 0;
    for (j = 0; j < WORK_LOADS; j++)
      v = buf[(addr[j] + v) & mask];
    _mm_lfence();
    t1 = ticks();
    out[i] = fold((t1 - t0) + v);
  }
  free((void *)buf);
  return (ssize_t)i;
#else
  return -ENOTSUP;
#endif
}

/* Claimed min-entropy per sample (h), for the health-test cutoffs only:
   set below the worst case seen on a small, loaded virtual machine, where
   the cheap timing mechanisms go through phases of identical durations
   (long runs of equal samples from clock_jitter; from syscall_latency
   also windows of almost nothing but one value, so its claim is 0.02,
   which lets the repetition count test pass a run of up to 1,500 at
   alpha 2^-30).  A claim above the real min-entropy makes the tests fail
   a healthy source; below it, they catch only grosser failures (a stuck
   or constant mechanism still trips them).
   rdrand/rdseed output is conditioned in silicon: 7 of 8 bits. */
const struct noise_mech noise_mechs[] = {
  { "clock_jitter", "duration of 16 clock_gettime() calls (TSC ticks)",
    0.05, probe_always, harvest_clock },
  { "sleep_jitter", "overshoot of a 1 us nanosleep() (timer and scheduler "
    "wake-up)", 2.0, probe_always, harvest_sleep },
  { "thread_race", "wait until a racing thread's counter moves, and by "
    "how much", 0.5, probe_always, harvest_race },
  { "dram_timing", "latency of a load from DRAM after clflush", 0.5,
    probe_x86, harvest_dram },
  { "page_fault", "time of a minor page fault on a fresh anonymous page",
    1.0, probe_always, harvest_pagefault },
  { "branch_timing", "duration of 64 history-dependent branches "
    "(predictor state)", 0.5, probe_always, harvest_branch },
  { "syscall_latency", "duration of a getppid() system call", 0.02,
    probe_always, harvest_syscall },
  { "fsync_latency", "write + fdatasync() of 512 bytes to a temporary "
    "file (storage stack)", 2.0, probe_fsync, harvest_fsync },
  { "rdrand", "RDRAND output (CPU DRBG, conditioned in silicon)", 7.0,
    probe_rdrand, harvest_rdrand },
  { "rdseed", "RDSEED output (CPU entropy source, conditioned in "
    "silicon)", 7.0, probe_rdseed, harvest_rdseed },
  { "hwmon", "hardware-monitor sensor readings and their read latency",
    0.05, probe_hwmon, harvest_hwmon },
};
const size_t noise_mech_count = sizeof(noise_mechs) / sizeof(noise_mechs[0]);

const struct noise_mech noise_timing_mech = {
  "timing", "clock delta around 16 dependent DRAM loads (lines flushed)",
  2.0, probe_x86, harvest_timing,
};

const struct noise_mech *
noise_mech_find(const char *name)
{
  size_t i;

  for (i = 0; i < noise_mech_count; i++)
    if (strcmp(noise_mechs[i].name, name) == 0)
      return &noise_mechs[i];
  return NULL;
}

ssize_t
noise_mech_raw(const struct noise_mech *m, uint8_t *out, size_t n,
               uint64_t deadline_ns)
{
  return m->harvest(out, n, deadline_ns);
}
