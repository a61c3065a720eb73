/*
 * test_emu_ctx.c - ctx-sparse payloads (kernels/ctx.h, the default codec
 * model) decoded and applied on the device (kern_cuda.h dc_kern_cuda_ctx_*)
 * byte-compared with the CPU's dc_ctx_decode, on the emulated CUDA runtime
 * (cuda_emu_rt.h: device memory host code must not touch): random chunks
 * for w = 1, 2, 4, 8, K = 1..8 classes, each values mode (XOR words,
 * steps, new words), Golomb and rANS gaps positions; then every truncation
 * and many bit flips of real payloads, where the device must give the
 * CPU's verdict and leave the chunk untouched when it refuses.
 *
 * DELTACAST_TEST_REAL_CUDA=1 (perf/gpu-check.sh): the same tests on the
 * GPU's runtime when one is usable (the first line of stderr says which).
 */
#include <criterion/criterion.h>

#include "kernels/codec.h"
#include "kernels/ctx.h"
#include "kernels/entropy.h"
#include "kernels/kern_cuda.h"

#include "cuda_emu_rt.h"
#include "emu_ctx_change.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void setup(void)
{
    const char *r = getenv("DELTACAST_TEST_REAL_CUDA");
    int real = r && strcmp(r, "1") == 0 && dc_kern_cuda_available();
    if (!real)
        dc_emu_install();
    fprintf(stderr, "emu_ctx: %s CUDA runtime\n", real ? "the GPU's" : "the emulated");
}
TestSuite(emu_ctx, .init = setup);

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static uint64_t ld(const uint8_t *p, unsigned w)
{
    uint64_t v = 0;
    for (unsigned b = 0; b < w; b++)
        v |= (uint64_t)p[b] << (8 * b);
    return v;
}

static void st(uint8_t *p, unsigned w, uint64_t v)
{
    for (unsigned b = 0; b < w; b++)
        p[b] = (uint8_t)(v >> (8 * b));
}

typedef struct {
    size_t n;
    unsigned w;
    uint8_t *base, *xorv, *payload;
    uint32_t *pos;
    size_t count, len, cap;
    unsigned vm;
    /* CPU and device results */
    dc_ctx_t *cx;
    dc_ent_scratch_t *ent;
    uint32_t *cpos, *gpos;
    uint8_t *cxor, *gxor, *gchunk;
    /* device */
    dc_kern_cuda_ctx_t *kx;
    uint8_t *dchunk, *dxor;
    uint32_t *dpos;
} case_t;

/* A base of w-byte words with magnitudes spread over many buckets; changes
 * more likely on small magnitudes (as optimizer steps); values per pattern. */
static void make_case(case_t *t, size_t n, unsigned w, unsigned permille, int pat, unsigned kmax,
                      unsigned posm)
{
    memset(t, 0, sizeof(*t));
    t->n = n;
    t->w = w;
    t->base = malloc(n * w);
    t->xorv = malloc(n * w);
    t->pos = malloc(n * sizeof(uint32_t));
    cr_assert(t->base && t->xorv && t->pos);
    unsigned bits = 8 * w;
    uint64_t mask = w == 8 ? ~0ull : (1ull << bits) - 1;
    /* the magnitude bucket (ctx.h: the magnitude's top bits, as a
     * float's exponent) uniform, the rest random */
    unsigned S = w == 1 ? 0 : w == 2 ? 7 : w == 4 ? 23 : 55, B = w == 1 ? 128 : 256;
    for (size_t i = 0; i < n; i++) {
        uint64_t bk = rnd() % B, low = S ? rnd() & ((1ull << S) - 1) : 0;
        uint64_t sign = (rnd() & 1) << (bits - 1);
        st(t->base + i * w, w, (sign | (bk << S) | low) & mask);
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t b = ld(t->base + i * w, w);
        uint64_t bk = (b & ((1ull << (bits - 1)) - 1)) >> S;
        /* small magnitudes change more often, 1x to 32x (so that the
         * encoder's model splits into several classes) */
        unsigned p = (permille / 4) << ((B - 1 - bk) * 6 / B);
        if (p > 900)
            p = 900;
        if (rnd() % 1000 >= p)
            continue;
        uint64_t x = emu_ctx_change(b, w, pat, rnd);
        t->pos[t->count] = (uint32_t)i;
        st(t->xorv + t->count * w, w, x);
        t->count++;
    }
    cr_assert_eq(dc_ctx_create(n * w, &t->cx), DC_OK);
    cr_assert_eq(dc_ent_scratch_create(n * w, &t->ent), DC_OK);
    t->cap = dc_ctx_bound(t->count, n, w) + 64;
    t->payload = malloc(t->cap);
    cr_assert(t->payload);
    unsigned save_k = dc_ctx_max_classes, save_p = dc_codec_pos_method;
    dc_ctx_max_classes = kmax;
    dc_codec_pos_method = posm;
    cr_assert_eq(dc_ctx_encode(t->cx, t->ent, DC_CODEC_LAYOUT_SIMD, t->base, n, w, t->pos,
                               t->xorv, t->count, t->payload, t->cap, &t->len, &t->vm, NULL),
                 DC_OK, "%s", dc_last_error());
    dc_ctx_max_classes = save_k;
    dc_codec_pos_method = save_p;
    t->cpos = malloc(n * sizeof(uint32_t) + 16);
    t->gpos = malloc(n * sizeof(uint32_t) + 16);
    t->cxor = malloc(n * w + 16);
    t->gxor = malloc(n * w + 16);
    t->gchunk = malloc(n * w + 16);
    cr_assert(t->cpos && t->gpos && t->cxor && t->gxor && t->gchunk);
    cr_assert_eq(dc_kern_cuda_ctx_create(n * w, &t->kx), DC_OK);
    cr_assert_eq(dc_kern_cuda_malloc((void **)&t->dchunk, n * w + 16), DC_OK);
    cr_assert_eq(dc_kern_cuda_malloc((void **)&t->dpos, n * sizeof(uint32_t) + 16), DC_OK);
    cr_assert_eq(dc_kern_cuda_malloc((void **)&t->dxor, n * w + 16), DC_OK);
}

