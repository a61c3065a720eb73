/*
 * crc32c_hw.h - private to crc32c_sse42.c and crc32c_avx512.c (x86-64 files
 * compiled for SSE4.2 or more): the crc32 instruction over the last bytes
 * of a buffer, the tail of both hardware paths.
 */
#ifndef DC_CRC32C_HW_H
#define DC_CRC32C_HW_H

#include "util/dc_util.h"

#include <immintrin.h>

/* The raw register `c` over the last len bytes at p: 8 bytes a step, then
 * single bytes (the tail of both hardware paths). */
static inline uint32_t dc_crc_hw_tail(uint64_t c, const uint8_t *p, size_t len)
{
    while (len >= 8) {
        c = _mm_crc32_u64(c, dc_load_le64(p));
        p += 8;
        len -= 8;
    }
    while (len--)
        c = _mm_crc32_u8((uint32_t)c, *p++);
    return (uint32_t)c;
}

#endif /* DC_CRC32C_HW_H */
