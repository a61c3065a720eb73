/* test_tcp_hostile.c - a peer that KNOWS the job secret and then speaks
 * the tcp transport's wire badly: bad stream parameters in its proof,
 * headers with a valid checksum but impossible fields, a damaged header,
 * floods of ACK / NACK for messages that were never sent, the same damaged
 * DATA again and again, a stream of a session claimed twice.  A real `deltacast perf link --server`
 * must drop or survive each one with a logged reason and keep serving:
 * a correct client moves verified data before and after. */
#include "proc.h"
#include "verbs/auth.h"
#include "verbs/transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#define SECRET "hostile-peer-secret"

/* the handshake of verbs/tcp.c */
#define HS_MAGIC 0x48544344u /* "DCTH" */
#define HS_OK_ACCEPT 0u
#define HS_OK_BAD 4u

static int raw_connect(const char *addr)
{
    char host[64];
    uint16_t port;
    cr_assert_eq(dc_verbs_parse_addr(addr, host, sizeof(host), &port), DC_OK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, host, &sa.sin_addr);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

typedef struct {
    uint64_t session;
    uint32_t epoch;
    uint16_t idx, k;
    uint32_t max_msg;
    uint64_t rbase;
} proof_t;

/* HELLO, check the server's proof, send ours with `p`'s stream parameters;
 * returns the socket and *code = the server's reply code. */
static int raw_auth(const char *addr, const proof_t *p, uint32_t *code)
{
    int fd = raw_connect(addr);
    uint8_t hello[40], chal[72], proof[64], ok[24];
    dc_store_le32(hello, HS_MAGIC);
    dc_store_le32(hello + 4, 1);
    uint8_t *nc = hello + 8;
    cr_assert_eq(dc_auth_nonce(nc), DC_OK);
    cr_assert_eq(dc_write_full(fd, hello, sizeof(hello)), DC_OK);
    cr_assert_eq(dc_read_full(fd, chal, sizeof(chal)), DC_OK, "no challenge");
    cr_assert_eq(dc_load_le32(chal), HS_MAGIC);
    const uint8_t *ns = chal + 8;
    cr_assert_eq(dc_auth_verify((const uint8_t *)SECRET, strlen(SECRET), 'S', nc, ns, chal + 40,
                                "server"),
                 DC_OK, "the server's proof does not verify");
    cr_assert_eq(dc_auth_mac((const uint8_t *)SECRET, strlen(SECRET), 'C', nc, ns, proof), DC_OK);
    dc_store_le64(proof + 32, p->session);
    dc_store_le32(proof + 40, p->epoch);
    dc_store_le16(proof + 44, p->idx);
    dc_store_le16(proof + 46, p->k);
    dc_store_le32(proof + 48, p->max_msg);
    dc_store_le32(proof + 52, 0);
    dc_store_le64(proof + 56, p->rbase);
    cr_assert_eq(dc_write_full(fd, proof, sizeof(proof)), DC_OK);
    cr_assert_eq(dc_read_full(fd, ok, sizeof(ok)), DC_OK, "no handshake reply");
    cr_assert_eq(dc_load_le32(ok), HS_MAGIC);
    *code = dc_load_le32(ok + 4);
    return fd;
}

static int raw_session(const char *addr, uint64_t session)
{
    proof_t p = {.session = session, .k = 1, .max_msg = 1u << 20};
    uint32_t code;
    int fd = raw_auth(addr, &p, &code);
    cr_assert_eq(code, HS_OK_ACCEPT, "session %llx refused (code %u)",
                 (unsigned long long)session, code);
    return fd;
}

static void send_hdr(int fd, uint8_t type, uint8_t flags, uint64_t seq, uint32_t len,
                     uint32_t crc)
{
    dc_verbs_hdr_t h = {.type = type, .flags = flags, .seq = seq, .len = len, .crc = crc};
    uint8_t b[DC_VERBS_HDR_SIZE];
    dc_verbs_hdr_pack(&h, b);
    /* the peer may have dropped us already: EPIPE is an answer too */
    (void)send(fd, b, sizeof(b), MSG_NOSIGNAL);
}

/* Read transport headers from fd for up to `ms` until one of `type` for
 * `seq` arrives (1), or EOF / timeout (0). */
static int expect_hdr(int fd, uint8_t type, uint64_t seq, int ms)
{
    uint8_t b[DC_VERBS_HDR_SIZE];
    size_t have = 0;
    double end = dc_now_s() + ms / 1000.0;
    while (dc_now_s() < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        ssize_t n = recv(fd, b + have, sizeof(b) - have, 0);
        if (n <= 0)
            return 0;
        have += (size_t)n;
        if (have < sizeof(b))
            continue;
        have = 0;
        dc_verbs_hdr_t h;
        if (dc_verbs_hdr_unpack(b, UINT32_MAX, &h) == DC_OK && h.type == type && h.seq == seq)
            return 1;
    }
    return 0;
}

/* 1 once the server closed fd (EOF or reset) within `s` seconds. */
static int closed_by_peer(int fd, double s)
{
    double end = dc_now_s() + s;
    uint8_t b[256];
    while (dc_now_s() < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            return 1;
    }
    return 0;
}

static int good_client(const char *addr, const char *log)
{
    char *argv[] = {(char *)proc_bin(), "perf", "link", "--client", (char *)addr, "--transport",
                    "tcp", "--streams", "2", "--size", "256KiB", "--bytes", "8MiB", "--verify",
                    "--lat-iters", "10", NULL};
    const char *env[] = {"DELTACAST_SECRET=" SECRET, NULL};
    return proc_wait(proc_spawn(argv, env, log), 60);
}

Test(tcp_hostile, authenticated_peer_speaking_bad_wire_is_dropped_and_server_keeps_serving,
     .timeout = 120)
{
    const char *senv[] = {"DELTACAST_SECRET=" SECRET, "DELTACAST_TIMEOUT_MS=1500",
                          "DELTACAST_LOG=debug", NULL};
    proc_pl_server_t S;
    proc_pl_server_start(&S, "tcph", senv, false);
    char clog[256];
    proc_pl_path(&S, "client.log", clog, sizeof(clog));
    char *addr = S.addr;
    const char *slog = S.log;
    pid_t srv = S.pid;
    cr_assert_eq(good_client(addr, clog), 0, "first good client failed (see %s)", clog);

    /* 1. bad stream parameters in an authenticated proof: refused, code BAD */
    static const proof_t bad[] = {
        {.session = 0x1001, .k = 0, .max_msg = 1u << 20},       /* no streams */
        {.session = 0x1002, .idx = 3, .k = 2, .max_msg = 1u << 20}, /* index >= count */
        {.session = 0x1003, .k = 65, .max_msg = 1u << 20},      /* too many streams */
        {.session = 0x1004, .k = 1, .max_msg = 0},              /* no message fits */
        {.session = 0x1005, .epoch = 7, .k = 1, .max_msg = 1u << 20}, /* unknown session */
    };
    for (size_t i = 0; i < DC_ARRAY_SIZE(bad); i++) {
        uint32_t code;
        int fd = raw_auth(addr, &bad[i], &code);
        cr_assert_neq(code, HS_OK_ACCEPT, "bad proof %zu accepted", i);
        close(fd);
    }

    /* 2. a DATA header far beyond the receive window: dropped */
    int fd = raw_session(addr, 0x2001);
    send_hdr(fd, DC_VERBS_MSG_DATA, DC_VERBS_HDR_F_TRAILER, 1ull << 40, 16, 0);
    cr_assert(closed_by_peer(fd, 10), "a seq beyond the window did not close the link");
    close(fd);

    /* 3. a DATA header longer than the negotiated maximum: dropped */
    fd = raw_session(addr, 0x2002);
    send_hdr(fd, DC_VERBS_MSG_DATA, DC_VERBS_HDR_F_TRAILER, 0, (1u << 20) + 1, 0);
    cr_assert(closed_by_peer(fd, 10), "an over-long message did not close the link");
    close(fd);

    /* 4. a damaged header (checksum): the stream breaks; the session is
     *    given up once no re-dial comes within the timeout */
    fd = raw_session(addr, 0x2003);
    {
        dc_verbs_hdr_t h = {.type = DC_VERBS_MSG_PING};
        uint8_t b[DC_VERBS_HDR_SIZE];
        dc_verbs_hdr_pack(&h, b);
        b[9] ^= 0x40;
        (void)send(fd, b, sizeof(b), MSG_NOSIGNAL);
    }
    cr_assert(closed_by_peer(fd, 10), "a damaged header did not close the link");
    close(fd);

    /* 5. floods of ACK / NACK for messages never sent, pings, and the same
     *    DATA (a wrong trailer CRC) again and again: the server NACKs it,
     *    never delivers it, and stays up */
    fd = raw_session(addr, 0x2004);
    for (uint64_t s = 0; s < 3000; s++) {
        send_hdr(fd, DC_VERBS_MSG_ACK, 0, s * 977, 0, 0);
        send_hdr(fd, DC_VERBS_MSG_NACK, 0, s * 131, 0, 0);
        send_hdr(fd, DC_VERBS_MSG_PING, 0, s, 0, 0);
    }
    for (int i = 0; i < 20; i++) {
        /* 24 bytes: it fits the receive perf link posts for its setup */
        uint8_t payload[24 + 4];
        memset(payload, 0x5a, 24);
        dc_store_le32(payload + 24, 0xdeadbeef); /* not the CRC32C of the bytes */
        send_hdr(fd, DC_VERBS_MSG_DATA, DC_VERBS_HDR_F_TRAILER, 0, 24, 0);
        (void)send(fd, payload, sizeof(payload), MSG_NOSIGNAL);
    }
    cr_assert(expect_hdr(fd, DC_VERBS_MSG_NACK, 0, 10000), "no NACK for a damaged message");
    send_hdr(fd, DC_VERBS_MSG_BYE, 0, 0, 0, 0);
    close(fd);

    /* 6. a two-stream session whose stream 0 is claimed twice before
     *    stream 1 comes: the second claim is refused, the session then
     *    completes with stream 1 */
    proof_t two = {.session = 0x2005, .idx = 0, .k = 2, .max_msg = 1u << 20};
    uint32_t code;
    fd = raw_auth(addr, &two, &code);
    cr_assert_eq(code, HS_OK_ACCEPT, "stream 0 refused (code %u)", code);
    int fd2 = raw_auth(addr, &two, &code);
    cr_assert_eq(code, HS_OK_BAD, "a stream attached twice was accepted (code %u)", code);
    close(fd2);
    two.idx = 1;
    fd2 = raw_auth(addr, &two, &code);
    cr_assert_eq(code, HS_OK_ACCEPT, "stream 1 refused (code %u)", code);
    send_hdr(fd, DC_VERBS_MSG_BYE, 0, 0, 0, 0);
    close(fd);
    close(fd2);

    /* the server still serves a correct client, byte-exact */
    cr_assert_eq(good_client(addr, clog), 0, "good client after the hostile peer failed (see %s)",
                 clog);
    kill(srv, SIGTERM);
    cr_assert_eq(proc_wait(srv, 20), 0, "server did not exit cleanly (see %s)", slog);
    cr_assert(proc_file_contains(slog, "bad stream parameters"), "no log for bad proofs (%s)",
              slog);
    cr_assert(proc_file_contains(slog, "unknown session"), "no log for an unknown session");
    cr_assert(proc_file_contains(slog, "beyond the receive window"), "no log for the seq (%s)",
              slog);
    cr_assert(proc_file_contains(slog, "header checksum mismatch"), "no log for the header");
    cr_assert(proc_file_contains(slog, "attached twice"), "no log for the double attach");
    cr_assert(proc_file_contains(slog, "verified"), "server did not verify data");
}
