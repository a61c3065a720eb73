/* test_perf_link_modes.c - `deltacast perf link`'s iperf3 / ib_write_bw
 * modes as a user runs them, real server and client processes on loopback:
 * per-interval reports (-i) whose bytes sum to the total, reverse (-R: the
 * client receives, byte-checked), both directions at once (--bidir), and
 * the message-size sweep (-a).  Over tcp always; over ucx and rdma where
 * they run (skipped with the reason otherwise). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <unistd.h>

#include "proc.h"
#include "verbs/transport.h"

static pid_t S_pid = -1;
static char S_dir[64], S_addr[256], S_log[256];

static void fini(void)
{
    if (S_pid > 0)
        kill(S_pid, SIGKILL);
    S_pid = -1;
}

TestSuite(perf_link_modes, .fini = fini, .timeout = 180);

static const char *const ENV[] = {"DELTACAST_SECRET=perf-link-modes-test", NULL};

/* Skip unless `transport` can run here. */
static void need(const char *transport)
{
    const dc_verbs_ops_t *t;
    if (dc_verbs_find(transport, &t) != DC_OK)
        cr_skip_test("no %s transport here: %s", transport, dc_last_error());
}

/* rdma_cm cannot route 127.0.0.1: rdma binds the address of an interface
 * with an RDMA device (CI's soft-RoCE VM sets it; see xfer.h). */
static const char *bind_addr(const char *transport, char *buf, size_t len)
{
    if (strcmp(transport, "rdma") != 0)
        return "127.0.0.1:0";
    const char *a = getenv("DELTACAST_TEST_RDMA_ADDR");
    snprintf(buf, len, "%s:0", a);
    return buf;
}

static void server_start(const char *transport, const char *tag)
{
    char bind[128];
    snprintf(S_dir, sizeof(S_dir), "/tmp/dc-%s-XXXXXX", tag);
    cr_assert(mkdtemp(S_dir));
    char addr_file[256];
    snprintf(addr_file, sizeof(addr_file), "%s/addr", S_dir);
    snprintf(S_log, sizeof(S_log), "%s/server.log", S_dir);
    char *argv[] = {(char *)proc_bin(), "perf", "link", "--server", "--transport",
                    (char *)transport, "--bind", (char *)bind_addr(transport, bind, sizeof(bind)),
                    "--addr-file", addr_file, NULL};
    S_pid = proc_spawn(argv, ENV, S_log);
    const char *a = proc_read_line(addr_file, 30);
    cr_assert(a, "server did not start (see %s)", S_log);
    snprintf(S_addr, sizeof(S_addr), "%s", a);
}

/* Run a client with `args` (NULL-terminated) after the common ones; returns
 * its JSON (exit status 0 required). */
static json_t *client(const char *transport, const char *tag, const char *const *args)
{
    char log[256];
    snprintf(log, sizeof(log), "%s/%s", S_dir, tag);
    char *argv[40] = {(char *)proc_bin(), "perf", "link", "--client", S_addr, "--transport",
                      (char *)transport, "--json"};
    size_t n = 8;
    for (size_t i = 0; args[i] && n < 39; i++)
        argv[n++] = (char *)args[i];
    argv[n] = NULL;
    int rc = proc_wait(proc_spawn(argv, ENV, log), 120);
    cr_assert_eq(rc, 0, "perf link %s exit %d (see %s)", tag, rc, log);
    return proc_json(log);
}

static double num(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    cr_assert(json_is_number(v), "no number '%s'", key);
    return json_number_value(v);
}

/* The intervals of one direction: contiguous from 0, each at most `step`
 * long, the last ending with the phase, their bytes summing to `bytes`,
 * and as many as the phase has steps. */
static void check_intervals(const json_t *iv, double step, uint64_t bytes, double seconds,
                            const char *what)
{
    cr_assert(json_is_array(iv), "%s: no intervals", what);
    size_t n = json_array_size(iv);
    cr_assert_geq(n, 2, "%s: %zu interval(s) in %.3f s at %.2f s", what, n, seconds, step);
    double prev_end = 0;
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *r = json_array_get(iv, i);
        double s = num(r, "start"), e = num(r, "end");
        cr_assert(fabs(s - prev_end) < 1e-9, "%s: interval %zu starts at %.6f, not %.6f", what,
                  i, s, prev_end);
        cr_assert(e - s <= step + 1e-9 && e >= s, "%s: interval %zu is %.6f .. %.6f", what, i, s,
                  e);
        if (i + 1 < n)
            cr_assert(fabs(e - s - step) < 1e-9, "%s: interval %zu is short", what, i);
        sum += (uint64_t)num(r, "bytes");
        prev_end = e;
    }
    cr_assert_eq(sum, bytes, "%s: intervals sum to %llu bytes, the total is %llu", what,
                 (unsigned long long)sum, (unsigned long long)bytes);
    cr_assert(fabs(prev_end - seconds) < 1e-6, "%s: intervals end at %.6f, the phase at %.6f",
              what, prev_end, seconds);
    cr_assert_eq(n, (size_t)ceil(seconds / step - 1e-9), "%s: %zu intervals in %.3f s", what, n,
                 seconds);
}

