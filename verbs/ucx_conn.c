/*
 * ucx_conn.c - connections of the `ucx` transport: a UCP worker per
 * connection and per listener, endpoint creation (accept and dial), the
 * HMAC handshake over active messages (AM 3), the listener and accept(),
 * connect() and the client's re-dial, the server's adoption of a re-dialed
 * session (resume), endpoint errors, progress of a connection and its
 * close.  The protocol is described at the top of ucx.c.
 *
 * Addresses go through net.h (dc_net_resolve: `*` is the wildcard;
 * dc_net_sockaddr_str), sessions through session.h (the listener's
 * registry and the verdict on a dial, dc_session_judge).
 */
#include "verbs/ucx_internal.h"

#include <netinet/in.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

/* --- errors ----------------------------------------------------------------- */

/*
 * UCP error handling mode of our endpoints.  PEER (the default) makes UCX
 * report a dead peer (the connection fails with DC_ERR_RESET instead of
 * hanging), but UCX 1.13 then excludes the shared-memory transports
 * (posix/sysv/cma have no peer-failure detection): on one host it runs over
 * tcp/lo.  DELTACAST_UCX_ERR_MODE=none allows shared memory (for loopback
 * benchmarks), at the price of relying on the caller's timeouts when a peer
 * dies.
 */
static ucp_err_handling_mode_t dc_ucx_err_mode(void)
{
    const char *m = dc_config_get("ucx_err_mode"); /* DELTACAST_UCX_ERR_MODE */
    if (m && strcmp(m, "none") == 0)
        return UCP_ERR_HANDLING_MODE_NONE;
    if (m && *m && strcmp(m, "peer") != 0)
        DC_LOG_WARN("config ucx_err_mode=%s: want 'peer' or 'none'; using peer", m);
    return UCP_ERR_HANDLING_MODE_PEER;
}

void dc_ucx_fail(dc_ucx_conn_t *c, dc_status_t st, const char *fmt, ...)
{
    if (c->state == DC_UCX_FAILED)
        return;
    va_list ap;
    va_start(ap, fmt);
    char msg[200];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(c->errmsg, sizeof(c->errmsg), "ucx %s: %s", c->peer, msg);
    c->err = st;
    /* failed by us (a protocol or resource error) with the endpoint still
     * up: closing says BYE, so the peer stops instead of re-dialing */
    c->fail_live = c->state == DC_UCX_ESTABLISHED && c->ep != NULL;
    c->state = DC_UCX_FAILED;
    DC_LOG_DEBUG("%s", c->errmsg);
}

/* The endpoint broke: an established connection is recovered (re-dial or
 * re-attach, then resume); anything else fails. */
/* A client's first dial that found no listener (the peer's process has not
 * bound it yet: nodes of a job start in any order) is dialed again, same
 * session and epoch, until the connect deadline, as tcp re-dials a refused
 * connect; only then does the connection fail.  Whether `c` was taken so. */
static int dc_ucx_first_dial_refused(dc_ucx_conn_t *c, const char *what, ucs_status_t status)
{
    if (!c->is_client || c->reconnecting || c->state != DC_UCX_C_WAIT_CHALLENGE ||
        (status != UCS_ERR_NOT_CONNECTED && status != UCS_ERR_CONNECTION_RESET &&
         status != UCS_ERR_UNREACHABLE) ||
        dc_now_s() >= c->deadline)
        return 0;
    DC_LOG_DEBUG("ucx %s: %s (%s) before the handshake: no listener yet? dialing again",
                 c->peer, what, ucs_status_string(status));
    c->first_redial = 1;
    c->state = DC_UCX_BROKEN;
    c->next_dial = dc_now_s() + 0.1;
    return 1;
}

void dc_ucx_break(dc_ucx_conn_t *c, const char *what, ucs_status_t status)
{
    if (c->state == DC_UCX_ESTABLISHED) {
        DC_LOG_INFO("ucx %s: %s%s%s%s: recovering", c->peer, what, status ? " (" : "",
                    status ? ucs_status_string(status) : "", status ? ")" : "");
        c->state = DC_UCX_BROKEN;
        c->deadline = dc_now_s() + c->timeout_ms / 1000.0; /* to recover */
        c->next_dial = 0;
        return;
    }
    if (c->state == DC_UCX_BROKEN)
        return;
    if ((c->reconnecting || c->first_redial) && c->state != DC_UCX_FAILED) {
        c->state = DC_UCX_BROKEN; /* the re-dial failed: try again until the deadline */
        c->next_dial = dc_now_s() + 0.1;
        return;
    }
    if (dc_ucx_first_dial_refused(c, what, status))
        return;
    dc_ucx_fail(c, DC_ERR_RESET, "%s: %s", what, ucs_status_string(status));
}

dc_status_t dc_ucx_conn_error(const dc_ucx_conn_t *c)
{
    return dc_error(c->err, "%s", c->errmsg);
}

/* --- addresses ------------------------------------------------------------- */

/* An address a connection can come up over: DC_OK, or DC_ERR_UNSUPPORTED
 * for IPv6 loopback ([::1]): UCX (1.13 here) has no IPv6 tcp device on the
 * loopback interface (ucx.c, above dc_ucx_ctx_for), so its lanes cannot
 * reach [::1]; before this check the listener aborted in free(). */
static dc_status_t dc_ucx_check_addr(const struct sockaddr *a, const char *addr)
{
    if (a->sa_family != AF_INET6 ||
        !IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)a)->sin6_addr))
        return DC_OK;
    return dc_error(DC_ERR_UNSUPPORTED,
                    "ucx: %s: IPv6 loopback is not supported: UCX %s has no IPv6 tcp device "
                    "on the loopback interface, so a connection over [::1] cannot come up; "
                    "use 127.0.0.1, or the IPv6 address of a network interface",
                    addr, ucp_get_version_string());
}

