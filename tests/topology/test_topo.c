/* test_topo.c - topology files (YAML), validation errors, synthetic
 * topologies, measured link rates. */
#include "testenv.h"
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "deltacast.h"
#include "topology/topo.h"

static char path_buf[4096];

static const char *example(const char *name)
{
    const char *src = dc_test_src();
    snprintf(path_buf, sizeof(path_buf), "%s/topology/examples/%s", src ? src : "../..", name);
    return path_buf;
}

Test(topo, example_small_file)
{
    dc_topo_t *t = NULL;
    cr_assert_eq(dc_topo_load(example("small.yaml"), &t), DC_OK, "%s", dc_last_error());
    cr_assert_eq(dc_topo_node_count(t), 9);
    cr_assert_eq(dc_topo_region_count(t), 3);
    cr_assert_eq(dc_topo_shard_count(t), 2);
    cr_assert_str_eq(dc_topo_region_name(t, 1), "eu-west");
    uint32_t i;
    cr_assert_eq(dc_topo_find(t, "trn-002", &i), DC_OK);
    dc_topo_node_info_t n = {.size = sizeof(n)};
    cr_assert_eq(dc_topo_node(t, i, &n), DC_OK);
    cr_assert_eq(n.role, DC_TOPO_ROLE_SENDER);
    cr_assert_eq(n.shards, 2);
    cr_assert_str_eq(n.addr, "10.0.0.2");
    cr_assert_str_eq(n.cluster, "trainer");
    cr_assert_eq(n.n_nics, 2);
    cr_assert_str_eq(n.nics[1], "mlx5_1");
    cr_assert_eq(n.n_gpus, 4);
    cr_assert_str_eq(n.gpus[3], "3");
    cr_assert_eq(n.lan_bps, 200e9);
    cr_assert_eq(n.wan_bps, 10e9);
    cr_assert_eq(dc_topo_find(t, "euw-roll-03", &i), DC_OK);
    cr_assert_eq(dc_topo_node(t, i, &n), DC_OK);
    cr_assert_eq(n.shards, 2, "needs shard 1 only");
    cr_assert_eq(n.wan_bps, 5e9, "region wan overrides the default");
    cr_assert_eq(dc_topo_find(t, "euw-roll-04", &i), DC_OK);
    cr_assert_eq(dc_topo_node(t, i, &n), DC_OK);
    cr_assert_eq(n.lan_bps, 100e9, "node lan overrides the region");
    cr_assert_eq(n.shards, 3, "receivers need all shards by default");
    cr_assert_eq(dc_topo_find(t, "nobody", &i), DC_ERR_NOT_FOUND);
    cr_assert_eq(dc_topo_node(t, 99, &n), DC_ERR_INVALID);
    dc_topo_free(t);
}

Test(topo, example_nemo_file)
{
    dc_topo_t *t = NULL;
    cr_assert_eq(dc_topo_load(example("nemo-dcr.yaml"), &t), DC_OK, "%s", dc_last_error());
    cr_assert_eq(dc_topo_node_count(t), 16);
    cr_assert_eq(dc_topo_shard_count(t), 8);
    dc_topo_node_info_t n = {.size = sizeof(n)};
    for (uint32_t i = 0; i < 8; i++) {
        cr_assert_eq(dc_topo_node(t, i, &n), DC_OK);
        cr_assert_eq(n.shards, 1ULL << i, "sender %u owns shard %u", i, i);
    }
    dc_topo_free(t);
}

/* Parse `text`; expect failure whose message contains `needle`. */
static void bad(const char *text, const char *needle)
{
    dc_topo_t *t = NULL;
    dc_status_t st = dc_topo_parse(text, strlen(text), "t.yaml", &t);
    cr_assert_neq(st, DC_OK, "accepted:\n%s", text);
    cr_assert_null(t);
    cr_assert(strstr(dc_last_error(), needle) != NULL, "message '%s' lacks '%s'", dc_last_error(), needle);
}

#define HEAD "regions:\n  - name: a\n    nodes:\n      - {host: s, role: sender}\n"