static void free_case(case_t *t)
{
    free(t->base);
    free(t->xorv);
    free(t->pos);
    free(t->payload);
    free(t->cpos);
    free(t->gpos);
    free(t->cxor);
    free(t->gxor);
    free(t->gchunk);
    dc_ctx_free(t->cx);
    dc_ent_scratch_free(t->ent);
    dc_kern_cuda_ctx_free(t->kx);
    dc_kern_cuda_free(t->dchunk);
    dc_kern_cuda_free(t->dpos);
    dc_kern_cuda_free(t->dxor);
}

/* The device against the CPU on payload p (len bytes): same verdict; when
 * both accept, the same positions and XOR words and the chunk patched; when
 * they refuse, the device chunk untouched.  Returns 1 when both accepted. */
static int compare(case_t *t, const uint8_t *p, size_t len, const char *what,
                   dc_kern_cuda_ctx_info_t *info)
{
    size_t n = t->n, cc = 0;
    unsigned w = t->w;
    dc_status_t cs = dc_ctx_decode(t->cx, t->ent, t->vm, p, len, t->base, n, w, t->cpos,
                                   t->cxor, &cc, NULL);
    cr_assert_eq(dc_kern_cuda_h2d(t->dchunk, t->base, n * w), DC_OK);
    dc_kern_cuda_ctx_hdr_t h;
    dc_status_t gs = dc_kern_cuda_ctx_parse(p, len, n, w, &h);
    if (gs == DC_OK)
        gs = dc_kern_cuda_ctx_run(t->kx, &h, t->vm, p, t->dchunk, n, w, 1, t->dpos, t->dxor,
                                  info);
    cr_assert_eq(gs == DC_OK, cs == DC_OK, "%s (n %zu w %u, %zu bytes): cpu %d, device %d (%s)",
                 what, n, w, len, cs, gs, dc_last_error());
    cr_assert_eq(dc_kern_cuda_d2h(t->gchunk, t->dchunk, n * w), DC_OK);
    if (gs != DC_OK) {
        cr_assert_eq(gs, DC_ERR_FORMAT, "%s: device status %d (%s)", what, gs, dc_last_error());
        cr_assert(memcmp(t->gchunk, t->base, n * w) == 0, "%s: refused, but the chunk changed",
                  what);
        return 0;
    }
    cr_assert_eq(h.total, cc, "%s: device %zu changes, cpu %zu", what, h.total, cc);
    if (cc) {
        cr_assert_eq(dc_kern_cuda_d2h(t->gpos, t->dpos, cc * sizeof(uint32_t)), DC_OK);
        cr_assert_eq(dc_kern_cuda_d2h(t->gxor, t->dxor, cc * w), DC_OK);
    }
    cr_assert(memcmp(t->gpos, t->cpos, cc * sizeof(uint32_t)) == 0,
              "%s: device positions differ from the CPU's", what);
    cr_assert(memcmp(t->gxor, t->cxor, cc * w) == 0, "%s: device XOR words differ", what);
    /* the chunk: the base with the XOR words applied */
    uint8_t *want = malloc(n * w + 1);
    cr_assert(want);
    memcpy(want, t->base, n * w);
    for (size_t k = 0; k < cc; k++)
        for (unsigned b = 0; b < w; b++)
            want[(size_t)t->cpos[k] * w + b] ^= t->cxor[k * w + b];
    cr_assert(memcmp(t->gchunk, want, n * w) == 0, "%s: device chunk differs", what);
    free(want);
    return 1;
}

