/* frame.c - frame header encode / decode / validate. */
#include "kernels/frame.h"

#include "kernels/entropy.h"
#include "kernels/safetensors.h"

const char *dc_enc_kind_name(unsigned kind)
{
    switch (kind) {
    case DC_ENC_XOR_SPARSE:
        return "xor-sparse";
    case DC_ENC_PUT_SPARSE:
        return "put-sparse";
    case DC_ENC_XOR_DENSE:
        return "xor-dense";
    case DC_ENC_PUT_DENSE:
        return "put-dense";
    case DC_ENC_CTX:
        return "ctx-sparse";
    default:
        return "?";
    }
}

void dc_frame_encode(const dc_frame_hdr_t *h, uint8_t out[DC_FRAME_HEADER_SIZE])
{
    memset(out, 0, DC_FRAME_HEADER_SIZE);
    dc_store_le32(out + 0, DC_FRAME_MAGIC);
    dc_store_le16(out + 4, DC_FRAME_VERSION);
    out[6] = h->type;
    out[7] = h->flags;
    dc_store_le32(out + 8, h->tensor_id);
    dc_store_le32(out + 12, h->chunk_index);
    dc_store_le64(out + 16, h->elem_offset);
    dc_store_le64(out + 24, h->elem_count);
    out[32] = h->dtype;
    dc_store_le16(out + 34, h->encoding);
    dc_store_le32(out + 36, h->payload_len);
    dc_store_le64(out + 40, h->baseline_version);
    dc_store_le64(out + 48, h->target_version);
    dc_store_le32(out + 56, h->payload_crc);
    dc_store_le64(out + 64, h->target_digest.lo);
    dc_store_le64(out + 72, h->target_digest.hi);
    dc_store_le32(out + 92, dc_crc32c(0, out, 92));
}

static int dc_all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

dc_status_t dc_frame_decode(const uint8_t *b, size_t len, dc_frame_hdr_t *out)
{
    if (!b || len < DC_FRAME_HEADER_SIZE)
        return dc_error(DC_ERR_FORMAT, "frame header truncated (%zu of %d bytes)", len,
                        DC_FRAME_HEADER_SIZE);
    if (dc_load_le32(b) != DC_FRAME_MAGIC)
        return dc_error(DC_ERR_FORMAT, "bad frame magic 0x%08x", dc_load_le32(b));
    uint32_t crc = dc_crc32c(0, b, 92);
    if (crc != dc_load_le32(b + 92))
        return dc_error(DC_ERR_FORMAT, "frame header CRC mismatch");
    if (dc_load_le16(b + 4) != DC_FRAME_VERSION)
        return dc_error(DC_ERR_FORMAT, "unsupported frame version %u", dc_load_le16(b + 4));
    dc_frame_hdr_t h;
    memset(&h, 0, sizeof(h));
    h.type = b[6];
    h.flags = b[7];
    h.tensor_id = dc_load_le32(b + 8);
    h.chunk_index = dc_load_le32(b + 12);
    h.elem_offset = dc_load_le64(b + 16);
    h.elem_count = dc_load_le64(b + 24);
    h.dtype = b[32];
    h.encoding = dc_load_le16(b + 34);
    h.payload_len = dc_load_le32(b + 36);
    h.baseline_version = dc_load_le64(b + 40);
    h.target_version = dc_load_le64(b + 48);
    h.payload_crc = dc_load_le32(b + 56);
    h.target_digest.lo = dc_load_le64(b + 64);
    h.target_digest.hi = dc_load_le64(b + 72);
    if (h.type < 1 || h.type > DC_FRAME_TYPE_MAX)
        return dc_error(DC_ERR_FORMAT, "unknown frame type %u", h.type);
    if (h.flags & ~DC_FRAME_F_KNOWN)
        return dc_error(DC_ERR_FORMAT, "unknown frame flags 0x%02x", h.flags);
    if (h.dtype >= DC_DTYPE_COUNT)
        return dc_error(DC_ERR_FORMAT, "unknown dtype %u in frame", h.dtype);
    if (b[33] != 0 || !dc_all_zero(b + 60, 4) || !dc_all_zero(b + 80, 12))
        return dc_error(DC_ERR_FORMAT, "frame reserved field not zero");
    unsigned kind = dc_enc_kind(h.encoding), pm = dc_enc_pos_method(h.encoding),
             vm = dc_enc_val_method(h.encoding);
    if (kind < 1 || kind > DC_ENC_KIND_MAX || (h.encoding >> 12) != 0)
        return dc_error(DC_ERR_FORMAT, "unknown frame encoding 0x%04x", h.encoding);
    int sparse = kind == DC_ENC_XOR_SPARSE || kind == DC_ENC_PUT_SPARSE;
    if ((sparse && pm != DC_ENT_GOLOMB && pm != DC_ENT_GAPS) || (!sparse && pm != 0) ||
        vm > DC_ENT_PLANES)
        return dc_error(DC_ERR_FORMAT, "bad stream methods in frame encoding 0x%04x",
                        h.encoding);
    if (h.elem_count == 0 || h.elem_count > UINT32_MAX)
        return dc_error(DC_ERR_FORMAT, "frame element count %llu out of range",
                        (unsigned long long)h.elem_count);
    uint64_t endel;
    if (!dc_add_u64(h.elem_offset, h.elem_count, &endel))
        return dc_error(DC_ERR_FORMAT, "frame element range overflows");
    if (h.payload_len > DC_FRAME_MAX_PAYLOAD)
        return dc_error(DC_ERR_FORMAT, "frame payload length %u too large", h.payload_len);
    *out = h;
    return DC_OK;
}

dc_status_t dc_frame_check_payload(const dc_frame_hdr_t *h, const uint8_t *payload, size_t len)
{
    if (len != h->payload_len)
        return dc_error(DC_ERR_CORRUPT, "frame payload is %zu bytes, header says %u", len,
                        h->payload_len);
    uint32_t c = dc_crc32c(0, payload, len);
    if (c != h->payload_crc)
        return dc_error(DC_ERR_CORRUPT,
                        "frame payload CRC32C mismatch (tensor %u chunk %u): 0x%08x != 0x%08x",
                        h->tensor_id, h->chunk_index, c, h->payload_crc);
    return DC_OK;
}