Test(topo, validation_errors_name_the_line)
{
    bad("", "empty topology");
    bad("[1, 2]", "must be a mapping");
    bad("regions: [\n", "t.yaml:2");                        /* YAML syntax */
    bad("colour: red\nregions: []\n", "t.yaml:1: unknown key 'colour'");
    bad(HEAD "      - {host: r, role: receiver, speed: 1}\n", "t.yaml:5: unknown key 'speed' in a node");
    bad(HEAD "      - {host: r, role: rollout-ish}\n", "t.yaml:5: node 'r': role 'rollout-ish'");
    bad(HEAD "      - {host: r, lan: fast}\n", "t.yaml:5: lan");
    bad(HEAD "      - {host: s}\n", "t.yaml:5: host 's' appears twice (first at line 4)");
    bad(HEAD "      - {role: receiver}\n", "t.yaml:5: node without 'host'");
    bad(HEAD "      - {host: r, shards: [64]}\n", "t.yaml:5: shard '64' is not an integer in 0..63");
    bad("shards: 2\nregions:\n  - name: a\n    nodes:\n      - {host: s, role: sender, shards: [0]}\n"
        "      - {host: r}\n", "shard 1 is owned by no sender");
    bad("shards: 2\n" HEAD "      - {host: r, shards: [3]}\n", "names a shard >= shards");
    bad("regions:\n  - name: a\n    nodes:\n      - {host: r}\n", "no sender");
    bad("regions:\n  - name: a\n    nodes:\n      - {host: s, role: sender}\n", "no receiver");
    bad(HEAD "      - {host: r}\nlinks:\n  - {between: [a, zz]}\n", "t.yaml:7: link names unknown region 'zz'");
    bad(HEAD "      - {host: r}\nlinks:\n  - {between: [a, a]}\n", "two different regions");
    bad(HEAD "      - {host: r}\nlinks:\n  - {between: [a], rate: 1gbit}\n", "two different regions");
    bad(HEAD "  - name: a\n    nodes: []\n", "t.yaml:5: region 'a' declared twice");
    bad(HEAD "      - {host: r, nics: mlx5_0}\n", "t.yaml:5: nics must be a list");
    bad("defaults: {wan_latency: soon}\n" HEAD "      - {host: r}\n", "t.yaml:1: wan_latency");
    bad("regions:\n  - nodes: []\n", "t.yaml:2: region without 'name'");
    {
        /* deep nesting is refused before libyaml's loader (slow on it) */
        static char deep[300001];
        memcpy(deep, "regions: ", 9);
        memset(deep + 9, '[', 100000);
        memset(deep + 100009, ']', 100000);
        deep[200009] = 0;
        bad(deep, "t.yaml:1: nested deeper than 32 levels");
    }
    bad("regions:\n  - name: a\n    nodes:\n      - {host: s, role: sender, shards: [0]}\n"
        "      - {host: s2, role: sender}\n      - {host: r}\n", "t.yaml:5: sender 's2' owns no shard");
}

/* Each node listens on its address and its peers dial it: port 0 (any free
 * port) cannot work, and two nodes on one HOST:PORT cannot both listen;
 * the message names the node(s) and their lines.  The same host on other
 * ports, and addresses without a port, stay valid. */
Test(topo, port_zero_and_duplicate_addresses_refused)
{
#define ADDR_HEAD "regions:\n  - name: a\n    nodes:\n      - {host: s, role: sender, addr: \"127.0.0.1:7300\"}\n"
    bad(ADDR_HEAD "      - {host: r, addr: \"10.0.0.2:0\"}\n",
        "t.yaml:5: node 'r' has port 0 in addr '10.0.0.2:0'");
    bad(ADDR_HEAD "      - {host: r, addr: \"127.0.0.1:7300\"}\n",
        "t.yaml:5: nodes 's' (line 4) and 'r' (line 5) have the same address 127.0.0.1:7300");
    bad(ADDR_HEAD "      - {host: r, addr: \"[::1]:7301\"}\n      - {host: q, addr: \"[::1]:7301\"}\n",
        "nodes 'r' (line 5) and 'q' (line 6) have the same address [::1]:7301");
    const char *ok = ADDR_HEAD "      - {host: r, addr: \"127.0.0.1:7301\"}\n"
                               "      - {host: q, addr: \"10.0.0.9\"}\n"
                               "      - {host: p, addr: \"10.0.0.9\"}\n"
                               "      - {host: v6, addr: \"fe80::1\"}\n";
    dc_topo_t *t = NULL;
    cr_assert_eq(dc_topo_parse(ok, strlen(ok), "t.yaml", &t), DC_OK, "%s", dc_last_error());
    dc_topo_free(t);
    /* the synthetic local topology on base port 0 */
    cr_assert_neq(dc_topo_synthetic_local(1, 2, 0, &t), DC_OK);
    cr_assert(strstr(dc_last_error(), "port 0"), "%s", dc_last_error());
#undef ADDR_HEAD
}

