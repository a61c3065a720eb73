/*
 * test_netns.c - a slow link for real: two network namespaces joined by a
 * veth pair shaped with `tc qdisc tbf rate 1gbit`; `deltacast perf link`
 * (4 TCP streams, --verify) runs across it and must arrive byte-exact at
 * no more than the shaped rate.  Skips (with the reason) when not root or
 * when `ip netns` is not usable.  Addresses 10.77.N.{1,2} exist only inside
 * the namespaces this test creates and deletes.
 */
#include "proc.h"
#include "verbs/transport.h"

#include <jansson.h>

static char ns_a[64], ns_b[64];
static int ns_made;

#include <stdarg.h>

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    char full[1100];
    snprintf(full, sizeof(full), "%s >/dev/null 2>&1", cmd);
    return system(full);
}

static void ns_cleanup(void)
{
    if (ns_made) {
        sh("ip netns del %s", ns_a);
        sh("ip netns del %s", ns_b);
        ns_made = 0;
    }
}

/* Returns NULL on success or the reason to skip. */
static const char *ns_setup(int net)
{
    if (geteuid() != 0)
        return "needs root to create network namespaces";
    snprintf(ns_a, sizeof(ns_a), "dct-%d-a", (int)getpid());
    snprintf(ns_b, sizeof(ns_b), "dct-%d-b", (int)getpid());
    if (sh("ip netns add %s", ns_a) != 0)
        return "`ip netns add` failed (no network namespace support here)";
    if (sh("ip netns add %s", ns_b) != 0) {
        sh("ip netns del %s", ns_a);
        return "`ip netns add` failed";
    }
    ns_made = 1;
    if (sh("ip link add dcva netns %s type veth peer name dcvb netns %s", ns_a, ns_b) ||
        sh("ip -n %s addr add 10.77.%d.1/24 dev dcva", ns_a, net) ||
        sh("ip -n %s addr add 10.77.%d.2/24 dev dcvb", ns_b, net) ||
        sh("ip -n %s link set dcva up", ns_a) || sh("ip -n %s link set dcvb up", ns_b) ||
        sh("ip -n %s link set lo up", ns_a) || sh("ip -n %s link set lo up", ns_b) ||
        sh("tc -n %s qdisc add dev dcva root tbf rate 1gbit burst 256kb latency 20ms", ns_a) ||
        sh("tc -n %s qdisc add dev dcvb root tbf rate 1gbit burst 256kb latency 20ms", ns_b)) {
        ns_cleanup();
        return "veth/tc setup failed (missing veth or sch_tbf?)";
    }
    return NULL;
}

/* `deltacast perf link --verify --json` from ns_a to a server in ns_b at
 * 10.77.<net>.2 over `transport`, both with environment `env`, the client
 * with the extra options `copts` (NULL-terminated): asserts that both exit
 * 0 and that the data arrived byte-exact; returns the client's report. */
static json_t *link_across(int net, const char *transport, const char *const env[],
                           const char *const copts[])
{
    char dir[] = "/tmp/dc-netns-XXXXXX";
    cr_assert(mkdtemp(dir));
    char addr_file[256], slog[256], cout[256], bind[64];
    snprintf(addr_file, sizeof(addr_file), "%s/addr", dir);
    snprintf(slog, sizeof(slog), "%s/server.log", dir);
    snprintf(cout, sizeof(cout), "%s/client.json", dir);
    snprintf(bind, sizeof(bind), "10.77.%d.2:0", net);
    char *sargv[] = {"ip", "netns", "exec", ns_b, (char *)proc_bin(), "perf", "link", "--server",
                     "--transport", (char *)transport, "--bind", bind, "--addr-file", addr_file,
                     "--once", NULL};
    pid_t srv = proc_spawn(sargv, env, slog);
    const char *a = proc_read_line(addr_file, 20);
    cr_assert(a, "server did not start (see %s)", slog);
    char addr[256];
    snprintf(addr, sizeof(addr), "%s", a);
    char *cargv[32] = {"ip", "netns", "exec", ns_a, (char *)proc_bin(), "perf", "link",
                       "--client", addr, "--transport", (char *)transport, "--verify", "--json"};
    size_t n = 13;
    for (size_t i = 0; copts[i] && n + 1 < DC_ARRAY_SIZE(cargv); i++)
        cargv[n++] = (char *)copts[i];
    cargv[n] = NULL;
    int rc = proc_wait(proc_spawn(cargv, env, cout), 120);
    int src = proc_wait(srv, 30);
    cr_assert_eq(rc, 0, "client failed (see %s)", cout);
    cr_assert_eq(src, 0, "server failed (see %s)", slog);
    json_t *j = proc_json(cout);
    cr_assert(json_is_true(json_object_get(j, "verified")), "data not byte-exact");
    return j;
}

