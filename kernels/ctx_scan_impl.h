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

static inline unsigned dc_ctx_select64(uint64_t m, unsigned k)
{
    unsigned s = 0, c;
    c = (unsigned)__builtin_popcount((uint32_t)m);
    if (k >= c) {
        k -= c;
        m >>= 32;
        s = 32;
    }
    c = (unsigned)__builtin_popcount((uint32_t)(m & 0xffff));
    if (k >= c) {
        k -= c;
        m >>= 16;
        s += 16;
    }
    c = (unsigned)__builtin_popcount((uint32_t)(m & 0xff));
    if (k >= c) {
        k -= c;
        m >>= 8;
        s += 8;
    }
    return s + dc_ctx_sel8[m & 0xff][k];
}

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

/* One slab's classes: cm[c][q] the mask of class c in block q (the last
 * block valid up to `last`), pre[c][q] the class's elements in the slab
 * before block q (pre[c][nb]: in the slab). */
typedef struct {
    uint64_t cm[DC_CTX_MAX_CLASSES][DC_CTX_SLAB];
    /* + 16: padding past pre[c][nb] (DC_CTX_PRE_PAD), so that a search may
     * read 16 entries from any q <= nb */
    uint32_t pre[DC_CTX_MAX_CLASSES][DC_CTX_SLAB + 1 + 16];
} dc_ctx_slab_t;
#define DC_CTX_PRE_PAD 0x7fffffffu

/* The block q' >= q of a slab holding rank rr of a class (pre: the
 * class's prefix counts; ranks ascend, so a search only moves on).  An ISA
 * file may define its own before including this header. */
#ifndef DC_CTX_FIND_BLOCK
static inline size_t dc_ctx_find_block(const uint32_t *pre, size_t q, uint32_t rr)
{
    while (pre[q + 1] <= rr)
        q++;
    return q;
}
#define DC_CTX_FIND_BLOCK dc_ctx_find_block
#endif

static inline __attribute__((always_inline)) void dc_ctx_slab_classes(const uint64_t *ge, unsigned nt, size_t nb, uint64_t last,
                                       dc_ctx_slab_t *sl)
{
    for (size_t q = 0; q < nb; q++)
        sl->cm[0][q] = ~ge[q * nt];
    for (unsigned c = 1; c < nt; c++)
        for (size_t q = 0; q < nb; q++)
            sl->cm[c][q] = ge[q * nt + c - 1] & ~ge[q * nt + c];
    for (size_t q = 0; q < nb; q++)
        sl->cm[nt][q] = ge[q * nt + nt - 1];
    for (unsigned c = 0; c <= nt; c++) {
        sl->cm[c][nb - 1] &= last;
        uint32_t r = 0;
        for (size_t q = 0; q < nb; q++) {
            sl->pre[c][q] = r;
            r += (uint32_t)__builtin_popcountll(sl->cm[c][q]);
        }
        sl->pre[c][nb] = r;
        /* past the slab's blocks up to the array's end: a search may
         * compare all DC_CTX_SLAB entries at once */
        for (size_t i = nb + 1; i < DC_CTX_SLAB + 1 + 16; i++)
            sl->pre[c][i] = DC_CTX_PRE_PAD;
    }
}

/* nt >= 1 (one class needs no scan) */
static inline __attribute__((always_inline)) void dc_ctx_rank_impl(dc_ctx_ge_fn ge_masks, const void *base, size_t n, unsigned w,
                                    const uint64_t *thr, unsigned nt, const uint32_t *pos,
                                    size_t count, uint8_t *cls, uint32_t *rnk, uint64_t *pop,
                                    uint64_t *ge)
{
    uint64_t run[DC_CTX_MAX_CLASSES] = {0};
    dc_ctx_slab_t sl;
    size_t k = 0;
    const uint8_t *b = base;
    for (size_t e0 = 0; e0 < n; e0 += (size_t)DC_CTX_SLAB * 64) {
        size_t ne = DC_MIN((size_t)DC_CTX_SLAB * 64, n - e0);
        size_t nb = (ne + 63) / 64;
        uint64_t last = ne % 64 ? (1ull << (ne % 64)) - 1 : ~0ull;
        ge_masks(b + e0 * w, ne, w, thr, nt, ge);
        dc_ctx_slab_classes(ge, nt, nb, last, &sl);
        for (; k < count && pos[k] < e0 + ne; k++) {
            size_t q = (pos[k] - e0) / 64;
            unsigned bit = (unsigned)((pos[k] - e0) % 64);
            unsigned c = 0;
            for (unsigned j = 0; j < nt; j++)
                c += (unsigned)((ge[q * nt + j] >> bit) & 1);
            uint64_t below = (1ull << bit) - 1;
            cls[k] = (uint8_t)c;
            rnk[k] = (uint32_t)(run[c] + sl.pre[c][q] +
                                (uint64_t)__builtin_popcountll(sl.cm[c][q] & below));
        }
        for (unsigned c = 0; c <= nt; c++)
            run[c] += sl.pre[c][nb];
    }
    for (unsigned c = 0; c <= nt; c++)
        pop[c] = run[c];
}

typedef unsigned (*dc_ctx_select_fn)(uint64_t m, unsigned k);

static inline __attribute__((always_inline)) unsigned dc_ctx_merge_impl(dc_ctx_ge_fn ge_masks, dc_ctx_select_fn sel,
                                         const void *base, size_t n,
                                         unsigned w, const uint64_t *thr, unsigned nt,
                                         const uint32_t *idx, const size_t *off, uint32_t *pos,
                                         void *bw, dc_ctx_slab_fn fn, void *arg, uint64_t *ge)
{
    uint64_t run[DC_CTX_MAX_CLASSES] = {0};
    size_t ptr[DC_CTX_MAX_CLASSES];
    for (unsigned c = 0; c <= nt; c++)
        ptr[c] = off[c];
    uint64_t chg[DC_CTX_SLAB];
    dc_ctx_slab_t sl;
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
        dc_ctx_slab_classes(ge, nt, nb, last, &sl);
        memset(chg, 0, nb * sizeof(chg[0]));
        for (unsigned c = 0; c <= nt; c++) {
            size_t pt = ptr[c], en = off[c + 1];
            uint64_t r0 = run[c], tot = sl.pre[c][nb];
            run[c] = r0 + tot;
            if (pt >= en || idx[pt] >= r0 + tot)
                continue; /* none of this class's changes in the slab */
            const uint32_t *pre = sl.pre[c];
            size_t q = 0;
            for (; pt < en && idx[pt] < r0 + tot; pt++) {
                uint32_t rr = (uint32_t)(idx[pt] - r0);
                /* the block: ranks ascend, so the block only moves on */
                q = DC_CTX_FIND_BLOCK(pre, q, rr);
                chg[q] |= 1ull << sel(sl.cm[c][q], rr - pre[q]);
            }
            ptr[c] = pt;
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
            uint8_t *o = bw;
            for (size_t i = k0; i < k; i++)
                switch (w) {
                case 1: o[i] = b[pos[i]]; break;
                case 2: memcpy(o + 2 * i, b + 2 * (size_t)pos[i], 2); break;
                case 4: memcpy(o + 4 * i, b + 4 * (size_t)pos[i], 4); break;
                default: memcpy(o + 8 * i, b + 8 * (size_t)pos[i], 8); break;
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
