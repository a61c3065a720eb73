/*
 * node_internal.h - the state of one node of a refit job, shared by the
 * files that play its roles (engine-internal, not installed; node.h is the
 * engine's interface to api.c and the CLI).
 *
 * One process runs one dc_node_t: one event loop (node.c) over the
 * transport connections, with one sub-struct per role, each owned by its
 * file (the others read it where the protocol needs to):
 *
 *   file         state       role
 *   node.c       (top)       dc_node_run, the loop (poll, step, serve) and
 *                            the dispatcher dc_node_handle; the node's own
 *                            commit record; the chunk map; test hooks
 *   peer.c       n->net      connections, refcounted buffers, send queues,
 *                            up / down routing (dc_send_up, dc_send_down)
 *   attach.c     n->plan     the tree plan and re-plan, dialling parents,
 *                            SUB / SUBOK, HELLO, accepting children
 *   encoder.c    n->enc      every sender: encoder threads, the repair
 *                            queue, the version's files, frames to send
 *   sender.c     (n->enc)    a sender that is not the coordinator: BEGIN,
 *                            SENT, COMMIT / ABORT, its run loop
 *   shard.c      n->mem      a sender from memory (the library's trainer
 *                            shards): placements, its own baseline copy
 *   receiver.c   n->rx       apply in place under the journal, verify,
 *                            ACK / NEED, local commit, abort / undo
 *   coord.c      n->coord    node 0: joins, acks, repairs, stalls, the
 *                            joint commit, confirmations, stats, its run
 *
 * The data path, file by file (a frame of chunk c of version v):
 *
 *   encoder.c    dc_enc_thread encodes c (base -> next), dc_enc_drain
 *      |         hands the frame to the loop
 *   peer.c       dc_send_frame_down: isend to the children subscribed to
 *      |         c's stream (or along the route of an addressed repair)
 *   node.c       relay: dc_node_handle forwards it first (cut-through,
 *      |         peer.c), then acts on it locally
 *   receiver.c   dc_rx_frame: journal APPLYING, decode in place, digest
 *      |         check, APPLIED; ACK (or NEED) up through peer.c dc_send_up
 *   coord.c      dc_coord_handle_up counts the ACK (a NEED queues a repair
 *      |         back in encoder.c); all acked: commit record, COMMIT down
 *   receiver.c   dc_rx_commit: its own commit record, DONE up to coord.c
 *
 * Threads: everything runs on the node's thread except the encoder
 * threads (encoder.c), which share n->mu / n->cv with it for the work
 * queue, the in-flight byte count and the ready list.
 */
#ifndef DC_ENGINE_NODE_INTERNAL_H
#define DC_ENGINE_NODE_INTERNAL_H

#include "engine/commit.h"
#include "engine/journal.h"
#include "engine/layout.h"
#include "engine/node.h"
#include "engine/proto.h"
#include "kernels/codec.h"
#include "kernels/frame.h"
#include "topology/topo.h"
#include "verbs/transport.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#define DC_NRX 64        /* receive ring slots per peer */
#define DC_NRX_CHILD 8   /* receives posted on a child (small upward messages) */
#define DC_MAX_LINKS DC_DONE_MAX_LINKS /* per-parent byte counts a DONE carries */
#define DC_STALL_NS 1500000000ull

#define DC_STREAM_ANY UINT32_MAX         /* control messages: every child */
#define DC_STREAM_NONE (UINT32_MAX - 1u) /* a chunk no receiver needs */

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

/* One item of an encoder's work: chunk for dest (DC_NODE_ALL: broadcast). */
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

struct dc_node;

typedef struct dc_enc_arg {
    struct dc_node *n;
    int idx;
} dc_enc_arg_t;

