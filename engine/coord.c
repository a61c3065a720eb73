/* coord.c - the coordinator, node 0 (n->coord): waits for every receiver
 * and the other senders to join, begins each version (BEGIN), counts acks
 * per receiver and chunk, answers NEEDs, re-joins (STATE) and stalls with
 * repairs (queued to encoder.c, or to the owner of a memory chunk), aborts
 * a version when a receiver is silent for abort_ms; when every receiver
 * acked every chunk it needs it writes the commit record (compare-and-set)
 * and sends COMMIT, then collects the DONEs (stats).  At start and end it
 * asks receivers to confirm they hold the committed version.
 *
 * Upward messages come from node.c's dispatcher (dc_coord_handle_up); it
 * sends down through peer.c; its own chunks are encoded by encoder.c.
 */
#include "engine/node_internal.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

static uint32_t dc_coord_nrecv(const dc_node_t *n)
{
    uint32_t k = 0;
    for (uint32_t i = 1; i < n->nnodes; i++)
        k += n->coord.rneed[i] != 0;
    return k;
}

/* Node i (not the coordinator) is where the coordinator needs it: a
 * receiver that needs chunks has joined, another sender's control link is
 * up; a node needing nothing is never waited for. */
static int dc_coord_node_joined(const dc_node_t *n, uint32_t i)
{
    return n->coord.rneed[i] ? n->coord.joined[i]
                             : !dc_node_role_sender(n, i) || n->coord.sjoined[i];
}

/* Every receiver joined and every other sender's control link is up. */
static int dc_coord_all_joined(const dc_node_t *n)
{
    for (uint32_t i = 1; i < n->nnodes; i++)
        if (!dc_coord_node_joined(n, i))
            return 0;
    return 1;
}

/* The coordinator's live control link to sender s (NULL: none). */
dc_peer_t *dc_coord_ctl_peer(dc_node_t *n, uint32_t s)
{
    for (size_t i = 0; i < n->net.npeers; i++)
        if (n->net.peers[i]->ctl && n->net.peers[i]->node == s && !n->net.peers[i]->dead)
            return n->net.peers[i];
    return NULL;
}

static void dc_coord_mark_acked(dc_node_t *n, uint32_t node, uint32_t c, uint32_t count)
{
    uint32_t nch = n->layout->nchunks;
    if (node == 0 || node >= n->nnodes || !n->coord.rneed[node])
        return;
    if (count == 0 || c >= nch)
        return;
    uint32_t end = c + count > nch ? nch : c + count;
    for (uint32_t k = c; k < end; k++) {
        if (!((n->coord.rneed[node] >> n->plan.chunk_shard[k]) & 1))
            continue; /* not one of its shards */
        uint8_t *a = &n->coord.acked[(size_t)node * nch + k];
        if (!*a) {
            *a = 1;
            n->coord.nacked[node]++;
            n->coord.last_progress[node] = dc_now_ns();
        }
        n->coord.needq[(size_t)node * nch + k] = 0;
    }
}

static int dc_coord_all_acked(const dc_node_t *n)
{
    for (uint32_t i = 1; i < n->nnodes; i++)
        if (n->coord.nacked[i] < n->coord.nneed[i])
            return 0;
    return 1;
}

/* Node i needs chunk c (coordinator's view). */
static int dc_coord_needs(const dc_node_t *n, uint32_t i, uint32_t c)
{
    return (n->coord.rneed[i] >> n->plan.chunk_shard[c]) & 1;
}

/* Chunk c of the version in flight has been broadcast by its sender (as
 * far as the coordinator knows: its own, or a sender that reported SENT). */
static int dc_coord_was_sent(const dc_node_t *n, uint32_t c)
{
    uint32_t src = n->plan.chunk_src[c];
    if (src == n->me)
        return n->enc.sentc[c];
    return src < n->nnodes && n->coord.ssent[src];
}

/* The chunks node x needs (coordinator's view), for dc_journal_content(). */
typedef struct dc_needs_arg {
    const dc_node_t *n;
    uint32_t x;
} dc_needs_arg_t;

static int dc_coord_needs_fn(const void *arg, uint64_t c)
{
    const dc_needs_arg_t *a = arg;
    return c < a->n->layout->nchunks && dc_coord_needs(a->n, a->x, (uint32_t)c);
}

/* COMMIT of the coordinator's committed version addressed to node x, with
 * the content hash of that version over the chunks x needs (when the
 * target digests are known), so that x commits it from a complete journal
 * only if the journal holds that content. */