/* the header's K, values mode, gaps mask */
static void header_of(const case_t *t, unsigned *K, unsigned *mode, unsigned *gmask)
{
    dc_kern_cuda_ctx_hdr_t h;
    cr_assert_eq(dc_kern_cuda_ctx_parse(t->payload, t->len, t->n, t->w, &h), DC_OK);
    *K = h.spec.K;
    *mode = h.spec.mode;
    *gmask = h.gmask;
}

Test(emu_ctx, random_chunks_every_width_classes_mode)
{
    static const unsigned ws[] = {1, 2, 4, 8};
    unsigned seen_mode[3] = {0}, seen_k[9] = {0}, seen_golomb = 0;
    for (unsigned wi = 0; wi < 4; wi++) {
        for (unsigned kmax = 1; kmax <= 8; kmax++) {
            for (int pat = EMU_PAT_XOR; pat <= EMU_PAT_NEW; pat++) {
                case_t t;
                unsigned w = ws[wi];
                size_t n = 6000 + (size_t)(rnd() % 4000);
                make_case(&t, n, w, 40 + (unsigned)(rnd() % 60), pat, kmax, 0);
                unsigned K, mode, gm;
                header_of(&t, &K, &mode, &gm);
                char what[96];
                snprintf(what, sizeof(what), "w %u kmax %u pattern %d (K %u mode %u)", w, kmax,
                         pat, K, mode);
                dc_kern_cuda_ctx_info_t info;
                cr_assert(compare(&t, t.payload, t.len, what, &info), "%s: refused", what);
                cr_assert_eq(info.host_classes, 0u, "%s: Golomb classes decoded on the host",
                             what);
                seen_mode[mode]++;
                seen_k[K]++;
                seen_golomb += info.dev_classes;
                free_case(&t);
            }
        }
    }
    for (unsigned m = 0; m < 3; m++)
        cr_assert(seen_mode[m] > 0, "values mode %u never chosen", m);
    unsigned kinds = 0;
    for (unsigned k = 1; k <= 8; k++)
        kinds += seen_k[k] > 0;
    cr_assert(kinds >= 5 && seen_k[1] && seen_k[4], "too few class counts exercised (%u: 1 %u, "
              "2 %u, 3 %u, 4 %u, 5 %u, 6 %u, 7 %u, 8 %u)", kinds, seen_k[1], seen_k[2], seen_k[3],
              seen_k[4], seen_k[5], seen_k[6], seen_k[7], seen_k[8]);
    cr_assert(seen_golomb > 0);
}

Test(emu_ctx, gaps_positions_and_larger_chunks)
{
    /* rANS gaps classes (decoded on the host, their ranks sent) and chunks
     * of several tiles; then the same chunk with Golomb */
    for (unsigned posm = 0; posm < 2; posm++) {
        for (unsigned wi = 0; wi < 2; wi++) {
            case_t t;
            unsigned w = wi ? 4 : 2;
            make_case(&t, 40000 + (size_t)(rnd() % 5000), w, 30, EMU_PAT_STEP, 4,
                      posm ? DC_ENT_GAPS : DC_ENT_GOLOMB);
            unsigned K, mode, gm;
            header_of(&t, &K, &mode, &gm);
            cr_assert(K > 1, "expected several classes");
            cr_assert_eq(gm != 0, posm == 1, "gaps mask 0x%x", gm);
            dc_kern_cuda_ctx_info_t info;
            cr_assert(compare(&t, t.payload, t.len, posm ? "gaps" : "golomb", &info));
            cr_assert(info.dev_classes == K && info.host_classes == 0,
                      "%u classes, %u decoded on the device, %u on the host", K,
                      info.dev_classes, info.host_classes);
            if (posm)
                cr_assert(info.dev_gaps_classes > 0, "no gaps class decoded on the device");
            free_case(&t);
        }
    }
}

