/*
 * avx512_emu.h - AVX-512 emulated on an AVX2 CPU, for testing only
 * (meson option -Dkern_emu=avx512, which defines DC_KERN_EMU_AVX512=1).
 *
 * The library's AVX-512 code (kern_avx512.c, digest_avx512.c, the AVX-512
 * coders of ent_*.c, the VPCLMULQDQ CRC of crc32c.c) is written with the
 * <immintrin.h> intrinsics.  With the option, those translation units
 * include this header instead of asking the compiler for AVX-512: every
 * _mm512_* intrinsic they use becomes a macro for a portable function,
 * SIMDe's (libsimde-dev, without its native aliases) where SIMDe 0.7.4 has
 * one, else one of the dc_emu_* functions below, written from the Intel SDM
 * pseudo-code.  The vector types stay the compiler's own (__m512i,
 * __m512d, __mmaskN: SIMDe takes GCC's types once <immintrin.h> is in), so
 * the 256- and 128-bit intrinsics the same functions use run natively under
 * DC_EMU_TARGET (AVX2 and friends).  The result: the AVX-512 paths run, and
 * can be tested, under valgrind and sanitizers, on CPUs without AVX-512.
 *
 * Faithfulness, where it matters for finding bugs:
 *  - masked loads read only the bytes their mask selects, masked stores
 *    write only those (as the hardware, which suppresses faults there);
 *  - aligned loads and stores (load/store/stream) trap on an address that
 *    is not 64-byte aligned, as the hardware raises #GP;
 *  - bits the SDM leaves undefined (the upper half of a 256-to-512-bit
 *    cast) are filled with garbage, so that a result depending on them
 *    differs from the reference;
 *  - gathers read exactly the elements they name.
 * It is not cycle- or exception-exact otherwise: no floating-point
 * exceptions, no MXCSR (the one conversion used, cvttpd_epu32, truncates).
 *
 * Only the intrinsics the library uses are provided; a new one in the
 * AVX-512 code fails to compile with the option until it is added here
 * (tests/kernels/emu/test_avx512_emu.c checks the dc_emu_* ones).
 */
#ifndef DC_KERN_EMU_AVX512_H
#define DC_KERN_EMU_AVX512_H

#if !defined(__x86_64__) || !defined(__GNUC__) || defined(__clang__)
#error "the AVX-512 emulation is for GCC on x86-64"
#endif

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include <simde/x86/avx512.h>

/* What the emulated functions are compiled for (instead of AVX-512): the
 * ISA the library's avx2 table needs, plus what the AVX-512 functions use
 * at 128/256 bits (SSE4.2 CRC, PCLMULQDQ).  dc_kern_isa_supported("avx512")
 * checks the same list in emulated builds. */
#define DC_EMU_TARGET_STR "avx2,bmi,bmi2,popcnt,lzcnt,sse4.2,pclmul"
#define DC_EMU_TARGET __attribute__((target(DC_EMU_TARGET_STR)))

#define DC_EMU_FN static inline __attribute__((unused))
#define DC_EMU_FN256 static inline __attribute__((unused, target(DC_EMU_TARGET_STR)))

/* lanes of a 512-bit register */
typedef union {
    __m512i v;
    __m512d d;
    uint8_t u8[64];
    uint16_t u16[32];
    uint32_t u32[16];
    int32_t i32[16];
    uint64_t u64[8];
    double f64[8];
} dc_emu_v512;

typedef union {
    __m256i v;
    uint8_t u8[32];
    uint16_t u16[16];
    uint32_t u32[8];
} dc_emu_v256;

typedef union {
    __m128i v;
    uint8_t u8[16];
    uint32_t u32[4];
    uint64_t u64[2];
} dc_emu_v128;

DC_EMU_FN dc_emu_v512 dc_emu_in(__m512i a)
{
    dc_emu_v512 r;
    r.v = a;
    return r;
}

/* An instruction that needs an aligned operand faults on any other. */
DC_EMU_FN void dc_emu_check_align(const void *p)
{
    if ((uintptr_t)p & 63)
        __builtin_trap();
}

/* --- loads and stores ---------------------------------------------------- */

DC_EMU_FN __m512i dc_emu_load_si512(const void *p)
{
    dc_emu_check_align(p);
    dc_emu_v512 r;
    memcpy(&r, p, 64);
    return r.v;
}

