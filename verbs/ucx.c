/*
 * ucx.c - the `ucx` transport: UCP active messages, progress-driven.
 *
 * One UCP context per process (init()), one UCP worker per connection and
 * per listener, so that an active-message handler's `arg` is its connection
 * and nothing is shared between connections.  Connection setup goes through
 * a UCP listener on a sockaddr (the client/server flow of UCX's
 * ucp_client_server example); then the HMAC challenge-response of auth.h
 * runs over active messages before any data is accepted.
 *
 * Wire: a message is sent as one or more PIECES, each one active message,
 * so that the CRC32C of each piece is computed while the piece is in cache:
 * on the sender just before the piece is posted, on the receiver right
 * after the piece lands (and while the next piece is still in flight; why,
 * with the figures: docs/ucx-notes.md).
 *
 *   AM 1 (DATA)  header = 48 bytes, payload = one piece of the message:
 *                  0..31  the transport header (transport.h) of type DATA:
 *                         seq, len = the WHOLE message's length, and
 *                         flags 0: crc = CRC32C of THIS PIECE's bytes, or
 *                         flags DC_VERBS_HDR_F_MSGCRC: crc = CRC32C of the
 *                         WHOLE message, the same in every piece (the
 *                         caller's, isend_crc; see "Caller's CRC32C")
 *                 32..35  off   offset of the piece in the message (LE)
 *                 36..39  step  the sender's piece size (>= 64 KiB, LE)
 *                 40..43  plen  piece length = min(step, len - off) (LE)
 *                 44..47  CRC32C of bytes 0..43
 *                Piece k covers [k*step, k*step + plen); a message of len
 *                bytes has ceil(len / step) pieces (an empty message one
 *                piece of 0 bytes).  The sender's step is a free choice
 *                (DELTACAST_UCX_PIECE, default 512 KiB); the receiver checks
 *                that the pieces of one message agree and tiles them with
 *                a bitmap (a piece seen twice in one attempt is a protocol
 *                error).  UCX picks eager or rendezvous per piece;
 *                rendezvous payloads land directly in the irecv() buffer at
 *                `off` (zero-copy, ucp_am_recv_data_nbx).
 *   AM 2 (CTRL)  header = transport header of type ACK / NACK, no payload.
 *   AM 3 (AUTH)  payload = one handshake message (see dc_ucx_auth_*).
 *
 *   sender                                   receiver
 *   isend: seq = window_push;
 *   per piece: crc32c, post  --DATA(seq,off,crc)-->  (held until the irecv
 *                                                     for seq is posted)
 *                                                    copy / rndv get of the
 *                                                    piece, crc32c check
 *                                                    ... all pieces landed:
 *   window_ack(seq), test() -> done   <--ACK(seq)--   every piece ok
 *   re-send every piece of the        <--NACK(seq)-   some piece mismatched
 *   borrowed buffer
 *
 * The ACK or NACK of a message is sent once ALL its pieces have landed and
 * been checked, so the pieces of a re-send never overlap those of the
 * attempt that failed (no attempt numbers on the wire).
 *
 * Caller's CRC32C (isend_crc): the engine computes a frame's CRC32C once,
 * when it encodes it, and a relay forwards frames it has verified, so the
 * sender need not read the buffer again.  Such a message's pieces carry
 * the message's CRC32C (flag MSGCRC) and the sender does not read them.
 * The receiver checks EVERY piece exactly as before, right after it lands
 * (the same CRC32C calls, same cost), keeps the piece's CRC32C (pcrc[k]),
 * and once all pieces have landed combines them in order (one GF(2)
 * multiply by x^(8 step) mod P per piece, dc_crc32c_combine_op) and
 * compares the result with the carried CRC32C; a mismatch NACKs the whole
 * message, as a damaged piece does.  On that NACK the sender drops the
 * caller's value and re-sends with per-piece CRC32Cs of its own (and warns
 * if the caller's was wrong), so a wrong caller CRC32C costs one round
 * trip, never a NACK loop, and is never delivered.
 *
 * Send pacing: sends queue their pieces (conn->sq, in seq order) and
 * dc_ucx_pump() posts them while fewer than `ahead` pieces are in UCP's
 * hands (DELTACAST_UCX_AHEAD bytes, default 1 MiB): with rendezvous, UCP
 * reads a piece only when the receiver asks for it, so an unbounded
 * look-ahead would checksum pieces long before they move (out of cache).
 *
 * Measurements behind the defaults of the piece size, the look-ahead and
 * the spin below, and what was tried without gain: docs/ucx-notes.md.
 *
 * Waiting (dc_ucx_wait): a blocking wait first polls the worker for up to
 * config ucx_spin_us (200 us), calling sched_yield() between polls, and
 * sleeps on the event fd only when nothing came (sleeping at once cost a
 * wake-up per event on both sides; polling without yielding starved a peer
 * that shares our core).
 * After a sleep longer than DC_UCX_SPIN_IDLE_NS the link counts as idle and
 * waits sleep at once, until one wakes sooner: an idle connection costs no
 * CPU.  No polling when the process may use one CPU only.
 *
 * UCX_TCP_RX_SEG_SIZE=8K measured faster but is not set: UCX needs the same
 * value on both ends and aborts otherwise (docs/ucx-notes.md).
 *
 * The receive side keeps a ring of DC_VERBS_MAX_INFLIGHT slots indexed by
 * seq: a message may arrive before its irecv() is posted (held: eager data
 * kept with UCS_INPROGRESS, a rendezvous descriptor kept for later), and an
 * irecv() may be posted before its message arrives.  The sender's window
 * bounds seqs to [rbase, rbase + MAX): anything outside is a protocol error.
 *
 * Reconnect and resume (transport.h, "Hop reliability"): a connection that
 * loses its endpoint after authentication goes BROKEN.  The client re-dials
 * the same sockaddr with the same 64-bit session id and a higher epoch in
 * its HELLO; after the handshake the server's listener (accept()) finds the
 * accepted connection of that session and hands it the new worker and
 * endpoint.  Both sides then re-send every un-ACKED message in seq order,
 * whole (all its pieces); the receivers drop duplicates (ACKing them again,
 * once per message: on its piece at offset 0), so nothing is lost or
 * duplicated.  Half-received messages are discarded (they were not ACKed:
 * their pieces are forgotten and they arrive again whole).
 * An orderly close sends BYE first, so the peer fails (DC_ERR_RESET) instead
 * of re-dialing.  Recovery gives up after timeout_ms.  The fault hook's
 * drop_after= cuts the connection before the message that crosses the
 * limit (a UCP message cannot be truncated): with pieces, before the piece
 * that crosses it.  corrupt= damages received pieces before their CRC32C
 * check (P is per piece; the whole message is then NACKed).
 *
 * GPU memory (verbs/gpumem.h): reg_mem(DC_VERBS_MEM_CUDA) maps the buffer
 * with ucp_mem_map(memory type CUDA), so UCX moves it zero-copy where it is
 * built with CUDA transports (cuda_copy, cuda_ipc, gdr_copy, GPUDirect RDMA
 * over rc/dc); every piece's CRC32C is then computed and checked by the GPU
 * (dc_kern_cuda_crc32c), and pieces that arrive eagerly in host memory are
 * copied into the device buffer (cudaMemcpy) before their check; NACK,
 * re-send and resume are unchanged.  Device memory is recognised without a
 * registration too (cuPointerGetAttribute).  A UCX without CUDA support
 * (its context reports no CUDA memory type: `ucx_info -d` lists no cuda
 * memory domain) would make the CPU touch device memory: reg_mem and
 * isend/irecv of device memory then fail with DC_ERR_UNSUPPORTED saying so,
 * and caps() leaves DC_VERBS_MEM_CUDA out (never a silent host copy).
 */
#include "verbs/ucx.h"

#include "kernels/kern.h"
#include "kernels/kern_cuda.h"
#include "verbs/auth.h"
#include "verbs/fault.h"
#include "verbs/gpumem.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

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
    uint64_t session;   /* client: random id; server: the peer's */
    uint32_t epoch;     /* client: dial count; server: the peer's last */
    struct sockaddr_storage raddr; /* client: where to re-dial */
    socklen_t raddr_len;
    int reconnecting;   /* client: re-dial handshake in progress */
    int resend_pending; /* re-send the un-ACKed window after a resume */
    double next_dial;
    dc_ucx_epref_t *epref;
    dc_ucx_listener_t *lst;        /* server: registry that can re-attach us */
    struct dc_ucx_conn *reg_next;
    double deadline; /* handshake, or recovery once BROKEN (dc_now_s) */
    uint32_t timeout_ms;
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
    dc_ucx_conn_t *reg; /* accepted connections, by session, for re-attach */
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
    dc_ucx_conn_t *handshaking;
};

/* --- process-wide context ------------------------------------------------- */

static pthread_once_t dc_ucx_once = PTHREAD_ONCE_INIT;
static ucp_context_h dc_ucx_ctx;
static dc_status_t dc_ucx_init_st = DC_ERR_UNSUPPORTED;
static char dc_ucx_init_msg[256];
static uint64_t dc_ucx_mem_types;
/* Always readable (an eventfd holding 1 that nobody reads): what fd()
 * returns while a connection has work pending (-1 if eventfd failed: the
 * caller then polls with its timeout). */
static int dc_ucx_ready_fd = -1;
/* This process's UCX RDMA resources ("rc_mlx5/mlx5_0:1,..."; empty: none),
 * to tell a connection that leaves them unused (dc_ucx_rdma_unused). */
static char dc_ucx_rdma_res[256];
/* Their devices, each once ("mlx5_0:1,mlx5_1:1"): what dc_ucx_ctx_for adds
 * to an interface (room for it beside any interface name, IFNAMSIZ). */
static char dc_ucx_rdma_devs[200];

/* An RDMA transport of UCX: rc_verbs, rc_mlx5, ud_*, dc_mlx5, srd (EFA). */
static int dc_ucx_tl_is_rdma(const char *tl, size_t n)
{
    static const char *const pfx[] = {"rc_", "ud_", "dc_", "srd"};
    for (size_t i = 0; i < DC_ARRAY_SIZE(pfx); i++)
        if (n >= strlen(pfx[i]) && memcmp(tl, pfx[i], strlen(pfx[i])) == 0)
            return 1;
    return 0;
}

