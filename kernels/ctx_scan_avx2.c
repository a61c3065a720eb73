/*
 * ctx_scan_avx2.c - the magnitude-class scan with AVX2 (x86-64 only;
 * the file is compiled for AVX2, its table used only when kern_isa.c
 * picked avx2 or avx512).  Same masks as the scalar reference: a signed
 * compare of the magnitude (top bit cleared, so never negative) against
 * thr - 1, one movemask per vector.
 */
#if defined(__x86_64__)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,bmi,bmi2,popcnt"))), apply_to = function)
#else
#pragma GCC target("avx2,bmi,bmi2,popcnt")
#endif
#endif

#include "kernels/ctx_scan.h"

#if defined(__x86_64__)
#include <immintrin.h>

/* The block search of the merge in two compares of 8 prefix counts, no
 * branch (the scalar loop mispredicts once per change): first among every
 * 8th block's count (pre8[g] = pre[8 (g + 1)]), then among the 8 blocks
 * of that group.  pre is padded with DC_CTX_PRE_PAD past the slab's blocks
 * and 16 entries past DC_CTX_SLAB, so both reads stay inside.  No
 * dependence on the previous change's block (q), so changes overlap in
 * the pipeline. */
static inline size_t dc_ctx_find_block_avx2(const uint32_t *pre, const uint32_t *pre8, size_t q,
                                            uint32_t rr)
{
    (void)q;
    const __m256i r = _mm256_set1_epi32((int)rr);
    /* counts are <= 4096 or the padding 0x7fffffff: signed compares */
    unsigned le8 = 8u - (unsigned)__builtin_popcount((unsigned)_mm256_movemask_ps(
                            _mm256_castsi256_ps(_mm256_cmpgt_epi32(
                                _mm256_loadu_si256((const __m256i *)pre8), r))));
    size_t g = 8 * (size_t)le8;
    unsigned le = 8u - (unsigned)__builtin_popcount((unsigned)_mm256_movemask_ps(
                           _mm256_castsi256_ps(_mm256_cmpgt_epi32(
                               _mm256_loadu_si256((const __m256i *)(pre + g + 1)), r))));
    return g + le;
}
#define DC_CTX_FIND_BLOCK dc_ctx_find_block_avx2
#endif

#include "kernels/ctx_scan_impl.h"
#include "kernels/kern_isa.h"

#if defined(__x86_64__)

/* 64 16-bit elements: one 64-bit mask per threshold */
static inline void dc_ge_block16(const uint8_t *p, const __m256i *tv, unsigned nt, uint64_t *ge)
{
    const __m256i km = _mm256_set1_epi16(0x7fff);
    __m256i v0 = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)p), km);
    __m256i v1 = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + 32)), km);
    __m256i v2 = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + 64)), km);
    __m256i v3 = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + 96)), km);
    for (unsigned j = 0; j < nt; j++) {
        __m256i a = _mm256_packs_epi16(_mm256_cmpgt_epi16(v0, tv[j]), _mm256_cmpgt_epi16(v1, tv[j]));
        __m256i b = _mm256_packs_epi16(_mm256_cmpgt_epi16(v2, tv[j]), _mm256_cmpgt_epi16(v3, tv[j]));
        a = _mm256_permute4x64_epi64(a, 0xd8);
        b = _mm256_permute4x64_epi64(b, 0xd8);
        ge[j] = (uint32_t)_mm256_movemask_epi8(a) |
                ((uint64_t)(uint32_t)_mm256_movemask_epi8(b) << 32);
    }
}

/* 64 16-bit elements whose thresholds are all multiples of 128 (the
 * codec's: bucket << 7): the magnitude's bucket (bits 7..14) packed to a
 * byte once, then one byte compare per 32 elements and threshold (tb:
 * the threshold bucket - 1, both sides biased by 0x80 for a signed
 * compare) */
