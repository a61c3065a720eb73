/*
 * rdma.c - the `rdma` transport: libibverbs + librdmacm, RC queue pairs,
 * RDMA WRITE WITH IMMEDIATE into the peer's registered receive ring with
 * credit-based flow control.
 *
 * Each side registers a receive ring (DC_RDMA_RING_BYTES) and tells the peer
 * its address and rkey in the rdmacm private data.  The bytes of the message
 * stream (32-byte transport header + payload, transport.h) are written into
 * the peer's ring in order, at most DC_RDMA_CHUNK per work request, never
 * across the ring's end; each write carries its byte count as immediate
 * data, so the receiver learns from its receive completions how many new
 * bytes are in its ring (RC delivers them in order).
 *
 *   sender                                        receiver ring
 *   WRITE_WITH_IMM(hdr+payload chunk, imm=n)  --> [....hdr|payload....]
 *                                                  copy into the irecv
 *                                                  buffer, CRC32C check
 *   window_ack / re-send the borrowed buffer <--  SEND ctrl(ACK|NACK, seq,
 *                                                  consumed, reposted)
 *
 * Credits, both returned in every control message (SEND):
 *   - ring bytes: the receiver's total bytes consumed; the sender never has
 *     more than DC_RDMA_RING_BYTES written and not consumed;
 *   - receive work requests: every WRITE_WITH_IMM and SEND consumes one of
 *     the peer's posted receives; the receiver reposts at once and reports
 *     how many it reposted.  DC_RDMA_RQ_RESERVE entries are kept for CREDIT
 *     messages so that credits can always flow back (no deadlock), and a
 *     CREDIT is sent only after a quarter of a resource was freed (no
 *     ping-pong of credits).
 * Small messages (header + payload <= the QP's inline limit) go inline, in
 * one work request, straight from the caller's buffer.  Larger ones are
 * written from a registered buffer: the caller's (reg_mem) or a staging
 * copy in a registered FIFO.
 *
 * Authentication: after ESTABLISHED, the auth.h challenge-response runs over
 * SEND messages; no data is written or accepted before it succeeds.
 * GPU memory (verbs/gpumem.h): reg_mem(DC_VERBS_MEM_CUDA) registers through
 * dma-buf (cuMemGetHandleForAddressRange + ibv_reg_dmabuf_mr) when built
 * with CUDA.  A send from device memory needs that registration: the NIC
 * reads the payload straight from the GPU (never inline, never through the
 * staging FIFO), and its CRC32C is computed by the GPU (dc_kern_cuda_crc32c).
 * A receive into device memory (registered, or recognised by
 * cuPointerGetAttribute) is copied from the host ring into the GPU buffer
 * (cudaMemcpy) and checked there by the GPU; the ring stays host memory, so
 * this is one host-to-device copy, not zero-copy.  NACK, re-send and resume
 * are the same as for host memory.  A build without CUDA refuses device
 * memory with DC_ERR_UNSUPPORTED (it never lets the CPU read it).
 *
 * Reconnect and resume (transport.h, "Hop reliability"; as tcp.c / ucx.c).
 * The connection private data (version 2) carries a 64-bit session id (the
 * client's, random) and an epoch (1 on the first dial, +1 per re-dial).
 * Everything tied to one QP lives in a "link" (dc_rdma_link_t: rdmacm id and
 * channel, CQ, QP, our rings and their keys, both directions' ring offsets
 * and credits); the protection domain is outside it, so that the caller's
 * reg_mem registrations survive (the client owns its PD; accepted
 * connections share one PD per device with their listener).  When an
 * established link breaks (RDMA_CM_EVENT_DISCONNECTED, an error completion,
 * a failed post, a damaged header, an injected cut) the connection goes
 * BROKEN and drops the link: the QP is destroyed (no work request reads a
 * borrowed buffer any more), the CQ, rings and queued ACKs go with it, a
 * half-received message is discarded (it was not ACKed).  The client then
 * re-dials the same address on a fresh rdmacm id with the same session and
 * the next epoch (every 0.2 s, within timeout_ms), builds a fresh link
 * (new ring, new rkey, offsets and credits from zero on both sides) and runs
 * the HMAC handshake again.  The server's listener (accept(), which must keep
 * being called) refuses at the connect request a re-dial of a session it
 * does not hold (reject reason UNKNOWN: the client fails with
 * DC_ERR_CANCELED at once) or with a stale epoch; otherwise it authenticates
 * it as a separate handshake whose incoming data is held, then hands the
 * whole new link to the accepted connection of that session (dc_rdma_adopt).
 * Both sides then re-send every un-ACKed message in seq order before any new
 * one; receivers drop the seqs they already hold and ACK them again, so
 * nothing is lost or duplicated.  An orderly close sends BYE before the
 * disconnect, so the peer fails with DC_ERR_RESET instead of re-dialing.
 * Recovery gives up after timeout_ms (DC_ERR_RESET, with what broke).  The
 * fault hook's drop_after= truncates the RDMA write at exactly the cut byte
 * and then cuts the link (mid-message, like tcp); corrupt= damages received
 * payloads before their CRC32C check.  A route that comes back through a
 * different RDMA device cannot resume (the PD is per device): the client
 * retries until timeout_ms, then fails.
 */
#include "verbs/rdma.h"

#include "kernels/kern.h"
#include "kernels/kern_cuda.h"
#include "verbs/auth.h"
#include "verbs/fault.h"
#include "verbs/gpumem.h"
#include "verbs/net.h"
#include "verbs/session.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define DC_RDMA_RING_BYTES (8u << 20)
#define DC_RDMA_CHUNK (1u << 20)
#define DC_RDMA_STAGE_BYTES (8u << 20)
#define DC_RDMA_SQ_DEPTH 256
#define DC_RDMA_RQ_DEPTH 512
#define DC_RDMA_RQ_RESERVE 8
#define DC_RDMA_CTRL_SIZE 128
#define DC_RDMA_INLINE_WANT 128
#define DC_RDMA_RING DC_VERBS_MAX_INFLIGHT
#define DC_RDMA_CTRLQ 1024
#define DC_RDMA_TXQ (2 * DC_VERBS_MAX_INFLIGHT)

/* Connection private data (rdma_connect / rdma_accept), version 2:
 *   0 magic "DCRP"  4 version  6 active MTU  8 ring address  16 ring rkey
 *  20 ring bytes   24 receive WRs  28 session id  36 epoch     (40 bytes;
 * the TCP port space carries 56 in a connect request).  The server echoes the
 * client's session and epoch.  Version 1 (28 bytes, no session) is refused. */
#define DC_RDMA_PDATA_MAGIC 0x50524344u /* "DCRP" */
#define DC_RDMA_PDATA_VERSION 2
#define DC_RDMA_PDATA_SIZE    40
/* Reject private data: "DCRJ", version, reason (DC_RDMA_REJ_*). */
#define DC_RDMA_REJ_MAGIC 0x4a524344u /* "DCRJ" */
#define DC_RDMA_REJ_SIZE  8
enum {
    DC_RDMA_REJ_UNKNOWN = 1, /* re-dial of a session the server does not hold */
    DC_RDMA_REJ_STALE = 2,   /* epoch not above the session's current one */
    DC_RDMA_REJ_DUP = 3,     /* a first dial with a session already in use */
};
#define DC_RDMA_CTRL_MAGIC 0x4d524344u /* "DCRM" */
#define DC_RDMA_CTRL_HDR 32
#define DC_RDMA_WR_SEND (1ull << 63) /* wr_id tag of send work requests */

enum {
    DC_RDMA_CT_ACK = 1,
    DC_RDMA_CT_NACK = 2,
    DC_RDMA_CT_CREDIT = 3,
    DC_RDMA_CT_AUTH = 4,
    DC_RDMA_CT_BYE = 5, /* orderly close: the peer fails instead of re-dialing */
};
enum {
    DC_RDMA_AUTH_HELLO = 1,
    DC_RDMA_AUTH_CHALLENGE = 2,
    DC_RDMA_AUTH_PROOF = 3,
    DC_RDMA_AUTH_OK = 4,
    DC_RDMA_AUTH_FAIL = 5,
};

typedef enum {
    DC_RDMA_C_RESOLVING, /* client: address/route resolution, connect */
    DC_RDMA_C_WAIT_CHALLENGE,
    DC_RDMA_C_WAIT_OK,
    DC_RDMA_S_ACCEPTING, /* server: rdma_accept sent */
    DC_RDMA_S_WAIT_HELLO,
    DC_RDMA_S_WAIT_PROOF,
    DC_RDMA_ESTABLISHED,
    DC_RDMA_BROKEN, /* was established, link lost: re-dial / wait for re-attach */
    DC_RDMA_FAILED,
} dc_rdma_state_t;

typedef enum { DC_RDMA_REQ_SEND, DC_RDMA_REQ_RECV } dc_rdma_kind_t;
typedef enum { DC_RDMA_R_PENDING, DC_RDMA_R_DONE, DC_RDMA_R_FAILED } dc_rdma_rstate_t;

typedef struct dc_rdma_conn dc_rdma_conn_t;

typedef struct dc_rdma_mr {
    dc_verbs_mr_t base;
    struct ibv_mr *mr;
    uint8_t *addr;
    size_t len;
    uint32_t kind;
} dc_rdma_mr_t;

typedef struct dc_rdma_req {
    dc_verbs_req_t base;
    dc_rdma_conn_t *conn;
    struct dc_rdma_req *next, *prev;
    dc_rdma_kind_t kind;
    dc_rdma_rstate_t state;
    dc_status_t err;
    uint8_t *buf;
    size_t len;
    size_t got;
    dc_rdma_mr_t *mr;
    uint32_t mkind; /* DC_VERBS_MEM_HOST / DC_VERBS_MEM_CUDA */
    uint64_t seq;
    unsigned wrs; /* posted work requests reading buf */
    int queued;   /* in the transmit queue */
    int crc_known; /* hdr carries the caller's CRC32C (isend_crc): a NACK
                      recomputes it (never trusted twice) */
    uint8_t hdr[DC_VERBS_HDR_SIZE];
} dc_rdma_req_t;

typedef enum {
    DC_RDMA_SLOT_EMPTY = 0,
    DC_RDMA_SLOT_DONE,
} dc_rdma_slot_state_t;

typedef struct dc_rdma_slot {
    dc_rdma_slot_state_t state;
    dc_rdma_req_t *req;
} dc_rdma_slot_t;

typedef struct dc_rdma_sqe {
    uint64_t stage_end; /* stage_head after this WR (FIFO release) */
    dc_rdma_req_t *req; /* WR reads req->buf (registered) */
} dc_rdma_sqe_t;

/*
 * Everything that lives and dies with one RC queue pair: the rdmacm id and
 * its event channel, CQ, QP, our registered rings and the credit counters of
 * both directions.  A broken connection drops its link and gets a fresh one
 * (client: re-dial; server: the authenticated link of the re-dial is handed
 * over whole by the listener, dc_rdma_adopt()).  The protection domain is
 * NOT part of it: memory the caller registered (reg_mem) must stay valid.
 */
typedef struct dc_rdma_link {
    struct rdma_event_channel *ch;
    struct rdma_cm_id *id;
    struct ibv_comp_channel *cc;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    uint32_t max_inline;
    uint32_t mtu;
    int disconnected;

    /* our receive ring (the peer writes into it) */
    uint8_t *ring;
    struct ibv_mr *ring_mr;
    uint64_t rx_avail, rx_consumed, consumed_reported;
    uint64_t rq_completed, rq_reported;
    /* the peer's ring */
    uint64_t peer_ring_addr;
    uint32_t peer_rkey;
    uint64_t peer_ring_bytes;
    uint32_t peer_rq_depth;
    uint64_t tx_written, tx_peer_consumed;
    uint64_t tx_wrs, peer_reposted;

    uint8_t *crecv; /* DC_RDMA_RQ_DEPTH control receive buffers */
    struct ibv_mr *crecv_mr;
    uint8_t *csend; /* DC_RDMA_SQ_DEPTH control send buffers */
    struct ibv_mr *csend_mr;
    uint8_t *stage;
    struct ibv_mr *stage_mr;
    uint64_t stage_head, stage_tail;
    dc_rdma_sqe_t sq[DC_RDMA_SQ_DEPTH];
    uint64_t sq_posted, sq_done;
} dc_rdma_link_t;

typedef struct dc_rdma_listener dc_rdma_listener_t;

struct dc_rdma_conn {
    dc_verbs_conn_t base;
    dc_rdma_state_t state;
    dc_status_t err;
    char errmsg[512];
    char peer[128];
    int is_client;
    double deadline;
    uint32_t timeout_ms;
    uint64_t max_msg;
    uint8_t *secret;
    size_t secret_len;
    uint8_t nc[DC_AUTH_NONCE_SIZE], ns[DC_AUTH_NONCE_SIZE];

    /* reconnect / resume */
    dc_session_t sess;             /* client: random id, dial count; server: the
                                      peer's; sess.next: the listener's registry */
    struct sockaddr_storage raddr; /* client: where to re-dial */
    int reconnecting;              /* client: a re-dial is in progress */
    int is_redial;                 /* server handshake: re-dial of a session;
                                      its data waits for dc_rdma_adopt() */
    double broken_deadline, next_dial;
    char why[200];           /* what broke the link last */
    dc_rdma_listener_t *lst; /* server: registry that can re-attach us */

    struct ibv_pd *pd;
    int own_pd; /* client: ours; server: the listener's (one per device) */
    int epfd;
    dc_rdma_link_t lk;

    /* transmit queue: messages (re)sent in order, head partly written */
    dc_rdma_req_t *txq[DC_RDMA_TXQ];
    unsigned txq_head, txq_len;
    uint64_t tx_off; /* bytes of txq[head]'s stream already written */
    dc_verbs_window_t win;

