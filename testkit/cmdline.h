/*
 * cmdline.h - command-line helpers shared by the `deltacast` subcommands
 * (cli/) and the `deltacast perf` benchmarks (perf/): exit codes, usage and
 * failure messages, option parsing.  Part of libdctestkit, not of
 * libdeltacast: they print "deltacast CMD: ..." lines for the command.
 */
#ifndef DC_TESTKIT_CMDLINE_H
#define DC_TESTKIT_CMDLINE_H

#include "deltacast.h"

#include <stdbool.h>
#include <stdio.h>

/* Exit codes of every subcommand. */
enum {
    DC_EXIT_OK = 0,
    DC_EXIT_FAIL = 1,   /* the operation failed (one line on stderr says why) */
    DC_EXIT_USAGE = 2,  /* bad command line */
};

/* Print "deltacast CMD: <message>" and "Try 'deltacast CMD --help'." on
 * stderr; returns DC_EXIT_USAGE. */
int dc_cli_usage_error(const char *cmd, const char *fmt, ...) DC_PRINTF(2, 3);

/* Print "deltacast CMD: error: <message>: <dc_last_error()>" on stderr (one
 * line) and return DC_EXIT_FAIL. `fmt` may be NULL. */
int dc_cli_fail(const char *cmd, dc_status_t st, const char *fmt, ...) DC_PRINTF(3, 4);


/* True when argv has -h or --help (before any "--"). */
bool dc_cli_wants_help(int argc, char **argv);

/* Standard getopt_long error handling wrapper: parses a size/rate/number
 * option and reports a usage error naming the option on failure. */
bool dc_cli_parse_size(const char *cmd, const char *opt, const char *arg, uint64_t *out);
bool dc_cli_parse_u64(const char *cmd, const char *opt, const char *arg, uint64_t *out);
bool dc_cli_parse_double(const char *cmd, const char *opt, const char *arg, double *out);

/* getopt_long with deltacast's error reporting: returns the option, -1 at
 * the end, or '?' after printing a usage error naming the bad option (the
 * caller then returns DC_EXIT_USAGE).  Call with optind reset to 1 before
 * the first call; opterr is turned off. */
struct option;
int dc_cli_getopt(const char *cmd, int argc, char **argv, const char *shortopts,
                  const struct option *longopts);

/* True when stderr is a terminal (for live progress lines). */
bool dc_cli_is_tty(void);

#endif /* DC_TESTKIT_CMDLINE_H */
