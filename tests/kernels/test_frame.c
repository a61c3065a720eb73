/*
 * test_frame.c - the frame header: round trip, fixed layout, and rejection
 * of every field out of range, every flipped bit, truncation and a bad
 * payload CRC.
 */
#include <criterion/criterion.h>

#include "kernels/entropy.h"
#include "kernels/frame.h"
#include "kernels/safetensors.h"

#include <string.h>

static dc_frame_hdr_t sample(void)
{
    dc_frame_hdr_t h = {
        .type = DC_FRAME_CHUNK,
        .flags = DC_FRAME_F_LAST,
        .dtype = DC_DTYPE_BF16,
        .encoding = dc_enc_make(DC_ENC_XOR_SPARSE, DC_ENT_GOLOMB, DC_ENT_RANS),
        .tensor_id = 7,
        .chunk_index = 3,
        .elem_offset = 3u << 21,
        .elem_count = 1u << 21,
        .baseline_version = 41,
        .target_version = 42,
        .payload_len = 12345,
        .payload_crc = 0xdeadbeef,
        .target_digest = {0x0123456789abcdefull, 0xfedcba9876543210ull},
    };
    return h;
}

static void reseal(uint8_t *b)
{
    dc_store_le32(b + 92, dc_crc32c(0, b, 92));
}

Test(frame, roundtrip_and_layout)
{
    dc_frame_hdr_t h = sample(), g;
    uint8_t b[DC_FRAME_HEADER_SIZE];
    dc_frame_encode(&h, b);
    cr_assert_eq(dc_load_le32(b), DC_FRAME_MAGIC);
    cr_assert_eq(dc_load_le16(b + 4), DC_FRAME_VERSION);
    cr_assert_eq(dc_load_le32(b + 8), 7);
    cr_assert_eq(dc_load_le64(b + 16), 3u << 21);
    cr_assert_eq(dc_load_le32(b + 36), 12345);
    cr_assert_eq(dc_load_le64(b + 64), 0x0123456789abcdefull);
    cr_assert_eq(dc_frame_decode(b, sizeof(b), &g), DC_OK, "%s", dc_last_error());
    cr_assert_eq(g.type, h.type);
    cr_assert_eq(g.flags, h.flags);
    cr_assert_eq(g.dtype, h.dtype);
    cr_assert_eq(g.encoding, h.encoding);
    cr_assert_eq(g.tensor_id, h.tensor_id);
    cr_assert_eq(g.chunk_index, h.chunk_index);
    cr_assert_eq(g.elem_offset, h.elem_offset);
    cr_assert_eq(g.elem_count, h.elem_count);
    cr_assert_eq(g.baseline_version, h.baseline_version);
    cr_assert_eq(g.target_version, h.target_version);
    cr_assert_eq(g.payload_len, h.payload_len);
    cr_assert_eq(g.payload_crc, h.payload_crc);
    cr_assert(dc_digest_eq(g.target_digest, h.target_digest));
}

Test(frame, every_flipped_bit_and_truncation_rejected)
{
    dc_frame_hdr_t h = sample(), g;
    memset(&g, 0x5a, sizeof(g));
    dc_frame_hdr_t g0 = g;
    uint8_t b[DC_FRAME_HEADER_SIZE], c[DC_FRAME_HEADER_SIZE];
    dc_frame_encode(&h, b);
    for (size_t i = 0; i < sizeof(b) * 8; i++) {
        memcpy(c, b, sizeof(b));
        c[i / 8] ^= (uint8_t)(1u << (i % 8));
        cr_assert_eq(dc_frame_decode(c, sizeof(c), &g), DC_ERR_FORMAT, "bit %zu", i);
        cr_assert_eq(memcmp(&g, &g0, sizeof(g)), 0, "output written on failure");
    }
    for (size_t n = 0; n < sizeof(b); n++)
        cr_assert_eq(dc_frame_decode(b, n, &g), DC_ERR_FORMAT);
    cr_assert_eq(dc_frame_decode(NULL, 96, &g), DC_ERR_FORMAT);
}

/* Fields out of range, with a valid header CRC so the field check itself
 * is what rejects them. */