/* With a rendezvous (DC_TOPO_LOAD_PORT0) a file's port-0 nodes pass the
 * load; dc_topo_fill_port0 then gives each its published address and
 * checks them all again: a duplicate of a fixed address is refused, and
 * a missing entry names the node. */
Test(topo, port_zero_filled_from_a_rendezvous)
{
    char path[] = "/tmp/dc_topo_p0_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    const char *y = "regions:\n  - name: a\n    nodes:\n"
                    "      - {host: s, role: sender, addr: \"127.0.0.1:0\"}\n"
                    "      - {host: r, addr: \"127.0.0.1:7301\"}\n"
                    "      - {host: q, addr: \"[::1]:0\"}\n";
    cr_assert_eq(write(fd, y, strlen(y)), (ssize_t)strlen(y));
    close(fd);
    dc_topo_t *t = NULL;
    cr_assert_neq(dc_topo_load(path, &t), DC_OK, "port 0 loaded without a rendezvous");
    cr_assert_eq(dc_topo_load_flags(path, DC_TOPO_LOAD_PORT0, &t), DC_OK, "%s", dc_last_error());
    cr_assert(dc_topo_node_port0(t, 0) && !dc_topo_node_port0(t, 1) && dc_topo_node_port0(t, 2));
    char a0[] = "127.0.0.1:40001", a1[] = "127.0.0.1:7301", a2[] = "[::1]:40002";
    char *missing[] = {a0, a1, NULL};
    cr_assert_neq(dc_topo_fill_port0(t, missing), DC_OK);
    cr_assert(strstr(dc_last_error(), "node 'q' (port 0): no port published"), "%s",
              dc_last_error());
    dc_topo_free(t);
    t = NULL;
    cr_assert_eq(dc_topo_load_flags(path, DC_TOPO_LOAD_PORT0, &t), DC_OK);
    char dup[] = "127.0.0.1:7301";
    char *clash[] = {dup, a1, a2};
    cr_assert_neq(dc_topo_fill_port0(t, clash), DC_OK);
    cr_assert(strstr(dc_last_error(), "same address 127.0.0.1:7301"), "%s", dc_last_error());
    dc_topo_free(t);
    t = NULL;
    cr_assert_eq(dc_topo_load_flags(path, DC_TOPO_LOAD_PORT0, &t), DC_OK);
    char *all[] = {a0, a1, a2};
    cr_assert_eq(dc_topo_fill_port0(t, all), DC_OK, "%s", dc_last_error());
    dc_topo_node_info_t ni;
    memset(&ni, 0, sizeof(ni));
    ni.size = sizeof(ni);
    cr_assert_eq(dc_topo_node(t, 2, &ni), DC_OK);
    cr_assert_str_eq(ni.addr, "[::1]:40002");
    cr_assert(!dc_topo_node_port0(t, 0));
    dc_topo_free(t);
    unlink(path);
}

Test(topo, loading_missing_file)
{
    dc_topo_t *t = NULL;
    cr_assert_eq(dc_topo_load("/nonexistent/topo.yaml", &t), DC_ERR_IO);
    cr_assert(strstr(dc_last_error(), "/nonexistent/topo.yaml") != NULL);
}

Test(topo, synthetic)
{
    dc_topo_t *t = NULL;
    cr_assert_eq(dc_topo_synthetic_parse("3:4:10gbit:100gbit", &t), DC_OK, "%s", dc_last_error());
    cr_assert_eq(dc_topo_node_count(t), 16);
    cr_assert_eq(dc_topo_region_count(t), 4);
    dc_topo_node_info_t n = {.size = sizeof(n)};
    cr_assert_eq(dc_topo_node(t, 15, &n), DC_OK);
    cr_assert_str_eq(n.name, "r2-n3");
    cr_assert_eq(n.wan_bps, 10e9);
    cr_assert_eq(n.lan_bps, 100e9);
    dc_topo_free(t);
    const char *badspec[] = {"", "3", "0:4", "3:0", "3:x", "3:4:fast", "3:4:5gbit:1gbit:9", "-1:4", "3:4:"};
    for (size_t i = 0; i < sizeof(badspec) / sizeof(badspec[0]); i++) {
        t = NULL;
        cr_assert_eq(dc_topo_synthetic_parse(badspec[i], &t), DC_ERR_INVALID, "'%s' accepted", badspec[i]);
        cr_assert_null(t);
    }
}

