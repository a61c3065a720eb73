/*
 * test_codec.c - the chunk codec and its entropy coders: byte-exact round
 * trips for every width and change rate (0 .. 100%), every encoding kind,
 * the entropy-bound figure on iid changes, and hostile payloads (truncated,
 * bit-flipped, wrong method) rejected with DC_ERR_FORMAT and dst untouched.
 */
#include <criterion/criterion.h>

#include "kernels/codec.h"
#include "kernels/entropy.h"
#include "kernels/kern.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define XORSHIFT_SEED 0x243F6A8885A308D3ull
#include "xorshift.h"

static double urand(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

/* next = base with a fraction `rate` of elements changed; the XOR words
 * are "BF16-like": mostly a few low bits, sometimes wide. */
static void make_pair(uint8_t *base, uint8_t *next, size_t n, unsigned w, double rate)
{
    for (size_t i = 0; i < n * w; i++)
        base[i] = (uint8_t)rnd();
    memcpy(next, base, n * w);
    for (size_t i = 0; i < n; i++) {
        if (urand() >= rate)
            continue;
        uint64_t x;
        unsigned r = (unsigned)(rnd() % 16);
        if (r < 10)
            x = 1;
        else if (r < 13)
            x = 3;
        else if (r < 15)
            x = 7 + (rnd() & 8);
        else
            x = rnd();
        if (w < 8)
            x &= (1ull << (8 * w)) - 1;
        if (x == 0)
            x = 1;
        uint64_t v = 0;
        memcpy(&v, next + i * w, w);
        v ^= x;
        memcpy(next + i * w, &v, w);
    }
}

static void roundtrip(size_t n, unsigned w, double rate, int with_base, uint16_t *enc_out,
                      dc_chunk_stats_t *st_out)
{
    size_t bytes = n * w;
    uint8_t *base = malloc(bytes + 1), *next = malloc(bytes + 1), *dst = malloc(bytes + 1);
    size_t cap = dc_codec_payload_bound(bytes);
    uint8_t *pay = malloc(cap);
    make_pair(base, next, n, w, rate);
    dc_codec_t *c;
    cr_assert_eq(dc_codec_create(bytes ? bytes : 1, &c), DC_OK);
    size_t len;
    uint16_t enc;
    dc_chunk_stats_t st;
    cr_assert_eq(dc_codec_encode(c, with_base ? base : NULL, next, n, w, pay, cap, &len, &enc, &st),
                 DC_OK, "%s", dc_last_error());
    cr_assert_leq(len, cap);
    memcpy(dst, base, bytes);
    cr_assert_eq(dc_codec_decode(c, enc, pay, len, dst, n, w), DC_OK,
                 "n=%zu w=%u rate=%g enc=0x%x: %s", n, w, rate, enc, dc_last_error());
    cr_assert_eq(memcmp(dst, next, bytes), 0, "n=%zu w=%u rate=%g enc=0x%x", n, w, rate, enc);
    /* inspect agrees */
    dc_chunk_stats_t is;
    cr_assert_eq(dc_codec_inspect(c, enc, pay, len, n, w, &is), DC_OK);
    cr_assert_eq(is.payload_bytes, len);
    if (dc_enc_kind(enc) == DC_ENC_XOR_SPARSE || dc_enc_kind(enc) == DC_ENC_XOR_DENSE)
        cr_assert_eq(is.changed, st.changed);
    if (enc_out)
        *enc_out = enc;
    if (st_out)
        *st_out = st;
    dc_codec_free(c);
    free(base);
    free(next);
    free(dst);
    free(pay);
}

Test(codec, roundtrip_every_width_and_rate)
{
    static const double rates[] = {0.0, 0.001, 0.01, 0.05, 0.2, 0.3, 0.5, 0.9, 1.0};
    static const size_t sizes[] = {1, 2, 3, 7, 64, 1000, 4099, 65537};
    static const unsigned widths[] = {1, 2, 4, 8};
    for (size_t r = 0; r < DC_ARRAY_SIZE(rates); r++)
        for (size_t s = 0; s < DC_ARRAY_SIZE(sizes); s++)
            for (size_t k = 0; k < DC_ARRAY_SIZE(widths); k++)
                roundtrip(sizes[s], widths[k], rates[r], 1, NULL, NULL);
}

Test(codec, no_base_is_put_dense)
{
    uint16_t enc;
    roundtrip(5000, 2, 1.0, 0, &enc, NULL);
    cr_assert_eq(dc_enc_kind(enc), DC_ENC_PUT_DENSE);
}

Test(codec, kinds_follow_the_change_rate)
{
    uint16_t enc;
    /* the default model: ctx-sparse (its positions methods are in the
     * payload) */
    roundtrip(100000, 2, 0.01, 1, &enc, NULL);
    cr_assert_eq(dc_enc_kind(enc), DC_ENC_CTX);
    cr_assert_eq(dc_enc_pos_method(enc), 0);
    /* model order0: xor-sparse */
    cr_assert_eq(dc_config_set("codec_model", "order0"), DC_OK);
    roundtrip(100000, 2, 0.01, 1, &enc, NULL);
    cr_assert_eq(dc_enc_kind(enc), DC_ENC_XOR_SPARSE);
    cr_assert_eq(dc_enc_pos_method(enc), DC_ENT_GOLOMB);
    cr_assert_eq(dc_enc_val_method(enc), DC_ENT_RANS);
    cr_assert_eq(dc_config_set("codec_model", NULL), DC_OK);
    roundtrip(100000, 2, 0.9, 1, &enc, NULL);
    cr_assert(dc_enc_kind(enc) == DC_ENC_XOR_DENSE || dc_enc_kind(enc) == DC_ENC_PUT_DENSE);
}

/* The key figure: on iid changes the payload is within 1.15x of
 * n*H(p) + count*H(XOR histogram), for BF16 chunks of 2M elements. */
Test(codec, payload_near_entropy_bound)
{
    static const double rates[] = {0.01, 0.03, 0.05};
    for (size_t r = 0; r < DC_ARRAY_SIZE(rates); r++) {
        dc_chunk_stats_t st;
        uint16_t enc;
        roundtrip(2u << 20, 2, rates[r], 1, &enc, &st);
        double ratio = (double)st.payload_bytes / (st.bound_bits / 8.0);
        cr_assert(st.bound_bits > 0);
        cr_assert_leq(ratio, 1.15, "rate %g: payload %llu, bound %.0f bytes, ratio %.3f",
                      rates[r], (unsigned long long)st.payload_bytes, st.bound_bits / 8,
                      ratio);
        cr_assert_geq(ratio, 0.99, "payload below the bound? ratio %.3f", ratio);
    }
}

Test(codec, special_float_values_survive)
{
    /* NaN payloads, -0.0, subnormals, infinities as BF16/F32/F64 bit patterns */
    static const uint16_t bf16[] = {0x7fc0, 0x7fc1, 0xffff, 0x8000, 0x0000, 0x0001, 0x7f80, 0xff80};
    size_t n = 4096;
    uint16_t *a = malloc(n * 2), *b = malloc(n * 2), *d = malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        a[i] = bf16[i % 8];
        b[i] = bf16[(i * 7 + (i % 3 == 0)) % 8];
    }
    dc_codec_t *c;
    cr_assert_eq(dc_codec_create(n * 2, &c), DC_OK);
    size_t cap = dc_codec_payload_bound(n * 2), len;
    uint8_t *pay = malloc(cap);
    uint16_t enc;
    cr_assert_eq(dc_codec_encode(c, a, b, n, 2, pay, cap, &len, &enc, NULL), DC_OK);
    memcpy(d, a, n * 2);
    cr_assert_eq(dc_codec_decode(c, enc, pay, len, d, n, 2), DC_OK);
    cr_assert_eq(memcmp(d, b, n * 2), 0);
    dc_codec_free(c);
    free(a);
    free(b);
    free(d);
    free(pay);
}

