/*
 * tcp_listen.c - the listener of the tcp transport: accepting sockets, the
 * server side of the handshake (HELLO, CHAL, PROOF, OK; see tcp.c), and
 * attaching each authenticated stream to the connection of its session
 * (session.h: a new session, another stream of it, or the re-dial of a
 * broken one), then handing established connections to accept().
 * A socket whose first byte is 0x16 runs a TLS handshake first (tcp_tls.c;
 * config tls=on refuses the others, tls=off refuses TLS).
 */
#include "verbs/tcp_internal.h"

static void dc_tcp_hs_report(dc_tcp_listener_t *l, double now, bool final);

void dc_tcp_listener_unref(dc_tcp_listener_t *l)
{
    if (--l->refs > 0)
        return;
    dc_tcp_hs_report(l, 0, true);
    for (uint32_t i = 0; i < l->nhs; i++) {
        dc_tcp_close_hs(l->hs[i]);
        free(l->hs[i]);
    }
    if (l->fd >= 0)
        close(l->fd);
    SSL_CTX_free(l->tls_ctx);
    memset(l->secret, 0, sizeof(l->secret));
    free(l);
}
static void dc_tcp_hs_reply(dc_tcp_hs_t *h, uint32_t code, uint64_t session, uint64_t rbase)
{
    uint8_t b[DC_TCP_OK];
    dc_tcp_okmsg_t m = {.code = code, .session = session, .rbase = rbase};
    dc_tcp_ok_pack(&m, b);
    ssize_t n = h->ssl ? dc_tcp_tls_write(h->ssl, b, sizeof(b))
                       : send(h->fd, b, sizeof(b), MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)n;
}
static bool dc_tcp_session_live(const dc_session_t *s)
{
    return DC_TCP_CONN_OF(s)->state != C_FAILED;
}
static dc_tcp_conn_t *dc_tcp_find_session(dc_tcp_listener_t *l, uint64_t session)
{
    dc_session_t *s = dc_session_find(l->conns, session, dc_tcp_session_live);
    return s ? DC_TCP_CONN_OF(s) : NULL;
}
/* The proof checked out: attach the socket to its session. */
static dc_status_t dc_tcp_hs_server_attach(dc_tcp_listener_t *l, dc_tcp_hs_t *h)
{
    dc_tcp_conn_t *c = dc_tcp_find_session(l, h->session);
    /* several streams of one epoch each attach (JOIN); the first creates */
    dc_session_verdict_t v = dc_session_judge(c ? &c->sess : NULL, h->epoch, 0, true);
    if (!c) {
        if (v == DC_SESSION_UNKNOWN) {
            dc_tcp_hs_reply(h, DC_TCP_OK_UNKNOWN, h->session, 0);
            return dc_error(DC_ERR_CANCELED, "tcp: %s reconnects to an unknown session",
                            h->peer);
        }
        dc_verbs_opts_t o = l->o;
        o.max_msg_size = DC_MIN((uint64_t)h->max_msg, l->o.max_msg_size);
        o.streams = h->nstreams;
        c = dc_tcp_conn_new(&o, h->nstreams);
        if (!c) {
            dc_tcp_hs_reply(h, DC_TCP_OK_BAD, h->session, 0);
            return dc_error(DC_ERR_NOMEM, "tcp: out of memory for a connection");
        }
        c->is_server = true;
        c->sess.id = h->session;
        c->sess.epoch = h->epoch;
        c->state = C_CONNECTING;
        c->deadline = dc_now_s() + l->o.timeout_ms / 1000.0;
        snprintf(c->peer, sizeof(c->peer), "%s", h->peer);
        char *colon = strrchr(c->peer, ':'); /* the peer's host, not one stream's port */
        if (colon)
            snprintf(colon, sizeof(c->peer) - (size_t)(colon - c->peer), ":*");
        c->l = l;
        l->refs++;
        dc_session_add(&l->conns, &c->sess);
    }
    if (h->nstreams != c->k) {
        dc_tcp_hs_reply(h, DC_TCP_OK_BAD, h->session, 0);
        return dc_error(DC_ERR_FORMAT, "tcp: %s: stream count changed", h->peer);
    }
    if (v == DC_SESSION_STALE) {
        dc_tcp_hs_reply(h, DC_TCP_OK_STALE, h->session, 0);
        return dc_error(DC_ERR_RESET, "tcp: %s: stale epoch %u", h->peer, h->epoch);
    }
    if (v == DC_SESSION_RESUME) {
        if (c->state == C_ESTABLISHED)
            dc_tcp_break(c, "the peer is reconnecting");
        for (uint32_t i = 0; i < c->k; i++)
            dc_tcp_stream_reset(c, &c->st[i]);
        c->attached = 0;
        c->sess.epoch = h->epoch;
        if (c->state == C_FAILED)
            return dc_error(c->err, "%s", c->errmsg);
    }
    if (c->st[h->idx].fd >= 0) {
        dc_tcp_hs_reply(h, DC_TCP_OK_BAD, h->session, 0);
        return dc_error(DC_ERR_FORMAT, "tcp: %s: stream %u attached twice", h->peer, h->idx);
    }
    dc_tcp_hs_reply(h, DC_TCP_OK_ACCEPT, h->session, c->rbase);
    dc_tcp_ack_upto(c, h->rbase);
    int fd = h->fd;
    SSL *ssl = h->ssl;
    h->fd = -1;
    h->ssl = NULL;
    dc_status_t st = dc_tcp_attach(c, h->idx, fd, ssl);
    if (st != DC_OK)
        return st;
    if (++c->attached == c->k) {
        if (c->state == C_RECONNECTING) {
            DC_LOG_WARN("tcp: %s re-attached (epoch %u); re-sending %u un-acknowledged "
                        "message(s)",
                        c->peer, c->sess.epoch, c->txq_n);
        }
        c->state = C_ESTABLISHED;
        c->deadline = 0;
    }
    return DC_OK;
}
/* The first byte of a new socket: a TLS record (0x16, handshake) or the
 * clear HELLO ("DCTH"); the listener's tls mode decides what it takes. */
