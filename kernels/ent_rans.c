/* ent_rans.c - order-0 rANS: quantized tables, the stream header, the
 * 1-, 2- and 4-way encoder and decoder (the 32-way layout's loops are in
 * ent_rans32.c). */
#include "kernels/entropy_internal.h"

#include <math.h>

/* --- order-0 rANS ---------------------------------------------------------- */

/* Quantize the histogram of the nsym symbols s->syms[] (count in all) to
 * frequencies summing to 2^S in s->qfreq[]; returns the coded size in bits
 * those frequencies give (sum of hist * log2(2^S / q)), or -1 when the
 * alphabet does not fit. */
static double dc_rans_quantize(dc_ent_scratch_t *s, size_t nsym, size_t count, unsigned S)
{
    const uint32_t *hist = s->hist;
    uint32_t M = 1u << S;
    if (nsym > M / 2)
        return -1.0;
    uint64_t sum = 0;
    size_t big = 0;
    for (size_t k = 0; k < nsym; k++) {
        uint32_t c = s->syms[k];
        uint64_t q = (uint64_t)hist[c] * M / count;
        if (q == 0)
            q = 1;
        s->qfreq[c] = (uint32_t)q;
        sum += q;
        if (hist[c] > hist[s->syms[big]])
            big = k;
    }
    while (sum > M) {
        /* take from the largest quantized frequency */
        size_t bi = 0;
        for (size_t k = 1; k < nsym; k++)
            if (s->qfreq[s->syms[k]] > s->qfreq[s->syms[bi]])
                bi = k;
        uint32_t *q = &s->qfreq[s->syms[bi]];
        uint64_t take = DC_MIN(sum - M, (uint64_t)(*q - (*q + 1) / 2));
        if (take == 0)
            return -1.0;
        *q -= (uint32_t)take;
        sum -= take;
    }
    s->qfreq[s->syms[big]] += (uint32_t)(M - sum);
    double bits = 0.0;
    for (size_t k = 0; k < nsym; k++) {
        uint32_t c = s->syms[k];
        bits += (double)hist[c] * ((double)S - log2((double)s->qfreq[c]));
    }
    return bits;
}

/*
 * Encode count symbols (8 or 16 bits, read at v + i*stride) as a RANS
 * stream.  Returns DC_ERR_BUSY when the alphabet is too large for the
 * table precision or cap is too small.
 */
dc_status_t dc_rans_encode(dc_ent_scratch_t *s, const uint8_t *v, size_t count, unsigned stride,
                           unsigned bits, uint8_t *dst, size_t cap, size_t *out_len,
                           dc_ent_isa_t isa)
{
    size_t nsym = dc_hist_build(s, v, count, stride, bits);
    dc_status_t st =
        dc_rans_encode_hist(s, v, count, stride, bits, nsym, dst, cap, out_len, isa);
    dc_hist_clear(s, nsym);
    return st;
}

/*
 * The rANS encode loop, specialized per symbol width and stride: symbols
 * count-1 down to 0 (symbol i by state i % ways) into the bytes below *pp,
 * never below lo; returns 0 when it runs out of room.  Renormalization is
 * branch-free: with x < 2^31 and x_max >= 2^15 at most 2 bytes go out, as
 * many as x >= x_max and x >= 256 * x_max say; both are stored (big-endian
 * at p - 2, the one that does not go out is scratch below the output).
 * Everything the loop needs is in locals (no reloads through the byte
 * stores, which may alias anything).
 */
