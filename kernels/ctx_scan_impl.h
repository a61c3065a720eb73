/*
 * ctx_scan_impl.h - private to ctx_scan*.c: rank and merge over ge masks,
 * included by each ISA's file (so that popcount and tzcnt compile to the
 * instructions that ISA has) with DC_CTX_GE naming its ge_masks.
 */
#ifndef DC_CTX_SCAN_IMPL_H
#define DC_CTX_SCAN_IMPL_H

#include "kernels/ctx_scan.h"

#include <string.h>

/* g_sel8[m][k]: the index of the k-th set bit of the byte m */
extern const uint8_t dc_ctx_sel8[256][8];

typedef void (*dc_ctx_ge_fn)(const void *, size_t, unsigned, const uint64_t *, unsigned,
                             uint64_t *);

/* select without data-dependent branches (they would mispredict once per
 * change) */
static inline unsigned dc_ctx_select64b(uint64_t m, unsigned k)
{
    /* each step: t all ones when k is past the low half's count; the
     * arithmetic keeps the compiler from branching on it */
    unsigned s = 0, c, t, sh;
    c = (unsigned)__builtin_popcount((uint32_t)m);
    t = 0u - (unsigned)(k >= c);
    k -= c & t;
    sh = 32u & t;
    m >>= sh;
    s += sh;
    c = (unsigned)__builtin_popcount((uint32_t)(m & 0xffff));
    t = 0u - (unsigned)(k >= c);
    k -= c & t;
    sh = 16u & t;
    m >>= sh;
    s += sh;
    c = (unsigned)__builtin_popcount((uint32_t)(m & 0xff));
    t = 0u - (unsigned)(k >= c);
    k -= c & t;
    sh = 8u & t;
    m >>= sh;
    s += sh;
    return s + dc_ctx_sel8[m & 0xff][k & 7];
}

/* The deposit of a merge (dc_ctx_merge_impl): the low popcount(m) bits of
 * x placed, in order, at the set bits of m (what BMI2's pdep does).  This
 * portable one costs a select per set bit of x (per change, not per
 * element). */
static inline uint64_t dc_ctx_deposit_sel(uint64_t x, uint64_t m)
{
    unsigned pc = (unsigned)__builtin_popcountll(m);
    if (pc < 64)
        x &= (1ull << pc) - 1;
    uint64_t r = 0;
    while (x) {
        r |= 1ull << dc_ctx_select64b(m, (unsigned)__builtin_ctzll(x));
        x &= x - 1;
    }
    return r;
}

/* nt >= 1 (one class needs no scan).  Per slab: the ge masks as levels
 * (level 0: every element, level j + 1: the elements that reach threshold
 * j, level nt + 1: none) and their prefix counts per block; then per
 * change its class c (how many thresholds it reaches) and its rank: the
 * elements before it at level c less those at level c + 1.  No branch on
 * the class (it is a coin toss per change). */