/* Hostile payloads: every truncation and many bit flips of valid payloads
 * either decode (a flip may still be a valid stream) or fail with
 * DC_ERR_FORMAT leaving dst untouched; never crash or write outside. */
Test(codec, hostile_payloads_rejected_cleanly)
{
    static const double rates[] = {0.0, 0.02, 0.6, 1.0};
    static const unsigned widths[] = {1, 2, 4, 8};
    for (size_t r = 0; r < DC_ARRAY_SIZE(rates); r++)
        for (size_t k = 0; k < DC_ARRAY_SIZE(widths); k++) {
            unsigned w = widths[k];
            size_t n = 3001, bytes = n * w;
            uint8_t *base = malloc(bytes), *next = malloc(bytes), *dst = malloc(bytes + 64);
            size_t cap = dc_codec_payload_bound(bytes), len;
            uint8_t *pay = malloc(cap), *bad = malloc(cap);
            make_pair(base, next, n, w, rates[r]);
            dc_codec_t *c;
            cr_assert_eq(dc_codec_create(bytes, &c), DC_OK);
            uint16_t enc;
            cr_assert_eq(dc_codec_encode(c, base, next, n, w, pay, cap, &len, &enc, NULL), DC_OK);
            for (size_t cut = 0; cut < len; cut += 1 + len / 97) {
                memcpy(dst, base, bytes);
                memset(dst + bytes, 0xAB, 64);
                dc_status_t st = dc_codec_decode(c, enc, pay, cut, dst, n, w);
                cr_assert_eq(st, DC_ERR_FORMAT, "truncated to %zu of %zu: %d", cut, len, st);
                cr_assert_eq(memcmp(dst, base, bytes), 0);
                cr_assert_eq(dst[bytes], 0xAB);
            }
            for (int f = 0; f < 300; f++) {
                memcpy(bad, pay, len);
                bad[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
                memcpy(dst, base, bytes);
                memset(dst + bytes, 0xAB, 64);
                dc_status_t st = dc_codec_decode(c, enc, bad, len, dst, n, w);
                cr_assert(st == DC_OK || st == DC_ERR_FORMAT);
                if (st != DC_OK)
                    cr_assert_eq(memcmp(dst, base, bytes), 0);
                for (int z = 0; z < 64; z++)
                    cr_assert_eq(dst[bytes + z], 0xAB);
            }
            /* every other encoding value on the same payload */
            for (unsigned e = 0; e < 0x1000; e += 7) {
                memcpy(dst, base, bytes);
                dc_status_t st = dc_codec_decode(c, (uint16_t)e, pay, len, dst, n, w);
                cr_assert(st == DC_OK || st == DC_ERR_FORMAT);
            }
            dc_codec_free(c);
            free(base);
            free(next);
            free(dst);
            free(pay);
            free(bad);
        }
}

Test(entropy, positions_roundtrip_and_reject)
{
    size_t n = 100000;
    uint32_t *pos = malloc(n * 4), *out = malloc(n * 4);
    uint8_t *buf = malloc(dc_ent_pos_bound(n, n));
    static const double rates[] = {0.0, 0.0001, 0.01, 0.3, 0.999, 1.0};
    for (size_t r = 0; r < DC_ARRAY_SIZE(rates); r++) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (urand() < rates[r])
                pos[k++] = (uint32_t)i;
        size_t len;
        cr_assert_eq(dc_ent_pos_encode(pos, k, n, buf, dc_ent_pos_bound(k, n), &len), DC_OK);
        cr_assert_eq(dc_ent_pos_decode(buf, len, k, n, out), DC_OK, "%s", dc_last_error());
        cr_assert_eq(memcmp(pos, out, k * 4), 0);
        if (rates[r] > 0.001 && rates[r] < 0.5) {
            double p = (double)k / n;
            double bound = n * -(p * log2(p) + (1 - p) * log2(1 - p)) / 8;
            cr_assert_leq(len, bound * 1.03 + 16, "positions %zu bytes vs H %.0f", len, bound);
        }
        /* wrong count or smaller n: rejected */
        if (k > 0) {
            cr_assert_eq(dc_ent_pos_decode(buf, len, k + 1, n, out), DC_ERR_FORMAT);
            cr_assert_eq(dc_ent_pos_decode(buf, len, k, pos[k - 1], out), DC_ERR_FORMAT);
        }
    }
    free(pos);
    free(out);
    free(buf);
}