static dc_status_t dc_tcp_hs_server_tls(dc_tcp_listener_t *l, dc_tcp_hs_t *h)
{
    uint8_t b;
    ssize_t n = recv(h->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0)
        return dc_error(DC_ERR_RESET, "tcp: %s closed the connection before the handshake",
                        h->peer);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return DC_ERR_AGAIN;
        return dc_error_errno(dc_status_from_errno(errno), errno, "tcp: handshake recv from %s",
                              h->peer);
    }
    h->tls_seen = true;
    if (b != 0x16) {
        if (l->tls == DC_VERBS_TLS_ON)
            return dc_error(DC_ERR_AUTH,
                            "tcp: refused %s: it did not start TLS, and this "
                            "listener (%s) requires it (config tls=on)",
                            h->peer, l->addr);
        return DC_OK;
    }
    if (!l->tls_ctx)
        return dc_error(DC_ERR_AUTH,
                        "tcp: refused %s: it started TLS, and this listener (%s) "
                        "has config tls=off",
                        h->peer, l->addr);
    dc_status_t st = dc_tcp_tls_new(l->tls_ctx, h->fd, true, NULL, &h->ssl);
    if (st != DC_OK)
        return st;
    h->state = HS_S_TLS;
    return DC_OK;
}
/* Advance one server handshake.  DC_OK: finished (attached). */
static dc_status_t dc_tcp_hs_server_step(dc_tcp_listener_t *l, dc_tcp_hs_t *h)
{
    dc_status_t st;
    if (h->state == HS_S_HELLO && !h->tls_seen && (st = dc_tcp_hs_server_tls(l, h)) != DC_OK)
        return st;
    if (h->state == HS_S_TLS) {
        if ((st = dc_tcp_tls_handshake(h->ssl, h->peer, &h->tls_wantw)) != DC_OK)
            return st;
        h->state = HS_S_HELLO;
    }
    if (h->state == HS_S_HELLO) {
        if ((st = dc_tcp_hs_fill(h)) != DC_OK)
            return st;
        dc_tcp_hello_t hello;
        if ((st = dc_tcp_hello_parse(h->in, h->in_len, h->peer, &hello)) != DC_OK)
            return st;
        memcpy(h->nc, hello.nc, DC_AUTH_NONCE_SIZE);
        if ((st = dc_auth_nonce(h->ns)) != DC_OK)
            return st;
        dc_tcp_chal_t chal;
        memcpy(chal.ns, h->ns, DC_AUTH_NONCE_SIZE);
        if ((st = dc_auth_mac(l->o.secret, l->o.secret_len, 'S', h->nc, h->ns, chal.mac)) != DC_OK)
            return st;
        dc_tcp_chal_pack(&chal, h->out);
        h->out_len = DC_TCP_CHAL;
        h->out_off = 0;
        h->state = HS_S_PROOF;
        dc_tcp_hs_expect(h, DC_TCP_PROOF);
    }
    if (h->state == HS_S_PROOF) {
        if ((st = dc_tcp_hs_flush(h)) != DC_OK)
            return st;
        if ((st = dc_tcp_hs_fill(h)) != DC_OK)
            return st;
        /* the MAC first: nothing else of an unauthenticated PROOF counts */
        if ((st = dc_auth_verify(l->o.secret, l->o.secret_len, 'C', h->nc, h->ns, h->in,
                                 h->peer)) != DC_OK) {
            dc_tcp_hs_reply(h, DC_TCP_OK_AUTH, 0, 0);
            return st;
        }
        dc_tcp_proof_t p;
        if ((st = dc_tcp_proof_parse(h->in, h->in_len, h->peer, &p)) != DC_OK) {
            dc_tcp_hs_reply(h, DC_TCP_OK_BAD, dc_load_le64(h->in + 32), 0);
            return st;
        }
        h->session = p.session;
        h->epoch = p.epoch;
        h->idx = p.idx;
        h->nstreams = p.nstreams;
        h->max_msg = p.max_msg;
        h->rbase = p.rbase;
        h->state = HS_DONE;
        return dc_tcp_hs_server_attach(l, h);
    }
    return DC_ERR_AGAIN;
}

