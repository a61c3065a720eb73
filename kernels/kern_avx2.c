/*
 * kern_avx2.c - AVX2 versions of the host kernels (x86-64 only).
 *
 * The whole file is compiled for AVX2 (the pragma below), so the rest of
 * the library stays baseline x86-64; its table is used only when
 * kern_isa.c picked avx2.  Same bytes as the
 * scalar reference.  Scatters and gathers are random access and stay scalar.
 */
#if defined(__x86_64__)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,bmi,bmi2,popcnt"))), apply_to = function)
#else
#pragma GCC target("avx2,bmi,bmi2,popcnt")
#endif
#endif

#include "kernels/kern_impl.h"

#include "kernels/digest.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <pthread.h>

/* For an 8-bit mask m of changed elements: g_perm8[m] lists the set bits'
 * indices in increasing order (rest 0), g_shuf16[m] is the pshufb control
 * that packs the matching 16-bit lanes (rest zeroed). */
static _Alignas(32) uint32_t g_perm8[256][8];
static _Alignas(16) uint8_t g_shuf16[256][16];
static pthread_once_t g_lut_once = PTHREAD_ONCE_INIT;

static void lut_init(void)
{
    for (unsigned m = 0; m < 256; m++) {
        unsigned k = 0;
        memset(g_shuf16[m], 0x80, 16);
        for (unsigned j = 0; j < 8; j++) {
            if (m & (1u << j)) {
                g_perm8[m][k] = j;
                g_shuf16[m][2 * k] = (uint8_t)(2 * j);
                g_shuf16[m][2 * k + 1] = (uint8_t)(2 * j + 1);
                k++;
            }
        }
        for (; k < 8; k++)
            g_perm8[m][k] = 0;
    }
}

static inline __m256i cmpeq_w(__m256i a, __m256i b, unsigned w)
{
    switch (w) {
    case 1: return _mm256_cmpeq_epi8(a, b);
    case 2: return _mm256_cmpeq_epi16(a, b);
    case 4: return _mm256_cmpeq_epi32(a, b);
    default: return _mm256_cmpeq_epi64(a, b);
    }
}

/* One bit per element: the lowest byte's bit of each element's group. */
static inline uint32_t lead_bits(unsigned w)
{
    switch (w) {
    case 1: return 0xFFFFFFFFu;
    case 2: return 0x55555555u;
    case 4: return 0x11111111u;
    default: return 0x01010101u;
    }
}

static inline unsigned log2_w(unsigned w)
{
    return w == 1 ? 0 : w == 2 ? 1 : w == 4 ? 2 : 3;
}

__attribute__((always_inline)) static inline size_t
avx2_count_w(const void *a, const void *b, size_t n, const unsigned w)
{
    const uint8_t *pa = a, *pb = b;
    const size_t bytes = n * w;
    size_t i = 0;
    uint64_t eq_bytes = 0, vec_bytes = 0;

    for (; i + 128 <= bytes; i += 128) {
        for (int u = 0; u < 4; u++) {
            __m256i va = _mm256_loadu_si256((const __m256i *)(pa + i + 32 * u));
            __m256i vb = _mm256_loadu_si256((const __m256i *)(pb + i + 32 * u));
            eq_bytes += (unsigned)__builtin_popcount(
                (uint32_t)_mm256_movemask_epi8(cmpeq_w(va, vb, w)));
        }
        vec_bytes += 128;
    }
    for (; i + 32 <= bytes; i += 32) {
        __m256i va = _mm256_loadu_si256((const __m256i *)(pa + i));
        __m256i vb = _mm256_loadu_si256((const __m256i *)(pb + i));
        eq_bytes += (unsigned)__builtin_popcount(
            (uint32_t)_mm256_movemask_epi8(cmpeq_w(va, vb, w)));
        vec_bytes += 32;
    }
    size_t cnt = (size_t)((vec_bytes - eq_bytes) >> log2_w(w));
    return cnt + dc_kern_scalar_count_range(a, b, i / w, n, w);
}

