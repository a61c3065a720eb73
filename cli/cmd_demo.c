/* cmd_demo.c - `deltacast demo`: the README's main job, a local refit. */
#include "cli.h"
#include "perf/perf.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

static void dc_demo_help(FILE *fp)
{
    fprintf(fp,
            "Usage: deltacast demo [--params P] [--regions R] [--receivers N] [--versions K]\n"
            "                      [--wan-rate RATE] [--model optimizer|inject]\n"
            "\n"
            "Run a local refit demo: a synthetic BF16 model, a trainer and N receivers in R\n"
            "regions on this machine (network namespaces joined by tbf-shaped veth links when\n"
            "run as root, loopback otherwise), K consecutive versions sent as deltas over the\n"
            "relay tree with the joint commit, then the same versions sent dense for\n"
            "comparison.  Shows progress, then a table: time, bytes, speedup vs dense,\n"
            "bit-exact yes/no (every receiver byte-compared with the trainer).\n"
            "\n"
            "Options:\n"
            "  --params P               model size (default 3e7)\n"
            "  --regions R              receiver regions (default 3)\n"
            "  --receivers N            receivers (default 6)\n"
            "  --versions K             consecutive versions (default 3)\n"
            "  --wan-rate RATE          emulated WAN rate per region (default 200mbit)\n"
            "  --model M                optimizer (default) or inject\n"
            "  --change-rate C          fraction changing per version (default 0.01)\n"
            "  -h, --help               show this help\n");
}

int dc_cmd_demo(int argc, char **argv)
{
    static const struct option opts[] = {
        {"params", required_argument, NULL, 'p'},
        {"regions", required_argument, NULL, 'r'},
        {"receivers", required_argument, NULL, 'n'},
        {"versions", required_argument, NULL, 'k'},
        {"wan-rate", required_argument, NULL, 'w'},
        {"model", required_argument, NULL, 'm'},
        {"change-rate", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *params = "3e7", *regions = "3", *receivers = "6", *versions = "3",
               *wan = "200mbit", *model = "optimizer", *rate = "0.01";
    optind = 1;
    int c;
    while ((c = dc_cli_getopt("demo", argc, argv, "h", opts)) != -1) {
        switch (c) {
        case 'h':
            dc_demo_help(stdout);
            return DC_EXIT_OK;
        case 'p': params = optarg; break;
        case 'r': regions = optarg; break;
        case 'n': receivers = optarg; break;
        case 'k': versions = optarg; break;
        case 'w': wan = optarg; break;
        case 'm': model = optarg; break;
        case 'c': rate = optarg; break;
        default:
            return DC_EXIT_USAGE;
        }
    }
    if (optind < argc)
        return dc_cli_usage_error("demo", "unexpected argument '%s'", argv[optind]);
    char *av[] = {"refit",     "--demo",         "--params",   (char *)params,
                  "--regions", (char *)regions,  "--receivers", (char *)receivers,
                  "--versions", (char *)versions, "--wan-rate", (char *)wan,
                  "--model",   (char *)model,    "--change-rate", (char *)rate,
                  NULL};
    return dc_cmd_perf_refit((int)(sizeof(av) / sizeof(av[0])) - 1, av);
}
