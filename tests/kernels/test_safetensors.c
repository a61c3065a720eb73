/* test_safetensors.c - safetensors reading, validation and writing.
 *
 * Golden files are written out byte by byte as the reference implementation
 * (huggingface/safetensors, whose Python package serializes in Rust) produces
 * them: compact JSON, "__metadata__" first, header padded with spaces to a
 * multiple of 8. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/safetensors.h"
#include "testkit_fs.h"

static char tmpdir[256];

static void setup(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/dc_st_testXXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void teardown(void)
{
    DIR *d = opendir(tmpdir);
    if (d) {
        struct dirent *e;
        char p[512];
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
                continue;
            snprintf(p, sizeof(p), "%s/%s", tmpdir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(tmpdir);
}

TestSuite(safetensors, .init = setup, .fini = teardown);

static void path_of(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", tmpdir, name);
}

static int count_dir_entries(void)
{
    DIR *d = opendir(tmpdir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

/* ---- golden files ---------------------------------------------------------- */

/* serialize({"attn.0": F32 [1,2,3] = 0..5}) from the reference: 64-byte JSON,
 * no padding needed. */
static const uint8_t golden_attn[] =
    "\x40\0\0\0\0\0\0\0"
    "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}"
    "\x00\x00\x00\x00\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40"
    "\x00\x00\x80\x40\x00\x00\xa0\x40";

/* serialize({"attn0": F32 [1,1,2,3]}): 65-byte JSON + 7 spaces. */
static const uint8_t golden_attn0[] =
    "\x48\0\0\0\0\0\0\0"
    "{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3],\"data_offsets\":[0,24]}}       "
    "\x00\x00\x00\x00\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40"
    "\x00\x00\x80\x40\x00\x00\xa0\x40";

/* serialize({}) and serialize({}, metadata={"framework": "pt"}). */
static const uint8_t golden_empty[] = "\x08\0\0\0\0\0\0\0{}      ";
static const uint8_t golden_meta[] =
    "\x28\0\0\0\0\0\0\0{\"__metadata__\":{\"framework\":\"pt\"}}     ";

/* A BF16 scalar, an empty U8 tensor and an I64 vector, with metadata. */
static const uint8_t golden_mixed[] =
    "\xc8\0\0\0\0\0\0\0"
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"pos\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]},"
    "\"s\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[16,18]},"
    "\"e\":{\"dtype\":\"U8\",\"shape\":[0,4],\"data_offsets\":[18,18]}} "
    "\x01\0\0\0\0\0\0\0\x02\0\0\0\0\0\0\0\x80\x3f";

static const float attn_data[6] = {0, 1, 2, 3, 4, 5};

static void write_with_writer(const char *path, const dc_st_desc_t *d, size_t n, const char *meta,
                              const void *data, size_t len)
{
    dc_st_writer_t *w = NULL;
    cr_assert_eq(dc_st_writer_create(path, d, n, meta, &w), DC_OK, "%s", dc_last_error());
    /* in odd pieces, to exercise the buffering */
    size_t off = 0, step = 1;
    while (off < len) {
        size_t k = len - off < step ? len - off : step;
        cr_assert_eq(dc_st_writer_write(w, (const uint8_t *)data + off, k), DC_OK);
        off += k;
        step = step * 3 + 1;
    }
    cr_assert_eq(dc_st_writer_finish(w), DC_OK, "%s", dc_last_error());
}

static void assert_file_is(const char *path, const uint8_t *gold, size_t glen)
{
    size_t len;
    uint8_t *b = dc_test_slurp(path, &len);
    cr_assert_eq(len, glen, "size %zu, golden %zu", len, glen);
    cr_assert(memcmp(b, gold, glen) == 0, "bytes differ from the golden file");
    free(b);
}