static inline __attribute__((always_inline)) void
dc_ctx_rank_impl(dc_ctx_ge_fn ge_masks, const void *base, size_t n, unsigned w, const uint64_t *thr,
                 unsigned nt, const uint32_t *pos, size_t count, uint8_t *cls, uint32_t *rnk,
                 uint64_t *pop, uint64_t *ge)
{
    /* G[j]: elements at level j before the slab; lv[j][q] level j's mask
     * in block q, pre[j][q] its elements in the slab before block q */
    uint64_t G[DC_CTX_MAX_CLASSES + 1] = {0};
    uint64_t lv[DC_CTX_MAX_CLASSES + 1][DC_CTX_SLAB];
    uint32_t pre[DC_CTX_MAX_CLASSES + 1][DC_CTX_SLAB + 1];
    for (size_t q = 0; q < DC_CTX_SLAB; q++) {
        lv[0][q] = ~0ull;
        lv[nt + 1][q] = 0;
        pre[0][q] = (uint32_t)(64 * q);
        pre[nt + 1][q] = 0;
    }
    size_t k = 0;
    const uint8_t *b = base;
    for (size_t e0 = 0; e0 < n; e0 += (size_t)DC_CTX_SLAB * 64) {
        size_t ne = DC_MIN((size_t)DC_CTX_SLAB * 64, n - e0);
        size_t nb = (ne + 63) / 64;
        ge_masks(b + e0 * w, ne, w, thr, nt, ge);
        for (unsigned j = 0; j < nt; j++) {
            uint32_t r = 0;
            for (size_t q = 0; q < nb; q++) {
                uint64_t m = ge[q * nt + j];
                lv[j + 1][q] = m;
                pre[j + 1][q] = r;
                r += (uint32_t)__builtin_popcountll(m);
            }
            pre[j + 1][nb] = r;
        }
        for (; k < count && pos[k] < e0 + ne; k++) {
            size_t q = (pos[k] - e0) / 64;
            unsigned bit = (unsigned)((pos[k] - e0) % 64);
            uint64_t below = (1ull << bit) - 1;
            unsigned c = 0;
            for (unsigned j = 1; j <= nt; j++)
                c += (unsigned)((lv[j][q] >> bit) & 1);
            uint64_t lo = G[c] + pre[c][q] + (uint64_t)__builtin_popcountll(lv[c][q] & below);
            uint64_t hi =
                G[c + 1] + pre[c + 1][q] + (uint64_t)__builtin_popcountll(lv[c + 1][q] & below);
            cls[k] = (uint8_t)c;
            rnk[k] = (uint32_t)(lo - hi);
        }
        G[0] += ne;
        for (unsigned j = 0; j < nt; j++)
            G[j + 1] += pre[j + 1][nb];
    }
    for (unsigned c = 0; c <= nt; c++)
        pop[c] = G[c] - G[c + 1];
}

typedef uint64_t (*dc_ctx_deposit_fn)(uint64_t x, uint64_t m);

#define DC_CTX_PRE_PAD 0x7fffffffu

/* The block q' >= q of a slab holding slab rank rr of a class (pre: the
 * class's prefix counts per block, padded with DC_CTX_PRE_PAD past the
 * slab's blocks; pre8: every 8th of them, dc_ctx_slab_t; ranks ascend, so
 * a search only moves on).  An ISA file
 * may define its own before including this header. */
#ifndef DC_CTX_FIND_BLOCK
static inline size_t dc_ctx_find_block(const uint32_t *pre, const uint32_t *pre8, size_t q,
                                       uint32_t rr)
{
    (void)pre8;
    while (pre[q + 1] <= rr)
        q++;
    return q;
}
#define DC_CTX_FIND_BLOCK dc_ctx_find_block
#endif

/* A class with fewer changes in a slab than its blocks / this is merged
 * by a block search and a select per change rather than by the deposit of
 * every block (a few operations per block): at 1% changed, most classes
 * have a few changes per slab; at 8%, dozens. */
#define DC_CTX_DEPOSIT_MIN 2

/* The positions e0 + 64 q + i of the set bits i of chg[q] for the blocks
 * q named by the set bits of nz (every block whose chg is not zero), in
 * order, into sp; returns how many.  Without a branch per block or per
 * change (at 1% changed, about half the blocks hold one: a branch on it
 * mispredicts a third of the time): the blocks that hold changes come as
 * the set bits of one mask (kept by the merge as it sets chg), and each one's first four positions are
 * written whether they exist or not (sp has room for 4 past the last;
 * only a block with more takes a loop).  */
