/* test_disk.c - full disks and sparse files, on a real file system: a small
 * tmpfs mounted (as root) in a temporary directory and filled to its last
 * block.  A sparse weights file there (a zero tensor copied with
 * `cp --sparse=always`, as a LoRA B matrix is) made a receiver die of SIGBUS
 * mid-apply, with no line of its own; a journal write on a full disk said only
 * "write: No space left on device".  Each case skips, saying why, where it
 * cannot mount a tmpfs (not root, no mount permission). */
#include "refit_util.h"
#include "testkit_fs.h"


#include "engine/commit.h"
#include "engine/journal.h"
#include "kernels/safetensors.h"

static job_t J;
static char mnt[64];

static void fini(void)
{
    job_fini(&J);
    dc_test_tmpfs_umount(mnt);
}

TestSuite(disk, .fini = fini, .timeout = 120);

static int file_is_sparse(const char *path)
{
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0, "%s", path);
    return (uint64_t)sb.st_blocks * 512 < (uint64_t)sb.st_size;
}

#define W_N    65536u  /* "w": 256 KiB of f32, every value set */
#define LORA_N 262144u /* "lora_b": 1 MiB of f32, all zero in v0 */

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A LoRA-like checkpoint: v0 with a zero "lora_b"; v1 changes 2% of "w"
 * and gives the first quarter of "lora_b" values (its first steps). */
static void write_ckpt(const char *path, int v)
{
    float *w = malloc(W_N * sizeof(float)), *b = calloc(LORA_N, sizeof(float));
    cr_assert(w && b);
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (uint32_t i = 0; i < W_N; i++)
        w[i] = (float)((double)(rng(&s) >> 11) / 9007199254740992.0 - 0.5);
    if (v >= 1) {
        uint64_t t = 12345;
        for (uint32_t i = 0; i < W_N; i++)
            if (rng(&t) % 50 == 0)
                w[i] += 1e-3f;
        for (uint32_t i = 0; i < LORA_N / 4; i++)
            b[i] = (float)((double)(rng(&t) >> 11) / 9007199254740992.0 - 0.5) * 1e-2f;
    }
    dc_st_desc_t d[2] = {{.name = "lora_b", .dtype = DC_DTYPE_F32, .ndim = 1, .shape = {LORA_N}},
                         {.name = "w", .dtype = DC_DTYPE_F32, .ndim = 1, .shape = {W_N}}};
    dc_st_writer_t *wr;
    cr_assert_eq(dc_st_writer_create(path, d, 2, NULL, &wr), DC_OK, "%s", dc_last_error());
    cr_assert_eq(dc_st_writer_write(wr, b, LORA_N * sizeof(float)), DC_OK);
    cr_assert_eq(dc_st_writer_write(wr, w, W_N * sizeof(float)), DC_OK);
    cr_assert_eq(dc_st_writer_finish(wr), DC_OK, "%s", dc_last_error());
    free(w);
    free(b);
}

/* A job of 1 region x 2 receivers on versions v0 (a zero LoRA B) and v1. */
static void disk_job(void)
{
    memset(&J, 0, sizeof(J));
    strcpy(J.dir, "/tmp/dc_refit_XXXXXX");
    cr_assert_not_null(mkdtemp(J.dir));
    J.regions = 1;
    J.per = 2;
    J.nnodes = 3;
    J.nsenders = 1;
    J.versions = 1;
    cr_assert_eq(job_sh("mkdir -p %s/ver %s/state", J.dir, J.dir), 0);
    char p[256];
    for (int v = 0; v <= 1; v++) {
        snprintf(p, sizeof(p), "%s/ver/v%d.safetensors", J.dir, v);
        write_ckpt(p, v);
    }
    J.port = job_pick_ports(J.nnodes);
    snprintf(J.secret, sizeof(J.secret), "disk-test-%d-%.60s", (int)getpid(), J.dir + 5);
    setenv("DELTACAST_SECRET", J.secret, 1);
}

/* Receiver 1's weights are a sparse copy of v0 on a full tmpfs (w1.st is a
 * link to it): it fails at open with a line naming the file, before any
 * byte of it changed; nothing is committed anywhere and receiver 2 is still
 * exactly at v0.  Before the blocks were reserved at open, receiver 1 died
 * of SIGBUS (exit 135) in the middle of applying v1. */