Test(safetensors, golden_writer_matches_reference_bytes)
{
    char p[512];
    path_of(p, sizeof(p), "attn.safetensors");
    dc_st_desc_t d = {.name = "attn.0", .dtype = DC_DTYPE_F32, .ndim = 3, .shape = {1, 2, 3}};
    write_with_writer(p, &d, 1, NULL, attn_data, sizeof(attn_data));
    assert_file_is(p, golden_attn, sizeof(golden_attn) - 1);

    dc_st_desc_t d0 = {.name = "attn0", .dtype = DC_DTYPE_F32, .ndim = 4, .shape = {1, 1, 2, 3}};
    write_with_writer(p, &d0, 1, NULL, attn_data, sizeof(attn_data));
    assert_file_is(p, golden_attn0, sizeof(golden_attn0) - 1);

    write_with_writer(p, NULL, 0, NULL, NULL, 0);
    assert_file_is(p, golden_empty, sizeof(golden_empty) - 1);

    write_with_writer(p, NULL, 0, "{\"framework\": \"pt\"}", NULL, 0);
    assert_file_is(p, golden_meta, sizeof(golden_meta) - 1);

    dc_st_desc_t dm[3] = {
        {.name = "pos", .dtype = DC_DTYPE_I64, .ndim = 1, .shape = {2}},
        {.name = "s", .dtype = DC_DTYPE_BF16, .ndim = 0},
        {.name = "e", .dtype = DC_DTYPE_U8, .ndim = 2, .shape = {0, 4}},
    };
    size_t glen = sizeof(golden_mixed) - 1;
    write_with_writer(p, dm, 3, "{\"format\":\"pt\"}", golden_mixed + glen - 18, 18);
    assert_file_is(p, golden_mixed, glen);
    cr_assert_eq(count_dir_entries(), 1, "temporary files left behind");
}

Test(safetensors, golden_reader)
{
    dc_st_file_t *f = NULL;
    size_t glen = sizeof(golden_attn0) - 1;
    cr_assert_eq(dc_st_open_mem(golden_attn0, glen, "g", &f), DC_OK, "%s", dc_last_error());
    cr_assert_eq(dc_st_count(f), 1);
    const dc_st_tensor_t *t = dc_st_tensor(f, 0);
    cr_assert_str_eq(t->name, "attn0");
    cr_assert_eq(t->dtype, DC_DTYPE_F32);
    cr_assert_eq(t->ndim, 4);
    cr_assert_eq(t->shape[3], 3);
    cr_assert_eq(t->nelems, 6);
    cr_assert_eq(t->begin, 0);
    cr_assert_eq(t->end, 24);
    cr_assert_eq(dc_st_data_offset(f), 80);
    cr_assert(memcmp(dc_st_data(f, t), attn_data, 24) == 0);
    cr_assert_null(dc_st_metadata(f));
    cr_assert_eq(dc_st_find(f, "attn0"), t);
    cr_assert_null(dc_st_find(f, "attn"));
    size_t hl;
    cr_assert_eq(dc_st_header_raw(f, &hl), (const uint8_t *)golden_attn0);
    cr_assert_eq(hl, 80);
    cr_assert_eq(dc_st_file_size(f), glen);
    dc_st_close(f);

    /* the mixed file from disk: scalar, empty tensor, metadata */
    char p[512];
    path_of(p, sizeof(p), "mixed.safetensors");
    dc_test_spit(p, golden_mixed, sizeof(golden_mixed) - 1);
    cr_assert_eq(dc_st_open(p, DC_ST_READ, &f), DC_OK, "%s", dc_last_error());
    cr_assert_str_eq(dc_st_path(f), p);
    cr_assert_eq(dc_st_count(f), 3);
    cr_assert_str_eq(dc_st_tensor(f, 0)->name, "pos");
    const dc_st_tensor_t *s = dc_st_tensor(f, 1);
    cr_assert_str_eq(s->name, "s");
    cr_assert_eq(s->ndim, 0);
    cr_assert_eq(s->nelems, 1);
    cr_assert_eq(dc_st_data(f, s)[1], 0x3f);
    const dc_st_tensor_t *e = dc_st_find(f, "e");
    cr_assert_not_null(e);
    cr_assert_eq(e->nelems, 0);
    cr_assert_eq(e->begin, e->end);
    cr_assert_str_eq(dc_st_metadata(f), "{\"format\":\"pt\"}");
    cr_assert_null(dc_st_tensor(f, 3));
    dc_st_close(f);
}

/* ---- every dtype, odd shapes, byte-exact round trips ------------------------ */

