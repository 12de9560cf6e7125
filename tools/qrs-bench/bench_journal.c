/* qrs-bench journal: what the draw journal costs on the draw path, and
   how fast qrs-audit verifies a journal.

   Two real qrsd run side by side from configurations that differ only in
   journal.dir (one journals to a folder, the other has no journal); one
   client measures blocking draws against each in alternating rounds (the
   order swapped every round), so that the machine's moods fall on both
   sides alike.  Then qrs-audit (the real program, pinned to one CPU)
   verifies a journal of --audit-entries entries written in-process by
   journal_submit(), and its rate is printed in entries per CPU second and
   per wall second; then the same for qrs-audit --records --journal over
   libqrs full records naming those entries. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <qrs/client.h>
#include <qrs/sampler.h>

#include "base/log.h"
#include "bench.h"
#ifdef QRS_BENCH_AUDIT_FLOOR
#include "audit_json.h"
#endif
#include "persist/journal.h"

#ifdef QRS_BENCH_AUDIT_FLOOR
#include <openssl/evp.h>
#endif

struct jopts {
  const char *qrsd;
  const char *audit;
  const char *dir;              /* NULL: a temporary folder */
  struct bench_rounds draws;
  uint32_t flush_ms;            /* UINT32_MAX: qrsd's default */
  const char *writer_cpu;       /* NULL: qrsd's default */
  uint32_t writer_nice;         /* UINT32_MAX: qrsd's default */
  uint32_t hash_buffer;         /* UINT32_MAX: qrsd's default */
  uint32_t audit_entries;       /* 0: no qrs-audit figure */
  uint32_t audit_records;       /* records of it (<= audit_entries) */
  int pin;
};

static char tmpdir[64];
static pid_t pid_on = -1, pid_off = -1;

static void
stop_servers(void)
{
  bench_kill(&pid_on, SIGTERM);
  bench_kill(&pid_off, SIGTERM);
}

/* Write a qrsd configuration to path: the built-in default but for the
   journal (dir "" = none). */
static void
write_conf(const char *path, const char *jdir, const struct jopts *o)
{
  FILE *f = fopen(path, "w");

  if (f == NULL) {
    perror(path);
    exit(1);
  }
  fprintf(f, "journal:\n  dir: \"%s\"\n  queue: 65536\n", jdir);
  if (o->flush_ms != UINT32_MAX)
    fprintf(f, "  flush_ms: %u\n", o->flush_ms);
  if (o->writer_cpu)
    fprintf(f, "  writer_cpu: \"%s\"\n", o->writer_cpu);
  if (o->writer_nice != UINT32_MAX)
    fprintf(f, "  writer_nice: %u\n", o->writer_nice);
  if (o->hash_buffer != UINT32_MAX)
    fprintf(f, "  hash_buffer: %u\n", o->hash_buffer);
  if (fclose(f) != 0) {
    perror(path);
    exit(1);
  }
}

static void
print_ratio(const char *what, double on, double off)
{
  printf("  ratio on/off %-6s %.3fx  (target <= 1.05x: %s)\n", what,
         on / off, on / off <= 1.05 ? "met" : "NOT MET");
}

/* The draw path with and without the journal; the journal's entries are
   counted by journal_verify() afterwards. */
