/* test_exact.c - a version is named by its content, not only its number:
 * every case ends with every receiver at the trainer's exact bits, or with
 * a non-zero exit and a line that says why.  Real node processes, real
 * state directories, the real failure:
 *   - receivers whose commit record is ahead of the coordinator (a job
 *     re-provisioned with the receivers' old state directories);
 *   - a coordinator killed mid-version, the version's bytes rewritten (a
 *     trainer re-running a step after a crash), the coordinator restarted;
 *   - a coordinator killed between its commit record and the COMMIT;
 *   - a receiver whose local commit hits a full file system;
 *   - a gap in the versions directory. */
#include "refit_util.h"

#include "engine/commit.h"
#include "engine/journal.h"

#include <sys/mount.h>

static job_t J;
static char mounted[256];

static void fini(void)
{
    if (mounted[0]) {
        for (int i = 0; i < J.nnodes; i++)
            if (J.pid[i] > 0)
                kill(J.pid[i], SIGKILL);
        umount2(mounted, MNT_DETACH);
        mounted[0] = 0;
    }
    job_fini(&J);
}

TestSuite(exact, .fini = fini, .timeout = 150);

static void rec_of(int rank, dc_commit_rec_t *r)
{
    char sd[256];
    snprintf(sd, sizeof(sd), "%s/state/%d", J.dir, rank);
    cr_assert_eq(dc_commit_read(sd, r), DC_OK, "node %d: %s", rank, dc_last_error());
}

/* Every receiver's record names version v with the coordinator's checkpoint
 * digest of it. */
static void expect_records(int v)
{
    dc_commit_rec_t root;
    rec_of(0, &root);
    cr_assert_eq(root.version, (uint64_t)v);
    cr_assert(root.digest_lo || root.digest_hi, "the coordinator's record has no digest");
    for (int i = 1; i < J.nnodes; i++) {
        dc_commit_rec_t r;
        rec_of(i, &r);
        cr_assert_eq(r.version, (uint64_t)v, "node %d's record names v%llu", i,
                     (unsigned long long)r.version);
        cr_assert(r.digest_lo == root.digest_lo && r.digest_hi == root.digest_hi,
                  "node %d's record names other content", i);
    }
}

static void run_to_end(int v)
{
    job_expect_all_exit_ok(&J, 90, 20);
    job_expect_all_exact(&J, v);
    expect_records(v);
}

/* B1: a job runs to v3; then the coordinator's state is gone and every
 * receiver's weights are v0 again, but their records still say v3.  The
 * same commands again: the receivers must not acknowledge by number. */
Test(exact, receivers_record_ahead_of_coordinator)
{
    job_init(&J, 1, 2, "3e5", 3, "inject");
    job_start_all(&J, NULL);
    run_to_end(3);
    cr_assert_eq(job_sh("rm -rf %s/state/0 %s/stats.json", J.dir, J.dir), 0);
    for (int i = 1; i < J.nnodes; i++)
        cr_assert_eq(job_sh("cp %s/ver/v0.safetensors %s/w%d.st", J.dir, J.dir, i), 0);
    for (int i = 1; i < J.nnodes; i++)
        cr_assert(!job_exact(&J, i, 3));
    job_start_all(&J, NULL);
    run_to_end(3);
    /* they said what they did */
    cr_assert_eq(job_sh("grep -q 'checking every chunk against' %s/log1", J.dir), 0);
}

/* Every receiver, then the coordinator with the crash hook `hook`: it must
 * die by SIGKILL (the hook fired). */
static void run_root_crash(const char *hook)
{
    for (int i = 1; i < J.nnodes; i++)
        job_start(&J, i, NULL, NULL);
    job_start(&J, 0, hook, "--abort-ms 30000");
    int rc = job_wait(&J, 0, 60);
    if (rc != 128 + SIGKILL)
        job_dump_logs(&J);
    cr_assert_eq(rc, 128 + SIGKILL, "the coordinator was not killed (exit %d)", rc);
}

/* B2: the coordinator is killed mid-v1, after some of its frames were
 * applied; v1 is written again with other bytes; the coordinator restarts.
 * Chunks applied from the old v1 must not stay. */
