/* ent_golomb.c - Golomb-coded positions: the encoder (portable, BMI2 and
 * AVX-512 bit writers) and the resumable decoder with its tables. */
#include "kernels/entropy_internal.h"

#include <math.h>
#include <stdlib.h>

/* --- positions: Golomb-coded gaps ----------------------------------------- */

size_t dc_ent_pos_bound(size_t count, uint64_t n)
{
    /* With the chosen m, a gap costs at most q+1+ceil(log2 m) bits and the
     * sum of q is <= n/m; generous: 10 + count * 34 bits + n/8. */
    return 16 + (count * 34 + 7) / 8 + (size_t)(n / 8) + 8;
}

static unsigned dc_ceil_log2_u64(uint64_t m)
{
    unsigned b = 0;
    while (b < 64 && (1ull << b) < m)
        b++;
    return b;
}

static uint64_t dc_golomb_param(size_t count, uint64_t span)
{
    if (count == 0)
        return 1;
    double mean = (double)(span - count) / (double)count; /* mean gap */
    if (mean <= 0.0)
        return 1;
    double theta = mean / (1.0 + mean);
    double m = ceil(log(1.0 + theta) / -log(theta));
    if (!(m >= 1.0))
        m = 1.0;
    if (m > 2147483648.0)
        m = 2147483648.0;
    return (uint64_t)m;
}

uint64_t dc_ent_pos_param(size_t count, uint64_t span)
{
    return dc_golomb_param(count, span);
}

/*
 * Golomb encoder.  The bit writer is branch-free: acc's low nb bits (nb < 8
 * between codes) are pending, MSB first; after each code the whole bytes
 * go out with one 8-byte big-endian store (bytes past the whole ones are
 * scratch, rewritten by the next store), so a put never branches on the
 * fill.  Within 8 bytes of the end, bytes go out one at a time, checked.
 */
typedef struct {
    uint64_t acc;
    unsigned nb;
    uint8_t *p, *lim, *end; /* lim: last p an 8-byte store may start at */
} dc_gw_t;

/* Put the L (1..56) low bits of v; 0 when the output is full. */
static inline __attribute__((always_inline)) int dc_gw_put(dc_gw_t *w, uint64_t v, unsigned L)
{
    w->acc = (w->acc << L) | v;
    w->nb += L;
    if (DC_LIKELY(w->p <= w->lim)) {
        uint64_t out = __builtin_bswap64(w->acc << (64 - w->nb));
        memcpy(w->p, &out, 8);
        w->p += w->nb >> 3;
        w->nb &= 7;
        return 1;
    }
    for (; w->nb >= 8; w->nb -= 8) {
        if (w->p >= w->end)
            return 0;
        *w->p++ = (uint8_t)(w->acc >> (w->nb - 8));
    }
    return 1;
}

/* Golomb parameters of a stream: m, b = ceil(log2 m), cut = 2^b - m, and
 * mrcp for g / m by a multiply (g, m < 2^32, M = floor(2^64 / m) + 1:
 * (g * M) >> 64 is exact since g * m < 2^64). */
typedef struct {
    uint64_t m, cut, mrcp;
    unsigned b;
} dc_golomb_t;

/* The codes of the gaps before pos[k0] .. pos[k1 - 1] (the gap before
 * pos[0] is pos[0]); 0 when the output is full. */
