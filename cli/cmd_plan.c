/* cmd_plan.c - `deltacast plan`: the relay tree of a topology, and a
 * flow-level simulation of a refit over it. */
#include "cli.h"
#include "tree/tree_int.h"
#include "util/dc_util.h"

#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void dc_plan_help(FILE *fp)
{
    fprintf(fp,
            "Usage: deltacast plan (--topology FILE | --synthetic R:N[:WAN[:LAN]] |\n"
            "                       --nodelist LIST | --slurm) [--json|--dot]\n"
            "                      [--link-rates FILE] [--dead HOST]...\n"
            "                      [--simulate --params P --change-rate R [--payload-ratio Z]\n"
            "                       [--encode-gbps X] [--apply-gbps Y] [--chunk SIZE]\n"
            "                       [--cpu-cores C]] [--stripes K]\n"
            "\n"
            "Build the relay tree of a topology and print it (edges, per-edge load,\n"
            "transports, expected bottleneck); optionally simulate a refit over it.\n"
            "\n"
            "Options:\n"
            "  --topology FILE          YAML topology file (see topology/examples/)\n"
            "  --synthetic SPEC         R receiver regions of N nodes plus a trainer region of N\n"
            "                           senders; WAN per node (default 5gbit), LAN (400gbit)\n"
            "  --nodelist LIST          Slurm host list, e.g. 'trn-[01-08],roll-[001-064]'\n"
            "  --slurm                  the host list of $SLURM_JOB_NODELIST\n"
            "  --region-map MAP         with a host list: 'PATTERN=REGION,...' (globs; first\n"
            "                           match wins; others go to region 'default')\n"
            "  --senders K              with a host list: the first K hosts are senders (1)\n"
            "  --link-rates FILE        measured rates replacing nominal ones (JSON or 'A B RATE')\n"
            "  --dead HOST              re-plan as if HOST died (repeatable)\n"
            "  --json                   JSON output\n"
            "  --dot                    graphviz DOT output (render: dot -Tsvg)\n"
            "  --simulate               flow-level simulation of one refit\n"
            "  --params P               model parameters (BF16: 2 bytes each), e.g. 1e12\n"
            "  --change-rate R          fraction of values that change, e.g. 0.03 (reported;\n"
            "                           the wire size comes from --payload-ratio)\n"
            "  --payload-ratio Z        encoded bytes / dense bytes (default 0.0235, the\n"
            "                           NeMo-DCR figure; our codec's measured ratio should\n"
            "                           replace it)\n"
            "  --encode-gbps X          GB/s (1e9 bytes/s) of dense checkpoint one sender\n"
            "                           encodes (default: unlimited)\n"
            "  --apply-gbps Y           GB/s of dense checkpoint one receiver applies (default:\n"
            "                           unlimited)\n"
            "  --chunk SIZE             frame size for pipelining (default: config\n"
            "                           chunk_size, as the engine)\n"
            "  --cpu-cores C            all nodes share one pool of C cores (e.g. a test\n"
            "                           machine running every node): --encode-gbps and\n"
            "                           --apply-gbps are then per core; a sender encodes on\n"
            "                           up to C cores, a receiver applies on one, and encode\n"
            "                           plus every apply together fit in C cores\n"
            "  --stripes K              split a shard over at most K gateways per region\n"
            "                           (default: as the engine plans, 1)\n"
            "  --hw                     show this machine's GPUs, NICs and the NIC closest to\n"
            "                           each GPU (hwloc), then exit\n"
            "  -h, --help               show this help\n");
}