static int
bench_draw_path(const struct jopts *o, const char *jdir)
{
  char conf_on[128], conf_off[128], sock_on[128], sock_off[128];
  char head[JOURNAL_HEX_LEN + 1], err[512];
  struct qrs_client *con, *coff;
  struct bench_lat lon, loff;
  const char *bin = bench_find_qrsd(o->qrsd);
  uint64_t entries = 0;
  size_t total;
  int i, r;

  snprintf(conf_on, sizeof conf_on, "%s/on.yaml", tmpdir);
  snprintf(conf_off, sizeof conf_off, "%s/off.yaml", tmpdir);
  snprintf(sock_on, sizeof sock_on, "%s/on.sock", tmpdir);
  snprintf(sock_off, sizeof sock_off, "%s/off.sock", tmpdir);
  write_conf(conf_on, jdir, o);
  write_conf(conf_off, "", o);
  pid_on = bench_start_qrsd(bin, sock_on, conf_on, o->pin);
  pid_off = bench_start_qrsd(bin, sock_off, conf_off, o->pin);
  if (o->pin)
    bench_pin(0);
  con = bench_connect(sock_on);
  coff = bench_connect(sock_off);
  total = (size_t)o->draws.rounds * (size_t)o->draws.per_round;
  bench_lat_init(&lon, total);
  bench_lat_init(&loff, total);
  bench_lat_draws(con, &o->draws, &lon);      /* warm-up */
  bench_lat_draws(coff, &o->draws, &loff);
  lon.n = loff.n = 0;
  for (i = 0; i < o->draws.rounds; i++) {
    if (i % 2 == 0) {
      bench_lat_draws(con, &o->draws, &lon);
      bench_lat_draws(coff, &o->draws, &loff);
    } else {
      bench_lat_draws(coff, &o->draws, &loff);
      bench_lat_draws(con, &o->draws, &lon);
    }
  }
  qrs_client_free(con);
  qrs_client_free(coff);
  if (o->pin)
    bench_unpin();
  bench_kill(&pid_on, SIGTERM);       /* the writer drains the queue */
  bench_kill(&pid_off, SIGTERM);
  r = journal_verify(jdir, NULL, NULL, &entries, head, err, sizeof err);

  printf("qrs-bench journal: sample_count %u, %s, %d x %d draws per side "
         "(alternating rounds), journal in %s\n", o->draws.samples,
         o->pin ? "client and both qrsd pinned to CPU 0" : "unpinned",
         o->draws.rounds, o->draws.per_round, jdir);
  printf("  journal.flush_ms %s, writer_cpu %s, writer_nice %s, "
         "hash_buffer %s (as given, else qrsd's defaults)\n",
         o->flush_ms == UINT32_MAX ? "default" : "set",
         o->writer_cpu ? o->writer_cpu : "default",
         o->writer_nice == UINT32_MAX ? "default" : "set",
         o->hash_buffer == UINT32_MAX ? "default" : "set");
  printf("draw latency (one client, blocking):\n");
  bench_print_lat("journal on", &lon);
  bench_print_lat("journal off", &loff);
  print_ratio("p50", bench_lat_pct_us(&lon, 0.5),
              bench_lat_pct_us(&loff, 0.5));
  print_ratio("p99", bench_lat_pct_us(&lon, 0.99),
              bench_lat_pct_us(&loff, 0.99));
  printf("  journal: %s, %llu entries (expected %zu)\n",
         journal_fault_name(r), (unsigned long long)entries,
         total + (size_t)o->draws.per_round);
  bench_lat_done(&lon);
  bench_lat_done(&loff);
  return r == JOURNAL_INTACT &&
         entries == total + (size_t)o->draws.per_round ? 0 : 1;
}

/* Entry i of n of the qrs-audit figure (what the records copy). */
static void
audit_entry(struct journal_entry *e, uint32_t i, uint32_t n)
{
  e->nonce = (uint64_t)i * 2654435761u;
  e->t_recv = 1796000000.0 + i * 1e-5;
  e->t_gen = e->t_recv + 2e-6;
  e->t_sent = e->t_gen + 1e-6;
  e->u = (i + 0.5) / n;
  e->bytes_sha[i % JOURNAL_HASH_LEN] ^= (uint8_t)i;
}

/* n entries through journal_submit() (retrying while the queue is full),
   into dir. */
static int
write_journal(char *dir, uint32_t n)
{
  struct journal_params p;
  struct journal_entry e;
  struct journal *j;
  char err[512];
  uint32_t i;
  int r;

  /* faster than any fsync keeps up with: the queue fills and
     journal_submit() is retried, which is expected here, not warned of */
  log_set_level(LOG_LEVEL_ERR);
  journal_params_default(&p);
  p.dir = dir;
  p.queue_len = JOURNAL_QUEUE_MAX;
  p.max_bytes = 256u << 20;
  r = journal_open(&j, &p, err, sizeof err);
  if (r < 0) {
    fprintf(stderr, "qrs-bench: %s\n", err);
    return -1;
  }
  memset(&e, 0, sizeof e);
  strcpy(e.source, "system");
  strcpy(e.amp, "zscore_mean");
  strcpy(e.amp_params, "n=10000 mean=127.5 std=73.9");
  e.pid = (int32_t)getpid();
  e.uid = (uint32_t)getuid();
  for (i = 0; i < n; i++) {
    audit_entry(&e, i, n);
    while ((r = journal_submit(j, &e)) == -EAGAIN)
      usleep(200);
    if (r < 0) {
      fprintf(stderr, "qrs-bench: journal_submit: %s\n", strerror(-r));
      journal_close(j);
      return -1;
    }
  }
  journal_close(j);
  return 0;
}