/* A transport that only reaches this node: shared memory, loopback. */
static int dc_ucx_tl_is_local(const char *tl, size_t n)
{
    static const char *const names[] = {"self", "posix", "sysv", "cma", "xpmem", "knem"};
    for (size_t i = 0; i < DC_ARRAY_SIZE(names); i++)
        if (n == strlen(names[i]) && memcmp(tl, names[i], n) == 0)
            return 1;
    return 0;
}

dc_status_t dc_ucx_rdma_resources(const char *info, char *out, size_t len)
{
    if (!out || !len)
        return dc_error(DC_ERR_INVALID, "dc_ucx_rdma_resources: no output buffer");
    size_t o = 0;
    out[0] = 0;
    /* "#      resource 4  :  md 3  dev 3  flags -- rc_mlx5/mlx5_0:1" */
    for (const char *line = info; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t ll = nl ? (size_t)(nl - line) : strlen(line);
        const char *r = memmem(line, ll, "resource", 8);
        const char *dash = r ? memmem(r, ll - (size_t)(r - line), "-- ", 3) : NULL;
        if (dash) {
            const char *tok = dash + 3;
            size_t n = ll - (size_t)(tok - line), w = strcspn(tok, " \t\r\n");
            if (w < n)
                n = w;
            const char *slash = memchr(tok, '/', n);
            if (slash && dc_ucx_tl_is_rdma(tok, (size_t)(slash - tok)) &&
                o + n + 2 < len) {
                o += (size_t)snprintf(out + o, len - o, "%s%.*s", o ? "," : "", (int)n, tok);
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    return DC_OK;
}

void dc_ucx_rdma_devices(const char *res, char *out, size_t len)
{
    size_t o = 0;
    out[0] = 0;
    for (const char *p = res; *p;) {
        size_t n = strcspn(p, ",");
        const char *slash = memchr(p, '/', n);
        size_t dl = slash ? n - (size_t)(slash + 1 - p) : 0;
        if (dl > 0) {
            int dup = 0;
            for (const char *q = out; *q && !dup;) {
                size_t m = strcspn(q, ",");
                dup = m == dl && memcmp(q, slash + 1, dl) == 0;
                q += m + (q[m] == ',');
            }
            if (!dup && o + dl + 2 < len)
                o += (size_t)snprintf(out + o, len - o, "%s%.*s", o ? "," : "", (int)dl,
                                      slash + 1);
        }
        p += n + (p[n] == ',');
    }
}

const char *dc_ucx_rdma_unused(const char *lanes, const char *local_rdma, char *buf, size_t len)
{
    if (!lanes || !local_rdma || !*local_rdma || !buf || !len)
        return NULL;
    /* lanes: "tl/dev,tl/dev,..." */
    for (const char *p = lanes; *p;) {
        size_t n = strcspn(p, ",");
        const char *slash = memchr(p, '/', n);
        size_t tl = slash ? (size_t)(slash - p) : n;
        if (dc_ucx_tl_is_rdma(p, tl) || dc_ucx_tl_is_local(p, tl))
            return NULL;
        p += n;
        if (*p == ',')
            p++;
    }
    snprintf(buf, len,
             "UCX runs this connection over %s although this node has RDMA (%s): the data "
             "moves over TCP.  The peer may have no RDMA device on a common fabric, or "
             "UCX_TLS / UCX_NET_DEVICES exclude it here or there (`ucx_info -d` lists what "
             "UCX can use)",
             *lanes ? lanes : "no known transport", local_rdma);
    return buf;
}

/* A UCP context; net_devices (UCX_NET_DEVICES syntax) NULL: UCX's own
 * configuration.  On failure *what names the call that failed. */
static ucs_status_t dc_ucx_ctx_create(const char *net_devices, ucp_context_h *out,
                                      const char **what)
{
    ucp_config_t *cfg;
    ucs_status_t s = ucp_config_read(NULL, NULL, &cfg);
    if (s != UCS_OK) {
        *what = "ucp_config_read";
        return s;
    }
    if (net_devices && (s = ucp_config_modify(cfg, "NET_DEVICES", net_devices)) != UCS_OK) {
        ucp_config_release(cfg);
        *what = "ucp_config_modify(NET_DEVICES)";
        return s;
    }
    ucp_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
    p.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    p.name = "deltacast";
    s = ucp_init(&p, cfg, out);
    ucp_config_release(cfg);
    *what = "ucp_init";
    return s;
}

static void dc_ucx_init_once(void)
{
    /* A node restarted on the same port (recovery) must be able to listen
     * again while the old socket lingers in TIME_WAIT; the user's own
     * setting wins. */
    /* (uct component settings are read from the environment only; this
     * runs once, before any UCX thread exists.) */
    setenv("UCX_TCP_CM_REUSEADDR", "y", 0);
    setenv("UCX_RDMA_CM_REUSEADDR", "y", 0);
    dc_ucx_ready_fd = eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK);
    const char *what = NULL;
    ucs_status_t s = dc_ucx_ctx_create(NULL, &dc_ucx_ctx, &what);
    if (s != UCS_OK) {
        snprintf(dc_ucx_init_msg, sizeof(dc_ucx_init_msg), "ucx: %s failed: %s%s", what,
                 ucs_status_string(s),
                 strcmp(what, "ucp_init") == 0 ? " (check UCX_TLS / UCX_NET_DEVICES)" : "");
        return;
    }
    ucp_context_attr_t a;
    memset(&a, 0, sizeof(a));
    a.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    if (ucp_context_query(dc_ucx_ctx, &a) == UCS_OK)
        dc_ucx_mem_types = a.memory_types;
    char *info = NULL;
    size_t ilen = 0;
    FILE *f = open_memstream(&info, &ilen);
    if (f) {
        ucp_context_print_info(dc_ucx_ctx, f);
        fclose(f);
        dc_ucx_rdma_resources(info, dc_ucx_rdma_res, sizeof(dc_ucx_rdma_res));
        dc_ucx_rdma_devices(dc_ucx_rdma_res, dc_ucx_rdma_devs, sizeof(dc_ucx_rdma_devs));
        free(info);
    }
    dc_ucx_init_st = DC_OK;
}

static dc_status_t dc_ucx_init(void)
{
    pthread_once(&dc_ucx_once, dc_ucx_init_once);
    if (dc_ucx_init_st != DC_OK)
        return dc_error(DC_ERR_UNSUPPORTED, "%s", dc_ucx_init_msg);
    return DC_OK;
}

/* DC_OK when messages in GPU memory can move here: UCX has CUDA support
 * (zero-copy), this build has the CUDA kernels (the hop CRC32C) and a GPU is
 * present; else DC_ERR_UNSUPPORTED saying which is missing. */
static dc_status_t dc_ucx_cuda_support(void)
{
    if (!(dc_ucx_mem_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)))
        return dc_error(DC_ERR_UNSUPPORTED,
                        "ucx: this UCX (%s) is built without CUDA support (its context reports "
                        "memory types 0x%llx, no CUDA; `ucx_info -d` lists no cuda memory "
                        "domain): GPU memory would need a host copy, which deltacast does not "
                        "do silently",
                        ucp_get_version_string(), (unsigned long long)dc_ucx_mem_types);
    if (!DC_HAVE_CUDA)
        return dc_error(DC_ERR_UNSUPPORTED, "ucx: GPU memory needs the CUDA kernels for its "
                                            "CRC32C, and this build has none (configure with "
                                            "nvcc, -Dcuda=enabled)");
    if (!dc_kern_cuda_available())
        return dc_error(DC_ERR_UNSUPPORTED, "ucx: GPU memory, but no CUDA device is usable");
    return DC_OK;
}

const dc_verbs_ops_t *dc_ucx_ops_get(void)
{
    return &dc_ucx_ops;
}

static dc_status_t dc_ucx_caps(dc_verbs_caps_t *out)
{
    if (!out || out->size < sizeof(size_t))
        return dc_error(DC_ERR_INVALID, "ucx caps: bad struct size");
    dc_status_t st = dc_ucx_init();
    if (st != DC_OK)
        return st;
    dc_verbs_caps_t c;
    memset(&c, 0, sizeof(c));
    c.size = sizeof(c);
    c.mem_kinds = DC_VERBS_MEM_HOST;
    if (dc_ucx_cuda_support() == DC_OK)
        c.mem_kinds |= DC_VERBS_MEM_CUDA;
    c.max_streams = 1;
    c.max_msg_size = DC_VERBS_DEFAULT_MAX_MSG;
    c.max_inflight = DC_VERBS_MAX_INFLIGHT;
    const char *tls = getenv("UCX_TLS");
    const char *dev = getenv("UCX_NET_DEVICES");
    snprintf(c.device, sizeof(c.device), "ucx tls=%s dev=%s", tls && *tls ? tls : "all",
             dev && *dev ? dev : "all");
    size_t n = DC_MIN(out->size, sizeof(c));
    memcpy((char *)out + sizeof(size_t), (char *)&c + sizeof(size_t), n - sizeof(size_t));
    return DC_OK;
}

/* --- helpers -------------------------------------------------------------- */

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

static void dc_ucx_fail(dc_ucx_conn_t *c, dc_status_t st, const char *fmt, ...) DC_PRINTF(3, 4);

static void dc_ucx_fail(dc_ucx_conn_t *c, dc_status_t st, const char *fmt, ...)
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
static void dc_ucx_break(dc_ucx_conn_t *c, const char *what, ucs_status_t status)
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
    if (c->reconnecting && c->state != DC_UCX_FAILED) {
        c->state = DC_UCX_BROKEN; /* the re-dial failed: try again until the deadline */
        c->next_dial = dc_now_s() + 0.1;
        return;
    }
    dc_ucx_fail(c, DC_ERR_RESET, "%s: %s", what, ucs_status_string(status));
}

static dc_status_t dc_ucx_conn_error(const dc_ucx_conn_t *c)
{
    return dc_error(c->err, "%s", c->errmsg);
}

static void dc_ucx_sockaddr_str(const struct sockaddr *sa, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &s4->sin_addr, host, sizeof(host));
        port = ntohs(s4->sin_port);
        snprintf(buf, len, "%s:%u", host, port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof(host));
        port = ntohs(s6->sin6_port);
        snprintf(buf, len, "[%s]:%u", host, port);
    } else {
        snprintf(buf, len, "(family %d)", sa->sa_family);
    }
}

