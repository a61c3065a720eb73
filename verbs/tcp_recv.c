/*
 * tcp_recv.c - the receive side of the tcp transport: reading a stream
 * (straight into the caller's buffer for large payloads, SO_RCVLOWAT),
 * parsing headers, routing each DATA message to the irecv() posted for its
 * seq, the CRC32C check with ACK or NACK, duplicates, the stash of early
 * messages while a re-send is due, and irecv().
 * The protocol is described in tcp.c.
 */
#include "verbs/tcp_internal.h"

static void dc_tcp_complete_recv(dc_tcp_conn_t *c, dc_tcp_req_t *r, uint64_t seq)
{
    r->done = true;
    c->rdone_tag[seq % W] = seq + 1;
    while (c->rbase < c->rposted && c->rdone_tag[c->rbase % W] == c->rbase + 1)
        c->rbase++;
}
/* A seq we NACKed (or dropped) whose re-send has not been verified yet. */
static bool dc_tcp_resend_due(const dc_tcp_conn_t *c)
{
    for (uint64_t q = c->rbase; q < c->rbase + W; q++) {
        uint32_t i = (uint32_t)(q % W);
        if (c->rnack_tag[i] == q + 1 && c->rdone_tag[i] != q + 1 && c->stash_tag[i] != q + 1)
            return true;
    }
    return false;
}
/* Hand a stashed early message to its irecv, once that is posted, and ACK
 * it (the control queue, DC_TCP_CTRL_CAP, holds far more than a window). */
static void dc_tcp_stash_deliver(dc_tcp_conn_t *c, uint64_t seq)
{
    uint32_t i = (uint32_t)(seq % W);
    if (c->stash_tag[i] != seq + 1 || seq >= c->rposted)
        return;
    dc_tcp_req_t *r = &c->rreq[i];
    if (!r->in_use || r->seq != seq || r->done)
        return;
    uint32_t len = c->stash_len[i];
    if (len > r->cap)
        r->err = dc_error(DC_ERR_FORMAT, "tcp: message %llu of %u bytes from %s exceeds the "
                                         "receive buffer of %zu bytes",
                          (unsigned long long)seq, len, c->peer, r->cap);
    else if (len)
        memcpy(r->rbuf, c->stash[i], len);
    r->len = len;
    free(c->stash[i]);
    c->stash[i] = NULL;
    c->stash_tag[i] = 0;
    c->stash_bytes -= len;
    dc_tcp_complete_recv(c, r, seq);
    if (r->err == DC_OK) {
        c->stats.msgs_recv++;
        c->stats.bytes_recv += len;
    }
    (void)dc_tcp_ctrl_push(c, DC_VERBS_MSG_ACK, seq);
}
/* A full header arrived: decide where its payload goes. DC_ERR_AGAIN: no
 * irecv posted for it yet (the stream pauses). */