    /* receive parser */
    uint8_t hbuf[DC_VERBS_HDR_SIZE];
    size_t hgot;
    int in_payload, discard;
    dc_verbs_hdr_t cur;
    uint64_t pay_done;
    dc_rdma_slot_t slot[DC_RDMA_RING];
    uint64_t rbase, rpost;

    struct {
        uint8_t type;
        uint64_t seq;
    } ctrlq[DC_RDMA_CTRLQ];
    unsigned nctrl;
    uint8_t auth_out[5 + 64];
    size_t auth_out_len;

    dc_rdma_req_t *reqs, *req_free;
    dc_verbs_stats_t stats;
    struct dc_rdma_conn *next;
};

#define DC_RDMA_MAX_PDS 8

struct dc_rdma_listener {
    dc_verbs_listener_t base;
    unsigned refs;       /* the caller's + one per registered connection */
    dc_session_t *reg;   /* accepted connections, by session, for re-attach */
    struct rdma_event_channel *ch;
    struct rdma_cm_id *id;
    int epfd;
    char addr[128];
    dc_verbs_opts_t opts;
    uint8_t *secret;
    size_t secret_len;
    dc_rdma_conn_t *handshaking;
    /* one protection domain per device, shared by the accepted connections,
     * so that a re-dial's link can replace a broken one without
     * invalidating the caller's memory registrations */
    struct ibv_pd *pds[DC_RDMA_MAX_PDS];
    unsigned npds;
};

/* --- probe ------------------------------------------------------------------ */

static pthread_once_t dc_rdma_once = PTHREAD_ONCE_INIT;
static dc_status_t dc_rdma_init_st = DC_ERR_UNSUPPORTED;
static char dc_rdma_init_msg[256];
static char dc_rdma_dev[64];
static double dc_rdma_gbps;

static double dc_rdma_port_gbps(const struct ibv_port_attr *pa)
{
    double lane;
    switch (pa->active_speed) {
    case 1: lane = 2.5; break;
    case 2: lane = 5.0; break;
    case 4: case 8: lane = 10.0; break;
    case 16: lane = 14.0; break;
    case 32: lane = 25.0; break;
    case 64: lane = 50.0; break;
    case 128: lane = 100.0; break;
    default: lane = 0; break;
    }
    int width;
    switch (pa->active_width) {
    case 1: width = 1; break;
    case 2: width = 4; break;
    case 4: width = 8; break;
    case 8: width = 12; break;
    case 16: width = 2; break;
    default: width = 0; break;
    }
    return lane * width;
}

static void dc_rdma_init_once(void)
{
    int n = 0;
    errno = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n == 0) {
        int e = errno;
        snprintf(dc_rdma_init_msg, sizeof(dc_rdma_init_msg),
                 "rdma: no RDMA device (ibv_get_device_list: %s; is an RDMA NIC present and "
                 "its driver, ib_uverbs and rdma_cm loaded, or soft-RoCE configured with "
                 "`rdma link add`?)",
                 !list ? strerror(e ? e : ENODEV) : "0 devices");
        if (list)
            ibv_free_device_list(list);
        return;
    }
    const char *want = getenv("DELTACAST_RDMA_DEVICE");
    char seen[128] = "";
    for (int i = 0; i < n; i++) {
        const char *name = ibv_get_device_name(list[i]);
        if (want && *want && strcmp(want, name) != 0)
            continue;
        struct ibv_context *ctx = ibv_open_device(list[i]);
        if (!ctx)
            continue;
        struct ibv_device_attr da;
        if (ibv_query_device(ctx, &da) == 0) {
            for (uint8_t p = 1; p <= da.phys_port_cnt; p++) {
                struct ibv_port_attr pa;
                if (ibv_query_port(ctx, p, &pa) != 0)
                    continue;
                if (pa.state == IBV_PORT_ACTIVE) {
                    snprintf(dc_rdma_dev, sizeof(dc_rdma_dev), "%s:%u", name, p);
                    dc_rdma_gbps = dc_rdma_port_gbps(&pa);
                    ibv_close_device(ctx);
                    goto found;
                }
            }
        }
        size_t o = strlen(seen);
        snprintf(seen + o, sizeof(seen) - o, "%s%s", o ? "," : "", name);
        ibv_close_device(ctx);
    }
    snprintf(dc_rdma_init_msg, sizeof(dc_rdma_init_msg),
             "rdma: no active RDMA port%s%s (devices without an active port: %s; check "
             "`ibv_devinfo` and the link)",
             want && *want ? " on DELTACAST_RDMA_DEVICE=" : "", want && *want ? want : "",
             seen[0] ? seen : "none");
    ibv_free_device_list(list);
    return;
found:
    ibv_free_device_list(list);
    /* rdma_cm must be usable too (needs /dev/infiniband/rdma_cm). */
    struct rdma_event_channel *ch = rdma_create_event_channel();
    if (!ch) {
        snprintf(dc_rdma_init_msg, sizeof(dc_rdma_init_msg),
                 "rdma: device %s found but rdma_cm is unavailable (%s; load rdma_ucm)",
                 dc_rdma_dev, strerror(errno));
        return;
    }
    rdma_destroy_event_channel(ch);
    dc_rdma_init_st = DC_OK;
}

static dc_status_t dc_rdma_init(void)
{
    pthread_once(&dc_rdma_once, dc_rdma_init_once);
    if (dc_rdma_init_st != DC_OK)
        return dc_error(DC_ERR_UNSUPPORTED, "%s", dc_rdma_init_msg);
    return DC_OK;
}

const dc_verbs_ops_t *dc_rdma_ops_get(void)
{
    return &dc_rdma_ops;
}

static dc_status_t dc_rdma_caps(dc_verbs_caps_t *out)
{
    if (!out || out->size < sizeof(size_t))
        return dc_error(DC_ERR_INVALID, "rdma caps: bad struct size");
    dc_status_t st = dc_rdma_init();
    if (st != DC_OK)
        return st;
    dc_verbs_caps_t c;
    memset(&c, 0, sizeof(c));
    c.size = sizeof(c);
    c.mem_kinds = DC_VERBS_MEM_HOST;
    /* GPU memory: built with CUDA (the hop CRC32C kernel) and a GPU here;
     * the NIC's dma-buf support is only known when reg_mem tries it. */
    if (DC_HAVE_CUDA && dc_kern_cuda_available())
        c.mem_kinds |= DC_VERBS_MEM_CUDA | DC_VERBS_MEM_DMABUF;
    c.max_streams = 1;
    c.max_msg_size = DC_VERBS_DEFAULT_MAX_MSG;
    c.max_inflight = DC_VERBS_MAX_INFLIGHT;
    c.speed_gbps = dc_rdma_gbps;
    c.latency_us = 0;
    snprintf(c.device, sizeof(c.device), "%s", dc_rdma_dev);
    size_t n = DC_MIN(out->size, sizeof(c));
    memcpy((char *)out + sizeof(size_t), (char *)&c + sizeof(size_t), n - sizeof(size_t));
    return DC_OK;
}

/* --- helpers ---------------------------------------------------------------- */

static void dc_rdma_fail(dc_rdma_conn_t *c, dc_status_t st, const char *fmt, ...) DC_PRINTF(3, 4);

static void dc_rdma_fail(dc_rdma_conn_t *c, dc_status_t st, const char *fmt, ...)
{
    if (c->state == DC_RDMA_FAILED)
        return;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(c->errmsg, sizeof(c->errmsg), "rdma %s: %s", c->peer, msg);
    c->err = st;
    c->state = DC_RDMA_FAILED;
    DC_LOG_DEBUG("%s", c->errmsg);
}

/*
 * The link broke (QP error, disconnect, failed completion, injected cut).
 * An established connection that can be resumed (the client; a server
 * connection the listener handed out, so that a re-dial can find it) goes
 * BROKEN: recovery runs from dc_rdma_conn_progress().  A failed re-dial
 * attempt goes back to BROKEN and is tried again until broken_deadline.
 * Anything else (a handshake that never completed) fails with DC_ERR_RESET.
 * Never frees anything: it may run inside an rdmacm event handler, before
 * the event is acknowledged.
 */
static void dc_rdma_lost(dc_rdma_conn_t *c, const char *fmt, ...) DC_PRINTF(2, 3);

static void dc_rdma_lost(dc_rdma_conn_t *c, const char *fmt, ...)
{
    if (c->state == DC_RDMA_FAILED || c->state == DC_RDMA_BROKEN)
        return;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (c->state == DC_RDMA_ESTABLISHED && (c->is_client || c->lst)) {
        DC_LOG_INFO("rdma %s: %s: recovering (session %016llx)", c->peer, msg,
                    (unsigned long long)c->sess.id);
        snprintf(c->why, sizeof(c->why), "%s", msg);
        c->state = DC_RDMA_BROKEN;
        c->broken_deadline = dc_now_s() + c->timeout_ms / 1000.0;
        c->next_dial = 0;
        return;
    }
    if (c->reconnecting) {
        DC_LOG_INFO("rdma %s: re-dial (epoch %u) failed: %s", c->peer, c->sess.epoch, msg);
        snprintf(c->why, sizeof(c->why), "%s", msg);
        c->state = DC_RDMA_BROKEN;
        c->next_dial = dc_now_s() + 0.1;
        return;
    }
    dc_rdma_fail(c, DC_ERR_RESET, "%s", msg);
}

/* A connection-setup step failed: retried while re-dialing, else final. */
static void dc_rdma_setup_failed(dc_rdma_conn_t *c, dc_status_t st, const char *fmt, ...)
    DC_PRINTF(3, 4);

static void dc_rdma_setup_failed(dc_rdma_conn_t *c, dc_status_t st, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (c->reconnecting)
        dc_rdma_lost(c, "%s", msg);
    else
        dc_rdma_fail(c, st, "%s", msg);
}

static dc_status_t dc_rdma_conn_error(const dc_rdma_conn_t *c)
{
    return dc_error(c->err, "%s", c->errmsg);
}

static uint32_t dc_rdma_mtu_bytes(enum ibv_mtu m)
{
    switch (m) {
    case IBV_MTU_256: return 256;
    case IBV_MTU_512: return 512;
    case IBV_MTU_1024: return 1024;
    case IBV_MTU_2048: return 2048;
    case IBV_MTU_4096: return 4096;
    default: return 0;
    }
}

/* --- resources ---------------------------------------------------------------- */

static void *dc_rdma_alloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 4096, n) != 0)
        return NULL;
    memset(p, 0, n);
    return p;
}

static int dc_rdma_post_recv(dc_rdma_conn_t *c, uint32_t i)
{
    struct ibv_sge sge = {
        .addr = (uintptr_t)(c->lk.crecv + (size_t)i * DC_RDMA_CTRL_SIZE),
        .length = DC_RDMA_CTRL_SIZE,
        .lkey = c->lk.crecv_mr->lkey,
    };
    struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;
    return ibv_post_recv(c->lk.qp, &wr, &bad);
}

/*
 * The link's CQ, QP, registered buffers and posted receives on `id` (its
 * device).  The protection domain is c->pd when set (a re-dial, or the
 * listener's), else a new one the connection owns.  On error what was
 * created stays in c->lk for dc_rdma_drop_link().
 */
static dc_status_t dc_rdma_setup(dc_rdma_conn_t *c, struct rdma_cm_id *id)
{
    struct ibv_context *v = id->verbs;
    if (!v)
        return dc_error(DC_ERR_UNSUPPORTED, "rdma %s: the route has no RDMA device", c->peer);
    if (!c->pd) {
        if (!(c->pd = ibv_alloc_pd(v)))
            return dc_error_errno(DC_ERR_IO, errno, "rdma %s: ibv_alloc_pd", c->peer);
        c->own_pd = 1;
    } else if (c->pd->context != v) {
        /* Memory registered by the caller lives in the old device's PD. */
        return dc_error(DC_ERR_UNSUPPORTED,
                        "rdma %s: the route now leads through another RDMA device (%s) than "
                        "the one the connection's memory is registered with (%s)",
                        c->peer, ibv_get_device_name(v->device),
                        ibv_get_device_name(c->pd->context->device));
    }
    if (!(c->lk.cc = ibv_create_comp_channel(v)))
        return dc_error_errno(DC_ERR_IO, errno, "rdma %s: ibv_create_comp_channel", c->peer);
    dc_net_nonblock(c->lk.cc->fd);
    c->lk.cq = ibv_create_cq(v, DC_RDMA_SQ_DEPTH + DC_RDMA_RQ_DEPTH + 16, c, c->lk.cc, 0);
    if (!c->lk.cq)
        return dc_error_errno(DC_ERR_IO, errno, "rdma %s: ibv_create_cq", c->peer);
    if (ibv_req_notify_cq(c->lk.cq, 0))
        return dc_error(DC_ERR_IO, "rdma %s: ibv_req_notify_cq failed", c->peer);
    struct ibv_qp_init_attr qa;
    memset(&qa, 0, sizeof(qa));
    qa.send_cq = c->lk.cq;
    qa.recv_cq = c->lk.cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = DC_RDMA_SQ_DEPTH;
    qa.cap.max_recv_wr = DC_RDMA_RQ_DEPTH;
    qa.cap.max_send_sge = 2;
    qa.cap.max_recv_sge = 1;
    qa.cap.max_inline_data = DC_RDMA_INLINE_WANT;
    if (rdma_create_qp(id, c->pd, &qa) != 0) {
        qa.cap.max_inline_data = 0; /* some devices have no inline support */
        if (rdma_create_qp(id, c->pd, &qa) != 0)
            return dc_error_errno(DC_ERR_IO, errno, "rdma %s: rdma_create_qp (RC, %u/%u WRs)",
                                  c->peer, DC_RDMA_SQ_DEPTH, DC_RDMA_RQ_DEPTH);
    }
    c->lk.qp = id->qp;
    c->lk.max_inline = qa.cap.max_inline_data;
    struct ibv_port_attr pa;
    if (ibv_query_port(v, id->port_num ? id->port_num : 1, &pa) == 0)
        c->lk.mtu = dc_rdma_mtu_bytes(pa.active_mtu);

    c->lk.ring = dc_rdma_alloc(DC_RDMA_RING_BYTES);
    c->lk.crecv = dc_rdma_alloc((size_t)DC_RDMA_RQ_DEPTH * DC_RDMA_CTRL_SIZE);
    c->lk.csend = dc_rdma_alloc((size_t)DC_RDMA_SQ_DEPTH * DC_RDMA_CTRL_SIZE);
    c->lk.stage = dc_rdma_alloc(DC_RDMA_STAGE_BYTES);
    if (!c->lk.ring || !c->lk.crecv || !c->lk.csend || !c->lk.stage)
        return dc_error(DC_ERR_NOMEM, "rdma %s: out of memory for the rings", c->peer);
    c->lk.ring_mr = ibv_reg_mr(c->pd, c->lk.ring, DC_RDMA_RING_BYTES,
                               IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    c->lk.crecv_mr = ibv_reg_mr(c->pd, c->lk.crecv, (size_t)DC_RDMA_RQ_DEPTH * DC_RDMA_CTRL_SIZE,
                                IBV_ACCESS_LOCAL_WRITE);
    c->lk.csend_mr =
        ibv_reg_mr(c->pd, c->lk.csend, (size_t)DC_RDMA_SQ_DEPTH * DC_RDMA_CTRL_SIZE, 0);
    c->lk.stage_mr = ibv_reg_mr(c->pd, c->lk.stage, DC_RDMA_STAGE_BYTES, 0);
    if (!c->lk.ring_mr || !c->lk.crecv_mr || !c->lk.csend_mr || !c->lk.stage_mr)
        return dc_error_errno(DC_ERR_IO, errno,
                              "rdma %s: ibv_reg_mr of the rings failed (locked-memory limit? "
                              "check `ulimit -l`)",
                              c->peer);
    for (uint32_t i = 0; i < DC_RDMA_RQ_DEPTH; i++)
        if (dc_rdma_post_recv(c, i) != 0)
            return dc_error(DC_ERR_IO, "rdma %s: ibv_post_recv failed", c->peer);
    struct epoll_event ev = {.events = EPOLLIN};
    epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->lk.cc->fd, &ev);
    return DC_OK;
}

