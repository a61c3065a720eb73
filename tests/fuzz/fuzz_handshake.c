/*
 * fuzz_handshake.c - fuzz target for the tcp transport's handshake
 * messages (verbs/tcp_hs.h), the first bytes a listener reads from anyone
 * who connects, before authentication: HELLO, CHAL, PROOF, OK.
 *
 * Input byte 0 selects the message (0 HELLO, 1 CHAL, 2 PROOF, 3 OK); the
 * rest is the bytes.  Oracle: no crash / sanitizer report; a failing parse
 * leaves a status and a detail message naming the peer; what parses has
 * the message's exact size, values the format allows (stream index below
 * the stream count, at most DC_TCP_MAX_STREAMS streams, a non-zero largest
 * message, a known reply code) and packs back to the same bytes; the MAC of
 * a CHAL or PROOF verifies or fails cleanly (DC_ERR_AUTH).
 *
 * Builds as the other targets (tests/fuzz/meson.build): fuzz_handshake_replay
 * (any compiler, -DDC_FUZZ_REPLAY) runs a corpus directory plus
 * deterministic mutations; fuzz_handshake is the libFuzzer binary.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DC_FUZZ_NAME "fuzz_handshake"
#include "fuzz.h"

#include "verbs/tcp_hs.h"

static const uint8_t key[] = "fuzz-handshake-secret";
static const uint8_t nc0[DC_AUTH_NONCE_SIZE] = {1, 2, 3};

static void parsed_or_failed(dc_status_t st)
{
    if (st != DC_OK) {
        CHECK(st == DC_ERR_FORMAT);
        failed_cleanly(st);
        CHECK(strstr(dc_last_error(), "peer-x") != NULL);
    } else {
        fuzz_accepted++;
    }
}

static void verified_or_failed(const uint8_t *ns, const uint8_t *mac, char role)
{
    dc_status_t st = dc_auth_verify(key, sizeof(key) - 1, role, nc0, ns, mac, "peer-x");
    CHECK(st == DC_OK || st == DC_ERR_AUTH);
    if (st != DC_OK)
        failed_cleanly(st);
}

static void fuzz_hello(const uint8_t *b, size_t n)
{
    dc_tcp_hello_t m;
    dc_status_t st = dc_tcp_hello_parse(b, n, "peer-x", &m);
    parsed_or_failed(st);
    if (st != DC_OK)
        return;
    CHECK(n == DC_TCP_HELLO);
    uint8_t out[DC_TCP_HELLO];
    dc_tcp_hello_pack(&m, out);
    CHECK(memcmp(out, b, n) == 0);
}

static void fuzz_chal(const uint8_t *b, size_t n)
{
    dc_tcp_chal_t m;
    dc_status_t st = dc_tcp_chal_parse(b, n, "peer-x", &m);
    parsed_or_failed(st);
    if (st != DC_OK)
        return;
    CHECK(n == DC_TCP_CHAL);
    uint8_t out[DC_TCP_CHAL];
    dc_tcp_chal_pack(&m, out);
    CHECK(memcmp(out, b, n) == 0);
    verified_or_failed(m.ns, m.mac, 'S');
}

static void fuzz_proof(const uint8_t *b, size_t n)
{
    dc_tcp_proof_t m;
    dc_status_t st = dc_tcp_proof_parse(b, n, "peer-x", &m);
    parsed_or_failed(st);
    if (st != DC_OK)
        return;
    CHECK(n == DC_TCP_PROOF);
    CHECK(m.nstreams >= 1 && m.nstreams <= DC_TCP_MAX_STREAMS && m.idx < m.nstreams);
    CHECK(m.max_msg > 0);
    uint8_t out[DC_TCP_PROOF];
    dc_tcp_proof_pack(&m, out);
    CHECK(memcmp(out, b, n) == 0);
    uint8_t ns[DC_AUTH_NONCE_SIZE] = {9, 8, 7};
    verified_or_failed(ns, m.mac, 'C');
}

static void fuzz_ok(const uint8_t *b, size_t n)
{
    dc_tcp_okmsg_t m;
    dc_status_t st = dc_tcp_ok_parse(b, n, "peer-x", &m);
    parsed_or_failed(st);
    if (st != DC_OK)
        return;
    CHECK(n == DC_TCP_OK && m.code <= DC_TCP_OK_BAD);
    uint8_t out[DC_TCP_OK];
    dc_tcp_ok_pack(&m, out);
    CHECK(memcmp(out, b, n) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dc_fuzz_quiet();
    if (size < 1)
        return 0;
    const uint8_t *b = data + 1;
    size_t n = size - 1;
    switch (data[0] % 4) {
    case 0: fuzz_hello(b, n); break;
    case 1: fuzz_chal(b, n); break;
    case 2: fuzz_proof(b, n); break;
    default: fuzz_ok(b, n); break;
    }
    return 0;
}

#ifdef DC_FUZZ_REPLAY
#define DC_FUZZ_SEED 0x5d1e3a7c9b2f4086ULL
#include "replay.h"

/* One deterministic mutation (byte 0, the message, is kept): flip a bit,
 * set a byte to 0 / 0xff / a small value, insert, delete, truncate, or
 * overwrite a 2- or 4-byte field with a boundary value (the stream index,
 * count and largest message of a PROOF sit at 45, 47 and 49 of the input). */
static size_t mutate(uint8_t *b, size_t len, size_t cap)
{
    if (len < 2)
        return len;
    size_t at = 1 + (size_t)(rng() % (len - 1));
    static const uint32_t edge[] = {0, 1, 2, 63, 64, 65, 0xffffu, 0x10000u, 0x7fffffffu,
                                    0xffffffffu, DC_TCP_MAGIC, DC_TCP_VERSION};
    static const size_t field[] = {1, 5, 45, 47, 49, 53};
    unsigned op = (unsigned)(rng() % 8);
    if (op == 6) { /* a 2-byte boundary value in a field of a PROOF / HELLO */
        size_t f = field[rng() % DC_ARRAY_SIZE(field)];
        uint32_t v = edge[rng() % DC_ARRAY_SIZE(edge)];
        if (f + 2 <= len)
            dc_store_le16(b + f, (uint16_t)v);
        return len;
    }
    return dc_fuzz_mutate_at(b, len, cap, at, op, 70, edge, DC_ARRAY_SIZE(edge));
}

int main(int argc, char **argv)
{
    return dc_fuzz_main(argc, argv, 16, 4, mutate, "accepted");
}
#endif
