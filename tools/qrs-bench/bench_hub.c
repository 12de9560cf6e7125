/* qrs-bench hub: draws through node qrsd whose source is a hub qrsd over
   TLS gRPC (node -> hub -> source), against the same node's draws from a
   source calling the hub's own source directly (node -> source, the same
   upstream mode, the same kind of TLS wire): the two paths differ by the
   hub's hop and nothing else.  Measured against running daemons
   (tests/integration/hub.sh --bench starts them: an entropy server, a hub
   with TLS and api keys whose source it is, three nodes).

   Latency: one client on each node in turn, alternating rounds of the
   two sources on the same connection, p50 and p99 and their ratio, and
   where the time went (inside the node waiting for the bytes, or the
   rest: the client's socket and scheduling), from the draws' own
   timestamps.  Throughput: CLIENTS client threads on each node (NODES x
   CLIENTS in all) for --seconds through the hub, against as many on the
   direct source. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qrs/client.h>

#include "bench.h"

#define HB_MAX_NODES 8
#define HB_MAX_CLIENTS 64

struct hopts {
  const char *nodes, *source, *direct;
  struct bench_rounds draws;
  int clients;
  double seconds;
};

/* One side of a figure: a socket and the source drawn there. */
struct side {
  const char *sock, *source;
};

/* What a throughput worker draws: samples bytes from s. */
struct job {
  struct side s;
  uint32_t samples;
};

static int
draw_once(struct qrs_client *c, const struct side *s, uint32_t samples,
          struct qrs_draw *d)
{
  struct qrs_draw_request rq;

  memset(&rq, 0, sizeof(rq));
  rq.source = s->source;
  rq.sample_count = samples;
  return qrs_client_draw(c, &rq, d);
}

/* A path's latencies: the client's round trip, and its part inside the
   node between the request's decoding and the bytes in hand (the
   upstream call: the hop or hops to the source). */
struct lat {
  struct bench_lat total, wait;
};

/* One round, rr->per_round timed draws on c from s, into l (NULL:
   warm-up); a failed or fallback draw stops the benchmark (it would
   measure the fallback). */
static void
lat_round(struct qrs_client *c, const struct side *s,
          const struct bench_rounds *rr, struct lat *l)
{
  struct qrs_draw d;
  int64_t t0, t1;
  int i, r;

  for (i = 0; i < rr->per_round; i++) {
    t0 = mono_now_ns();
    r = draw_once(c, s, rr->samples, &d);
    t1 = mono_now_ns();
    if (r < 0 || d.fallback) {
      fprintf(stderr, "qrs-bench hub: draw from '%s' on %s: %s\n",
              s->source, s->sock, r < 0 ? qrs_strerror(r)
                                        : "served by the fallback");
      exit(1);
    }
    if (l) {
      bench_lat_add(&l->total, t1 - t0);
      bench_lat_add(&l->wait, d.generated.monotonic_ns -
                              d.received.monotonic_ns);
    }
  }
}

static void
lat_init(struct lat *l, size_t cap)
{
  bench_lat_init(&l->total, cap);
  bench_lat_init(&l->wait, cap);
}

/* Sort l and print its line: p50 / p99 of the round trip and of the wait
   for the bytes inside the node. */
static void
lat_print(const char *name, struct lat *l)
{
  bench_lat_sort(&l->total);
  bench_lat_sort(&l->wait);
  printf("    %-24s %8.1f / %8.1f   in the node waiting for the bytes "
         "%8.1f / %8.1f\n", name, bench_lat_pct_us(&l->total, 0.5),
         bench_lat_pct_us(&l->total, 0.99), bench_lat_pct_us(&l->wait, 0.5),
         bench_lat_pct_us(&l->wait, 0.99));
}

static void
lat_done(struct lat *l)
{
  bench_lat_done(&l->total);
  bench_lat_done(&l->wait);
}

