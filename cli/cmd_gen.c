/* cmd_gen.c - `deltacast gen`: a synthetic checkpoint pair (testkit/gen.h). */
#include "cli.h"

#include "testkit/gen.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void dc_gen_help(FILE *fp)
{
    fprintf(fp,
            "Usage: deltacast gen --params N --change-rate R [--model optimizer|inject] [--seed S] [--dtype bf16]\n"
            "                    [--layout llama|moe] [--experts E] -o DIR\n"
            "\n"
            "Write DIR/base.safetensors and DIR/next.safetensors: a synthetic transformer-like\n"
            "checkpoint pair whose change comes from an optimizer step (or injected noise).\n"
            "DIR is created if missing (its parent must exist).\n"
            "\n"
            "Options:\n"
            "  --params N               total parameters (e.g. 1e9; at least %u)\n"
            "  --change-rate R          fraction of values that change (e.g. 0.01)\n"
            "  --model M                optimizer (default): one Adam-like step on an FP32\n"
            "                           master, lr tuned to R; inject: a fraction R of the\n"
            "                           elements is multiplied by (1 + 0.01 N(0,1))\n"
            "  --seed S                 random seed (default 1); same seed, same bytes\n"
            "  --dtype T                bf16 (default), f16, f32\n"
            "  --layout L               llama (default): embedding, layers of q/k/v/o, MLP\n"
            "                           and two norms, lm_head; moe: 48 layers of norms,\n"
            "                           attention with q/k/v biases, a router and E experts\n"
            "                           (tens of thousands of small tensors), or with\n"
            "                           --experts 0 24 layers with a dense MLP and biases\n"
            "  --experts E              experts per layer of --layout moe (default 64)\n"
            "  --threads T              worker threads (default: all cores)\n"
            "  --json                   print the summary as one JSON object\n"
            "  -o, --output DIR         output directory\n"
            "  -h, --help               show this help\n",
            DC_GEN_MIN_PARAMS);
}

typedef struct {
    double last;
    bool on;
} dc_gen_prog_t;

static void dc_gen_progress(void *ctx, uint64_t done, uint64_t total)
{
    dc_gen_prog_t *p = ctx;
    double now = dc_now_s();
    if (!p->on || (done < total && now - p->last < 0.5))
        return;
    p->last = now;
    fprintf(stderr, "\rdeltacast gen: %5.1f%%", total ? 100.0 * (double)done / (double)total : 100.0);
    if (done >= total)
        fprintf(stderr, "\r\033[K");
    fflush(stderr);
}