/* --- handshake ------------------------------------------------------------- */

static void dc_ucx_auth_queue(dc_ucx_conn_t *c, uint8_t type, const uint8_t *a, const uint8_t *b)
{
    uint8_t *m = c->auth_out;
    dc_store_le32(m, DC_UCX_AUTH_MAGIC);
    m[4] = type;
    size_t n = 5;
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

static void dc_ucx_queue_hello(dc_ucx_conn_t *c)
{
    dc_ucx_auth_queue(c, DC_UCX_AUTH_HELLO, c->nc, NULL);
    dc_store_le64(c->auth_out + 37, c->sess.id);
    dc_store_le32(c->auth_out + 45, c->sess.epoch);
    c->auth_out_len = DC_UCX_HELLO_LEN;
}

static ucs_status_t dc_ucx_am_auth_cb(void *arg, const void *header, size_t header_length,
                                      void *data, size_t length,
                                      const ucp_am_recv_param_t *param)
{
    dc_ucx_conn_t *c = arg;
    const uint8_t *m = data;
    if (c->state == DC_UCX_FAILED || c->state == DC_UCX_BROKEN)
        return UCS_OK;
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) || length < 5 ||
        length > DC_UCX_AUTH_MAX || dc_load_le32(m) != DC_UCX_AUTH_MAGIC) {
        dc_ucx_fail(c, DC_ERR_AUTH, "malformed handshake message (%zu bytes)", length);
        return UCS_OK;
    }
    uint8_t type = m[4];
    uint8_t mac[DC_AUTH_MAC_SIZE];
    DC_LOG_DEBUG("ucx %s: handshake message %u in state %d", c->peer, type, (int)c->state);
    switch (c->state) {
    case DC_UCX_S_WAIT_HELLO:
        if (type != DC_UCX_AUTH_HELLO || length != DC_UCX_HELLO_LEN)
            break;
        memcpy(c->nc, m + 5, 32);
        c->sess.id = dc_load_le64(m + 37);
        c->sess.epoch = dc_load_le32(m + 45);
        if (dc_auth_nonce(c->ns) != DC_OK ||
            dc_auth_mac(c->secret, c->secret_len, 'S', c->nc, c->ns, mac) != DC_OK) {
            dc_ucx_fail(c, dc_last_status(), "%s", dc_last_error());
            return UCS_OK;
        }
        dc_ucx_auth_queue(c, DC_UCX_AUTH_CHALLENGE, c->ns, mac);
        c->state = DC_UCX_S_WAIT_PROOF;
        return UCS_OK;
    case DC_UCX_S_WAIT_PROOF:
        if (type != DC_UCX_AUTH_PROOF || length != 5 + 32)
            break;
        if (dc_auth_verify(c->secret, c->secret_len, 'C', c->nc, c->ns, m + 5, c->peer) !=
            DC_OK) {
            dc_ucx_auth_queue(c, DC_UCX_AUTH_FAIL, NULL, NULL);
            dc_ucx_fail(c, DC_ERR_AUTH, "client failed authentication (wrong job secret?)");
            return UCS_OK;
        }
        dc_ucx_auth_queue(c, DC_UCX_AUTH_OK, NULL, NULL);
        c->state = DC_UCX_ESTABLISHED;
        return UCS_OK;
    case DC_UCX_C_WAIT_CHALLENGE:
        if (type == DC_UCX_AUTH_FAIL) {
            dc_ucx_fail(c, DC_ERR_AUTH, "server rejected the handshake");
            return UCS_OK;
        }
        if (type != DC_UCX_AUTH_CHALLENGE || length != 5 + 64)
            break;
        memcpy(c->ns, m + 5, 32);
        if (dc_auth_verify(c->secret, c->secret_len, 'S', c->nc, c->ns, m + 37, c->peer) !=
            DC_OK) {
            dc_ucx_fail(c, DC_ERR_AUTH, "server failed authentication (wrong job secret?)");
            return UCS_OK;
        }
        if (dc_auth_mac(c->secret, c->secret_len, 'C', c->nc, c->ns, mac) != DC_OK) {
            dc_ucx_fail(c, dc_last_status(), "%s", dc_last_error());
            return UCS_OK;
        }
        dc_ucx_auth_queue(c, DC_UCX_AUTH_PROOF, mac, NULL);
        c->state = DC_UCX_C_WAIT_OK;
        return UCS_OK;
    case DC_UCX_C_WAIT_OK:
        if (type == DC_UCX_AUTH_FAIL) {
            dc_ucx_fail(c, DC_ERR_AUTH, "server rejected our proof (wrong job secret?)");
            return UCS_OK;
        }
        if (type != DC_UCX_AUTH_OK || length != 5)
            break;
        c->state = DC_UCX_ESTABLISHED;
        c->first_redial = 0;
        if (c->reconnecting) {
            c->reconnecting = 0;
            c->resend_pending = 1;
            c->stats.reconnects++;
        }
        return UCS_OK;
    default:
        break;
    }
    dc_ucx_fail(c, DC_ERR_AUTH, "unexpected handshake message type %u (%zu bytes)", type, length);
    return UCS_OK;
}

/* --- connection lifecycle ---------------------------------------------------- */