/* every truncation and many bit flips of real payloads */
static void hostile(unsigned w, unsigned kmax, int pat, unsigned posm, unsigned flips)
{
    case_t t;
    make_case(&t, 1500, w, 50, pat, kmax, posm);
    uint8_t *p = malloc(t.len + 1);
    cr_assert(p);
    unsigned acc = 0, ref = 0;
    for (size_t l = 0; l < t.len; l++) {
        char what[64];
        snprintf(what, sizeof(what), "truncated to %zu of %zu", l, t.len);
        memcpy(p, t.payload, l);
        if (compare(&t, p, l, what, NULL))
            acc++;
        else
            ref++;
    }
    for (unsigned f = 0; f < flips; f++) {
        char what[64];
        memcpy(p, t.payload, t.len);
        size_t at = (size_t)(rnd() % t.len);
        unsigned bit = (unsigned)(rnd() % 8);
        /* the header and class counts more often: they steer the decode */
        if (f % 3 == 0)
            at = (size_t)(rnd() % (t.len < 24 ? t.len : 24));
        p[at] ^= (uint8_t)(1u << bit);
        snprintf(what, sizeof(what), "bit %u of byte %zu flipped", bit, at);
        if (compare(&t, p, t.len, what, NULL))
            acc++;
        else
            ref++;
    }
    cr_assert(ref > 0 && acc > 0, "hostile payloads (%zu bytes): %u accepted, %u refused",
              t.len, acc, ref);
    fprintf(stderr, "emu_ctx: w %u K <= %u: %zu-byte payload, %zu truncations and %u flips: %u "
            "accepted, %u refused, as the CPU\n", w, kmax, t.len, t.len, flips, acc, ref);
    free(p);
    free_case(&t);
}

Test(emu_ctx, hostile_payloads_get_the_cpu_verdict)
{
    hostile(2, 4, EMU_PAT_STEP, 0, 200);
    hostile(4, 8, EMU_PAT_XOR, 0, 120);
    hostile(1, 3, EMU_PAT_NEW, 0, 100);
    hostile(8, 2, EMU_PAT_STEP, 0, 100);
    hostile(2, 4, EMU_PAT_STEP, DC_ENT_GAPS, 100); /* gaps classes: decoded on the host */
}

Test(emu_ctx, rank_past_population_is_refused_untouched)
{
    /* a class count raised while its stream is re-encoded for more ranks
     * than the class holds: Golomb accepts the ranks (< n), the class's
     * population check must refuse them, as the CPU's merge does */
    case_t t;
    make_case(&t, 4000, 2, 60, EMU_PAT_XOR, 4, 0);
    unsigned K, mode, gm;
    header_of(&t, &K, &mode, &gm);
    cr_assert(K >= 2);
    /* a payload of K classes where class 0 names ranks up to n - 1 */
    dc_kern_cuda_ctx_hdr_t h;
    cr_assert_eq(dc_kern_cuda_ctx_parse(t.payload, t.len, t.n, t.w, &h), DC_OK);
    size_t c0 = h.spec.off[1];
    cr_assert(c0 >= 2, "class 0 too small");
    uint32_t *r = malloc(c0 * sizeof(uint32_t));
    for (size_t k = 0; k < c0; k++)
        r[k] = (uint32_t)(t.n - c0 + k); /* past class 0's population (< n) */
    uint8_t *q = malloc(t.cap + 64);
    size_t o = h.pofs[0];
    /* header through class 0's length varint rebuilt */
    size_t plen;
    uint8_t *stream = malloc(dc_ent_pos_bound(c0, t.n) + 16);
    cr_assert_eq(dc_ent_pos_encode(r, c0, t.n, stream, dc_ent_pos_bound(c0, t.n) + 16, &plen),
                 DC_OK);
    /* find where class 0's length varint starts: just before pofs[0] */
    size_t vstart = o - 1;
    while (vstart > 0 && (t.payload[vstart - 1] & 0x80))
        vstart--;
    memcpy(q, t.payload, vstart);
    size_t qo = vstart + dc_ent_put_varint(q + vstart, plen);
    memcpy(q + qo, stream, plen);
    qo += plen;
    size_t rest = t.len - (h.pofs[0] + h.plen[0]);
    memcpy(q + qo, t.payload + h.pofs[0] + h.plen[0], rest);
    qo += rest;
    cr_assert_eq(compare(&t, q, qo, "class 0 ranks past its population", NULL), 0);
    cr_assert(strstr(dc_last_error(), "past its population") != NULL, "message '%s'",
              dc_last_error());
    free(r);
    free(q);
    free(stream);
    free_case(&t);
}

