/* test_gen.c - `deltacast gen` through the real CLI ($DELTACAST_BIN): change
 * rates, determinism, file structure, and bad command lines.  The changed
 * count the CLI reports is checked against an independent count over the
 * two files. */
#include "testenv.h"
#include "testkit_fs.h"
#include <criterion/criterion.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/safetensors.h"

static char tmpdir[256];

static void rm_rf(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

static void setup(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/dc_gen_testXXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void teardown(void) { rm_rf(tmpdir); }

TestSuite(gen, .init = setup, .fini = teardown, .timeout = 120);

typedef struct {
    int code;
    char out[16384];
    char err[16384];
} run_t;

static run_t R;

static void run(run_t *r, const char *fmt, ...)
{
    const char *bin = dc_test_bin();
    cr_assert_not_null(bin, "DELTACAST_BIN not set");
    char args[1024], cmd[2048], ef[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    snprintf(ef, sizeof(ef), "%s/stderr.txt", tmpdir);
    snprintf(cmd, sizeof(cmd), "'%s' gen %s 2>'%s'", bin, args, ef);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(r->out, 1, sizeof(r->out) - 1, p);
    r->out[n] = 0;
    int status = pclose(p);
    r->code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    FILE *e = fopen(ef, "r");
    cr_assert_not_null(e);
    n = fread(r->err, 1, sizeof(r->err) - 1, e);
    r->err[n] = 0;
    fclose(e);
    unlink(ef);
}

/* Run gen --json into tmpdir/sub; returns the parsed summary. */
static json_t *gen_json(const char *sub, const char *opts)
{
    run(&R, "%s --json -o '%s/%s'", opts, tmpdir, sub);
    cr_assert_eq(R.code, 0, "gen %s failed (%d): %s", opts, R.code, R.err);
    json_error_t je;
    json_t *j = json_loads(R.out, 0, &je);
    cr_assert_not_null(j, "bad JSON summary: %s\n%s", je.text, R.out);
    return j;
}

static double jnum(json_t *j, const char *k)
{
    json_t *v = json_object_get(j, k);
    cr_assert(json_is_number(v), "summary lacks %s", k);
    return json_number_value(v);
}

static bool same_file(const char *a, const char *b)
{
    size_t la, lb;
    uint8_t *x = dc_test_slurp(a, &la), *y = dc_test_slurp(b, &lb);
    bool eq = la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return eq;
}

/* Open both files, check structure, and count changed weights. */
static uint64_t count_changes(const char *sub, const char *dtype, uint64_t *params)
{
    char pb[512], pn[512];
    snprintf(pb, sizeof(pb), "%s/%s/base.safetensors", tmpdir, sub);
    snprintf(pn, sizeof(pn), "%s/%s/next.safetensors", tmpdir, sub);
    dc_st_file_t *b, *n;
    cr_assert_eq(dc_st_open(pb, DC_ST_READ, &b), DC_OK, "%s", dc_last_error());
    cr_assert_eq(dc_st_open(pn, DC_ST_READ, &n), DC_OK, "%s", dc_last_error());
    size_t hb, hn;
    const uint8_t *rb = dc_st_header_raw(b, &hb), *rn = dc_st_header_raw(n, &hn);
    cr_assert(hb == hn && memcmp(rb, rn, hb) == 0, "headers differ");
    const char *meta = dc_st_metadata(b);
    cr_assert_not_null(meta);
    cr_assert(strstr(meta, "\"generator\":\"deltacast gen") != NULL, "%s", meta);
    cr_assert(strstr(meta, "\"seed\":") != NULL && strstr(meta, "\"model\":") != NULL &&
                  strstr(meta, "\"change_rate\":") != NULL,
              "%s", meta);

    dc_dtype_t want;
    cr_assert_eq(dc_dtype_parse(dtype, &want), DC_OK);
    uint64_t changed = 0, np = 0;
    bool saw_i64 = false, saw_embed = false, saw_norm = false, saw_head = false;
    for (size_t i = 0; i < dc_st_count(b); i++) {
        const dc_st_tensor_t *t = dc_st_tensor(b, i);
        const uint8_t *x = dc_st_data(b, t), *y = dc_st_data(n, t);
        size_t w = dc_dtype_size(t->dtype);
        if (t->dtype == DC_DTYPE_I64) {
            saw_i64 = true;
            cr_assert(memcmp(x, y, t->end - t->begin) == 0, "the I64 buffer changed");
            continue;
        }
        cr_assert_eq(t->dtype, want, "%s has dtype %s", t->name, dc_dtype_name(t->dtype));
        saw_embed |= strstr(t->name, "embed_tokens") != NULL;
        saw_head |= strcmp(t->name, "lm_head.weight") == 0;
        saw_norm |= strstr(t->name, "layernorm") != NULL;
        np += t->nelems;
        for (uint64_t k = 0; k < t->nelems; k++)
            changed += memcmp(x + k * w, y + k * w, w) != 0;
    }
    cr_assert(saw_i64 && saw_embed && saw_norm && saw_head, "missing tensor kinds");
    dc_st_close(b);
    dc_st_close(n);
    *params = np;
    return changed;
}

static void check_rate(const char *sub, const char *model, const char *dtype, double rate)
{
    char opts[256];
    snprintf(opts, sizeof(opts), "--params 2e6 --change-rate %g --model %s --dtype %s --seed 3",
             rate, model, dtype);
    json_t *j = gen_json(sub, opts);
    uint64_t params;
    uint64_t changed = count_changes(sub, dtype, &params);
    cr_assert_eq((uint64_t)jnum(j, "params"), params, "reported params differ from the files");
    cr_assert_eq((uint64_t)jnum(j, "changed"), changed, "reported changed %g, counted %llu",
                 jnum(j, "changed"), (unsigned long long)changed);
    cr_assert(params > 1900000 && params <= 2000000, "params %llu", (unsigned long long)params);
    double real = (double)changed / (double)params;
    cr_assert(fabs(jnum(j, "real_rate") - real) < 1e-12);
    if (strcmp(model, "optimizer") == 0) {
        cr_assert(real > 0.8 * rate && real < 1.2 * rate, "%s %s: real rate %g for %g", model,
                  dtype, real, rate);
    } else {
        /* inject selects ~rate of the elements; a multiplication by
         * 1 + 0.01 N(0,1) rounds back to the same value for roughly a fifth
         * (bf16) of them, so the real rate is lower. */
        double sel = jnum(j, "selected") / (double)params;
        cr_assert(sel > 0.95 * rate && sel < 1.05 * rate, "selected %g for %g", sel, rate);
        cr_assert(real <= sel && real > 0.6 * rate, "%s %s: real rate %g for %g", model, dtype,
                  real, rate);
    }
    json_decref(j);
}

Test(gen, optimizer_bf16_rate) { check_rate("o", "optimizer", "bf16", 0.01); }
Test(gen, optimizer_bf16_low_rate) { check_rate("o", "optimizer", "bf16", 0.003); }
Test(gen, optimizer_f16_rate) { check_rate("o", "optimizer", "f16", 0.02); }
Test(gen, optimizer_f32_rate) { check_rate("o", "optimizer", "f32", 0.05); }
Test(gen, inject_bf16_rate) { check_rate("i", "inject", "bf16", 0.03); }
Test(gen, inject_f16_rate) { check_rate("i", "inject", "f16", 0.05); }

Test(gen, deterministic_for_a_seed_whatever_the_threads)
{
    char a[512], b[512];
    const char *files[] = {"base", "next"};
    json_t *j1 = gen_json("s1", "--params 3e5 --change-rate 0.01 --seed 42 --threads 1");
    json_t *j2 = gen_json("s2", "--params 3e5 --change-rate 0.01 --seed 42 --threads 2");
    json_t *j3 = gen_json("s3", "--params 3e5 --change-rate 0.01 --seed 43");
    for (int k = 0; k < 2; k++) {
        snprintf(a, sizeof(a), "%s/s1/%s.safetensors", tmpdir, files[k]);
        snprintf(b, sizeof(b), "%s/s2/%s.safetensors", tmpdir, files[k]);
        cr_assert(same_file(a, b), "%s differs between two runs with seed 42", files[k]);
        snprintf(b, sizeof(b), "%s/s3/%s.safetensors", tmpdir, files[k]);
        cr_assert(!same_file(a, b), "%s identical for seeds 42 and 43", files[k]);
    }
    cr_assert_eq(jnum(j1, "changed"), jnum(j2, "changed"));
    json_decref(j1);
    json_decref(j2);
    json_decref(j3);

    /* inject too */
    j1 = gen_json("i1", "--params 3e5 --change-rate 0.05 --model inject --seed 9");
    j2 = gen_json("i2", "--params 3e5 --change-rate 0.05 --model inject --seed 9 --threads 1");
    snprintf(a, sizeof(a), "%s/i1/next.safetensors", tmpdir);
    snprintf(b, sizeof(b), "%s/i2/next.safetensors", tmpdir);
    cr_assert(same_file(a, b));
    json_decref(j1);
    json_decref(j2);
}

Test(gen, zero_rate_gives_identical_files)
{
    json_t *j = gen_json("z", "--params 1e5 --change-rate 0 --dtype f16");
    char a[512], b[512];
    snprintf(a, sizeof(a), "%s/z/base.safetensors", tmpdir);
    snprintf(b, sizeof(b), "%s/z/next.safetensors", tmpdir);
    cr_assert(same_file(a, b));
    cr_assert_eq(jnum(j, "changed"), 0);
    json_decref(j);
}

Test(gen, text_summary)
{
    run(&R, "--params 5e4 --change-rate 0.01 -o '%s/t'", tmpdir);
    cr_assert_eq(R.code, 0, "%s", R.err);
    cr_assert(strstr(R.out, "params") && strstr(R.out, "real rate") && strstr(R.out, " s with"),
              "%s", R.out);
    cr_assert_str_eq(R.err, "");
}

Test(gen, bad_command_lines_exit_2)
{
    const char *bad[] = {
        "--change-rate 0.01 -o X",                       /* no --params */
        "--params 1e6 -o X",                             /* no --change-rate */
        "--params 1e6 --change-rate 0.01",               /* no -o */
        "--params abc --change-rate 0.01 -o X",
        "--params 10 --change-rate 0.01 -o X",           /* too small */
        "--params 1.5e3 --change-rate 0.01 -o X",
        "--params 1e6 --change-rate 2 -o X",
        "--params 1e6 --change-rate -0.1 -o X",
        "--params 1e6 --change-rate 0.95 -o X",          /* optimizer max 0.9 */
        "--params 1e6 --change-rate 0.01 --model adam -o X",
        "--params 1e6 --change-rate 0.01 --dtype i8 -o X",
        "--params 1e6 --change-rate 0.01 --dtype xx -o X",
        "--params 1e6 --change-rate 0.01 --seed -1 -o X",
        "--params 1e6 --change-rate 0.01 --bogus -o X",
        "--params 1e6 --change-rate 0.01 -o X extra",
        "--params",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char args[512];
        snprintf(args, sizeof(args), "%s", bad[i]);
        char *x = strstr(args, " X");
        if (x) { /* point -o inside the temp dir so nothing leaks */
            char tail[256];
            snprintf(tail, sizeof(tail), "%s", x + 2);
            snprintf(x, sizeof(args) - (size_t)(x - args), " '%s/never'%s", tmpdir, tail);
        }
        run(&R, "%s", args);
        cr_assert_eq(R.code, 2, "'%s' exited %d: %s", args, R.code, R.err);
        cr_assert(strstr(R.err, "deltacast gen") != NULL, "'%s': %s", args, R.err);
        cr_assert_str_eq(R.out, "");
    }
    char never[512];
    snprintf(never, sizeof(never), "%s/never", tmpdir);
    cr_assert_neq(access(never, F_OK), 0, "a rejected command created its directory");
}

Test(gen, unwritable_output_exits_1_with_one_line)
{
    run(&R, "--params 1e4 --change-rate 0.01 -o /proc/self");
    cr_assert_eq(R.code, 1, "%s", R.err);
    cr_assert(strstr(R.err, "deltacast gen: error:") != NULL, "%s", R.err);
    cr_assert(strstr(R.err, "/proc/self/base.safetensors") != NULL, "%s", R.err);
    char *nl = strchr(R.err, '\n');
    cr_assert(nl && nl[1] == 0, "not one line: %s", R.err);

    run(&R, "--params 1e4 --change-rate 0.01 -o /proc/nonexistent-dir/x");
    cr_assert_eq(R.code, 1, "%s", R.err);
    cr_assert(strstr(R.err, "cannot create directory") != NULL, "%s", R.err);
}

Test(gen, help)
{
    run(&R, "--help");
    cr_assert_eq(R.code, 0);
    cr_assert(strstr(R.out, "--change-rate") && strstr(R.out, "inject"), "%s", R.out);
}
