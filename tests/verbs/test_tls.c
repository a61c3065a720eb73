/* test_tls.c - TLS 1.3 on the tcp transport (verbs/tcp_tls.c), over real
 * sockets and processes: PSK from the job secret (round trips, every cipher
 * suite, a wrong secret), the tls modes (auto encrypts only edges marked
 * wan; a listener with on refuses clear streams, with off refuses TLS),
 * certificates from a CA made here with the openssl CLI (a valid one, one
 * naming another node, one from an untrusted CA), a ciphertext byte flipped
 * on the wire by a proxy (caught by TLS, resumed, exact), and the fault
 * hooks (cut mid-message, corrupt) through TLS. */
#include "pair.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>

#define SECRET_B "another-job-secret-987654321"

static void tls_config(const char *mode)
{
    cr_assert_eq(dc_config_set("tls", mode), DC_OK);
    dc_config_set("tls_cipher", NULL);
    dc_config_set("tls_ca_file", NULL);
    dc_config_set("tls_cert_file", NULL);
    dc_config_set("tls_key_file", NULL);
}

static void opts_of(dc_verbs_opts_t *o, const char *secret, int tls, int wan, uint32_t tmo)
{
    dc_verbs_opts_init(o);
    o->secret = secret;
    o->secret_len = strlen(secret);
    o->streams = 2;
    o->timeout_ms = tmo;
    o->tls = tls;
    o->wan = wan;
}

/* A tcp listener on 127.0.0.1 (an ephemeral port) with the options of
 * opts_of(o, ...), which stay in *o for the client to adjust. */
static dc_verbs_listener_t *tls_listen(dc_verbs_opts_t *o, const char *secret, int tls, int wan,
                                       uint32_t tmo)
{
    const dc_verbs_ops_t *t;
    cr_assert_eq(dc_verbs_find("tcp", &t), DC_OK);
    opts_of(o, secret, tls, wan, tmo);
    dc_verbs_listener_t *l;
    cr_assert_eq(t->listen(o, "127.0.0.1:0", &l), DC_OK, "%s", dc_last_error());
    return l;
}

/* Connect in this process, progressing both ends.  DC_OK: *cc and *sc are
 * the two ends; else the client's error (dc_last_error), *sc NULL. */
static dc_status_t dial(dc_verbs_listener_t *l, const dc_verbs_opts_t *o, dc_verbs_conn_t **cc,
                        dc_verbs_conn_t **sc)
{
    const dc_verbs_ops_t *t = l->ops;
    char addr[128];
    cr_assert_eq(t->listen_addr(l, addr, sizeof(addr)), DC_OK);
    *sc = NULL;
    dc_status_t st = t->connect(o, addr, cc);
    if (st != DC_OK)
        return st;
    double end = dc_now_s() + 30;
    dc_status_t cst = DC_ERR_AGAIN;
    while (dc_now_s() < end) {
        if (!*sc) {
            dc_status_t a = t->accept(l, sc);
            cr_assert(a == DC_OK || a == DC_ERR_AGAIN, "accept: %s", dc_last_error());
            if (a != DC_OK)
                *sc = NULL;
        }
        if (cst == DC_ERR_AGAIN)
            cst = t->connect_test(*cc);
        if (cst != DC_OK && cst != DC_ERR_AGAIN) {
            char msg[600];
            snprintf(msg, sizeof(msg), "%s", dc_last_error());
            /* the listener may still hold the server half: it must not
             * hand it out */
            for (int i = 0; i < 20; i++) {
                dc_verbs_conn_t *x = NULL;
                cr_assert_neq(t->accept(l, &x), DC_OK, "the listener accepted a refused peer");
                usleep(2000);
            }
            t->close(*cc);
            *cc = NULL;
            return dc_error(cst, "%s", msg);
        }
        if (cst == DC_OK && *sc)
            return DC_OK;
        usleep(1000);
    }
    cr_assert_fail("no outcome within 30 s");
    return DC_ERR_TIMEOUT;
}

