/*
 * gpu_bench.c - CUDA kernel throughput as a fraction of the GPU's memory
 * bandwidth (built only with CUDA; run by perf/gpu-check.sh).
 *
 *   gpu_bench [--mib M] [--rate PERMILLE] [--reps R] [--bw GBS]
 *
 * Two BF16 buffers of M MiB (default 1024) differing in RATE per mille of
 * the elements (default 10 = 1%).  For each kernel: the median wall time of
 * R calls (host clock around a synchronizing call, so launch overhead is
 * included), "dense GB/s" = checkpoint bytes (one side) per second, and
 * "traffic GB/s" = the bytes the kernel must move at minimum per the model
 * below, divided by time; "of peak" = traffic / theoretical DRAM bandwidth
 * (from the driver's memory clock and bus width, or --bw).
 *   count       reads a and b                           2N
 *   diff        one pass (decoupled look-back): reads a and b once,
 *               writes 6 B per change                    2N + 6c
 *               (the two-pass version, which re-read every tile, ran at
 *               52.7-57.2% of an H200's peak by its own 4N + 6c model)
 *   gather      reads 4 B pos + 2 B value, writes 2 B    8c
 *   xor_scatter validate (4c) + pos again (4c) + xor words (2c) + dst RMW (4c)
 *   put_scatter validate (4c) + pos again (4c) + vals (2c) + dst write (2c)
 *   xor_dense   reads dst and src, writes dst            3N
 *   digest      copy-back to host + XXH3 on the host: PCIe-bound, shown
 *               against the same peak only for scale
 *   digest(dev) XXH3-128 on the device: every 1 KiB block's stripe sums
 *               at once, then 8 threads chain the blocks' scrambles (reads
 *               a once: N, plus N/16 of sums written and read; the chain,
 *               a few integer operations per KiB, bounds it)
 *   crc32c      reads a (checked against dc_crc32c first)  N
 * and, after the table, crc32c over the 512 KiB pieces the ucx transport
 * checksums one at a time (launch and synchronisation included).
 * Scatter traffic is counted in useful bytes; the real DRAM traffic is in
 * 32-byte sectors, so at 1% the "of peak" figure understates the hardware
 * load.
 */
#include "kernels/kern.h"
#include "kernels/kern_cuda.h"
#include "testkit/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die(const char *what)
{
    fprintf(stderr, "gpu_bench: %s: %s\n", what, dc_last_error());
    exit(1);
}

#define CK(call, what)                                                        \
    do {                                                                      \
        if ((call) != DC_OK)                                                  \
            die(what);                                                        \
    } while (0)