/* A libqrs full record (qrs_token_record_write()) for each entry of
   write_journal(), the draw of that entry, into path. */
static int
write_records(const char *path, uint32_t n, uint32_t entries)
{
  struct qrs_token_record rec;
  struct journal_entry e;
  FILE *f;
  uint32_t i;
  int r = 0;

  f = fopen(path, "w");
  if (f == NULL) {
    perror(path);
    return -1;
  }
  memset(&e, 0, sizeof e);
  memset(&rec, 0, sizeof rec);
  strcpy(rec.entropy_source_used, "system");
  strcpy(rec.entropy_source_type, "system");
  strcpy(rec.temperature_strategy, "fixed");
  strcpy(rec.config_hash, "a42d7a5feb80957d");
  rec.entropy_production = 1;
  rec.sample_mean = rec.varentropy = rec.h_ema = rec.vh_ema = NAN;
  rec.draw_z = rec.draw_coherence_z = rec.draw_coherence_r = NAN;
  rec.top_p_used = rec.kept_entropy_bits = rec.mirostat_mu = NAN;
  rec.entropy_prefetch_hit = rec.entropy_echo_verified = rec.gate_open = -1;
  rec.temperature_used = 0.8;
  rec.min_p_used = 0.05;
  rec.num_candidates = 40;
  for (i = 0; i < n && r == 0; i++) {
    audit_entry(&e, i, entries);
    rec.step = i;
    rec.timestamp_ns = (int64_t)i * 1000;
    rec.journal_seq = (uint64_t)i + 1;
    rec.u_value = e.u;
    rec.cdf_lo = e.u - 0.5 / entries;
    rec.cdf_hi = e.u + 0.25 / entries;
    rec.token_id = i % 151936;
    rec.token_prob = 0.75 / entries;
    rec.z_score = 0.1;
    rec.shannon_entropy = 2.5;
    rec.entropy_nonce = e.nonce;
    rec.draw_received_ns = llround(e.t_recv * 1e9);
    rec.draw_generated_ns = llround(e.t_gen * 1e9);
    rec.draw_sent_ns = llround(e.t_sent * 1e9);
    r = qrs_token_record_write(&rec, 2, f);
  }
  if (fclose(f) != 0 || r != 0) {
    fprintf(stderr, "qrs-bench: writing %s failed\n", path);
    return -1;
  }
  return 0;
}

/* qrs-audit --journal dir (and --records records unless NULL) on CPU 0;
   its CPU and wall seconds. */
static int
run_audit(const struct jopts *o, const char *dir, const char *records,
          double *cpu, double *wall)
{
  static char path[4200];
  const char *bin = o->audit;
  struct rusage ru;
  int64_t t0;
  pid_t pid;
  int st;

  if (bin == NULL)
    bin = bench_sibling("../qrs-audit/qrs-audit", path, sizeof path);
  if (bin == NULL)
    bin = "qrs-audit";
  fflush(stdout);
  t0 = mono_now_ns();
  pid = fork();
  if (pid == 0) {
    bench_pin(0);
    if (!freopen("/dev/null", "w", stdout))
      _exit(127);
    if (records)
      execlp(bin, "qrs-audit", "--journal", dir, "--records", records,
             (char *)NULL);
    else
      execlp(bin, "qrs-audit", "--journal", dir, (char *)NULL);
    _exit(127);
  }
  if (pid < 0 || wait4(pid, &st, 0, &ru) != pid) {
    perror("qrs-audit");
    return -1;
  }
  *wall = (double)(mono_now_ns() - t0) / 1e9;
  *cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
         (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "qrs-bench: %s --journal %s%s%s did not say intact\n",
            bin, dir, records ? " --records " : "", records ? records : "");
    return -1;
  }
  return 0;
}

static void
print_audit(const char *what, uint32_t n, double *cpu, double *wall)
{
  double mcpu = bench_median(cpu, 3), mwall = bench_median(wall, 3);

  printf("  %-26s %.3f s CPU, %.3f s wall: %9.0f /s per CPU second, %9.0f "
         "/s wall (target >= 1000000/s on one core: %s)\n", what, mcpu,
         mwall, n / mcpu, n / mwall, n / mcpu >= 1e6 ? "met" : "NOT MET");
}

