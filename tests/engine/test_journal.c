/* test_journal.c - the receiver's per-chunk journal and its recovery rule,
 * with a real process killed (SIGKILL) in the middle of applying a chunk. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/journal.h"

static char dir[64];

static void setup(void)
{
    strcpy(dir, "/tmp/dc_journal_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

TestSuite(journal, .init = setup, .fini = teardown);

Test(journal, fresh_resume_and_mismatch)
{
    dc_journal_info_t in = {.target = 7, .baseline = 6, .nchunks = 10, .layout_id = 99};
    dc_journal_t *j;
    int resumed = -1;
    cr_assert_eq(dc_journal_open(dir, &in, 0, 1, &j, &resumed), DC_OK, "%s", dc_last_error());
    cr_assert_eq(resumed, 0);
    cr_assert_eq(dc_journal_count(j, DC_JSTATE_PENDING), 10);
    cr_assert_eq(dc_journal_begin(j, 3), DC_OK);
    cr_assert_eq(dc_journal_begin(j, 4), DC_OK);
    cr_assert_eq(dc_journal_applied(j, 3, (dc_digest_t){0, 0}), DC_ERR_INVALID);
    cr_assert_eq(dc_journal_applied(j, 3, (dc_digest_t){33, 34}), DC_OK);
    cr_assert_eq(dc_journal_begin(j, 10), DC_ERR_INVALID);
    dc_journal_close(j);

    dc_journal_info_t got;
    uint8_t *st;
    dc_digest_t *dg;
    cr_assert_eq(dc_journal_load(dir, &got, &st, &dg), DC_OK);
    cr_assert_eq(got.target, 7);
    cr_assert_eq(st[3], DC_JSTATE_APPLIED);
    /* the digest it was verified against comes back with it */
    cr_assert(dc_digest_eq(dg[3], (dc_digest_t){33, 34}));
    cr_assert(dg[4].lo == 0 && dg[4].hi == 0);
    free(dg);
    cr_assert_eq(st[4], DC_JSTATE_APPLYING);
    cr_assert_eq(st[0], DC_JSTATE_PENDING);
    free(st);

    cr_assert_eq(dc_journal_open(dir, &in, 0, 1, &j, &resumed), DC_OK);
    cr_assert_eq(resumed, 1);
    cr_assert_eq(dc_journal_state(j, 4), DC_JSTATE_APPLYING);
    cr_assert_eq(dc_journal_count(j, DC_JSTATE_APPLIED), 1);
    cr_assert(dc_digest_eq(dc_journal_digest(j, 3), (dc_digest_t){33, 34}));
    cr_assert(dc_digest_eq(dc_journal_digest(j, 4), (dc_digest_t){0, 0}));
    dc_journal_close(j);

    /* another version: a fresh journal replaces it */
    in.target = 8;
    in.baseline = 7;
    cr_assert_eq(dc_journal_open(dir, &in, 0, 1, &j, &resumed), DC_OK);
    cr_assert_eq(resumed, 0);
    cr_assert_eq(dc_journal_count(j, DC_JSTATE_PENDING), 10);
    dc_journal_close(j);
    cr_assert_eq(dc_journal_remove(dir), DC_OK);
    cr_assert_eq(dc_journal_load(dir, &got, &st, NULL), DC_ERR_NOT_FOUND);
}