static double plan_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int plan_hw(bool json)
{
    dc_hw_info_t *hw = NULL;
    dc_status_t st = dc_hw_discover(&hw);
    if (st != DC_OK)
        return dc_cli_fail("plan", st, "--hw");
    if (json) {
        json_t *o = json_pack("{s:i,s:i}", "numa_nodes", (int)hw->n_numa, "cores", (int)hw->n_cores);
        json_t *g = json_array(), *n = json_array();
        for (uint32_t i = 0; i < hw->n_nics; i++)
            json_array_append_new(n, json_pack("{s:s,s:s,s:s}", "name", hw->nics[i].name, "kind", hw->nics[i].kind,
                                               "pci", hw->nics[i].pci));
        for (uint32_t i = 0; i < hw->n_gpus; i++)
            json_array_append_new(g, json_pack("{s:s,s:s,s:s?,s:i}", "name", hw->gpus[i].name, "pci", hw->gpus[i].pci,
                                               "nic", hw->gpus[i].nic >= 0 ? hw->nics[hw->gpus[i].nic].name : NULL,
                                               "distance", hw->gpus[i].distance));
        json_object_set_new(o, "nics", n);
        json_object_set_new(o, "gpus", g);
        json_dumpf(o, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
        json_decref(o);
    } else {
        printf("%u NUMA node(s), %u core(s)\n", hw->n_numa, hw->n_cores);
        printf("%u NIC(s):\n", hw->n_nics);
        for (uint32_t i = 0; i < hw->n_nics; i++)
            printf("  %-12s %-12s %s\n", hw->nics[i].name, hw->nics[i].kind, hw->nics[i].pci[0] ? hw->nics[i].pci : "(virtual)");
        printf("%u GPU(s):\n", hw->n_gpus);
        for (uint32_t i = 0; i < hw->n_gpus; i++)
            printf("  %-12s %-14s closest NIC: %s (distance %d)\n", hw->gpus[i].name, hw->gpus[i].pci,
                   hw->gpus[i].nic >= 0 ? hw->nics[hw->gpus[i].nic].name : "none", hw->gpus[i].distance);
    }
    dc_hw_free(hw);
    return DC_EXIT_OK;
}

static double plan_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double parse_count(const char *s, bool *ok)
{
    char *end;
    double v = strtod(s, &end);
    *ok = *s && !*end && isfinite(v) && v >= 1 && v <= 1e15;
    return v;
}

int dc_cmd_plan(int argc, char **argv)
{
    enum { O_TOPO = 1, O_SYN, O_JSON, O_DOT, O_SIM, O_PARAMS, O_CR, O_ENC, O_APPLY, O_RATIO, O_LINKS, O_DEAD, O_CHUNK, O_HW, O_NODELIST, O_SLURM, O_RMAP, O_SENDERS, O_CORES, O_STRIPES };
    static const struct option opts[] = {
        {"topology", required_argument, NULL, O_TOPO},
        {"synthetic", required_argument, NULL, O_SYN},
        {"json", no_argument, NULL, O_JSON},
        {"dot", no_argument, NULL, O_DOT},
        {"simulate", no_argument, NULL, O_SIM},
        {"params", required_argument, NULL, O_PARAMS},
        {"change-rate", required_argument, NULL, O_CR},
        {"encode-gbps", required_argument, NULL, O_ENC},
        {"apply-gbps", required_argument, NULL, O_APPLY},
        {"payload-ratio", required_argument, NULL, O_RATIO},
        {"link-rates", required_argument, NULL, O_LINKS},
        {"dead", required_argument, NULL, O_DEAD},
        {"chunk", required_argument, NULL, O_CHUNK},
        {"hw", no_argument, NULL, O_HW},
        {"nodelist", required_argument, NULL, O_NODELIST},
        {"slurm", no_argument, NULL, O_SLURM},
        {"region-map", required_argument, NULL, O_RMAP},
        {"senders", required_argument, NULL, O_SENDERS},
        {"cpu-cores", required_argument, NULL, O_CORES},
        {"stripes", required_argument, NULL, O_STRIPES},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *topo_path = NULL, *synth = NULL, *links = NULL, *nodelist = NULL, *rmap = NULL;
    uint64_t senders = 1;
    const char *dead[64];
    int n_dead = 0;
    bool json = false, dot = false, sim = false, hw = false, ok;
    double params = 0, cr = -1, enc = 0, apply = 0, ratio = 0.0235, cores = 0;
    uint64_t stripes = 0;
    uint64_t chunk = 0;
    optind = 1;
    int c;
    while ((c = dc_cli_getopt("plan", argc, argv, "h", opts)) != -1) {
        switch (c) {
        case 'h':
            dc_plan_help(stdout);
            return DC_EXIT_OK;
        case O_TOPO: topo_path = optarg; break;
        case O_SYN: synth = optarg; break;
        case O_JSON: json = true; break;
        case O_DOT: dot = true; break;
        case O_SIM: sim = true; break;
        case O_HW: hw = true; break;
        case O_NODELIST: nodelist = optarg; break;
        case O_SLURM:
            nodelist = getenv("SLURM_JOB_NODELIST");
            if (!nodelist || !*nodelist)
                return dc_cli_usage_error("plan", "--slurm: SLURM_JOB_NODELIST is not set");
            break;
        case O_RMAP: rmap = optarg; break;
        case O_SENDERS:
            if (!dc_cli_parse_u64("plan", "--senders", optarg, &senders))
                return DC_EXIT_USAGE;
            if (senders == 0 || senders > 1000000)
                return dc_cli_usage_error("plan", "--senders must be in 1..1000000");
            break;
        case O_LINKS: links = optarg; break;
        case O_DEAD:
            if (n_dead == 64)
                return dc_cli_usage_error("plan", "--dead: at most 64");
            dead[n_dead++] = optarg;
            break;
        case O_PARAMS:
            params = parse_count(optarg, &ok);
            if (!ok)
                return dc_cli_usage_error("plan", "--params: '%s' is not a count like 1e12", optarg);
            break;
        case O_CR:
            if (!dc_cli_parse_double("plan", "--change-rate", optarg, &cr))
                return DC_EXIT_USAGE;
            if (cr < 0 || cr > 1)
                return dc_cli_usage_error("plan", "--change-rate: %s is not in [0, 1]", optarg);
            break;
        case O_ENC:
            if (!dc_cli_parse_double("plan", "--encode-gbps", optarg, &enc))
                return DC_EXIT_USAGE;
            if (enc <= 0)
                return dc_cli_usage_error("plan", "--encode-gbps must be positive");
            break;
        case O_APPLY:
            if (!dc_cli_parse_double("plan", "--apply-gbps", optarg, &apply))
                return DC_EXIT_USAGE;
            if (apply <= 0)
                return dc_cli_usage_error("plan", "--apply-gbps must be positive");
            break;
        case O_RATIO:
            if (!dc_cli_parse_double("plan", "--payload-ratio", optarg, &ratio))
                return DC_EXIT_USAGE;
            if (ratio <= 0 || ratio > 2)
                return dc_cli_usage_error("plan", "--payload-ratio must be in (0, 2]");
            break;
        case O_CORES:
            if (!dc_cli_parse_double("plan", "--cpu-cores", optarg, &cores))
                return DC_EXIT_USAGE;
            if (!(cores > 0 && cores <= 1e7))
                return dc_cli_usage_error("plan", "--cpu-cores must be in (0, 1e7]");
            break;
        case O_STRIPES:
            if (!dc_cli_parse_u64("plan", "--stripes", optarg, &stripes))
                return DC_EXIT_USAGE;
            if (stripes == 0 || stripes > 64)
                return dc_cli_usage_error("plan", "--stripes must be in 1..64");
            break;
        case O_CHUNK:
            if (!dc_cli_parse_size("plan", "--chunk", optarg, &chunk))
                return DC_EXIT_USAGE;
            if (chunk == 0)
                return dc_cli_usage_error("plan", "--chunk must be positive");
            break;
        default:
            return DC_EXIT_USAGE;
        }
    }
    if (optind < argc)
        return dc_cli_usage_error("plan", "unexpected argument '%s'", argv[optind]);
    if (hw)
        return plan_hw(json);
    if ((topo_path != NULL) + (synth != NULL) + (nodelist != NULL) != 1)
        return dc_cli_usage_error("plan", "give exactly one of --topology FILE, --synthetic R:N[:WAN[:LAN]], "
                                          "--nodelist LIST or --slurm");
    if (!nodelist && rmap)
        return dc_cli_usage_error("plan", "--region-map goes with --nodelist or --slurm");
    if (json && dot)
        return dc_cli_usage_error("plan", "--json and --dot exclude each other");
    if (sim && dot)
        return dc_cli_usage_error("plan", "--simulate prints text or --json, not --dot");
    if (!sim && cores > 0)
        return dc_cli_usage_error("plan", "--cpu-cores goes with --simulate");
    if (sim && (params <= 0 || cr < 0))
        return dc_cli_usage_error("plan", "--simulate needs --params P and --change-rate R");

    dc_topo_t *topo = NULL;
    dc_tree_t *tree = NULL;
    int rc = DC_EXIT_FAIL;
    dc_status_t st = topo_path ? dc_topo_load(topo_path, &topo)
                     : synth   ? dc_topo_synthetic_parse(synth, &topo)
                               : dc_topo_from_slurm(nodelist, rmap, (uint32_t)senders, 0, 0, &topo);
    if (st != DC_OK) {
        if (st == DC_ERR_INVALID && synth)
            return dc_cli_usage_error("plan", "--synthetic: %s", dc_last_error());
        return dc_cli_fail("plan", st, NULL);
    }
    if (links && (st = dc_topo_apply_link_rates(topo, links)) != DC_OK) {
        rc = dc_cli_fail("plan", st, NULL);
        goto out;
    }
    /* the size of one version: from --params, else a nominal 1 GB so that
     * loads and the bottleneck can still be compared */
    uint64_t payload = params > 0 ? (uint64_t)llround(params * 2 * ratio) : 1000000000ULL;
    /* the engine's tree (chunk size from config chunk_size, its stripes),
     * unless --chunk / --stripes ask for another; the payload guides the
     * plan only for --simulate (the engine plans for the default) */
    dc_tree_opts_t to;
    dc_tree_opts_engine(&to);
    if (chunk)
        to.chunk_bytes = chunk;
    if (stripes)
        to.max_stripes = (uint32_t)stripes;
    if (sim)
        to.payload_bytes = payload;
    double t0 = plan_now(), c0 = plan_cpu();
    if ((st = dc_tree_plan(topo, &to, &tree)) != DC_OK) {
        rc = dc_cli_fail("plan", st, "planning");
        goto out;
    }
    for (int i = 0; i < n_dead; i++) {
        uint32_t idx, changed;
        dc_tree_t *nt;
        if ((st = dc_topo_find(topo, dead[i], &idx)) != DC_OK ||
            (st = dc_tree_replan(tree, idx, &nt, &changed)) != DC_OK) {
            rc = dc_cli_fail("plan", st, "--dead %s", dead[i]);
            goto out;
        }
        dc_tree_free(tree);
        tree = nt;
        if (!json)
            fprintf(stderr, "deltacast plan: re-planned without %s: %u edges changed\n", dead[i], changed);
    }
    double plan_s = plan_now() - t0, plan_cpu_s = plan_cpu() - c0;
    if (!sim) {
        if ((st = dc_tree_print(tree, payload, json ? DC_TREE_FORMAT_JSON : dot ? DC_TREE_FORMAT_DOT : DC_TREE_FORMAT_TEXT, stdout)) != DC_OK) {
            rc = dc_cli_fail("plan", st, NULL);
            goto out;
        }
        if (!json && !dot)
            printf("planned in %.3f ms (%.3f ms CPU)\n", plan_s * 1e3, plan_cpu_s * 1e3);
        rc = DC_EXIT_OK;
        goto out;
    }
    dc_sim_opts_t sp = {.size = sizeof(sp), .params = (uint64_t)params, .payload_ratio = ratio,
                          .encode_GBps = enc, .apply_GBps = apply, .chunk_bytes = chunk, .cpu_cores = cores};
    dc_sim_result_t res = {.size = sizeof(res)};
    double s0 = plan_now();
    if ((st = dc_sim_run(tree, &sp, &res)) != DC_OK) {
        rc = dc_cli_fail("plan", st, "simulation");
        goto out;
    }
    double sim_s = plan_now() - s0;
    if (json) {
        json_t *o = json_pack("{s:f,s:s,s:s,s:I,s:I,s:i,s:i,s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f}",
                              "predicted_seconds", res.predicted_seconds, "bottleneck", res.bottleneck,
                              "bottleneck_kind", res.bottleneck_kind, "payload_bytes", (json_int_t)res.payload_bytes,
                              "dense_bytes", (json_int_t)res.dense_bytes, "nodes", (int)res.nodes,
                              "streams", (int)dc_tree_stream_count(tree), "edges", (int)dc_tree_edge_count(tree),
                              "lower_bound_seconds", res.lower_bound_seconds, "params", params,
                              "change_rate", cr, "payload_ratio", ratio, "encode_gbps", enc, "apply_gbps", apply,
                              "plan_seconds", plan_s, "simulate_seconds", sim_s);
        if (!o) {
            rc = dc_cli_fail("plan", DC_ERR_NOMEM, "building JSON");
            goto out;
        }
        json_object_set_new(o, "events", json_integer(res.events));
        json_object_set_new(o, "cpu_cores", json_real(cores));
        json_dumpf(o, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
        json_decref(o);
    } else {
        char pb[32], db[32];
        printf("refit of %.4g params (%s dense, change rate %.4g, payload ratio %.4g -> %s on the wire)\n", params,
               dc_fmt_bytes(res.dense_bytes, db, sizeof(db)), cr, ratio,
               dc_fmt_bytes(res.payload_bytes, pb, sizeof(pb)));
        printf("nodes %u, streams %u, edges %u; encode %s, apply %s", res.nodes, dc_tree_stream_count(tree),
               dc_tree_edge_count(tree), enc > 0 ? "limited" : "unlimited", apply > 0 ? "limited" : "unlimited");
        if (cores > 0)
            printf("; one shared pool of %.4g cores", cores);
        printf("\n");
        printf("predicted refit time: %.3f s (lower bound %.3f s)\n", res.predicted_seconds, res.lower_bound_seconds);
        printf("bottleneck: %s\n", res.bottleneck);
        printf("planned in %.3f ms, simulated in %.3f ms (%u events)\n", plan_s * 1e3, sim_s * 1e3, res.events);
    }
    rc = DC_EXIT_OK;
out:
    dc_tree_free(tree);
    dc_topo_free(topo);
    return rc;
}
