/* qrs-bench hub: draws through node qrsd whose source is a hub qrsd over
   TLS gRPC (node -> hub -> the hub's source), against draws of the same
   size from the hub's source alone (a client on the hub's own socket),
   measured in the same run against running daemons (tests/integration/
   hub.sh --bench starts them: a hub with TLS and api keys, three nodes).

   Latency: one client, alternating rounds of the two paths, p50 and p99
   and their ratio, through each node in turn.  Throughput: CLIENTS client threads on each node
   (NODES x CLIENTS in all) for --seconds, against as many client threads
   on the hub's socket drawing from its source alone. */
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
  const char *hub, *nodes, *source, *hub_source;
  uint32_t samples;
  int rounds, per_round, clients;
  double seconds;
};

/* One side of a figure: a socket and the source drawn there. */
struct side {
  const char *sock, *source;
};

struct worker {
  struct side s;
  uint32_t samples;
  int64_t end;
  uint64_t count, failed;
  pthread_t th;
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

/* n timed draws on c from s into l; a failed or fallback draw stops the
   benchmark (it would measure the fallback). */
static void
lat_round(struct qrs_client *c, const struct side *s, uint32_t samples,
          int n, struct bench_lat *l)
{
  struct qrs_draw d;
  int64_t t0;
  int i, r;

  for (i = 0; i < n; i++) {
    t0 = mono_now_ns();
    r = draw_once(c, s, samples, &d);
    if (r < 0 || d.fallback) {
      fprintf(stderr, "qrs-bench hub: draw from '%s' on %s: %s\n",
              s->source, s->sock, r < 0 ? qrs_strerror(r)
                                        : "served by the fallback");
      exit(1);
    }
    if (l)
      bench_lat_add(l, mono_now_ns() - t0);
  }
}

static struct qrs_client *
connect_or_die(const char *sock)
{
  struct qrs_client *c;
  int r;

  r = qrs_client_new(sock, NULL, &c);
  if (r < 0) {
    fprintf(stderr, "qrs-bench hub: cannot connect to %s: %s\n", sock,
            qrs_strerror(r));
    exit(1);
  }
  return c;
}

static void *
worker_main(void *arg)
{
  struct worker *w = arg;
  struct qrs_client *c;
  struct qrs_draw d;

  if (qrs_client_new(w->s.sock, NULL, &c) < 0) {
    w->failed++;
    return NULL;
  }
  while (mono_now_ns() < w->end) {
    if (draw_once(c, &w->s, w->samples, &d) < 0 || d.fallback)
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
  static struct worker w[HB_MAX_NODES * HB_MAX_CLIENTS];
  uint64_t total = 0;
  int64_t start;
  int i;

  start = mono_now_ns();
  for (i = 0; i < n; i++) {
    memset(&w[i], 0, sizeof(w[i]));
    w[i].s = sides[i % nsides];
    w[i].samples = o->samples;
    w[i].end = start + (int64_t)(o->seconds * 1e9);
    pthread_create(&w[i].th, NULL, worker_main, &w[i]);
  }
  *failed = 0;
  for (i = 0; i < n; i++) {
    pthread_join(w[i].th, NULL);
    total += w[i].count;
    *failed += w[i].failed;
  }
  return (double)total / ((double)(mono_now_ns() - start) / 1e9);
}

static void
usage(FILE *f)
{
  fprintf(f,
"Usage: qrs-bench hub --hub SOCKET --nodes SOCKET[,SOCKET...] [OPTIONS]\n"
"\n"
"Draws through node qrsd whose source is a hub qrsd over TLS gRPC (node\n"
"-> hub -> the hub's source) against draws of the same size from the\n"
"hub's source alone (on the hub's own socket), in the same run: one\n"
"client's p50/p99 latency in alternating rounds, and the draws/s of\n"
"CLIENTS clients on every node against as many on the hub alone.  The\n"
"daemons must be running: tests/integration/hub.sh --bench starts a hub\n"
"with TLS and api keys and three nodes, and runs this.\n"
"\n"
"Options:\n"
"  --hub SOCKET        the hub qrsd's socket\n"
"  --nodes LIST        the nodes' sockets, comma-separated (at most 8)\n"
"  --source NAME       the nodes' source that is the hub (default hub)\n"
"  --hub-source NAME   the hub's source (default: its default source)\n"
"  --samples N         bytes per draw (default 10000)\n"
"  --rounds N          alternating latency rounds per node (default 5)\n"
"  --per-round N       draws per round and side (default 500)\n"
"  --clients N         client threads per node (default 16, at most 64)\n"
"  --seconds S         duration of each throughput figure (default 2)\n"
"  -h, --help          show this help\n");
}

int
bench_hub(int argc, char **argv)
{
  struct hopts o;
  const struct cli_opt opts[] = {
    { .name = "hub", .type = CLI_OPT_STRING, .field = &o.hub },
    { .name = "nodes", .type = CLI_OPT_STRING, .field = &o.nodes },
    { .name = "source", .type = CLI_OPT_STRING, .field = &o.source },
    { .name = "hub-source", .type = CLI_OPT_STRING, .field = &o.hub_source },
    { .name = "samples", .type = CLI_OPT_U32, .field = &o.samples },
    { .name = "rounds", .type = CLI_OPT_INT, .field = &o.rounds },
    { .name = "per-round", .type = CLI_OPT_INT, .field = &o.per_round },
    { .name = "clients", .type = CLI_OPT_INT, .field = &o.clients },
    { .name = "seconds", .type = CLI_OPT_DOUBLE, .field = &o.seconds },
    { .name = "help", .key = 'h', .type = CLI_OPT_HELP },
    { 0 },
  };
  struct side nodes[HB_MAX_NODES], hub;
  struct qrs_client *cn, *ch;
  struct bench_lat ln, lh;
  char *list, *tok, *save;
  double tn, th, p50n, p99n, p50h, p99h;
  uint64_t fn, fh;
  int nn = 0, i, k, r;

  memset(&o, 0, sizeof(o));
  o.source = "hub";
  o.samples = 10000;
  o.rounds = 5;
  o.per_round = 500;
  o.clients = 16;
  o.seconds = 2;
  r = bench_opts_parse(argc, argv, opts, usage);
  if (r >= 0)
    return r;
  if (!o.hub || !o.nodes) {
    fprintf(stderr, "qrs-bench hub: --hub and --nodes are required\n");
    usage(stderr);
    return 2;
  }
  if (o.samples == 0 || o.rounds < 1 || o.per_round < 10 ||
      o.clients < 1 || o.clients > HB_MAX_CLIENTS || o.seconds <= 0) {
    fprintf(stderr, "qrs-bench hub: bad option value\n");
    return 2;
  }
  list = strdup(o.nodes);
  if (!list) {
    perror("qrs-bench hub");
    return 1;
  }
  for (tok = strtok_r(list, ",", &save); tok;
       tok = strtok_r(NULL, ",", &save)) {
    if (nn == HB_MAX_NODES) {
      fprintf(stderr, "qrs-bench hub: at most %d nodes\n", HB_MAX_NODES);
      free(list);
      return 2;
    }
    nodes[nn].sock = tok;
    nodes[nn++].source = o.source;
  }
  if (nn == 0) {
    fprintf(stderr, "qrs-bench hub: --nodes names no socket\n");
    free(list);
    return 2;
  }
  hub.sock = o.hub;
  hub.source = o.hub_source;

  /* Latency through each node against the hub alone: warm both paths
     up (connections, streams, breakers), then alternate rounds so that
     the machine's moods fall on both sides alike. */
  printf("qrs-bench hub: sample_count %u, %d x %d draws per side\n",
         o.samples, o.rounds, o.per_round);
  printf("latency (one client, blocking; p50 / p99 in us):\n");
  for (k = 0; k < nn; k++) {
    cn = connect_or_die(nodes[k].sock);
    ch = connect_or_die(hub.sock);
    bench_lat_init(&ln, (size_t)o.rounds * (size_t)o.per_round);
    bench_lat_init(&lh, (size_t)o.rounds * (size_t)o.per_round);
    lat_round(cn, &nodes[k], o.samples, o.per_round, NULL);
    lat_round(ch, &hub, o.samples, o.per_round, NULL);
    for (i = 0; i < o.rounds; i++) {
      lat_round(cn, &nodes[k], o.samples, o.per_round, &ln);
      lat_round(ch, &hub, o.samples, o.per_round, &lh);
    }
    qrs_client_free(cn);
    qrs_client_free(ch);
    bench_lat_sort(&ln);
    bench_lat_sort(&lh);
    p50n = bench_lat_pct_us(&ln, 0.5);
    p99n = bench_lat_pct_us(&ln, 0.99);
    p50h = bench_lat_pct_us(&lh, 0.5);
    p99h = bench_lat_pct_us(&lh, 0.99);
    printf("  node %d: node -> hub -> source %7.1f / %8.1f   hub's source "
           "alone %7.1f / %7.1f   ratio p50 %.2fx  p99 %.2fx\n", k + 1,
           p50n, p99n, p50h, p99h, p50n / p50h, p99n / p99h);
    bench_lat_done(&ln);
    bench_lat_done(&lh);
  }

  tn = throughput(&o, nodes, nn, nn * o.clients, &fn);
  th = throughput(&o, &hub, 1, nn * o.clients, &fh);
  printf("throughput (%.1f s each, %d clients):\n", o.seconds,
         nn * o.clients);
  printf("  %d nodes x %d clients through the hub  %9.0f draws/s "
         "(%llu failed or fell back)\n", nn, o.clients, tn,
         (unsigned long long)fn);
  printf("  the hub's source alone              %9.0f draws/s "
         "(%llu failed)\n", th, (unsigned long long)fh);
  printf("  ratio through the hub/alone: %.2f\n", tn / th);
  free(list);
  return fn || fh ? 1 : 0;
}