Test(disk, sparse_receiver_on_full_fs_fails_clearly)
{
    if (!dc_test_tmpfs_mount(mnt, sizeof(mnt), "disk", "2m"))
        return;
    disk_job();
    cr_assert_eq(job_sh("cp --sparse=always %s/ver/v0.safetensors %s/w1.st && "
                        "ln -s %s/w1.st %s/w1.st && cp %s/ver/v0.safetensors %s/w2.st",
                        J.dir, mnt, mnt, J.dir, J.dir, J.dir),
                 0);
    char w1[128];
    snprintf(w1, sizeof(w1), "%s/w1.st", mnt);
    cr_assert(file_is_sparse(w1), "cp --sparse=always made no hole in %s", w1);
    dc_test_tmpfs_fill(mnt);

    job_start(&J, 0, NULL, "--wait-ms 4000");
    usleep(100000);
    job_start(&J, 1, NULL, NULL);
    job_start(&J, 2, NULL, NULL);
    int rc1 = job_wait(&J, 1, 30);
    if (rc1 != 1)
        job_dump_logs(&J);
    cr_assert_neq(rc1, 128 + SIGBUS, "receiver 1 died of SIGBUS");
    cr_assert_eq(rc1, 1, "receiver 1 exit %d", rc1);
    /* its one line names the file (as given: the link) and says why */
    cr_assert_eq(
        job_sh("grep -F \"'%s/w1.st'\" %s/log1 | grep -q 'No space left on device'", J.dir, J.dir),
        0, "receiver 1's error does not name its weights with the reason");
    /* the job fails without committing anything */
    int rc0 = job_wait(&J, 0, 30);
    cr_assert_eq(rc0, 1, "coordinator exit %d", rc0);
    /* at once, with the receiver's reason (engine/early.c), not after
     * the 4 s join wait */
    cr_assert_eq(job_sh("grep 'root: node 1 (' %s/log0 | grep 'could not start' | "
                        "grep -q 'No space left on device'", J.dir),
                 0, "the coordinator does not name the receiver that could not start and why");
    char st[256];
    dc_commit_rec_t r;
    snprintf(st, sizeof(st), "%s/state/0", J.dir);
    cr_assert_neq(dc_commit_read(st, &r) == DC_OK && r.version >= 1, 1,
                  "version 1 committed with a receiver short of space");
    job_wait(&J, 2, 10);
    cr_assert(job_exact(&J, 1, 0), "receiver 1's weights changed");
    cr_assert(job_exact(&J, 2, 0), "receiver 2 is not at v0");
}

/* With space, the same sparse file is reserved at open and takes v1
 * exactly (the reservation changes no byte). */
Test(disk, sparse_receiver_with_space_refits_exactly)
{
    if (!dc_test_tmpfs_mount(mnt, sizeof(mnt), "disk", "4m"))
        return;
    disk_job();
    cr_assert_eq(job_sh("cp --sparse=always %s/ver/v0.safetensors %s/w1.st && "
                        "ln -s %s/w1.st %s/w1.st && cp %s/ver/v0.safetensors %s/w2.st",
                        J.dir, mnt, mnt, J.dir, J.dir, J.dir),
                 0);
    char w1[128];
    snprintf(w1, sizeof(w1), "%s/w1.st", mnt);
    cr_assert(file_is_sparse(w1));
    job_start_all(&J, NULL);
    job_expect_all_exit_ok(&J, 60, 10);
    job_expect_all_exact(&J, 1);
    cr_assert(!file_is_sparse(w1), "%s still has holes after the refit", w1);
}

/* Receiver 1's state directory is on a full tmpfs (its weights are not):
 * it joins, cannot create the journal of version 1 and exits with a line
 * naming it; the coordinator aborts the version, receiver 2 rolls back to
 * v0 byte for byte and nothing is committed.  Before, the line was only
 * "write: No space left on device". */
