/* test_tcp_zerocopy.c - the TCP transport with MSG_ZEROCOPY sends (and the
 * receive low-water marks of the large-message path): exact
 * delivery, sender buffers reusable once a send completes (the test scribbles
 * over each one at once), and recovery from corruption and cut connections
 * while zero-copy sends are outstanding. */
#include "verbs/fault.h"
#include "verbs/transport.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ZC_SECRET "zc-test-secret-0123456789"
#define ZC_DEPTH 16

static uint64_t zc_rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef struct zc_pair {
    const dc_verbs_ops_t *t;
    dc_verbs_listener_t *l;
    dc_verbs_conn_t *cc, *sc;
} zc_pair_t;

static void zc_connect(zc_pair_t *p, uint32_t streams, int zerocopy, uint64_t sockbuf)
{
    cr_assert_eq(dc_verbs_find("tcp", &p->t), DC_OK);
    dc_verbs_opts_t o;
    dc_verbs_opts_init(&o);
    o.secret = ZC_SECRET;
    o.secret_len = strlen(ZC_SECRET);
    o.streams = streams;
    o.timeout_ms = 20000;
    o.zerocopy = zerocopy;
    o.sockbuf = sockbuf;
    cr_assert_eq(p->t->listen(&o, "127.0.0.1:0", &p->l), DC_OK, "%s", dc_last_error());
    char addr[128];
    p->t->listen_addr(p->l, addr, sizeof(addr));
    cr_assert_eq(p->t->connect(&o, addr, &p->cc), DC_OK, "%s", dc_last_error());
    p->sc = NULL;
    dc_status_t st1 = DC_ERR_AGAIN, st2 = DC_ERR_AGAIN;
    for (int i = 0; i < 10000 && (st1 == DC_ERR_AGAIN || st2 == DC_ERR_AGAIN); i++) {
        if (st1 == DC_ERR_AGAIN)
            st1 = p->t->connect_test(p->cc);
        if (st2 == DC_ERR_AGAIN)
            st2 = p->t->accept(p->l, &p->sc);
        if (st1 == DC_ERR_AGAIN || st2 == DC_ERR_AGAIN)
            usleep(500);
    }
    cr_assert_eq(st1, DC_OK, "%s", dc_last_error());
    cr_assert_eq(st2, DC_OK, "%s", dc_last_error());
}

/*
 * Send `total` random bytes client -> server in messages of random sizes
 * (most >= 64 KiB, the zero-copy threshold), up to ZC_DEPTH in flight.  When
 * a send completes its source bytes are overwritten at once: the transport
 * must not need them any more.  The server keeps accepting (re-attachments
 * after injected cuts come through the listener).  Returns the client's
 * stats.
 */
