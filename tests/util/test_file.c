/* test_file.c - util/file.c on a real file system: a small tmpfs mounted (as
 * root) in a temporary directory, with sparse files and filled to its last
 * block.  Skips, saying why, where it cannot mount one. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/dc_util.h"

#include "testkit_fs.h"

static char mnt[64];

static void fini(void)
{
    dc_test_tmpfs_umount(mnt);
}

TestSuite(file, .fini = fini);

#define SZ (1u << 20)

/* SIGBUS back to its default in a child that is to die of it (a
 * sanitizer's handler would turn it into exit(1); the raw system call,
 * because sanitizers keep their handler against sigaction()). */
static void default_sigbus(void)
{
    struct {
        void *handler;
        unsigned long flags;
        void *restorer;
        uint64_t mask;
    } k = {NULL, 0, NULL, 0}; /* SIG_DFL */
    syscall(SYS_rt_sigaction, SIGBUS, &k, NULL, sizeof(k.mask));
}

/* A 1 MiB file with 64 KiB of data at each end and a hole between; its
 * expected bytes into want. */
static int sparse_file(char *path, size_t len, uint8_t *want)
{
    snprintf(path, len, "%s/sparse", mnt);
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    cr_assert(fd >= 0);
    memset(want, 0, SZ);
    for (uint32_t i = 0; i < 65536; i++)
        want[i] = want[SZ - 65536 + i] = (uint8_t)(i * 7 + 1);
    cr_assert_eq(pwrite(fd, want, 65536, 0), 65536);
    cr_assert_eq(pwrite(fd, want + SZ - 65536, 65536, SZ - 65536), 65536);
    cr_assert(dc_file_has_holes(fd, SZ), "no hole in %s", path);
    return fd;
}

static void expect_bytes(int fd, const uint8_t *want)
{
    uint8_t *got = malloc(SZ);
    cr_assert_eq(dc_pread_full(fd, got, SZ, 0), DC_OK);
    cr_assert(memcmp(got, want, SZ) == 0, "a byte changed");
    free(got);
}

/* Store into every page of [0, SZ) of fd through a shared map, in a
 * child (what a receiver does): its exit status. */
static int store_every_page(int fd)
{
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        default_sigbus();
        volatile uint8_t *p = mmap(NULL, SZ, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED)
            _exit(2);
        for (size_t i = 0; i < SZ; i += 4096)
            p[i] = p[i];
        _exit(0);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    return status;
}

/* With space: the holes are allocated (fallocate, and the fallback that
 * writes zeros into them), no byte changes, and once the file system is
 * full a store into any page of a shared map still succeeds. */
Test(file, reserve_allocates_holes_keeping_bytes)
{
    if (!dc_test_tmpfs_mount(mnt, sizeof(mnt), "file", "4m"))
        return;
    char path[128], fp[128];
    snprintf(fp, sizeof(fp), "%s/fill", mnt);
    uint8_t *want = malloc(SZ);
    for (int way = 0; way < 2; way++) {
        int fd = sparse_file(path, sizeof(path), want);
        dc_status_t st = way ? dc_file_fill_holes(fd, path, SZ) : dc_file_reserve(fd, path, SZ);
        cr_assert_eq(st, DC_OK, "%s", dc_last_error());
        struct stat sb;
        cr_assert_eq(fstat(fd, &sb), 0);
        cr_assert_geq((uint64_t)sb.st_blocks * 512, SZ, "way %d: %llu blocks", way,
                      (unsigned long long)sb.st_blocks);
        expect_bytes(fd, want);
        /* a second reservation of an allocated file: nothing to do */
        cr_assert_eq(dc_file_reserve(fd, path, SZ), DC_OK);
        dc_test_tmpfs_fill(mnt);
        int status = store_every_page(fd);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "way %d: a store into the reserved file on a full fs failed (status %d)", way,
                  status);
        expect_bytes(fd, want);
        close(fd);
        unlink(path);
        unlink(fp);
    }
    free(want);
}

/* On a full file system: an error naming the file, no byte changed. */
Test(file, reserve_on_full_fs_names_the_file)
{
    if (!dc_test_tmpfs_mount(mnt, sizeof(mnt), "file", "2m"))
        return;
    char path[128];
    uint8_t *want = malloc(SZ);
    int fd = sparse_file(path, sizeof(path), want);
    dc_test_tmpfs_fill(mnt);
    for (int way = 0; way < 2; way++) {
        dc_status_t st = way ? dc_file_fill_holes(fd, path, SZ) : dc_file_reserve(fd, path, SZ);
        cr_assert_eq(st, DC_ERR_IO, "way %d reserved blocks on a full fs", way);
        const char *e = dc_last_error();
        cr_assert(strstr(e, path) && strstr(e, "No space left on device"), "%s", e);
        expect_bytes(fd, want);
    }
    /* the fault that reservation prevents: a store into a hole, SIGBUS */
    int status = store_every_page(fd);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS,
              "a store into a hole on a full tmpfs did not fault (status %d)", status);
    close(fd);
    free(want);
}

/* A read-only map of a sparse file on a full tmpfs: a load from a hole of
 * a mapped file allocates there (SIGBUS); the file is read instead. */
Test(file, map_read_sparse_on_full_tmpfs)
{
    if (!dc_test_tmpfs_mount(mnt, sizeof(mnt), "file", "2m"))
        return;
    char path[128];
    uint8_t *want = malloc(SZ);
    int fd = sparse_file(path, sizeof(path), want);
    dc_test_tmpfs_fill(mnt);
    void *m = NULL;
    cr_assert_eq(dc_file_map_read(fd, path, SZ, 1, &m), DC_OK, "%s", dc_last_error());
    cr_assert(memcmp(m, want, SZ) == 0);
    munmap(m, SZ);
    /* the fault itself, in a child: mapping the holes dies of SIGBUS */
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        default_sigbus();
        volatile uint8_t *p = mmap(NULL, SZ, PROT_READ, MAP_PRIVATE, fd, 0);
        uint8_t x = 0;
        for (size_t i = 0; i < SZ; i += 4096)
            x ^= p[i];
        _exit(x == 0xee ? 3 : 0);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS,
              "mapping the holes of a sparse file on a full tmpfs did not fault (status %d): "
              "the case this test covers no longer arises here",
              status);
    close(fd);
    free(want);
}