/* XXH3 (default secret) block end for one 32-byte half of the
 * accumulators (see kern_avx512.c): add the block's product sums and its
 * swapped data sums, then scramble. */
static inline void xxh_block_end2(uint64_t *acc, __m256i pr, __m256i dt,
                                          const uint8_t *skey)
{
    const __m256i prime = _mm256_set1_epi32((int)0x9E3779B1u);
    __m256i v = _mm256_load_si256((const __m256i *)acc);
    v = _mm256_add_epi64(v, _mm256_add_epi64(pr, _mm256_shuffle_epi32(dt, 0x4E)));
    __m256i dk = _mm256_xor_si256(_mm256_xor_si256(v, _mm256_srli_epi64(v, 47)),
                                  _mm256_loadu_si256((const __m256i *)skey));
    __m256i lo = _mm256_mul_epu32(dk, prime);
    __m256i hi = _mm256_mul_epu32(_mm256_srli_epi64(dk, 32), prime);
    _mm256_store_si256((__m256i *)acc, _mm256_add_epi64(lo, _mm256_slli_epi64(hi, 32)));
}

/* One stripe half into the block sums: pr += lo32(dk) * hi32(dk) with dk =
 * data ^ key, dt += data. */
#define DC_XXH2_STRIPE(PR, DT, DATA, KEY)                                                \
    do {                                                                                 \
        __m256i dk_ = _mm256_xor_si256(DATA, KEY);                                       \
        PR = _mm256_add_epi64(PR, _mm256_mul_epu32(dk_, _mm256_srli_epi64(dk_, 32)));     \
        DT = _mm256_add_epi64(DT, DATA);                                                 \
    } while (0)

/* XXH3's long-input loop over the 64-byte step at byte offset OFF of a
 * (a0, a1) and b (b0, b1), into the block sums of avx2_diff_w; a block
 * (16 steps) ends into acc_a / acc_b */
#define DC_DIFF_HASH_STEP(OFF)                                                           \
    do {                                                                                 \
        const unsigned stripe = (unsigned)((OFF) / 64) % 16;                             \
        const __m256i k0 = _mm256_loadu_si256((const __m256i *)(secret + 8 * stripe));    \
        const __m256i k1 = _mm256_loadu_si256((const __m256i *)(secret + 8 * stripe + 32)); \
        if (ha) {                                                                        \
            DC_XXH2_STRIPE(pra0, dta0, a0, k0);                                          \
            DC_XXH2_STRIPE(pra1, dta1, a1, k1);                                          \
        }                                                                                \
        if (hb) {                                                                        \
            DC_XXH2_STRIPE(prb0, dtb0, b0, k0);                                          \
            DC_XXH2_STRIPE(prb1, dtb1, b1, k1);                                          \
        }                                                                                \
        if (stripe == 15) {                                                              \
            const uint8_t *skey = secret + 192 - 64;                                     \
            const __m256i z = _mm256_setzero_si256();                                    \
            if (ha) {                                                                    \
                xxh_block_end2(acc_a, pra0, dta0, skey);                                 \
                xxh_block_end2(acc_a + 4, pra1, dta1, skey + 32);                        \
                pra0 = pra1 = dta0 = dta1 = z;                                           \
            }                                                                            \
            if (hb) {                                                                    \
                xxh_block_end2(acc_b, prb0, dtb0, skey);                                 \
                xxh_block_end2(acc_b + 4, prb1, dtb1, skey + 32);                        \
                prb0 = prb1 = dtb0 = dtb1 = z;                                           \
            }                                                                            \
        }                                                                                \
    } while (0)

/* 64-byte steps per block of the 2- and 4-byte diff (avx2_diff_w) */
#define DC_DIFF_BLK 64

/* With `hash` (n * w a multiple of 1024) the loads also feed XXH3's
 * long-input loop for a and/or b (acc_a / acc_b, 8 accumulators each), as
 * the avx512 diff does: one 64-byte step is one stripe. */
