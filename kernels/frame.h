/*
 * frame.h - the frame header: one chunk's encoded form on the wire and in
 * delta files.
 *
 * A frame is a fixed 96-byte little-endian header followed by
 * `payload_len` bytes of payload (see codec.h for the payload).  The same
 * header is used by delta files (kernels/delta.h), the engine and every
 * transport, so it is self-describing and checked on its own:
 *
 *   off size field            meaning
 *   --- ---- ---------------- -------------------------------------------
 *     0    4 magic            0x46434444 ("DDCF" in memory)
 *     4    2 version          DC_FRAME_VERSION (1)
 *     6    1 type             dc_frame_type_t (CHUNK, or control types)
 *     7    1 flags            DC_FRAME_F_* bits; unknown bits rejected
 *     8    4 tensor_id        index of the tensor in the TARGET checkpoint
 *    12    4 chunk_index      chunk number within the tensor
 *    16    8 elem_offset      first element of the chunk (canonical coords)
 *    24    8 elem_count       elements in the chunk (< 2^32)
 *    32    1 dtype            dc_dtype_t of the tensor (kernels/safetensors.h)
 *    33    1 reserved0        0
 *    34    2 encoding         chunk encoding: bits 0-3 DC_ENC_* kind,
 *                             bits 4-7 positions method (0 for the dense
 *                             kinds and ctx-sparse, whose payload names
 *                             its own per class), bits 8-11 values method
 *                             (kernels/entropy.h DC_ENT_*), 12-15 zero
 *    36    4 payload_len      bytes of payload after the header
 *    40    8 baseline_version version the delta applies to (0 = file delta)
 *    48    8 target_version   version the chunk produces
 *    56    4 payload_crc      CRC32C of the payload (checked per hop)
 *    60    4 reserved1        0
 *    64   16 target_digest    XXH3-128 (lo, hi) of the chunk's target bytes
 *    80   12 reserved2        0
 *    92    4 header_crc       CRC32C of bytes 0..91
 *
 * Validation (dc_frame_decode) checks, before any payload byte is used:
 * the header CRC, magic, version, type, flags, dtype, encoding (kind and
 * methods known; a kind that needs positions names the Golomb method),
 * elem_count in 1..2^32-1, elem_offset + elem_count without overflow,
 * payload_len <= DC_FRAME_MAX_PAYLOAD, reserved fields zero.  The payload
 * CRC is checked separately with dc_frame_check_payload().
 */
#ifndef DC_FRAME_H
#define DC_FRAME_H

#include "kernels/kern.h"
#include "util/dc_util.h"

#define DC_FRAME_MAGIC 0x46434444u
#define DC_FRAME_VERSION 1
#define DC_FRAME_HEADER_SIZE 96
/* A chunk is at most DC_CODEC_MAX_CHUNK (256 MiB); its payload never
 * exceeds the chunk plus coding overhead. */
#define DC_FRAME_MAX_PAYLOAD (300u * 1024u * 1024u)

typedef enum dc_frame_type {
    DC_FRAME_CHUNK = 1, /* a chunk of a tensor */
    DC_FRAME_TYPE_MAX = 1,
} dc_frame_type_t;

/* flags */
#define DC_FRAME_F_LAST 0x01u /* last frame of a version */
#define DC_FRAME_F_KNOWN 0x01u

/* encoding kinds (bits 0-3 of `encoding`) */
typedef enum dc_enc_kind {
    DC_ENC_XOR_SPARSE = 1, /* positions + XOR words; applied to baseline */
    DC_ENC_PUT_SPARSE = 2, /* positions + new values; applied to baseline */
    DC_ENC_XOR_DENSE = 3,  /* XOR of every element; applied to baseline */
    DC_ENC_PUT_DENSE = 4,  /* every new byte; needs no baseline */
    DC_ENC_CTX = 5,        /* positions by base-magnitude class + XOR words,
                              steps or new words (kernels/ctx.h); applied to
                              baseline */
    DC_ENC_KIND_MAX = 5,
} dc_enc_kind_t;

static inline unsigned dc_enc_kind(uint16_t enc) { return enc & 0xfu; }
static inline unsigned dc_enc_pos_method(uint16_t enc) { return (enc >> 4) & 0xfu; }
static inline unsigned dc_enc_val_method(uint16_t enc) { return (enc >> 8) & 0xfu; }
static inline uint16_t dc_enc_make(unsigned kind, unsigned pos_m, unsigned val_m)
{
    return (uint16_t)((kind & 0xfu) | ((pos_m & 0xfu) << 4) | ((val_m & 0xfu) << 8));
}
/** "xor-sparse", "put-sparse", "xor-dense", "put-dense", "ctx-sparse" or "?". */
const char *dc_enc_kind_name(unsigned kind);
/** 1 when the kind is applied on top of the baseline bytes. */
static inline int dc_enc_needs_base(unsigned kind) { return kind != DC_ENC_PUT_DENSE; }

typedef struct dc_frame_hdr {
    uint8_t type;
    uint8_t flags;
    uint8_t dtype;
    uint16_t encoding;
    uint32_t tensor_id;
    uint32_t chunk_index;
    uint64_t elem_offset;
    uint64_t elem_count;
    uint64_t baseline_version;
    uint64_t target_version;
    uint32_t payload_len;
    uint32_t payload_crc;
    dc_digest_t target_digest;
    /* Not on the wire (dc_frame_encode ignores it, dc_frame_decode sets 0):
     * 1 for a delta file v2 record that carries no digest (target_digest is
     * 0; the chunk is covered by the file's target checkpoint digest only,
     * kernels/delta.h). */
    uint8_t no_digest;
} dc_frame_hdr_t;

/** Serialize h into out[DC_FRAME_HEADER_SIZE] (computes the header CRC). */
void dc_frame_encode(const dc_frame_hdr_t *h, uint8_t out[DC_FRAME_HEADER_SIZE]);

/** Parse and validate `len` bytes (must be >= DC_FRAME_HEADER_SIZE).
 *  DC_ERR_FORMAT with a detail naming the bad field; *h untouched then. */
dc_status_t dc_frame_decode(const uint8_t *buf, size_t len, dc_frame_hdr_t *h);

/** DC_ERR_CORRUPT when CRC32C(payload) != h->payload_crc or the length
 *  differs. */
dc_status_t dc_frame_check_payload(const dc_frame_hdr_t *h, const uint8_t *payload,
                                   size_t len);

#endif /* DC_FRAME_H */