/*
 * Tear the link down: disconnect, destroy the QP (after which the HCA reads
 * no buffer of ours any more, so no work request references a request's
 * buffer), the CQ with whatever completions it still held, the rdmacm id and
 * its channel, the rings.  The transmit queue, the half-parsed message and
 * queued ACKs go too: a message is only done when ACKed, so the peer re-sends
 * what we did not ACK, and we re-send what it did not.  The PD, the window
 * and the receive slots stay.  Idempotent.  Never call it from an rdmacm
 * event handler (rdma_destroy_id waits for the event's acknowledgement).
 */
static void dc_rdma_drop_link(dc_rdma_conn_t *c)
{
    dc_rdma_link_t *k = &c->lk;
    if (k->id && k->qp && !k->disconnected)
        rdma_disconnect(k->id); /* the peer sees DISCONNECTED at once */
    if (k->ch && c->epfd >= 0)
        epoll_ctl(c->epfd, EPOLL_CTL_DEL, k->ch->fd, NULL);
    if (k->cc && c->epfd >= 0)
        epoll_ctl(c->epfd, EPOLL_CTL_DEL, k->cc->fd, NULL);
    if (k->qp)
        rdma_destroy_qp(k->id);
    if (k->ring_mr)
        ibv_dereg_mr(k->ring_mr);
    if (k->crecv_mr)
        ibv_dereg_mr(k->crecv_mr);
    if (k->csend_mr)
        ibv_dereg_mr(k->csend_mr);
    if (k->stage_mr)
        ibv_dereg_mr(k->stage_mr);
    if (k->cq)
        ibv_destroy_cq(k->cq);
    if (k->cc)
        ibv_destroy_comp_channel(k->cc);
    if (k->id)
        rdma_destroy_id(k->id);
    if (k->ch)
        rdma_destroy_event_channel(k->ch);
    free(k->ring);
    free(k->crecv);
    free(k->csend);
    free(k->stage);
    memset(k, 0, sizeof(*k));

    for (dc_rdma_req_t *r = c->reqs; r; r = r->next) {
        r->wrs = 0;
        r->queued = 0;
    }
    c->txq_head = 0;
    c->txq_len = 0;
    c->tx_off = 0;
    c->hgot = 0;
    c->in_payload = 0;
    c->discard = 0;
    c->pay_done = 0;
    c->nctrl = 0;
    c->auth_out_len = 0;
}

/* After a reconnect: every un-ACKed message again, in seq order, before any
 * new one (the receiver's ring is consumed in order). */
static void dc_rdma_txq_push(dc_rdma_conn_t *c, dc_rdma_req_t *r);

static void dc_rdma_resume(dc_rdma_conn_t *c)
{
    unsigned n = 0;
    for (uint64_t q = c->win.base; q < c->win.next && c->state == DC_RDMA_ESTABLISHED; q++) {
        dc_rdma_req_t *r = dc_verbs_window_get(&c->win, q);
        if (r && r->state == DC_RDMA_R_PENDING && !r->queued) {
            c->stats.resends++;
            dc_rdma_txq_push(c, r);
            n++;
        }
    }
    DC_LOG_WARN("rdma %s: link re-established (session %016llx, epoch %u); re-sending %u "
                "un-acknowledged messages",
                c->peer, (unsigned long long)c->sess.id, c->sess.epoch, n);
}

static void dc_rdma_pdata_pack(const dc_rdma_conn_t *c, uint8_t out[DC_RDMA_PDATA_SIZE])
{
    dc_store_le32(out, DC_RDMA_PDATA_MAGIC);
    dc_store_le16(out + 4, DC_RDMA_PDATA_VERSION);
    dc_store_le16(out + 6, (uint16_t)c->lk.mtu);
    dc_store_le64(out + 8, (uintptr_t)c->lk.ring);
    dc_store_le32(out + 16, c->lk.ring_mr->rkey);
    dc_store_le32(out + 20, DC_RDMA_RING_BYTES);
    dc_store_le32(out + 24, DC_RDMA_RQ_DEPTH);
    dc_store_le64(out + 28, c->sess.id);
    dc_store_le32(out + 36, c->sess.epoch);
}

/* The peer's connection private data, validated (hostile bytes). */
typedef struct dc_rdma_pdata {
    uint32_t mtu;
    uint64_t ring_addr;
    uint32_t rkey, ring_bytes, rq_depth;
    uint64_t session;
    uint32_t epoch;
} dc_rdma_pdata_t;

static dc_status_t dc_rdma_pdata_unpack(const char *peer, const void *p, size_t len,
                                        dc_rdma_pdata_t *out)
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
    if (rb < 2 * DC_VERBS_HDR_SIZE || rb > (1u << 30) || rq <= DC_RDMA_RQ_RESERVE + 1 ||
        rq > 65536)
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

/* Target the peer's ring of `pd` (after dc_rdma_setup: our MTU is known). */
static void dc_rdma_pdata_apply(dc_rdma_conn_t *c, const dc_rdma_pdata_t *pd)
{
    if (pd->mtu && c->lk.mtu && pd->mtu != c->lk.mtu)
        DC_LOG_WARN("rdma %s: MTU mismatch: local active MTU %u, peer %u; the path uses the "
                    "smaller one, and on RoCE a switch or NIC MTU below it drops frames "
                    "(symptom: retry-exceeded errors); align the MTUs",
                    c->peer, c->lk.mtu, pd->mtu);
    c->lk.peer_ring_addr = pd->ring_addr;
    c->lk.peer_rkey = pd->rkey;
    c->lk.peer_ring_bytes = pd->ring_bytes;
    c->lk.peer_rq_depth = pd->rq_depth;
}

/* Reject a connection request with a reason the client can act on. */
static void dc_rdma_reject(struct rdma_cm_id *id, uint16_t reason)
{
    uint8_t b[DC_RDMA_REJ_SIZE];
    dc_store_le32(b, DC_RDMA_REJ_MAGIC);
    dc_store_le16(b + 4, DC_RDMA_PDATA_VERSION);
    dc_store_le16(b + 6, reason);
    rdma_reject(id, b, sizeof(b));
}

/* The reason in a REJECTED event's private data, 0 when absent/foreign. */
static uint16_t dc_rdma_reject_reason(const struct rdma_cm_event *ev)
{
    const uint8_t *b = ev->param.conn.private_data;
    if (!b || ev->param.conn.private_data_len < DC_RDMA_REJ_SIZE ||
        dc_load_le32(b) != DC_RDMA_REJ_MAGIC || dc_load_le16(b + 4) != DC_RDMA_PDATA_VERSION)
        return 0;
    return dc_load_le16(b + 6);
}

/* --- send machinery --------------------------------------------------------------- */

static unsigned dc_rdma_sq_free(const dc_rdma_conn_t *c)
{
    return DC_RDMA_SQ_DEPTH - (unsigned)(c->lk.sq_posted - c->lk.sq_done);
}

/* Peer receive WRs we may still consume (minus the CREDIT reserve). */
static int64_t dc_rdma_rq_credit(const dc_rdma_conn_t *c, int reserve)
{
    int64_t free_rq = (int64_t)c->lk.peer_rq_depth - (int64_t)(c->lk.tx_wrs - c->lk.peer_reposted);
    return reserve ? free_rq : free_rq - DC_RDMA_RQ_RESERVE;
}

static int dc_rdma_post_send(dc_rdma_conn_t *c, struct ibv_send_wr *wr, dc_rdma_req_t *req)
{
    dc_rdma_sqe_t *e = &c->lk.sq[c->lk.sq_posted % DC_RDMA_SQ_DEPTH];
    e->stage_end = c->lk.stage_head;
    e->req = req;
    wr->wr_id = DC_RDMA_WR_SEND | c->lk.sq_posted;
    wr->send_flags |= IBV_SEND_SIGNALED;
    struct ibv_send_wr *bad;
    int rc = ibv_post_send(c->lk.qp, wr, &bad);
    if (rc != 0) {
        dc_rdma_lost(c, "ibv_post_send: %s", strerror(rc)); /* a QP in error, mostly */
        return -1;
    }
    if (req)
        req->wrs++;
    c->lk.sq_posted++;
    c->lk.tx_wrs++;
    return 0;
}

/* Send one control message if the SQ and the peer's receives allow. */
static int dc_rdma_ctrl_send(dc_rdma_conn_t *c, uint8_t type, uint64_t seq, const uint8_t *auth,
                             size_t auth_len)
{
    /* CREDIT and the final BYE may use the reserved receives. */
    if (c->state == DC_RDMA_FAILED || c->state == DC_RDMA_BROKEN || !c->lk.qp ||
        dc_rdma_sq_free(c) == 0 ||
        dc_rdma_rq_credit(c, type == DC_RDMA_CT_CREDIT || type == DC_RDMA_CT_BYE) <= 0)
        return -1;
    uint8_t *m = c->lk.csend + (c->lk.sq_posted % DC_RDMA_SQ_DEPTH) * DC_RDMA_CTRL_SIZE;
    memset(m, 0, DC_RDMA_CTRL_HDR);
    dc_store_le32(m, DC_RDMA_CTRL_MAGIC);
    m[4] = type;
    dc_store_le64(m + 8, seq);
    dc_store_le64(m + 16, c->lk.rx_consumed);
    dc_store_le64(m + 24, c->lk.rq_completed);
    size_t len = DC_RDMA_CTRL_HDR;
    if (auth_len) {
        memcpy(m + len, auth, auth_len);
        len += auth_len;
    }
    struct ibv_sge sge = {
        .addr = (uintptr_t)m, .length = (uint32_t)len, .lkey = c->lk.csend_mr->lkey};
    struct ibv_send_wr wr;
    memset(&wr, 0, sizeof(wr));
    wr.opcode = IBV_WR_SEND;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (len <= c->lk.max_inline)
        wr.send_flags = IBV_SEND_INLINE;
    if (dc_rdma_post_send(c, &wr, NULL) != 0)
        return -1;
    c->lk.consumed_reported = c->lk.rx_consumed;
    c->lk.rq_reported = c->lk.rq_completed;
    c->stats.wire_bytes_sent += len;
    return 0;
}

static void dc_rdma_queue_ctrl(dc_rdma_conn_t *c, uint8_t type, uint64_t seq)
{
    if (c->nctrl == DC_RDMA_CTRLQ) {
        dc_rdma_fail(c, DC_ERR_FORMAT, "peer floods the connection (control queue full)");
        return;
    }
    c->ctrlq[c->nctrl].type = type;
    c->ctrlq[c->nctrl].seq = seq;
    c->nctrl++;
}

static void dc_rdma_flush_ctrl(dc_rdma_conn_t *c)
{
    if (c->auth_out_len) {
        if (dc_rdma_ctrl_send(c, DC_RDMA_CT_AUTH, 0, c->auth_out, c->auth_out_len) == 0)
            c->auth_out_len = 0;
        else
            return;
    }
    unsigned i = 0;
    for (; i < c->nctrl; i++)
        if (dc_rdma_ctrl_send(c, c->ctrlq[i].type, c->ctrlq[i].seq, NULL, 0) != 0)
            break;
    if (i) {
        memmove(c->ctrlq, c->ctrlq + i, (c->nctrl - i) * sizeof(c->ctrlq[0]));
        c->nctrl -= i;
    }
    /* Return credits once a quarter of a resource was freed. */
    if (c->lk.rx_consumed - c->lk.consumed_reported >= DC_RDMA_RING_BYTES / 4 ||
        c->lk.rq_completed - c->lk.rq_reported >= DC_RDMA_RQ_DEPTH / 4)
        dc_rdma_ctrl_send(c, DC_RDMA_CT_CREDIT, 0, NULL, 0);
}

