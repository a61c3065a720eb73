/* test_perf_codec.c - `deltacast perf codec` runs its cases for real and
 * reports exact round trips (to a new buffer and in place) and every
 * figure in --json.  Speed is not asserted. */
#include "testenv.h"
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

Test(perf_codec, json_reports_exact_round_trips, .timeout = 120)
{
    const char *bin = dc_test_bin();
    cr_assert_not_null(bin);
    char dir[] = "/tmp/dc_perf_codec_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "'%s' perf codec --params 1e6 --runs 1 --no-baselines --json --dir '%s' 2>/dev/null",
             bin, dir);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    json_error_t err;
    json_t *root = json_loadf(p, 0, &err);
    int status = pclose(p);
    cr_assert_eq(status, 0, "perf codec exit status %d", status);
    cr_assert_not_null(root, "bad JSON: %s", err.text);
    json_t *cases = json_object_get(root, "cases");
    cr_assert(json_is_array(cases));
    cr_assert_eq(json_array_size(cases), 3);
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        cr_assert(json_is_true(json_object_get(c, "exact")), "case %zu not exact", i);
        cr_assert(json_is_true(json_object_get(c, "apply_in_place_exact")), "case %zu", i);
        const char *keys[] = {"encode_1t_gbps", "apply_1t_gbps", "apply_in_place_1t_gbps",
                              "xxh3_read_1t_gbps", "memcpy_1t_gbps"};
        for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
            json_t *m = json_object_get(c, keys[k]);
            cr_assert_not_null(m, "%s missing", keys[k]);
            cr_assert(json_real_value(json_object_get(m, "median")) > 0, "%s", keys[k]);
        }
        double ratio = json_real_value(json_object_get(c, "ratio_to_bound"));
        /* the base-conditioned model codes below the order-0 bound */
        cr_assert(ratio >= 0.5 && ratio < 2.0, "ratio to bound %f", ratio);
    }
    json_decref(root);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

static long long checkpoint_bytes_of_run(const char *bin, const char *dir, const char *params)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "'%s' perf codec --params %s --cases opt1 --runs 1 --no-baselines --json "
             "--dir '%s' 2>/dev/null",
             bin, params, dir);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    json_error_t err;
    json_t *root = json_loadf(p, 0, &err);
    cr_assert_eq(pclose(p), 0);
    cr_assert_not_null(root, "bad JSON: %s", err.text);
    json_t *c = json_array_get(json_object_get(root, "cases"), 0);
    cr_assert(json_is_true(json_object_get(c, "exact")));
    long long b = (long long)json_integer_value(json_object_get(c, "checkpoint_bytes"));
    json_decref(root);
    return b;
}

/* A pair left in --dir by an earlier run with other --params is generated
 * again, not measured under the new label. */
Test(perf_codec, pairs_of_other_params_are_regenerated, .timeout = 120)
{
    const char *bin = dc_test_bin();
    cr_assert_not_null(bin);
    char dir[] = "/tmp/dc_perf_codec_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    long long small = checkpoint_bytes_of_run(bin, dir, "1e6");
    long long big = checkpoint_bytes_of_run(bin, dir, "2e6");
    long long again = checkpoint_bytes_of_run(bin, dir, "2e6");
    cr_assert(big > small * 3 / 2, "1e6: %lld bytes, then 2e6: %lld", small, big);
    cr_assert_eq(again, big);
    char cmd[1100];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

static json_t *run_json(const char *cmd, int *status)
{
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    json_error_t err;
    json_t *root = json_loadf(p, 0, &err);
    *status = pclose(p);
    return root;
}

/* --pair measures a given checkpoint pair (here a gen pair written by
 * `gen`) instead of the gen cases, with both bounds and the positions+XOR
 * zstd -1 baseline in the JSON; a malformed --pair is a usage error. */
Test(perf_codec, pair_is_measured_with_bounds_and_xor_zstd, .timeout = 120)
{
    const char *bin = dc_test_bin();
    cr_assert_not_null(bin);
    char dir[] = "/tmp/dc_perf_codec_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "'%s' gen --params 1e6 --change-rate 0.02 --seed 5 -o '%s/p' >/dev/null 2>&1", bin,
             dir);
    cr_assert_eq(system(cmd), 0);
    snprintf(cmd, sizeof(cmd),
             "'%s' perf codec --cases none --pair mine=%s/p/base.safetensors,%s/p/next.safetensors "
             "--runs 1 --no-baselines --json --dir '%s/out' 2>/dev/null",
             bin, dir, dir, dir);
    int status;
    json_t *root = run_json(cmd, &status);
    cr_assert_eq(status, 0, "perf codec exit status %d", status);
    cr_assert_not_null(root);
    json_t *cases = json_object_get(root, "cases");
    cr_assert_eq(json_array_size(cases), 1);
    json_t *c = json_array_get(cases, 0);
    cr_assert_str_eq(json_string_value(json_object_get(c, "case")), "mine");
    char want[600];
    snprintf(want, sizeof(want), "%s/p/base.safetensors", dir);
    cr_assert_str_eq(json_string_value(json_object_get(c, "base")), want);
    cr_assert(json_is_true(json_object_get(c, "exact")));
    cr_assert(json_is_true(json_object_get(c, "apply_in_place_exact")));
    double rate = json_real_value(json_object_get(c, "change_rate"));
    cr_assert(rate > 0.015 && rate < 0.025, "change rate %f", rate);
    double b0 = json_real_value(json_object_get(c, "bound_bytes"));
    double bc = json_real_value(json_object_get(c, "bound_ctx_bytes"));
    cr_assert(b0 > 0 && bc > 0 && bc <= b0 * 1.001, "bounds %f %f", b0, bc);
    json_int_t xp = json_integer_value(json_object_get(c, "xor_zstd1_pos_bytes"));
    json_int_t xv = json_integer_value(json_object_get(c, "xor_zstd1_val_bytes"));
    json_int_t xt = json_integer_value(json_object_get(c, "xor_zstd1_bytes"));
    cr_assert(xp > 0 && xv > 0 && xt == xp + xv, "pos %lld val %lld sum %lld", (long long)xp,
              (long long)xv, (long long)xt);
    /* 2% of 1e6 BF16 values: positions and XOR words cannot fit in less than
     * a few KB, nor need more than a raw 4 bytes + 2 bytes per change */
    cr_assert(xt > 4000 && xt < 6 * 0.025 * 1e6, "pos+XOR zstd -1: %lld bytes", (long long)xt);
    json_decref(root);

    /* malformed: usage error (2), nothing measured */
    const char *bad[] = {"--pair x",        "--pair =a,b",   "--pair a=b,", "--pair 'a/b=x,y'",
                         "--pair opt1=x,y", "--cases bogus", "--cases none"};
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        snprintf(cmd, sizeof(cmd),
                 "'%s' perf codec %s --runs 1 --no-baselines --dir '%s/out' "
                 ">/dev/null 2>&1",
                 bin, bad[k], dir);
        int rc = system(cmd);
        cr_assert(WIFEXITED(rc) && WEXITSTATUS(rc) == 2, "'%s': status %d", bad[k], rc);
    }
    /* a missing file: a clear failure, not a crash */
    snprintf(cmd, sizeof(cmd),
             "'%s' perf codec --cases none --pair m=%s/none,%s/none --runs 1 "
             "--no-baselines --dir '%s/out' >/dev/null 2>&1",
             bin, dir, dir, dir);
    int rc = system(cmd);
    cr_assert(WIFEXITED(rc) && WEXITSTATUS(rc) != 0 && WEXITSTATUS(rc) != 2, "status %d", rc);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}
