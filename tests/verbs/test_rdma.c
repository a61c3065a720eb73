/*
 * test_rdma.c - the `rdma` transport (suite 'hw').
 *
 * On a machine without an RDMA device the transfer cases skip with the
 * reason, and init_explains_unavailability checks that the transport says
 * why it cannot run (so "auto" selection can report it).  With a device
 * (an RDMA NIC, or soft-RoCE: `rdma link add rxe0 type rxe netdev eth0`)
 * and DELTACAST_TEST_RDMA_ADDR set to that interface's address (the
 * connection manager cannot route 127.0.0.1; scripts/rdma-vm.sh boots a VM
 * with soft-RoCE and sets it) the same two-process cases as test_ucx.c run over RC queue pairs, plus
 * reconnect + resume: the sending client cuts its link mid-message
 * (DELTACAST_FAULT drop_after, installed in-process), re-dials, the server's
 * listener re-attaches the session, and every byte still arrives exactly
 * once; and an orderly close (BYE) that the peer must take as final.
 */
#define DC_TEST_RDMA 1
#include "test_ucx.c"

#include "verbs/rdma.h"

#include <infiniband/verbs.h>

static void require_rdma(void)
{
    g_tname = "rdma";
    require_transport();
    const char *a = getenv("DELTACAST_TEST_RDMA_ADDR");
    if (!a || !*a)
        cr_skip_test("rdma: DELTACAST_TEST_RDMA_ADDR is not set (the address of an interface "
                     "with an RDMA device; loopback has none; scripts/rdma-vm.sh runs these "
                     "tests on soft-RoCE)");
}

Test(rdma, init_explains_unavailability)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (list)
        ibv_free_device_list(list);
    const dc_verbs_ops_t *t = NULL;
    dc_status_t st = dc_verbs_find("rdma", &t);
    if (list && n > 0) {
        /* A device exists: init may still fail (no active port), but then
         * it must say so. */
        if (st != DC_OK) {
            cr_assert_eq(st, DC_ERR_UNSUPPORTED);
            cr_assert(strstr(dc_last_error(), "rdma") != NULL, "%s", dc_last_error());
            return;
        }
        dc_verbs_caps_t caps = {.size = sizeof(caps)};
        cr_assert_eq(t->caps(&caps), DC_OK);
        cr_assert(caps.device[0] != 0);
        cr_assert(caps.mem_kinds & DC_VERBS_MEM_HOST);
        return;
    }
    cr_log_info("no RDMA device here: checking the unavailable path");
    cr_assert_eq(st, DC_ERR_UNSUPPORTED, "got %s", dc_status_name(st));
    cr_assert(strstr(dc_last_error(), "no RDMA device") != NULL, "%s", dc_last_error());
    /* Every entry point refuses cleanly, with the same reason. */
    cr_assert_eq(dc_rdma_ops.init(), DC_ERR_UNSUPPORTED);
    dc_verbs_caps_t caps = {.size = sizeof(caps)};
    cr_assert_eq(dc_rdma_ops.caps(&caps), DC_ERR_UNSUPPORTED);
    dc_verbs_opts_t o;
    opts_with_secret(&o, "s", 1000);
    dc_verbs_listener_t *l;
    cr_assert_eq(dc_rdma_ops.listen(&o, "127.0.0.1:0", &l), DC_ERR_UNSUPPORTED);
    dc_verbs_conn_t *c;
    cr_assert_eq(dc_rdma_ops.connect(&o, "127.0.0.1:1", &c), DC_ERR_UNSUPPORTED);
    cr_assert(strstr(dc_last_error(), "no RDMA device") != NULL, "%s", dc_last_error());
    /* An explicit request is an error, never a silent fallback ... */
    const dc_verbs_ops_t *sel = NULL;
    cr_assert_eq(dc_verbs_select("rdma", &sel, NULL, 0), DC_ERR_UNSUPPORTED);
    /* ... and "auto" says why rdma was not chosen. */
    char why[1024];
    st = dc_verbs_select("auto", &sel, why, sizeof(why));
    cr_assert_eq(st, DC_OK, "%s", dc_last_error());
    cr_assert_str_neq(sel->name, "rdma");
    cr_assert(strstr(why, "rdma unavailable") != NULL && strstr(why, "no RDMA device") != NULL,
              "auto selection does not explain rdma: %s", why);
}

Test(rdma, transfer_64mib_two_processes)
{
    require_rdma();
    run_transfer(64ull << 20, 0);
}

Test(rdma, corruption_is_nacked_and_resent)
{
    require_rdma();
    run_transfer(24ull << 20, 0.3);
}

/* The caller's CRC32C (isend_crc) in the header: exact, no NACK. */
Test(rdma, caller_crc_round_trips_exactly)
{
    require_rdma();
    g_caller_crc = 1;
    run_transfer(24ull << 20, 0);
}

