/* cmd_plan.c - `deltacast plan`. */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>

static void dc_plan_help(FILE *fp)
{
    fprintf(fp,
            "Usage: deltacast plan (--topology FILE | --synthetic R:N[:WAN[:LAN]]) [--json|--dot] [--simulate --params P --change-rate R]\n"
            "\n"
            "Build the relay tree of a topology and print it; optionally simulate a refit over it.\n"
            "\n"
            "Options:\n"
            "  --topology FILE          topology file\n"
            "  --synthetic SPEC         R receiver regions of N nodes plus a trainer region\n"
            "  --json                   JSON output\n"
            "  --dot                    graphviz DOT output\n"
            "  --simulate               flow-level simulation of a refit\n"
            "  --params P               parameters for --simulate\n"
            "  --change-rate R          change rate for --simulate\n"
            "  --encode-gbps X          per-node encode throughput\n"
            "  -h, --help               show this help\n");
}

int dc_cmd_plan(int argc, char **argv)
{
    static const struct option opts[] = {
        {"topology", required_argument, NULL, 0},
        {"synthetic", required_argument, NULL, 0},
        {"json", no_argument, NULL, 0},
        {"dot", no_argument, NULL, 0},
        {"simulate", no_argument, NULL, 0},
        {"params", required_argument, NULL, 0},
        {"change-rate", required_argument, NULL, 0},
        {"encode-gbps", required_argument, NULL, 0},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    optind = 1;
    int c;
    while ((c = dc_cli_getopt("plan", argc, argv, "h", opts)) != -1) {
        if (c == 'h') {
            dc_plan_help(stdout);
            return DC_EXIT_OK;
        }
        if (c == '?')
            return DC_EXIT_USAGE;
    }
    return dc_cli_not_implemented("plan");
}
