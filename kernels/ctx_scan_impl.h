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

/* class masks of block b from its nt ge masks (nested: ge[j+1] within ge[j]) */
static inline void dc_ctx_class_masks(const uint64_t *g, unsigned nt, uint64_t valid,
                                      uint64_t *m)
{
    uint64_t prev = valid;
    for (unsigned j = 0; j < nt; j++) {
        m[j] = prev & ~g[j];
        prev = g[j];
    }
    m[nt] = prev;
}

static inline void dc_ctx_rank_impl(void (*ge_masks)(const void *, size_t, unsigned,
                                                     const uint64_t *, unsigned, uint64_t *),
                                    const void *base, size_t n, unsigned w, const uint64_t *thr,
                                    unsigned nt, const uint32_t *pos, size_t count, uint8_t *cls,
                                    uint32_t *rnk, uint64_t *pop, uint64_t *ge)
{
    uint64_t run[DC_CTX_MAX_CLASSES] = {0};
    size_t k = 0;
    const uint8_t *b = base;
    for (size_t e0 = 0; e0 < n; e0 += (size_t)DC_CTX_SLAB * 64) {
        size_t ne = DC_MIN((size_t)DC_CTX_SLAB * 64, n - e0);
        ge_masks(b + e0 * w, ne, w, thr, nt, ge);
        size_t nb = (ne + 63) / 64;
        for (size_t q = 0; q < nb; q++) {
            size_t bs = e0 + q * 64;
            size_t left = ne - q * 64;
            uint64_t valid = left >= 64 ? ~0ull : (1ull << left) - 1;
            uint64_t m[DC_CTX_MAX_CLASSES];
            dc_ctx_class_masks(ge + q * nt, nt, valid, m);
            while (k < count && pos[k] < bs + 64) {
                unsigned bit = (unsigned)(pos[k] - bs);
                uint64_t below = bit ? (~0ull >> (64 - bit)) : 0;
                unsigned c = 0;
                for (unsigned j = 0; j < nt; j++)
                    c += (unsigned)((ge[q * nt + j] >> bit) & 1);
                cls[k] = (uint8_t)c;
                rnk[k] = (uint32_t)(run[c] + (uint64_t)__builtin_popcountll(m[c] & below));
                k++;
            }
            for (unsigned c = 0; c <= nt; c++)
                run[c] += (uint64_t)__builtin_popcountll(m[c]);
        }
    }
    for (unsigned c = 0; c <= nt; c++)
        pop[c] = run[c];
}

static inline unsigned dc_ctx_merge_impl(void (*ge_masks)(const void *, size_t, unsigned,
                                                          const uint64_t *, unsigned, uint64_t *),
                                         const void *base, size_t n, unsigned w,
                                         const uint64_t *thr, unsigned nt, const uint32_t *idx,
                                         const size_t *off, uint32_t *pos, uint64_t *ge)
{
    uint64_t run[DC_CTX_MAX_CLASSES] = {0};
    size_t ptr[DC_CTX_MAX_CLASSES], end[DC_CTX_MAX_CLASSES];
    /* next[c]: the next rank of class c still to place (UINT64_MAX: none);
     * a block holds none of class c's when next[c] >= run[c] + its count */
    uint64_t next[DC_CTX_MAX_CLASSES];
    for (unsigned c = 0; c <= nt; c++) {
        ptr[c] = off[c];
        end[c] = off[c + 1];
        next[c] = ptr[c] < end[c] ? idx[ptr[c]] : UINT64_MAX;
    }
    size_t k = 0;
    const uint8_t *b = base;
    for (size_t e0 = 0; e0 < n; e0 += (size_t)DC_CTX_SLAB * 64) {
        size_t ne = DC_MIN((size_t)DC_CTX_SLAB * 64, n - e0);
        ge_masks(b + e0 * w, ne, w, thr, nt, ge);
        size_t nb = (ne + 63) / 64;
        for (size_t q = 0; q < nb; q++) {
            size_t left = ne - q * 64;
            uint64_t valid = left >= 64 ? ~0ull : (1ull << left) - 1;
            uint64_t m[DC_CTX_MAX_CLASSES];
            dc_ctx_class_masks(ge + q * nt, nt, valid, m);
            uint64_t chg = 0;
            for (unsigned c = 0; c <= nt; c++) {
                uint64_t cnt = (uint64_t)__builtin_popcountll(m[c]);
                while (next[c] < run[c] + cnt) {
                    chg |= 1ull << dc_ctx_select64(m[c], (unsigned)(next[c] - run[c]));
                    ptr[c]++;
                    next[c] = ptr[c] < end[c] ? idx[ptr[c]] : UINT64_MAX;
                }
                run[c] += cnt;
            }
            size_t bs = e0 + q * 64;
            while (chg) {
                pos[k++] = (uint32_t)(bs + (unsigned)__builtin_ctzll(chg));
                chg &= chg - 1;
            }
        }
    }
    for (unsigned c = 0; c <= nt; c++)
        if (ptr[c] != end[c])
            return c + 1;
    return 0;
}

#endif /* DC_CTX_SCAN_IMPL_H */
