/*
 * crc32c.c - CRC32C (Castagnoli, reflected polynomial 0x82F63B78).
 *
 * Convention: the usual one (initial ~0, final ~0) folded into the API so
 * that chaining starts from 0:  crc = dc_crc32c(0, "123456789", 9) ==
 * 0xE3069283, and dc_crc32c(dc_crc32c(0, a, n), b, m) == crc of a||b.
 *
 * Implementations, best first (picked once from the CPU's features,
 * kern_isa.h dc_kern_cpu(); DELTACAST_KERN_ISA does not change the pick):
 *   AVX-512 + VPCLMULQDQ folding of 256 bytes per step (crc32c_avx512.c; in cache
 *     77 GB/s at 4 KiB, 56 at 512 KiB on this VM's core, ISA-L 2.30's
 *     74 / 53, SSE4.2 three-way 20),
 *   ISA-L crc32_iscsi (PCLMUL folding; its init/result are the raw register,
 *     so we pass ~crc and invert the result; its length is an int, so long
 *     buffers go in 1 GiB pieces),
 *   SSE4.2 crc32 instruction, three interleaved streams combined with
 *     precomputed shift tables (x86-64 without ISA-L; crc32c_sse42.c),
 *   slicing-by-8 tables (anywhere).
 */
#include "kernels/kern.h"

#include "kernels/kern_impl.h"
#include "kernels/kern_isa.h"

#include <pthread.h>

#if DC_HAVE_ISAL
#include <isa-l/crc.h>
#endif

#define CRC32C_POLY 0x82F63B78u

typedef uint32_t (*crc_fn_t)(uint32_t, const void *, size_t);

/* ------------------------------------------------------------------------ */
/*  Tables                                                                  */
/* ------------------------------------------------------------------------ */

static uint32_t g_tab[8][256];
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

/* The fastest implementation here, chosen once: the AVX-512 folding (as fast
 * as ISA-L's own AVX-512 code, and there without ISA-L), ISA-L, the SSE4.2
 * instruction, the tables. */
static crc_fn_t g_crc_fn;
static const char *g_crc_name;
static pthread_once_t g_crc_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__)
/* AVX-512 + VPCLMULQDQ (crc32c_avx512.c) runs on this CPU and build. */
int dc_crc32c_vpclmul_ok(void)
{
#if DC_KERN_EMU_AVX512
    /* emulated: what DC_EMU_TARGET needs */
    return dc_kern_level_runs(DC_KERN_AVX512);
#else
    unsigned want = DC_CPU_AVX512F | DC_CPU_AVX512VL | DC_CPU_VPCLMULQDQ | DC_CPU_PCLMUL |
                    DC_CPU_SSE42;
    return (dc_kern_cpu() & want) == want;
#endif
}
#endif

static void crc_pick(void)
{
#if defined(__x86_64__)
    if (dc_crc32c_vpclmul_ok()) {
        g_crc_fn = dc_crc32c_vpclmul;
        g_crc_name = "avx512-vpclmulqdq";
        return;
    }
#endif
#if DC_HAVE_ISAL
    g_crc_fn = dc_crc32c_isal;
    g_crc_name = "isa-l";
    return;
#else
#if defined(__x86_64__)
    if (dc_kern_cpu() & DC_CPU_SSE42) {
        g_crc_fn = dc_crc32c_sse42;
        g_crc_name = "sse4.2";
        return;
    }
#endif
    g_crc_fn = dc_crc32c_sw;
    g_crc_name = "table";
#endif
}

uint32_t dc_crc32c(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&g_crc_once, crc_pick);
    return g_crc_fn(crc, buf, len);
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
    pthread_once(&g_crc_once, crc_pick);
    return g_crc_name;
}