static void dc_ucx_ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    dc_ucx_epref_t *ref = arg;
    dc_ucx_conn_t *c = ref->c;
    if (!c || c->ep != ep)
        return; /* an endpoint already replaced */
    int timeout = status == UCS_ERR_ENDPOINT_TIMEOUT || status == UCS_ERR_UNREACHABLE;
    if (c->state == DC_UCX_ESTABLISHED || c->state == DC_UCX_BROKEN || c->reconnecting)
        dc_ucx_break(c, "connection lost", status);
    else if (timeout)
        /* the sockaddr handshake went through, the data lanes did not */
        dc_ucx_fail(c, DC_ERR_RESET, "connection failed during setup: %s: UCX reached the "
                                     "peer's address but not over the network interfaces it "
                                     "chose (%s: set UCX_NET_DEVICES to the interface of the "
                                     "address in use, on both sides)",
                    ucs_status_string(status),
                    getenv("UCX_NET_DEVICES") ? "UCX_NET_DEVICES is set" : "several interfaces?");
    else if (dc_ucx_first_dial_refused(c, "connection refused", status))
        ;
    else if (c->state == DC_UCX_S_WAIT_PROOF)
        dc_ucx_fail(c, DC_ERR_AUTH, "peer left during authentication: it rejected our proof "
                                    "(different job secret?) (%s)",
                    ucs_status_string(status));
    else
        dc_ucx_fail(c, DC_ERR_RESET, "connection failed during setup: %s%s",
                    ucs_status_string(status),
                    c->is_client ? " (is a ucx server listening there?)" : "");
}

static ucs_status_t dc_ucx_set_handlers(ucp_worker_h w, dc_ucx_conn_t *c)
{
    static const struct {
        unsigned id;
        ucp_am_recv_callback_t cb;
    } h[] = {{DC_UCX_AM_DATA, dc_ucx_am_data_cb},
             {DC_UCX_AM_CTRL, dc_ucx_am_ctrl_cb},
             {DC_UCX_AM_AUTH, dc_ucx_am_auth_cb}};
    for (size_t i = 0; i < DC_ARRAY_SIZE(h); i++) {
        ucp_am_handler_param_t hp;
        memset(&hp, 0, sizeof(hp));
        hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                        UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
        hp.id = h[i].id;
        hp.flags = UCP_AM_FLAG_WHOLE_MSG |
                   (h[i].id == DC_UCX_AM_DATA ? UCP_AM_FLAG_PERSISTENT_DATA : 0);
        hp.cb = h[i].cb;
        hp.arg = c;
        ucs_status_t s = ucp_worker_set_am_recv_handler(w, &hp);
        if (s != UCS_OK)
            return s;
    }
    return UCS_OK;
}

/* Piece size of our sends: config ucx_piece (DELTACAST_UCX_PIECE, a size,
 * DC_UCX_PIECE_MIN .. DC_UCX_PIECE_MAX); a bad value warns and falls back
 * to DC_UCX_PIECE_DEFAULT.  The receiver accepts any step in that range. */
static uint32_t dc_ucx_piece_size(void)
{
    uint64_t n = 0;
    if (dc_config_get_size("ucx_piece", &n) != DC_OK || n < DC_UCX_PIECE_MIN ||
        n > DC_UCX_PIECE_MAX) {
        DC_LOG_WARN("config ucx_piece=%s: want %u..%u bytes; using %u",
                    dc_config_get("ucx_piece"), DC_UCX_PIECE_MIN, DC_UCX_PIECE_MAX,
                    DC_UCX_PIECE_DEFAULT);
        return DC_UCX_PIECE_DEFAULT;
    }
    return (uint32_t)n;
}

/* Send look-ahead in pieces: config ucx_ahead (DELTACAST_UCX_AHEAD, a size;
 * 0: no limit; a bad value warns and falls back to DC_UCX_AHEAD_DEFAULT);
 * at least one piece. */
static unsigned dc_ucx_ahead(uint32_t piece)
{
    uint64_t bytes = DC_UCX_AHEAD_DEFAULT;
    if (dc_config_get_size("ucx_ahead", &bytes) != DC_OK) {
        DC_LOG_WARN("config ucx_ahead=%s: want a size; using %u", dc_config_get("ucx_ahead"),
                    DC_UCX_AHEAD_DEFAULT);
        bytes = DC_UCX_AHEAD_DEFAULT;
    }
    if (bytes == 0)
        return UINT32_MAX;
    uint64_t n = (bytes + piece - 1) / piece;
    return (unsigned)DC_MIN(DC_MAX(n, 1), (uint64_t)UINT32_MAX);
}

/* How long wait() polls the worker before it sleeps: config ucx_spin_us
 * (DELTACAST_UCX_SPIN_US; 0 turns it off; a bad value warns and uses the
 * default); none when this process may run on one CPU only (the peer, or
 * whatever would wake us, needs that CPU). */
static uint64_t dc_ucx_spin_ns(void)
{
    const char *v = dc_config_get("ucx_spin_us");
    char *end = NULL;
    errno = 0;
    unsigned long us = v ? strtoul(v, &end, 10) : 0;
    if (!v || end == v || *end || errno || us > DC_UCX_SPIN_MAX_US || v[0] == '-') {
        DC_LOG_WARN("config ucx_spin_us=%s: want 0..%u microseconds; using %u", v ? v : "",
                    DC_UCX_SPIN_MAX_US, DC_UCX_SPIN_DEFAULT_US);
        us = DC_UCX_SPIN_DEFAULT_US;
    }
    cpu_set_t cpus;
    if (us && sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && CPU_COUNT(&cpus) < 2)
        us = 0;
    return (uint64_t)us * 1000u;
}

