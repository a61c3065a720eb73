/*
 * ctx_scan.h - private to kernels/: the magnitude-class scan of the
 * base-conditioned codec (ctx.c), one table per ISA (kern_isa.h).
 *
 * The codec sorts a chunk's elements into classes by the magnitude of
 * their BASE value: the word with its top (sign) bit cleared, compared
 * with up to DC_CTX_MAX_CLASSES - 1 increasing thresholds.  Both ends hold
 * the base, so the classes cost nothing to send.  The scan turns each run
 * of 64 elements (a block) into one mask per threshold:
 *
 *   ge[b * nt + j]  bit i set  <=>  element 64 b + i exists (< n) and its
 *                                   magnitude is >= thr[j]
 *
 * Everything else (class masks, ranks, the merge of per-class positions)
 * is popcount arithmetic on these masks (ctx.c).  Every table computes the
 * same masks.
 */
#ifndef DC_CTX_SCAN_H
#define DC_CTX_SCAN_H

#include "util/dc_util.h"

#define DC_CTX_MAX_CLASSES 8

/* Called by merge_slabs after each slab: the positions pos[k0..k1) (and
 * their base words, when asked for) are out and lie in elements [e0, e1);
 * the slab's elements were just read, so they are in cache. */
typedef void (*dc_ctx_slab_fn)(void *arg, size_t e0, size_t e1, size_t k0, size_t k1);

typedef struct dc_ctx_scan_ops {
    const char *name;
    /* ge masks of the blocks of elements [0, n) of w (1, 2, 4, 8) bytes at
     * base; nt (0..DC_CTX_MAX_CLASSES - 1) thresholds, increasing, each
     * below 2^(8w - 1); ge holds ceil(n / 64) * nt words. */
    void (*ge_masks)(const void *base, size_t n, unsigned w, const uint64_t *thr, unsigned nt,
                     uint64_t *ge);
    /* Encoder: for each of the count changed elements pos[k] (strictly
     * increasing, < n), its class cls[k] and its rank rnk[k] (its index
     * among the elements of its class); pop[c] (nt + 1 entries) gets each
     * class's population.  ge: DC_CTX_SLAB * nt words of scratch. */
    void (*rank)(const void *base, size_t n, unsigned w, const uint64_t *thr, unsigned nt,
                 const uint32_t *pos, size_t count, uint8_t *cls, uint32_t *rnk, uint64_t *pop,
                 uint64_t *ge);
    /* Decoder: class c's ranks are idx[off[c] .. off[c + 1]) (strictly
     * increasing); writes the element indices they name, in increasing
     * order, to pos (off[nt + 1] of them), and (bw not NULL) the base
     * words there to bw, read while the scan holds them in cache.  Returns
     * 0, or c + 1 when a rank of class c is past the class's population
     * (pos and bw then hold scratch). */
    unsigned (*merge)(const void *base, size_t n, unsigned w, const uint64_t *thr, unsigned nt,
                      const uint32_t *idx, const size_t *off, uint32_t *pos, void *bw,
                      uint64_t *ge);
    /* merge, calling fn (not NULL) after each slab, in element order */
    unsigned (*merge_slabs)(const void *base, size_t n, unsigned w, const uint64_t *thr,
                            unsigned nt, const uint32_t *idx, const size_t *off, uint32_t *pos,
                            void *bw, dc_ctx_slab_fn fn, void *arg, uint64_t *ge);
} dc_ctx_scan_ops_t;

/* The encoder's default threshold count (ctx.h DC_CTX_DEFAULT_CLASSES - 1,
 * checked there), for which the merge's per-slab class pass is compiled
 * with a constant count. */
#define DC_CTX_DEFAULT_NT 3

/* Blocks of 64 elements per ge_masks call inside rank and merge. */
#define DC_CTX_SLAB 64

extern const dc_ctx_scan_ops_t dc_ctx_scan_scalar;
#if defined(__x86_64__)
extern const dc_ctx_scan_ops_t dc_ctx_scan_avx2;
#if !DC_KERN_EMU_AVX512
/* (ctx_scan_avx512.c; the emulated build's avx512 row uses the AVX2 one) */
extern const dc_ctx_scan_ops_t dc_ctx_scan_avx512;
#endif
#endif

/** The reference loop (also the vector tables' tail). */
void dc_ctx_ge_scalar(const void *base, size_t n, unsigned w, const uint64_t *thr, unsigned nt,
                      uint64_t *ge);

#endif /* DC_CTX_SCAN_H */
