/* qrs-bench subcommands.  Each prints its figures to stdout and returns an
   exit status. */
#ifndef QRS_BENCH_H
#define QRS_BENCH_H

int bench_draw(int argc, char **argv);
int bench_local(int argc, char **argv);
int bench_select(int argc, char **argv);
int bench_grpc(int argc, char **argv);

#endif
