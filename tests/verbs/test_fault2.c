/* test_fault2.c - corruption at a high rate with the engine's pattern, at the
 * transport level: the sender keeps many messages in flight (a deep send
 * window) while the receiver posts only a few irecv()s and re-posts them in
 * order as they complete.  The receiver's streams then pause on headers of
 * messages it has no buffer for yet; a NACKed message's re-send must still
 * get through (it used to be written behind such a paused message on the
 * same stream: a stall).  Both ends live in this process (one thread, both
 * progressed in turn), so DELTACAST_FAULT-style corruption applies to every
 * received DATA payload, in both directions. */
#include "verbs/fault.h"
#include "verbs/transport.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#define F2_SECRET "fault2-secret-0123456789"
#define F2_MAXQ 256

typedef struct f2_side {
    dc_verbs_conn_t *c;
    /* sending */
    const uint8_t *src;
    size_t msg, nmsg;      /* message size, messages to send */
    size_t sent_posted, sent_done;
    dc_verbs_req_t *sq[F2_MAXQ];
    uint32_t window;
    /* receiving */
    uint8_t *dst;
    size_t rmsg, rnmsg;
    size_t recv_posted, recv_done;
    dc_verbs_req_t *rq[F2_MAXQ];
    uint32_t rdepth;
} f2_side_t;

static void f2_fill(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (uint8_t)(s >> 56);
    }
}

/* Post, test in order, re-post; returns false on a transport error. */
static bool f2_step(f2_side_t *x)
{
    dc_status_t st;
    while (x->sent_posted < x->nmsg && x->sent_posted - x->sent_done < x->window) {
        st = dc_verbs_isend(x->c, x->src + x->sent_posted * x->msg, x->msg, NULL,
                            &x->sq[x->sent_posted % F2_MAXQ]);
        if (st == DC_ERR_AGAIN)
            break;
        cr_assert_eq(st, DC_OK, "isend: %s", dc_last_error());
        x->sent_posted++;
    }
    while (x->recv_posted < x->rnmsg && x->recv_posted - x->recv_done < x->rdepth) {
        st = dc_verbs_irecv(x->c, x->dst + x->recv_posted * x->rmsg, x->rmsg, NULL,
                            &x->rq[x->recv_posted % F2_MAXQ]);
        if (st == DC_ERR_AGAIN)
            break;
        cr_assert_eq(st, DC_OK, "irecv: %s", dc_last_error());
        x->recv_posted++;
    }
    int done = 1;
    while (done && x->recv_done < x->recv_posted) {
        size_t len = 0;
        done = 0;
        st = dc_verbs_test(x->rq[x->recv_done % F2_MAXQ], &done, &len);
        if (st != DC_OK)
            return false;
        if (done) {
            cr_assert_eq(len, x->rmsg);
            x->recv_done++;
        }
    }
    done = 1;
    while (done && x->sent_done < x->sent_posted) {
        done = 0;
        st = dc_verbs_test(x->sq[x->sent_done % F2_MAXQ], &done, NULL);
        if (st != DC_OK)
            return false;
        if (done)
            x->sent_done++;
    }
    return x->c->ops->progress(x->c) == DC_OK;
}

static bool f2_finished(const f2_side_t *x)
{
    return x->sent_done == x->nmsg && x->recv_done == x->rnmsg;
}

/* Client -> server `nmsg` messages of `msg` bytes (and server -> client
 * `back` messages of `back_msg` bytes at the same time), receivers posting
 * `rdepth` irecvs, senders `window` in flight, with the faults `fault`
 * (`cuts`: it also cuts connections). */
