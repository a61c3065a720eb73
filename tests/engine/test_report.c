/* test_report.c - what a clean job prints: `deltacast node`'s root writes
 * one line per committed version (text, or JSON with --json) and a total;
 * no node of a clean job writes a warning, at the default log level or at
 * info.  Real `deltacast node` processes on loopback. */
#include "refit_util.h"

#include <jansson.h>

static job_t J;

static void fini(void)
{
    job_fini(&J);
}

TestSuite(report, .fini = fini, .timeout = 120);

/* The lines of FILE that start with `prefix`, counted. */
static int count_lines(const char *path, const char *prefix)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    char line[4096];
    int k = 0;
    while (fgets(line, sizeof(line), f))
        k += strncmp(line, prefix, strlen(prefix)) == 0;
    fclose(f);
    return k;
}

static void no_warning_in_logs(const job_t *j)
{
    for (int i = 0; i < j->nnodes; i++) {
        char p[256];
        snprintf(p, sizeof(p), "%s/log%d", j->dir, i);
        if (job_sh("grep -E ' (warn|error): ' %s >&2", p) == 0)
            cr_assert_fail("node %d of a clean job logged a warning or an error (above)", i);
    }
}

/* Text lines at the default log level (warn): "version N: X of Y (Rx) in
 * S s, K receivers, M repairs (B)" per version, then "total: ...". */
Test(report, per_version_lines_and_no_warning)
{
    job_init(&J, 2, 2, "1e5", 2, "optimizer");
    job_start(&J, 0, "DELTACAST_LOG=warn", NULL);
    usleep(100000);
    for (int i = 1; i < J.nnodes; i++)
        job_start(&J, i, "DELTACAST_LOG=warn", NULL);
    job_expect_all_exit_ok(&J, 60, 10);
    char p[256];
    snprintf(p, sizeof(p), "%s/log0", J.dir);
    cr_assert_eq(count_lines(p, "version "), 2);
    cr_assert_eq(count_lines(p, "total: 2 versions, "), 1);
    cr_assert_eq(job_sh("grep -qE '^version 1: [0-9.]+ [KM]?i?B of [0-9.]+ [KM]?i?B \\([0-9.]+x\\) "
                        "in [0-9.]+ s, 4 receivers, 0 repairs \\(0 B\\)$' %s", p),
                 0, "no summary line of version 1");
    cr_assert_eq(job_sh("grep -q '^version 2: ' %s", p), 0);
    no_warning_in_logs(&J);
}

/* --json at DELTACAST_LOG=info: one object a line per version, then the
 * summary; still no warning from any node. */
Test(report, json_lines_and_no_warning_at_info)
{
    job_init(&J, 2, 2, "1e5", 2, "optimizer");
    job_start_all(&J, "--json");
    job_expect_all_exit_ok(&J, 60, 10);
    char p[256];
    snprintf(p, sizeof(p), "%s/log0", J.dir);
    cr_assert_eq(count_lines(p, "{\"version\": "), 2);
    cr_assert_eq(count_lines(p, "{\"summary\": {\"ok\": true, \"versions\": 2, "), 1);
    cr_assert_eq(job_sh("grep -qE '^\\{\"version\": 2, \"payload_bytes\": [1-9][0-9]*, "
                        "\"dense_bytes\": [1-9][0-9]*, \"ratio\": [0-9.]+, \"seconds\": [0-9.]+, "
                        "\"receivers\": 4, \"repairs\": 0, \"repair_bytes\": 0\\}$' %s", p),
                 0, "no JSON line of version 2");
    /* info lines are there (the level took), warnings are not */
    cr_assert_eq(job_sh("grep -q ' info: ' %s", p), 0);
    no_warning_in_logs(&J);
}

/* The edges (parent, child, stream) of a plan's JSON, as "p>c/s " words. */
static void plan_edges(const char *json, char *out, size_t len)
{
    json_error_t je;
    json_t *o = json_loads(json, 0, &je);
    cr_assert_not_null(o, "plan is not JSON: %s: %.200s", je.text, json);
    json_t *edges = json_object_get(o, "edges");
    cr_assert(json_is_array(edges));
    size_t k = 0;
    out[0] = 0;
    for (size_t i = 0; i < json_array_size(edges); i++) {
        json_t *e = json_array_get(edges, i);
        int w = snprintf(out + k, len - k, "%lld>%lld/%lld ",
                         (long long)json_integer_value(json_object_get(e, "parent")),
                         (long long)json_integer_value(json_object_get(e, "child")),
                         (long long)json_integer_value(json_object_get(e, "stream")));
        cr_assert(w > 0 && (size_t)w < len - k);
        k += (size_t)w;
    }
    json_decref(o);
}

/* `deltacast plan --json` shows the tree the engine runs: the root's plan
 * (logged at debug) and the command's have the same edges.  The topology
 * makes them differ where the defaults do: a sender whose WAN share is 8x
 * the receivers' (the plan used to split its shard into 8 stripes, the
 * engine plans one), and the job's chunk size from the environment. */
Test(report, plan_command_shows_the_engines_tree)
{
    job_init(&J, 2, 4, "1e5", 1, "optimizer");
    snprintf(J.topo, sizeof(J.topo), "%s/topo.yaml", J.dir);
    FILE *f = fopen(J.topo, "w");
    cr_assert_not_null(f);
    fprintf(f, "regions:\n  - name: train\n    wan: 40gbit\n    nodes:\n"
               "      - {host: s0, addr: \"127.0.0.1:%d\", role: sender}\n", J.port);
    for (int r = 0, rank = 1; r < 2; r++) {
        fprintf(f, "  - name: r%d\n    nodes:\n", r);
        for (int i = 0; i < 4; i++, rank++)
            fprintf(f, "      - {host: r%dn%d, addr: \"127.0.0.1:%d\", role: receiver}\n", r, i,
                    J.port + rank);
    }
    fclose(f);
    job_start(&J, 0, "DELTACAST_LOG=debug", NULL);
    usleep(100000);
    for (int i = 1; i < J.nnodes; i++)
        job_start(&J, i, NULL, NULL);
    job_expect_all_exit_ok(&J, 60, 10);
    char p[256];
    snprintf(p, sizeof(p), "%s/log0", J.dir);
    f = fopen(p, "r");
    cr_assert_not_null(f);
    static char line[4096], planned[1 << 20];
    static char e1[65536], e2[65536];
    size_t k = 0;
    while (fgets(line, sizeof(line), f)) {
        char *at = strstr(line, "root: plan edges: ");
        if (!at)
            continue;
        at += strlen("root: plan edges: ");
        at[strcspn(at, "\n")] = 0;
        int w = snprintf(e1 + k, sizeof(e1) - k, "%s", at);
        cr_assert(w > 0 && (size_t)w < sizeof(e1) - k);
        k += (size_t)w;
    }
    fclose(f);
    cr_assert(k > 0, "the root logged no plan at debug");
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "DELTACAST_CHUNK_SIZE=64KiB '%s' plan --topology '%s' --json",
             job_bin(), J.topo);
    FILE *pp = popen(cmd, "r");
    cr_assert_not_null(pp);
    size_t n = fread(planned, 1, sizeof(planned) - 1, pp);
    planned[n] = 0;
    cr_assert_eq(pclose(pp), 0, "%s", cmd);
    plan_edges(planned, e2, sizeof(e2));
    cr_assert(e1[0], "no edges");
    cr_assert_str_eq(e2, e1, "deltacast plan's edges differ from the engine's");
}
