/* ent_gaps.c - DC_ENT_GAPS positions (entropy.h): gap quotients through a
 * rANS stream, low bits as they are, escapes; the encoder and the
 * decoders (portable, AVX2, AVX-512). */
#include "kernels/entropy_internal.h"

#include <stdlib.h>

/* --- positions: rANS-coded gap quotients ------------------------------------ */

/* the largest escape symbol, and E << b at most 2^24 (so that 16 gaps of
 * the SIMD loop sum to < 2^29) */
#define DC_GAPS_MAX_B 16u
#define DC_GAPS_E_SHIFT_MAX 24u

size_t dc_ent_gaps_bound(size_t count)
{
    /* header, a RANS stream of count 16-bit symbols (raw-sized words, the
     * table, 32 states), low bits, escapes */
    return 64 + 6 * 65536 + count * 2 + 128 + count * 2 + count * 5;
}

static dc_status_t dc_gsym_reserve(dc_ent_scratch_t *s, size_t count)
{
    if (count <= s->gsym_cap)
        return DC_OK;
    /* + 16: the SIMD pass loads 16 quotients at a time */
    uint16_t *g = realloc(s->gsym, (count + 16) * sizeof(uint16_t));
    if (!g)
        return dc_error(DC_ERR_NOMEM, "gap quotients for %zu positions", count);
    s->gsym = g;
    s->gsym_cap = count;
    return DC_OK;
}

