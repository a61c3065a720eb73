/*
 * emu_ctx_change.h - the XOR word of one changed element in the ctx-sparse
 * test payloads (test_emu_ctx.c's cases, fuzz_devctx.c's seeds), by value
 * pattern: EMU_PAT_XOR a low bit flipped, EMU_PAT_STEP the element's key
 * (ctx.h dc_ctx_key) moved by -2..2 (never 0), EMU_PAT_NEW a new word from
 * a few constants (weights reset or pruned: the XOR as random as the base).
 * rnd: the caller's random stream (one draw per change).
 */
#ifndef DC_TESTS_EMU_CTX_CHANGE_H
#define DC_TESTS_EMU_CTX_CHANGE_H

#include <stdint.h>

#include "kernels/ctx.h"

enum { EMU_PAT_XOR, EMU_PAT_STEP, EMU_PAT_NEW };

/* The XOR word (never 0) that changes base word b of w bytes by pattern pat. */
static inline uint64_t emu_ctx_change(uint64_t b, unsigned w, int pat, uint64_t (*rnd)(void))
{
    uint64_t mask = w == 8 ? ~0ull : (1ull << (8 * w)) - 1, x;
    if (pat == EMU_PAT_XOR) {
        x = 1ull << (rnd() % 3);
    } else if (pat == EMU_PAT_STEP) {
        int64_t d = (int64_t)(rnd() % 5) - 2;
        if (d == 0)
            d = 1;
        uint64_t k = (dc_ctx_key(b, w) + (uint64_t)d) & mask;
        x = dc_ctx_unkey(k, w) ^ b;
    } else {
        static const uint64_t consts[4] = {0, 0x3c, 0x7f01, 0x1234567};
        x = b ^ (consts[rnd() % 4] & mask);
    }
    return (x & mask) == 0 ? 1 : x & mask;
}

#endif