__attribute__((always_inline)) static inline size_t
avx2_diff_w(const void *a, const void *b, size_t n, const unsigned w, uint32_t *pos,
            void *xorw, size_t cap, const int hash, uint64_t *acc_a, uint64_t *acc_b)
{
    const uint8_t *pa = a, *pb = b;
    uint8_t *px = xorw;
    const size_t bytes = n * w;
    const uint32_t lead = lead_bits(w);
    const unsigned sh = log2_w(w);
    size_t i = 0, k = 0;
    _Alignas(32) uint8_t tmp[32];
    const uint8_t *secret = dc_xxh3_secret;
    const int ha = hash && acc_a, hb = hash && acc_b;
    __m256i pra0 = _mm256_setzero_si256(), pra1 = pra0, dta0 = pra0, dta1 = pra0;
    __m256i prb0 = pra0, prb1 = pra0, dtb0 = pra0, dtb1 = pra0;

    pthread_once(&g_lut_once, lut_init);

    /*
     * 2- and 4-byte words, in blocks of DC_DIFF_BLK 64-byte steps (4 KiB
     * of each input) while the output has room for a whole block: first
     * only each step's change mask (a compare and a movemask: no branch,
     * no table), then the block's changes, from the set bits of the masks,
     * their XOR words read again from the block (in L1).  At 1% changed
     * most steps hold none: about a quarter of the instructions of the
     * table-driven compaction of every step (below).
     */
    if (w == 2 || w == 4) {
        const size_t blk = (size_t)DC_DIFF_BLK * 64;
        const size_t per = 64 / w; /* elements per step */
        while (i + blk <= bytes && k + blk / w + 4 <= cap) {
            uint64_t M[DC_DIFF_BLK];
            uint64_t nz = 0;
            for (unsigned j = 0; j < DC_DIFF_BLK; j++) {
                const size_t o = i + 64 * (size_t)j;
                _mm_prefetch((const char *)pa + o + 4096, _MM_HINT_T0);
                _mm_prefetch((const char *)pb + o + 4096, _MM_HINT_T0);
                __m256i a0 = _mm256_loadu_si256((const __m256i *)(pa + o));
                __m256i b0 = _mm256_loadu_si256((const __m256i *)(pb + o));
                __m256i a1 = _mm256_loadu_si256((const __m256i *)(pa + o + 32));
                __m256i b1 = _mm256_loadu_si256((const __m256i *)(pb + o + 32));
                if (hash)
                    DC_DIFF_HASH_STEP(o);
                uint64_t m;
                if (w == 2) {
                    __m256i pk = _mm256_permute4x64_epi64(
                        _mm256_packs_epi16(_mm256_cmpeq_epi16(a0, b0), _mm256_cmpeq_epi16(a1, b1)),
                        0xd8);
                    m = (uint32_t)~(uint32_t)_mm256_movemask_epi8(pk);
                } else {
                    m = (uint64_t)(~(unsigned)(_mm256_movemask_ps(_mm256_castsi256_ps(
                                                   _mm256_cmpeq_epi32(a0, b0))) |
                                               (_mm256_movemask_ps(_mm256_castsi256_ps(
                                                    _mm256_cmpeq_epi32(a1, b1)))
                                                << 8)) &
                                    0xffffu);
                }
                M[j] = m;
                nz |= (uint64_t)(m != 0) << j;
            }
            /* the changes: each step's first four written whether they
             * exist or not (room checked above; the top bit keeps tzcnt
             * inside the step), the rest by a loop */
            while (nz) {
                const unsigned j = (unsigned)__builtin_ctzll(nz);
                nz &= nz - 1;
                uint64_t m = M[j];
                const size_t e0 = (i + 64 * (size_t)j) >> sh;
                const uint8_t *qa = pa + i + 64 * (size_t)j, *qb = pb + i + 64 * (size_t)j;
                const unsigned pc = (unsigned)__builtin_popcountll(m);
                const uint64_t top = 1ull << (per - 1);
                for (unsigned u = 0; u < 4; u++) {
                    unsigned e = (unsigned)__builtin_ctzll(m | top);
                    m &= m - 1;
                    pos[k + u] = (uint32_t)(e0 + e);
                    if (w == 2)
                        dc_store_le16(px + 2 * (k + u),
                                      (uint16_t)(dc_load_le16(qa + 2 * e) ^ dc_load_le16(qb + 2 * e)));
                    else
                        dc_store_le32(px + 4 * (k + u), dc_load_le32(qa + 4 * e) ^ dc_load_le32(qb + 4 * e));
                }
                for (unsigned u = 4; u < pc; u++) {
                    unsigned e = (unsigned)__builtin_ctzll(m);
                    m &= m - 1;
                    pos[k + u] = (uint32_t)(e0 + e);
                    if (w == 2)
                        dc_store_le16(px + 2 * (k + u),
                                      (uint16_t)(dc_load_le16(qa + 2 * e) ^ dc_load_le16(qb + 2 * e)));
                    else
                        dc_store_le32(px + 4 * (k + u), dc_load_le32(qa + 4 * e) ^ dc_load_le32(qb + 4 * e));
                }
                k += pc;
            }
            i += blk;
        }
    }

    for (; i + 64 <= bytes; i += 64) {
        /* both inputs 4 KiB ahead (as the avx512 diff) */
        _mm_prefetch((const char *)pa + i + 4096, _MM_HINT_T0);
        _mm_prefetch((const char *)pb + i + 4096, _MM_HINT_T0);
        __m256i a0 = _mm256_loadu_si256((const __m256i *)(pa + i));
        __m256i b0 = _mm256_loadu_si256((const __m256i *)(pb + i));
        __m256i a1 = _mm256_loadu_si256((const __m256i *)(pa + i + 32));
        __m256i b1 = _mm256_loadu_si256((const __m256i *)(pb + i + 32));
        if (hash)
            DC_DIFF_HASH_STEP(i);
        __m256i x0 = _mm256_xor_si256(a0, b0);
        __m256i x1 = _mm256_xor_si256(a1, b1);
        /* 2- and 4-byte words away from cap take the table-driven path
         * for every vector, changed or not: at 1-5% changed, "nothing
         * changed here" branches go either way at random and their misses
         * cost more than the work they skip. */
        const int lut = (w == 2 || w == 4) && k + 64 <= cap;
        if (!lut && _mm256_testz_si256(_mm256_or_si256(x0, x1), _mm256_or_si256(x0, x1)))
            continue;
        for (int h = 0; h < 2; h++) {
            __m256i x = h ? x1 : x0;
            __m256i eq = h ? cmpeq_w(a1, b1, w) : cmpeq_w(a0, b0, w);
            uint32_t m = ~(uint32_t)_mm256_movemask_epi8(eq) & lead;
            if (m == 0 && !lut)
                continue;
            size_t base = (i + 32 * (size_t)h) >> sh;
            if (w == 2 && DC_LIKELY(k + 32 <= cap)) {
                /* 8 elements at a time: pshufb packs the XOR words,
                 * vpermd the positions (tables indexed by the mask). */
                __m256i pk = _mm256_packs_epi16(eq, _mm256_setzero_si256());
                uint32_t mm = ~(uint32_t)_mm256_movemask_epi8(pk);
                unsigned lo = mm & 0xff, hi = (mm >> 16) & 0xff;
                __m256i idx = _mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)base),
                                               _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
                _mm_storeu_si128((__m128i *)(px + 2 * k),
                                 _mm_shuffle_epi8(_mm256_castsi256_si128(x),
                                                  _mm_load_si128((const __m128i *)g_shuf16[lo])));
                _mm256_storeu_si256((__m256i *)(pos + k),
                                    _mm256_permutevar8x32_epi32(
                                        idx, _mm256_load_si256((const __m256i *)g_perm8[lo])));
                k += (size_t)__builtin_popcount(lo);
                idx = _mm256_add_epi32(idx, _mm256_set1_epi32(8));
                _mm_storeu_si128((__m128i *)(px + 2 * k),
                                 _mm_shuffle_epi8(_mm256_extracti128_si256(x, 1),
                                                  _mm_load_si128((const __m128i *)g_shuf16[hi])));
                _mm256_storeu_si256((__m256i *)(pos + k),
                                    _mm256_permutevar8x32_epi32(
                                        idx, _mm256_load_si256((const __m256i *)g_perm8[hi])));
                k += (size_t)__builtin_popcount(hi);
            } else if (w == 4 && DC_LIKELY(k + 32 <= cap)) {
                unsigned m8 = ~(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(eq)) & 0xff;
                __m256i perm = _mm256_load_si256((const __m256i *)g_perm8[m8]);
                __m256i idx = _mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)base),
                                               _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
                _mm256_storeu_si256((__m256i *)(px + 4 * k), _mm256_permutevar8x32_epi32(x, perm));
                _mm256_storeu_si256((__m256i *)(pos + k), _mm256_permutevar8x32_epi32(idx, perm));
                k += (size_t)__builtin_popcount(m8);
            } else if (DC_LIKELY(k + 32 <= cap)) {
                _mm256_store_si256((__m256i *)tmp, x);
                do {
                    unsigned byte = (unsigned)_tzcnt_u32(m);
                    m = _blsr_u32(m);
                    pos[k] = (uint32_t)(base + (byte >> sh));
                    switch (w) {
                    case 1: px[k] = tmp[byte]; break;
                    case 2: memcpy(px + 2 * k, tmp + byte, 2); break;
                    case 4: memcpy(px + 4 * k, tmp + byte, 4); break;
                    default: memcpy(px + 8 * k, tmp + byte, 8); break;
                    }
                    k++;
                } while (m);
            } else if (k >= cap) {
                k += (size_t)__builtin_popcount(m);
            } else {
                _mm256_store_si256((__m256i *)tmp, x);
                do {
                    unsigned byte = (unsigned)_tzcnt_u32(m);
                    m = _blsr_u32(m);
                    if (k < cap) {
                        pos[k] = (uint32_t)(base + (byte >> sh));
                        memcpy(px + (size_t)w * k, tmp + byte, w);
                    }
                    k++;
                } while (m);
            }
        }
    }
    return dc_kern_scalar_diff_range(a, b, i / w, n, w, pos, xorw, cap, k);
}