dc_status_t dc_ent_gaps_encode(dc_ent_scratch_t *s, const uint32_t *pos, size_t count,
                               uint64_t n, uint8_t *dst, size_t cap, size_t *out_len)
{
    if (count == 0 || (uint64_t)pos[count - 1] >= n)
        return dc_error(DC_ERR_INVALID, "gaps: no positions, or one past the chunk");
    dc_status_t st = dc_gsym_reserve(s, count);
    if (st != DC_OK)
        return st;
    /* b: the low bits sent as they are, ~ log2(mean gap) - 2 (quotients
     * of mean ~4-8: a short table, and the low bits of a geometric gap
     * are close to uniform, so little is lost) */
    uint64_t mean = ((uint64_t)pos[count - 1] + 1) / count;
    unsigned b = 0;
    while (b < DC_GAPS_MAX_B && (mean >> (b + 3)) != 0)
        b++;
    size_t lo_len = (count * b + 7) / 8;
    /* header (b, E: <= 3 bytes), the quotients' length (<= 5), then the
     * low bits go after the quotients: written here first, at the end of
     * dst, and moved */
    if (cap < 16 + lo_len + 8)
        return DC_ERR_BUSY;
    uint8_t *lob = dst + cap - lo_len - 8;
    /* one pass: quotients (saturated to 16 bits), their histogram (to
     * 4096; four of them, by k % 4, so that runs of one quotient do not
     * wait on one counter: in s->qfreq, unused until the rANS coder
     * quantizes), the low bits */
    uint32_t qh[4097];
    uint32_t *qh4 = s->qfreq;
    memset(qh4, 0, 4 * 4097 * sizeof(uint32_t));
    uint16_t *gs = s->gsym;
    uint64_t prev = 0, acc = 0;
    unsigned nb = 0;
    uint8_t *o = lob;
    const uint32_t rmask = (1u << b) - 1;
    /* two gaps a step: their low bits join before they go into acc (one
     * shift-or chain per pair) */
    size_t k = 0;
    for (; k + 2 <= count; k += 2) {
        if (DC_UNLIKELY(pos[k] < prev || pos[k + 1] <= pos[k]))
            return dc_error(DC_ERR_INVALID, "gaps: positions not increasing");
        uint64_t g0 = pos[k] - prev, g1 = (uint64_t)pos[k + 1] - pos[k] - 1;
        prev = (uint64_t)pos[k + 1] + 1;
        uint64_t q0 = g0 >> b, q1 = g1 >> b;
        gs[k] = (uint16_t)(q0 < 65535 ? q0 : 65535);
        gs[k + 1] = (uint16_t)(q1 < 65535 ? q1 : 65535);
        qh4[(k & 2) * 4097 + (q0 < 4096 ? q0 : 4096)]++;
        qh4[((k & 2) + 1) * 4097 + (q1 < 4096 ? q1 : 4096)]++;
        acc |= ((g0 & rmask) | (g1 & rmask) << b) << nb;
        nb += 2 * b;
        if (nb >= 32) {
            dc_store_le32(o, (uint32_t)acc);
            o += 4;
            acc >>= 32;
            nb -= 32;
        }
    }
    if (k < count) {
        if (DC_UNLIKELY(pos[k] < prev))
            return dc_error(DC_ERR_INVALID, "gaps: positions not increasing");
        uint64_t g = pos[k] - prev;
        uint64_t q = g >> b;
        gs[k] = (uint16_t)(q < 65535 ? q : 65535);
        qh4[(q < 4096 ? q : 4096)]++;
        acc |= (g & rmask) << nb;
        nb += b;
        if (nb >= 32) {
            dc_store_le32(o, (uint32_t)acc);
            o += 4;
            acc >>= 32;
            nb -= 32;
        }
    }
    while (nb > 0) {
        *o++ = (uint8_t)acc;
        acc >>= 8;
        nb = nb > 8 ? nb - 8 : 0;
    }
    for (uint32_t c = 0; c <= 4096; c++)
        qh[c] = qh4[c] + qh4[4097 + c] + qh4[2 * 4097 + c] + qh4[3 * 4097 + c];
    /* E: quotients >= E are escaped; the smallest E with at most 1/1024 of
     * them beyond (within 2^24 >> b) */
    uint32_t emax = DC_MIN(4095u, (1u << DC_GAPS_E_SHIFT_MAX) >> b);
    uint32_t E = emax;
    {
        uint64_t tail = qh[4096], lim = count >> 10;
        for (uint32_t e = 4096; e-- > 1;) {
            if (tail + qh[e] > lim) {
                E = DC_MIN(e + 1, emax);
                break;
            }
            tail += qh[e];
            E = e;
        }
    }
    size_t h = 0;
    dst[h++] = (uint8_t)b;
    h += dc_ent_put_varint(dst + h, E);
    /* the symbols' histogram for the rANS coder: qh below E, the rest at E */
    size_t nsym = 0;
    uint64_t esc = 0;
    for (uint32_t c = 0; c <= 4096; c++) {
        if (c < E) {
            if (qh[c]) {
                s->hist[c] = qh[c];
                s->syms[nsym++] = (uint16_t)c;
            }
        } else
            esc += qh[c];
    }
    /* escapes: quotients >= E become E, and q - E goes as a varint, for
     * now below the low bits (blocks of 64 with no escape are skipped by
     * their maximum) */
    uint8_t *escb = lob;
    size_t esc_len = 0;
    if (esc) {
        s->hist[E] = (uint32_t)esc;
        s->syms[nsym++] = (uint16_t)E;
        if ((size_t)(lob - dst) < h + 16 + esc * 5) {
            dc_hist_clear(s, nsym);
            return DC_ERR_BUSY;
        }
        escb = lob - esc * 5;
        for (size_t k0 = 0; k0 < count; k0 += 64) {
            size_t k1 = DC_MIN(count, k0 + 64);
            if (k1 == k0 + 64) {
                /* a fixed trip count: the compiler vectorizes it */
                unsigned any = 0;
                for (size_t j = 0; j < 64; j++)
                    any |= gs[k0 + j] >= E;
                if (!any)
                    continue;
            }
            for (size_t j = k0; j < k1; j++) {
                if (gs[j] < E)
                    continue;
                uint64_t q = (pos[j] - (j ? (uint64_t)pos[j - 1] + 1 : 0)) >> b;
                esc_len += dc_ent_put_varint(escb + esc_len, q - E);
                gs[j] = (uint16_t)E;
            }
        }
    }
    /* the RANS stream after a 5-byte room for its length, below the
     * escapes */
    size_t qlen;
    uint8_t *qlim = escb;
    if ((size_t)(qlim - dst) < h + 5 + 16) {
        dc_hist_clear(s, nsym);
        return DC_ERR_BUSY;
    }
    st = dc_rans_encode_hist(s, (const uint8_t *)gs, count, 2, 16, nsym, dst + h + 5,
                             (size_t)(qlim - dst) - h - 5, &qlen, dc_ent_isa());
    dc_hist_clear(s, nsym);
    if (st != DC_OK)
        return st;
    h += dc_ent_prefix_len(dst + h, qlen);
    memmove(dst + h, lob, lo_len);
    h += lo_len;
    memmove(dst + h, escb, esc_len);
    h += esc_len;
    *out_len = h;
    return DC_OK;
}

