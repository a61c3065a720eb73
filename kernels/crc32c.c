/*
 * crc32c.c - CRC32C (Castagnoli, reflected polynomial 0x82F63B78).
 *
 * Convention: the usual one (initial ~0, final ~0) folded into the API so
 * that chaining starts from 0:  crc = dc_crc32c(0, "123456789", 9) ==
 * 0xE3069283, and dc_crc32c(dc_crc32c(0, a, n), b, m) == crc of a||b.
 *
 * Implementations, best first:
 *   ISA-L crc32_iscsi (PCLMUL folding; its init/result are the raw register,
 *     so we pass ~crc and invert the result; its length is an int, so long
 *     buffers go in 1 GiB pieces),
 *   SSE4.2 crc32 instruction, three interleaved streams combined with
 *     precomputed shift tables (x86-64 without ISA-L),
 *   slicing-by-8 tables (anywhere).
 */
#include "kernels/kern.h"

#include "kernels/kern_impl.h"

#include <pthread.h>

#if DC_HAVE_ISAL
#include <isa-l/crc.h>
#endif
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define CRC32C_POLY 0x82F63B78u

/* ------------------------------------------------------------------------ */
/*  Tables                                                                  */
/* ------------------------------------------------------------------------ */

static uint32_t g_tab[8][256];
/* Operators "append LONG (resp. SHORT) zero bytes" as 4 byte tables. */
#define CRC_LONG 8192u
#define CRC_SHORT 256u
static uint32_t g_long[4][256];
static uint32_t g_short[4][256];
static pthread_once_t g_tab_once = PTHREAD_ONCE_INIT;

/* Multiply a and b modulo P (bit-reflected GF(2) polynomials). */
static uint32_t gf2_mul(uint32_t a, uint32_t b)
{
    uint32_t prod = 0;
    for (int i = 0; i < 32; i++) {
        if (a & 0x80000000u)
            prod ^= b;
        a <<= 1;
        b = (b >> 1) ^ ((b & 1) ? CRC32C_POLY : 0);
    }
    return prod;
}

/* x^(8*len) mod P, reflected. */
static uint32_t x_pow_8n(size_t len)
{
    uint32_t result = 0x80000000u; /* x^0 */
    uint32_t sq = 0x00800000u;     /* x^8 */
    while (len) {
        if (len & 1)
            result = gf2_mul(result, sq);
        sq = gf2_mul(sq, sq);
        len >>= 1;
    }
    return result;
}

static void zeros_tables(uint32_t t[4][256], size_t len)
{
    uint32_t op = x_pow_8n(len);
    for (uint32_t n = 0; n < 256; n++) {
        t[0][n] = gf2_mul(op, n);
        t[1][n] = gf2_mul(op, n << 8);
        t[2][n] = gf2_mul(op, n << 16);
        t[3][n] = gf2_mul(op, n << 24);
    }
}

static inline uint32_t shift_crc(uint32_t t[4][256], uint32_t crc)
{
    return t[0][crc & 0xff] ^ t[1][(crc >> 8) & 0xff] ^ t[2][(crc >> 16) & 0xff] ^
           t[3][crc >> 24];
}

static void tables_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ ((c & 1) ? CRC32C_POLY : 0);
        g_tab[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = g_tab[0][n];
        for (int k = 1; k < 8; k++) {
            c = g_tab[0][c & 0xff] ^ (c >> 8);
            g_tab[k][n] = c;
        }
    }
    zeros_tables(g_long, CRC_LONG);
    zeros_tables(g_short, CRC_SHORT);
}

/* Portable slicing-by-8.  `crc` is the raw (pre-inverted) register. */
static uint32_t crc_sw_raw(uint32_t crc, const uint8_t *p, size_t len)
{
    while (len && ((uintptr_t)p & 7)) {
        crc = g_tab[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        len--;
    }
    while (len >= 8) {
        uint64_t v = dc_load_le64(p) ^ crc;
        crc = g_tab[7][v & 0xff] ^ g_tab[6][(v >> 8) & 0xff] ^ g_tab[5][(v >> 16) & 0xff] ^
              g_tab[4][(v >> 24) & 0xff] ^ g_tab[3][(v >> 32) & 0xff] ^
              g_tab[2][(v >> 40) & 0xff] ^ g_tab[1][(v >> 48) & 0xff] ^ g_tab[0][v >> 56];
        p += 8;
        len -= 8;
    }
    while (len--)
        crc = g_tab[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

uint32_t dc_crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&g_tab_once, tables_init);
    return ~crc_sw_raw(~crc, buf, len);
}

/* ------------------------------------------------------------------------ */
/*  SSE4.2                                                                  */
/* ------------------------------------------------------------------------ */

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hw_raw(uint32_t crc0, const uint8_t *p,
                                                             size_t len)
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
    while (len >= 8) {
        crc = _mm_crc32_u64(crc, dc_load_le64(p));
        p += 8;
        len -= 8;
    }
    while (len--)
        crc = _mm_crc32_u8((uint32_t)crc, *p++);
    return (uint32_t)crc;
}

uint32_t dc_crc32c_sse42(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&g_tab_once, tables_init);
    return ~crc_hw_raw(~crc, buf, len);
}
#endif

/* ------------------------------------------------------------------------ */
/*  Public                                                                  */
/* ------------------------------------------------------------------------ */

#if DC_HAVE_ISAL
uint32_t dc_crc32c_isal(uint32_t crc, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    uint32_t raw = ~crc;
    while (len > 0) {
        size_t piece = DC_MIN(len, (size_t)1 << 30);
        /* ISA-L takes a non-const pointer but does not write through it. */
        raw = crc32_iscsi((unsigned char *)(uintptr_t)p, (int)piece, raw);
        p += piece;
        len -= piece;
    }
    return ~raw;
}
#endif

uint32_t dc_crc32c(uint32_t crc, const void *buf, size_t len)
{
#if DC_HAVE_ISAL
    return dc_crc32c_isal(crc, buf, len);
#else
#if defined(__x86_64__)
    if (__builtin_cpu_supports("sse4.2"))
        return dc_crc32c_sse42(crc, buf, len);
#endif
    return dc_crc32c_sw(crc, buf, len);
#endif
}

/* Combining: crc(A || B) = crc(A) * x^(8 |B|) mod P  XOR  crc(B).  The
 * pre- and post-inversions of the two CRCs cancel (as in zlib's
 * crc32_combine), so finished CRCs combine as they are. */
uint32_t dc_crc32c_shift_op(size_t len)
{
    return x_pow_8n(len);
}

uint32_t dc_crc32c_combine_op(uint32_t crc1, uint32_t crc2, uint32_t op)
{
    return gf2_mul(op, crc1) ^ crc2;
}

uint32_t dc_crc32c_combine(uint32_t crc1, uint32_t crc2, size_t len2)
{
    return gf2_mul(x_pow_8n(len2), crc1) ^ crc2;
}

const char *dc_crc32c_impl(void)
{
#if DC_HAVE_ISAL
    return "isa-l";
#else
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2"))
        return "sse4.2";
#endif
    return "table";
#endif
}
