/*
 * pair.h - two real processes over a real transport (tests/verbs helpers).
 *
 * run_pair(): the parent listens on 127.0.0.1:0 and receives; a forked child
 * connects and sends `total` bytes of seeded random data cut into messages
 * of random sizes <= max_msg; the parent places every message at its offset
 * and compares the whole buffer byte for byte with its own copy of the data,
 * then sends a one-byte "done" so the child can close in order.  Faults are
 * installed per side with dc_fault_install().
 */
#ifndef DC_TEST_VERBS_PAIR_H
#define DC_TEST_VERBS_PAIR_H

#include "kernels/kern.h"
#include "verbs/fault.h"
#include "verbs/transport.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAIR_SECRET "test-job-secret-0123456789"

typedef struct pair_cfg {
    const char *transport;
    uint64_t total;
    uint32_t max_msg;
    uint32_t streams;
    uint32_t depth;           /* messages in flight */
    const char *fault_sender; /* DELTACAST_FAULT syntax, NULL: none */
    const char *fault_receiver;
    int timeout_ms;
    int caller_crc; /* sender: 0 isend; 1 isend_crc with the right CRC32C;
                       2 isend_crc, WRONG for messages i % 5 == 3 */
    /* optional: called with the listener's address before the sender forks;
     * writes the address the sender dials instead (a proxy in between) */
    void (*via)(const char *listen_addr, char *dial_addr, size_t len);
} pair_cfg_t;

typedef struct pair_result {
    dc_verbs_stats_t rstats; /* receiver side */
    int child_status;
    double seconds;
    uint64_t msgs; /* messages received */
} pair_result_t;

/* Messages sent with a wrong caller CRC32C (caller_crc 2) out of `msgs`. */
static inline uint64_t pair_wrong_crcs(uint64_t msgs)
{
    return msgs / 5 + (msgs % 5 > 3);
}

static inline uint64_t pair_rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void pair_fill(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t s = seed;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v = pair_rng(&s);
        memcpy(p + i, &v, 8);
    }
    for (; i < n; i++)
        p[i] = (uint8_t)pair_rng(&s);
}

static inline void pair_install_fault(const char *spec)
{
    dc_fault_cfg_t f;
    cr_assert_eq(dc_fault_parse(spec, &f), DC_OK, "%s", dc_last_error());
    dc_fault_install(&f);
}

/* message sizes: random in [1, max_msg], deterministic */
static inline size_t pair_msg_len(uint64_t *s, uint32_t max_msg, uint64_t left)
{
    uint64_t r = pair_rng(s);
    size_t len = (r & 3) == 0 ? max_msg : (size_t)(1 + r % max_msg);
    return (size_t)DC_MIN((uint64_t)len, left);
}

static int pair_child(const pair_cfg_t *cfg, const char *addr, const uint8_t *data)
{
    if (cfg->fault_sender)
        pair_install_fault(cfg->fault_sender);
    const dc_verbs_ops_t *t;
    if (dc_verbs_find(cfg->transport, &t) != DC_OK)
        return 10;
    dc_verbs_opts_t o;
    dc_verbs_opts_init(&o);
    o.streams = cfg->streams;
    o.secret = PAIR_SECRET;
    o.secret_len = strlen(PAIR_SECRET);
    o.timeout_ms = (uint32_t)cfg->timeout_ms;
    dc_verbs_conn_t *c;
    if (t->connect(&o, addr, &c) != DC_OK)
        return 11;
    dc_status_t st;
    while ((st = t->connect_test(c)) == DC_ERR_AGAIN)
        t->wait(c, 10);
    if (st != DC_OK) {
        fprintf(stderr, "child connect: %s\n", dc_last_error());
        return 12;
    }
    dc_verbs_req_t *reqs[64];
    uint32_t depth = DC_MIN(cfg->depth, 64u);
    uint32_t head = 0, n = 0;
    uint64_t off = 0, s = 42, i = 0;
    while (off < cfg->total || n) {
        while (off < cfg->total && n < depth) {
            size_t len = pair_msg_len(&s, cfg->max_msg, cfg->total - off);
            if (cfg->caller_crc) {
                uint32_t crc = dc_crc32c(0, data + off, len);
                if (cfg->caller_crc == 2 && i % 5 == 3)
                    crc ^= 0x80u;
                st = dc_verbs_isend_crc(c, data + off, len, NULL, crc, &reqs[(head + n) % 64]);
            } else {
                st = t->isend(c, data + off, len, NULL, &reqs[(head + n) % 64]);
            }
            if (st == DC_ERR_AGAIN)
                break;
            if (st != DC_OK) {
                fprintf(stderr, "child isend: %s\n", dc_last_error());
                return 13;
            }
            off += len;
            n++;
            i++;
        }
        int done = 0;
        st = t->test(reqs[head], &done, NULL);
        if (st != DC_OK) {
            fprintf(stderr, "child test: %s\n", dc_last_error());
            return 14;
        }
        if (done) {
            head = (head + 1) % 64;
            n--;
        } else {
            t->wait(c, 5);
        }
    }
    uint8_t fin = 0;
    size_t flen = 0;
    if ((st = dc_verbs_recv_blocking(c, &fin, 1, &flen, 120000)) != DC_OK) {
        fprintf(stderr, "child final: %s\n", dc_last_error());
        return 15;
    }
    t->close(c);
    return fin == 0xd0 && flen == 1 ? 0 : 16;
}

