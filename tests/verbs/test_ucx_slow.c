/* test_ucx_slow.c - the 1 GiB ucx transfers (suite 'slow'); the cases
 * live in test_ucx.c under DC_TEST_UCX_SLOW. */
#define DC_TEST_UCX_SLOW 1
#include "test_ucx.c"
