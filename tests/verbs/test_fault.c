/* test_fault.c - fault injection: the spec parser, and real recovery from
 * corrupted messages, connections cut mid-message and stalls. */
#include "pair.h"

Test(fault, parse)
{
    dc_fault_cfg_t f;
    cr_assert_eq(dc_fault_parse(NULL, &f), DC_OK);
    cr_assert_eq(f.corrupt_p, 0);
    cr_assert_eq(f.corrupt_at, -1);
    cr_assert_eq(f.drop_after, 0);
    cr_assert_eq(dc_fault_parse("corrupt=0.25,drop_after=1000,drop_count=0,stall_ms=5,"
                                "stall_after=7,seed=9,corrupt_at=3",
                                &f),
                 DC_OK);
    cr_assert_eq(f.corrupt_p, 0.25);
    cr_assert_eq(f.drop_after, 1000);
    cr_assert_eq(f.drop_count, 0);
    cr_assert_eq(f.stall_ms, 5);
    cr_assert_eq(f.stall_after, 7);
    cr_assert_eq(f.seed, 9);
    cr_assert_eq(f.corrupt_at, 3);
    cr_assert_eq(dc_fault_parse("corrupt=2", &f), DC_ERR_INVALID);
    cr_assert_eq(dc_fault_parse("bogus=1", &f), DC_ERR_INVALID);
    cr_assert_eq(dc_fault_parse("drop_after=-1", &f), DC_ERR_INVALID);
    cr_assert_eq(dc_fault_parse("drop_after", &f), DC_ERR_INVALID);
    cr_assert_eq(dc_fault_parse("drop_after=12x", &f), DC_ERR_INVALID);
}

Test(fault, hooks_fire_exactly)
{
    pair_install_fault("drop_after=100,drop_count=2,corrupt_at=10");
    cr_assert(dc_fault_active());
    cr_assert_eq(dc_fault_send_limit(60), 60);
    dc_fault_sent(60);
    cr_assert_not(dc_fault_drop_due());
    cr_assert_eq(dc_fault_send_limit(60), 40); /* cut exactly at byte 100 */
    dc_fault_sent(40);
    cr_assert(dc_fault_drop_due());
    cr_assert_not(dc_fault_drop_due());
    cr_assert_eq(dc_fault_send_limit(500), 100); /* second drop 100 later */
    dc_fault_sent(100);
    cr_assert(dc_fault_drop_due());
    cr_assert_eq(dc_fault_send_limit(500), 500); /* drop_count exhausted */
    uint8_t b[16] = {0};
    cr_assert(dc_fault_on_recv(b, 16));
    cr_assert_eq(b[10], 0x5a);
    cr_assert_not(dc_fault_on_recv(b, 16));
    dc_fault_stats_t st;
    dc_fault_get_stats(&st);
    cr_assert_eq(st.dropped, 2);
    cr_assert_eq(st.corrupted, 1);
    dc_fault_install(NULL);
    cr_assert_not(dc_fault_active());
}

static pair_cfg_t fcfg(uint64_t total, uint32_t max_msg, uint32_t streams)
{
    pair_cfg_t c = {.transport = "tcp", .total = total, .max_msg = max_msg,
                    .streams = streams, .depth = 16, .timeout_ms = 20000};
    return c;
}

Test(fault, corruption_is_nacked_and_resent)
{
    pair_cfg_t c = fcfg(16u << 20, 256u << 10, 4);
    c.fault_receiver = "corrupt=0.1,seed=3";
    pair_result_t r = run_pair(&c);
    cr_assert_gt(r.rstats.nacks_sent, 0, "no corruption was injected/detected");
}

Test(fault, corruption_at_offset)
{
    pair_cfg_t c = fcfg(4u << 20, 64u << 10, 2);
    c.fault_receiver = "corrupt_at=1000000";
    pair_result_t r = run_pair(&c);
    cr_assert_eq(r.rstats.nacks_sent, 1);
}

Test(fault, sender_cut_mid_message_resumes)
{
    /* 3 cuts at odd byte counts: mid-header or mid-payload */
    pair_cfg_t c = fcfg(32u << 20, 1u << 20, 4);
    c.fault_sender = "drop_after=5000003,drop_count=3";
    pair_result_t r = run_pair(&c);
    cr_assert_geq(r.rstats.reconnects, 1, "the connection was never cut");
    cr_assert_gt(r.rstats.dups_dropped + r.rstats.msgs_recv, 0);
}

Test(fault, receiver_cut_while_acking_resumes)
{
    /* the receiver only writes ACK frames: cut after 100 of them + 7 bytes */
    pair_cfg_t c = fcfg(8u << 20, 16u << 10, 3);
    c.fault_receiver = "drop_after=3207,drop_count=2";
    pair_result_t r = run_pair(&c);
    cr_assert_geq(r.rstats.reconnects, 1);
}

Test(fault, cuts_and_corruption_together)
{
    pair_cfg_t c = fcfg(24u << 20, 512u << 10, 4);
    c.fault_sender = "drop_after=3000017,drop_count=0"; /* every ~3 MB */
    c.fault_receiver = "corrupt=0.05,seed=11";
    pair_result_t r = run_pair(&c);
    cr_assert_geq(r.rstats.reconnects, 3);
    cr_assert_gt(r.rstats.nacks_sent, 0, "no corruption was injected/detected");
}

Test(fault, stalled_sender_still_exact)
{
    pair_cfg_t c = fcfg(4u << 20, 256u << 10, 2);
    c.fault_sender = "stall_ms=300,stall_after=1000000";
    pair_result_t r = run_pair(&c);
    cr_assert_geq(r.seconds, 0.3, "the stall did not happen");
}
