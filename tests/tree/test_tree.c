/* test_tree.c - relay-tree properties, exhaustively over small topologies,
 * determinism, node views, and re-planning after a death. */
#include "testenv.h"
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deltacast.h"

/* Check every property of `t` over `topo`; returns the number of edges. */
static void check_tree(const dc_topo_t *topo, const dc_tree_t *t, const char *what)
{
    uint32_t N = dc_topo_node_count(topo), S = dc_tree_stream_count(t), E = dc_tree_edge_count(t);
    const dc_tree_edge_t *e = dc_tree_edges(t);
    const dc_tree_stream_t *st = dc_tree_streams(t);
    dc_topo_node_info_t *info = calloc(N, sizeof(*info));
    int32_t *parent = malloc(sizeof(int32_t) * N);
    cr_assert(info && parent);
    for (uint32_t i = 0; i < N; i++) {
        info[i].size = sizeof(info[i]);
        cr_assert_eq(dc_topo_node(topo, i, &info[i]), DC_OK);
    }
    uint32_t R = dc_topo_region_count(topo);
    uint32_t *wan_in = calloc(R, sizeof(uint32_t));
    uint32_t seen_edges = 0;
    for (uint32_t s = 0; s < S; s++) {
        const uint32_t shard = st[s].shard;
        cr_assert(st[s].stripe < st[s].n_stripes);
        cr_assert_eq(info[st[s].source].role, DC_TOPO_ROLE_SENDER, "%s: stream %u source", what, s);
        cr_assert(info[st[s].source].shards >> shard & 1, "%s: source does not own shard", what);
        cr_assert_eq(dc_tree_stream_of(t, shard, st[s].stripe), s, "%s: stream_of", what);
        for (uint32_t i = 0; i < N; i++)
            parent[i] = -1;
        memset(wan_in, 0, R * sizeof(uint32_t));
        for (uint32_t k = 0; k < E; k++) {
            if (e[k].stream != s)
                continue;
            seen_edges++;
            cr_assert_neq(e[k].parent, e[k].child, "%s: self edge", what);
            cr_assert_eq(parent[e[k].child], -1, "%s: stream %u reaches %s twice", what, s, info[e[k].child].name);
            parent[e[k].child] = (int32_t)e[k].parent;
            cr_assert(!dc_tree_node_dead(t, e[k].child) && !dc_tree_node_dead(t, e[k].parent),
                      "%s: edge touches a dead node", what);
            uint32_t ra = info[e[k].parent].region_index, rb = info[e[k].child].region_index;
            cr_assert_eq(e[k].kind, ra == rb ? DC_TREE_EDGE_KIND_LAN : DC_TREE_EDGE_KIND_WAN, "%s: edge kind", what);
            if (ra != rb)
                wan_in[rb]++;
        }
        for (uint32_t r = 0; r < R; r++)
            cr_assert(wan_in[r] <= 1, "%s: stream %u enters region %u %u times", what, s, r, wan_in[r]);
        for (uint32_t i = 0; i < N; i++) {
            bool wants = info[i].role == DC_TOPO_ROLE_RECEIVER && (info[i].shards >> shard & 1) && !dc_tree_node_dead(t, i);
            if (i == st[s].source) {
                cr_assert_eq(parent[i], -1, "%s: the source has a parent", what);
                continue;
            }
            cr_assert_eq(parent[i] >= 0, wants, "%s: stream %u (shard %u) and %s: reached=%d wants=%d", what, s,
                         shard, info[i].name, parent[i] >= 0, wants);
            if (parent[i] < 0)
                continue;
            /* no cycle: walk up to the source within N steps */
            uint32_t x = i, steps = 0;
            while (x != st[s].source) {
                cr_assert(parent[x] >= 0, "%s: %s not connected to the source", what, info[i].name);
                x = (uint32_t)parent[x];
                cr_assert(++steps <= N, "%s: cycle through %s", what, info[i].name);
            }
        }
    }
    cr_assert_eq(seen_edges, E, "%s: edges with an unknown stream", what);
    /* every shard needed by someone has streams; the views agree with edges */
    uint32_t view_edges = 0;
    for (uint32_t i = 0; i < N; i++) {
        dc_tree_node_view_t v = {.size = sizeof(v)};
        cr_assert_eq(dc_tree_node(t, i, &v), DC_OK);
        for (uint32_t k = 0; k < v.n_children; k++) {
            view_edges += v.children[k].n_streams;
            for (uint32_t q = 0; q < v.children[k].n_streams; q++) {
                bool found = false;
                for (uint32_t j = 0; j < E && !found; j++)
                    found = e[j].parent == i && e[j].child == v.children[k].peer &&
                            e[j].stream == v.children[k].streams[q];
                cr_assert(found, "%s: view of %s has a link not in the edges", what, info[i].name);
            }
        }
        uint32_t in = 0;
        for (uint32_t k = 0; k < v.n_parents; k++)
            in += v.parents[k].n_streams;
        uint32_t need_streams = 0;
        for (uint32_t s = 0; s < S; s++)
            need_streams += (v.need_shards >> st[s].shard & 1);
        if (info[i].role == DC_TOPO_ROLE_RECEIVER && !dc_tree_node_dead(t, i)) {
            cr_assert_eq(in, need_streams, "%s: %s receives %u streams, needs %u", what, info[i].name, in,
                         need_streams);
            /* it needs its shards, and each of them has a stream */
            cr_assert_eq(v.need_shards, info[i].shards, "%s: %s needs shards %llx, holds %llx", what,
                         info[i].name, (unsigned long long)v.need_shards,
                         (unsigned long long)info[i].shards);
            for (uint32_t sh = 0; sh < 64; sh++) {
                if (!(info[i].shards >> sh & 1))
                    continue;
                bool streamed = false;
                for (uint32_t s = 0; s < S && !streamed; s++)
                    streamed = st[s].shard == sh;
                cr_assert(streamed, "%s: shard %u needed by %s has no stream", what, sh, info[i].name);
            }
        }
    }
    cr_assert_eq(view_edges, E, "%s: views hold %u edges, tree %u", what, view_edges, E);
    free(info);
    free(parent);
    free(wan_in);
}

