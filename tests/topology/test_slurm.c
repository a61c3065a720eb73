/* test_slurm.c - Slurm host lists, the region map, launcher environment. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "deltacast.h"

static void expect(const char *list, const char *const *want, size_t n)
{
    char **h = NULL;
    size_t got = 0;
    dc_status_t st = dc_slurm_expand(list, &h, &got);
    cr_assert_eq(st, DC_OK, "%s: %s", list, dc_last_error());
    cr_assert_eq(got, n, "%s: %zu hosts, want %zu", list, got, n);
    for (size_t i = 0; i < n; i++)
        cr_assert_str_eq(h[i], want[i], "%s: host %zu", list, i);
    dc_slurm_hosts_free(h, got);
}

#define EXPECT(list, ...)                                                 \
    do {                                                                  \
        const char *w_[] = {__VA_ARGS__};                                 \
        expect(list, w_, sizeof(w_) / sizeof(w_[0]));                     \
    } while (0)

Test(slurm, plain_names)
{
    EXPECT("a", "a");
    EXPECT("node1,node2,cpu7", "node1", "node2", "cpu7");
    EXPECT("h.example.com", "h.example.com");
}

Test(slurm, ranges_and_padding)
{
    EXPECT("gpu-[001-004,010],cpu7", "gpu-001", "gpu-002", "gpu-003", "gpu-004", "gpu-010", "cpu7");
    EXPECT("n[8-11]", "n8", "n9", "n10", "n11");
    EXPECT("n[08-11]", "n08", "n09", "n10", "n11");
    EXPECT("n[5]", "n5");
    EXPECT("n[0099-0101]", "n0099", "n0100", "n0101");
}

Test(slurm, several_groups_and_suffix)
{
    EXPECT("a[1-2]-b[3-4]", "a1-b3", "a1-b4", "a2-b3", "a2-b4");
    EXPECT("rack[1-2]n[01,03]x", "rack1n01x", "rack1n03x", "rack2n01x", "rack2n03x");
    EXPECT("[1-2]", "1", "2");
    EXPECT("x[1,3],y[2-3],z", "x1", "x3", "y2", "y3", "z");
}

static void expect_bad(const char *list, const char *needle)
{
    char **h = NULL;
    size_t n = 0;
    dc_status_t st = dc_slurm_expand(list, &h, &n);
    cr_assert_eq(st, DC_ERR_INVALID, "'%s' should be rejected", list);
    cr_assert_null(h);
    cr_assert(strstr(dc_last_error(), needle) != NULL, "'%s': message '%s' lacks '%s'", list, dc_last_error(),
              needle);
}

Test(slurm, malformed_lists)
{
    expect_bad("", "empty");
    expect_bad("a,,b", "empty host name at column 3");
    expect_bad(",a", "empty host name at column 1");
    expect_bad("a,", "trailing ','");
    expect_bad("gpu-[001-004", "'[' at column 5 is never closed");
    expect_bad("gpu-[001-004,", "expected a number at column 14");
    expect_bad("gpu-001]", "without '['");
    expect_bad("gpu-[]", "expected a number at column 6");
    expect_bad("gpu-[4-1]", "runs backwards");
    expect_bad("gpu-[a-b]", "expected a number");
    expect_bad("gpu-[1-]", "end of a range");
    expect_bad("gpu-[[1]]", "expected a number");
    expect_bad("gpu 1", "not allowed");
    expect_bad("n[0-9999999]", "too large");
    expect_bad("a[1-1000]b[1-1000]c[1-10]", "more than");
    expect_bad("n[99999999999999999999]", "expected a number");
}

/* Random strings from the grammar's alphabet: never a crash, always either
 * OK with at least one non-empty host or DC_ERR_INVALID with a message. */
Test(slurm, fuzz_random_strings)
{
    static const char alpha[] = "ab09-[],.-_x1 \t\xff";
    unsigned seed = 12345;
    char buf[48];
    for (int it = 0; it < 200000; it++) {
        seed = seed * 1103515245u + 12345u;
        size_t len = (seed >> 16) % sizeof(buf);
        for (size_t i = 0; i < len; i++) {
            seed = seed * 1103515245u + 12345u;
            buf[i] = alpha[(seed >> 16) % (sizeof(alpha) - 1)];
        }
        buf[len] = 0;
        char **h = NULL;
        size_t n = 0;
        dc_status_t st = dc_slurm_expand(buf, &h, &n);
        if (st == DC_OK) {
            cr_assert(n >= 1);
            for (size_t i = 0; i < n; i++)
                cr_assert(h[i][0] != 0, "'%s' gave an empty host", buf);
            dc_slurm_hosts_free(h, n);
        } else {
            cr_assert_eq(st, DC_ERR_INVALID, "'%s': %d", buf, st);
            cr_assert(dc_last_error()[0] != 0);
        }
    }
}

Test(slurm, region_map)
{
    char r[64];
    const char *map = "gpu-0*=us-east,gpu-1*=eu-west,cpu*=us-east";
    cr_assert_eq(dc_topo_region_for_host(map, "gpu-001", r, sizeof(r)), DC_OK);
    cr_assert_str_eq(r, "us-east");
    cr_assert_eq(dc_topo_region_for_host(map, "gpu-105", r, sizeof(r)), DC_OK);
    cr_assert_str_eq(r, "eu-west");
    cr_assert_eq(dc_topo_region_for_host(map, "other", r, sizeof(r)), DC_OK);
    cr_assert_str_eq(r, "default");
    cr_assert_eq(dc_topo_region_for_host(NULL, "x", r, sizeof(r)), DC_OK);
    cr_assert_str_eq(r, "default");
    cr_assert_eq(dc_topo_region_for_host("nonsense", "x", r, sizeof(r)), DC_ERR_INVALID);
    cr_assert_eq(dc_topo_region_for_host("a=", "a", r, sizeof(r)), DC_ERR_INVALID);
    cr_assert_eq(dc_topo_region_for_host("a=verylongregion", "a", r, 4), DC_ERR_INVALID);
}

