/*
 * tree.c - planning the relay tree: pure, deterministic functions of the
 * topology.
 *
 * One routing stream per (shard, stripe); each stream gets its own tree over
 * exactly the receivers that need its shard:
 *
 *   region "train"          region r0                   region r1
 *   sender s0 ==WAN==> gateway g(s0,r0) ==WAN==> gateway g(s0,r1)
 *                         |  LAN chain / d-ary        |
 *                         v                           v
 *                       r0-n1 -> r0-n2 -> ...       r1-n1 -> ...
 *   sender s1 ==WAN==> gateway g(s1,r0) (a different node: streams are
 *                      spread round-robin over a region's nodes)
 *
 * - Across regions: a region tree of fan-out F (a star when F >= #regions,
 *   a chain when F = 1) chosen per stream by a rate/latency estimate; every
 *   region is entered once per stream, so each WAN link carries each byte
 *   once.  A shard whose source's WAN share exceeds one gateway's is split
 *   into stripes, each entering through its own gateway.
 * - Inside a region: the members in rotated order starting at the gateway,
 *   laid out as a d-ary heap (d = 1 is a pipelined chain), d chosen by the
 *   same estimate (bandwidth term B*d/rate + depth * per-chunk term).
 *   Rotating the start per stream makes each node send about what it
 *   receives, like a ring all-gather.
 */
#include "tree/tree_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DC_TREE_MAX_REGION_FANOUT 8

static bool push_edge(dc_tree_t *t, uint32_t p, uint32_t c, uint32_t s, uint32_t kind, double rate)
{
    if (t->n_edges == t->cap_edges) {
        uint32_t nc = t->cap_edges ? t->cap_edges * 2 : 1024;
        dc_tree_edge_t *e = realloc(t->edges, (size_t)nc * sizeof(*e));
        if (!e)
            return false;
        t->edges = e;
        t->cap_edges = nc;
    }
    t->edges[t->n_edges++] = (dc_tree_edge_t){.parent = p, .child = c, .stream = s, .kind = kind, .rate_bps = rate};
    return true;
}

/* Depth of a d-ary heap of n positions (0 for n <= 1); d = 1 is a chain. */
static uint32_t heap_depth(uint32_t n, uint32_t d)
{
    if (n <= 1)
        return 0;
    if (d == 1)
        return n - 1;
    uint32_t depth = 0;
    uint64_t covered = 1, level = 1;
    while (covered < n) {
        level *= d;
        covered += level;
        depth++;
    }
    return depth;
}

/* Fan-out minimising  B*d/rate + depth(d) * (chunk*d/rate + lat). */
static uint32_t best_degree(uint32_t n, uint32_t dmax, double bytes, double chunk, double Bps,
                            double lat)
{
    uint32_t best = 1;
    double bt = INFINITY;
    if (n <= 1 || Bps <= 0)
        return 1;
    for (uint32_t d = 1; d <= dmax && d < n; d++) {
        double tt = bytes * d / Bps + heap_depth(n, d) * (chunk * d / Bps + lat);
        if (tt < bt * (1 - 1e-12)) {
            bt = tt;
            best = d;
        }
    }
    return best;
}

void dc_tree_free(dc_tree_t *t)
{
    if (!t)
        return;
    free(t->dead);
    free(t->streams);
    free(t->edges);
    free(t->par_off);
    free(t->chi_off);
    free(t->par_links);
    free(t->chi_links);
    free(t->link_streams);
    free(t);
}

/* Build the per-node link views from the edge list: two stable counting
 * sorts (by peer, then by node) over edges already in stream order give,
 * per node, its links grouped by peer with streams ascending.  O(E + N). */