#ifdef QRS_BENCH_AUDIT_FLOOR
static double
bench_cpu_seconds(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The whole file at path in memory, AJ_PADDING zero bytes after it
   (*len its size), or NULL (said). */
static char *
slurp(const char *path, size_t *len)
{
  struct stat st;
  size_t got = 0;
  ssize_t r;
  char *buf;
  int fd;

  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || fstat(fd, &st) != 0) {
    perror(path);
    if (fd >= 0)
      close(fd);
    return NULL;
  }
  buf = malloc((size_t)st.st_size + AJ_PADDING);
  if (buf == NULL) {
    fprintf(stderr, "qrs-bench: out of memory\n");
    close(fd);
    return NULL;
  }
  while (got < (size_t)st.st_size &&
         (r = read(fd, buf + got, (size_t)st.st_size - got)) > 0)
    got += (size_t)r;
  close(fd);
  memset(buf + got, 0, AJ_PADDING);
  *len = got;
  return buf;
}

/* The floor of the records figure: the records file read into memory,
   split at newlines and each line parsed by simdjson's DOM parser (what
   qrs-audit reads them with), nothing checked: the fastest honest way to
   read these records with the library, on CPU 0.  CPU seconds, or < 0. */
static double
parse_floor(const char *path, uint32_t n)
{
  struct aj_parser *p;
  char *buf, *b, *e, *nl;
  double t0, t1;
  uint32_t lines = 0;
  size_t got;

  buf = slurp(path, &got);
  p = aj_parser_new();
  if (!buf || !p) {
    free(buf);
    aj_parser_free(p);
    return -1;
  }
  t0 = bench_cpu_seconds();
  for (b = buf, e = buf + got; b < e; b = nl + 1) {
    nl = memchr(b, '\n', (size_t)(e - b));
    if (nl == NULL)
      nl = e;
    if (nl > b && aj_parse_only(p, b, (size_t)(nl - b)) != 0)
      break;
    lines++;
  }
  t1 = bench_cpu_seconds();
  free(buf);
  aj_parser_free(p);
  if (lines != n) {
    fprintf(stderr, "qrs-bench: %s: %u of %u records parsed\n", path,
            lines, n);
    return -1;
  }
  return t1 - t0;
}

/* The floor of the chain check: the journal file (write_journal() fits
   it in one) in memory and each entry's text before its hash hashed with
   SHA-256 by libcrypto (one context, as qrs-audit), nothing compared.
   CPU seconds, or < 0. */
static double
chain_floor(const char *dir, uint32_t n)
{
  char path[256], *buf, *b, *e, *nl;
  uint8_t h[JOURNAL_HASH_LEN];
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  EVP_MD *sha = EVP_MD_fetch(NULL, "SHA256", NULL);
  uint32_t entries = 0;
  double t0, t1;
  size_t got;
  int ok = 1;

  snprintf(path, sizeof path, "%s/journal-000001.log", dir);
  buf = slurp(path, &got);
  if (!buf || !md || !sha) {
    free(buf);
    EVP_MD_CTX_free(md);
    EVP_MD_free(sha);
    return -1;
  }
  t0 = bench_cpu_seconds();
  for (b = buf, e = buf + got; b < e && ok; b = nl + 1) {
    nl = memchr(b, '\n', (size_t)(e - b));
    if (nl == NULL)
      nl = e;
    if (*b == '#' || nl - b <= JOURNAL_HEX_LEN)
      continue;
    ok = EVP_DigestInit_ex(md, sha, NULL) &&
         EVP_DigestUpdate(md, b, (size_t)(nl - b) - JOURNAL_HEX_LEN) &&
         EVP_DigestFinal_ex(md, h, NULL);
    entries++;
  }
  t1 = bench_cpu_seconds();
  free(buf);
  EVP_MD_CTX_free(md);
  EVP_MD_free(sha);
  if (!ok || entries != n) {
    fprintf(stderr, "qrs-bench: %s: %u of %u entries hashed\n", path,
            entries, n);
    return -1;
  }
  return t1 - t0;
}
#endif

