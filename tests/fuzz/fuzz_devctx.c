/*
 * fuzz_devctx.c - fuzz target for the device receiver's decoder: a
 * DC_ENC_CTX payload (the default codec model, kernels/ctx.h) decoded and
 * applied on the device (kern_cuda.h dc_kern_cuda_ctx_parse and
 * dc_kern_cuda_ctx_run, on the emulated CUDA runtime of
 * tests/emu/cuda_emu_rt.h: the kernels run on the CPU and device memory is
 * an arena host code must never touch) against the CPU's dc_ctx_decode.
 *
 * Input: byte 0: bits 0-1 the word width w = 1 << (b & 3), bits 2-3 the
 * values method (the frame encoding's: raw, zstd, rANS, planes); bytes 1-2
 * (little-endian) n - 1 mod 6000, the chunk's elements; the rest is the
 * payload, decoded against a fixed baseline of n words.
 * Oracle: no crash, no sanitizer report, no host access to device memory;
 * the device gives the CPU's verdict; when both refuse, the device's
 * status is DC_ERR_FORMAT and its chunk is untouched; when both accept, the
 * same positions and XOR words, and the device chunk is the baseline with
 * them applied.
 *
 * Builds as the other targets (tests/fuzz/meson.build), with the emulated
 * runtime (a C++ library): fuzz_devctx_replay (-DDC_FUZZ_REPLAY) builds
 * seed payloads in-process with the CPU encoder (every width, 1..8
 * classes, each values pattern, Golomb and rANS gaps positions; each must
 * be accepted), runs any corpus files given and N deterministic mutations
 * of each (--mutations=N); `--write-corpus=DIR` writes the seeds as files.
 * fuzz_devctx is the libFuzzer binary.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DC_FUZZ_NAME "fuzz_devctx"
#include "fuzz.h"

#include "kernels/codec.h"
#include "kernels/ctx.h"
#include "kernels/entropy.h"
#include "kernels/kern_cuda.h"

#include "cuda_emu_rt.h"
#include "emu_ctx_change.h"

#define NMAX 6000u

/* the fixed baseline: words whose magnitude buckets spread (so that the
 * encoder's model splits into classes), from a fixed stream */
static uint8_t g_base[NMAX * 8];
static struct {
    dc_ctx_t *cx;
    dc_ent_scratch_t *ent;
    dc_kern_cuda_ctx_t *kx;
    uint32_t *cpos, *gpos;
    uint8_t *cxor, *gxor, *gchunk, *want;
    uint8_t *dchunk, *dxor;
    uint32_t *dpos;
} g;

static uint64_t base_rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void init(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    dc_fuzz_quiet();
    dc_emu_install();
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < NMAX; i++) {
        /* 8 bytes an element; a w-byte word is its low w bytes, whose top
         * byte (the bucket for w >= 2) is drawn over every value */
        uint64_t v = base_rng(&s);
        memcpy(g_base + i * 8, &v, 8);
    }
    CHECK(dc_ctx_create(NMAX * 8, &g.cx) == DC_OK);
    CHECK(dc_ent_scratch_create(NMAX * 8, &g.ent) == DC_OK);
    CHECK(dc_kern_cuda_ctx_create(NMAX * 8, &g.kx) == DC_OK);
    g.cpos = malloc(NMAX * sizeof(uint32_t) + 16);
    g.gpos = malloc(NMAX * sizeof(uint32_t) + 16);
    g.cxor = malloc(NMAX * 8 + 16);
    g.gxor = malloc(NMAX * 8 + 16);
    g.gchunk = malloc(NMAX * 8 + 16);
    g.want = malloc(NMAX * 8 + 16);
    CHECK(g.cpos && g.gpos && g.cxor && g.gxor && g.gchunk && g.want);
    CHECK(dc_kern_cuda_malloc((void **)&g.dchunk, NMAX * 8 + 16) == DC_OK);
    CHECK(dc_kern_cuda_malloc((void **)&g.dpos, NMAX * sizeof(uint32_t) + 16) == DC_OK);
    CHECK(dc_kern_cuda_malloc((void **)&g.dxor, NMAX * 8 + 16) == DC_OK);
}

