/*
 * test_digest.c - the XXH3-128 builds (base / AVX2 / AVX-512) against
 * libxxhash, the span digest at many lengths and split points, and the
 * fused kernels (diff + digest, patch + digest, codec encode/decode with
 * digests) against the separate passes they replace, on every ISA.
 */
#include <criterion/criterion.h>

#include "kernels/codec.h"
#include "kernels/digest.h"
#include "kernels/kern.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static const char *const ISAS[] = {"scalar", "avx2", "avx512"};

#define XORSHIFT_SEED 0x243F6A8885A308D3ull
#include "xorshift.h"

static void fill(uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)rnd();
}

static dc_digest_t ref(const void *p, size_t len)
{
    XXH128_hash_t h = XXH3_128bits(p, len);
    dc_digest_t d = {h.low64, h.high64};
    return d;
}

static int use_isa(const char *isa)
{
    return dc_kern_isa_supported(isa) && dc_kern_set_isa(isa) == DC_OK;
}

static void restore_isa(void)
{
    cr_assert_eq(dc_kern_set_isa(dc_kern_isa_supported("avx512") ? "avx512"
                                 : dc_kern_isa_supported("avx2") ? "avx2" : "scalar"),
                 DC_OK);
}

#define BIG (4u * 1024 * 1024 + 4096)

Test(digest, oneshot_matches_libxxhash)
{
    uint8_t *buf = malloc(BIG);
    cr_assert(buf);
    fill(buf, BIG);
    for (size_t ii = 0; ii < 3; ii++) {
        if (!use_isa(ISAS[ii]))
            continue;
        for (size_t len = 0; len <= 2200; len++)
            cr_assert(dc_digest_eq(dc_digest128(buf + 3, len), ref(buf + 3, len)),
                      "%s len %zu", ISAS[ii], len);
        const size_t big[] = {4095, 4096, 65537, 1u << 20, 4u << 20, (4u << 20) + 4093};
        for (size_t k = 0; k < sizeof(big) / sizeof(big[0]); k++)
            cr_assert(dc_digest_eq(dc_digest128(buf + 1, big[k]), ref(buf + 1, big[k])),
                      "%s len %zu", ISAS[ii], big[k]);
    }
    restore_isa();
    free(buf);
}

Test(digest, span_matches_libxxhash)
{
    uint8_t *buf = malloc(BIG);
    cr_assert(buf);
    fill(buf, BIG);
    const size_t lens[] = {0,    1,    16,   17,   128,   129,   240,   241,   255,
                           256,  1023, 1024, 1025, 1088,  2047,  2048,  2049,  16384,
                           16394, 16448, 16449, 17407, 17408, 17409, 100003, 1u << 20,
                           (4u << 20) + 77};
    for (size_t ii = 0; ii < 3; ii++) {
        if (!use_isa(ISAS[ii]))
            continue;
        for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
            size_t len = lens[li];
            dc_digest_t want = ref(buf + 5, len);
            for (int mode = 0; mode < 4; mode++) {
                dc_span_digest_t s;
                dc_span_digest_init(&s, buf + 5, len);
                size_t at = 0;
                while (mode > 0 && at < len + 100) {
                    size_t step = mode == 1 ? 1024 : mode == 2 ? 16384 : 1 + rnd() % 5000;
                    at += step;
                    dc_span_digest_advance(&s, at);
                }
                cr_assert(dc_digest_eq(dc_span_digest_final(&s), want), "%s len %zu mode %d",
                          ISAS[ii], len, mode);
            }
        }
    }
    restore_isa();
    free(buf);
}

/* a/b of n BF16-like words with ~rate changed; returns b */
static void make_pair(uint8_t *a, uint8_t *b, size_t bytes, unsigned permille)
{
    fill(a, bytes);
    memcpy(b, a, bytes);
    for (size_t i = 0; i < bytes; i++)
        if (rnd() % 1000 < permille)
            b[i] ^= (uint8_t)(1u + rnd() % 255);
}

