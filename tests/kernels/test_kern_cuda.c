/*
 * test_kern_cuda.c - every CUDA kernel against the CPU reference, byte for
 * byte, on random inputs with edge sizes, unaligned device pointers, caps
 * and hostile positions.  Suite 'hw': skips with a reason without a GPU.
 *
 * Built a second time with DC_TEST_CUDA_EMU (tests/emu, suite 'emu'): the
 * same tests on the emulated CUDA runtime (kern_cuda.cu on the CPU, device
 * memory an arena the host must not touch), with smaller sizes since every
 * emulated GPU thread is an OS thread.
 */
#include <criterion/criterion.h>

#include "kernels/kern.h"
#include "kernels/kern_cuda.h"

#include <stdlib.h>
#include <string.h>

#ifdef DC_TEST_CUDA_EMU
#include "cuda_emu_rt.h"
#define TEST_HAVE_CUDA 1
TestSuite(kern_cuda, .init = dc_emu_install);
#else
#define TEST_HAVE_CUDA DC_HAVE_CUDA
#endif

static void need_gpu(void)
{
    if (!TEST_HAVE_CUDA)
        cr_skip_test("CUDA kernels not built (nvcc not found at configure time)");
    if (!dc_kern_cuda_available())
        cr_skip_test("no CUDA device (cudaGetDeviceCount failed or returned 0)");
}

#define XORSHIFT_SEED 0x2545F4914F6CDD1Dull
#include "xorshift.h"

static void fill_random(uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)rnd();
}

static void mutate(const uint8_t *a, uint8_t *b, size_t n, unsigned w, unsigned permille)
{
    memcpy(b, a, n * w);
    for (size_t i = 0; i < n; i++)
        if (rnd() % 1000 < permille)
            b[i * w + rnd() % w] ^= (uint8_t)(1u << (rnd() % 8));
}

static void *dev_copy(const void *host, size_t bytes, size_t off, void **base)
{
    void *d = NULL;
    cr_assert_eq(dc_kern_cuda_malloc(&d, bytes + off + 16), DC_OK, "%s", dc_last_error());
    cr_assert_eq(dc_kern_cuda_memset(d, 0, bytes + off + 16), DC_OK);
    cr_assert_eq(dc_kern_cuda_h2d((uint8_t *)d + off, host, bytes), DC_OK);
    *base = d;
    return (uint8_t *)d + off;
}

static const unsigned WIDTHS[] = {1, 2, 4, 8};
/* tile = 32 KiB of input: sizes straddle units, rounds and tiles */
#ifdef DC_TEST_CUDA_EMU
static const size_t SIZES[] = {0, 1, 9, 33, 4097, 16385};
#else
static const size_t SIZES[] = {0, 1, 2, 7, 8, 9, 31, 33, 4097, 16384, 16385, 65537, 300007};
#endif

