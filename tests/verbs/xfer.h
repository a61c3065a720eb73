/*
 * xfer.h - two real processes over ANY transport (tests/verbs helpers).
 *
 * The transport under test is g_tname ("tcp", "ucx", "rdma"); set it before
 * the first call.  Every case forks its server BEFORE this process makes
 * its first transport call, so that each process owns its own transport
 * state (a UCP context, CUDA and an rdma_cm channel must not cross a fork).
 * The sender's data is a random pattern generated before the fork, so both
 * processes hold the same expected bytes and the receiver compares every
 * byte of every message.
 *
 *   require_transport()   skip the running test, saying why, unless
 *                         g_tname works here (for rdma: also unless
 *                         DELTACAST_TEST_RDMA_ADDR names an RDMA interface)
 *   fork_server()         run a server function in a forked child that
 *                         reports its listening address through a pipe
 *   run_transfer*()       stream messages of many sizes to server_main(),
 *                         with optional corruption, cuts, caller CRC32Cs,
 *                         GPU memory; assert byte-exactness and NACK counts
 *
 * Used by conformance.c (every transport), test_ucx.c, test_ucx_slow.c and
 * test_rdma.c (what only one transport has).
 */
#ifndef DC_TEST_VERBS_XFER_H
#define DC_TEST_VERBS_XFER_H

#include <criterion/criterion.h>

#include "kernels/kern_cuda.h"
#include "verbs/fault.h"
#include "verbs/transport.h"
#include "verbs/ucx.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SRC_SIZE (64u << 20)
#define MSG_MAX (4u << 20)
#define DEPTH 16

static uint8_t *g_src;
/* The transport under test (see the top of this file): a file about one
 * transport defines XFER_TRANSPORT before it includes this one. */
#ifndef XFER_TRANSPORT
#define XFER_TRANSPORT "tcp"
#endif
static const char *g_tname = XFER_TRANSPORT;

static inline void fill_random(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed ? seed : 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        x += 0x9e3779b97f4a7c15ull; /* splitmix64 */
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        memcpy(p + i, &z, 8);
    }
}

/* Message i: its size and where its bytes come from in g_src.  Sizes cover
 * empty, tiny (eager), odd, and large (rendezvous) messages; for ucx also
 * one piece exactly (1 MiB), several, and not a multiple of the piece size.
 * A test may switch g_sizes before it forks. */
static const size_t g_default_sizes[] = {MSG_MAX, 1,        8191,       65539,
                                         MSG_MAX, 0,        1u << 20,   MSG_MAX - 5};
static const size_t *g_sizes = g_default_sizes;
static size_t g_nsizes = sizeof(g_default_sizes) / sizeof(g_default_sizes[0]);
static inline size_t msg_size(uint64_t i)
{
    return g_sizes[i % g_nsizes];
}
static inline size_t msg_off(uint64_t i, size_t size)
{
    return (size_t)((i * 7340033ull) % (SRC_SIZE - size + 1));
}

/* Run probe(msg, 512) in a child and return its verdict; *why gets its
 * message.  A UCP context (and CUDA) must not cross a fork(), and the tests
 * fork their server before this process touches UCX. */
