/* qrs-bench: benchmarks that print figures (never tests).

   qrs-bench draw [options]     daemon round trips against the floor
   qrs-bench select [options]   token selection against the floor
   qrs-bench local [options]    local noise mechanisms and timing source
   qrs-bench grpc [options]     draws through a gRPC upstream against the
                                direct gRPC call
   qrs-bench budgets [options]  qrsd's start-up and idle budgets
   qrs-bench journal [options]  draws with the draw journal against
                                without it; qrs-audit's rate
   qrs-bench hub [options]      draws through nodes and a TLS hub against
                                the hub's source alone */
#include <stdio.h>
#include <string.h>

#include "bench.h"

static void
usage(FILE *f)
{
  fprintf(f,
          "Usage: qrs-bench draw [OPTIONS]\n"
          "       qrs-bench select [OPTIONS]\n"
          "       qrs-bench local [OPTIONS] [MECHANISM...]\n"
          "       qrs-bench grpc [OPTIONS]\n"
          "       qrs-bench budgets [OPTIONS]\n"
          "       qrs-bench journal [OPTIONS]\n"
          "       qrs-bench hub --hub SOCKET --nodes LIST [OPTIONS]\n"
          "\n"
          "Benchmarks that print their figures next to a floor measured in\n"
          "the same run, and the ratio of the two.  Run a subcommand with\n"
          "--help for its options.\n");
}

static const struct {
  const char *name;
  int (*run)(int argc, char **argv);
} benchmarks[] = {
  { "draw", bench_draw },
  { "local", bench_local },
  { "select", bench_select },
  { "grpc", bench_grpc },
  { "budgets", bench_budgets },
  { "journal", bench_journal },
  { "hub", bench_hub },
};

int
main(int argc, char **argv)
{
  size_t i;

  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
    usage(stdout);
    return 0;
  }
  for (i = 0; i < sizeof(benchmarks) / sizeof(benchmarks[0]); i++)
    if (!strcmp(argv[1], benchmarks[i].name))
      return benchmarks[i].run(argc - 1, argv + 1);
  fprintf(stderr, "qrs-bench: unknown benchmark '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
