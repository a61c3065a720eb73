/*
 * test_rans.c - the values coder's rANS streams: 32-way (the SIMD layout,
 * decoded by the AVX-512, AVX2 and scalar code alike), four-, two- and
 * one-way (older encoders) interleaved streams all decode, at every count around
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

#define XORSHIFT_SEED 0x13198A2E03707344ull
#include "xorshift.h"

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
        unsigned want = ways ? ways : count >= 4096 ? 32 : count >= 64 ? 4 : count >= 16 ? 2 : 1;
        unsigned flag = want == 32 ? 0xC0 : want == 4 ? 0x40 : want == 2 ? 0x80 : 0;
        /* a lone symbol at scale 16 cannot be 32-way (its frequency is 2^16) */
        if (want == 32 && (dst[0] & 0xC0) == 0x40 && dst[1] == 16)
            flag = 0x40;
        cr_assert_eq(dst[0] & 0xC0, flag, "count %zu ways %u", count, ways);
    }
    /* every decoder (the AVX-512 and AVX2 ones for 32-way streams, and
     * the scalar one) gives the same words */
    static const char *const isas[] = {"scalar", "avx2", "avx512"};
    const char *was = dc_kern_isa();
    for (unsigned ii = 0; ii < 3; ii++) {
        if (!dc_kern_isa_supported(isas[ii]))
            continue;
        cr_assert_eq(dc_kern_set_isa(isas[ii]), DC_OK);
        memset(out, 0xA5, count * w);
        cr_assert_eq(dc_ent_val_decode(s, m, dst, len, count, w, out), DC_OK,
                     "count %zu w %u method %u ways %u isa %s", count, w, m, ways, isas[ii]);
        cr_assert(memcmp(out, v, count * w) == 0, "count %zu w %u method %u isa %s", count, w,
                  m, isas[ii]);
    }
    cr_assert_eq(dc_kern_set_isa(was), DC_OK);
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
    const size_t counts[] = {1, 2, 3, 4, 5, 7, 15, 16, 17, 18, 31, 32, 33, 63, 64, 65, 66, 67,
                             100, 4095, 4096, 4097, 4127, 4128, 4129, 100001};
    const unsigned modes[] = {0, 1, 2, 4, 32};
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
            roundtrip(v, counts[ci], w, 32);
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
    cr_assert_eq(dst[0], 16 | 0xC0);
    cr_assert_eq(dst[1], 12, "scale %u", dst[1]);
    cr_assert(len * 8.0 <= bits * 1.01 + 8 * 600, "len %zu vs %.0f bits", len, bits);
    /* the same data read as four-way, or with a symbol width that lies, is
     * refused */
    uint8_t *out = malloc(count * 2);
    dst[0] = 16 | 0x40;
    cr_assert_eq(dc_ent_val_decode(s, m, dst, len, count, 2, out), DC_ERR_FORMAT);
    dst[0] = 8 | 0xC0;
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

/* Golomb parameter 1 (b = 0: a code is g zeros and a one) with codes of
 * 63 and more zeros starting on a byte boundary: the decoder's one-code path
 * then consumes a whole 64-bit window (found by libFuzzer + UBSan as a
 * shift by 64).  Every gap 56..70 lands on a byte boundary after 200 unit
 * gaps, in streams short of the table's threshold and long enough to use
 * it. */