static inline __attribute__((always_inline)) int
dc_rans_put_all(const struct dc_rans_esym *restrict esym, const uint8_t *restrict v,
                size_t count, const unsigned stride, const unsigned bits, const unsigned ways,
                uint8_t *lo, uint8_t **pp, uint32_t xs[4])
{
    uint8_t *p = *pp;
    uint32_t x0 = xs[0], x1 = xs[1], x2 = xs[2], x3 = xs[3];
#define DC_RANS_PUT(X, I)                                                     \
    do {                                                                      \
        const struct dc_rans_esym *e = &esym[dc_sym_at(v, (I), stride, bits)]; \
        uint32_t xm = e->x_max;                                               \
        unsigned nb_ = (unsigned)(X >= xm) + (unsigned)((uint64_t)X >= (uint64_t)xm << 8); \
        uint16_t be_ = __builtin_bswap16((uint16_t)X);                        \
        memcpy(p - 2, &be_, 2);                                               \
        p -= nb_;                                                             \
        X >>= 8 * nb_;                                                        \
        uint32_t q = (uint32_t)(((uint64_t)X * e->rcp_freq) >> 32) >> e->rcp_shift; \
        X = X + e->bias + q * e->cmpl_freq;                                   \
    } while (0)
    size_t i = count;
    while (i % ways) {
        i--;
        if (p - lo < 4)
            return 0;
        switch (i & (ways - 1)) {
        case 0: DC_RANS_PUT(x0, i); break;
        case 1: DC_RANS_PUT(x1, i); break;
        case 2: DC_RANS_PUT(x2, i); break;
        default: DC_RANS_PUT(x3, i); break;
        }
    }
    if (ways == 4) {
        for (; i >= 4; i -= 4) {
            if (DC_UNLIKELY(p - lo < 16))
                return 0;
            DC_RANS_PUT(x3, i - 1);
            DC_RANS_PUT(x2, i - 2);
            DC_RANS_PUT(x1, i - 3);
            DC_RANS_PUT(x0, i - 4);
        }
    } else if (ways == 2) {
        for (; i >= 2; i -= 2) {
            if (DC_UNLIKELY(p - lo < 8))
                return 0;
            DC_RANS_PUT(x1, i - 1);
            DC_RANS_PUT(x0, i - 2);
        }
    } else {
        for (; i >= 1; i--) {
            if (DC_UNLIKELY(p - lo < 4))
                return 0;
            DC_RANS_PUT(x0, i - 1);
        }
    }
#undef DC_RANS_PUT
    xs[0] = x0;
    xs[1] = x1;
    xs[2] = x2;
    xs[3] = x3;
    *pp = p;
    return 1;
}

/* dc_rans_put_all instantiated for the symbol widths and strides in use
 * (16-bit words; bytes; byte planes of 2-, 4-, 8-byte words). */
#define DC_RANS_PUT_DISPATCH                                                  \
    if (bits == 16)                                                           \
        return dc_rans_put_all(esym, v, count, 2, 16, ways, lo, pp, xs);      \
    switch (stride) {                                                         \
    case 1: return dc_rans_put_all(esym, v, count, 1, 8, ways, lo, pp, xs);   \
    case 2: return dc_rans_put_all(esym, v, count, 2, 8, ways, lo, pp, xs);   \
    case 4: return dc_rans_put_all(esym, v, count, 4, 8, ways, lo, pp, xs);   \
    default: return dc_rans_put_all(esym, v, count, stride, 8, ways, lo, pp, xs); \
    }

static int dc_rans_put_base(const struct dc_rans_esym *esym, const uint8_t *v, size_t count,
                            unsigned stride, unsigned bits, unsigned ways, uint8_t *lo,
                            uint8_t **pp, uint32_t xs[4])
{
    DC_RANS_PUT_DISPATCH
}

#if defined(__x86_64__)
__attribute__((target("bmi2"))) static int
dc_rans_put_bmi2(const struct dc_rans_esym *esym, const uint8_t *v, size_t count,
                 unsigned stride, unsigned bits, unsigned ways, uint8_t *lo, uint8_t **pp,
                 uint32_t xs[4])
{
    DC_RANS_PUT_DISPATCH
}
#endif
#undef DC_RANS_PUT_DISPATCH

/* The table of a rANS stream from the histogram in s->hist / s->syms
 * (dc_hist_build; s->syms sorted here): the scale *Sp, the quantized
 * frequencies s->qfreq, the header and table into dst[0, *hp) (the ways'
 * flag in dst[0]), the interleave *waysp and the encoder symbols s->esym
 * (the 32-way layout's x_max is dc_r32_encode's). */