Test(topo, synthetic_local)
{
    dc_topo_t *t = NULL;
    cr_assert_eq(dc_topo_synthetic_local(2, 3, 7300, &t), DC_OK, "%s", dc_last_error());
    cr_assert_eq(dc_topo_node_count(t), 7);
    cr_assert_eq(dc_topo_shard_count(t), 1);
    dc_topo_node_info_t n = {.size = sizeof(n)};
    cr_assert_eq(dc_topo_node(t, 0, &n), DC_OK);
    cr_assert_str_eq(n.name, "trainer");
    cr_assert_str_eq(n.addr, "127.0.0.1:7300");
    cr_assert_eq(n.role, DC_TOPO_ROLE_SENDER);
    cr_assert_eq(dc_topo_node(t, 6, &n), DC_OK);
    cr_assert_str_eq(n.addr, "127.0.0.1:7306");
    cr_assert_str_eq(n.region, "r1");
    dc_topo_free(t);
    t = NULL;
    cr_assert_eq(dc_topo_synthetic_local(2, 3, 65533, &t), DC_ERR_INVALID);
}

static const char *write_tmp(const char *text)
{
    static char p[64];
    strcpy(p, "/tmp/dc_links_XXXXXX");
    int fd = mkstemp(p);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return p;
}

Test(topo, link_rates_replace_nominal)
{
    dc_topo_t *t = NULL;
    cr_assert_eq(dc_topo_synthetic(2, 2, 0, 0, &t), DC_OK);
    dc_topo_node_info_t n = {.size = sizeof(n)};
    const char *p = write_tmp("{\"links\": [{\"from\": \"train-s0\", \"to\": \"r0-n0\", \"bits_per_second\": 3.5e9},"
                              " {\"src\": \"r1-n0\", \"dst\": \"r1-n1\", \"gbps\": 80},"
                              " {\"from\": \"train\", \"to\": \"r1\", \"rate\": \"7gbit\"}]}");
    cr_assert_eq(dc_topo_apply_link_rates(t, p), DC_OK, "%s", dc_last_error());
    unlink(p);
    uint32_t i;
    cr_assert_eq(dc_topo_find(t, "r0-n0", &i), DC_OK);
    cr_assert_eq(dc_topo_node(t, i, &n), DC_OK);
    cr_assert_eq(n.wan_bps, 3.5e9);
    cr_assert_eq(dc_topo_find(t, "r1-n1", &i), DC_OK);
    cr_assert_eq(dc_topo_node(t, i, &n), DC_OK);
    cr_assert_eq(n.lan_bps, 80e9);
    cr_assert_eq(n.wan_bps, 5e9);
    /* the region pair: a link between them at the measured rate */
    int rt = dc_topo_region_find(t, "train"), r1 = dc_topo_region_find(t, "r1");
    cr_assert(rt >= 0 && r1 >= 0);
    const dc_topo_rlink_t *rl = dc_topo_rlink(t, (uint32_t)rt, (uint32_t)r1);
    cr_assert_not_null(rl, "the train -> r1 entry set no region link");
    cr_assert_eq(rl->bps, 7e9);

    p = write_tmp("# measured\nr0-n1 r1-n1 2gbit\n\n");
    cr_assert_eq(dc_topo_apply_link_rates(t, p), DC_OK, "%s", dc_last_error());
    unlink(p);
    cr_assert_eq(dc_topo_node(t, i, &n), DC_OK);
    cr_assert_eq(n.wan_bps, 2e9);

    const char *bads[][2] = {
        {"a b\n", ":1: expected 'A B RATE'"},
        {"r0-n1 r1-n1 fast\n", ":1"},
        {"r0-n1 r1 1gbit\n", "must both be nodes"},
        {"{\"links\": [{\"from\": \"r0-n1\"}]}", "entry 0"},
        {"{\"links\": [{\"from\": \"r0-n1\", \"to\": \"r0-n0\"}]}", "no bits_per_second"},
        {"{\"links\": 5}", "expected"},
        {"{\"links\": [", "JSON error"},
        {"{\"links\": [{\"from\": \"r0-n1\", \"to\": \"r0-n0\", \"bps\": -1}]}", "out of range"},
    };
    for (size_t k = 0; k < sizeof(bads) / sizeof(bads[0]); k++) {
        p = write_tmp(bads[k][0]);
        dc_status_t st = dc_topo_apply_link_rates(t, p);
        unlink(p);
        cr_assert_neq(st, DC_OK, "accepted %s", bads[k][0]);
        cr_assert(strstr(dc_last_error(), bads[k][1]) != NULL, "'%s' lacks '%s'", dc_last_error(), bads[k][1]);
    }
    dc_topo_free(t);
}

