/* cmd_diff.c - `deltacast diff`. */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>

static void dc_diff_help(FILE *fp)
{
    fprintf(fp,
            "Usage: deltacast diff BASE NEXT -o DELTA [--threads T] [--chunk-size S]\n"
            "\n"
            "Encode the delta that turns checkpoint BASE into NEXT, bit-exactly.\n"
            "\n"
            "Options:\n"
            "  -o, --output DELTA       delta file to write (-o)\n"
            "  --threads T              worker threads (default: all CPUs)\n"
            "  --chunk-size S           dense bytes per chunk (default 4MiB)\n"
            "  --json                   print figures as JSON\n"
            "  -h, --help               show this help\n");
}

int dc_cmd_diff(int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'},
        {"threads", required_argument, NULL, 0},
        {"chunk-size", required_argument, NULL, 0},
        {"json", no_argument, NULL, 0},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    optind = 1;
    int c;
    while ((c = dc_cli_getopt("diff", argc, argv, "ho:", opts)) != -1) {
        if (c == 'h') {
            dc_diff_help(stdout);
            return DC_EXIT_OK;
        }
        if (c == '?')
            return DC_EXIT_USAGE;
    }
    return dc_cli_not_implemented("diff");
}
