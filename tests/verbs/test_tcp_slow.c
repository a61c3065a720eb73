/* test_tcp_slow.c - 1 GiB of random data over TCP between two processes,
 * clean and under injected corruption and mid-message connection cuts. */
#include "pair.h"

Test(tcp_slow, one_gib_exact, .timeout = 900)
{
    pair_cfg_t c = {.transport = "tcp", .total = 1ull << 30, .max_msg = 4u << 20,
                    .streams = 4, .depth = 16, .timeout_ms = 30000};
    pair_result_t r = run_pair(&c);
    cr_assert_eq(r.rstats.bytes_recv, c.total);
}

Test(tcp_slow, one_gib_exact_with_corruption_and_cuts, .timeout = 900)
{
    pair_cfg_t c = {.transport = "tcp", .total = 1ull << 30, .max_msg = 4u << 20,
                    .streams = 4, .depth = 16, .timeout_ms = 30000,
                    .fault_sender = "drop_after=100000007,drop_count=0",
                    .fault_receiver = "corrupt=0.02,seed=5"};
    pair_result_t r = run_pair(&c);
    cr_assert_geq(r.rstats.reconnects, 5);
    cr_assert_gt(r.rstats.nacks_sent, 0);
}
