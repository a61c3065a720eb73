/*
 * kern_bench.c - throughput of the host kernels, every ISA side by side.
 *
 *   kern_bench [--mib M] [--rate PERMILLE] [--reps R] [--json]
 *
 * Input: two BF16 buffers of M MiB (default 64: beyond the caches) that
 * differ in RATE per mille of the elements (default 10 = 1%).  Throughput
 * is GB/s (1e9 B/s) of dense checkpoint bytes processed (one side), the
 * median of R repetitions, single thread.  "scalar" is the baseline
 * measured in the same run; the ratio column is best/scalar.
 *   count    dc_kern_count_changed
 *   diff     dc_kern_diff (positions + XOR words)
 *   gather   dc_kern_gather of the changed values
 *   xor_scat dc_kern_xor_scatter (validation + apply) of the diff
 *   put_scat dc_kern_put_scatter (validation + apply)
 *   xor_dense dc_kern_xor_dense over the whole buffer
 * plus CRC32C (each implementation) and the XXH3-128 digest, and the
 * all-cores figure of diff through dc_kern_parallel_for on 4 MiB chunks.
 */
#include "kernels/kern.h"
#include "kernels/kern_impl.h"
#include "testkit/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bench {
    uint16_t *a, *b, *dst;
    size_t n;
    uint32_t *pos;
    uint16_t *xorw, *vals;
    size_t changed;
} bench_t;

static volatile size_t g_sink;

static double time_it(void (*fn)(bench_t *), bench_t *B, int reps, size_t bytes)
{
    dc_perf_metric_t m;
    dc_perf_metric_init(&m, "gbs", "GB/s");
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = dc_now_ns();
        fn(B);
        uint64_t t1 = dc_now_ns();
        dc_perf_metric_add(&m, (double)bytes / (double)(t1 - t0 ? t1 - t0 : 1));
    }
    return dc_perf_median(&m);
}

static void run_count(bench_t *B) { g_sink += dc_kern_count_changed(B->a, B->b, B->n, 2); }
static void run_diff(bench_t *B)
{
    g_sink += dc_kern_diff(B->a, B->b, B->n, 2, B->pos, B->xorw, B->n);
}
static void run_gather(bench_t *B) { dc_kern_gather(B->b, 2, B->pos, B->changed, B->vals); }
static void run_xor_scatter(bench_t *B)
{
    /* applying the same XOR twice restores dst: state stays bounded */
    if (dc_kern_xor_scatter(B->dst, B->n, 2, B->pos, B->xorw, B->changed) != DC_OK)
        abort();
}
static void run_put_scatter(bench_t *B)
{
    if (dc_kern_put_scatter(B->dst, B->n, 2, B->pos, B->vals, B->changed) != DC_OK)
        abort();
}
static void run_xor_dense(bench_t *B) { dc_kern_xor_dense(B->dst, B->b, B->n * 2); }

typedef struct chunked {
    bench_t *B;
    size_t chunk;
    size_t *counts;
} chunked_t;

static dc_status_t diff_task(void *p, size_t t)
{
    chunked_t *c = p;
    size_t off = t * c->chunk, n = DC_MIN(c->chunk, c->B->n - off);
    c->counts[t] = dc_kern_diff(c->B->a + off, c->B->b + off, n, 2, c->B->pos + off,
                                c->B->xorw + off, n);
    return DC_OK;
}

int main(int argc, char **argv)
{
    size_t mib = 64;
    unsigned rate = 10;
    int reps = 7, json = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--mib") == 0 && i + 1 < argc)
            mib = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--rate") == 0 && i + 1 < argc)
            rate = (unsigned)strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else {
            fprintf(stderr, "usage: %s [--mib M] [--rate PERMILLE] [--reps R] [--json]\n",
                    argv[0]);
            return 2;
        }
    }
    if (mib == 0 || reps <= 0 || reps > DC_PERF_MAX_SAMPLES || rate > 1000) {
        fprintf(stderr, "kern_bench: bad arguments\n");
        return 2;
    }

    bench_t B = {0};
    B.n = mib * (1u << 20) / 2;
    B.a = malloc(B.n * 2);
    B.b = malloc(B.n * 2);
    B.dst = malloc(B.n * 2);
    B.pos = malloc(B.n * 4);
    B.xorw = malloc(B.n * 2);
    B.vals = malloc(B.n * 2);
    if (!B.a || !B.b || !B.dst || !B.pos || !B.xorw || !B.vals) {
        fprintf(stderr, "kern_bench: out of memory\n");
        return 1;
    }
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < B.n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        B.a[i] = (uint16_t)s;
        B.b[i] = B.a[i];
        if ((s >> 32) % 1000 < rate)
            B.b[i] ^= (uint16_t)(1u << ((s >> 20) % 16));
    }
    memcpy(B.dst, B.a, B.n * 2);
    B.changed = dc_kern_diff(B.a, B.b, B.n, 2, B.pos, B.xorw, B.n);
    dc_kern_gather(B.b, 2, B.pos, B.changed, B.vals);

    static const char *const ISAS[] = {"scalar", "avx2", "avx512"};
    static const struct {
        const char *name;
        void (*fn)(bench_t *);
    } K[] = {
        {"count", run_count},         {"diff", run_diff},
        {"gather", run_gather},       {"xor_scatter", run_xor_scatter},
        {"put_scatter", run_put_scatter}, {"xor_dense", run_xor_dense},
    };
    double res[DC_ARRAY_SIZE(K)][3] = {{0}};
    for (size_t ii = 0; ii < 3; ii++) {
        if (!dc_kern_isa_supported(ISAS[ii]))
            continue;
        dc_kern_set_isa(ISAS[ii]);
        for (size_t k = 0; k < DC_ARRAY_SIZE(K); k++)
            res[k][ii] = time_it(K[k].fn, &B, reps, B.n * 2);
    }

    /* CRC32C and digest over the whole buffer */
    struct {
        const char *name;
        double gbs;
    } sums[5];
    size_t ns = 0;
    dc_perf_metric_t m;