static inline __attribute__((always_inline)) void dc_ge_block16b(const uint8_t *p, const __m256i *tb,
                                                                 unsigned nt, uint64_t *ge)
{
    const __m256i lo = _mm256_set1_epi16(0xff), bias = _mm256_set1_epi8((char)0x80);
    __m256i v0 = _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)p), 7), lo);
    __m256i v1 =
        _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)(p + 32)), 7), lo);
    __m256i v2 =
        _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)(p + 64)), 7), lo);
    __m256i v3 =
        _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)(p + 96)), 7), lo);
    __m256i a = _mm256_xor_si256(_mm256_permute4x64_epi64(_mm256_packus_epi16(v0, v1), 0xd8), bias);
    __m256i b = _mm256_xor_si256(_mm256_permute4x64_epi64(_mm256_packus_epi16(v2, v3), 0xd8), bias);
    for (unsigned j = 0; j < nt; j++)
        ge[j] = (uint32_t)_mm256_movemask_epi8(_mm256_cmpgt_epi8(a, tb[j])) |
                ((uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpgt_epi8(b, tb[j])) << 32);
}

/* 64 8-bit elements */
static inline void dc_ge_block8(const uint8_t *p, const __m256i *tv, unsigned nt, uint64_t *ge)
{
    const __m256i km = _mm256_set1_epi8(0x7f);
    __m256i v0 = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)p), km);
    __m256i v1 = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + 32)), km);
    for (unsigned j = 0; j < nt; j++)
        ge[j] = (uint32_t)_mm256_movemask_epi8(_mm256_cmpgt_epi8(v0, tv[j])) |
                ((uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpgt_epi8(v1, tv[j])) << 32);
}

/* 64 32-bit elements */
static inline void dc_ge_block32(const uint8_t *p, const __m256i *tv, unsigned nt, uint64_t *ge)
{
    const __m256i km = _mm256_set1_epi32(0x7fffffff);
    __m256i v[8];
    for (unsigned q = 0; q < 8; q++)
        v[q] = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + 32 * q)), km);
    for (unsigned j = 0; j < nt; j++) {
        uint64_t m = 0;
        for (unsigned q = 0; q < 8; q++)
            m |= (uint64_t)(unsigned)_mm256_movemask_ps(
                     _mm256_castsi256_ps(_mm256_cmpgt_epi32(v[q], tv[j])))
                 << (8 * q);
        ge[j] = m;
    }
}

static void dc_ctx_ge_avx2(const void *base, size_t n, unsigned w, const uint64_t *thr,
                           unsigned nt, uint64_t *ge)
{
    if (w == 8 || nt == 0) {
        dc_ctx_ge_scalar(base, n, w, thr, nt, ge);
        return;
    }
    __m256i tv[DC_CTX_MAX_CLASSES];
    for (unsigned j = 0; j < nt; j++) {
        /* mag >= thr  <=>  mag > thr - 1 (thr >= 1: a threshold of 0 holds
         * every element, and thr - 1 = -1 is still below every magnitude) */
        int64_t t = (int64_t)thr[j] - 1;
        tv[j] = w == 1 ? _mm256_set1_epi8((char)t)
                : w == 2 ? _mm256_set1_epi16((short)t)
                         : _mm256_set1_epi32((int)t);
    }
    const uint8_t *b = base;
    size_t full = n / 64;
    int by7 = w == 2;
    for (unsigned j = 0; j < nt; j++)
        by7 &= (thr[j] & 127) == 0;
    if (by7) {
        /* mag >= t << 7  <=>  bucket > t - 1, for t >= 1 (a threshold of
         * 0 takes the general loop: t - 1 = -1 has no biased byte) */
        __m256i tb[DC_CTX_MAX_CLASSES];
        for (unsigned j = 0; j < nt; j++) {
            by7 &= thr[j] != 0;
            tb[j] = _mm256_set1_epi8((char)(((thr[j] >> 7) - 1) ^ 0x80));
        }
        if (by7) {
            if (nt == DC_CTX_DEFAULT_NT) {
                /* the codec's default: the thresholds held in registers
                 * (three, DC_CTX_DEFAULT_NT) */
                _Static_assert(DC_CTX_DEFAULT_NT == 3, "t3 holds three thresholds");
                const __m256i t3[DC_CTX_DEFAULT_NT] = {tb[0], tb[1], tb[2]};
                for (size_t k = 0; k < full; k++)
                    dc_ge_block16b(b + k * 128, t3, DC_CTX_DEFAULT_NT,
                                   ge + k * DC_CTX_DEFAULT_NT);
            } else {
                for (size_t k = 0; k < full; k++)
                    dc_ge_block16b(b + k * 128, tb, nt, ge + k * nt);
            }
            if (n % 64)
                dc_ctx_ge_scalar(b + full * 128, n % 64, w, thr, nt, ge + full * nt);
            return;
        }
    }
    for (size_t k = 0; k < full; k++) {
        const uint8_t *p = b + k * 64 * w;
        if (w == 2)
            dc_ge_block16(p, tv, nt, ge + k * nt);
        else if (w == 1)
            dc_ge_block8(p, tv, nt, ge + k * nt);
        else
            dc_ge_block32(p, tv, nt, ge + k * nt);
    }
    if (n % 64)
        dc_ctx_ge_scalar(b + full * 64 * w, n % 64, w, thr, nt, ge + full * nt);
}

