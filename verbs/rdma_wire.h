/*
 * rdma_wire.h - the bytes of the rdma transport that arrive before or
 * beside the data ring, as pure functions (no ibverbs, always compiled, so
 * that tests/fuzz/fuzz_rdma.c runs on any machine):
 *
 *   connection private data (rdma_connect / rdma_accept), version 2:
 *      off size
 *        0    4  magic "DCRP"
 *        4    2  version (2)
 *        6    2  active MTU (0: unknown)
 *        8    8  ring address
 *       16    4  ring rkey
 *       20    4  ring bytes
 *       24    4  receive work requests
 *       28    8  session id
 *       36    4  epoch (1 on the first dial, +1 per re-dial)
 *     (40 bytes; the TCP port space carries 56 in a connect request, so
 *     trailing bytes are allowed).  Version 1 (28 bytes, no session) is
 *     refused.
 *   reject private data: "DCRJ", version (2), reason (DC_RDMA_REJ_*): 8 bytes
 *   control message (a SEND into the peer's control receives, at most
 *   DC_RDMA_CTRL_SIZE bytes): "DCRM", type (DC_RDMA_CT_*), 3 reserved,
 *   seq (8), ring bytes consumed (8), receives reposted (8), then the
 *   authentication message of an AUTH.
 *
 * Every byte is the peer's: the decoders check lengths and fields and name
 * the peer in their error.  What they accept the connection still judges
 * against its own state (credits, epoch, session).
 */
#ifndef DC_VERBS_RDMA_WIRE_H
#define DC_VERBS_RDMA_WIRE_H

#include "util/dc_util.h"

#include <stddef.h>
#include <stdint.h>

#define DC_RDMA_PDATA_MAGIC   0x50524344u /* "DCRP" */
#define DC_RDMA_PDATA_VERSION 2
#define DC_RDMA_PDATA_SIZE    40
#define DC_RDMA_REJ_MAGIC     0x4a524344u /* "DCRJ" */
#define DC_RDMA_REJ_SIZE      8
enum {
    DC_RDMA_REJ_UNKNOWN = 1, /* re-dial of a session the server does not hold */
    DC_RDMA_REJ_STALE = 2,   /* epoch not above the session's current one */
    DC_RDMA_REJ_DUP = 3,     /* a first dial with a session already in use */
};
#define DC_RDMA_CTRL_MAGIC 0x4d524344u /* "DCRM" */
#define DC_RDMA_CTRL_HDR   32
#define DC_RDMA_CTRL_SIZE  128
/* the bounds a peer's ring must keep (decoded private data) */
#define DC_RDMA_PEER_RING_MAX (1u << 30)
#define DC_RDMA_PEER_RQ_MAX   65536u
#define DC_RDMA_RQ_RESERVE    8

enum {
    DC_RDMA_CT_ACK = 1,
    DC_RDMA_CT_NACK = 2,
    DC_RDMA_CT_CREDIT = 3,
    DC_RDMA_CT_AUTH = 4,
    DC_RDMA_CT_BYE = 5, /* orderly close: the peer fails instead of re-dialing */
};

/* A connection's private data (ours to send, or the peer's, validated). */
typedef struct dc_rdma_pdata {
    uint32_t mtu;
    uint64_t ring_addr;
    uint32_t rkey, ring_bytes, rq_depth;
    uint64_t session;
    uint32_t epoch;
} dc_rdma_pdata_t;

/** Our private data into out (DC_RDMA_PDATA_SIZE bytes; mtu is cut to 16
 *  bits). */
void dc_rdma_pdata_encode(const dc_rdma_pdata_t *pd, uint8_t out[DC_RDMA_PDATA_SIZE]);
/** The peer's private data (len bytes at p, p may be NULL), validated:
 *  DC_ERR_FORMAT (not ours, short, an unusable ring, epoch 0) or
 *  DC_ERR_UNSUPPORTED (another protocol version), naming `peer`. */
dc_status_t dc_rdma_pdata_unpack(const char *peer, const void *p, size_t len, dc_rdma_pdata_t *out);

/** A reject's private data with `reason` into out. */
void dc_rdma_rej_encode(uint16_t reason, uint8_t out[DC_RDMA_REJ_SIZE]);
/** The reason in a reject's private data; 0 when absent or foreign. */
uint16_t dc_rdma_rej_decode(const void *p, size_t len);

/* A control message. */
typedef struct dc_rdma_ctrl {
    uint8_t type; /* DC_RDMA_CT_* (any value: the connection judges it) */
    uint64_t seq, consumed, reposted;
    const uint8_t *auth; /* AUTH: the message after the header (into the input) */
    size_t auth_len;     /* <= DC_RDMA_CTRL_SIZE - DC_RDMA_CTRL_HDR */
} dc_rdma_ctrl_t;

/** A control message into out (at least DC_RDMA_CTRL_HDR + auth_len
 *  bytes); returns its length, 0 when auth_len is too long. */
size_t dc_rdma_ctrl_encode(const dc_rdma_ctrl_t *c, uint8_t *out);
/** A received control message of len bytes: DC_ERR_FORMAT when its length
 *  or magic is wrong, naming `peer`. */
dc_status_t dc_rdma_ctrl_decode(const char *peer, const uint8_t *m, size_t len,
                                dc_rdma_ctrl_t *out);

#endif /* DC_VERBS_RDMA_WIRE_H */