/* A topology of `r` receiver regions with n[k] receivers, `senders`
 * senders, `shards` shards and receiver k needing mask (k % 3 == 1 ? shard
 * 0 only : all). */
static dc_topo_t *make_topo(uint32_t senders, uint32_t shards, uint32_t r, const uint32_t *n, bool partial,
                            bool limited_link)
{
    char buf[16384];
    size_t o = 0;
    o += (size_t)snprintf(buf + o, sizeof(buf) - o, "shards: %u\nregions:\n  - name: train\n    nodes:\n", shards);
    for (uint32_t s = 0; s < senders; s++)
        o += (size_t)snprintf(buf + o, sizeof(buf) - o, "      - {host: s%u, role: sender}\n", s);
    uint32_t k = 0;
    for (uint32_t g = 0; g < r; g++) {
        o += (size_t)snprintf(buf + o, sizeof(buf) - o, "  - name: g%u\n    nodes:\n", g);
        if (n[g] == 0)
            o += (size_t)snprintf(buf + o, sizeof(buf) - o, "      []\n");
        for (uint32_t i = 0; i < n[g]; i++, k++) {
            if (partial && k % 3 == 1)
                o += (size_t)snprintf(buf + o, sizeof(buf) - o, "      - {host: g%u-%u, shards: [0]}\n", g, i);
            else
                o += (size_t)snprintf(buf + o, sizeof(buf) - o, "      - {host: g%u-%u}\n", g, i);
        }
    }
    if (limited_link && r >= 1)
        o += (size_t)snprintf(buf + o, sizeof(buf) - o, "links:\n  - {between: [train, g0], rate: 2gbit}\n");
    dc_topo_t *t = NULL;
    dc_status_t st = dc_topo_parse(buf, o, "gen.yaml", &t);
    if (st != DC_OK)
        return NULL;
    return t;
}