/* The pending handshake to drop for a new one: among those from `src`
 * (NULL: all), the oldest that has not sent a whole HELLO yet (idle or
 * slow peers), else the oldest.  Every pending handshake is
 * unauthenticated (an authenticated one leaves the list at once). */
static int dc_tcp_hs_victim(const dc_tcp_listener_t *l, const char *src)
{
    int best = -1;
    for (int pass = 0; pass < 2 && best < 0; pass++)
        for (uint32_t i = 0; i < l->nhs; i++) {
            const dc_tcp_hs_t *h = l->hs[i];
            if (src && strcmp(h->src, src) != 0)
                continue;
            if (pass == 0 && h->state != HS_S_HELLO)
                continue;
            if (best < 0 || h->started < l->hs[best]->started)
                best = (int)i;
        }
    return best;
}

static void dc_tcp_hs_drop(dc_tcp_listener_t *l, uint32_t i)
{
    dc_tcp_close_hs(l->hs[i]);
    free(l->hs[i]);
    l->hs[i] = l->hs[--l->nhs];
}

/* One line a second at most for the handshakes evicted or timed out (a
 * flood of idle connections is a summary, not a line per socket). */
static void dc_tcp_hs_report(dc_tcp_listener_t *l, double now, bool final)
{
    uint64_t n = l->hs_evicted + l->hs_timed_out + l->hs_quiet;
    if (n == l->hs_reported || (!final && now < l->hs_report_at))
        return;
    DC_LOG_WARN("tcp: listener %s: %llu unauthenticated handshake(s) evicted for newer ones "
                "(at most %u pending, %u per source address), %llu dropped after "
                "handshake_timeout_ms=%u, %llu refused beyond %u log lines a second, since it "
                "opened",
                l->addr, (unsigned long long)l->hs_evicted, DC_TCP_MAX_HS, DC_TCP_MAX_HS_SRC,
                (unsigned long long)l->hs_timed_out, l->o.hs_timeout_ms,
                (unsigned long long)l->hs_quiet, DC_TCP_HS_LINES);
    l->hs_reported = n;
    l->hs_report_at = now + 1.0;
}

