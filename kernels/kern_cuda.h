/*
 * kern_cuda.h - the host kernels of kern.h for device (CUDA) memory, C ABI.
 *
 * Built only when meson finds nvcc (DC_HAVE_CUDA); without it every
 * function below still links and returns DC_ERR_UNSUPPORTED (and
 * dc_kern_cuda_available() returns 0), so callers need no #ifdef.
 * Every call goes through the table of kern_cuda_ops.h, which tests
 * replace with an emulated runtime (tests/emu/).
 *
 * Every kernel produces exactly the bytes of its kern.h twin (the CPU code
 * is the reference; tests/kernels/test_kern_cuda.c compares them).  Data
 * pointers are device pointers; `stream` is a cudaStream_t (NULL: the
 * legacy default stream).  Functions that return a host value (a count, a
 * validation verdict, a digest) synchronize the stream; the others only
 * enqueue work and return (errors of the launch itself are reported;
 * asynchronous faults surface at the next synchronizing call).
 * Positions arrays must be 4-byte aligned; other buffers may have any
 * alignment (16-byte aligned ones take the fast vector path).
 */
#ifndef DC_KERN_CUDA_H
#define DC_KERN_CUDA_H

#include "kernels/kern.h"

/** 1 when the CUDA code is built in and a device is usable, else 0.
 *  Never crashes on a machine without a GPU or driver. */
int dc_kern_cuda_available(void);

/** Why dc_kern_cuda_available() is 0, in one line for an error message:
 *  the CUDA error, the runtime built in and what the driver supports
 *  (e.g. "CUDA driver version is insufficient for CUDA runtime version
 *  (cudaErrorInsufficientDriver): deltacast's CUDA runtime is 13.0, and no
 *  CUDA driver (libcuda.so.1) is installed"); "" when a device is usable.
 *  Per thread (the next call overwrites it). */
const char *dc_kern_cuda_why(void);

/** Device facts for reports and benchmarks (device = current device). */
typedef struct dc_kern_cuda_props {
    char name[256];
    int sm_count;
    int cc_major, cc_minor;
    size_t total_mem;
    /** Theoretical DRAM bandwidth in GB/s (1e9 B/s): 2 * memory clock *
     *  bus width / 8; 0 when the driver does not report it. */
    double mem_bw_gbs;
} dc_kern_cuda_props_t;
dc_status_t dc_kern_cuda_props(dc_kern_cuda_props_t *out);

/* --- thin memory helpers, so C callers need no cuda_runtime.h ----------- */
dc_status_t dc_kern_cuda_malloc(void **dptr, size_t bytes);
void dc_kern_cuda_free(void *dptr);
dc_status_t dc_kern_cuda_h2d(void *dst, const void *src, size_t bytes);
dc_status_t dc_kern_cuda_d2h(void *dst, const void *src, size_t bytes);
dc_status_t dc_kern_cuda_memset(void *dst, int byte, size_t bytes);
dc_status_t dc_kern_cuda_sync(void *stream);

/* --- kernels ------------------------------------------------------------ */

/** *count = number of elements of width w that differ (synchronizes). */
dc_status_t dc_kern_cuda_count_changed(const void *a, const void *b, size_t n, unsigned w,
                                       size_t *count, void *stream);

/**
 * As dc_kern_diff(): positions (increasing) and XOR words of the changed
 * elements, the first `cap` of them written; *count = total changed (may
 * exceed cap).  Unlike the CPU version nothing past the written entries is
 * touched.  n <= 2^32.  Synchronizes.  Three passes: per-tile counts, a scan
 * of the tile counts, an order-preserving compaction per tile.
 */
dc_status_t dc_kern_cuda_diff(const void *a, const void *b, size_t n, unsigned w,
                              uint32_t *pos, void *xorw, size_t cap, size_t *count,
                              void *stream);

/** vals[k] = b[pos[k]] (pos trusted).  Asynchronous. */
dc_status_t dc_kern_cuda_gather(const void *b, unsigned w, const uint32_t *pos, size_t count,
                                void *vals, void *stream);

/**
 * As dc_kern_xor_scatter() / dc_kern_put_scatter(): a validation kernel
 * first checks that pos is strictly increasing and < n (it records the
 * lowest bad index in a device flag); on failure DC_ERR_FORMAT with the same
 * message as the CPU and dst untouched.  Synchronizes (to read the flag).
 */
dc_status_t dc_kern_cuda_xor_scatter(void *dst, size_t n, unsigned w, const uint32_t *pos,
                                     const void *xorw, size_t count, void *stream);
dc_status_t dc_kern_cuda_put_scatter(void *dst, size_t n, unsigned w, const uint32_t *pos,
                                     const void *vals, size_t count, void *stream);

