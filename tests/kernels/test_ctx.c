/*
 * test_ctx.c - the base-conditioned ctx-sparse chunk kind (kernels/ctx.h):
 * exact round trips for every width, change rate and special value (NaN
 * payloads, -0.0, infinities, sign changes, wrap-around steps), every ISA's
 * scan giving the same masks, ranks and positions, the step and new-word
 * value modes, the model beating the order-0 bound on magnitude-dependent
 * changes, and hostile payloads refused with DC_ERR_FORMAT, dst untouched.
 */
#include <criterion/criterion.h>

#include "kernels/codec.h"
#include "kernels/ctx.h"
#include "kernels/ctx_scan.h"
#include "kernels/kern.h"
#include "kernels/kern_isa.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define XORSHIFT_SEED 0x9E3779B97F4A7C15ull
#include "xorshift.h"

static double urand(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

static uint64_t word_get(const uint8_t *p, unsigned w)
{
    uint64_t v = 0;
    memcpy(&v, p, w);
    return v;
}

static void word_put(uint8_t *p, unsigned w, uint64_t v) { memcpy(p, &v, w); }

/* A float-like base word of w bytes: a random sign, an exponent spread
 * over a few binades (so that the magnitude classes differ), random
 * mantissa. */
static uint64_t float_word_d(unsigned w, unsigned *binade)
{
    unsigned bits = 8 * w;
    unsigned ebits = w == 1 ? 4 : w == 2 ? 8 : w == 4 ? 8 : 11;
    unsigned mbits = bits - 1 - ebits;
    uint64_t bias = (1ull << (ebits - 1)) - 1;
    unsigned d = (unsigned)(rnd() % (ebits > 4 ? 12 : 5));
    uint64_t e = bias - 1 - d;
    *binade = d;
    uint64_t m = mbits ? rnd() & ((1ull << mbits) - 1) : 0;
    uint64_t s = rnd() & 1;
    return (s << (bits - 1)) | (e << mbits) | m;
}

static uint64_t float_word(unsigned w)
{
    unsigned d;
    return float_word_d(w, &d);
}

/* next: an optimizer-like step of +-1..3 units (mostly 1) in sign-magnitude order,
 * taken with a probability that falls with the magnitude (as a fixed-size
 * step changes small weights more often). */
static void make_opt_pair(uint8_t *base, uint8_t *next, size_t n, unsigned w, double rate)
{
    unsigned bits = 8 * w;
    uint64_t mask = w == 8 ? ~0ull : (1ull << bits) - 1;
    for (size_t i = 0; i < n; i++) {
        unsigned d;
        uint64_t b = float_word_d(w, &d), v = b;
        /* twice the rate per binade down (a fixed-size step against a
         * unit in the last place that halves), averaging about `rate` */
        double p = rate * 2.0 * pow(2.0, (double)d) / (w == 1 ? 6.2 : 341.3);
        if (urand() < p) {
            /* mostly one unit, as in real steps */
            unsigned r = (unsigned)(rnd() % 20);
            int64_t step = r < 17 ? 1 : r < 19 ? 2 : 3;
            if (rnd() & 1)
                step = -step;
            uint64_t k = dc_ctx_key(b, w);
            v = dc_ctx_unkey((k + (uint64_t)step) & mask, w);
        }
        word_put(base + i * w, w, b);
        word_put(next + i * w, w, v);
    }
}

typedef struct {
    size_t len;
    uint16_t enc;
    dc_chunk_stats_t st;
} enc_result_t;

/* Encode base -> next, decode in place and out of place (with digests),
 * every way exact; returns the encoding. */
static enc_result_t roundtrip(const uint8_t *base, const uint8_t *next, size_t n, unsigned w)
{
    size_t bytes = n * w;
    dc_codec_t *c;
    cr_assert_eq(dc_codec_create(bytes ? bytes : 1, &c), DC_OK);
    size_t cap = dc_codec_payload_bound(bytes);
    uint8_t *pay = malloc(cap), *dst = malloc(bytes + 1), *dst2 = malloc(bytes + 1);
    cr_assert(pay && dst && dst2);
    enc_result_t r;
    cr_assert_eq(dc_codec_encode(c, base, next, n, w, pay, cap, &r.len, &r.enc, &r.st), DC_OK,
                 "%s", dc_last_error());
    memcpy(dst, base, bytes);
    cr_assert_eq(dc_codec_decode(c, r.enc, pay, r.len, dst, n, w), DC_OK, "%s", dc_last_error());
    cr_assert(memcmp(dst, next, bytes) == 0, "in place: not exact (n %zu w %u enc 0x%x)", n, w,
              r.enc);
    dc_digest_t sd, dd;
    cr_assert_eq(dc_codec_decode_digest(c, r.enc, pay, r.len, base, dst2, n, w, &sd, &dd), DC_OK,
                 "%s", dc_last_error());
    cr_assert(memcmp(dst2, next, bytes) == 0, "out of place: not exact");
    dc_digest_t want = dc_digest128(next, bytes), want_s = dc_digest128(base, bytes);
    cr_assert(dd.lo == want.lo && dd.hi == want.hi && sd.lo == want_s.lo && sd.hi == want_s.hi);
    dc_chunk_stats_t is;
    cr_assert_eq(dc_codec_inspect(c, r.enc, pay, r.len, n, w, &is), DC_OK, "%s", dc_last_error());
    free(pay);
    free(dst);
    free(dst2);
    dc_codec_free(c);
    return r;
}

static const char *const g_isas[] = {"scalar", "avx2", "avx512"};

Test(ctx, every_width_and_rate_every_isa)
{
    static const double rates[] = {0.0005, 0.01, 0.05, 0.2};
    static const size_t ns[] = {1, 63, 64, 65, 4095, 4097, 70001};
    char keep[16];
    snprintf(keep, sizeof(keep), "%s", dc_kern_isa());
    for (size_t ii = 0; ii < DC_ARRAY_SIZE(g_isas); ii++) {
        if (dc_kern_set_isa(g_isas[ii]) != DC_OK)
            continue; /* this CPU or build does not run it */
        for (unsigned w = 1; w <= 8; w *= 2)
            for (size_t ni = 0; ni < DC_ARRAY_SIZE(ns); ni++)
                for (size_t ri = 0; ri < DC_ARRAY_SIZE(rates); ri++) {
                    size_t n = ns[ni];
                    uint8_t *b = malloc(n * w), *x = malloc(n * w);
                    make_opt_pair(b, x, n, w, rates[ri]);
                    enc_result_t r = roundtrip(b, x, n, w);
                    if (r.st.changed > 0 && r.st.changed <= n / 4)
                        cr_assert_eq(dc_enc_kind(r.enc), DC_ENC_CTX, "isa %s w %u n %zu",
                                     g_isas[ii], w, n);
                    free(b);
                    free(x);
                }
    }
    cr_assert_eq(dc_kern_set_isa(keep), DC_OK);
}

/* Special values: NaNs with payloads, both zeros, infinities, the largest
 * and smallest words, sign changes and steps that wrap around the key
 * space: every change exact. */
Test(ctx, special_values_exact)
{
    for (unsigned w = 1; w <= 8; w *= 2) {
        size_t n = 20000;
        uint8_t *b = malloc(n * w), *x = malloc(n * w);
        make_opt_pair(b, x, n, w, 0.01);
        unsigned bits = 8 * w;
        uint64_t mask = w == 8 ? ~0ull : (1ull << bits) - 1, top = 1ull << (bits - 1);
        uint64_t specials[] = {0,          top,            mask,           mask >> 1,
                               top | 1,    1,              (mask >> 1) - 1, top | (top >> 1),
                               top >> 1,   (top >> 1) | 5, mask ^ 1,       top - 1};
        size_t ns = DC_ARRAY_SIZE(specials);
        for (size_t i = 0; i < 600; i++) {
            size_t at = (size_t)(rnd() % n);
            word_put(b + at * w, w, specials[rnd() % ns]);
            word_put(x + at * w, w, rnd() % 3 == 0 ? rnd() & mask : specials[rnd() % ns]);
        }
        /* -0.0 <-> +0.0 and sign flips of the same magnitude */
        for (size_t i = 0; i < 50; i++) {
            size_t at = (size_t)(rnd() % n);
            uint64_t v = word_get(b + at * w, w);
            word_put(x + at * w, w, v ^ top);
        }
        enc_result_t r = roundtrip(b, x, n, w);
        (void)r;
        free(b);
        free(x);
    }
}

/* Values mode: +-1 unit steps are coded as steps (mode 1), random new
 * words of a random base as new words or XOR words, never larger than the
 * XOR words' order-0 code would make them. */
Test(ctx, value_modes)
{
    size_t n = 200000;
    unsigned w = 2;
    uint8_t *b = malloc(n * w), *x = malloc(n * w);
    make_opt_pair(b, x, n, w, 0.01);
    enc_result_t r = roundtrip(b, x, n, w);
    cr_assert_eq(dc_enc_kind(r.enc), DC_ENC_CTX);
    /* the payload's first byte: mode in bits 3-4 */
    dc_codec_t *c;
    cr_assert_eq(dc_codec_create(n * w, &c), DC_OK);
    size_t cap = dc_codec_payload_bound(n * w), len;
    uint8_t *pay = malloc(cap);
    uint16_t enc;
    cr_assert_eq(dc_codec_encode(c, b, x, n, w, pay, cap, &len, &enc, NULL), DC_OK);
    cr_assert_eq((pay[0] >> 3) & 3, 1, "steps expected, header 0x%02x", pay[0]);
    cr_assert((pay[0] & 7) >= 1, "more than one class expected, header 0x%02x", pay[0]);
    /* random new values: no steps */
    for (size_t i = 0; i < n; i++)
        if (rnd() % 100 == 0)
            word_put(x + i * w, w, rnd());
        else
            word_put(x + i * w, w, word_get(b + i * w, w));
    cr_assert_eq(dc_codec_encode(c, b, x, n, w, pay, cap, &len, &enc, NULL), DC_OK);
    cr_assert_neq((pay[0] >> 3) & 3, 1, "random values coded as steps (header 0x%02x)", pay[0]);
    roundtrip(b, x, n, w);
    free(pay);
    dc_codec_free(c);
    free(b);
    free(x);
}

/* The point of the kind: where the change rate depends on the magnitude
 * and values move by a few units, the payload is well below the order-0
 * bound n H(p) + count H(XOR words) (and within 10% of the model's own
 * entropy). */
Test(ctx, beats_the_order0_bound)
{
    size_t n = 1u << 21;
    unsigned w = 2;
    uint8_t *b = malloc(n * w), *x = malloc(n * w);
    make_opt_pair(b, x, n, w, 0.01);
    enc_result_t r = roundtrip(b, x, n, w);
    cr_assert_eq(dc_enc_kind(r.enc), DC_ENC_CTX);
    double b0 = r.st.bound_bits / 8.0, bc = r.st.ctx_bound_bits / 8.0;
    cr_assert(b0 > 0 && bc > 0 && bc < b0, "bounds %.0f %.0f", b0, bc);
    cr_assert((double)r.len < 0.85 * b0, "payload %zu vs order-0 bound %.0f", r.len, b0);
    cr_assert((double)r.len < 1.10 * bc + 64, "payload %zu vs model entropy %.0f", r.len, bc);
    /* order0 on the same chunk, for the record: above the ctx payload */
    cr_assert_eq(dc_config_set("codec_model", "order0"), DC_OK);
    enc_result_t o = roundtrip(b, x, n, w);
    cr_assert_eq(dc_config_set("codec_model", NULL), DC_OK);
    cr_assert_neq(dc_enc_kind(o.enc), DC_ENC_CTX);
    cr_assert(r.len < o.len, "ctx %zu, order0 %zu", r.len, o.len);
    free(b);
    free(x);
}

Test(ctx, bad_model_key)
{
    dc_codec_t *c;
    cr_assert_eq(dc_config_set("codec_model", "best"), DC_OK);
    cr_assert_eq(dc_codec_create(4096, &c), DC_ERR_INVALID);
    cr_assert(strstr(dc_last_error(), "codec_model") != NULL, "%s", dc_last_error());
    cr_assert_eq(dc_config_set("codec_model", NULL), DC_OK);
}

/* Every ISA's scan: the same ge masks, ranks and merged positions as the
 * scalar reference, for every width, thresholds count and length (partial
 * blocks and slabs). */
Test(ctx, scan_tables_agree)
{
    const dc_ctx_scan_ops_t *tabs[3] = {&dc_ctx_scan_scalar, NULL, NULL};
#if defined(__x86_64__)
    if (dc_kern_level_runs(DC_KERN_AVX2))
        tabs[1] = &dc_ctx_scan_avx2;
#endif
    char keep[16];
    snprintf(keep, sizeof(keep), "%s", dc_kern_isa());
    if (dc_kern_set_isa("avx512") == DC_OK)
        tabs[2] = dc_kern_cur()->ctx;
    cr_assert_eq(dc_kern_set_isa(keep), DC_OK);
    static const size_t ns[] = {1, 64, 100, 4096, 4160, 9000, 300000};
    for (unsigned w = 1; w <= 8; w *= 2)
        for (unsigned nt = 1; nt < DC_CTX_MAX_CLASSES; nt += 2)
            for (size_t ni = 0; ni < DC_ARRAY_SIZE(ns); ni++) {
                size_t n = ns[ni];
                uint8_t *b = malloc(n * w);
                for (size_t i = 0; i < n; i++)
                    word_put(b + i * w, w, float_word(w));
                uint64_t mag = (w == 8 ? ~0ull : (1ull << (8 * w)) - 1) >> 1;
                uint64_t thr[DC_CTX_MAX_CLASSES];
                for (unsigned j = 0; j < nt; j++)
                    thr[j] = (mag / (nt + 1)) * (j + 1) / 2 + (mag >> 2);
                /* 16-bit words, every other length: the codec's thresholds
                 * (bucket << 7, which the AVX2 scan compares as bytes), on
                 * buckets the words hold (float_word: exponents 115..126) */
                if (w == 2 && ni % 2)
                    for (unsigned j = 0; j < nt; j++)
                        thr[j] = (uint64_t)(116 + j * 11 / nt) << 7;
                size_t nb = (n + 63) / 64;
                uint64_t *ge0 = malloc(nb * nt * 8), *ge1 = malloc(nb * nt * 8);
                uint32_t *pos = malloc(n * 4), *pos1 = malloc(n * 4), *idx = malloc(n * 4);
                uint32_t *rnk0 = malloc(n * 4), *rnk1 = malloc(n * 4);
                uint8_t *cls0 = malloc(n), *cls1 = malloc(n), *bw0 = malloc(n * w),
                        *bw1 = malloc(n * w);
                uint64_t scratch[DC_CTX_SLAB * (DC_CTX_MAX_CLASSES - 1)];
                /* 6% and 0.3% changed: the merge deposits the ranks of
                 * classes with many changes in a slab and searches the
                 * blocks of the others (both paths) */
                size_t count = 0, every = (w + nt + ni) % 2 ? 17 : 301;
                for (size_t i = 0; i < n; i++)
                    if (rnd() % every == 0)
                        pos[count++] = (uint32_t)i;
                uint64_t pop0[DC_CTX_MAX_CLASSES], pop1[DC_CTX_MAX_CLASSES];
                tabs[0]->ge_masks(b, n, w, thr, nt, ge0);
                tabs[0]->rank(b, n, w, thr, nt, pos, count, cls0, rnk0, pop0, scratch);
                /* the reference against a count by element: class = the
                 * thresholds the magnitude reaches, rank = the class's
                 * elements before it */
                {
                    uint64_t seen[DC_CTX_MAX_CLASSES] = {0};
                    size_t kk = 0;
                    for (size_t i = 0; i < n; i++) {
                        uint64_t v = 0;
                        memcpy(&v, b + i * w, w);
                        uint64_t m = v & mag;
                        unsigned c = 0;
                        for (unsigned j = 0; j < nt; j++)
                            c += m >= thr[j];
                        if (kk < count && pos[kk] == i) {
                            cr_assert(cls0[kk] == c && rnk0[kk] == seen[c],
                                      "rank w %u nt %u n %zu: change %zu class %u rank %u, "
                                      "counted %u %llu",
                                      w, nt, n, kk, cls0[kk], rnk0[kk], c,
                                      (unsigned long long)seen[c]);
                            kk++;
                        }
                        seen[c]++;
                    }
                    for (unsigned c = 0; c <= nt; c++)
                        cr_assert_eq(pop0[c], seen[c], "population of class %u", c);
                }
                size_t off[DC_CTX_MAX_CLASSES + 1] = {0}, fill[DC_CTX_MAX_CLASSES];
                for (size_t k = 0; k < count; k++)
                    off[cls0[k] + 1]++;
                for (unsigned c = 0; c <= nt; c++)
                    off[c + 1] += off[c];
                memcpy(fill, off, sizeof(fill));
                for (size_t k = 0; k < count; k++)
                    idx[fill[cls0[k]]++] = rnk0[k];
                for (size_t t = 0; t < 3; t++) {
                    if (!tabs[t])
                        continue;
                    tabs[t]->ge_masks(b, n, w, thr, nt, ge1);
                    cr_assert(memcmp(ge0, ge1, nb * nt * 8) == 0, "%s ge w %u nt %u n %zu",
                              tabs[t]->name, w, nt, n);
                    tabs[t]->rank(b, n, w, thr, nt, pos, count, cls1, rnk1, pop1, scratch);
                    cr_assert(memcmp(cls0, cls1, count) == 0 && memcmp(rnk0, rnk1, count * 4) == 0 &&
                                  memcmp(pop0, pop1, (nt + 1) * 8) == 0,
                              "%s rank w %u nt %u n %zu", tabs[t]->name, w, nt, n);
                    cr_assert_eq(tabs[t]->merge(b, n, w, thr, nt, idx, off, pos1, bw1, scratch), 0u);
                    cr_assert(memcmp(pos, pos1, count * 4) == 0, "%s merge w %u nt %u n %zu",
                              tabs[t]->name, w, nt, n);
                    dc_kern_gather(b, w, pos, count, bw0);
                    cr_assert(memcmp(bw0, bw1, count * w) == 0, "%s base words", tabs[t]->name);
                    /* a rank past its class's population is refused */
                    if (count && off[nt + 1] > off[nt]) {
                        uint32_t keep_r = idx[off[nt + 1] - 1];
                        idx[off[nt + 1] - 1] = (uint32_t)pop0[nt];
                        cr_assert_eq(tabs[t]->merge(b, n, w, thr, nt, idx, off, pos1, NULL,
                                                    scratch),
                                     nt + 1, "%s", tabs[t]->name);
                        idx[off[nt + 1] - 1] = keep_r;
                    }
                }
                free(b);
                free(ge0);
                free(ge1);
                free(pos);
                free(pos1);
                free(idx);
                free(rnk0);
                free(rnk1);
                free(cls0);
                free(cls1);
                free(bw0);
                free(bw1);
            }
}

/* Hostile payloads: every truncation, bit flips, crafted headers: a clean
 * DC_ERR_FORMAT (or a result the digest would catch), dst untouched on
 * error, never a crash. */
Test(ctx, hostile_payloads)
{
    size_t n = 30000;
    unsigned w = 2;
    uint8_t *b = malloc(n * w), *x = malloc(n * w), *dst = malloc(n * w);
    make_opt_pair(b, x, n, w, 0.02);
    dc_codec_t *c;
    cr_assert_eq(dc_codec_create(n * w, &c), DC_OK);
    size_t cap = dc_codec_payload_bound(n * w), len;
    uint8_t *pay = malloc(cap), *bad = malloc(cap + 16);
    uint16_t enc;
    cr_assert_eq(dc_codec_encode(c, b, x, n, w, pay, cap, &len, &enc, NULL), DC_OK);
    cr_assert_eq(dc_enc_kind(enc), DC_ENC_CTX);
    cr_assert((pay[0] & 7) >= 1, "want several classes: header 0x%02x", pay[0]);
    size_t rejected = 0;
    for (size_t l = 0; l < len; l++) {
        memcpy(dst, b, n * w);
        dc_status_t s = dc_codec_decode(c, enc, pay, l, dst, n, w);
        cr_assert_eq(s, DC_ERR_FORMAT, "truncated to %zu of %zu: %d", l, len, s);
        cr_assert(memcmp(dst, b, n * w) == 0, "dst touched on error");
        rejected++;
    }
    for (int t = 0; t < 3000; t++) {
        memcpy(bad, pay, len);
        size_t at = t < 64 ? (size_t)t % len : (size_t)(rnd() % len);
        bad[at] ^= (uint8_t)(1u << (rnd() % 8));
        /* in place with the digest (the patch fused into the scan) */
        memcpy(dst, b, n * w);
        dc_digest_t dg;
        dc_status_t si = dc_codec_decode_digest(c, enc, bad, len, dst, dst, n, w, NULL, &dg);
        cr_assert(si == DC_OK || si == DC_ERR_FORMAT, "flip at %zu in place: %d", at, si);
        if (si != DC_OK)
            cr_assert(memcmp(dst, b, n * w) == 0, "in place: dst touched on error");
        else
            cr_assert(dc_digest_eq(dg, dc_digest128(dst, n * w)), "in place: digest");
        memcpy(dst, b, n * w);
        dc_status_t s = dc_codec_decode(c, enc, bad, len, dst, n, w);
        cr_assert_eq(s, si, "flip at %zu: in place %d, decode %d", at, si, s);
        if (s != DC_OK) {
            cr_assert_eq(s, DC_ERR_FORMAT);
            cr_assert(memcmp(dst, b, n * w) == 0, "dst touched on error");
            rejected++;
        }
    }
    /* crafted headers */
    static const struct {
        uint8_t h;
        const char *what;
    } hdrs[] = {{0x18, "mode 3"}, {0x20, "bit 5"}, {0x80, "bit 7"}};
    for (size_t i = 0; i < DC_ARRAY_SIZE(hdrs); i++) {
        memcpy(bad, pay, len);
        bad[0] = (uint8_t)((pay[0] & 7) | hdrs[i].h);
        cr_assert_eq(dc_codec_decode(c, enc, bad, len, dst, n, w), DC_ERR_FORMAT, "%s",
                     hdrs[i].what);
    }
    /* thresholds out of order / zero */
    unsigned K = (pay[0] & 7u) + 1;
    if (K >= 3) {
        memcpy(bad, pay, len);
        bad[2] = bad[1];
        cr_assert_eq(dc_codec_decode(c, enc, bad, len, dst, n, w), DC_ERR_FORMAT);
    }
    memcpy(bad, pay, len);
    bad[1] = 0;
    cr_assert_eq(dc_codec_decode(c, enc, bad, len, dst, n, w), DC_ERR_FORMAT);
    /* a positions method in the frame encoding */
    cr_assert_eq(dc_codec_decode(c, (uint16_t)(enc | (4u << 4)), pay, len, dst, n, w),
                 DC_ERR_FORMAT);
    /* a base whose classes are smaller than the payload's ranks: all
     * elements moved into the top class */
    memset(dst, 0x7f, n * w);
    dc_status_t s = dc_codec_decode(c, enc, pay, len, dst, n, w);
    cr_assert_eq(s, DC_ERR_FORMAT, "ranks past the populations of another base: %d", s);
    cr_assert(strstr(dc_last_error(), "population") != NULL, "%s", dc_last_error());
    /* the same in place with the digest (the patch fused into the scan:
     * the top class's slabs are patched before the short classes show,
     * and XORed back): refused, the chunk as it was */
    {
        uint8_t *keep = malloc(n * w);
        memset(dst, 0x7f, n * w);
        memcpy(keep, dst, n * w);
        dc_digest_t dg;
        s = dc_codec_decode_digest(c, enc, pay, len, dst, dst, n, w, NULL, &dg);
        cr_assert_eq(s, DC_ERR_FORMAT, "in place, ranks past the populations: %d", s);
        cr_assert(memcmp(dst, keep, n * w) == 0, "in place: a refused chunk was changed");
        free(keep);
    }
    /* and without a base (inspect) the streams are still checked */
    dc_chunk_stats_t st;
    cr_assert_eq(dc_codec_inspect(c, enc, pay, len, n, w, &st), DC_OK);
    cr_assert_eq(dc_codec_inspect(c, enc, pay, len / 2, n, w, &st), DC_ERR_FORMAT);
    cr_assert(rejected > len);
    free(pay);
    free(bad);
    free(dst);
    free(b);
    free(x);
    dc_codec_free(c);
}

/* The key mapping: a bijection on every 8- and 16-bit word, order
 * preserving on the floats' sign-magnitude order. */
Test(ctx, key_is_a_bijection)
{
    for (unsigned w = 1; w <= 2; w++) {
        uint64_t lim = 1ull << (8 * w);
        uint8_t *seen = calloc(lim, 1);
        for (uint64_t v = 0; v < lim; v++) {
            uint64_t k = dc_ctx_key(v, w);
            cr_assert(k < lim);
            cr_assert_eq(dc_ctx_unkey(k, w), v);
            cr_assert_eq(seen[k], 0);
            seen[k] = 1;
        }
        free(seen);
        /* +0.0 and -0.0 neighbours; larger magnitude: larger key when
         * positive, smaller when negative */
        uint64_t top = 1ull << (8 * w - 1);
        cr_assert_eq(dc_ctx_key(0, w), dc_ctx_key(top, w) + 1);
        cr_assert(dc_ctx_key(5, w) > dc_ctx_key(4, w));
        cr_assert(dc_ctx_key(top | 5, w) < dc_ctx_key(top | 4, w));
    }
    for (int i = 0; i < 100000; i++) {
        uint64_t v = rnd();
        cr_assert_eq(dc_ctx_unkey(dc_ctx_key(v, 8), 8), v);
        uint32_t u = (uint32_t)v;
        cr_assert_eq(dc_ctx_unkey(dc_ctx_key(u, 4), 4), u);
    }
}

/* The undo record a receiver keeps: after any sparse decode (in place with
 * the digest, the receiver's path; out of place; plain), the xor-sparse
 * payload of dc_codec_undo_payload turns the result back into the base,
 * for ctx-sparse, put-sparse and xor-sparse chunks. */
Test(ctx, undo_payload_restores_the_base)
{
    size_t n = 50000;
    for (unsigned w = 1; w <= 8; w *= 2)
        for (int model = 0; model < 2; model++)
            for (int path = 0; path < 3; path++) {
                uint8_t *b = malloc(n * w), *x = malloc(n * w), *dst = malloc(n * w);
                make_opt_pair(b, x, n, w, 0.02);
                if (model == 1) /* new words that do not compress as XOR: put-sparse */
                    for (size_t i = 0; i < n; i += 97)
                        word_put(x + i * w, w, rnd());
                cr_assert_eq(dc_config_set("codec_model", model ? "order0" : NULL), DC_OK);
                dc_codec_t *c;
                cr_assert_eq(dc_codec_create(n * w, &c), DC_OK);
                size_t cap = dc_codec_payload_bound(n * w), len, ul;
                uint8_t *pay = malloc(cap), *undo = malloc(cap);
                uint16_t enc, uenc;
                cr_assert_eq(dc_codec_encode(c, b, x, n, w, pay, cap, &len, &enc, NULL), DC_OK);
                cr_assert_eq(dc_codec_undo_payload(c, n, w, undo, cap, &ul, &uenc), DC_ERR_INVALID,
                             "no decode yet");
                dc_digest_t dg;
                memcpy(dst, b, n * w);
                if (path == 0)
                    cr_assert_eq(dc_codec_decode_digest(c, enc, pay, len, dst, dst, n, w, NULL, &dg),
                                 DC_OK, "%s", dc_last_error());
                else if (path == 1)
                    cr_assert_eq(dc_codec_decode_digest(c, enc, pay, len, b, dst, n, w, NULL, &dg),
                                 DC_OK, "%s", dc_last_error());
                else
                    cr_assert_eq(dc_codec_decode(c, enc, pay, len, dst, n, w), DC_OK);
                cr_assert(memcmp(dst, x, n * w) == 0);
                cr_assert_eq(dc_codec_undo_payload(c, n, w, undo, cap, &ul, &uenc), DC_OK, "%s",
                             dc_last_error());
                cr_assert_eq(dc_enc_kind(uenc), DC_ENC_XOR_SPARSE);
                cr_assert_eq(dc_codec_decode(c, uenc, undo, ul, dst, n, w), DC_OK, "%s",
                             dc_last_error());
                cr_assert(memcmp(dst, b, n * w) == 0, "w %u model %d path %d: not back at the base",
                          w, model, path);
                free(pay);
                free(undo);
                dc_codec_free(c);
                free(b);
                free(x);
                free(dst);
            }
    cr_assert_eq(dc_config_set("codec_model", NULL), DC_OK);
}
