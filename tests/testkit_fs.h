/* testkit_fs.h - files in a Criterion test: a whole file read or written
 * (each failure names the file; one of the source tree), and a small tmpfs mounted in a temporary
 * directory for a test to fill to its last block (a real full disk).
 * Header-only: every test binary that includes it gets its own copy. */
#ifndef DC_TESTKIT_FS_H
#define DC_TESTKIT_FS_H

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "testenv.h"

/* The bytes of `path` (malloc'd, one spare byte past *len; caller frees). */
static inline uint8_t *dc_test_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    cr_assert_geq(n, 0, "cannot size %s", path);
    uint8_t *b = malloc((size_t)n + 1);
    cr_assert_not_null(b);
    cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n, "cannot read %s", path);
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* The bytes of `rel`, a file of the source tree ("tests/kernels/data/x"). */
static inline uint8_t *dc_test_slurp_src(const char *rel, size_t *len)
{
    char p[4096];
    cr_assert_lt((size_t)snprintf(p, sizeof(p), "%s/%s", dc_test_src(), rel), sizeof(p));
    return dc_test_slurp(p, len);
}

/* `path` made (or replaced) with buf[0..len). */
static inline void dc_test_spit(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot create %s", path);
    cr_assert_eq(fwrite(buf, 1, len, f), len, "cannot write %s", path);
    cr_assert_eq(fclose(f), 0, "cannot write %s", path);
}

/* A tmpfs of `size` ("2m") mounted at a new directory /tmp/dc_NAME_XXXXXX,
 * its path in mnt[0..cap): 1; or the test skipped, saying why (not root,
 * no mount permission), mnt empty: 0. */
static inline int dc_test_tmpfs_mount(char *mnt, size_t cap, const char *name, const char *size)
{
    mnt[0] = 0;
    if (geteuid() != 0) {
        cr_skip_test("not root: cannot mount a small tmpfs to fill");
        return 0;
    }
    cr_assert_lt((size_t)snprintf(mnt, cap, "/tmp/dc_%s_XXXXXX", name), cap);
    cr_assert_not_null(mkdtemp(mnt), "mkdtemp %s: %s", mnt, strerror(errno));
    char opts[64];
    snprintf(opts, sizeof(opts), "size=%s,mode=0755", size);
    if (mount("tmpfs", mnt, "tmpfs", 0, opts) != 0) {
        int e = errno;
        rmdir(mnt);
        mnt[0] = 0;
        cr_skip_test("cannot mount a tmpfs: %s", strerror(e));
        return 0;
    }
    return 1;
}

/* The tmpfs of dc_test_tmpfs_mount() unmounted and its directory removed
 * (nothing when mnt is empty); mnt emptied.  For a suite's .fini. */
static inline void dc_test_tmpfs_umount(char *mnt)
{
    if (!mnt[0])
        return;
    umount2(mnt, MNT_DETACH);
    rmdir(mnt);
    mnt[0] = 0;
}

/* The file system at `mnt` filled to its last block (with mnt/fill); the
 * fill must have happened: no block is left. */
static inline void dc_test_tmpfs_fill(const char *mnt)
{
    char p[256];
    cr_assert_lt((size_t)snprintf(p, sizeof(p), "%s/fill", mnt), sizeof(p));
    int fd = open(p, O_WRONLY | O_CREAT, 0644);
    cr_assert(fd >= 0, "cannot create %s: %s", p, strerror(errno));
    static const char z[4096];
    while (write(fd, z, sizeof(z)) > 0) {
    }
    close(fd);
    struct statvfs vs;
    cr_assert_eq(statvfs(mnt, &vs), 0, "statvfs %s: %s", mnt, strerror(errno));
    cr_assert_eq(vs.f_bavail, 0, "%s is not full: %llu blocks free", mnt,
                 (unsigned long long)vs.f_bavail);
}

#endif /* DC_TESTKIT_FS_H */
