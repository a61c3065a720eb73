/*
 * delta.h - delta files: a file header, the target checkpoint's header
 * bytes, then frames (frame.h) in (tensor, chunk) order.
 *
 * File layout (little-endian):
 *
 *   off size field
 *   --- ---- -----------------------------------------------------------
 *     0    8 magic "DCDELTA\0"
 *     8    4 version (1)
 *    12    4 flags (0; unknown bits rejected)
 *    16    8 chunk_size: dense bytes per chunk used to cut every tensor
 *    24    8 base file size
 *    32   16 base checkpoint digest (see dc_ckpt_digest)
 *    48    8 target file size
 *    56   16 target checkpoint digest
 *    72    8 target header length H (the raw safetensors header: 8-byte
 *            length + JSON + padding, exactly as in the target file)
 *    80    8 frame count
 *    88    8 frames bytes (sum of 96 + payload_len over all frames)
 *    96    4 CRC32C of the target header bytes
 *   100   24 reserved (0)
 *   124    4 CRC32C of bytes 0..123
 *   128    H target header bytes
 * 128+H      frames; the file ends exactly after the last frame.
 *
 * Chunk grid: a tensor of n elements of w bytes is cut into chunks of
 * ce = max(1, chunk_size / w) elements; chunk k covers [k*ce, min(n,(k+1)*ce)).
 * A chunk of a tensor that exists in the base with the same name, dtype and
 * element count ("matched") may be absent from the delta: its bytes are
 * unchanged.  Every chunk of an unmatched tensor (new, re-typed or resized)
 * has a PUT_DENSE frame.  Removed tensors and a changed __metadata__ need no
 * frames: the target header travels in the file.
 *
 * Checkpoint digest (of a safetensors file, for a chunk size cs):
 *   XXH3-128 over  "DCCKPT1\0" || u64 file size || u64 cs
 *                  || XXH3-128(raw header bytes: length + JSON + padding)
 *                  || XXH3-128(chunk) for every chunk of the grid above,
 *                     tensors in data-offset order, 16 bytes (lo, hi) each.
 * The tensors cover the data region exactly (safetensors validation), so
 * every byte of the file is covered.  Chunk digests are computed in
 * parallel and are the same digests the frames carry, so diff gets both
 * checkpoint digests while it touches each chunk anyway (one pass over the
 * base and one over the target).
 *
 * apply refuses a base of another size (DC_ERR_WRONG_BASE) up front, then
 * builds the target hashing only the result: every frame's chunk digest
 * and the target checkpoint digest (which covers the chunks without a
 * frame, copied from the base, and the header) are verified.  Only when
 * one fails is the base hashed: a base digest other than the delta's is
 * DC_ERR_WRONG_BASE ("... made for a different base"), else the delta is
 * corrupt (DC_ERR_VERIFY).  So a wrong base is refused whenever it changes
 * the result; a base that differs from the delta's only in bytes the delta
 * does not use (chunks it overwrites whole with PUT_DENSE, words PUT_SPARSE
 * overwrites, tensors the target drops, the header) yields the exact,
 * verified target.
 */
#ifndef DC_DELTA_H
#define DC_DELTA_H

#include "kernels/codec.h"
#include "kernels/frame.h"
#include "kernels/safetensors.h"
#include "util/dc_util.h"

#define DC_DELTA_MAGIC "DCDELTA"
#define DC_DELTA_VERSION 1
#define DC_DELTA_HEADER_SIZE 128

typedef struct dc_delta_info {
    uint64_t chunk_size;
    uint64_t base_size, target_size;
    dc_digest_t base_digest, target_digest;
    uint64_t target_header_len;
    uint64_t frame_count;
    uint64_t frames_bytes;
} dc_delta_info_t;

/** The chunk grid of a checkpoint: chunk gstart[i] .. gstart[i+1]-1 are
 *  tensor i's chunks; G chunks in all. */
typedef struct dc_grid {
    uint64_t *gstart; /* nt + 1 entries */
    size_t nt;
    uint64_t G;
    uint64_t cs;
} dc_grid_t;
dc_status_t dc_grid_init(dc_grid_t *g, const dc_st_file_t *f, uint64_t chunk_size);
void dc_grid_free(dc_grid_t *g);
/** Tensor index of global chunk gi (< G). */
size_t dc_grid_tensor(const dc_grid_t *g, uint64_t gi);

/** Checkpoint digest of an open checkpoint (threads: 0 = all CPUs). */
dc_status_t dc_ckpt_digest(const dc_st_file_t *f, uint64_t chunk_size, unsigned threads,
                           dc_digest_t *out);
/** The checkpoint digest from its G chunk digests (in grid order). */
dc_status_t dc_ckpt_digest_finish(const dc_st_file_t *f, uint64_t chunk_size,
                                  const dc_digest_t *chunk_digests, uint64_t G,
                                  dc_digest_t *out);

/** Streaming reader over a delta image in memory (e.g. a mapping). */
typedef struct dc_delta_reader {
    const uint8_t *buf;
    size_t len;
    dc_delta_info_t info;
    const uint8_t *target_header; /* info.target_header_len bytes */
    size_t off;                   /* next frame */
    uint64_t frames_read;
} dc_delta_reader_t;

/** Validate the file header and the target header CRC, and the total
 *  length.  DC_ERR_FORMAT names the problem ("not a delta file",
 *  "truncated", ...). */
dc_status_t dc_delta_reader_init(dc_delta_reader_t *r, const uint8_t *buf, size_t len);
/** Next frame: *h validated (dc_frame_decode), *payload points at
 *  h->payload_len bytes inside the image (CRC not yet checked).  *done = 1
 *  and DC_OK after the last frame. */
dc_status_t dc_delta_reader_next(dc_delta_reader_t *r, dc_frame_hdr_t *h,
                                 const uint8_t **payload, int *done);

/** Layout of the target checkpoint described by a delta: validates the
 *  target header (safetensors rules) against the target size.  The handle
 *  has no data (an untouched anonymous mapping); close with dc_st_close and
 *  then dc_delta_layout_free(map). */
dc_status_t dc_delta_layout(const dc_delta_reader_t *r, dc_st_file_t **out, void **map);
void dc_delta_layout_free(const dc_delta_reader_t *r, void *map);

/** Bytes of the largest chunk of f's tensors cut at chunk_size (at least
 *  DC_CODEC_MIN_CHUNK): what a codec context for them needs.  A delta
 *  header's chunk_size alone may claim far more than any tensor holds. */
uint64_t dc_delta_max_chunk_bytes(const dc_st_file_t *f, uint64_t chunk_size);

/** Elements per chunk of a w-byte dtype for a chunk size. */
static inline uint64_t dc_delta_chunk_elems(uint64_t chunk_size, unsigned w)
{
    uint64_t ce = chunk_size / w;
    return ce ? ce : 1;
}

#endif /* DC_DELTA_H */
