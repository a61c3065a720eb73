/*
 * ucx_recv.c - the receive path of the `ucx` transport: DATA pieces (AM 1)
 * land in a ring of slots indexed by seq, held (eager copy or rendezvous
 * descriptor) until their irecv() is posted, then copied or fetched with
 * ucp_am_recv_data_nbx into the receive buffer and checked piece by piece
 * (CRC32C, on the GPU for device memory); a message is ACKed or NACKed
 * once all its pieces have landed.  The wire format is described at the
 * top of ucx.c.
 */
#include "verbs/ucx_internal.h"

#include "kernels/kern.h"
#include "verbs/fault.h"
#include "verbs/gpumem.h"

#include <stdlib.h>

/* --- receive path ---------------------------------------------------------- */

static dc_ucx_piece_t *dc_ucx_piece_get(dc_ucx_conn_t *c)
{
    dc_ucx_piece_t *p = c->piece_free;
    if (p) {
        c->piece_free = p->next;
    } else {
        if (!(p = calloc(1, sizeof(*p))))
            return NULL;
        p->next_all = c->piece_all;
        c->piece_all = p;
    }
    p->next = NULL;
    p->conn = c;
    p->req = NULL;
    p->data = NULL;
    p->rndv = p->owned = 0;
    return p;
}

static void dc_ucx_piece_put(dc_ucx_conn_t *c, dc_ucx_piece_t *p)
{
    p->data = NULL;
    p->req = NULL;
    p->next = c->piece_free;
    c->piece_free = p;
}

/* Give a held piece's data back (UCP's or our copy). */
static void dc_ucx_piece_release(dc_ucx_conn_t *c, dc_ucx_piece_t *p)
{
    if (p->data) {
        if (!p->rndv)
            c->held_bytes -= p->len;
        if (p->owned)
            free(p->data);
        else
            ucp_am_data_release(c->worker, p->data);
    }
    dc_ucx_piece_put(c, p);
}

void dc_ucx_slot_release_held(dc_ucx_conn_t *c, dc_ucx_slot_t *s)
{
    while (s->held) {
        dc_ucx_piece_t *p = s->held;
        s->held = p->next;
        dc_ucx_piece_release(c, p);
    }
    s->held_tail = NULL;
}

/* Forget the current attempt of a slot (keeps its irecv and bitmap buffer). */
void dc_ucx_slot_reset(dc_ucx_conn_t *c, dc_ucx_slot_t *s, int keep_req)
{
    dc_ucx_slot_release_held(c, s);
    dc_ucx_req_t *req = keep_req ? s->req : NULL;
    uint8_t *seen = s->seen;
    size_t cap = s->seen_cap;
    uint32_t *pcrc = s->pcrc;
    size_t pcap = s->pcrc_cap;
    memset(s, 0, sizeof(*s));
    s->req = req;
    s->seen = seen;
    s->seen_cap = cap;
    s->pcrc = pcrc;
    s->pcrc_cap = pcap;
}

static void dc_ucx_slot_advance(dc_ucx_conn_t *c)
{
    for (;;) {
        dc_ucx_slot_t *s = &c->slot[c->rbase % DC_UCX_RING];
        if (s->state != DC_UCX_SLOT_DONE)
            break;
        dc_ucx_slot_reset(c, s, 0);
        c->rbase++;
    }
}

/*
 * Piece [off, off+len) of the slot's message is in s->req->buf: check its
 * CRC32C (the bytes just landed: in cache).  When every piece of the
 * attempt is checked, ACK the message, or NACK it if any piece failed.
 */