/* peer.c: connections and buffers. */
typedef struct dc_node_net {
    const dc_verbs_ops_t *t;  /* inside the region (config transport) */
    const dc_verbs_ops_t *tw; /* between regions, when t is not tcp: tcp */
    dc_verbs_opts_t vopts;
    dc_verbs_listener_t *lis;  /* t's, on the LAN address (dc_attach_lan_addr) */
    dc_verbs_listener_t *lisw; /* tw's, on the topology address */
    dc_peer_t **peers;
    size_t npeers, cap_peers;
    dc_peer_t *up;          /* the parent link our upward messages take */
    uint32_t up_id;
    uint64_t *retry_ns;     /* node -> next connect attempt (parents) */
    uint64_t root_lost_ns;
    dc_peer_t **route;     /* node -> child peer it was last heard through */
    dc_nbuf_t **known;     /* node -> its last HELLO/STATE seen (re-announced
                              to a new parent) */
    size_t rx_cap;
    unsigned rx_post_parent; /* receives posted on the parent: inflight_bytes / rx_cap,
                                DC_NRX_CHILD .. DC_NRX */
    dc_nbuf_t *pool;
    size_t pool_n;
} dc_node_net_t;

/* attach.c (and the chunk map, node.c): the plan this node follows. */
typedef struct dc_node_plan {
    dc_tree_t *tree;
    uint8_t *dead;
    dc_tree_node_view_t view; /* this node in the current plan */
    uint32_t subgen;        /* bumped on every re-plan: parents get a new SUB */
    uint32_t announced;     /* the generation our last HELLO was sent for */
    uint32_t *spar;         /* stream x node -> parent in that stream (UINT32_MAX) */
    uint32_t *chunk_stream; /* chunk -> stream (UINT32_MAX: no receiver needs it) */
    uint32_t *chunk_src;    /* chunk -> sender that broadcasts it */
    uint8_t *chunk_shard;   /* chunk -> shard */
} dc_node_plan_t;

/* receiver.c */
typedef struct dc_node_rx {
    uint64_t need_mask;     /* shards it applies */
    dc_st_file_t *wfile;
    dc_place_t place;
    int place_ok;
    int dense_needed;
    int commit_failed;      /* a local commit failed: reported at BYE */
    int fail_sent;          /* a FAIL went up: the node stops once the root's
                               ABORT or BYE shows it arrived (fail_heard) */
    int fail_heard;
    int serving;            /* dc_rx_run reached its loop */
    dc_nbuf_t *early;       /* it failed before joining (early.c): this FAIL
                               goes up in place of its HELLO */
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
    uint8_t **retained;    /* per chunk: the frame that undoes the applied one (an XOR
                              frame itself, else its XOR words as one) */
    size_t *retained_len;
    uint8_t **undo;        /* per chunk: baseline bytes before an overwrite */
    struct dc_devpath *dev; /* weights in device memory: the device apply
                               (engine/devpath.c); NULL otherwise */
    dc_codec_t *codec;
    uint32_t ack_lo, ack_n;
    uint64_t apply_ns, version_bytes;
    uint64_t repairs;      /* chunks asked again (NEED) in the version in flight */
    /* hold (dc_refit_receiver_hold): frames CRC-checked and kept, not applied */
    int held;
    int cold;              /* cold start: no version held until the first commit */
    uint32_t nstaged;      /* chunks staged now */
    uint8_t **staged;      /* per chunk: the frame body to apply at release */
    uint32_t *staged_len;
    uint64_t staged_bytes;
    uint64_t hold_report_ns; /* last DC_ACK_F_HOLDING sent up */
    int64_t crash_at;      /* test hook: DELTACAST_ENGINE_CRASH_AT */
} dc_node_rx_t;

