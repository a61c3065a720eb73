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

/* Run the job under `launcher` (its log's tail on failure): every rank
 * exits 0 and every receiver holds v2 exactly. */
static void launch_run(const char *launcher, const char *what)
{
    char cmd[2048];
    launch_cmd(cmd, sizeof(cmd), launcher);
    int rc = job_sh("%s", cmd);
    if (rc != 0)
        job_sh("tail -n 30 %s/launch.log >&2", J.dir);
    cr_assert_eq(rc, 0, "%s job exit %d", what, rc);
    job_expect_all_exact(&J, 2);
}

Test(launch, mpirun)
{
    if (system("command -v mpirun >/dev/null 2>&1") != 0)
        cr_skip_test("mpirun (openmpi-bin) is not installed");
    job_init(&J, 2, 1, "2e5", 2, "optimizer");
    char l[128];
    snprintf(l, sizeof(l), "mpirun --allow-run-as-root --oversubscribe -np %d", J.nnodes);
    launch_run(l, "mpirun");
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
    char l[128];
    snprintf(l, sizeof(l), "srun --overcommit -n %d --kill-on-bad-exit=1", J.nnodes);
    launch_run(l, "srun");
    cr_assert_eq(job_sh("grep -q '\"committed\": true' %s/stats.json", J.dir), 0);
}

/* --- README.md's first run, exactly as printed -------------------------- */

/* Write DIR/run.sh: the README's launch block (between its
 * "launch-example" markers) without the line of the other launcher; fails
 * the test when the block or its launcher line is gone. */
static void readme_script(const char *dir, const char *launcher, const char *other)
{
    cr_assert_eq(job_sh("sed -n '/<!-- launch-example: begin -->/,/<!-- launch-example: end "
                        "-->/p' '%s/README.md' | sed '1d;$d;s/^    //' > '%s/block.sh'",
                        dc_test_src(), dir),
                 0);
    cr_assert_eq(job_sh("test $(grep -c '^%s ' '%s/block.sh') = 1", launcher, dir), 0,
                 "README.md's launch-example block has no single '%s' line", launcher);
    cr_assert_eq(job_sh("grep -v '^%s ' '%s/block.sh' > '%s/run.sh'", other, dir, dir), 0);
}

/* Run DIR/run.sh with the CLI under test as `deltacast` on PATH; the
 * receivers' weights must then be the README's v1, byte for byte. */
static void readme_run(const char *dir, const char *what)
{
    char bindir[1024];
    snprintf(bindir, sizeof(bindir), "%s", job_bin());
    *strrchr(bindir, '/') = 0;
    int rc = job_sh("cd '%s' && env -u DELTACAST_SECRET PATH='%s':\"$PATH\" timeout 150 bash -e "
                    "run.sh > run.log 2>&1",
                    dir, bindir);
    if (rc != 0)
        job_sh("cat '%s/run.sh' >&2; tail -n 30 '%s/run.log' >&2", dir, dir);
    cr_assert_eq(rc, 0, "the README's %s line: exit %d", what, rc);
    for (int r = 1; r <= 4; r++)
        cr_assert_eq(job_sh("cmp -s '%s/ckpt/v1.safetensors' '%s/w%d.safetensors'", dir, dir, r),
                     0, "the README's %s line: receiver %d does not hold v1", what, r);
    cr_assert_eq(job_sh("test -f '%s/st/4/commit' || ls '%s/st/4' | grep -q .", dir, dir), 0);
}

static char rdir[64];

static void rdir_fini(void)
{
    if (rdir[0] && !getenv("DC_TEST_KEEP"))
        job_sh("rm -rf '%s'", rdir);
}

Test(launch, readme_mpirun_line, .fini = rdir_fini)
{
    if (system("command -v mpirun >/dev/null 2>&1") != 0)
        cr_skip_test("mpirun (openmpi-bin) is not installed");
    strcpy(rdir, "/tmp/dc_readme_XXXXXX");
    cr_assert_not_null(mkdtemp(rdir));
    readme_script(rdir, "mpirun", "srun");
    readme_run(rdir, "mpirun");
}

Test(launch, readme_srun_line, .fini = rdir_fini)
{
    char setup[512];
    snprintf(setup, sizeof(setup), "sh '%s/scripts/slurm-setup.sh'", dc_test_src());
    if (system("command -v srun >/dev/null 2>&1") != 0)
        cr_skip_test("srun (slurm-wlm) is not installed");
    if (job_sh("%s", setup) != 0)
        cr_skip_test("no slurmctld answers, and scripts/slurm-setup.sh cannot start one here");
    strcpy(rdir, "/tmp/dc_readme_XXXXXX");
    cr_assert_not_null(mkdtemp(rdir));
    readme_script(rdir, "srun", "mpirun");
    readme_run(rdir, "srun");
}