static void ping(dc_verbs_conn_t *a, dc_verbs_conn_t *b)
{
    uint8_t out[100000], in[100000];
    pair_fill(out, sizeof(out), 3);
    dc_verbs_req_t *rs, *rr;
    cr_assert_eq(dc_verbs_isend(a, out, sizeof(out), NULL, &rs), DC_OK);
    cr_assert_eq(dc_verbs_irecv(b, in, sizeof(in), NULL, &rr), DC_OK);
    int ds = 0, dr = 0;
    size_t len = 0;
    double end = dc_now_s() + 20;
    while ((!ds || !dr) && dc_now_s() < end) {
        if (!ds)
            cr_assert_eq(dc_verbs_test(rs, &ds, NULL), DC_OK, "%s", dc_last_error());
        if (!dr)
            cr_assert_eq(dc_verbs_test(rr, &dr, &len), DC_OK, "%s", dc_last_error());
    }
    cr_assert(ds && dr && len == sizeof(out) && memcmp(in, out, len) == 0);
}

static void stats_of(dc_verbs_conn_t *c, dc_verbs_stats_t *s)
{
    memset(s, 0, sizeof(*s));
    s->size = sizeof(*s);
    cr_assert_eq(c->ops->stats(c, s), DC_OK);
}

/* The pair of the round trips: tcp, 4 streams of 16 messages of up to 1 MiB. */
static pair_cfg_t tls_pair(uint64_t total)
{
    pair_cfg_t p = {.transport = "tcp",
                    .total = total,
                    .max_msg = 1u << 20,
                    .streams = 4,
                    .depth = 16,
                    .timeout_ms = 30000};
    return p;
}

Test(tls, psk_round_trip_is_exact_and_reports_the_suite, .timeout = 120)
{
    tls_config("on");
    pair_cfg_t p = tls_pair(24u << 20);
    pair_result_t r = run_pair(&p);
    cr_assert_str_eq(r.rstats.encryption, "TLS_AES_128_GCM_SHA256");
    cr_assert_eq(r.rstats.ktls & 2, 0, "kernel TLS cannot be on: this kernel has no CONFIG_TLS");
    cr_assert_eq(r.rstats.peer_cert[0], 0, "PSK mode proves no node name");
    tls_config("auto");
}

Test(tls, every_cipher_suite_round_trips, .timeout = 120)
{
    static const char *const suites[] = {"TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"};
    for (size_t i = 0; i < DC_ARRAY_SIZE(suites); i++) {
        tls_config("on");
        cr_assert_eq(dc_config_set("tls_cipher", suites[i]), DC_OK);
        pair_cfg_t p = tls_pair(4u << 20);
        p.max_msg = 256u << 10;
        p.streams = 2;
        p.depth = 8;
        pair_result_t r = run_pair(&p);
        cr_assert_str_eq(r.rstats.encryption, suites[i]);
    }
    tls_config("auto");
}

Test(tls, auto_encrypts_the_edges_between_regions_only)
{
    tls_config("auto");
    dc_verbs_opts_t o;
    dc_verbs_listener_t *l = tls_listen(&o, PAIR_SECRET, DC_VERBS_TLS_CONFIG, 0, 10000);
    const dc_verbs_ops_t *t = l->ops;
    for (int wan = 0; wan <= 1; wan++) {
        opts_of(&o, PAIR_SECRET, DC_VERBS_TLS_CONFIG, wan, 10000);
        dc_verbs_conn_t *cc, *sc;
        cr_assert_eq(dial(l, &o, &cc, &sc), DC_OK, "%s", dc_last_error());
        ping(cc, sc);
        ping(sc, cc);
        dc_verbs_stats_t cs, ss;
        stats_of(cc, &cs);
        stats_of(sc, &ss);
        const char *want = wan ? "TLS_AES_128_GCM_SHA256" : "none";
        cr_assert_str_eq(cs.encryption, want, "wan=%d: client %s", wan, cs.encryption);
        cr_assert_str_eq(ss.encryption, want, "wan=%d: server %s", wan, ss.encryption);
        t->close(cc);
        t->close(sc);
    }
    t->listen_close(l);
}