static dc_status_t build_views(dc_tree_t *t)
{
    uint32_t n = t->n_nodes, E = t->n_edges;
    dc_status_t st = DC_OK;
    uint32_t *cnt = NULL, *o1 = NULL, *o2 = NULL, *kme = NULL, *kpeer = NULL, *kst = NULL;
    free(t->par_off);
    free(t->chi_off);
    free(t->par_links);
    free(t->chi_links);
    free(t->link_streams);
    t->par_links = t->chi_links = NULL;
    t->link_streams = NULL;
    t->par_off = calloc(n + 1, sizeof(uint32_t));
    t->chi_off = calloc(n + 1, sizeof(uint32_t));
    t->link_streams = malloc(2 * sizeof(uint32_t) * (E ? E : 1));
    cnt = malloc(sizeof(uint32_t) * (n + 1));
    o1 = malloc(sizeof(uint32_t) * (E ? E : 1));
    o2 = malloc(sizeof(uint32_t) * (E ? E : 1));
    kme = malloc(sizeof(uint32_t) * (E ? E : 1));
    kpeer = malloc(sizeof(uint32_t) * (E ? E : 1));
    kst = malloc(sizeof(uint32_t) * (E ? E : 1)); /* stream << 1 | kind */
    if (!t->par_off || !t->chi_off || !t->link_streams || !cnt || !o1 || !o2 || !kme || !kpeer || !kst) {
        st = dc_error(DC_ERR_NOMEM, "tree: out of memory building node views");
        goto out;
    }
    uint32_t ls = 0;
    for (int side = 0; side < 2; side++) {
        /* side 0: links to parents (grouped by child); side 1: to children */
        uint32_t *off = side == 0 ? t->par_off : t->chi_off;
        for (uint32_t e = 0; e < E; e++) {
            kme[e] = side == 0 ? t->edges[e].child : t->edges[e].parent;
            kpeer[e] = side == 0 ? t->edges[e].parent : t->edges[e].child;
            kst[e] = t->edges[e].stream << 1 | (t->edges[e].kind & 1);
        }
        /* stable counting sort by peer, then by me */
        memset(cnt, 0, (n + 1) * sizeof(uint32_t));
        for (uint32_t e = 0; e < E; e++)
            cnt[kpeer[e] + 1]++;
        for (uint32_t i = 0; i < n; i++)
            cnt[i + 1] += cnt[i];
        for (uint32_t e = 0; e < E; e++)
            o1[cnt[kpeer[e]]++] = e;
        memset(cnt, 0, (n + 1) * sizeof(uint32_t));
        for (uint32_t e = 0; e < E; e++)
            cnt[kme[e] + 1]++;
        for (uint32_t i = 0; i < n; i++)
            cnt[i + 1] += cnt[i];
        for (uint32_t k = 0; k < E; k++) {
            uint32_t e = o1[k];
            o2[cnt[kme[e]]++] = e;
        }
        /* count links */
        uint32_t nl = 0;
        for (uint32_t k = 0; k < E; k++)
            if (k == 0 || kme[o2[k]] != kme[o2[k - 1]] || kpeer[o2[k]] != kpeer[o2[k - 1]])
                nl++;
        dc_tree_link_t *links = calloc(nl ? nl : 1, sizeof(dc_tree_link_t));
        if (!links) {
            st = dc_error(DC_ERR_NOMEM, "tree: out of memory building node views");
            goto out;
        }
        if (side == 0)
            t->par_links = links;
        else
            t->chi_links = links;
        uint32_t li = 0, node = 0;
        for (uint32_t k = 0; k < E; k++) {
            uint32_t e = o2[k];
            if (k == 0 || kme[e] != kme[o2[k - 1]] || kpeer[e] != kpeer[o2[k - 1]]) {
                while (node <= kme[e])
                    off[node++] = li;
                links[li].peer = kpeer[e];
                links[li].kind = kst[e] & 1;
                links[li].streams = t->link_streams + ls;
                li++;
            }
            t->link_streams[ls++] = kst[e] >> 1;
            links[li - 1].n_streams++;
        }
        while (node <= n)
            off[node++] = li;
    }
out:
    free(cnt);
    free(o1);
    free(o2);
    free(kme);
    free(kpeer);
    free(kst);
    return st;
}

