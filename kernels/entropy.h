/*
 * entropy.h - the delta codec's entropy coders (internal to kernels/).
 *
 * Two kinds of stream make up a chunk payload (see codec.h):
 *
 *  - a POSITIONS stream: the strictly increasing indices of the changed
 *    elements of a chunk of n elements, as gaps (g = pos[k] - pos[k-1] -
 *    1, pos[-1] = -1), coded by one of
 *      DC_ENT_GOLOMB  a Golomb code whose parameter m is fitted to the
 *                     chunk's change rate.  For positions that are iid
 *                     Bernoulli(p) the gaps are geometric and a Golomb code
 *                     is the optimal prefix code: within ~1% of n*H(p).
 *      DC_ENT_GAPS    the gap's low b bits as they are and its quotient
 *                     g >> b through a 32-way rANS stream: as small (the
 *                     quotients' histogram adapts to any gap distribution),
 *                     and a SIMD decoder takes 16 (AVX-512) or 8 (AVX2)
 *                     gaps at a time (rANS with gathers, the low bits by
 *                     a byte permutation or a gather, a prefix sum):
 *                     several times the speed of the bit-serial Golomb
 *                     decoder.
 *
 *  - a VALUES stream: `count` words of width w (1, 2, 4, 8 bytes): XOR words
 *    or new values.  Coded by whichever is smallest of
 *      DC_ENT_RAW     the bytes themselves,
 *      DC_ENT_ZSTD    zstd level 1,
 *      DC_ENT_RANS    static order-0 rANS over the whole word (w <= 2, i.e.
 *                     a 256- or 65536-symbol alphabet) with the quantized
 *                     frequency table transmitted in the stream,
 *      DC_ENT_PLANES  w byte planes, each an order-0 rANS stream.
 *
 * Stream byte layouts (all little-endian; varint = LEB128, at most 10 bytes):
 *
 *   Golomb positions:  varint m (1 <= m <= 2^32), then the bit stream
 *                      (MSB first): per gap, q = g / m zero bits, a one bit,
 *                      then r = g % m in truncated binary.
 *   GAPS positions:    u8 b (0..16), varint E (1..65535, E << b <= 2^24),
 *                      varint qlen, a RANS stream (below) of count 16-bit
 *                      symbols min(g >> b, E) in qlen bytes, the low bits
 *                      (g & (2^b - 1), b bits each, LSB first, zero
 *                      padding: ceil(count * b / 8) bytes), then for each
 *                      gap with g >> b >= E in order, varint (g >> b) - E
 *                      (< 2^32), and nothing after.  The encoder picks b ~
 *                      log2(mean gap) - 2 and the smallest E <= 4095 that
 *                      leaves at most 1/1024 of the gaps escaped.
 *   RAW values:        count * w bytes.
 *   ZSTD values:       one zstd frame whose content is count * w bytes.
 *   RANS values:       u8 symbol bits (8|16), plus 0x80 when the data is
 *                      two-way, 0x40 when it is four-way interleaved, 0xC0
 *                      for the 32-way layout (below),
 *                      u8 scale bits S (8..16), varint nsym, nsym x
 *                      (varint symbol delta - 1 (first: the symbol), varint
 *                      freq - 1) with freqs summing to 2^S, then the rANS
 *                      data: `ways` u32 states (symbol i is coded by state
 *                      i % ways; state 0 first) + bytes (one shared byte
 *                      stream, read in symbol order).  After the last
 *                      symbol every state must be exactly 2^23 and the
 *                      data exhausted.  The encoder interleaves 2 states
 *                      from 16 symbols on and 4 from 64 on (independent
 *                      dependency chains: several times the speed of one
 *                      state) and picks a 12-bit table over a 16-bit one
 *                      when it costs at most 0.5% more bits (the decoder's
 *                      table then stays in L1).  One-way streams (older
 *                      encoders) still decode.
 *                      32-way layout (from 4096 symbols on, where the scale
 *                      is <= 15; the SIMD layout): the same table with S <=
 *                      15, 32 u32 states (symbol i by state i % 32, each in
 *                      [2^15, 2^31)), then u16 little-endian words, one
 *                      read after a symbol whose state fell below 2^15
 *                      (in symbol order: so 16 lanes decoded at once read
 *                      theirs in lane order).  Every state ends at exactly
 *                      2^15.  The states cost 112 bytes more than four;
 *                      an AVX-512 decoder (two gathers per 16 symbols) runs
 *                      4x the four-way loop, an AVX2 one (8 lanes) about as
 *                      fast as it; the portable loop is slower than the
 *                      four-way one (states in memory).
 *   PLANES values:     w x (varint length, RANS stream of 8-bit symbols)
 *                      for byte plane 0 (least significant) .. w-1.
 *
 * Decoders take hostile bytes: every count, length and table is checked
 * before use and output is written only inside the caller's buffers; any
 * inconsistency is DC_ERR_FORMAT.
 */
