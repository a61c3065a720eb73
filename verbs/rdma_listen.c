/*
 * rdma_listen.c - the listener of the rdma transport: connect requests
 * (routed by session and epoch, session.h, and refused at once when they
 * cannot resume), one protection domain per device shared by the accepted
 * connections, the handshakes in progress, and handing the authenticated
 * link of a re-dial to the connection of its session (dc_rdma_adopt).
 */
#include "verbs/rdma_internal.h"

dc_status_t dc_rdma_listen(const dc_verbs_opts_t *opts, const char *bind_addr,
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
dc_status_t dc_rdma_listen_addr(dc_verbs_listener_t *lb, char *buf, size_t len)
{
    dc_rdma_listener_t *l = (dc_rdma_listener_t *)lb;
    if ((size_t)snprintf(buf, len, "%s", l->addr) >= len)
        return dc_error(DC_ERR_INVALID, "rdma: buffer too small for the listener address");
    return DC_OK;
}
int dc_rdma_listen_fd(dc_verbs_listener_t *lb)
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
/* A listener full of unauthenticated handshakes (DC_RDMA_MAX_HS, or
 * DC_RDMA_MAX_HS_SRC from the address of `peer`) drops its oldest one that
 * has not authenticated its HELLO yet (else its oldest) for the new request,
 * instead of letting them pile up (each holds a QP and its rings) until
 * timeout_ms. */
static void dc_rdma_hs_make_room(dc_rdma_listener_t *l, const char *peer)
{
    unsigned n = 0, same = 0;
    for (dc_rdma_conn_t *c = l->handshaking; c; c = c->next) {
        n++;
        same += dc_net_same_host_str(c->peer, peer);
    }
    bool src_full = same >= DC_RDMA_MAX_HS_SRC;
    if (!src_full && n < DC_RDMA_MAX_HS)
        return;
    dc_rdma_conn_t **victim = NULL;
    for (int pass = 0; pass < 2 && !victim; pass++)
        for (dc_rdma_conn_t **pp = &l->handshaking; *pp; pp = &(*pp)->next) {
            dc_rdma_conn_t *c = *pp;
            if ((src_full && !dc_net_same_host_str(c->peer, peer)) ||
                (pass == 0 && c->state != DC_RDMA_S_ACCEPTING && c->state != DC_RDMA_S_WAIT_HELLO))
                continue;
            if (!victim || c->hs_started < (*victim)->hs_started)
                victim = pp;
        }
    if (!victim)
        return;
    dc_rdma_conn_t *v = *victim;
    *victim = v->next;
    v->next = NULL;
    epoll_ctl(l->epfd, EPOLL_CTL_DEL, v->epfd, NULL);
    DC_LOG_DEBUG("rdma listener %s: evicted the handshake of %s for %s", l->addr, v->peer, peer);
    dc_rdma_conn_destroy(v);
    l->hs_evicted++;
    double now = dc_now_s();
    if (now >= l->hs_report_at) {
        DC_LOG_WARN("rdma listener %s: %llu unauthenticated handshake(s) evicted for newer ones "
                    "(at most %d pending, %d per source address) since it opened",
                    l->addr, (unsigned long long)l->hs_evicted, DC_RDMA_MAX_HS, DC_RDMA_MAX_HS_SRC);
        l->hs_report_at = now + 1.0;
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
        dc_rdma_hs_make_room(l, peer);
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
    /* unauthenticated: the handshake's own deadline */
    c->hs_timeout_ms = l->opts.hs_timeout_ms;
    c->hs_started = dc_now_s();
    c->deadline = c->hs_started + c->hs_timeout_ms / 1000.0;
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
dc_status_t dc_rdma_accept(dc_verbs_listener_t *lb, dc_verbs_conn_t **out)
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
void dc_rdma_listen_close(dc_verbs_listener_t *lb)
{
    dc_rdma_listener_t *l = (dc_rdma_listener_t *)lb;
    if (l)
        dc_rdma_listener_unref(l);
}
/* Freed when the caller closed it and no accepted connection remains (they
 * use its protection domains, and re-attach through it). */
void dc_rdma_listener_unref(dc_rdma_listener_t *l)
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
