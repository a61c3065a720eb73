/* test_perf_refit.c - `deltacast perf refit` and `deltacast demo` end to
 * end at a tiny size: JSON keys of the issue, every receiver exact. */
#include "dc_config.h"
#include "refit_util.h"

TestSuite(perf_refit, .timeout = 200);

static void check_json(const char *path, int netns)
{
    cr_assert_eq(job_sh("python3 - '%s' %d <<'PY'\n"
                        "import json, sys\n"
                        "d = json.load(open(sys.argv[1])); netns = sys.argv[2] == '1'\n"
                        "for k in ('seconds','dense_seconds','speedup_vs_dense','payload_bytes',"
                        "'wan_bytes','exact','phases','versions'):\n"
                        "    assert k in d, k\n"
                        "assert d['exact'] is True\n"
                        "assert d['network'] == ('netns+tbf' if netns else 'loopback-unshaped')\n"
                        "assert len(d['versions']) == 2\n"
                        "for v in d['versions']:\n"
                        "    for k in ('seconds','dense_seconds','speedup_vs_dense','payload_bytes',"
                        "'wan_bytes','exact','phases'):\n"
                        "        assert k in v, k\n"
                        "    assert v['exact'] is True and v['dense_exact'] is True\n"
                        "    assert v['payload_bytes'] * 4 < v['dense_payload_bytes']\n"
                        "    assert set(v['phases']) == {'encode','transfer','apply','commit'}\n"
                        "    assert len(v['wan_bytes']) >= 2\n"
                        "    # issue 19: every edge says its encryption; by default (tls=auto)\n"
                        "    # the edges between regions are TLS, the others clear\n"
                        "    enc = v['encryption']\n"
                        "    assert all(enc[k] == 'TLS_AES_128_GCM_SHA256' for k in v['wan_bytes']), enc\n"
                        "    assert all(e in ('TLS_AES_128_GCM_SHA256', 'none') for e in enc.values()), enc\n"
                        "assert d['encryption']['wan'] == 'TLS_AES_128_GCM_SHA256', d['encryption']\n"
                        "assert d['encryption']['lan'] == 'none', d['encryption']\n"
                        "PY",
                        path, netns),
                 0, "bad JSON in %s", path);
}

/* Run `perf refit --params 3e5 --versions 2 --json ARGS` (64 KiB chunks,
 * extra environment ENV) in a fresh directory `dir` (files in dir/w), and
 * check its JSON.  The caller removes dir. */
static void run_refit(char *dir, const char *env, const char *args, int netns)
{
    strcpy(dir, "/tmp/dc_perfrefit_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    int rc = job_sh("%s DELTACAST_CHUNK_SIZE=64KiB '%s' perf refit --params 3e5 --versions 2 "
                    "--json %s --workdir %s/w > %s/out.json 2>%s/err",
                    env, job_bin(), args, dir, dir, dir);
    if (rc != 0)
        job_sh("cat %s/err >&2", dir);
    cr_assert_eq(rc, 0);
    char p[128];
    snprintf(p, sizeof(p), "%s/out.json", dir);
    check_json(p, netns);
}

Test(perf_refit, loopback_json)
{
    char dir[32];
    run_refit(dir, "", "--receivers 3 --regions 2 --no-netns", 0);
    job_sh("rm -rf %s", dir);
}

/* Two trainer shards (--senders 2): both senders broadcast, every WAN link
 * of a region's gateways is listed, the receivers are exact, and each
 * region's WAN veth carries each payload byte once (the links entering a
 * region add up to the version's payload, headers aside). */
Test(perf_refit, loopback_two_senders_json)
{
    char dir[32];
    run_refit(dir, "", "--receivers 4 --regions 2 --senders 2 --no-netns", 0);
    cr_assert_eq(job_sh("python3 - %s/out.json <<'PY'\n"
                        "import json, sys\n"
                        "d = json.load(open(sys.argv[1]))\n"
                        "assert d['senders'] == 2, d['senders']\n"
                        "for v in d['versions']:\n"
                        "    ins = {}\n"
                        "    for k, b in v['wan_bytes'].items():\n"
                        "        p, n = map(int, k.split('->'))\n"
                        "        r = (n - 2) // 2\n"
                        "        if p < 2: ins[r] = ins.get(r, 0) + b\n"
                        "    assert {int(k.split('->')[0]) for k in v['wan_bytes']} >= {0, 1}, v['wan_bytes']\n"
                        "    assert ins and v['payload_bytes'] <= ins[0] < v['payload_bytes'] + 64 * v['frames'] + 1024, (ins, v['payload_bytes'], v['frames'])\n"
                        "PY",
                        dir),
                 0, "two-sender JSON");
    job_sh("rm -rf %s", dir);
}