static void dc_rdma_txq_push(dc_rdma_conn_t *c, dc_rdma_req_t *r)
{
    if (r->queued)
        return;
    if (c->txq_len == DC_RDMA_TXQ) {
        dc_rdma_fail(c, DC_ERR_INTERNAL, "transmit queue overflow");
        return;
    }
    c->txq[(c->txq_head + c->txq_len) % DC_RDMA_TXQ] = r;
    c->txq_len++;
    r->queued = 1;
}

/* Write as much of the queued message streams into the peer's ring as the
 * credits, the send queue and the staging buffer allow. */
static void dc_rdma_tx_pump(dc_rdma_conn_t *c)
{
    while (c->txq_len && c->state == DC_RDMA_ESTABLISHED) {
        dc_rdma_req_t *r = c->txq[c->txq_head];
        uint64_t total = DC_VERBS_HDR_SIZE + r->len;
        uint64_t ring_used = c->lk.tx_written - c->lk.tx_peer_consumed;
        uint64_t ring_free = c->lk.peer_ring_bytes - ring_used;
        uint64_t pos = c->lk.tx_written % c->lk.peer_ring_bytes;
        uint64_t contig = c->lk.peer_ring_bytes - pos;
        if (dc_rdma_sq_free(c) == 0 || dc_rdma_rq_credit(c, 0) <= 0 || ring_free == 0)
            return;
        /* Fault injection (drop_after=): the write stops at exactly the cut
         * byte, then the link is cut mid-message, as a broken stream would. */
        uint64_t flim = UINT64_MAX;
        if (dc_fault_active()) {
            flim = dc_fault_send_limit((size_t)(total - c->tx_off));
            if (flim == 0) {
                if (dc_fault_drop_due()) {
                    dc_rdma_lost(c, "fault injection cut the connection");
                    return;
                }
                flim = UINT64_MAX;
            }
        }
        struct ibv_send_wr wr;
        struct ibv_sge sge[2];
        memset(&wr, 0, sizeof(wr));
        wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.sg_list = sge;
        wr.wr.rdma.remote_addr = c->lk.peer_ring_addr + pos;
        wr.wr.rdma.rkey = c->lk.peer_rkey;
        dc_rdma_req_t *reads = NULL;
        uint64_t n;
        if (c->tx_off == 0 && r->mkind == DC_VERBS_MEM_HOST && total <= c->lk.max_inline &&
            total <= ring_free && total <= contig && total <= flim) {
            /* Inline: header and payload copied into the WQE by the HCA driver. */
            sge[0] = (struct ibv_sge){.addr = (uintptr_t)r->hdr, .length = DC_VERBS_HDR_SIZE};
            sge[1] = (struct ibv_sge){.addr = (uintptr_t)r->buf, .length = (uint32_t)r->len};
            wr.num_sge = r->len ? 2 : 1;
            wr.send_flags = IBV_SEND_INLINE;
            n = total;
        } else {
            n = DC_MIN(total - c->tx_off, (uint64_t)DC_RDMA_CHUNK);
            n = DC_MIN(n, DC_MIN(ring_free, contig));
            n = DC_MIN(n, flim);
            if (c->tx_off >= DC_VERBS_HDR_SIZE && r->mr) {
                uint64_t po = c->tx_off - DC_VERBS_HDR_SIZE;
                sge[0] = (struct ibv_sge){.addr = (uintptr_t)(r->buf + po),
                                          .length = (uint32_t)n,
                                          .lkey = r->mr->mr->lkey};
                reads = r;
            } else {
                if (r->mr) /* header alone from staging; payload then zero-copy */
                    n = DC_MIN(n, DC_VERBS_HDR_SIZE - c->tx_off);
                uint64_t sp = c->lk.stage_head % DC_RDMA_STAGE_BYTES;
                uint64_t sfree = DC_RDMA_STAGE_BYTES - (c->lk.stage_head - c->lk.stage_tail);
                if (DC_RDMA_STAGE_BYTES - sp < n) {
                    /* Skip the tail of the staging buffer so a chunk is contiguous. */
                    uint64_t skip = DC_RDMA_STAGE_BYTES - sp;
                    if (sfree < skip + n) {
                        if (sfree < skip + 1)
                            return;
                        n = DC_MIN(n, sfree - skip);
                    }
                    c->lk.stage_head += skip;
                    sp = 0;
                    sfree -= skip;
                }
                n = DC_MIN(n, sfree);
                if (n == 0)
                    return;
                uint8_t *dst = c->lk.stage + sp;
                uint64_t off = c->tx_off, left = n;
                if (off < DC_VERBS_HDR_SIZE) {
                    uint64_t h = DC_MIN(left, DC_VERBS_HDR_SIZE - off);
                    memcpy(dst, r->hdr + off, h);
                    dst += h;
                    off += h;
                    left -= h;
                }
                if (left)
                    memcpy(dst, r->buf + (off - DC_VERBS_HDR_SIZE), left);
                c->lk.stage_head += n;
                sge[0] = (struct ibv_sge){.addr = (uintptr_t)(c->lk.stage + sp),
                                          .length = (uint32_t)n,
                                          .lkey = c->lk.stage_mr->lkey};
            }
            wr.num_sge = 1;
        }
        wr.imm_data = htonl((uint32_t)n);
        if (dc_rdma_post_send(c, &wr, reads) != 0)
            return;
        if (dc_fault_active())
            dc_fault_sent(n);
        c->lk.tx_written += n;
        c->tx_off += n;
        c->stats.wire_bytes_sent += n;
        if (c->tx_off == total) {
            c->tx_off = 0;
            c->txq_head = (c->txq_head + 1) % DC_RDMA_TXQ;
            c->txq_len--;
            r->queued = 0;
        }
        if (dc_fault_active() && dc_fault_drop_due()) {
            dc_rdma_lost(c, "fault injection cut the connection");
            return;
        }
    }
}

/* --- receive machinery ---------------------------------------------------------------- */

static void dc_rdma_slot_advance(dc_rdma_conn_t *c)
{
    for (;;) {
        dc_rdma_slot_t *s = &c->slot[c->rbase % DC_RDMA_RING];
        if (s->state != DC_RDMA_SLOT_DONE)
            break;
        memset(s, 0, sizeof(*s));
        c->rbase++;
    }
}

/* Consume n ring bytes into dst of `kind` (host, or device memory: one or
 * two host-to-device copies); dst NULL drops them.  Fails only for device
 * memory, consuming nothing. */
static dc_status_t dc_rdma_ring_copy(dc_rdma_conn_t *c, void *dst, uint32_t kind,
                                     uint64_t n)
{
    uint64_t pos = c->lk.rx_consumed % DC_RDMA_RING_BYTES;
    uint64_t first = DC_MIN(n, DC_RDMA_RING_BYTES - pos);
    dc_status_t st = DC_OK;
    if (dst) {
        st = dc_verbs_copy_in(kind, dst, c->lk.ring + pos, first);
        if (st == DC_OK && n > first)
            st = dc_verbs_copy_in(kind, (uint8_t *)dst + first, c->lk.ring, n - first);
    }
    if (st == DC_OK)
        c->lk.rx_consumed += n;
    return st;
}

static void dc_rdma_msg_end(dc_rdma_conn_t *c)
{
    dc_rdma_slot_t *s = &c->slot[c->cur.seq % DC_RDMA_RING];
    dc_rdma_req_t *r = s->req;
    c->in_payload = 0;
    c->hgot = 0;
    if (c->discard) {
        c->discard = 0;
        if (r && r->seq == c->cur.seq && r->state == DC_RDMA_R_FAILED) {
            s->req = NULL;
            s->state = DC_RDMA_SLOT_DONE;
            dc_rdma_slot_advance(c);
        } else {
            c->stats.dups_dropped++;
        }
        dc_rdma_queue_ctrl(c, DC_RDMA_CT_ACK, c->cur.seq);
        return;
    }
    if (dc_fault_active())
        dc_verbs_fault_on_recv(r->mkind, r->buf, c->cur.len);
    uint32_t crc = 0;
    if (dc_verbs_crc32c(r->mkind, r->buf, c->cur.len, &crc) != DC_OK) {
        dc_rdma_fail(c, dc_last_status(), "CRC32C of a message in GPU memory: %s",
                     dc_last_error());
        return;
    }
    if (crc != c->cur.crc) {
        c->stats.nacks_sent++;
        dc_rdma_queue_ctrl(c, DC_RDMA_CT_NACK, c->cur.seq);
        return;
    }
    r->got = c->cur.len;
    r->state = DC_RDMA_R_DONE;
    c->stats.msgs_recv++;
    c->stats.bytes_recv += c->cur.len;
    s->req = NULL;
    s->state = DC_RDMA_SLOT_DONE;
    dc_rdma_queue_ctrl(c, DC_RDMA_CT_ACK, c->cur.seq);
    dc_rdma_slot_advance(c);
}

/* Consume the byte stream in our ring into posted receive buffers. */
static void dc_rdma_rx_parse(dc_rdma_conn_t *c)
{
    while (c->state == DC_RDMA_ESTABLISHED) {
        uint64_t avail = c->lk.rx_avail - c->lk.rx_consumed;
        if (!c->in_payload) {
            if (avail == 0)
                return;
            uint64_t n = DC_MIN(avail, DC_VERBS_HDR_SIZE - c->hgot);
            (void)dc_rdma_ring_copy(c, c->hbuf + c->hgot, DC_VERBS_MEM_HOST, n);
            c->hgot += n;
            /* what is left for the payload: without this the payload copy
             * below took the header's bytes twice, ran past the bytes the
             * peer had written, and the next header was read from ring
             * memory no write had reached yet (bad magic 0x00000000, the
             * first run on a real device) */
            avail -= n;
            if (c->hgot < DC_VERBS_HDR_SIZE)
                return;
            dc_status_t hs = dc_verbs_hdr_unpack(c->hbuf, c->max_msg, &c->cur);
            if (hs == DC_ERR_CORRUPT) { /* transport.h: a damaged header breaks the stream */
                dc_rdma_lost(c, "damaged message header: %s", dc_last_error());
                return;
            }
            if (hs != DC_OK) {
                dc_rdma_fail(c, hs, "%s", dc_last_error());
                return;
            }
            if (c->cur.type != DC_VERBS_MSG_DATA) {
                dc_rdma_fail(c, DC_ERR_FORMAT, "non-data message type %u in the ring",
                             c->cur.type);
                return;
            }
            if (c->cur.seq >= c->rbase + DC_RDMA_RING) {
                dc_rdma_fail(c, DC_ERR_FORMAT, "message seq %llu outside the window",
                             (unsigned long long)c->cur.seq);
                return;
            }
            c->in_payload = 1;
            c->pay_done = 0;
            c->discard = c->cur.seq < c->rbase ||
                         c->slot[c->cur.seq % DC_RDMA_RING].state == DC_RDMA_SLOT_DONE;
            if (!c->discard) {
                dc_rdma_req_t *r = c->slot[c->cur.seq % DC_RDMA_RING].req;
                if (r && c->cur.len > r->len) {
                    r->state = DC_RDMA_R_FAILED;
                    r->err = DC_ERR_FORMAT;
                    c->discard = 1;
                }
            }
        }
        dc_rdma_req_t *r = c->slot[c->cur.seq % DC_RDMA_RING].req;
        if (!c->discard && !r)
            return; /* wait for the irecv() of this seq: the ring holds the bytes */
        if (!c->discard && c->cur.len > r->len) { /* irecv posted after the header */
            r->state = DC_RDMA_R_FAILED;
            r->err = DC_ERR_FORMAT;
            c->discard = 1;
        }
        uint64_t n = DC_MIN(avail, (uint64_t)c->cur.len - c->pay_done);
        if (n && dc_rdma_ring_copy(c, c->discard ? NULL : r->buf + c->pay_done,
                                   c->discard ? DC_VERBS_MEM_HOST : r->mkind, n) != DC_OK) {
            dc_rdma_fail(c, dc_last_status(), "receive into GPU memory: %s", dc_last_error());
            return;
        }
        c->pay_done += n;
        if (c->pay_done < c->cur.len)
            return;
        dc_rdma_msg_end(c);
    }
}

/* --- handshake ---------------------------------------------------------------- */

static void dc_rdma_auth_queue(dc_rdma_conn_t *c, uint8_t type, const uint8_t *a,
                               const uint8_t *b)
{
    uint8_t *m = c->auth_out;
    m[0] = type;
    size_t n = 1;
    if (a) {
        memcpy(m + n, a, 32);
        n += 32;
    }
    if (b) {
        memcpy(m + n, b, 32);
        n += 32;
    }
    c->auth_out_len = n;
}