#ifndef DC_ENTROPY_H
#define DC_ENTROPY_H

#include "util/dc_util.h"

enum {
    DC_ENT_RAW = 0,
    DC_ENT_ZSTD = 1,
    DC_ENT_RANS = 2,
    DC_ENT_PLANES = 3,
    DC_ENT_GOLOMB = 4,
    DC_ENT_GAPS = 5,
    DC_ENT_METHOD_COUNT
};

/** "raw", "zstd", "rans", "planes", "golomb", "gaps" or "?". */
const char *dc_ent_method_name(unsigned method);

/** Scratch memory for coding up to `max_count` bytes of words at once.
 *  One per thread. */
typedef struct dc_ent_scratch dc_ent_scratch_t;
dc_status_t dc_ent_scratch_create(size_t max_count, dc_ent_scratch_t **out);
void dc_ent_scratch_free(dc_ent_scratch_t *s);
/** Largest interleave of the RANS streams this scratch encodes: 32 (the
 *  default; the 32-way layout where it applies) or 4 (never the 32-way
 *  layout: the compact codec layout, even when dc_ent_rans_ways asks for
 *  32). */
void dc_ent_scratch_set_max_ways(dc_ent_scratch_t *s, unsigned ways);

/** Interleaving of the RANS streams the encoder writes: 0 = automatic
 *  (1 state below 16 symbols, 2 below 64, 32 from 4096 for 16-bit words
 *  or bytes at stride 1, else 4); 1, 2, 4 or 32 force it (32 only where
 *  the scale is <= 15 and the scratch allows it; else 4).  A knob for
 *  tests (streams of every kind must keep decoding); not thread-safe to
 *  change while coding. */
extern unsigned dc_ent_rans_ways;

/* --- varints -------------------------------------------------------------- */

/** Write v as LEB128 at dst (needs 10 bytes of room); returns bytes written. */
size_t dc_ent_put_varint(uint8_t *dst, uint64_t v);
/** Read a varint from [*p, end); advances *p.  DC_ERR_FORMAT if it runs
 *  past end or is longer than 10 bytes. */
dc_status_t dc_ent_get_varint(const uint8_t **p, const uint8_t *end, uint64_t *v);

/**
 * The table of a rANS values stream whose symbols are coded elsewhere (a
 * device sender: kern_cuda.h dc_kern_cuda_rans_encode), as
 * dc_ent_val_encode_h codes count words of w <= 2 bytes with rANS: from
 * their histogram, nsym distinct symbols sym[k] counted cnt[k] times in
 * the order the words first appear, the header and table into dst[0, *h)
 * (cap bytes), the scale *S and interleave *ways, and for the coder each
 * symbol with its quantized frequency, qs[k] = symbol | (frequency - 1)
 * << 16, in increasing symbol order; *h_bits the words' order-0 entropy
 * as dc_ent_val_encode_h gives it.  What follows the table: the ways
 * states (4 bytes each, little-endian, state 0 first), then the
 * renormalization output of symbols 0 to count - 1.  DC_ERR_BUSY: the
 * alphabet does not fit a table (dc_ent_val_encode_h codes those words
 * otherwise), or cap is under 32 + 6 * nsym: code the words;
 * DC_ERR_INVALID: a histogram that is not one (a symbol twice or out of
 * range, a count 0, counts not summing to count).
 */
dc_status_t dc_ent_rans_table(dc_ent_scratch_t *s, const uint16_t *sym, const uint32_t *cnt,
                              size_t nsym, size_t count, unsigned w, uint8_t *dst, size_t cap,
                              size_t *h, unsigned *S, unsigned *ways, uint32_t *qs,
                              double *h_bits);

/* --- positions ------------------------------------------------------------ */

/** Upper bound of a Golomb positions stream for `count` positions in n. */
size_t dc_ent_pos_bound(size_t count, uint64_t n);
/** The Golomb parameter m of count positions whose last is span - 1
 *  (what dc_ent_pos_encode writes first, as a varint): a device encoder
 *  takes it from here so that its stream is byte-identical. */
uint64_t dc_ent_pos_param(size_t count, uint64_t span);
/** Encode strictly increasing positions < n.  DC_ERR_BUSY if cap is too
 *  small. */
