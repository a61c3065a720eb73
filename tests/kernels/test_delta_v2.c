/*
 * test_delta_v2.c - delta format version 2 (kernels/delta.h): a version-1
 * file still applies; the MoE and small dense layouts of gen round-trip
 * with little overhead; hostile records (truncated varints, lengths past
 * the end, CRC mismatches, chunk indexes out of range, a record that needs
 * a base tensor the base lacks, bad encodings, counts that disagree, an
 * unknown version) are refused with a clear error, never accepted.
 */
#include "testenv.h"
#include "testkit_fs.h"
#include <criterion/criterion.h>

#include "kernels/codec.h"
#include "kernels/delta.h"
#include "kernels/entropy.h"
#include "kernels/safetensors.h"
#include "testkit/gen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A file of tests/kernels/data/. */
static uint8_t *fixture(const char *name, size_t *len)
{
    char rel[256];
    snprintf(rel, sizeof(rel), "tests/kernels/data/%s", name);
    return dc_test_slurp_src(rel, len);
}

static dc_status_t apply(const uint8_t *b, size_t bl, const uint8_t *d, size_t dl, uint8_t **out,
                         size_t *ol)
{
    uint64_t ts = 0;
    dc_status_t st = dc_delta_target_size(d, dl, &ts);
    if (st != DC_OK)
        return st;
    *out = malloc(ts ? ts : 1);
    dc_delta_opts_t o = {.size = sizeof(o), .threads = 2};
    return dc_delta_apply_buffers(b, bl, d, dl, &o, *out, ts, ol, NULL);
}

Test(delta_v2, version1_fixture_still_applies)
{
    size_t bl, nl, dl, ol;
    uint8_t *b = fixture("v1_base.safetensors", &bl), *n = fixture("v1_next.safetensors", &nl),
            *d = fixture("v1.delta", &dl), *out = NULL;
    cr_assert_eq(dc_load_le32(d + 8), 1);
    cr_assert_eq(apply(b, bl, d, dl, &out, &ol), DC_OK, "%s", dc_last_error());
    cr_assert(ol == nl && memcmp(out, n, nl) == 0);
    /* the reader hands out its 96-byte frames as they are */
    dc_delta_reader_t r;
    cr_assert_eq(dc_delta_reader_init(&r, d, dl), DC_OK);
    unsigned frames = 0, put = 0;
    for (;;) {
        dc_frame_hdr_t h;
        const uint8_t *p;
        int done;
        cr_assert_eq(dc_delta_reader_next(&r, &h, &p, &done), DC_OK, "%s", dc_last_error());
        if (done)
            break;
        cr_assert_eq(h.no_digest, 0);
        cr_assert_eq(dc_frame_check_payload(&h, p, h.payload_len), DC_OK);
        frames++;
        put += dc_enc_kind(h.encoding) == DC_ENC_PUT_DENSE;
    }
    dc_delta_reader_free(&r);
    cr_assert_eq(frames, 7);
    cr_assert_eq(put, 1);
    /* the v2 writer's delta of the same pair: smaller, and exact */
    void *d2;
    size_t d2l;
    dc_delta_opts_t o = {.size = sizeof(o), .chunk_size = 512, .threads = 1};
    cr_assert_eq(dc_delta_diff_buffers(b, bl, n, nl, &o, &d2, &d2l, NULL), DC_OK);
    cr_assert_eq(dc_load_le32((uint8_t *)d2 + 8), 2);
    cr_assert_lt(d2l, dl);
    free(out);
    cr_assert_eq(apply(b, bl, d2, d2l, &out, &ol), DC_OK, "%s", dc_last_error());
    cr_assert(ol == nl && memcmp(out, n, nl) == 0);
    /* a version this build does not know */
    uint8_t *bad = malloc(dl);
    memcpy(bad, d, dl);
    dc_store_le32(bad + 8, 3);
    dc_store_le32(bad + 124, dc_crc32c(0, bad, 124));
    free(out);
    out = NULL;
    cr_assert_eq(apply(b, bl, bad, dl, &out, &ol), DC_ERR_FORMAT);
    cr_assert(strstr(dc_last_error(), "version 3 is not supported by this build (supports 1-2)"),
              "%s", dc_last_error());
    free(bad);
    free(out);
    dc_free(d2);
    free(b);
    free(n);
    free(d);
}

