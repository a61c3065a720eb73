/* proto.c - refit protocol messages (see proto.h). */
#include "engine/proto.h"

void dc_msg_pack(const dc_msg_t *m, uint8_t out[DC_MSG_HDR_SIZE])
{
    memset(out, 0, DC_MSG_HDR_SIZE);
    dc_store_le32(out, DC_MSG_MAGIC);
    out[4] = m->type;
    out[5] = m->flags;
    dc_store_le64(out + 8, m->version);
    dc_store_le64(out + 16, m->baseline);
    dc_store_le32(out + 24, m->node);
    dc_store_le32(out + 28, m->chunk);
    dc_store_le32(out + 32, m->count);
    dc_store_le32(out + 36, m->body_len);
}

const char *dc_msg_type_name(uint8_t type)
{
    switch (type) {
    case DC_MSG_BEGIN: return "BEGIN";
    case DC_MSG_FRAME: return "FRAME";
    case DC_MSG_COMMIT: return "COMMIT";
    case DC_MSG_ABORT: return "ABORT";
    case DC_MSG_BYE: return "BYE";
    case DC_MSG_SUBOK: return "SUBOK";
    case DC_MSG_HELLO: return "HELLO";
    case DC_MSG_ACK: return "ACK";
    case DC_MSG_NEED: return "NEED";
    case DC_MSG_STATE: return "STATE";
    case DC_MSG_DONE: return "DONE";
    case DC_MSG_SUB: return "SUB";
    case DC_MSG_SENT: return "SENT";
    default: return "?";
    }
}

dc_status_t dc_msg_parse(const uint8_t *buf, size_t len, dc_msg_t *out)
{
    if (len < DC_MSG_HDR_SIZE)
        return dc_error(DC_ERR_FORMAT, "engine message of %zu bytes is shorter than its header",
                        len);
    if (dc_load_le32(buf) != DC_MSG_MAGIC)
        return dc_error(DC_ERR_FORMAT, "engine message has a bad magic 0x%08x",
                        dc_load_le32(buf));
    dc_msg_t m;
    m.type = buf[4];
    m.flags = buf[5];
    if (dc_msg_type_name(m.type)[0] == '?')
        return dc_error(DC_ERR_FORMAT, "engine message has unknown type %u", m.type);
    m.version = dc_load_le64(buf + 8);
    m.baseline = dc_load_le64(buf + 16);
    m.node = dc_load_le32(buf + 24);
    m.chunk = dc_load_le32(buf + 28);
    m.count = dc_load_le32(buf + 32);
    m.body_len = dc_load_le32(buf + 36);
    if ((uint64_t)m.body_len != (uint64_t)len - DC_MSG_HDR_SIZE)
        return dc_error(DC_ERR_FORMAT, "engine %s message: body length %u but %zu bytes follow",
                        dc_msg_type_name(m.type), m.body_len, len - DC_MSG_HDR_SIZE);
    m.body = buf + DC_MSG_HDR_SIZE;
    if ((m.type == DC_MSG_ACK || m.type == DC_MSG_NEED) &&
        ((uint64_t)m.chunk + m.count > DC_MAX_CHUNKS || m.count == 0))
        return dc_error(DC_ERR_FORMAT, "engine %s message: chunk range %u+%u invalid",
                        dc_msg_type_name(m.type), m.chunk, m.count);
    if (m.type == DC_MSG_SUB && (m.count > DC_SUB_MAX || (uint64_t)m.count * 4 != m.body_len))
        return dc_error(DC_ERR_FORMAT, "engine SUB message: %u streams in %u bytes", m.count,
                        m.body_len);
    if (m.type == DC_MSG_SENT && (uint64_t)m.count * DC_SENT_ENTRY != m.body_len)
        return dc_error(DC_ERR_FORMAT, "engine SENT message: %u entries in %u bytes", m.count,
                        m.body_len);
    *out = m;
    return DC_OK;
}

void dc_msg_simple(uint8_t type, uint8_t flags, uint64_t version, uint64_t baseline,
                   uint32_t node, uint32_t chunk, uint32_t count, uint8_t out[DC_MSG_HDR_SIZE])
{
    dc_msg_t m = {.type = type, .flags = flags, .version = version, .baseline = baseline,
                  .node = node, .chunk = chunk, .count = count, .body_len = 0};
    dc_msg_pack(&m, out);
}

/* --- BEGIN ----------------------------------------------------------------- */

void dc_begin_pack(const dc_begin_t *b, uint8_t out[DC_BEGIN_SIZE])
{
    dc_msg_t m = {.type = DC_MSG_BEGIN, .version = b->version, .baseline = b->baseline,
                  .node = DC_NODE_ALL, .count = b->nchunks, .body_len = DC_BEGIN_FIXED};
    dc_msg_pack(&m, out);
    uint8_t *p = out + DC_MSG_HDR_SIZE;
    dc_store_le64(p, b->layout_id);
    dc_store_le32(p + 8, b->nchunks);
    dc_store_le32(p + 12, b->mode);
    dc_store_le64(p + 16, b->base_ckpt.lo);
    dc_store_le64(p + 24, b->base_ckpt.hi);
}

