/* node.c - one process of a refit job: root, relay, receiver (see node.h).
 *
 * Several senders (README.md "Several senders"): "root" below is node 0,
 * the coordinator; every sender (node 0 included) runs the encoder threads
 * over the chunks it owns (chunk -> shard -> stream -> source, see
 * dc_node_chunk_map); the others take BEGIN..BYE from the coordinator over
 * a control link and pass their subtree's upward traffic to it.  A relay
 * with several parents forwards each broadcast frame to the children that
 * subscribed to its stream.
 *
 * One event loop per process (poll over the transport connections, the
 * listener and, on the root, an eventfd of the encoder threads):
 *
 *   root:     encoder threads take chunk numbers in order (repairs first),
 *             encode chunk c of (base -> next) while the loop already sends
 *             chunks < c; memory held by frames in flight is bounded by
 *             inflight_bytes (encoders wait).  Acks are counted per
 *             receiver and chunk; when every receiver acked every chunk the
 *             commit record is written (compare-and-set), then COMMIT goes
 *             down the tree.  NEEDs and re-joins are answered with frames
 *             addressed to that node (overwrites where an XOR cannot be
 *             applied).  A receiver silent for abort_ms aborts the version.
 *   relay:    every message from the parent is forwarded to the children as
 *             it arrives (the same buffer, no copy; the isend is posted at
 *             once), then applied locally; messages from children go up
 *             unchanged.  Up to inflight_bytes / frame size (<= DC_NRX)
 *             receives stay posted on the parent, and a frame of the version
 *             in flight is handled as soon as it is complete even when an
 *             earlier message (striped on another TCP stream) is not: the
 *             children's links never wait for a head-of-line frame.  Routes
 *             for addressed frames are learnt from the upward traffic.
 *   receiver: frames are applied in place through the placement map, under
 *             the journal (journal.h): an XOR only onto PENDING baseline
 *             bytes, overwrites otherwise; the chunk digest is verified
 *             before the ACK.  COMMIT writes the node's own commit record;
 *             ABORT undoes (XOR again / restore the undo copy) or marks the
 *             node for a dense refit.
 */
#include "engine/node.h"
#include "engine/commit.h"
#include "engine/journal.h"
#include "engine/layout.h"
#include "engine/proto.h"
#include "kernels/codec.h"
#include "kernels/frame.h"
#include "kernels/kern_cuda.h"
#include "topology/topo.h"
#include "verbs/gpumem.h"
#include "verbs/transport.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define DC_NRX 64        /* receive ring slots per peer */
#define DC_NRX_CHILD 8   /* receives posted on a child (small upward messages) */
#define DC_DONE_BODY 32
#define DC_DONE_LINK 12  /* DONE body entries after the fixed part: parent u32, bytes u64 */
#define DC_MAX_LINKS 8   /* per-parent byte counts a DONE carries */
#define DC_STALL_NS 1500000000ull

int dc_node_version_path(char *buf, size_t len, const char *dir, uint64_t v)
{
    int n = snprintf(buf, len, "%s/v%llu.safetensors", dir, (unsigned long long)v);
    return n > 0 && (size_t)n < len ? 0 : -1;
}

/* ------------------------------------------------------------------------ */
/* Buffers: refcounted, main thread only (encoders hand theirs over).       */
/* ------------------------------------------------------------------------ */

typedef struct dc_nbuf {
    int refs;
    int pooled;
    int acct;           /* counted in node->inflight */
    size_t cap, len;
    uint8_t *data;
    struct dc_nbuf *next;
} dc_nbuf_t;

typedef struct dc_txe {
    dc_nbuf_t *b;
    dc_verbs_req_t *r;
} dc_txe_t;

typedef struct dc_peer {
    dc_verbs_conn_t *c;
    uint32_t node;      /* peer node index; UINT32_MAX until its HELLO */
    int is_parent;
    int ready;
    int dead;
    uint64_t since_ns;  /* connect start */
    /* receive ring in posting order; a slot whose request is NULL completed
     * early: rxb != NULL holds it (deferred, rxlen), NULL: already handled */
    dc_nbuf_t *rxb[DC_NRX];
    dc_verbs_req_t *rxr[DC_NRX];
    size_t rxlen[DC_NRX];
    unsigned rx_head, rx_n;
    dc_txe_t *tx;
    size_t tx_cap, tx_head, tx_n, tx_posted;
    uint64_t rx_bytes;
    uint8_t *sub;       /* child: broadcast streams it subscribed to (SUB) */
    uint32_t nsub;      /* entries of sub */
    uint32_t subgen;    /* parent: the tree generation its SUB was sent for */
    uint32_t sub_acked; /* parent: the generation its SUBOK answered */
    int ctl;            /* coordinator: a sender's control link */
    int hello_sent;     /* parent: HELLO sent (this link carries our upward traffic) */
    uint64_t vbytes;    /* parent: bytes received in the version in flight */
} dc_peer_t;

typedef struct dc_work {
    uint32_t chunk;
    uint32_t dest;
    uint8_t overwrite;
} dc_work_t;

typedef struct dc_vstats {
    uint64_t version;
    double seconds, encode_s, transfer_s, apply_s, commit_s;
    double first_frame_s;
    uint64_t payload_bytes, repair_bytes, dense_bytes, frames, repairs, overwrites;
    int committed;
} dc_vstats_t;

typedef struct dc_node {
    const dc_node_cfg_t *cfg;
    uint32_t me, nnodes;
    int is_root;
    const dc_verbs_ops_t *t;  /* inside the region (config transport) */
    const dc_verbs_ops_t *tw; /* between regions, when t is not tcp: tcp */
    dc_verbs_opts_t vopts;
    dc_verbs_listener_t *lis;  /* t's, on the LAN address (dc_node_lan_addr) */
    dc_verbs_listener_t *lisw; /* tw's, on the topology address */
    dc_tree_t *tree;
    uint8_t *dead;
    dc_peer_t **peers;
    size_t npeers, cap_peers;
    dc_peer_t *up;          /* the parent link our upward messages take */
    uint32_t up_id;
    uint64_t *retry_ns;     /* node -> next connect attempt (parents) */
    uint64_t root_lost_ns;
    int is_sender;          /* topology role sender: encodes the chunks it owns */
    dc_tree_node_view_t view; /* this node in the current plan */
    uint32_t subgen;        /* bumped on every re-plan: parents get a new SUB */
    uint32_t announced;     /* the generation our last HELLO was sent for */
    uint8_t *resync;        /* coordinator: node re-joined mid-version: at each other
                               sender's SENT, re-send it what it lacks of that sender */
    uint32_t *spar;         /* stream x node -> parent in that stream (UINT32_MAX) */
    uint64_t need_mask;     /* receiver: shards it applies */
    uint32_t *chunk_stream; /* chunk -> stream (UINT32_MAX: no receiver needs it) */
    uint32_t *chunk_src;    /* chunk -> sender that broadcasts it */
    uint8_t *chunk_shard;   /* chunk -> shard */
    uint64_t seen_begin, seen_commit, seen_abort; /* broadcast control messages handled */
    dc_peer_t **route;     /* node -> child peer it was last heard through */
    dc_nbuf_t **known;     /* node -> its last HELLO/STATE seen (re-announced
                              to a new parent) */
    uint32_t timeout_ms, abort_ms;

    dc_layout_t *layout;
    uint64_t chunk_size;
    size_t rx_cap;
    unsigned rx_post_parent; /* receives posted on the parent: inflight_bytes / rx_cap,
                                DC_NRX_CHILD .. DC_NRX */
    dc_nbuf_t *pool;
    size_t pool_n;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t inflight, inflight_max;
    int evfd;

    int finished, bye;
    int64_t crash_at;      /* test hook: DELTACAST_ENGINE_CRASH_AT */
    /* test hook DELTACAST_ENGINE_ROOT_CRASH: "frames=N" (SIGKILL after N
     * broadcast frames of the first version are queued) or "commit=V"
     * (after version V's commit record is written, before its COMMIT) */
    uint64_t crash_frames, crash_commit;
    uint64_t crash_ns;     /* crash_frames reached: dies once they left */
    FILE *trace;           /* DELTACAST_ENGINE_TRACE=DIR: per-frame events */
    dc_status_t result;

    /* receiver */
    dc_st_file_t *wfile;
    dc_place_t place;
    int place_ok;
    uint64_t committed;
    dc_digest_t committed_ckpt; /* its record's checkpoint digest (0: none) */
    int have_record;
    int dense_needed;
    int commit_failed;      /* a local commit failed: reported at BYE */
    struct {
        int active;
        uint64_t v, b;
        uint32_t mode;
        int on_base;
        /* its record names a version at or past the baseline, but not the
         * coordinator's baseline content (a record ahead of the job): its
         * bytes are unknown, each chunk is checked against the frame's
         * target digest before anything is applied */
        int verify;
    } cur;
    dc_journal_t *j;
    uint8_t **retained;    /* per chunk: copy of an applied XOR frame (undo) */
    size_t *retained_len;
    uint8_t **undo;        /* per chunk: baseline bytes before an overwrite */
    uint8_t *scratch;
    dc_codec_t *codec;
    uint32_t ack_lo, ack_n;
    uint64_t apply_ns, rx_version_bytes;
    dc_nbuf_t *begin_msg;

    /* root */
    dc_st_file_t *base, *next;
    uint64_t next_version;  /* version `next` maps (0: none) */
    int base_fd, next_fd;   /* the same files, read with pread by the encoders */
    /* memory sender (cfg->source): versions come from the library caller */
    uint8_t *mbase;         /* the baseline's bytes of the chunks we send (our own copy) */
    uint64_t *moff;         /* chunk -> offset of its bytes in mbase (ours only) */
    uint8_t *mown;          /* chunk -> we send it (placements cover these) */
    int mpend;              /* a BEGIN waits for the source's version */
    uint64_t mclosed_ns;    /* when the source was first seen closed, idle */
    dc_begin_t mbg;         /* ... this one */
    dc_place_t mnext;       /* where the version in flight's bytes are */
    int mnext_ok;
    int mend;               /* the source said: no more versions */
    uint64_t root_committed;
    dc_digest_t root_ckpt;  /* checkpoint digest of root_committed (0: unknown) */
    int digests_ok;         /* digests[] are root_committed's (content hashes) */
    uint64_t confirm_v;     /* DONEs of this version answer a confirming COMMIT */
    uint8_t *confirmed;     /* node -> showed it holds root_committed (this run) */
    uint8_t *dflags;        /* node -> flags of its last DONE */
    uint32_t v_first, v_last;
    uint8_t *acked;        /* nnodes x nchunks */
    uint32_t *nacked;
    uint8_t *joined, *vdone, *needq;
    uint64_t *last_seen, *last_progress;
    uint64_t *hello_committed;
    dc_digest_t *digests;
    int in_flight;
    uint32_t *bcast;       /* chunks this sender broadcasts, in order */
    uint32_t nbcast;
    int sent_reported;     /* sender: SENT of vnum sent */
    uint8_t *dknown;       /* chunk -> digests[] holds its target digest */
    uint8_t *sentc;        /* coordinator: chunk broadcast in this version */
    uint64_t *rneed;       /* coordinator: node -> shards it needs (0: not a receiver) */
    uint32_t *nneed;       /* coordinator: node -> chunks it needs */
    uint8_t *sjoined, *ssent; /* coordinator: sender connected / SENT this version */
    uint64_t other_payload, other_frames; /* coordinator: the other senders' (SENT) */
    uint64_t vnum, vbase;
    uint32_t mode;
    uint32_t cursor, sent, total;   /* broadcast: encode cursor, sent count */
    dc_work_t *wq;
    size_t wq_head, wq_n, wq_cap;
    /* per (dest, chunk), under mu: 1 an XOR, 2 an overwrite of the chunk
     * for dest waits in wq (a repeated request while it waits is dropped:
     * a flapping child's every STATE would otherwise queue again all the
     * chunks it lacks) */
    uint8_t *wqin;
    dc_nbuf_t *ready_head, *ready_tail;
    pthread_t *enc;
    struct dc_enc_arg *enc_args;
    int nenc, enc_stop, enc_busy;
    uint64_t enc_ns, enc_first_ns, enc_last_ns;
    uint64_t t_begin, t_first_frame, t_all_sent, t_all_acked;
    uint64_t payload_bytes, repair_bytes, repairs, overwrites_sent;
    uint64_t *rx_apply_ns, *rx_bytes;
    uint32_t *rx_parent;
    uint32_t *rx_nlinks;   /* node -> per-parent counts in its DONE */
    uint32_t *rx_lpar;     /* node x DC_MAX_LINKS -> parent */
    uint64_t *rx_lbytes;   /* node x DC_MAX_LINKS -> bytes from it */
    dc_vstats_t *vstats;
    uint32_t nvstats;
    int progress_line;
} dc_node_t;

/* --- trace (DELTACAST_ENGINE_TRACE=DIR: DIR/trace.<rank>) ------------------- */

/* One line per frame event: monotonic ns, event, chunk, peer node, length.
 * Events: rx (complete from the parent), q (queued to a child), post (isend
 * posted), done (the child's transport acknowledged it), apply (applied and
 * verified locally), poll (ns spent in poll); at the root: begin, acked (every
 * receiver acknowledged every chunk), commit (record written). */
static void dc_trace(dc_node_t *n, const char *ev, const dc_nbuf_t *b, uint32_t peer)
{
    if (DC_LIKELY(!n->trace))
        return;
    uint32_t chunk = UINT32_MAX;
    uint8_t type = 0;
    if (b && b->len >= DC_MSG_HDR_SIZE) {
        dc_msg_t m;
        if (dc_msg_parse(b->data, b->len, &m) == DC_OK) {
            chunk = m.chunk;
            type = m.type;
        }
    }
    if (b && type != DC_MSG_FRAME)
        return;
    fprintf(n->trace, "%llu %s %u %u %zu\n", (unsigned long long)dc_now_ns(), ev, chunk, peer,
            b ? b->len : 0);
}

/* --- buffers ---------------------------------------------------------------- */

/* Count a buffer in the node's in-flight bytes (until it is freed). */
static void dc_nbuf_account(dc_node_t *n, dc_nbuf_t *b)
{
    if (b->acct)
        return;
    b->acct = 1;
    pthread_mutex_lock(&n->mu);
    n->inflight += b->cap;
    pthread_mutex_unlock(&n->mu);
}

static dc_nbuf_t *dc_nbuf_new(dc_node_t *n, size_t cap, int pooled, int acct)
{
    dc_nbuf_t *b = NULL;
    if (pooled && n->pool) {
        b = n->pool;
        n->pool = b->next;
        n->pool_n--;
    } else {
        b = calloc(1, sizeof(*b));
        if (!b)
            return NULL;
        b->data = malloc(cap ? cap : 1);
        if (!b->data) {
            free(b);
            return NULL;
        }
        b->cap = cap;
        b->pooled = pooled;
    }
    b->refs = 1;
    b->len = 0;
    b->next = NULL;
    b->acct = 0;
    if (acct)
        dc_nbuf_account(n, b);
    return b;
}

static void dc_nbuf_unref(dc_node_t *n, dc_nbuf_t *b)
{
    if (!b || --b->refs > 0)
        return;
    if (b->acct) {
        pthread_mutex_lock(&n->mu);
        n->inflight -= b->cap;
        pthread_cond_broadcast(&n->cv);
        pthread_mutex_unlock(&n->mu);
        b->acct = 0;
    }
    if (b->pooled && n->pool_n < 16) {
        b->next = n->pool;
        n->pool = b;
        n->pool_n++;
        return;
    }
    free(b->data);
    free(b);
}

/* A message built on the main thread (small control messages). */
static dc_nbuf_t *dc_nbuf_copy(dc_node_t *n, const void *data, size_t len)
{
    dc_nbuf_t *b = dc_nbuf_new(n, len, 0, 0);
    if (!b)
        return NULL;
    memcpy(b->data, data, len);
    b->len = len;
    return b;
}

/* --- peers ------------------------------------------------------------------ */

static dc_peer_t *dc_peer_new(dc_node_t *n, dc_verbs_conn_t *c, int is_parent)
{
    if (n->npeers == n->cap_peers) {
        size_t nc = n->cap_peers ? n->cap_peers * 2 : 8;
        dc_peer_t **p = realloc(n->peers, nc * sizeof(*p));
        if (!p)
            return NULL;
        n->peers = p;
        n->cap_peers = nc;
    }
    dc_peer_t *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->c = c;
    p->node = UINT32_MAX;
    p->is_parent = is_parent;
    p->since_ns = dc_now_ns();
    n->peers[n->npeers++] = p;
    return p;
}

static void dc_peer_free(dc_node_t *n, dc_peer_t *p)
{
    for (unsigned k = 0; k < p->rx_n; k++)
        dc_nbuf_unref(n, p->rxb[(p->rx_head + k) % DC_NRX]);
    for (size_t k = 0; k < p->tx_n; k++)
        dc_nbuf_unref(n, p->tx[(p->tx_head + k) % p->tx_cap].b);
    free(p->tx);
    free(p->sub);
    if (p->c) {
        /* a hop's repairs are otherwise silent: say so when there were */
        dc_verbs_stats_t vs = {.size = sizeof(vs)};
        if (p->c->ops->stats(p->c, &vs) == DC_OK && (vs.nacks_sent || vs.resends))
            DC_LOG_WARN("node %u: link to node %d: %llu CRC32C mismatches received, %llu "
                        "messages re-sent, %llu reconnects",
                        n->me, p->node == UINT32_MAX ? -1 : (int)p->node,
                        (unsigned long long)vs.nacks_sent, (unsigned long long)vs.resends,
                        (unsigned long long)vs.reconnects);
        dc_verbs_close(p->c); /* frees outstanding requests */
    }
    for (uint32_t i = 0; i < n->nnodes; i++)
        if (n->route[i] == p)
            n->route[i] = NULL;
    if (n->up == p)
        n->up = NULL;
    free(p);
}

static void dc_peers_reap(dc_node_t *n)
{
    size_t k = 0;
    for (size_t i = 0; i < n->npeers; i++) {
        if (n->peers[i]->dead)
            dc_peer_free(n, n->peers[i]);
        else
            n->peers[k++] = n->peers[i];
    }
    n->npeers = k;
}

static void dc_peer_fail(dc_node_t *n, dc_peer_t *p, dc_status_t st, const char *what);

/* The CRC32C of a FRAME message from its two headers and the frame
 * header's payload CRC32C: computed once when the chunk was encoded (its
 * payload hot in cache), and on a relay the value its own hop just checked
 * every byte against.  The sender and each relay then send a frame on
 * every link without reading its payload again (dc_verbs_isend_crc); each
 * receiving hop still checks every byte, and a wrong value costs one NACK
 * (the transport re-sends with a CRC32C of its own).  0 for other
 * messages. */
static int dc_frame_msg_crc(const dc_nbuf_t *b, uint32_t *crc)
{
    const size_t hl = DC_MSG_HDR_SIZE + DC_FRAME_HEADER_SIZE;
    dc_msg_t m;
    dc_frame_hdr_t fh;
    if (dc_msg_parse(b->data, b->len, &m) != DC_OK || m.type != DC_MSG_FRAME ||
        dc_frame_decode(m.body, m.body_len, &fh) != DC_OK || hl + fh.payload_len != b->len)
        return 0;
    *crc = dc_crc32c_combine(dc_crc32c(0, b->data, hl), fh.payload_crc, fh.payload_len);
    return 1;
}

/* Post the queued sends the transport's window takes. */
static void dc_peer_post(dc_node_t *n, dc_peer_t *p)
{
    while (!p->dead && p->ready && p->tx_posted < p->tx_n) {
        dc_txe_t *e = &p->tx[(p->tx_head + p->tx_posted) % p->tx_cap];
        uint32_t crc;
        dc_status_t st = dc_frame_msg_crc(e->b, &crc)
                             ? dc_verbs_isend_crc(p->c, e->b->data, e->b->len, NULL, crc, &e->r)
                             : dc_verbs_isend(p->c, e->b->data, e->b->len, NULL, &e->r);
        if (st == DC_ERR_AGAIN)
            break;
        if (st != DC_OK) {
            dc_peer_fail(n, p, st, "isend failed");
            return;
        }
        if (!p->is_parent)
            dc_trace(n, "post", e->b, p->node);
        p->tx_posted++;
    }
}

/* Queue a buffer on a peer (takes a new reference) and post it at once when
 * the transport takes it: a relay forwards before it applies. */
static dc_status_t dc_peer_send(dc_node_t *n, dc_peer_t *p, dc_nbuf_t *b)
{
    if (p->dead)
        return DC_OK;
    if (p->tx_n == p->tx_cap) {
        size_t nc = p->tx_cap ? p->tx_cap * 2 : 64;
        dc_txe_t *t = malloc(nc * sizeof(*t));
        if (!t)
            return dc_error(DC_ERR_NOMEM, "node: out of memory");
        for (size_t k = 0; k < p->tx_n; k++)
            t[k] = p->tx[(p->tx_head + k) % p->tx_cap];
        free(p->tx);
        p->tx = t;
        p->tx_cap = nc;
        p->tx_head = 0;
    }
    p->tx[(p->tx_head + p->tx_n) % p->tx_cap] = (dc_txe_t){b, NULL};
    p->tx_n++;
    if (!p->is_parent)
        dc_trace(n, "q", b, p->node);
    b->refs++;
    dc_peer_post(n, p);
    return DC_OK;
}

static void dc_peer_fail(dc_node_t *n, dc_peer_t *p, dc_status_t st, const char *what)
{
    if (p->dead)
        return;
    p->dead = 1;
    if (n->bye && !p->is_parent)
        DC_LOG_INFO("node %u: child %u closed after BYE", n->me, p->node);
    else if (p->node != UINT32_MAX)
        DC_LOG_WARN("node %u: connection to node %u %s: %s", n->me, p->node, what,
                    dc_last_error());
    (void)st;
}

/* --- forward declarations ---------------------------------------------------- */

static void dc_node_handle(dc_node_t *n, dc_peer_t *from, dc_nbuf_t *b);

/* Hand one received message to the node (consumes the reference). */
static void dc_peer_deliver(dc_node_t *n, dc_peer_t *p, dc_nbuf_t *b, size_t len)
{
    b->len = len;
    p->rx_bytes += len;
    if (len < n->rx_cap / 4) {
        dc_nbuf_t *c = dc_nbuf_copy(n, b->data, len);
        dc_nbuf_unref(n, b);
        b = c;
    } else {
        dc_nbuf_account(n, b); /* a large frame held while forwarded */
    }
    if (b) {
        if (p->is_parent)
            dc_trace(n, "rx", b, p->node);
        dc_node_handle(n, p, b);
        dc_nbuf_unref(n, b);
    }
}

