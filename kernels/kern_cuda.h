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
 * hashed on the host).  Two passes: every 1 KiB block's stripe sums at
 * once, then one chain of scrambles through the blocks (a few integer
 * operations per KiB: latency-bound, perf/gpu_bench measures it;
 * dc_kern_cuda_digest128_dev_pieces runs many chains at once).
 * Synchronizes.
 */
dc_status_t dc_kern_cuda_digest128_dev(const void *buf, size_t len, dc_digest_t *out,
                                       void *stream);

/**
 * XXH3-128 of each `piece`-byte piece of device memory buf[0, len) (the
 * last one shorter when len is not a multiple of piece): outs[q] =
 * dc_digest128() of piece q, for the (len + piece - 1) / piece pieces (one
 * result for len 0).  One launch for all of them: the pieces' chains run
 * side by side (a version's chunks of one tensor at once).  Synchronizes.
 */
dc_status_t dc_kern_cuda_digest128_dev_pieces(const void *buf, size_t len, size_t piece,
                                              dc_digest_t *outs, void *stream);

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

/**
 * dc_kern_cuda_golomb_decode of `streams` independent streams (<= 8: a ctx
 * chunk's classes) in one launch, one thread each: stream j (src[j],
 * len[j] bytes, count[j] positions in n) into pos[j].  DC_ERR_FORMAT when
 * any is refused (naming the first), as the CPU's decoder would refuse it.
 * Synchronizes.
 */
#define DC_KERN_CUDA_GOLOMB_MAX_STREAMS 8
dc_status_t dc_kern_cuda_golomb_decode_multi(unsigned streams, const void *const *src,
                                             const size_t *len, const size_t *count, uint64_t n,
                                             uint32_t *const *pos, void *stream);

/**
 * The positions of a rANS gaps stream (entropy.h DC_ENT_GAPS) on the
 * device, from its parts: q (device, count 16-bit quotients, decoded by
 * dc_kern_cuda_values_decode as DC_ENT_RANS words of 2 bytes), lo (device,
 * lo_len bytes: the gaps' b low bits), the header's b and E, and the
 * escapes parsed on the host: escpre (device, nesc + 1 prefix sums of the
 * escape varints), esc_total = escpre[nesc].  A gap past the chunk, or
 * escape quotients not matching nesc, is DC_ERR_FORMAT (the CPU's
 * verdict); pos (device) is then scratch.  n <= 2^31.  Synchronizes.
 */
dc_status_t dc_kern_cuda_gaps_positions(const uint16_t *q, const void *lo, size_t lo_len,
                                        unsigned b, unsigned E, const uint64_t *escpre,
                                        size_t nesc, uint64_t esc_total, size_t count, uint64_t n,
                                        uint32_t *pos, void *stream);

/* --- ctx-sparse (kernels/ctx.h) on the device --------------------------- */

#define DC_KERN_CUDA_CTX_MAX_CLASSES 8

/** A ctx-sparse payload's model, from its header (kern_cuda_ctx.c parses
 *  it on the host: it is a few bytes). */
typedef struct dc_kern_cuda_ctx_spec {
    unsigned K;    /* classes, 1..8 */
    unsigned mode; /* values: 0 XOR words, 1 steps, 2 new words */
    uint64_t thrm[DC_KERN_CUDA_CTX_MAX_CLASSES]; /* the K - 1 threshold magnitudes */
    size_t off[DC_KERN_CUDA_CTX_MAX_CLASSES + 1]; /* class c's ranks: [off[c], off[c+1]) */
} dc_kern_cuda_ctx_spec_t;

/**
 * The merge and patch of dc_ctx_decode_patch on the device: `chunk` (n
 * elements of w bytes, device memory) is the baseline; `ranks` (device,
 * off[K] of them, grouped by class as spec->off says, each class's
 * increasing) the decoded class streams; `words` (device, off[K] words of
 * w bytes, in element order) the decoded values stream.  Classes are
 * counted per tile of the base, scanned per class, every rank checked
 * against its class's population (past it: DC_ERR_FORMAT, the CPU's
 * verdict, nothing written) and mapped to its element; then per change its
 * index in element order, its XOR word (from the step / new word and the
 * base word) into pos_out / xor_out (device, may be NULL) at that index,
 * and, when apply, the chunk patched in place.  Synchronizes.
 */