/* A worker (struct bench_worker, ctx a struct job). */
static void *
worker_main(void *arg)
{
  struct bench_worker *w = arg;
  const struct job *j = w->ctx;
  struct qrs_client *c;
  struct qrs_draw d;

  if (qrs_client_new(j->s.sock, NULL, &c) < 0) {
    w->failed++;
    return NULL;
  }
  while (mono_now_ns() < w->end) {
    if (draw_once(c, &j->s, j->samples, &d) < 0 || d.fallback)
      w->failed++;
    else
      w->count++;
  }
  qrs_client_free(c);
  return NULL;
}

/* Draws/s of n workers on sides[i % nsides] for o->seconds; *failed:
   the draws that failed or fell back. */
static double
throughput(const struct hopts *o, const struct side *sides, int nsides,
           int n, uint64_t *failed)
{
  static struct bench_worker w[HB_MAX_NODES * HB_MAX_CLIENTS];
  static struct job jobs[HB_MAX_NODES];
  int i;

  for (i = 0; i < nsides; i++) {
    jobs[i].s = sides[i];
    jobs[i].samples = o->draws.samples;
  }
  for (i = 0; i < n; i++)
    w[i].ctx = &jobs[i % nsides];
  return bench_throughput(w, n, o->seconds, worker_main, failed);
}

static void
usage(FILE *f)
{
  fprintf(f,
"Usage: qrs-bench hub --nodes SOCKET[,SOCKET...] [OPTIONS]\n"
"\n"
"Draws through node qrsd whose source is a hub qrsd over TLS gRPC (node\n"
"-> hub -> source) against the same nodes' draws from a source calling\n"
"the hub's source directly (node -> source), in the same run: one\n"
"client's p50/p99 latency in alternating rounds on each node, and the\n"
"draws/s of CLIENTS clients on every node through the hub against as many\n"
"on the direct source.  The daemons must be running: tests/integration/\n"
"hub.sh --bench starts an entropy server, a hub with TLS and api keys\n"
"whose source it is, and three nodes, and runs this.\n"
"\n"
"Options:\n"
"  --nodes LIST        the nodes' sockets, comma-separated (at most 8)\n"
"  --source NAME       the nodes' source that is the hub (default hub)\n"
"  --direct NAME       the nodes' source that is the hub's source, called\n"
"                      directly (default direct)\n"
"  --samples N         bytes per draw (default 10000)\n"
"  --rounds N          alternating latency rounds per node (default 5)\n"
"  --per-round N       draws per round and side (default 500)\n"
"  --clients N         client threads per node (default 16, at most 64)\n"
"  --seconds S         duration of each throughput figure (default 2)\n"
"  -h, --help          show this help\n");
}

/* Each node of list (--nodes, a comma-separated list of sockets, cut up
   in place: the sides point into it) as a hub side and a direct side.
   The number of nodes, or -1 after saying why not (none, or more than
   HB_MAX_NODES). */
static int
split_nodes(char *list, const struct hopts *o, struct side *hub,
            struct side *direct)
{
  char *tok, *save;
  int n = 0;

  for (tok = strtok_r(list, ",", &save); tok;
       tok = strtok_r(NULL, ",", &save)) {
    if (n == HB_MAX_NODES) {
      fprintf(stderr, "qrs-bench hub: at most %d nodes\n", HB_MAX_NODES);
      return -1;
    }
    hub[n].sock = direct[n].sock = tok;
    hub[n].source = o->source;
    direct[n++].source = o->direct;
  }
  if (n == 0) {
    fprintf(stderr, "qrs-bench hub: --nodes names no socket\n");
    return -1;
  }
  return n;
}

