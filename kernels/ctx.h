/*
 * ctx.h - private to kernels/: the base-conditioned sparse chunk coding
 * (frame kind DC_ENC_CTX, "ctx-sparse"), coded with what the receiver
 * already holds: the chunk's baseline.
 *
 * Two facts of real optimizer steps make the order-0 code of positions and
 * XOR words (DC_ENC_XOR_SPARSE) wasteful:
 *  - whether an element changes depends on its base value's magnitude: an
 *    Adam step is about lr in size everywhere, a BF16 unit in the last
 *    place is proportional to |w|, so small weights change far more often;
 *  - most changed values move by one or a few units in the last place, a
 *    small integer step of the bit pattern in sign-magnitude order.
 * So the elements are split into K <= DC_CTX_MAX_CLASSES classes by the
 * magnitude of their base word (K - 1 thresholds on the word with its top
 * bit cleared: for floats, by exponent), each class's changed elements are
 * coded as positions within the class (Golomb or rANS gaps, each class its
 * own parameter: its own change rate), and the values as XOR words, as
 * integer steps, or as new words, whichever is smallest.  The classes come
 * from the base, so they cost only their K - 1 thresholds.  All of it is an
 * integer operation on the bits: exact for every dtype, NaN payload, -0.0,
 * infinity and sign change.
 *
 * Payload (little-endian; varint = LEB128):
 *   u8      bits 0-2: K - 1; bits 3-4: values mode (0 XOR words, 1 steps,
 *           2 new words); bits 5-7 zero
 *   K-1 x u8  thresholds as buckets, strictly increasing, in 1..B-1: a
 *           bucket is the magnitude >> S (w 1: S 0, B 128; w 2: S 7;
 *           w 4: S 23; w 8: S 55; B 256 for w > 1), the threshold
 *           magnitude bucket << S.  Class of an element = how many
 *           thresholds its magnitude reaches (0..K-1).
 *   K x varint  count_c, changed elements of class c (sum <= n)
 *   u8      gaps mask: bit c set = class c's positions are rANS gaps
 *           (entropy.h DC_ENT_GAPS), else Golomb; 0 for empty classes
 *   per class with count_c > 0: varint length, positions stream of the
 *           count_c ranks (the changed elements' indices among the
 *           class's elements, in element order)
 *   values stream: the rest; sum count_c words of w bytes in element
 *           order, coded by the frame's values method.
 *   Step word (mode 1): zigzag(key(new) - key(base)) mod 2^(8w), with
 *   key(b) = b ^ (top bit set ? all ones : top bit), the order of the
 *   values in sign-magnitude; the receiver inverts it exactly.
 *
 * The decoder sorts the base's elements into the same classes (a scan of
 * the base: ctx_scan.h), maps every class's ranks back to element indices
 * and hands out positions and XOR words, checked: a rank past its class's
 * population is DC_ERR_FORMAT.
 */
#ifndef DC_CTX_H
#define DC_CTX_H

#include "kernels/codec.h"
#include "kernels/ctx_scan.h"
#include "kernels/entropy.h"

typedef struct dc_ctx dc_ctx_t;

/** Most classes the encoder uses (1..DC_CTX_MAX_CLASSES; 0 = the default,
 *  DC_CTX_DEFAULT_CLASSES).  A knob for tests and benchmarks; not
 *  thread-safe to change while coding. */
extern unsigned dc_ctx_max_classes;
/* Four classes take most of the gain (on 1%-changed optimizer pairs: 0.731
 * of the order-0 bound with 4, 0.720 with 8, 0.789 with 2) at half the
 * decoder's scan of 8. */
#define DC_CTX_DEFAULT_CLASSES 4
_Static_assert(DC_CTX_DEFAULT_NT == DC_CTX_DEFAULT_CLASSES - 1,
               "ctx_scan.h's constant class pass names the default's thresholds");

/** Scratch for chunks of up to max_bytes. */
dc_status_t dc_ctx_create(size_t max_bytes, dc_ctx_t **out);
void dc_ctx_free(dc_ctx_t *x);

/** Largest payload dc_ctx_encode writes for count changes of n w-byte
 *  elements. */
size_t dc_ctx_bound(size_t count, size_t n, unsigned w);

/**
 * Encode the count changed elements (pos strictly increasing, xorv their
 * XOR words against base: the target words are base ^ xorv) of a chunk of
 * n elements of w bytes as a
 * DC_ENC_CTX payload into dst (cap >= dc_ctx_bound).  *vm gets the values
 * method; st (may be NULL): pos_bytes, val_bytes, payload_bytes and
 * ctx_bound_bits (the coded model's entropy) are set.  layout: codec.h
 * DC_CODEC_LAYOUT_* (gaps positions only in the simd layout, as
 * codec.c's).
 */
dc_status_t dc_ctx_encode(dc_ctx_t *x, dc_ent_scratch_t *ent, unsigned layout,
                          const void *base, size_t n, unsigned w, const uint32_t *pos,
                          const void *xorv, size_t count, uint8_t *dst, size_t cap, size_t *len,
                          unsigned *vm, dc_chunk_stats_t *st);