static int
bench_audit(const struct jopts *o)
{
  char dir[128], recs[128];
  double cpu[3], wall[3];
  int i;

  snprintf(recs, sizeof recs, "%s/records.jsonl", tmpdir);
  snprintf(dir, sizeof dir, "%s/audit", tmpdir);
  if (mkdir(dir, 0700) != 0) {
    perror(dir);
    return 1;
  }
  if (write_journal(dir, o->audit_entries) < 0 ||
      write_records(recs, o->audit_records, o->audit_entries) < 0)
    return 1;
  printf("qrs-audit (pinned to CPU 0), %u journal entries, %u libqrs full "
         "records naming the first of them, median of 3 runs:\n",
         o->audit_entries, o->audit_records);
  for (i = 0; i < 3; i++)
    if (run_audit(o, dir, NULL, &cpu[i], &wall[i]) < 0)
      return 1;
  print_audit("--journal: entries", o->audit_entries, cpu, wall);
  for (i = 0; i < 3; i++)
    if (run_audit(o, dir, recs, &cpu[i], &wall[i]) < 0)
      return 1;
  print_audit("--records --journal: records", o->audit_records, cpu, wall);
#ifdef QRS_BENCH_AUDIT_FLOOR
  {
    double f[3], g[3], m, c, mc = bench_median(cpu, 3);
    int pin = bench_pin(0);

    for (i = 0; i < 3; i++)
      if ((f[i] = parse_floor(recs, o->audit_records)) < 0 ||
          (g[i] = chain_floor(dir, o->audit_entries)) < 0)
        return 1;
    if (pin == 0)
      bench_unpin();
    m = bench_median(f, 3);
    c = bench_median(g, 3) * o->audit_records / o->audit_entries;
    printf("  %-26s %.3f s CPU: %9.0f /s (floor: simdjson's DOM parse of "
           "each record alone%s)\n", "records parsed only", m,
           o->audit_records / m, pin == 0 ? ", CPU 0" : "");
    printf("  %-26s %.3f s CPU: %9.0f /s (floor: libcrypto's SHA-256 of "
           "each entry's text alone)\n", "entries hashed only", c,
           o->audit_records / c);
    printf("  %-26s %.3f s CPU: %9.0f /s (the two floors together, the "
           "most a reader of these records with simdjson and a checker of "
           "this chain can reach here; qrs-audit at %.2fx of it, %.2fx of "
           "the parse alone)\n", "floor of records+journal", m + c,
           o->audit_records / (m + c), mc / (m + c), mc / m);
  }
#endif
  return 0;
}

static void
usage(FILE *f)
{
  fprintf(f,
"Usage: qrs-bench journal [OPTIONS]\n"
"\n"
"The draw journal's cost on the draw path: starts two qrsd from the\n"
"build tree whose configurations differ only in journal.dir (one\n"
"journals, one does not), measures blocking draws from one client against\n"
"each in alternating rounds, and prints p50/p99/p99.9 of each side and\n"
"the ratios on/off against the target (<= 1.05x).  The journal written is\n"
"verified and its entries counted.  Then qrs-audit's throughput: a journal\n"
"of --audit-entries entries is written in-process and qrs-audit --journal\n"
"verifies it three times pinned to CPU 0, then qrs-audit --records\n"
"--journal checks --audit-records libqrs full records (each the draw of\n"
"one entry) against it three times; the median rates are printed against\n"
"the target (>= 10^6/s on one core).  With simdjson, their floors: each\n"
"record parsed by simdjson's DOM parser alone, each entry's text hashed\n"
"by libcrypto's SHA-256 alone (both from memory, on CPU 0), and the two\n"
"together: the most any reader of these records and checker of this chain\n"
"could reach here, with qrs-audit's ratio to it.\n"
"\n"
"Options:\n"
"  --qrsd PATH           the qrsd to start (default: $QRSD, else\n"
"                        the build tree's daemon/qrsd)\n"
"  --audit PATH          the qrs-audit to run (default: the build tree's)\n"
"  --journal-dir DIR     where the journal on side writes (an empty\n"
"                        folder; default: a temporary folder under /tmp)\n"
"  --samples N           bytes per draw (default 10000)\n"
"  --rounds N            alternating rounds (default 10)\n"
"  --per-round N         draws per round and side (default 2000)\n"
"  --flush-ms MS         journal.flush_ms of both qrsd (default: qrsd's)\n"
"  --writer-cpu N        journal.writer_cpu of the journalling qrsd (default:\n"
"                        with the pinning, 1 when the machine has a second\n"
"                        CPU: the loop and the client on CPU 0, the writer\n"
"                        beside them, where an unpinned writer runs on a\n"
"                        machine with an idle core; 0 puts it on the loop's\n"
"                        CPU: then the figure is the journal's whole CPU\n"
"                        cost, its SHA-256 of every draw's bytes included;\n"
"                        \"\" leaves it to the scheduler)\n"
"  --writer-nice N       journal.writer_nice (default: qrsd's)\n"
"  --hash-buffer BYTES   journal.hash_buffer (default: qrsd's)\n"
"  --audit-entries N     entries of the qrs-audit figure (default\n"
"                        1000000, about 360 MB on disk; 0: skip it)\n"
"  --audit-records N     libqrs full records of it, each the draw of one\n"
"                        entry (default: one per entry, about 1.2 KB each;\n"
"                        at most --audit-entries: with fewer, the figure\n"
"                        also pays for verifying entries no record names)\n"
"  --no-pin              do not pin the client and the qrsd to CPU 0\n"
"  -h, --help            show this help\n"
"\n"
"Exit status: 0 when measured (targets met or not), 1 when something\n"
"failed (a qrsd did not start, the journal did not verify), 2 on bad\n"
"usage.\n");
}