dc_status_t dc_kern_cuda_ctx_apply(void *chunk, size_t n, unsigned w,
                                   const dc_kern_cuda_ctx_spec_t *spec, const uint32_t *ranks,
                                   const void *words, uint32_t *pos_out, void *xor_out, int apply,
                                   void *stream);

/** A ctx-sparse payload's header, parsed and checked on the host as
 *  dc_ctx_decode does (same refusals, DC_ERR_FORMAT), and where its
 *  streams lie. */
typedef struct dc_kern_cuda_ctx_hdr {
    dc_kern_cuda_ctx_spec_t spec;
    unsigned gmask;                                /* classes with rANS gaps positions */
    size_t pofs[DC_KERN_CUDA_CTX_MAX_CLASSES];     /* class streams in the payload */
    size_t plen[DC_KERN_CUDA_CTX_MAX_CLASSES];
    size_t vofs, vlen;                             /* the values stream */
    size_t total;                                  /* changes */
} dc_kern_cuda_ctx_hdr_t;
dc_status_t dc_kern_cuda_ctx_parse(const uint8_t *payload, size_t len, size_t n, unsigned w,
                                   dc_kern_cuda_ctx_hdr_t *h);

/** Device and host scratch of the ctx decoder for chunks of up to
 *  max_bytes (device scratch grows on use). */
typedef struct dc_kern_cuda_ctx dc_kern_cuda_ctx_t;
dc_status_t dc_kern_cuda_ctx_create(size_t max_bytes, dc_kern_cuda_ctx_t **out);
void dc_kern_cuda_ctx_free(dc_kern_cuda_ctx_t *x);

/**
 * A rANS gaps positions stream (entropy.h DC_ENT_GAPS; src, len bytes in
 * host memory; count positions in n <= 2^31 elements) decoded on the
 * device into dpos (device memory), bit-identical to dc_ent_gaps_decode
 * with its verdicts: the header and the escape varints (rare) are parsed
 * on the host, the quotients' rANS stream and the low bits cross as they
 * are (*sent += the bytes sent), the quotients are decoded by
 * dc_kern_cuda_values_decode, the positions by dc_kern_cuda_gaps_positions.
 */
dc_status_t dc_kern_cuda_gaps_decode(dc_kern_cuda_ctx_t *x, const uint8_t *src, size_t len,
                                     size_t count, uint64_t n, uint32_t *dpos, uint64_t *sent);

/** What one dc_kern_cuda_ctx_run() sent to the device and where it decoded. */
typedef struct dc_kern_cuda_ctx_info {
    uint64_t h2d_bytes;      /* payload streams and host-decoded lists sent */
    unsigned host_classes;   /* classes whose (gaps) ranks were decoded on the host
                                (chunks of more than 2^31 elements) */
    unsigned dev_classes;    /* classes whose ranks were decoded on the device */
    unsigned dev_gaps_classes; /* ... of them rANS gaps classes */
    int host_values;         /* values decoded on the host (zstd) */
} dc_kern_cuda_ctx_info_t;

/**
 * Decode and apply a parsed ctx-sparse payload (h, `payload` in host
 * memory, values method vm) against `chunk` (device memory, n x w): the
 * Golomb class streams and the values stream cross as they are and are
 * decoded on the device (dc_kern_cuda_golomb_decode_multi: a thread each,
 * dc_kern_cuda_values_decode); a rANS gaps class's quotient stream and low
 * bits cross as they are, its header and escapes are parsed on the host
 * and its positions made on the device (dc_kern_cuda_gaps_positions); zstd
 * values are decoded on the host and their words cross; then
 * dc_kern_cuda_ctx_apply (apply = 0: only pos_out / xor_out).  The chunk
 * is written only after every stream and rank was accepted: on
 * DC_ERR_FORMAT (the CPU's verdict) it is untouched.  pos_out / xor_out:
 * device buffers of h->total entries, or NULL.
 */
dc_status_t dc_kern_cuda_ctx_run(dc_kern_cuda_ctx_t *x, const dc_kern_cuda_ctx_hdr_t *h,
                                 unsigned vm, const uint8_t *payload, void *chunk, size_t n,
                                 unsigned w, int apply, uint32_t *pos_out, void *xor_out,
                                 dc_kern_cuda_ctx_info_t *info);

