/*
 * test_ucx.c - what only the `ucx` transport has, between two real
 * processes (fork) over UCX's own transports on this machine (tcp / posix /
 * cma on loopback): messages cut into pieces (DELTACAST_UCX_PIECE) and the
 * caller's CRC32C combined over them, a damaged piece, GPU memory, the
 * bound on eager data held ahead of the receives, wait()'s polling
 * (ucx_spin_us), fd() arming, and the report of RDMA left unused.
 *
 * What every transport promises (transfers, corruption, cuts, the caller's
 * CRC32C, handshake and authentication, closes, bad arguments) is checked
 * by conformance.c, over ucx among the others.
 */
#define XFER_TRANSPORT "ucx"
#include "xfer.h"

#include <sched.h>
#include <sys/resource.h>

Test(ucx, init_and_caps)
{
    require_transport();
    const dc_verbs_ops_t *t;
    cr_assert_eq(dc_verbs_find(g_tname, &t), DC_OK);
    cr_assert_str_eq(t->name, "ucx");
    /* (the table's size, host memory and max_inflight: conformance.c) */
    dc_verbs_caps_t caps = {.size = sizeof(caps)};
    cr_assert_eq(t->caps(&caps), DC_OK);
    cr_assert(strstr(caps.device, "ucx") != NULL);
    /* Without GPU support here (this UCX without CUDA, a build without the
     * CUDA kernels, no GPU), CUDA memory is refused with the reason, never
     * silently staged; with it, gpu_memory_* below move GPU memory. */
    if (caps.mem_kinds & DC_VERBS_MEM_CUDA) {
        cr_log_info("ucx moves GPU memory here (covered by ucx::gpu_memory_*)");
        return;
    }
    static uint8_t b[64];
    cr_assert_eq(t->reg_mem(NULL, b, sizeof(b), DC_VERBS_MEM_CUDA, &(dc_verbs_mr_t *){0}),
                 DC_ERR_UNSUPPORTED);
    const char *e = dc_last_error();
    cr_assert(strstr(e, "without CUDA support") != NULL || strstr(e, "CUDA kernels") != NULL ||
                  strstr(e, "no CUDA device") != NULL,
              "no reason given: %s", e);
    cr_log_info("ucx refuses GPU memory here: %s", e);
}


/* Messages of several 64 KiB pieces (the sender's DELTACAST_UCX_PIECE),
 * none a multiple of the piece size but one: every byte arrives exactly.
 * The receiver posts its first receives late, so that the pieces of the
 * first messages are held and delivered afterwards. */
static const size_t g_piece_sizes[] = {3 * 65536 + 17, (1u << 20) + 1, MSG_MAX - 5, 200000,
                                       65536,          65537,          0,           MSG_MAX};

static int use_small_pieces(void)
{
    g_sizes = g_piece_sizes;
    g_nsizes = sizeof(g_piece_sizes) / sizeof(g_piece_sizes[0]);
    return setenv("DELTACAST_UCX_PIECE", "64KiB", 1);
}

Test(ucx, pieces_not_a_multiple_round_trip_exactly)
{
    require_transport();
    cr_assert_eq(use_small_pieces(), 0);
    g_late_ms = 300;
    run_transfer(24ull << 20, 0);
}

/* The caller's CRC32C of each message (isend_crc): the sender does not
 * compute one, the receiver checks every 64 KiB piece and combines them;
 * every byte arrives exactly, no NACK.  Late receives: held pieces too. */
Test(ucx, caller_crc_round_trips_exactly)
{
    require_transport();
    cr_assert_eq(use_small_pieces(), 0);
    g_late_ms = 300;
    g_caller_crc = 1;
    run_transfer(24ull << 20, 0);
}

/* A wrong caller CRC32C on every fifth message: each such message is
 * NACKed exactly once, then re-sent with the transport's own CRC32Cs and
 * delivered exactly. */
Test(ucx, wrong_caller_crc_nacked_once_then_exact)
{
    require_transport();
    cr_assert_eq(use_small_pieces(), 0);
    g_caller_crc = 2;
    run_transfer(24ull << 20, 0);
}