static dc_verbs_stats_t zc_run(uint32_t streams, uint64_t total, uint32_t max_msg, int zerocopy,
                               uint64_t sockbuf)
{
    zc_pair_t p;
    zc_connect(&p, streams, zerocopy, sockbuf);
    const dc_verbs_ops_t *t = p.t;
    uint8_t *src = malloc(total), *orig = malloc(total), *dst = malloc(total);
    cr_assert(src && orig && dst);
    uint64_t seed = 7;
    for (uint64_t i = 0; i + 8 <= total; i += 8) {
        uint64_t v = zc_rng(&seed);
        memcpy(src + i, &v, 8);
    }
    memcpy(orig, src, total);
    memset(dst, 0, total);

    /* message plan, identical on both ends */
    enum { MAXN = 4096 };
    static uint64_t off[MAXN + 1];
    uint32_t nmsg = 0;
    uint64_t s = 99;
    for (uint64_t o = 0; o < total && nmsg < MAXN; nmsg++) {
        uint64_t r = zc_rng(&s);
        uint64_t len = (r & 7) == 0 ? 1 + r % 4096 : (64u << 10) + r % (max_msg - (64u << 10));
        off[nmsg] = o;
        o += DC_MIN(len, total - o);
    }
    off[nmsg] = total;
    cr_assert_lt(off[nmsg - 1], total);

    dc_verbs_req_t *sreq[ZC_DEPTH], *rreq[ZC_DEPTH];
    uint32_t s_post = 0, s_done = 0, r_post = 0, r_done = 0;
    double t0 = dc_now_s();
    while (s_done < nmsg || r_done < nmsg) {
        cr_assert_lt(dc_now_s() - t0, 120.0, "no progress: sent %u recv %u of %u", s_done,
                     r_done, nmsg);
        while (s_post < nmsg && s_post - s_done < ZC_DEPTH) {
            uint64_t a = off[s_post], b = off[s_post + 1];
            dc_status_t st = t->isend(p.cc, src + a, b - a, NULL, &sreq[s_post % ZC_DEPTH]);
            if (st == DC_ERR_AGAIN)
                break;
            cr_assert_eq(st, DC_OK, "isend: %s", dc_last_error());
            s_post++;
        }
        while (r_post < nmsg && r_post - r_done < ZC_DEPTH) {
            uint64_t a = off[r_post];
            dc_status_t st =
                t->irecv(p.sc, dst + a, max_msg, NULL, &rreq[r_post % ZC_DEPTH]);
            if (st == DC_ERR_AGAIN)
                break;
            cr_assert_eq(st, DC_OK, "irecv: %s", dc_last_error());
            r_post++;
        }
        bool moved = false;
        while (s_done < s_post) {
            int done = 0;
            size_t len = 0;
            cr_assert_eq(t->test(sreq[s_done % ZC_DEPTH], &done, &len), DC_OK, "send: %s",
                         dc_last_error());
            if (!done)
                break;
            uint64_t a = off[s_done], b = off[s_done + 1];
            cr_assert_eq(len, b - a);
            memset(src + a, 0xa5, b - a); /* the buffer is ours again */
            s_done++;
            moved = true;
        }
        while (r_done < r_post) {
            int done = 0;
            size_t len = 0;
            cr_assert_eq(t->test(rreq[r_done % ZC_DEPTH], &done, &len), DC_OK, "recv: %s",
                         dc_last_error());
            if (!done)
                break;
            cr_assert_eq(len, off[r_done + 1] - off[r_done], "message %u", r_done);
            r_done++;
            moved = true;
        }
        dc_verbs_conn_t *extra = NULL;
        cr_assert_eq(t->accept(p.l, &extra), DC_ERR_AGAIN, "re-attachment must not be a new "
                                                           "connection");
        if (!moved)
            (void)t->wait(p.cc, 1);
    }
    for (uint64_t i = 0; i < total; i += 1u << 20) {
        uint64_t n = DC_MIN((uint64_t)(1u << 20), total - i);
        cr_assert(memcmp(dst + i, orig + i, n) == 0, "payload differs in MiB %llu",
                  (unsigned long long)(i >> 20));
    }
    dc_verbs_stats_t cs = {.size = sizeof(cs)}, ss = {.size = sizeof(ss)};
    cr_assert_eq(t->stats(p.cc, &cs), DC_OK);
    cr_assert_eq(t->stats(p.sc, &ss), DC_OK);
    cr_assert_eq(ss.bytes_recv, total);
    cr_assert_eq(ss.msgs_recv, nmsg);
    cr_assert_eq(cs.bytes_sent, total);
    cs.nacks_sent = ss.nacks_sent; /* report the receiver's NACKs with the client's stats */
    t->close(p.cc);
    t->close(p.sc);
    t->listen_close(p.l);
    free(src);
    free(orig);
    free(dst);
    return cs;
}

Test(tcp_zerocopy, exact_and_buffers_reusable_after_completion)
{
    dc_verbs_stats_t cs = zc_run(3, 40u << 20, 2u << 20, 1, 0);
    cr_assert_gt(cs.zc_sends, 0, "large messages must go out with MSG_ZEROCOPY");
    cr_assert_leq(cs.zc_copied, cs.zc_sends);
    cr_assert_eq(cs.reconnects, 0);
}

Test(tcp_zerocopy, off_by_default_makes_no_zerocopy_sends)
{
    dc_verbs_stats_t cs = zc_run(2, 8u << 20, 1u << 20, -1, 0);
    cr_assert_eq(cs.zc_sends, 0);
}

Test(tcp_zerocopy, exact_with_corruption_and_cuts)
{
    /* one process holds both ends: cuts hit whichever side writes the
     * 3000017th byte (every time), corruption hits received payloads */
    dc_fault_cfg_t f;
    cr_assert_eq(dc_fault_parse("drop_after=3000017,drop_count=0,corrupt=0.05,seed=11", &f),
                 DC_OK, "%s", dc_last_error());
    dc_fault_install(&f);
    dc_verbs_stats_t cs = zc_run(4, 40u << 20, 2u << 20, 1, 0);
    dc_fault_install(NULL);
    cr_assert_gt(cs.zc_sends, 0);
    cr_assert_geq(cs.reconnects, 3, "cuts must have forced reconnects (%llu)",
                  (unsigned long long)cs.reconnects);
    cr_assert_gt(cs.resends, 0);
    cr_assert_gt(cs.nacks_sent, 0, "corruption must have been NACKed");
}

/* Receive low-water marks (SO_RCVLOWAT, up to 1 MiB per chunk) with socket
 * buffers far smaller than a chunk: the kernel must cap them, nothing may
 * stall, bytes exact. */
Test(tcp_zerocopy, small_socket_buffers_large_messages_exact)
{
    dc_verbs_stats_t cs = zc_run(2, 16u << 20, 4u << 20, -1, 32u << 10);
    cr_assert_eq(cs.reconnects, 0);
    cr_assert_eq(cs.zc_sends, 0);
}
