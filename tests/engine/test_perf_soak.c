/* test_perf_soak.c - `deltacast perf soak` end to end: a short soak with
 * every fault kind (each must have fired), every receiver checked after
 * every version; and the soak's own checks fail when a receiver's bytes are
 * wrong or a version hangs (test hook DELTACAST_SOAK_TEST). */
#include "refit_util.h"

TestSuite(perf_soak, .timeout = 240);

/* Namespaces and tc as root, else loopback (the soak says which). */
static int netns_ok(void)
{
    return geteuid() == 0 && job_sh("ip netns list >/dev/null 2>&1 && command -v tc "
                                    ">/dev/null 2>&1") == 0;
}

/* Run `perf soak ARGS --json` with environment ENV in a fresh directory
 * dir (files in dir/w, JSON in dir/out.json, stderr in dir/err); its exit
 * code.  The caller removes dir. */
static int run_soak(char *dir, const char *env, const char *args)
{
    strcpy(dir, "/tmp/dc_soak_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    return job_sh("%s '%s' perf soak --params 1e6 --receivers 4 --regions 2 --json %s "
                  "--workdir %s/w > %s/out.json 2>%s/err",
                  env, job_bin(), args, dir, dir, dir);
}

Test(perf_soak, ten_versions_every_fault_fires_every_receiver_exact)
{
    char dir[32];
    int rc = run_soak(dir, "",
                      "--versions 10 --faults-per-version 3 --seed 3 "
                      "--timeout-per-version 60");
    if (rc != 0)
        job_sh("cat %s/err >&2; tail -n 20 %s/w/log* >&2", dir, dir);
    cr_assert_eq(rc, 0, "perf soak exit %d", rc);
    cr_assert_eq(job_sh("python3 - %s/out.json %d <<'PY'\n"
                        "import json, sys\n"
                        "d = json.load(open(sys.argv[1])); netns = sys.argv[2] == '1'\n"
                        "for k in ('versions','exact_versions','faults','repair_bytes',"
                        "'aborted_versions','seconds','timeout_per_version_seconds',"
                        "'per_version'):\n"
                        "    assert k in d, k\n"
                        "assert d['network'] == ('netns+tbf' if netns else 'loopback-unshaped')\n"
                        "assert d['versions'] == 10 and d['failed_versions'] == 0, d\n"
                        "assert d['exact_versions'] == d['versions'] - d['aborted_versions'], d\n"
                        "assert d['timeout_per_version_seconds'] == 60\n"
                        "kinds = ('kill','cut','corrupt','stall','restart')\n"
                        "assert set(d['faults']) == set(kinds), d['faults']\n"
                        "for k in kinds:\n"
                        "    assert d['faults'][k] > 0, ('never fired', k, d['faults'], "
                        "d['faults_tried'])\n"
                        "    assert d['faults'][k] <= d['faults_tried'][k]\n"
                        "n = sum(1 for v in d['per_version'] for f in v['faults'] if f['fired'])\n"
                        "assert n == sum(d['faults'].values()), n\n"
                        "assert len(d['per_version']) == 10\n"
                        "for v in d['per_version']:\n"
                        "    assert v['exact'] is True, v\n"
                        "    assert v['seconds'] < 60, v\n"
                        "    if v['outcome'] == 'committed':\n"
                        "        assert v['receivers_checked'] == 4, v\n"
                        "    else:\n"
                        "        assert v['outcome'] == 'aborted', v\n"
                        "        killed = v.get('killed_not_checked', '')\n"
                        "        nk = len(killed.split(',')) if killed else 0\n"
                        "        assert v['receivers_checked'] + nk == 4, v\n"
                        "assert d['per_version'][-1]['outcome'] == 'committed' or "
                        "d['aborted_versions'] > 0\n"
                        "PY",
                        dir, netns_ok()),
                 0, "bad soak JSON in %s/out.json", dir);
    /* the job's own evidence of the corruption (the hop's NACK line) */
    cr_assert_eq(job_sh("grep -q 'CRC32C mismatch on message' %s/w/log*", dir), 0);
    job_sh("rm -rf %s", dir);
}

/* A receiver whose bytes are wrong after a committed version fails the
 * soak, which names it. */
Test(perf_soak, wrong_bytes_fail_the_soak)
{
    char dir[32];
    int rc = run_soak(dir, "DELTACAST_SOAK_TEST=flip:2:3", "--versions 3 --faults none");
    cr_assert_eq(rc, 1, "perf soak exit %d with a flipped byte", rc);
    cr_assert_eq(job_sh("grep -q 'receiver 3 .* is not v2' %s/out.json", dir), 0);
    cr_assert_eq(job_sh("grep -q '\"exact_versions\": 1' %s/out.json && "
                        "grep -q '\"versions\": 2' %s/out.json",
                        dir, dir),
                 0);
    job_sh("rm -rf %s", dir);
}

/* A version that does not end within its timeout fails the soak. */
Test(perf_soak, a_hang_fails_the_soak)
{
    char dir[32];
    int rc = run_soak(dir, "DELTACAST_SOAK_TEST=hang:1",
                      "--versions 2 --faults none --timeout-per-version 5 --abort-ms 1000");
    cr_assert_eq(rc, 1, "perf soak exit %d with a hung coordinator", rc);
    cr_assert_eq(job_sh("grep -q '\"outcome\": \"hang\"' %s/out.json && "
                        "grep -q 'did not end within 5 s' %s/out.json",
                        dir, dir),
                 0);
    job_sh("rm -rf %s", dir);
}

/* A node that dies of a signal the soak did not send (here the engine's
 * own crash hook: SIGKILL mid-apply) fails the soak, even when the job
 * recovers from it. */
Test(perf_soak, a_node_dying_on_its_own_fails_the_soak)
{
    char dir[32];
    int rc =
        run_soak(dir, "DELTACAST_ENGINE_CRASH_AT=3", "--versions 1 --faults none --abort-ms 2000");
    cr_assert_eq(rc, 1, "perf soak exit %d with receivers killing themselves", rc);
    cr_assert_eq(job_sh("grep -q 'died of signal 9' %s/out.json", dir), 0);
    job_sh("rm -rf %s", dir);
}
