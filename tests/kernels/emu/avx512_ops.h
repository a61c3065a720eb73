/*
 * avx512_ops.h - the AVX-512 operations tests/kernels/emu checks, written
 * once with the <immintrin.h> names and compiled twice: against the
 * emulation (test_avx512_emu.c, after kernels/emu/avx512_emu.h) and against
 * the real instructions (avx512_native.c, run only where the CPU has them).
 * Both builds must give the same bytes; test_avx512_emu.c also checks the
 * emulation's own intrinsics against plain C written from the Intel SDM.
 *
 * Every operation reads a and b (64 bytes each), the mask k and p (a
 * 512-byte table) and writes out (64 bytes) and *mo (a mask).  The includer
 * defines DC_EMU_OP_ATTR (the functions' attributes) and DC_EMU_OP(name)
 * (their names).
 */
#ifndef DC_TESTS_KERNELS_EMU_AVX512_OPS_H
#define DC_TESTS_KERNELS_EMU_AVX512_OPS_H

#include <stdint.h>

typedef void (*dc_emu_op_fn)(const uint8_t *pa, const uint8_t *pb, uint64_t k, const uint8_t *p,
                             uint8_t *out, uint64_t *mo);
typedef struct {
    const char *name;
    dc_emu_op_fn fn;
} dc_emu_op_t;

#define DC_EMU_ST(v) _mm512_storeu_si512(out, (v))
#define DC_EMU_ST256(v) _mm256_storeu_si256((__m256i *)out, (v))
#define DC_EMU_ST128(v) _mm_storeu_si128((__m128i *)out, (v))

