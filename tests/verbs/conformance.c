/*
 * conformance.c - the transport contract (verbs/transport.h), checked the
 * same way over every transport.
 *
 * Each case below is one Criterion test per transport, named after it:
 * tcp::CASE, ucx::CASE, rdma::CASE.  One transport's cases run with
 * Criterion's --filter and the pattern "rdma/" plus a star (the C comment
 * cannot spell it), as tests/verbs/rdma_vm_suite.sh does.  A case skips,
 * saying why, where its transport cannot run: not compiled in, its init()
 * refuses (e.g. "no RDMA device"), or, for rdma, no DELTACAST_TEST_RDMA_ADDR
 * (rdma_cm cannot route 127.0.0.1: the address of an interface with an RDMA
 * device; scripts/rdma-vm.sh sets it).  every_listed_transport_is_covered
 * fails when dc_verbs_list() returns a transport this file does not run.
 *
 * Every case runs two real processes: the server is forked before this
 * process makes its first transport call (xfer.h).  What only one transport
 * has (tcp streams and zero-copy, ucx pieces and polling, rdma device
 * choice and GPU memory) lives in test_tcp*.c, test_ucx.c, test_rdma.c.
 */
#include "xfer.h"

#include <ifaddrs.h>
#include <net/if.h>

/* --- one test per transport ---------------------------------------------- */

/* The transports this file runs; dc_verbs_list() must return no other. */
static const char *const g_covered[] = {"tcp", "ucx", "rdma"};

/* Start a case over `name`: skip unless it is compiled in and works here. */
static void conform_begin(const char *name)
{
    const dc_verbs_ops_t *all[8];
    size_t n = dc_verbs_list(all, DC_ARRAY_SIZE(all)), i = 0;
    while (i < n && strcmp(all[i]->name, name) != 0)
        i++;
    if (i == n)
        cr_skip_test("%s: not compiled into this build (dc_verbs_list() does not list it)",
                     name);
    g_tname = name;
    require_transport();
    ucx_logs_to_stderr();
}

/* CONFORM(name, timeout_s) { body }: the body once per transport, each its
 * own test, with g_tname set. */
#define CONFORM(name, tmo)                                                                      \
    static void case_##name(void);                                                              \
    Test(tcp, name, .timeout = (tmo))                                                           \
    {                                                                                           \
        conform_begin("tcp");                                                                   \
        case_##name();                                                                          \
    }                                                                                           \
    Test(ucx, name, .timeout = (tmo))                                                           \
    {                                                                                           \
        conform_begin("ucx");                                                                   \
        case_##name();                                                                          \
    }                                                                                           \
    Test(rdma, name, .timeout = (tmo))                                                          \
    {                                                                                           \
        conform_begin("rdma");                                                                  \
        case_##name();                                                                          \
    }                                                                                           \
    static void case_##name(void)

static int is_rdma(void)
{
    return strcmp(g_tname, "rdma") == 0;
}

static const dc_verbs_ops_t *find_transport(void)
{
    const dc_verbs_ops_t *t = NULL;
    cr_assert_eq(dc_verbs_find(g_tname, &t), DC_OK, "%s", dc_last_error());
    return t;
}

/* Drive one send and one receive to completion (the receive's length in
 * *rlen); fails the test after 20 s. */
static void complete_pair(dc_verbs_conn_t *c, dc_verbs_req_t *sq, dc_verbs_req_t *rq,
                          size_t *rlen)
{
    const dc_verbs_ops_t *t = c->ops;
    int sdone = 0, rdone = 0;
    double t0 = dc_now_s();
    while (!sdone || !rdone) {
        if (!sdone)
            cr_assert_eq(t->test(sq, &sdone, NULL), DC_OK, "send: %s", dc_last_error());
        if (!rdone)
            cr_assert_eq(t->test(rq, &rdone, rlen), DC_OK, "recv: %s", dc_last_error());
        if (!sdone || !rdone)
            t->wait(c, 5);
        cr_assert_lt(dc_now_s() - t0, 20.0, "no completion within 20 s");
    }
}

/* --- servers (children) --------------------------------------------------- */

#define ECHO_CAP (1u << 20)
#define SECRET "conformance-secret"

typedef struct echo_cfg {
    const char *bind; /* NULL: test_listen_addr() */
    int reg;          /* receive into (and echo from) registered host memory */
} echo_cfg_t;

/* Accept one connection and echo every message (0 .. ECHO_CAP bytes) back
 * until a 1-byte message 0.  A bind address the transport refuses with
 * DC_ERR_INVALID or DC_ERR_UNSUPPORTED is reported to the parent as "!",
 * the status name, ": " and the reason. */