Test(slurm, topology_from_nodelist)
{
    dc_topo_t *t = NULL;
    cr_assert_eq(dc_topo_from_slurm("trn-[01-02],roll-a[1-3],roll-b[1-2]", "trn-*=train,roll-a*=a,roll-b*=b", 2, 0,
                                    0, &t),
                 DC_OK, "%s", dc_last_error());
    cr_assert_eq(dc_topo_node_count(t), 7);
    cr_assert_eq(dc_topo_region_count(t), 3);
    cr_assert_eq(dc_topo_shard_count(t), 2);
    dc_topo_node_info_t n = {.size = sizeof(n)};
    cr_assert_eq(dc_topo_node(t, 0, &n), DC_OK);
    cr_assert_str_eq(n.name, "trn-01");
    cr_assert_eq(n.role, DC_TOPO_ROLE_SENDER);
    cr_assert_str_eq(n.region, "train");
    cr_assert_eq(dc_topo_node(t, 6, &n), DC_OK);
    cr_assert_str_eq(n.name, "roll-b2");
    cr_assert_str_eq(n.region, "b");
    cr_assert_eq(n.role, DC_TOPO_ROLE_RECEIVER);
    cr_assert_eq(n.shards, 3);
    dc_topo_free(t);
    t = NULL;
    cr_assert_eq(dc_topo_from_slurm("a,b", NULL, 2, 0, 0, &t), DC_ERR_INVALID);
    cr_assert_eq(dc_topo_from_slurm("a[", NULL, 1, 0, 0, &t), DC_ERR_INVALID);
    cr_assert_null(t);
}

static void clear_launch_env(void)
{
    const char *v[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK",
                       "PMI_SIZE", "MPI_LOCALRANKID", "PMIX_RANK", "PMIX_SIZE", "PMIX_LOCAL_RANK", "SLURM_PROCID",
                       "SLURM_NTASKS", "SLURM_LOCALID"};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        unsetenv(v[i]);
}

Test(launch, environments)
{
    dc_launch_info_t l = {.size = sizeof(l)};
    clear_launch_env();
    cr_assert_eq(dc_launch_from_env(&l), DC_OK);
    cr_assert_str_eq(l.source, "none");
    cr_assert_eq(l.rank, -1);

    setenv("SLURM_PROCID", "3", 1);
    setenv("SLURM_NTASKS", "8", 1);
    cr_assert_eq(dc_launch_from_env(&l), DC_OK);
    cr_assert_str_eq(l.source, "slurm");
    cr_assert_eq(l.rank, 3);
    cr_assert_eq(l.world_size, 8);

    setenv("PMIX_RANK", "5", 1);
    cr_assert_eq(dc_launch_from_env(&l), DC_OK);
    cr_assert_str_eq(l.source, "pmix");
    cr_assert_eq(l.rank, 5);

    setenv("PMI_RANK", "1", 1);
    setenv("PMI_SIZE", "4", 1);
    cr_assert_eq(dc_launch_from_env(&l), DC_OK);
    cr_assert_str_eq(l.source, "pmi");
    cr_assert_eq(l.world_size, 4);

    setenv("OMPI_COMM_WORLD_RANK", "2", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "16", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
    cr_assert_eq(dc_launch_from_env(&l), DC_OK);
    cr_assert_str_eq(l.source, "ompi");
    cr_assert_eq(l.rank, 2);
    cr_assert_eq(l.world_size, 16);
    cr_assert_eq(l.local_rank, 0);

    setenv("OMPI_COMM_WORLD_RANK", "x2", 1);
    cr_assert_eq(dc_launch_from_env(&l), DC_ERR_INVALID);
    cr_assert(strstr(dc_last_error(), "OMPI_COMM_WORLD_RANK") != NULL);
    setenv("OMPI_COMM_WORLD_RANK", "16", 1);
    cr_assert_eq(dc_launch_from_env(&l), DC_ERR_INVALID);
    clear_launch_env();
}

Test(hw, hwloc_discovery_runs)
{
    dc_hw_info_t *hw = NULL;
    dc_status_t st = dc_hw_discover(&hw);
    if (st == DC_ERR_UNSUPPORTED)
        cr_skip_test("built without hwloc");
    cr_assert_eq(st, DC_OK, "%s", dc_last_error());
    cr_assert(hw->n_cores >= 1);
    cr_assert(hw->n_numa >= 1);
    for (uint32_t i = 0; i < hw->n_nics; i++) {
        cr_assert(hw->nics[i].name[0]);
        cr_assert(strcmp(hw->nics[i].kind, "openfabrics") == 0 || strcmp(hw->nics[i].kind, "network") == 0);
    }
    for (uint32_t g = 0; g < hw->n_gpus; g++) {
        cr_assert(hw->gpus[g].nic >= -1 && hw->gpus[g].nic < (int32_t)hw->n_nics);
        if (hw->n_nics)
            cr_assert(hw->gpus[g].nic >= 0, "GPU %s got no NIC though %u exist", hw->gpus[g].name, hw->n_nics);
    }
    dc_hw_free(hw);
}
