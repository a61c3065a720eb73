/* print.c - the plan as text, JSON or graphviz DOT, with per-edge load and
 * the expected bottleneck (the busiest NIC / WAN share / region link). */
#include "tree/tree_int.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* As the engine connects an edge: tcp between regions, config transport
 * inside one ("auto": the first of rdma, ucx, tcp usable on the node). */
static const char *transport(uint32_t kind)
{
    if (kind == DC_TREE_EDGE_KIND_WAN)
        return "tcp";
    const char *t = dc_config_get("transport");
    return t && *t ? t : "auto";
}

/* Busiest resource: bytes through it / its rate. */
typedef struct {
    double seconds;
    char what[128];
} bneck_t;

static void bottleneck(const dc_tree_t *t, uint64_t payload, bneck_t *b)
{
    const dc_topo_t *tp = t->topo;
    uint32_t N = t->n_nodes;
    double *acc = calloc((size_t)N * 4, sizeof(double)); /* lan out, lan in, wan out, wan in */
    b->seconds = 0;
    snprintf(b->what, sizeof(b->what), "none");
    if (!acc)
        return;
    for (uint32_t e = 0; e < t->n_edges; e++) {
        const dc_tree_edge_t *ed = &t->edges[e];
        double by = dc_tree_stream_bytes(t, ed->stream, payload);
        acc[ed->parent * 4 + 0] += by;
        acc[ed->child * 4 + 1] += by;
        if (ed->kind == DC_TREE_EDGE_KIND_WAN) {
            acc[ed->parent * 4 + 2] += by;
            acc[ed->child * 4 + 3] += by;
        }
    }
    static const char *names[4] = {"lan-out", "lan-in", "wan-out", "wan-in"};
    for (uint32_t i = 0; i < N; i++)
        for (int k = 0; k < 4; k++) {
            double rate = (k < 2 ? tp->nodes[i].lan_bps : tp->nodes[i].wan_bps) / 8;
            double s = acc[i * 4 + k] / rate;
            if (s > b->seconds * (1 + 1e-12)) {
                b->seconds = s;
                snprintf(b->what, sizeof(b->what), "%s %s (%.3g Gbit/s)", names[k], tp->nodes[i].name,
                         rate * 8 / 1e9);
            }
        }
    free(acc);
    for (uint32_t l = 0; l < tp->n_rlinks; l++) {
        const dc_topo_rlink_t *rl = &tp->rlinks[l];
        if (rl->bps <= 0)
            continue;
        double by[2] = {0, 0};
        for (uint32_t e = 0; e < t->n_edges; e++) {
            const dc_tree_edge_t *ed = &t->edges[e];
            uint32_t ra = tp->nodes[ed->parent].region, rb = tp->nodes[ed->child].region;
            if (ra == rl->a && rb == rl->b)
                by[0] += dc_tree_stream_bytes(t, ed->stream, payload);
            else if (ra == rl->b && rb == rl->a)
                by[1] += dc_tree_stream_bytes(t, ed->stream, payload);
        }
        double s = DC_MAX(by[0], by[1]) / (rl->bps / 8);
        if (s > b->seconds) {
            b->seconds = s;
            snprintf(b->what, sizeof(b->what), "region-link %s<->%s (%.3g Gbit/s)",
                     tp->regions[rl->a].name, tp->regions[rl->b].name, rl->bps / 1e9);
        }
    }
}