int main(int argc, char **argv)
{
    size_t mib = 1024;
    unsigned rate = 10;
    int reps = 9;
    double bw = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--mib") == 0 && i + 1 < argc)
            mib = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--rate") == 0 && i + 1 < argc)
            rate = (unsigned)strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--bw") == 0 && i + 1 < argc)
            bw = strtod(argv[++i], NULL);
        else {
            fprintf(stderr, "usage: %s [--mib M] [--rate PERMILLE] [--reps R] [--bw GBS]\n",
                    argv[0]);
            return 2;
        }
    }
    if (mib == 0 || reps <= 0 || reps > DC_PERF_MAX_SAMPLES || rate > 1000) {
        fprintf(stderr, "gpu_bench: bad arguments\n");
        return 2;
    }
    if (!dc_kern_cuda_available()) {
        fprintf(stderr, "gpu_bench: no CUDA device (or CUDA not built in)\n");
        return 1;
    }
    dc_kern_cuda_props_t P;
    CK(dc_kern_cuda_props(&P), "device properties");
    if (bw <= 0)
        bw = P.mem_bw_gbs;

    const size_t n = mib * (1u << 20) / 2, bytes = n * 2;
    uint16_t *a = malloc(bytes), *b = malloc(bytes);
    if (!a || !b)
        die("host memory");
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        a[i] = (uint16_t)s;
        b[i] = a[i];
        if ((s >> 32) % 1000 < rate)
            b[i] ^= (uint16_t)(1u << ((s >> 20) % 16));
    }
    size_t c_ref = dc_kern_count_changed(a, b, n, 2);

    void *da, *db, *dd, *dpos, *dx, *dv;
    CK(dc_kern_cuda_malloc(&da, bytes), "malloc");
    CK(dc_kern_cuda_malloc(&db, bytes), "malloc");
    CK(dc_kern_cuda_malloc(&dd, bytes), "malloc");
    CK(dc_kern_cuda_malloc(&dpos, (c_ref + 1) * 4), "malloc");
    CK(dc_kern_cuda_malloc(&dx, (c_ref + 1) * 2), "malloc");
    CK(dc_kern_cuda_malloc(&dv, (c_ref + 1) * 2), "malloc");
    CK(dc_kern_cuda_h2d(da, a, bytes), "upload");
    CK(dc_kern_cuda_h2d(db, b, bytes), "upload");
    CK(dc_kern_cuda_h2d(dd, a, bytes), "upload");

    size_t c = 0;
    CK(dc_kern_cuda_diff(da, db, n, 2, dpos, dx, c_ref, &c, NULL), "diff");
    if (c != c_ref) {
        fprintf(stderr, "gpu_bench: GPU diff found %zu changes, CPU %zu\n", c, c_ref);
        return 1;
    }
    {
        /* the one-pass diff's look-back runs across thousands of tiles
         * at once only here: its lists against the CPU's, whole */
        uint32_t *rpos = malloc((c_ref + 1) * 4), *gpos = malloc((c_ref + 1) * 4);
        uint16_t *rx = malloc((c_ref + 1) * 2), *gx = malloc((c_ref + 1) * 2);
        if (!rpos || !gpos || !rx || !gx)
            die("host memory");
        size_t rc = dc_kern_diff(a, b, n, 2, rpos, rx, c_ref);
        CK(dc_kern_cuda_d2h(gpos, dpos, c * 4), "download");
        CK(dc_kern_cuda_d2h(gx, dx, c * 2), "download");
        if (rc != c || memcmp(rpos, gpos, c * 4) != 0 || memcmp(rx, gx, c * 2) != 0) {
            fprintf(stderr, "gpu_bench: GPU diff lists differ from the CPU's\n");
            return 1;
        }
        printf("diff lists (%zu positions and XOR words) identical to the CPU's\n", c);
        free(rpos);
        free(gpos);
        free(rx);
        free(gx);
    }
    CK(dc_kern_cuda_gather(db, 2, dpos, c, dv, NULL), "gather");
    CK(dc_kern_cuda_sync(NULL), "sync");
    uint32_t crc_ref = dc_crc32c(0, a, bytes), crc = 0;
    CK(dc_kern_cuda_crc32c(da, bytes, 0, &crc, NULL), "crc32c");
    if (crc != crc_ref) {
        fprintf(stderr, "gpu_bench: GPU crc32c 0x%08x, CPU 0x%08x\n", crc, crc_ref);
        return 1;
    }

    enum { K_COUNT, K_DIFF, K_GATHER, K_XOR, K_PUT, K_DENSE, K_DIGEST, K_CRC, K_DIGEST_DEV,
           K_N };
    static const char *const names[K_N] = {"count",       "diff",      "gather",
                                           "xor_scatter", "put_scatter", "xor_dense",
                                           "digest(copy-back)", "crc32c", "digest(dev)"};
    const size_t ddev = bytes;
    const double traffic[K_N] = {2.0 * bytes, 2.0 * bytes + 6.0 * c, 8.0 * c, 14.0 * c,
                                 12.0 * c, 3.0 * bytes, 1.0 * bytes, 1.0 * bytes, 1.0 * ddev};
    {
        dc_digest_t dg;
        CK(dc_kern_cuda_digest128_dev(da, ddev, &dg, NULL), "digest(dev)");
        if (!dc_digest_eq(dg, dc_digest128(a, ddev))) {
            fprintf(stderr, "gpu_bench: device digest differs from the CPU's\n");
            return 1;
        }
    }
    dc_perf_metric_t m[K_N];
    for (int k = 0; k < K_N; k++) {
        dc_perf_metric_init(&m[k], names[k], "s");
        for (int r = 0; r < reps + 1; r++) { /* first call is warm-up */
            size_t got = 0;
            dc_digest_t dg;
            uint64_t t0 = dc_now_ns();
            switch (k) {
            case K_COUNT: CK(dc_kern_cuda_count_changed(da, db, n, 2, &got, NULL), "count"); break;
            case K_DIFF: CK(dc_kern_cuda_diff(da, db, n, 2, dpos, dx, c, &got, NULL), "diff"); break;
            case K_GATHER:
                CK(dc_kern_cuda_gather(db, 2, dpos, c, dv, NULL), "gather");
                CK(dc_kern_cuda_sync(NULL), "sync");
                break;
            case K_XOR: CK(dc_kern_cuda_xor_scatter(dd, n, 2, dpos, dx, c, NULL), "xor"); break;
            case K_PUT: CK(dc_kern_cuda_put_scatter(dd, n, 2, dpos, dv, c, NULL), "put"); break;
            case K_DENSE:
                CK(dc_kern_cuda_xor_dense(dd, db, bytes, NULL), "dense");
                CK(dc_kern_cuda_sync(NULL), "sync");
                break;
            case K_CRC: CK(dc_kern_cuda_crc32c(da, bytes, 0, &crc, NULL), "crc32c"); break;
            case K_DIGEST_DEV:
                CK(dc_kern_cuda_digest128_dev(da, ddev, &dg, NULL), "digest(dev)");
                break;
            default: CK(dc_kern_cuda_digest128(da, bytes, &dg, NULL), "digest"); break;
            }
            double sec = (double)(dc_now_ns() - t0) / 1e9;
            if (r > 0)
                dc_perf_metric_add(&m[k], sec);
        }
    }

    printf("GPU: %s, %d SMs, cc %d.%d, peak DRAM bandwidth %.0f GB/s%s\n", P.name, P.sm_count,
           P.cc_major, P.cc_minor, bw, P.mem_bw_gbs > 0 && bw != P.mem_bw_gbs ? " (--bw)" : "");
    printf("input: BF16, %zu MiB per side, %zu changed (%.2f%%), median of %d\n", mib, c,
           100.0 * (double)c / (double)n, reps);
    printf("%-18s %10s %12s %14s %9s\n", "kernel", "time ms", "dense GB/s", "traffic GB/s",
           "of peak");
    for (int k = 0; k < K_N; k++) {
        double t = dc_perf_median(&m[k]);
        double tr = traffic[k] / t / 1e9;
        double in = k == K_DIGEST_DEV ? (double)ddev : (double)bytes;
        printf("%-18s %10.3f %12.1f %14.1f %8.1f%%\n", names[k], t * 1e3,
               in / t / 1e9, tr, bw > 0 ? 100.0 * tr / bw : 0.0);
    }
    /* crc32c one 512 KiB piece at a time (ucx's default piece size) */
    const size_t piece = 512u << 10, npieces = DC_MIN(bytes / piece, (size_t)256);
    if (npieces > 0) {
        dc_perf_metric_t pm;
        dc_perf_metric_init(&pm, "crc32c-piece", "s");
        for (int r = 0; r < reps + 1; r++) {
            uint64_t t0 = dc_now_ns();
            for (size_t i = 0; i < npieces; i++)
                CK(dc_kern_cuda_crc32c((const uint8_t *)da + i * piece, piece, 0, &crc, NULL),
                   "crc32c piece");
            double sec = (double)(dc_now_ns() - t0) / 1e9;
            if (r > 0)
                dc_perf_metric_add(&pm, sec);
        }
        double t = dc_perf_median(&pm) / (double)npieces;
        printf("crc32c per 512 KiB piece: %.1f us each, %.1f GB/s (%.1f%% of peak), "
               "%.0f Gb/s of link it can check\n",
               t * 1e6, (double)piece / t / 1e9, bw > 0 ? 100.0 * piece / t / 1e9 / bw : 0.0,
               (double)piece * 8 / t / 1e9);
    }
    /* the device digest one 4 MiB chunk at a time (config chunk_size's
     * default: what a device receiver checks per frame), launches and the
     * 16-byte result copy included, against XXH3 of the same chunk on
     * this host's CPU */
    const size_t chunk = 4u << 20, nchunks = DC_MIN(bytes / chunk, (size_t)64);
    if (nchunks > 0) {
        dc_perf_metric_t dm, hm;
        dc_perf_metric_init(&dm, "digest-chunk", "s");
        dc_perf_metric_init(&hm, "digest-chunk-cpu", "s");
        for (int r = 0; r < reps + 1; r++) {
            dc_digest_t dg, hg = {0, 0};
            uint64_t t0 = dc_now_ns();
            for (size_t i = 0; i < nchunks; i++)
                CK(dc_kern_cuda_digest128_dev((const uint8_t *)da + i * chunk, chunk, &dg, NULL),
                   "digest chunk");
            uint64_t t1 = dc_now_ns();
            for (size_t i = 0; i < nchunks; i++) {
                dc_digest_t x = dc_digest128((const uint8_t *)a + i * chunk, chunk);
                hg.lo ^= x.lo;
            }
            uint64_t t2 = dc_now_ns();
            if (hg.lo == 1) /* keeps the CPU loop */
                printf(" ");
            if (r > 0) {
                dc_perf_metric_add(&dm, (double)(t1 - t0) / 1e9);
                dc_perf_metric_add(&hm, (double)(t2 - t1) / 1e9);
            }
        }
        double t = dc_perf_median(&dm) / (double)nchunks;
        double th = dc_perf_median(&hm) / (double)nchunks;
        printf("digest(dev) per 4 MiB chunk: %.1f us each, %.1f GB/s; XXH3 of it on this "
               "host's CPU, one thread: %.1f us, %.1f GB/s\n",
               t * 1e6, (double)chunk / t / 1e9, th * 1e6, (double)chunk / th / 1e9);
        /* all the buffer's 4 MiB chunks in one call (their chains side by side) */
        const size_t all = bytes / chunk;
        dc_digest_t *dgs = malloc(all * sizeof(*dgs));
        dc_perf_metric_t bm;
        dc_perf_metric_init(&bm, "digest-pieces", "s");
        for (int r = 0; r < reps + 1 && dgs; r++) {
            uint64_t t0 = dc_now_ns();
            CK(dc_kern_cuda_digest128_dev_pieces(da, all * chunk, chunk, dgs, NULL),
               "digest pieces");
            if (r > 0)
                dc_perf_metric_add(&bm, (double)(dc_now_ns() - t0) / 1e9);
        }
        if (dgs && !dc_digest_eq(dgs[all - 1],
                                 dc_digest128((const uint8_t *)a + (all - 1) * chunk, chunk))) {
            fprintf(stderr, "gpu_bench: device piece digest differs from the CPU's\n");
            return 1;
        }
        double tb = dc_perf_median(&bm);
        printf("digest(dev) of %zu 4 MiB chunks in one call: %.3f ms, %.1f GB/s (%.1f%% of "
               "peak)\n",
               all, tb * 1e3, (double)(all * chunk) / tb / 1e9,
               bw > 0 ? 100.0 * (double)(all * chunk) / tb / 1e9 / bw : 0.0);
        /* a device receiver's work for dense chunks (its values already
         * decoded: the payload's XOR words in db): apply (xor_dense) and
         * digest, frame by frame as the receiver does now, and the whole
         * buffer applied then digested in one batched call; traffic 3N
         * (apply) + N (digest) */
        dc_perf_metric_t fm, am;
        dc_perf_metric_init(&fm, "apply-digest-chunk", "s");
        dc_perf_metric_init(&am, "apply-digest-batched", "s");
        for (int r = 0; r < reps + 1 && dgs; r++) {
            dc_digest_t dg;
            uint64_t t0 = dc_now_ns();
            for (size_t i = 0; i < nchunks; i++) {
                uint8_t *dst = (uint8_t *)dd + i * chunk;
                CK(dc_kern_cuda_xor_dense(dst, (const uint8_t *)db + i * chunk, chunk, NULL),
                   "apply chunk");
                CK(dc_kern_cuda_digest128_dev(dst, chunk, &dg, NULL), "digest chunk");
            }
            uint64_t t1 = dc_now_ns();
            CK(dc_kern_cuda_xor_dense(dd, db, all * chunk, NULL), "apply all");
            CK(dc_kern_cuda_digest128_dev_pieces(dd, all * chunk, chunk, dgs, NULL),
               "digest pieces");
            uint64_t t2 = dc_now_ns();
            if (r > 0) {
                dc_perf_metric_add(&fm, (double)(t1 - t0) / 1e9 / (double)nchunks);
                dc_perf_metric_add(&am, (double)(t2 - t1) / 1e9 / (double)all);
            }
        }
        if (dgs) {
            double tf = dc_perf_median(&fm), ta = dc_perf_median(&am);
            printf("apply+digest (dense chunk, values decoded), per 4 MiB chunk: %.1f us, "
                   "%.1f GB/s of chunk (%.1f%% of peak by 4N); batched over %zu chunks: "
                   "%.1f us per chunk, %.1f GB/s (%.1f%% of peak)\n",
                   tf * 1e6, (double)chunk / tf / 1e9,
                   bw > 0 ? 100.0 * 4.0 * (double)chunk / tf / 1e9 / bw : 0.0, all, ta * 1e6,
                   (double)chunk / ta / 1e9,
                   bw > 0 ? 100.0 * 4.0 * (double)chunk / ta / 1e9 / bw : 0.0);
        }
        free(dgs);
    }
    /* a device sender's baseline stream (device_baseline=host): 4 MiB
     * chunks to the device from pageable memory, then from the same
     * buffer page-locked (what the sender does to its copy) */
    if (nchunks > 0) {
        dc_perf_metric_t pg, pl;
        dc_perf_metric_init(&pg, "h2d-pageable", "s");
        dc_perf_metric_init(&pl, "h2d-locked", "s");
        for (int locked = 0; locked < 2; locked++) {
            if (locked && dc_kern_cuda_host_register(a, bytes) != DC_OK) {
                printf("baseline stream: page-locking failed: %s\n", dc_last_error());
                break;
            }
            for (int r = 0; r < reps + 1; r++) {
                uint64_t t0 = dc_now_ns();
                for (size_t i = 0; i < nchunks; i++)
                    CK(dc_kern_cuda_h2d((uint8_t *)dd + i * chunk, (const uint8_t *)a + i * chunk,
                                        chunk),
                       "h2d chunk");
                if (r > 0)
                    dc_perf_metric_add(locked ? &pl : &pg,
                                       (double)(dc_now_ns() - t0) / 1e9 / (double)nchunks);
            }
            if (locked) {
                dc_kern_cuda_host_unregister(a);
                double tp = dc_perf_median(&pg), tl = dc_perf_median(&pl);
                printf("baseline stream, 4 MiB chunks host to device: pageable %.1f us, "
                       "%.1f GB/s; page-locked %.1f us, %.1f GB/s (%.2fx)\n",
                       tp * 1e6, (double)chunk / tp / 1e9, tl * 1e6, (double)chunk / tl / 1e9,
                       tp / tl);
            }
        }
    }
    dc_kern_cuda_free(da);
    dc_kern_cuda_free(db);
    dc_kern_cuda_free(dd);
    dc_kern_cuda_free(dpos);
    dc_kern_cuda_free(dx);
    dc_kern_cuda_free(dv);
    free(a);
    free(b);
    return 0;
}
