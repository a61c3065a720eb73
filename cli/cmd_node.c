/* cmd_node.c - `deltacast node`. */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>

static void dc_node_help(FILE *fp)
{
    fprintf(fp,
            "Usage: deltacast node --role root|relay|receiver [options]\n"
            "\n"
            "Run one process of a refit job (rank from Slurm, MPI or flags).\n"
            "\n"
            "Options:\n"
            "  --role R                 root, relay or receiver\n"
            "  --rank N                 this process's rank\n"
            "  --topology FILE          topology file\n"
            "  --listen ADDR:PORT       address to listen on\n"
            "  -h, --help               show this help\n");
}

int dc_cmd_node(int argc, char **argv)
{
    static const struct option opts[] = {
        {"role", required_argument, NULL, 0},
        {"rank", required_argument, NULL, 0},
        {"topology", required_argument, NULL, 0},
        {"listen", required_argument, NULL, 0},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    optind = 1;
    int c;
    while ((c = dc_cli_getopt("node", argc, argv, "h", opts)) != -1) {
        if (c == 'h') {
            dc_node_help(stdout);
            return DC_EXIT_OK;
        }
        if (c == '?')
            return DC_EXIT_USAGE;
    }
    return dc_cli_not_implemented("node");
}