static void print_text(const dc_tree_t *t, uint64_t payload, FILE *fp)
{
    const dc_topo_t *tp = t->topo;
    uint32_t alive = 0, wan = 0;
    for (uint32_t i = 0; i < t->n_nodes; i++)
        alive += !t->dead[i];
    for (uint32_t e = 0; e < t->n_edges; e++)
        wan += t->edges[e].kind == DC_TREE_EDGE_KIND_WAN;
    fprintf(fp, "topology %s: %u nodes (%u alive), %u regions, %u shards, %u streams, %u edges (%u WAN)\n",
            tp->source, t->n_nodes, alive, tp->n_regions, tp->n_shards, t->n_streams, t->n_edges, wan);
    fprintf(fp, "streams:\n");
    for (uint32_t s = 0; s < t->n_streams && s < 64; s++) {
        const dc_tree_stream_t *x = &t->streams[s];
        fprintf(fp, "  stream %u: shard %u stripe %u/%u from %s\n", s, x->shard, x->stripe, x->n_stripes,
                tp->nodes[x->source].name);
    }
    if (t->n_streams > 64)
        fprintf(fp, "  ... %u more streams (use --json)\n", t->n_streams - 64);
    fprintf(fp, "edges (parent -> child  stream  kind  transport  rate  load):\n");
    uint32_t shown = 0;
    for (uint32_t e = 0; e < t->n_edges; e++) {
        if (shown == 200) {
            fprintf(fp, "  ... %u more edges (use --json or --dot)\n", t->n_edges - shown);
            break;
        }
        const dc_tree_edge_t *ed = &t->edges[e];
        char lb[32] = "-";
        if (payload)
            dc_fmt_bytes((uint64_t)dc_tree_stream_bytes(t, ed->stream, payload), lb, sizeof(lb));
        fprintf(fp, "  %s -> %s  s%u  %s  %s  %.3g Gbit/s  %s\n", tp->nodes[ed->parent].name,
                tp->nodes[ed->child].name, ed->stream, ed->kind == DC_TREE_EDGE_KIND_WAN ? "WAN" : "LAN",
                transport(ed->kind), ed->rate_bps / 1e9, lb);
        shown++;
    }
    if (payload) {
        bneck_t b;
        bottleneck(t, payload, &b);
        char pb[32];
        fprintf(fp, "expected bottleneck for a %s version: %s, >= %.3f s of transfer\n",
                dc_fmt_bytes(payload, pb, sizeof(pb)), b.what, b.seconds);
    }
}

static dc_status_t print_json(const dc_tree_t *t, uint64_t payload, FILE *fp)
{
    const dc_topo_t *tp = t->topo;
    json_t *root = json_object(), *nodes = json_array(), *edges = json_array(), *streams = json_array(),
           *regions = json_array();
    if (!root || !nodes || !edges || !streams || !regions)
        goto nomem;
    json_object_set_new(root, "topology", json_string(tp->source));
    json_object_set_new(root, "shards", json_integer(tp->n_shards));
    for (uint32_t r = 0; r < tp->n_regions; r++)
        json_array_append_new(regions, json_string(tp->regions[r].name));
    for (uint32_t i = 0; i < t->n_nodes; i++) {
        const dc_topo_node_t *n = &tp->nodes[i];
        json_array_append_new(nodes, json_pack("{s:s,s:s,s:s,s:s,s:f,s:f,s:I,s:b}", "name", n->name, "addr",
                                               n->addr, "region", tp->regions[n->region].name, "role",
                                               n->role == DC_TOPO_ROLE_SENDER ? "sender" : "receiver", "lan_bps",
                                               n->lan_bps, "wan_bps", n->wan_bps, "shards",
                                               (json_int_t)n->shards, "dead", (int)t->dead[i]));
    }
    for (uint32_t s = 0; s < t->n_streams; s++) {
        const dc_tree_stream_t *x = &t->streams[s];
        json_array_append_new(streams, json_pack("{s:i,s:i,s:i,s:i}", "shard", x->shard, "stripe", x->stripe,
                                                 "n_stripes", x->n_stripes, "source", x->source));
    }
    for (uint32_t e = 0; e < t->n_edges; e++) {
        const dc_tree_edge_t *ed = &t->edges[e];
        json_t *je = json_pack("{s:i,s:i,s:i,s:s,s:s,s:f}", "parent", ed->parent, "child", ed->child, "stream",
                               ed->stream, "kind", ed->kind == DC_TREE_EDGE_KIND_WAN ? "wan" : "lan", "transport",
                               transport(ed->kind), "rate_bps", ed->rate_bps);
        if (je && payload)
            json_object_set_new(je, "load_bytes", json_real(dc_tree_stream_bytes(t, ed->stream, payload)));
        json_array_append_new(edges, je);
    }
    json_object_set_new(root, "regions", regions);
    json_object_set_new(root, "nodes", nodes);
    json_object_set_new(root, "streams", streams);
    json_object_set_new(root, "edges", edges);
    if (payload) {
        bneck_t b;
        bottleneck(t, payload, &b);
        json_object_set_new(root, "payload_bytes", json_integer((json_int_t)payload));
        json_object_set_new(root, "bottleneck", json_string(b.what));
        json_object_set_new(root, "bottleneck_seconds", json_real(b.seconds));
    }
    if (json_dumpf(root, fp, JSON_INDENT(1) | JSON_COMPACT) != 0) {
        json_decref(root);
        return dc_error(DC_ERR_IO, "plan: writing JSON failed");
    }
    fputc('\n', fp);
    json_decref(root);
    return DC_OK;
nomem:
    json_decref(root);
    json_decref(nodes);
    json_decref(edges);
    json_decref(streams);
    json_decref(regions);
    return dc_error(DC_ERR_NOMEM, "plan: out of memory building JSON");
}

