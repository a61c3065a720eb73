/* ent_rans32.c - the 32-way rANS layout (entropy.h): the encoder and the
 * decoders, portable, AVX2 and AVX-512 (the table and the stream header
 * are ent_rans.c's). */
#include "kernels/entropy_internal.h"

#include <pthread.h>

/* --- encoder --------------------------------------------------------------- */

/*
 * The 32-way layout's encoder: the table is written (dst[0, h)) and s->esym
 * holds the encoder symbols of scale S <= 15 with x_max for this layout.
 * States stay in [2^15, 2^31) (so the 32-bit reciprocals of
 * dc_rans_esym are exact).  Symbols count-1 down to 0, symbol i by state
 * i % 32, each first renormalizing (at most one 16-bit word out: x < 2^31
 * and x_max >= 2^16) into words stored downwards from dst + cap; the
 * decoder, reading upwards, meets them in symbol order, so a SIMD decoder
 * that renormalizes 16 lanes at once reads them in lane order.  Then the
 * 32 final states, state 0 first.
 */
static int dc_r32_put_all(const struct dc_rans_esym *restrict esym, const uint8_t *restrict v,
                          size_t count, size_t downto, const unsigned stride,
                          const unsigned bits, const uint8_t *lo, uint8_t **pp, uint32_t xs[32])
{
    uint8_t *p = *pp;
    size_t i = count;
    while (i > downto) {
        if (DC_UNLIKELY(p - lo < 64 + 2))
            return 0;
        /* to the next multiple of 32 below (at most 32 words) */
        size_t stop = (i - 1) & ~(size_t)31;
        do {
            i--;
            const struct dc_rans_esym *e = &esym[dc_sym_at(v, i, stride, bits)];
            uint32_t x = xs[i & 31];
            unsigned nb = x >= e->x_max;
            dc_store_le16(p - 2, (uint16_t)x);
            p -= 2 * nb;
            x >>= 16 * nb;
            uint32_t q = (uint32_t)(((uint64_t)x * e->rcp_freq) >> 32) >> e->rcp_shift;
            xs[i & 31] = x + e->bias + q * e->cmpl_freq;
        } while (i > stop);
    }
    *pp = p;
    return 1;
}

#if defined(__x86_64__)
/* One 32-way encode step of 16 states (symbols i0..i0+15, descending in the
 * scalar order): the lanes whose state reaches x_max give their low 16
 * bits, in lane order, just below p (as the scalar loop, going down from
 * lane 15, leaves them), then x = x + bias + (x / freq) * (M - freq) with
 * the reciprocal's high product from two even/odd 32x32 multiplies. */
#define DC_R32_PUT16(X, I0)                                                   \
    do {                                                                      \
        __m512i sym_ = bits == 16                                             \
            ? _mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)(v + 2 * (I0)))) \
            : _mm512_cvtepu8_epi32(_mm_loadu_si128((const void *)(v + (I0))));   \
        __m512i ix_ = _mm512_slli_epi32(sym_, 2);                             \
        __m512i xm_ = _mm512_i32gather_epi32(ix_, eb, 4);                     \
        __m512i rc_ = _mm512_i32gather_epi32(ix_, eb + 1, 4);                 \
        __m512i bi_ = _mm512_i32gather_epi32(ix_, eb + 2, 4);                 \
        __m512i cs_ = _mm512_i32gather_epi32(ix_, eb + 3, 4);                 \
        __mmask16 m_ = _mm512_cmpge_epu32_mask(X, xm_);                       \
        unsigned n_ = (unsigned)__builtin_popcount((unsigned)m_);             \
        p -= 2 * n_;                                                          \
        _mm512_mask_cvtepi32_storeu_epi16(p, (__mmask16)((1u << n_) - 1),     \
                                          _mm512_maskz_compress_epi32(m_, X)); \
        X = _mm512_mask_srli_epi32(X, m_, X, 16);                             \
        __m512i pe_ = _mm512_mul_epu32(X, rc_);                               \
        __m512i po_ = _mm512_mul_epu32(_mm512_srli_epi64(X, 32), _mm512_srli_epi64(rc_, 32)); \
        __m512i hi_ = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(pe_, 32), po_); \
        __m512i q_ = _mm512_srlv_epi32(hi_, _mm512_srli_epi32(cs_, 16));      \
        X = _mm512_add_epi32(_mm512_add_epi32(X, bi_),                        \
                             _mm512_mullo_epi32(q_, _mm512_and_si512(cs_, lo16))); \
    } while (0)

