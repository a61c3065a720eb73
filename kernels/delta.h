/*
 * delta.h - delta files: a file header, the target checkpoint's header
 * (stored, compressed, or named as the base's own), then the changed chunks.
 *
 * File layout (little-endian):
 *
 *   off size field
 *   --- ---- -----------------------------------------------------------
 *     0    8 magic "DCDELTA\0"
 *     8    4 version (1 or 2; DC_DELTA_VERSION is what diff writes)
 *    12    4 flags (v1: 0; v2: DC_DELTA_F_*; unknown bits rejected)
 *    16    8 chunk_size: dense bytes per chunk used to cut every tensor
 *    24    8 base file size
 *    32   16 base checkpoint digest (see dc_ckpt_digest)
 *    48    8 target file size
 *    56   16 target checkpoint digest
 *    72    8 target header length H (the raw safetensors header: 8-byte
 *            length + JSON + padding, exactly as in the target file)
 *    80    8 frame count (v2: records)
 *    88    8 frames bytes (v1: sum of 96 + payload_len over all frames;
 *            v2: bytes of all record groups)
 *    96    4 CRC32C of the target header bytes as stored (v2 TH_ZSTD: of
 *            the S compressed bytes; TH_BASE: of the base's H header bytes)
 *   100    8 v2: S, target header bytes stored in the file (v1: 0)
 *   108   16 reserved (0)
 *   124    4 CRC32C of bytes 0..123
 *   128      v1: the H target header bytes; v2: S stored bytes:
 *              flags & DC_DELTA_F_TH_BASE: S = 0, the target header is
 *                byte for byte the base's header (the reader is given the
 *                base, checks its length is H and its CRC32C the one at 96;
 *                else DC_ERR_WRONG_BASE);
 *              flags & DC_DELTA_F_TH_ZSTD: one zstd frame that decompresses
 *                to exactly H bytes;
 *              neither: the H bytes (S = H).
 * 128+S      v1: frames (frame.h headers + payloads); v2: record groups.
 *            The file ends exactly after the last frame / group.
 *
 * Version 2 records.  A frame's header in a file is mostly derivable: its
 * tensor, chunk index, element range and dtype follow from the chunk grid
 * of the target header, versions, type and flags are 0.  A v2 file stores
 * per changed chunk only what is not (varints are unsigned LEB128, at most
 * 10 bytes, minimal: a last byte of 0 is refused):
 *
 *   group   := varint n (1..DC_DELTA_GROUP_MAX records)
 *              n x record
 *              u32 CRC32C of the group's bytes so far (n and the records)
 *              the n payloads, in record order
 *              u32 CRC32C of the n payloads concatenated
 *   record  := varint skip     global chunk index - (previous record's + 1)
 *                              (the file's first record: its index), so
 *                              indexes strictly increase by construction
 *              u8 code         d | kind << 1 | p << 4 | v << 6: the frame's
 *                              encoding (frame.h) in one byte: kind (1..5),
 *                              positions method p (0 none, 1 Golomb, 2 rANS
 *                              gaps; 3 refused), values method v (raw, zstd,
 *                              rans, planes); d = 1: a digest follows
 *              varint len      payload bytes (<= DC_FRAME_MAX_PAYLOAD)
 *              [16 bytes]      d = 1: the chunk's target digest (XXH3-128 lo, hi)
 *
 * The writer puts each record with a payload of DC_DELTA_GROUP_SMALL bytes
 * or more in a group of its own, and collects smaller ones into groups of
 * up to DC_DELTA_GROUP_MAX records or about DC_DELTA_GROUP_BYTES of
 * payload; it stores a chunk's digest when the chunk has at least
 * dc_delta_digest_min bytes (1 MiB).  Global chunk index g is chunk
 * g - gstart[t] of tensor t (dc_grid_t below).
 *
 * What is verified when (v2):
 *  - dc_delta_reader_init: file header CRC, version, flags, sizes, the
 *    CRC32C at 96 (of the stored bytes, before decompressing them; a
 *    TH_BASE delta: of the base's header), and the target header's
 *    safetensors rules (the target checkpoint digest covers its bytes).
 *  - dc_delta_reader_next, on entering a group, before any record of it is
 *    handed out: every varint and length of the group in bounds, the group
 *    header CRC (DC_ERR_CORRUPT), and for n > 1 the payload CRC
 *    (DC_ERR_CORRUPT).  Per record: its chunk index < G (DC_ERR_FORMAT),
 *    the synthesized header through dc_frame_decode's checks (encoding kind
 *    and methods).  It hands out payload_crc = the stored group payload CRC
 *    for n = 1 (the caller's dc_frame_check_payload verifies it, as for v1)
 *    and the CRC32C of the payload for n > 1 (already verified as a group).
 *  - apply: per record, the chunk fits the target layout and a kind that
 *    needs the base has a matched base tensor; every chunk of an unmatched
 *    tensor has a record; then every chunk's result is hashed: a record's
 *    digest, when it has one, is compared at once; the target checkpoint
 *    digest, which covers every chunk (with or without a record) and the
 *    header, is compared after all chunks.  A chunk without a digest is
 *    thus checked only as part of the whole target: a corrupt or wrong-base
 *    delta still never gives exit 0 (apply_files writes a temporary file
 *    renamed into place only after the checkpoint digest verified, also
 *    when applying "in place" over the base, so the base is never touched
 *    by a failing apply; apply_buffers writes only the caller's `out`,
 *    which must not overlap the base).  What a missing digest loses is the
 *    early, per-chunk error message, nothing of the guarantee.
 *
 * Chunk grid: a tensor of n elements of w bytes is cut into chunks of
 * ce = max(1, chunk_size / w) elements; chunk k covers [k*ce, min(n,(k+1)*ce)).
 * A chunk of a tensor that exists in the base with the same name, dtype and
 * element count ("matched") may be absent from the delta: its bytes are
 * unchanged.  Every chunk of an unmatched tensor (new, re-typed or resized)
 * has a PUT_DENSE frame.  Removed tensors and a changed __metadata__ need no
 * frames: the target header travels in the file (v2: or is the base's).
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
 * (v2: of the records that carry one) and the target checkpoint digest
 * (which covers the chunks without a frame, copied from the base, and the
 * header) are verified.  Only when one fails is the base hashed: a base
 * digest other than the delta's is DC_ERR_WRONG_BASE ("... made for a
 * different base"), else the delta is corrupt (DC_ERR_VERIFY).  So a wrong
 * base is refused whenever it changes the result; a base that differs from
 * the delta's only in bytes the delta does not use (chunks it overwrites
 * whole with PUT_DENSE, words PUT_SPARSE overwrites, tensors the target
 * drops, the header) yields the exact, verified target.
 */