/* the merge's deposit by one pdep (only where it is fast) */
static inline uint64_t dc_ctx_deposit_pdep(uint64_t x, uint64_t m)
{
    return _pdep_u64(x, m);
}

static void dc_ctx_rank_avx2(const void *base, size_t n, unsigned w, const uint64_t *thr,
                             unsigned nt, const uint32_t *pos, size_t count, uint8_t *cls,
                             uint32_t *rnk, uint64_t *pop, uint64_t *ge)
{
    /* the default class count as a constant (the per-block level loops
     * and the per-change class count unrolled) */
    if (nt == DC_CTX_DEFAULT_NT)
        dc_ctx_rank_impl(dc_ctx_ge_avx2, base, n, w, thr, DC_CTX_DEFAULT_NT, pos, count, cls, rnk, pop,
                         ge);
    else
        dc_ctx_rank_impl(dc_ctx_ge_avx2, base, n, w, thr, nt, pos, count, cls, rnk, pop, ge);
}

static unsigned dc_ctx_merge_slabs_avx2(const void *base, size_t n, unsigned w, const uint64_t *thr,
                                        unsigned nt, const uint32_t *idx, const size_t *off,
                                        uint32_t *pos, void *bw, dc_ctx_slab_fn fn, void *arg,
                                        uint64_t *ge)
{
    if (dc_kern_cpu() & DC_CPU_FAST_PDEP)
        return dc_ctx_merge_impl(dc_ctx_ge_avx2, dc_ctx_deposit_pdep, base, n, w, thr, nt, idx, off,
                                 pos, bw, fn, arg, ge);
    return dc_ctx_merge_impl(dc_ctx_ge_avx2, dc_ctx_deposit_sel, base, n, w, thr, nt, idx, off, pos,
                             bw, fn, arg, ge);
}

static unsigned dc_ctx_merge_avx2(const void *base, size_t n, unsigned w, const uint64_t *thr,
                                  unsigned nt, const uint32_t *idx, const size_t *off,
                                  uint32_t *pos, void *bw, uint64_t *ge)
{
    return dc_ctx_merge_slabs_avx2(base, n, w, thr, nt, idx, off, pos, bw, NULL, NULL, ge);
}

const dc_ctx_scan_ops_t dc_ctx_scan_avx2 = {"avx2", dc_ctx_ge_avx2, dc_ctx_rank_avx2,
                                            dc_ctx_merge_avx2, dc_ctx_merge_slabs_avx2};

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* __x86_64__ */