/* gen's moe layout (E experts; 0: dense with biases) at 1% change: exact
 * round trip, and the delta's overhead (all but payload) a small share. */
static void moe_roundtrip(unsigned experts, uint64_t params, double max_share)
{
    char dir[] = "/tmp/dc_v2_XXXXXX", bp[64], np[64];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(bp, sizeof(bp), "%s/b.st", dir);
    snprintf(np, sizeof(np), "%s/n.st", dir);
    dc_gen_opts_t go = {.params = params,
                        .change_rate = 0.01,
                        .seed = 5,
                        .dtype = DC_DTYPE_BF16,
                        .threads = 2,
                        .layout = DC_GEN_LAYOUT_MOE,
                        .experts = experts};
    dc_gen_result_t gr;
    cr_assert_eq(dc_gen_write(&go, bp, np, &gr), DC_OK, "%s", dc_last_error());
    if (experts)
        cr_assert_gt(gr.tensors, 48u * 3 * experts);
    size_t bl, nl, ol;
    uint8_t *b = dc_test_slurp(bp, &bl), *n = dc_test_slurp(np, &nl), *out = NULL;
    unlink(bp);
    unlink(np);
    rmdir(dir);
    void *d;
    size_t dl;
    dc_delta_stats_t s = {.size = sizeof(s)};
    dc_delta_opts_t o = {.size = sizeof(o), .threads = 2};
    cr_assert_eq(dc_delta_diff_buffers(b, bl, n, nl, &o, &d, &dl, &s), DC_OK);
    cr_assert_eq(s.delta_bytes, dl);
    double share = (double)(dl - s.payload_bytes) / (double)s.payload_bytes;
    cr_log_info("moe E=%u: %zu tensors, %llu frames, payload %llu, overhead %zu (%.3f%%)", experts,
                gr.tensors, (unsigned long long)s.frames, (unsigned long long)s.payload_bytes,
                dl - (size_t)s.payload_bytes, 100 * share);
    /* v1 paid 96 bytes a frame and the whole target header: > 50% here */
    cr_assert_lt(share, max_share, "overhead %.4f of the payload", share);
    cr_assert_eq(apply(b, bl, d, dl, &out, &ol), DC_OK, "%s", dc_last_error());
    cr_assert(ol == nl && memcmp(out, n, nl) == 0);
    /* records with every digest too */
    uint64_t dmin = dc_delta_digest_min;
    dc_delta_digest_min = 0;
    void *d2;
    size_t d2l;
    cr_assert_eq(dc_delta_diff_buffers(b, bl, n, nl, &o, &d2, &d2l, NULL), DC_OK);
    dc_delta_digest_min = dmin;
    /* chunks of 1 MiB and more (embedding, lm_head) carry one already */
    cr_assert(d2l > dl && d2l <= dl + 16 * s.frames, "%zu vs %zu", d2l, dl);
    free(out);
    out = NULL;
    cr_assert_eq(apply(b, bl, d2, d2l, &out, &ol), DC_OK, "%s", dc_last_error());
    cr_assert(ol == nl && memcmp(out, n, nl) == 0);
    dc_free(d2);
    dc_free(d);
    free(out);
    free(b);
    free(n);
}

Test(delta_v2, moe_layout_roundtrips_with_little_overhead)
{
    moe_roundtrip(32, 20000000, 0.05);
}

Test(delta_v2, small_dense_model_of_norms_and_biases_roundtrips)
{
    moe_roundtrip(0, 3000000, 0.05);
}

/* --- hostile records -------------------------------------------------------- */

/* base: a BF16[300] (3 chunks of 128 at chunk size 256), b F32[7] (1 chunk) */
static const char JSON2[] = "{\"a\":{\"dtype\":\"BF16\",\"shape\":[300],\"data_offsets\":[0,600]},"
                            "\"b\":{\"dtype\":\"F32\",\"shape\":[7],\"data_offsets\":[600,628]}}";
static const char JSON1[] = "{\"a\":{\"dtype\":\"BF16\",\"shape\":[300],\"data_offsets\":[0,600]},"
                            "\"c\":{\"dtype\":\"U8\",\"shape\":[28],\"data_offsets\":[600,628]}}";