/* Fuzz-ish: random byte edits and truncations of a valid file never crash
 * the parser; failures always come with a message. */
Test(topo, fuzz_mutated_files)
{
    FILE *fp = fopen(example("small.yaml"), "rb");
    cr_assert_not_null(fp);
    static char orig[8192], buf[8192];
    size_t len = fread(orig, 1, sizeof(orig), fp);
    fclose(fp);
    static const char alpha[] = "-:[]{},#&*!|>'\"\n 0123456789abcxyz\t\\%@\xff";
    unsigned seed = 777;
    uint32_t ok = 0;
    for (int it = 0; it < 3000; it++) {
        memcpy(buf, orig, len);
        size_t n = len;
        seed = seed * 1103515245u + 12345u;
        int edits = 1 + (int)((seed >> 16) % 4);
        for (int k = 0; k < edits; k++) {
            seed = seed * 1103515245u + 12345u;
            size_t pos = (seed >> 8) % n;
            seed = seed * 1103515245u + 12345u;
            if ((seed >> 16) % 8 == 0)
                n = pos + 1; /* truncate */
            else
                buf[pos] = alpha[(seed >> 16) % (sizeof(alpha) - 1)];
        }
        dc_topo_t *t = NULL;
        dc_status_t st = dc_topo_parse(buf, n, "fuzz.yaml", &t);
        if (st == DC_OK) {
            ok++;
            cr_assert(dc_topo_node_count(t) >= 2);
            dc_tree_t *tree = NULL;
            cr_assert_eq(dc_tree_plan(t, NULL, &tree), DC_OK, "%s", dc_last_error());
            dc_tree_free(tree);
            dc_topo_free(t);
        } else {
            cr_assert_null(t);
            cr_assert(strstr(dc_last_error(), "fuzz.yaml") != NULL, "message without file: %s", dc_last_error());
        }
    }
    cr_assert(ok > 0 && ok < 3000, "%u of 3000 mutants parsed", ok);
}

/* `deltacast perf link --json` results (peer = ADDR:PORT, gbps) with a
 * "from" added, one per line. */
Test(topo, link_rates_from_perf_link_json_lines)
{
    dc_topo_t *t = NULL;
    cr_assert_eq(dc_topo_synthetic_local(1, 2, 7300, &t), DC_OK);
    const char *p = write_tmp("{\"transport\": \"tcp\", \"peer\": \"127.0.0.1:7301\", \"gbps\": 3.0, \"from\": \"trainer\"}\n"
                              "{\"transport\": \"rdma\", \"peer\": \"127.0.0.1:7302\", \"gbps\": 50, \"from\": \"r0-n0\"}\n");
    cr_assert_eq(dc_topo_apply_link_rates(t, p), DC_OK, "%s", dc_last_error());
    unlink(p);
    dc_topo_node_info_t n = {.size = sizeof(n)};
    cr_assert_eq(dc_topo_node(t, 1, &n), DC_OK);
    cr_assert_str_eq(n.name, "r0-n0");
    cr_assert_eq(n.wan_bps, 3e9);
    cr_assert_eq(n.lan_bps, 50e9);
    cr_assert_eq(dc_topo_node(t, 0, &n), DC_OK);
    cr_assert_eq(n.wan_bps, 3e9);
    cr_assert_eq(dc_topo_node(t, 2, &n), DC_OK);
    cr_assert_eq(n.lan_bps, 50e9);
    p = write_tmp("{\"peer\": \"127.0.0.1:7301\", \"gbps\": 3.0, \"from\": \"trainer\"}\n{\"peer\": ");
    cr_assert_eq(dc_topo_apply_link_rates(t, p), DC_ERR_FORMAT);
    cr_assert(strstr(dc_last_error(), "JSON error near byte") != NULL, "%s", dc_last_error());
    unlink(p);
    dc_topo_free(t);
}
