/* test_shards.c - refit jobs with several senders (trainer shards), nodes
 * with several parents and receivers of some shards only, with real
 * `deltacast node` processes over TCP on this machine: 2 senders owning one
 * shard each, 2 receiver regions x 2 receivers; consecutive versions; a
 * receiver that needs only shard 1; a relay killed mid-version.  Every
 * receiver is byte-compared with the senders' version files. */
#include "refit_util.h"

#include "engine/commit.h"
#include "engine/layout.h"
#include "kernels/safetensors.h"

static job_t J;

static void fini(void)
{
    job_fini(&J);
}

TestSuite(shards, .fini = fini, .timeout = 150);

static void finish_ok(int v)
{
    job_expect_all_exit_ok(&J, 90, 20);
    char st[256];
    snprintf(st, sizeof(st), "%s/state/0", J.dir);
    dc_commit_rec_t r;
    cr_assert_eq(dc_commit_read(st, &r), DC_OK);
    cr_assert_eq(r.version, (uint64_t)v);
}

/* Receiver `rank`: chunks of the shards in `mask` equal version `v_need`,
 * the others version `v_other`.  Returns the number of chunks compared in
 * each class through *n_need / *n_other, and how many of them differ
 * between the two versions (so the check can fail) through *n_changed. */
static void check_shards(int rank, uint64_t mask, uint32_t S, int v_need, int v_other,
                         uint32_t *n_need, uint32_t *n_other, uint32_t *n_changed)
{
    char wp[256], np[256], op[256];
    snprintf(wp, sizeof(wp), "%s/w%d.st", J.dir, rank);
    snprintf(np, sizeof(np), "%s/ver/v%d.safetensors", J.dir, v_need);
    snprintf(op, sizeof(op), "%s/ver/v%d.safetensors", J.dir, v_other);
    dc_st_file_t *w = NULL, *fn = NULL, *fo = NULL;
    cr_assert_eq(dc_st_open(wp, DC_ST_READ, &w), DC_OK, "%s", dc_last_error());
    cr_assert_eq(dc_st_open(np, DC_ST_READ, &fn), DC_OK);
    cr_assert_eq(dc_st_open(op, DC_ST_READ, &fo), DC_OK);
    dc_layout_t *l = NULL;
    cr_assert_eq(dc_layout_from_st(w, 65536, &l), DC_OK);
    *n_need = *n_other = *n_changed = 0;
    for (uint32_t c = 0; c < l->nchunks; c++) {
        const dc_layout_chunk_t *lc = &l->chunks[c];
        const uint8_t *a = dc_st_data(w, dc_st_tensor(w, lc->tensor)) + lc->offset;
        const uint8_t *bn = dc_st_data(fn, dc_st_tensor(fn, lc->tensor)) + lc->offset;
        const uint8_t *bo = dc_st_data(fo, dc_st_tensor(fo, lc->tensor)) + lc->offset;
        int need = (mask >> job_shard_of(l, c, S)) & 1;
        const uint8_t *want = need ? bn : bo;
        if (memcmp(a, want, lc->len) != 0) {
            job_dump_logs(&J);
            cr_assert_fail("receiver %d chunk %u (shard %u, %s) is not version %d", rank, c,
                           job_shard_of(l, c, S), need ? "needed" : "not needed",
                           need ? v_need : v_other);
        }
        *n_changed += memcmp(bn, bo, lc->len) != 0;
        if (need)
            (*n_need)++;
        else
            (*n_other)++;
    }
    dc_layout_free(l);
    dc_st_close(w);
    dc_st_close(fn);
    dc_st_close(fo);
}

Test(shards, two_senders_2x2_three_versions_exact)
{
    job_init(&J, 2, 2, "1e6", 3, "optimizer");
    job_use_shards(&J, 2, NULL);
    job_start_all(&J, NULL);
    finish_ok(3);
    job_expect_all_exact(&J, 3);
    /* both senders broadcast (each its own shard), and the coordinator
     * counted the other's frames: 3 committed versions */
    cr_assert_eq(job_sh("grep -q 'sender 1: version 3: broadcasting' %s/log1", J.dir), 0,
                 "sender 1 did not broadcast version 3");
    cr_assert_eq(job_sh("python3 -c \"import json; d=json.load(open('%s/stats.json')); "
                        "v=d['versions']; assert len(v)==3 and all(x['committed'] for x in v); "
                        "assert all(x['frames']==d['chunks'] for x in v), v\"",
                        J.dir),
                 0);
    /* every receiver's own record says 3 */
    for (int i = J.nsenders; i < J.nnodes; i++) {
        char st[256];
        snprintf(st, sizeof(st), "%s/state/%d", J.dir, i);
        dc_commit_rec_t r;
        cr_assert_eq(dc_commit_read(st, &r), DC_OK);
        cr_assert_eq(r.version, 3, "receiver %d committed %llu", i, (unsigned long long)r.version);
    }
    /* node 2 (a gateway of stream 0) takes stream 1 from node 3 in its
     * region: a node with two parents */
    cr_assert_eq(job_sh("grep -q 'attaching to parent 3' %s/log2", J.dir), 0,
                 "node 2 did not attach to its second parent");
}

