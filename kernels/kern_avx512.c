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
#if defined(__x86_64__)
#if DC_KERN_EMU_AVX512
/* -Dkern_emu=avx512: the intrinsics below, emulated (kernels/emu), and the
 * file compiled for what the emulation needs (its DC_EMU_TARGET_STR) */
#pragma GCC target("avx2,bmi,bmi2,popcnt,lzcnt,sse4.2,pclmul")
#elif defined(__clang__)
#pragma clang attribute push(                                                        \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi2,avx2,bmi,bmi2,popcnt"))), \
    apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vbmi2,avx2,bmi,bmi2,popcnt")
#endif
#endif

#include "kernels/kern_impl.h"

#include "kernels/digest.h"

#if defined(__x86_64__)

#if DC_KERN_EMU_AVX512
#include "kernels/emu/avx512_emu.h"
#else
#include <immintrin.h>
#endif

/* The diff prefetches both inputs this many bytes ahead: the hardware
 * prefetcher alone leaves the two streams short of DRAM bandwidth (~15%
 * faster streaming diff+digest here; 1-2 KiB ahead is too close, 16 KiB
 * no better). */
#define DC_DIFF_PF 4096

static inline uint64_t cmpneq_w(__m512i a, __m512i b, unsigned w)
{
    switch (w) {
    case 1: return _mm512_cmpneq_epu8_mask(a, b);
    case 2: return _mm512_cmpneq_epu16_mask(a, b);
    case 4: return _mm512_cmpneq_epu32_mask(a, b);
    default: return _mm512_cmpneq_epu64_mask(a, b);
    }
}

__attribute__((always_inline)) static inline size_t
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

/* Exact slow path near cap: element j of the group (elements of w bytes,
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

/* Compress-store the changed XOR words of one 64-byte vector at px. */
static inline void put_vals(uint8_t *px, __m512i x, uint64_t m, unsigned w)
{
    switch (w) {
    case 1: _mm512_storeu_si512(px, _mm512_maskz_compress_epi8((__mmask64)m, x)); break;
    case 2: _mm512_storeu_si512(px, _mm512_maskz_compress_epi16((__mmask32)m, x)); break;
    case 4: _mm512_storeu_si512(px, _mm512_maskz_compress_epi32((__mmask16)m, x)); break;
    default: _mm512_storeu_si512(px, _mm512_maskz_compress_epi64((__mmask8)m, x)); break;
    }
}

#define DC_XXH_PRIME32_1 0x9E3779B1u
/* The end of an XXH3 block (default secret): add the block's products (PR)
 * and its data sums swapped within 128-bit lanes (DT) to the accumulators,
 * scramble them with the secret's last 64 bytes (skey) and PRIME32_1
 * (prime), and clear the sums. */
#define DC_XXH_BLOCK_END(ACC, PR, DT)                                                        \
    do {                                                                                     \
        ACC = _mm512_add_epi64(ACC, _mm512_add_epi64(                                        \
                                        PR, _mm512_shuffle_epi32(DT, (_MM_PERM_ENUM)0x4E)));  \
        __m512i dk_ = _mm512_xor_si512(_mm512_xor_si512(ACC, _mm512_srli_epi64(ACC, 47)),   \
                                       skey);                                                \
        __m512i lo_ = _mm512_mul_epu32(dk_, prime);                                          \
        __m512i hi_ = _mm512_mul_epu32(_mm512_srli_epi64(dk_, 32), prime);                   \
        ACC = _mm512_add_epi64(lo_, _mm512_slli_epi64(hi_, 32));                             \
        PR = _mm512_setzero_si512();                                                         \
        DT = _mm512_setzero_si512();                                                         \
    } while (0)

/*
 * Groups of 64 elements (w vectors): one 64-bit change mask per group.  The
 * positions come from ONE byte compress of the indices 0..63 under that
 * mask, widened to 32 bits (16 at a time; more than 16 changes in a group
 * of 64 is rare at sparse change rates, so that branch is well predicted),
 * instead of a 32-bit compress per 16 elements: compresses run on one
 * execution port and were the diff's bottleneck.
 *
 * With `hash` (acc_a / acc_b not both NULL; n * w a multiple of 1024) the
 * same loads also feed XXH3's long-input loop (digest.h's span digest, the
 * default secret): each 1024-byte block is 16 stripes accumulated into the
 * 8 accumulators, then scrambled.  Per stripe, acc[i] += lo32(dk) *
 * hi32(dk) with dk = data ^ secret, and acc[i ^ 1] += data[i]; sums commute
 * within a block, so the data words are summed per block and swapped once
 * before the scramble.  The hashing then runs while the diff waits on
 * memory instead of in a second pass over cached data.
 */
