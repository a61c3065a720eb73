/*
 * test_gpumem.c - verbs/gpumem.c: recognising device memory, the hop CRC32C
 * and copies by memory kind.  The host cases run everywhere; the device
 * cases skip with a reason without a GPU (and, in a build without CUDA,
 * device memory must be refused, never read by the CPU).
 */
#include <criterion/criterion.h>

#include "kernels/kern.h"
#include "kernels/kern_cuda.h"
#include "verbs/fault.h"
#include "verbs/gpumem.h"

#include <stdlib.h>
#include <string.h>

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (uint8_t)(seed >> 16);
    }
}

Test(gpumem, host_memory_is_host)
{
    static uint8_t st[100];
    uint8_t stack[100];
    uint8_t *heap = malloc(1 << 20);
    cr_assert_eq(dc_verbs_is_cuda_ptr(NULL), 0);
    cr_assert_eq(dc_verbs_is_cuda_ptr(st), 0);
    cr_assert_eq(dc_verbs_is_cuda_ptr(stack), 0);
    cr_assert_eq(dc_verbs_is_cuda_ptr(heap), 0);
    cr_assert_eq(dc_verbs_buf_kind(0, heap), DC_VERBS_MEM_HOST);
    cr_assert_eq(dc_verbs_buf_kind(DC_VERBS_MEM_CUDA, heap), DC_VERBS_MEM_CUDA,
                 "a registration's kind wins");
    fill(heap, 1 << 20, 1);
    uint32_t crc = 0;
    cr_assert_eq(dc_verbs_crc32c(DC_VERBS_MEM_HOST, heap + 3, 100001, &crc), DC_OK);
    cr_assert_eq(crc, dc_crc32c(0, heap + 3, 100001));
    cr_assert_eq(dc_verbs_copy_in(DC_VERBS_MEM_HOST, stack, heap + 7, sizeof(stack)), DC_OK);
    cr_assert(memcmp(stack, heap + 7, sizeof(stack)) == 0);
    free(heap);
}

Test(gpumem, device_memory_refused_without_cuda_kernels)
{
    if (DC_HAVE_CUDA)
        cr_skip_test("CUDA kernels are built in (the refusal is for builds without them)");
    uint8_t b[64] = {0};
    uint32_t crc = 0;
    cr_assert_eq(dc_verbs_crc32c(DC_VERBS_MEM_CUDA, b, sizeof(b), &crc), DC_ERR_UNSUPPORTED);
    cr_assert(strstr(dc_last_error(), "not built in") != NULL, "%s", dc_last_error());
    cr_assert_eq(dc_verbs_copy_in(DC_VERBS_MEM_CUDA, b, b + 1, 8), DC_ERR_UNSUPPORTED);
}

Test(gpumem, device_memory_recognised_and_checked_on_gpu)
{
    if (!DC_HAVE_CUDA)
        cr_skip_test("CUDA kernels not built (nvcc not found at configure time)");
    if (!dc_kern_cuda_available())
        cr_skip_test("no CUDA device (cudaGetDeviceCount failed or returned 0)");
    const size_t n = (3u << 20) + 5;
    uint8_t *h = malloc(n), *back = malloc(n);
    fill(h, n, 9);
    void *d = NULL;
    cr_assert_eq(dc_kern_cuda_malloc(&d, n + 16), DC_OK, "%s", dc_last_error());
    uint8_t *dp = (uint8_t *)d + 1;
    cr_assert_eq(dc_verbs_copy_in(DC_VERBS_MEM_CUDA, dp, h, n), DC_OK, "%s", dc_last_error());
    cr_assert_eq(dc_verbs_is_cuda_ptr(dp), 1, "device pointer not recognised");
    cr_assert_eq(dc_verbs_buf_kind(0, dp), DC_VERBS_MEM_CUDA);
    cr_assert_eq(dc_verbs_is_cuda_ptr(h), 0);
    uint32_t crc = 0;
    cr_assert_eq(dc_verbs_crc32c(DC_VERBS_MEM_CUDA, dp, n, &crc), DC_OK, "%s", dc_last_error());
    cr_assert_eq(crc, dc_crc32c(0, h, n));
    /* corrupt= on device memory flips a byte there (through a bounce) */
    dc_fault_cfg_t f;
    cr_assert_eq(dc_fault_parse(NULL, &f), DC_OK);
    f.corrupt_p = 1.0;
    f.seed = 3;
    dc_fault_install(&f);
    cr_assert(dc_verbs_fault_on_recv(DC_VERBS_MEM_CUDA, dp, n));
    cr_assert_eq(dc_kern_cuda_d2h(back, dp, n), DC_OK);
    size_t diff = 0;
    for (size_t i = 0; i < n; i++)
        diff += back[i] != h[i];
    cr_assert_eq(diff, 1, "%zu bytes changed", diff);
    cr_assert_eq(dc_verbs_crc32c(DC_VERBS_MEM_CUDA, dp, n, &crc), DC_OK);
    cr_assert_neq(crc, dc_crc32c(0, h, n));
    dc_kern_cuda_free(d);
    free(h);
    free(back);
}
