/*
 * codec.h - encode / decode one chunk: the payload of a frame (frame.h).
 *
 * A chunk is `n` elements of width `w` (1, 2, 4, 8 bytes) of one tensor in
 * canonical coordinates.  The encoder compares the baseline bytes with the
 * target bytes and picks the smallest exact encoding (frame.h DC_ENC_*):
 *
 *   CTX         changed positions by class of base magnitude + XOR words,
 *               integer steps or new values (<= 25% changed; kernels/ctx.h;
 *               the default model)
 *   XOR_SPARSE  changed positions + XOR words       (<= 25% changed; model
 *               order0)
 *   PUT_SPARSE  changed positions + new values      (when XOR words do not
 *                                                    compress)
 *   XOR_DENSE   every element's XOR word (zeros included)
 *   PUT_DENSE   every new byte (also: no baseline, e.g. a new tensor)
 *
 * Each stream is coded with the smallest of the entropy.h methods.
 *
 * Payload layout:
 *   sparse kinds: varint count, varint positions_len, positions stream
 *                 (Golomb or gaps, positions_len bytes), values stream (the
 *                 rest: count words); both methods from the frame's
 *                 encoding field.
 *   dense kinds:  the values stream (n words).
 *
 * Entropy bound of a chunk (what the payload is measured against):
 *   bound_bits = n * H(p) + count * H(empirical histogram of XOR words)
 * with p = count / n: positions as iid Bernoulli(p) plus an order-0 code of
 * the XOR words.  (For a dense XOR array this equals the order-0 entropy of
 * all n XOR words, zeros included.)
 */
#ifndef DC_CODEC_H
#define DC_CODEC_H

#include "kernels/frame.h"
#include "util/dc_util.h"

/** Largest chunk in bytes accepted by the codec and delta files. */
#define DC_CODEC_MAX_CHUNK (256u * 1024u * 1024u)
#define DC_CODEC_MIN_CHUNK 64u

/** Fewest changes for which the encoder tries rANS-coded gaps (entropy.h
 *  DC_ENT_GAPS) for the positions. */
#define DC_CODEC_GAPS_MIN 4096u

/** Positions method the encoder uses: 0 = automatic (in the simd layout,
 *  from DC_CODEC_GAPS_MIN changes on, gaps when within 1/64 of the iid
 *  bound n H(p), else when at most 1/64 larger than Golomb; Golomb
 *  otherwise), DC_ENT_GOLOMB or DC_ENT_GAPS (any count >= 1, any layout)
 *  force one.  A knob for tests and benchmarks; not thread-safe to change
 *  while coding. */
extern unsigned dc_codec_pos_method;

/** Test hook: the chunk kind the encoder emits (frame.h DC_ENC_*; 0, the
 *  default: the smallest).  DC_ENC_PUT_DENSE: every chunk put dense;
 *  DC_ENC_XOR_DENSE: every chunk with a baseline XOR-dense;
 *  DC_ENC_XOR_SPARSE / DC_ENC_PUT_SPARSE: that order-0 sparse kind (any
 *  model) for chunks with at most n/4 changes, even where a dense payload
 *  would be smaller; DC_ENC_CTX: ctx-sparse for those chunks.  Other
 *  chunks: the automatic choice.  With entropy.h dc_ent_val_force it makes
 *  every kind in every values encoding for tests.  Not thread-safe to
 *  change while coding. */
extern unsigned dc_codec_force_kind;

/** Per-thread codec context with scratch for chunks of up to max_bytes.
 *  Its layout comes from the config key codec_layout (an invalid value is
 *  DC_ERR_INVALID). */
typedef struct dc_codec dc_codec_t;
dc_status_t dc_codec_create(size_t max_bytes, dc_codec_t **out);
void dc_codec_free(dc_codec_t *c);

/** How the encoder lays out the streams it writes (every layout decodes
 *  everywhere; this picks which decoders are fast):
 *   DC_CODEC_LAYOUT_SIMD     gaps positions and 32-way rANS values where
 *                            they apply (fastest with AVX2 / AVX-512),
 *   DC_CODEC_LAYOUT_COMPACT  Golomb positions and at most 4-way rANS (the
 *                            fused scalar loop: faster without AVX2). */
