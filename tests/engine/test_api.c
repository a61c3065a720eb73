/* test_api.c - the public refit API: a receiver whose weights live in the
 * caller's memory (each tensor split over two buffers by its placement
 * map), refitted in-process by dc_refit_node_run() alongside `deltacast
 * node` processes; bytes compared with the trainer's checkpoint. */
#include "refit_util.h"

#include "deltacast.h"
#include "kernels/safetensors.h"
#include "topology/topo.h"

static job_t J;

static void fini(void)
{
    job_fini(&J);
}

TestSuite(api, .fini = fini, .timeout = 120);

Test(api, memory_receiver_with_placement_map)
{
    job_init(&J, 1, 2, "2e5", 2, "optimizer");
    int me = 2; /* this process is node 2 */
    char p[256];
    snprintf(p, sizeof(p), "%s/ver/v0.safetensors", J.dir);
    dc_st_file_t *f;
    cr_assert_eq(dc_st_open(p, DC_ST_READ, &f), DC_OK);
    size_t nt = dc_st_count(f);
    dc_refit_tensor_t *tens = calloc(nt, sizeof(*tens));
    dc_refit_segment_t *segs = calloc(2 * nt, sizeof(*segs));
    uint8_t **bufs = calloc(2 * nt, sizeof(*bufs));
    size_t ns = 0;
    for (size_t i = 0; i < nt; i++) {
        const dc_st_tensor_t *t = dc_st_tensor(f, i);
        tens[i] = (dc_refit_tensor_t){t->name, dc_dtype_name(t->dtype), t->nelems};
        uint64_t len = t->end - t->begin, half = len / 3;
        const uint8_t *src = dc_st_data(f, t);
        uint64_t parts[2][2] = {{0, half}, {half, len - half}};
        for (int k = 0; k < 2; k++) {
            if (parts[k][1] == 0)
                continue;
            bufs[ns] = malloc(parts[k][1]);
            memcpy(bufs[ns], src + parts[k][0], parts[k][1]);
            segs[ns] = (dc_refit_segment_t){t->name, parts[k][0], parts[k][1], bufs[ns]};
            ns++;
        }
    }
    job_start(&J, 0, NULL, NULL);
    job_start(&J, 1, NULL, NULL);
    setenv("DELTACAST_SECRET", "refit-test-secret", 1);
    setenv("DELTACAST_TIMEOUT_MS", "1000", 1);
    setenv("DELTACAST_TRANSPORT", "tcp", 1);
    dc_topo_t *topo;
    cr_assert_eq(dc_topo_synthetic_local(1, 2, (uint16_t)J.port, &topo), DC_OK);
    char sd[256];
    snprintf(sd, sizeof(sd), "%s/state/%d", J.dir, me);
    dc_refit_node_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.size = sizeof(cfg);
    cfg.topo = topo;
    cfg.rank = (uint32_t)me;
    cfg.state_dir = sd;
    cfg.tensors = tens;
    cfg.n_tensors = nt;
    cfg.segments = segs;
    cfg.n_segments = ns;
    cfg.chunk_size = 64 * 1024;
    dc_status_t st = dc_refit_node_run(&cfg);
    if (st != DC_OK)
        job_dump_logs(&J);
    cr_assert_eq(st, DC_OK, "%s", dc_last_error());
    cr_assert_eq(job_wait(&J, 0, 30), 0);
    /* compare memory with v2 */
    snprintf(p, sizeof(p), "%s/ver/v2.safetensors", J.dir);
    dc_st_file_t *g;
    cr_assert_eq(dc_st_open(p, DC_ST_READ, &g), DC_OK);
    size_t k = 0;
    for (size_t i = 0; i < nt; i++) {
        const dc_st_tensor_t *t = dc_st_tensor(g, i);
        const uint8_t *want = dc_st_data(g, t);
        for (; k < ns && strcmp(segs[k].tensor, t->name) == 0; k++)
            cr_assert(memcmp(segs[k].ptr, want + segs[k].offset, segs[k].length) == 0,
                      "tensor %s differs at segment %zu", t->name, k);
    }
    cr_assert_eq(k, ns);
    uint64_t v = 0, b = 0, d[2];
    snprintf(sd, sizeof(sd), "%s/state/0", J.dir);
    cr_assert_eq(dc_refit_committed(sd, &v, &b, d), DC_OK);
    cr_assert_eq(v, 2);
    cr_assert_eq(b, 1);
    cr_assert(job_exact(&J, 1, 2), "receiver 1 not exact"); /* node 2 is this process */
    dc_st_close(g);
    dc_st_close(f);
    dc_topo_free(topo);
    for (size_t i = 0; i < ns; i++)
        free(bufs[i]);
    free(bufs);
    free(segs);
    free(tens);
}