/* encoder.c (every sender; sender.c drives it on the other senders) */
typedef struct dc_node_enc {
    dc_st_file_t *base, *next;
    uint64_t next_version;  /* version `next` maps (0: none) */
    int base_fd, next_fd;   /* the same files, read with pread by the encoders */
    uint32_t *bcast;       /* chunks this sender broadcasts, in order */
    uint32_t nbcast;
    /* the version in flight */
    uint64_t vnum, vbase;
    uint32_t mode;
    int in_flight;
    int sent_reported;     /* sender: SENT of vnum sent */
    uint32_t cursor, sent, total;   /* broadcast: encode cursor, sent count */
    dc_digest_t *digests;  /* chunk -> target digest */
    uint8_t *dknown;       /* chunk -> digests[] holds its target digest */
    uint8_t *sentc;        /* chunk broadcast in this version (coordinator's own) */
    dc_work_t *wq;
    size_t wq_head, wq_n, wq_cap;
    /* per (dest, chunk), under mu: 1 an XOR, 2 an overwrite of the chunk
     * for dest waits in wq (a repeated request while it waits is dropped:
     * a flapping child's every STATE would otherwise queue again all the
     * chunks it lacks) */
    uint8_t *wqin;
    dc_nbuf_t *ready_head, *ready_tail;
    int evfd;              /* the threads signal the loop: frames ready */
    pthread_t *threads;
    dc_enc_arg_t *args;
    int nthreads, stop, busy;
    uint64_t ns, first_ns, last_ns;
    uint64_t payload_bytes, repair_bytes, repairs, overwrites_sent;
} dc_node_enc_t;

/* shard.c: a sender from memory (cfg->source): versions come from the
 * library caller */
/* A device sender with its baseline on the host: a chunk's changes of the
 * version in flight (positions, then XOR words), applied to the host
 * baseline at the commit instead of copying the chunk back (shard.c). */
typedef struct dc_mem_patch {
    size_t count;
    uint8_t *data; /* count x 4 bytes of positions, count x w of XOR words */
} dc_mem_patch_t;

typedef struct dc_node_mem {
    uint8_t *base;          /* the baseline's bytes of the chunks we send (our own copy;
                               NULL when it is in device memory: dbase) */
    uint8_t *dbase;         /* device sender, device_baseline=device: the copy in
                               device memory (same offsets) */
    int dev_encode;         /* device sender encodes on the device (engine/devsend.c) */
    int base_pinned;        /* base is page-locked (streamed to the device by DMA) */
    dc_mem_patch_t *patch;  /* dev_encode with a host baseline: per chunk, this
                               version's changes (NULL data: none kept, copy back) */
    uint64_t dev_chunks, staged; /* chunks encoded on the device, staged */
    uint64_t pcie_h2d, pcie_d2h; /* the device sender's copies (all its encoders) */
    int staged_said;        /* the first staged chunk was logged */
    uint64_t *off;          /* chunk -> offset of its bytes in base (ours only) */
    uint8_t *own;           /* chunk -> we send it (placements cover these) */
    int pend;               /* a BEGIN waits for the source's version */
    uint64_t closed_ns;     /* when the source was first seen closed, idle */
    dc_begin_t bg;          /* ... this one */
    dc_place_t next;        /* where the version in flight's bytes are */
    int next_ok;
    int end;                /* the source said: no more versions */
} dc_node_mem_t;

/* coord.c: node 0 */
typedef struct dc_node_coord {
    uint64_t committed;     /* the job's committed version (its commit record) */
    dc_digest_t ckpt;       /* checkpoint digest of committed (0: unknown) */
    int digests_ok;         /* enc.digests[] are committed's (content hashes) */
    uint64_t confirm_v;     /* DONEs of this version answer a confirming COMMIT */
    uint8_t *confirmed;     /* node -> showed it holds committed (this run) */
    uint8_t *dflags;        /* node -> flags of its last DONE */
    uint8_t *acked;        /* nnodes x nchunks */
    uint32_t *nacked;
    uint8_t *joined, *vdone, *needq;
    uint64_t *last_seen, *last_progress;
    uint64_t *hold_since;   /* node -> when it said it holds the version staged (0: not) */
    uint64_t hold_timeout_ms; /* config hold_timeout_ms: then the version is aborted */
    uint64_t *hello_committed;
    uint8_t *resync;        /* node re-joined mid-version: at each other sender's
                               SENT, re-send it what it lacks of that sender */
    uint64_t *rneed;       /* node -> shards it needs (0: not a receiver) */
    uint32_t *nneed;       /* node -> chunks it needs */
    uint8_t *sjoined, *ssent; /* sender connected / SENT this version */
    uint64_t other_payload, other_frames; /* the other senders' (SENT) */
    uint64_t t_begin, t_first_frame, t_all_sent, t_all_acked;
    uint64_t *rx_apply_ns, *rx_bytes;
    uint32_t *rx_parent;
    uint32_t *rx_nlinks;   /* node -> per-parent counts in its DONE */
    uint32_t *rx_lpar;     /* node x DC_MAX_LINKS -> parent */
    uint64_t *rx_lbytes;   /* node x DC_MAX_LINKS -> bytes from it */
    int progress_line;
    /* test hook DELTACAST_ENGINE_ROOT_CRASH: "frames=N" (SIGKILL after N
     * broadcast frames of the first version are queued) or "commit=V"
     * (after version V's commit record is written, before its COMMIT) */
    uint64_t crash_frames, crash_commit;
    uint64_t crash_ns;     /* crash_frames reached: dies once they left */
    /* the first receiver that said FAIL (UINT32_MAX: none), its status and
     * the root's words for it (coord.c dc_coord_fail) */
    uint32_t fail_node;
    dc_status_t fail_st;
    uint64_t aborted_v;     /* the version this run aborted (0: none) */
    char fail_why[2048];
} dc_node_coord_t;

