/*
 * test_emu_refit_kinds.c - a multi-node refit (real processes, loopback
 * TCP) whose device receiver gets every chunk kind, on the emulated CUDA
 * runtime (cuda_emu_rt.h): the trainer (this process) forces the kind of
 * each version (kernels/codec.h dc_codec_force_kind): xor-sparse,
 * put-sparse (with a repair: node 2's device bytes damaged, an overwrite
 * fixes them), xor-dense, put-dense, ctx-sparse; then a version aborted
 * (node 3 killed) in put-sparse or put-dense, undone on the device from
 * the device undo records / undo copies (engine/devdense.c).  Node 1 stages
 * every chunk through the host (the baseline), node 2 applies on the
 * device; node 3 is a receiver process on a file.  Per version the test
 * prints the bytes node 2 moved across the emulated PCIe and checks them
 * <= 1.5x its payload, and every receiver byte-exact.
 */
#include "emu_refit_util.h"

/* The figures, in the test log (cr_log_warn would make the run exit 1). */
#define report(...) (fprintf(stderr, "emu_refit_kinds: " __VA_ARGS__), fputc('\n', stderr))

TestSuite(emu_refit_kinds, .init = setup);

/* a forced kind's name for the log (0: the codec's own choice) */
static const char *kind_name(unsigned k)
{
    return k ? dc_enc_kind_name(k) : "automatic";
}