DC_EMU_FN void dc_emu_store_si512(void *p, __m512i a)
{
    dc_emu_check_align(p);
    memcpy(p, &a, 64);
}

/* VMOVNTDQA / VMOVNTDQ: aligned; the non-temporal hint has no effect on
 * the bytes */
#define dc_emu_stream_load_si512(p) dc_emu_load_si512((const void *)(p))
#define dc_emu_stream_si512(p, a) dc_emu_store_si512((void *)(p), (a))

/* VMOVDQU8 with a zeroing mask: only the selected bytes are read */
DC_EMU_FN __m512i dc_emu_maskz_loadu_epi8(__mmask64 k, const void *p)
{
    const uint8_t *s = p;
    dc_emu_v512 r;
    for (unsigned i = 0; i < 64; i++)
        r.u8[i] = (k >> i & 1) ? s[i] : 0;
    return r.v;
}

DC_EMU_FN void dc_emu_mask_storeu_epi8(void *p, __mmask64 k, __m512i a)
{
    dc_emu_v512 x = dc_emu_in(a);
    uint8_t *d = p;
    for (unsigned i = 0; i < 64; i++)
        if (k >> i & 1)
            d[i] = x.u8[i];
}

/* VPMOVDW to memory under a mask: the low words of the selected lanes */
DC_EMU_FN void dc_emu_mask_cvtepi32_storeu_epi16(void *p, __mmask16 k, __m512i a)
{
    dc_emu_v512 x = dc_emu_in(a);
    uint8_t *d = p;
    for (unsigned i = 0; i < 16; i++)
        if (k >> i & 1) {
            uint16_t w = (uint16_t)x.u32[i];
            memcpy(d + 2 * i, &w, 2);
        }
}

/* VPGATHERDD without a mask: lane i from base + sext(idx[i]) * scale */
#define dc_emu_i32gather_epi32(idx, base, scale)                              \
    dc_emu_i32gather_epi32_((idx), (const void *)(base), (scale))
DC_EMU_FN __m512i dc_emu_i32gather_epi32_(__m512i idx, const void *base, int scale)
{
    dc_emu_v512 x = dc_emu_in(idx), r;
    for (unsigned i = 0; i < 16; i++)
        memcpy(&r.u32[i], (const uint8_t *)base + (int64_t)x.i32[i] * scale, 4);
    return r.v;
}

/* --- comparisons into masks ---------------------------------------------- */

#define DC_EMU_CMP(NAME, MT, LANES, FIELD, T, OP)                             \
    DC_EMU_FN MT dc_emu_##NAME(__m512i a, __m512i b)                          \
    {                                                                         \
        dc_emu_v512 x = dc_emu_in(a), y = dc_emu_in(b);                       \
        uint64_t m = 0;                                                       \
        for (unsigned i = 0; i < (LANES); i++)                                \
            m |= (uint64_t)((T)x.FIELD[i] OP (T)y.FIELD[i]) << i;             \
        return (MT)m;                                                         \
    }
DC_EMU_CMP(cmpneq_epu8_mask, __mmask64, 64, u8, uint8_t, !=)
DC_EMU_CMP(cmpneq_epu16_mask, __mmask32, 32, u16, uint16_t, !=)
DC_EMU_CMP(cmpneq_epu32_mask, __mmask16, 16, u32, uint32_t, !=)
DC_EMU_CMP(cmpneq_epu64_mask, __mmask8, 8, u64, uint64_t, !=)
DC_EMU_CMP(cmpgt_epu32_mask, __mmask16, 16, u32, uint32_t, >)
DC_EMU_CMP(cmplt_epu32_mask, __mmask16, 16, u32, uint32_t, <)
DC_EMU_CMP(cmplt_epi32_mask, __mmask16, 16, i32, int32_t, <)
DC_EMU_CMP(cmpgt_epu64_mask, __mmask8, 8, u64, uint64_t, >)
#undef DC_EMU_CMP

/* --- data movement ------------------------------------------------------- */

/* VPCOMPRESS{B,W} with a zeroing mask: the selected elements packed at the
 * bottom, the rest zero */