static inline __attribute__((always_inline)) size_t dc_ctx_positions(const uint64_t *chg,
                                                                     uint64_t nz, uint32_t e0,
                                                                     uint32_t *sp)
{
    size_t kk = 0;
    while (nz) {
        unsigned q = (unsigned)__builtin_ctzll(nz);
        nz &= nz - 1;
        uint64_t m = chg[q];
        uint32_t b0 = e0 + 64 * q;
        unsigned pc = (unsigned)__builtin_popcountll(m);
        uint32_t *o = sp + kk;
        /* (the top bit keeps ctz defined once m runs out: the writes past
         * pc are scratch) */
        o[0] = b0 + (unsigned)__builtin_ctzll(m | (1ull << 63));
        m &= m - 1;
        o[1] = b0 + (unsigned)__builtin_ctzll(m | (1ull << 63));
        m &= m - 1;
        o[2] = b0 + (unsigned)__builtin_ctzll(m | (1ull << 63));
        m &= m - 1;
        o[3] = b0 + (unsigned)__builtin_ctzll(m | (1ull << 63));
        m &= m - 1;
        for (unsigned i = 4; i < pc; i++) {
            o[i] = b0 + (unsigned)__builtin_ctzll(m);
            m &= m - 1;
        }
        kk += pc;
    }
    return kk;
}

/* The base words of the slab's positions sp[0..cnt) to ob: one loop per
 * element width (a switch per word costs as much as the copy) */
static inline __attribute__((always_inline)) void
dc_ctx_gather_bw(const uint8_t *b, unsigned w, const uint32_t *sp, size_t cnt, uint8_t *ob)
{
    switch (w) {
    case 1:
        for (size_t i = 0; i < cnt; i++)
            ob[i] = b[sp[i]];
        break;
    case 2:
        for (size_t i = 0; i < cnt; i++)
            memcpy(ob + 2 * i, b + 2 * (size_t)sp[i], 2);
        break;
    case 4:
        for (size_t i = 0; i < cnt; i++)
            memcpy(ob + 4 * i, b + 4 * (size_t)sp[i], 4);
        break;
    default:
        for (size_t i = 0; i < cnt; i++)
            memcpy(ob + 8 * i, b + 8 * (size_t)sp[i], 8);
        break;
    }
}

/* One slab's classes: pre[c][q] the elements of class c in the slab
 * before block q.  A class is a difference of levels (level 0: the
 * elements that exist; level j + 1: those that reach threshold j; class c
 * = level c less level c + 1), so its count in a block is a difference of
 * the levels' popcounts (nt per block, not one per class), and its mask is
 * made only where a change needs it (dc_ctx_class_mask), not for every
 * block. */
typedef struct {
    /* + 16: padding past pre[c][nb] (DC_CTX_PRE_PAD), so that a search may
     * read 16 entries from any q <= nb */
    uint32_t pre[DC_CTX_MAX_CLASSES][DC_CTX_SLAB + 1 + 16];
    /* pre8[c][g] = pre[c][8 (g + 1)]: every 8th block's count, for a
     * two-level block search (DC_CTX_FIND_BLOCK) */
    uint32_t pre8[DC_CTX_MAX_CLASSES][DC_CTX_SLAB / 8];
} dc_ctx_slab_t;

/* The padding past a full slab's blocks (a full slab writes up to
 * pre[c][DC_CTX_SLAB]) */
static inline void dc_ctx_slab_init(dc_ctx_slab_t *sl, unsigned nt)
{
    for (unsigned c = 0; c <= nt; c++)
        for (size_t i = DC_CTX_SLAB + 1; i < DC_CTX_SLAB + 1 + 16; i++)
            sl->pre[c][i] = DC_CTX_PRE_PAD;
}

/* (one pass over the blocks for every class: the classes' prefix counts are
 * independent chains that overlap; nt is a constant where the caller names
 * it, DC_CTX_DEFAULT_NT) */