enum { DC_CODEC_LAYOUT_SIMD = 1, DC_CODEC_LAYOUT_COMPACT = 2 };
void dc_codec_set_layout(dc_codec_t *c, unsigned layout);
/** The config key codec_layout as a DC_CODEC_LAYOUT_* value. */
dc_status_t dc_codec_layout_config(unsigned *layout);

/** What the encoder models for sparse chunks (every model decodes
 *  everywhere):
 *   DC_CODEC_MODEL_CTX     the base-conditioned ctx-sparse kind (default),
 *   DC_CODEC_MODEL_ORDER0  xor-sparse / put-sparse (what deltacast 0.2
 *                          receivers read). */
enum { DC_CODEC_MODEL_CTX = 1, DC_CODEC_MODEL_ORDER0 = 2 };
void dc_codec_set_model(dc_codec_t *c, unsigned model);
/** The config key codec_model as a DC_CODEC_MODEL_* value. */
dc_status_t dc_codec_model_config(unsigned *model);

/** Largest payload the encoder can produce for a chunk of `bytes` bytes. */
size_t dc_codec_payload_bound(size_t bytes);

/** What one chunk holds. */
typedef struct dc_chunk_stats {
    uint64_t n;          /* elements */
    uint64_t changed;    /* changed elements (UINT64_MAX: unknown) */
    uint64_t pos_bytes;  /* positions stream (sparse kinds) */
    uint64_t val_bytes;  /* values stream */
    uint64_t payload_bytes;
    double bound_bits;   /* order-0 entropy bound; < 0 when unknown */
    double ctx_bound_bits; /* ctx-sparse chunks: the entropy of the coded
                              model (positions by class, values as coded);
                              < 0 when unknown or not that kind */
} dc_chunk_stats_t;

/**
 * Encode the chunk turning `base` into `next` (n elements of w bytes each;
 * n < 2^32 and n*w <= the context's max_bytes).  base == NULL encodes a
 * PUT_DENSE chunk.  Writes the payload to dst (cap >=
 * dc_codec_payload_bound(n*w)), its length to *len and the frame encoding
 * to *enc.  `st` (may be NULL) receives the figures, including the entropy
 * bound (computing it costs a histogram pass).
 */
dc_status_t dc_codec_encode(dc_codec_t *c, const void *base, const void *next, size_t n,
                            unsigned w, uint8_t *dst, size_t cap, size_t *len, uint16_t *enc,
                            dc_chunk_stats_t *st);

/**
 * dc_codec_encode that also returns the digests (XXH3-128, as dc_digest128)
 * of base (*base_dg, when base and base_dg are not NULL) and of next
 * (*next_dg, when not NULL), computed in the same pass over the data as the
 * diff.  Same payload as dc_codec_encode.
 */
dc_status_t dc_codec_encode_digest(dc_codec_t *c, const void *base, const void *next, size_t n,
                                   unsigned w, uint8_t *dst, size_t cap, size_t *len,
                                   uint16_t *enc, dc_chunk_stats_t *st, dc_digest_t *base_dg,
                                   dc_digest_t *next_dg);

/** Most classes of the ctx model (ctx.h DC_CTX_MAX_CLASSES). */
#define DC_CODEC_MAX_CLASSES 8

/** The context's DC_CODEC_MODEL_*. */
unsigned dc_codec_model(const dc_codec_t *c);

/** entropy.h dc_ent_words_entropy_bits of count words of w bytes, with the
 *  context's scratch (a device sender's words where their histogram would
 *  not be smaller). */
double dc_codec_words_entropy_bits(dc_codec_t *c, const void *v, size_t count, unsigned w);

/**
 * The sparse part of dc_codec_encode_digest() from lists, for an encoder
 * whose base and next are elsewhere (a device sender, engine/devsend.c,
 * computes the lists on the GPU): the count changed positions pos
 * (increasing, < n), their XOR words xorv and their base words bw; for the
 * ctx model also K and thr (dc_codec_lists_classes()) and, when K > 1,
 * each change's class cls[k] and rank rnk[k] and the classes' populations
 * pop[] (ctx.h); or, cls NULL, the ranks rnk grouped by class (class 0's
 * first, each class's in element order: kernels/listpack.h) and ccnt[c]
 * the changes of class c (pos is then unread).  The payload is byte-identical to
 * dc_codec_encode_digest()'s for the same chunk.  The dense kinds need the
 * whole chunk: count > n / 4, or a sparse payload larger than the chunk, is
 * DC_ERR_UNSUPPORTED (encode that chunk with dc_codec_encode_digest()).
 */
