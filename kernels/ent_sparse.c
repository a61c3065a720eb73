/* ent_sparse.c - dc_ent_sparse_run: a sparse chunk's Golomb positions and
 * four-way rANS values decoded in one loop. */
#include "kernels/entropy_internal.h"

/* Where no slot holds two codes (long codes: low change rates), the
 * loop of one code per lookup and four per load, positions and values in
 * step (k counts both); as fast as the general loop below there, and one
 * instruction stream fewer. */
static inline __attribute__((always_inline)) dc_status_t
dc_sparse_fast1(dc_golomb_dec_t *gd, dc_rans_dec_t *rd, uint32_t *pos, uint8_t *vals,
               size_t upto, const dc_ent_pf_t *pf)
{
    size_t k = gd->k;
    /* steps of four codes */
    dc_pf_plan_t pfq = dc_pf_plan(pf, (upto - k) / 8 + 1);
    {
        /* four positions and four 16-bit values per step, in one loop: the
         * Golomb chain (shift, table load, add per code) runs alongside
         * the four rANS chains instead of before them */
        const uint8_t *gp = gd->p, *gend = gd->end, *p = rd->p, *end = rd->end;
        unsigned bc = gd->bc;
        uint64_t next = gd->next;
        const uint32_t *gtab = gd->gtab;
        const unsigned S = rd->S;
        const uint32_t mask = (1u << S) - 1;
        const uint64_t *dtab = rd->dtab;
        uint32_t x0 = rd->x[0], x1 = rd->x[1], x2 = rd->x[2], x3 = rd->x[3];
        while (k + 4 <= upto && gend - gp >= 8 && end - p >= 8) {
            dc_pf_step(&pfq);
            uint64_t cont = __builtin_bswap64(dc_load_le64(gp));
            /* a code the table lacks reads 0, and so do the lookups after
             * it (they use the same bits): e3 == 0 means some code missed */
            uint32_t e0 = gtab[(cont << bc) >> (64 - DC_GT_BITS)];
            unsigned b1 = bc + (e0 >> 24);
            uint32_t e1 = gtab[(cont << b1) >> (64 - DC_GT_BITS)];
            unsigned b2 = b1 + (e1 >> 24);
            uint32_t e2 = gtab[(cont << b2) >> (64 - DC_GT_BITS)];
            unsigned b3 = b2 + (e2 >> 24);
            uint32_t e3 = gtab[(cont << b3) >> (64 - DC_GT_BITS)];
            uint64_t n0 = next + (e0 & 0xffffffu);
            uint64_t n1 = n0 + 1 + (e1 & 0xffffffu);
            uint64_t n2 = n1 + 1 + (e2 & 0xffffffu);
            uint64_t n3 = n2 + 1 + (e3 & 0xffffffu);
            if (DC_LIKELY(e3 != 0 && n3 < gd->n)) {
                bc = b3 + (e3 >> 24);
                pos[k] = (uint32_t)n0;
                pos[k + 1] = (uint32_t)n1;
                pos[k + 2] = (uint32_t)n2;
                pos[k + 3] = (uint32_t)n3;
                next = n3 + 1;
                gp += bc >> 3;
                bc &= 7;
            } else {
                /* a code the table lacks (or a bad position): these four
                 * through the general decoder */
                gd->p = gp;
                gd->bc = bc;
                gd->next = next;
                gd->k = k;
                dc_status_t st = dc_golomb_dec_run(gd, pos, k + 4);
                if (st != DC_OK)
                    return st;
                gp = gd->p;
                bc = gd->bc;
                next = gd->next;
            }
#define DC_RANS_STEP(X, I)                                                    \
    do {                                                                      \
        uint64_t e = dtab[X & mask];                                          \
        X = (uint32_t)(e >> 32) * (X >> S) + ((uint32_t)e >> 16);             \
        unsigned nbits = ((unsigned)__builtin_clz(X) - 1u) & ~7u;             \
        uint32_t two = (uint32_t)p[0] << 8 | p[1];                            \
        X = (uint32_t)(((uint64_t)X << nbits) | (two >> (16 - nbits)));       \
        p += nbits >> 3;                                                      \
        dc_store_le16(vals + 2 * (I), (uint16_t)e);                           \
    } while (0)
            DC_RANS_STEP(x0, k);
            DC_RANS_STEP(x1, k + 1);
            DC_RANS_STEP(x2, k + 2);
            DC_RANS_STEP(x3, k + 3);
#undef DC_RANS_STEP
            k += 4;
        }
        gd->p = gp;
        gd->bc = bc;
        gd->next = next;
        gd->k = k;
        rd->p = p;
        rd->x[0] = x0;
        rd->x[1] = x1;
        rd->x[2] = x2;
        rd->x[3] = x3;
        rd->i = k;
    }
    return DC_OK;
}