static void dc_coord_send_confirm(dc_node_t *n, uint32_t x, uint64_t base)
{
    dc_commit_msg_t cm = {.ckpt = n->coord.ckpt};
    if (n->coord.digests_ok) {
        dc_needs_arg_t a = {n, x};
        cm.content = dc_journal_content(NULL, n->enc.digests, n->layout->nchunks,
                                        dc_coord_needs_fn, &a);
    }
    uint8_t buf[DC_MSG_HDR_SIZE + DC_COMMIT_BODY];
    dc_commit_msg_pack(n->coord.committed, base < n->coord.committed ? base : 0, x, &cm, buf);
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
void dc_coord_state(dc_node_t *n, const dc_hello_t *h)
{
    uint32_t x = h->node;
    if (x == 0 || x >= n->nnodes || !n->coord.rneed[x])
        return;
    n->coord.joined[x] = 1;
    n->coord.hello_committed[x] = h->committed;
    n->coord.last_seen[x] = n->coord.last_progress[x] = dc_now_ns();
    if (!n->enc.in_flight) {
        if (h->committed < n->coord.committed && (h->flags & DC_HELLO_F_JOURNAL) &&
            h->j_target == n->coord.committed && n->coord.committed)
            dc_coord_send_confirm(n, x, h->j_baseline);
        else if ((h->flags & DC_HELLO_F_JOURNAL) && n->coord.aborted_v &&
                 h->j_target == n->coord.aborted_v)
            /* it (re)joined after this run aborted that version (its parent
             * was the node that failed): the ABORT it missed, now */
            dc_send_down_simple(n, DC_MSG_ABORT, h->j_target, h->j_baseline, x);
        return;
    }
    uint32_t nch = n->layout->nchunks;
    int journal = (h->flags & DC_HELLO_F_JOURNAL) && h->j_target == n->enc.vnum &&
                  h->nstates == nch;
    int dense = (h->flags & DC_HELLO_F_DENSE_NEEDED) != 0;
    int on_base = h->committed == n->enc.vbase && !dense;
    int ahead = h->committed > n->enc.vbase && !dense; /* it checks each chunk's digest */
    for (uint32_t c = 0; c < nch; c++) {
        if (!dc_coord_needs(n, x, c) || !dc_coord_was_sent(n, c))
            continue; /* the rest comes with the broadcast */
        if (n->coord.acked[(size_t)x * nch + c])
            continue;
        int s = journal ? h->states[c] : DC_JSTATE_PENDING;
        if (n->enc.mode == DC_MODE_DENSE) {
            dc_enc_queue(n, c, x, 1);
        } else if ((on_base && s == DC_JSTATE_PENDING) || s == DC_JSTATE_APPLIED ||
                   (ahead && s == DC_JSTATE_PENDING)) {
            dc_enc_queue(n, c, x, 0);
        } else if (!n->coord.needq[(size_t)x * nch + c]) {
            /* half applied, or not the baseline's bytes: an overwrite (the
             * node's own NEED, if it got through before its HELLO, is not
             * answered twice) */
            n->coord.needq[(size_t)x * nch + c] = 1;
            dc_enc_queue(n, c, x, 1);
        }
    }
    /* chunks of senders still broadcasting may have passed it by while it
     * was (re)attaching: what it still lacks of them when they say SENT */
    for (uint32_t i = 1; i < n->nnodes; i++)
        if (n->coord.sjoined[i] && !n->coord.ssent[i])
            n->coord.resync[x] = 1;
}

static void dc_coord_begin(dc_node_t *n, uint64_t v)
{
    n->enc.vnum = v;
    n->enc.vbase = v - 1;
    uint32_t nch = n->layout->nchunks;
    memset(n->coord.acked, 0, (size_t)n->nnodes * nch);
    memset(n->coord.needq, 0, (size_t)n->nnodes * nch);
    memset(n->coord.nacked, 0, n->nnodes * sizeof(*n->coord.nacked));
    memset(n->coord.vdone, 0, n->nnodes);
    memset(n->coord.hold_since, 0, n->nnodes * sizeof(*n->coord.hold_since));
    memset(n->enc.sentc, 0, nch ? nch : 1);
    memset(n->coord.ssent, 0, n->nnodes);
    memset(n->coord.resync, 0, n->nnodes);
    pthread_mutex_lock(&n->mu);
    memset(n->enc.dknown, 0, nch ? nch : 1);
    pthread_mutex_unlock(&n->mu);
    uint64_t now = dc_now_ns();
    for (uint32_t i = 0; i < n->nnodes; i++)
        n->coord.last_seen[i] = n->coord.last_progress[i] = now;
    n->enc.sent = 0;
    n->coord.other_payload = n->coord.other_frames = 0;
    n->enc.payload_bytes = n->enc.repair_bytes = n->enc.repairs = n->enc.overwrites_sent = 0;
    n->enc.ns = n->enc.first_ns = n->enc.last_ns = 0;
    n->coord.t_begin = now;
    dc_trace(n, "begin", NULL, 0);
    n->coord.t_first_frame = n->coord.t_all_sent = n->coord.t_all_acked = 0;
    for (uint32_t i = 0; i < n->nnodes; i++) {
        n->coord.rx_apply_ns[i] = n->coord.rx_bytes[i] = 0;
        n->coord.rx_nlinks[i] = 0;
    }
    dc_begin_t bg = {.version = v, .baseline = v - 1, .layout_id = n->layout->id,
                     .nchunks = nch, .mode = n->enc.mode, .base_ckpt = n->coord.ckpt};
    n->coord.digests_ok = 0; /* enc.digests[] fill with v's from here on */
    dc_nbuf_t *b = dc_nbuf_new(n, DC_BEGIN_SIZE, 0, 0);
    if (b) {
        dc_begin_pack(&bg, b->data);
        b->len = DC_BEGIN_SIZE;
        dc_send_down(n, b, DC_NODE_ALL, DC_STREAM_ANY);
        dc_nbuf_unref(n, n->begin_msg); /* replayed to children attaching later */
        n->begin_msg = b;
    }
    n->enc.in_flight = 1;
    pthread_mutex_lock(&n->mu);
    n->enc.cursor = 0;
    n->enc.total = n->enc.nbcast;
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
    /* receivers known to be off the baseline get overwrites right away via
     * their own NEED after BEGIN. */
}

/* The coordinator: a SENT of another sender (its chunks' target digests). */
static void dc_coord_sent(dc_node_t *n, const dc_msg_t *m)
{
    dc_sent_t sm;
    if (dc_sent_parse(m, &sm) != DC_OK) {
        DC_LOG_WARN("coordinator: dropping a bad SENT: %s", dc_last_error());
        return;
    }
    uint32_t s = sm.node;
    if (!n->enc.in_flight || sm.version != n->enc.vnum || s == 0 || s >= n->nnodes)
        return;
    uint32_t nch = n->layout->nchunks;
    pthread_mutex_lock(&n->mu);
    for (uint32_t e = 0; e < sm.n; e++) {
        uint32_t c;
        dc_digest_t d;
        dc_sent_entry(&sm, e, &c, &d);
        if (c >= nch || n->plan.chunk_src[c] != s)
            continue; /* not its chunk: ignored */
        n->enc.digests[c] = d;
        n->enc.dknown[c] = 1;
    }
    pthread_mutex_unlock(&n->mu);
    if (!n->coord.ssent[s]) {
        n->coord.other_frames += sm.n;
        if (sm.last)
            n->coord.other_payload += sm.payload_bytes;
    }
    if (sm.last && !n->coord.ssent[s]) {
        n->coord.ssent[s] = 1;
        for (uint32_t x = 1; x < n->nnodes; x++) {
            if (!n->coord.resync[x])
                continue;
            uint32_t q = 0;
            for (uint32_t c = 0; c < nch; c++) {
                if (n->plan.chunk_src[c] == s && dc_coord_needs(n, x, c) &&
                    !n->coord.acked[(size_t)x * nch + c]) {
                    dc_enc_queue(n, c, x, n->enc.mode == DC_MODE_DENSE);
                    q++;
                }
            }
            if (q)
                DC_LOG_INFO("coordinator: node %u re-joined while sender %u was sending: "
                            "re-sending %u of its chunks", x, s, q);
        }
    }
}

/* "node 2 (host, 10.0.0.2:7000)" into out: the topology's name and address
 * of node i. */
static const char *dc_coord_node_desc(const dc_node_t *n, uint32_t i, char *out, size_t len)
{
    dc_topo_node_info_t info;
    memset(&info, 0, sizeof(info));
    info.size = sizeof(info);
    if (dc_topo_node(n->cfg->topo, i, &info) == DC_OK && info.name)
        snprintf(out, len, "node %u (%s%s%s)", i, info.name,
                 info.addr && info.addr[0] ? ", " : "", info.addr ? info.addr : "");
    else
        snprintf(out, len, "node %u", i);
    return out;
}

/* The first tensor where the root's layout and a FAIL's entries differ,
 * in words, into out. */
static void dc_coord_layout_diff(const dc_node_t *n, const dc_fail_t *f, char *out, size_t len)
{
    const dc_layout_t *l = n->layout;
    if (f->chunk_size != l->chunk_size) {
        snprintf(out, len, "chunk size %llu bytes, the root's is %llu",
                 (unsigned long long)f->chunk_size, (unsigned long long)l->chunk_size);
        return;
    }
    uint32_t k = DC_MIN(f->n, l->ntensors);
    for (uint32_t i = 0; i <= k; i++) {
        if (i == k) {
            if (f->ntensors == l->ntensors) {
                snprintf(out, len, "%u tensors as the root, the same first %u (the rest "
                         "differ)", f->ntensors, f->n);
            } else if (i < l->ntensors) {
                const dc_layout_tensor_t *t = &l->tensors[i];
                snprintf(out, len, "%u tensors, the root %u: the first the node lacks is "
                         "tensor %u '%s' %s [%llu elements, %llu bytes]", f->ntensors,
                         l->ntensors, i, t->name, dc_dtype_name(t->dtype),
                         (unsigned long long)t->nelems, (unsigned long long)t->nbytes);
            } else {
                snprintf(out, len, "%u tensors, the root %u: the node has more", f->ntensors,
                         l->ntensors);
            }
            return;
        }
        uint64_t h, ne;
        uint32_t dt;
        dc_fail_entry(f, i, &h, &ne, &dt);
        const dc_layout_tensor_t *t = &l->tensors[i];
        int same_name = h == XXH3_64bits(t->name, strlen(t->name));
        if (same_name && ne == t->nelems && dt == (uint32_t)t->dtype)
            continue;
        const char *dn = dt <= 255 ? dc_dtype_name((dc_dtype_t)dt) : NULL;
        snprintf(out, len, "first differing tensor %u: the root has '%s' %s [%llu elements, "
                 "%llu bytes], the node %s, %s [%llu elements]",
                 i, t->name, dc_dtype_name(t->dtype), (unsigned long long)t->nelems,
                 (unsigned long long)t->nbytes,
                 same_name ? "has the same name" : "another name",
                 dn && dn[0] ? dn : "an unknown dtype", (unsigned long long)ne);
        return;
    }
}

/* A receiver's FAIL: it stopped and cannot take version f.version.  The
 * first one fails the version in flight (dc_coord_version) and the job
 * with its words. */
static void dc_coord_fail(dc_node_t *n, const dc_msg_t *m)
{
    dc_fail_t f;
    if (dc_fail_parse(m, &f) != DC_OK) {
        DC_LOG_WARN("coordinator: dropping a bad FAIL: %s", dc_last_error());
        return;
    }
    char who[320], text[DC_FAIL_TEXT_MAX + 1], detail[768] = "";
    dc_coord_node_desc(n, f.node, who, sizeof(who));
    dc_fail_text(&f, text, sizeof(text));
    if (f.code == DC_FAIL_LAYOUT && n->layout)
        dc_coord_layout_diff(n, &f, detail, sizeof(detail));
    if (f.code == DC_FAIL_START)
        DC_LOG_ERROR("coordinator: %s could not start: %s", who, text);
    else
        DC_LOG_ERROR("coordinator: %s cannot take version %llu (%s)%s%s: %s", who,
                     (unsigned long long)f.version, dc_fail_code_name(f.code),
                     detail[0] ? ": " : "", detail, text);
    if (n->coord.fail_node != UINT32_MAX)
        return;
    n->coord.fail_node = f.node;
    n->coord.fail_st = f.code == DC_FAIL_LAYOUT || f.code == DC_FAIL_VERSION ? DC_ERR_INVALID
                                                                            : DC_ERR_IO;
    snprintf(n->coord.fail_why, sizeof(n->coord.fail_why), "%s: %s%s%s (it says: %s)", who,
             dc_fail_code_name(f.code), detail[0] ? ": " : "", detail, text);
}

/* An upward message from a child, after the dispatcher (node.c
 * dc_node_handle) learnt its route: another sender's SENT, or a
 * receiver's STATE, ACK, NEED, DONE. */
void dc_coord_handle_up(dc_node_t *n, dc_peer_t *from, const dc_msg_t *m)
{
    if (m->node >= n->nnodes || m->node == 0)
        return;
    if (m->type == DC_MSG_SENT) {
        /* a sender's SENT comes up its own control link, never forwarded:
         * from any other link it would mark that sender's chunks sent and
         * set their digests (the commit record's checkpoint digest) */
        if (!from->ctl || from->node != m->node) {
            DC_LOG_WARN("node %u: dropping a SENT of node %u from node %u: not its control "
                        "link", n->me, m->node, from->node);
            return;
        }
        dc_coord_sent(n, m);
        return;
    }
    if (!n->coord.rneed[m->node])
        return; /* everything else is about receivers */
    n->coord.last_seen[m->node] = dc_now_ns();
    switch (m->type) {
    case DC_MSG_STATE: {
        dc_hello_t h;
        if (dc_hello_parse(m, &h) == DC_OK)
            dc_coord_state(n, &h);
        break;
    }
    case DC_MSG_ACK:
        if (!n->enc.in_flight || m->version != n->enc.vnum)
            break;
        if ((m->flags & DC_ACK_F_HOLDING) && m->count == 0) {
            /* alive, holding the version staged for its caller: not silent */
            if (!n->coord.hold_since[m->node]) {
                n->coord.hold_since[m->node] = dc_now_ns();
                DC_LOG_INFO("root: receiver %u holds version %llu staged (not applied) until "
                            "its caller releases it; waiting up to hold_timeout_ms=%llu",
                            m->node, (unsigned long long)m->version,
                            (unsigned long long)n->coord.hold_timeout_ms);
            }
            break;
        }
        if (m->count && n->coord.hold_since[m->node]) {
            DC_LOG_INFO("root: receiver %u released version %llu", m->node,
                        (unsigned long long)m->version);
            n->coord.hold_since[m->node] = 0;
        }
        dc_coord_mark_acked(n, m->node, m->chunk, m->count);
        break;
    case DC_MSG_NEED:
        if (n->enc.in_flight && m->version == n->enc.vnum) {
            uint32_t nch = n->layout->nchunks;
            for (uint32_t c = m->chunk; c < nch && c < m->chunk + m->count; c++) {
                uint8_t *q = &n->coord.needq[(size_t)m->node * nch + c];
                if (!*q && !n->coord.acked[(size_t)m->node * nch + c] &&
                    dc_coord_needs(n, m->node, c)) {
                    *q = 1;
                    dc_enc_queue(n, c, m->node, 1);
                }
            }
        }
        break;
    case DC_MSG_FAIL:
        dc_coord_fail(n, m);
        break;
    case DC_MSG_DONE: {
        dc_done_t d;
        if (dc_done_parse(m, &d) != DC_OK) {
            DC_LOG_WARN("coordinator: dropping a bad DONE: %s", dc_last_error());
            break;
        }
        if (m->version == n->enc.vnum || m->version == n->coord.confirm_v) {
            if (m->version == n->coord.committed && !n->enc.in_flight) {
                n->coord.confirmed[m->node] =
                    !(m->flags & (DC_DONE_F_DENSE | DC_DONE_F_FAILED | DC_DONE_F_NOT_HELD));
                if ((m->flags & DC_DONE_F_FAILED) && !(n->coord.dflags[m->node] & DC_DONE_F_FAILED))
                    DC_LOG_ERROR("coordinator: receiver %u could not commit version %llu "
                                 "locally (its log says why)", m->node,
                                 (unsigned long long)m->version);
            }
            n->coord.dflags[m->node] = m->flags;
            n->coord.vdone[m->node] = 1;
            n->coord.rx_apply_ns[m->node] = d.apply_ns;
            n->coord.rx_bytes[m->node] = d.bytes;
            n->coord.rx_parent[m->node] = d.up_parent;
            for (uint32_t k = 0; k < d.nlinks; k++) {
                n->coord.rx_lpar[(size_t)m->node * DC_MAX_LINKS + k] = d.link_parent[k];
                n->coord.rx_lbytes[(size_t)m->node * DC_MAX_LINKS + k] = d.link_bytes[k];
            }
            n->coord.rx_nlinks[m->node] = d.nlinks;
        }
        break;
    }
    default:
        break;
    }
}

static void dc_coord_progress_line(dc_node_t *n, int final)
{
    if (!n->cfg->progress)
        return;
    uint64_t tot = 0;
    for (uint32_t i = 1; i < n->nnodes; i++)
        tot += n->coord.nacked[i];
    uint64_t want = 0;
    for (uint32_t i = 1; i < n->nnodes; i++)
        want += n->coord.nneed[i];
    char pb[32];
    fprintf(stderr, "\r  v%llu  %-5s  sent %4u/%u chunks  %10s  applied %5.1f%%  %6.2f s%s",
            (unsigned long long)n->enc.vnum, n->enc.mode == DC_MODE_DENSE ? "dense" : "delta",
            n->enc.sent, n->layout->nchunks, dc_fmt_bytes(n->enc.payload_bytes, pb, sizeof(pb)),
            want ? 100.0 * (double)tot / (double)want : 100.0,
            (double)(dc_now_ns() - n->coord.t_begin) / 1e9, final ? "\n" : "");
    fflush(stderr);
}

/* The coordinator's per-node and per-(node, chunk) state, plus
 * dc_enc_alloc(). */
static dc_status_t dc_coord_alloc(dc_node_t *n)
{
    n->coord.fail_node = UINT32_MAX;
    uint32_t nch = n->layout->nchunks;
    size_t nn = n->nnodes;
    dc_status_t st = dc_enc_alloc(n);
    if (st != DC_OK)
        return st;
    n->coord.acked = calloc(nn * (nch ? nch : 1), 1);
    n->coord.needq = calloc(nn * (nch ? nch : 1), 1);
    n->coord.nacked = calloc(nn, sizeof(*n->coord.nacked));
    n->coord.joined = calloc(nn, 1);
    n->coord.vdone = calloc(nn, 1);
    n->coord.last_seen = calloc(nn, sizeof(uint64_t));
    n->coord.last_progress = calloc(nn, sizeof(uint64_t));
    n->coord.hold_since = calloc(nn, sizeof(uint64_t));
    n->coord.hello_committed = calloc(nn, sizeof(uint64_t));
    n->coord.rx_apply_ns = calloc(nn, sizeof(uint64_t));
    n->coord.rx_bytes = calloc(nn, sizeof(uint64_t));
    n->coord.rx_parent = calloc(nn, sizeof(uint32_t));
    n->coord.rneed = calloc(nn, sizeof(uint64_t));
    n->coord.nneed = calloc(nn, sizeof(uint32_t));
    n->coord.sjoined = calloc(nn, 1);
    n->coord.ssent = calloc(nn, 1);
    n->coord.resync = calloc(nn, 1);
    n->coord.rx_nlinks = calloc(nn, sizeof(uint32_t));
    n->coord.rx_lpar = calloc(nn * DC_MAX_LINKS, sizeof(uint32_t));
    n->coord.rx_lbytes = calloc(nn * DC_MAX_LINKS, sizeof(uint64_t));
    n->coord.confirmed = calloc(nn, 1);
    n->coord.dflags = calloc(nn, 1);
    if (!n->coord.rx_nlinks || !n->coord.rx_lpar || !n->coord.rx_lbytes || !n->coord.resync ||
        !n->coord.confirmed || !n->coord.dflags || !n->coord.hold_since)
        return dc_error(DC_ERR_NOMEM, "root: out of memory");
    dc_status_t hst = dc_config_get_ms("hold_timeout_ms", &n->coord.hold_timeout_ms);
    if (hst != DC_OK)
        return hst;
    if (n->coord.hold_timeout_ms == 0 || n->coord.hold_timeout_ms > 86400000)
        return dc_error(DC_ERR_INVALID, "config hold_timeout_ms=%llu: 1 .. 86400000 (a day)",
                        (unsigned long long)n->coord.hold_timeout_ms);
    if (!n->coord.acked || !n->coord.needq || !n->coord.nacked || !n->coord.joined ||
        !n->coord.vdone || !n->coord.last_seen || !n->coord.last_progress ||
        !n->coord.hello_committed || !n->coord.rx_apply_ns || !n->coord.rx_bytes ||
        !n->coord.rx_parent || !n->coord.rneed || !n->coord.nneed || !n->coord.sjoined ||
        !n->coord.ssent)
        return dc_error(DC_ERR_NOMEM, "root: out of memory");
    return DC_OK;
}

void dc_coord_free(dc_node_t *n)
{
    free(n->coord.confirmed);
    free(n->coord.dflags);
    free(n->coord.acked);
    free(n->coord.needq);
    free(n->coord.nacked);
    free(n->coord.joined);
    free(n->coord.vdone);
    free(n->coord.last_seen);
    free(n->coord.last_progress);
    free(n->coord.hold_since);
    free(n->coord.hello_committed);
    free(n->coord.rx_apply_ns);
    free(n->coord.rx_bytes);
    free(n->coord.rx_parent);
    free(n->coord.rneed);
    free(n->coord.nneed);
    free(n->coord.sjoined);
    free(n->coord.ssent);
    free(n->coord.resync);
    free(n->coord.rx_nlinks);
    free(n->coord.rx_lpar);
    free(n->coord.rx_lbytes);
}

/* The encryption of a link as the config has it (tls, tls_cipher; the
 * links of other nodes are not the coordinator's to observe: each node
 * logs what its connections negotiated, "tcp: connection ... encryption"):
 * TLS on the edges between regions (always tcp) unless tls=off, inside a
 * region only with tls=on and the tcp transport. */
static const char *dc_coord_link_encryption(dc_node_t *n, int wan)
{
    const char *t = dc_config_get("tls");
    if (!t || strcmp(t, "off") == 0)
        return "none";
    if (!wan && (strcmp(t, "on") != 0 || strcmp(n->net.t->name, "tcp") != 0))
        return "none";
    const char *c = dc_config_get("tls_cipher");
    return c ? c : "none";
}

static json_t *dc_coord_version_json(dc_node_t *n, const dc_vstats_t *vs)
{
    json_t *o = json_object();
    json_object_set_new(o, "version", json_integer((json_int_t)vs->version));
    json_object_set_new(o, "committed", json_boolean(vs->committed));
    json_object_set_new(o, "mode", json_string(n->enc.mode == DC_MODE_DENSE ? "dense" : "delta"));
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
        if (!n->coord.rneed[i])
            continue; /* a sender */
        uint32_t nl = n->coord.rx_nlinks[i] ? n->coord.rx_nlinks[i] : 1;
        for (uint32_t k = 0; k < nl; k++) {
            uint32_t par = n->coord.rx_nlinks[i] ? n->coord.rx_lpar[(size_t)i * DC_MAX_LINKS + k]
                                           : n->coord.rx_parent[i];
            uint64_t bytes = n->coord.rx_nlinks[i]
                                 ? n->coord.rx_lbytes[(size_t)i * DC_MAX_LINKS + k]
                                 : n->coord.rx_bytes[i];
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
            json_object_set_new(lk, "encryption", json_string(dc_coord_link_encryption(n, wan)));
            json_object_set_new(lk, "bytes", json_integer((json_int_t)bytes));
            json_object_set_new(lk, "apply_seconds",
                                json_real((double)n->coord.rx_apply_ns[i] / 1e9));
            json_array_append_new(links, lk);
        }
    }
    json_object_set_new(o, "links", links);
    return o;
}