static void dc_ucx_verify_piece(dc_ucx_conn_t *c, dc_ucx_slot_t *s, uint32_t off, uint32_t len,
                                uint32_t want)
{
    dc_ucx_req_t *r = s->req;
    if (dc_fault_active())
        dc_verbs_fault_on_recv(r->mkind, r->buf + off, len);
    uint32_t crc = 0;
    if (dc_verbs_crc32c(r->mkind, r->buf + off, len, &crc) != DC_OK) {
        dc_ucx_fail(c, dc_last_status(), "CRC32C of a piece in GPU memory: %s",
                    dc_last_error());
        return;
    }
    s->ndone++;
    if (s->msgcrc) {
        /* combined with the other pieces' once all have landed */
        s->pcrc[off / s->step] = crc;
    } else if (crc != want) {
        DC_LOG_DEBUG("ucx %s: message %llu, piece at %u (%u bytes): CRC32C mismatch "
                     "(0x%08x != 0x%08x)",
                     c->peer, (unsigned long long)s->seq, off, len, crc, want);
        s->nbad++;
    }
    if (s->ndone < s->npieces)
        return;
    uint64_t seq = s->seq;
    if (s->msgcrc) {
        uint32_t op = dc_crc32c_shift_op(s->step), mcrc = 0;
        uint32_t last = s->npieces - 1;
        for (uint32_t k = 0; k < last; k++)
            mcrc = dc_crc32c_combine_op(mcrc, s->pcrc[k], op);
        mcrc = dc_crc32c_combine(mcrc, s->pcrc[last], s->len - (size_t)last * s->step);
        if (mcrc != s->mcrc) {
            DC_LOG_DEBUG("ucx %s: message %llu: CRC32C mismatch (0x%08x != 0x%08x)", c->peer,
                         (unsigned long long)seq, mcrc, s->mcrc);
            s->nbad++;
        }
    }
    if (s->nbad) {
        DC_LOG_DEBUG("ucx %s: message %llu: %u of %u pieces damaged, NACK", c->peer,
                     (unsigned long long)seq, s->nbad, s->npieces);
        c->stats.nacks_sent++;
        dc_ucx_slot_reset(c, s, 1); /* the re-send arrives whole */
        dc_ucx_queue_ctrl(c, DC_VERBS_MSG_NACK, seq);
        return;
    }
    r->got = s->len;
    r->state = DC_UCX_R_DONE;
    c->stats.msgs_recv++;
    c->stats.bytes_recv += s->len;
    s->state = DC_UCX_SLOT_DONE;
    s->req = NULL;
    dc_ucx_queue_ctrl(c, DC_VERBS_MSG_ACK, seq);
    dc_ucx_slot_advance(c);
}

/* Eager bytes of the piece at `off` (UCP's transient data or a held
 * copy) into the slot's irecv buffer, then their check.  0: the copy into
 * device memory failed and so did the connection. */
static int dc_ucx_land_eager(dc_ucx_conn_t *c, dc_ucx_slot_t *s, uint32_t off, const void *data,
                             uint32_t len, uint32_t crc)
{
    dc_ucx_req_t *r = s->req;
    if (dc_verbs_copy_in(r->mkind, r->buf + off, data, len) != DC_OK) {
        dc_ucx_fail(c, dc_last_status(), "piece into GPU memory: %s", dc_last_error());
        return 0;
    }
    dc_ucx_verify_piece(c, s, off, len, crc);
    return 1;
}

/* The message does not fit its irecv buffer: fail that receive, drop the
 * pieces (those still to come are dropped as duplicates) and ACK. */
static void dc_ucx_too_big(dc_ucx_conn_t *c, dc_ucx_slot_t *s)
{
    dc_ucx_req_t *r = s->req;
    r->state = DC_UCX_R_FAILED;
    r->err = DC_ERR_FORMAT;
    dc_ucx_slot_release_held(c, s);
    s->req = NULL;
    s->state = DC_UCX_SLOT_DONE;
    DC_LOG_WARN("ucx %s: message %llu of %u bytes does not fit the %zu-byte receive buffer",
                c->peer, (unsigned long long)s->seq, s->len, r->len);
    dc_ucx_queue_ctrl(c, DC_VERBS_MSG_ACK, s->seq); /* delivered, to a too-small buffer */
    dc_ucx_slot_advance(c);
}