static dc_status_t dc_tcp_on_header(dc_tcp_conn_t *c, dc_tcp_stream_t *s)
{
    dc_verbs_hdr_t *h = &s->h;
    DC_LOG_DEBUG("tcp: %s stream %u: %s seq %llu len %u", c->peer, (unsigned)(s - c->st),
                 h->type == DC_VERBS_MSG_DATA   ? "DATA"
                 : h->type == DC_VERBS_MSG_ACK  ? "ACK"
                 : h->type == DC_VERBS_MSG_NACK ? "NACK"
                 : h->type == DC_VERBS_MSG_BYE  ? "BYE"
                                                : "PING",
                 (unsigned long long)h->seq, h->len);
    if (h->type == DC_VERBS_MSG_ACK) {
        dc_tcp_req_t *r = dc_verbs_window_ack(&c->swin, h->seq);
        if (r && !r->acked) {
            r->acked = true;
            c->stats.msgs_sent++;
            c->stats.bytes_sent += r->len;
        }
        return DC_OK;
    }
    if (h->type == DC_VERBS_MSG_NACK) {
        dc_tcp_req_t *r = dc_verbs_window_get(&c->swin, h->seq);
        if (r && !r->acked && !r->on_wire && !r->queued) {
            /* never trust the caller's CRC32C twice: the re-send computes
             * its own (a wrong one costs a round trip, not a NACK loop) */
            if (r->crc_known)
                DC_LOG_DEBUG("tcp: message %llu sent with the caller's CRC32C was NACKed: "
                             "re-sending with our own",
                             (unsigned long long)r->seq);
            r->crc_known = false;
            /* first in line: the peer's caller is likely waiting for it,
             * and the peer holds later messages in its stash meanwhile */
            c->txq_head = (c->txq_head + 2 * W - 1) % (2 * W);
            c->txq[c->txq_head] = r;
            c->txq_n++;
            r->queued = true;
            c->stats.resends++;
        }
        return DC_OK;
    }
    if (h->type == DC_VERBS_MSG_BYE) {
        c->peer_bye = true;
        return DC_OK;
    }
    if (h->type == DC_VERBS_MSG_PING)
        return DC_OK;
    /* DATA */
    uint64_t seq = h->seq;
    bool dup = seq < c->rbase || c->rdone_tag[seq % W] == seq + 1 ||
               c->stash_tag[seq % W] == seq + 1;
    if (!dup && seq >= c->rbase + W)
        return dc_error(DC_ERR_FORMAT, "message seq %llu beyond the receive window",
                        (unsigned long long)seq);
    bool early = !dup && seq >= c->rposted;
    if (early && !dc_tcp_resend_due(c)) {
        s->rblocked = true;
        return DC_ERR_AGAIN;
    }
    if (s->rblocked)
        s->rready = true; /* EPOLLIN was off while paused */
    s->rblocked = false;
    s->in_payload = true;
    s->doff = 0;
    s->crc = 0;
    s->rr = NULL;
    s->discard = true;
    if (early) {
        /* no irecv for it yet, but a re-send may be behind it on this
         * stream: read it into the stash (or drop and NACK it) */
        if (c->stash_bytes + h->len <= DC_TCP_STASH_MAX &&
            (s->xr.rbuf = malloc(h->len ? h->len : 1)) != NULL) {
            c->stash_bytes += h->len;
            s->xr.cap = h->len;
            s->xr.seq = seq;
            s->rr = &s->xr;
            s->discard = false;
        } else {
            s->drop_nack = true;
        }
        return DC_OK;
    }
    if (dup) {
        c->stats.dups_dropped++;
        if (c->stash_tag[seq % W] == seq + 1)
            return DC_OK; /* stashed: ACKed once its irecv takes it */
        if (!dc_tcp_ctrl_push(c, DC_VERBS_MSG_ACK, seq))
            return dc_error(DC_ERR_BUSY, "control queue full");
        return DC_OK;
    }
    dc_tcp_req_t *r = &c->rreq[seq % W];
    if (!r->in_use || r->seq != seq || r->done)
        return dc_error(DC_ERR_INTERNAL, "receive slot for seq %llu not posted",
                        (unsigned long long)seq);
    if (h->len > r->cap) {
        r->err = dc_error(DC_ERR_FORMAT, "tcp: message %llu of %u bytes from %s exceeds the "
                                         "receive buffer of %zu bytes",
                          (unsigned long long)seq, h->len, c->peer, r->cap);
        r->len = h->len;
        dc_tcp_complete_recv(c, r, seq);
        if (!dc_tcp_ctrl_push(c, DC_VERBS_MSG_ACK, seq))
            return dc_error(DC_ERR_BUSY, "control queue full");
        return DC_OK;
    }
    s->rr = r;
    s->discard = false;
    s->last_big = h->len >= DC_TCP_DIRECT_MIN;
    return DC_OK;
}
static dc_status_t dc_tcp_on_payload_done(dc_tcp_conn_t *c, dc_tcp_stream_t *s)
{
    s->in_payload = false;
    s->rhoff = 0;
    dc_tcp_req_t *r = s->rr;
    s->rr = NULL;
    if (s->drop_nack) { /* an early message dropped: have it re-sent */
        s->drop_nack = false;
        c->rnack_tag[s->h.seq % W] = s->h.seq + 1;
        if (!dc_tcp_ctrl_push(c, DC_VERBS_MSG_NACK, s->h.seq))
            return dc_error(DC_ERR_BUSY, "control queue full");
        return DC_OK;
    }
    if (s->discard || !r)
        return DC_OK;
    uint32_t crc = s->crc;
    if (dc_fault_active()) {
        /* the hook may damage the bytes "in flight": check after it */
        (void)dc_fault_on_recv(r->rbuf, s->h.len);
        crc = dc_crc32c(0, r->rbuf, s->h.len);
    }
    if (crc != s->h.crc) {
        c->stats.nacks_sent++;
        DC_LOG_INFO("tcp: CRC32C mismatch on message %llu from %s (0x%08x != 0x%08x): NACK",
                    (unsigned long long)s->h.seq, c->peer, crc, s->h.crc);
        c->rnack_tag[s->h.seq % W] = s->h.seq + 1;
        if (r == &s->xr) {
            c->stash_bytes -= r->cap;
            free(r->rbuf);
            r->rbuf = NULL;
        }
        if (!dc_tcp_ctrl_push(c, DC_VERBS_MSG_NACK, s->h.seq))
            return dc_error(DC_ERR_BUSY, "control queue full");
        return DC_OK;
    }
    c->rnack_tag[s->h.seq % W] = 0;
    if (r == &s->xr) { /* verified early message: keep it for its irecv */
        uint32_t i = (uint32_t)(s->h.seq % W);
        c->stash[i] = r->rbuf;
        c->stash_len[i] = s->h.len;
        c->stash_tag[i] = s->h.seq + 1;
        r->rbuf = NULL;
        dc_tcp_stash_deliver(c, s->h.seq); /* posted meanwhile? */
        return DC_OK;
    }
    r->len = s->h.len;
    dc_tcp_complete_recv(c, r, s->h.seq);
    c->stats.msgs_recv++;
    c->stats.bytes_recv += r->len;
    if (!dc_tcp_ctrl_push(c, DC_VERBS_MSG_ACK, s->h.seq))
        return dc_error(DC_ERR_BUSY, "control queue full");
    return DC_OK;
}
/* All payload bytes are in: wait for the CRC trailer, or finish now. */
static dc_status_t dc_tcp_payload_end(dc_tcp_conn_t *c, dc_tcp_stream_t *s)
{
    if (s->h.flags & DC_VERBS_HDR_F_TRAILER) {
        s->in_trailer = true;
        s->toff = 0;
        return DC_OK;
    }
    return dc_tcp_on_payload_done(c, s);
}
static void dc_tcp_payload_take(dc_tcp_stream_t *s, const uint8_t *src, size_t n)
{
    if (!s->discard) {
        uint8_t *dst = s->rr->rbuf + s->doff;
        memcpy(dst, src, n);
        if (!dc_fault_active())
            s->crc = dc_crc32c(s->crc, dst, n);
    }
    s->doff += n;
}
/* SO_RCVLOWAT: wake this socket's reader only once `n` bytes are there.
 * Within a large payload it is the next chunk (never more than the payload
 * still due, so it cannot wait for bytes that will not come; the kernel
 * caps it at half the receive buffer; EOF and errors wake it regardless);
 * at message boundaries it is 1.  Waking the receiver once per chunk
 * instead of once per arriving segment is what lets loopback run at
 * iperf3's rate: on loopback the sender's CPU pays for every wakeup. */