/* the baseline of n words of w bytes (the fixed words, packed) */
static const uint8_t *base_of(size_t n, unsigned w)
{
    static uint8_t packed[NMAX * 8];
    for (size_t i = 0; i < n; i++)
        memcpy(packed + i * w, g_base + i * 8 + (8 - w), w);
    return packed;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    init();
    if (size < 3)
        return 0;
    unsigned w = 1u << (data[0] & 3), vm = (data[0] >> 2) & 3;
    size_t n = 1 + (size_t)dc_load_le16(data + 1) % NMAX;
    const uint8_t *p = data + 3, *base = base_of(n, w);
    size_t len = size - 3, cc = 0;
    dc_status_t cs = dc_ctx_decode(g.cx, g.ent, vm, p, len, base, n, w, g.cpos, g.cxor, &cc,
                                   NULL);
    CHECK(cs == DC_OK || cs == DC_ERR_FORMAT);
    if (cs != DC_OK)
        failed_cleanly(cs);
    CHECK(dc_kern_cuda_h2d(g.dchunk, base, n * w) == DC_OK);
    dc_kern_cuda_ctx_hdr_t h;
    dc_status_t gs = dc_kern_cuda_ctx_parse(p, len, n, w, &h);
    if (gs == DC_OK)
        gs = dc_kern_cuda_ctx_run(g.kx, &h, vm, p, g.dchunk, n, w, 1, g.dpos, g.dxor, NULL);
    if ((gs == DC_OK) != (cs == DC_OK))
        fprintf(stderr, DC_FUZZ_NAME ": n %zu w %u vm %u, %zu bytes: cpu %d, device %d (%s)\n",
                n, w, vm, len, cs, gs, dc_last_error());
    CHECK((gs == DC_OK) == (cs == DC_OK));
    CHECK(dc_kern_cuda_d2h(g.gchunk, g.dchunk, n * w) == DC_OK);
    if (gs != DC_OK) {
        CHECK(gs == DC_ERR_FORMAT);
        failed_cleanly(gs);
        CHECK(memcmp(g.gchunk, base, n * w) == 0); /* refused: untouched */
        return 0;
    }
    fuzz_accepted++;
    CHECK(h.total == cc);
    if (cc) {
        CHECK(dc_kern_cuda_d2h(g.gpos, g.dpos, cc * sizeof(uint32_t)) == DC_OK);
        CHECK(dc_kern_cuda_d2h(g.gxor, g.dxor, cc * w) == DC_OK);
        CHECK(memcmp(g.gpos, g.cpos, cc * sizeof(uint32_t)) == 0);
        CHECK(memcmp(g.gxor, g.cxor, cc * w) == 0);
    }
    memcpy(g.want, base, n * w);
    for (size_t k = 0; k < cc; k++) {
        CHECK(g.cpos[k] < n && (k == 0 || g.cpos[k] > g.cpos[k - 1]));
        for (unsigned b = 0; b < w; b++)
            g.want[(size_t)g.cpos[k] * w + b] ^= g.cxor[k * w + b];
    }
    CHECK(memcmp(g.gchunk, g.want, n * w) == 0);
    return 0;
}

#ifdef DC_FUZZ_REPLAY
#define DC_FUZZ_SEED 0x61c8864680b583ebULL
#include "replay.h"

/* One deterministic mutation of the payload (the first 3 bytes, width,
 * values method and n, are kept): the message targets' byte mutations. */
static size_t mutate(uint8_t *b, size_t len, size_t cap)
{
    if (len < 4)
        return len;
    size_t at = 3 + (size_t)(rng() % (len - 3));
    static const uint32_t edge[] = {0, 1, 0x7f, 0x80, 0xff, 0xffff, 0xffffffffu};
    return dc_fuzz_mutate_at(b, len, cap, at, (unsigned)(rng() % 8), 8, edge,
                             DC_ARRAY_SIZE(edge));
}

