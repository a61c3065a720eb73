/*
 * kern_avx512.c - AVX-512 (F/BW/VL/VBMI2) versions of the host kernels.
 *
 * diff compares 64 bytes at a time into a mask (one bit per element) and,
 * without branching on the mask, compress-stores the changed XOR words
 * (vpcompress{b,w,d,q}) and their positions.  The compression is
 * done in registers and stored with a full-width store while at least one
 * vector of room is left below `cap` (entries past the returned count are
 * scratch, as kern.h allows); near cap it falls back to exact scalar stores.
 * Same bytes as the scalar reference.
 */
#include "kernels/kern_impl.h"

#if defined(__x86_64__)

#include <immintrin.h>

#define DC_AVX512 \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi2,avx2,bmi,bmi2,popcnt")))

DC_AVX512 static inline uint64_t cmpneq_w(__m512i a, __m512i b, unsigned w)
{
    switch (w) {
    case 1: return _mm512_cmpneq_epu8_mask(a, b);
    case 2: return _mm512_cmpneq_epu16_mask(a, b);
    case 4: return _mm512_cmpneq_epu32_mask(a, b);
    default: return _mm512_cmpneq_epu64_mask(a, b);
    }
}

DC_AVX512 __attribute__((always_inline)) static inline size_t
avx512_count_w(const void *a, const void *b, size_t n, const unsigned w)
{
    const uint8_t *pa = a, *pb = b;
    const size_t bytes = n * w;
    size_t i = 0, cnt = 0;

    for (; i + 256 <= bytes; i += 256) {
        for (int u = 0; u < 4; u++) {
            __m512i va = _mm512_loadu_si512(pa + i + 64 * u);
            __m512i vb = _mm512_loadu_si512(pb + i + 64 * u);
            cnt += (size_t)__builtin_popcountll(cmpneq_w(va, vb, w));
        }
    }
    for (; i + 64 <= bytes; i += 64) {
        __m512i va = _mm512_loadu_si512(pa + i);
        __m512i vb = _mm512_loadu_si512(pb + i);
        cnt += (size_t)__builtin_popcountll(cmpneq_w(va, vb, w));
    }
    return cnt + dc_kern_scalar_count_range(a, b, i / w, n, w);
}

/* Store the positions base+j for the set bits j of m (< 16 bits) at pos. */
DC_AVX512 static inline size_t put_pos16(uint32_t *pos, __m512i idx, uint32_t m)
{
    _mm512_storeu_si512(pos, _mm512_maskz_compress_epi32((__mmask16)m, idx));
    return (size_t)__builtin_popcount(m);
}

/* Exact slow path near cap: element j of the vector (elements of w bytes,
 * XOR in tmp), positions base + j. */
static size_t tail_bits(uint64_t m, const uint8_t *tmp, unsigned w, size_t base,
                        uint32_t *pos, uint8_t *px, size_t cap, size_t k)
{
    while (m) {
        unsigned j = (unsigned)__builtin_ctzll(m);
        m &= m - 1;
        if (k < cap) {
            pos[k] = (uint32_t)(base + j);
            memcpy(px + (size_t)w * k, tmp + (size_t)w * j, w);
        }
        k++;
    }
    return k;
}

DC_AVX512 __attribute__((always_inline)) static inline size_t
avx512_diff_w(const void *a, const void *b, size_t n, const unsigned w,
                                    uint32_t *pos, void *xorw, size_t cap)
{
    const uint8_t *pa = a, *pb = b;
    uint8_t *px = xorw;
    const size_t bytes = n * w;
    const size_t epv = 64 / w; /* elements per vector */
    const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i sixteen = _mm512_set1_epi32(16);
    size_t i = 0, k = 0;
    _Alignas(64) uint8_t tmp[64];

    for (; i + 64 <= bytes; i += 64) {
        __m512i va = _mm512_loadu_si512(pa + i);
        __m512i vb = _mm512_loadu_si512(pb + i);
        uint64_t m = cmpneq_w(va, vb, w);
        /* No "skip clean vector" branch: at 1-5% changed BF16 it is taken
         * 20-70% of the time at random, and the misses cost more than the
         * compress-stores of an empty mask. */
        size_t base = i / w;
        __m512i x = _mm512_xor_si512(va, vb);
        if (DC_UNLIKELY(k + epv > cap)) {
            if (k >= cap) {
                k += (size_t)__builtin_popcountll(m);
            } else {
                _mm512_store_si512(tmp, x);
                k = tail_bits(m, tmp, w, base, pos, px, cap, k);
            }
            continue;
        }
        __m512i idx = _mm512_add_epi32(_mm512_set1_epi32((int)(uint32_t)base), iota);
        switch (w) {
        case 1:
            _mm512_storeu_si512(px + k, _mm512_maskz_compress_epi8((__mmask64)m, x));
            k += put_pos16(pos + k, idx, (uint32_t)(m & 0xffff));
            idx = _mm512_add_epi32(idx, sixteen);
            k += put_pos16(pos + k, idx, (uint32_t)((m >> 16) & 0xffff));
            idx = _mm512_add_epi32(idx, sixteen);
            k += put_pos16(pos + k, idx, (uint32_t)((m >> 32) & 0xffff));
            idx = _mm512_add_epi32(idx, sixteen);
            k += put_pos16(pos + k, idx, (uint32_t)(m >> 48));
            break;
        case 2:
            _mm512_storeu_si512(px + 2 * k, _mm512_maskz_compress_epi16((__mmask32)m, x));
            k += put_pos16(pos + k, idx, (uint32_t)(m & 0xffff));
            idx = _mm512_add_epi32(idx, sixteen);
            k += put_pos16(pos + k, idx, (uint32_t)(m >> 16));
            break;
        case 4:
            _mm512_storeu_si512(px + 4 * k, _mm512_maskz_compress_epi32((__mmask16)m, x));
            k += put_pos16(pos + k, idx, (uint32_t)m);
            break;
        default:
            _mm512_storeu_si512(px + 8 * k, _mm512_maskz_compress_epi64((__mmask8)m, x));
            _mm256_storeu_si256((__m256i *)(pos + k),
                                _mm256_maskz_compress_epi32((__mmask8)m,
                                                            _mm512_castsi512_si256(idx)));
            k += (size_t)__builtin_popcount((uint32_t)m);
            break;
        }
    }
    return dc_kern_scalar_diff_range(a, b, i / w, n, w, pos, xorw, cap, k);
}