#if DC_HAVE_UCX
/* After a `perf refit --transport ucx` with 4 receivers in 2 regions in
 * dir/w: every node chose ucx (its log says so); the edges inside a region
 * ran over UCX and those between regions over tcp (DESIGN: TCP between
 * regions), each node listening for both.  Per run (delta, dense): 2 edges
 * inside a region, 2 between regions (trainer -> a gateway, a gateway ->
 * the next). */
static void check_lan_ucx_wan_tcp(const char *dir)
{
    cr_assert_eq(job_sh("test $(cat %s/w/log* | grep -c 'info: transport ucx') -ge 5", dir), 0,
                 "not every node ran over UCX");
    cr_assert_eq(job_sh("test $(cat %s/w/log* | grep -c 'ucx: accepted') -ge 4", dir), 0,
                 "edges inside a region did not run over UCX");
    cr_assert_eq(job_sh("test $(cat %s/w/log* | grep -c 'over ucx$') -ge 4", dir), 0,
                 "no node attached to its region's parent over UCX");
    cr_assert_eq(job_sh("test $(cat %s/w/log* | grep -c 'tcp: accepted') -ge 4", dir), 0,
                 "edges between regions did not run over tcp");
    cr_assert_eq(job_sh("test $(cat %s/w/log* | grep -c 'over tcp$') -ge 4", dir), 0,
                 "no node attached to a parent in another region over tcp");
}
#endif

/* The engine with transport ucx on loopback (tcp/shm underneath here): UCX
 * inside the regions, tcp between them; every receiver exact after each
 * version and after the dense refits. */
Test(perf_refit, loopback_ucx_json)
{
#if !DC_HAVE_UCX
    cr_skip_test("built without UCX");
#else
    char dir[32];
    run_refit(dir, "DELTACAST_LOG=info", "--receivers 4 --regions 2 --no-netns --transport ucx",
              0);
    check_lan_ucx_wan_tcp(dir);
    job_sh("rm -rf %s", dir);
#endif
}

/* The same in network namespaces (a veth per region, shaped): each region's
 * receivers reach the trainer's namespace, which has one interface per
 * region.  Before UCX contexts were kept to one interface, UCX's lanes went
 * astray there and no receiver ever joined. */
Test(perf_refit, netns_ucx_json)
{
#if !DC_HAVE_UCX
    cr_skip_test("built without UCX");
#else
    if (geteuid() != 0 || job_sh("ip netns list >/dev/null 2>&1 && command -v tc >/dev/null") != 0)
        cr_skip_test("network namespaces need root and iproute2");
    char dir[32];
    run_refit(dir, "DELTACAST_LOG=info",
              "--receivers 4 --regions 2 --wan-rate 200mbit --transport ucx", 1);
    check_lan_ucx_wan_tcp(dir);
    job_sh("rm -rf %s", dir);
#endif
}

Test(perf_refit, netns_shaped_json)
{
    if (geteuid() != 0 || job_sh("ip netns list >/dev/null 2>&1 && command -v tc >/dev/null") != 0)
        cr_skip_test("network namespaces need root and iproute2");
    char dir[32];
    run_refit(dir, "", "--receivers 2 --regions 2 --wan-rate 200mbit", 1);
    /* the plot was made when gnuplot is present */
    if (job_sh("command -v gnuplot >/dev/null") == 0)
        cr_assert_eq(job_sh("test -s %s/w/refit.png", dir), 0, "no PNG plot");
    job_sh("rm -rf %s", dir);
}

Test(perf_refit, usage_errors)
{
    cr_assert_eq(job_sh("'%s' perf refit --regions 3 --receivers 2 2>/dev/null", job_bin()), 2);
    cr_assert_eq(job_sh("'%s' perf refit --model nope 2>/dev/null", job_bin()), 2);
    cr_assert_eq(job_sh("'%s' perf refit --wan-rate fast 2>/dev/null", job_bin()), 2);
    cr_assert_eq(job_sh("'%s' demo --help >/dev/null", job_bin()), 0);
    cr_assert_eq(job_sh("'%s' node --rank 0 2>/dev/null", job_bin()), 2);
}
