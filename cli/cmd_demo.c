/* cmd_demo.c - `deltacast demo`. */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>

static void dc_demo_help(FILE *fp)
{
    fprintf(fp,
            "Usage: deltacast demo [--params P] [--regions R] [--receivers N] [--versions K]\n"
            "\n"
            "Run a local refit demo: a synthetic model, receivers in several regions, consecutive versions.\n"
            "\n"
            "Options:\n"
            "  --params P               model size\n"
            "  --regions R              receiver regions\n"
            "  --receivers N            receivers\n"
            "  --versions K             consecutive versions\n"
            "  -h, --help               show this help\n");
}

int dc_cmd_demo(int argc, char **argv)
{
    static const struct option opts[] = {
        {"params", required_argument, NULL, 0},
        {"regions", required_argument, NULL, 0},
        {"receivers", required_argument, NULL, 0},
        {"versions", required_argument, NULL, 0},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    optind = 1;
    int c;
    while ((c = dc_cli_getopt("demo", argc, argv, "h", opts)) != -1) {
        if (c == 'h') {
            dc_demo_help(stdout);
            return DC_EXIT_OK;
        }
        if (c == '?')
            return DC_EXIT_USAGE;
    }
    return dc_cli_not_implemented("demo");
}