Test(tree, exhaustive_small_topologies)
{
    uint32_t cases = 0;
    for (uint32_t senders = 1; senders <= 3; senders++)
        for (uint32_t shards = 1; shards <= senders; shards++)
            for (uint32_t r = 1; r <= 3; r++)
                for (uint32_t mask = 0; mask < 27; mask++) { /* each region 1..3 receivers */
                    uint32_t n[3] = {mask % 3 + 1, mask / 3 % 3 + 1, mask / 9 % 3 + 1};
                    if (r < 3 && mask >= (r == 1 ? 3u : 9u))
                        continue;
                    for (int partial = 0; partial < 2; partial++)
                        for (int lim = 0; lim < 2; lim++) {
                            dc_topo_t *topo = make_topo(senders, shards, r, n, partial, lim);
                            cr_assert_not_null(topo, "%s", dc_last_error());
                            for (uint64_t payload = 1000; payload <= 1000000000000ULL; payload *= 1000) {
                                dc_tree_opts_t o = {.size = sizeof(o), .payload_bytes = payload};
                                dc_tree_t *t = NULL;
                                cr_assert_eq(dc_tree_plan(topo, &o, &t), DC_OK, "%s", dc_last_error());
                                char what[128];
                                snprintf(what, sizeof(what), "senders=%u shards=%u r=%u n=%u,%u,%u partial=%d payload=%llu",
                                         senders, shards, r, n[0], n[1], n[2], partial,
                                         (unsigned long long)payload);
                                check_tree(topo, t, what);
                                /* re-plan for every receiver's death, and twice */
                                uint32_t N = dc_topo_node_count(topo);
                                for (uint32_t d = senders; d < N; d++) {
                                    dc_tree_t *t2 = NULL, *t3 = NULL;
                                    uint32_t changed = 0;
                                    cr_assert_eq(dc_tree_replan(t, d, &t2, &changed), DC_OK, "%s", dc_last_error());
                                    check_tree(topo, t2, what);
                                    /* minimal: per stream through d, 1 in + k out removed, k added */
                                    uint32_t expect = 0;
                                    const dc_tree_edge_t *e = dc_tree_edges(t);
                                    for (uint32_t s = 0; s < dc_tree_stream_count(t); s++) {
                                        uint32_t in = 0, out = 0;
                                        for (uint32_t j = 0; j < dc_tree_edge_count(t); j++)
                                            if (e[j].stream == s) {
                                                in += e[j].child == d;
                                                out += e[j].parent == d;
                                            }
                                        expect += in ? 1 + 2 * out : 0;
                                    }
                                    cr_assert_eq(changed, expect, "%s: replan of %u changed %u edges, minimum %u",
                                                 what, d, changed, expect);
                                    /* every edge not touching d survives */
                                    const dc_tree_edge_t *e2 = dc_tree_edges(t2);
                                    for (uint32_t j = 0; j < dc_tree_edge_count(t); j++) {
                                        if (e[j].parent == d || e[j].child == d)
                                            continue;
                                        bool kept = false;
                                        for (uint32_t q = 0; q < dc_tree_edge_count(t2) && !kept; q++)
                                            kept = e2[q].parent == e[j].parent && e2[q].child == e[j].child &&
                                                   e2[q].stream == e[j].stream;
                                        cr_assert(kept, "%s: replan dropped an unrelated edge", what);
                                    }
                                    if (d + 1 < N) {
                                        cr_assert_eq(dc_tree_replan(t2, d + 1, &t3, NULL), DC_OK);
                                        check_tree(topo, t3, what);
                                        dc_tree_free(t3);
                                    }
                                    cr_assert_eq(dc_tree_replan(t2, d, &t3, NULL), DC_ERR_INVALID, "dead twice");
                                    dc_tree_free(t2);
                                }
                                dc_tree_t *t2 = NULL;
                                cr_assert_eq(dc_tree_replan(t, 0, &t2, NULL), DC_ERR_INVALID, "sender death");
                                dc_tree_free(t);
                                cases++;
                            }
                            dc_topo_free(topo);
                        }
                }
    cr_assert(cases > 500, "only %u cases", cases);
}

