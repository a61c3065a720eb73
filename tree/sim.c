/*
 * sim.c - flow-level discrete-event simulation of one refit over a plan.
 *
 * Every tree edge is a flow of its stream's bytes.  Between events, rates
 * are the max-min fair share (progressive filling) of the resources each
 * flow crosses: sender NIC out, receiver NIC in, and for WAN hops both
 * ends' WAN share and the region-pair link; a receiver's apply throughput
 * caps what enters it.  Pipelining: a flow may be at most its parent's
 * progress minus one chunk (cut-through per chunk) until the parent is
 * complete, and starts one hop latency after its first chunk is there; a
 * flow that has caught up with its parent runs at its parent's rate.  A
 * stream's root flows follow the sender's encoder (encode_GBps * ratio
 * payload bytes/s, shared by the streams it sources).  With cpu_cores > 0
 * all nodes share one CPU pool (a test machine running every node): the
 * encoders' pace is also held to what the pool can encode and apply at
 * once (see "Shared CPU pool" below); the bottleneck is then "cpu".
 *
 *   parent  ====[d_p]=====>            gap = d_p - d_c >= chunk
 *   child   ==[d_c]=>                  (or the parent is done)
 *
 * Events: a flow completes, catches up with its parent, gets its first
 * chunk, starts after the latency, or an encoder finishes.  A flow's
 * progress counts bytes arrived at the child.  The predicted time is the
 * last completion; the bottleneck is found
 * by walking from the last flow up through parents while "waiting for the
 * parent" is what held it most.
 */
#include "tree/tree_int.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define MAXRES 6
enum { WHY_ENCODE = MAXRES, WHY_PARENT, WHY_LATENCY, WHY_N };

typedef struct {
    double size, d, rate, lat, start_at, done_at;
    int32_t up;      /* parent flow, -1: the encoder */
    uint32_t res[MAXRES];
    uint8_t n_res, done, started, frozen, follow;
    uint8_t why;     /* reason of the current rate */
    double held[WHY_N];
} flow_t;

typedef struct {
    double cap, rem;
    uint32_t n_unfrozen, ver;
    char kind[16];
    uint32_t node, a, b; /* for naming */
} res_t;

typedef struct {
    double key;
    uint32_t res, ver;
} hent_t;

static void heap_push(hent_t *h, uint32_t *n, double key, uint32_t res, uint32_t ver)
{
    uint32_t i = (*n)++;
    h[i] = (hent_t){key, res, ver};
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (h[p].key < h[i].key || (h[p].key == h[i].key && h[p].res <= h[i].res))
            break;
        hent_t x = h[p];
        h[p] = h[i];
        h[i] = x;
        i = p;
    }
}

static void heap_pop(hent_t *h, uint32_t *n)
{
    h[0] = h[--(*n)];
    uint32_t i = 0;
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < *n && (h[l].key < h[m].key || (h[l].key == h[m].key && h[l].res < h[m].res)))
            m = l;
        if (r < *n && (h[r].key < h[m].key || (h[r].key == h[m].key && h[r].res < h[m].res)))
            m = r;
        if (m == i)
            break;
        hent_t x = h[m];
        h[m] = h[i];
        h[i] = x;
        i = m;
    }
}

typedef struct {
    const double *enc_rate;
    const dc_tree_edge_t *edges;
} enc_ctx_t;

static int cmp_enc(const void *a, const void *b, void *ctx)
{
    const enc_ctx_t *c = ctx;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    double rx = c->enc_rate[c->edges[x].stream], ry = c->enc_rate[c->edges[y].stream];
    if (rx != ry)
        return rx < ry ? -1 : 1;
    return x < y ? -1 : x > y;
}

