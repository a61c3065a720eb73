/*
 * ucx_send.c - the send path of the `ucx` transport: control messages
 * (ACK / NACK / BYE and handshake messages, AM 2 and 3), DATA pieces
 * (AM 1: each piece's header and CRC32C computed just before it is
 * posted), the send queue and its bounded look-ahead (dc_ucx_pump), the
 * peer's ACK / NACK / BYE (dc_ucx_am_ctrl_cb), and isend / isend_crc.  The
 * wire format is described at the top of ucx.c.
 */
#include "verbs/ucx_internal.h"

#include "kernels/kern.h"
#include "verbs/fault.h"
#include "verbs/gpumem.h"

#include <stdlib.h>

/* --- control messages ------------------------------------------------------ */

static dc_ucx_ctrl_t *dc_ucx_ctrl_get(dc_ucx_conn_t *c)
{
    dc_ucx_ctrl_t *k = c->ctrl_free;
    if (k) {
        c->ctrl_free = k->next_free;
        return k;
    }
    k = calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    k->conn = c;
    k->next_all = c->ctrl_all;
    c->ctrl_all = k;
    return k;
}

static void dc_ucx_ctrl_put(dc_ucx_conn_t *c, dc_ucx_ctrl_t *k)
{
    k->next_free = c->ctrl_free;
    c->ctrl_free = k;
}

static void dc_ucx_ctrl_cb(void *request, ucs_status_t status, void *user_data)
{
    dc_ucx_ctrl_t *k = user_data;
    dc_ucx_conn_t *c = k->conn;
    c->outstanding--;
    dc_ucx_ctrl_put(c, k);
    if (status != UCS_OK && status != UCS_ERR_CANCELED)
        dc_ucx_break(c, "control message failed", status);
    ucp_request_free(request);
}

/* 1 when a good-bye can go out: the endpoint is up and the connection
 * established, or failed by us while it was (fail_live). */
int dc_ucx_bye_ok(const dc_ucx_conn_t *c)
{
    return c->ep && (c->state == DC_UCX_ESTABLISHED ||
                     (c->state == DC_UCX_FAILED && c->fail_live));
}

/* Send a header-only (ACK/NACK) or auth message. */
void dc_ucx_ctrl_send(dc_ucx_conn_t *c, unsigned am_id, uint8_t type, uint64_t seq,
                      const uint8_t *auth, size_t auth_len)
{
    /* ACK/NACK/BYE only on a live connection: after a break the endpoint
     * is dead (UCX would complain) and the peer re-sends what we did not
     * ACK anyway. */
    if (!c->ep || (am_id == DC_UCX_AM_CTRL && c->state != DC_UCX_ESTABLISHED &&
                   !(type == DC_VERBS_MSG_BYE && dc_ucx_bye_ok(c))))
        return;
    dc_ucx_ctrl_t *k = dc_ucx_ctrl_get(c);
    if (!k) {
        dc_ucx_fail(c, DC_ERR_NOMEM, "out of memory for a control message");
        return;
    }
    ucp_request_param_t p;
    dc_ucx_op_param(&p, k, NULL);
    p.cb.send = dc_ucx_ctrl_cb;
    ucs_status_ptr_t r;
    if (am_id == DC_UCX_AM_AUTH) {
        memcpy(k->auth, auth, auth_len);
        r = ucp_am_send_nbx(c->ep, am_id, NULL, 0, k->auth, auth_len, &p);
        c->stats.wire_bytes_sent += auth_len;
    } else {
        dc_verbs_hdr_t h = {.type = type, .seq = seq};
        dc_verbs_hdr_pack(&h, k->hdr);
        r = ucp_am_send_nbx(c->ep, am_id, k->hdr, sizeof(k->hdr), NULL, 0, &p);
        c->stats.wire_bytes_sent += DC_VERBS_HDR_SIZE;
    }
    if (r == NULL) {
        dc_ucx_ctrl_put(c, k);
    } else if (UCS_PTR_IS_ERR(r)) {
        dc_ucx_ctrl_put(c, k);
        dc_ucx_break(c, "cannot send a control message", UCS_PTR_STATUS(r));
    } else {
        c->outstanding++;
    }
}

void dc_ucx_queue_ctrl(dc_ucx_conn_t *c, uint8_t type, uint64_t seq)
{
    if (c->nctrl == DC_UCX_CTRLQ) {
        dc_ucx_fail(c, DC_ERR_FORMAT, "peer floods the connection (control queue full)");
        return;
    }
    c->ctrlq[c->nctrl].type = type;
    c->ctrlq[c->nctrl].seq = seq;
    c->nctrl++;
}