/* With the caller's CRC32C, a damaged piece is still caught: one flipped
 * byte NACKs its message once; random damage is NACKed and repaired. */
Test(ucx, caller_crc_damaged_piece_still_caught)
{
    require_transport();
    cr_assert_eq(use_small_pieces(), 0);
    g_caller_crc = 1;
    run_transfer_full(12ull << 20, 0, 65536 + 4321, 0, 0);
}

/* One flipped byte in the second 64 KiB piece of the first message: that
 * message (and only it) is NACKed once, re-sent whole, and arrives exact. */
Test(ucx, damaged_piece_nacks_its_message_once)
{
    require_transport();
    cr_assert_eq(use_small_pieces(), 0);
    run_transfer_full(12ull << 20, 0, 65536 + 4321, 0, 0);
}

/* Damage at random in many small pieces (P per piece), with the connection
 * cut twice on the way: all repaired, nothing lost or duplicated. */
Test(ucx, damaged_pieces_and_cuts_repaired_exactly)
{
    require_transport();
    cr_assert_eq(use_small_pieces(), 0);
    run_transfer_full(32ull << 20, 0.02, -1, 9000000, 2);
}

/* GPU memory both ways (every piece's CRC32C computed and checked by the
 * GPU), with damaged pieces NACKed and re-sent, and with cuts resumed. */
Test(ucx, gpu_memory_transfer_with_corruption)
{
    require_transport();
    require_gpu_memory();
    g_gpu = 1;
    run_transfer(32ull << 20, 0.2);
}

/* GPU memory with the caller's CRC32C (of the host copy of the same
 * bytes): the receiver's GPU CRC32Cs of the pieces are combined and
 * checked; wrong caller CRC32Cs are NACKed once each; damage is caught. */
Test(ucx, gpu_memory_caller_crc_wrong_and_corrupted)
{
    require_transport();
    require_gpu_memory();
    g_gpu = 1;
    g_caller_crc = 2;
    run_transfer(32ull << 20, 0.2);
}

Test(ucx, gpu_memory_pieces_with_cuts_and_corruption)
{
    require_transport();
    require_gpu_memory();
    cr_assert_eq(use_small_pieces(), 0);
    g_gpu = 1;
    run_transfer_full(32ull << 20, 0.02, -1, 9000000, 2);
}

/* A server that accepts and never posts a receive: the client's eager
 * messages pile up until the held-bytes bound fails the connection. */
static int hoarding_server(int port_fd, const void *unused)
{
    (void)unused;
    const dc_verbs_ops_t *t;
    dc_verbs_opts_t o;
    opts_with_secret(&o, "hoard", 20000);
    dc_verbs_listener_t *l;
    dc_verbs_conn_t *c = NULL;
    int rc = child_listen_accept(&o, port_fd, 30, "hoarding server", &t, &l, &c);
    if (rc)
        return rc;
    dc_status_t st = DC_OK;
    double until = dc_now_s() + 60;
    while (st == DC_OK && dc_now_s() < until)
        st = t->wait(c, 10);
    if (st != DC_ERR_BUSY) {
        fprintf(stderr, "hoarding server: %s: %s\n", dc_status_name(st), dc_last_error());
        return 16;
    }
    if (!strstr(dc_last_error(), "ahead of the receives")) {
        fprintf(stderr, "hoarding server: %s\n", dc_last_error());
        return 17;
    }
    /* Closing a connection we failed says BYE: the peer stops instead of
     * re-dialing.  The listener is left to the process exit: a re-dial
     * racing with its destruction crashed UCX 1.13.1's async thread
     * (ucp_cm_server_conn_request_cb) before the BYE was sent. */
    t->close(c);
    (void)l;
    return 0;
}

