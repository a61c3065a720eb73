/* cmd_apply.c - `deltacast apply`. */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>

static void dc_apply_help(FILE *fp)
{
    fprintf(fp,
            "Usage: deltacast apply BASE DELTA -o OUT | --in-place\n"
            "\n"
            "Apply DELTA to BASE; OUT is bit-identical to the NEXT the delta was made from.\n"
            "\n"
            "Options:\n"
            "  -o, --output OUT         file to write (-o), atomically\n"
            "  --in-place               apply to BASE itself\n"
            "  --threads T              worker threads\n"
            "  --json                   print figures as JSON\n"
            "  -h, --help               show this help\n");
}

int dc_cmd_apply(int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'},
        {"in-place", no_argument, NULL, 0},
        {"threads", required_argument, NULL, 0},
        {"json", no_argument, NULL, 0},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    optind = 1;
    int c;
    while ((c = dc_cli_getopt("apply", argc, argv, "ho:", opts)) != -1) {
        if (c == 'h') {
            dc_apply_help(stdout);
            return DC_EXIT_OK;
        }
        if (c == '?')
            return DC_EXIT_USAGE;
    }
    return dc_cli_not_implemented("apply");
}