__attribute__((always_inline)) static inline size_t
avx512_diff_w(const void *a, const void *b, size_t n, const unsigned w, uint32_t *pos,
              void *xorw, size_t cap, const int hash, uint64_t *acc_a, uint64_t *acc_b)
{
    const uint8_t *pa = a, *pb = b;
    uint8_t *px = xorw;
    const size_t gbytes = 64u * w; /* bytes per group of 64 elements */
    const size_t groups = n / 64;
    const unsigned epv = 64 / w;   /* elements per vector */
    const __m512i iota8 = _mm512_set_epi8(
        63, 62, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48, 47, 46, 45, 44, 43, 42,
        41, 40, 39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20,
        19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i step = _mm512_set1_epi32(64);
    __m512i vbase = _mm512_setzero_si512();
    size_t k = 0;
    _Alignas(64) uint8_t tmp[512];
    /* hashing state: the accumulators, this block's sums */
    const uint8_t *secret = dc_xxh3_secret;
    const unsigned gpb = 1024 / (64 * w); /* groups per 1024-byte block */
    const int ha = hash && acc_a, hb = hash && acc_b;
    __m512i acca = _mm512_setzero_si512(), accb = _mm512_setzero_si512();
    __m512i pra = acca, dta = acca, prb = acca, dtb = acca;
    if (ha)
        acca = _mm512_load_si512(acc_a);
    if (hb)
        accb = _mm512_load_si512(acc_b);

    for (size_t g = 0; g < groups; g++, vbase = _mm512_add_epi32(vbase, step)) {
        const uint8_t *ga = pa + g * gbytes, *gb = pb + g * gbytes;
        __m512i x[8];
        /* the group's change mask only; each vector's share is taken back
         * out of it below.  (A per-vector mask array here was miscompiled
         * by GCC 12 at -O3, or -O2 with -fpeel-loops, in the hashing w = 8
         * instance: garbage bits in one entry, wrong counts in release
         * builds; tests/kernels/test_digest.c caught it in a release
         * build.) */
        uint64_t M = 0;
        /* No "skip clean group" branch: at 1-5% changed BF16 it would be
         * taken at random, and the misses cost more than the compresses
         * of an empty mask. */
        for (unsigned u = 0; u < w; u++) {
            _mm_prefetch((const char *)ga + DC_DIFF_PF + 64 * u, _MM_HINT_T0);
            _mm_prefetch((const char *)gb + DC_DIFF_PF + 64 * u, _MM_HINT_T0);
            __m512i va = _mm512_loadu_si512(ga + 64 * u);
            __m512i vb = _mm512_loadu_si512(gb + 64 * u);
            const uint64_t mu = cmpneq_w(va, vb, w);
            x[u] = _mm512_xor_si512(va, vb);
            M |= w == 1 ? mu : mu << (u * epv);
            if (hash) {
                __m512i key = _mm512_loadu_si512(secret + 8 * ((g % gpb) * w + u));
                if (ha) {
                    __m512i dk = _mm512_xor_si512(va, key);
                    pra = _mm512_add_epi64(pra, _mm512_mul_epu32(dk, _mm512_srli_epi64(dk, 32)));
                    dta = _mm512_add_epi64(dta, va);
                }
                if (hb) {
                    __m512i dk = _mm512_xor_si512(vb, key);
                    prb = _mm512_add_epi64(prb, _mm512_mul_epu32(dk, _mm512_srli_epi64(dk, 32)));
                    dtb = _mm512_add_epi64(dtb, vb);
                }
            }
        }
        if (hash && g % gpb == gpb - 1) {
            /* end of a block: add the sums, scramble */
            const __m512i skey = _mm512_loadu_si512(secret + 192 - 64);
            const __m512i prime = _mm512_set1_epi32((int)DC_XXH_PRIME32_1);
            if (ha)
                DC_XXH_BLOCK_END(acca, pra, dta);
            if (hb)
                DC_XXH_BLOCK_END(accb, prb, dtb);
        }
        if (DC_UNLIKELY(k + 64 > cap)) {
            if (k >= cap) {
                k += (size_t)__builtin_popcountll(M);
            } else {
                for (unsigned u = 0; u < w; u++)
                    _mm512_store_si512(tmp + 64 * u, x[u]);
                k = tail_bits(M, tmp, w, g * 64, pos, px, cap, k);
            }
            continue;
        }
        size_t kv = k;
        for (unsigned u = 0; u < w; u++) {
            const uint64_t mu = w == 1 ? M : (M >> (u * epv)) & ((1ull << epv) - 1);
            put_vals(px + w * kv, x[u], mu, w);
            kv += (size_t)__builtin_popcountll(mu);
        }
        __m512i ci = _mm512_maskz_compress_epi8((__mmask64)M, iota8);
        unsigned c = (unsigned)__builtin_popcountll(M);
        _mm512_storeu_si512(pos + k,
                            _mm512_add_epi32(vbase, _mm512_cvtepu8_epi32(_mm512_castsi512_si128(ci))));
        if (DC_UNLIKELY(c > 16)) {
            _mm512_storeu_si512(pos + k + 16,
                                _mm512_add_epi32(vbase, _mm512_cvtepu8_epi32(
                                                            _mm512_extracti32x4_epi32(ci, 1))));
            if (c > 32) {
                _mm512_storeu_si512(pos + k + 32,
                                    _mm512_add_epi32(vbase, _mm512_cvtepu8_epi32(
                                                                _mm512_extracti32x4_epi32(ci, 2))));
                _mm512_storeu_si512(pos + k + 48,
                                    _mm512_add_epi32(vbase, _mm512_cvtepu8_epi32(
                                                                _mm512_extracti32x4_epi32(ci, 3))));
            }
        }
        k += c;
    }
    if (ha)
        _mm512_store_si512(acc_a, acca);
    if (hb)
        _mm512_store_si512(acc_b, accb);
    return dc_kern_scalar_diff_range(a, b, groups * 64, n, w, pos, xorw, cap, k);
}

static size_t avx512_count(const void *a, const void *b, size_t n, unsigned w)
{
    switch (w) {
    case 1: return avx512_count_w(a, b, n, 1);
    case 2: return avx512_count_w(a, b, n, 2);
    case 4: return avx512_count_w(a, b, n, 4);
    default: return avx512_count_w(a, b, n, 8);
    }
}

static size_t avx512_diff(const void *a, const void *b, size_t n, unsigned w,
                                   uint32_t *pos, void *xorw, size_t cap)
{
    switch (w) {
    case 1: return avx512_diff_w(a, b, n, 1, pos, xorw, cap, 0, NULL, NULL);
    case 2: return avx512_diff_w(a, b, n, 2, pos, xorw, cap, 0, NULL, NULL);
    case 4: return avx512_diff_w(a, b, n, 4, pos, xorw, cap, 0, NULL, NULL);
    default: return avx512_diff_w(a, b, n, 8, pos, xorw, cap, 0, NULL, NULL);
    }
}

static size_t avx512_diff_acc(const void *a, const void *b, size_t n, unsigned w,
                                        uint32_t *pos, void *xorw, size_t cap,
                                        uint64_t *acc_a, uint64_t *acc_b)
{
    switch (w) {
    case 1: return avx512_diff_w(a, b, n, 1, pos, xorw, cap, 1, acc_a, acc_b);
    case 2: return avx512_diff_w(a, b, n, 2, pos, xorw, cap, 1, acc_a, acc_b);
    case 4: return avx512_diff_w(a, b, n, 4, pos, xorw, cap, 1, acc_a, acc_b);
    default: return avx512_diff_w(a, b, n, 8, pos, xorw, cap, 1, acc_a, acc_b);
    }
}

static size_t avx512_validate(const uint32_t *pos, size_t count, size_t n)
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

static void avx512_xor_dense(void *dst, const void *src, size_t bytes)
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

static void avx512_copy_nt(void *dst, const void *src, size_t bytes)
{
    uint8_t *pd = dst;
    const uint8_t *ps = src;
    size_t head = (size_t)(-(uintptr_t)pd & 63);
    if (bytes < head + 256) {
        memcpy(pd, ps, bytes);
        return;
    }
    memcpy(pd, ps, head);
    size_t i = head;
    for (; i + 256 <= bytes; i += 256) {
        __m512i d0 = _mm512_loadu_si512(ps + i);
        __m512i d1 = _mm512_loadu_si512(ps + i + 64);
        __m512i d2 = _mm512_loadu_si512(ps + i + 128);
        __m512i d3 = _mm512_loadu_si512(ps + i + 192);
        _mm512_stream_si512((void *)(pd + i), d0);
        _mm512_stream_si512((void *)(pd + i + 64), d1);
        _mm512_stream_si512((void *)(pd + i + 128), d2);
        _mm512_stream_si512((void *)(pd + i + 192), d3);
    }
    for (; i + 64 <= bytes; i += 64)
        _mm512_stream_si512((void *)(pd + i), _mm512_loadu_si512(ps + i));
    memcpy(pd + i, ps + i, bytes - i);
}

/*
 * copy_nt of `bytes` that also runs XXH3's long loop (digest.h's span
 * digest, default secret) over its first `hb` bytes (whole 1024-byte
 * blocks, hb <= bytes), in the same pass: each 64-byte stripe is loaded
 * once for the accumulators and streamed out, so the reads and the
 * streaming writes interleave instead of alternating by block (measured:
 * the separate hash then copy ran at ~0.7x of a plain streaming copy).
 * dst need not be aligned: the stores go to the 64-byte lines of dst
 * (loaded from src at the same offsets), the partial lines at either end
 * with plain stores.  pf (may be NULL): memory the caller reads next, its
 * first hb bytes prefetched a line per hashed stripe meanwhile (prefetches
 * never fault, so pf + hb may run past the caller's buffer).
 */
static void avx512_copy_nt_acc(void *dst, const void *src, size_t bytes,
                                         uint64_t *acc, size_t hb, const void *pf)
{
    const uint8_t *pp = pf;
    uint8_t *pd = dst;
    const uint8_t *ps = src;
    const size_t h = (size_t)(-(uintptr_t)pd & 63);
    const size_t units = bytes > h ? (bytes - h) / 64 : 0; /* whole lines of dst */
    const uint8_t *secret = dc_xxh3_secret;
    const __m512i skey = _mm512_loadu_si512(secret + 192 - 64);
    const __m512i prime = _mm512_set1_epi32((int)DC_XXH_PRIME32_1);
    __m512i a = _mm512_load_si512(acc);
    memcpy(pd, ps, DC_MIN(h, bytes));
    size_t j = 0; /* next line of dst to stream */
    for (size_t o = 0; o < hb; o += 1024) {
        __m512i pr = _mm512_setzero_si512(), dt = pr;
        for (unsigned st = 0; st < 16; st++) {
            size_t at = o + 64u * st;
            __m512i v = _mm512_loadu_si512(ps + at);
            __m512i dk = _mm512_xor_si512(v, _mm512_loadu_si512(secret + 8u * st));
            pr = _mm512_add_epi64(pr, _mm512_mul_epu32(dk, _mm512_srli_epi64(dk, 32)));
            dt = _mm512_add_epi64(dt, v);
            if (pp)
                _mm_prefetch((const char *)pp + at, _MM_HINT_T0);
            if (j < units) {
                __m512i u = h ? _mm512_loadu_si512(ps + h + 64 * j) : v;
                _mm512_stream_si512((void *)(pd + h + 64 * j), u);
                j++;
            }
        }
        DC_XXH_BLOCK_END(a, pr, dt);
    }
    _mm512_store_si512(acc, a);
    for (; j < units; j++)
        _mm512_stream_si512((void *)(pd + h + 64 * j), _mm512_loadu_si512(ps + h + 64 * j));
    size_t done = h + 64 * units;
    if (done < bytes)
        memcpy(pd + done, ps + done, bytes - done);
}

const dc_kern_ops_t dc_kern_ops_avx512 = {
    .name = "avx512",
    .count_changed = avx512_count,
    .diff = avx512_diff,
    .diff_acc = avx512_diff_acc,
    .gather = dc_kern_scalar_gather,
    .validate = avx512_validate,
    .xor_scatter = dc_kern_scalar_xor_scatter,
    .put_scatter = dc_kern_scalar_put_scatter,
    .xor_dense = avx512_xor_dense,
    .copy_nt = avx512_copy_nt,
    .copy_nt_acc = avx512_copy_nt_acc,
};

#if defined(__clang__) && !DC_KERN_EMU_AVX512
#pragma clang attribute pop
#endif
#endif /* __x86_64__ */