/* --- data sends ------------------------------------------------------------ */

static void dc_ucx_send_cb(void *request, ucs_status_t status, void *user_data)
{
    dc_ucx_req_t *r = user_data;
    dc_ucx_conn_t *c = r->conn;
    c->outstanding--;
    r->ucx_pending--;
    if (c->pieces_out)
        c->pieces_out--; /* the next piece is posted by dc_ucx_pump() */
    if (status != UCS_OK && status != UCS_ERR_CANCELED)
        dc_ucx_break(c, "send failed", status);
    ucp_request_free(request);
}

/* Piece k of a send request: its offset and length. */
static void dc_ucx_piece_span(const dc_ucx_conn_t *c, const dc_ucx_req_t *r, uint32_t k,
                              size_t *off, size_t *len)
{
    (void)c;
    size_t o = (size_t)k * r->step;
    *off = o;
    *len = DC_MIN((size_t)r->step, r->len - o);
}

/* Fill the DATA header of piece k (computes the piece's CRC32C; on the GPU
 * for device memory, which is the only way it can fail). */
static dc_status_t dc_ucx_piece_hdr(const dc_ucx_conn_t *c, dc_ucx_req_t *r, uint32_t k)
{
    size_t off, len;
    dc_ucx_piece_span(c, r, k, &off, &len);
    uint8_t *h = r->phdr + (size_t)k * DC_UCX_DHDR_SIZE;
    uint32_t crc = 0;
    uint8_t flags = 0;
    if (r->crc_known) {
        /* the caller's CRC32C of the whole message: the buffer is not read
         * here; the receiver checks every piece and combines them */
        crc = r->ccrc;
        flags = DC_VERBS_HDR_F_MSGCRC;
    } else {
        dc_status_t st = dc_verbs_crc32c(r->mkind, r->buf + off, len, &crc);
        if (st != DC_OK)
            return st;
        if (r->ccrc_nacked) {
            /* re-sent with our own CRC32Cs after the caller's was NACKed:
             * combine them (pieces are built in order) and say so if the
             * caller's was wrong (the re-send is checked against ours, so
             * it is delivered all the same) */
            r->ccrc_acc = dc_crc32c_combine(r->ccrc_acc, crc, len);
            if (k + 1 == r->npieces) {
                r->ccrc_nacked = 0;
                if (r->ccrc_acc != r->ccrc)
                    DC_LOG_WARN("ucx %s: message %llu: the caller's CRC32C 0x%08x is wrong "
                                "(its bytes' is 0x%08x); re-sent with the transport's own",
                                c->peer, (unsigned long long)r->seq, r->ccrc, r->ccrc_acc);
            }
        }
    }
    dc_verbs_hdr_t th = {.type = DC_VERBS_MSG_DATA,
                         .flags = flags,
                         .seq = r->seq,
                         .len = (uint32_t)r->len,
                         .crc = crc};
    dc_verbs_hdr_pack(&th, h);
    dc_store_le32(h + 32, (uint32_t)off);
    dc_store_le32(h + 36, r->step);
    dc_store_le32(h + 40, (uint32_t)len);
    dc_store_le32(h + 44, dc_crc32c(0, h, 44));
    return DC_OK;
}

/* Post piece k of r (its header is filled). */
static void dc_ucx_post_piece(dc_ucx_conn_t *c, dc_ucx_req_t *r, uint32_t k)
{
    if (c->state != DC_UCX_ESTABLISHED || !c->ep)
        return; /* re-sent from the window after the resume */
    size_t off, len;
    dc_ucx_piece_span(c, r, k, &off, &len);
    ucp_request_param_t p;
    dc_ucx_op_param(&p, r, r->mr);
    dc_ucx_op_mem(&p, r);
    p.cb.send = dc_ucx_send_cb;
    size_t want = len + DC_UCX_DHDR_SIZE;
    if (dc_fault_active()) {
        size_t lim = dc_fault_send_limit(want);
        if (lim < want) {
            /* A UCP message is atomic: cut the connection before it. */
            dc_fault_sent(lim);
            if (dc_fault_drop_due())
                dc_ucx_break(c, "fault injection cut the connection", UCS_OK);
            return;
        }
    }
    ucs_status_ptr_t s = ucp_am_send_nbx(c->ep, DC_UCX_AM_DATA,
                                         r->phdr + (size_t)k * DC_UCX_DHDR_SIZE,
                                         DC_UCX_DHDR_SIZE, r->buf + off, len, &p);
    c->stats.wire_bytes_sent += want;
    if (dc_fault_active())
        dc_fault_sent(want);
    if (s == NULL)
        return;
    if (UCS_PTR_IS_ERR(s)) {
        dc_ucx_break(c, "cannot send a message", UCS_PTR_STATUS(s));
        return;
    }
    r->ucx_pending++;
    c->outstanding++;
    c->pieces_out++;
}

