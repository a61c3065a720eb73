/*
 * tcp_send.c - the send side of the tcp transport: the transmit queue of
 * un-ACKed messages, ACK/NACK control frames waiting for a stream, writing
 * header + payload + CRC32C trailer to a stream (each piece checksummed
 * just before it is written; MSG_ZEROCOPY for large payloads, with the
 * kernel's completions reaped from the error queue; through TLS, one piece
 * per SSL_write, retried with the same bytes), and isend().
 * The protocol is described in tcp.c.
 */
#include "verbs/tcp_internal.h"

void dc_tcp_txq_push(dc_tcp_conn_t *c, dc_tcp_req_t *r)
{
    if (r->queued || r->acked)
        return;
    /* capacity 2W >= every in-flight send once (queued is exclusive) */
    c->txq[(c->txq_head + c->txq_n) % (2 * W)] = r;
    c->txq_n++;
    r->queued = true;
}
static dc_tcp_req_t *dc_tcp_txq_pop(dc_tcp_conn_t *c)
{
    while (c->txq_n) {
        dc_tcp_req_t *r = c->txq[c->txq_head];
        c->txq_head = (c->txq_head + 1) % (2 * W);
        c->txq_n--;
        r->queued = false;
        if (!r->acked)
            return r;
    }
    return NULL;
}
/* The peer holds every seq below `upto`: treat those sends as acknowledged
 * (resume after a reconnect). */
void dc_tcp_ack_upto(dc_tcp_conn_t *c, uint64_t upto)
{
    if (upto > c->swin.next)
        upto = c->swin.next; /* hostile or confused peer: never beyond what we sent */
    for (uint64_t s = c->swin.base; s < upto; s++) {
        dc_tcp_req_t *r = dc_verbs_window_ack(&c->swin, s);
        if (r && !r->acked) {
            r->acked = true;
            c->stats.msgs_sent++;
            c->stats.bytes_sent += r->len;
        }
    }
}
bool dc_tcp_ctrl_push(dc_tcp_conn_t *c, uint8_t type, uint64_t seq)
{
    if (c->ctrl_n == DC_TCP_CTRL_CAP)
        return false;
    dc_verbs_hdr_t *h = &c->ctrl[(c->ctrl_head + c->ctrl_n) % DC_TCP_CTRL_CAP];
    memset(h, 0, sizeof(*h));
    h->type = type;
    h->seq = seq;
    c->ctrl_n++;
    return true;
}
/* The socket is going away: its zero-copy sends can no longer be reported,
 * so their requests stop waiting for them (an aborted socket frees its
 * send queue; see dc_tcp_break). */
void dc_tcp_zc_forget(dc_tcp_stream_t *s)
{
    if (s->zc_req && s->zc_out)
        for (uint32_t i = 0; i < DC_TCP_ZC_RING; i++)
            if (s->zc_req[i]) {
                s->zc_req[i]->zc_pending--;
                s->zc_req[i] = NULL;
            }
    s->zc_next = s->zc_out = 0;
    s->zc = false;
}
/* Fill the stream's output: control frames first, then the next message. */
static void dc_tcp_stream_load(dc_tcp_conn_t *c, dc_tcp_stream_t *s, uint32_t idx)
{
    if (s->ooff == s->olen && !s->cur) {
        s->olen = s->ooff = 0;
        while (c->ctrl_n && s->olen + 2 * DC_VERBS_HDR_SIZE <= DC_TCP_OBUF) {
            dc_verbs_hdr_t *h = &c->ctrl[c->ctrl_head];
            h->stream = (uint16_t)idx;
            dc_verbs_hdr_pack(h, s->obuf + s->olen);
            s->olen += DC_VERBS_HDR_SIZE;
            c->ctrl_head = (c->ctrl_head + 1) % DC_TCP_CTRL_CAP;
            c->ctrl_n--;
        }
        dc_tcp_req_t *r = dc_tcp_txq_pop(c);
        if (r) {
            /* the CRC32C goes in a trailer: each piece is checksummed just
             * before it is written, while it is in cache; the caller's
             * CRC32C (isend_crc) goes in the header, and the payload is
             * not read here */
            dc_verbs_hdr_t h = {.type = DC_VERBS_MSG_DATA,
                                .flags = r->crc_known ? 0 : DC_VERBS_HDR_F_TRAILER,
                                .stream = (uint16_t)idx, .seq = r->seq,
                                .len = (uint32_t)r->len,
                                .crc = r->crc_known ? r->crc : 0};
            dc_verbs_hdr_pack(&h, s->obuf + s->olen);
            s->olen += DC_VERBS_HDR_SIZE;
            s->cur = r;
            s->poff = 0;
            s->trailer = !r->crc_known;
            s->crc_upto = r->crc_known ? r->len : 0;
            s->scrc = 0;
            r->on_wire = true;
        }
    }
}
/* Collect MSG_ZEROCOPY completions from the socket's error queue: each
 * reports a range [lo, hi] of send ids whose pages the kernel released. */
