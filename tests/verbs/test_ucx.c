/*
 * test_ucx.c - the `ucx` transport between two real processes (fork) over
 * UCX's own transports on this machine (tcp / posix / cma on loopback).
 *
 * Every test forks BEFORE the first UCX call, so that each process owns its
 * UCP context.  The sender's data comes from a random pattern generated
 * before the fork, so both processes hold the same expected bytes and the
 * receiver compares every byte of every message.
 */
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
/* The transport under test: "ucx" here; test_rdma.c includes this file and
 * runs the same cases over "rdma". */
static const char *g_tname = "ucx";

static void fill_random(uint8_t *p, size_t n, uint64_t seed)
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
static size_t msg_size(uint64_t i)
{
    return g_sizes[i % g_nsizes];
}
static size_t msg_off(uint64_t i, size_t size)
{
    return (size_t)((i * 7340033ull) % (SRC_SIZE - size + 1));
}

/* Run probe(msg, 512) in a child and return its verdict; *why gets its
 * message.  A UCP context (and CUDA) must not cross a fork(), and the tests
 * fork their server before this process touches UCX. */
static int probe_in_child(int (*probe)(char *m, size_t mlen), char *why, size_t len)
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

static int transport_probe(char *m, size_t mlen)
{
    const dc_verbs_ops_t *t;
    if (dc_verbs_find(g_tname, &t) == DC_OK)
        return 1;
    snprintf(m, mlen, "%s", dc_last_error());
    return 0;
}

static int transport_usable(char *why, size_t len)
{
    return probe_in_child(transport_probe, why, len);
}

/* Skip the running test, saying why, unless g_tname works here. */
static void require_transport(void)
{
    char why[512];
    if (!transport_usable(why, sizeof(why)))
        cr_skip_test("%s unavailable here: %s", g_tname, why);
}

static void opts_with_secret(dc_verbs_opts_t *o, const char *secret, uint32_t timeout_ms)
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
static int gpu_probe(char *m, size_t mlen)
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
__attribute__((unused)) static void require_gpu_memory(void)
{
    char why[512];
    if (!probe_in_child(gpu_probe, why, sizeof(why)))
        cr_skip_test("no GPU memory transfer here: %s", why);
}

/* --- server (child) ----------------------------------------------------- */

/* Accept one connection on l within timeout_s, polling the listener: 0 with
 * *cp set, or 13 (with a line on stderr naming `who`). */
