/* test_sim.c - the flow-level simulator against cases with known answers. */
#include <criterion/criterion.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "deltacast.h"

static dc_topo_t *parse(const char *y)
{
    dc_topo_t *t = NULL;
    cr_assert_eq(dc_topo_parse(y, strlen(y), "sim.yaml", &t), DC_OK, "%s", dc_last_error());
    return t;
}

static dc_sim_result_t simulate(const dc_topo_t *topo, uint64_t params, double ratio, double enc, double apply,
                                uint64_t chunk)
{
    dc_tree_t *t = NULL;
    dc_tree_opts_t o = {.size = sizeof(o), .payload_bytes = (uint64_t)(params * 2 * ratio), .chunk_bytes = chunk};
    cr_assert_eq(dc_tree_plan(topo, &o, &t), DC_OK, "%s", dc_last_error());
    dc_sim_opts_t p = {.size = sizeof(p), .params = params, .payload_ratio = ratio, .encode_GBps = enc,
                         .apply_GBps = apply, .chunk_bytes = chunk};
    dc_sim_result_t r = {.size = sizeof(r)};
    cr_assert_eq(dc_sim_run(t, &p, &r), DC_OK, "%s", dc_last_error());
    dc_tree_free(t);
    return r;
}

static void near(double got, double want, double rel, const char *what)
{
    cr_assert(fabs(got - want) <= rel * want, "%s: got %.6f, want %.6f (+-%g%%)", what, got, want, rel * 100);
}

/* One WAN link: time = bytes / rate + one-way latency. */
Test(sim, one_link_is_bytes_over_rate)
{
    dc_topo_t *topo = parse("defaults: {wan_latency: 10ms}\nregions:\n"
                            "  - {name: a, nodes: [{host: s, role: sender, wan: 8gbit}]}\n"
                            "  - {name: b, nodes: [{host: r, wan: 8gbit}]}\n");
    /* 1e9 params = 2e9 bytes dense, ratio 0.5 -> 1e9 bytes at 1e9 B/s */
    dc_sim_result_t r = simulate(topo, 1000000000ULL, 0.5, 0, 0, 0);
    cr_assert_eq(r.payload_bytes, 1000000000ULL);
    near(r.predicted_seconds, 1.0 + 0.010, 1e-6, "one link");
    cr_assert_str_eq(r.bottleneck_kind, "wan");
    cr_assert(strstr(r.bottleneck, "8 Gbit/s") != NULL, "%s", r.bottleneck);
    cr_assert_eq(r.nodes, 2);
    dc_topo_free(topo);
}

/* A chain of 6 receivers pipelines: close to one hop's time plus one chunk
 * per extra hop, far from 6 hops' time. */
Test(sim, chain_pipelines)
{
    dc_topo_t *topo = parse("regions:\n  - name: a\n    lan: 8gbit\n    lan_latency: 0us\n    nodes:\n"
                            "      - {host: s, role: sender}\n      - {host: r1}\n      - {host: r2}\n"
                            "      - {host: r3}\n      - {host: r4}\n      - {host: r5}\n      - {host: r6}\n");
    const uint64_t chunk = 1000000;
    dc_tree_t *t = NULL;
    dc_tree_opts_t o = {.size = sizeof(o), .payload_bytes = 1000000000ULL, .chunk_bytes = chunk};
    cr_assert_eq(dc_tree_plan(topo, &o, &t), DC_OK);
    /* it must be a chain for a payload this large */
    dc_tree_node_view_t v = {.size = sizeof(v)};
    for (uint32_t i = 0; i < 7; i++) {
        cr_assert_eq(dc_tree_node(t, i, &v), DC_OK);
        cr_assert(v.n_children <= 1, "node %u has %u children: not a chain", i, v.n_children);
    }
    dc_tree_free(t);
    dc_sim_result_t r = simulate(topo, 1000000000ULL, 0.5, 0, 0, chunk);
    /* 1e9 bytes at 1e9 B/s = 1 s, plus 5 extra hops of one chunk (1 ms) */
    near(r.predicted_seconds, 1.0 + 5 * 0.001, 1e-3, "chain");
    cr_assert_str_eq(r.bottleneck_kind, "lan");
    dc_topo_free(topo);
}

