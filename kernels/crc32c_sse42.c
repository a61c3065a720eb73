/*
 * crc32c_sse42.c - CRC32C with the SSE4.2 crc32 instruction: three
 * interleaved streams, combined with "shift by block length" tables (see
 * crc32c.c, which picks it on x86-64 without ISA-L).  The whole file is
 * compiled for SSE4.2 (the pragma below); nothing here runs unless the CPU
 * has it.
 */
#if defined(__x86_64__)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("sse4.2"))), apply_to = function)
#else
#pragma GCC target("sse4.2")
#endif
#endif

#include "kernels/kern_impl.h"

#if defined(__x86_64__)

#include "kernels/crc32c_hw.h"

#include <pthread.h>

/* Operators "append LONG (resp. SHORT) zero bytes" as 4 byte tables. */
#define CRC_LONG 8192u
#define CRC_SHORT 256u
static uint32_t g_long[4][256];
static uint32_t g_short[4][256];
static pthread_once_t g_zeros_once = PTHREAD_ONCE_INIT;

static void zeros_tables(uint32_t t[4][256], size_t len)
{
    uint32_t op = dc_crc32c_shift_op(len);
    for (uint32_t n = 0; n < 256; n++) {
        t[0][n] = dc_crc32c_combine_op(n, 0, op);
        t[1][n] = dc_crc32c_combine_op(n << 8, 0, op);
        t[2][n] = dc_crc32c_combine_op(n << 16, 0, op);
        t[3][n] = dc_crc32c_combine_op(n << 24, 0, op);
    }
}

static void zeros_init(void)
{
    zeros_tables(g_long, CRC_LONG);
    zeros_tables(g_short, CRC_SHORT);
}

static inline uint32_t shift_crc(uint32_t t[4][256], uint32_t crc)
{
    return t[0][crc & 0xff] ^ t[1][(crc >> 8) & 0xff] ^ t[2][(crc >> 16) & 0xff] ^
           t[3][crc >> 24];
}

static uint32_t crc_hw_raw(uint32_t crc0, const uint8_t *p, size_t len)
{
    uint64_t crc = crc0;
    while (len && ((uintptr_t)p & 7)) {
        crc = _mm_crc32_u8((uint32_t)crc, *p++);
        len--;
    }
    /* Three independent streams hide the instruction's 3-cycle latency;
     * the partial CRCs are combined by "shift by block length" tables. */
    while (len >= 3 * CRC_LONG) {
        uint64_t c1 = 0, c2 = 0;
        const uint8_t *end = p + CRC_LONG;
        do {
            crc = _mm_crc32_u64(crc, dc_load_le64(p));
            c1 = _mm_crc32_u64(c1, dc_load_le64(p + CRC_LONG));
            c2 = _mm_crc32_u64(c2, dc_load_le64(p + 2 * CRC_LONG));
            p += 8;
        } while (p < end);
        crc = shift_crc(g_long, (uint32_t)crc) ^ c1;
        crc = shift_crc(g_long, (uint32_t)crc) ^ c2;
        p += 2 * CRC_LONG;
        len -= 3 * CRC_LONG;
    }
    while (len >= 3 * CRC_SHORT) {
        uint64_t c1 = 0, c2 = 0;
        const uint8_t *end = p + CRC_SHORT;
        do {
            crc = _mm_crc32_u64(crc, dc_load_le64(p));
            c1 = _mm_crc32_u64(c1, dc_load_le64(p + CRC_SHORT));
            c2 = _mm_crc32_u64(c2, dc_load_le64(p + 2 * CRC_SHORT));
            p += 8;
        } while (p < end);
        crc = shift_crc(g_short, (uint32_t)crc) ^ c1;
        crc = shift_crc(g_short, (uint32_t)crc) ^ c2;
        p += 2 * CRC_SHORT;
        len -= 3 * CRC_SHORT;
    }
    return dc_crc_hw_tail(crc, p, len);
}

uint32_t dc_crc32c_sse42(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&g_zeros_once, zeros_init);
    return ~crc_hw_raw(~crc, buf, len);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
#else
typedef int dc_crc32c_sse42_unused;
#endif /* __x86_64__ */
