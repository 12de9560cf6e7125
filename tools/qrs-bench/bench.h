/* qrs-bench: its subcommands, and the harness they share (bench.c).

   Each subcommand prints its figures to stdout and returns an exit status.
   The harness is what they measure with: a table-driven option parser,
   the clocks, series of latency samples and their percentiles, medians,
   CPU pinning and the few process chores of starting qrsd and servers.
   Nothing of it runs inside a timed region but the clocks and
   bench_lat_add(), which are inline and cost what a clock_gettime() and a
   store cost. */
#ifndef QRS_BENCH_H
#define QRS_BENCH_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

#include "cliparse.h"
#include "timestamp.h"

int bench_draw(int argc, char **argv);
int bench_local(int argc, char **argv);
int bench_select(int argc, char **argv);
int bench_grpc(int argc, char **argv);
int bench_budgets(int argc, char **argv);
int bench_journal(int argc, char **argv);
int bench_hub(int argc, char **argv);

/* ---- options ---- */

/* Parse argv[1..] against opts (cliparse.h; a subcommand ends them with
   BENCH_OPTS_END, its -h/--help).  The values are converted as the types
   say and not checked: the caller checks them.  Returns -1 to go on, 0
   after --help (usage(stdout) printed), or 2 after a bad option
   (usage(stderr) printed, unless a call said why). */
int bench_opts_parse(int argc, char **argv, const struct cli_opt *opts,
                     void (*usage)(FILE *f));

/* Every subcommand's -h/--help and the end of its table. */
#define BENCH_OPTS_END \
  { .name = "help", .key = 'h', .type = CLI_OPT_HELP }, \
  { 0 }

/* The latency figures of draw, journal and hub: blocking draws of samples
   bytes, per_round of them on each side in each of rounds rounds, the
   sides alternating. */
struct bench_rounds {
  uint32_t samples;
  int rounds;
  int per_round;
};

/* Their options, --samples, --rounds and --per-round, into *r. */
#define BENCH_ROUNDS_OPTS(r) \
  { .name = "samples", .type = CLI_OPT_U32, .field = &(r)->samples }, \
  { .name = "rounds", .type = CLI_OPT_INT, .field = &(r)->rounds }, \
  { .name = "per-round", .type = CLI_OPT_INT, .field = &(r)->per_round }

/* 1 when r cannot make a figure (no bytes, no round, or under 10 draws a
   round), else 0. */
static inline int
bench_rounds_bad(const struct bench_rounds *r)
{
  return r->samples == 0 || r->rounds < 1 || r->per_round < 10;
}

/* ---- clocks ---- */

/* The wall clock (CLOCK_MONOTONIC) in microseconds. */
static inline double
bench_wall_us(void)
{
  return (double)mono_now_ns() / 1e3;
}

/* This thread's CPU time in microseconds: what a single-threaded figure
   uses on a shared machine, where the time the thread spends descheduled
   is not the code's. */
static inline double
bench_cpu_us(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* ---- statistics ---- */

/* A series of latencies in nanoseconds, room for every round of a
   measurement: rounds append to it, bench_lat_sort() then orders it for
   bench_lat_pct_us(). */
struct bench_lat {
  int64_t *v;
  size_t n, cap;
};

/* Room for cap samples; exits with a message when there is no memory.
   Free with bench_lat_done(). */
void bench_lat_init(struct bench_lat *l, size_t cap);
void bench_lat_done(struct bench_lat *l);

static inline void
bench_lat_add(struct bench_lat *l, int64_t ns)
{
  l->v[l->n++] = ns;
}

void bench_lat_sort(struct bench_lat *l);

struct qrs_client;

/* A client of the qrsd at sock; exits with a message when it cannot
   connect.  Free with qrs_client_free(). */
struct qrs_client *bench_connect(const char *sock);

/* One round: r->per_round blocking draws of r->samples bytes through c,
   each round trip's latency appended to l (room for r->per_round more);
   exits with a message when a draw fails. */
void bench_lat_draws(struct qrs_client *c, const struct bench_rounds *r,
                     struct bench_lat *l);

/* Sort l and print one line: name, p50, p99 and p99.9 in microseconds. */
void bench_print_lat(const char *name, struct bench_lat *l);

/* The p-quantile (0 <= p <= 1) of a sorted, non-empty series in
   microseconds: the sample of rank p (n - 1), rounded to the nearest. */
double bench_lat_pct_us(const struct bench_lat *l, double p);

/* The median of n > 0 values (the mean of the middle two when n is even).
   Sorts v. */
double bench_median(double *v, size_t n);

/* ---- throughput ---- */

/* One client thread of a throughput figure: its function calls until
   end, counting the calls that succeeded in count and the others in
   failed.  ctx is the caller's: what the thread works on. */
struct bench_worker {
  const void *ctx;
  int64_t end;
  uint64_t count, failed;
  pthread_t th;
};

/* Run the n workers w (ctx set) on threads of fn (its argument: the
   struct bench_worker) for seconds, and wait for them.  Returns their
   successful calls per second, all together; *failed: their failed
   calls. */
double bench_throughput(struct bench_worker *w, int n, double seconds,
                        void *(*fn)(void *), uint64_t *failed);

/* ---- the machine and processes ---- */

/* Run this thread (and what it forks) on cpu only; bench_unpin(): on every
   online CPU again.  Return sched_setaffinity()'s result. */
int bench_pin(int cpu);
int bench_unpin(void);

/* rel in the folder of this program (the build tree's tools/), in buf;
   NULL when the program's path is unknown. */
const char *bench_sibling(const char *rel, char *buf, size_t len);

/* The qrsd binary to start: opt when set, else $QRSD, else the build
   tree's (../../daemon/qrsd from this program's folder) when it is
   there, else "qrsd" (from PATH). */
const char *bench_find_qrsd(const char *opt);

/* Fork and exec bin on socket sock (with -c conf unless conf is NULL, and
   no status file), pinned to CPU 0 when pin, stderr to /dev/null; wait
   until it accepts a client.  Returns its pid; exits with a message when
   it did not start. */
pid_t bench_start_qrsd(const char *bin, const char *sock, const char *conf,
                       int pin);

/* Try to connect to the qrsd at sock every 10 ms, tries times.  Returns 0
   once it accepts a client, -1 if it never did. */
int bench_wait_qrsd(const char *sock, int tries);

/* Signal *pid (when > 0) with sig, reap it and set *pid to -1. */
void bench_kill(pid_t *pid, int sig);

/* Remove the temporary folder dir and what is in it.  Returns 0 or -1. */
int bench_rmdir(const char *dir);

/* Make the temporary folder /tmp/qrs-bench-XXXXXX in dir (size bytes, at
   least 22).  At exit stop runs (the caller's servers signalled and
   reaped; NULL: none), then the folder and what is in it are removed.
   SIGPIPE is ignored from then on: a server that went away is an error
   the write reports.  Returns 0, or -1 after saying why. */
int bench_tmpdir(char *dir, size_t size, void (*stop)(void));

#endif