/* dc_r32_put_all with AVX-512 for 16-bit words or bytes (stride = width):
 * the symbols above the last multiple of 32 by the scalar loop, then 32 a
 * step (states 16-31, then 0-15); the same bytes, and the same room checks
 * at the same places. */
DC_AVX512_TARGET static int dc_r32_put_avx512(const struct dc_rans_esym *esym,
                                              const uint8_t *v, size_t count,
                                              const unsigned bits, const uint8_t *lo,
                                              uint8_t **pp, uint32_t xs[32])
{
    size_t top = count & ~(size_t)31;
    if (!dc_r32_put_all(esym, v, count, top, bits / 8, bits, lo, pp, xs))
        return 0;
    uint8_t *p = *pp;
    const int *eb = (const int *)esym;
    const __m512i lo16 = _mm512_set1_epi32(0xffff);
    __m512i xa = _mm512_loadu_si512(xs), xb = _mm512_loadu_si512(xs + 16);
    for (size_t i = top; i >= 32; i -= 32) {
        if (DC_UNLIKELY(p - lo < 64 + 2))
            return 0;
        DC_R32_PUT16(xb, i - 16);
        DC_R32_PUT16(xa, i - 32);
    }
    _mm512_storeu_si512(xs, xa);
    _mm512_storeu_si512(xs + 16, xb);
    *pp = p;
    return 1;
}
#undef DC_R32_PUT16

/* For the AVX2 encoder: per 8-bit mask of the lanes that give a word, the
 * vpermd indices that put those lanes, in lane order, at the top of the
 * vector (so that 16 bytes stored just below p end with them). */
static uint32_t g_r32_top[256][8];
static pthread_once_t g_r32_top_once = PTHREAD_ONCE_INIT;
static void dc_r32_top_init(void)
{
    for (unsigned m = 0; m < 256; m++) {
        unsigned n = (unsigned)__builtin_popcount(m), at = 8 - n;
        for (unsigned j = 0; j < 8; j++)
            if (m >> j & 1)
                g_r32_top[m][at++] = j;
    }
}

/* DC_R32_PUT16 for 8 states with AVX2: the words go out as 16 bytes
 * stored at p - 16 whose top 2n bytes are the n words (the bytes below
 * are scratch: below the new p, and above the 128 bytes kept free under
 * lo for the states); x >= x_max unsigned as max(x, x_max) == x. */
#define DC_R32_PUT8(X, I0)                                                    \
    do {                                                                      \
        __m256i sym_ = bits == 16                                             \
            ? _mm256_cvtepu16_epi32(_mm_loadu_si128((const void *)(v + 2 * (I0)))) \
            : _mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)(v + (I0))));    \
        __m256i ix_ = _mm256_slli_epi32(sym_, 2);                             \
        __m256i xm_ = _mm256_i32gather_epi32(eb, ix_, 4);                     \
        __m256i rc_ = _mm256_i32gather_epi32(eb + 1, ix_, 4);                 \
        __m256i bi_ = _mm256_i32gather_epi32(eb + 2, ix_, 4);                 \
        __m256i cs_ = _mm256_i32gather_epi32(eb + 3, ix_, 4);                 \
        __m256i m_ = _mm256_cmpeq_epi32(_mm256_max_epu32(X, xm_), X);         \
        unsigned mb_ = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(m_)); \
        __m256i w_ = _mm256_permutevar8x32_epi32(                             \
            _mm256_and_si256(X, lo16), _mm256_loadu_si256((const void *)g_r32_top[mb_])); \
        w_ = _mm256_permute4x64_epi64(_mm256_packus_epi32(w_, w_), 0xD8);     \
        _mm_storeu_si128((void *)(p - 16), _mm256_castsi256_si128(w_));       \
        p -= 2 * (unsigned)__builtin_popcount(mb_);                           \
        X = _mm256_blendv_epi8(X, _mm256_srli_epi32(X, 16), m_);              \
        __m256i pe_ = _mm256_mul_epu32(X, rc_);                               \
        __m256i po_ = _mm256_mul_epu32(_mm256_srli_epi64(X, 32), _mm256_srli_epi64(rc_, 32)); \
        __m256i hi_ = _mm256_blend_epi32(_mm256_srli_epi64(pe_, 32), po_, 0xAA); \
        __m256i q_ = _mm256_srlv_epi32(hi_, _mm256_srli_epi32(cs_, 16));      \
        X = _mm256_add_epi32(_mm256_add_epi32(X, bi_),                        \
                             _mm256_mullo_epi32(q_, _mm256_and_si256(cs_, lo16))); \
    } while (0)

