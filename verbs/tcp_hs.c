/*
 * tcp_hs.c - pack and parse the tcp transport's handshake messages (HELLO,
 * CHAL, PROOF, OK; layouts in tcp_hs.h).  Pure functions on byte buffers:
 * every length, magic, version and value is checked before a field is
 * stored.
 */
#include "verbs/tcp_hs.h"

#include <string.h>

static dc_status_t dc_tcp_hs_head(const uint8_t *b, size_t n, size_t want, const char *what,
                                  const char *peer)
{
    if (!b || n != want)
        return dc_error(DC_ERR_FORMAT, "tcp: %s: handshake %s of %zu bytes (want %zu)",
                        peer ? peer : "?", what, b ? n : 0, want);
    if (dc_load_le32(b) != DC_TCP_MAGIC)
        return dc_error(DC_ERR_FORMAT,
                        "tcp: %s sent garbage instead of a handshake %s (bad "
                        "magic 0x%08x): not a deltacast tcp endpoint",
                        peer ? peer : "?", what, dc_load_le32(b));
    return DC_OK;
}

static dc_status_t dc_tcp_hs_version(const uint8_t *b, const char *what, const char *peer)
{
    if (dc_load_le32(b + 4) != DC_TCP_VERSION)
        return dc_error(DC_ERR_FORMAT, "tcp: %s speaks handshake version %u in its %s (want %u)",
                        peer ? peer : "?", dc_load_le32(b + 4), what, DC_TCP_VERSION);
    return DC_OK;
}

void dc_tcp_hello_pack(const dc_tcp_hello_t *m, uint8_t out[DC_TCP_HELLO])
{
    dc_store_le32(out, DC_TCP_MAGIC);
    dc_store_le32(out + 4, DC_TCP_VERSION);
    memcpy(out + 8, m->nc, DC_AUTH_NONCE_SIZE);
}

dc_status_t dc_tcp_hello_parse(const uint8_t *b, size_t n, const char *peer, dc_tcp_hello_t *out)
{
    dc_status_t st = dc_tcp_hs_head(b, n, DC_TCP_HELLO, "HELLO", peer);
    if (st == DC_OK)
        st = dc_tcp_hs_version(b, "HELLO", peer);
    if (st != DC_OK)
        return st;
    memcpy(out->nc, b + 8, DC_AUTH_NONCE_SIZE);
    return DC_OK;
}

void dc_tcp_chal_pack(const dc_tcp_chal_t *m, uint8_t out[DC_TCP_CHAL])
{
    dc_store_le32(out, DC_TCP_MAGIC);
    dc_store_le32(out + 4, DC_TCP_VERSION);
    memcpy(out + 8, m->ns, DC_AUTH_NONCE_SIZE);
    memcpy(out + 8 + DC_AUTH_NONCE_SIZE, m->mac, DC_AUTH_MAC_SIZE);
}

dc_status_t dc_tcp_chal_parse(const uint8_t *b, size_t n, const char *peer, dc_tcp_chal_t *out)
{
    dc_status_t st = dc_tcp_hs_head(b, n, DC_TCP_CHAL, "CHAL", peer);
    if (st == DC_OK)
        st = dc_tcp_hs_version(b, "CHAL", peer);
    if (st != DC_OK)
        return st;
    memcpy(out->ns, b + 8, DC_AUTH_NONCE_SIZE);
    memcpy(out->mac, b + 8 + DC_AUTH_NONCE_SIZE, DC_AUTH_MAC_SIZE);
    return DC_OK;
}

void dc_tcp_proof_pack(const dc_tcp_proof_t *m, uint8_t out[DC_TCP_PROOF])
{
    memcpy(out, m->mac, DC_AUTH_MAC_SIZE);
    dc_store_le64(out + 32, m->session);
    dc_store_le32(out + 40, m->epoch);
    dc_store_le16(out + 44, (uint16_t)m->idx);
    dc_store_le16(out + 46, (uint16_t)m->nstreams);
    dc_store_le32(out + 48, m->max_msg);
    dc_store_le32(out + 52, m->reserved);
    dc_store_le64(out + 56, m->rbase);
}

dc_status_t dc_tcp_proof_parse(const uint8_t *b, size_t n, const char *peer, dc_tcp_proof_t *out)
{
    if (!b || n != DC_TCP_PROOF)
        return dc_error(DC_ERR_FORMAT, "tcp: %s: handshake PROOF of %zu bytes (want %d)",
                        peer ? peer : "?", b ? n : 0, DC_TCP_PROOF);
    uint32_t idx = dc_load_le16(b + 44), k = dc_load_le16(b + 46), max_msg = dc_load_le32(b + 48);
    if (k == 0 || k > DC_TCP_MAX_STREAMS || idx >= k || max_msg == 0)
        return dc_error(DC_ERR_FORMAT,
                        "tcp: %s sent bad stream parameters (stream %u of %u, at most %u; "
                        "largest message %u bytes)",
                        peer ? peer : "?", idx, k, DC_TCP_MAX_STREAMS, max_msg);
    memcpy(out->mac, b, DC_AUTH_MAC_SIZE);
    out->session = dc_load_le64(b + 32);
    out->epoch = dc_load_le32(b + 40);
    out->idx = idx;
    out->nstreams = k;
    out->max_msg = max_msg;
    out->reserved = dc_load_le32(b + 52);
    out->rbase = dc_load_le64(b + 56);
    return DC_OK;
}

void dc_tcp_ok_pack(const dc_tcp_okmsg_t *m, uint8_t out[DC_TCP_OK])
{
    dc_store_le32(out, DC_TCP_MAGIC);
    dc_store_le32(out + 4, m->code);
    dc_store_le64(out + 8, m->session);
    dc_store_le64(out + 16, m->rbase);
}

dc_status_t dc_tcp_ok_parse(const uint8_t *b, size_t n, const char *peer, dc_tcp_okmsg_t *out)
{
    dc_status_t st = dc_tcp_hs_head(b, n, DC_TCP_OK, "reply (OK)", peer);
    if (st != DC_OK)
        return st;
    uint32_t code = dc_load_le32(b + 4);
    if (code > DC_TCP_OK_BAD)
        return dc_error(DC_ERR_FORMAT, "tcp: %s sent an unknown handshake reply code %u",
                        peer ? peer : "?", code);
    out->code = code;
    out->session = dc_load_le64(b + 8);
    out->rbase = dc_load_le64(b + 16);
    return DC_OK;
}
