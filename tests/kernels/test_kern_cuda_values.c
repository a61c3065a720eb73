/*
 * test_kern_cuda_values.c - the device payload decoders
 * (dc_kern_cuda_values_decode, dc_kern_cuda_golomb_decode;
 * kernels/kern_cuda.cu) byte-compared with the CPU's dc_ent_val_decode /
 * dc_ent_pos_decode: random streams of every method and rANS layout the
 * encoder picks (32-way, 4-way, planes, raw), then every truncation,
 * trailing bytes and many bit flips, where the device must give the CPU's
 * verdict (accept with the same bytes, or refuse) and never fault; and
 * whole xor-sparse payloads split as engine/devpath.c splits them, against
 * dc_codec_decode_lists.  Suite 'hw': skips with a reason without a GPU.
 *
 * Built a second time with DC_TEST_CUDA_EMU (tests/emu/test_emu_values.c,
 * suite 'emu'): the same tests on the emulated CUDA runtime.
 */
#include <criterion/criterion.h>

#include "kernels/codec.h"
#include "kernels/entropy.h"
#include "kernels/kern_cuda.h"

#include <stdlib.h>
#include <string.h>

#ifdef DC_TEST_CUDA_EMU
#include "cuda_emu_rt.h"
#define TEST_HAVE_CUDA 1
TestSuite(cuda_values, .init = dc_emu_install);
#define need_gpu() ((void)0)
#else
#define TEST_HAVE_CUDA DC_HAVE_CUDA
static void need_gpu(void)
{
    if (!TEST_HAVE_CUDA)
        cr_skip_test("CUDA kernels not built (nvcc not found at configure time)");
    if (!dc_kern_cuda_available())
        cr_skip_test("no CUDA device (cudaGetDeviceCount failed or returned 0)");
}
#endif

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* count words of w bytes, skewed like sparse XOR words (few bits set) */
static void fill_words(uint8_t *v, size_t count, unsigned w, unsigned spread)
{
    for (size_t i = 0; i < count * w; i++) {
        uint64_t r = rnd();
        v[i] = (uint8_t)((r & 3) == 0 ? (r >> 8) % spread : (r >> 8) & 1);
    }
}

typedef struct {
    dc_ent_scratch_t *s;
    uint8_t *dsrc, *dout; /* device */
    uint8_t *cpu, *gpu;   /* host results */
    size_t cap;
} bench_t;

static void bench_open(bench_t *b, size_t max_count)
{
    cr_assert_eq(dc_ent_scratch_create(max_count * 8, &b->s), DC_OK);
    b->cap = dc_ent_val_bound(max_count, 8) + 64;
    cr_assert_eq(dc_kern_cuda_malloc((void **)&b->dsrc, b->cap), DC_OK);
    cr_assert_eq(dc_kern_cuda_malloc((void **)&b->dout, max_count * 8 + 16), DC_OK);
    b->cpu = malloc(max_count * 8 + 16);
    b->gpu = malloc(max_count * 8 + 16);
    cr_assert(b->cpu && b->gpu);
}

static void bench_close(bench_t *b)
{
    dc_kern_cuda_free(b->dsrc);
    dc_kern_cuda_free(b->dout);
    free(b->cpu);
    free(b->gpu);
    dc_ent_scratch_free(b->s);
}

/* The device's verdict and bytes against the CPU's for one stream;
 * returns 1 when both accepted. */
static int compare(bench_t *b, unsigned method, const uint8_t *src, size_t len, size_t count,
                   unsigned w, const char *what)
{
    dc_status_t cs = dc_ent_val_decode(b->s, method, src, len, count, w, b->cpu);
    if (len)
        cr_assert_eq(dc_kern_cuda_h2d(b->dsrc, src, len), DC_OK);
    dc_status_t gs = dc_kern_cuda_values_decode(method, b->dsrc, len, count, w, b->dout, NULL);
    cr_assert_eq(gs == DC_OK, cs == DC_OK,
                 "%s (method %u, %zu bytes, %zu x %u): cpu %d, device %d (%s)", what, method,
                 len, count, w, cs, gs, dc_last_error());
    if (gs != DC_OK) {
        cr_assert_eq(gs, DC_ERR_FORMAT, "%s: device status %d (%s)", what, gs, dc_last_error());
        cr_assert(strstr(dc_last_error(), "device values decode") != NULL, "%s: message '%s'",
                  what, dc_last_error());
        return 0;
    }
    if (count)
        cr_assert_eq(dc_kern_cuda_d2h(b->gpu, b->dout, count * w), DC_OK);
    cr_assert(memcmp(b->cpu, b->gpu, count * w) == 0, "%s: device bytes differ from the CPU's",
              what);
    return 1;
}

