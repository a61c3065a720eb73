/*
 * emu_refit_util.h - what the emulated-runtime refit tests (test_emu_refit.c,
 * test_emu_refit_kinds.c) share beside emu_job.h (the job, the runtime
 * choice, versions by tensor name): the trainer's weights in
 * host pieces, device receivers on threads of this process with their PCIe
 * byte counts and byte-exact checks.  Included once per test program.
 */
#ifndef DC_TEST_EMU_REFIT_UTIL_H
#define DC_TEST_EMU_REFIT_UTIL_H

#include <criterion/criterion.h>

#include "cuda_emu_rt.h"
#include "emu_job.h"
#include "engine/refit_util.h"

#include "deltacast.h"
#include "engine/devpath.h"
#include "kernels/codec.h"
#include "kernels/entropy.h"
#include "kernels/kern_cuda.h"
#include "kernels/kern_cuda_ops.h"
#include "kernels/safetensors.h"
#include "topology/topo.h"

#include <pthread.h>

/* The trainer's weights (host), each tensor in two pieces. */
typedef struct trainer {
    size_t nt, ns;
    dc_refit_tensor_t *tens;
    dc_refit_segment_t *segs;
} trainer_t;

static void trainer_load(trainer_t *tr, int v)
{
    dc_st_file_t *f = open_version(v);
    if (!tr->segs) {
        tr->nt = dc_st_count(f);
        tr->tens = calloc(tr->nt, sizeof(*tr->tens));
        tr->segs = calloc(2 * tr->nt, sizeof(*tr->segs));
        for (size_t i = 0; i < tr->nt; i++) {
            const dc_st_tensor_t *t = dc_st_tensor(f, i);
            tr->tens[i] = (dc_refit_tensor_t){strdup(t->name), dc_dtype_name(t->dtype), t->nelems};
            uint64_t len = t->end - t->begin, third = len / 3;
            uint64_t parts[2][2] = {{0, third}, {third, len - third}};
            for (int k = 0; k < 2; k++)
                if (parts[k][1])
                    tr->segs[tr->ns++] = (dc_refit_segment_t){tr->tens[i].name, parts[k][0],
                                                              parts[k][1], malloc(parts[k][1])};
        }
    }
    for (size_t k = 0; k < tr->ns; k++)
        memcpy(tr->segs[k].ptr,
               dc_st_data(f, tensor_named(f, tr->segs[k].tensor)) + tr->segs[k].offset,
               tr->segs[k].length);
    dc_st_close(f);
}

/* A device receiver: one arena segment per tensor, run on a thread. */
typedef struct devrx {
    dc_refit_node_opts_t cfg;
    char sd[256];
    dc_refit_segment_t *segs;
    size_t ns;
    int stage; /* the staging path (baseline) instead of the device apply */
    pthread_t th;
    dc_status_t st;
    char why[512];
    uint64_t h2d, d2h; /* at the last look */
} devrx_t;

static void *devrx_main(void *arg)
{
    devrx_t *r = arg;
    dc_devpath_force_stage = r->stage;
    r->st = dc_refit_node_run(&r->cfg);
    snprintf(r->why, sizeof(r->why), "%s", dc_last_error());
    return NULL;
}

static void devrx_start(devrx_t *r, const dc_refit_node_opts_t *base, const trainer_t *tr, int rank,
                        int stage)
{
    memset(r, 0, sizeof(*r));
    dc_st_file_t *f = open_version(0);
    r->ns = tr->nt;
    r->segs = calloc(r->ns, sizeof(*r->segs));
    for (size_t i = 0; i < tr->nt; i++) {
        const dc_st_tensor_t *t = tensor_named(f, tr->tens[i].name);
        size_t len = t->end - t->begin;
        void *d = NULL;
        cr_assert_eq(dc_kern_cuda_malloc(&d, len), DC_OK, "%s", dc_last_error());
        cr_assert(g_real || dc_emu_is_device(d));
        cr_assert_eq(dc_kern_cuda_h2d(d, dc_st_data(f, t), len), DC_OK);
        r->segs[i] = (dc_refit_segment_t){tr->tens[i].name, 0, len, d};
    }
    dc_st_close(f);
    r->cfg = *base;
    r->cfg.rank = (uint32_t)rank;
    snprintf(r->sd, sizeof(r->sd), "%s/state/%d", J.dir, rank);
    r->cfg.state_dir = r->sd;
    r->cfg.memory = DC_REFIT_MEM_CUDA;
    r->cfg.segments = r->segs;
    r->cfg.n_segments = r->ns;
    r->stage = stage;
    cr_assert_eq(pthread_create(&r->th, NULL, devrx_main, r), 0);
}

/* Node r's device bytes are version v's, byte for byte. */
static int devrx_exact(const devrx_t *r, int v)
{
    dc_st_file_t *f = open_version(v);
    int ok = 1;
    for (size_t i = 0; i < r->ns && ok; i++) {
        const dc_st_tensor_t *t = tensor_named(f, r->segs[i].tensor);
        uint8_t *back = malloc(r->segs[i].length);
        cr_assert_eq(dc_kern_cuda_d2h(back, r->segs[i].ptr, r->segs[i].length), DC_OK);
        ok = memcmp(back, dc_st_data(f, t), r->segs[i].length) == 0;
        free(back);
    }
    dc_st_close(f);
    return ok;
}

/* Bytes r's thread moved across the emulated PCIe since the last look. */
static void devrx_delta(devrx_t *r, uint64_t *h2d, uint64_t *d2h)
{
    uint64_t a, b;
    cr_assert(dc_kern_cuda_pcie_of(r->th, &a, &b) || (r->h2d == 0 && r->d2h == 0),
              "no copies counted for the receiver's thread");
    *h2d = a - r->h2d;
    *d2h = b - r->d2h;
    r->h2d = a;
    r->d2h = b;
}

static uint64_t model_bytes(const devrx_t *r)
{
    uint64_t s = 0;
    for (size_t i = 0; i < r->ns; i++)
        s += r->segs[i].length;
    return s;
}

#endif /* DC_TEST_EMU_REFIT_UTIL_H */