static dc_status_t dc_ucx_conn_alloc(const dc_verbs_opts_t *o, ucp_context_h ctx,
                                     dc_ucx_conn_t **out)
{
    dc_ucx_conn_t *c = calloc(1, sizeof(*c));
    if (!c)
        return dc_error(DC_ERR_NOMEM, "ucx: out of memory for a connection");
    c->base.ops = &dc_ucx_ops;
    c->efd = -1;
    c->timeout_ms = o->timeout_ms;
    c->max_msg = o->max_msg_size;
    c->secret = malloc(o->secret_len);
    if (!c->secret) {
        free(c);
        return dc_error(DC_ERR_NOMEM, "ucx: out of memory");
    }
    memcpy(c->secret, o->secret, o->secret_len);
    c->secret_len = o->secret_len;
    c->stats.size = sizeof(c->stats);
    c->stats.streams = 1;
    dc_verbs_window_init(&c->win);
    c->piece = dc_ucx_piece_size();
    c->ahead = dc_ucx_ahead(c->piece);
    c->spin_ns = dc_ucx_spin_ns();
    snprintf(c->peer, sizeof(c->peer), "?");

    ucp_worker_params_t wp;
    memset(&wp, 0, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    c->ctx = ctx;
    ucs_status_t s = ucp_worker_create(ctx, &wp, &c->worker);
    if (s != UCS_OK) {
        free(c->secret);
        free(c);
        return dc_error(DC_ERR_UNSUPPORTED, "ucx: ucp_worker_create: %s", ucs_status_string(s));
    }
    c->epref = calloc(1, sizeof(*c->epref));
    if (!c->epref || (s = dc_ucx_set_handlers(c->worker, c)) != UCS_OK) {
        ucp_worker_destroy(c->worker);
        free(c->epref);
        free(c->secret);
        free(c);
        return dc_error(DC_ERR_UNSUPPORTED, "ucx: cannot set an active-message handler: %s",
                        ucs_status_string(s));
    }
    c->epref->c = c;
    if ((s = ucp_worker_get_efd(c->worker, &c->efd)) != UCS_OK)
        c->efd = -1; /* wait() falls back to a short sleep */
    *out = c;
    return DC_OK;
}

void dc_ucx_progress_raw(ucp_worker_h w)
{
    for (int i = 0; i < 64 && ucp_worker_progress(w) > 0; i++)
        ;
}

/*
 * Close the endpoint and drain every UCP operation that references our
 * buffers; then release held payloads and reset half-received slots (the
 * peer re-sends whatever we did not ACK).  The worker stays.
 */
static void dc_ucx_drop_ep(dc_ucx_conn_t *c, int force)
{
    double deadline = dc_now_s() + 2.0;
    if (c->ep) {
        ucp_request_param_t p;
        memset(&p, 0, sizeof(p));
        p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
        ucs_status_ptr_t r = ucp_ep_close_nbx(c->ep, &p);
        if (r && !UCS_PTR_IS_ERR(r)) {
            while (ucp_request_check_status(r) == UCS_INPROGRESS && dc_now_s() < deadline)
                ucp_worker_progress(c->worker);
            ucp_request_free(r);
        }
        c->ep = NULL;
    }
    while (c->outstanding > 0 && dc_now_s() < deadline)
        ucp_worker_progress(c->worker);
    if (c->outstanding > 0)
        DC_LOG_WARN("ucx %s: %u operations still pending after closing the endpoint", c->peer,
                    c->outstanding);
    c->pieces_out = 0;
    if (c->epref) {
        c->epref->c = NULL;
        free(c->epref);
        c->epref = NULL;
    }
    /* Half-received messages are forgotten: they arrive again whole. */
    for (size_t i = 0; i < DC_UCX_RING; i++) {
        dc_ucx_slot_t *s = &c->slot[i];
        if (s->state == DC_UCX_SLOT_ACTIVE)
            dc_ucx_slot_reset(c, s, 1);
        else
            dc_ucx_slot_release_held(c, s);
    }
    c->nctrl = 0;
    c->auth_out_len = 0;
    c->deliver_pending = 0;
    c->transports[0] = 0;
}

static void dc_ucx_listener_unref(dc_ucx_listener_t *l);

void dc_ucx_conn_destroy(dc_ucx_conn_t *c)
{
    if (!c)
        return;
    if (c->lst) {
        dc_ucx_listener_t *l = c->lst;
        dc_session_remove(&l->reg, &c->sess);
        c->lst = NULL;
        dc_ucx_listener_unref(l);
    }
    if (c->worker) {
        /* Say good-bye on a live endpoint, also one we failed ourselves
         * (fail_live): the peer must not mistake the close for a broken
         * link and re-dial.  (A re-dial racing with the listener's
         * destruction crashed UCX 1.13.1's async thread in
         * ucp_cm_server_conn_request_cb, 1 in 75 runs of
         * ucx::eager_flood_ahead_of_receives_is_bounded under load.) */
        int live = dc_ucx_bye_ok(c);
        if (live) {
            /* flush queued ACKs first */
            for (unsigned i = 0; i < c->nctrl; i++)
                dc_ucx_ctrl_send(c, DC_UCX_AM_CTRL, c->ctrlq[i].type, c->ctrlq[i].seq, NULL, 0);
            c->nctrl = 0;
            dc_ucx_ctrl_send(c, DC_UCX_AM_CTRL, DC_VERBS_MSG_BYE, 0, NULL, 0);
        }
        dc_ucx_drop_ep(c, !live);
        ucp_worker_destroy(c->worker);
    }
    free(c->epref);
    while (c->reqs) {
        dc_ucx_req_t *r = c->reqs;
        c->reqs = r->next;
        free(r->phdr);
        free(r);
    }
    while (c->req_free) {
        dc_ucx_req_t *r = c->req_free;
        c->req_free = r->next;
        free(r->phdr);
        free(r);
    }
    while (c->piece_all) {
        dc_ucx_piece_t *p = c->piece_all;
        c->piece_all = p->next_all;
        free(p);
    }
    for (size_t i = 0; i < DC_UCX_RING; i++) {
        free(c->slot[i].seen);
        free(c->slot[i].pcrc);
    }
    while (c->ctrl_all) {
        dc_ucx_ctrl_t *k = c->ctrl_all;
        c->ctrl_all = k->next_all;
        free(k);
    }
    if (c->secret) {
        memset(c->secret, 0, c->secret_len);
        free(c->secret);
    }
    free(c);
}

/* Progress UCP and then do what callbacks deferred (auth replies, ACKs,
 * deliveries into freshly posted buffers). */
static void dc_ucx_redial(dc_ucx_conn_t *c);

void dc_ucx_conn_progress(dc_ucx_conn_t *c)
{
    if (c->state == DC_UCX_BROKEN) {
        if (c->ep)
            dc_ucx_drop_ep(c, 1);
        if (dc_now_s() > c->deadline)
            dc_ucx_fail(c, DC_ERR_RESET,
                        c->first_redial
                            ? "no ucx listener answered within %u ms (is the peer running, "
                              "with transport ucx?)"
                        : c->is_client ? "connection lost and not re-established within %u ms"
                                     : "connection lost and the peer did not re-attach within "
                                       "%u ms",
                        c->timeout_ms);
        else if (c->is_client && dc_now_s() >= c->next_dial)
            dc_ucx_redial(c);
    }
    dc_ucx_progress_raw(c->worker);
    if (c->state == DC_UCX_ESTABLISHED && c->resend_pending) {
        /* Resume: every un-ACKed message again, in seq order. */
        c->resend_pending = 0;
        while (c->sq)
            dc_ucx_sq_unlink(c, c->sq);
        for (uint64_t q = c->win.base; q < c->win.next && c->state == DC_UCX_ESTABLISHED; q++) {
            dc_ucx_req_t *r = dc_verbs_window_get(&c->win, q);
            if (r && r->state == DC_UCX_R_PENDING) {
                c->stats.resends++;
                dc_ucx_post_send(c, r);
            }
        }
    }
    dc_ucx_pump(c);
    if (c->auth_out_len) {
        size_t n = c->auth_out_len;
        c->auth_out_len = 0;
        dc_ucx_ctrl_send(c, DC_UCX_AM_AUTH, 0, 0, c->auth_out, n);
    }
    if (c->state == DC_UCX_ESTABLISHED && !c->transports[0])
        dc_ucx_capture_transports(c);
    if (c->deliver_pending && c->state == DC_UCX_ESTABLISHED)
        dc_ucx_deliver_all(c);
    for (unsigned i = 0; i < c->nctrl && c->state != DC_UCX_FAILED; i++)
        dc_ucx_ctrl_send(c, DC_UCX_AM_CTRL, c->ctrlq[i].type, c->ctrlq[i].seq, NULL, 0);
    c->nctrl = 0;
    if (c->state != DC_UCX_ESTABLISHED && c->state != DC_UCX_FAILED &&
        c->state != DC_UCX_BROKEN && dc_now_s() > c->deadline)
        dc_ucx_fail(c, DC_ERR_TIMEOUT, "handshake not completed within %u ms%s",
                    c->hs_timeout_ms ? c->hs_timeout_ms : c->timeout_ms,
                    c->hs_timeout_ms ? " (handshake_timeout_ms)" : "");
}

/* --- listener ---------------------------------------------------------------- */

static void dc_ucx_conn_req_cb(ucp_conn_request_h req, void *arg)
{
    dc_ucx_listener_t *l = arg;
    if (l->ncreq == DC_ARRAY_SIZE(l->creq)) {
        ucp_listener_reject(l->listener, req);
        DC_LOG_WARN("ucx listener %s: too many pending connection requests, rejected one",
                    l->addr);
        return;
    }
    l->creq[l->ncreq++] = req;
}

dc_status_t dc_ucx_listen(const dc_verbs_opts_t *opts, const char *bind_addr,
                          dc_verbs_listener_t **out)
{
    dc_status_t st = dc_ucx_init();
    if (st != DC_OK)
        return st;
    uint8_t secret[DC_AUTH_MAX_SECRET];
    dc_verbs_opts_t o;
    if ((st = dc_verbs_opts_resolve(opts, &o, secret, sizeof(secret))) != DC_OK)
        return st;
    struct sockaddr_storage ss;
    socklen_t sslen;
    dc_ucx_listener_t *l = NULL;
    if ((st = dc_net_resolve("ucx", bind_addr, true, &ss, &sslen)) != DC_OK ||
        (st = dc_ucx_check_addr((const struct sockaddr *)&ss, bind_addr)) != DC_OK)
        goto fail_free;
    if (!(l = calloc(1, sizeof(*l)))) {
        st = dc_error(DC_ERR_NOMEM, "ucx: out of memory");
        goto fail_free;
    }
    l->base.ops = &dc_ucx_ops;
    l->refs = 1;
    l->efd = -1;
    l->epfd = -1;
    l->secret = malloc(o.secret_len);
    if (!l->secret) {
        st = dc_error(DC_ERR_NOMEM, "ucx: out of memory");
        goto fail_free;
    }
    memcpy(l->secret, o.secret, o.secret_len);
    l->secret_len = o.secret_len;
    l->opts = o;
    l->opts.secret = NULL;
    ucp_worker_params_t wp;
    memset(&wp, 0, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    l->ctx = dc_ucx_ctx_for((const struct sockaddr *)&ss, sslen, 1);
    ucs_status_t s = ucp_worker_create(l->ctx, &wp, &l->worker);
    if (s != UCS_OK) {
        st = dc_error(DC_ERR_UNSUPPORTED, "ucx: ucp_worker_create: %s", ucs_status_string(s));
        goto fail_free;
    }
    ucp_listener_params_t lp;
    memset(&lp, 0, sizeof(lp));
    lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr = (const struct sockaddr *)&ss;
    lp.sockaddr.addrlen = sslen;
    lp.conn_handler.cb = dc_ucx_conn_req_cb;
    lp.conn_handler.arg = l;
    if ((s = ucp_listener_create(l->worker, &lp, &l->listener)) != UCS_OK) {
        st = dc_error(s == UCS_ERR_BUSY ? DC_ERR_IO : DC_ERR_UNSUPPORTED,
                      "ucx: cannot listen on %s: %s%s", bind_addr, ucs_status_string(s),
                      s == UCS_ERR_BUSY ? " (address in use)" : "");
        goto fail_worker;
    }
    ucp_listener_attr_t la;
    memset(&la, 0, sizeof(la));
    la.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    if (ucp_listener_query(l->listener, &la) == UCS_OK)
        dc_net_sockaddr_str((const struct sockaddr *)&la.sockaddr, l->addr, sizeof(l->addr));
    else
        snprintf(l->addr, sizeof(l->addr), "%s", bind_addr);
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (l->epfd < 0) {
        st = dc_error_errno(DC_ERR_IO, errno, "ucx: epoll_create1");
        goto fail_listener;
    }
    if (ucp_worker_get_efd(l->worker, &l->efd) == UCS_OK) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
        epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->efd, &ev);
    }
    memset(secret, 0, sizeof(secret));
    DC_LOG_INFO("ucx: listening on %s", l->addr);
    *out = &l->base;
    return DC_OK;

fail_listener:
    ucp_listener_destroy(l->listener);
fail_worker:
    ucp_worker_destroy(l->worker);
fail_free:
    if (l && l->secret) {
        memset(l->secret, 0, l->secret_len);
        free(l->secret);
    }
    free(l);
    memset(secret, 0, sizeof(secret));
    return st;
}