/* A seed: n words of width w, about permille/1000 of them changed (small
 * magnitudes more often: several classes), values by pattern (EMU_PAT_*:
 * emu_ctx_change.h), at most kmax classes, positions method posm (0: the
 * coder's choice). */
static uint8_t *seed(size_t n, unsigned w, unsigned permille, int pat, unsigned kmax,
                     unsigned posm, size_t *seed_len)
{
    const uint8_t *base = base_of(n, w);
    uint32_t *pos = malloc(n * sizeof(uint32_t));
    uint8_t *xv = malloc(n * w);
    CHECK(pos && xv);
    size_t count = 0;
    unsigned bits = 8 * w;
    for (size_t i = 0; i < n; i++) {
        uint64_t b = 0;
        memcpy(&b, base + i * w, w);
        unsigned top = (unsigned)((b >> (bits - 8)) & 0x7f);
        unsigned pr = (permille / 4) << ((127 - top) * 6 / 128);
        if (rng() % 1000 >= (pr > 900 ? 900 : pr))
            continue;
        uint64_t x = emu_ctx_change(b, w, pat, rng);
        pos[count] = (uint32_t)i;
        memcpy(xv + count * w, &x, w);
        count++;
    }
    CHECK(count > 0);
    size_t cap = dc_ctx_bound(count, n, w) + 64, len = 0;
    uint8_t *out = malloc(cap + 3);
    CHECK(out);
    unsigned vm = 0, save_k = dc_ctx_max_classes, save_p = dc_codec_pos_method;
    dc_ctx_max_classes = kmax;
    dc_codec_pos_method = posm;
    dc_status_t st = dc_ctx_encode(g.cx, g.ent, DC_CODEC_LAYOUT_SIMD, base, n, w, pos, xv, count,
                                   out + 3, cap, &len, &vm, NULL);
    dc_ctx_max_classes = save_k;
    dc_codec_pos_method = save_p;
    CHECK(st == DC_OK && vm < 4);
    out[0] = (uint8_t)((w == 1 ? 0 : w == 2 ? 1 : w == 4 ? 2 : 3) | vm << 2);
    dc_store_le16(out + 1, (uint16_t)(n - 1));
    free(pos);
    free(xv);
    *seed_len = len + 3;
    return out;
}

int main(int argc, char **argv)
{
    init();
    unsigned mutations = dc_fuzz_mutations(argc, argv);
    const char *write_dir = NULL;
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], "--write-corpus=", 15) == 0)
            write_dir = argv[i] + 15;
    size_t ns = 0;
    for (unsigned wi = 0; wi < 4; wi++)
        for (int pat = EMU_PAT_XOR; pat <= EMU_PAT_NEW; pat++)
            for (unsigned posm = 0; posm <= DC_ENT_GAPS; posm += DC_ENT_GAPS) {
                unsigned w = 1u << wi, kmax = 1 + (unsigned)(rng() % 8);
                size_t n = 2000 + (size_t)(rng() % 4000), len;
                uint8_t *s = seed(n, w, 40 + (unsigned)(rng() % 60), pat, kmax, posm, &len);
                if (write_dir) {
                    char path[1024];
                    snprintf(path, sizeof(path), "%s/seed%02zu", write_dir, ns);
                    FILE *f = fopen(path, "wb");
                    CHECK(f && fwrite(s, 1, len, f) == len);
                    fclose(f);
                }
                /* a seed is a real payload: accepted as it is */
                unsigned long before = fuzz_accepted;
                dc_fuzz_test_copy(s, len);
                CHECK(fuzz_accepted == before + 1);
                dc_fuzz_run(s, len, 64, mutations, 3, mutate);
                free(s);
                ns++;
            }
    size_t files;
    int rc = dc_fuzz_run_paths(argc, argv, 64, 3, mutate, &files);
    printf(DC_FUZZ_NAME "_replay: %zu seeds, %zu corpus files, %u mutations each, %lu "
           "accepted: ok\n", ns, files, mutations, fuzz_accepted);
    return rc;
}
#endif