/* Progress one peer: completed receives (in order, frames of the version in
 * flight from the parent as soon as complete), completed sends, post. */
static void dc_peer_progress(dc_node_t *n, dc_peer_t *p)
{
    if (p->dead)
        return;
    if (!p->ready) {
        dc_status_t st = p->c->ops->connect_test(p->c);
        if (st == DC_ERR_AGAIN)
            return;
        if (st != DC_OK) {
            dc_peer_fail(n, p, st, "connect failed");
            return;
        }
        p->ready = 1;
    }
    dc_status_t st;
    /* receives, in posting order (before progress() may report the peer
     * gone: what it delivered is handled first) */
    while (p->rx_n > 0 && !p->dead) {
        unsigned h = p->rx_head;
        size_t len = 0;
        if (p->rxr[h]) {
            int done = 0;
            st = dc_verbs_test(p->rxr[h], &done, &len);
            if (st != DC_OK) {
                p->rxr[h] = NULL;
                dc_nbuf_unref(n, p->rxb[h]);
                p->rxb[h] = NULL;
                p->rx_head = (h + 1) % DC_NRX;
                p->rx_n--;
                dc_peer_fail(n, p, st, "receive failed");
                return;
            }
            if (!done)
                break;
        } else {
            len = p->rxlen[h]; /* completed early (deferred or handled) */
        }
        dc_nbuf_t *b = p->rxb[h];
        p->rxr[h] = NULL;
        p->rxb[h] = NULL;
        p->rx_head = (h + 1) % DC_NRX;
        p->rx_n--;
        if (b)
            dc_peer_deliver(n, p, b, len);
    }
    /* from the parent, frames of the version in flight that completed
     * behind an incomplete one (the transport stripes messages over
     * parallel streams): forward and apply them now instead of waiting
     * for the head, so the children's links do not idle.  Frames are
     * independent (chunk-addressed); anything else waits for its turn. */
    if (p->is_parent && !p->dead && n->cur.active) {
        for (unsigned k = 1; k < p->rx_n && !p->dead; k++) {
            unsigned sl = (p->rx_head + k) % DC_NRX;
            if (!p->rxr[sl])
                continue;
            int done = 0;
            size_t len = 0;
            st = dc_verbs_test(p->rxr[sl], &done, &len);
            if (st != DC_OK) {
                p->rxr[sl] = NULL;
                dc_nbuf_unref(n, p->rxb[sl]);
                p->rxb[sl] = NULL;
                p->rxlen[sl] = 0;
                dc_peer_fail(n, p, st, "receive failed");
                return;
            }
            if (!done)
                continue;
            p->rxr[sl] = NULL;
            p->rxlen[sl] = len;
            dc_msg_t m;
            if (len >= DC_MSG_HDR_SIZE && dc_msg_parse(p->rxb[sl]->data, len, &m) == DC_OK &&
                m.type == DC_MSG_FRAME && n->cur.active && m.version == n->cur.v) {
                dc_nbuf_t *b = p->rxb[sl];
                p->rxb[sl] = NULL;
                dc_peer_deliver(n, p, b, len);
            }
        }
    }
    if (!p->dead && (st = p->c->ops->progress(p->c)) != DC_OK) {
        dc_peer_fail(n, p, st, "failed");
        return;
    }
    /* repost receives (a relay stops reading its parent when over budget) */
    while (!p->dead && p->rx_n < (p->is_parent ? n->rx_post_parent : DC_NRX_CHILD)) {
        if (p->is_parent) {
            pthread_mutex_lock(&n->mu);
            int over = n->inflight > n->inflight_max;
            pthread_mutex_unlock(&n->mu);
            if (over)
                break;
        }
        unsigned slot = (p->rx_head + p->rx_n) % DC_NRX;
        dc_nbuf_t *b = dc_nbuf_new(n, n->rx_cap, 1, 0);
        if (!b)
            break;
        dc_verbs_req_t *r;
        st = dc_verbs_irecv(p->c, b->data, b->cap, NULL, &r);
        if (st == DC_ERR_AGAIN) {
            dc_nbuf_unref(n, b);
            break;
        }
        if (st != DC_OK) {
            dc_nbuf_unref(n, b);
            dc_peer_fail(n, p, st, "irecv failed");
            return;
        }
        p->rxb[slot] = b;
        p->rxr[slot] = r;
        p->rx_n++;
    }
    /* completed sends, in order */
    while (p->tx_posted > 0 && !p->dead) {
        dc_txe_t *e = &p->tx[p->tx_head];
        int done = 0;
        st = dc_verbs_test(e->r, &done, NULL);
        if (st != DC_OK) {
            e->r = NULL;
            dc_nbuf_unref(n, e->b);
            p->tx_head = (p->tx_head + 1) % p->tx_cap;
            p->tx_n--;
            p->tx_posted--;
            dc_peer_fail(n, p, st, "send failed");
            return;
        }
        if (!done)
            break;
        if (!p->is_parent)
            dc_trace(n, "done", e->b, p->node);
        dc_nbuf_unref(n, e->b);
        e->b = NULL;
        e->r = NULL;
        p->tx_head = (p->tx_head + 1) % p->tx_cap;
        p->tx_n--;
        p->tx_posted--;
    }
    dc_peer_post(n, p);
}

/* --- sending helpers ---------------------------------------------------------- */

static void dc_send_up(dc_node_t *n, dc_nbuf_t *b)
{
    if (n->up && !n->up->dead)
        dc_peer_send(n, n->up, b); /* posted once connected */
}

static void dc_send_up_simple(dc_node_t *n, uint8_t type, uint8_t flags, uint64_t v,
                              uint64_t base, uint32_t chunk, uint32_t count)
{
    uint8_t h[DC_MSG_HDR_SIZE];
    dc_msg_simple(type, flags, v, base, n->me, chunk, count, h);
    dc_nbuf_t *b = dc_nbuf_copy(n, h, sizeof(h));
    if (b) {
        dc_send_up(n, b);
        dc_nbuf_unref(n, b);
    }
}

#define DC_STREAM_ANY UINT32_MAX         /* control messages: every child */
#define DC_STREAM_NONE (UINT32_MAX - 1u) /* a chunk no receiver needs */

/* Stream of a broadcast frame's chunk. */
static uint32_t dc_chunk_stream(const dc_node_t *n, uint32_t chunk)
{
    if (!n->chunk_stream || !n->layout || chunk >= n->layout->nchunks ||
        n->chunk_stream[chunk] == UINT32_MAX)
        return DC_STREAM_NONE;
    return n->chunk_stream[chunk];
}

/* Down: to the child that leads to `dest`; or, for every receiver, to every
 * child (control messages: stream DC_STREAM_ANY) or to the children that
 * subscribed to `stream` (a broadcast frame). */
static void dc_send_down(dc_node_t *n, dc_nbuf_t *b, uint32_t dest, uint32_t stream)
{
    if (dest != DC_NODE_ALL && dest < n->nnodes && n->route[dest] && !n->route[dest]->dead) {
        dc_peer_send(n, n->route[dest], b);
        return;
    }
    for (size_t i = 0; i < n->npeers; i++) {
        dc_peer_t *p = n->peers[i];
        if (p->is_parent || p->dead || p->node == UINT32_MAX)
            continue;
        if (dest == DC_NODE_ALL && stream != DC_STREAM_ANY &&
            (stream >= p->nsub || !p->sub[stream]))
            continue;
        dc_peer_send(n, p, b);
    }
}

/* A FRAME down: a broadcast one to the children subscribed to its chunk's
 * stream, an addressed one along the route to its node. */
static void dc_send_frame_down(dc_node_t *n, dc_nbuf_t *b, const dc_msg_t *m)
{
    dc_send_down(n, b, m->node,
                 m->node == DC_NODE_ALL ? dc_chunk_stream(n, m->chunk) : DC_STREAM_ANY);
}

static void dc_send_down_simple(dc_node_t *n, uint8_t type, uint64_t v, uint64_t base,
                                uint32_t dest)
{
    uint8_t h[DC_MSG_HDR_SIZE];
    dc_msg_simple(type, 0, v, base, dest, 0, 0, h);
    dc_nbuf_t *b = dc_nbuf_copy(n, h, sizeof(h));
    if (b) {
        dc_send_down(n, b, dest, DC_STREAM_ANY);
        dc_nbuf_unref(n, b);
    }
}

/* --- receiver ----------------------------------------------------------------- */

static void dc_rx_flush_acks(dc_node_t *n)
{
    if (n->ack_n == 0)
        return;
    dc_send_up_simple(n, DC_MSG_ACK, 0, n->cur.v, n->cur.b, n->ack_lo, n->ack_n);
    n->ack_n = 0;
}

/* A receiver applies (and acks) only the chunks of the shards it needs;
 * the bytes of the others are left alone. */
static int dc_rx_needs(const dc_node_t *n, uint32_t c)
{
    return n->chunk_shard && n->layout && c < n->layout->nchunks &&
           ((n->need_mask >> n->chunk_shard[c]) & 1);
}

static void dc_rx_ack(dc_node_t *n, uint32_t c)
{
    if (n->is_sender)
        return;
    if (n->ack_n && n->ack_lo + n->ack_n == c && n->ack_n < 4096) {
        n->ack_n++;
        return;
    }
    dc_rx_flush_acks(n);
    n->ack_lo = c;
    n->ack_n = 1;
}

static void dc_rx_need(dc_node_t *n, uint32_t c, uint32_t count)
{
    dc_rx_flush_acks(n);
    dc_send_up_simple(n, DC_MSG_NEED, 0, n->cur.v, n->cur.b, c, count);
}

static void dc_rx_drop_version(dc_node_t *n)
{
    if (n->layout) {
        for (uint32_t c = 0; c < n->layout->nchunks; c++) {
            free(n->retained[c]);
            n->retained[c] = NULL;
            free(n->undo[c]);
            n->undo[c] = NULL;
        }
    }
    dc_journal_close(n->j);
    n->j = NULL;
    n->cur.active = 0;
    n->ack_n = 0;
}

static dc_status_t dc_rx_set_dense_needed(dc_node_t *n, int on)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/dense_needed", n->cfg->state_dir);
    n->dense_needed = on;
    if (on) {
        int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0)
            return dc_error_errno(DC_ERR_IO, errno, "%s: create", path);
        fsync(fd);
        close(fd);
    } else if (unlink(path) != 0 && errno != ENOENT) {
        return dc_error_errno(DC_ERR_IO, errno, "%s: unlink", path);
    }
    return dc_engine_fsync_dir(n->cfg->state_dir);
}

/* The version this node holds: its state directory's commit record, else
 * the configured initial version. */
static dc_status_t dc_node_load_committed(dc_node_t *n)
{
    dc_commit_rec_t rec;
    dc_status_t st = dc_commit_read(n->cfg->state_dir, &rec);
    if (st == DC_OK) {
        n->committed = rec.version;
        n->committed_ckpt = (dc_digest_t){rec.digest_lo, rec.digest_hi};
        n->have_record = 1;
    } else if (st == DC_ERR_NOT_FOUND) {
        n->committed = n->cfg->initial_version;
        st = DC_OK;
    }
    return st;
}

/* Our own commit record now says v (from baseline b) of checkpoint digest
 * ckpt: compare-and-set on the version we held (which a record ahead of
 * the job may name above v). */
static dc_status_t dc_node_record_commit(dc_node_t *n, uint64_t v, uint64_t b, dc_digest_t ckpt)
{
    dc_commit_rec_t rec = {.version = v, .baseline = b, .digest_lo = ckpt.lo,
                           .digest_hi = ckpt.hi};
    dc_status_t st = dc_commit_replace(n->cfg->state_dir, n->have_record ? n->committed : 0,
                                       &rec, NULL);
    if (st != DC_OK)
        return st;
    n->have_record = 1;
    n->committed = v;
    n->committed_ckpt = ckpt;
    return DC_OK;
}

static dc_status_t dc_rx_local_commit(dc_node_t *n, uint64_t v, uint64_t b, dc_digest_t ckpt)
{
    if (n->cfg->durable && n->wfile) {
        dc_status_t st = dc_st_sync(n->wfile);
        if (st != DC_OK)
            return st;
    }
    dc_status_t st = dc_node_record_commit(n, v, b, ckpt);
    if (st != DC_OK)
        return st;
    dc_journal_remove(n->cfg->state_dir);
    if (n->dense_needed)
        dc_rx_set_dense_needed(n, 0);
    return DC_OK;
}

/* DONE: apply time, bytes received, the up parent, then the bytes received
 * from each parent link in this version. */
static void dc_rx_send_done(dc_node_t *n, uint64_t v, uint8_t flags)
{
    uint8_t m[DC_MSG_HDR_SIZE + DC_DONE_BODY + DC_MAX_LINKS * DC_DONE_LINK];
    uint32_t nl = 0;
    for (size_t i = 0; i < n->npeers && nl < DC_MAX_LINKS; i++) {
        dc_peer_t *p = n->peers[i];
        if (!p->is_parent || p->node >= n->nnodes || !p->vbytes)
            continue;
        uint8_t *e = m + DC_MSG_HDR_SIZE + DC_DONE_BODY + (size_t)nl * DC_DONE_LINK;
        dc_store_le32(e, p->node);
        dc_store_le64(e + 4, p->vbytes);
        nl++;
    }
    dc_msg_t h = {.type = DC_MSG_DONE, .flags = flags, .version = v, .baseline = n->committed,
                  .node = n->me, .body_len = DC_DONE_BODY + nl * DC_DONE_LINK};
    dc_msg_pack(&h, m);
    dc_store_le64(m + DC_MSG_HDR_SIZE, n->apply_ns);
    dc_store_le64(m + DC_MSG_HDR_SIZE + 8, n->rx_version_bytes);
    dc_store_le32(m + DC_MSG_HDR_SIZE + 16, n->up_id);
    memset(m + DC_MSG_HDR_SIZE + 20, 0, DC_DONE_BODY - 20);
    dc_rx_flush_acks(n);
    dc_nbuf_t *b = dc_nbuf_copy(n, m, DC_MSG_HDR_SIZE + h.body_len);
    if (b) {
        dc_send_up(n, b);
        dc_nbuf_unref(n, b);
    }
}

/* The chunks this receiver needs, for dc_journal_content(). */
static int dc_rx_needs_fn(const void *arg, uint64_t c)
{
    const dc_node_t *n = arg;
    return c < UINT32_MAX && dc_rx_needs(n, (uint32_t)c);
}

/* bgp: a BEGIN that dc_begin_parse accepted (dc_node_handle).  Nothing is
 * acknowledged here by number: a chunk counts as done only once its bytes
 * were checked against the target digest of a frame of this version (the
 * coordinator may have been restarted with other bytes under the same
 * version number, or this node's record may be ahead of the job). */
static void dc_rx_begin(dc_node_t *n, const dc_begin_t *bgp)
{
    const dc_begin_t bg = *bgp;
    if (bg.layout_id != n->layout->id || bg.nchunks != n->layout->nchunks) {
        DC_LOG_ERROR("node %u: version %llu has layout %016llx (%u chunks), this node's "
                     "checkpoint %016llx (%u chunks): cannot take it",
                     n->me, (unsigned long long)bg.version, (unsigned long long)bg.layout_id,
                     bg.nchunks, (unsigned long long)n->layout->id, n->layout->nchunks);
        n->result = dc_error(DC_ERR_INVALID, "layout mismatch with the root");
        n->finished = 1;
        return;
    }
    if (n->cur.active && n->cur.v == bg.version)
        return; /* replay of the BEGIN we are working on */
    if (n->cur.active)
        dc_rx_drop_version(n);
    uint32_t nch = n->layout->nchunks;
    /* the baseline by number and, where the coordinator names it, by
     * content (its record's checkpoint digest) */
    int base_content = dc_digest_zero(bg.base_ckpt) ||
                       dc_digest_eq(bg.base_ckpt, n->committed_ckpt);
    int on_base = n->committed == bg.baseline && base_content && !n->dense_needed;
    int verify = !on_base && n->committed >= bg.baseline && !n->dense_needed;
    if (verify)
        DC_LOG_WARN("node %u: this node's record names version %llu%s, the coordinator "
                    "begins version %llu from version %llu: checking every chunk against "
                    "the coordinator's digests before taking anything",
                    n->me, (unsigned long long)n->committed,
                    base_content ? "" : " with other content", (unsigned long long)bg.version,
                    (unsigned long long)bg.baseline);
    dc_journal_info_t in = {.target = bg.version, .baseline = bg.baseline, .nchunks = nch,
                            .layout_id = n->layout->id};
    int resumed = 0;
    dc_status_t st = dc_journal_open(n->cfg->state_dir, &in,
                                     n->cfg->durable ? DC_JOURNAL_DURABLE : 0, 8, &n->j,
                                     &resumed);
    if (st != DC_OK) {
        DC_LOG_ERROR("node %u: %s", n->me, dc_last_error());
        n->result = st;
        n->finished = 1;
        return;
    }
    n->cur.active = 1;
    n->cur.v = bg.version;
    n->cur.b = bg.baseline;
    n->cur.mode = bg.mode;
    n->cur.on_base = on_base;
    n->cur.verify = verify;
    n->apply_ns = 0;
    n->rx_version_bytes = 0;
    for (size_t i = 0; i < n->npeers; i++)
        n->peers[i]->vbytes = 0;
    if (resumed)
        DC_LOG_INFO("node %u: resuming version %llu: %llu applied (each checked against "
                    "its frame's digest), %llu applying, %llu pending",
                    n->me, (unsigned long long)bg.version,
                    (unsigned long long)dc_journal_count(n->j, DC_JSTATE_APPLIED),
                    (unsigned long long)dc_journal_count(n->j, DC_JSTATE_APPLYING),
                    (unsigned long long)dc_journal_count(n->j, DC_JSTATE_PENDING));
    /* What this node cannot take from the broadcast: ask for overwrites
     * (a node that verifies asks per chunk, once its frame says whether its
     * bytes are the target already). */
    uint32_t run = 0, lo = 0;
    for (uint32_t c = 0; c <= nch; c++) {
        int s = c < nch ? dc_journal_state(n->j, c) : DC_JSTATE_APPLIED;
        int need = c < nch && bg.mode == DC_MODE_DELTA && dc_rx_needs(n, c) &&
                   dc_journal_need(s, n->cur.on_base) == DC_NEED_OVERWRITE &&
                   !(verify && s == DC_JSTATE_PENDING);
        if (need) {
            if (!run)
                lo = c;
            run++;
        } else if (run) {
            dc_rx_need(n, lo, run);
            run = 0;
        }
    }
    dc_rx_flush_acks(n);
}

/* The digest of chunk c's bytes as this node holds them now. */
static dc_status_t dc_rx_chunk_digest(dc_node_t *n, uint32_t c, dc_digest_t *d)
{
    const dc_layout_chunk_t *lc = &n->layout->chunks[c];
    uint8_t *ptr = dc_place_chunk_ptr(&n->place, c);
    if (!ptr) {
        dc_status_t st = dc_place_read(&n->place, c, n->scratch);
        if (st != DC_OK)
            return st;
        ptr = n->scratch;
    }
    *d = dc_digest128(ptr, lc->len);
    return DC_OK;
}

/* Test hook DELTACAST_ENGINE_CRASH_AT=<chunk> (off by default): die by
 * SIGKILL in the middle of applying that chunk, with half of its new bytes
 * written, as a crash mid-apply would leave it. */
static void dc_rx_crash_mid_apply(dc_node_t *n, const dc_frame_hdr_t *fh,
                                  const uint8_t *payload, uint8_t *work, uint64_t len,
                                  uint32_t esize)
{
    uint8_t *tmp = malloc(len);
    if (tmp) {
        memcpy(tmp, work, len);
        if (dc_codec_decode(n->codec, fh->encoding, payload, fh->payload_len, tmp, len / esize,
                            esize) == DC_OK)
            memcpy(work, tmp, len / 2);
    }
    DC_LOG_WARN("node %u: DELTACAST_ENGINE_CRASH_AT: killing myself mid-apply", n->me);
    raise(SIGKILL);
}

/* The weights' memory failed us (a CUDA error: device memory cannot be
 * read or written any more): stop this node; its journal tells a restart
 * which chunks to repair. */
static void dc_rx_mem_fail(dc_node_t *n)
{
    DC_LOG_ERROR("node %u: %s", n->me, dc_last_error());
    n->result = dc_last_status() != DC_OK ? dc_last_status() : DC_ERR_IO;
    n->finished = 1;
}

