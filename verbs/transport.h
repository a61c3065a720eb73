/*
 * transport.h - the one interface every transport implements (verbs/).
 *
 * Shaped like NCCL's net plugin (src/include/plugin/nccl_net.h) and
 * libfabric's ops tables: a transport is ONE `static const dc_verbs_ops_t`
 * table of typed function pointers that begins with its size, so that it can
 * grow.  A transport is chosen once per connection (dc_verbs_select()),
 * never per message.
 *
 *   tcp   verbs/tcp.c   non-blocking sockets + epoll, K parallel streams
 *   ucx   verbs/ucx.c   UCP (compiled when DC_HAVE_UCX)
 *   rdma  verbs/rdma.c  ibverbs + rdmacm RC QPs (compiled when DC_HAVE_VERBS)
 *
 * ------------------------------------------------------------------------
 * Objects (all opaque, all owned by the transport that made them)
 * ------------------------------------------------------------------------
 * Every object begins with a base struct holding its ops table, so that the
 * generic wrappers below (dc_verbs_isend(c, ...)) dispatch without the caller
 * knowing the transport.  A transport's own struct embeds the base as its
 * FIRST member:
 *
 *     struct dc_tcp_conn { dc_verbs_conn_t base; ... };
 *
 *   dc_verbs_listener_t  a passive endpoint bound to an address.  It must be
 *                        progressed (accept()) while connections accepted from
 *                        it live, because a broken connection is re-attached
 *                        through it; it is reference-counted by its
 *                        connections, so listen_close() may come first.
 *   dc_verbs_conn_t      an established, AUTHENTICATED, reliable, ordered,
 *                        full-duplex message connection.
 *   dc_verbs_req_t       one outstanding isend/irecv.  Freed by the transport
 *                        when test() reports it finished (done or failed).
 *   dc_verbs_mr_t        a memory registration (reg_mem / dereg_mem).
 *
 * ------------------------------------------------------------------------
 * Messages ("frames") and their contract
 * ------------------------------------------------------------------------
 * A message is opaque bytes, 0 .. caps.max_msg_size long.  The transport
 * preserves message boundaries and order: the k-th irecv() posted on a
 * connection receives the k-th message isend() on the other side, whatever
 * the number of parallel streams underneath.  An irecv() buffer smaller than
 * the arriving message fails that request with DC_ERR_FORMAT.
 *
 * isend(): the caller's buffer is BORROWED until test() reports the request
 * done; "done" means the PEER verified the message's CRC32C and acknowledged
 * it (so the transport never copies the payload to retain it for re-sends).
 * irecv(): the buffer is written by the transport until test() reports done;
 * then it holds exactly the verified message and `*len` its length.
 *
 * Nothing blocks: listen / connect / accept / isend / irecv / test return at
 * once.  DC_ERR_AGAIN means "not yet, progress and call again" (a connect
 * in progress, no incoming connection, the send window is full).  wait()
 * sleeps until the connection's fd is ready or a timeout, for callers with
 * nothing else to do; fd() gives a poll-able descriptor for an event loop.
 *
 * Hop reliability lives in the connection (see "Hop reliability" below):
 * corruption is NACKed and re-sent, a broken connection is re-established
 * and resumes from the last acknowledged message; the caller only sees an
 * error when recovery is impossible (the peer is gone for timeout_ms,
 * authentication failed, bad input).
 *
 * ------------------------------------------------------------------------
 * Typical use (non-blocking; error handling elided)
 * ------------------------------------------------------------------------
 *     const dc_verbs_ops_t *t; char why[256];
 *     dc_verbs_select("auto", &t, why, sizeof(why));   // logs the choice
 *     dc_verbs_conn_t *c;
 *     t->connect(&opts, "10.0.0.2:7400", &c);
 *     while ((st = t->connect_test(c)) == DC_ERR_AGAIN) t->wait(c, 100);
 *     dc_verbs_req_t *r;
 *     while (t->isend(c, buf, len, NULL, &r) == DC_ERR_AGAIN) t->wait(c, 10);
 *     int done = 0;
 *     while (!done && (st = t->test(r, &done, NULL)) == DC_OK)
 *         if (!done) t->wait(c, 10);
 *     t->close(c);
 */
#ifndef DC_VERBS_TRANSPORT_H
#define DC_VERBS_TRANSPORT_H

#include "util/dc_util.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct dc_verbs_ops dc_verbs_ops_t;

/* --- base objects (a transport's struct embeds one as its first member) -- */