static int echo_main(int port_fd, const void *arg)
{
    const echo_cfg_t *cfg = arg;
    const dc_verbs_ops_t *t;
    if (dc_verbs_find(g_tname, &t) != DC_OK)
        return 10;
    dc_verbs_opts_t o;
    opts_with_secret(&o, SECRET, 20000);
    char la[128];
    const char *bind = cfg && cfg->bind ? cfg->bind : test_listen_addr(la, sizeof(la));
    dc_verbs_listener_t *l;
    dc_status_t st = t->listen(&o, bind, &l);
    if (st == DC_ERR_INVALID || st == DC_ERR_UNSUPPORTED) {
        char m[400];
        snprintf(m, sizeof(m), "!%s: %s", dc_status_name(st), dc_last_error());
        return write(port_fd, m, strlen(m) + 1) < 0 ? 12 : 0;
    }
    if (st != DC_OK) {
        fprintf(stderr, "echo: listen %s: %s\n", bind, dc_last_error());
        return 11;
    }
    char addr[128];
    t->listen_addr(l, addr, sizeof(addr));
    if (write(port_fd, addr, strlen(addr) + 1) < 0)
        return 12;
    close(port_fd);
    dc_verbs_conn_t *c = NULL;
    int rc = child_accept(t, l, 30, "echo", &c);
    if (rc)
        return rc;
    static uint8_t buf[ECHO_CAP];
    dc_verbs_mr_t *mr = NULL;
    if (cfg && cfg->reg) {
        st = t->reg_mem(c, buf, sizeof(buf), DC_VERBS_MEM_HOST, &mr);
        if (st != DC_OK && st != DC_ERR_UNSUPPORTED) {
            fprintf(stderr, "echo: reg_mem: %s: %s\n", dc_status_name(st), dc_last_error());
            return 13;
        }
    }
    for (;;) {
        dc_verbs_req_t *rq, *sq;
        int done = 0;
        size_t len = 0;
        if (t->irecv(c, buf, sizeof(buf), mr, &rq) != DC_OK)
            return 14;
        while ((st = t->test(rq, &done, &len)) == DC_OK && !done)
            t->wait(c, 5);
        if (st != DC_OK) {
            fprintf(stderr, "echo: recv: %s\n", dc_last_error());
            return 14;
        }
        if (len == 1 && buf[0] == 0)
            break;
        while ((st = t->isend(c, buf, len, mr, &sq)) == DC_ERR_AGAIN)
            t->wait(c, 5);
        done = 0;
        while (st == DC_OK && (st = t->test(sq, &done, NULL)) == DC_OK && !done)
            t->wait(c, 5);
        if (st != DC_OK) {
            fprintf(stderr, "echo: send: %s\n", dc_last_error());
            return 15;
        }
    }
    if (mr)
        t->dereg_mem(c, mr);
    t->close(c);
    t->listen_close(l);
    return 0;
}

/* Tell the echo server to stop, close, and check that it exited 0. */
static void echo_stop(dc_verbs_conn_t *c, pid_t pid)
{
    uint8_t zero = 0;
    cr_assert_eq(dc_verbs_send_blocking(c, &zero, 1, 20000), DC_OK, "%s", dc_last_error());
    dc_verbs_close(c);
    cr_assert_eq(wait_child(pid), 0, "the echo server reported a failure");
}

/* One round trip of `n` bytes of pattern `seed` through the echo server:
 * the receive is posted first and test() must say "not done" until the
 * message went out (the server echoes only what it received). */
static void echo_round(dc_verbs_conn_t *c, size_t n, uint64_t seed, dc_verbs_mr_t *smr,
                       uint8_t *out, dc_verbs_mr_t *rmr, uint8_t *in)
{
    const dc_verbs_ops_t *t = c->ops;
    fill_random(out, n, seed);
    for (size_t i = n & ~(size_t)7; i < n; i++)
        out[i] = (uint8_t)(seed + i);
    memset(in, 0xee, n + 1);
    dc_verbs_req_t *rq, *sq;
    cr_assert_eq(t->irecv(c, in, n, rmr, &rq), DC_OK, "irecv %zu: %s", n, dc_last_error());
    int done = 1;
    size_t len = 12345;
    cr_assert_eq(t->test(rq, &done, &len), DC_OK, "%s", dc_last_error());
    cr_assert_eq(done, 0, "a receive completed before anything was sent");
    dc_status_t st;
    while ((st = t->isend(c, n ? out : NULL, n, smr, &sq)) == DC_ERR_AGAIN)
        t->wait(c, 5);
    cr_assert_eq(st, DC_OK, "isend %zu: %s", n, dc_last_error());
    complete_pair(c, sq, rq, &len);
    cr_assert_eq(len, n, "echo of %zu bytes came back as %zu", n, len);
    cr_assert(memcmp(in, out, n) == 0, "echo of %zu bytes differs", n);
    cr_assert_eq(in[n], 0xee, "the receive wrote past its message");
}

/* --- cases ---------------------------------------------------------------- */

/* The ops table and caps() as transport.h describes them. */
CONFORM(table_and_caps, 60)
{
    const dc_verbs_ops_t *t = find_transport();
    cr_assert_str_eq(t->name, g_tname);
    cr_assert_eq(t->size, sizeof(dc_verbs_ops_t));
    cr_assert(t->init && t->caps && t->listen && t->listen_addr && t->listen_fd && t->accept &&
              t->listen_close && t->connect && t->connect_test && t->reg_mem && t->dereg_mem &&
              t->isend && t->irecv && t->test && t->progress && t->wait && t->fd && t->stats &&
              t->close && t->isend_crc);
    cr_assert_eq(t->init(), DC_OK, "init() is idempotent: %s", dc_last_error());
    dc_verbs_caps_t caps = {.size = sizeof(caps)};
    cr_assert_eq(t->caps(&caps), DC_OK, "%s", dc_last_error());
    cr_assert(caps.mem_kinds & DC_VERBS_MEM_HOST);
    cr_assert_eq(caps.max_inflight, DC_VERBS_MAX_INFLIGHT);
    cr_assert_geq(caps.max_msg_size, DC_VERBS_DEFAULT_MAX_MSG);
    cr_assert_geq(caps.max_streams, 1);
    cr_assert(caps.device[0] != 0, "caps() names no device");
}

/* Handshake, then messages of many sizes echoed and compared byte for byte:
 * 1 byte, odd, exact-size (the receive buffer is exactly the message, on
 * both sides, up to the server's whole buffer) and empty; test() says "not
 * done" while a receive waits; stats() counts them and names the peer; an
 * oversized isend() is refused; a receive with nothing coming times out. */
