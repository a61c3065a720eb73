/*
 * test_poison.c - every kernel's output is a function of its inputs only,
 * on every ISA this CPU (or the -Dkern_emu=avx512 emulation) runs:
 *
 *  - guarded: inputs end exactly at a PROT_NONE page (and, in a second
 *    layout, start right after one), so that a read past either end
 *    faults;
 *  - poisoned: the same inputs at other addresses and alignments, the bytes
 *    around them, the output buffers past what the call returns and the
 *    stack below the caller all filled with different garbage; the results
 *    must not change, and must be the reference's (scalar loops here,
 *    libxxhash for digests).
 *
 * Sizes sit on the kernels' edges: 64-element groups, XXH3's 240-byte and
 * 1024-byte blocks, the fused passes' 16 KiB blocks, and widths 1-8 (an
 * avx512 diff of 129 8-byte words once counted changes past its input).
 */
#include <criterion/criterion.h>

#include "kernels/codec.h"
#include "kernels/digest.h"
#include "kernels/kern.h"
#include "kernels/kern_impl.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#define XORSHIFT_SEED 0x9E3779B97F4A7C15ull
#include "xorshift.h"

static const char *const ISAS[] = {"scalar", "avx2", "avx512"};

/* ---- buffers ------------------------------------------------------------- */

/* `len` bytes placed against a PROT_NONE page: at the end of a mapping
 * (tail guard) or at its start (head guard).  The bytes of the mapping
 * outside the buffer are poisoned. */
typedef struct {
    uint8_t *map;
    size_t map_len;
    uint8_t *p;
} gbuf_t;

static size_t page(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

static void gbuf_poison(uint8_t *p, size_t len, uint8_t seed)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)(seed + 151u * (unsigned)i + (unsigned)(i >> 3));
}

/* head == 0: buffer ends at the guard page after it; head == 1: buffer
 * starts right after the guard page before it */
static gbuf_t gbuf_new(size_t len, int head, uint8_t poison)
{
    size_t pg = page(), body = (len + pg - 1) / pg * pg + pg;
    gbuf_t g;
    g.map_len = body + 2 * pg;
    g.map = mmap(NULL, g.map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert(g.map != MAP_FAILED);
    cr_assert(mprotect(g.map, pg, PROT_NONE) == 0);
    cr_assert(mprotect(g.map + pg + body, pg, PROT_NONE) == 0);
    gbuf_poison(g.map + pg, body, poison);
    g.p = head ? g.map + pg : g.map + pg + body - len;
    return g;
}

static void gbuf_free(gbuf_t *g)
{
    munmap(g->map, g->map_len);
}

/* A copy of src at a chosen misalignment inside a larger poisoned block
 * (malloc'd: reads past the end hit poison, not a fault). */
static uint8_t *poisoned_copy(const void *src, size_t len, size_t shift, size_t slack,
                              uint8_t poison, uint8_t **block)
{
    *block = malloc(len + shift + slack + 64);
    cr_assert(*block);
    gbuf_poison(*block, len + shift + slack + 64, poison);
    memcpy(*block + shift, src, len);
    return *block + shift;
}

/* Fill the stack below the caller with garbage, so that a kernel reading
 * stack it never wrote sees this and not zeros or the last call's data. */
static __attribute__((noinline)) void dirty_stack(uint8_t fill)
{
    uint8_t junk[96 << 10];
    gbuf_poison(junk, sizeof(junk), fill);
    __asm__ volatile("" : : "r"(junk) : "memory");
}

/* ---- references ---------------------------------------------------------- */

static size_t ref_diff(const uint8_t *a, const uint8_t *b, size_t n, unsigned w, uint32_t *pos,
                       uint8_t *xorw, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t x[8];
        int ch = 0;
        for (unsigned j = 0; j < w; j++) {
            x[j] = a[i * w + j] ^ b[i * w + j];
            ch |= x[j] != 0;
        }
        if (!ch)
            continue;
        if (k < cap) {
            pos[k] = (uint32_t)i;
            memcpy(xorw + k * w, x, w);
        }
        k++;
    }
    return k;
}