double dc_tree_stream_bytes(const dc_tree_t *t, uint32_t s, uint64_t payload)
{
    const dc_tree_stream_t *st = &t->streams[s];
    return (double)payload / t->topo->n_shards / st->n_stripes;
}

typedef struct {
    uint32_t region;
    double rate;
} rsort_t;

static int cmp_rsort(const void *a, const void *b)
{
    const rsort_t *x = a, *y = b;
    if (x->rate != y->rate)
        return x->rate > y->rate ? -1 : 1;
    return x->region < y->region ? -1 : x->region > y->region;
}

void dc_tree_opts_engine(dc_tree_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->size = sizeof(*o);
    uint64_t cs = 0;
    o->chunk_bytes = dc_config_get_size("chunk_size", &cs) == DC_OK && cs ? cs : 4u << 20;
    o->max_stripes = 1;
}

dc_status_t dc_tree_plan(const dc_topo_t *topo, const dc_tree_opts_t *o, dc_tree_t **out)
{
    if (!topo || !out)
        return dc_error(DC_ERR_INVALID, "dc_tree_plan: NULL argument");
    dc_tree_opts_t opts;
    dc_status_t st = o ? dc_struct_in(&opts, sizeof(opts), o, sizeof(dc_tree_opts_t),
                                      "dc_tree_plan: options")
                       : DC_OK;
    if (st != DC_OK)
        return st;
    const uint32_t N = topo->n_nodes, R = topo->n_regions, S = topo->n_shards;
    dc_tree_t *t = calloc(1, sizeof(*t));
    uint32_t *rmem = NULL, *roff = NULL, *members = NULL, *mcount = NULL, *gw = NULL, *order = NULL;
    uint32_t *rr = NULL, *sources = NULL, *src_streams = NULL;
    rsort_t *rs = NULL;
    if (!t)
        return dc_error(DC_ERR_NOMEM, "tree: out of memory");
    t->topo = topo;
    t->n_nodes = N;
    t->opts.size = sizeof(t->opts);
    if (o)
        t->opts = opts;
    if (!t->opts.payload_bytes)
        t->opts.payload_bytes = 1000000000ULL;
    if (!t->opts.chunk_bytes)
        t->opts.chunk_bytes = 4u << 20;
    if (!t->opts.max_degree)
        t->opts.max_degree = 4;
    if (!t->opts.max_stripes)
        t->opts.max_stripes = 8;
    t->opts.max_stripes = DC_MIN(t->opts.max_stripes, 64u);
    const double payload = (double)t->opts.payload_bytes, chunk = (double)t->opts.chunk_bytes;

    t->dead = calloc(N, 1);
    roff = calloc(R + 1, sizeof(uint32_t));
    rmem = calloc(N, sizeof(uint32_t));
    members = calloc(N + 1, sizeof(uint32_t));
    mcount = calloc(R, sizeof(uint32_t));
    gw = calloc(R, sizeof(uint32_t));
    order = calloc(R, sizeof(uint32_t));
    rr = calloc(R, sizeof(uint32_t)); /* round-robin gateway counter per region */
    sources = calloc(N, sizeof(uint32_t));
    src_streams = calloc(N, sizeof(uint32_t));
    rs = calloc(R, sizeof(rsort_t));
    if (!t->dead || !roff || !rmem || !members || !mcount || !gw || !order || !rr || !sources ||
        !src_streams || !rs) {
        st = dc_error(DC_ERR_NOMEM, "tree: out of memory");
        goto fail;
    }
    /* receivers grouped by region, in node order */
    for (uint32_t i = 0; i < N; i++)
        if (topo->nodes[i].role == DC_TOPO_ROLE_RECEIVER)
            roff[topo->nodes[i].region + 1]++;
    for (uint32_t r = 0; r < R; r++)
        roff[r + 1] += roff[r];
    {
        uint32_t *fill = calloc(R, sizeof(uint32_t));
        if (!fill) {
            st = dc_error(DC_ERR_NOMEM, "tree: out of memory");
            goto fail;
        }
        for (uint32_t i = 0; i < N; i++)
            if (topo->nodes[i].role == DC_TOPO_ROLE_RECEIVER) {
                uint32_t r = topo->nodes[i].region;
                rmem[roff[r] + fill[r]++] = i;
            }
        free(fill);
    }

    /* streams: stripes per shard */
    double recv_wan = 0;
    uint32_t n_recv = 0;
    for (uint32_t i = 0; i < N; i++)
        if (topo->nodes[i].role == DC_TOPO_ROLE_RECEIVER) {
            recv_wan += topo->nodes[i].wan_bps;
            n_recv++;
        }
    recv_wan /= n_recv ? n_recv : 1;
    uint32_t n_streams = 0;
    uint32_t kshard[DC_TOPO_MAX_SHARDS];
    for (uint32_t s = 0; s < DC_TOPO_MAX_SHARDS; s++)
        t->stream_base[s] = UINT32_MAX;
    for (uint32_t s = 0; s < S; s++) {
        t->stream_base[s] = UINT32_MAX;
        kshard[s] = 0;
        bool needed = false;
        for (uint32_t i = 0; i < N && !needed; i++)
            needed = topo->nodes[i].role == DC_TOPO_ROLE_RECEIVER && (topo->nodes[i].shards >> s & 1);
        if (!needed)
            continue;
        uint32_t owners = 0;
        double src_rate = 0;
        for (uint32_t i = 0; i < N; i++)
            if (topo->nodes[i].role == DC_TOPO_ROLE_SENDER && (topo->nodes[i].shards >> s & 1)) {
                owners++;
                src_rate += topo->nodes[i].wan_bps / (double)__builtin_popcountll(topo->nodes[i].shards);
            }
        uint32_t k = (uint32_t)ceil(src_rate / (recv_wan > 0 ? recv_wan : 1) - 1e-9);
        k = DC_MIN(DC_MAX(k, 1u), t->opts.max_stripes);
        k = DC_MAX(k, owners);
        k = DC_MIN(k, 64u);
        kshard[s] = k;
        t->stream_base[s] = n_streams;
        n_streams += k;
    }
    t->n_streams = n_streams;
    t->streams = calloc(n_streams ? n_streams : 1, sizeof(dc_tree_stream_t));
    if (!t->streams) {
        st = dc_error(DC_ERR_NOMEM, "tree: out of memory");
        goto fail;
    }
    for (uint32_t s = 0; s < S; s++) {
        if (!kshard[s])
            continue;
        uint32_t no = 0;
        for (uint32_t i = 0; i < N; i++)
            if (topo->nodes[i].role == DC_TOPO_ROLE_SENDER && (topo->nodes[i].shards >> s & 1))
                sources[no++] = i;
        for (uint32_t j = 0; j < kshard[s]; j++) {
            dc_tree_stream_t *x = &t->streams[t->stream_base[s] + j];
            x->shard = s;
            x->stripe = j;
            x->n_stripes = kshard[s];
            x->source = sources[j % no];
            src_streams[x->source]++;
        }
    }

    for (uint32_t si = 0; si < n_streams; si++) {
        const dc_tree_stream_t *x = &t->streams[si];
        const uint32_t src = x->source, r0 = topo->nodes[src].region;
        const double bytes = payload / S / x->n_stripes;
        /* members per region needing this shard */
        uint32_t mo = 0;
        for (uint32_t r = 0; r < R; r++) {
            uint32_t c = 0;
            for (uint32_t k = roff[r]; k < roff[r + 1]; k++)
                if (topo->nodes[rmem[k]].shards >> x->shard & 1)
                    members[mo + c++] = rmem[k];
            mcount[r] = c;
            order[r] = mo; /* temporarily: offset of region r's members */
            mo += c;
        }
        /* region tree: r0 first, then regions with members by link rate */
        uint32_t nr = 0;
        for (uint32_t r = 0; r < R; r++) {
            if (r == r0 || !mcount[r])
                continue;
            const dc_topo_rlink_t *l = dc_topo_rlink(topo, r0, r);
            rs[nr].region = r;
            rs[nr].rate = (l && l->bps > 0) ? l->bps : INFINITY;
            nr++;
        }
        qsort(rs, nr, sizeof(rsort_t), cmp_rsort);
        double src_Bps = topo->nodes[src].wan_bps / 8 / (src_streams[src] ? src_streams[src] : 1);
        double wlat = topo->wan_lat_s;
        uint32_t F = best_degree(nr + 1, DC_MIN((uint32_t)DC_TREE_MAX_REGION_FANOUT, nr ? nr : 1), bytes,
                                 chunk, src_Bps, wlat);
        if (nr <= DC_TREE_MAX_REGION_FANOUT && nr > 0) {
            /* few regions: compare against the star explicitly */
            double star = bytes * nr / src_Bps + (chunk * nr / src_Bps + wlat);
            double tf = bytes * F / src_Bps + heap_depth(nr + 1, F) * (chunk * F / src_Bps + wlat);
            if (star <= tf)
                F = nr;
        }
        /* positions: 0 = r0 (gateway = the source), 1..nr = rs[] */
        for (uint32_t p = 0; p <= nr; p++) {
            uint32_t r = p == 0 ? r0 : rs[p - 1].region;
            uint32_t m = mcount[r], base = order[r];
            uint32_t g_node;
            uint32_t start = 0;
            if (p == 0) {
                g_node = src;
            } else {
                uint32_t pr = (p - 1) / F; /* parent position */
                uint32_t preg = pr == 0 ? r0 : rs[pr - 1].region;
                start = rr[r]++ % m;
                g_node = members[base + start];
                const dc_topo_node_t *a = &topo->nodes[gw[preg]], *b = &topo->nodes[g_node];
                double rate = DC_MIN(a->wan_bps, b->wan_bps);
                const dc_topo_rlink_t *l = dc_topo_rlink(topo, preg, r);
                if (l && l->bps > 0)
                    rate = DC_MIN(rate, l->bps);
                if (!push_edge(t, gw[preg], g_node, si, DC_TREE_EDGE_KIND_WAN, rate)) {
                    st = dc_error(DC_ERR_NOMEM, "tree: out of memory");
                    goto fail;
                }
            }
            gw[r] = g_node;
            /* inside the region: heap over [root] + members rotated */
            uint32_t extra = p == 0 ? 1 : 0; /* the sender heads its own region */
            uint32_t n = m + extra;
            if (n <= 1)
                continue;
            double lan = topo->nodes[g_node].lan_bps / 8;
            /* every stream shares the region's NICs */
            uint32_t d = best_degree(n, t->opts.max_degree, bytes, chunk, lan / n_streams,
                                     topo->regions[r].lan_lat_s);
            for (uint32_t q = 1; q < n; q++) {
                uint32_t pq = (q - 1) / d;
                uint32_t child = members[base + (start + q - extra) % m];
                uint32_t parent = pq == 0 ? g_node : members[base + (start + pq - extra) % m];
                double rate = DC_MIN(topo->nodes[parent].lan_bps, topo->nodes[child].lan_bps);
                if (!push_edge(t, parent, child, si, DC_TREE_EDGE_KIND_LAN, rate)) {
                    st = dc_error(DC_ERR_NOMEM, "tree: out of memory");
                    goto fail;
                }
            }
        }
    }
    if ((st = build_views(t)) != DC_OK)
        goto fail;
    free(roff);
    free(rmem);
    free(members);
    free(mcount);
    free(gw);
    free(order);
    free(rr);
    free(sources);
    free(src_streams);
    free(rs);
    *out = t;
    return DC_OK;
fail:
    free(roff);
    free(rmem);
    free(members);
    free(mcount);
    free(gw);
    free(order);
    free(rr);
    free(sources);
    free(src_streams);
    free(rs);
    dc_tree_free(t);
    return st;
}

