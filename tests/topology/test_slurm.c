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

/* --- placement of a launched job's tasks (dc_launch_place) -------------- */
#include "topology/topo.h"

/* want: "host/local" per task */
static void place(const char *list, const char *per, uint32_t tasks, const char *want)
{
    dc_launch_place_t p;
    dc_status_t st = dc_launch_place(list, per, tasks, &p);
    cr_assert_eq(st, DC_OK, "%s %s %u: %s", list, per ? per : "-", tasks, dc_last_error());
    char got[512] = "";
    size_t len = 0;
    for (uint32_t r = 0; r < p.n_tasks; r++)
        len += (size_t)snprintf(got + len, sizeof(got) - len, "%s%s/%u", r ? " " : "",
                                p.hosts[p.host_of[r]], p.local_of[r]);
    cr_assert_str_eq(got, want, "%s %s %u", list, per ? per : "-", tasks);
    dc_launch_place_free(&p);
}

static void place_bad(const char *list, const char *per, uint32_t tasks, const char *msg)
{
    dc_launch_place_t p;
    cr_assert_neq(dc_launch_place(list, per, tasks, &p), DC_OK, "%s accepted", list);
    cr_assert(strstr(dc_last_error(), msg), "%s: '%s' lacks '%s'", list, dc_last_error(), msg);
}

Test(launch_place, blocks_and_tasks_per_node)
{
    place("a,b", NULL, 0, "a/0 b/0");
    place("a,b", NULL, 5, "a/0 a/1 a/2 b/0 b/1");      /* Slurm's block: 3, 2 */
    place("n[1-2]", "3,1", 4, "n1/0 n1/1 n1/2 n2/0");
    place("n[1-3]", "2(x2),1", 5, "n1/0 n1/1 n2/0 n2/1 n3/0");
    place("127.0.0.1", NULL, 3, "127.0.0.1/0 127.0.0.1/1 127.0.0.1/2");
    place("a,a,b", NULL, 0, "a/0 a/1 b/0");            /* one entry per task */
    place("a,b,a", NULL, 0, "a/0 b/0 a/1");
}

Test(launch_place, disagreements_named)
{
    place_bad("a,b,c", NULL, 2, "3 hosts for 2 tasks");
    place_bad("a,b", "3,1", 5, "adds up to 4 tasks, the job has 5");
    place_bad("a,b", "2(x3)", 6, "names more hosts than the host list's 2");
    place_bad("a,b", "2", 2, "names 1 hosts, the host list 2");
    place_bad("a,b", "2(y3)", 6, "expected '(xN)'");
    place_bad("a,b", "0,1", 1, "expected a count");
    place_bad("a,b", "1,1x", 2, "unexpected 'x'");
    place_bad("a,b", "1(x99999999999999999999)", 2, "bad repeat");
    place_bad("a[1", NULL, 1, "never closed");
    place_bad("a", NULL, 2000000, "at most");
}

Test(launch_place, topology_ports_and_regions)
{
    dc_launch_place_t p;
    cr_assert_eq(dc_launch_place("gpu-1,cpu-[1-2]", "2,1,1", 4, &p), DC_OK, "%s", dc_last_error());
    dc_topo_t *t = NULL;
    cr_assert_eq(dc_topo_from_place(&p, "gpu-*=train,*=rollout", 1, 7400, NULL, &t), DC_OK, "%s",
                 dc_last_error());
    cr_assert_eq(dc_topo_node_count(t), 4);
    const char *want[][4] = {{"gpu-1#0", "gpu-1:7400", "train", "s"},
                             {"gpu-1#1", "gpu-1:7401", "train", "r"},
                             {"cpu-1", "cpu-1:7400", "rollout", "r"},
                             {"cpu-2", "cpu-2:7400", "rollout", "r"}};
    for (uint32_t i = 0; i < 4; i++) {
        dc_topo_node_info_t ni = {.size = sizeof(ni)};
        cr_assert_eq(dc_topo_node(t, i, &ni), DC_OK);
        cr_assert_str_eq(ni.name, want[i][0]);
        cr_assert_str_eq(ni.addr, want[i][1]);
        cr_assert_str_eq(ni.region, want[i][2]);
        cr_assert_eq(ni.role, want[i][3][0] == 's' ? DC_TOPO_ROLE_SENDER : DC_TOPO_ROLE_RECEIVER);
    }
    dc_topo_free(t);
    /* the addresses of a rendezvous replace the computed ones */
    char *addrs[] = {"gpu-1:4000", "gpu-1:4001", "cpu-1:5000", "cpu-2:6000"};
    cr_assert_eq(dc_topo_from_place(&p, NULL, 2, 0, addrs, &t), DC_OK, "%s", dc_last_error());
    dc_topo_node_info_t ni = {.size = sizeof(ni)};
    cr_assert_eq(dc_topo_node(t, 3, &ni), DC_OK);
    cr_assert_str_eq(ni.addr, "cpu-2:6000");
    cr_assert_eq(dc_topo_node(t, 1, &ni), DC_OK);
    cr_assert_eq(ni.role, DC_TOPO_ROLE_SENDER);
    dc_topo_free(t);
    /* port 0 without a rendezvous is refused by the topology's check */
    cr_assert_neq(dc_topo_from_place(&p, NULL, 1, 0, NULL, &t), DC_OK);
    cr_assert(strstr(dc_last_error(), "port 0"), "%s", dc_last_error());
    cr_assert_neq(dc_topo_from_place(&p, NULL, 4, 7400, NULL, &t), DC_OK);
    cr_assert(strstr(dc_last_error(), "4 senders among 4 tasks"), "%s", dc_last_error());
    cr_assert_neq(dc_topo_from_place(&p, NULL, 1, 65535, NULL, &t), DC_OK);
    cr_assert(strstr(dc_last_error(), "past 65535"), "%s", dc_last_error());
    dc_launch_place_free(&p);
}

