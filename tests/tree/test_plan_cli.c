/* test_plan_cli.c - `deltacast plan` through the real binary
 * ($DELTACAST_BIN). */
#include "testenv.h"
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

struct run_result {
    int code;
    char out[1 << 20];
    char err[65536];
};

static struct run_result R;

static void run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void run(const char *fmt, ...)
{
    const char *bin = dc_test_bin();
    cr_assert_not_null(bin, "DELTACAST_BIN not set");
    char args[2048], cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    char eo[] = "/tmp/dc_plan_errXXXXXX";
    int efd = mkstemp(eo);
    cr_assert(efd >= 0);
    snprintf(cmd, sizeof(cmd), "'%s' plan %s 2>'%s'", bin, args, eo);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(R.out, 1, sizeof(R.out) - 1, p);
    R.out[n] = 0;
    int status = pclose(p);
    R.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    FILE *e = fdopen(efd, "r");
    n = fread(R.err, 1, sizeof(R.err) - 1, e);
    R.err[n] = 0;
    fclose(e);
    unlink(eo);
}

static const char *src(void)
{
    const char *s = dc_test_src();
    return s ? s : "../..";
}

Test(plan_cli, help)
{
    run("--help");
    cr_assert_eq(R.code, 0);
    cr_assert(strstr(R.out, "--synthetic") && strstr(R.out, "--simulate") && strstr(R.out, "--payload-ratio"));
}

Test(plan_cli, text_plan_of_a_file)
{
    run("--topology %s/topology/examples/small.yaml", src());
    cr_assert_eq(R.code, 0, "%s", R.err);
    cr_assert(strstr(R.out, "9 nodes") != NULL, "%s", R.out);
    cr_assert(strstr(R.out, "WAN  tcp") != NULL, "%s", R.out);
    cr_assert(strstr(R.out, "expected bottleneck") != NULL, "%s", R.out);
}

Test(plan_cli, json_plan)
{
    run("--synthetic 2:3:5gbit:100gbit --json");
    cr_assert_eq(R.code, 0, "%s", R.err);
    json_error_t je;
    json_t *o = json_loads(R.out, 0, &je);
    cr_assert_not_null(o, "not JSON: %s", je.text);
    cr_assert_eq(json_array_size(json_object_get(o, "nodes")), 9);
    json_t *edges = json_object_get(o, "edges");
    cr_assert(json_array_size(edges) > 0);
    json_t *e0 = json_array_get(edges, 0);
    cr_assert_not_null(json_object_get(e0, "transport"));
    cr_assert_not_null(json_object_get(e0, "load_bytes"));
    cr_assert(json_is_string(json_object_get(o, "bottleneck")));
    json_decref(o);
}

Test(plan_cli, dot_plan)
{
    run("--synthetic 1:2 --dot");
    cr_assert_eq(R.code, 0, "%s", R.err);
    cr_assert(strncmp(R.out, "digraph", 7) == 0, "%s", R.out);
    cr_assert(strstr(R.out, "\"train-s0\" -> \"r0-n0\"") != NULL, "%s", R.out);
    if (system("command -v dot >/dev/null 2>&1") == 0) {
        char tmp[] = "/tmp/dc_plan_dotXXXXXX";
        int fd = mkstemp(tmp);
        cr_assert(fd >= 0);
        cr_assert_eq(write(fd, R.out, strlen(R.out)), (ssize_t)strlen(R.out));
        close(fd);
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "dot -Tsvg '%s' >/dev/null 2>&1", tmp);
        cr_assert_eq(system(cmd), 0, "graphviz rejected the DOT output");
        unlink(tmp);
    }
}

