/*
 * test_gaps.c - positions as rANS-coded gaps (entropy.h DC_ENT_GAPS):
 * every rate from dense to one change in a million, escapes, positions
 * up to 2^32 - 2, every count around the 8-, 16- and 32-wide SIMD edges;
 * the AVX-512, AVX2 and scalar decoders agree with the encoder, also when
 * run in slices; hostile streams fail with DC_ERR_FORMAT and never yield
 * positions that are not strictly increasing and inside the chunk; the
 * codec takes gaps where they are no larger and decodes both kinds.
 */
#include <criterion/criterion.h>

#include "kernels/codec.h"
#include "kernels/entropy.h"
#include "kernels/kern.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define XORSHIFT_SEED 0xA4093822299F31D0ull
#include "xorshift.h"

static const char *const g_isas[] = {"scalar", "avx2", "avx512"};

/* decode with every decoder, all at once and in slices of odd sizes */
static void check_decodes(dc_ent_scratch_t *s, const uint8_t *buf, size_t len, size_t count,
                          uint64_t n, const uint32_t *want, const char *what)
{
    uint32_t *got = malloc((count + 1) * 4);
    cr_assert(got);
    const char *was = dc_kern_isa();
    for (unsigned ii = 0; ii < 3; ii++) {
        if (!dc_kern_isa_supported(g_isas[ii]))
            continue;
        cr_assert_eq(dc_kern_set_isa(g_isas[ii]), DC_OK);
        memset(got, 0xA5, count * 4);
        cr_assert_eq(dc_ent_gaps_decode(s, buf, len, count, n, got), DC_OK, "%s %s: %s", what,
                     g_isas[ii], dc_last_error());
        cr_assert(memcmp(got, want, count * 4) == 0, "%s %s", what, g_isas[ii]);
        dc_gaps_dec_t d;
        memset(got, 0xA5, count * 4);
        cr_assert_eq(dc_gaps_dec_init(s, &d, buf, len, count, n), DC_OK);
        size_t at = 0, step = 1;
        while (at < count) {
            at = DC_MIN(count, at + step);
            cr_assert_eq(dc_gaps_dec_run(&d, got, at, NULL), DC_OK, "%s %s slice to %zu", what,
                         g_isas[ii], at);
            step = step * 3 + 5;
        }
        cr_assert_eq(dc_gaps_dec_finish(&d), DC_OK, "%s %s", what, g_isas[ii]);
        cr_assert(memcmp(got, want, count * 4) == 0, "%s %s sliced", what, g_isas[ii]);
    }
    cr_assert_eq(dc_kern_set_isa(was), DC_OK);
    free(got);
}

static size_t encode(dc_ent_scratch_t *s, const uint32_t *pos, size_t count, uint64_t n,
                     uint8_t **out)
{
    size_t cap = dc_ent_gaps_bound(count), len;
    *out = malloc(cap + 1);
    cr_assert(*out);
    cr_assert_eq(dc_ent_gaps_encode(s, pos, count, n, *out, cap, &len), DC_OK, "%s",
                 dc_last_error());
    return len;
}

Test(gaps, roundtrip_every_rate_and_count)
{
    const uint64_t n = 1u << 20;
    const unsigned per_million[] = {1000000, 700000, 250000, 50000, 39000, 10000, 1000, 100, 1};
    uint32_t *pos = malloc(n * 4);
    dc_ent_scratch_t *s;
    cr_assert(pos);
    cr_assert_eq(dc_ent_scratch_create(n, &s), DC_OK);
    for (size_t ri = 0; ri < sizeof(per_million) / sizeof(per_million[0]); ri++) {
        size_t count = 0;
        for (uint64_t i = 0; i < n; i++)
            if (rnd() % 1000000 < per_million[ri])
                pos[count++] = (uint32_t)i;
        if (count == 0)
            pos[count++] = (uint32_t)(n - 1);
        /* every prefix length near the SIMD edges, and the whole */
        const size_t cuts[] = {1, 2, 15, 16, 17, 31, 32, 33, 4095, 4096, 4097, 4111, count};
        for (size_t ci = 0; ci < sizeof(cuts) / sizeof(cuts[0]); ci++) {
            size_t c = cuts[ci];
            if (c > count)
                continue;
            uint8_t *buf;
            size_t len = encode(s, pos, c, n, &buf);
            char what[64];
            snprintf(what, sizeof(what), "rate %u/1e6 count %zu", per_million[ri], c);
            check_decodes(s, buf, len, c, n, pos, what);
            /* one position too many or too few, truncated, padded */
            /* (all positions changed: one quotient symbol, no low bits,
             * which decodes to any count; the sparse header gives it) */
            if (c > 1 && per_million[ri] < 1000000) {
                uint32_t *tmp = malloc((c + 1) * 4);
                cr_assert_neq(dc_ent_gaps_decode(s, buf, len, c + 1, n, tmp), DC_OK);
                cr_assert_neq(dc_ent_gaps_decode(s, buf, len, c - 1, n, tmp), DC_OK);
                cr_assert_neq(dc_ent_gaps_decode(s, buf, len - 1, c, n, tmp), DC_OK);
                buf[len] = 0;
                cr_assert_neq(dc_ent_gaps_decode(s, buf, len + 1, c, n, tmp), DC_OK);
                /* a chunk one shorter than the last position needs */
                cr_assert_neq(dc_ent_gaps_decode(s, buf, len, c, pos[c - 1], tmp), DC_OK);
                free(tmp);
            }
            free(buf);
        }
    }
    dc_ent_scratch_free(s);
    free(pos);
}