int
bench_journal(int argc, char **argv)
{
  struct jopts o = {
    .draws = { .samples = 10000, .rounds = 10, .per_round = 2000 },
    .flush_ms = UINT32_MAX,
    .writer_nice = UINT32_MAX,
    .hash_buffer = UINT32_MAX,
    .audit_entries = 1000000,
    .audit_records = UINT32_MAX,        /* one per entry */
    .pin = 1,
  };
  const struct cli_opt opts[] = {
    { .name = "qrsd", .type = CLI_OPT_STRING, .field = &o.qrsd },
    { .name = "audit", .type = CLI_OPT_STRING, .field = &o.audit },
    { .name = "journal-dir", .type = CLI_OPT_STRING, .field = &o.dir },
    BENCH_ROUNDS_OPTS(&o.draws),
    { .name = "flush-ms", .type = CLI_OPT_U32, .field = &o.flush_ms },
    { .name = "writer-cpu", .type = CLI_OPT_STRING, .field = &o.writer_cpu },
    { .name = "writer-nice", .type = CLI_OPT_U32,
      .field = &o.writer_nice },
    { .name = "hash-buffer", .type = CLI_OPT_U32,
      .field = &o.hash_buffer },
    { .name = "audit-entries", .type = CLI_OPT_U32,
      .field = &o.audit_entries },
    { .name = "audit-records", .type = CLI_OPT_U32,
      .field = &o.audit_records },
    { .name = "no-pin", .type = CLI_OPT_SET, .field = &o.pin },
    BENCH_OPTS_END,
  };
  char jdir[128];
  int r, rc;

  r = bench_opts_parse(argc, argv, opts, usage);
  if (r >= 0)
    return r;
  if (o.audit_records == UINT32_MAX)
    o.audit_records = o.audit_entries;
  /* The writer works off the loop: beside it, as on a host with an idle
     core, unless told (the usage says why) */
  if (o.writer_cpu == NULL && o.pin && sysconf(_SC_NPROCESSORS_ONLN) >= 2)
    o.writer_cpu = "1";
  if (bench_rounds_bad(&o.draws) ||
      (o.audit_entries > 0 && o.audit_records > o.audit_entries) ||
      (o.dir && strlen(o.dir) >= sizeof jdir)) {
    fprintf(stderr, "qrs-bench journal: bad option value\n");
    return 2;
  }
  if (bench_tmpdir(tmpdir, sizeof tmpdir, stop_servers) < 0)
    return 1;
  if (o.dir) {
    snprintf(jdir, sizeof jdir, "%s", o.dir);
  } else {
    snprintf(jdir, sizeof jdir, "%s/journal", tmpdir);
    if (mkdir(jdir, 0700) != 0) {
      perror(jdir);
      return 1;
    }
  }
  rc = bench_draw_path(&o, jdir);
  if (o.audit_entries > 0 && bench_audit(&o) != 0)
    rc = 1;
  return rc;
}