struct dc_ent_scratch; /* entropy.h */

/**
 * A device sender's values on demand (dc_codec_lists_t vals; the ctx
 * model, w <= 2, count > 0): instead of the XOR and base words, the
 * order-0 entropies (bits, as dc_ent_words_entropy_bits computes them) of
 * the XOR words (hx) and of the step words (hs), and words(arg, mode,
 * &p): the count words of values mode `mode` (0 XOR, 1 steps, 2 new
 * words; kernels/ctx.h) at *p, fetched when the coder picks that mode.
 */
typedef struct dc_codec_vals {
    double hx, hs;
    dc_status_t (*words)(void *arg, unsigned mode, const void **p);
    /* optional: the rANS values stream of mode's words made elsewhere
     * (entropy.h dc_ent_rans_table's table with the scratch ent, the
     * symbols coded on the device) into dst (cap bytes), *len its bytes,
     * *h the words' entropy as dc_ent_val_encode_h gives it;
     * DC_ERR_BUSY: not here (the coder takes the words). */
    dc_status_t (*rans)(void *arg, unsigned mode, struct dc_ent_scratch *ent, uint8_t *dst,
                        size_t cap, size_t *len, double *h);
    void *arg;
} dc_codec_vals_t;

typedef struct dc_codec_lists {
    size_t n;
    unsigned w;
    size_t count;
    const uint32_t *pos;
    const void *xorv, *bw;
    unsigned K; /* ctx model: classes (1..DC_CODEC_MAX_CLASSES) */
    unsigned thr[DC_CODEC_MAX_CLASSES];
    const uint8_t *cls;
    const uint32_t *rnk;
    uint64_t pop[DC_CODEC_MAX_CLASSES];
    uint64_t ccnt[DC_CODEC_MAX_CLASSES]; /* cls NULL: changes per class */
    const dc_codec_vals_t *vals; /* non-NULL: xorv and bw unread (above) */
    /* ctx model, cls NULL: non-NULL, each class's positions as the Golomb
     * stream dc_ent_pos_encode writes for its ranks (in pop[c]; K 1: the
     * positions in n), pgl[c] bytes, class 0's first; pos and rnk unread */
    const uint8_t *pg;
    size_t pgl[DC_CODEC_MAX_CLASSES];
} dc_codec_lists_t;

/**
 * The ctx model's classes for dc_codec_encode_lists(): K (1 for the order0
 * model or a dense chunk), thr[0..K-2] the threshold buckets and thrm the
 * magnitudes they stand for, from hist[256] (the histogram of the sampled
 * base elements' magnitude buckets, ctx.h dc_ctx_model_hist) and the base
 * words bw of the count changes, or (bw NULL) the histogram bhist[256] of
 * their magnitude buckets.
 */
unsigned dc_codec_lists_classes(dc_codec_t *c, const uint32_t *hist, size_t n, unsigned w,
                                const void *bw, const uint32_t *bhist, size_t count,
                                unsigned *thr, uint64_t *thrm);
dc_status_t dc_codec_encode_lists(dc_codec_t *c, const dc_codec_lists_t *L, uint8_t *dst,
                                  size_t cap, size_t *len, uint16_t *enc, dc_chunk_stats_t *st);

/**
 * Apply a payload to dst (n elements of w bytes).  For every kind but
 * PUT_DENSE dst must hold the chunk's baseline bytes.  The payload is
 * hostile: everything is validated into scratch first, so on any error
 * (DC_ERR_FORMAT) dst is untouched.
 */
dc_status_t dc_codec_decode(dc_codec_t *c, uint16_t enc, const uint8_t *payload, size_t len,
                            void *dst, size_t n, unsigned w);

/**
 * Apply a payload to the baseline `src` (n elements of w bytes; NULL only
 * for PUT_DENSE; may equal dst) writing the result to dst, and return the
 * digests of src (*src_dg, when src and src_dg are not NULL) and of the
 * result (*dst_dg, when not NULL), in one pass over the data (no separate
 * copy or hashing passes).  Same validation as dc_codec_decode: on any
 * error (DC_ERR_FORMAT) dst is untouched.
 */