static void dot_id(FILE *fp, const char *s)
{
    fputc('"', fp);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', fp);
        fputc(*s, fp);
    }
    fputc('"', fp);
}

static void print_dot(const dc_tree_t *t, uint64_t payload, FILE *fp)
{
    const dc_topo_t *tp = t->topo;
    fprintf(fp, "digraph deltacast_plan {\n  rankdir=LR;\n  node [shape=box, fontsize=10];\n");
    for (uint32_t r = 0; r < tp->n_regions; r++) {
        fprintf(fp, "  subgraph \"cluster_%u\" {\n    label=", r);
        dot_id(fp, tp->regions[r].name);
        fprintf(fp, ";\n");
        for (uint32_t i = 0; i < t->n_nodes; i++) {
            if (tp->nodes[i].region != r)
                continue;
            fprintf(fp, "    ");
            dot_id(fp, tp->nodes[i].name);
            fprintf(fp, " [%s%s];\n", tp->nodes[i].role == DC_TOPO_ROLE_SENDER ? "style=filled, fillcolor=lightblue" : "",
                    t->dead[i] ? "style=dashed, color=red" : "");
        }
        fprintf(fp, "  }\n");
    }
    /* one arrow per link (node pair), labelled with its streams */
    for (uint32_t i = 0; i < t->n_nodes; i++) {
        for (uint32_t k = t->chi_off[i]; k < t->chi_off[i + 1]; k++) {
            const dc_tree_link_t *l = &t->chi_links[k];
            fprintf(fp, "  ");
            dot_id(fp, tp->nodes[i].name);
            fprintf(fp, " -> ");
            dot_id(fp, tp->nodes[l->peer].name);
            double by = 0;
            for (uint32_t s = 0; s < l->n_streams; s++)
                by += payload ? dc_tree_stream_bytes(t, l->streams[s], payload) : 0;
            char lb[32] = "";
            if (payload)
                dc_fmt_bytes((uint64_t)by, lb, sizeof(lb));
            fprintf(fp, " [label=\"%u stream%s %s\"%s];\n", l->n_streams, l->n_streams == 1 ? "" : "s", lb,
                    l->kind == DC_TREE_EDGE_KIND_WAN ? ", color=red, penwidth=2" : "");
        }
    }
    fprintf(fp, "}\n");
}

dc_status_t dc_tree_print(const dc_tree_t *t, uint64_t payload, dc_tree_format_t fmt, FILE *fp)
{
    if (!t || !fp)
        return dc_error(DC_ERR_INVALID, "dc_tree_print: NULL argument");
    switch (fmt) {
    case DC_TREE_FORMAT_TEXT:
        print_text(t, payload, fp);
        return DC_OK;
    case DC_TREE_FORMAT_JSON:
        return print_json(t, payload, fp);
    case DC_TREE_FORMAT_DOT:
        print_dot(t, payload, fp);
        return DC_OK;
    }
    return dc_error(DC_ERR_INVALID, "dc_tree_print: unknown format %d", (int)fmt);
}