/* A wrong caller CRC32C on every fifth message: NACKed once each, re-sent
 * with the transport's own, delivered exactly. */
Test(rdma, wrong_caller_crc_nacked_once_then_exact)
{
    require_rdma();
    g_caller_crc = 2;
    run_transfer(24ull << 20, 0);
}

/* The caller's CRC32C does not stop the receiver from catching damage. */
Test(rdma, caller_crc_corruption_still_caught)
{
    require_rdma();
    g_caller_crc = 1;
    run_transfer(24ull << 20, 0.3);
}

Test(rdma, transfer_1gib_two_processes, .timeout = 1100)
{
    require_rdma();
    run_transfer(1ull << 30, 0);
}

Test(rdma, cut_connections_resume_exactly, .timeout = 300)
{
    require_rdma();
    /* Two cuts of the client's link, each mid-message (the RDMA write stops
     * at exactly the cut byte): client re-dials == server re-attaches == 2,
     * every message compared byte for byte by the server. */
    run_transfer_cut(48ull << 20, 0, 15000000, 2);
}

Test(rdma, cuts_with_corruption_resume_exactly, .timeout = 300)
{
    require_rdma();
    /* NACK + re-send and reconnect + resume together. */
    run_transfer_cut(32ull << 20, 0.3, 9000000, 3);
}

/* GPU memory: sent zero-copy from a dma-buf registration, received through
 * the ring into device buffers, every CRC32C on the GPU; with corruption
 * (NACK + re-send) and cuts (reconnect + resume). */
Test(rdma, gpu_memory_with_corruption_and_cuts, .timeout = 300)
{
    require_rdma();
    require_gpu_memory();
    g_gpu = 1;
    run_transfer(32ull << 20, 0.2);
    run_transfer_cut(32ull << 20, 0.2, 9000000, 2);
}

/* --- an orderly close is final ------------------------------------------ */

/* Child: accept one connection, receive one message (so that the client's
 * connect completed before the close), close it (BYE, then disconnect),
 * close the listener, exit 0. */
static int close_server_main(int port_fd, const void *unused)
{
    (void)unused;
    const dc_verbs_ops_t *t;
    dc_verbs_opts_t o;
    opts_with_secret(&o, "test-secret-rdma-close", 20000);
    dc_verbs_listener_t *l;
    dc_verbs_conn_t *c = NULL;
    g_tname = "rdma";
    int rc = child_listen_accept(&o, port_fd, 30, "close server", &t, &l, &c);
    if (rc)
        return rc;
    uint8_t go;
    size_t gl = 0;
    if (dc_verbs_recv_blocking(c, &go, 1, &gl, 20000) != DC_OK || gl != 1) {
        fprintf(stderr, "close server: recv: %s\n", dc_last_error());
        return 14;
    }
    t->close(c);
    t->listen_close(l);
    return 0;
}

Test(rdma, orderly_close_is_final_not_redialed, .timeout = 120)
{
    require_rdma();
    char addr[128];
    pid_t pid = fork_server(close_server_main, NULL, 120, addr, sizeof(addr));

    const dc_verbs_ops_t *t;
    cr_assert_eq(dc_verbs_find("rdma", &t), DC_OK, "%s", dc_last_error());
    dc_verbs_conn_t *c = NULL;
    cr_assert_eq(client_connect(t, addr, "test-secret-rdma-close", &c), DC_OK, "connect %s: %s",
                 addr, dc_last_error());
    /* ACKed, hence received: the server closes right after it. */
    cr_assert_eq(dc_verbs_send_blocking(c, "g", 1, 20000), DC_OK, "%s", dc_last_error());
    /* client_connect gives the connection timeout_ms = 10000: taking the
     * close for a broken link would re-dial for 10 s and then fail. */
    double t0 = dc_now_s();
    uint8_t b;
    size_t bl = 0;
    dc_status_t st = dc_verbs_recv_blocking(c, &b, 1, &bl, 30000);
    double dt = dc_now_s() - t0;
    cr_log_info("rdma: receive after the peer's close: %s after %.2f s (%s)", dc_status_name(st),
                dt, st == DC_OK ? "" : dc_last_error());
    cr_assert_eq(st, DC_ERR_RESET, "got %s: %s", dc_status_name(st), dc_last_error());
    cr_assert_lt(dt, 5.0,
                 "the close took %.1f s to be noticed: it was taken for a broken link "
                 "and re-dialed",
                 dt);
    dc_verbs_stats_t s = {.size = sizeof(s)};
    cr_assert_eq(t->stats(c, &s), DC_OK);
    cr_assert_eq(s.reconnects, 0);
    t->close(c);
    cr_assert_eq(wait_child(pid), 0, "server reported a failure");
}