CONFORM(send_recv_sizes_exact, 120)
{
    const dc_verbs_ops_t *t;
    dc_verbs_conn_t *c = NULL;
    pid_t pid = fork_and_connect(echo_main, NULL, 60, SECRET, &t, &c);
    static uint8_t out[ECHO_CAP + 1], in[ECHO_CAP + 1];
    static const size_t sizes[] = {1, 13, 4096, 65539, ECHO_CAP, 0, 7};
    for (size_t i = 0; i < DC_ARRAY_SIZE(sizes); i++)
        echo_round(c, sizes[i], 100 + i, NULL, out, NULL, in);
    dc_verbs_stats_t s = {.size = sizeof(s)};
    cr_assert_eq(t->stats(c, &s), DC_OK, "%s", dc_last_error());
    cr_assert_eq(s.msgs_sent, DC_ARRAY_SIZE(sizes));
    cr_assert_eq(s.msgs_recv, DC_ARRAY_SIZE(sizes));
    size_t total = 0;
    for (size_t i = 0; i < DC_ARRAY_SIZE(sizes); i++)
        total += sizes[i];
    cr_assert_eq(s.bytes_sent, total);
    cr_assert_eq(s.bytes_recv, total);
    cr_assert_eq(s.nacks_sent, 0);
    cr_assert(s.peer[0] != 0, "stats() names no peer");
    /* larger than max_msg_size: refused at once, the connection unharmed */
    size_t big = DC_VERBS_DEFAULT_MAX_MSG + 1;
    uint8_t *huge = malloc(big);
    cr_assert_not_null(huge);
    dc_verbs_req_t *r = NULL;
    cr_assert_eq(t->isend(c, huge, big, NULL, &r), DC_ERR_INVALID, "an isend() of %zu bytes",
                 big);
    free(huge);
    echo_round(c, 100, 9, NULL, out, NULL, in);
    /* nothing comes: a blocking receive times out, saying so */
    double t0 = dc_now_s();
    size_t len = 0;
    cr_assert_eq(dc_verbs_recv_blocking(c, in, 16, &len, 200), DC_ERR_TIMEOUT);
    cr_assert(strstr(dc_last_error(), "within 200 ms"), "%s", dc_last_error());
    cr_assert_lt(dc_now_s() - t0, 5.0);
    echo_stop(c, pid);
}

/* Messages sent from and received into registered host memory (reg_mem;
 * a transport may decline host registrations with DC_ERR_UNSUPPORTED,
 * then a NULL mr is used, as the contract allows). */
CONFORM(registered_memory_exact, 120)
{
    const dc_verbs_ops_t *t;
    dc_verbs_conn_t *c = NULL;
    echo_cfg_t cfg = {.reg = 1};
    pid_t pid = fork_and_connect(echo_main, &cfg, 60, SECRET, &t, &c);
    static uint8_t out[ECHO_CAP + 1], in[ECHO_CAP + 1];
    dc_verbs_mr_t *smr = NULL, *rmr = NULL;
    dc_status_t st = t->reg_mem(c, out, sizeof(out), DC_VERBS_MEM_HOST, &smr);
    cr_assert(st == DC_OK || st == DC_ERR_UNSUPPORTED, "reg_mem: %s: %s", dc_status_name(st),
              dc_last_error());
    if (st == DC_OK)
        cr_assert_eq(t->reg_mem(c, in, sizeof(in), DC_VERBS_MEM_HOST, &rmr), DC_OK, "%s",
                     dc_last_error());
    else
        cr_log_info("%s declines host registrations: %s", g_tname, dc_last_error());
    static const size_t sizes[] = {ECHO_CAP, 1, 300000, 4097};
    for (size_t i = 0; i < DC_ARRAY_SIZE(sizes); i++)
        echo_round(c, sizes[i], 200 + i, smr, out, rmr, in);
    if (smr)
        t->dereg_mem(c, smr);
    if (rmr)
        t->dereg_mem(c, rmr);
    echo_round(c, 5000, 300, NULL, out, NULL, in); /* unregistered after */
    echo_stop(c, pid);
}

/* 64 MiB in messages of empty, tiny, odd, exactly-the-buffer (4 MiB) and
 * large sizes, 16 in flight, every byte compared by the server. */
CONFORM(transfer_64mib_exact, 600)
{
    run_transfer(64ull << 20, 0);
}

/* The receiver posts its first receives 300 ms late: the first messages
 * arrive before their receives, are held, and are delivered in order. */
CONFORM(receives_posted_late_exact, 600)
{
    g_late_ms = 300;
    run_transfer(24ull << 20, 0);
}

/* As many small messages in flight as the window takes, posted before the
 * receiver posts a receive: isend() refuses (DC_ERR_AGAIN) only when
 * max_inflight are outstanding; test() completes them in order with their
 * lengths; the server checks the order and every byte. */