static void diff_case(unsigned w, size_t n, unsigned permille, size_t off)
{
    size_t bytes = n * w;
    uint8_t *a = malloc(bytes + 1), *b = malloc(bytes + 1);
    fill_random(a, bytes);
    mutate(a, b, n, w, permille);

    uint32_t *rpos = malloc((n + 1) * 4);
    uint8_t *rx = malloc((n + 1) * w);
    size_t total = dc_kern_diff(a, b, n, w, rpos, rx, n);

    void *ba, *bb, *bp, *bx;
    void *da = dev_copy(a, bytes, off, &ba);
    void *db = dev_copy(b, bytes, (off * 3) % 16, &bb);
    size_t cnt = 0;
    cr_assert_eq(dc_kern_cuda_count_changed(da, db, n, w, &cnt, NULL), DC_OK, "%s",
                 dc_last_error());
    cr_assert_eq(cnt, total, "count w=%u n=%zu", w, n);

    size_t caps[] = {n, total ? total - 1 : 0, total / 3, 0};
    for (size_t c = 0; c < DC_ARRAY_SIZE(caps); c++) {
        size_t cap = caps[c];
        cr_assert_eq(dc_kern_cuda_malloc(&bp, (cap + 1) * 4 + 16), DC_OK);
        cr_assert_eq(dc_kern_cuda_memset(bp, 0xA5, (cap + 1) * 4 + 16), DC_OK);
        cr_assert_eq(dc_kern_cuda_malloc(&bx, (cap + 1) * w + 16), DC_OK);
        cr_assert_eq(dc_kern_cuda_memset(bx, 0xA5, (cap + 1) * w + 16), DC_OK);
        uint32_t *dpos = bp;
        uint8_t *dx = (uint8_t *)bx + (c & 1); /* unaligned XOR output too */
        size_t got = 0;
        cr_assert_eq(dc_kern_cuda_diff(da, db, n, w, dpos, dx, cap, &got, NULL), DC_OK, "%s",
                     dc_last_error());
        cr_assert_eq(got, total, "diff total w=%u n=%zu cap=%zu: %zu", w, n, cap, got);
        size_t wrote = DC_MIN(cap, total);
        uint32_t *hpos = malloc((cap + 1) * 4 + 16);
        uint8_t *hx = malloc((cap + 1) * w + 16);
        cr_assert_eq(dc_kern_cuda_d2h(hpos, dpos, (cap + 1) * 4 + 16), DC_OK);
        cr_assert_eq(dc_kern_cuda_d2h(hx, bx, (cap + 1) * w + 16), DC_OK);
        cr_assert(memcmp(hpos, rpos, wrote * 4) == 0, "diff pos w=%u n=%zu cap=%zu", w, n, cap);
        cr_assert(memcmp(hx + (c & 1), rx, wrote * w) == 0, "diff xor w=%u n=%zu cap=%zu", w,
                  n, cap);
        for (size_t j = wrote * 4; j < (cap + 1) * 4 + 16; j++)
            cr_assert_eq(((uint8_t *)hpos)[j], 0xA5, "pos written past count");
        free(hpos);
        free(hx);
        dc_kern_cuda_free(bp);
        dc_kern_cuda_free(bx);
    }

    /* gather + both scatters + dense xor rebuild b from a on the device */
    if (total > 0) {
        void *bpp, *bxx, *bv, *bd;
        uint32_t *dpos = dev_copy(rpos, total * 4, 0, &bpp);
        void *dxw = dev_copy(rx, total * w, off % 3, &bxx);
        uint8_t *vals = malloc(total * w), *hv = malloc(total * w);
        dc_kern_gather(b, w, rpos, total, vals);
        void *dv = dev_copy(vals, total * w, 1, &bv); /* overwritten below */
        cr_assert_eq(dc_kern_cuda_memset(dv, 0, total * w), DC_OK);
        cr_assert_eq(dc_kern_cuda_gather(db, w, dpos, total, dv, NULL), DC_OK);
        cr_assert_eq(dc_kern_cuda_d2h(hv, dv, total * w), DC_OK);
        cr_assert(memcmp(hv, vals, total * w) == 0, "gather w=%u n=%zu", w, n);

        uint8_t *out = malloc(bytes);
        void *dd = dev_copy(a, bytes, off, &bd);
        cr_assert_eq(dc_kern_cuda_xor_scatter(dd, n, w, dpos, dxw, total, NULL), DC_OK, "%s",
                     dc_last_error());
        cr_assert_eq(dc_kern_cuda_d2h(out, dd, bytes), DC_OK);
        cr_assert(memcmp(out, b, bytes) == 0, "xor_scatter w=%u n=%zu", w, n);

        cr_assert_eq(dc_kern_cuda_h2d(dd, a, bytes), DC_OK);
        cr_assert_eq(dc_kern_cuda_put_scatter(dd, n, w, dpos, dv, total, NULL), DC_OK);
        cr_assert_eq(dc_kern_cuda_d2h(out, dd, bytes), DC_OK);
        cr_assert(memcmp(out, b, bytes) == 0, "put_scatter w=%u n=%zu", w, n);

        free(out);
        free(vals);
        free(hv);
        dc_kern_cuda_free(bpp);
        dc_kern_cuda_free(bxx);
        dc_kern_cuda_free(bv);
        dc_kern_cuda_free(bd);
    }
    dc_kern_cuda_free(ba);
    dc_kern_cuda_free(bb);
    free(a);
    free(b);
    free(rpos);
    free(rx);
}

