/* rdma_wire.c - the rdma transport's private data, reject reasons and
 * control messages (see rdma_wire.h). */
#include "verbs/rdma_wire.h"

#include "verbs/transport.h"

#include <string.h>

void dc_rdma_pdata_encode(const dc_rdma_pdata_t *pd, uint8_t out[DC_RDMA_PDATA_SIZE])
{
    dc_store_le32(out, DC_RDMA_PDATA_MAGIC);
    dc_store_le16(out + 4, DC_RDMA_PDATA_VERSION);
    dc_store_le16(out + 6, (uint16_t)pd->mtu);
    dc_store_le64(out + 8, pd->ring_addr);
    dc_store_le32(out + 16, pd->rkey);
    dc_store_le32(out + 20, pd->ring_bytes);
    dc_store_le32(out + 24, pd->rq_depth);
    dc_store_le64(out + 28, pd->session);
    dc_store_le32(out + 36, pd->epoch);
}

dc_status_t dc_rdma_pdata_unpack(const char *peer, const void *p, size_t len, dc_rdma_pdata_t *out)
{
    const uint8_t *b = p;
    if (!b || len < 8 || dc_load_le32(b) != DC_RDMA_PDATA_MAGIC)
        return dc_error(DC_ERR_FORMAT,
                        "rdma %s: peer is not a deltacast rdma endpoint "
                        "(bad connection private data)",
                        peer);
    if (dc_load_le16(b + 4) != DC_RDMA_PDATA_VERSION)
        return dc_error(DC_ERR_UNSUPPORTED, "rdma %s: peer speaks protocol version %u, we %u", peer,
                        dc_load_le16(b + 4), DC_RDMA_PDATA_VERSION);
    if (len < DC_RDMA_PDATA_SIZE)
        return dc_error(DC_ERR_FORMAT, "rdma %s: connection private data of %zu bytes, want %u",
                        peer, len, DC_RDMA_PDATA_SIZE);
    uint32_t rb = dc_load_le32(b + 20), rq = dc_load_le32(b + 24);
    if (rb < 2 * DC_VERBS_HDR_SIZE || rb > DC_RDMA_PEER_RING_MAX || rq <= DC_RDMA_RQ_RESERVE + 1 ||
        rq > DC_RDMA_PEER_RQ_MAX)
        return dc_error(DC_ERR_FORMAT, "rdma %s: peer ring of %u bytes / %u receives is unusable",
                        peer, rb, rq);
    uint32_t epoch = dc_load_le32(b + 36);
    if (epoch == 0)
        return dc_error(DC_ERR_FORMAT, "rdma %s: connection private data with epoch 0", peer);
    out->mtu = dc_load_le16(b + 6);
    out->ring_addr = dc_load_le64(b + 8);
    out->rkey = dc_load_le32(b + 16);
    out->ring_bytes = rb;
    out->rq_depth = rq;
    out->session = dc_load_le64(b + 28);
    out->epoch = epoch;
    return DC_OK;
}

void dc_rdma_rej_encode(uint16_t reason, uint8_t out[DC_RDMA_REJ_SIZE])
{
    dc_store_le32(out, DC_RDMA_REJ_MAGIC);
    dc_store_le16(out + 4, DC_RDMA_PDATA_VERSION);
    dc_store_le16(out + 6, reason);
}

uint16_t dc_rdma_rej_decode(const void *p, size_t len)
{
    const uint8_t *b = p;
    if (!b || len < DC_RDMA_REJ_SIZE || dc_load_le32(b) != DC_RDMA_REJ_MAGIC ||
        dc_load_le16(b + 4) != DC_RDMA_PDATA_VERSION)
        return 0;
    return dc_load_le16(b + 6);
}

size_t dc_rdma_ctrl_encode(const dc_rdma_ctrl_t *c, uint8_t *out)
{
    if (c->auth_len > DC_RDMA_CTRL_SIZE - DC_RDMA_CTRL_HDR)
        return 0;
    memset(out, 0, DC_RDMA_CTRL_HDR);
    dc_store_le32(out, DC_RDMA_CTRL_MAGIC);
    out[4] = c->type;
    dc_store_le64(out + 8, c->seq);
    dc_store_le64(out + 16, c->consumed);
    dc_store_le64(out + 24, c->reposted);
    if (c->auth_len)
        memcpy(out + DC_RDMA_CTRL_HDR, c->auth, c->auth_len);
    return DC_RDMA_CTRL_HDR + c->auth_len;
}

dc_status_t dc_rdma_ctrl_decode(const char *peer, const uint8_t *m, size_t len, dc_rdma_ctrl_t *out)
{
    if (!m || len < DC_RDMA_CTRL_HDR || len > DC_RDMA_CTRL_SIZE ||
        dc_load_le32(m) != DC_RDMA_CTRL_MAGIC)
        return dc_error(DC_ERR_FORMAT, "rdma %s: malformed control message (%zu bytes)", peer, len);
    out->type = m[4];
    out->seq = dc_load_le64(m + 8);
    out->consumed = dc_load_le64(m + 16);
    out->reposted = dc_load_le64(m + 24);
    out->auth = m + DC_RDMA_CTRL_HDR;
    out->auth_len = len - DC_RDMA_CTRL_HDR;
    return DC_OK;
}
