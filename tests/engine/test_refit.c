/* test_refit.c - whole refit jobs with real `deltacast node` processes over
 * TCP on this machine: consecutive versions, a receiver on an older
 * baseline, dense mode; every receiver byte-compared with the sender. */
#include "refit_util.h"

#include "engine/commit.h"

static job_t J;

static void fini(void)
{
    job_fini(&J);
}

TestSuite(refit, .fini = fini, .timeout = 120);

Test(refit, three_versions_2x2_exact)
{
    job_init(&J, 2, 2, "3e5", 3, "optimizer");
    job_start_all(&J, NULL);
    int rc = job_wait(&J, 0, 60);
    if (rc != 0)
        job_dump_logs(&J);
    cr_assert_eq(rc, 0, "root exit %d", rc);
    for (int i = 1; i < J.nnodes; i++)
        cr_assert_eq(job_wait(&J, i, 10), 0, "receiver %d", i);
    job_expect_all_exact(&J, 3);
    /* the root and the relays send frames with the CRC32C they derive from
     * the frame header (dc_verbs_isend_crc): on clean links no hop ever
     * finds a mismatch (a node logs its links' mismatches and re-sends
     * when it closes them) */
    cr_assert_neq(job_sh("grep -hE ' [1-9][0-9]* CRC32C mismatches received' %s/log*", J.dir),
                  0, "a hop saw CRC32C mismatches on a clean job");
    char st[256];
    snprintf(st, sizeof(st), "%s/state/0", J.dir);
    dc_commit_rec_t r;
    cr_assert_eq(dc_commit_read(st, &r), DC_OK);
    cr_assert_eq(r.version, 3);
    cr_assert_eq(r.baseline, 2);
    /* every receiver's own record says 3 too */
    for (int i = 1; i < J.nnodes; i++) {
        snprintf(st, sizeof(st), "%s/state/%d", J.dir, i);
        cr_assert_eq(dc_commit_read(st, &r), DC_OK);
        cr_assert_eq(r.version, 3, "receiver %d committed %llu", i, (unsigned long long)r.version);
    }
    /* stats: 3 committed versions, delta much smaller than dense */
    cr_assert_eq(job_sh("python3 -c \"import json,sys; d=json.load(open('%s/stats.json')); "
                        "v=d['versions']; assert len(v)==3 and all(x['committed'] for x in v); "
                        "assert all(x['payload_bytes'] < x['dense_bytes']/5 for x in v), v\"",
                        J.dir),
                 0);
    /* running the root again: nothing left to do, still exact */
    job_start_all(&J, NULL);
    cr_assert_eq(job_wait(&J, 0, 30), 0);
    job_expect_all_exact(&J, 3);
}

Test(refit, receiver_on_older_baseline_gets_overwrites)
{
    job_init(&J, 1, 3, "2e5", 2, "inject");
    /* the job is at v1; receivers 1 and 2 hold v1, receiver 3 still v0 */
    char st[256];
    snprintf(st, sizeof(st), "%s/state/0", J.dir);
    job_sh("mkdir -p %s", st);
    dc_commit_rec_t rec = {.version = 1, .baseline = 0};
    cr_assert_eq(dc_commit_cas(st, 0, &rec, NULL), DC_OK);
    for (int i = 1; i <= 2; i++)
        job_sh("cp %s/ver/v1.safetensors %s/w%d.st", J.dir, J.dir, i);
    for (int i = 1; i <= 3; i++)
        job_start(&J, i, NULL, i <= 2 ? "--initial-version 1" : "--initial-version 0");
    job_start(&J, 0, NULL, NULL);
    int rc = job_wait(&J, 0, 60);
    if (rc != 0)
        job_dump_logs(&J);
    cr_assert_eq(rc, 0);
    job_expect_all_exact(&J, 2);
    cr_assert_eq(job_sh("grep -q '\"repairs\": [1-9]' %s/stats.json", J.dir), 0,
                 "the lagging receiver got no overwrites");
}

/* A relay forwards each frame before it applies it (DELTACAST_ENGINE_TRACE:
 * per-frame events in file order), and forwards every frame it receives. */
