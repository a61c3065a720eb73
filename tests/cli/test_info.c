/* test_info.c - `deltacast info` as a user runs it: the real binary, its
 * --json parsed.  tcp is always usable; every transport says why it is or is
 * not; what it says about ucx matches what the library finds; a UCX that
 * cannot start (UCX_TLS naming nothing) is reported unusable with UCX's
 * reason; DELTACAST_KERN_ISA shows in the kernel ISA chosen. */
#include "testenv.h"
#include "verbs/transport.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static char out[1 << 20];

/* Run `env deltacast args`; returns the exit status, stdout in `out`. */
static int run(const char *env, const char *args)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "env %s '%s' %s 2>/dev/null", env ? env : "", dc_test_bin(), args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static json_t *info_json(const char *env)
{
    cr_assert_eq(run(env, "info --json"), 0, "info --json failed");
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    cr_assert(j, "info --json is no JSON object: %s\n%s", je.text, out);
    return j;
}

static json_t *transport(json_t *j, const char *name)
{
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(j, "transports"), i, t)
        if (strcmp(json_string_value(json_object_get(t, "name")), name) == 0)
            return t;
    cr_assert_fail("no transport '%s' listed", name);
    return NULL;
}

Test(info, json_lists_tcp_usable_and_a_reason_for_each)
{
    json_t *j = info_json(NULL);
    json_t *tcp = transport(j, "tcp");
    cr_assert(json_is_true(json_object_get(tcp, "usable")), "tcp not usable");
    cr_assert(json_is_string(json_object_get(tcp, "device")));
    static const char *const names[] = {"rdma", "ucx", "tcp"};
    for (size_t i = 0; i < 3; i++) {
        json_t *t = transport(j, names[i]);
        const char *why = json_string_value(json_object_get(t, "reason"));
        cr_assert(why && *why, "%s has no reason", names[i]);
        /* the CLI and the library agree */
        const dc_verbs_ops_t *ops;
        bool ok = dc_verbs_find(names[i], &ops) == DC_OK;
        cr_assert_eq(json_is_true(json_object_get(t, "usable")), ok, "%s: info says %s", names[i],
                     ok ? "unusable" : "usable");
    }
    cr_assert(json_is_string(json_object_get(j, "auto")));
    /* loopback is among tcp's interfaces */
    bool lo = false;
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(json_object_get(j, "tcp"), "interfaces"), i, r)
        lo |= strcmp(json_string_value(json_object_get(r, "address")), "127.0.0.1") == 0;
    cr_assert(lo, "127.0.0.1 not listed");
    /* ucx: usable means UCX found transports; rdma: devices or a reason */
    json_t *u = json_object_get(j, "ucx");
    if (json_is_true(json_object_get(u, "usable")))
        cr_assert_gt(json_array_size(json_object_get(u, "transports")), 0);
    json_t *rd = json_object_get(j, "rdma");
    if (!json_array_size(json_object_get(rd, "devices")))
        cr_assert(strstr(json_string_value(json_object_get(rd, "reason")), "no RDMA device"),
                  "rdma: %s", json_string_value(json_object_get(rd, "reason")));
    json_t *c = json_object_get(j, "cuda"), *k = json_object_get(j, "ktls");
    cr_assert(json_is_boolean(json_object_get(c, "usable")) &&
              json_is_string(json_object_get(c, "reason")));
    cr_assert(json_is_boolean(json_object_get(k, "available")) &&
              json_is_string(json_object_get(k, "reason")));
    cr_assert(strstr(json_string_value(json_object_get(j, "build_features")), "ucx="));
    json_decref(j);
}

Test(info, ucx_that_cannot_start_is_unusable_with_the_reason)
{
    const dc_verbs_ops_t *ops;
    if (dc_verbs_find("ucx", &ops) != DC_OK)
        cr_skip_test("no ucx here: %s", dc_last_error());
    json_t *j = info_json("UCX_TLS=no_such_transport");
    json_t *u = transport(j, "ucx");
    cr_assert(json_is_false(json_object_get(u, "usable")), "ucx usable with UCX_TLS naming none");
    cr_assert(strstr(json_string_value(json_object_get(u, "reason")), "ucp_init"), "%s",
              json_string_value(json_object_get(u, "reason")));
    cr_assert(json_is_true(json_object_get(transport(j, "tcp"), "usable")));
    json_decref(j);
}

Test(info, kern_isa_override_is_shown)
{
    json_t *j = info_json("DELTACAST_KERN_ISA=scalar");
    json_t *cpu = json_object_get(j, "cpu");
    cr_assert_str_eq(json_string_value(json_object_get(cpu, "kernel_isa")), "scalar");
    cr_assert_str_eq(json_string_value(json_object_get(cpu, "DELTACAST_KERN_ISA")), "scalar");
    cr_assert_gt(json_array_size(json_object_get(cpu, "isa_supported")), 0);
    json_decref(j);
}

Test(info, text_names_every_section)
{
    cr_assert_eq(run(NULL, "info"), 0);
    static const char *const want[] = {"Transports:", "tcp   usable", "tcp interfaces:",
                                       "ucx:", "rdma:", "cuda:", "kernel TLS:", "kernel ISA"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        cr_assert(strstr(out, want[i]), "no '%s' in:\n%s", want[i], out);
    cr_assert_eq(run(NULL, "info --bogus"), 2);
}