static uint8_t *ckpt(const char *json, uint8_t salt, size_t *len)
{
    size_t jl = strlen(json), hl = (jl + 7) & ~(size_t)7;
    uint8_t *b = malloc(8 + hl + 628);
    dc_store_le64(b, hl);
    memcpy(b + 8, json, jl);
    memset(b + 8 + jl, ' ', hl - jl);
    for (size_t i = 0; i < 628; i++)
        b[8 + hl + i] = (uint8_t)(i * 7 + 1);
    b[8 + hl + 3] ^= salt;   /* chunk 0 of a */
    b[8 + hl + 601] ^= salt; /* b */
    *len = 8 + hl + 628;
    return b;
}

typedef struct {
    uint64_t skip, encf, len; /* encf: the record's one-byte code */
    const uint8_t *pay;
} rec_t;

/* A record's encoding byte (delta.h): d | kind << 1 | p << 4 | v << 6 */
static uint64_t code(uint16_t enc, unsigned d)
{
    unsigned pm = dc_enc_pos_method(enc);
    return d | dc_enc_kind(enc) << 1 |
           (pm == DC_ENT_GOLOMB ? 1u : pm == DC_ENT_GAPS ? 2u : 0u) << 4 |
           dc_enc_val_method(enc) << 6;
}

/* One group of n records, both CRCs right; returns its size. */
static size_t group(uint8_t *o, const rec_t *r, unsigned n)
{
    size_t k = 0;
    uint64_t vals[1 + 3 * 16];
    unsigned nv = 0;
    vals[nv++] = n;
    for (unsigned i = 0; i < n; i++) {
        vals[nv++] = r[i].skip;
        vals[nv++] = r[i].encf;
        vals[nv++] = r[i].len;
    }
    for (unsigned i = 0; i < nv; i++) {
        uint64_t v = vals[i];
        if (i % 3 == 2) { /* the encoding: one byte */
            o[k++] = (uint8_t)v;
            continue;
        }
        while (v >= 0x80) {
            o[k++] = (uint8_t)(v | 0x80);
            v >>= 7;
        }
        o[k++] = (uint8_t)v;
    }
    dc_store_le32(o + k, dc_crc32c(0, o, k));
    k += 4;
    size_t p0 = k;
    for (unsigned i = 0; i < n; i++) {
        memcpy(o + k, r[i].pay, r[i].len);
        k += r[i].len;
    }
    dc_store_le32(o + k, dc_crc32c(0, o + p0, k - p0));
    return k + 4;
}

/* A delta with `d`'s header (and stored target header) and these groups. */
static uint8_t *craft(const uint8_t *d, const uint8_t *g, size_t gl, uint64_t count, size_t *ol)
{
    size_t h = DC_DELTA_HEADER_SIZE + (size_t)dc_load_le64(d + 100);
    uint8_t *o = malloc(h + gl + 1);
    memcpy(o, d, h);
    memcpy(o + h, g, gl);
    dc_store_le64(o + 80, count);
    dc_store_le64(o + 88, gl);
    dc_store_le32(o + 124, dc_crc32c(0, o, 124));
    *ol = h + gl;
    return o;
}

static void refused(const uint8_t *b, size_t bl, const uint8_t *d, size_t dl, dc_status_t want,
                    const char *msg)
{
    uint8_t *out = NULL;
    size_t ol;
    dc_status_t st = apply(b, bl, d, dl, &out, &ol);
    cr_assert_eq(st, want, "want %d got %d: %s", want, st, dc_last_error());
    cr_assert(strstr(dc_last_error(), msg), "'%s' lacks '%s'", dc_last_error(), msg);
    free(out);
}