static dc_status_t dc_rans_table(dc_ent_scratch_t *s, size_t count, unsigned stride,
                                 unsigned bits, size_t nsym, uint8_t *dst, size_t cap,
                                 size_t *hp, unsigned *Sp, unsigned *waysp)
{
    uint32_t *hist = s->hist;
    dc_status_t st = DC_OK;
    /* symbols in increasing order for the table */
    if (bits == 8 || nsym > 1024) {
        size_t k = 0;
        uint32_t lim = bits == 16 ? 65536u : 256u;
        for (uint32_t c = 0; c < lim; c++)
            if (hist[c])
                s->syms[k++] = (uint16_t)c;
    } else {
        /* insertion sort of a short list */
        for (size_t i = 1; i < nsym; i++) {
            uint16_t x = s->syms[i];
            size_t j = i;
            while (j > 0 && s->syms[j - 1] > x) {
                s->syms[j] = s->syms[j - 1];
                j--;
            }
            s->syms[j] = x;
        }
    }
    unsigned S = DC_RANS_MAX_SCALE;
    if (count < (1u << 12))
        S = 12;
    while ((1u << S) < 2 * nsym && S < DC_RANS_MAX_SCALE)
        S++;
    if (nsym > (1u << S) / 2) {
        st = DC_ERR_BUSY;
        goto clear;
    }
    /* A 12-bit table (4096 slots: the decoder's table stays in L1) decodes
     * about twice as fast as a 16-bit one; take it when it costs at most
     * 0.5% more bits. */
    if (S > 12 && 2 * nsym <= (1u << 12)) {
        double hi = dc_rans_quantize(s, nsym, count, S);
        double lo = dc_rans_quantize(s, nsym, count, 12);
        if (lo >= 0 && (hi < 0 || lo <= hi * 1.005))
            S = 12;
        else if (hi < 0) {
            st = DC_ERR_BUSY;
            goto clear;
        } else
            (void)dc_rans_quantize(s, nsym, count, S);
    } else if (dc_rans_quantize(s, nsym, count, S) < 0) {
        st = DC_ERR_BUSY;
        goto clear;
    }
    uint32_t M = 1u << S;
    /* table */
    size_t h = 0;
    if (cap < 32 + (size_t)nsym * 6) {
        st = DC_ERR_BUSY;
        goto clear;
    }
    dst[h++] = (uint8_t)bits;
    dst[h++] = (uint8_t)S;
    h += dc_ent_put_varint(dst + h, nsym);
    uint32_t c0 = 0, acc = 0;
    for (size_t k = 0; k < nsym; k++) {
        uint32_t c = s->syms[k];
        h += dc_ent_put_varint(dst + h, k == 0 ? c : c - c0 - 1);
        h += dc_ent_put_varint(dst + h, s->qfreq[c] - 1);
        s->cum[c] = acc;
        acc += s->qfreq[c];
        c0 = c;
    }
    unsigned ways = dc_ent_rans_ways == 1 || dc_ent_rans_ways == 2 || dc_ent_rans_ways == 4 ||
                            dc_ent_rans_ways == 32
                        ? dc_ent_rans_ways
                    : count >= DC_R32_MIN && (bits == 16 || stride == 1) ? 32
                    : count >= 64                                        ? 4
                    : count >= 16                                        ? 2
                                                                         : 1;
    /* (32-way: scales up to 15, and not in the compact layout) */
    if (ways == 32 && (S > DC_R32_MAX_SCALE || s->max_ways < 32))
        ways = 4;
    /* encoder symbols */
    for (size_t k = 0; k < nsym; k++) {
        uint32_t c = s->syms[k], f = s->qfreq[c];
        struct dc_rans_esym *e = &s->esym[c];
        e->x_max = ((DC_RANS_L >> S) << 8) * f;
        e->cmpl_freq = (uint16_t)(M - f);
        if (f < 2) {
            e->rcp_freq = ~0u;
            e->rcp_shift = 0;
            e->bias = s->cum[c] + M - 1;
        } else {
            uint32_t shift = 0;
            while (f > (1u << shift))
                shift++;
            e->rcp_freq = (uint32_t)(((1ull << (shift + 31)) + f - 1) / f);
            e->rcp_shift = (uint16_t)(shift - 1);
            e->bias = s->cum[c];
        }
    }
    if (ways == 32)
        dst[0] |= DC_RANS_32_WAY;
    else
        dst[0] |= ways == 4 ? DC_RANS_FOUR_WAY : ways == 2 ? DC_RANS_TWO_WAY : 0;
    *hp = h;
    *Sp = S;
    *waysp = ways;
clear:
    return st;
}

