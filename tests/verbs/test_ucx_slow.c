/* test_ucx_slow.c - the 1 GiB and 256 MiB ucx transfers (suite 'slow'). */
#define XFER_TRANSPORT "ucx"
#include "xfer.h"

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