dc_status_t dc_ucx_listen_addr(dc_verbs_listener_t *lb, char *buf, size_t len)
{
    dc_ucx_listener_t *l = (dc_ucx_listener_t *)lb;
    if ((size_t)snprintf(buf, len, "%s", l->addr) >= len)
        return dc_error(DC_ERR_INVALID, "ucx: buffer too small for the listener address");
    return DC_OK;
}

int dc_ucx_listen_fd(dc_verbs_listener_t *lb)
{
    return ((dc_ucx_listener_t *)lb)->epfd;
}

/* A listener full of unauthenticated handshakes (DC_UCX_MAX_HS, or
 * DC_UCX_MAX_HS_SRC from the address of `peer`) drops its oldest one that
 * has not sent a HELLO yet (else its oldest) for the new request, instead of
 * turning the new one away: idle peers cannot lock real ones out. */
static void dc_ucx_hs_make_room(dc_ucx_listener_t *l, const char *peer)
{
    unsigned n = 0, same = 0;
    for (dc_ucx_conn_t *c = l->handshaking; c; c = c->next) {
        n++;
        same += dc_net_same_host_str(c->peer, peer);
    }
    bool src_full = same >= DC_UCX_MAX_HS_SRC;
    if (!src_full && n < DC_UCX_MAX_HS)
        return;
    dc_ucx_conn_t **victim = NULL;
    for (int pass = 0; pass < 2 && !victim; pass++)
        for (dc_ucx_conn_t **pp = &l->handshaking; *pp; pp = &(*pp)->next) {
            dc_ucx_conn_t *c = *pp;
            if ((src_full && !dc_net_same_host_str(c->peer, peer)) ||
                (pass == 0 && c->state != DC_UCX_S_WAIT_HELLO))
                continue;
            if (!victim || c->hs_started < (*victim)->hs_started)
                victim = pp;
        }
    if (!victim)
        return;
    dc_ucx_conn_t *v = *victim;
    *victim = v->next;
    v->next = NULL;
    if (v->efd >= 0)
        epoll_ctl(l->epfd, EPOLL_CTL_DEL, v->efd, NULL);
    DC_LOG_DEBUG("ucx listener %s: evicted the handshake of %s for %s", l->addr, v->peer, peer);
    dc_ucx_conn_destroy(v);
    l->hs_evicted++;
    double now = dc_now_s();
    if (now >= l->hs_report_at) {
        DC_LOG_WARN("ucx listener %s: %llu unauthenticated handshake(s) evicted for newer ones "
                    "(at most %d pending, %d per source address) since it opened",
                    l->addr, (unsigned long long)l->hs_evicted, DC_UCX_MAX_HS, DC_UCX_MAX_HS_SRC);
        l->hs_report_at = now + 1.0;
    }
}