static size_t avx2_count(const void *a, const void *b, size_t n, unsigned w)
{
    switch (w) {
    case 1: return avx2_count_w(a, b, n, 1);
    case 2: return avx2_count_w(a, b, n, 2);
    case 4: return avx2_count_w(a, b, n, 4);
    default: return avx2_count_w(a, b, n, 8);
    }
}

static size_t avx2_diff(const void *a, const void *b, size_t n, unsigned w,
                               uint32_t *pos, void *xorw, size_t cap)
{
    switch (w) {
    case 1: return avx2_diff_w(a, b, n, 1, pos, xorw, cap, 0, NULL, NULL);
    case 2: return avx2_diff_w(a, b, n, 2, pos, xorw, cap, 0, NULL, NULL);
    case 4: return avx2_diff_w(a, b, n, 4, pos, xorw, cap, 0, NULL, NULL);
    default: return avx2_diff_w(a, b, n, 8, pos, xorw, cap, 0, NULL, NULL);
    }
}

static size_t avx2_diff_acc(const void *a, const void *b, size_t n, unsigned w,
                                    uint32_t *pos, void *xorw, size_t cap, uint64_t *acc_a,
                                    uint64_t *acc_b)
{
    switch (w) {
    case 1: return avx2_diff_w(a, b, n, 1, pos, xorw, cap, 1, acc_a, acc_b);
    case 2: return avx2_diff_w(a, b, n, 2, pos, xorw, cap, 1, acc_a, acc_b);
    case 4: return avx2_diff_w(a, b, n, 4, pos, xorw, cap, 1, acc_a, acc_b);
    default: return avx2_diff_w(a, b, n, 8, pos, xorw, cap, 1, acc_a, acc_b);
    }
}