static dc_status_t dc_ucx_resolve(const char *addr, int passive, struct sockaddr_storage *ss,
                                  socklen_t *sslen)
{
    char host[256];
    uint16_t port;
    dc_status_t st = dc_verbs_parse_addr(addr, host, sizeof(host), &port);
    if (st != DC_OK)
        return st;
    char portstr[8];
    snprintf(portstr, sizeof(portstr), "%u", port);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    int rc = getaddrinfo(host, portstr, &hints, &res);
    if (rc != 0 || !res)
        return dc_error(DC_ERR_INVALID, "ucx: cannot resolve '%s': %s", addr,
                        rc ? gai_strerror(rc) : "no address");
    if (res->ai_addrlen > sizeof(*ss)) {
        freeaddrinfo(res);
        return dc_error(DC_ERR_INTERNAL, "ucx: address too long");
    }
    memset(ss, 0, sizeof(*ss));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *sslen = res->ai_addrlen;
    freeaddrinfo(res);
    return DC_OK;
}

/* --- one UCP context per network interface ---------------------------------- */

/*
 * UCX 1.13 takes every TCP interface as reaching every peer, and on a server
 * whose interfaces it cannot tell apart (no PCI device behind them: veth,
 * virtual NICs, containers) the endpoint of an accepted connection may move
 * its lane to another interface than the one the request came in on; the
 * connection then failed ("Endpoint timeout").  Measured here: a server in
 * a network namespace with two veths, the client behind one of them.  So,
 * unless the user set UCX_NET_DEVICES, a listener's context uses only the
 * interface of its bind address, and a client's only the interface the
 * kernel routes the server's address through, plus every RDMA device UCX
 * found (those are not TCP: they keep their own lanes and rails).  A
 * wildcard bind address, or an address on no interface, keeps UCX's choice.
 * Contexts are shared by all connections on the same device list.
 */
#define DC_UCX_MAX_CTX 8
static struct {
    char devs[256];
    ucp_context_h ctx;
} dc_ucx_ctxs[DC_UCX_MAX_CTX];
static unsigned dc_ucx_nctx;
static pthread_mutex_t dc_ucx_ctx_lock = PTHREAD_MUTEX_INITIALIZER;

static int dc_ucx_same_addr(const struct sockaddr *a, const struct sockaddr *b)
{
    if (a->sa_family != b->sa_family)
        return 0;
    if (a->sa_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->sa_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                      &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
    return 0;
}

static int dc_ucx_is_wildcard(const struct sockaddr *a)
{
    if (a->sa_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr == htonl(INADDR_ANY);
    if (a->sa_family == AF_INET6)
        return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)a)->sin6_addr);
    return 1;
}

/* The interface that holds local address `a`, into name[len]: 0 if found,
 * 1 if found but not up and running (UCX would not list it: it reads its
 * devices once, when the context starts), -1 if not found. */
static int dc_ucx_ifname_of(const struct sockaddr *a, char *name, size_t len)
{
    struct ifaddrs *ifs = NULL, *i;
    if (getifaddrs(&ifs) != 0)
        return -1;
    int rc = -1;
    for (i = ifs; i; i = i->ifa_next)
        if (i->ifa_addr && dc_ucx_same_addr(i->ifa_addr, a) && strlen(i->ifa_name) < len) {
            snprintf(name, len, "%s", i->ifa_name);
            rc = (i->ifa_flags & (IFF_UP | IFF_RUNNING)) == (IFF_UP | IFF_RUNNING) ? 0 : 1;
            break;
        }
    freeifaddrs(ifs);
    return rc;
}

/* The local address the kernel picks to reach `peer` (connect() of a UDP
 * socket sends nothing): 0 with *src set. */