/* the run's own figures (forward or reverse) */
static void check_run_intervals(const json_t *j, const char *what)
{
    check_intervals(json_object_get(j, "intervals"), num(j, "interval"),
                    (uint64_t)num(j, "bytes"), num(j, "seconds"), what);
}

static void forward_intervals(const char *transport)
{
    server_start(transport, "plm-fwd");
    const char *args[] = {"--size", "64KiB", "--duration", "1.1", "-i", "0.25",
                          "--lat-iters", "5", NULL};
    json_t *j = client(transport, "fwd.log", args);
    cr_assert_str_eq(json_string_value(json_object_get(j, "direction")), "forward");
    cr_assert_gt(num(j, "bytes"), 0);
    check_run_intervals(j, "forward");
    /* the server counted what the client's intervals add up to */
    cr_assert_eq((uint64_t)num(j, "server_bytes"), (uint64_t)num(j, "bytes"));
    json_decref(j);
}

/* -R: the server sends, the client receives, checks every byte (--verify)
 * and counts; the client sends no data, and the server says it sent. */
static void reverse(const char *transport)
{
    server_start(transport, "plm-rev");
    const char *args[] = {"-R", "--size", "64KiB", "--duration", "1.1", "-i", "0.25", "--verify",
                          "--lat-iters", "5", NULL};
    json_t *j = client(transport, "rev.log", args);
    cr_assert_str_eq(json_string_value(json_object_get(j, "direction")), "reverse");
    uint64_t got = (uint64_t)num(j, "received_bytes");
    cr_assert_gt(got, 0, "the client received nothing");
    cr_assert_eq(got, (uint64_t)num(j, "bytes"));
    cr_assert_eq(got, (uint64_t)num(j, "server_sent_bytes"), "client got %llu, server sent %llu",
                 (unsigned long long)got, (unsigned long long)num(j, "server_sent_bytes"));
    cr_assert_eq((uint64_t)num(j, "sent_bytes"), 0);
    cr_assert_eq((uint64_t)num(j, "server_bytes"), 0, "the server received data in -R");
    cr_assert(json_is_true(json_object_get(j, "verified")));
    check_run_intervals(j, "reverse");
    char line[128];
    snprintf(line, sizeof(line), "reverse: sent %llu bytes", (unsigned long long)got);
    /* the server prints its line once the client has gone */
    bool seen = false;
    for (int i = 0; i < 100 && !(seen = proc_file_contains(S_log, line)); i++)
        usleep(100000);
    cr_assert(seen, "the server's log has no '%s' (see %s)", line, S_log);
    json_decref(j);
}

/* --bidir: both directions carry data at the same time, each reported. */
static void bidir(const char *transport)
{
    server_start(transport, "plm-bidir");
    const char *args[] = {"--bidir", "--size", "64KiB", "--duration", "1.1", "-i", "0.25",
                          "--verify", "--lat-iters", "5", NULL};
    json_t *j = client(transport, "bidir.log", args);
    cr_assert_str_eq(json_string_value(json_object_get(j, "direction")), "bidir");
    const json_t *up = json_object_get(j, "client_to_server");
    const json_t *down = json_object_get(j, "server_to_client");
    cr_assert(up && down, "no per-direction reports");
    uint64_t ub = (uint64_t)num(up, "bytes"), db = (uint64_t)num(down, "bytes");
    cr_assert_gt(ub, 0, "nothing went client -> server");
    cr_assert_gt(db, 0, "nothing went server -> client");
    cr_assert_eq(ub, (uint64_t)num(j, "server_bytes"));
    cr_assert_eq(db, (uint64_t)num(j, "server_sent_bytes"));
    cr_assert_eq(ub + db, (uint64_t)num(j, "bytes"));
    cr_assert(json_is_true(json_object_get(up, "verified")) &&
              json_is_true(json_object_get(down, "verified")));
    cr_assert_gt(num(up, "gbps"), 0);
    cr_assert_gt(num(down, "gbps"), 0);
    check_intervals(json_object_get(up, "intervals"), 0.25, ub, num(up, "seconds"), "TX");
    check_intervals(json_object_get(down, "intervals"), 0.25, db, num(down, "seconds"), "RX");
    /* at the same time: in some interval both directions moved data (not
     * necessarily the first: soft-RoCE under TCG emulation in CI's VM can
     * complete nothing one way in the first 0.25 s) */
    json_t *ui = json_object_get(up, "intervals"), *di = json_object_get(down, "intervals");
    size_t both = 0;
    for (size_t k = 0; k < json_array_size(ui) && k < json_array_size(di); k++)
        both += num(json_array_get(ui, k), "bytes") > 0 && num(json_array_get(di, k), "bytes") > 0;
    cr_assert_gt(both, 0, "no interval in which both directions moved data");
    json_decref(j);
}