Test(kern_cuda, diff_gather_scatter_match_cpu)
{
    need_gpu();
    static const unsigned RATES[] = {0, 10, 500, 1000};
    for (size_t wi = 0; wi < DC_ARRAY_SIZE(WIDTHS); wi++)
        for (size_t si = 0; si < DC_ARRAY_SIZE(SIZES); si++)
            for (size_t ri = 0; ri < DC_ARRAY_SIZE(RATES); ri++)
                diff_case(WIDTHS[wi], SIZES[si], RATES[ri], (si + ri) % 4 == 0 ? 0 : si % 16);
}

Test(kern_cuda, scatter_rejects_bad_positions_dst_untouched)
{
    need_gpu();
    const size_t n = 1000;
    for (size_t wi = 0; wi < DC_ARRAY_SIZE(WIDTHS); wi++) {
        unsigned w = WIDTHS[wi];
        uint8_t *dst = malloc(n * w), *back = malloc(n * w), *src = malloc(n * w);
        fill_random(dst, n * w);
        fill_random(src, n * w);
        uint32_t pos[300];
        static const size_t SPOTS[] = {0, 1, 31, 32, 255, 299};
        for (size_t sp = 0; sp < DC_ARRAY_SIZE(SPOTS); sp++) {
            for (int kind = 0; kind < 3; kind++) {
                for (int i = 0; i < 300; i++)
                    pos[i] = (uint32_t)i * 3;
                size_t at = SPOTS[sp];
                if (kind == 0 && at > 0)
                    pos[at] = pos[at - 1]; /* duplicate */
                else if (kind == 1 && at > 0)
                    pos[at] = pos[at - 1] - 1; /* decreasing */
                else
                    pos[at] = (uint32_t)n + (uint32_t)at; /* out of range */
                void *bd, *bp, *bs;
                void *dd = dev_copy(dst, n * w, 0, &bd);
                uint32_t *dp = dev_copy(pos, sizeof(pos), 0, &bp);
                void *ds = dev_copy(src, n * w, 0, &bs);
                cr_assert_eq(dc_kern_cuda_xor_scatter(dd, n, w, dp, ds, 300, NULL),
                             DC_ERR_FORMAT);
                char gpu_msg[512];
                snprintf(gpu_msg, sizeof(gpu_msg), "%s", dc_last_error());
                cr_assert_eq(dc_kern_xor_scatter(dst, n, w, pos, src, 300), DC_ERR_FORMAT);
                cr_assert_str_eq(gpu_msg, dc_last_error(), "same message as the CPU");
                cr_assert_eq(dc_kern_cuda_put_scatter(dd, n, w, dp, ds, 300, NULL),
                             DC_ERR_FORMAT);
                cr_assert_eq(dc_kern_cuda_d2h(back, dd, n * w), DC_OK);
                cr_assert(memcmp(back, dst, n * w) == 0, "dst touched on failure");
                dc_kern_cuda_free(bd);
                dc_kern_cuda_free(bp);
                dc_kern_cuda_free(bs);
            }
        }
        free(dst);
        free(back);
        free(src);
    }
}

Test(kern_cuda, xor_dense_matches_cpu)
{
    need_gpu();
#ifdef DC_TEST_CUDA_EMU
    static const size_t LENS[] = {0, 1, 15, 16, 17, 4095, (1 << 16) + 3};
#else
    static const size_t LENS[] = {0, 1, 15, 16, 17, 4095, 1 << 20, (1 << 20) + 3};
#endif
    for (size_t li = 0; li < DC_ARRAY_SIZE(LENS); li++)
        for (size_t off = 0; off < 3; off++) {
            size_t len = LENS[li];
            uint8_t *x = malloc(len + 1), *y = malloc(len + 1), *o = malloc(len + 1);
            fill_random(x, len);
            fill_random(y, len);
            void *bx, *by;
            void *dx = dev_copy(x, len, off, &bx);
            void *dy = dev_copy(y, len, off == 1 ? 2 : off, &by);
            cr_assert_eq(dc_kern_cuda_xor_dense(dx, dy, len, NULL), DC_OK);
            cr_assert_eq(dc_kern_cuda_sync(NULL), DC_OK);
            cr_assert_eq(dc_kern_cuda_d2h(o, dx, len), DC_OK);
            dc_kern_xor_dense(x, y, len);
            cr_assert(memcmp(o, x, len) == 0, "xor_dense len=%zu off=%zu", len, off);
            dc_kern_cuda_free(bx);
            dc_kern_cuda_free(by);
            free(x);
            free(y);
            free(o);
        }
}

