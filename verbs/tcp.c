/*
 * tcp.c - the TCP transport: K parallel non-blocking streams per logical
 * connection, epoll, HMAC authentication, and the hop reliability layer of
 * transport.h (CRC32C per message, ACK/NACK, re-send, reconnect + resume).
 *
 *   client                                   server (listener)
 *   ------                                   -----------------
 *   connect(): K sockets, each runs the      accept(): handshakes run as a
 *   handshake below, session id S (random),  poll-driven state machine per
 *   epoch 0, stream index i                  socket; authenticated streams are
 *                                            attached to the connection of
 *                                            session S (created at epoch 0)
 *
 *   HELLO  c->s  "DCTH" ver Nc                      40 bytes
 *   CHAL   s->c  "DCTH" ver Ns HMAC_S               72 bytes
 *   PROOF  c->s  HMAC_C S epoch i K max_msg rbase   64 bytes
 *   OK     s->c  "DCTH" status S rbase              24 bytes
 *   (packed and parsed by tcp_hs.c)
 *
 * Before a peer is authenticated it holds one of at most DC_TCP_MAX_HS
 * pending handshakes of the listener (DC_TCP_MAX_HS_SRC per source
 * address), for at most handshake_timeout_ms; a new connection to a full
 * listener evicts the oldest one that has not sent its HELLO (else the
 * oldest): idle or slow-loris sockets cannot lock a real peer out.
 *
 * With TLS (config tls; tcp_tls.c) each socket first runs a TLS 1.3
 * handshake (PSK from the job secret, or certificates), and everything
 * above, from HELLO on, travels inside it; the listener tells the two apart
 * by the first byte (0x16: a TLS record).  MSG_ZEROCOPY is off on TLS
 * streams (user-space TLS encrypts into its own buffers).
 *
 * `rbase` is the sender's receive low-water mark (every seq below it was
 * received and verified): on a reconnect each side treats its sends below
 * the peer's rbase as acknowledged, so it re-sends only what is missing.
 *
 * Messages are striped: whichever stream is idle takes the next message of
 * the transmit queue; the receiver places message `seq` into the irecv()
 * posted for `seq`, so order is restored whatever the stream.  A stream
 * that breaks (EOF, reset, damaged header, injected drop) breaks the whole
 * connection: all K sockets are closed, the client dials K new ones with the
 * same session and epoch+1, the listener re-attaches them, and every
 * un-ACKed message is re-sent (duplicates are dropped by seq).
 *
 * Files by role: tcp.c (this one: the ops table and a connection's life:
 * create, client handshake, progress, break and reconnect, wait, close),
 * tcp_listen.c (listener, server handshake, attaching streams to their
 * session), tcp_send.c (transmit), tcp_recv.c (receive); tcp_internal.h
 * holds the objects and what one file calls in another.
 */
#include "verbs/tcp_internal.h"

/* --- small helpers ------------------------------------------------------------ */

void dc_tcp_tune(int fd, const dc_verbs_opts_t *o)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    int idle = 10, intvl = 5, cnt = 3;
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
    unsigned int uto = o->timeout_ms;
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &uto, sizeof(uto));
    if (o->sockbuf > 0) {
        int b = (int)DC_MIN(o->sockbuf, (uint64_t)INT32_MAX / 2);
        /* FORCE variants pass net.core.[rw]mem_max when privileged. */
        if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &b, sizeof(b)) != 0)
            setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof(b));
        if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &b, sizeof(b)) != 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof(b));
    }
}

/* Non-blocking I/O of exactly-sized handshake pieces. DC_OK: complete,
 * DC_ERR_AGAIN: partial, error: broken. */
