/* test_report.c - what a clean job prints: `deltacast node`'s root writes
 * one line per committed version (text, or JSON with --json) and a total;
 * no node of a clean job writes a warning, at the default log level or at
 * info.  Real `deltacast node` processes on loopback. */
#include "refit_util.h"

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
