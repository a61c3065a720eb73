/*
 * ucx_internal.h - what the files of the `ucx` transport share: its
 * constants, the connection, listener, request and receive-slot types, and
 * the functions one file calls in another.  Private: included only by
 * verbs/ucx.c, ucx_conn.c, ucx_send.c and ucx_recv.c (what each holds, the
 * wire format and the protocol: the head comment of ucx.c; measurements
 * behind the defaults: docs/ucx-notes.md).
 */
#ifndef DC_VERBS_UCX_INTERNAL_H
#define DC_VERBS_UCX_INTERNAL_H

#include "verbs/auth.h"
#include "verbs/net.h"
#include "verbs/session.h"
#include "verbs/ucx.h"

#include <string.h>
#include <sys/socket.h>

#include <ucp/api/ucp.h>

#define DC_UCX_MAX_HS     64 /* unauthenticated handshakes per listener (each has a worker) */
#define DC_UCX_MAX_HS_SRC 16 /* ... of them from one source address */
#define DC_UCX_AM_DATA 1
#define DC_UCX_AM_CTRL 2
#define DC_UCX_AM_AUTH 3

/* DATA active-message header: transport header + piece descriptor. */
#define DC_UCX_DHDR_SIZE (DC_VERBS_HDR_SIZE + 16)
#define DC_UCX_PIECE_DEFAULT (512u << 10) /* measured: docs/ucx-notes.md */
#define DC_UCX_PIECE_MIN (64u << 10)    /* bounds the receiver's bitmap */
#define DC_UCX_PIECE_MAX (1u << 30)
#define DC_UCX_AHEAD_DEFAULT (1u << 20)  /* posted, not yet sent (bytes) */
#define DC_UCX_SPIN_DEFAULT_US 200u /* config ucx_spin_us (see dc_ucx_wait) */
#define DC_UCX_SPIN_MAX_US 100000u
/* wait(): a sleep longer than this means the link went idle: stop spinning */
#define DC_UCX_SPIN_IDLE_NS 2000000ull
/* Eager bytes held for messages whose irecv is not posted yet, per
 * connection (rendezvous pieces hold only a descriptor): at most this, or
 * two of the largest messages if more (dc_ucx_am_data_cb).  Within its send
 * window a peer could otherwise make us hold 256 x max_msg bytes (16 GiB
 * at the defaults) by sending eagerly ahead of our receives. */
#define DC_UCX_HOLD_MAX (256ull << 20)

#define DC_UCX_RING DC_VERBS_MAX_INFLIGHT
#define DC_UCX_CTRLQ 1024 /* queued ACK/NACKs between two progress calls */

/* Handshake messages: "DCUA" + type + body. */
#define DC_UCX_AUTH_MAGIC 0x41554344u /* "DCUA" */
enum {
    DC_UCX_AUTH_HELLO = 1,     /* client: Nc */
    DC_UCX_AUTH_CHALLENGE = 2, /* server: Ns, Ms */
    DC_UCX_AUTH_PROOF = 3,     /* client: Mc */
    DC_UCX_AUTH_OK = 4,        /* server: proof accepted */
    DC_UCX_AUTH_FAIL = 5,      /* server: proof rejected */
};
#define DC_UCX_AUTH_MAX (5 + 2 * 32)
#define DC_UCX_HELLO_LEN (5 + 32 + 12) /* Nc, session id, epoch */

typedef enum {
    DC_UCX_C_WAIT_CHALLENGE, /* client: HELLO sent */
    DC_UCX_C_WAIT_OK,        /* client: PROOF sent */
    DC_UCX_S_WAIT_HELLO,     /* server: endpoint accepted */
    DC_UCX_S_WAIT_PROOF,     /* server: CHALLENGE sent */
    DC_UCX_ESTABLISHED,
    DC_UCX_BROKEN, /* was established, endpoint lost: re-dial / wait re-attach */
    DC_UCX_FAILED,
} dc_ucx_state_t;

typedef enum { DC_UCX_REQ_SEND, DC_UCX_REQ_RECV } dc_ucx_kind_t;
typedef enum { DC_UCX_R_PENDING, DC_UCX_R_DONE, DC_UCX_R_FAILED } dc_ucx_rstate_t;

typedef struct dc_ucx_conn dc_ucx_conn_t;
typedef struct dc_ucx_listener dc_ucx_listener_t;

/* The error-handler argument of one endpoint: re-targeted when a re-dialed
 * endpoint is adopted by the connection it resumes. */
typedef struct dc_ucx_epref {
    dc_ucx_conn_t *c;
} dc_ucx_epref_t;