static void dc_rx_frame(dc_node_t *n, const dc_msg_t *m, dc_nbuf_t *b)
{
    if (!n->cur.active || m->version != n->cur.v)
        return;
    if (m->node != DC_NODE_ALL && m->node != n->me)
        return;
    const dc_layout_t *l = n->layout;
    dc_frame_hdr_t fh;
    if (m->chunk >= l->nchunks || dc_frame_decode(m->body, m->body_len, &fh) != DC_OK ||
        (uint64_t)m->body_len != DC_FRAME_HEADER_SIZE + (uint64_t)fh.payload_len) {
        DC_LOG_WARN("node %u: bad frame for chunk %u: %s", n->me, m->chunk, dc_last_error());
        return;
    }
    uint32_t c = m->chunk;
    if (!dc_rx_needs(n, c))
        return; /* a shard this node does not take: relayed only */
    const dc_layout_chunk_t *lc = &l->chunks[c];
    const dc_layout_tensor_t *lt = &l->tensors[lc->tensor];
    if (fh.tensor_id != lc->tensor || fh.chunk_index != lc->index ||
        fh.elem_offset != lc->offset / lt->esize || fh.elem_count != lc->len / lt->esize ||
        fh.dtype != (uint8_t)lt->dtype || fh.target_version != n->cur.v) {
        DC_LOG_WARN("node %u: frame for chunk %u does not match the layout", n->me, c);
        return;
    }
    const uint8_t *payload = m->body + DC_FRAME_HEADER_SIZE;
    if (dc_frame_check_payload(&fh, payload, fh.payload_len) != DC_OK) {
        DC_LOG_WARN("node %u: chunk %u: %s", n->me, c, dc_last_error());
        dc_rx_need(n, c, 1);
        return;
    }
    int state = dc_journal_state(n->j, c);
    unsigned kind = dc_enc_kind(fh.encoding);
    int xor_kind = dc_enc_needs_base(kind);
    if (state == DC_JSTATE_APPLIED) {
        /* applied before (a duplicate, or a journal resumed after a
         * restart): never applied twice, and done only if what was applied
         * is what this frame's version is */
        if (dc_digest_eq(dc_journal_digest(n->j, c), fh.target_digest)) {
            dc_rx_ack(n, c);
            return;
        }
        DC_LOG_WARN("node %u: chunk %u was applied for version %llu with other content "
                    "than the coordinator's now: asking for an overwrite", n->me, c,
                    (unsigned long long)n->cur.v);
        if (dc_journal_begin(n->j, c) != DC_OK) { /* bytes neither baseline nor target */
            DC_LOG_ERROR("node %u: %s", n->me, dc_last_error());
            n->result = DC_ERR_IO;
            n->finished = 1;
            return;
        }
        state = DC_JSTATE_APPLYING;
        if (xor_kind) {
            dc_rx_need(n, c, 1);
            return;
        }
    }
    if (n->cur.verify && state == DC_JSTATE_PENDING && xor_kind) {
        /* this node's bytes are unknown: done if they are the target
         * already, else only an overwrite can fix them */
        dc_digest_t have;
        if (dc_rx_chunk_digest(n, c, &have) != DC_OK) {
            dc_rx_mem_fail(n);
            return;
        }
        if (dc_digest_eq(have, fh.target_digest) &&
            dc_journal_applied(n->j, c, have) == DC_OK) {
            dc_rx_ack(n, c);
            return;
        }
        dc_rx_need(n, c, 1);
        return;
    }
    if (xor_kind && (state != DC_JSTATE_PENDING || !n->cur.on_base ||
                     fh.baseline_version != n->committed)) {
        /* bytes are not the frame's baseline: only an overwrite can fix */
        dc_rx_need(n, c, 1);
        return;
    }
    uint64_t t0 = dc_now_ns();
    uint8_t *ptr = dc_place_chunk_ptr(&n->place, c);
    uint8_t *work = ptr;
    if (!ptr) {
        if (dc_place_read(&n->place, c, n->scratch) != DC_OK) {
            dc_rx_mem_fail(n);
            return;
        }
        work = n->scratch;
    }
    if (!xor_kind && state == DC_JSTATE_PENDING && n->cur.on_base &&
        n->cur.mode == DC_MODE_DELTA && !n->undo[c]) {
        n->undo[c] = malloc(lc->len);
        if (n->undo[c])
            memcpy(n->undo[c], work, lc->len);
    }
    if (dc_journal_begin(n->j, c) != DC_OK) {
        DC_LOG_ERROR("node %u: %s", n->me, dc_last_error());
        n->result = DC_ERR_IO;
        n->finished = 1;
        return;
    }
    if (DC_UNLIKELY(n->crash_at == (int64_t)c))
        dc_rx_crash_mid_apply(n, &fh, payload, work, lc->len, lt->esize);
    /* patch in place and hash the result in the same pass (block by block,
     * while each block is in cache) */
    dc_digest_t d;
    dc_status_t st = dc_codec_decode_digest(n->codec, fh.encoding, payload, fh.payload_len,
                                            work, work, lc->len / lt->esize, lt->esize, NULL,
                                            &d);
    if (st != DC_OK) {
        /* the codec leaves dst untouched on error */
        if (state == DC_JSTATE_PENDING)
            dc_journal_reset(n->j, c);
        DC_LOG_WARN("node %u: chunk %u: %s", n->me, c, dc_last_error());
        dc_rx_need(n, c, 1);
        return;
    }
    if (!ptr && dc_place_write(&n->place, c, n->scratch) != DC_OK) {
        /* the journal says APPLYING: a restart repairs it with an overwrite */
        dc_rx_mem_fail(n);
        return;
    }
    n->apply_ns += dc_now_ns() - t0;
    if (!dc_digest_eq(d, fh.target_digest)) {
        DC_LOG_WARN("node %u: chunk %u: target digest mismatch after apply; asking for an "
                    "overwrite", n->me, c);
        dc_rx_need(n, c, 1);
        return;
    }
    if (n->cfg->durable && n->wfile) {
        /* the bytes reach the disk before the journal may say APPLIED */
        uint8_t *cp = dc_place_chunk_ptr(&n->place, c);
        if (cp) {
            uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
            uintptr_t a = (uintptr_t)cp & ~(pg - 1);
            if (msync((void *)a, (size_t)((uintptr_t)cp + lc->len - a), MS_SYNC) != 0)
                DC_LOG_WARN("node %u: msync chunk %u: %s", n->me, c, strerror(errno));
        } else if (dc_st_sync(n->wfile) != DC_OK) {
            DC_LOG_WARN("node %u: %s", n->me, dc_last_error());
        }
    }
    if (xor_kind && n->cur.mode == DC_MODE_DELTA) {
        n->retained[c] = malloc(m->body_len);
        if (n->retained[c]) {
            memcpy(n->retained[c], m->body, m->body_len);
            n->retained_len[c] = m->body_len;
        }
    }
    if (dc_journal_applied(n->j, c, d) != DC_OK) {
        DC_LOG_ERROR("node %u: %s", n->me, dc_last_error());
        n->result = DC_ERR_IO;
        n->finished = 1;
        return;
    }
    dc_rx_ack(n, c);
    (void)b;
}

/* COMMIT of v: the version in flight (every chunk this node needs applied
 * and verified), or, addressed to this node, the coordinator asking it to
 * show that it holds its committed v (its record names v with v's
 * checkpoint digest, or its journal of v is complete with the content hash
 * the coordinator computed).  DONE says which; nothing is taken by number. */
static void dc_rx_commit(dc_node_t *n, const dc_msg_t *m)
{
    if (m->node != DC_NODE_ALL && m->node != n->me)
        return;
    dc_commit_msg_t cm;
    if (dc_commit_msg_parse(m, &cm) != DC_OK) {
        DC_LOG_WARN("node %u: dropping a bad COMMIT: %s", n->me, dc_last_error());
        return;
    }
    uint8_t flags = 0;
    if (n->cur.active && n->cur.v == m->version && n->j) {
        uint32_t missing = 0, needed = 0;
        for (uint32_t c = 0; c < n->layout->nchunks; c++) {
            if (!dc_rx_needs(n, c))
                continue;
            needed++;
            missing += dc_journal_state(n->j, c) != DC_JSTATE_APPLIED;
        }
        if (missing) {
            DC_LOG_ERROR("node %u: COMMIT %llu with %u of the %u chunks it needs applied",
                         n->me, (unsigned long long)m->version, needed - missing, needed);
            dc_rx_set_dense_needed(n, 1);
            dc_rx_drop_version(n);
            flags = DC_DONE_F_DENSE | DC_DONE_F_NOT_HELD;
            goto done;
        }
        dc_journal_close(n->j);
        n->j = NULL;
        if (dc_rx_local_commit(n, m->version, n->cur.b, cm.ckpt) != DC_OK) {
            DC_LOG_ERROR("node %u: version %llu is applied, but its local commit failed: %s",
                         n->me, (unsigned long long)m->version, dc_last_error());
            n->commit_failed = 1;
            flags = DC_DONE_F_FAILED;
        }
        dc_rx_drop_version(n);
        goto done;
    }
    if (n->committed == m->version && !n->dense_needed &&
        (dc_digest_zero(cm.ckpt) || dc_digest_eq(cm.ckpt, n->committed_ckpt))) {
        n->commit_failed = 0;
        goto done; /* holds it (e.g. a replay, or a confirmation) */
    }
    /* a complete journal of v whose content is the coordinator's */
    dc_journal_info_t ji;
    uint8_t *states = NULL;
    dc_digest_t *dg = NULL;
    int held = 0;
    if (!dc_digest_zero(cm.content) && !n->cur.active &&
        dc_journal_load(n->cfg->state_dir, &ji, &states, &dg) == DC_OK &&
        ji.target == m->version && ji.nchunks == n->layout->nchunks &&
        ji.layout_id == n->layout->id)
        held = dc_digest_eq(dc_journal_content(states, dg, ji.nchunks, dc_rx_needs_fn, n),
                            cm.content);
    free(states);
    free(dg);
    if (!held) {
        DC_LOG_WARN("node %u: COMMIT %llu for a version it cannot show it holds (its record: "
                    "version %llu)", n->me, (unsigned long long)m->version,
                    (unsigned long long)n->committed);
        flags = DC_DONE_F_NOT_HELD | (n->dense_needed ? DC_DONE_F_DENSE : 0);
        goto done;
    }
    if (dc_rx_local_commit(n, m->version, ji.baseline, cm.ckpt) != DC_OK) {
        DC_LOG_ERROR("node %u: version %llu is applied, but its local commit failed: %s",
                     n->me, (unsigned long long)m->version, dc_last_error());
        n->commit_failed = 1;
        flags = DC_DONE_F_FAILED;
    } else {
        n->commit_failed = 0;
        DC_LOG_INFO("node %u: version %llu committed from its journal (content checked)",
                    n->me, (unsigned long long)m->version);
    }
done:
    dc_rx_send_done(n, m->version, flags);
}

static void dc_rx_abort(dc_node_t *n, const dc_msg_t *m)
{
    if (!n->cur.active || n->cur.v != m->version) {
        dc_rx_send_done(n, m->version, n->dense_needed ? DC_DONE_F_DENSE : 0);
        return;
    }
    const dc_layout_t *l = n->layout;
    int dense = 0;
    uint32_t undone = 0;
    for (uint32_t c = 0; c < l->nchunks; c++) {
        int s = dc_journal_state(n->j, c);
        if (s == DC_JSTATE_PENDING)
            continue;
        const dc_layout_chunk_t *lc = &l->chunks[c];
        const dc_layout_tensor_t *lt = &l->tensors[lc->tensor];
        uint8_t *ptr = dc_place_chunk_ptr(&n->place, c);
        uint8_t *work = ptr;
        if (!ptr) {
            if (dc_place_read(&n->place, c, n->scratch) != DC_OK) {
                dense = 1;
                continue;
            }
            work = n->scratch;
        }
        int ok = 0;
        if (n->undo[c]) {
            memcpy(work, n->undo[c], lc->len);
            ok = 1;
        } else if (s == DC_JSTATE_APPLIED && n->retained[c]) {
            dc_frame_hdr_t fh;
            /* XOR is self-inverse: applying the same frame again undoes it */
            if (dc_frame_decode(n->retained[c], n->retained_len[c], &fh) == DC_OK &&
                dc_codec_decode(n->codec, fh.encoding, n->retained[c] + DC_FRAME_HEADER_SIZE,
                                fh.payload_len, work, lc->len / lt->esize,
                                lt->esize) == DC_OK)
                ok = 1;
        }
        if (ok && !ptr && dc_place_write(&n->place, c, n->scratch) != DC_OK)
            ok = 0;
        if (ok) {
            dc_journal_reset(n->j, c);
            undone++;
        } else {
            dense = 1;
        }
    }
    DC_LOG_INFO("node %u: version %llu aborted: %u chunks returned to baseline%s", n->me,
                (unsigned long long)m->version, undone,
                dense ? "; some bytes unknown: marked for dense refit" : "");
    if (dense)
        dc_rx_set_dense_needed(n, 1);
    if (n->cfg->durable && n->wfile)
        dc_st_sync(n->wfile);
    dc_rx_drop_version(n);
    dc_journal_remove(n->cfg->state_dir);
    dc_rx_send_done(n, m->version, dense ? DC_DONE_F_DENSE : 0);
}

/* BYE: the job ended at version v (checkpoint digest ckpt).  A receiver
 * that does not hold exactly that says so and exits non-zero: no run ends
 * with other bytes and exit 0. */
static void dc_rx_bye(dc_node_t *n, uint64_t v, dc_digest_t ckpt)
{
    const char *why = NULL;
    if (n->commit_failed)
        why = "its last local commit failed";
    else if (n->dense_needed)
        why = "its bytes are unknown (marked for a dense refit)";
    else if (n->committed != v)
        why = "it holds another version";
    else if (!dc_digest_zero(ckpt) && !dc_digest_eq(ckpt, n->committed_ckpt))
        why = "its record names other content for that version";
    if (!why)
        return;
    n->result = dc_error(DC_ERR_VERIFY, "node %u: the job ended at version %llu, but this "
                         "node's record names version %llu: %s",
                         n->me, (unsigned long long)v, (unsigned long long)n->committed, why);
    DC_LOG_ERROR("%s", dc_last_error());
    n->finished = 1; /* after the BYE went on to the children (dc_node_serve drains) */
}

/* HELLO for a new parent edge: committed version and journal. */
static dc_nbuf_t *dc_rx_hello(dc_node_t *n)
{
    dc_hello_t h = {.node = n->me, .committed = n->committed, .layout_id = n->layout->id};
    dc_journal_info_t ji;
    uint8_t *states = NULL;
    if (n->j) {
        const dc_journal_info_t *i = dc_journal_info(n->j);
        ji = *i;
        states = malloc(ji.nchunks ? ji.nchunks : 1);
        for (uint64_t c = 0; states && c < ji.nchunks; c++)
            states[c] = (uint8_t)dc_journal_state(n->j, c);
    } else if (dc_journal_load(n->cfg->state_dir, &ji, &states, NULL) != DC_OK) {
        states = NULL;
    }
    if (states) {
        h.j_target = ji.target;
        h.j_baseline = ji.baseline;
        h.nstates = (uint32_t)ji.nchunks;
        h.states = states;
        h.flags |= DC_HELLO_F_JOURNAL;
    }
    if (n->dense_needed)
        h.flags |= DC_HELLO_F_DENSE_NEEDED;
    size_t len = dc_hello_size(h.nstates);
    dc_nbuf_t *b = dc_nbuf_new(n, len, 0, 0);
    if (b) {
        dc_hello_pack(DC_MSG_HELLO, &h, b->data);
        b->len = len;
    }
    free(states);
    return b;
}

/* --- root ----------------------------------------------------------------------- */

static uint32_t dc_root_nrecv(const dc_node_t *n)
{
    uint32_t k = 0;
    for (uint32_t i = 1; i < n->nnodes; i++)
        k += n->rneed[i] != 0;
    return k;
}

static int dc_node_role_sender(const dc_node_t *n, uint32_t i)
{
    dc_topo_node_info_t info;
    memset(&info, 0, sizeof(info));
    info.size = sizeof(info);
    return dc_topo_node(n->cfg->topo, i, &info) == DC_OK && info.role == DC_TOPO_SENDER;
}

/* Node i (not the coordinator) is where the coordinator needs it: a
 * receiver that needs chunks has joined, another sender's control link is
 * up; a node needing nothing is never waited for. */
static int dc_root_node_joined(const dc_node_t *n, uint32_t i)
{
    return n->rneed[i] ? n->joined[i] : !dc_node_role_sender(n, i) || n->sjoined[i];
}

/* Every receiver joined and every other sender's control link is up. */
static int dc_root_all_joined(const dc_node_t *n)
{
    for (uint32_t i = 1; i < n->nnodes; i++)
        if (!dc_root_node_joined(n, i))
            return 0;
    return 1;
}

/* The coordinator's live control link to sender s (NULL: none). */
static dc_peer_t *dc_root_ctl_peer(dc_node_t *n, uint32_t s)
{
    for (size_t i = 0; i < n->npeers; i++)
        if (n->peers[i]->ctl && n->peers[i]->node == s && !n->peers[i]->dead)
            return n->peers[i];
    return NULL;
}

/* The wqin entry of (dest, chunk), NULL when there is none (under mu). */
static uint8_t *dc_wq_in(dc_node_t *n, uint32_t dest, uint32_t chunk)
{
    uint32_t nch = n->layout->nchunks;
    return n->wqin && dest < n->nnodes && chunk < nch ? &n->wqin[(size_t)dest * nch + chunk]
                                                      : NULL;
}

/* Drop every queued repair (under mu). */
static void dc_wq_clear(dc_node_t *n)
{
    n->wq_n = 0;
    if (n->wqin)
        memset(n->wqin, 0, (size_t)n->nnodes * (n->layout->nchunks ? n->layout->nchunks : 1));
}

static void dc_root_queue(dc_node_t *n, uint32_t chunk, uint32_t dest, int overwrite)
{
    if (n->is_root && n->cfg->source && n->chunk_src[chunk] != n->me) {
        /* sent from another sender's memory: only it can re-send it (its
         * repair frame comes back up its control link and is routed here) */
        uint32_t src = n->chunk_src[chunk];
        dc_peer_t *p = src < n->nnodes ? dc_root_ctl_peer(n, src) : NULL;
        uint8_t h[DC_MSG_HDR_SIZE];
        dc_msg_simple(DC_MSG_NEED, overwrite ? DC_NEED_F_OVERWRITE : 0, n->vnum, n->vbase, dest,
                      chunk, 1, h);
        dc_nbuf_t *b = p ? dc_nbuf_copy(n, h, sizeof(h)) : NULL;
        if (b) {
            dc_peer_send(n, p, b);
            dc_nbuf_unref(n, b);
        } else {
            DC_LOG_WARN("coordinator: chunk %u for node %u: its sender %u is not connected",
                        chunk, dest, src);
        }
        return;
    }
    pthread_mutex_lock(&n->mu);
    uint8_t *in = dc_wq_in(n, dest, chunk);
    if (in && (*in & (overwrite ? 2 : 3))) {
        /* already waiting (an overwrite serves an XOR's request too) */
        pthread_mutex_unlock(&n->mu);
        return;
    }
    if (n->wq_n == n->wq_cap) {
        size_t nc = n->wq_cap ? n->wq_cap * 2 : 256;
        dc_work_t *w = malloc(nc * sizeof(*w));
        if (!w) {
            pthread_mutex_unlock(&n->mu);
            return;
        }
        for (size_t k = 0; k < n->wq_n; k++)
            w[k] = n->wq[(n->wq_head + k) % n->wq_cap];
        free(n->wq);
        n->wq = w;
        n->wq_cap = nc;
        n->wq_head = 0;
    }
    n->wq[(n->wq_head + n->wq_n) % n->wq_cap] = (dc_work_t){chunk, dest, (uint8_t)overwrite};
    n->wq_n++;
    if (in)
        *in |= overwrite ? 2 : 1;
    n->repairs++;
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
}

typedef struct dc_enc_arg {
    dc_node_t *n;
    int idx;
} dc_enc_arg_t;

/* Read a chunk's bytes with pread into buf (cheaper than faulting the
 * mapping in page by page); NULL when that fails (use the mapping). */