/* rANS gaps positions on the device (dc_kern_cuda_gaps_decode) against
 * dc_ent_gaps_decode: random positions with long gaps (escapes) and
 * without, then truncations and bit flips (same verdict, same positions) */
static void gaps_case(size_t n, size_t count, unsigned long_every, unsigned flips)
{
    uint32_t *pos = malloc(count * sizeof(uint32_t) + 4), *cpu = malloc(count * 4 + 4);
    uint32_t *gpu = malloc(count * 4 + 4), *dpos;
    cr_assert(pos && cpu && gpu);
    /* positions: mostly geometric gaps, every long_every-th a long one */
    size_t k = 0;
    /* a long gap's quotient (~ 2000 x 4) is past the largest escape
     * threshold (4095): escaped */
    uint64_t at = 0, mean = n / (count * (long_every ? 4 + 2000 / long_every : 2) + 1);
    while (k < count) {
        uint64_t g = (uint64_t)(rnd() % (2 * mean + 1));
        if (long_every && rnd() % long_every == 0)
            g += mean * 2000;
        at += g;
        if (at >= n)
            break;
        pos[k++] = (uint32_t)at;
        at++;
    }
    count = k;
    cr_assert(count > 100);
    dc_ent_scratch_t *ent;
    cr_assert_eq(dc_ent_scratch_create(count * 8 + 1024, &ent), DC_OK);
    size_t cap = dc_ent_gaps_bound(count), len;
    uint8_t *src = malloc(cap), *p = malloc(cap);
    cr_assert(src && p);
    cr_assert_eq(dc_ent_gaps_encode(ent, pos, count, n, src, cap, &len), DC_OK, "%s",
                 dc_last_error());
    dc_kern_cuda_ctx_t *kx;
    cr_assert_eq(dc_kern_cuda_ctx_create(n, &kx), DC_OK);
    cr_assert_eq(dc_kern_cuda_malloc((void **)&dpos, count * 4 + 16), DC_OK);
    unsigned acc = 0, ref = 0;
    for (unsigned f = 0; f <= len + flips; f++) {
        size_t l = len;
        memcpy(p, src, len);
        if (f > 0 && f <= len) {
            l = f - 1; /* truncated */
        } else if (f > len) {
            size_t b = (size_t)(rnd() % len);
            p[b] ^= (uint8_t)(1u << (rnd() % 8));
        }
        dc_status_t cs = dc_ent_gaps_decode(ent, p, l, count, n, cpu);
        uint64_t sent = 0;
        dc_status_t gs = dc_kern_cuda_gaps_decode(kx, p, l, count, n, dpos, &sent);
        cr_assert_eq(gs == DC_OK, cs == DC_OK, "gaps (%zu positions, %zu of %zu bytes, case %u): "
                     "cpu %d, device %d (%s)", count, l, len, f, cs, gs, dc_last_error());
        if (gs != DC_OK) {
            cr_assert_eq(gs, DC_ERR_FORMAT, "%s", dc_last_error());
            ref++;
            continue;
        }
        acc++;
        cr_assert_eq(dc_kern_cuda_d2h(gpu, dpos, count * 4), DC_OK);
        cr_assert(memcmp(cpu, gpu, count * 4) == 0, "gaps case %u: device positions differ", f);
        if (f == 0)
            cr_assert(memcmp(cpu, pos, count * 4) == 0);
    }
    cr_assert(acc > 0 && ref > 0);
    fprintf(stderr, "emu_ctx: gaps, %zu positions in %zu, %zu bytes: %u accepted, %u refused, "
            "as the CPU\n", count, n, len, acc, ref);
    dc_kern_cuda_free(dpos);
    dc_kern_cuda_ctx_free(kx);
    dc_ent_scratch_free(ent);
    free(pos);
    free(cpu);
    free(gpu);
    free(src);
    free(p);
}

Test(emu_ctx, gaps_positions_decoded_on_the_device)
{
    gaps_case(200000, 5000, 0, 60);    /* no escapes */
    gaps_case(4000000, 8000, 1500, 60); /* a few escapes (long gaps: < 1/1024 of them) */
    gaps_case(60000, 20000, 0, 30);    /* dense: b = 0 */
}