Test(netns, shaped_1gbit_veth_exact, .fini = ns_cleanup)
{
    int net = 100 + (int)(getpid() % 150);
    const char *why = ns_setup(net);
    if (why)
        cr_skip_test("%s", why);
    const char *env[] = {"DELTACAST_SECRET=netns-secret", NULL};
    const char *copts[] = {"--streams", "4", "--size", "1MiB", "--bytes", "48MiB",
                           "--lat-iters", "20", NULL};
    json_t *j = link_across(net, "tcp", env, copts);
    cr_assert_eq(json_integer_value(json_object_get(j, "bytes")), 48 << 20);
    cr_assert_str_eq(json_string_value(json_object_get(j, "device")), "dcva");
    double gbps = json_real_value(json_object_get(j, "gbps"));
    cr_assert_leq(gbps, 1.05, "faster than the 1 Gbit/s shaping (%.3f): shaping not in effect",
                  gbps);
    cr_assert_gt(gbps, 0.2, "far below the shaped rate: %.3f Gb/s", gbps);
    json_decref(j);
}

/* A multi-homed server: besides the veth its client reaches, the server's
 * namespace has a second interface (one end of a veth pair that stays
 * inside it, with an address the client cannot reach).  UCX 1.13 counts every interface as reaching every
 * peer, and with both in play its endpoints failed to connect ("Endpoint
 * timeout"; the server blamed the job secret).  deltacast keeps each UCX
 * context to the interface of the address it listens on or routes to
 * (unless UCX_NET_DEVICES says otherwise): the transfer must be byte-exact
 * over the veth. */
Test(netns, ucx_multi_homed_server_exact, .fini = ns_cleanup)
{
    const dc_verbs_ops_t *t;
    if (dc_verbs_find("ucx", &t) != DC_OK || t->init() != DC_OK)
        cr_skip_test("no ucx transport here: %s", dc_last_error());
    int net = 100 + (int)(getpid() % 150);
    const char *why = ns_setup(net);
    if (why)
        cr_skip_test("%s", why);
    if (sh("ip -n %s link add dcx type veth peer name dcy", ns_b) ||
        sh("ip -n %s addr add 10.78.%d.1/24 dev dcx", ns_b, net) ||
        sh("ip -n %s link set dcx up", ns_b) || sh("ip -n %s link set dcy up", ns_b))
        cr_skip_test("cannot add a second interface to the server's namespace");
    /* UCX lists only interfaces that are up when it starts: wait for the
     * veth carriers */
    int up = 0;
    for (int i = 0; i < 100 && !up; i++) {
        up = sh("ip -n %s link show dcvb | grep -q 'state UP'", ns_b) == 0 &&
             sh("ip -n %s link show dcva | grep -q 'state UP'", ns_a) == 0 &&
             sh("ip -n %s link show dcx | grep -q 'state UP'", ns_b) == 0;
        if (!up)
            usleep(50000);
    }
    cr_assert(up, "the veth links did not come up within 5 s");
    /* The failure needed the extra interface listed BEFORE dcvb in UCX's
     * devices, whose order follows sysfs (which hashes the names): rename
     * it until it comes first, so that the case is the failing one. */
    char extra[16] = "dcx";
    int first = 0;
    for (int i = 1; i <= 40 && !first; i++) {
        first = sh("ip netns exec %s env UCX_TLS=tcp ucx_info -d | "
                   "grep -E 'Device: (dcvb|%s)$' | head -n 1 | grep -q %s",
                   ns_b, extra, extra) == 0;
        if (!first) {
            char next[16];
            snprintf(next, sizeof(next), "dcx%d", i);
            if (sh("ip -n %s link set %s down", ns_b, extra) ||
                sh("ip -n %s link set %s name %s", ns_b, extra, next) ||
                sh("ip -n %s link set %s up", ns_b, next))
                break;
            snprintf(extra, sizeof(extra), "%s", next);
            for (int w = 0; w < 100 && sh("ip -n %s link show %s | grep -q 'state UP'", ns_b,
                                          extra) != 0;
                 w++)
                usleep(50000);
        }
    }
    if (!first)
        cr_log_warn("UCX does not list %s before dcvb (ucx_info missing?): this run does not "
                    "exercise the multi-homed case",
                    extra);
    const char *env[] = {"DELTACAST_SECRET=netns-secret", "UCX_TLS=tcp", NULL};
    const char *copts[] = {"--size", "1MiB", "--bytes", "32MiB", "--lat-iters", "20",
                           "--timeout-ms", "15000", NULL};
    json_t *j = link_across(net, "ucx", env, copts);
    cr_assert_eq(json_integer_value(json_object_get(j, "bytes")), 32 << 20);
    cr_assert_str_eq(json_string_value(json_object_get(j, "transport")), "ucx");
    cr_assert_str_eq(json_string_value(json_object_get(j, "device")), "tcp/dcva");
    json_decref(j);
}
