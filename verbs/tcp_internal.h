/*
 * tcp_internal.h - what the files of the tcp transport share (private to
 * verbs/tcp*.c): the handshake and buffer constants, the objects (request,
 * handshake, stream, connection, listener) and the functions one file calls
 * in another.  The protocol is described in tcp.c.
 *
 *   tcp.c          ops table, connection life: create, client handshake,
 *                  progress, break and reconnect, wait, close
 *   tcp_listen.c   listener: accept, server handshake, (re-)attaching
 *                  streams to their session
 *   tcp_send.c     transmit queue, ACK/NACK control frames, writing
 *                  messages to the streams (MSG_ZEROCOPY), isend
 *   tcp_recv.c     reading and parsing the streams, CRC32C check, the
 *                  early-message stash, irecv
 *   tcp_hs.c       pack / parse of the handshake messages (tcp_hs.h)
 *   tcp_tls.c      TLS 1.3 on the streams (tcp_tls.h): contexts, PSK and
 *                  certificates, handshake, read / write
 */
#ifndef DC_VERBS_TCP_INTERNAL_H
#define DC_VERBS_TCP_INTERNAL_H
#include "verbs/transport.h"

#include "kernels/kern.h"
#include "verbs/auth.h"
#include "verbs/fault.h"
#include "verbs/net.h"
#include "verbs/session.h"
#include "verbs/tcp_hs.h"
#include "verbs/tcp_tls.h"

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

#define DC_TCP_RBUF (256u << 10)
#define DC_TCP_OBUF 4096
#define DC_TCP_CTRL_CAP 4096
#define DC_TCP_DIRECT_MIN (64u << 10) /* read payload straight into the user buffer */
#define DC_TCP_RCHUNK (1u << 20)      /* bytes per recv() straight into it */
#define DC_TCP_SPIECE (1u << 20)      /* payload bytes CRC'd, then sent, per step (L2-sized) */
#define DC_TCP_BUDGET (8u << 20)      /* bytes per stream per progress call */
#define DC_TCP_MAX_HS 256             /* pending handshakes per listener */
#define DC_TCP_HS_LINES 20            /* refused-handshake log lines per second */
#define DC_TCP_MAX_HS_SRC 64          /* ... of them from one source address */
#define DC_TCP_ZC_MIN (64u << 10)     /* MSG_ZEROCOPY only for messages this large */
#define DC_TCP_TLS_SLACK (32u << 10)  /* > one TLS record: SO_RCVLOWAT margin on TLS streams */
#define DC_TCP_TLS_RECORD 16384u      /* plaintext bytes of a full TLS record */
#define DC_TCP_ZC_RING 1024           /* un-released zero-copy sends per stream */
#define DC_TCP_STASH_MAX (64u << 20)  /* early messages held per connection (see stash) */
#define W DC_VERBS_MAX_INFLIGHT


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
    HS_C_TLS,       /* TLS handshake in progress (opts.tls) */
    HS_C_CHAL,      /* HELLO sent (or sending), waiting for CHAL */
    HS_C_OK,        /* PROOF sent, waiting for OK */
    HS_S_HELLO,     /* waiting for HELLO (or a TLS ClientHello, see tcp_tls.c) */
    HS_S_TLS,       /* TLS handshake in progress */
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
    /* server side: when accepted (eviction picks the oldest) and the
     * peer's address without its port (the per-source cap) */
    double started;
    char src[128];
    SSL *ssl;        /* TLS on this socket (NULL: clear); moves to the stream */
    bool tls_wantw;  /* the TLS handshake waits for the socket to be writable */
    bool tls_seen;   /* server: the first byte told TLS from clear */
    /* learned from PROOF (server side) */
    uint64_t session;
    uint32_t epoch, idx, nstreams, max_msg;
    uint64_t rbase;
} dc_tcp_hs_t;