static const size_t g_small_sizes[] = {4096, 1, 4093, 0, 17, 2048, 4096, 1000};
#define MANY_MSGS 1000
CONFORM(many_messages_in_flight_in_order, 300)
{
    g_sizes = g_small_sizes;
    g_nsizes = DC_ARRAY_SIZE(g_small_sizes);
    g_src = malloc(SRC_SIZE);
    cr_assert_not_null(g_src);
    fill_random(g_src, SRC_SIZE, 4242);
    uint64_t total = 0;
    for (uint64_t i = 0; i < MANY_MSGS; i++)
        total += msg_size(i);
    server_cfg_t cfg = {.secret = SECRET, .total = total, .late_ms = 500};
    char addr[128];
    pid_t pid = start_server(&cfg, addr, sizeof(addr));
    const dc_verbs_ops_t *t = find_transport();
    dc_verbs_conn_t *c = NULL;
    cr_assert_eq(client_connect(t, addr, SECRET, &c), DC_OK, "%s", dc_last_error());
    static dc_verbs_req_t *reqs[MANY_MSGS];
    uint64_t posted = 0, done = 0, first_again = 0;
    while (done < MANY_MSGS) {
        while (posted < MANY_MSGS) {
            size_t sz = msg_size(posted);
            dc_status_t st = t->isend(c, g_src + msg_off(posted, sz), sz, NULL, &reqs[posted]);
            if (st == DC_ERR_AGAIN) {
                if (!first_again)
                    first_again = posted;
                cr_assert_geq(posted - done, DC_VERBS_MAX_INFLIGHT,
                              "isend() refused with %llu outstanding",
                              (unsigned long long)(posted - done));
                break;
            }
            cr_assert_eq(st, DC_OK, "isend %llu: %s", (unsigned long long)posted,
                         dc_last_error());
            posted++;
        }
        int fin = 0;
        size_t len = 0;
        cr_assert_eq(t->test(reqs[done], &fin, &len), DC_OK, "send %llu: %s",
                     (unsigned long long)done, dc_last_error());
        if (!fin) {
            t->wait(c, 5);
            continue;
        }
        cr_assert_eq(len, msg_size(done), "send %llu completed with length %zu",
                     (unsigned long long)done, len);
        done++;
    }
    cr_log_info("%s: first DC_ERR_AGAIN at %llu in flight", g_tname,
                (unsigned long long)first_again);
    uint64_t reply[4];
    size_t rl = 0;
    cr_assert_eq(dc_verbs_recv_blocking(c, reply, sizeof(reply), &rl, 30000), DC_OK, "%s",
                 dc_last_error());
    cr_assert_eq(rl, sizeof(reply));
    cr_assert_eq(reply[0], 0, "%llu messages differ or came out of order",
                 (unsigned long long)reply[0]);
    cr_assert_eq(reply[2], total);
    dc_verbs_send_blocking(c, "x", 1, 5000);
    t->close(c);
    cr_assert_eq(wait_child(pid), 0, "server reported a failure");
    free(g_src);
}

/* Corruption (fault injector, 30% of received messages): each damaged
 * message is NACKed and re-sent; every byte arrives exactly. */
CONFORM(corruption_is_nacked_and_resent, 600)
{
    run_transfer(24ull << 20, 0.3);
}

/* The caller's CRC32C (isend_crc): exact, no NACK. */
CONFORM(caller_crc_round_trips_exactly, 600)
{
    g_caller_crc = 1;
    run_transfer(24ull << 20, 0);
}

/* A wrong caller CRC32C on every fifth message: NACKed exactly once each,
 * re-sent with the transport's own, delivered exactly (never a loop). */
CONFORM(wrong_caller_crc_nacked_once_then_exact, 600)
{
    g_caller_crc = 2;
    run_transfer(24ull << 20, 0);
}

/* The caller's CRC32C does not stop the receiver from catching damage. */
CONFORM(caller_crc_corruption_still_caught, 600)
{
    g_caller_crc = 1;
    run_transfer(24ull << 20, 0.3);
}

/* Two cuts of the client's link mid-message: the client re-dials, the
 * server's listener re-attaches the session (each exactly twice), and
 * every message arrives exactly once. */
CONFORM(cut_connections_resume_exactly, 600)
{
    run_transfer_cut(48ull << 20, 0, 15000000, 2);
}

/* NACK + re-send and reconnect + resume together. */
CONFORM(cuts_with_corruption_resume_exactly, 600)
{
    run_transfer_cut(32ull << 20, 0.3, 9000000, 3);
}

/* ... and with the caller's CRC32C. */
CONFORM(caller_crc_with_corruption_and_cuts_exact, 600)
{
    g_caller_crc = 1;
    run_transfer_cut(32ull << 20, 0.3, 9000000, 2);
}

/* Receive: an empty message (sent as NULL, 0), then a message larger than
 * the receive buffer (that receive fails with DC_ERR_FORMAT), then the
 * connection keeps working for the next one, every byte checked. */
#define BIG_MSG 150000
static void big_pattern(uint8_t *p)
{
    for (size_t i = 0; i < BIG_MSG; i++)
        p[i] = (uint8_t)(i * 31 + 7);
}

static int small_main(int port_fd, const void *unused)
{
    (void)unused;
    const dc_verbs_ops_t *t;
    dc_verbs_opts_t o;
    opts_with_secret(&o, SECRET, 20000);
    dc_verbs_listener_t *l;
    dc_verbs_conn_t *c = NULL;
    int rc = child_listen_accept(&o, port_fd, 30, "small server", &t, &l, &c);
    if (rc)
        return rc;
    static uint8_t small[100], big[BIG_MSG + 100], want[BIG_MSG];
    size_t len = 99;
    dc_status_t st = dc_verbs_recv_blocking(c, small, sizeof(small), &len, 20000);
    if (st != DC_OK || len != 0) {
        fprintf(stderr, "small server: empty message: %s, %zu bytes\n", dc_status_name(st), len);
        return 14;
    }
    st = dc_verbs_recv_blocking(c, small, sizeof(small), &len, 20000);
    if (st != DC_ERR_FORMAT) {
        fprintf(stderr, "small server: oversized message: %s\n", dc_status_name(st));
        return 15;
    }
    st = dc_verbs_recv_blocking(c, big, sizeof(big), &len, 20000);
    big_pattern(want);
    if (st != DC_OK || len != BIG_MSG || memcmp(big, want, BIG_MSG) != 0) {
        fprintf(stderr, "small server: next message: %s, %zu bytes\n", dc_status_name(st), len);
        return 16;
    }
    uint8_t bye;
    dc_verbs_recv_blocking(c, &bye, 1, &len, 5000);
    t->close(c);
    t->listen_close(l);
    return 0;
}