Test(frame, fields_out_of_range_rejected)
{
    dc_frame_hdr_t h = sample(), g;
    uint8_t b[DC_FRAME_HEADER_SIZE], c[DC_FRAME_HEADER_SIZE];
    dc_frame_encode(&h, b);
    struct {
        size_t off;
        unsigned size;
        uint64_t val;
        const char *what;
    } cases[] = {
        {0, 4, 0x12345678, "magic"},
        {4, 2, 2, "version"},
        {6, 1, 0, "type"},
        {6, 1, 9, "type"},
        {7, 1, 0x80, "flags"},
        {7, 1, 0x02, "flags"},
        {24, 8, 0, "elem_count zero"},
        {24, 8, 1ull << 32, "elem_count"},
        {16, 8, UINT64_MAX, "elem_offset overflow"},
        {32, 1, DC_DTYPE_COUNT, "dtype"},
        {32, 1, 255, "dtype"},
        {33, 1, 1, "reserved0"},
        {34, 2, 0, "encoding kind 0"},
        {34, 2, 5 | (DC_ENT_GOLOMB << 4), "encoding kind 5"},
        {34, 2, 0x1000 | DC_ENC_XOR_SPARSE | (DC_ENT_GOLOMB << 4), "encoding high bits"},
        {34, 2, DC_ENC_XOR_SPARSE, "sparse without positions method"},
        {34, 2, DC_ENC_XOR_SPARSE | ((DC_ENT_GAPS + 1) << 4), "positions method 6"},
        {34, 2, DC_ENC_PUT_DENSE | (DC_ENT_GAPS << 4), "dense with gaps positions"},
        {34, 2, DC_ENC_XOR_DENSE | (DC_ENT_GOLOMB << 4), "dense with positions method"},
        {34, 2, DC_ENC_PUT_DENSE | (9 << 8), "values method"},
        {36, 4, DC_FRAME_MAX_PAYLOAD + 1ull, "payload_len"},
        {60, 4, 1, "reserved1"},
        {80, 4, 1, "reserved2"},
        {88, 4, 1, "reserved2 end"},
    };
    for (size_t k = 0; k < DC_ARRAY_SIZE(cases); k++) {
        memcpy(c, b, sizeof(b));
        uint8_t v[8];
        dc_store_le64(v, cases[k].val);
        memcpy(c + cases[k].off, v, cases[k].size);
        reseal(c);
        cr_assert_eq(dc_frame_decode(c, sizeof(c), &g), DC_ERR_FORMAT, "%s accepted",
                     cases[k].what);
        cr_assert(strlen(dc_last_error()) > 5);
    }
    /* and the limits that are fine; gaps positions */
    memcpy(c, b, sizeof(b));
    dc_store_le16(c + 34, dc_enc_make(DC_ENC_PUT_SPARSE, DC_ENT_GAPS, DC_ENT_RANS));
    reseal(c);
    cr_assert_eq(dc_frame_decode(c, sizeof(c), &g), DC_OK, "%s", dc_last_error());
    memcpy(c, b, sizeof(b));
    dc_store_le64(c + 24, UINT32_MAX);
    dc_store_le32(c + 36, DC_FRAME_MAX_PAYLOAD);
    reseal(c);
    cr_assert_eq(dc_frame_decode(c, sizeof(c), &g), DC_OK, "%s", dc_last_error());
}

Test(frame, payload_crc)
{
    uint8_t pay[1000];
    for (size_t i = 0; i < sizeof(pay); i++)
        pay[i] = (uint8_t)(i * 31);
    dc_frame_hdr_t h = sample();
    h.payload_len = sizeof(pay);
    h.payload_crc = dc_crc32c(0, pay, sizeof(pay));
    cr_assert_eq(dc_frame_check_payload(&h, pay, sizeof(pay)), DC_OK);
    cr_assert_eq(dc_frame_check_payload(&h, pay, sizeof(pay) - 1), DC_ERR_CORRUPT);
    pay[500] ^= 4;
    cr_assert_eq(dc_frame_check_payload(&h, pay, sizeof(pay)), DC_ERR_CORRUPT);
    cr_assert(dc_status_is_retryable(DC_ERR_CORRUPT));
}
