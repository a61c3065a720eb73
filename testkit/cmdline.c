/* cmdline.c - error printing and option parsing shared by the subcommands
 * (cli/) and the perf benchmarks (perf/). */
#include "testkit/cmdline.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int dc_cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "deltacast%s%s: ", cmd ? " " : "", cmd ? cmd : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'deltacast%s%s --help'.\n", cmd ? " " : "", cmd ? cmd : "");
    return DC_EXIT_USAGE;
}

int dc_cli_fail(const char *cmd, dc_status_t st, const char *fmt, ...)
{
    fprintf(stderr, "deltacast %s: error: ", cmd);
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
    }
    const char *detail = dc_last_error();
    if (detail && *detail)
        fprintf(stderr, "%s%s\n", fmt ? ": " : "", detail);
    else
        fprintf(stderr, "%s%s\n", fmt ? ": " : "", dc_status_str(st));
    return DC_EXIT_FAIL;
}

bool dc_cli_wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return false;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
            return true;
    }
    return false;
}

bool dc_cli_parse_size(const char *cmd, const char *opt, const char *arg, uint64_t *out)
{
    if (dc_parse_size(arg, out) != DC_OK) {
        dc_cli_usage_error(cmd, "%s: %s", opt, dc_last_error());
        return false;
    }
    return true;
}

bool dc_cli_parse_u64(const char *cmd, const char *opt, const char *arg, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!arg || !*arg || *arg == '-') {
        dc_cli_usage_error(cmd, "%s: '%s' is not a non-negative integer", opt, arg ? arg : "");
        return false;
    }
    unsigned long long v = strtoull(arg, &end, 0);
    if (errno || *end) {
        dc_cli_usage_error(cmd, "%s: '%s' is not a non-negative integer", opt, arg);
        return false;
    }
    *out = v;
    return true;
}

bool dc_cli_parse_double(const char *cmd, const char *opt, const char *arg, double *out)
{
    char *end;
    errno = 0;
    double v = arg ? strtod(arg, &end) : 0;
    if (!arg || !*arg || errno || *end || !isfinite(v)) {
        dc_cli_usage_error(cmd, "%s: '%s' is not a number", opt, arg ? arg : "");
        return false;
    }
    *out = v;
    return true;
}

bool dc_cli_is_tty(void)
{
    return isatty(STDERR_FILENO) == 1;
}

#include <getopt.h>

int dc_cli_getopt(const char *cmd, int argc, char **argv, const char *shortopts,
                  const struct option *longopts)
{
    opterr = 0;
    int c = getopt_long(argc, argv, shortopts, longopts, NULL);
    if (c != '?' && c != ':')
        return c;
    const char *bad = (optind > 0 && optind <= argc) ? argv[optind - 1] : "?";
    if (c == ':' || (optopt && strchr(shortopts, optopt) && optopt != '?'))
        dc_cli_usage_error(cmd, "option '%s' needs a value", bad);
    else if (optopt)
        dc_cli_usage_error(cmd, "unknown option '-%c'", optopt);
    else
        dc_cli_usage_error(cmd, "unknown option '%s'", bad);
    return '?';
}
