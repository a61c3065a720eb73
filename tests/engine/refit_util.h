/* refit_util.h - helpers for multi-process refit tests: a job directory with
 * versions v0..vK, receiver copies of v0, node processes of the real
 * `deltacast node` binary on a synthetic local topology, or on a topology
 * file with several senders and sharded receivers (job_use_shards). */
#ifndef DC_TEST_REFIT_UTIL_H
#define DC_TEST_REFIT_UTIL_H

#include "testenv.h"
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/layout.h"
#include "testkit/synth.h"

#define JOB_MAX 24

typedef struct job {
    char dir[128];
    int regions, per, nnodes;
    int port;
    int versions;
    int nsenders;   /* ranks 0 .. nsenders-1 are senders (node 0 coordinates) */
    char topo[160]; /* topology file ("": the synthetic --local one) */
    char secret[96]; /* this job's secret (also in the test's DELTACAST_SECRET) */
    pid_t pid[JOB_MAX];
} job_t;

static inline const char *job_bin(void)
{
    const char *b = dc_test_bin();
    cr_assert_not_null(b, "DELTACAST_BIN not set");
    return b;
}

static inline int job_sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* Run the shell condition every 25 ms until it exits 0 (then 1) or `ms`
 * milliseconds pass (then 0). */
static inline int job_until_sh(int ms, const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    for (int waited = 0;; waited += 25) {
        int rc = system(cmd);
        if (WIFEXITED(rc) && WEXITSTATUS(rc) == 0)
            return 1;
        if (waited >= ms)
            return 0;
        usleep(25000);
    }
}

static inline int job_port_free(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(0x7f000001)};
    int ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

static inline int job_pick_ports(int n)
{
    /* below the kernel's ephemeral range: a port in it can become some
     * connection's local port between this check and the node's bind */
    int eph = 32768;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f != NULL) {
        if (fscanf(f, "%d", &eph) != 1 || eph < 12000 + n)
            eph = 32768;
        fclose(f);
    }
    srand((unsigned)(getpid() ^ time(NULL)));
    for (int tries = 0; tries < 200; tries++) {
        int base = 10000 + (rand() % ((eph - 10000 - n) / 10)) * 10;
        int ok = 1;
        for (int i = 0; i < n && ok; i++)
            ok = job_port_free(base + i);
        if (ok)
            return base;
    }
    cr_assert_fail("no free ports");
    return 0;
}

/* A job: `regions` x `per` receivers, versions v0..v`versions`, params P. */
static inline void job_init(job_t *j, int regions, int per, const char *params, int versions,
                            const char *model)
{
    memset(j, 0, sizeof(*j));
    strcpy(j->dir, "/tmp/dc_refit_XXXXXX");
    cr_assert_not_null(mkdtemp(j->dir));
    j->regions = regions;
    j->per = per;
    j->nnodes = 1 + regions * per;
    j->nsenders = 1;
    j->versions = versions;
    cr_assert(j->nnodes <= JOB_MAX);
    cr_assert_eq(job_sh("'%s' gen --params %s --change-rate 0.02 --model %s --threads 1 -o %s/pair "
                        ">/dev/null",
                        job_bin(), params, model, j->dir),
                 0, "gen failed");
    cr_assert_eq(job_sh("mkdir -p %s/ver %s/state && mv %s/pair/base.safetensors %s/ver/v0.safetensors "
                        "&& mv %s/pair/next.safetensors %s/ver/v1.safetensors",
                        j->dir, j->dir, j->dir, j->dir, j->dir, j->dir),
                 0);
    for (int v = 2; v <= versions; v++) {
        char src[256], dst[256];
        snprintf(src, sizeof(src), "%s/ver/v%d.safetensors", j->dir, v - 1);
        snprintf(dst, sizeof(dst), "%s/ver/v%d.safetensors", j->dir, v);
        uint64_t ch = 0;
        cr_assert_eq(dc_synth_next(src, dst, 0.01, strcmp(model, "inject") == 0, (uint64_t)v, &ch),
                     DC_OK, "%s", dc_last_error());
        cr_assert(ch > 0);
    }
    for (int i = 1; i < j->nnodes; i++)
        cr_assert_eq(job_sh("cp %s/ver/v0.safetensors %s/w%d.st", j->dir, j->dir, i), 0);
    j->port = job_pick_ports(j->nnodes);
    /* one secret per job: tests run two at a time and pick their ports at
     * random, so a node dialing a port another test's job took just then
     * must fail authentication there, not join that job */
    snprintf(j->secret, sizeof(j->secret), "refit-test-%d-%s", (int)getpid(), j->dir + 5);
    setenv("DELTACAST_SECRET", j->secret, 1);
}