/* --- --nodelist, --port 0 and a rendezvous, by hand on loopback ---------- */

/* Start rank r of a --nodelist 127.0.0.1 job of J.nnodes tasks, each
 * binding a free port and publishing it in DIR/rdv. */
static pid_t start_rdv(int r, const char *extra)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "cd %s && exec env DELTACAST_TRANSPORT=tcp DELTACAST_TIMEOUT_MS=2000 "
             "DELTACAST_CHUNK_SIZE=64KiB '%s' node --nodelist 127.0.0.1 --world-size %d "
             "--port 0 --rendezvous rdv --rank %d --versions ver --weights w%%r.st "
             "--state deep/a/b/%%r %s >node%d.log 2>&1",
             J.dir, job_bin(), J.nnodes, r, extra, r);
    pid_t p = fork();
    cr_assert(p >= 0);
    if (p == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    J.pid[r] = p;
    return p;
}

static int wait_rc(int r)
{
    int ws = 0;
    cr_assert_eq(waitpid(J.pid[r], &ws, 0), J.pid[r]);
    J.pid[r] = 0;
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

Test(launch, port0_rendezvous)
{
    job_init(&J, 1, 3, "2e5", 2, "optimizer");
    for (int r = J.nnodes - 1; r >= 0; r--) /* the receivers first: node 0 waits */
        start_rdv(r, "--wait-ms 60000");
    for (int r = 0; r < J.nnodes; r++) {
        int rc = wait_rc(r);
        if (rc != 0)
            job_sh("tail -n 20 %s/node*.log >&2", J.dir);
        cr_assert_eq(rc, 0, "rank %d exit %d", r, rc);
    }
    job_expect_all_exact(&J, 2);
    /* every rank published a port of its own, none the default 7300 */
    cr_assert_eq(job_sh("cd %s/rdv && test $(cat rank-* | awk '{print $4}' | sort -u | wc -l) = 4 "
                        "&& ! grep -q ':7300$' rank-*", J.dir),
                 0, "rendezvous files: not 4 distinct addresses");
    /* --state deep/a/b/%%r: created with its parents */
    cr_assert_eq(job_sh("test -d %s/deep/a/b/0 && test -d %s/deep/a/b/3", J.dir, J.dir), 0);
}

Test(launch, rendezvous_names_missing_ranks)
{
    job_init(&J, 1, 3, "2e4", 1, "optimizer");
    /* ranks 1 and 3 come, 0 and 2 never do */
    start_rdv(1, "--wait-ms 1500");
    start_rdv(3, "--wait-ms 1500");
    cr_assert_eq(wait_rc(1), 1);
    cr_assert_eq(wait_rc(3), 1);
    cr_assert_eq(job_sh("grep -q '2 of 4 ranks never published their address: ranks 0, 2$' "
                        "%s/node1.log", J.dir),
                 0, "node1.log does not name ranks 0 and 2");
    /* a hostile file in the directory is named, not trusted */
    job_sh("printf 'deltacast-rendezvous 1 - 127.0.0.1:99999\\n' > %s/rdv/rank-0", J.dir);
    start_rdv(1, "--wait-ms 1500");
    cr_assert_eq(wait_rc(1), 1);
    cr_assert_eq(job_sh("grep -q \"rdv/rank-0: address '127.0.0.1:99999' is not HOST:PORT\" "
                        "%s/node1.log", J.dir),
                 0, "a bad rendezvous entry was not named");
}

/* --- --topology FILE with port 0 and a rendezvous ------------------------ */

/* A topology file where the sender and two receivers have port 0 and the
 * third a fixed port: each port-0 node binds a free port and publishes
 * it in DIR/rdv, the fixed one publishes its own; every rank starts with
 * the same command line (but --rank) and the job refits to v2 exactly.
 * Before: the file was refused (port 0). */
static void write_port0_topo(int fixed_port)
{
    cr_assert_eq(job_sh("cd %s && printf '%%s\n' 'shards: 1' 'regions:' '  - name: train' "
                        "'    nodes:' '      - {host: s0, addr: \"127.0.0.1:0\", role: sender}' "
                        "'  - name: r0' '    nodes:' "
                        "'      - {host: r0n0, addr: \"127.0.0.1:0\", role: receiver}' "
                        "'      - {host: r0n1, addr: \"127.0.0.1:%d\", role: receiver}' "
                        "'      - {host: r0n2, addr: \"127.0.0.1:0\", role: receiver}' "
                        "> topo0.yaml",
                        J.dir, fixed_port),
                 0);
}

static pid_t start_topo_rdv(int r, const char *extra)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "cd %s && exec env DELTACAST_TRANSPORT=tcp DELTACAST_TIMEOUT_MS=2000 "
             "DELTACAST_CHUNK_SIZE=64KiB DELTACAST_LOG=info '%s' node --topology topo0.yaml "
             "--rendezvous rdv "
             "--rank %d --versions ver --weights w%%r.st --state st/%%r %s >node%d.log 2>&1",
             J.dir, job_bin(), r, extra, r);
    pid_t p = fork();
    cr_assert(p >= 0);
    if (p == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    J.pid[r] = p;
    return p;
}

