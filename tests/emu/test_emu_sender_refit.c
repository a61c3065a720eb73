/*
 * test_emu_sender_refit.c - a multi-node refit (real processes, loopback
 * TCP) whose SENDER holds its weights in CUDA device memory, on the
 * emulated CUDA runtime (cuda_emu_rt.h: device memory is an arena host code
 * must not touch).  Node 0 is this process's trainer with its weights in
 * the arena (engine/devsend.c: diff and model on the device, lists to the
 * host); node 1 a device receiver (device apply, a thread of this
 * process), node 2 a receiver process on a file.  Every version is checked
 * byte-exact on every receiver; per version the test prints the bytes the
 * sender moved across the emulated PCIe (H2D + D2H) against the payload
 * and against staging (2 x the sender's chunks: each copied to the host to
 * encode, and again at the commit into its baseline copy).  Once with the
 * baseline copy in device memory (ctx model), once on the host (streamed
 * chunk by chunk; order0 model).
 */
#include <criterion/criterion.h>

#include "cuda_emu_rt.h"
#include "emu_job.h"
#include "engine/refit_util.h"

#include "deltacast.h"
#include "kernels/kern_cuda.h"
#include "kernels/kern_cuda_ops.h"
#include "kernels/safetensors.h"
#include "topology/topo.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#define report(...) (fprintf(stderr, "emu_sender_refit: " __VA_ARGS__), fputc('\n', stderr))

TestSuite(emu_sender_refit, .init = setup);

/* Weights in device memory, one arena segment per tensor; split: the
 * largest tensor in two segments, so that the chunk holding the cut spans
 * them (gathered device to device by the sender; its length in spans). */
typedef struct devw {
    size_t nt, ns;
    dc_refit_tensor_t *tens;
    dc_refit_segment_t *segs;
    uint64_t spans;
} devw_t;

static void devw_load_split(devw_t *d, int v, int split)
{
    dc_st_file_t *f = open_version(v);
    if (!d->segs) {
        d->nt = dc_st_count(f);
        d->tens = calloc(d->nt, sizeof(*d->tens));
        d->segs = calloc(d->nt + 1, sizeof(*d->segs));
        size_t big = 0;
        for (size_t i = 0; i < d->nt; i++) {
            const dc_st_tensor_t *t = dc_st_tensor(f, i);
            if (t->end - t->begin > dc_st_tensor(f, big)->end - dc_st_tensor(f, big)->begin)
                big = i;
        }
        for (size_t i = 0; i < d->nt; i++) {
            const dc_st_tensor_t *t = dc_st_tensor(f, i);
            d->tens[i] = (dc_refit_tensor_t){strdup(t->name), dc_dtype_name(t->dtype), t->nelems};
            uint64_t len = t->end - t->begin, cut = split && i == big ? len / 3 : len;
            uint64_t parts[2][2] = {{0, cut}, {cut, len - cut}};
            for (int k = 0; k < 2; k++) {
                if (!parts[k][1])
                    continue;
                void *p = NULL;
                cr_assert_eq(dc_kern_cuda_malloc(&p, parts[k][1]), DC_OK);
                cr_assert(g_real || dc_emu_is_device(p));
                d->segs[d->ns++] =
                    (dc_refit_segment_t){d->tens[i].name, parts[k][0], parts[k][1], p};
            }
            if (cut < len) {
                /* the chunk holding byte `cut` (chunks of 64 KiB from the tensor's start) */
                uint64_t c0 = cut / 65536 * 65536;
                d->spans = len - c0 < 65536 ? len - c0 : 65536;
                cr_assert_neq(cut, c0, "the cut falls on a chunk boundary");
            }
        }
    }
    for (size_t k = 0; k < d->ns; k++) {
        const dc_st_tensor_t *t = tensor_named(f, d->segs[k].tensor);
        cr_assert_eq(dc_kern_cuda_h2d(d->segs[k].ptr, dc_st_data(f, t) + d->segs[k].offset,
                                      d->segs[k].length),
                     DC_OK);
    }
    dc_st_close(f);
}

static void devw_load(devw_t *d, int v)
{
    devw_load_split(d, v, 0);
}

