/* cmd_apply.c - `deltacast apply`: BASE + DELTA -> OUT, verified. */
#include "cli.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

static void dc_apply_help(FILE *fp)
{
    fprintf(fp,
            "Usage: deltacast apply BASE DELTA -o OUT | --in-place\n"
            "\n"
            "Apply DELTA to BASE; OUT is bit-identical to the NEXT the delta was made from.\n"
            "Refuses a delta made for another base (whenever that base would not give the\n"
            "exact target).  Every chunk digest and the target checkpoint digest are\n"
            "verified before OUT is renamed into place, so a failure never leaves a\n"
            "half-written OUT.  --in-place builds the target in a temporary file beside\n"
            "BASE and renames it over BASE: BASE is at base or at target, never in between\n"
            "(needs space for one more checkpoint).  The output's blocks are reserved\n"
            "before a byte is written: a full disk fails at once, naming the file.\n"
            "\n"
            "Options:\n"
            "  -o, --output OUT         file to write (-o), atomically\n"
            "  --in-place               apply to BASE itself\n"
            "  --threads T              worker threads (default: all CPUs)\n"
            "  --strict-base            also refuse a base that differs from the delta's only\n"
            "                           in bytes the delta never reads (hashes the whole base\n"
            "                           first: one more pass)\n"
            "  --json                   print figures as JSON\n"
            "  -h, --help               show this help\n");
}

int dc_cmd_apply(int argc, char **argv)
{
    enum { O_INPLACE = 1000, O_THREADS, O_JSON, O_STRICT };
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'},
        {"in-place", no_argument, NULL, O_INPLACE},
        {"threads", required_argument, NULL, O_THREADS},
        {"json", no_argument, NULL, O_JSON},
        {"strict-base", no_argument, NULL, O_STRICT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    dc_delta_opts_t o = {.size = sizeof(o)};
    const char *out = NULL;
    bool json = false, in_place = false;
    uint64_t u;
    optind = 1;
    int c;
    while ((c = dc_cli_getopt("apply", argc, argv, "ho:", opts)) != -1) {
        switch (c) {
        case 'h':
            dc_apply_help(stdout);
            return DC_EXIT_OK;
        case 'o':
            out = optarg;
            break;
        case O_INPLACE:
            in_place = true;
            break;
        case O_STRICT:
            o.strict_base = 1;
            break;
        case O_THREADS:
            if (!dc_cli_parse_u64("apply", "--threads", optarg, &u))
                return DC_EXIT_USAGE;
            if (u < 1 || u > 1024)
                return dc_cli_usage_error("apply", "--threads: %s is not in 1..1024", optarg);
            o.threads = (unsigned)u;
            break;
        case O_JSON:
            json = true;
            break;
        default:
            return DC_EXIT_USAGE;
        }
    }
    if (argc - optind != 2)
        return dc_cli_usage_error("apply", "expected BASE and DELTA");
    if (!out && !in_place)
        return dc_cli_usage_error("apply", "missing -o OUT (or --in-place)");
    if (out && in_place)
        return dc_cli_usage_error("apply", "-o and --in-place exclude each other");
    dc_delta_stats_t s = {.size = sizeof(s)};
    dc_status_t st = dc_delta_apply_files(argv[optind], argv[optind + 1], out, &o, &s);
    if (st != DC_OK)
        return dc_cli_fail("apply", st, NULL);
    const char *dest = out ? out : argv[optind];
    double gbps = s.seconds > 0 ? (double)s.target_bytes / s.seconds / 1e9 : 0;
    if (json) {
        json_t *j = json_pack("{s:s, s:I, s:I, s:I, s:I, s:f, s:f}", "output", dest,
                              "target_bytes", (json_int_t)s.target_bytes, "delta_bytes",
                              (json_int_t)s.delta_bytes, "frames", (json_int_t)s.frames,
                              "chunks", (json_int_t)s.chunks, "seconds", s.seconds, "gbps", gbps);
        char *txt = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
        if (txt)
            printf("%s\n", txt);
        free(txt);
        json_decref(j);
    } else {
        printf("%s: %llu bytes verified (%llu frames over %llu chunks), %.2f s (%.2f GB/s)\n",
               dest, (unsigned long long)s.target_bytes, (unsigned long long)s.frames,
               (unsigned long long)s.chunks, s.seconds, gbps);
    }
    return DC_EXIT_OK;
}
