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
 */
#include "verbs/transport.h"

#include "kernels/kern.h"
#include "verbs/auth.h"
#include "verbs/fault.h"
#include "verbs/net.h"
#include "verbs/session.h"

#include <errno.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define DC_TCP_MAGIC 0x48544344u /* "DCTH" */
#define DC_TCP_VERSION 1u
#define DC_TCP_HELLO 40
#define DC_TCP_CHAL 72
#define DC_TCP_PROOF 64
#define DC_TCP_OK 24
#define DC_TCP_MAX_STREAMS 64
#define DC_TCP_RBUF (256u << 10)
#define DC_TCP_OBUF 4096
#define DC_TCP_CTRL_CAP 4096
#define DC_TCP_DIRECT_MIN (64u << 10) /* read payload straight into the user buffer */
#define DC_TCP_RCHUNK (1u << 20)      /* bytes per recv() straight into it */
#define DC_TCP_SPIECE (1u << 20)      /* payload bytes CRC'd, then sent, per step (L2-sized) */
#define DC_TCP_BUDGET (8u << 20)      /* bytes per stream per progress call */
#define DC_TCP_MAX_HS 256             /* pending handshakes per listener */
#define DC_TCP_ZC_MIN (64u << 10)     /* MSG_ZEROCOPY only for messages this large */
#define DC_TCP_ZC_RING 1024           /* un-released zero-copy sends per stream */
#define DC_TCP_STASH_MAX (64u << 20)  /* early messages held per connection (see stash) */
#define W DC_VERBS_MAX_INFLIGHT

enum { DC_TCP_OK_ACCEPT = 0, DC_TCP_OK_AUTH = 1, DC_TCP_OK_UNKNOWN = 2, DC_TCP_OK_STALE = 3,
       DC_TCP_OK_BAD = 4 };

extern const dc_verbs_ops_t dc_tcp_ops;


/* --- objects --------------------------------------------------------------- */

typedef struct dc_tcp_conn dc_tcp_conn_t;
typedef struct dc_tcp_listener dc_tcp_listener_t;

typedef struct dc_tcp_req {
    dc_verbs_req_t base;
    dc_tcp_conn_t *c;
    bool in_use, is_send;
    /* send */
    const uint8_t *sbuf;
    bool acked, on_wire, queued;
    /* recv */
    uint8_t *rbuf;
    size_t cap;
    bool done;
    uint32_t zc_pending; /* MSG_ZEROCOPY sends the kernel still holds pages of */
    /* both */
    size_t len;
    uint32_t crc; /* send: the caller's CRC32C of the message (crc_known) */
    uint64_t seq;
    dc_status_t err;
    bool crc_known; /* send (isend_crc): header carries `crc`, no trailer; a
                       NACK clears it (the re-send computes its own) */
} dc_tcp_req_t;

typedef struct dc_tcp_mr {
    dc_verbs_mr_t base;
} dc_tcp_mr_t;

typedef enum {
    HS_C_CONNECT,   /* TCP connect in progress */
    HS_C_CHAL,      /* HELLO sent (or sending), waiting for CHAL */
    HS_C_OK,        /* PROOF sent, waiting for OK */
    HS_S_HELLO,     /* waiting for HELLO */
    HS_S_PROOF,     /* CHAL sent (or sending), waiting for PROOF */
    HS_DONE,
} dc_tcp_hs_state_t;

typedef struct dc_tcp_hs {
    int fd;
    dc_tcp_hs_state_t state;
    uint8_t nc[DC_AUTH_NONCE_SIZE], ns[DC_AUTH_NONCE_SIZE];
    uint8_t in[128];
    size_t in_len, in_need;
    uint8_t out[128];
    size_t out_len, out_off;
    double deadline;
    char peer[128];
    /* learned from PROOF (server side) */
    uint64_t session;
    uint32_t epoch, idx, nstreams, max_msg;
    uint64_t rbase;
} dc_tcp_hs_t;