dc_status_t dc_ent_rans_table(dc_ent_scratch_t *s, const uint16_t *sym, const uint32_t *cnt,
                              size_t nsym, size_t count, unsigned w, uint8_t *dst, size_t cap,
                              size_t *h, unsigned *S, unsigned *ways, uint32_t *qs,
                              double *h_bits)
{
    if ((w != 1 && w != 2) || count == 0 || count > s->max_count || nsym == 0 ||
        nsym > ((size_t)1 << (8 * w)))
        return dc_error(DC_ERR_INVALID, "rans table: %zu symbols of %zu words of %u bytes",
                        nsym, count, w);
    /* the histogram as dc_hist_build leaves it: s->syms in the order the
     * words first appear */
    size_t k = 0;
    uint64_t sum = 0;
    for (; k < nsym; k++) {
        uint32_t c = sym[k];
        if (cnt[k] == 0 || (w == 1 && c > 255) || s->hist[c] != 0)
            break;
        s->hist[c] = cnt[k];
        s->syms[k] = (uint16_t)c;
        sum += cnt[k];
    }
    dc_status_t st = DC_OK;
    if (k < nsym || sum != count) {
        st = dc_error(DC_ERR_INVALID, "rans table: %s", k < nsym ? "a symbol twice, out of "
                      "range or counted 0" : "the counts do not sum to the words");
        dc_hist_clear(s, k);
        return st;
    }
    *h_bits = dc_ent_counts_entropy_bits(cnt, nsym, count);
    /* the room dc_ent_val_encode_h's rANS attempt has: the scratch's */
    if (cap < 32 + nsym * 6)
        st = dc_error(DC_ERR_BUSY, "rans table: %zu bytes of output for %zu symbols", cap,
                      nsym);
    else
        st = dc_rans_table(s, count, w, 8 * w, nsym, dst, s->tmp_cap, h, S, ways);
    if (st == DC_OK)
        for (k = 0; k < nsym; k++) /* increasing symbols now */
            qs[k] = s->syms[k] | (s->qfreq[s->syms[k]] - 1u) << 16;
    dc_hist_clear(s, nsym);
    return st;
}

/* dc_rans_encode with the histogram of the symbols already in s->hist /
 * s->syms (dc_hist_build); leaves it there (s->syms reordered). */
dc_status_t dc_rans_encode_hist(dc_ent_scratch_t *s, const uint8_t *v, size_t count,
                                unsigned stride, unsigned bits, size_t nsym, uint8_t *dst,
                                size_t cap, size_t *out_len, dc_ent_isa_t isa)
{
    size_t h;
    unsigned S, ways;
    dc_status_t st = dc_rans_table(s, count, stride, bits, nsym, dst, cap, &h, &S, &ways);
    if (st != DC_OK)
        return st;
    if (ways == 32)
        return dc_r32_encode(s, v, count, stride, bits, nsym, S, dst, h, cap, out_len, isa);
    /* encode backwards; from 16 symbols on two, from 64 on four
     * interleaved states (symbol i: state i % ways) split the dependency
     * chain */
    uint8_t *lo = dst + h, *p = dst + cap;
    uint32_t x0 = DC_RANS_L, x1 = DC_RANS_L, x2 = DC_RANS_L, x3 = DC_RANS_L;
    uint32_t xs0[4] = {x0, x1, x2, x3};
    int room;
#if defined(__x86_64__)
    if (isa >= DC_ENT_ISA_AVX2)
        room = dc_rans_put_bmi2(s->esym, v, count, stride, bits, ways, lo, &p, xs0);
    else
#endif
        room = dc_rans_put_base(s->esym, v, count, stride, bits, ways, lo, &p, xs0);
    if (!room) {
        st = DC_ERR_BUSY;
        goto clear;
    }
    x0 = xs0[0];
    x1 = xs0[1];
    x2 = xs0[2];
    x3 = xs0[3];
    if (p < lo + 16) {
        st = DC_ERR_BUSY;
        goto clear;
    }
    /* the states, state 0 first */
    const uint32_t xs[4] = {x0, x1, x2, x3};
    for (unsigned j = ways; j-- > 0;) {
        p -= 4;
        dc_store_le32(p, xs[j]);
    }
    size_t dlen = (size_t)(dst + cap - p);
    memmove(lo, p, dlen);
    *out_len = h + dlen;
clear:
    return st;
}