static inline __attribute__((always_inline)) int
dc_golomb_range(dc_gw_t *w, const uint32_t *restrict pos, size_t k0, size_t k1,
                const dc_golomb_t *gp)
{
    const uint64_t m = gp->m, cut = gp->cut, mrcp = gp->mrcp;
    const unsigned b = gp->b;
    uint32_t prev = k0 ? pos[k0 - 1] : UINT32_MAX; /* -1 */
    for (size_t k = k0; k < k1; k++) {
        uint64_t g = (uint32_t)(pos[k] - prev - 1u);
        prev = pos[k];
        uint64_t q = m > 1 ? (uint64_t)(((unsigned __int128)g * mrcp) >> 64) : g;
        uint64_t r = g - q * m;
        /* truncated binary remainder: b - 1 bits below cut, else b bits of
         * r + cut (b == 0: m == 1, nothing) */
        uint64_t lt = r < cut;
        unsigned rb = b - (unsigned)lt;
        uint64_t rv = r + (cut & (lt - 1));
        if (DC_LIKELY(q + 1 + rb <= 56)) {
            /* the whole code in one put: q zeros, a one, the remainder */
            if (!dc_gw_put(w, (1ull << rb) | rv, (unsigned)q + 1 + rb))
                return 0;
            continue;
        }
        for (; q >= 32; q -= 32)
            if (!dc_gw_put(w, 0, 32))
                return 0;
        if (!dc_gw_put(w, 1, (unsigned)q + 1))
            return 0;
        if (rb && !dc_gw_put(w, rv, rb))
            return 0;
    }
    return 1;
}

static inline __attribute__((always_inline)) int dc_gw_finish(dc_gw_t *w)
{
    if (w->nb) {
        if (w->p >= w->end)
            return 0;
        *w->p++ = (uint8_t)(w->acc << (8 - w->nb));
        w->nb = 0;
    }
    return 1;
}

/* (The writer works on a local copy: the output's byte stores could alias
 * *w, which would force its fields through memory on every put.) */
static int dc_golomb_all_base(dc_gw_t *wp, const uint32_t *pos, size_t count,
                              const dc_golomb_t *gp)
{
    dc_gw_t w = *wp;
    int ok = dc_golomb_range(&w, pos, 0, count, gp) && dc_gw_finish(&w);
    *wp = w;
    return ok;
}

#if defined(__x86_64__)
/* The same with BMI2's flag-free variable shifts (shlx/shrx: one uop
 * each, where shl %cl is three), for CPUs the avx2 kernels run on. */
__attribute__((target("bmi2"))) static int
dc_golomb_all_bmi2(dc_gw_t *wp, const uint32_t *pos, size_t count, const dc_golomb_t *gp)
{
    dc_gw_t w = *wp;
    int ok = dc_golomb_range(&w, pos, 0, count, gp) && dc_gw_finish(&w);
    *wp = w;
    return ok;
}

/*
 * AVX-512: the codes of 16 gaps at a time in vector lanes (gap, quotient by
 * a double multiply corrected by one step either way, truncated binary
 * remainder, code value and length), joined into 4 (or 8) codes of at most
 * 56 bits, then only the bit packing is scalar.  A group with a code
 * longer than one put goes through the scalar loop.
 * Needs m <= 2^30 (the remainder correction is done in signed 32 bits).
 */
