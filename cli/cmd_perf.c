/* cmd_perf.c - `deltacast perf link|codec|refit|soak`: dispatch to perf/. */
#include "cli.h"
#include "perf/perf.h"

#include <stdio.h>
#include <string.h>

static void dc_perf_help(FILE *fp)
{
    fprintf(fp,
            "Usage: deltacast perf link|codec|refit|soak [options]\n"
            "\n"
            "Measure link bandwidth and latency, codec throughput and ratio, or an\n"
            "end-to-end refit.  Figures are medians of several runs, printed next to\n"
            "a baseline measured in the same run; --json for machine-readable output.\n"
            "\n"
            "Benchmarks:\n"
            "  link     goodput, message rate and latency of a transport (like iperf3):\n"
            "           per-interval reports (-i), reverse (-R), both directions (--bidir),\n"
            "           a message-size sweep (-a, like ib_write_bw -a)\n"
            "  codec    delta size vs entropy bound, encode/apply throughput\n"
            "  refit    a whole refit job on this machine, delta vs dense\n"
            "  soak     a refit job for N versions under injected faults (kills, WAN cuts,\n"
            "           corruption, stalls, restarts), every receiver byte-checked\n"
            "\n"
            "Run 'deltacast perf <benchmark> --help' for its options.\n");
}

int dc_cmd_perf(int argc, char **argv)
{
    if (argc < 2) {
        dc_perf_help(stderr);
        return DC_EXIT_USAGE;
    }
    const char *what = argv[1];
    if (strcmp(what, "-h") == 0 || strcmp(what, "--help") == 0) {
        dc_perf_help(stdout);
        return DC_EXIT_OK;
    }
    if (strcmp(what, "link") == 0)
        return dc_cmd_perf_link(argc - 1, argv + 1);
    if (strcmp(what, "codec") == 0)
        return dc_cmd_perf_codec(argc - 1, argv + 1);
    if (strcmp(what, "refit") == 0)
        return dc_cmd_perf_refit(argc - 1, argv + 1);
    if (strcmp(what, "soak") == 0)
        return dc_cmd_perf_soak(argc - 1, argv + 1);
    return dc_cli_usage_error("perf", "unknown benchmark '%s' (link, codec, refit, soak)", what);
}