/* The 1-4-way decoder table's slots of one symbol: t[j] = e | j << 16 for
 * j < f (e's bits 16-31 are zero, so | is +) */
static inline void dc_rans_fill_base(uint64_t *t, uint64_t e, uint64_t f)
{
    for (uint64_t j = 0; j < f; j++)
        t[j] = e | j << 16;
}

#if defined(__x86_64__)
/* the same, four slots a store (a 64 K-slot table per values stream is
 * most of a small chunk's table work) */
DC_AVX2_TARGET static void dc_rans_fill_avx2(uint64_t *t, uint64_t e, uint64_t f)
{
    uint64_t j = 0;
    if (f >= 4) {
        __m256i v = _mm256_add_epi64(_mm256_set1_epi64x((long long)e),
                                     _mm256_set_epi64x(3ll << 16, 2ll << 16, 1ll << 16, 0));
        const __m256i inc = _mm256_set1_epi64x(4ll << 16);
        for (; j + 8 <= f; j += 8) {
            _mm256_storeu_si256((__m256i *)(t + j), v);
            v = _mm256_add_epi64(v, inc);
            _mm256_storeu_si256((__m256i *)(t + j + 4), v);
            v = _mm256_add_epi64(v, inc);
        }
        if (j + 4 <= f) {
            _mm256_storeu_si256((__m256i *)(t + j), v);
            j += 4;
        }
    }
    for (; j < f; j++)
        t[j] = e | j << 16;
}
#endif