Test(launch, port0_topology_rendezvous)
{
    job_init(&J, 1, 3, "2e5", 2, "optimizer");
    write_port0_topo(J.port + 2);
    for (int r = J.nnodes - 1; r >= 0; r--)
        start_topo_rdv(r, "--wait-ms 60000");
    for (int r = 0; r < J.nnodes; r++) {
        int rc = wait_rc(r);
        if (rc != 0)
            job_sh("tail -n 20 %s/node*.log >&2", J.dir);
        cr_assert_eq(rc, 0, "rank %d exit %d", r, rc);
    }
    job_expect_all_exact(&J, 2);
    /* four distinct addresses, none with port 0; node 2 its fixed one */
    cr_assert_eq(job_sh("cd %s/rdv && test $(cat rank-* | awk '{print $4}' | sort -u | wc -l) = 4 "
                        "&& ! grep -q ':0$' rank-* && grep -q ' 127.0.0.1:%d$' rank-2",
                        J.dir, J.port + 2),
                 0, "rendezvous files: not 4 distinct addresses with node 2's fixed port");
    /* the ports the receivers' logs dialled are the published ones */
    cr_assert_eq(job_sh("cd %s && p=$(awk '{print $4}' rdv/rank-0) && "
                        "grep -q \"attaching to .* at $p \" node*.log",
                        J.dir),
                 0, "no node dialled the sender at its published address");
}

/* Port 0 in a topology file without --rendezvous: refused, saying what
 * to give. */
Test(launch, port0_topology_needs_rendezvous)
{
    job_init(&J, 1, 3, "2e4", 1, "optimizer");
    write_port0_topo(J.port + 2);
    cr_assert_eq(job_sh("cd %s && '%s' node --topology topo0.yaml --rank 1 --weights w1.st "
                        "--state st/1 > p0.log 2>&1; test $? = 1 && "
                        "grep -q \"has port 0 in addr '127.0.0.1:0'.*--rendezvous DIR\" p0.log",
                        J.dir, job_bin()),
                 0, "port 0 without --rendezvous is not refused with a hint");
}

/* --- what the launcher says against the topology ------------------------- */

static void expect_fail(const char *env, const char *args, const char *msg)
{
    char out[256];
    snprintf(out, sizeof(out), "%s/fail.log", J.dir);
    int rc = job_sh("cd %s && env %s '%s' node %s > fail.log 2>&1", J.dir, env, job_bin(), args);
    if (rc != 1 || job_sh("grep -qF -- \"%s\" %s", msg, out) != 0)
        job_sh("cat %s >&2", out);
    cr_assert_eq(rc, 1, "node %s: exit %d", args, rc);
    cr_assert_eq(job_sh("grep -qF -- \"%s\" %s", msg, out), 0, "node %s: no '%s'", args, msg);
}

Test(launch, world_size_and_rank_checked)
{
    job_init(&J, 1, 2, "2e4", 1, "optimizer");
    expect_fail("SLURM_PROCID=1 SLURM_NTASKS=4", "--local 1:2 --weights w1.st",
                "the launcher started 4 tasks (SLURM_NTASKS=4), but --local 1:2 has 3 nodes");
    expect_fail("OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2",
                "--nodelist 127.0.0.1 --world-size 3 --versions ver",
                "--world-size 3, but the launcher started 2 tasks (OMPI_COMM_WORLD_SIZE)");
    expect_fail("", "--nodelist a,b --world-size 3 --rank 5 --weights w1.st",
                "the job has 3 tasks (--nodelist 'a,b'): no task 5");
    expect_fail("", "--local 1:2 --rank 3 --weights w1.st", "--local 1:2 has nodes 0..2: no node 3");
    expect_fail("SLURM_PROCID=1 SLURM_NTASKS=4 SLURM_LOCALID=0 SLURM_STEP_NODELIST=h[1-2] "
                "SLURM_STEP_TASKS_PER_NODE=3,1",
                "--slurm --weights w1.st",
                "the host list places it as task 1 of h1, the launcher as local task 0");
    /* --rank: a process started by hand inside an allocation; its
     * SLURM_NTASKS is the batch shell's, not checked (it gets as far as
     * the missing secret) */
    expect_fail("-u DELTACAST_SECRET SLURM_PROCID=0 SLURM_NTASKS=1", "--local 1:2 --rank 1 --weights w1.st",
                "no job secret");
    expect_fail("SLURM_PROCID=0 SLURM_NTASKS=2", "--slurm --versions ver",
                "--slurm: no SLURM_STEP_NODELIST or SLURM_JOB_NODELIST");
}

