/*
 * rdma_internal.h - what the files of the rdma transport share (private to
 * verbs/rdma*.c): the wire constants (private data, control messages), the
 * objects (memory registration, request, link, connection, listener) and
 * the functions one file calls in another.  The protocol is described in
 * rdma.c.
 *
 *   rdma.c          ops table, device probe, a connection's life: rdmacm
 *                   events, authentication, completions, break and re-dial,
 *                   progress, memory registration, requests, test, close
 *   rdma_link.c     one link (QP, CQ, registered rings) set up and torn
 *                   down; the connection private data and reject reasons
 *   rdma_listen.c   listener: connect requests, the session registry,
 *                   handing a re-dial's link to its connection (adopt)
 *   rdma_send.c     credits, control messages in and out, the transmit
 *                   queue written into the peer's ring, isend
 *   rdma_recv.c     parsing our ring into posted receives, CRC32C check,
 *                   irecv
 */
#ifndef DC_VERBS_RDMA_INTERNAL_H
#define DC_VERBS_RDMA_INTERNAL_H
#include "verbs/rdma.h"

#include "kernels/kern.h"
#include "kernels/kern_cuda.h"
#include "verbs/auth.h"
#include "verbs/fault.h"
#include "verbs/gpumem.h"
#include "verbs/net.h"
#include "verbs/rdma_wire.h"
#include "verbs/session.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define DC_RDMA_RING_BYTES (8u << 20)
#define DC_RDMA_CHUNK (1u << 20)
#define DC_RDMA_STAGE_BYTES (8u << 20)
#define DC_RDMA_SQ_DEPTH 256
#define DC_RDMA_RQ_DEPTH    512
#define DC_RDMA_INLINE_WANT 128
#define DC_RDMA_RING DC_VERBS_MAX_INFLIGHT
#define DC_RDMA_CTRLQ 1024
#define DC_RDMA_TXQ (2 * DC_VERBS_MAX_INFLIGHT)

/* The private data, reject reasons and control messages (their layouts,
 * constants and decoders) are in rdma_wire.h.  The server echoes the
 * client's session and epoch in its private data. */
#define DC_RDMA_WR_SEND (1ull << 63) /* wr_id tag of send work requests */

enum {
    DC_RDMA_AUTH_HELLO = 1,
    DC_RDMA_AUTH_CHALLENGE = 2,
    DC_RDMA_AUTH_PROOF = 3,
    DC_RDMA_AUTH_OK = 4,
    DC_RDMA_AUTH_FAIL = 5,
};

typedef enum {
    DC_RDMA_C_RESOLVING, /* client: address/route resolution, connect */
    DC_RDMA_C_WAIT_CHALLENGE,
    DC_RDMA_C_WAIT_OK,
    DC_RDMA_S_ACCEPTING, /* server: rdma_accept sent */
    DC_RDMA_S_WAIT_HELLO,
    DC_RDMA_S_WAIT_PROOF,
    DC_RDMA_ESTABLISHED,
    DC_RDMA_BROKEN, /* was established, link lost: re-dial / wait for re-attach */
    DC_RDMA_FAILED,
} dc_rdma_state_t;

typedef enum { DC_RDMA_REQ_SEND, DC_RDMA_REQ_RECV } dc_rdma_kind_t;
typedef enum { DC_RDMA_R_PENDING, DC_RDMA_R_DONE, DC_RDMA_R_FAILED } dc_rdma_rstate_t;

typedef struct dc_rdma_conn dc_rdma_conn_t;

typedef struct dc_rdma_mr {
    dc_verbs_mr_t base;
    struct ibv_mr *mr;
    uint8_t *addr;
    size_t len;
    uint32_t kind;
} dc_rdma_mr_t;

typedef struct dc_rdma_req {
    dc_verbs_req_t base;
    dc_rdma_conn_t *conn;
    struct dc_rdma_req *next, *prev;
    dc_rdma_kind_t kind;
    dc_rdma_rstate_t state;
    dc_status_t err;
    uint8_t *buf;
    size_t len;
    size_t got;
    dc_rdma_mr_t *mr;
    uint32_t mkind; /* DC_VERBS_MEM_HOST / DC_VERBS_MEM_CUDA */
    uint64_t seq;
    unsigned wrs; /* posted work requests reading buf */
    int queued;   /* in the transmit queue */
    int crc_known; /* hdr carries the caller's CRC32C (isend_crc): a NACK
                      recomputes it (never trusted twice) */
    uint8_t hdr[DC_VERBS_HDR_SIZE];
} dc_rdma_req_t;

typedef enum {
    DC_RDMA_SLOT_EMPTY = 0,
    DC_RDMA_SLOT_DONE,
} dc_rdma_slot_state_t;

typedef struct dc_rdma_slot {
    dc_rdma_slot_state_t state;
    dc_rdma_req_t *req;
} dc_rdma_slot_t;