dc_status_t dc_tcp_hs_flush(dc_tcp_hs_t *h)
{
    while (h->out_off < h->out_len) {
        ssize_t n = h->ssl
                        ? dc_tcp_tls_write(h->ssl, h->out + h->out_off, h->out_len - h->out_off)
                        : send(h->fd, h->out + h->out_off, h->out_len - h->out_off, MSG_NOSIGNAL);
        if (n > 0) {
            h->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return DC_ERR_AGAIN;
        if (n < 0 && h->ssl && errno == EPROTO) {
            char why[300];
            snprintf(why, sizeof(why), "%s", dc_last_error());
            return dc_error(DC_ERR_AUTH, "tcp: handshake send to %s: %s", h->peer, why);
        }
        return dc_error_errno(dc_status_from_errno(errno), errno, "tcp: handshake send to %s",
                              h->peer);
    }
    return DC_OK;
}

dc_status_t dc_tcp_hs_fill(dc_tcp_hs_t *h)
{
    while (h->in_len < h->in_need) {
        ssize_t n = h->ssl ? dc_tcp_tls_read(h->ssl, h->in + h->in_len, h->in_need - h->in_len)
                           : recv(h->fd, h->in + h->in_len, h->in_need - h->in_len, 0);
        if (n > 0) {
            h->in_len += (size_t)n;
            continue;
        }
        if (n == 0)
            return dc_error(DC_ERR_RESET, "tcp: %s closed the connection during the handshake "
                                          "(%zu of %zu bytes)",
                            h->peer, h->in_len, h->in_need);
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return DC_ERR_AGAIN;
        if (h->ssl && errno == EPROTO) {
            char why[300];
            snprintf(why, sizeof(why), "%s", dc_last_error());
            return dc_error(DC_ERR_AUTH, "tcp: handshake recv from %s: %s", h->peer, why);
        }
        return dc_error_errno(dc_status_from_errno(errno), errno, "tcp: handshake recv from %s",
                              h->peer);
    }
    return DC_OK;
}

void dc_tcp_hs_expect(dc_tcp_hs_t *h, size_t n)
{
    h->in_len = 0;
    h->in_need = n;
}

/* A stream's read, as recv(MSG_DONTWAIT) returns (through TLS if on). */
ssize_t dc_tcp_sock_read(dc_tcp_stream_t *s, void *buf, size_t len)
{
    if (s->ssl)
        return dc_tcp_tls_read(s->ssl, buf, len);
    return recv(s->fd, buf, len, MSG_DONTWAIT);
}

/* The break reason of a failed stream read / write (errno set by it). */
dc_status_t dc_tcp_io_error(dc_tcp_stream_t *s, const char *what)
{
    if (s->ssl && errno == EPROTO) { /* dc_error() says what TLS refused */
        char why[300];
        snprintf(why, sizeof(why), "%s", dc_last_error()); /* not the buffer it writes */
        return dc_error(DC_ERR_CORRUPT, "%s: %s", what, why);
    }
    return dc_error_errno(dc_status_from_errno(errno), errno, "%s", what);
}

/* --- connection: failure, streams, break ----------------------------------------- */

dc_status_t dc_tcp_fail(dc_tcp_conn_t *c, dc_status_t st, const char *why)
{
    if (c->state != C_FAILED) {
        c->state = C_FAILED;
        c->err = st;
        snprintf(c->errmsg, sizeof(c->errmsg), "tcp: connection %s %s: %s",
                 c->is_server ? "from" : "to", c->peer, why);
        /* closed after the peer's BYE, or a resume the peer no longer
         * knows (it ended the session: the node attaches afresh): benign */
        if (c->peer_bye || st == DC_ERR_CANCELED)
            DC_LOG_INFO("%s", c->errmsg);
        else
            DC_LOG_WARN("%s", c->errmsg);
    }
    return dc_error(c->err, "%s", c->errmsg);
}

void dc_tcp_stream_reset(dc_tcp_conn_t *c, dc_tcp_stream_t *s)
{
    dc_tcp_zc_forget(s);
    if (s->ssl) {
        SSL_free(s->ssl);
        s->ssl = NULL;
    }
    if (s->fd >= 0) {
        epoll_ctl(c->epfd, EPOLL_CTL_DEL, s->fd, NULL);
        close(s->fd);
    }
    s->fd = -1;
    s->events = 0;
    s->olen = s->ooff = 0;
    if (s->cur)
        s->cur->on_wire = false;
    s->cur = NULL;
    s->poff = 0;
    s->wblocked = false;
    s->rpos = s->rlen = 0;
    s->rhoff = 0;
    s->in_payload = s->rblocked = s->discard = false;
    s->rr = NULL;
    s->doff = 0;
    s->in_trailer = false;
    s->toff = 0;
    s->rready = true;
    s->last_big = false;
    s->lowat = 1;
    if (s->xr.rbuf) { /* a partial early message */
        c->stash_bytes -= s->xr.cap;
        free(s->xr.rbuf);
        s->xr.rbuf = NULL;
    }
    s->drop_nack = false;
}

static void dc_tcp_stream_events(dc_tcp_conn_t *c, dc_tcp_stream_t *s)
{
    if (s->fd < 0)
        return;
    uint32_t ev = (s->rblocked ? 0 : EPOLLIN) | (s->wblocked ? EPOLLOUT : 0);
    if (ev == s->events)
        return;
    struct epoll_event e = {.events = ev, .data.u32 = (uint32_t)(s - c->st)};
    if (epoll_ctl(c->epfd, EPOLL_CTL_MOD, s->fd, &e) == 0)
        s->events = ev;
}

void dc_tcp_close_hs(dc_tcp_hs_t *h)
{
    if (h->ssl) {
        SSL_free(h->ssl);
        h->ssl = NULL;
    }
    if (h->fd >= 0)
        close(h->fd);
    h->fd = -1;
}

static dc_status_t dc_tcp_client_dial(dc_tcp_conn_t *c);

/* Break the connection: close every stream, requeue un-ACKed sends, forget
 * partial receives; then reconnect (client) or wait for re-attachment. */
void dc_tcp_break(dc_tcp_conn_t *c, const char *why)
{
    if (c->state == C_FAILED)
        return;
    /* drain what already arrived: complete messages count (and move rbase,
     * which the reconnect handshake reports); partial ones are discarded */
    for (uint32_t i = 0; i < c->k; i++)
        if (c->st[i].fd >= 0) {
            c->st[i].rready = true;
            (void)dc_tcp_stream_recv(c, &c->st[i]);
        }
    for (uint32_t i = 0; i < c->k; i++) {
        dc_tcp_stream_t *s = &c->st[i];
        if (s->fd >= 0 && s->zc_out) {
            /* abortive close: the kernel drops the send queue, and with it
             * its references to user pages, instead of sending on */
            struct linger lg = {.l_onoff = 1, .l_linger = 0};
            setsockopt(s->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        }
        dc_tcp_stream_reset(c, s);
    }
    if (!c->is_server)
        for (uint32_t i = 0; i < c->k; i++)
            dc_tcp_close_hs(&c->hs[i]);
    c->attached = 0;
    c->ctrl_n = 0;
    c->ctrl_head = 0;
    /* rebuild the transmit queue in seq order */
    for (uint32_t i = 0; i < c->txq_n; i++)
        c->txq[(c->txq_head + i) % (2 * W)]->queued = false;
    c->txq_head = c->txq_n = 0;
    for (uint64_t s = c->swin.base; s < c->swin.next; s++) {
        dc_tcp_req_t *r = dc_verbs_window_get(&c->swin, s);
        if (r && !r->acked) {
            dc_tcp_txq_push(c, r);
            c->stats.resends++;
        }
    }
    if (c->peer_bye) {
        dc_tcp_fail(c, DC_ERR_RESET, "closed by the peer");
        return;
    }
    if (c->state == C_ESTABLISHED)
        c->stats.reconnects++;
    DC_LOG_WARN("tcp: connection %s %s broke (%s); %s", c->is_server ? "from" : "to", c->peer,
                why, c->is_server ? "waiting for the peer to reconnect" : "reconnecting");
    c->state = C_RECONNECTING;
    c->deadline = dc_now_s() + c->o.timeout_ms / 1000.0;
    if (!c->is_server) {
        c->sess.epoch++;
        c->retry_at = 0;
        c->need_dial = true;
    }
}

static dc_status_t dc_tcp_client_progress_hs(dc_tcp_conn_t *c);

/* One non-blocking pass over the connection. */
dc_status_t dc_tcp_progress_conn(dc_tcp_conn_t *c)
{
    if (c->state == C_FAILED)
        return dc_error(c->err, "%s", c->errmsg);
    if (c->state != C_ESTABLISHED) {
        if (c->deadline && dc_now_s() > c->deadline) {
            char why[300];
            snprintf(why, sizeof(why), "%s within timeout_ms=%u%s%s%s",
                     c->state == C_RECONNECTING ? "could not re-establish the connection"
                                                : "not established",
                     c->o.timeout_ms, c->lasterr[0] ? " (last error: " : "", c->lasterr,
                     c->lasterr[0] ? ")" : "");
            return dc_tcp_fail(c, DC_ERR_TIMEOUT, why);
        }
        if (c->is_server) {
            if (c->l) {
                dc_status_t st = dc_tcp_listener_progress(c->l);
                if (st != DC_OK && st != DC_ERR_AGAIN)
                    return dc_tcp_fail(c, st, dc_last_error());
            }
        } else {
            dc_status_t st = dc_tcp_client_progress_hs(c);
            if (st != DC_OK && st != DC_ERR_AGAIN)
                return dc_tcp_fail(c, st, dc_last_error());
        }
        if (c->state != C_ESTABLISHED)
            return c->state == C_FAILED ? dc_error(c->err, "%s", c->errmsg) : DC_OK;
    }
    uint32_t k = c->k;
    /* one epoll_wait(0) instead of a recv() that fails per idle stream */
    struct epoll_event ev[DC_TCP_MAX_STREAMS];
    int nev = epoll_wait(c->epfd, ev, DC_TCP_MAX_STREAMS, 0);
    for (int e = 0; e < nev; e++)
        if (ev[e].data.u32 < k && (ev[e].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
            c->st[ev[e].data.u32].rready = true;
    for (uint32_t j = 0; j < k; j++) {
        uint32_t i = (c->rr_next + j) % k;
        dc_tcp_stream_t *s = &c->st[i];
        if (s->fd < 0)
            continue; /* closed after the peer's BYE */
        dc_status_t st = s->zc_out ? dc_tcp_zc_reap(c, s) : DC_OK;
        if (st == DC_OK)
            st = dc_tcp_stream_recv(c, s);
        if (st == DC_OK)
            st = dc_tcp_stream_send(c, s, i);
        if (st != DC_OK && c->peer_bye) {
            /* orderly close: keep draining the other streams */
            dc_tcp_stream_reset(c, s);
            uint32_t open_streams = 0;
            for (uint32_t m = 0; m < k; m++)
                open_streams += c->st[m].fd >= 0;
            if (open_streams == 0)
                return dc_tcp_fail(c, DC_ERR_RESET, "closed by the peer");
            continue;
        }
        if (st != DC_OK) {
            char why[200];
            snprintf(why, sizeof(why), "stream %u: %s", i, dc_last_error());
            if (!dc_status_is_retryable(st) && st != DC_ERR_FORMAT)
                return dc_tcp_fail(c, st, why);
            dc_tcp_break(c, why);
            return c->state == C_FAILED ? dc_error(c->err, "%s", c->errmsg) : DC_OK;
        }
        dc_tcp_stream_events(c, s);
    }
    /* control frames produced by receives on later streams: flush them */
    if (c->ctrl_n) {
        for (uint32_t i = 0; i < k && c->ctrl_n; i++) {
            dc_tcp_stream_t *s = &c->st[i];
            if (s->fd < 0)
                continue;
            dc_status_t st = dc_tcp_stream_send(c, s, i);
            if (st != DC_OK) {
                dc_tcp_break(c, dc_last_error());
                return c->state == C_FAILED ? dc_error(c->err, "%s", c->errmsg) : DC_OK;
            }
            dc_tcp_stream_events(c, s);
        }
    }
    c->rr_next = (c->rr_next + 1) % k;
    return DC_OK;
}

/* Attach an authenticated socket as stream `idx`. */
dc_status_t dc_tcp_attach(dc_tcp_conn_t *c, uint32_t idx, int fd, SSL *ssl)
{
    dc_tcp_stream_t *s = &c->st[idx];
    dc_tcp_stream_reset(c, s);
    s->fd = fd;
    s->ssl = ssl;
    struct epoll_event e = {.events = EPOLLIN, .data.u32 = idx};
    if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, fd, &e) != 0) {
        int en = errno;
        dc_tcp_stream_reset(c, s); /* closes fd, frees ssl */
        return dc_error_errno(DC_ERR_IO, en, "tcp: epoll_ctl");
    }
    s->events = EPOLLIN;
    if (!c->tls_logged || c->stats.encryption[0] == 0) {
        /* the connection's encryption, once per connection (all its streams
         * run the same; a re-attach logs again only at debug level) */
        char how[200] = "none (clear)";
        if (ssl) {
            dc_tcp_tls_describe(ssl, c->stats.encryption, sizeof(c->stats.encryption), how,
                                sizeof(how));
            c->stats.ktls = dc_tcp_tls_ktls(ssl);
            dc_tcp_tls_peer_name(ssl, c->stats.peer_cert, sizeof(c->stats.peer_cert));
        } else {
            snprintf(c->stats.encryption, sizeof(c->stats.encryption), "none");
            c->stats.ktls = 0;
            c->stats.peer_cert[0] = 0;
        }
        if (!c->tls_logged)
            DC_LOG_INFO("tcp: connection %s %s: encryption %s%s%s", c->is_server ? "from" : "to",
                        c->peer, how, c->stats.peer_cert[0] ? ", peer certificate " : "",
                        c->stats.peer_cert);
        c->tls_logged = true;
    }
    if (c->o.zerocopy > 0 && s->zc_req && ssl) {
        static int warned;
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            DC_LOG_WARN("tcp: %s: MSG_ZEROCOPY is off on TLS streams (user-space TLS encrypts "
                        "into its own buffers; kernel TLS %s here)",
                        c->peer, c->stats.ktls & 1 ? "is on" : "is off");
    } else if (c->o.zerocopy > 0 && s->zc_req) {
        int one = 1;
        if (setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)) == 0) {
            s->zc = true;
        } else if (!c->zc_warned) {
            c->zc_warned = true;
            DC_LOG_WARN("tcp: %s: MSG_ZEROCOPY requested but SO_ZEROCOPY failed (%s): sends "
                        "are copied",
                        c->peer, strerror(errno));
        }
    }
    if (c->stats.device[0] == 0) {
        /* the local interface this stream is bound to */
        struct sockaddr_storage la;
        socklen_t ll = sizeof(la);
        if (getsockname(fd, (struct sockaddr *)&la, &ll) == 0)
            (void)dc_net_ifname_of((struct sockaddr *)&la, c->stats.device,
                                   sizeof(c->stats.device));
    }
    return DC_OK;
}