int dc_cmd_gen(int argc, char **argv)
{
    enum { O_PARAMS = 1000, O_RATE, O_MODEL, O_SEED, O_DTYPE, O_THREADS, O_JSON, O_LAYOUT, O_EXPERTS };
    static const struct option opts[] = {
        {"params", required_argument, NULL, O_PARAMS},
        {"change-rate", required_argument, NULL, O_RATE},
        {"model", required_argument, NULL, O_MODEL},
        {"seed", required_argument, NULL, O_SEED},
        {"dtype", required_argument, NULL, O_DTYPE},
        {"threads", required_argument, NULL, O_THREADS},
        {"json", no_argument, NULL, O_JSON},
        {"layout", required_argument, NULL, O_LAYOUT},
        {"experts", required_argument, NULL, O_EXPERTS},
        {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    dc_gen_opts_t o = {.model = DC_GEN_OPTIMIZER, .seed = 1, .dtype = DC_DTYPE_BF16,
                       .experts = 64};
    bool have_experts = false;
    bool have_params = false, have_rate = false, json = false;
    const char *dir = NULL;
    double v;
    uint64_t u;

    optind = 1;
    int c;
    while ((c = dc_cli_getopt("gen", argc, argv, "ho:", opts)) != -1) {
        switch (c) {
        case 'h':
            dc_gen_help(stdout);
            return DC_EXIT_OK;
        case 'o':
            dir = optarg;
            break;
        case O_PARAMS:
            if (!dc_cli_parse_double("gen", "--params", optarg, &v))
                return DC_EXIT_USAGE;
            if (v < DC_GEN_MIN_PARAMS || v > 1e13 || v != floor(v))
                return dc_cli_usage_error("gen", "--params: '%s' must be an integer in [%u, 1e13]",
                                          optarg, DC_GEN_MIN_PARAMS);
            o.params = (uint64_t)v;
            have_params = true;
            break;
        case O_RATE:
            if (!dc_cli_parse_double("gen", "--change-rate", optarg, &v))
                return DC_EXIT_USAGE;
            if (v < 0 || v > 1)
                return dc_cli_usage_error("gen", "--change-rate: '%s' is not in [0, 1]", optarg);
            o.change_rate = v;
            have_rate = true;
            break;
        case O_MODEL:
            if (dc_gen_model_parse(optarg, &o.model) != DC_OK)
                return dc_cli_usage_error("gen", "--model: %s", dc_last_error());
            break;
        case O_SEED:
            if (!dc_cli_parse_u64("gen", "--seed", optarg, &o.seed))
                return DC_EXIT_USAGE;
            break;
        case O_DTYPE:
            if (dc_dtype_parse(optarg, &o.dtype) != DC_OK ||
                (o.dtype != DC_DTYPE_BF16 && o.dtype != DC_DTYPE_F16 && o.dtype != DC_DTYPE_F32))
                return dc_cli_usage_error("gen", "--dtype: '%s' is not bf16, f16 or f32", optarg);
            break;
        case O_THREADS:
            if (!dc_cli_parse_u64("gen", "--threads", optarg, &u))
                return DC_EXIT_USAGE;
            if (u > 256)
                return dc_cli_usage_error("gen", "--threads: at most 256");
            o.threads = (int)u;
            break;
        case O_JSON:
            json = true;
            break;
        case O_LAYOUT:
            if (dc_gen_layout_parse(optarg, &o.layout) != DC_OK)
                return dc_cli_usage_error("gen", "--layout: %s", dc_last_error());
            break;
        case O_EXPERTS:
            if (!dc_cli_parse_u64("gen", "--experts", optarg, &u))
                return DC_EXIT_USAGE;
            if (u > 4096)
                return dc_cli_usage_error("gen", "--experts: at most 4096");
            o.experts = (unsigned)u;
            have_experts = true;
            break;
        default:
            return DC_EXIT_USAGE;
        }
    }
    if (optind < argc)
        return dc_cli_usage_error("gen", "unexpected argument '%s'", argv[optind]);
    if (!have_params)
        return dc_cli_usage_error("gen", "--params is required");
    if (!have_rate)
        return dc_cli_usage_error("gen", "--change-rate is required");
    if (!dir || !*dir)
        return dc_cli_usage_error("gen", "-o DIR is required");
    if (have_experts && o.layout != DC_GEN_LAYOUT_MOE)
        return dc_cli_usage_error("gen", "--experts needs --layout moe");
    if (o.model == DC_GEN_OPTIMIZER && o.change_rate > 0.9)
        return dc_cli_usage_error("gen", "--change-rate: at most 0.9 with --model optimizer");

    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        dc_error_errno(DC_ERR_IO, errno, "cannot create directory '%s'", dir);
        return dc_cli_fail("gen", DC_ERR_IO, NULL);
    }
    size_t dl = strlen(dir);
    char *base = malloc(dl + 32), *next = malloc(dl + 32);
    if (!base || !next) {
        free(base);
        free(next);
        return dc_cli_fail("gen", DC_ERR_NOMEM, "out of memory");
    }
    snprintf(base, dl + 32, "%s/base.safetensors", dir);
    snprintf(next, dl + 32, "%s/next.safetensors", dir);

    dc_gen_prog_t prog = {.on = !json && dc_cli_is_tty()};
    o.progress = dc_gen_progress;
    o.progress_ctx = &prog;
    dc_gen_result_t r;
    dc_status_t st = dc_gen_write(&o, base, next, &r);
    if (st != DC_OK) {
        if (prog.on)
            fprintf(stderr, "\r\033[K");
        free(base);
        free(next);
        return dc_cli_fail("gen", st, NULL);
    }
    const char *dtn = o.dtype == DC_DTYPE_BF16 ? "bf16" : o.dtype == DC_DTYPE_F16 ? "f16" : "f32";
    if (json) {
        printf("{\"base\":\"%s\",\"next\":\"%s\",\"model\":\"%s\",\"seed\":%" PRIu64
               ",\"dtype\":\"%s\",\"requested_params\":%" PRIu64 ",\"params\":%" PRIu64
               ",\"buffer_elems\":%" PRIu64 ",\"tensors\":%zu,\"layers\":%d,\"hidden\":%" PRIu64
               ",\"ffn\":%" PRIu64 ",\"vocab\":%" PRIu64 ",\"file_bytes\":%" PRIu64
               ",\"requested_rate\":%.17g,\"real_rate\":%.17g,\"changed\":%" PRIu64
               ",\"selected\":%" PRIu64 ",\"lr\":%.9g,\"calib_rate\":%.9g,\"seconds\":%.3f,"
               "\"threads\":%d,\"layout\":\"%s\",\"experts\":%u}\n",
               base, next, dc_gen_model_name(o.model), o.seed, dtn, o.params, r.params,
               r.buffer_elems, r.tensors, r.layers, r.hidden, r.ffn, r.vocab, r.file_bytes,
               o.change_rate, r.real_rate, r.changed, r.selected, r.lr, r.calib_rate, r.seconds,
               r.threads, dc_gen_layout_name(o.layout),
               o.layout == DC_GEN_LAYOUT_MOE ? o.experts : 0);
    } else {
        char sz[32];
        printf("wrote %s and %s\n", base, next);
        printf("  params     %" PRIu64 " (requested %" PRIu64 "), %zu tensors: %d layers, hidden %" PRIu64
               ", ffn %" PRIu64 ", vocab %" PRIu64 ", + %" PRIu64 " I64 position ids\n",
               r.params, o.params, r.tensors, r.layers, r.hidden, r.ffn, r.vocab, r.buffer_elems);
        if (o.layout == DC_GEN_LAYOUT_MOE)
            printf("  layout     moe, %u experts per layer%s\n", o.experts,
                   o.experts ? "" : " (dense MLP with biases)");
        printf("  dtype      %s, %s per file\n", dtn, dc_fmt_bytes(r.file_bytes, sz, sizeof(sz)));
        printf("  model      %s, seed %" PRIu64, dc_gen_model_name(o.model), o.seed);
        if (o.model == DC_GEN_OPTIMIZER)
            printf(", lr %.4g\n", r.lr);
        else
            printf(", %" PRIu64 " elements selected (%.4f%%)\n", r.selected,
                   r.params ? 100.0 * (double)r.selected / (double)r.params : 0.0);
        printf("  changed    %" PRIu64 " values: real rate %.4f%% (requested %.4f%%)\n", r.changed,
               100.0 * r.real_rate, 100.0 * o.change_rate);
        printf("  time       %.2f s with %d threads\n", r.seconds, r.threads);
    }
    free(base);
    free(next);
    return DC_EXIT_OK;
}
