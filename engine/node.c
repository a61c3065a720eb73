/* node.c - one process of a refit job: dc_node_run, the event loop and the
 * message dispatcher (node.h says what the roles are; node_internal.h
 * holds the state, one sub-struct per role, and the data path file by
 * file).
 *
 * One event loop per process: poll over the transport connections, the
 * listeners and, on a sender, the eventfd of its encoder threads
 * (dc_node_poll).  Each turn (dc_node_step) accepts children (attach.c),
 * takes the frames the encoders finished (encoder.c), progresses every
 * peer (peer.c, whose completed receives come back to dc_node_handle),
 * flushes the receiver's batched acks, re-plans around lost parents and
 * keeps the links of the plan (attach.c).
 *
 * dc_node_handle is the dispatcher.  Down, from a parent: every message is
 * forwarded to the children as it arrives (the same buffer, no copy; the
 * isend is posted at once), then acted on by the role: sender.c on a
 * sender, receiver.c on a receiver (a relay is a receiver with children).
 * A node with several parents gets each control message from every one of
 * them: only the first is forwarded and acted on.  Up, from a child: SUB
 * (attach.c), HELLO / STATE (routes learnt for addressed frames, the
 * subtree remembered for a re-attach), and the rest passed up unchanged,
 * or, on the coordinator, handled by coord.c (dc_coord_handle_up).
 *
 * Also here: the node's own commit record (receivers and memory senders),
 * the chunk map of the plan (layout.h dc_layout_chunk_map), and the
 * DELTACAST_ENGINE_* test and trace hooks, read in dc_node_run.
 */
#include "engine/node_internal.h"
#include "tree/tree_int.h"
#include "kernels/kern_cuda.h"
#include "verbs/gpumem.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int dc_node_version_path(char *buf, size_t len, const char *dir, uint64_t v)
{
    int n = snprintf(buf, len, "%s/v%llu.safetensors", dir, (unsigned long long)v);
    return n > 0 && (size_t)n < len ? 0 : -1;
}

/* One line per frame event: monotonic ns, event, chunk, peer node, length.
 * Events: rx (complete from the parent), q (queued to a child), post (isend
 * posted), done (the child's transport acknowledged it), apply (applied and
 * verified locally), poll (ns spent in poll); at the root: begin, acked (every
 * receiver acknowledged every chunk), commit (record written). */
void dc_trace(dc_node_t *n, const char *ev, const dc_nbuf_t *b, uint32_t peer)
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

/* The version this node holds: its state directory's commit record, else
 * the configured initial version. */
dc_status_t dc_node_load_committed(dc_node_t *n)
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
dc_status_t dc_node_record_commit(dc_node_t *n, uint64_t v, uint64_t b, dc_digest_t ckpt)
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

/* Node i is a sender of the topology. */
int dc_node_role_sender(const dc_node_t *n, uint32_t i)
{
    dc_topo_node_info_t info;
    memset(&info, 0, sizeof(info));
    info.size = sizeof(info);
    return dc_topo_node(n->cfg->topo, i, &info) == DC_OK && info.role == DC_TOPO_ROLE_SENDER;
}

/* One complete message from peer `from` (b: borrowed; a handler that keeps
 * it takes a reference). */
