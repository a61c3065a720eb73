/* test_failfast.c - a receiver that cannot take a version says why, and the
 * job fails at once with its words (engine FAIL message, proto.h): real
 * `deltacast node` processes, abort_ms a minute so that waiting for a
 * silent node would fail the time bound. */
#include "refit_util.h"

static job_t J;

static void fini(void)
{
    job_fini(&J);
}

TestSuite(failfast, .fini = fini, .timeout = 120);

static double since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

/* Receiver 2 runs with another chunk size than the job's (128 KiB, the job
 * 64 KiB): its layout differs; the coordinator fails version 1 within
 * seconds, naming node 2, its address and both chunk sizes; receiver 1
 * rolls back to v0 and ends.  Before: the coordinator waited abort_ms and
 * said only that a receiver was silent. */
Test(failfast, chunk_size_mismatch_named_at_once)
{
    job_init(&J, 1, 2, "1e5", 1, "optimizer");
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    job_start(&J, 0, NULL, "--abort-ms 60000");
    usleep(100000);
    job_start(&J, 1, NULL, NULL);
    job_start(&J, 2, NULL, "--chunk-size 128KiB");
    int rc0 = job_wait(&J, 0, 60);
    double secs = since(&t0);
    if (rc0 != 1 || secs >= 15)
        job_dump_logs(&J);
    cr_assert_eq(rc0, 1, "coordinator exit %d", rc0);
    fprintf(stderr, "chunk size mismatch: the coordinator failed after %.2f s\n", secs);
    cr_assert(secs < 15, "the coordinator took %.1f s to fail", secs);
    cr_assert_eq(job_sh("grep 'aborting version 1' %s/log0 | grep 'node 2 (' | "
                        "grep '127.0.0.1:%d' | grep -q 'chunk size 131072 bytes, the root.s is "
                        "65536'",
                        J.dir, J.port + 2),
                 0, "the coordinator does not name node 2 and the chunk sizes");
    cr_assert_eq(job_wait(&J, 2, 10), 1, "receiver 2");
    cr_assert_eq(job_sh("grep -q 'layout mismatch with the root' %s/log2", J.dir), 0);
    cr_assert_eq(job_wait(&J, 1, 10), 0, "receiver 1 did not end cleanly");
    cr_assert(job_exact(&J, 1, 0), "receiver 1 is not at v0");
}

/* A receiver whose tensors are another model's: the coordinator's error
 * names the first tensor that differs with the root's dtype and size. */
Test(failfast, other_model_names_first_differing_tensor)
{
    job_init(&J, 1, 2, "1e5", 1, "optimizer");
    cr_assert_eq(job_sh("'%s' gen --params 7e4 --change-rate 0.02 --model optimizer --threads 1 -o %s/other "
                        ">/dev/null && cp %s/other/base.safetensors %s/w1.st",
                        job_bin(), J.dir, J.dir, J.dir),
                 0);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    job_start_all(&J, "--abort-ms 60000");
    int rc0 = job_wait(&J, 0, 60);
    double secs = since(&t0);
    if (rc0 != 1 || secs >= 15)
        job_dump_logs(&J);
    cr_assert_eq(rc0, 1, "coordinator exit %d", rc0);
    fprintf(stderr, "layout mismatch: the coordinator failed after %.2f s\n", secs);
    cr_assert(secs < 15, "the coordinator took %.1f s to fail", secs);
    cr_assert_eq(job_sh("grep 'aborting version 1' %s/log0 | grep 'node 1 (' | "
                        "grep 'first differing tensor' | grep -q ' elements, '",
                        J.dir),
                 0, "the coordinator does not name the first differing tensor");
    cr_assert_eq(job_wait(&J, 1, 10), 1, "receiver 1");
    job_wait(&J, 2, 10);
    cr_assert(job_exact(&J, 2, 0), "receiver 2 is not at v0");
}

/* A receiver that never starts: the root's wait for receivers ends with
 * the nodes that did not join, each with its name and address. */
