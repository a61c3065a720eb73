/* test_rdma_wire.c - the rdma transport's connection private data, reject
 * reasons and control messages (verbs/rdma_wire.h): the byte layout, and
 * what a hostile peer's bytes are refused for.  No RDMA device needed. */
#include <criterion/criterion.h>
#include <string.h>

#include "verbs/rdma_wire.h"
#include "verbs/transport.h"

static dc_rdma_pdata_t sample(void)
{
    return (dc_rdma_pdata_t){.mtu = 4096,
                             .ring_addr = 0x7f0012345000ull,
                             .rkey = 0xabcd,
                             .ring_bytes = 8u << 20,
                             .rq_depth = 512,
                             .session = 0x0123456789abcdefull,
                             .epoch = 3};
}

Test(rdma_wire, pdata_layout_and_round_trip)
{
    dc_rdma_pdata_t pd = sample(), got;
    uint8_t b[56] = {0}; /* the TCP port space carries 56 bytes */
    dc_rdma_pdata_encode(&pd, b);
    cr_assert_eq(dc_load_le32(b), 0x50524344u); /* "DCRP" */
    cr_assert_eq(dc_load_le16(b + 4), 2);
    cr_assert_eq(dc_load_le16(b + 6), 4096);
    cr_assert_eq(dc_load_le64(b + 8), pd.ring_addr);
    cr_assert_eq(dc_load_le32(b + 16), pd.rkey);
    cr_assert_eq(dc_load_le32(b + 20), pd.ring_bytes);
    cr_assert_eq(dc_load_le32(b + 24), pd.rq_depth);
    cr_assert_eq(dc_load_le64(b + 28), pd.session);
    cr_assert_eq(dc_load_le32(b + 36), pd.epoch);
    for (size_t len = DC_RDMA_PDATA_SIZE; len <= sizeof(b); len += 16) {
        cr_assert_eq(dc_rdma_pdata_unpack("peer", b, len, &got), DC_OK, "%s", dc_last_error());
        cr_assert(got.mtu == pd.mtu && got.ring_addr == pd.ring_addr && got.rkey == pd.rkey &&
                  got.ring_bytes == pd.ring_bytes && got.rq_depth == pd.rq_depth &&
                  got.session == pd.session && got.epoch == pd.epoch);
    }
}

Test(rdma_wire, pdata_hostile_bytes_are_refused_naming_the_peer)
{
    dc_rdma_pdata_t pd = sample(), got;
    uint8_t b[DC_RDMA_PDATA_SIZE];
    dc_rdma_pdata_encode(&pd, b);
    cr_assert_eq(dc_rdma_pdata_unpack("10.0.0.9:7000", NULL, 0, &got), DC_ERR_FORMAT);
    cr_assert(strstr(dc_last_error(), "10.0.0.9:7000"), "%s", dc_last_error());
    for (size_t len = 0; len < DC_RDMA_PDATA_SIZE; len++)
        cr_assert_neq(dc_rdma_pdata_unpack("p", b, len, &got), DC_OK, "%zu bytes", len);
    uint8_t v[DC_RDMA_PDATA_SIZE];
    memcpy(v, b, sizeof(v));
    dc_store_le16(v + 4, 1); /* version 1 (no session) */
    cr_assert_eq(dc_rdma_pdata_unpack("p", v, 28, &got), DC_ERR_UNSUPPORTED);
    cr_assert(strstr(dc_last_error(), "version 1"), "%s", dc_last_error());
    static const struct {
        unsigned off;
        uint32_t val;
    } bad[] = {
        {20, 2 * DC_VERBS_HDR_SIZE - 1},
        {20, DC_RDMA_PEER_RING_MAX + 1}, /* ring bytes */
        {24, DC_RDMA_RQ_RESERVE + 1},
        {24, DC_RDMA_PEER_RQ_MAX + 1}, /* receives */
        {36, 0},                       /* epoch */
        {0, 0x50524345u},              /* magic */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memcpy(v, b, sizeof(v));
        dc_store_le32(v + bad[i].off, bad[i].val);
        cr_assert_eq(dc_rdma_pdata_unpack("p", v, sizeof(v), &got), DC_ERR_FORMAT,
                     "field at %u = %u", bad[i].off, bad[i].val);
    }
    /* the bounds themselves are usable */
    memcpy(v, b, sizeof(v));
    dc_store_le32(v + 20, 2 * DC_VERBS_HDR_SIZE);
    dc_store_le32(v + 24, DC_RDMA_PEER_RQ_MAX);
    cr_assert_eq(dc_rdma_pdata_unpack("p", v, sizeof(v), &got), DC_OK, "%s", dc_last_error());
}