/* The interleaved loop of dc_ent_sparse_run (table Golomb codes, four-way
 * 16-bit rANS) where many slots hold two codes, as far as both fast paths
 * go; compiled with L = 3 lookups per step, for the baseline and with
 * BMI2 (one-uop variable shifts) and LZCNT.
 *
 * A step decodes four values and L table lookups of positions (each up to
 * two codes, gtab2): the Golomb chain per lookup is a shift, a load and a
 * shift, and it runs alongside the four rANS chains.  The two counts move
 * apart (kg positions, k values); what is left when either fast path ends
 * goes through the general decoders.  Steps run in batches whose length is
 * fixed before the batch by the worst case of every bound (stream bytes,
 * counts), so the steps themselves test nothing but a table miss.
 *
 * Measured at inject 5% (24 chunks of 4 MiB, this 2-vCPU VM, each against
 * this loop in the same run): 3.6-5.9 ns per change here, the Golomb
 * decoder alone 4.3-5.0 and the rANS decoder alone 2.5-3.4.  Tried and
 * dropped: a 4-byte rANS table (16 KiB instead of 32, symbol index + freq
 * - 1 + offset; for S <= 12 and <= 256 symbols) so that both tables fit
 * L1: no change; one bitstream of (Golomb gap, Huffman value) pairs, one
 * 12/14-bit lookup per change (88/95% hit): 10.6-11.5 ns, same size; Rice
 * positions split into a unary and a fixed-width remainder stream (same
 * size: 6.13 bits per change): 1.7-2.8 ns alone, but 5.5-6.7 fused with
 * the rANS values in a plain loop.  What went further was SIMD, a format
 * change: the 32-way rANS layout and DC_ENT_GAPS positions (ent_rans32.c,
 * ent_gaps.c), which the encoder now writes from 4096 changes on; this
 * loop serves the smaller chunks and older streams. */
static inline __attribute__((always_inline)) dc_status_t
dc_sparse_fast(dc_golomb_dec_t *gd, dc_rans_dec_t *rd, uint32_t *pos, uint8_t *vals,
               size_t upto, const dc_ent_pf_t *pf, const unsigned L, const unsigned S0)
{
    size_t k = rd->i, kg = gd->k;
    const size_t uptor = DC_MIN(upto, rd->count);
    dc_pf_plan_t pfq = dc_pf_plan(pf, (uptor > k ? uptor - k : 0) / 8 + 1);
    const uint8_t *gp = gd->p, *gend = gd->end, *p = rd->p, *end = rd->end;
    unsigned bc = gd->bc;
    uint64_t next = gd->next;
    const uint64_t gn = gd->n;
    const uint32_t *g2 = gd->gtab2;
    /* S0: the scale as a constant (0: rd->S) */
    const unsigned S = S0 ? S0 : rd->S;
    const uint32_t mask = (1u << S) - 1;
    const uint64_t *dtab = rd->dtab;
    uint32_t x0 = rd->x[0], x1 = rd->x[1], x2 = rd->x[2], x3 = rd->x[3];
    dc_status_t st = DC_OK;
    for (;;) {
        /* steps this batch: each uses <= 12 L bits of positions (and reads
         * 16 bytes from where it starts), <= 8 bytes of values, 4 values
         * and <= 2 L positions */
        if (gend - gp < 16 || end - p < 8 || kg + 2 * L > upto || k + 4 > uptor)
            break;
        size_t nst = DC_MIN((size_t)(gend - gp - 16) / (12 * L / 8 + 1),
                            (size_t)(end - p - 8) / 8) + 1;
        nst = DC_MIN(nst, (upto - kg) / (2 * L));
        nst = DC_MIN(nst, (uptor - k) / 4);
        nst = DC_MIN(nst, (size_t)64);
        uint64_t win = __builtin_bswap64(dc_load_le64(gp)) << bc;
        uint32_t *pk = pos + kg;
        uint8_t *vk = vals + 2 * k;
        size_t it = nst;
        int miss = 0;
        do {
            dc_pf_step(&pfq);
            uint32_t ge = 0;
            unsigned used = bc;
            uint64_t nx0 = next;
            uint32_t *pk0 = pk;
#pragma GCC unroll 4
            for (unsigned j = 0; j < L; j++) {
                ge = g2[win >> (64 - DC_GT_BITS)];
                win <<= ge & 63;
                used += ge & 63;
                pk[0] = (uint32_t)(next + ((ge >> 7) & 0x1fffu));
                uint64_t a1 = next + (ge >> 20);
                pk[1] = (uint32_t)a1;
                next = a1 + 1;
                pk += 1 + ((ge >> 6) & 1);
            }
            if (DC_UNLIKELY(ge == 0 || next > gn)) {
                /* a code the table lacks (or a bad position): this step's
                 * positions go again through the general decoder, after
                 * the values */
                next = nx0;
                pk = pk0;
                miss = 1;
            } else {
                /* the next 64 bits: from the 128 at gp (used <= 55) */
                uint64_t c0 = __builtin_bswap64(dc_load_le64(gp));
                uint64_t c1 = __builtin_bswap64(dc_load_le64(gp + 8));
                win = (c0 << used) | ((c1 >> 1) >> (63 - used));
                gp += used >> 3;
                bc = used & 7;
            }
            /* rANS: one table load per value; x >= 2^(23-S) >= 2^7 after
             * it, so renormalizing takes 0, 1 or 2 bytes: those of one
             * 8-byte load at p (<= 8 bytes a step) */
            uint64_t rw = __builtin_bswap64(dc_load_le64(p));
            unsigned off = 0;
#define DC_RANS_STEP(X, I)                                                    \
    do {                                                                      \
        uint64_t e = dtab[X & mask];                                          \
        X = (uint32_t)(e >> 32) * (X >> S) + ((uint32_t)e >> 16);             \
        unsigned nbits = ((unsigned)__builtin_clz(X) - 1u) & ~7u;             \
        uint32_t two = (uint32_t)((rw << off) >> 48);                         \
        X = (uint32_t)(((uint64_t)X << nbits) | (two >> (16 - nbits)));       \
        off += nbits;                                                         \
        dc_store_le16(vk + 2 * (I), (uint16_t)e);                             \
    } while (0)
            DC_RANS_STEP(x0, 0);
            DC_RANS_STEP(x1, 1);
            DC_RANS_STEP(x2, 2);
            DC_RANS_STEP(x3, 3);
#undef DC_RANS_STEP
            p += off >> 3;
            vk += 8;
            if (miss)
                break;
        } while (--it);
        kg = (size_t)(pk - pos);
        k = (size_t)(vk - vals) / 2;
        if (miss) {
            gd->p = gp;
            gd->bc = bc;
            gd->next = next;
            gd->k = kg;
            if ((st = dc_golomb_dec_run(gd, pos, kg + 1)) != DC_OK)
                goto out;
            gp = gd->p;
            bc = gd->bc;
            next = gd->next;
            kg = gd->k;
        }
    }
out:
    gd->p = gp;
    gd->bc = bc;
    gd->next = next;
    gd->k = kg;
    rd->p = p;
    rd->x[0] = x0;
    rd->x[1] = x1;
    rd->x[2] = x2;
    rd->x[3] = x3;
    rd->i = k;
    return st;
}