DC_EMU_FN __m512i dc_emu_compress(uint64_t k, __m512i a, unsigned w)
{
    dc_emu_v512 x = dc_emu_in(a), r;
    unsigned n = 0;
    memset(&r, 0, sizeof(r));
    for (unsigned i = 0; i < 64 / w; i++)
        if (k >> i & 1)
            memcpy(r.u8 + w * n++, x.u8 + w * i, w);
    return r.v;
}
#define dc_emu_maskz_compress_epi8(k, a) dc_emu_compress((uint64_t)(__mmask64)(k), (a), 1)
#define dc_emu_maskz_compress_epi16(k, a) dc_emu_compress((uint64_t)(__mmask32)(k), (a), 2)

/* VPEXPANDD with a zeroing mask: the selected lanes take the lowest
 * elements of a in order, the rest zero */
DC_EMU_FN __m512i dc_emu_maskz_expand_epi32(__mmask16 k, __m512i a)
{
    dc_emu_v512 x = dc_emu_in(a), r;
    unsigned n = 0;
    for (unsigned i = 0; i < 16; i++)
        r.u32[i] = (k >> i & 1) ? x.u32[n++] : 0;
    return r.v;
}

/* VALIGND: (a:b) as 32 dwords shifted right by imm[3:0] dwords */
DC_EMU_FN __m512i dc_emu_alignr_epi32(__m512i a, __m512i b, int imm)
{
    dc_emu_v512 x = dc_emu_in(a), y = dc_emu_in(b), r;
    unsigned s = (unsigned)imm & 15;
    for (unsigned i = 0; i < 16; i++) {
        unsigned j = i + s;
        r.u32[i] = j < 16 ? y.u32[j] : x.u32[j - 16];
    }
    return r.v;
}

/* VPSHUFD: within each 128-bit lane */
DC_EMU_FN __m512i dc_emu_shuffle_epi32(__m512i a, int imm)
{
    dc_emu_v512 x = dc_emu_in(a), r;
    for (unsigned l = 0; l < 16; l += 4)
        for (unsigned j = 0; j < 4; j++)
            r.u32[l + j] = x.u32[l + ((unsigned)imm >> (2 * j) & 3)];
    return r.v;
}

/* VPSRLD under a merge mask */
DC_EMU_FN __m512i dc_emu_mask_srli_epi32(__m512i src, __mmask16 k, __m512i a, unsigned imm)
{
    dc_emu_v512 s = dc_emu_in(src), x = dc_emu_in(a), r;
    for (unsigned i = 0; i < 16; i++)
        r.u32[i] = (k >> i & 1) ? (imm > 31 ? 0 : x.u32[i] >> imm) : s.u32[i];
    return r.v;
}

DC_EMU_FN __m512i dc_emu_zextsi128_si512(__m128i a)
{
    dc_emu_v512 r;
    memset(&r, 0, sizeof(r));
    memcpy(&r, &a, 16);
    return r.v;
}

/* --- conversions (across register widths) ------------------------------ */

DC_EMU_FN __m512i dc_emu_cvtepu8_epi32(__m128i a)
{
    dc_emu_v128 x;
    dc_emu_v512 r;
    x.v = a;
    for (unsigned i = 0; i < 16; i++)
        r.u32[i] = x.u8[i];
    return r.v;
}

/* VPMOVDB: truncation */
DC_EMU_FN __m128i dc_emu_cvtepi32_epi8(__m512i a)
{
    dc_emu_v512 x = dc_emu_in(a);
    dc_emu_v128 r;
    for (unsigned i = 0; i < 16; i++)
        r.u8[i] = (uint8_t)x.u32[i];
    return r.v;
}

DC_EMU_FN256 __m512i dc_emu_cvtepu16_epi32(__m256i a)
{
    dc_emu_v256 x;
    dc_emu_v512 r;
    x.v = a;
    for (unsigned i = 0; i < 16; i++)
        r.u32[i] = x.u16[i];
    return r.v;
}

/* VPMOVDW: truncation */
DC_EMU_FN256 __m256i dc_emu_cvtepi32_epi16(__m512i a)
{
    dc_emu_v512 x = dc_emu_in(a);
    dc_emu_v256 r;
    for (unsigned i = 0; i < 16; i++)
        r.u16[i] = (uint16_t)x.u32[i];
    return r.v;
}