CONFORM(empty_and_oversized_messages, 120)
{
    const dc_verbs_ops_t *t;
    dc_verbs_conn_t *c = NULL;
    pid_t pid = fork_and_connect(small_main, NULL, 60, SECRET, &t, &c);
    static uint8_t msg[BIG_MSG];
    dc_verbs_req_t *r;
    cr_assert_eq(t->isend(c, NULL, 0, NULL, &r), DC_OK, "%s", dc_last_error());
    int done = 0;
    size_t len = 99;
    dc_status_t st;
    while ((st = t->test(r, &done, &len)) == DC_OK && !done)
        t->wait(c, 5);
    cr_assert_eq(st, DC_OK, "%s", dc_last_error());
    cr_assert_eq(len, 0);
    memset(msg, 0x5a, sizeof(msg));
    cr_assert_eq(dc_verbs_send_blocking(c, msg, BIG_MSG, 20000), DC_OK, "%s", dc_last_error());
    big_pattern(msg);
    cr_assert_eq(dc_verbs_send_blocking(c, msg, BIG_MSG, 20000), DC_OK, "%s", dc_last_error());
    dc_verbs_send_blocking(c, "x", 1, 5000);
    t->close(c);
    cr_assert_eq(wait_child(pid), 0, "server side check failed");
}

/* A wrong secret is refused with DC_ERR_AUTH; peers that send garbage to
 * the listener's port are dropped; the server keeps serving the right
 * peer, whose message arrives exactly. */