static void dc_tcp_lowat(dc_tcp_stream_t *s, size_t n)
{
    if (s->ssl) /* TLS: the socket holds records, and up to one record of
                   this payload may already sit in the SSL's buffer (no read
                   ahead): at least n - DC_TCP_TLS_SLACK more bytes are sure
                   to come (ciphertext is longer than its plaintext) */
        n = n > 2 * DC_TCP_TLS_SLACK ? n - DC_TCP_TLS_SLACK : 1;
    if (s->lowat == n)
        return;
    int v = (int)n;
    if (setsockopt(s->fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)) == 0)
        s->lowat = n;
}
/* Read and parse what the stream has.  DC_OK (would block / paused) or a
 * break reason. */
static dc_status_t dc_tcp_stream_recv_body(dc_tcp_conn_t *c, dc_tcp_stream_t *s)
{
    size_t budget = DC_TCP_BUDGET;
    dc_status_t st;
    for (;;) {
        /* consume the buffer */
        while (s->rblocked || s->rpos < s->rlen ||
               (s->in_payload && !s->in_trailer && s->doff == s->h.len)) {
            if (!s->in_payload) {
                if (s->rblocked) {
                    st = dc_tcp_on_header(c, s);
                    if (st == DC_ERR_AGAIN)
                        return DC_OK;
                    if (st != DC_OK)
                        return st;
                } else {
                    size_t n = DC_MIN(DC_VERBS_HDR_SIZE - s->rhoff, s->rlen - s->rpos);
                    memcpy(s->rh + s->rhoff, s->rbuf + s->rpos, n);
                    s->rhoff += n;
                    s->rpos += n;
                    if (s->rhoff < DC_VERBS_HDR_SIZE)
                        continue;
                    if ((st = dc_verbs_hdr_unpack(s->rh, c->o.max_msg_size, &s->h)) != DC_OK)
                        return st;
                    if (s->h.type != DC_VERBS_MSG_DATA) {
                        s->rhoff = 0;
                        if ((st = dc_tcp_on_header(c, s)) != DC_OK)
                            return st;
                        continue;
                    }
                    st = dc_tcp_on_header(c, s);
                    if (st == DC_ERR_AGAIN)
                        return DC_OK;
                    if (st != DC_OK)
                        return st;
                }
                continue;
            }
            if (s->in_trailer) {
                size_t n = DC_MIN(4 - s->toff, s->rlen - s->rpos);
                memcpy(s->trl + s->toff, s->rbuf + s->rpos, n);
                s->toff += n;
                s->rpos += n;
                if (s->toff == 4) {
                    s->h.crc = dc_load_le32(s->trl);
                    s->in_trailer = false;
                    if ((st = dc_tcp_on_payload_done(c, s)) != DC_OK)
                        return st;
                }
                continue;
            }
            size_t n = DC_MIN((size_t)s->h.len - s->doff, s->rlen - s->rpos);
            dc_tcp_payload_take(s, s->rbuf + s->rpos, n);
            s->rpos += n;
            if (s->doff == s->h.len && (st = dc_tcp_payload_end(c, s)) != DC_OK)
                return st;
        }
        if (s->rblocked)
            return DC_OK;
        if (budget == 0 || !s->rready)
            return DC_OK;
        /* buffer empty: read more, straight into the user buffer when the
         * rest of a large payload is expected */
        ssize_t n;
        if (s->in_payload && !s->in_trailer && !s->discard &&
            s->h.len - s->doff >= DC_TCP_DIRECT_MIN) {
            uint8_t *dst = s->rr->rbuf + s->doff;
            /* bounded chunks: the CRC then reads bytes still in cache (L2) */
            size_t want = DC_MIN((size_t)s->h.len - s->doff, (size_t)DC_TCP_RCHUNK);
            dc_tcp_lowat(s, want);
            n = dc_tcp_sock_read(s, dst, want);
            if (n > 0) {
                if (!dc_fault_active())
                    s->crc = dc_crc32c(s->crc, dst, (size_t)n);
                s->doff += (size_t)n;
                budget -= DC_MIN(budget, (size_t)n);
                if (s->doff == s->h.len && (st = dc_tcp_payload_end(c, s)) != DC_OK)
                    return st;
                continue;
            }
        } else {
            /* after a large message, read only its trailer and the next
             * header: the next payload then goes straight to the user
             * buffer instead of through rbuf (one memcpy less) */
            size_t want = DC_TCP_RBUF;
            if (s->last_big && (!s->in_payload || s->in_trailer))
                want = s->in_trailer ? 4 - s->toff + DC_VERBS_HDR_SIZE
                                     : DC_VERBS_HDR_SIZE - s->rhoff;
            dc_tcp_lowat(s, 1);
            n = dc_tcp_sock_read(s, s->rbuf, want);
            if (n > 0) {
                s->rpos = 0;
                s->rlen = (size_t)n;
                budget -= DC_MIN(budget, (size_t)n);
                continue;
            }
        }
        if (n == 0)
            return dc_error(DC_ERR_RESET, "end of stream");
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            s->rready = false;
            return DC_OK;
        }
        return dc_tcp_io_error(s, "recv");
    }
}
dc_status_t dc_tcp_stream_recv(dc_tcp_conn_t *c, dc_tcp_stream_t *s)
{
    if (!s->ssl)
        return dc_tcp_stream_recv_body(c, s);
    dc_tcp_tls_guard_t g; /* SIGPIPE blocked once for the batch of SSL calls */
    dc_tcp_tls_guard_begin(&g);
    dc_status_t st = dc_tcp_stream_recv_body(c, s);
    dc_tcp_tls_guard_end(&g);
    return st;
}
dc_status_t dc_tcp_irecv(dc_verbs_conn_t *cb, void *buf, size_t cap, dc_verbs_mr_t *mr,
                                dc_verbs_req_t **out)
{
    dc_tcp_conn_t *c = (dc_tcp_conn_t *)cb;
    (void)mr;
    if (c->state == C_FAILED)
        return dc_error(c->err, "%s", c->errmsg);
    if (!buf && cap)
        return dc_error(DC_ERR_INVALID, "tcp: NULL receive buffer");
    if (c->rposted - c->rbase >= W)
        return DC_ERR_AGAIN;
    dc_tcp_req_t *r = &c->rreq[c->rposted % W];
    if (r->in_use)
        return DC_ERR_AGAIN;
    memset(r, 0, sizeof(*r));
    r->base.ops = &dc_tcp_ops;
    r->c = c;
    r->in_use = true;
    r->rbuf = buf;
    r->cap = cap;
    r->seq = c->rposted++;
    *out = &r->base;
    dc_tcp_stash_deliver(c, r->seq); /* it may have arrived early */
    /* a stream may be paused waiting for exactly this receive */
    if (c->state == C_ESTABLISHED)
        (void)dc_tcp_progress_conn(c);
    return DC_OK;
}