static void dc_ucx_rndv_cb(void *request, ucs_status_t status, size_t length, void *user_data)
{
    dc_ucx_piece_t *p = user_data;
    dc_ucx_conn_t *c = p->conn;
    dc_ucx_req_t *r = p->req;
    c->outstanding--;
    r->ucx_pending--;
    ucp_request_free(request);
    dc_ucx_slot_t *s = &c->slot[p->seq % DC_UCX_RING];
    if (status != UCS_OK) {
        if (status != UCS_ERR_CANCELED)
            dc_ucx_break(c, "receive failed", status);
    } else if (c->state != DC_UCX_FAILED && s->req == r && s->state == DC_UCX_SLOT_ACTIVE &&
               s->seq == p->seq) {
        if (length != p->len)
            dc_ucx_fail(c, DC_ERR_FORMAT, "piece of message %llu: %zu bytes, announced %u",
                        (unsigned long long)p->seq, length, p->len);
        else
            dc_ucx_verify_piece(c, s, p->off, p->len, p->crc);
    }
    dc_ucx_piece_put(c, p);
}

/* A slot with held pieces and a posted irecv: move the pieces into the
 * buffer (copy or rendezvous get) and check each as it lands. */
static void dc_ucx_deliver(dc_ucx_conn_t *c, dc_ucx_slot_t *s)
{
    dc_ucx_req_t *r = s->req;
    if (s->len > r->len) {
        dc_ucx_too_big(c, s);
        return;
    }
    uint64_t seq = s->seq;
    /* Stop when the slot moves on (the last piece completes the message)
     * or the connection breaks (drop_ep releases what is still held). */
    while (s->held && s->req == r && s->seq == seq && c->state == DC_UCX_ESTABLISHED) {
        dc_ucx_piece_t *p = s->held;
        s->held = p->next;
        if (!s->held)
            s->held_tail = NULL;
        p->next = NULL;
        if (!p->rndv) {
            int ok = dc_ucx_land_eager(c, s, p->off, p->data, p->len, p->crc);
            dc_ucx_piece_release(c, p);
            if (!ok)
                return;
            continue;
        }
        ucp_request_param_t prm;
        dc_ucx_op_param(&prm, p, r->mr);
        dc_ucx_op_mem(&prm, r);
        prm.cb.recv_am = dc_ucx_rndv_cb;
        void *desc = p->data;
        p->data = NULL; /* consumed by the receive */
        p->req = r;
        ucs_status_ptr_t q = ucp_am_recv_data_nbx(c->worker, desc, r->buf + p->off, p->len, &prm);
        if (q == NULL) {
            uint32_t off = p->off, len = p->len, crc = p->crc;
            dc_ucx_piece_put(c, p);
            dc_ucx_verify_piece(c, s, off, len, crc);
        } else if (UCS_PTR_IS_ERR(q)) {
            dc_ucx_piece_put(c, p);
            dc_ucx_break(c, "cannot receive a message", UCS_PTR_STATUS(q));
        } else {
            r->ucx_pending++;
            c->outstanding++;
        }
    }
}

void dc_ucx_deliver_all(dc_ucx_conn_t *c)
{
    c->deliver_pending = 0;
    /* Only seqs with a posted irecv can be delivered: [rbase, rpost). */
    for (uint64_t q = c->rbase; q < c->rpost && c->state == DC_UCX_ESTABLISHED; q++) {
        dc_ucx_slot_t *s = &c->slot[q % DC_UCX_RING];
        if (s->state == DC_UCX_SLOT_ACTIVE && s->held && s->req)
            dc_ucx_deliver(c, s);
    }
}

/* Parse and check a DATA header (48 hostile bytes) against the payload. */
static int dc_ucx_parse_dhdr(dc_ucx_conn_t *c, const void *header, size_t header_length,
                             size_t length, dc_verbs_hdr_t *h, uint32_t *off, uint32_t *step)
{
    const uint8_t *b = header;
    if (header_length != DC_UCX_DHDR_SIZE) {
        dc_ucx_fail(c, DC_ERR_FORMAT, "data message with a %zu-byte header", header_length);
        return 0;
    }
    if (dc_verbs_hdr_unpack(b, c->max_msg, h) != DC_OK) {
        dc_ucx_fail(c, dc_last_status(), "%s", dc_last_error());
        return 0;
    }
    if (dc_load_le32(b + 44) != dc_crc32c(0, b, 44)) {
        dc_ucx_fail(c, DC_ERR_CORRUPT, "data message: piece descriptor checksum mismatch");
        return 0;
    }
    *off = dc_load_le32(b + 32);
    *step = dc_load_le32(b + 36);
    uint32_t plen = dc_load_le32(b + 40);
    uint64_t want = h->len > *off ? DC_MIN((uint64_t)*step, (uint64_t)h->len - *off) : 0;
    if (h->type != DC_VERBS_MSG_DATA || (h->flags & ~DC_VERBS_HDR_F_MSGCRC) != 0 ||
        *step < DC_UCX_PIECE_MIN ||
        *step > DC_UCX_PIECE_MAX || *off % *step != 0 || (*off >= h->len && *off != 0) ||
        plen != want || plen != length) {
        dc_ucx_fail(c, DC_ERR_FORMAT,
                    "bad data message (type %u, flags 0x%02x, length %u, piece at %u of %u "
                    "bytes, step %u, payload %zu)",
                    h->type, h->flags, h->len, *off, plen, *step, length);
        return 0;
    }
    return 1;
}

