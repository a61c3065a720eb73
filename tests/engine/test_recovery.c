/* test_recovery.c - every recovery path triggered for real, with real
 * processes: a receiver killed (SIGKILL) mid-apply and restarted, a relay
 * killed, a link cut mid-frame, corrupted frames, a receiver lost for good
 * (abort back to the baseline). */
#include "refit_util.h"

#include "engine/commit.h"
#include "engine/journal.h"

static job_t J;

static void fini(void)
{
    job_fini(&J);
}

TestSuite(recovery, .fini = fini, .timeout = 150);

static void finish_ok(int last_version)
{
    job_expect_all_exit_ok(&J, 90, 15);
    job_expect_all_exact(&J, last_version);
}

static void killed_mid_apply(const char *args)
{
    job_init(&J, 1, 2, "3e5", 2, "inject");
    int victim = J.nnodes - 1;
    for (int i = 1; i < J.nnodes; i++)
        job_start(&J, i, i == victim ? "DELTACAST_ENGINE_CRASH_AT=3" : NULL, args);
    job_start(&J, 0, NULL, "--abort-ms 20000");
    int rc = job_wait(&J, victim, 30);
    cr_assert_eq(rc, 128 + SIGKILL, "victim exit %d", rc);
    /* its journal says the chunk was being applied */
    char sd[256];
    snprintf(sd, sizeof(sd), "%s/state/%d", J.dir, victim);
    dc_journal_info_t ji;
    uint8_t *states = NULL;
    cr_assert_eq(dc_journal_load(sd, &ji, &states, NULL), DC_OK, "%s", dc_last_error());
    cr_assert_eq(ji.target, 1);
    cr_assert_eq(states[3], DC_JSTATE_APPLYING);
    free(states);
    /* and its bytes are neither v0 nor v1 */
    cr_assert(!job_exact(&J, victim, 0) && !job_exact(&J, victim, 1));
    job_start(&J, victim, NULL, args);
    finish_ok(2);
    cr_assert_eq(job_sh("grep -q 'resuming version 1' %s/log%d", J.dir, victim), 0);
}

Test(recovery, receiver_killed_mid_apply_restarts_exact)
{
    killed_mid_apply(NULL);
}

Test(recovery, receiver_killed_mid_apply_durable_journal)
{
    killed_mid_apply("--durable");
}

Test(recovery, relay_killed_children_reattach_version_commits)
{
    job_init(&J, 1, 3, "3e5", 1, "optimizer");
    /* find the relay: the node with children in the plan (node 1 is the
     * region's gateway in a synthetic local topology) */
    int relay = 1;
    for (int i = 1; i < J.nnodes; i++)
        job_start(&J, i, i == relay ? "DELTACAST_ENGINE_CRASH_AT=4" : NULL, NULL);
    job_start(&J, 0, NULL, "--abort-ms 20000");
    int rc = job_wait(&J, relay, 30);
    cr_assert_eq(rc, 128 + SIGKILL, "relay exit %d", rc);
    sleep(2); /* its children notice and re-attach meanwhile */
    job_start(&J, relay, NULL, NULL);
    finish_ok(1);
    int reattached = 0;
    for (int i = 2; i < J.nnodes; i++)
        reattached += job_sh("grep -q 're-planning the tree' %s/log%d", J.dir, i) == 0;
    if (!reattached)
        job_dump_logs(&J);
    cr_assert(reattached >= 1, "no child of the dead relay re-planned");
}

Test(recovery, wan_link_cut_mid_frame)
{
    job_init(&J, 2, 1, "3e5", 1, "optimizer");
    for (int i = 1; i < J.nnodes; i++)
        job_start(&J, i, NULL, NULL);
    /* the root's connections are cut after 150 kB, 100 kB, ... written:
     * inside dense 64 KiB frames */
    job_start(&J, 0, "DELTACAST_FAULT=drop_after=150000,drop_count=3", "--dense");
    finish_ok(1);
    /* the cuts happened: three times the fault, and the children noticed */
    cr_assert_eq(job_sh("test $(grep -c 'fault injection: dropping the connection' %s/log0) -eq 3",
                        J.dir),
                 0, "the link was not cut three times");
}

static void corrupted_frames(const char *fault)
{
    job_init(&J, 2, 1, "3e5", 2, "optimizer");
    for (int i = 1; i < J.nnodes; i++)
        job_start(&J, i, fault, NULL);
    job_start(&J, 0, NULL, NULL);
    finish_ok(2);
    cr_assert_eq(job_sh("cat %s/log* | grep -q 'CRC32C mismatch'", J.dir), 0,
                 "no corruption was injected");
}

/* corrupt_at: one damaged message for sure (which messages the 5% coin hits
 * depends on how many each node receives, e.g. how its acks are batched) */
Test(recovery, corrupted_frames_are_resent)
{
    corrupted_frames("DELTACAST_FAULT=corrupt=0.05,seed=3,corrupt_at=3000");
}

/* a high rate: re-sends often land behind frames a node has posted no
 * receive for yet (this used to stall the job; see tcp.c "stash") */
Test(recovery, corrupted_frames_high_rate_are_resent)
{
    corrupted_frames("DELTACAST_FAULT=corrupt=0.2,seed=3");
}

Test(recovery, receiver_lost_aborts_back_to_baseline)
{
    job_init(&J, 1, 2, "3e5", 1, "inject");
    int victim = J.nnodes - 1;
    for (int i = 1; i < J.nnodes; i++)
        job_start(&J, i, i == victim ? "DELTACAST_ENGINE_CRASH_AT=5" : NULL, NULL);
    job_start(&J, 0, NULL, "--abort-ms 3000");
    cr_assert_eq(job_wait(&J, victim, 30), 128 + SIGKILL);
    int rc = job_wait(&J, 0, 60);
    if (rc != 1)
        job_dump_logs(&J);
    cr_assert_eq(rc, 1, "root should fail the aborted version, exit %d", rc);
    for (int i = 1; i < victim; i++) {
        int rr = job_wait(&J, i, 15);
        if (rr != 0)
            job_dump_logs(&J);
        cr_assert_eq(rr, 0, "receiver %d exit %d", i, rr);
        /* survivors are back at the baseline, byte for byte */
        cr_assert(job_exact(&J, i, 0), "receiver %d not back at v0", i);
    }
    char sd[256];
    snprintf(sd, sizeof(sd), "%s/state/0", J.dir);
    dc_commit_rec_t r;
    cr_assert_eq(dc_commit_read(sd, &r), DC_ERR_NOT_FOUND, "nothing may be committed");
    cr_assert_eq(job_sh("grep -q 'aborting version 1' %s/log0", J.dir), 0);

    /* the job again, the lost receiver back (its journal: chunks applied,
     * one half-applied): everyone ends exact at v1 */
    job_start(&J, 0, NULL, "--abort-ms 20000");
    usleep(100000);
    for (int i = 1; i < J.nnodes; i++)
        job_start(&J, i, NULL, NULL);
    finish_ok(1);
    cr_assert_eq(dc_commit_read(sd, &r), DC_OK);
    cr_assert_eq(r.version, 1);
}
