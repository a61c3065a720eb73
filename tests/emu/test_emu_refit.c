/*
 * test_emu_refit.c - a multi-node refit (real processes, loopback TCP) with
 * receivers whose weights are CUDA device memory, on the emulated CUDA
 * runtime (cuda_emu_rt.h: device memory is an arena host code must not
 * touch).  Node 0 is this process's trainer (host memory, codec model
 * order0), nodes 1 and 2 are device receivers on threads of this process,
 * node 3 a receiver process on a file.  Node 1 stages every chunk through
 * the host (today's path: the baseline), node 2 applies on the device
 * (engine/devpath.c).  Per version the test prints the bytes each device
 * receiver moved across the emulated PCIe and the two nodes' apply times
 * (the root's stats file; on a GPU, gpu-check's figures) and checks every receiver
 * byte-exact; then a repair (node 2's device bytes damaged: the digest
 * computed on the device catches it, an overwrite fixes it) and an abort
 * (node 3 killed: the device receivers undo the version on the device and
 * are back at the baseline, byte-exact).
 */
#include "emu_refit_util.h"

#include <jansson.h>

/* The figures, in the test log (cr_log_warn would make the run exit 1). */
#define report(...) (fprintf(stderr, "emu_refit: " __VA_ARGS__), fputc('\n', stderr))

TestSuite(emu_refit, .init = setup);

/* The root's stats file (stats_path): each receiver's time applying the
 * last version's frames (their digests included), as its DONE reported. */
static void apply_seconds(const char *path, double out[4])
{
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    cr_assert(root, "stats %s: %s", path, err.text);
    json_t *vs = json_object_get(root, "versions");
    cr_assert(json_is_array(vs) && json_array_size(vs) > 0, "stats: no versions");
    json_t *links = json_object_get(json_array_get(vs, json_array_size(vs) - 1), "links");
    for (int i = 0; i < 4; i++)
        out[i] = -1.0;
    for (size_t k = 0; k < json_array_size(links); k++) {
        json_t *lk = json_array_get(links, k);
        json_int_t node = json_integer_value(json_object_get(lk, "node"));
        if (node > 0 && node < 4)
            out[node] = json_number_value(json_object_get(lk, "apply_seconds"));
    }
    json_decref(root);
}

/* model: the codec model's name (order0: xor-sparse chunks), or NULL for
 * the default (ctx-sparse chunks); gaps: the trainer (this process) codes
 * every positions stream as rANS gaps (else Golomb: these chunks have
 * fewer than DC_CODEC_GAPS_MIN changes) */