Test(refit, relay_forwards_before_apply)
{
    job_init(&J, 2, 1, "2e5", 1, "optimizer");
    char env[300];
    snprintf(env, sizeof(env), "DELTACAST_ENGINE_TRACE=%s", J.dir);
    job_start(&J, 0, env, "--dense");
    usleep(100000);
    for (int i = 1; i < J.nnodes; i++)
        job_start(&J, i, env, NULL);
    int rc = job_wait(&J, 0, 60);
    if (rc != 0)
        job_dump_logs(&J);
    cr_assert_eq(rc, 0);
    job_expect_all_exact(&J, 1);
    /* trainer -> node 1 -> node 2: node 1 posts chunk c to node 2 before
     * its own "apply c"; every frame received is posted */
    cr_assert_eq(job_sh("python3 -c \"\nimport sys\nrx=set(); post=set(); bad=[]\n"
                        "for l in open('%s/trace.1'):\n"
                        "    t,e,c,p,n=l.split()\n"
                        "    if e=='rx': rx.add(c)\n"
                        "    if e=='post' and p=='2': post.add(c)\n"
                        "    if e=='apply' and c not in post: bad.append(c)\n"
                        "assert len(rx)>=4 and rx==post and not bad, "
                        "(sorted(rx), sorted(post), bad)\n\"",
                        J.dir),
                 0, "relay trace: a frame applied before it was forwarded, or not forwarded");
}

Test(refit, dense_mode_exact)
{
    job_init(&J, 2, 1, "2e5", 1, "optimizer");
    job_start_all(&J, "--dense");
    int rc = job_wait(&J, 0, 60);
    if (rc != 0)
        job_dump_logs(&J);
    cr_assert_eq(rc, 0);
    job_expect_all_exact(&J, 1);
    cr_assert_eq(job_sh("python3 -c \"import json; d=json.load(open('%s/stats.json')); "
                        "v=d['versions'][0]; assert v['mode']=='dense' and "
                        "v['payload_bytes'] > v['dense_bytes']*0.3, v\"",
                        J.dir),
                 0);
}

/* A version whose tensor set differs (here: another model size) is refused
 * with a clear error before anything of it is sent; the versions before it
 * are committed and every receiver stays byte-exact at the last of them. */
Test(refit, changed_tensor_set_refused_cleanly)
{
    job_init(&J, 1, 2, "3e5", 2, "optimizer");
    cr_assert_eq(job_sh("'%s' gen --params 2e5 --change-rate 0.02 --model optimizer --threads 1 "
                        "-o %s/other >/dev/null && cp %s/other/base.safetensors "
                        "%s/ver/v2.safetensors",
                        job_bin(), J.dir, J.dir, J.dir),
                 0);
    job_start_all(&J, NULL);
    int rc = job_wait(&J, 0, 60);
    if (rc == 0 || rc == -1 || job_sh("grep -q 'have different tensors' %s/log0", J.dir) != 0)
        job_dump_logs(&J);
    cr_assert_neq(rc, 0, "the root accepted a version with another tensor set");
    cr_assert_neq(rc, -1, "the root hung");
    cr_assert_eq(job_sh("grep -q 'have different tensors' %s/log0", J.dir), 0,
                 "no clear error in the root's log");
    char st[256];
    snprintf(st, sizeof(st), "%s/state/0", J.dir);
    dc_commit_rec_t r;
    cr_assert_eq(dc_commit_read(st, &r), DC_OK);
    cr_assert_eq(r.version, 1, "committed %llu", (unsigned long long)r.version);
    for (int i = 1; i < J.nnodes; i++) {
        job_wait(&J, i, 15);
        cr_assert(job_exact(&J, i, 1), "receiver %d is not at v1", i);
    }
}

/* Issue 19: the edges between regions are encrypted by default (config
 * tls=auto), those inside a region are not, and the job stays exact. */