Test(digest, diff_digest_matches_separate_passes)
{
    /* around XXH3's 240-byte and 1024-byte block edges for every width
     * (the avx512 diff hashes whole blocks with its own loads) */
    const size_t sizes[] = {0,   1,    7,    31,   100,  128,  129,   240,   241,
                            256, 1024, 1025, 8191, 8192, 8193, 40000, 300001};
    const unsigned widths[] = {1, 2, 4, 8};
    size_t maxb = 300001 * 8;
    uint8_t *a = malloc(maxb), *b = malloc(maxb), *x1 = malloc(maxb), *x2 = malloc(maxb);
    uint32_t *p1 = malloc(300001 * 4), *p2 = malloc(300001 * 4);
    cr_assert(a && b && x1 && x2 && p1 && p2);
    for (size_t ii = 0; ii < 3; ii++) {
        if (!use_isa(ISAS[ii]))
            continue;
        for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++)
            for (size_t wi = 0; wi < 4; wi++) {
                size_t n = sizes[si];
                unsigned w = widths[wi];
                make_pair(a, b, n * w, 20);
                size_t caps[] = {n, n / 4, n / 50, 0};
                for (size_t ci = 0; ci < 4; ci++) {
                    size_t cap = caps[ci];
                    size_t c1 = dc_kern_diff(a, b, n, w, p1, x1, cap);
                    dc_digest_t da, db;
                    size_t c2 = dc_kern_diff_digest(a, b, n, w, p2, x2, cap, &da, &db);
                    cr_assert_eq(c1, c2, "%s n %zu w %u cap %zu", ISAS[ii], n, w, cap);
                    size_t m = c1 < cap ? c1 : cap;
                    cr_assert(memcmp(p1, p2, m * 4) == 0);
                    cr_assert(memcmp(x1, x2, m * w) == 0);
                    cr_assert(dc_digest_eq(da, ref(a, n * w)), "%s n %zu w %u", ISAS[ii], n, w);
                    cr_assert(dc_digest_eq(db, ref(b, n * w)), "%s n %zu w %u", ISAS[ii], n, w);
                    /* one digest only */
                    dc_digest_t d1 = {0, 0};
                    cr_assert_eq(dc_kern_diff_digest(a, b, n, w, p2, x2, cap, NULL, &d1), c1);
                    cr_assert(dc_digest_eq(d1, db), "%s n %zu w %u b only", ISAS[ii], n, w);
                    cr_assert_eq(dc_kern_diff_digest(a, b, n, w, p2, x2, cap, &d1, NULL), c1);
                    cr_assert(dc_digest_eq(d1, da), "%s n %zu w %u a only", ISAS[ii], n, w);
                    cr_assert(memcmp(p1, p2, m * 4) == 0);
                    cr_assert(memcmp(x1, x2, m * w) == 0);
                }
            }
    }
    restore_isa();
    free(a), free(b), free(x1), free(x2), free(p1), free(p2);
}

Test(digest, patch_digest_all_edits)
{
    const size_t sizes[] = {1, 33, 8192, 8193, 50000, 123457};
    const unsigned widths[] = {1, 2, 4, 8};
    size_t maxb = 123457 * 8;
    uint8_t *src = malloc(maxb), *want = malloc(maxb), *got = malloc(maxb),
            *vals = malloc(maxb);
    uint32_t *pos = malloc(123457 * 4);
    cr_assert(src && want && got && vals && pos);
    for (size_t ii = 0; ii < 3; ii++) {
        if (!use_isa(ISAS[ii]))
            continue;
        for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++)
            for (size_t wi = 0; wi < 4; wi++) {
                size_t n = sizes[si];
                unsigned w = widths[wi], bytes = (unsigned)(n * w);
                fill(src, bytes);
                fill(vals, bytes);
                size_t count = 0;
                for (size_t i = 0; i < n; i++)
                    if (rnd() % 100 < 3 || i == n - 1)
                        pos[count++] = (uint32_t)i;
                for (unsigned op = DC_PATCH_COPY; op <= DC_PATCH_PUT_DENSE; op++)
                    for (int inplace = 0; inplace < 2; inplace++) {
                        memcpy(want, src, bytes);
                        switch (op) {
                        case DC_PATCH_XOR:
                            cr_assert_eq(dc_kern_xor_scatter(want, n, w, pos, vals, count),
                                         DC_OK);
                            break;
                        case DC_PATCH_PUT:
                            cr_assert_eq(dc_kern_put_scatter(want, n, w, pos, vals, count),
                                         DC_OK);
                            break;
                        case DC_PATCH_XOR_DENSE: dc_kern_xor_dense(want, vals, bytes); break;
                        case DC_PATCH_PUT_DENSE: memcpy(want, vals, bytes); break;
                        default: break;
                        }
                        dc_digest_t ds = {1, 1}, dd = {2, 2};
                        const uint8_t *s = src;
                        if (inplace) {
                            memcpy(got, src, bytes);
                            s = got;
                        } else {
                            memset(got, 0xA5, bytes);
                        }
                        cr_assert_eq(dc_kern_patch_digest(got, s, n, w, op, pos, vals, count,
                                                          &ds, &dd),
                                     DC_OK);
                        cr_assert(memcmp(got, want, bytes) == 0, "%s n %zu w %u op %u ip %d",
                                  ISAS[ii], n, w, op, inplace);
                        cr_assert(dc_digest_eq(ds, ref(src, bytes)));
                        cr_assert(dc_digest_eq(dd, ref(want, bytes)));
                    }
                /* hostile positions: dst untouched */
                if (count >= 2) {
                    uint32_t save = pos[count - 1];
                    pos[count - 1] = (uint32_t)n;
                    memset(got, 0x5A, bytes);
                    memcpy(want, got, bytes);
                    cr_assert_eq(dc_kern_patch_digest(got, src, n, w, DC_PATCH_XOR, pos, vals,
                                                      count, NULL, NULL),
                                 DC_ERR_FORMAT);
                    cr_assert(memcmp(got, want, bytes) == 0);
                    pos[count - 1] = pos[count - 2];
                    cr_assert_eq(dc_kern_patch_digest(got, src, n, w, DC_PATCH_PUT, pos, vals,
                                                      count, NULL, NULL),
                                 DC_ERR_FORMAT);
                    cr_assert(memcmp(got, want, bytes) == 0);
                    pos[count - 1] = save;
                }
            }
    }
    cr_assert_eq(dc_kern_patch_digest(got, NULL, 4, 2, DC_PATCH_XOR, pos, vals, 1, NULL, NULL),
                 DC_ERR_INVALID);
    restore_isa();
    free(src), free(want), free(got), free(vals), free(pos);
}