static void dc_rdma_on_auth(dc_rdma_conn_t *c, const uint8_t *m, size_t len)
{
    uint8_t mac[DC_AUTH_MAC_SIZE];
    uint8_t type = len ? m[0] : 0;
    switch (c->state) {
    case DC_RDMA_S_ACCEPTING: /* the HELLO may complete before ESTABLISHED is read */
    case DC_RDMA_S_WAIT_HELLO:
        if (type != DC_RDMA_AUTH_HELLO || len != 33)
            break;
        memcpy(c->nc, m + 1, 32);
        if (dc_auth_nonce(c->ns) != DC_OK ||
            dc_auth_mac(c->secret, c->secret_len, 'S', c->nc, c->ns, mac) != DC_OK) {
            dc_rdma_fail(c, dc_last_status(), "%s", dc_last_error());
            return;
        }
        dc_rdma_auth_queue(c, DC_RDMA_AUTH_CHALLENGE, c->ns, mac);
        c->state = DC_RDMA_S_WAIT_PROOF;
        return;
    case DC_RDMA_S_WAIT_PROOF:
        if (type != DC_RDMA_AUTH_PROOF || len != 33)
            break;
        if (dc_auth_verify(c->secret, c->secret_len, 'C', c->nc, c->ns, m + 1, c->peer) !=
            DC_OK) {
            dc_rdma_auth_queue(c, DC_RDMA_AUTH_FAIL, NULL, NULL);
            dc_rdma_flush_ctrl(c);
            dc_rdma_fail(c, DC_ERR_AUTH, "client failed authentication (wrong job secret?)");
            return;
        }
        dc_rdma_auth_queue(c, DC_RDMA_AUTH_OK, NULL, NULL);
        c->state = DC_RDMA_ESTABLISHED;
        return;
    case DC_RDMA_C_WAIT_CHALLENGE:
        if (type == DC_RDMA_AUTH_FAIL) {
            dc_rdma_fail(c, DC_ERR_AUTH, "server rejected the handshake");
            return;
        }
        if (type != DC_RDMA_AUTH_CHALLENGE || len != 65)
            break;
        memcpy(c->ns, m + 1, 32);
        if (dc_auth_verify(c->secret, c->secret_len, 'S', c->nc, c->ns, m + 33, c->peer) !=
            DC_OK) {
            dc_rdma_fail(c, DC_ERR_AUTH, "server failed authentication (wrong job secret?)");
            return;
        }
        if (dc_auth_mac(c->secret, c->secret_len, 'C', c->nc, c->ns, mac) != DC_OK) {
            dc_rdma_fail(c, dc_last_status(), "%s", dc_last_error());
            return;
        }
        dc_rdma_auth_queue(c, DC_RDMA_AUTH_PROOF, mac, NULL);
        c->state = DC_RDMA_C_WAIT_OK;
        return;
    case DC_RDMA_C_WAIT_OK:
        if (type == DC_RDMA_AUTH_FAIL) {
            dc_rdma_fail(c, DC_ERR_AUTH, "server rejected our proof (wrong job secret?)");
            return;
        }
        if (type != DC_RDMA_AUTH_OK || len != 1)
            break;
        c->state = DC_RDMA_ESTABLISHED;
        if (c->reconnecting) {
            c->reconnecting = 0;
            c->stats.reconnects++;
            dc_rdma_resume(c);
        }
        return;
    default:
        break;
    }
    dc_rdma_fail(c, DC_ERR_AUTH, "unexpected handshake message type %u (%zu bytes)", type, len);
}

/* The transport header of a send request's message, carrying `crc`. */
static void dc_rdma_data_hdr(dc_rdma_req_t *r, uint32_t crc)
{
    dc_verbs_hdr_t h = {.type = DC_VERBS_MSG_DATA,
                        .seq = r->seq,
                        .len = (uint32_t)r->len,
                        .crc = crc};
    dc_verbs_hdr_pack(&h, r->hdr);
}

static void dc_rdma_on_ctrl(dc_rdma_conn_t *c, const uint8_t *m, size_t len)
{
    if (len < DC_RDMA_CTRL_HDR || len > DC_RDMA_CTRL_SIZE || dc_load_le32(m) != DC_RDMA_CTRL_MAGIC) {
        dc_rdma_fail(c, DC_ERR_FORMAT, "malformed control message (%zu bytes)", len);
        return;
    }
    uint8_t type = m[4];
    if (c->state == DC_RDMA_BROKEN) {
        /* The link is going away; only a good-bye still matters. */
        if (type == DC_RDMA_CT_BYE)
            dc_rdma_fail(c, DC_ERR_RESET, "peer closed the connection");
        return;
    }
    uint64_t seq = dc_load_le64(m + 8);
    uint64_t consumed = dc_load_le64(m + 16), reposted = dc_load_le64(m + 24);
    if (consumed > c->lk.tx_written || consumed < c->lk.tx_peer_consumed ||
        reposted > c->lk.tx_wrs || reposted < c->lk.peer_reposted) {
        dc_rdma_fail(c, DC_ERR_FORMAT, "peer reported impossible credits");
        return;
    }
    c->lk.tx_peer_consumed = consumed;
    c->lk.peer_reposted = reposted;
    if (type == DC_RDMA_CT_BYE) {
        dc_rdma_fail(c, DC_ERR_RESET, "peer closed the connection");
        return;
    }
    if (type == DC_RDMA_CT_AUTH) {
        dc_rdma_on_auth(c, m + DC_RDMA_CTRL_HDR, len - DC_RDMA_CTRL_HDR);
        return;
    }
    if (c->state != DC_RDMA_ESTABLISHED) {
        dc_rdma_fail(c, DC_ERR_AUTH, "control message before authentication completed");
        return;
    }
    if (type == DC_RDMA_CT_ACK) {
        dc_rdma_req_t *r = dc_verbs_window_ack(&c->win, seq);
        if (r && r->state == DC_RDMA_R_PENDING) {
            r->state = DC_RDMA_R_DONE;
            c->stats.msgs_sent++;
            c->stats.bytes_sent += r->len;
        }
    } else if (type == DC_RDMA_CT_NACK) {
        dc_rdma_req_t *r = dc_verbs_window_get(&c->win, seq);
        if (r && r->state == DC_RDMA_R_PENDING && !r->queued) {
            c->stats.resends++;
            if (r->crc_known) {
                /* the caller's CRC32C may be what was wrong: the re-send
                 * carries our own (one round trip, never a NACK loop);
                 * the peer has read the old header already */
                uint32_t crc = 0;
                if (dc_verbs_crc32c(r->mkind, r->buf, r->len, &crc) != DC_OK) {
                    dc_rdma_fail(c, dc_last_status(), "CRC32C of a message in GPU memory: %s",
                                 dc_last_error());
                    return;
                }
                dc_rdma_data_hdr(r, crc);
                r->crc_known = 0;
            }
            dc_rdma_txq_push(c, r);
        }
    } else if (type != DC_RDMA_CT_CREDIT) {
        dc_rdma_fail(c, DC_ERR_FORMAT, "unknown control message type %u", type);
    }
}

/* --- completions and connection events --------------------------------------------- */

static const char *dc_rdma_wc_hint(enum ibv_wc_status s)
{
    switch (s) {
    case IBV_WC_RETRY_EXC_ERR:
        return " (the peer stopped answering: crashed, unreachable, or an MTU mismatch on the "
               "path drops frames)";
    case IBV_WC_RNR_RETRY_EXC_ERR:
        return " (the peer had no receive posted)";
    case IBV_WC_REM_ACCESS_ERR:
        return " (the peer's ring key was refused)";
    default:
        return "";
    }
}

static void dc_rdma_poll_cq(dc_rdma_conn_t *c)
{
    if (!c->lk.cq)
        return;
    /* Consume completion-channel events so that fd() does not stay readable. */
    struct ibv_cq *ecq;
    void *ectx;
    while (c->lk.cc && ibv_get_cq_event(c->lk.cc, &ecq, &ectx) == 0) {
        ibv_ack_cq_events(ecq, 1);
        ibv_req_notify_cq(ecq, 0);
    }
    struct ibv_wc wc[32];
    for (int round = 0; round < 64; round++) {
        int n = ibv_poll_cq(c->lk.cq, (int)DC_ARRAY_SIZE(wc), wc);
        if (n < 0) {
            dc_rdma_lost(c, "ibv_poll_cq failed");
            return;
        }
        if (n == 0)
            return;
        for (int i = 0; i < n; i++) {
            struct ibv_wc *w = &wc[i];
            if (w->status != IBV_WC_SUCCESS) {
                if (w->status != IBV_WC_WR_FLUSH_ERR ||
                    (c->state != DC_RDMA_FAILED && c->state != DC_RDMA_BROKEN))
                    dc_rdma_lost(c, "work completion error: %s%s", ibv_wc_status_str(w->status),
                                 dc_rdma_wc_hint(w->status));
                /* (opcode is undefined in an error completion: use wr_id) */
                if (w->wr_id & DC_RDMA_WR_SEND) {
                    dc_rdma_sqe_t *e = &c->lk.sq[(w->wr_id & ~DC_RDMA_WR_SEND) % DC_RDMA_SQ_DEPTH];
                    if (e->req) {
                        e->req->wrs--;
                        e->req = NULL;
                    }
                    c->lk.sq_done++;
                }
                continue;
            }
            if (w->opcode == IBV_WC_RECV_RDMA_WITH_IMM || w->opcode == IBV_WC_RECV) {
                c->lk.rq_completed++;
                if (w->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
                    uint32_t k = ntohl(w->imm_data);
                    if (c->state == DC_RDMA_BROKEN || c->state == DC_RDMA_FAILED) {
                        /* the link is going away: its ring is dropped */
                    } else if (c->state != DC_RDMA_ESTABLISHED) {
                        dc_rdma_fail(c, DC_ERR_AUTH, "data written before authentication");
                    } else if (k > DC_RDMA_RING_BYTES ||
                               c->lk.rx_avail + k - c->lk.rx_consumed > DC_RDMA_RING_BYTES) {
                        dc_rdma_fail(c, DC_ERR_FORMAT, "peer overran the receive ring");
                    } else {
                        c->lk.rx_avail += k;
                    }
                } else if (w->wr_id < DC_RDMA_RQ_DEPTH) {
                    dc_rdma_on_ctrl(c, c->lk.crecv + w->wr_id * DC_RDMA_CTRL_SIZE, w->byte_len);
                }
                if (w->wr_id < DC_RDMA_RQ_DEPTH && c->state != DC_RDMA_FAILED &&
                    c->state != DC_RDMA_BROKEN && dc_rdma_post_recv(c, (uint32_t)w->wr_id) != 0)
                    dc_rdma_lost(c, "ibv_post_recv failed");
            } else {
                dc_rdma_sqe_t *e = &c->lk.sq[(w->wr_id & ~DC_RDMA_WR_SEND) % DC_RDMA_SQ_DEPTH];
                if (e->req) {
                    e->req->wrs--;
                    e->req = NULL;
                }
                if (e->stage_end > c->lk.stage_tail)
                    c->lk.stage_tail = e->stage_end;
                c->lk.sq_done++;
            }
        }
    }
}

static void dc_rdma_on_established(dc_rdma_conn_t *c, const struct rdma_cm_event *ev)
{
    if (c->is_client) {
        dc_rdma_pdata_t pd;
        if (dc_rdma_pdata_unpack(c->peer, ev->param.conn.private_data,
                                 ev->param.conn.private_data_len, &pd) != DC_OK) {
            dc_rdma_fail(c, dc_last_status(), "%s", dc_last_error());
            return;
        }
        if (pd.session != c->sess.id || pd.epoch != c->sess.epoch) {
            dc_rdma_fail(c, DC_ERR_FORMAT,
                         "server answered for session %016llx epoch %u, we dialed %016llx "
                         "epoch %u",
                         (unsigned long long)pd.session, pd.epoch, (unsigned long long)c->sess.id,
                         c->sess.epoch);
            return;
        }
        dc_rdma_pdata_apply(c, &pd);
        if (dc_auth_nonce(c->nc) != DC_OK) {
            dc_rdma_fail(c, dc_last_status(), "%s", dc_last_error());
            return;
        }
        dc_rdma_auth_queue(c, DC_RDMA_AUTH_HELLO, c->nc, NULL);
        c->state = DC_RDMA_C_WAIT_CHALLENGE;
    } else if (c->state == DC_RDMA_S_ACCEPTING) {
        c->state = DC_RDMA_S_WAIT_HELLO;
    }
}

/* Remaining time of the current (re-)dial in ms for rdmacm, at least 1. */
static int dc_rdma_dial_ms(const dc_rdma_conn_t *c)
{
    double left = (c->deadline - dc_now_s()) * 1000.0;
    if (left > c->timeout_ms)
        left = c->timeout_ms;
    return left < 1 ? 1 : (int)left;
}

static void dc_rdma_on_cm_event(dc_rdma_conn_t *c, struct rdma_cm_event *ev)
{
    /* A link that is going away (or gone for good) only learns that the
     * peer disconnected; no setup step may run on it. */
    if ((c->state == DC_RDMA_FAILED || c->state == DC_RDMA_BROKEN) &&
        ev->event != RDMA_CM_EVENT_DISCONNECTED)
        return;
    switch (ev->event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED: {
        if (dc_rdma_setup(c, ev->id) != DC_OK) {
            dc_rdma_setup_failed(c, dc_last_status(), "%s", dc_last_error());
            break;
        }
        if (rdma_resolve_route(ev->id, dc_rdma_dial_ms(c)) != 0)
            dc_rdma_setup_failed(c, DC_ERR_IO, "rdma_resolve_route: %s", strerror(errno));
        break;
    }
    case RDMA_CM_EVENT_ROUTE_RESOLVED: {
        uint8_t pd[DC_RDMA_PDATA_SIZE];
        dc_rdma_pdata_pack(c, pd);
        struct rdma_conn_param cp;
        memset(&cp, 0, sizeof(cp));
        cp.private_data = pd;
        cp.private_data_len = sizeof(pd);
        cp.responder_resources = 1;
        cp.initiator_depth = 1;
        cp.retry_count = 7;
        cp.rnr_retry_count = 7;
        if (rdma_connect(ev->id, &cp) != 0)
            dc_rdma_setup_failed(c, DC_ERR_IO, "rdma_connect: %s", strerror(errno));
        break;
    }
    case RDMA_CM_EVENT_ESTABLISHED:
        dc_rdma_on_established(c, ev);
        break;
    case RDMA_CM_EVENT_ADDR_ERROR:
        dc_rdma_setup_failed(c, DC_ERR_UNSUPPORTED,
                             "address resolution failed (status %d): no RDMA device serves the "
                             "route to this address (an IPoIB/RoCE interface address is needed)",
                             ev->status);
        break;
    case RDMA_CM_EVENT_ROUTE_ERROR:
        dc_rdma_setup_failed(c, DC_ERR_TIMEOUT,
                             "route resolution failed (status %d): no path to the peer (subnet "
                             "manager / GID / VLAN setup?)",
                             ev->status);
        break;
    case RDMA_CM_EVENT_UNREACHABLE:
        dc_rdma_setup_failed(c, DC_ERR_TIMEOUT,
                             "peer unreachable: the connection handshake timed out (is a "
                             "deltacast rdma listener running there? firewall? MTU mismatch on "
                             "RoCE?)");
        break;
    case RDMA_CM_EVENT_REJECTED: {
        uint16_t why = dc_rdma_reject_reason(ev);
        if (why == DC_RDMA_REJ_UNKNOWN && c->reconnecting)
            dc_rdma_fail(c, DC_ERR_CANCELED,
                         "the server no longer knows session %016llx (it closed the connection, "
                         "gave up waiting for us, or restarted): cannot resume",
                         (unsigned long long)c->sess.id);
        else if (why == DC_RDMA_REJ_STALE && c->reconnecting)
            dc_rdma_lost(c, "the server refused epoch %u as stale", c->sess.epoch);
        else
            dc_rdma_setup_failed(c, DC_ERR_RESET,
                                 "connection rejected by the peer (status %d%s: no rdma listener "
                                 "on that port, or it refused us)",
                                 ev->status, why == DC_RDMA_REJ_DUP ? ", duplicate session" : "");
        break;
    }
    case RDMA_CM_EVENT_CONNECT_ERROR:
        dc_rdma_setup_failed(c, DC_ERR_RESET, "connection error (status %d)", ev->status);
        break;
    case RDMA_CM_EVENT_DISCONNECTED:
        c->lk.disconnected = 1;
        /* An orderly close sends BYE before disconnecting: take it from the CQ
         * first, so that the peer's close is not mistaken for a broken link
         * (a BROKEN link still takes a BYE, dc_rdma_on_ctrl). */
        if (c->state != DC_RDMA_FAILED)
            dc_rdma_poll_cq(c);
        dc_rdma_lost(c, "peer disconnected");
        break;
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
        dc_rdma_lost(c, "RDMA device removed");
        break;
    default:
        break;
    }
}

