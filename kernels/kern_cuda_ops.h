/*
 * kern_cuda_ops.h - the table behind kern_cuda.h (library-internal).
 *
 * Every dc_kern_cuda_*() call of kern_cuda.h goes through one table of
 * function pointers (kern_cuda_ops.c).  The default table is the build's:
 * kern_cuda.cu on the CUDA runtime when nvcc was found, else
 * kern_cuda_none.c (everything DC_ERR_UNSUPPORTED).  Tests install another
 * one: the emulated runtime of tests/emu/ (the same kern_cuda.cu compiled
 * for the CPU, "device memory" an arena the host must never touch), so the
 * engine's device paths run in CI without a GPU.  Not public API: the
 * symbols are hidden in the shared library; tests link the static one.
 */
#ifndef DC_KERN_CUDA_OPS_H
#define DC_KERN_CUDA_OPS_H

#include "kernels/kern_cuda.h"

#include <pthread.h>

typedef struct dc_kern_cuda_ops {
    const char *name; /* "cuda", "none", "emulated" */
    int (*available)(void);
    const char *(*why)(void);
    dc_status_t (*props)(dc_kern_cuda_props_t *out);
    dc_status_t (*malloc_)(void **dptr, size_t bytes);
    void (*free_)(void *dptr);
    dc_status_t (*h2d)(void *dst, const void *src, size_t bytes);
    dc_status_t (*d2h)(void *dst, const void *src, size_t bytes);
    dc_status_t (*memset_)(void *dst, int byte, size_t bytes);
    dc_status_t (*sync)(void *stream);
    dc_status_t (*count_changed)(const void *a, const void *b, size_t n, unsigned w, size_t *count,
                                 void *stream);
    dc_status_t (*diff)(const void *a, const void *b, size_t n, unsigned w, uint32_t *pos,
                        void *xorw, size_t cap, size_t *count, void *stream);
    dc_status_t (*gather)(const void *b, unsigned w, const uint32_t *pos, size_t count, void *vals,
                          void *stream);
    dc_status_t (*xor_scatter)(void *dst, size_t n, unsigned w, const uint32_t *pos,
                               const void *xorw, size_t count, void *stream);
    dc_status_t (*put_scatter)(void *dst, size_t n, unsigned w, const uint32_t *pos,
                               const void *vals, size_t count, void *stream);
    dc_status_t (*xor_dense)(void *dst, const void *src, size_t bytes, void *stream);
    dc_status_t (*digest128)(const void *buf, size_t len, dc_digest_t *out, void *stream);
    dc_status_t (*digest128_dev)(const void *buf, size_t len, dc_digest_t *out, void *stream);
    dc_status_t (*crc32c)(const void *buf, size_t len, uint32_t crc, uint32_t *out, void *stream);
    dc_status_t (*values_decode)(unsigned method, const void *src, size_t len, size_t count,
                                 unsigned w, void *out, void *stream);
    dc_status_t (*golomb_decode)(const void *src, size_t len, size_t count, uint64_t n,
                                 uint32_t *pos, void *stream);
    dc_status_t (*ctx_apply)(void *chunk, size_t n, unsigned w,
                             const dc_kern_cuda_ctx_spec_t *spec, const uint32_t *ranks,
                             const void *words, uint32_t *pos_out, void *xor_out, int apply,
                             void *stream);
    dc_status_t (*gaps_positions)(const uint16_t *q, const void *lo, size_t lo_len, unsigned b,
                                  unsigned E, const uint64_t *escpre, size_t nesc,
                                  uint64_t esc_total, size_t count, uint64_t n, uint32_t *pos,
                                  void *stream);
    dc_status_t (*golomb_decode_multi)(unsigned streams, const void *const *src,
                                       const size_t *len, const size_t *count, uint64_t n,
                                       uint32_t *const *pos, void *stream);
    /* device sender (engine/devsend.c) */
    dc_status_t (*d2d)(void *dst, const void *src, size_t bytes);
    dc_status_t (*ctx_sample)(const void *base, size_t n, unsigned w, uint32_t *hist,
                              size_t *d2h, void *stream);
    dc_status_t (*ctx_rank)(const void *base, size_t n, unsigned w, const uint64_t *thr,
                            unsigned nt, const uint32_t *pos, size_t count, uint8_t *cls,
                            uint32_t *rnk, uint64_t *pop, void *stream);
    /* batched device digests */
    dc_status_t (*digest128_dev_pieces)(const void *buf, size_t len, size_t piece,
                                        dc_digest_t *outs, void *stream);
    /* pinned host memory (a device sender's host baseline) */
    dc_status_t (*host_register)(void *p, size_t bytes);
    void (*host_unregister)(void *p);
    /* packed rank lists (a device sender's, kernels/listpack.h) */
    dc_status_t (*pack_ranks)(const uint8_t *cls, const uint32_t *rnk, size_t count, unsigned K,
                              uint8_t *out, size_t *len, int *nibbles, uint64_t *ccnt,
                              void *stream);
    /* ctx values on demand (a device sender's, kernels/codec.h dc_codec_vals_t) */
    dc_status_t (*ctx_values)(const void *bw, const void *xorv, size_t count, unsigned w,
                              void *steps, void *neww, uint8_t *bkt, uint32_t *bhist,
                              size_t *d2h, void *stream);
    dc_status_t (*word_hist)(const void *words, size_t count, unsigned w, uint8_t *out,
                             size_t *len, void *stream);
    dc_status_t (*pack_words)(const void *words, size_t count, unsigned w, uint8_t *out,
                              size_t *len, int *nibbles, void *stream);
    /* Golomb positions (a device sender's) */
    dc_status_t (*golomb_ranks)(const uint8_t *cls, const uint32_t *rnk, size_t count,
                                unsigned K, uint8_t *out, size_t cap, size_t *clen,
                                uint64_t *ccnt, size_t *d2h, void *stream);
    /* streams */
    dc_status_t (*stream_create)(void **stream);
    void (*stream_destroy)(void *stream);
    dc_status_t (*copy)(void *dst, const void *src, size_t bytes, int dir, void *stream);
    /* rANS values (a device sender's) */
    dc_status_t (*word_syms)(const void *words, size_t count, unsigned w, uint8_t *out,
                             size_t *len, void *stream);
    dc_status_t (*rans_encode)(const void *words, size_t count, unsigned w, const uint32_t *qs,
                               size_t nsym, unsigned S, unsigned ways, uint8_t *out, size_t cap,
                               size_t *len, size_t *h2d, void *stream);
} dc_kern_cuda_ops_t;

/** The build's own table (kern_cuda.cu or kern_cuda_none.c). */
extern const dc_kern_cuda_ops_t dc_kern_cuda_build_ops;

/** Install `ops` for every later dc_kern_cuda_*() call of the process
 *  (NULL: back to the build's).  Call before any device memory exists and
 *  not while other threads use kern_cuda.h.  Returns the previous table. */
const dc_kern_cuda_ops_t *dc_kern_cuda_set_ops(const dc_kern_cuda_ops_t *ops);

/** The table in use ("cuda", "none" or "emulated" in its name). */
const dc_kern_cuda_ops_t *dc_kern_cuda_ops(void);

/** Bytes moved by dc_kern_cuda_h2d() / dc_kern_cuda_d2h() since the
 *  process started (the engine's transfers across PCIe; the kernels' own
 *  result copies of a few bytes are not counted), in all and for the
 *  copies thread `th` made (0 when it made none; 64 threads at most are
 *  told apart).  For tests and perf/gpu-check.sh. */
void dc_kern_cuda_pcie(uint64_t *h2d, uint64_t *d2h);
int dc_kern_cuda_pcie_of(pthread_t th, uint64_t *h2d, uint64_t *d2h);

#endif /* DC_KERN_CUDA_OPS_H */