/* -a: sizes 2^k from 64 B up to --size, then --size itself (no power of
 * two here), each run moving data. */
static void sweep(const char *transport, bool rev)
{
    server_start(transport, "plm-sweep");
    const char *args[] = {"-a", "--size", "3000", "--duration", "0.1", "--lat-iters", "3",
                          rev ? "-R" : NULL, NULL};
    json_t *j = client(transport, "sweep.log", args);
    const json_t *a = json_object_get(j, "sweep");
    static const uint64_t want[] = {64, 128, 256, 512, 1024, 2048, 3000};
    cr_assert_eq(json_array_size(a), 7, "%zu sizes", json_array_size(a));
    for (size_t i = 0; i < 7; i++) {
        const json_t *r = json_array_get(a, i);
        cr_assert_eq((uint64_t)num(r, "size"), want[i]);
        cr_assert_gt(num(r, "bytes"), 0, "size %llu moved nothing", (unsigned long long)want[i]);
        cr_assert_gt(num(r, "msg_rate"), 0);
        cr_assert_str_eq(json_string_value(json_object_get(r, "direction")),
                         rev ? "reverse" : "forward");
        if (rev)
            cr_assert_eq((uint64_t)num(r, "received_bytes"), (uint64_t)num(r, "bytes"));
    }
    cr_assert_str_eq(json_string_value(json_object_get(j, "transport")), transport);
    json_decref(j);
}

Test(perf_link_modes, tcp_forward_intervals_sum_to_the_total) { forward_intervals("tcp"); }
Test(perf_link_modes, tcp_reverse_the_client_receives) { reverse("tcp"); }
Test(perf_link_modes, tcp_bidir_both_directions_move_data) { bidir("tcp"); }
Test(perf_link_modes, tcp_sweep_lists_the_sizes) { sweep("tcp", false); }
Test(perf_link_modes, tcp_sweep_reverse) { sweep("tcp", true); }

/* --bytes in the server-sending modes: exactly that many bytes each way,
 * the last message shorter (1000000 is no multiple of 4 KiB), verified. */
Test(perf_link_modes, tcp_reverse_and_bidir_by_bytes_are_exact)
{
    server_start("tcp", "plm-bytes");
    const char *rev[] = {"-R", "--bytes", "1000000", "--size", "4KiB", "--verify",
                         "--lat-iters", "3", NULL};
    json_t *j = client("tcp", "rev-bytes.log", rev);
    cr_assert_eq((uint64_t)num(j, "received_bytes"), 1000000);
    cr_assert_eq((uint64_t)num(j, "sent_bytes"), 0);
    cr_assert(json_is_true(json_object_get(j, "verified")));
    json_decref(j);
    const char *bi[] = {"--bidir", "--bytes", "1000000", "--size", "4KiB", "--verify",
                        "--lat-iters", "3", NULL};
    j = client("tcp", "bidir-bytes.log", bi);
    cr_assert_eq((uint64_t)num(j, "received_bytes"), 1000000);
    cr_assert_eq((uint64_t)num(j, "sent_bytes"), 1000000);
    cr_assert_eq((uint64_t)num(j, "server_bytes"), 1000000);
    cr_assert(json_is_true(json_object_get(j, "verified")));
    json_decref(j);
}

Test(perf_link_modes, ucx_reverse_the_client_receives)
{
    need("ucx");
    reverse("ucx");
}

Test(perf_link_modes, ucx_bidir_both_directions_move_data)
{
    need("ucx");
    bidir("ucx");
}

Test(perf_link_modes, ucx_forward_intervals_and_sweep)
{
    need("ucx");
    forward_intervals("ucx");
    fini();
    sweep("ucx", false);
}