Test(shards, receiver_of_shard_1_only)
{
    job_init(&J, 2, 2, "1e6", 2, "inject");
    const char *sh[4] = {NULL, NULL, NULL, "[1]"};
    job_use_shards(&J, 2, sh);
    job_start_all(&J, NULL);
    finish_ok(2);
    for (int i = J.nsenders; i < J.nnodes - 1; i++)
        cr_assert(job_exact(&J, i, 2), "receiver %d is not byte-exact with v2", i);
    /* the last receiver: shard 1's chunks at v2, shard 0's untouched (v0) */
    uint32_t nn = 0, no = 0, ch = 0;
    check_shards(J.nnodes - 1, 2, 2, 2, 0, &nn, &no, &ch);
    cr_assert(nn > 0 && no > 0, "%u needed, %u other chunks", nn, no);
    cr_assert(ch > 0, "v0 and v2 do not differ");
    cr_assert(!job_exact(&J, J.nnodes - 1, 2), "the partial receiver took shard 0 too");
}

/* The relay of stream 0 in region r0 (node 2: it forwards to node 3 and to
 * region r1) is SIGKILLed mid-apply of a shard-0 chunk; its children
 * re-plan, re-attach and the version commits once it is back, everyone
 * byte-exact. */
Test(shards, relay_killed_multi_sender_version_commits)
{
    job_init(&J, 2, 2, "1e6", 2, "optimizer");
    job_use_shards(&J, 2, NULL);
    int relay = 2;
    for (int i = 1; i < J.nnodes; i++)
        job_start(&J, i, i == relay ? "DELTACAST_ENGINE_CRASH_AT=4" : NULL, NULL);
    job_start(&J, 0, NULL, "--abort-ms 20000");
    int rc = job_wait(&J, relay, 30);
    if (rc != 128 + SIGKILL)
        job_dump_logs(&J);
    cr_assert_eq(rc, 128 + SIGKILL, "relay exit %d", rc);
    sleep(2); /* its children notice and re-attach meanwhile */
    job_start(&J, relay, NULL, NULL);
    finish_ok(2);
    job_expect_all_exact(&J, 2);
    int replanned = 0;
    for (int i = J.nsenders; i < J.nnodes; i++)
        replanned += i != relay && job_sh("grep -q 're-planning the tree' %s/log%d", J.dir, i) == 0;
    if (!replanned)
        job_dump_logs(&J);
    cr_assert(replanned >= 1, "no child of the dead relay re-planned");
}

/* Node 0 must be a sender (it coordinates): refused clearly otherwise. */
Test(shards, coordinator_must_be_a_sender)
{
    job_init(&J, 1, 1, "2e5", 1, "optimizer");
    snprintf(J.topo, sizeof(J.topo), "%s/topo.yaml", J.dir);
    FILE *f = fopen(J.topo, "w");
    cr_assert_not_null(f);
    fprintf(f, "regions:\n  - name: a\n    nodes:\n"
               "      - {host: r, addr: \"127.0.0.1:%d\", role: receiver}\n"
               "      - {host: s, addr: \"127.0.0.1:%d\", role: sender}\n",
            J.port, J.port + 1);
    fclose(f);
    cr_assert_neq(job_sh("DELTACAST_SECRET=x '%s' node --topology %s --rank 0 --weights "
                         "%s/w1.st --state %s/st0 2>%s/err",
                         job_bin(), J.topo, J.dir, J.dir, J.dir),
                  0);
    cr_assert_eq(job_sh("grep -q 'coordinator and must be a sender' %s/err", J.dir), 0);
}

/* One shard with two owners: tree/ plans one stream per owner and the
 * shard's chunks alternate between them; both senders broadcast, every
 * receiver byte-exact. */
Test(shards, shard_with_two_owners)
{
    job_init(&J, 2, 1, "1e6", 2, "optimizer");
    J.nsenders = 2;
    J.nnodes = 2 + J.regions * J.per;
    for (int i = 1; i < J.nnodes; i++)
        cr_assert_eq(job_sh("cp %s/ver/v0.safetensors %s/w%d.st", J.dir, J.dir, i), 0);
    J.port = job_pick_ports(J.nnodes);
    snprintf(J.topo, sizeof(J.topo), "%s/topo.yaml", J.dir);
    FILE *f = fopen(J.topo, "w");
    cr_assert_not_null(f);
    fprintf(f, "shards: 1\ndefaults: {lan: 10gbit, wan: 1gbit}\nregions:\n"
               "  - name: train\n    nodes:\n"
               "      - {host: s0, addr: \"127.0.0.1:%d\", role: sender, shards: [0]}\n"
               "      - {host: s1, addr: \"127.0.0.1:%d\", role: sender, shards: [0]}\n"
               "  - name: r0\n    nodes:\n"
               "      - {host: a, addr: \"127.0.0.1:%d\", role: receiver}\n"
               "  - name: r1\n    nodes:\n"
               "      - {host: b, addr: \"127.0.0.1:%d\", role: receiver}\n",
            J.port, J.port + 1, J.port + 2, J.port + 3);
    fclose(f);
    job_start_all(&J, NULL);
    finish_ok(2);
    job_expect_all_exact(&J, 2);
    /* each owner broadcast a part of the shard: sender 1 some but not all
     * of the chunks (the coordinator logs no such line: the rest is its) */
    cr_assert_eq(job_sh("grep -Eo 'sender 1: version 2: broadcasting [0-9]+ of [0-9]+' %s/log1 | "
                        "awk '{n++; if (!($6 > 0 && $6 < $8)) bad = 1} END {exit !(n && !bad)}'",
                        J.dir),
                 0, "sender 1 did not broadcast a part of the shard");
    cr_assert_eq(job_sh("python3 -c \"import json; d=json.load(open('%s/stats.json')); "
                        "v=d['versions']; assert len(v)==2 and all(x['frames']==d['chunks'] "
                        "for x in v), v\"",
                        J.dir),
                 0, "frames of both owners do not add up to the chunks");
}