Test(tls, a_wrong_secret_fails_the_tls_handshake_clearly)
{
    tls_config("on");
    dc_verbs_opts_t o;
    dc_verbs_listener_t *l = tls_listen(&o, PAIR_SECRET, DC_VERBS_TLS_CONFIG, 1, 10000);
    const dc_verbs_ops_t *t = l->ops;
    opts_of(&o, SECRET_B, DC_VERBS_TLS_CONFIG, 1, 10000);
    dc_verbs_conn_t *cc, *sc;
    dc_status_t st = dial(l, &o, &cc, &sc);
    cr_assert_eq(st, DC_ERR_AUTH, "want DC_ERR_AUTH, got %d: %s", st, dc_last_error());
    cr_assert(strstr(dc_last_error(), "TLS handshake") && strstr(dc_last_error(), "job secret"),
              "unclear: %s", dc_last_error());
    cr_assert(strstr(dc_last_error(), "127.0.0.1"), "names no peer: %s", dc_last_error());
    t->listen_close(l);
    tls_config("auto");
}

Test(tls, listeners_refuse_the_other_kind_of_stream)
{
    tls_config("auto");
    /* tls=on: a clear client is refused; tls=off: a TLS client is refused */
    static const int lis[2] = {DC_VERBS_TLS_ON, DC_VERBS_TLS_OFF};
    static const int cli[2] = {DC_VERBS_TLS_OFF, DC_VERBS_TLS_ON};
    for (int i = 0; i < 2; i++) {
        dc_verbs_opts_t o;
        dc_verbs_listener_t *l = tls_listen(&o, PAIR_SECRET, lis[i], 0, 1500);
        opts_of(&o, PAIR_SECRET, cli[i], 0, 1500);
        dc_verbs_conn_t *cc, *sc;
        dc_status_t st = dial(l, &o, &cc, &sc);
        cr_assert_neq(st, DC_OK, "case %d: connected", i);
        l->ops->listen_close(l);
    }
}

/* --- certificates --------------------------------------------------------- */

static char cert_dir[64];

/* A CA, certificates of nodeA and nodeB signed by it, and a rogue CA's
 * certificate that also says nodeA. */
static void make_certs(void)
{
    snprintf(cert_dir, sizeof(cert_dir), "/tmp/dc-tls-XXXXXX");
    cr_assert(mkdtemp(cert_dir));
    char cmd[4096];
    snprintf(cmd, sizeof(cmd),
             "cd %s && set -e; "
             "ca() { openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
             "-keyout $1.key -out $1.pem -days 2 -subj /CN=$1 2>/dev/null; }; "
             "leaf() { printf 'subjectAltName=DNS:%%s\\n' $2 > $1.ext; "
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $1.key "
             "-out $1.csr -subj /CN=$2 2>/dev/null; "
             "openssl x509 -req -in $1.csr -CA $3.pem -CAkey $3.key -CAcreateserial "
             "-out $1.pem -days 2 -extfile $1.ext 2>/dev/null; }; "
             "ca ca; ca rogue; leaf nodeA nodeA ca; leaf nodeB nodeB ca; "
             "leaf fakeA nodeA rogue",
             cert_dir);
    cr_assert_eq(system(cmd), 0, "openssl CLI failed: %s", cmd);
}

static void remove_certs(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", cert_dir);
    (void)system(cmd);
}