Test(disk, journal_on_full_fs_aborts_the_version)
{
    if (!dc_test_tmpfs_mount(mnt, sizeof(mnt), "disk", "1m"))
        return;
    disk_job();
    cr_assert_eq(job_sh("cp %s/ver/v0.safetensors %s/w1.st && cp %s/ver/v0.safetensors %s/w2.st "
                        "&& mkdir %s/state1 && ln -s %s/state1 %s/state/1",
                        J.dir, J.dir, J.dir, J.dir, mnt, mnt, J.dir),
                 0);
    dc_test_tmpfs_fill(mnt);
    /* abort_ms is a minute: the coordinator learns why from receiver 1's
     * FAIL, not from its silence (before: it waited abort_ms) */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    job_start_all(&J, "--abort-ms 60000");
    int rc0 = job_wait(&J, 0, 60);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc0 != 1)
        job_dump_logs(&J);
    cr_assert_eq(rc0, 1, "coordinator exit %d", rc0);
    cr_assert_eq(job_wait(&J, 1, 10), 1, "receiver 1");
    cr_assert_eq(job_sh("grep -F '%s/state/1/' %s/log1 | grep 'journal' | "
                        "grep -q 'No space left on device'",
                        J.dir, J.dir),
                 0, "receiver 1's error does not name its journal with the reason");
    cr_assert_eq(job_sh("grep -q 'aborting version 1' %s/log0", J.dir), 0);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    cr_assert(secs < 20, "the coordinator took %.1f s to fail", secs);
    cr_assert_eq(job_sh("grep 'aborting version 1' %s/log0 | grep 'node 1 (' | "
                        "grep -q 'No space left on device'", J.dir),
                 0, "the coordinator does not name receiver 1 and its reason");
    job_wait(&J, 2, 10);
    cr_assert(job_exact(&J, 2, 0), "receiver 2 did not roll back to v0");
    cr_assert(job_exact(&J, 1, 0), "receiver 1's weights changed");
    char st[256];
    dc_commit_rec_t r;
    snprintf(st, sizeof(st), "%s/state/0", J.dir);
    cr_assert_neq(dc_commit_read(st, &r) == DC_OK && r.version >= 1, 1,
                  "version 1 committed without receiver 1");
}

/* What reservation cannot cover (a copy-on-write file system; here: the
 * weights file truncated under the receiver's map, as `cp` onto it does):
 * the receiver still dies of SIGBUS, but its last line names the file; the
 * coordinator aborts the version and receiver 2 rolls back.  Needs no mount. */
Test(disk, sigbus_in_mapped_weights_names_the_file)
{
    disk_job();
    cr_assert_eq(job_sh("cp %s/ver/v0.safetensors %s/w1.st && cp %s/ver/v0.safetensors %s/w2.st",
                        J.dir, J.dir, J.dir, J.dir),
                 0);
    job_start(&J, 1, NULL, NULL);
    job_start(&J, 2, NULL, NULL);
    cr_assert(job_until_sh(20000, "grep -q 'node 1: holding version' %s/log1", J.dir),
              "receiver 1 did not open its weights");
    cr_assert_eq(job_sh("truncate -s 4096 %s/w1.st", J.dir), 0);
    job_start(&J, 0, NULL, NULL);
    /* dead of SIGBUS (under a sanitizer, whose handler runs after ours:
     * exit 1, or SIGABRT with abort_on_error=1 as in CI); the line is
     * written only by the SIGBUS handler */
    int rc1 = job_wait(&J, 1, 60);
    if (rc1 != 128 + SIGBUS)
        job_dump_logs(&J);
    cr_assert(rc1 == 128 + SIGBUS ||
                  ((rc1 == 1 || rc1 == 128 + SIGABRT) &&
                   job_sh("grep -q 'Sanitizer: BUS' %s/log1", J.dir) == 0),
              "receiver 1 exit %d", rc1);
    cr_assert_eq(
        job_sh("grep -F \"SIGBUS at byte\" %s/log1 | grep -qF \"of '%s/w1.st'\"", J.dir, J.dir), 0,
        "receiver 1's SIGBUS line does not name its weights");
    cr_assert_eq(job_wait(&J, 0, 60), 1);
    cr_assert_eq(job_sh("grep -q 'aborting version 1' %s/log0", J.dir), 0);
    job_wait(&J, 2, 10);
    cr_assert(job_exact(&J, 2, 0), "receiver 2 did not roll back to v0");
}

