/* test_launch.c - a refit job launched by a real `mpirun` (OpenMPI) and by
 * a real Slurm `srun`: one command line for every rank, the rank read from
 * the launcher's environment by `deltacast node`. */
#include "testenv.h"
#include "refit_util.h"

static job_t J;

static void fini(void)
{
    job_fini(&J);
}

TestSuite(launch, .fini = fini, .timeout = 150);

static void launch_cmd(char *buf, size_t len, const char *launcher)
{
    snprintf(buf, len,
             "cd %s && DELTACAST_SECRET=launch-secret DELTACAST_TRANSPORT=tcp "
             "DELTACAST_TIMEOUT_MS=2000 DELTACAST_CHUNK_SIZE=64KiB DELTACAST_THREADS=1 "
             "DELTACAST_LOG=info timeout 120 %s '%s' node --local %d:%d:%d --versions ver "
             "--weights w%%r.st --state state/%%r --stats stats.json --wait-ms 60000 "
             ">launch.log 2>&1",
             J.dir, launcher, job_bin(), J.regions, J.per, J.port);
}

Test(launch, mpirun)
{
    if (system("command -v mpirun >/dev/null 2>&1") != 0)
        cr_skip_test("mpirun (openmpi-bin) is not installed");
    job_init(&J, 2, 1, "2e5", 2, "optimizer");
    char cmd[2048], l[128];
    snprintf(l, sizeof(l), "mpirun --allow-run-as-root --oversubscribe -np %d", J.nnodes);
    launch_cmd(cmd, sizeof(cmd), l);
    int rc = job_sh("%s", cmd);
    if (rc != 0)
        job_sh("tail -n 30 %s/launch.log >&2", J.dir);
    cr_assert_eq(rc, 0, "mpirun job exit %d", rc);
    job_expect_all_exact(&J, 2);
}

Test(launch, slurm_srun)
{
    char setup[512];
    snprintf(setup, sizeof(setup), "sh '%s/scripts/slurm-setup.sh'",
             dc_test_src());
    if (system("command -v srun >/dev/null 2>&1") != 0)
        cr_skip_test("srun (slurm-wlm) is not installed");
    if (job_sh("%s", setup) != 0)
        cr_skip_test("Slurm cannot be started on this machine (scripts/slurm-setup.sh)");
    job_init(&J, 1, 2, "2e5", 2, "inject");
    char cmd[2048], l[128];
    snprintf(l, sizeof(l), "srun --overcommit -n %d --kill-on-bad-exit=1", J.nnodes);
    launch_cmd(cmd, sizeof(cmd), l);
    int rc = job_sh("%s", cmd);
    if (rc != 0)
        job_sh("tail -n 30 %s/launch.log >&2", J.dir);
    cr_assert_eq(rc, 0, "srun job exit %d", rc);
    job_expect_all_exact(&J, 2);
    cr_assert_eq(job_sh("grep -q '\"committed\": true' %s/stats.json", J.dir), 0);
}