Test(tree, deterministic)
{
    for (int rep = 0; rep < 3; rep++) {
        dc_topo_t *a = NULL, *b = NULL;
        cr_assert_eq(dc_topo_synthetic(5, 7, 0, 0, &a), DC_OK);
        cr_assert_eq(dc_topo_synthetic(5, 7, 0, 0, &b), DC_OK);
        dc_tree_t *ta = NULL, *tb = NULL;
        cr_assert_eq(dc_tree_plan(a, NULL, &ta), DC_OK);
        cr_assert_eq(dc_tree_plan(b, NULL, &tb), DC_OK);
        cr_assert_eq(dc_tree_edge_count(ta), dc_tree_edge_count(tb));
        cr_assert_eq(memcmp(dc_tree_edges(ta), dc_tree_edges(tb), sizeof(dc_tree_edge_t) * dc_tree_edge_count(ta)), 0);
        cr_assert_eq(memcmp(dc_tree_streams(ta), dc_tree_streams(tb),
                            sizeof(dc_tree_stream_t) * dc_tree_stream_count(ta)), 0);
        dc_tree_free(ta);
        dc_tree_free(tb);
        dc_topo_free(a);
        dc_topo_free(b);
    }
}

Test(tree, streams_spread_over_gateways)
{
    /* 8 senders, 8 receivers in one other region: 8 WAN edges, each into a
     * different gateway (NeMo-DCR's relay layout) */
    dc_topo_t *topo = NULL;
    cr_assert_eq(dc_topo_synthetic(1, 8, 0, 0, &topo), DC_OK);
    dc_tree_t *t = NULL;
    cr_assert_eq(dc_tree_plan(topo, NULL, &t), DC_OK);
    check_tree(topo, t, "1:8");
    uint32_t gw_hits[32] = {0}, wan = 0;
    for (uint32_t k = 0; k < dc_tree_edge_count(t); k++)
        if (dc_tree_edges(t)[k].kind == DC_TREE_EDGE_KIND_WAN) {
            wan++;
            gw_hits[dc_tree_edges(t)[k].child]++;
        }
    cr_assert_eq(wan, 8);
    for (uint32_t i = 8; i < 16; i++)
        cr_assert_eq(gw_hits[i], 1, "gateway %u used %u times", i, gw_hits[i]);
    dc_tree_free(t);
    dc_topo_free(topo);
}

Test(tree, wide_sender_is_striped_over_gateways)
{
    /* one sender with 40 Gbit/s WAN, receivers with 5: the shard is split
     * into 8 stripes entering through 8 different gateways */
    const char *y = "regions:\n  - name: t\n    nodes:\n      - {host: s, role: sender, wan: 40gbit}\n"
                    "  - name: r\n    wan: 5gbit\n    nodes:\n"
                    "      - {host: a}\n      - {host: b}\n      - {host: c}\n      - {host: d}\n"
                    "      - {host: e}\n      - {host: f}\n      - {host: g}\n      - {host: h}\n";
    dc_topo_t *topo = NULL;
    cr_assert_eq(dc_topo_parse(y, strlen(y), "w.yaml", &topo), DC_OK, "%s", dc_last_error());
    dc_tree_t *t = NULL;
    cr_assert_eq(dc_tree_plan(topo, NULL, &t), DC_OK);
    check_tree(topo, t, "striped");
    cr_assert_eq(dc_tree_stream_count(t), 8);
    uint32_t hits[9] = {0};
    for (uint32_t k = 0; k < dc_tree_edge_count(t); k++)
        if (dc_tree_edges(t)[k].kind == DC_TREE_EDGE_KIND_WAN)
            hits[dc_tree_edges(t)[k].child]++;
    for (uint32_t i = 1; i <= 8; i++)
        cr_assert_eq(hits[i], 1);
    /* chunks map to stripes round-robin */
    cr_assert_eq(dc_tree_stream_of(t, 0, 0), 0);
    cr_assert_eq(dc_tree_stream_of(t, 0, 9), 1);
    cr_assert_eq(dc_tree_stream_of(t, 5, 0), UINT32_MAX);
    dc_tree_free(t);
    dc_topo_free(topo);
}

