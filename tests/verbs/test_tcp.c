/* test_tcp.c - what only the TCP transport has, between two real processes:
 * the number of parallel streams (one, four striped).  What every transport
 * promises is checked over tcp by conformance.c; test_tcp_zerocopy.c,
 * test_tcp_hostile.c, test_tcp_slow.c and test_fault*.c hold the rest. */
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
