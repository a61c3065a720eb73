/*
 * xorshift.h - the kernel tests' deterministic generator (xorshift64,
 * shifts 13/7/17): a test file defines XORSHIFT_SEED (its own stream),
 * then includes this for rnd().
 */
#ifndef DC_TESTS_KERNELS_XORSHIFT_H
#define DC_TESTS_KERNELS_XORSHIFT_H

#include <stdint.h>

static uint64_t g_rng = XORSHIFT_SEED;
static uint64_t rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

#endif
