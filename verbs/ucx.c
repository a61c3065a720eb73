/*
 * ucx.c - the `ucx` transport: UCP active messages, progress-driven.
 *
 * This file: the process-wide UCP context and one context per network
 * interface, memory registration, requests, progress / test / wait / fd,
 * the transports a connection runs over, and the ops table.  The rest:
 *
 *   ucx_conn.c      connections: workers and endpoints, the handshake,
 *                   listener and accept, connect and re-dial, session
 *                   adoption (resume), error handling and close
 *   ucx_send.c      the send path: DATA pieces and their pacing, control
 *                   messages (ACK / NACK / BYE / auth), the peer's ACK / NACK
 *   ucx_recv.c      the receive path: the slot ring, held pieces,
 *                   rendezvous gets, per-piece CRC32C checks, irecv
 *   ucx_internal.h  the constants, types and functions they share
 *
 * Measurements behind the defaults: docs/ucx-notes.md.
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
 * endpoint.  Session ids, the listener's registry and the verdict on a dial
 * are session.h's, as for tcp and rdma: a re-dial of a session the listener
 * does not hold (or that failed) is refused, never taken for a new
 * connection, and the client gives up.  Both sides then re-send every un-ACKED message in seq order,
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
#include "verbs/ucx_internal.h"

#include "kernels/kern_cuda.h"
#include "verbs/gpumem.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

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
/* Every resource of the context ("tcp/lo,posix/memory,..."): `deltacast
 * info` (dc_ucx_describe). */
static char dc_ucx_all_res[1024];

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

/* The "tl/dev" resources of ucp_context_print_info's text, comma
 * separated; only the RDMA ones when `rdma_only`. */
static dc_status_t dc_ucx_parse_resources(const char *info, int rdma_only, char *out, size_t len)
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
            if (slash && (!rdma_only || dc_ucx_tl_is_rdma(tok, (size_t)(slash - tok))) &&
                o + n + 2 < len) {
                o += (size_t)snprintf(out + o, len - o, "%s%.*s", o ? "," : "", (int)n, tok);
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    return DC_OK;
}