typedef struct dc_verbs_listener {
    const dc_verbs_ops_t *ops;
} dc_verbs_listener_t;

typedef struct dc_verbs_conn {
    const dc_verbs_ops_t *ops;
} dc_verbs_conn_t;

typedef struct dc_verbs_req {
    const dc_verbs_ops_t *ops;
} dc_verbs_req_t;

typedef struct dc_verbs_mr {
    const dc_verbs_ops_t *ops;
} dc_verbs_mr_t;

/* --- memory kinds (bit mask in caps.mem_kinds) --------------------------- */

enum {
    DC_VERBS_MEM_HOST = 1u << 0,   /**< ordinary host memory */
    DC_VERBS_MEM_CUDA = 1u << 1,   /**< CUDA device memory: isend/irecv take it
                                        (hop CRC32C on the GPU); ucx moves it
                                        zero-copy, rdma sends it zero-copy and
                                        receives it through its host ring */
    DC_VERBS_MEM_DMABUF = 1u << 2, /**< CUDA memory is registered through
                                        dma-buf (rdma) */
};

/** What a transport can do on this machine (from caps()). */
typedef struct dc_verbs_caps {
    size_t size;           /**< sizeof(dc_verbs_caps_t), set by the caller */
    uint32_t mem_kinds;    /**< DC_VERBS_MEM_* bits */
    uint32_t max_streams;  /**< parallel streams per connection (1 if n/a) */
    uint64_t max_msg_size; /**< largest message isend() accepts */
    uint32_t max_inflight; /**< outstanding isend()s per connection */
    double speed_gbps;     /**< nominal link speed, 1e9 bit/s (0: unknown) */
    double latency_us;     /**< nominal one-way latency (0: unknown) */
    char device[64];       /**< device used, e.g. "lo", "eth0", "mlx5_0:1" */
} dc_verbs_caps_t;

/**
 * Options for listen() and connect().  Zero / NULL fields take the value of
 * the configuration table (dc_config_get): tcp_streams, tcp_sockbuf,
 * timeout_ms, secret_file / secret.  Call dc_verbs_opts_init() first.
 */
typedef struct dc_verbs_opts {
    size_t size;            /**< sizeof(dc_verbs_opts_t) */
    uint32_t streams;       /**< parallel streams (tcp); 0: config tcp_streams */
    uint64_t sockbuf;       /**< socket buffer bytes; 0: config tcp_sockbuf */
    uint32_t timeout_ms;    /**< connect/handshake/reconnect; 0: config */
    const void *secret;     /**< job secret (borrowed for the call); NULL: from
                                 DELTACAST_SECRET_FILE / DELTACAST_SECRET */
    size_t secret_len;
    int zerocopy;           /**< MSG_ZEROCOPY for large messages: 1 on, 0 off
                                 (default off), -1 config */
    uint64_t max_msg_size;  /**< 0: DC_VERBS_DEFAULT_MAX_MSG */
    const char *device;     /**< ucx/rdma device name; NULL: automatic */
    uint32_t hs_timeout_ms; /**< listeners: deadline of a peer's handshake before it is
                                 authenticated (at most timeout_ms); 0: config
                                 handshake_timeout_ms */
    int tls;                /**< tcp: DC_VERBS_TLS_*; 0 (DC_VERBS_TLS_CONFIG):
                                 the config key tls */
    int wan;                /**< 1: the connection crosses regions (tls=auto
                                 encrypts exactly these) */
    const char *tls_peer_name; /**< tcp connect() in certificate mode: the
                                 name the server's certificate must carry
                                 (the node's host name); NULL: any
                                 certificate of the CA.  Borrowed for the call */
} dc_verbs_opts_t;

/* dc_verbs_opts_t.tls (config key tls: auto|on|off); see verbs/tcp_tls.c */
enum {
    DC_VERBS_TLS_CONFIG = 0, /**< take the config key tls */
    DC_VERBS_TLS_OFF = 1,    /**< clear; a listener refuses TLS streams */
    DC_VERBS_TLS_ON = 2,     /**< TLS 1.3; a listener refuses clear streams */
    DC_VERBS_TLS_AUTO = 3,   /**< TLS on connections with opts.wan; a listener
                                  takes both (the dialing side chooses) */
};

#define DC_VERBS_DEFAULT_MAX_MSG (64u << 20) /* 64 MiB */
#define DC_VERBS_MAX_INFLIGHT 256           /* per connection and direction */