dc_status_t dc_tcp_listener_progress(dc_tcp_listener_t *l)
{
    /* new sockets */
    for (;;) {
        struct sockaddr_storage pa;
        socklen_t pl = sizeof(pa);
        int fd = accept4(l->fd, (struct sockaddr *)&pa, &pl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                DC_LOG_WARN("tcp: accept on %s: %s", l->addr, strerror(errno));
                break;
            }
            return dc_error_errno(DC_ERR_IO, errno, "tcp: accept on %s", l->addr);
        }
        dc_tcp_hs_t *h = calloc(1, sizeof(*h));
        if (!h) {
            DC_LOG_WARN("tcp: dropped a connection on %s: out of memory", l->addr);
            close(fd);
            continue;
        }
        dc_net_sockaddr_str((struct sockaddr *)&pa, h->peer, sizeof(h->peer));
        snprintf(h->src, sizeof(h->src), "%s", h->peer);
        char *colon = strrchr(h->src, ':'); /* the address, not the port */
        if (colon)
            *colon = 0;
        /* full (for this source, or at all): the oldest unauthenticated
         * handshake makes room, so idle or slow sockets cannot lock out
         * a peer that completes its handshake at once */
        uint32_t same = 0;
        for (uint32_t i = 0; i < l->nhs; i++)
            same += strcmp(l->hs[i]->src, h->src) == 0;
        int v = same >= DC_TCP_MAX_HS_SRC ? dc_tcp_hs_victim(l, h->src)
                : l->nhs >= DC_TCP_MAX_HS ? dc_tcp_hs_victim(l, NULL)
                                          : -1;
        if (v >= 0) {
            DC_LOG_DEBUG("tcp: evicted the handshake of %s on %s for %s", l->hs[v]->peer, l->addr,
                         h->peer);
            dc_tcp_hs_drop(l, (uint32_t)v);
            l->hs_evicted++;
        }
        dc_tcp_tune(fd, &l->o);
        h->fd = fd;
        h->state = HS_S_HELLO;
        h->started = dc_now_s();
        h->deadline = h->started + l->o.hs_timeout_ms / 1000.0;
        dc_tcp_hs_expect(h, DC_TCP_HELLO);
        l->hs[l->nhs++] = h;
    }
    /* pending handshakes */
    double now = dc_now_s();
    for (uint32_t i = 0; i < l->nhs;) {
        dc_tcp_hs_t *h = l->hs[i];
        dc_status_t st = dc_tcp_hs_server_step(l, h);
        if (st == DC_ERR_AGAIN && now > h->deadline) {
            DC_LOG_DEBUG("tcp: %s did not authenticate within handshake_timeout_ms=%u on %s",
                         h->peer, l->o.hs_timeout_ms, l->addr);
            l->hs_timed_out++;
            dc_tcp_hs_drop(l, i);
            continue;
        }
        if (st == DC_ERR_AGAIN) {
            i++;
            continue;
        }
        if (st == DC_ERR_CANCELED) {
            /* a resume of a session this side already ended (a peer
             * re-dialing after BYE, or after its session was dropped): it
             * is told so and attaches afresh; benign, not a warning */
            DC_LOG_INFO("tcp: refused a resume: %s", dc_last_error());
        } else if (st != DC_OK) {
            if (now >= l->hs_lines_at) {
                l->hs_lines_at = now + 1.0;
                l->hs_lines = 0;
            }
            if (l->hs_lines < DC_TCP_HS_LINES) {
                l->hs_lines++;
                DC_LOG_WARN("tcp: dropped peer: %s", dc_last_error());
            } else {
                l->hs_quiet++;
            }
        }
        dc_tcp_hs_drop(l, i);
    }
    dc_tcp_hs_report(l, now, false);
    /* pending sessions that never completed */
    for (dc_session_t *s = l->conns; s; s = s->next) {
        dc_tcp_conn_t *c = DC_TCP_CONN_OF(s);
        if (!c->handed_out && c->state == C_CONNECTING && now > c->deadline)
            dc_tcp_fail(c, DC_ERR_TIMEOUT, "not all streams attached within timeout_ms");
    }
    return DC_OK;
}
dc_status_t dc_tcp_listen(const dc_verbs_opts_t *opts, const char *bind_addr,
                                 dc_verbs_listener_t **out)
{
    dc_tcp_listener_t *l = calloc(1, sizeof(*l));
    if (!l)
        return dc_error(DC_ERR_NOMEM, "tcp: out of memory");
    l->base.ops = &dc_tcp_ops;
    l->fd = -1;
    l->refs = 1;
    dc_status_t st = dc_verbs_opts_resolve(opts, &l->o, l->secret, sizeof(l->secret));
    if (st != DC_OK)
        goto out_free;
    l->tls = l->o.tls;
    if (l->tls != DC_VERBS_TLS_OFF &&
        (st = dc_tcp_tls_ctx_new(&l->o, true, &l->tls_ctx)) != DC_OK) {
        dc_error_prefix("tcp: listen on %s", bind_addr);
        goto out_free;
    }
    struct sockaddr_storage sa;
    socklen_t sl;
    if ((st = dc_net_resolve("tcp", bind_addr, true, &sa, &sl)) != DC_OK)
        goto out_free;
    l->fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->fd < 0) {
        st = dc_error_errno(DC_ERR_IO, errno, "tcp: socket");
        goto out_free;
    }
    int one = 1;
    setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    dc_tcp_tune(l->fd, &l->o);
    if (bind(l->fd, (struct sockaddr *)&sa, sl) != 0) {
        st = dc_error_errno(DC_ERR_IO, errno, "tcp: bind %s", bind_addr);
        goto out_fd;
    }
    if (listen(l->fd, 256) != 0) {
        st = dc_error_errno(DC_ERR_IO, errno, "tcp: listen %s", bind_addr);
        goto out_fd;
    }
    sl = sizeof(sa);
    getsockname(l->fd, (struct sockaddr *)&sa, &sl);
    dc_net_sockaddr_str((struct sockaddr *)&sa, l->addr, sizeof(l->addr));
    *out = &l->base;
    return DC_OK;