/*
 * Re-plan without `dead`, per stream:
 *
 *      p                p
 *      |                |            (removed: p->x, x->c1, x->c2, x->c3;
 *      x      ==>      c1            added: p->c1, c1->c2, c1->c3:
 *    / | \            /  \           the fewest possible, each orphan
 *  c1 c2 c3         c2    c3         needs one new parent edge)
 *
 * c1 is x's first child in the same region if any (it inherits x's WAN
 * children when x was a gateway), else the first child.
 */
dc_status_t dc_tree_replan(const dc_tree_t *old, uint32_t dead, dc_tree_t **out, uint32_t *changed)
{
    if (!old || !out)
        return dc_error(DC_ERR_INVALID, "dc_tree_replan: NULL argument");
    if (dead >= old->n_nodes)
        return dc_error(DC_ERR_INVALID, "replan: node %u out of range", dead);
    if (old->dead[dead])
        return dc_error(DC_ERR_INVALID, "replan: node '%s' is already dead", old->topo->nodes[dead].name);
    if (old->topo->nodes[dead].role == DC_TOPO_ROLE_SENDER)
        return dc_error(DC_ERR_INVALID, "replan: node '%s' is a sender; a refit cannot go on without it",
                        old->topo->nodes[dead].name);
    dc_status_t st = DC_OK;
    dc_tree_t *t = calloc(1, sizeof(*t));
    uint32_t *pe = NULL, *promote = NULL;
    if (!t)
        return dc_error(DC_ERR_NOMEM, "replan: out of memory");
    t->topo = old->topo;
    t->opts = old->opts;
    t->n_nodes = old->n_nodes;
    t->n_streams = old->n_streams;
    memcpy(t->stream_base, old->stream_base, sizeof(t->stream_base));
    t->dead = malloc(t->n_nodes);
    t->streams = malloc(sizeof(dc_tree_stream_t) * (t->n_streams ? t->n_streams : 1));
    t->cap_edges = old->n_edges + 1;
    t->edges = malloc(sizeof(dc_tree_edge_t) * t->cap_edges);
    pe = malloc(sizeof(uint32_t) * (old->n_streams ? old->n_streams : 1));  /* parent of dead */
    promote = malloc(sizeof(uint32_t) * (old->n_streams ? old->n_streams : 1));
    if (!t->dead || !t->streams || !t->edges || !pe || !promote) {
        st = dc_error(DC_ERR_NOMEM, "replan: out of memory");
        goto fail;
    }
    memcpy(t->dead, old->dead, t->n_nodes);
    t->dead[dead] = 1;
    memcpy(t->streams, old->streams, sizeof(dc_tree_stream_t) * t->n_streams);
    const uint32_t dreg = old->topo->nodes[dead].region;
    for (uint32_t s = 0; s < old->n_streams; s++)
        pe[s] = promote[s] = UINT32_MAX;
    for (uint32_t e = 0; e < old->n_edges; e++) {
        const dc_tree_edge_t *ed = &old->edges[e];
        if (ed->child == dead)
            pe[ed->stream] = e;
        if (ed->parent == dead) {
            uint32_t *pr = &promote[ed->stream];
            bool same = old->topo->nodes[ed->child].region == dreg;
            if (*pr == UINT32_MAX ||
                (same && old->topo->nodes[old->edges[*pr].child].region != dreg))
                *pr = e;
        }
    }
    uint32_t ch = 0;
    for (uint32_t e = 0; e < old->n_edges; e++) {
        dc_tree_edge_t ed = old->edges[e];
        if (ed.child == dead) {
            ch++;
            uint32_t pr = promote[ed.stream];
            if (pr == UINT32_MAX)
                continue; /* a leaf: just drop it */
            /* p -> c1 keeps the kind of p -> x (WAN into a gateway) */
            ed.child = old->edges[pr].child;
            const dc_topo_node_t *a = &t->topo->nodes[ed.parent], *b = &t->topo->nodes[ed.child];
            ed.kind = a->region == b->region ? DC_TREE_EDGE_KIND_LAN : DC_TREE_EDGE_KIND_WAN;
            ed.rate_bps = ed.kind == DC_TREE_EDGE_KIND_LAN ? DC_MIN(a->lan_bps, b->lan_bps)
                                                 : DC_MIN(a->wan_bps, b->wan_bps);
            t->edges[t->n_edges++] = ed;
            ch++;
        } else if (ed.parent == dead) {
            ch++;
            if (e == promote[ed.stream])
                continue;
            ed.parent = old->edges[promote[ed.stream]].child;
            const dc_topo_node_t *a = &t->topo->nodes[ed.parent], *b = &t->topo->nodes[ed.child];
            ed.kind = a->region == b->region ? DC_TREE_EDGE_KIND_LAN : DC_TREE_EDGE_KIND_WAN;
            ed.rate_bps = ed.kind == DC_TREE_EDGE_KIND_LAN ? DC_MIN(a->lan_bps, b->lan_bps)
                                                 : DC_MIN(a->wan_bps, b->wan_bps);
            t->edges[t->n_edges++] = ed;
            ch++;
        } else {
            t->edges[t->n_edges++] = ed;
        }
    }
    if ((st = build_views(t)) != DC_OK)
        goto fail;
    free(pe);
    free(promote);
    if (changed)
        *changed = ch;
    *out = t;
    return DC_OK;
fail:
    free(pe);
    free(promote);
    dc_tree_free(t);
    return st;
}