static size_t encode(bench_t *b, const uint8_t *v, size_t count, unsigned w, uint8_t *dst,
                     unsigned *method)
{
    size_t len;
    cr_assert_eq(dc_ent_val_encode(b->s, v, count, w, 0, dst, b->cap, &len, method), DC_OK);
    return len;
}

/* the rANS layout of a DC_ENT_RANS stream: 32, 4, 2 or 1 ways */
static unsigned ways_of(const uint8_t *src)
{
    unsigned wf = src[0] & 0xC0u;
    return wf == 0xC0u ? 32 : wf == 0x40u ? 4 : wf == 0x80u ? 2 : 1;
}

Test(cuda_values, random_streams_bit_identical)
{
    need_gpu();
    bench_t b;
    bench_open(&b, 20000);
    uint8_t *v = malloc(20000 * 8), *enc = malloc(b.cap);
    const size_t counts[] = {0, 1, 31, 33, 500, 4095, 4096, 4097, 5003, 20000};
    const unsigned widths[] = {1, 2, 4, 8};
    unsigned seen32 = 0, seen4 = 0, seenplanes = 0, seenraw = 0;
    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
        for (unsigned wi = 0; wi < 4; wi++)
            for (unsigned spread = 2; spread <= 256; spread *= 8) {
                size_t count = counts[ci];
                unsigned w = widths[wi], m;
                fill_words(v, count, w, spread);
                size_t len = encode(&b, v, count, w, enc, &m);
                if (m == DC_ENT_RANS && count) {
                    seen32 += ways_of(enc) == 32;
                    seen4 += ways_of(enc) == 4;
                }
                seenplanes += m == DC_ENT_PLANES;
                seenraw += m == DC_ENT_RAW && count;
                cr_assert(compare(&b, m, enc, len, count, w, "random stream"));
                cr_assert(memcmp(b.gpu, v, count * w) == 0 || count == 0);
            }
    /* every layout the decoder has was exercised */
    cr_assert_gt(seen32, 0);
    cr_assert_gt(seen4, 0);
    cr_assert_gt(seenplanes, 0);
    cr_assert_gt(seenraw, 0);
    free(v);
    free(enc);
    bench_close(&b);
}

/* a 32-way stream and a 4-way stream (w = 2) and planes (w = 4), each cut
 * at every length and flipped at many bits */
static void hostile(size_t count, unsigned w, unsigned want_method, unsigned want_ways)
{
    bench_t b;
    bench_open(&b, count);
    uint8_t *v = malloc(count * w), *enc = malloc(b.cap), *bad = malloc(b.cap);
    unsigned m;
    fill_words(v, count, w, 4);
    size_t len = encode(&b, v, count, w, enc, &m);
    cr_assert_eq(m, want_method, "the encoder picked method %u", m);
    if (want_ways)
        cr_assert_eq(ways_of(enc), want_ways);
    cr_assert(compare(&b, m, enc, len, count, w, "intact"));
    size_t refused = 0;
    for (size_t cut = 0; cut < len; cut++)
        refused += !compare(&b, m, enc, cut, count, w, "truncated");
    cr_assert_eq(refused, len, "every truncation is refused (%zu of %zu)", refused, len);
    /* trailing bytes after a clean end (the CPU refuses: data not used up) */
    for (unsigned extra = 1; extra <= 4; extra++) {
        memcpy(bad, enc, len);
        memset(bad + len, 0, extra);
        cr_assert(!compare(&b, m, bad, len + extra, count, w, "trailing bytes"),
                  "%u trailing bytes are refused", extra);
    }
    size_t flips = 0, accepted = 0;
    for (unsigned k = 0; k < 600; k++) {
        memcpy(bad, enc, len);
        /* half in the first 64 bytes (header, table, states), half anywhere */
        size_t at = k % 2 ? rnd() % len : rnd() % (len < 64 ? len : 64);
        bad[at] ^= (uint8_t)(1u << (rnd() % 8));
        accepted += compare(&b, m, bad, len, count, w, "bit flip");
        flips++;
    }
    cr_assert_lt(accepted, flips, "some bit flips are refused");
    free(v);
    free(enc);
    free(bad);
    bench_close(&b);
}