#define TIME_SUM(label, expr)                                                 \
    do {                                                                      \
        dc_perf_metric_init(&m, label, "GB/s");                               \
        for (int r = 0; r < reps; r++) {                                      \
            uint64_t t0 = dc_now_ns();                                        \
            g_sink += (size_t)(expr);                                         \
            dc_perf_metric_add(&m, (double)(B.n * 2) / (double)(dc_now_ns() - t0)); \
        }                                                                     \
        sums[ns].name = label;                                                \
        sums[ns++].gbs = dc_perf_median(&m);                                  \
    } while (0)
    TIME_SUM("crc32c table", dc_crc32c_sw(0, B.a, B.n * 2));
#if defined(__x86_64__)
    TIME_SUM("crc32c sse4.2 3-way", dc_crc32c_sse42(0, B.a, B.n * 2));
    if (dc_crc32c_vpclmul_ok())
        TIME_SUM("crc32c avx512 vpclmul", dc_crc32c_vpclmul(0, B.a, B.n * 2));
#endif
#if DC_HAVE_ISAL
    TIME_SUM("crc32c isa-l", dc_crc32c_isal(0, B.a, B.n * 2));
#endif
    TIME_SUM("xxh3-128 digest", dc_digest128(B.a, B.n * 2).lo);

    /* all cores: diff in 4 MiB chunks */
    dc_kern_set_isa(ISAS[dc_kern_isa_supported("avx512") ? 2 : dc_kern_isa_supported("avx2")]);
    chunked_t C = {.B = &B, .chunk = (size_t)2 << 20};
    size_t tasks = (B.n + C.chunk - 1) / C.chunk;
    C.counts = calloc(tasks, sizeof(size_t));
    dc_perf_metric_init(&m, "par", "GB/s");
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = dc_now_ns();
        dc_kern_parallel_for(tasks, diff_task, &C, 0);
        dc_perf_metric_add(&m, (double)(B.n * 2) / (double)(dc_now_ns() - t0));
    }
    double par = dc_perf_median(&m);

    if (json) {
        json_t *root = json_object();
        json_object_set_new(root, "mib", json_integer((json_int_t)mib));
        json_object_set_new(root, "change_permille", json_integer(rate));
        json_object_set_new(root, "dispatch", json_string(dc_kern_isa()));
        json_t *ks = json_object();
        for (size_t k = 0; k < DC_ARRAY_SIZE(K); k++) {
            json_t *o = json_object();
            for (size_t ii = 0; ii < 3; ii++)
                if (res[k][ii] > 0)
                    json_object_set_new(o, ISAS[ii], json_real(res[k][ii]));
            json_object_set_new(ks, K[k].name, o);
        }
        for (size_t i = 0; i < ns; i++)
            json_object_set_new(ks, sums[i].name, json_real(sums[i].gbs));
        json_object_set_new(ks, "diff_all_cores", json_real(par));
        json_object_set_new(root, "gbs", ks);
        dc_perf_json_print(root);
        json_decref(root);
    } else {
        printf("host kernels: BF16, %zu MiB per side, %.2f%% changed (%zu elements), "
               "median of %d, GB/s of dense bytes, 1 thread\n",
               mib, rate / 10.0, B.changed, reps);
        printf("%-14s %10s %10s %10s %12s\n", "kernel", "scalar", "avx2", "avx512",
               "best/scalar");
        for (size_t k = 0; k < DC_ARRAY_SIZE(K); k++) {
            double best = DC_MAX(res[k][1], res[k][2]);
            printf("%-14s %10.2f %10.2f %10.2f %11.2fx\n", K[k].name, res[k][0], res[k][1],
                   res[k][2], best > 0 && res[k][0] > 0 ? best / res[k][0] : 0.0);
        }
        for (size_t i = 0; i < ns; i++)
            printf("%-22s %10.2f GB/s\n", sums[i].name, sums[i].gbs);
        printf("%-22s %10.2f GB/s (%d threads, %s)\n", "diff, all cores", par, dc_cpu_count(),
               dc_kern_isa());
    }
    free(C.counts);
    free(B.a);
    free(B.b);
    free(B.dst);
    free(B.pos);
    free(B.xorw);
    free(B.vals);
    return 0;
}