dc_status_t dc_gaps_dec_init(dc_ent_scratch_t *s, dc_gaps_dec_t *d, const uint8_t *src,
                             size_t len, size_t count, uint64_t n)
{
    const uint8_t *p = src, *end = src + len;
    uint64_t E, qlen;
    /* every field defined, whatever the stream: dc_gaps_dec_finish() of an
     * empty one read a count left from whatever the caller's stack held */
    memset(d, 0, sizeof(*d));
    if (count == 0)
        return len == 0 ? DC_OK : dc_error(DC_ERR_FORMAT, "gaps: bytes without positions");
    if (len < 1)
        return dc_error(DC_ERR_FORMAT, "gaps stream truncated");
    unsigned b = *p++;
    if (b > DC_GAPS_MAX_B)
        return dc_error(DC_ERR_FORMAT, "gaps: %u low bits (at most %u)", b, DC_GAPS_MAX_B);
    if (dc_ent_get_varint(&p, end, &E) != DC_OK || dc_ent_get_varint(&p, end, &qlen) != DC_OK)
        return dc_error(DC_ERR_FORMAT, "gaps stream truncated");
    if (E < 1 || E > 65535 || (E << b) > (1u << DC_GAPS_E_SHIFT_MAX))
        return dc_error(DC_ERR_FORMAT, "gaps: escape %llu with %u low bits out of range",
                        (unsigned long long)E, b);
    if (qlen > (uint64_t)(end - p))
        return dc_error(DC_ERR_FORMAT, "gaps: quotients longer than the stream");
    dc_status_t st = dc_rans_dec_init_slot(s, 1, &d->q, p, (size_t)qlen, count, 16);
    if (st != DC_OK)
        return st;
    p += qlen;
    uint64_t lo_len = ((uint64_t)count * b + 7) / 8;
    if (lo_len > (uint64_t)(end - p))
        return dc_error(DC_ERR_FORMAT, "gaps: low bits truncated");
    if ((st = dc_gsym_reserve(s, count)) != DC_OK)
        return st;
    d->gsym = s->gsym;
    d->lo = p;
    d->lo_len = (size_t)lo_len;
    d->esc = p + lo_len;
    d->esc_end = end;
    d->b = b;
    d->E = (uint32_t)E;
    d->n = n;
    d->next = 0;
    d->k = 0;
    d->count = count;
    return DC_OK;
}

/* the b low bits of gap k */
static inline uint32_t dc_gaps_low(const dc_gaps_dec_t *d, size_t k)
{
    uint64_t bit = (uint64_t)k * d->b;
    size_t at = (size_t)(bit >> 3);
    uint32_t v;
    if (at + 4 <= d->lo_len)
        v = dc_load_le32(d->lo + at);
    else {
        v = 0;
        for (size_t j = 0; at + j < d->lo_len && j < 4; j++)
            v |= (uint32_t)d->lo[at + j] << (8 * j);
    }
    return (v >> (bit & 7)) & ((1u << d->b) - 1);
}