static void refit_case(const char *model, int gaps)
{
    const char *params = getenv("DELTACAST_TEST_PARAMS"); /* gpu-check: larger */
    job_init(&J, 1, 3, params && *params ? params : "1e5", 3, "optimizer");
    report("%s CUDA runtime, codec model %s, %s positions", g_real ? "the GPU's" : "the emulated",
           model ? model : "the default (ctx)", gaps ? "rANS gaps" : "Golomb");
    dc_codec_pos_method = gaps ? DC_ENT_GAPS : 0;
    setenv("DELTACAST_TIMEOUT_MS", "1000", 1);
    setenv("DELTACAST_TRANSPORT", "tcp", 1);
    if (model)
        setenv("DELTACAST_CODEC_MODEL", model, 1);
    else
        unsetenv("DELTACAST_CODEC_MODEL");
    dc_devpath_totals_t t0, t1;
    dc_devpath_totals(&t0);
    trainer_t tr;
    memset(&tr, 0, sizeof(tr));
    trainer_load(&tr, 0);
    dc_topo_t *topo;
    cr_assert_eq(dc_topo_synthetic_local(1, 3, (uint16_t)J.port, &topo), DC_OK);
    char sd[256];
    snprintf(sd, sizeof(sd), "%s/state/0", J.dir);
    dc_refit_node_opts_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.size = sizeof(cfg);
    cfg.topo = topo;
    cfg.state_dir = sd;
    cfg.tensors = tr.tens;
    cfg.n_tensors = tr.nt;
    cfg.chunk_size = 64 * 1024;
    cfg.wait_ms = 20000;
    /* a receiver busy in emulated kernels (ctx and gaps: several per
     * chunk, each a barrier-heavy emulated grid of 256 threads, ~0.1 s per
     * chunk on 2 cores) under a loaded CI machine must not read as lost */
    cfg.abort_ms = gaps ? 10000 : model ? 2000 : 4000;
    dc_refit_node_opts_t scfg = cfg;
    scfg.segments = tr.segs;
    scfg.n_segments = tr.ns;
    char stats[300];
    snprintf(stats, sizeof(stats), "%s/stats.json", J.dir);
    scfg.stats_path = stats;
    dc_refit_sender_t *s = NULL;
    cr_assert_eq(dc_refit_sender_open(&scfg, &s), DC_OK, "%s", dc_last_error());
    devrx_t rx[2]; /* nodes 1 (staging) and 2 (device apply) */
    devrx_start(&rx[0], &cfg, &tr, 1, 1);
    devrx_start(&rx[1], &cfg, &tr, 2, 0);
    job_start(&J, 3, NULL, NULL);
    const uint64_t mb = model_bytes(&rx[0]);
    uint64_t dev_total = 0, stage_total = 0;
    for (int v = 1; v <= 2; v++) {
        trainer_load(&tr, v);
        if (v == 2) {
            /* damage node 2's first chunk (arena bytes, through a copy): its
             * XOR apply gives the wrong digest, an overwrite repairs it */
            uint8_t junk[8] = {1, 2, 3, 4, 5, 6, 7, 8};
            cr_assert_eq(dc_kern_cuda_h2d(rx[1].segs[0].ptr, junk, sizeof(junk)), DC_OK);
        }
        dc_refit_version_stats_t vs = {.size = sizeof(vs)};
        dc_status_t st = dc_refit_sender_push(s, NULL, 0, &vs);
        if (st != DC_OK)
            job_dump_logs(&J);
        cr_assert_eq(st, DC_OK, "push v%d: %s", v, dc_last_error());
        cr_assert(job_exact(&J, 3, v), "node 3 (file) is not v%d", v);
        uint64_t h[2], d[2];
        for (int i = 0; i < 2; i++)
            devrx_delta(&rx[i], &h[i], &d[i]);
        /* node 2's frames: the only device path in the process */
        dc_devpath_totals(&t1);
        uint64_t pay2 = t1.payload_bytes - t0.payload_bytes, ctx2 = t1.dev_ctx - t0.dev_ctx;
        report("emu refit v%d: model %llu B, payload %llu B (all edges), repair %llu B; "
               "bytes across PCIe: node 1 staging H2D %llu + D2H %llu = %llu; node 2 "
               "device apply H2D %llu + D2H %llu = %llu (%.1f%% of staging; %.2fx the %llu "
               "payload bytes of its %llu frames, %llu ctx-sparse chunks decoded on the "
               "device, %llu staged; %llu gaps streams decoded there; dense chunks decoded "
               "there %llu, put-sparse there %llu, zstd values decoded on the host %llu)",
               v, (unsigned long long)mb, (unsigned long long)vs.payload_bytes,
               (unsigned long long)vs.repair_bytes, (unsigned long long)h[0],
               (unsigned long long)d[0], (unsigned long long)(h[0] + d[0]),
               (unsigned long long)h[1], (unsigned long long)d[1],
               (unsigned long long)(h[1] + d[1]),
               100.0 * (double)(h[1] + d[1]) / (double)(h[0] + d[0] ? h[0] + d[0] : 1),
               (double)(h[1] + d[1]) / (double)(pay2 ? pay2 : 1), (unsigned long long)pay2,
               (unsigned long long)(t1.frames - t0.frames), (unsigned long long)ctx2,
               (unsigned long long)(t1.staged_ctx - t0.staged_ctx),
               (unsigned long long)(t1.dev_gaps - t0.dev_gaps),
               (unsigned long long)(t1.dev_dense - t0.dev_dense),
               (unsigned long long)(t1.dev_put_sparse - t0.dev_put_sparse),
               (unsigned long long)(t1.host_zstd - t0.host_zstd));
        double ap[4];
        apply_seconds(stats, ap);
        cr_assert(ap[1] >= 0 && ap[2] >= 0, "v%d: the stats hold no apply time of nodes 1, 2", v);
        report("emu refit v%d: apply time (frames applied and their digests, as each node's "
               "DONE reports it), side by side: node 1 staging %.3f s (its copies across PCIe "
               "included), node 2 device apply %.3f s: staging / device = %.2f%s; push to "
               "commit %.3f s",
               v, ap[1], ap[2], ap[2] > 0 ? ap[1] / ap[2] : 0.0,
               g_real ? "" : " (emulated kernels: slow by design)", vs.seconds);
        if (gaps)
            cr_assert_gt(t1.dev_gaps, t0.dev_gaps, "v%d: no gaps stream decoded on the device",
                         v);
        if (!model) {
            cr_assert_gt(ctx2, 0, "v%d: no ctx-sparse chunk was decoded on the device", v);
            cr_assert_eq(t1.staged_ctx, t0.staged_ctx, "v%d: ctx chunks were staged", v);
        }
        /* (v2's repair overwrites a chunk dense: its values stream crosses
         * as it is and is decoded on the device, engine/devdense.c) */
        cr_assert_leq((double)(h[1] + d[1]), 1.5 * (double)pay2,
                          "v%d: node 2 moved more than 1.5x its payload across PCIe", v);
        t0 = t1;
        cr_assert_gt(h[0] + d[0], 0, "node 1 moved nothing: not applied on its thread?");
        cr_assert_gt(h[1], 0, "node 2 moved nothing to the device");
        if (v == 2)
            cr_assert_gt(vs.repair_bytes, 0, "node 2's damaged chunk was not repaired");
        else
            cr_assert_lt(h[1] + d[1], h[0] + d[0], "the device apply moved no less than staging");
        dev_total += h[1] + d[1];
        stage_total += h[0] + d[0];
        for (int i = 0; i < 2; i++) {
            /* the check's own copies are the test thread's, not the node's */
            cr_assert(devrx_exact(&rx[i], v), "node %d (device) is not v%d", i + 1, v);
        }
    }
    cr_assert_lt(dev_total, stage_total);
    /* abort: node 3 gone, v3 is applied by the device receivers and undone
     * there; they are back at v2 */
    job_kill(&J, 3);
    trainer_load(&tr, 3);
    cr_assert_eq(dc_refit_sender_push(s, NULL, 0, NULL), DC_ERR_CANCELED, "%s", dc_last_error());
    cr_assert_eq(dc_refit_sender_close(s), DC_ERR_CANCELED);
    uint64_t h[2], d[2];
    for (int i = 0; i < 2; i++) {
        pthread_join(rx[i].th, NULL);
        devrx_delta(&rx[i], &h[i], &d[i]);
        report("emu refit v3 (aborted): node %d (%s) H2D %llu + D2H %llu; exit: %s", i + 1,
               i == 0 ? "staging" : "device apply", (unsigned long long)h[i],
               (unsigned long long)d[i], rx[i].st == DC_OK ? "ok" : rx[i].why);
        cr_assert(devrx_exact(&rx[i], 2), "node %d (device) is not back at v2 after the abort",
                  i + 1);
    }
    cr_assert_gt(h[1], 0, "node 2 applied nothing of v3 (the undo was not exercised)");
    dc_devpath_totals(&t1);
    report("emu refit v3: %llu ctx chunks undone from their device records",
           (unsigned long long)(t1.undone_ctx - t0.undone_ctx));
    if (!model)
        cr_assert_gt(t1.undone_ctx, t0.undone_ctx, "no ctx chunk was undone on the device");
    for (int i = 0; i < 2; i++) {
        for (size_t k = 0; k < rx[i].ns; k++)
            dc_kern_cuda_free(rx[i].segs[k].ptr);
        free(rx[i].segs);
    }
    for (size_t k = 0; k < tr.ns; k++)
        free(tr.segs[k].ptr);
    for (size_t i = 0; i < tr.nt; i++)
        free((char *)tr.tens[i].name);
    free(tr.segs);
    free(tr.tens);
    dc_topo_free(topo);
}

Test(emu_refit, device_receivers_exact_with_repair_and_abort, .timeout = 240)
{
    refit_case("order0", 0);
}

/* the default codec model: ctx-sparse chunks decoded on the device */
Test(emu_refit, ctx_device_receivers_exact_with_repair_and_abort, .timeout = 240)
{
    refit_case(NULL, 0);
}

/* every positions stream as rANS gaps: decoded on the device too */
Test(emu_refit, gaps_device_receivers_exact_with_repair_and_abort, .timeout = 240)
{
    refit_case("order0", 1);
}

Test(emu_refit, ctx_gaps_device_receivers_exact_with_repair_and_abort, .timeout = 240)
{
    refit_case(NULL, 1);
}
