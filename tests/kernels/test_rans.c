/*
 * test_rans.c - the values coder's rANS streams: four-, two- and one-way
 * (older encoders) interleaved streams all decode, at every count around
 * the interleave and unroll edges, for 8- and 16-bit symbols and the byte
 * planes; the 12-bit table is chosen for small alphabets without losing
 * size; truncated or padded streams are refused.
 */
#include <criterion/criterion.h>

#include "kernels/entropy.h"
#include "kernels/kern.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 0x13198A2E03707344ull;
static uint64_t rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

/* geometric-ish symbols over about `spread` values, like XOR words */
static void fill_words(uint8_t *v, size_t count, unsigned w, unsigned spread)
{
    for (size_t i = 0; i < count; i++) {
        uint64_t r = rnd();
        unsigned s = spread <= 1 ? 7 : (unsigned)(__builtin_ctzll(r | (1ull << 40)) * 37 % spread);
        if (w == 1)
            v[i] = (uint8_t)s;
        else {
            v[2 * i] = (uint8_t)s;
            v[2 * i + 1] = (uint8_t)(s >> 8 ^ (r >> 50 & (spread > 256 ? 3 : 0)));
        }
    }
}

static void roundtrip(const uint8_t *v, size_t count, unsigned w, unsigned ways)
{
    dc_ent_scratch_t *s;
    cr_assert_eq(dc_ent_scratch_create(count * w + 64, &s), DC_OK);
    size_t cap = dc_ent_val_bound(count, w);
    uint8_t *dst = malloc(cap), *out = malloc(count * w + 1);
    cr_assert(dst && out);
    dc_ent_rans_ways = ways;
    size_t len;
    unsigned m;
    cr_assert_eq(dc_ent_val_encode(s, v, count, w, 0, dst, cap, &len, &m), DC_OK);
    dc_ent_rans_ways = 0;
    if (m == DC_ENT_RANS) {
        unsigned want = ways ? ways : count >= 64 ? 4 : count >= 16 ? 2 : 1;
        unsigned flag = want == 4 ? 0x40 : want == 2 ? 0x80 : 0;
        cr_assert_eq(dst[0] & 0xC0, flag, "count %zu ways %u", count, ways);
    }
    cr_assert_eq(dc_ent_val_decode(s, m, dst, len, count, w, out), DC_OK,
                 "count %zu w %u method %u ways %u", count, w, m, ways);
    cr_assert(memcmp(out, v, count * w) == 0, "count %zu w %u method %u", count, w, m);
    if (m == DC_ENT_RANS || m == DC_ENT_PLANES) {
        /* truncated and padded streams are refused */
        cr_assert_eq(dc_ent_val_decode(s, m, dst, len - 1, count, w, out), DC_ERR_FORMAT);
        dst[len] = 0;
        cr_assert_eq(dc_ent_val_decode(s, m, dst, len + 1, count, w, out), DC_ERR_FORMAT);
    }
    free(dst);
    free(out);
    dc_ent_scratch_free(s);
}

Test(rans, one_way_and_two_way_roundtrip)
{
    const size_t counts[] = {1, 2, 3, 4, 5, 7, 15, 16, 17, 18, 31, 63, 64, 65, 66, 67,
                             100, 4095, 4096, 4097, 100001};
    const unsigned modes[] = {0, 1, 2, 4};
    const unsigned spreads[] = {1, 2, 70, 300, 5000};
    uint8_t *v = malloc(100001 * 2);
    cr_assert(v);
    for (unsigned w = 1; w <= 2; w++)
        for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
            for (size_t si = 0; si < sizeof(spreads) / sizeof(spreads[0]); si++) {
                if (w == 1 && spreads[si] > 256)
                    continue;
                fill_words(v, counts[ci], w, spreads[si]);
                for (size_t mi = 0; mi < sizeof(modes) / sizeof(modes[0]); mi++)
                    roundtrip(v, counts[ci], w, modes[mi]);
            }
    free(v);
}