/* dc_r32_put_avx512 with AVX2: four vectors of 8 states, 24-31 first. */
DC_AVX2_TARGET static int dc_r32_put_avx2(const struct dc_rans_esym *esym, const uint8_t *v,
                                          size_t count, const unsigned bits, const uint8_t *lo,
                                          uint8_t **pp, uint32_t xs[32])
{
    size_t top = count & ~(size_t)31;
    if (!dc_r32_put_all(esym, v, count, top, bits / 8, bits, lo, pp, xs))
        return 0;
    pthread_once(&g_r32_top_once, dc_r32_top_init);
    uint8_t *p = *pp;
    const int *eb = (const int *)esym;
    const __m256i lo16 = _mm256_set1_epi32(0xffff);
    __m256i x0 = _mm256_loadu_si256((const void *)xs);
    __m256i x1 = _mm256_loadu_si256((const void *)(xs + 8));
    __m256i x2 = _mm256_loadu_si256((const void *)(xs + 16));
    __m256i x3 = _mm256_loadu_si256((const void *)(xs + 24));
    for (size_t i = top; i >= 32; i -= 32) {
        if (DC_UNLIKELY(p - lo < 64 + 2))
            return 0;
        DC_R32_PUT8(x3, i - 8);
        DC_R32_PUT8(x2, i - 16);
        DC_R32_PUT8(x1, i - 24);
        DC_R32_PUT8(x0, i - 32);
    }
    _mm256_storeu_si256((void *)xs, x0);
    _mm256_storeu_si256((void *)(xs + 8), x1);
    _mm256_storeu_si256((void *)(xs + 16), x2);
    _mm256_storeu_si256((void *)(xs + 24), x3);
    *pp = p;
    return 1;
}
#undef DC_R32_PUT8
#endif

/* dc_r32_put_all per symbol width and stride (as ent_rans.c's DC_RANS_PUT_DISPATCH) */
static int dc_r32_put(const struct dc_rans_esym *esym, const uint8_t *v, size_t count,
                      unsigned stride, unsigned bits, const uint8_t *lo, uint8_t **pp,
                      uint32_t xs[32], dc_ent_isa_t isa)
{
#if defined(__x86_64__)
    if (stride == bits / 8 && isa >= DC_ENT_ISA_AVX512_VBMI)
        return dc_r32_put_avx512(esym, v, count, bits, lo, pp, xs);
    if (stride == bits / 8 && isa >= DC_ENT_ISA_AVX2)
        return dc_r32_put_avx2(esym, v, count, bits, lo, pp, xs);
#else
    (void)isa;
#endif
    if (bits == 16)
        return dc_r32_put_all(esym, v, count, 0, 2, 16, lo, pp, xs);
    if (stride == 1)
        return dc_r32_put_all(esym, v, count, 0, 1, 8, lo, pp, xs);
    return dc_r32_put_all(esym, v, count, 0, stride, 8, lo, pp, xs);
}

dc_status_t dc_r32_encode(dc_ent_scratch_t *s, const uint8_t *v, size_t count, unsigned stride,
                          unsigned bits, size_t nsym, unsigned S, uint8_t *dst, size_t h,
                          size_t cap, size_t *out_len, dc_ent_isa_t isa)
{
    /* x_max = ((L >> S) << 16) * f: x >= x_max would leave >= 2^31 */
    for (size_t k = 0; k < nsym; k++) {
        uint32_t c = s->syms[k];
        s->esym[c].x_max = s->qfreq[c] << (31 - S);
    }
    uint32_t xs[32];
    for (unsigned j = 0; j < 32; j++)
        xs[j] = DC_R32_L;
    uint8_t *lo = dst + h, *p = dst + cap;
    if (cap < h + 128 + 66 ||
        !dc_r32_put(s->esym, v, count, stride, bits, lo + 128, &p, xs, isa))
        return DC_ERR_BUSY;
    for (unsigned j = 32; j-- > 0;) {
        p -= 4;
        dc_store_le32(p, xs[j]);
    }
    size_t dlen = (size_t)(dst + cap - p);
    memmove(lo, p, dlen);
    *out_len = h + dlen;
    return DC_OK;
}