typedef struct dc_rdma_sqe {
    uint64_t stage_end; /* stage_head after this WR (FIFO release) */
    dc_rdma_req_t *req; /* WR reads req->buf (registered) */
} dc_rdma_sqe_t;

/*
 * Everything that lives and dies with one RC queue pair: the rdmacm id and
 * its event channel, CQ, QP, our registered rings and the credit counters of
 * both directions.  A broken connection drops its link and gets a fresh one
 * (client: re-dial; server: the authenticated link of the re-dial is handed
 * over whole by the listener, dc_rdma_adopt()).  The protection domain is
 * NOT part of it: memory the caller registered (reg_mem) must stay valid.
 */
typedef struct dc_rdma_link {
    struct rdma_event_channel *ch;
    struct rdma_cm_id *id;
    struct ibv_comp_channel *cc;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    uint32_t max_inline;
    uint32_t mtu;
    int disconnected;

    /* our receive ring (the peer writes into it) */
    uint8_t *ring;
    struct ibv_mr *ring_mr;
    uint64_t rx_avail, rx_consumed, consumed_reported;
    uint64_t rq_completed, rq_reported;
    /* the peer's ring */
    uint64_t peer_ring_addr;
    uint32_t peer_rkey;
    uint64_t peer_ring_bytes;
    uint32_t peer_rq_depth;
    uint64_t tx_written, tx_peer_consumed;
    uint64_t tx_wrs, peer_reposted;

    uint8_t *crecv; /* DC_RDMA_RQ_DEPTH control receive buffers */
    struct ibv_mr *crecv_mr;
    uint8_t *csend; /* DC_RDMA_SQ_DEPTH control send buffers */
    struct ibv_mr *csend_mr;
    uint8_t *stage;
    struct ibv_mr *stage_mr;
    uint64_t stage_head, stage_tail;
    dc_rdma_sqe_t sq[DC_RDMA_SQ_DEPTH];
    uint64_t sq_posted, sq_done;
} dc_rdma_link_t;

typedef struct dc_rdma_listener dc_rdma_listener_t;

struct dc_rdma_conn {
    dc_verbs_conn_t base;
    dc_rdma_state_t state;
    dc_status_t err;
    char errmsg[512];
    char peer[128];
    int is_client;
    double deadline;
    uint32_t timeout_ms;
    uint32_t hs_timeout_ms; /* server: the handshake's own deadline (opts hs_timeout_ms) */
    double hs_started;      /* server: when the connect request came */
    uint64_t max_msg;
    uint8_t *secret;
    size_t secret_len;
    uint8_t nc[DC_AUTH_NONCE_SIZE], ns[DC_AUTH_NONCE_SIZE];

    /* reconnect / resume */
    dc_session_t sess;             /* client: random id, dial count; server: the
                                      peer's; sess.next: the listener's registry */
    struct sockaddr_storage raddr; /* client: where to re-dial */
    int reconnecting;              /* client: a re-dial is in progress */
    int is_redial;                 /* server handshake: re-dial of a session;
                                      its data waits for dc_rdma_adopt() */
    double broken_deadline, next_dial;
    char why[200];           /* what broke the link last */
    dc_rdma_listener_t *lst; /* server: registry that can re-attach us */

    struct ibv_pd *pd;
    int own_pd; /* client: ours; server: the listener's (one per device) */
    int epfd;
    dc_rdma_link_t lk;

    /* transmit queue: messages (re)sent in order, head partly written */
    dc_rdma_req_t *txq[DC_RDMA_TXQ];
    unsigned txq_head, txq_len;
    uint64_t tx_off; /* bytes of txq[head]'s stream already written */
    dc_verbs_window_t win;

    /* receive parser */
    uint8_t hbuf[DC_VERBS_HDR_SIZE];
    size_t hgot;
    int in_payload, discard;
    dc_verbs_hdr_t cur;
    uint64_t pay_done;
    dc_rdma_slot_t slot[DC_RDMA_RING];
    uint64_t rbase, rpost;

    struct {
        uint8_t type;
        uint64_t seq;
    } ctrlq[DC_RDMA_CTRLQ];
    unsigned nctrl;
    uint8_t auth_out[5 + 64];
    size_t auth_out_len;

    dc_rdma_req_t *reqs, *req_free;
    dc_verbs_stats_t stats;
    struct dc_rdma_conn *next;
};

#define DC_RDMA_MAX_PDS 8

#define DC_RDMA_MAX_HS     64 /* unauthenticated handshakes per listener (each holds a QP) */
#define DC_RDMA_MAX_HS_SRC 16 /* ... of them from one source address */

