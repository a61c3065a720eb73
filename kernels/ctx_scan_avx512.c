/*
 * ctx_scan_avx512.c - the magnitude-class scan with AVX-512 (x86-64 only;
 * the file is compiled for AVX-512 F/BW, its table used only when
 * kern_isa.c picked avx512).  The threshold masks come straight out of
 * the compares as mask registers: per 64 16-bit elements two loads, two
 * ands and two compares per threshold (the AVX2 scan packs buckets to
 * bytes and moves masks out of vectors).  Rank and merge are the shared
 * ones (ctx_scan_impl.h) over these masks.  Same masks as the scalar
 * reference.  Under -Dkern_emu=avx512 the avx512 row keeps the AVX2 scan
 * (this file then defines nothing).
 */
#if defined(__x86_64__) && !DC_KERN_EMU_AVX512
#define DC_CTX_SCAN_AVX512 1
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx2,bmi,bmi2,popcnt"))), \
                             apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw,avx2,bmi,bmi2,popcnt")
#endif
#endif

#include "kernels/ctx_scan.h"

#if DC_CTX_SCAN_AVX512
#include <immintrin.h>

/* the AVX2 scan's block search (ctx_scan_avx2.c) */
static inline size_t dc_ctx_find_block_avx512(const uint32_t *pre, const uint32_t *pre8, size_t q,
                                              uint32_t rr)
{
    (void)q;
    const __m256i r = _mm256_set1_epi32((int)rr);
    unsigned le8 = 8u - (unsigned)__builtin_popcount((unsigned)_mm256_movemask_ps(
                            _mm256_castsi256_ps(_mm256_cmpgt_epi32(
                                _mm256_loadu_si256((const __m256i *)pre8), r))));
    size_t g = 8 * (size_t)le8;
    unsigned le = 8u - (unsigned)__builtin_popcount((unsigned)_mm256_movemask_ps(
                           _mm256_castsi256_ps(_mm256_cmpgt_epi32(
                               _mm256_loadu_si256((const __m256i *)(pre + g + 1)), r))));
    return g + le;
}
#define DC_CTX_FIND_BLOCK dc_ctx_find_block_avx512
#endif

#include "kernels/ctx_scan_impl.h"
#include "kernels/kern_isa.h"

#if DC_CTX_SCAN_AVX512

/* 64 16-bit elements: mag > thr - 1 (signed; mag has its top bit
 * cleared), one 32-bit mask per compare */
static inline __attribute__((always_inline)) void
dc_ge512_block16(const uint8_t *p, const __m512i *tv, unsigned nt, uint64_t *ge)
{
    const __m512i km = _mm512_set1_epi16(0x7fff);
    __m512i v0 = _mm512_and_si512(_mm512_loadu_si512(p), km);
    __m512i v1 = _mm512_and_si512(_mm512_loadu_si512(p + 64), km);
    for (unsigned j = 0; j < nt; j++)
        ge[j] = (uint64_t)(uint32_t)_mm512_cmpgt_epi16_mask(v0, tv[j]) |
                (uint64_t)(uint32_t)_mm512_cmpgt_epi16_mask(v1, tv[j]) << 32;
}

/* 64 8-bit elements: one compare per threshold */
static inline __attribute__((always_inline)) void
dc_ge512_block8(const uint8_t *p, const __m512i *tv, unsigned nt, uint64_t *ge)
{
    __m512i v = _mm512_and_si512(_mm512_loadu_si512(p), _mm512_set1_epi8(0x7f));
    for (unsigned j = 0; j < nt; j++)
        ge[j] = (uint64_t)_mm512_cmpgt_epi8_mask(v, tv[j]);
}

/* 64 32-bit elements: four 16-bit masks per threshold */
static inline __attribute__((always_inline)) void
dc_ge512_block32(const uint8_t *p, const __m512i *tv, unsigned nt, uint64_t *ge)
{
    const __m512i km = _mm512_set1_epi32(0x7fffffff);
    __m512i v[4];
    for (unsigned q = 0; q < 4; q++)
        v[q] = _mm512_and_si512(_mm512_loadu_si512(p + 64 * q), km);
    for (unsigned j = 0; j < nt; j++) {
        uint64_t m = 0;
        for (unsigned q = 0; q < 4; q++)
            m |= (uint64_t)(uint16_t)_mm512_cmpgt_epi32_mask(v[q], tv[j]) << (16 * q);
        ge[j] = m;
    }
}