Test(tree, shard_aware_node_views)
{
    dc_topo_t *topo = NULL;
    const char *src = dc_test_src();
    char p[4096];
    snprintf(p, sizeof(p), "%s/topology/examples/small.yaml", src ? src : "../..");
    cr_assert_eq(dc_topo_load(p, &topo), DC_OK, "%s", dc_last_error());
    dc_tree_t *t = NULL;
    cr_assert_eq(dc_tree_plan(topo, NULL, &t), DC_OK);
    check_tree(topo, t, "small.yaml");
    uint32_t i;
    cr_assert_eq(dc_topo_find(topo, "euw-roll-03", &i), DC_OK);
    dc_tree_node_view_t v = {.size = sizeof(v)};
    cr_assert_eq(dc_tree_node(t, i, &v), DC_OK);
    cr_assert_eq(v.need_shards, 2);
    for (uint32_t k = 0; k < v.n_parents; k++)
        for (uint32_t s = 0; s < v.parents[k].n_streams; s++)
            cr_assert_eq(dc_tree_streams(t)[v.parents[k].streams[s]].shard, 1, "euw-roll-03 gets shard 0");
    /* a relay forwards only what its children need */
    for (uint32_t n = 0; n < dc_topo_node_count(topo); n++) {
        cr_assert_eq(dc_tree_node(t, n, &v), DC_OK);
        for (uint32_t k = 0; k < v.n_children; k++) {
            dc_tree_node_view_t cv = {.size = sizeof(cv)};
            cr_assert_eq(dc_tree_node(t, v.children[k].peer, &cv), DC_OK);
            for (uint32_t s = 0; s < v.children[k].n_streams; s++)
                cr_assert(cv.need_shards >> dc_tree_streams(t)[v.children[k].streams[s]].shard & 1);
        }
    }
    cr_assert_eq(dc_tree_node(t, 999, &v), DC_ERR_INVALID);
    dc_tree_free(t);
    dc_topo_free(topo);
}

Test(tree, scale_10000_nodes_100_regions)
{
    dc_topo_t *topo = NULL;
    cr_assert_eq(dc_topo_synthetic(99, 100, 0, 0, &topo), DC_OK);
    cr_assert_eq(dc_topo_node_count(topo), 10000);
    dc_tree_t *t = NULL;
    cr_assert_eq(dc_tree_plan(topo, NULL, &t), DC_OK, "%s", dc_last_error());
    /* a stream per shard at least: the counts below hold for none too */
    cr_assert_geq(dc_tree_stream_count(t), dc_topo_shard_count(topo));
    /* each stream enters each of the 99 receiver regions exactly once */
    uint32_t wan = 0;
    for (uint32_t k = 0; k < dc_tree_edge_count(t); k++)
        wan += dc_tree_edges(t)[k].kind == DC_TREE_EDGE_KIND_WAN;
    cr_assert_eq(wan, dc_tree_stream_count(t) * 99);
    cr_assert_eq(dc_tree_edge_count(t), dc_tree_stream_count(t) * 9900);
    dc_tree_free(t);
    dc_topo_free(topo);
}