typedef struct dc_tcp_stream {
    int fd;
    uint32_t events;
    /* send side */
    uint8_t obuf[DC_TCP_OBUF];
    size_t olen, ooff;
    dc_tcp_req_t *cur; /* data message whose payload follows obuf */
    size_t poff;
    size_t crc_upto;   /* payload bytes of cur already in scrc */
    uint32_t scrc;     /* running CRC32C of cur, sent as its trailer */
    bool trailer;      /* cur is sent with a CRC32C trailer (not crc_known) */
    bool wblocked;
    /* receive side */
    uint8_t *rbuf;
    size_t rpos, rlen;
    uint8_t rh[DC_VERBS_HDR_SIZE];
    size_t rhoff;
    bool in_payload, rblocked, discard;
    dc_verbs_hdr_t h;
    dc_tcp_req_t *rr;
    size_t doff;
    uint32_t crc;
    bool rready; /* the socket may have bytes (epoll said so, or not yet EAGAIN) */
    bool in_trailer;
    bool last_big;     /* the last DATA payload was >= DC_TCP_DIRECT_MIN */
    size_t lowat;      /* SO_RCVLOWAT in force on the socket */
    /* MSG_ZEROCOPY: the kernel numbers each zero-copy send call on a socket
     * 0, 1, 2...; zc_req[id % DC_TCP_ZC_RING] is the request whose buffer
     * send `id` pins, until the error queue reports it released */
    bool zc;           /* SO_ZEROCOPY is on for this socket */
    uint32_t zc_next;  /* id of the next zero-copy send */
    uint32_t zc_out;   /* zero-copy sends not released yet */
    dc_tcp_req_t **zc_req;
    uint8_t trl[4];
    size_t toff;
    dc_tcp_req_t xr; /* receive into a stash buffer (rr == &xr), see on_header */
    bool drop_nack;  /* discarding an early message: NACK it once read */
} dc_tcp_stream_t;

typedef enum {
    C_CONNECTING,   /* client: first handshakes; server: streams attaching */
    C_ESTABLISHED,
    C_RECONNECTING,
    C_FAILED,
} dc_tcp_cstate_t;

struct dc_tcp_conn {
    dc_verbs_conn_t base;
    bool is_server;
    dc_tcp_cstate_t state;
    dc_verbs_opts_t o;
    uint8_t secret[DC_AUTH_MAX_SECRET];
    uint32_t k;
    dc_session_t sess; /* id, epoch; sess.next: the listener's registry */
    int epfd;
    dc_tcp_stream_t st[DC_TCP_MAX_STREAMS];
    uint32_t rr_next; /* round-robin start */
    char peer[128];
    double deadline;  /* for C_CONNECTING / C_RECONNECTING */
    /* client */
    struct sockaddr_storage addr;
    socklen_t alen;
    dc_tcp_hs_t hs[DC_TCP_MAX_STREAMS];
    double retry_at;
    bool need_dial;
    char lasterr[200];
    /* server */
    dc_tcp_listener_t *l;
    bool handed_out;
    uint32_t attached;
    /* reliability: send */
    dc_verbs_window_t swin;
    dc_tcp_req_t sreq[W];
    dc_tcp_req_t *txq[2 * W];
    uint32_t txq_head, txq_n;
    /* reliability: receive */
    dc_tcp_req_t rreq[W];
    uint64_t rposted, rbase;
    uint64_t rdone_tag[W]; /* seq + 1 of the completed seq held by the slot */
    /* A re-sent (NACKed) message may be written behind later messages on
     * the same stream; when those have no irecv posted yet, the stream would
     * pause on them forever while the caller waits for the re-send.  So
     * while a re-send is due, early messages are read into heap copies
     * (stash, verified; handed to their irecv when it is posted, and ACKed
     * only then, so the sender's window never outruns rbase + W), or, over
     * DC_TCP_STASH_MAX, discarded and NACKed. */
    uint64_t rnack_tag[W];  /* seq + 1 of a seq NACKed and not yet verified */
    uint8_t *stash[W];
    uint64_t stash_tag[W];  /* seq + 1 of the verified early seq in stash[] */
    uint32_t stash_len[W];
    uint64_t stash_bytes;   /* in stash[] and in streams' xr buffers */
    /* control frames (ACK/NACK) waiting for an idle stream */
    dc_verbs_hdr_t ctrl[DC_TCP_CTRL_CAP];
    uint32_t ctrl_head, ctrl_n;
    bool peer_bye;
    bool zc_warned;
    dc_verbs_stats_t stats;
    dc_status_t err;
    char errmsg[512];
};