Test(cuda_values, hostile_32way)
{
    need_gpu();
    hostile(4500, 1, DC_ENT_RANS, 32);
}

Test(cuda_values, hostile_4way)
{
    need_gpu();
    hostile(700, 2, DC_ENT_RANS, 4);
}

Test(cuda_values, hostile_planes)
{
    need_gpu();
    hostile(300, 4, DC_ENT_PLANES, 0);
}

Test(cuda_values, zstd_and_unknown_methods_refused)
{
    need_gpu();
    uint8_t *d = NULL, *o = NULL;
    cr_assert_eq(dc_kern_cuda_malloc((void **)&d, 64), DC_OK);
    cr_assert_eq(dc_kern_cuda_malloc((void **)&o, 64), DC_OK);
    cr_assert_eq(dc_kern_cuda_values_decode(DC_ENT_ZSTD, d, 16, 8, 2, o, NULL),
                 DC_ERR_UNSUPPORTED);
    cr_assert(strstr(dc_last_error(), "zstd") != NULL);
    cr_assert_eq(dc_kern_cuda_values_decode(9, d, 16, 8, 2, o, NULL), DC_ERR_FORMAT);
    cr_assert_eq(dc_kern_cuda_values_decode(DC_ENT_RANS, d, 16, 8, 4, o, NULL), DC_ERR_FORMAT);
    dc_kern_cuda_free(d);
    dc_kern_cuda_free(o);
}

/* A whole xor-sparse payload as engine/devpath.c takes it: gaps positions
 * on the host (dc_codec_decode_positions), Golomb positions on the device
 * (dc_kern_cuda_golomb_decode), the values stream on the device,
 * against dc_codec_decode_lists (which decodes both on the CPU, for
 * Golomb + rANS in one interleaved loop): the same verdict on
 * truncations and on bit flips, the same lists when accepted. */