uint32_t dc_tree_stream_count(const dc_tree_t *t) { return t ? t->n_streams : 0; }
const dc_tree_stream_t *dc_tree_streams(const dc_tree_t *t) { return t ? t->streams : NULL; }
uint32_t dc_tree_edge_count(const dc_tree_t *t) { return t ? t->n_edges : 0; }
const dc_tree_edge_t *dc_tree_edges(const dc_tree_t *t) { return t ? t->edges : NULL; }

int dc_tree_node_dead(const dc_tree_t *t, uint32_t i)
{
    return t && i < t->n_nodes && t->dead[i];
}

dc_status_t dc_tree_node(const dc_tree_t *t, uint32_t i, dc_tree_node_view_t *out)
{
    if (!t || !out)
        return dc_error(DC_ERR_INVALID, "dc_tree_node: NULL argument");
    dc_status_t st = dc_struct_check(out, sizeof(dc_tree_node_view_t),
                                     sizeof(dc_tree_node_view_t), "dc_tree_node: out");
    if (st != DC_OK)
        return st;
    if (i >= t->n_nodes)
        return dc_error(DC_ERR_INVALID, "dc_tree_node: node %u out of range (%u nodes)", i, t->n_nodes);
    dc_tree_node_view_t v = {.size = sizeof(v)};
    v.n_parents = t->par_off[i + 1] - t->par_off[i];
    v.parents = t->par_links + t->par_off[i];
    v.n_children = t->chi_off[i + 1] - t->chi_off[i];
    v.children = t->chi_links + t->chi_off[i];
    const dc_topo_node_t *n = &t->topo->nodes[i];
    v.need_shards = (n->role == DC_TOPO_ROLE_RECEIVER && !t->dead[i]) ? n->shards : 0;
    *out = v;
    return DC_OK;
}

uint32_t dc_tree_stream_of(const dc_tree_t *t, uint32_t shard, uint64_t chunk)
{
    if (!t || shard >= DC_TOPO_MAX_SHARDS || t->stream_base[shard] == UINT32_MAX)
        return UINT32_MAX;
    uint32_t b = t->stream_base[shard];
    return b + (uint32_t)(chunk % t->streams[b].n_stripes);
}