/* X(name, statement) */
#define DC_EMU_OPS(X)                                                                          \
    X(cmpneq_epu8_mask, *mo = _mm512_cmpneq_epu8_mask(a, b))                                   \
    X(cmpneq_epu16_mask, *mo = _mm512_cmpneq_epu16_mask(a, b))                                 \
    X(cmpneq_epu32_mask, *mo = _mm512_cmpneq_epu32_mask(a, b))                                 \
    X(cmpneq_epu64_mask, *mo = _mm512_cmpneq_epu64_mask(a, b))                                 \
    X(cmpneq_epu64_mask_eq, *mo = _mm512_cmpneq_epu64_mask(a, _mm512_xor_si512(a, _mm512_and_si512(b, _mm512_set1_epi64(0x0100000000000001ll)))))                                         \
    X(cmpgt_epu32_mask, *mo = _mm512_cmpgt_epu32_mask(a, b))                                   \
    X(cmplt_epu32_mask, *mo = _mm512_cmplt_epu32_mask(a, b))                                   \
    X(cmplt_epi32_mask, *mo = _mm512_cmplt_epi32_mask(a, b))                                   \
    X(cmpgt_epu64_mask, *mo = _mm512_cmpgt_epu64_mask(a, b))                                   \
    X(cmpge_epu32_mask, *mo = _mm512_cmpge_epu32_mask(a, b))                                   \
    X(cmpge_epi32_mask, *mo = _mm512_cmpge_epi32_mask(a, b))                                   \
    X(cmple_epu32_mask, *mo = _mm512_cmple_epu32_mask(a, b))                                   \
    X(cmpeq_epi32_mask, *mo = _mm512_cmpeq_epi32_mask(a, _mm512_or_si512(a, _mm512_and_si512(b, _mm512_set1_epi32(0x00010000)))))                                                       \
    X(maskz_compress_epi8, DC_EMU_ST(_mm512_maskz_compress_epi8((__mmask64)k, a)))             \
    X(maskz_compress_epi16, DC_EMU_ST(_mm512_maskz_compress_epi16((__mmask32)k, a)))           \
    X(maskz_compress_epi32, DC_EMU_ST(_mm512_maskz_compress_epi32((__mmask16)k, a)))           \
    X(maskz_compress_epi64, DC_EMU_ST(_mm512_maskz_compress_epi64((__mmask8)k, a)))            \
    X(maskz_expand_epi32, DC_EMU_ST(_mm512_maskz_expand_epi32((__mmask16)k, a)))               \
    X(alignr_epi32_0, DC_EMU_ST(_mm512_alignr_epi32(a, b, 0)))                                 \
    X(alignr_epi32_1, DC_EMU_ST(_mm512_alignr_epi32(a, b, 1)))                                 \
    X(alignr_epi32_8, DC_EMU_ST(_mm512_alignr_epi32(a, b, 8)))                                 \
    X(alignr_epi32_15, DC_EMU_ST(_mm512_alignr_epi32(a, b, 15)))                               \
    X(shuffle_epi32_4e, DC_EMU_ST(_mm512_shuffle_epi32(a, (_MM_PERM_ENUM)0x4E)))               \
    X(shuffle_epi32_31, DC_EMU_ST(_mm512_shuffle_epi32(a, (_MM_PERM_ENUM)0x31)))               \
    X(shuffle_epi32_1b, DC_EMU_ST(_mm512_shuffle_epi32(a, (_MM_PERM_ENUM)0x1B)))               \
    X(mask_srli_epi32_16, DC_EMU_ST(_mm512_mask_srli_epi32(b, (__mmask16)k, a, 16)))           \
    X(mask_srli_epi32_3, DC_EMU_ST(_mm512_mask_srli_epi32(b, (__mmask16)k, a, 3)))             \
    X(zextsi128_si512, DC_EMU_ST(_mm512_zextsi128_si512(_mm512_castsi512_si128(a))))           \
    X(cvtepu8_epi32, DC_EMU_ST(_mm512_cvtepu8_epi32(_mm512_castsi512_si128(a))))               \
    X(cvtepi32_epi8, DC_EMU_ST128(_mm512_cvtepi32_epi8(a)))                                    \
    X(cvtepu16_epi32, DC_EMU_ST(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(a))))             \
    X(cvtepi32_epi16, DC_EMU_ST256(_mm512_cvtepi32_epi16(a)))                                  \
    X(cvtepu32_pd, DC_EMU_ST(_mm512_castpd_si512(_mm512_cvtepu32_pd(_mm512_castsi512_si256(a))))) \
    X(cvttpd_epu32_in, DC_EMU_ST256(_mm512_cvttpd_epu32(_mm512_mul_pd(_mm512_cvtepu32_pd(_mm512_castsi512_si256(a)), _mm512_set1_pd(0.37)))))                                            \
    X(cvttpd_epu32_big, DC_EMU_ST256(_mm512_cvttpd_epu32(_mm512_mul_pd(_mm512_cvtepu32_pd(_mm512_castsi512_si256(a)), _mm512_set1_pd(1.75)))))                                           \
    X(cvttpd_epu32_neg, DC_EMU_ST256(_mm512_cvttpd_epu32(_mm512_mul_pd(_mm512_cvtepu32_pd(_mm512_castsi512_si256(_mm512_and_si512(a, _mm512_set1_epi32(3)))), _mm512_set1_pd(-0.4)))))     \
    X(castsi256_si512_lo, DC_EMU_ST256(_mm512_castsi512_si256(_mm512_castsi256_si512(_mm512_castsi512_si256(a))))) \
    X(extracti64x4_1, DC_EMU_ST256(_mm512_extracti64x4_epi64(a, 1)))                           \
    X(inserti64x4_1, DC_EMU_ST(_mm512_inserti64x4(a, _mm512_castsi512_si256(b), 1)))           \
    X(inserti64x4_0, DC_EMU_ST(_mm512_inserti64x4(a, _mm512_castsi512_si256(b), 0)))           \
    X(clmul_00, DC_EMU_ST(_mm512_clmulepi64_epi128(a, b, 0x00)))                               \
    X(clmul_01, DC_EMU_ST(_mm512_clmulepi64_epi128(a, b, 0x01)))                               \
    X(clmul_10, DC_EMU_ST(_mm512_clmulepi64_epi128(a, b, 0x10)))                               \
    X(clmul_11, DC_EMU_ST(_mm512_clmulepi64_epi128(a, b, 0x11)))                               \
    X(maskz_loadu_epi8, DC_EMU_ST(_mm512_maskz_loadu_epi8((__mmask64)k, p)))                   \
    X(mask_storeu_epi8, _mm512_storeu_si512(out, b); _mm512_mask_storeu_epi8(out, (__mmask64)k, a)) \
    X(mask_cvtepi32_storeu_epi16, _mm512_storeu_si512(out, b); _mm512_mask_cvtepi32_storeu_epi16(out, (__mmask16)k, a)) \
    X(i32gather_epi32_4, DC_EMU_ST(_mm512_i32gather_epi32(_mm512_and_si512(a, _mm512_set1_epi32(127)), (const void *)p, 4))) \
    X(i32gather_epi32_2, DC_EMU_ST(_mm512_i32gather_epi32(_mm512_and_si512(a, _mm512_set1_epi32(255)), (const void *)p, 2))) \
    X(i32gather_epi32_neg, DC_EMU_ST(_mm512_i32gather_epi32(_mm512_sub_epi32(_mm512_and_si512(a, _mm512_set1_epi32(63)), _mm512_set1_epi32(32)), (const void *)(p + 256), 4))) \
    X(permutexvar_epi8, DC_EMU_ST(_mm512_permutexvar_epi8(a, b)))                              \
    X(permutexvar_epi64, DC_EMU_ST(_mm512_permutexvar_epi64(a, b)))                            \
    X(mask_blend_epi32, DC_EMU_ST(_mm512_mask_blend_epi32((__mmask16)k, a, b)))                \
    X(ternarylogic_96, DC_EMU_ST(_mm512_ternarylogic_epi64(a, b, _mm512_set1_epi64((long long)k), 0x96))) \
    X(ternarylogic_ca, DC_EMU_ST(_mm512_ternarylogic_epi64(a, b, _mm512_set1_epi64((long long)k), 0xCA))) \
    X(mul_epu32, DC_EMU_ST(_mm512_mul_epu32(a, b)))                                            \
    X(mullo_epi32, DC_EMU_ST(_mm512_mullo_epi32(a, b)))                                        \
    X(srlv_epi32, DC_EMU_ST(_mm512_srlv_epi32(a, _mm512_and_si512(b, _mm512_set1_epi32(63))))) \
    X(sllv_epi32, DC_EMU_ST(_mm512_sllv_epi32(a, _mm512_and_si512(b, _mm512_set1_epi32(63))))) \
    X(sllv_epi64, DC_EMU_ST(_mm512_sllv_epi64(a, _mm512_and_si512(b, _mm512_set1_epi64(127))))) \
    X(srl_epi32, DC_EMU_ST(_mm512_srl_epi32(a, _mm_cvtsi32_si128((int)(k & 63)))))             \
    X(sll_epi32, DC_EMU_ST(_mm512_sll_epi32(a, _mm_cvtsi32_si128((int)(k & 63)))))             \
    X(mask_add_epi32, DC_EMU_ST(_mm512_mask_add_epi32(a, (__mmask16)k, a, b)))                 \
    X(mask_sub_epi32, DC_EMU_ST(_mm512_mask_sub_epi32(b, (__mmask16)k, a, b)))                 \
    X(mask_or_epi32, DC_EMU_ST(_mm512_mask_or_epi32(a, (__mmask16)k, a, _mm512_slli_epi32(b, 7)))) \
    X(extracti32x4_2, DC_EMU_ST128(_mm512_extracti32x4_epi32(a, 2)))                           \
    X(broadcast_i32x4, DC_EMU_ST(_mm512_broadcast_i32x4(_mm512_castsi512_si128(a))))           \
    X(set_epi8_iota, DC_EMU_ST(_mm512_add_epi64(a, _mm512_set_epi8(63, 62, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48, 47, 46, 45, 44, 43, 42, 41, 40, 39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)))) \
    X(set_epi64, DC_EMU_ST(_mm512_xor_si512(a, _mm512_set_epi64(7, 5, 3, 1, 6, 4, 2, 0))))     \
    X(srli_slli_epi64, DC_EMU_ST(_mm512_add_epi64(_mm512_srli_epi64(a, 47), _mm512_slli_epi64(b, 32)))) \
    X(add_sub_epi32, DC_EMU_ST(_mm512_sub_epi32(_mm512_add_epi32(a, b), _mm512_set1_epi32((int)k))))

#define DC_EMU_OP_DEFINE(name, stmt)                                                          \
    DC_EMU_OP_ATTR static void DC_EMU_OP(name)(const uint8_t *pa, const uint8_t *pb,          \
                                               uint64_t k, const uint8_t *p, uint8_t *out,    \
                                               uint64_t *mo)                                  \
    {                                                                                         \
        __m512i a = _mm512_loadu_si512(pa), b = _mm512_loadu_si512(pb);                       \
        (void)a, (void)b, (void)k, (void)p, (void)out, (void)mo;                              \
        stmt;                                                                                 \
    }
#define DC_EMU_OP_ENTRY(name, stmt) {#name, DC_EMU_OP(name)},

#endif /* DC_TESTS_KERNELS_EMU_AVX512_OPS_H */