/* positions [d->k, upto) from quotients already in gsym */
static dc_status_t dc_gaps_pos_scalar(dc_gaps_dec_t *d, uint32_t *pos, size_t upto)
{
    uint64_t next = d->next;
    size_t k0 = d->k;
    /* while no escape is in sight and the 4 bytes of a field are inside
     * the low bits: locals only */
    {
        const uint16_t *gs = d->gsym;
        const uint8_t *lo = d->lo;
        const unsigned b = d->b;
        const uint32_t E = d->E, rmask = (1u << b) - 1;
        const uint64_t n = d->n;
        size_t k = k0;
        for (; k < upto && ((uint64_t)k * b >> 3) + 4 <= d->lo_len; k++) {
            uint32_t q = gs[k];
            if (DC_UNLIKELY(q == E))
                break;
            uint64_t bit = (uint64_t)k * b;
            uint32_t r = (dc_load_le32(lo + (bit >> 3)) >> (bit & 7)) & rmask;
            uint64_t at = next + ((uint64_t)q << b | r);
            if (DC_UNLIKELY(at >= n))
                break;
            pos[k] = (uint32_t)at;
            next = at + 1;
        }
        d->k = k0 = k;
        d->next = next;
    }
    for (size_t k = k0; k < upto; k++) {
        uint64_t q = d->gsym[k];
        if (q == d->E) {
            uint64_t x;
            if (dc_ent_get_varint(&d->esc, d->esc_end, &x) != DC_OK || x > UINT32_MAX)
                return dc_error(DC_ERR_FORMAT, "gaps: bad escape");
            q += x;
        }
        uint64_t at = next + ((q << d->b) | dc_gaps_low(d, k));
        if (at >= d->n)
            return dc_error(DC_ERR_FORMAT, "gaps: position %llu past the chunk of %llu",
                            (unsigned long long)at, (unsigned long long)d->n);
        pos[k] = (uint32_t)at;
        next = at + 1;
        d->k = k + 1;
        d->next = next;
    }
    return DC_OK;
}

#if defined(__x86_64__)
/* The SIMD loops' way out for a group of w gaps they do not decode (an
 * escape, or a position past the chunk): the scalar decoder takes it from
 * *k / *next and leaves them after it. */
static inline dc_status_t dc_gaps_group_scalar(dc_gaps_dec_t *d, uint32_t *pos, size_t *k,
                                               uint64_t *next, unsigned w)
{
    d->k = *k;
    d->next = *next;
    dc_status_t st = dc_gaps_pos_scalar(d, pos, *k + w);
    *k = d->k;
    *next = d->next;
    return st;
}

/* positions [d->k, upto) from the quotients in gsym, 16 at a time: the low
 * bits of 16 gaps are 2b bytes from byte 2b * (k / 16) on; a byte
 * permutation gives each lane the 32 bits its field starts in, a variable
 * shift and a mask the field.  Then (q << b | r) + 1 summed up the lanes. */