/* Long gaps among short ones (escapes: quotients >= E go as varints), at
 * the top of the 32-bit range, and gaps of the widest low-bit field. */
Test(gaps, escapes_and_the_top_of_the_range)
{
    const size_t count_all = 20000;
    uint32_t *pos = malloc(count_all * 4);
    dc_ent_scratch_t *s;
    cr_assert(pos);
    cr_assert_eq(dc_ent_scratch_create(1 << 16, &s), DC_OK);
    for (unsigned mode = 0; mode < 3; mode++) {
        uint64_t at = mode == 1 ? UINT32_MAX - 40000000ull : 0;
        /* (mode 2: 5000 gaps of < 600000 stay below 2^32) */
        const size_t count = mode == 2 ? 5000 : count_all;
        for (size_t k = 0; k < count; k++) {
            uint64_t g;
            if (mode == 2)
                g = 300000 + rnd() % 300000; /* b = 16 */
            else
                g = k % 97 == 0 ? rnd() % 1500 : k % 1013 == 0 ? 1 + rnd() % 1000000 : rnd() % 9;
            if (mode == 1)
                g %= 1900;
            at += g + (k ? 1 : 0);
            pos[k] = (uint32_t)at;
        }
        uint64_t n = mode == 1 ? UINT32_MAX : at + 1;
        cr_assert(at < n);
        uint8_t *buf;
        size_t len = encode(s, pos, count, n, &buf);
        if (mode == 2)
            cr_assert_eq(buf[0], 16, "low bits %u", buf[0]);
        char what[32];
        snprintf(what, sizeof(what), "mode %u", mode);
        check_decodes(s, buf, len, count, n, pos, what);
        free(buf);
    }
    dc_ent_scratch_free(s);
    free(pos);
}

/* Hostile streams: each bad header field, nonzero padding, escapes left
 * over; random damage never crashes and never yields bad positions. */