typedef struct dc_node {
    const dc_node_cfg_t *cfg;
    uint32_t me, nnodes;
    int is_root;            /* node 0: the coordinator (a sender) */
    int is_sender;          /* topology role sender: encodes the chunks it owns */
    uint32_t timeout_ms, abort_ms;
    dc_layout_t *layout;
    uint64_t chunk_size;
    uint8_t *scratch;       /* one chunk (receiver, memory sender) */
    /* this node's own commit record (receivers, memory senders) */
    uint64_t committed;
    dc_digest_t committed_ckpt; /* its record's checkpoint digest (0: none) */
    int have_record;
    /* broadcast control messages handled (dispatch), and the BEGIN of the
     * version in flight (replayed to children attaching later) */
    uint64_t seen_begin, seen_commit, seen_abort;
    dc_nbuf_t *begin_msg;

    pthread_mutex_t mu;     /* with cv: inflight, enc's queue and ready list */
    pthread_cond_t cv;
    uint64_t inflight, inflight_max;

    int finished, bye;
    FILE *trace;           /* DELTACAST_ENGINE_TRACE=DIR: per-frame events */
    dc_status_t result;
    dc_status_t stop_st;   /* the first failure's status and text (dc_node_stop):
                              what the node returns, whatever its closing
                              connections say after it */
    char stop_why[DC_FAIL_TEXT_MAX + 1];

    dc_node_net_t net;
    dc_node_plan_t plan;
    dc_node_rx_t rx;
    dc_node_enc_t enc;
    dc_node_mem_t mem;
    dc_node_coord_t coord;
} dc_node_t;

/* Run the loop until pred() or the deadline; returns 1 when pred held. */
typedef int (*dc_pred_fn)(dc_node_t *n);

/* ------------------------------------------------------------------------ */
/* node.c: the loop, the dispatcher, the node's own record                  */
/* ------------------------------------------------------------------------ */

/* A frame event in the trace (DELTACAST_ENGINE_TRACE; a no-op without). */
void dc_trace(dc_node_t *n, const char *ev, const dc_nbuf_t *b, uint32_t peer);
/* n->committed from the state directory's record (else initial_version). */
dc_status_t dc_node_load_committed(dc_node_t *n);
/* The node's own record now says v from b (compare-and-set). */
dc_status_t dc_node_record_commit(dc_node_t *n, uint64_t v, uint64_t b, dc_digest_t ckpt);
int dc_node_role_sender(const dc_node_t *n, uint32_t i);
/* One received message (b borrowed): forward, then hand to the role. */
void dc_node_handle(dc_node_t *n, dc_peer_t *from, dc_nbuf_t *b);
int dc_node_tx_pending(const dc_node_t *n);
void dc_node_step(dc_node_t *n, int timeout_ms);
/* Stop the node with st (DC_OK: a clean end): n->result and n->finished,
 * and for the first failure its status and dc_last_error()'s text, kept
 * for dc_node_outcome. */