static inline int probe_in_child(int (*probe)(char *m, size_t mlen), char *why, size_t len)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        close(p[0]);
        char m[512] = "";
        int ok = probe(m, sizeof(m));
        if (write(p[1], m, strlen(m) + 1) < 0)
            _exit(2);
        _exit(ok ? 0 : 1);
    }
    close(p[1]);
    ssize_t n = read(p[0], why, len - 1);
    why[n > 0 ? n : 0] = 0;
    close(p[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static inline int transport_probe(char *m, size_t mlen)
{
    const dc_verbs_ops_t *t;
    if (dc_verbs_find(g_tname, &t) == DC_OK)
        return 1;
    snprintf(m, mlen, "%s", dc_last_error());
    return 0;
}

static inline int transport_usable(char *why, size_t len)
{
    return probe_in_child(transport_probe, why, len);
}

/* Skip the running test, saying why, unless g_tname works here.  rdma also
 * needs DELTACAST_TEST_RDMA_ADDR: rdma_cm cannot route 127.0.0.1, so the
 * two-process cases listen on the address of an interface with an RDMA
 * device (scripts/rdma-vm.sh sets it; see test_listen_addr()). */
static inline void require_transport(void)
{
    char why[512];
    if (!transport_usable(why, sizeof(why)))
        cr_skip_test("%s unavailable here: %s", g_tname, why);
    const char *a = getenv("DELTACAST_TEST_RDMA_ADDR");
    if (strcmp(g_tname, "rdma") == 0 && (!a || !*a))
        cr_skip_test("rdma: DELTACAST_TEST_RDMA_ADDR is not set (the address of an interface "
                     "with an RDMA device; loopback has none; scripts/rdma-vm.sh runs these "
                     "tests on soft-RoCE)");
}

static inline void opts_with_secret(dc_verbs_opts_t *o, const char *secret, uint32_t timeout_ms)
{
    dc_verbs_opts_init(o);
    o->secret = secret;
    o->secret_len = strlen(secret);
    o->timeout_ms = timeout_ms;
}

/* --- GPU memory ----------------------------------------------------------- */

/* 1: the next transfer moves GPU memory: the sender sends from a device copy
 * of g_src registered with reg_mem(DC_VERBS_MEM_CUDA), the receiver receives
 * into registered device buffers and compares them after a copy back.  Set
 * before the fork (CUDA is initialised after it, in each process). */
static int g_gpu;

/* Can g_tname move GPU memory here (probed in a child: CUDA must not be
 * initialised before the fork)?  Else *why says what is missing. */
static inline int gpu_probe(char *m, size_t mlen)
{
    const dc_verbs_ops_t *t;
    dc_verbs_caps_t caps = {.size = sizeof(caps)};
    int ok = 0;
    if (!DC_HAVE_CUDA)
        snprintf(m, mlen, "CUDA kernels not built (nvcc not found at configure time)");
    else if (!dc_kern_cuda_available())
        snprintf(m, mlen, "no CUDA device (cudaGetDeviceCount failed or returned 0)");
    else if (dc_verbs_find(g_tname, &t) != DC_OK || t->caps(&caps) != DC_OK)
        snprintf(m, mlen, "%s unavailable: %s", g_tname, dc_last_error());
    else if (!(caps.mem_kinds & DC_VERBS_MEM_CUDA) && strcmp(g_tname, "ucx") == 0 &&
             t->reg_mem(NULL, m, 64, DC_VERBS_MEM_CUDA, &(dc_verbs_mr_t *){0}) != DC_OK)
        snprintf(m, mlen, "%s", dc_last_error()); /* ucx says why */
    else if (!(caps.mem_kinds & DC_VERBS_MEM_CUDA))
        snprintf(m, mlen, "%s reports no GPU memory support here", g_tname);
    else
        ok = 1;
    return ok;
}

/* Skip the running test, saying why, unless g_tname moves GPU memory here. */
static inline void require_gpu_memory(void)
{
    char why[512];
    if (!probe_in_child(gpu_probe, why, sizeof(why)))
        cr_skip_test("no GPU memory transfer here: %s", why);
}

/* --- server (child) ----------------------------------------------------- */

/* Accept one connection on l within timeout_s, polling the listener: 0 with
 * *cp set, or 13 (with a line on stderr naming `who`). */
static inline int child_accept(const dc_verbs_ops_t *t, dc_verbs_listener_t *l, double timeout_s,
                               const char *who, dc_verbs_conn_t **cp)
{
    double deadline = dc_now_s() + timeout_s;
    dc_status_t st;
    while ((st = t->accept(l, cp)) == DC_ERR_AGAIN && dc_now_s() < deadline) {
        struct pollfd pfd = {.fd = t->listen_fd(l), .events = POLLIN};
        poll(&pfd, 1, 5);
    }
    if (st != DC_OK) {
        fprintf(stderr, "%s: accept: %s\n", who, dc_last_error());
        return 13;
    }
    return 0;
}

/* The address the two-process cases listen on: loopback, except for rdma,
 * whose connection manager needs the address of an interface with an RDMA
 * device (127.0.0.1 gives "rdma_resolve_route: No such device"):
 * DELTACAST_TEST_RDMA_ADDR, which scripts/rdma-vm.sh sets. */
static inline const char *test_listen_addr(char *buf, size_t len)
{
    const char *a = getenv("DELTACAST_TEST_RDMA_ADDR");
    if (strcmp(g_tname, "rdma") == 0 && a && *a)
        snprintf(buf, len, "%s:0", a);
    else
        snprintf(buf, len, "127.0.0.1:0");
    return buf;
}

/* Child side of every two-process case: listen on test_listen_addr() with transport
 * g_tname, write the address (with its NUL) to port_fd for the parent, and
 * accept one connection within timeout_s, polling the listener.  Returns 0
 * with *tp, *lp and *cp set, or the child's exit code 10-13 (with a line on
 * stderr naming `who`). */
static inline int child_listen_accept(const dc_verbs_opts_t *o, int port_fd, double timeout_s,
                                      const char *who, const dc_verbs_ops_t **tp,
                                      dc_verbs_listener_t **lp, dc_verbs_conn_t **cp)
{
    const dc_verbs_ops_t *t;
    if (dc_verbs_find(g_tname, &t) != DC_OK)
        return 10;
    dc_verbs_listener_t *l;
    char la[128];
    if (t->listen(o, test_listen_addr(la, sizeof(la)), &l) != DC_OK) {
        fprintf(stderr, "%s: listen: %s\n", who, dc_last_error());
        return 11;
    }
    char addr[128];
    t->listen_addr(l, addr, sizeof(addr));
    if (write(port_fd, addr, strlen(addr) + 1) < 0)
        return 12;
    close(port_fd);
    *tp = t;
    *lp = l;
    return child_accept(t, l, timeout_s, who, cp);
}

typedef struct server_cfg {
    const char *secret;
    uint64_t total;      /* bytes to receive */
    int expect_rejects;  /* accept() must first drop this many bad peers */
    double corrupt_p;    /* fault injection on receipt */
    int64_t corrupt_at;  /* > 0: flip the received payload byte at this offset */
    int late_ms;         /* progress this long before the first irecv: the
                            first messages arrive before their receives */
} server_cfg_t;

/* Receive messages until `total` bytes, compare them, reply with the
 * number of mismatching messages and the NACK count.  Exit code: 0 ok. */
static inline int server_main(int port_fd, const void *arg)
{
    const server_cfg_t *cfg = arg;
    if (cfg->corrupt_p > 0 || cfg->corrupt_at > 0) {
        dc_fault_cfg_t f;
        dc_fault_parse(NULL, &f);
        f.corrupt_p = cfg->corrupt_p;
        if (cfg->corrupt_at > 0)
            f.corrupt_at = cfg->corrupt_at;
        f.seed = 7;
        dc_fault_install(&f);
    }
    const dc_verbs_ops_t *t;
    dc_verbs_opts_t o;
    opts_with_secret(&o, cfg->secret, 20000);
    dc_verbs_listener_t *l;
    dc_verbs_conn_t *c = NULL;
    int rc = child_listen_accept(&o, port_fd, 60, "server", &t, &l, &c);
    if (rc)
        return rc;
    dc_status_t st;
    for (double until = dc_now_s() + cfg->late_ms / 1000.0; dc_now_s() < until;) {
        if (t->wait(c, 5) != DC_OK) {
            fprintf(stderr, "server: wait: %s\n", dc_last_error());
            return 18;
        }
    }
    uint8_t *bufs = malloc((size_t)DEPTH * MSG_MAX);
    uint8_t *dbufs = NULL, *rbufs = bufs;
    dc_verbs_mr_t *dmr = NULL;
    if (g_gpu) {
        void *d = NULL;
        if (dc_kern_cuda_malloc(&d, (size_t)DEPTH * MSG_MAX) != DC_OK ||
            t->reg_mem(c, d, (size_t)DEPTH * MSG_MAX, DC_VERBS_MEM_CUDA, &dmr) != DC_OK) {
            fprintf(stderr, "server: GPU receive buffers: %s\n", dc_last_error());
            return 19;
        }
        dbufs = rbufs = d;
    }
    dc_verbs_req_t *reqs[DEPTH];
    uint64_t posted = 0, done = 0, got_bytes = 0, bad = 0;
    uint64_t nmsg = 0;
    for (uint64_t sum = 0; sum < cfg->total; nmsg++)
        sum += msg_size(nmsg);
    while (done < nmsg) {
        while (posted < nmsg && posted - done < DEPTH) {
            st = t->irecv(c, rbufs + (posted % DEPTH) * MSG_MAX, MSG_MAX, dmr,
                          &reqs[posted % DEPTH]);
            if (st == DC_ERR_AGAIN)
                break;
            if (st != DC_OK) {
                fprintf(stderr, "server: irecv: %s\n", dc_last_error());
                return 14;
            }
            posted++;
        }
        int fin = 0;
        size_t len = 0;
        st = t->test(reqs[done % DEPTH], &fin, &len);
        if (st != DC_OK) {
            fprintf(stderr, "server: recv %llu: %s\n", (unsigned long long)done,
                    dc_last_error());
            return 15;
        }
        if (!fin) {
            t->wait(c, 10);
            /* Keep the listener progressed: a cut connection re-attaches here. */
            dc_verbs_conn_t *extra;
            if (t->accept(l, &extra) == DC_OK) {
                fprintf(stderr, "server: unexpected second connection\n");
                return 17;
            }
            continue;
        }
        size_t want = msg_size(done);
        if (dbufs && len <= MSG_MAX &&
            dc_kern_cuda_d2h(bufs + (done % DEPTH) * MSG_MAX, dbufs + (done % DEPTH) * MSG_MAX,
                             len) != DC_OK) {
            fprintf(stderr, "server: copy back: %s\n", dc_last_error());
            return 19;
        }
        if (len != want ||
            memcmp(bufs + (done % DEPTH) * MSG_MAX, g_src + msg_off(done, want), want) != 0)
            bad++;
        got_bytes += len;
        done++;
    }
    dc_verbs_stats_t s = {.size = sizeof(s)};
    t->stats(c, &s);
    uint64_t reply[4] = {bad, s.nacks_sent, got_bytes, s.reconnects};
    if (dc_verbs_send_blocking(c, reply, sizeof(reply), 20000) != DC_OK) {
        fprintf(stderr, "server: reply: %s\n", dc_last_error());
        return 16;
    }
    /* Wait for the client's good-bye (it closes after reading the reply). */
    uint8_t bye;
    size_t bl;
    dc_verbs_recv_blocking(c, &bye, 1, &bl, 5000);
    if (dmr)
        t->dereg_mem(c, dmr);
    t->close(c);
    t->listen_close(l);
    dc_kern_cuda_free(dbufs);
    free(bufs);
    return bad ? 1 : 0;
}

/*
 * UCX logs to stdout, and UCX_LOG_FILE is read when libucs loads (too late
 * to set here).  A connection cut by the fault hook in the middle of a
 * rendezvous put makes UCX log an error (tcp_ep: failed to prepare AM data,
 * its PUT ACK on the dead socket): keep such lines out of the TAP stream on
 * the runner's stdout.  Called in this test's own process (a Criterion
 * worker) before it forks its server.
 */
static inline void ucx_logs_to_stderr(void)
{
    fflush(stdout);
    cr_assert_neq(dup2(STDERR_FILENO, STDOUT_FILENO), -1);
}

/* Fork a child that runs fn(port_fd, arg) as its exit code (alarm after
 * alarm_s), and read the address it writes to port_fd into addr. */
static inline pid_t fork_server(int (*fn)(int port_fd, const void *arg), const void *arg,
                                unsigned alarm_s, char *addr, size_t addr_len)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        close(p[0]);
        alarm(alarm_s);
        _exit(fn(p[1], arg));
    }
    close(p[1]);
    size_t n = 0;
    while (n < addr_len) {
        ssize_t r = read(p[0], addr + n, addr_len - n);
        if (r <= 0)
            break;
        n += (size_t)r;
        if (memchr(addr, 0, n))
            break;
    }
    close(p[0]);
    cr_assert(n > 0 && memchr(addr, 0, n), "server did not report its address");
    return pid;
}