/* --- device sender (engine/devsend.c) ----------------------------------- */

/** Device-to-device copy of `bytes` bytes (nothing crosses PCIe). */
dc_status_t dc_kern_cuda_d2d(void *dst, const void *src, size_t bytes);

/**
 * The ctx model's sample of a chunk in device memory (kernels/ctx.h
 * dc_ctx_model_hist): hist[256] (host) gets the histogram of the magnitude
 * buckets of the sampled elements (the first 64 of every 4096 / 1024 / 64
 * elements, by n), bit-identical to what ctx.c counts on the CPU.  Only
 * the histogram crosses PCIe, packed as varints when smaller than its
 * 1 KiB (most counters are 0); *d2h the bytes that crossed.
 * Synchronizes.
 */
dc_status_t dc_kern_cuda_ctx_sample(const void *base, size_t n, unsigned w, uint32_t *hist,
                                    size_t *d2h, void *stream);

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

/**
 * Pack the count ranks rnk[k] (device) of classes cls[k] (device, < K;
 * NULL: one class, K = 1) as kernels/listpack.h says, byte-identical to
 * dc_listpack(), into out (device, 4-byte aligned, dc_listpack_bound(count)
 * bytes): their gaps as byte varints, or as nibble varints when those are
 * fewer bytes (*nibbles = 1: dense changes, small gaps); *len (host) the
 * packed bytes and ccnt[0..K) (host) the changes per class.  The changes
 * are grouped by class on the device (a count per class and tile, a scan
 * per class, a placement), their gaps taken, then both varints' lengths
 * are scanned and the smaller written.  Synchronizes.
 */
dc_status_t dc_kern_cuda_pack_ranks(const uint8_t *cls, const uint32_t *rnk, size_t count,
                                    unsigned K, uint8_t *out, size_t *len, int *nibbles,
                                    uint64_t *ccnt, void *stream);

/**
 * A device sender's ctx values (kernels/codec.h dc_codec_vals_t): from the
 * count base words bw and XOR words xorv (device, w bytes each) the step
 * words (ctx.h values mode 1) into steps and the new words (mode 2) into
 * neww (device), each base word's magnitude bucket (ctx.h
 * dc_ctx_model_hist) into bkt (device, count bytes) and, when bhist is not
 * NULL, their histogram into bhist[256] (host; packed across PCIe as
 * dc_kern_cuda_ctx_sample's); *d2h the bytes that crossed.  Synchronizes.
 */
dc_status_t dc_kern_cuda_ctx_values(const void *bw, const void *xorv, size_t count, unsigned w,
                                    void *steps, void *neww, uint8_t *bkt, uint32_t *bhist,
                                    size_t *d2h, void *stream);

/**
 * The order-0 histogram of count words of w (1 or 2) bytes (device): each
 * distinct word's count, in the order the words first appear (the order
 * dc_ent_words_entropy_bits sums its terms in, so that
 * dc_ent_counts_entropy_bits of these counts is bit-identical to it), as
 * LEB128 varints of count - 1 into out (device, 5 x count bytes), *len
 * (host) their bytes (kernels/listpack.h dc_listunpack_counts reads them).
 * A count and the first index per symbol (atomics), the counts placed at
 * those indices, then kept in index order (a scan of their bytes).
 * Synchronizes.
 */
dc_status_t dc_kern_cuda_word_hist(const void *words, size_t count, unsigned w, uint8_t *out,
                                   size_t *len, void *stream);

/**
 * Pack count words of w (1, 2 or 4) bytes (device) as varints of their
 * values into out (device, 4-byte aligned, dc_listpack_bound(count)
 * bytes): byte varints (LEB128), or nibble varints when those are fewer
 * bytes (*nibbles = 1); *len (host) the bytes (kernels/listpack.h
 * dc_listpack_words is the CPU reference, dc_listunpack_words reads
 * them).  A device sender's step and XOR words are mostly small integers:
 * half a byte to a byte each across PCIe.  Sizes of both per tile, their
 * scans, then the writes (the nibbles ORed into words).  Synchronizes.
 */
dc_status_t dc_kern_cuda_pack_words(const void *words, size_t count, unsigned w, uint8_t *out,
                                    size_t *len, int *nibbles, void *stream);