/* --- decoders -------------------------------------------------------------- */


/* The 32-way layout, one symbol at a time (the reference, what the SIMD
 * loops leave, and the portable decoder): symbol i by state i % 32, then
 * at most one 16-bit word if the state fell below 2^15.  As the portable
 * decoder it is slower than the four-way loop (measured with
 * DELTACAST_KERN_ISA=scalar, inject 5%: 6.0-7.1 against 4.3 ns per 16-bit
 * symbol; the states live in memory; the unrolled blocks with constant
 * state slots gave 1.2x over indexed ones); tried and dropped: the
 * one-load 64-bit table of the other layouts instead of the two SIMD
 * tables (no change). */
/* dc_r32_run_scalar's blocks of 32 symbols (i a multiple of 32, 64 bytes
 * of data surely there): the state of each step a constant slot of xs,
 * branch-free renormalization (whether a word is read is a coin toss the
 * branch predictor loses); returns the new p, *ip the new i. */
static inline __attribute__((always_inline)) const uint8_t *
dc_r32_blocks(uint32_t *restrict xs, const uint32_t *restrict ftab,
              const uint16_t *restrict stab, const unsigned S, const uint8_t *p,
              const uint8_t *end, uint8_t *out, const unsigned stride, const unsigned bits,
              size_t *ip, size_t upto)
{
    const uint32_t mask = (1u << S) - 1;
    size_t i = *ip;
    while (i + 32 <= upto && end - p >= 64) {
        uint8_t *o = out + i * stride;
#pragma GCC unroll 32
        for (unsigned j = 0; j < 32; j++) {
            uint32_t x = xs[j];
            uint32_t e = ftab[x & mask];
            uint16_t sym = stab[x & mask];
            x = (e >> 16) * (x >> S) + (e & 0xffff);
            unsigned need = x < DC_R32_L;
            uint32_t xw = x << 16 | dc_load_le16(p);
            xs[j] = need ? xw : x;
            p += 2 * need;
            if (bits == 16)
                dc_store_le16(o + j * stride, sym);
            else
                o[j * stride] = (uint8_t)sym;
        }
        i += 32;
    }
    *ip = i;
    return p;
}

static dc_status_t dc_r32_run_scalar(dc_rans_dec_t *d, uint8_t *out, unsigned stride,
                                     size_t upto)
{
    const uint8_t *p = d->p, *end = d->end;
    const unsigned S = d->S;
    const uint32_t mask = (1u << S) - 1;
    const uint32_t *ftab = d->ftab;
    const uint16_t *stab = d->stab;
    size_t i = d->i;
    dc_status_t st = DC_OK;
    /* while 64 bytes are surely there (32 symbols, at most one word
     * each): branch-free renormalization (whether a word is read is a coin
     * toss the branch predictor loses) */
    if ((i & 31) == 0 && i + 32 <= upto && end - p >= 64) {
        /* the states in a local array (the output stores cannot touch it) */
        uint32_t xs[32];
        memcpy(xs, d->x, sizeof(xs));
        if (d->bits == 16 && stride == 2)
            p = dc_r32_blocks(xs, ftab, stab, S, p, end, out, 2, 16, &i, upto);
        else if (d->bits == 8 && stride == 1)
            p = dc_r32_blocks(xs, ftab, stab, S, p, end, out, 1, 8, &i, upto);
        else
            p = dc_r32_blocks(xs, ftab, stab, S, p, end, out, stride, d->bits, &i, upto);
        memcpy(d->x, xs, sizeof(xs));
    }
    for (; i < upto; i++) {
        uint32_t x = d->x[i & 31];
        uint32_t e = ftab[x & mask];
        uint16_t sym = stab[x & mask];
        x = (e >> 16) * (x >> S) + (e & 0xffff);
        if (x < DC_R32_L) {
            if (DC_UNLIKELY(end - p < 2)) {
                st = dc_error(DC_ERR_FORMAT, "rANS data truncated");
                break;
            }
            x = x << 16 | dc_load_le16(p);
            p += 2;
        }
        d->x[i & 31] = x;
        if (d->bits == 16)
            dc_store_le16(out + i * stride, sym);
        else
            out[i * stride] = (uint8_t)sym;
    }
    d->p = p;
    d->i = i;
    return st;
}