Test(safetensors, every_dtype_round_trip)
{
    dc_st_desc_t d[DC_DTYPE_COUNT + 3];
    char names[DC_DTYPE_COUNT + 3][32];
    size_t n = 0;
    uint64_t total = 0;
    for (int i = 0; i < DC_DTYPE_COUNT; i++, n++) {
        snprintf(names[n], sizeof(names[n]), "t.%s", dc_dtype_name((dc_dtype_t)i));
        d[n] = (dc_st_desc_t){.name = names[n], .dtype = (dc_dtype_t)i, .ndim = 2,
                              .shape = {3, (uint64_t)(i % 4) + 1}};
        total += 3 * ((uint64_t)(i % 4) + 1) * dc_dtype_size((dc_dtype_t)i);
    }
    snprintf(names[n], 32, "scalar.f64");
    d[n] = (dc_st_desc_t){.name = names[n], .dtype = DC_DTYPE_F64, .ndim = 0};
    n++;
    total += 8;
    snprintf(names[n], 32, "empty.bf16");
    d[n] = (dc_st_desc_t){.name = names[n], .dtype = DC_DTYPE_BF16, .ndim = 3,
                          .shape = {4, 0, 2}};
    n++;
    snprintf(names[n], 32, "odd.u16");
    d[n] = (dc_st_desc_t){.name = names[n], .dtype = DC_DTYPE_U16, .ndim = 8,
                          .shape = {1, 1, 1, 1, 1, 1, 1, 7}};
    n++;
    total += 14;

    uint8_t *data = malloc(total);
    for (uint64_t i = 0; i < total; i++)
        data[i] = (uint8_t)(i * 131 + 7);
    char p[512], q[512];
    path_of(p, sizeof(p), "all.safetensors");
    write_with_writer(p, d, n, "{\"a\":\"1\",\"b\":\"x y\"}", data, total);

    dc_st_file_t *f = NULL;
    cr_assert_eq(dc_st_open(p, DC_ST_READ, &f), DC_OK, "%s", dc_last_error());
    cr_assert_eq(dc_st_count(f), n);
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        const dc_st_tensor_t *t = dc_st_tensor(f, i);
        cr_assert_str_eq(t->name, d[i].name);
        cr_assert_eq(t->dtype, d[i].dtype);
        cr_assert_eq(t->ndim, d[i].ndim);
        uint64_t ne = 1;
        for (int k = 0; k < t->ndim; k++) {
            cr_assert_eq(t->shape[k], d[i].shape[k]);
            ne *= d[i].shape[k];
        }
        cr_assert_eq(t->nelems, ne);
        cr_assert_eq(t->begin, off);
        off += ne * dc_dtype_size(t->dtype);
        cr_assert_eq(t->end, off);
        cr_assert(memcmp(dc_st_data(f, t), data + t->begin, t->end - t->begin) == 0);
        cr_assert_eq(dc_st_find(f, t->name), t);
    }
    cr_assert_eq(dc_st_data_offset(f) % 8, 0, "data region not 8-byte aligned");
    cr_assert_str_eq(dc_st_metadata(f), "{\"a\":\"1\",\"b\":\"x y\"}");

    /* header_build reproduces the header; create_raw + data reproduces the file */
    uint8_t *hdr;
    size_t hl, rl;
    uint64_t ds;
    cr_assert_eq(dc_st_header_build(d, n, "{\"a\":\"1\",\"b\":\"x y\"}", &hdr, &hl, &ds), DC_OK);
    const uint8_t *raw = dc_st_header_raw(f, &rl);
    cr_assert_eq(hl, rl);
    cr_assert(memcmp(hdr, raw, hl) == 0);
    cr_assert_eq(ds, total);
    free(hdr);

    path_of(q, sizeof(q), "copy.safetensors");
    dc_st_writer_t *w;
    cr_assert_eq(dc_st_writer_create_raw(q, raw, rl, total, &w), DC_OK, "%s", dc_last_error());
    cr_assert_eq(dc_st_writer_write(w, dc_st_map(f) + rl, total), DC_OK);
    cr_assert_eq(dc_st_writer_finish(w), DC_OK);
    size_t l1, l2;
    uint8_t *b1 = dc_test_slurp(p, &l1), *b2 = dc_test_slurp(q, &l2);
    cr_assert_eq(l1, l2);
    cr_assert(memcmp(b1, b2, l1) == 0);
    free(b1);
    free(b2);
    dc_st_close(f);
    free(data);
}