static int devw_exact(const devw_t *d, int v)
{
    dc_st_file_t *f = open_version(v);
    int ok = 1;
    for (size_t i = 0; i < d->ns && ok; i++) {
        const dc_st_tensor_t *t = tensor_named(f, d->segs[i].tensor);
        uint8_t *back = malloc(d->segs[i].length);
        cr_assert_eq(dc_kern_cuda_d2h(back, d->segs[i].ptr, d->segs[i].length), DC_OK);
        ok = memcmp(back, dc_st_data(f, t) + d->segs[i].offset, d->segs[i].length) == 0;
        free(back);
    }
    dc_st_close(f);
    return ok;
}

static void devw_free(devw_t *d)
{
    for (size_t k = 0; k < d->ns; k++)
        dc_kern_cuda_free(d->segs[k].ptr);
    for (size_t k = 0; k < d->nt; k++)
        free((char *)d->tens[k].name);
    free(d->segs);
    free(d->tens);
}

typedef struct devrx {
    dc_refit_node_opts_t cfg;
    char sd[256];
    devw_t w;
    pthread_t th;
    dc_status_t st;
    char why[512];
} devrx_t;

static void *devrx_main(void *arg)
{
    devrx_t *r = arg;
    r->st = dc_refit_node_run(&r->cfg);
    snprintf(r->why, sizeof(r->why), "%s", dc_last_error());
    return NULL;
}

/* Bytes across PCIe: emulated, every copy the runtime made (the kernels'
 * own result copies too: the digest, counts, the model's histogram); on
 * a GPU, the library's count of its h2d / d2h calls. */
static void pcie_all(uint64_t *h2d, uint64_t *d2h)
{
    if (g_real)
        dc_kern_cuda_pcie(h2d, d2h);
    else
        dc_emu_pcie(h2d, d2h);
}

/* copies made by thread th since the last look (*last: its counters then) */
static uint64_t thread_bytes(pthread_t th, uint64_t last[2], uint64_t *h2d, uint64_t *d2h)
{
    uint64_t a = 0, b = 0;
    if (g_real)
        dc_kern_cuda_pcie_of(th, &a, &b);
    else
        dc_emu_pcie_of(th, &a, &b);
    *h2d = a - last[0];
    *d2h = b - last[1];
    last[0] = a;
    last[1] = b;
    return *h2d + *d2h;
}

/* Version v's first chunk of its largest tensor becomes random bytes (a
 * dense chunk: staged by the device sender); returns its length. */
static uint64_t make_dense_chunk(int v)
{
    dc_st_file_t *f = open_version(v);
    size_t big = 0;
    for (size_t i = 0; i < dc_st_count(f); i++)
        if (dc_st_tensor(f, i)->end - dc_st_tensor(f, i)->begin >
            dc_st_tensor(f, big)->end - dc_st_tensor(f, big)->begin)
            big = i;
    const dc_st_tensor_t *t = dc_st_tensor(f, big);
    uint64_t len = t->end - t->begin, cl = len < 65536 ? len : 65536;
    uint64_t at = dc_st_data_offset(f) + t->begin;
    dc_st_close(f);
    uint8_t *junk = malloc(cl);
    for (uint64_t i = 0; i < cl; i++)
        junk[i] = (uint8_t)(i * 2654435761u >> 13);
    char p[256];
    snprintf(p, sizeof(p), "%s/ver/v%d.safetensors", J.dir, v);
    int fd = open(p, O_WRONLY);
    cr_assert_geq(fd, 0);
    cr_assert_eq(pwrite(fd, junk, cl, (off_t)at), (ssize_t)cl);
    close(fd);
    free(junk);
    return cl;
}