void dc_node_stop(dc_node_t *n, dc_status_t st);
/* What a finished node returns (DC_OK while it runs): its first failure
 * with that failure's own text (set again as the last error), else
 * n->result. */
dc_status_t dc_node_outcome(dc_node_t *n);
/* n->plan's chunk -> shard / stream / source, n->enc.bcast, coord's needs. */
dc_status_t dc_node_chunk_map(dc_node_t *n);
int dc_node_run_until(dc_node_t *n, dc_pred_fn pred, uint64_t deadline_ns);
void dc_node_serve(dc_node_t *n, int step_ms, int (*each)(dc_node_t *n));

/* ------------------------------------------------------------------------ */
/* peer.c: buffers, connections, routing                                    */
/* ------------------------------------------------------------------------ */

/* A buffer (pooled: from / back to the receive pool; acct: counted in
 * n->inflight until freed), refs = 1; NULL when out of memory. */
dc_nbuf_t *dc_nbuf_new(dc_node_t *n, size_t cap, int pooled, int acct);
void dc_nbuf_unref(dc_node_t *n, dc_nbuf_t *b);
dc_nbuf_t *dc_nbuf_copy(dc_node_t *n, const void *data, size_t len);
dc_peer_t *dc_peer_new(dc_node_t *n, dc_verbs_conn_t *c, int is_parent);
void dc_peer_free(dc_node_t *n, dc_peer_t *p);
/* Free the peers marked dead. */
void dc_peers_reap(dc_node_t *n);
/* Queue b on p (takes a reference) and post what the transport takes. */
dc_status_t dc_peer_send(dc_node_t *n, dc_peer_t *p, dc_nbuf_t *b);
void dc_peer_fail(dc_node_t *n, dc_peer_t *p, dc_status_t st, const char *what);
/* May p's peer speak as node `node`?  Yes, unless its connection carries a
 * verified TLS certificate (certificate mode) that names another host than
 * the topology's name of `node` (logged). */
int dc_peer_claim_ok(dc_node_t *n, dc_peer_t *p, uint32_t node);
void dc_peer_progress(dc_node_t *n, dc_peer_t *p);
/* Up: on the parent chosen for upward traffic (n->net.up). */
void dc_send_up(dc_node_t *n, dc_nbuf_t *b);
void dc_send_up_simple(dc_node_t *n, uint8_t type, uint8_t flags, uint64_t v, uint64_t base,
                       uint32_t chunk, uint32_t count);
/* Down: to the child that leads to dest; for DC_NODE_ALL to every child
 * subscribed to stream (DC_STREAM_ANY: every child); an addressed message
 * with no route to every child. */
void dc_send_down(dc_node_t *n, dc_nbuf_t *b, uint32_t dest, uint32_t stream);
void dc_send_frame_down(dc_node_t *n, dc_nbuf_t *b, const dc_msg_t *m);
void dc_send_down_simple(dc_node_t *n, uint8_t type, uint64_t v, uint64_t base, uint32_t dest);

/* ------------------------------------------------------------------------ */
/* attach.c: the plan and the links that follow it                          */
/* ------------------------------------------------------------------------ */

/* A relay keeps a child's last HELLO / STATE (re-announced on a new parent). */
void dc_attach_remember(dc_node_t *n, uint32_t node, dc_nbuf_t *b);
/* A child's SUB on link `from`: its streams; SUBOK back. */
void dc_attach_child_sub(dc_node_t *n, dc_peer_t *from, const dc_msg_t *m);
/* n->plan from the topology (dc_tree_plan, max_stripes = 1). */
dc_status_t dc_attach_plan(dc_node_t *n);
dc_status_t dc_attach_lan_addr(const dc_verbs_ops_t *t, const char *addr, char *out, size_t len);
/* Each loop turn: dial missing parents, re-SUB, HELLO on the up parent. */
void dc_attach_links(dc_node_t *n);
/* A parent link died: redial a sender, re-plan a relay away. */
void dc_attach_parent_lost(dc_node_t *n, dc_peer_t *p);
void dc_attach_accept(dc_node_t *n);