typedef struct dc_tcp_stream {
    int fd;
    SSL *ssl; /* TLS on the socket, NULL: clear (reads and writes go through it) */
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
    /* TLS (tcp_tls.c) */
    bool tls;            /* client: dial with TLS */
    SSL_CTX *tls_ctx;    /* client: its context (server streams: the listener's) */
    char tls_name[256];  /* client, certificate mode: the name the server's
                            certificate must carry */
    bool tls_logged;     /* the connection's encryption was logged */
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
    SSL_CTX *tls_ctx;    /* NULL when config tls=off */
    int tls;             /* DC_VERBS_TLS_ON: clear streams refused; OFF: TLS refused */
    dc_tcp_hs_t *hs[DC_TCP_MAX_HS];
    uint32_t nhs;
    /* unauthenticated handshakes dropped: evicted for a newer one (the
     * listener or the source was full), past hs_timeout_ms; logged as a
     * summary at most once a second (a flood is one line, not thousands) */
    uint64_t hs_evicted, hs_timed_out, hs_reported;
    double hs_report_at;
    /* handshakes refused for a reason (garbage, a wrong secret): a line
     * each, at most DC_TCP_HS_LINES a second; the rest are counted in the
     * summary (a flood of garbage must not flood the log) */
    uint32_t hs_lines;
    double hs_lines_at;
    uint64_t hs_quiet;
    dc_session_t *conns; /* every server connection (pending or live), by sess */
};

/* --- tcp.c -------------------------------------------------------------- */
void dc_tcp_tune(int fd, const dc_verbs_opts_t *o);
dc_status_t dc_tcp_hs_flush(dc_tcp_hs_t *h);
dc_status_t dc_tcp_hs_fill(dc_tcp_hs_t *h);
void dc_tcp_hs_expect(dc_tcp_hs_t *h, size_t n);
dc_status_t dc_tcp_fail(dc_tcp_conn_t *c, dc_status_t st, const char *why);
void dc_tcp_stream_reset(dc_tcp_conn_t *c, dc_tcp_stream_t *s);
void dc_tcp_close_hs(dc_tcp_hs_t *h);
void dc_tcp_break(dc_tcp_conn_t *c, const char *why);
dc_status_t dc_tcp_progress_conn(dc_tcp_conn_t *c);
dc_status_t dc_tcp_attach(dc_tcp_conn_t *c, uint32_t idx, int fd, SSL *ssl);
ssize_t dc_tcp_sock_read(dc_tcp_stream_t *s, void *buf, size_t len);
dc_status_t dc_tcp_io_error(dc_tcp_stream_t *s, const char *what);
dc_tcp_conn_t *dc_tcp_conn_new(const dc_verbs_opts_t *o, uint32_t k);
void dc_tcp_conn_free(dc_tcp_conn_t *c);

/* --- tcp_listen.c ------------------------------------------------------- */
void dc_tcp_listener_unref(dc_tcp_listener_t *l);
dc_status_t dc_tcp_listener_progress(dc_tcp_listener_t *l);
dc_status_t dc_tcp_listen(const dc_verbs_opts_t *opts, const char *bind_addr,
                          dc_verbs_listener_t **out);
dc_status_t dc_tcp_listen_addr(dc_verbs_listener_t *lb, char *buf, size_t len);
int dc_tcp_listen_fd(dc_verbs_listener_t *lb);
dc_status_t dc_tcp_accept(dc_verbs_listener_t *lb, dc_verbs_conn_t **out);
void dc_tcp_listen_close(dc_verbs_listener_t *lb);

/* --- tcp_send.c --------------------------------------------------------- */
void dc_tcp_txq_push(dc_tcp_conn_t *c, dc_tcp_req_t *r);
void dc_tcp_ack_upto(dc_tcp_conn_t *c, uint64_t upto);
bool dc_tcp_ctrl_push(dc_tcp_conn_t *c, uint8_t type, uint64_t seq);
void dc_tcp_zc_forget(dc_tcp_stream_t *s);
dc_status_t dc_tcp_zc_reap(dc_tcp_conn_t *c, dc_tcp_stream_t *s);
dc_status_t dc_tcp_stream_send(dc_tcp_conn_t *c, dc_tcp_stream_t *s, uint32_t idx);
dc_status_t dc_tcp_isend(dc_verbs_conn_t *c, const void *buf, size_t len, dc_verbs_mr_t *mr,
                         dc_verbs_req_t **out);
dc_status_t dc_tcp_isend_crc(dc_verbs_conn_t *c, const void *buf, size_t len, dc_verbs_mr_t *mr,
                             uint32_t crc, dc_verbs_req_t **out);

/* --- tcp_recv.c --------------------------------------------------------- */
dc_status_t dc_tcp_stream_recv(dc_tcp_conn_t *c, dc_tcp_stream_t *s);
dc_status_t dc_tcp_irecv(dc_verbs_conn_t *cb, void *buf, size_t cap, dc_verbs_mr_t *mr,
                         dc_verbs_req_t **out);

#endif /* DC_VERBS_TCP_INTERNAL_H */