/* --- conn create/free ------------------------------------------------------------ */

dc_tcp_conn_t *dc_tcp_conn_new(const dc_verbs_opts_t *o, uint32_t k)
{
    dc_tcp_conn_t *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->base.ops = &dc_tcp_ops;
    c->o = *o;
    memcpy(c->secret, o->secret, o->secret_len);
    c->o.secret = c->secret;
    c->k = k;
    c->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (c->epfd < 0) {
        free(c);
        return NULL;
    }
    for (uint32_t i = 0; i < DC_TCP_MAX_STREAMS; i++) {
        c->st[i].fd = -1;
        c->hs[i].fd = -1;
    }
    for (uint32_t i = 0; i < k; i++) {
        c->st[i].rbuf = malloc(DC_TCP_RBUF);
        if (o->zerocopy > 0)
            c->st[i].zc_req = calloc(DC_TCP_ZC_RING, sizeof(dc_tcp_req_t *));
        if (!c->st[i].rbuf || (o->zerocopy > 0 && !c->st[i].zc_req)) {
            for (uint32_t j = 0; j <= i; j++) {
                free(c->st[j].rbuf);
                free(c->st[j].zc_req);
            }
            close(c->epfd);
            free(c);
            return NULL;
        }
    }
    dc_verbs_window_init(&c->swin);
    c->stats.size = sizeof(c->stats);
    c->stats.streams = k;
    return c;
}