Test(journal, damaged_files_rejected)
{
    dc_journal_info_t in = {.target = 2, .baseline = 1, .nchunks = 4, .layout_id = 1};
    dc_journal_t *j;
    cr_assert_eq(dc_journal_open(dir, &in, 0, 1, &j, NULL), DC_OK);
    dc_journal_close(j);
    char path[128];
    snprintf(path, sizeof(path), "%s/journal", dir);
    int fd = open(path, O_RDWR);
    uint8_t bad = 9;
    cr_assert_eq(pwrite(fd, &bad, 1, 64 + 2), 1);
    dc_journal_info_t got;
    uint8_t *st = NULL;
    cr_assert_eq(dc_journal_load(dir, &got, &st, NULL), DC_ERR_FORMAT);
    cr_assert_eq(pwrite(fd, "\0", 1, 64 + 2), 1);
    cr_assert_eq(dc_journal_load(dir, &got, &st, NULL), DC_OK);
    free(st);
    /* an APPLIED chunk without the digest it was verified against */
    uint8_t applied = DC_JSTATE_APPLIED;
    cr_assert_eq(pwrite(fd, &applied, 1, 64 + 1), 1);
    cr_assert_eq(dc_journal_load(dir, &got, &st, NULL), DC_ERR_FORMAT);
    cr_assert_eq(pwrite(fd, "\0", 1, 64 + 1), 1);
    cr_assert_eq(pwrite(fd, &bad, 1, 20), 1); /* header byte */
    cr_assert_eq(dc_journal_load(dir, &got, &st, NULL), DC_ERR_FORMAT);
    cr_assert_eq(ftruncate(fd, 30), 0);
    cr_assert_eq(dc_journal_load(dir, &got, &st, NULL), DC_ERR_FORMAT);
    close(fd);
    /* opening over a damaged journal starts fresh */
    int resumed = -1;
    cr_assert_eq(dc_journal_open(dir, &in, 0, 1, &j, &resumed), DC_OK);
    cr_assert_eq(resumed, 0);
    dc_journal_close(j);
}

Test(journal, need_rule)
{
    cr_assert_eq(dc_journal_need(DC_JSTATE_PENDING, 1), DC_NEED_XOR);
    cr_assert_eq(dc_journal_need(DC_JSTATE_APPLYING, 1), DC_NEED_OVERWRITE);
    cr_assert_eq(dc_journal_need(DC_JSTATE_APPLIED, 1), DC_NEED_VERIFY);
    cr_assert_eq(dc_journal_need(-1, 0), DC_NEED_OVERWRITE);
    cr_assert_eq(dc_journal_need(DC_JSTATE_PENDING, 0), DC_NEED_OVERWRITE);
    cr_assert_eq(dc_journal_need(-1, 1), DC_NEED_XOR);
}

/* --- a receiver killed mid-apply ------------------------------------------ */

enum { NCH = 16, CH = 65536 };

static void fill(uint8_t *base, uint8_t *target, uint8_t *xr)
{
    uint32_t x = 12345;
    for (size_t i = 0; i < (size_t)NCH * CH; i++) {
        x = x * 1103515245u + 12345u;
        base[i] = (uint8_t)(x >> 16);
        /* ~3% of bytes change */
        uint8_t d = ((x >> 8) % 32 == 0) ? (uint8_t)(x >> 24 | 1) : 0;
        target[i] = base[i] ^ d;
        xr[i] = d;
    }
}

/* Child: apply XOR chunks in order, journaled; stop (spin) inside chunk
 * `stop_at` after half its bytes, telling the parent through *flag. */