dc_status_t dc_begin_parse(const dc_msg_t *m, dc_begin_t *out)
{
    if (m->type != DC_MSG_BEGIN || m->body_len != DC_BEGIN_FIXED)
        return dc_error(DC_ERR_FORMAT, "BEGIN message body is %u bytes, expected %d",
                        m->body_len, DC_BEGIN_FIXED);
    dc_begin_t b;
    b.version = m->version;
    b.baseline = m->baseline;
    b.layout_id = dc_load_le64(m->body);
    b.nchunks = dc_load_le32(m->body + 8);
    b.mode = dc_load_le32(m->body + 12);
    b.base_ckpt.lo = dc_load_le64(m->body + 16);
    b.base_ckpt.hi = dc_load_le64(m->body + 24);
    if (b.nchunks > DC_MAX_CHUNKS)
        return dc_error(DC_ERR_FORMAT, "BEGIN message: %u chunks is too many", b.nchunks);
    if (b.mode != DC_MODE_DELTA && b.mode != DC_MODE_DENSE)
        return dc_error(DC_ERR_FORMAT, "BEGIN message: unknown mode %u", b.mode);
    if (b.baseline >= b.version)
        return dc_error(DC_ERR_FORMAT, "BEGIN message: baseline %llu not below version %llu",
                        (unsigned long long)b.baseline, (unsigned long long)b.version);
    *out = b;
    return DC_OK;
}

/* --- HELLO ------------------------------------------------------------------- */

size_t dc_hello_size(uint32_t nstates)
{
    return DC_MSG_HDR_SIZE + DC_HELLO_FIXED + nstates;
}

void dc_hello_pack(uint8_t type, const dc_hello_t *h, uint8_t *out)
{
    dc_msg_t m = {.type = type, .version = h->j_target, .baseline = h->committed,
                  .node = h->node, .count = h->nstates,
                  .body_len = DC_HELLO_FIXED + h->nstates};
    dc_msg_pack(&m, out);
    uint8_t *p = out + DC_MSG_HDR_SIZE;
    dc_store_le64(p, h->committed);
    dc_store_le64(p + 8, h->j_target);
    dc_store_le64(p + 16, h->j_baseline);
    dc_store_le64(p + 24, h->layout_id);
    dc_store_le32(p + 32, h->flags);
    dc_store_le32(p + 36, h->nstates);
    if (h->nstates)
        memcpy(p + DC_HELLO_FIXED, h->states, h->nstates);
}

dc_status_t dc_hello_parse(const dc_msg_t *m, dc_hello_t *out)
{
    if ((m->type != DC_MSG_HELLO && m->type != DC_MSG_STATE) || m->body_len < DC_HELLO_FIXED)
        return dc_error(DC_ERR_FORMAT, "HELLO message too short (%u bytes)", m->body_len);
    dc_hello_t h;
    h.node = m->node;
    h.committed = dc_load_le64(m->body);
    h.j_target = dc_load_le64(m->body + 8);
    h.j_baseline = dc_load_le64(m->body + 16);
    h.layout_id = dc_load_le64(m->body + 24);
    h.flags = dc_load_le32(m->body + 32);
    h.nstates = dc_load_le32(m->body + 36);
    if ((uint64_t)m->body_len != DC_HELLO_FIXED + (uint64_t)h.nstates ||
        h.nstates > DC_MAX_CHUNKS)
        return dc_error(DC_ERR_FORMAT, "HELLO from node %u: %u states do not match body of %u",
                        h.node, h.nstates, m->body_len);
    h.states = m->body + DC_HELLO_FIXED;
    for (uint32_t i = 0; i < h.nstates; i++)
        if (h.states[i] > 2)
            return dc_error(DC_ERR_FORMAT, "HELLO from node %u: chunk %u has state %u", h.node,
                            i, h.states[i]);
    if (h.node == DC_NODE_ALL)
        return dc_error(DC_ERR_FORMAT, "HELLO with the broadcast node id");
    *out = h;
    return DC_OK;
}

/* --- COMMIT / BYE --------------------------------------------------------------- */

static void dc_digest_store(uint8_t *p, dc_digest_t d)
{
    dc_store_le64(p, d.lo);
    dc_store_le64(p + 8, d.hi);
}

static dc_digest_t dc_digest_load(const uint8_t *p)
{
    dc_digest_t d = {dc_load_le64(p), dc_load_le64(p + 8)};
    return d;
}

void dc_commit_msg_pack(uint64_t v, uint64_t b, uint32_t node, const dc_commit_msg_t *c,
                        uint8_t *out)
{
    dc_msg_t m = {.type = DC_MSG_COMMIT, .version = v, .baseline = b, .node = node,
                  .body_len = DC_COMMIT_BODY};
    dc_msg_pack(&m, out);
    dc_digest_store(out + DC_MSG_HDR_SIZE, c->ckpt);
    dc_digest_store(out + DC_MSG_HDR_SIZE + 16, c->content);
}

dc_status_t dc_commit_msg_parse(const dc_msg_t *m, dc_commit_msg_t *out)
{
    if (m->type != DC_MSG_COMMIT || m->body_len != DC_COMMIT_BODY)
        return dc_error(DC_ERR_FORMAT, "COMMIT message body is %u bytes, expected %d",
                        m->body_len, DC_COMMIT_BODY);
    out->ckpt = dc_digest_load(m->body);
    out->content = dc_digest_load(m->body + 16);
    return DC_OK;
}

void dc_bye_pack(uint64_t v, dc_digest_t ckpt, uint8_t *out)
{
    dc_msg_t m = {.type = DC_MSG_BYE, .version = v, .node = DC_NODE_ALL,
                  .body_len = DC_BYE_BODY};
    dc_msg_pack(&m, out);
    dc_digest_store(out + DC_MSG_HDR_SIZE, ckpt);
}

dc_status_t dc_bye_parse(const dc_msg_t *m, dc_digest_t *ckpt)
{
    if (m->type != DC_MSG_BYE || m->body_len != DC_BYE_BODY)
        return dc_error(DC_ERR_FORMAT, "BYE message body is %u bytes, expected %d",
                        m->body_len, DC_BYE_BODY);
    *ckpt = dc_digest_load(m->body);
    return DC_OK;
}