static inline pid_t start_server(const server_cfg_t *cfg, char *addr, size_t addr_len)
{
    ucx_logs_to_stderr();
    return fork_server(server_main, cfg, 600, addr, addr_len);
}

static inline int wait_child(pid_t pid)
{
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status), "server died (signal %d)",
              WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return WEXITSTATUS(status);
}

static inline dc_status_t client_connect(const dc_verbs_ops_t *t, const char *addr,
                                         const char *secret, dc_verbs_conn_t **out)
{
    dc_verbs_opts_t o;
    opts_with_secret(&o, secret, 10000);
    dc_verbs_conn_t *c = NULL;
    dc_status_t st = t->connect(&o, addr, &c);
    if (st != DC_OK)
        return st;
    while ((st = t->connect_test(c)) == DC_ERR_AGAIN)
        t->wait(c, 10);
    if (st != DC_OK) {
        t->close(c);
        return st;
    }
    *out = c;
    return DC_OK;
}

/* Send `total` bytes of messages, then read the server's verdict.  With
 * `cut_every` > 0, this (sending) process cuts its connection after every
 * `cut_every` bytes, `cuts` times (fault injection drop_after). */
/* `corrupt_at` > 0: the server flips its received payload byte at that
 * offset, once: exactly one NACK. */
static int g_late_ms; /* server_cfg_t.late_ms of the next transfer */
/* How the next transfer's client sends: 0 isend (the transport computes the
 * CRC32C), 1 isend_crc with the right CRC32C, 2 isend_crc with a WRONG one
 * for every message i with i % 5 == 3 (the rest right). */
