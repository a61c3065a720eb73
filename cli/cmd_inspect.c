/* cmd_inspect.c - `deltacast inspect`. */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>

static void dc_inspect_help(FILE *fp)
{
    fprintf(fp,
            "Usage: deltacast inspect FILE [--json]\n"
            "\n"
            "Show what a delta or a safetensors checkpoint holds.\n"
            "\n"
            "Options:\n"
            "  --json                   machine-readable output\n"
            "  -h, --help               show this help\n");
}

int dc_cmd_inspect(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 0},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    optind = 1;
    int c;
    while ((c = dc_cli_getopt("inspect", argc, argv, "h", opts)) != -1) {
        if (c == 'h') {
            dc_inspect_help(stdout);
            return DC_EXIT_OK;
        }
        if (c == '?')
            return DC_EXIT_USAGE;
    }
    return dc_cli_not_implemented("inspect");
}