/* A peer that sends eagerly (UCX_RNDV_THRESH=inf) far ahead of the
 * receives posted for it: the receiver holds at most DC_UCX_HOLD_MAX (256
 * MiB here: two of the 64 MiB largest messages are less) of such data,
 * then fails the connection saying why, instead of holding up to 256 x
 * max_msg bytes; and closing it says BYE, so the sender stops at once
 * (DC_ERR_RESET) instead of re-dialing. */
Test(ucx, eager_flood_ahead_of_receives_is_bounded, .timeout = 180)
{
    setenv("UCX_RNDV_THRESH", "inf", 1); /* before UCX starts in this process */
    require_transport();
    ucx_logs_to_stderr();
    const dc_verbs_ops_t *t;
    dc_verbs_conn_t *c = NULL;
    pid_t pid = fork_and_connect(hoarding_server, NULL, 120, "hoard", &t, &c);
    size_t len = 4u << 20;
    uint8_t *msg = malloc(len);
    cr_assert(msg);
    memset(msg, 0x3c, len);
    /* 100 x 4 MiB, all in flight (the window is 256): 400 MiB > the bound */
    dc_verbs_req_t *reqs[100];
    int posted = 0;
    dc_status_t st = DC_OK;
    for (; posted < 100 && st == DC_OK; posted++)
        while ((st = t->isend(c, msg, len, NULL, &reqs[posted])) == DC_ERR_AGAIN)
            t->wait(c, 10);
    /* progress until the server gives up on us */
    int status = 0;
    double until = dc_now_s() + 90;
    pid_t w = 0;
    while ((w = waitpid(pid, &status, WNOHANG)) == 0 && dc_now_s() < until)
        t->wait(c, 10);
    if (w == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    cr_assert(w == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the receiver did not fail the flood at its bound (status 0x%x)", status);
    /* it said good-bye: we stop at once, we do not re-dial */
    double t0 = dc_now_s();
    while ((st = t->progress(c)) == DC_OK && dc_now_s() < t0 + 10)
        t->wait(c, 10);
    cr_assert_eq(st, DC_ERR_RESET, "%s: %s", dc_status_name(st), dc_last_error());
    cr_assert(strstr(dc_last_error(), "peer closed the connection"), "%s", dc_last_error());
    cr_assert_lt(dc_now_s() - t0, 5.0);
    t->close(c);
    free(msg);
}

/* The polling settings (config ucx_spin_us) of the echo tests' connections. */
/* (50 ms: a round trip stays within it even when other tests load the CPUs) */
static const char *const g_echo_spins[] = {"50000", "0", NULL};

#define ECHO_MAX (2u << 20)
static uint8_t g_echo_buf[ECHO_MAX];

/* For each setting of the NULL-terminated list `arg` (config ucx_spin_us):
 * accept a connection with it and echo every message (up to ECHO_MAX
 * bytes) back until a 1-byte message 0 arrives. */
static int echo_server(int port_fd, const void *arg)
{
    const char *const *spins = arg;
    const dc_verbs_ops_t *t = NULL;
    dc_verbs_opts_t o;
    opts_with_secret(&o, "echo", 20000);
    dc_verbs_listener_t *l = NULL;
    dc_verbs_conn_t *c = NULL;
    for (size_t k = 0; spins[k]; k++) {
        dc_config_set("ucx_spin_us", spins[k]);
        int rc = k == 0 ? child_listen_accept(&o, port_fd, 30, "echo server", &t, &l, &c)
                        : child_accept(t, l, 30, "echo server", &c);
        if (rc)
            return rc;
        for (;;) {
            size_t len = 0;
            if (dc_verbs_recv_blocking(c, g_echo_buf, ECHO_MAX, &len, 20000) != DC_OK ||
                len == 0)
                return 14;
            if (len == 1 && g_echo_buf[0] == 0)
                break;
            if (dc_verbs_send_blocking(c, g_echo_buf, len, 20000) != DC_OK)
                return 15;
        }
        t->close(c);
    }
    if (t)
        t->listen_close(l);
    return 0;
}

static long thread_vcsw(void)
{
    struct rusage ru;
    cr_assert_eq(getrusage(RUSAGE_THREAD, &ru), 0);
    return ru.ru_nvcsw;
}

static double thread_cpu_s(void)
{
    struct timespec ts;
    cr_assert_eq(clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts), 0);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Round trips of 1-byte messages to the echo server at addr with config
 * ucx_spin_us = spin: the client's voluntary context switches (sleeps) per
 * round trip; then, with the peer silent, the client's CPU seconds over 20
 * waits of 20 ms each (*idle_cpu). */
static double echo_sleeps(const char *addr, const char *spin, int rounds, double *idle_cpu)
{
    cr_assert_eq(dc_config_set("ucx_spin_us", spin), DC_OK);
    const dc_verbs_ops_t *t;
    cr_assert_eq(dc_verbs_find("ucx", &t), DC_OK);
    dc_verbs_conn_t *c = NULL;
    cr_assert_eq(client_connect(t, addr, "echo", &c), DC_OK, "%s", dc_last_error());
    long v0 = 0;
    for (int i = 0; i < rounds + 10; i++) {
        if (i == 10)
            v0 = thread_vcsw(); /* after a warm-up */
        uint8_t b = (uint8_t)(1 + i % 200), r = 0;
        size_t len = 0;
        cr_assert_eq(dc_verbs_send_blocking(c, &b, 1, 20000), DC_OK, "%s", dc_last_error());
        cr_assert_eq(dc_verbs_recv_blocking(c, &r, 1, &len, 20000), DC_OK, "%s",
                     dc_last_error());
        cr_assert(len == 1 && r == b, "echo %u of %u", r, b);
    }
    double per_rt = (double)(thread_vcsw() - v0) / rounds;
    double c0 = thread_cpu_s();
    for (int i = 0; i < 20; i++)
        cr_assert_eq(t->wait(c, 20), DC_OK, "%s", dc_last_error());
    *idle_cpu = thread_cpu_s() - c0;
    uint8_t zero = 0;
    cr_assert_eq(dc_verbs_send_blocking(c, &zero, 1, 20000), DC_OK, "%s", dc_last_error());
    t->close(c);
    return per_rt;
}

/* wait() polls before it sleeps (config ucx_spin_us): polling up to 50 ms,
 * a round trip on loopback needs (almost) no sleep, without polling it
 * sleeps about once; and once the link is idle, waits sleep at once instead
 * of polling 50 ms each. */
Test(ucx, wait_polls_before_sleeping_and_not_when_idle, .timeout = 120)
{
    require_transport();
    ucx_logs_to_stderr();
    cpu_set_t cpus;
    cr_assert_eq(sched_getaffinity(0, sizeof(cpus), &cpus), 0);
    if (CPU_COUNT(&cpus) < 2)
        cr_skip_test("one CPU: wait() never polls there (the peer needs the CPU)");
    char addr[128];
    pid_t pid = fork_server(echo_server, g_echo_spins, 120, addr, sizeof(addr));
    double idle_spin = 0, idle_none = 0;
    double spin = echo_sleeps(addr, g_echo_spins[0], 200, &idle_spin);
    double none = echo_sleeps(addr, g_echo_spins[1], 200, &idle_none);
    dc_config_set("ucx_spin_us", NULL);
    cr_assert_eq(wait_child(pid), 0, "echo server failed");
    cr_log_info("sleeps per round trip: %.2f polling 50 ms, %.2f not polling; CPU of 20 idle "
                "waits: %.1f ms / %.1f ms",
                spin, none, idle_spin * 1e3, idle_none * 1e3);
    cr_assert_geq(none, 0.5, "without polling a round trip sleeps (%.2f)", none);
    cr_assert_lt(spin, 0.5, "polling 50 ms still slept %.2f times per round trip", spin);
    /* 20 x 50 ms of polling would be 1 s: only the first idle wait polls */
    cr_assert_lt(idle_spin, 0.2, "20 idle waits used %.1f ms of CPU", idle_spin * 1e3);
}

/* fd() as the engine uses it (progress, fd(), poll): on an idle connection
 * the fd is not readable, so poll() sleeps; when a message arrives it wakes
 * the poll at once.  (Unarmed, UCX's event fd stayed readable for good and
 * such a loop never slept.) */
Test(ucx, fd_sleeps_when_idle_and_wakes_on_a_message, .timeout = 60)
{
    require_transport();
    ucx_logs_to_stderr();
    static const char *const spins[] = {"0", NULL};
    const dc_verbs_ops_t *t;
    dc_verbs_conn_t *c = NULL;
    pid_t pid = fork_and_connect(echo_server, spins, 60, "echo", &t, &c);
    dc_verbs_stats_t st = {.size = sizeof(st)};
    cr_assert_eq(t->stats(c, &st), DC_OK);
    cr_assert(st.device[0] && strstr(st.device, "tcp/"), "device %s", st.device);
    cr_assert_str_eq(st.path_note, "", "no RDMA on this machine, nothing left unused");
    int woke_idle = 0, timeouts = 0;
    static uint8_t out[ECHO_MAX], in[ECHO_MAX];
    for (int round = 0; round < 20; round++) {
        /* 1 byte (eager) and 2 MiB (rendezvous pieces) in turn */
        size_t n = round % 2 ? ECHO_MAX : 1;
        memset(out, round + 1, n);
        memset(in, 0, n);
        /* the engine's loop: post, then progress / fd() / poll until done */
        dc_verbs_req_t *rq, *sq;
        cr_assert_eq(t->irecv(c, in, n, NULL, &rq), DC_OK, "%s", dc_last_error());
        cr_assert_eq(t->isend(c, out, n, NULL, &sq), DC_OK, "%s", dc_last_error());
        int rdone = 0, sdone = 0;
        size_t len = 0;
        double t0 = dc_now_s();
        while (!rdone || !sdone) {
            if (!sdone)
                cr_assert_eq(t->test(sq, &sdone, NULL), DC_OK, "%s", dc_last_error());
            if (!rdone)
                cr_assert_eq(t->test(rq, &rdone, &len), DC_OK, "%s", dc_last_error());
            if (rdone && sdone)
                break;
            struct pollfd pfd = {.fd = t->fd(c), .events = POLLIN};
            cr_assert_geq(pfd.fd, 0);
            if (poll(&pfd, 1, 3000) == 0)
                timeouts++;
            cr_assert_lt(dc_now_s() - t0, 10.0, "round %d never completed", round);
        }
        cr_assert(len == n && memcmp(in, out, n) == 0, "round %d: echo differs", round);
        /* now idle: the fd must let a poll sleep */
        cr_assert_eq(t->progress(c), DC_OK, "%s", dc_last_error());
        struct pollfd pfd = {.fd = t->fd(c), .events = POLLIN};
        if (poll(&pfd, 1, 20) > 0) {
            woke_idle++;
            cr_assert_eq(t->progress(c), DC_OK, "%s", dc_last_error());
        }
    }
    cr_log_info("idle polls woken: %d of 20; message polls that timed out: %d", woke_idle,
                timeouts);
    /* a stray event (e.g. a late completion) may wake one idle poll */
    cr_assert_leq(woke_idle, 3, "%d of 20 polls on an idle connection returned at once",
                  woke_idle);
    cr_assert_eq(timeouts, 0, "%d polls slept through a message (3 s each)", timeouts);
    uint8_t zero = 0;
    cr_assert_eq(dc_verbs_send_blocking(c, &zero, 1, 20000), DC_OK, "%s", dc_last_error());
    t->close(c);
    cr_assert_eq(wait_child(pid), 0, "echo server failed");
}

/* A UCX that picks TCP although the node has RDMA says so (ucx.h): the
 * RDMA resources are read from ucp_context_print_info()'s text, and a
 * connection none of whose lanes is RDMA or node-local gets a path note. */
Test(ucx, rdma_left_unused_is_reported)
{
    static const char info[] =
        "#\n# UCP context\n#\n#     component 4  :  ib\n"
        "#            md 4  :  component 4  mlx5_0 \n"
        "#      resource 0  :  md 0  dev 0  flags -- self/memory0\n"
        "#      resource 1  :  md 1  dev 1  flags -- tcp/eth0\n"
        "#      resource 2  :  md 4  dev 2  flags -- rc_mlx5/mlx5_0:1\n"
        "#      resource 3  :  md 4  dev 2  flags -- ud_verbs/mlx5_0:1\n"
        "#      resource 4  :  md 5  dev 3  flags -- dc_mlx5/mlx5_1:1\n"
        "#      resource 5  :  md 3  dev 4  flags -- posix/memory\n"
        "#      resource 6  :  md 6  dev 5  flags -- srd/rdmap0s6\n"
        "#      resource 7  :  no dash here rc_x/y\n"
        "#      resource 8  :  flags -- rcnoslash\n";
    char res[256];
    cr_assert_eq(dc_ucx_rdma_resources(info, res, sizeof(res)), DC_OK);
    cr_assert_str_eq(res, "rc_mlx5/mlx5_0:1,ud_verbs/mlx5_0:1,dc_mlx5/mlx5_1:1,srd/rdmap0s6");
    /* a short buffer keeps whole entries that fit, NUL-terminated */
    char small[24];
    memset(small, 'x', sizeof(small));
    cr_assert_eq(dc_ucx_rdma_resources(info, small, sizeof(small)), DC_OK);
    cr_assert_str_eq(small, "rc_mlx5/mlx5_0:1");
    cr_assert_eq(dc_ucx_rdma_resources("", res, sizeof(res)), DC_OK);
    cr_assert_str_eq(res, "");
    cr_assert_eq(dc_ucx_rdma_resources(info, NULL, 0), DC_ERR_INVALID);
    cr_assert_eq(dc_ucx_rdma_resources(info, res, sizeof(res)), DC_OK);
    /* their devices, each once, whole entries only */
    char devs[64];
    dc_ucx_rdma_devices(res, devs, sizeof(devs));
    cr_assert_str_eq(devs, "mlx5_0:1,mlx5_1:1,rdmap0s6");
    dc_ucx_rdma_devices(res, devs, 12);
    cr_assert_str_eq(devs, "mlx5_0:1");
    dc_ucx_rdma_devices("", devs, sizeof(devs));
    cr_assert_str_eq(devs, "");

    char note[512];
    const char *n = dc_ucx_rdma_unused("tcp/eth0,tcp/ib0", res, note, sizeof(note));
    cr_assert(n == note);
    cr_assert(strstr(note, "over tcp/eth0,tcp/ib0") && strstr(note, "rc_mlx5/mlx5_0:1") &&
                  strstr(note, "UCX_TLS"),
              "%s", note);
    cr_assert_null(dc_ucx_rdma_unused("rc_mlx5/mlx5_0:1,tcp/eth0", res, note, sizeof(note)));
    cr_assert_null(dc_ucx_rdma_unused("tcp/eth0,dc_mlx5/mlx5_1:1", res, note, sizeof(note)));
    cr_assert_null(dc_ucx_rdma_unused("posix/memory,cma/memory", res, note, sizeof(note)),
                   "a peer on this node is reached without RDMA, rightly");
    cr_assert_null(dc_ucx_rdma_unused("tcp/eth0", "", note, sizeof(note)), "no RDMA here");
    cr_assert_not_null(dc_ucx_rdma_unused("", res, note, sizeof(note)));
    cr_assert(strstr(note, "no known transport"), "%s", note);
    char tiny[8];
    cr_assert(dc_ucx_rdma_unused("tcp/eth0", res, tiny, sizeof(tiny)) == tiny);
    cr_assert_eq(strlen(tiny), sizeof(tiny) - 1);
    cr_assert_null(dc_ucx_rdma_unused(NULL, res, note, sizeof(note)));
    cr_assert_null(dc_ucx_rdma_unused("tcp/eth0", res, NULL, 0));
}