typedef struct dc_ucx_mr {
    dc_verbs_mr_t base;
    ucp_context_h ctx; /* the connection's (dc_ucx_ctx_for) */
    ucp_mem_h memh;
    uint8_t *addr;
    size_t len;
    uint32_t kind;
} dc_ucx_mr_t;

typedef struct dc_ucx_req {
    dc_verbs_req_t base;
    dc_ucx_conn_t *conn;
    struct dc_ucx_req *next, *prev; /* conn->reqs (all live requests) */
    dc_ucx_kind_t kind;
    dc_ucx_rstate_t state;
    dc_status_t err;
    uint8_t *buf;
    size_t len; /* send: message length; recv: capacity */
    size_t got; /* recv: verified length */
    dc_ucx_mr_t *mr;
    uint32_t mkind; /* DC_VERBS_MEM_HOST / DC_VERBS_MEM_CUDA */
    uint64_t seq;
    unsigned ucx_pending; /* UCP operations still referencing buf */
    /* send: the DATA headers of the pieces (valid until their sends
     * complete; kept for re-sends), npieces * DC_UCX_DHDR_SIZE bytes */
    uint8_t *phdr;
    size_t phdr_cap;
    uint32_t step;    /* send: piece size (device memory: the whole message, one
                         GPU CRC kernel per message) */
    uint32_t npieces;
    uint32_t nhdr;       /* send: headers 0..nhdr-1 are filled */
    uint32_t next_piece; /* send: next piece to post (while queued) */
    int queued;          /* send: on conn->sq */
    struct dc_ucx_req *qnext;
    /* send: the caller's CRC32C of the whole message (isend_crc); the
     * pieces then carry it (DC_VERBS_HDR_F_MSGCRC) instead of their own */
    int crc_known;
    uint32_t ccrc;
    int ccrc_nacked;   /* the peer NACKed it: re-sends carry our own CRCs */
    uint32_t ccrc_acc; /* while ccrc_nacked: our pieces' CRC32Cs combined */
} dc_ucx_req_t;

typedef enum {
    DC_UCX_SLOT_EMPTY = 0, /* no piece of the current attempt arrived */
    DC_UCX_SLOT_ACTIVE,    /* pieces arriving / held / being received */
    DC_UCX_SLOT_DONE,      /* verified (or failed as too big): ACKed */
} dc_ucx_slot_state_t;

/* One received piece: held until its irecv() is posted and delivered, then
 * (rendezvous) the context of its ucp_am_recv_data_nbx. */
typedef struct dc_ucx_piece {
    struct dc_ucx_piece *next;     /* slot's held list / free list */
    struct dc_ucx_piece *next_all; /* every piece of the connection */
    dc_ucx_conn_t *conn;
    dc_ucx_req_t *req; /* rendezvous in flight: the irecv it lands in */
    uint64_t seq;
    uint32_t off, len, crc;
    void *data; /* held: UCP data pointer / rendezvous descriptor / copy */
    int rndv;   /* data is a rendezvous descriptor */
    int owned;  /* data is our malloc'd copy */
} dc_ucx_piece_t;

typedef struct dc_ucx_slot {
    dc_ucx_slot_state_t state;
    uint64_t seq;
    uint32_t len;     /* message length (from its pieces) */
    uint32_t step;    /* the sender's piece size */
    uint32_t npieces; /* pieces of the message */
    uint32_t ndone;   /* pieces checked in this attempt */
    uint32_t nbad;    /* of those, CRC32C mismatches */
    dc_ucx_piece_t *held, *held_tail; /* arrived, not yet delivered */
    dc_ucx_req_t *req; /* the irecv() posted for this seq */
    uint8_t *seen;     /* bitmap of the pieces of this attempt (kept) */
    size_t seen_cap;
    /* DC_VERBS_HDR_F_MSGCRC: the pieces carry the whole message's CRC32C
     * (mcrc); each piece's own CRC32C goes to pcrc[k] as it lands, and
     * they are combined in order once all have landed */
    int msgcrc;
    uint32_t mcrc;
    uint32_t *pcrc;  /* npieces entries (kept) */
    size_t pcrc_cap; /* entries */
} dc_ucx_slot_t;

typedef struct dc_ucx_ctrl {
    struct dc_ucx_ctrl *next_free, *next_all;
    dc_ucx_conn_t *conn;
    uint8_t hdr[DC_VERBS_HDR_SIZE];
    uint8_t auth[DC_UCX_AUTH_MAX];
} dc_ucx_ctrl_t;

