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
    case DC_MSG_FAIL: return "FAIL";
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
    /* count 0: only a holding node's "alive" ACK (DC_ACK_F_HOLDING) */
    int holding = m.type == DC_MSG_ACK && m.flags == DC_ACK_F_HOLDING && m.chunk == 0 &&
                  m.count == 0;
    if ((m.type == DC_MSG_ACK || m.type == DC_MSG_NEED) && !holding &&
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

/* --- SUB ------------------------------------------------------------------ */

size_t dc_sub_size(uint32_t nstreams)
{
    return DC_MSG_HDR_SIZE + 4 * (size_t)nstreams;
}

void dc_sub_pack(uint32_t node, uint32_t gen, const uint32_t *streams, uint32_t n, uint8_t *out)
{
    dc_msg_t m = {.type = DC_MSG_SUB, .node = node, .chunk = gen, .count = n, .body_len = 4 * n};
    dc_msg_pack(&m, out);
    for (uint32_t k = 0; k < n; k++)
        dc_store_le32(out + DC_MSG_HDR_SIZE + 4 * (size_t)k, streams[k]);
}

dc_status_t dc_sub_parse(const dc_msg_t *m, dc_sub_t *out)
{
    if (m->type != DC_MSG_SUB || m->count > DC_SUB_MAX || (uint64_t)m->count * 4 != m->body_len)
        return dc_error(DC_ERR_FORMAT, "SUB message from node %u: %u streams in %u bytes", m->node,
                        m->count, m->body_len);
    if (m->node == DC_NODE_ALL)
        return dc_error(DC_ERR_FORMAT, "SUB message with the broadcast node id");
    out->node = m->node;
    out->gen = m->chunk;
    out->nstreams = m->count;
    out->streams = m->body;
    return DC_OK;
}

uint32_t dc_sub_stream(const dc_sub_t *s, uint32_t k)
{
    return k < s->nstreams ? dc_load_le32(s->streams + 4 * (size_t)k) : UINT32_MAX;
}

/* --- SENT ----------------------------------------------------------------- */

size_t dc_sent_size(uint32_t n)
{
    return DC_MSG_HDR_SIZE + (size_t)n * DC_SENT_ENTRY;
}

void dc_sent_pack(const dc_sent_t *s, uint8_t *out)
{
    dc_msg_t m = {.type = DC_MSG_SENT,
                  .flags = s->last ? DC_SENT_F_LAST : 0,
                  .version = s->version,
                  .baseline = s->payload_bytes,
                  .node = s->node,
                  .count = s->n,
                  .body_len = s->n * DC_SENT_ENTRY};
    dc_msg_pack(&m, out);
}

void dc_sent_put(uint8_t *out, uint32_t e, uint32_t chunk, dc_digest_t target)
{
    uint8_t *p = out + DC_MSG_HDR_SIZE + (size_t)e * DC_SENT_ENTRY;
    dc_store_le32(p, chunk);
    dc_digest_store(p + 4, target);
}

dc_status_t dc_sent_parse(const dc_msg_t *m, dc_sent_t *out)
{
    if (m->type != DC_MSG_SENT || m->count > DC_MAX_CHUNKS ||
        (uint64_t)m->count * DC_SENT_ENTRY != m->body_len)
        return dc_error(DC_ERR_FORMAT, "SENT message from node %u: %u entries in %u bytes", m->node,
                        m->count, m->body_len);
    if (m->node == DC_NODE_ALL)
        return dc_error(DC_ERR_FORMAT, "SENT message with the broadcast node id");
    out->node = m->node;
    out->version = m->version;
    out->payload_bytes = m->baseline;
    out->last = (m->flags & DC_SENT_F_LAST) != 0;
    out->n = m->count;
    out->entries = m->body;
    return DC_OK;
}

void dc_sent_entry(const dc_sent_t *s, uint32_t e, uint32_t *chunk, dc_digest_t *target)
{
    if (e >= s->n) {
        *chunk = UINT32_MAX;
        *target = (dc_digest_t){0, 0};
        return;
    }
    const uint8_t *p = s->entries + (size_t)e * DC_SENT_ENTRY;
    *chunk = dc_load_le32(p);
    *target = dc_digest_load(p + 4);
}

/* --- DONE ----------------------------------------------------------------- */

size_t dc_done_size(uint32_t nlinks)
{
    return DC_MSG_HDR_SIZE + DC_DONE_BODY + (size_t)nlinks * DC_DONE_LINK;
}

void dc_done_pack(const dc_done_t *d, uint8_t *out)
{
    uint32_t nl = DC_MIN(d->nlinks, (uint32_t)DC_DONE_MAX_LINKS);
    dc_msg_t m = {.type = DC_MSG_DONE,
                  .flags = d->flags,
                  .version = d->version,
                  .baseline = d->committed,
                  .node = d->node,
                  .body_len = DC_DONE_BODY + nl * DC_DONE_LINK};
    dc_msg_pack(&m, out);
    uint8_t *p = out + DC_MSG_HDR_SIZE;
    memset(p, 0, DC_DONE_BODY);
    dc_store_le64(p, d->apply_ns);
    dc_store_le64(p + 8, d->bytes);
    dc_store_le32(p + 16, d->up_parent);
    for (uint32_t k = 0; k < nl; k++) {
        uint8_t *e = p + DC_DONE_BODY + (size_t)k * DC_DONE_LINK;
        dc_store_le32(e, d->link_parent[k]);
        dc_store_le64(e + 4, d->link_bytes[k]);
    }
}

dc_status_t dc_done_parse(const dc_msg_t *m, dc_done_t *out)
{
    if (m->type != DC_MSG_DONE || m->body_len < DC_DONE_BODY ||
        (m->body_len - DC_DONE_BODY) % DC_DONE_LINK != 0 ||
        (m->body_len - DC_DONE_BODY) / DC_DONE_LINK > DC_DONE_MAX_LINKS)
        return dc_error(DC_ERR_FORMAT,
                        "DONE message from node %u: body of %u bytes is not %d bytes and at "
                        "most %d links of %d",
                        m->node, m->body_len, DC_DONE_BODY, DC_DONE_MAX_LINKS, DC_DONE_LINK);
    if (m->node == DC_NODE_ALL)
        return dc_error(DC_ERR_FORMAT, "DONE message with the broadcast node id");
    dc_done_t d;
    memset(&d, 0, sizeof(d));
    d.node = m->node;
    d.flags = m->flags;
    d.version = m->version;
    d.committed = m->baseline;
    d.apply_ns = dc_load_le64(m->body);
    d.bytes = dc_load_le64(m->body + 8);
    d.up_parent = dc_load_le32(m->body + 16);
    d.nlinks = (m->body_len - DC_DONE_BODY) / DC_DONE_LINK;
    for (uint32_t k = 0; k < d.nlinks; k++) {
        const uint8_t *e = m->body + DC_DONE_BODY + (size_t)k * DC_DONE_LINK;
        d.link_parent[k] = dc_load_le32(e);
        d.link_bytes[k] = dc_load_le64(e + 4);
    }
    *out = d;
    return DC_OK;
}

/* --- FAIL ----------------------------------------------------------------- */

size_t dc_fail_size(uint32_t text_len, uint32_t n)
{
    return DC_MSG_HDR_SIZE + DC_FAIL_FIXED + (size_t)text_len + (size_t)n * DC_FAIL_ENTRY;
}

void dc_fail_pack(const dc_fail_t *f, uint8_t *out)
{
    uint32_t tl = DC_MIN(f->text_len, DC_FAIL_TEXT_MAX);
    uint32_t n = DC_MIN(f->n, DC_FAIL_MAX_TENSORS);
    dc_msg_t m = {.type = DC_MSG_FAIL, .version = f->version, .baseline = f->chunk_size,
                  .node = f->node, .chunk = f->code, .count = n,
                  .body_len = (uint32_t)(dc_fail_size(tl, n) - DC_MSG_HDR_SIZE)};
    dc_msg_pack(&m, out);
    dc_store_le32(out + DC_MSG_HDR_SIZE, tl);
    dc_store_le32(out + DC_MSG_HDR_SIZE + 4, f->ntensors);
    if (tl)
        memcpy(out + DC_MSG_HDR_SIZE + DC_FAIL_FIXED, f->text, tl);
}

void dc_fail_put(uint8_t *out, uint32_t text_len, uint32_t e, uint64_t name_hash,
                 uint64_t nelems, uint32_t dtype)
{
    uint8_t *p = out + DC_MSG_HDR_SIZE + DC_FAIL_FIXED + DC_MIN(text_len, DC_FAIL_TEXT_MAX) +
                 (size_t)e * DC_FAIL_ENTRY;
    dc_store_le64(p, name_hash);
    dc_store_le64(p + 8, nelems);
    dc_store_le32(p + 16, dtype);
}

dc_status_t dc_fail_parse(const dc_msg_t *m, dc_fail_t *out)
{
    if (m->type != DC_MSG_FAIL || m->body_len < DC_FAIL_FIXED)
        return dc_error(DC_ERR_FORMAT, "FAIL message of %u body bytes", m->body_len);
    if (m->node == DC_NODE_ALL)
        return dc_error(DC_ERR_FORMAT, "FAIL message with the broadcast node id");
    if (m->chunk < 1 || m->chunk > DC_FAIL_MAX)
        return dc_error(DC_ERR_FORMAT, "FAIL message from node %u: unknown reason %u", m->node,
                        m->chunk);
    uint32_t tl = dc_load_le32(m->body);
    uint32_t nt = dc_load_le32(m->body + 4);
    if (tl > DC_FAIL_TEXT_MAX || m->count > DC_FAIL_MAX_TENSORS || m->count > nt ||
        (uint64_t)DC_FAIL_FIXED + tl + (uint64_t)m->count * DC_FAIL_ENTRY != m->body_len)
        return dc_error(DC_ERR_FORMAT,
                        "FAIL message from node %u: %u reason bytes and %u of %u tensors in "
                        "%u bytes", m->node, tl, m->count, nt, m->body_len);
    out->node = m->node;
    out->code = m->chunk;
    out->version = m->version;
    out->chunk_size = m->baseline;
    out->ntensors = nt;
    out->text_len = tl;
    out->text = m->body + DC_FAIL_FIXED;
    out->n = m->count;
    out->entries = m->body + DC_FAIL_FIXED + tl;
    return DC_OK;
}

void dc_fail_entry(const dc_fail_t *f, uint32_t e, uint64_t *name_hash, uint64_t *nelems,
                   uint32_t *dtype)
{
    if (e >= f->n) {
        *name_hash = *nelems = 0;
        *dtype = 0;
        return;
    }
    const uint8_t *p = f->entries + (size_t)e * DC_FAIL_ENTRY;
    *name_hash = dc_load_le64(p);
    *nelems = dc_load_le64(p + 8);
    *dtype = dc_load_le32(p + 16);
}

void dc_fail_text(const dc_fail_t *f, char *out, size_t len)
{
    size_t k = 0;
    for (uint32_t i = 0; i < f->text_len && k + 1 < len; i++) {
        uint8_t c = f->text[i];
        out[k++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    out[k] = 0;
}

const char *dc_fail_code_name(uint32_t code)
{
    switch (code) {
    case DC_FAIL_LAYOUT: return "layout mismatch";
    case DC_FAIL_IO: return "I/O failure";
    case DC_FAIL_MEMORY: return "memory failure";
    case DC_FAIL_VERSION: return "cannot take the version";
    case DC_FAIL_START: return "could not start";
    default: return "unknown failure";
    }
}