Test(entropy, varint_limits)
{
    uint8_t b[16];
    const uint8_t *p;
    uint64_t v;
    size_t l = dc_ent_put_varint(b, UINT64_MAX);
    cr_assert_eq(l, 10);
    p = b;
    cr_assert_eq(dc_ent_get_varint(&p, b + l, &v), DC_OK);
    cr_assert_eq(v, UINT64_MAX);
    p = b;
    cr_assert_eq(dc_ent_get_varint(&p, b + 9, &v), DC_ERR_FORMAT);
    memset(b, 0xff, sizeof(b));
    p = b;
    cr_assert_eq(dc_ent_get_varint(&p, b + 16, &v), DC_ERR_FORMAT);
}

Test(entropy, values_every_method_roundtrip)
{
    dc_ent_scratch_t *s;
    size_t n = 20000;
    cr_assert_eq(dc_ent_scratch_create(n * 8, &s), DC_OK);
    uint8_t *v = malloc(n * 8), *o = malloc(n * 8);
    size_t cap = dc_ent_val_bound(n, 8);
    uint8_t *buf = malloc(cap);
    for (unsigned w = 1; w <= 8; w *= 2) {
        for (int shape = 0; shape < 3; shape++) {
            for (size_t i = 0; i < n * w; i++)
                v[i] = shape == 0 ? 0 : shape == 1 ? (uint8_t)(rnd() % 3) : (uint8_t)rnd();
            size_t len;
            unsigned m;
            cr_assert_eq(dc_ent_val_encode(s, v, n, w, 1, buf, cap, &len, &m), DC_OK);
            cr_assert_eq(dc_ent_val_decode(s, m, buf, len, n, w, o), DC_OK, "w=%u %s", w,
                         dc_ent_method_name(m));
            cr_assert_eq(memcmp(v, o, n * w), 0);
            if (len > 0)
                cr_assert_eq(dc_ent_val_decode(s, m, buf, len - 1, n, w, o), DC_ERR_FORMAT);
        }
    }
    cr_assert_eq(dc_ent_val_decode(s, 9, buf, 10, 1, 1, o), DC_ERR_FORMAT);
    dc_ent_scratch_free(s);
    free(v);
    free(o);
    free(buf);
}

/* Changed positions with gaps from a mix of short and long runs, so that
 * the Golomb table both hits and misses (codes longer than its 12 bits)
 * inside the interleaved positions+values loop. */