static void payload_hostile(unsigned layout, unsigned pos_method, size_t n, unsigned permille,
                            unsigned want_ways)
{
    const unsigned w = 2;
    dc_codec_t *ca, *cb;
    cr_assert_eq(dc_codec_create(n * w, &ca), DC_OK);
    cr_assert_eq(dc_codec_create(n * w, &cb), DC_OK);
    dc_codec_set_model(ca, DC_CODEC_MODEL_ORDER0);
    dc_codec_set_layout(ca, layout);
    uint16_t *base = malloc(n * w), *next = malloc(n * w);
    for (size_t i = 0; i < n; i++) {
        base[i] = (uint16_t)rnd();
        next[i] = rnd() % 1000 < permille ? base[i] ^ (uint16_t)(1u << (rnd() % 7)) : base[i];
    }
    const size_t cap = dc_codec_payload_bound(n * w);
    uint8_t *pl = malloc(cap), *bad = malloc(cap), *words = malloc(n * w);
    uint8_t *dsrc = NULL, *dout = NULL;
    uint32_t *dpos = NULL, *hpos = malloc(n * sizeof(uint32_t));
    cr_assert_eq(dc_kern_cuda_malloc((void **)&dpos, n * sizeof(uint32_t)), DC_OK);
    cr_assert_eq(dc_kern_cuda_malloc((void **)&dsrc, cap), DC_OK);
    cr_assert_eq(dc_kern_cuda_malloc((void **)&dout, n * w + 16), DC_OK);
    size_t len;
    uint16_t enc;
    unsigned saved = dc_codec_pos_method;
    dc_codec_pos_method = pos_method;
    cr_assert_eq(dc_codec_encode(ca, base, next, n, w, pl, cap, &len, &enc, NULL), DC_OK);
    dc_codec_pos_method = saved;
    cr_assert_eq(dc_enc_kind(enc), DC_ENC_XOR_SPARSE);
    cr_assert_eq(dc_enc_pos_method(enc), pos_method);
    cr_assert_eq(dc_enc_val_method(enc), DC_ENT_RANS);
    {
        const uint32_t *pp;
        size_t np, vofs;
        cr_assert_eq(dc_codec_decode_positions(cb, enc, pl, len, n, w, &pp, &np, &vofs), DC_OK);
        cr_assert_eq(ways_of(pl + vofs), want_ways, "values stream of %u ways", ways_of(pl + vofs));
    }
    size_t accepted = 0, tries = 0;
    for (unsigned k = 0; k < len + 300; k++) {
        size_t l = len;
        memcpy(bad, pl, len);
        if (k > 0 && k < len) {
            /* truncations: every cut in the header, the positions and the
             * values' table, every 7th further on (test_emu_values' stream
             * tests cut the values stream at every byte) */
            if (k > 256 && k % 7)
                continue;
            l = k;
        } else if (k >= len) {
            size_t at = rnd() % len;
            bad[at] ^= (uint8_t)(1u << (rnd() % 8));
        }
        const uint32_t *pa, *pb;
        const uint8_t *wa;
        size_t na, nb, vofs;
        dc_status_t sa = dc_codec_decode_lists(ca, enc, bad, l, n, w, &pa, &wa, &na);
        dc_status_t sb;
        if (pos_method == DC_ENT_GOLOMB) {
            /* as devpath.c: the header on the host, both streams on the device */
            size_t pofs, plen;
            sb = dc_codec_sparse_header(cb, enc, bad, l, n, w, &nb, &pofs, &plen);
            if (sb == DC_OK) {
                vofs = pofs + plen;
                if (l > pofs)
                    cr_assert_eq(dc_kern_cuda_h2d(dsrc, bad + pofs, l - pofs), DC_OK);
                sb = dc_kern_cuda_golomb_decode(dsrc, plen, nb, n, dpos, NULL);
                if (sb == DC_OK && nb)
                    cr_assert_eq(dc_kern_cuda_d2h(hpos, dpos, nb * sizeof(uint32_t)), DC_OK);
                pb = hpos;
                if (sb == DC_OK)
                    sb = dc_kern_cuda_values_decode(DC_ENT_RANS, dsrc + plen, l - vofs, nb, w,
                                                    dout, NULL);
            }
        } else {
            sb = dc_codec_decode_positions(cb, enc, bad, l, n, w, &pb, &nb, &vofs);
            if (sb == DC_OK) {
                if (l > vofs)
                    cr_assert_eq(dc_kern_cuda_h2d(dsrc, bad + vofs, l - vofs), DC_OK);
                sb = dc_kern_cuda_values_decode(DC_ENT_RANS, dsrc, l - vofs, nb, w, dout, NULL);
            }
        }
        cr_assert_eq(sa == DC_OK, sb == DC_OK, "payload of %zu bytes (cut %zu, try %u): host "
                     "lists %d, host positions + device values %d (%s)", len, l, k, sa, sb,
                     dc_last_error());
        tries++;
        if (sa != DC_OK)
            continue;
        accepted++;
        cr_assert_eq(na, nb);
        cr_assert(memcmp(pa, pb, na * sizeof(uint32_t)) == 0, "positions differ");
        if (na)
            cr_assert_eq(dc_kern_cuda_d2h(words, dout, na * w), DC_OK);
        cr_assert(memcmp(wa, words, na * w) == 0, "values differ (try %u)", k);
    }
    cr_assert_geq(accepted, 1, "the intact payload is accepted");
    cr_assert_lt(accepted, tries, "hostile payloads are refused");
    dc_kern_cuda_free(dsrc);
    dc_kern_cuda_free(dout);
    dc_kern_cuda_free(dpos);
    free(hpos);
    free(base);
    free(next);
    free(pl);
    free(bad);
    free(words);
    dc_codec_free(ca);
    dc_codec_free(cb);
}