dc_status_t dc_ucx_rdma_resources(const char *info, char *out, size_t len)
{
    return dc_ucx_parse_resources(info, 1, out, len);
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
/* A UCP context on `net_devices` (NULL: UCX's choice); `inet6`: its tcp
 * lanes on the interfaces' IPv6 addresses (see dc_ucx_ctx_for). */
static ucs_status_t dc_ucx_ctx_create(const char *net_devices, int inet6, ucp_context_h *out,
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
    if (inet6 && (s = ucp_config_modify(cfg, "AF_PRIO", "inet6")) != UCS_OK) {
        ucp_config_release(cfg);
        *what = "ucp_config_modify(AF_PRIO)";
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
    ucs_status_t s = dc_ucx_ctx_create(NULL, 0, &dc_ucx_ctx, &what);
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
        (void)dc_ucx_parse_resources(info, 0, dc_ucx_all_res, sizeof(dc_ucx_all_res));
        dc_ucx_rdma_devices(dc_ucx_rdma_res, dc_ucx_rdma_devs, sizeof(dc_ucx_rdma_devs));
        free(info);
    }
    dc_ucx_init_st = DC_OK;
}

dc_status_t dc_ucx_init(void)
{
    pthread_once(&dc_ucx_once, dc_ucx_init_once);
    if (dc_ucx_init_st != DC_OK)
        return dc_error(DC_ERR_UNSUPPORTED, "%s", dc_ucx_init_msg);
    return DC_OK;
}

dc_status_t dc_ucx_describe(char *version, size_t vlen, char *res, size_t rlen)
{
    if (version && vlen)
        snprintf(version, vlen, "%s", ucp_get_version_string());
    if (res && rlen)
        res[0] = 0;
    dc_status_t st = dc_ucx_init();
    if (st != DC_OK)
        return st;
    if (res && rlen)
        snprintf(res, rlen, "%s", dc_ucx_all_res);
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
 *
 * IPv6: UCX 1.13's server side connects its tcp lanes to the client's
 * address as the connection request came in (the client's IPv6 address)
 * with the port of the client's tcp interface, and that interface takes an
 * IPv4 address by default (UCX_TCP_AF_PRIO=inet,inet6): the connection
 * fails, and, worse, the accepting worker's tcp interface was built for
 * IPv4 addresses and stores the IPv6 one past its end (a heap overflow,
 * then "free(): invalid pointer" in ucp_worker_destroy: the listener
 * process aborted).  So a connection over IPv6 runs on a context whose tcp
 * lanes are IPv6 too (TCP_AF_PRIO=inet6), on both sides, unless the user
 * set UCX_TCP_AF_PRIO.  UCX 1.13 has no IPv6 tcp device on the loopback
 * interface: [::1] is refused (dc_ucx_check_addr, ucx_conn.c).
 *
 * Contexts are shared by all connections on the same device list and
 * address family.
 */
#define DC_UCX_MAX_CTX 8
static struct {
    char devs[256];
    int inet6;
    ucp_context_h ctx;
} dc_ucx_ctxs[DC_UCX_MAX_CTX];
static unsigned dc_ucx_nctx;
static pthread_mutex_t dc_ucx_ctx_lock = PTHREAD_MUTEX_INITIALIZER;

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

/* The context on `devs` (NULL: UCX's choice of devices) and for `inet6`:
 * the process-wide one, or one made on first use.  Falls back to the
 * process-wide context (with a warning) if making one fails. */
static ucp_context_h dc_ucx_ctx_get(const char *devs, int inet6)
{
    if (!devs && !inet6)
        return dc_ucx_ctx;
    const char *key = devs ? devs : "";
    const char *shown = devs ? devs : "(UCX's choice)";
    ucp_context_h ctx = dc_ucx_ctx;
    pthread_mutex_lock(&dc_ucx_ctx_lock);
    unsigned k = 0;
    while (k < dc_ucx_nctx &&
           (strcmp(dc_ucx_ctxs[k].devs, key) != 0 || dc_ucx_ctxs[k].inet6 != inet6))
        k++;
    if (k < dc_ucx_nctx) {
        ctx = dc_ucx_ctxs[k].ctx;
    } else if (dc_ucx_nctx < DC_UCX_MAX_CTX) {
        const char *what = NULL;
        ucs_status_t s = dc_ucx_ctx_create(devs, inet6, &ctx, &what);
        if (s == UCS_OK) {
            snprintf(dc_ucx_ctxs[dc_ucx_nctx].devs, sizeof(dc_ucx_ctxs[0].devs), "%s", key);
            dc_ucx_ctxs[dc_ucx_nctx].inet6 = inet6;
            dc_ucx_ctxs[dc_ucx_nctx++].ctx = ctx;
            DC_LOG_INFO("ucx: network devices %s%s (the interface of the address in use; "
                        "UCX_NET_DEVICES overrides)",
                        shown, inet6 ? ", tcp over IPv6" : "");
        } else {
            ctx = dc_ucx_ctx;
            DC_LOG_WARN("ucx: a context on network devices %s%s: %s failed (%s); using all "
                        "devices",
                        shown, inet6 ? " (tcp over IPv6)" : "", what, ucs_status_string(s));
        }
    } else {
        DC_LOG_WARN("ucx: more than %d network device lists in one process; %s uses all "
                    "devices (set UCX_NET_DEVICES if connections fail)",
                    DC_UCX_MAX_CTX, shown);
    }
    pthread_mutex_unlock(&dc_ucx_ctx_lock);
    return ctx;
}

/* The context for a listener bound to `a` (passive) or a client dialing
 * `a`: see above.  Falls back to the process-wide context (with a warning
 * if creating one failed). */
ucp_context_h dc_ucx_ctx_for(const struct sockaddr *a, socklen_t alen, int passive)
{
    const char *af = getenv("UCX_TCP_AF_PRIO");
    int inet6 = a->sa_family == AF_INET6 && !(af && *af);
    const char *user = getenv("UCX_NET_DEVICES");
    if (user && *user)
        return dc_ucx_ctx_get(NULL, inet6);
    struct sockaddr_storage local;
    if (passive) {
        if (dc_net_is_wildcard(a))
            return dc_ucx_ctx_get(NULL, inet6);
        memcpy(&local, a, DC_MIN((size_t)alen, sizeof(local)));
    } else if (dc_ucx_route_src(a, alen, &local) != 0) {
        return dc_ucx_ctx_get(NULL, inet6);
    }
    /* 1: found but not up and running (UCX would not list it: it reads its
     * devices once, when the context starts) */
    char devs[256];
    int found = dc_net_ifname_of((const struct sockaddr *)&local, devs, sizeof(devs));
    if (found == 1)
        DC_LOG_WARN("ucx: network interface %s is not up and running; using all devices (its "
                    "connections may fail on a host with several interfaces)",
                    devs);
    if (found != 0)
        return dc_ucx_ctx_get(NULL, inet6);
    if (*dc_ucx_rdma_devs) {
        size_t o = strlen(devs);
        snprintf(devs + o, sizeof(devs) - o, ",%s", dc_ucx_rdma_devs);
    }
    return dc_ucx_ctx_get(devs, inet6);
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

dc_ucx_req_t *dc_ucx_req_new(dc_ucx_conn_t *c, dc_ucx_kind_t kind, void *buf,
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

void dc_ucx_req_release(dc_ucx_req_t *r)
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
dc_status_t dc_ucx_check_mr(const dc_ucx_mr_t *m, const void *buf, size_t len,
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

/* --- progress, test, wait ------------------------------------------------------ */

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

/* --- the transports a connection runs over ----------------------------------- */

void dc_ucx_capture_transports(dc_ucx_conn_t *c)
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