DC_AVX512_GOLOMB_TARGET static int
dc_golomb_all_avx512(dc_gw_t *wp, const uint32_t *pos, size_t count, const dc_golomb_t *gp)
{
    dc_gw_t wl = *wp, *w = &wl;
    int ok = 0;
    size_t k = 0;
    if (gp->m <= (1u << 30)) {
        const __m512i one = _mm512_set1_epi32(1), zero = _mm512_setzero_si512();
        const __m512i vm = _mm512_set1_epi32((int)gp->m), vcut = _mm512_set1_epi32((int)gp->cut);
        const __m512i vb = _mm512_set1_epi32((int)gp->b);
        const __m512i c55 = _mm512_set1_epi32(55), c56 = _mm512_set1_epi32(56);
        const __m512d inv = _mm512_set1_pd(1.0 / (double)gp->m);
        __m512i prevv = _mm512_set1_epi32(-1); /* lane 15: the position before */
        _Alignas(64) uint32_t vs[16], ls[16];
        _Alignas(64) uint64_t vq[8], lq[8];
        const __m512i pick_even = _mm512_set_epi64(6, 4, 2, 0, 6, 4, 2, 0);
        const __m512i pick_odd = _mm512_set_epi64(7, 5, 3, 1, 7, 5, 3, 1);
        const __m512i c56q = _mm512_set1_epi64(56);
        for (; k + 16 <= count; k += 16) {
            __m512i cur = _mm512_loadu_si512(pos + k);
            __m512i prv = _mm512_alignr_epi32(cur, prevv, 15);
            prevv = cur;
            __m512i g = _mm512_sub_epi32(_mm512_sub_epi32(cur, prv), one);
            __m256i qlo = _mm512_cvttpd_epu32(
                _mm512_mul_pd(_mm512_cvtepu32_pd(_mm512_castsi512_si256(g)), inv));
            __m256i qhi = _mm512_cvttpd_epu32(
                _mm512_mul_pd(_mm512_cvtepu32_pd(_mm512_extracti64x4_epi64(g, 1)), inv));
            __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(qlo), qhi, 1);
            /* r = g - q*m is exact in signed 32 bits (|error of q| <= 1,
             * m <= 2^30); step q once toward the true quotient */
            __m512i r = _mm512_sub_epi32(g, _mm512_mullo_epi32(q, vm));
            __mmask16 neg = _mm512_cmplt_epi32_mask(r, zero);
            q = _mm512_mask_sub_epi32(q, neg, q, one);
            r = _mm512_mask_add_epi32(r, neg, r, vm);
            __mmask16 big = _mm512_cmpge_epi32_mask(r, vm);
            q = _mm512_mask_add_epi32(q, big, q, one);
            r = _mm512_mask_sub_epi32(r, big, r, vm);
            __mmask16 lt = _mm512_cmplt_epu32_mask(r, vcut);
            __m512i rb = _mm512_mask_sub_epi32(vb, lt, vb, one);
            __m512i rv = _mm512_mask_add_epi32(r, (__mmask16)~lt, r, vcut);
            __m512i len = _mm512_add_epi32(_mm512_add_epi32(q, one), rb);
            __mmask16 slow = _mm512_cmpgt_epu32_mask(q, c55) | _mm512_cmpgt_epu32_mask(len, c56);
            if (DC_UNLIKELY(slow)) {
                if (!dc_golomb_range(w, pos, k, k + 16, gp))
                    goto out;
                continue;
            }
            __m512i val = _mm512_or_si512(_mm512_sllv_epi32(one, rb), rv);
            /* join neighbouring codes while the joint code fits one put:
             * pairs in 64-bit lanes (value < 2^len), then pairs of pairs */
            const __m512i lo32 = _mm512_set1_epi64(0xffffffff);
            __m512i v2 = _mm512_or_si512(
                _mm512_sllv_epi64(_mm512_and_si512(val, lo32), _mm512_srli_epi64(len, 32)),
                _mm512_srli_epi64(val, 32));
            __m512i l2 = _mm512_add_epi64(_mm512_and_si512(len, lo32), _mm512_srli_epi64(len, 32));
            if (DC_UNLIKELY(_mm512_cmpgt_epu64_mask(l2, c56q))) {
                _mm512_store_si512(vs, val);
                _mm512_store_si512(ls, len);
                for (unsigned j = 0; j < 16; j++)
                    if (!dc_gw_put(w, vs[j], ls[j]))
                        goto out;
                continue;
            }
            __m512i ev = _mm512_permutexvar_epi64(pick_even, v2);
            __m512i el = _mm512_permutexvar_epi64(pick_even, l2);
            __m512i ov = _mm512_permutexvar_epi64(pick_odd, v2);
            __m512i ol = _mm512_permutexvar_epi64(pick_odd, l2);
            __m512i l4 = _mm512_add_epi64(el, ol);
            if (DC_LIKELY(!(_mm512_cmpgt_epu64_mask(l4, c56q) & 0x0f))) {
                _mm512_store_si512(vq, _mm512_or_si512(_mm512_sllv_epi64(ev, ol), ov));
                _mm512_store_si512(lq, l4);
                for (unsigned j = 0; j < 4; j++)
                    if (!dc_gw_put(w, vq[j], (unsigned)lq[j]))
                        goto out;
                continue;
            }
            _mm512_store_si512(vq, v2);
            _mm512_store_si512(lq, l2);
            for (unsigned j = 0; j < 8; j++)
                if (!dc_gw_put(w, vq[j], (unsigned)lq[j]))
                    goto out;
        }
    }
    ok = dc_golomb_range(w, pos, k, count, gp) && dc_gw_finish(w);
