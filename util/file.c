/* file.c - files whose pages are mapped: reserving a writable file's blocks,
 * mapping a file for reading without a page the file system cannot supply.
 *
 * A store into a page of a shared file mapping that the file system cannot
 * back (a hole of a sparse file on a full disk) is not an error code: the
 * kernel sends SIGBUS and the process dies with no line of its own.  On
 * tmpfs even a LOAD from a hole allocates a page, so a read-only map of a
 * sparse file on a full tmpfs dies the same way.  These helpers make both
 * an error that names the file, before any byte is changed. */
#include "dc_util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

static dc_status_t dc_file_full_error(int e, const char *path, uint64_t len, const char *how)
{
    char b[32];
    return dc_error_errno(DC_ERR_IO, e, "'%s': cannot reserve the blocks of its %s (%s)", path,
                          dc_fmt_bytes(len, b, sizeof(b)), how);
}

/* Write zeros into every hole of [0, len) that SEEK_HOLE reports: a hole
 * reads as zeros, so no byte changes; each write is checked. */
dc_status_t dc_file_fill_holes(int fd, const char *path, uint64_t len)
{
    static const uint8_t zeros[65536];
    uint64_t off = 0;
    while (off < len) {
        off_t h = lseek(fd, (off_t)off, SEEK_HOLE);
        if (h < 0)
            return dc_error_errno(DC_ERR_IO, errno, "'%s': lseek SEEK_HOLE", path);
        if ((uint64_t)h >= len)
            break;
        off_t d = lseek(fd, h, SEEK_DATA);
        uint64_t end = d < 0 || (uint64_t)d > len ? len : (uint64_t)d;
        if (d < 0 && errno != ENXIO)
            return dc_error_errno(DC_ERR_IO, errno, "'%s': lseek SEEK_DATA", path);
        for (uint64_t p = (uint64_t)h; p < end;) {
            size_t n = end - p < sizeof(zeros) ? (size_t)(end - p) : sizeof(zeros);
            ssize_t w = pwrite(fd, zeros, n, (off_t)p);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                return dc_file_full_error(w < 0 ? errno : EIO, path, len,
                                          "writing zeros into its holes");
            p += (uint64_t)w;
        }
        off = end;
    }
    return DC_OK;
}

/* On tmpfs, 1 when every page of [0, len) is allocated.  tmpfs counts in
 * st_blocks exactly the pages a file holds (no metadata blocks), so this is
 * one fstat, where SEEK_HOLE walks the pages (0.2 s per GiB measured here)
 * and fallocate over allocated pages takes 1.3 s per GiB. */
static int dc_file_tmpfs_allocated(int fd, uint64_t len, int *tmpfs)
{
    struct statfs fs;
    struct stat sb;
    *tmpfs = fstatfs(fd, &fs) == 0 && fs.f_type == TMPFS_MAGIC;
    return *tmpfs && dc_fstat(fd, &sb) == 0 && (uint64_t)sb.st_blocks * 512 >= len;
}

dc_status_t dc_file_reserve(int fd, const char *path, uint64_t len)
{
    if (len == 0)
        return DC_OK;
    if (len > (uint64_t)INT64_MAX)
        return dc_error(DC_ERR_INVALID, "'%s': %" PRIu64 " bytes is too large", path, len);
    int tmpfs;
    if (dc_file_tmpfs_allocated(fd, len, &tmpfs))
        return DC_OK;
    for (;;) {
        if (fallocate(fd, 0, 0, (off_t)len) == 0)
            return DC_OK;
        if (errno != EINTR)
            break;
    }
    int e = errno;
    if (e == EOPNOTSUPP || e == ENOSYS)
        return dc_file_fill_holes(fd, path, len);
    return dc_file_full_error(e, path, len, "fallocate");
}

int dc_file_has_holes(int fd, uint64_t len)
{
    off_t h = lseek(fd, 0, SEEK_HOLE);
    return h >= 0 && (uint64_t)h < len;
}

dc_status_t dc_file_map_read(int fd, const char *path, size_t len, int populate, void **out)
{
    if (len == 0)
        return dc_error(DC_ERR_INVALID, "'%s': cannot map an empty file", path);
    int tmpfs;
    if (dc_file_tmpfs_allocated(fd, len, &tmpfs) || !tmpfs) {
        void *m = mmap(NULL, len, PROT_READ, MAP_PRIVATE | (populate ? MAP_POPULATE : 0), fd, 0);
        if (m == MAP_FAILED)
            return dc_error_errno(DC_ERR_IO, errno, "cannot map '%s'", path);
        *out = m;
        return DC_OK;
    }
    /* a sparse file on tmpfs: read with pread (a hole reads as zeros without
     * allocating) into anonymous memory */
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return dc_error_errno(DC_ERR_NOMEM, errno,
                              "'%s': no memory to read its %zu bytes (a "
                              "sparse file on tmpfs is read, not mapped)",
                              path, len);
    dc_status_t st = dc_pread_full(fd, m, len, 0);
    if (st != DC_OK) {
        dc_error_prefix("reading '%s'", path);
        munmap(m, len);
        return st;
    }
    if (mprotect(m, len, PROT_READ) != 0) {
        st = dc_error_errno(DC_ERR_IO, errno, "'%s': mprotect", path);
        munmap(m, len);
        return st;
    }
    *out = m;
    return DC_OK;
}

