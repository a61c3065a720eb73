/* ctx_scan.c - the portable magnitude-class scan (ctx_scan.h). */
#include "kernels/ctx_scan.h"
#include "kernels/ctx_scan_impl.h"

#include <string.h>

static inline uint64_t dc_ctx_mag(const uint8_t *p, unsigned w)
{
    switch (w) {
    case 1: return p[0] & 0x7fu;
    case 2: {
        uint16_t v;
        memcpy(&v, p, 2);
        return v & 0x7fffu;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, p, 4);
        return v & 0x7fffffffu;
    }
    default: {
        uint64_t v;
        memcpy(&v, p, 8);
        return v & 0x7fffffffffffffffull;
    }
    }
}

void dc_ctx_ge_scalar(const void *base, size_t n, unsigned w, const uint64_t *thr, unsigned nt,
                      uint64_t *ge)
{
    const uint8_t *b = base;
    size_t nb = (n + 63) / 64;
    for (size_t k = 0; k < nb; k++) {
        uint64_t m[DC_CTX_MAX_CLASSES] = {0};
        size_t i0 = k * 64, i1 = DC_MIN(n, i0 + 64);
        for (size_t i = i0; i < i1; i++) {
            uint64_t mag = dc_ctx_mag(b + i * w, w);
            for (unsigned j = 0; j < nt; j++)
                m[j] |= (uint64_t)(mag >= thr[j]) << (i - i0);
        }
        for (unsigned j = 0; j < nt; j++)
            ge[k * nt + j] = m[j];
    }
}

/* dc_ctx_sel8[m][k]: index of the k-th set bit of m (0 past the last) */
const uint8_t dc_ctx_sel8[256][8] = {
#include "kernels/ctx_sel8.inc"
};

static void dc_ctx_rank_scalar(const void *base, size_t n, unsigned w, const uint64_t *thr,
                               unsigned nt, const uint32_t *pos, size_t count, uint8_t *cls,
                               uint32_t *rnk, uint64_t *pop, uint64_t *ge)
{
    dc_ctx_rank_impl(dc_ctx_ge_scalar, base, n, w, thr, nt, pos, count, cls, rnk, pop, ge);
}

static unsigned dc_ctx_merge_scalar(const void *base, size_t n, unsigned w, const uint64_t *thr,
                                    unsigned nt, const uint32_t *idx, const size_t *off,
                                    uint32_t *pos, void *bw, uint64_t *ge)
{
    return dc_ctx_merge_impl(dc_ctx_ge_scalar, dc_ctx_deposit_sel, base, n, w, thr, nt, idx, off,
                             pos, bw, NULL, NULL, ge);
}

static unsigned dc_ctx_merge_slabs_scalar(const void *base, size_t n, unsigned w,
                                          const uint64_t *thr, unsigned nt, const uint32_t *idx,
                                          const size_t *off, uint32_t *pos, void *bw,
                                          dc_ctx_slab_fn fn, void *arg, uint64_t *ge)
{
    return dc_ctx_merge_impl(dc_ctx_ge_scalar, dc_ctx_deposit_sel, base, n, w, thr, nt, idx, off,
                             pos, bw, fn, arg, ge);
}

const dc_ctx_scan_ops_t dc_ctx_scan_scalar = {"scalar", dc_ctx_ge_scalar, dc_ctx_rank_scalar,
                                              dc_ctx_merge_scalar, dc_ctx_merge_slabs_scalar};