/* --- the rendezvous directory: files read as hostile --------------------- */
#include <stdio.h>
#include <unistd.h>

static char rdv_dir[64];

static void rdv_write(const char *name, const char *bytes, size_t n)
{
    char p[128];
    snprintf(p, sizeof(p), "%s/%s", rdv_dir, name);
    FILE *f = fopen(p, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(bytes, 1, n, f), n);
    fclose(f);
}

/* rank-1 holds `bytes`; waiting for 2 ranks must fail with `msg` */
static void rdv_bad(const char *bytes, size_t n, const char *msg)
{
    rdv_write("rank-1", bytes, n);
    char **a = NULL;
    dc_status_t st = dc_rendezvous_wait(rdv_dir, "job7", 2, 200, &a);
    cr_assert_neq(st, DC_OK, "accepted '%.*s'", (int)n, bytes);
    cr_assert(strstr(dc_last_error(), msg), "'%s' lacks '%s'", dc_last_error(), msg);
}

Test(rendezvous, publish_wait_and_hostile_files)
{
    strcpy(rdv_dir, "/tmp/dc_rdv_XXXXXX");
    cr_assert_not_null(mkdtemp(rdv_dir));
    char deep[128];
    snprintf(deep, sizeof(deep), "%s/a/b", rdv_dir);
    /* published (the directory made with its parents), then read back */
    cr_assert_eq(dc_rendezvous_publish(deep, "job7", 0, "127.0.0.1:4000"), DC_OK, "%s",
                 dc_last_error());
    cr_assert_eq(dc_rendezvous_publish(deep, "job7", 1, "[::1]:4001"), DC_OK, "%s", dc_last_error());
    char **a = NULL;
    cr_assert_eq(dc_rendezvous_wait(deep, "job7", 2, 1000, &a), DC_OK, "%s", dc_last_error());
    cr_assert_str_eq(a[0], "127.0.0.1:4000");
    cr_assert_str_eq(a[1], "[::1]:4001");
    dc_rendezvous_free(a, 2);
    cr_assert_neq(dc_rendezvous_publish(deep, "job7", 2, "host:0"), DC_OK);
    cr_assert_neq(dc_rendezvous_publish(deep, "job7", 2, "ho st:80"), DC_OK);
    /* another job's file is not this job's: a timeout naming it */
    cr_assert_eq(dc_rendezvous_wait(deep, "job8", 2, 200, &a), DC_ERR_TIMEOUT);
    cr_assert(strstr(dc_last_error(), "ranks 0 (a file of another job), 1 (a file of another job)"),
              "%s", dc_last_error());
    /* hostile entries in the directory are named, never trusted */
    rdv_write("rank-0", "deltacast-rendezvous 1 job7 127.0.0.1:4000\n", 43);
    rdv_bad("garbage\n", 8, "is not a rendezvous entry");
    rdv_bad("deltacast-rendezvous 1 job7 127.0.0.1:4000", 42, "is not a rendezvous entry");
    rdv_bad("deltacast-rendezvous 1 job7 a:1\nb:2\n", 36, "is not a rendezvous entry");
    rdv_bad("deltacast-rendezvous 1 job7 a:1\0\n", 34, "is not a rendezvous entry");
    rdv_bad("deltacast-rendezvous 1 job7\n", 28, "has no address");
    rdv_bad("deltacast-rendezvous 1 job7 127.0.0.1:65536\n", 44, "is not HOST:PORT");
    rdv_bad("deltacast-rendezvous 1 job7 127.0.0.1:0\n", 40, "is not HOST:PORT");
    rdv_bad("deltacast-rendezvous 1 job7 a/b:80\n", 35, "is not HOST:PORT");
    rdv_bad("deltacast-rendezvous 1 job7 :80\n", 32, "is not HOST:PORT");
    char big[2048];
    memset(big, 'a', sizeof(big));
    memcpy(big, "deltacast-rendezvous 1 job7 ", 28);
    big[sizeof(big) - 1] = '\n';
    rdv_bad(big, sizeof(big), "is not a rendezvous entry");
    /* a symlink is not followed */
    char link[128];
    snprintf(link, sizeof(link), "%s/rank-1", rdv_dir);
    unlink(link);
    cr_assert_eq(symlink("/etc/passwd", link), 0);
    cr_assert_neq(dc_rendezvous_wait(rdv_dir, "job7", 2, 200, &a), DC_OK);
    cr_assert(strstr(dc_last_error(), "cannot open"), "%s", dc_last_error());
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", rdv_dir);
    cr_assert_eq(system(cmd), 0);
}