/* lock: config device_baseline_lock (a host baseline page-locked or not) */
static void refit(const char *baseline, const char *model, int lock)
{
    const char *params = getenv("DELTACAST_TEST_PARAMS");
    job_init(&J, 1, 2, params && *params ? params : "1e5", 2, "optimizer");
    report("%s CUDA runtime; device_baseline=%s, codec_model=%s",
           g_real ? "the GPU's" : "the emulated", baseline, model);
    setenv("DELTACAST_TIMEOUT_MS", "1000", 1);
    setenv("DELTACAST_TRANSPORT", "tcp", 1);
    setenv("DELTACAST_CODEC_MODEL", model, 1);
    setenv("DELTACAST_DEVICE_BASELINE", baseline, 1);
    setenv("DELTACAST_DEVICE_BASELINE_LOCK", lock ? "1" : "0", 1);
    devw_t tr;
    memset(&tr, 0, sizeof(tr));
    uint64_t dl = make_dense_chunk(2);
    devw_load_split(&tr, 0, 1);
    report("the sender's chunk across its two segments: %llu B; v2's dense chunk (staged): "
           "%llu B", (unsigned long long)tr.spans, (unsigned long long)dl);
    dc_topo_t *topo;
    cr_assert_eq(dc_topo_synthetic_local(1, 2, (uint16_t)J.port, &topo), DC_OK);
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
    cfg.abort_ms = 20000; /* the emulated kernels are slow */
    dc_refit_node_opts_t scfg = cfg;
    scfg.segments = tr.segs;
    scfg.n_segments = tr.ns;
    scfg.memory = DC_REFIT_MEM_CUDA;
    uint64_t all0[2], me_last[2] = {0, 0}, rx_last[2] = {0, 0}, h, d;
    pcie_all(&all0[0], &all0[1]);
    thread_bytes(pthread_self(), me_last, &h, &d);
    dc_refit_sender_t *s = NULL;
    cr_assert_eq(dc_refit_sender_open(&scfg, &s), DC_OK, "%s", dc_last_error());
    devrx_t rx;
    memset(&rx, 0, sizeof(rx));
    devw_load(&rx.w, 0);
    rx.cfg = cfg;
    rx.cfg.rank = 1;
    snprintf(rx.sd, sizeof(rx.sd), "%s/state/1", J.dir);
    rx.cfg.state_dir = rx.sd;
    rx.cfg.memory = DC_REFIT_MEM_CUDA;
    rx.cfg.segments = rx.w.segs;
    rx.cfg.n_segments = rx.w.ns;
    rx.cfg.tensors = rx.w.tens;
    rx.cfg.n_tensors = rx.w.nt;
    cr_assert_eq(pthread_create(&rx.th, NULL, devrx_main, &rx), 0);
    job_start(&J, 2, NULL, NULL);
    uint64_t mb = 0;
    for (size_t i = 0; i < tr.ns; i++)
        mb += tr.segs[i].length;
    uint64_t prev[2];
    pcie_all(&prev[0], &prev[1]);
    thread_bytes(pthread_self(), me_last, &h, &d);
    uint64_t snd_total = 0, pay_total = 0, locked0 = g_real ? 0 : dc_emu_h2d_locked();
    for (int v = 1; v <= 2; v++) {
        devw_load_split(&tr, v, 1);
        dc_refit_version_stats_t vs = {.size = sizeof(vs)};
        dc_status_t st = dc_refit_sender_push(s, NULL, 0, &vs);
        if (st != DC_OK)
            job_dump_logs(&J);
        cr_assert_eq(st, DC_OK, "push v%d: %s", v, dc_last_error());
        cr_assert(job_exact(&J, 2, v), "node 2 (file) is not v%d", v);
        uint64_t mh, md, rh, rd, now[2];
        thread_bytes(pthread_self(), me_last, &mh, &md); /* the test's own uploads */
        thread_bytes(rx.th, rx_last, &rh, &rd);
        pcie_all(&now[0], &now[1]);
        uint64_t sh = now[0] - prev[0] - mh - rh, sdn = now[1] - prev[1] - md - rd;
        prev[0] = now[0];
        prev[1] = now[1];
        report("v%d (%llu B staged: the dense chunk): model %llu B, payload %llu B (all edges; one edge %llu B), repair %llu B; "
               "device SENDER across PCIe: H2D %llu + D2H %llu = %llu B = %.2fx one edge's "
               "payload, %.1f%% of staging (2 x %llu B); device receiver H2D %llu + D2H %llu",
               v, (unsigned long long)(v == 2 ? dl : 0), (unsigned long long)mb,
               (unsigned long long)vs.payload_bytes,
               (unsigned long long)(vs.payload_bytes / 2), (unsigned long long)vs.repair_bytes,
               (unsigned long long)sh, (unsigned long long)sdn,
               (unsigned long long)(sh + sdn),
               (double)(sh + sdn) / (double)(vs.payload_bytes / 2 ? vs.payload_bytes / 2 : 1),
               100.0 * (double)(sh + sdn) / (2.0 * (double)mb), (unsigned long long)mb,
               (unsigned long long)rh, (unsigned long long)rd);
        cr_assert(devw_exact(&rx.w, v), "node 1 (device receiver) is not v%d", v);
        thread_bytes(pthread_self(), me_last, &mh, &md);
        pcie_all(&prev[0], &prev[1]);
        /* v2's dense chunk is staged: twice across (device baseline:
         * next and base to the host; host baseline: next to the host to
         * encode, and again at the commit); every other chunk (the one
         * spanning two segments too) sends lists down; host baseline:
         * every chunk's baseline up once (the stream) */
        uint64_t sl = v == 2 ? dl : 0;
        cr_assert_geq(sdn, 2 * sl, "the dense chunk was not staged (D2H %llu)",
                      (unsigned long long)sdn);
        cr_assert_gt(sdn, 2 * sl, "the sender moved no lists: not encoded on the device?");
        cr_assert_lt(sdn, 2 * sl + mb / 4, "the device sender copied chunks to the host");
        if (strcmp(baseline, "host") == 0) {
            /* the dense chunk's baseline went up before its diff showed it
             * dense; beside it only the rANS tables of the values coded on
             * the device (4 B a symbol) */
            cr_assert(sh >= mb && sh - mb <= mb / 64, "the baseline stream is not the sender's "
                      "chunks once (H2D %llu)", (unsigned long long)sh);
            if (!g_real) {
                /* ... from the page-locked baseline copy, all of it (none
                 * with device_baseline_lock=0) */
                uint64_t lk = dc_emu_h2d_locked();
                cr_assert_eq(lk - locked0, lock ? mb : 0, "%llu of the %llu baseline stream "
                             "bytes came from page-locked memory (lock %d)",
                             (unsigned long long)(lk - locked0), (unsigned long long)mb, lock);
                locked0 = lk;
                if (lock)
                    cr_assert_geq(dc_emu_locked_bytes(), mb, "the baseline copy is not "
                                  "page-locked");
                else
                    cr_assert_eq(dc_emu_locked_bytes(), 0, "page-locked though "
                                 "device_baseline_lock=0");
            }
        } else {
            cr_assert_lt(sh, mb / 4, "a device baseline sender copied chunks to the device");
        }
        snd_total += sh + sdn;
        pay_total += vs.payload_bytes / 2;
    }
    cr_assert_eq(dc_refit_sender_close(s), DC_OK, "%s", dc_last_error());
    if (!g_real)
        cr_assert_eq(dc_emu_locked_bytes(), 0, "%zu host bytes still page-locked after close",
                     dc_emu_locked_bytes());
    pthread_join(rx.th, NULL);
    cr_assert_eq(rx.st, DC_OK, "device receiver: %s", rx.why);
    int rc = job_wait(&J, 2, 30);
    if (rc != 0)
        job_dump_logs(&J);
    cr_assert_eq(rc, 0, "node 2 exit %d", rc);
    report("total: device sender %llu B across PCIe for %llu B of payload per edge; staging "
           "would move %llu B", (unsigned long long)snd_total, (unsigned long long)pay_total,
           (unsigned long long)(4 * mb));
    devw_free(&rx.w);
    devw_free(&tr);
    dc_topo_free(topo);
    job_fini(&J);
}

Test(emu_sender_refit, device_sender_device_baseline_ctx, .timeout = 240)
{
    refit("device", "ctx", 1);
}

Test(emu_sender_refit, device_sender_host_baseline_order0, .timeout = 240)
{
    refit("host", "order0", 1);
}

Test(emu_sender_refit, device_sender_host_baseline_unlocked, .timeout = 240)
{
    refit("host", "ctx", 0);
}