Test(safetensors, names_are_escaped_like_serde_json)
{
    const char *nm = "a\"b\\c\nd\x01\x1f/\xc3\xa9\x7f";
    dc_st_desc_t d = {.name = nm, .dtype = DC_DTYPE_U8, .ndim = 1, .shape = {1}};
    uint8_t *hdr;
    size_t hl;
    cr_assert_eq(dc_st_header_build(&d, 1, "{\"k\\t\":\"v\\u0002\"}", &hdr, &hl, NULL), DC_OK,
                 "%s", dc_last_error());
    const char *want = "{\"__metadata__\":{\"k\\t\":\"v\\u0002\"},"
                       "\"a\\\"b\\\\c\\nd\\u0001\\u001f/\xc3\xa9\x7f\":{\"dtype\":\"U8\","
                       "\"shape\":[1],\"data_offsets\":[0,1]}}";
    cr_assert(hl >= 8 + strlen(want));
    cr_assert(memcmp(hdr + 8, want, strlen(want)) == 0, "%.*s", (int)(hl - 8), hdr + 8);
    for (size_t i = 8 + strlen(want); i < hl; i++)
        cr_assert_eq(hdr[i], ' ');
    cr_assert_eq(hl % 8, 0);

    uint8_t img[512];
    memcpy(img, hdr, hl);
    img[hl] = 42;
    dc_st_file_t *f;
    cr_assert_eq(dc_st_open_mem(img, hl + 1, NULL, &f), DC_OK, "%s", dc_last_error());
    cr_assert_str_eq(dc_st_tensor(f, 0)->name, nm);
    cr_assert_str_eq(dc_st_metadata(f), "{\"k\\t\":\"v\\u0002\"}");
    dc_st_close(f);
    free(hdr);
}

Test(safetensors, reader_sorts_by_offset_and_accepts_any_key_order)
{
    /* b is listed first but lies second; an empty tensor sits at offset 4 */
    const char js[] = "{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]},"
                      "\"z\":{\"dtype\":\"I32\",\"shape\":[0],\"data_offsets\":[4,4]},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    uint8_t img[256];
    size_t n = sizeof(js) - 1;
    dc_store_le64(img, n);
    memcpy(img + 8, js, n);
    memcpy(img + 8 + n, "ABCDEF", 6);
    dc_st_file_t *f;
    cr_assert_eq(dc_st_open_mem(img, 8 + n + 6, "o", &f), DC_OK, "%s", dc_last_error());
    cr_assert_str_eq(dc_st_tensor(f, 0)->name, "a");
    cr_assert_str_eq(dc_st_tensor(f, 1)->name, "z");
    cr_assert_str_eq(dc_st_tensor(f, 2)->name, "b");
    cr_assert(memcmp(dc_st_data(f, dc_st_find(f, "b")), "EF", 2) == 0);
    dc_st_close(f);
}

/* ---- hostile headers ---------------------------------------------------------- */