/* The connection whose `sess` is s (the listener's registry holds sessions). */
#define DC_TCP_CONN_OF(s) DC_SESSION_OWNER(s, dc_tcp_conn_t, sess)

struct dc_tcp_listener {
    dc_verbs_listener_t base;
    int fd;
    int refs;
    bool user_closed;
    dc_verbs_opts_t o;
    uint8_t secret[DC_AUTH_MAX_SECRET];
    char addr[128];
    dc_tcp_hs_t *hs[DC_TCP_MAX_HS];
    uint32_t nhs;
    dc_session_t *conns; /* every server connection (pending or live), by sess */
};

/* --- small helpers ------------------------------------------------------------ */

static void dc_tcp_tune(int fd, const dc_verbs_opts_t *o)
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
static dc_status_t dc_tcp_hs_flush(dc_tcp_hs_t *h)
{
    while (h->out_off < h->out_len) {
        ssize_t n = send(h->fd, h->out + h->out_off, h->out_len - h->out_off, MSG_NOSIGNAL);
        if (n > 0) {
            h->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return DC_ERR_AGAIN;
        return dc_error_errno(dc_status_from_errno(errno), errno, "tcp: handshake send to %s",
                              h->peer);
    }
    return DC_OK;
}

static dc_status_t dc_tcp_hs_fill(dc_tcp_hs_t *h)
{
    while (h->in_len < h->in_need) {
        ssize_t n = recv(h->fd, h->in + h->in_len, h->in_need - h->in_len, 0);
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
        return dc_error_errno(dc_status_from_errno(errno), errno, "tcp: handshake recv from %s",
                              h->peer);
    }
    return DC_OK;
}

static void dc_tcp_hs_expect(dc_tcp_hs_t *h, size_t n)
{
    h->in_len = 0;
    h->in_need = n;
}

/* --- connection: requests, queues ----------------------------------------------- */

static dc_status_t dc_tcp_fail(dc_tcp_conn_t *c, dc_status_t st, const char *why)
{
    if (c->state != C_FAILED) {
        c->state = C_FAILED;
        c->err = st;
        snprintf(c->errmsg, sizeof(c->errmsg), "tcp: connection %s %s: %s",
                 c->is_server ? "from" : "to", c->peer, why);
        if (c->peer_bye)
            DC_LOG_INFO("%s", c->errmsg);
        else
            DC_LOG_WARN("%s", c->errmsg);
    }
    return dc_error(c->err, "%s", c->errmsg);
}

static void dc_tcp_txq_push(dc_tcp_conn_t *c, dc_tcp_req_t *r)
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
static void dc_tcp_ack_upto(dc_tcp_conn_t *c, uint64_t upto)
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

static bool dc_tcp_ctrl_push(dc_tcp_conn_t *c, uint8_t type, uint64_t seq)
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
static void dc_tcp_zc_forget(dc_tcp_stream_t *s)
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

static void dc_tcp_stream_reset(dc_tcp_conn_t *c, dc_tcp_stream_t *s)
{
    dc_tcp_zc_forget(s);
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

static void dc_tcp_close_hs(dc_tcp_hs_t *h)
{
    if (h->fd >= 0)
        close(h->fd);
    h->fd = -1;
}

static dc_status_t dc_tcp_client_dial(dc_tcp_conn_t *c);
static dc_status_t dc_tcp_stream_recv(dc_tcp_conn_t *c, dc_tcp_stream_t *s);

/* Break the connection: close every stream, requeue un-ACKed sends, forget
 * partial receives; then reconnect (client) or wait for re-attachment. */
static void dc_tcp_break(dc_tcp_conn_t *c, const char *why)
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

/* --- the data path ------------------------------------------------------------ */

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
static dc_status_t dc_tcp_zc_reap(dc_tcp_conn_t *c, dc_tcp_stream_t *s)
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
static dc_status_t dc_tcp_stream_send(dc_tcp_conn_t *c, dc_tcp_stream_t *s, uint32_t idx)
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
        if (n_iov) {
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
    if (s->lowat == n)
        return;
    int v = (int)n;
    if (setsockopt(s->fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)) == 0)
        s->lowat = n;
}

/* Read and parse what the stream has.  DC_OK (would block / paused) or a
 * break reason. */
static dc_status_t dc_tcp_stream_recv(dc_tcp_conn_t *c, dc_tcp_stream_t *s)
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
            n = recv(s->fd, dst, want, MSG_DONTWAIT);
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
            n = recv(s->fd, s->rbuf, want, MSG_DONTWAIT);
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
        return dc_error_errno(dc_status_from_errno(errno), errno, "recv");
    }
}