Test(rans, planes_roundtrip)
{
    const size_t counts[] = {1, 16, 17, 1001, 65537};
    uint8_t *v = malloc(65537 * 8);
    cr_assert(v);
    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
        for (unsigned w = 4; w <= 8; w *= 2) {
            for (size_t i = 0; i < counts[ci] * w; i++)
                v[i] = (uint8_t)(rnd() % 5 == 0 ? rnd() : 0);
            roundtrip(v, counts[ci], w, 0);
            roundtrip(v, counts[ci], w, 1);
        }
    free(v);
}

Test(rans, small_alphabet_takes_12_bit_table_near_entropy)
{
    const size_t count = 200000;
    uint16_t *v = malloc(count * 2);
    cr_assert(v);
    fill_words((uint8_t *)v, count, 2, 70);
    /* empirical entropy */
    static uint32_t hist[65536];
    memset(hist, 0, sizeof(hist));
    for (size_t i = 0; i < count; i++)
        hist[(uint16_t)(((uint8_t *)v)[2 * i] | ((uint8_t *)v)[2 * i + 1] << 8)]++;
    double bits = 0;
    for (size_t c = 0; c < 65536; c++)
        if (hist[c])
            bits -= hist[c] * log2((double)hist[c] / (double)count);
    dc_ent_scratch_t *s;
    cr_assert_eq(dc_ent_scratch_create(count * 2, &s), DC_OK);
    size_t cap = dc_ent_val_bound(count, 2), len;
    uint8_t *dst = malloc(cap);
    unsigned m;
    cr_assert_eq(dc_ent_val_encode(s, v, count, 2, 0, dst, cap, &len, &m), DC_OK);
    cr_assert_eq(m, DC_ENT_RANS);
    cr_assert_eq(dst[0], 16 | 0x40);
    cr_assert_eq(dst[1], 12, "scale %u", dst[1]);
    cr_assert(len * 8.0 <= bits * 1.01 + 8 * 600, "len %zu vs %.0f bits", len, bits);
    /* a header byte with both interleave flags is refused */
    uint8_t *out = malloc(count * 2);
    dst[0] = 16 | 0xC0;
    cr_assert_eq(dc_ent_val_decode(s, m, dst, len, count, 2, out), DC_ERR_FORMAT);
    free(out);
    free(dst);
    free(v);
    dc_ent_scratch_free(s);
}

/* Golomb positions: the table-driven and bit-by-bit decoders agree with the
 * encoder for every parameter range (m from 1 to large), and hostile
 * streams fail cleanly. */
Test(rans, golomb_positions_roundtrip)
{
    const uint64_t n = 1u << 20;
    const unsigned per_million[] = {1000000, 700000, 250000, 50000, 10000, 1000, 100, 7};
    uint32_t *pos = malloc(n * 4), *got = malloc(n * 4);
    size_t cap = dc_ent_pos_bound(n, n);
    uint8_t *buf = malloc(cap);
    cr_assert(pos && got && buf);
    for (size_t ri = 0; ri < sizeof(per_million) / sizeof(per_million[0]); ri++) {
        size_t count = 0;
        for (uint64_t i = 0; i < n; i++)
            if (rnd() % 1000000 < per_million[ri])
                pos[count++] = (uint32_t)i;
        size_t len;
        cr_assert_eq(dc_ent_pos_encode(pos, count, n, buf, cap, &len), DC_OK);
        memset(got, 0, count * 4);
        cr_assert_eq(dc_ent_pos_decode(buf, len, count, n, got), DC_OK, "rate %u", per_million[ri]);
        cr_assert(memcmp(got, pos, count * 4) == 0, "rate %u", per_million[ri]);
        /* one count too many or too few, a truncated stream, flipped bits */
        if (count > 1) {
            cr_assert_neq(dc_ent_pos_decode(buf, len, count + 1, n, got), DC_OK);
            cr_assert_neq(dc_ent_pos_decode(buf, len, count - 1, n, got), DC_OK);
            cr_assert_neq(dc_ent_pos_decode(buf, len - 1, count, n, got), DC_OK);
            for (int t = 0; t < 50; t++) {
                size_t at = 1 + rnd() % (len - 1);
                uint8_t save = buf[at];
                buf[at] ^= (uint8_t)(1u << (rnd() % 8));
                dc_status_t st = dc_ent_pos_decode(buf, len, count, n, got);
                if (st == DC_OK)
                    for (size_t k = 1; k < count; k++)
                        cr_assert(got[k] > got[k - 1] && got[k] < n);
                buf[at] = save;
            }
        }
    }
    free(pos);
    free(got);
    free(buf);
}

