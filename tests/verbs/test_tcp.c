/* test_tcp.c - the TCP transport between two real processes. */
#include "pair.h"

static pair_cfg_t tcp_cfg(uint64_t total, uint32_t max_msg, uint32_t streams)
{
    pair_cfg_t c = {.transport = "tcp", .total = total, .max_msg = max_msg,
                    .streams = streams, .depth = 16, .timeout_ms = 20000};
    return c;
}

Test(tcp, small_messages_exact_one_stream)
{
    pair_cfg_t c = tcp_cfg(2u << 20, 4096, 1);
    pair_result_t r = run_pair(&c);
    cr_assert_gt(r.rstats.msgs_recv, 500);
    cr_assert_eq(r.rstats.nacks_sent, 0);
}

Test(tcp, striped_four_streams_exact)
{
    pair_cfg_t c = tcp_cfg(32u << 20, 1u << 20, 4);
    pair_result_t r = run_pair(&c);
    cr_assert_eq(r.rstats.streams, 4);
    cr_assert_eq(r.rstats.reconnects, 0);
}

Test(tcp, proc_64mib_random_exact)
{
    pair_cfg_t c = tcp_cfg(64u << 20, 4u << 20, 4);
    run_pair(&c);
}

/* The caller's CRC32C (isend_crc): in the header, the sender does not read
 * the payload before writing it; every byte arrives exactly, no NACK. */
Test(tcp, caller_crc_exact)
{
    pair_cfg_t c = tcp_cfg(32u << 20, 1u << 20, 4);
    c.caller_crc = 1;
    pair_result_t r = run_pair(&c);
    cr_assert_gt(r.msgs, 20);
    cr_assert_eq(r.rstats.nacks_sent, 0);
}

/* A wrong caller CRC32C on every fifth message: each is NACKed exactly
 * once, then re-sent with the transport's own CRC32C trailer and delivered
 * exactly (never a NACK loop). */
Test(tcp, wrong_caller_crc_nacked_once_then_exact)
{
    pair_cfg_t c = tcp_cfg(16u << 20, 1u << 20, 2);
    c.caller_crc = 2;
    pair_result_t r = run_pair(&c);
    cr_assert_gt(pair_wrong_crcs(r.msgs), 0);
    cr_assert_eq(r.rstats.nacks_sent, pair_wrong_crcs(r.msgs), "NACKs %llu, wrong CRC32Cs %llu",
                 (unsigned long long)r.rstats.nacks_sent,
                 (unsigned long long)pair_wrong_crcs(r.msgs));
}

/* The caller's CRC32C does not stop the receiver from catching damage. */
Test(tcp, caller_crc_corruption_caught)
{
    pair_cfg_t c = tcp_cfg(16u << 20, 256u << 10, 2);
    c.caller_crc = 1;
    c.fault_receiver = "corrupt=0.2,seed=5";
    pair_result_t r = run_pair(&c);
    cr_assert_gt(r.rstats.nacks_sent, 0, "corruption was injected but never detected");
}