DC_EMU_FN256 __m512d dc_emu_cvtepu32_pd(__m256i a)
{
    dc_emu_v256 x;
    dc_emu_v512 r;
    x.v = a;
    for (unsigned i = 0; i < 8; i++)
        r.f64[i] = (double)x.u32[i];
    return r.d;
}

/* VCVTTPD2UDQ: truncation; NaN and out of range give 2^32 - 1 (the
 * unsigned integer indefinite) */
DC_EMU_FN256 __m256i dc_emu_cvttpd_epu32(__m512d a)
{
    dc_emu_v512 x;
    dc_emu_v256 r;
    x.d = a;
    for (unsigned i = 0; i < 8; i++) {
        double v = x.f64[i];
        r.u32[i] = v > -1.0 && v < 4294967296.0 ? (uint32_t)v : UINT32_MAX;
    }
    return r.v;
}

/* The upper 256 bits are undefined: garbage, never zero by accident. */
DC_EMU_FN256 __m512i dc_emu_castsi256_si512(__m256i a)
{
    dc_emu_v512 r;
    memset(&r, 0xA5, sizeof(r));
    memcpy(&r, &a, 32);
    return r.v;
}

DC_EMU_FN256 __m256i dc_emu_castsi512_si256(__m512i a)
{
    dc_emu_v256 r;
    memcpy(&r, &a, 32);
    return r.v;
}

DC_EMU_FN256 __m256i dc_emu_extracti64x4_epi64(__m512i a, int imm)
{
    dc_emu_v512 x = dc_emu_in(a);
    dc_emu_v256 r;
    memcpy(&r, x.u8 + 32 * (imm & 1), 32);
    return r.v;
}

DC_EMU_FN256 __m512i dc_emu_inserti64x4(__m512i a, __m256i b, int imm)
{
    dc_emu_v512 r = dc_emu_in(a);
    memcpy(r.u8 + 32 * (imm & 1), &b, 32);
    return r.v;
}

/* --- carry-less multiply -------------------------------------------------- */

/* VPCLMULQDQ (512): PCLMULQDQ in each 128-bit lane, with the native
 * 128-bit instruction (SIMDe's portable one is a bit loop) */
DC_EMU_FN256 __m512i dc_emu_clmulepi64_epi128_(__m512i a, __m512i b, int imm)
{
    dc_emu_v512 x = dc_emu_in(a), y = dc_emu_in(b), r;
    for (unsigned l = 0; l < 4; l++) {
        dc_emu_v128 p, q, o;
        memcpy(&p, x.u8 + 16 * l, 16);
        memcpy(&q, y.u8 + 16 * l, 16);
        switch (imm & 0x11) {
        case 0x00: o.v = _mm_clmulepi64_si128(p.v, q.v, 0x00); break;
        case 0x01: o.v = _mm_clmulepi64_si128(p.v, q.v, 0x01); break;
        case 0x10: o.v = _mm_clmulepi64_si128(p.v, q.v, 0x10); break;
        default: o.v = _mm_clmulepi64_si128(p.v, q.v, 0x11); break;
        }
        memcpy(r.u8 + 16 * l, &o, 16);
    }
    return r.v;
}

/* --- the names the library's code uses ---------------------------------- */

