/*
 * test_delta.c - delta files end to end through the public API: every
 * dtype and edge case (empty tensors, scalars, odd counts, NaN payloads,
 * -0.0, subnormals, infinities), added / removed / reshaped / re-typed
 * tensors and changed __metadata__, change rates 0 .. 100%; bad input
 * (wrong base, truncated, corrupted, not a delta) rejected with a clear
 * error and no output file; deterministic output across thread counts;
 * in-place apply; buffer API; and the CLI (gen -> diff -> apply -> cmp).
 */
#include "testenv.h"
#include "testkit_fs.h"
#include <criterion/criterion.h>

#include "kernels/codec.h"
#include "kernels/delta.h"
#include "kernels/safetensors.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmpdir[256];

static void setup(void)
{
    /* tmpfs when there is one: these tests fsync many small files */
    struct stat sb;
    const char *root = stat("/dev/shm", &sb) == 0 && access("/dev/shm", W_OK) == 0 ? "/dev/shm"
                                                                                  : "/tmp";
    snprintf(tmpdir, sizeof(tmpdir), "%s/dc_delta_testXXXXXX", root);
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void teardown(void)
{
    DIR *d = opendir(tmpdir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' && (e->d_name[1] == 0 || (e->d_name[1] == '.' && !e->d_name[2])))
            continue;
        char p[512];
        snprintf(p, sizeof(p), "%s/%s", tmpdir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(tmpdir);
}

TestSuite(delta, .init = setup, .fini = teardown);

#define XORSHIFT_SEED 0x3C6EF372FE94F82Bull
#include "xorshift.h"
static double urand(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

static const char *path(const char *name)
{
    static char buf[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof(buf[k]), "%s/%s", tmpdir, name);
    return buf[k];
}

static int exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

static uint64_t uvarint(const uint8_t *b, size_t *p)
{
    uint64_t v = 0;
    for (unsigned sh = 0;; sh += 7) {
        uint8_t c = b[(*p)++];
        v |= (uint64_t)(c & 0x7f) << sh;
        if (!(c & 0x80))
            return v;
    }
}

static void same_files(const char *a, const char *b)
{
    size_t la, lb;
    uint8_t *x = dc_test_slurp(a, &la), *y = dc_test_slurp(b, &lb);
    cr_assert_eq(la, lb, "%s %zu vs %s %zu bytes", a, la, b, lb);
    cr_assert_eq(memcmp(x, y, la), 0, "%s and %s differ", a, b);
    free(x);
    free(y);
}

/* A tensor spec for write_ckpt: data generated from `seed`, and changed
 * at `rate` when `mutate`. */
typedef struct {
    const char *name;
    dc_dtype_t dt;
    int ndim;
    uint64_t shape[4];
} spec_t;

static uint64_t nelems(const spec_t *s)
{
    uint64_t n = 1;
    for (int d = 0; d < s->ndim; d++)
        n *= s->shape[d];
    return n;
}

/* special bit patterns for float dtypes (NaN payloads, -0, subnormal, inf) */
static void put_special(uint8_t *p, dc_dtype_t dt, unsigned k)
{
    static const uint16_t h16[] = {0x7fc1, 0xffff, 0x8000, 0x0001, 0x7f80, 0xff80, 0x7c01, 0x8001};
    static const uint32_t f32[] = {0x7fc00001, 0xffffffff, 0x80000000, 0x00000001,
                                   0x7f800000, 0xff800000, 0x7f800001, 0x807fffff};
    static const uint64_t f64[] = {0x7ff8000000000001ull, 0xffffffffffffffffull, 0x8000000000000000ull,
                                   0x1ull, 0x7ff0000000000000ull, 0xfff0000000000000ull,
                                   0x7ff0000000000001ull, 0x800fffffffffffffull};
    switch (dc_dtype_size(dt)) {
    case 1:
        p[0] = (uint8_t)(0x7f + k * 37);
        break;
    case 2:
        dc_store_le16(p, h16[k % 8]);
        break;
    case 4:
        dc_store_le32(p, f32[k % 8]);
        break;
    default:
        dc_store_le64(p, f64[k % 8]);
        break;
    }
}

static void fill(uint8_t *p, size_t n, unsigned w, dc_dtype_t dt, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n * w; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        p[i] = (uint8_t)s;
    }
    if (dt == DC_DTYPE_BOOL)
        for (size_t i = 0; i < n; i++)
            p[i] &= 1;
    for (size_t i = 0; i < n; i += 5)
        put_special(p + i * w, dt, (unsigned)(i / 5));
}

static void mutate(uint8_t *p, size_t n, unsigned w, dc_dtype_t dt, double rate)
{
    for (size_t i = 0; i < n; i++) {
        if (urand() >= rate)
            continue;
        if (dt == DC_DTYPE_BOOL) {
            p[i] ^= 1;
        } else if (rnd() % 4 == 0) {
            put_special(p + i * w, dt, (unsigned)rnd());
            p[i * w] ^= 1; /* make sure it changes */
        } else {
            p[i * w] ^= (uint8_t)(1 + rnd() % 7);
        }
    }
}

static void write_ckpt(const char *file, const spec_t *specs, size_t n, const char *meta,
                       uint64_t seed, double rate)
{
    dc_st_desc_t d[32];
    for (size_t i = 0; i < n; i++) {
        d[i].name = specs[i].name;
        d[i].dtype = specs[i].dt;
        d[i].ndim = specs[i].ndim;
        memcpy(d[i].shape, specs[i].shape, sizeof(specs[i].shape));
    }
    dc_st_writer_t *w;
    cr_assert_eq(dc_st_writer_create(file, d, n, meta, &w), DC_OK, "%s", dc_last_error());
    for (size_t i = 0; i < n; i++) {
        unsigned ww = (unsigned)dc_dtype_size(specs[i].dt);
        size_t ne = (size_t)nelems(&specs[i]);
        uint8_t *b = malloc(ne * ww + 1);
        /* the tensor's base bytes depend on its name, not its position */
        uint64_t hs = 1469598103934665603ull;
        for (const char *c = specs[i].name; *c; c++)
            hs = (hs ^ (uint8_t)*c) * 1099511628211ull;
        fill(b, ne, ww, specs[i].dt, hs ^ (specs[i].dt * 77));
        if (rate > 0)
            mutate(b, ne, ww, specs[i].dt, rate);
        (void)seed;
        cr_assert_eq(dc_st_writer_write(w, b, ne * ww), DC_OK);
        free(b);
    }
    cr_assert_eq(dc_st_writer_finish(w), DC_OK, "%s", dc_last_error());
}

static void diff_apply_check(const char *base, const char *next, uint64_t chunk, unsigned threads)
{
    dc_delta_opts_t o = {.size = sizeof(o), .chunk_size = chunk, .threads = threads};
    dc_delta_stats_t s = {.size = sizeof(s)};
    const char *dl = path("d.delta"), *out = path("out.safetensors");
    cr_assert_eq(dc_delta_diff_files(base, next, dl, &o, &s), DC_OK, "%s", dc_last_error());
    cr_assert_eq(s.delta_bytes > 0, 1);
    dc_delta_stats_t a = {.size = sizeof(a)};
    cr_assert_eq(dc_delta_apply_files(base, dl, out, &o, &a), DC_OK, "%s", dc_last_error());
    same_files(out, next);
    unlink(out);
    unlink(dl);
}

static const spec_t ALL_DTYPES[] = {
    {"bool", DC_DTYPE_BOOL, 1, {1001}},         {"u8", DC_DTYPE_U8, 2, {3, 333}},
    {"i8", DC_DTYPE_I8, 1, {777}},              {"f8e4m3", DC_DTYPE_F8_E4M3, 1, {513}},
    {"f8e5m2", DC_DTYPE_F8_E5M2, 1, {129}},     {"i16", DC_DTYPE_I16, 1, {1023}},
    {"u16", DC_DTYPE_U16, 1, {17}},             {"f16", DC_DTYPE_F16, 2, {31, 33}},
    {"bf16", DC_DTYPE_BF16, 2, {127, 129}},     {"i32", DC_DTYPE_I32, 1, {999}},
    {"u32", DC_DTYPE_U32, 1, {5}},              {"f32", DC_DTYPE_F32, 3, {7, 11, 13}},
    {"i64", DC_DTYPE_I64, 1, {301}},            {"u64", DC_DTYPE_U64, 1, {3}},
    {"f64", DC_DTYPE_F64, 1, {257}},            {"scalar", DC_DTYPE_F32, 0, {0}},
    {"empty", DC_DTYPE_BF16, 2, {0, 4}},        {"one", DC_DTYPE_BF16, 1, {1}},
};

Test(delta, every_dtype_and_edge_case_roundtrips)
{
    static const double rates[] = {0.0, 0.001, 0.01, 0.5, 1.0};
    static const uint64_t chunks[] = {64, 1000, 4u << 20};
    for (size_t r = 0; r < DC_ARRAY_SIZE(rates); r++) {
        write_ckpt(path("base.st"), ALL_DTYPES, DC_ARRAY_SIZE(ALL_DTYPES), NULL, 1, 0.0);
        write_ckpt(path("next.st"), ALL_DTYPES, DC_ARRAY_SIZE(ALL_DTYPES), NULL, 1, rates[r]);
        for (size_t c = 0; c < DC_ARRAY_SIZE(chunks); c++)
            diff_apply_check(path("base.st"), path("next.st"), chunks[c], 2);
    }
}

Test(delta, added_removed_reshaped_retyped_and_metadata)
{
    static const spec_t base[] = {
        {"keep", DC_DTYPE_BF16, 1, {5000}},    {"gone", DC_DTYPE_F32, 1, {100}},
        {"reshape", DC_DTYPE_BF16, 2, {10, 20}}, {"retype", DC_DTYPE_F16, 1, {64}},
        {"grow", DC_DTYPE_I64, 1, {10}},
    };
    static const spec_t next[] = {
        {"new", DC_DTYPE_U8, 1, {3333}},       {"reshape", DC_DTYPE_BF16, 2, {20, 10}},
        {"keep", DC_DTYPE_BF16, 1, {5000}},    {"retype", DC_DTYPE_BF16, 1, {64}},
        {"grow", DC_DTYPE_I64, 1, {12}},       {"new_empty", DC_DTYPE_F32, 1, {0}},
    };
    write_ckpt(path("base.st"), base, DC_ARRAY_SIZE(base), "{\"step\":\"1\"}", 1, 0.0);
    write_ckpt(path("next.st"), next, DC_ARRAY_SIZE(next), "{\"step\":\"2\",\"x\":\"y\"}", 1,
               0.01);
    diff_apply_check(path("base.st"), path("next.st"), 256, 2);
    diff_apply_check(path("base.st"), path("next.st"), 4u << 20, 1);
    /* and back */
    diff_apply_check(path("next.st"), path("base.st"), 128, 2);
}

static void make_pair_and_delta(uint64_t chunk)
{
    write_ckpt(path("base.st"), ALL_DTYPES, DC_ARRAY_SIZE(ALL_DTYPES), "{\"a\":\"b\"}", 1, 0.0);
    write_ckpt(path("next.st"), ALL_DTYPES, DC_ARRAY_SIZE(ALL_DTYPES), "{\"a\":\"c\"}", 1, 0.05);
    dc_delta_opts_t o = {.size = sizeof(o), .chunk_size = chunk};
    cr_assert_eq(dc_delta_diff_files(path("base.st"), path("next.st"), path("d.delta"), &o, NULL),
                 DC_OK, "%s", dc_last_error());
}

Test(delta, deterministic_across_threads_and_buffer_api_matches)
{
    make_pair_and_delta(512);
    dc_delta_opts_t o1 = {.size = sizeof(o1), .chunk_size = 512, .threads = 1};
    dc_delta_opts_t o2 = {.size = sizeof(o2), .chunk_size = 512, .threads = 3};
    cr_assert_eq(dc_delta_diff_files(path("base.st"), path("next.st"), path("d1"), &o1, NULL), DC_OK);
    cr_assert_eq(dc_delta_diff_files(path("base.st"), path("next.st"), path("d2"), &o2, NULL), DC_OK);
    same_files(path("d1"), path("d2"));
    same_files(path("d1"), path("d.delta"));
    size_t bl, nl, dl;
    uint8_t *b = dc_test_slurp(path("base.st"), &bl), *n = dc_test_slurp(path("next.st"), &nl),
            *d = dc_test_slurp(path("d1"), &dl);
    void *md;
    size_t mdl;
    cr_assert_eq(dc_delta_diff_buffers(b, bl, n, nl, &o2, &md, &mdl, NULL), DC_OK);
    cr_assert_eq(mdl, dl);
    cr_assert_eq(memcmp(md, d, dl), 0);
    uint64_t ts;
    cr_assert_eq(dc_delta_target_size(md, mdl, &ts), DC_OK);
    cr_assert_eq(ts, nl);
    uint8_t *out = malloc(nl);
    size_t ol;
    cr_assert_eq(dc_delta_apply_buffers(b, bl, md, mdl, NULL, out, nl, &ol, NULL), DC_OK,
                 "%s", dc_last_error());
    cr_assert_eq(ol, nl);
    cr_assert_eq(memcmp(out, n, nl), 0);
    cr_assert_eq(dc_delta_apply_buffers(b, bl, md, mdl, NULL, out, nl - 1, &ol, NULL),
                 DC_ERR_INVALID);
    /* a layout that is neither DC_DELTA_LAYOUT_SIMD nor DC_DELTA_LAYOUT_COMPACT */
    dc_delta_opts_t o3 = {.size = sizeof(o3), .chunk_size = 512, .layout = 3};
    void *md3 = NULL;
    size_t mdl3;
    cr_assert_eq(dc_delta_diff_buffers(b, bl, n, nl, &o3, &md3, &mdl3, NULL), DC_ERR_INVALID);
    cr_assert(strstr(dc_last_error(), "layout") != NULL, "%s", dc_last_error());
    cr_assert_null(md3);
    uint8_t dg[16], dg2[16];
    cr_assert_eq(dc_checkpoint_digest(n, nl, 512, 1, dg), DC_OK);
    cr_assert_eq(dc_checkpoint_digest(n, nl, 512, 4, dg2), DC_OK);
    cr_assert_eq(memcmp(dg, dg2, 16), 0);
    /* the digest the delta names is this one */
    cr_assert_eq(dc_load_le64((uint8_t *)md + 56), dc_load_le64(dg));
    cr_assert_eq(dc_load_le64((uint8_t *)md + 64), dc_load_le64(dg + 8));
    n[nl - 1] ^= 1;
    cr_assert_eq(dc_checkpoint_digest(n, nl, 512, 1, dg2), DC_OK);
    cr_assert_neq(memcmp(dg, dg2, 16), 0);
    dc_free(md);
    free(out);
    free(b);
    free(n);
    free(d);
}

Test(delta, wrong_base_is_refused_without_output)
{
    make_pair_and_delta(1024);
    dc_status_t st = dc_delta_apply_files(path("next.st"), path("d.delta"), path("out"), NULL, NULL);
    cr_assert_eq(st, DC_ERR_WRONG_BASE, "%d %s", st, dc_last_error());
    cr_assert(strstr(dc_last_error(), "base") != NULL);
    cr_assert(!exists(path("out")));
    /* same size, one byte different */
    size_t bl;
    uint8_t *b = dc_test_slurp(path("base.st"), &bl);
    b[bl - 1] ^= 1;
    dc_test_spit(path("base2.st"), b, bl);
    free(b);
    cr_assert_eq(dc_delta_apply_files(path("base2.st"), path("d.delta"), path("out"), NULL, NULL),
                 DC_ERR_WRONG_BASE);
    cr_assert(!exists(path("out")));
}

static int only_expected_files(void)
{
    /* no temporary or output file left behind */
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    int bad = 0;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp.") || strcmp(e->d_name, "out") == 0)
            bad++;
    closedir(d);
    return bad == 0;
}

Test(delta, truncated_and_corrupted_deltas_rejected)
{
    make_pair_and_delta(256);
    size_t dl;
    uint8_t *d = dc_test_slurp(path("d.delta"), &dl);
    /* truncations */
    for (size_t cut = 0; cut < dl; cut += 1 + dl / 61) {
        dc_test_spit(path("bad.delta"), d, cut);
        dc_status_t st =
            dc_delta_apply_files(path("base.st"), path("bad.delta"), path("out"), NULL, NULL);
        cr_assert_eq(st, DC_ERR_FORMAT, "cut %zu: %d %s", cut, st, dc_last_error());
        cr_assert(only_expected_files());
    }
    /* every byte of the headers, and samples of the frames, flipped */
    uint8_t *bad = malloc(dl);
    for (size_t i = 0; i < dl; i += (i < 2048 ? 1 : 1 + dl / 300)) {
        memcpy(bad, d, dl);
        bad[i] ^= (uint8_t)(1u << (i % 8));
        dc_test_spit(path("bad.delta"), bad, dl);
        dc_status_t st =
            dc_delta_apply_files(path("base.st"), path("bad.delta"), path("out"), NULL, NULL);
        cr_assert(st == DC_ERR_FORMAT || st == DC_ERR_CORRUPT || st == DC_ERR_VERIFY ||
                      st == DC_ERR_WRONG_BASE,
                  "flip at %zu accepted (%d)", i, st);
        cr_assert(only_expected_files());
        cr_assert(strlen(dc_last_error()) > 5);
    }
    /* not a delta */
    cr_assert_eq(dc_delta_apply_files(path("base.st"), path("next.st"), path("out"), NULL, NULL),
                 DC_ERR_FORMAT);
    cr_assert(strstr(dc_last_error(), "not a") != NULL, "%s", dc_last_error());
    cr_assert(only_expected_files());
    free(bad);
    free(d);
}

Test(delta, in_place_apply)
{
    make_pair_and_delta(4096);
    /* a failing in-place apply leaves the base untouched */
    size_t nl, nl2;
    uint8_t *n0 = dc_test_slurp(path("next.st"), &nl);
    cr_assert_eq(dc_delta_apply_files(path("next.st"), path("d.delta"), NULL, NULL, NULL),
                 DC_ERR_WRONG_BASE);
    uint8_t *n1 = dc_test_slurp(path("next.st"), &nl2);
    cr_assert(nl2 == nl && memcmp(n0, n1, nl) == 0, "a failing in-place apply changed its base");
    free(n1);
    cr_assert_eq(dc_delta_apply_files(path("base.st"), path("d.delta"), NULL, NULL, NULL), DC_OK,
                 "%s", dc_last_error());
    same_files(path("base.st"), path("next.st"));
    /* applying again: the file is now at target, so it is the wrong base */
    cr_assert_eq(dc_delta_apply_files(path("base.st"), path("d.delta"), NULL, NULL, NULL),
                 DC_ERR_WRONG_BASE);
    same_files(path("base.st"), path("next.st"));
    cr_assert(only_expected_files());
    free(n0);
}

/* Apply targets for the wrong-base / corrupt-delta cases: the buffer API,
 * a new file and in place; each must fail with `want`, a message holding
 * `msg`, no output file and the base file as it was. */
static void apply_fails_everywhere(const char *base, const char *delta, dc_status_t want,
                                   const char *msg)
{
    size_t bl, dl;
    uint8_t *b = dc_test_slurp(base, &bl), *d = dc_test_slurp(delta, &dl);
    uint64_t ts;
    cr_assert_eq(dc_delta_target_size(d, dl, &ts), DC_OK);
    uint8_t *out = malloc((size_t)ts);
    size_t ol;
    dc_status_t st = dc_delta_apply_buffers(b, bl, d, dl, NULL, out, (size_t)ts, &ol, NULL);
    cr_assert_eq(st, want, "buffers: %d %s", st, dc_last_error());
    cr_assert(strstr(dc_last_error(), msg) != NULL, "buffers: %s", dc_last_error());
    st = dc_delta_apply_files(base, delta, path("out"), NULL, NULL);
    cr_assert_eq(st, want, "file: %d %s", st, dc_last_error());
    cr_assert(strstr(dc_last_error(), msg) != NULL, "file: %s", dc_last_error());
    cr_assert(strchr(dc_last_error(), '\n') == NULL);
    cr_assert(!exists(path("out")));
    st = dc_delta_apply_files(base, delta, NULL, NULL, NULL);
    cr_assert_eq(st, want, "in place: %d %s", st, dc_last_error());
    cr_assert(strstr(dc_last_error(), msg) != NULL, "in place: %s", dc_last_error());
    size_t bl2;
    uint8_t *b2 = dc_test_slurp(base, &bl2);
    cr_assert(bl2 == bl && memcmp(b, b2, bl) == 0, "in-place failure changed the base");
    cr_assert(only_expected_files());
    free(b2);
    free(out);
    free(d);
    free(b);
}

/* The fast path verifies target digests only; a mismatch then hashes the
 * base to tell a wrong base (a byte off in a chunk the delta leaves alone,
 * or in one it XOR-patches) from a corrupt delta (a frame's or the
 * header's target digest altered, CRCs recomputed so that only the digest
 * check can catch it). */
Test(delta, target_mismatch_says_wrong_base_or_corrupt)
{
    static const spec_t sp[] = {
        {"same", DC_DTYPE_BF16, 1, {5000}},
        {"edit", DC_DTYPE_BF16, 1, {5000}},
    };
    write_ckpt(path("base.st"), sp, 2, NULL, 1, 0.0);
    size_t bl;
    uint8_t *b = dc_test_slurp(path("base.st"), &bl);
    dc_st_file_t *f;
    cr_assert_eq(dc_st_open_mem(b, bl, "base", &f), DC_OK);
    size_t same_off = 0, edit_off = 0;
    for (size_t i = 0; i < dc_st_count(f); i++) {
        const dc_st_tensor_t *t = dc_st_tensor(f, i);
        size_t o = (size_t)(dc_st_data(f, t) - b);
        if (strcmp(t->name, "same") == 0)
            same_off = o;
        else
            edit_off = o;
    }
    dc_st_close(f);
    /* next: a few elements of "edit"'s first chunk (512 elements) changed */
    uint8_t *n = malloc(bl);
    memcpy(n, b, bl);
    for (size_t e = 3; e < 500; e += 37)
        n[edit_off + 2 * e] ^= 0x21;
    dc_test_spit(path("next.st"), n, bl);
    dc_delta_opts_t o = {.size = sizeof(o), .chunk_size = 1024, .threads = 2};
    dc_delta_stats_t s = {.size = sizeof(s)};
    cr_assert_eq(dc_delta_diff_files(path("base.st"), path("next.st"), path("d.delta"), &o, &s),
                 DC_OK, "%s", dc_last_error());
    cr_assert_eq(s.frames, 1);
    cr_assert_eq(s.frames_by_kind[DC_ENC_XOR_SPARSE] + s.frames_ctx, 1);
    /* the right base applies, in place too */
    cr_assert_eq(dc_delta_apply_files(path("base.st"), path("d.delta"), path("out"), NULL, NULL),
                 DC_OK, "%s", dc_last_error());
    same_files(path("out"), path("next.st"));
    unlink(path("out"));

    /* wrong base: a byte off in a chunk without a frame, then in the frame's */
    const size_t offs[] = {same_off + 1000, edit_off + 2 * 40 + 1};
    for (size_t k = 0; k < 2; k++) {
        memcpy(n, b, bl);
        n[offs[k]] ^= 0x80;
        dc_test_spit(path("wrong.st"), n, bl);
        apply_fails_everywhere(path("wrong.st"), path("d.delta"), DC_ERR_WRONG_BASE,
                               "different base");
    }

    /* corrupt delta: the record's target digest (group header CRC
     * recomputed); the chunk (2 KiB) carries one only with the threshold
     * lowered */
    uint64_t dmin = dc_delta_digest_min;
    dc_delta_digest_min = 0;
    cr_assert_eq(dc_delta_diff_files(path("base.st"), path("next.st"), path("dg.delta"), &o, &s),
                 DC_OK, "%s", dc_last_error());
    dc_delta_digest_min = dmin;
    size_t dl;
    uint8_t *d = dc_test_slurp(path("dg.delta"), &dl);
    cr_assert_eq(dc_load_le32(d + 8), 2);
    size_t fo = DC_DELTA_HEADER_SIZE + (size_t)dc_load_le64(d + 100), p = fo + 1;
    cr_assert_eq(d[fo], 1); /* one record in the group */
    uint64_t rv[3];
    rv[0] = uvarint(d, &p); /* skip, the one-byte encoding code, the length */
    rv[1] = d[p++];
    rv[2] = uvarint(d, &p);
    cr_assert(rv[1] & 1, "the record carries a digest");
    uint8_t *bad = malloc(dl);
    memcpy(bad, d, dl);
    bad[p + 3] ^= 1; /* a digest byte */
    dc_store_le32(bad + p + 16, dc_crc32c(0, bad + fo, p + 16 - fo));
    dc_test_spit(path("bad.delta"), bad, dl);
    apply_fails_everywhere(path("base.st"), path("bad.delta"), DC_ERR_VERIFY, "corrupt");
    /* ... on a wrong base it is the base that is named */
    apply_fails_everywhere(path("wrong.st"), path("bad.delta"), DC_ERR_WRONG_BASE,
                           "different base");
    free(d);
    free(bad);
    d = dc_test_slurp(path("d.delta"), &dl);
    bad = malloc(dl);
    /* corrupt delta: the header's target checkpoint digest (CRC recomputed) */
    memcpy(bad, d, dl);
    bad[56] ^= 4;
    dc_store_le32(bad + 124, dc_crc32c(0, bad, 124));
    dc_test_spit(path("bad.delta"), bad, dl);
    apply_fails_everywhere(path("base.st"), path("bad.delta"), DC_ERR_VERIFY, "corrupt");
    /* a target header whose own length field is shorter than the bytes the
     * delta carries (its CRCs recomputed): refused before it is parsed, not
     * parsed from whatever the output buffer held after the copied bytes
     * (a v1 file: v2 deltas between same-layout checkpoints store none) */
    free(bad);
    free(d);
    d = dc_test_slurp_src("tests/kernels/data/v1.delta", &dl);
    bad = malloc(dl);
    memcpy(bad, d, dl);
    uint64_t thl = dc_load_le64(d + 72);
    dc_store_le64(bad + DC_DELTA_HEADER_SIZE, thl - 8 - 16);
    dc_store_le32(bad + 96, dc_crc32c(0, bad + DC_DELTA_HEADER_SIZE, thl));
    dc_store_le32(bad + 124, dc_crc32c(0, bad, 124));
    dc_test_spit(path("bad.delta"), bad, dl);
    char fb[1024];
    snprintf(fb, sizeof(fb), "%s/tests/kernels/data/v1_base.safetensors", dc_test_src());
    uint64_t ts;
    cr_assert_eq(dc_delta_target_size(bad, dl, &ts), DC_ERR_FORMAT);
    cr_assert(strstr(dc_last_error(), "its length field says") != NULL, "%s", dc_last_error());
    cr_assert_eq(dc_delta_apply_files(fb, path("bad.delta"), path("out"), NULL, NULL),
                 DC_ERR_FORMAT);
    cr_assert(strstr(dc_last_error(), "its length field says") != NULL, "%s", dc_last_error());
    cr_assert(!exists(path("out")));
    free(bad);
    free(d);
    free(n);
    free(b);
}

/* --- CLI ------------------------------------------------------------------ */

/* A small checkpoint cut at the largest chunk size there is: diff and
 * apply size their codec contexts by the largest chunk its tensors hold,
 * not by the chunk size (a 500-byte hostile delta claiming 128 MiB chunks
 * made apply allocate and clear contexts for them).  In a child whose
 * address space may grow by 192 MiB only: a context sized by the claim
 * needs 4 bytes of positions per byte of chunk (1 GiB) and fails there.
 * (Not under ASan, whose shadow memory needs terabytes of address space.) */
Test(delta, huge_chunk_size_on_small_checkpoint_needs_little_memory)
{
    write_ckpt(path("base.st"), ALL_DTYPES, DC_ARRAY_SIZE(ALL_DTYPES), NULL, 1, 0.0);
    write_ckpt(path("next.st"), ALL_DTYPES, DC_ARRAY_SIZE(ALL_DTYPES), NULL, 1, 0.05);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
#if !defined(__SANITIZE_ADDRESS__)
        long pages = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        if (!f || fscanf(f, "%ld", &pages) != 1)
            _exit(3);
        fclose(f);
        rlim_t lim = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)192 << 20);
        struct rlimit rl = {lim, lim};
        if (setrlimit(RLIMIT_AS, &rl) != 0)
            _exit(3);
#endif
        dc_delta_opts_t o = {.size = sizeof(o), .chunk_size = DC_CODEC_MAX_CHUNK, .threads = 2};
        if (dc_delta_diff_files(path("base.st"), path("next.st"), path("d.delta"), &o, NULL) !=
            DC_OK) {
            fprintf(stderr, "diff: %s\n", dc_last_error());
            _exit(1);
        }
        if (dc_delta_apply_files(path("base.st"), path("d.delta"), path("out.st"), &o, NULL) !=
            DC_OK) {
            fprintf(stderr, "apply: %s\n", dc_last_error());
            _exit(2);
        }
        _exit(0);
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "diff/apply at chunk size %u within 192 MiB: status 0x%x", DC_CODEC_MAX_CHUNK,
              status);
    same_files(path("out.st"), path("next.st"));
}