Test(kern_cuda, digest_matches_cpu)
{
    need_gpu();
#ifdef DC_TEST_CUDA_EMU
    static const size_t LENS[] = {0, 1, 240, 241, (8u << 20) - 1, 8u << 20, (9u << 20) + 7};
#else
    static const size_t LENS[] = {0, 1, 240, 241, (8u << 20) - 1, 8u << 20, (20u << 20) + 7};
#endif
    for (size_t li = 0; li < DC_ARRAY_SIZE(LENS); li++) {
        size_t len = LENS[li];
        uint8_t *x = malloc(len + 1);
        fill_random(x, len);
        void *bx;
        void *dx = dev_copy(x, len, 3, &bx);
        dc_digest_t g;
        cr_assert_eq(dc_kern_cuda_digest128(dx, len, &g, NULL), DC_OK, "%s", dc_last_error());
        cr_assert(dc_digest_eq(g, dc_digest128(x, len)), "digest len=%zu", len);
        dc_kern_cuda_free(bx);
        free(x);
    }
}

/* The device-side XXH3-128 (no copy-back of the chunk): lengths on both
 * sides of XXH3's short/long boundary (240), of its 1 KiB blocks and of the
 * 64-byte stripes of the last block, at odd device offsets; a flipped byte
 * anywhere changes it as it changes the CPU's. */
Test(kern_cuda, digest_dev_matches_cpu)
{
    need_gpu();
    static const size_t LENS[] = {0, 1, 3, 16, 17, 128, 129, 240, 241, 255, 256, 1023, 1024,
                                  1025, 1088, 1089, 2047, 2048, 2049, 4096, 4097, 5120, 5121,
                                  65536 + 13, 300007, 256 * 1024 + 64, 512 * 1024 + 1,
                                  (1u << 20) + 4099 /* tiles of the chain's shared memory */,
                                  (768u << 10) + 1 /* exactly three tiles of 256 blocks */};
    static const size_t OFFS[] = {0, 3, 8};
    for (size_t li = 0; li < DC_ARRAY_SIZE(LENS); li++)
        for (size_t oi = 0; oi < DC_ARRAY_SIZE(OFFS); oi++) {
            size_t len = LENS[li];
            uint8_t *x = malloc(len + 1);
            fill_random(x, len);
            void *bx;
            uint8_t *dx = dev_copy(x, len, OFFS[oi], &bx);
            dc_digest_t g;
            cr_assert_eq(dc_kern_cuda_digest128_dev(dx, len, &g, NULL), DC_OK, "%s",
                         dc_last_error());
            cr_assert(dc_digest_eq(g, dc_digest128(x, len)), "device digest len=%zu off=%zu",
                      len, OFFS[oi]);
            if (len > 0) {
                size_t at = (size_t)(rnd() % len);
                x[at] ^= 0x40;
                cr_assert_eq(dc_kern_cuda_h2d(dx + at, x + at, 1), DC_OK);
                cr_assert_eq(dc_kern_cuda_digest128_dev(dx, len, &g, NULL), DC_OK);
                cr_assert(dc_digest_eq(g, dc_digest128(x, len)), "flip at %zu len=%zu", at,
                          len);
            }
            dc_kern_cuda_free(bx);
            free(x);
        }
    cr_assert_eq(dc_kern_cuda_digest128_dev(NULL, 1, &(dc_digest_t){0}, NULL), DC_ERR_INVALID);
}

