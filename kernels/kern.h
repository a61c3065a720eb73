/*
 * kern.h - host-memory kernels: checksums, digests, diff, scatter-apply.
 *
 * The portable C versions are the reference; AVX2 / AVX-512 versions are
 * chosen once at run time (kern_isa.c; dc_kern_isa() names the pick).
 * The CUDA versions (kern_cuda.h) must produce the same bytes.
 *
 * Element widths are 1, 2, 4 or 8 bytes (dc_dtype_size()).  "Changed" is
 * bitwise: two NaNs with different payloads differ, -0.0 != +0.0.
 */
#ifndef DC_KERN_H
#define DC_KERN_H

#include "util/dc_util.h"

/* 1 in builds with -Dkern_emu=avx512 (kernels/meson.build): the avx512
 * kernels are emulated (kernels/emu/avx512_emu.h), for tests on CPUs
 * without AVX-512. */
#ifndef DC_KERN_EMU_AVX512
#define DC_KERN_EMU_AVX512 0
#endif

/** CRC32C (Castagnoli).  Chain with crc = dc_crc32c(crc, next, len);
 *  start from 0.  Hardware accelerated (AVX-512 VPCLMULQDQ folding, ISA-L or SSE4.2). */
uint32_t dc_crc32c(uint32_t crc, const void *buf, size_t len);

/** CRC32C of A || B from crc1 = dc_crc32c(0, A, |A|), crc2 =
 *  dc_crc32c(0, B, len2) and B's length alone (GF(2) shift by len2 bytes:
 *  about 40 carry-less 32-bit multiplies, no data read).  For many pieces
 *  of one length, take op = dc_crc32c_shift_op(len2) once and
 *  dc_crc32c_combine_op(crc1, crc2, op) per piece (one multiply). */
uint32_t dc_crc32c_combine(uint32_t crc1, uint32_t crc2, size_t len2);
uint32_t dc_crc32c_shift_op(size_t len2);
uint32_t dc_crc32c_combine_op(uint32_t crc1, uint32_t crc2, uint32_t op);

/** Which CRC32C code dc_crc32c() runs: "avx512-vpclmulqdq", "isa-l",
 *  "sse4.2" or "table". */
const char *dc_crc32c_impl(void);

/** 128-bit end-to-end digest (XXH3-128). */
typedef struct dc_digest {
    uint64_t lo, hi;
} dc_digest_t;
dc_digest_t dc_digest128(const void *buf, size_t len);
static inline int dc_digest_eq(dc_digest_t a, dc_digest_t b)
{
    return a.lo == b.lo && a.hi == b.hi;
}

/* {0, 0}: no digest (unknown, or not recorded) */
static inline int dc_digest_zero(dc_digest_t d)
{
    return d.lo == 0 && d.hi == 0;
}

/** Name of the instruction set the dispatcher chose: "avx512", "avx2",
 *  "scalar".  DELTACAST_KERN_ISA=scalar|avx2|avx512 forces a lower one
 *  (an unsupported one is ignored with a warning).  avx512 needs
 *  AVX-512 F/BW/VL/VBMI2; avx2 needs AVX2/BMI2/POPCNT. */
const char *dc_kern_isa(void);

/** 1 when `isa` ("scalar", "avx2", "avx512") is built in and this CPU runs
 *  it, else 0. */
int dc_kern_isa_supported(const char *isa);

/** Switch every later kernel call (all threads) to `isa`; for tests and
 *  benchmarks.  DC_ERR_INVALID for an unknown name, DC_ERR_UNSUPPORTED when
 *  the CPU lacks it (the choice is then unchanged). */
dc_status_t dc_kern_set_isa(const char *isa);

/** Number of elements of width `w` that differ between a and b. */
size_t dc_kern_count_changed(const void *a, const void *b, size_t n, unsigned w);

/**
 * Find changed elements: for every i < n with a[i] != b[i] (bitwise), in
 * increasing i, write pos[k] = i and xorw[k] = a[i] ^ b[i] (w bytes each,
 * packed), for k < cap.  Returns the total number of changed elements (which
 * may exceed cap: then only the first cap were written and the caller
 * should choose a dense encoding).  n must be <= 2^32.  Entries of pos and
 * xorw between the returned count and cap may be overwritten (scratch); no
 * byte at or beyond cap is touched.
 */