static int dc_ucx_route_src(const struct sockaddr *peer, socklen_t plen,
                            struct sockaddr_storage *src)
{
    int fd = socket(peer->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    socklen_t sl = sizeof(*src);
    int rc = connect(fd, peer, plen) == 0 && getsockname(fd, (struct sockaddr *)src, &sl) == 0
                 ? 0
                 : -1;
    close(fd);
    return rc;
}

/* The context for a listener bound to `a` (passive) or a client dialing
 * `a`: see above.  Falls back to the process-wide context (with a warning
 * if creating one failed). */
static ucp_context_h dc_ucx_ctx_for(const struct sockaddr *a, socklen_t alen, int passive)
{
    const char *user = getenv("UCX_NET_DEVICES");
    if (user && *user)
        return dc_ucx_ctx;
    struct sockaddr_storage local;
    if (passive) {
        if (dc_ucx_is_wildcard(a))
            return dc_ucx_ctx;
        memcpy(&local, a, DC_MIN((size_t)alen, sizeof(local)));
    } else if (dc_ucx_route_src(a, alen, &local) != 0) {
        return dc_ucx_ctx;
    }
    char devs[256];
    int found = dc_ucx_ifname_of((const struct sockaddr *)&local, devs, sizeof(devs));
    if (found == 1)
        DC_LOG_WARN("ucx: network interface %s is not up and running; using all devices (its "
                    "connections may fail on a host with several interfaces)",
                    devs);
    if (found != 0)
        return dc_ucx_ctx;
    if (*dc_ucx_rdma_devs) {
        size_t o = strlen(devs);
        snprintf(devs + o, sizeof(devs) - o, ",%s", dc_ucx_rdma_devs);
    }
    ucp_context_h ctx = dc_ucx_ctx;
    pthread_mutex_lock(&dc_ucx_ctx_lock);
    unsigned k = 0;
    while (k < dc_ucx_nctx && strcmp(dc_ucx_ctxs[k].devs, devs) != 0)
        k++;
    if (k < dc_ucx_nctx) {
        ctx = dc_ucx_ctxs[k].ctx;
    } else if (dc_ucx_nctx < DC_UCX_MAX_CTX) {
        const char *what = NULL;
        ucs_status_t s = dc_ucx_ctx_create(devs, &ctx, &what);
        if (s == UCS_OK) {
            snprintf(dc_ucx_ctxs[dc_ucx_nctx].devs, sizeof(dc_ucx_ctxs[0].devs), "%s", devs);
            dc_ucx_ctxs[dc_ucx_nctx++].ctx = ctx;
            DC_LOG_INFO("ucx: network devices %s (the interface of the address in use; "
                        "UCX_NET_DEVICES overrides)",
                        devs);
        } else {
            ctx = dc_ucx_ctx;
            DC_LOG_WARN("ucx: a context on network devices %s: %s failed (%s); using all "
                        "devices",
                        devs, what, ucs_status_string(s));
        }
    } else {
        DC_LOG_WARN("ucx: more than %d network device lists in one process; %s uses all "
                    "devices (set UCX_NET_DEVICES if connections fail)",
                    DC_UCX_MAX_CTX, devs);
    }
    pthread_mutex_unlock(&dc_ucx_ctx_lock);
    return ctx;
}

/* --- control messages ------------------------------------------------------ */

static dc_ucx_ctrl_t *dc_ucx_ctrl_get(dc_ucx_conn_t *c)
{
    dc_ucx_ctrl_t *k = c->ctrl_free;
    if (k) {
        c->ctrl_free = k->next_free;
        return k;
    }
    k = calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    k->conn = c;
    k->next_all = c->ctrl_all;
    c->ctrl_all = k;
    return k;
}

static void dc_ucx_ctrl_put(dc_ucx_conn_t *c, dc_ucx_ctrl_t *k)
{
    k->next_free = c->ctrl_free;
    c->ctrl_free = k;
}

static void dc_ucx_ctrl_cb(void *request, ucs_status_t status, void *user_data)
{
    dc_ucx_ctrl_t *k = user_data;
    dc_ucx_conn_t *c = k->conn;
    c->outstanding--;
    dc_ucx_ctrl_put(c, k);
    if (status != UCS_OK && status != UCS_ERR_CANCELED)
        dc_ucx_break(c, "control message failed", status);
    ucp_request_free(request);
}

/* Parameters of a UCP operation that completes through a callback with
 * user data `ud`, on registered memory when `mr` is not NULL (the caller
 * sets the callback itself: send and receive callbacks differ). */
static void dc_ucx_op_param(ucp_request_param_t *p, void *ud, const dc_ucx_mr_t *mr)
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
static void dc_ucx_op_mem(ucp_request_param_t *p, const dc_ucx_req_t *r)
{
    if (r->mkind == DC_VERBS_MEM_CUDA) {
        p->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
        p->memory_type = UCS_MEMORY_TYPE_CUDA;
    }
}

/* 1 when a good-bye can go out: the endpoint is up and the connection
 * established, or failed by us while it was (fail_live). */
static int dc_ucx_bye_ok(const dc_ucx_conn_t *c)
{
    return c->ep && (c->state == DC_UCX_ESTABLISHED ||
                     (c->state == DC_UCX_FAILED && c->fail_live));
}

/* Send a header-only (ACK/NACK) or auth message. */
static void dc_ucx_ctrl_send(dc_ucx_conn_t *c, unsigned am_id, uint8_t type, uint64_t seq,
                             const uint8_t *auth, size_t auth_len)
{
    /* ACK/NACK/BYE only on a live connection: after a break the endpoint
     * is dead (UCX would complain) and the peer re-sends what we did not
     * ACK anyway. */
    if (!c->ep || (am_id == DC_UCX_AM_CTRL && c->state != DC_UCX_ESTABLISHED &&
                   !(type == DC_VERBS_MSG_BYE && dc_ucx_bye_ok(c))))
        return;
    dc_ucx_ctrl_t *k = dc_ucx_ctrl_get(c);
    if (!k) {
        dc_ucx_fail(c, DC_ERR_NOMEM, "out of memory for a control message");
        return;
    }
    ucp_request_param_t p;
    dc_ucx_op_param(&p, k, NULL);
    p.cb.send = dc_ucx_ctrl_cb;
    ucs_status_ptr_t r;
    if (am_id == DC_UCX_AM_AUTH) {
        memcpy(k->auth, auth, auth_len);
        r = ucp_am_send_nbx(c->ep, am_id, NULL, 0, k->auth, auth_len, &p);
        c->stats.wire_bytes_sent += auth_len;
    } else {
        dc_verbs_hdr_t h = {.type = type, .seq = seq};
        dc_verbs_hdr_pack(&h, k->hdr);
        r = ucp_am_send_nbx(c->ep, am_id, k->hdr, sizeof(k->hdr), NULL, 0, &p);
        c->stats.wire_bytes_sent += DC_VERBS_HDR_SIZE;
    }
    if (r == NULL) {
        dc_ucx_ctrl_put(c, k);
    } else if (UCS_PTR_IS_ERR(r)) {
        dc_ucx_ctrl_put(c, k);
        dc_ucx_break(c, "cannot send a control message", UCS_PTR_STATUS(r));
    } else {
        c->outstanding++;
    }
}

static void dc_ucx_queue_ctrl(dc_ucx_conn_t *c, uint8_t type, uint64_t seq)
{
    if (c->nctrl == DC_UCX_CTRLQ) {
        dc_ucx_fail(c, DC_ERR_FORMAT, "peer floods the connection (control queue full)");
        return;
    }
    c->ctrlq[c->nctrl].type = type;
    c->ctrlq[c->nctrl].seq = seq;
    c->nctrl++;
}

/* --- data sends ------------------------------------------------------------ */

static void dc_ucx_send_cb(void *request, ucs_status_t status, void *user_data)
{
    dc_ucx_req_t *r = user_data;
    dc_ucx_conn_t *c = r->conn;
    c->outstanding--;
    r->ucx_pending--;
    if (c->pieces_out)
        c->pieces_out--; /* the next piece is posted by dc_ucx_pump() */
    if (status != UCS_OK && status != UCS_ERR_CANCELED)
        dc_ucx_break(c, "send failed", status);
    ucp_request_free(request);
}

/* Piece k of a send request: its offset and length. */
static void dc_ucx_piece_span(const dc_ucx_conn_t *c, const dc_ucx_req_t *r, uint32_t k,
                              size_t *off, size_t *len)
{
    (void)c;
    size_t o = (size_t)k * r->step;
    *off = o;
    *len = DC_MIN((size_t)r->step, r->len - o);
}

/* Fill the DATA header of piece k (computes the piece's CRC32C; on the GPU
 * for device memory, which is the only way it can fail). */
static dc_status_t dc_ucx_piece_hdr(const dc_ucx_conn_t *c, dc_ucx_req_t *r, uint32_t k)
{
    size_t off, len;
    dc_ucx_piece_span(c, r, k, &off, &len);
    uint8_t *h = r->phdr + (size_t)k * DC_UCX_DHDR_SIZE;
    uint32_t crc = 0;
    uint8_t flags = 0;
    if (r->crc_known) {
        /* the caller's CRC32C of the whole message: the buffer is not read
         * here; the receiver checks every piece and combines them */
        crc = r->ccrc;
        flags = DC_VERBS_HDR_F_MSGCRC;
    } else {
        dc_status_t st = dc_verbs_crc32c(r->mkind, r->buf + off, len, &crc);
        if (st != DC_OK)
            return st;
        if (r->ccrc_nacked) {
            /* re-sent with our own CRC32Cs after the caller's was NACKed:
             * combine them (pieces are built in order) and say so if the
             * caller's was wrong (the re-send is checked against ours, so
             * it is delivered all the same) */
            r->ccrc_acc = dc_crc32c_combine(r->ccrc_acc, crc, len);
            if (k + 1 == r->npieces) {
                r->ccrc_nacked = 0;
                if (r->ccrc_acc != r->ccrc)
                    DC_LOG_WARN("ucx %s: message %llu: the caller's CRC32C 0x%08x is wrong "
                                "(its bytes' is 0x%08x); re-sent with the transport's own",
                                c->peer, (unsigned long long)r->seq, r->ccrc, r->ccrc_acc);
            }
        }
    }
    dc_verbs_hdr_t th = {.type = DC_VERBS_MSG_DATA,
                         .flags = flags,
                         .seq = r->seq,
                         .len = (uint32_t)r->len,
                         .crc = crc};
    dc_verbs_hdr_pack(&th, h);
    dc_store_le32(h + 32, (uint32_t)off);
    dc_store_le32(h + 36, r->step);
    dc_store_le32(h + 40, (uint32_t)len);
    dc_store_le32(h + 44, dc_crc32c(0, h, 44));
    return DC_OK;
}

/* Post piece k of r (its header is filled). */
static void dc_ucx_post_piece(dc_ucx_conn_t *c, dc_ucx_req_t *r, uint32_t k)
{
    if (c->state != DC_UCX_ESTABLISHED || !c->ep)
        return; /* re-sent from the window after the resume */
    size_t off, len;
    dc_ucx_piece_span(c, r, k, &off, &len);
    ucp_request_param_t p;
    dc_ucx_op_param(&p, r, r->mr);
    dc_ucx_op_mem(&p, r);
    p.cb.send = dc_ucx_send_cb;
    size_t want = len + DC_UCX_DHDR_SIZE;
    if (dc_fault_active()) {
        size_t lim = dc_fault_send_limit(want);
        if (lim < want) {
            /* A UCP message is atomic: cut the connection before it. */
            dc_fault_sent(lim);
            if (dc_fault_drop_due())
                dc_ucx_break(c, "fault injection cut the connection", UCS_OK);
            return;
        }
    }
    ucs_status_ptr_t s = ucp_am_send_nbx(c->ep, DC_UCX_AM_DATA,
                                         r->phdr + (size_t)k * DC_UCX_DHDR_SIZE,
                                         DC_UCX_DHDR_SIZE, r->buf + off, len, &p);
    c->stats.wire_bytes_sent += want;
    if (dc_fault_active())
        dc_fault_sent(want);
    if (s == NULL)
        return;
    if (UCS_PTR_IS_ERR(s)) {
        dc_ucx_break(c, "cannot send a message", UCS_PTR_STATUS(s));
        return;
    }
    r->ucx_pending++;
    c->outstanding++;
    c->pieces_out++;
}

static void dc_ucx_sq_unlink(dc_ucx_conn_t *c, dc_ucx_req_t *r)
{
    dc_ucx_req_t **pp = &c->sq, *prev = NULL;
    while (*pp && *pp != r) {
        prev = *pp;
        pp = &(*pp)->qnext;
    }
    if (*pp) {
        *pp = r->qnext;
        if (c->sq_tail == r)
            c->sq_tail = prev;
    }
    r->qnext = NULL;
    r->queued = 0;
}

/*
 * Post queued pieces while fewer than c->ahead are in UCP's hands.  A
 * piece's CRC32C is computed here, just before it is posted, and the
 * bounded look-ahead keeps the transport reading it soon after, while it
 * is still in cache (with rendezvous, UCP reads a piece only when the
 * receiver asks for it).
 */
static void dc_ucx_pump(dc_ucx_conn_t *c)
{
    while (c->sq && c->pieces_out < c->ahead && c->state == DC_UCX_ESTABLISHED && c->ep) {
        dc_ucx_req_t *r = c->sq;
        uint32_t k = r->next_piece++;
        if (r->next_piece >= r->npieces)
            dc_ucx_sq_unlink(c, r);
        if (k >= r->nhdr) {
            if (dc_ucx_piece_hdr(c, r, k) != DC_OK) {
                dc_ucx_fail(c, dc_last_status(), "CRC32C of a piece in GPU memory: %s",
                            dc_last_error());
                return;
            }
            r->nhdr = k + 1;
        }
        dc_ucx_post_piece(c, r, k);
    }
}

/* (Re-)send every piece of r: a NACK or a resume re-sends the whole message
 * from the borrowed buffer (the headers computed so far are kept). */
static void dc_ucx_post_send(dc_ucx_conn_t *c, dc_ucx_req_t *r)
{
    if (r->queued)
        return; /* its pieces are still being posted */
    r->next_piece = 0;
    r->queued = 1;
    r->qnext = NULL;
    if (c->sq_tail)
        c->sq_tail->qnext = r;
    else
        c->sq = r;
    c->sq_tail = r;
    dc_ucx_pump(c);
}

/* --- receive path ---------------------------------------------------------- */

static dc_ucx_piece_t *dc_ucx_piece_get(dc_ucx_conn_t *c)
{
    dc_ucx_piece_t *p = c->piece_free;
    if (p) {
        c->piece_free = p->next;
    } else {
        if (!(p = calloc(1, sizeof(*p))))
            return NULL;
        p->next_all = c->piece_all;
        c->piece_all = p;
    }
    p->next = NULL;
    p->conn = c;
    p->req = NULL;
    p->data = NULL;
    p->rndv = p->owned = 0;
    return p;
}

static void dc_ucx_piece_put(dc_ucx_conn_t *c, dc_ucx_piece_t *p)
{
    p->data = NULL;
    p->req = NULL;
    p->next = c->piece_free;
    c->piece_free = p;
}

/* Give a held piece's data back (UCP's or our copy). */
static void dc_ucx_piece_release(dc_ucx_conn_t *c, dc_ucx_piece_t *p)
{
    if (p->data) {
        if (!p->rndv)
            c->held_bytes -= p->len;
        if (p->owned)
            free(p->data);
        else
            ucp_am_data_release(c->worker, p->data);
    }
    dc_ucx_piece_put(c, p);
}

static void dc_ucx_slot_release_held(dc_ucx_conn_t *c, dc_ucx_slot_t *s)
{
    while (s->held) {
        dc_ucx_piece_t *p = s->held;
        s->held = p->next;
        dc_ucx_piece_release(c, p);
    }
    s->held_tail = NULL;
}

/* Forget the current attempt of a slot (keeps its irecv and bitmap buffer). */
static void dc_ucx_slot_reset(dc_ucx_conn_t *c, dc_ucx_slot_t *s, int keep_req)
{
    dc_ucx_slot_release_held(c, s);
    dc_ucx_req_t *req = keep_req ? s->req : NULL;
    uint8_t *seen = s->seen;
    size_t cap = s->seen_cap;
    uint32_t *pcrc = s->pcrc;
    size_t pcap = s->pcrc_cap;
    memset(s, 0, sizeof(*s));
    s->req = req;
    s->seen = seen;
    s->seen_cap = cap;
    s->pcrc = pcrc;
    s->pcrc_cap = pcap;
}

static void dc_ucx_slot_advance(dc_ucx_conn_t *c)
{
    for (;;) {
        dc_ucx_slot_t *s = &c->slot[c->rbase % DC_UCX_RING];
        if (s->state != DC_UCX_SLOT_DONE)
            break;
        dc_ucx_slot_reset(c, s, 0);
        c->rbase++;
    }
}

/*
 * Piece [off, off+len) of the slot's message is in s->req->buf: check its
 * CRC32C (the bytes just landed: in cache).  When every piece of the
 * attempt is checked, ACK the message, or NACK it if any piece failed.
 */
static void dc_ucx_verify_piece(dc_ucx_conn_t *c, dc_ucx_slot_t *s, uint32_t off, uint32_t len,
                                uint32_t want)
{
    dc_ucx_req_t *r = s->req;
    if (dc_fault_active())
        dc_verbs_fault_on_recv(r->mkind, r->buf + off, len);
    uint32_t crc = 0;
    if (dc_verbs_crc32c(r->mkind, r->buf + off, len, &crc) != DC_OK) {
        dc_ucx_fail(c, dc_last_status(), "CRC32C of a piece in GPU memory: %s",
                    dc_last_error());
        return;
    }
    s->ndone++;
    if (s->msgcrc) {
        /* combined with the other pieces' once all have landed */
        s->pcrc[off / s->step] = crc;
    } else if (crc != want) {
        DC_LOG_DEBUG("ucx %s: message %llu, piece at %u (%u bytes): CRC32C mismatch "
                     "(0x%08x != 0x%08x)",
                     c->peer, (unsigned long long)s->seq, off, len, crc, want);
        s->nbad++;
    }
    if (s->ndone < s->npieces)
        return;
    uint64_t seq = s->seq;
    if (s->msgcrc) {
        uint32_t op = dc_crc32c_shift_op(s->step), mcrc = 0;
        uint32_t last = s->npieces - 1;
        for (uint32_t k = 0; k < last; k++)
            mcrc = dc_crc32c_combine_op(mcrc, s->pcrc[k], op);
        mcrc = dc_crc32c_combine(mcrc, s->pcrc[last], s->len - (size_t)last * s->step);
        if (mcrc != s->mcrc) {
            DC_LOG_DEBUG("ucx %s: message %llu: CRC32C mismatch (0x%08x != 0x%08x)", c->peer,
                         (unsigned long long)seq, mcrc, s->mcrc);
            s->nbad++;
        }
    }
    if (s->nbad) {
        DC_LOG_DEBUG("ucx %s: message %llu: %u of %u pieces damaged, NACK", c->peer,
                     (unsigned long long)seq, s->nbad, s->npieces);
        c->stats.nacks_sent++;
        dc_ucx_slot_reset(c, s, 1); /* the re-send arrives whole */
        dc_ucx_queue_ctrl(c, DC_VERBS_MSG_NACK, seq);
        return;
    }
    r->got = s->len;
    r->state = DC_UCX_R_DONE;
    c->stats.msgs_recv++;
    c->stats.bytes_recv += s->len;
    s->state = DC_UCX_SLOT_DONE;
    s->req = NULL;
    dc_ucx_queue_ctrl(c, DC_VERBS_MSG_ACK, seq);
    dc_ucx_slot_advance(c);
}

/* Eager bytes of the piece at `off` (UCP's transient data or a held
 * copy) into the slot's irecv buffer, then their check.  0: the copy into
 * device memory failed and so did the connection. */
static int dc_ucx_land_eager(dc_ucx_conn_t *c, dc_ucx_slot_t *s, uint32_t off, const void *data,
                             uint32_t len, uint32_t crc)
{
    dc_ucx_req_t *r = s->req;
    if (dc_verbs_copy_in(r->mkind, r->buf + off, data, len) != DC_OK) {
        dc_ucx_fail(c, dc_last_status(), "piece into GPU memory: %s", dc_last_error());
        return 0;
    }
    dc_ucx_verify_piece(c, s, off, len, crc);
    return 1;
}

/* The message does not fit its irecv buffer: fail that receive, drop the
 * pieces (those still to come are dropped as duplicates) and ACK. */
static void dc_ucx_too_big(dc_ucx_conn_t *c, dc_ucx_slot_t *s)
{
    dc_ucx_req_t *r = s->req;
    r->state = DC_UCX_R_FAILED;
    r->err = DC_ERR_FORMAT;
    dc_ucx_slot_release_held(c, s);
    s->req = NULL;
    s->state = DC_UCX_SLOT_DONE;
    DC_LOG_WARN("ucx %s: message %llu of %u bytes does not fit the %zu-byte receive buffer",
                c->peer, (unsigned long long)s->seq, s->len, r->len);
    dc_ucx_queue_ctrl(c, DC_VERBS_MSG_ACK, s->seq); /* delivered, to a too-small buffer */
    dc_ucx_slot_advance(c);
}

static void dc_ucx_rndv_cb(void *request, ucs_status_t status, size_t length, void *user_data)
{
    dc_ucx_piece_t *p = user_data;
    dc_ucx_conn_t *c = p->conn;
    dc_ucx_req_t *r = p->req;
    c->outstanding--;
    r->ucx_pending--;
    ucp_request_free(request);
    dc_ucx_slot_t *s = &c->slot[p->seq % DC_UCX_RING];
    if (status != UCS_OK) {
        if (status != UCS_ERR_CANCELED)
            dc_ucx_break(c, "receive failed", status);
    } else if (c->state != DC_UCX_FAILED && s->req == r && s->state == DC_UCX_SLOT_ACTIVE &&
               s->seq == p->seq) {
        if (length != p->len)
            dc_ucx_fail(c, DC_ERR_FORMAT, "piece of message %llu: %zu bytes, announced %u",
                        (unsigned long long)p->seq, length, p->len);
        else
            dc_ucx_verify_piece(c, s, p->off, p->len, p->crc);
    }
    dc_ucx_piece_put(c, p);
}

/* A slot with held pieces and a posted irecv: move the pieces into the
 * buffer (copy or rendezvous get) and check each as it lands. */
static void dc_ucx_deliver(dc_ucx_conn_t *c, dc_ucx_slot_t *s)
{
    dc_ucx_req_t *r = s->req;
    if (s->len > r->len) {
        dc_ucx_too_big(c, s);
        return;
    }
    uint64_t seq = s->seq;
    /* Stop when the slot moves on (the last piece completes the message)
     * or the connection breaks (drop_ep releases what is still held). */
    while (s->held && s->req == r && s->seq == seq && c->state == DC_UCX_ESTABLISHED) {
        dc_ucx_piece_t *p = s->held;
        s->held = p->next;
        if (!s->held)
            s->held_tail = NULL;
        p->next = NULL;
        if (!p->rndv) {
            int ok = dc_ucx_land_eager(c, s, p->off, p->data, p->len, p->crc);
            dc_ucx_piece_release(c, p);
            if (!ok)
                return;
            continue;
        }
        ucp_request_param_t prm;
        dc_ucx_op_param(&prm, p, r->mr);
        dc_ucx_op_mem(&prm, r);
        prm.cb.recv_am = dc_ucx_rndv_cb;
        void *desc = p->data;
        p->data = NULL; /* consumed by the receive */
        p->req = r;
        ucs_status_ptr_t q = ucp_am_recv_data_nbx(c->worker, desc, r->buf + p->off, p->len, &prm);
        if (q == NULL) {
            uint32_t off = p->off, len = p->len, crc = p->crc;
            dc_ucx_piece_put(c, p);
            dc_ucx_verify_piece(c, s, off, len, crc);
        } else if (UCS_PTR_IS_ERR(q)) {
            dc_ucx_piece_put(c, p);
            dc_ucx_break(c, "cannot receive a message", UCS_PTR_STATUS(q));
        } else {
            r->ucx_pending++;
            c->outstanding++;
        }
    }
}

static void dc_ucx_deliver_all(dc_ucx_conn_t *c)
{
    c->deliver_pending = 0;
    /* Only seqs with a posted irecv can be delivered: [rbase, rpost). */
    for (uint64_t q = c->rbase; q < c->rpost && c->state == DC_UCX_ESTABLISHED; q++) {
        dc_ucx_slot_t *s = &c->slot[q % DC_UCX_RING];
        if (s->state == DC_UCX_SLOT_ACTIVE && s->held && s->req)
            dc_ucx_deliver(c, s);
    }
}

/* Parse and check a DATA header (48 hostile bytes) against the payload. */
static int dc_ucx_parse_dhdr(dc_ucx_conn_t *c, const void *header, size_t header_length,
                             size_t length, dc_verbs_hdr_t *h, uint32_t *off, uint32_t *step)
{
    const uint8_t *b = header;
    if (header_length != DC_UCX_DHDR_SIZE) {
        dc_ucx_fail(c, DC_ERR_FORMAT, "data message with a %zu-byte header", header_length);
        return 0;
    }
    if (dc_verbs_hdr_unpack(b, c->max_msg, h) != DC_OK) {
        dc_ucx_fail(c, dc_last_status(), "%s", dc_last_error());
        return 0;
    }
    if (dc_load_le32(b + 44) != dc_crc32c(0, b, 44)) {
        dc_ucx_fail(c, DC_ERR_CORRUPT, "data message: piece descriptor checksum mismatch");
        return 0;
    }
    *off = dc_load_le32(b + 32);
    *step = dc_load_le32(b + 36);
    uint32_t plen = dc_load_le32(b + 40);
    uint64_t want = h->len > *off ? DC_MIN((uint64_t)*step, (uint64_t)h->len - *off) : 0;
    if (h->type != DC_VERBS_MSG_DATA || (h->flags & ~DC_VERBS_HDR_F_MSGCRC) != 0 ||
        *step < DC_UCX_PIECE_MIN ||
        *step > DC_UCX_PIECE_MAX || *off % *step != 0 || (*off >= h->len && *off != 0) ||
        plen != want || plen != length) {
        dc_ucx_fail(c, DC_ERR_FORMAT,
                    "bad data message (type %u, flags 0x%02x, length %u, piece at %u of %u "
                    "bytes, step %u, payload %zu)",
                    h->type, h->flags, h->len, *off, plen, *step, length);
        return 0;
    }
    return 1;
}

static ucs_status_t dc_ucx_am_data_cb(void *arg, const void *header, size_t header_length,
                                      void *data, size_t length,
                                      const ucp_am_recv_param_t *param)
{
    dc_ucx_conn_t *c = arg;
    if (c->state != DC_UCX_ESTABLISHED) {
        if (c->state == DC_UCX_BROKEN || c->reconnecting)
            return UCS_OK; /* from the lost endpoint: re-sent after the resume */
        if (c->state != DC_UCX_FAILED)
            dc_ucx_fail(c, DC_ERR_AUTH, "data before authentication completed");
        return UCS_OK;
    }
    dc_verbs_hdr_t h;
    uint32_t off, step;
    if (!dc_ucx_parse_dhdr(c, header, header_length, length, &h, &off, &step))
        return UCS_OK;
    dc_ucx_slot_t *s = &c->slot[h.seq % DC_UCX_RING];
    if (h.seq < c->rbase || (h.seq < c->rbase + DC_UCX_RING && s->state == DC_UCX_SLOT_DONE)) {
        /* A duplicate (re-send after a reconnect): ACK it again, once. */
        if (off == 0) {
            c->stats.dups_dropped++;
            dc_ucx_queue_ctrl(c, DC_VERBS_MSG_ACK, h.seq);
        }
        return UCS_OK;
    }
    if (h.seq >= c->rbase + DC_UCX_RING) {
        dc_ucx_fail(c, DC_ERR_FORMAT, "message seq %llu outside the window [%llu, %llu)",
                    (unsigned long long)h.seq, (unsigned long long)c->rbase,
                    (unsigned long long)(c->rbase + DC_UCX_RING));
        return UCS_OK;
    }
    if (s->state == DC_UCX_SLOT_EMPTY) {
        uint64_t n = h.len ? ((uint64_t)h.len + step - 1) / step : 1;
        size_t bytes = (size_t)(n + 7) / 8;
        if (bytes > s->seen_cap) {
            uint8_t *b = realloc(s->seen, bytes);
            if (!b) {
                dc_ucx_fail(c, DC_ERR_NOMEM, "out of memory for message %llu",
                            (unsigned long long)h.seq);
                return UCS_OK;
            }
            s->seen = b;
            s->seen_cap = bytes;
        }
        if (n > s->pcrc_cap) {
            uint32_t *pc = realloc(s->pcrc, (size_t)n * sizeof(*pc));
            if (!pc) {
                dc_ucx_fail(c, DC_ERR_NOMEM, "out of memory for message %llu",
                            (unsigned long long)h.seq);
                return UCS_OK;
            }
            s->pcrc = pc;
            s->pcrc_cap = (size_t)n;
        }
        memset(s->seen, 0, bytes);
        s->state = DC_UCX_SLOT_ACTIVE;
        s->seq = h.seq;
        s->len = h.len;
        s->step = step;
        s->npieces = (uint32_t)n;
        s->ndone = s->nbad = 0;
        s->msgcrc = !!(h.flags & DC_VERBS_HDR_F_MSGCRC);
        s->mcrc = h.crc;
    } else if (s->seq != h.seq || s->len != h.len || s->step != step ||
               s->msgcrc != !!(h.flags & DC_VERBS_HDR_F_MSGCRC) ||
               (s->msgcrc && s->mcrc != h.crc)) {
        dc_ucx_fail(c, DC_ERR_FORMAT, "pieces of message %llu disagree (length %u vs %u, "
                                      "step %u vs %u, flags 0x%02x, message CRC32C 0x%08x vs "
                                      "0x%08x)",
                    (unsigned long long)h.seq, h.len, s->len, step, s->step, h.flags, h.crc,
                    s->mcrc);
        return UCS_OK;
    }
    uint32_t k = off / step;
    if (s->seen[k / 8] & (1u << (k % 8))) {
        dc_ucx_fail(c, DC_ERR_FORMAT, "piece at %u of message %llu sent again while still in "
                                      "progress",
                    off, (unsigned long long)h.seq);
        return UCS_OK;
    }
    s->seen[k / 8] |= (uint8_t)(1u << (k % 8));
    /* Transient eager data with its irecv posted: copy and check now. */
    int rndv = !!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV);
    int persistent = rndv || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA);
    if (!persistent && s->req && !s->held) {
        if (s->len > s->req->len) {
            dc_ucx_too_big(c, s);
            return UCS_OK;
        }
        dc_ucx_land_eager(c, s, off, data, (uint32_t)length, h.crc);
        return UCS_OK;
    }
    uint64_t hold_max = DC_MAX(DC_UCX_HOLD_MAX, 2 * c->max_msg);
    if (!rndv && c->held_bytes + length > hold_max) {
        dc_ucx_fail(c, DC_ERR_BUSY,
                    "the peer sent more than %llu MiB of messages ahead of the receives "
                    "posted for them (message %llu; receives are posted up to %llu)",
                    (unsigned long long)(hold_max >> 20), (unsigned long long)h.seq,
                    (unsigned long long)c->rpost);
        return UCS_OK;
    }
    dc_ucx_piece_t *p = dc_ucx_piece_get(c);
    if (!p) {
        dc_ucx_fail(c, DC_ERR_NOMEM, "out of memory holding message %llu",
                    (unsigned long long)h.seq);
        return UCS_OK;
    }
    p->seq = h.seq;
    p->off = off;
    p->len = (uint32_t)length;
    p->crc = h.crc;
    p->rndv = rndv;
    if (persistent) {
        p->data = data;
    } else {
        if (!(p->data = malloc(length ? length : 1))) {
            dc_ucx_piece_put(c, p);
            dc_ucx_fail(c, DC_ERR_NOMEM, "out of memory holding message %llu",
                        (unsigned long long)h.seq);
            return UCS_OK;
        }
        memcpy(p->data, data, length);
        p->owned = 1;
    }
    if (!rndv)
        c->held_bytes += length;
    if (s->held_tail)
        s->held_tail->next = p;
    else
        s->held = p;
    s->held_tail = p;
    c->deliver_pending = 1;
    return persistent ? UCS_INPROGRESS : UCS_OK;
}