CONFORM(wrong_secret_rejected_server_keeps_serving, 120)
{
    g_src = malloc(SRC_SIZE);
    cr_assert_not_null(g_src);
    fill_random(g_src, SRC_SIZE, 42);
    server_cfg_t cfg = {.secret = "right-secret", .total = MSG_MAX};
    char addr[128];
    pid_t pid = start_server(&cfg, addr, sizeof(addr));
    const dc_verbs_ops_t *t = find_transport();
    dc_verbs_conn_t *c = NULL;
    dc_status_t st = client_connect(t, addr, "wrong-secret", &c);
    cr_assert_eq(st, DC_ERR_AUTH, "expected DC_ERR_AUTH, got %s: %s", dc_status_name(st),
                 dc_last_error());
    cr_assert(strstr(dc_last_error(), "authentication") != NULL, "%s", dc_last_error());
    /* Garbage from a raw TCP socket at the listener's port (rdma_cm's
     * port is no TCP socket: nothing to connect to there). */
    char host[64];
    uint16_t port;
    cr_assert_eq(dc_verbs_parse_addr(addr, host, sizeof(host), &port), DC_OK);
    for (int k = 0; k < 3 && !is_rdma(); k++) {
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
    cr_assert_eq(reply[2], MSG_MAX);
    dc_verbs_send_blocking(c, "x", 1, 5000);
    t->close(c);
    cr_assert_eq(wait_child(pid), 0);
    free(g_src);
}

/* Connecting to a port nobody listens on fails within the timeout, with an
 * error that names the address (tcp: DC_ERR_TIMEOUT after timeout_ms). */
CONFORM(connect_to_closed_port_fails_cleanly, 60)
{
    const dc_verbs_ops_t *t = find_transport();
    dc_verbs_opts_t o;
    opts_with_secret(&o, SECRET, 300);
    dc_verbs_listener_t *l;
    char la[128];
    cr_assert_eq(t->listen(&o, test_listen_addr(la, sizeof(la)), &l), DC_OK, "%s",
                 dc_last_error());
    char addr[128], host[64];
    uint16_t port;
    cr_assert_eq(t->listen_addr(l, addr, sizeof(addr)), DC_OK);
    t->listen_close(l);
    cr_assert_eq(dc_verbs_parse_addr(addr, host, sizeof(host), &port), DC_OK);
    dc_verbs_conn_t *c = NULL;
    double t0 = dc_now_s();
    dc_status_t st = t->connect(&o, addr, &c);
    if (st == DC_OK)
        while ((st = t->connect_test(c)) == DC_ERR_AGAIN)
            t->wait(c, 10);
    double took = dc_now_s() - t0;
    cr_assert(st == DC_ERR_RESET || st == DC_ERR_TIMEOUT, "%s: %s", dc_status_name(st),
              dc_last_error());
    cr_assert(strstr(dc_last_error(), host) != NULL, "%s", dc_last_error());
    cr_assert_lt(took, 5.0, "failed after %.2f s", took);
    if (strcmp(g_tname, "tcp") == 0)
        cr_assert_eq(st, DC_ERR_TIMEOUT, "%s", dc_status_name(st));
    dc_verbs_close(c);
}

/* Bad addresses are DC_ERR_INVALID; no secret anywhere is DC_ERR_AUTH. */
CONFORM(bad_arguments, 60)
{
    const dc_verbs_ops_t *t = find_transport();
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

/* A server that takes one message and then vanishes (killed: no BYE). */
static int vanishing_main(int port_fd, const void *unused)
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
    if (dc_verbs_recv_blocking(c, buf, sizeof(buf), &len, 20000) != DC_OK || len != 5 ||
        memcmp(buf, "hello", 5) != 0)
        return 14;
    /* let the ACK leave, then die without closing anything */
    double until = dc_now_s() + 0.3;
    while (dc_now_s() < until)
        t->wait(c, 10);
    raise(SIGKILL);
    return 15;
}

/* The peer dies (no BYE): the connection re-dials until its timeout,
 * counted from the break, then fails saying so: an error, not a hang
 * (ucx: DC_ERR_RESET "... within 1500 ms"; tcp: DC_ERR_TIMEOUT "... within
 * timeout_ms=1500"). */
CONFORM(lost_peer_fails_after_the_recovery_timeout, 120)
{
    char addr[128];
    pid_t pid = fork_server(vanishing_main, NULL, 60, addr, sizeof(addr));
    const dc_verbs_ops_t *t = find_transport();
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
    cr_log_info("%s: send to a dead peer: %s after %.2f s: %s", g_tname, dc_status_name(st),
                took, dc_last_error());
    cr_assert(st == DC_ERR_RESET || st == DC_ERR_TIMEOUT, "%s: %s", dc_status_name(st),
              dc_last_error());
    cr_assert(strstr(dc_last_error(), "1500") != NULL, "the error names no timeout: %s",
              dc_last_error());
    if (strcmp(g_tname, "ucx") == 0) {
        cr_assert_eq(st, DC_ERR_RESET);
        /* (or, when the deadline falls inside a re-dial's handshake,
         * "handshake not completed within": the same deadline either way) */
        cr_assert(strstr(dc_last_error(), "within 1500 ms") != NULL, "%s", dc_last_error());
    }
    cr_assert(took >= 1.0 && took < 20.0, "failed after %.2f s", took);
    t->close(c);
}

/* Child: accept one connection, receive one message (so that the client's
 * connect completed before the close), close it (BYE), exit 0. */
static int close_main(int port_fd, const void *unused)
{
    (void)unused;
    const dc_verbs_ops_t *t;
    dc_verbs_opts_t o;
    opts_with_secret(&o, "test-secret-close", 20000);
    dc_verbs_listener_t *l;
    dc_verbs_conn_t *c = NULL;
    int rc = child_listen_accept(&o, port_fd, 30, "close server", &t, &l, &c);
    if (rc)
        return rc;
    uint8_t go;
    size_t gl = 0;
    if (dc_verbs_recv_blocking(c, &go, 1, &gl, 20000) != DC_OK || gl != 1 || go != 'g') {
        fprintf(stderr, "close server: recv: %s\n", dc_last_error());
        return 14;
    }
    t->close(c);
    t->listen_close(l);
    return 0;
}

/* The peer closes in order: the next receive fails at once with
 * DC_ERR_RESET, it is not taken for a broken link and re-dialed. */
CONFORM(orderly_close_is_final_not_redialed, 120)
{
    const dc_verbs_ops_t *t;
    dc_verbs_conn_t *c = NULL;
    pid_t pid = fork_and_connect(close_main, NULL, 120, "test-secret-close", &t, &c);
    /* ACKed, hence received: the server closes right after it. */
    cr_assert_eq(dc_verbs_send_blocking(c, "g", 1, 20000), DC_OK, "%s", dc_last_error());
    /* client_connect gives the connection timeout_ms = 10000: taking the
     * close for a broken link would re-dial for 10 s and then fail. */
    double t0 = dc_now_s();
    uint8_t b;
    size_t bl = 0;
    dc_status_t st = dc_verbs_recv_blocking(c, &b, 1, &bl, 30000);
    double dt = dc_now_s() - t0;
    cr_log_info("%s: receive after the peer's close: %s after %.2f s (%s)", g_tname,
                dc_status_name(st), dt, st == DC_OK ? "" : dc_last_error());
    cr_assert_eq(st, DC_ERR_RESET, "got %s: %s", dc_status_name(st), dc_last_error());
    cr_assert_lt(dt, 5.0,
                 "the close took %.1f s to be noticed: it was taken for a broken link "
                 "and re-dialed",
                 dt);
    dc_verbs_stats_t s = {.size = sizeof(s)};
    cr_assert_eq(t->stats(c, &s), DC_OK);
    cr_assert_eq(s.reconnects, 0);
    t->close(c);
    cr_assert_eq(wait_child(pid), 0, "server reported a failure");
}

/* Address forms: "[::1]:0" (IPv6 loopback) must work, except over ucx,
 * which refuses it clearly (see below); "*:0" (every interface) works or is
 * refused with DC_ERR_INVALID, never anything else (tcp: it must work).
 * rdma listens on its device's address only.  Returns 0, or 1 if the
 * listen was refused (allowed only without `must`). */
static int address_form(const char *bind, int must)
{
    echo_cfg_t cfg = {.bind = bind};
    char addr[512];
    pid_t pid = fork_server(echo_main, &cfg, 60, addr, sizeof(addr));
    if (addr[0] == '!') {
        cr_assert_eq(wait_child(pid), 0);
        cr_assert(!must, "%s: listen %s refused: %s", g_tname, bind, addr + 1);
        cr_log_info("%s: listen %s refused: %s", g_tname, bind, addr + 1);
        if (strcmp(g_tname, "ucx") == 0 && strcmp(bind, "[::1]:0") == 0)
            cr_assert(strstr(addr, "DC_ERR_UNSUPPORTED: ") && strstr(addr, "IPv6 loopback"),
                      "ucx: listen %s: want DC_ERR_UNSUPPORTED, saying IPv6 loopback: %s", bind,
                      addr + 1);
        else
            cr_assert(strncmp(addr, "!DC_ERR_INVALID: ", 17) == 0,
                      "%s: listen %s: want DC_ERR_INVALID: %s", g_tname, bind, addr + 1);
        return 1;
    }
    char host[64], dial[sizeof(addr)];
    uint16_t port;
    cr_assert_eq(dc_verbs_parse_addr(addr, host, sizeof(host), &port), DC_OK, "%s", addr);
    cr_assert_gt(port, 0, "listen_addr() gave no real port: %s", addr);
    if (strcmp(host, "*") == 0 || strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0)
        snprintf(dial, sizeof(dial), "127.0.0.1:%u", port);
    else
        snprintf(dial, sizeof(dial), "%s", addr);
    const dc_verbs_ops_t *t = find_transport();
    dc_verbs_conn_t *c = NULL;
    cr_assert_eq(client_connect(t, dial, SECRET, &c), DC_OK, "listen %s, dial %s: %s", bind, dial,
                 dc_last_error());
    static uint8_t out[ECHO_CAP + 1], in[ECHO_CAP + 1];
    echo_round(c, 70000, port, NULL, out, NULL, in);
    echo_stop(c, pid);
    return 0;
}

CONFORM(address_forms, 120)
{
    if (is_rdma())
        cr_skip_test("rdma: rdma_cm listens on an RDMA interface's address only "
                     "(DELTACAST_TEST_RDMA_ADDR); loopback and wildcard forms do not apply");
    int ucx = strcmp(g_tname, "ucx") == 0;
    /* ucx: UCX 1.13 has no IPv6 tcp device on the loopback interface: a
     * connection over [::1] cannot come up (before, the listener process
     * aborted in free()); listen and connect refuse it, saying why. */
    cr_assert_eq(address_form("[::1]:0", !ucx), ucx, "ucx: listen [::1]:0 was not refused");
    address_form("*:0", strcmp(g_tname, "tcp") == 0);
    if (ucx) {
        const dc_verbs_ops_t *t = find_transport();
        dc_verbs_conn_t *c = NULL;
        dc_status_t st = client_connect(t, "[::1]:9", SECRET, &c);
        cr_assert_eq(st, DC_ERR_UNSUPPORTED, "ucx: connect [::1]:9: %s: %s",
                     dc_status_name(st), dc_last_error());
        cr_assert(strstr(dc_last_error(), "IPv6 loopback"), "%s", dc_last_error());
    }
}

/* A non-loopback IPv6 address of this host (an interface that is up), as
 * "[V6]" into buf: 0, or -1 if there is none. */
static int global_ipv6(char *buf, size_t len)
{
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0)
        return -1;
    int rc = -1;
    for (struct ifaddrs *i = ifs; i && rc; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET6 || !(i->ifa_flags & IFF_UP) ||
            (i->ifa_flags & IFF_LOOPBACK))
            continue;
        const struct in6_addr *a = &((const struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
        char h[INET6_ADDRSTRLEN];
        if (IN6_IS_ADDR_LINKLOCAL(a) || IN6_IS_ADDR_LOOPBACK(a) ||
            !inet_ntop(AF_INET6, a, h, sizeof(h)))
            continue;
        snprintf(buf, len, "[%s]", h);
        rc = 0;
    }
    freeifaddrs(ifs);
    return rc;
}

/* Regression (ucx): a listener on the IPv6 wildcard, dialed over IPv6.
 * UCX 1.13's accepting worker stored the client's IPv6 address in a tcp
 * interface built for IPv4: the connection failed and the listener process
 * aborted in free().  Here a dial that may fail (IPv4 to an IPv6 listener:
 * ucx cannot) must leave the listener alive, and a dial over this host's
 * non-loopback IPv6 address (if it has one) must then work. */
CONFORM(ipv6_listener_survives_a_failed_connect, 120)
{
    if (is_rdma())
        cr_skip_test("rdma: rdma_cm listens on an RDMA interface's address only");
    echo_cfg_t cfg = {.bind = "[::]:0"};
    char addr[512];
    pid_t pid = fork_server(echo_main, &cfg, 60, addr, sizeof(addr));
    if (addr[0] == '!') {
        cr_assert_eq(wait_child(pid), 0);
        cr_skip_test("%s: listen [::]:0 refused: %s", g_tname, addr + 1);
    }
    char host[64], dial[128], v6[80];
    uint16_t port;
    cr_assert_eq(dc_verbs_parse_addr(addr, host, sizeof(host), &port), DC_OK, "%s", addr);
    const dc_verbs_ops_t *t = find_transport();
    static uint8_t out[ECHO_CAP + 1], in[ECHO_CAP + 1];
    dc_verbs_conn_t *c = NULL;
    snprintf(dial, sizeof(dial), "127.0.0.1:%u", port);
    dc_status_t st = client_connect(t, dial, SECRET, &c);
    cr_log_info("%s: dial %s (IPv4 to the IPv6 wildcard): %s", g_tname, dial,
                st == DC_OK ? "connected" : dc_last_error());
    if (st != DC_OK && global_ipv6(v6, sizeof(v6)) == 0) {
        snprintf(dial, sizeof(dial), "%s:%u", v6, port);
        st = client_connect(t, dial, SECRET, &c);
        cr_assert_eq(st, DC_OK, "%s: dial %s after a failed dial: %s", g_tname, dial,
                     dc_last_error());
    }
    if (st == DC_OK) {
        echo_round(c, 70000, port, NULL, out, NULL, in);
        echo_stop(c, pid);
        return;
    }
    /* No IPv6 address to dial: the listener must still be there. */
    cr_log_info("%s: no non-loopback IPv6 address here: only checking that the listener "
                "survived",
                g_tname);
    usleep(500 * 1000);
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, WNOHANG), 0, "the listener exited (%s %d)",
                 WIFSIGNALED(status) ? "signal" : "status",
                 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    kill(pid, SIGKILL);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
}

