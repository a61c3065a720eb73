/* attach.c - where a node sits in the tree and the links that follow
 * (n->plan): the plan (dc_tree_plan, max_stripes = 1) and its re-plan
 * without a lost relay (dc_tree_replan), dialling every distinct parent
 * (TCP between regions, the config transport inside), SUB / SUBOK per
 * parent link, the choice of the parent that carries upward traffic and
 * the HELLO on it (then the subtree's remembered STATEs), accepting
 * children and taking their SUB.
 *
 * Called from node.c's loop (dc_attach_links, dc_attach_parent_lost,
 * dc_attach_accept) and dispatcher (dc_attach_child_sub,
 * dc_attach_remember); sends through peer.c; a receiver's HELLO comes
 * from receiver.c (dc_rx_hello).
 */
#include "engine/node_internal.h"
#include "tree/tree_int.h"

#include <stdlib.h>
#include <string.h>

/* A relay keeps the last STATE (a HELLO, kept as STATE) or FAIL of every
 * node below it, to re-announce the subtree when it attaches or re-attaches
 * to a parent: a FAIL of a child that could not start (early.c) may come
 * before this relay has its own upward link. */
void dc_attach_remember(dc_node_t *n, uint32_t node, dc_nbuf_t *b)
{
    if (node >= n->nnodes)
        return;
    dc_nbuf_t *c = dc_nbuf_copy(n, b->data, b->len);
    if (!c)
        return;
    if (c->data[4] != DC_MSG_FAIL)
        c->data[4] = DC_MSG_STATE;
    dc_nbuf_unref(n, n->net.known[node]);
    n->net.known[node] = c;
}