/** Counters of one connection (stats()); all since connect/accept. */
typedef struct dc_verbs_stats {
    size_t size;            /**< sizeof(dc_verbs_stats_t) */
    uint64_t msgs_sent, msgs_recv;   /**< messages completed */
    uint64_t bytes_sent, bytes_recv; /**< payload bytes completed */
    uint64_t wire_bytes_sent;        /**< all bytes written incl. headers/resends */
    uint64_t resends;       /**< messages sent again (NACK or reconnect) */
    uint64_t nacks_sent;    /**< CRC mismatches seen on receipt */
    uint64_t dups_dropped;  /**< duplicate messages discarded on receipt */
    uint64_t reconnects;    /**< times the connection was re-established */
    uint32_t streams;       /**< streams in use */
    char device[64];        /**< local device the connection runs over
                                 (e.g. "lo", "veth0", "mlx5_0:1") */
    char peer[128];         /**< the peer's address, "HOST:PORT" */
    uint64_t zc_sends;      /**< MSG_ZEROCOPY send calls (tcp, opts.zerocopy) */
    uint64_t zc_copied;     /**< of those, sends the kernel reported it copied
                                 anyway (SO_EE_CODE_ZEROCOPY_COPIED: e.g.
                                 loopback, where zero-copy cannot pay) */
    char path_note[512];    /**< why a faster path this node has is left
                                 unused, "" when none: e.g. UCX over TCP
                                 although the node has RDMA (ucx.h) */
    char encryption[64];    /**< cipher suite of the streams (tcp TLS: e.g.
                                 "TLS_AES_128_GCM_SHA256"), "none" in clear */
    uint32_t ktls;          /**< kernel TLS: bit 0 send, bit 1 receive */
    char peer_cert[256];    /**< TLS certificate mode: the name in the peer's
                                 verified certificate; "" otherwise */
} dc_verbs_stats_t;

/* ------------------------------------------------------------------------
 * The ops table.  Every member is required unless marked optional (NULL).
 * ------------------------------------------------------------------------ */
struct dc_verbs_ops {
    size_t size;        /**< sizeof(dc_verbs_ops_t) when compiled */
    const char *name;   /**< "tcp", "ucx", "rdma" */

    /** Probe once per process (idempotent, thread-safe): DC_OK if usable
     *  here, else DC_ERR_UNSUPPORTED with dc_error() detail saying why
     *  ("no RDMA device", ...).  Other calls fail unless init() succeeded. */
    dc_status_t (*init)(void);

    /** Capabilities on this machine; `out->size` set by the caller.
     *  DC_VERBS_MEM_CUDA is set only when messages in GPU memory really can
     *  move here (CUDA kernels built in, a GPU, and the transport's own
     *  support); finding out may initialise the CUDA driver. */
    dc_status_t (*caps)(dc_verbs_caps_t *out);

    /** Bind and listen on `bind_addr` ("HOST:PORT", port 0: ephemeral). */
    dc_status_t (*listen)(const dc_verbs_opts_t *opts, const char *bind_addr,
                          dc_verbs_listener_t **out);
    /** The bound address as "HOST:PORT" (with the real port). */
    dc_status_t (*listen_addr)(dc_verbs_listener_t *l, char *buf, size_t len);
    /** A poll-able fd that becomes readable when accept() may progress. */
    int (*listen_fd)(dc_verbs_listener_t *l);
    /**
     * Progress incoming handshakes (and re-attachments of broken
     * connections) without blocking.  DC_OK and *out: a new authenticated
     * connection.  DC_ERR_AGAIN: none ready.  Peers that fail the handshake
     * are dropped and logged, never returned as errors: the listener keeps
     * serving.  Other errors are fatal for the listener.
     */
    dc_status_t (*accept)(dc_verbs_listener_t *l, dc_verbs_conn_t **out);
    /** Drop the caller's reference; connections from it keep working. */
    void (*listen_close)(dc_verbs_listener_t *l);

    /** Start connecting to "HOST:PORT"; returns DC_OK and a connection that
     *  is NOT yet usable: call connect_test() until it returns DC_OK. */
    dc_status_t (*connect)(const dc_verbs_opts_t *opts, const char *addr,
                           dc_verbs_conn_t **out);
    /** DC_OK once established and authenticated; DC_ERR_AGAIN while in
     *  progress; an error (DC_ERR_AUTH, DC_ERR_TIMEOUT, ...) if it failed
     *  (the caller still close()s the connection). */
    dc_status_t (*connect_test)(dc_verbs_conn_t *c);

