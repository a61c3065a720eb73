/*
 * fuzz_rdma.c - fuzz target for the bytes an rdma peer sends outside the
 * data ring (verbs/rdma_wire.h): the connection private data of a connect
 * request or accept, the private data of a reject, and control messages.
 *
 * Input byte 0 selects the format; the rest is the bytes:
 *   0: connection private data, dc_rdma_pdata_unpack;
 *   1: reject private data, dc_rdma_rej_decode;
 *   2: a control message, dc_rdma_ctrl_decode.
 * Oracle: no crash / sanitizer report; a failing call leaves a status and
 * a detail message naming the peer; what decodes encodes back to the same
 * bytes (reserved ones aside) and holds values the format allows.
 *
 * Builds as the other targets (tests/fuzz/meson.build): fuzz_rdma_replay
 * (any compiler, -DDC_FUZZ_REPLAY) runs a corpus directory plus
 * deterministic mutations; fuzz_rdma is the libFuzzer binary.  It needs no
 * RDMA device and no ibverbs: rdma_wire.c is compiled in every build.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DC_FUZZ_NAME "fuzz_rdma"
#include "fuzz.h"

#include "verbs/rdma_wire.h"
#include "verbs/transport.h"

static void fuzz_pdata(const uint8_t *b, size_t n)
{
    dc_rdma_pdata_t pd;
    dc_status_t st = dc_rdma_pdata_unpack("fuzz-peer", n ? b : NULL, n, &pd);
    if (st != DC_OK) {
        failed_cleanly(st);
        CHECK(strstr(dc_last_error(), "fuzz-peer") != NULL);
        return;
    }
    fuzz_accepted++;
    CHECK(n >= DC_RDMA_PDATA_SIZE && pd.epoch != 0 && pd.mtu <= 0xffff);
    CHECK(pd.ring_bytes >= 2 * DC_VERBS_HDR_SIZE && pd.ring_bytes <= DC_RDMA_PEER_RING_MAX);
    CHECK(pd.rq_depth > DC_RDMA_RQ_RESERVE + 1 && pd.rq_depth <= DC_RDMA_PEER_RQ_MAX);
    uint8_t out[DC_RDMA_PDATA_SIZE];
    dc_rdma_pdata_encode(&pd, out);
    CHECK(memcmp(out, b, sizeof(out)) == 0);
}

static void fuzz_rej(const uint8_t *b, size_t n)
{
    uint16_t r = dc_rdma_rej_decode(n ? b : NULL, n);
    if (r == 0)
        return;
    fuzz_accepted++;
    uint8_t out[DC_RDMA_REJ_SIZE];
    dc_rdma_rej_encode(r, out);
    CHECK(n >= DC_RDMA_REJ_SIZE && memcmp(out, b, sizeof(out)) == 0);
}

static void fuzz_ctrl(const uint8_t *b, size_t n)
{
    dc_rdma_ctrl_t ct;
    dc_status_t st = dc_rdma_ctrl_decode("fuzz-peer", n ? b : NULL, n, &ct);
    if (st != DC_OK) {
        failed_cleanly(st);
        CHECK(strstr(dc_last_error(), "fuzz-peer") != NULL);
        return;
    }
    fuzz_accepted++;
    CHECK(n >= DC_RDMA_CTRL_HDR && n <= DC_RDMA_CTRL_SIZE);
    CHECK(ct.auth == b + DC_RDMA_CTRL_HDR && ct.auth_len == n - DC_RDMA_CTRL_HDR);
    uint8_t out[DC_RDMA_CTRL_SIZE];
    CHECK(dc_rdma_ctrl_encode(&ct, out) == n);
    /* bytes 5..7 are reserved (sent as 0) */
    CHECK(memcmp(out, b, 5) == 0 && memcmp(out + 8, b + 8, n - 8) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dc_fuzz_quiet();
    if (size < 1)
        return 0;
    const uint8_t *b = data + 1;
    size_t n = size - 1;
    switch (data[0] % 3) {
    case 0:
        fuzz_pdata(b, n);
        break;
    case 1:
        fuzz_rej(b, n);
        break;
    default:
        fuzz_ctrl(b, n);
        break;
    }
    return 0;
}

#ifdef DC_FUZZ_REPLAY
#define DC_FUZZ_SEED 0x3c2f8e1d6b4a5970ULL
#include "replay.h"

/* One deterministic mutation (byte 0, the format, is kept): flip a bit,
 * set a byte to 0 / 0xff / a small value, insert, delete, truncate, or
 * overwrite a 2- or 4-byte field with a boundary value. */
static size_t mutate(uint8_t *b, size_t len, size_t cap)
{
    if (len < 2)
        return len;
    size_t at = 1 + (size_t)(rng() % (len - 1));
    static const uint32_t edge[] = {
        0, 1, 2, 9, 10, 64, 65536, 65537, 1u << 30, (1u << 30) + 1, 0x7fffffffu, 0xffffffffu};
    return dc_fuzz_mutate_at(b, len, cap, at, (unsigned)(rng() % 8), 8, edge,
                             DC_ARRAY_SIZE(edge));
}

int main(int argc, char **argv)
{
    return dc_fuzz_main(argc, argv, 128, 4, mutate, "accepted");
}
#endif