/* NeMo-DCR layout: 8 senders, 8 receivers, 5 Gbit/s WAN per node: the WAN
 * is the bottleneck and the time is payload / (8 * 5 Gbit/s). */
Test(sim, wan_bottleneck_identified)
{
    dc_topo_t *topo = NULL;
    cr_assert_eq(dc_topo_synthetic(1, 8, 5e9, 400e9, &topo), DC_OK);
    dc_sim_result_t r = simulate(topo, 1121000000000ULL, 0.0235, 0, 0, 0);
    double want = (double)r.payload_bytes / (8 * 5e9 / 8);
    near(r.predicted_seconds, want, 0.02, "nemo");
    cr_assert(r.predicted_seconds >= r.lower_bound_seconds * 0.999);
    cr_assert_str_eq(r.bottleneck_kind, "wan", "%s", r.bottleneck);
    cr_assert(strstr(r.bottleneck, "train-s") != NULL || strstr(r.bottleneck, "r0-n") != NULL, "%s", r.bottleneck);
    dc_topo_free(topo);
}

Test(sim, encode_and_apply_limits)
{
    dc_topo_t *topo = NULL;
    cr_assert_eq(dc_topo_synthetic(1, 2, 100e9, 400e9, &topo), DC_OK);
    /* 1e10 params = 2e10 dense bytes, 1e10 per sender; 1 GB/s encode -> 10 s */
    dc_sim_result_t r = simulate(topo, 10000000000ULL, 0.02, 1.0, 0, 0);
    near(r.predicted_seconds, 10.0, 0.02, "encode-bound");
    cr_assert_str_eq(r.bottleneck_kind, "encode", "%s", r.bottleneck);
    /* apply at 0.5 GB/s dense on 2e10 bytes each receiver -> 40 s */
    r = simulate(topo, 10000000000ULL, 0.02, 0, 0.5, 0);
    near(r.predicted_seconds, 40.0, 0.02, "apply-bound");
    cr_assert_str_eq(r.bottleneck_kind, "apply", "%s", r.bottleneck);
    dc_topo_free(topo);
}

Test(sim, region_link_limit)
{
    dc_topo_t *topo = parse("regions:\n"
                            "  - {name: a, nodes: [{host: s1, role: sender}, {host: s2, role: sender}]}\n"
                            "  - {name: b, nodes: [{host: r1}, {host: r2}]}\n"
                            "links:\n  - {between: [a, b], rate: 4gbit, latency: 0s}\n");
    dc_sim_result_t r = simulate(topo, 1000000000ULL, 0.5, 0, 0, 0);
    near(r.predicted_seconds, 2.0, 0.01, "region link 0.5 GB/s for 1 GB");
    cr_assert_str_eq(r.bottleneck_kind, "region-link", "%s", r.bottleneck);
    dc_topo_free(topo);
}

Test(sim, bad_parameters)
{
    dc_topo_t *topo = NULL;
    cr_assert_eq(dc_topo_synthetic(1, 1, 0, 0, &topo), DC_OK);
    dc_tree_t *t = NULL;
    cr_assert_eq(dc_tree_plan(topo, NULL, &t), DC_OK);
    dc_sim_opts_t p = {.size = sizeof(p), .params = 0};
    dc_sim_result_t r = {.size = sizeof(r)};
    cr_assert_eq(dc_sim_run(t, &p, &r), DC_ERR_INVALID);
    p.params = 1000;
    p.payload_ratio = 5;
    cr_assert_eq(dc_sim_run(t, &p, &r), DC_ERR_INVALID);
    p.payload_ratio = 0.1;
    p.size = 0;
    cr_assert_eq(dc_sim_run(t, &p, &r), DC_ERR_INVALID);
    dc_tree_free(t);
    dc_topo_free(topo);
}

static dc_sim_result_t simulate_pool(const dc_topo_t *topo, uint64_t params, double ratio, double enc, double apply,
                                     double cores)
{
    dc_tree_t *t = NULL;
    dc_tree_opts_t o = {.size = sizeof(o), .payload_bytes = (uint64_t)(params * 2 * ratio)};
    cr_assert_eq(dc_tree_plan(topo, &o, &t), DC_OK, "%s", dc_last_error());
    dc_sim_opts_t p = {.size = sizeof(p), .params = params, .payload_ratio = ratio, .encode_GBps = enc,
                         .apply_GBps = apply, .cpu_cores = cores};
    dc_sim_result_t r = {.size = sizeof(r)};
    cr_assert_eq(dc_sim_run(t, &p, &r), DC_OK, "%s", dc_last_error());
    dc_tree_free(t);
    return r;
}