void dc_ucx_sq_unlink(dc_ucx_conn_t *c, dc_ucx_req_t *r)
{
    dc_ucx_req_t **pp = &c->sq, *prev = NULL;
    while (*pp && *pp != r) {
        prev = *pp;
        pp = &(*pp)->qnext;
    }
    if (*pp) {
        *pp = r->qnext;
        if (c->sq_tail == r)
            c->sq_tail = prev;
    }
    r->qnext = NULL;
    r->queued = 0;
}

/*
 * Post queued pieces while fewer than c->ahead are in UCP's hands.  A
 * piece's CRC32C is computed here, just before it is posted, and the
 * bounded look-ahead keeps the transport reading it soon after, while it
 * is still in cache (with rendezvous, UCP reads a piece only when the
 * receiver asks for it).
 */
void dc_ucx_pump(dc_ucx_conn_t *c)
{
    while (c->sq && c->pieces_out < c->ahead && c->state == DC_UCX_ESTABLISHED && c->ep) {
        dc_ucx_req_t *r = c->sq;
        uint32_t k = r->next_piece++;
        if (r->next_piece >= r->npieces)
            dc_ucx_sq_unlink(c, r);
        if (k >= r->nhdr) {
            if (dc_ucx_piece_hdr(c, r, k) != DC_OK) {
                dc_ucx_fail(c, dc_last_status(), "CRC32C of a piece in GPU memory: %s",
                            dc_last_error());
                return;
            }
            r->nhdr = k + 1;
        }
        dc_ucx_post_piece(c, r, k);
    }
}

/* (Re-)send every piece of r: a NACK or a resume re-sends the whole message
 * from the borrowed buffer (the headers computed so far are kept). */
void dc_ucx_post_send(dc_ucx_conn_t *c, dc_ucx_req_t *r)
{
    if (r->queued)
        return; /* its pieces are still being posted */
    r->next_piece = 0;
    r->queued = 1;
    r->qnext = NULL;
    if (c->sq_tail)
        c->sq_tail->qnext = r;
    else
        c->sq = r;
    c->sq_tail = r;
    dc_ucx_pump(c);
}

/* --- the peer's ACK / NACK / BYE ------------------------------------------- */

ucs_status_t dc_ucx_am_ctrl_cb(void *arg, const void *header, size_t header_length,
                               void *data, size_t length,
                               const ucp_am_recv_param_t *param)
{
    dc_ucx_conn_t *c = arg;
    if (c->state != DC_UCX_ESTABLISHED) {
        if (c->state == DC_UCX_BROKEN || c->reconnecting)
            return UCS_OK;
        if (c->state != DC_UCX_FAILED)
            dc_ucx_fail(c, DC_ERR_AUTH, "control message before authentication completed");
        return UCS_OK;
    }
    dc_verbs_hdr_t h;
    if (header_length != DC_VERBS_HDR_SIZE || length != 0) {
        dc_ucx_fail(c, DC_ERR_FORMAT, "malformed control message");
        return UCS_OK;
    }
    if (dc_verbs_hdr_unpack(header, 0, &h) != DC_OK) {
        dc_ucx_fail(c, dc_last_status(), "%s", dc_last_error());
        return UCS_OK;
    }
    if (h.type == DC_VERBS_MSG_ACK) {
        dc_ucx_req_t *r = dc_verbs_window_ack(&c->win, h.seq);
        if (r && r->state == DC_UCX_R_PENDING) {
            r->state = DC_UCX_R_DONE;
            c->stats.msgs_sent++;
            c->stats.bytes_sent += r->len;
        }
    } else if (h.type == DC_VERBS_MSG_NACK) {
        dc_ucx_req_t *r = dc_verbs_window_get(&c->win, h.seq);
        if (r && r->state == DC_UCX_R_PENDING) {
            c->stats.resends++;
            if (r->crc_known && !r->queued) {
                /* Never trust the caller's CRC32C twice: the re-send
                 * carries the CRC32Cs we compute (so a wrong one costs one
                 * round trip, not a NACK loop).  Every piece was received,
                 * so UCP no longer needs the old headers. */
                DC_LOG_DEBUG("ucx %s: message %llu sent with the caller's CRC32C was NACKed: "
                             "re-sending with our own",
                             c->peer, (unsigned long long)h.seq);
                r->crc_known = 0;
                r->ccrc_nacked = 1;
                r->ccrc_acc = 0;
                r->nhdr = 0;
            }
            dc_ucx_post_send(c, r);
        }
    } else if (h.type == DC_VERBS_MSG_BYE) {
        dc_ucx_fail(c, DC_ERR_RESET, "peer closed the connection");
        c->fail_live = 0; /* it left: no good-bye back, the close is forced */
    }
    /* PING: nothing to do */
    return UCS_OK;
}