Test(exact, version_rewritten_after_coordinator_crash)
{
    job_init(&J, 1, 2, "2e6", 1, "inject");
    run_root_crash("DELTACAST_ENGINE_ROOT_CRASH=frames=12");
    /* the fault fired where it matters: chunks of the old v1 were applied */
    uint64_t applied = 0;
    for (int i = 1; i < J.nnodes; i++) {
        char sd[256];
        snprintf(sd, sizeof(sd), "%s/state/%d", J.dir, i);
        dc_journal_info_t ji;
        uint8_t *st = NULL;
        if (dc_journal_load(sd, &ji, &st, NULL) != DC_OK)
            continue;
        for (uint64_t c = 0; c < ji.nchunks; c++)
            applied += st[c] == DC_JSTATE_APPLIED;
        free(st);
    }
    cr_assert(applied > 0, "no receiver applied a chunk of the first v1");
    /* the trainer re-runs the step: another v1 */
    cr_assert_eq(job_sh("mv %s/ver/v1.safetensors %s/v1.old", J.dir, J.dir), 0);
    char src[256], dst[256];
    snprintf(src, sizeof(src), "%s/ver/v0.safetensors", J.dir);
    snprintf(dst, sizeof(dst), "%s/ver/v1.safetensors", J.dir);
    uint64_t ch = 0;
    cr_assert_eq(dc_synth_next(src, dst, 0.02, 1, 77, &ch), DC_OK, "%s", dc_last_error());
    cr_assert_eq(job_sh("cmp -s %s/v1.old %s", J.dir, dst), 1, "the new v1 is the old one");
    job_start(&J, 0, NULL, "--abort-ms 30000");
    run_to_end(1);
    cr_assert_eq(job_sh("cat %s/log[12] | grep -q 'with other content than the coordinator'",
                        J.dir),
                 0, "no receiver noticed the old v1's chunks");
}

/* B3: the coordinator is killed right after its record names the last
 * version, before any receiver got COMMIT; restarted, it has nothing left
 * to send, and every receiver must still end with that version recorded. */
Test(exact, coordinator_killed_between_record_and_commit)
{
    job_init(&J, 1, 3, "3e5", 2, "inject");
    run_root_crash("DELTACAST_ENGINE_ROOT_CRASH=commit=2");
    dc_commit_rec_t r;
    rec_of(0, &r);
    cr_assert_eq(r.version, 2, "the fault fired before the record");
    int behind = 0;
    for (int i = 1; i < J.nnodes; i++) {
        rec_of(i, &r);
        behind += r.version == 1;
    }
    cr_assert(behind > 0, "every receiver had committed v2 already");
    job_start(&J, 0, NULL, "--abort-ms 30000");
    run_to_end(2);
}

/* B3: a receiver's state directory is on a full file system (a tmpfs with
 * no inode left for the commit record): its local commit fails, and the job
 * must say so instead of every process exiting 0. */
Test(exact, receiver_local_commit_enospc_fails_the_job)
{
    job_init(&J, 1, 2, "3e5", 1, "inject");
    int victim = J.nnodes - 1;
    snprintf(mounted, sizeof(mounted), "%s/state/%d", J.dir, victim);
    cr_assert_eq(job_sh("mkdir -p %s", mounted), 0);
    /* the root directory and the journal: nothing left for commit.lock */
    if (mount("dctest", mounted, "tmpfs", 0, "size=1m,nr_inodes=3") != 0) {
        mounted[0] = 0;
        cr_skip_test("cannot mount a tmpfs here (%s): needs root", strerror(errno));
    }
    job_start_all(&J, NULL);
    int rc = job_wait(&J, 0, 90);
    if (rc == 0)
        job_dump_logs(&J);
    cr_assert_eq(rc, 1, "coordinator exit %d", rc);
    rc = job_wait(&J, victim, 20);
    if (rc != 1)
        job_dump_logs(&J);
    cr_assert_eq(rc, 1, "the receiver whose commit failed: exit %d", rc);
    cr_assert_eq(job_wait(&J, 1, 20), 0);
    cr_assert_eq(job_sh("grep -q 'No space left on device' %s/log%d", J.dir, victim), 0,
                 "the fault did not fire");
    cr_assert_eq(job_sh("grep -q 'do not hold the committed version 1' %s/log0", J.dir), 0);
    cr_assert_eq(job_sh("grep -q 'the job ended at version 1, but' %s/log%d", J.dir, victim),
                 0);
}

/* B3: v0, v1, v3 (no v2): the job must not stop at v1 and call it done. */
Test(exact, gap_in_versions_is_an_error)
{
    job_init(&J, 1, 1, "3e5", 3, "inject");
    cr_assert_eq(job_sh("rm %s/ver/v2.safetensors", J.dir), 0);
    job_start_all(&J, NULL);
    int rc = job_wait(&J, 0, 30);
    cr_assert_eq(rc, 1, "coordinator exit %d", rc);
    cr_assert_eq(job_sh("grep -q 'version 3 is there but version 2 is missing' %s/log0", J.dir),
                 0);
}
