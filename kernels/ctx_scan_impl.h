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

/*
 * The decoder's merge, per slab: the ge masks; each class's population in
 * the slab (from the masks' popcounts); the class's ranks that fall in
 * the slab set as bits of a rank bitmap (class c's slab ranks at bits
 * boff[c] ..); then per class with changes here and per block, the next
 * popcount(class mask) bits of its rank bits deposited at the class's
 * elements: the block's changed elements of that class.  Branch-free per
 * block (no search per change); with pdep the deposit is one
 * instruction.
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
    /* the slab's rank bits (one per element) and 2 words of padding: the
     * deposit reads the word after the one a class's bits start in */
    uint64_t L[DC_CTX_SLAB + 2];
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
            for (size_t q = 0; q < nbytes; q += 64)
                __builtin_prefetch(nx + q, 0, 3);
        }
        ge_masks(b + e0 * w, ne, w, thr, nt, ge);
        /* GT[j]: the slab's elements that reach threshold j - 1 (GT[0]:
         * all of them) */
        uint64_t GT[DC_CTX_MAX_CLASSES + 1];
        GT[0] = ne;
        for (unsigned j = 0; j < nt; j++) {
            uint64_t r = 0;
            for (size_t q = 0; q < nb; q++)
                r += (uint64_t)__builtin_popcountll(ge[q * nt + j]);
            GT[j + 1] = r;
        }
        GT[nt + 1] = 0;
        memset(L, 0, (nb + 2) * sizeof(L[0]));
        unsigned has = 0;
        uint64_t boff[DC_CTX_MAX_CLASSES], o = 0;
        for (unsigned c = 0; c <= nt; c++) {
            uint64_t r0 = run[c], tot = GT[c] - GT[c + 1];
            size_t pt = ptr[c], en = off[c + 1];
            boff[c] = o;
            /* (unsigned: a rank below r0, which increasing ranks never
             * are, would stop here and be refused as one left over) */
            for (; pt < en && (uint64_t)idx[pt] - r0 < tot; pt++) {
                uint64_t bit = o + (idx[pt] - r0);
                L[bit >> 6] |= 1ull << (bit & 63);
            }
            has |= (unsigned)(pt != ptr[c]) << c;
            ptr[c] = pt;
            run[c] = r0 + tot;
            o += tot;
        }
        memset(chg, 0, nb * sizeof(chg[0]));
        for (unsigned c = 0; c <= nt; c++) {
            if (!(has & (1u << c)))
                continue; /* none of this class's changes in the slab */
            /* class c's mask in block q: reaches threshold c - 1 (c = 0:
             * exists) and not c (c = nt: no threshold c) */
            const uint64_t *lo = c ? ge + c - 1 : NULL, *hi = c < nt ? ge + c : NULL;
            uint64_t bo = boff[c];
            for (size_t q = 0; q < nb; q++) {
                uint64_t m = lo ? lo[q * nt] : q + 1 < nb ? ~0ull : last;
                if (hi)
                    m &= ~hi[q * nt];
                unsigned s = (unsigned)(bo & 63);
                const uint64_t *lw = L + (bo >> 6);
                uint64_t x = (lw[0] >> s) | ((lw[1] << 1) << (63 - s));
                chg[q] |= dep(x, m);
                bo += (uint64_t)__builtin_popcountll(m);
            }
        }
        size_t k0 = k;
        for (size_t q = 0; q < nb; q++) {
            uint64_t m = chg[q];
            while (m) {
                pos[k++] = (uint32_t)(e0 + q * 64 + (unsigned)__builtin_ctzll(m));
                m &= m - 1;
            }
        }
        if (bw) {
            uint8_t *ob = bw;
            for (size_t i = k0; i < k; i++)
                switch (w) {
                case 1:
                    ob[i] = b[pos[i]];
                    break;
                case 2:
                    memcpy(ob + 2 * i, b + 2 * (size_t)pos[i], 2);
                    break;
                case 4:
                    memcpy(ob + 4 * i, b + 4 * (size_t)pos[i], 4);
                    break;
                default:
                    memcpy(ob + 8 * i, b + 8 * (size_t)pos[i], 8);
                    break;
                }
        }
        if (fn)
            fn(arg, e0, e0 + ne, k0, k);
    }
    for (unsigned c = 0; c <= nt; c++)
        if (ptr[c] != off[c + 1])
            return c + 1;
    return 0;
}

#endif /* DC_CTX_SCAN_IMPL_H */
