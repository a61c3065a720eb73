/* cmd_perf.c - `deltacast perf`. */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>

static void dc_perf_help(FILE *fp)
{
    fprintf(fp,
            "Usage: deltacast perf link|codec|refit [options]\n"
            "\n"
            "Measure link bandwidth and latency, codec throughput and ratio, or an end-to-end refit.\n"
            "\n"
            "Options:\n"
            "  --json                   machine-readable output\n"
            "  -h, --help               show this help\n");
}

int dc_cmd_perf(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 0},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    optind = 1;
    int c;
    while ((c = dc_cli_getopt("perf", argc, argv, "h", opts)) != -1) {
        if (c == 'h') {
            dc_perf_help(stdout);
            return DC_EXIT_OK;
        }
        if (c == '?')
            return DC_EXIT_USAGE;
    }
    return dc_cli_not_implemented("perf");
}