/**
 * A device sender's positions in the payload's own form: the count ranks
 * rnk of classes cls (device; cls NULL: one class, K 1, rnk the increasing
 * positions) grouped by class, and each class's Golomb positions stream,
 * byte for byte what entropy.h dc_ent_pos_encode writes for its ranks
 * (m from dc_ent_pos_param, taken on the host from each class's count and
 * last rank), into out (device, 4-byte aligned, cap bytes), class 0's
 * first: clen[c] bytes (0 for an empty class), ccnt[c] its ranks.  About
 * the payload's positions bytes cross PCIe after (a byte a change as
 * varints, kern_cuda_pack_ranks); *d2h the bytes read back on the way (the
 * counts, the last ranks, the lengths).  DC_ERR_BUSY: the streams exceed
 * cap.  Synchronizes.
 */
dc_status_t dc_kern_cuda_golomb_ranks(const uint8_t *cls, const uint32_t *rnk, size_t count,
                                      unsigned K, uint8_t *out, size_t cap, size_t *clen,
                                      uint64_t *ccnt, size_t *d2h, void *stream);

/**
 * A stream of its own for a caller's work (cudaStreamNonBlocking: not
 * ordered with the default stream's, so that the work of several callers
 * overlaps on the device: each encoder thread of a device sender, its
 * baseline stream's copies beside another's diff and packing).  Every op
 * that takes `stream` runs there and waits for it before it returns; the
 * ops without one (dc_kern_cuda_h2d, d2h, memset, d2d) run on the default
 * stream and wait for it too.  NULL *stream with the error set when there
 * is no device.
 */
dc_status_t dc_kern_cuda_stream_create(void **stream);
void dc_kern_cuda_stream_destroy(void *stream);
/** The directions of dc_kern_cuda_copy. */
enum { DC_KCU_H2D = 1, DC_KCU_D2H = 2, DC_KCU_D2D = 3 };
/** bytes from src to dst in direction dir (DC_KCU_*) on stream, waited
 *  for; counted as dc_kern_cuda_h2d / d2h count theirs
 *  (dc_kern_cuda_pcie). */
dc_status_t dc_kern_cuda_copy(void *dst, const void *src, size_t bytes, int dir, void *stream);

/**
 * dc_kern_cuda_word_hist's symbols: the distinct words of the count words
 * of w <= 2 bytes at `words` (device) in the order they first appear (the
 * order of that histogram's counts), as LEB128 varints into out (device,
 * at most count * 3 + 8 bytes), *len bytes.  Synchronizes.
 */
dc_status_t dc_kern_cuda_word_syms(const void *words, size_t count, unsigned w, uint8_t *out,
                                   size_t *len, void *stream);

/**
 * A device sender's rANS values: what entropy.h's coder writes after the
 * table dc_ent_rans_table made (qs: nsym entries symbol | (frequency - 1)
 * << 16, host memory, increasing symbols; scale S; ways 1, 2, 4 or 32) for
 * the count words of w <= 2 bytes at `words` (device): the ways final
 * states then the renormalization output, into out (device, cap bytes),
 * *len bytes, byte for byte the CPU's.  *h2d: the table's bytes sent
 * (counted as dc_kern_cuda_h2d's).  DC_ERR_BUSY: past cap;
 * DC_ERR_INVALID: a table whose symbols do not increase or do not fit w
 * bytes, or whose frequencies do not sum to 2^S (checked on the host, before
 * any device work), or a word whose symbol qs lacks (out's bytes undefined,
 * no read or write past the buffers).  Synchronizes.
 */
dc_status_t dc_kern_cuda_rans_encode(const void *words, size_t count, unsigned w,
                                     const uint32_t *qs, size_t nsym, unsigned S, unsigned ways,
                                     uint8_t *out, size_t cap, size_t *len, size_t *h2d,
                                     void *stream);

/**
 * Page-lock host memory [p, p + bytes) (cudaHostRegister) so that copies
 * from it to the device run at the link's speed by DMA instead of through
 * the driver's pageable staging; dc_kern_cuda_host_unregister(p) before it
 * is freed.  An error (no device, too much memory to lock) leaves it
 * pageable: copies still work, slower.
 */
dc_status_t dc_kern_cuda_host_register(void *p, size_t bytes);
void dc_kern_cuda_host_unregister(void *p);

#endif /* DC_KERN_CUDA_H */