struct dc_ucx_conn {
    dc_verbs_conn_t base;
    dc_ucx_state_t state;
    dc_status_t err;
    char errmsg[384];
    char peer[128];
    int is_client;
    /* reconnect / resume */
    /* id: client: random; server: the peer's.  epoch: client: dial count
     * (first dial 1); server: the peer's last.  next: the listener's
     * registry (server) */
    dc_session_t sess;
    struct sockaddr_storage raddr; /* client: where to re-dial */
    socklen_t raddr_len;
    int reconnecting;   /* client: re-dial handshake in progress */
    int first_redial;   /* client: the first dial was refused (no listener yet): dial again, same epoch */
    int resend_pending; /* re-send the un-ACKed window after a resume */
    double next_dial;
    dc_ucx_epref_t *epref;
    dc_ucx_listener_t *lst;        /* server: registry that can re-attach us */
    double deadline; /* handshake, or recovery once BROKEN (dc_now_s) */
    uint32_t timeout_ms;
    uint32_t hs_timeout_ms; /* server: the handshake's own deadline (opts hs_timeout_ms) */
    double hs_started;      /* server: when the connection request was taken */
    uint64_t max_msg;
    uint8_t *secret;
    size_t secret_len;
    uint8_t nc[DC_AUTH_NONCE_SIZE], ns[DC_AUTH_NONCE_SIZE];

    ucp_context_h ctx; /* per network interface: dc_ucx_ctx_for */
    ucp_worker_h worker;
    ucp_ep_h ep;
    int efd;
    unsigned outstanding; /* UCP requests whose callbacks have not fired */
    size_t held_bytes;    /* eager bytes of held pieces (DC_UCX_HOLD_MAX) */
    int fail_live;        /* FAILED by dc_ucx_fail while established (see there) */

    /* send side */
    dc_verbs_window_t win;
    uint32_t piece;          /* piece size of our sends */
    uint64_t spin_ns;        /* wait(): poll this long before sleeping (0: never) */
    int spin_idle;           /* wait(): the last sleep was long: do not spin */
    unsigned ahead;          /* pieces posted to UCP and not yet completed, at most */
    unsigned pieces_out;     /* data pieces posted and not completed */
    dc_ucx_req_t *sq, *sq_tail; /* sends with pieces still to post, in order */
    /* receive side */
    dc_ucx_slot_t slot[DC_UCX_RING];
    uint64_t rbase; /* lowest seq not yet verified */
    uint64_t rpost; /* seq of the next irecv() */
    int deliver_pending;

    /* control messages to send after the current progress */
    struct {
        uint8_t type;
        uint64_t seq;
    } ctrlq[DC_UCX_CTRLQ];
    unsigned nctrl;
    uint8_t auth_out[DC_UCX_AUTH_MAX];
    size_t auth_out_len;

    dc_ucx_ctrl_t *ctrl_free, *ctrl_all;
    dc_ucx_req_t *reqs;
    dc_ucx_req_t *req_free;
    dc_ucx_piece_t *piece_free, *piece_all;

    dc_verbs_stats_t stats;
    char transports[256];

    struct dc_ucx_conn *next; /* listener's list of handshaking conns */
};

struct dc_ucx_listener {
    dc_verbs_listener_t base;
    unsigned refs;      /* the caller's + one per registered connection */
    dc_session_t *reg;  /* accepted connections (sess), for re-attach */
    ucp_context_h ctx;  /* of the bind address's interface: dc_ucx_ctx_for */
    ucp_worker_h worker;
    ucp_listener_h listener;
    int efd;
    int epfd;
    char addr[128];
    dc_verbs_opts_t opts;
    uint8_t *secret;
    size_t secret_len;
    ucp_conn_request_h creq[64];
    unsigned ncreq;
    dc_ucx_conn_t *handshaking; /* unauthenticated: at most DC_UCX_MAX_HS, and
                                   DC_UCX_MAX_HS_SRC per source address */
    uint64_t hs_evicted;        /* handshakes dropped for newer ones */
    double hs_report_at;
};

/* --- shared helpers --------------------------------------------------------- */

/* Parameters of a UCP operation that completes through a callback with
 * user data `ud`, on registered memory when `mr` is not NULL (the caller
 * sets the callback itself: send and receive callbacks differ). */
static inline void dc_ucx_op_param(ucp_request_param_t *p, void *ud, const dc_ucx_mr_t *mr)
{
    memset(p, 0, sizeof(*p));
    p->op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p->user_data = ud;
    if (mr) {
        p->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        p->memh = mr->memh;
    }
}

/* The data buffer of a request is device memory: say so to UCP. */
static inline void dc_ucx_op_mem(ucp_request_param_t *p, const dc_ucx_req_t *r)
{
    if (r->mkind == DC_VERBS_MEM_CUDA) {
        p->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
        p->memory_type = UCS_MEMORY_TYPE_CUDA;
    }
}