/* Build an image: length prefix (n or the real length) + json + data_len bytes. */
static void expect_bad(const char *label, const char *json, uint64_t n_override, size_t data_len,
                       const char *needle)
{
    size_t jl = strlen(json);
    size_t len = 8 + jl + data_len;
    uint8_t *img = calloc(1, len + 1);
    dc_store_le64(img, n_override ? n_override : jl);
    memcpy(img + 8, json, jl);
    char p[512];
    path_of(p, sizeof(p), "bad.safetensors");
    dc_test_spit(p, img, len);
    dc_st_file_t *f = (dc_st_file_t *)(uintptr_t)0x1;
    dc_status_t st = dc_st_open(p, DC_ST_READ, &f);
    cr_assert_eq(st, DC_ERR_FORMAT, "%s: status %d (%s)", label, st, dc_last_error());
    cr_assert_eq(f, (dc_st_file_t *)(uintptr_t)0x1, "%s: *out touched on failure", label);
    cr_assert(strstr(dc_last_error(), p) != NULL, "%s: message lacks the path: %s", label,
              dc_last_error());
    cr_assert(strstr(dc_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", label,
              dc_last_error(), needle);
    /* the same through the memory entry point */
    cr_assert_eq(dc_st_open_mem(img, len, "m", &f), DC_ERR_FORMAT, "%s (mem)", label);
    free(img);
}

#define T1(name, dt, shape, off) "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":" off "}"

Test(safetensors, rejects_corrupt_headers)
{
    expect_bad("bad json", "{\"a\":{\"dtype\":\"F32\"", 0, 0, "JSON");
    expect_bad("not an object", "[1,2]   ", 0, 0, "'{'");
    expect_bad("garbage after", "{} x", 0, 0, "JSON");
    expect_bad("huge length", "{}      ", 1ull << 62, 0, "exceeds the limit");
    expect_bad("over limit", "{}      ", DC_ST_MAX_HEADER + 1ull, 0, "exceeds the limit");
    expect_bad("past eof", "{}      ", 4096, 0, "past the end");
    expect_bad("unknown dtype", "{" T1("a", "F128", "[1]", "[0,16]") "}", 0, 16, "unknown dtype");
    expect_bad("lowercase dtype", "{" T1("a", "f32", "[1]", "[0,4]") "}", 0, 4, "unknown dtype");
    expect_bad("wrong size", "{" T1("a", "F32", "[3]", "[0,8]") "}", 0, 8, "do not hold");
    expect_bad("end before begin", "{" T1("a", "U8", "[0]", "[8,0]") "}", 0, 8, "do not hold");
    expect_bad("out of bounds", "{" T1("a", "F32", "[2]", "[0,8]") "}", 0, 4, "beyond");
    expect_bad("overlap",
               "{" T1("a", "F32", "[2]", "[0,8]") "," T1("b", "F32", "[2]", "[4,12]") "}", 0, 12,
               "overlaps");
    expect_bad("gap", "{" T1("a", "F32", "[1]", "[0,4]") "," T1("b", "F32", "[1]", "[8,12]") "}",
               0, 12, "gap");
    expect_bad("not from 0", "{" T1("a", "F32", "[1]", "[4,8]") "}", 0, 8, "gap");
    expect_bad("trailing data", "{" T1("a", "F32", "[1]", "[0,4]") "}", 0, 5, "trailing");
    expect_bad("truncated data", "{" T1("a", "F32", "[2]", "[0,8]") "}", 0, 7, "beyond");
    expect_bad("duplicate", "{" T1("a", "U8", "[1]", "[0,1]") "," T1("a", "U8", "[1]", "[1,2]") "}",
               0, 2, "duplicate");
    expect_bad("meta not strings", "{\"__metadata__\":{\"a\":1}}", 0, 0, "not a string");
    expect_bad("meta not object", "{\"__metadata__\":\"x\"}", 0, 0, "not a JSON object");
    expect_bad("negative dim", "{" T1("a", "U8", "[-1]", "[0,0]") "}", 0, 0, "shape[0]");
    expect_bad("float dim", "{" T1("a", "U8", "[1.0]", "[0,1]") "}", 0, 1, "shape[0]");
    expect_bad("nine dims", "{" T1("a", "U8", "[1,1,1,1,1,1,1,1,1]", "[0,1]") "}", 0, 1,
               "dimensions");
    expect_bad("three offsets", "{" T1("a", "U8", "[1]", "[0,1,2]") "}", 0, 1, "data_offsets");
    expect_bad("string offset", "{" T1("a", "U8", "[1]", "[\"0\",1]") "}", 0, 1, "data_offsets");
    expect_bad("elem overflow", "{" T1("a", "U8", "[4294967296,4294967296]", "[0,1]") "}", 0, 1,
               "overflows");
    expect_bad("byte overflow", "{" T1("a", "F64", "[2305843009213693952,8]", "[0,1]") "}", 0, 1,
               "overflows");
    expect_bad("huge int", "{" T1("a", "U8", "[1]", "[0,99999999999999999999]") "}", 0, 1, "JSON");
    expect_bad("entry not object", "{\"a\":[1]}", 0, 0, "not a JSON object");
    expect_bad("missing dtype", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 0, 1, "dtype");
    expect_bad("bad utf8 name", "{\"\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
               0, 1, "JSON");
}

Test(safetensors, rejects_nul_in_header)
{
    static const uint8_t img[] = "\x08\0\0\0\0\0\0\0{}\0     ";
    dc_st_file_t *f;
    cr_assert_eq(dc_st_open_mem(img, sizeof(img) - 1, "nul", &f), DC_ERR_FORMAT);
    cr_assert(strstr(dc_last_error(), "nul: header JSON") != NULL, "%s", dc_last_error());
}

Test(safetensors, rejects_short_and_missing_files)
{
    char p[512];
    path_of(p, sizeof(p), "short.safetensors");
    dc_test_spit(p, "\x02\0\0", 3);
    dc_st_file_t *f;
    cr_assert_eq(dc_st_open(p, DC_ST_READ, &f), DC_ERR_FORMAT);
    cr_assert(strstr(dc_last_error(), "too short") != NULL, "%s", dc_last_error());
    dc_test_spit(p, "", 0);
    cr_assert_eq(dc_st_open(p, DC_ST_READ, &f), DC_ERR_FORMAT);
    path_of(p, sizeof(p), "missing.safetensors");
    cr_assert_eq(dc_st_open(p, DC_ST_READ, &f), DC_ERR_NOT_FOUND);
    cr_assert(strstr(dc_last_error(), p) != NULL);
    cr_assert_eq(dc_st_open(tmpdir, DC_ST_READ, &f), DC_ERR_FORMAT, "%s", dc_last_error());
}

/* ---- writer contract ----------------------------------------------------------- */

Test(safetensors, writer_checks_sizes_and_leaves_nothing_on_failure)
{
    char p[512];
    path_of(p, sizeof(p), "w.safetensors");
    dc_st_desc_t d = {.name = "x", .dtype = DC_DTYPE_I16, .ndim = 1, .shape = {3}};
    dc_st_writer_t *w;

    cr_assert_eq(dc_st_writer_create(p, &d, 1, NULL, &w), DC_OK);
    cr_assert_eq(dc_st_writer_write(w, "abcd", 4), DC_OK);
    cr_assert_eq(dc_st_writer_finish(w), DC_ERR_INVALID, "short file accepted");
    cr_assert(strstr(dc_last_error(), "4 data bytes written") != NULL, "%s", dc_last_error());
    cr_assert_eq(count_dir_entries(), 0);

    cr_assert_eq(dc_st_writer_create(p, &d, 1, NULL, &w), DC_OK);
    cr_assert_eq(dc_st_writer_write(w, "abcdefg", 7), DC_ERR_INVALID);
    cr_assert_neq(dc_st_writer_finish(w), DC_OK);
    cr_assert_eq(count_dir_entries(), 0);

    cr_assert_eq(dc_st_writer_create(p, &d, 1, NULL, &w), DC_OK);
    cr_assert_eq(dc_st_writer_write(w, "abcdef", 6), DC_OK);
    dc_st_writer_abort(w);
    cr_assert_eq(count_dir_entries(), 0);

    /* an existing file is replaced only on success */
    dc_test_spit(p, "old", 3);
    cr_assert_eq(dc_st_writer_create(p, &d, 1, NULL, &w), DC_OK);
    dc_st_writer_abort(w);
    size_t len;
    uint8_t *b = dc_test_slurp(p, &len);
    cr_assert_eq(len, 3);
    free(b);
    cr_assert_eq(dc_st_writer_create(p, &d, 1, NULL, &w), DC_OK);
    cr_assert_eq(dc_st_writer_write(w, "abcdef", 6), DC_OK);
    cr_assert_eq(dc_st_writer_finish(w), DC_OK);
    b = dc_test_slurp(p, &len);
    cr_assert_eq(len, 8 + 56 + 6); /* 55-byte JSON + 1 space */
    cr_assert(memcmp(b + len - 6, "abcdef", 6) == 0);
    free(b);
    cr_assert_eq(count_dir_entries(), 1);
    struct stat sb;
    cr_assert_eq(stat(p, &sb), 0);
    cr_assert((sb.st_mode & 0444) != 0);
}

Test(safetensors, writer_rejects_bad_descriptors)
{
    char p[512];
    path_of(p, sizeof(p), "w.safetensors");
    dc_st_writer_t *w;
    dc_st_desc_t dup[2] = {{.name = "a", .dtype = DC_DTYPE_U8, .ndim = 1, .shape = {1}},
                           {.name = "a", .dtype = DC_DTYPE_U8, .ndim = 1, .shape = {1}}};
    cr_assert_eq(dc_st_writer_create(p, dup, 2, NULL, &w), DC_ERR_INVALID);
    cr_assert(strstr(dc_last_error(), "duplicate") != NULL, "%s", dc_last_error());
    dc_st_desc_t bad = {.name = "b\xff", .dtype = DC_DTYPE_U8, .ndim = 1, .shape = {1}};
    cr_assert_eq(dc_st_writer_create(p, &bad, 1, NULL, &w), DC_ERR_INVALID);
    dc_st_desc_t meta = {.name = "__metadata__", .dtype = DC_DTYPE_U8, .ndim = 0};
    cr_assert_eq(dc_st_writer_create(p, &meta, 1, NULL, &w), DC_ERR_INVALID);
    dc_st_desc_t dt = {.name = "c", .dtype = DC_DTYPE_COUNT, .ndim = 0};
    cr_assert_eq(dc_st_writer_create(p, &dt, 1, NULL, &w), DC_ERR_INVALID);
    dc_st_desc_t big = {.name = "d", .dtype = DC_DTYPE_F64, .ndim = 2,
                        .shape = {1ull << 40, 1ull << 30}};
    cr_assert_eq(dc_st_writer_create(p, &big, 1, NULL, &w), DC_ERR_INVALID);
    dc_st_desc_t ok = {.name = "e", .dtype = DC_DTYPE_U8, .ndim = 0};
    cr_assert_eq(dc_st_writer_create(p, &ok, 1, "{\"a\":1}", &w), DC_ERR_INVALID);
    cr_assert_eq(dc_st_writer_create(p, &ok, 1, "[\"a\"]", &w), DC_ERR_INVALID);
    cr_assert_eq(dc_st_writer_create(p, &ok, 1, "{\"a\":", &w), DC_ERR_INVALID);
    cr_assert_eq(count_dir_entries(), 0);

    /* raw header must validate against the data size */
    cr_assert_eq(dc_st_writer_create_raw(p, golden_attn, 72, 23, &w), DC_ERR_FORMAT);
    cr_assert_eq(dc_st_writer_create_raw(p, golden_attn, 71, 24, &w), DC_ERR_FORMAT);
    cr_assert_eq(count_dir_entries(), 0);

    cr_assert_eq(dc_st_writer_create("/proc/no/such/dir/x.safetensors", &ok, 1, NULL, &w),
                 DC_ERR_IO);
    cr_assert(strstr(dc_last_error(), "/proc/no/such/dir/x.safetensors") != NULL, "%s",
              dc_last_error());
}

Test(safetensors, writable_mapping_and_sync)
{
    char p[512];
    path_of(p, sizeof(p), "rw.safetensors");
    dc_test_spit(p, golden_attn, sizeof(golden_attn) - 1);
    dc_st_file_t *f;
    cr_assert_eq(dc_st_open(p, DC_ST_WRITABLE, &f), DC_OK, "%s", dc_last_error());
    uint8_t *d = dc_st_data(f, dc_st_tensor(f, 0));
    d[0] = 0x5a;
    cr_assert_eq(dc_st_sync(f), DC_OK);
    dc_st_close(f);
    cr_assert_eq(dc_st_open(p, DC_ST_READ, &f), DC_OK);
    cr_assert_eq(dc_st_data(f, dc_st_tensor(f, 0))[0], 0x5a);
    cr_assert_eq(dc_st_sync(f), DC_ERR_INVALID);
    dc_st_close(f);
}

Test(safetensors, dtypes)
{
    dc_dtype_t dt;
    cr_assert_eq(dc_dtype_parse("bf16", &dt), DC_OK);
    cr_assert_eq(dt, DC_DTYPE_BF16);
    cr_assert_eq(dc_dtype_parse("F8_E4M3", &dt), DC_OK);
    cr_assert_eq(dt, DC_DTYPE_F8_E4M3);
    cr_assert_eq(dc_dtype_parse("f8_e5m2", &dt), DC_OK);
    cr_assert_eq(dt, DC_DTYPE_F8_E5M2);
    cr_assert_eq(dc_dtype_parse("bool", &dt), DC_OK);
    cr_assert_eq(dt, DC_DTYPE_BOOL);
    cr_assert_eq(dc_dtype_parse("F128", &dt), DC_ERR_FORMAT);
    cr_assert_eq(dc_dtype_parse("", &dt), DC_ERR_FORMAT);
    cr_assert_eq(dc_dtype_parse("bfloat16bfloat16bfloat16", &dt), DC_ERR_FORMAT);
    for (int i = 0; i < DC_DTYPE_COUNT; i++) {
        cr_assert_eq(dc_dtype_parse(dc_dtype_name((dc_dtype_t)i), &dt), DC_OK);
        cr_assert_eq((int)dt, i);
        size_t s = dc_dtype_size((dc_dtype_t)i);
        cr_assert(s == 1 || s == 2 || s == 4 || s == 8);
    }
    cr_assert_eq(dc_dtype_size(DC_DTYPE_BF16), 2);
    cr_assert_eq(dc_dtype_size(DC_DTYPE_U64), 8);
    cr_assert_eq(dc_dtype_size(DC_DTYPE_F8_E4M3), 1);
    cr_assert_eq(dc_dtype_size(DC_DTYPE_COUNT), 0);
}
