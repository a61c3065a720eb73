/* test_auth.c - HMAC challenge-response, secret loading, and a real server
 * that rejects a wrong secret and raw garbage while it keeps serving. */
#include "proc.h"
#include "verbs/auth.h"
#include "verbs/transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <jansson.h>
#include <sys/socket.h>
#include <sys/stat.h>

static const uint8_t K1[] = "secret-one", K2[] = "secret-two";

Test(auth, mac_verifies_only_with_the_same_secret_and_role)
{
    uint8_t nc[32], ns[32], mac[32];
    cr_assert_eq(dc_auth_nonce(nc), DC_OK);
    cr_assert_eq(dc_auth_nonce(ns), DC_OK);
    cr_assert(memcmp(nc, ns, 32) != 0);
    cr_assert_eq(dc_auth_mac(K1, sizeof(K1), 'C', nc, ns, mac), DC_OK);
    cr_assert_eq(dc_auth_verify(K1, sizeof(K1), 'C', nc, ns, mac, "t"), DC_OK);
    cr_assert_eq(dc_auth_verify(K2, sizeof(K2), 'C', nc, ns, mac, "t"), DC_ERR_AUTH);
    /* reflection: a client proof is not a server proof */
    cr_assert_eq(dc_auth_verify(K1, sizeof(K1), 'S', nc, ns, mac, "t"), DC_ERR_AUTH);
    /* replay with another nonce */
    uint8_t ns2[32];
    dc_auth_nonce(ns2);
    cr_assert_eq(dc_auth_verify(K1, sizeof(K1), 'C', nc, ns2, mac, "t"), DC_ERR_AUTH);
    for (int i = 0; i < 32; i++) {
        uint8_t bad[32];
        memcpy(bad, mac, 32);
        bad[i] ^= 1;
        cr_assert_eq(dc_auth_verify(K1, sizeof(K1), 'C', nc, ns, bad, "t"), DC_ERR_AUTH);
    }
    cr_assert(strstr(dc_last_error(), "failed authentication"));
}

Test(auth, secret_sources)
{
    uint8_t buf[64];
    size_t len = 0;
    dc_config_set("secret_file", "");
    dc_config_set("secret", "");
    cr_assert_eq(dc_auth_load_secret(NULL, 0, buf, sizeof(buf), &len), DC_ERR_AUTH);
    cr_assert_eq(dc_auth_load_secret("xyz", 3, buf, sizeof(buf), &len), DC_OK);
    cr_assert_eq(len, 3);
    cr_assert_eq(dc_auth_load_secret("xyz", 0, buf, sizeof(buf), &len), DC_ERR_AUTH);
    cr_assert_eq(dc_config_set("secret", "from-env"), DC_OK);
    cr_assert_eq(dc_auth_load_secret(NULL, 0, buf, sizeof(buf), &len), DC_OK);
    cr_assert_eq(len, 8);
    cr_assert(memcmp(buf, "from-env", 8) == 0);
    char path[] = "/tmp/dc-secret-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, "file-secret\n", 12), 12);
    close(fd);
    cr_assert_eq(dc_config_set("secret_file", path), DC_OK); /* the file wins */
    cr_assert_eq(dc_auth_load_secret(NULL, 0, buf, sizeof(buf), &len), DC_OK);
    cr_assert_eq(len, 11, "trailing newline stripped");
    cr_assert(memcmp(buf, "file-secret", 11) == 0);
    cr_assert_eq(dc_auth_load_secret(NULL, 0, buf, 4, &len), DC_ERR_INVALID);
    unlink(path);
    cr_assert_eq(dc_auth_load_secret(NULL, 0, buf, sizeof(buf), &len), DC_ERR_IO);
    dc_config_set("secret_file", NULL);
    dc_config_set("secret", NULL);
}

/* A secret file that group or others may read gets a warning naming the
 * file and its mode (once per process); a private one gets none. */
