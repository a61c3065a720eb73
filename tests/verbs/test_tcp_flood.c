/* test_tcp_flood.c - the tcp listener under a flood of unauthenticated
 * connections (issue 19): real sockets from several loopback source
 * addresses against a real listener.  A full listener (DC_TCP_MAX_HS
 * pending handshakes) or a full source (DC_TCP_MAX_HS_SRC from one
 * address) evicts its oldest handshake that has not sent a whole HELLO
 * (else its oldest) for the new connection; a handshake that does not
 * authenticate within handshake_timeout_ms is dropped; a real client still
 * connects through all of it. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "verbs/tcp_hs.h"
#include "verbs/transport.h"

#define MAX_HS  256 /* DC_TCP_MAX_HS of verbs/tcp_internal.h */
#define MAX_SRC 64  /* DC_TCP_MAX_HS_SRC */

static const dc_verbs_ops_t *T;
static dc_verbs_listener_t *L;
static uint16_t port;
static dc_verbs_conn_t *served[8];
static int nserved;

static void start(uint32_t hs_timeout_ms)
{
    setenv("DELTACAST_SECRET", "flood-test-secret", 1);
    cr_assert_eq(dc_verbs_find("tcp", &T), DC_OK);
    dc_verbs_opts_t o;
    dc_verbs_opts_init(&o);
    o.timeout_ms = 30000;
    o.hs_timeout_ms = hs_timeout_ms;
    o.streams = 1;
    cr_assert_eq(T->listen(&o, "127.0.0.1:0", &L), DC_OK, "%s", dc_last_error());
    char a[128], host[64];
    cr_assert_eq(T->listen_addr(L, a, sizeof(a)), DC_OK);
    cr_assert_eq(dc_verbs_parse_addr(a, host, sizeof(host), &port), DC_OK);
}

/* Let the listener accept and step what arrived. */
static void pump(int ms)
{
    for (int i = 0; i <= ms / 5; i++) {
        dc_verbs_conn_t *c = NULL;
        dc_status_t st = T->accept(L, &c);
        if (st == DC_OK && nserved < 8)
            served[nserved++] = c;
        else
            cr_assert(st == DC_OK || st == DC_ERR_AGAIN, "accept: %s", dc_last_error());
        usleep(5000);
    }
}

/* An idle TCP connection from source address 127.0.0.`src`. */
static int dial(int src)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(fd >= 0);
    struct sockaddr_in me = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000000u | src)};
    cr_assert_eq(bind(fd, (struct sockaddr *)&me, sizeof(me)), 0, "bind 127.0.0.%d: %s", src,
                 strerror(errno));
    struct sockaddr_in to = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(0x7f000001u)};
    cr_assert_eq(connect(fd, (struct sockaddr *)&to, sizeof(to)), 0, "connect: %s",
                 strerror(errno));
    return fd;
}

/* The server closed fd (bytes it sent, e.g. a CHAL, are read and skipped). */
static int closed(int fd)
{
    for (;;) {
        uint8_t b[256];
        ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);
        if (n > 0)
            continue;
        return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
    }
}

static void send_hello(int fd)
{
    dc_tcp_hello_t h = {{1, 2, 3}};
    uint8_t b[DC_TCP_HELLO];
    dc_tcp_hello_pack(&h, b);
    cr_assert_eq(write(fd, b, sizeof(b)), (ssize_t)sizeof(b));
}

static void fini(void)
{
    for (int i = 0; i < nserved; i++)
        T->close(served[i]);
    nserved = 0;
    if (L)
        T->listen_close(L);
    L = NULL;
}

TestSuite(tcp_flood, .fini = fini, .timeout = 60);

/* DC_TCP_MAX_HS_SRC idle sockets from one address, then one more: the
 * oldest of that address goes, no other; one that sent its HELLO is passed
 * over for an older idle one; another address is not touched. */
Test(tcp_flood, per_source_cap_evicts_that_source_oldest_first)
{
    start(30000);
    static int a[MAX_SRC + 8];
    for (int i = 0; i < MAX_SRC; i++) {
        a[i] = dial(2);
        if (i % 16 == 15)
            pump(10);
    }
    int other = dial(3);
    pump(50);
    for (int i = 0; i < MAX_SRC; i++)
        cr_assert(!closed(a[i]), "socket %d of 127.0.0.2 closed below the cap", i);
    /* a[1] sends its HELLO (gets a CHAL): it is now the one to keep */
    send_hello(a[1]);
    pump(30);
    a[MAX_SRC] = dial(2);
    pump(30);
    cr_assert(closed(a[0]), "the oldest of 127.0.0.2 was not evicted");
    for (int i = 1; i <= MAX_SRC; i++)
        cr_assert(!closed(a[i]), "socket %d of 127.0.0.2 evicted instead of the oldest", i);
    a[MAX_SRC + 1] = dial(2);
    pump(30);
    cr_assert(closed(a[2]), "the oldest idle socket was not evicted (a[1] sent HELLO)");
    cr_assert(!closed(a[1]), "a socket that sent HELLO went before an older idle one");
    for (int i = 3; i <= MAX_SRC + 1; i++)
        cr_assert(!closed(a[i]), "socket %d of 127.0.0.2 evicted", i);
    cr_assert(!closed(other), "127.0.0.3 paid for 127.0.0.2's flood");
    for (int i = 0; i <= MAX_SRC + 1; i++)
        close(a[i]);
    close(other);
}