static ucs_status_t dc_ucx_am_ctrl_cb(void *arg, const void *header, size_t header_length,
                                      void *data, size_t length,
                                      const ucp_am_recv_param_t *param)
{
    dc_ucx_conn_t *c = arg;
    if (c->state != DC_UCX_ESTABLISHED) {
        if (c->state == DC_UCX_BROKEN || c->reconnecting)
            return UCS_OK;
        if (c->state != DC_UCX_FAILED)
            dc_ucx_fail(c, DC_ERR_AUTH, "control message before authentication completed");
        return UCS_OK;
    }
    dc_verbs_hdr_t h;
    if (header_length != DC_VERBS_HDR_SIZE || length != 0) {
        dc_ucx_fail(c, DC_ERR_FORMAT, "malformed control message");
        return UCS_OK;
    }
    if (dc_verbs_hdr_unpack(header, 0, &h) != DC_OK) {
        dc_ucx_fail(c, dc_last_status(), "%s", dc_last_error());
        return UCS_OK;
    }
    if (h.type == DC_VERBS_MSG_ACK) {
        dc_ucx_req_t *r = dc_verbs_window_ack(&c->win, h.seq);
        if (r && r->state == DC_UCX_R_PENDING) {
            r->state = DC_UCX_R_DONE;
            c->stats.msgs_sent++;
            c->stats.bytes_sent += r->len;
        }
    } else if (h.type == DC_VERBS_MSG_NACK) {
        dc_ucx_req_t *r = dc_verbs_window_get(&c->win, h.seq);
        if (r && r->state == DC_UCX_R_PENDING) {
            c->stats.resends++;
            if (r->crc_known && !r->queued) {
                /* Never trust the caller's CRC32C twice: the re-send
                 * carries the CRC32Cs we compute (so a wrong one costs one
                 * round trip, not a NACK loop).  Every piece was received,
                 * so UCP no longer needs the old headers. */
                DC_LOG_DEBUG("ucx %s: message %llu sent with the caller's CRC32C was NACKed: "
                             "re-sending with our own",
                             c->peer, (unsigned long long)h.seq);
                r->crc_known = 0;
                r->ccrc_nacked = 1;
                r->ccrc_acc = 0;
                r->nhdr = 0;
            }
            dc_ucx_post_send(c, r);
        }
    } else if (h.type == DC_VERBS_MSG_BYE) {
        dc_ucx_fail(c, DC_ERR_RESET, "peer closed the connection");
        c->fail_live = 0; /* it left: no good-bye back, the close is forced */
    }
    /* PING: nothing to do */
    return UCS_OK;
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
    dc_store_le64(c->auth_out + 37, c->session);
    dc_store_le32(c->auth_out + 45, c->epoch);
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
        c->session = dc_load_le64(m + 37);
        c->epoch = dc_load_le32(m + 45);
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
    else if (c->state == DC_UCX_S_WAIT_PROOF)
        dc_ucx_fail(c, DC_ERR_AUTH, "peer left during authentication: it rejected our proof "
                                    "(different job secret?) (%s)",
                    ucs_status_string(status));
    else
        dc_ucx_fail(c, DC_ERR_RESET, "connection failed during setup: %s%s",
                    ucs_status_string(status),
                    c->is_client ? " (is a ucx server listening there?)" : "");
}