/* A journal created on a full file system: the error names the file. */
Test(disk, journal_and_commit_on_full_fs_name_the_path)
{
    if (!dc_test_tmpfs_mount(mnt, sizeof(mnt), "disk", "1m"))
        return;
    char dir[128];
    snprintf(dir, sizeof(dir), "%s/state", mnt);
    cr_assert_eq(mkdir(dir, 0755), 0);
    dc_test_tmpfs_fill(mnt);
    dc_journal_info_t in = {.target = 2, .baseline = 1, .nchunks = 1000, .layout_id = 7};
    dc_journal_t *j = NULL;
    int resumed = 0;
    dc_status_t st = dc_journal_open(dir, &in, 0, 8, &j, &resumed);
    cr_assert_neq(st, DC_OK, "a journal was created on a full file system");
    const char *e = dc_last_error();
    cr_assert(strstr(e, dir) != NULL, "the journal error does not name %s: %s", dir, e);
    cr_assert(strstr(e, "No space left on device") != NULL, "%s", e);

    dc_commit_rec_t rec = {.version = 1, .baseline = 0};
    st = dc_commit_cas(dir, 0, &rec, NULL);
    cr_assert_neq(st, DC_OK, "a commit record was written on a full file system");
    e = dc_last_error();
    cr_assert(strstr(e, dir) != NULL, "the commit error does not name %s: %s", dir, e);
    /* nothing half-written is left behind */
    cr_assert_eq(job_sh("test -z \"$(ls -A %s | grep -v '^commit.lock$')\"", dir), 0,
                 "files left in %s", dir);
}

/* `deltacast apply` onto a file on a full file system: a clear error naming
 * it, the file as it was, no temporary left; a sparse BASE on a full tmpfs
 * is read (mapping its holes died of SIGBUS) and gives the exact target. */
Test(disk, apply_on_full_fs)
{
    if (!dc_test_tmpfs_mount(mnt, sizeof(mnt), "disk", "2m"))
        return;
    disk_job();
    cr_assert_eq(job_sh("'%s' diff %s/ver/v0.safetensors %s/ver/v1.safetensors -o %s/d >/dev/null",
                        job_bin(), J.dir, J.dir, J.dir),
                 0);
    cr_assert_eq(job_sh("cp --sparse=always %s/ver/v0.safetensors %s/base", J.dir, mnt), 0);
    char base[128];
    snprintf(base, sizeof(base), "%s/base", mnt);
    cr_assert(file_is_sparse(base));
    dc_test_tmpfs_fill(mnt);

    /* a sparse base on the full fs, the target elsewhere: exact */
    int rc = job_sh("'%s' apply %s %s/d -o %s/out >%s/apply0 2>&1", job_bin(), base, J.dir, J.dir,
                    J.dir);
    if (rc != 0)
        job_sh("cat %s/apply0 >&2", J.dir);
    cr_assert_eq(rc, 0, "apply of a sparse base on a full tmpfs: exit %d", rc);
    cr_assert_eq(job_sh("cmp -s %s/out %s/ver/v1.safetensors", J.dir, J.dir), 0);

    /* in place on the full fs: refused, naming the file, BASE as it was */
    rc = job_sh("'%s' apply %s %s/d --in-place >%s/apply1 2>&1", job_bin(), base, J.dir, J.dir);
    cr_assert_eq(rc, 1, "apply --in-place on a full fs: exit %d", rc);
    cr_assert_eq(
        job_sh("grep -F \"'%s'\" %s/apply1 | grep -q 'No space left on device'", base, J.dir), 0,
        "apply's error does not name %s with the reason", base);
    cr_assert_eq(job_sh("cmp -s %s %s/ver/v0.safetensors", base, J.dir), 0, "BASE changed");

    /* -o onto the full fs: refused, naming the output, nothing created */
    rc = job_sh("'%s' apply %s/ver/v0.safetensors %s/d -o %s/out >%s/apply2 2>&1", job_bin(), J.dir,
                J.dir, mnt, J.dir);
    cr_assert_eq(rc, 1, "apply -o on a full fs: exit %d", rc);
    cr_assert_eq(
        job_sh("grep -F \"'%s/out'\" %s/apply2 | grep -q 'No space left on device'", mnt, J.dir), 0,
        "apply's error does not name %s/out", mnt);
    cr_assert_eq(job_sh("test \"$(ls -A %s | sort | tr '\\n' ' ')\" = 'base fill '", mnt), 0,
                 "files left on the full fs");
}