/* DC_TCP_MAX_HS idle sockets from several addresses (each below its cap),
 * then more: the oldest go in order; a real client then connects at once. */
Test(tcp_flood, full_listener_evicts_oldest_and_a_real_client_connects)
{
    start(30000);
    static int s[MAX_HS + 8];
    for (int i = 0; i < MAX_HS; i++) {
        s[i] = dial(10 + i % 8); /* 32 per address */
        if (i % 32 == 31)
            pump(10);
    }
    pump(50);
    for (int i = 0; i < MAX_HS; i++)
        cr_assert(!closed(s[i]), "socket %d closed below the listener's cap", i);
    for (int i = 0; i < 3; i++) {
        s[MAX_HS + i] = dial(20);
        pump(20);
        cr_assert(closed(s[i]), "socket %d (the oldest) not evicted for a new one", i);
        for (int j = i + 1; j <= MAX_HS + i; j++)
            cr_assert(!closed(s[j]), "socket %d evicted out of order", j);
    }
    /* a real client: it completes its handshake while the flood holds on */
    dc_verbs_opts_t o;
    dc_verbs_opts_init(&o);
    o.streams = 2;
    o.timeout_ms = 5000;
    dc_verbs_conn_t *c = NULL;
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
    cr_assert_eq(T->connect(&o, addr, &c), DC_OK);
    dc_status_t st = DC_ERR_AGAIN;
    for (int i = 0; i < 1000 && (st == DC_ERR_AGAIN || nserved == 0); i++) {
        if (st == DC_ERR_AGAIN)
            st = T->connect_test(c);
        pump(0);
    }
    cr_assert_eq(st, DC_OK, "the client did not connect through the flood: %s", dc_last_error());
    cr_assert_eq(nserved, 1, "the listener did not hand out the client's connection");
    T->close(c);
    for (int i = 0; i < MAX_HS + 3; i++)
        close(s[i]);
}

/* A socket that says nothing (or a few bytes of its HELLO) is dropped
 * after handshake_timeout_ms, not timeout_ms. */
Test(tcp_flood, handshake_deadline_drops_idle_and_slow_peers)
{
    start(300);
    int idle = dial(4), slow = dial(4);
    cr_assert_eq(write(slow, "DCT", 3), 3);
    pump(100);
    cr_assert(!closed(idle) && !closed(slow), "dropped before handshake_timeout_ms");
    pump(400);
    cr_assert(closed(idle), "an idle socket outlived handshake_timeout_ms=300");
    cr_assert(closed(slow), "a slow-loris socket outlived handshake_timeout_ms=300");
    close(idle);
    close(slow);
}

/* A flood of garbage handshakes (each refused at once) is a few log lines
 * a second and a count, not a line per socket. */
Test(tcp_flood, garbage_flood_is_counted_not_logged_line_by_line)
{
    char log[] = "/tmp/dc-flood-log-XXXXXX";
    int lf = mkstemp(log);
    cr_assert(lf >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(lf, 2);
    start(30000);
    enum { N = 200 };
    for (int i = 0; i < N; i++) {
        int fd = dial(5);
        uint8_t junk[DC_TCP_HELLO];
        memset(junk, 'G', sizeof(junk));
        cr_assert_eq(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
        close(fd);
        if (i % 20 == 19)
            pump(5);
    }
    pump(50);
    T->listen_close(L); /* the final summary */
    L = NULL;
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    static char text[1 << 20];
    ssize_t n = pread(lf, text, sizeof(text) - 1, 0);
    close(lf);
    unlink(log);
    cr_assert(n > 0);
    text[n] = 0;
    int lines = 0;
    for (char *p = text; (p = strstr(p, "sent garbage")); p++)
        lines++;
    cr_assert(lines >= 1 && lines <= 40, "%d lines for %d garbage handshakes", lines, N);
    char *sum = NULL; /* the last summary (the listener's close) */
    for (char *q = text; (q = strstr(q, "refused beyond 20 log lines a second")); q++)
        sum = q;
    cr_assert(sum, "no summary of the refused handshakes:\n%s", text);
    unsigned long long quiet = 0;
    char *p = sum;
    while (p > text && p[-1] != ',')
        p--;
    cr_assert_eq(sscanf(p, " %llu refused", &quiet), 1, "%s", sum);
    cr_assert_eq((int)quiet + lines, N, "%llu counted + %d logged != %d refused", quiet, lines, N);
}