static dc_digest_t ref_dg(const void *p, size_t len)
{
    XXH128_hash_t h = XXH3_128bits(len ? p : "", len);
    dc_digest_t d = {h.low64, h.high64};
    return d;
}

/* base with about `permille` of its elements changed (at least the last
 * one, so that a tail is always in play) */
static void make_pair(uint8_t *a, uint8_t *b, size_t n, unsigned w, unsigned permille)
{
    for (size_t i = 0; i < n * w; i++)
        a[i] = (uint8_t)rnd();
    memcpy(b, a, n * w);
    for (size_t i = 0; i < n; i++)
        if (rnd() % 1000 < permille || i + 1 == n)
            b[i * w + rnd() % w] ^= (uint8_t)(1 + rnd() % 255);
}

/* byte lengths on the kernels' edges */
static const size_t LENS[] = {8,    56,   64,   120,   128,   240,   248,   256,  512,
                              1016, 1024, 1032, 1088,  2040,  2048,  2056,  4096, 8200,
                              16376, 16384, 16392, 17408, 32776, 65544, 100000};
#define NLENS (sizeof(LENS) / sizeof(LENS[0]))
static const unsigned WIDTHS[] = {1, 2, 4, 8};

/* ---- diff, diff + digest -------------------------------------------------- */

typedef struct {
    size_t count;
    dc_digest_t da, db;
} diff_out_t;

/* One diff (+ digests) of a/b (n x w) with cap, positions / values
 * compared with the reference up to min(count, cap). */
static diff_out_t check_diff(const uint8_t *a, const uint8_t *b, size_t n, unsigned w,
                             size_t cap, int digest, uint8_t poison, const char *what)
{
    size_t pcap = cap + 80; /* the output buffers carry poison past cap */
    uint32_t *pos = malloc(pcap * 4), *rpos = malloc(pcap * 4);
    uint8_t *xw = malloc(pcap * 8), *rxw = malloc(pcap * 8);
    cr_assert(pos && rpos && xw && rxw);
    gbuf_poison((uint8_t *)pos, pcap * 4, poison);
    gbuf_poison(xw, pcap * 8, (uint8_t)(poison + 1));
    size_t want = ref_diff(a, b, n, w, rpos, rxw, cap);
    diff_out_t o = {0, {0, 0}, {0, 0}};
    dirty_stack(poison);
    if (digest == 0)
        o.count = dc_kern_diff(a, b, n, w, pos, xw, cap);
    else
        o.count = dc_kern_diff_digest(a, b, n, w, pos, xw, cap, digest & 1 ? &o.da : NULL,
                                      digest & 2 ? &o.db : NULL);
    cr_assert_eq(o.count, want, "%s %s n %zu w %u cap %zu digest %d: %zu changes, want %zu",
                 what, dc_kern_isa(), n, w, cap, digest, o.count, want);
    size_t m = want < cap ? want : cap;
    cr_assert(memcmp(pos, rpos, m * 4) == 0, "%s %s n %zu w %u cap %zu: positions", what,
              dc_kern_isa(), n, w, cap);
    cr_assert(memcmp(xw, rxw, m * w) == 0, "%s %s n %zu w %u cap %zu: values", what,
              dc_kern_isa(), n, w, cap);
    /* nothing at or past cap was written */
    uint8_t *chk = malloc(pcap * 8);
    cr_assert(chk);
    gbuf_poison(chk, pcap * 4, poison);
    cr_assert(memcmp((uint8_t *)pos + cap * 4, chk + cap * 4, 80 * 4) == 0,
              "%s %s n %zu w %u cap %zu: positions written past cap", what, dc_kern_isa(), n,
              w, cap);
    gbuf_poison(chk, pcap * 8, (uint8_t)(poison + 1));
    cr_assert(memcmp(xw + cap * w, chk + cap * w, 80 * w) == 0,
              "%s %s n %zu w %u cap %zu: values written past cap", what, dc_kern_isa(), n, w,
              cap);
    if (digest & 1)
        cr_assert(dc_digest_eq(o.da, ref_dg(a, n * w)), "%s %s n %zu w %u: digest of a", what,
                  dc_kern_isa(), n, w);
    if (digest & 2)
        cr_assert(dc_digest_eq(o.db, ref_dg(b, n * w)), "%s %s n %zu w %u: digest of b", what,
                  dc_kern_isa(), n, w);
    free(chk);
    free(pos), free(rpos), free(xw), free(rxw);
    return o;
}