static void dc_ucx_listener_take(dc_ucx_listener_t *l, ucp_conn_request_h req)
{
    dc_verbs_opts_t o = l->opts;
    o.secret = l->secret;
    o.secret_len = l->secret_len;
    char peer[128] = "?";
    ucp_conn_request_attr_t ra;
    memset(&ra, 0, sizeof(ra));
    ra.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
    if (ucp_conn_request_query(req, &ra) == UCS_OK)
        dc_net_sockaddr_str((const struct sockaddr *)&ra.client_address, peer, sizeof(peer));
    dc_ucx_hs_make_room(l, peer);
    dc_ucx_conn_t *c;
    if (dc_ucx_conn_alloc(&o, l->ctx, &c) != DC_OK) {
        DC_LOG_WARN("ucx listener %s: dropped %s: %s", l->addr, peer, dc_last_error());
        ucp_listener_reject(l->listener, req);
        return;
    }
    snprintf(c->peer, sizeof(c->peer), "%s", peer);
    ucp_ep_params_t ep;
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.conn_request = req;
    ep.err_mode = dc_ucx_err_mode();
    ep.err_handler.cb = dc_ucx_ep_err_cb;
    ep.err_handler.arg = c->epref;
    ucs_status_t s = ucp_ep_create(c->worker, &ep, &c->ep);
    if (s != UCS_OK) {
        DC_LOG_WARN("ucx listener %s: dropped %s: ucp_ep_create: %s", l->addr, peer,
                    ucs_status_string(s));
        c->ep = NULL;
        dc_ucx_conn_destroy(c);
        return;
    }
    c->state = DC_UCX_S_WAIT_HELLO;
    /* unauthenticated: the handshake's own deadline */
    c->hs_timeout_ms = l->opts.hs_timeout_ms;
    c->hs_started = dc_now_s();
    c->deadline = c->hs_started + c->hs_timeout_ms / 1000.0;
    if (c->efd >= 0) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        epoll_ctl(l->epfd, EPOLL_CTL_ADD, c->efd, &ev);
    }
    c->next = l->handshaking;
    l->handshaking = c;
    DC_LOG_DEBUG("ucx listener %s: connection request from %s", l->addr, peer);
}