static size_t avx2_validate(const uint32_t *pos, size_t count, size_t n)
{
    if (count == 0 || n == 0 || pos[0] >= n)
        return 0;
    const uint32_t last = n > UINT32_MAX ? UINT32_MAX : (uint32_t)(n - 1);
    const __m256i bias = _mm256_set1_epi32((int)0x80000000u);
    const __m256i vlast = _mm256_xor_si256(_mm256_set1_epi32((int)last), bias);
    size_t k = 1;
    while (k + 8 <= count) {
        size_t end = k + DC_MIN((count - k) & ~(size_t)7, 1024);
        __m256i bad = _mm256_setzero_si256();
        for (size_t j = k; j < end; j += 8) {
            __m256i cur = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(pos + j)), bias);
            __m256i prev =
                _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(pos + j - 1)), bias);
            /* bad where !(cur > prev) or cur > last (unsigned, via the bias) */
            bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_cmpgt_epi32(cur, prev),
                                                           _mm256_setzero_si256()));
            bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(cur, vlast));
        }
        if (!_mm256_testz_si256(bad, bad))
            return k + dc_kern_scalar_validate(pos + k - 1, end - k + 1, n) - 1;
        k = end;
    }
    for (; k < count; k++)
        if (pos[k] <= pos[k - 1] || pos[k] > last)
            return k;
    return count;
}