/* A child's SUB: who it is and which broadcast streams it takes on this link. */
void dc_attach_child_sub(dc_node_t *n, dc_peer_t *from, const dc_msg_t *m)
{
    dc_sub_t sb;
    if (dc_sub_parse(m, &sb) != DC_OK || sb.node >= n->nnodes || sb.node == n->me ||
        (from->node != UINT32_MAX && from->node != sb.node)) {
        DC_LOG_WARN("node %u: bad SUB from node %u (node id %u of %u nodes)", n->me, from->node,
                    m->node, n->nnodes);
        dc_peer_fail(n, from, DC_ERR_FORMAT, "sent a bad SUB");
        return;
    }
    if (!dc_peer_claim_ok(n, from, m->node)) {
        dc_peer_fail(n, from, DC_ERR_AUTH, "claims a node its certificate does not name");
        return;
    }
    uint32_t ns = dc_tree_stream_count(n->plan.tree);
    uint8_t *sub = calloc(ns ? ns : 1, 1);
    if (!sub)
        return;
    for (uint32_t k = 0; k < sb.nstreams; k++) {
        uint32_t s = dc_sub_stream(&sb, k);
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

/* This node's view of the current plan, and per stream each node's parent
 * (for choosing the parent that carries our upward traffic). */
static dc_status_t dc_attach_refresh_view(dc_node_t *n)
{
    memset(&n->plan.view, 0, sizeof(n->plan.view));
    n->plan.view.size = sizeof(n->plan.view);
    dc_status_t st = dc_tree_node(n->plan.tree, n->me, &n->plan.view);
    if (st != DC_OK)
        return st;
    uint32_t ns = dc_tree_stream_count(n->plan.tree), ne = dc_tree_edge_count(n->plan.tree);
    const dc_tree_edge_t *e = dc_tree_edges(n->plan.tree);
    free(n->plan.spar);
    n->plan.spar = malloc((size_t)(ns ? ns : 1) * n->nnodes * sizeof(uint32_t));
    if (!n->plan.spar)
        return dc_error(DC_ERR_NOMEM, "node: out of memory");
    memset(n->plan.spar, 0xff, (size_t)(ns ? ns : 1) * n->nnodes * sizeof(uint32_t));
    for (uint32_t k = 0; k < ne; k++)
        if (e[k].stream < ns && e[k].child < n->nnodes)
            n->plan.spar[(size_t)e[k].stream * n->nnodes + e[k].child] = e[k].parent;
    n->plan.subgen++;
    return DC_OK;
}

dc_status_t dc_attach_plan(dc_node_t *n)
{
    dc_tree_opts_t o;
    dc_tree_opts_engine(&o); /* what `deltacast plan` shows */
    o.chunk_bytes = n->chunk_size;
    dc_status_t st = dc_tree_plan(n->cfg->topo, &o, &n->plan.tree);
    if (st == DC_OK && n->is_root && dc_log_get_level() >= DC_LOG_LEVEL_DEBUG) {
        /* the plan's edges as `deltacast plan --json` lists them (parent >
         * child / stream, node indices), a few per line */
        const dc_tree_t *t = n->plan.tree;
        uint32_t ns = dc_tree_stream_count(t), ne = dc_tree_edge_count(t);
        const dc_tree_edge_t *e = dc_tree_edges(t);
        DC_LOG_DEBUG("root: plan: %u streams, %u edges (chunk %llu bytes, at most %u stripes)",
                     ns, ne, (unsigned long long)o.chunk_bytes, o.max_stripes);
        char line[768];
        size_t k = 0;
        for (uint32_t i = 0; i < ne; i++) {
            int w = snprintf(line + k, sizeof(line) - k, "%u>%u/%u ", e[i].parent, e[i].child,
                             e[i].stream);
            k += w > 0 ? (size_t)w : 0;
            if (k > sizeof(line) - 40 || i + 1 == ne) {
                DC_LOG_DEBUG("root: plan edges: %s", line);
                k = 0;
            }
        }
    }
    return st == DC_OK ? dc_attach_refresh_view(n) : st;
}

/* Depth of node x in stream s's tree (0: its sender). */
static uint32_t dc_attach_depth(const dc_node_t *n, uint32_t s, uint32_t x)
{
    uint32_t d = 0;
    while (d <= n->nnodes) {
        uint32_t p = n->plan.spar[(size_t)s * n->nnodes + x];
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
static uint32_t dc_attach_up_choice(const dc_node_t *n)
{
    if (n->is_sender)
        return 0;
    uint32_t best = UINT32_MAX, bd = UINT32_MAX;
    for (uint32_t k = 0; k < n->plan.view.n_parents; k++) {
        const dc_tree_link_t *l = &n->plan.view.parents[k];
        for (uint32_t j = 0; j < l->n_streams; j++) {
            uint32_t d = dc_attach_depth(n, l->streams[j], n->me);
            /* ties keep the parent in use (no needless re-announce) */
            if (d < bd || (d == bd && l->peer == n->net.up_id && n->net.up)) {
                bd = d;
                best = l->peer;
            }
        }
    }
    return best;
}

/* The streams this node takes from parent `pid` in the current plan. */
static const dc_tree_link_t *dc_attach_parent_link(const dc_node_t *n, uint32_t pid)
{
    for (uint32_t k = 0; k < n->plan.view.n_parents; k++)
        if (n->plan.view.parents[k].peer == pid)
            return &n->plan.view.parents[k];
    return NULL;
}

static void dc_attach_send_sub(dc_node_t *n, dc_peer_t *p)
{
    const dc_tree_link_t *l = dc_attach_parent_link(n, p->node);
    uint32_t cnt = l ? l->n_streams : 0;
    size_t len = dc_sub_size(cnt);
    dc_nbuf_t *b = dc_nbuf_new(n, len, 0, 0);
    if (!b)
        return;
    dc_sub_pack(n->me, n->plan.subgen, l ? l->streams : NULL, cnt, b->data);
    b->len = len;
    dc_peer_send(n, p, b);
    dc_nbuf_unref(n, b);
    p->subgen = n->plan.subgen;
}

static dc_peer_t *dc_attach_parent_peer(dc_node_t *n, uint32_t pid)
{
    for (size_t i = 0; i < n->net.npeers; i++) {
        dc_peer_t *p = n->net.peers[i];
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
dc_status_t dc_attach_lan_addr(const dc_verbs_ops_t *t, const char *addr, char *out, size_t len)
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
static dc_peer_t *dc_attach_dial(dc_node_t *n, uint32_t pid)
{
    uint64_t now = dc_now_ns();
    if (now < n->net.retry_ns[pid])
        return NULL;
    n->net.retry_ns[pid] = now + 200000000ull;
    dc_topo_node_info_t info;
    memset(&info, 0, sizeof(info));
    info.size = sizeof(info);
    if (dc_topo_node(n->cfg->topo, pid, &info) != DC_OK || !info.addr || !*info.addr) {
        dc_error(DC_ERR_INVALID, "node %u: parent %u has no address", n->me, pid);
        dc_node_stop(n, DC_ERR_INVALID);
        return NULL;
    }
    dc_verbs_opts_t vo = n->net.vopts;
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
            dc_node_stop(n, DC_ERR_INVALID);
            return NULL;
        }
    }
    /* between regions always TCP (parallel streams); inside, config transport */
    const dc_verbs_ops_t *t = wan && n->net.tw ? n->net.tw : n->net.t;
    char addr[300];
    if (t == n->net.t && n->net.tw) {
        if (dc_attach_lan_addr(n->net.t, info.addr, addr, sizeof(addr)) != DC_OK) {
            dc_node_stop(n, dc_last_status());
            return NULL;
        }
    } else {
        snprintf(addr, sizeof(addr), "%s", info.addr);
    }
    /* TLS (config tls=auto): on the edges between regions; in certificate
     * mode the parent's certificate must name the node dialled */
    vo.wan = wan;
    vo.tls_peer_name = info.name;
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
        dc_attach_send_sub(n, p);
    DC_LOG_INFO("node %u: attaching to %s %u at %s over %s", n->me,
                n->is_sender ? "the coordinator" : "parent", pid, addr, t->name);
    return p;
}

/* Keep a connection to every parent of the plan (a sender: to the
 * coordinator), re-subscribe after a re-plan, and send HELLO (then the
 * subtree's known STATEs) on the parent chosen for upward traffic. */
void dc_attach_links(dc_node_t *n)
{
    if (n->is_root || n->bye)
        return;
    if (n->is_sender) {
        if (!dc_attach_parent_peer(n, 0))
            dc_attach_dial(n, 0);
    } else {
        if (n->plan.view.n_parents == 0) {
            dc_error(DC_ERR_INVALID, "node %u has no parent in the tree", n->me);
            dc_node_stop(n, DC_ERR_INVALID);
            return;
        }
        for (uint32_t k = 0; k < n->plan.view.n_parents; k++)
            if (!dc_attach_parent_peer(n, n->plan.view.parents[k].peer))
                dc_attach_dial(n, n->plan.view.parents[k].peer);
        for (size_t i = 0; i < n->net.npeers; i++) {
            dc_peer_t *p = n->net.peers[i];
            if (p->is_parent && !p->dead && p->subgen != n->plan.subgen)
                dc_attach_send_sub(n, p);
        }
    }
    /* announced on a live link under this plan: the choice below cannot
     * differ (it changes only with the plan, which bumps subgen) */
    if (n->net.up && !n->net.up->dead && n->net.up->hello_sent &&
        n->plan.announced == n->plan.subgen)
        return;
    uint32_t uid = dc_attach_up_choice(n);
    dc_peer_t *up = uid == UINT32_MAX ? NULL : dc_attach_parent_peer(n, uid);
    if (!up || (up == n->net.up && up->hello_sent && n->plan.announced == n->plan.subgen))
        return;
    /* a receiver announces itself (HELLO: the coordinator counts it as
     * joined, or re-sends what it missed) only once every parent of the
     * plan has taken its SUB: no broadcast frame can pass it by after that */
    for (uint32_t k = 0; !n->is_sender && k < n->plan.view.n_parents; k++) {
        dc_peer_t *p = dc_attach_parent_peer(n, n->plan.view.parents[k].peer);
        if (!p || p->sub_acked != n->plan.subgen)
            return;
    }
    n->net.up = up;
    n->net.up_id = uid;
    up->hello_sent = 1;
    n->plan.announced = n->plan.subgen;
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
    } else if (n->rx.early) {
        /* it could not start (early.c): its FAIL in place of the HELLO */
        dc_peer_send(n, up, n->rx.early);
        n->rx.fail_sent = 1;
        DC_LOG_INFO("node %u: told node %u why it stops", n->me, uid);
        return;
    } else {
        dc_nbuf_t *h = dc_rx_hello(n);
        if (h) {
            dc_peer_send(n, up, h);
            dc_nbuf_unref(n, h);
        }
    }
    for (uint32_t i = 0; i < n->nnodes; i++) /* re-announce the subtree */
        if (n->net.known[i] && ((n->net.route[i] && !n->net.route[i]->dead) ||
                                n->net.known[i]->data[4] == DC_MSG_FAIL))
            dc_peer_send(n, up, n->net.known[i]);
    DC_LOG_INFO("node %u: upward traffic through node %u", n->me, uid);
}

/* A parent connection failed: a sender (the coordinator included) is never
 * re-planned away: keep dialling it until abort_ms; a relay that answered
 * once, or not within timeout_ms, is re-planned away (dc_tree_replan) and
 * the links follow the new plan. */
void dc_attach_parent_lost(dc_node_t *n, dc_peer_t *p)
{
    uint32_t pid = p->node;
    if (n->bye) {
        n->finished = 1;
        return;
    }
    if (pid >= n->nnodes || dc_node_role_sender(n, pid)) {
        if (!n->net.root_lost_ns)
            n->net.root_lost_ns = dc_now_ns();
        if (dc_now_ns() - n->net.root_lost_ns > (uint64_t)n->abort_ms * 1000000ull) {
            dc_error(DC_ERR_RESET, "node %u: lost sender %u for %u ms", n->me, pid,
                     n->abort_ms);
            dc_node_stop(n, DC_ERR_RESET);
        }
        return;
    }
    /* a parent that never answered the connect may just be starting: retry
     * it until the transport timeout, then give it up */
    if (!p->ready && dc_now_ns() - p->since_ns < (uint64_t)n->timeout_ms * 1000000ull)
        return;
    if (dc_tree_node_dead(n->plan.tree, pid))
        return;
    DC_LOG_WARN("node %u: parent %u is gone; re-planning the tree without it", n->me, pid);
    dc_tree_t *nt = NULL;
    uint32_t changed = 0;
    if (dc_tree_replan(n->plan.tree, pid, &nt, &changed) != DC_OK) {
        dc_node_stop(n, dc_last_status());
        return;
    }
    dc_tree_free(n->plan.tree);
    n->plan.tree = nt;
    n->plan.dead[pid] = 1;
    if (dc_attach_refresh_view(n) != DC_OK)
        dc_node_stop(n, dc_last_status());
}

static void dc_attach_accept_on(dc_node_t *n, const dc_verbs_ops_t *t, dc_verbs_listener_t *lis)
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

void dc_attach_accept(dc_node_t *n)
{
    dc_attach_accept_on(n, n->net.t, n->net.lis);
    if (n->net.lisw)
        dc_attach_accept_on(n, n->net.tw, n->net.lisw);
}