/*
 * A re-dial `t` of the session of the accepted connection `e` passed the
 * handshake: `e` takes over t's worker and endpoint (its old ones are
 * dropped), resumes, and re-sends what the peer has not ACKed.  `t` is
 * freed.  The connection's fd() changes (the new worker's).
 */
static void dc_ucx_adopt(dc_ucx_listener_t *l, dc_ucx_conn_t *e, dc_ucx_conn_t *t)
{
    dc_ucx_drop_ep(e, 1);
    ucp_worker_destroy(e->worker);
    e->worker = t->worker;
    e->efd = t->efd;
    e->ep = t->ep;
    e->epref = t->epref;
    e->epref->c = e;
    t->worker = NULL;
    t->ep = NULL;
    t->epref = NULL;
    if (dc_ucx_set_handlers(e->worker, e) != UCS_OK) {
        dc_ucx_fail(e, DC_ERR_INTERNAL, "cannot move the active-message handlers");
        return;
    }
    e->sess.epoch = t->sess.epoch;
    e->state = DC_UCX_ESTABLISHED;
    e->resend_pending = 1;
    e->stats.reconnects++;
    snprintf(e->peer, sizeof(e->peer), "%s", t->peer);
    /* t's handshake replies may still be in flight on the adopted worker. */
    double deadline = dc_now_s() + 2.0;
    while (t->outstanding > 0 && dc_now_s() < deadline)
        ucp_worker_progress(e->worker);
    if (t->outstanding > 0)
        DC_LOG_WARN("ucx %s: handshake replies still pending after the re-attach", e->peer);
    else
        dc_ucx_conn_destroy(t); /* no worker: frees the shell and its control slots */
    DC_LOG_INFO("ucx listener %s: %s re-attached session %016llx (epoch %u)", l->addr, e->peer,
                (unsigned long long)e->sess.id, e->sess.epoch);
}

/*
 * The verdict on the authenticated dial `c` (session.h): NEW (a first dial,
 * epoch 1, of an id not in use), RESUME (a re-dial of an accepted session:
 * dc_ucx_adopt), or a refusal: UNKNOWN (a re-dial of a session this
 * listener does not hold, or that failed), STALE, DUP.  Like tcp and rdma,
 * a re-dial is never taken for a new connection: the client's re-dial then
 * fails and it gives up, instead of carrying on with a fresh peer that has
 * none of its un-ACKed messages' context.
 */
static dc_session_verdict_t dc_ucx_session_verdict(dc_ucx_listener_t *l, const dc_ucx_conn_t *c)
{
    dc_session_t *s = dc_session_find(l->reg, c->sess.id, NULL);
    const dc_ucx_conn_t *e = s ? DC_SESSION_OWNER(s, dc_ucx_conn_t, sess) : NULL;
    /* a failed session cannot resume, but its id stays in use */
    if (e && c->sess.epoch != 1 && e->state == DC_UCX_FAILED)
        e = NULL;
    return dc_session_judge(e ? &e->sess : NULL, c->sess.epoch, 1, false);
}

dc_status_t dc_ucx_accept(dc_verbs_listener_t *lb, dc_verbs_conn_t **out)
{
    dc_ucx_listener_t *l = (dc_ucx_listener_t *)lb;
    dc_ucx_progress_raw(l->worker);
    for (unsigned i = 0; i < l->ncreq; i++)
        dc_ucx_listener_take(l, l->creq[i]);
    l->ncreq = 0;
    for (dc_ucx_conn_t **pp = &l->handshaking; *pp;) {
        dc_ucx_conn_t *c = *pp;
        dc_ucx_conn_progress(c);
        if (c->state == DC_UCX_ESTABLISHED || c->state == DC_UCX_FAILED) {
            *pp = c->next;
            c->next = NULL;
            if (c->efd >= 0)
                epoll_ctl(l->epfd, EPOLL_CTL_DEL, c->efd, NULL);
            if (c->state == DC_UCX_FAILED) {
                DC_LOG_WARN("ucx listener %s: dropped peer: %s", l->addr, c->errmsg);
                dc_ucx_progress_raw(c->worker); /* flush a FAIL reply */
                dc_ucx_conn_destroy(c);
                continue;
            }
            dc_session_verdict_t v = dc_ucx_session_verdict(l, c);
            if (v == DC_SESSION_RESUME) {
                dc_session_t *s = dc_session_find(l->reg, c->sess.id, NULL);
                dc_ucx_adopt(l, DC_SESSION_OWNER(s, dc_ucx_conn_t, sess), c);
                continue;
            }
            if (v != DC_SESSION_NEW) {
                DC_LOG_WARN("ucx listener %s: dropped %s (session %016llx, epoch %u): %s",
                            l->addr, c->peer, (unsigned long long)c->sess.id, c->sess.epoch,
                            dc_session_verdict_str(v));
                dc_ucx_conn_destroy(c);
                continue;
            }
            c->lst = l;
            l->refs++;
            dc_session_add(&l->reg, &c->sess);
            DC_LOG_INFO("ucx: accepted %s over %s", c->peer, c->transports);
            *out = &c->base;
            return DC_OK;
        }
        pp = &c->next;
    }
    /* Arm the workers so that listen_fd() wakes a poll() on the next event. */
    if (ucp_worker_arm(l->worker) == UCS_ERR_BUSY)
        return DC_ERR_AGAIN;
    for (dc_ucx_conn_t *c = l->handshaking; c; c = c->next)
        ucp_worker_arm(c->worker);
    return DC_ERR_AGAIN;
}