void dc_node_handle(dc_node_t *n, dc_peer_t *from, dc_nbuf_t *b)
{
    dc_msg_t m;
    if (dc_msg_parse(b->data, b->len, &m) != DC_OK) {
        DC_LOG_WARN("node %u: dropping a bad message from node %u: %s", n->me, from->node,
                    dc_last_error());
        return;
    }
    if (n->rx.fail_sent || n->rx.early) {
        /* this node stopped (dc_rx_fail) or could not start (early.c): it
         * only sends its FAIL (once its parents took its SUB) and waits for
         * the root to show it arrived */
        if (from->is_parent && m.type == DC_MSG_SUBOK)
            from->sub_acked = m.chunk;
        else if (n->rx.fail_sent && from->is_parent &&
                 (m.type == DC_MSG_ABORT || m.type == DC_MSG_BYE))
            n->rx.fail_heard = 1;
        return;
    }
    if (from->is_parent) {
        n->rx.version_bytes += b->len;
        from->vbytes += b->len;
        n->net.root_lost_ns = 0;
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
            /* the coordinator begins v from v - 1 (dc_coord_begin); a sender
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
            if (n->is_sender && n->enc.in_flight && m.version == n->enc.vnum &&
                m.chunk < n->layout->nchunks && n->plan.chunk_src[m.chunk] == n->me &&
                m.node < n->nnodes)
                dc_enc_queue(n, m.chunk, m.node, m.flags & DC_NEED_F_OVERWRITE);
            break;
        default:
            DC_LOG_WARN("node %u: unexpected %s from the parent", n->me,
                        dc_msg_type_name(m.type));
        }
        return;
    }
    /* up, from a child */
    if (m.type == DC_MSG_SUB) {
        dc_attach_child_sub(n, from, &m);
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
        if (!dc_peer_claim_ok(n, from, h.node)) {
            dc_peer_fail(n, from, DC_ERR_AUTH, "claims a node its certificate does not name");
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
            n->coord.sjoined[h.node] = 1;
            DC_LOG_INFO("coordinator: sender %u connected", h.node);
            return;
        }
        n->net.route[h.node] = from;
        DC_LOG_INFO("node %u: child node %u reports up through this node (committed %llu)",
                    n->me, h.node, (unsigned long long)h.committed);
        if (n->is_root) {
            dc_coord_state(n, &h);
        } else {
            b->data[4] = DC_MSG_STATE; /* forwarded as STATE */
            dc_attach_remember(n, h.node, b);
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
        if (n->is_root && from->ctl && n->enc.in_flight && m.version == n->enc.vnum &&
            m.node < n->nnodes && m.node != 0 && n->coord.rneed[m.node] &&
            m.chunk < n->layout->nchunks && n->plan.chunk_src[m.chunk] == from->node) {
            n->enc.repair_bytes += b->len - DC_MSG_HDR_SIZE;
            n->enc.repairs++;
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
        n->net.route[m.node] = from;
    if (!n->is_root) {
        if ((m.type == DC_MSG_STATE || m.type == DC_MSG_FAIL) && m.node < n->nnodes)
            dc_attach_remember(n, m.node, b);
        if (m.type == DC_MSG_ACK || m.type == DC_MSG_NEED || m.type == DC_MSG_STATE ||
            m.type == DC_MSG_DONE || m.type == DC_MSG_SENT || m.type == DC_MSG_FAIL)
            dc_send_up(n, b);
        return;
    }
    dc_coord_handle_up(n, from, &m);
}

/* Some live peer still has sends queued or in flight. */
int dc_node_tx_pending(const dc_node_t *n)
{
    for (size_t i = 0; i < n->net.npeers; i++)
        if (!n->net.peers[i]->dead && n->net.peers[i]->tx_n > 0)
            return 1;
    return 0;
}

/* Wait for any fd of the loop (1 ms at most while sends are queued). */
static void dc_node_poll(dc_node_t *n, int timeout_ms)
{
    struct pollfd fds[256];
    nfds_t k = 0;
    if (n->net.lis)
        fds[k++] = (struct pollfd){.fd = n->net.t->listen_fd(n->net.lis), .events = POLLIN};
    if (n->net.lisw)
        fds[k++] = (struct pollfd){.fd = n->net.tw->listen_fd(n->net.lisw), .events = POLLIN};
    if (n->enc.evfd >= 0)
        fds[k++] = (struct pollfd){.fd = n->enc.evfd, .events = POLLIN};
    for (size_t i = 0; i < n->net.npeers && k < DC_ARRAY_SIZE(fds); i++) {
        int fd = n->net.peers[i]->c->ops->fd(n->net.peers[i]->c);
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

void dc_node_stop(dc_node_t *n, dc_status_t st)
{
    if (st != DC_OK && !n->stop_why[0]) {
        n->stop_st = st;
        if (dc_last_status() != DC_OK)
            snprintf(n->stop_why, sizeof(n->stop_why), "%s", dc_last_error());
        else
            snprintf(n->stop_why, sizeof(n->stop_why), "node %u stopped: %s", n->me,
                     dc_status_str(st));
    }
    n->result = st;
    n->finished = 1;
}

dc_status_t dc_node_outcome(dc_node_t *n)
{
    if (!n->finished)
        return DC_OK;
    if (n->result != DC_OK && n->result == n->stop_st && n->stop_why[0])
        /* the failure itself, not what the connections said while the
         * node stopped (e.g. "closed by the peer") */
        return dc_error(n->stop_st, "%s", n->stop_why);
    return n->result;
}

/* One turn of the loop. */
void dc_node_step(dc_node_t *n, int timeout_ms)
{
    dc_node_poll(n, timeout_ms);
    if (n->net.lis)
        dc_attach_accept(n);
    if (n->is_sender && n->enc.evfd >= 0) {
        dc_enc_drain(n);
        dc_sender_report_sent(n);
    }
    for (size_t i = 0; i < n->net.npeers; i++)
        dc_peer_progress(n, n->net.peers[i]);
    if (!n->is_sender)
        dc_rx_flush_acks(n);
    for (size_t i = 0; i < n->net.npeers; i++)
        dc_peer_progress(n, n->net.peers[i]); /* post what handling queued */
    for (size_t i = 0; i < n->net.npeers && !n->finished; i++)
        if (n->net.peers[i]->dead && n->net.peers[i]->is_parent)
            dc_attach_parent_lost(n, n->net.peers[i]);
    dc_peers_reap(n);
    if (!n->finished)
        dc_attach_links(n);
}

/* The chunk map (layout.h dc_layout_chunk_map) of this node's plan: the
 * chunks it broadcasts, and on the coordinator what each receiver needs. */
dc_status_t dc_node_chunk_map(dc_node_t *n)
{
    const dc_layout_t *l = n->layout;
    uint32_t nch = l->nchunks, S = dc_topo_shard_count(n->cfg->topo);
    if (S == 0)
        S = 1;
    free(n->plan.chunk_shard);
    free(n->plan.chunk_stream);
    free(n->plan.chunk_src);
    free(n->enc.bcast);
    n->plan.chunk_shard = calloc(nch ? nch : 1, 1);
    n->plan.chunk_stream = calloc(nch ? nch : 1, sizeof(uint32_t));
    n->plan.chunk_src = calloc(nch ? nch : 1, sizeof(uint32_t));
    n->enc.bcast = calloc(nch ? nch : 1, sizeof(uint32_t));
    if (!n->plan.chunk_shard || !n->plan.chunk_stream || !n->plan.chunk_src || !n->enc.bcast)
        return dc_error(DC_ERR_NOMEM, "node: out of memory");
    dc_layout_chunk_map(l, n->plan.tree, S, n->plan.chunk_shard, n->plan.chunk_stream,
                        n->plan.chunk_src);
    n->enc.nbcast = 0;
    for (uint32_t c = 0; c < nch; c++)
        if (n->is_sender && n->plan.chunk_src[c] == n->me)
            n->enc.bcast[n->enc.nbcast++] = c;
    if (n->is_root) {
        uint32_t per_shard[DC_TOPO_MAX_SHARDS] = {0};
        for (uint32_t c = 0; c < nch; c++)
            per_shard[n->plan.chunk_shard[c]]++;
        for (uint32_t i = 0; i < n->nnodes; i++) {
            dc_topo_node_info_t info;
            memset(&info, 0, sizeof(info));
            info.size = sizeof(info);
            n->coord.rneed[i] = 0;
            n->coord.nneed[i] = 0;
            if (i == 0 || dc_topo_node(n->cfg->topo, i, &info) != DC_OK ||
                info.role != DC_TOPO_ROLE_RECEIVER)
                continue;
            n->coord.rneed[i] = info.shards;
            for (uint32_t sh = 0; sh < DC_TOPO_MAX_SHARDS; sh++)
                if (info.shards >> sh & 1)
                    n->coord.nneed[i] += per_shard[sh];
            if (!n->coord.nneed[i])
                n->coord.rneed[i] = 0; /* needs nothing of this checkpoint */
        }
    }
    return DC_OK;
}

/* Run the loop until pred() or the deadline; returns 1 when pred held. */
int dc_node_run_until(dc_node_t *n, dc_pred_fn pred, uint64_t deadline_ns)
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

/* Step the loop until the job ends (BYE, failure, or `each`, called after
 * every step, says so); after BYE, flush what is still queued to the
 * children for up to 3 s. */
void dc_node_serve(dc_node_t *n, int step_ms, int (*each)(dc_node_t *n))
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
    if (n->rx.fail_sent) {
        /* a FAIL must reach the root: read on (closing with unread bytes
         * resets the link, and the parent may lose the FAIL with them)
         * until the root's ABORT or BYE says it arrived, 5 s at most */
        uint64_t dl = dc_now_ns() + 5000000000ull;
        while (!n->rx.fail_heard && dc_now_ns() < dl)
            dc_node_step(n, 5);
    }
}

/* The weights' memory is what the caller says: CUDA memory needs the
 * kernels and a GPU; host segments must not be device pointers (the CPU
 * would fault on them). */
static dc_status_t dc_node_check_mem(const dc_node_t *n)
{
    const dc_node_cfg_t *cfg = n->cfg;
    if (cfg->cuda_mem) {
        /* the kern_cuda.h table decides (a build without nvcc says so in
         * dc_kern_cuda_why(); tests install an emulated runtime) */
        if (!dc_kern_cuda_available())
            return dc_error(DC_ERR_UNSUPPORTED,
                            "node %u: weights in CUDA device memory, but no usable GPU here: %s",
                            n->me, dc_kern_cuda_why());
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
    dc_env_check(); /* library users too: a DELTACAST_* typo is said once */
    dc_node_t *n = calloc(1, sizeof(*n));
    if (!n)
        return dc_error(DC_ERR_NOMEM, "node: out of memory");
    dc_status_t st;
    n->cfg = cfg;
    n->me = cfg->rank;
    n->enc.evfd = -1;
    n->enc.base_fd = n->enc.next_fd = -1;
    n->rx.crash_at = -1;
    {
        const char *ca = dc_config_get("engine_crash_at");
        if (ca && *ca)
            n->rx.crash_at = strtoll(ca, NULL, 10);
        const char *rc = dc_config_get("engine_root_crash");
        if (rc && strncmp(rc, "frames=", 7) == 0)
            n->coord.crash_frames = strtoull(rc + 7, NULL, 10);
        else if (rc && strncmp(rc, "commit=", 7) == 0)
            n->coord.crash_commit = strtoull(rc + 7, NULL, 10);
        const char *tr = dc_config_get("engine_trace");
        char tp[PATH_MAX];
        if (tr && *tr && snprintf(tp, sizeof(tp), "%s/trace.%u", tr, n->me) < (int)sizeof(tp))
            n->trace = fopen(tp, "w");
        if (tr && *tr && !n->trace)
            DC_LOG_WARN("node %u: DELTACAST_ENGINE_TRACE: cannot write %s/trace.%u: %s", n->me, tr,
                        n->me, strerror(errno));
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
    n->is_sender = info.role == DC_TOPO_ROLE_SENDER;
    n->rx.need_mask = n->is_sender ? 0 : info.shards;
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
    /* and its parents: `--state st/%r` on a fresh machine.  A receiver
     * that cannot create it tells the root once it can dial (early.c). */
    dc_status_t early = DC_OK;
    char early_why[DC_FAIL_TEXT_MAX + 1] = "";
    if ((st = dc_mkdirs(cfg->state_dir)) != DC_OK) {
        dc_error_prefix("node %u: state directory", n->me);
        if (n->is_sender)
            goto out;
        early = st;
        snprintf(early_why, sizeof(early_why), "%s", dc_last_error());
    }
    if ((st = dc_node_chunk_size(cfg->chunk_size, &n->chunk_size)) != DC_OK)
        goto out;
    if ((st = dc_config_get_size("inflight_bytes", &n->inflight_max)) != DC_OK)
        goto out;
    n->net.rx_cap = DC_MSG_HDR_SIZE + DC_FRAME_HEADER_SIZE + dc_codec_payload_bound(n->chunk_size) +
                4096;
    if (n->inflight_max < 4 * n->net.rx_cap)
        n->inflight_max = 4 * n->net.rx_cap;
    n->net.rx_post_parent = (unsigned)DC_MIN((uint64_t)DC_NRX, n->inflight_max / n->net.rx_cap);
    if (n->net.rx_post_parent < DC_NRX_CHILD)
        n->net.rx_post_parent = DC_NRX_CHILD;
    uint64_t tmo = 0;
    if ((st = dc_config_get_ms("timeout_ms", &tmo)) != DC_OK)
        goto out;
    if (tmo == 0 || tmo > 86400000) {
        st = dc_error(DC_ERR_INVALID, "config timeout_ms=%llu: 1 .. 86400000 (a day)",
                      (unsigned long long)tmo);
        goto out;
    }
    n->timeout_ms = (uint32_t)tmo;
    n->abort_ms = cfg->abort_ms ? cfg->abort_ms : 4 * n->timeout_ms;
    n->plan.dead = calloc(n->nnodes, 1);
    n->net.route = calloc(n->nnodes, sizeof(*n->net.route));
    n->net.known = calloc(n->nnodes, sizeof(*n->net.known));
    n->net.retry_ns = calloc(n->nnodes, sizeof(uint64_t));
    if (!n->plan.dead || !n->net.route || !n->net.known || !n->net.retry_ns) {
        st = dc_error(DC_ERR_NOMEM, "node: out of memory");
        goto out;
    }
    if ((st = dc_attach_plan(n)) != DC_OK)
        goto out;
    char why[256];
    if ((st = dc_verbs_select(cfg->transport, &n->net.t, why, sizeof(why))) != DC_OK)
        goto out;
    dc_verbs_opts_init(&n->net.vopts);
    if (!info.addr || !*info.addr) {
        st = dc_error(DC_ERR_INVALID, "node %u has no address in the topology", n->me);
        goto out;
    }
    if (strcmp(n->net.t->name, "tcp") != 0) {
        if ((st = dc_verbs_find("tcp", &n->net.tw)) != DC_OK)
            goto out;
        if ((st = n->net.tw->listen(&n->net.vopts, info.addr, &n->net.lisw)) != DC_OK) {
            dc_error_prefix("node %u: listen (tcp, between regions) on %s", n->me, info.addr);
            goto out;
        }
        char lan[300];
        if ((st = dc_attach_lan_addr(n->net.t, info.addr, lan, sizeof(lan))) != DC_OK)
            goto out;
        if ((st = n->net.t->listen(&n->net.vopts, lan, &n->net.lis)) != DC_OK) {
            dc_error_prefix("node %u: listen (%s, inside the region) on %s", n->me, n->net.t->name,
                            lan);
            goto out;
        }
        DC_LOG_INFO("node %u: %s inside the region at %s, tcp between regions at %s", n->me,
                    n->net.t->name, lan, info.addr);
    } else if ((st = n->net.t->listen(&n->net.vopts, info.addr, &n->net.lis)) != DC_OK) {
        dc_error_prefix("node %u: listen on %s", n->me, info.addr);
        goto out;
    }
    n->coord.progress_line = cfg->progress;
    if (n->is_root) {
        n->enc.mode = cfg->dense ? DC_MODE_DENSE : DC_MODE_DELTA;
        st = dc_coord_run(n);
    } else if (n->is_sender) {
        st = dc_sender_run(n);
    } else if (early != DC_OK) {
        st = dc_error(early, "%s", early_why);
        dc_early_fail(n);
    } else {
        /* a receiver that fails before it serves (its weights file
         * missing, too small, on a full disk) says why to the root */
        st = dc_rx_run(n);
        if (st != DC_OK && !n->rx.serving && dc_last_status() != DC_ERR_NOMEM)
            dc_early_fail(n);
    }

out:
    if (st != DC_OK && dc_last_status() == DC_OK)
        dc_error(st, "node %u failed", n->me);
    {
        dc_status_t keep = dc_last_status();
        char msg[512];
        snprintf(msg, sizeof(msg), "%s", dc_last_error());
        for (size_t i = 0; i < n->net.npeers; i++)
            dc_peer_free(n, n->net.peers[i]);
        free(n->net.peers);
        dc_nbuf_unref(n, n->begin_msg);
        dc_enc_free(n);
        while (n->net.pool) {
            dc_nbuf_t *b = n->net.pool;
            n->net.pool = b->next;
            free(b->data);
            free(b);
        }
        if (n->net.lis)
            n->net.t->listen_close(n->net.lis);
        if (n->net.lisw)
            n->net.tw->listen_close(n->net.lisw);
        dc_rx_free(n);
        free(n->scratch);
        dc_mem_free(n);
        dc_coord_free(n);
        dc_layout_free(n->layout);
        dc_tree_free(n->plan.tree);
        free(n->plan.dead);
        free(n->plan.spar);
        free(n->plan.chunk_shard);
        free(n->plan.chunk_stream);
        free(n->plan.chunk_src);
        free(n->net.route);
        if (n->net.known)
            for (uint32_t i = 0; i < n->nnodes; i++)
                dc_nbuf_unref(n, n->net.known[i]);
        free(n->net.known);
        free(n->net.retry_ns);
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
    dc_tree_opts_t o;
    dc_tree_opts_engine(&o);
    o.chunk_bytes = l->chunk_size;
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