dc_status_t dc_tcp_zc_reap(dc_tcp_conn_t *c, dc_tcp_stream_t *s)
{
    while (s->zc_out) {
        union {
            char buf[CMSG_SPACE(sizeof(struct sock_extended_err) + sizeof(struct sockaddr_in6))];
            struct cmsghdr align;
        } ctl;
        struct msghdr m = {.msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf)};
        ssize_t n = recvmsg(s->fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return DC_OK;
            return dc_error_errno(dc_status_from_errno(errno), errno, "recvmsg(MSG_ERRQUEUE)");
        }
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
            if (!((cm->cmsg_level == SOL_IP && cm->cmsg_type == IP_RECVERR) ||
                  (cm->cmsg_level == SOL_IPV6 && cm->cmsg_type == IPV6_RECVERR)) ||
                cm->cmsg_len < CMSG_LEN(sizeof(struct sock_extended_err)))
                continue;
            struct sock_extended_err ee;
            memcpy(&ee, CMSG_DATA(cm), sizeof(ee));
            if (ee.ee_errno != 0 || ee.ee_origin != SO_EE_ORIGIN_ZEROCOPY)
                continue;
            uint32_t lo = ee.ee_info, hi = ee.ee_data;
            if (ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED)
                c->stats.zc_copied += (uint64_t)(hi - lo) + 1;
            for (uint32_t id = lo, i = 0; i < DC_TCP_ZC_RING; id++, i++) {
                dc_tcp_req_t **slot = &s->zc_req[id % DC_TCP_ZC_RING];
                if (*slot) {
                    (*slot)->zc_pending--;
                    *slot = NULL;
                    s->zc_out--;
                }
                if (id == hi)
                    break;
            }
        }
    }
    return DC_OK;
}
/* Write what the stream has.  Returns DC_OK (idle or would block) or a
 * break reason (DC_ERR_RESET...). */