/* Runs the pair; asserts byte-exactness; returns the receiver's stats. */
static inline pair_result_t run_pair(const pair_cfg_t *cfg)
{
    pair_result_t res;
    memset(&res, 0, sizeof(res));
    uint8_t *data = malloc(cfg->total);
    uint8_t *got = malloc(cfg->total);
    cr_assert(data && got);
    pair_fill(data, cfg->total, 7);
    memset(got, 0xee, cfg->total);

    const dc_verbs_ops_t *t;
    cr_assert_eq(dc_verbs_find(cfg->transport, &t), DC_OK, "%s", dc_last_error());
    dc_verbs_opts_t o;
    dc_verbs_opts_init(&o);
    o.secret = PAIR_SECRET;
    o.secret_len = strlen(PAIR_SECRET);
    o.timeout_ms = (uint32_t)cfg->timeout_ms;
    dc_verbs_listener_t *l;
    cr_assert_eq(t->listen(&o, "127.0.0.1:0", &l), DC_OK, "%s", dc_last_error());
    char addr[128];
    cr_assert_eq(t->listen_addr(l, addr, sizeof(addr)), DC_OK);
    if (cfg->via) {
        char lis[128];
        snprintf(lis, sizeof(lis), "%s", addr);
        cfg->via(lis, addr, sizeof(addr));
    }

    fflush(NULL);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        t->listen_close(l);
        _exit(pair_child(cfg, addr, data));
    }
    if (cfg->fault_receiver)
        pair_install_fault(cfg->fault_receiver);
    double t0 = dc_now_s();
    dc_verbs_conn_t *c = NULL;
    dc_status_t st;
    while ((st = t->accept(l, &c)) == DC_ERR_AGAIN) {
        if (dc_now_s() - t0 > 60) {
            kill(pid, SIGKILL);
            cr_assert_fail("no connection within 60 s");
        }
        usleep(1000);
    }
    cr_assert_eq(st, DC_OK, "accept: %s", dc_last_error());

    dc_verbs_req_t *reqs[64];
    uint32_t depth = DC_MIN(cfg->depth, 64u);
    uint32_t head = 0, n = 0;
    uint64_t off = 0, s = 42, recvd = 0;
    size_t lens[64];
    while (off < cfg->total || n) {
        while (off < cfg->total && n < depth) {
            size_t len = pair_msg_len(&s, cfg->max_msg, cfg->total - off);
            st = t->irecv(c, got + off, len, NULL, &reqs[(head + n) % 64]);
            if (st == DC_ERR_AGAIN)
                break;
            cr_assert_eq(st, DC_OK, "irecv: %s", dc_last_error());
            lens[(head + n) % 64] = len;
            off += len;
            n++;
        }
        int done = 0;
        size_t len = 0;
        st = t->test(reqs[head], &done, &len);
        if (st != DC_OK) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            cr_assert_fail("receiver test: %s", dc_last_error());
        }
        if (done) {
            cr_assert_eq(len, lens[head], "message length %zu != %zu", len, lens[head]);
            recvd += len;
            res.msgs++;
            head = (head + 1) % 64;
            n--;
        } else {
            t->wait(c, 5);
        }
    }
    res.seconds = dc_now_s() - t0;
    uint8_t fin = 0xd0;
    cr_assert_eq(dc_verbs_send_blocking(c, &fin, 1, 60000), DC_OK, "final: %s", dc_last_error());
    res.rstats.size = sizeof(res.rstats);
    t->stats(c, &res.rstats);
    /* keep progressing until the child closes */
    int wst = 0;
    while (waitpid(pid, &wst, WNOHANG) == 0)
        (void)t->wait(c, 5);
    res.child_status = wst;
    t->close(c);
    t->listen_close(l);
    dc_fault_install(NULL);
    cr_assert(WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "sender exited with status %d",
              WIFEXITED(wst) ? WEXITSTATUS(wst) : -1);
    cr_assert_eq(recvd, cfg->total);
    cr_assert(memcmp(data, got, cfg->total) == 0, "received bytes differ from the sent bytes");
    free(data);
    free(got);
    return res;
}

#endif /* DC_TEST_VERBS_PAIR_H */