static int child_accept(const dc_verbs_ops_t *t, dc_verbs_listener_t *l, double timeout_s,
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
static const char *test_listen_addr(char *buf, size_t len)
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
static int child_listen_accept(const dc_verbs_opts_t *o, int port_fd, double timeout_s,
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
static int server_main(int port_fd, const void *arg)
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
static void ucx_logs_to_stderr(void)
{
    fflush(stdout);
    cr_assert_neq(dup2(STDERR_FILENO, STDOUT_FILENO), -1);
}

/* Fork a child that runs fn(port_fd, arg) as its exit code (alarm after
 * alarm_s), and read the address it writes to port_fd into addr. */
static pid_t fork_server(int (*fn)(int port_fd, const void *arg), const void *arg,
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

static pid_t start_server(const server_cfg_t *cfg, char *addr, size_t addr_len)
{
    ucx_logs_to_stderr();
    return fork_server(server_main, cfg, 600, addr, addr_len);
}

static int wait_child(pid_t pid)
{
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status), "server died (signal %d)",
              WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return WEXITSTATUS(status);
}

static dc_status_t client_connect(const dc_verbs_ops_t *t, const char *addr, const char *secret,
                                  dc_verbs_conn_t **out)
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

static void run_transfer_full(uint64_t total, double corrupt_p, int64_t corrupt_at,
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

static void run_transfer_cut(uint64_t total, double corrupt_p, uint64_t cut_every, uint64_t cuts)
{
    run_transfer_full(total, corrupt_p, -1, cut_every, cuts);
}

static void run_transfer(uint64_t total, double corrupt_p)
{
    run_transfer_cut(total, corrupt_p, 0, 0);
}

/* --- tests --------------------------------------------------------------- */

#if defined(DC_TEST_RDMA)
/* Built by test_rdma.c: the rdma cases live there. */
#elif defined(DC_TEST_UCX_SLOW)
/* Built by test_ucx_slow.c (suite 'slow'). */
Test(ucx_slow, transfer_1gib_two_processes, .timeout = 1100)
{
    require_transport();
    run_transfer(1ull << 30, 0);
}

Test(ucx_slow, transfer_256mib_with_corruption, .timeout = 1100)
{
    require_transport();
    run_transfer(256ull << 20, 0.05);
}

Test(ucx_slow, transfer_256mib_with_cuts_and_corruption, .timeout = 1100)
{
    require_transport();
    run_transfer_cut(256ull << 20, 0.05, 60000000, 3);
}
#else

/* fork_server(fn, arg) and connect to it over ucx with `secret`: the
 * child's pid, *tp and *cp set. */
static pid_t fork_and_connect(int (*fn)(int port_fd, const void *arg), const void *arg,
                              unsigned alarm_s, const char *secret, const dc_verbs_ops_t **tp,
                              dc_verbs_conn_t **cp)
{
    char addr[128];
    pid_t pid = fork_server(fn, arg, alarm_s, addr, sizeof(addr));
    cr_assert_eq(dc_verbs_find("ucx", tp), DC_OK);
    cr_assert_eq(client_connect(*tp, addr, secret, cp), DC_OK, "%s", dc_last_error());
    return pid;
}

Test(ucx, init_and_caps)
{
    require_transport();
    const dc_verbs_ops_t *t;
    cr_assert_eq(dc_verbs_find(g_tname, &t), DC_OK);
    cr_assert_str_eq(t->name, "ucx");
    cr_assert_eq(t->size, sizeof(dc_verbs_ops_t));
    dc_verbs_caps_t caps = {.size = sizeof(caps)};
    cr_assert_eq(t->caps(&caps), DC_OK);
    cr_assert(caps.mem_kinds & DC_VERBS_MEM_HOST);
    cr_assert_eq(caps.max_inflight, DC_VERBS_MAX_INFLIGHT);
    cr_assert(strstr(caps.device, "ucx") != NULL);
    /* Without GPU support here (this UCX without CUDA, a build without the
     * CUDA kernels, no GPU), CUDA memory is refused with the reason, never
     * silently staged; with it, gpu_memory_* below move GPU memory. */
    if (caps.mem_kinds & DC_VERBS_MEM_CUDA) {
        cr_log_info("ucx moves GPU memory here (covered by ucx::gpu_memory_*)");
        return;
    }
    static uint8_t b[64];
    cr_assert_eq(t->reg_mem(NULL, b, sizeof(b), DC_VERBS_MEM_CUDA, &(dc_verbs_mr_t *){0}),
                 DC_ERR_UNSUPPORTED);
    const char *e = dc_last_error();
    cr_assert(strstr(e, "without CUDA support") != NULL || strstr(e, "CUDA kernels") != NULL ||
                  strstr(e, "no CUDA device") != NULL,
              "no reason given: %s", e);
    cr_log_info("ucx refuses GPU memory here: %s", e);
}


Test(ucx, transfer_64mib_two_processes)
{
    require_transport();
    run_transfer(64ull << 20, 0);
}

Test(ucx, corruption_is_nacked_and_resent)
{
    require_transport();
    run_transfer(24ull << 20, 0.3);
}

Test(ucx, cut_connections_resume_exactly)
{
    require_transport();
    run_transfer_cut(48ull << 20, 0, 15000000, 2);
}

/* Messages of several 64 KiB pieces (the sender's DELTACAST_UCX_PIECE),
 * none a multiple of the piece size but one: every byte arrives exactly.
 * The receiver posts its first receives late, so that the pieces of the
 * first messages are held and delivered afterwards. */
static const size_t g_piece_sizes[] = {3 * 65536 + 17, (1u << 20) + 1, MSG_MAX - 5, 200000,
                                       65536,          65537,          0,           MSG_MAX};

static int use_small_pieces(void)
{
    g_sizes = g_piece_sizes;
    g_nsizes = sizeof(g_piece_sizes) / sizeof(g_piece_sizes[0]);
    return setenv("DELTACAST_UCX_PIECE", "64KiB", 1);
}

Test(ucx, pieces_not_a_multiple_round_trip_exactly)
{
    require_transport();
    cr_assert_eq(use_small_pieces(), 0);
    g_late_ms = 300;
    run_transfer(24ull << 20, 0);
}

/* The caller's CRC32C of each message (isend_crc): the sender does not
 * compute one, the receiver checks every 64 KiB piece and combines them;
 * every byte arrives exactly, no NACK.  Late receives: held pieces too. */
Test(ucx, caller_crc_round_trips_exactly)
{
    require_transport();
    cr_assert_eq(use_small_pieces(), 0);
    g_late_ms = 300;
    g_caller_crc = 1;
    run_transfer(24ull << 20, 0);
}

/* A wrong caller CRC32C on every fifth message: each such message is
 * NACKed exactly once, then re-sent with the transport's own CRC32Cs and
 * delivered exactly. */
Test(ucx, wrong_caller_crc_nacked_once_then_exact)
{
    require_transport();
    cr_assert_eq(use_small_pieces(), 0);
    g_caller_crc = 2;
    run_transfer(24ull << 20, 0);
}

/* With the caller's CRC32C, a damaged piece is still caught: one flipped
 * byte NACKs its message once; random damage is NACKed and repaired. */
Test(ucx, caller_crc_damaged_piece_still_caught)
{
    require_transport();
    cr_assert_eq(use_small_pieces(), 0);
    g_caller_crc = 1;
    run_transfer_full(12ull << 20, 0, 65536 + 4321, 0, 0);
}

Test(ucx, caller_crc_corruption_and_cuts_repaired_exactly)
{
    require_transport();
    g_caller_crc = 1;
    run_transfer_cut(32ull << 20, 0.3, 9000000, 2);
}

/* One flipped byte in the second 64 KiB piece of the first message: that
 * message (and only it) is NACKed once, re-sent whole, and arrives exact. */
Test(ucx, damaged_piece_nacks_its_message_once)
{
    require_transport();
    cr_assert_eq(use_small_pieces(), 0);
    run_transfer_full(12ull << 20, 0, 65536 + 4321, 0, 0);
}

/* Damage at random in many small pieces (P per piece), with the connection
 * cut twice on the way: all repaired, nothing lost or duplicated. */
Test(ucx, damaged_pieces_and_cuts_repaired_exactly)
{
    require_transport();
    cr_assert_eq(use_small_pieces(), 0);
    run_transfer_full(32ull << 20, 0.02, -1, 9000000, 2);
}

/* GPU memory both ways (every piece's CRC32C computed and checked by the
 * GPU), with damaged pieces NACKed and re-sent, and with cuts resumed. */
Test(ucx, gpu_memory_transfer_with_corruption)
{
    require_transport();
    require_gpu_memory();
    g_gpu = 1;
    run_transfer(32ull << 20, 0.2);
}

/* GPU memory with the caller's CRC32C (of the host copy of the same
 * bytes): the receiver's GPU CRC32Cs of the pieces are combined and
 * checked; wrong caller CRC32Cs are NACKed once each; damage is caught. */
Test(ucx, gpu_memory_caller_crc_wrong_and_corrupted)
{
    require_transport();
    require_gpu_memory();
    g_gpu = 1;
    g_caller_crc = 2;
    run_transfer(32ull << 20, 0.2);
}

Test(ucx, gpu_memory_pieces_with_cuts_and_corruption)
{
    require_transport();
    require_gpu_memory();
    cr_assert_eq(use_small_pieces(), 0);
    g_gpu = 1;
    run_transfer_full(32ull << 20, 0.02, -1, 9000000, 2);
}

Test(ucx, wrong_secret_rejected_server_keeps_serving)
{
    require_transport();
    g_src = malloc(SRC_SIZE);
    fill_random(g_src, SRC_SIZE, 42);
    server_cfg_t cfg = {.secret = "right-secret", .total = MSG_MAX};
    char addr[128];
    pid_t pid = start_server(&cfg, addr, sizeof(addr));
    const dc_verbs_ops_t *t;
    cr_assert_eq(dc_verbs_find(g_tname, &t), DC_OK);
    dc_verbs_conn_t *c = NULL;
    dc_status_t st = client_connect(t, addr, "wrong-secret", &c);
    cr_assert_eq(st, DC_ERR_AUTH, "expected DC_ERR_AUTH, got %s: %s", dc_status_name(st),
                 dc_last_error());
    cr_assert(strstr(dc_last_error(), "authentication") != NULL, "%s", dc_last_error());
    /* Garbage from a raw TCP socket at the listener's port. */
    char host[64];
    uint16_t port;
    cr_assert_eq(dc_verbs_parse_addr(addr, host, sizeof(host), &port), DC_OK);
    for (int k = 0; k < 3; k++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
        inet_pton(AF_INET, host, &sa.sin_addr);
        cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        uint8_t junk[4096];
        fill_random(junk, sizeof(junk), 99 + (uint64_t)k);
        ssize_t w = write(fd, junk, k == 0 ? 7 : sizeof(junk));
        (void)w;
        close(fd);
    }
    /* The server dropped those peers and still serves the right one. */
    st = client_connect(t, addr, "right-secret", &c);
    cr_assert_eq(st, DC_OK, "%s", dc_last_error());
    cr_assert_eq(dc_verbs_send_blocking(c, g_src, MSG_MAX, 20000), DC_OK, "%s",
                 dc_last_error());
    uint64_t reply[4];
    size_t rl;
    cr_assert_eq(dc_verbs_recv_blocking(c, reply, sizeof(reply), &rl, 20000), DC_OK);
    cr_assert_eq(reply[0], 0);
    dc_verbs_send_blocking(c, "x", 1, 5000);
    t->close(c);
    cr_assert_eq(wait_child(pid), 0);
    free(g_src);
}

/* A receive buffer smaller than the message fails that receive with
 * DC_ERR_FORMAT; the connection keeps working for the next message. */
static int small_server(int port_fd, const void *unused)
{
    (void)unused;
    const dc_verbs_ops_t *t;
    dc_verbs_opts_t o;
    opts_with_secret(&o, "small", 20000);
    dc_verbs_listener_t *l;
    dc_verbs_conn_t *c = NULL;
    int rc = child_listen_accept(&o, port_fd, 30, "small server", &t, &l, &c);
    if (rc)
        return rc;
    dc_status_t st;
    uint8_t small[100], big[200000];
    size_t len = 0;
    st = dc_verbs_recv_blocking(c, small, sizeof(small), &len, 20000);
    if (st != DC_ERR_FORMAT)
        return 14;
    st = dc_verbs_recv_blocking(c, big, sizeof(big), &len, 20000);
    if (st != DC_OK || len != 150000 || big[0] != 0x5a || big[len - 1] != 0x5a)
        return 15;
    uint8_t bye;
    dc_verbs_recv_blocking(c, &bye, 1, &len, 5000);
    t->close(c);
    t->listen_close(l);
    return 0;
}

/* A server that accepts and never posts a receive: the client's eager
 * messages pile up until the held-bytes bound fails the connection. */
static int hoarding_server(int port_fd, const void *unused)
{
    (void)unused;
    const dc_verbs_ops_t *t;
    dc_verbs_opts_t o;
    opts_with_secret(&o, "hoard", 20000);
    dc_verbs_listener_t *l;
    dc_verbs_conn_t *c = NULL;
    int rc = child_listen_accept(&o, port_fd, 30, "hoarding server", &t, &l, &c);
    if (rc)
        return rc;
    dc_status_t st = DC_OK;
    double until = dc_now_s() + 60;
    while (st == DC_OK && dc_now_s() < until)
        st = t->wait(c, 10);
    if (st != DC_ERR_BUSY) {
        fprintf(stderr, "hoarding server: %s: %s\n", dc_status_name(st), dc_last_error());
        return 16;
    }
    if (!strstr(dc_last_error(), "ahead of the receives")) {
        fprintf(stderr, "hoarding server: %s\n", dc_last_error());
        return 17;
    }
    /* Closing a connection we failed says BYE: the peer stops instead of
     * re-dialing.  The listener is left to the process exit: a re-dial
     * racing with its destruction crashed UCX 1.13.1's async thread
     * (ucp_cm_server_conn_request_cb) before the BYE was sent. */
    t->close(c);
    (void)l;
    return 0;
}

/* A peer that sends eagerly (UCX_RNDV_THRESH=inf) far ahead of the
 * receives posted for it: the receiver holds at most DC_UCX_HOLD_MAX (256
 * MiB here: two of the 64 MiB largest messages are less) of such data,
 * then fails the connection saying why, instead of holding up to 256 x
 * max_msg bytes; and closing it says BYE, so the sender stops at once
 * (DC_ERR_RESET) instead of re-dialing. */
Test(ucx, eager_flood_ahead_of_receives_is_bounded, .timeout = 180)
{
    setenv("UCX_RNDV_THRESH", "inf", 1); /* before UCX starts in this process */
    require_transport();
    ucx_logs_to_stderr();
    const dc_verbs_ops_t *t;
    dc_verbs_conn_t *c = NULL;
    pid_t pid = fork_and_connect(hoarding_server, NULL, 120, "hoard", &t, &c);
    size_t len = 4u << 20;
    uint8_t *msg = malloc(len);
    cr_assert(msg);
    memset(msg, 0x3c, len);
    /* 100 x 4 MiB, all in flight (the window is 256): 400 MiB > the bound */
    dc_verbs_req_t *reqs[100];
    int posted = 0;
    dc_status_t st = DC_OK;
    for (; posted < 100 && st == DC_OK; posted++)
        while ((st = t->isend(c, msg, len, NULL, &reqs[posted])) == DC_ERR_AGAIN)
            t->wait(c, 10);
    /* progress until the server gives up on us */
    int status = 0;
    double until = dc_now_s() + 90;
    pid_t w = 0;
    while ((w = waitpid(pid, &status, WNOHANG)) == 0 && dc_now_s() < until)
        t->wait(c, 10);
    if (w == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    cr_assert(w == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the receiver did not fail the flood at its bound (status 0x%x)", status);
    /* it said good-bye: we stop at once, we do not re-dial */
    double t0 = dc_now_s();
    while ((st = t->progress(c)) == DC_OK && dc_now_s() < t0 + 10)
        t->wait(c, 10);
    cr_assert_eq(st, DC_ERR_RESET, "%s: %s", dc_status_name(st), dc_last_error());
    cr_assert(strstr(dc_last_error(), "peer closed the connection"), "%s", dc_last_error());
    cr_assert_lt(dc_now_s() - t0, 5.0);
    t->close(c);
    free(msg);
}

/* A server that takes one message and then vanishes (killed: no BYE). */
static int vanishing_server(int port_fd, const void *unused)
{
    (void)unused;
    const dc_verbs_ops_t *t;
    dc_verbs_opts_t o;
    opts_with_secret(&o, "gone", 20000);
    dc_verbs_listener_t *l;
    dc_verbs_conn_t *c = NULL;
    int rc = child_listen_accept(&o, port_fd, 30, "vanishing server", &t, &l, &c);
    if (rc)
        return rc;
    uint8_t buf[64];
    size_t len = 0;
    if (dc_verbs_recv_blocking(c, buf, sizeof(buf), &len, 20000) != DC_OK || len != 5)
        return 14;
    /* let the ACK leave, then die without closing anything */
    double until = dc_now_s() + 0.3;
    while (dc_now_s() < until)
        t->wait(c, 10);
    raise(SIGKILL);
    return 15;
}

/* The client's connection breaks for good: it re-dials until its timeout,
 * counted from the break, then fails with DC_ERR_RESET saying so. */
Test(ucx, lost_peer_fails_after_the_recovery_timeout)
{
    require_transport();
    ucx_logs_to_stderr();
    char addr[128];
    pid_t pid = fork_server(vanishing_server, NULL, 60, addr, sizeof(addr));
    const dc_verbs_ops_t *t;
    cr_assert_eq(dc_verbs_find("ucx", &t), DC_OK);
    dc_verbs_opts_t o;
    opts_with_secret(&o, "gone", 1500);
    dc_verbs_conn_t *c = NULL;
    cr_assert_eq(t->connect(&o, addr, &c), DC_OK, "%s", dc_last_error());
    dc_status_t st;
    while ((st = t->connect_test(c)) == DC_ERR_AGAIN)
        t->wait(c, 10);
    cr_assert_eq(st, DC_OK, "%s", dc_last_error());
    cr_assert_eq(dc_verbs_send_blocking(c, "hello", 5, 10000), DC_OK, "%s", dc_last_error());
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "server status 0x%x",
              status);
    /* the next message finds the peer gone */
    double t0 = dc_now_s();
    st = dc_verbs_send_blocking(c, "again", 5, 30000);
    double took = dc_now_s() - t0;
    cr_assert_eq(st, DC_ERR_RESET, "%s: %s", dc_status_name(st), dc_last_error());
    /* (or, when the deadline falls inside a re-dial's handshake, "handshake
     * not completed within": the same deadline either way) */
    cr_assert(strstr(dc_last_error(), "within 1500 ms") != NULL, "%s", dc_last_error());
    cr_assert(took >= 1.0 && took < 20.0, "failed after %.2f s", took);
    t->close(c);
}

/* The polling settings (config ucx_spin_us) of the echo tests' connections. */
/* (50 ms: a round trip stays within it even when other tests load the CPUs) */
static const char *const g_echo_spins[] = {"50000", "0", NULL};

#define ECHO_MAX (2u << 20)
static uint8_t g_echo_buf[ECHO_MAX];

/* For each setting of the NULL-terminated list `arg` (config ucx_spin_us):
 * accept a connection with it and echo every message (up to ECHO_MAX
 * bytes) back until a 1-byte message 0 arrives. */
static int echo_server(int port_fd, const void *arg)
{
    const char *const *spins = arg;
    const dc_verbs_ops_t *t = NULL;
    dc_verbs_opts_t o;
    opts_with_secret(&o, "echo", 20000);
    dc_verbs_listener_t *l = NULL;
    dc_verbs_conn_t *c = NULL;
    for (size_t k = 0; spins[k]; k++) {
        dc_config_set("ucx_spin_us", spins[k]);
        int rc = k == 0 ? child_listen_accept(&o, port_fd, 30, "echo server", &t, &l, &c)
                        : child_accept(t, l, 30, "echo server", &c);
        if (rc)
            return rc;
        for (;;) {
            size_t len = 0;
            if (dc_verbs_recv_blocking(c, g_echo_buf, ECHO_MAX, &len, 20000) != DC_OK ||
                len == 0)
                return 14;
            if (len == 1 && g_echo_buf[0] == 0)
                break;
            if (dc_verbs_send_blocking(c, g_echo_buf, len, 20000) != DC_OK)
                return 15;
        }
        t->close(c);
    }
    if (t)
        t->listen_close(l);
    return 0;
}

static long thread_vcsw(void)
{
    struct rusage ru;
    cr_assert_eq(getrusage(RUSAGE_THREAD, &ru), 0);
    return ru.ru_nvcsw;
}

static double thread_cpu_s(void)
{
    struct timespec ts;
    cr_assert_eq(clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts), 0);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Round trips of 1-byte messages to the echo server at addr with config
 * ucx_spin_us = spin: the client's voluntary context switches (sleeps) per
 * round trip; then, with the peer silent, the client's CPU seconds over 20
 * waits of 20 ms each (*idle_cpu). */
static double echo_sleeps(const char *addr, const char *spin, int rounds, double *idle_cpu)
{
    cr_assert_eq(dc_config_set("ucx_spin_us", spin), DC_OK);
    const dc_verbs_ops_t *t;
    cr_assert_eq(dc_verbs_find("ucx", &t), DC_OK);
    dc_verbs_conn_t *c = NULL;
    cr_assert_eq(client_connect(t, addr, "echo", &c), DC_OK, "%s", dc_last_error());
    long v0 = 0;
    for (int i = 0; i < rounds + 10; i++) {
        if (i == 10)
            v0 = thread_vcsw(); /* after a warm-up */
        uint8_t b = (uint8_t)(1 + i % 200), r = 0;
        size_t len = 0;
        cr_assert_eq(dc_verbs_send_blocking(c, &b, 1, 20000), DC_OK, "%s", dc_last_error());
        cr_assert_eq(dc_verbs_recv_blocking(c, &r, 1, &len, 20000), DC_OK, "%s",
                     dc_last_error());
        cr_assert(len == 1 && r == b, "echo %u of %u", r, b);
    }
    double per_rt = (double)(thread_vcsw() - v0) / rounds;
    double c0 = thread_cpu_s();
    for (int i = 0; i < 20; i++)
        cr_assert_eq(t->wait(c, 20), DC_OK, "%s", dc_last_error());
    *idle_cpu = thread_cpu_s() - c0;
    uint8_t zero = 0;
    cr_assert_eq(dc_verbs_send_blocking(c, &zero, 1, 20000), DC_OK, "%s", dc_last_error());
    t->close(c);
    return per_rt;
}

/* wait() polls before it sleeps (config ucx_spin_us): polling up to 50 ms,
 * a round trip on loopback needs (almost) no sleep, without polling it
 * sleeps about once; and once the link is idle, waits sleep at once instead
 * of polling 50 ms each. */
Test(ucx, wait_polls_before_sleeping_and_not_when_idle, .timeout = 120)
{
    require_transport();
    ucx_logs_to_stderr();
    cpu_set_t cpus;
    cr_assert_eq(sched_getaffinity(0, sizeof(cpus), &cpus), 0);
    if (CPU_COUNT(&cpus) < 2)
        cr_skip_test("one CPU: wait() never polls there (the peer needs the CPU)");
    char addr[128];
    pid_t pid = fork_server(echo_server, g_echo_spins, 120, addr, sizeof(addr));
    double idle_spin = 0, idle_none = 0;
    double spin = echo_sleeps(addr, g_echo_spins[0], 200, &idle_spin);
    double none = echo_sleeps(addr, g_echo_spins[1], 200, &idle_none);
    dc_config_set("ucx_spin_us", NULL);
    cr_assert_eq(wait_child(pid), 0, "echo server failed");
    cr_log_info("sleeps per round trip: %.2f polling 50 ms, %.2f not polling; CPU of 20 idle "
                "waits: %.1f ms / %.1f ms",
                spin, none, idle_spin * 1e3, idle_none * 1e3);
    cr_assert_geq(none, 0.5, "without polling a round trip sleeps (%.2f)", none);
    cr_assert_lt(spin, 0.5, "polling 50 ms still slept %.2f times per round trip", spin);
    /* 20 x 50 ms of polling would be 1 s: only the first idle wait polls */
    cr_assert_lt(idle_spin, 0.2, "20 idle waits used %.1f ms of CPU", idle_spin * 1e3);
}

/* fd() as the engine uses it (progress, fd(), poll): on an idle connection
 * the fd is not readable, so poll() sleeps; when a message arrives it wakes
 * the poll at once.  (Unarmed, UCX's event fd stayed readable for good and
 * such a loop never slept.) */
Test(ucx, fd_sleeps_when_idle_and_wakes_on_a_message, .timeout = 60)
{
    require_transport();
    ucx_logs_to_stderr();
    static const char *const spins[] = {"0", NULL};
    const dc_verbs_ops_t *t;
    dc_verbs_conn_t *c = NULL;
    pid_t pid = fork_and_connect(echo_server, spins, 60, "echo", &t, &c);
    dc_verbs_stats_t st = {.size = sizeof(st)};
    cr_assert_eq(t->stats(c, &st), DC_OK);
    cr_assert(st.device[0] && strstr(st.device, "tcp/"), "device %s", st.device);
    cr_assert_str_eq(st.path_note, "", "no RDMA on this machine, nothing left unused");
    int woke_idle = 0, timeouts = 0;
    static uint8_t out[ECHO_MAX], in[ECHO_MAX];
    for (int round = 0; round < 20; round++) {
        /* 1 byte (eager) and 2 MiB (rendezvous pieces) in turn */
        size_t n = round % 2 ? ECHO_MAX : 1;
        memset(out, round + 1, n);
        memset(in, 0, n);
        /* the engine's loop: post, then progress / fd() / poll until done */
        dc_verbs_req_t *rq, *sq;
        cr_assert_eq(t->irecv(c, in, n, NULL, &rq), DC_OK, "%s", dc_last_error());
        cr_assert_eq(t->isend(c, out, n, NULL, &sq), DC_OK, "%s", dc_last_error());
        int rdone = 0, sdone = 0;
        size_t len = 0;
        double t0 = dc_now_s();
        while (!rdone || !sdone) {
            if (!sdone)
                cr_assert_eq(t->test(sq, &sdone, NULL), DC_OK, "%s", dc_last_error());
            if (!rdone)
                cr_assert_eq(t->test(rq, &rdone, &len), DC_OK, "%s", dc_last_error());
            if (rdone && sdone)
                break;
            struct pollfd pfd = {.fd = t->fd(c), .events = POLLIN};
            cr_assert_geq(pfd.fd, 0);
            if (poll(&pfd, 1, 3000) == 0)
                timeouts++;
            cr_assert_lt(dc_now_s() - t0, 10.0, "round %d never completed", round);
        }
        cr_assert(len == n && memcmp(in, out, n) == 0, "round %d: echo differs", round);
        /* now idle: the fd must let a poll sleep */
        cr_assert_eq(t->progress(c), DC_OK, "%s", dc_last_error());
        struct pollfd pfd = {.fd = t->fd(c), .events = POLLIN};
        if (poll(&pfd, 1, 20) > 0) {
            woke_idle++;
            cr_assert_eq(t->progress(c), DC_OK, "%s", dc_last_error());
        }
    }
    cr_log_info("idle polls woken: %d of 20; message polls that timed out: %d", woke_idle,
                timeouts);
    /* a stray event (e.g. a late completion) may wake one idle poll */
    cr_assert_leq(woke_idle, 3, "%d of 20 polls on an idle connection returned at once",
                  woke_idle);
    cr_assert_eq(timeouts, 0, "%d polls slept through a message (3 s each)", timeouts);
    uint8_t zero = 0;
    cr_assert_eq(dc_verbs_send_blocking(c, &zero, 1, 20000), DC_OK, "%s", dc_last_error());
    t->close(c);
    cr_assert_eq(wait_child(pid), 0, "echo server failed");
}

/* A UCX that picks TCP although the node has RDMA says so (ucx.h): the
 * RDMA resources are read from ucp_context_print_info()'s text, and a
 * connection none of whose lanes is RDMA or node-local gets a path note. */
Test(ucx, rdma_left_unused_is_reported)
{
    static const char info[] =
        "#\n# UCP context\n#\n#     component 4  :  ib\n"
        "#            md 4  :  component 4  mlx5_0 \n"
        "#      resource 0  :  md 0  dev 0  flags -- self/memory0\n"
        "#      resource 1  :  md 1  dev 1  flags -- tcp/eth0\n"
        "#      resource 2  :  md 4  dev 2  flags -- rc_mlx5/mlx5_0:1\n"
        "#      resource 3  :  md 4  dev 2  flags -- ud_verbs/mlx5_0:1\n"
        "#      resource 4  :  md 5  dev 3  flags -- dc_mlx5/mlx5_1:1\n"
        "#      resource 5  :  md 3  dev 4  flags -- posix/memory\n"
        "#      resource 6  :  md 6  dev 5  flags -- srd/rdmap0s6\n"
        "#      resource 7  :  no dash here rc_x/y\n"
        "#      resource 8  :  flags -- rcnoslash\n";
    char res[256];
    cr_assert_eq(dc_ucx_rdma_resources(info, res, sizeof(res)), DC_OK);
    cr_assert_str_eq(res, "rc_mlx5/mlx5_0:1,ud_verbs/mlx5_0:1,dc_mlx5/mlx5_1:1,srd/rdmap0s6");
    /* a short buffer keeps whole entries that fit, NUL-terminated */
    char small[24];
    memset(small, 'x', sizeof(small));
    cr_assert_eq(dc_ucx_rdma_resources(info, small, sizeof(small)), DC_OK);
    cr_assert_str_eq(small, "rc_mlx5/mlx5_0:1");
    cr_assert_eq(dc_ucx_rdma_resources("", res, sizeof(res)), DC_OK);
    cr_assert_str_eq(res, "");
    cr_assert_eq(dc_ucx_rdma_resources(info, NULL, 0), DC_ERR_INVALID);
    cr_assert_eq(dc_ucx_rdma_resources(info, res, sizeof(res)), DC_OK);
    /* their devices, each once, whole entries only */
    char devs[64];
    dc_ucx_rdma_devices(res, devs, sizeof(devs));
    cr_assert_str_eq(devs, "mlx5_0:1,mlx5_1:1,rdmap0s6");
    dc_ucx_rdma_devices(res, devs, 12);
    cr_assert_str_eq(devs, "mlx5_0:1");
    dc_ucx_rdma_devices("", devs, sizeof(devs));
    cr_assert_str_eq(devs, "");

    char note[512];
    const char *n = dc_ucx_rdma_unused("tcp/eth0,tcp/ib0", res, note, sizeof(note));
    cr_assert(n == note);
    cr_assert(strstr(note, "over tcp/eth0,tcp/ib0") && strstr(note, "rc_mlx5/mlx5_0:1") &&
                  strstr(note, "UCX_TLS"),
              "%s", note);
    cr_assert_null(dc_ucx_rdma_unused("rc_mlx5/mlx5_0:1,tcp/eth0", res, note, sizeof(note)));
    cr_assert_null(dc_ucx_rdma_unused("tcp/eth0,dc_mlx5/mlx5_1:1", res, note, sizeof(note)));
    cr_assert_null(dc_ucx_rdma_unused("posix/memory,cma/memory", res, note, sizeof(note)),
                   "a peer on this node is reached without RDMA, rightly");
    cr_assert_null(dc_ucx_rdma_unused("tcp/eth0", "", note, sizeof(note)), "no RDMA here");
    cr_assert_not_null(dc_ucx_rdma_unused("", res, note, sizeof(note)));
    cr_assert(strstr(note, "no known transport"), "%s", note);
    char tiny[8];
    cr_assert(dc_ucx_rdma_unused("tcp/eth0", res, tiny, sizeof(tiny)) == tiny);
    cr_assert_eq(strlen(tiny), sizeof(tiny) - 1);
    cr_assert_null(dc_ucx_rdma_unused(NULL, res, note, sizeof(note)));
    cr_assert_null(dc_ucx_rdma_unused("tcp/eth0", res, NULL, 0));
}

Test(ucx, receive_buffer_too_small)
{
    require_transport();
    ucx_logs_to_stderr();
    const dc_verbs_ops_t *t;
    dc_verbs_conn_t *c = NULL;
    pid_t pid = fork_and_connect(small_server, NULL, 60, "small", &t, &c);
    static uint8_t msg[150000];
    memset(msg, 0x5a, sizeof(msg));
    cr_assert_eq(dc_verbs_send_blocking(c, msg, 150000, 20000), DC_OK, "%s", dc_last_error());
    cr_assert_eq(dc_verbs_send_blocking(c, msg, 150000, 20000), DC_OK, "%s", dc_last_error());
    dc_verbs_send_blocking(c, "x", 1, 5000);
    t->close(c);
    cr_assert_eq(wait_child(pid), 0, "server side check failed");
}

Test(ucx, connect_to_nothing_fails_cleanly)
{
    require_transport();
    const dc_verbs_ops_t *t;
    cr_assert_eq(dc_verbs_find(g_tname, &t), DC_OK);
    /* Find a port nobody listens on: listen, note the port, close. */
    dc_verbs_opts_t o;
    opts_with_secret(&o, "s", 3000);
    dc_verbs_listener_t *l;
    cr_assert_eq(t->listen(&o, "127.0.0.1:0", &l), DC_OK, "%s", dc_last_error());
    char addr[128];
    cr_assert_eq(t->listen_addr(l, addr, sizeof(addr)), DC_OK);
    t->listen_close(l);
    dc_verbs_conn_t *c = NULL;
    double t0 = dc_now_s();
    dc_status_t st = client_connect(t, addr, "s", &c);
    cr_assert_neq(st, DC_OK);
    cr_assert(st == DC_ERR_RESET || st == DC_ERR_TIMEOUT, "%s", dc_status_name(st));
    cr_assert_lt(dc_now_s() - t0, 10.0);
    cr_assert(strstr(dc_last_error(), "127.0.0.1") != NULL, "%s", dc_last_error());
}

Test(ucx, bad_arguments)
{
    require_transport();
    const dc_verbs_ops_t *t;
    cr_assert_eq(dc_verbs_find(g_tname, &t), DC_OK);
    dc_verbs_opts_t o;
    opts_with_secret(&o, "s", 1000);
    dc_verbs_listener_t *l;
    cr_assert_eq(t->listen(&o, "no-port-here", &l), DC_ERR_INVALID);
    dc_verbs_conn_t *c = NULL;
    cr_assert_eq(t->connect(&o, "127.0.0.1:99999", &c), DC_ERR_INVALID);
    dc_verbs_opts_init(&o); /* no secret anywhere: refused */
    unsetenv("DELTACAST_SECRET");
    unsetenv("DELTACAST_SECRET_FILE");
    cr_assert_eq(t->connect(&o, "127.0.0.1:1", &c), DC_ERR_AUTH);
}
#endif /* DC_TEST_UCX_SLOW */