static void dc_rdma_cm_poll(dc_rdma_conn_t *c)
{
    struct rdma_cm_event *ev;
    while (c->lk.ch && rdma_get_cm_event(c->lk.ch, &ev) == 0) {
        dc_rdma_on_cm_event(c, ev);
        rdma_ack_cm_event(ev);
    }
}

static dc_status_t dc_rdma_conn_channel(dc_rdma_conn_t *c)
{
    if (!(c->lk.ch = rdma_create_event_channel()))
        return dc_error_errno(DC_ERR_UNSUPPORTED, errno, "rdma: rdma_create_event_channel");
    dc_net_nonblock(c->lk.ch->fd);
    struct epoll_event ev = {.events = EPOLLIN};
    epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->lk.ch->fd, &ev);
    return DC_OK;
}

/* Client: a fresh event channel and rdmacm id towards c->raddr; the rest
 * (route, QP, connect, authentication) follows from the events. */
static dc_status_t dc_rdma_dial(dc_rdma_conn_t *c)
{
    dc_status_t st = dc_rdma_conn_channel(c);
    if (st != DC_OK)
        return st;
    struct rdma_cm_id *id = NULL;
    if (rdma_create_id(c->lk.ch, &id, c, RDMA_PS_TCP) != 0)
        return dc_error_errno(DC_ERR_UNSUPPORTED, errno, "rdma: rdma_create_id");
    c->lk.id = id;
    if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&c->raddr, dc_rdma_dial_ms(c)) != 0)
        return dc_error_errno(DC_ERR_UNSUPPORTED, errno,
                              "rdma: cannot resolve %s to an RDMA device", c->peer);
    return DC_OK;
}

/* Re-dial a broken client connection: same session, next epoch, same PD
 * (so the caller's registrations stay valid); the handshake runs again, then
 * the un-ACKed window is re-sent (dc_rdma_on_auth -> dc_rdma_resume). */
static void dc_rdma_redial(dc_rdma_conn_t *c)
{
    c->next_dial = dc_now_s() + 0.2;
    c->sess.epoch++; /* every attempt: the server refuses epochs it has seen */
    c->reconnecting = 1;
    c->deadline = c->broken_deadline;
    DC_LOG_INFO("rdma %s: re-dialing (session %016llx, epoch %u)", c->peer,
                (unsigned long long)c->sess.id, c->sess.epoch);
    if (dc_rdma_dial(c) != DC_OK) {
        DC_LOG_INFO("rdma %s: re-dial failed: %s", c->peer, dc_last_error());
        snprintf(c->why, sizeof(c->why), "%s", dc_last_error());
        dc_rdma_drop_link(c); /* no event was delivered on the new id yet */
        return;               /* still BROKEN: again at next_dial */
    }
    c->state = DC_RDMA_C_RESOLVING;
}

static void dc_rdma_conn_progress(dc_rdma_conn_t *c)
{
    if (c->state == DC_RDMA_BROKEN) {
        /* Here, outside any event handler, the old link can be freed. */
        dc_rdma_drop_link(c);
        double now = dc_now_s();
        if (now > c->broken_deadline) {
            dc_rdma_fail(c, DC_ERR_RESET,
                         c->is_client
                             ? "connection lost (%s) and not re-established within %u ms"
                             : "connection lost (%s) and the peer did not re-attach within %u ms",
                         c->why, c->timeout_ms);
            return;
        }
        if (!c->is_client || now < c->next_dial)
            return; /* server: the listener's accept() re-attaches us */
        dc_rdma_redial(c);
        if (c->state != DC_RDMA_C_RESOLVING)
            return;
    }
    dc_rdma_cm_poll(c);
    dc_rdma_poll_cq(c);
    /* A server-side re-dial holds the peer's data until the listener hands
     * its link to the connection it resumes (dc_rdma_adopt). */
    if (c->state == DC_RDMA_ESTABLISHED && !c->is_redial)
        dc_rdma_rx_parse(c);
    if (c->state != DC_RDMA_FAILED && c->state != DC_RDMA_BROKEN)
        dc_rdma_flush_ctrl(c);
    if (c->state == DC_RDMA_ESTABLISHED && !c->is_redial)
        dc_rdma_tx_pump(c);
    if (c->state != DC_RDMA_ESTABLISHED && c->state != DC_RDMA_FAILED &&
        c->state != DC_RDMA_BROKEN && dc_now_s() > c->deadline) {
        if (c->reconnecting) /* deadline == broken_deadline */
            dc_rdma_fail(c, DC_ERR_RESET,
                         "connection lost (%s) and not re-established within %u ms (the last "
                         "re-dial hung in %s)",
                         c->why, c->timeout_ms,
                         c->state == DC_RDMA_C_RESOLVING ? "connection setup" : "authentication");
        else
            dc_rdma_fail(c, DC_ERR_TIMEOUT,
                         c->state == DC_RDMA_C_RESOLVING || c->state == DC_RDMA_S_ACCEPTING
                             ? "connection setup not completed within %u ms (address/route "
                               "resolution or the CM handshake hung)"
                             : "authentication not completed within %u ms",
                         c->timeout_ms);
    }
}

/* --- connection objects ------------------------------------------------------------ */

static dc_status_t dc_rdma_conn_alloc(const dc_verbs_opts_t *o, dc_rdma_conn_t **out)
{
    dc_rdma_conn_t *c = calloc(1, sizeof(*c));
    if (!c)
        return dc_error(DC_ERR_NOMEM, "rdma: out of memory for a connection");
    c->base.ops = &dc_rdma_ops;
    c->timeout_ms = o->timeout_ms;
    c->max_msg = o->max_msg_size;
    c->stats.size = sizeof(c->stats);
    c->stats.streams = 1;
    dc_verbs_window_init(&c->win);
    snprintf(c->peer, sizeof(c->peer), "?");
    c->epfd = epoll_create1(EPOLL_CLOEXEC);
    c->secret = malloc(o->secret_len);
    if (c->epfd < 0 || !c->secret) {
        if (c->epfd >= 0)
            close(c->epfd);
        free(c->secret);
        free(c);
        return dc_error(DC_ERR_NOMEM, "rdma: cannot allocate a connection");
    }
    memcpy(c->secret, o->secret, o->secret_len);
    c->secret_len = o->secret_len;
    c->deadline = dc_now_s() + c->timeout_ms / 1000.0;
    *out = c;
    return DC_OK;
}

static void dc_rdma_listener_unref(dc_rdma_listener_t *l);

static void dc_rdma_conn_destroy(dc_rdma_conn_t *c)
{
    if (!c)
        return;
    dc_rdma_listener_t *l = c->lst;
    if (l) {
        dc_session_remove(&l->reg, &c->sess);
        c->lst = NULL;
    }
    if (c->state == DC_RDMA_ESTABLISHED && c->lk.qp) {
        /* Queued ACKs, then BYE, go out (and complete) before the disconnect:
         * the peer must not mistake an orderly close for a broken link and
         * re-dial. */
        dc_rdma_flush_ctrl(c);
        double deadline = dc_now_s() + 1.0;
        int bye = 0;
        while (c->state == DC_RDMA_ESTABLISHED && dc_now_s() < deadline) {
            if (!bye)
                bye = dc_rdma_ctrl_send(c, DC_RDMA_CT_BYE, 0, NULL, 0) == 0;
            if (bye && c->lk.sq_done >= c->lk.sq_posted)
                break;
            dc_rdma_poll_cq(c);
        }
    }
    dc_rdma_drop_link(c);
    if (c->own_pd && c->pd)
        ibv_dealloc_pd(c->pd);
    if (c->epfd >= 0)
        close(c->epfd);
    while (c->reqs) {
        dc_rdma_req_t *r = c->reqs;
        c->reqs = r->next;
        free(r);
    }
    while (c->req_free) {
        dc_rdma_req_t *r = c->req_free;
        c->req_free = r->next;
        free(r);
    }
    if (c->secret) {
        memset(c->secret, 0, c->secret_len);
        free(c->secret);
    }
    free(c);
    if (l)
        dc_rdma_listener_unref(l); /* after the link: the PD may be the listener's */
}

/* --- listener --------------------------------------------------------------------- */