Test(launch, secret_and_state_errors)
{
    job_init(&J, 1, 2, "2e4", 1, "optimizer");
    /* no secret at all: the three ways to give one */
    expect_fail("-u DELTACAST_SECRET -u DELTACAST_SECRET_FILE", "--local 1:2 --rank 1 --weights w1.st",
                "no job secret: give one of DELTACAST_SECRET_FILE=FILE");
    cr_assert_eq(job_sh("grep -q 'DELTACAST_SECRET=TEXT' %s/fail.log && grep -q -- '--secret-file' "
                        "%s/fail.log", J.dir, J.dir), 0);
    /* --secret-file names the file it cannot read */
    expect_fail("-u DELTACAST_SECRET", "--local 1:2 --rank 1 --weights w1.st --secret-file nosuch",
                "cannot open secret file nosuch");
    /* a state directory that cannot be made is named */
    job_sh("touch %s/plain", J.dir);
    expect_fail("DELTACAST_TIMEOUT_MS=500", "--local 1:2:20999 --rank 1 --weights w1.st --state plain/x/%r",
                "node 1: state directory: cannot create directory plain/x/1 (at plain/x)");
}

/* --- perf link --insecure: no job secret, loopback only ------------------ */

Test(launch, perf_link_insecure_loopback_only)
{
    job_init(&J, 1, 1, "2e4", 1, "optimizer");
    const char *d = J.dir, *b = job_bin();
    /* refused off loopback, on either end, naming the address */
    cr_assert_eq(job_sh("cd %s && env -u DELTACAST_SECRET '%s' perf link --server --insecure "
                        "2>err1; test $? = 2 && grep -q '0.0.0.0:7471 is not a loopback address' "
                        "err1", d, b), 0, "an insecure server on 0.0.0.0 was not refused");
    cr_assert_eq(job_sh("cd %s && env -u DELTACAST_SECRET '%s' perf link --client 192.0.2.1:7471 "
                        "--insecure 2>err2; test $? = 2 && grep -q '192.0.2.1:7471 is not a "
                        "loopback address' err2", d, b), 0, "an insecure client off loopback ran");
    /* on loopback both ends run without any secret, and say so */
    cr_assert_eq(job_sh("cd %s && (env -u DELTACAST_SECRET timeout 60 '%s' perf link --server "
                        "--bind 127.0.0.1:0 --addr-file af --once --insecure --transport tcp "
                        ">srv.log 2>&1 &) && for i in $(seq 100); do test -s af && break; "
                        "sleep 0.1; done && env -u DELTACAST_SECRET timeout 60 '%s' perf link "
                        "--client $(cat af) --insecure --transport tcp --bytes 8MiB --lat-iters 10 "
                        "--json > out.json", d, b, b), 0, "insecure perf link on loopback failed");
    cr_assert_eq(job_sh("grep -q '\"insecure\": true' %s/out.json && grep -q 'INSECURE' "
                        "%s/srv.log", d, d), 0, "the report does not say insecure");
    /* a client with a secret against an insecure server: refused by auth */
    cr_assert_eq(job_sh("cd %s && rm -f af && (env -u DELTACAST_SECRET timeout 30 '%s' perf link "
                        "--server --bind 127.0.0.1:0 --addr-file af --once --insecure "
                        "--transport tcp >srv2.log 2>&1 & echo $! > srv2.pid) && for i in $(seq 100); do test -s af "
                        "&& break; sleep 0.1; done && DELTACAST_SECRET=other timeout 30 '%s' perf "
                        "link --client $(cat af) --transport tcp --bytes 1MiB --timeout-ms 1000 "
                        "2>err3; rc=$?; kill $(cat srv2.pid); test $rc = 1 "
                        "&& grep -q 'failed authentication' err3", d, b, b), 0,
                 "a client with the job secret joined an insecure server");
}