static void avx2_xor_dense(void *dst, const void *src, size_t bytes)
{
    uint8_t *pd = dst;
    const uint8_t *ps = src;
    size_t i = 0;
    for (; i + 128 <= bytes; i += 128) {
        __m256i d0 = _mm256_loadu_si256((const __m256i *)(pd + i));
        __m256i d1 = _mm256_loadu_si256((const __m256i *)(pd + i + 32));
        __m256i d2 = _mm256_loadu_si256((const __m256i *)(pd + i + 64));
        __m256i d3 = _mm256_loadu_si256((const __m256i *)(pd + i + 96));
        d0 = _mm256_xor_si256(d0, _mm256_loadu_si256((const __m256i *)(ps + i)));
        d1 = _mm256_xor_si256(d1, _mm256_loadu_si256((const __m256i *)(ps + i + 32)));
        d2 = _mm256_xor_si256(d2, _mm256_loadu_si256((const __m256i *)(ps + i + 64)));
        d3 = _mm256_xor_si256(d3, _mm256_loadu_si256((const __m256i *)(ps + i + 96)));
        _mm256_storeu_si256((__m256i *)(pd + i), d0);
        _mm256_storeu_si256((__m256i *)(pd + i + 32), d1);
        _mm256_storeu_si256((__m256i *)(pd + i + 64), d2);
        _mm256_storeu_si256((__m256i *)(pd + i + 96), d3);
    }
    for (; i + 32 <= bytes; i += 32) {
        __m256i d = _mm256_loadu_si256((const __m256i *)(pd + i));
        d = _mm256_xor_si256(d, _mm256_loadu_si256((const __m256i *)(ps + i)));
        _mm256_storeu_si256((__m256i *)(pd + i), d);
    }
    for (; i < bytes; i++)
        pd[i] ^= ps[i];
}