    /** Register `len` bytes at `buf` of kind DC_VERBS_MEM_*.  Optional for
     *  host memory (a NULL mr is always accepted by isend/irecv). */
    dc_status_t (*reg_mem)(dc_verbs_conn_t *c, void *buf, size_t len, uint32_t mem_kind,
                           dc_verbs_mr_t **out);
    void (*dereg_mem)(dc_verbs_conn_t *c, dc_verbs_mr_t *mr);

    /** Post a send of one message (see contract above).  DC_ERR_AGAIN when
     *  max_inflight sends are outstanding or the connection is still
     *  connecting; DC_ERR_INVALID when len > max_msg_size. */
    dc_status_t (*isend)(dc_verbs_conn_t *c, const void *buf, size_t len, dc_verbs_mr_t *mr,
                         dc_verbs_req_t **out);
    /** Post a receive buffer for the next message (in posting order). */
    dc_status_t (*irecv)(dc_verbs_conn_t *c, void *buf, size_t cap, dc_verbs_mr_t *mr,
                         dc_verbs_req_t **out);
    /**
     * Progress the connection and test one request: DC_OK with *done = 0
     * (still pending) or *done = 1 (finished; *len = message length for a
     * receive, the sent length for a send; the request is freed).  An error
     * also frees the request.  `len` may be NULL.
     */
    dc_status_t (*test)(dc_verbs_req_t *r, int *done, size_t *len);

    /** Progress all I/O of the connection without blocking.  Returns an
     *  error only when the connection is dead for good. */
    dc_status_t (*progress)(dc_verbs_conn_t *c);
    /** Block up to timeout_ms until the connection may progress (or the
     *  timeout); then progress it.  Same return as progress(). */
    dc_status_t (*wait)(dc_verbs_conn_t *c, int timeout_ms);
    /** Poll-able fd of the connection (e.g. its epoll fd), or -1 (then poll
     *  with a short timeout).  Call it anew right before each poll(): it
     *  may arm the connection for its next event (ucx) and return an fd
     *  that is readable at once while work is already pending. */
    int (*fd)(dc_verbs_conn_t *c);
    /** Counters; `out->size` set by the caller. */
    dc_status_t (*stats)(dc_verbs_conn_t *c, dc_verbs_stats_t *out);
    /** Close and free; outstanding requests are freed (never completed). */
    void (*close)(dc_verbs_conn_t *c);

    /**
     * isend() of a message whose CRC32C the caller already knows: `crc` ==
     * dc_crc32c(0, buf, len) (e.g. computed once when the frame was
     * encoded, or verified on receipt by a relay).  The transport sends
     * `crc` instead of reading the buffer to compute it; the RECEIVER
     * STILL CHECKS EVERY BYTE against it, exactly as for isend().  A wrong
     * `crc` is therefore caught as corruption: the peer NACKs, and the
     * re-send carries a CRC32C the transport computes itself (the caller's
     * value is never trusted twice), so a wrong `crc` costs one round trip
     * and a warning, never a loop or a bad delivery.  Every transport
     * implements it (tcp, ucx, rdma); callers use dc_verbs_isend_crc(),
     * which also works with a table compiled before this member existed.
     */
    dc_status_t (*isend_crc)(dc_verbs_conn_t *c, const void *buf, size_t len, dc_verbs_mr_t *mr,
                             uint32_t crc, dc_verbs_req_t **out);
};

/* --- registry (verbs/transport.c) ---------------------------------------- */

/** The transports compiled in, in preference order (rdma, ucx, tcp).
 *  Writes up to `cap` pointers; returns how many are compiled in. */
size_t dc_verbs_list(const dc_verbs_ops_t **out, size_t cap);

/** The transport named `name`; DC_ERR_NOT_FOUND if not compiled in,
 *  DC_ERR_UNSUPPORTED (with the reason) if its init() fails here. */
dc_status_t dc_verbs_find(const char *name, const dc_verbs_ops_t **out);

/**
 * Choose a transport.  `name` is "tcp", "ucx", "rdma", or "auto" / NULL /
 * "" (the config key `transport`).  "auto" takes the first transport in
 * preference order whose init() succeeds; a named transport that cannot run
 * is an error, never a silent fallback.  `why` (may be NULL) receives one
 * line saying what was chosen and why (e.g. "auto: rdma unavailable (no
 * RDMA device); ucx unavailable (...); chose tcp"); the line is also logged
 * at INFO.
 */
dc_status_t dc_verbs_select(const char *name, const dc_verbs_ops_t **out, char *why,
                            size_t why_len);