Test(refit, edges_between_regions_are_encrypted_by_default)
{
    job_init(&J, 2, 2, "2e5", 2, "optimizer");
    unsetenv("DELTACAST_TLS");
    job_start_all(&J, NULL);
    job_expect_all_exit_ok(&J, 60, 10);
    job_expect_all_exact(&J, 2);
    /* every node logs each connection's encryption; some cross regions
     * (TLS) and some do not (clear) */
    cr_assert_eq(job_sh("grep -hq 'encryption TLSv1.3 TLS_AES_128_GCM_SHA256, PSK from the job "
                        "secret' %s/log*",
                        J.dir),
                 0, "no connection was encrypted");
    cr_assert_eq(job_sh("grep -hq 'encryption none (clear)' %s/log*", J.dir), 0,
                 "every connection was encrypted (tls=auto: between regions only)");
    /* stats: every wan link says the suite, every lan link none */
    cr_assert_eq(job_sh("python3 -c \"import json; d=json.load(open('%s/stats.json')); "
                        "l=[k for v in d['versions'] for k in v['links']]; "
                        "assert any(k['kind']=='wan' for k in l), l; "
                        "assert all(k['encryption']==('TLS_AES_128_GCM_SHA256' if "
                        "k['kind']=='wan' else 'none') for k in l), l\"",
                        J.dir),
                 0);
}

/* Certificates for "trainer", "r0-n0", "r1-n0" (the --local names) signed by
 * one CA, in dir/tls. */
static void tls_certs(const char *dir)
{
    cr_assert_eq(job_sh("mkdir -p %s/tls && cd %s/tls && set -e; "
                        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
                        "-keyout ca.key -out ca.pem -days 2 -subj /CN=job-ca 2>/dev/null; "
                        "for n in trainer r0-n0 r1-n0; do "
                        "printf 'subjectAltName=DNS:%%s\\n' $n > $n.ext; "
                        "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
                        "-keyout $n.key -out $n.csr -subj /CN=$n 2>/dev/null; "
                        "openssl x509 -req -in $n.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
                        "-out $n.pem -days 2 -extfile $n.ext 2>/dev/null; done",
                        dir, dir),
                 0, "openssl CLI failed");
}

/* Start node `rank` with the certificate of `name`. */
static void tls_start(job_t *j, int rank, const char *name)
{
    char env[1024];
    snprintf(env, sizeof(env),
             "DELTACAST_TLS_CA_FILE=%s/tls/ca.pem;DELTACAST_TLS_CERT_FILE=%s/tls/%s.pem;"
             "DELTACAST_TLS_KEY_FILE=%s/tls/%s.key",
             j->dir, j->dir, name, j->dir, name);
    job_start(j, rank, env, NULL);
}

/* Issue 19, certificate mode: each node's certificate names it; the job is
 * exact and every node logs its peers' certificate names. */
Test(refit, certificates_name_every_node)
{
    job_init(&J, 2, 1, "1e5", 1, "optimizer");
    tls_certs(J.dir);
    tls_start(&J, 0, "trainer");
    usleep(100000);
    tls_start(&J, 1, "r0-n0");
    tls_start(&J, 2, "r1-n0");
    job_expect_all_exit_ok(&J, 60, 10);
    job_expect_all_exact(&J, 1);
    cr_assert_eq(job_sh("grep -q 'certificates, kernel TLS off.*peer certificate r0-n0' %s/log0",
                        J.dir),
                 0, "the trainer did not see r0-n0's certificate");
    /* r0-n0 dials the trainer and checks the trainer's certificate */
    cr_assert_eq(job_sh("grep -q 'connection to .*peer certificate trainer' %s/log1", J.dir), 0,
                 "r0-n0 did not see the trainer's certificate");
}

/* Issue 19, certificate mode: a node that presents another node's
 * certificate cannot claim its own id (nor the other's: its parent checks
 * the id in its SUB / HELLO against the certificate's name). */
Test(refit, a_certificate_of_another_node_cannot_claim_this_one)
{
    job_init(&J, 2, 1, "1e5", 1, "optimizer");
    tls_certs(J.dir);
    tls_start(&J, 0, "trainer");
    usleep(100000);
    tls_start(&J, 1, "r0-n0");
    tls_start(&J, 2, "r0-n0"); /* node 2 is r1-n0, with r0-n0's certificate */
    int seen = job_until_sh(30000,
                            "grep -q \"claims node 2 (r1-n0), but its TLS certificate names "
                            "'r0-n0': refused\" %s/log0",
                            J.dir);
    if (!seen)
        job_dump_logs(&J);
    cr_assert(seen, "the trainer did not refuse the impostor");
    cr_assert_eq(job_wait(&J, 2, 1), -1, "the impostor finished a refit");
    cr_assert(!job_exact(&J, 2, 1), "the impostor got the weights");
}