static void avx2_copy_nt(void *dst, const void *src, size_t bytes)
{
    uint8_t *pd = dst;
    const uint8_t *ps = src;
    size_t head = (size_t)(-(uintptr_t)pd & 31);
    if (bytes < head + 128) {
        memcpy(pd, ps, bytes);
        return;
    }
    memcpy(pd, ps, head);
    size_t i = head;
    for (; i + 128 <= bytes; i += 128) {
        __m256i d0 = _mm256_loadu_si256((const __m256i *)(ps + i));
        __m256i d1 = _mm256_loadu_si256((const __m256i *)(ps + i + 32));
        __m256i d2 = _mm256_loadu_si256((const __m256i *)(ps + i + 64));
        __m256i d3 = _mm256_loadu_si256((const __m256i *)(ps + i + 96));
        _mm256_stream_si256((__m256i *)(pd + i), d0);
        _mm256_stream_si256((__m256i *)(pd + i + 32), d1);
        _mm256_stream_si256((__m256i *)(pd + i + 64), d2);
        _mm256_stream_si256((__m256i *)(pd + i + 96), d3);
    }
    for (; i + 32 <= bytes; i += 32)
        _mm256_stream_si256((__m256i *)(pd + i), _mm256_loadu_si256((const __m256i *)(ps + i)));
    memcpy(pd + i, ps + i, bytes - i);
}

/* avx2_copy_nt that also runs XXH3's long loop over the first hb bytes
 * and prefetches pf meanwhile: see avx512_copy_nt_acc (here the lines of
 * dst are 32-byte units: two per stripe). */
static void avx2_copy_nt_acc(void *dst, const void *src, size_t bytes, uint64_t *acc,
                                     size_t hb, const void *pf)
{
    uint8_t *pd = dst;
    const uint8_t *ps = src, *pp = pf;
    const size_t h = (size_t)(-(uintptr_t)pd & 31);
    const size_t units = bytes > h ? (bytes - h) / 32 : 0;
    const uint8_t *secret = dc_xxh3_secret;
    memcpy(pd, ps, DC_MIN(h, bytes));
    size_t j = 0; /* next 32-byte unit of dst to stream */
    for (size_t o = 0; o < hb; o += 1024) {
        __m256i pr0 = _mm256_setzero_si256(), pr1 = pr0, dt0 = pr0, dt1 = pr0;
        for (unsigned st = 0; st < 16; st++) {
            size_t at = o + 64u * st;
            if (pp)
                _mm_prefetch((const char *)pp + at, _MM_HINT_T0);
            __m256i v0 = _mm256_loadu_si256((const __m256i *)(ps + at));
            __m256i v1 = _mm256_loadu_si256((const __m256i *)(ps + at + 32));
            DC_XXH2_STRIPE(pr0, dt0, v0, _mm256_loadu_si256((const __m256i *)(secret + 8 * st)));
            DC_XXH2_STRIPE(pr1, dt1, v1,
                           _mm256_loadu_si256((const __m256i *)(secret + 8 * st + 32)));
            for (unsigned q = 0; q < 2 && j < units; q++, j++) {
                __m256i u = h ? _mm256_loadu_si256((const __m256i *)(ps + h + 32 * j))
                              : (q ? v1 : v0);
                _mm256_stream_si256((__m256i *)(pd + h + 32 * j), u);
            }
        }
        const uint8_t *skey = secret + 192 - 64;
        xxh_block_end2(acc, pr0, dt0, skey);
        xxh_block_end2(acc + 4, pr1, dt1, skey + 32);
    }
    for (; j < units; j++)
        _mm256_stream_si256((__m256i *)(pd + h + 32 * j),
                            _mm256_loadu_si256((const __m256i *)(ps + h + 32 * j)));
    size_t done = h + 32 * units;
    if (done < bytes)
        memcpy(pd + done, ps + done, bytes - done);
}

const dc_kern_ops_t dc_kern_ops_avx2 = {
    .name = "avx2",
    .count_changed = avx2_count,
    .diff = avx2_diff,
    .diff_acc = avx2_diff_acc,
    .gather = dc_kern_scalar_gather,
    .validate = avx2_validate,
    .xor_scatter = dc_kern_scalar_xor_scatter,
    .put_scatter = dc_kern_scalar_put_scatter,
    .xor_dense = avx2_xor_dense,
    .copy_nt = avx2_copy_nt,
    .copy_nt_acc = avx2_copy_nt_acc,
};

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* __x86_64__ */