int
bench_hub(int argc, char **argv)
{
  struct hopts o = {
    .source = "hub",
    .direct = "direct",
    .draws = { .samples = 10000, .rounds = 5, .per_round = 500 },
    .clients = 16,
    .seconds = 2,
  };
  const struct cli_opt opts[] = {
    { .name = "nodes", .type = CLI_OPT_STRING, .field = &o.nodes },
    { .name = "source", .type = CLI_OPT_STRING, .field = &o.source },
    { .name = "direct", .type = CLI_OPT_STRING, .field = &o.direct },
    BENCH_ROUNDS_OPTS(&o.draws),
    { .name = "clients", .type = CLI_OPT_INT, .field = &o.clients },
    { .name = "seconds", .type = CLI_OPT_DOUBLE, .field = &o.seconds },
    BENCH_OPTS_END,
  };
  struct side hub[HB_MAX_NODES], direct[HB_MAX_NODES];
  struct qrs_client *c;
  struct lat lh, ld;
  char *list;
  double th, td, p50h, p99h, p50d, p99d;
  uint64_t fh, fd;
  int nn, i, k, r;

  r = bench_opts_parse(argc, argv, opts, usage);
  if (r >= 0)
    return r;
  if (!o.nodes) {
    fprintf(stderr, "qrs-bench hub: --nodes is required\n");
    usage(stderr);
    return 2;
  }
  if (bench_rounds_bad(&o.draws) ||
      o.clients < 1 || o.clients > HB_MAX_CLIENTS || o.seconds <= 0) {
    fprintf(stderr, "qrs-bench hub: bad option value\n");
    return 2;
  }
  list = strdup(o.nodes);
  if (!list) {
    perror("qrs-bench hub");
    return 1;
  }
  nn = split_nodes(list, &o, hub, direct);
  if (nn < 0) {
    free(list);
    return 2;
  }

  /* Latency through each node, hub against direct: warm both paths up
     (connections, streams, breakers), then alternate rounds on one
     client so that the machine's moods fall on both sides alike. */
  printf("qrs-bench hub: sample_count %u, %d x %d draws per side\n",
         o.draws.samples, o.draws.rounds, o.draws.per_round);
  printf("latency (one client, blocking; p50 / p99 in us):\n");
  for (k = 0; k < nn; k++) {
    c = bench_connect(hub[k].sock);
    lat_init(&lh, (size_t)o.draws.rounds * (size_t)o.draws.per_round);
    lat_init(&ld, (size_t)o.draws.rounds * (size_t)o.draws.per_round);
    lat_round(c, &hub[k], &o.draws, NULL);
    lat_round(c, &direct[k], &o.draws, NULL);
    for (i = 0; i < o.draws.rounds; i++) {
      lat_round(c, &hub[k], &o.draws, &lh);
      lat_round(c, &direct[k], &o.draws, &ld);
    }
    qrs_client_free(c);
    printf("  node %d:\n", k + 1);
    lat_print("node -> hub -> source", &lh);
    lat_print("node -> source", &ld);
    p50h = bench_lat_pct_us(&lh.total, 0.5);
    p99h = bench_lat_pct_us(&lh.total, 0.99);
    p50d = bench_lat_pct_us(&ld.total, 0.5);
    p99d = bench_lat_pct_us(&ld.total, 0.99);
    printf("    ratio through the hub/direct: p50 %.2fx  p99 %.2fx "
           "(target <= 1.3x)\n", p50h / p50d, p99h / p99d);
    lat_done(&lh);
    lat_done(&ld);
  }

  th = throughput(&o, hub, nn, nn * o.clients, &fh);
  td = throughput(&o, direct, nn, nn * o.clients, &fd);
  printf("throughput (%.1f s each, %d nodes x %d clients):\n", o.seconds,
         nn, o.clients);
  printf("  node -> hub -> source  %9.0f draws/s (%llu failed or fell "
         "back)\n", th, (unsigned long long)fh);
  printf("  node -> source         %9.0f draws/s (%llu failed or fell "
         "back)\n", td, (unsigned long long)fd);
  printf("  ratio through the hub/direct: %.2f\n", th / td);
  free(list);
  return fh || fd ? 1 : 0;
}