/* Sender 1 (not the coordinator) is SIGKILLed once its control link to
 * the coordinator is up, and a new process takes its place.  Receiver 3 is
 * held back until then, so no version can have begun: deterministic (a
 * kill timed against versions of ~10 ms raced with the job's end).  The
 * coordinator takes the new process's control link, and every version
 * commits exact. */
Test(shards, sender_restarted_rejoins)
{
    job_init(&J, 2, 1, "1e6", 3, "optimizer");
    job_use_shards(&J, 2, NULL);
    job_start(&J, 0, NULL, "--abort-ms 30000");
    usleep(100000);
    job_start(&J, 1, NULL, NULL);
    job_start(&J, 2, NULL, NULL);
    cr_assert(job_until_sh(10000, "grep -q 'coordinator: sender 1 connected' %s/log0", J.dir),
              "sender 1 never connected to the coordinator");
    job_kill(&J, 1);
    job_start(&J, 1, NULL, NULL);
    job_start(&J, 3, NULL, NULL);
    finish_ok(3);
    job_expect_all_exact(&J, 3);
}

/* A sender shard killed in the middle of a version (stalled by the fault
 * hook after part of its chunks, then SIGKILLed) and started again: the
 * coordinator takes the new process back and the version still commits,
 * every receiver exact. */
Test(shards, sender_killed_mid_version_restarts)
{
    job_init(&J, 2, 1, "4e6", 2, "optimizer");
    job_use_shards(&J, 2, NULL);
    job_start(&J, 0, NULL, "--abort-ms 30000");
    usleep(100000);
    job_start(&J, 1, "DELTACAST_FAULT=stall_after=20000,stall_ms=60000", NULL);
    job_start(&J, 2, NULL, NULL);
    job_start(&J, 3, NULL, NULL);
    cr_assert(job_until_sh(10000,
                           "grep -q 'sender 1: version 1: broadcasting' %s/log1 && "
                           "grep -q 'fault injection: stalling' %s/log1",
                           J.dir, J.dir),
              "sender 1 never stalled inside version 1");
    usleep(200000);
    /* killed mid-version: the coordinator has not committed version 1 */
    char st[256];
    snprintf(st, sizeof(st), "%s/state/0", J.dir);
    dc_commit_rec_t r = {0};
    if (dc_commit_read(st, &r) == DC_OK)
        cr_assert_eq(r.version, 0, "version %llu committed before sender 1 was killed",
                     (unsigned long long)r.version);
    job_kill(&J, 1);
    job_start(&J, 1, NULL, NULL);
    finish_ok(2);
    job_expect_all_exact(&J, 2);
}

/* A sender that cannot open a version the coordinator begins fails, and its
 * last line says why (the reason it failed, not whatever was said after). */
Test(shards, sender_failure_says_why)
{
    job_init(&J, 2, 1, "2e5", 2, "optimizer");
    job_use_shards(&J, 2, NULL);
    /* sender 1 holds v0 and v1 only */
    cr_assert_eq(job_sh("mkdir -p %s/ver1 && cp %s/ver/v0.safetensors %s/ver/v1.safetensors "
                        "%s/ver1/",
                        J.dir, J.dir, J.dir, J.dir),
                 0);
    char args[256];
    snprintf(args, sizeof(args), "--versions %s/ver1", J.dir);
    job_start(&J, 0, NULL, "--abort-ms 5000");
    job_start(&J, 1, NULL, args);
    for (int i = J.nsenders; i < J.nnodes; i++)
        job_start(&J, i, NULL, NULL);
    int rc = job_wait(&J, 1, 60);
    if (rc != 1)
        job_dump_logs(&J);
    cr_assert_eq(rc, 1, "sender 1 exit %d", rc);
    cr_assert_eq(job_sh("tail -n 1 %s/log1 | grep -q "
                        "\"^deltacast node: error: rank 1: cannot open .*ver1/v2.safetensors\"",
                        J.dir),
                 0, "sender 1's last line does not say why it failed");
}