Test(plan_cli, simulate_json)
{
    run("--topology %s/topology/examples/nemo-dcr.yaml --simulate --params 1.121e12 --change-rate 0.03 --json", src());
    cr_assert_eq(R.code, 0, "%s", R.err);
    json_error_t je;
    json_t *o = json_loads(R.out, 0, &je);
    cr_assert_not_null(o, "not JSON: %s", je.text);
    double t = json_number_value(json_object_get(o, "predicted_seconds"));
    cr_assert(t > 10.0 && t < 11.0, "predicted %f", t);
    cr_assert(json_is_string(json_object_get(o, "bottleneck")));
    cr_assert_eq(json_integer_value(json_object_get(o, "payload_bytes")), 52687000000LL);
    cr_assert_eq(json_integer_value(json_object_get(o, "nodes")), 16);
    json_decref(o);
    run("--synthetic 1:8 --simulate --params 1.121e12 --change-rate 0.03 --encode-gbps 2 --apply-gbps 100");
    cr_assert_eq(R.code, 0, "%s", R.err);
    cr_assert(strstr(R.out, "bottleneck: encode") != NULL, "%s", R.out);
}

Test(plan_cli, dead_node_replans)
{
    run("--synthetic 1:4 --dead r0-n1");
    cr_assert_eq(R.code, 0, "%s", R.err);
    cr_assert(strstr(R.err, "re-planned without r0-n1") != NULL, "%s", R.err);
    cr_assert(strstr(R.out, "-> r0-n1 ") == NULL, "%s", R.out);
    run("--synthetic 1:4 --dead train-s0");
    cr_assert_eq(R.code, 1);
    cr_assert(strstr(R.err, "sender") != NULL, "%s", R.err);
    run("--synthetic 1:4 --dead nobody");
    cr_assert_eq(R.code, 1);
}

Test(plan_cli, errors)
{
    run("%s", "");
    cr_assert_eq(R.code, 2);
    run("--synthetic 1:2 --topology x.yaml");
    cr_assert_eq(R.code, 2);
    run("--synthetic 1:x");
    cr_assert_eq(R.code, 2);
    cr_assert(strstr(R.err, "synthetic") != NULL, "%s", R.err);
    run("--synthetic 1:2 --simulate");
    cr_assert_eq(R.code, 2);
    run("--synthetic 1:2 --simulate --params 1e9 --change-rate 2");
    cr_assert_eq(R.code, 2);
    run("--synthetic 1:2 --json --dot");
    cr_assert_eq(R.code, 2);
    run("--topology /nonexistent.yaml");
    cr_assert_eq(R.code, 1);
    cr_assert(strstr(R.err, "/nonexistent.yaml") != NULL, "%s", R.err);
    char tmp[] = "/tmp/dc_plan_badXXXXXX";
    int fd = mkstemp(tmp);
    const char *y = "regions:\n  - name: a\n    nodes:\n      - {host: s, role: boss}\n";
    cr_assert_eq(write(fd, y, strlen(y)), (ssize_t)strlen(y));
    close(fd);
    run("--topology %s", tmp);
    unlink(tmp);
    cr_assert_eq(R.code, 1);
    cr_assert(strstr(R.err, ":4: node 's': role 'boss'") != NULL, "%s", R.err);
    cr_assert(strchr(R.err, '\n') == R.err + strlen(R.err) - 1, "one line: %s", R.err);
}

Test(plan_cli, slurm_nodelist)
{
    run("--nodelist 'trn-[1-2],roll-a[01-03],roll-b[01-02]' --region-map 'trn-*=train,roll-a*=a,roll-b*=b' "
        "--senders 2");
    cr_assert_eq(R.code, 0, "%s", R.err);
    cr_assert(strstr(R.out, "7 nodes") && strstr(R.out, "3 regions"), "%s", R.out);
    cr_assert(strstr(R.out, "trn-1 -> roll-a") != NULL, "%s", R.out);
    run("--nodelist 'n[1-3' --senders 1");
    cr_assert_eq(R.code, 1);
    cr_assert(strstr(R.err, "never closed") != NULL, "%s", R.err);
    run("--synthetic 1:2 --region-map 'a=b'");
    cr_assert_eq(R.code, 2);
    setenv("SLURM_JOB_NODELIST", "t1,r[1-4]", 1);
    run("--slurm --json");
    unsetenv("SLURM_JOB_NODELIST");
    cr_assert_eq(R.code, 0, "%s", R.err);
    cr_assert(strstr(R.out, "\"r4\"") != NULL, "%s", R.out);
}