void dc_tcp_conn_free(dc_tcp_conn_t *c)
{
    for (uint32_t i = 0; i < c->k; i++) {
        dc_tcp_stream_reset(c, &c->st[i]);
        free(c->st[i].rbuf);
        free(c->st[i].zc_req);
        dc_tcp_close_hs(&c->hs[i]);
    }
    for (uint32_t i = 0; i < W; i++)
        free(c->stash[i]);
    SSL_CTX_free(c->tls_ctx);
    close(c->epfd);
    if (c->l) {
        dc_session_remove(&c->l->conns, &c->sess);
        dc_tcp_listener_unref(c->l);
    }
    memset(c->secret, 0, sizeof(c->secret));
    free(c);
}

/* --- client side ----------------------------------------------------------------- */

static dc_status_t dc_tcp_hs_start_client(dc_tcp_conn_t *c, dc_tcp_hs_t *h)
{
    dc_tcp_close_hs(h);
    memset(h, 0, sizeof(*h));
    h->fd = -1;
    snprintf(h->peer, sizeof(h->peer), "%s", c->peer);
    int fd = socket(c->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return dc_error_errno(DC_ERR_IO, errno, "tcp: socket");
    dc_tcp_tune(fd, &c->o);
    if (connect(fd, (struct sockaddr *)&c->addr, c->alen) != 0 && errno != EINPROGRESS) {
        int e = errno;
        close(fd);
        return dc_error_errno(dc_status_from_errno(e), e, "tcp: connect to %s", c->peer);
    }
    h->fd = fd;
    h->state = HS_C_CONNECT;
    dc_status_t st = dc_auth_nonce(h->nc);
    if (st != DC_OK)
        return st;
    dc_tcp_hello_t hello;
    memcpy(hello.nc, h->nc, DC_AUTH_NONCE_SIZE);
    dc_tcp_hello_pack(&hello, h->out);
    h->out_len = DC_TCP_HELLO;
    h->out_off = 0;
    return DC_OK;
}

static dc_status_t dc_tcp_client_dial(dc_tcp_conn_t *c)
{
    for (uint32_t i = 0; i < c->k; i++) {
        dc_status_t st = dc_tcp_hs_start_client(c, &c->hs[i]);
        if (st != DC_OK)
            return st;
    }
    return DC_OK;
}

/* Advance one client handshake.  DC_OK: done (stream attached). */
static dc_status_t dc_tcp_hs_client_step(dc_tcp_conn_t *c, dc_tcp_hs_t *h, uint32_t idx)
{
    dc_status_t st;
    if (h->state == HS_C_CONNECT) {
        struct pollfd p = {.fd = h->fd, .events = POLLOUT};
        if (poll(&p, 1, 0) <= 0)
            return DC_ERR_AGAIN;
        int err = 0;
        socklen_t el = sizeof(err);
        getsockopt(h->fd, SOL_SOCKET, SO_ERROR, &err, &el);
        if (err)
            return dc_error_errno(dc_status_from_errno(err), err, "tcp: connect to %s", c->peer);
        h->state = HS_C_CHAL;
        dc_tcp_hs_expect(h, DC_TCP_CHAL);
        if (c->tls) {
            if ((st = dc_tcp_tls_new(c->tls_ctx, h->fd, false, c->tls_name, &h->ssl)) != DC_OK)
                return st;
            h->state = HS_C_TLS;
        }
    }
    if (h->state == HS_C_TLS) {
        if ((st = dc_tcp_tls_handshake(h->ssl, c->peer, &h->tls_wantw)) != DC_OK)
            return st;
        h->state = HS_C_CHAL;
    }
    if (h->state == HS_C_CHAL) {
        if ((st = dc_tcp_hs_flush(h)) != DC_OK)
            return st;
        if ((st = dc_tcp_hs_fill(h)) != DC_OK)
            return st;
        dc_tcp_chal_t chal;
        if ((st = dc_tcp_chal_parse(h->in, h->in_len, c->peer, &chal)) != DC_OK)
            return st;
        memcpy(h->ns, chal.ns, DC_AUTH_NONCE_SIZE);
        if ((st = dc_auth_verify(c->o.secret, c->o.secret_len, 'S', h->nc, h->ns, chal.mac,
                                 c->peer)) != DC_OK)
            return st;
        dc_tcp_proof_t p = {.session = c->sess.id,
                            .epoch = c->sess.epoch,
                            .idx = idx,
                            .nstreams = c->k,
                            .max_msg = (uint32_t)c->o.max_msg_size,
                            .rbase = c->rbase};
        if ((st = dc_auth_mac(c->o.secret, c->o.secret_len, 'C', h->nc, h->ns, p.mac)) != DC_OK)
            return st;
        dc_tcp_proof_pack(&p, h->out);
        h->out_len = DC_TCP_PROOF;
        h->out_off = 0;
        h->state = HS_C_OK;
        dc_tcp_hs_expect(h, DC_TCP_OK);
    }
    if (h->state == HS_C_OK) {
        if ((st = dc_tcp_hs_flush(h)) != DC_OK)
            return st;
        if ((st = dc_tcp_hs_fill(h)) != DC_OK)
            return st;
        dc_tcp_okmsg_t ok;
        if ((st = dc_tcp_ok_parse(h->in, h->in_len, c->peer, &ok)) != DC_OK)
            return st;
        switch (ok.code) {
        case DC_TCP_OK_ACCEPT:
            break;
        case DC_TCP_OK_AUTH:
            return dc_error(DC_ERR_AUTH, "tcp: %s rejected our authentication", c->peer);
        case DC_TCP_OK_UNKNOWN:
            return dc_error(DC_ERR_CANCELED, "tcp: %s no longer knows session %016llx",
                            c->peer, (unsigned long long)c->sess.id);
        case DC_TCP_OK_STALE:
            return dc_error(DC_ERR_RESET, "tcp: %s: stale reconnect epoch", c->peer);
        default:
            return dc_error(DC_ERR_INVALID, "tcp: %s refused the stream (code %u)", c->peer,
                            ok.code);
        }
        if (ok.session != c->sess.id)
            return dc_error(DC_ERR_FORMAT, "tcp: %s answered for another session", c->peer);
        dc_tcp_ack_upto(c, ok.rbase);
        int fd = h->fd;
        SSL *ssl = h->ssl;
        h->fd = -1;
        h->ssl = NULL;
        h->state = HS_DONE;
        if ((st = dc_tcp_attach(c, idx, fd, ssl)) != DC_OK)
            return st;
        return DC_OK;
    }
    return h->state == HS_DONE ? DC_OK : DC_ERR_AGAIN;
}

static dc_status_t dc_tcp_client_progress_hs(dc_tcp_conn_t *c)
{
    double now = dc_now_s();
    if (c->need_dial) {
        if (now < c->retry_at)
            return DC_ERR_AGAIN;
        dc_status_t st = dc_tcp_client_dial(c);
        if (st != DC_OK) {
            if (!dc_status_is_retryable(st) && st != DC_ERR_IO)
                return st;
            snprintf(c->lasterr, sizeof(c->lasterr), "%s", dc_last_error());
            for (uint32_t i = 0; i < c->k; i++)
                dc_tcp_close_hs(&c->hs[i]);
            c->retry_at = now + 0.1;
            return DC_ERR_AGAIN;
        }
        c->need_dial = false;
    }
    uint32_t done = 0;
    for (uint32_t i = 0; i < c->k; i++) {
        dc_tcp_hs_t *h = &c->hs[i];
        if (h->state == HS_DONE) {
            done++;
            continue;
        }
        dc_status_t st = dc_tcp_hs_client_step(c, h, i);
        if (st == DC_OK) {
            done++;
            continue;
        }
        if (st == DC_ERR_AGAIN)
            continue;
        if (st == DC_ERR_AUTH || st == DC_ERR_FORMAT || st == DC_ERR_INVALID ||
            st == DC_ERR_CANCELED)
            return st; /* permanent */
        /* transient (refused, reset): start over after a pause, until the
         * deadline */
        snprintf(c->lasterr, sizeof(c->lasterr), "%s", dc_last_error());
        DC_LOG_INFO("tcp: connect to %s: %s (retrying)", c->peer, c->lasterr);
        for (uint32_t j = 0; j < c->k; j++) {
            dc_tcp_close_hs(&c->hs[j]);
            dc_tcp_stream_reset(c, &c->st[j]);
            c->hs[j].state = HS_C_CONNECT;
        }
        c->attached = 0;
        c->sess.epoch++;
        c->retry_at = now + 0.1;
        c->need_dial = true;
        return DC_ERR_AGAIN;
    }
    if (done < c->k)
        return DC_ERR_AGAIN;
    if (c->state == C_RECONNECTING)
        DC_LOG_WARN("tcp: reconnected to %s (epoch %u); re-sending %u un-acknowledged "
                    "message(s)",
                    c->peer, c->sess.epoch, c->txq_n);
    c->state = C_ESTABLISHED;
    c->deadline = 0;
    return DC_OK;
}

static dc_status_t dc_tcp_connect(const dc_verbs_opts_t *opts, const char *addr,
                                  dc_verbs_conn_t **out)
{
    dc_verbs_opts_t o;
    uint8_t secret[DC_AUTH_MAX_SECRET];
    dc_status_t st = dc_verbs_opts_resolve(opts, &o, secret, sizeof(secret));
    if (st != DC_OK)
        return st;
    dc_tcp_conn_t *c = dc_tcp_conn_new(&o, o.streams);
    if (!c) {
        st = dc_error(DC_ERR_NOMEM, "tcp: out of memory for a connection");
        goto out_secret;
    }
    snprintf(c->peer, sizeof(c->peer), "%s", addr);
    if ((st = dc_net_resolve("tcp", addr, false, &c->addr, &c->alen)) != DC_OK)
        goto out_conn;
    c->tls = o.tls == DC_VERBS_TLS_ON || (o.tls == DC_VERBS_TLS_AUTO && o.wan);
    if (c->tls) {
        if (o.tls_peer_name)
            snprintf(c->tls_name, sizeof(c->tls_name), "%s", o.tls_peer_name);
        if ((st = dc_tcp_tls_ctx_new(&o, false, &c->tls_ctx)) != DC_OK) {
            dc_error_prefix("tcp: connect to %s", addr);
            goto out_conn;
        }
    }
    c->o.tls_peer_name = NULL; /* borrowed for the call only */
    if ((st = dc_session_start(&c->sess, 0)) != DC_OK)
        goto out_conn;
    c->state = C_CONNECTING;
    c->deadline = dc_now_s() + o.timeout_ms / 1000.0;
    c->need_dial = true;
    memset(secret, 0, sizeof(secret));
    *out = &c->base;
    return DC_OK;
out_conn:
    dc_tcp_conn_free(c);
out_secret:
    memset(secret, 0, sizeof(secret));
    return st;
}

static dc_status_t dc_tcp_connect_test(dc_verbs_conn_t *cb)
{
    dc_tcp_conn_t *c = (dc_tcp_conn_t *)cb;
    dc_status_t st = dc_tcp_progress_conn(c);
    if (st != DC_OK)
        return st;
    if (c->state == C_ESTABLISHED || (c->state == C_RECONNECTING))
        return DC_OK;
    return DC_ERR_AGAIN;
}

/* --- requests and the connection's ops ------------------------------------------- */

static dc_status_t dc_tcp_test(dc_verbs_req_t *rb, int *done, size_t *len)
{
    dc_tcp_req_t *r = (dc_tcp_req_t *)rb;
    dc_tcp_conn_t *c = r->c;
    /* a send is finished when the peer verified it AND the kernel holds no
     * zero-copy reference to its buffer any more */
    bool fin = r->is_send ? (r->acked && !r->on_wire && !r->zc_pending) : r->done;
    if (!fin) {
        dc_status_t st = dc_tcp_progress_conn(c);
        fin = r->is_send ? (r->acked && !r->on_wire && !r->zc_pending) : r->done;
        if (st != DC_OK && !fin) {
            r->in_use = false;
            return st;
        }
    }
    if (!fin) {
        *done = 0;
        return DC_OK;
    }
    dc_status_t err = r->err;
    size_t l = r->len;
    r->in_use = false;
    if (err != DC_OK)
        return dc_error(err, "tcp: message %llu from %s was larger (%zu bytes) than the receive "
                             "buffer",
                        (unsigned long long)r->seq, c->peer, l);
    *done = 1;
    if (len)
        *len = l;
    return DC_OK;
}

static dc_status_t dc_tcp_progress(dc_verbs_conn_t *cb)
{
    return dc_tcp_progress_conn((dc_tcp_conn_t *)cb);
}

static dc_status_t dc_tcp_wait(dc_verbs_conn_t *cb, int timeout_ms)
{
    dc_tcp_conn_t *c = (dc_tcp_conn_t *)cb;
    if (c->state == C_FAILED)
        return dc_error(c->err, "%s", c->errmsg);
    if (c->state == C_ESTABLISHED) {
        /* pending work that does not depend on the sockets */
        bool ready = false;
        for (uint32_t i = 0; i < c->k && !ready; i++) {
            dc_tcp_stream_t *s = &c->st[i];
            if ((!s->wblocked && (s->cur || s->ooff < s->olen)) ||
                (s->rblocked && s->h.seq < c->rposted) ||
                (s->ssl && !s->rblocked && SSL_pending(s->ssl) > 0))
                ready = true; /* TLS: decrypted bytes epoll cannot see (not
                                 SSL_has_pending: a partial record waits for
                                 the socket, which epoll does see; counting it
                                 made a receiver spin between segments) */
        }
        if ((c->txq_n || c->ctrl_n)) {
            for (uint32_t i = 0; i < c->k && !ready; i++)
                if (!c->st[i].wblocked && !c->st[i].cur)
                    ready = true;
        }
        if (!ready) {
            struct epoll_event ev[DC_TCP_MAX_STREAMS];
            int n = epoll_wait(c->epfd, ev, DC_TCP_MAX_STREAMS, timeout_ms);
            (void)n;
        }
    } else {
        /* handshakes / re-attachment: poll the relevant fds briefly */
        struct pollfd p[DC_TCP_MAX_STREAMS + 1];
        int n = 0;
        if (c->is_server) {
            if (c->l)
                p[n++] = (struct pollfd){.fd = c->l->fd, .events = POLLIN};
        } else {
            for (uint32_t i = 0; i < c->k; i++) {
                dc_tcp_hs_t *h = &c->hs[i];
                if (h->fd < 0 || h->state == HS_DONE)
                    continue;
                short ev = h->state == HS_C_TLS ? (h->tls_wantw ? POLLOUT : POLLIN)
                           : (h->state == HS_C_CONNECT || h->out_off < h->out_len) ? POLLOUT
                                                                                   : POLLIN;
                p[n++] = (struct pollfd){.fd = h->fd, .events = ev};
            }
        }
        int t = DC_MIN(timeout_ms, 10); /* handshake fds of the listener are not in p */
        if (n)
            (void)poll(p, (nfds_t)n, t);
        else if (t > 0)
            (void)poll(NULL, 0, t);
    }
    return dc_tcp_progress_conn(c);
}

static int dc_tcp_fd(dc_verbs_conn_t *cb)
{
    return ((dc_tcp_conn_t *)cb)->epfd;
}

static dc_status_t dc_tcp_stats(dc_verbs_conn_t *cb, dc_verbs_stats_t *out)
{
    dc_tcp_conn_t *c = (dc_tcp_conn_t *)cb;
    if (out->size < sizeof(size_t) || out->size > sizeof(*out))
        return dc_error(DC_ERR_INVALID, "dc_verbs_stats_t: bad size");
    size_t sz = out->size;
    dc_verbs_stats_t s = c->stats;
    snprintf(s.peer, sizeof(s.peer), "%s", c->peer);
    s.size = sz;
    memcpy(out, &s, sz);
    return DC_OK;
}

static void dc_tcp_close(dc_verbs_conn_t *cb)
{
    if (!cb)
        return;
    dc_tcp_conn_t *c = (dc_tcp_conn_t *)cb;
    if (c->state == C_ESTABLISHED) {
        /* best effort: tell the peer this is an orderly close, on a stream
         * whose output is at a message boundary */
        uint8_t b[DC_VERBS_HDR_SIZE];
        dc_verbs_hdr_t h = {.type = DC_VERBS_MSG_BYE};
        for (uint32_t i = 0; i < c->k; i++) {
            dc_tcp_stream_t *s = &c->st[i];
            if (s->fd < 0)
                continue;
            /* flush pending control frames first (bounded effort) */
            for (int tries = 0; tries < 100 && !s->cur && (s->ooff < s->olen || c->ctrl_n);
                 tries++)
                if (dc_tcp_stream_send(c, s, i) != DC_OK || s->wblocked)
                    break;
            if (s->cur || s->ooff < s->olen)
                continue;
            h.stream = (uint16_t)i;
            dc_verbs_hdr_pack(&h, b);
            if (s->ssl) {
                (void)dc_tcp_tls_write(s->ssl, b, sizeof(b));
                dc_tcp_tls_shutdown(s->ssl); /* close_notify */
            } else {
                (void)send(s->fd, b, sizeof(b), MSG_NOSIGNAL | MSG_DONTWAIT);
            }
        }
        /* Linger briefly: send FIN, then read until the peer closes too, so
         * that unread bytes do not turn our close into a RST that could
         * destroy data (our last ACKs) still queued at the peer. */
        struct pollfd p[DC_TCP_MAX_STREAMS];
        nfds_t n = 0;
        for (uint32_t i = 0; i < c->k; i++)
            if (c->st[i].fd >= 0) {
                shutdown(c->st[i].fd, SHUT_WR);
                p[n++] = (struct pollfd){.fd = c->st[i].fd, .events = POLLIN};
            }
        double end = dc_now_s() + 0.25;
        while (n > 0 && dc_now_s() < end) {
            if (poll(p, n, 10) <= 0)
                continue;
            for (nfds_t i = 0; i < n;) {
                if (p[i].revents) {
                    uint8_t junk[4096];
                    ssize_t r = recv(p[i].fd, junk, sizeof(junk), MSG_DONTWAIT);
                    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
                        p[i] = p[--n];
                        continue;
                    }
                }
                i++;
            }
        }
    }
    /* zero-copy sends the kernel still references: wait briefly for their
     * release so the caller may reuse its buffers; abort what remains */
    double zend = dc_now_s() + 0.5;
    for (;;) {
        uint32_t out = 0;
        for (uint32_t i = 0; i < c->k; i++) {
            dc_tcp_stream_t *s = &c->st[i];
            if (s->fd >= 0 && s->zc_out && dc_tcp_zc_reap(c, s) == DC_OK)
                out += s->zc_out;
        }
        if (!out || dc_now_s() > zend)
            break;
        (void)poll(NULL, 0, 1);
    }
    for (uint32_t i = 0; i < c->k; i++) {
        dc_tcp_stream_t *s = &c->st[i];
        if (s->fd >= 0 && s->zc_out) {
            struct linger lg = {.l_onoff = 1, .l_linger = 0};
            setsockopt(s->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        }
    }
    dc_tcp_conn_free(c);
}

static dc_status_t dc_tcp_reg_mem(dc_verbs_conn_t *cb, void *buf, size_t len, uint32_t kind,
                                  dc_verbs_mr_t **out)
{
    (void)cb;
    (void)buf;
    (void)len;
    if (kind != DC_VERBS_MEM_HOST)
        return dc_error(DC_ERR_UNSUPPORTED, "tcp: only host memory can be sent (stage device "
                                            "memory through the host)");
    dc_tcp_mr_t *m = calloc(1, sizeof(*m));
    if (!m)
        return dc_error(DC_ERR_NOMEM, "tcp: out of memory");
    m->base.ops = &dc_tcp_ops;
    *out = &m->base;
    return DC_OK;
}

static void dc_tcp_dereg_mem(dc_verbs_conn_t *cb, dc_verbs_mr_t *mr)
{
    (void)cb;
    free(mr);
}

static dc_status_t dc_tcp_init(void)
{
    return DC_OK; /* sockets are always there */
}

static dc_status_t dc_tcp_caps(dc_verbs_caps_t *out)
{
    if (out->size < sizeof(size_t) || out->size > sizeof(*out))
        return dc_error(DC_ERR_INVALID, "dc_verbs_caps_t: bad size");
    dc_verbs_caps_t c = {0};
    c.size = out->size;
    c.mem_kinds = DC_VERBS_MEM_HOST;
    c.max_streams = DC_TCP_MAX_STREAMS;
    c.max_msg_size = UINT32_MAX;
    c.max_inflight = W;
    snprintf(c.device, sizeof(c.device), "kernel TCP/IP stack");
    memcpy(out, &c, out->size);
    return DC_OK;
}

const dc_verbs_ops_t dc_tcp_ops = {
    .size = sizeof(dc_verbs_ops_t),
    .name = "tcp",
    .init = dc_tcp_init,
    .caps = dc_tcp_caps,
    .listen = dc_tcp_listen,
    .listen_addr = dc_tcp_listen_addr,
    .listen_fd = dc_tcp_listen_fd,
    .accept = dc_tcp_accept,
    .listen_close = dc_tcp_listen_close,
    .connect = dc_tcp_connect,
    .connect_test = dc_tcp_connect_test,
    .reg_mem = dc_tcp_reg_mem,
    .dereg_mem = dc_tcp_dereg_mem,
    .isend = dc_tcp_isend,
    .irecv = dc_tcp_irecv,
    .test = dc_tcp_test,
    .progress = dc_tcp_progress,
    .wait = dc_tcp_wait,
    .fd = dc_tcp_fd,
    .stats = dc_tcp_stats,
    .close = dc_tcp_close,
    .isend_crc = dc_tcp_isend_crc,
};