static void cert_config(const char *ca, const char *node)
{
    char p[256];
    cr_assert_eq(dc_config_set("tls", "on"), DC_OK);
    snprintf(p, sizeof(p), "%s/%s.pem", cert_dir, ca);
    cr_assert_eq(dc_config_set("tls_ca_file", p), DC_OK);
    snprintf(p, sizeof(p), "%s/%s.pem", cert_dir, node);
    cr_assert_eq(dc_config_set("tls_cert_file", p), DC_OK);
    snprintf(p, sizeof(p), "%s/%s.key", cert_dir, node);
    cr_assert_eq(dc_config_set("tls_key_file", p), DC_OK);
}

/* Listener as `server` (certificate), client as `client` expecting the
 * server to be `expect`. */
static dc_status_t cert_dial(const char *server, const char *client, const char *client_ca,
                             const char *expect, dc_verbs_stats_t *cs, dc_verbs_stats_t *ss)
{
    cert_config("ca", server);
    dc_verbs_opts_t o;
    dc_verbs_listener_t *l = tls_listen(&o, PAIR_SECRET, DC_VERBS_TLS_CONFIG, 1, 5000);
    const dc_verbs_ops_t *t = l->ops;
    cert_config(client_ca, client);
    o.tls_peer_name = expect;
    dc_verbs_conn_t *cc, *sc;
    dc_status_t st = dial(l, &o, &cc, &sc);
    if (st == DC_OK) {
        ping(cc, sc);
        stats_of(cc, cs);
        stats_of(sc, ss);
        t->close(cc);
        t->close(sc);
    }
    t->listen_close(l);
    return st;
}

Test(tls, certificates_prove_the_node_name, .init = make_certs, .fini = remove_certs)
{
    dc_verbs_stats_t cs, ss;
    cr_assert_eq(cert_dial("nodeA", "nodeB", "ca", "nodeA", &cs, &ss), DC_OK, "%s",
                 dc_last_error());
    cr_assert_str_eq(cs.encryption, "TLS_AES_128_GCM_SHA256");
    cr_assert_str_eq(cs.peer_cert, "nodeA", "client sees %s", cs.peer_cert);
    cr_assert_str_eq(ss.peer_cert, "nodeB", "server sees %s", ss.peer_cert);
    tls_config("auto");
}

Test(tls, a_certificate_for_another_node_is_refused, .init = make_certs, .fini = remove_certs)
{
    dc_verbs_stats_t cs, ss;
    /* the client dials nodeB, but the listener's certificate names nodeA */
    dc_status_t st = cert_dial("nodeA", "nodeB", "ca", "nodeB", &cs, &ss);
    cr_assert_eq(st, DC_ERR_AUTH, "got %d: %s", st, dc_last_error());
    cr_assert(strstr(dc_last_error(), "certificate") && strstr(dc_last_error(), "hostname"),
              "unclear: %s", dc_last_error());
    tls_config("auto");
}

Test(tls, a_certificate_of_an_untrusted_ca_is_refused, .init = make_certs, .fini = remove_certs)
{
    dc_verbs_stats_t cs, ss;
    /* the listener's nodeA certificate comes from a CA the client does not trust */
    dc_status_t st = cert_dial("fakeA", "nodeB", "ca", "nodeA", &cs, &ss);
    cr_assert_eq(st, DC_ERR_AUTH, "got %d: %s", st, dc_last_error());
    cr_assert(strstr(dc_last_error(), "issuer"), "unclear: %s", dc_last_error());
    /* and the other way round: the client's certificate is the rogue one */
    st = cert_dial("nodeA", "fakeA", "ca", "nodeA", &cs, &ss);
    cr_assert_eq(st, DC_ERR_AUTH, "got %d: %s", st, dc_last_error());
    cr_assert(strstr(dc_last_error(), "unknown ca"), "unclear: %s", dc_last_error());
    tls_config("auto");
}

/* --- a man in the middle flips one byte ----------------------------------- */

#define FLIP_AT (3u << 20) /* client -> server byte (all connections) */