static void dc_ctx_ge_avx512(const void *base, size_t n, unsigned w, const uint64_t *thr,
                             unsigned nt, uint64_t *ge)
{
    if (w == 8 || nt == 0) {
        dc_ctx_ge_scalar(base, n, w, thr, nt, ge);
        return;
    }
    __m512i tv[DC_CTX_MAX_CLASSES];
    for (unsigned j = 0; j < nt; j++) {
        /* mag >= thr  <=>  mag > thr - 1 (a threshold of 0: -1, below
         * every magnitude) */
        int64_t t = (int64_t)thr[j] - 1;
        tv[j] = w == 1 ? _mm512_set1_epi8((char)t)
                : w == 2 ? _mm512_set1_epi16((short)t)
                         : _mm512_set1_epi32((int)t);
    }
    const uint8_t *b = base;
    size_t full = n / 64;
    if (w == 2 && nt == DC_CTX_DEFAULT_NT) {
        /* the codec's default: the thresholds held in registers */
        _Static_assert(DC_CTX_DEFAULT_NT == 3, "t3 holds three thresholds");
        const __m512i t3[DC_CTX_DEFAULT_NT] = {tv[0], tv[1], tv[2]};
        for (size_t k = 0; k < full; k++)
            dc_ge512_block16(b + k * 128, t3, DC_CTX_DEFAULT_NT, ge + k * DC_CTX_DEFAULT_NT);
    } else {
        for (size_t k = 0; k < full; k++) {
            const uint8_t *p = b + k * 64 * w;
            if (w == 2)
                dc_ge512_block16(p, tv, nt, ge + k * nt);
            else if (w == 1)
                dc_ge512_block8(p, tv, nt, ge + k * nt);
            else
                dc_ge512_block32(p, tv, nt, ge + k * nt);
        }
    }
    if (n % 64)
        dc_ctx_ge_scalar(b + full * 64 * w, n % 64, w, thr, nt, ge + full * nt);
}

/* the merge's deposit by one pdep (only where it is fast) */
static inline uint64_t dc_ctx_deposit_pdep512(uint64_t x, uint64_t m)
{
    return _pdep_u64(x, m);
}

static void dc_ctx_rank_avx512(const void *base, size_t n, unsigned w, const uint64_t *thr,
                               unsigned nt, const uint32_t *pos, size_t count, uint8_t *cls,
                               uint32_t *rnk, uint64_t *pop, uint64_t *ge)
{
    /* the default class count as a constant (the per-block level loops
     * and the per-change class count unrolled) */
    if (nt == DC_CTX_DEFAULT_NT)
        dc_ctx_rank_impl(dc_ctx_ge_avx512, base, n, w, thr, DC_CTX_DEFAULT_NT, pos, count, cls, rnk, pop,
                         ge);
    else
        dc_ctx_rank_impl(dc_ctx_ge_avx512, base, n, w, thr, nt, pos, count, cls, rnk, pop, ge);
}

static unsigned dc_ctx_merge_slabs_avx512(const void *base, size_t n, unsigned w,
                                          const uint64_t *thr, unsigned nt, const uint32_t *idx,
                                          const size_t *off, uint32_t *pos, void *bw,
                                          dc_ctx_slab_fn fn, void *arg, uint64_t *ge)
{
    if (dc_kern_cpu() & DC_CPU_FAST_PDEP)
        return dc_ctx_merge_impl(dc_ctx_ge_avx512, dc_ctx_deposit_pdep512, base, n, w, thr, nt,
                                 idx, off, pos, bw, fn, arg, ge);
    return dc_ctx_merge_impl(dc_ctx_ge_avx512, dc_ctx_deposit_sel, base, n, w, thr, nt, idx, off,
                             pos, bw, fn, arg, ge);
}

static unsigned dc_ctx_merge_avx512(const void *base, size_t n, unsigned w, const uint64_t *thr,
                                    unsigned nt, const uint32_t *idx, const size_t *off,
                                    uint32_t *pos, void *bw, uint64_t *ge)
{
    return dc_ctx_merge_slabs_avx512(base, n, w, thr, nt, idx, off, pos, bw, NULL, NULL, ge);
}

const dc_ctx_scan_ops_t dc_ctx_scan_avx512 = {"avx512", dc_ctx_ge_avx512, dc_ctx_rank_avx512,
                                              dc_ctx_merge_avx512, dc_ctx_merge_slabs_avx512};

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* DC_CTX_SCAN_AVX512 */