static dc_status_t dc_ucx_isend_any(dc_verbs_conn_t *cb, const void *buf, size_t len,
                                    dc_verbs_mr_t *mr, const uint32_t *crc,
                                    dc_verbs_req_t **out)
{
    dc_ucx_conn_t *c = (dc_ucx_conn_t *)cb;
    if (c->state == DC_UCX_FAILED)
        return dc_ucx_conn_error(c);
    if (c->state != DC_UCX_ESTABLISHED)
        return DC_ERR_AGAIN;
    if (len > c->max_msg)
        return dc_error(DC_ERR_INVALID, "ucx: message of %zu bytes exceeds the maximum %llu", len,
                        (unsigned long long)c->max_msg);
    if (!buf && len)
        return dc_error(DC_ERR_INVALID, "ucx: NULL send buffer");
    uint32_t kind;
    dc_status_t st = dc_ucx_check_mr((dc_ucx_mr_t *)mr, buf, len, &kind);
    if (st != DC_OK)
        return st;
    if (dc_verbs_window_used(&c->win) >= DC_VERBS_MAX_INFLIGHT)
        return DC_ERR_AGAIN;
    dc_ucx_req_t *r = dc_ucx_req_new(c, DC_UCX_REQ_SEND, (void *)(uintptr_t)buf, len, mr);
    if (!r)
        return dc_error(DC_ERR_NOMEM, "ucx: out of memory for a request");
    r->mkind = kind;
    /* pieces let a host message's CRC32C run while its data lands in cache;
     * for device memory each piece costs a synchronous CRC kernel launch,
     * so a GPU message is one piece */
    r->step = c->piece;
    if (kind == DC_VERBS_MEM_CUDA && len > c->piece)
        r->step = (uint32_t)DC_MIN((uint64_t)len, (uint64_t)DC_UCX_PIECE_MAX);
    uint64_t n = len ? ((uint64_t)len + r->step - 1) / r->step : 1;
    size_t hbytes = (size_t)n * DC_UCX_DHDR_SIZE;
    if (hbytes > r->phdr_cap) {
        uint8_t *ph = realloc(r->phdr, hbytes);
        if (!ph) {
            dc_ucx_req_release(r);
            return dc_error(DC_ERR_NOMEM, "ucx: out of memory for a request");
        }
        r->phdr = ph;
        r->phdr_cap = hbytes;
    }
    r->npieces = (uint32_t)n;
    if (crc) {
        r->crc_known = 1;
        r->ccrc = *crc;
    }
    if (dc_verbs_window_push(&c->win, r, &r->seq) != DC_OK) {
        dc_ucx_req_release(r);
        return DC_ERR_AGAIN;
    }
    /* Piece by piece (dc_ucx_pump): checksum, then post at once. */
    r->nhdr = 0;
    dc_ucx_post_send(c, r);
    *out = &r->base;
    return DC_OK;
}

dc_status_t dc_ucx_isend(dc_verbs_conn_t *c, const void *buf, size_t len,
                         dc_verbs_mr_t *mr, dc_verbs_req_t **out)
{
    return dc_ucx_isend_any(c, buf, len, mr, NULL, out);
}

dc_status_t dc_ucx_isend_crc(dc_verbs_conn_t *c, const void *buf, size_t len,
                             dc_verbs_mr_t *mr, uint32_t crc, dc_verbs_req_t **out)
{
    return dc_ucx_isend_any(c, buf, len, mr, &crc, out);
}
