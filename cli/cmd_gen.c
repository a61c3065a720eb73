/* cmd_gen.c - `deltacast gen`. */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>

static void dc_gen_help(FILE *fp)
{
    fprintf(fp,
            "Usage: deltacast gen --params N --change-rate R [--model optimizer|inject] [--seed S] [--dtype bf16] -o DIR\n"
            "\n"
            "Write DIR/base.safetensors and DIR/next.safetensors: a synthetic transformer-like\ncheckpoint pair whose change comes from an optimizer step (or injected noise).\n"
            "\n"
            "Options:\n"
            "  --params N               total parameters (e.g. 1e9)\n"
            "  --change-rate R          fraction of BF16 values that change (e.g. 0.01)\n"
            "  --model M                optimizer (default) or inject\n"
            "  --seed S                 random seed (default 1)\n"
            "  --dtype T                bf16 (default), f16, f32\n"
            "  -o, --output DIR         output directory (-o)\n"
            "  -h, --help               show this help\n");
}

int dc_cmd_gen(int argc, char **argv)
{
    static const struct option opts[] = {
        {"params", required_argument, NULL, 0},
        {"change-rate", required_argument, NULL, 0},
        {"model", required_argument, NULL, 0},
        {"seed", required_argument, NULL, 0},
        {"dtype", required_argument, NULL, 0},
        {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    optind = 1;
    int c;
    while ((c = dc_cli_getopt("gen", argc, argv, "ho:", opts)) != -1) {
        if (c == 'h') {
            dc_gen_help(stdout);
            return DC_EXIT_OK;
        }
        if (c == '?')
            return DC_EXIT_USAGE;
    }
    return dc_cli_not_implemented("gen");
}