static const uint8_t *dc_root_pread(int fd, const dc_st_file_t *f, const dc_st_tensor_t *t,
                                   uint64_t off, uint64_t len, uint8_t *buf)
{
    if (fd < 0 || !buf)
        return NULL;
    uint64_t pos = dc_st_data_offset(f) + t->begin + off, done = 0;
    while (done < len) {
        ssize_t r = pread(fd, buf + done, len - done, (off_t)(pos + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return NULL;
        done += (uint64_t)r;
    }
    return buf;
}

static dc_nbuf_t *dc_root_encode(dc_node_t *n, dc_codec_t *codec, const dc_work_t *w,
                                 uint8_t *bbuf, uint8_t *nbuf, dc_digest_t *dg)
{
    const dc_layout_t *l = n->layout;
    const dc_layout_chunk_t *lc = &l->chunks[w->chunk];
    const dc_layout_tensor_t *lt = &l->tensors[lc->tensor];
    int overwrite = w->overwrite || n->mode == DC_MODE_DENSE;
    const uint8_t *bp, *np;
    if (n->cfg->source) {
        /* memory: our baseline copy, the caller's placement of the version */
        bp = n->mbase + n->moff[w->chunk];
        np = dc_place_chunk_ptr(&n->mnext, w->chunk);
        if (!np) {
            if (!nbuf) {
                DC_LOG_ERROR("root: encode chunk %u: no gather buffer (out of memory)",
                             w->chunk);
                return NULL;
            }
            if (dc_place_read(&n->mnext, w->chunk, nbuf) != DC_OK) {
                DC_LOG_ERROR("root: encode chunk %u: %s", w->chunk, dc_last_error());
                return NULL;
            }
            np = nbuf;
        }
    } else {
        const dc_st_tensor_t *bt = dc_st_tensor(n->base, lc->tensor);
        const dc_st_tensor_t *nt = dc_st_tensor(n->next, lc->tensor);
        bp = overwrite ? NULL
                       : dc_root_pread(n->base_fd, n->base, bt, lc->offset, lc->len, bbuf);
        np = dc_root_pread(n->next_fd, n->next, nt, lc->offset, lc->len, nbuf);
        if (!bp)
            bp = dc_st_data(n->base, bt) + lc->offset;
        if (!np)
            np = dc_st_data(n->next, nt) + lc->offset;
    }
    size_t cap = DC_MSG_HDR_SIZE + DC_FRAME_HEADER_SIZE + dc_codec_payload_bound(lc->len);
    dc_nbuf_t *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->data = malloc(cap);
    if (!b->data) {
        free(b);
        return NULL;
    }
    size_t plen = 0;
    uint16_t enc = 0;
    uint8_t *payload = b->data + DC_MSG_HDR_SIZE + DC_FRAME_HEADER_SIZE;
    /* the target digest comes out of the diff's own pass over next */
    dc_digest_t tdg;
    dc_status_t st = dc_codec_encode_digest(codec, overwrite ? NULL : bp, np,
                                            lc->len / lt->esize, lt->esize, payload,
                                            cap - DC_MSG_HDR_SIZE - DC_FRAME_HEADER_SIZE, &plen,
                                            &enc, NULL, NULL, &tdg);
    if (st != DC_OK) {
        DC_LOG_ERROR("root: encode chunk %u: %s", w->chunk, dc_last_error());
        free(b->data);
        free(b);
        return NULL;
    }
    dc_frame_hdr_t fh = {.type = DC_FRAME_CHUNK, .dtype = (uint8_t)lt->dtype, .encoding = enc,
                         .tensor_id = lc->tensor, .chunk_index = lc->index,
                         .elem_offset = lc->offset / lt->esize,
                         .elem_count = lc->len / lt->esize,
                         .baseline_version = n->vbase, .target_version = n->vnum,
                         .payload_len = (uint32_t)plen,
                         .payload_crc = dc_crc32c(0, payload, plen),
                         .target_digest = tdg};
    dc_frame_encode(&fh, b->data + DC_MSG_HDR_SIZE);
    unsigned kind = dc_enc_kind(enc);
    dc_msg_t m = {.type = DC_MSG_FRAME,
                  .flags = (uint8_t)((kind == DC_ENC_PUT_DENSE ? DC_FRAME_F_OVERWRITE : 0) |
                                     (w->dest != DC_NODE_ALL ? DC_FRAME_F_RETRY : 0)),
                  .version = n->vnum, .baseline = n->vbase, .node = w->dest,
                  .chunk = w->chunk, .count = 1,
                  .body_len = (uint32_t)(DC_FRAME_HEADER_SIZE + plen)};
    dc_msg_pack(&m, b->data);
    b->len = DC_MSG_HDR_SIZE + DC_FRAME_HEADER_SIZE + plen;
    if (b->len < cap / 2) {
        uint8_t *s = realloc(b->data, b->len);
        if (s)
            b->data = s;
    }
    b->cap = b->len;
    b->refs = 1;
    b->acct = 1;
    *dg = fh.target_digest;
    return b;
}

static void *dc_root_encoder(void *arg)
{
    dc_enc_arg_t *a = arg;
    dc_node_t *n = a->n;
    dc_codec_t *codec = NULL;
    if (dc_codec_create(n->layout->max_chunk ? n->layout->max_chunk : 64, &codec) != DC_OK) {
        DC_LOG_ERROR("root: %s", dc_last_error());
        return NULL;
    }
    size_t mc = n->layout->max_chunk ? n->layout->max_chunk : 1;
    uint8_t *bbuf = malloc(mc), *nbuf = malloc(mc); /* NULL: read the mapping */
    for (;;) {
        pthread_mutex_lock(&n->mu);
        dc_work_t w;
        for (;;) {
            if (n->enc_stop)
                break;
            if (n->inflight <= n->inflight_max && (n->wq_n > 0 || n->cursor < n->total))
                break;
            pthread_cond_wait(&n->cv, &n->mu);
        }
        if (n->enc_stop) {
            pthread_mutex_unlock(&n->mu);
            break;
        }
        if (n->wq_n > 0) {
            w = n->wq[n->wq_head];
            n->wq_head = (n->wq_head + 1) % n->wq_cap;
            n->wq_n--;
            uint8_t *in = dc_wq_in(n, w.dest, w.chunk);
            if (in)
                *in &= w.overwrite ? 1 : 2;
        } else {
            w = (dc_work_t){n->bcast[n->cursor++], DC_NODE_ALL, 0};
        }
        /* reserve the worst case while encoding */
        uint64_t reserve = n->layout->chunks[w.chunk].len / 4;
        n->inflight += reserve;
        n->enc_busy++;
        if (!n->enc_first_ns)
            n->enc_first_ns = dc_now_ns();
        pthread_mutex_unlock(&n->mu);

        uint64_t t0 = dc_now_ns();
        dc_digest_t dg = {0, 0};
        dc_nbuf_t *b = dc_root_encode(n, codec, &w, bbuf, nbuf, &dg);
        uint64_t t1 = dc_now_ns();

        pthread_mutex_lock(&n->mu);
        n->inflight -= reserve;
        n->enc_busy--;
        pthread_cond_broadcast(&n->cv);
        n->enc_ns += t1 - t0;
        n->enc_last_ns = t1;
        if (b) {
            n->digests[w.chunk] = dg; /* the target's digest, whatever the encoding */
            n->dknown[w.chunk] = 1;
            n->inflight += b->cap;
            if (n->ready_tail)
                n->ready_tail->next = b;
            else
                n->ready_head = b;
            n->ready_tail = b;
        } else {
            n->result = DC_ERR_INTERNAL;
        }
        pthread_mutex_unlock(&n->mu);
        uint64_t one = 1;
        if (write(n->evfd, &one, sizeof(one)) < 0) {
            /* the loop polls with a timeout anyway */
        }
    }
    dc_codec_free(codec);
    free(bbuf);
    free(nbuf);
    return NULL;
}

static void dc_root_drain_ready(dc_node_t *n)
{
    uint64_t cnt;
    if (read(n->evfd, &cnt, sizeof(cnt)) < 0) {
        /* EAGAIN: nothing signalled */
    }
    pthread_mutex_lock(&n->mu);
    dc_nbuf_t *b = n->ready_head;
    n->ready_head = n->ready_tail = NULL;
    pthread_mutex_unlock(&n->mu);
    while (b) {
        dc_nbuf_t *next = b->next;
        b->next = NULL;
        dc_msg_t m;
        if (dc_msg_parse(b->data, b->len, &m) == DC_OK && m.version == n->vnum &&
            n->in_flight) {
            if (!n->t_first_frame)
                n->t_first_frame = dc_now_ns();
            if (m.node == DC_NODE_ALL) {
                n->sent++;
                if (DC_UNLIKELY(n->crash_frames && n->is_root && n->sent >= n->crash_frames &&
                                !n->crash_ns))
                    n->crash_ns = dc_now_ns();
                n->payload_bytes += b->len - DC_MSG_HDR_SIZE;
                if (n->sentc && m.chunk < n->layout->nchunks)
                    n->sentc[m.chunk] = 1;
            } else {
                n->repair_bytes += b->len - DC_MSG_HDR_SIZE;
                if (m.flags & DC_FRAME_F_OVERWRITE)
                    n->overwrites_sent++;
            }
            if (!n->is_root && m.node != DC_NODE_ALL &&
                (m.node >= n->nnodes || !n->route[m.node] || n->route[m.node]->dead))
                dc_send_up(n, b); /* a repair the coordinator asked for: it routes it */
            else
                dc_send_frame_down(n, b, &m);
        }
        dc_nbuf_unref(n, b);
        b = next;
    }
}

/* A sender other than the coordinator, once every chunk it owns of the
 * version in flight is encoded and queued: SENT up the control link, with
 * the chunks' target digests (for the checkpoint digest). */
static void dc_sender_report_sent(dc_node_t *n)
{
    if (n->is_root || !n->is_sender || !n->in_flight || n->sent_reported || n->sent < n->total)
        return;
    n->sent_reported = 1;
    size_t per = (n->rx_cap - DC_MSG_HDR_SIZE) / DC_SENT_ENTRY;
    uint32_t k = 0;
    do {
        uint32_t cnt = (uint32_t)DC_MIN((size_t)(n->nbcast - k), per);
        size_t len = DC_MSG_HDR_SIZE + (size_t)cnt * DC_SENT_ENTRY;
        dc_nbuf_t *b = dc_nbuf_new(n, len, 0, 0);
        if (!b)
            return;
        dc_msg_t h = {.type = DC_MSG_SENT,
                      .flags = k + cnt >= n->nbcast ? DC_SENT_F_LAST : 0,
                      .version = n->vnum, .baseline = n->payload_bytes, .node = n->me,
                      .count = cnt,
                      .body_len = cnt * DC_SENT_ENTRY};
        dc_msg_pack(&h, b->data);
        pthread_mutex_lock(&n->mu);
        for (uint32_t e = 0; e < cnt; e++) {
            uint8_t *p = b->data + DC_MSG_HDR_SIZE + (size_t)e * DC_SENT_ENTRY;
            uint32_t c = n->bcast[k + e];
            dc_store_le32(p, c);
            dc_store_le64(p + 4, n->digests[c].lo);
            dc_store_le64(p + 12, n->digests[c].hi);
        }
        pthread_mutex_unlock(&n->mu);
        b->len = len;
        dc_send_up(n, b);
        dc_nbuf_unref(n, b);
        k += cnt;
    } while (k < n->nbcast);
}

static void dc_root_mark_acked(dc_node_t *n, uint32_t node, uint32_t c, uint32_t count)
{
    uint32_t nch = n->layout->nchunks;
    if (node == 0 || node >= n->nnodes || !n->rneed[node])
        return;
    if (count == 0 || c >= nch)
        return;
    uint32_t end = c + count > nch ? nch : c + count;
    for (uint32_t k = c; k < end; k++) {
        if (!((n->rneed[node] >> n->chunk_shard[k]) & 1))
            continue; /* not one of its shards */
        uint8_t *a = &n->acked[(size_t)node * nch + k];
        if (!*a) {
            *a = 1;
            n->nacked[node]++;
            n->last_progress[node] = dc_now_ns();
        }
        n->needq[(size_t)node * nch + k] = 0;
    }
}

static int dc_root_all_acked(const dc_node_t *n)
{
    for (uint32_t i = 1; i < n->nnodes; i++)
        if (n->nacked[i] < n->nneed[i])
            return 0;
    return 1;
}

/* Node i needs chunk c (coordinator's view). */
static int dc_root_needs(const dc_node_t *n, uint32_t i, uint32_t c)
{
    return (n->rneed[i] >> n->chunk_shard[c]) & 1;
}

/* Chunk c of the version in flight has been broadcast by its sender (as
 * far as the coordinator knows: its own, or a sender that reported SENT). */
static int dc_root_was_sent(const dc_node_t *n, uint32_t c)
{
    uint32_t src = n->chunk_src[c];
    if (src == n->me)
        return n->sentc[c];
    return src < n->nnodes && n->ssent[src];
}

/* The chunks node x needs (coordinator's view), for dc_journal_content(). */
typedef struct dc_needs_arg {
    const dc_node_t *n;
    uint32_t x;
} dc_needs_arg_t;

static int dc_root_needs_fn(const void *arg, uint64_t c)
{
    const dc_needs_arg_t *a = arg;
    return c < a->n->layout->nchunks && dc_root_needs(a->n, a->x, (uint32_t)c);
}

/* COMMIT of the coordinator's committed version addressed to node x, with
 * the content hash of that version over the chunks x needs (when the
 * target digests are known), so that x commits it from a complete journal
 * only if the journal holds that content. */
static void dc_root_send_confirm(dc_node_t *n, uint32_t x, uint64_t base)
{
    dc_commit_msg_t cm = {.ckpt = n->root_ckpt};
    if (n->digests_ok) {
        dc_needs_arg_t a = {n, x};
        cm.content = dc_journal_content(NULL, n->digests, n->layout->nchunks,
                                        dc_root_needs_fn, &a);
    }
    uint8_t buf[DC_MSG_HDR_SIZE + DC_COMMIT_BODY];
    dc_commit_msg_pack(n->root_committed, base < n->root_committed ? base : 0, x, &cm, buf);
    dc_nbuf_t *b = dc_nbuf_copy(n, buf, sizeof(buf));
    if (b) {
        dc_send_down(n, b, x, DC_STREAM_ANY);
        dc_nbuf_unref(n, b);
    }
}

/* A (re)joining node's STATE while a version is in flight: re-send what it
 * missed of the broadcast.  Its HELLO is taken for what it says it lacks,
 * never for what it says it has: a chunk its journal calls applied, or a
 * node whose record is at or past the version, gets the chunk's frame
 * again, and the node acknowledges it only once its bytes match the
 * frame's target digest (a journal or record of another run's content
 * under the same version number would otherwise count as done). */
static void dc_root_state(dc_node_t *n, const dc_hello_t *h)
{
    uint32_t x = h->node;
    if (x == 0 || x >= n->nnodes || !n->rneed[x])
        return;
    n->joined[x] = 1;
    n->hello_committed[x] = h->committed;
    n->last_seen[x] = n->last_progress[x] = dc_now_ns();
    if (!n->in_flight) {
        if (h->committed < n->root_committed && (h->flags & DC_HELLO_F_JOURNAL) &&
            h->j_target == n->root_committed && n->root_committed)
            dc_root_send_confirm(n, x, h->j_baseline);
        return;
    }
    uint32_t nch = n->layout->nchunks;
    int journal = (h->flags & DC_HELLO_F_JOURNAL) && h->j_target == n->vnum &&
                  h->nstates == nch;
    int dense = (h->flags & DC_HELLO_F_DENSE_NEEDED) != 0;
    int on_base = h->committed == n->vbase && !dense;
    int ahead = h->committed > n->vbase && !dense; /* it checks each chunk's digest */
    for (uint32_t c = 0; c < nch; c++) {
        if (!dc_root_needs(n, x, c) || !dc_root_was_sent(n, c))
            continue; /* the rest comes with the broadcast */
        if (n->acked[(size_t)x * nch + c])
            continue;
        int s = journal ? h->states[c] : DC_JSTATE_PENDING;
        if (n->mode == DC_MODE_DENSE) {
            dc_root_queue(n, c, x, 1);
        } else if ((on_base && s == DC_JSTATE_PENDING) || s == DC_JSTATE_APPLIED ||
                   (ahead && s == DC_JSTATE_PENDING)) {
            dc_root_queue(n, c, x, 0);
        } else if (!n->needq[(size_t)x * nch + c]) {
            /* half applied, or not the baseline's bytes: an overwrite (the
             * node's own NEED, if it got through before its HELLO, is not
             * answered twice) */
            n->needq[(size_t)x * nch + c] = 1;
            dc_root_queue(n, c, x, 1);
        }
    }
    /* chunks of senders still broadcasting may have passed it by while it
     * was (re)attaching: what it still lacks of them when they say SENT */
    for (uint32_t i = 1; i < n->nnodes; i++)
        if (n->sjoined[i] && !n->ssent[i])
            n->resync[x] = 1;
}

static void dc_root_begin(dc_node_t *n, uint64_t v)
{
    n->vnum = v;
    n->vbase = v - 1;
    uint32_t nch = n->layout->nchunks;
    memset(n->acked, 0, (size_t)n->nnodes * nch);
    memset(n->needq, 0, (size_t)n->nnodes * nch);
    memset(n->nacked, 0, n->nnodes * sizeof(*n->nacked));
    memset(n->vdone, 0, n->nnodes);
    memset(n->sentc, 0, nch ? nch : 1);
    memset(n->ssent, 0, n->nnodes);
    memset(n->resync, 0, n->nnodes);
    pthread_mutex_lock(&n->mu);
    memset(n->dknown, 0, nch ? nch : 1);
    pthread_mutex_unlock(&n->mu);
    uint64_t now = dc_now_ns();
    for (uint32_t i = 0; i < n->nnodes; i++)
        n->last_seen[i] = n->last_progress[i] = now;
    n->sent = 0;
    n->other_payload = n->other_frames = 0;
    n->payload_bytes = n->repair_bytes = n->repairs = n->overwrites_sent = 0;
    n->enc_ns = n->enc_first_ns = n->enc_last_ns = 0;
    n->t_begin = now;
    dc_trace(n, "begin", NULL, 0);
    n->t_first_frame = n->t_all_sent = n->t_all_acked = 0;
    for (uint32_t i = 0; i < n->nnodes; i++) {
        n->rx_apply_ns[i] = n->rx_bytes[i] = 0;
        n->rx_nlinks[i] = 0;
    }
    dc_begin_t bg = {.version = v, .baseline = v - 1, .layout_id = n->layout->id,
                     .nchunks = nch, .mode = n->mode, .base_ckpt = n->root_ckpt};
    n->digests_ok = 0; /* digests[] fill with v's from here on */
    dc_nbuf_t *b = dc_nbuf_new(n, DC_BEGIN_SIZE, 0, 0);
    if (b) {
        dc_begin_pack(&bg, b->data);
        b->len = DC_BEGIN_SIZE;
        dc_send_down(n, b, DC_NODE_ALL, DC_STREAM_ANY);
        dc_nbuf_unref(n, n->begin_msg); /* replayed to children attaching later */
        n->begin_msg = b;
    }
    n->in_flight = 1;
    pthread_mutex_lock(&n->mu);
    n->cursor = 0;
    n->total = n->nbcast;
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
    /* receivers known to be off the baseline get overwrites right away via
     * their own NEED after BEGIN. */
}

/* --- senders other than the coordinator --------------------------------------------- */

static dc_status_t dc_root_open_version(dc_node_t *n, uint64_t v);
static dc_status_t dc_enc_alloc(dc_node_t *n);
static dc_status_t dc_node_chunk_map(dc_node_t *n);
static dc_status_t dc_sender_start_encoders(dc_node_t *n);
static int dc_mem_try(dc_node_t *n, uint64_t v);
static dc_status_t dc_mem_done(dc_node_t *n, uint64_t v, dc_status_t st, const dc_vstats_t *vs);
static void dc_sender_end(dc_node_t *n, uint64_t v, uint8_t type);

/* Start broadcasting version bg (its bytes are open: files or memory). */
static void dc_sender_start(dc_node_t *n, const dc_begin_t *bg, dc_status_t st)
{
    int first = !n->enc;
    if (st == DC_OK && (bg->layout_id != n->layout->id || bg->nchunks != n->layout->nchunks))
        st = dc_error(DC_ERR_INVALID, "sender %u: version %llu has layout %016llx, the "
                      "coordinator's %016llx: different checkpoints", n->me,
                      (unsigned long long)bg->version, (unsigned long long)n->layout->id,
                      (unsigned long long)bg->layout_id);
    if (st == DC_OK && first) {
        st = dc_enc_alloc(n);
        if (st == DC_OK)
            st = dc_node_chunk_map(n);
        if (st == DC_OK)
            st = dc_sender_start_encoders(n);
    }
    if (st != DC_OK) {
        DC_LOG_ERROR("sender %u: %s", n->me, dc_last_error());
        n->result = st;
        n->finished = 1;
        return;
    }
    n->vnum = bg->version;
    n->vbase = bg->baseline;
    n->mode = bg->mode == DC_MODE_DENSE ? DC_MODE_DENSE : DC_MODE_DELTA;
    n->sent = 0;
    n->sent_reported = 0;
    n->payload_bytes = n->repair_bytes = 0;
    n->in_flight = 1;
    pthread_mutex_lock(&n->mu);
    memset(n->dknown, 0, n->layout->nchunks ? n->layout->nchunks : 1);
    dc_wq_clear(n);
    n->cursor = 0;
    n->total = n->nbcast;
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
    DC_LOG_INFO("sender %u: version %llu: broadcasting %u of %u chunks", n->me,
                (unsigned long long)bg->version, n->nbcast, n->layout->nchunks);
    dc_sender_report_sent(n); /* owns nothing anyone needs: SENT right away */
}

/* BEGIN v from the coordinator: open the version's files and broadcast the
 * chunks this sender owns (the same encoder threads as the coordinator's);
 * a memory sender starts once its caller hands the version over
 * (dc_sender_poll_memory). */
/* bgp: a BEGIN that dc_begin_parse accepted, from v - 1 (dc_node_handle). */
static void dc_sender_begin(dc_node_t *n, const dc_begin_t *bgp)
{
    const dc_begin_t bg = *bgp;
    if (n->mpend && n->mbg.version == bg.version)
        return;
    if (n->in_flight && n->vnum == bg.version) {
        /* the version we broadcast, begun again: a new coordinator process
         * on a new control link (the old one died mid-version).  Our
         * chunks went out; SENT again, or it never learns so (no stall
         * repair, no re-send to receivers that re-joined: the version hung
         * until abort_ms) */
        n->sent_reported = 0;
        dc_sender_report_sent(n);
        return;
    }
    dc_status_t st = DC_OK;
    if (n->cfg->source && bg.baseline != n->committed)
        st = dc_error(DC_ERR_INVALID, "sender %u holds version %llu (its state directory's "
                      "commit record, else initial_version), but the coordinator begins "
                      "version %llu from %llu: open it on the committed version's weights",
                      n->me, (unsigned long long)n->committed, (unsigned long long)bg.version,
                      (unsigned long long)bg.baseline);
    if (st == DC_OK && n->in_flight) {
        /* another version in flight whose COMMIT / ABORT never came (a new
         * coordinator process, or a hostile one): end it first, so that no
         * encoder takes one of its chunks while its files are swapped under
         * it (one read a closed mapping: ASan, null dc_st_file_t in
         * dc_root_encode).  Begun from it, it was committed. */
        dc_sender_end(n, n->vnum, bg.baseline == n->vnum ? DC_MSG_COMMIT : DC_MSG_ABORT);
    }
    if (st != DC_OK && n->cfg->source) {
        DC_LOG_ERROR("%s", dc_last_error());
        n->result = st;
        n->finished = 1;
        return;
    }
    if (st == DC_OK && n->cfg->source) {
        n->mpend = 1;
        n->mbg = bg;
        DC_LOG_INFO("sender %u: version %llu begun: waiting for its weights (push)", n->me,
                    (unsigned long long)bg.version);
        return;
    }
    if (st == DC_OK)
        st = dc_root_open_version(n, bg.version);
    dc_sender_start(n, &bg, st);
}

/* A memory sender with a BEGIN pending: start once the caller handed the
 * version over. */
static void dc_sender_poll_memory(dc_node_t *n)
{
    if (!n->mpend || n->finished)
        return;
    int r = dc_mem_try(n, n->mbg.version);
    if (r == 0)
        return;
    n->mpend = 0;
    if (r < 0) {
        if (n->mend) /* closed before this version came: the job cannot go on */
            dc_error(DC_ERR_CANCELED, "sender %u: closed while version %llu was begun", n->me,
                     (unsigned long long)n->mbg.version);
        DC_LOG_ERROR("sender %u: %s", n->me, dc_last_error());
        n->result = dc_last_status() != DC_OK ? dc_last_status() : DC_ERR_INVALID;
        n->finished = 1;
        return;
    }
    dc_sender_start(n, &n->mbg, DC_OK);
}

/* COMMIT / ABORT / BYE (type): the version is over for this sender; a
 * memory sender tells its caller (committed: it becomes the baseline). */
static void dc_sender_end(dc_node_t *n, uint64_t v, uint8_t type)
{
    if (n->mpend && (!v || n->mbg.version == v))
        n->mpend = 0; /* ended before our caller handed the version over */
    if (!n->in_flight || (v && n->vnum != v))
        return;
    n->in_flight = 0;
    pthread_mutex_lock(&n->mu);
    n->total = 0;
    n->cursor = 0;
    dc_wq_clear(n);
    pthread_mutex_unlock(&n->mu);
    if (n->cfg->source) {
        dc_status_t st = DC_OK;
        if (type == DC_MSG_ABORT)
            st = dc_error(DC_ERR_CANCELED, "version %llu aborted by the coordinator",
                          (unsigned long long)n->vnum);
        else if (type != DC_MSG_COMMIT)
            st = dc_error(DC_ERR_CANCELED, "the job ended during version %llu",
                          (unsigned long long)n->vnum);
        dc_vstats_t vs;
        memset(&vs, 0, sizeof(vs));
        vs.version = n->vnum;
        vs.payload_bytes = n->payload_bytes;
        vs.repair_bytes = n->repair_bytes;
        vs.dense_bytes = n->layout->total_bytes;
        vs.frames = n->sent;
        vs.encode_s = (double)n->enc_ns / 1e9;
        if (type == DC_MSG_COMMIT) {
            /* our own record of what our baseline is (a restart resumes it) */
            st = dc_node_record_commit(n, n->vnum, n->vbase, (dc_digest_t){0, 0});
        }
        if (dc_mem_done(n, n->vnum, st, &vs) != DC_OK && type == DC_MSG_COMMIT) {
            n->result = dc_last_status();
            n->finished = 1;
        }
    }
}

/* --- message dispatch ------------------------------------------------------------- */

/* A relay keeps the last STATE of every node below it, to re-announce the
 * subtree when it re-attaches to a new parent. */
static void dc_node_remember(dc_node_t *n, uint32_t node, dc_nbuf_t *b)
{
    if (node >= n->nnodes)
        return;
    dc_nbuf_t *c = dc_nbuf_copy(n, b->data, b->len);
    if (!c)
        return;
    c->data[4] = DC_MSG_STATE;
    dc_nbuf_unref(n, n->known[node]);
    n->known[node] = c;
}

/* A child's SUB: who it is and which broadcast streams it takes on this link. */
static void dc_node_sub(dc_node_t *n, dc_peer_t *from, const dc_msg_t *m)
{
    if (m->node >= n->nnodes || m->node == n->me ||
        (from->node != UINT32_MAX && from->node != m->node)) {
        DC_LOG_WARN("node %u: bad SUB from node %u", n->me, from->node);
        dc_peer_fail(n, from, DC_ERR_FORMAT, "sent a bad SUB");
        return;
    }
    uint32_t ns = dc_tree_stream_count(n->tree);
    uint8_t *sub = calloc(ns ? ns : 1, 1);
    if (!sub)
        return;
    for (uint32_t k = 0; k < m->count; k++) {
        uint32_t s = dc_load_le32(m->body + 4 * (size_t)k);
        if (s < ns)
            sub[s] = 1;
    }
    free(from->sub);
    from->sub = sub;
    from->nsub = ns;
    int first = from->node == UINT32_MAX;
    from->node = m->node;
    if (first) {
        DC_LOG_INFO("node %u: child node %u attached (%u streams)", n->me, m->node, m->count);
        if (n->begin_msg) /* a version in flight: the child starts from its BEGIN */
            dc_peer_send(n, from, n->begin_msg);
    }
    /* from now on this link carries the streams: the child may announce
     * itself (its HELLO waits for every parent's SUBOK) */
    uint8_t h[DC_MSG_HDR_SIZE];
    dc_msg_simple(DC_MSG_SUBOK, 0, 0, 0, m->node, m->chunk, 0, h);
    dc_nbuf_t *ok = dc_nbuf_copy(n, h, sizeof(h));
    if (ok) {
        dc_peer_send(n, from, ok);
        dc_nbuf_unref(n, ok);
    }
}

/* The coordinator: a SENT of another sender (its chunks' target digests). */
static void dc_root_sent(dc_node_t *n, const dc_msg_t *m)
{
    uint32_t s = m->node;
    if (!n->in_flight || m->version != n->vnum || s == 0 || s >= n->nnodes)
        return;
    uint32_t nch = n->layout->nchunks;
    pthread_mutex_lock(&n->mu);
    for (uint32_t e = 0; e < m->count; e++) {
        const uint8_t *p = m->body + (size_t)e * DC_SENT_ENTRY;
        uint32_t c = dc_load_le32(p);
        if (c >= nch || n->chunk_src[c] != s)
            continue; /* not its chunk: ignored */
        n->digests[c].lo = dc_load_le64(p + 4);
        n->digests[c].hi = dc_load_le64(p + 12);
        n->dknown[c] = 1;
    }
    pthread_mutex_unlock(&n->mu);
    if (!n->ssent[s]) {
        n->other_frames += m->count;
        if (m->flags & DC_SENT_F_LAST)
            n->other_payload += m->baseline; /* SENT's baseline field: payload bytes */
    }
    if ((m->flags & DC_SENT_F_LAST) && !n->ssent[s]) {
        n->ssent[s] = 1;
        for (uint32_t x = 1; x < n->nnodes; x++) {
            if (!n->resync[x])
                continue;
            uint32_t q = 0;
            for (uint32_t c = 0; c < nch; c++) {
                if (n->chunk_src[c] == s && dc_root_needs(n, x, c) &&
                    !n->acked[(size_t)x * nch + c]) {
                    dc_root_queue(n, c, x, n->mode == DC_MODE_DENSE);
                    q++;
                }
            }
            if (q)
                DC_LOG_INFO("coordinator: node %u re-joined while sender %u was sending: "
                            "re-sending %u of its chunks", x, s, q);
        }
    }
}

static void dc_node_handle(dc_node_t *n, dc_peer_t *from, dc_nbuf_t *b)
{
    dc_msg_t m;
    if (dc_msg_parse(b->data, b->len, &m) != DC_OK) {
        DC_LOG_WARN("node %u: dropping a bad message from node %u: %s", n->me, from->node,
                    dc_last_error());
        return;
    }
    if (from->is_parent) {
        n->rx_version_bytes += b->len;
        from->vbytes += b->len;
        n->root_lost_ns = 0;
        /* down: forward first (cut-through), then act locally.  A node with
         * several parents gets each control message from every one of them:
         * only the first is forwarded and acted on. */
        switch (m.type) {
        case DC_MSG_BEGIN: {
            /* checked before it counts as seen: a malformed BEGIN v must
             * neither be forwarded, nor replayed to children attaching
             * later, nor make the valid BEGIN v that follows a duplicate */
            dc_begin_t bg;
            if (dc_begin_parse(&m, &bg) != DC_OK) {
                DC_LOG_WARN("node %u: dropping a bad BEGIN: %s", n->me, dc_last_error());
                break;
            }
            /* the coordinator begins v from v - 1 (dc_root_begin); a sender
             * encodes against exactly that, so any other baseline is a
             * malformed BEGIN: dropped (it used to stop the sender) */
            if (n->is_sender && bg.baseline != bg.version - 1) {
                DC_LOG_WARN("node %u: dropping a bad BEGIN: version %llu from baseline %llu",
                            n->me, (unsigned long long)bg.version,
                            (unsigned long long)bg.baseline);
                break;
            }
            if (m.version == n->seen_begin)
                break;
            n->seen_begin = m.version;
            dc_nbuf_unref(n, n->begin_msg);
            n->begin_msg = b;
            b->refs++;
            dc_send_down(n, b, DC_NODE_ALL, DC_STREAM_ANY);
            if (n->is_sender)
                dc_sender_begin(n, &bg);
            else
                dc_rx_begin(n, &bg);
            break;
        }
        case DC_MSG_FRAME:
            if (m.node != n->me)
                dc_send_frame_down(n, b, &m);
            if (!n->is_sender) {
                dc_rx_frame(n, &m, b);
                dc_trace(n, "apply", b, n->me);
            }
            break;
        case DC_MSG_COMMIT:
        case DC_MSG_ABORT:
            if (m.node == DC_NODE_ALL) {
                uint64_t *seen = m.type == DC_MSG_COMMIT ? &n->seen_commit : &n->seen_abort;
                if (*seen == m.version)
                    break;
                *seen = m.version;
                dc_nbuf_unref(n, n->begin_msg);
                n->begin_msg = NULL;
            }
            if (m.node != n->me)
                dc_send_down(n, b, m.node, DC_STREAM_ANY);
            if (n->is_sender) {
                if (m.node == DC_NODE_ALL)
                    dc_sender_end(n, m.version, m.type);
            } else if (m.type == DC_MSG_COMMIT) {
                dc_rx_commit(n, &m);
            } else {
                dc_rx_abort(n, &m);
            }
            break;
        case DC_MSG_SUBOK:
            from->sub_acked = m.chunk;
            break;
        case DC_MSG_BYE: {
            if (n->bye)
                break;
            dc_digest_t end_ckpt;
            if (dc_bye_parse(&m, &end_ckpt) != DC_OK) {
                DC_LOG_WARN("node %u: dropping a bad BYE: %s", n->me, dc_last_error());
                break;
            }
            dc_send_down(n, b, DC_NODE_ALL, DC_STREAM_ANY);
            n->bye = 1;
            if (n->is_sender)
                dc_sender_end(n, 0, DC_MSG_BYE);
            else
                dc_rx_bye(n, m.version, end_ckpt);
            break;
        }
        case DC_MSG_NEED:
            /* the coordinator asks the owner of a chunk (a sender) to re-send
             * it to node m.node (repairs of chunks sent from memory) */
            if (n->is_sender && n->in_flight && m.version == n->vnum &&
                m.chunk < n->layout->nchunks && n->chunk_src[m.chunk] == n->me &&
                m.node < n->nnodes)
                dc_root_queue(n, m.chunk, m.node, m.flags & DC_NEED_F_OVERWRITE);
            break;
        default:
            DC_LOG_WARN("node %u: unexpected %s from the parent", n->me,
                        dc_msg_type_name(m.type));
        }
        return;
    }
    /* up, from a child */
    if (m.type == DC_MSG_SUB) {
        dc_node_sub(n, from, &m);
        return;
    }
    if (m.type == DC_MSG_HELLO) {
        dc_hello_t h;
        int parsed = dc_hello_parse(&m, &h) == DC_OK; /* else its parse error says why */
        if (!parsed || h.node == n->me || h.node >= n->nnodes || h.node == 0 ||
            (from->node != UINT32_MAX && from->node != h.node)) {
            if (parsed)
                dc_error(DC_ERR_FORMAT, "node id %u on a link of node %u (%u nodes)", h.node,
                         from->node, n->nnodes);
            DC_LOG_WARN("node %u: bad HELLO: %s", n->me, dc_last_error());
            dc_peer_fail(n, from, DC_ERR_FORMAT, "sent a bad HELLO");
            return;
        }
        int sender = dc_node_role_sender(n, h.node);
        if (sender != !!(h.flags & DC_HELLO_F_SENDER) || (sender && !n->is_root)) {
            DC_LOG_WARN("node %u: HELLO of node %u does not match its role", n->me, h.node);
            dc_peer_fail(n, from, DC_ERR_FORMAT, "sent a HELLO for the wrong role");
            return;
        }
        from->node = h.node;
        if (n->begin_msg) /* a version in flight: the child starts from its BEGIN */
            dc_peer_send(n, from, n->begin_msg);
        if (sender) {
            /* another sender's control link: down-messages, addressed frames
             * and its subtree's upward traffic go over it */
            from->ctl = 1;
            n->sjoined[h.node] = 1;
            DC_LOG_INFO("coordinator: sender %u connected", h.node);
            return;
        }
        n->route[h.node] = from;
        DC_LOG_INFO("node %u: child node %u reports up through this node (committed %llu)",
                    n->me, h.node, (unsigned long long)h.committed);
        if (n->is_root) {
            dc_root_state(n, &h);
        } else {
            b->data[4] = DC_MSG_STATE; /* forwarded as STATE */
            dc_node_remember(n, h.node, b);
            dc_send_up(n, b);
        }
        return;
    }
    if (from->node == UINT32_MAX) {
        dc_peer_fail(n, from, DC_ERR_FORMAT, "spoke before HELLO");
        return;
    }
    if (m.type == DC_MSG_FRAME) {
        /* a repair a memory sender made on the coordinator's request:
         * along the route to its node */
        if (n->is_root && from->ctl && n->in_flight && m.version == n->vnum &&
            m.node < n->nnodes && m.node != 0 && n->rneed[m.node] &&
            m.chunk < n->layout->nchunks && n->chunk_src[m.chunk] == from->node) {
            n->repair_bytes += b->len - DC_MSG_HDR_SIZE;
            n->repairs++;
            dc_send_frame_down(n, b, &m);
        } else {
            /* only a sender's repair of its own chunk of the version in
             * flight, for a receiver (one for another node went to every
             * child: no route leads to a sender) */
            DC_LOG_WARN("node %u: dropping a FRAME from node %u: chunk %u of version %llu for "
                        "node %u is no repair it may send", n->me, from->node, m.chunk,
                        (unsigned long long)m.version, m.node);
        }
        return;
    }
    if (m.node < n->nnodes && m.node != n->me && m.node != 0)
        n->route[m.node] = from;
    if (!n->is_root) {
        if (m.type == DC_MSG_STATE && m.node < n->nnodes)
            dc_node_remember(n, m.node, b);
        if (m.type == DC_MSG_ACK || m.type == DC_MSG_NEED || m.type == DC_MSG_STATE ||
            m.type == DC_MSG_DONE || m.type == DC_MSG_SENT)
            dc_send_up(n, b);
        return;
    }
    if (m.node >= n->nnodes || m.node == 0)
        return;
    if (m.type == DC_MSG_SENT) {
        /* a sender's SENT comes up its own control link, never forwarded:
         * from any other link it would mark that sender's chunks sent and
         * set their digests (the commit record's checkpoint digest) */
        if (!from->ctl || from->node != m.node) {
            DC_LOG_WARN("node %u: dropping a SENT of node %u from node %u: not its control "
                        "link", n->me, m.node, from->node);
            return;
        }
        dc_root_sent(n, &m);
        return;
    }
    if (!n->rneed[m.node])
        return; /* everything else is about receivers */
    n->last_seen[m.node] = dc_now_ns();
    switch (m.type) {
    case DC_MSG_STATE: {
        dc_hello_t h;
        if (dc_hello_parse(&m, &h) == DC_OK)
            dc_root_state(n, &h);
        break;
    }
    case DC_MSG_ACK:
        if (n->in_flight && m.version == n->vnum)
            dc_root_mark_acked(n, m.node, m.chunk, m.count);
        break;
    case DC_MSG_NEED:
        if (n->in_flight && m.version == n->vnum) {
            uint32_t nch = n->layout->nchunks;
            for (uint32_t c = m.chunk; c < nch && c < m.chunk + m.count; c++) {
                uint8_t *q = &n->needq[(size_t)m.node * nch + c];
                if (!*q && !n->acked[(size_t)m.node * nch + c] && dc_root_needs(n, m.node, c)) {
                    *q = 1;
                    dc_root_queue(n, c, m.node, 1);
                }
            }
        }
        break;
    case DC_MSG_DONE:
        if ((m.version == n->vnum || m.version == n->confirm_v) && m.body_len >= 20) {
            if (m.version == n->root_committed && !n->in_flight) {
                n->confirmed[m.node] =
                    !(m.flags & (DC_DONE_F_DENSE | DC_DONE_F_FAILED | DC_DONE_F_NOT_HELD));
                if ((m.flags & DC_DONE_F_FAILED) && !(n->dflags[m.node] & DC_DONE_F_FAILED))
                    DC_LOG_ERROR("coordinator: receiver %u could not commit version %llu "
                                 "locally (its log says why)", m.node,
                                 (unsigned long long)m.version);
            }
            n->dflags[m.node] = m.flags;
            n->vdone[m.node] = 1;
            n->rx_apply_ns[m.node] = dc_load_le64(m.body);
            n->rx_bytes[m.node] = dc_load_le64(m.body + 8);
            n->rx_parent[m.node] = dc_load_le32(m.body + 16);
            uint32_t nl = 0;
            for (; nl < DC_MAX_LINKS &&
                   DC_DONE_BODY + (nl + 1) * (uint64_t)DC_DONE_LINK <= m.body_len;
                 nl++) {
                const uint8_t *e = m.body + DC_DONE_BODY + (size_t)nl * DC_DONE_LINK;
                n->rx_lpar[(size_t)m.node * DC_MAX_LINKS + nl] = dc_load_le32(e);
                n->rx_lbytes[(size_t)m.node * DC_MAX_LINKS + nl] = dc_load_le64(e + 4);
            }
            n->rx_nlinks[m.node] = nl;
        }
        break;
    default:
        break;
    }
}

/* --- connection management -------------------------------------------------------- */

/* This node's view of the current plan, and per stream each node's parent
 * (for choosing the parent that carries our upward traffic). */
static dc_status_t dc_node_refresh_view(dc_node_t *n)
{
    memset(&n->view, 0, sizeof(n->view));
    n->view.size = sizeof(n->view);
    dc_status_t st = dc_tree_node(n->tree, n->me, &n->view);
    if (st != DC_OK)
        return st;
    uint32_t ns = dc_tree_stream_count(n->tree), ne = dc_tree_edge_count(n->tree);
    const dc_tree_edge_t *e = dc_tree_edges(n->tree);
    free(n->spar);
    n->spar = malloc((size_t)(ns ? ns : 1) * n->nnodes * sizeof(uint32_t));
    if (!n->spar)
        return dc_error(DC_ERR_NOMEM, "node: out of memory");
    memset(n->spar, 0xff, (size_t)(ns ? ns : 1) * n->nnodes * sizeof(uint32_t));
    for (uint32_t k = 0; k < ne; k++)
        if (e[k].stream < ns && e[k].child < n->nnodes)
            n->spar[(size_t)e[k].stream * n->nnodes + e[k].child] = e[k].parent;
    n->subgen++;
    return DC_OK;
}

static dc_status_t dc_node_plan(dc_node_t *n)
{
    dc_tree_options_t o;
    memset(&o, 0, sizeof(o));
    o.size = sizeof(o);
    o.chunk_bytes = n->chunk_size;
    o.max_stripes = 1;
    dc_status_t st = dc_tree_plan(n->cfg->topo, &o, &n->tree);
    return st == DC_OK ? dc_node_refresh_view(n) : st;
}

/* Depth of node x in stream s's tree (0: its sender). */
static uint32_t dc_node_depth(const dc_node_t *n, uint32_t s, uint32_t x)
{
    uint32_t d = 0;
    while (d <= n->nnodes) {
        uint32_t p = n->spar[(size_t)s * n->nnodes + x];
        if (p == UINT32_MAX)
            return d;
        x = p;
        d++;
    }
    return UINT32_MAX; /* a cycle: never in a plan */
}

/* The parent our upward messages (HELLO, ACK, NEED, DONE, our subtree's
 * traffic) take: the parent in the stream where this node sits highest.
 * Its depth there is one less than ours everywhere we are deepest, so the
 * chosen parents of all nodes strictly climb towards a sender: no cycles,
 * and every upward message ends at the coordinator (a sender forwards its
 * subtree's traffic over its control link).  A sender's is the coordinator. */
static uint32_t dc_node_up_choice(const dc_node_t *n)
{
    if (n->is_sender)
        return 0;
    uint32_t best = UINT32_MAX, bd = UINT32_MAX;
    for (uint32_t k = 0; k < n->view.n_parents; k++) {
        const dc_tree_link_t *l = &n->view.parents[k];
        for (uint32_t j = 0; j < l->n_streams; j++) {
            uint32_t d = dc_node_depth(n, l->streams[j], n->me);
            /* ties keep the parent in use (no needless re-announce) */
            if (d < bd || (d == bd && l->peer == n->up_id && n->up)) {
                bd = d;
                best = l->peer;
            }
        }
    }
    return best;
}

/* The streams this node takes from parent `pid` in the current plan. */
static const dc_tree_link_t *dc_node_parent_link(const dc_node_t *n, uint32_t pid)
{
    for (uint32_t k = 0; k < n->view.n_parents; k++)
        if (n->view.parents[k].peer == pid)
            return &n->view.parents[k];
    return NULL;
}

static void dc_node_send_sub(dc_node_t *n, dc_peer_t *p)
{
    const dc_tree_link_t *l = dc_node_parent_link(n, p->node);
    uint32_t cnt = l ? l->n_streams : 0;
    size_t len = DC_MSG_HDR_SIZE + 4 * (size_t)cnt;
    dc_nbuf_t *b = dc_nbuf_new(n, len, 0, 0);
    if (!b)
        return;
    dc_msg_t h = {.type = DC_MSG_SUB, .node = n->me, .chunk = n->subgen, .count = cnt,
                  .body_len = 4 * cnt};
    dc_msg_pack(&h, b->data);
    for (uint32_t k = 0; k < cnt; k++)
        dc_store_le32(b->data + DC_MSG_HDR_SIZE + 4 * (size_t)k, l->streams[k]);
    b->len = len;
    dc_peer_send(n, p, b);
    dc_nbuf_unref(n, b);
    p->subgen = n->subgen;
}

static dc_peer_t *dc_node_parent_peer(dc_node_t *n, uint32_t pid)
{
    for (size_t i = 0; i < n->npeers; i++) {
        dc_peer_t *p = n->peers[i];
        if (p->is_parent && !p->dead && p->node == pid)
            return p;
    }
    return NULL;
}

/*
 * Where a node listens for its own region's connections when that transport
 * is not tcp (tcp from other regions takes the topology address itself):
 * rdma on the same address (rdma_cm has its own port space); ucx, whose
 * listener is a TCP socket too, on the topology port + config
 * lan_port_offset.
 */
static dc_status_t dc_node_lan_addr(const dc_verbs_ops_t *t, const char *addr, char *out,
                                    size_t len)
{
    if (strcmp(t->name, "ucx") != 0) {
        snprintf(out, len, "%s", addr);
        return DC_OK;
    }
    char host[256];
    uint16_t port;
    dc_status_t st = dc_verbs_parse_addr(addr, host, sizeof(host), &port);
    if (st != DC_OK)
        return st;
    uint64_t off = 0;
    if ((st = dc_config_get_size("lan_port_offset", &off)) != DC_OK)
        return st;
    if (port != 0 && (off == 0 || port + off > 65535))
        return dc_error(DC_ERR_INVALID,
                        "node address %s: port %u + config lan_port_offset %llu is not a port "
                        "(1..65535): the %s listener needs a port of its own",
                        addr, port, (unsigned long long)off, t->name);
    unsigned p = port ? (unsigned)(port + off) : 0;
    if (strchr(host, ':'))
        snprintf(out, len, "[%s]:%u", host, p);
    else
        snprintf(out, len, "%s:%u", host, p);
    return DC_OK;
}

/* Dial parent `pid` (one connection per distinct parent). */
static dc_peer_t *dc_node_dial(dc_node_t *n, uint32_t pid)
{
    uint64_t now = dc_now_ns();
    if (now < n->retry_ns[pid])
        return NULL;
    n->retry_ns[pid] = now + 200000000ull;
    dc_topo_node_info_t info;
    memset(&info, 0, sizeof(info));
    info.size = sizeof(info);
    if (dc_topo_node(n->cfg->topo, pid, &info) != DC_OK || !info.addr || !*info.addr) {
        n->result = dc_error(DC_ERR_INVALID, "node %u: parent %u has no address", n->me, pid);
        n->finished = 1;
        return NULL;
    }
    dc_verbs_opts_t vo = n->vopts;
    dc_topo_node_info_t me;
    memset(&me, 0, sizeof(me));
    me.size = sizeof(me);
    int wan = dc_topo_node(n->cfg->topo, n->me, &me) == DC_OK &&
              me.region_index != info.region_index;
    if (vo.streams == 0) {
        /* TCP streams by the edge's rate (config tcp_streams=auto): between
         * regions a single flow fills a slow link best and parallel flows
         * only compete; one per 5 Gbit/s where a cloud caps each flow */
        double bps = wan ? DC_MIN(me.wan_bps, info.wan_bps) : 0;
        if (dc_verbs_config_streams(bps, &vo.streams) != DC_OK) {
            n->result = DC_ERR_INVALID;
            n->finished = 1;
            return NULL;
        }
    }
    /* between regions always TCP (parallel streams); inside, config transport */
    const dc_verbs_ops_t *t = wan && n->tw ? n->tw : n->t;
    char addr[300];
    if (t == n->t && n->tw) {
        if (dc_node_lan_addr(n->t, info.addr, addr, sizeof(addr)) != DC_OK) {
            n->result = dc_last_status();
            n->finished = 1;
            return NULL;
        }
    } else {
        snprintf(addr, sizeof(addr), "%s", info.addr);
    }
    dc_verbs_conn_t *c = NULL;
    dc_status_t st = t->connect(&vo, addr, &c);
    if (st != DC_OK) {
        DC_LOG_DEBUG("node %u: connect to %s over %s: %s", n->me, addr, t->name,
                     dc_last_error());
        return NULL;
    }
    dc_peer_t *p = dc_peer_new(n, c, 1);
    if (!p) {
        dc_verbs_close(c);
        return NULL;
    }
    p->node = pid;
    if (!n->is_sender)
        dc_node_send_sub(n, p);
    DC_LOG_INFO("node %u: attaching to %s %u at %s over %s", n->me,
                n->is_sender ? "the coordinator" : "parent", pid, addr, t->name);
    return p;
}

/* Keep a connection to every parent of the plan (a sender: to the
 * coordinator), re-subscribe after a re-plan, and send HELLO (then the
 * subtree's known STATEs) on the parent chosen for upward traffic. */
static void dc_node_links(dc_node_t *n)
{
    if (n->is_root || n->bye)
        return;
    if (n->is_sender) {
        if (!dc_node_parent_peer(n, 0))
            dc_node_dial(n, 0);
    } else {
        if (n->view.n_parents == 0) {
            n->result = dc_error(DC_ERR_INVALID, "node %u has no parent in the tree", n->me);
            n->finished = 1;
            return;
        }
        for (uint32_t k = 0; k < n->view.n_parents; k++)
            if (!dc_node_parent_peer(n, n->view.parents[k].peer))
                dc_node_dial(n, n->view.parents[k].peer);
        for (size_t i = 0; i < n->npeers; i++) {
            dc_peer_t *p = n->peers[i];
            if (p->is_parent && !p->dead && p->subgen != n->subgen)
                dc_node_send_sub(n, p);
        }
    }
    /* announced on a live link under this plan: the choice below cannot
     * differ (it changes only with the plan, which bumps subgen) */
    if (n->up && !n->up->dead && n->up->hello_sent && n->announced == n->subgen)
        return;
    uint32_t uid = dc_node_up_choice(n);
    dc_peer_t *up = uid == UINT32_MAX ? NULL : dc_node_parent_peer(n, uid);
    if (!up || (up == n->up && up->hello_sent && n->announced == n->subgen))
        return;
    /* a receiver announces itself (HELLO: the coordinator counts it as
     * joined, or re-sends what it missed) only once every parent of the
     * plan has taken its SUB: no broadcast frame can pass it by after that */
    for (uint32_t k = 0; !n->is_sender && k < n->view.n_parents; k++) {
        dc_peer_t *p = dc_node_parent_peer(n, n->view.parents[k].peer);
        if (!p || p->sub_acked != n->subgen)
            return;
    }
    n->up = up;
    n->up_id = uid;
    up->hello_sent = 1;
    n->announced = n->subgen;
    if (n->is_sender) {
        /* a new control link may be a new coordinator process, which begins
         * the version in flight again: its BEGIN / COMMIT / ABORT are not
         * duplicates of the old one's (the de-duplication is for nodes
         * with several parents; a sender has one) */
        n->seen_begin = n->seen_commit = n->seen_abort = 0;
        dc_hello_t h = {.node = n->me, .flags = DC_HELLO_F_SENDER};
        size_t len = dc_hello_size(0);
        dc_nbuf_t *b = dc_nbuf_new(n, len, 0, 0);
        if (b) {
            dc_hello_pack(DC_MSG_HELLO, &h, b->data);
            b->len = len;
            dc_peer_send(n, up, b);
            dc_nbuf_unref(n, b);
        }
    } else {
        dc_nbuf_t *h = dc_rx_hello(n);
        if (h) {
            dc_peer_send(n, up, h);
            dc_nbuf_unref(n, h);
        }
    }
    for (uint32_t i = 0; i < n->nnodes; i++) /* re-announce the subtree */
        if (n->known[i] && n->route[i] && !n->route[i]->dead)
            dc_peer_send(n, up, n->known[i]);
    DC_LOG_INFO("node %u: upward traffic through node %u", n->me, uid);
}

/* A parent connection failed: a sender (the coordinator included) is never
 * re-planned away: keep dialling it until abort_ms; a relay that answered
 * once, or not within timeout_ms, is re-planned away (dc_tree_replan) and
 * the links follow the new plan. */
static void dc_node_parent_lost(dc_node_t *n, dc_peer_t *p)
{
    uint32_t pid = p->node;
    if (n->bye) {
        n->finished = 1;
        return;
    }
    if (pid >= n->nnodes || dc_node_role_sender(n, pid)) {
        if (!n->root_lost_ns)
            n->root_lost_ns = dc_now_ns();
        if (dc_now_ns() - n->root_lost_ns > (uint64_t)n->abort_ms * 1000000ull) {
            n->result = dc_error(DC_ERR_RESET, "node %u: lost sender %u for %u ms", n->me, pid,
                                 n->abort_ms);
            n->finished = 1;
        }
        return;
    }
    /* a parent that never answered the connect may just be starting: retry
     * it until the transport timeout, then give it up */
    if (!p->ready && dc_now_ns() - p->since_ns < (uint64_t)n->timeout_ms * 1000000ull)
        return;
    if (dc_tree_node_dead(n->tree, pid))
        return;
    DC_LOG_WARN("node %u: parent %u is gone; re-planning the tree without it", n->me, pid);
    dc_tree_t *nt = NULL;
    uint32_t changed = 0;
    if (dc_tree_replan(n->tree, pid, &nt, &changed) != DC_OK) {
        n->result = dc_last_status();
        n->finished = 1;
        return;
    }
    dc_tree_free(n->tree);
    n->tree = nt;
    n->dead[pid] = 1;
    if (dc_node_refresh_view(n) != DC_OK) {
        n->result = dc_last_status();
        n->finished = 1;
    }
}

static void dc_node_accept_on(dc_node_t *n, const dc_verbs_ops_t *t, dc_verbs_listener_t *lis)
{
    for (;;) {
        dc_verbs_conn_t *c = NULL;
        dc_status_t st = t->accept(lis, &c);
        if (st == DC_ERR_AGAIN)
            return;
        if (st != DC_OK) {
            DC_LOG_ERROR("node %u: listener: %s", n->me, dc_last_error());
            return;
        }
        dc_peer_t *p = dc_peer_new(n, c, 0);
        if (!p) {
            dc_verbs_close(c);
            return;
        }
        p->ready = 1;
    }
}

static void dc_node_accept(dc_node_t *n)
{
    dc_node_accept_on(n, n->t, n->lis);
    if (n->lisw)
        dc_node_accept_on(n, n->tw, n->lisw);
}

static int dc_node_tx_pending(const dc_node_t *n)
{
    for (size_t i = 0; i < n->npeers; i++)
        if (!n->peers[i]->dead && n->peers[i]->tx_n > 0)
            return 1;
    return 0;
}

static void dc_node_poll(dc_node_t *n, int timeout_ms)
{
    struct pollfd fds[256];
    nfds_t k = 0;
    if (n->lis)
        fds[k++] = (struct pollfd){.fd = n->t->listen_fd(n->lis), .events = POLLIN};
    if (n->lisw)
        fds[k++] = (struct pollfd){.fd = n->tw->listen_fd(n->lisw), .events = POLLIN};
    if (n->evfd >= 0)
        fds[k++] = (struct pollfd){.fd = n->evfd, .events = POLLIN};
    for (size_t i = 0; i < n->npeers && k < DC_ARRAY_SIZE(fds); i++) {
        int fd = n->peers[i]->c->ops->fd(n->peers[i]->c);
        if (fd >= 0)
            fds[k++] = (struct pollfd){.fd = fd, .events = POLLIN};
    }
    if (dc_node_tx_pending(n) && timeout_ms > 1)
        timeout_ms = 1;
    uint64_t t0 = n->trace ? dc_now_ns() : 0;
    poll(fds, k, timeout_ms);
    if (n->trace)
        fprintf(n->trace, "%llu poll %d %llu 0\n", (unsigned long long)dc_now_ns(), timeout_ms,
                (unsigned long long)(dc_now_ns() - t0));
}

static void dc_node_step(dc_node_t *n, int timeout_ms)
{
    dc_node_poll(n, timeout_ms);
    if (n->lis)
        dc_node_accept(n);
    if (n->is_sender && n->evfd >= 0) {
        dc_root_drain_ready(n);
        dc_sender_report_sent(n);
    }
    for (size_t i = 0; i < n->npeers; i++)
        dc_peer_progress(n, n->peers[i]);
    if (!n->is_sender)
        dc_rx_flush_acks(n);
    for (size_t i = 0; i < n->npeers; i++)
        dc_peer_progress(n, n->peers[i]); /* post what handling queued */
    for (size_t i = 0; i < n->npeers && !n->finished; i++)
        if (n->peers[i]->dead && n->peers[i]->is_parent)
            dc_node_parent_lost(n, n->peers[i]);
    dc_peers_reap(n);
    if (!n->finished)
        dc_node_links(n);
}

/* --- root driver ----------------------------------------------------------------- */

static void dc_root_progress_line(dc_node_t *n, int final)
{
    if (!n->cfg->progress)
        return;
    uint64_t tot = 0;
    for (uint32_t i = 1; i < n->nnodes; i++)
        tot += n->nacked[i];
    uint64_t want = 0;
    for (uint32_t i = 1; i < n->nnodes; i++)
        want += n->nneed[i];
    char pb[32];
    fprintf(stderr, "\r  v%llu  %-5s  sent %4u/%u chunks  %10s  applied %5.1f%%  %6.2f s%s",
            (unsigned long long)n->vnum, n->mode == DC_MODE_DENSE ? "dense" : "delta", n->sent,
            n->layout->nchunks, dc_fmt_bytes(n->payload_bytes, pb, sizeof(pb)),
            want ? 100.0 * (double)tot / (double)want : 100.0,
            (double)(dc_now_ns() - n->t_begin) / 1e9, final ? "\n" : "");
    fflush(stderr);
}

/* A checkpoint that fits comfortably in memory is mapped with its page tables
 * filled at open, as a trainer holds its weights in memory: the encoders then
 * read the mapping with no copy and no page faults inside the refit.  A larger
 * one is read chunk by chunk with pread (base_fd/next_fd). */
static int dc_root_resident(const char *path)
{
    struct stat sb;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (dc_stat(path, &sb) != 0 || pages <= 0 || psz <= 0)
        return 0;
    return (uint64_t)sb.st_size <= (uint64_t)pages * (uint64_t)psz / 8;
}

/* Until no encoder thread is encoding (none reads the version's bytes). */
static void dc_enc_wait_idle(dc_node_t *n)
{
    pthread_mutex_lock(&n->mu);
    while (n->enc_busy > 0)
        pthread_cond_wait(&n->cv, &n->mu);
    pthread_mutex_unlock(&n->mu);
}

/* Memory sender, at start: the layout from the tensor list. */
static dc_status_t dc_mem_init(dc_node_t *n)
{
    const dc_node_cfg_t *cfg = n->cfg;
    dc_status_t st = dc_layout_from_list(cfg->tensors, cfg->ntensors, n->chunk_size, &n->layout);
    if (st != DC_OK)
        return st;
    n->scratch = malloc(n->layout->max_chunk ? n->layout->max_chunk : 1);
    return n->scratch ? DC_OK : dc_error(DC_ERR_NOMEM, "sender: out of memory");
}

/* A placement of the chunks this memory sender sends (segs: the caller's). */
static dc_status_t dc_mem_place(dc_node_t *n, dc_place_t *p, const dc_place_seg_t *segs,
                                size_t nsegs)
{
    dc_status_t st = dc_place_init(p, n->layout);
    p->dev = n->cfg->cuda_mem;
    for (size_t i = 0; i < nsegs && st == DC_OK; i++)
        st = dc_place_add(p, segs[i].tensor, segs[i].offset, segs[i].len, segs[i].ptr);
    if (st == DC_OK)
        st = dc_place_finish_chunks(p, n->mown);
    return st;
}

/* Memory sender, once the chunk map is known: our own copy of the
 * baseline (cfg->segs: the committed version) for the chunks we send;
 * then the caller may change its memory (source->ready). */
static dc_status_t dc_mem_baseline(dc_node_t *n)
{
    const dc_layout_t *l = n->layout;
    uint32_t nch = l->nchunks;
    n->mown = calloc(nch ? nch : 1, 1);
    n->moff = calloc(nch ? nch : 1, sizeof(*n->moff));
    if (!n->mown || !n->moff)
        return dc_error(DC_ERR_NOMEM, "sender: out of memory");
    uint64_t total = 0;
    for (uint32_t k = 0; k < n->nbcast; k++) {
        uint32_t c = n->bcast[k];
        n->mown[c] = 1;
        n->moff[c] = total;
        total += l->chunks[c].len;
    }
    n->mbase = malloc(total ? total : 1);
    if (!n->mbase)
        return dc_error(DC_ERR_NOMEM, "sender: no memory for its baseline copy (%llu bytes)",
                        (unsigned long long)total);
    dc_place_t p;
    dc_status_t st = dc_mem_place(n, &p, n->cfg->segs, n->cfg->nsegs);
    for (uint32_t k = 0; st == DC_OK && k < n->nbcast; k++)
        st = dc_place_read(&p, n->bcast[k], n->mbase + n->moff[n->bcast[k]]);
    dc_place_fini(&p);
    if (st != DC_OK) {
        dc_error_prefix("sender %u: the baseline's placement", n->me);
        return st;
    }
    DC_LOG_INFO("sender %u: sends %u of %u chunks from memory (%llu bytes of baseline)", n->me,
                n->nbcast, nch, (unsigned long long)total);
    n->cfg->source->ready(n->cfg->source->user);
    return DC_OK;
}

/* Memory sender: is version v's placement there?  1: yes (in mnext);
 * 0: not yet; -1: no more versions (n->mend) or an error (set). */
static int dc_mem_try(dc_node_t *n, uint64_t v)
{
    const dc_node_source_t *src = n->cfg->source;
    const dc_place_seg_t *segs = NULL;
    size_t nsegs = 0;
    int r = src->next(src->user, v, &segs, &nsegs);
    if (r == 0) {
        n->mend = 1;
        dc_error(DC_ERR_NOT_FOUND, "sender %u: no version %llu", n->me, (unsigned long long)v);
        return -1;
    }
    if (r < 0) {
        if (dc_last_status() == DC_OK)
            dc_error(DC_ERR_INVALID, "sender %u: no version %llu", n->me, (unsigned long long)v);
        return -1;
    }
    if (r != 1)
        return 0;
    /* no encoder may still read the previous version's memory */
    dc_enc_wait_idle(n);
    if (n->mnext_ok)
        dc_place_fini(&n->mnext);
    n->mnext_ok = 1;
    if (dc_mem_place(n, &n->mnext, segs, nsegs) != DC_OK) {
        dc_error_prefix("sender %u: version %llu's placement", n->me, (unsigned long long)v);
        return -1;
    }
    return 1;
}

/* Memory sender: version v committed: it is the baseline of the next. */
static dc_status_t dc_mem_commit(dc_node_t *n)
{
    for (uint32_t k = 0; k < n->nbcast; k++) {
        uint32_t c = n->bcast[k];
        dc_status_t st = dc_place_read(&n->mnext, c, n->mbase + n->moff[c]);
        if (st != DC_OK)
            return st;
    }
    return DC_OK;
}

/* Memory sender: version v ended (committed: it becomes our baseline);
 * tell the source, once no encoder reads its memory any more. */
static dc_status_t dc_mem_done(dc_node_t *n, uint64_t v, dc_status_t st, const dc_vstats_t *vs)
{
    dc_enc_wait_idle(n);
    if (st == DC_OK && (st = dc_mem_commit(n)) != DC_OK)
        dc_error_prefix("sender %u: version %llu committed, but its copy into the baseline",
                        n->me, (unsigned long long)v);
    dc_refit_version_stats_t o = {.size = sizeof(o), .version = v, .seconds = vs->seconds,
                                  .encode_s = vs->encode_s, .transfer_s = vs->transfer_s,
                                  .apply_s = vs->apply_s, .commit_s = vs->commit_s,
                                  .payload_bytes = vs->payload_bytes,
                                  .repair_bytes = vs->repair_bytes,
                                  .dense_bytes = vs->dense_bytes, .frames = vs->frames};
    /* the failure's words survive the callback */
    char why[1024] = "";
    if (st != DC_OK)
        snprintf(why, sizeof(why), "%s", dc_last_error());
    n->cfg->source->done(n->cfg->source->user, v, st, &o);
    if (st != DC_OK)
        dc_error(st, "%s", why);
    return st;
}

/* The coordinator's blocking wait for its own version v from the source,
 * serving the loop meanwhile.  DC_ERR_NOT_FOUND: no more versions. */
static dc_status_t dc_root_mem_next(dc_node_t *n, uint64_t v)
{
    for (;;) {
        int r = dc_mem_try(n, v);
        if (r == 1)
            return DC_OK;
        if (r < 0)
            return n->mend ? DC_ERR_NOT_FOUND : dc_last_status();
        if (n->finished)
            return n->result ? n->result : dc_error(DC_ERR_INTERNAL, "sender stopped");
        dc_node_step(n, 5);
    }
}

static dc_status_t dc_root_open_version(dc_node_t *n, uint64_t v)
{
    if (n->cfg->source)
        return dc_root_mem_next(n, v);
    char bp[PATH_MAX], np[PATH_MAX];
    if (dc_node_version_path(bp, sizeof(bp), n->cfg->versions_dir, v - 1) ||
        dc_node_version_path(np, sizeof(np), n->cfg->versions_dir, v))
        return dc_error(DC_ERR_INVALID, "versions dir path too long");
    /* no encoder may still read the previous version's mappings */
    dc_enc_wait_idle(n);
    dc_status_t st = DC_OK;
    if (n->next && n->next_version == v - 1) {
        /* the previous target is this baseline: keep its (warm) mapping */
        dc_st_close(n->base);
        if (n->base_fd >= 0)
            close(n->base_fd);
        n->base = n->next;
        n->base_fd = n->next_fd;
        n->next = NULL;
        n->next_fd = -1;
    } else {
        dc_st_close(n->base);
        dc_st_close(n->next);
        n->base = n->next = NULL;
        if (n->base_fd >= 0)
            close(n->base_fd);
        if (n->next_fd >= 0)
            close(n->next_fd);
        n->base_fd = n->next_fd = -1;
        int pop = dc_root_resident(bp);
        st = dc_st_open(bp, pop ? DC_ST_POPULATE : DC_ST_READ, &n->base);
        if (st == DC_OK && !pop)
            n->base_fd = open(bp, O_RDONLY | O_CLOEXEC);
    }
    int pop = dc_root_resident(np);
    if (st == DC_OK)
        st = dc_st_open(np, pop ? DC_ST_POPULATE : DC_ST_READ, &n->next);
    if (st == DC_OK && !pop)
        n->next_fd = open(np, O_RDONLY | O_CLOEXEC);
    n->next_version = st == DC_OK ? v : 0;
    if (st != DC_OK)
        return st;
    dc_layout_t *l = NULL;
    st = dc_layout_from_st(n->next, n->chunk_size, &l);
    if (st != DC_OK)
        return st;
    dc_layout_t *lb = NULL;
    st = dc_layout_from_st(n->base, n->chunk_size, &lb);
    if (st != DC_OK) {
        dc_layout_free(l);
        return st;
    }
    uint64_t bid = lb->id;
    dc_layout_free(lb);
    if (bid != l->id) {
        dc_layout_free(l);
        return dc_error(DC_ERR_UNSUPPORTED,
                        "%s and %s have different tensors (names, dtypes or shapes): the "
                        "engine refits receivers in place, so every version of a job keeps "
                        "one tensor set; start a new job from %s (receivers load it whole), "
                        "or carry the change with `deltacast diff` / `deltacast apply`, "
                        "which handle added, removed and reshaped tensors",
                        bp, np, np);
    }
    if (n->layout && n->layout->id != l->id) {
        dc_layout_free(l);
        return dc_error(DC_ERR_UNSUPPORTED,
                        "%s changes the job's tensor set: every version of a job keeps one "
                        "tensor set (start a new job from it)", np);
    }
    if (!n->layout)
        n->layout = l;
    else
        dc_layout_free(l);
    return DC_OK;
}

/* What every sender's encoders use: per chunk the target digest, whether
 * it is known, and whether the chunk was sent. */
static dc_status_t dc_enc_alloc(dc_node_t *n)
{
    uint32_t nch = n->layout->nchunks;
    n->digests = calloc(nch ? nch : 1, sizeof(*n->digests));
    n->dknown = calloc(nch ? nch : 1, 1);
    n->sentc = calloc(nch ? nch : 1, 1);
    n->wqin = calloc((size_t)n->nnodes * (nch ? nch : 1), 1);
    if (!n->digests || !n->dknown || !n->sentc || !n->wqin)
        return dc_error(DC_ERR_NOMEM, "sender: out of memory");
    return DC_OK;
}

/* The coordinator's per-node and per-(node, chunk) state, plus
 * dc_enc_alloc(). */
static dc_status_t dc_root_alloc(dc_node_t *n)
{
    uint32_t nch = n->layout->nchunks;
    size_t nn = n->nnodes;
    dc_status_t st = dc_enc_alloc(n);
    if (st != DC_OK)
        return st;
    n->acked = calloc(nn * (nch ? nch : 1), 1);
    n->needq = calloc(nn * (nch ? nch : 1), 1);
    n->nacked = calloc(nn, sizeof(*n->nacked));
    n->joined = calloc(nn, 1);
    n->vdone = calloc(nn, 1);
    n->last_seen = calloc(nn, sizeof(uint64_t));
    n->last_progress = calloc(nn, sizeof(uint64_t));
    n->hello_committed = calloc(nn, sizeof(uint64_t));
    n->rx_apply_ns = calloc(nn, sizeof(uint64_t));
    n->rx_bytes = calloc(nn, sizeof(uint64_t));
    n->rx_parent = calloc(nn, sizeof(uint32_t));
    n->rneed = calloc(nn, sizeof(uint64_t));
    n->nneed = calloc(nn, sizeof(uint32_t));
    n->sjoined = calloc(nn, 1);
    n->ssent = calloc(nn, 1);
    n->resync = calloc(nn, 1);
    n->rx_nlinks = calloc(nn, sizeof(uint32_t));
    n->rx_lpar = calloc(nn * DC_MAX_LINKS, sizeof(uint32_t));
    n->rx_lbytes = calloc(nn * DC_MAX_LINKS, sizeof(uint64_t));
    n->confirmed = calloc(nn, 1);
    n->dflags = calloc(nn, 1);
    if (!n->rx_nlinks || !n->rx_lpar || !n->rx_lbytes || !n->resync || !n->confirmed ||
        !n->dflags)
        return dc_error(DC_ERR_NOMEM, "root: out of memory");
    if (!n->acked || !n->needq || !n->nacked || !n->joined || !n->vdone || !n->last_seen ||
        !n->last_progress || !n->hello_committed || !n->rx_apply_ns || !n->rx_bytes ||
        !n->rx_parent || !n->rneed || !n->nneed ||
        !n->sjoined || !n->ssent)
        return dc_error(DC_ERR_NOMEM, "root: out of memory");
    return DC_OK;
}

/* The chunk map (layout.h dc_layout_chunk_map) of this node's plan: the
 * chunks it broadcasts, and on the coordinator what each receiver needs. */
static dc_status_t dc_node_chunk_map(dc_node_t *n)
{
    const dc_layout_t *l = n->layout;
    uint32_t nch = l->nchunks, S = dc_topo_shard_count(n->cfg->topo);
    if (S == 0)
        S = 1;
    free(n->chunk_shard);
    free(n->chunk_stream);
    free(n->chunk_src);
    free(n->bcast);
    n->chunk_shard = calloc(nch ? nch : 1, 1);
    n->chunk_stream = calloc(nch ? nch : 1, sizeof(uint32_t));
    n->chunk_src = calloc(nch ? nch : 1, sizeof(uint32_t));
    n->bcast = calloc(nch ? nch : 1, sizeof(uint32_t));
    if (!n->chunk_shard || !n->chunk_stream || !n->chunk_src || !n->bcast)
        return dc_error(DC_ERR_NOMEM, "node: out of memory");
    dc_layout_chunk_map(l, n->tree, S, n->chunk_shard, n->chunk_stream, n->chunk_src);
    n->nbcast = 0;
    for (uint32_t c = 0; c < nch; c++)
        if (n->is_sender && n->chunk_src[c] == n->me)
            n->bcast[n->nbcast++] = c;
    if (n->is_root) {
        uint32_t per_shard[DC_TOPO_MAX_SHARDS] = {0};
        for (uint32_t c = 0; c < nch; c++)
            per_shard[n->chunk_shard[c]]++;
        for (uint32_t i = 0; i < n->nnodes; i++) {
            dc_topo_node_info_t info;
            memset(&info, 0, sizeof(info));
            info.size = sizeof(info);
            n->rneed[i] = 0;
            n->nneed[i] = 0;
            if (i == 0 || dc_topo_node(n->cfg->topo, i, &info) != DC_OK ||
                info.role != DC_TOPO_RECEIVER)
                continue;
            n->rneed[i] = info.shards;
            for (uint32_t sh = 0; sh < DC_TOPO_MAX_SHARDS; sh++)
                if (info.shards >> sh & 1)
                    n->nneed[i] += per_shard[sh];
            if (!n->nneed[i])
                n->rneed[i] = 0; /* needs nothing of this checkpoint */
        }
    }
    return DC_OK;
}

static void dc_sender_stop_encoders(dc_node_t *n)
{
    pthread_mutex_lock(&n->mu);
    n->enc_stop = 1;
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
    for (int i = 0; i < n->nenc; i++)
        pthread_join(n->enc[i], NULL);
    n->nenc = 0;
    free(n->enc);
    n->enc = NULL;
    free(n->enc_args);
    n->enc_args = NULL;
}

static dc_status_t dc_sender_start_encoders(dc_node_t *n)
{
    n->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (n->evfd < 0)
        return dc_error_errno(DC_ERR_IO, errno, "sender: eventfd");
    long th = 0;
    const char *tv = dc_config_get("threads");
    if (tv)
        th = strtol(tv, NULL, 10);
    if (th <= 0)
        th = dc_cpu_count();
    int want = (int)DC_MIN(th, 64);
    n->enc = calloc((size_t)want, sizeof(*n->enc));
    n->enc_args = calloc((size_t)want, sizeof(*n->enc_args));
    if (!n->enc || !n->enc_args)
        return dc_error(DC_ERR_NOMEM, "sender: out of memory");
    for (int i = 0; i < want; i++) {
        n->enc_args[i] = (dc_enc_arg_t){n, i};
        if (pthread_create(&n->enc[i], NULL, dc_root_encoder, &n->enc_args[i]) != 0)
            break;
        n->nenc = i + 1;
    }
    return n->nenc > 0 ? DC_OK : dc_error(DC_ERR_NOMEM, "sender: cannot start encoders");
}

static void dc_root_free(dc_node_t *n)
{
    free(n->confirmed);
    free(n->dflags);
    free(n->acked);
    free(n->needq);
    free(n->nacked);
    free(n->joined);
    free(n->vdone);
    free(n->last_seen);
    free(n->last_progress);
    free(n->hello_committed);
    free(n->digests);
    free(n->rx_apply_ns);
    free(n->rx_bytes);
    free(n->rx_parent);
    free(n->wq);
    free(n->wqin);
    free(n->vstats);
    free(n->dknown);
    free(n->sentc);
    free(n->rneed);
    free(n->nneed);
    free(n->sjoined);
    free(n->ssent);
    free(n->resync);
    free(n->rx_nlinks);
    free(n->rx_lpar);
    free(n->rx_lbytes);
    free(n->bcast);
    free(n->chunk_shard);
    free(n->chunk_stream);
    free(n->chunk_src);
    free(n->spar);
    free(n->retry_ns);
}

static json_t *dc_root_version_json(dc_node_t *n, const dc_vstats_t *vs)
{
    json_t *o = json_object();
    json_object_set_new(o, "version", json_integer((json_int_t)vs->version));
    json_object_set_new(o, "committed", json_boolean(vs->committed));
    json_object_set_new(o, "mode", json_string(n->mode == DC_MODE_DENSE ? "dense" : "delta"));
    json_object_set_new(o, "seconds", json_real(vs->seconds));
    json_object_set_new(o, "first_frame_seconds", json_real(vs->first_frame_s));
    json_object_set_new(o, "payload_bytes", json_integer((json_int_t)vs->payload_bytes));
    json_object_set_new(o, "dense_bytes", json_integer((json_int_t)vs->dense_bytes));
    json_object_set_new(o, "frames", json_integer((json_int_t)vs->frames));
    json_object_set_new(o, "repairs", json_integer((json_int_t)vs->repairs));
    json_object_set_new(o, "repair_bytes", json_integer((json_int_t)vs->repair_bytes));
    json_t *ph = json_object();
    json_object_set_new(ph, "encode", json_real(vs->encode_s));
    json_object_set_new(ph, "transfer", json_real(vs->transfer_s));
    json_object_set_new(ph, "apply", json_real(vs->apply_s));
    json_object_set_new(ph, "commit", json_real(vs->commit_s));
    json_object_set_new(o, "phases", ph);
    /* one entry per (parent -> receiver) link the receiver took bytes on in
     * this version (several with several parents); "parent" of a receiver
     * whose DONE had no per-link counts: its up parent, all its bytes */
    json_t *links = json_array();
    for (uint32_t i = 1; i < n->nnodes; i++) {
        if (!n->rneed[i])
            continue; /* a sender */
        uint32_t nl = n->rx_nlinks[i] ? n->rx_nlinks[i] : 1;
        for (uint32_t k = 0; k < nl; k++) {
            uint32_t par = n->rx_nlinks[i] ? n->rx_lpar[(size_t)i * DC_MAX_LINKS + k]
                                           : n->rx_parent[i];
            uint64_t bytes = n->rx_nlinks[i] ? n->rx_lbytes[(size_t)i * DC_MAX_LINKS + k]
                                             : n->rx_bytes[i];
            json_t *lk = json_object();
            json_object_set_new(lk, "node", json_integer(i));
            json_object_set_new(lk, "parent", json_integer(par));
            dc_topo_node_info_t a, b;
            memset(&a, 0, sizeof(a));
            memset(&b, 0, sizeof(b));
            a.size = b.size = sizeof(a);
            int wan = 0;
            if (dc_topo_node(n->cfg->topo, i, &a) == DC_OK &&
                dc_topo_node(n->cfg->topo, par, &b) == DC_OK) {
                wan = a.region_index != b.region_index;
                json_object_set_new(lk, "region", json_string(a.region));
            }
            json_object_set_new(lk, "kind", json_string(wan ? "wan" : "lan"));
            json_object_set_new(lk, "bytes", json_integer((json_int_t)bytes));
            json_object_set_new(lk, "apply_seconds",
                                json_real((double)n->rx_apply_ns[i] / 1e9));
            json_array_append_new(links, lk);
        }
    }
    json_object_set_new(o, "links", links);
    return o;
}

static dc_status_t dc_root_write_stats(dc_node_t *n, json_t *versions)
{
    if (!n->cfg->stats_path)
        return DC_OK;
    json_t *root = json_object();
    json_object_set_new(root, "nodes", json_integer(n->nnodes));
    json_object_set_new(root, "chunks", json_integer(n->layout ? n->layout->nchunks : 0));
    json_object_set_new(root, "checkpoint_bytes",
                        json_integer(n->layout ? (json_int_t)n->layout->total_bytes : 0));
    json_object_set_new(root, "transport", json_string(n->t->name));
    json_object_set_new(root, "wan_transport", json_string(n->tw ? n->tw->name : n->t->name));
    json_object_set_new(root, "versions", json_incref(versions));
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s.tmp", n->cfg->stats_path);
    int rc = json_dump_file(root, tmp, JSON_INDENT(2));
    json_decref(root);
    if (rc != 0 || rename(tmp, n->cfg->stats_path) != 0)
        return dc_error(DC_ERR_IO, "%s: cannot write the stats", n->cfg->stats_path);
    return DC_OK;
}

/* Run the loop until pred() or the deadline; returns 1 when pred held. */
typedef int (*dc_pred_fn)(dc_node_t *n);

static int dc_pred_joined(dc_node_t *n)
{
    return dc_root_all_joined(n);
}

static int dc_pred_done(dc_node_t *n)
{
    for (uint32_t i = 1; i < n->nnodes; i++)
        if (n->rneed[i] && !n->vdone[i])
            return 0;
    return 1;
}

static int dc_node_run_until(dc_node_t *n, dc_pred_fn pred, uint64_t deadline_ns)
{
    while (!n->finished) {
        if (pred(n))
            return 1;
        if (deadline_ns && dc_now_ns() > deadline_ns)
            return 0;
        dc_node_step(n, 20);
    }
    return 0;
}

static dc_status_t dc_root_version(dc_node_t *n, uint64_t v, dc_vstats_t *vs)
{
    dc_status_t st = dc_root_open_version(n, v);
    if (st != DC_OK)
        return st;
    memset(vs, 0, sizeof(*vs));
    vs->version = v;
    dc_root_begin(n, v);
    uint64_t last_line = 0;
    int aborted = 0;
    const char *lost = "a receiver";
    /* a receiver with no ack progress this long after everything was
     * delivered to the root's children gets its missing chunks again */
    uint64_t stall_ns = DC_MAX(DC_STALL_NS, 2ull * n->timeout_ms * 1000000ull);
    while (!n->finished) {
        dc_node_step(n, 5);
        uint64_t now = dc_now_ns();
        if (DC_UNLIKELY(n->crash_ns) &&
            (!dc_node_tx_pending(n) || now - n->crash_ns > 200000000ull)) {
            DC_LOG_WARN("root: DELTACAST_ENGINE_ROOT_CRASH: killing myself after %llu frames "
                        "of version %llu", (unsigned long long)n->sent, (unsigned long long)v);
            raise(SIGKILL);
        }
        /* everything sent AND delivered to the children (their transport
         * acknowledged it): from then on, silence means something was lost */
        if (n->sent == n->total && !n->t_all_sent && !dc_node_tx_pending(n)) {
            int all = 1; /* and every other sender said SENT */
            for (uint32_t i = 1; i < n->nnodes && all; i++)
                all = n->ssent[i] || !n->sjoined[i];
            if (all)
                n->t_all_sent = now;
        }
        if (n->progress_line && now - last_line > 200000000ull) {
            dc_root_progress_line(n, 0);
            last_line = now;
        }
        if (dc_root_all_acked(n)) {
            n->t_all_acked = now;
            dc_trace(n, "acked", NULL, 0);
            break;
        }
        /* stalls and lost receivers */
        for (uint32_t i = 1; i < n->nnodes; i++) {
            if (!n->rneed[i] || n->nacked[i] >= n->nneed[i])
                continue;
            if (now - n->last_seen[i] > (uint64_t)n->abort_ms * 1000000ull) {
                DC_LOG_ERROR("root: receiver %u silent for %u ms: aborting version %llu", i,
                             n->abort_ms, (unsigned long long)v);
                aborted = 1;
                break;
            }
            if (n->t_all_sent && now - n->last_progress[i] > stall_ns &&
                now - n->t_all_sent > stall_ns) {
                uint32_t nch = n->layout->nchunks, q = 0;
                for (uint32_t c = 0; c < nch; c++) {
                    if (dc_root_needs(n, i, c) && !n->acked[(size_t)i * nch + c]) {
                        n->needq[(size_t)i * nch + c] = 0;
                        dc_root_queue(n, c, i, n->mode == DC_MODE_DENSE);
                        q++;
                    }
                }
                DC_LOG_INFO("root: receiver %u stalled: re-sending %u chunks", i, q);
                n->last_progress[i] = now;
            }
        }
        /* a shard sending from memory is the only holder of its chunks:
         * without it they can be neither repaired nor re-sent */
        for (uint32_t i = 1; n->cfg->source && !aborted && i < n->nnodes; i++) {
            if (n->sjoined[i] && !dc_root_ctl_peer(n, i)) {
                DC_LOG_ERROR("coordinator: sender %u lost mid-version; it sends from memory, "
                             "nobody else holds its chunks: aborting version %llu", i,
                             (unsigned long long)v);
                n->sjoined[i] = 0;
                lost = "a sender (from memory)";
                aborted = 1;
            }
        }
        if (aborted)
            break;
    }
    pthread_mutex_lock(&n->mu);
    n->total = 0;
    n->cursor = 0;
    dc_wq_clear(n);
    pthread_mutex_unlock(&n->mu);
    if (n->finished)
        return n->result ? n->result : dc_error(DC_ERR_INTERNAL, "root stopped");
    uint32_t nch = n->layout->nchunks;
    dc_nbuf_unref(n, n->begin_msg);
    n->begin_msg = NULL;
    if (aborted) {
        n->in_flight = 0;
        dc_send_down_simple(n, DC_MSG_ABORT, v, v - 1, DC_NODE_ALL);
        memset(n->vdone, 0, n->nnodes);
        dc_node_run_until(n, dc_pred_done, dc_now_ns() + (uint64_t)n->abort_ms * 1000000ull);
        return dc_error(DC_ERR_CANCELED, "version %llu aborted: %s was lost",
                        (unsigned long long)v, lost);
    }
    /* joint commit: every receiver verified every chunk it needs.  The
     * checkpoint digest covers the target digests of the chunks some
     * receiver needs (0 for the others); a digest no sender reported (a
     * sender gone after its chunks were repaired by the coordinator) is
     * computed here from the coordinator's copy of the version. */
    for (uint32_t c = 0; c < nch; c++) {
        if (n->chunk_stream[c] == UINT32_MAX) {
            n->digests[c] = (dc_digest_t){0, 0};
        } else if (!n->dknown[c] && n->cfg->source) {
            if (!n->mown[c])
                return dc_error(DC_ERR_IO, "version %llu: sender %u never reported chunk %u's "
                                "digest, and only it holds that memory",
                                (unsigned long long)v, n->chunk_src[c], c);
            if ((st = dc_place_digest(&n->mnext, c, n->scratch, &n->digests[c])) != DC_OK)
                return st;
        } else if (!n->dknown[c]) {
            const dc_layout_chunk_t *lc = &n->layout->chunks[c];
            const dc_st_tensor_t *nt = dc_st_tensor(n->next, lc->tensor);
            n->digests[c] = dc_digest128(dc_st_data(n->next, nt) + lc->offset, lc->len);
        }
    }
    XXH3_state_t *hs = XXH3_createState();
    XXH3_128bits_reset(hs);
    XXH3_128bits_update(hs, n->digests, (size_t)nch * sizeof(*n->digests));
    XXH128_hash_t cd = XXH3_128bits_digest(hs);
    XXH3_freeState(hs);
    dc_commit_rec_t rec = {.version = v, .baseline = v - 1, .digest_lo = cd.low64,
                           .digest_hi = cd.high64};
    /* the target digests first: a restart checks nodes' journals of v
     * against them */
    st = dc_commit_digests_write(n->cfg->state_dir, v, n->layout->id, n->digests, nch);
    if (st == DC_OK)
        st = dc_commit_cas(n->cfg->state_dir, n->root_committed, &rec, NULL);
    uint64_t t_commit = dc_now_ns();
    dc_trace(n, "commit", NULL, 0);
    if (st != DC_OK) {
        dc_error_prefix("root: commit of version %llu", (unsigned long long)v);
        n->in_flight = 0;
        dc_send_down_simple(n, DC_MSG_ABORT, v, v - 1, DC_NODE_ALL);
        return st;
    }
    n->root_committed = v;
    n->root_ckpt = (dc_digest_t){cd.low64, cd.high64};
    n->digests_ok = 1;
    n->confirm_v = v;
    memset(n->confirmed, 0, n->nnodes);
    n->in_flight = 0;
    if (DC_UNLIKELY(n->crash_commit == v)) {
        DC_LOG_WARN("root: DELTACAST_ENGINE_ROOT_CRASH: killing myself after the commit of "
                    "version %llu", (unsigned long long)v);
        raise(SIGKILL);
    }
    dc_commit_msg_t cm = {.ckpt = n->root_ckpt};
    uint8_t cbuf[DC_MSG_HDR_SIZE + DC_COMMIT_BODY];
    dc_commit_msg_pack(v, v - 1, DC_NODE_ALL, &cm, cbuf);
    dc_nbuf_t *cb = dc_nbuf_copy(n, cbuf, sizeof(cbuf));
    if (cb) {
        dc_send_down(n, cb, DC_NODE_ALL, DC_STREAM_ANY);
        dc_nbuf_unref(n, cb);
    }
    dc_node_run_until(n, dc_pred_done, dc_now_ns() + (uint64_t)n->abort_ms * 1000000ull);
    if (n->progress_line)
        dc_root_progress_line(n, 1);
    vs->committed = 1;
    vs->seconds = (double)(t_commit - n->t_begin) / 1e9;
    vs->first_frame_s = n->t_first_frame ? (double)(n->t_first_frame - n->t_begin) / 1e9 : 0;
    vs->encode_s = (double)n->enc_ns / 1e9;
    uint64_t t_last = n->t_all_acked ? n->t_all_acked : t_commit;
    vs->transfer_s = n->t_first_frame ? (double)(t_last - n->t_first_frame) / 1e9 : 0;
    double amax = 0;
    for (uint32_t i = 1; i < n->nnodes; i++)
        amax = DC_MAX(amax, (double)n->rx_apply_ns[i] / 1e9);
    vs->apply_s = amax;
    vs->commit_s = (double)(t_commit - t_last) / 1e9;
    vs->payload_bytes = n->payload_bytes + n->other_payload;
    vs->repair_bytes = n->repair_bytes;
    vs->dense_bytes = n->layout->total_bytes;
    vs->frames = n->sent + n->other_frames;
    vs->repairs = n->repairs;
    return DC_OK;
}

/* The coordinator's committed version, by content, at every receiver that
 * has not shown it holds it in this run: an addressed COMMIT (with the
 * content hash over the chunks it needs) to each, and their DONEs.  `final`:
 * the job's last word, so a receiver that does not hold it fails the job,
 * naming it; at the start it only lets nodes that missed a commit (a
 * coordinator killed between its record and the COMMIT) take it from their
 * journals, and the others get the next version as nodes off the
 * baseline. */
static dc_status_t dc_root_confirm(dc_node_t *n, int final)
{
    if (!n->digests_ok && n->root_committed &&
        dc_commit_digests_read(n->cfg->state_dir, n->root_committed, n->layout->id,
                               n->digests, n->layout->nchunks) == DC_OK)
        n->digests_ok = 1;
    n->confirm_v = n->root_committed;
    uint32_t asked = 0;
    for (uint32_t x = 1; x < n->nnodes; x++) {
        /* at the start, only the nodes whose HELLO names another version
         * (a relay's STATE of its child may be older than the child's
         * journal, so their journals are not asked about) */
        n->vdone[x] = !n->rneed[x] || n->confirmed[x] ||
                      (!final && n->hello_committed[x] == n->root_committed);
        if (n->vdone[x])
            continue;
        dc_root_send_confirm(n, x, 0);
        asked++;
    }
    if (!asked)
        return DC_OK;
    DC_LOG_INFO("coordinator: asking %u receivers to confirm version %llu", asked,
                (unsigned long long)n->root_committed);
    dc_node_run_until(n, dc_pred_done, dc_now_ns() + (uint64_t)n->abort_ms * 1000000ull);
    if (n->finished)
        return n->result ? n->result : dc_error(DC_ERR_INTERNAL, "root stopped");
    char list[256] = "";
    size_t len = 0;
    uint32_t bad = 0, nrecv = 0;
    for (uint32_t x = 1; x < n->nnodes; x++) {
        if (!n->rneed[x])
            continue;
        nrecv++;
        if (n->confirmed[x])
            continue;
        bad++;
        if (len + 16 < sizeof(list))
            len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%u%s", bad > 1 ? ", " : "",
                                    x, !n->vdone[x] ? " (no answer)"
                                       : (n->dflags[x] & DC_DONE_F_FAILED) ? " (local commit failed)"
                                       : "");
    }
    if (!bad || !final)
        return DC_OK;
    return dc_error(DC_ERR_VERIFY, "%u of %u receivers do not hold the committed version %llu "
                    "(checkpoint digest %016llx%016llx): node %s; their logs say why",
                    bad, nrecv, (unsigned long long)n->root_committed,
                    (unsigned long long)n->root_ckpt.hi, (unsigned long long)n->root_ckpt.lo,
                    list);
}

/* Versions vK are consecutive: a vK past the last consecutive one means a
 * gap, and the job would stop early without a word. */
static dc_status_t dc_root_check_gap(const dc_node_t *n, uint64_t last)
{
    DIR *d = opendir(n->cfg->versions_dir);
    if (!d)
        return dc_error_errno(DC_ERR_IO, errno, "%s: open", n->cfg->versions_dir);
    uint64_t beyond = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char p[PATH_MAX];
        const char *nm = e->d_name;
        if (nm[0] != 'v' || nm[1] < '0' || nm[1] > '9')
            continue;
        char *end = NULL;
        unsigned long long k = strtoull(nm + 1, &end, 10);
        if (k <= last || (beyond && k >= beyond))
            continue;
        /* the name the engine would look for, exactly */
        if (dc_node_version_path(p, sizeof(p), n->cfg->versions_dir, k) == 0 &&
            strcmp(strrchr(p, '/') ? strrchr(p, '/') + 1 : p, nm) == 0)
            beyond = k;
    }
    closedir(d);
    if (beyond)
        return dc_error(DC_ERR_INVALID, "%s: version %llu is there but version %llu is "
                        "missing: the versions must be consecutive (the job would stop at "
                        "version %llu)", n->cfg->versions_dir, (unsigned long long)beyond,
                        (unsigned long long)last + 1, (unsigned long long)last);
    return DC_OK;
}