dc_status_t dc_rans_dec_init_slot(dc_ent_scratch_t *s, unsigned slot, dc_rans_dec_t *d,
                                  const uint8_t *src, size_t len, size_t count, unsigned bits)
{
    const uint8_t *p = src, *end = src + len;
    if (len < 2)
        return dc_error(DC_ERR_FORMAT, "rANS stream truncated");
    unsigned sb = *p++, S = *p++;
    unsigned wf = sb & DC_RANS_WAY_MASK;
    unsigned ways = wf == DC_RANS_32_WAY     ? 32
                    : wf == DC_RANS_FOUR_WAY ? 4
                    : wf == DC_RANS_TWO_WAY  ? 2
                                             : 1;
    uint32_t *ftab = s->ftab[slot];
    uint16_t *stab = s->stab[slot];
    sb &= ~DC_RANS_WAY_MASK;
    if (sb != bits)
        return dc_error(DC_ERR_FORMAT, "rANS stream has %u-bit symbols, expected %u", sb, bits);
    if (S < DC_RANS_MIN_SCALE || S > (ways == 32 ? DC_R32_MAX_SCALE : DC_RANS_MAX_SCALE))
        return dc_error(DC_ERR_FORMAT, "rANS scale %u out of range", S);
    uint32_t M = 1u << S;
    uint64_t nsym;
    if (dc_ent_get_varint(&p, end, &nsym) != DC_OK)
        return dc_error(DC_ERR_FORMAT, "rANS table truncated");
    if (nsym < 1 || nsym > M || nsym > (1ull << bits))
        return dc_error(DC_ERR_FORMAT, "rANS table has %llu symbols", (unsigned long long)nsym);
    uint64_t c = 0, acc = 0;
#if defined(__x86_64__)
    const int fill_avx2 = dc_ent_isa() >= DC_ENT_ISA_AVX2;
#endif
    for (uint64_t k = 0; k < nsym; k++) {
        uint64_t dl, f;
        if (dc_ent_get_varint(&p, end, &dl) != DC_OK || dc_ent_get_varint(&p, end, &f) != DC_OK)
            return dc_error(DC_ERR_FORMAT, "rANS table truncated");
        c = k == 0 ? dl : c + dl + 1;
        f += 1;
        if (c >= (1ull << bits) || dl >= (1ull << bits) || f > M || acc + f > M)
            return dc_error(DC_ERR_FORMAT, "rANS table entry out of range");
        /* slot j of symbol c: x' = f * (x >> S) + (j - cum) */
        /* slot - cum < f <= 2^16: 16 bits; f: 17 bits */
        if (ways == 32) {
            for (uint64_t j = acc; j < acc + f; j++) {
                ftab[j] = (uint32_t)(f << 16 | (j - acc));
                stab[j] = (uint16_t)c;
            }
        } else {
            uint64_t e = c | f << 32;
#if defined(__x86_64__)
            if (fill_avx2)
                dc_rans_fill_avx2(s->dtab[slot] + acc, e, f);
            else
#endif
                dc_rans_fill_base(s->dtab[slot] + acc, e, f);
        }
        acc += f;
    }
    if (acc != M)
        return dc_error(DC_ERR_FORMAT, "rANS frequencies sum to %llu, not %u",
                        (unsigned long long)acc, M);
    if ((size_t)(end - p) < 4u * ways)
        return dc_error(DC_ERR_FORMAT, "rANS stream truncated");
    /* states: symbol i is coded by state i % ways */
    const uint32_t L = ways == 32 ? DC_R32_L : DC_RANS_L;
    for (unsigned j = 0; j < 32; j++)
        d->x[j] = L;
    for (unsigned j = 0; j < ways; j++) {
        d->x[j] = dc_load_le32(p + 4 * j);
        if (d->x[j] < L || d->x[j] >= (1u << 31))
            return dc_error(DC_ERR_FORMAT, "rANS initial state out of range");
    }
    p += 4u * ways;
    if (ways == 32 && (size_t)(end - p) % 2)
        return dc_error(DC_ERR_FORMAT, "32-way rANS data of an odd number of bytes");
    d->p = p;
    d->end = end;
    d->dtab = s->dtab[slot];
    d->ftab = ftab;
    d->stab = stab;
    d->S = S;
    d->bits = bits;
    d->ways = ways;
    d->i = 0;
    d->count = count;
    return DC_OK;
}

dc_status_t dc_rans_dec_init(dc_ent_scratch_t *s, dc_rans_dec_t *d, const uint8_t *src,
                             size_t len, size_t count, unsigned bits)
{
    return dc_rans_dec_init_slot(s, 0, d, src, len, count, bits);
}