/* --- ucx.c: context, requests ------------------------------------------------ */

dc_status_t dc_ucx_init(void);
/* The UCP context for a listener bound to `a` (passive) or a client dialing
 * `a`: the interface of the address in use, unless UCX_NET_DEVICES is set. */
ucp_context_h dc_ucx_ctx_for(const struct sockaddr *a, socklen_t alen, int passive);
/* c->transports from the endpoint's lanes; warns when RDMA goes unused. */
void dc_ucx_capture_transports(dc_ucx_conn_t *c);
dc_ucx_req_t *dc_ucx_req_new(dc_ucx_conn_t *c, dc_ucx_kind_t kind, void *buf, size_t len,
                             dc_verbs_mr_t *mr);
void dc_ucx_req_release(dc_ucx_req_t *r);
dc_status_t dc_ucx_check_mr(const dc_ucx_mr_t *m, const void *buf, size_t len, uint32_t *kind);

/* --- ucx_conn.c: connections ------------------------------------------------- */

/* FAILED with the message, once (the first failure wins). */
void dc_ucx_fail(dc_ucx_conn_t *c, dc_status_t st, const char *fmt, ...) DC_PRINTF(3, 4);
/* The endpoint broke: an established connection is recovered, else fails. */
void dc_ucx_break(dc_ucx_conn_t *c, const char *what, ucs_status_t status);
dc_status_t dc_ucx_conn_error(const dc_ucx_conn_t *c);
void dc_ucx_progress_raw(ucp_worker_h w);
void dc_ucx_conn_progress(dc_ucx_conn_t *c);
void dc_ucx_conn_destroy(dc_ucx_conn_t *c);
dc_status_t dc_ucx_listen(const dc_verbs_opts_t *opts, const char *bind_addr,
                          dc_verbs_listener_t **out);
dc_status_t dc_ucx_listen_addr(dc_verbs_listener_t *lb, char *buf, size_t len);
int dc_ucx_listen_fd(dc_verbs_listener_t *lb);
dc_status_t dc_ucx_accept(dc_verbs_listener_t *lb, dc_verbs_conn_t **out);
void dc_ucx_listen_close(dc_verbs_listener_t *lb);
dc_status_t dc_ucx_connect(const dc_verbs_opts_t *opts, const char *addr, dc_verbs_conn_t **out);
dc_status_t dc_ucx_connect_test(dc_verbs_conn_t *cb);

/* --- ucx_send.c: the send path ----------------------------------------------- */

int dc_ucx_bye_ok(const dc_ucx_conn_t *c);
void dc_ucx_ctrl_send(dc_ucx_conn_t *c, unsigned am_id, uint8_t type, uint64_t seq,
                      const uint8_t *auth, size_t auth_len);
void dc_ucx_queue_ctrl(dc_ucx_conn_t *c, uint8_t type, uint64_t seq);
void dc_ucx_sq_unlink(dc_ucx_conn_t *c, dc_ucx_req_t *r);
void dc_ucx_pump(dc_ucx_conn_t *c);
void dc_ucx_post_send(dc_ucx_conn_t *c, dc_ucx_req_t *r);
ucs_status_t dc_ucx_am_ctrl_cb(void *arg, const void *header, size_t header_length, void *data,
                               size_t length, const ucp_am_recv_param_t *param);
dc_status_t dc_ucx_isend(dc_verbs_conn_t *c, const void *buf, size_t len, dc_verbs_mr_t *mr,
                         dc_verbs_req_t **out);
dc_status_t dc_ucx_isend_crc(dc_verbs_conn_t *c, const void *buf, size_t len, dc_verbs_mr_t *mr,
                             uint32_t crc, dc_verbs_req_t **out);

/* --- ucx_recv.c: the receive path -------------------------------------------- */

void dc_ucx_slot_release_held(dc_ucx_conn_t *c, dc_ucx_slot_t *s);
void dc_ucx_slot_reset(dc_ucx_conn_t *c, dc_ucx_slot_t *s, int keep_req);
void dc_ucx_deliver_all(dc_ucx_conn_t *c);
ucs_status_t dc_ucx_am_data_cb(void *arg, const void *header, size_t header_length, void *data,
                               size_t length, const ucp_am_recv_param_t *param);
dc_status_t dc_ucx_irecv(dc_verbs_conn_t *cb, void *buf, size_t cap, dc_verbs_mr_t *mr,
                         dc_verbs_req_t **out);

#endif /* DC_VERBS_UCX_INTERNAL_H */
