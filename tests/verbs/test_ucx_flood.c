/* test_ucx_flood.c - the ucx listener under unauthenticated peers (issue
 * 19): raw UCP endpoints (the test's own UCP context) that connect to a real
 * ucx listener and never send the HELLO.  Each such request costs the
 * listener a UCP worker, so at most DC_UCX_MAX_HS_SRC (16) from one address
 * are kept: the 17th evicts the oldest; and one that stays silent is
 * dropped after handshake_timeout_ms, not timeout_ms.  The listener's log
 * (this process's stderr) says both. */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include "verbs/transport.h"

static const dc_verbs_ops_t *T;
static dc_verbs_listener_t *L;
static struct sockaddr_in to;
static ucp_context_h ctx;
static ucp_worker_h worker;
static char logpath[64];
static int saved_fd = -1;
static ucp_ep_h eps[32];
static int neps;

static void err_cb(void *arg, ucp_ep_h ep, ucs_status_t st)
{
    (void)ep;
    (void)st;
    (*(int *)arg)++;
}

static void start(uint32_t hs_timeout_ms)
{
    setenv("DELTACAST_SECRET", "ucx-flood-secret", 1);
    if (dc_verbs_find("ucx", &T) != DC_OK || T->init() != DC_OK)
        cr_skip_test("no ucx here: %s", dc_last_error());
    strcpy(logpath, "/tmp/dc-ucx-flood-XXXXXX");
    int lf = mkstemp(logpath);
    cr_assert(lf >= 0);
    fflush(stderr);
    saved_fd = dup(2);
    dup2(lf, 2);
    close(lf);
    dc_verbs_opts_t o;
    dc_verbs_opts_init(&o);
    o.timeout_ms = 30000;
    o.hs_timeout_ms = hs_timeout_ms;
    cr_assert_eq(T->listen(&o, "127.0.0.1:0", &L), DC_OK, "%s", dc_last_error());
    char a[128], host[64];
    uint16_t port;
    cr_assert_eq(T->listen_addr(L, a, sizeof(a)), DC_OK);
    cr_assert_eq(dc_verbs_parse_addr(a, host, sizeof(host), &port), DC_OK);
    to = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, host, &to.sin_addr);
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_AM};
    ucp_config_t *cfg;
    cr_assert_eq(ucp_config_read(NULL, NULL, &cfg), UCS_OK);
    cr_assert_eq(ucp_init(&p, cfg, &ctx), UCS_OK);
    ucp_config_release(cfg);
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    cr_assert_eq(ucp_worker_create(ctx, &wp, &worker), UCS_OK);
}

/* A UCP endpoint to the listener that will never say HELLO. */
static ucp_ep_h silent_ep(int *errors)
{
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLER,
                          .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
                          .sockaddr = {(const struct sockaddr *)&to, sizeof(to)},
                          .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                          .err_handler = {err_cb, errors}};
    ucp_ep_h e = NULL;
    cr_assert_eq(ucp_ep_create(worker, &ep, &e), UCS_OK);
    cr_assert(neps < 32);
    eps[neps++] = e;
    return e;
}

static void pump(int ms)
{
    double end = dc_now_s() + ms / 1000.0;
    do {
        ucp_worker_progress(worker);
        dc_verbs_conn_t *c = NULL;
        dc_status_t st = T->accept(L, &c);
        cr_assert(st == DC_ERR_AGAIN, "accept: %s: %s", dc_status_name(st), dc_last_error());
        usleep(1000);
    } while (dc_now_s() < end);
}

/* The log so far (stderr goes to logpath while the test runs). */
static const char *log_text(void)
{
    static char text[1 << 18];
    fflush(stderr);
    FILE *f = fopen(logpath, "r");
    size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
    if (f)
        fclose(f);
    text[n] = 0;
    return text;
}

static void fini(void)
{
    if (L)
        T->listen_close(L);
    L = NULL;
    if (saved_fd >= 0) {
        fflush(stderr);
        dup2(saved_fd, 2);
        close(saved_fd);
        saved_fd = -1;
    }
    if (logpath[0])
        unlink(logpath);
    for (int i = 0; i < neps; i++) {
        ucs_status_ptr_t r = ucp_ep_close_nb(eps[i], UCP_EP_CLOSE_MODE_FORCE);
        while (UCS_PTR_IS_PTR(r) && ucp_request_check_status(r) == UCS_INPROGRESS)
            ucp_worker_progress(worker);
        if (UCS_PTR_IS_PTR(r))
            ucp_request_free(r);
    }
    neps = 0;
    if (worker)
        ucp_worker_destroy(worker);
    if (ctx)
        ucp_cleanup(ctx);
    worker = NULL;
    ctx = NULL;
}

TestSuite(ucx_flood, .fini = fini, .timeout = 60);

Test(ucx_flood, silent_peer_dropped_after_handshake_timeout)
{
    start(400);
    int errors = 0;
    (void)silent_ep(&errors);
    pump(200);
    cr_assert_null(strstr(log_text(), "handshake not completed"), "dropped too soon: %s",
                   log_text());
    pump(800);
    cr_assert(strstr(log_text(), "handshake not completed within 400 ms (handshake_timeout_ms)"),
              "the silent peer was not dropped after handshake_timeout_ms: %s", log_text());
}

Test(ucx_flood, per_source_cap_evicts_the_oldest)
{
    start(30000);
    int errors = 0;
    for (int i = 0; i < 16; i++) {
        (void)silent_ep(&errors);
        pump(30);
    }
    pump(200);
    cr_assert_null(strstr(log_text(), "evicted"), "evicted below the cap: %s", log_text());
    (void)silent_ep(&errors);
    pump(300);
    cr_assert(strstr(log_text(), "1 unauthenticated handshake(s) evicted"),
              "the 17th silent peer of 127.0.0.1 evicted nothing: %s", log_text());
}