static int use_isa(const char *isa)
{
    return dc_kern_isa_supported(isa) && dc_kern_set_isa(isa) == DC_OK;
}

Test(poison, diff_and_digest_read_only_their_inputs)
{
    for (size_t ii = 0; ii < 3; ii++) {
        if (!use_isa(ISAS[ii]))
            continue;
        for (size_t li = 0; li < NLENS; li++)
            for (size_t wi = 0; wi < 4; wi++) {
                unsigned w = WIDTHS[wi];
                size_t n = LENS[li] / w, bytes = n * w;
                /* also one element past each length: a ragged tail */
                for (int extra = 0; extra < 2; extra++, n++, bytes += w) {
                    uint8_t *a = malloc(bytes), *b = malloc(bytes);
                    cr_assert(a && b);
                    make_pair(a, b, n, w, 30);
                    const size_t caps[] = {n, n / 4 + 1, 0};
                    for (size_t ci = 0; ci < 3; ci++) {
                        size_t cap = caps[ci];
                        /* guarded at either end */
                        for (int head = 0; head < 2; head++) {
                            gbuf_t ga = gbuf_new(bytes, head, 0x11), gb = gbuf_new(bytes, head, 0xEE);
                            memcpy(ga.p, a, bytes);
                            memcpy(gb.p, b, bytes);
                            for (int dg = 0; dg < 4; dg++)
                                check_diff(ga.p, gb.p, n, w, cap, dg, (uint8_t)(0x30 + dg),
                                           head ? "head-guarded" : "tail-guarded");
                            cr_assert_eq(dc_kern_count_changed(ga.p, gb.p, n, w),
                                         ref_diff(a, b, n, w, NULL, NULL, 0));
                            gbuf_free(&ga);
                            gbuf_free(&gb);
                        }
                        /* two poisons, two alignments: the same answers */
                        for (unsigned v = 0; v < 2; v++) {
                            uint8_t *ba, *bb;
                            const uint8_t *pa = poisoned_copy(a, bytes, v ? 8 : 16 + w, 300,
                                                              (uint8_t)(0x5A * (v + 1)), &ba);
                            const uint8_t *pb = poisoned_copy(b, bytes, v ? 40 : 0, 300,
                                                              (uint8_t)(0xA7 * (v + 1)), &bb);
                            check_diff(pa, pb, n, w, cap, 3, (uint8_t)(0x77 + v), "poisoned");
                            check_diff(pa, pb, n, w, cap, 0, (uint8_t)(0x99 + v), "poisoned");
                            free(ba), free(bb);
                        }
                    }
                    free(a), free(b);
                }
            }
    }
}

/* ---- patch + digest, codec round trips ---------------------------------- */