static inline __attribute__((always_inline)) void
dc_ctx_slab_classes(const uint64_t *ge, unsigned nt, size_t nb, uint64_t last, dc_ctx_slab_t *sl)
{
    /* the levels' prefix counts first (P[j][q]: level j's elements in the
     * blocks before q; a popcount, a store and an add per level and block,
     * the levels' chains side by side), then each class's as a difference
     * of two levels', 8 blocks per vector where the ISA has them */
    uint32_t P[DC_CTX_MAX_CLASSES + 1][DC_CTX_SLAB + 1];
    uint32_t r[DC_CTX_MAX_CLASSES] = {0};
    for (size_t q = 0; q < nb; q++) {
        const uint64_t *g = ge + q * nt;
#pragma GCC unroll 8
        for (unsigned j = 0; j < nt; j++) {
            P[j + 1][q] = r[j];
            r[j] += (uint32_t)__builtin_popcountll(g[j]);
        }
    }
    for (unsigned j = 0; j < nt; j++)
        P[j + 1][nb] = r[j];
    for (size_t q = 0; q < nb; q++)
        P[0][q] = (uint32_t)(64 * q);
    P[0][nb] = (uint32_t)(64 * (nb - 1)) + (uint32_t)__builtin_popcountll(last);
    for (unsigned c = 0; c <= nt; c++) {
        if (c < nt)
            for (size_t q = 0; q <= nb; q++)
                sl->pre[c][q] = P[c][q] - P[c + 1][q];
        else
            memcpy(sl->pre[c], P[c], (nb + 1) * sizeof(uint32_t));
        /* past a short slab's blocks: a search may compare all
         * DC_CTX_SLAB entries at once */
        for (size_t i = nb + 1; i <= DC_CTX_SLAB; i++)
            sl->pre[c][i] = DC_CTX_PRE_PAD;
        for (size_t g = 0; g < DC_CTX_SLAB / 8; g++)
            sl->pre8[c][g] = sl->pre[c][8 * (g + 1)];
    }
}

/* Class c's mask in block q of a slab of nb blocks (the last one's
 * elements: `last`): level c less level c + 1 (the ge masks hold only
 * elements that exist) */
static inline uint64_t dc_ctx_class_mask(const uint64_t *ge, unsigned nt, unsigned c, size_t q,
                                         size_t nb, uint64_t last)
{
    const uint64_t *g = ge + q * nt;
    uint64_t lo = c ? g[c - 1] : q + 1 == nb ? last : ~0ull;
    uint64_t hi = c < nt ? g[c] : 0;
    return lo & ~hi;
}

/*
 * The decoder's merge, per slab: the ge masks, each class's masks and
 * prefix counts per block (dc_ctx_slab_classes), then per class the ranks
 * that fall in the slab.  A class with few of them finds each one's block
 * (DC_CTX_FIND_BLOCK) and selects its element there; a class with many
 * sets them as bits of a rank bitmap, and per block the bits from the
 * block's prefix count on are deposited at the class's elements (one pdep
 * where it is fast): no search per change.
 */