/* A shared pool of 2 cores: encode (1 GB/s per core) and two receivers'
 * apply (1 GB/s per core each) of 2e9 dense bytes cost 2 + 2 + 2 = 6
 * core-seconds -> 3 s on 2 cores, where own CPUs per node would give
 * max(encode 2e9 / 2 cores, apply 2e9 / 1 core) = 2 s. */
Test(sim, shared_cpu_pool)
{
    dc_topo_t *topo = parse("regions:\n  - name: a\n    lan: 400gbit\n    lan_latency: 0us\n    nodes:\n"
                            "      - {host: s, role: sender}\n      - {host: r1}\n      - {host: r2}\n");
    dc_sim_result_t r = simulate_pool(topo, 1000000000ULL, 0.5, 1.0, 1.0, 2);
    near(r.predicted_seconds, 3.0, 0.02, "pool of 2 cores");
    cr_assert_str_eq(r.bottleneck_kind, "cpu", "%s", r.bottleneck);
    cr_assert(r.lower_bound_seconds >= 3.0 * 0.999, "lower bound %.3f", r.lower_bound_seconds);
    /* no pool: each receiver's own core applies in 2 s */
    r = simulate_pool(topo, 1000000000ULL, 0.5, 2.0, 1.0, 0);
    near(r.predicted_seconds, 2.0, 0.02, "own CPUs");
    cr_assert_str_eq(r.bottleneck_kind, "apply", "%s", r.bottleneck);
    /* a large pool binds nothing: one core's apply does */
    r = simulate_pool(topo, 1000000000ULL, 0.5, 1.0, 1.0, 64);
    near(r.predicted_seconds, 2.0, 0.02, "large pool");
    cr_assert_str_eq(r.bottleneck_kind, "apply", "%s", r.bottleneck);
    dc_topo_free(topo);
}

/* The pool does not slow a WAN-bound refit. */
Test(sim, shared_cpu_pool_wan_bound)
{
    dc_topo_t *topo = parse("defaults: {wan_latency: 0s}\nregions:\n"
                            "  - {name: a, nodes: [{host: s, role: sender, wan: 80mbit}]}\n"
                            "  - {name: b, nodes: [{host: r, wan: 80mbit}]}\n");
    /* 1e9 bytes payload at 1e7 B/s = 100 s; the pool manages 1 GB/s dense */
    dc_sim_result_t r = simulate_pool(topo, 1000000000ULL, 0.5, 1.0, 1.0, 2);
    near(r.predicted_seconds, 100.0, 0.01, "wan-bound with a pool");
    cr_assert_str_eq(r.bottleneck_kind, "wan", "%s", r.bottleneck);
    dc_topo_free(topo);
}

/* Callers built before cpu_cores existed pass the smaller size: accepted,
 * as if cpu_cores were 0; a bad pool size is refused. */
Test(sim, cpu_cores_size_and_range)
{
    dc_topo_t *topo = NULL;
    cr_assert_eq(dc_topo_synthetic(1, 1, 0, 0, &topo), DC_OK);
    dc_tree_t *t = NULL;
    cr_assert_eq(dc_tree_plan(topo, NULL, &t), DC_OK);
    dc_sim_opts_t p = {.size = offsetof(dc_sim_opts_t, cpu_cores), .params = 1000000000ULL,
                         .payload_ratio = 0.01, .encode_GBps = 1.0, .cpu_cores = 2};
    dc_sim_result_t r = {.size = sizeof(r)};
    cr_assert_eq(dc_sim_run(t, &p, &r), DC_OK, "%s", dc_last_error());
    near(r.predicted_seconds, 2.0, 0.01, "old-size params: encode per node, no pool");
    p.size = sizeof(p);
    p.cpu_cores = -1;
    cr_assert_eq(dc_sim_run(t, &p, &r), DC_ERR_INVALID);
    p.cpu_cores = NAN;
    cr_assert_eq(dc_sim_run(t, &p, &r), DC_ERR_INVALID);
    dc_tree_free(t);
    dc_topo_free(topo);
}