size_t dc_kern_diff(const void *a, const void *b, size_t n, unsigned w, uint32_t *pos,
                    void *xorw, size_t cap);

/**
 * Gather new values at positions: vals[k] = b[pos[k]].  pos is trusted
 * (came from dc_kern_diff).
 */
void dc_kern_gather(const void *b, unsigned w, const uint32_t *pos, size_t count, void *vals);

/**
 * Scatter-apply, with positions from hostile input: checks that pos is
 * strictly increasing and < n before touching dst; DC_ERR_FORMAT otherwise
 * (dst untouched; the detail names the lowest bad index k, the one with
 * pos[k] >= n or pos[k] <= pos[k-1]).
 *   xor:  dst[pos[k]] ^= xorw[k]
 *   put:  dst[pos[k]]  = vals[k]
 */
dc_status_t dc_kern_xor_scatter(void *dst, size_t n, unsigned w, const uint32_t *pos,
                                const void *xorw, size_t count);
dc_status_t dc_kern_put_scatter(void *dst, size_t n, unsigned w, const uint32_t *pos,
                                const void *vals, size_t count);

/** dst[i] ^= src[i] for `bytes` bytes. */
void dc_kern_xor_dense(void *dst, const void *src, size_t bytes);

/**
 * dc_kern_diff plus the digests of a and b (XXH3-128, as dc_digest128), in
 * one pass: with avx512 the diff's own loads feed XXH3's block loop (only
 * the last partial block is hashed afterwards); otherwise the chunk is
 * walked in cache-sized blocks, each block diffed and then hashed while it
 * is in cache.  a_dg / b_dg may be NULL.
 */
size_t dc_kern_diff_digest(const void *a, const void *b, size_t n, unsigned w, uint32_t *pos,
                           void *xorw, size_t cap, dc_digest_t *a_dg, dc_digest_t *b_dg);

/** Edits for dc_kern_patch_digest. */
enum {
    DC_PATCH_COPY = 0,      /* dst = src */
    DC_PATCH_XOR = 1,       /* dst = src; dst[pos[k]] ^= vals[k] */
    DC_PATCH_PUT = 2,       /* dst = src; dst[pos[k]]  = vals[k] */
    DC_PATCH_XOR_DENSE = 3, /* dst = src ^ vals (n words) */
    DC_PATCH_PUT_DENSE = 4, /* dst = vals (n words); src only hashed */
};

/**
 * Build a chunk of n elements of w bytes in dst from the baseline src and
 * an edit, and return the digests of src (*src_dg, when src_dg and src are
 * not NULL) and of the result (*dst_dg, when not NULL), in one pass over
 * the data (cache-sized blocks: copy, edit and hash each block while it is
 * in cache).  src == dst edits in place (src_dg is then the digest before
 * the edit).  To another buffer, each block is built in an L1 bounce
 * buffer and written to dst with streaming stores (dst's lines are neither
 * read nor left in cache).  src may be NULL only for DC_PATCH_PUT_DENSE.  pos/count/vals
 * are used by the sparse edits, vals by the dense ones.  Positions come
 * from hostile input: they are validated first (strictly increasing, < n)
 * and DC_ERR_FORMAT leaves dst untouched, as dc_kern_xor_scatter.
 */
dc_status_t dc_kern_patch_digest(void *dst, const void *src, size_t n, unsigned w,
                                 unsigned op, const uint32_t *pos, const void *vals,
                                 size_t count, dc_digest_t *src_dg, dc_digest_t *dst_dg);

/**
 * Run fn(arg, t) for every task t in [0, n_tasks) on `threads` threads
 * (0: one per online CPU; never more than n_tasks), the calling thread
 * included; returns when all are done.  Tasks are claimed in increasing t.
 * When a task fails, tasks not yet started are skipped; the result is the
 * status of the lowest-numbered failing task, with its dc_last_error()
 * detail re-recorded on the calling thread.  Threads are created per call
 * (tens of microseconds): give each task a few MiB of work.  fn must be
 * thread-safe.
 */
typedef dc_status_t (*dc_kern_task_fn)(void *arg, size_t task);
dc_status_t dc_kern_parallel_for(size_t n_tasks, dc_kern_task_fn fn, void *arg,
                                 unsigned threads);

#endif /* DC_KERN_H */
