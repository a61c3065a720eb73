/*
 * listpack.h - a device sender's rank lists across PCIe, packed (engine-
 * and test-facing; the device side is kern_cuda.h dc_kern_cuda_pack_ranks).
 *
 * The ctx encoder (ctx.h) codes each class's changed elements as ranks
 * within the class.  A device sender computes them on the GPU; unpacked
 * they are 5 bytes a change (class u8, rank u32) across PCIe, more than
 * the whole payload.  Packed, they are the changes grouped by class (class
 * 0's first), each class's ranks in element order as varints of their
 * gaps: the first rank itself, then rank - previous - 1 (mod 2^32): LEB128
 * (at most 5 bytes each), or nibble varints (below) when those are fewer
 * bytes.  At 1% changed that is about one byte a change,
 * and the encoder takes them grouped as they are (dc_codec_lists_t rnk
 * with cls NULL).  The same packing with one class carries increasing
 * positions.
 *
 * Not a wire format: it never leaves the process.  The unpacker still
 * checks every byte (the device's output is read, not trusted).
 */
#ifndef DC_KERNELS_LISTPACK_H
#define DC_KERNELS_LISTPACK_H

#include "util/dc_util.h"

#include <stddef.h>
#include <stdint.h>

/** Largest packed size of count ranks or words (+ 8: the device's nibble
 *  writes round up to whole 4-byte words). */
static inline size_t dc_listpack_bound(size_t count)
{
    return count * 5 + 8;
}

/**
 * The CPU reference: pack the count ranks rnk[k] of classes cls[k] (< K;
 * cls NULL: all class 0, K must be 1) into out (cap >= dc_listpack_bound)
 * as above, the gaps as byte varints or (nibbles) as nibble varints
 * (dc_listpack_words below); *len the bytes written, ccnt[0..K) the
 * changes per class.  DC_ERR_INVALID for a class >= K.
 */
dc_status_t dc_listpack(const uint8_t *cls, const uint32_t *rnk, size_t count, unsigned K,
                        int nibbles, uint8_t *out, size_t cap, size_t *len, uint64_t *ccnt);

/**
 * Unpack len bytes of src (byte or, nibbles, nibble varints), ccnt[0..K)
 * ranks per class, into idx[0..count)
 * (grouped by class, each class increasing).  DC_ERR_FORMAT when the
 * bytes do not hold exactly that: counts that do not sum to count, a
 * truncated or overlong varint, a rank past 2^32 - 1, bytes left over.
 */
dc_status_t dc_listunpack(const uint8_t *src, size_t len, const uint64_t *ccnt, unsigned K,
                          int nibbles, uint32_t *idx, size_t count);

/**
 * A word histogram's counts as dc_kern_cuda_word_hist packs them (LEB128
 * varints of count - 1): into cnt[0..*nsym) (cnt holds count entries).
 * DC_ERR_FORMAT unless they are whole varints of at most 32 bits whose
 * counts sum to count exactly.
 */
dc_status_t dc_listunpack_counts(const uint8_t *src, size_t len, size_t count, uint32_t *cnt,
                                 size_t *nsym);

/**
 * Words of w (1, 2 or 4) bytes (little-endian) as varints of their
 * values: byte varints (LEB128), or with nibbles nibble varints (each
 * nibble 3 bits of the value, least significant first, and in its top bit
 * whether another follows; two nibbles a byte, the first in the low half;
 * an odd count ends with a zero nibble): a word under 8 in half a byte.
 * dc_listpack_words, the CPU reference of dc_kern_cuda_pack_words, into
 * out (cap >= dc_listpack_bound(count)); dc_listunpack_words back into
 * count words at out, DC_ERR_FORMAT unless the bytes are exactly count
 * varints of values that fit w bytes.
 */
dc_status_t dc_listpack_words(const void *words, size_t count, unsigned w, int nibbles,
                              uint8_t *out, size_t cap, size_t *len);
dc_status_t dc_listunpack_words(const uint8_t *src, size_t len, size_t count, unsigned w,
                                int nibbles, void *out);

#endif /* DC_KERNELS_LISTPACK_H */