/* The resumable decoders, run in slices of random sizes (alone, and both
 * at once through dc_ent_sparse_run with and without a prefetch span),
 * give what one whole run gives, and finish only at the stream's end. */
Test(rans, decoders_resume_in_slices)
{
    const uint64_t n = 1u << 19;
    uint32_t *pos = malloc(n * 4), *got = malloc(n * 4);
    uint16_t *val = malloc(n * 2), *gv = malloc(n * 2);
    uint8_t *chunk = malloc(n * 2);
    size_t pcap = dc_ent_pos_bound(n, n), vcap = dc_ent_val_bound(n, 2);
    uint8_t *pb = malloc(pcap), *vb = malloc(vcap);
    dc_golomb_dec_t *gd = malloc(sizeof(*gd));
    dc_ent_scratch_t *s;
    cr_assert(pos && got && val && gv && chunk && pb && vb && gd);
    cr_assert_eq(dc_ent_scratch_create(n * 2, &s), DC_OK);
    const unsigned per_mille[] = {5, 30, 150, 600};
    for (size_t ri = 0; ri < sizeof(per_mille) / sizeof(per_mille[0]); ri++) {
        size_t count = 0;
        for (uint64_t i = 0; i < n; i++)
            if (rnd() % 1000 < per_mille[ri] || (i % 5000 == 0 && rnd() % 2)) {
                pos[count] = (uint32_t)i;
                val[count] = (uint16_t)(rnd() % 9 == 0 ? rnd() : 1 + rnd() % 5);
                count++;
            }
        size_t pl, vl;
        unsigned m;
        cr_assert_eq(dc_ent_pos_encode(pos, count, n, pb, pcap, &pl), DC_OK);
        cr_assert_eq(dc_ent_val_encode(s, val, count, 2, 0, vb, vcap, &vl, &m), DC_OK);
        cr_assert_eq(m, DC_ENT_RANS);
        for (int mode = 0; mode < 3; mode++) {
            dc_rans_dec_t rd;
            memset(got, 0, count * 4);
            memset(gv, 0, count * 2);
            cr_assert_eq(dc_golomb_dec_init(gd, pb, pl, count, n), DC_OK);
            cr_assert_eq(dc_rans_dec_init(s, &rd, vb, vl, count, 16), DC_OK);
            dc_ent_pf_t pf = {chunk, n * 2};
            size_t k = 0;
            while (k < count) {
                /* odd slice sizes too: the fast loops realign */
                k = DC_MIN(count, k + 1 + rnd() % 3000);
                if (mode == 0) {
                    cr_assert_eq(dc_golomb_dec_run(gd, got, k), DC_OK);
                    cr_assert_eq(dc_rans_dec_run(&rd, (uint8_t *)gv, 2, k), DC_OK);
                } else {
                    cr_assert_eq(dc_ent_sparse_run(gd, &rd, got, (uint8_t *)gv, k,
                                                   mode == 2 ? &pf : NULL),
                                 DC_OK);
                }
                if (k < count) {
                    cr_assert_neq(dc_golomb_dec_finish(gd), DC_OK);
                    cr_assert_neq(dc_rans_dec_finish(&rd), DC_OK);
                }
            }
            cr_assert_eq(dc_golomb_dec_finish(gd), DC_OK);
            cr_assert_eq(dc_rans_dec_finish(&rd), DC_OK);
            cr_assert(memcmp(got, pos, count * 4) == 0, "rate %u mode %d", per_mille[ri], mode);
            cr_assert(memcmp(gv, val, count * 2) == 0, "rate %u mode %d", per_mille[ri], mode);
        }
    }
    dc_ent_scratch_free(s);
    free(gd);
    free(pos);
    free(got);
    free(val);
    free(gv);
    free(chunk);
    free(pb);
    free(vb);
}