static inline __attribute__((always_inline)) unsigned
dc_ctx_merge_impl(dc_ctx_ge_fn ge_masks, dc_ctx_deposit_fn dep, const void *base, size_t n,
                  unsigned w, const uint64_t *thr, unsigned nt, const uint32_t *idx,
                  const size_t *off, uint32_t *pos, void *bw, dc_ctx_slab_fn fn, void *arg,
                  uint64_t *ge)
{
    uint64_t run[DC_CTX_MAX_CLASSES] = {0};
    size_t ptr[DC_CTX_MAX_CLASSES];
    for (unsigned c = 0; c <= nt; c++)
        ptr[c] = off[c];
    uint64_t chg[DC_CTX_SLAB];
    /* a class's rank bits in the slab and 2 words of padding: the deposit
     * reads the word after the one a block's bits start in */
    uint64_t L[DC_CTX_SLAB + 2];
    dc_ctx_slab_t sl;
    dc_ctx_slab_init(&sl, nt);
    /* the slab's positions (dc_ctx_positions writes up to 4 past them) */
    uint32_t sp[DC_CTX_SLAB * 64 + 4];
    size_t k = 0;
    const uint8_t *b = base;
    for (size_t e0 = 0; e0 < n; e0 += (size_t)DC_CTX_SLAB * 64) {
        size_t ne = DC_MIN((size_t)DC_CTX_SLAB * 64, n - e0);
        size_t nb = (ne + 63) / 64;
        uint64_t last = ne % 64 ? (1ull << (ne % 64)) - 1 : ~0ull;
        /* the next slab streams in while this one is merged (and, with fn,
         * patched and hashed): the scan is the chunk's first touch */
        if (e0 + ne < n) {
            const uint8_t *nx = b + (e0 + ne) * w;
            size_t nbytes = DC_MIN((size_t)DC_CTX_SLAB * 64, n - e0 - ne) * w;
            size_t q = 0;
            for (; q + 256 <= nbytes; q += 256) {
                __builtin_prefetch(nx + q, 0, 3);
                __builtin_prefetch(nx + q + 64, 0, 3);
                __builtin_prefetch(nx + q + 128, 0, 3);
                __builtin_prefetch(nx + q + 192, 0, 3);
            }
            for (; q < nbytes; q += 64)
                __builtin_prefetch(nx + q, 0, 3);
        }
        ge_masks(b + e0 * w, ne, w, thr, nt, ge);
        if (nt == DC_CTX_DEFAULT_NT)
            dc_ctx_slab_classes(ge, DC_CTX_DEFAULT_NT, nb, last, &sl);
        else
            dc_ctx_slab_classes(ge, nt, nb, last, &sl);
        memset(chg, 0, nb * sizeof(chg[0]));
        uint64_t nz = 0; /* the blocks whose chg is not zero */
        for (unsigned c = 0; c <= nt; c++) {
            size_t pt = ptr[c], en = off[c + 1];
            uint64_t r0 = run[c], tot = sl.pre[c][nb];
            run[c] = r0 + tot;
            /* the class's changes in the slab: ranks r0 .. r0 + tot - 1
             * (unsigned: a rank below r0, which increasing ranks never
             * are, stops here and is refused as one left over) */
            size_t p1 = pt;
            while (p1 < en && (uint64_t)idx[p1] - r0 < tot)
                p1++;
            ptr[c] = p1;
            if (p1 == pt)
                continue;
            const uint32_t *pre = sl.pre[c];
            if ((p1 - pt) * DC_CTX_DEPOSIT_MIN < nb) {
                /* few: one block search and one select per change */
                size_t q = 0;
                for (; pt < p1; pt++) {
                    uint32_t rr = (uint32_t)(idx[pt] - r0);
                    q = DC_CTX_FIND_BLOCK(pre, sl.pre8[c], q, rr);
                    chg[q] |= dep(1ull << (rr - pre[q]), dc_ctx_class_mask(ge, nt, c, q, nb, last));
                    nz |= 1ull << q;
                }
                continue;
            }
            /* many: the class's slab ranks as bits, and per block the
             * bits from its prefix count on deposited at its elements */
            memset(L, 0, (nb + 2) * sizeof(L[0]));
            for (; pt < p1; pt++) {
                uint64_t bit = idx[pt] - r0;
                L[bit >> 6] |= 1ull << (bit & 63);
            }
            for (size_t q = 0; q < nb; q++) {
                unsigned s = pre[q] & 63;
                const uint64_t *lw = L + (pre[q] >> 6);
                uint64_t x = (lw[0] >> s) | ((lw[1] << 1) << (63 - s));
                uint64_t d = dep(x, dc_ctx_class_mask(ge, nt, c, q, nb, last));
                chg[q] |= d;
                nz |= (uint64_t)(d != 0) << q;
            }
        }
        size_t k0 = k;
        k += dc_ctx_positions(chg, nz, (uint32_t)e0, sp);
        memcpy(pos + k0, sp, (k - k0) * sizeof(pos[0]));
        if (bw)
            dc_ctx_gather_bw(b, w, sp, k - k0, (uint8_t *)bw + k0 * w);
        if (fn)
            fn(arg, e0, e0 + ne, k0, k);
    }
    for (unsigned c = 0; c <= nt; c++)
        if (ptr[c] != off[c + 1])
            return c + 1;
    return 0;
}

#endif /* DC_CTX_SCAN_IMPL_H */