static dc_status_t dc_root_run(dc_node_t *n)
{
    dc_commit_rec_t rec;
    dc_status_t st = dc_commit_read(n->cfg->state_dir, &rec);
    if (st == DC_OK) {
        n->root_committed = rec.version;
        n->root_ckpt = (dc_digest_t){rec.digest_lo, rec.digest_hi};
    } else if (st == DC_ERR_NOT_FOUND)
        n->root_committed = n->cfg->source ? n->cfg->initial_version : 0;
    else
        return st;
    uint64_t last = n->cfg->nversions;
    if (n->cfg->source) {
        last = UINT64_MAX; /* until the source says there is no more */
    } else if (last == 0) {
        char p[PATH_MAX];
        for (last = n->root_committed;; last++) {
            if (dc_node_version_path(p, sizeof(p), n->cfg->versions_dir, last + 1) ||
                access(p, R_OK) != 0)
                break;
        }
        if ((st = dc_root_check_gap(n, last)) != DC_OK)
            return st;
    }
    if (last <= n->root_committed)
        DC_LOG_WARN("root: nothing to refit: committed version %llu, last version %llu",
                    (unsigned long long)n->root_committed, (unsigned long long)last);
    /* the layout is needed before receivers can be served */
    if (n->cfg->source)
        st = dc_mem_init(n);
    else
        st = dc_root_open_version(n, n->root_committed + 1 <= last ? n->root_committed + 1 : 1);
    if (st != DC_OK)
        return st;
    st = dc_root_alloc(n);
    if (st != DC_OK)
        return st;
    st = dc_node_chunk_map(n);
    if (st == DC_OK && n->cfg->source)
        st = dc_mem_baseline(n);
    if (st != DC_OK)
        return st;
    if (dc_root_nrecv(n) == 0)
        return dc_error(DC_ERR_INVALID, "root: no receiver needs any chunk of this checkpoint");
    st = dc_sender_start_encoders(n);
    if (st != DC_OK) {
        dc_sender_stop_encoders(n);
        return st;
    }
    json_t *versions = json_array();
    /* wait for every receiver */
    uint64_t wait_ms = n->cfg->wait_ms ? n->cfg->wait_ms : 60000;
    if (!dc_node_run_until(n, dc_pred_joined, dc_now_ns() + wait_ms * 1000000ull)) {
        uint32_t missing = 0;
        for (uint32_t i = 1; i < n->nnodes; i++)
            missing += !dc_root_node_joined(n, i);
        st = n->finished ? n->result
                         : dc_error(DC_ERR_TIMEOUT, "root: %u of %u receivers and other senders "
                                    "did not join within %llu ms", missing, n->nnodes - 1,
                                    (unsigned long long)wait_ms);
        goto out;
    }
    if ((st = dc_root_confirm(n, 0)) != DC_OK)
        goto out;
    for (uint64_t v = n->root_committed + 1; v <= last; v++) {
        dc_vstats_t vs;
        memset(&vs, 0, sizeof(vs));
        st = dc_root_version(n, v, &vs);
        if (n->cfg->source) {
            if (st == DC_ERR_NOT_FOUND && n->mend) {
                st = DC_OK;
                break;
            }
            st = dc_mem_done(n, v, st, &vs);
        }
        if (st != DC_OK) {
            if (n->progress_line)
                fputc('\n', stderr);
            goto out;
        }
        json_array_append_new(versions, dc_root_version_json(n, &vs));
        dc_root_write_stats(n, versions);
    }
    if (st == DC_OK)
        st = dc_root_confirm(n, 1);
out:;
    /* the failure's own words: the BYE drain below may set other errors
     * (children closing), and the caller prints dc_last_error() */
    char why[1024] = "";
    if (st != DC_OK)
        snprintf(why, sizeof(why), "%s", dc_last_error());
    dc_status_t st2 = dc_root_write_stats(n, versions);
    if (st == DC_OK) {
        st = st2;
        if (st != DC_OK)
            snprintf(why, sizeof(why), "%s", dc_last_error());
    }
    json_decref(versions);
    /* BYE and drain */
    uint8_t bye[DC_MSG_HDR_SIZE + DC_BYE_BODY];
    dc_bye_pack(n->root_committed, n->root_ckpt, bye);
    dc_nbuf_t *bb = dc_nbuf_copy(n, bye, sizeof(bye));
    if (bb) {
        dc_send_down(n, bb, DC_NODE_ALL, DC_STREAM_ANY);
        dc_nbuf_unref(n, bb);
    }
    n->bye = 1;
    uint64_t dl = dc_now_ns() + 5000000000ull;
    while (dc_node_tx_pending(n) && dc_now_ns() < dl)
        dc_node_step(n, 5);
    dc_sender_stop_encoders(n);
    if (st != DC_OK)
        dc_error(st, "%s", why);
    return st;
}