DC_AVX512_TARGET static dc_status_t dc_gaps_pos_avx512(dc_gaps_dec_t *d, uint32_t *pos,
                                                       size_t upto, const dc_ent_pf_t *pf)
{
    const unsigned b = d->b;
    uint8_t pidx[64];
    uint32_t sh[16];
    for (unsigned j = 0; j < 16; j++) {
        for (unsigned t = 0; t < 4; t++)
            pidx[4 * j + t] = (uint8_t)(((j * b) >> 3) + t);
        sh[j] = (j * b) & 7;
    }
    const __m512i perm = _mm512_loadu_si512(pidx), shv = _mm512_loadu_si512(sh);
    const __m512i lmask = _mm512_set1_epi32((int)((1u << b) - 1)), one = _mm512_set1_epi32(1);
    const __m512i ev = _mm512_set1_epi32((int)d->E), zero = _mm512_setzero_si512();
    const __m128i bv = _mm_cvtsi32_si128((int)b);
    const __mmask64 lm = b ? (~0ull >> (64 - 2 * b)) : 0;
    dc_pf_plan_t pfq = dc_pf_plan(pf, (upto - d->k) / 16 + 1);
    size_t k = d->k;
    uint64_t next = d->next;
    dc_status_t st = DC_OK;
    while (k + 16 <= upto) {
        dc_pf_step(&pfq);
        __m512i q = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)(d->gsym + k)));
        if (DC_UNLIKELY(_mm512_cmpeq_epi32_mask(q, ev))) {
            if ((st = dc_gaps_group_scalar(d, pos, &k, &next, 16)) != DC_OK)
                return st;
            continue;
        }
        __m512i g = _mm512_sll_epi32(q, bv);
        if (b) {
            __m512i win = _mm512_maskz_loadu_epi8(lm, d->lo + (k / 16) * 2 * b);
            __m512i r = _mm512_srlv_epi32(_mm512_permutexvar_epi8(perm, win), shv);
            g = _mm512_or_si512(g, _mm512_and_si512(r, lmask));
        }
        g = _mm512_add_epi32(g, one);
        g = _mm512_add_epi32(g, _mm512_alignr_epi32(g, zero, 15));
        g = _mm512_add_epi32(g, _mm512_alignr_epi32(g, zero, 14));
        g = _mm512_add_epi32(g, _mm512_alignr_epi32(g, zero, 12));
        g = _mm512_add_epi32(g, _mm512_alignr_epi32(g, zero, 8));
        uint32_t total = (uint32_t)_mm_extract_epi32(_mm512_extracti32x4_epi32(g, 3), 3);
        if (DC_UNLIKELY(next + total > d->n)) /* the scalar decoder names it */
            return dc_gaps_group_scalar(d, pos, &k, &next, 16);
        _mm512_storeu_si512((void *)(pos + k),
                            _mm512_add_epi32(g, _mm512_set1_epi32((int)(uint32_t)(next - 1))));
        next += total;
        k += 16;
    }
    d->k = k;
    d->next = next;
    return st;
}
#endif

#if defined(__x86_64__)
/* dc_gaps_pos_avx512 with AVX2, 8 gaps a step: the low bits of lane j by a
 * 4-byte gather at bit j * b of the group's b bytes (while those 4 bytes
 * are inside the low bits), a variable shift and a mask. */
