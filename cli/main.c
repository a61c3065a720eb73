/* main.c - the deltacast command: subcommand dispatch, --help, --version. */
#include "cli.h"
#include "kernels/kern.h"
#include "util/dc_util.h"

#include <stdlib.h>
#include <string.h>

static const dc_cli_cmd_t dc_cli_cmds[] = {
    {"gen", dc_cmd_gen, "write a synthetic base/next checkpoint pair"},
    {"diff", dc_cmd_diff, "encode the delta between two checkpoints"},
    {"apply", dc_cmd_apply, "apply a delta to a checkpoint, bit-exactly"},
    {"inspect", dc_cmd_inspect, "show what a delta or checkpoint holds"},
    {"plan", dc_cmd_plan, "print (and simulate) the relay tree of a topology"},
    {"node", dc_cmd_node, "run one process (root, relay, receiver) of a refit job"},
    {"perf", dc_cmd_perf, "measure links, the codec, or an end-to-end refit"},
    {"demo", dc_cmd_demo, "run a local refit demo on this machine"},
    {"info", dc_cmd_info, "list usable transports and devices, and why (like ucx_info -d)"},
};

static void dc_cli_main_usage(FILE *fp)
{
    fprintf(fp,
            "Usage: deltacast <command> [options]\n"
            "       deltacast --help | --version\n"
            "\n"
            "Bit-exact delta refit of model weights over a topology-aware relay tree.\n"
            "\n"
            "Commands:\n");
    for (size_t i = 0; i < sizeof(dc_cli_cmds) / sizeof(dc_cli_cmds[0]); i++)
        fprintf(fp, "  %-9s %s\n", dc_cli_cmds[i].name, dc_cli_cmds[i].summary);
    fprintf(fp,
            "\n"
            "Run 'deltacast <command> --help' for a command's options.\n"
            "Exit status: 0 success, 1 failure (one line on stderr says why), 2 usage error.\n"
            "\n");
    dc_config_print(fp);
    fprintf(fp, "\nBuilt with: %s\n", dc_build_features());
}

int main(int argc, char **argv)
{
    /* a mapped file that faults (util/file.c) gets a line naming it */
    (void)dc_file_sigbus_install();
    const char *lvl = dc_config_get("log"); /* DELTACAST_LOG */
    if (lvl && *lvl) {
        dc_log_level_t l;
        if (dc_log_level_parse(lvl, &l) == DC_OK)
            dc_log_set_level(l);
    }
    dc_env_check(); /* a DELTACAST_* typo: one warning naming the closest */
    if (argc < 2) {
        dc_cli_main_usage(stderr);
        return DC_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        if (strcmp(cmd, "help") == 0 && argc > 2) {
            for (size_t i = 0; i < sizeof(dc_cli_cmds) / sizeof(dc_cli_cmds[0]); i++) {
                if (strcmp(argv[2], dc_cli_cmds[i].name) == 0) {
                    char *hargv[] = {argv[2], "--help", NULL};
                    return dc_cli_cmds[i].fn(2, hargv);
                }
            }
            return dc_cli_usage_error(NULL, "unknown command '%s'", argv[2]);
        }
        dc_cli_main_usage(stdout);
        return DC_EXIT_OK;
    }
    if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        printf("deltacast %s (%s)\n", dc_version_string(), dc_build_features());
        /* the kernel ISAs: the one in use (DELTACAST_KERN_ISA lowers it) and
         * every one this CPU and build run */
        printf("kernels: %s (this CPU runs:", dc_kern_isa());
        static const char *const isas[] = {"scalar", "avx2", "avx512"};
        for (size_t i = 0; i < sizeof(isas) / sizeof(isas[0]); i++)
            if (dc_kern_isa_supported(isas[i]))
                printf(" %s", isas[i]);
        printf(")\n");
        return DC_EXIT_OK;
    }
    if (cmd[0] == '-')
        return dc_cli_usage_error(NULL, "unknown option '%s' (a command comes first)", cmd);
    for (size_t i = 0; i < sizeof(dc_cli_cmds) / sizeof(dc_cli_cmds[0]); i++)
        if (strcmp(cmd, dc_cli_cmds[i].name) == 0)
            return dc_cli_cmds[i].fn(argc - 1, argv + 1);
    return dc_cli_usage_error(NULL, "unknown command '%s'", cmd);
}