static dc_status_t dc_sparse_fast_base(dc_golomb_dec_t *gd, dc_rans_dec_t *rd, uint32_t *pos,
                                       uint8_t *vals, size_t upto, const dc_ent_pf_t *pf)
{
    if (gd->glook == 3)
        return dc_sparse_fast(gd, rd, pos, vals, upto, pf, 3, 0);
    return dc_sparse_fast1(gd, rd, pos, vals, upto, pf);
}

#if defined(__x86_64__)
/* every CPU with BMI2 has LZCNT (Haswell, Zen) */
__attribute__((target("bmi2,lzcnt"))) static dc_status_t
dc_sparse_fast_bmi2(dc_golomb_dec_t *gd, dc_rans_dec_t *rd, uint32_t *pos, uint8_t *vals,
                    size_t upto, const dc_ent_pf_t *pf)
{
    if (gd->glook != 3)
        return dc_sparse_fast1(gd, rd, pos, vals, upto, pf);
    /* the two scales encoders pick (12 and 16 bits) as constants: two
     * registers fewer in the loop */
    if (rd->S == 12)
        return dc_sparse_fast(gd, rd, pos, vals, upto, pf, 3, 12);
    if (rd->S == 16)
        return dc_sparse_fast(gd, rd, pos, vals, upto, pf, 3, 16);
    return dc_sparse_fast(gd, rd, pos, vals, upto, pf, 3, 0);
}
#endif

dc_status_t dc_ent_sparse_run(dc_golomb_dec_t *gd, dc_rans_dec_t *rd, uint32_t *pos,
                              uint8_t *vals, size_t upto, const dc_ent_pf_t *pf)
{
    if (upto > gd->count)
        upto = gd->count;
    const dc_ent_isa_t isa = dc_ent_isa();
    if (gd->use_tab && rd->ways == 4 && rd->bits == 16 && (rd->i & 3) == 0 && gd->glook == 0) {
        /* no two-code slots when the shortest code has > half the bits */
        if (2 * (gd->b ? gd->b : 1) > DC_GT_BITS)
            gd->glook = 4;
        else
            dc_golomb_build_g2(gd);
    }
    /* the one-code loop keeps both decoders at one count: they start a call
     * in step (both run to upto) unless a caller ran one of them alone */
    if (gd->use_tab && rd->ways == 4 && rd->bits == 16 && (rd->i & 3) == 0 &&
        (gd->glook == 3 || (gd->glook == 4 && rd->i == gd->k))) {
        dc_status_t st;
#if defined(__x86_64__)
        if (isa >= DC_ENT_ISA_AVX2)
            st = dc_sparse_fast_bmi2(gd, rd, pos, vals, upto, pf);
        else
#endif
            st = dc_sparse_fast_base(gd, rd, pos, vals, upto, pf);
        if (st != DC_OK)
            return st;
    }
    dc_status_t st = dc_golomb_dec_run(gd, pos, upto);
    if (st == DC_OK)
        st = dc_rans_dec_run_isa(rd, vals, rd->bits / 8, upto, isa);
    return st;
}
