/*
 * node.h - one process of a refit job: root (sender + coordinator), relay,
 * receiver (engine-internal; `deltacast node` and the perf/demo drivers).
 *
 *              root (node 0: encodes chunk by chunk, sends while encoding,
 *               |    collects acks, writes the commit record, COMMIT)
 *        WAN   / \   WAN            one gateway per region
 *            r1   r5                relay: verify, forward cut-through,
 *           / \     \               apply locally, pass acks up
 *         r2   r3    r6 ...         receiver: apply in place (journal),
 *                                   verify the chunk digest, ack
 *
 * The tree comes from tree/ (dc_tree_plan over the job's topology,
 * max_stripes = 1: one stream per shard, rooted at its owner).  Every
 * sender broadcasts the chunks of its own shards; node 0 (a sender) is
 * also the coordinator, the other senders reach it over a control link.
 * A node takes frames from every parent of its plan (one connection each,
 * filtered by stream: SUB) and sends upward through one of them; a
 * receiver applies only the shards it needs.  A node whose parent dies
 * re-plans without it (dc_tree_replan) and re-attaches; the coordinator
 * re-sends what it missed.  See README.md "Several senders".
 *
 * Each role lives in a file of its own (node.c: the loop and the
 * dispatcher; peer.c, attach.c, encoder.c, sender.c, shard.c, receiver.c,
 * coord.c); node_internal.h holds their shared state.
 */
#ifndef DC_ENGINE_NODE_H
#define DC_ENGINE_NODE_H

#include "util/dc_util.h"

struct dc_place_seg;
struct dc_refit_version_stats;

/* A sender whose versions live in memory (the library's dc_refit_sender_*):
 * the loop asks `next` for version v's weights and reports the outcome to
 * `done`.  Both are called on the node's thread. */
typedef struct dc_node_source {
    /* 1: segs and nsegs place version v's bytes (host memory, borrowed until
     * done(v)); 0: no more versions (the job ends); 2: not yet (asked again
     * while the loop keeps serving); < 0: fail the job */
    int (*next)(void *user, uint64_t v, const struct dc_place_seg **segs, size_t *nsegs);
    void (*done)(void *user, uint64_t v, dc_status_t st,
                 const struct dc_refit_version_stats *vs);
    /* the baseline was copied (the caller may change its memory from now on) */
    void (*ready)(void *user);
    /* 1 once the caller closed the sender (no more versions will come) */
    int (*closed)(void *user);
    void *user;
} dc_node_source_t;

/* One committed version, for the root's caller (deltacast node's summary
 * line). */
typedef struct dc_node_vsum {
    uint64_t version;
    uint64_t payload_bytes, repair_bytes, dense_bytes;
    uint64_t repairs;   /* repair frames (NEED, stalls, re-joins) */
    double seconds;     /* BEGIN to the commit record */
    uint32_t receivers; /* receivers that took it */
} dc_node_vsum_t;
/* What a receiver tells its embedder (the library's dc_refit_receiver_*),
 * and what the embedder asks of it.  Every call is on the node's thread. */
enum {
    DC_NODE_EV_READY = 0,     /* the weights are open, the node serves */
    DC_NODE_EV_BEGIN = 1,     /* version v (from baseline b) begins */
    DC_NODE_EV_COMMITTED = 2, /* v committed here (digest: its checkpoint digest) */
    DC_NODE_EV_ABORTED = 3,   /* v aborted: back at baseline b (flags DENSE: bytes unknown) */
};
enum {
    DC_NODE_EVF_DENSE = 1,    /* BEGIN: taken whole (overwrites); ABORTED: marked dense */
    DC_NODE_EVF_HELD = 2,     /* BEGIN: arrives while held (staged until release) */
    DC_NODE_EVF_COLD = 4,     /* BEGIN: cold start, this node held no version */
};
typedef struct dc_node_event {
    int type;                 /* DC_NODE_EV_* */
    unsigned flags;           /* DC_NODE_EVF_* */
    uint64_t v, b;
    uint64_t digest_lo, digest_hi;
    uint64_t bytes;           /* COMMITTED / ABORTED: bytes received for v */
    uint64_t apply_ns;        /* COMMITTED / ABORTED: apply time of v */
    uint64_t repairs;         /* chunks asked again (NEED) for v */
    const char *msg;          /* one line */
} dc_node_event_t;
enum {
    DC_NODE_CTL_HOLD = 1,     /* stage frames, do not apply (else: apply the staged) */
    DC_NODE_CTL_CANCEL = 2,   /* leave the job now */
};
typedef struct dc_node_sink {
    void (*event)(void *user, const dc_node_event_t *ev);
    /* each turn of the loop: what the embedder wants (DC_NODE_CTL_*) */
    unsigned (*control)(void *user);
    /* held is in effect (1) or not (0), staged payload bytes; took: what the
     * last control() asked for is done */
    void (*state)(void *user, int held, uint64_t staged_bytes, int took);
    void *user;
} dc_node_sink_t;