static volatile uint64_t *mitm_flips; /* shared with the proxy */
static pid_t mitm_pid;

typedef struct {
    int a, b; /* client side, server side */
} mitm_pair_t;

static void mitm_run(int lfd, struct sockaddr_in srv)
{
    mitm_pair_t p[64];
    int np = 0;
    uint64_t c2s = 0;
    static uint8_t buf[65536];
    for (;;) {
        struct pollfd pf[1 + 128];
        pf[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
        for (int i = 0; i < np; i++) {
            pf[1 + 2 * i] = (struct pollfd){.fd = p[i].a, .events = POLLIN};
            pf[2 + 2 * i] = (struct pollfd){.fd = p[i].b, .events = POLLIN};
        }
        if (poll(pf, (nfds_t)(1 + 2 * np), 1000) < 0)
            continue;
        if ((pf[0].revents & POLLIN) && np < 64) {
            int a = accept(lfd, NULL, NULL);
            int b = socket(AF_INET, SOCK_STREAM, 0);
            if (a >= 0 && b >= 0 && connect(b, (struct sockaddr *)&srv, sizeof(srv)) == 0) {
                p[np++] = (mitm_pair_t){a, b};
            } else {
                close(a);
                close(b);
            }
            continue; /* pf no longer matches p */
        }
        for (int i = np - 1; i >= 0; i--) {
            for (int d = 0; d < 2; d++) {
                if (!(pf[1 + 2 * i + d].revents & (POLLIN | POLLHUP | POLLERR)))
                    continue;
                int from = d ? p[i].b : p[i].a, to = d ? p[i].a : p[i].b;
                ssize_t n = read(from, buf, sizeof(buf));
                if (n > 0 && d == 0) {
                    if (*mitm_flips == 0 && c2s + (uint64_t)n > FLIP_AT) {
                        buf[FLIP_AT - c2s] ^= 0x20;
                        *mitm_flips = 1;
                    }
                    c2s += (uint64_t)n;
                }
                if (n <= 0 || write(to, buf, (size_t)n) != n) {
                    close(p[i].a);
                    close(p[i].b);
                    p[i] = p[--np];
                    break;
                }
            }
        }
    }
}

static void mitm_via(const char *lis, char *dial_addr, size_t len)
{
    struct sockaddr_in srv = {.sin_family = AF_INET};
    const char *colon = strrchr(lis, ':');
    cr_assert(colon);
    srv.sin_port = htons((uint16_t)atoi(colon + 1));
    srv.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in me = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t ml = sizeof(me);
    cr_assert(lfd >= 0 && bind(lfd, (struct sockaddr *)&me, sizeof(me)) == 0 &&
              listen(lfd, 64) == 0 && getsockname(lfd, (struct sockaddr *)&me, &ml) == 0);
    fflush(NULL);
    mitm_pid = fork();
    cr_assert(mitm_pid >= 0);
    if (mitm_pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        signal(SIGPIPE, SIG_IGN); /* a side that closed must not kill the proxy */
        mitm_run(lfd, srv);
        _exit(0);
    }
    close(lfd);
    snprintf(dial_addr, len, "127.0.0.1:%u", ntohs(me.sin_port));
}

static void mitm_setup(void)
{
    mitm_flips = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(mitm_flips != MAP_FAILED);
    *mitm_flips = 0;
}

static void mitm_stop(void)
{
    if (mitm_pid > 0) {
        kill(mitm_pid, SIGKILL);
        waitpid(mitm_pid, NULL, 0);
    }
}

Test(tls, a_flipped_ciphertext_byte_is_caught_and_the_transfer_resumes_exact, .init = mitm_setup,
     .fini = mitm_stop, .timeout = 120)
{
    tls_config("on");
    pair_cfg_t p = tls_pair(12u << 20);
    p.via = mitm_via;
    pair_result_t r = run_pair(&p);
    cr_assert_eq(*mitm_flips, 1, "the proxy flipped no byte");
    cr_assert_str_eq(r.rstats.encryption, "TLS_AES_128_GCM_SHA256");
    /* TLS refused the record: the connection broke and resumed; the
     * CRC32C never saw damaged bytes */
    cr_assert_geq(r.rstats.reconnects, 1, "no reconnect after a damaged record");
    cr_assert_eq(r.rstats.nacks_sent, 0, "damaged bytes got past TLS to the CRC32C");
    tls_config("auto");
}

Test(tls, the_same_flip_in_clear_is_caught_by_the_crc_only, .init = mitm_setup, .fini = mitm_stop,
     .timeout = 120)
{
    /* the control of the test above: the proxy's flip does reach the bytes */
    tls_config("off");
    pair_cfg_t p = tls_pair(12u << 20);
    p.via = mitm_via;
    pair_result_t r = run_pair(&p);
    cr_assert_eq(*mitm_flips, 1, "the proxy flipped no byte");
    cr_assert_str_eq(r.rstats.encryption, "none");
    cr_assert_geq(r.rstats.nacks_sent + r.rstats.reconnects, 1, "the flip went unnoticed");
    tls_config("auto");
}

/* --- the fault hooks through TLS ------------------------------------------ */

Test(tls, cuts_mid_message_reconnect_and_resume_exact, .timeout = 120)
{
    tls_config("on");
    pair_cfg_t p = tls_pair(16u << 20);
    p.fault_sender = "drop_after=1500000,drop_count=3";
    pair_result_t r = run_pair(&p);
    cr_assert_str_eq(r.rstats.encryption, "TLS_AES_128_GCM_SHA256");
    cr_assert_geq(r.rstats.reconnects, 1, "the cut did not fire");
    tls_config("auto");
}

Test(tls, corrupted_bytes_are_nacked_and_resent_exact, .timeout = 120)
{
    tls_config("on");
    pair_cfg_t p = tls_pair(8u << 20);
    p.max_msg = 256u << 10;
    p.fault_receiver = "corrupt=0.05,seed=5";
    pair_result_t r = run_pair(&p);
    cr_assert_str_eq(r.rstats.encryption, "TLS_AES_128_GCM_SHA256");
    cr_assert_geq(r.rstats.nacks_sent, 1, "the corruption did not fire");
    tls_config("auto");
}

/* The TLS handshake is pre-authentication work: a peer that starts it and
 * stalls is dropped at the handshake deadline like one that sends nothing. */
Test(tls, a_stalled_tls_handshake_is_dropped_at_the_deadline)
{
    tls_config("auto");
    dc_verbs_opts_t o;
    dc_verbs_listener_t *l = tls_listen(&o, PAIR_SECRET, DC_VERBS_TLS_ON, 0, 1000);
    const dc_verbs_ops_t *t = l->ops;
    char addr[128];
    cr_assert_eq(t->listen_addr(l, addr, sizeof(addr)), DC_OK);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                             .sin_port = htons((uint16_t)atoi(strrchr(addr, ':') + 1))};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    /* the first bytes of a TLS record header, then nothing */
    cr_assert_eq(send(fd, "\x16\x03\x01", 3, MSG_NOSIGNAL), 3);
    double t0 = dc_now_s();
    bool closed = false;
    while (!closed && dc_now_s() - t0 < 5) {
        dc_verbs_conn_t *c = NULL;
        cr_assert_eq(t->accept(l, &c), DC_ERR_AGAIN);
        uint8_t b;
        ssize_t n = recv(fd, &b, 1, MSG_DONTWAIT);
        closed = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
        usleep(10000);
    }
    double took = dc_now_s() - t0;
    cr_assert(closed, "the stalled TLS handshake was still open after 5 s");
    cr_assert(took >= 0.9, "dropped before its deadline (%.2f s)", took);
    close(fd);
    t->listen_close(l);
}