static dc_status_t dc_tcp_client_progress_hs(dc_tcp_conn_t *c);
static dc_status_t dc_tcp_listener_progress(dc_tcp_listener_t *l);

/* One non-blocking pass over the connection. */
static dc_status_t dc_tcp_progress_conn(dc_tcp_conn_t *c)
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
static dc_status_t dc_tcp_attach(dc_tcp_conn_t *c, uint32_t idx, int fd)
{
    dc_tcp_stream_t *s = &c->st[idx];
    dc_tcp_stream_reset(c, s);
    s->fd = fd;
    struct epoll_event e = {.events = EPOLLIN, .data.u32 = idx};
    if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, fd, &e) != 0) {
        s->fd = -1;
        close(fd);
        return dc_error_errno(DC_ERR_IO, errno, "tcp: epoll_ctl");
    }
    s->events = EPOLLIN;
    if (c->o.zerocopy > 0 && s->zc_req) {
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

static dc_tcp_conn_t *dc_tcp_conn_new(const dc_verbs_opts_t *o, uint32_t k)
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

static void dc_tcp_listener_unref(dc_tcp_listener_t *l);

static void dc_tcp_conn_free(dc_tcp_conn_t *c)
{
    for (uint32_t i = 0; i < c->k; i++) {
        dc_tcp_stream_reset(c, &c->st[i]);
        free(c->st[i].rbuf);
        free(c->st[i].zc_req);
        dc_tcp_close_hs(&c->hs[i]);
    }
    for (uint32_t i = 0; i < W; i++)
        free(c->stash[i]);
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
    dc_store_le32(h->out, DC_TCP_MAGIC);
    dc_store_le32(h->out + 4, DC_TCP_VERSION);
    memcpy(h->out + 8, h->nc, DC_AUTH_NONCE_SIZE);
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
    }
    if (h->state == HS_C_CHAL) {
        if ((st = dc_tcp_hs_flush(h)) != DC_OK)
            return st;
        if ((st = dc_tcp_hs_fill(h)) != DC_OK)
            return st;
        if (dc_load_le32(h->in) != DC_TCP_MAGIC || dc_load_le32(h->in + 4) != DC_TCP_VERSION)
            return dc_error(DC_ERR_FORMAT, "tcp: %s is not a deltacast tcp endpoint (bad "
                                           "handshake magic/version)",
                            c->peer);
        memcpy(h->ns, h->in + 8, DC_AUTH_NONCE_SIZE);
        if ((st = dc_auth_verify(c->o.secret, c->o.secret_len, 'S', h->nc, h->ns, h->in + 40,
                                 c->peer)) != DC_OK)
            return st;
        uint8_t *o = h->out;
        if ((st = dc_auth_mac(c->o.secret, c->o.secret_len, 'C', h->nc, h->ns, o)) != DC_OK)
            return st;
        dc_store_le64(o + 32, c->sess.id);
        dc_store_le32(o + 40, c->sess.epoch);
        dc_store_le16(o + 44, (uint16_t)idx);
        dc_store_le16(o + 46, (uint16_t)c->k);
        dc_store_le32(o + 48, (uint32_t)c->o.max_msg_size);
        dc_store_le32(o + 52, 0);
        dc_store_le64(o + 56, c->rbase);
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
        uint32_t code = dc_load_le32(h->in + 4);
        if (dc_load_le32(h->in) != DC_TCP_MAGIC)
            return dc_error(DC_ERR_FORMAT, "tcp: bad handshake reply from %s", c->peer);
        switch (code) {
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
                            code);
        }
        if (dc_load_le64(h->in + 8) != c->sess.id)
            return dc_error(DC_ERR_FORMAT, "tcp: %s answered for another session", c->peer);
        dc_tcp_ack_upto(c, dc_load_le64(h->in + 16));
        int fd = h->fd;
        h->fd = -1;
        h->state = HS_DONE;
        if ((st = dc_tcp_attach(c, idx, fd)) != DC_OK)
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

/* --- server side ------------------------------------------------------------------ */

static void dc_tcp_listener_unref(dc_tcp_listener_t *l)
{
    if (--l->refs > 0)
        return;
    for (uint32_t i = 0; i < l->nhs; i++) {
        dc_tcp_close_hs(l->hs[i]);
        free(l->hs[i]);
    }
    if (l->fd >= 0)
        close(l->fd);
    memset(l->secret, 0, sizeof(l->secret));
    free(l);
}

static void dc_tcp_hs_reply(dc_tcp_hs_t *h, uint32_t code, uint64_t session, uint64_t rbase)
{
    uint8_t b[DC_TCP_OK];
    dc_store_le32(b, DC_TCP_MAGIC);
    dc_store_le32(b + 4, code);
    dc_store_le64(b + 8, session);
    dc_store_le64(b + 16, rbase);
    ssize_t n = send(h->fd, b, sizeof(b), MSG_NOSIGNAL | MSG_DONTWAIT);
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
    if (h->nstreams == 0 || h->nstreams > DC_TCP_MAX_STREAMS || h->idx >= h->nstreams ||
        h->max_msg == 0) {
        dc_tcp_hs_reply(h, DC_TCP_OK_BAD, h->session, 0);
        return dc_error(DC_ERR_FORMAT,
                        "tcp: %s sent bad stream parameters (stream %u of %u, at most %u; "
                        "largest message %u bytes)",
                        h->peer, h->idx, h->nstreams, DC_TCP_MAX_STREAMS, h->max_msg);
    }
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
    h->fd = -1;
    dc_status_t st = dc_tcp_attach(c, h->idx, fd);
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

/* Advance one server handshake.  DC_OK: finished (attached). */
static dc_status_t dc_tcp_hs_server_step(dc_tcp_listener_t *l, dc_tcp_hs_t *h)
{
    dc_status_t st;
    if (h->state == HS_S_HELLO) {
        if ((st = dc_tcp_hs_fill(h)) != DC_OK)
            return st;
        if (dc_load_le32(h->in) != DC_TCP_MAGIC)
            return dc_error(DC_ERR_FORMAT, "tcp: %s sent garbage instead of a handshake "
                                           "(bad magic 0x%08x)",
                            h->peer, dc_load_le32(h->in));
        if (dc_load_le32(h->in + 4) != DC_TCP_VERSION)
            return dc_error(DC_ERR_FORMAT, "tcp: %s speaks handshake version %u (want %u)",
                            h->peer, dc_load_le32(h->in + 4), DC_TCP_VERSION);
        memcpy(h->nc, h->in + 8, DC_AUTH_NONCE_SIZE);
        if ((st = dc_auth_nonce(h->ns)) != DC_OK)
            return st;
        dc_store_le32(h->out, DC_TCP_MAGIC);
        dc_store_le32(h->out + 4, DC_TCP_VERSION);
        memcpy(h->out + 8, h->ns, DC_AUTH_NONCE_SIZE);
        if ((st = dc_auth_mac(l->o.secret, l->o.secret_len, 'S', h->nc, h->ns, h->out + 40)) !=
            DC_OK)
            return st;
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
        if ((st = dc_auth_verify(l->o.secret, l->o.secret_len, 'C', h->nc, h->ns, h->in,
                                 h->peer)) != DC_OK) {
            dc_tcp_hs_reply(h, DC_TCP_OK_AUTH, 0, 0);
            return st;
        }
        h->session = dc_load_le64(h->in + 32);
        h->epoch = dc_load_le32(h->in + 40);
        h->idx = dc_load_le16(h->in + 44);
        h->nstreams = dc_load_le16(h->in + 46);
        h->max_msg = dc_load_le32(h->in + 48);
        h->rbase = dc_load_le64(h->in + 56);
        h->state = HS_DONE;
        return dc_tcp_hs_server_attach(l, h);
    }
    return DC_ERR_AGAIN;
}

static dc_status_t dc_tcp_listener_progress(dc_tcp_listener_t *l)
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
        char peer[128];
        dc_net_sockaddr_str((struct sockaddr *)&pa, peer, sizeof(peer));
        dc_tcp_hs_t *h = l->nhs < DC_TCP_MAX_HS ? calloc(1, sizeof(*h)) : NULL;
        if (!h) {
            DC_LOG_WARN("tcp: dropped %s: too many pending handshakes on %s", peer, l->addr);
            close(fd);
            continue;
        }
        dc_tcp_tune(fd, &l->o);
        h->fd = fd;
        h->state = HS_S_HELLO;
        h->deadline = dc_now_s() + l->o.timeout_ms / 1000.0;
        snprintf(h->peer, sizeof(h->peer), "%s", peer);
        dc_tcp_hs_expect(h, DC_TCP_HELLO);
        l->hs[l->nhs++] = h;
    }
    /* pending handshakes */
    double now = dc_now_s();
    for (uint32_t i = 0; i < l->nhs;) {
        dc_tcp_hs_t *h = l->hs[i];
        dc_status_t st = dc_tcp_hs_server_step(l, h);
        if (st == DC_ERR_AGAIN && now > h->deadline)
            st = dc_error(DC_ERR_TIMEOUT, "tcp: %s did not complete the handshake within %u ms",
                          h->peer, l->o.timeout_ms);
        if (st == DC_ERR_AGAIN) {
            i++;
            continue;
        }
        if (st != DC_OK)
            DC_LOG_WARN("tcp: dropped peer: %s", dc_last_error());
        dc_tcp_close_hs(h);
        free(h);
        l->hs[i] = l->hs[--l->nhs];
    }
    /* pending sessions that never completed */
    for (dc_session_t *s = l->conns; s; s = s->next) {
        dc_tcp_conn_t *c = DC_TCP_CONN_OF(s);
        if (!c->handed_out && c->state == C_CONNECTING && now > c->deadline)
            dc_tcp_fail(c, DC_ERR_TIMEOUT, "not all streams attached within timeout_ms");
    }
    return DC_OK;
}