static void child_apply(const char *path, const uint8_t *xr, int durable, int stop_at,
                        volatile int *flag)
{
    int fd = open(path, O_RDWR);
    uint8_t *m = mmap(NULL, (size_t)NCH * CH, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        _exit(3);
    dc_journal_info_t in = {.target = 2, .baseline = 1, .nchunks = NCH, .layout_id = 5};
    dc_journal_t *j;
    if (dc_journal_open(dir, &in, durable ? DC_JOURNAL_DURABLE : 0, 4, &j, NULL) != DC_OK)
        _exit(4);
    for (int c = 0; c < NCH; c++) {
        if (dc_journal_begin(j, (uint64_t)c) != DC_OK)
            _exit(5);
        for (size_t i = 0; i < CH; i++) {
            m[(size_t)c * CH + i] ^= xr[(size_t)c * CH + i];
            if (c == stop_at && i == CH / 2) {
                __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
                for (;;)
                    pause();
            }
        }
        if (durable && msync(m + (size_t)c * CH, CH, MS_SYNC) != 0)
            _exit(6);
        if (dc_journal_applied(j, (uint64_t)c, (dc_digest_t){(uint64_t)c + 1, 7}) != DC_OK)
            _exit(7);
    }
    _exit(0);
}

static void crash_and_recover(int durable)
{
    uint8_t *base = malloc((size_t)NCH * CH), *target = malloc((size_t)NCH * CH),
            *xr = malloc((size_t)NCH * CH);
    fill(base, target, xr);
    char path[128];
    snprintf(path, sizeof(path), "%s/weights", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, base, (size_t)NCH * CH), (ssize_t)NCH * CH);
    volatile int *flag = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    *flag = 0;
    const int stop_at = 5;
    pid_t pid = fork();
    if (pid == 0)
        child_apply(path, xr, durable, stop_at, flag);
    while (!__atomic_load_n(flag, __ATOMIC_ACQUIRE)) {
        int status;
        cr_assert_eq(waitpid(pid, &status, WNOHANG), 0, "child exited early");
        usleep(1000);
    }
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    cr_assert(WIFSIGNALED(status));

    /* Restart: read the journal and apply the recovery rule. */
    dc_journal_info_t in;
    uint8_t *states;
    cr_assert_eq(dc_journal_load(dir, &in, &states, NULL), DC_OK, "%s", dc_last_error());
    cr_assert_eq(in.nchunks, NCH);
    for (int c = 0; c < stop_at; c++)
        cr_assert_eq(states[c], DC_JSTATE_APPLIED, "chunk %d", c);
    cr_assert_eq(states[stop_at], DC_JSTATE_APPLYING);
    if (!durable)
        for (int c = stop_at + 1; c < NCH; c++)
            cr_assert_eq(states[c], DC_JSTATE_PENDING, "chunk %d", c);

    uint8_t *m = mmap(NULL, (size_t)NCH * CH, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    cr_assert(m != MAP_FAILED);
    /* the interrupted chunk is half applied: neither base nor target, so a
     * re-XOR would be wrong. */
    size_t off = (size_t)stop_at * CH;
    cr_assert(memcmp(m + off, base + off, CH) != 0);
    cr_assert(memcmp(m + off, target + off, CH) != 0);
    int overwrites = 0;
    for (int c = 0; c < NCH; c++) {
        size_t o = (size_t)c * CH;
        switch (dc_journal_need(states[c], 1)) {
        case DC_NEED_XOR:
            for (size_t i = 0; i < CH; i++)
                m[o + i] ^= xr[o + i];
            break;
        case DC_NEED_OVERWRITE:
            memcpy(m + o, target + o, CH);
            overwrites++;
            break;
        case DC_NEED_VERIFY:
            cr_assert(memcmp(m + o, target + o, CH) == 0, "applied chunk %d wrong", c);
            break;
        }
    }
    cr_assert(overwrites >= 1);
    if (durable)
        cr_assert(overwrites <= 4, "window bounds the overwrites: %d", overwrites);
    cr_assert(memcmp(m, target, (size_t)NCH * CH) == 0, "not bit-exact after recovery");
    munmap(m, (size_t)NCH * CH);
    close(fd);
    free(states);
    free(base);
    free(target);
    free(xr);
    munmap((void *)flag, 4096);
}

Test(journal, kill9_mid_apply_recovers_exactly)
{
    crash_and_recover(0);
}

Test(journal, kill9_mid_apply_durable_window)
{
    crash_and_recover(1);
}

Test(journal, durable_sync_cost_bounded)
{
    dc_journal_info_t in = {.target = 2, .baseline = 1, .nchunks = 64, .layout_id = 5};
    dc_journal_t *j;
    cr_assert_eq(dc_journal_open(dir, &in, DC_JOURNAL_DURABLE, 8, &j, NULL), DC_OK);
    for (uint64_t c = 0; c < 64; c++) {
        cr_assert_eq(dc_journal_begin(j, c), DC_OK);
        cr_assert_eq(dc_journal_applied(j, c, (dc_digest_t){c + 1, 9}), DC_OK);
        if (c % 8 == 7)
            cr_assert_eq(dc_journal_sync(j), DC_OK);
    }
    cr_assert_eq(dc_journal_count(j, DC_JSTATE_APPLIED), 64);
    cr_assert(dc_journal_syncs(j) <= 16, "%llu syncs", (unsigned long long)dc_journal_syncs(j));
    dc_journal_close(j);
}