/* --- transport-independent: the registry and the shared wire helpers ------ */

Test(conform, every_listed_transport_is_covered)
{
    const dc_verbs_ops_t *all[8];
    size_t n = dc_verbs_list(all, DC_ARRAY_SIZE(all));
    cr_assert_geq(n, 1);
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        while (k < DC_ARRAY_SIZE(g_covered) && strcmp(all[i]->name, g_covered[k]) != 0)
            k++;
        cr_assert_lt(k, DC_ARRAY_SIZE(g_covered),
                     "transport %s is listed but conformance.c does not run it: add it to "
                     "CONFORM() and g_covered",
                     all[i]->name);
    }
}

Test(conform, registry_and_auto_policy)
{
    const dc_verbs_ops_t *all[8];
    size_t n = dc_verbs_list(all, 8);
    cr_assert_geq(n, 1);
    cr_assert_str_eq(all[n - 1]->name, "tcp");
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(all[i]->size, sizeof(dc_verbs_ops_t));
    const dc_verbs_ops_t *t;
    char why[512];
    cr_assert_eq(dc_verbs_select("tcp", &t, why, sizeof(why)), DC_OK);
    cr_assert_str_eq(t->name, "tcp");
    cr_assert(strstr(why, "explicit"));
    cr_assert_eq(dc_verbs_select("auto", &t, why, sizeof(why)), DC_OK);
    cr_assert(strstr(why, t->name), "why must name the choice: %s", why);
    cr_assert_eq(dc_verbs_select("carrier-pigeon", &t, why, sizeof(why)), DC_ERR_NOT_FOUND);
}

