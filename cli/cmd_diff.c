/* cmd_diff.c - `deltacast diff`: encode the delta between two checkpoints. */
#include "cli.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void dc_diff_help(FILE *fp)
{
    fprintf(fp,
            "Usage: deltacast diff BASE NEXT -o DELTA [--threads T] [--chunk-size S]\n"
            "                      [--layout simd|compact]\n"
            "\n"
            "Encode the delta that turns checkpoint BASE into NEXT, bit-exactly.\n"
            "DELTA is written through a temporary file and renamed into place.\n"
            "\n"
            "Options:\n"
            "  -o, --output DELTA       delta file to write (-o)\n"
            "  --threads T              worker threads (default: all CPUs)\n"
            "  --chunk-size S           dense bytes per chunk (default: config chunk_size, 4MiB)\n"
            "  --layout L               simd: positions as rANS-coded gaps, 32-way rANS values\n"
            "                           (receivers with AVX2 / AVX-512 apply them fastest);\n"
            "                           compact: Golomb positions, 4-way rANS (faster on\n"
            "                           receivers without AVX2, e.g. ARM).  Either applies\n"
            "                           everywhere (default: config codec_layout, simd)\n"
            "  --json                   print figures as JSON\n"
            "  -h, --help               show this help\n");
}

int dc_cmd_diff(int argc, char **argv)
{
    enum { O_THREADS = 1000, O_CHUNK, O_JSON, O_LAYOUT };
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'},
        {"threads", required_argument, NULL, O_THREADS},
        {"chunk-size", required_argument, NULL, O_CHUNK},
        {"json", no_argument, NULL, O_JSON},
        {"layout", required_argument, NULL, O_LAYOUT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    dc_delta_opts_t o = {.size = sizeof(o)};
    const char *out = NULL;
    bool json = false;
    uint64_t u;
    optind = 1;
    int c;
    while ((c = dc_cli_getopt("diff", argc, argv, "ho:", opts)) != -1) {
        switch (c) {
        case 'h':
            dc_diff_help(stdout);
            return DC_EXIT_OK;
        case 'o':
            out = optarg;
            break;
        case O_THREADS:
            if (!dc_cli_parse_u64("diff", "--threads", optarg, &u))
                return DC_EXIT_USAGE;
            if (u < 1 || u > 1024)
                return dc_cli_usage_error("diff", "--threads: %s is not in 1..1024", optarg);
            o.threads = (unsigned)u;
            break;
        case O_CHUNK:
            if (!dc_cli_parse_size("diff", "--chunk-size", optarg, &o.chunk_size))
                return DC_EXIT_USAGE;
            if (o.chunk_size < 64 || o.chunk_size > (256u << 20))
                return dc_cli_usage_error("diff", "--chunk-size: %s is not in 64..256MiB", optarg);
            break;
        case O_JSON:
            json = true;
            break;
        case O_LAYOUT:
            if (strcmp(optarg, "simd") == 0)
                o.layout = DC_DELTA_LAYOUT_SIMD;
            else if (strcmp(optarg, "compact") == 0)
                o.layout = DC_DELTA_LAYOUT_COMPACT;
            else
                return dc_cli_usage_error("diff", "--layout: %s is not simd or compact", optarg);
            break;
        default:
            return DC_EXIT_USAGE;
        }
    }
    if (argc - optind != 2)
        return dc_cli_usage_error("diff", "expected BASE and NEXT");
    if (!out)
        return dc_cli_usage_error("diff", "missing -o DELTA");
    dc_delta_stats_t s = {.size = sizeof(s)};
    dc_status_t st = dc_delta_diff_files(argv[optind], argv[optind + 1], out, &o, &s);
    if (st != DC_OK)
        return dc_cli_fail("diff", st, NULL);
    double pct = s.target_bytes ? 100.0 * (double)s.delta_bytes / (double)s.target_bytes : 0;
    double rate = s.elements ? (double)s.changed / (double)s.elements : 0;
    double ratio = s.bound_bytes > 0 ? (double)s.bounded_payload / s.bound_bytes : 0;
    double gbps = s.seconds > 0 ? (double)s.target_bytes / s.seconds / 1e9 : 0;
    if (json) {
        json_t *j = json_pack("{s:s, s:I, s:I, s:I, s:f, s:I, s:I, s:f, s:I, s:I, s:I, s:I, s:I, "
                              "s:I, s:f, s:f, s:f, s:f}",
                              "delta", out, "delta_bytes", (json_int_t)s.delta_bytes,
                              "target_bytes", (json_int_t)s.target_bytes, "base_bytes",
                              (json_int_t)s.base_bytes, "delta_pct", pct, "elements",
                              (json_int_t)s.elements, "changed", (json_int_t)s.changed,
                              "change_rate", rate, "chunks", (json_int_t)s.chunks, "frames",
                              (json_int_t)s.frames, "xor_sparse",
                              (json_int_t)s.frames_by_kind[1], "put_sparse",
                              (json_int_t)s.frames_by_kind[2], "xor_dense",
                              (json_int_t)s.frames_by_kind[3], "put_dense",
                              (json_int_t)s.frames_by_kind[4], "bound_bytes", s.bound_bytes,
                              "ratio_to_bound", ratio, "seconds", s.seconds, "gbps", gbps);
        if (j) {
            json_object_set_new(j, "ctx_sparse", json_integer((json_int_t)s.frames_ctx));
            /* the coded model's entropy (positions per class, values as
             * coded): what the base-conditioned coding is measured against */
            json_object_set_new(j, "bound_ctx_bytes", json_real(s.bound_ctx_bytes));
            json_object_set_new(j, "delta_to_bound",
                                s.bound_bytes > 0 ? json_real((double)s.delta_bytes / s.bound_bytes)
                                                  : json_null());
            json_object_set_new(j, "pos_bytes", json_integer((json_int_t)s.pos_bytes));
            json_object_set_new(j, "val_bytes", json_integer((json_int_t)s.val_bytes));
            /* every byte that is not chunk payload, and its share of the payload */
            uint64_t ov = s.delta_bytes - s.payload_bytes;
            json_object_set_new(j, "payload_bytes", json_integer((json_int_t)s.payload_bytes));
            json_object_set_new(j, "overhead_bytes", json_integer((json_int_t)ov));
            json_object_set_new(j, "overhead_share",
                                s.payload_bytes ? json_real((double)ov / (double)s.payload_bytes)
                                                : json_null());
            char *txt = json_dumps(j, JSON_INDENT(2));
            if (txt)
                printf("%s\n", txt);
            free(txt);
            json_decref(j);
        }
    } else {
        printf("%s: %llu bytes (%.3f%% of %llu), %.4f%% of %llu elements changed, "
               "%llu of %llu chunks in frames (ctx-sparse %llu, xor-sparse %llu, put-sparse %llu, "
               "xor-dense %llu, put-dense %llu), payload %.3fx the order-0 entropy bound "
               "(delta %.3fx), %.2f s (%.2f GB/s)\n",
               out, (unsigned long long)s.delta_bytes, pct, (unsigned long long)s.target_bytes,
               100.0 * rate, (unsigned long long)s.elements, (unsigned long long)s.frames,
               (unsigned long long)s.chunks, (unsigned long long)s.frames_ctx,
               (unsigned long long)s.frames_by_kind[1], (unsigned long long)s.frames_by_kind[2],
               (unsigned long long)s.frames_by_kind[3], (unsigned long long)s.frames_by_kind[4],
               ratio, s.bound_bytes > 0 ? (double)s.delta_bytes / s.bound_bytes : 0.0, s.seconds,
               gbps);
    }
    return DC_EXIT_OK;
}