/* ------------------------------------------------------------------------ */
/* encoder.c: every sender's encoder threads                                */
/* ------------------------------------------------------------------------ */

/* Drop every queued repair (under n->mu). */
void dc_enc_wq_clear(dc_node_t *n);
/* Queue a repair: chunk for dest (an overwrite or an XOR). */
void dc_enc_queue(dc_node_t *n, uint32_t chunk, uint32_t dest, int overwrite);
/* The loop takes the encoded frames and sends them. */
void dc_enc_drain(dc_node_t *n);
/* Until no encoder thread reads the version's bytes. */
void dc_enc_wait_idle(dc_node_t *n);
/* Open version v's bytes (files v-1 and v, or the memory sender's next). */
dc_status_t dc_enc_open_version(dc_node_t *n, uint64_t v);
dc_status_t dc_enc_alloc(dc_node_t *n);
dc_status_t dc_enc_start(dc_node_t *n);
void dc_enc_stop(dc_node_t *n);
void dc_enc_free(dc_node_t *n);

/* ------------------------------------------------------------------------ */
/* sender.c: a sender other than the coordinator                            */
/* ------------------------------------------------------------------------ */

void dc_sender_report_sent(dc_node_t *n);
void dc_sender_begin(dc_node_t *n, const dc_begin_t *bgp);
/* COMMIT / ABORT / BYE (type) of v (0: whatever is in flight). */
void dc_sender_end(dc_node_t *n, uint64_t v, uint8_t type);
dc_status_t dc_sender_run(dc_node_t *n);

/* ------------------------------------------------------------------------ */
/* shard.c: a sender from memory                                            */
/* ------------------------------------------------------------------------ */

dc_status_t dc_mem_init(dc_node_t *n);
dc_status_t dc_mem_baseline(dc_node_t *n);
/* Device sender with a host baseline: keep chunk c's changes of the
 * version in flight (data NULL on allocation failure: copied back). */
void dc_mem_patch_keep(dc_node_t *n, uint32_t c, const uint32_t *pos, const uint8_t *xorv,
                       size_t count, unsigned w);
/* 1: version v's placement is in n->mem.next; 0: not yet; -1: none / error. */
int dc_mem_try(dc_node_t *n, uint64_t v);
dc_status_t dc_mem_done(dc_node_t *n, uint64_t v, dc_status_t st, const dc_vstats_t *vs);
dc_status_t dc_mem_wait_next(dc_node_t *n, uint64_t v);
void dc_mem_free(dc_node_t *n);

/* ------------------------------------------------------------------------ */
/* receiver.c                                                               */
/* ------------------------------------------------------------------------ */

void dc_rx_flush_acks(dc_node_t *n);
void dc_rx_begin(dc_node_t *n, const dc_begin_t *bgp);
void dc_rx_frame(dc_node_t *n, const dc_msg_t *m, dc_nbuf_t *b);
void dc_rx_commit(dc_node_t *n, const dc_msg_t *m);
void dc_rx_abort(dc_node_t *n, const dc_msg_t *m);
void dc_rx_bye(dc_node_t *n, uint64_t v, dc_digest_t ckpt);
/* HELLO for a new parent edge: committed version and journal. */
dc_nbuf_t *dc_rx_hello(dc_node_t *n);
dc_status_t dc_rx_run(dc_node_t *n);
void dc_rx_free(dc_node_t *n);
/* early.c */
void dc_early_fail(dc_node_t *n);

/* ------------------------------------------------------------------------ */
/* coord.c: node 0                                                          */
/* ------------------------------------------------------------------------ */

/* The live control link to sender s (NULL: none). */
dc_peer_t *dc_coord_ctl_peer(dc_node_t *n, uint32_t s);
/* A (re)joining receiver's HELLO / STATE. */
void dc_coord_state(dc_node_t *n, const dc_hello_t *h);
void dc_coord_handle_up(dc_node_t *n, dc_peer_t *from, const dc_msg_t *m);
dc_status_t dc_coord_run(dc_node_t *n);
void dc_coord_free(dc_node_t *n);

#endif /* DC_ENGINE_NODE_INTERNAL_H */