static void dc_ucx_capture_transports(dc_ucx_conn_t *c)
{
    char *text = NULL;
    size_t tlen = 0;
    FILE *f = open_memstream(&text, &tlen);
    if (!f)
        return;
    ucp_ep_print_info(c->ep, f);
    fclose(f);
    /* Lane lines look like "#   lane[0]:  3:tcp/lo.0 md[1] ..." or
     * "lane[1]: 8:posix/memory.0 ...": keep "tl/dev" tokens, deduplicated. */
    size_t o = 0;
    c->transports[0] = 0;
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        char *lane = strstr(line, "lane[");
        if (lane) {
            char *colon = strchr(lane, ':');
            char *tok = colon ? colon + 1 : NULL;
            while (tok && *tok == ' ')
                tok++;
            if (tok) {
                char *tc = strchr(tok, ':'); /* "3:tcp/lo.0" -> "tcp/lo.0" */
                char *sp = strchr(tok, ' ');
                if (tc && (!sp || tc < sp))
                    tok = tc + 1;
                size_t n = strcspn(tok, " .\t");
                char item[64];
                if (n > 0 && n < sizeof(item) && memchr(tok, '/', n)) {
                    memcpy(item, tok, n);
                    item[n] = 0;
                    char *hit = strstr(c->transports, item);
                    int dup = hit && (hit == c->transports || hit[-1] == ',') &&
                              (hit[n] == 0 || hit[n] == ',');
                    if (!dup && o + n + 2 < sizeof(c->transports))
                        o += (size_t)snprintf(c->transports + o, sizeof(c->transports) - o,
                                              "%s%s", o ? "," : "", item);
                }
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    free(text);
    if (!c->transports[0])
        snprintf(c->transports, sizeof(c->transports), "unknown");
    if (dc_ucx_rdma_unused(c->transports, dc_ucx_rdma_res, c->stats.path_note,
                           sizeof(c->stats.path_note)))
        DC_LOG_WARN("ucx %s: %s", c->peer, c->stats.path_note);
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

static void dc_ucx_progress_raw(ucp_worker_h w)
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

static void dc_ucx_conn_destroy(dc_ucx_conn_t *c)
{
    if (!c)
        return;
    if (c->lst) {
        dc_ucx_listener_t *l = c->lst;
        for (dc_ucx_conn_t **pp = &l->reg; *pp; pp = &(*pp)->reg_next)
            if (*pp == c) {
                *pp = c->reg_next;
                break;
            }
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

static void dc_ucx_conn_progress(dc_ucx_conn_t *c)
{
    if (c->state == DC_UCX_BROKEN) {
        if (c->ep)
            dc_ucx_drop_ep(c, 1);
        if (dc_now_s() > c->deadline)
            dc_ucx_fail(c, DC_ERR_RESET,
                        c->is_client ? "connection lost and not re-established within %u ms"
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
        dc_ucx_fail(c, DC_ERR_TIMEOUT, "handshake not completed within %u ms", c->timeout_ms);
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

static dc_status_t dc_ucx_listen(const dc_verbs_opts_t *opts, const char *bind_addr,
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
    if ((st = dc_ucx_resolve(bind_addr, 1, &ss, &sslen)) != DC_OK)
        return st;
    dc_ucx_listener_t *l = calloc(1, sizeof(*l));
    if (!l)
        return dc_error(DC_ERR_NOMEM, "ucx: out of memory");
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
        dc_ucx_sockaddr_str((const struct sockaddr *)&la.sockaddr, l->addr, sizeof(l->addr));
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
    free(l->secret);
    free(l);
    memset(secret, 0, sizeof(secret));
    return st;
}

static dc_status_t dc_ucx_listen_addr(dc_verbs_listener_t *lb, char *buf, size_t len)
{
    dc_ucx_listener_t *l = (dc_ucx_listener_t *)lb;
    if ((size_t)snprintf(buf, len, "%s", l->addr) >= len)
        return dc_error(DC_ERR_INVALID, "ucx: buffer too small for the listener address");
    return DC_OK;
}

static int dc_ucx_listen_fd(dc_verbs_listener_t *lb)
{
    return ((dc_ucx_listener_t *)lb)->epfd;
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
        dc_ucx_sockaddr_str((const struct sockaddr *)&ra.client_address, peer, sizeof(peer));
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
    c->deadline = dc_now_s() + c->timeout_ms / 1000.0;
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
    e->epoch = t->epoch;
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
                (unsigned long long)e->session, e->epoch);
}

static dc_status_t dc_ucx_accept(dc_verbs_listener_t *lb, dc_verbs_conn_t **out)
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
            dc_ucx_conn_t *e = l->reg;
            while (e && e->session != c->session)
                e = e->reg_next;
            if (e) {
                if (c->epoch > e->epoch && e->state != DC_UCX_FAILED) {
                    dc_ucx_adopt(l, e, c);
                } else {
                    DC_LOG_WARN("ucx listener %s: dropped %s: stale re-dial of session "
                                "%016llx (epoch %u)",
                                l->addr, c->peer, (unsigned long long)c->session, c->epoch);
                    dc_ucx_conn_destroy(c);
                }
                continue;
            }
            c->lst = l;
            l->refs++;
            c->reg_next = l->reg;
            l->reg = c;
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

static void dc_ucx_listen_close(dc_verbs_listener_t *lb)
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
    c->epoch++;
    c->reconnecting = 1;
    c->state = DC_UCX_C_WAIT_CHALLENGE;
    dc_ucx_queue_hello(c);
    DC_LOG_INFO("ucx %s: re-dialing (session %016llx, epoch %u)", c->peer,
                (unsigned long long)c->session, c->epoch);
}

static dc_status_t dc_ucx_connect(const dc_verbs_opts_t *opts, const char *addr,
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
    if ((st = dc_ucx_resolve(addr, 0, &ss, &sslen)) != DC_OK)
        goto out_secret;
    dc_ucx_conn_t *c;
    if ((st = dc_ucx_conn_alloc(&o, dc_ucx_ctx_for((const struct sockaddr *)&ss, sslen, 0),
                                &c)) != DC_OK)
        goto out_secret;
    c->is_client = 1;
    snprintf(c->peer, sizeof(c->peer), "%s", addr);
    memcpy(&c->raddr, &ss, sslen);
    c->raddr_len = sslen;
    uint8_t sid[DC_AUTH_NONCE_SIZE];
    if ((st = dc_auth_nonce(sid)) != DC_OK || (st = dc_auth_nonce(c->nc)) != DC_OK) {
        dc_ucx_conn_destroy(c);
        goto out_secret;
    }
    c->session = dc_load_le64(sid);
    c->epoch = 1;
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

static dc_status_t dc_ucx_connect_test(dc_verbs_conn_t *cb)
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

/* --- memory ----------------------------------------------------------------- */

static dc_status_t dc_ucx_reg_mem(dc_verbs_conn_t *cb, void *buf, size_t len, uint32_t kind,
                                  dc_verbs_mr_t **out)
{
    if (!buf || len == 0)
        return dc_error(DC_ERR_INVALID, "ucx reg_mem: empty region");
    if (kind != DC_VERBS_MEM_HOST && kind != DC_VERBS_MEM_CUDA)
        return dc_error(DC_ERR_UNSUPPORTED, "ucx reg_mem: memory kind 0x%x not supported "
                                            "(host or CUDA)",
                        kind);
    if (kind == DC_VERBS_MEM_CUDA) {
        dc_status_t st = dc_ucx_cuda_support();
        if (st != DC_OK)
            return st;
    }
    if (!cb || cb->ops != &dc_ucx_ops)
        return dc_error(DC_ERR_INVALID, "ucx reg_mem: not a ucx connection");
    dc_ucx_mr_t *m = calloc(1, sizeof(*m));
    if (!m)
        return dc_error(DC_ERR_NOMEM, "ucx reg_mem: out of memory");
    ucp_mem_map_params_t mp;
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    mp.address = buf;
    mp.length = len;
    mp.memory_type = kind == DC_VERBS_MEM_CUDA ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
    m->ctx = ((dc_ucx_conn_t *)cb)->ctx;
    ucs_status_t s = ucp_mem_map(m->ctx, &mp, &m->memh);
    if (s != UCS_OK) {
        free(m);
        return dc_error(DC_ERR_IO, "ucx: ucp_mem_map of %zu bytes: %s", len,
                        ucs_status_string(s));
    }
    m->base.ops = &dc_ucx_ops;
    m->addr = buf;
    m->len = len;
    m->kind = kind;
    *out = &m->base;
    return DC_OK;
}

static void dc_ucx_dereg_mem(dc_verbs_conn_t *cb, dc_verbs_mr_t *mb)
{
    dc_ucx_mr_t *m = (dc_ucx_mr_t *)mb;
    if (!m)
        return;
    ucp_mem_unmap(m->ctx, m->memh);
    free(m);
}

/* --- requests ---------------------------------------------------------------- */

static dc_ucx_req_t *dc_ucx_req_new(dc_ucx_conn_t *c, dc_ucx_kind_t kind, void *buf,
                                    size_t len, dc_verbs_mr_t *mr)
{
    dc_ucx_req_t *r = c->req_free;
    if (r)
        c->req_free = r->next;
    else if (!(r = calloc(1, sizeof(*r))))
        return NULL;
    uint8_t *phdr = r->phdr; /* kept across reuse */
    size_t phdr_cap = r->phdr_cap;
    memset(r, 0, sizeof(*r));
    r->phdr = phdr;
    r->phdr_cap = phdr_cap;
    r->base.ops = &dc_ucx_ops;
    r->conn = c;
    r->kind = kind;
    r->buf = buf;
    r->len = len;
    r->mr = (dc_ucx_mr_t *)mr;
    r->next = c->reqs;
    if (c->reqs)
        c->reqs->prev = r;
    c->reqs = r;
    return r;
}

static void dc_ucx_req_release(dc_ucx_req_t *r)
{
    dc_ucx_conn_t *c = r->conn;
    if (r->queued)
        dc_ucx_sq_unlink(c, r);
    if (r->prev)
        r->prev->next = r->next;
    else
        c->reqs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    r->next = c->req_free;
    r->prev = NULL;
    c->req_free = r;
}

/* Check a message buffer against its registration; *kind = its memory kind
 * (device memory also unregistered, recognised by the driver). */
static dc_status_t dc_ucx_check_mr(const dc_ucx_mr_t *m, const void *buf, size_t len,
                                   uint32_t *kind)
{
    *kind = dc_verbs_buf_kind(m ? m->kind : 0, buf);
    if (*kind == DC_VERBS_MEM_CUDA && !m) {
        dc_status_t st = dc_ucx_cuda_support();
        if (st != DC_OK)
            return st;
    }
    if (!m)
        return DC_OK;
    const uint8_t *b = buf;
    if (b < m->addr || (size_t)(b - m->addr) > m->len || len > m->len - (size_t)(b - m->addr))
        return dc_error(DC_ERR_INVALID, "ucx: buffer outside its memory registration");
    return DC_OK;
}

static dc_status_t dc_ucx_isend_any(dc_verbs_conn_t *cb, const void *buf, size_t len,
                                    dc_verbs_mr_t *mr, const uint32_t *crc,
                                    dc_verbs_req_t **out)
{
    dc_ucx_conn_t *c = (dc_ucx_conn_t *)cb;
    if (c->state == DC_UCX_FAILED)
        return dc_ucx_conn_error(c);
    if (c->state != DC_UCX_ESTABLISHED)
        return DC_ERR_AGAIN;
    if (len > c->max_msg)
        return dc_error(DC_ERR_INVALID, "ucx: message of %zu bytes exceeds the maximum %llu", len,
                        (unsigned long long)c->max_msg);
    if (!buf && len)
        return dc_error(DC_ERR_INVALID, "ucx: NULL send buffer");
    uint32_t kind;
    dc_status_t st = dc_ucx_check_mr((dc_ucx_mr_t *)mr, buf, len, &kind);
    if (st != DC_OK)
        return st;
    if (dc_verbs_window_used(&c->win) >= DC_VERBS_MAX_INFLIGHT)
        return DC_ERR_AGAIN;
    dc_ucx_req_t *r = dc_ucx_req_new(c, DC_UCX_REQ_SEND, (void *)(uintptr_t)buf, len, mr);
    if (!r)
        return dc_error(DC_ERR_NOMEM, "ucx: out of memory for a request");
    r->mkind = kind;
    /* pieces let a host message's CRC32C run while its data lands in cache;
     * for device memory each piece costs a synchronous CRC kernel launch,
     * so a GPU message is one piece */
    r->step = c->piece;
    if (kind == DC_VERBS_MEM_CUDA && len > c->piece)
        r->step = (uint32_t)DC_MIN((uint64_t)len, (uint64_t)DC_UCX_PIECE_MAX);
    uint64_t n = len ? ((uint64_t)len + r->step - 1) / r->step : 1;
    size_t hbytes = (size_t)n * DC_UCX_DHDR_SIZE;
    if (hbytes > r->phdr_cap) {
        uint8_t *ph = realloc(r->phdr, hbytes);
        if (!ph) {
            dc_ucx_req_release(r);
            return dc_error(DC_ERR_NOMEM, "ucx: out of memory for a request");
        }
        r->phdr = ph;
        r->phdr_cap = hbytes;
    }
    r->npieces = (uint32_t)n;
    if (crc) {
        r->crc_known = 1;
        r->ccrc = *crc;
    }
    if (dc_verbs_window_push(&c->win, r, &r->seq) != DC_OK) {
        dc_ucx_req_release(r);
        return DC_ERR_AGAIN;
    }
    /* Piece by piece (dc_ucx_pump): checksum, then post at once. */
    r->nhdr = 0;
    dc_ucx_post_send(c, r);
    *out = &r->base;
    return DC_OK;
}

static dc_status_t dc_ucx_isend(dc_verbs_conn_t *c, const void *buf, size_t len,
                                dc_verbs_mr_t *mr, dc_verbs_req_t **out)
{
    return dc_ucx_isend_any(c, buf, len, mr, NULL, out);
}

static dc_status_t dc_ucx_isend_crc(dc_verbs_conn_t *c, const void *buf, size_t len,
                                    dc_verbs_mr_t *mr, uint32_t crc, dc_verbs_req_t **out)
{
    return dc_ucx_isend_any(c, buf, len, mr, &crc, out);
}

static dc_status_t dc_ucx_irecv(dc_verbs_conn_t *cb, void *buf, size_t cap, dc_verbs_mr_t *mr,
                                dc_verbs_req_t **out)
{
    dc_ucx_conn_t *c = (dc_ucx_conn_t *)cb;
    if (c->state == DC_UCX_FAILED)
        return dc_ucx_conn_error(c);
    if (c->state != DC_UCX_ESTABLISHED)
        return DC_ERR_AGAIN;
    if (!buf && cap)
        return dc_error(DC_ERR_INVALID, "ucx: NULL receive buffer");
    uint32_t kind;
    dc_status_t st = dc_ucx_check_mr((dc_ucx_mr_t *)mr, buf, cap, &kind);
    if (st != DC_OK)
        return st;
    if (c->rpost >= c->rbase + DC_UCX_RING)
        return DC_ERR_AGAIN;
    dc_ucx_req_t *r = dc_ucx_req_new(c, DC_UCX_REQ_RECV, buf, cap, mr);
    if (!r)
        return dc_error(DC_ERR_NOMEM, "ucx: out of memory for a request");
    r->mkind = kind;
    r->seq = c->rpost++;
    dc_ucx_slot_t *s = &c->slot[r->seq % DC_UCX_RING];
    s->req = r;
    if (s->state == DC_UCX_SLOT_ACTIVE && s->held)
        dc_ucx_deliver(c, s);
    *out = &r->base;
    return DC_OK;
}

static dc_status_t dc_ucx_progress(dc_verbs_conn_t *cb)
{
    dc_ucx_conn_t *c = (dc_ucx_conn_t *)cb;
    dc_ucx_conn_progress(c);
    if (c->state == DC_UCX_FAILED)
        return dc_ucx_conn_error(c);
    return DC_OK;
}

static dc_status_t dc_ucx_test(dc_verbs_req_t *rb, int *done, size_t *len)
{
    dc_ucx_req_t *r = (dc_ucx_req_t *)rb;
    dc_ucx_conn_t *c = r->conn;
    /* Progress also when ACKs are queued (an irecv can complete from a held
     * message at once, and its ACK must still go out). */
    if ((r->state == DC_UCX_R_PENDING || c->nctrl) && c->state != DC_UCX_FAILED)
        dc_ucx_conn_progress(c);
    if (r->ucx_pending == 0) {
        if (r->state == DC_UCX_R_DONE) {
            if (len)
                *len = r->kind == DC_UCX_REQ_SEND ? r->len : r->got;
            *done = 1;
            dc_ucx_req_release(r);
            return DC_OK;
        }
        if (r->state == DC_UCX_R_FAILED || c->state == DC_UCX_FAILED) {
            dc_status_t st;
            if (r->state == DC_UCX_R_FAILED)
                st = dc_error(r->err, "ucx %s: message %llu does not fit the %zu-byte receive "
                                      "buffer",
                              c->peer, (unsigned long long)r->seq, r->len);
            else
                st = dc_ucx_conn_error(c);
            if (r->kind == DC_UCX_REQ_SEND)
                dc_verbs_window_ack(&c->win, r->seq);
            else if (c->slot[r->seq % DC_UCX_RING].req == r)
                c->slot[r->seq % DC_UCX_RING].req = NULL;
            dc_ucx_req_release(r);
            return st;
        }
    } else if (c->state == DC_UCX_FAILED) {
        dc_ucx_progress_raw(c->worker); /* let UCP cancel what references buf */
    }
    *done = 0;
    return DC_OK;
}

/* Work of ours that the next progress does without any event from UCX. */
static int dc_ucx_has_work(const dc_ucx_conn_t *c)
{
    return c->nctrl || c->auth_out_len || c->deliver_pending ||
           (c->sq && c->pieces_out < c->ahead);
}

/* Poll, then sleep: see "Waiting" at the top of this file. */
static dc_status_t dc_ucx_wait(dc_verbs_conn_t *cb, int timeout_ms)
{
    dc_ucx_conn_t *c = (dc_ucx_conn_t *)cb;
    if (c->state == DC_UCX_FAILED)
        return dc_ucx_conn_error(c);
    int idle = ucp_worker_progress(c->worker) == 0 && !dc_ucx_has_work(c);
    if (idle && c->spin_ns && !c->spin_idle && c->state == DC_UCX_ESTABLISHED) {
        uint64_t t0 = dc_now_ns();
        for (unsigned i = 1;; i++) {
            if (ucp_worker_progress(c->worker)) {
                idle = 0;
                break;
            }
            if (!(i & 15) && dc_now_ns() - t0 > c->spin_ns)
                break;
            sched_yield();
        }
    }
    if (idle) {
        if (c->efd < 0) {
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        } else if (ucp_worker_arm(c->worker) == UCS_OK) {
            struct pollfd pfd = {.fd = c->efd, .events = POLLIN};
            int ms = timeout_ms;
            if (c->state != DC_UCX_ESTABLISHED) {
                double left = (c->deadline - dc_now_s()) * 1000.0;
                if (left < ms)
                    ms = left < 0 ? 0 : (int)left + 1;
            }
            uint64_t t0 = dc_now_ns();
            poll(&pfd, 1, ms);
            c->spin_idle = dc_now_ns() - t0 > DC_UCX_SPIN_IDLE_NS;
        }
    }
    return dc_ucx_progress(cb);
}

/* The worker's event fd signals only once armed, and arming fails (BUSY)
 * while events are pending: so arm here, right before the caller's poll
 * (transport.h), and hand out an fd that is readable at once when there is
 * work already.  (Unarmed, the fd stayed readable: the engine's poll never
 * slept, 20 000-90 000 polls per receiver in a 0.2 s refit.) */
static int dc_ucx_fd(dc_verbs_conn_t *cb)
{
    dc_ucx_conn_t *c = (dc_ucx_conn_t *)cb;
    if (c->efd < 0)
        return -1;
    if (c->state != DC_UCX_FAILED && !dc_ucx_has_work(c) && ucp_worker_arm(c->worker) == UCS_OK)
        return c->efd;
    return dc_ucx_ready_fd;
}

static dc_status_t dc_ucx_stats(dc_verbs_conn_t *cb, dc_verbs_stats_t *out)
{
    dc_ucx_conn_t *c = (dc_ucx_conn_t *)cb;
    /* device: the UCX transports/devices of the endpoint's lanes */
    size_t dn = strnlen(c->transports, sizeof(c->stats.device) - 1);
    memcpy(c->stats.device, c->transports, dn);
    c->stats.device[dn] = 0;
    dn = strnlen(c->peer, sizeof(c->stats.peer) - 1);
    memcpy(c->stats.peer, c->peer, dn);
    c->stats.peer[dn] = 0;
    if (!out || out->size < sizeof(size_t))
        return dc_error(DC_ERR_INVALID, "ucx stats: bad struct size");
    size_t n = DC_MIN(out->size, sizeof(c->stats));
    memcpy((char *)out + sizeof(size_t), (char *)&c->stats + sizeof(size_t), n - sizeof(size_t));
    return DC_OK;
}

static void dc_ucx_close(dc_verbs_conn_t *cb)
{
    dc_ucx_conn_destroy((dc_ucx_conn_t *)cb);
}

dc_status_t dc_ucx_conn_transports(dc_verbs_conn_t *cb, char *buf, size_t len)
{
    if (!cb || cb->ops != &dc_ucx_ops || !buf || !len)
        return dc_error(DC_ERR_INVALID, "dc_ucx_conn_transports: not a ucx connection");
    dc_ucx_conn_t *c = (dc_ucx_conn_t *)cb;
    if (c->state != DC_UCX_ESTABLISHED && !c->transports[0])
        return DC_ERR_AGAIN;
    snprintf(buf, len, "%s", c->transports);
    return DC_OK;
}

const dc_verbs_ops_t dc_ucx_ops = {
    .size = sizeof(dc_verbs_ops_t),
    .name = "ucx",
    .init = dc_ucx_init,
    .caps = dc_ucx_caps,
    .listen = dc_ucx_listen,
    .listen_addr = dc_ucx_listen_addr,
    .listen_fd = dc_ucx_listen_fd,
    .accept = dc_ucx_accept,
    .listen_close = dc_ucx_listen_close,
    .connect = dc_ucx_connect,
    .connect_test = dc_ucx_connect_test,
    .reg_mem = dc_ucx_reg_mem,
    .dereg_mem = dc_ucx_dereg_mem,
    .isend = dc_ucx_isend,
    .irecv = dc_ucx_irecv,
    .test = dc_ucx_test,
    .progress = dc_ucx_progress,
    .wait = dc_ucx_wait,
    .fd = dc_ucx_fd,
    .stats = dc_ucx_stats,
    .close = dc_ucx_close,
    .isend_crc = dc_ucx_isend_crc,
};