#ifndef DC_DELTA_H
#define DC_DELTA_H

#include "kernels/codec.h"
#include "kernels/frame.h"
#include "kernels/safetensors.h"
#include "util/dc_util.h"

#define DC_DELTA_MAGIC "DCDELTA"
#define DC_DELTA_VERSION     2
#define DC_DELTA_VERSION_MIN 1
#define DC_DELTA_HEADER_SIZE 128
/* v2 header flags */
#define DC_DELTA_F_TH_BASE 0x1u /* target header = the base's (not stored) */
#define DC_DELTA_F_TH_ZSTD 0x2u /* target header stored as one zstd frame */
#define DC_DELTA_F_KNOWN   0x3u
/* v2 record groups */
#define DC_DELTA_GROUP_MAX   4096u       /* records in a group */
#define DC_DELTA_GROUP_SMALL 4096u       /* payloads below this are grouped */
#define DC_DELTA_GROUP_BYTES (64u << 10) /* a group closes at this much payload */

/** Chunks of at least this many bytes carry their target digest in v2
 *  records (1 MiB; tests lower it to exercise digests on small chunks). */
extern uint64_t dc_delta_digest_min;

typedef struct dc_delta_info {
    uint32_t version, flags;
    uint64_t chunk_size;
    uint64_t base_size, target_size;
    dc_digest_t base_digest, target_digest;
    uint64_t target_header_len;
    uint64_t frame_count;
    uint64_t frames_bytes;
    uint64_t target_header_stored; /* S: bytes the header takes in the file */
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
    const uint8_t *target_header; /* info.target_header_len bytes; NULL: not
                                     known (a TH_BASE delta read without base) */
    size_t off;                   /* next frame (v2: next group) */
    uint64_t frames_read;
    /* v2 */
    uint8_t *th_owned; /* decompressed target header */
    dc_st_file_t *lay; /* target layout (the chunk grid) */
    void *lay_map;
    uint64_t G, next_g;     /* chunks of the grid; next record's least index */
    size_t cur_t;           /* cursor: tensor of the last record */
    uint64_t cur_g0, cur_n; /* its first global chunk and chunk count */
    uint32_t grp_left, grp_n, grp_crc;
    size_t grp_hp, grp_pp, grp_end; /* next record header, next payload, group end */
} dc_delta_reader_t;

/** Validate the file header, the target header (its CRC, and for v2 its
 *  safetensors rules) and the total length.  DC_ERR_FORMAT names the
 *  problem ("not a delta file", "truncated", "version N is not supported
 *  ...").  Release with dc_delta_reader_free (also after a failed init).
 *  A v2 delta whose target header is its base's (DC_DELTA_F_TH_BASE) is
 *  read this way only as far as its file header: dc_delta_reader_next and
 *  dc_delta_layout refuse it (DC_ERR_INVALID, "needs its base"); use
 *  dc_delta_reader_init_base. */
dc_status_t dc_delta_reader_init(dc_delta_reader_t *r, const uint8_t *buf, size_t len);
/** The same, given the base checkpoint the delta applies to (NULL: as
 *  dc_delta_reader_init): a TH_BASE delta takes the base's header as its
 *  target header, refused with DC_ERR_WRONG_BASE when the base's header is
 *  not the one the delta names (length and CRC32C).  `base` must outlive
 *  the reader. */
dc_status_t dc_delta_reader_init_base(dc_delta_reader_t *r, const uint8_t *buf, size_t len,
                                      const dc_st_file_t *base);
void dc_delta_reader_free(dc_delta_reader_t *r);
/** Next frame: *h validated (dc_frame_decode's checks; for v2 synthesized
 *  from the record and the chunk grid, h->no_digest set when the record
 *  carries no digest), *payload points at h->payload_len bytes inside the
 *  image (CRC not yet checked: dc_frame_check_payload).  *done = 1 and
 *  DC_OK after the last frame. */
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