static int run(const char *cmd)
{
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

Test(delta, cli_gen_diff_apply_inspect)
{
    const char *bin = dc_test_bin();
    if (!bin)
        cr_skip_test("DELTACAST_BIN not set");
    char cmd[8192];
    snprintf(cmd, sizeof(cmd),
             "%s gen --params 2e6 --change-rate 0.01 --seed 3 -o %s/g >/dev/null && "
             "%s diff %s/g/base.safetensors %s/g/next.safetensors -o %s/x.delta --threads 2 "
             "--chunk-size 64k >/dev/null && "
             "%s apply %s/g/base.safetensors %s/x.delta -o %s/o.st >/dev/null && "
             "cmp %s/o.st %s/g/next.safetensors && "
             "%s inspect %s/x.delta --base %s/g/base.safetensors --json > %s/i.json && "
             "%s inspect %s/x.delta --base %s/g/base.safetensors >/dev/null && "
             "%s inspect %s/g/base.safetensors --json >/dev/null",
             bin, tmpdir, bin, tmpdir, tmpdir, tmpdir, bin, tmpdir, tmpdir, tmpdir, tmpdir, tmpdir,
             bin, tmpdir, tmpdir, tmpdir, bin, tmpdir, tmpdir, bin, tmpdir);
    int rc = run(cmd);
    snprintf(cmd, sizeof(cmd), "rm -rf %s/g", tmpdir);
    if (rc != 0) {
        run(cmd);
        cr_assert_fail("CLI pipeline failed (%d)", rc);
    }
    size_t il;
    uint8_t *js = dc_test_slurp(path("i.json"), &il);
    js[il - 1] = 0;
    cr_assert(strstr((char *)js, "\"ratio_to_bound\"") != NULL);
    cr_assert(strstr((char *)js, "\"xor_sparse\"") != NULL);
    cr_assert(strstr((char *)js, "\"positions_methods\"") != NULL);
    cr_assert(strstr((char *)js, "\"overhead_share\"") != NULL);
    free(js);
    /* same tensors: the target header is the base's, and inspect says so
     * without --base */
    snprintf(cmd, sizeof(cmd), "%s inspect %s/x.delta 2>%s/err", bin, tmpdir, tmpdir);
    cr_assert_eq(run(cmd), 1);
    js = dc_test_slurp(path("err"), &il);
    js[il - 1] = 0;
    cr_assert(strstr((char *)js, "--base") != NULL, "%s", js);
    free(js);
    /* 5% injected changes in 4 MiB chunks: the gaps positions and 32-way
     * rANS values, exact through the files, and inspect counts them */
    snprintf(cmd, sizeof(cmd),
             "%s gen --params 1e7 --change-rate 0.05 --model inject --seed 4 -o %s/g5 "
             ">/dev/null && DELTACAST_CODEC_MODEL=order0 %s diff %s/g5/base.safetensors %s/g5/next.safetensors -o %s/y.delta "
             ">/dev/null && %s apply %s/g5/base.safetensors %s/y.delta -o %s/o5.st >/dev/null && "
             "cmp %s/o5.st %s/g5/next.safetensors && %s inspect %s/y.delta --base "
             "%s/g5/base.safetensors --json > %s/i5.json",
             bin, tmpdir, bin, tmpdir, tmpdir, tmpdir, bin, tmpdir, tmpdir, tmpdir, tmpdir, tmpdir,
             bin, tmpdir, tmpdir, tmpdir);
    rc = run(cmd);
    /* the same with --layout compact */
    if (rc == 0) {
        snprintf(cmd, sizeof(cmd),
                 "DELTACAST_CODEC_MODEL=order0 %s diff %s/g5/base.safetensors %s/g5/next.safetensors -o %s/z.delta "
                 "--layout compact >/dev/null && %s apply %s/g5/base.safetensors %s/z.delta -o "
                 "%s/o6.st >/dev/null && cmp %s/o6.st %s/g5/next.safetensors && %s inspect "
                 "%s/z.delta --base %s/g5/base.safetensors --json > %s/i6.json",
                 bin, tmpdir, tmpdir, tmpdir, bin, tmpdir, tmpdir, tmpdir, tmpdir, tmpdir, bin,
                 tmpdir, tmpdir, tmpdir);
        rc = run(cmd);
    }
    snprintf(cmd, sizeof(cmd), "rm -rf %s/g5 %s/o5.st %s/o6.st", tmpdir, tmpdir, tmpdir);
    run(cmd);
    cr_assert_eq(rc, 0, "CLI pipeline at 5%% failed (%d)", rc);
    js = dc_test_slurp(path("i5.json"), &il);
    js[il - 1] = 0;
    const char *g = strstr((char *)js, "\"gaps\":");
    cr_assert(g, "%s", js);
    cr_assert(atoi(g + 7) >= 4, "frames with gaps positions: %s", js);
    free(js);
    /* --layout compact: Golomb positions only */
    js = dc_test_slurp(path("i6.json"), &il);
    js[il - 1] = 0;
    g = strstr((char *)js, "\"gaps\":");
    cr_assert(g && atoi(g + 7) == 0, "compact layout: %s", js);
    free(js);
    /* wrong base: exit 1, one line, no output */
    snprintf(cmd, sizeof(cmd), "%s apply %s/g/next.safetensors %s/x.delta -o %s/out 2>%s/err",
             bin, tmpdir, tmpdir, tmpdir, tmpdir);
    cr_assert_eq(run(cmd), 1);
    cr_assert(!exists(path("out")));
    size_t el;
    uint8_t *err = dc_test_slurp(path("err"), &el);
    int lines = 0;
    for (size_t i = 0; i < el; i++)
        lines += err[i] == '\n';
    cr_assert_eq(lines, 1, "%.*s", (int)el, err);
    free(err);
    /* not a delta, truncated delta: exit 1 */
    snprintf(cmd, sizeof(cmd),
             "%s apply %s/g/base.safetensors %s/g/next.safetensors -o %s/out 2>/dev/null", bin,
             tmpdir, tmpdir, tmpdir);
    cr_assert_eq(run(cmd), 1);
    snprintf(cmd, sizeof(cmd),
             "head -c 1000 %s/x.delta > %s/t.delta && %s apply %s/g/base.safetensors %s/t.delta "
             "-o %s/out 2>/dev/null",
             tmpdir, tmpdir, bin, tmpdir, tmpdir, tmpdir);
    cr_assert_eq(run(cmd), 1);
    snprintf(cmd, sizeof(cmd), "%s inspect %s/t.delta 2>/dev/null", bin, tmpdir);
    cr_assert_eq(run(cmd), 1);
    cr_assert(!exists(path("out")));
    snprintf(cmd, sizeof(cmd), "%s diff 2>/dev/null", bin);
    cr_assert_eq(run(cmd), 2);
    snprintf(cmd, sizeof(cmd), "rm -rf %s/g", tmpdir);
    run(cmd);
}

/* A base that differs from the delta's only in a tensor the target drops:
 * apply gives the exact target (the target digests verify); strict_base
 * refuses it as a wrong base, and accepts the delta's own base. */
Test(delta, strict_base_refuses_unread_differences)
{
    static const spec_t sb[] = {
        {"keep", DC_DTYPE_BF16, 1, {3000}},
        {"gone", DC_DTYPE_F32, 1, {700}},
    };
    static const spec_t sn[] = {{"keep", DC_DTYPE_BF16, 1, {3000}}};
    write_ckpt(path("base.st"), sb, 2, NULL, 1, 0.0);
    write_ckpt(path("next.st"), sn, 1, NULL, 1, 0.02);
    dc_delta_opts_t o = {.size = sizeof(o), .chunk_size = 1024, .threads = 2};
    cr_assert_eq(dc_delta_diff_files(path("base.st"), path("next.st"), path("d.delta"), &o, NULL),
                 DC_OK, "%s", dc_last_error());
    /* other base: one byte of "gone" off */
    size_t bl;
    uint8_t *b = dc_test_slurp(path("base.st"), &bl);
    dc_st_file_t *f;
    cr_assert_eq(dc_st_open_mem(b, bl, "base", &f), DC_OK);
    size_t goff = 0;
    for (size_t i = 0; i < dc_st_count(f); i++)
        if (strcmp(dc_st_tensor(f, i)->name, "gone") == 0)
            goff = (size_t)(dc_st_data(f, dc_st_tensor(f, i)) - b);
    dc_st_close(f);
    cr_assert(goff > 0);
    b[goff + 5] ^= 0x10;
    dc_test_spit(path("other.st"), b, bl);
    free(b);
    cr_assert_eq(dc_delta_apply_files(path("other.st"), path("d.delta"), path("out"), &o, NULL),
                 DC_OK, "%s", dc_last_error());
    same_files(path("out"), path("next.st"));
    unlink(path("out"));
    dc_delta_opts_t so = o;
    so.strict_base = 1;
    cr_assert_eq(dc_delta_apply_files(path("other.st"), path("d.delta"), path("out"), &so, NULL),
                 DC_ERR_WRONG_BASE);
    cr_assert(strstr(dc_last_error(), "different base"), "%s", dc_last_error());
    cr_assert_eq(access(path("out"), F_OK), -1, "a refused apply left OUT behind");
    cr_assert_eq(dc_delta_apply_files(path("base.st"), path("d.delta"), path("out"), &so, NULL),
                 DC_OK, "%s", dc_last_error());
    same_files(path("out"), path("next.st"));
    unlink(path("out"));
}

/* The size rule of include/deltacast.h: a 0.1 caller's (smaller) options
 * are accepted with the later fields defaulted, a newer caller's unknown
 * non-zero fields are refused, and stats are filled only as far as the
 * caller's size reaches. */
Test(delta, options_and_stats_follow_the_size_rule)
{
    make_pair_and_delta(512);
    size_t bl, nl, dl;
    uint8_t *b = dc_test_slurp(path("base.st"), &bl), *n = dc_test_slurp(path("next.st"), &nl),
            *d = dc_test_slurp(path("d.delta"), &dl);
    /* 0.1's struct ended before strict_base: layout reads as 0 (config) */
    struct {
        dc_delta_opts_t o;
        uint64_t tail;
    } big;
    memset(&big, 0, sizeof(big));
    big.o.size = offsetof(dc_delta_opts_t, strict_base);
    big.o.chunk_size = 512;
    big.o.layout = 3; /* beyond the 0.1 size: must be ignored, not refused */
    void *md = NULL;
    size_t mdl;
    cr_assert_eq(dc_delta_diff_buffers(b, bl, n, nl, &big.o, &md, &mdl, NULL), DC_OK, "%s",
                 dc_last_error());
    cr_assert_eq(mdl, dl);
    cr_assert_eq(memcmp(md, d, dl), 0);
    dc_free(md);
    /* too small to hold 0.1's fields */
    big.o.size = sizeof(size_t);
    md = NULL;
    cr_assert_eq(dc_delta_diff_buffers(b, bl, n, nl, &big.o, &md, &mdl, NULL), DC_ERR_INVALID);
    cr_assert_null(md);
    /* a newer caller's struct: zero tail accepted, non-zero tail refused */
    big.o.size = sizeof(big);
    big.o.layout = 0;
    cr_assert_eq(dc_delta_diff_buffers(b, bl, n, nl, &big.o, &md, &mdl, NULL), DC_OK, "%s",
                 dc_last_error());
    dc_free(md);
    md = NULL;
    big.tail = 1;
    cr_assert_eq(dc_delta_diff_buffers(b, bl, n, nl, &big.o, &md, &mdl, NULL),
                 DC_ERR_UNSUPPORTED);
    cr_assert(strstr(dc_last_error(), "delta options") != NULL, "%s", dc_last_error());
    cr_assert_null(md);
    /* stats: an unset size is refused before any work; a full one is filled */
    dc_delta_stats_t st;
    memset(&st, 0xAB, sizeof(st));
    st.size = 0;
    uint8_t *out = malloc(nl);
    size_t ol;
    cr_assert_eq(dc_delta_apply_buffers(b, bl, d, dl, NULL, out, nl, &ol, &st), DC_ERR_INVALID);
    cr_assert_eq(st.frames, 0xABABABABABABABABull, "stats written despite the refusal");
    st.size = sizeof(st);
    cr_assert_eq(dc_delta_apply_buffers(b, bl, d, dl, NULL, out, nl, &ol, &st), DC_OK, "%s",
                 dc_last_error());
    cr_assert_eq(st.size, sizeof(st));
    cr_assert_eq(st.target_bytes, nl);
    cr_assert_eq(memcmp(out, n, nl), 0);
    free(out);
    free(b);
    free(n);
    free(d);
}
