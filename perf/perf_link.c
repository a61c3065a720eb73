/* perf_link.c - `deltacast perf link`. */
#include "cli/cli.h"
#include "perf/harness.h"

#include <getopt.h>
#include <stdio.h>

static void dc_perf_link_help(FILE *fp)
{
    fprintf(fp, "Usage: deltacast perf link [options]\n\n(not implemented yet)\n");
}

int dc_cmd_perf_link(int argc, char **argv)
{
    if (dc_cli_wants_help(argc, argv)) {
        dc_perf_link_help(stdout);
        return DC_EXIT_OK;
    }
    return dc_cli_not_implemented("perf link");
}