Test(rdma_wire, reject_reasons)
{
    uint8_t b[DC_RDMA_REJ_SIZE + 4] = {0};
    for (uint16_t r = DC_RDMA_REJ_UNKNOWN; r <= DC_RDMA_REJ_DUP; r++) {
        dc_rdma_rej_encode(r, b);
        cr_assert_eq(dc_rdma_rej_decode(b, DC_RDMA_REJ_SIZE), r);
        cr_assert_eq(dc_rdma_rej_decode(b, sizeof(b)), r);
        cr_assert_eq(dc_rdma_rej_decode(b, DC_RDMA_REJ_SIZE - 1), 0); /* short */
    }
    cr_assert_eq(dc_rdma_rej_decode(NULL, 8), 0);
    b[0] ^= 1; /* foreign */
    cr_assert_eq(dc_rdma_rej_decode(b, DC_RDMA_REJ_SIZE), 0);
}

Test(rdma_wire, control_messages)
{
    uint8_t auth[DC_RDMA_CTRL_SIZE - DC_RDMA_CTRL_HDR + 1];
    for (size_t i = 0; i < sizeof(auth); i++)
        auth[i] = (uint8_t)i;
    uint8_t m[DC_RDMA_CTRL_SIZE + 8];
    memset(m, 0xee, sizeof(m));
    dc_rdma_ctrl_t c = {.type = DC_RDMA_CT_NACK, .seq = 9, .consumed = 1u << 20, .reposted = 7};
    cr_assert_eq(dc_rdma_ctrl_encode(&c, m), DC_RDMA_CTRL_HDR);
    cr_assert_eq(dc_load_le32(m), 0x4d524344u); /* "DCRM" */
    cr_assert(m[4] == DC_RDMA_CT_NACK && m[5] == 0 && m[6] == 0 && m[7] == 0);
    cr_assert(dc_load_le64(m + 8) == 9 && dc_load_le64(m + 16) == (1u << 20) &&
              dc_load_le64(m + 24) == 7);
    dc_rdma_ctrl_t g;
    cr_assert_eq(dc_rdma_ctrl_decode("p", m, DC_RDMA_CTRL_HDR, &g), DC_OK, "%s", dc_last_error());
    cr_assert(g.type == c.type && g.seq == 9 && g.consumed == c.consumed && g.reposted == 7 &&
              g.auth_len == 0);
    /* an AUTH with the largest message that fits; one byte more does not */
    c = (dc_rdma_ctrl_t){.type = DC_RDMA_CT_AUTH, .auth = auth, .auth_len = sizeof(auth) - 1};
    cr_assert_eq(dc_rdma_ctrl_encode(&c, m), DC_RDMA_CTRL_SIZE);
    cr_assert_eq(dc_rdma_ctrl_decode("p", m, DC_RDMA_CTRL_SIZE, &g), DC_OK);
    cr_assert(g.auth == m + DC_RDMA_CTRL_HDR && g.auth_len == sizeof(auth) - 1 &&
              memcmp(g.auth, auth, g.auth_len) == 0);
    c.auth_len = sizeof(auth);
    cr_assert_eq(dc_rdma_ctrl_encode(&c, m), 0);
    /* hostile: too short, too long, not ours */
    cr_assert_eq(dc_rdma_ctrl_decode("10.1.1.1", m, DC_RDMA_CTRL_HDR - 1, &g), DC_ERR_FORMAT);
    cr_assert(strstr(dc_last_error(), "10.1.1.1"), "%s", dc_last_error());
    cr_assert_eq(dc_rdma_ctrl_decode("p", m, DC_RDMA_CTRL_SIZE + 1, &g), DC_ERR_FORMAT);
    cr_assert_eq(dc_rdma_ctrl_decode("p", NULL, DC_RDMA_CTRL_HDR, &g), DC_ERR_FORMAT);
    m[3] ^= 0x80;
    cr_assert_eq(dc_rdma_ctrl_decode("p", m, DC_RDMA_CTRL_HDR, &g), DC_ERR_FORMAT);
}
