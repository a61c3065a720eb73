/*
 * test_emu_arena.c - the emulated CUDA runtime's own guarantees: host code
 * touching emulated device memory aborts the process naming the caller,
 * copies of the wrong kind are refused, and the PCIe counters count what
 * crossed, per direction.
 */
#include <criterion/criterion.h>

#include "cuda_emu_rt.h"
#include "kernels/kern_cuda.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(emu_arena, .init = dc_emu_install);

/* Not static (and not inlined): the fault report's backtrace names it
 * (-rdynamic).  The copy goes to a volatile sink so it is not elided. */
__attribute__((noinline, visibility("default"))) void
emu_test_host_reads_device(volatile uint8_t *dst, const uint8_t *dev, size_t n);
__attribute__((noinline, visibility("default"))) void
emu_test_host_reads_device(volatile uint8_t *dst, const uint8_t *dev, size_t n)
{
    uint8_t tmp[64];
    memcpy(tmp, dev, n < sizeof(tmp) ? n : sizeof(tmp));
    for (size_t i = 0; i < n && i < sizeof(tmp); i++)
        dst[i] = tmp[i];
}

/* Run the stray read in a child; return its stderr and wait status. */
static int stray_read(char *err, size_t cap)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        void *d = NULL;
        if (dc_kern_cuda_malloc(&d, 4096) != DC_OK)
            _exit(3);
        volatile uint8_t host[64];
        emu_test_host_reads_device(host, d, sizeof(host));
        _exit(0); /* not reached when the arena is closed */
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t r;
    while (got + 1 < cap && (r = read(fds[0], err + got, cap - 1 - got)) > 0)
        got += (size_t)r;
    err[got] = 0;
    close(fds[0]);
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    return status;
}

Test(emu_arena, host_memcpy_of_device_memory_aborts_naming_the_caller)
{
    char err[8192];
    int status = stray_read(err, sizeof(err));
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
              "a host read of device memory did not abort (status 0x%x): %s", status, err);
    cr_assert(strstr(err, "host code touched emulated device memory"), "%s", err);
    cr_assert(strstr(err, "emu_test_host_reads_device"), "caller not named: %s", err);
}

Test(emu_arena, copies_count_bytes_per_direction)
{
    void *d = NULL;
    uint8_t h[1000], back[1000];
    for (size_t i = 0; i < sizeof(h); i++)
        h[i] = (uint8_t)(i * 7);
    cr_assert_eq(dc_kern_cuda_malloc(&d, sizeof(h)), DC_OK);
    cr_assert(dc_emu_is_device(d));
    cr_assert(!dc_emu_is_device(h));
    dc_emu_pcie_reset();
    cr_assert_eq(dc_kern_cuda_h2d(d, h, sizeof(h)), DC_OK);
    cr_assert_eq(dc_kern_cuda_d2h(back, d, 600), DC_OK);
    uint64_t up, down;
    dc_emu_pcie(&up, &down);
    cr_assert_eq(up, 1000);
    cr_assert_eq(down, 600);
    cr_assert(memcmp(back, h, 600) == 0);
    /* a copy whose pointers are not of its kind is refused, not performed */
    cr_assert_neq(dc_kern_cuda_h2d(back, h, 10), DC_OK);
    cr_assert(strstr(dc_last_error(), "copy to device"), "%s", dc_last_error());
    cr_assert_neq(dc_kern_cuda_d2h(d, h, 10), DC_OK);
    dc_emu_pcie(&up, &down);
    cr_assert_eq(up + down, 1600, "a refused copy was counted");
    size_t live = dc_emu_live_bytes();
    dc_kern_cuda_free(d);
    cr_assert_lt(dc_emu_live_bytes(), live);
}

Test(emu_arena, kernels_run_on_the_arena)
{
    void *a = NULL, *b = NULL;
    uint8_t h[4096];
    memset(h, 0x5a, sizeof(h));
    cr_assert_eq(dc_kern_cuda_malloc(&a, sizeof(h)), DC_OK);
    cr_assert_eq(dc_kern_cuda_malloc(&b, sizeof(h)), DC_OK);
    cr_assert_eq(dc_kern_cuda_h2d(a, h, sizeof(h)), DC_OK);
    h[100] ^= 1;
    cr_assert_eq(dc_kern_cuda_h2d(b, h, sizeof(h)), DC_OK);
    uint64_t l0 = dc_emu_launches();
    size_t cnt = 0;
    cr_assert_eq(dc_kern_cuda_count_changed(a, b, sizeof(h), 1, &cnt, NULL), DC_OK);
    cr_assert_eq(cnt, 1);
    cr_assert_gt(dc_emu_launches(), l0, "no emulated kernel ran");
    dc_kern_cuda_free(a);
    dc_kern_cuda_free(b);
}
