/*
 * perf.h - the `deltacast perf <what>` benchmarks (perf/perf_*.c), which
 * the command's `perf` subcommand (cmd_perf.c) dispatches to.  argv[0] is
 * "<what>"; each returns an exit code (testkit/cmdline.h DC_EXIT_*).
 */
#ifndef DC_PERF_PERF_H
#define DC_PERF_PERF_H

int dc_cmd_perf_link(int argc, char **argv);
int dc_cmd_perf_codec(int argc, char **argv);
int dc_cmd_perf_refit(int argc, char **argv);
int dc_cmd_perf_soak(int argc, char **argv);

#endif /* DC_PERF_PERF_H */