Test(rans, golomb_unary_codes_fill_the_window)
{
    for (uint32_t gap = 56; gap <= 70; gap++) {
        for (size_t lead = 200; lead <= 200 + 8 * 4096; lead += 8 * 4096) {
            size_t count = lead + 2;
            uint32_t *pos = malloc(count * 4), *got = malloc(count * 4);
            cr_assert(pos && got);
            for (size_t i = 0; i < lead; i++)
                pos[i] = (uint32_t)i; /* 'lead' one-bit codes: a byte boundary */
            pos[lead] = (uint32_t)(lead + gap);
            pos[lead + 1] = pos[lead] + 1;
            uint64_t n = (uint64_t)pos[lead + 1] + 1;
            size_t cap = dc_ent_pos_bound(count, n), len;
            uint8_t *buf = malloc(cap);
            cr_assert(buf);
            cr_assert_eq(dc_ent_pos_encode(pos, count, n, buf, cap, &len), DC_OK);
            cr_assert_eq(buf[0], 1, "Golomb parameter %u, expected 1", buf[0]);
            cr_assert_eq(dc_ent_pos_decode(buf, len, count, n, got), DC_OK, "gap %u: %s", gap,
                         dc_last_error());
            cr_assert(memcmp(got, pos, count * 4) == 0, "gap %u lead %zu", gap, lead);
            free(buf);
            free(pos);
            free(got);
        }
    }
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
            for (unsigned ways = 0; ways <= 32; ways++) {
                if (ways == 3 || (ways > 4 && ways < 32))
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

/* --- Golomb positions: every decoder against a bit-by-bit reference ------- */

/* MSB-first bit writer / reader of the test's own (independent of the
 * library's) Golomb coder: per gap, q = g / m zero bits, a one, then
 * r = g % m in truncated binary (b = ceil(log2 m), cut = 2^b - m: r < cut
 * in b - 1 bits, else r + cut in b bits). */
typedef struct {
    uint8_t *buf;
    size_t cap, bits;
} tbw_t;

static void tbw_put(tbw_t *w, uint64_t v, unsigned nb)
{
    for (unsigned i = nb; i-- > 0;) {
        size_t by = w->bits >> 3;
        cr_assert(by < w->cap);
        if (((w->bits & 7) == 0))
            w->buf[by] = 0;
        if ((v >> i) & 1)
            w->buf[by] |= (uint8_t)(0x80u >> (w->bits & 7));
        w->bits++;
    }
}

static unsigned t_ceil_log2(uint64_t m)
{
    unsigned b = 0;
    while ((1ull << b) < m)
        b++;
    return b;
}

/* A positions stream with parameter m for the gaps g[0..count): varint m
 * then the codes; returns its length in bytes. */
static size_t t_golomb_write(const uint64_t *g, size_t count, uint64_t m, uint8_t *buf,
                             size_t cap)
{
    size_t h = dc_ent_put_varint(buf, m);
    tbw_t w = {buf + h, cap - h, 0};
    unsigned b = t_ceil_log2(m);
    uint64_t cut = (1ull << b) - m;
    for (size_t k = 0; k < count; k++) {
        uint64_t q = g[k] / m, r = g[k] % m;
        for (uint64_t i = 0; i < q; i++)
            tbw_put(&w, 0, 1);
        tbw_put(&w, 1, 1);
        if (b) {
            if (r < cut)
                tbw_put(&w, r, b - 1);
            else
                tbw_put(&w, r + cut, b);
        }
    }
    return h + (w.bits + 7) / 8;
}

/* The reference decoder, one bit at a time: the positions of a stream, or
 * -1 for any stream the format refuses (bad parameter, truncated, a
 * position outside [0, n), fewer or more codes, non-zero padding). */
static int t_golomb_ref(const uint8_t *src, size_t len, size_t count, uint64_t n,
                        uint32_t *pos)
{
    const uint8_t *p = src, *end = src + len;
    uint64_t m;
    if (dc_ent_get_varint(&p, end, &m) != DC_OK || m < 1 || m > (1ull << 32) || count > n)
        return -1;
    size_t nbits = (size_t)(end - p) * 8, at = 0;
#define TBIT() ((p[at >> 3] >> (7 - (at & 7))) & 1)
    unsigned b = t_ceil_log2(m);
    uint64_t cut = (1ull << b) - m, next = 0;
    for (size_t k = 0; k < count; k++) {
        uint64_t q = 0;
        for (;;) {
            if (at >= nbits)
                return -1;
            if (TBIT()) {
                at++;
                break;
            }
            at++;
            if (++q > n)
                return -1;
        }
        uint64_t r = 0;
        if (b) {
            for (unsigned i = 0; i + 1 < b; i++) {
                if (at >= nbits)
                    return -1;
                r = r << 1 | TBIT();
                at++;
            }
            if (r >= cut) {
                if (at >= nbits)
                    return -1;
                r = (r << 1 | TBIT()) - cut;
                at++;
            }
        }
        uint64_t ps = next + q * m + r;
        if (ps >= n)
            return -1;
        pos[k] = (uint32_t)ps;
        next = ps + 1;
    }
    if (nbits - at >= 8)
        return -1;
    for (; at < nbits; at++)
        if (TBIT())
            return -1;
#undef TBIT
    return 0;
}

/* Decode positions (and values, 4-way 16-bit rANS, as the codec does)
 * through dc_ent_sparse_run in random slices, or through the standalone
 * positions decoder: 0 and the positions, or -1 when refused. */
static int t_golomb_lib(dc_ent_scratch_t *s, dc_golomb_dec_t *gd, const uint8_t *pb, size_t pl,
                        const uint8_t *vb, size_t vl, size_t count, uint64_t n, int sparse,
                        uint32_t *pos, uint16_t *vals)
{
    if (!sparse)
        return dc_ent_pos_decode(pb, pl, count, n, pos) == DC_OK ? 0 : -1;
    if (dc_golomb_dec_init(gd, pb, pl, count, n) != DC_OK)
        return -1;
    dc_rans_dec_t rd;
    cr_assert_eq(dc_rans_dec_init(s, &rd, vb, vl, count, 16), DC_OK);
    size_t k = 0;
    while (k < count) {
        k = sparse == 1 ? count : DC_MIN(count, k + 1 + rnd() % 5000);
        if (dc_ent_sparse_run(gd, &rd, pos, (uint8_t *)vals, k, NULL) != DC_OK)
            return -1;
    }
    if (dc_golomb_dec_finish(gd) != DC_OK)
        return -1;
    cr_assert_eq(dc_rans_dec_finish(&rd), DC_OK);
    return 0;
}

/* The table decoders (one code per lookup, and up to two in the sparse
 * loop, 3 or 4 lookups a step) give what the bit-by-bit reference gives
 * on every ISA: for every table width (b = 0..11, both sides of the cut),
 * on valid streams with long codes the tables lack and positions at the
 * chunk's end, and on corrupted ones (flipped bits, truncated, padded,
 * random bytes), where the verdict must match too. */
Test(rans, golomb_tables_match_bitwise_reference)
{
    static const char *const isas[] = {"scalar", "avx2", "avx512"};
    static const uint64_t ms[] = {1, 2, 3, 5, 7, 8, 12, 17, 18, 29, 31, 32, 33, 67, 100,
                                  127, 128, 129, 300, 511, 700, 1024, 1500, 2047, 2048};
    const size_t maxc = 12000;
    uint64_t *g = malloc(maxc * 8);
    uint32_t *ref = malloc(maxc * 4), *got = malloc(maxc * 4);
    uint16_t *val = malloc(maxc * 2), *gv = malloc(maxc * 2);
    size_t pcap = maxc * 64 + 64, vcap = dc_ent_val_bound(maxc, 2);
    uint8_t *pb = malloc(pcap), *cb = malloc(pcap + 8), *vb = malloc(vcap);
    dc_golomb_dec_t *gd = malloc(sizeof(*gd));
    dc_ent_scratch_t *s;
    cr_assert(g && ref && got && val && gv && pb && cb && vb && gd);
    cr_assert_eq(dc_ent_scratch_create(maxc * 2, &s), DC_OK);
    const char *was = dc_kern_isa();
    size_t two_code = 0, three = 0, four = 0;
    for (size_t mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++) {
        uint64_t m = ms[mi];
        for (int shape = 0; shape < 3; shape++) {
            /* shape 0: gaps ~ the code's own geometric law; 1: plus long
             * runs (codes of > 12 bits: table misses); 2: ends exactly at
             * the chunk's last element */
            size_t count = 4096 + rnd() % (maxc - 4096);
            uint64_t at = 0;
            for (size_t k = 0; k < count; k++) {
                uint64_t q = 0;
                while (rnd() % 1000 < 450 && q < 40)
                    q++;
                g[k] = q * m + rnd() % m;
                if (shape == 1 && rnd() % 50 == 0)
                    g[k] += m * (13 + rnd() % 40);
                at += g[k] + 1;
            }
            uint64_t n = shape == 2 ? at : at + rnd() % 100;
            size_t pl = t_golomb_write(g, count, m, pb, pcap);
            for (size_t k = 0; k < count; k++)
                val[k] = (uint16_t)(rnd() % 7 == 0 ? rnd() : 1 + rnd() % 5);
            size_t vl;
            unsigned vm;
            dc_ent_rans_ways = 4;
            cr_assert_eq(dc_ent_val_encode(s, val, count, 2, 0, vb, vcap, &vl, &vm), DC_OK);
            dc_ent_rans_ways = 0;
            cr_assert_eq(vm, DC_ENT_RANS);
            cr_assert_eq(t_golomb_ref(pb, pl, count, n, ref), 0, "m %llu", (unsigned long long)m);
            for (size_t k = 0, a = 0; k < count; a = ref[k] + 1, k++)
                cr_assert_eq(ref[k], a + g[k]);
            /* (the sparse run builds the two-code table) */
            cr_assert_eq(t_golomb_lib(s, gd, pb, pl, vb, vl, count, n, 1, got, gv), 0);
            if (gd->use_tab) {
                cr_assert(gd->glook == 3 || gd->glook == 4);
                three += gd->glook == 3;
                four += gd->glook == 4;
            }
            if (gd->use_tab && gd->glook == 3) {
                /* the two-code table against the one-code table */
                for (uint32_t i = 0; i < (1u << DC_GT_BITS); i++) {
                    uint32_t e = gd->gtab2[i], e0 = gd->gtab[i];
                    if (e0 == 0) {
                        cr_assert_eq(e, 0);
                        continue;
                    }
                    unsigned l0 = e0 >> 24, g0 = e0 & 0xffffff;
                    cr_assert_eq((e >> 7) & 0x1fff, g0);
                    if (e & 64) {
                        uint32_t e1 = gd->gtab[(i << l0) & ((1u << DC_GT_BITS) - 1)];
                        cr_assert_neq(e1, 0);
                        cr_assert_eq(e & 63, l0 + (e1 >> 24));
                        cr_assert_eq(e >> 20, g0 + 1 + (e1 & 0xffffff));
                        two_code++;
                    } else {
                        cr_assert_eq(e & 63, l0);
                        cr_assert_eq(e >> 20, g0);
                    }
                }
            }
            for (size_t ii = 0; ii < sizeof(isas) / sizeof(isas[0]); ii++) {
                if (!dc_kern_isa_supported(isas[ii]))
                    continue;
                cr_assert_eq(dc_kern_set_isa(isas[ii]), DC_OK);
                for (int sparse = 0; sparse < 3; sparse++) {
                    memset(got, 0xee, count * 4);
                    cr_assert_eq(t_golomb_lib(s, gd, pb, pl, vb, vl, count, n, sparse, got, gv),
                                 0, "m %llu shape %d isa %s", (unsigned long long)m, shape,
                                 isas[ii]);
                    cr_assert(memcmp(got, ref, count * 4) == 0, "m %llu shape %d isa %s mode %d",
                              (unsigned long long)m, shape, isas[ii], sparse);
                    if (sparse)
                        cr_assert(memcmp(gv, val, count * 2) == 0);
                }
                /* a bound one short of the last position is refused */
                if (shape == 2)
                    for (int sparse = 0; sparse < 3; sparse++)
                        cr_assert_eq(t_golomb_lib(s, gd, pb, pl, vb, vl, count, n - 1, sparse,
                                                  got, gv),
                                     -1);
                /* corrupted streams: the same verdict (and positions) */
                for (int trial = 0; trial < 12; trial++) {
                    size_t cl = pl;
                    memcpy(cb, pb, pl);
                    int kind = trial % 4;
                    size_t h = 1; /* keep the parameter (kind 3 rewrites all) */
                    if (kind == 0) {
                        for (int f = 0; f < 1 + trial / 4; f++) {
                            size_t bit = h * 8 + rnd() % ((pl - h) * 8);
                            cb[bit >> 3] ^= (uint8_t)(0x80u >> (bit & 7));
                        }
                    } else if (kind == 1) {
                        cl = h + rnd() % (pl - h);
                    } else if (kind == 2) {
                        cb[pl] = (uint8_t)(rnd() % 2 ? 0 : rnd());
                        cl = pl + 1;
                    } else {
                        for (size_t i = h + rnd() % (pl - h); i < pl; i++)
                            cb[i] = (uint8_t)rnd();
                    }
                    size_t cc = trial == 11 ? count - 1 : count;
                    int rv = t_golomb_ref(cb, cl, cc, n, ref);
                    for (int sparse = 0; sparse < 3; sparse++) {
                        int lv = t_golomb_lib(s, gd, cb, cl, vb, vl, cc, n, sparse, got, gv);
                        cr_assert_eq(lv, rv, "m %llu trial %d isa %s mode %d",
                                     (unsigned long long)m, trial, isas[ii], sparse);
                        if (rv == 0)
                            cr_assert(memcmp(got, ref, cc * 4) == 0);
                    }
                    t_golomb_ref(pb, pl, count, n, ref); /* restore the reference */
                }
            }
            cr_assert_eq(dc_kern_set_isa(was), DC_OK);
        }
    }
    /* Streams of two-code lookups only (6 codes of 2 bits a step) at
     * every count modulo a step, with the bound below, at and past the
     * last position */
    for (size_t count = 6000; count < 6012; count++) {
        uint64_t at = 0;
        for (size_t k = 0; k < count; k++) {
            g[k] = rnd() % 2;
            at += g[k] + 1;
        }
        size_t pl = t_golomb_write(g, count, 2, pb, pcap);
        for (size_t k = 0; k < count; k++)
            val[k] = (uint16_t)(1 + rnd() % 5);
        size_t vl;
        unsigned vm;
        dc_ent_rans_ways = 4;
        cr_assert_eq(dc_ent_val_encode(s, val, count, 2, 0, vb, vcap, &vl, &vm), DC_OK);
        dc_ent_rans_ways = 0;
        for (size_t ii = 0; ii < sizeof(isas) / sizeof(isas[0]); ii++) {
            if (!dc_kern_isa_supported(isas[ii]))
                continue;
            cr_assert_eq(dc_kern_set_isa(isas[ii]), DC_OK);
            for (uint64_t n = at - 2; n <= at + 1; n++) {
                int rv = t_golomb_ref(pb, pl, count, n, ref);
                cr_assert_eq(rv, n >= at ? 0 : -1);
                for (int sparse = 0; sparse < 3; sparse++) {
                    cr_assert_eq(t_golomb_lib(s, gd, pb, pl, vb, vl, count, n, sparse, got, gv),
                                 rv, "count %zu n %llu isa %s mode %d", count,
                                 (unsigned long long)n, isas[ii], sparse);
                    if (rv == 0)
                        cr_assert(memcmp(got, ref, count * 4) == 0);
                }
            }
        }
        cr_assert_eq(dc_kern_set_isa(was), DC_OK);
    }
    /* both step shapes and the two-code entries were exercised */
    cr_assert(two_code > 0 && three > 0 && four > 0, "%zu %zu %zu", two_code, three, four);
    dc_ent_scratch_free(s);
    free(g);
    free(ref);
    free(got);
    free(val);
    free(gv);
    free(pb);
    free(cb);
    free(vb);
    free(gd);
}