/* Turn a job_init()ed job into one of `nsenders` senders in region "train"
 * owning one shard each (nsenders shards), then the receiver regions
 * r0.. of `per` receivers; shards[k] (NULL or a NULL entry: all) is the
 * YAML shard list of the k-th receiver, e.g. "[1]".  Written to DIR/topo.yaml. */
static inline void job_use_shards(job_t *j, int nsenders, const char *const *shards)
{
    j->nsenders = nsenders;
    j->nnodes = nsenders + j->regions * j->per;
    cr_assert(j->nnodes <= JOB_MAX);
    for (int i = 1; i < j->nnodes; i++)
        cr_assert_eq(job_sh("cp %s/ver/v0.safetensors %s/w%d.st", j->dir, j->dir, i), 0);
    j->port = job_pick_ports(j->nnodes);
    snprintf(j->topo, sizeof(j->topo), "%s/topo.yaml", j->dir);
    FILE *f = fopen(j->topo, "w");
    cr_assert_not_null(f);
    fprintf(f, "shards: %d\ndefaults: {lan: 10gbit, wan: 1gbit}\nregions:\n"
               "  - name: train\n    nodes:\n", nsenders);
    int rank = 0;
    for (int s = 0; s < nsenders; s++, rank++)
        fprintf(f, "      - {host: s%d, addr: \"127.0.0.1:%d\", role: sender, shards: [%d]}\n", s,
                j->port + rank, s);
    for (int r = 0, k = 0; r < j->regions; r++) {
        fprintf(f, "  - name: r%d\n    nodes:\n", r);
        for (int i = 0; i < j->per; i++, k++, rank++) {
            fprintf(f, "      - {host: r%dn%d, addr: \"127.0.0.1:%d\", role: receiver", r, i,
                    j->port + rank);
            if (shards && shards[k])
                fprintf(f, ", shards: %s", shards[k]);
            fprintf(f, "}\n");
        }
    }
    fclose(f);
}

static inline void job_fini(job_t *j)
{
    for (int i = 0; i < j->nnodes; i++)
        if (j->pid[i] > 0) {
            kill(j->pid[i], SIGKILL);
            waitpid(j->pid[i], NULL, 0);
        }
    if (!getenv("DC_TEST_KEEP"))
        job_sh("rm -rf '%s'", j->dir);
}

/* Start node `rank` with extra environment "K=V;K=V" and extra args. */
static inline pid_t job_start(job_t *j, int rank, const char *env, const char *args)
{
    char cmd[2048];
    char spec[256];
    if (j->topo[0])
        snprintf(spec, sizeof(spec), "--topology %s", j->topo);
    else
        snprintf(spec, sizeof(spec), "--local %d:%d:%d", j->regions, j->per, j->port);
    if (rank == 0)
        snprintf(cmd, sizeof(cmd),
                 "exec '%s' node %s --rank 0 --versions %s/ver --state %s/state/0 "
                 "--stats %s/stats.json --wait-ms 20000 %s >>%s/log0 2>&1",
                 job_bin(), spec, j->dir, j->dir, j->dir, args ? args : "", j->dir);
    else if (rank < j->nsenders)
        snprintf(cmd, sizeof(cmd),
                 "exec '%s' node %s --rank %d --versions %s/ver --state %s/state/%d "
                 "%s >>%s/log%d 2>&1",
                 job_bin(), spec, rank, j->dir, j->dir, rank, args ? args : "", j->dir, rank);
    else
        snprintf(cmd, sizeof(cmd),
                 "exec '%s' node %s --rank %d --weights %s/w%d.st --state %s/state/%d "
                 "%s >>%s/log%d 2>&1",
                 job_bin(), spec, rank, j->dir, rank, j->dir, rank, args ? args : "", j->dir,
                 rank);
    pid_t parent = getpid();
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        /* dies with the test (exec keeps it): a failed assertion leaves no
         * node behind */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        setenv("DELTACAST_SECRET", j->secret, 1);
        setenv("DELTACAST_TIMEOUT_MS", "1000", 1);
        setenv("DELTACAST_CHUNK_SIZE", "64KiB", 1);
        setenv("DELTACAST_THREADS", "1", 1);
        setenv("DELTACAST_TRANSPORT", "tcp", 1);
        setenv("DELTACAST_LOG", "info", 1);
        unsetenv("DELTACAST_FAULT");
        if (env && *env) {
            char *e = strdup(env); /* whole: a cut setting would be a wrong one */
            if (!e)
                _exit(127);
            for (char *tok = strtok(e, ";"); tok; tok = strtok(NULL, ";")) {
                char *eq = strchr(tok, '=');
                if (eq) {
                    *eq = 0;
                    setenv(tok, eq + 1, 1);
                }
            }
        }
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    j->pid[rank] = pid;
    return pid;
}