/* dc_rans_dec_run for one symbol width (a constant after inlining). */
static inline __attribute__((always_inline)) dc_status_t
dc_rans_run_bits(dc_rans_dec_t *d, uint8_t *out, unsigned stride, size_t upto,
                 const unsigned bits)
{
    const uint8_t *p = d->p, *end = d->end;
    const unsigned S = d->S, ways = d->ways;
    const uint32_t mask = (1u << S) - 1;
    const uint64_t *dtab = d->dtab;
    uint32_t x0 = d->x[0], x1 = d->x[1], x2 = d->x[2], x3 = d->x[3];
    size_t i = d->i;
    if (upto > d->count)
        upto = d->count;
    dc_status_t st = DC_OK;
    /* Fast loops while the bytes a step can read are surely there: one table
     * load per symbol and a branch-free renormalization (x >= 2^(23-S) >=
     * 2^7 after a step, so at most 2 bytes are needed to get back to >=
     * 2^23; with 2^7 <= x < 2^31, (clz(x) - 1) rounded down to bytes is
     * that count).  Interleaved states are independent dependency chains. */
#define DC_RANS_STEP(X, I)                                                    \
    do {                                                                      \
        uint64_t e = dtab[X & mask];                                          \
        X = (uint32_t)(e >> 32) * (X >> S) + ((uint32_t)e >> 16);             \
        unsigned nbits = ((unsigned)__builtin_clz(X) - 1u) & ~7u;             \
        uint32_t two = (uint32_t)p[0] << 8 | p[1];                            \
        X = (uint32_t)(((uint64_t)X << nbits) | (two >> (16 - nbits)));       \
        p += nbits >> 3;                                                      \
        if (bits == 16)                                                       \
            dc_store_le16(out + (I) * stride, (uint16_t)e);                   \
        else                                                                  \
            out[(I) * stride] = (uint8_t)e;                                   \
    } while (0)
    if (ways == 4) {
        if ((i & 3) == 0)
            for (; i + 4 <= upto && end - p >= 8; i += 4) {
                DC_RANS_STEP(x0, i);
                DC_RANS_STEP(x1, i + 1);
                DC_RANS_STEP(x2, i + 2);
                DC_RANS_STEP(x3, i + 3);
            }
    } else if (ways == 2) {
        if ((i & 1) == 0)
            for (; i + 2 <= upto && end - p >= 4; i += 2) {
                DC_RANS_STEP(x0, i);
                DC_RANS_STEP(x1, i + 1);
            }
    } else {
        for (; i < upto && end - p >= 2; i++)
            DC_RANS_STEP(x0, i);
    }
#undef DC_RANS_STEP
    uint32_t xs[4] = {x0, x1, x2, x3};
    for (; i < upto; i++) {
        uint32_t *xp = &xs[i & (ways - 1)];
        uint32_t x = *xp;
        uint64_t e = dtab[x & mask];
        uint32_t sym = (uint32_t)(e & 0xffff);
        x = (uint32_t)(e >> 32) * (x >> S) + ((uint32_t)e >> 16);
        while (x < DC_RANS_L) {
            if (DC_UNLIKELY(p >= end)) {
                st = dc_error(DC_ERR_FORMAT, "rANS data truncated");
                goto out;
            }
            x = (x << 8) | *p++;
        }
        *xp = x;
        if (bits == 16)
            dc_store_le16(out + i * stride, (uint16_t)sym);
        else
            out[i * stride] = (uint8_t)sym;
    }
out:
    memcpy(d->x, xs, sizeof(xs));
    d->p = p;
    d->i = i;
    return st;
}

dc_status_t dc_rans_dec_run_isa(dc_rans_dec_t *d, uint8_t *out, unsigned stride, size_t upto,
                                dc_ent_isa_t isa)
{
    if (d->ways == 32) {
        if (upto > d->count)
            upto = d->count;
        return dc_r32_run(d, out, stride, upto, isa);
    }
    return d->bits == 16 ? dc_rans_run_bits(d, out, stride, upto, 16)
                         : dc_rans_run_bits(d, out, stride, upto, 8);
}

dc_status_t dc_rans_dec_run(dc_rans_dec_t *d, uint8_t *out, unsigned stride, size_t upto)
{
    return dc_rans_dec_run_isa(d, out, stride, upto, dc_ent_isa());
}

dc_status_t dc_rans_dec_finish(const dc_rans_dec_t *d)
{
    const uint32_t L = d->ways == 32 ? DC_R32_L : DC_RANS_L;
    int ok = d->i == d->count && d->p == d->end;
    for (unsigned j = 0; j < 32; j++)
        ok &= d->x[j] == L;
    if (!ok)
        return dc_error(DC_ERR_FORMAT, "rANS stream does not end cleanly");
    return DC_OK;
}

dc_status_t dc_rans_decode(dc_ent_scratch_t *s, const uint8_t *src, size_t len, size_t count,
                           unsigned bits, uint8_t *out, unsigned stride)
{
    dc_rans_dec_t d;
    dc_status_t st = dc_rans_dec_init(s, &d, src, len, count, bits);
    if (st == DC_OK)
        st = dc_rans_dec_run(&d, out, stride, count);
    if (st == DC_OK)
        st = dc_rans_dec_finish(&d);
    return st;
}