static dc_status_t dc_tcp_listen(const dc_verbs_opts_t *opts, const char *bind_addr,
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
    memset(l->secret, 0, sizeof(l->secret));
    free(l);
    return st;
}

static dc_status_t dc_tcp_listen_addr(dc_verbs_listener_t *lb, char *buf, size_t len)
{
    dc_tcp_listener_t *l = (dc_tcp_listener_t *)lb;
    if (strlen(l->addr) >= len)
        return dc_error(DC_ERR_INVALID, "tcp: address buffer too small");
    snprintf(buf, len, "%s", l->addr);
    return DC_OK;
}

static int dc_tcp_listen_fd(dc_verbs_listener_t *lb)
{
    return ((dc_tcp_listener_t *)lb)->fd;
}

static dc_status_t dc_tcp_accept(dc_verbs_listener_t *lb, dc_verbs_conn_t **out)
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

static void dc_tcp_listen_close(dc_verbs_listener_t *lb)
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

/* --- requests ---------------------------------------------------------------------- */

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

static dc_status_t dc_tcp_isend(dc_verbs_conn_t *c, const void *buf, size_t len,
                                dc_verbs_mr_t *mr, dc_verbs_req_t **out)
{
    return dc_tcp_isend_any(c, buf, len, mr, NULL, out);
}

static dc_status_t dc_tcp_isend_crc(dc_verbs_conn_t *c, const void *buf, size_t len,
                                    dc_verbs_mr_t *mr, uint32_t crc, dc_verbs_req_t **out)
{
    return dc_tcp_isend_any(c, buf, len, mr, &crc, out);
}

static dc_status_t dc_tcp_irecv(dc_verbs_conn_t *cb, void *buf, size_t cap, dc_verbs_mr_t *mr,
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
                (s->rblocked && s->h.seq < c->rposted))
                ready = true;
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
                short ev = (h->state == HS_C_CONNECT || h->out_off < h->out_len) ? POLLOUT
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
            (void)send(s->fd, b, sizeof(b), MSG_NOSIGNAL | MSG_DONTWAIT);
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
