/* test_commit.c - the durable commit record and its compare-and-set under
 * concurrent coordinators (real processes racing on one directory). */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/commit.h"

static char dir[64];

static void setup(void)
{
    strcpy(dir, "/tmp/dc_commit_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

TestSuite(commit, .init = setup, .fini = teardown);

Test(commit, fresh_then_advance)
{
    dc_commit_rec_t r;
    cr_assert_eq(dc_commit_read(dir, &r), DC_ERR_NOT_FOUND);
    dc_commit_rec_t n = {.version = 1, .baseline = 0, .digest_lo = 11, .digest_hi = 12};
    cr_assert_eq(dc_commit_cas(dir, 0, &n, NULL), DC_OK, "%s", dc_last_error());
    cr_assert_eq(dc_commit_read(dir, &r), DC_OK);
    cr_assert_eq(r.version, 1);
    cr_assert_eq(r.baseline, 0);
    cr_assert_eq(r.digest_lo, 11);
    cr_assert_eq(r.digest_hi, 12);
    cr_assert_neq(r.time_ns, 0);
    /* stale expectation loses and reports what is there */
    dc_commit_rec_t n2 = {.version = 2, .baseline = 0};
    dc_commit_rec_t cur;
    cr_assert_eq(dc_commit_cas(dir, 0, &n2, &cur), DC_ERR_CONFLICT);
    cr_assert_eq(cur.version, 1);
    n2.baseline = 1;
    cr_assert_eq(dc_commit_cas(dir, 1, &n2, NULL), DC_OK);
    cr_assert_eq(dc_commit_read(dir, &r), DC_OK);
    cr_assert_eq(r.version, 2);
    cr_assert_eq(r.baseline, 1);
    /* non-advancing versions are refused */
    dc_commit_rec_t bad = {.version = 2, .baseline = 1};
    cr_assert_eq(dc_commit_cas(dir, 2, &bad, NULL), DC_ERR_INVALID);
}

Test(commit, damaged_record_rejected)
{
    dc_commit_rec_t n = {.version = 5, .baseline = 4};
    cr_assert_eq(dc_commit_cas(dir, 0, &n, NULL), DC_OK);
    char path[128];
    snprintf(path, sizeof(path), "%s/commit", dir);
    int fd = open(path, O_RDWR);
    cr_assert(fd >= 0);
    uint8_t b = 0x5a;
    cr_assert_eq(pwrite(fd, &b, 1, 20), 1);
    close(fd);
    dc_commit_rec_t r;
    cr_assert_eq(dc_commit_read(dir, &r), DC_ERR_FORMAT);
    cr_assert(strstr(dc_last_error(), "checksum") != NULL, "%s", dc_last_error());
    /* a damaged record also blocks CAS (never overwritten blindly) */
    dc_commit_rec_t n2 = {.version = 6, .baseline = 5};
    cr_assert_eq(dc_commit_cas(dir, 5, &n2, NULL), DC_ERR_FORMAT);
    /* truncated */
    cr_assert_eq(truncate(path, 10), 0);
    cr_assert_eq(dc_commit_read(dir, &r), DC_ERR_FORMAT);
}

Test(commit, decode_garbage)
{
    uint8_t buf[DC_COMMIT_RECORD_SIZE];
    dc_commit_rec_t r;
    for (int i = 0; i < 200; i++) {
        for (size_t k = 0; k < sizeof(buf); k++)
            buf[k] = (uint8_t)rand();
        if (i % 2)
            memcpy(buf, "DCCOMMIT", 8);
        cr_assert_eq(dc_commit_decode(buf, sizeof(buf), "x", &r), DC_ERR_FORMAT);
    }
    dc_commit_rec_t ok = {.version = 9, .baseline = 8, .digest_lo = 1, .time_ns = 3};
    dc_commit_encode(&ok, buf);
    cr_assert_eq(dc_commit_decode(buf, sizeof(buf), "x", &r), DC_OK);
    cr_assert_eq(r.version, 9);
    cr_assert_eq(dc_commit_decode(buf, sizeof(buf) - 1, "x", &r), DC_ERR_FORMAT);
}

/* N processes race to commit version 1 from 0 at the same moment: exactly
 * one wins, and the record holds the winner's digest. */
Test(commit, concurrent_coordinators_one_winner)
{
    enum { N = 8 };
    volatile int *go = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(go != MAP_FAILED);
    *go = 0;
    pid_t pids[N];
    for (int i = 0; i < N; i++) {
        pids[i] = fork();
        cr_assert(pids[i] >= 0);
        if (pids[i] == 0) {
            while (!__atomic_load_n(go, __ATOMIC_ACQUIRE))
                ;
            dc_commit_rec_t n = {.version = 1, .baseline = 0, .digest_lo = 100 + (uint64_t)i,
                                 .digest_hi = (uint64_t)i};
            dc_status_t st = dc_commit_cas(dir, 0, &n, NULL);
            _exit(st == DC_OK ? 10 + i : st == DC_ERR_CONFLICT ? 1 : 2);
        }
    }
    __atomic_store_n(go, 1, __ATOMIC_RELEASE);
    int winners = 0, winner = -1;
    for (int i = 0; i < N; i++) {
        int status;
        cr_assert_eq(waitpid(pids[i], &status, 0), pids[i]);
        cr_assert(WIFEXITED(status));
        int c = WEXITSTATUS(status);
        cr_assert_neq(c, 2, "child %d failed with an unexpected status", i);
        if (c >= 10) {
            winners++;
            winner = c - 10;
        }
    }
    cr_assert_eq(winners, 1, "%d coordinators won the same version", winners);
    dc_commit_rec_t r;
    cr_assert_eq(dc_commit_read(dir, &r), DC_OK);
    cr_assert_eq(r.version, 1);
    cr_assert_eq(r.digest_lo, 100 + (uint64_t)winner);
    munmap((void *)go, 4096);
}

/* N processes each advance the version K times with read + CAS retries:
 * every committed version is won by exactly one process (no lost update,
 * no duplicate), so the wins add up to the final version. */
Test(commit, concurrent_advance_no_lost_update)
{
    enum { N = 4, K = 25 };
    int pipes[N][2];
    pid_t pids[N];
    for (int i = 0; i < N; i++) {
        cr_assert_eq(pipe(pipes[i]), 0);
        pids[i] = fork();
        cr_assert(pids[i] >= 0);
        if (pids[i] == 0) {
            close(pipes[i][0]);
            int wins = 0;
            for (int k = 0; k < K;) {
                dc_commit_rec_t cur;
                dc_status_t st = dc_commit_read(dir, &cur);
                if (st == DC_ERR_NOT_FOUND)
                    memset(&cur, 0, sizeof(cur));
                else if (st != DC_OK)
                    _exit(2);
                dc_commit_rec_t n = {.version = cur.version + 1, .baseline = cur.version,
                                     .digest_lo = (uint64_t)i};
                st = dc_commit_cas(dir, cur.version, &n, NULL);
                if (st == DC_OK) {
                    wins++;
                    k++;
                    uint64_t v = n.version;
                    if (write(pipes[i][1], &v, sizeof(v)) != sizeof(v))
                        _exit(3);
                } else if (st != DC_ERR_CONFLICT) {
                    _exit(2);
                }
            }
            _exit(0);
        }
        close(pipes[i][1]);
    }
    static uint8_t seen[N * K + 1];
    memset(seen, 0, sizeof(seen));
    int total = 0;
    for (int i = 0; i < N; i++) {
        uint64_t v;
        while (read(pipes[i][0], &v, sizeof(v)) == sizeof(v)) {
            cr_assert(v >= 1 && v <= N * K, "bad version %llu", (unsigned long long)v);
            cr_assert_eq(seen[v], 0, "version %llu committed twice", (unsigned long long)v);
            seen[v] = 1;
            total++;
        }
        close(pipes[i][0]);
        int status;
        cr_assert_eq(waitpid(pids[i], &status, 0), pids[i]);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    cr_assert_eq(total, N * K);
    dc_commit_rec_t r;
    cr_assert_eq(dc_commit_read(dir, &r), DC_OK);
    cr_assert_eq(r.version, N * K);
}

/* A coordinator that finds the commit lock taken says who holds it (the
 * holder's pid, as the holder recorded it) and that it waits, then how
 * long it waited; the commit still goes through once the holder lets go. */
Test(commit, waiting_on_the_lock_names_its_holder)
{
    int go[2];
    cr_assert_eq(pipe(go), 0);
    pid_t holder = fork();
    cr_assert(holder >= 0);
    if (holder == 0) {
        int lfd = -1;
        if (dc_commit_lock(dir, &lfd) != DC_OK)
            _exit(2);
        if (write(go[1], "x", 1) != 1)
            _exit(3);
        usleep(1200000);
        dc_commit_unlock(lfd);
        _exit(0);
    }
    char x;
    cr_assert_eq(read(go[0], &x, 1), 1);
    char log[] = "/tmp/dc_commit_log_XXXXXX";
    int lf = mkstemp(log);
    cr_assert(lf >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(lf, 2);
    double t0 = dc_now_s();
    dc_commit_rec_t n = {.version = 1, .baseline = 0, .digest_lo = 5};
    dc_status_t st = dc_commit_cas(dir, 0, &n, NULL);
    double waited = dc_now_s() - t0;
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    cr_assert_eq(st, DC_OK, "%s", dc_last_error());
    cr_assert(waited > 0.8, "the commit did not wait for the holder (%.2f s)", waited);
    int status;
    cr_assert_eq(waitpid(holder, &status, 0), holder);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char text[4096] = {0};
    cr_assert(pread(lf, text, sizeof(text) - 1, 0) > 0, "nothing logged while waiting");
    close(lf);
    unlink(log);
    char want[64];
    snprintf(want, sizeof(want), "is held by pid %d on ", (int)holder);
    cr_assert(strstr(text, want) && strstr(text, "commit.lock") && strstr(text, "waiting for it"),
              "no line naming the holder: %s", text);
    cr_assert(strstr(text, "after waiting"), "no line when the lock was got: %s", text);
}