Test(poison, patch_and_codec_read_only_their_inputs)
{
    for (size_t ii = 0; ii < 3; ii++) {
        if (!use_isa(ISAS[ii]))
            continue;
        for (size_t li = 0; li < NLENS; li++)
            for (size_t wi = 0; wi < 4; wi++) {
                unsigned w = WIDTHS[wi];
                size_t n = LENS[li] / w + (li & 1), bytes = n * w;
                uint8_t *a = malloc(bytes), *b = malloc(bytes), *want = malloc(bytes);
                uint32_t *pos = malloc(n * 4);
                uint8_t *vals = malloc(bytes);
                cr_assert(a && b && want && pos && vals);
                make_pair(a, b, n, w, 40);
                size_t count = ref_diff(a, b, n, w, pos, vals, n);
                for (unsigned op = DC_PATCH_COPY; op <= DC_PATCH_PUT_DENSE; op++) {
                    const uint8_t *ev = op == DC_PATCH_PUT_DENSE ? b : vals;
                    uint8_t *dense = NULL;
                    if (op == DC_PATCH_XOR_DENSE) {
                        dense = malloc(bytes);
                        cr_assert(dense);
                        for (size_t i = 0; i < bytes; i++)
                            dense[i] = a[i] ^ b[i];
                        ev = dense;
                    }
                    if (op == DC_PATCH_PUT) {
                        dense = malloc(count * w + 1);
                        cr_assert(dense);
                        for (size_t k = 0; k < count; k++)
                            memcpy(dense + k * w, b + (size_t)pos[k] * w, w);
                        ev = dense;
                    }
                    memcpy(want, op == DC_PATCH_COPY ? a : b, bytes);
                    dc_digest_t wd = ref_dg(want, bytes), sd = ref_dg(a, bytes);
                    for (int layout = 0; layout < 3; layout++) {
                        /* src and dst guarded at the tail, at the head, or
                         * dst misaligned in a poisoned block */
                        gbuf_t gs = gbuf_new(bytes, layout == 1, 0x3C);
                        gbuf_t gd = gbuf_new(bytes + 64, layout == 1, 0xC3);
                        uint8_t *dst = layout == 0   ? gd.p + 64
                                       : layout == 1 ? gd.p
                                                     : gd.p + 64 - (w + 13) % 64;
                        memcpy(gs.p, a, bytes);
                        dc_digest_t s_dg = {0, 0}, d_dg = {0, 0};
                        dirty_stack((uint8_t)(layout * 31 + op));
                        cr_assert_eq(dc_kern_patch_digest(dst, gs.p, n, w, op, pos, ev, count,
                                                          &s_dg, &d_dg),
                                     DC_OK);
                        cr_assert(memcmp(dst, want, bytes) == 0, "%s op %u n %zu w %u layout %d",
                                  dc_kern_isa(), op, n, w, layout);
                        cr_assert(dc_digest_eq(d_dg, wd), "%s op %u n %zu w %u layout %d: dst digest",
                                  dc_kern_isa(), op, n, w, layout);
                        cr_assert(dc_digest_eq(s_dg, sd), "%s op %u n %zu w %u layout %d: src digest",
                                  dc_kern_isa(), op, n, w, layout);
                        /* in place */
                        memcpy(gs.p, a, bytes);
                        dirty_stack((uint8_t)(layout * 17 + op));
                        cr_assert_eq(dc_kern_patch_digest(gs.p, gs.p, n, w, op, pos, ev, count,
                                                          &s_dg, &d_dg),
                                     DC_OK);
                        cr_assert(memcmp(gs.p, want, bytes) == 0, "%s in place op %u n %zu w %u",
                                  dc_kern_isa(), op, n, w);
                        cr_assert(dc_digest_eq(d_dg, wd) && dc_digest_eq(s_dg, sd),
                                  "%s in place op %u n %zu w %u: digests", dc_kern_isa(), op, n, w);
                        gbuf_free(&gs);
                        gbuf_free(&gd);
                    }
                    free(dense);
                }
                /* the codec: encode from guarded inputs, decode onto a
                 * guarded baseline into a guarded target */
                dc_codec_t *c;
                cr_assert_eq(dc_codec_create(bytes < DC_CODEC_MIN_CHUNK ? DC_CODEC_MIN_CHUNK : bytes, &c),
                             DC_OK);
                size_t pcap = dc_codec_payload_bound(bytes);
                gbuf_t ga = gbuf_new(bytes, 0, 0x21), gb = gbuf_new(bytes, 0, 0x12);
                gbuf_t gt = gbuf_new(bytes, 0, 0x44);
                uint8_t *pay = malloc(pcap);
                cr_assert(pay);
                memcpy(ga.p, a, bytes);
                memcpy(gb.p, b, bytes);
                size_t plen = 0;
                uint16_t enc = 0;
                dc_digest_t adg, bdg, tdg;
                dirty_stack(0x6B);
                cr_assert_eq(dc_codec_encode_digest(c, ga.p, gb.p, n, w, pay, pcap, &plen, &enc,
                                                    NULL, &adg, &bdg),
                             DC_OK);
                cr_assert(dc_digest_eq(adg, ref_dg(a, bytes)) && dc_digest_eq(bdg, ref_dg(b, bytes)),
                          "%s codec n %zu w %u: encode digests", dc_kern_isa(), n, w);
                /* the payload is exact: the same inputs elsewhere, other
                 * poison, give the same bytes */
                uint8_t *blk_a, *blk_b, *pay2 = malloc(pcap);
                cr_assert(pay2);
                const uint8_t *pa = poisoned_copy(a, bytes, 24, 500, 0x0F, &blk_a);
                const uint8_t *pb = poisoned_copy(b, bytes, 7, 500, 0xF0, &blk_b);
                size_t plen2 = 0;
                uint16_t enc2 = 0;
                dirty_stack(0xB6);
                cr_assert_eq(dc_codec_encode_digest(c, pa, pb, n, w, pay2, pcap, &plen2, &enc2,
                                                    NULL, &adg, &bdg),
                             DC_OK);
                cr_assert(plen2 == plen && enc2 == enc && memcmp(pay, pay2, plen) == 0,
                          "%s codec n %zu w %u: payload depends on bytes outside the inputs",
                          dc_kern_isa(), n, w);
                /* decode from a guarded copy of the payload */
                gbuf_t gp = gbuf_new(plen, 0, 0x99);
                memcpy(gp.p, pay, plen);
                dirty_stack(0x5C);
                cr_assert_eq(dc_codec_decode_digest(c, enc, gp.p, plen, ga.p, gt.p, n, w, NULL,
                                                    &tdg),
                             DC_OK, "%s codec n %zu w %u: decode", dc_kern_isa(), n, w);
                cr_assert(memcmp(gt.p, b, bytes) == 0, "%s codec n %zu w %u: round trip",
                          dc_kern_isa(), n, w);
                cr_assert(dc_digest_eq(tdg, ref_dg(b, bytes)), "%s codec n %zu w %u: target digest",
                          dc_kern_isa(), n, w);
                gbuf_free(&gp);
                gbuf_free(&ga);
                gbuf_free(&gb);
                gbuf_free(&gt);
                free(blk_a), free(blk_b), free(pay), free(pay2);
                dc_codec_free(c);
                free(a), free(b), free(want), free(pos), free(vals);
            }
    }
}