DC_AVX2_TARGET static dc_status_t dc_gaps_pos_avx2(dc_gaps_dec_t *d, uint32_t *pos,
                                                   size_t upto, const dc_ent_pf_t *pf)
{
    const unsigned b = d->b;
    int off[8], sh[8];
    for (unsigned j = 0; j < 8; j++) {
        off[j] = (int)((j * b) >> 3);
        sh[j] = (int)((j * b) & 7);
    }
    const __m256i offv = _mm256_loadu_si256((const void *)off);
    const __m256i shv = _mm256_loadu_si256((const void *)sh);
    const __m256i lmask = _mm256_set1_epi32((int)((1u << b) - 1)), one = _mm256_set1_epi32(1);
    const __m256i ev = _mm256_set1_epi32((int)d->E), three = _mm256_set1_epi32(3);
    const __m128i bv = _mm_cvtsi32_si128((int)b);
    dc_pf_plan_t pfq = dc_pf_plan(pf, (upto - d->k) / 8 + 1);
    size_t k = d->k;
    uint64_t next = d->next;
    dc_status_t st = DC_OK;
    /* the gather reads 4 bytes from byte (k / 8) * b + off[j] <= .. + b */
    while (k + 8 <= upto && (k / 8) * b + b + 4 <= d->lo_len) {
        dc_pf_step(&pfq);
        __m256i q = _mm256_cvtepu16_epi32(_mm_loadu_si128((const void *)(d->gsym + k)));
        if (DC_UNLIKELY(_mm256_movemask_epi8(_mm256_cmpeq_epi32(q, ev)))) {
            if ((st = dc_gaps_group_scalar(d, pos, &k, &next, 8)) != DC_OK)
                return st;
            continue;
        }
        __m256i g = _mm256_sll_epi32(q, bv);
        if (b) {
            __m256i r = _mm256_i32gather_epi32((const int *)(d->lo + (k / 8) * b), offv, 1);
            g = _mm256_or_si256(g, _mm256_and_si256(_mm256_srlv_epi32(r, shv), lmask));
        }
        g = _mm256_add_epi32(g, one);
        g = _mm256_add_epi32(g, _mm256_slli_si256(g, 4));
        g = _mm256_add_epi32(g, _mm256_slli_si256(g, 8));
        g = _mm256_add_epi32(g, _mm256_blend_epi32(_mm256_setzero_si256(),
                                                   _mm256_permutevar8x32_epi32(g, three), 0xF0));
        uint32_t total = (uint32_t)_mm256_extract_epi32(g, 7);
        if (DC_UNLIKELY(next + total > d->n)) /* the scalar decoder names it */
            return dc_gaps_group_scalar(d, pos, &k, &next, 8);
        _mm256_storeu_si256((void *)(pos + k),
                            _mm256_add_epi32(g, _mm256_set1_epi32((int)(uint32_t)(next - 1))));
        next += total;
        k += 8;
    }
    d->k = k;
    d->next = next;
    return st;
}
#endif

dc_status_t dc_gaps_dec_run(dc_gaps_dec_t *d, uint32_t *pos, size_t upto,
                            const dc_ent_pf_t *pf)
{
    if (upto > d->count)
        upto = d->count;
    if (upto <= d->k)
        return DC_OK;
    /* the quotients first (as far as upto), then the positions */
    const dc_ent_isa_t isa = dc_ent_isa();
    dc_status_t st = dc_rans_dec_run_isa(&d->q, (uint8_t *)d->gsym, 2, upto, isa);
    if (st != DC_OK)
        return st;
#if defined(__x86_64__)
    if (isa >= DC_ENT_ISA_AVX512_VBMI) {
        if ((d->k & 15) == 0 && (st = dc_gaps_pos_avx512(d, pos, upto, pf)) != DC_OK)
            return st;
    } else if (isa >= DC_ENT_ISA_AVX2) {
        if ((d->k & 7) == 0 && (st = dc_gaps_pos_avx2(d, pos, upto, pf)) != DC_OK)
            return st;
    }
#else
    (void)pf;
#endif
    return dc_gaps_pos_scalar(d, pos, upto);
}

dc_status_t dc_gaps_dec_finish(const dc_gaps_dec_t *d)
{
    if (d->count == 0)
        return DC_OK;
    dc_status_t st = dc_rans_dec_finish(&d->q);
    if (st != DC_OK)
        return st;
    if (d->k != d->count || d->esc != d->esc_end)
        return dc_error(DC_ERR_FORMAT, "gaps stream does not end cleanly");
    /* the padding bits of the last low-bits byte are zero */
    unsigned used = (unsigned)((d->count * d->b) & 7);
    if (used && (d->lo[d->lo_len - 1] >> used) != 0)
        return dc_error(DC_ERR_FORMAT, "gaps: nonzero padding bits");
    return DC_OK;
}

dc_status_t dc_ent_gaps_decode(dc_ent_scratch_t *s, const uint8_t *src, size_t len,
                               size_t count, uint64_t n, uint32_t *pos)
{
    dc_gaps_dec_t d;
    dc_status_t st = dc_gaps_dec_init(s, &d, src, len, count, n);
    if (st == DC_OK && count)
        st = dc_gaps_dec_run(&d, pos, count, NULL);
    if (st == DC_OK)
        st = dc_gaps_dec_finish(&d);
    return st;
}
