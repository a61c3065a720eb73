/*
 * test_listpack.c - a device sender's packed rank lists (kernels/
 * listpack.h), on the CPU: random class lists of 1..8 classes round-trip
 * through dc_listpack and dc_listunpack into ranks grouped by class; the
 * packed bytes are the LEB128 gaps the header describes (checked against
 * an independent encoding of a hand-made list); hostile bytes (truncated,
 * overlong, past 32 bits, left over, counts that do not sum) are
 * DC_ERR_FORMAT and never write past the output.
 */
#include <criterion/criterion.h>

#include "kernels/listpack.h"

#include <stdlib.h>
#include <string.h>

#define XORSHIFT_SEED 0x5D1F00D5CA7B1E55ull
#include "xorshift.h"

/* ranks as the ctx encoder makes them: each class's increasing */
static void make_lists(size_t count, unsigned K, uint8_t *cls, uint32_t *rnk, unsigned spread)
{
    uint32_t next[8] = {0};
    for (size_t k = 0; k < count; k++) {
        unsigned c = (unsigned)(rnd() % K);
        cls[k] = (uint8_t)c;
        next[c] += (uint32_t)(rnd() % spread);
        rnk[k] = next[c]++;
    }
}

Test(listpack, round_trips_grouped_by_class)
{
    static const size_t counts[] = {0, 1, 2, 127, 2048, 2049, 30000};
    static const unsigned spreads[] = {1, 100, 20000, 140000};
    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
        for (unsigned K = 1; K <= 8; K++)
            for (size_t si = 0; si < 4; si++) {
                size_t count = counts[ci];
                uint8_t *cls = malloc(count + 1), *buf = malloc(dc_listpack_bound(count) + 1);
                uint32_t *rnk = malloc(count * 4 + 4), *got = malloc(count * 4 + 4);
                cr_assert(cls && buf && rnk && got);
                make_lists(count, K, cls, rnk, spreads[si]);
                size_t len = 0;
                uint64_t ccnt[8];
                int nib = (int)(ci + si) % 2;
                cr_assert_eq(dc_listpack(K == 1 && si % 2 ? NULL : cls, rnk, count, K, nib, buf,
                                         dc_listpack_bound(count), &len, ccnt),
                             DC_OK, "%s", dc_last_error());
                cr_assert_leq(len, dc_listpack_bound(count));
                if (spreads[si] <= 100)
                    cr_assert_leq(len, count * 2, "%zu bytes for %zu close ranks", len, count);
                cr_assert_eq(dc_listunpack(buf, len, ccnt, K, nib, got, count), DC_OK, "%s",
                             dc_last_error());
                /* grouped by class, each class in element order */
                size_t o = 0;
                for (unsigned c = 0; c < K; c++)
                    for (size_t k = 0; k < count; k++)
                        if (cls[k] == c) {
                            cr_assert_eq(got[o], rnk[k], "count %zu K %u: rank %zu", count, K,
                                         o);
                            o++;
                        }
                cr_assert_eq(o, count);
                free(cls);
                free(buf);
                free(rnk);
                free(got);
            }
}

Test(listpack, bytes_are_leb128_gaps)
{
    /* class 1: ranks 5, 6, 200; class 0: 0, 130; class 2: 2^32 - 1 */
    const uint8_t cls[] = {1, 0, 1, 0, 1, 2};
    const uint32_t rnk[] = {5, 0, 6, 130, 200, 0xffffffffu};
    const uint8_t want[] = {0x00, 0x81, 0x01,             /* class 0: 0, 129 */
                            0x05, 0x00, 0xc1, 0x01,       /* class 1: 5, 0, 193 */
                            0xff, 0xff, 0xff, 0xff, 0x0f}; /* class 2 */
    uint8_t buf[64];
    size_t len = 0;
    uint64_t ccnt[3];
    cr_assert_eq(dc_listpack(cls, rnk, 6, 3, 0, buf, sizeof(buf), &len, ccnt), DC_OK);
    cr_assert_eq(len, sizeof(want));
    cr_assert(memcmp(buf, want, len) == 0);
    cr_assert(ccnt[0] == 2 && ccnt[1] == 3 && ccnt[2] == 1);
    /* a class past K, and a list of one class without K = 1 */
    cr_assert_eq(dc_listpack(cls, rnk, 6, 2, 0, buf, sizeof(buf), &len, ccnt), DC_ERR_INVALID);
    cr_assert_eq(dc_listpack(NULL, rnk, 6, 2, 0, buf, sizeof(buf), &len, ccnt), DC_ERR_INVALID);
}

