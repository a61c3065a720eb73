/* cli.h - the deltacast command's subcommands (the helpers they share with
 * perf/ are in testkit/cmdline.h). */
#ifndef DC_CLI_H
#define DC_CLI_H

#include "deltacast.h"
#include "testkit/cmdline.h"

#include <stdbool.h>
#include <stdio.h>

/* A subcommand: `argv[0]` is the subcommand's name. Returns an exit code. */
typedef int (*dc_cli_fn)(int argc, char **argv);

typedef struct dc_cli_cmd {
    const char *name;
    dc_cli_fn fn;
    const char *summary;
} dc_cli_cmd_t;

int dc_cmd_gen(int argc, char **argv);
int dc_cmd_diff(int argc, char **argv);
int dc_cmd_apply(int argc, char **argv);
int dc_cmd_inspect(int argc, char **argv);
int dc_cmd_plan(int argc, char **argv);
int dc_cmd_node(int argc, char **argv);
int dc_cmd_perf(int argc, char **argv);
int dc_cmd_demo(int argc, char **argv);
int dc_cmd_info(int argc, char **argv);

#endif /* DC_CLI_H */
