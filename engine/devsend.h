/*
 * devsend.h - a sender whose next version is in device (CUDA) memory diffs
 * and models the chunk on the device (engine-internal; engine/devsend.c).
 *
 * Today's staging path copies every chunk of the new version whole to the
 * host (dc_place_read) and runs the CPU codec.  Here, per chunk:
 *
 *   on the device   the baseline chunk (device memory, or streamed from
 *                   the host: the "baseline stream", chunk bytes H2D),
 *                   dc_kern_cuda_diff (positions + XOR words, at most n/4),
 *                   dc_kern_cuda_digest128_dev (the target digest, 16
 *                   bytes back), dc_kern_cuda_gather (the base words at the
 *                   changed positions), and for the ctx model the sample
 *                   histogram (dc_kern_cuda_ctx_sample, packed back) and,
 *                   once the host has picked the classes, each change's
 *                   class and rank (dc_kern_cuda_ctx_rank);
 *   across PCIe     never the chunk; the lists, packed on the device:
 *                   for the ctx model each class's positions in the
 *                   payload's own form, the Golomb stream of its ranks
 *                   (of the positions with one class), made on the device
 *                   byte for byte as the CPU encoder writes it
 *                   (dc_kern_cuda_golomb_ranks: about 5-6 bits a change
 *                   at 1% changed, where rank and class unpacked are 5
 *                   bytes); the positions, for the order0 model or a
 *                   caller that asks (with classes), as varint gaps
 *                   (kernels/listpack.h, dc_kern_cuda_pack_ranks: half a
 *                   byte to a byte a change instead of 4); for the ctx
 *                   model's 1- and 2-byte words the values on demand (codec.h
 *                   dc_codec_vals_t): the base words' bucket histogram,
 *                   the XOR and step words' histograms
 *                   (dc_kern_cuda_ctx_values, dc_kern_cuda_word_hist:
 *                   varint counts, from which the host computes the
 *                   entropies the CPU coder picks the values mode by),
 *                   then the chosen mode's values: where the CPU coder
 *                   would keep their rANS stream (at most a quarter of the
 *                   words), the stream itself, coded on the device with
 *                   the table the host made from the histogram
 *                   (dc_kern_cuda_word_syms, entropy.h dc_ent_rans_table,
 *                   dc_kern_cuda_rans_encode: the symbols' frequencies
 *                   H2D, 4 B each), else the words; otherwise the XOR and
 *                   base words.  XOR, step and new words go as byte or
 *                   nibble varints when smaller (dc_kern_cuda_pack_words:
 *                   small integers, half a byte to a byte each);
 *   on the host     dc_codec_encode_lists: the entropy coding (the
 *                   positions streams as they came, but where a class
 *                   tries the rANS gaps coder: its ranks decoded from the
 *                   stream), a payload byte-identical to
 *                   dc_codec_encode_digest()'s.
 *
 * A chunk the lists cannot carry (more than n/4 changed: the dense kinds
 * need the whole chunk; a sparse payload larger than the chunk) or for
 * which they are not smaller than the chunk (w = 1 from about 9% changed)
 * is DC_ERR_UNSUPPORTED: the caller stages it (engine/encoder.c, logged).
 */
#ifndef DC_ENGINE_DEVSEND_H
#define DC_ENGINE_DEVSEND_H

#include "kernels/codec.h"

typedef struct dc_devsend dc_devsend_t;

/** Scratch (device and host) for chunks of up to max_bytes; base_stream:
 *  also a device buffer for a baseline streamed from the host. */
dc_status_t dc_devsend_create(size_t max_bytes, int base_stream, dc_devsend_t **out);
void dc_devsend_free(dc_devsend_t *d);

/**
 * Encode the chunk turning the baseline (base_dev in device memory, or,
 * base_dev NULL, base_host in host memory, streamed to the device) into
 * next_dev (device memory; n elements of w bytes) with `codec`'s model
 * and layout: the payload into dst (cap >= dc_codec_payload_bound(n * w)),
 * *len, *enc, and the target digest *next_dg (as dc_digest128).
 * DC_ERR_UNSUPPORTED (the reason in the error text): stage this chunk.
 * After DC_OK the change lists stay readable (dc_devsend_lists) until the
 * next call.
 */
dc_status_t dc_devsend_encode(dc_devsend_t *d, dc_codec_t *codec, const void *base_dev,
                              const void *base_host, const void *next_dev, size_t n, unsigned w,
                              uint8_t *dst, size_t cap, size_t *len, uint16_t *enc,
                              dc_digest_t *next_dg);

/** A device buffer of max_bytes (allocated on the first call; NULL with
 *  the error set when that fails) for a chunk that spans placement
 *  segments, gathered device to device (layout.h dc_place_read_dev). */
uint8_t *dc_devsend_gather_buf(dc_devsend_t *d);

/** Bytes of the lists for count changes of w bytes unpacked (ctx: the
 *  ctx model's classes and ranks too): what must be smaller than the
 *  chunk for the device to encode it (what crosses, packed, is about
 *  1.05x the payload on real BF16 optimizer steps:
 *  perf/devsend-bench.sh). */
size_t dc_devsend_list_bytes(size_t count, unsigned w, int ctx);

/** Whether the caller reads the positions and XOR words after each
 *  encode (default no: the ctx model's codec needs only the positions
 *  streams and the chosen values, and the positions and XOR words stay on
 *  the device). */
void dc_devsend_want_lists(dc_devsend_t *d, int want);

/** The last encode's changes on the host: positions and XOR words (what
 *  a host baseline needs to become the target: engine/shard.c).  Each is
 *  NULL unless dc_devsend_want_lists() asked for them or the codec used
 *  them. */
void dc_devsend_lists(const dc_devsend_t *d, const uint32_t **pos, const uint8_t **xorv,
                      size_t *count);

/** PCIe bytes of this context's calls (the engine's copies: lists, the
 *  baseline stream; not the kernels' few result bytes). */
void dc_devsend_pcie(const dc_devsend_t *d, uint64_t *h2d, uint64_t *d2h);

#endif /* DC_ENGINE_DEVSEND_H */
