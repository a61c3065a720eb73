/*
 * emu_job.h - what every emulated-runtime test with a job (test_emu_refit.c,
 * test_emu_refit_kinds.c through emu_refit_util.h, test_emu_sender_refit.c)
 * shares: the job J, the real-or-emulated CUDA runtime choice
 * (DELTACAST_TEST_REAL_CUDA=1 on a GPU: g_real; setup() is the suites'
 * init) and the job's versions by tensor name.  Included once per test
 * program.
 */
#ifndef DC_TEST_EMU_JOB_H
#define DC_TEST_EMU_JOB_H

#include <criterion/criterion.h>

#include "cuda_emu_rt.h"
#include "engine/refit_util.h"

#include "kernels/kern_cuda.h"
#include "kernels/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static job_t J;

/* DELTACAST_TEST_REAL_CUDA=1 (perf/gpu-check.sh): the same test on the
 * GPU's runtime when one is usable; bytes are counted by the library's
 * dc_kern_cuda_h2d / d2h either way. */
static int g_real;
static void setup(void)
{
    const char *r = getenv("DELTACAST_TEST_REAL_CUDA");
    g_real = r && strcmp(r, "1") == 0 && dc_kern_cuda_available();
    if (!g_real)
        dc_emu_install();
}

static dc_st_file_t *open_version(int v)
{
    char p[256];
    snprintf(p, sizeof(p), "%s/ver/v%d.safetensors", J.dir, v);
    dc_st_file_t *f;
    cr_assert_eq(dc_st_open(p, DC_ST_READ, &f), DC_OK, "%s", dc_last_error());
    return f;
}

static const dc_st_tensor_t *tensor_named(const dc_st_file_t *f, const char *name)
{
    for (size_t i = 0; i < dc_st_count(f); i++)
        if (strcmp(dc_st_tensor(f, i)->name, name) == 0)
            return dc_st_tensor(f, i);
    cr_assert_fail("no tensor '%s'", name);
    return NULL;
}

#endif /* DC_TEST_EMU_JOB_H */