Test(conform, parse_addr)
{
    char h[64];
    uint16_t p;
    cr_assert_eq(dc_verbs_parse_addr("127.0.0.1:80", h, sizeof(h), &p), DC_OK);
    cr_assert_str_eq(h, "127.0.0.1");
    cr_assert_eq(p, 80);
    cr_assert_eq(dc_verbs_parse_addr("[::1]:9", h, sizeof(h), &p), DC_OK);
    cr_assert_str_eq(h, "::1");
    cr_assert_eq(p, 9);
    cr_assert_eq(dc_verbs_parse_addr("*:7400", h, sizeof(h), &p), DC_OK);
    cr_assert_str_eq(h, "*");
    cr_assert_eq(p, 7400);
    cr_assert_neq(dc_verbs_parse_addr("nohost", h, sizeof(h), &p), DC_OK);
    cr_assert_neq(dc_verbs_parse_addr("a:70000", h, sizeof(h), &p), DC_OK);
    cr_assert_neq(dc_verbs_parse_addr(":1", h, sizeof(h), &p), DC_OK);
}

Test(conform, header_pack_roundtrip_and_damage)
{
    dc_verbs_hdr_t h = {.type = DC_VERBS_MSG_DATA, .stream = 3, .seq = 1234567, .len = 999,
                        .crc = 0xdeadbeef}, g;
    uint8_t b[DC_VERBS_HDR_SIZE];
    dc_verbs_hdr_pack(&h, b);
    cr_assert_eq(dc_verbs_hdr_unpack(b, 1000, &g), DC_OK);
    cr_assert_eq(g.seq, h.seq);
    cr_assert_eq(g.len, 999);
    cr_assert_eq(dc_verbs_hdr_unpack(b, 998, &g), DC_ERR_FORMAT);
    for (int i = 0; i < 28; i++) {
        uint8_t d[DC_VERBS_HDR_SIZE];
        memcpy(d, b, sizeof(d));
        d[i] ^= 0x10;
        cr_assert_neq(dc_verbs_hdr_unpack(d, 1000, &g), DC_OK, "flip at byte %d accepted", i);
    }
    /* flags: TRAILER or MSGCRC on DATA, never both, none on control */
    static const struct {
        uint8_t type, flags;
        dc_status_t want;
    } F[] = {{DC_VERBS_MSG_DATA, DC_VERBS_HDR_F_TRAILER, DC_OK},
             {DC_VERBS_MSG_DATA, DC_VERBS_HDR_F_MSGCRC, DC_OK},
             {DC_VERBS_MSG_DATA, DC_VERBS_HDR_F_TRAILER | DC_VERBS_HDR_F_MSGCRC, DC_ERR_FORMAT},
             {DC_VERBS_MSG_DATA, 0x04, DC_ERR_FORMAT},
             {DC_VERBS_MSG_ACK, DC_VERBS_HDR_F_MSGCRC, DC_ERR_FORMAT}};
    for (size_t i = 0; i < DC_ARRAY_SIZE(F); i++) {
        dc_verbs_hdr_t f = {.type = F[i].type, .flags = F[i].flags, .seq = 5,
                            .len = F[i].type == DC_VERBS_MSG_DATA ? 10 : 0};
        dc_verbs_hdr_pack(&f, b);
        cr_assert_eq(dc_verbs_hdr_unpack(b, 1000, &g), F[i].want, "case %zu", i);
        if (F[i].want == DC_OK)
            cr_assert_eq(g.flags, F[i].flags);
    }
}

Test(conform, window)
{
    dc_verbs_window_t w;
    dc_verbs_window_init(&w);
    int items[DC_VERBS_MAX_INFLIGHT];
    uint64_t seq;
    for (int i = 0; i < DC_VERBS_MAX_INFLIGHT; i++) {
        cr_assert_eq(dc_verbs_window_push(&w, &items[i], &seq), DC_OK);
        cr_assert_eq(seq, (uint64_t)i);
    }
    cr_assert_eq(dc_verbs_window_push(&w, &items[0], &seq), DC_ERR_AGAIN);
    cr_assert_eq(dc_verbs_window_ack(&w, 5), &items[5]);
    cr_assert_null(dc_verbs_window_ack(&w, 5));
    cr_assert_eq(w.base, 0);
    cr_assert_eq(dc_verbs_window_push(&w, &items[0], &seq), DC_ERR_AGAIN);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(dc_verbs_window_ack(&w, (uint64_t)i), &items[i]);
    cr_assert_eq(w.base, 6);
    cr_assert_null(dc_verbs_window_get(&w, 3));
    cr_assert_eq(dc_verbs_window_get(&w, 6), &items[6]);
}