/* from SIMDe */
#undef _mm512_add_epi32
#define _mm512_add_epi32 simde_mm512_add_epi32
#undef _mm512_add_epi64
#define _mm512_add_epi64 simde_mm512_add_epi64
#undef _mm512_and_si512
#define _mm512_and_si512 simde_mm512_and_si512
#undef _mm512_or_si512
#define _mm512_or_si512 simde_mm512_or_si512
#undef _mm512_xor_si512
#define _mm512_xor_si512 simde_mm512_xor_si512
#undef _mm512_sub_epi32
#define _mm512_sub_epi32 simde_mm512_sub_epi32
#undef _mm512_mul_epu32
#define _mm512_mul_epu32 simde_mm512_mul_epu32
#undef _mm512_mullo_epi32
#define _mm512_mullo_epi32 simde_mm512_mullo_epi32
#undef _mm512_mul_pd
#define _mm512_mul_pd simde_mm512_mul_pd
#undef _mm512_mask_add_epi32
#define _mm512_mask_add_epi32 simde_mm512_mask_add_epi32
#undef _mm512_mask_sub_epi32
#define _mm512_mask_sub_epi32 simde_mm512_mask_sub_epi32
#undef _mm512_mask_or_epi32
#define _mm512_mask_or_epi32 simde_mm512_mask_or_epi32
#undef _mm512_mask_blend_epi32
#define _mm512_mask_blend_epi32 simde_mm512_mask_blend_epi32
#undef _mm512_ternarylogic_epi64
#define _mm512_ternarylogic_epi64 simde_mm512_ternarylogic_epi64
#undef _mm_ternarylogic_epi64
#define _mm_ternarylogic_epi64 simde_mm_ternarylogic_epi64
#undef _mm512_sll_epi32
#define _mm512_sll_epi32 simde_mm512_sll_epi32
#undef _mm512_srl_epi32
#define _mm512_srl_epi32 simde_mm512_srl_epi32
#undef _mm512_slli_epi32
#define _mm512_slli_epi32 simde_mm512_slli_epi32
#undef _mm512_slli_epi64
#define _mm512_slli_epi64 simde_mm512_slli_epi64
#undef _mm512_srli_epi32
#define _mm512_srli_epi32 simde_mm512_srli_epi32
#undef _mm512_srli_epi64
#define _mm512_srli_epi64 simde_mm512_srli_epi64
#undef _mm512_sllv_epi32
#define _mm512_sllv_epi32 simde_mm512_sllv_epi32
#undef _mm512_sllv_epi64
#define _mm512_sllv_epi64 simde_mm512_sllv_epi64
#undef _mm512_srlv_epi32
#define _mm512_srlv_epi32 simde_mm512_srlv_epi32
#undef _mm512_cmpeq_epi32_mask
#define _mm512_cmpeq_epi32_mask simde_mm512_cmpeq_epi32_mask
#undef _mm512_cmpge_epi32_mask
#define _mm512_cmpge_epi32_mask simde_mm512_cmpge_epi32_mask
#undef _mm512_cmpge_epu32_mask
#define _mm512_cmpge_epu32_mask simde_mm512_cmpge_epu32_mask
#undef _mm512_cmple_epu32_mask
#define _mm512_cmple_epu32_mask simde_mm512_cmple_epu32_mask
#undef _mm512_maskz_compress_epi32
#define _mm512_maskz_compress_epi32 simde_mm512_maskz_compress_epi32
#undef _mm512_maskz_compress_epi64
#define _mm512_maskz_compress_epi64 simde_mm512_maskz_compress_epi64
#undef _mm512_permutexvar_epi8
#define _mm512_permutexvar_epi8 simde_mm512_permutexvar_epi8
#undef _mm512_permutexvar_epi64
#define _mm512_permutexvar_epi64 simde_mm512_permutexvar_epi64
#undef _mm512_broadcast_i32x4
#define _mm512_broadcast_i32x4 simde_mm512_broadcast_i32x4
#undef _mm512_extracti32x4_epi32
#define _mm512_extracti32x4_epi32 simde_mm512_extracti32x4_epi32
#undef _mm512_castsi512_si128
#define _mm512_castsi512_si128 simde_mm512_castsi512_si128
#undef _mm512_set1_epi32
#define _mm512_set1_epi32 simde_mm512_set1_epi32
#undef _mm512_set1_epi64
#define _mm512_set1_epi64 simde_mm512_set1_epi64
#undef _mm512_mask_set1_epi64
#define _mm512_mask_set1_epi64 simde_mm512_mask_set1_epi64
#undef _mm512_set1_pd
#define _mm512_set1_pd simde_mm512_set1_pd
#undef _mm512_set_epi8
#define _mm512_set_epi8 simde_mm512_set_epi8
#undef _mm512_set_epi64
#define _mm512_set_epi64 simde_mm512_set_epi64
#undef _mm512_setzero_si512
#define _mm512_setzero_si512 simde_mm512_setzero_si512
#undef _mm512_loadu_si512
#define _mm512_loadu_si512 simde_mm512_loadu_si512
#undef _mm512_storeu_si512
#define _mm512_storeu_si512 simde_mm512_storeu_si512

