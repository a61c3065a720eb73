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
 *
 * Files by role: rdma.c (this one: the ops table, the device probe and a
 * connection's life: rdmacm events, authentication, completions, break and
 * re-dial, memory registration, requests), rdma_link.c (one QP's
 * resources, the private data), rdma_listen.c (listener, session registry,
 * adopt), rdma_send.c (credits, control messages, transmit),
 * rdma_recv.c (receive); rdma_internal.h holds the objects and what one
 * file calls in another.
 */
#include "verbs/rdma_internal.h"

/* --- probe ------------------------------------------------------------------ */

static pthread_once_t dc_rdma_once = PTHREAD_ONCE_INIT;
static dc_status_t dc_rdma_init_st = DC_ERR_UNSUPPORTED;
static char dc_rdma_init_msg[256];
char dc_rdma_dev[64];
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
    const char *want = dc_config_get("rdma_device");
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

dc_status_t dc_rdma_init(void)
{
    pthread_once(&dc_rdma_once, dc_rdma_init_once);
    if (dc_rdma_init_st != DC_OK)
        return dc_error(DC_ERR_UNSUPPORTED, "%s", dc_rdma_init_msg);
    return DC_OK;
}

dc_status_t dc_rdma_describe(char *out, size_t len)
{
    if (!out || !len)
        return dc_error(DC_ERR_INVALID, "dc_rdma_describe: no output buffer");
    out[0] = 0;
    int n = 0;
    errno = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n == 0) {
        int e = errno;
        if (list)
            ibv_free_device_list(list);
        return dc_error(DC_ERR_UNSUPPORTED, "no RDMA device: ibv_get_device_list: %s",
                        !list ? strerror(e ? e : ENODEV) : "0 devices (no RDMA NIC, driver, "
                                                           "or soft-RoCE link)");
    }
    size_t o = 0;
#define DC_RDMA_PUT(...)                                                                   \
    do {                                                                                   \
        if (o < len)                                                                       \
            o += (size_t)snprintf(out + o, len - o, __VA_ARGS__);                          \
    } while (0)
    for (int i = 0; i < n; i++) {
        const char *name = ibv_get_device_name(list[i]);
        struct ibv_context *ctx = ibv_open_device(list[i]);
        if (!ctx) {
            DC_RDMA_PUT("%s: cannot open (%s)\n", name, strerror(errno));
            continue;
        }
        struct ibv_device_attr da;
        if (ibv_query_device(ctx, &da) != 0) {
            DC_RDMA_PUT("%s: ibv_query_device failed (%s)\n", name, strerror(errno));
            ibv_close_device(ctx);
            continue;
        }
        for (uint8_t p = 1; p <= da.phys_port_cnt; p++) {
            struct ibv_port_attr pa;
            if (ibv_query_port(ctx, p, &pa) != 0) {
                DC_RDMA_PUT("%s:%u: ibv_query_port failed (%s)\n", name, p, strerror(errno));
                continue;
            }
            DC_RDMA_PUT("%s:%u: %s, %s, %.0f Gb/s, mtu %d", name, p,
                        ibv_port_state_str(pa.state),
                        pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet (RoCE)"
                                                                  : "InfiniBand",
                        dc_rdma_port_gbps(&pa), 128 << pa.active_mtu);
            /* the GIDs in use (RoCE: one per address and RoCE version) */
            int shown = 0;
            for (int g = 0; g < pa.gid_tbl_len && g < 32; g++) {
                union ibv_gid gid;
                static const uint8_t zero[16];
                if (ibv_query_gid(ctx, p, g, &gid) != 0 || !memcmp(gid.raw, zero, 16))
                    continue;
                char a[INET6_ADDRSTRLEN];
                if (!inet_ntop(AF_INET6, gid.raw, a, sizeof(a)))
                    continue;
                DC_RDMA_PUT("%s GID[%d] %s", shown++ ? "," : ";", g, a);
            }
            DC_RDMA_PUT("\n");
        }
        ibv_close_device(ctx);
    }
#undef DC_RDMA_PUT
    ibv_free_device_list(list);
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

void dc_rdma_fail(dc_rdma_conn_t *c, dc_status_t st, const char *fmt, ...)
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
void dc_rdma_lost(dc_rdma_conn_t *c, const char *fmt, ...)
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

dc_status_t dc_rdma_conn_error(const dc_rdma_conn_t *c)
{
    return dc_error(c->err, "%s", c->errmsg);
}

/* After a reconnect: every un-ACKed message again, in seq order, before any
 * new one (the receiver's ring is consumed in order). */
void dc_rdma_resume(dc_rdma_conn_t *c)
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

void dc_rdma_on_auth(dc_rdma_conn_t *c, const uint8_t *m, size_t len)
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

dc_status_t dc_rdma_conn_channel(dc_rdma_conn_t *c)
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

void dc_rdma_conn_progress(dc_rdma_conn_t *c)
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
                         c->hs_timeout_ms ? c->hs_timeout_ms : c->timeout_ms);
    }
}

/* --- connection objects ------------------------------------------------------------ */

dc_status_t dc_rdma_conn_alloc(const dc_verbs_opts_t *o, dc_rdma_conn_t **out)
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

void dc_rdma_conn_destroy(dc_rdma_conn_t *c)
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

dc_rdma_req_t *dc_rdma_req_new(dc_rdma_conn_t *c, dc_rdma_kind_t kind, void *buf,
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

void dc_rdma_req_release(dc_rdma_req_t *r)
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
dc_status_t dc_rdma_check_mr(const dc_rdma_mr_t *m, const void *buf, size_t len,
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