static dc_status_t dc_rdma_listen(const dc_verbs_opts_t *opts, const char *bind_addr,
                                  dc_verbs_listener_t **out)
{
    dc_status_t st = dc_rdma_init();
    if (st != DC_OK)
        return st;
    uint8_t secret[DC_AUTH_MAX_SECRET];
    dc_verbs_opts_t o;
    if ((st = dc_verbs_opts_resolve(opts, &o, secret, sizeof(secret))) != DC_OK)
        return st;
    struct sockaddr_storage ss;
    if ((st = dc_net_resolve("rdma", bind_addr, true, &ss, NULL)) != DC_OK)
        goto out_secret;
    dc_rdma_listener_t *l = calloc(1, sizeof(*l));
    if (!l) {
        st = dc_error(DC_ERR_NOMEM, "rdma: out of memory");
        goto out_secret;
    }
    l->base.ops = &dc_rdma_ops;
    l->refs = 1;
    l->epfd = -1;
    if (!(l->secret = malloc(o.secret_len))) {
        st = dc_error(DC_ERR_NOMEM, "rdma: out of memory");
        goto fail_free;
    }
    memcpy(l->secret, o.secret, o.secret_len);
    l->secret_len = o.secret_len;
    l->opts = o;
    l->opts.secret = NULL;
    if (!(l->ch = rdma_create_event_channel())) {
        st = dc_error_errno(DC_ERR_UNSUPPORTED, errno, "rdma: rdma_create_event_channel");
        goto fail_free;
    }
    dc_net_nonblock(l->ch->fd);
    if (rdma_create_id(l->ch, &l->id, l, RDMA_PS_TCP) != 0) {
        st = dc_error_errno(DC_ERR_UNSUPPORTED, errno, "rdma: rdma_create_id");
        goto fail_channel;
    }
    if (rdma_bind_addr(l->id, (struct sockaddr *)&ss) != 0) {
        st = dc_error_errno(errno == EADDRINUSE ? DC_ERR_IO : DC_ERR_UNSUPPORTED, errno,
                            "rdma: cannot bind %s (an address of an RDMA-capable interface "
                            "is needed)",
                            bind_addr);
        goto fail_id;
    }
    if (rdma_listen(l->id, 64) != 0) {
        st = dc_error_errno(DC_ERR_IO, errno, "rdma: rdma_listen on %s", bind_addr);
        goto fail_id;
    }
    dc_net_sockaddr_str(rdma_get_local_addr(l->id), l->addr, sizeof(l->addr));
    if ((l->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
        st = dc_error_errno(DC_ERR_IO, errno, "rdma: epoll_create1");
        goto fail_id;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->ch->fd, &ev);
    DC_LOG_INFO("rdma: listening on %s (%s)", l->addr, dc_rdma_dev);
    *out = &l->base;
    st = DC_OK;
    goto out_secret;

fail_id:
    rdma_destroy_id(l->id);
fail_channel:
    rdma_destroy_event_channel(l->ch);
fail_free:
    if (l->secret) {
        memset(l->secret, 0, l->secret_len);
        free(l->secret);
    }
    free(l);
out_secret:
    memset(secret, 0, sizeof(secret));
    return st;
}

static dc_status_t dc_rdma_listen_addr(dc_verbs_listener_t *lb, char *buf, size_t len)
{
    dc_rdma_listener_t *l = (dc_rdma_listener_t *)lb;
    if ((size_t)snprintf(buf, len, "%s", l->addr) >= len)
        return dc_error(DC_ERR_INVALID, "rdma: buffer too small for the listener address");
    return DC_OK;
}

static int dc_rdma_listen_fd(dc_verbs_listener_t *lb)
{
    return ((dc_rdma_listener_t *)lb)->epfd;
}

/* The listener's protection domain on device `v` (created on first use). */
static struct ibv_pd *dc_rdma_listener_pd(dc_rdma_listener_t *l, struct ibv_context *v)
{
    if (!v) {
        dc_error(DC_ERR_UNSUPPORTED, "rdma listener %s: request without an RDMA device", l->addr);
        return NULL;
    }
    for (unsigned i = 0; i < l->npds; i++)
        if (l->pds[i]->context == v)
            return l->pds[i];
    if (l->npds == DC_RDMA_MAX_PDS) {
        dc_error(DC_ERR_UNSUPPORTED, "rdma listener %s: requests on more than %d RDMA devices",
                 l->addr, DC_RDMA_MAX_PDS);
        return NULL;
    }
    struct ibv_pd *pd = ibv_alloc_pd(v);
    if (!pd) {
        dc_error_errno(DC_ERR_IO, errno, "rdma listener %s: ibv_alloc_pd", l->addr);
        return NULL;
    }
    l->pds[l->npds++] = pd;
    return pd;
}

static dc_rdma_conn_t *dc_rdma_find_session(dc_rdma_listener_t *l, uint64_t session)
{
    dc_session_t *s = dc_session_find(l->reg, session, NULL);
    return s ? DC_SESSION_OWNER(s, dc_rdma_conn_t, sess) : NULL;
}

/* May a dial of epoch `epoch` go on, given the accepted connection e of
 * its session (NULL: none)?  0, or why not (DC_RDMA_REJ_*).  Asked at the
 * connect request (to refuse at once) and again before a link is handed
 * over (the registry may have changed during the handshake). */
static uint16_t dc_rdma_session_verdict(const dc_rdma_conn_t *e, uint32_t epoch)
{
    /* a failed session cannot resume, but its id stays in use */
    const dc_rdma_conn_t *held = e && (epoch == 1 || e->state != DC_RDMA_FAILED) ? e : NULL;
    switch (dc_session_judge(held ? &held->sess : NULL, epoch, 1, false)) {
    case DC_SESSION_UNKNOWN: return DC_RDMA_REJ_UNKNOWN;
    case DC_SESSION_STALE: return DC_RDMA_REJ_STALE;
    case DC_SESSION_DUP: return DC_RDMA_REJ_DUP;
    default: return 0;
    }
}

static const char *dc_rdma_rej_str(uint16_t why)
{
    switch (why) {
    case DC_RDMA_REJ_UNKNOWN: return dc_session_verdict_str(DC_SESSION_UNKNOWN);
    case DC_RDMA_REJ_STALE: return dc_session_verdict_str(DC_SESSION_STALE);
    case DC_RDMA_REJ_DUP: return dc_session_verdict_str(DC_SESSION_DUP);
    default: return "refused";
    }
}

static void dc_rdma_on_connect_request(dc_rdma_listener_t *l, struct rdma_cm_event *ev)
{
    struct rdma_cm_id *id = ev->id;
    char peer[128];
    dc_net_sockaddr_str(rdma_get_peer_addr(id), peer, sizeof(peer));
    /* The private data is valid until the event is acknowledged. */
    dc_rdma_pdata_t pd;
    memset(&pd, 0, sizeof(pd));
    uint16_t rej = 0;
    dc_status_t st = dc_rdma_pdata_unpack(peer, ev->param.conn.private_data,
                                          ev->param.conn.private_data_len, &pd);
    rdma_ack_cm_event(ev);
    if (st == DC_OK) {
        /* Routing only (authentication follows, and dc_rdma_accept checks
         * again before a link is handed over): refuse re-dials that cannot
         * resume, so that the client gives up at once instead of timing out. */
        dc_rdma_conn_t *e = dc_rdma_find_session(l, pd.session);
        rej = dc_rdma_session_verdict(e, pd.epoch);
        if (rej)
            st = dc_error(rej == DC_RDMA_REJ_UNKNOWN ? DC_ERR_CANCELED
                          : rej == DC_RDMA_REJ_STALE ? DC_ERR_RESET
                                                     : DC_ERR_FORMAT,
                          "rdma %s: session %016llx, epoch %u%s: %s", peer,
                          (unsigned long long)pd.session, pd.epoch,
                          e ? "" : " (no such session)", dc_rdma_rej_str(rej));
    }
    dc_rdma_conn_t *c = NULL;
    if (st == DC_OK) {
        dc_verbs_opts_t o = l->opts;
        o.secret = l->secret;
        o.secret_len = l->secret_len;
        st = dc_rdma_conn_alloc(&o, &c);
    }
    if (st != DC_OK) {
        DC_LOG_WARN("rdma listener %s: dropped %s: %s", l->addr, peer, dc_last_error());
        if (rej)
            dc_rdma_reject(id, rej);
        else
            rdma_reject(id, NULL, 0);
        rdma_destroy_id(id);
        return;
    }
    snprintf(c->peer, sizeof(c->peer), "%s", peer);
    c->lk.id = id;
    c->sess.id = pd.session;
    c->sess.epoch = pd.epoch;
    c->is_redial = pd.epoch > 1;
    st = dc_rdma_conn_channel(c);
    if (st == DC_OK && rdma_migrate_id(id, c->lk.ch) != 0)
        st = dc_error_errno(DC_ERR_IO, errno, "rdma %s: rdma_migrate_id", peer);
    if (st == DC_OK && !(c->pd = dc_rdma_listener_pd(l, id->verbs)))
        st = dc_last_status();
    if (st == DC_OK)
        st = dc_rdma_setup(c, id);
    if (st == DC_OK) {
        dc_rdma_pdata_apply(c, &pd);
        uint8_t mine[DC_RDMA_PDATA_SIZE];
        dc_rdma_pdata_pack(c, mine); /* echoes the session and epoch */
        struct rdma_conn_param cp;
        memset(&cp, 0, sizeof(cp));
        cp.private_data = mine;
        cp.private_data_len = sizeof(mine);
        cp.responder_resources = 1;
        cp.initiator_depth = 1;
        cp.rnr_retry_count = 7;
        if (rdma_accept(id, &cp) != 0)
            st = dc_error_errno(DC_ERR_IO, errno, "rdma %s: rdma_accept", peer);
    }
    if (st != DC_OK) {
        DC_LOG_WARN("rdma listener %s: dropped %s: %s", l->addr, peer, dc_last_error());
        if (!c->lk.qp)
            rdma_reject(id, NULL, 0);
        dc_rdma_conn_destroy(c); /* destroys id (c->lk.id); c->pd is the listener's */
        return;
    }
    c->state = DC_RDMA_S_ACCEPTING;
    struct epoll_event e2 = {.events = EPOLLIN, .data.ptr = c};
    epoll_ctl(l->epfd, EPOLL_CTL_ADD, c->epfd, &e2);
    c->next = l->handshaking;
    l->handshaking = c;
    if (c->is_redial)
        DC_LOG_INFO("rdma listener %s: %s re-dials session %016llx (epoch %u)", l->addr, peer,
                    (unsigned long long)c->sess.id, c->sess.epoch);
}

/*
 * The re-dial `t` of the session of the accepted connection `e` passed the
 * handshake: `e` drops its old link (if the break was not noticed yet), takes
 * over t's authenticated link (same PD: the caller's registrations stay
 * valid), and re-sends what the peer has not ACKed; the peer's re-sent data
 * waits in that link's ring.  `t` is freed.  fd() stays the same.
 */
static void dc_rdma_adopt(dc_rdma_listener_t *l, dc_rdma_conn_t *e, dc_rdma_conn_t *t)
{
    dc_rdma_drop_link(e);
    e->lk = t->lk;
    memset(&t->lk, 0, sizeof(t->lk));
    if (e->lk.id)
        e->lk.id->context = e;
    struct epoll_event ev = {.events = EPOLLIN};
    if (e->lk.ch)
        epoll_ctl(e->epfd, EPOLL_CTL_ADD, e->lk.ch->fd, &ev);
    if (e->lk.cc)
        epoll_ctl(e->epfd, EPOLL_CTL_ADD, e->lk.cc->fd, &ev);
    /* The handshake's last reply may still wait for a send slot. */
    memcpy(e->auth_out, t->auth_out, t->auth_out_len);
    e->auth_out_len = t->auth_out_len;
    e->sess.epoch = t->sess.epoch;
    snprintf(e->peer, sizeof(e->peer), "%s", t->peer);
    e->stats.wire_bytes_sent += t->stats.wire_bytes_sent;
    e->stats.reconnects++;
    e->state = DC_RDMA_ESTABLISHED;
    DC_LOG_INFO("rdma listener %s: %s re-attached session %016llx (epoch %u)", l->addr, e->peer,
                (unsigned long long)e->sess.id, e->sess.epoch);
    dc_rdma_resume(e);
    dc_rdma_conn_destroy(t); /* no link, not ESTABLISHED on one: no BYE */
}

static dc_status_t dc_rdma_accept(dc_verbs_listener_t *lb, dc_verbs_conn_t **out)
{
    dc_rdma_listener_t *l = (dc_rdma_listener_t *)lb;
    struct rdma_cm_event *ev;
    while (rdma_get_cm_event(l->ch, &ev) == 0) {
        if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
            dc_rdma_on_connect_request(l, ev); /* acks the event */
            continue;
        }
        rdma_ack_cm_event(ev);
    }
    for (dc_rdma_conn_t **pp = &l->handshaking; *pp;) {
        dc_rdma_conn_t *c = *pp;
        dc_rdma_conn_progress(c);
        if (c->state == DC_RDMA_ESTABLISHED || c->state == DC_RDMA_FAILED) {
            *pp = c->next;
            c->next = NULL;
            epoll_ctl(l->epfd, EPOLL_CTL_DEL, c->epfd, NULL);
            if (c->state == DC_RDMA_FAILED) {
                DC_LOG_WARN("rdma listener %s: dropped peer: %s", l->addr, c->errmsg);
                dc_rdma_conn_destroy(c);
                continue;
            }
            dc_rdma_conn_t *e = dc_rdma_find_session(l, c->sess.id);
            if (c->is_redial || e) {
                uint16_t why = dc_rdma_session_verdict(e, c->sess.epoch);
                if (!why && c->is_redial && c->pd == e->pd) {
                    dc_rdma_adopt(l, e, c);
                } else {
                    DC_LOG_WARN("rdma listener %s: dropped %s (session %016llx, epoch %u): %s",
                                l->addr, c->peer, (unsigned long long)c->sess.id, c->sess.epoch,
                                why ? dc_rdma_rej_str(why) : "re-dial on another RDMA device");
                    dc_rdma_conn_destroy(c); /* sends BYE: the client gives up */
                }
                continue;
            }
            c->lst = l;
            l->refs++;
            dc_session_add(&l->reg, &c->sess);
            DC_LOG_INFO("rdma: accepted %s on %s (session %016llx)", c->peer, dc_rdma_dev,
                        (unsigned long long)c->sess.id);
            *out = &c->base;
            return DC_OK;
        }
        pp = &c->next;
    }
    return DC_ERR_AGAIN;
}

static void dc_rdma_listen_close(dc_verbs_listener_t *lb)
{
    dc_rdma_listener_t *l = (dc_rdma_listener_t *)lb;
    if (l)
        dc_rdma_listener_unref(l);
}

/* Freed when the caller closed it and no accepted connection remains (they
 * use its protection domains, and re-attach through it). */
static void dc_rdma_listener_unref(dc_rdma_listener_t *l)
{
    if (--l->refs > 0)
        return;
    while (l->handshaking) {
        dc_rdma_conn_t *c = l->handshaking;
        l->handshaking = c->next;
        dc_rdma_conn_destroy(c);
    }
    rdma_destroy_id(l->id);
    rdma_destroy_event_channel(l->ch);
    for (unsigned i = 0; i < l->npds; i++)
        if (ibv_dealloc_pd(l->pds[i]) != 0)
            DC_LOG_WARN("rdma listener %s: protection domain still in use (memory registered "
                        "with reg_mem and never released?)",
                        l->addr);
    if (l->epfd >= 0)
        close(l->epfd);
    if (l->secret) {
        memset(l->secret, 0, l->secret_len);
        free(l->secret);
    }
    free(l);
}

/* --- connect ---------------------------------------------------------------------- */

static dc_status_t dc_rdma_connect(const dc_verbs_opts_t *opts, const char *addr,
                                   dc_verbs_conn_t **out)
{
    dc_status_t st = dc_rdma_init();
    if (st != DC_OK)
        return st;
    uint8_t secret[DC_AUTH_MAX_SECRET];
    dc_verbs_opts_t o;
    if ((st = dc_verbs_opts_resolve(opts, &o, secret, sizeof(secret))) != DC_OK)
        return st;
    struct sockaddr_storage ss;
    dc_rdma_conn_t *c = NULL;
    if ((st = dc_net_resolve("rdma", addr, false, &ss, NULL)) != DC_OK)
        goto out_secret;
    if ((st = dc_rdma_conn_alloc(&o, &c)) != DC_OK)
        goto out_secret;
    c->is_client = 1;
    snprintf(c->peer, sizeof(c->peer), "%s", addr);
    memcpy(&c->raddr, &ss, sizeof(ss));
    if ((st = dc_session_start(&c->sess, 1)) != DC_OK)
        goto fail_conn;
    if ((st = dc_rdma_dial(c)) != DC_OK)
        goto fail_conn;
    c->state = DC_RDMA_C_RESOLVING;
    *out = &c->base;
    st = DC_OK;
    goto out_secret;
fail_conn:
    dc_rdma_conn_destroy(c);
out_secret:
    memset(secret, 0, sizeof(secret));
    return st;
}

static dc_status_t dc_rdma_connect_test(dc_verbs_conn_t *cb)
{
    dc_rdma_conn_t *c = (dc_rdma_conn_t *)cb;
    dc_rdma_conn_progress(c);
    if (c->state == DC_RDMA_ESTABLISHED) {
        DC_LOG_INFO("rdma: connected to %s on %s", c->peer, dc_rdma_dev);
        return DC_OK;
    }
    if (c->state == DC_RDMA_FAILED)
        return dc_rdma_conn_error(c);
    return DC_ERR_AGAIN;
}

/* --- memory ------------------------------------------------------------------------- */