out:
    *wp = wl;
    return ok;
}
#endif

dc_status_t dc_ent_pos_encode(const uint32_t *pos, size_t count, uint64_t n, uint8_t *dst,
                              size_t cap, size_t *out_len)
{
    if (cap < 10)
        return dc_error(DC_ERR_BUSY, "positions: output buffer too small");
    uint64_t span = count ? (uint64_t)pos[count - 1] + 1 : 0;
    dc_golomb_t gp;
    gp.m = dc_golomb_param(count, span);
    size_t h = dc_ent_put_varint(dst, gp.m);
    gp.b = dc_ceil_log2_u64(gp.m);
    gp.cut = (gp.b >= 64 ? 0 : (1ull << gp.b)) - gp.m;
    gp.mrcp = gp.m > 1 ? UINT64_MAX / gp.m + 1 : 0;
    dc_gw_t w = {.p = dst + h, .end = dst + cap};
    w.lim = cap - h >= 8 ? w.end - 8 : dst + h - 1;
    int ok;
#if defined(__x86_64__)
    dc_ent_isa_t isa = dc_ent_isa();
    if (isa >= DC_ENT_ISA_AVX512)
        ok = dc_golomb_all_avx512(&w, pos, count, &gp);
    else if (isa >= DC_ENT_ISA_AVX2)
        ok = dc_golomb_all_bmi2(&w, pos, count, &gp);
    else
#endif
        ok = dc_golomb_all_base(&w, pos, count, &gp);
    if (!ok)
        return dc_error(DC_ERR_BUSY, "positions: output buffer too small");
    (void)n;
    *out_len = (size_t)(w.p - dst);
    return DC_OK;
}

/* Bits of the positions stream left from (p, bc). */
static inline uint64_t dc_gd_left(const dc_golomb_dec_t *d)
{
    return (uint64_t)(d->end - d->p) * 8 - d->bc;
}

/* The next nb (1..57, <= dc_gd_left) stream bits, right-aligned. */
static inline uint64_t dc_gd_peek(const dc_golomb_dec_t *d, unsigned nb)
{
    uint64_t v = 0;
    if (d->end - d->p >= 8) {
        v = __builtin_bswap64(dc_load_le64(d->p));
    } else {
        for (ptrdiff_t i = 0; i < d->end - d->p; i++)
            v |= (uint64_t)d->p[i] << (56 - 8 * i);
    }
    return (v << d->bc) >> (64 - nb);
}

static inline void dc_gd_skip(dc_golomb_dec_t *d, uint64_t nb)
{
    uint64_t t = d->bc + nb;
    d->p += t >> 3;
    d->bc = (unsigned)(t & 7);
}

/* One code, bit-exact and bounds-checked at every step (long runs of zeros,
 * the last bytes of the stream). */
static dc_status_t dc_gd_careful(dc_golomb_dec_t *d, uint32_t *out)
{
    uint64_t q = 0;
    for (;;) {
        uint64_t left = dc_gd_left(d);
        if (left == 0)
            return dc_error(DC_ERR_FORMAT, "positions: stream truncated");
        unsigned nb = left < 57 ? (unsigned)left : 57;
        uint64_t v = dc_gd_peek(d, nb);
        if (v == 0) {
            q += nb;
            dc_gd_skip(d, nb);
            if (q > d->n)
                return dc_error(DC_ERR_FORMAT, "positions: gap exceeds chunk");
            continue;
        }
        unsigned lz = (unsigned)__builtin_clzll(v) - (64 - nb);
        q += lz;
        dc_gd_skip(d, lz + 1);
        break;
    }
    if (q > d->n)
        return dc_error(DC_ERR_FORMAT, "positions: gap exceeds chunk");
    uint64_t rem = 0;
    unsigned b = d->b;
    if (b) {
        if (dc_gd_left(d) < b - 1)
            return dc_error(DC_ERR_FORMAT, "positions: stream truncated");
        rem = b > 1 ? dc_gd_peek(d, b - 1) : 0;
        if (rem < d->cut) {
            dc_gd_skip(d, b - 1);
        } else {
            if (dc_gd_left(d) < b)
                return dc_error(DC_ERR_FORMAT, "positions: stream truncated");
            rem = dc_gd_peek(d, b) - d->cut;
            dc_gd_skip(d, b);
            if (rem >= d->m)
                return dc_error(DC_ERR_FORMAT, "positions: bad remainder");
        }
    }
    uint64_t g = q * d->m + rem;
    uint64_t ps = d->next + g;
    if (g > d->n || ps >= d->n)
        return dc_error(DC_ERR_FORMAT, "positions: position %llu past chunk of %llu",
                        (unsigned long long)ps, (unsigned long long)d->n);
    *out = (uint32_t)ps;
    d->next = ps + 1;
    return DC_OK;
}