/* --- sender driver (a sender other than the coordinator) ---------------------------- */

/* Step the loop until the job ends (BYE, failure, or `each`, called after
 * every step, says so); after BYE, flush what is still queued to the
 * children for up to 3 s. */
static void dc_node_serve(dc_node_t *n, int step_ms, int (*each)(dc_node_t *n))
{
    while (!n->finished) {
        dc_node_step(n, step_ms);
        if (n->bye && !dc_node_tx_pending(n))
            break;
        if (each && each(n))
            break;
    }
    if (n->bye) {
        uint64_t dl = dc_now_ns() + 3000000000ull;
        while (dc_node_tx_pending(n) && dc_now_ns() < dl)
            dc_node_step(n, 5);
    }
}

/* A memory sender between loop steps: a version starts when both the
 * coordinator's BEGIN and the caller's push are there; closed with nothing
 * in flight, BYE is due from the coordinator (closed alongside): wait for
 * it a while, then stop. */
static int dc_sender_memory_step(dc_node_t *n)
{
    dc_sender_poll_memory(n);
    if (n->in_flight || n->mpend || !n->cfg->source->closed(n->cfg->source->user))
        return 0;
    uint64_t now = dc_now_ns();
    if (!n->mclosed_ns)
        n->mclosed_ns = now;
    if (now - n->mclosed_ns <= 2ull * n->timeout_ms * 1000000ull)
        return 0;
    DC_LOG_WARN("sender %u: closed, and no BYE from the coordinator within %u ms", n->me,
                2 * n->timeout_ms);
    return 1;
}

