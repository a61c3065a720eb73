/*
 * test_emu_values.c - the device values decoder (dc_kern_cuda_values_decode,
 * kernels/kern_cuda.cu) on the emulated CUDA runtime, byte-compared with
 * the CPU's dc_ent_val_decode(): random streams of every method and rANS
 * layout the encoder picks (32-way, 4-way, planes, raw), then every
 * truncation and many bit flips of them, where the device must give the
 * CPU's verdict (accept with the same bytes, or refuse) and never fault.
 */
#include <criterion/criterion.h>

#include "cuda_emu_rt.h"
#include "kernels/entropy.h"
#include "kernels/kern_cuda.h"

#include <stdlib.h>
#include <string.h>

TestSuite(emu_values, .init = dc_emu_install);

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

Test(emu_values, random_streams_bit_identical)
{
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

Test(emu_values, hostile_32way)
{
    hostile(4500, 1, DC_ENT_RANS, 32);
}

Test(emu_values, hostile_4way)
{
    hostile(700, 2, DC_ENT_RANS, 4);
}

Test(emu_values, hostile_planes)
{
    hostile(300, 4, DC_ENT_PLANES, 0);
}

Test(emu_values, zstd_and_unknown_methods_refused)
{
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