/* ---- digests, xor_dense, crc ---------------------------------------------- */

Test(poison, digests_xor_and_crc_read_only_their_inputs)
{
    for (size_t ii = 0; ii < 3; ii++) {
        if (!use_isa(ISAS[ii]))
            continue;
        for (size_t li = 0; li < NLENS; li++)
            for (size_t d = 0; d < 3; d++) {
                size_t len = LENS[li] + d - 1;
                uint8_t *src = malloc(len), *x = malloc(len);
                cr_assert(src && x);
                for (size_t i = 0; i < len; i++)
                    src[i] = (uint8_t)rnd(), x[i] = (uint8_t)rnd();
                dc_digest_t want = ref_dg(src, len);
                uint32_t crc = dc_crc32c_sw(0, src, len);
                for (int head = 0; head < 2; head++) {
                    gbuf_t g = gbuf_new(len, head, 0x7E), gx = gbuf_new(len, head, 0xE7);
                    memcpy(g.p, src, len);
                    memcpy(gx.p, x, len);
                    dirty_stack((uint8_t)(li + head));
                    cr_assert(dc_digest_eq(dc_digest128(g.p, len), want), "%s len %zu",
                              dc_kern_isa(), len);
                    dc_span_digest_t s;
                    dc_span_digest_init(&s, g.p, len);
                    dc_span_digest_advance(&s, len / 2);
                    cr_assert(dc_digest_eq(dc_span_digest_final(&s), want), "%s span len %zu",
                              dc_kern_isa(), len);
                    cr_assert_eq(dc_crc32c(0, g.p, len), crc, "crc len %zu", len);
                    dc_kern_xor_dense(gx.p, g.p, len);
                    for (size_t i = 0; i < len; i++)
                        cr_assert_eq(gx.p[i], (uint8_t)(x[i] ^ src[i]), "%s xor len %zu at %zu",
                                     dc_kern_isa(), len, i);
                    gbuf_free(&g);
                    gbuf_free(&gx);
                }
                free(src), free(x);
            }
    }
}