static void f2_run_ex(size_t msg, size_t nmsg, size_t back_msg, size_t back, uint32_t window,
                      uint32_t rdepth, uint32_t streams, const char *fault, bool cuts)
{
    const dc_verbs_ops_t *t;
    cr_assert_eq(dc_verbs_find("tcp", &t), DC_OK, "%s", dc_last_error());
    dc_verbs_opts_t o;
    dc_verbs_opts_init(&o);
    o.streams = streams;
    o.secret = F2_SECRET;
    o.secret_len = strlen(F2_SECRET);
    o.timeout_ms = 5000;
    dc_verbs_listener_t *l;
    cr_assert_eq(t->listen(&o, "127.0.0.1:0", &l), DC_OK, "%s", dc_last_error());
    char addr[128];
    cr_assert_eq(t->listen_addr(l, addr, sizeof(addr)), DC_OK);
    f2_side_t cl = {0}, sv = {0};
    cr_assert_eq(t->connect(&o, addr, &cl.c), DC_OK, "%s", dc_last_error());
    double t0 = dc_now_s();
    dc_status_t st = DC_ERR_AGAIN, sa = DC_ERR_AGAIN;
    while (st == DC_ERR_AGAIN || sa == DC_ERR_AGAIN) {
        cr_assert(dc_now_s() - t0 < 20, "no connection");
        if (st == DC_ERR_AGAIN)
            st = t->connect_test(cl.c);
        if (sa == DC_ERR_AGAIN)
            sa = t->accept(l, &sv.c);
    }
    cr_assert_eq(st, DC_OK, "connect: %s", dc_last_error());
    cr_assert_eq(sa, DC_OK, "accept: %s", dc_last_error());

    uint8_t *a = malloc(msg * nmsg), *a_got = malloc(msg * nmsg);
    uint8_t *b = malloc(back_msg * back + 1), *b_got = malloc(back_msg * back + 1);
    cr_assert(a && a_got && b && b_got);
    f2_fill(a, msg * nmsg, 11);
    f2_fill(b, back_msg * back, 12);
    memset(a_got, 0xee, msg * nmsg);
    cl = (f2_side_t){.c = cl.c, .src = a, .msg = msg, .nmsg = nmsg, .window = window,
                     .dst = b_got, .rmsg = back_msg, .rnmsg = back, .rdepth = rdepth};
    sv = (f2_side_t){.c = sv.c, .src = b, .msg = back_msg, .nmsg = back, .window = window,
                     .dst = a_got, .rmsg = msg, .rnmsg = nmsg, .rdepth = rdepth};

    dc_fault_cfg_t f;
    cr_assert_eq(dc_fault_parse(fault, &f), DC_OK, "%s", dc_last_error());
    dc_fault_install(&f);

    /* progress both ends; a stall (no completion for 10 s) fails the test */
    double last = dc_now_s();
    size_t progress_mark = 0;
    while (!f2_finished(&cl) || !f2_finished(&sv)) {
        cr_assert(f2_step(&cl), "client: %s", dc_last_error());
        cr_assert(f2_step(&sv), "server: %s", dc_last_error());
        size_t mark = cl.sent_done + cl.recv_done + sv.sent_done + sv.recv_done;
        if (mark != progress_mark) {
            progress_mark = mark;
            last = dc_now_s();
        }
        if (dc_now_s() - last > 10) {
            dc_fault_install(NULL);
            cr_assert_fail("stalled: client sent %zu/%zu acked, received %zu/%zu; server "
                           "received %zu/%zu (posted %zu), sent %zu/%zu acked",
                           cl.sent_done, cl.nmsg, cl.recv_done, cl.rnmsg, sv.recv_done,
                           sv.rnmsg, sv.recv_posted, sv.sent_done, sv.nmsg);
        }
    }
    dc_fault_stats_t fs;
    dc_fault_get_stats(&fs);
    dc_fault_install(NULL);
    dc_verbs_stats_t rs = {.size = sizeof(rs)}, cs = {.size = sizeof(cs)};
    cr_assert_eq(t->stats(sv.c, &rs), DC_OK);
    cr_assert_eq(t->stats(cl.c, &cs), DC_OK);
    cr_log_info("fault2: %zu+%zu messages, %llu corrupted, nacks %llu+%llu, resends %llu+%llu, "
                "%.2f s",
                nmsg, back, (unsigned long long)fs.corrupted,
                (unsigned long long)rs.nacks_sent, (unsigned long long)cs.nacks_sent,
                (unsigned long long)cs.resends, (unsigned long long)rs.resends,
                dc_now_s() - t0);
    cr_assert_gt(fs.corrupted, 0, "no corruption was injected");
    cr_assert_gt(rs.nacks_sent + cs.nacks_sent, 0, "no NACK was sent");
    /* every NACK answered by exactly one re-send: no reconnect, and early
     * messages were held, not dropped and sent again */
    if (cuts) {
        cr_assert_gt(fs.dropped, 0, "no connection was cut");
        cr_assert_gt(rs.reconnects + cs.reconnects, 0, "no reconnect");
    } else {
        cr_assert_eq(rs.reconnects + cs.reconnects, 0, "the connection broke");
        cr_assert_eq(cs.resends + rs.resends, rs.nacks_sent + cs.nacks_sent,
                 "re-sends %llu != NACKs %llu", (unsigned long long)(cs.resends + rs.resends),
                 (unsigned long long)(rs.nacks_sent + cs.nacks_sent));
    }
    cr_assert(memcmp(a, a_got, msg * nmsg) == 0, "client -> server bytes differ");
    cr_assert(memcmp(b, b_got, back_msg * back) == 0, "server -> client bytes differ");
    t->close(cl.c);
    t->close(sv.c);
    t->listen_close(l);
    free(a);
    free(a_got);
    free(b);
    free(b_got);
}

static void f2_run(size_t msg, size_t nmsg, size_t back_msg, size_t back, uint32_t window,
                   uint32_t rdepth, uint32_t streams, const char *fault)
{
    f2_run_ex(msg, nmsg, back_msg, back, window, rdepth, streams, fault, false);
}

/* The engine's shape: deep send window, 8 receive buffers, 64 KiB frames. */
Test(fault2, deep_window_few_irecvs_high_corruption, .timeout = 60)
{
    f2_run(64u << 10, 400, 0, 0, 128, 8, 4, "corrupt=0.2,seed=3");
}

/* Fewer receive buffers than streams: every stream pauses in turn. */
Test(fault2, one_irecv_four_streams, .timeout = 60)
{
    f2_run(32u << 10, 300, 0, 0, 64, 1, 4, "corrupt=0.2,seed=5");
}

/* Both directions at once: big frames one way, small ones the other, with
 * ACK/NACK control frames interleaved on the same streams. */
Test(fault2, both_directions_high_corruption, .timeout = 60)
{
    f2_run(64u << 10, 300, 200, 600, 128, 4, 4, "corrupt=0.2,seed=7");
}

/* The rate that used to work keeps working. */
Test(fault2, deep_window_low_corruption, .timeout = 60)
{
    f2_run(64u << 10, 300, 0, 0, 128, 8, 4, "corrupt=0.05,seed=3");
}

/* Re-sends and early messages held across reconnects: corruption and
 * connections cut mid-message together. */
Test(fault2, high_corruption_and_cuts, .timeout = 60)
{
    f2_run_ex(64u << 10, 300, 200, 300, 128, 8, 4,
              "corrupt=0.2,seed=9,drop_after=3000000,drop_count=3", true);
}