/* The encoders have a BMI2 build (avx2 / avx512 kernels) and a baseline
 * one (scalar kernels): both must write the same bytes, for every symbol
 * width and plane stride, every interleave and the Golomb positions. */
Test(rans, encoders_identical_on_every_isa)
{
    static const char *const isas[] = {"scalar", "avx2", "avx512"};
    const size_t counts[] = {1, 3, 17, 66, 4097, 30001};
    const size_t maxc = 30001;
    uint8_t *v = malloc(maxc * 8);
    uint32_t *pos = malloc(maxc * 4);
    size_t cap = dc_ent_val_bound(maxc, 8) + dc_ent_pos_bound(maxc, 8 * maxc);
    uint8_t *ref = malloc(cap), *got = malloc(cap);
    dc_ent_scratch_t *s;
    cr_assert(v && pos && ref && got);
    cr_assert_eq(dc_ent_scratch_create(maxc * 8, &s), DC_OK);
    const char *was = dc_kern_isa();
    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
        size_t count = counts[ci];
        for (unsigned w = 1; w <= 8; w *= 2) {
            if (w <= 2)
                fill_words(v, count, w, w == 1 ? 70 : 5000);
            else
                for (size_t i = 0; i < count * w; i++)
                    v[i] = (uint8_t)(rnd() % 3 == 0 ? rnd() % 7 : 0);
            uint32_t at = 0;
            for (size_t k = 0; k < count; k++) {
                at += 1 + (uint32_t)(rnd() % (k % 7 == 0 ? 3000 : 40));
                pos[k] = at;
            }
            for (unsigned ways = 0; ways <= 4; ways++) {
                if (ways == 3)
                    continue;
                size_t rlen = 0, rplen = 0;
                unsigned rm = 0;
                for (size_t ii = 0; ii < sizeof(isas) / sizeof(isas[0]); ii++) {
                    if (!dc_kern_isa_supported(isas[ii]))
                        continue;
                    cr_assert_eq(dc_kern_set_isa(isas[ii]), DC_OK);
                    dc_ent_rans_ways = ways;
                    size_t len, plen;
                    unsigned m;
                    dc_status_t st = dc_ent_val_encode(s, v, count, w, 0, got, cap, &len, &m);
                    dc_ent_rans_ways = 0;
                    cr_assert_eq(st, DC_OK);
                    cr_assert_eq(dc_ent_pos_encode(pos, count, (uint64_t)at + 1, got + len,
                                                   cap - len, &plen), DC_OK);
                    if (ii == 0) {
                        memcpy(ref, got, len + plen);
                        rlen = len;
                        rplen = plen;
                        rm = m;
                        continue;
                    }
                    cr_assert_eq(m, rm, "%s: count %zu w %u ways %u", isas[ii], count, w, ways);
                    cr_assert_eq(len, rlen, "%s: count %zu w %u ways %u", isas[ii], count, w, ways);
                    cr_assert_eq(plen, rplen, "%s: count %zu w %u", isas[ii], count, w);
                    cr_assert(memcmp(got, ref, len + plen) == 0, "%s: count %zu w %u ways %u",
                              isas[ii], count, w, ways);
                }
            }
        }
    }
    cr_assert_eq(dc_kern_set_isa(was), DC_OK);
    dc_ent_scratch_free(s);
    free(v);
    free(pos);
    free(ref);
    free(got);
}
