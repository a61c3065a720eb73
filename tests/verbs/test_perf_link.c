/* test_perf_link.c - `deltacast perf link --verify` as a user runs it: a
 * --bytes that is no multiple of --size ends with a shorter message, which
 * is not damage (the server used to count it as a mismatch), while the
 * server's byte count must still equal the client's. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>

#include "proc.h"

static proc_pl_server_t S;

static void fini(void)
{
    if (S.pid > 0)
        kill(S.pid, SIGKILL);
}

TestSuite(perf_link, .fini = fini, .timeout = 120);

static void run_client(const char *size, const char *bytes, const char *tag)
{
    char log[256];
    proc_pl_path(&S, tag, log, sizeof(log));
    char *argv[] = {(char *)proc_bin(), "perf", "link", "--client", S.addr, "--transport", "tcp",
                    "--size", (char *)size, "--bytes", (char *)bytes, "--verify",
                    "--lat-iters", "5", "--json", NULL};
    const char *env[] = {"DELTACAST_SECRET=perf-link-test", NULL};
    int rc = proc_wait(proc_spawn(argv, env, log), 60);
    cr_assert_eq(rc, 0, "perf link --size %s --bytes %s exit %d (see %s)", size, bytes, rc, log);
    json_t *j = proc_json(log);
    cr_assert_not_null(j, "no JSON in %s", log);
    cr_assert(json_is_true(json_object_get(j, "verified")), "not verified (see %s)", log);
    json_decref(j);
}

Test(perf_link, bytes_not_a_multiple_of_size_verifies)
{
    const char *env[] = {"DELTACAST_SECRET=perf-link-test", NULL};
    proc_pl_server_start(&S, "plink", env, false);
    run_client("100", "1MiB", "c1.log");    /* 10486 messages, the last 76 bytes */
    run_client("4KiB", "1000000", "c2.log"); /* the last 576 bytes */
    run_client("64KiB", "1MiB", "c3.log");  /* an exact multiple */
}

/* Issue 19: `perf link --tls` measures the same link in clear and with TLS
 * side by side; every report says its encryption. */
Test(perf_link, tls_side_by_side_reports_both_and_the_suite)
{
    const char *env[] = {"DELTACAST_SECRET=perf-link-test", NULL};
    proc_pl_server_start(&S, "plink-tls", env, false);
    char log[256];
    proc_pl_path(&S, "tls.log", log, sizeof(log));
    char *argv[] = {
        (char *)proc_bin(), "perf", "link",     "--client",    S.addr, "--tls",  "--size", "256KiB",
        "--bytes",          "8MiB", "--verify", "--lat-iters", "5",    "--json", NULL};
    int rc = proc_wait(proc_spawn(argv, env, log), 60);
    cr_assert_eq(rc, 0, "perf link --tls exit %d (see %s)", rc, log);
    json_t *j = proc_json(log);
    cr_assert_not_null(j, "no JSON in %s", log);
    json_t *clear = json_object_get(j, "clear"), *tls = json_object_get(j, "tls");
    cr_assert(clear && tls, "no clear / tls runs (see %s)", log);
    cr_assert_str_eq(json_string_value(json_object_get(j, "encryption")), "TLS_AES_128_GCM_SHA256");
    cr_assert_str_eq(json_string_value(json_object_get(clear, "encryption")), "none");
    cr_assert_str_eq(json_string_value(json_object_get(tls, "encryption")),
                     "TLS_AES_128_GCM_SHA256");
    cr_assert(json_is_true(json_object_get(clear, "verified")) &&
              json_is_true(json_object_get(tls, "verified")));
    cr_assert_gt(json_real_value(json_object_get(j, "goodput_ratio")), 0);
    cr_assert_gt(json_real_value(json_object_get(tls, "cpu_s_per_gb")), 0);
    cr_assert_gt(json_real_value(json_object_get(tls, "server_cpu_s_per_gb")), 0);
    json_decref(j);
}