void dc_ucx_listen_close(dc_verbs_listener_t *lb)
{
    dc_ucx_listener_t *l = (dc_ucx_listener_t *)lb;
    if (l)
        dc_ucx_listener_unref(l);
}

/* Freed when the caller closed it and no accepted connection remains. */
static void dc_ucx_listener_unref(dc_ucx_listener_t *l)
{
    if (--l->refs > 0)
        return;
    for (unsigned i = 0; i < l->ncreq; i++)
        ucp_listener_reject(l->listener, l->creq[i]);
    while (l->handshaking) {
        dc_ucx_conn_t *c = l->handshaking;
        l->handshaking = c->next;
        dc_ucx_conn_destroy(c);
    }
    ucp_listener_destroy(l->listener);
    ucp_worker_destroy(l->worker);
    if (l->epfd >= 0)
        close(l->epfd);
    if (l->secret) {
        memset(l->secret, 0, l->secret_len);
        free(l->secret);
    }
    free(l);
}

/* --- connect --------------------------------------------------------------- */

/* Create the client endpoint towards c->raddr (a fresh error-handler ref). */
static ucs_status_t dc_ucx_dial(dc_ucx_conn_t *c)
{
    if (!c->epref) {
        if (!(c->epref = calloc(1, sizeof(*c->epref))))
            return UCS_ERR_NO_MEMORY;
        c->epref->c = c;
    }
    ucp_ep_params_t ep;
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep.sockaddr.addr = (const struct sockaddr *)&c->raddr;
    ep.sockaddr.addrlen = c->raddr_len;
    ep.err_mode = dc_ucx_err_mode();
    ep.err_handler.cb = dc_ucx_ep_err_cb;
    ep.err_handler.arg = c->epref;
    ucs_status_t s = ucp_ep_create(c->worker, &ep, &c->ep);
    if (s != UCS_OK)
        c->ep = NULL;
    return s;
}

/* Re-dial a broken client connection: same session, next epoch; the
 * handshake runs again, then the un-ACKed window is re-sent. */
static void dc_ucx_redial(dc_ucx_conn_t *c)
{
    c->next_dial = dc_now_s() + 0.2;
    if (dc_auth_nonce(c->nc) != DC_OK) {
        dc_ucx_fail(c, dc_last_status(), "%s", dc_last_error());
        return;
    }
    if (dc_ucx_dial(c) != UCS_OK)
        return; /* try again at next_dial */
    if (c->first_redial) { /* the server never saw the session: a first dial again */
        c->state = DC_UCX_C_WAIT_CHALLENGE;
        dc_ucx_queue_hello(c);
        DC_LOG_DEBUG("ucx %s: dialing again (session %016llx)", c->peer,
                     (unsigned long long)c->sess.id);
        return;
    }
    c->sess.epoch++;
    c->reconnecting = 1;
    c->state = DC_UCX_C_WAIT_CHALLENGE;
    dc_ucx_queue_hello(c);
    DC_LOG_INFO("ucx %s: re-dialing (session %016llx, epoch %u)", c->peer,
                (unsigned long long)c->sess.id, c->sess.epoch);
}

dc_status_t dc_ucx_connect(const dc_verbs_opts_t *opts, const char *addr,
                           dc_verbs_conn_t **out)
{
    dc_status_t st = dc_ucx_init();
    if (st != DC_OK)
        return st;
    uint8_t secret[DC_AUTH_MAX_SECRET];
    dc_verbs_opts_t o;
    if ((st = dc_verbs_opts_resolve(opts, &o, secret, sizeof(secret))) != DC_OK)
        return st;
    struct sockaddr_storage ss;
    socklen_t sslen;
    if ((st = dc_net_resolve("ucx", addr, false, &ss, &sslen)) != DC_OK ||
        (st = dc_ucx_check_addr((const struct sockaddr *)&ss, addr)) != DC_OK)
        goto out_secret;
    dc_ucx_conn_t *c;
    if ((st = dc_ucx_conn_alloc(&o, dc_ucx_ctx_for((const struct sockaddr *)&ss, sslen, 0),
                                &c)) != DC_OK)
        goto out_secret;
    c->is_client = 1;
    snprintf(c->peer, sizeof(c->peer), "%s", addr);
    memcpy(&c->raddr, &ss, sslen);
    c->raddr_len = sslen;
    if ((st = dc_session_start(&c->sess, 1)) != DC_OK ||
        (st = dc_auth_nonce(c->nc)) != DC_OK) {
        dc_ucx_conn_destroy(c);
        goto out_secret;
    }
    ucs_status_t s = dc_ucx_dial(c);
    if (s != UCS_OK) {
        st = dc_error(DC_ERR_RESET, "ucx: cannot connect to %s: %s", addr, ucs_status_string(s));
        dc_ucx_conn_destroy(c);
        goto out_secret;
    }
    c->state = DC_UCX_C_WAIT_CHALLENGE;
    c->deadline = dc_now_s() + c->timeout_ms / 1000.0;
    dc_ucx_queue_hello(c);
    *out = &c->base;
    st = DC_OK;
out_secret:
    memset(secret, 0, sizeof(secret));
    return st;
}

dc_status_t dc_ucx_connect_test(dc_verbs_conn_t *cb)
{
    dc_ucx_conn_t *c = (dc_ucx_conn_t *)cb;
    dc_ucx_conn_progress(c);
    if (c->state == DC_UCX_ESTABLISHED) {
        DC_LOG_INFO("ucx: connected to %s over %s", c->peer, c->transports);
        return DC_OK;
    }
    if (c->state == DC_UCX_FAILED)
        return dc_ucx_conn_error(c);
    return DC_ERR_AGAIN;
}