typedef struct dc_node_cfg {
    uint32_t rank;               /* this node's index in the topology */
    const dc_topo_t *topo;       /* borrowed */
    const char *state_dir;       /* commit record, journal (created if absent) */
    /* root */
    const char *versions_dir;    /* v0.safetensors .. vK.safetensors */
    uint32_t nversions;          /* K: refit v1..vK (0: every vN present) */
    int dense;                   /* send every chunk as an overwrite */
    const char *stats_path;      /* root: write a JSON report here (NULL: none) */
    uint32_t abort_ms;           /* a receiver silent this long aborts v (0: 4x timeout) */
    uint32_t wait_ms;            /* root: wait this long for every receiver to join */
    /* receiver: either a checkpoint file updated in place ... */
    const char *weights;         /* its checkpoint copy, updated in place */
    /* ... or memory: the tensor list (canonical order) and a placement of
     * every tensor's bytes (segments; borrowed, must outlive the run) */
    const struct dc_layout_desc *tensors;
    size_t ntensors;
    const struct dc_place_seg *segs;
    size_t nsegs;
    uint64_t initial_version;    /* version of `weights` when no commit record */
    int durable;                 /* fsync journal transitions (power-loss safe) */
    /* both */
    uint64_t chunk_size;         /* 0: config chunk_size */
    const char *transport;       /* NULL: config transport */
    int progress;                /* root: progress line on stderr */
    /* sender from memory (instead of versions_dir; the topology's only
     * sender): tensors/segs above place the committed version's bytes (the
     * baseline, copied at start: the sender keeps its own copy), each next
     * version comes from source->next */
    const dc_node_source_t *source;
    /* segs (receiver's and memory sender's) point to CUDA device memory:
     * chunks are copied across PCIe around the CPU codec */
    int cuda_mem;
    /* root: called after each committed version (NULL: none) */
    void (*on_version)(void *user, const dc_node_vsum_t *vs);
    void *on_version_user;
    /* receiver: holds no version yet (no initial version): when its state
     * directory has no commit record, the first version comes dense */
    int cold;
    /* receiver embedded by the library: events, hold / release, cancel */
    const dc_node_sink_t *sink;
} dc_node_cfg_t;

/** Run the node until the job ends (root: all versions committed and BYE
 *  sent; others: BYE received).  DC_ERR_CANCELED when a version was
 *  aborted (receivers are back at the baseline or marked for dense refit). */
dc_status_t dc_node_run(const dc_node_cfg_t *cfg);

/** The job's chunk size: `given`, else the config's chunk_size; checked. */
dc_status_t dc_node_chunk_size(uint64_t given, uint64_t *out);

/** want[c] = 1 for each chunk of layout l that sender `rank` broadcasts in
 *  the job's plan (what its memory placements must cover). */
struct dc_layout;
dc_status_t dc_node_sender_chunks(const dc_topo_t *topo, uint32_t rank,
                                  const struct dc_layout *l, uint8_t *want);

/** Name of version file v in dir ("DIR/v<v>.safetensors"). */
int dc_node_version_path(char *buf, size_t len, const char *dir, uint64_t v);

#endif /* DC_ENGINE_NODE_H */