struct dc_rdma_listener {
    dc_verbs_listener_t base;
    unsigned refs;       /* the caller's + one per registered connection */
    dc_session_t *reg;   /* accepted connections, by session, for re-attach */
    struct rdma_event_channel *ch;
    struct rdma_cm_id *id;
    int epfd;
    char addr[128];
    dc_verbs_opts_t opts;
    uint8_t *secret;
    size_t secret_len;
    dc_rdma_conn_t *handshaking; /* unauthenticated: at most DC_RDMA_MAX_HS, and
                                    DC_RDMA_MAX_HS_SRC per source address */
    uint64_t hs_evicted;         /* handshakes dropped for newer ones */
    double hs_report_at;
    /* one protection domain per device, shared by the accepted connections,
     * so that a re-dial's link can replace a broken one without
     * invalidating the caller's memory registrations */
    struct ibv_pd *pds[DC_RDMA_MAX_PDS];
    unsigned npds;
};

/* The device the probe chose ("mlx5_0:1"), for log lines and stats. */
extern char dc_rdma_dev[64];

/* --- rdma.c ------------------------------------------------------------- */
dc_status_t dc_rdma_init(void);
void dc_rdma_fail(dc_rdma_conn_t *c, dc_status_t st, const char *fmt, ...) DC_PRINTF(3, 4);
void dc_rdma_lost(dc_rdma_conn_t *c, const char *fmt, ...) DC_PRINTF(2, 3);
dc_status_t dc_rdma_conn_error(const dc_rdma_conn_t *c);
void dc_rdma_resume(dc_rdma_conn_t *c);
void dc_rdma_on_auth(dc_rdma_conn_t *c, const uint8_t *m, size_t len);
dc_status_t dc_rdma_conn_channel(dc_rdma_conn_t *c);
void dc_rdma_conn_progress(dc_rdma_conn_t *c);
dc_status_t dc_rdma_conn_alloc(const dc_verbs_opts_t *o, dc_rdma_conn_t **out);
void dc_rdma_conn_destroy(dc_rdma_conn_t *c);
dc_rdma_req_t *dc_rdma_req_new(dc_rdma_conn_t *c, dc_rdma_kind_t kind, void *buf, size_t len,
                               dc_verbs_mr_t *mr);
void dc_rdma_req_release(dc_rdma_req_t *r);
dc_status_t dc_rdma_check_mr(const dc_rdma_mr_t *m, const void *buf, size_t len, int sending,
                             uint32_t *kind);

/* --- rdma_link.c -------------------------------------------------------- */
int dc_rdma_post_recv(dc_rdma_conn_t *c, uint32_t i);
dc_status_t dc_rdma_setup(dc_rdma_conn_t *c, struct rdma_cm_id *id);
void dc_rdma_drop_link(dc_rdma_conn_t *c);
void dc_rdma_pdata_pack(const dc_rdma_conn_t *c, uint8_t out[DC_RDMA_PDATA_SIZE]);
void dc_rdma_pdata_apply(dc_rdma_conn_t *c, const dc_rdma_pdata_t *pd);
void dc_rdma_reject(struct rdma_cm_id *id, uint16_t reason);
uint16_t dc_rdma_reject_reason(const struct rdma_cm_event *ev);

/* --- rdma_listen.c ------------------------------------------------------ */
dc_status_t dc_rdma_listen(const dc_verbs_opts_t *opts, const char *bind_addr,
                           dc_verbs_listener_t **out);
dc_status_t dc_rdma_listen_addr(dc_verbs_listener_t *lb, char *buf, size_t len);
int dc_rdma_listen_fd(dc_verbs_listener_t *lb);
dc_status_t dc_rdma_accept(dc_verbs_listener_t *lb, dc_verbs_conn_t **out);
void dc_rdma_listen_close(dc_verbs_listener_t *lb);
void dc_rdma_listener_unref(dc_rdma_listener_t *l);

/* --- rdma_send.c -------------------------------------------------------- */
int dc_rdma_ctrl_send(dc_rdma_conn_t *c, uint8_t type, uint64_t seq, const uint8_t *auth,
                      size_t auth_len);
void dc_rdma_queue_ctrl(dc_rdma_conn_t *c, uint8_t type, uint64_t seq);
void dc_rdma_flush_ctrl(dc_rdma_conn_t *c);
void dc_rdma_txq_push(dc_rdma_conn_t *c, dc_rdma_req_t *r);
void dc_rdma_tx_pump(dc_rdma_conn_t *c);
void dc_rdma_on_ctrl(dc_rdma_conn_t *c, const uint8_t *m, size_t len);
dc_status_t dc_rdma_isend(dc_verbs_conn_t *c, const void *buf, size_t len, dc_verbs_mr_t *mr,
                          dc_verbs_req_t **out);
dc_status_t dc_rdma_isend_crc(dc_verbs_conn_t *c, const void *buf, size_t len, dc_verbs_mr_t *mr,
                              uint32_t crc, dc_verbs_req_t **out);

/* --- rdma_recv.c -------------------------------------------------------- */
void dc_rdma_rx_parse(dc_rdma_conn_t *c);
dc_status_t dc_rdma_irecv(dc_verbs_conn_t *cb, void *buf, size_t cap, dc_verbs_mr_t *mr,
                          dc_verbs_req_t **out);

#endif /* DC_VERBS_RDMA_INTERNAL_H */