/* Runs until BYE: connects to the coordinator (its control link), serves
 * the children of its streams, and broadcasts its chunks of every version
 * the coordinator BEGINs. */
static dc_status_t dc_sender_run(dc_node_t *n)
{
    DC_LOG_INFO("sender %u: serving its shards; the coordinator is node 0", n->me);
    if (!n->cfg->source) {
        dc_node_serve(n, 20, NULL);
        dc_sender_stop_encoders(n);
        return n->finished ? n->result : DC_OK;
    }
    /* from memory: the version we hold, the layout, the chunks we send and
     * our baseline now (the caller may change its memory once open returns) */
    dc_status_t st = dc_node_load_committed(n);
    if (st == DC_OK)
        st = dc_mem_init(n);
    if (st == DC_OK)
        st = dc_enc_alloc(n);
    if (st == DC_OK)
        st = dc_node_chunk_map(n);
    if (st == DC_OK)
        st = dc_mem_baseline(n);
    if (st == DC_OK)
        st = dc_sender_start_encoders(n);
    if (st != DC_OK) {
        dc_sender_stop_encoders(n);
        return st;
    }
    dc_node_serve(n, 5, dc_sender_memory_step);
    dc_sender_stop_encoders(n);
    return n->finished ? n->result : DC_OK;
}


