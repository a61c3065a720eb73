/*
 * crc32c_avx512.c - CRC32C by AVX-512 + VPCLMULQDQ folding of 256 bytes per
 * step (see crc32c.c, which picks it where dc_crc32c_vpclmul_ok()).  The
 * whole file is compiled for AVX-512 + VPCLMULQDQ (the pragma below), or,
 * with -Dkern_emu=avx512, for what the emulation of those intrinsics needs
 * (kernels/emu).
 */
#if defined(__x86_64__)
#if DC_KERN_EMU_AVX512
/* kernels/emu/avx512_emu.h DC_EMU_TARGET_STR */
#pragma GCC target("avx2,bmi,bmi2,popcnt,lzcnt,sse4.2,pclmul")
#elif defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.2"))), \
                             apply_to = function)
#else
#pragma GCC target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.2")
#endif
#endif

#include "kernels/kern_impl.h"

#if defined(__x86_64__)

#if DC_KERN_EMU_AVX512
#include "kernels/emu/avx512_emu.h"
#endif
#include "kernels/crc32c_hw.h"

#include <pthread.h>

/* Carry-less folding (Intel, "Fast CRC Computation for Generic Polynomials
 * Using PCLMULQDQ", reflected form): a 128-bit lane A that lies D bytes
 * before lane B is folded onto it as clmul(A.lo, k_lo(D)) ^ clmul(A.hi,
 * k_hi(D)) ^ B, with k_lo(D) = reflect32(x^(8D+32) mod P) << 1 and
 * k_hi(D) = reflect32(x^(8D-32) mod P) << 1 (the formula gives zlib's
 * CRC-32 constants for that polynomial).  Four zmm registers (16 lanes,
 * 256 bytes) fold in parallel; what is left is one 128-bit value whose
 * CRC32C, taken with the crc32 instruction, continues into the tail.  The
 * constants are computed once from the polynomial, not transcribed. */
enum { FOLD_256, FOLD_192, FOLD_128, FOLD_64, FOLD_48, FOLD_32, FOLD_16, FOLD_N };
static const unsigned FOLD_BYTES[FOLD_N] = {256, 192, 128, 64, 48, 32, 16};
static uint64_t g_fold[FOLD_N][2]; /* {k_lo, k_hi} */

/* reflect32(x^e mod P) << 1, P = 0x11EDC6F41 in the normal bit order */
static uint64_t fold_const(unsigned e)
{
    uint64_t r = 1;
    for (unsigned i = 0; i < e; i++) {
        r <<= 1;
        if (r >> 32)
            r ^= 0x11EDC6F41ull;
    }
    uint32_t v = (uint32_t)r, rv = 0;
    for (int i = 0; i < 32; i++)
        rv |= ((v >> i) & 1u) << (31 - i);
    return (uint64_t)rv << 1;
}

static void fold_init(void)
{
    for (int i = 0; i < FOLD_N; i++) {
        g_fold[i][0] = fold_const(8 * FOLD_BYTES[i] + 32);
        g_fold[i][1] = fold_const(8 * FOLD_BYTES[i] - 32);
    }
}
static pthread_once_t g_fold_once = PTHREAD_ONCE_INIT;

static inline __m512i fold512(__m512i a, __m512i k, __m512i b)
{
    __m512i lo = _mm512_clmulepi64_epi128(a, k, 0x00);
    __m512i hi = _mm512_clmulepi64_epi128(a, k, 0x11);
    return _mm512_ternarylogic_epi64(lo, hi, b, 0x96); /* lo ^ hi ^ b */
}

static inline __m128i fold128(__m128i a, int f, __m128i b)
{
    __m128i k = _mm_set_epi64x((long long)g_fold[f][1], (long long)g_fold[f][0]);
    __m128i lo = _mm_clmulepi64_si128(a, k, 0x00);
    __m128i hi = _mm_clmulepi64_si128(a, k, 0x11);
    return _mm_ternarylogic_epi64(lo, hi, b, 0x96);
}

static inline __m512i kvec(int f)
{
    return _mm512_broadcast_i32x4(
        _mm_set_epi64x((long long)g_fold[f][1], (long long)g_fold[f][0]));
}

/* `crc` is the raw register; len >= 256 */
static uint32_t crc_vp_raw(uint32_t crc, const uint8_t *p, size_t len)
{
    __m512i x0 = _mm512_loadu_si512(p), x1 = _mm512_loadu_si512(p + 64);
    __m512i x2 = _mm512_loadu_si512(p + 128), x3 = _mm512_loadu_si512(p + 192);
    /* the register's initial value goes into the first four bytes */
    x0 = _mm512_xor_si512(x0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)crc)));
    p += 256;
    len -= 256;
    const __m512i k256 = kvec(FOLD_256);
    while (len >= 256) {
        x0 = fold512(x0, k256, _mm512_loadu_si512(p));
        x1 = fold512(x1, k256, _mm512_loadu_si512(p + 64));
        x2 = fold512(x2, k256, _mm512_loadu_si512(p + 128));
        x3 = fold512(x3, k256, _mm512_loadu_si512(p + 192));
        p += 256;
        len -= 256;
    }
    /* four registers into one: x0 lies 192 bytes before x3, x1 128, x2 64 */
    __m512i x = fold512(x0, kvec(FOLD_192), x3);
    x = fold512(x1, kvec(FOLD_128), x);
    x = fold512(x2, kvec(FOLD_64), x);
    const __m512i k64 = kvec(FOLD_64);
    while (len >= 64) {
        x = fold512(x, k64, _mm512_loadu_si512(p));
        p += 64;
        len -= 64;
    }
    /* four lanes into one */
    __m128i r = _mm512_extracti32x4_epi32(x, 3);
    r = fold128(_mm512_extracti32x4_epi32(x, 0), FOLD_48, r);
    r = fold128(_mm512_extracti32x4_epi32(x, 1), FOLD_32, r);
    r = fold128(_mm512_extracti32x4_epi32(x, 2), FOLD_16, r);
    while (len >= 16) {
        r = fold128(r, FOLD_16, _mm_loadu_si128((const __m128i *)p));
        p += 16;
        len -= 16;
    }
    /* the CRC of the 16 folded bytes, from a zero register, then the tail */
    uint64_t c = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(r));
    c = _mm_crc32_u64(c, (uint64_t)_mm_extract_epi64(r, 1));
    return dc_crc_hw_tail(c, p, len);
}

uint32_t dc_crc32c_vpclmul(uint32_t crc, const void *buf, size_t len)
{
    if (len < 256)
        return dc_crc32c_sse42(crc, buf, len);
    pthread_once(&g_fold_once, fold_init);
    return ~crc_vp_raw(~crc, buf, len);
}

#if defined(__clang__) && !DC_KERN_EMU_AVX512
#pragma clang attribute pop
#endif
#else
typedef int dc_crc32c_avx512_unused;
#endif /* __x86_64__ */
