/*
 * rdma_recv.c - the receive side of the rdma transport: consuming the byte
 * stream in our ring (header, then payload into the irecv() posted for its
 * seq, host or GPU memory), the CRC32C check with ACK or NACK, duplicates,
 * and irecv().  The protocol is described in rdma.c.
 */
#include "verbs/rdma_internal.h"

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
void dc_rdma_rx_parse(dc_rdma_conn_t *c)
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
dc_status_t dc_rdma_irecv(dc_verbs_conn_t *cb, void *buf, size_t cap, dc_verbs_mr_t *mr,
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