Test(digest, codec_digest_paths_match)
{
    /* elements x width: whole 16 KiB blocks, a short last block, one
     * block, and the 1- and 2-byte widths the interleaved decoder takes */
    const size_t shapes[][2] = {{300000, 2}, {150001, 2}, {5000, 2}, {262147, 1}, {70001, 4}};
    const unsigned rates[] = {0, 5, 30, 400, 1000};
    const size_t maxb = 600000;
    uint8_t *a = malloc(maxb), *b = malloc(maxb), *o1 = malloc(maxb), *o2 = malloc(maxb);
    size_t cap = dc_codec_payload_bound(maxb);
    uint8_t *p1 = malloc(cap), *p2 = malloc(cap);
    dc_codec_t *c;
    cr_assert(a && b && o1 && o2 && p1 && p2);
    cr_assert_eq(dc_codec_create(maxb, &c), DC_OK);
    for (size_t ii = 0; ii < 3; ii++) {
        if (!use_isa(ISAS[ii]))
            continue;
        for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++)
        for (size_t ri = 0; ri < sizeof(rates) / sizeof(rates[0]); ri++)
            for (int nobase = 0; nobase < 2; nobase++) {
                const size_t n = shapes[si][0];
                const unsigned w = (unsigned)shapes[si][1];
                make_pair(a, b, n * w, rates[ri]);
                const uint8_t *base = nobase ? NULL : a;
                size_t l1, l2;
                uint16_t e1, e2;
                dc_digest_t da = {0, 0}, db = {0, 0};
                cr_assert_eq(dc_codec_encode(c, base, b, n, w, p1, cap, &l1, &e1, NULL), DC_OK);
                cr_assert_eq(dc_codec_encode_digest(c, base, b, n, w, p2, cap, &l2, &e2, NULL,
                                                    &da, &db),
                             DC_OK);
                cr_assert_eq(l1, l2);
                cr_assert_eq(e1, e2);
                cr_assert(memcmp(p1, p2, l1) == 0);
                if (base)
                    cr_assert(dc_digest_eq(da, ref(a, n * w)));
                cr_assert(dc_digest_eq(db, ref(b, n * w)));
                /* decode both ways */
                memcpy(o1, a, n * w);
                cr_assert_eq(dc_codec_decode(c, e1, p1, l1, o1, n, w), DC_OK);
                cr_assert(memcmp(o1, b, n * w) == 0);
                memset(o2, 0, n * w);
                dc_digest_t sd = {0, 0}, td = {0, 0};
                cr_assert_eq(dc_codec_decode_digest(c, e1, p1, l1, base, o2, n, w, &sd, &td),
                             DC_OK);
                cr_assert(memcmp(o2, b, n * w) == 0, "%s %zu x %u rate %u", ISAS[ii], n, w,
                          rates[ri]);
                cr_assert(dc_digest_eq(td, ref(b, n * w)));
                if (base)
                    cr_assert(dc_digest_eq(sd, ref(a, n * w)));
                /* a corrupted payload leaves dst untouched */
                if (l1 > 8) {
                    p1[l1 / 2] ^= 0x40;
                    memset(o2, 0x33, n * w);
                    memcpy(o1, o2, n * w);
                    dc_status_t st =
                        dc_codec_decode_digest(c, e1, p1, l1, base, o2, n, w, NULL, NULL);
                    if (st != DC_OK)
                        cr_assert(memcmp(o1, o2, n * w) == 0);
                }
            }
    }
    restore_isa();
    dc_codec_free(c);
    free(a), free(b), free(o1), free(o2), free(p1), free(p2);
}

