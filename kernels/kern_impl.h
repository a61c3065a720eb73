/*
 * kern_impl.h - private to kernels/kern*.c: the per-ISA operation tables.
 *
 * kern.c holds the portable reference (dc_kern_ops_scalar) and the entry
 * points; kern_avx2.c and kern_avx512.c provide the vector tables on
 * x86-64 (each file compiled for its ISA with a file-level target pragma,
 * so the rest of the library stays baseline x86-64).  kern_isa.c picks the
 * table (kern_isa.h).  Every table computes the same bytes.
 */
#ifndef DC_KERN_IMPL_H
#define DC_KERN_IMPL_H

#include "kernels/kern.h"

typedef struct dc_kern_ops {
    const char *name;
    size_t (*count_changed)(const void *a, const void *b, size_t n, unsigned w);
    size_t (*diff)(const void *a, const void *b, size_t n, unsigned w, uint32_t *pos,
                   void *xorw, size_t cap);
    /* diff of n elements (n * w a multiple of 1024; positions from 0)
     * that also runs XXH3's long-input loop over both inputs: for each
     * 1024-byte block, the stripes accumulated into acc_a / acc_b (8
     * accumulators each, 64-byte aligned; either may be NULL) and the
     * scramble, as digest.h's span digest does.  NULL in tables without a
     * fused version. */
    size_t (*diff_acc)(const void *a, const void *b, size_t n, unsigned w, uint32_t *pos,
                       void *xorw, size_t cap, uint64_t *acc_a, uint64_t *acc_b);
    void (*gather)(const void *b, unsigned w, const uint32_t *pos, size_t count, void *vals);
    /* The lowest k with pos[k] >= n or (k > 0 and pos[k] <= pos[k-1]), or
     * count when all are valid (the CUDA validator reports the same k). */
    size_t (*validate)(const uint32_t *pos, size_t count, size_t n);
    /* Unchecked scatters (positions already validated). */
    void (*xor_scatter)(void *dst, unsigned w, const uint32_t *pos, const void *xorw,
                        size_t count);
    void (*put_scatter)(void *dst, unsigned w, const uint32_t *pos, const void *vals,
                        size_t count);
    void (*xor_dense)(void *dst, const void *src, size_t bytes);
    /* memcpy with non-temporal (streaming) stores: the destination's lines
     * are not read for ownership nor kept in cache.  The caller orders them
     * (dc_kern_nt_fence) before reading dst or handing it on.  NULL in
     * tables without one (plain memcpy). */
    void (*copy_nt)(void *dst, const void *src, size_t bytes);
    /* copy_nt that also runs XXH3's long-input loop (as diff_acc) over the
     * first hb bytes (whole 1024-byte blocks, hb <= bytes) into acc (8
     * accumulators, 64-byte aligned), and prefetches the first hb bytes at
     * pf (may be NULL) meanwhile.  NULL in tables without one. */
    void (*copy_nt_acc)(void *dst, const void *src, size_t bytes, uint64_t *acc, size_t hb,
                        const void *pf);
} dc_kern_ops_t;

extern const dc_kern_ops_t dc_kern_ops_scalar;
#if defined(__x86_64__)
extern const dc_kern_ops_t dc_kern_ops_avx2;
extern const dc_kern_ops_t dc_kern_ops_avx512;
#endif

/* Scalar helpers the vector tables reuse for tails and sparse slow paths. */
size_t dc_kern_scalar_diff_range(const void *a, const void *b, size_t begin, size_t end,
                                 unsigned w, uint32_t *pos, void *xorw, size_t cap,
                                 size_t k);
size_t dc_kern_scalar_count_range(const void *a, const void *b, size_t begin, size_t end,
                                  unsigned w);
size_t dc_kern_scalar_validate(const uint32_t *pos, size_t count, size_t n);
void dc_kern_scalar_xor_scatter(void *dst, unsigned w, const uint32_t *pos,
                                const void *xorw, size_t count);
void dc_kern_scalar_put_scatter(void *dst, unsigned w, const uint32_t *pos,
                                const void *vals, size_t count);
void dc_kern_scalar_gather(const void *b, unsigned w, const uint32_t *pos, size_t count,
                           void *vals);

/* CRC32C implementations, for tests and benchmarks (dc_crc32c picks one). */
uint32_t dc_crc32c_sw(uint32_t crc, const void *buf, size_t len);
#if defined(__x86_64__)
uint32_t dc_crc32c_sse42(uint32_t crc, const void *buf, size_t len);
/* AVX-512 + VPCLMULQDQ; only where dc_crc32c_vpclmul_ok() */
uint32_t dc_crc32c_vpclmul(uint32_t crc, const void *buf, size_t len);
int dc_crc32c_vpclmul_ok(void);
#endif
#if DC_HAVE_ISAL
uint32_t dc_crc32c_isal(uint32_t crc, const void *buf, size_t len);
#endif

#endif /* DC_KERN_IMPL_H */