/* --- receiver driver ---------------------------------------------------------------- */

static dc_status_t dc_rx_run(dc_node_t *n)
{
    const dc_node_cfg_t *cfg = n->cfg;
    dc_status_t st;
    if (cfg->weights) {
        st = dc_st_open(cfg->weights, DC_ST_WRITABLE, &n->wfile);
        if (st != DC_OK)
            return st;
        st = dc_layout_from_st(n->wfile, n->chunk_size, &n->layout);
        if (st != DC_OK)
            return st;
        st = dc_place_from_st(&n->place, n->layout, n->wfile);
        if (st != DC_OK)
            return st;
    } else if (cfg->tensors && cfg->segs) {
        st = dc_layout_from_list(cfg->tensors, cfg->ntensors, n->chunk_size, &n->layout);
        if (st != DC_OK)
            return st;
        dc_place_init(&n->place, n->layout);
        n->place.dev = cfg->cuda_mem;
        for (size_t i = 0; i < cfg->nsegs && st == DC_OK; i++)
            st = dc_place_add(&n->place, cfg->segs[i].tensor, cfg->segs[i].offset,
                              cfg->segs[i].len, cfg->segs[i].ptr);
        if (st == DC_OK)
            st = dc_place_finish(&n->place);
        if (st != DC_OK) {
            dc_place_fini(&n->place);
            return st;
        }
    } else {
        return dc_error(DC_ERR_INVALID, "node %u: a receiver needs a weights file or a "
                        "placement of its weights in memory", n->me);
    }
    n->place_ok = 1;
    st = dc_node_chunk_map(n);
    if (st != DC_OK)
        return st;
    uint32_t nch = n->layout->nchunks;
    n->retained = calloc(nch ? nch : 1, sizeof(*n->retained));
    n->retained_len = calloc(nch ? nch : 1, sizeof(*n->retained_len));
    n->undo = calloc(nch ? nch : 1, sizeof(*n->undo));
    n->scratch = malloc(n->layout->max_chunk ? n->layout->max_chunk : 1);
    if (!n->retained || !n->retained_len || !n->undo || !n->scratch)
        return dc_error(DC_ERR_NOMEM, "node %u: out of memory", n->me);
    st = dc_codec_create(n->layout->max_chunk ? n->layout->max_chunk : 64, &n->codec);
    if (st != DC_OK)
        return st;
    if ((st = dc_node_load_committed(n)) != DC_OK)
        return st;
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/dense_needed", cfg->state_dir);
    n->dense_needed = access(path, F_OK) == 0;
    DC_LOG_INFO("node %u: holding version %llu%s", n->me, (unsigned long long)n->committed,
                n->dense_needed ? " (marked for dense refit)" : "");
    dc_node_serve(n, 20, NULL);
    return n->finished ? n->result : DC_OK;
}

/* The weights' memory is what the caller says: CUDA memory needs the
 * kernels and a GPU; host segments must not be device pointers (the CPU
 * would fault on them). */
static dc_status_t dc_node_check_mem(const dc_node_t *n)
{
    const dc_node_cfg_t *cfg = n->cfg;
    if (cfg->cuda_mem) {
        if (!DC_HAVE_CUDA)
            return dc_error(DC_ERR_UNSUPPORTED,
                            "node %u: weights in CUDA device memory, but this build has no "
                            "CUDA kernels (nvcc was not found when it was configured)", n->me);
        if (!dc_kern_cuda_available())
            return dc_error(DC_ERR_UNSUPPORTED,
                            "node %u: weights in CUDA device memory, but no usable GPU here "
                            "(no CUDA driver or no device)", n->me);
        if (cfg->weights || !cfg->segs)
            return dc_error(DC_ERR_INVALID, "node %u: CUDA memory is given as segments, not "
                            "a weights file", n->me);
        return DC_OK;
    }
    for (size_t i = 0; cfg->segs && i < cfg->nsegs; i++)
        if (cfg->segs[i].len && dc_verbs_is_cuda_ptr(cfg->segs[i].ptr))
            return dc_error(DC_ERR_INVALID, "node %u: segment %zu (tensor %u) is CUDA device "
                            "memory: say so (memory = DC_REFIT_MEM_CUDA)", n->me, i,
                            cfg->segs[i].tensor);
    return DC_OK;
}

dc_status_t dc_node_run(const dc_node_cfg_t *cfg)
{
    if (!cfg || !cfg->topo || !cfg->state_dir)
        return dc_error(DC_ERR_INVALID, "node: topology and state directory are required");
    dc_node_t *n = calloc(1, sizeof(*n));
    if (!n)
        return dc_error(DC_ERR_NOMEM, "node: out of memory");
    dc_status_t st;
    n->cfg = cfg;
    n->me = cfg->rank;
    n->evfd = -1;
    n->base_fd = n->next_fd = -1;
    n->crash_at = -1;
    {
        const char *ca = getenv("DELTACAST_ENGINE_CRASH_AT");
        if (ca && *ca)
            n->crash_at = strtoll(ca, NULL, 10);
        const char *rc = getenv("DELTACAST_ENGINE_ROOT_CRASH");
        if (rc && strncmp(rc, "frames=", 7) == 0)
            n->crash_frames = strtoull(rc + 7, NULL, 10);
        else if (rc && strncmp(rc, "commit=", 7) == 0)
            n->crash_commit = strtoull(rc + 7, NULL, 10);
        const char *tr = getenv("DELTACAST_ENGINE_TRACE");
        char tp[PATH_MAX];
        if (tr && *tr && snprintf(tp, sizeof(tp), "%s/trace.%u", tr, n->me) < (int)sizeof(tp))
            n->trace = fopen(tp, "w");
        if (tr && *tr && !n->trace)
            DC_LOG_WARN("node %u: DELTACAST_ENGINE_TRACE: cannot write %s/trace.%u", n->me, tr,
                        n->me);
    }
    n->nnodes = dc_topo_node_count(cfg->topo);
    pthread_mutex_init(&n->mu, NULL);
    pthread_cond_init(&n->cv, NULL);
    if (n->me >= n->nnodes) {
        st = dc_error(DC_ERR_INVALID, "rank %u but the topology has %u nodes", n->me, n->nnodes);
        goto out;
    }
    dc_topo_node_info_t info;
    memset(&info, 0, sizeof(info));
    info.size = sizeof(info);
    st = dc_topo_node(cfg->topo, n->me, &info);
    if (st != DC_OK)
        goto out;
    n->is_root = n->me == 0;
    n->is_sender = info.role == DC_TOPO_SENDER;
    n->need_mask = n->is_sender ? 0 : info.shards;
    if (n->is_root && !n->is_sender) {
        st = dc_error(DC_ERR_UNSUPPORTED,
                      "node 0 is the coordinator and must be a sender, but this topology makes "
                      "it a receiver (list a sender first)");
        goto out;
    }
    if (n->is_sender && !cfg->versions_dir && !cfg->source) {
        st = dc_error(DC_ERR_INVALID, "node %u is a sender: it needs the versions directory",
                      n->me);
        goto out;
    }
    if ((st = dc_node_check_mem(n)) != DC_OK)
        goto out;
    if (cfg->source && (!n->is_sender || !cfg->tensors || !cfg->segs)) {
        st = dc_error(DC_ERR_INVALID, "node %u: a sender from memory must be a sender of the "
                      "topology, with its tensors and the committed version's segments", n->me);
        goto out;
    }
    /* and its parents: `--state st/%r` on a fresh machine */
    if ((st = dc_mkdirs(cfg->state_dir)) != DC_OK)
        goto out;
    if ((st = dc_node_chunk_size(cfg->chunk_size, &n->chunk_size)) != DC_OK)
        goto out;
    if ((st = dc_config_get_size("inflight_bytes", &n->inflight_max)) != DC_OK)
        goto out;
    n->rx_cap = DC_MSG_HDR_SIZE + DC_FRAME_HEADER_SIZE + dc_codec_payload_bound(n->chunk_size) +
                4096;
    if (n->inflight_max < 4 * n->rx_cap)
        n->inflight_max = 4 * n->rx_cap;
    n->rx_post_parent = (unsigned)DC_MIN((uint64_t)DC_NRX, n->inflight_max / n->rx_cap);
    if (n->rx_post_parent < DC_NRX_CHILD)
        n->rx_post_parent = DC_NRX_CHILD;
    uint64_t tmo = 30000;
    const char *tv = dc_config_get("timeout_ms");
    if (tv && *tv)
        tmo = strtoull(tv, NULL, 10);
    n->timeout_ms = (uint32_t)(tmo ? tmo : 30000);
    n->abort_ms = cfg->abort_ms ? cfg->abort_ms : 4 * n->timeout_ms;
    n->dead = calloc(n->nnodes, 1);
    n->route = calloc(n->nnodes, sizeof(*n->route));
    n->known = calloc(n->nnodes, sizeof(*n->known));
    n->retry_ns = calloc(n->nnodes, sizeof(uint64_t));
    if (!n->dead || !n->route || !n->known || !n->retry_ns) {
        st = dc_error(DC_ERR_NOMEM, "node: out of memory");
        goto out;
    }
    if ((st = dc_node_plan(n)) != DC_OK)
        goto out;
    char why[256];
    if ((st = dc_verbs_select(cfg->transport, &n->t, why, sizeof(why))) != DC_OK)
        goto out;
    dc_verbs_opts_init(&n->vopts);
    if (!info.addr || !*info.addr) {
        st = dc_error(DC_ERR_INVALID, "node %u has no address in the topology", n->me);
        goto out;
    }
    if (strcmp(n->t->name, "tcp") != 0) {
        if ((st = dc_verbs_find("tcp", &n->tw)) != DC_OK)
            goto out;
        if ((st = n->tw->listen(&n->vopts, info.addr, &n->lisw)) != DC_OK) {
            dc_error_prefix("node %u: listen (tcp, between regions) on %s", n->me, info.addr);
            goto out;
        }
        char lan[300];
        if ((st = dc_node_lan_addr(n->t, info.addr, lan, sizeof(lan))) != DC_OK)
            goto out;
        if ((st = n->t->listen(&n->vopts, lan, &n->lis)) != DC_OK) {
            dc_error_prefix("node %u: listen (%s, inside the region) on %s", n->me, n->t->name,
                            lan);
            goto out;
        }
        DC_LOG_INFO("node %u: %s inside the region at %s, tcp between regions at %s", n->me,
                    n->t->name, lan, info.addr);
    } else if ((st = n->t->listen(&n->vopts, info.addr, &n->lis)) != DC_OK) {
        dc_error_prefix("node %u: listen on %s", n->me, info.addr);
        goto out;
    }
    n->progress_line = cfg->progress;
    if (n->is_root) {
        n->mode = cfg->dense ? DC_MODE_DENSE : DC_MODE_DELTA;
        st = dc_root_run(n);
    } else if (n->is_sender) {
        st = dc_sender_run(n);
    } else {
        st = dc_rx_run(n);
    }

out:
    if (st != DC_OK && dc_last_status() == DC_OK)
        dc_error(st, "node %u failed", n->me);
    {
        dc_status_t keep = dc_last_status();
        char msg[512];
        snprintf(msg, sizeof(msg), "%s", dc_last_error());
        for (size_t i = 0; i < n->npeers; i++)
            dc_peer_free(n, n->peers[i]);
        free(n->peers);
        dc_nbuf_unref(n, n->begin_msg);
        {
            dc_nbuf_t *b = n->ready_head;
            while (b) {
                dc_nbuf_t *nx = b->next;
                free(b->data);
                free(b);
                b = nx;
            }
        }
        while (n->pool) {
            dc_nbuf_t *b = n->pool;
            n->pool = b->next;
            free(b->data);
            free(b);
        }
        if (n->lis)
            n->t->listen_close(n->lis);
        if (n->lisw)
            n->tw->listen_close(n->lisw);
        if (n->layout && n->retained)
            dc_rx_drop_version(n);
        dc_journal_close(n->j);
        free(n->retained);
        free(n->retained_len);
        free(n->undo);
        free(n->scratch);
        dc_codec_free(n->codec);
        if (n->place_ok)
            dc_place_fini(&n->place);
        dc_st_close(n->wfile);
        dc_st_close(n->base);
        dc_st_close(n->next);
        free(n->mbase);
        free(n->moff);
        free(n->mown);
        if (n->mnext_ok)
            dc_place_fini(&n->mnext);
        if (n->base_fd >= 0)
            close(n->base_fd);
        if (n->next_fd >= 0)
            close(n->next_fd);
        dc_root_free(n);
        dc_layout_free(n->layout);
        dc_tree_free(n->tree);
        free(n->dead);
        free(n->route);
        if (n->known)
            for (uint32_t i = 0; i < n->nnodes; i++)
                dc_nbuf_unref(n, n->known[i]);
        free(n->known);
        if (n->evfd >= 0)
            close(n->evfd);
        pthread_mutex_destroy(&n->mu);
        pthread_cond_destroy(&n->cv);
        if (n->trace)
            fclose(n->trace);
        free(n);
        if (st != DC_OK)
            dc_error(keep != DC_OK ? keep : st, "%s", msg);
    }
    return st;
}

dc_status_t dc_node_chunk_size(uint64_t given, uint64_t *out)
{
    uint64_t cs = given;
    dc_status_t st = DC_OK;
    if (!cs)
        st = dc_config_get_size("chunk_size", &cs);
    if (st != DC_OK)
        return st;
    if (cs < DC_CODEC_MIN_CHUNK || cs > DC_CODEC_MAX_CHUNK)
        return dc_error(DC_ERR_INVALID, "chunk size %llu outside %u .. %u", (unsigned long long)cs,
                        DC_CODEC_MIN_CHUNK, DC_CODEC_MAX_CHUNK);
    *out = cs;
    return DC_OK;
}

dc_status_t dc_node_sender_chunks(const dc_topo_t *topo, uint32_t rank, const dc_layout_t *l,
                                  uint8_t *want)
{
    dc_tree_options_t o;
    memset(&o, 0, sizeof(o));
    o.size = sizeof(o);
    o.chunk_bytes = l->chunk_size;
    o.max_stripes = 1;
    dc_tree_t *tree = NULL;
    dc_status_t st = dc_tree_plan(topo, &o, &tree);
    if (st != DC_OK)
        return st;
    uint32_t nch = l->nchunks;
    uint8_t *shard = calloc(nch ? nch : 1, 1);
    uint32_t *stream = calloc(nch ? nch : 1, sizeof(uint32_t));
    uint32_t *src = calloc(nch ? nch : 1, sizeof(uint32_t));
    if (!shard || !stream || !src) {
        st = dc_error(DC_ERR_NOMEM, "out of memory");
    } else {
        dc_layout_chunk_map(l, tree, dc_topo_shard_count(topo), shard, stream, src);
        for (uint32_t c = 0; c < nch; c++)
            want[c] = src[c] == rank;
    }
    free(shard);
    free(stream);
    free(src);
    dc_tree_free(tree);
    return st;
}