static dc_status_t dc_coord_write_stats(dc_node_t *n, json_t *versions)
{
    if (!n->cfg->stats_path)
        return DC_OK;
    json_t *root = json_object();
    json_object_set_new(root, "nodes", json_integer(n->nnodes));
    json_object_set_new(root, "chunks", json_integer(n->layout ? n->layout->nchunks : 0));
    json_object_set_new(root, "checkpoint_bytes",
                        json_integer(n->layout ? (json_int_t)n->layout->total_bytes : 0));
    json_object_set_new(root, "transport", json_string(n->net.t->name));
    json_object_set_new(root, "wan_transport",
                        json_string(n->net.tw ? n->net.tw->name : n->net.t->name));
    json_object_set_new(root, "versions", json_incref(versions));
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s.tmp", n->cfg->stats_path);
    errno = 0;
    int rc = json_dump_file(root, tmp, JSON_INDENT(2));
    json_decref(root);
    if (rc != 0) {
        int e = errno ? errno : EIO;
        unlink(tmp);
        return dc_error_errno(DC_ERR_IO, e, "%s: cannot write the stats", tmp);
    }
    if (rename(tmp, n->cfg->stats_path) != 0)
        return dc_error_errno(DC_ERR_IO, errno, "rename %s -> %s (the stats)", tmp,
                              n->cfg->stats_path);
    return DC_OK;
}