#if defined(__x86_64__)
/* One 32-way step of 16 states: decode, renormalize (the lanes below 2^16
 * take the next words at *p in lane order), return the symbols. */
#define DC_R32_STEP16(X, SYM)                                                 \
    do {                                                                      \
        __m512i slot_ = _mm512_and_si512(X, maskv);                           \
        __m512i e_ = _mm512_i32gather_epi32(slot_, (const void *)ftab, 4);    \
        SYM = _mm512_i32gather_epi32(slot_, (const void *)stab, 2);           \
        X = _mm512_add_epi32(_mm512_mullo_epi32(_mm512_srli_epi32(e_, 16),    \
                                                _mm512_srl_epi32(X, sv)),     \
                             _mm512_and_si512(e_, lo16));                     \
        __mmask16 m_ = _mm512_cmplt_epu32_mask(X, lv);                        \
        __m512i w_ = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)p)); \
        X = _mm512_mask_or_epi32(X, m_, _mm512_slli_epi32(X, 16),             \
                                 _mm512_maskz_expand_epi32(m_, w_));          \
        p += 2 * (unsigned)__builtin_popcount((unsigned)m_);                  \
    } while (0)

/* The 32-way layout with AVX-512: 32 symbols a step (two vectors of 16
 * states: two dependency chains of gathers) while 64 bytes of data are
 * surely there; the scalar loop does the rest. */
DC_AVX512_TARGET static dc_status_t dc_r32_run_avx512(dc_rans_dec_t *d, uint8_t *out,
                                                      unsigned stride, size_t upto)
{
    size_t i = d->i;
    if ((i & 31) == 0 && (d->bits == 16 ? stride == 2 : stride == 1)) {
        const uint8_t *p = d->p, *end = d->end;
        const uint32_t *ftab = d->ftab;
        const uint16_t *stab = d->stab;
        const __m512i maskv = _mm512_set1_epi32((int)((1u << d->S) - 1));
        const __m512i lo16 = _mm512_set1_epi32(0xffff), lv = _mm512_set1_epi32(DC_R32_L);
        const __m128i sv = _mm_cvtsi32_si128((int)d->S);
        __m512i xa = _mm512_loadu_si512(d->x), xb = _mm512_loadu_si512(d->x + 16);
        for (; i + 32 <= upto && end - p >= 64; i += 32) {
            __m512i sa, sb;
            DC_R32_STEP16(xa, sa);
            DC_R32_STEP16(xb, sb);
            if (d->bits == 16) {
                _mm256_storeu_si256((void *)(out + 2 * i), _mm512_cvtepi32_epi16(sa));
                _mm256_storeu_si256((void *)(out + 2 * i + 32), _mm512_cvtepi32_epi16(sb));
            } else {
                _mm_storeu_si128((void *)(out + i), _mm512_cvtepi32_epi8(sa));
                _mm_storeu_si128((void *)(out + i + 16), _mm512_cvtepi32_epi8(sb));
            }
        }
        _mm512_storeu_si512(d->x, xa);
        _mm512_storeu_si512(d->x + 16, xb);
        d->p = p;
        d->i = i;
    }
    return dc_r32_run_scalar(d, out, stride, upto);
}
#endif

#if defined(__x86_64__)
/* For the AVX2 renormalization: per 8-bit mask of the lanes that read a
 * word, the index of the word each lane takes (lane j: the number of
 * reading lanes below j), for a vpermd over the next 8 words. */
static uint32_t g_r32_perm[256][8];
static pthread_once_t g_r32_perm_once = PTHREAD_ONCE_INIT;
static void dc_r32_perm_init(void)
{
    for (unsigned m = 0; m < 256; m++)
        for (unsigned j = 0; j < 8; j++)
            g_r32_perm[m][j] = (uint32_t)__builtin_popcount(m & ((1u << j) - 1));
}