dc_status_t dc_golomb_dec_init(dc_golomb_dec_t *d, const uint8_t *src, size_t len, size_t count,
                               uint64_t n)
{
    const uint8_t *p = src, *end = src + len;
    uint64_t m;
    if (dc_ent_get_varint(&p, end, &m) != DC_OK)
        return dc_error(DC_ERR_FORMAT, "positions: bad Golomb parameter");
    if (m < 1 || m > (1ull << 32))
        return dc_error(DC_ERR_FORMAT, "positions: Golomb parameter %llu out of range",
                        (unsigned long long)m);
    if (count > n)
        return dc_error(DC_ERR_FORMAT, "positions: %zu changes in %llu elements", count,
                        (unsigned long long)n);
    d->p = p;
    d->end = end;
    d->bc = 0;
    d->m = m;
    d->b = dc_ceil_log2_u64(m);
    d->cut = (d->b >= 64 ? 0 : (1ull << d->b)) - m;
    d->n = n;
    d->next = 0;
    d->k = 0;
    d->count = count;
    /* With many gaps and short codes, a table over the next DC_GT_BITS
     * bits gives gap | bits used << 24 for every code that fits in them
     * (0: decode it without the table): each code of q zeros, a one and r
     * in truncated binary fills the 2^(DC_GT_BITS - length) slots it
     * prefixes. */
    unsigned b = d->b;
    d->use_tab = count >= 4096 && b + 1 <= DC_GT_BITS;
    d->glook = 0; /* gtab2 not built yet */
    if (d->use_tab) {
        uint32_t *gtab = d->gtab;
        memset(gtab, 0, sizeof(d->gtab));
        for (uint64_t q = 0; q + 1 + (b ? b - 1 : 0) <= DC_GT_BITS; q++) {
            for (uint64_t r = 0; r < m; r++) {
                unsigned rb = b ? (r < d->cut ? b - 1 : b) : 0;
                uint64_t rv = b ? (r < d->cut ? r : r + d->cut) : 0;
                unsigned clen = (unsigned)q + 1 + rb;
                if (clen > DC_GT_BITS)
                    continue;
                uint32_t code = (uint32_t)(((1ull << rb) | rv) << (DC_GT_BITS - clen));
                uint32_t e = (uint32_t)(q * m + r) | (uint32_t)clen << 24;
                for (uint32_t j = 0; j < (1u << (DC_GT_BITS - clen)); j++)
                    gtab[code | j] = e;
            }
        }
    }
    return DC_OK;
}

/* gtab2 from gtab (what dc_ent_sparse_run decodes with; built on first
 * use).  Every gtab code has <= DC_GT_BITS bits, so its gap is < 2^12
 * ((13 - b) m - 1 < (13 - b) 2^b <= 4096 for b <= 11): the one-code entry
 * is a plain repacking, 0 for 0.  A second code also fits a slot when it
 * fits the bits after the first (zero-filled there: a code that needs the
 * filled bits is longer than what is left, and is refused); the shortest
 * code has max(b, 1) bits, so only b <= DC_GT_BITS / 2 has any. */