dc_status_t dc_ent_pos_encode(const uint32_t *pos, size_t count, uint64_t n, uint8_t *dst,
                              size_t cap, size_t *out_len);
/** Decode exactly `count` positions, each < n and strictly increasing,
 *  consuming exactly `len` bytes (up to the final byte's padding). */
dc_status_t dc_ent_pos_decode(const uint8_t *src, size_t len, size_t count, uint64_t n,
                              uint32_t *pos);

/**
 * Resumable positions decoder (what dc_ent_pos_decode runs): init reads
 * the parameter; run decodes positions [k, upto) into pos[] (each checked:
 * strictly increasing, < n), so a caller can apply them slice by slice;
 * finish checks that exactly `count` positions were decoded and only zero
 * padding (< 8 bits) is left.  Any error is DC_ERR_FORMAT (what run wrote
 * to pos[] then is unspecified).
 */
#define DC_GT_BITS 12
typedef struct dc_golomb_dec {
    const uint8_t *p, *end; /* next byte; bc bits of p[0] already used */
    unsigned bc, b;
    int use_tab;
    uint64_t m, cut, n, next;
    size_t k, count;        /* positions decoded, positions in the stream */
    uint32_t gtab[1u << DC_GT_BITS];
    /* For dc_ent_sparse_run: the same DC_GT_BITS bits decode up to two
     * codes at once.  Entry (0: the first code does not fit): bits used
     * (bits 0-5), 1 when a second code is there (bit 6), the first gap
     * g0 (bits 7-19) and the offset of the last position decoded from the
     * one before (bits 20-31: g0, or g0 + 1 + g1 with a second code).
     * glook: 3 when enough slots hold two codes (three lookups a step of
     * four values, with gtab2), else 4 (four one-code lookups, gtab); 0
     * until dc_ent_sparse_run first looks (and builds gtab2). */
    uint32_t gtab2[1u << DC_GT_BITS];
    unsigned glook;
} dc_golomb_dec_t;
dc_status_t dc_golomb_dec_init(dc_golomb_dec_t *d, const uint8_t *src, size_t len, size_t count,
                               uint64_t n);
dc_status_t dc_golomb_dec_run(dc_golomb_dec_t *d, uint32_t *pos, size_t upto);
dc_status_t dc_golomb_dec_finish(const dc_golomb_dec_t *d);

/* --- positions: rANS-coded gaps (DC_ENT_GAPS) ------------------------------ */

/** Upper bound of a gaps stream of count positions. */
size_t dc_ent_gaps_bound(size_t count);
/** Encode count >= 1 strictly increasing positions < n as a gaps stream.
 *  DC_ERR_BUSY if cap is too small. */
dc_status_t dc_ent_gaps_encode(dc_ent_scratch_t *s, const uint32_t *pos, size_t count,
                               uint64_t n, uint8_t *dst, size_t cap, size_t *out_len);
/** Decode exactly count positions (each < n, strictly increasing) from a
 *  gaps stream of exactly len bytes. */
dc_status_t dc_ent_gaps_decode(dc_ent_scratch_t *s, const uint8_t *src, size_t len,
                               size_t count, uint64_t n, uint32_t *pos);

/* --- values --------------------------------------------------------------- */

/** Upper bound of any values stream of count words of w bytes. */
size_t dc_ent_val_bound(size_t count, unsigned w);

/** Estimated bits of the order-0 empirical entropy of the words (for w > 2:
 *  of the whole 4/8-byte words, computed by sorting a copy).  This is the
 *  "count * H(histogram)" term of the codec's entropy bound. */
double dc_ent_words_entropy_bits(dc_ent_scratch_t *s, const void *vals, size_t count,
                                 unsigned w);

/** The same figure for words of w <= 2 from their histogram: cnt[0..nsym)
 *  each distinct word's count in the order the words first appear (as
 *  dc_kern_cuda_word_hist gives it); bit-identical to
 *  dc_ent_words_entropy_bits of the words themselves. */
double dc_ent_counts_entropy_bits(const uint32_t *cnt, size_t nsym, size_t count);

/**
 * Encode count words of width w, choosing the smallest method.
 * `allow_zstd` = 0 skips the zstd candidate (speed); zstd is also skipped
 * for 1-2-byte words that order-0 rANS already codes below 1/4 of raw.  *method receives the
 * method used.  DC_ERR_BUSY if cap < dc_ent_val_bound().
 */
dc_status_t dc_ent_val_encode(dc_ent_scratch_t *s, const void *vals, size_t count, unsigned w,
                              int allow_zstd, uint8_t *dst, size_t cap, size_t *out_len,
                              unsigned *method);

