/* test_cli.c - the deltacast command's contract: help, version, usage
 * errors.  Runs the real binary (path in $DELTACAST_BIN). */
#include "testenv.h"
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

struct run_result {
    int code;
    char out[65536];
    char err[65536];
};

static void run(struct run_result *r, const char *args)
{
    const char *bin = dc_test_bin();
    cr_assert_not_null(bin, "DELTACAST_BIN not set");
    char cmd[1024];
    char eo[] = "/tmp/dc_cli_errXXXXXX";
    int efd = mkstemp(eo);
    cr_assert(efd >= 0);
    snprintf(cmd, sizeof(cmd), "'%s' %s 2>'%s'", bin, args, eo);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(r->out, 1, sizeof(r->out) - 1, p);
    r->out[n] = 0;
    int status = pclose(p);
    r->code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    FILE *e = fdopen(efd, "r");
    n = fread(r->err, 1, sizeof(r->err) - 1, e);
    r->err[n] = 0;
    fclose(e);
    unlink(eo);
}

static struct run_result R;

Test(cli, top_level_help)
{
    run(&R, "--help");
    cr_assert_eq(R.code, 0);
    const char *cmds[] = {"gen", "diff", "apply", "inspect", "plan", "node", "perf"};
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
        cr_assert(strstr(R.out, cmds[i]) != NULL, "help lacks %s", cmds[i]);
    cr_assert(strstr(R.out, "chunk_size") != NULL, "help lacks the config table");
    cr_assert_str_eq(R.err, "");
}

Test(cli, version)
{
    run(&R, "--version");
    cr_assert_eq(R.code, 0);
    cr_assert(strncmp(R.out, "deltacast ", 10) == 0, "%s", R.out);
    /* the kernel ISA in use and the ones this CPU runs (scalar always) */
    cr_assert(strstr(R.out, "\nkernels: ") != NULL, "%s", R.out);
    cr_assert(strstr(R.out, "(this CPU runs: scalar") != NULL, "%s", R.out);
}

Test(cli, no_arguments_is_usage_error)
{
    run(&R, "");
    cr_assert_eq(R.code, 2);
    cr_assert(strstr(R.err, "Usage") != NULL);
}

Test(cli, unknown_command_exits_2_with_one_clear_line)
{
    run(&R, "bogus");
    cr_assert_eq(R.code, 2);
    cr_assert(strstr(R.err, "unknown command 'bogus'") != NULL, "%s", R.err);
    cr_assert(strstr(R.err, "--help") != NULL);
    cr_assert_str_eq(R.out, "");
}

Test(cli, every_subcommand_has_help)
{
    const char *cmds[] = {"gen", "diff", "apply", "inspect", "plan", "node", "perf", "demo",
                          "info"};
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        char a[64];
        snprintf(a, sizeof(a), "%s --help", cmds[i]);
        run(&R, a);
        cr_assert_eq(R.code, 0, "%s --help exit %d", cmds[i], R.code);
        cr_assert(strstr(R.out, "Usage: deltacast ") != NULL, "%s", cmds[i]);
        cr_assert(strstr(R.out, cmds[i]) != NULL);
    }
}

Test(cli, diff_help_names_its_options)
{
    run(&R, "diff --help");
    cr_assert_eq(R.code, 0);
    cr_assert(strstr(R.out, "--chunk-size") != NULL);
    cr_assert(strstr(R.out, "--threads") != NULL);
    cr_assert(strstr(R.out, "-o") != NULL);
}

Test(cli, bad_flag_exits_2)
{
    run(&R, "diff --frobnicate");
    cr_assert_eq(R.code, 2);
    cr_assert(strstr(R.err, "unknown option '--frobnicate'") != NULL, "%s", R.err);
    run(&R, "--frobnicate");
    cr_assert_eq(R.code, 2);
}

Test(cli, help_subcommand)
{
    run(&R, "help apply");
    cr_assert_eq(R.code, 0);
    cr_assert(strstr(R.out, "deltacast apply") != NULL);
}