Test(auth, secret_file_readable_by_others_is_warned)
{
    char path[] = "/tmp/dc-secret-XXXXXX", log[] = "/tmp/dc-secret-log-XXXXXX";
    int fd = mkstemp(path), lf = mkstemp(log);
    cr_assert(fd >= 0 && lf >= 0);
    cr_assert_eq(write(fd, "s3cret\n", 7), 7);
    close(fd);
    dc_config_set("secret", "");
    cr_assert_eq(dc_config_set("secret_file", path), DC_OK);
    fflush(stderr);
    int saved = dup(2);
    dup2(lf, 2);
    uint8_t buf[64];
    size_t len = 0;
    dc_status_t st1 = dc_auth_load_secret(NULL, 0, buf, sizeof(buf), &len); /* 0600 */
    fflush(stderr);
    off_t quiet = lseek(lf, 0, SEEK_END);
    chmod(path, 0644);
    dc_status_t st2 = dc_auth_load_secret(NULL, 0, buf, sizeof(buf), &len);
    dc_status_t st3 = dc_auth_load_secret(NULL, 0, buf, sizeof(buf), &len);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    dc_config_set("secret_file", NULL);
    dc_config_set("secret", NULL);
    unlink(path);
    cr_assert(st1 == DC_OK && st2 == DC_OK && st3 == DC_OK, "%s", dc_last_error());
    cr_assert_eq(len, 6);
    char text[2048] = {0};
    cr_assert(pread(lf, text, sizeof(text) - 1, 0) >= 0);
    close(lf);
    unlink(log);
    cr_assert_eq(quiet, 0, "a warning for a private (0600) secret file: %s", text);
    char want[128];
    snprintf(want, sizeof(want), "secret file %s has mode 0644", path);
    char *first = strstr(text, want);
    cr_assert(first, "no warning naming the file and its mode: '%s'", text);
    cr_assert_null(strstr(first + 1, want), "warned more than once: %s", text);
}