/*
 * dc_ctx_encode in parts, for an encoder whose base is elsewhere (a device
 * sender: engine/devsend.c computes the parts that read the whole base on
 * the GPU).  Together they give dc_ctx_encode's payload byte for byte:
 *  1. dc_ctx_model_hist: the classes, from the histogram hist[256] of the
 *     magnitude buckets (the top bit cleared, >> 0/7/23/55 for w 1/2/4/8)
 *     of the sampled base elements (the first 64 elements of every stride
 *     elements, stride 4096 for n >= 65536, 1024 for n >= 16384, else 64;
 *     dc_ctx_sampled(n) of them) and the base words bw of the count
 *     changed elements (or, bw NULL, bhist[256]: the histogram of their
 *     buckets).  Returns K (1..DC_CTX_MAX_CLASSES); thr[0..K-2] the
 *     threshold buckets.
 *  2. (K > 1) per change its class cls[k] (how many of the magnitude
 *     thresholds dc_ctx_thr_mag gives its base word's magnitude reaches)
 *     and rank rnk[k] (its index among the chunk's elements of its class),
 *     pop[c] the population of class c: what ctx_scan.h's rank computes.
 *  3. dc_ctx_encode_ranked: the payload from the lists (cls, rnk, pop
 *     unread when K == 1).  With cls NULL and K > 1, rnk holds the ranks
 *     already grouped by class (class 0's first, each class's in element
 *     order: kernels/listpack.h) and ccnt[c] the changes of class c.
 *     With vs (w <= 2, count > 0; codec.h dc_codec_vals_t) the values
 *     come from vs: xorv and bw are unread.  With pg (cls NULL; ccnt when
 *     K > 1), each class's positions come as the Golomb stream that
 *     dc_ent_pos_encode writes for its ranks (in pop[c]; pgl[c] bytes,
 *     class 0's first, 0 for an empty class): pos and rnk are unread, and
 *     a class that tries the gaps coder has its ranks decoded from it.
 */
size_t dc_ctx_sampled(size_t n);
unsigned dc_ctx_model_hist(const uint32_t *hist, size_t n, unsigned w, const uint8_t *bw,
                           const uint32_t *bhist, size_t count, unsigned *thr);
void dc_ctx_thr_mag(const unsigned *thr, unsigned K, unsigned w, uint64_t *thrm);
dc_status_t dc_ctx_encode_ranked(dc_ctx_t *x, dc_ent_scratch_t *ent, unsigned layout, size_t n,
                                 unsigned w, const uint32_t *pos, const void *xorv,
                                 const void *bw, size_t count, unsigned K, const unsigned *thr,
                                 const uint8_t *cls, const uint32_t *rnk, const uint64_t *ccnt,
                                 const uint64_t *pop, const uint8_t *pg, const size_t *pgl,
                                 const dc_codec_vals_t *vs, uint8_t *dst, size_t cap,
                                 size_t *len, unsigned *vm, dc_chunk_stats_t *st);

/**
 * Decode a DC_ENC_CTX payload against the baseline `base` (n elements of w
 * bytes): the changed positions into pos (increasing) and their XOR words
 * into xorv, *count of them.  base == NULL (inspect): every stream is
 * decoded and checked, positions and words are not produced (*count is
 * still the total).  Any inconsistency is DC_ERR_FORMAT.
 */
dc_status_t dc_ctx_decode(dc_ctx_t *x, dc_ent_scratch_t *ent, unsigned vm,
                          const uint8_t *payload, size_t len, const void *base, size_t n,
                          unsigned w, uint32_t *pos, void *xorv, size_t *count,
                          dc_chunk_stats_t *st);

/**
 * dc_ctx_decode in place, with the patch fused into the merge's scan:
 * chunk (n elements of w bytes) is the baseline; each slab of it is
 * patched (XOR) and hashed while the scan holds it in cache, and *dg gets
 * the digest (as dc_digest128) of the result.  pos / xorv / *count as
 * dc_ctx_decode.  Any inconsistency is DC_ERR_FORMAT with the chunk left
 * as it was (a bad rank shows only at the scan's end: the patched slabs
 * are XORed back).
 */
dc_status_t dc_ctx_decode_patch(dc_ctx_t *x, dc_ent_scratch_t *ent, unsigned vm,
                                const uint8_t *payload, size_t len, void *chunk, size_t n,
                                unsigned w, uint32_t *pos, void *xorv, size_t *count,
                                dc_digest_t *dg);

/** key(b) of the step coding for a w-byte word (exposed for tests);
 *  branch-free (the sign of a changed weight is a coin toss). */
static inline uint64_t dc_ctx_key(uint64_t b, unsigned w)
{
    unsigned bits = 8 * w;
    uint64_t top = 1ull << (bits - 1), all = w == 8 ? ~0ull : (top << 1) - 1;
    uint64_t neg = 0 - ((b >> (bits - 1)) & 1); /* all ones when the sign is set */
    return b ^ (top | (neg & all));
}
static inline uint64_t dc_ctx_unkey(uint64_t k, unsigned w)
{
    unsigned bits = 8 * w;
    uint64_t top = 1ull << (bits - 1), all = w == 8 ? ~0ull : (top << 1) - 1;
    uint64_t pos = 0 - ((k >> (bits - 1)) & 1); /* all ones for a positive value */
    return k ^ (top | (~pos & all));
}

#endif /* DC_CTX_H */