dc_status_t dc_sim_run(const dc_tree_t *t, const dc_sim_opts_t *up, dc_sim_result_t *out)
{
    if (!t || !up || !out)
        return dc_error(DC_ERR_INVALID, "dc_sim_run: NULL argument");
    /* cpu_cores came last: callers built before it pass the smaller size */
    dc_sim_opts_t pv;
    dc_status_t cst = dc_struct_in(&pv, sizeof(pv), up, offsetof(dc_sim_opts_t, cpu_cores),
                                   "dc_sim_run: options");
    if (cst == DC_OK)
        cst = dc_struct_check(out, sizeof(dc_sim_result_t), sizeof(dc_sim_result_t),
                              "dc_sim_run: result");
    if (cst != DC_OK)
        return cst;
    const dc_sim_opts_t *p = &pv;
    const double cores = p->cpu_cores;
    if (!(cores >= 0) || !isfinite(cores) || cores > 1e7)
        return dc_error(DC_ERR_INVALID, "simulate: cpu_cores must be in [0, 1e7] (0: a CPU per node)");
    if (p->params == 0 || p->params > (1ULL << 50))
        return dc_error(DC_ERR_INVALID, "simulate: params must be in 1..2^50");
    double ratio = p->payload_ratio > 0 ? p->payload_ratio : 0.0235;
    if (ratio > 2 || !isfinite(ratio) || p->encode_GBps < 0 || p->apply_GBps < 0 ||
        !isfinite(p->encode_GBps) || !isfinite(p->apply_GBps))
        return dc_error(DC_ERR_INVALID, "simulate: payload ratio must be in (0, 2], throughputs >= 0");
    const dc_topo_t *tp = t->topo;
    const uint32_t N = t->n_nodes, E = t->n_edges;
    dc_sim_result_t r = {.size = sizeof(r)};
    r.dense_bytes = p->params * 2;
    r.payload_bytes = (uint64_t)llround((double)r.dense_bytes * ratio);
    r.nodes = N;
    const double payload = (double)r.payload_bytes;
    const double chunk = p->chunk_bytes ? (double)p->chunk_bytes : (double)(4u << 20);

    dc_status_t st = DC_OK;
    flow_t *f = calloc(E ? E : 1, sizeof(*f));
    uint32_t nres_cap = N * 5 + tp->n_rlinks * 2 + 1;
    res_t *res = calloc(nres_cap, sizeof(*res));
    int32_t *map = malloc(sizeof(int32_t) * (N ? N : 1));
    uint32_t *coff = calloc(E + 1, sizeof(uint32_t)), *cl = malloc(sizeof(uint32_t) * (E ? E : 1));
    uint32_t *stack = malloc(sizeof(uint32_t) * (E ? E : 1));
    double *enc_rate = calloc(t->n_streams ? t->n_streams : 1, sizeof(double));
    uint32_t *src_cnt = calloc(N ? N : 1, sizeof(uint32_t));
    uint32_t *enc_list = malloc(sizeof(uint32_t) * (E ? E : 1));
    uint32_t *res_off = calloc(nres_cap + 1, sizeof(uint32_t));
    uint32_t *res_flows = malloc(sizeof(uint32_t) * MAXRES * (E ? E : 1));
    hent_t *heap = malloc(sizeof(hent_t) * ((size_t)nres_cap + (size_t)MAXRES * E + 16));
    enc_ctx_t enc_ctx = {.enc_rate = enc_rate, .edges = t->edges};
    if (!f || !res || !map || !coff || !cl || !stack || !enc_rate || !src_cnt || !enc_list || !res_off ||
        !res_flows || !heap) {
        st = dc_error(DC_ERR_NOMEM, "simulate: out of memory");
        goto out;
    }
    /* resources: per node lan-out, lan-in, wan-out, wan-in, apply */
    for (uint32_t i = 0; i < N; i++) {
        const dc_topo_node_t *n = &tp->nodes[i];
        static const char *k[5] = {"lan-out", "lan-in", "wan-out", "wan-in", "apply"};
        for (int j = 0; j < 5; j++) {
            res_t *x = &res[i * 5 + j];
            x->node = i;
            snprintf(x->kind, sizeof(x->kind), "%s", k[j]);
            x->cap = j < 2 ? n->lan_bps / 8 : j < 4 ? n->wan_bps / 8
                                                    : (p->apply_GBps > 0 ? p->apply_GBps * 1e9 * ratio : INFINITY);
        }
    }
    for (uint32_t l = 0; l < tp->n_rlinks; l++)
        for (int dir = 0; dir < 2; dir++) {
            res_t *x = &res[N * 5 + l * 2 + dir];
            snprintf(x->kind, sizeof(x->kind), "region-link");
            x->a = dir ? tp->rlinks[l].b : tp->rlinks[l].a;
            x->b = dir ? tp->rlinks[l].a : tp->rlinks[l].b;
            x->cap = tp->rlinks[l].bps > 0 ? tp->rlinks[l].bps / 8 : INFINITY;
        }
    for (uint32_t s = 0; s < t->n_streams; s++)
        src_cnt[t->streams[s].source]++;
    /* a sender's encoder: encode_GBps per node, or per core on up to `cores`
     * cores of a shared pool */
    const double enc_node = p->encode_GBps * (cores > 0 ? cores : 1);
    for (uint32_t s = 0; s < t->n_streams; s++)
        enc_rate[s] = p->encode_GBps > 0 ? enc_node * 1e9 * ratio / src_cnt[t->streams[s].source] : INFINITY;
    /* Shared CPU pool: encode and every receiver's apply run on the same
     * `cores`.  Apply follows the encoder through the pipeline, so at pace
     * x (dense bytes of the version per second) the pool spends
     * x/E + sum_r f_r x/A core-seconds per second (f_r: the fraction of the
     * version receiver r applies); x <= cores / (1/E + sum_r f_r / A).  Each
     * stream's encoder is held to its share of that pace. */
    double pool_dense_Bps = INFINITY, pool_apply_frac = 0;
    bool pool_bound = false;
    if (cores > 0 && payload > 0) {
        double in_bytes = 0;
        for (uint32_t e = 0; e < E; e++)
            if (tp->nodes[t->edges[e].child].role == DC_TOPO_ROLE_RECEIVER)
                in_bytes += dc_tree_stream_bytes(t, t->edges[e].stream, r.payload_bytes);
        pool_apply_frac = in_bytes / payload;
        double cost = (p->encode_GBps > 0 ? 1 / (p->encode_GBps * 1e9) : 0) +
                      (p->apply_GBps > 0 ? pool_apply_frac / (p->apply_GBps * 1e9) : 0);
        if (cost > 0)
            pool_dense_Bps = cores / cost;
        for (uint32_t s = 0; s < t->n_streams && isfinite(pool_dense_Bps); s++) {
            double share = pool_dense_Bps * ratio * dc_tree_stream_bytes(t, s, r.payload_bytes) / payload;
            if (share < enc_rate[s]) {
                enc_rate[s] = share;
                pool_bound = true;
            }
        }
    }
    /* flows; parent flow via per-stream node map */
    for (uint32_t i = 0; i < N; i++)
        map[i] = -1;
    for (uint32_t e = 0; e < E; e++) {
        const dc_tree_edge_t *ed = &t->edges[e];
        flow_t *x = &f[e];
        x->size = dc_tree_stream_bytes(t, ed->stream, r.payload_bytes);
        x->start_at = INFINITY;
        const dc_topo_node_t *a = &tp->nodes[ed->parent], *b = &tp->nodes[ed->child];
        x->lat = ed->kind == DC_TREE_EDGE_KIND_WAN ? dc_topo_wan_latency(tp, a->region, b->region)
                                         : tp->regions[a->region].lan_lat_s;
        x->res[x->n_res++] = ed->parent * 5 + 0;
        x->res[x->n_res++] = ed->child * 5 + 1;
        if (ed->kind == DC_TREE_EDGE_KIND_WAN) {
            x->res[x->n_res++] = ed->parent * 5 + 2;
            x->res[x->n_res++] = ed->child * 5 + 3;
            for (uint32_t l = 0; l < tp->n_rlinks; l++) {
                const dc_topo_rlink_t *rl = &tp->rlinks[l];
                if (rl->bps > 0 && ((rl->a == a->region && rl->b == b->region) ||
                                    (rl->b == a->region && rl->a == b->region)))
                    x->res[x->n_res++] = N * 5 + l * 2 + (rl->a == a->region ? 0 : 1);
            }
        }
        if (p->apply_GBps > 0 && x->n_res < MAXRES)
            x->res[x->n_res++] = ed->child * 5 + 4;
    }
    for (uint32_t e0 = 0; e0 < E;) {
        uint32_t s = t->edges[e0].stream, e1 = e0;
        while (e1 < E && t->edges[e1].stream == s)
            e1++;
        for (uint32_t e = e0; e < e1; e++)
            map[t->edges[e].child] = (int32_t)e;
        for (uint32_t e = e0; e < e1; e++)
            f[e].up = t->edges[e].parent == t->streams[s].source ? -1 : map[t->edges[e].parent];
        for (uint32_t e = e0; e < e1; e++)
            map[t->edges[e].child] = -1;
        e0 = e1;
    }
    /* edges of one stream must be contiguous; replan keeps them so except
     * for re-attached edges: verify every non-root flow found its parent */
    for (uint32_t e = 0; e < E; e++)
        if (f[e].up < 0 && t->edges[e].parent != t->streams[t->edges[e].stream].source) {
            /* slow path: search */
            for (uint32_t g = 0; g < E; g++)
                if (t->edges[g].stream == t->edges[e].stream && t->edges[g].child == t->edges[e].parent) {
                    f[e].up = (int32_t)g;
                    break;
                }
            if (f[e].up < 0) {
                st = dc_error(DC_ERR_INTERNAL, "simulate: edge %u has no parent flow", e);
                goto out;
            }
        }
    for (uint32_t e = 0; e < E; e++)
        if (f[e].up >= 0)
            coff[f[e].up + 1]++;
    for (uint32_t e = 0; e < E; e++)
        coff[e + 1] += coff[e];
    {
        uint32_t *fill = calloc(E ? E : 1, sizeof(uint32_t));
        if (!fill) {
            st = dc_error(DC_ERR_NOMEM, "simulate: out of memory");
            goto out;
        }
        for (uint32_t e = 0; e < E; e++)
            if (f[e].up >= 0)
                cl[coff[f[e].up] + fill[f[e].up]++] = e;
        free(fill);
    }

    for (uint32_t e = 0; e < E; e++)
        for (uint32_t j = 0; j < f[e].n_res; j++)
            res_off[f[e].res[j] + 1]++;
    for (uint32_t k = 0; k < nres_cap; k++)
        res_off[k + 1] += res_off[k];
    {
        uint32_t *fill = calloc(nres_cap, sizeof(uint32_t));
        if (!fill) {
            st = dc_error(DC_ERR_NOMEM, "simulate: out of memory");
            goto out;
        }
        for (uint32_t e = 0; e < E; e++)
            for (uint32_t j = 0; j < f[e].n_res; j++) {
                uint32_t k = f[e].res[j];
                res_flows[res_off[k] + fill[k]++] = e;
            }
        free(fill);
    }

    double now = 0;
    uint32_t remaining = E, events = 0;
    const uint32_t max_events = 20u * E + 1000;
    while (remaining > 0) {
        if (++events > max_events) {
            st = dc_error(DC_ERR_INTERNAL, "simulate: no progress after %u events", events);
            goto out;
        }
        /* parent progress, done state, eligibility */
        for (uint32_t e = 0; e < E; e++) {
            flow_t *x = &f[e];
            x->frozen = 1;
            x->follow = 0;
            x->rate = 0;
            if (x->done)
                continue;
            double pd, psize = x->size;
            bool pdone;
            if (x->up < 0) {
                double er = enc_rate[t->edges[e].stream];
                pd = isinf(er) ? psize : DC_MIN(psize, now * er);
            } else {
                pd = f[x->up].d;
                pdone = f[x->up].done;
                if (pdone)
                    pd = psize;
            }
            pdone = pd >= psize * (1 - 1e-12);
            double ce = DC_MIN(chunk, x->size), eps = 1e-9 * x->size + 1e-6;
            double gap = pd - x->d;
            if (!pdone && gap < ce - eps) {
                x->why = WHY_PARENT; /* waiting for a chunk */
                continue;
            }
            if (!x->started) {
                if (isinf(x->start_at))
                    x->start_at = now + x->lat;
                if (now < x->start_at - 1e-12) {
                    x->why = WHY_LATENCY;
                    continue;
                }
                x->started = 1;
            }
            x->frozen = 0;
            x->follow = !pdone && gap <= ce + eps;
        }
        /* max-min fair rates by progressive filling with a lazy heap of
         * resource saturation levels (cap - frozen) / unfrozen, which only
         * grow as flows freeze */
        for (uint32_t k = 0; k < nres_cap; k++) {
            res[k].rem = res[k].cap; /* minus frozen rates */
            res[k].n_unfrozen = 0;
            res[k].ver++;
        }
        for (uint32_t e = 0; e < E; e++)
            if (!f[e].frozen)
                for (uint32_t j = 0; j < f[e].n_res; j++)
                    res[f[e].res[j]].n_unfrozen++;
        uint32_t hn = 0, n_enc = 0, sp = 0;
        double level = 0;
        /* followers of a parent that does not flow now: rate 0 */
        for (uint32_t e = 0; e < E; e++)
            if (!f[e].frozen && f[e].follow && f[e].up >= 0 && f[f[e].up].frozen) {
                f[e].why = WHY_PARENT;
                stack[sp++] = e;
            } else if (!f[e].frozen && f[e].follow && f[e].up < 0) {
                enc_list[n_enc++] = e;
            }
        qsort_r(enc_list, n_enc, sizeof(uint32_t), cmp_enc, (void *)&enc_ctx);
        uint32_t enc_next = 0;
        for (uint32_t k = 0; k < nres_cap; k++)
            if (res[k].n_unfrozen && isfinite(res[k].cap))
                heap_push(heap, &hn, res[k].rem / res[k].n_unfrozen, k, res[k].ver);
        for (;;) {
            /* freeze what is on the stack at `level`, propagating to followers */
            while (sp) {
                uint32_t e = stack[--sp];
                if (f[e].frozen)
                    continue;
                f[e].frozen = 1;
                f[e].rate = level;
                for (uint32_t j = 0; j < f[e].n_res; j++) {
                    res_t *q = &res[f[e].res[j]];
                    q->rem -= level;
                    q->n_unfrozen--;
                    q->ver++;
                    if (q->n_unfrozen && isfinite(q->cap))
                        heap_push(heap, &hn, DC_MAX(q->rem / q->n_unfrozen, level), f[e].res[j], q->ver);
                }
                for (uint32_t c = coff[e]; c < coff[e + 1]; c++) {
                    uint32_t ch = cl[c];
                    if (!f[ch].frozen && f[ch].follow) {
                        f[ch].why = WHY_PARENT;
                        stack[sp++] = ch;
                    }
                }
            }
            while (hn && (heap[0].ver != res[heap[0].res].ver || !res[heap[0].res].n_unfrozen))
                heap_pop(heap, &hn);
            while (enc_next < n_enc && f[enc_list[enc_next]].frozen)
                enc_next++;
            double lr = hn ? heap[0].key : INFINITY;
            double le = enc_next < n_enc ? enc_rate[t->edges[enc_list[enc_next]].stream] : INFINITY;
            if (!hn && enc_next >= n_enc)
                break;
            if (le <= lr) {
                uint32_t e = enc_list[enc_next++];
                level = DC_MAX(level, le);
                f[e].why = WHY_ENCODE;
                stack[sp++] = e;
            } else {
                uint32_t k = heap[0].res;
                heap_pop(heap, &hn);
                level = DC_MAX(level, lr);
                for (uint32_t q = res_off[k]; q < res_off[k + 1]; q++) {
                    uint32_t e = res_flows[q];
                    if (f[e].frozen)
                        continue;
                    for (uint32_t j = 0; j < f[e].n_res; j++)
                        if (f[e].res[j] == k) {
                            f[e].why = (uint8_t)j;
                            break;
                        }
                    stack[sp++] = e;
                }
            }
        }
        /* next event */
        double dt = INFINITY;
        for (uint32_t e = 0; e < E; e++) {
            flow_t *x = &f[e];
            if (x->done)
                continue;
            double pd, prate;
            bool pdone;
            if (x->up < 0) {
                double er = enc_rate[t->edges[e].stream];
                pd = isinf(er) ? x->size : DC_MIN(x->size, now * er);
                prate = isinf(er) ? 0 : er;
                if (!isinf(er) && pd < x->size)
                    dt = DC_MIN(dt, x->size / er - now);
            } else {
                pd = f[x->up].done ? x->size : f[x->up].d;
                prate = f[x->up].rate;
            }
            pdone = pd >= x->size * (1 - 1e-12);
            double ce = DC_MIN(chunk, x->size), gap = pd - x->d;
            if (x->rate > 0)
                dt = DC_MIN(dt, (x->size - x->d) / x->rate);
            if (!x->started && isfinite(x->start_at) && x->start_at > now)
                dt = DC_MIN(dt, x->start_at - now);
            if (!pdone) {
                if (gap < ce && prate > x->rate)
                    dt = DC_MIN(dt, (ce - gap) / (prate - x->rate));
                else if (gap > ce && x->rate > prate && !x->follow)
                    dt = DC_MIN(dt, (gap - ce) / (x->rate - prate));
            }
        }
        if (!isfinite(dt)) {
            st = dc_error(DC_ERR_INTERNAL, "simulate: stalled at t=%.6f s with %u flows left", now, remaining);
            goto out;
        }
        dt = DC_MAX(dt, 1e-12);
        now += dt;
        for (uint32_t e = 0; e < E; e++) {
            flow_t *x = &f[e];
            if (x->done)
                continue;
            x->held[x->why < WHY_N ? x->why : WHY_PARENT] += dt;
            x->d = DC_MIN(x->size, x->d + x->rate * dt);
        }
        for (uint32_t e = 0; e < E; e++) {
            flow_t *x = &f[e];
            if (x->done)
                continue;
            if (x->up >= 0 && !f[x->up].done)
                x->d = DC_MIN(x->d, DC_MAX(f[x->up].d - DC_MIN(chunk, x->size), 0) + 1e-6);
            if (x->d >= x->size - (1e-9 * x->size + 1e-6)) {
                x->d = x->size;
                x->done = 1;
                x->done_at = now; /* d counts bytes arrived: latency is in start_at */
                remaining--;
            }
        }
    }
    /* result: last completion; bottleneck walk */
    int32_t last = -1;
    for (uint32_t e = 0; e < E; e++)
        if (last < 0 || f[e].done_at > f[last].done_at)
            last = (int32_t)e;
    r.events = events;
    snprintf(r.bottleneck, sizeof(r.bottleneck), "none (no edges)");
    snprintf(r.bottleneck_kind, sizeof(r.bottleneck_kind), "none");
    if (last >= 0) {
        r.predicted_seconds = f[last].done_at;
        int32_t e = last;
        for (uint32_t hop = 0; hop <= E; hop++) {
            const flow_t *x = &f[e];
            uint32_t w = 0;
            for (uint32_t j = 1; j < WHY_N; j++)
                if (x->held[j] > x->held[w])
                    w = j;
            if (w == WHY_PARENT && x->up >= 0) {
                e = x->up;
                continue;
            }
            if ((w == WHY_PARENT || w == WHY_ENCODE) && pool_bound) {
                snprintf(r.bottleneck_kind, sizeof(r.bottleneck_kind), "cpu");
                snprintf(r.bottleneck, sizeof(r.bottleneck),
                         "shared CPU pool (%.3g cores: encode + %.3g versions applied, %.3g GB/s dense)", cores,
                         pool_apply_frac, pool_dense_Bps / 1e9);
            } else if (w == WHY_PARENT || w == WHY_ENCODE) {
                snprintf(r.bottleneck_kind, sizeof(r.bottleneck_kind), "encode");
                snprintf(r.bottleneck, sizeof(r.bottleneck), "encode on %s (%.3g GB/s dense)",
                         tp->nodes[t->streams[t->edges[e].stream].source].name, enc_node);
            } else if (w == WHY_LATENCY) {
                snprintf(r.bottleneck_kind, sizeof(r.bottleneck_kind), "latency");
                snprintf(r.bottleneck, sizeof(r.bottleneck), "latency of %s -> %s (%.3g ms)",
                         tp->nodes[t->edges[e].parent].name, tp->nodes[t->edges[e].child].name, x->lat * 1e3);
            } else {
                const res_t *q = &res[x->res[w]];
                if (strcmp(q->kind, "region-link") == 0) {
                    snprintf(r.bottleneck_kind, sizeof(r.bottleneck_kind), "region-link");
                    snprintf(r.bottleneck, sizeof(r.bottleneck), "region-link %s->%s (%.3g Gbit/s)",
                             tp->regions[q->a].name, tp->regions[q->b].name, q->cap * 8 / 1e9);
                } else if (strcmp(q->kind, "apply") == 0) {
                    snprintf(r.bottleneck_kind, sizeof(r.bottleneck_kind), "apply");
                    snprintf(r.bottleneck, sizeof(r.bottleneck), "apply on %s (%.3g GB/s dense)",
                             tp->nodes[q->node].name, p->apply_GBps);
                } else {
                    snprintf(r.bottleneck_kind, sizeof(r.bottleneck_kind), "%.3s", q->kind);
                    snprintf(r.bottleneck, sizeof(r.bottleneck), "%s %s (%.3g Gbit/s)", q->kind,
                             tp->nodes[q->node].name, q->cap * 8 / 1e9);
                }
            }
            break;
        }
    }
    /* lower bound: busiest resource, and encode/apply of dense bytes */
    {
        for (uint32_t k = 0; k < nres_cap; k++)
            res[k].rem = 0;
        for (uint32_t e = 0; e < E; e++)
            for (uint32_t j = 0; j < f[e].n_res; j++)
                res[f[e].res[j]].rem += f[e].size;
        double lb = 0;
        for (uint32_t k = 0; k < nres_cap; k++)
            if (isfinite(res[k].cap) && res[k].cap > 0)
                lb = DC_MAX(lb, res[k].rem / res[k].cap);
        if (p->encode_GBps > 0)
            for (uint32_t i = 0; i < N; i++)
                if (tp->nodes[i].role == DC_TOPO_ROLE_SENDER)
                    lb = DC_MAX(lb, (double)r.dense_bytes * __builtin_popcountll(tp->nodes[i].shards) /
                                        tp->n_shards / (enc_node * 1e9));
        if (isfinite(pool_dense_Bps))
            lb = DC_MAX(lb, (double)r.dense_bytes / pool_dense_Bps);
        r.lower_bound_seconds = lb;
    }
    (void)payload;
    *out = r;
out:
    free(f);
    free(res);
    free(map);
    free(coff);
    free(cl);
    free(stack);
    free(enc_rate);
    free(src_cnt);
    free(enc_list);
    free(res_off);
    free(res_flows);
    free(heap);
    return st;
}