out_fd:
    close(l->fd);
out_free:
    SSL_CTX_free(l->tls_ctx);
    memset(l->secret, 0, sizeof(l->secret));
    free(l);
    return st;
}
dc_status_t dc_tcp_listen_addr(dc_verbs_listener_t *lb, char *buf, size_t len)
{
    dc_tcp_listener_t *l = (dc_tcp_listener_t *)lb;
    if (strlen(l->addr) >= len)
        return dc_error(DC_ERR_INVALID, "tcp: address buffer too small");
    snprintf(buf, len, "%s", l->addr);
    return DC_OK;
}
int dc_tcp_listen_fd(dc_verbs_listener_t *lb)
{
    return ((dc_tcp_listener_t *)lb)->fd;
}
dc_status_t dc_tcp_accept(dc_verbs_listener_t *lb, dc_verbs_conn_t **out)
{
    dc_tcp_listener_t *l = (dc_tcp_listener_t *)lb;
    dc_status_t st = dc_tcp_listener_progress(l);
    if (st != DC_OK)
        return st;
    for (dc_session_t *s = l->conns; s; s = s->next) {
        dc_tcp_conn_t *c = DC_TCP_CONN_OF(s);
        if (!c->handed_out && c->state == C_ESTABLISHED) {
            c->handed_out = true;
            DC_LOG_INFO("tcp: accepted %s (%u streams, session %016llx)", c->peer, c->k,
                        (unsigned long long)c->sess.id);
            *out = &c->base;
            return DC_OK;
        }
    }
    /* reap pending sessions that failed before being handed out */
    for (dc_session_t *s = l->conns; s;) {
        dc_session_t *n = s->next;
        dc_tcp_conn_t *c = DC_TCP_CONN_OF(s);
        if (!c->handed_out && c->state == C_FAILED) {
            dc_tcp_conn_free(c); /* drops the conn's own listener reference */
        }
        s = n;
    }
    return DC_ERR_AGAIN;
}
void dc_tcp_listen_close(dc_verbs_listener_t *lb)
{
    if (!lb)
        return;
    dc_tcp_listener_t *l = (dc_tcp_listener_t *)lb;
    l->user_closed = true;
    /* pending sessions nobody will accept */
    for (dc_session_t *s = l->conns; s;) {
        dc_session_t *n = s->next;
        dc_tcp_conn_t *c = DC_TCP_CONN_OF(s);
        if (!c->handed_out)
            dc_tcp_conn_free(c);
        s = n;
    }
    dc_tcp_listener_unref(l);
}