/* every receiver joined, or one said it could not start (early.c) */
static int dc_coord_pred_joined(dc_node_t *n)
{
    return dc_coord_all_joined(n) || n->coord.fail_node != UINT32_MAX;
}

static int dc_coord_pred_done(dc_node_t *n)
{
    for (uint32_t i = 1; i < n->nnodes; i++)
        if (n->coord.rneed[i] && !n->coord.vdone[i])
            return 0;
    return 1;
}

static dc_status_t dc_coord_version(dc_node_t *n, uint64_t v, dc_vstats_t *vs)
{
    dc_status_t st = dc_enc_open_version(n, v);
    if (st != DC_OK)
        return st;
    memset(vs, 0, sizeof(*vs));
    vs->version = v;
    dc_coord_begin(n, v);
    uint64_t last_line = 0;
    int aborted = 0;
    const char *lost = "a receiver";
    char held_by[128] = "";
    /* a receiver with no ack progress this long after everything was
     * delivered to the root's children gets its missing chunks again */
    uint64_t stall_ns = DC_MAX(DC_STALL_NS, 2ull * n->timeout_ms * 1000000ull);
    while (!n->finished) {
        dc_node_step(n, 5);
        uint64_t now = dc_now_ns();
        if (DC_UNLIKELY(n->coord.crash_ns) &&
            (!dc_node_tx_pending(n) || now - n->coord.crash_ns > 200000000ull)) {
            DC_LOG_WARN("root: DELTACAST_ENGINE_ROOT_CRASH: killing myself after %llu frames "
                        "of version %llu", (unsigned long long)n->enc.sent, (unsigned long long)v);
            raise(SIGKILL);
        }
        /* everything sent AND delivered to the children (their transport
         * acknowledged it): from then on, silence means something was lost */
        if (n->enc.sent == n->enc.total && !n->coord.t_all_sent && !dc_node_tx_pending(n)) {
            int all = 1; /* and every other sender said SENT */
            for (uint32_t i = 1; i < n->nnodes && all; i++)
                all = n->coord.ssent[i] || !n->coord.sjoined[i];
            if (all)
                n->coord.t_all_sent = now;
        }
        if (n->coord.progress_line && now - last_line > 200000000ull) {
            dc_coord_progress_line(n, 0);
            last_line = now;
        }
        if (dc_coord_all_acked(n)) {
            n->coord.t_all_acked = now;
            dc_trace(n, "acked", NULL, 0);
            break;
        }
        /* a receiver that said why it stopped: no waiting for its silence */
        if (n->coord.fail_node != UINT32_MAX) {
            DC_LOG_ERROR("root: aborting version %llu: %s", (unsigned long long)v,
                         n->coord.fail_why);
            aborted = 1;
            break;
        }
        /* stalls and lost receivers */
        for (uint32_t i = 1; i < n->nnodes; i++) {
            if (!n->coord.rneed[i] || n->coord.nacked[i] >= n->coord.nneed[i])
                continue;
            if (now - n->coord.last_seen[i] > (uint64_t)n->abort_ms * 1000000ull) {
                DC_LOG_ERROR("root: receiver %u silent for %u ms: aborting version %llu", i,
                             n->abort_ms, (unsigned long long)v);
                aborted = 1;
                break;
            }
            if (n->coord.hold_since[i]) {
                /* alive and holding: no stall re-sends, but a bound */
                uint64_t held = (now - n->coord.hold_since[i]) / 1000000ull;
                if (held > n->coord.hold_timeout_ms) {
                    snprintf(held_by, sizeof(held_by), "receiver %u held it staged for %llu ms "
                             "(hold_timeout_ms=%llu)", i, (unsigned long long)held,
                             (unsigned long long)n->coord.hold_timeout_ms);
                    DC_LOG_ERROR("root: %s: aborting version %llu", held_by,
                                 (unsigned long long)v);
                    aborted = 1;
                    break;
                }
                continue;
            }
            if (n->coord.t_all_sent && now - n->coord.last_progress[i] > stall_ns &&
                now - n->coord.t_all_sent > stall_ns) {
                uint32_t nch = n->layout->nchunks, q = 0;
                for (uint32_t c = 0; c < nch; c++) {
                    if (dc_coord_needs(n, i, c) && !n->coord.acked[(size_t)i * nch + c]) {
                        n->coord.needq[(size_t)i * nch + c] = 0;
                        dc_enc_queue(n, c, i, n->enc.mode == DC_MODE_DENSE);
                        q++;
                    }
                }
                DC_LOG_INFO("root: receiver %u stalled: re-sending %u chunks", i, q);
                n->coord.last_progress[i] = now;
            }
        }
        /* a shard sending from memory is the only holder of its chunks:
         * without it they can be neither repaired nor re-sent */
        for (uint32_t i = 1; n->cfg->source && !aborted && i < n->nnodes; i++) {
            if (n->coord.sjoined[i] && !dc_coord_ctl_peer(n, i)) {
                DC_LOG_ERROR("coordinator: sender %u lost mid-version; it sends from memory, "
                             "nobody else holds its chunks: aborting version %llu", i,
                             (unsigned long long)v);
                n->coord.sjoined[i] = 0;
                lost = "a sender (from memory)";
                aborted = 1;
            }
        }
        if (aborted)
            break;
    }
    pthread_mutex_lock(&n->mu);
    n->enc.total = 0;
    n->enc.cursor = 0;
    dc_enc_wq_clear(n);
    /* a repair an encoder thread took before the clear writes its chunk's
     * digest when it finishes: wait for it before the digests are read
     * (the commit record, below) */
    while (n->enc.busy > 0)
        pthread_cond_wait(&n->cv, &n->mu);
    pthread_mutex_unlock(&n->mu);
    if (n->finished)
        return n->result ? n->result : dc_error(DC_ERR_INTERNAL, "root stopped");
    uint32_t nch = n->layout->nchunks;
    dc_nbuf_unref(n, n->begin_msg);
    n->begin_msg = NULL;
    if (aborted) {
        n->enc.in_flight = 0;
        n->coord.aborted_v = v;
        dc_send_down_simple(n, DC_MSG_ABORT, v, v - 1, DC_NODE_ALL);
        memset(n->coord.vdone, 0, n->nnodes);
        /* the DONEs of the ABORT (stats; a node that misses the ABORT, e.g.
         * one re-attaching after the failed node was its parent, undoes v
         * at BYE): after a FAIL no longer than 5 s, and none from the node
         * that stopped */
        uint64_t wait_ms = n->abort_ms;
        if (n->coord.fail_node != UINT32_MAX) {
            n->coord.vdone[n->coord.fail_node] = 1;
            wait_ms = DC_MIN(wait_ms, 5000);
        }
        dc_node_run_until(n, dc_coord_pred_done, dc_now_ns() + wait_ms * 1000000ull);
        if (n->coord.fail_node != UINT32_MAX)
            return dc_error(n->coord.fail_st, "version %llu aborted: %s",
                            (unsigned long long)v, n->coord.fail_why);
        if (held_by[0])
            return dc_error(DC_ERR_CANCELED, "version %llu aborted: %s",
                            (unsigned long long)v, held_by);
        return dc_error(DC_ERR_CANCELED, "version %llu aborted: %s was lost",
                        (unsigned long long)v, lost);
    }
    /* joint commit: every receiver verified every chunk it needs.  The
     * checkpoint digest covers the target digests of the chunks some
     * receiver needs (0 for the others); a digest no sender reported (a
     * sender gone after its chunks were repaired by the coordinator) is
     * computed here from the coordinator's copy of the version. */
    for (uint32_t c = 0; c < nch; c++) {
        if (n->plan.chunk_stream[c] == UINT32_MAX) {
            n->enc.digests[c] = (dc_digest_t){0, 0};
        } else if (!n->enc.dknown[c] && n->cfg->source) {
            if (!n->mem.own[c])
                return dc_error(DC_ERR_IO, "version %llu: sender %u never reported chunk %u's "
                                "digest, and only it holds that memory",
                                (unsigned long long)v, n->plan.chunk_src[c], c);
            if ((st = dc_place_digest(&n->mem.next, c, n->scratch, &n->enc.digests[c])) != DC_OK)
                return st;
        } else if (!n->enc.dknown[c]) {
            const dc_layout_chunk_t *lc = &n->layout->chunks[c];
            const dc_st_tensor_t *nt = dc_st_tensor(n->enc.next, lc->tensor);
            n->enc.digests[c] = dc_digest128(dc_st_data(n->enc.next, nt) + lc->offset, lc->len);
        }
    }
    XXH3_state_t *hs = XXH3_createState();
    XXH3_128bits_reset(hs);
    XXH3_128bits_update(hs, n->enc.digests, (size_t)nch * sizeof(*n->enc.digests));
    XXH128_hash_t cd = XXH3_128bits_digest(hs);
    XXH3_freeState(hs);
    dc_commit_rec_t rec = {.version = v, .baseline = v - 1, .digest_lo = cd.low64,
                           .digest_hi = cd.high64};
    /* the target digests first: a restart checks nodes' journals of v
     * against them */
    st = dc_commit_digests_write(n->cfg->state_dir, v, n->layout->id, n->enc.digests, nch);
    if (st == DC_OK)
        st = dc_commit_cas(n->cfg->state_dir, n->coord.committed, &rec, NULL);
    uint64_t t_commit = dc_now_ns();
    dc_trace(n, "commit", NULL, 0);
    if (st != DC_OK) {
        dc_error_prefix("root: commit of version %llu", (unsigned long long)v);
        n->enc.in_flight = 0;
        dc_send_down_simple(n, DC_MSG_ABORT, v, v - 1, DC_NODE_ALL);
        return st;
    }
    n->coord.committed = v;
    n->coord.ckpt = (dc_digest_t){cd.low64, cd.high64};
    n->coord.digests_ok = 1;
    n->coord.confirm_v = v;
    memset(n->coord.confirmed, 0, n->nnodes);
    n->enc.in_flight = 0;
    if (DC_UNLIKELY(n->coord.crash_commit == v)) {
        DC_LOG_WARN("root: DELTACAST_ENGINE_ROOT_CRASH: killing myself after the commit of "
                    "version %llu", (unsigned long long)v);
        raise(SIGKILL);
    }
    dc_commit_msg_t cm = {.ckpt = n->coord.ckpt};
    uint8_t cbuf[DC_MSG_HDR_SIZE + DC_COMMIT_BODY];
    dc_commit_msg_pack(v, v - 1, DC_NODE_ALL, &cm, cbuf);
    dc_nbuf_t *cb = dc_nbuf_copy(n, cbuf, sizeof(cbuf));
    if (cb) {
        dc_send_down(n, cb, DC_NODE_ALL, DC_STREAM_ANY);
        dc_nbuf_unref(n, cb);
    }
    dc_node_run_until(n, dc_coord_pred_done, dc_now_ns() + (uint64_t)n->abort_ms * 1000000ull);
    if (n->coord.progress_line)
        dc_coord_progress_line(n, 1);
    vs->committed = 1;
    vs->seconds = (double)(t_commit - n->coord.t_begin) / 1e9;
    vs->first_frame_s =
        n->coord.t_first_frame ? (double)(n->coord.t_first_frame - n->coord.t_begin) / 1e9 : 0;
    vs->encode_s = (double)n->enc.ns / 1e9;
    uint64_t t_last = n->coord.t_all_acked ? n->coord.t_all_acked : t_commit;
    vs->transfer_s = n->coord.t_first_frame ? (double)(t_last - n->coord.t_first_frame) / 1e9 : 0;
    double amax = 0;
    for (uint32_t i = 1; i < n->nnodes; i++)
        amax = DC_MAX(amax, (double)n->coord.rx_apply_ns[i] / 1e9);
    vs->apply_s = amax;
    vs->commit_s = (double)(t_commit - t_last) / 1e9;
    vs->payload_bytes = n->enc.payload_bytes + n->coord.other_payload;
    vs->repair_bytes = n->enc.repair_bytes;
    vs->dense_bytes = n->layout->total_bytes;
    vs->frames = n->enc.sent + n->coord.other_frames;
    vs->repairs = n->enc.repairs;
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
static dc_status_t dc_coord_confirm(dc_node_t *n, int final)
{
    if (!n->coord.digests_ok && n->coord.committed &&
        dc_commit_digests_read(n->cfg->state_dir, n->coord.committed, n->layout->id,
                               n->enc.digests, n->layout->nchunks) == DC_OK)
        n->coord.digests_ok = 1;
    n->coord.confirm_v = n->coord.committed;
    uint32_t asked = 0;
    for (uint32_t x = 1; x < n->nnodes; x++) {
        /* at the start, only the nodes whose HELLO names another version
         * (a relay's STATE of its child may be older than the child's
         * journal, so their journals are not asked about) */
        n->coord.vdone[x] = !n->coord.rneed[x] || n->coord.confirmed[x] ||
                      (!final && n->coord.hello_committed[x] == n->coord.committed);
        if (n->coord.vdone[x])
            continue;
        dc_coord_send_confirm(n, x, 0);
        asked++;
    }
    if (!asked)
        return DC_OK;
    DC_LOG_INFO("coordinator: asking %u receivers to confirm version %llu", asked,
                (unsigned long long)n->coord.committed);
    dc_node_run_until(n, dc_coord_pred_done, dc_now_ns() + (uint64_t)n->abort_ms * 1000000ull);
    if (n->finished)
        return n->result ? n->result : dc_error(DC_ERR_INTERNAL, "root stopped");
    char list[256] = "";
    size_t len = 0;
    uint32_t bad = 0, nrecv = 0;
    for (uint32_t x = 1; x < n->nnodes; x++) {
        if (!n->coord.rneed[x])
            continue;
        nrecv++;
        if (n->coord.confirmed[x])
            continue;
        bad++;
        if (len + 16 < sizeof(list))
            len += (size_t)snprintf(
                list + len, sizeof(list) - len, "%s%u%s", bad > 1 ? ", " : "", x,
                !n->coord.vdone[x]                        ? " (no answer)"
                : (n->coord.dflags[x] & DC_DONE_F_FAILED) ? " (local commit failed)"
                                                          : "");
    }
    if (!bad || !final)
        return DC_OK;
    return dc_error(DC_ERR_VERIFY, "%u of %u receivers do not hold the committed version %llu "
                    "(checkpoint digest %016llx%016llx): node %s; their logs say why",
                    bad, nrecv, (unsigned long long)n->coord.committed,
                    (unsigned long long)n->coord.ckpt.hi, (unsigned long long)n->coord.ckpt.lo,
                    list);
}

/* Versions vK are consecutive: a vK past the last consecutive one means a
 * gap, and the job would stop early without a word. */
static dc_status_t dc_coord_check_gap(const dc_node_t *n, uint64_t last)
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

dc_status_t dc_coord_run(dc_node_t *n)
{
    dc_commit_rec_t rec;
    dc_status_t st = dc_commit_read(n->cfg->state_dir, &rec);
    if (st == DC_OK) {
        n->coord.committed = rec.version;
        n->coord.ckpt = (dc_digest_t){rec.digest_lo, rec.digest_hi};
    } else if (st == DC_ERR_NOT_FOUND)
        n->coord.committed = n->cfg->source ? n->cfg->initial_version : 0;
    else
        return st;
    uint64_t last = n->cfg->nversions;
    if (n->cfg->source) {
        last = UINT64_MAX; /* until the source says there is no more */
    } else if (last == 0) {
        char p[PATH_MAX];
        for (last = n->coord.committed;; last++) {
            if (dc_node_version_path(p, sizeof(p), n->cfg->versions_dir, last + 1) ||
                access(p, R_OK) != 0)
                break;
        }
        if ((st = dc_coord_check_gap(n, last)) != DC_OK)
            return st;
    }
    if (last <= n->coord.committed)
        DC_LOG_WARN("root: nothing to refit: committed version %llu, last version %llu",
                    (unsigned long long)n->coord.committed, (unsigned long long)last);
    /* the layout is needed before receivers can be served */
    if (n->cfg->source)
        st = dc_mem_init(n);
    else
        st = dc_enc_open_version(n, n->coord.committed + 1 <= last ? n->coord.committed + 1 : 1);
    if (st != DC_OK)
        return st;
    st = dc_coord_alloc(n);
    if (st != DC_OK)
        return st;
    st = dc_node_chunk_map(n);
    if (st == DC_OK && n->cfg->source)
        st = dc_mem_baseline(n);
    if (st != DC_OK)
        return st;
    if (dc_coord_nrecv(n) == 0)
        return dc_error(DC_ERR_INVALID, "root: no receiver needs any chunk of this checkpoint");
    st = dc_enc_start(n);
    if (st != DC_OK) {
        dc_enc_stop(n);
        return st;
    }
    json_t *versions = json_array();
    /* wait for every receiver */
    uint64_t wait_ms = n->cfg->wait_ms ? n->cfg->wait_ms : 60000;
    dc_node_run_until(n, dc_coord_pred_joined, dc_now_ns() + wait_ms * 1000000ull);
    if (n->coord.fail_node != UINT32_MAX) {
        /* a receiver said why it cannot join: no waiting out wait_ms */
        st = dc_error(n->coord.fail_st, "root: %s", n->coord.fail_why);
        goto out;
    }
    if (n->finished || !dc_coord_all_joined(n)) {
        /* name them (the first few, with their addresses): their own logs
         * say why */
        uint32_t missing = 0;
        char names[1024] = "";
        size_t nl = 0;
        for (uint32_t i = 1; i < n->nnodes; i++) {
            if (dc_coord_node_joined(n, i))
                continue;
            if (missing++ < 8 && nl < sizeof(names)) {
                char who[320];
                int w = snprintf(names + nl, sizeof(names) - nl, "%s %s", missing > 1 ? "," : "",
                                 dc_coord_node_desc(n, i, who, sizeof(who)));
                nl = w > 0 ? DC_MIN(nl + (size_t)w, sizeof(names)) : nl;
            }
        }
        st = n->finished ? dc_node_outcome(n)
                         : dc_error(DC_ERR_TIMEOUT,
                                    "root: %u of %u receivers and other senders "
                                    "did not join within %llu ms:%s%s (see their logs)",
                                    missing, n->nnodes - 1, (unsigned long long)wait_ms, names,
                                    missing > 8 ? ", ..." : "");
        goto out;
    }
    if ((st = dc_coord_confirm(n, 0)) != DC_OK)
        goto out;
    for (uint64_t v = n->coord.committed + 1; v <= last; v++) {
        dc_vstats_t vs;
        memset(&vs, 0, sizeof(vs));
        st = dc_coord_version(n, v, &vs);
        if (st == DC_OK) {
            /* the stats first: a pushing trainer that reads them once its
             * push returns (dc_mem_done wakes it) finds this version */
            json_array_append_new(versions, dc_coord_version_json(n, &vs));
            dc_coord_write_stats(n, versions);
        }
        if (n->cfg->source) {
            if (st == DC_ERR_NOT_FOUND && n->mem.end) {
                st = DC_OK;
                break;
            }
            st = dc_mem_done(n, v, st, &vs);
        }
        if (st != DC_OK) {
            if (n->coord.progress_line)
                fputc('\n', stderr);
            goto out;
        }
        if (n->cfg->on_version) {
            dc_node_vsum_t sum = {.version = vs.version, .payload_bytes = vs.payload_bytes,
                                  .repair_bytes = vs.repair_bytes,
                                  .dense_bytes = vs.dense_bytes, .repairs = vs.repairs,
                                  .seconds = vs.seconds, .receivers = dc_coord_nrecv(n)};
            n->cfg->on_version(n->cfg->on_version_user, &sum);
        }
    }
    if (st == DC_OK)
        st = dc_coord_confirm(n, 1);
out:;
    /* the failure's own words: the BYE drain below may set other errors
     * (children closing), and the caller prints dc_last_error() */
    char why[1024] = "";
    if (st != DC_OK)
        snprintf(why, sizeof(why), "%s", dc_last_error());
    dc_status_t st2 = dc_coord_write_stats(n, versions);
    if (st == DC_OK) {
        st = st2;
        if (st != DC_OK)
            snprintf(why, sizeof(why), "%s", dc_last_error());
    }
    json_decref(versions);
    /* BYE and drain */
    uint8_t bye[DC_MSG_HDR_SIZE + DC_BYE_BODY];
    dc_bye_pack(n->coord.committed, n->coord.ckpt, bye);
    dc_nbuf_t *bb = dc_nbuf_copy(n, bye, sizeof(bye));
    if (bb) {
        dc_send_down(n, bb, DC_NODE_ALL, DC_STREAM_ANY);
        dc_nbuf_unref(n, bb);
    }
    n->bye = 1;
    uint64_t dl = dc_now_ns() + 5000000000ull;
    while (dc_node_tx_pending(n) && dc_now_ns() < dl)
        dc_node_step(n, 5);
    dc_enc_stop(n);
    if (st != DC_OK)
        dc_error(st, "%s", why);
    return st;
}