dc_status_t dc_codec_decode_digest(dc_codec_t *c, uint16_t enc, const uint8_t *payload,
                                   size_t len, const void *src, void *dst, size_t n, unsigned w,
                                   dc_digest_t *src_dg, dc_digest_t *dst_dg);

/**
 * Decode a payload into lists, for an apply elsewhere (a receiver's device
 * path, engine/devpath.c): XOR_SPARSE gives *count positions (increasing,
 * < n, checked by the positions decoder) and XOR words, PUT_SPARSE the
 * positions and the new words (the caller makes XOR words of them against
 * its baseline); XOR_DENSE and PUT_DENSE give *pos = NULL and n words.
 * The lists live in the context's scratch until its next call.  CTX
 * decodes against the baseline's bytes: DC_ERR_UNSUPPORTED.  Hostile payloads: DC_ERR_FORMAT, as dc_codec_decode.
 */
dc_status_t dc_codec_decode_lists(dc_codec_t *c, uint16_t enc, const uint8_t *payload,
                                  size_t len, size_t n, unsigned w, const uint32_t **pos,
                                  const uint8_t **words, size_t *count);

/**
 * An XOR_SPARSE or PUT_SPARSE payload's header, checked as
 * dc_codec_decode_lists() does:
 * the change count and where the positions stream is (pos_ofs, pos_len;
 * the values stream follows it to the end, method dc_enc_val_method(enc)).
 * DC_ERR_UNSUPPORTED for other kinds.
 */
dc_status_t dc_codec_sparse_header(dc_codec_t *c, uint16_t enc, const uint8_t *payload,
                                   size_t len, size_t n, unsigned w, size_t *count,
                                   size_t *pos_ofs, size_t *pos_len);

/**
 * The positions part of an XOR_SPARSE or PUT_SPARSE payload alone (for a decoder of the
 * values elsewhere, e.g. on the device): header and positions stream
 * decoded and checked as dc_codec_decode_lists() does, *pos (count
 * positions, valid until the next call) and the values stream's offset in
 * the payload (*vals_ofs; it runs to the end, method
 * dc_enc_val_method(enc)).  The values are NOT checked: the payload is
 * accepted only when the values decoder accepts them too.
 * DC_ERR_UNSUPPORTED for other kinds.
 */
dc_status_t dc_codec_decode_positions(dc_codec_t *c, uint16_t enc, const uint8_t *payload,
                                      size_t len, size_t n, unsigned w, const uint32_t **pos,
                                      size_t *count, size_t *vals_ofs);

/**
 * After a successful dc_codec_decode / dc_codec_decode_digest of a sparse
 * kind (xor-sparse, put-sparse, ctx-sparse) on this context, and before
 * any other call on it: the xor-sparse payload (Golomb positions, the XOR
 * words of that decode) that, applied to the result, gives the baseline
 * back: what a receiver keeps to undo an aborted version (only xor-sparse
 * frames undo themselves).  cap >= dc_codec_payload_bound(n * w).
 * DC_ERR_INVALID when the last call decoded no sparse chunk.
 */
dc_status_t dc_codec_undo_payload(dc_codec_t *c, size_t n, unsigned w, uint8_t *dst, size_t cap,
                                  size_t *len, uint16_t *enc);

/**
 * count words of w bytes (e.g. zstd values decoded on the host) coded
 * again as the smallest values stream a device decodes (entropy.h raw,
 * rANS or byte planes: no zstd) into dst (cap >= dc_ent_val_bound(count,
 * w)), *len bytes, method *method: what a device receiver sends instead of
 * the words (engine/devdense.c).
 */
dc_status_t dc_codec_values_recode(dc_codec_t *c, const void *words, size_t count, unsigned w,
                                   uint8_t *dst, size_t cap, size_t *len, unsigned *method);

/**
 * Describe a payload without a baseline: stream sizes, changed count (for
 * XOR kinds; UINT64_MAX for PUT_DENSE) and the entropy bound (XOR kinds).
 * Fully decodes it, so it also validates it.
 */
dc_status_t dc_codec_inspect(dc_codec_t *c, uint16_t enc, const uint8_t *payload, size_t len,
                             size_t n, unsigned w, dc_chunk_stats_t *st);

/** Binary entropy H(p) in bits. */
double dc_codec_h2(double p);

#endif /* DC_CODEC_H */