static dc_status_t dc_rdma_reg_mem(dc_verbs_conn_t *cb, void *buf, size_t len, uint32_t kind,
                                   dc_verbs_mr_t **out)
{
    dc_rdma_conn_t *c = (dc_rdma_conn_t *)cb;
    if (!c || !c->pd)
        return dc_error(DC_ERR_INVALID, "rdma reg_mem: needs a connection with its resources "
                                        "set up (after connect_test/accept)");
    if (!buf || len == 0)
        return dc_error(DC_ERR_INVALID, "rdma reg_mem: empty region");
    dc_rdma_mr_t *m = calloc(1, sizeof(*m));
    if (!m)
        return dc_error(DC_ERR_NOMEM, "rdma reg_mem: out of memory");
    if (kind == DC_VERBS_MEM_HOST) {
        m->mr = ibv_reg_mr(c->pd, buf, len, IBV_ACCESS_LOCAL_WRITE);
        if (!m->mr) {
            int e = errno;
            free(m);
            return dc_error_errno(DC_ERR_IO, e, "rdma: ibv_reg_mr of %zu bytes (locked-memory "
                                                "limit? `ulimit -l`)",
                                  len);
        }
    } else if (kind == DC_VERBS_MEM_CUDA) {
#if DC_HAVE_CUDA
        int fd = -1;
        dc_status_t st = dc_verbs_cuda_dmabuf_fd(buf, len, &fd);
        if (st != DC_OK) {
            free(m);
            return st;
        }
        m->mr = ibv_reg_dmabuf_mr(c->pd, 0, len, (uint64_t)(uintptr_t)buf, fd,
                                  IBV_ACCESS_LOCAL_WRITE);
        int e = errno;
        close(fd);
        if (!m->mr) {
            free(m);
            return dc_error_errno(DC_ERR_UNSUPPORTED, e,
                                  "rdma: ibv_reg_dmabuf_mr of %zu bytes of GPU memory (NIC "
                                  "driver without dma-buf support?)",
                                  len);
        }
#else
        free(m);
        return dc_error(DC_ERR_UNSUPPORTED, "rdma: GPU memory needs a build with CUDA");
#endif
    } else {
        free(m);
        return dc_error(DC_ERR_UNSUPPORTED, "rdma reg_mem: memory kind 0x%x not supported",
                        kind);
    }
    m->base.ops = &dc_rdma_ops;
    m->addr = buf;
    m->len = len;
    m->kind = kind;
    *out = &m->base;
    return DC_OK;
}

static void dc_rdma_dereg_mem(dc_verbs_conn_t *cb, dc_verbs_mr_t *mb)
{
    dc_rdma_mr_t *m = (dc_rdma_mr_t *)mb;
    if (!m)
        return;
    if (m->mr)
        ibv_dereg_mr(m->mr);
    free(m);
}

/* --- requests ----------------------------------------------------------------------- */

static dc_rdma_req_t *dc_rdma_req_new(dc_rdma_conn_t *c, dc_rdma_kind_t kind, void *buf,
                                      size_t len, dc_verbs_mr_t *mr)
{
    dc_rdma_req_t *r = c->req_free;
    if (r)
        c->req_free = r->next;
    else if (!(r = malloc(sizeof(*r))))
        return NULL;
    memset(r, 0, sizeof(*r));
    r->base.ops = &dc_rdma_ops;
    r->conn = c;
    r->kind = kind;
    r->buf = buf;
    r->len = len;
    r->mr = (dc_rdma_mr_t *)mr;
    r->next = c->reqs;
    if (c->reqs)
        c->reqs->prev = r;
    c->reqs = r;
    return r;
}

static void dc_rdma_req_release(dc_rdma_req_t *r)
{
    dc_rdma_conn_t *c = r->conn;
    if (r->prev)
        r->prev->next = r->next;
    else
        c->reqs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    r->next = c->req_free;
    r->prev = NULL;
    c->req_free = r;
}

/* Check a message buffer against its registration; *kind = its memory kind.
 * Device memory needs the CUDA kernels (the CPU must not read it) and, to
 * be sent, a DC_VERBS_MEM_CUDA registration (the NIC reads it). */
static dc_status_t dc_rdma_check_mr(const dc_rdma_mr_t *m, const void *buf, size_t len,
                                    int sending, uint32_t *kind)
{
    *kind = dc_verbs_buf_kind(m ? m->kind : 0, buf);
    if (*kind == DC_VERBS_MEM_CUDA && !DC_HAVE_CUDA)
        return dc_error(DC_ERR_UNSUPPORTED, "rdma: the buffer is GPU memory, and this build has "
                                            "no CUDA kernels for its CRC32C (configure with "
                                            "nvcc, -Dcuda=enabled)");
    if (!m) {
        if (*kind == DC_VERBS_MEM_CUDA && sending)
            return dc_error(DC_ERR_INVALID, "rdma: sending from GPU memory needs "
                                            "reg_mem(DC_VERBS_MEM_CUDA) (dma-buf registration)");
        return DC_OK;
    }
    const uint8_t *b = buf;
    if (b < m->addr || (size_t)(b - m->addr) > m->len || len > m->len - (size_t)(b - m->addr))
        return dc_error(DC_ERR_INVALID, "rdma: buffer outside its memory registration");
    return DC_OK;
}

static dc_status_t dc_rdma_isend_any(dc_verbs_conn_t *cb, const void *buf, size_t len,
                                     dc_verbs_mr_t *mr, const uint32_t *ccrc,
                                     dc_verbs_req_t **out)
{
    dc_rdma_conn_t *c = (dc_rdma_conn_t *)cb;
    if (c->state == DC_RDMA_FAILED)
        return dc_rdma_conn_error(c);
    if (c->state != DC_RDMA_ESTABLISHED)
        return DC_ERR_AGAIN;
    if (len > c->max_msg)
        return dc_error(DC_ERR_INVALID, "rdma: message of %zu bytes exceeds the maximum %llu",
                        len, (unsigned long long)c->max_msg);
    if (!buf && len)
        return dc_error(DC_ERR_INVALID, "rdma: NULL send buffer");
    uint32_t kind;
    dc_status_t st = dc_rdma_check_mr((dc_rdma_mr_t *)mr, buf, len, 1, &kind);
    if (st != DC_OK)
        return st;
    if (dc_verbs_window_used(&c->win) >= DC_VERBS_MAX_INFLIGHT)
        return DC_ERR_AGAIN;
    uint32_t crc = 0;
    if (ccrc)
        crc = *ccrc; /* the caller's: the buffer is not read here */
    else if ((st = dc_verbs_crc32c(kind, buf, len, &crc)) != DC_OK)
        return st;
    dc_rdma_req_t *r = dc_rdma_req_new(c, DC_RDMA_REQ_SEND, (void *)(uintptr_t)buf, len, mr);
    if (!r)
        return dc_error(DC_ERR_NOMEM, "rdma: out of memory for a request");
    r->mkind = kind;
    r->crc_known = ccrc != NULL;
    if (dc_verbs_window_push(&c->win, r, &r->seq) != DC_OK) {
        dc_rdma_req_release(r);
        return DC_ERR_AGAIN;
    }
    dc_rdma_data_hdr(r, crc);
    dc_rdma_txq_push(c, r);
    dc_rdma_tx_pump(c);
    *out = &r->base;
    return DC_OK;
}

static dc_status_t dc_rdma_isend(dc_verbs_conn_t *c, const void *buf, size_t len,
                                 dc_verbs_mr_t *mr, dc_verbs_req_t **out)
{
    return dc_rdma_isend_any(c, buf, len, mr, NULL, out);
}

static dc_status_t dc_rdma_isend_crc(dc_verbs_conn_t *c, const void *buf, size_t len,
                                     dc_verbs_mr_t *mr, uint32_t crc, dc_verbs_req_t **out)
{
    return dc_rdma_isend_any(c, buf, len, mr, &crc, out);
}

static dc_status_t dc_rdma_irecv(dc_verbs_conn_t *cb, void *buf, size_t cap, dc_verbs_mr_t *mr,
                                 dc_verbs_req_t **out)
{
    dc_rdma_conn_t *c = (dc_rdma_conn_t *)cb;
    if (c->state == DC_RDMA_FAILED)
        return dc_rdma_conn_error(c);
    if (c->state != DC_RDMA_ESTABLISHED)
        return DC_ERR_AGAIN;
    if (!buf && cap)
        return dc_error(DC_ERR_INVALID, "rdma: NULL receive buffer");
    uint32_t kind;
    dc_status_t st = dc_rdma_check_mr((dc_rdma_mr_t *)mr, buf, cap, 0, &kind);
    if (st != DC_OK)
        return st;
    if (c->rpost >= c->rbase + DC_RDMA_RING)
        return DC_ERR_AGAIN;
    dc_rdma_req_t *r = dc_rdma_req_new(c, DC_RDMA_REQ_RECV, buf, cap, mr);
    if (!r)
        return dc_error(DC_ERR_NOMEM, "rdma: out of memory for a request");
    r->mkind = kind;
    r->seq = c->rpost++;
    c->slot[r->seq % DC_RDMA_RING].req = r;
    dc_rdma_rx_parse(c);
    *out = &r->base;
    return DC_OK;
}

static dc_status_t dc_rdma_progress(dc_verbs_conn_t *cb)
{
    dc_rdma_conn_t *c = (dc_rdma_conn_t *)cb;
    dc_rdma_conn_progress(c);
    if (c->state == DC_RDMA_FAILED)
        return dc_rdma_conn_error(c);
    return DC_OK;
}

static dc_status_t dc_rdma_test(dc_verbs_req_t *rb, int *done, size_t *len)
{
    dc_rdma_req_t *r = (dc_rdma_req_t *)rb;
    dc_rdma_conn_t *c = r->conn;
    if ((r->state == DC_RDMA_R_PENDING || c->nctrl || r->wrs || r->queued ||
         c->state == DC_RDMA_BROKEN) &&
        c->state != DC_RDMA_FAILED)
        dc_rdma_conn_progress(c);
    if (c->state == DC_RDMA_FAILED && (r->wrs || r->queued))
        dc_rdma_drop_link(c); /* no QP, no work request: nothing reads buf any more */
    if (r->wrs == 0 && !r->queued) {
        if (r->state == DC_RDMA_R_DONE) {
            if (len)
                *len = r->kind == DC_RDMA_REQ_SEND ? r->len : r->got;
            *done = 1;
            dc_rdma_req_release(r);
            return DC_OK;
        }
        if (r->state == DC_RDMA_R_FAILED || c->state == DC_RDMA_FAILED) {
            dc_status_t st;
            if (r->state == DC_RDMA_R_FAILED)
                st = dc_error(r->err, "rdma %s: message %llu does not fit the %zu-byte receive "
                                      "buffer",
                              c->peer, (unsigned long long)r->seq, r->len);
            else
                st = dc_rdma_conn_error(c);
            if (r->kind == DC_RDMA_REQ_SEND)
                dc_verbs_window_ack(&c->win, r->seq);
            else if (c->slot[r->seq % DC_RDMA_RING].req == r)
                c->slot[r->seq % DC_RDMA_RING].req = NULL;
            dc_rdma_req_release(r);
            return st;
        }
    }
    *done = 0;
    return DC_OK;
}

static dc_status_t dc_rdma_wait(dc_verbs_conn_t *cb, int timeout_ms)
{
    dc_rdma_conn_t *c = (dc_rdma_conn_t *)cb;
    if (c->state == DC_RDMA_FAILED)
        return dc_rdma_conn_error(c);
    dc_rdma_conn_progress(c);
    if (c->state == DC_RDMA_FAILED)
        return dc_rdma_conn_error(c);
    /* BROKEN: no link fd to wake us; the re-dial (client) or the listener's
     * re-attach (server) needs progress soon. */
    if (c->state == DC_RDMA_BROKEN && (timeout_ms < 0 || timeout_ms > 10))
        timeout_ms = 10;
    struct epoll_event ev[2];
    epoll_wait(c->epfd, ev, 2, timeout_ms);
    return dc_rdma_progress(cb);
}

static int dc_rdma_fd(dc_verbs_conn_t *cb)
{
    return ((dc_rdma_conn_t *)cb)->epfd;
}

static dc_status_t dc_rdma_stats(dc_verbs_conn_t *cb, dc_verbs_stats_t *out)
{
    dc_rdma_conn_t *c = (dc_rdma_conn_t *)cb;
    snprintf(c->stats.device, sizeof(c->stats.device), "%s", dc_rdma_dev);
    snprintf(c->stats.peer, sizeof(c->stats.peer), "%s", c->peer);
    if (!out || out->size < sizeof(size_t))
        return dc_error(DC_ERR_INVALID, "rdma stats: bad struct size");
    size_t n = DC_MIN(out->size, sizeof(c->stats));
    memcpy((char *)out + sizeof(size_t), (char *)&c->stats + sizeof(size_t), n - sizeof(size_t));
    return DC_OK;
}

static void dc_rdma_close(dc_verbs_conn_t *cb)
{
    dc_rdma_conn_destroy((dc_rdma_conn_t *)cb);
}

const dc_verbs_ops_t dc_rdma_ops = {
    .size = sizeof(dc_verbs_ops_t),
    .name = "rdma",
    .init = dc_rdma_init,
    .caps = dc_rdma_caps,
    .listen = dc_rdma_listen,
    .listen_addr = dc_rdma_listen_addr,
    .listen_fd = dc_rdma_listen_fd,
    .accept = dc_rdma_accept,
    .listen_close = dc_rdma_listen_close,
    .connect = dc_rdma_connect,
    .connect_test = dc_rdma_connect_test,
    .reg_mem = dc_rdma_reg_mem,
    .dereg_mem = dc_rdma_dereg_mem,
    .isend = dc_rdma_isend,
    .isend_crc = dc_rdma_isend_crc,
    .irecv = dc_rdma_irecv,
    .test = dc_rdma_test,
    .progress = dc_rdma_progress,
    .wait = dc_rdma_wait,
    .fd = dc_rdma_fd,
    .stats = dc_rdma_stats,
    .close = dc_rdma_close,
};