/* versions 1..5 in these kinds, version 6 aborted in abort_kind */
static void kinds_case(unsigned abort_kind)
{
    static const unsigned kinds[] = {DC_ENC_XOR_SPARSE, DC_ENC_PUT_SPARSE, DC_ENC_XOR_DENSE,
                                     DC_ENC_PUT_DENSE, DC_ENC_CTX};
    const int nv = (int)DC_ARRAY_SIZE(kinds);
    const char *params = getenv("DELTACAST_TEST_PARAMS"); /* gpu-check: larger */
    job_init(&J, 1, 3, params && *params ? params : "1e5", nv + 1, "optimizer");
    report("%s CUDA runtime, every chunk kind, the abort in %s",
           g_real ? "the GPU's" : "the emulated", kind_name(abort_kind));
    dc_codec_pos_method = 0;
    setenv("DELTACAST_TIMEOUT_MS", "1000", 1);
    setenv("DELTACAST_TRANSPORT", "tcp", 1);
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
    cfg.abort_ms = 4000;
    dc_refit_node_opts_t scfg = cfg;
    scfg.segments = tr.segs;
    scfg.n_segments = tr.ns;
    dc_refit_sender_t *s = NULL;
    cr_assert_eq(dc_refit_sender_open(&scfg, &s), DC_OK, "%s", dc_last_error());
    devrx_t rx[2]; /* nodes 1 (staging) and 2 (device apply) */
    devrx_start(&rx[0], &cfg, &tr, 1, 1);
    devrx_start(&rx[1], &cfg, &tr, 2, 0);
    job_start(&J, 3, NULL, NULL);
    const uint64_t mb = model_bytes(&rx[0]);
    for (int v = 1; v <= nv; v++) {
        const unsigned kind = kinds[v - 1];
        trainer_load(&tr, v);
        const int repair = kind == DC_ENC_PUT_SPARSE;
        if (repair) {
            /* damage node 2's first chunk: the apply gives the wrong
             * digest, an overwrite (put-dense) repairs it */
            uint8_t junk[8] = {1, 2, 3, 4, 5, 6, 7, 8};
            cr_assert_eq(dc_kern_cuda_h2d(rx[1].segs[0].ptr, junk, sizeof(junk)), DC_OK);
        }
        dc_codec_force_kind = kind;
        dc_refit_version_stats_t vs = {.size = sizeof(vs)};
        dc_status_t st = dc_refit_sender_push(s, NULL, 0, &vs);
        dc_codec_force_kind = 0;
        if (st != DC_OK)
            job_dump_logs(&J);
        cr_assert_eq(st, DC_OK, "push v%d: %s", v, dc_last_error());
        cr_assert(job_exact(&J, 3, v), "node 3 (file) is not v%d", v);
        uint64_t h[2], d[2];
        for (int i = 0; i < 2; i++)
            devrx_delta(&rx[i], &h[i], &d[i]);
        dc_devpath_totals(&t1);
        uint64_t pay2 = t1.payload_bytes - t0.payload_bytes;
        report("v%d %-10s: model %llu B, payload %llu B (all edges), repair %llu B; node 1 "
               "staging %llu B across PCIe; node 2 device apply H2D %llu + D2H %llu = %llu "
               "B, %.2fx the %llu payload bytes of its %llu frames (ctx %llu, put-sparse "
               "%llu, dense decoded on the device %llu, zstd on the host %llu, undo copies "
               "%llu, staged %llu)",
               v, kind_name(kind), (unsigned long long)mb, (unsigned long long)vs.payload_bytes,
               (unsigned long long)vs.repair_bytes, (unsigned long long)(h[0] + d[0]),
               (unsigned long long)h[1], (unsigned long long)d[1],
               (unsigned long long)(h[1] + d[1]),
               (double)(h[1] + d[1]) / (double)(pay2 ? pay2 : 1), (unsigned long long)pay2,
               (unsigned long long)(t1.frames - t0.frames),
               (unsigned long long)(t1.dev_ctx - t0.dev_ctx),
               (unsigned long long)(t1.dev_put_sparse - t0.dev_put_sparse),
               (unsigned long long)(t1.dev_dense - t0.dev_dense),
               (unsigned long long)(t1.host_zstd - t0.host_zstd),
               (unsigned long long)(t1.dev_copies - t0.dev_copies),
               (unsigned long long)(t1.staged - t0.staged));
        cr_assert_eq(t1.staged, t0.staged, "v%d (%s): chunks were staged", v, kind_name(kind));
        if (kind == DC_ENC_PUT_SPARSE)
            cr_assert_gt(t1.dev_put_sparse, t0.dev_put_sparse, "v%d: no put-sparse chunk", v);
        if (kind == DC_ENC_XOR_DENSE || kind == DC_ENC_PUT_DENSE)
            cr_assert_gt(t1.dev_dense + t1.host_zstd, t0.dev_dense + t0.host_zstd,
                         "v%d: no dense chunk", v);
        if (kind == DC_ENC_PUT_DENSE)
            cr_assert_gt(t1.dev_copies, t0.dev_copies, "v%d: no undo copy on the device", v);
        if (kind == DC_ENC_CTX)
            cr_assert_gt(t1.dev_ctx, t0.dev_ctx, "v%d: no ctx chunk", v);
        if (repair)
            cr_assert_gt(vs.repair_bytes, 0, "node 2's damaged chunk was not repaired");
        cr_assert_leq((double)(h[1] + d[1]), 1.5 * (double)pay2,
                      "v%d (%s): node 2 moved more than 1.5x its payload across PCIe", v,
                      kind_name(kind));
        t0 = t1;
        for (int i = 0; i < 2; i++)
            cr_assert(devrx_exact(&rx[i], v), "node %d (device) is not v%d", i + 1, v);
    }
    /* abort: node 3 gone, v6 is applied by the device receivers and undone
     * there; they are back at v5 */
    job_kill(&J, 3);
    trainer_load(&tr, nv + 1);
    dc_codec_force_kind = abort_kind;
    cr_assert_eq(dc_refit_sender_push(s, NULL, 0, NULL), DC_ERR_CANCELED, "%s", dc_last_error());
    dc_codec_force_kind = 0;
    cr_assert_eq(dc_refit_sender_close(s), DC_ERR_CANCELED);
    uint64_t h[2], d[2];
    for (int i = 0; i < 2; i++) {
        pthread_join(rx[i].th, NULL);
        devrx_delta(&rx[i], &h[i], &d[i]);
        report("v%d %-10s (aborted): node %d (%s) H2D %llu + D2H %llu; exit: %s", nv + 1,
               kind_name(abort_kind), i + 1, i == 0 ? "staging" : "device apply",
               (unsigned long long)h[i], (unsigned long long)d[i],
               rx[i].st == DC_OK ? "ok" : rx[i].why);
        cr_assert(devrx_exact(&rx[i], nv), "node %d (device) is not back at v%d after the abort",
                  i + 1, nv);
    }
    cr_assert_gt(h[1], 0, "node 2 applied nothing of v%d (the undo was not exercised)", nv + 1);
    dc_devpath_totals(&t1);
    report("v%d: %llu chunks undone from device records or copies, %llu put-dense undo copies "
           "made", nv + 1, (unsigned long long)(t1.undone_rec - t0.undone_rec),
           (unsigned long long)(t1.dev_copies - t0.dev_copies));
    cr_assert_gt(t1.undone_rec, t0.undone_rec, "no chunk was undone from a device record");
    if (abort_kind == DC_ENC_PUT_DENSE)
        cr_assert_gt(t1.dev_copies, t0.dev_copies, "no undo copy made on the device");
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

Test(emu_refit_kinds, every_kind_exact_abort_in_put_sparse, .timeout = 240)
{
    kinds_case(DC_ENC_PUT_SPARSE);
}

Test(emu_refit_kinds, every_kind_exact_abort_in_put_dense, .timeout = 240)
{
    kinds_case(DC_ENC_PUT_DENSE);
}