void dc_golomb_build_g2(dc_golomb_dec_t *d)
{
    const uint32_t *gtab = d->gtab;
    uint32_t *g2 = d->gtab2;
    for (uint32_t i = 0; i < (1u << DC_GT_BITS); i++) {
        uint32_t e0 = gtab[i], g0 = e0 & 0xfffu;
        g2[i] = e0 >> 24 | g0 << 7 | g0 << 20;
    }
    size_t twos = 0;
    unsigned minlen = d->b ? d->b : 1;
    if (2 * minlen <= DC_GT_BITS) {
        for (uint32_t i = 0; i < (1u << DC_GT_BITS); i++) {
            uint32_t e0 = gtab[i];
            unsigned l0 = e0 >> 24;
            if (e0 == 0 || l0 + minlen > DC_GT_BITS)
                continue;
            uint32_t e1 = gtab[(i << l0) & ((1u << DC_GT_BITS) - 1)];
            uint32_t g0 = e0 & 0xfffu, o1 = g0 + 1 + (e1 & 0xffffffu);
            if (e1 != 0 && l0 + (e1 >> 24) <= DC_GT_BITS && o1 < (1u << 12)) {
                g2[i] = (l0 + (e1 >> 24)) | 1u << 6 | g0 << 7 | o1 << 20;
                twos++;
            }
        }
    }
    /* three lookups of up to two codes beat four of one from 1/8 of the
     * slots on (measured: the 2.3% gen pair, m = 29, gains 8%; with no
     * two-code slot at all the one-code loop is faster) */
    d->glook = twos * 8 >= (1u << DC_GT_BITS) ? 3 : 4;
}

/*
 * The decoder without its table (streams of fewer than 4096 codes, or codes
 * longer than DC_GT_BITS: most of a ctx chunk's per-class rank streams),
 * for b >= 2: one code per iteration from one big-endian load, its quotient
 * by a count of leading zeros and its remainder in truncated binary
 * without a branch.  The remainder is always < m here (b - 1 bits give
 * less than cut < m; b bits at least 2 cut give at most 2^b - 1 - cut =
 * m - 1), so the careful path's "bad remainder" cannot happen.  Stops at a
 * code that does not fit the 57+ bits of the load or within 8 bytes of
 * the end (dc_golomb_dec_run then takes one code the careful way), at
 * upto, or at a position past the chunk (*st: the careful path's error).
 * Compiled twice: portable, and with LZCNT / BMI2 (lzcnt, shlx / shrx).
 */
static inline __attribute__((always_inline)) size_t
dc_golomb_lz_loop(const uint8_t **pp, const uint8_t *end, unsigned *pbc, uint64_t *pnext,
                  uint64_t n, uint64_t m, uint64_t cut, unsigned b, uint32_t *pos, size_t k,
                  size_t upto, dc_status_t *st)
{
    const uint8_t *p = *pp;
    unsigned bc = *pbc;
    uint64_t next = *pnext;
    /* a code fits the load when lz + 1 + b <= 64 - bc; an all-zero window
     * (lz 64) never fits, and clz(win | 1) = 63 for it refuses it as well
     * (b >= 2) without a test for zero */
    const unsigned lim = 63 - b, sl = 64 - b;
    uint32_t *o = pos + k, *const oe = pos + upto;
    while (o < oe && end - p >= 8) {
        /* a code moves p by at most 8 bytes (bc + its bits <= 64): this
         * many codes keep 8 bytes readable at p without a check each */
        size_t safe = (size_t)(end - p - 8) / 8 + 1;
        uint32_t *oe2 = (size_t)(oe - o) < safe ? oe : o + safe;
        do {
            uint64_t win = __builtin_bswap64(dc_load_le64(p)) << bc;
            unsigned lz = (unsigned)__builtin_clzll(win | 1);
            if (lz + bc > lim)
                goto stop;
            /* the b bits after the one; truncated binary: their top b - 1
             * bits when below cut, else all b of them less cut */
            uint64_t v = ((win << lz) << 1) >> sl;
            uint64_t short_r = v >> 1;
            unsigned is_long = short_r >= cut;
            uint64_t rem = is_long ? v - cut : short_r;
            uint64_t ps = next + (uint64_t)lz * m + rem;
            if (DC_UNLIKELY(ps >= n)) {
                *st = dc_error(DC_ERR_FORMAT, "positions: position %llu past chunk of %llu",
                               (unsigned long long)ps, (unsigned long long)n);
                goto stop;
            }
            *o++ = (uint32_t)ps;
            next = ps + 1;
            bc += lz + b + is_long;
            p += bc >> 3;
            bc &= 7;
        } while (o < oe2);
    }
stop:
    *pp = p;
    *pbc = bc;
    *pnext = next;
    return (size_t)(o - pos);
}