/** dst[i] ^= src[i] for `bytes` bytes.  Asynchronous. */
dc_status_t dc_kern_cuda_xor_dense(void *dst, const void *src, size_t bytes, void *stream);

/**
 * XXH3-128 of device memory, identical to dc_digest128() of the same bytes:
 * computed on the host from a pipelined copy-back through pinned staging
 * buffers (there is no device-side XXH3).  Synchronizes.  Costs PCIe
 * bandwidth, not GPU memory bandwidth.
 */
dc_status_t dc_kern_cuda_digest128(const void *buf, size_t len, dc_digest_t *out,
                                   void *stream);

/**
 * XXH3-128 of device memory computed on the device: identical to
 * dc_digest128() of the same bytes, only the 16-byte result crosses PCIe
 * (inputs of <= 240 bytes, XXH3's short paths, are copied back whole and
 * hashed on the host).  One 32-thread block per call: latency-bound on a
 * real GPU (a batch of chunks per launch is the next step).  Synchronizes.
 */
dc_status_t dc_kern_cuda_digest128_dev(const void *buf, size_t len, dc_digest_t *out,
                                       void *stream);

/**
 * CRC32C (Castagnoli) of `len` bytes of device memory at `buf` (any
 * alignment), chained like dc_crc32c(): *out = dc_crc32c(crc, buf, len) bit
 * for bit.  Computed on the GPU (per-block CRCs combined with the GF(2)
 * shift of crc32_combine).  Synchronizes the stream.
 */
dc_status_t dc_kern_cuda_crc32c(const void *buf, size_t len, uint32_t crc, uint32_t *out,
                                void *stream);

/**
 * Decode a values stream (entropy.h: `method` DC_ENT_RAW, DC_ENT_RANS or
 * DC_ENT_PLANES; `len` bytes at device address `src`) of `count` words of
 * `w` bytes into device memory at `out` (count * w bytes), on the device:
 * bit-identical to dc_ent_val_decode() and with its verdict (a corrupt
 * stream is DC_ERR_FORMAT naming what failed, never a fault; `out` is then
 * scratch).  32-way rANS streams are decoded one lane per state; the 1-,
 * 2- and 4-way layouts by one thread.  DC_ERR_UNSUPPORTED for DC_ENT_ZSTD
 * (no device decoder: decode on the host).  Synchronizes.
 */
dc_status_t dc_kern_cuda_values_decode(unsigned method, const void *src, size_t len,
                                       size_t count, unsigned w, void *out, void *stream);

/**
 * Decode a Golomb positions stream (entropy.h dc_ent_pos_decode: `len`
 * bytes at device address `src`, `count` positions in n elements) into
 * device memory at `pos`, on the device: bit-identical, with the CPU's
 * verdict (a corrupt stream is DC_ERR_FORMAT, never a fault; `pos` is
 * then scratch).  One thread (the codes are one chain).  Synchronizes.
 */
dc_status_t dc_kern_cuda_golomb_decode(const void *src, size_t len, size_t count, uint64_t n,
                                       uint32_t *pos, void *stream);

/* --- device sender (engine/devsend.c) ----------------------------------- */

/** Device-to-device copy of `bytes` bytes (nothing crosses PCIe). */
dc_status_t dc_kern_cuda_d2d(void *dst, const void *src, size_t bytes);

/**
 * The ctx model's sample of a chunk in device memory (kernels/ctx.h
 * dc_ctx_model_hist): hist[256] (host) gets the histogram of the magnitude
 * buckets of the sampled elements (the first 64 of every 4096 / 1024 / 64
 * elements, by n), bit-identical to what ctx.c counts on the CPU.  Only
 * the 1 KiB histogram crosses PCIe.  Synchronizes.
 */
dc_status_t dc_kern_cuda_ctx_sample(const void *base, size_t n, unsigned w, uint32_t *hist,
                                    void *stream);

/**
 * The ctx encoder's ranks on the device (kernels/ctx_scan.h rank): for
 * each of the count changes pos[k] (device, strictly increasing, < n) its
 * class cls[k] (device: how many of the nt thresholds thr[] (host, the
 * magnitudes) its base word's magnitude reaches) and its rank rnk[k]
 * (device: its index among the chunk's elements of its class); pop[nt + 1]
 * (host) the classes' populations.  Per-tile class counts, a scan per
 * class, then each thread ranks the changes among its own elements.
 * Synchronizes.
 */
dc_status_t dc_kern_cuda_ctx_rank(const void *base, size_t n, unsigned w, const uint64_t *thr,
                                  unsigned nt, const uint32_t *pos, size_t count, uint8_t *cls,
                                  uint32_t *rnk, uint64_t *pop, void *stream);

#endif /* DC_KERN_CUDA_H */