Test(perf_link_modes, rdma_reverse_bidir_sweep)
{
    need("rdma");
    if (!getenv("DELTACAST_TEST_RDMA_ADDR"))
        cr_skip_test("rdma runs here but DELTACAST_TEST_RDMA_ADDR names no RDMA interface "
                     "(rdma_cm cannot route 127.0.0.1)");
    reverse("rdma");
    fini();
    bidir("rdma");
    fini();
    sweep("rdma", true);
}

/* Poll the server's log for `needle` (it logs a dropped client at once). */
static bool server_logged(const char *needle)
{
    for (int i = 0; i < 100; i++) {
        if (proc_file_contains(S_log, needle))
            return true;
        usleep(100000);
    }
    return false;
}

/* A version-2 SETUP from an authenticated peer is still hostile bytes: an
 * unknown flag, -R and --bidir at once, depth or size 0, no duration and no
 * byte count: the server drops that client, says why, and serves the next. */
Test(perf_link_modes, hostile_setup2_is_refused_and_the_server_goes_on)
{
    server_start("tcp", "plm-hostile");
    cr_assert_eq(setenv("DELTACAST_SECRET", "perf-link-modes-test", 1), 0);
    const dc_verbs_ops_t *t;
    cr_assert_eq(dc_verbs_find("tcp", &t), DC_OK, "%s", dc_last_error());
    static const struct {
        uint32_t flags, depth;
        uint64_t size, dur_ns, bytes;
        const char *said;
    } cases[] = {
        {0x80 | 2, 4, 4096, 1000000000, 0, "unknown SETUP flags 0x82"},
        {2 | 4, 4, 4096, 1000000000, 0, "unknown SETUP flags 0x6"},
        {2, 0, 4096, 1000000000, 0, "asks for size 4096 depth 0"},
        {4, 4, 0, 1000000000, 0, "asks for size 0 depth 4"},
        {2, 65, 4096, 1000000000, 0, "asks for size 4096 depth 65"},
        {2, 4, 4096, 0, 0, "asks for a duration of 0 ns"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        dc_verbs_opts_t o;
        dc_verbs_opts_init(&o);
        dc_verbs_conn_t *c = NULL;
        cr_assert_eq(t->connect(&o, S_addr, &c), DC_OK, "%s", dc_last_error());
        dc_status_t st;
        while ((st = t->connect_test(c)) == DC_ERR_AGAIN)
            (void)t->wait(c, 10);
        cr_assert_eq(st, DC_OK, "connect: %s", dc_last_error());
        uint8_t setup[48] = {0};
        dc_store_le32(setup, 0x4c504344u); /* "DCPL" */
        dc_store_le32(setup + 4, 2);
        dc_store_le64(setup + 8, cases[i].size);
        dc_store_le32(setup + 16, cases[i].flags);
        dc_store_le32(setup + 20, cases[i].depth);
        dc_store_le64(setup + 24, cases[i].dur_ns);
        dc_store_le64(setup + 32, cases[i].bytes);
        cr_assert_eq(dc_verbs_send_blocking(c, setup, sizeof(setup), 10000), DC_OK, "%s",
                     dc_last_error());
        cr_assert(server_logged(cases[i].said), "case %zu: the server did not say '%s' (see %s)",
                  i, cases[i].said, S_log);
        t->close(c);
    }
    const char *args[] = {"-R", "--bytes", "1MiB", "--size", "64KiB", "--verify", "--lat-iters",
                          "3", NULL};
    json_t *j = client("tcp", "after.log", args);
    cr_assert_eq((uint64_t)num(j, "received_bytes"), 1u << 20);
    json_decref(j);
}

/* Modes that cannot combine are usage errors (exit 2), said as such. */
Test(perf_link_modes, conflicting_modes_are_usage_errors)
{
    static const char *const cases[][3] = {
        {"-R", "--bidir", NULL}, {"-R", "--tls", NULL}, {"--bidir", "-a", NULL},
        {"-R", "--warmup=3", NULL}, {"-i", "0.01", NULL}};
    char dir[] = "/tmp/dc-plm-usage-XXXXXX";
    cr_assert(mkdtemp(dir));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char log[256];
        snprintf(log, sizeof(log), "%s/u%zu.log", dir, i);
        char *argv[] = {(char *)proc_bin(), "perf", "link", "--client", "127.0.0.1:9",
                        (char *)cases[i][0], (char *)cases[i][1], NULL};
        int rc = proc_wait(proc_spawn(argv, ENV, log), 20);
        cr_assert_eq(rc, 2, "%s %s: exit %d (see %s)", cases[i][0], cases[i][1], rc, log);
    }
}