Test(kern_cuda, digest_dev_pieces_match_cpu)
{
    need_gpu();
    /* (len, piece): whole pieces, a short last piece (device or host path),
     * pieces all on the host, one piece */
    static const size_t CASES[][2] = {{4096, 1024}, {4096 + 241, 1024}, {4096 + 240, 1024},
                                      {4096 + 7, 1024}, {3 * 5121, 5121}, {1000, 200},
                                      {300007, 65536}, {2049, 4096}, {0, 64}};
    for (size_t ci = 0; ci < DC_ARRAY_SIZE(CASES); ci++) {
        size_t len = CASES[ci][0], piece = CASES[ci][1];
        size_t np = len ? (len + piece - 1) / piece : 1;
        uint8_t *x = malloc(len + 1);
        fill_random(x, len);
        void *bx;
        uint8_t *dx = dev_copy(x, len, 8, &bx);
        dc_digest_t *g = calloc(np, sizeof(*g));
        cr_assert_eq(dc_kern_cuda_digest128_dev_pieces(dx, len, piece, g, NULL), DC_OK, "%s",
                     dc_last_error());
        for (size_t q = 0; q < np; q++) {
            size_t l = len ? DC_MIN(piece, len - q * piece) : 0;
            cr_assert(dc_digest_eq(g[q], dc_digest128(x + q * piece, l)),
                      "piece %zu of %zu (len %zu, piece %zu)", q, np, len, piece);
        }
        free(g);
        dc_kern_cuda_free(bx);
        free(x);
    }
    cr_assert_eq(dc_kern_cuda_digest128_dev_pieces(NULL, 1, 1, &(dc_digest_t){0}, NULL),
                 DC_ERR_INVALID);
}

/* Lengths straddle the 16-byte head, the 4 KiB tiles and the grid's split
 * of tiles among blocks (>64 tiles: several tiles per block). */
static const size_t CRC_LENS[] = {0, 1, 2, 3, 7, 15, 16, 17, 31, 32, 255, 4095, 4096, 4097,
                                  4111, 4112, 8197, 65536 + 17,
#ifdef DC_TEST_CUDA_EMU
                                  /* 64+ tiles: several tiles per block */
                                  64 * 4096 + 16 * 4096 + 5};
#else
                                  3 * 131072 + 1, (1u << 20) + 13, (9u << 20) + 3};
#endif

Test(kern_cuda, crc32c_matches_cpu)
{
    need_gpu();
#ifdef DC_TEST_CUDA_EMU
    static const size_t OFFS[] = {0, 3};
#else
    static const size_t OFFS[] = {0, 1, 3, 8, 15};
#endif
    const uint32_t seeds[] = {0, 0xFFFFFFFFu, (uint32_t)rnd()};
    size_t max = 0;
    for (size_t li = 0; li < DC_ARRAY_SIZE(CRC_LENS); li++)
        max = DC_MAX(max, CRC_LENS[li]);
    uint8_t *x = malloc(max + 16);
    fill_random(x, max + 16);
    for (size_t oi = 0; oi < DC_ARRAY_SIZE(OFFS); oi++) {
        void *bx;
        const uint8_t *dx = dev_copy(x, max, OFFS[oi], &bx);
        for (size_t li = 0; li < DC_ARRAY_SIZE(CRC_LENS); li++) {
            size_t len = CRC_LENS[li];
            for (size_t si = 0; si < DC_ARRAY_SIZE(seeds); si++) {
                uint32_t got = 0x12345678u ^ (uint32_t)li;
                cr_assert_eq(dc_kern_cuda_crc32c(dx, len, seeds[si], &got, NULL), DC_OK, "%s",
                             dc_last_error());
                uint32_t want = dc_crc32c(seeds[si], x, len);
                cr_assert_eq(got, want, "crc32c len=%zu off=%zu seed=0x%08x: 0x%08x != 0x%08x",
                             len, OFFS[oi], seeds[si], got, want);
            }
        }
        /* chaining: the CRC of a prefix seeds the CRC of the rest */
        size_t cut = max / 3 + OFFS[oi];
        uint32_t a = 0, b = 0;
        cr_assert_eq(dc_kern_cuda_crc32c(dx, cut, 0, &a, NULL), DC_OK);
        cr_assert_eq(dc_kern_cuda_crc32c(dx + cut, max - cut, a, &b, NULL), DC_OK);
        cr_assert_eq(b, dc_crc32c(0, x, max), "chained crc32c off=%zu", OFFS[oi]);
        dc_kern_cuda_free(bx);
    }
    /* one flipped bit anywhere changes the result */
    void *bx;
    uint8_t *dx = dev_copy(x, 100003, 5, &bx);
    uint32_t clean = 0, dirty = 0;
    cr_assert_eq(dc_kern_cuda_crc32c(dx, 100003, 0, &clean, NULL), DC_OK);
    for (size_t at = 0; at < 100003; at += 9973) {
        uint8_t v = x[at] ^ 0x10;
        cr_assert_eq(dc_kern_cuda_h2d(dx + at, &v, 1), DC_OK);
        cr_assert_eq(dc_kern_cuda_crc32c(dx, 100003, 0, &dirty, NULL), DC_OK);
        cr_assert_neq(dirty, clean, "bit flip at %zu not seen", at);
        cr_assert_eq(dc_kern_cuda_h2d(dx + at, x + at, 1), DC_OK);
    }
    cr_assert_eq(dc_kern_cuda_crc32c(NULL, 1, 0, &dirty, NULL), DC_ERR_INVALID);
    dc_kern_cuda_free(bx);
    free(x);
}