static size_t dc_golomb_lz_base(const uint8_t **pp, const uint8_t *end, unsigned *pbc,
                                uint64_t *pnext, uint64_t n, uint64_t m, uint64_t cut, unsigned b,
                                uint32_t *pos, size_t k, size_t upto, dc_status_t *st)
{
    return dc_golomb_lz_loop(pp, end, pbc, pnext, n, m, cut, b, pos, k, upto, st);
}

#if defined(__x86_64__)
/* every CPU with BMI2 has LZCNT (Haswell, Zen) */
__attribute__((target("bmi2,lzcnt"))) static size_t
dc_golomb_lz_bmi2(const uint8_t **pp, const uint8_t *end, unsigned *pbc, uint64_t *pnext,
                  uint64_t n, uint64_t m, uint64_t cut, unsigned b, uint32_t *pos, size_t k,
                  size_t upto, dc_status_t *st)
{
    return dc_golomb_lz_loop(pp, end, pbc, pnext, n, m, cut, b, pos, k, upto, st);
}
#endif

dc_status_t dc_golomb_dec_run(dc_golomb_dec_t *d, uint32_t *pos, size_t upto)
{
    /*
     * Fast path while >= 8 bytes are left: the stream position is a byte
     * pointer p plus bc < 8 bits already used of p[0], and one big-endian
     * load gives cont, the 64 stream bits from p on (the bits at the
     * position are cont << bc).  With the table, four codes come from one
     * load (4 * DC_GT_BITS + 7 <= 64): the dependency chain per code is a
     * shift, a table load and an add.  Codes that do not fit what is left
     * of cont, and the last bytes, go through dc_gd_careful.
     */
    const uint8_t *p = d->p, *end = d->end;
    unsigned bc = d->bc;
    uint64_t next = d->next;
    const uint64_t n = d->n, m = d->m, cut = d->cut;
    const unsigned b = d->b;
    const uint32_t *gtab = d->gtab;
    size_t k = d->k;
    if (upto > d->count)
        upto = d->count;
    dc_status_t st = DC_OK;
    /* without the table (b >= 2): dc_golomb_lz_loop, each code it leaves
     * (too long for one load, or in the last bytes) taken below */
    typedef size_t (*dc_golomb_lz_fn)(const uint8_t **, const uint8_t *, unsigned *, uint64_t *,
                                      uint64_t, uint64_t, uint64_t, unsigned, uint32_t *, size_t,
                                      size_t, dc_status_t *);
    dc_golomb_lz_fn lz_loop = NULL;
    if (!d->use_tab && b >= 2 && k < upto) {
#if defined(__x86_64__)
        if (dc_ent_isa() >= DC_ENT_ISA_AVX2)
            lz_loop = dc_golomb_lz_bmi2;
        else
#endif
            lz_loop = dc_golomb_lz_base;
    }
    while (k < upto) {
        if (lz_loop) {
            k = lz_loop(&p, end, &bc, &next, n, m, cut, b, pos, k, upto, &st);
            if (st != DC_OK)
                goto out;
            if (k >= upto)
                break;
        }
        if (end - p < 8)
            goto careful;
        uint64_t cont = __builtin_bswap64(dc_load_le64(p));
        if (d->use_tab && upto - k >= 4) {
            uint32_t e0 = gtab[(cont << bc) >> (64 - DC_GT_BITS)];
            if (DC_UNLIKELY(e0 == 0))
                goto one;
            bc += e0 >> 24;
            uint32_t e1 = gtab[(cont << bc) >> (64 - DC_GT_BITS)];
            uint64_t n0 = next + (e0 & 0xffffffu);
            pos[k] = (uint32_t)n0;
            next = n0 + 1;
            k += 1;
            if (DC_UNLIKELY(e1 == 0))
                goto renorm;
            bc += e1 >> 24;
            uint32_t e2 = gtab[(cont << bc) >> (64 - DC_GT_BITS)];
            uint64_t n1 = next + (e1 & 0xffffffu);
            pos[k] = (uint32_t)n1;
            next = n1 + 1;
            k += 1;
            if (DC_UNLIKELY(e2 == 0))
                goto renorm;
            bc += e2 >> 24;
            uint32_t e3 = gtab[(cont << bc) >> (64 - DC_GT_BITS)];
            uint64_t n2 = next + (e2 & 0xffffffu);
            pos[k] = (uint32_t)n2;
            next = n2 + 1;
            k += 1;
            if (DC_UNLIKELY(e3 == 0))
                goto renorm;
            bc += e3 >> 24;
            uint64_t n3 = next + (e3 & 0xffffffu);
            pos[k] = (uint32_t)n3;
            next = n3 + 1;
            k += 1;
        renorm:
            /* positions only grow: the last one written is the largest */
            if (DC_UNLIKELY(next > n)) {
                st = dc_error(DC_ERR_FORMAT, "positions: position %llu past chunk of %llu",
                              (unsigned long long)(next - 1), (unsigned long long)n);
                goto out;
            }
            p += bc >> 3;
            bc &= 7;
            continue;
        }
    one:
        /* one code from the >= 57 bits left of cont, when it fits them */
        {
            uint64_t win = cont << bc;
            unsigned lz = win ? (unsigned)__builtin_clzll(win) : 64;
            if (lz + 1 + b > 64 - bc)
                goto careful;
            /* in two shifts: with b = 0 the code can be all 64 bits */
            win = (win << lz) << 1;
            unsigned used = lz + 1;
            uint64_t rem = 0;
            if (b) {
                /* truncated binary, branch-free: b-1 bits, or b when >= cut */
                uint64_t short_r = b > 1 ? win >> (65 - b) : 0;
                uint64_t long_r = (win >> (64 - b)) - cut;
                unsigned is_long = short_r >= cut;
                rem = is_long ? long_r : short_r;
                used += b - 1 + is_long;
                if (DC_UNLIKELY(rem >= m)) {
                    st = dc_error(DC_ERR_FORMAT, "positions: bad remainder");
                    goto out;
                }
            }
            uint64_t ps = next + (uint64_t)lz * m + rem;
            if (ps >= n) {
                st = dc_error(DC_ERR_FORMAT, "positions: position %llu past chunk of %llu",
                              (unsigned long long)ps, (unsigned long long)n);
                goto out;
            }
            pos[k++] = (uint32_t)ps;
            next = ps + 1;
            bc += used;
            p += bc >> 3;
            bc &= 7;
            continue;
        }
    careful:
        d->p = p;
        d->bc = bc;
        d->next = next;
        if ((st = dc_gd_careful(d, &pos[k])) != DC_OK)
            goto out;
        k++;
        p = d->p;
        bc = d->bc;
        next = d->next;
    }
out:
    d->p = p;
    d->bc = bc;
    d->next = next;
    d->k = k;
    return st;
}

dc_status_t dc_golomb_dec_finish(const dc_golomb_dec_t *d)
{
    uint64_t left = dc_gd_left(d);
    if (d->k != d->count || left >= 8 || (left && ((d->p[0] << d->bc) & 0xff) != 0))
        return dc_error(DC_ERR_FORMAT, "positions: trailing bytes after %zu positions",
                        d->count);
    return DC_OK;
}

dc_status_t dc_ent_pos_decode(const uint8_t *src, size_t len, size_t count, uint64_t n,
                              uint32_t *pos)
{
    dc_golomb_dec_t *d = malloc(sizeof(*d));
    if (!d)
        return dc_error(DC_ERR_NOMEM, "positions decoder");
    dc_status_t st = dc_golomb_dec_init(d, src, len, count, n);
    if (st == DC_OK)
        st = dc_golomb_dec_run(d, pos, count);
    if (st == DC_OK)
        st = dc_golomb_dec_finish(d);
    free(d);
    return st;
}