/* --- the last line: SIGBUS in a mapped file -------------------------------- */

/* Reservation cannot cover every case: a copy-on-write file system (btrfs,
 * reflinked XFS, ZFS) needs new blocks for each write, and a file truncated
 * or overwritten in place (cp onto it) under the map loses its pages.  Then
 * the process still dies of SIGBUS, but not without a line naming the file:
 * the handler looks the faulting address up among the noted maps, writes
 * that line with write(2), puts the previous action back and returns, so
 * the access faults again and ends the process as before (the previous
 * handler, e.g. UCX's backtrace, or the default: death by SIGBUS). */

#define DC_FILE_MAPS 64

typedef struct {
    _Atomic int used;
    _Atomic uintptr_t lo; /* 0: free or being filled */
    size_t len;
    char path[256];
} dc_file_map_slot_t;

static dc_file_map_slot_t dc_file_maps[DC_FILE_MAPS];
static struct sigaction dc_file_bus_old;
static _Atomic int dc_file_bus_on;

void dc_file_map_note(const void *p, size_t len, const char *path)
{
    for (int i = 0; i < DC_FILE_MAPS && p && len; i++) {
        int z = 0;
        if (!atomic_compare_exchange_strong(&dc_file_maps[i].used, &z, 1))
            continue;
        dc_file_maps[i].len = len;
        snprintf(dc_file_maps[i].path, sizeof(dc_file_maps[i].path), "%s", path ? path : "?");
        atomic_store_explicit(&dc_file_maps[i].lo, (uintptr_t)p, memory_order_release);
        return;
    }
}

void dc_file_map_forget(const void *p)
{
    for (int i = 0; i < DC_FILE_MAPS && p; i++) {
        if (atomic_load_explicit(&dc_file_maps[i].lo, memory_order_acquire) == (uintptr_t)p) {
            atomic_store(&dc_file_maps[i].lo, 0);
            atomic_store(&dc_file_maps[i].used, 0);
            return;
        }
    }
}

static size_t dc_file_cat(char *buf, size_t n, size_t cap, const char *s)
{
    while (*s && n + 1 < cap)
        buf[n++] = *s++;
    return n;
}

static size_t dc_file_cat_u64(char *buf, size_t n, size_t cap, uint64_t v)
{
    char d[24];
    int k = 0;
    do {
        d[k++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (k > 0 && n + 1 < cap)
        buf[n++] = d[--k];
    return n;
}

static void dc_file_on_sigbus(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    uintptr_t a = (uintptr_t)si->si_addr;
    for (int i = 0; i < DC_FILE_MAPS; i++) {
        uintptr_t lo = atomic_load_explicit(&dc_file_maps[i].lo, memory_order_acquire);
        if (!lo || a < lo || a - lo >= dc_file_maps[i].len)
            continue;
        char m[512];
        size_t n = dc_file_cat(m, 0, sizeof(m), "deltacast: SIGBUS at byte ");
        n = dc_file_cat_u64(m, n, sizeof(m), (uint64_t)(a - lo));
        n = dc_file_cat(m, n, sizeof(m), " of '");
        n = dc_file_cat(m, n, sizeof(m), dc_file_maps[i].path);
        n = dc_file_cat(m, n, sizeof(m),
                        "' (mapped): its file system could not supply the page (full, "
                        "copy-on-write, or the file was truncated or rewritten under "
                        "the map); the process ends\n");
        ssize_t w = write(STDERR_FILENO, m, n);
        (void)w;
        break;
    }
    sigaction(SIGBUS, &dc_file_bus_old, NULL);
    if (si->si_code <= 0) /* sent, not a fault: no access to repeat */
        raise(sig);
}

dc_status_t dc_file_sigbus_install(void)
{
    int z = 0;
    if (!atomic_compare_exchange_strong(&dc_file_bus_on, &z, 1))
        return DC_OK;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = dc_file_on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &dc_file_bus_old) != 0) {
        atomic_store(&dc_file_bus_on, 0);
        return dc_error_errno(DC_ERR_IO, errno, "sigaction SIGBUS");
    }
    return DC_OK;
}