ucs_status_t dc_ucx_am_data_cb(void *arg, const void *header, size_t header_length,
                               void *data, size_t length,
                               const ucp_am_recv_param_t *param)
{
    dc_ucx_conn_t *c = arg;
    if (c->state != DC_UCX_ESTABLISHED) {
        if (c->state == DC_UCX_BROKEN || c->reconnecting)
            return UCS_OK; /* from the lost endpoint: re-sent after the resume */
        if (c->state != DC_UCX_FAILED)
            dc_ucx_fail(c, DC_ERR_AUTH, "data before authentication completed");
        return UCS_OK;
    }
    dc_verbs_hdr_t h;
    uint32_t off, step;
    if (!dc_ucx_parse_dhdr(c, header, header_length, length, &h, &off, &step))
        return UCS_OK;
    dc_ucx_slot_t *s = &c->slot[h.seq % DC_UCX_RING];
    if (h.seq < c->rbase || (h.seq < c->rbase + DC_UCX_RING && s->state == DC_UCX_SLOT_DONE)) {
        /* A duplicate (re-send after a reconnect): ACK it again, once. */
        if (off == 0) {
            c->stats.dups_dropped++;
            dc_ucx_queue_ctrl(c, DC_VERBS_MSG_ACK, h.seq);
        }
        return UCS_OK;
    }
    if (h.seq >= c->rbase + DC_UCX_RING) {
        dc_ucx_fail(c, DC_ERR_FORMAT, "message seq %llu outside the window [%llu, %llu)",
                    (unsigned long long)h.seq, (unsigned long long)c->rbase,
                    (unsigned long long)(c->rbase + DC_UCX_RING));
        return UCS_OK;
    }
    if (s->state == DC_UCX_SLOT_EMPTY) {
        uint64_t n = h.len ? ((uint64_t)h.len + step - 1) / step : 1;
        size_t bytes = (size_t)(n + 7) / 8;
        if (bytes > s->seen_cap) {
            uint8_t *b = realloc(s->seen, bytes);
            if (!b) {
                dc_ucx_fail(c, DC_ERR_NOMEM, "out of memory for message %llu",
                            (unsigned long long)h.seq);
                return UCS_OK;
            }
            s->seen = b;
            s->seen_cap = bytes;
        }
        if (n > s->pcrc_cap) {
            uint32_t *pc = realloc(s->pcrc, (size_t)n * sizeof(*pc));
            if (!pc) {
                dc_ucx_fail(c, DC_ERR_NOMEM, "out of memory for message %llu",
                            (unsigned long long)h.seq);
                return UCS_OK;
            }
            s->pcrc = pc;
            s->pcrc_cap = (size_t)n;
        }
        memset(s->seen, 0, bytes);
        s->state = DC_UCX_SLOT_ACTIVE;
        s->seq = h.seq;
        s->len = h.len;
        s->step = step;
        s->npieces = (uint32_t)n;
        s->ndone = s->nbad = 0;
        s->msgcrc = !!(h.flags & DC_VERBS_HDR_F_MSGCRC);
        s->mcrc = h.crc;
    } else if (s->seq != h.seq || s->len != h.len || s->step != step ||
               s->msgcrc != !!(h.flags & DC_VERBS_HDR_F_MSGCRC) ||
               (s->msgcrc && s->mcrc != h.crc)) {
        dc_ucx_fail(c, DC_ERR_FORMAT, "pieces of message %llu disagree (length %u vs %u, "
                                      "step %u vs %u, flags 0x%02x, message CRC32C 0x%08x vs "
                                      "0x%08x)",
                    (unsigned long long)h.seq, h.len, s->len, step, s->step, h.flags, h.crc,
                    s->mcrc);
        return UCS_OK;
    }
    uint32_t k = off / step;
    if (s->seen[k / 8] & (1u << (k % 8))) {
        dc_ucx_fail(c, DC_ERR_FORMAT, "piece at %u of message %llu sent again while still in "
                                      "progress",
                    off, (unsigned long long)h.seq);
        return UCS_OK;
    }
    s->seen[k / 8] |= (uint8_t)(1u << (k % 8));
    /* Transient eager data with its irecv posted: copy and check now. */
    int rndv = !!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV);
    int persistent = rndv || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA);
    if (!persistent && s->req && !s->held) {
        if (s->len > s->req->len) {
            dc_ucx_too_big(c, s);
            return UCS_OK;
        }
        dc_ucx_land_eager(c, s, off, data, (uint32_t)length, h.crc);
        return UCS_OK;
    }
    uint64_t hold_max = DC_MAX(DC_UCX_HOLD_MAX, 2 * c->max_msg);
    if (!rndv && c->held_bytes + length > hold_max) {
        dc_ucx_fail(c, DC_ERR_BUSY,
                    "the peer sent more than %llu MiB of messages ahead of the receives "
                    "posted for them (message %llu; receives are posted up to %llu)",
                    (unsigned long long)(hold_max >> 20), (unsigned long long)h.seq,
                    (unsigned long long)c->rpost);
        return UCS_OK;
    }
    dc_ucx_piece_t *p = dc_ucx_piece_get(c);
    if (!p) {
        dc_ucx_fail(c, DC_ERR_NOMEM, "out of memory holding message %llu",
                    (unsigned long long)h.seq);
        return UCS_OK;
    }
    p->seq = h.seq;
    p->off = off;
    p->len = (uint32_t)length;
    p->crc = h.crc;
    p->rndv = rndv;
    if (persistent) {
        p->data = data;
    } else {
        if (!(p->data = malloc(length ? length : 1))) {
            dc_ucx_piece_put(c, p);
            dc_ucx_fail(c, DC_ERR_NOMEM, "out of memory holding message %llu",
                        (unsigned long long)h.seq);
            return UCS_OK;
        }
        memcpy(p->data, data, length);
        p->owned = 1;
    }
    if (!rndv)
        c->held_bytes += length;
    if (s->held_tail)
        s->held_tail->next = p;
    else
        s->held = p;
    s->held_tail = p;
    c->deliver_pending = 1;
    return persistent ? UCS_INPROGRESS : UCS_OK;
}