static void make_clustered(uint8_t *base, uint8_t *next, size_t n, unsigned w)
{
    for (size_t i = 0; i < n * w; i++)
        base[i] = (uint8_t)rnd();
    memcpy(next, base, n * w);
    size_t i = rnd() % 50;
    while (i < n) {
        uint64_t x = 1 + (rnd() % 13 == 0 ? rnd() : rnd() % 7);
        uint64_t v = 0;
        memcpy(&v, next + i * w, w);
        v ^= x & (w == 8 ? ~0ull : (1ull << (8 * w)) - 1);
        if (v == 0 || memcmp(&v, base + i * w, w) == 0)
            v ^= 1;
        memcpy(next + i * w, &v, w);
        unsigned r = (unsigned)(rnd() % 100);
        i += 1 + (r < 70 ? rnd() % 12 : r < 95 ? rnd() % 120 : 500 + rnd() % 4000);
    }
}

/*
 * Sparse chunks large enough for the fast decoders (table Golomb codes,
 * four-way rANS, positions and values in one loop, its BMI2 build), under
 * every kernel ISA: byte-exact through dc_codec_decode and
 * dc_codec_decode_digest (in place and into a new buffer, with digests),
 * and hostile payloads (truncated, bit-flipped) either decode or fail with
 * DC_ERR_FORMAT leaving dst as it was and nothing written past it.
 */