Test(cuda_values, payload_gaps_32way)
{
    need_gpu();
    /* ~5000 changes, the SIMD layout: gaps positions, 32-way values */
    payload_hostile(DC_CODEC_LAYOUT_SIMD, DC_ENT_GAPS, 100000, 50, 32);
}

Test(cuda_values, payload_golomb_4way)
{
    need_gpu();
    /* ~600 changes, the compact layout: Golomb positions, 4-way values
     * (the CPU decodes them in one interleaved loop) */
    payload_hostile(DC_CODEC_LAYOUT_COMPACT, DC_ENT_GOLOMB, 30000, 20, 4);
}

/* Golomb positions: dc_kern_cuda_golomb_decode against dc_ent_pos_decode
 * on random sets, every truncation, trailing bytes and bit flips. */
static void golomb_case(size_t n, unsigned permille, unsigned flips)
{
    uint32_t *pos = malloc(n * sizeof(uint32_t) + 4), *cpu = malloc(n * sizeof(uint32_t) + 4);
    uint32_t *gpu = malloc(n * sizeof(uint32_t) + 4), *dpos = NULL;
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        if (rnd() % 1000 < permille)
            pos[count++] = (uint32_t)i;
    const size_t cap = dc_ent_pos_bound(count, n) + 16;
    uint8_t *enc = malloc(cap), *bad = malloc(cap), *dsrc = NULL;
    size_t len;
    cr_assert_eq(dc_ent_pos_encode(pos, count, n, enc, cap, &len), DC_OK);
    cr_assert_eq(dc_kern_cuda_malloc((void **)&dsrc, cap), DC_OK);
    cr_assert_eq(dc_kern_cuda_malloc((void **)&dpos, n * sizeof(uint32_t) + 4), DC_OK);
    size_t accepted = 0, tries = 0;
    for (size_t k = 0; k <= len + 4 + flips; k++) {
        size_t l = len;
        memcpy(bad, enc, len);
        memset(bad + len, 0, 4);
        if (k < len) {
            l = k; /* every truncation */
        } else if (k <= len + 4) {
            l = k; /* the whole stream, then 1-4 trailing bytes */
        } else {
            bad[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
        }
        dc_status_t cs = dc_ent_pos_decode(bad, l, count, n, cpu);
        if (l)
            cr_assert_eq(dc_kern_cuda_h2d(dsrc, bad, l), DC_OK);
        dc_status_t gs = dc_kern_cuda_golomb_decode(dsrc, l, count, n, dpos, NULL);
        cr_assert_eq(gs == DC_OK, cs == DC_OK, "golomb %zu positions in %zu, %zu of %zu bytes, "
                     "try %zu: cpu %d, device %d (%s)", count, n, l, len, k, cs, gs,
                     dc_last_error());
        tries++;
        if (gs != DC_OK) {
            cr_assert_eq(gs, DC_ERR_FORMAT);
            cr_assert(strstr(dc_last_error(), "device positions decode") != NULL);
            continue;
        }
        accepted++;
        if (count)
            cr_assert_eq(dc_kern_cuda_d2h(gpu, dpos, count * sizeof(uint32_t)), DC_OK);
        cr_assert(memcmp(cpu, gpu, count * sizeof(uint32_t)) == 0, "positions differ (try %zu)",
                  k);
        if (k == len)
            cr_assert(memcmp(pos, gpu, count * sizeof(uint32_t)) == 0);
    }
    cr_assert_geq(accepted, 1);
    cr_assert_lt(accepted, tries);
    dc_kern_cuda_free(dsrc);
    dc_kern_cuda_free(dpos);
    free(pos);
    free(cpu);
    free(gpu);
    free(enc);
    free(bad);
}

Test(cuda_values, golomb_positions)
{
    need_gpu();
    golomb_case(20000, 20, 400); /* ~400 positions, m ~ 35 */
    golomb_case(5000, 600, 200); /* dense: m = 1 */
    golomb_case(100000, 1, 200); /* very sparse: long runs of zeros */
    golomb_case(1000, 0, 10);    /* none */
}