/** Test hook (the zstd knob and its siblings): the values method every
 *  dc_ent_val_encode*() call uses, DC_ENT_RAW, DC_ENT_ZSTD, DC_ENT_RANS
 *  (w <= 2) or DC_ENT_PLANES, whatever is smallest (zstd only where
 *  allow_zstd); -1 (the default), or a method that does not apply
 *  to the width: the smallest, as documented above.  So tests can make
 *  each values encoding of each chunk kind.  Not thread-safe to change
 *  while coding. */
extern int dc_ent_val_force;

/** dc_ent_val_encode that also sets *h_bits (when not NULL) to
 *  dc_ent_words_entropy_bits() of the words, from the histogram the rANS
 *  coder builds anyway (w <= 2). */
dc_status_t dc_ent_val_encode_h(dc_ent_scratch_t *s, const void *vals, size_t count, unsigned w,
                                int allow_zstd, uint8_t *dst, size_t cap, size_t *out_len,
                                unsigned *method, double *h_bits);

/** Decode exactly count words of width w from a `method` stream of len
 *  bytes into vals (count * w bytes). */
dc_status_t dc_ent_val_decode(dc_ent_scratch_t *s, unsigned method, const uint8_t *src,
                              size_t len, size_t count, unsigned w, void *vals);

/**
 * Resumable decoder of a RANS stream of `count` symbols of `bits` (8 or
 * 16) bits (what DC_ENT_RANS values decode with; the tables live in the
 * scratch, so one decoder per scratch at a time): run decodes symbols
 * [i, upto) into out + i * stride; finish checks the stream ended
 * cleanly.  Any error is DC_ERR_FORMAT.
 */
typedef struct dc_rans_dec {
    const uint8_t *p, *end;
    const uint64_t *dtab;   /* 1-, 2-, 4-way streams */
    const uint32_t *ftab;   /* 32-way streams */
    const uint16_t *stab;
    uint32_t x[32];
    unsigned S, bits, ways;
    size_t i, count;
} dc_rans_dec_t;
dc_status_t dc_rans_dec_init(dc_ent_scratch_t *s, dc_rans_dec_t *d, const uint8_t *src,
                             size_t len, size_t count, unsigned bits);
dc_status_t dc_rans_dec_run(dc_rans_dec_t *d, uint8_t *out, unsigned stride, size_t upto);
dc_status_t dc_rans_dec_finish(const dc_rans_dec_t *d);

/** Memory to prefetch (into L2) while decoding: len bytes at p. */
typedef struct dc_ent_pf {
    const void *p;
    size_t len;
} dc_ent_pf_t;

/**
 * Resumable gaps decoder (its quotient tables are the scratch's second
 * set, so a values decoder of the same scratch can run alongside): run
 * decodes positions [k, upto) (checked: strictly increasing, < n), pf as
 * for dc_ent_sparse_run; finish checks that the stream ended exactly.
 * Any error is DC_ERR_FORMAT.
 */
typedef struct dc_gaps_dec {
    dc_rans_dec_t q;        /* the quotients */
    uint16_t *gsym;         /* decoded quotients (scratch) */
    const uint8_t *lo;      /* low bits, lo_len bytes */
    size_t lo_len;
    const uint8_t *esc, *esc_end; /* escapes not yet read */
    unsigned b;
    uint32_t E;
    uint64_t n, next;
    size_t k, count;
} dc_gaps_dec_t;
dc_status_t dc_gaps_dec_init(dc_ent_scratch_t *s, dc_gaps_dec_t *d, const uint8_t *src,
                             size_t len, size_t count, uint64_t n);
dc_status_t dc_gaps_dec_run(dc_gaps_dec_t *d, uint32_t *pos, size_t upto,
                            const dc_ent_pf_t *pf);
dc_status_t dc_gaps_dec_finish(const dc_gaps_dec_t *d);

/** Both runs to `upto` (positions and values of a sparse chunk, values
 *  stride bits / 8), interleaved in one loop where both fast paths apply:
 *  dc_golomb_dec_run(gd, pos, upto) then dc_rans_dec_run(rd, vals,
 *  rd->bits / 8, upto), same results.  pf (may be NULL) names memory the
 *  caller reads next (the chunk to patch): the loop asks for it as it goes,
 *  so that it streams in while the decoders compute.  Prefetches never
 *  fault and change nothing. */
dc_status_t dc_ent_sparse_run(dc_golomb_dec_t *gd, dc_rans_dec_t *rd, uint32_t *pos,
                              uint8_t *vals, size_t upto, const dc_ent_pf_t *pf);

#endif /* DC_ENTROPY_H */