Test(gaps, hostile_streams_fail_cleanly)
{
    const size_t count = 9000;
    const uint64_t n = 400000;
    uint32_t *pos = malloc(count * 4), *got = malloc(count * 4);
    dc_ent_scratch_t *s;
    cr_assert(pos && got);
    cr_assert_eq(dc_ent_scratch_create(1 << 20, &s), DC_OK);
    uint64_t at = 0;
    for (size_t k = 0; k < count; k++) {
        at += (k ? 1 : 0) + (k % 501 == 0 ? 3000 : rnd() % 60);
        pos[k] = (uint32_t)at;
    }
    uint8_t *buf;
    size_t len = encode(s, pos, count, n, &buf);
    unsigned b = buf[0];
    cr_assert(b > 0 && b <= 16);
    uint8_t *bad = malloc(len + 64);
    cr_assert(bad);
    /* the header: b, varint E, then the rest */
    const uint8_t *q = buf + 1;
    uint64_t E;
    cr_assert_eq(dc_ent_get_varint(&q, buf + len, &E), DC_OK);
    size_t rest = len - (size_t)(q - buf);
    /* b = 17; E = 0; E << b > 2^24 (the SIMD sums' bound); E = 65536 */
    const uint64_t bad_hdr[][2] = {{17, E}, {b, 0}, {16, 257}, {9, 32769}, {0, 65536}};
    for (size_t hi = 0; hi < sizeof(bad_hdr) / sizeof(bad_hdr[0]); hi++) {
        bad[0] = (uint8_t)bad_hdr[hi][0];
        size_t h = 1 + dc_ent_put_varint(bad + 1, bad_hdr[hi][1]);
        memcpy(bad + h, q, rest);
        cr_assert_eq(dc_ent_gaps_decode(s, bad, h + rest, count, n, got), DC_ERR_FORMAT,
                     "header %zu", hi);
    }
    /* nonzero padding bits: the last low-bits byte is the one before the
     * escapes; with count * b a multiple of 8 there is no padding */
    cr_assert_eq(dc_ent_gaps_decode(s, buf, len, count, n, got), DC_OK);
    /* an extra escape varint at the end */
    memcpy(bad, buf, len);
    bad[len] = 0;
    cr_assert_eq(dc_ent_gaps_decode(s, bad, len + 1, count, n, got), DC_ERR_FORMAT);
    /* random damage */
    for (int t = 0; t < 3000; t++) {
        memcpy(bad, buf, len);
        unsigned flips = 1 + (unsigned)(rnd() % 3);
        for (unsigned f = 0; f < flips; f++)
            bad[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
        size_t l = t % 5 == 0 ? len - 1 - rnd() % 16 : len;
        for (unsigned ii = 0; ii < 3; ii++) {
            if (!dc_kern_isa_supported(g_isas[ii]))
                continue;
            const char *was = dc_kern_isa();
            cr_assert_eq(dc_kern_set_isa(g_isas[ii]), DC_OK);
            dc_status_t st = dc_ent_gaps_decode(s, bad, l, count, n, got);
            cr_assert_eq(dc_kern_set_isa(was), DC_OK);
            cr_assert(st == DC_OK || st == DC_ERR_FORMAT);
            if (st == DC_OK) {
                cr_assert(got[0] < n);
                for (size_t k = 1; k < count; k++)
                    cr_assert(got[k] > got[k - 1] && got[k] < n, "trial %d k %zu", t, k);
            }
        }
    }
    free(bad);
    free(buf);
    free(pos);
    free(got);
    dc_ent_scratch_free(s);
}

/* n random 16-bit words and a copy with per_million of them changed in
 * one of their 7 low bits (BF16-like XOR words) */
static void fill_pair(uint16_t *base, uint16_t *next, size_t n, unsigned per_million)
{
    for (size_t i = 0; i < n; i++) {
        base[i] = (uint16_t)rnd();
        next[i] = rnd() % 1000000 < per_million ? base[i] ^ (uint16_t)(1u << (rnd() % 7))
                                                : base[i];
    }
}

/* The codec: gaps where they are no more than 1/64 larger than Golomb
 * (always below DC_CODEC_GAPS_MIN changes; at 5% they are); either method forced
 * decodes to the same bytes; a chunk naming a positions method that is
 * neither is refused. */
Test(gaps, codec_picks_and_decodes_both)
{
    const size_t n = 1u << 20;
    const unsigned w = 2;
    uint16_t *base = malloc(n * 2), *next = malloc(n * 2), *out = malloc(n * 2);
    dc_codec_t *c;
    cr_assert(base && next && out);
    cr_assert_eq(dc_codec_create(n * w, &c), DC_OK);
    dc_codec_set_model(c, DC_CODEC_MODEL_ORDER0); /* gaps of the order0 kinds */
    size_t cap = dc_codec_payload_bound(n * w), len;
    uint8_t *pl = malloc(cap);
    cr_assert(pl);
    const unsigned per_million[] = {50000, 10000, 3000, 100};
    for (size_t ri = 0; ri < 4; ri++) {
        fill_pair(base, next, n, per_million[ri]);
        const unsigned methods[] = {0, DC_ENT_GOLOMB, DC_ENT_GAPS};
        for (unsigned mi = 0; mi < 3; mi++) {
            dc_codec_pos_method = methods[mi];
            uint16_t enc;
            dc_chunk_stats_t st;
            dc_status_t rc = dc_codec_encode(c, base, next, n, w, pl, cap, &len, &enc, &st);
            dc_codec_pos_method = 0;
            cr_assert_eq(rc, DC_OK);
            unsigned pm = dc_enc_pos_method(enc);
            if (methods[mi])
                cr_assert_eq(pm, methods[mi], "rate %u forced %u", per_million[ri], methods[mi]);
            else if (st.changed < DC_CODEC_GAPS_MIN || per_million[ri] >= 50000)
                cr_assert_eq(pm, st.changed >= DC_CODEC_GAPS_MIN ? DC_ENT_GAPS : DC_ENT_GOLOMB,
                             "rate %u: %zu changes", per_million[ri], (size_t)st.changed);
            memcpy(out, base, n * 2);
            cr_assert_eq(dc_codec_decode(c, enc, pl, len, out, n, w), DC_OK,
                         "rate %u method %u: %s", per_million[ri], pm, dc_last_error());
            cr_assert(memcmp(out, next, n * 2) == 0, "rate %u method %u", per_million[ri], pm);
            dc_digest_t dg;
            memset(out, 0, n * 2);
            cr_assert_eq(dc_codec_decode_digest(c, enc, pl, len, base, out, n, w, NULL, &dg),
                         DC_OK);
            cr_assert(memcmp(out, next, n * 2) == 0);
            cr_assert(dc_digest_eq(dg, dc_digest128(next, n * 2)));
            /* positions method 6 */
            uint16_t e6 = dc_enc_make(dc_enc_kind(enc), 6, dc_enc_val_method(enc));
            memcpy(out, base, n * 2);
            cr_assert_eq(dc_codec_decode(c, e6, pl, len, out, n, w), DC_ERR_FORMAT);
            cr_assert(memcmp(out, base, n * 2) == 0);
        }
    }
    free(pl);
    free(base);
    free(next);
    free(out);
    dc_codec_free(c);
}

/* The layouts: simd (the default: gaps and 32-way streams at 5%) and
 * compact (Golomb positions, four-way values), by context and by the
 * config key codec_layout; both decode to the same bytes; a bad key is
 * refused by name. */
Test(gaps, codec_layouts)
{
    const size_t n = 1u << 20;
    const unsigned w = 2;
    uint16_t *base = malloc(n * 2), *next = malloc(n * 2), *out = malloc(n * 2);
    cr_assert(base && next && out);
    fill_pair(base, next, n, 50000);
    size_t cap = dc_codec_payload_bound(n * w), len;
    uint8_t *pl = malloc(cap);
    cr_assert(pl);
    for (unsigned how = 0; how < 4; how++) {
        /* 0: default; 1: set compact; 2: config compact; 3: config simd */
        cr_assert_eq(dc_config_set("codec_layout", how == 2 ? "compact" : how == 3 ? "simd" : NULL),
                     DC_OK);
        dc_codec_t *c;
        cr_assert_eq(dc_codec_create(n * w, &c), DC_OK);
        dc_codec_set_model(c, DC_CODEC_MODEL_ORDER0); /* gaps of the order0 kinds */
    dc_codec_set_model(c, DC_CODEC_MODEL_ORDER0); /* gaps of the order0 kinds */
        if (how == 1)
            dc_codec_set_layout(c, DC_CODEC_LAYOUT_COMPACT);
        uint16_t enc;
        cr_assert_eq(dc_codec_encode(c, base, next, n, w, pl, cap, &len, &enc, NULL), DC_OK);
        int compact = how == 1 || how == 2;
        cr_assert_eq(dc_enc_pos_method(enc), compact ? DC_ENT_GOLOMB : DC_ENT_GAPS, "how %u",
                     how);
        /* the values stream: after count, positions length, positions */
        const uint8_t *p = pl;
        uint64_t cnt, plen;
        cr_assert_eq(dc_ent_get_varint(&p, pl + len, &cnt), DC_OK);
        cr_assert_eq(dc_ent_get_varint(&p, pl + len, &plen), DC_OK);
        cr_assert_eq(dc_enc_val_method(enc), DC_ENT_RANS);
        cr_assert_eq(p[plen] & 0xC0, compact ? 0x40 : 0xC0, "how %u", how);
        memcpy(out, base, n * 2);
        cr_assert_eq(dc_codec_decode(c, enc, pl, len, out, n, w), DC_OK);
        cr_assert(memcmp(out, next, n * 2) == 0, "how %u", how);
        dc_codec_free(c);
    }
    cr_assert_eq(dc_config_set("codec_layout", "fast"), DC_OK);
    dc_codec_t *c = NULL;
    cr_assert_eq(dc_codec_create(n * w, &c), DC_ERR_INVALID);
    cr_assert(strstr(dc_last_error(), "codec_layout") != NULL, "%s", dc_last_error());
    cr_assert_eq(dc_config_set("codec_layout", NULL), DC_OK);
    free(pl);
    free(base);
    free(next);
    free(out);
}

/* An empty gaps stream (no positions, no bytes) decodes to nothing and
 * ends cleanly, whatever the decoder's memory held before: its finish used
 * to read a count init never set (a verdict that depended on the caller's
 * stack; found by the MemorySanitizer run of the delta fuzz corpus). */
Test(gaps, empty_stream_on_dirty_memory)
{
    dc_ent_scratch_t *s = NULL;
    cr_assert_eq(dc_ent_scratch_create(1024, &s), DC_OK);
    for (int fill = 0; fill < 256; fill += 85) {
        dc_gaps_dec_t d;
        memset(&d, fill, sizeof(d));
        static const uint8_t none[1] = {0};
        cr_assert_eq(dc_gaps_dec_init(s, &d, none, 0, 0, 1000), DC_OK);
        cr_assert_eq(dc_gaps_dec_finish(&d), DC_OK, "fill 0x%02x: %s", fill, dc_last_error());
    }
    dc_ent_scratch_free(s);
}