Test(listpack, hostile_bytes_are_format_errors)
{
    const uint8_t good[] = {0x00, 0x81, 0x01, 0x05};
    uint64_t cc[2] = {2, 1};
    uint32_t out[8];
    cr_assert_eq(dc_listunpack(good, 4, cc, 2, 0, out, 3), DC_OK);
    cr_assert(out[0] == 0 && out[1] == 130 && out[2] == 5);
    struct {
        const char *what;
        uint8_t b[8];
        size_t len;
        uint64_t cc[2];
        size_t count;
    } bad[] = {
        {"truncated varint", {0x00, 0x81}, 2, {2, 0}, 2},
        {"no bytes", {0}, 0, {1, 0}, 1},
        {"bytes left over", {0x00, 0x01, 0x02}, 3, {2, 0}, 2},
        {"gap past 32 bits", {0xff, 0xff, 0xff, 0xff, 0x10}, 5, {1, 0}, 1},
        {"six-byte varint", {0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, 6, {1, 0}, 1},
        {"rank past 2^32 - 1", {0xff, 0xff, 0xff, 0xff, 0x0f, 0x00}, 6, {2, 0}, 2},
        {"counts past the output", {0x00, 0x00}, 2, {2, 1}, 2},
        {"counts short of the output", {0x00}, 1, {1, 0}, 2},
        {"count past 2^64 in a sum", {0x00}, 1, {UINT64_MAX, 2}, 1},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(out, 0xA5, sizeof(out));
        cr_assert_eq(dc_listunpack(bad[i].b, bad[i].len, bad[i].cc, 2, 0, out, bad[i].count),
                     DC_ERR_FORMAT, "%s: not refused", bad[i].what);
        for (size_t k = bad[i].count; k < 8; k++)
            cr_assert_eq(out[k], 0xA5A5A5A5u, "%s: wrote past the output", bad[i].what);
    }
}

Test(listpack, histogram_counts_unpack_and_refuse_hostile_bytes)
{
    /* counts 1, 130, 2^32 - 1 less 131: varints of count - 1 */
    const uint8_t good[] = {0x00, 0x81, 0x01, 0xfb, 0xfe, 0xff, 0xff, 0x0f};
    uint32_t cnt[4];
    size_t nsym = 0;
    cr_assert_eq(dc_listunpack_counts(good, sizeof(good), 0xffffffffu, cnt, &nsym), DC_OK, "%s",
                 dc_last_error());
    cr_assert(nsym == 3 && cnt[0] == 1 && cnt[1] == 130 && cnt[2] == 0xffffffffu - 131);
    struct {
        const char *what;
        uint8_t b[8];
        size_t len, count;
    } bad[] = {
        {"truncated", {0x81}, 1, 2},
        {"sum short", {0x00, 0x00}, 2, 3},
        {"sum past the words", {0x00, 0x05}, 2, 3},
        {"more counts than words", {0x00, 0x00, 0x00}, 3, 2},
        {"past 32 bits", {0xff, 0xff, 0xff, 0xff, 0x10}, 5, 0xffffffffu},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(cnt, 0xA5, sizeof(cnt));
        cr_assert_eq(dc_listunpack_counts(bad[i].b, bad[i].len, bad[i].count, cnt, &nsym),
                     DC_ERR_FORMAT, "%s: not refused", bad[i].what);
        for (size_t k = bad[i].count < 4 ? bad[i].count : 4; k < 4; k++)
            cr_assert_eq(cnt[k], 0xA5A5A5A5u, "%s: wrote past the output", bad[i].what);
    }
}

Test(listpack, words_round_trip_and_refuse_hostile_bytes)
{
    for (int nib = 0; nib < 2; nib++)
        for (unsigned w = 1; w <= 4; w *= 2)
            for (size_t count = 63; count <= 64; count++) {
                uint8_t v[64 * 4], back[64 * 4], buf[64 * 6 + 8];
                for (size_t k = 0; k < count * w; k++)
                    v[k] = (uint8_t)(k % 7 == 0 ? rnd() : k % 3);
                size_t len = 0;
                cr_assert_eq(dc_listpack_words(v, count, w, nib, buf, sizeof(buf), &len), DC_OK,
                             "%s", dc_last_error());
                cr_assert_eq(dc_listunpack_words(buf, len, count, w, nib, back), DC_OK, "%s",
                             dc_last_error());
                cr_assert(memcmp(v, back, count * w) == 0, "w %u nibbles %d", w, nib);
                /* one byte short, one byte over, a last nibble not zero */
                cr_assert_eq(dc_listunpack_words(buf, len - 1, count, w, nib, back),
                             DC_ERR_FORMAT);
                buf[len] = 0;
                cr_assert_eq(dc_listunpack_words(buf, len + 1, count, w, nib, back),
                             DC_ERR_FORMAT);
                if (nib && (buf[len - 1] >> 4) == 0) {
                    buf[len - 1] |= 0x10;
                    cr_assert_eq(dc_listunpack_words(buf, len, count, w, nib, back),
                                 DC_ERR_FORMAT, "a stray last nibble");
                }
            }
    /* a value past the width: 256 as a 1-byte word, 65536 as a 2-byte one */
    const uint8_t big1[] = {0x80, 0x02}, big2[] = {0x80, 0x80, 0x04};
    uint8_t out[8];
    cr_assert_eq(dc_listunpack_words(big1, 2, 1, 1, 0, out), DC_ERR_FORMAT);
    cr_assert_eq(dc_listunpack_words(big2, 3, 1, 2, 0, out), DC_ERR_FORMAT);
    cr_assert_eq(dc_listunpack_words(big2, 3, 1, 4, 0, out), DC_OK);
    uint32_t x;
    memcpy(&x, out, 4);
    cr_assert_eq(x, 65536u);
    /* nibbles: 9 = 0b001 001 -> 0x9 (1, more), 0x1 (1): one byte 0x19 */
    const uint8_t n9[] = {0x19};
    cr_assert_eq(dc_listunpack_words(n9, 1, 1, 1, 1, out), DC_OK);
    cr_assert_eq(out[0], 9);
    /* 12 nibbles of continuation: past 32 bits */
    const uint8_t nlong[] = {0x99, 0x99, 0x99, 0x99, 0x99, 0x99, 0x01};
    cr_assert_eq(dc_listunpack_words(nlong, sizeof(nlong), 1, 4, 1, out), DC_ERR_FORMAT);
}