DC_AVX512 static size_t avx512_count(const void *a, const void *b, size_t n, unsigned w)
{
    switch (w) {
    case 1: return avx512_count_w(a, b, n, 1);
    case 2: return avx512_count_w(a, b, n, 2);
    case 4: return avx512_count_w(a, b, n, 4);
    default: return avx512_count_w(a, b, n, 8);
    }
}

DC_AVX512 static size_t avx512_diff(const void *a, const void *b, size_t n, unsigned w,
                                   uint32_t *pos, void *xorw, size_t cap)
{
    switch (w) {
    case 1: return avx512_diff_w(a, b, n, 1, pos, xorw, cap);
    case 2: return avx512_diff_w(a, b, n, 2, pos, xorw, cap);
    case 4: return avx512_diff_w(a, b, n, 4, pos, xorw, cap);
    default: return avx512_diff_w(a, b, n, 8, pos, xorw, cap);
    }
}

DC_AVX512 static size_t avx512_validate(const uint32_t *pos, size_t count, size_t n)
{
    if (count == 0 || n == 0 || pos[0] >= n)
        return 0;
    const uint32_t last = n > UINT32_MAX ? UINT32_MAX : (uint32_t)(n - 1);
    const __m512i vlast = _mm512_set1_epi32((int)last);
    size_t k = 1;
    while (k + 16 <= count) {
        size_t end = k + DC_MIN((count - k) & ~(size_t)15, 4096);
        __mmask16 bad = 0;
        for (size_t j = k; j < end; j += 16) {
            __m512i cur = _mm512_loadu_si512(pos + j);
            __m512i prev = _mm512_loadu_si512(pos + j - 1);
            bad |= _mm512_cmple_epu32_mask(cur, prev) | _mm512_cmpgt_epu32_mask(cur, vlast);
        }
        if (bad)
            return k + dc_kern_scalar_validate(pos + k - 1, end - k + 1, n) - 1;
        k = end;
    }
    for (; k < count; k++)
        if (pos[k] <= pos[k - 1] || pos[k] > last)
            return k;
    return count;
}

DC_AVX512 static void avx512_xor_dense(void *dst, const void *src, size_t bytes)
{
    uint8_t *pd = dst;
    const uint8_t *ps = src;
    size_t i = 0;
    for (; i + 256 <= bytes; i += 256) {
        __m512i d0 = _mm512_loadu_si512(pd + i);
        __m512i d1 = _mm512_loadu_si512(pd + i + 64);
        __m512i d2 = _mm512_loadu_si512(pd + i + 128);
        __m512i d3 = _mm512_loadu_si512(pd + i + 192);
        d0 = _mm512_xor_si512(d0, _mm512_loadu_si512(ps + i));
        d1 = _mm512_xor_si512(d1, _mm512_loadu_si512(ps + i + 64));
        d2 = _mm512_xor_si512(d2, _mm512_loadu_si512(ps + i + 128));
        d3 = _mm512_xor_si512(d3, _mm512_loadu_si512(ps + i + 192));
        _mm512_storeu_si512(pd + i, d0);
        _mm512_storeu_si512(pd + i + 64, d1);
        _mm512_storeu_si512(pd + i + 128, d2);
        _mm512_storeu_si512(pd + i + 192, d3);
    }
    for (; i + 64 <= bytes; i += 64) {
        __m512i d = _mm512_loadu_si512(pd + i);
        _mm512_storeu_si512(pd + i, _mm512_xor_si512(d, _mm512_loadu_si512(ps + i)));
    }
    if (i < bytes) {
        __mmask64 m = _bzhi_u64(~0ull, (unsigned)(bytes - i));
        __m512i d = _mm512_maskz_loadu_epi8(m, pd + i);
        __m512i s = _mm512_maskz_loadu_epi8(m, ps + i);
        _mm512_mask_storeu_epi8(pd + i, m, _mm512_xor_si512(d, s));
    }
}

const dc_kern_ops_t dc_kern_ops_avx512 = {
    .name = "avx512",
    .count_changed = avx512_count,
    .diff = avx512_diff,
    .gather = dc_kern_scalar_gather,
    .validate = avx512_validate,
    .xor_scatter = dc_kern_scalar_xor_scatter,
    .put_scatter = dc_kern_scalar_put_scatter,
    .xor_dense = avx512_xor_dense,
};

#endif /* __x86_64__ */