/** Fill `o` with zeros and o->size (all defaults). */
void dc_verbs_opts_init(dc_verbs_opts_t *o);

/** Streams for a TCP connection over an edge of `edge_bps` (0: unknown), from
 *  config tcp_streams: a fixed count, or auto = ceil(edge_bps / 5 Gbit/s)
 *  clamped to [1, DC_VERBS_AUTO_STREAMS_MAX] (a single flow fills a slow link
 *  best; clouds cap one flow at about 5 Gbit/s), DC_VERBS_AUTO_STREAMS when the
 *  rate is unknown. */
#define DC_VERBS_FLOW_BPS 5e9
#define DC_VERBS_AUTO_STREAMS 4u
#define DC_VERBS_AUTO_STREAMS_MAX 16u
dc_status_t dc_verbs_config_streams(double edge_bps, uint32_t *out);

/** Resolved options: config defaults applied, secret loaded (see auth.h).
 *  `secret_buf` (>= DC_AUTH_MAX_SECRET bytes) receives the secret and
 *  out->secret points into it. */
dc_status_t dc_verbs_opts_resolve(const dc_verbs_opts_t *in, dc_verbs_opts_t *out,
                                  uint8_t *secret_buf, size_t secret_cap);

/** Split "HOST:PORT" / "[V6]:PORT" into host and port. */
dc_status_t dc_verbs_parse_addr(const char *addr, char *host, size_t host_len, uint16_t *port);

/* Generic wrappers: dispatch through the object's ops table. */
static inline dc_status_t dc_verbs_isend(dc_verbs_conn_t *c, const void *buf, size_t len,
                                         dc_verbs_mr_t *mr, dc_verbs_req_t **out)
{
    return c->ops->isend(c, buf, len, mr, out);
}
/* isend() with the caller's CRC32C of the message (see ops->isend_crc);
 * a transport without it computes the CRC32C itself. */
static inline dc_status_t dc_verbs_isend_crc(dc_verbs_conn_t *c, const void *buf, size_t len,
                                             dc_verbs_mr_t *mr, uint32_t crc,
                                             dc_verbs_req_t **out)
{
    const dc_verbs_ops_t *o = c->ops;
    if (o->size >= offsetof(dc_verbs_ops_t, isend_crc) + sizeof(o->isend_crc) && o->isend_crc)
        return o->isend_crc(c, buf, len, mr, crc, out);
    return o->isend(c, buf, len, mr, out);
}
static inline dc_status_t dc_verbs_irecv(dc_verbs_conn_t *c, void *buf, size_t cap,
                                         dc_verbs_mr_t *mr, dc_verbs_req_t **out)
{
    return c->ops->irecv(c, buf, cap, mr, out);
}
static inline dc_status_t dc_verbs_test(dc_verbs_req_t *r, int *done, size_t *len)
{
    return r->ops->test(r, done, len);
}
static inline dc_status_t dc_verbs_wait(dc_verbs_conn_t *c, int timeout_ms)
{
    return c->ops->wait(c, timeout_ms);
}
static inline void dc_verbs_close(dc_verbs_conn_t *c)
{
    if (c)
        c->ops->close(c);
}

/** Blocking helpers built on the ops (for tests, perf and simple callers):
 *  send/receive one message, waiting up to timeout_ms (0: forever). */
dc_status_t dc_verbs_send_blocking(dc_verbs_conn_t *c, const void *buf, size_t len,
                                   int timeout_ms);
dc_status_t dc_verbs_recv_blocking(dc_verbs_conn_t *c, void *buf, size_t cap, size_t *len,
                                   int timeout_ms);