static dc_status_t dc_tcp_stream_send_body(dc_tcp_conn_t *c, dc_tcp_stream_t *s, uint32_t idx)
{
    size_t budget = DC_TCP_BUDGET;
    for (;;) {
        dc_tcp_stream_load(c, s, idx);
        if (s->cur && s->poff == s->crc_upto && s->crc_upto < s->cur->len) {
            size_t piece = DC_MIN(s->cur->len - s->crc_upto, (size_t)DC_TCP_SPIECE);
            s->scrc = dc_crc32c(s->scrc, s->cur->sbuf + s->crc_upto, piece);
            s->crc_upto += piece;
        }
        size_t a = s->olen - s->ooff;
        size_t b = s->cur ? s->crc_upto - s->poff : 0;
        if (a + b == 0) {
            s->wblocked = false;
            return DC_OK;
        }
        struct iovec iov[2];
        int n_iov = 0;
        /* MSG_ZEROCOPY for the payload of a large message, while the ring
         * has room: the kernel then pins the user pages instead of copying
         * them.  obuf (header, trailer) is reused at once, so it never
         * shares a zero-copy call: it goes first, by copy, on its own. */
        bool zc = s->zc && s->cur && s->cur->len >= DC_TCP_ZC_MIN && b > 0 &&
                  !s->zc_req[s->zc_next % DC_TCP_ZC_RING];
        size_t want = zc && a ? a : a + b;
        if (dc_fault_active())
            want = dc_fault_send_limit(want);
        if (a) {
            iov[n_iov].iov_base = s->obuf + s->ooff;
            iov[n_iov].iov_len = DC_MIN(a, want);
            n_iov++;
        }
        if (b && want > a) {
            iov[n_iov].iov_base = (void *)(uintptr_t)(s->cur->sbuf + s->poff);
            iov[n_iov].iov_len = want - a;
            n_iov++;
        }
        ssize_t n = 0;
        if (s->ssl) {
            /* TLS: one piece per SSL_write (header bytes, then payload),
             * except that header and payload that fit one record go as one
             * (a record each cost a small message two sends, two wakeups
             * and two decryptions); after it would block, the same bytes
             * come first again (nothing above moves ooff / poff meanwhile;
             * the copy is rebuilt alike).  Partial-write mode returns after
             * each record: not a sign of a full socket */
            uint8_t one[DC_TCP_TLS_RECORD];
            const uint8_t *p = a ? s->obuf + s->ooff : s->cur->sbuf + s->poff;
            size_t l = a ? DC_MIN(a, want) : want;
            if (a && b && want >= a + b && a + b <= sizeof(one)) {
                memcpy(one, s->obuf + s->ooff, a);
                memcpy(one + a, s->cur->sbuf + s->poff, b);
                p = one;
                l = a + b;
            }
            n = dc_tcp_tls_write(s->ssl, p, l);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK) {
                    s->wblocked = true;
                    return DC_OK;
                }
                return dc_tcp_io_error(s, "send");
            }
            want = (size_t)n; /* not blocked: go on below */
            zc = false;
        } else if (n_iov) {
            struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n_iov};
            int fl = MSG_NOSIGNAL | MSG_DONTWAIT;
            /* more of this payload follows at once: no partial segment */
            if (s->cur && s->poff + (want > a ? want - a : 0) < s->cur->len)
                fl |= MSG_MORE;
            zc = zc && a == 0;
            if (zc)
                fl |= MSG_ZEROCOPY;
            n = sendmsg(s->fd, &m, fl);
            if (n < 0 && zc && errno == ENOBUFS) {
                /* out of option memory for zero-copy state: copy this one */
                zc = false;
                n = sendmsg(s->fd, &m, fl & ~MSG_ZEROCOPY);
            }
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK) {
                    s->wblocked = true;
                    return DC_OK;
                }
                return dc_error_errno(dc_status_from_errno(errno), errno, "send");
            }
        }
        size_t w = (size_t)n;
        if (zc && n > 0) {
            /* the kernel numbered this call s->zc_next */
            s->zc_req[s->zc_next % DC_TCP_ZC_RING] = s->cur;
            s->cur->zc_pending++;
            s->zc_next++;
            s->zc_out++;
            c->stats.zc_sends++;
        }
        c->stats.wire_bytes_sent += w;
        if (dc_fault_active()) {
            dc_fault_sent(w);
            if (dc_fault_drop_due()) {
                shutdown(s->fd, SHUT_RDWR);
                return dc_error(DC_ERR_RESET, "fault injection cut the stream");
            }
        }
        size_t wa = DC_MIN(w, a);
        s->ooff += wa;
        w -= wa;
        if (s->cur) {
            s->poff += w;
            if (s->poff == s->cur->len && s->ooff == s->olen) {
                /* payload done: its CRC32C trailer is the next output */
                s->cur->on_wire = false;
                s->cur = NULL;
                s->olen = s->ooff = 0;
                if (s->trailer) {
                    dc_store_le32(s->obuf, s->scrc);
                    s->olen = 4;
                }
                continue;
            }
        }
        if ((size_t)n < want) {
            s->wblocked = true; /* short write: the socket is full */
            return DC_OK;
        }
        if ((size_t)n >= budget)
            return DC_OK;
        budget -= (size_t)n;
    }
}
dc_status_t dc_tcp_stream_send(dc_tcp_conn_t *c, dc_tcp_stream_t *s, uint32_t idx)
{
    if (!s->ssl)
        return dc_tcp_stream_send_body(c, s, idx);
    dc_tcp_tls_guard_t g; /* SIGPIPE blocked once for the batch of SSL calls */
    dc_tcp_tls_guard_begin(&g);
    dc_status_t st = dc_tcp_stream_send_body(c, s, idx);
    dc_tcp_tls_guard_end(&g);
    return st;
}
static dc_status_t dc_tcp_isend_any(dc_verbs_conn_t *cb, const void *buf, size_t len,
                                    dc_verbs_mr_t *mr, const uint32_t *crc,
                                    dc_verbs_req_t **out)
{
    dc_tcp_conn_t *c = (dc_tcp_conn_t *)cb;
    (void)mr;
    if (c->state == C_FAILED)
        return dc_error(c->err, "%s", c->errmsg);
    if (len > c->o.max_msg_size)
        return dc_error(DC_ERR_INVALID, "tcp: message of %zu bytes exceeds the maximum %llu",
                        len, (unsigned long long)c->o.max_msg_size);
    if (!buf && len)
        return dc_error(DC_ERR_INVALID, "tcp: NULL send buffer");
    dc_tcp_req_t *r = &c->sreq[c->swin.next % W];
    if (r->in_use || dc_verbs_window_used(&c->swin) >= W)
        return DC_ERR_AGAIN;
    memset(r, 0, sizeof(*r));
    r->base.ops = &dc_tcp_ops;
    r->c = c;
    r->in_use = true;
    r->is_send = true;
    r->sbuf = buf;
    r->len = len;
    if (crc) {
        r->crc_known = true;
        r->crc = *crc;
    }
    uint64_t seq;
    if (dc_verbs_window_push(&c->swin, r, &seq) != DC_OK) {
        r->in_use = false;
        return DC_ERR_AGAIN;
    }
    r->seq = seq;
    dc_tcp_txq_push(c, r);
    *out = &r->base;
    /* start writing at once (latency) */
    if (c->state == C_ESTABLISHED)
        (void)dc_tcp_progress_conn(c);
    return DC_OK;
}
dc_status_t dc_tcp_isend(dc_verbs_conn_t *c, const void *buf, size_t len,
                                dc_verbs_mr_t *mr, dc_verbs_req_t **out)
{
    return dc_tcp_isend_any(c, buf, len, mr, NULL, out);
}
dc_status_t dc_tcp_isend_crc(dc_verbs_conn_t *c, const void *buf, size_t len,
                                    dc_verbs_mr_t *mr, uint32_t crc, dc_verbs_req_t **out)
{
    return dc_tcp_isend_any(c, buf, len, mr, &crc, out);
}
