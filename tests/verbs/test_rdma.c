/*
 * test_rdma.c - what only the `rdma` transport has (suite 'hw').
 *
 * On a machine without an RDMA device, init_explains_unavailability checks
 * that the transport says why it cannot run (so "auto" selection can report
 * it) and the other cases skip with the reason.  With a device (an RDMA
 * NIC, or soft-RoCE: `rdma link add rxe0 type rxe netdev eth0`) and
 * DELTACAST_TEST_RDMA_ADDR set to that interface's address (the connection
 * manager cannot route 127.0.0.1; scripts/rdma-vm.sh boots a VM with
 * soft-RoCE and sets it): a 1 GiB transfer, and GPU memory sent zero-copy
 * from a dma-buf registration with corruption and cuts.
 *
 * What every transport promises (transfers, corruption, the caller's
 * CRC32C, cut-and-resume, the orderly close, ...) is checked over rdma by
 * conformance.c (its rdma::* cases; tests/verbs/rdma_vm_suite.sh runs them).
 */
#define XFER_TRANSPORT "rdma"
#include "xfer.h"

#include "verbs/rdma.h"

#include <infiniband/verbs.h>

/* Skip unless rdma runs here and DELTACAST_TEST_RDMA_ADDR is set (xfer.h). */
static void require_rdma(void)
{
    g_tname = "rdma";
    require_transport();
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

Test(rdma, transfer_1gib_two_processes, .timeout = 1100)
{
    require_rdma();
    run_transfer(1ull << 30, 0);
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