/* ------------------------------------------------------------------------
 * Hop reliability (shared by every transport)
 * ------------------------------------------------------------------------
 * Each message on the wire is preceded by a 32-byte transport header:
 *
 *   off size field
 *    0   4   magic  "DCVM" (0x4d564344 LE)
 *    4   1   type   DC_VERBS_MSG_DATA / _ACK / _NACK / _PING / _BYE
 *    5   1   flags  DC_VERBS_HDR_F_TRAILER, DC_VERBS_HDR_F_MSGCRC (ucx) or 0
 *    6   2   stream index the message was written on (diagnostics)
 *    8   8   seq    message sequence number, from 0, per direction
 *   16   4   len    payload length (DATA), 0 otherwise
 *   20   4   crc    CRC32C (dc_crc32c, kernels/kern.h) of the payload;
 *                   with DC_VERBS_HDR_F_TRAILER it is 0 here and the CRC32C
 *                   follows the payload as 4 LE bytes instead (so that a
 *                   streaming sender checksums each piece just before it
 *                   writes it, while the bytes are in cache: tcp does this)
 *   24   4   hcrc   CRC32C of bytes 0..23 (a damaged header is detected
 *                   before `len` is trusted)
 *   28   4   reserved (0)
 *
 * Receiver: a DATA message is verified against `crc`; a match stores it for
 * the irecv() posted for that `seq` and sends ACK(seq); a mismatch sends
 * NACK(seq) and discards it; a seq already received is a duplicate (after a
 * re-send or a reconnect): dropped and ACKed again.  A damaged header
 * (hcrc) breaks the stream: the connection is re-established.
 * Sender: keeps every un-ACKed message (the borrowed isend buffer: no copy)
 * in a window of at most DC_VERBS_MAX_INFLIGHT; re-sends on NACK; on
 * reconnect re-sends every un-ACKed message in seq order.  So nothing is
 * lost (un-ACKed messages are re-sent) or duplicated (receiver drops seqs it
 * already holds).  Reconnect: the connecting side dials again with the same
 * 64-bit session id and a higher epoch after authentication; the listener
 * re-attaches the new streams to the existing connection.
 *
 * The helpers below are transport-independent: a UCX or RDMA transport that
 * runs over an unreliable or breakable path uses the same header, window
 * and duplicate rules (dc_verbs_hdr_pack / _unpack, dc_verbs_window_*).
 */

#define DC_VERBS_HDR_SIZE 32
#define DC_VERBS_HDR_MAGIC 0x4d564344u /* "DCVM" little-endian */
#define DC_VERBS_HDR_F_TRAILER 0x01u   /* CRC32C follows the payload */
#define DC_VERBS_HDR_F_MSGCRC 0x02u    /* ucx pieces: `crc` is the CRC32C of the
                                          WHOLE message (the caller's, isend_crc),
                                          not of this piece */

enum {
    DC_VERBS_MSG_DATA = 1,
    DC_VERBS_MSG_ACK = 2,
    DC_VERBS_MSG_NACK = 3,
    DC_VERBS_MSG_PING = 4,
    DC_VERBS_MSG_BYE = 5,
};

typedef struct dc_verbs_hdr {
    uint8_t type;
    uint8_t flags;
    uint16_t stream;
    uint64_t seq;
    uint32_t len;
    uint32_t crc;
} dc_verbs_hdr_t;

/** Serialize `h` into 32 bytes (computes hcrc). */
void dc_verbs_hdr_pack(const dc_verbs_hdr_t *h, uint8_t out[DC_VERBS_HDR_SIZE]);
/** Parse and validate 32 hostile bytes: magic, hcrc, type, len <= max_len.
 *  DC_ERR_CORRUPT (hcrc/magic) or DC_ERR_FORMAT (bad type/length). */
dc_status_t dc_verbs_hdr_unpack(const uint8_t in[DC_VERBS_HDR_SIZE], uint64_t max_len,
                                dc_verbs_hdr_t *out);

/**
 * Send window: a ring of un-ACKed messages indexed by seq.  The transport
 * stores one `void *` per in-flight message (its request).  Seqs are
 * assigned in order by push(); ack() marks one seq; the window slides past
 * the lowest acked prefix.
 */
typedef struct dc_verbs_window {
    uint64_t base;                         /**< lowest seq not yet slid past */
    uint64_t next;                         /**< next seq to assign */
    void *slot[DC_VERBS_MAX_INFLIGHT];     /**< by seq % MAX; NULL: acked */
} dc_verbs_window_t;

void dc_verbs_window_init(dc_verbs_window_t *w);
/** Assign the next seq to `item`; DC_ERR_AGAIN when full. */
dc_status_t dc_verbs_window_push(dc_verbs_window_t *w, void *item, uint64_t *seq);
/** The item of an in-flight seq, NULL if acked or out of the window. */
void *dc_verbs_window_get(const dc_verbs_window_t *w, uint64_t seq);
/** Mark `seq` acked; returns its item (NULL for a stale/duplicate ack). */
void *dc_verbs_window_ack(dc_verbs_window_t *w, uint64_t seq);
/** Number of seqs in flight (assigned, window not slid past). */
static inline uint64_t dc_verbs_window_used(const dc_verbs_window_t *w)
{
    return w->next - w->base;
}

#endif /* DC_VERBS_TRANSPORT_H */