/* One 32-way step of 8 states with AVX2 (as DC_R32_STEP16) */
#define DC_R32_STEP8(X, SYM)                                                  \
    do {                                                                      \
        __m256i slot_ = _mm256_and_si256(X, maskv);                           \
        __m256i e_ = _mm256_i32gather_epi32((const int *)ftab, slot_, 4);     \
        SYM = _mm256_and_si256(                                               \
            _mm256_i32gather_epi32((const int *)stab, slot_, 2), symmask);    \
        X = _mm256_add_epi32(_mm256_mullo_epi32(_mm256_srli_epi32(e_, 16),    \
                                                _mm256_srl_epi32(X, sv)),     \
                             _mm256_and_si256(e_, lo16));                     \
        __m256i m_ = _mm256_cmpgt_epi32(lv, X);                               \
        unsigned mb_ = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(m_)); \
        __m256i w_ = _mm256_cvtepu16_epi32(_mm_loadu_si128((const void *)p)); \
        w_ = _mm256_permutevar8x32_epi32(                                     \
            w_, _mm256_loadu_si256((const void *)g_r32_perm[mb_]));           \
        X = _mm256_blendv_epi8(X, _mm256_or_si256(_mm256_slli_epi32(X, 16), w_), m_); \
        p += 2 * (unsigned)__builtin_popcount(mb_);                           \
    } while (0)

/* 16 symbols of 32-bit lanes (< 2^16) as 16 little-endian u16 */
#define DC_R32_PACK16(A, B)                                                   \
    _mm256_permute4x64_epi64(_mm256_packus_epi32(A, B), 0xD8)

/* The 32-way layout with AVX2: 32 symbols a step, four vectors of 8 states
 * (four dependency chains of gathers). */
DC_AVX2_TARGET static dc_status_t dc_r32_run_avx2(dc_rans_dec_t *d, uint8_t *out,
                                                  unsigned stride, size_t upto)
{
    size_t i = d->i;
    if ((i & 31) == 0 && (d->bits == 16 ? stride == 2 : stride == 1)) {
        pthread_once(&g_r32_perm_once, dc_r32_perm_init);
        const uint8_t *p = d->p, *end = d->end;
        const uint32_t *ftab = d->ftab;
        const uint16_t *stab = d->stab;
        const __m256i maskv = _mm256_set1_epi32((int)((1u << d->S) - 1));
        const __m256i lo16 = _mm256_set1_epi32(0xffff), lv = _mm256_set1_epi32(DC_R32_L);
        const __m256i symmask = _mm256_set1_epi32(d->bits == 16 ? 0xffff : 0xff);
        const __m128i sv = _mm_cvtsi32_si128((int)d->S);
        __m256i x0 = _mm256_loadu_si256((const void *)d->x);
        __m256i x1 = _mm256_loadu_si256((const void *)(d->x + 8));
        __m256i x2 = _mm256_loadu_si256((const void *)(d->x + 16));
        __m256i x3 = _mm256_loadu_si256((const void *)(d->x + 24));
        for (; i + 32 <= upto && end - p >= 64; i += 32) {
            __m256i s0, s1, s2, s3;
            DC_R32_STEP8(x0, s0);
            DC_R32_STEP8(x1, s1);
            DC_R32_STEP8(x2, s2);
            DC_R32_STEP8(x3, s3);
            __m256i a = DC_R32_PACK16(s0, s1), b = DC_R32_PACK16(s2, s3);
            if (d->bits == 16) {
                _mm256_storeu_si256((void *)(out + 2 * i), a);
                _mm256_storeu_si256((void *)(out + 2 * i + 32), b);
            } else {
                /* 32 words < 256 to bytes */
                __m256i c = _mm256_permute4x64_epi64(_mm256_packus_epi16(a, b), 0xD8);
                _mm256_storeu_si256((void *)(out + i), c);
            }
        }
        _mm256_storeu_si256((void *)d->x, x0);
        _mm256_storeu_si256((void *)(d->x + 8), x1);
        _mm256_storeu_si256((void *)(d->x + 16), x2);
        _mm256_storeu_si256((void *)(d->x + 24), x3);
        d->p = p;
        d->i = i;
    }
    return dc_r32_run_scalar(d, out, stride, upto);
}
#endif

dc_status_t dc_r32_run(dc_rans_dec_t *d, uint8_t *out, unsigned stride, size_t upto,
                       dc_ent_isa_t isa)
{
#if defined(__x86_64__)
    if (isa >= DC_ENT_ISA_AVX512_VBMI)
        return dc_r32_run_avx512(d, out, stride, upto);
    if (isa >= DC_ENT_ISA_AVX2)
        return dc_r32_run_avx2(d, out, stride, upto);
#else
    (void)isa;
#endif
    return dc_r32_run_scalar(d, out, stride, upto);
}
