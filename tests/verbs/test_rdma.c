/*
 * test_rdma.c - the `rdma` transport (suite 'hw').
 *
 * On a machine without an RDMA device the transfer cases skip with the
 * reason, and init_explains_unavailability checks that the transport says
 * why it cannot run (so "auto" selection can report it).  With a device
 * (an RDMA NIC, or soft-RoCE: `rdma link add rxe0 type rxe netdev eth0`)
 * the same two-process cases as test_ucx.c run over RC queue pairs.
 */
#define DC_TEST_RDMA 1
#include "test_ucx.c"

#include "verbs/rdma.h"

#include <infiniband/verbs.h>

static int rdma_skip_reason(char *why, size_t len)
{
    g_tname = "rdma";
    return !transport_usable(why, len);
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
    char why[512];
    if (rdma_skip_reason(why, sizeof(why)))
        cr_skip_test("rdma unavailable here: %s", why);
    run_transfer(64ull << 20, 0);
}

Test(rdma, corruption_is_nacked_and_resent)
{
    char why[512];
    if (rdma_skip_reason(why, sizeof(why)))
        cr_skip_test("rdma unavailable here: %s", why);
    run_transfer(24ull << 20, 0.3);
}

Test(rdma, transfer_1gib_two_processes, .timeout = 1100)
{
    char why[512];
    if (rdma_skip_reason(why, sizeof(why)))
        cr_skip_test("rdma unavailable here: %s", why);
    run_transfer(1ull << 30, 0);
}