static int raw_connect(const char *addr)
{
    char host[64];
    uint16_t port;
    cr_assert_eq(dc_verbs_parse_addr(addr, host, sizeof(host), &port), DC_OK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, host, &sa.sin_addr);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

static int good_client(const char *addr, const char *log)
{
    char *argv[] = {(char *)proc_bin(), "perf", "link", "--client", (char *)addr,
                    "--transport", "tcp", "--streams", "3", "--size", "1MiB", "--bytes",
                    "8MiB", "--verify", "--lat-iters", "10", "--json", NULL};
    const char *env[] = {"DELTACAST_SECRET=the-right-one", NULL};
    return proc_wait(proc_spawn(argv, env, log), 60);
}

Test(auth, server_rejects_wrong_secret_and_garbage_and_keeps_serving)
{
    const char *senv[] = {"DELTACAST_SECRET=the-right-one", "DELTACAST_TIMEOUT_MS=3000",
                          "DELTACAST_LOG=info", NULL};
    proc_pl_server_t S;
    proc_pl_server_start(&S, "auth", senv, false);
    char clog[256];
    proc_pl_path(&S, "client.log", clog, sizeof(clog));
    char *addr = S.addr;
    const char *slog = S.log;
    pid_t srv = S.pid;

    /* 1. wrong secret, through the API: the client sees DC_ERR_AUTH */
    const dc_verbs_ops_t *t;
    cr_assert_eq(dc_verbs_find("tcp", &t), DC_OK);
    dc_verbs_opts_t o;
    dc_verbs_opts_init(&o);
    o.secret = "not-the-secret";
    o.secret_len = strlen("not-the-secret");
    o.timeout_ms = 5000;
    dc_verbs_conn_t *c;
    cr_assert_eq(t->connect(&o, addr, &c), DC_OK);
    dc_status_t st;
    while ((st = t->connect_test(c)) == DC_ERR_AGAIN)
        t->wait(c, 10);
    cr_assert_eq(st, DC_ERR_AUTH, "wrong secret gave %s: %s", dc_status_name(st), dc_last_error());
    t->close(c);

    /* 2. garbage from a raw socket */
    int g = raw_connect(addr);
    char junk[200];
    memset(junk, 'G', sizeof(junk));
    cr_assert_eq(write(g, junk, sizeof(junk)), (ssize_t)sizeof(junk));
    /* 3. a raw socket that says nothing and stays open (stalls) */
    int quiet = raw_connect(addr);
    /* 4. a correct client, while the staller is pending */
    cr_assert_eq(good_client(addr, clog), 0, "good client failed (see %s)", clog);
    /* 5. a client that sends a valid HELLO and then garbage instead of a proof */
    int h = raw_connect(addr);
    uint8_t hello[40] = {'D', 'C', 'T', 'H', 1, 0, 0, 0};
    cr_assert_eq(write(h, hello, sizeof(hello)), 40);
    uint8_t chal[72];
    cr_assert_eq(dc_read_full(h, chal, sizeof(chal)), DC_OK);
    uint8_t proof[64];
    memset(proof, 0xab, sizeof(proof));
    cr_assert_eq(write(h, proof, sizeof(proof)), 64);
    /* 6. and another correct client afterwards */
    cr_assert_eq(good_client(addr, clog), 0, "second good client failed (see %s)", clog);
    sleep(4); /* the staller's handshake deadline (3 s) passes */
    close(g);
    close(quiet);
    close(h);
    kill(srv, SIGTERM);
    cr_assert_eq(proc_wait(srv, 20), 0, "server did not exit cleanly");
    cr_assert(proc_file_contains(slog, "failed authentication"), "no log line for the wrong "
                                                                 "secret (see %s)", slog);
    cr_assert(proc_file_contains(slog, "sent garbage"), "no log line for garbage");
    cr_assert(proc_file_contains(slog, "1 dropped after handshake_timeout_ms=3000"),
              "staller not dropped");
    cr_assert_eq(proc_file_contains(slog, "verified"), true, "server did not verify data");
}

Test(auth, server_survives_a_client_killed_mid_transfer_and_reports_json)
{
    const char *senv[] = {"DELTACAST_SECRET=the-right-one", "DELTACAST_TIMEOUT_MS=1500", NULL};
    proc_pl_server_t S;
    proc_pl_server_start(&S, "kill", senv, false);
    char clog[256], jlog[256];
    proc_pl_path(&S, "client.log", clog, sizeof(clog));
    proc_pl_path(&S, "client.json", jlog, sizeof(jlog));
    char *addr = S.addr;
    const char *slog = S.log;
    pid_t srv = S.pid;
    /* a client that is killed in the middle of its bandwidth phase */
    char *kargv[] = {(char *)proc_bin(), "perf", "link", "--client", addr, "--transport", "tcp",
                     "--duration", "30", "--lat-iters", "0", NULL};
    const char *cenv[] = {"DELTACAST_SECRET=the-right-one", NULL};
    pid_t victim = proc_spawn(kargv, cenv, clog);
    usleep(700000);
    kill(victim, SIGKILL);
    cr_assert_eq(proc_wait(victim, 10), -1);
    /* the next client is served once the server gives the victim up */
    char *gargv[] = {(char *)proc_bin(), "perf", "link", "--client", addr, "--transport", "tcp",
                     "--streams", "2", "--size", "64KiB", "--bytes", "4MiB", "--lat-iters",
                     "50", "--json", "--timeout-ms", "20000", NULL};
    int rc = proc_wait(proc_spawn(gargv, cenv, jlog), 60);
    kill(srv, SIGTERM);
    cr_assert_eq(proc_wait(srv, 20), 0);
    cr_assert_eq(rc, 0, "client after the killed one failed (see %s, %s)", jlog, slog);
    json_t *j = proc_json(jlog);
    cr_assert_str_eq(json_string_value(json_object_get(j, "transport")), "tcp");
    cr_assert_str_eq(json_string_value(json_object_get(j, "device")), "lo");
    cr_assert_eq(json_integer_value(json_object_get(j, "streams")), 2);
    cr_assert_eq(json_integer_value(json_object_get(j, "bytes")), 4 << 20);
    cr_assert(json_real_value(json_object_get(j, "seconds")) > 0);
    cr_assert(json_real_value(json_object_get(j, "gbps")) > 0);
    json_t *lat = json_object_get(j, "latency_us");
    cr_assert(json_is_object(lat));
    double p50 = json_real_value(json_object_get(lat, "p50"));
    double p99 = json_real_value(json_object_get(lat, "p99"));
    cr_assert(p50 > 0 && p99 >= p50, "p50 %f p99 %f", p50, p99);
    cr_assert(strstr(json_string_value(json_object_get(j, "why")), "tcp"));
    json_decref(j);
    cr_assert(proc_file_contains(slog, "client dropped"), "the killed client was not reported");
}

/* One perf link client against a --once server S: `args` after
 * "--client ADDR --transport tcp", then --json.  Both must exit 0; returns
 * the client's JSON (caller decrefs). */
static json_t *once_client_json(const proc_pl_server_t *S, const char *const env[],
                                const char *const args[])
{
    char jlog[256];
    proc_pl_path(S, "client.json", jlog, sizeof(jlog));
    char *argv[32] = {(char *)proc_bin(), "perf", "link", "--client", (char *)S->addr,
                      "--transport", "tcp"};
    size_t n = 7;
    for (size_t i = 0; args[i] && n < 30; i++)
        argv[n++] = (char *)args[i];
    argv[n++] = "--json";
    argv[n] = NULL;
    int rc = proc_wait(proc_spawn(argv, env, jlog), 60);
    cr_assert_eq(proc_wait(S->pid, 20), 0, "server failed (see %s)", S->log);
    cr_assert_eq(rc, 0, "client failed (see %s, %s)", jlog, S->log);
    return proc_json(jlog);
}

Test(auth, perf_link_warmup_is_verified_and_not_counted)
{
    const char *env[] = {"DELTACAST_SECRET=warm", NULL};
    proc_pl_server_t S;
    proc_pl_server_start(&S, "warm", env, true);
    const char *slog = S.log;
    /* 5 warmup messages, then 16 timed ones of 64 KiB, all seeded and
     * checked by the server */
    static const char *const args[] = {"--size", "64KiB", "--warmup", "5", "--bytes", "1MiB",
                                       "--verify", "--lat-iters", "5", NULL};
    json_t *j = once_client_json(&S, env, args);
    cr_assert_eq(json_integer_value(json_object_get(j, "bytes")), 1 << 20);
    cr_assert_eq(json_integer_value(json_object_get(j, "messages")), 16);
    cr_assert_eq(json_integer_value(json_object_get(j, "warmup")), 5);
    cr_assert(json_is_true(json_object_get(j, "verified")));
    json_decref(j);
    /* the server received and verified the warmup messages too */
    cr_assert(proc_file_contains(slog, "1376256 bytes in 21 messages"), "see %s", slog);
    cr_assert(proc_file_contains(slog, "verified"), "see %s", slog);
}

/* --lat-iters 0: no latency phase, and the report says so (JSON null, not
 * a latency of 0 us). */
Test(auth, perf_link_without_latency_phase_reports_none)
{
    const char *env[] = {"DELTACAST_SECRET=nolat", NULL};
    proc_pl_server_t S;
    proc_pl_server_start(&S, "nolat", env, true);
    static const char *const args[] = {"--size", "64KiB", "--bytes", "1MiB", "--lat-iters", "0",
                                       NULL};
    json_t *j = once_client_json(&S, env, args);
    json_t *lat = json_object_get(j, "latency_us");
    cr_assert(json_is_object(lat));
    cr_assert(json_is_null(json_object_get(lat, "p50")), "p50 reported without a latency phase");
    cr_assert(json_is_null(json_object_get(lat, "p99")), "p99 reported without a latency phase");
    cr_assert_eq(json_integer_value(json_object_get(lat, "n")), 0);
    cr_assert(json_real_value(json_object_get(j, "gbps")) > 0);
    json_decref(j);
}