/* Wait for node `rank`; its exit code, 128+signal, or -1 after timeout_s
 * (then it is killed). */
static inline int job_wait(job_t *j, int rank, int timeout_s)
{
    for (int i = 0; i < timeout_s * 20; i++) {
        int status;
        pid_t r = waitpid(j->pid[rank], &status, WNOHANG);
        if (r == j->pid[rank]) {
            j->pid[rank] = 0;
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        usleep(50000);
    }
    kill(j->pid[rank], SIGKILL);
    waitpid(j->pid[rank], NULL, 0);
    j->pid[rank] = 0;
    return -1;
}

/* "127.0.0.1:PORT" of node `rank` of the job, into out. */
static inline const char *job_addr(const job_t *j, int rank, char *out, size_t len)
{
    snprintf(out, len, "127.0.0.1:%d", j->port + rank);
    return out;
}

/* SIGKILL node `rank` and reap it. */
static inline void job_kill(job_t *j, int rank)
{
    kill(j->pid[rank], SIGKILL);
    waitpid(j->pid[rank], NULL, 0);
    j->pid[rank] = 0;
}

static inline void job_start_all(job_t *j, const char *root_args)
{
    job_start(j, 0, NULL, root_args);
    usleep(100000);
    for (int i = 1; i < j->nnodes; i++)
        job_start(j, i, NULL, NULL);
}

/* Byte-compare receiver `rank`'s weights with version v. */
static inline int job_exact(job_t *j, int rank, int v)
{
    return job_sh("cmp -s %s/w%d.st %s/ver/v%d.safetensors", j->dir, rank, j->dir, v) == 0;
}

static inline void job_dump_logs(job_t *j)
{
    job_sh("for f in %s/log*; do echo \"== $f\"; tail -n 15 $f; done >&2", j->dir);
}

/* The coordinator (rank 0) exits 0 within root_s seconds, then every other
 * node within node_s seconds each; the logs are dumped on a failure. */
static inline void job_expect_all_exit_ok(job_t *j, int root_s, int node_s)
{
    int rc = job_wait(j, 0, root_s);
    if (rc != 0)
        job_dump_logs(j);
    cr_assert_eq(rc, 0, "coordinator exit %d", rc);
    for (int i = 1; i < j->nnodes; i++) {
        rc = job_wait(j, i, node_s);
        if (rc != 0)
            job_dump_logs(j);
        cr_assert_eq(rc, 0, "node %d exit %d", i, rc);
    }
}

/* The shard of chunk c by the engine's documented rule: the shard holding
 * the chunk's first canonical byte, floor(offset * S / total). */
static inline uint32_t job_shard_of(const dc_layout_t *l, uint32_t c, uint32_t S)
{
    uint64_t base = 0;
    for (uint32_t t = 0; t < l->chunks[c].tensor; t++)
        base += l->tensors[t].nbytes;
    uint64_t off = base + l->chunks[c].offset;
    uint32_t s = (uint32_t)(off * S / l->total_bytes);
    return s < S ? s : S - 1;
}

static inline void job_expect_all_exact(job_t *j, int v)
{
    for (int i = j->nsenders; i < j->nnodes; i++) {
        if (!job_exact(j, i, v)) {
            job_dump_logs(j);
            cr_assert_fail("receiver %d is not byte-exact with v%d", i, v);
        }
    }
}

#endif