Test(failfast, missing_node_named_with_its_address)
{
    job_init(&J, 1, 2, "1e5", 1, "optimizer");
    job_start(&J, 0, NULL, "--wait-ms 1500");
    job_start(&J, 1, NULL, NULL);
    int rc0 = job_wait(&J, 0, 30);
    if (rc0 != 1)
        job_dump_logs(&J);
    cr_assert_eq(rc0, 1, "coordinator exit %d", rc0);
    cr_assert_eq(job_sh("grep -q 'did not join within 1500 ms: node 2 (r0-n1, 127.0.0.1:%d)' "
                        "%s/log0",
                        J.port + 2, J.dir),
                 0, "the coordinator does not name node 2 with its address");
}

/* Receiver `bad` cannot start (its weights or state broken by `prep`, a
 * shell line run in the job's directory): with --wait-ms 60000 the root
 * fails within 5 s, its error naming the node, its address, "could not
 * start" and `reason` (grep -F); the receiver exits non-zero and the
 * other receivers end at v0.  Before: the root waited out the
 * minute and named only the missing node. */
static void fails_before_join(int regions, int per, int bad, const char *prep, const char *reason,
                              const char *what)
{
    job_init(&J, regions, per, "1e5", 1, "optimizer");
    cr_assert_eq(job_sh("cd %s && %s", J.dir, prep), 0, "cannot prepare: %s", prep);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    job_start(&J, 0, NULL, "--wait-ms 60000");
    usleep(100000);
    for (int i = 1; i < J.nnodes; i++)
        job_start(&J, i, NULL, NULL);
    int rc0 = job_wait(&J, 0, 30);
    double secs = since(&t0);
    if (rc0 != 1 || secs >= 5)
        job_dump_logs(&J);
    cr_assert_eq(rc0, 1, "coordinator exit %d", rc0);
    fprintf(stderr, "%s: the coordinator failed after %.2f s\n", what, secs);
    cr_assert(secs < 5, "the coordinator took %.1f s to fail", secs);
    cr_assert_eq(job_sh("grep 'root: node %d (' %s/log0 | grep '127.0.0.1:%d' | "
                        "grep 'could not start' | grep -qF '%s'",
                        bad, J.dir, J.port + bad, reason),
                 0, "the coordinator's error does not name node %d, its address and '%s'", bad,
                 reason);
    int rcb = job_wait(&J, bad, 10);
    cr_assert(rcb != 0 && rcb != -1, "receiver %d exit %d", bad, rcb);
    for (int i = 1; i < J.nnodes; i++) {
        if (i == bad)
            continue;
        /* one that had not attached yet when the root ended waits out
         * its parent (abort_ms, a few seconds here): it ends, unchanged */
        int rc = job_wait(&J, i, 15);
        cr_assert(rc == 0 || rc == 1, "receiver %d exit %d", i, rc);
        cr_assert(job_exact(&J, i, 0), "receiver %d is not at v0", i);
    }
}

Test(failfast, missing_weights_file_fails_at_once)
{
    fails_before_join(1, 2, 2, "rm w2.st", "w2.st", "missing weights file");
    cr_assert_eq(job_sh("grep -qi 'no such file' %s/log0", J.dir), 0);
}

Test(failfast, weights_too_small_fails_at_once)
{
    fails_before_join(1, 2, 2, "truncate -s 50000 w2.st", "w2.st", "weights file too small");
}

Test(failfast, state_dir_not_creatable_fails_at_once)
{
    /* a regular file where its state directory should be */
    fails_before_join(1, 2, 2, "mkdir -p state && touch state/2", "state/2",
                      "state directory not creatable");
}

/* The failing receiver's parent is a relay (two regions: the second
 * region's nodes hang below its first), which forwards the FAIL up. */
Test(failfast, relay_forwards_a_fail_before_join)
{
    fails_before_join(2, 2, 4, "rm w4.st", "w4.st", "missing weights below a relay");
    cr_assert_eq(job_sh("grep -q 'attaching to parent 3 ' %s/log4", J.dir), 0,
                 "node 4 did not attach below relay 3");
}
