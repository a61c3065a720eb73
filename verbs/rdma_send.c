/*
 * rdma_send.c - the send side of the rdma transport: send-queue slots and
 * the peer's receive credits, control messages out (ACK, NACK, CREDIT,
 * AUTH, BYE) and in (credits, ACK/NACK of our messages), the transmit queue
 * written into the peer's ring with RDMA WRITE WITH IMMEDIATE (inline,
 * zero-copy from a registration, or through the staging FIFO), and isend().
 * The protocol is described in rdma.c.
 */
#include "verbs/rdma_internal.h"

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
int dc_rdma_ctrl_send(dc_rdma_conn_t *c, uint8_t type, uint64_t seq, const uint8_t *auth,
                             size_t auth_len)
{
    /* CREDIT and the final BYE may use the reserved receives. */
    if (c->state == DC_RDMA_FAILED || c->state == DC_RDMA_BROKEN || !c->lk.qp ||
        dc_rdma_sq_free(c) == 0 ||
        dc_rdma_rq_credit(c, type == DC_RDMA_CT_CREDIT || type == DC_RDMA_CT_BYE) <= 0)
        return -1;
    uint8_t *m = c->lk.csend + (c->lk.sq_posted % DC_RDMA_SQ_DEPTH) * DC_RDMA_CTRL_SIZE;
    dc_rdma_ctrl_t ct = {.type = type,
                         .seq = seq,
                         .consumed = c->lk.rx_consumed,
                         .reposted = c->lk.rq_completed,
                         .auth = auth,
                         .auth_len = auth_len};
    size_t len = dc_rdma_ctrl_encode(&ct, m);
    if (len == 0)
        return -1;
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
void dc_rdma_queue_ctrl(dc_rdma_conn_t *c, uint8_t type, uint64_t seq)
{
    if (c->nctrl == DC_RDMA_CTRLQ) {
        dc_rdma_fail(c, DC_ERR_FORMAT, "peer floods the connection (control queue full)");
        return;
    }
    c->ctrlq[c->nctrl].type = type;
    c->ctrlq[c->nctrl].seq = seq;
    c->nctrl++;
}
void dc_rdma_flush_ctrl(dc_rdma_conn_t *c)
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
void dc_rdma_txq_push(dc_rdma_conn_t *c, dc_rdma_req_t *r)
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
void dc_rdma_tx_pump(dc_rdma_conn_t *c)
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
/* The transport header of a send request's message, carrying `crc`. */
static void dc_rdma_data_hdr(dc_rdma_req_t *r, uint32_t crc)
{
    dc_verbs_hdr_t h = {.type = DC_VERBS_MSG_DATA,
                        .seq = r->seq,
                        .len = (uint32_t)r->len,
                        .crc = crc};
    dc_verbs_hdr_pack(&h, r->hdr);
}
void dc_rdma_on_ctrl(dc_rdma_conn_t *c, const uint8_t *m, size_t len)
{
    dc_rdma_ctrl_t ct;
    if (dc_rdma_ctrl_decode(c->peer, m, len, &ct) != DC_OK) {
        dc_rdma_fail(c, DC_ERR_FORMAT, "malformed control message (%zu bytes)", len);
        return;
    }
    uint8_t type = ct.type;
    if (c->state == DC_RDMA_BROKEN) {
        /* The link is going away; only a good-bye still matters. */
        if (type == DC_RDMA_CT_BYE)
            dc_rdma_fail(c, DC_ERR_RESET, "peer closed the connection");
        return;
    }
    uint64_t seq = ct.seq;
    uint64_t consumed = ct.consumed, reposted = ct.reposted;
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
        dc_rdma_on_auth(c, ct.auth, ct.auth_len);
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
dc_status_t dc_rdma_isend(dc_verbs_conn_t *c, const void *buf, size_t len,
                                 dc_verbs_mr_t *mr, dc_verbs_req_t **out)
{
    return dc_rdma_isend_any(c, buf, len, mr, NULL, out);
}
dc_status_t dc_rdma_isend_crc(dc_verbs_conn_t *c, const void *buf, size_t len,
                                     dc_verbs_mr_t *mr, uint32_t crc, dc_verbs_req_t **out)
{
    return dc_rdma_isend_any(c, buf, len, mr, &crc, out);
}