/* Patch to another buffer: each block is built in a bounce buffer, hashed
 * there and streamed out (non-temporal stores from a 64-byte-aligned dst
 * address on: a head and a tail of plain stores).  Every dst alignment,
 * sizes around the block (16 KiB) and the streaming loop (256 bytes),
 * positions at block edges, only dst hashed (what apply does) or both:
 * same bytes as the reference edit, the digests of the one-shot XXH3 over
 * the result, and not a byte written outside dst. */
Test(digest, patch_digest_streamed_out_any_alignment)
{
    const size_t sizes[] = {1, 63, 255, 256, 257, 1023, 1024, 1025, 16383, 16384, 16385,
                            40000, 65536 + 320};
    const size_t mis[] = {0, 1, 8, 31, 33, 63};
    size_t maxb = 65536 + 320 + 8;
    uint8_t *src = malloc(maxb), *want = malloc(maxb), *vals = malloc(maxb),
            *dbuf = malloc(maxb + 64 + 128);
    uint32_t *pos = malloc(maxb * 4);
    uint8_t *guard = malloc(maxb + 64 + 128);
    cr_assert(src && want && vals && dbuf && pos && guard);
    memset(guard, 0xC3, maxb + 64 + 128);
    for (size_t ii = 0; ii < 3; ii++) {
        if (!use_isa(ISAS[ii]))
            continue;
        for (size_t si = 0; si < DC_ARRAY_SIZE(sizes); si++)
            for (unsigned w = 1; w <= 8; w *= 2) {
                size_t n = sizes[si] / w ? sizes[si] / w : 1, bytes = n * w;
                fill(src, bytes);
                fill(vals, bytes);
                /* first and last element, both sides of every block edge,
                 * and a sprinkle */
                size_t count = 0, be = 16384 / w;
                for (size_t i = 0; i < n; i++)
                    if (i == 0 || i == n - 1 || i % be == 0 || i % be == be - 1 || rnd() % 50 == 0)
                        pos[count++] = (uint32_t)i;
                for (unsigned op = DC_PATCH_COPY; op <= DC_PATCH_PUT_DENSE; op++) {
                    memcpy(want, src, bytes);
                    switch (op) {
                    case DC_PATCH_XOR: dc_kern_xor_scatter(want, n, w, pos, vals, count); break;
                    case DC_PATCH_PUT: dc_kern_put_scatter(want, n, w, pos, vals, count); break;
                    case DC_PATCH_XOR_DENSE: dc_kern_xor_dense(want, vals, bytes); break;
                    case DC_PATCH_PUT_DENSE: memcpy(want, vals, bytes); break;
                    default: break;
                    }
                    for (size_t mi = 0; mi < DC_ARRAY_SIZE(mis); mi++)
                        for (int both = 0; both < 2; both++) {
                            uint8_t *dst = dbuf + 64 + mis[mi];
                            memset(dbuf, 0xC3, maxb + 64 + 128);
                            dc_digest_t ds = {7, 7}, dd = {9, 9};
                            cr_assert_eq(dc_kern_patch_digest(dst, src, n, w, op, pos, vals,
                                                              count, both ? &ds : NULL, &dd),
                                         DC_OK);
                            cr_assert(memcmp(dst, want, bytes) == 0,
                                      "%s bytes %zu w %u op %u mis %zu", ISAS[ii], bytes, w, op,
                                      mis[mi]);
                            cr_assert(dc_digest_eq(dd, ref(want, bytes)), "%s %zu %u %u",
                                      ISAS[ii], bytes, w, op);
                            if (both)
                                cr_assert(dc_digest_eq(ds, ref(src, bytes)));
                            else
                                cr_assert(ds.lo == 7 && ds.hi == 7);
                            size_t tail = 64 + mis[mi] + bytes;
                            cr_assert(memcmp(dbuf, guard, 64 + mis[mi]) == 0);
                            cr_assert(memcmp(dbuf + tail, guard, maxb + 64 + 128 - tail) == 0);
                        }
                }
            }
    }
    restore_isa();
    free(src), free(want), free(vals), free(dbuf), free(pos), free(guard);
}