/* from here */
#undef _mm512_load_si512
#define _mm512_load_si512 dc_emu_load_si512
#undef _mm512_store_si512
#define _mm512_store_si512 dc_emu_store_si512
#undef _mm512_stream_load_si512
#define _mm512_stream_load_si512 dc_emu_stream_load_si512
#undef _mm512_stream_si512
#define _mm512_stream_si512 dc_emu_stream_si512
#undef _mm512_maskz_loadu_epi8
#define _mm512_maskz_loadu_epi8 dc_emu_maskz_loadu_epi8
#undef _mm512_mask_storeu_epi8
#define _mm512_mask_storeu_epi8 dc_emu_mask_storeu_epi8
#undef _mm512_mask_cvtepi32_storeu_epi16
#define _mm512_mask_cvtepi32_storeu_epi16 dc_emu_mask_cvtepi32_storeu_epi16
#undef _mm512_i32gather_epi32
#define _mm512_i32gather_epi32 dc_emu_i32gather_epi32
#undef _mm512_cmpneq_epu8_mask
#define _mm512_cmpneq_epu8_mask dc_emu_cmpneq_epu8_mask
#undef _mm512_cmpneq_epu16_mask
#define _mm512_cmpneq_epu16_mask dc_emu_cmpneq_epu16_mask
#undef _mm512_cmpneq_epu32_mask
#define _mm512_cmpneq_epu32_mask dc_emu_cmpneq_epu32_mask
#undef _mm512_cmpneq_epu64_mask
#define _mm512_cmpneq_epu64_mask dc_emu_cmpneq_epu64_mask
#undef _mm512_cmpgt_epu32_mask
#define _mm512_cmpgt_epu32_mask dc_emu_cmpgt_epu32_mask
#undef _mm512_cmplt_epu32_mask
#define _mm512_cmplt_epu32_mask dc_emu_cmplt_epu32_mask
#undef _mm512_cmplt_epi32_mask
#define _mm512_cmplt_epi32_mask dc_emu_cmplt_epi32_mask
#undef _mm512_cmpgt_epu64_mask
#define _mm512_cmpgt_epu64_mask dc_emu_cmpgt_epu64_mask
#undef _mm512_maskz_compress_epi8
#define _mm512_maskz_compress_epi8 dc_emu_maskz_compress_epi8
#undef _mm512_maskz_compress_epi16
#define _mm512_maskz_compress_epi16 dc_emu_maskz_compress_epi16
#undef _mm512_maskz_expand_epi32
#define _mm512_maskz_expand_epi32 dc_emu_maskz_expand_epi32
#undef _mm512_alignr_epi32
#define _mm512_alignr_epi32 dc_emu_alignr_epi32
#undef _mm512_shuffle_epi32
#define _mm512_shuffle_epi32(a, imm) dc_emu_shuffle_epi32((a), (int)(imm))
#undef _mm512_mask_srli_epi32
#define _mm512_mask_srli_epi32 dc_emu_mask_srli_epi32
#undef _mm512_zextsi128_si512
#define _mm512_zextsi128_si512 dc_emu_zextsi128_si512
#undef _mm512_cvtepu8_epi32
#define _mm512_cvtepu8_epi32 dc_emu_cvtepu8_epi32
#undef _mm512_cvtepi32_epi8
#define _mm512_cvtepi32_epi8 dc_emu_cvtepi32_epi8
#undef _mm512_cvtepu16_epi32
#define _mm512_cvtepu16_epi32 dc_emu_cvtepu16_epi32
#undef _mm512_cvtepi32_epi16
#define _mm512_cvtepi32_epi16 dc_emu_cvtepi32_epi16
#undef _mm512_cvtepu32_pd
#define _mm512_cvtepu32_pd dc_emu_cvtepu32_pd
#undef _mm512_cvttpd_epu32
#define _mm512_cvttpd_epu32 dc_emu_cvttpd_epu32
#undef _mm512_castsi256_si512
#define _mm512_castsi256_si512 dc_emu_castsi256_si512
#undef _mm512_castsi512_si256
#define _mm512_castsi512_si256 dc_emu_castsi512_si256
#undef _mm512_extracti64x4_epi64
#define _mm512_extracti64x4_epi64 dc_emu_extracti64x4_epi64
#undef _mm512_inserti64x4
#define _mm512_inserti64x4 dc_emu_inserti64x4
#undef _mm512_clmulepi64_epi128
#define _mm512_clmulepi64_epi128 dc_emu_clmulepi64_epi128_

#endif /* DC_KERN_EMU_AVX512_H */