static int g_caller_crc;
#define WRONG_CRC(i) ((i) % 5 == 3)

static inline void run_transfer_full(uint64_t total, double corrupt_p, int64_t corrupt_at,
                                     uint64_t cut_every, uint64_t cuts)
{
    g_src = malloc(SRC_SIZE);
    cr_assert_not_null(g_src);
    fill_random(g_src, SRC_SIZE, (uint64_t)time(NULL) ^ (uint64_t)getpid() << 20);
    server_cfg_t cfg = {.secret = "test-secret-ucx",
                        .total = total,
                        .corrupt_p = corrupt_p,
                        .corrupt_at = corrupt_at,
                        .late_ms = g_late_ms};
    char addr[128];
    pid_t pid = start_server(&cfg, addr, sizeof(addr));
    if (cut_every) {
        dc_fault_cfg_t f;
        cr_assert_eq(dc_fault_parse(NULL, &f), DC_OK);
        f.drop_after = cut_every;
        f.drop_count = cuts;
        dc_fault_install(&f);
    }

    const dc_verbs_ops_t *t;
    cr_assert_eq(dc_verbs_find(g_tname, &t), DC_OK, "%s", dc_last_error());
    dc_verbs_conn_t *c = NULL;
    dc_status_t st = client_connect(t, addr, cfg.secret, &c);
    cr_assert_eq(st, DC_OK, "connect %s: %s", addr, dc_last_error());
#if DC_HAVE_UCX
    if (strcmp(g_tname, "ucx") == 0) {
        char tls[256];
        cr_assert_eq(dc_ucx_conn_transports(c, tls, sizeof(tls)), DC_OK);
        cr_assert(strchr(tls, '/') != NULL, "no transport reported: '%s'", tls);
        cr_log_info("ucx transports: %s", tls);
    }
#endif

    /* GPU: send from a registered device copy of g_src. */
    uint8_t *src = g_src;
    dc_verbs_mr_t *smr = NULL;
    if (g_gpu) {
        void *d = NULL;
        cr_assert_eq(dc_kern_cuda_malloc(&d, SRC_SIZE), DC_OK, "%s", dc_last_error());
        cr_assert_eq(dc_kern_cuda_h2d(d, g_src, SRC_SIZE), DC_OK, "%s", dc_last_error());
        cr_assert_eq(t->reg_mem(c, d, SRC_SIZE, DC_VERBS_MEM_CUDA, &smr), DC_OK, "%s",
                     dc_last_error());
        src = d;
    }

    dc_verbs_req_t *reqs[DEPTH];
    uint64_t nmsg = 0, sent_bytes = 0;
    for (; sent_bytes < total; nmsg++)
        sent_bytes += msg_size(nmsg);
    uint64_t posted = 0, done = 0, nwrong = 0;
    double t0 = dc_now_s();
    while (done < nmsg) {
        while (posted < nmsg && posted - done < DEPTH) {
            size_t sz = msg_size(posted);
            const uint8_t *m = src + msg_off(posted, sz);
            if (g_caller_crc) {
                /* the CRC32C of the host copy (the same bytes as src) */
                uint32_t crc = dc_crc32c(0, g_src + msg_off(posted, sz), sz);
                if (g_caller_crc == 2 && WRONG_CRC(posted)) {
                    crc ^= 0x00100000u;
                    nwrong++;
                }
                st = dc_verbs_isend_crc(c, m, sz, smr, crc, &reqs[posted % DEPTH]);
            } else {
                st = t->isend(c, m, sz, smr, &reqs[posted % DEPTH]);
            }
            if (st == DC_ERR_AGAIN)
                break;
            cr_assert_eq(st, DC_OK, "isend %llu: %s", (unsigned long long)posted,
                         dc_last_error());
            posted++;
        }
        int fin = 0;
        size_t len = 0;
        st = t->test(reqs[done % DEPTH], &fin, &len);
        cr_assert_eq(st, DC_OK, "send %llu: %s", (unsigned long long)done, dc_last_error());
        if (!fin) {
            t->wait(c, 10);
            continue;
        }
        cr_assert_eq(len, msg_size(done));
        done++;
    }
    double secs = dc_now_s() - t0;
    uint64_t reply[4];
    size_t rl = 0;
    st = dc_verbs_recv_blocking(c, reply, sizeof(reply), &rl, 30000);
    cr_assert_eq(st, DC_OK, "reply: %s", dc_last_error());
    cr_assert_eq(rl, sizeof(reply));
    dc_verbs_stats_t s = {.size = sizeof(s)};
    cr_assert_eq(t->stats(c, &s), DC_OK);
    cr_log_info("%s: %.1f MiB in %.2f s (%.2f Gb/s), resends %llu, server NACKs %llu",
                g_tname, total / 1048576.0, secs, total * 8 / secs / 1e9,
                (unsigned long long)s.resends, (unsigned long long)reply[1]);
    if (cut_every) {
        dc_fault_stats_t fs;
        dc_fault_get_stats(&fs);
        cr_log_info("cuts: %llu fired, client reconnects %llu, server re-attaches %llu",
                    (unsigned long long)fs.dropped, (unsigned long long)s.reconnects,
                    (unsigned long long)reply[3]);
        cr_assert_eq(fs.dropped, cuts, "the cut fault fired %llu times, want %llu",
                     (unsigned long long)fs.dropped, (unsigned long long)cuts);
        cr_assert_eq(s.reconnects, cuts);
        cr_assert_eq(reply[3], cuts);
    }
    dc_verbs_send_blocking(c, "x", 1, 5000);
    if (smr)
        t->dereg_mem(c, smr);
    t->close(c);
    if (src != g_src)
        dc_kern_cuda_free(src);
    cr_assert_eq(reply[0], 0, "%llu messages differ at the receiver",
                 (unsigned long long)reply[0]);
    cr_assert_eq(reply[2], sent_bytes, "the server received %llu bytes of the %llu sent",
                 (unsigned long long)reply[2], (unsigned long long)sent_bytes);
    cr_assert_eq(s.msgs_sent, nmsg);
    if (!cut_every)
        cr_assert_eq(s.resends, reply[1], "every NACK is answered by one re-send");
    if (corrupt_p > 0)
        cr_assert_gt(reply[1], nwrong, "corruption was injected but never detected");
    else if (corrupt_at > 0)
        cr_assert_eq(reply[1], 1 + nwrong,
                     "one damaged piece must NACK its message once, got %llu",
                     (unsigned long long)reply[1]);
    else
        /* each wrong caller CRC32C: one NACK, then a re-send with the
         * transport's own CRC32C that is accepted (no NACK loop) */
        cr_assert_eq(reply[1], nwrong, "NACKs %llu, wrong caller CRC32Cs %llu",
                     (unsigned long long)reply[1], (unsigned long long)nwrong);
    if (g_caller_crc == 2)
        cr_assert_gt(nwrong, 0);
    cr_assert_eq(wait_child(pid), 0, "server reported a failure");
    free(g_src);
}

static inline void run_transfer_cut(uint64_t total, double corrupt_p, uint64_t cut_every,
                                    uint64_t cuts)
{
    run_transfer_full(total, corrupt_p, -1, cut_every, cuts);
}

static inline void run_transfer(uint64_t total, double corrupt_p)
{
    run_transfer_cut(total, corrupt_p, 0, 0);
}

/* fork_server(fn, arg) and connect to it over g_tname with `secret`: the
 * child's pid, *tp and *cp set. */
static inline pid_t fork_and_connect(int (*fn)(int port_fd, const void *arg), const void *arg,
                                     unsigned alarm_s, const char *secret,
                                     const dc_verbs_ops_t **tp, dc_verbs_conn_t **cp)
{
    char addr[128];
    pid_t pid = fork_server(fn, arg, alarm_s, addr, sizeof(addr));
    cr_assert_eq(dc_verbs_find(g_tname, tp), DC_OK);
    cr_assert_eq(client_connect(*tp, addr, secret, cp), DC_OK, "%s", dc_last_error());
    return pid;
}

#endif /* DC_TEST_VERBS_XFER_H */