Test(delta_v2, hostile_records_are_refused)
{
    size_t bl, nl, b1l;
    uint8_t *b = ckpt(JSON2, 0, &bl), *n = ckpt(JSON2, 0x41, &nl), *b1 = ckpt(JSON1, 0, &b1l);
    dc_delta_opts_t o = {.size = sizeof(o), .chunk_size = 256, .threads = 1};
    void *dv;
    size_t dl;
    cr_assert_eq(dc_delta_diff_buffers(b, bl, n, nl, &o, &dv, &dl, NULL), DC_OK);
    const uint8_t *d = dv;
    cr_assert_eq(dc_load_le32(d + 12), DC_DELTA_F_TH_BASE);
    /* PUT_DENSE payloads of chunk 0 of a (g 0) and of b (g 3) */
    dc_codec_t *c;
    cr_assert_eq(dc_codec_create(4096, &c), DC_OK);
    size_t hl = 8 + (size_t)dc_load_le64(n);
    uint8_t pa[1024], pb[1024];
    size_t la, lb;
    uint16_t ea, eb;
    cr_assert_eq(dc_codec_encode(c, NULL, n + hl, 128, 2, pa, sizeof(pa), &la, &ea, NULL), DC_OK);
    cr_assert_eq(dc_codec_encode(c, NULL, n + hl + 600, 7, 4, pb, sizeof(pb), &lb, &eb, NULL),
                 DC_OK);
    dc_codec_free(c);
    cr_assert_eq(dc_enc_kind(ea), DC_ENC_PUT_DENSE);
    uint8_t g[4096];
    size_t gl, xl, ol;
    uint8_t *x, *out = NULL;

    /* the crafting is right: two records in a group apply exactly */
    rec_t ok[2] = {{0, code(ea, 0), la, pa}, {2, code(eb, 0), lb, pb}};
    gl = group(g, ok, 2);
    x = craft(d, g, gl, 2, &xl);
    cr_assert_eq(apply(b, bl, x, xl, &out, &ol), DC_OK, "%s", dc_last_error());
    cr_assert(ol == nl && memcmp(out, n, nl) == 0);
    free(out);
    free(x);
    /* ... and as two groups of one */
    gl = group(g, &ok[0], 1);
    gl += group(g + gl, &ok[1], 1);
    x = craft(d, g, gl, 2, &xl);
    cr_assert_eq(apply(b, bl, x, xl, &out, &ol), DC_OK, "%s", dc_last_error());
    free(out);
    /* every truncation of it */
    for (size_t cut = 1; cut < gl; cut++) {
        uint8_t *y = craft(d, g, cut, 2, &xl);
        refused(b, bl, y, xl, DC_ERR_FORMAT, "");
        free(y);
    }
    free(x);

    /* a truncated varint */
    g[0] = 0x01;
    g[1] = 0x00;
    g[2] = 0x80;
    x = craft(d, g, 3, 1, &xl);
    refused(b, bl, x, xl, DC_ERR_FORMAT, "varint runs past the end");
    free(x);
    /* a varint longer than 64 bits, and a non-minimal one */
    memset(g, 0xff, 10);
    g[10] = 0x01;
    x = craft(d, g, 11, 1, &xl);
    refused(b, bl, x, xl, DC_ERR_FORMAT, "varint");
    free(x);
    g[0] = 0x81;
    g[1] = 0x00;
    g[2] = 0x00;
    x = craft(d, g, 3, 1, &xl);
    refused(b, bl, x, xl, DC_ERR_FORMAT, "not minimal");
    free(x);
    /* a payload length past the end (the header CRC right) */
    cr_assert_lt(la + 100, sizeof(pa));
    rec_t longr = {0, code(ea, 0), la + 100, pa};
    gl = group(g, &longr, 1);
    x = craft(d, g, gl - 60, 1, &xl);
    refused(b, bl, x, xl, DC_ERR_FORMAT, "payloads run past the end");
    free(x);
    /* group header CRC, and (n > 1) payload CRC mismatches */
    gl = group(g, ok, 2);
    g[2] ^= 0x10;
    x = craft(d, g, gl, 2, &xl);
    refused(b, bl, x, xl, DC_ERR_CORRUPT, "header CRC32C mismatch");
    free(x);
    gl = group(g, ok, 2);
    g[gl - 10] ^= 1;
    x = craft(d, g, gl, 2, &xl);
    refused(b, bl, x, xl, DC_ERR_CORRUPT, "payload CRC32C mismatch");
    free(x);
    /* a single record's payload: the payload CRC the apply checks */
    gl = group(g, ok, 1);
    g[gl - 10] ^= 1;
    x = craft(d, g, gl, 1, &xl);
    refused(b, bl, x, xl, DC_ERR_CORRUPT, "CRC32C mismatch");
    free(x);
    /* chunk index out of range (G = 4), and one that wraps around */
    rec_t far[2] = {{4, code(eb, 0), lb, pb}, {0, 0, 0, NULL}};
    gl = group(g, far, 1);
    x = craft(d, g, gl, 1, &xl);
    refused(b, bl, x, xl, DC_ERR_FORMAT, "past the target");
    free(x);
    far[0].skip = 3;
    far[1] = (rec_t){UINT64_MAX, code(eb, 0), lb, pb};
    gl = group(g, far, 2);
    x = craft(d, g, gl, 2, &xl);
    refused(b, bl, x, xl, DC_ERR_FORMAT, "past the target");
    free(x);
    /* unknown encodings: kind 0, a kind past the last, positions code 3 */
    const uint64_t encs[] = {0, 7u << 1, code(ea, 0) | 3u << 4};
    for (size_t i = 0; i < 3; i++) {
        rec_t e = {0, encs[i], la, pa};
        gl = group(g, &e, 1);
        x = craft(d, g, gl, 1, &xl);
        refused(b, bl, x, xl, DC_ERR_FORMAT, "encoding");
        free(x);
    }
    /* record counts that disagree with the header, an empty group */
    gl = group(g, ok, 2);
    x = craft(d, g, gl, 1, &xl);
    refused(b, bl, x, xl, DC_ERR_FORMAT, "more records");
    free(x);
    gl = group(g, ok, 1);
    x = craft(d, g, gl, 2, &xl);
    refused(b, bl, x, xl, DC_ERR_FORMAT, "records, header says");
    free(x);
    g[0] = 0;
    dc_store_le32(g + 1, dc_crc32c(0, g, 1));
    x = craft(d, g, 5, 1, &xl);
    refused(b, bl, x, xl, DC_ERR_FORMAT, "group of 0 records");
    free(x);
    /* a digest that does not match: refused as corrupt */
    rec_t dg = {0, code(ea, 1), la, pa};
    { /* by hand: the 16 digest bytes go after the length */
        uint8_t h2[4096];
        size_t k = 0;
        h2[k++] = 1;
        h2[k++] = 0;
        h2[k++] = (uint8_t)dg.encf;
        uint64_t v;
        for (v = la; v >= 0x80; v >>= 7)
            h2[k++] = (uint8_t)(v | 0x80);
        h2[k++] = (uint8_t)v;
        memset(h2 + k, 0x5a, 16);
        k += 16;
        dc_store_le32(h2 + k, dc_crc32c(0, h2, k));
        k += 4;
        memcpy(h2 + k, pa, la);
        dc_store_le32(h2 + k + la, dc_crc32c(0, pa, la));
        k += la + 4;
        x = craft(d, h2, k, 1, &xl);
        refused(b, bl, x, xl, DC_ERR_VERIFY, "target digest mismatch");
        free(x);
    }

    /* a base without tensor b: a record of b must be PUT_DENSE */
    void *d1v;
    size_t d1l;
    cr_assert_eq(dc_delta_diff_buffers(b1, b1l, n, nl, &o, &d1v, &d1l, NULL), DC_OK);
    cr_assert(dc_load_le32((uint8_t *)d1v + 12) != DC_DELTA_F_TH_BASE);
    rec_t xr = {3, code(dc_enc_make(DC_ENC_XOR_DENSE, 0, 0), 0), lb, pb};
    gl = group(g, &xr, 1);
    x = craft(d1v, g, gl, 1, &xl);
    refused(b1, b1l, x, xl, DC_ERR_FORMAT, "needs a base tensor the base lacks");
    free(x);
    /* ... and b's chunk may not be left out */
    gl = group(g, ok, 1);
    x = craft(d1v, g, gl, 1, &xl);
    refused(b1, b1l, x, xl, DC_ERR_FORMAT, "lacks chunk 0 of new tensor 'b'");
    free(x);
    /* the delta names its base's header: another base's is refused */
    refused(b1, b1l, d, dl, DC_ERR_WRONG_BASE, "different base");
    dc_free(d1v);
    dc_free(dv);
    free(b);
    free(b1);
    free(n);
}