Test(tcp, zero_length_messages)
{
    const dc_verbs_ops_t *t;
    cr_assert_eq(dc_verbs_find("tcp", &t), DC_OK);
    dc_verbs_opts_t o;
    dc_verbs_opts_init(&o);
    o.secret = PAIR_SECRET;
    o.secret_len = strlen(PAIR_SECRET);
    o.streams = 2;
    dc_verbs_listener_t *l;
    cr_assert_eq(t->listen(&o, "127.0.0.1:0", &l), DC_OK);
    char addr[128];
    t->listen_addr(l, addr, sizeof(addr));
    dc_verbs_conn_t *cc, *sc = NULL;
    cr_assert_eq(t->connect(&o, addr, &cc), DC_OK);
    dc_status_t st1 = DC_ERR_AGAIN, st2 = DC_ERR_AGAIN;
    for (int i = 0; i < 5000 && (st1 == DC_ERR_AGAIN || st2 == DC_ERR_AGAIN); i++) {
        if (st1 == DC_ERR_AGAIN)
            st1 = t->connect_test(cc);
        if (st2 == DC_ERR_AGAIN)
            st2 = t->accept(l, &sc);
        usleep(1000);
    }
    cr_assert_eq(st1, DC_OK, "%s", dc_last_error());
    cr_assert_eq(st2, DC_OK, "%s", dc_last_error());
    /* 0-byte, then a too-large message for a small buffer */
    dc_verbs_req_t *s1, *s2, *r1, *r2;
    char big[100] = "hello";
    cr_assert_eq(t->isend(cc, NULL, 0, NULL, &s1), DC_OK);
    cr_assert_eq(t->isend(cc, big, sizeof(big), NULL, &s2), DC_OK);
    char rb[16];
    cr_assert_eq(t->irecv(sc, rb, sizeof(rb), NULL, &r1), DC_OK);
    cr_assert_eq(t->irecv(sc, rb, sizeof(rb), NULL, &r2), DC_OK);
    int d1 = 0, d2 = 0, ds1 = 0, ds2 = 0;
    size_t len = 99;
    dc_status_t e2 = DC_OK;
    for (int i = 0; i < 5000 && !(d1 && d2 && ds1 && ds2); i++) {
        if (!d1)
            cr_assert_eq(t->test(r1, &d1, &len), DC_OK);
        if (!d2) {
            e2 = t->test(r2, &d2, NULL);
            if (e2 != DC_OK)
                d2 = 1;
        }
        if (!ds1)
            cr_assert_eq(t->test(s1, &ds1, NULL), DC_OK);
        if (!ds2)
            cr_assert_eq(t->test(s2, &ds2, NULL), DC_OK);
        usleep(200);
    }
    cr_assert(d1 && d2 && ds1 && ds2);
    cr_assert_eq(len, 0);
    cr_assert_eq(e2, DC_ERR_FORMAT, "an oversized message must fail its receive");
    t->close(cc);
    t->close(sc);
    t->listen_close(l);
}

Test(tcp, connect_refused_times_out_cleanly)
{
    const dc_verbs_ops_t *t;
    cr_assert_eq(dc_verbs_find("tcp", &t), DC_OK);
    dc_verbs_opts_t o;
    dc_verbs_opts_init(&o);
    o.secret = PAIR_SECRET;
    o.secret_len = strlen(PAIR_SECRET);
    o.timeout_ms = 300;
    /* a port nobody listens on: bind one and close it */
    dc_verbs_listener_t *l;
    cr_assert_eq(t->listen(&o, "127.0.0.1:0", &l), DC_OK);
    char addr[128];
    t->listen_addr(l, addr, sizeof(addr));
    t->listen_close(l);
    dc_verbs_conn_t *c;
    cr_assert_eq(t->connect(&o, addr, &c), DC_OK);
    dc_status_t st;
    double t0 = dc_now_s();
    while ((st = t->connect_test(c)) == DC_ERR_AGAIN)
        t->wait(c, 10);
    cr_assert_eq(st, DC_ERR_TIMEOUT, "%s", dc_status_name(st));
    cr_assert_lt(dc_now_s() - t0, 5.0);
    t->close(c);
}

Test(tcp, registry_and_auto_policy)
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

Test(tcp, parse_addr)
{
    char h[64];
    uint16_t p;
    cr_assert_eq(dc_verbs_parse_addr("127.0.0.1:80", h, sizeof(h), &p), DC_OK);
    cr_assert_str_eq(h, "127.0.0.1");
    cr_assert_eq(p, 80);
    cr_assert_eq(dc_verbs_parse_addr("[::1]:9", h, sizeof(h), &p), DC_OK);
    cr_assert_str_eq(h, "::1");
    cr_assert_neq(dc_verbs_parse_addr("nohost", h, sizeof(h), &p), DC_OK);
    cr_assert_neq(dc_verbs_parse_addr("a:70000", h, sizeof(h), &p), DC_OK);
    cr_assert_neq(dc_verbs_parse_addr(":1", h, sizeof(h), &p), DC_OK);
}

Test(tcp, header_pack_roundtrip_and_damage)
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

Test(tcp, window)
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