dc_status_t dc_ucx_irecv(dc_verbs_conn_t *cb, void *buf, size_t cap, dc_verbs_mr_t *mr,
                         dc_verbs_req_t **out)
{
    dc_ucx_conn_t *c = (dc_ucx_conn_t *)cb;
    if (c->state == DC_UCX_FAILED)
        return dc_ucx_conn_error(c);
    if (c->state != DC_UCX_ESTABLISHED)
        return DC_ERR_AGAIN;
    if (!buf && cap)
        return dc_error(DC_ERR_INVALID, "ucx: NULL receive buffer");
    uint32_t kind;
    dc_status_t st = dc_ucx_check_mr((dc_ucx_mr_t *)mr, buf, cap, &kind);
    if (st != DC_OK)
        return st;
    if (c->rpost >= c->rbase + DC_UCX_RING)
        return DC_ERR_AGAIN;
    dc_ucx_req_t *r = dc_ucx_req_new(c, DC_UCX_REQ_RECV, buf, cap, mr);
    if (!r)
        return dc_error(DC_ERR_NOMEM, "ucx: out of memory for a request");
    r->mkind = kind;
    r->seq = c->rpost++;
    dc_ucx_slot_t *s = &c->slot[r->seq % DC_UCX_RING];
    s->req = r;
    if (s->state == DC_UCX_SLOT_ACTIVE && s->held)
        dc_ucx_deliver(c, s);
    *out = &r->base;
    return DC_OK;
}