Test(kern_cuda, crc32c_unsupported_without_cuda)
{
    if (TEST_HAVE_CUDA)
        cr_skip_test("CUDA kernels are built in (the refusal is for builds without them)");
    uint32_t out = 0;
    uint8_t b[4] = {0};
    cr_assert_eq(dc_kern_cuda_crc32c(b, sizeof(b), 0, &out, NULL), DC_ERR_UNSUPPORTED);
    cr_assert(strstr(dc_last_error(), "not built in") != NULL, "%s", dc_last_error());
}

Test(kern_cuda, props_report_bandwidth)
{
    need_gpu();
    dc_kern_cuda_props_t p;
    cr_assert_eq(dc_kern_cuda_props(&p), DC_OK, "%s", dc_last_error());
    cr_assert(p.sm_count > 0);
    cr_assert(p.name[0] != '\0');
}

Test(kern_cuda, available_never_crashes)
{
    int a = dc_kern_cuda_available();
    cr_assert(a == 0 || a == 1);
    if (!TEST_HAVE_CUDA)
        cr_assert_eq(a, 0);
}

/* Page-locking host memory (a device sender's host baseline): a locked
 * buffer copies to the device byte for byte; locking it twice, locking
 * device memory and unlocking what was never locked are refused. */
Test(kern_cuda, host_register_copies_and_refuses_misuse)
{
    need_gpu();
    const size_t bytes = (1u << 20) + 4096;
    uint8_t *h = malloc(bytes), *back = malloc(bytes);
    cr_assert(h && back);
    fill_random(h, bytes);
    cr_assert_eq(dc_kern_cuda_host_register(h, bytes), DC_OK, "%s", dc_last_error());
    cr_assert_neq(dc_kern_cuda_host_register(h + 4096, 4096), DC_OK,
                  "a range inside a locked one was locked again");
    void *d;
    cr_assert_eq(dc_kern_cuda_malloc(&d, bytes), DC_OK);
    cr_assert_eq(dc_kern_cuda_h2d(d, h, bytes), DC_OK);
    cr_assert_eq(dc_kern_cuda_d2h(back, d, bytes), DC_OK);
    cr_assert(memcmp(back, h, bytes) == 0, "copy from page-locked memory differs");
    cr_assert_neq(dc_kern_cuda_host_register(d, bytes), DC_OK, "device memory was page-locked");
    dc_kern_cuda_host_unregister(h);
    cr_assert_eq(dc_kern_cuda_host_register(h, bytes), DC_OK, "not unlocked: %s",
                 dc_last_error());
    dc_kern_cuda_host_unregister(h);
    dc_kern_cuda_host_unregister(back); /* never locked: ignored */
    dc_kern_cuda_free(d);
    free(h);
    free(back);
}

/* The reason a user reads when device memory is refused: the CUDA error,
 * the runtime built in and the driver's CUDA version (or that there is no
 * driver); empty when a device is usable. */
Test(kern_cuda, why_names_the_cause)
{
    const char *why = dc_kern_cuda_why();
    cr_assert_not_null(why);
    if (dc_kern_cuda_available()) {
        cr_assert_str_empty(why);
        return;
    }
    if (!TEST_HAVE_CUDA) {
        cr_assert(strstr(why, "no CUDA kernels"), "%s", why);
        return;
    }
    cr_assert(strstr(why, "driver"), "%s", why);
    if (strstr(why, "no CUDA device (") != why)
        cr_assert(strstr(why, "deltacast's CUDA runtime is ") && strstr(why, "cudaError"), "%s",
                  why);
    cr_log_info("no usable GPU: %s", why);
}