Test(codec, sparse_fast_paths_every_isa)
{
    static const char *const isas[] = {"scalar", "avx2", "avx512"};
    char keep[16];
    snprintf(keep, sizeof(keep), "%s", dc_kern_isa());
    const size_t n = 300001;
    const unsigned w = 2;
    const size_t bytes = n * w;
    uint8_t *base = malloc(bytes), *next = malloc(bytes), *dst = malloc(bytes + 64);
    uint8_t *src = malloc(bytes);
    size_t cap = dc_codec_payload_bound(bytes);
    uint8_t *pay = malloc(cap), *bad = malloc(cap);
    cr_assert(base && next && dst && src && pay && bad);
    dc_codec_t *c;
    cr_assert_eq(dc_codec_create(bytes, &c), DC_OK);
    /* the order0 kinds' fused decoders (ctx-sparse has tests of its own) */
    dc_codec_set_model(c, DC_CODEC_MODEL_ORDER0);
    for (int pat = 0; pat < 3; pat++) {
        if (pat == 0)
            make_pair(base, next, n, w, 0.03);
        else if (pat == 1)
            make_pair(base, next, n, w, 0.15);
        else
            make_clustered(base, next, n, w);
        size_t len;
        uint16_t enc;
        cr_assert_eq(dc_codec_encode(c, base, next, n, w, pay, cap, &len, &enc, NULL), DC_OK);
        cr_assert_eq(dc_enc_kind(enc), DC_ENC_XOR_SPARSE, "pattern %d enc 0x%x", pat, enc);
        cr_assert_eq(dc_enc_val_method(enc), DC_ENT_RANS, "pattern %d enc 0x%x", pat, enc);
        dc_digest_t want = dc_digest128(next, bytes), want_src = dc_digest128(base, bytes);
        for (size_t ii = 0; ii < DC_ARRAY_SIZE(isas); ii++) {
            if (!dc_kern_isa_supported(isas[ii]))
                continue;
            cr_assert_eq(dc_kern_set_isa(isas[ii]), DC_OK);
            memcpy(dst, base, bytes);
            cr_assert_eq(dc_codec_decode(c, enc, pay, len, dst, n, w), DC_OK, "%s: %s",
                         isas[ii], dc_last_error());
            cr_assert_eq(memcmp(dst, next, bytes), 0, "pattern %d isa %s", pat, isas[ii]);
            dc_digest_t dg, sg;
            memcpy(dst, base, bytes);
            cr_assert_eq(dc_codec_decode_digest(c, enc, pay, len, dst, dst, n, w, &sg, &dg), DC_OK);
            cr_assert_eq(memcmp(dst, next, bytes), 0, "in place, pattern %d isa %s", pat,
                         isas[ii]);
            cr_assert(dc_digest_eq(dg, want) && dc_digest_eq(sg, want_src));
            memcpy(src, base, bytes);
            memset(dst, 0, bytes);
            cr_assert_eq(dc_codec_decode_digest(c, enc, pay, len, src, dst, n, w, &sg, &dg), DC_OK);
            cr_assert_eq(memcmp(dst, next, bytes), 0, "new buffer, pattern %d isa %s", pat,
                         isas[ii]);
            cr_assert(dc_digest_eq(dg, want) && dc_digest_eq(sg, want_src));
            /* hostile: truncated, and single bit flips anywhere */
            for (size_t cut = 0; cut < len; cut += 1 + len / 41) {
                memcpy(dst, base, bytes);
                memset(dst + bytes, 0xAB, 64);
                cr_assert_eq(dc_codec_decode_digest(c, enc, pay, cut, dst, dst, n, w, NULL, &dg),
                             DC_ERR_FORMAT, "truncated to %zu of %zu", cut, len);
                cr_assert_eq(memcmp(dst, base, bytes), 0);
                cr_assert_eq(dst[bytes], 0xAB);
            }
            for (int f = 0; f < 120; f++) {
                memcpy(bad, pay, len);
                bad[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
                memcpy(dst, base, bytes);
                memset(dst + bytes, 0xAB, 64);
                dc_status_t st = f & 1 ? dc_codec_decode(c, enc, bad, len, dst, n, w)
                                       : dc_codec_decode_digest(c, enc, bad, len, dst, dst, n,
                                                                w, NULL, &dg);
                cr_assert(st == DC_OK || st == DC_ERR_FORMAT);
                if (st != DC_OK)
                    cr_assert_eq(memcmp(dst, base, bytes), 0);
                for (int z = 0; z < 64; z++)
                    cr_assert_eq(dst[bytes + z], 0xAB);
            }
        }
    }
    cr_assert_eq(dc_kern_set_isa(keep), DC_OK);
    dc_codec_free(c);
    free(base);
    free(next);
    free(dst);
    free(src);
    free(pay);
    free(bad);
}

/* The Golomb positions coder against a bit-by-bit reference of the stream
 * layout (entropy.h): byte-exact for uniform, clustered and extreme gaps
 * (codes longer than one 56-bit put, the largest gap of a 2^32-element
 * chunk), with every kernel ISA (the encoder has scalar, BMI2 and AVX-512
 * builds), and exact about its output capacity (cap == len fits, one byte
 * less is DC_ERR_BUSY). */
static size_t golomb_reference(const uint32_t *pos, size_t count, uint64_t m, uint8_t *dst)
{
    size_t h = dc_ent_put_varint(dst, m), bit = 0;
    unsigned b = 0;
    while ((1ull << b) < m)
        b++;
    uint64_t cut = (1ull << b) - m;
    uint8_t *bits = dst + h;
#define PUTBIT(v)                                                             \
    do {                                                                      \
        if (v)                                                                \
            bits[bit >> 3] |= (uint8_t)(0x80u >> (bit & 7));                  \
        bit++;                                                                \
    } while (0)
    int64_t prev = -1;
    for (size_t k = 0; k < count; k++) {
        uint64_t g = (uint64_t)((int64_t)pos[k] - prev - 1);
        prev = pos[k];
        uint64_t q = g / m, r = g % m;
        for (uint64_t j = 0; j < q; j++)
            PUTBIT(0);
        PUTBIT(1);
        unsigned rb = r < cut ? b - 1 : b;
        uint64_t rv = r < cut ? r : r + cut;
        for (unsigned j = rb; j-- > 0;)
            PUTBIT((rv >> j) & 1);
    }
#undef PUTBIT
    return h + (bit + 7) / 8;
}

Test(entropy, golomb_matches_bitwise_reference)
{
    const size_t maxc = 200000;
    uint32_t *pos = malloc(maxc * 4), *out = malloc(maxc * 4);
    static const char *const isas[] = {"scalar", "avx2", "avx512"};
    const char *was = dc_kern_isa();
    for (int si = 0; si < 30; si++) {
        int shape = si % 10;
        if (!dc_kern_isa_supported(isas[si / 10]))
            continue;
        cr_assert_eq(dc_kern_set_isa(isas[si / 10]), DC_OK);
        size_t k = 0;
        uint64_t n = 1u << 20;
        switch (shape) {
        case 0: break;                                           /* none */
        case 1: pos[k++] = 0; break;                             /* one, first */
        case 2: n = 1ull << 32; pos[k++] = UINT32_MAX; break;    /* largest gap */
        case 3:                                                  /* all */
            for (; k < 4097; k++)
                pos[k] = (uint32_t)k;
            n = k;
            break;
        case 4: /* clusters and huge gaps: m small, q far past one put */
            n = 1ull << 32;
            for (uint64_t base = 0; base < 4000000000u; base += 997000003u)
                for (uint32_t j = 0; j < 3000; j++)
                    pos[k++] = (uint32_t)(base + j);
            break;
        case 8: /* every 24th gap ~35 m: codes of ~50 bits beside short ones
                 * (each fits one put, no two together) */
            n = 1u << 28;
            for (uint32_t i = 0, at = 0; i < 3000; i++) {
                at += i % 24 == 23 ? (1u << 20) : 1;
                pos[k++] = at;
            }
            break;
        case 5: /* mid-size m with gaps of thousands of m */
            for (uint32_t i = 0; i < (1u << 20); i += 13)
                if (i < 40000 || i > 1000000)
                    pos[k++] = i;
            break;
        default: { /* uniform at 0.5%, 4%, 30% */
            double rate = shape == 6 ? 0.005 : shape == 7 ? 0.04 : 0.3;
            for (uint32_t i = 0; i < (1u << 19); i++)
                if (urand() < rate)
                    pos[k++] = i;
            n = 1u << 19;
            break;
        }
        }
        cr_assert_leq(k, maxc);
        /* (these streams are far below the bound's n/8 term) */
        size_t cap = DC_MIN(dc_ent_pos_bound(k, n), (size_t)1 << 22);
        uint8_t *buf = malloc(cap), *ref = calloc(1, cap + 16);
        size_t len;
        cr_assert_eq(dc_ent_pos_encode(pos, k, n, buf, cap, &len), DC_OK, "shape %d", shape);
        const uint8_t *p = buf;
        uint64_t m;
        cr_assert_eq(dc_ent_get_varint(&p, buf + len, &m), DC_OK);
        size_t rlen = golomb_reference(pos, k, m, ref);
        cr_assert_eq(len, rlen, "shape %d: %zu bytes, reference %zu", shape, len, rlen);
        cr_assert_eq(memcmp(buf, ref, len), 0, "shape %d: stream differs from reference", shape);
        cr_assert_eq(dc_ent_pos_decode(buf, len, k, n, out), DC_OK, "shape %d", shape);
        cr_assert_eq(memcmp(out, pos, k * 4), 0, "shape %d", shape);
        /* exactly len bytes of room suffice; one less does not */
        uint8_t *tight = malloc(len);
        size_t tl;
        cr_assert_eq(dc_ent_pos_encode(pos, k, n, tight, len, &tl), len >= 10 ? DC_OK : DC_ERR_BUSY,
                     "shape %d cap %zu", shape, len);
        if (len >= 10) {
            cr_assert_eq(tl, len);
            cr_assert_eq(memcmp(tight, ref, len), 0, "shape %d tight", shape);
        }
        if (len > 10)
            cr_assert_eq(dc_ent_pos_encode(pos, k, n, tight, len - 1, &tl), DC_ERR_BUSY,
                         "shape %d cap %zu", shape, len - 1);
        free(tight);
        free(buf);
        free(ref);
    }
    cr_assert_eq(dc_kern_set_isa(was), DC_OK);
    free(pos);
    free(out);
}

/* A bit-at-a-time Golomb decoder with the verdicts of the decoder's careful
 * path (dc_gd_careful, dc_golomb_dec_finish): 0 and the positions, or -1. */
static int golomb_ref_decode(const uint8_t *src, size_t len, size_t count, uint64_t n,
                             uint32_t *out)
{
    const uint8_t *p = src;
    uint64_t m;
    if (dc_ent_get_varint(&p, src + len, &m) != DC_OK || m < 1 || m > (1ull << 32) || count > n)
        return -1;
    unsigned b = 0;
    while ((1ull << b) < m)
        b++;
    const uint64_t cut = (1ull << b) - m, nbits = (uint64_t)(src + len - p) * 8;
    uint64_t bit = 0, next = 0;
#define GETBIT() ((p[bit >> 3] >> (7 - (bit & 7))) & 1u)
    for (size_t k = 0; k < count; k++) {
        uint64_t q = 0;
        for (;;) {
            if (bit >= nbits)
                return -1;
            if (GETBIT()) {
                bit++;
                break;
            }
            bit++;
            if (++q > n)
                return -1;
        }
        uint64_t rem = 0;
        if (b) {
            if (nbits - bit < b - 1)
                return -1;
            for (unsigned j = 0; j + 1 < b; j++, bit++)
                rem = rem << 1 | GETBIT();
            if (rem >= cut) {
                if (bit >= nbits)
                    return -1;
                rem = (rem << 1 | GETBIT()) - cut;
                bit++;
                if (rem >= m)
                    return -1;
            }
        }
        uint64_t g = q * m + rem, ps = next + g;
        if (g > n || ps >= n)
            return -1;
        out[k] = (uint32_t)ps;
        next = ps + 1;
    }
    /* trailing: fewer than 8 bits left, all of them zero */
    if (nbits - bit >= 8)
        return -1;
    for (; bit < nbits; bit++)
        if (GETBIT())
            return -1;
#undef GETBIT
    return 0;
}

/* The decoder's table-less loop (streams of < 4096 codes, codes longer
 * than the 12-bit table): every m from 1 to 2^31, quotients of 0 to past
 * one load, streams shorter than one load; decoded whole and in steps of
 * 1..7 codes (dc_ent_sparse_run resumes it so); truncated and bit-flipped
 * streams get the verdict of a bit-at-a-time decoder, under every ISA. */
Test(entropy, golomb_tableless_decoder_matches_reference)
{
    static const char *const isas[] = {"scalar", "avx2", "avx512"};
    const char *was = dc_kern_isa();
    const size_t maxc = 4000;
    uint32_t *pos = malloc(maxc * 4), *out = malloc(maxc * 4), *rout = malloc(maxc * 4);
    dc_golomb_dec_t *d = malloc(sizeof(*d));
    cr_assert(pos && out && rout && d);
    size_t cases = 0;
    for (int ii = 0; ii < 3; ii++) {
        if (!dc_kern_isa_supported(isas[ii]))
            continue;
        cr_assert_eq(dc_kern_set_isa(isas[ii]), DC_OK);
        for (unsigned sh = 0; sh < 40; sh++) {
            /* k changes spread over n: mean gap (and so m) from 1 to ~2^31 */
            size_t k = sh < 4 ? sh : 3 + (rnd() % (sh < 20 ? 40 : maxc - 3));
            uint64_t n = (sh % 8 == 7) ? (1ull << 32) : (uint64_t)k << (sh % 31);
            if (n < k + 1)
                n = k + 1;
            if (n > (1ull << 32))
                n = 1ull << 32;
            /* sorted distinct positions: uniform, or clustered with a few
             * huge gaps (long quotients beside short codes) */
            uint64_t at = 0;
            for (size_t i = 0; i < k; i++) {
                uint64_t room = n - at - (k - i); /* keep k - i - 1 more < n */
                uint64_t g = room / (k - i) * 2;
                if (sh % 3 == 1)
                    g = rnd() % 7 == 0 ? room / 2 : (room > 64 ? 3 : 0);
                g = g ? rnd() % (g + 1) : 0;
                if (g > room)
                    g = room;
                pos[i] = (uint32_t)(at + g);
                at += g + 1;
            }
            size_t cap = DC_MIN(dc_ent_pos_bound(k, n), (size_t)1 << 24);
            uint8_t *buf = malloc(cap), *bad = malloc(cap + 1);
            size_t len;
            cr_assert_eq(dc_ent_pos_encode(pos, k, n, buf, cap, &len), DC_OK, "shape %u", sh);
            cr_assert_eq(golomb_ref_decode(buf, len, k, n, rout), 0, "shape %u", sh);
            cr_assert_eq(memcmp(rout, pos, k * 4), 0, "shape %u: reference", sh);
            cr_assert_eq(dc_ent_pos_decode(buf, len, k, n, out), DC_OK, "%s shape %u: %s",
                         isas[ii], sh, dc_last_error());
            cr_assert_eq(memcmp(out, pos, k * 4), 0, "%s shape %u", isas[ii], sh);
            /* in steps */
            cr_assert_eq(dc_golomb_dec_init(d, buf, len, k, n), DC_OK);
            memset(out, 0, k * 4);
            for (size_t up = 0; up < k;) {
                up = DC_MIN(k, up + 1 + rnd() % 7);
                cr_assert_eq(dc_golomb_dec_run(d, out, up), DC_OK, "%s shape %u", isas[ii], sh);
            }
            cr_assert_eq(dc_golomb_dec_finish(d), DC_OK);
            cr_assert_eq(memcmp(out, pos, k * 4), 0, "%s shape %u steps", isas[ii], sh);
            /* hostile: every truncation of a short stream (some of a long
             * one), bit flips, one count too many, an n too small */
            for (size_t t = 0; t < 200; t++) {
                size_t bl = len;
                memcpy(bad, buf, len);
                size_t kk = k;
                uint64_t nn = n;
                if (t < 100)
                    bl = len < 100 ? DC_MIN(t, len) : rnd() % len;
                else if (t < 190)
                    bad[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
                else if (t < 195)
                    kk = k + 1;
                else if (k)
                    nn = t == 195 ? pos[k - 1] : pos[rnd() % k]; /* one past the chunk */
                int rv = golomb_ref_decode(bad, bl, kk, nn, rout);
                dc_status_t st = dc_ent_pos_decode(bad, bl, kk, nn, out);
                cr_assert_eq(st, rv == 0 ? DC_OK : DC_ERR_FORMAT, "%s shape %u case %zu",
                             isas[ii], sh, t);
                if (rv == 0)
                    cr_assert_eq(memcmp(out, rout, kk * 4), 0, "%s shape %u case %zu", isas[ii],
                                 sh, t);
                cases++;
            }
            free(buf);
            free(bad);
        }
    }
    cr_assert_gt(cases, 0);
    cr_assert_eq(dc_kern_set_isa(was), DC_OK);
    free(pos);
    free(out);
    free(rout);
    free(d);
}

/* Apply decoded lists the way a device receiver does (engine/devpath.c),
 * with the CPU kernels. */
static void apply_lists(uint8_t *dst, size_t n, unsigned w, unsigned kind, const uint32_t *pos,
                        const uint8_t *words, size_t count)
{
    if (kind == DC_ENC_XOR_SPARSE || kind == DC_ENC_PUT_SPARSE) {
        for (size_t k = 0; k < count; k++) {
            cr_assert_lt(pos[k], n, "position %u out of range", pos[k]);
            if (k > 0)
                cr_assert_gt(pos[k], pos[k - 1], "positions not increasing at %zu", k);
        }
        if (kind == DC_ENC_PUT_SPARSE)
            cr_assert_eq(dc_kern_put_scatter(dst, n, w, pos, words, count), DC_OK);
        else
            cr_assert_eq(dc_kern_xor_scatter(dst, n, w, pos, words, count), DC_OK);
    } else if (kind == DC_ENC_XOR_DENSE) {
        cr_assert_eq(count, n);
        dc_kern_xor_dense(dst, words, n * w);
    } else {
        cr_assert_eq(count, n);
        memcpy(dst, words, n * w);
    }
}

/* dc_codec_decode_lists (the device receiver's host half): the lists it
 * gives, applied to the baseline, are the target for every kind it takes
 * (put-sparse: new words put at the positions); ctx, which decodes
 * against the baseline, is refused with the reason;
 * truncated and bit-flipped payloads get the decoder's verdict. */
Test(codec, decode_lists_match_the_apply)
{
    static const double rates[] = {0.0, 0.003, 0.02, 0.2, 0.6, 1.0};
    static const unsigned widths[] = {1, 2, 4, 8};
    unsigned seen[DC_ENC_KIND_MAX + 1] = {0};
    for (size_t r = 0; r < DC_ARRAY_SIZE(rates); r++)
        for (size_t k = 0; k < DC_ARRAY_SIZE(widths); k++)
            for (int model = 0; model < 2; model++)
                for (int with_base = 0; with_base < 2; with_base++) {
                    unsigned w = widths[k];
                    size_t n = 5003, bytes = n * w, cap = dc_codec_payload_bound(bytes), len;
                    uint8_t *base = malloc(bytes), *next = malloc(bytes), *dst = malloc(bytes);
                    uint8_t *pay = malloc(cap), *bad = malloc(cap);
                    make_pair(base, next, n, w, rates[r]);
                    dc_codec_t *c;
                    cr_assert_eq(dc_codec_create(bytes, &c), DC_OK);
                    dc_codec_set_model(c, model ? DC_CODEC_MODEL_CTX : DC_CODEC_MODEL_ORDER0);
                    uint16_t enc;
                    cr_assert_eq(dc_codec_encode(c, with_base ? base : NULL, next, n, w, pay, cap,
                                                 &len, &enc, NULL),
                                 DC_OK);
                    unsigned kind = dc_enc_kind(enc);
                    seen[kind]++;
                    const uint32_t *pos;
                    const uint8_t *words;
                    size_t count;
                    dc_status_t st = dc_codec_decode_lists(c, enc, pay, len, n, w, &pos, &words,
                                                           &count);
                    if (kind == DC_ENC_CTX) {
                        cr_assert_eq(st, DC_ERR_UNSUPPORTED);
                        cr_assert(strstr(dc_last_error(), "baseline"), "%s", dc_last_error());
                    } else {
                        cr_assert_eq(st, DC_OK, "kind %u: %s", kind, dc_last_error());
                        memcpy(dst, base, bytes);
                        apply_lists(dst, n, w, kind, pos, words, count);
                        cr_assert_eq(memcmp(dst, next, bytes), 0, "kind %u w=%u rate=%g", kind,
                                     w, rates[r]);
                        if (kind == DC_ENC_XOR_SPARSE) { /* the undo record is there */
                            size_t ul;
                            uint16_t ue;
                            cr_assert_eq(dc_codec_undo_payload(c, n, w, bad, cap, &ul, &ue),
                                         DC_OK, "%s", dc_last_error());
                        }
                        for (size_t cut = 0; cut < len; cut += 1 + len / 31)
                            cr_assert_eq(dc_codec_decode_lists(c, enc, pay, cut, n, w, &pos,
                                                               &words, &count),
                                         DC_ERR_FORMAT, "truncated to %zu of %zu", cut, len);
                        for (int f = 0; f < 50 && len > 0; f++) {
                            memcpy(bad, pay, len);
                            bad[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
                            st = dc_codec_decode_lists(c, enc, bad, len, n, w, &pos, &words,
                                                       &count);
                            cr_assert(st == DC_OK || st == DC_ERR_FORMAT);
                            if (st == DC_OK) {
                                memcpy(dst, base, bytes);
                                apply_lists(dst, n, w, kind, pos, words, count);
                            }
                        }
                    }
                    dc_codec_free(c);
                    free(base);
                    free(next);
                    free(dst);
                    free(pay);
                    free(bad);
                }
    /* (put-sparse needs XOR words that do not compress; make_pair's do) */
    static const unsigned want[] = {DC_ENC_XOR_SPARSE, DC_ENC_XOR_DENSE, DC_ENC_PUT_DENSE,
                                    DC_ENC_CTX};
    for (size_t i = 0; i < DC_ARRAY_SIZE(want); i++)
        cr_assert_gt(seen[want[i]], 0, "no %s chunk was made", dc_enc_kind_name(want[i]));
}
